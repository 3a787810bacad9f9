//! Character bigrams for the bigram path, and the prefix-filter arithmetic that says how many of
//! a text's grams must be indexed and probed so that no match under the verification rules is
//! missed (the order they are taken in is `order`'s).

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
/// The bound is symmetric: read with the entry's length, it bounds how many of the entry's grams
/// the query lacks (the edit bound holds for either side's length, and each containment case is
/// one side's), which is what prefix filtering on both sides needs (`order`).
pub fn max_missing_grams(query_chars: usize, cfg: &VerifyConfig) -> usize {
    let a = query_chars as f32;
    let t = cfg.edit_similarity.clamp(0.01, 1.0);
    let edits = ((1.0 - t) / t * a + 1e-4).floor() as usize;
    let mut missing = 2 * edits;
    if cfg.containment {
        let extra = ((1.0 - cfg.containment_min_ratio) * a + 1e-4).floor() as usize;
        missing = missing.max(extra);
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Fingerprint;
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

    /// `a` with `edits` applied: (position, 0 insert / 1 delete / 2 substitute, character).
    fn edited(a: &[char], edits: &[(usize, u8, String)]) -> Vec<char> {
        let mut b = a.to_vec();
        for (pos, op, c) in edits {
            let p = pos % (b.len() + 1);
            let c = c.chars().next().unwrap();
            match op {
                0 => b.insert(p, c),
                1 if p < b.len() => {
                    b.remove(p);
                }
                _ if p < b.len() => b[p] = c,
                _ => {}
            }
        }
        b
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
                // And the other way round, read with B's length (prefix filtering needs both).
                let back = gb.iter().filter(|g| !ga.contains(g)).count();
                prop_assert!(back <= max_missing_grams(b.len(), &cfg), "back {} a={:?} b={:?}", back, a, b);
            }
        }
    }
}
