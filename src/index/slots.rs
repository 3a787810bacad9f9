//! An open-addressing multimap from a 32-bit hash to slots that stores only the slots and an
//! 8-bit tag of the hash (five bytes a bucket): the full hash of a stored slot is read back from
//! the slot's own record only when the tag matches, so a generation's exact-text lookups cost
//! about seven bytes an entry instead of a hash map's 20-30, and a probe scans bytes.

const EMPTY: u32 = u32::MAX;

/// Slots by hash; the caller supplies each slot's hash (`hash_of`).
#[derive(Debug, Default)]
pub struct SlotTable {
    buckets: Vec<u32>,
    /// Per bucket: 0 when empty, else `tag(hash)`.
    tags: Vec<u8>,
    len: usize,
}

/// The top byte (buckets are chosen by the low bits).
fn tag(hash: u32) -> u8 {
    (hash >> 24) as u8 | 1
}

impl SlotTable {
    /// Adds `slot`, whose hash is `hash`; `hash_of` gives the hash of any slot already added.
    pub fn insert(&mut self, hash: u32, slot: u32, hash_of: impl Fn(u32) -> u32) {
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            self.grow(&hash_of);
        }
        place(&mut self.buckets, &mut self.tags, hash, slot);
        self.len += 1;
    }

    /// Makes room for `additional` more slots, so that adding them never grows the table.
    pub fn reserve(&mut self, additional: usize, hash_of: impl Fn(u32) -> u32) {
        while (self.len + additional) * 4 > self.buckets.len() * 3 {
            self.grow(&hash_of);
        }
    }

    /// Asks for the first bucket `find(hash)` reads ahead of it (`index::prefetch`).
    #[inline]
    pub fn prefetch(&self, hash: u32) {
        let i = hash as usize & self.buckets.len().wrapping_sub(1);
        if let (Some(tag), Some(slot)) = (self.tags.get(i), self.buckets.get(i)) {
            super::prefetch(tag);
            super::prefetch(slot);
        }
    }

    /// The slots whose hash is `hash`, in no particular order.
    #[inline]
    pub fn find<'a>(
        &'a self,
        hash: u32,
        hash_of: impl Fn(u32) -> u32 + 'a,
    ) -> impl Iterator<Item = u32> + 'a {
        let mask = self.buckets.len().wrapping_sub(1);
        let start = if self.buckets.is_empty() {
            0
        } else {
            hash as usize & mask
        };
        let t = tag(hash);
        (0..self.buckets.len())
            .map(move |i| (start + i) & mask)
            .take_while(|&i| self.tags[i] != 0)
            .filter(move |&i| self.tags[i] == t)
            .map(|i| self.buckets[i])
            .filter(move |&s| hash_of(s) == hash)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buckets.capacity() * 4 + self.tags.capacity()
    }

    fn grow(&mut self, hash_of: &impl Fn(u32) -> u32) {
        let size = (self.buckets.len() * 2).max(16);
        let mut buckets = vec![EMPTY; size];
        let mut tags = vec![0; size];
        for &s in self.buckets.iter().filter(|&&s| s != EMPTY) {
            place(&mut buckets, &mut tags, hash_of(s), s);
        }
        self.buckets = buckets;
        self.tags = tags;
    }
}

fn place(buckets: &mut [u32], tags: &mut [u8], hash: u32, slot: u32) {
    let mask = buckets.len() - 1;
    let mut i = hash as usize & mask;
    while tags[i] != 0 {
        i = (i + 1) & mask;
    }
    buckets[i] = slot;
    tags[i] = tag(hash);
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
            if hashes.len() % 2 == 1 {
                t.reserve(hashes.len(), |_| unreachable!("the table is empty"));
            }
            let spread = |h: u64| (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 29) as u32;
            for (slot, h) in hashes.iter().enumerate() {
                t.insert(spread(*h), slot as u32, |s| spread(hashes[s as usize]));
            }
            for h in 0..45u64 {
                let mut got: Vec<u32> = t.find(spread(h), |s| spread(hashes[s as usize])).collect();
                got.sort_unstable();
                let want: Vec<u32> = (0..hashes.len() as u32).filter(|&s| hashes[s as usize] == h).collect();
                prop_assert_eq!(got, want);
            }
            prop_assert!(t.bytes() <= 5 * (16 + 2 * 4 * hashes.len() / 3 + 8));
        }
    }
}
