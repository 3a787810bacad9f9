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

/// Computes the SimHash of weighted tokens. An empty token list gives fingerprint 0.
pub fn simhash(tokens: &[WeightedToken]) -> SimHash {
    let mut acc = [0f32; 64];
    for t in tokens {
        let h = t.hash;
        for (i, a) in acc.iter_mut().enumerate() {
            // Branch-free: +w when the bit is set, -w otherwise.
            let sign = (((h >> i) & 1) as f32) * 2.0 - 1.0;
            *a += sign * t.weight;
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
