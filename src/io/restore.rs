//! A start from a state dir: generations kept whole beside the store (`state::sealed`) are loaded
//! as they are, with the entries stored after them (late ones) added, the others rebuilt from the
//! stored entries (`Store::rebuild_skipping`), and the
//! sealed ones just rebuilt written whole for the next start, by their builders as soon as each
//! is built, made durable in the background (`Keeper`), as are those a run seals later, file
//! run or dedup worker (`Keeper::after_checkpoint`). The files are a cache: one that cannot be
//! read or written is logged and left to sled, never a failed start.

use std::collections::BTreeMap;
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::index::cold::ColdCopy;
use crate::index::cold::ColdFactory;
use crate::index::{Built, SealedGeneration, Written};
use crate::state::sealed::{Pending, SealedDir, Usable, HEADER_BYTES};
use crate::state::{Loaded, StateError, Store};

/// Generations with fewer entries are not written whole: they rebuild in milliseconds.
const MIN_WRITTEN_ENTRIES: usize = 1024;

/// A generation that late entries joined after its file was written is loaded from the file,
/// and the entries stored since added to it; once they grow it by a sixteenth it is written
/// again, at most this often: late entries may trickle in (another dedup worker's, through the
/// changelog), and each write costs the generation's arrays on the engine thread.
const REWRITE_AFTER: Duration = Duration::from_secs(60);

/// What a start restored.
#[derive(Debug, Default)]
pub struct Restored {
    /// What was read from sled (the generations loaded whole not included).
    pub loaded: Loaded,
    /// Generations loaded whole, and their entries.
    pub sealed_loaded: (usize, usize),
    /// Entries stored after those generations were written, added to them.
    pub tail_entries: usize,
    /// Generations the restart started writing whole for the next start.
    pub sealed_writing: usize,
    /// What writes them, and those sealed later (`None` without `state.keep_sealed`).
    pub keeper: Option<Keeper>,
}

impl Restored {
    /// Entries restored in all.
    pub fn entries(&self) -> usize {
        self.loaded.entries + self.sealed_loaded.1
    }

    /// Waits until the generations written whole are in place (they are made durable in the
    /// background while the run goes on); returns how many are.
    pub fn finish_writes(&mut self) -> usize {
        self.keeper.as_mut().map_or(0, Keeper::finish)
    }
}

/// How a start treats the sealed generation files.
#[derive(Clone, Copy, Debug)]
pub struct RestoreOptions {
    /// Generations below this one are dropped.
    pub min_gen: Option<i64>,
    /// Stored entries at or past this sequence number were never committed.
    pub next_seq: u64,
    /// Generations built at once.
    pub threads: usize,
    /// Load and write the files (`state.keep_sealed`); without it they are removed.
    pub keep_sealed: bool,
}

/// Restores `engine`'s index from `store` (see the module documentation), with `watermarks` as
/// `Engine::restore` takes them; returns the store, opened afresh (`Store::rebuild`). Each
/// generation rebuilt but the newest is written whole as soon as it is built
/// (`Restored::keeper`).
pub fn restore(
    store: Store,
    engine: &mut Engine,
    watermarks: BTreeMap<u32, i64>,
    opts: RestoreOptions,
) -> Result<(Store, Restored), StateError> {
    let dir = SealedDir::of(store.path());
    if !opts.keep_sealed {
        if let Err(e) = dir.clear() {
            tracing::warn!(dir = %dir.path().display(), error = %e, "cannot remove the sealed generation files");
        }
        let (store, loaded) = store.rebuild(opts.min_gen, opts.next_seq, |gens| {
            engine.restore(watermarks, gens, opts.threads, None)
        })?;
        let done = Restored {
            loaded,
            ..Restored::default()
        };
        return Ok((store, done));
    }
    let digest = engine.index().sealed_digest();
    let last_keys = store.last_keys(opts.next_seq)?;
    let mut done = Restored::default();
    let t = Instant::now();
    let covered = |gen, key: &[u8]| {
        store
            .covers(gen, key, opts.next_seq)
            .map_err(std::io::Error::other)
    };
    let found = dir.usable(digest, opts.min_gen, covered);
    let found = found.unwrap_or_else(|e| {
        tracing::warn!(dir = %dir.path().display(), error = %e, "cannot read the sealed generation files: every generation is rebuilt from the store");
        Vec::new()
    });
    let written_at: BTreeMap<i64, Vec<u8>> = found
        .iter()
        .map(|u| (u.header.gen, u.header.last_key.clone()))
        .collect();
    let read = read_all(found, engine.index().cold_factory().as_ref(), opts.threads);
    // Those not adopted (below the window) are rebuilt from sled, which drops them too.
    drop(engine.adopt_sealed(read));
    let mut skip = BTreeMap::new();
    let mut kept = BTreeMap::new();
    for (gen, entries) in engine.index().generation_sizes() {
        if let Some(key) = written_at.get(&gen) {
            skip.insert(gen, key.clone());
        }
        kept.insert(gen, Kept::now(entries));
        done.sealed_loaded.0 += 1;
        done.sealed_loaded.1 += entries;
    }
    if !skip.is_empty() {
        tracing::info!(
            generations = done.sealed_loaded.0,
            entries = done.sealed_loaded.1,
            secs = t.elapsed().as_secs_f64(),
            "sealed generations loaded"
        );
    }
    let newest = last_keys.keys().next_back().copied();
    let keeper = Keeper::new(dir, digest, kept);
    let keep = |b: Built<'_>| {
        let gen = b.gen();
        if Some(gen) == newest || b.len() < MIN_WRITTEN_ENTRIES {
            return;
        }
        if let Some(key) = last_keys.get(&gen).cloned() {
            let arrays = |w: &mut dyn Write| b.write_arrays(w);
            keeper.keep(gen, b.len(), key, arrays, || b.detach_cold().map(Some));
        }
    };
    let (store, mut loaded) =
        store.rebuild_skipping(opts.min_gen, opts.next_seq, skip, |gens| {
            engine.restore(watermarks, gens, opts.threads, Some(&keep))
        })?;
    // Late entries stored after a generation's file was written join it as they did then.
    let t = Instant::now();
    for (gen, tail) in std::mem::take(&mut loaded.tails) {
        done.tail_entries += engine
            .restore_tail(gen, &tail)
            .map_err(StateError::corrupt_entry)?;
    }
    if done.tail_entries > 0 {
        tracing::info!(
            entries = done.tail_entries,
            secs = t.elapsed().as_secs_f64(),
            "entries stored after the sealed generations' files added to them"
        );
    }
    done.loaded = loaded;
    done.sealed_writing = keeper.started.load(Ordering::Relaxed);
    done.keeper = Some(keeper);
    Ok((store, done))
}

/// A file started, and the cold records that finish it.
type Job = (Pending, Box<dyn ColdCopy>);

/// A generation with a file (loaded, written, or tried: a failure is not tried again until the
/// generation grows).
#[derive(Clone, Copy, Debug)]
struct Kept {
    /// Its entries when the file was written.
    entries: usize,
    /// When.
    at: Instant,
}

impl Kept {
    fn now(entries: usize) -> Kept {
        Kept {
            entries,
            at: Instant::now(),
        }
    }

    /// Whether a generation of `entries` entries is due to be written again: late entries grew
    /// it by a sixteenth since its file, and the last write is old enough (`REWRITE_AFTER`).
    fn stale(&self, entries: usize) -> bool {
        entries > self.entries + self.entries / 16 && self.at.elapsed() >= REWRITE_AFTER
    }
}

/// Writes sealed generations whole (`state::sealed`): the index arrays on the calling thread,
/// the cold records, the syncs and the move into place on a thread of its own, so that neither a
/// restart's builders nor a running pipeline wait on the disk.
pub struct Keeper {
    dir: SealedDir,
    digest: u64,
    /// Generations with a file.
    kept: Mutex<BTreeMap<i64, Kept>>,
    started: AtomicUsize,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    writer: Option<std::thread::JoinHandle<usize>>,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keeper").field("dir", &self.dir).finish()
    }
}

impl Keeper {
    fn new(dir: SealedDir, digest: u64, kept: BTreeMap<i64, Kept>) -> Keeper {
        let (tx, rx) = mpsc::channel::<Job>();
        let writer_dir = dir.clone();
        let writer = std::thread::spawn(move || {
            let mut n = 0;
            for (p, mut cold) in rx {
                let gen = p.gen();
                match p.finish(&mut *cold) {
                    Ok(_) => n += 1,
                    Err(e) => write_failed(gen, &writer_dir, &e),
                }
            }
            n
        });
        Keeper {
            dir,
            digest,
            kept: Mutex::new(kept),
            started: AtomicUsize::new(0),
            tx: Mutex::new(Some(tx)),
            writer: Some(writer),
        }
    }

    /// Starts the file of generation `gen`, of `entries` entries, unless it has one that is not
    /// stale (`Kept::stale`): `arrays` writes its index arrays (`None`: it cannot be written
    /// whole), `cold` detaches its cold records; `last_key` is its last stored chunk key, which
    /// must cover exactly what `arrays` writes. Whether it started.
    fn keep(
        &self,
        gen: i64,
        entries: usize,
        last_key: Vec<u8>,
        arrays: impl FnOnce(&mut dyn Write) -> std::io::Result<Option<Written>>,
        cold: impl FnOnce() -> std::io::Result<Option<Box<dyn ColdCopy>>>,
    ) -> bool {
        let due = self.kept.lock().is_ok_and(|mut k| {
            let due = k.get(&gen).is_none_or(|f| f.stale(entries));
            if due {
                k.insert(gen, Kept::now(entries));
            }
            due
        });
        if !due {
            return false;
        }
        let started = self
            .dir
            .write(gen, self.digest, last_key, arrays)
            .and_then(|p| Ok(p.zip(cold()?)));
        match started {
            Ok(Some(job)) => {
                self.started.fetch_add(1, Ordering::Relaxed);
                if let Some(tx) = self.tx.lock().ok().as_ref().and_then(|t| t.as_ref()) {
                    let _ = tx.send(job);
                }
                true
            }
            Ok(None) => false,
            Err(e) => {
                write_failed(gen, &self.dir, &e);
                false
            }
        }
    }

    /// After a checkpoint, writes each sealed generation (all but the newest) that has no file
    /// yet, or a stale one (`Kept::stale`), and removes the files of those that expired. The
    /// engine's index must hold exactly the stored entries of every generation but those
    /// `unstored` names (a dedup worker's with entries not echoed by the changelog yet: stored
    /// later); `next_seq` is the checkpoint's (a file run's: what is stored past it was never
    /// committed). What late entries added to a generation is merged first
    /// (`Engine::settle_generation`). Its arrays are written here, the rest in the background.
    pub fn after_checkpoint(
        &self,
        store: &Store,
        engine: &mut Engine,
        next_seq: u64,
        unstored: &dyn Fn(i64) -> bool,
    ) {
        let sizes = engine.index().generation_sizes();
        let newest = sizes.last().map(|g| g.0);
        let oldest = sizes.first().map(|g| g.0);
        // The files of generations that expired go.
        let kept = match self.kept.lock() {
            Ok(mut kept) => {
                while let Some((&gen, _)) = kept
                    .first_key_value()
                    .filter(|(&g, _)| oldest.is_none_or(|o| g < o))
                {
                    self.dir.remove(gen);
                    kept.remove(&gen);
                }
                kept.clone()
            }
            Err(_) => return,
        };
        let due: Vec<(i64, usize)> = sizes
            .into_iter()
            .filter(|&(gen, entries)| {
                Some(gen) != newest
                    && entries >= MIN_WRITTEN_ENTRIES
                    && kept.get(&gen).is_none_or(|f| f.stale(entries))
                    && !unstored(gen)
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let keys = match store.last_keys(next_seq) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the sealed generations");
                return;
            }
        };
        for (gen, entries) in due {
            let Some(key) = keys.get(&gen).cloned() else {
                continue;
            };
            let t = Instant::now();
            let rewrite = kept.contains_key(&gen);
            engine.settle_generation(gen);
            let index = engine.index();
            let arrays = |w: &mut dyn Write| index.write_sealed(gen, w);
            if self.keep(gen, entries, key, arrays, || index.detach_cold(gen)) {
                let secs = t.elapsed().as_secs_f64();
                tracing::info!(
                    gen,
                    entries,
                    rewrite,
                    secs,
                    "sealed generation written whole"
                );
            }
        }
    }

    /// Forgets every file (the state's entries were cleared, and the files with them).
    pub fn forget(&self) {
        if let Ok(mut kept) = self.kept.lock() {
            kept.clear();
        }
    }

    /// Waits until every file started is in place; returns how many are.
    pub fn finish(&mut self) -> usize {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let t = Instant::now();
        let done = self.writer.take().map_or(0, |w| {
            w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
        });
        if done > 0 {
            tracing::info!(
                generations = done,
                waited_secs = t.elapsed().as_secs_f64(),
                "sealed generations kept for the next start"
            );
        }
        done
    }
}

fn write_failed(gen: i64, dir: &SealedDir, e: &std::io::Error) {
    tracing::warn!(gen, dir = %dir.path().display(), error = %e, "cannot write a sealed generation: the next start rebuilds it from the store");
}

/// Reads the usable files, up to `threads` at once; a file that does not read back is removed
/// and its generation left to sled.
fn read_all(found: Vec<Usable>, cold: &dyn ColdFactory, threads: usize) -> Vec<SealedGeneration> {
    let queue = Mutex::new(found);
    let read = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let Some(u) = queue.lock().ok().and_then(|mut q| q.pop()) else {
                    break;
                };
                match read_one(&u, cold) {
                    Ok(g) => read.lock().unwrap_or_else(|p| p.into_inner()).push(g),
                    Err(e) => {
                        tracing::warn!(file = %u.path.display(), error = %e, "a sealed generation file does not read back: its generation is rebuilt from the store");
                        let _ = std::fs::remove_file(&u.path);
                    }
                }
            });
        }
    });
    read.into_inner().unwrap_or_else(|p| p.into_inner())
}

fn read_one(u: &Usable, cold: &dyn ColdFactory) -> std::io::Result<SealedGeneration> {
    let h = &u.header;
    let records = cold.load(
        h.gen,
        u.file.try_clone()?,
        h.cold_offset(),
        h.arrays.cold_bytes,
    )?;
    let mut r = BufReader::with_capacity(1 << 20, u.file.try_clone()?);
    r.seek(SeekFrom::Start(HEADER_BYTES))?;
    let g = SealedGeneration::read(h.gen, &mut r, h.arrays.bytes, h.arrays.hash, records)?;
    if g.held().len() as u64 != h.arrays.entries {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "it holds another number of entries than its header says",
        ));
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A file is written again only once late entries grew its generation by a sixteenth, and
    // not sooner than `REWRITE_AFTER` after its last write.
    #[test]
    fn a_file_is_written_again_once_late_entries_grew_it_enough_and_long_enough_after() {
        let old = Instant::now()
            .checked_sub(REWRITE_AFTER + Duration::from_secs(1))
            .expect("a monotonic clock past the rewrite interval");
        let kept = Kept {
            entries: 1600,
            at: old,
        };
        assert!(!kept.stale(1600));
        assert!(!kept.stale(1700), "a sixteenth exactly");
        assert!(kept.stale(1701));
        assert!(!Kept::now(1600).stale(100_000), "written just now");
    }
}
