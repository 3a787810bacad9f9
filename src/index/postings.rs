//! A compact multimap from a key (a block-table key or a bigram) to the slots that carry it, in
//! slot order. Small LSM: new postings go to a mutable head of per-key vectors; `seal` merges the
//! head into one immutable run (every key's slots contiguous in one array, one small map entry
//! per key), so a sealed generation costs four bytes a posting instead of a vector per key.
//! A generation that still receives posts is sealed whenever its head grows to half its run, so
//! merging costs O(1) amortized per posting.

use std::hash::Hash;

use rustc_hash::FxHashMap;

/// Head size below which an insert never triggers a merge.
const MIN_SEAL: usize = 4096;

/// Slots by key: a sealed run and a mutable head (newer slots).
#[derive(Debug)]
pub struct Postings<K> {
    run_keys: FxHashMap<K, (u32, u32)>,
    run: Vec<u32>,
    head: FxHashMap<K, Vec<u32>>,
    head_len: usize,
}

impl<K> Default for Postings<K> {
    fn default() -> Self {
        Postings {
            run_keys: FxHashMap::default(),
            run: Vec::new(),
            head: FxHashMap::default(),
            head_len: 0,
        }
    }
}

/// The slots of one key, oldest first: the sealed part, then the head's (newer) part.
#[derive(Clone, Copy, Debug, Default)]
pub struct List<'a> {
    /// Slots in the sealed run.
    pub sealed: &'a [u32],
    /// Slots added since.
    pub head: &'a [u32],
}

impl<'a> List<'a> {
    /// Number of slots.
    pub fn len(&self) -> usize {
        self.sealed.len() + self.head.len()
    }

    /// True when the key has no slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots newest first.
    pub fn rev(&self) -> impl Iterator<Item = u32> + 'a {
        self.head
            .iter()
            .rev()
            .chain(self.sealed.iter().rev())
            .copied()
    }

    /// Slots in slot order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        self.sealed.iter().chain(self.head.iter()).copied()
    }

    /// The newest slot.
    pub fn last(&self) -> Option<u32> {
        self.head.last().or(self.sealed.last()).copied()
    }
}

impl<K: Copy + Eq + Hash + Ord> Postings<K> {
    /// Adds `slot` under `key`. Slots must be added in increasing order.
    pub fn push(&mut self, key: K, slot: u32) {
        self.head.entry(key).or_default().push(slot);
        self.head_len += 1;
        if self.head_len >= MIN_SEAL.max(self.run.len() / 2) {
            self.seal();
        }
    }

    /// The slots of `key`.
    pub fn get(&self, key: &K) -> List<'_> {
        let sealed = self
            .run_keys
            .get(key)
            .map_or(&[][..], |&(s, e)| &self.run[s as usize..e as usize]);
        let head = self.head.get(key).map_or(&[][..], |v| v.as_slice());
        List { sealed, head }
    }

    /// True when no slot is held.
    pub fn is_empty(&self) -> bool {
        self.run.is_empty() && self.head_len == 0
    }

    /// Total slots held.
    pub fn postings(&self) -> usize {
        self.run.len() + self.head_len
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> usize {
        let new = self
            .head
            .keys()
            .filter(|k| !self.run_keys.contains_key(k))
            .count();
        self.run_keys.len() + new
    }

    /// Every key with its slots (any order).
    pub fn iter(&self) -> impl Iterator<Item = (K, List<'_>)> + '_ {
        let sealed = self.run_keys.keys().map(|k| (*k, self.get(k)));
        let new = self
            .head
            .keys()
            .filter(|k| !self.run_keys.contains_key(k))
            .map(|k| (*k, self.get(k)));
        sealed.chain(new)
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> usize {
        let map_entry = std::mem::size_of::<(K, (u32, u32))>() + 1;
        let head_entry = std::mem::size_of::<(K, Vec<u32>)>() + 1 + 16;
        self.run.capacity() * 4
            + self.run_keys.capacity() * map_entry
            + self.head.capacity() * head_entry
            + self.head_len * 4
    }

    /// Merges the head into the sealed run.
    pub fn seal(&mut self) {
        if self.head_len == 0 {
            return;
        }
        let mut keys: Vec<K> = self.run_keys.keys().copied().collect();
        keys.extend(
            self.head
                .keys()
                .filter(|k| !self.run_keys.contains_key(k))
                .copied(),
        );
        keys.sort_unstable();
        let mut run = Vec::with_capacity(self.run.len() + self.head_len);
        let mut run_keys = FxHashMap::default();
        run_keys.reserve(keys.len());
        for k in keys {
            let start = run.len() as u32;
            let list = self.get(&k);
            run.extend_from_slice(list.sealed);
            run.extend_from_slice(list.head);
            run_keys.insert(k, (start, run.len() as u32));
        }
        self.run = run;
        self.run_keys = run_keys;
        self.head = FxHashMap::default();
        self.head_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Whatever the interleaving of pushes and seals, every key lists its slots in order.
        #[test]
        fn lists_match_a_plain_map(keys in proptest::collection::vec(0u64..50, 0..12_000), seals in proptest::collection::vec(0usize..12_000, 0..4)) {
            let mut p = Postings::default();
            let mut want: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
            for (slot, k) in keys.iter().enumerate() {
                p.push(*k, slot as u32);
                want.entry(*k).or_default().push(slot as u32);
                if seals.contains(&slot) {
                    p.seal();
                }
            }
            prop_assert_eq!(p.postings(), keys.len());
            prop_assert_eq!(p.keys(), want.len());
            for (k, v) in &want {
                let l = p.get(k);
                prop_assert_eq!(&l.iter().collect::<Vec<_>>(), v);
                let mut r: Vec<u32> = l.rev().collect();
                r.reverse();
                prop_assert_eq!(&r, v);
                prop_assert_eq!(l.last(), v.last().copied());
            }
            prop_assert!(p.get(&99).is_empty());
            prop_assert_eq!(p.iter().count(), want.len());
        }
    }
}
