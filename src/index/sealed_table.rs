//! A generation's block table in direct form, for all its slots once it is sealed and for all
//! but the newest while it grows (`Segment::grow_tables`). The mutable form (`Postings<u64>`)
//! finds a key's bucket by a hash probe and then reads each slot's record for its fingerprint:
//! at 20M live entries a query's buckets hold hundreds of slots, each a cache miss. Here a directory
//! indexed by the low `dir_bits` bits of the table's permuted fingerprint (`TableLayout::
//! permuted`: the key's bits first) gives each bucket's range, and every posting keeps 16 more
//! bits of its fingerprint beside its slot. A scan reads the bucket's fragments in order, drops
//! slots of another key and slots whose fragment alone is further than `max_distance`, and only
//! the rest have their records read.
//!
//! The directory has `2^dir_bits` buckets, `dir_bits` at most the key's width and 16, and at
//! most what the table's size needs (`ceil(log2(postings))`): a small generation does not pay
//! for 65,536 buckets. When the key is wider than the directory, the fragment's low bits hold
//! the key's next bits (up to 16 of them), compared for equality, so a bucket scan sees exactly
//! the key's slots when the key is at most `dir_bits + 16` bits wide (16-bit keys, the default
//! layout, always). Wider keys share fragments' bits between key and distance check; slots of
//! another key then reach the record check, which drops the far ones (no near one is lost).

/// Most directory bits: 65,536 buckets, 256 KiB a table.
const MAX_DIR_BITS: u32 = 16;

/// One block table of a sealed generation (see the module documentation).
#[derive(Debug, Default)]
pub struct SealedTable {
    dir_bits: u32,
    /// Fragment bits that belong to the key (compared for equality).
    key_frag_bits: u32,
    /// Bucket `b`'s postings are `starts[b]..starts[b + 1]` of `slots` and `frags`.
    starts: Box<[u32]>,
    slots: Box<[u32]>,
    frags: Box<[u16]>,
}

impl SealedTable {
    /// The table of `items`, (slot, permuted fingerprint) pairs in increasing slot order, for
    /// keys of `key_bits` bits. They are read twice (a counting sort).
    pub fn build(
        key_bits: u32,
        items: impl ExactSizeIterator<Item = (u32, u64)> + Clone,
    ) -> SealedTable {
        let postings = items.len();
        let need = usize::BITS - postings.saturating_sub(1).leading_zeros();
        let dir_bits = key_bits.min(MAX_DIR_BITS).min(need);
        let mut t = SealedTable {
            dir_bits,
            key_frag_bits: (key_bits - dir_bits).min(16),
            ..SealedTable::default()
        };
        let mut starts = vec![0u32; (1usize << dir_bits) + 1];
        for (_, p) in items.clone() {
            starts[t.bucket_of(p) + 1] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        let mut next = starts.clone();
        let mut out_slots = vec![0u32; postings];
        let mut frags = vec![0u16; postings];
        for (s, p) in items {
            let at = &mut next[t.bucket_of(p)];
            out_slots[*at as usize] = s;
            frags[*at as usize] = t.frag_of(p);
            *at += 1;
        }
        t.starts = starts.into_boxed_slice();
        t.slots = out_slots.into_boxed_slice();
        t.frags = frags.into_boxed_slice();
        t
    }

    /// Writes the table (`snapshot`).
    pub(super) fn write_to(&self, out: &mut super::arrays::Out<'_>) -> std::io::Result<()> {
        out.u64(u64::from(self.dir_bits))?;
        out.u64(u64::from(self.key_frag_bits))?;
        out.slice(&self.starts)?;
        out.slice(&self.slots)?;
        out.slice(&self.frags)
    }

    /// The table `write_to` wrote (`fits` tells whether it can serve a generation).
    pub(super) fn read_from(r: &mut super::arrays::In<'_>) -> std::io::Result<SealedTable> {
        let (dir_bits, key_frag_bits) = (r.u32()?, r.u32()?);
        Ok(SealedTable {
            dir_bits,
            key_frag_bits,
            starts: r.vec::<u32>()?.into_boxed_slice(),
            slots: r.vec::<u32>()?.into_boxed_slice(),
            frags: r.vec::<u16>()?.into_boxed_slice(),
        })
    }

    /// Whether the table is one `build` could have made for a generation of `slots` entries:
    /// its directory in order and covering its postings, each a slot the generation has.
    pub(super) fn fits(&self, slots: usize) -> bool {
        let shaped = self.dir_bits <= MAX_DIR_BITS
            && self.key_frag_bits <= 16
            && self.starts.len() == (1usize << self.dir_bits) + 1
            && self.slots.len() == self.frags.len()
            && self.starts.first() == Some(&0)
            && self
                .starts
                .last()
                .is_some_and(|&e| e as usize == self.slots.len());
        shaped
            && self.starts.windows(2).all(|w| w[0] <= w[1])
            && self.slots.iter().all(|&s| (s as usize) < slots)
    }

    #[inline]
    fn bucket_of(&self, p: u64) -> usize {
        (p & ((1u64 << self.dir_bits) - 1)) as usize
    }

    #[inline]
    fn frag_of(&self, p: u64) -> u16 {
        (p >> self.dir_bits) as u16
    }

    /// Asks the CPU to load `p`'s directory entry (`prefetch_bucket` needs it).
    #[inline]
    pub fn prefetch_dir(&self, p: u64) {
        if let Some(at) = self.starts.get(self.bucket_of(p)) {
            super::prefetch(at);
        }
    }

    /// Asks the CPU to load the newest end of `p`'s bucket, where `scan` starts: its fragments
    /// and its slots, which lie in another array (a fragment within reach reads its slot, a
    /// cache miss of its own otherwise).
    #[inline]
    pub fn prefetch_bucket(&self, p: u64) {
        let hi = self.starts.get(self.bucket_of(p) + 1).copied().unwrap_or(0) as usize;
        if let Some(at) = self.frags.get(hi.wrapping_sub(1)) {
            super::prefetch(at);
        }
        if let Some(at) = self.slots.get(hi.wrapping_sub(1)) {
            super::prefetch(at);
        }
    }

    /// Appends to `out` the slots of `p`'s key whose fragment is within `max_distance` of
    /// `p`'s, among the key's newest `cap` slots, newest first. Returns how many slots the key
    /// has (beyond `cap`, only counted).
    #[inline]
    pub fn scan(&self, p: u64, max_distance: u32, cap: usize, out: &mut Vec<u32>) -> usize {
        let b = self.bucket_of(p);
        let (Some(&lo), Some(&hi)) = (self.starts.get(b), self.starts.get(b + 1)) else {
            return 0;
        };
        let (lo, hi) = (lo as usize, hi as usize);
        let q = self.frag_of(p);
        let key_mask = ((1u32 << self.key_frag_bits) - 1) as u16;
        let frags = &self.frags[lo..hi];
        let slots = &self.slots[lo..hi];
        let mut met = 0;
        let mut i = frags.len();
        while i > 0 && met < cap {
            i -= 1;
            let x = frags[i] ^ q;
            if x & key_mask == 0 {
                met += 1;
                if x.count_ones() <= max_distance {
                    out.push(slots[i]);
                }
            }
        }
        met + frags[..i]
            .iter()
            .filter(|&&f| (f ^ q) & key_mask == 0)
            .count()
    }

    /// Every posting's slot, in no particular order.
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }

    /// Every key's slots, as (the key's bits this table holds, how many slots, the newest),
    /// in no particular order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, usize, u32)> + '_ {
        let key_mask = (1u64 << self.key_frag_bits) - 1;
        self.starts.windows(2).enumerate().flat_map(move |(b, w)| {
            let mut keys: Vec<(u64, usize, u32)> = Vec::new();
            for i in w[0] as usize..w[1] as usize {
                let key = b as u64 | (u64::from(self.frags[i]) & key_mask) << self.dir_bits;
                match keys.iter_mut().find(|k| k.0 == key) {
                    Some(k) => {
                        k.1 += 1;
                        k.2 = self.slots[i];
                    }
                    None => keys.push((key, 1, self.slots[i])),
                }
            }
            keys
        })
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> usize {
        4 * self.starts.len() + 6 * self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The (slot, permuted fingerprint) pairs of the slots that have one.
    fn present(items: &[Option<u64>]) -> Vec<(u32, u64)> {
        (0..items.len() as u32)
            .filter_map(|s| items[s as usize].map(|p| (s, p)))
            .collect()
    }

    #[test]
    fn a_scan_finds_the_keys_near_slots_newest_first_within_the_cap() {
        // 16-bit keys; slots 0..6 share key 7, slot 6 has another key.
        let near = |bits: u64| 7 | bits << 16;
        let items = [
            Some(near(0)),
            Some(near(0b1)),
            Some(near(0b1111)),
            None,
            Some(near(0b11)),
            Some(near(0b111)),
            Some(8 | 1 << 16),
        ];
        let t = SealedTable::build(16, present(&items).into_iter());
        assert_eq!(t.slots.len(), 6);
        let mut out = Vec::new();
        // Six slots take a directory of 3 bits: the fragment keeps the key's 13 other bits and
        // 3 more, so slot 2, 4 bits off with one of them beyond, is left to the record check.
        assert_eq!(t.scan(near(0), 3, 10, &mut out), 5);
        assert_eq!(out, [5, 4, 2, 1, 0]);
        out.clear();
        assert_eq!(t.scan(near(0), 3, 2, &mut out), 5);
        assert_eq!(out, [5, 4]);
        let mut keys: Vec<_> = t.buckets().collect();
        keys.sort();
        assert_eq!(keys, [(7, 5, 5), (8, 1, 6)]);
        // With 65,536 buckets the fragment holds 16 bits beyond the key, and slot 2 is dropped.
        let mut many = items.to_vec();
        many.extend((0..70_000).map(|i| Some(9 + i % 60_000)));
        let t = SealedTable::build(16, present(&many).into_iter());
        out.clear();
        assert_eq!(t.scan(near(0), 3, 10, &mut out), 5);
        assert_eq!(out, [5, 4, 1, 0]);
    }

    #[test]
    fn an_empty_table_scans_nothing() {
        let t = SealedTable::build(16, std::iter::empty());
        let mut out = Vec::new();
        assert_eq!(t.scan(5, 3, 10, &mut out), 0);
        assert!(out.is_empty());
    }

    proptest! {
        // With keys at most 16 bits wider than the directory, a scan gives the slots of the
        // query's key that a scan of every slot would, whatever size the directory took.
        #[test]
        fn a_scan_equals_a_scan_of_every_slot(
            items in proptest::collection::vec(proptest::option::weighted(0.9, 0u64..1 << 24), 0..400),
            key_bits in 1u32..=16,
            q in 0u64..1 << 24,
            pick in any::<proptest::sample::Index>(),
            cap in 1usize..8,
        ) {
            // Queries on an existing key most of the time.
            let held: Vec<u64> = items.iter().flatten().copied().collect();
            let p = if held.is_empty() || q % 4 == 0 { q } else { *pick.get(&held) ^ (q & 0x30000) };
            let t = SealedTable::build(key_bits, present(&items).into_iter());
            let mut out = Vec::new();
            let size = t.scan(p, 3, cap, &mut out);
            let frag_bits = t.dir_bits + 16;
            // The table keeps 16 bits above the directory: the key's rest, then the others.
            let within = |s: u32| {
                let x = items[s as usize].unwrap_or(0) ^ p;
                (x >> t.dir_bits) as u16 as u32 & !((1u32 << (key_bits - t.dir_bits)) - 1)
            };
            let key_mask = (1u64 << key_bits) - 1;
            let same: Vec<u32> = (0..items.len() as u32)
                .rev()
                .filter(|&s| items[s as usize].is_some_and(|x| (x ^ p) & key_mask == 0))
                .collect();
            let want: Vec<u32> = same.iter().copied().take(cap).filter(|&s| within(s).count_ones() <= 3).collect();
            prop_assert_eq!(size, same.len());
            prop_assert!(frag_bits >= key_bits);
            prop_assert_eq!(out, want);
        }
    }
}
