//! Reading the stored entries back, generation by generation (a restart, `inspect`), and where
//! each generation's chunks end (`Store::last_keys`, `Store::covers`, `Store::max_chunk`).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use super::keys::{chunk_seq, generation_keys, key_generation};
use super::{guarded, DecodeError, StateError, Store};
use crate::index::Packed;

/// The stored bytes a restart reads between two openings of its store (`Store::rebuild`). sled
/// keeps in memory every page a full read pages in, whatever its cache capacity
/// (spacejam/sled#1036): 3.5 GB after reading the 20M window's 4.4 GB. Opened afresh after every
/// this many bytes read, the store holds no more than about that much; the reads that follow
/// reuse the memory it let go instead of new memory the system must provide; once the read is
/// done the store is opened afresh a last time and the freed memory handed back.
const REOPEN_EVERY_BYTES: usize = 256 << 20;

/// The store a read goes through: borrowed, or owned and opened afresh after every so many
/// bytes read.
enum Held<'a> {
    Borrowed(&'a Store),
    /// `None` only once opening it afresh failed (the read then ends with that error).
    Owned(Option<Store>, usize),
}

/// What a rebuild read.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Entries per generation, oldest generation first, in insertion order.
    pub generations: Vec<(i64, Packed)>,
    /// Entries read.
    pub entries: usize,
    /// Uncommitted entries discarded.
    pub discarded: usize,
    /// Entries of generations below the live window, skipped (a read-write load deletes them).
    pub expired: usize,
    /// Times the store was opened afresh during the read (`Store::rebuild`).
    pub reopens: usize,
    /// Of a generation read only past a key (`Store::rebuild_skipping`), the committed entries
    /// stored after it, in insertion order.
    pub tails: Vec<(i64, Packed)>,
}

/// Live generations read one at a time, oldest first, each with its entries in insertion
/// order (`Store::generations`), as stored: each record is skimmed for its order key and kept
/// encoded (`Packed`), in the buffers sled read whenever a chunk is kept whole; the index
/// decodes them on its build threads.
pub struct Generations<'a> {
    store: Held<'a>,
    path: PathBuf,
    /// `None` only while the store is opened afresh.
    iter: Option<std::iter::Peekable<sled::Iter>>,
    min_gen: Option<i64>,
    next_seq: u64,
    /// Generations read only past a key (a restart loads them whole as they were up to it,
    /// `sealed`), and what was stored after it.
    skip: BTreeMap<i64, Vec<u8>>,
    tails: Vec<(i64, Packed)>,
    /// Entries read, uncommitted ones discarded, expired ones skipped.
    counts: [usize; 3],
    uncommitted_keys: Vec<sled::IVec>,
    /// Stored bytes read since the store was opened.
    read_bytes: usize,
    reopens: usize,
}

impl<'a> Generations<'a> {
    /// A read of every stored entry through `store`, from the first key.
    fn over(store: Held<'a>, min_gen: Option<i64>, next_seq: u64) -> Self {
        let s = match &store {
            Held::Borrowed(s) => *s,
            Held::Owned(s, _) => s.as_ref().expect("a read starts with its store open"),
        };
        let (path, iter) = (s.path.clone(), Some(s.entries.iter().peekable()));
        Generations {
            store,
            path,
            iter,
            min_gen,
            next_seq,
            skip: BTreeMap::new(),
            tails: Vec::new(),
            counts: [0; 3],
            uncommitted_keys: Vec::new(),
            read_bytes: 0,
            reopens: 0,
        }
    }

    /// Counts so far, as a `Loaded` without generations.
    pub fn counts(&self) -> Loaded {
        Loaded {
            generations: Vec::new(),
            entries: self.counts[0],
            discarded: self.counts[1],
            expired: self.counts[2],
            reopens: self.reopens,
            tails: Vec::new(),
        }
    }

    /// Deletes the uncommitted entries met; returns the counts.
    pub fn finish(self) -> Result<Loaded, StateError> {
        self.finish_held().map(|(_, loaded)| loaded)
    }

    /// `finish`, giving back an owned store.
    fn finish_held(mut self) -> Result<(Option<Store>, Loaded), StateError> {
        let loaded = Loaded {
            tails: std::mem::take(&mut self.tails),
            ..self.counts()
        };
        let (store, owned) = match self.store {
            Held::Borrowed(s) => (Some(s), None),
            Held::Owned(s, _) => (None, s),
        };
        let Some(store) = store.or(owned.as_ref()) else {
            return Err(StateError::Damaged {
                path: self.path,
                detail: "it could not be opened again during the read".into(),
            });
        };
        guarded(&store.path, || {
            for k in self.uncommitted_keys {
                store.entries.remove(k)?;
            }
            Ok(())
        })?;
        Ok((owned, loaded))
    }

    fn next_generation(&mut self) -> Result<Option<(i64, Packed)>, StateError> {
        let mut current: Option<(i64, Packed)> = None;
        loop {
            self.reopen_if_due()?;
            let Some(iter) = self.iter.as_mut() else {
                break;
            };
            // A generation's chunks are contiguous in key order: it ends where another begins.
            let next_gen = match iter.peek() {
                None => break,
                Some(Ok((k, _))) => Some(key_generation(k)),
                Some(Err(_)) => None,
            };
            if let (Some((gen, _)), Some(next)) = (&current, next_gen) {
                if *gen != next {
                    match current.take() {
                        Some(done) if !done.1.is_empty() => return Ok(Some(done)),
                        _ => continue,
                    }
                }
            }
            if let Some(g) = next_gen.filter(|g| self.skip.contains_key(g)) {
                self.seek_past(g)?;
                continue;
            }
            let Some(kv) = iter.next() else {
                break;
            };
            let (k, v) = kv?;
            let gen = key_generation(&k);
            let (_, entries) = current.get_or_insert_with(|| (gen, Packed::default()));
            self.read_bytes += v.len();
            sort_out(
                (self.min_gen, self.next_seq),
                (&mut self.counts, &mut self.uncommitted_keys),
                gen,
                k,
                v,
                entries,
            )?;
        }
        Ok(current.filter(|(_, entries)| !entries.is_empty()))
    }

    /// Reads on from the first key past generation `gen`, whose entries up to its key in `skip`
    /// the caller has otherwise. Its chunks after that key are read: the committed ones into
    /// its tail (`Loaded::tails`), the uncommitted ones (written after the last checkpoint)
    /// counted and deleted as any other's.
    fn seek_past(&mut self, gen: i64) -> Result<(), StateError> {
        let store = match &self.store {
            Held::Borrowed(s) => Some(*s),
            Held::Owned(s, _) => s.as_ref(),
        };
        let Some(store) = store else {
            self.iter = None;
            return Ok(());
        };
        let past = generation_keys(gen).end;
        let from = self.skip.get(&gen).cloned().unwrap_or_default();
        let mut tail = Packed::default();
        for kv in store
            .entries
            .range((Bound::Excluded(from), Bound::Excluded(past.clone())))
        {
            let (k, v) = kv?;
            let at = (self.min_gen, self.next_seq);
            let into = (&mut self.counts, &mut self.uncommitted_keys);
            sort_out(at, into, gen, k, v, &mut tail)?;
        }
        if !tail.is_empty() {
            self.tails.push((gen, tail));
        }
        self.iter = Some(store.entries.range(past..).peekable());
        Ok(())
    }

    /// Opens an owned store afresh once its share of bytes were read through it, and reads on
    /// from the next key.
    fn reopen_if_due(&mut self) -> Result<(), StateError> {
        let Held::Owned(store, every_bytes) = &mut self.store else {
            return Ok(());
        };
        if self.read_bytes < *every_bytes {
            return Ok(());
        }
        let next = match self.iter.as_mut().and_then(|i| i.peek()) {
            Some(Ok((k, _))) => k.clone(),
            // Nothing left, or an error the next read reports.
            _ => return Ok(()),
        };
        self.iter = None;
        let Some(fresh) = store.take().map(Store::opened_afresh).transpose()? else {
            return Ok(());
        };
        self.iter = Some(fresh.entries.range(next..).peekable());
        *store = Some(fresh);
        self.read_bytes = 0;
        self.reopens += 1;
        Ok(())
    }
}

/// Sorts the records of `chunk` out, skimming each (the builders decode them): committed ones
/// of live generations (`min_gen`) go to `out`, without a copy when they are all of the chunk;
/// the keys of chunks holding uncommitted ones (`seq >= next_seq`) are noted.
fn sort_out(
    (min_gen, next_seq): (Option<i64>, u64),
    (counts, uncommitted_keys): (&mut [usize; 3], &mut Vec<sled::IVec>),
    gen: i64,
    key: sled::IVec,
    chunk: sled::IVec,
    out: &mut Packed,
) -> Result<(), StateError> {
    let expired = min_gen.is_some_and(|m| gen < m);
    let mut uncommitted = false;
    out.push_piece(Arc::new(chunk), |k| {
        if k.seq >= next_seq {
            uncommitted = true;
            counts[1] += 1;
        } else if expired {
            counts[2] += 1;
        } else {
            counts[0] += 1;
            return true;
        }
        false
    })
    .map_err(StateError::corrupt_entry)?;
    if uncommitted {
        uncommitted_keys.push(key);
    }
    Ok(())
}

impl Iterator for Generations<'_> {
    type Item = Result<(i64, Packed), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        let path = self.path.clone();
        guarded(&path, || self.next_generation()).transpose()
    }
}

impl Store {
    /// Reads every live generation. Generations below `min_gen` are deleted; entries with
    /// `seq >= next_seq` (written after the last checkpoint) are discarded and deleted.
    pub fn load(&self, min_gen: Option<i64>, next_seq: u64) -> Result<Loaded, StateError> {
        guarded(&self.path, || self.load_unguarded(min_gen, next_seq))
    }

    fn load_unguarded(&self, min_gen: Option<i64>, next_seq: u64) -> Result<Loaded, StateError> {
        let mut gens = self.generations_unguarded(min_gen, next_seq)?;
        let generations = gens.by_ref().collect::<Result<Vec<_>, _>>()?;
        let mut loaded = gens.finish()?;
        loaded.generations = generations;
        Ok(loaded)
    }

    /// What `load` would rebuild, without deleting anything: expired generations are skipped and
    /// counted in `expired`, uncommitted entries in `discarded`.
    pub fn read(&self, min_gen: Option<i64>, next_seq: u64) -> Result<Loaded, StateError> {
        let mut gens = self.reader(min_gen, next_seq);
        let generations = gens.by_ref().collect::<Result<Vec<_>, _>>()?;
        let mut loaded = gens.counts();
        loaded.generations = generations;
        Ok(loaded)
    }

    /// `load`, one generation at a time, so that a restart holds only the generations it is
    /// building: generations below `min_gen` are deleted first, and `Generations::finish` deletes
    /// the uncommitted entries met (`seq >= next_seq`, written after the last checkpoint).
    pub fn generations(
        &self,
        min_gen: Option<i64>,
        next_seq: u64,
    ) -> Result<Generations<'_>, StateError> {
        guarded(&self.path, || self.generations_unguarded(min_gen, next_seq))
    }

    /// A restart: hands `build` the live generations as they are read (it builds each while
    /// the next is read), opening the store afresh after every `REOPEN_EVERY_BYTES` read, and
    /// returns the store opened afresh once more and the counts. Generations below `min_gen` are
    /// deleted first, and the uncommitted entries met (`seq >= next_seq`) after. A read that
    /// fails stops the generations `build` gets and is returned; so is a record `build` could
    /// not decode.
    pub fn rebuild(
        self,
        min_gen: Option<i64>,
        next_seq: u64,
        build: impl FnOnce(&mut dyn Iterator<Item = (i64, Packed)>) -> Result<(), DecodeError>,
    ) -> Result<(Store, Loaded), StateError> {
        self.rebuild_skipping(min_gen, next_seq, BTreeMap::new(), build)
    }

    /// `rebuild`, without reading the generations in `skip` up to the key given for each (the
    /// caller has those entries otherwise: `sealed`), which are not counted; what was stored
    /// after that key is not handed to `build` but returned (`Loaded::tails`).
    pub fn rebuild_skipping(
        self,
        min_gen: Option<i64>,
        next_seq: u64,
        skip: BTreeMap<i64, Vec<u8>>,
        build: impl FnOnce(&mut dyn Iterator<Item = (i64, Packed)>) -> Result<(), DecodeError>,
    ) -> Result<(Store, Loaded), StateError> {
        self.rebuild_reopening_every(REOPEN_EVERY_BYTES, min_gen, next_seq, skip, build)
    }

    /// `rebuild_skipping`, opening the store afresh after every `every_bytes` read.
    pub(super) fn rebuild_reopening_every(
        self,
        every_bytes: usize,
        min_gen: Option<i64>,
        next_seq: u64,
        skip: BTreeMap<i64, Vec<u8>>,
        build: impl FnOnce(&mut dyn Iterator<Item = (i64, Packed)>) -> Result<(), DecodeError>,
    ) -> Result<(Store, Loaded), StateError> {
        if let Some(m) = min_gen {
            guarded(&self.path, || self.remove_generations_below(m))?;
        }
        let mut gens = Generations::over(Held::Owned(Some(self), every_bytes), None, next_seq);
        gens.skip = skip;
        let mut failed = None;
        let built = build(
            &mut gens
                .by_ref()
                .map_while(|g| g.map_err(|e| failed = Some(e)).ok()),
        );
        if let Some(e) = failed {
            return Err(e);
        }
        built.map_err(StateError::corrupt_entry)?;
        let path = gens.path.clone();
        match gens.finish_held()? {
            (Some(store), loaded) => Ok((store.reopened()?, loaded)),
            (None, _) => Err(StateError::Damaged {
                path,
                detail: "its read lost the store".into(),
            }),
        }
    }

    /// The largest chunk number (or first sequence number) of any stored chunk, 0 if none: the
    /// last chunk of one generation or another, one seek or so per generation.
    pub fn max_chunk(&self) -> Result<u64, StateError> {
        let keys = self.last_keys(u64::MAX)?;
        Ok(keys.values().map(|k| chunk_seq(k)).max().unwrap_or(0))
    }

    /// Whether the store holds, committed (its chunk below `next_seq`), the chunk piece `key` of
    /// generation `gen`: then every chunk of the generation up to it is as it was when `key`
    /// was its last (chunks are deleted only with their generation, all at once, or when
    /// uncommitted, and later ones sort after it), which is what a sealed generation's file
    /// was written from (`sealed`).
    pub fn covers(&self, gen: i64, key: &[u8], next_seq: u64) -> Result<bool, StateError> {
        if key.len() < 16 || key_generation(key) != gen || chunk_seq(key) >= next_seq {
            return Ok(false);
        }
        guarded(&self.path, || Ok(self.entries.contains_key(key)?))
    }

    /// Per stored generation, the key of its last committed chunk piece (its chunk's first
    /// sequence number below `next_seq`, as `rebuild` keeps them): it changes with every commit
    /// that adds to the generation (`sealed`). One seek or so per generation.
    pub fn last_keys(&self, next_seq: u64) -> Result<BTreeMap<i64, Vec<u8>>, StateError> {
        guarded(&self.path, || {
            let mut out = BTreeMap::new();
            let mut from = Vec::new();
            while let Some(first) = self.entries.range(from.clone()..).keys().next() {
                let gen = key_generation(&first?);
                let keys = generation_keys(gen);
                from = keys.end.clone();
                let mut keys = self.entries.range(keys).keys();
                while let Some(k) = keys.next_back() {
                    let k = k?;
                    if chunk_seq(&k) < next_seq {
                        out.insert(gen, k.to_vec());
                        break;
                    }
                }
            }
            Ok(out)
        })
    }

    fn generations_unguarded(
        &self,
        min_gen: Option<i64>,
        next_seq: u64,
    ) -> Result<Generations<'_>, StateError> {
        if let Some(m) = min_gen {
            self.remove_generations_below(m)?;
        }
        Ok(self.reader(None, next_seq))
    }

    fn reader(&self, min_gen: Option<i64>, next_seq: u64) -> Generations<'_> {
        Generations::over(Held::Borrowed(self), min_gen, next_seq)
    }
}
