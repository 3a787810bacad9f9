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
    /// Most verification work per post, in cells: one cell of the edit-distance DP (the
    /// bit-parallel DP computes 64 per step), one element of a token-set merge or of a substring
    /// search. Candidates met after the budget is spent are not verified (counted in
    /// `verify_budget_exhausted` and `candidates_unverified`). 0 = unlimited.
    pub max_verify_cells_per_post: u64,
}

/// Default of `max_verify_cells_per_post`.
pub const DEFAULT_MAX_VERIFY_CELLS: u64 = 1 << 23;

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
            max_verify_cells_per_post: DEFAULT_MAX_VERIFY_CELLS,
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

/// Verification work a post may still spend on its candidates, in cells (see
/// `VerifyConfig::max_verify_cells_per_post`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    left: u64,
    spent: u64,
}

/// The budget ran out before a candidate's verification finished: it counts as not verified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exhausted;

impl Budget {
    /// A budget of `cells` (0 = unlimited).
    pub fn new(cells: u64) -> Budget {
        Budget {
            left: if cells == 0 { u64::MAX } else { cells },
            spent: 0,
        }
    }

    /// No limit.
    pub fn unlimited() -> Budget {
        Budget::new(0)
    }

    /// Cells spent so far.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    fn charge(&mut self, cells: u64) -> Result<(), Exhausted> {
        if cells > self.left {
            self.left = 0;
            return Err(Exhausted);
        }
        self.left -= cells;
        self.spent += cells;
        Ok(())
    }

    /// Charges work that must happen (the overlap figure of an accepted match) even past the limit.
    fn force(&mut self, cells: u64) {
        self.left = self.left.saturating_sub(cells);
        self.spent += cells;
    }
}

/// Checks one candidate pair against every rule; the first rule that accepts wins, in the order
/// exact, edit, containment, simhash.
pub fn verify(a: &Sketch<'_>, b: &Sketch<'_>, cfg: &VerifyConfig) -> Option<Match> {
    verify_within(a, b, cfg, &mut Budget::unlimited()).unwrap_or(None)
}

/// `verify` charging its work to `budget`; `Err(Exhausted)` when the budget cannot pay for a
/// rule that still had to run (the pair then counts as not verified). The cheap rejections run
/// first: lengths, a character-count bound, common prefix and suffix; the edit distance is
/// computed in the band implied by the threshold or bit-parallel, whichever is cheaper.
pub fn verify_within(
    a: &Sketch<'_>,
    b: &Sketch<'_>,
    cfg: &VerifyConfig,
    budget: &mut Budget,
) -> Result<Option<Match>, Exhausted> {
    let distance = a.fingerprint.hamming(b.fingerprint);
    let merge_cells = (a.tokens.len() + b.tokens.len()) as u64;
    let figures = |overlap: f32| (overlap, 1.0 / (distance as f32 + 1.0) + cfg.sim_k * overlap);
    // The overlap is only computed for a match (or the simhash rule): long posts have thousands
    // of tokens.
    let accept = |method, score, budget: &mut Budget| {
        budget.force(merge_cells);
        let (overlap, similarity) = figures(jaccard(a.tokens, b.tokens));
        Ok(Some(Match {
            method,
            distance,
            overlap,
            similarity,
            score,
        }))
    };
    if a.text_hash == b.text_hash && a.chars == b.chars {
        return accept(Method::Exact, 1.0, budget);
    }
    let (short, long) = if a.chars.len() <= b.chars.len() {
        (a.chars, b.chars)
    } else {
        (b.chars, a.chars)
    };
    if !short.is_empty() && long.len() >= cfg.edit_min_chars {
        let max_edits = ((1.0 - cfg.edit_similarity) * long.len() as f32 + 1e-4).floor() as usize;
        if let Some(d) = edit_distance_within(short, long, max_edits, budget)? {
            return accept(Method::Edit, 1.0 - d as f32 / long.len() as f32, budget);
        }
    }
    if cfg.containment
        && effective_len(short, cfg) >= cfg.containment_min_chars as f32
        && short.len() as f32 >= cfg.containment_min_ratio * long.len() as f32
    {
        budget.charge((long.len() + short.len()) as u64)?;
        if contains(long, short) {
            return accept(Method::Containment, short.len() as f32 / long.len() as f32, budget);
        }
    }
    if a.tokens.len() >= cfg.simhash_min_tokens && b.tokens.len() >= cfg.simhash_min_tokens {
        // Sim <= 1/(H+1) + K * (smaller set / larger set): skip the merge when even that fails.
        let (sa, sb) = (a.tokens.len() as f32, b.tokens.len() as f32);
        let (_, best) = figures(sa.min(sb) / sa.max(sb));
        if best >= cfg.sim_threshold {
            budget.charge(merge_cells)?;
            let overlap = jaccard(a.tokens, b.tokens);
            let (overlap, similarity) = figures(overlap);
            if similarity >= cfg.sim_threshold {
                return Ok(Some(Match {
                    method: Method::Simhash,
                    distance,
                    overlap,
                    similarity,
                    score: overlap,
                }));
            }
        }
    }
    Ok(None)
}

/// What the cheap gates of `verify` need of a stored candidate; the index keeps these in dense
/// arrays so most candidates are rejected without reading the entry.
#[derive(Clone, Copy, Debug)]
pub struct Gates {
    /// Normalized text length in characters.
    pub chars: usize,
    /// Distinct tokens.
    pub tokens: usize,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
}

/// False only when `verify` certainly rejects the pair (and spends nothing of a budget on it):
/// no identical-text hash, lengths outside the edit band and the containment ratio, and a SimHash
/// similarity that even a full token overlap could not lift to the threshold.
pub fn may_accept(a: &Sketch<'_>, b: &Gates, cfg: &VerifyConfig) -> bool {
    if a.text_hash == b.text_hash {
        return true;
    }
    let (n, m) = (a.chars.len(), b.chars);
    let (short, long) = (n.min(m), n.max(m));
    if short > 0 && long >= cfg.edit_min_chars {
        let max_edits = ((1.0 - cfg.edit_similarity) * long as f32 + 1e-4).floor() as usize;
        if long - short <= max_edits {
            return true;
        }
    }
    // The raw length bounds the weighted one from above.
    if cfg.containment
        && short as f32 >= cfg.containment_min_chars as f32
        && short as f32 >= cfg.containment_min_ratio * long as f32
    {
        return true;
    }
    if a.tokens.len() >= cfg.simhash_min_tokens && b.tokens >= cfg.simhash_min_tokens {
        let distance = a.fingerprint.hamming(b.fingerprint);
        let (sa, sb) = (a.tokens.len() as f32, b.tokens as f32);
        let best = 1.0 / (distance as f32 + 1.0) + cfg.sim_k * (sa.min(sb) / sa.max(sb));
        if best >= cfg.sim_threshold {
            return true;
        }
    }
    false
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

/// Whether `short` occurs in `long`: Rabin-Karp, linear in the lengths (every hash hit is
/// compared, so the answer is exact).
fn contains(long: &[char], short: &[char]) -> bool {
    let (n, m) = (long.len(), short.len());
    if m == 0 {
        return true;
    }
    if m >= n {
        return m == n && long == short;
    }
    const BASE: u64 = 0x0000_0100_0000_01b3;
    let mut pow = 1u64;
    let (mut hs, mut hw) = (0u64, 0u64);
    for i in 0..m {
        if i > 0 {
            pow = pow.wrapping_mul(BASE);
        }
        hs = hs.wrapping_mul(BASE).wrapping_add(short[i] as u64);
        hw = hw.wrapping_mul(BASE).wrapping_add(long[i] as u64);
    }
    for i in 0..=n - m {
        if hw == hs && long[i..i + m] == *short {
            return true;
        }
        if i + m < n {
            hw = hw
                .wrapping_sub((long[i] as u64).wrapping_mul(pow))
                .wrapping_mul(BASE)
                .wrapping_add(long[i + m] as u64);
        }
    }
    false
}

/// Levenshtein distance if it is at most `max`, else `None`. Its cost follows the band: at most
/// `O(len * (2 max + 1))` cells, or `O(len * len / 64)` bit-parallel steps when that is cheaper.
pub fn levenshtein_bounded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    edit_distance_within(a, b, max, &mut Budget::unlimited()).unwrap_or(None)
}

/// Unbounded Levenshtein distance (for reports and `explain`).
pub fn levenshtein(a: &[char], b: &[char]) -> usize {
    let max = a.len().max(b.len());
    levenshtein_bounded(a, b, max).unwrap_or(max)
}

/// Weight of one 64-row bit-parallel step against one scalar banded cell when choosing between
/// them (an estimate, not measured: the band's simple loop wins for short posts, the bit-parallel
/// DP for long ones whose band is wider than 32 cells per 64 rows).
const CELLS_PER_WORD_STEP: u64 = 32;

/// `levenshtein_bounded` charging the DP cells it computes to `budget`.
fn edit_distance_within(
    a: &[char],
    b: &[char],
    max: usize,
    budget: &mut Budget,
) -> Result<Option<usize>, Exhausted> {
    if a.len().abs_diff(b.len()) > max {
        return Ok(None);
    }
    // A common prefix or suffix never changes the distance.
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[pre..], &b[pre..]);
    let suf = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[..a.len() - suf], &b[..b.len() - suf]);
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short.is_empty() {
        return Ok((long.len() <= max).then_some(long.len()));
    }
    let (n, m) = (long.len() as u64, short.len() as u64);
    if m > 64 {
        budget.charge(n + m)?;
        if count_bound(short, long) > max {
            return Ok(None);
        }
    }
    let band = n * (2 * max.min(long.len()) as u64 + 1);
    let words = m.div_ceil(64);
    let bitpar = n * words * 64;
    if band <= n * words * CELLS_PER_WORD_STEP {
        budget.charge(band)?;
        Ok(banded(short, long, max))
    } else {
        budget.charge(bitpar)?;
        Ok(myers(short, long, max))
    }
}

/// A lower bound of the edit distance from character counts: an edit fixes at most one surplus
/// character on each side. Characters share 64 buckets, which only loosens the bound.
fn count_bound(a: &[char], b: &[char]) -> usize {
    let mut h = [0i32; 64];
    for c in a {
        h[*c as usize & 63] += 1;
    }
    for c in b {
        h[*c as usize & 63] -= 1;
    }
    let diff: usize = h.iter().map(|x| x.unsigned_abs() as usize).sum();
    let common = (a.len() + b.len() - diff) / 2;
    a.len().max(b.len()) - common
}

/// Scalar banded DP: only the cells with `|i - j| <= max` are computed. Short texts use rows
/// on the stack (no allocation per candidate).
fn banded(a: &[char], b: &[char], max: usize) -> Option<usize> {
    const STACK: usize = 130;
    if b.len() + 2 <= STACK {
        let (mut prev, mut cur) = ([0usize; STACK], [0usize; STACK]);
        banded_rows(a, b, max, &mut prev, &mut cur)
    } else {
        let (mut prev, mut cur) = (vec![0; b.len() + 2], vec![0; b.len() + 2]);
        banded_rows(a, b, max, &mut prev, &mut cur)
    }
}

fn banded_rows(
    a: &[char],
    b: &[char],
    max: usize,
    prev: &mut [usize],
    cur: &mut [usize],
) -> Option<usize> {
    let (n, m) = (a.len(), b.len());
    const INF: usize = usize::MAX / 2;
    prev[..m + 2].fill(INF);
    cur[..m + 2].fill(INF);
    let (mut prev, mut cur) = (prev, cur);
    for (j, p) in prev.iter_mut().enumerate().take(max.min(m) + 1) {
        *p = j;
    }
    for i in 1..=n {
        let lo = i.saturating_sub(max).max(1);
        let hi = (i + max).min(m);
        // The cell left of the band must read as INF, not as a value left over from two rows
        // ago (cells right of the previous row's band were never written: still INF).
        cur[lo - 1] = if lo == 1 && i <= max { i } else { INF };
        let mut row_min = if lo == 1 { cur[0] } else { INF };
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

/// Myers' algorithm for a pattern of at most 64 characters: one word, tables on the stack.
fn myers64(p: &[char], t: &[char], max: usize) -> Option<usize> {
    let m = p.len();
    let (mut keys, mut masks, mut k) = (['\0'; 64], [0u64; 64], 0usize);
    for (i, c) in p.iter().enumerate() {
        match keys[..k].binary_search(c) {
            Ok(x) => masks[x] |= 1u64 << i,
            Err(x) => {
                keys.copy_within(x..k, x + 1);
                masks.copy_within(x..k, x + 1);
                keys[x] = *c;
                masks[x] = 1u64 << i;
                k += 1;
            }
        }
    }
    let (mut vp, mut vn) = (!0u64, 0u64);
    let last = 1u64 << (m - 1);
    let mut dist = m;
    let n = t.len();
    for (j, c) in t.iter().enumerate() {
        let x = keys[..k].binary_search(c).map_or(0, |x| masks[x]);
        let d0 = ((x & vp).wrapping_add(vp) ^ vp) | x | vn;
        let hp = vn | !(d0 | vp);
        let hn = d0 & vp;
        dist = dist + usize::from(hp & last != 0) - usize::from(hn & last != 0);
        let hp = (hp << 1) | 1;
        let hn = hn << 1;
        vp = hn | !(d0 | hp);
        vn = hp & d0;
        if dist > max + (n - j - 1) {
            return None;
        }
    }
    (dist <= max).then_some(dist)
}

/// Myers' bit-parallel edit distance (Myers 1999, Hyyrö's block formulation): `p` is cut into
/// 64-row words, one step per word and character of `t`. Stops once even a run of matches to
/// the end could not bring the distance back to `max`.
fn myers(p: &[char], t: &[char], max: usize) -> Option<usize> {
    let m = p.len();
    if m <= 64 {
        return myers64(p, t, max);
    }
    let words = m.div_ceil(64);
    let mut keys: Vec<char> = p.to_vec();
    keys.sort_unstable();
    keys.dedup();
    let mut peq = vec![0u64; keys.len() * words];
    for (i, c) in p.iter().enumerate() {
        if let Ok(k) = keys.binary_search(c) {
            peq[k * words + i / 64] |= 1u64 << (i % 64);
        }
    }
    let mut vp = vec![!0u64; words];
    let mut vn = vec![0u64; words];
    let last = 1u64 << ((m - 1) % 64);
    let zeros = vec![0u64; words];
    let mut dist = m;
    let n = t.len();
    for (j, c) in t.iter().enumerate() {
        let row = match keys.binary_search(c) {
            Ok(k) => &peq[k * words..(k + 1) * words],
            Err(_) => &zeros[..],
        };
        // Row 0 of the DP is 0, 1, 2, ...: every column enters with a +1 horizontal delta.
        let (mut hp_carry, mut hn_carry) = (1u64, 0u64);
        for w in 0..words {
            let (v_p, v_n) = (vp[w], vn[w]);
            let x = row[w] | hn_carry;
            let d0 = ((x & v_p).wrapping_add(v_p) ^ v_p) | x | v_n;
            let hp = v_n | !(d0 | v_p);
            let hn = d0 & v_p;
            let (hp_in, hn_in) = (hp_carry, hn_carry);
            if w + 1 < words {
                hp_carry = hp >> 63;
                hn_carry = hn >> 63;
            } else {
                hp_carry = u64::from(hp & last != 0);
                hn_carry = u64::from(hn & last != 0);
            }
            let hp = (hp << 1) | hp_in;
            let hn = (hn << 1) | hn_in;
            vp[w] = hn | !(d0 | hp);
            vn[w] = hp & d0;
        }
        dist = dist + hp_carry as usize - hn_carry as usize;
        // The last row falls by at most one per remaining column.
        if dist > max + (n - j - 1) {
            return None;
        }
    }
    (dist <= max).then_some(dist)
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

    /// Textbook O(n m) Levenshtein, the reference for the banded and bit-parallel versions.
    fn naive(a: &[char], b: &[char]) -> usize {
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut cur = vec![i; b.len() + 1];
            for j in 1..=b.len() {
                let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
                cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
            }
            prev = cur;
        }
        prev[b.len()]
    }

    #[test]
    fn long_texts_sharing_a_prefix_cost_only_their_differing_part() {
        let prefix: String = "今天天气真不错我们去公园散步吧".repeat(300);
        let a = chars(&format!("{prefix}甲乙丙丁戊己庚辛"));
        let b = chars(&format!("{prefix}子丑寅卯辰巳午未申"));
        let mut budget = Budget::unlimited();
        let d = edit_distance_within(&a, &b, a.len(), &mut budget);
        assert_eq!(d, Ok(Some(9)));
        assert!(budget.spent() <= 9 * 64, "spent {}", budget.spent());
    }

    #[test]
    fn a_spent_budget_stops_verification_but_never_changes_an_answer_given() {
        let cfg = VerifyConfig::default();
        let a: Vec<char> = "一二三四五六七八九十".repeat(40).chars().collect();
        let mut b = a.clone();
        for i in (0..b.len()).step_by(9) {
            b[i] = '零';
        }
        let (sa, sb) = (sketch(&a, &[], 0), sketch(&b, &[], 0));
        let full = verify(&sa, &sb, &cfg);
        assert_eq!(full.map(|m| m.method), Some(Method::Edit));
        let mut small = Budget::new(1000);
        assert_eq!(verify_within(&sa, &sb, &cfg, &mut small), Err(Exhausted));
        let mut enough = Budget::new(1 << 20);
        assert_eq!(verify_within(&sa, &sb, &cfg, &mut enough), Ok(full));
    }

    proptest! {
        #[test]
        fn the_gates_never_reject_what_verify_accepts(
            a in "[abcd]{0,30}", b in "[abcd]{0,30}",
            ta in proptest::collection::btree_set(0u32..20, 0..14),
            tb in proptest::collection::btree_set(0u32..20, 0..14),
            fa: u64, flips in 0u32..4,
        ) {
            let (a, b) = (chars(&a), chars(&b));
            let (ta, tb): (Vec<u32>, Vec<u32>) = (ta.into_iter().collect(), tb.into_iter().collect());
            let fb = fa ^ ((1u64 << flips) - 1);
            let (sa, sb) = (sketch(&a, &ta, fa), sketch(&b, &tb, fb));
            let cfg = VerifyConfig::default();
            let gates = Gates { chars: b.len(), tokens: tb.len(), fingerprint: sb.fingerprint, text_hash: sb.text_hash };
            if verify(&sa, &sb, &cfg).is_some() {
                prop_assert!(may_accept(&sa, &gates, &cfg));
            }
        }

        #[test]
        fn banded_and_bit_parallel_agree_with_the_textbook_dp(
            a in "[abcd]{0,150}", b in "[abcd]{0,150}", max in 0usize..160,
        ) {
            let (a, b) = (chars(&a), chars(&b));
            let full = naive(&a, &b);
            let want = (full <= max).then_some(full);
            if !a.is_empty() && !b.is_empty() {
                let (s, l) = if a.len() <= b.len() { (&a, &b) } else { (&b, &a) };
                prop_assert_eq!(myers(s, l, max), want, "myers");
                prop_assert_eq!(banded(s, l, max), want, "banded");
            }
            prop_assert_eq!(levenshtein_bounded(&a, &b, max), want);
            prop_assert!(count_bound(&a, &b) <= full);
        }

        #[test]
        fn contains_agrees_with_windows(long in "[ab]{0,40}", short in "[ab]{0,8}") {
            let (l, s) = (chars(&long), chars(&short));
            let want = s.is_empty() || l.windows(s.len()).any(|w| w == s.as_slice());
            prop_assert_eq!(contains(&l, &s), want);
        }

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
