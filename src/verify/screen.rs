//! A screen before the gates: a necessary condition for `score_bound(..).is_some()` in a few
//! integer operations per pair, over 32-byte records scanned in a row. A dedup worker that
//! shares the routed partitions compares each waiting head with hundreds of undecided posts it
//! has read ahead of the other workers (`lookahead`), and the gates reject nearly every pair:
//! about 10 ns a pair there, on dependent chains of bit counts and floating-point bounds. The
//! screen lets through every pair the gates may accept, and few others, which then meet the
//! gates as before.
//!
//! It loosens each rule of `score_bound` to what two bit counts and integer comparisons decide:
//! - exact: the same low 32 bits of the text hash;
//! - edit: the larger count of characters' bits only one text has is at least half of their
//!   symmetric difference, and `max_edits` of the longer text is the larger of the two texts'
//!   (it grows with the length);
//! - containment: one text's character bits within the other's, either way;
//! - SimHash: `1/(H+1)` at most 1, and the token overlap at most `min(|A|, |B|)` and half of
//!   what the symmetric difference of the token bits leaves; the threshold on the Jaccard index
//!   rounded down to a multiple of 1/1024.

use super::{max_edits, Bits, Gates, Sketch, VerifyConfig, MANY_TOKENS};

/// What the screen reads of a post (its gates, with `max_edits` of its own length).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Screened {
    chars_bits: u64,
    token_bits: u64,
    /// The low 32 bits of the text hash, when `has_hash`.
    text_hash: u32,
    has_hash: bool,
    max_edits: u32,
    tokens: u32,
}

impl Screened {
    /// The record of a post with gates `g`.
    pub fn of(g: &Gates, cfg: &VerifyConfig) -> Screened {
        Screened {
            chars_bits: g.bits.chars,
            token_bits: g.bits.tokens,
            text_hash: g.text_hash.unwrap_or_default(),
            has_hash: g.text_hash.is_some(),
            max_edits: max_edits(g.chars, cfg).min(u32::MAX as usize) as u32,
            tokens: g.tokens.min(MANY_TOKENS) as u32,
        }
    }
}

/// One post's screen, to run over the records of others.
#[derive(Clone, Copy, Debug)]
pub struct Screen {
    chars_bits: u64,
    token_bits: u64,
    text_hash: u32,
    max_edits: u32,
    tokens: u64,
    containment: bool,
    /// The SimHash rule is out of reach (the post has too few tokens).
    simhash_off: bool,
    min_tokens: u32,
    /// The least Jaccard index the SimHash rule can accept, times 1024, rounded down.
    jaccard_1024: u64,
}

impl Screen {
    /// The screen of post `a` (`a_bits` its `Bits`).
    pub fn new(a: &Sketch<'_>, a_bits: &Bits, cfg: &VerifyConfig) -> Screen {
        // Sim = 1/(H+1) + k * J >= threshold needs 1 + k * J >= threshold (k > 0); a thousandth
        // of slack for the rounding of `score_bound`'s f32 arithmetic.
        let least = if cfg.sim_k > 0.0 {
            ((cfg.sim_threshold - 1.0) / cfg.sim_k - 1e-3).clamp(0.0, 1.0)
        } else {
            0.0
        };
        Screen {
            chars_bits: a_bits.chars,
            token_bits: a_bits.tokens,
            text_hash: a.text_hash as u32,
            max_edits: max_edits(a.chars.len(), cfg).min(u32::MAX as usize) as u32,
            tokens: a.tokens.len() as u64,
            containment: cfg.containment,
            simhash_off: a.tokens.len() < cfg.simhash_min_tokens,
            min_tokens: cfg.simhash_min_tokens.min(u32::MAX as usize) as u32,
            jaccard_1024: (least * 1024.0) as u64,
        }
    }

    /// Whether the gates may accept the pair: false only when `score_bound` certainly rejects it.
    #[inline(always)]
    pub fn lets_through(&self, b: &Screened) -> bool {
        let same = b.has_hash & (b.text_hash == self.text_hash);
        let apart = (self.chars_bits ^ b.chars_bits).count_ones();
        let edit = apart <= 2 * self.max_edits.max(b.max_edits);
        let contained = self.containment
            & ((self.chars_bits & !b.chars_bits == 0) | (b.chars_bits & !self.chars_bits == 0));
        let (na, nb) = (self.tokens, u64::from(b.tokens));
        let apart = u64::from((self.token_bits ^ b.token_bits).count_ones());
        let inter = na.min(nb).min((na + nb).saturating_sub(apart) / 2);
        let overlap = inter * (1024 + self.jaccard_1024) >= self.jaccard_1024 * (na + nb);
        let simhash = !self.simhash_off
            & (b.tokens >= self.min_tokens)
            & ((b.tokens as usize >= MANY_TOKENS) | overlap);
        same | edit | contained | simhash
    }

    /// Calls `f` with the index of each record the screen lets through, in order, until `f`
    /// returns true; returns that index.
    pub fn find(&self, records: &[Screened], f: impl FnMut(usize) -> bool) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("popcnt") {
            // SAFETY: the CPU has POPCNT, checked just above.
            return unsafe { self.find_popcnt(records, f) };
        }
        self.find_any(records, f)
    }

    /// `find` with bits counted by POPCNT (the baseline x86-64 target counts them with shifts
    /// and masks).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt")]
    unsafe fn find_popcnt(
        &self,
        records: &[Screened],
        f: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        self.find_any(records, f)
    }

    #[inline(always)]
    fn find_any(&self, records: &[Screened], mut f: impl FnMut(usize) -> bool) -> Option<usize> {
        // Screened in blocks of 64, a bit each, so the comparisons run without a branch per pair.
        for (block, chunk) in records.chunks(64).enumerate() {
            let mut through = 0u64;
            for (i, r) in chunk.iter().enumerate() {
                through |= u64::from(self.lets_through(r)) << i;
            }
            while through != 0 {
                let i = block * 64 + through.trailing_zeros() as usize;
                if f(i) {
                    return Some(i);
                }
                through &= through - 1;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Fingerprint;
    use crate::verify::score_bound;
    use proptest::prelude::*;

    fn gates(chars: usize, tokens: usize, bits: (u64, u64), hash: Option<u32>) -> Gates {
        Gates {
            chars,
            tokens,
            fingerprint: Fingerprint(0),
            text_hash: hash,
            bits: Bits {
                chars: bits.0,
                tokens: bits.1,
            },
        }
    }

    /// A set of bits at `positions` (each below `width`).
    fn set_of(positions: &[u32], width: u32) -> u64 {
        positions.iter().fold(0, |s, p| s | 1 << (p % width))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]
        // Whatever the gates may accept, the screen lets through: over pairs near the rules'
        // edges (lengths, token counts and bit sets a few apart) and configurations.
        #[test]
        fn lets_through_whatever_the_gates_may_accept(
            n in 0usize..120, dm in -30i64..30, na in 0usize..60, dt in -20i64..20,
            ca in any::<u64>(), flip_c in prop::collection::vec(0u32..64, 0..16),
            ta in any::<u64>(), flip_t in prop::collection::vec(0u32..48, 0..24),
            many in prop::bool::weighted(0.05), same in prop::bool::weighted(0.05),
            edit_similarity in 0.5f32..1.0, sim_k in -1.0f32..6.0, sim_threshold in 0.5f32..5.0,
            containment in any::<bool>(), ratio in 0.0f32..1.0, min_tokens in 0usize..12,
        ) {
            let cfg = VerifyConfig {
                edit_similarity,
                sim_k,
                sim_threshold,
                containment,
                containment_min_ratio: ratio,
                simhash_min_tokens: min_tokens,
                ..VerifyConfig::default()
            };
            let m = (n as i64 + dm).max(0) as usize;
            let nb = if many { MANY_TOKENS } else { (na as i64 + dt).max(0) as usize };
            let token_mask = (1u64 << 48) - 1;
            let a_bits = Bits { chars: ca, tokens: ta & token_mask };
            let b_bits = (ca ^ set_of(&flip_c, 64), (ta & token_mask) ^ set_of(&flip_t, 48));
            let chars: Vec<char> = (0..n).map(|i| char::from_u32(0x4e00 + i as u32).unwrap()).collect();
            let tokens: Vec<u32> = (0..na as u32).collect();
            let a = Sketch { chars: &chars, text_hash: 7, fingerprint: Fingerprint(0), tokens: &tokens };
            let b = gates(m, nb, b_bits, Some(if same { 7 } else { 8 }));
            if score_bound(&a, &a_bits, &b, &cfg).is_some() {
                let screen = Screen::new(&a, &a_bits, &cfg);
                prop_assert!(screen.lets_through(&Screened::of(&b, &cfg)));
            }
        }
    }

    #[test]
    fn find_visits_what_it_lets_through_in_order_and_stops_when_asked() {
        let cfg = VerifyConfig::default();
        let chars: Vec<char> = "今天天气很好我们去公园散步吧".chars().collect();
        let a = Sketch {
            chars: &chars,
            text_hash: 1,
            fingerprint: Fingerprint(0),
            tokens: &[],
        };
        let bits = Bits {
            chars: 0xffff,
            tokens: 0,
        };
        let screen = Screen::new(&a, &bits, &cfg);
        // Records 3, 70 and 130 are copies of the text; the others far from it.
        let far = Screened::of(&gates(14, 0, (!0xffff, 0), Some(2)), &cfg);
        let copy = Screened::of(&gates(14, 0, (0xffff, 0), Some(1)), &cfg);
        let mut records = vec![far; 200];
        for i in [3, 70, 130] {
            records[i] = copy;
        }
        let mut seen = Vec::new();
        assert_eq!(
            screen.find(&records, |i| {
                seen.push(i);
                false
            }),
            None
        );
        assert_eq!(seen, [3, 70, 130]);
        assert_eq!(screen.find(&records, |i| i == 70), Some(70));
        assert_eq!(screen.find(&records[..0], |_| true), None);
    }
}
