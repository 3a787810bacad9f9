//! Reading the stored entries back, generation by generation (a restart, `inspect`).

use std::sync::Arc;

use super::keys::key_generation;
use super::{guarded, DecodeError, StateError, Store};
use crate::index::Packed;

/// What a rebuild read.
pub struct Loaded {
    /// Entries per generation, oldest generation first, in insertion order.
    pub generations: Vec<(i64, Packed)>,
    /// Entries read.
    pub entries: usize,
    /// Uncommitted entries discarded.
    pub discarded: usize,
    /// Entries of generations below the live window, skipped (a read-write load deletes them).
    pub expired: usize,
}

/// Live generations read one at a time, oldest first, each with its entries in insertion
/// order (`Store::generations`), as stored: each record is skimmed for its order key and kept
/// encoded (`Packed`), in the buffers sled read whenever a chunk is kept whole; the index
/// decodes them on its build threads.
pub struct Generations<'a> {
    store: &'a Store,
    iter: std::iter::Peekable<sled::Iter>,
    min_gen: Option<i64>,
    next_seq: u64,
    /// Entries read, uncommitted ones discarded, expired ones skipped.
    counts: [usize; 3],
    uncommitted_keys: Vec<sled::IVec>,
}

impl Generations<'_> {
    /// Counts so far, as a `Loaded` without generations.
    pub fn counts(&self) -> Loaded {
        Loaded {
            generations: Vec::new(),
            entries: self.counts[0],
            discarded: self.counts[1],
            expired: self.counts[2],
        }
    }

    /// Deletes the uncommitted entries met; returns the counts.
    pub fn finish(self) -> Result<Loaded, StateError> {
        let (store, loaded) = (self.store, self.counts());
        guarded(&store.path, || {
            for k in self.uncommitted_keys {
                store.entries.remove(k)?;
            }
            Ok(loaded)
        })
    }

    fn next_generation(&mut self) -> Result<Option<(i64, Packed)>, StateError> {
        while let Some(kv) = self.iter.next() {
            let (k, v) = kv?;
            let gen = key_generation(&k);
            let mut entries = Packed::default();
            self.sort_out(gen, k, v, &mut entries)?;
            // A generation's chunks are contiguous in key order.
            while let Some(Ok((k, _))) = self.iter.peek() {
                if key_generation(k) != gen {
                    break;
                }
                let Some(Ok((k, v))) = self.iter.next() else {
                    break;
                };
                self.sort_out(gen, k, v, &mut entries)?;
            }
            if !entries.is_empty() {
                return Ok(Some((gen, entries)));
            }
        }
        Ok(None)
    }

    /// Sorts the records of `chunk` out, skimming each (the builders decode them): committed
    /// ones of live generations go to `out`, without a copy when they are all of the chunk.
    fn sort_out(
        &mut self,
        gen: i64,
        key: sled::IVec,
        chunk: sled::IVec,
        out: &mut Packed,
    ) -> Result<(), StateError> {
        let expired = self.min_gen.is_some_and(|m| gen < m);
        let mut uncommitted = false;
        let (next_seq, counts) = (self.next_seq, &mut self.counts);
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
            self.uncommitted_keys.push(key);
        }
        Ok(())
    }
}

impl Iterator for Generations<'_> {
    type Item = Result<(i64, Packed), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        let store = self.store;
        guarded(&store.path, || self.next_generation()).transpose()
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

    /// A restart: hands `build` the live generations as `generations` reads them (it builds
    /// each while the next is read) and returns the counts. A read that fails stops the
    /// generations `build` gets and is returned; so is a record `build` could not decode.
    pub fn rebuild(
        &self,
        min_gen: Option<i64>,
        next_seq: u64,
        build: impl FnOnce(&mut dyn Iterator<Item = (i64, Packed)>) -> Result<(), DecodeError>,
    ) -> Result<Loaded, StateError> {
        let mut gens = self.generations(min_gen, next_seq)?;
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
        gens.finish()
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
        Generations {
            store: self,
            iter: self.entries.iter().peekable(),
            min_gen,
            next_seq,
            counts: [0; 3],
            uncommitted_keys: Vec::new(),
        }
    }
}
