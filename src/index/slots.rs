//! An open-addressing multimap from a 64-bit hash to slots that stores only the slots (four
//! bytes a bucket): the hash of a stored slot is read back from the slot's own record, so a
//! generation's exact-text lookups cost about six bytes an entry instead of a hash map's 20-30.

const EMPTY: u32 = u32::MAX;

/// Slots by hash; the caller supplies each slot's hash (`hash_of`).
#[derive(Debug, Default)]
pub struct SlotTable {
    buckets: Vec<u32>,
    len: usize,
}

impl SlotTable {
    /// Adds `slot`, whose hash is `hash`; `hash_of` gives the hash of any slot already added.
    pub fn insert(&mut self, hash: u64, slot: u32, hash_of: impl Fn(u32) -> u64) {
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            self.grow(&hash_of);
        }
        place(&mut self.buckets, hash, slot);
        self.len += 1;
    }

    /// The slots whose hash is `hash`, in no particular order.
    pub fn find<'a>(
        &'a self,
        hash: u64,
        hash_of: impl Fn(u32) -> u64 + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        let mask = self.buckets.len().wrapping_sub(1);
        let start = if self.buckets.is_empty() {
            0
        } else {
            hash as usize & mask
        };
        (0..self.buckets.len())
            .map(move |i| self.buckets[(start + i) & mask])
            .take_while(|&s| s != EMPTY)
            .filter(move |&s| hash_of(s) == hash)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buckets.capacity() * 4
    }

    fn grow(&mut self, hash_of: &impl Fn(u32) -> u64) {
        let size = (self.buckets.len() * 2).max(16);
        let mut buckets = vec![EMPTY; size];
        for &s in self.buckets.iter().filter(|&&s| s != EMPTY) {
            place(&mut buckets, hash_of(s), s);
        }
        self.buckets = buckets;
    }
}

fn place(buckets: &mut [u32], hash: u64, slot: u32) {
    let mask = buckets.len() - 1;
    let mut i = hash as usize & mask;
    while buckets[i] != EMPTY {
        i = (i + 1) & mask;
    }
    buckets[i] = slot;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Few distinct hashes, so chains collide and share buckets.
        #[test]
        fn finds_exactly_the_slots_of_a_hash(hashes in proptest::collection::vec(0u64..40, 0..3000)) {
            let mut t = SlotTable::default();
            let spread = |h: u64| h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 3;
            for (slot, h) in hashes.iter().enumerate() {
                t.insert(spread(*h), slot as u32, |s| spread(hashes[s as usize]));
            }
            for h in 0..45u64 {
                let mut got: Vec<u32> = t.find(spread(h), |s| spread(hashes[s as usize])).collect();
                got.sort_unstable();
                let want: Vec<u32> = (0..hashes.len() as u32).filter(|&s| hashes[s as usize] == h).collect();
                prop_assert_eq!(got, want);
            }
            prop_assert!(t.bytes() <= 4 * (16 + 2 * 4 * hashes.len() / 3 + 8));
        }
    }
}
