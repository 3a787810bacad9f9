//! An open-addressing multimap from a 32-bit hash to slots that stores each slot beside its hash
//! (eight bytes a bucket): a probe reads one array, and a slot whose bucket holds the hash asked
//! for has it, with no read of the slot's own record. A generation's exact-text lookups cost
//! about ten to fifteen bytes an entry, against a hash map's 20-30.

/// An empty bucket: slot `u32::MAX`, which no store reaches.
const EMPTY: u64 = u64::MAX;

/// Slots by hash.
#[derive(Debug, Default)]
pub struct SlotTable {
    /// Per bucket: `hash << 32 | slot`, or `EMPTY`.
    buckets: Vec<u64>,
    len: usize,
}

#[inline]
fn hash_of(bucket: u64) -> u32 {
    (bucket >> 32) as u32
}

impl SlotTable {
    /// Adds `slot`, whose hash is `hash`.
    pub fn insert(&mut self, hash: u32, slot: u32) {
        debug_assert!(slot != u32::MAX);
        if (self.len + 1) * 4 > self.buckets.len() * 3 {
            self.grow();
        }
        place(&mut self.buckets, u64::from(hash) << 32 | u64::from(slot));
        self.len += 1;
    }

    /// `insert` of each `(hash, slot)` of `items` in order, each bucket asked for a few items
    /// ahead: a large table's inserts are a cache miss each, and this way they overlap (a restart
    /// builds whole generations' tables). After `reserve` of them, the same table as inserting
    /// them one by one.
    pub fn insert_all(&mut self, items: &[(u32, u32)]) {
        const AHEAD: usize = 8;
        self.reserve(items.len());
        for (i, &(hash, slot)) in items.iter().enumerate() {
            if let Some(&(h, _)) = items.get(i + AHEAD) {
                self.prefetch(h);
            }
            debug_assert!(slot != u32::MAX);
            place(&mut self.buckets, u64::from(hash) << 32 | u64::from(slot));
            self.len += 1;
        }
    }

    /// Makes room for `additional` more slots, so that adding them never grows the table.
    pub fn reserve(&mut self, additional: usize) {
        while (self.len + additional) * 4 > self.buckets.len() * 3 {
            self.grow();
        }
    }

    /// Asks for the first bucket `find(hash)` reads ahead of it (`index::prefetch`).
    #[inline]
    pub fn prefetch(&self, hash: u32) {
        let i = hash as usize & self.buckets.len().wrapping_sub(1);
        if let Some(b) = self.buckets.get(i) {
            super::prefetch(b);
        }
    }

    /// The slots whose hash is `hash`, in no particular order.
    #[inline]
    pub fn find(&self, hash: u32) -> impl Iterator<Item = u32> + '_ {
        let mask = self.buckets.len().wrapping_sub(1);
        let start = if self.buckets.is_empty() {
            0
        } else {
            hash as usize & mask
        };
        (0..self.buckets.len())
            .map(move |i| self.buckets[(start + i) & mask])
            .take_while(|&b| b != EMPTY)
            .filter(move |&b| hash_of(b) == hash)
            .map(|b| b as u32)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buckets.capacity() * 8
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no slot.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the table (`snapshot`).
    pub(super) fn write_to(&self, out: &mut super::arrays::Out<'_>) -> std::io::Result<()> {
        out.u64(self.len as u64)?;
        out.slice(&self.buckets)
    }

    /// The table `write_to` wrote: refused unless it is a table `insert` could have made, with
    /// as many slots as its buckets hold.
    pub(super) fn read_from(r: &mut super::arrays::In<'_>) -> std::io::Result<SlotTable> {
        let len = r.u64()? as usize;
        let buckets: Vec<u64> = r.vec()?;
        let held = buckets.iter().filter(|&&b| b != EMPTY).count();
        let shaped = buckets.is_empty() || buckets.len().is_power_of_two();
        if !shaped || held != len || len * 4 > buckets.len() * 3 {
            return Err(super::arrays::invalid("its exact-text table is malformed"));
        }
        Ok(SlotTable { buckets, len })
    }

    fn grow(&mut self) {
        let size = (self.buckets.len() * 2).max(16);
        let mut buckets = vec![EMPTY; size];
        for &b in self.buckets.iter().filter(|&&b| b != EMPTY) {
            place(&mut buckets, b);
        }
        self.buckets = buckets;
    }
}

fn place(buckets: &mut [u64], bucket: u64) {
    let mask = buckets.len() - 1;
    let mut i = hash_of(bucket) as usize & mask;
    while buckets[i] != EMPTY {
        i = (i + 1) & mask;
    }
    buckets[i] = bucket;
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
                t.reserve(hashes.len());
            }
            let spread = |h: u64| (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 29) as u32;
            let items: Vec<(u32, u32)> = hashes.iter().enumerate().map(|(slot, h)| (spread(*h), slot as u32)).collect();
            if hashes.len() % 3 == 0 {
                // Half one by one, half at once.
                let (a, b) = items.split_at(items.len() / 2);
                a.iter().for_each(|&(h, s)| t.insert(h, s));
                t.insert_all(b);
            } else {
                items.iter().for_each(|&(h, s)| t.insert(h, s));
            }
            for h in 0..45u64 {
                let mut got: Vec<u32> = t.find(spread(h)).collect();
                got.sort_unstable();
                let want: Vec<u32> = (0..hashes.len() as u32).filter(|&s| hashes[s as usize] == h).collect();
                prop_assert_eq!(got, want);
            }
            prop_assert!(t.bytes() <= 8 * (16 + 2 * 4 * hashes.len() / 3 + 8));
        }
    }
}
