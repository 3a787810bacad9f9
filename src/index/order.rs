//! The global rarity order of character bigrams, for prefix filtering on the bigram path.
//!
//! An entry is indexed under only the `max_missing_grams + 1` rarest of its distinct bigrams
//! (its prefix), and a query probes only its own prefix. If the char rules accept a pair, each
//! side lacks at most its own `max_missing_grams` of the other's grams (the bound is symmetric,
//! see `grams::max_missing_grams`), so the rarest gram the two share lies in both prefixes:
//! every grams before it on either side is one the other lacks. That holds for any fixed total
//! order; ordering by rarity keeps the probed posting lists short, since common grams (的人,
//! 我们) are rarely anyone's prefix.
//!
//! Rarity is estimated from character frequency in general Chinese usage (`char_order.txt`,
//! written by `scripts/char-order.py` from the dictionary the tokenizer uses), not learned from
//! the stream, so every worker and every restart uses the same order. A bigram's estimated
//! frequency is the product of its characters' (Zipf: rank r has frequency ~ 1/(r+1)); ties, and
//! characters not in the table (all rarer than those in it), fall back to a hash of the gram.

use std::sync::OnceLock;

use super::grams::Gram;

/// Characters of general Chinese text, most frequent first.
const CHAR_ORDER: &str = include_str!("char_order.txt");

/// ASCII letters, most frequent in English first, and digits: normalized text keeps these
/// lowercased. They are ranked among the common CJK characters.
const ASCII_ORDER: &str = "etaoinshrdlcumwfgypbvkjxqz0123456789";

fn ranks() -> &'static [u16] {
    static RANKS: OnceLock<Box<[u16]>> = OnceLock::new();
    RANKS.get_or_init(|| {
        let listed: Vec<char> = CHAR_ORDER.chars().filter(|c| *c != '\n').collect();
        let unknown = (listed.len() + 1).min(u16::MAX as usize) as u16;
        let mut r = vec![unknown; 0x10000].into_boxed_slice();
        for (i, c) in listed.iter().enumerate() {
            if let Some(slot) = r.get_mut(*c as usize) {
                *slot = (*slot).min(i.min(u16::MAX as usize - 1) as u16);
            }
        }
        for (i, c) in ASCII_ORDER.chars().enumerate() {
            r[c as usize] = (8 + 6 * i) as u16;
        }
        r
    })
}

fn rank(c: u64) -> u64 {
    let r = ranks();
    r.get(c as usize)
        .copied()
        .map_or(r[0xFFFF] as u64, u64::from)
}

/// Sort key of a gram: smaller is rarer. Distinct grams can share a key only through the 32-bit
/// hash, so callers break ties by the gram itself.
pub fn rarity_key(g: Gram) -> u64 {
    let product = (rank(g >> 21) + 1) * (rank(g & 0x1F_FFFF) + 1);
    let commonness = (1u64 << 31).saturating_sub(product);
    let mix = (g.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32;
    (commonness << 32) | u64::from(mix)
}

/// Orders `grams` (distinct) rarest first and keeps the first `k`.
pub fn keep_rarest(grams: &mut Vec<Gram>, k: usize) {
    let mut keyed: Vec<(u64, Gram)> = grams.iter().map(|&g| (rarity_key(g), g)).collect();
    if k < keyed.len() {
        keyed.select_nth_unstable(k);
        keyed.truncate(k);
    }
    keyed.sort_unstable();
    grams.clear();
    grams.extend(keyed.iter().map(|&(_, g)| g));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::grams::{distinct_bigrams, max_missing_grams};
    use crate::types::Fingerprint;
    use crate::verify::{verify, Sketch, VerifyConfig};
    use proptest::prelude::*;

    fn gram(s: &str) -> Gram {
        let mut g = Vec::new();
        distinct_bigrams(&s.chars().collect::<Vec<_>>(), &mut g);
        g[0]
    }

    #[test]
    fn common_grams_sort_after_rare_ones() {
        assert!(rarity_key(gram("我们")) > rarity_key(gram("饕餮")));
        assert!(rarity_key(gram("的人")) > rarity_key(gram("熊猫")));
        assert!(rarity_key(gram("th")) > rarity_key(gram("qz")));
        // A character outside the table is rarer than any in it.
        assert!(rarity_key(gram("的𠀀")) < rarity_key(gram("的饕")));
        let mut g = vec![gram("的人"), gram("饕餮"), gram("熊猫")];
        keep_rarest(&mut g, 2);
        assert_eq!(g, vec![gram("饕餮"), gram("熊猫")]);
    }

    fn sketch(c: &[char]) -> Sketch<'_> {
        Sketch {
            chars: c,
            text_hash: xxhash_rust::xxh3::xxh3_64(&c.iter().map(|&c| c as u8).collect::<Vec<_>>()),
            fingerprint: Fingerprint(0),
            tokens: &[],
        }
    }

    fn prefix(c: &[char], cfg: &VerifyConfig) -> Vec<Gram> {
        let mut g = Vec::new();
        distinct_bigrams(c, &mut g);
        keep_rarest(&mut g, max_missing_grams(c.len(), cfg) + 1);
        g
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        // Prefix filtering is complete: whenever the char rules accept a pair, the two prefixes
        // share a gram. Texts mix common and rare characters, edits and truncations.
        #[test]
        fn accepted_pairs_share_a_prefix_gram(
            a in "[的是人我们熊猫饕餮龘a1]{11,40}",
            edits in proptest::collection::vec((0usize..40, 0u8..3, "[的是人我们熊猫饕餮龘a1]"), 0..6),
            trim in (0usize..8, 0usize..8),
        ) {
            let cfg = VerifyConfig::default();
            let a: Vec<char> = a.chars().collect();
            let mut b = a.clone();
            for (pos, op, c) in &edits {
                let p = pos % (b.len() + 1);
                let c = c.chars().next().unwrap();
                match op {
                    0 => b.insert(p, c),
                    1 if p < b.len() => { b.remove(p); }
                    _ if p < b.len() => b[p] = c,
                    _ => {}
                }
            }
            let end = b.len().saturating_sub(trim.1).max(trim.0.min(b.len()));
            let b = b[trim.0.min(b.len())..end].to_vec();
            if b.len() >= 2 && verify(&sketch(&a), &sketch(&b), &cfg).is_some() {
                let (pa, pb) = (prefix(&a, &cfg), prefix(&b, &cfg));
                prop_assert!(pa.iter().any(|g| pb.contains(g)), "a={:?} b={:?}", a, b);
            }
        }
    }
}
