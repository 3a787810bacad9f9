//! Durable state in sled. Index changes arrive in batches at checkpoints: one sled value per
//! (generation, checkpoint) holding every entry added in that interval, keyed by generation then
//! first sequence number, so an expired generation is a handful of key removals. The checkpoint record (input position, output
//! lengths, watermark, next sequence number) is written after the entries; on restart, entries
//! newer than the checkpoint are discarded, so the rebuilt index is exactly the checkpointed one.
//! sled never sits on the per-post query path. Reading it back, generation by generation, is in
//! `generations`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod config;
mod generations;
mod keys;
pub mod sealed;

pub use config::StateConfig;
pub use generations::{Generations, Loaded};

use crate::index::entry::DecodeError;
use crate::index::Entry;
use keys::{entry_key, piece_key, PIECE_BYTES};

const KEY_CHECKPOINT: &[u8] = b"checkpoint";
const KEY_ANALYSIS: &[u8] = b"analysis_id";
const KEY_GENERATION: &[u8] = b"generation_secs";

/// What reading a state dir's entries depends on besides the entries, checked whenever it is
/// opened: a store built under other settings is refused.
#[derive(Clone, Copy, Debug)]
pub struct Identity<'a> {
    /// The analysis settings' identifier (`Config::analysis_id`): stored fingerprints and token
    /// hashes depend on it.
    pub analysis_id: &'a str,
    /// `window.generation_secs`: a generation's number is its start time over this width, so
    /// entries numbered by another one would be read as far older or newer than they are.
    pub generation_secs: i64,
}

/// Errors of the durable store. All are fatal for the process: nothing is committed past them.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// sled could not open the directory for a reason other than its lock or damage.
    #[error("cannot open state dir {path}: {source}{hint}")]
    Open {
        /// The state dir.
        path: PathBuf,
        /// The cause.
        source: sled::Error,
        /// What to do about it, by cause (disk full, permission).
        hint: &'static str,
    },
    /// The directory's database is damaged: sled reports corruption or panics reading it, or
    /// its file has content but no simdedup records (zeroed or truncated).
    #[error("state dir {path} is damaged ({detail}); move it aside or delete it to start fresh (outputs written so far stay valid up to its last checkpoint)")]
    Damaged {
        /// The state dir.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Another process (a running `dedup` worker) holds sled's exclusive lock on the directory.
    #[error("state dir {path} is in use by a running worker (sled lock); stop it, or inspect a copy of the dir")]
    Locked {
        /// The state dir.
        path: PathBuf,
    },
    /// The directory does not hold a simdedup state store.
    #[error("{path} is not a simdedup state dir ({reason})")]
    NotAStateDir {
        /// The directory.
        path: PathBuf,
        /// What is missing.
        reason: &'static str,
    },
    /// A read or write failed.
    #[error("state store error: {0}")]
    Sled(#[from] sled::Error),
    /// A stored record could not be decoded.
    #[error("corrupt state record in {tree}: {source}")]
    Corrupt {
        /// The tree.
        tree: String,
        /// The decoding error.
        source: DecodeError,
    },
    /// The checkpoint record is not valid JSON.
    #[error("corrupt checkpoint record: {0}")]
    Checkpoint(serde_json::Error),
    /// The state was built with settings that change fingerprints.
    #[error("state dir {path} was built with analysis settings {stored:?}, but this run uses {current:?} (weighting, stopwords or format changed); use a fresh --state-dir")]
    AnalysisMismatch {
        /// The state dir.
        path: PathBuf,
        /// What the store holds.
        stored: String,
        /// What this run uses.
        current: String,
    },
    /// The stored entries' generations are numbered by another `window.generation_secs`:
    /// read with this run's, they would be dropped at once (a narrower width) or never expire
    /// (a wider one).
    #[error("state dir {path} numbers its generations by window.generation_secs = {stored}, but this run uses {current}; set it back to {stored}, or use a fresh --state-dir")]
    GenerationMismatch {
        /// The state dir.
        path: PathBuf,
        /// The width the store's generations are numbered by.
        stored: i64,
        /// This run's width.
        current: i64,
    },
}

/// Length an output had at a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputMark {
    /// Path as given on the command line (`-` for stdout).
    pub path: String,
    /// Bytes written up to the checkpoint.
    pub len: u64,
}

/// Progress of one file-pipeline run, for resuming after a crash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Input path (`-` for stdin).
    pub input: String,
    /// Byte offset in the input just past the last checkpointed record.
    pub input_offset: u64,
    /// Input records processed up to the checkpoint.
    pub records: u64,
    /// Output lengths at the checkpoint.
    pub outputs: Vec<OutputMark>,
    /// Whether the run reached the end of its input.
    pub completed: bool,
    /// Verdict counts up to the checkpoint: unique, duplicates, rejected.
    pub counts: [u64; 3],
}

/// The checkpoint record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Sequence number the next input record gets; stored entries with a higher one are
    /// uncommitted leftovers of a crash.
    pub next_seq: u64,
    /// Event-time watermark per partition (one partition, 0, for files).
    pub watermarks: std::collections::BTreeMap<u32, i64>,
    /// Window watermark per partition (what expiry goes by; below `watermarks` after an
    /// unconfirmed outlying time). Absent in checkpoints of earlier versions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub window_marks: std::collections::BTreeMap<u32, i64>,
    /// The file run this checkpoint belongs to.
    pub run: Option<RunRecord>,
    /// A dedup worker's state dir (`run --state-dir`): the changelog offset the stored entries
    /// cover, exclusive (the worker reads the changelog on from there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog_offset: Option<i64>,
    /// A dedup worker's state dir: the progress markers read up to `changelog_offset`, as the
    /// worker serializes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

/// The sled-backed store.
pub struct Store {
    db: sled::Db,
    meta: sled::Tree,
    entries: sled::Tree,
    path: PathBuf,
    /// What it was opened with (`Store::reopened`): the analysis id, the generation width and
    /// sled's cache capacity.
    opened_with: (String, i64, u64),
}

impl StateError {
    /// A stored entry that does not decode.
    pub fn corrupt_entry(source: DecodeError) -> StateError {
        StateError::Corrupt {
            tree: "entries".into(),
            source,
        }
    }
}

impl Store {
    /// Opens (or creates) the store and checks it was built with the same analysis settings and
    /// generation width (a store written before widths were recorded takes this one).
    pub fn open(path: &Path, id: &Identity<'_>, cache_bytes: u64) -> Result<Store, StateError> {
        guarded(path, || Store::open_unguarded(path, id, cache_bytes))
    }

    fn open_unguarded(
        path: &Path,
        id: &Identity<'_>,
        cache_bytes: u64,
    ) -> Result<Store, StateError> {
        let analysis_id = id.analysis_id;
        // A database file with content always holds the analysis id (written and flushed at
        // creation): without it, the file was zeroed or cut and sled silently started empty.
        let had_data = std::fs::metadata(path.join("db")).is_ok_and(|m| m.len() > 0);
        // Checkpoints flush explicitly; sled's periodic background flush would only compete with
        // the pipeline for the core.
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()
            .map_err(|e| open_error(path, e))?;
        let meta = db.open_tree("meta").map_err(|e| open_error(path, e))?;
        match meta.get(KEY_ANALYSIS).map_err(|e| open_error(path, e))? {
            Some(v) if v.as_ref() != analysis_id.as_bytes() => {
                return Err(StateError::AnalysisMismatch {
                    path: path.into(),
                    stored: String::from_utf8_lossy(&v).into_owned(),
                    current: analysis_id.to_string(),
                })
            }
            Some(_) => {}
            None if had_data => {
                return Err(StateError::Damaged {
                    path: path.into(),
                    detail: "its sled database file has content but no simdedup records".into(),
                })
            }
            None => {
                meta.insert(KEY_ANALYSIS, analysis_id.as_bytes())?;
                db.flush().map_err(|e| open_error(path, e))?;
            }
        }
        let entries = db.open_tree("entries")?;
        let store = Store {
            db,
            meta,
            entries,
            path: path.into(),
            opened_with: (analysis_id.to_string(), id.generation_secs, cache_bytes),
        };
        store.check_generation(id.generation_secs, true)?;
        Ok(store)
    }

    /// This store opened afresh, once a restart has read all of it (`rebuild`): sled keeps
    /// structures for every page a full read paged in, whatever its cache capacity
    /// (spacejam/sled#1036), about 3.5 GB after reading the 4.4 GB of a 20M-entry window, and a
    /// new handle starts without them. The memory they held goes back to the system.
    pub fn reopened(self) -> Result<Store, StateError> {
        let store = self.opened_afresh()?;
        release_freed_memory();
        Ok(store)
    }

    /// This store opened afresh with what it was opened with, once sled lets go of its lock.
    fn opened_afresh(self) -> Result<Store, StateError> {
        let path = self.path.clone();
        let (analysis_id, generation_secs, cache_bytes) = self.opened_with.clone();
        drop(self);
        let id = Identity {
            analysis_id: &analysis_id,
            generation_secs,
        };
        after_drop(|| Store::open(&path, &id, cache_bytes))
    }

    /// Opens an existing store for reading only (`inspect`): nothing is created, no tree is
    /// added, the analysis id and generation width are checked but never written. sled itself
    /// has no read-only mode: it takes its exclusive lock (so a running worker makes this fail
    /// with `Locked`) and may run its own log recovery, the same recovery a resumed run would do.
    pub fn open_read_only(
        path: &Path,
        id: &Identity<'_>,
        cache_bytes: u64,
    ) -> Result<Store, StateError> {
        guarded(path, || {
            Store::open_read_only_unguarded(path, id, cache_bytes)
        })
    }

    fn open_read_only_unguarded(
        path: &Path,
        id: &Identity<'_>,
        cache_bytes: u64,
    ) -> Result<Store, StateError> {
        let analysis_id = id.analysis_id;
        let not_state = |reason| StateError::NotAStateDir {
            path: path.into(),
            reason,
        };
        // sled would create a missing directory and database; a typo must not leave one behind.
        if !path.join("db").is_file() || !path.join("conf").is_file() {
            return Err(not_state("no sled database in it"));
        }
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()
            .map_err(|e| open_error(path, e))?;
        let names = db.tree_names();
        for tree in ["meta", "entries"] {
            if !names.iter().any(|n| n.as_ref() == tree.as_bytes()) {
                return Err(not_state(
                    "no simdedup trees in its sled database; a worker writes them at its first checkpoint",
                ));
            }
        }
        let meta = db.open_tree("meta")?;
        match meta.get(KEY_ANALYSIS)? {
            Some(v) if v.as_ref() == analysis_id.as_bytes() => {}
            Some(v) => {
                return Err(StateError::AnalysisMismatch {
                    path: path.into(),
                    stored: String::from_utf8_lossy(&v).into_owned(),
                    current: analysis_id.to_string(),
                })
            }
            None => return Err(not_state("no analysis id")),
        }
        let entries = db.open_tree("entries")?;
        let store = Store {
            db,
            meta,
            entries,
            path: path.into(),
            opened_with: (analysis_id.to_string(), id.generation_secs, cache_bytes),
        };
        store.check_generation(id.generation_secs, false)?;
        Ok(store)
    }

    /// Refuses a store whose generations are numbered by another width than `generation_secs`;
    /// one that does not record its width yet (new, or written by an earlier version) gets this
    /// one if `record`.
    fn check_generation(&self, generation_secs: i64, record: bool) -> Result<(), StateError> {
        match self.meta.get(KEY_GENERATION)? {
            Some(v) => {
                let stored = <[u8; 8]>::try_from(v.as_ref())
                    .map(i64::from_le_bytes)
                    .map_err(|_| StateError::Damaged {
                        path: self.path.clone(),
                        detail: "its generation width record is not 8 bytes".into(),
                    })?;
                if stored != generation_secs {
                    return Err(StateError::GenerationMismatch {
                        path: self.path.clone(),
                        stored,
                        current: generation_secs,
                    });
                }
            }
            None if record => {
                self.meta
                    .insert(KEY_GENERATION, &generation_secs.to_le_bytes())?;
                self.db.flush()?;
            }
            None => {}
        }
        Ok(())
    }

    /// The state dir.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The last checkpoint, if any.
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, StateError> {
        guarded(&self.path, || self.checkpoint_unguarded())
    }

    fn checkpoint_unguarded(&self) -> Result<Option<Checkpoint>, StateError> {
        match self.meta.get(KEY_CHECKPOINT)? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(StateError::Checkpoint),
        }
    }

    /// Persists a checkpoint: the batch of index changes first (one chunk per generation, stored
    /// in pieces of about `PIECE_BYTES`), then the checkpoint record, each made durable before
    /// the next; then deletes generations below `expired_below` (the window's oldest live
    /// generation).
    pub fn commit(
        &self,
        changes: &[(i64, Entry)],
        cp: &Checkpoint,
        expired_below: Option<i64>,
    ) -> Result<(), StateError> {
        self.commit_with(changes, cp, expired_below, None)
    }

    /// `commit` with every generation's value keyed by `chunk` instead of its first entry's
    /// sequence number: for entries of many partitions, whose sequence numbers repeat. `chunk`
    /// must grow from one commit to the next.
    pub fn commit_chunk(
        &self,
        changes: &[(i64, Entry)],
        cp: &Checkpoint,
        expired_below: Option<i64>,
        chunk: u64,
    ) -> Result<(), StateError> {
        self.commit_with(changes, cp, expired_below, Some(chunk))
    }

    /// Deletes every stored entry (the checkpoint record stays until the next commit), and the
    /// sealed generation files kept beside them (`sealed`).
    pub fn clear_entries(&self) -> Result<(), StateError> {
        sealed::SealedDir::of(&self.path)
            .clear()
            .map_err(|e| StateError::Damaged {
                path: self.path.clone(),
                detail: format!("its sealed generation files cannot be removed: {e}"),
            })?;
        guarded(&self.path, || self.remove_generations_below(i64::MAX))
    }

    fn commit_with(
        &self,
        changes: &[(i64, Entry)],
        cp: &Checkpoint,
        expired_below: Option<i64>,
        chunk: Option<u64>,
    ) -> Result<(), StateError> {
        // One chunk per generation, stored as values of about `PIECE_BYTES` each; generations
        // that already expired are not written at all.
        let mut chunks: std::collections::BTreeMap<i64, (u64, Vec<Vec<u8>>)> =
            std::collections::BTreeMap::new();
        for (gen, e) in changes {
            if expired_below.is_some_and(|m| *gen < m) {
                continue;
            }
            let (_, pieces) = chunks
                .entry(*gen)
                .or_insert_with(|| (chunk.unwrap_or(e.key.seq), Vec::new()));
            match pieces.last_mut() {
                Some(piece) if piece.len() < PIECE_BYTES => e.encode(piece),
                _ => {
                    let mut piece = Vec::new();
                    e.encode(&mut piece);
                    pieces.push(piece);
                }
            }
        }
        if !chunks.is_empty() {
            let mut batch = sled::Batch::default();
            for (gen, (first_seq, pieces)) in chunks {
                for (i, value) in pieces.into_iter().enumerate() {
                    batch.insert(piece_key(gen, first_seq, i as u32), value);
                }
            }
            self.entries.apply_batch(batch)?;
            self.db.flush()?;
        }
        let record = serde_json::to_vec(cp).map_err(StateError::Checkpoint)?;
        self.meta.insert(KEY_CHECKPOINT, record)?;
        self.db.flush()?;
        if let Some(min_gen) = expired_below {
            self.remove_generations_below(min_gen)?;
        }
        Ok(())
    }

    /// Deletes every chunk of generations below `min_gen` (a key per piece of each checkpoint
    /// that touched the generation, never one per entry).
    fn remove_generations_below(&self, min_gen: i64) -> Result<(), StateError> {
        let mut batch = sled::Batch::default();
        for k in self.entries.range(..entry_key(min_gen, 0).to_vec()).keys() {
            batch.remove(k?);
        }
        self.entries.apply_batch(batch)?;
        Ok(())
    }

    /// Bytes on disk (sled's own estimate).
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }
}

/// Threads a restart builds generations on: one per core.
pub fn restore_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Names the real cause of a failed open. sled reports a held lock as an `Io` error of kind
/// `Other` whose message names the lock.
fn open_error(path: &Path, source: sled::Error) -> StateError {
    let hint = match &source {
        sled::Error::Io(e) if e.to_string().contains("could not acquire lock") => {
            return StateError::Locked { path: path.into() }
        }
        sled::Error::Corruption { .. } => {
            return StateError::Damaged {
                path: path.into(),
                detail: source.to_string(),
            }
        }
        sled::Error::Io(e) if e.raw_os_error() == Some(28) => {
            "; the disk is full: free space and rerun the same command"
        }
        sled::Error::Io(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            "; check the directory's owner and permissions"
        }
        _ => "",
    };
    StateError::Open {
        path: path.into(),
        source,
        hint,
    }
}

thread_local! {
    /// Set while this thread runs a `guarded` store operation: its panics are not printed.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs a store operation, turning a panic inside sled (it panics on some damaged databases
/// instead of returning an error) into `Damaged`. sled's panic message is kept as the detail
/// and not printed.
///
/// The process's panic hook is wrapped once, and stays wrapped: it stays silent only on a thread
/// inside `guarded`. (Swapping the hook for each call raced with other threads doing the same,
/// and could leave every later panic of the process unprinted.)
fn guarded<T>(path: &Path, op: impl FnOnce() -> Result<T, StateError>) -> Result<T, StateError> {
    static WRAP_HOOK: std::sync::Once = std::sync::Once::new();
    WRAP_HOOK.call_once(|| {
        let printed = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(|g| g.get()) {
                printed(info)
            }
        }));
    });
    let outer = GUARDED.with(|g| g.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op));
    GUARDED.with(|g| g.set(outer));
    r.unwrap_or_else(|panic| {
        let detail = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "sled panicked".into());
        Err(StateError::Damaged {
            path: path.into(),
            detail: format!("sled failed reading it: {detail}"),
        })
    })
}

#[cfg(test)]
mod tests;

/// Hands the memory the allocator holds free back to the system now, rather than after
/// mimalloc's purge delay (`app::alloc`).
fn release_freed_memory() {
    // SAFETY: mi_collect only frees and returns memory no block is using.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// sled lets go of its file lock when its last background reference goes, a moment after the
/// `Db` is dropped: reopening in the same process retries while the lock is still held.
fn after_drop<T>(mut open: impl FnMut() -> Result<T, StateError>) -> Result<T, StateError> {
    for _ in 0..300 {
        match open() {
            Err(StateError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r,
        }
    }
    open()
}
