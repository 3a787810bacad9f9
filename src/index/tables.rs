//! Manku et al. (2007) block tables: the 64-bit fingerprint is cut into `b` blocks; every choice of
//! `b - k` blocks is one table keyed by those bits. Two fingerprints within Hamming distance `k`
//! differ in at most `k` blocks, so by the pigeonhole principle they agree on some `b - k` blocks
//! and meet in that table: C(b, k) tables find every pair within distance `k`.

use crate::types::Fingerprint;

/// The table masks for one (b, k) choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableLayout {
    masks: Vec<u64>,
}

/// Invalid (b, k) pairs.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// Blocks must be between 1 and 64 and more than k.
    #[error("index.blocks must be in 1..=64 and greater than index.max_distance (got blocks={blocks}, max_distance={k})")]
    Invalid {
        /// b
        blocks: usize,
        /// k
        k: u32,
    },
}

impl TableLayout {
    /// Builds the C(b, k) masks. Block i covers bits [i*64/b, (i+1)*64/b).
    pub fn new(blocks: usize, k: u32) -> Result<TableLayout, LayoutError> {
        if blocks == 0 || blocks > 64 || k as usize >= blocks {
            return Err(LayoutError::Invalid { blocks, k });
        }
        let block_mask = |i: usize| -> u64 {
            let lo = i * 64 / blocks;
            let hi = (i + 1) * 64 / blocks;
            let width = hi - lo;
            let ones = if width == 64 {
                u64::MAX
            } else {
                (1u64 << width) - 1
            };
            ones << lo
        };
        let keep = blocks - k as usize;
        let mut masks = Vec::new();
        let mut pick: Vec<usize> = (0..keep).collect();
        loop {
            masks.push(pick.iter().fold(0u64, |m, &i| m | block_mask(i)));
            // Next combination in lexicographic order.
            let mut i = keep;
            loop {
                if i == 0 {
                    return Ok(TableLayout { masks });
                }
                i -= 1;
                if pick[i] < blocks - keep + i {
                    pick[i] += 1;
                    for j in i + 1..keep {
                        pick[j] = pick[j - 1] + 1;
                    }
                    break;
                }
            }
        }
    }

    /// Number of tables.
    pub fn tables(&self) -> usize {
        self.masks.len()
    }

    /// The key of `fp` in table `t`: the table's bits of `fp`, shifted down to bit 0. Hash maps
    /// hold the keys, and the crate's hasher (a multiply) spreads only the bits a key has low:
    /// the top block's bits left in place all went to a few buckets with one tag, which made
    /// every probe of that table's maps scan long chains.
    #[inline]
    pub fn key(&self, t: usize, fp: Fingerprint) -> u64 {
        let mask = self.masks[t];
        (fp.0 & mask) >> mask.trailing_zeros()
    }

    /// The width of table `t`'s keys in bits (from the mask's lowest to its highest bit).
    pub fn key_bits(&self, t: usize) -> u32 {
        let mask = self.masks[t];
        64 - mask.leading_zeros() - mask.trailing_zeros()
    }

    /// `fp` permuted for table `t`: its key in the low `key_bits(t)` bits, then the bits of
    /// `fp` above the key's highest bit and those below its lowest, in order. Two fingerprints
    /// within distance `k` are within `k` on any set of the permuted bits outside the key
    /// (a sealed table's fragment, see `sealed_table`).
    #[inline]
    pub fn permuted(&self, t: usize, fp: Fingerprint) -> u64 {
        let mask = self.masks[t];
        let (lo, width) = (mask.trailing_zeros(), self.key_bits(t));
        let rest = fp.0.rotate_right(lo + width);
        self.key(t, fp) | rest.checked_shl(width).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table_counts_are_binomial() {
        assert_eq!(TableLayout::new(4, 3).map(|l| l.tables()), Ok(4));
        assert_eq!(TableLayout::new(6, 3).map(|l| l.tables()), Ok(20));
        assert_eq!(TableLayout::new(8, 3).map(|l| l.tables()), Ok(56));
        assert!(TableLayout::new(3, 3).is_err());
    }

    #[test]
    fn keys_start_at_bit_zero_and_keep_every_bit_of_the_table() {
        let layout = TableLayout::new(6, 3).unwrap();
        for t in 0..layout.tables() {
            let mask = layout.masks[t];
            let width = 64 - mask.leading_zeros() - mask.trailing_zeros();
            assert_eq!(layout.key(t, Fingerprint(mask)) & 1, 1, "table {t}");
            assert!(width == 64 || layout.key(t, Fingerprint(u64::MAX)) < 1 << width);
            assert_eq!(layout.key(t, Fingerprint(!mask)), 0, "table {t}");
        }
    }

    #[test]
    fn a_permuted_fingerprint_starts_with_the_key_and_keeps_the_other_bits() {
        let layout = TableLayout::new(4, 3).unwrap();
        let fp = Fingerprint(0x0123_4567_89ab_cdef);
        for t in 0..layout.tables() {
            let p = layout.permuted(t, fp);
            assert_eq!(layout.key_bits(t), 16);
            assert_eq!(p & 0xffff, layout.key(t, fp), "table {t}");
            assert_eq!(p.count_ones(), fp.0.count_ones(), "table {t}");
        }
        assert_eq!(layout.permuted(0, fp), fp.0);
        assert_eq!(layout.permuted(3, fp), 0x4567_89ab_cdef_0123);
    }

    proptest! {
        // Outside the key, permuted fingerprints differ in no more bits than the fingerprints.
        #[test]
        fn permuting_keeps_distances(a: u64, b: u64, blocks in 4usize..9) {
            let layout = TableLayout::new(blocks, 3).unwrap();
            for t in 0..layout.tables() {
                let (pa, pb) = (layout.permuted(t, Fingerprint(a)), layout.permuted(t, Fingerprint(b)));
                prop_assert!((pa ^ pb).count_ones() <= (a ^ b).count_ones());
            }
        }

        #[test]
        fn pigeonhole_distance_le_k_shares_a_key(a: u64, flips in proptest::collection::vec(0u32..64, 0..=3), b in 4usize..9) {
            let layout = TableLayout::new(b, 3).unwrap();
            let mut x = a;
            for f in flips { x ^= 1 << f; }
            let (fa, fb) = (Fingerprint(a), Fingerprint(x));
            prop_assert!(fa.hamming(fb) <= 3);
            prop_assert!((0..layout.tables()).any(|t| layout.key(t, fa) == layout.key(t, fb)));
        }
    }
}
