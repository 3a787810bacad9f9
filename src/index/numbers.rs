//! Dense numbers for 64-bit keys, in order of first appearance, and how often each was met: how a
//! generation built in one go (a restart) numbers and counts its grams. An open-addressing table
//! of (key, number, count), 16 bytes a bucket and at most half full; `number_all` looks a batch
//! of keys up with their buckets prefetched first, so that the cache misses of a large table
//! overlap instead of following one another, and counts in the bucket it has just read.

/// No key: grams (two 21-bit scalar values) never reach it.
const EMPTY: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Bucket {
    key: u64,
    number: u32,
    count: u32,
}

/// Numbers `0..len()` for the distinct keys seen.
pub struct Numbers {
    buckets: Vec<Bucket>,
    len: u32,
    /// log2 of the bucket count.
    bits: u32,
    /// Bucket of each key of the batch being numbered.
    at: Vec<usize>,
}

impl Default for Numbers {
    fn default() -> Self {
        Numbers {
            buckets: vec![
                Bucket {
                    key: EMPTY,
                    number: 0,
                    count: 0,
                };
                16
            ],
            len: 0,
            bits: 4,
            at: Vec::new(),
        }
    }
}

impl Numbers {
    /// Distinct keys numbered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len as usize
    }

    /// True when no key was numbered.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every key, keeping the table's memory.
    pub fn clear(&mut self) {
        self.buckets.iter_mut().for_each(|b| b.key = EMPTY);
        self.len = 0;
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        super::ranks::home(key, self.bits)
    }

    /// Calls `f(key, number, fresh)` for each key of `keys` in order: its number, and whether
    /// it was numbered just now (a key not seen before gets the next number); counts each key
    /// met. Keys must not be `u64::MAX`.
    pub fn number_all(&mut self, keys: &[u64], mut f: impl FnMut(u64, u32, bool)) {
        debug_assert!(keys.iter().all(|&k| k != EMPTY));
        while 2 * (self.len as usize + keys.len()) > self.buckets.len() {
            self.grow();
        }
        let mut at = std::mem::take(&mut self.at);
        at.clear();
        at.extend(keys.iter().map(|&k| self.home(k)));
        for &i in &at {
            super::prefetch(&self.buckets[i]);
        }
        let mask = self.buckets.len() - 1;
        for (&key, &home) in keys.iter().zip(&at) {
            let mut i = home;
            loop {
                let b = &mut self.buckets[i];
                if b.key == key {
                    b.count += 1;
                    f(key, b.number, false);
                    break;
                }
                if b.key == EMPTY {
                    *b = Bucket {
                        key,
                        number: self.len,
                        count: 1,
                    };
                    f(key, self.len, true);
                    self.len += 1;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        self.at = at;
    }

    /// How often each number's key was met, by number, written to `out` (cleared first).
    pub fn counts(&self, out: &mut Vec<u32>) {
        out.clear();
        out.resize(self.len as usize, 0);
        for b in self.buckets.iter().filter(|b| b.key != EMPTY) {
            out[b.number as usize] = b.count;
        }
    }

    fn grow(&mut self) {
        self.bits += 1;
        let old = std::mem::replace(
            &mut self.buckets,
            vec![
                Bucket {
                    key: EMPTY,
                    number: 0,
                    count: 0,
                };
                1 << self.bits
            ],
        );
        let mask = self.buckets.len() - 1;
        for b in old.into_iter().filter(|b| b.key != EMPTY) {
            let mut i = self.home(b.key);
            while self.buckets[i].key != EMPTY {
                i = (i + 1) & mask;
            }
            self.buckets[i] = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Numbers are dense, in order of first appearance, stable, and survive growth and
        // clearing, and counts are right: the same as numbering with a hash map.
        #[test]
        fn numbers_keys_as_a_hash_map_would(
            batches in proptest::collection::vec(proptest::collection::vec(0u64..3000, 0..80), 0..40)
        ) {
            let mut n = Numbers::default();
            for round in 0..2 {
                let mut want = std::collections::HashMap::new();
                for keys in &batches {
                    let mut got = Vec::new();
                    n.number_all(keys, |k, id, fresh| got.push((k, id, fresh)));
                    let mut expect = Vec::new();
                    for &k in keys {
                        let next = want.len() as u32;
                        let fresh = !want.contains_key(&k);
                        expect.push((k, *want.entry(k).or_insert(next), fresh));
                    }
                    prop_assert_eq!(got, expect, "round {}", round);
                }
                prop_assert_eq!(n.len(), want.len());
                let mut counts = Vec::new();
                n.counts(&mut counts);
                let mut expect = vec![0u32; want.len()];
                for k in batches.iter().flatten() {
                    expect[want[k] as usize] += 1;
                }
                prop_assert_eq!(counts, expect);
                n.clear();
                prop_assert!(n.is_empty());
            }
        }
    }
}
