//! Classic SimHash (Charikar): token hashes are added bit by bit with their weights; the sign of
//! each sum gives one bit. The accumulator is kept so callers can tell strong bits from weak ones.

use crate::text::tokenize::WeightedToken;
use crate::types::Fingerprint;

/// A fingerprint plus the per-bit accumulator it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct SimHash {
    /// The 64-bit fingerprint: bit i is set when `acc[i] > 0`.
    pub fingerprint: Fingerprint,
    /// Signed weighted sums per bit; |acc[i]| near zero marks a bit that small edits can flip.
    pub acc: [f32; 64],
}

/// `SIGNS[b][i]` is +1 when bit `i` of byte `b` is set, else -1.
static SIGNS: [[f32; 8]; 256] = signs();

const fn signs() -> [[f32; 8]; 256] {
    let mut t = [[-1f32; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if (b >> i) & 1 == 1 {
                t[b][i] = 1.0;
            }
            i += 1;
        }
        b += 1;
    }
    t
}

/// Computes the SimHash of weighted tokens. An empty token list gives fingerprint 0.
pub fn simhash(tokens: &[WeightedToken]) -> SimHash {
    let mut acc = [0f32; 64];
    for t in tokens {
        // +w where the hash's bit is set, -w elsewhere: eight bits at a time, their signs from
        // a table (a product with ±1 is exact, so the sums are those of adding bit by bit).
        for (lanes, byte) in acc.chunks_exact_mut(8).zip(t.hash.to_le_bytes()) {
            for (a, sign) in lanes.iter_mut().zip(&SIGNS[usize::from(byte)]) {
                *a += sign * t.weight;
            }
        }
    }
    let mut fp = 0u64;
    for (i, a) in acc.iter().enumerate() {
        if *a > 0.0 {
            fp |= 1 << i;
        }
    }
    SimHash {
        fingerprint: Fingerprint(fp),
        acc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokenize::token_hash;
    use proptest::prelude::*;

    fn toks(words: &[(&str, f32)]) -> Vec<WeightedToken> {
        words
            .iter()
            .map(|(w, x)| WeightedToken {
                word: w.to_string(),
                hash: token_hash(w),
                weight: *x,
            })
            .collect()
    }

    #[test]
    fn single_token_fingerprint_is_its_hash() {
        let t = toks(&[("微博", 1.0)]);
        assert_eq!(simhash(&t).fingerprint.0, token_hash("微博"));
    }

    #[test]
    fn heavier_token_dominates() {
        let t = toks(&[("北京", 10.0), ("上海", 1.0)]);
        let d = simhash(&t)
            .fingerprint
            .hamming(Fingerprint(token_hash("北京")));
        assert_eq!(d, 0);
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(simhash(&[]).fingerprint, Fingerprint(0));
    }

    proptest! {
        #[test]
        fn sums_are_those_of_adding_each_bit_with_its_sign(
            tokens in proptest::collection::vec((any::<u64>(), -100f32..100f32), 0..40)
        ) {
            let t: Vec<WeightedToken> = tokens
                .iter()
                .map(|&(hash, weight)| WeightedToken { word: String::new(), hash, weight })
                .collect();
            let mut want = [0f32; 64];
            for &(hash, weight) in &tokens {
                for (i, a) in want.iter_mut().enumerate() {
                    *a += if (hash >> i) & 1 == 1 { weight } else { -weight };
                }
            }
            let got = simhash(&t);
            prop_assert_eq!(got.acc.map(f32::to_bits), want.map(f32::to_bits));
            let fp = want.iter().enumerate().filter(|(_, a)| **a > 0.0).fold(0u64, |f, (i, _)| f | 1 << i);
            prop_assert_eq!(got.fingerprint.0, fp);
        }

        #[test]
        fn identical_tokens_give_distance_zero(words in proptest::collection::vec("[a-z]{1,6}", 1..20)) {
            let t: Vec<WeightedToken> = words.iter().map(|w| WeightedToken { word: w.clone(), hash: token_hash(w), weight: 1.0 }).collect();
            let a = simhash(&t);
            let mut rev = t.clone();
            rev.reverse();
            let b = simhash(&rev);
            prop_assert_eq!(a.fingerprint.hamming(b.fingerprint), 0);
        }
    }
}
