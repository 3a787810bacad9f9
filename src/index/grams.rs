//! Character bigrams for the short-text path, and the prefix- and count-filter arithmetic that
//! says how many of a query's grams must be probed, and in how many of the probed posting lists
//! an entry must occur, so that no match under the verification rules is missed.

use crate::verify::VerifyConfig;

/// A character bigram packed into one integer (two 21-bit scalar values): no hash collisions.
pub type Gram = u64;

/// Distinct bigrams of `chars`, sorted, written to `out` (cleared first).
pub fn distinct_bigrams(chars: &[char], out: &mut Vec<Gram>) {
    out.clear();
    out.extend(
        chars
            .windows(2)
            .map(|w| ((w[0] as u64) << 21) | w[1] as u64),
    );
    out.sort_unstable();
    out.dedup();
}

/// The shortest text the gram path can ever need to find, derived from the verification rules:
/// shorter texts only match exactly.
pub fn min_indexed_chars(cfg: &VerifyConfig) -> usize {
    let edit_min = (cfg.edit_similarity * cfg.edit_min_chars as f32).ceil() as usize;
    let mut m = edit_min.max(2);
    if cfg.containment {
        m = m.min(cfg.containment_min_chars.max(2));
    }
    m
}

/// How many of the query's distinct grams can be absent from a matching entry's grams.
/// Probing any `missing + 1` distinct grams of the query (against an index holding every gram of
/// every entry) therefore meets every entry that the edit or containment rule could accept.
///
/// - edit rule: `d <= (1-t) * max(|A|,|B|)` with `|B| <= |A| / t` gives `d <= (1-t)/t * |A|`.
///   In an alignment of A to B with `d` edits, a substitution or deletion of A's character i
///   breaks the bigram occurrences at i-1 and i, an insertion the one it splits; every other
///   bigram occurrence of A is also one of B. A distinct gram absent from B has all its
///   occurrences among the at most `2d` broken ones, so at most `2d` distinct grams are absent.
/// - containment, entry inside the query: the query's bigram occurrences outside the entry's
///   span number `|A| - |B| <= (1 - r) * |A|`, and only grams with no occurrence inside can be
///   absent.
/// - containment, query inside the entry: none are missing.
///
/// The bound is on distinct grams, so it also bounds how many of any `missing + c` probed grams
/// an accepted entry lacks: it holds at least `c` of them (count filtering, `count_threshold`).
///
/// The edit rule's part of the bound holds for either text of a pair (`d <= (1-t)/t * |B|`
/// too), and the containment part for the text that contains the other, so the bound of each
/// text's own length limits the grams it lacks of the other's (see `prefix`).
pub fn max_missing_grams(query_chars: usize, cfg: &VerifyConfig) -> usize {
    let a = query_chars as f32;
    let mut missing = edit_missing_grams(query_chars, cfg);
    if cfg.containment {
        let extra = ((1.0 - cfg.containment_min_ratio) * a + 1e-4).floor() as usize;
        missing = missing.max(extra);
    }
    missing
}

/// The edit rule's part of `max_missing_grams`: a text of `chars` characters and any text the
/// edit rule accepts with it each lack at most this many of the other's distinct grams.
pub fn edit_missing_grams(chars: usize, cfg: &VerifyConfig) -> usize {
    let t = cfg.edit_similarity.clamp(0.01, 1.0);
    2 * ((1.0 - t) / t * chars as f32 + 1e-4).floor() as usize
}

/// Most probed lists a candidate may be required to occur in (the `c` of count filtering).
pub const MAX_COUNT_THRESHOLD: usize = 4;

/// Count filtering: probing `missing + c` distinct grams of the query, a matching entry lacks at
/// most `missing` of them (see `max_missing_grams`), so it occurs in at least `c` of the probed
/// posting lists and entries in fewer can be dropped. Returns `c` for `lists`, the query's grams
/// as `(gram, posting list length)` sorted by length: 1 (the plain prefix filter) unless the
/// rarest `missing + c` lists together fit `scan_cap`, so that no list is cut and every count is
/// exact. A list is added only if it is no longer than all the lists before it together, so each
/// added gram at most doubles the scan; `c` never exceeds `MAX_COUNT_THRESHOLD` and never needs
/// more lists than the query has grams.
pub fn count_threshold(lists: &[(usize, u32)], missing: usize, scan_cap: usize) -> usize {
    let prefix = missing + 1;
    if lists.len() <= prefix {
        return 1;
    }
    let mut total: usize = lists[..prefix].iter().map(|&(_, len)| len as usize).sum();
    if total == 0 || total > scan_cap {
        return 1;
    }
    let mut c = 1;
    while c < MAX_COUNT_THRESHOLD {
        let Some(&(_, next)) = lists.get(prefix + c - 1) else {
            break;
        };
        let next = next as usize;
        if next > total || total + next > scan_cap {
            break;
        }
        total += next;
        c += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Fingerprint;
    use crate::verify::tests::edited;
    use crate::verify::{levenshtein, verify, Sketch};
    use proptest::prelude::*;

    #[test]
    fn bigrams_are_distinct() {
        let c: Vec<char> = "哈哈哈哈".chars().collect();
        let mut g = Vec::new();
        distinct_bigrams(&c, &mut g);
        assert_eq!(g.len(), 1);
    }

    #[test]
    fn min_indexed_chars_follows_rules() {
        let cfg = VerifyConfig::default();
        assert_eq!(min_indexed_chars(&cfg), 11);
    }

    #[test]
    fn count_threshold_stays_within_cap_and_grams() {
        let lists = |lens: &[u32]| lens.iter().copied().enumerate().collect::<Vec<_>>();
        // Two probes (missing 1) of 5 + 5, then longer lists: each added one at most doubles.
        assert_eq!(count_threshold(&lists(&[5, 5, 6, 20, 30]), 1, 4096), 2);
        assert_eq!(count_threshold(&lists(&[5, 5, 6, 16, 40]), 1, 4096), 3);
        assert_eq!(count_threshold(&lists(&[5, 5, 6, 16, 30]), 1, 4096), 4);
        assert_eq!(count_threshold(&lists(&[5, 5, 6, 16, 30]), 1, 20), 2);
        // The plain prefix filter when it is already cut, or no gram is left to add.
        assert_eq!(count_threshold(&lists(&[5, 5, 6]), 1, 9), 1);
        assert_eq!(count_threshold(&lists(&[5, 5]), 1, 4096), 1);
        assert_eq!(count_threshold(&lists(&[0, 0, 0, 0]), 1, 4096), 1);
        assert_eq!(
            count_threshold(&lists(&[1; 40]), 3, 4096),
            MAX_COUNT_THRESHOLD
        );
    }

    /// Whether `verify` accepts query `a` against entry `b` (char rules only: no tokens).
    fn accepted(a: &[char], b: &[char], cfg: &VerifyConfig) -> bool {
        let s = |c: &[char]| c.len() as u64;
        let sa = Sketch {
            chars: a,
            text_hash: s(a),
            fingerprint: Fingerprint(0),
            tokens: &[],
        };
        let sb = Sketch {
            chars: b,
            text_hash: s(b) ^ 1,
            fingerprint: Fingerprint(0),
            tokens: &[],
        };
        verify(&sa, &sb, cfg).is_some()
    }

    proptest! {
        // Cheap cases, and only about one in five is an accepted pair.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        // Every pair the char rules accept shares at least (grams(A) - missing) grams, so probing
        // missing + 1 of A's grams finds B.
        #[test]
        fn prefix_filter_is_complete(a in "[abcdef]{10,30}", edits in proptest::collection::vec((0usize..30, 0u8..3, "[abcdefg]"), 0..5)) {
            let cfg = VerifyConfig::default();
            let a: Vec<char> = a.chars().collect();
            let b = edited(&a, &edits);
            if accepted(&a, &b, &cfg) && b.len() >= min_indexed_chars(&cfg) {
                let (mut ga, mut gb) = (Vec::new(), Vec::new());
                distinct_bigrams(&a, &mut ga);
                distinct_bigrams(&b, &mut gb);
                let missing = ga.iter().filter(|g| !gb.contains(g)).count();
                prop_assert!(missing <= max_missing_grams(a.len(), &cfg), "missing {} a={:?} b={:?} d={}", missing, a, b, levenshtein(&a, &b));
            }
        }

        // Count filtering: of any `missing + c` distinct grams of A (here in a random order, as
        // posting list lengths would put them), every B the char rules accept holds at least c.
        #[test]
        fn count_filter_keeps_every_accepted_pair(
            a in "[天地人和风雨]{10,30}",
            edits in proptest::collection::vec((0usize..30, 0u8..3, "[天地人和风雨云]"), 0..5),
            trim in (0usize..4, 0usize..4),
            pad in ("[天地人和风雨云]{0,2}", "[天地人和风雨云]{0,2}"),
            order in any::<u64>(),
        ) {
            let cfg = VerifyConfig::default();
            let a: Vec<char> = a.chars().collect();
            let mut b = edited(&a, &edits);
            let end = b.len().saturating_sub(trim.1).max(trim.0.min(b.len()));
            b = b[trim.0.min(b.len())..end].to_vec();
            b = pad.0.chars().chain(b).chain(pad.1.chars()).collect();
            if accepted(&a, &b, &cfg) && b.len() >= min_indexed_chars(&cfg) {
                let (mut ga, mut gb) = (Vec::new(), Vec::new());
                distinct_bigrams(&a, &mut ga);
                distinct_bigrams(&b, &mut gb);
                ga.sort_unstable_by_key(|g| (g ^ order).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let missing = max_missing_grams(a.len(), &cfg);
                for c in 1..=MAX_COUNT_THRESHOLD {
                    if missing + c > ga.len() {
                        break;
                    }
                    let count = ga[..missing + c].iter().filter(|g| gb.binary_search(g).is_ok()).count();
                    prop_assert!(count >= c, "c {} count {} a={:?} b={:?}", c, count, a, b);
                }
            }
        }
    }
}
