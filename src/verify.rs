//! Candidate verification: a candidate from any source becomes a duplicate only when one of the
//! rules here accepts it. Pure functions over two post sketches.

use serde::{Deserialize, Serialize};

use crate::types::Fingerprint;

/// Thresholds of the verification rules (the `[verify]` config section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// `verified` (every candidate must pass a rule below) or `simhash_only` (classic SimHash:
    /// any fingerprint within `index.max_distance` is a duplicate, no bigram path; for comparison
    /// runs, not production).
    pub mode: VerifyMode,
    /// Edit rule: minimum normalized edit similarity `1 - levenshtein / max_len` (characters).
    pub edit_similarity: f32,
    /// Edit rule: applies only when the longer normalized text has at least this many characters.
    /// Shorter texts only match exactly: in short posts one changed character usually changes the
    /// meaning (LCQMC hard negatives, "哈哈哈" vs "哈哈哈哈").
    pub edit_min_chars: usize,
    /// Weight of an ASCII letter or digit when the shorter text's length is compared with
    /// `containment_min_chars`: a Latin letter carries far less than a CJK character, so
    /// "harumahappybirthday" (19 letters, three words) is too short to stand for a longer post.
    pub ascii_char_weight: f32,
    /// Containment rule: the shorter text must have at least this many characters...
    pub containment_min_chars: usize,
    /// ...be at least this fraction of the longer one's length...
    pub containment_min_ratio: f32,
    /// ...and occur in the longer text as an exact substring (truncations, added prefixes/suffixes).
    pub containment: bool,
    /// SimHash rule: both posts need at least this many distinct tokens (short token bags give
    /// unstable fingerprints that collide, e.g. "嗯" = "嗯嗯嘴唇").
    pub simhash_min_tokens: usize,
    /// SimHash rule: the K of Zhou (2017), `Sim = 1/(H+1) + K * Dup`, Dup = token-set Jaccard.
    pub sim_k: f32,
    /// SimHash rule: a candidate is a duplicate when `Sim >= sim_threshold` (at least 1 + 0.2 K).
    pub sim_threshold: f32,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            mode: VerifyMode::Verified,
            edit_similarity: 0.85,
            edit_min_chars: 12,
            ascii_char_weight: 0.5,
            containment_min_chars: 11,
            containment_min_ratio: 0.6,
            containment: true,
            simhash_min_tokens: 8,
            sim_k: 4.0,
            sim_threshold: 3.4,
        }
    }
}

/// Whether candidates are verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifyMode {
    /// Candidates become duplicates only through a verification rule.
    Verified,
    /// Classic SimHash: Hamming distance alone decides (baseline for comparisons).
    SimhashOnly,
}

/// Which rule accepted a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Identical normalized text.
    Exact,
    /// Edit similarity at or above the threshold.
    Edit,
    /// One text is a long enough substring of the other.
    Containment,
    /// SimHash distance and token overlap (Zhou's Sim) above the threshold.
    Simhash,
}

impl Method {
    /// The label used in outputs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::Edit => "edit",
            Method::Containment => "containment",
            Method::Simhash => "simhash",
        }
    }
}

/// What verification needs of a post.
#[derive(Clone, Copy, Debug)]
pub struct Sketch<'a> {
    /// Normalized text as characters.
    pub chars: &'a [char],
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// Sorted, distinct 32-bit token hashes.
    pub tokens: &'a [u32],
}

/// An accepted match with the figures reported in duplicate events.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Match {
    /// The accepting rule.
    pub method: Method,
    /// Hamming distance of the fingerprints.
    pub distance: u32,
    /// Token-set Jaccard (Zhou's Dup).
    pub overlap: f32,
    /// Zhou's `Sim = 1/(H+1) + K * Dup`.
    pub similarity: f32,
    /// Normalized character similarity used for ranking candidates: 1.0 for exact, edit
    /// similarity for `edit`, length ratio for `containment`, overlap for `simhash`.
    pub score: f32,
}

/// Checks one candidate pair against every rule; the first rule that accepts wins, in the order
/// exact, edit, containment, simhash.
pub fn verify(a: &Sketch<'_>, b: &Sketch<'_>, cfg: &VerifyConfig) -> Option<Match> {
    let distance = a.fingerprint.hamming(b.fingerprint);
    let overlap = jaccard(a.tokens, b.tokens);
    let similarity = 1.0 / (distance as f32 + 1.0) + cfg.sim_k * overlap;
    let accept = |method, score| {
        Some(Match {
            method,
            distance,
            overlap,
            similarity,
            score,
        })
    };
    if a.text_hash == b.text_hash && a.chars == b.chars {
        return accept(Method::Exact, 1.0);
    }
    let (short, long) = if a.chars.len() <= b.chars.len() {
        (a.chars, b.chars)
    } else {
        (b.chars, a.chars)
    };
    if !short.is_empty() && long.len() >= cfg.edit_min_chars {
        let max_edits = ((1.0 - cfg.edit_similarity) * long.len() as f32 + 1e-4).floor() as usize;
        if let Some(d) = levenshtein_bounded(short, long, max_edits) {
            return accept(Method::Edit, 1.0 - d as f32 / long.len() as f32);
        }
    }
    if cfg.containment
        && effective_len(short, cfg) >= cfg.containment_min_chars as f32
        && short.len() as f32 >= cfg.containment_min_ratio * long.len() as f32
        && contains(long, short)
    {
        return accept(Method::Containment, short.len() as f32 / long.len() as f32);
    }
    if a.tokens.len() >= cfg.simhash_min_tokens
        && b.tokens.len() >= cfg.simhash_min_tokens
        && similarity >= cfg.sim_threshold
    {
        return accept(Method::Simhash, overlap);
    }
    None
}

/// The figures of an unverified SimHash match (`mode = "simhash_only"`).
pub fn unverified(a: &Sketch<'_>, b: &Sketch<'_>, cfg: &VerifyConfig) -> Match {
    let distance = a.fingerprint.hamming(b.fingerprint);
    let overlap = jaccard(a.tokens, b.tokens);
    let similarity = 1.0 / (distance as f32 + 1.0) + cfg.sim_k * overlap;
    Match {
        method: Method::Simhash,
        distance,
        overlap,
        similarity,
        score: 1.0 - distance as f32 / 64.0,
    }
}

/// Length for the containment gate: CJK and other characters count 1, ASCII letters and digits
/// `ascii_char_weight`.
pub fn effective_len(chars: &[char], cfg: &VerifyConfig) -> f32 {
    // Capped at 1 so the raw length bounds this one (the bigram index gates on raw length).
    let w = cfg.ascii_char_weight.clamp(0.0, 1.0);
    chars
        .iter()
        .map(|c| if c.is_ascii_alphanumeric() { w } else { 1.0 })
        .sum()
}

/// Jaccard similarity of two sorted, distinct slices.
pub fn jaccard(a: &[u32], b: &[u32]) -> f32 {
    if a.is_empty() && b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f32 / (a.len() + b.len() - inter) as f32
}

fn contains(long: &[char], short: &[char]) -> bool {
    long.windows(short.len()).any(|w| w == short)
}

/// Levenshtein distance if it is at most `max`, else `None`. Banded DP: O(len * (2 max + 1)).
pub fn levenshtein_bounded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    let (n, m) = (a.len(), b.len());
    if n.abs_diff(m) > max {
        return None;
    }
    const INF: usize = usize::MAX / 2;
    let mut prev = vec![INF; m + 1];
    let mut cur = vec![INF; m + 1];
    for (j, p) in prev.iter_mut().enumerate().take(max.min(m) + 1) {
        *p = j;
    }
    for i in 1..=n {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(m);
        cur.iter_mut().for_each(|c| *c = INF);
        if i <= max {
            cur[0] = i;
        }
        let mut row_min = cur[0];
        for j in lo..=hi {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            let v = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
            cur[j] = v;
            row_min = row_min.min(v);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[m] <= max).then_some(prev[m])
}

/// Unbounded Levenshtein distance (for reports and `explain`).
pub fn levenshtein(a: &[char], b: &[char]) -> usize {
    let max = a.len().max(b.len());
    levenshtein_bounded(a, b, max).unwrap_or(max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    fn sketch<'a>(c: &'a [char], toks: &'a [u32], fp: u64) -> Sketch<'a> {
        let s: String = c.iter().collect();
        Sketch {
            chars: c,
            text_hash: xxhash_rust::xxh3::xxh3_64(s.as_bytes()),
            fingerprint: Fingerprint(fp),
            tokens: toks,
        }
    }

    #[test]
    fn exact_match() {
        let a = chars("今天天气真不错");
        let m = verify(
            &sketch(&a, &[1, 2], 7),
            &sketch(&a, &[1, 2], 7),
            &VerifyConfig::default(),
        );
        assert_eq!(m.map(|m| m.method), Some(Method::Exact));
    }

    #[test]
    fn one_char_edit_of_a_long_post_matches_but_not_of_a_short_one() {
        let cfg = VerifyConfig::default();
        let a = chars("我愿意了别人不愿意了那就不好办了");
        let b = chars("我愿意了的别人不愿意了那就不好办了");
        assert_eq!(
            verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method),
            Some(Method::Edit)
        );
        let c = chars("大雁肉怎么吃");
        let d = chars("大雁肉怎么做");
        assert!(verify(&sketch(&c, &[], 0), &sketch(&d, &[], 0), &cfg).is_none());
    }

    #[test]
    fn truncation_matches_by_containment() {
        let cfg = VerifyConfig::default();
        let a = chars("任何事情做精致了做到极致都会相同效果");
        let b = chars("任何事情做精致了做到极致都");
        let m = verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method);
        assert_eq!(m, Some(Method::Containment));
    }

    #[test]
    fn simhash_rule_needs_tokens_and_overlap() {
        let cfg = VerifyConfig::default();
        let a = chars("甲乙");
        let b = chars("丙丁");
        let t1: Vec<u32> = (0..10).collect();
        let t2: Vec<u32> = (0..9).chain([99]).collect();
        let m = verify(&sketch(&a, &t1, 0b1), &sketch(&b, &t2, 0b11), &cfg);
        assert_eq!(m.map(|m| m.method), Some(Method::Simhash));
        let t3: Vec<u32> = (50..60).collect();
        assert!(verify(&sketch(&a, &t1, 0), &sketch(&b, &t3, 0), &cfg).is_none());
    }

    #[test]
    fn latin_letters_count_less_toward_the_length_gates() {
        let cfg = VerifyConfig::default();
        let a = chars("dearharumahappybirthday");
        let b = chars("harumahappybirthday");
        assert!(verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).is_none());
        let full = VerifyConfig {
            ascii_char_weight: 1.0,
            ..VerifyConfig::default()
        };
        assert!(verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &full).is_some());
    }

    #[test]
    fn jaccard_of_sorted_sets() {
        assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
        assert_eq!(jaccard(&[], &[]), 0.0);
    }

    proptest! {
        #[test]
        fn bounded_agrees_with_full(a in "[abc]{0,12}", b in "[abc]{0,12}", max in 0usize..6) {
            let (a, b) = (chars(&a), chars(&b));
            let full = levenshtein(&a, &b);
            let bounded = levenshtein_bounded(&a, &b, max);
            prop_assert_eq!(bounded, (full <= max).then_some(full));
        }

        #[test]
        fn verify_is_symmetric(a in "[abcd]{0,16}", b in "[abcd]{0,16}") {
            let (a, b) = (chars(&a), chars(&b));
            let cfg = VerifyConfig::default();
            let x = verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method);
            let y = verify(&sketch(&b, &[], 0), &sketch(&a, &[], 0), &cfg).map(|m| m.method);
            prop_assert_eq!(x, y);
        }
    }
}
