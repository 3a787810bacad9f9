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

/// What the screen reads of a post (its gates, with `max_edits` of its own length): four
/// 64-bit words, in this order, so that a vector kernel loads records whole (`avx512`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Screened {
    chars_bits: u64,
    token_bits: u64,
    /// The low 32 bits of the text hash, and bit 32 set when the post has one.
    hash: u64,
    /// `max_edits` (clamped to 32 bits), and the token count (clamped to `MANY_TOKENS`) above
    /// bit 32.
    edits_tokens: u64,
}

/// Bit 32 of `Screened::hash`: the post has a text hash.
const HAS_HASH: u64 = 1 << 32;

impl Screened {
    /// The record of a post with gates `g`.
    pub fn of(g: &Gates, cfg: &VerifyConfig) -> Screened {
        let edits = max_edits(g.chars, cfg).min(u32::MAX as usize) as u64;
        let tokens = g.tokens.min(MANY_TOKENS) as u64;
        Screened {
            chars_bits: g.bits.chars,
            token_bits: g.bits.tokens,
            hash: g.text_hash.map_or(0, |h| u64::from(h) | HAS_HASH),
            edits_tokens: edits | tokens << 32,
        }
    }

    fn max_edits(&self) -> u64 {
        self.edits_tokens & u64::from(u32::MAX)
    }

    fn tokens(&self) -> u64 {
        self.edits_tokens >> 32
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
        let same = b.hash == u64::from(self.text_hash) | HAS_HASH;
        let apart = u64::from((self.chars_bits ^ b.chars_bits).count_ones());
        let edit = apart <= 2 * u64::from(self.max_edits).max(b.max_edits());
        let contained = self.containment
            & ((self.chars_bits & !b.chars_bits == 0) | (b.chars_bits & !self.chars_bits == 0));
        let (na, nb) = (self.tokens, b.tokens());
        let apart = u64::from((self.token_bits ^ b.token_bits).count_ones());
        let inter = na.min(nb).min((na + nb).saturating_sub(apart) / 2);
        let overlap = inter * (1024 + self.jaccard_1024) >= self.jaccard_1024 * (na + nb);
        let simhash = !self.simhash_off
            & (nb >= u64::from(self.min_tokens))
            & ((nb >= MANY_TOKENS as u64) | overlap);
        same | edit | contained | simhash
    }

    /// Calls `f` with the index of each record the screen lets through, in order, until `f`
    /// returns true; returns that index. Eight records at a time where the CPU has AVX-512 with
    /// its bit count (`avx512`), else one at a time, with POPCNT where it has that.
    pub fn find(&self, records: &[Screened], f: impl FnMut(usize) -> bool) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        {
            if avx512::available() {
                // SAFETY: the CPU has the features the kernel is compiled for, checked just above.
                return unsafe { self.find_avx512(records, f) };
            }
            if std::arch::is_x86_feature_detected!("popcnt") {
                // SAFETY: the CPU has POPCNT, checked just above.
                return unsafe { self.find_popcnt(records, f) };
            }
        }
        self.find_any(records, f)
    }

    /// `find` one record at a time, whatever the CPU has: what the vector kernel must agree
    /// with (`cargo bench --bench gates` times both).
    pub fn find_one_by_one(
        &self,
        records: &[Screened],
        f: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
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
    fn find_any(&self, records: &[Screened], f: impl FnMut(usize) -> bool) -> Option<usize> {
        find_in_blocks(records, f, |chunk| {
            let mut through = 0u64;
            for (i, r) in chunk.iter().enumerate() {
                through |= u64::from(self.lets_through(r)) << i;
            }
            through
        })
    }

    /// `find` with eight records screened at a time (`avx512::lets_through8`).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,avx512f,avx512dq,avx512vpopcntdq")]
    unsafe fn find_avx512(
        &self,
        records: &[Screened],
        f: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let v = avx512::Screen8::new(self);
        find_in_blocks(records, f, |chunk| {
            let mut through = 0u64;
            let mut eights = chunk.chunks_exact(8);
            for (k, eight) in eights.by_ref().enumerate() {
                let eight: &[Screened; 8] = eight.try_into().expect("chunks of 8");
                // The kernel's features are this function's (a safe call in here).
                through |= u64::from(v.lets_through8(eight)) << (8 * k);
            }
            let done = chunk.len() - eights.remainder().len();
            for (i, r) in eights.remainder().iter().enumerate() {
                through |= u64::from(self.lets_through(r)) << (done + i);
            }
            through
        })
    }
}

/// Screens `records` in blocks of 64, a bit each from `screen` (so that the comparisons run
/// without a branch per pair), and calls `f` with each index let through, in order, until it
/// returns true; returns that index.
#[inline(always)]
fn find_in_blocks(
    records: &[Screened],
    mut f: impl FnMut(usize) -> bool,
    mut screen: impl FnMut(&[Screened]) -> u64,
) -> Option<usize> {
    for (block, chunk) in records.chunks(64).enumerate() {
        let mut through = screen(chunk);
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

/// The screen over eight records at once with AVX-512 (and its 64-bit bit count, VPOPCNTQ):
/// the records' words are loaded whole and transposed into one vector per word, then each rule
/// is `Screen::lets_through`'s, lane by lane. Its unit test holds it equal to that, record by
/// record.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Screen, Screened, HAS_HASH, MANY_TOKENS};

    /// Whether this CPU runs the kernel.
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
    }

    /// A screen's operands, each in every lane.
    pub(super) struct Screen8 {
        chars: __m512i,
        tokens: __m512i,
        hash: __m512i,
        max_edits: __m512i,
        na: __m512i,
        min_tokens: __m512i,
        many: __m512i,
        jaccard: __m512i,
        jaccard_plus: __m512i,
        containment: bool,
        simhash_off: bool,
    }

    impl Screen8 {
        /// `s` in vectors.
        #[target_feature(enable = "avx512f")]
        pub(super) fn new(s: &Screen) -> Screen8 {
            let all = |x: u64| _mm512_set1_epi64(x as i64);
            Screen8 {
                chars: all(s.chars_bits),
                tokens: all(s.token_bits),
                hash: all(u64::from(s.text_hash) | HAS_HASH),
                max_edits: all(u64::from(s.max_edits)),
                na: all(s.tokens),
                min_tokens: all(u64::from(s.min_tokens)),
                many: all(MANY_TOKENS as u64),
                jaccard: all(s.jaccard_1024),
                jaccard_plus: all(1024 + s.jaccard_1024),
                containment: s.containment,
                simhash_off: s.simhash_off,
            }
        }

        /// Bit i set: `Screen::lets_through(&r[i])`.
        #[target_feature(enable = "avx512f,avx512dq,avx512vpopcntdq")]
        pub(super) fn lets_through8(&self, r: &[Screened; 8]) -> u8 {
            // Record k's words are lanes 4(k % 2)..4(k % 2) + 4 of vector k / 2.
            let p = r.as_ptr().cast::<__m512i>();
            // SAFETY: `Screened` is four u64 words (`repr(C)`), so eight of them are 256 bytes,
            // four unaligned 64-byte loads.
            let (r0, r1, r2, r3) = unsafe {
                (
                    _mm512_loadu_si512(p),
                    _mm512_loadu_si512(p.add(1)),
                    _mm512_loadu_si512(p.add(2)),
                    _mm512_loadu_si512(p.add(3)),
                )
            };
            // Words 0 and 1 of four records, then words 2 and 3; then the two halves joined.
            let w01 = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13);
            let w23 = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
            let (lo, hi) = (
                _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11),
                _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15),
            );
            let (a01, b01) = (
                _mm512_permutex2var_epi64(r0, w01, r1),
                _mm512_permutex2var_epi64(r2, w01, r3),
            );
            let (a23, b23) = (
                _mm512_permutex2var_epi64(r0, w23, r1),
                _mm512_permutex2var_epi64(r2, w23, r3),
            );
            let chars = _mm512_permutex2var_epi64(a01, lo, b01);
            let tokens = _mm512_permutex2var_epi64(a01, hi, b01);
            let hash = _mm512_permutex2var_epi64(a23, lo, b23);
            let edits_tokens = _mm512_permutex2var_epi64(a23, hi, b23);

            let same = _mm512_cmpeq_epi64_mask(hash, self.hash);
            let apart = _mm512_popcnt_epi64(_mm512_xor_si512(chars, self.chars));
            let low32 = _mm512_set1_epi64(u32::MAX as i64);
            let max_edits = _mm512_max_epu64(_mm512_and_si512(edits_tokens, low32), self.max_edits);
            let edit = _mm512_cmple_epu64_mask(apart, _mm512_slli_epi64::<1>(max_edits));
            let mut through = same | edit;
            if self.containment {
                // One text's character bits within the other's: nothing left of either.
                let a_out = _mm512_andnot_si512(chars, self.chars);
                let b_out = _mm512_andnot_si512(self.chars, chars);
                through |= _mm512_testn_epi64_mask(a_out, a_out);
                through |= _mm512_testn_epi64_mask(b_out, b_out);
            }
            if !self.simhash_off {
                let nb = _mm512_srli_epi64::<32>(edits_tokens);
                let apart = _mm512_popcnt_epi64(_mm512_xor_si512(tokens, self.tokens));
                let sum = _mm512_add_epi64(self.na, nb);
                // (na + nb).saturating_sub(apart) / 2
                let left = _mm512_sub_epi64(sum, _mm512_min_epu64(sum, apart));
                let inter =
                    _mm512_min_epu64(_mm512_min_epu64(self.na, nb), _mm512_srli_epi64::<1>(left));
                let overlap = _mm512_cmpge_epu64_mask(
                    _mm512_mullo_epi64(inter, self.jaccard_plus),
                    _mm512_mullo_epi64(self.jaccard, sum),
                );
                let many = _mm512_cmpge_epu64_mask(nb, self.many);
                let enough = _mm512_cmpge_epu64_mask(nb, self.min_tokens);
                through |= enough & (many | overlap);
            }
            through
        }
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        // Eight at a time (where the CPU has AVX-512), the screen lets through exactly what it
        // lets through one by one: records near a post's bits and counts, and configurations.
        #[test]
        fn find_lets_through_what_one_by_one_does(
            ca in any::<u64>(), ta in any::<u64>(), na in 0usize..80, hash in 0u32..4,
            records in prop::collection::vec(
                (any::<u64>(), any::<u64>(), 0usize..200, 0usize..80, prop::option::of(0u32..4),
                 prop::bool::weighted(0.05), 0u32..64),
                0..150),
            sim_k in -1.0f32..6.0, sim_threshold in 0.5f32..5.0, containment in any::<bool>(),
            min_tokens in 0usize..12, edit_similarity in 0.5f32..1.0,
        ) {
            let cfg = VerifyConfig {
                edit_similarity,
                sim_k,
                sim_threshold,
                containment,
                simhash_min_tokens: min_tokens,
                ..VerifyConfig::default()
            };
            let chars: Vec<char> = (0..na as u32 + 3).map(|i| char::from_u32(0x4e00 + i).unwrap()).collect();
            let tokens: Vec<u32> = (0..na as u32).collect();
            let a = Sketch { chars: &chars, text_hash: u64::from(hash), fingerprint: Fingerprint(0), tokens: &tokens };
            let screen = Screen::new(&a, &Bits { chars: ca, tokens: ta }, &cfg);
            // Half the records a few bits from the post, so that every rule lets some through.
            let records: Vec<Screened> = records
                .iter()
                .map(|&(c, t, n, m, h, many, flips)| {
                    let near = flips % 2 == 0;
                    let bits = if near {
                        (ca ^ (c & c >> 7 & c >> 13), ta ^ (t & t >> 5 & t >> 11))
                    } else {
                        (c, t)
                    };
                    let tokens = if many { MANY_TOKENS + m } else { m };
                    Screened::of(&gates(n, tokens, bits, h), &cfg)
                })
                .collect();
            let mut by_one = Vec::new();
            screen.find_one_by_one(&records, |i| { by_one.push(i); false });
            let expected: Vec<usize> =
                (0..records.len()).filter(|&i| screen.lets_through(&records[i])).collect();
            prop_assert_eq!(&by_one, &expected);
            let mut found = Vec::new();
            screen.find(&records, |i| { found.push(i); false });
            prop_assert_eq!(found, expected);
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
