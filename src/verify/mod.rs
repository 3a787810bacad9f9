//! Candidate verification: a candidate from any source becomes a duplicate only when one of the
//! rules here accepts it. Pure functions over two post sketches; the edit-distance algorithms
//! live in `edit`.

mod edit;
mod screen;

use serde::{Deserialize, Serialize};

use crate::types::Fingerprint;
use edit::edit_distance_within;
pub use edit::{levenshtein, levenshtein_bounded};
pub use screen::{Screen, Screened};

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
        let max_edits = max_edits(long.len(), cfg);
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
            return accept(
                Method::Containment,
                short.len() as f32 / long.len() as f32,
                budget,
            );
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
    /// Distinct tokens; `MANY_TOKENS` stands for that many or more.
    pub tokens: usize,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// The low 32 bits of the xxh3 of the normalized text, when known (the index's records
    /// leave it out: an identical text is found by its exact path first).
    pub text_hash: Option<u32>,
    /// `char_bits` of the normalized text and `token_bits` of its tokens.
    pub bits: Bits,
}

impl Gates {
    /// The gates of a sketch, its text hash known.
    pub fn of(s: &Sketch<'_>) -> Gates {
        Gates {
            chars: s.chars.len(),
            tokens: s.tokens.len(),
            fingerprint: s.fingerprint,
            text_hash: Some(s.text_hash as u32),
            bits: Bits::of(s),
        }
    }
}

/// The 64-bit sets the gates compare: a text's characters (`char_bits`) and its tokens
/// (`token_bits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bits {
    /// `char_bits` of the normalized text.
    pub chars: u64,
    /// `token_bits` of the distinct tokens.
    pub tokens: u64,
}

impl Bits {
    /// The sets of a sketch.
    pub fn of(s: &Sketch<'_>) -> Bits {
        Bits {
            chars: char_bits(s.chars),
            tokens: token_bits(s.tokens),
        }
    }
}

/// A 64-bit set of the text's characters (each sets bit `hash(c) % 64`). A set bit of one text
/// that the other lacks stands for at least one character absent from the other text, and every
/// occurrence of such a character costs an edit: so the edit distance is at least the number of
/// such bits either way, and a text contained in another has no such bit.
pub fn char_bits(chars: &[char]) -> u64 {
    chars.iter().fold(0u64, |bits, &c| {
        bits | 1u64 << ((c as u32).wrapping_mul(0x9E37_79B9) >> 26)
    })
}

/// A set of the distinct token hashes in the low 48 bits of a word (each token sets one, by its
/// remixed hash; the index keeps a token count in the other 16). A set bit of one post that the
/// other lacks stands for at least one of its tokens absent from the other, so such bits bound
/// the token overlap, and with it Zhou's similarity, from above.
pub fn token_bits(tokens: &[u32]) -> u64 {
    tokens.iter().fold(0u64, |bits, &t| {
        bits | 1u64 << ((u64::from(t.wrapping_mul(0x9E37_79B9)) * 48) >> 32)
    })
}

/// Most edits the edit rule allows between two texts whose longer one has `long` characters:
/// the floor of `(1 - edit_similarity) * long`, taken by the conversion, which truncates
/// (`floor` is a library call on targets without SSE4.1, and this runs once per pair compared;
/// a negative product gives 0 either way).
pub fn max_edits(long: usize, cfg: &VerifyConfig) -> usize {
    ((1.0 - cfg.edit_similarity) * long as f32 + 1e-4) as usize
}

/// Whether a text of `chars` characters and `tokens` distinct tokens can be accepted with another
/// by the exact rule alone (identical normalized texts), whatever the other text: too few tokens
/// for the SimHash rule (it needs both texts to have `simhash_min_tokens`), too short to be the
/// shorter text of a containment, and too short for the edit rule. The edit rule needs the longer
/// text to have `n >= edit_min_chars` characters and the two lengths to differ by at most
/// `max_edits(n)`; `n - max_edits(n)` never decreases as `n` grows (with `edit_similarity` in
/// 0..=1 the rule allows at most one more edit per character; outside it `max_edits(n) >= n` or
/// 0), so a text shorter than `edit_min_chars - max_edits(edit_min_chars)` is within no longer
/// text's reach. The read-ahead check compares such a post by its text hash only.
pub fn exact_only(chars: usize, tokens: usize, cfg: &VerifyConfig) -> bool {
    let (below_chars, below_tokens) = exact_only_below(cfg);
    chars < below_chars && tokens < below_tokens
}

/// `exact_only` as two bounds: a text has fewer characters than the first and fewer tokens than
/// the second.
pub fn exact_only_below(cfg: &VerifyConfig) -> (usize, usize) {
    let edit_floor = cfg
        .edit_min_chars
        .saturating_sub(max_edits(cfg.edit_min_chars, cfg));
    let containment = if cfg.containment {
        cfg.containment_min_chars
    } else {
        usize::MAX
    };
    (edit_floor.min(containment), cfg.simhash_min_tokens)
}

/// The largest token count `Gates` distinguishes: a count this large is a lower bound, and the
/// SimHash gate lets such a candidate through.
pub const MANY_TOKENS: usize = u16::MAX as usize;

/// False only when `verify` certainly rejects the pair (and spends nothing of a budget on it):
/// `score_bound` finds no rule that may accept it.
#[inline]
pub fn may_accept(a: &Sketch<'_>, a_bits: &Bits, b: &Gates, cfg: &VerifyConfig) -> bool {
    score_bound(a, a_bits, b, cfg).is_some()
}

/// The highest `Match::score` that `verify` can give the pair, from the gates alone; `None`
/// when it certainly rejects it: no identical-text hash; lengths, or characters one text has
/// and the other lacks (`char_bits` of `a` is `a_bits.chars`), outside the edit band; lengths
/// outside the containment ratio, or a character of the shorter text missing from the longer;
/// and a SimHash similarity that even the largest token overlap the token sets allow could not
/// lift to the threshold. Each bound is the rule's own score expression evaluated at the most
/// favourable figures the gates allow (fewest edits, largest overlap), so it is never below the
/// score `verify` computes, in `f32` too. A candidate whose bound is no higher than the score of
/// a match already found cannot replace it (`Index::find`), and is not read.
pub fn score_bound(a: &Sketch<'_>, a_bits: &Bits, b: &Gates, cfg: &VerifyConfig) -> Option<f32> {
    if b.text_hash == Some(a.text_hash as u32) {
        return Some(1.0);
    }
    let (n, m) = (a.chars.len(), b.chars);
    let (short, long) = (n.min(m), n.max(m));
    let mut bound = None::<f32>;
    if short > 0 && long >= cfg.edit_min_chars {
        let max_edits = max_edits(long, cfg);
        let absent = (a_bits.chars & !b.bits.chars)
            .count_ones()
            .max((b.bits.chars & !a_bits.chars).count_ones()) as usize;
        let fewest = (long - short).max(absent);
        if fewest <= max_edits {
            // An identical text (no edit) scores 1.0 by the exact rule.
            bound = Some(1.0 - fewest as f32 / long as f32);
        }
    }
    // The raw length bounds the weighted one from above.
    if cfg.containment
        && short as f32 >= cfg.containment_min_chars as f32
        && short as f32 >= cfg.containment_min_ratio * long as f32
    {
        let (inner, outer) = if n <= m {
            (a_bits.chars, b.bits.chars)
        } else {
            (b.bits.chars, a_bits.chars)
        };
        if inner & !outer == 0 {
            bound = higher(bound, Some(short as f32 / long as f32));
        }
    }
    higher(bound, simhash_bound(a, a_bits.tokens, b, cfg))
}

/// The higher of two bounds, `None` standing for no bound (the rule rejects).
fn higher(a: Option<f32>, b: Option<f32>) -> Option<f32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// False only when the SimHash rule of `verify` certainly rejects the pair (`a_tokens` is
/// `token_bits` of `a`'s tokens): even the largest token overlap the two token sets allow could
/// not lift the similarity to the threshold. Each bit one set has and the other lacks is at least
/// one token outside the intersection, so the overlap is at most
/// `min(|A| - bits only A has, |B| - bits only B has)` and the Jaccard index at most that over
/// the union it leaves.
pub fn may_accept_simhash(a: &Sketch<'_>, a_tokens: u64, b: &Gates, cfg: &VerifyConfig) -> bool {
    simhash_bound(a, a_tokens, b, cfg).is_some()
}

/// The largest token overlap (the SimHash rule's score) the pair can have, when the rule may
/// accept it (`may_accept_simhash`).
fn simhash_bound(a: &Sketch<'_>, a_tokens: u64, b: &Gates, cfg: &VerifyConfig) -> Option<f32> {
    if a.tokens.len() < cfg.simhash_min_tokens || b.tokens < cfg.simhash_min_tokens {
        return None;
    }
    if b.tokens >= MANY_TOKENS {
        return Some(1.0);
    }
    let distance = a.fingerprint.hamming(b.fingerprint);
    let (na, nb) = (a.tokens.len(), b.tokens);
    let only_a = (a_tokens & !b.bits.tokens).count_ones() as usize;
    let only_b = (b.bits.tokens & !a_tokens).count_ones() as usize;
    let inter = na.saturating_sub(only_a).min(nb.saturating_sub(only_b));
    let union = na + nb - inter;
    let jaccard = if union == 0 {
        0.0
    } else {
        inter as f32 / union as f32
    };
    let best = 1.0 / (distance as f32 + 1.0) + cfg.sim_k * jaccard;
    (best >= cfg.sim_threshold).then_some(jaccard)
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

#[cfg(test)]
pub(crate) mod tests;
