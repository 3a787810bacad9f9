//! A compact multimap from a key (a block-table key or a bigram) to the slots that carry it, in
//! slot order. Small LSM: new postings go to a mutable head of per-key vectors; `seal` merges the
//! head into one immutable run, where every key's slots are contiguous and stored as LEB128
//! varints of the gaps between them, with one small map entry per key. A posting of a common
//! key then takes one byte, of a rare key two or three, instead of four plus a vector per key.
//! A generation that still receives posts is sealed whenever its head grows to a quarter of its
//! run, so merging costs O(1) amortized per posting (about five rewrites each), and the head,
//! which costs a vector per key with more than one new slot, stays small. The run's keys are an
//! open-addressing table (`Ranks`, as a sealed generation's gram dictionary) whose buckets a
//! query asks for ahead of its lookups (`prefetch`): in a generation of millions of entries each
//! lookup is a cache miss, and a query's lookups then overlap instead of following one another.

use std::hash::{BuildHasher, Hash};

use rustc_hash::{FxBuildHasher, FxHashMap};

use super::ranks::Ranks;

/// Head size below which an insert never triggers a merge (a lookup then costs one map probe
/// instead of two in small generations).
const MIN_SEAL: usize = 1 << 16;

/// Words of `Postings::filter`: 4096 bits.
const FILTER_WORDS: usize = 64;

/// Slots by key: a sealed run and a mutable head (newer slots).
#[derive(Debug)]
pub struct Postings<K> {
    /// One bit per key hash (a one-hash Bloom filter over every key held): a lookup of a key
    /// whose bit is clear skips the maps. It pays in small generations, where most keys asked
    /// for are absent; in large ones it is full and costs one load.
    filter: Box<[u64; FILTER_WORDS]>,
    /// Per key: how many slots, and the start of their varints in `run` (as `Ranks` count and
    /// start).
    run_keys: Ranks,
    run: Vec<u8>,
    run_len: usize,
    head: FxHashMap<K, HeadSlots>,
    head_len: usize,
}

/// The head's slots of one key, in slot order. Most keys of a head get a single new slot before
/// it is sealed: that one is held inline, without a vector (an allocation per key was about 4%
/// of the dedup stage's time).
#[derive(Clone, Debug)]
enum HeadSlots {
    One(u32),
    Many(Vec<u32>),
}

impl HeadSlots {
    fn push(&mut self, slot: u32) {
        match self {
            HeadSlots::One(first) => *self = HeadSlots::Many(vec![*first, slot]),
            HeadSlots::Many(v) => v.push(slot),
        }
    }

    fn as_slice(&self) -> &[u32] {
        match self {
            HeadSlots::One(slot) => std::slice::from_ref(slot),
            HeadSlots::Many(v) => v,
        }
    }
}

impl<K> Default for Postings<K> {
    fn default() -> Self {
        Postings {
            filter: Box::new([0; FILTER_WORDS]),
            run_keys: Ranks::with_capacity(0),
            run: Vec::new(),
            run_len: 0,
            head: FxHashMap::default(),
            head_len: 0,
        }
    }
}

/// The slots of one key: the sealed part (varint gaps), then the head's (newer) part.
#[derive(Clone, Copy, Debug, Default)]
pub struct List<'a> {
    sealed: &'a [u8],
    sealed_len: u32,
    head: &'a [u32],
}

impl<'a> List<'a> {
    /// Number of slots.
    #[inline]
    pub fn len(&self) -> usize {
        self.sealed_len as usize + self.head.len()
    }

    /// True when the key has no slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots in slot order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        Gaps {
            bytes: self.sealed,
            left: self.sealed_len,
            prev: 0,
        }
        .chain(self.head.iter().copied())
    }

    /// Appends the slots, in slot order, to `out`.
    #[inline]
    pub fn append_to(&self, out: &mut Vec<u32>) {
        out.reserve(self.len());
        out.extend(self.iter());
    }

    /// The newest slot.
    pub fn last(&self) -> Option<u32> {
        self.head.last().copied().or_else(|| self.iter().last())
    }
}

/// Decoder of a sealed list: each varint is the gap to the previous slot (the first, the slot).
struct Gaps<'a> {
    bytes: &'a [u8],
    left: u32,
    prev: u32,
}

impl Iterator for Gaps<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (v, rest) = read_varint(self.bytes)?;
        self.bytes = rest;
        self.prev = self.prev.wrapping_add(v);
        Some(self.prev)
    }
}

/// Appends `v` as a LEB128 varint.
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends ascending `slots` as varint gaps (the first, the slot itself); returns how many.
fn put_gaps(out: &mut Vec<u8>, slots: impl IntoIterator<Item = u32>) -> u32 {
    let (mut prev, mut n) = (0, 0);
    for slot in slots {
        put_varint(out, slot - prev);
        prev = slot;
        n += 1;
    }
    n
}

/// The varint at the start of `bytes` and the bytes after it (`None` when truncated).
#[inline]
fn read_varint(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let mut v = 0u32;
    for (i, &b) in bytes.iter().enumerate().take(5) {
        v |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, &bytes[i + 1..]));
        }
    }
    None
}

/// `read_varint`, 0 and nothing when truncated.
#[inline]
pub(super) fn take_varint(bytes: &[u8]) -> (u32, &[u8]) {
    read_varint(bytes).unwrap_or((0, &[]))
}

/// The word and bit of `key` in `Postings::filter`.
#[inline]
fn filter_bit<K: Hash>(key: &K) -> (usize, u64) {
    let h = FxBuildHasher.hash_one(key);
    // The top bits: the maps index by the low ones.
    let b = (h >> 52) as usize;
    (b >> 6, 1 << (b & 63))
}

impl<K: Copy + Eq + Hash + Into<u64> + From<u64>> Postings<K> {
    /// Adds `slot` under `key`. Slots must be added in increasing order.
    #[inline]
    pub fn push(&mut self, key: K, slot: u32) {
        self.push_unsealed(key, slot);
        if self.head_len >= MIN_SEAL.max(self.run_len / 4) {
            self.seal();
        }
    }

    /// Adds `slot` under `key` without merging, for a bulk load that seals once at the end.
    #[inline]
    pub fn push_unsealed(&mut self, key: K, slot: u32) {
        let (w, b) = filter_bit(&key);
        self.filter[w] |= b;
        match self.head.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(slot),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(HeadSlots::One(slot));
            }
        }
        self.head_len += 1;
    }

    /// The slots of `key`.
    #[inline]
    pub fn get(&self, key: &K) -> List<'_> {
        let (w, b) = filter_bit(key);
        if self.filter[w] & b == 0 {
            return List::default();
        }
        let (sealed, sealed_len) = match self.run_len {
            0 => (&[][..], 0),
            _ => self
                .run_keys
                .get((*key).into())
                .map_or((&[][..], 0), |(n, s)| (&self.run[s as usize..], n)),
        };
        let head = match self.head_len {
            0 => &[][..],
            _ => self.head.get(key).map_or(&[][..], HeadSlots::as_slice),
        };
        List {
            sealed,
            sealed_len,
            head,
        }
    }

    /// Asks for the run's bucket of `key` ahead of its lookup (`index::prefetch`): a query asks
    /// for all its keys' buckets first, then looks them up.
    #[inline]
    pub fn prefetch(&self, key: &K) {
        if self.run_len != 0 {
            self.run_keys.prefetch((*key).into());
        }
    }

    /// True when no slot is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.run_len == 0 && self.head_len == 0
    }

    /// Total slots held.
    pub fn postings(&self) -> usize {
        self.run_len + self.head_len
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> usize {
        let new = self
            .head
            .keys()
            .filter(|k| self.run_keys.get((**k).into()).is_none())
            .count();
        self.run_keys.len() + new
    }

    /// Every key with its slots (any order).
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (K, List<'_>)> + '_ {
        let sealed = self.run_keys.iter().map(|(key, _, _)| {
            let k = K::from(key);
            (k, self.get(&k))
        });
        let new = self
            .head
            .keys()
            .filter(|k| self.run_keys.get((**k).into()).is_none())
            .map(|k| (*k, self.get(k)));
        sealed.chain(new)
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> usize {
        let head_entry = std::mem::size_of::<(K, HeadSlots)>() + 1;
        FILTER_WORDS * 8
            + self.run.capacity()
            + self.run_keys.bytes()
            + self.head.capacity() * head_entry
            + self.head_len * 4
    }

    /// Whether everything held is in the sealed run (`seal` merged the head), as `write_to`
    /// needs.
    pub fn is_sealed(&self) -> bool {
        self.head_len == 0
    }

    /// Writes the sealed run (`index::snapshot`); the head must be empty (`is_sealed`).
    pub(super) fn write_to(&self, out: &mut super::arrays::Out<'_>) -> std::io::Result<()> {
        debug_assert!(self.is_sealed());
        let keys: Vec<[u64; 2]> = self
            .run_keys
            .iter()
            .map(|(k, n, start)| [k, u64::from(n) << 32 | u64::from(start)])
            .collect();
        out.slice(&keys)?;
        out.slice(&self.run)
    }

    /// The postings `write_to` wrote, each slot below `slots`; any list that does not decode
    /// within the run, or slots out of order or range, is an `InvalidData` error.
    pub(super) fn read_from(r: &mut super::arrays::In<'_>, slots: usize) -> std::io::Result<Self> {
        let bad = || super::arrays::invalid("its late postings are malformed");
        let keys: Vec<[u64; 2]> = r.vec()?;
        let run: Vec<u8> = r.vec()?;
        let mut p = Postings::<K> {
            run_keys: Ranks::with_capacity(keys.len()),
            ..Postings::default()
        };
        for [key, word] in keys {
            let (n, start) = ((word >> 32) as u32, word as u32);
            if n == 0 || p.run_keys.get(key).is_some() {
                return Err(bad());
            }
            let mut bytes = run.get(start as usize..).ok_or_else(bad)?;
            let mut prev = None;
            for _ in 0..n {
                let (gap, rest) = read_varint(bytes).ok_or_else(bad)?;
                let slot = prev.map_or(Some(gap), |s: u32| s.checked_add(gap));
                match slot {
                    Some(s) if (s as usize) < slots => prev = Some(s),
                    _ => return Err(bad()),
                }
                bytes = rest;
            }
            let (w, b) = filter_bit(&K::from(key));
            p.filter[w] |= b;
            p.run_keys.insert(key, n, start);
            p.run_len += n as usize;
        }
        p.run = run;
        Ok(p)
    }

    /// Merges the head into the sealed run (unless the run would outgrow its 32-bit offsets,
    /// which no generation of a sane size reaches: the head then keeps growing).
    pub fn seal(&mut self) {
        if self.head_len == 0 || self.run.len() + 5 * self.head_len > u32::MAX as usize {
            return;
        }
        // Keys go into the run in any order: lookups go through `run_keys`. Each key's old
        // slots (all smaller) come before its new ones.
        let mut head = std::mem::take(&mut self.head);
        let mut run = Vec::with_capacity(self.run.len() + 2 * self.head_len);
        let mut run_keys = Ranks::with_capacity(self.run_keys.len() + head.len());
        let mut encode = |k: u64, slots: &mut dyn Iterator<Item = u32>| {
            let start = run.len() as u32;
            let n = put_gaps(&mut run, slots);
            run_keys.insert(k, n, start);
        };
        for (key, n, start) in self.run_keys.iter() {
            let old = Gaps {
                bytes: &self.run[start as usize..],
                left: n,
                prev: 0,
            };
            let new = head.remove(&K::from(key));
            let new = new.as_ref().map_or(&[][..], HeadSlots::as_slice);
            encode(key, &mut old.chain(new.iter().copied()));
        }
        for (k, slots) in head.drain() {
            encode(k.into(), &mut slots.as_slice().iter().copied());
        }
        run.shrink_to_fit();
        self.run = run;
        self.run_len += self.head_len;
        self.run_keys = run_keys;
        self.head_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_head_key_costs_no_more_than_a_vector() {
        assert!(std::mem::size_of::<HeadSlots>() <= std::mem::size_of::<Vec<u32>>());
        let mut h = HeadSlots::One(3);
        assert_eq!(h.as_slice(), [3]);
        h.push(5);
        h.push(9);
        assert_eq!(h.as_slice(), [3, 5, 9]);
    }

    #[test]
    fn keys_of_every_value_are_held_through_seals() {
        let keys = [0, 1, u64::MAX, u64::MAX - 1, 1 << 63, 0x9E37_79B9_7F4A_7C15];
        let mut p = Postings::default();
        for (slot, k) in keys.iter().cycle().take(40).enumerate() {
            p.prefetch(k);
            p.push(*k, slot as u32);
            if slot % 7 == 0 {
                p.seal();
            }
        }
        p.seal();
        for (i, k) in keys.iter().enumerate() {
            let want: Vec<u32> = (i as u32..40).step_by(keys.len()).collect();
            assert_eq!(p.get(k).iter().collect::<Vec<_>>(), want, "key {k:#x}");
        }
        assert!(p.get(&2).is_empty());
        assert_eq!(p.keys(), keys.len());
        assert_eq!(p.iter().count(), keys.len());
    }

    proptest! {
        // Whatever the interleaving of pushes and seals, every key lists its slots in order.
        #[test]
        fn lists_match_a_plain_map(keys in proptest::collection::vec((0u64..50, 1u32..300), 0..12_000), seals in proptest::collection::vec(0usize..12_000, 0..4)) {
            let mut p = Postings::default();
            let mut want: std::collections::BTreeMap<u64, Vec<u32>> = Default::default();
            // Gaps of every varint width.
            let mut slot = 0u32;
            for (i, (k, step)) in keys.iter().enumerate() {
                slot += step * step;
                p.push(*k, slot);
                want.entry(*k).or_default().push(slot);
                if seals.contains(&i) {
                    p.seal();
                }
            }
            prop_assert_eq!(p.postings(), keys.len());
            prop_assert_eq!(p.keys(), want.len());
            for (k, v) in &want {
                let l = p.get(k);
                prop_assert_eq!(&l.iter().collect::<Vec<_>>(), v);
                let mut r = Vec::new();
                l.append_to(&mut r);
                prop_assert_eq!(&r, v);
                prop_assert_eq!(l.last(), v.last().copied());
            }
            prop_assert!(p.get(&99).is_empty());
            prop_assert_eq!(p.iter().count(), want.len());
        }
    }
}
