//! A sealed generation's gram dictionary as it is built (see `prefix`; the index then moves it
//! into its joint table of all sealed generations' dictionaries, `columns`): per gram, how many
//! of its entries hold it and where its prefix lists start; also the run keys of `postings`
//! (per key, how many slots and where their varints start). Built once, never grown: an
//! open-addressing table of (key, count, start), 16 bytes a bucket and at most three quarters
//! full, about what a hash map takes. A query looks all its keys up at once (`get_all`) with
//! their buckets prefetched first: in a generation of millions of entries each lookup is a
//! cache miss, and those misses then overlap instead of following one another.

/// The home bucket of `key` in an open-addressing table of `2^bits` buckets (a multiplicative
/// hash: its top bits).
#[inline]
pub(super) fn home(key: u64, bits: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
}

/// log2 of the bucket count of an open-addressing table that holds `n` keys at most three
/// quarters full (four buckets at least).
pub(super) fn bits_for(n: usize) -> u32 {
    (n + n / 3 + 1).next_power_of_two().trailing_zeros().max(2)
}

/// A bucket; vacant while its count is 0 (every key held has a count of one at least), so any
/// key, `u64::MAX` too, can be held.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    gram: u64,
    count: u32,
    start: u32,
}

/// Key → (count, start): a gram's entries and lists, a run key's slots and varints.
#[derive(Debug)]
pub struct Ranks {
    buckets: Box<[Bucket]>,
    /// log2 of the bucket count.
    bits: u32,
    len: usize,
}

impl Default for Ranks {
    fn default() -> Self {
        Ranks::with_capacity(0)
    }
}

impl Ranks {
    /// A table that holds `n` grams.
    pub fn with_capacity(n: usize) -> Ranks {
        let bits = bits_for(n);
        Ranks {
            buckets: vec![Bucket::default(); 1 << bits].into_boxed_slice(),
            bits,
            len: 0,
        }
    }

    #[inline]
    fn home(&self, gram: u64) -> usize {
        home(gram, self.bits)
    }

    /// Adds `gram`, not yet in the table, with a count of one at least. Panics past the
    /// capacity it was made for.
    pub fn insert(&mut self, gram: u64, count: u32, start: u32) {
        assert!(
            4 * (self.len + 1) <= 3 * self.buckets.len(),
            "gram table full"
        );
        debug_assert!(count > 0 && self.get(gram).is_none());
        let mask = self.buckets.len() - 1;
        let mut i = self.home(gram);
        while self.buckets[i].count != 0 {
            i = (i + 1) & mask;
        }
        self.buckets[i] = Bucket { gram, count, start };
        self.len += 1;
    }

    /// The count and start of `gram`, if the table holds it.
    #[inline]
    pub fn get(&self, gram: u64) -> Option<(u32, u32)> {
        let mask = self.buckets.len() - 1;
        let mut i = self.home(gram);
        loop {
            let b = &self.buckets[i];
            if b.count == 0 {
                return None;
            }
            if b.gram == gram {
                return Some((b.count, b.start));
            }
            i = (i + 1) & mask;
        }
    }

    /// Asks for the home bucket of `gram` ahead of its lookup (`index::prefetch`).
    #[inline]
    pub fn prefetch(&self, gram: u64) {
        super::prefetch(&self.buckets[self.home(gram)]);
    }

    /// `prefetch` of each of `grams`.
    #[inline]
    pub fn prefetch_all(&self, grams: &[u64]) {
        for &g in grams {
            self.prefetch(g);
        }
    }

    /// `f(gram, get(gram))` for each of `grams` in order, their buckets prefetched first.
    #[inline]
    pub fn get_all(&self, grams: &[u64], mut f: impl FnMut(u64, Option<(u32, u32)>)) {
        self.prefetch_all(grams);
        for &g in grams {
            f(g, self.get(g));
        }
    }

    /// Every gram held, with its count and start, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.buckets
            .iter()
            .filter(|b| b.count != 0)
            .map(|b| (b.gram, b.count, b.start))
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<Bucket>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // The table answers as a hash map holding the same grams does, one at a time and in
        // batches, and keeps at least a quarter of its buckets free.
        #[test]
        fn answers_as_a_hash_map(grams in proptest::collection::btree_set(prop_oneof![0u64..1 << 42, Just(u64::MAX), Just(0)], 0..2000), asked in proptest::collection::vec(0u64..1 << 42, 0..50)) {
            let mut t = Ranks::with_capacity(grams.len());
            let mut want = std::collections::HashMap::new();
            for (i, &g) in grams.iter().enumerate() {
                // Every key held has a count of one at least.
                t.insert(g, i as u32 + 1, 7 * i as u32);
                want.insert(g, (i as u32 + 1, 7 * i as u32));
            }
            prop_assert!(4 * grams.len() <= 3 * t.buckets.len());
            let asked: Vec<u64> = asked.into_iter().chain(grams.iter().copied().take(50)).collect();
            let mut got = Vec::new();
            t.get_all(&asked, |g, r| got.push((g, r)));
            let expect: Vec<_> = asked.iter().map(|g| (*g, want.get(g).copied())).collect();
            prop_assert_eq!(got, expect);
            let mut all: Vec<_> = t.iter().collect();
            all.sort_unstable();
            let mut expect: Vec<_> = want.iter().map(|(g, (c, s))| (*g, *c, *s)).collect();
            expect.sort_unstable();
            prop_assert_eq!(all, expect);
        }
    }
}
