//! Local sled state of a dedup worker (`run --state-dir`): the replicated index and the
//! changelog offset it covers, checkpointed as the worker runs, so that a restarted worker
//! rebuilds its index from local disk and reads only the changelog's tail instead of the whole
//! log. Entries are recorded once: this worker's own as it decides them, others' as the
//! changelog brings them (an echo of an entry the index holds is not recorded again). A crash
//! between checkpoints loses nothing: the changelog is read again from the stored offset, and
//! entries the index already holds are skipped.

use std::path::Path;
use std::time::{Duration, Instant};

use super::super::gate::Progress;
use super::super::KafkaError;
use crate::engine::Engine;
use crate::index::Entry;
use crate::state::{Checkpoint, StateError, Store};

/// Entries recorded since the last checkpoint that force the next one.
const CHECKPOINT_ENTRIES: usize = 50_000;

/// What a restart found in the state dir.
pub(super) struct Restored {
    /// The changelog offset to read on from.
    pub(super) changelog_offset: i64,
    /// The progress markers read up to that offset.
    pub(super) progress: Progress,
}

/// The state dir of a dedup worker.
pub(super) struct LocalState {
    store: Store,
    /// Entries recorded since the last checkpoint, as (generation, entry).
    pending: Vec<(i64, Entry)>,
    /// The changelog offset the index covers up to (exclusive).
    changelog_offset: i64,
    last_commit: Instant,
    last_chunk: u64,
    interval: Duration,
}

fn state_err(e: StateError) -> KafkaError {
    KafkaError::Config(format!("state dir: {e}"))
}

impl LocalState {
    /// Opens (or creates) the state dir and reads its checkpoint, if it holds a dedup worker's
    /// (`restore` then rebuilds the index from it). A state dir written by `simdedup dedup` is
    /// refused.
    pub(super) fn open(
        dir: &Path,
        analysis_id: &str,
        cache_bytes: u64,
        interval: Duration,
    ) -> Result<(LocalState, Option<Restored>), KafkaError> {
        let t = Instant::now();
        let store = Store::open(dir, analysis_id, cache_bytes).map_err(state_err)?;
        let cp = store.checkpoint().map_err(state_err)?;
        tracing::info!(secs = t.elapsed().as_secs_f64(), "local state opened");
        let restored = match cp {
            Some(cp) if cp.run.is_some() || cp.changelog_offset.is_none() => {
                return Err(KafkaError::Config(format!(
                    "state dir {} was written by `simdedup dedup` (a file run), not by a dedup worker: use another --state-dir",
                    dir.display()
                )));
            }
            Some(cp) => Some(Restored {
                changelog_offset: cp.changelog_offset.unwrap_or(0),
                progress: match cp.progress {
                    Some(v) => serde_json::from_value(v).map_err(|e| {
                        KafkaError::Config(format!("state dir: progress record: {e}"))
                    })?,
                    None => Progress::default(),
                },
            }),
            None => None,
        };
        let changelog_offset = restored.as_ref().map_or(0, |r| r.changelog_offset);
        let local = LocalState {
            store,
            pending: Vec::new(),
            changelog_offset,
            last_commit: Instant::now(),
            last_chunk: 0,
            interval,
        };
        Ok((local, restored))
    }

    /// Rebuilds `engine`'s index from the stored entries (after `open` found a checkpoint).
    pub(super) fn restore(&self, engine: &mut Engine) -> Result<(), KafkaError> {
        let t = Instant::now();
        let loaded = self
            .store
            .rebuild(None, u64::MAX, |gens| {
                engine.restore(Default::default(), gens, crate::state::restore_threads())
            })
            .map_err(state_err)?;
        tracing::info!(
            entries = loaded.entries,
            changelog_offset = self.changelog_offset,
            secs = t.elapsed().as_secs_f64(),
            "local state restored"
        );
        Ok(())
    }

    /// Records entries the index gained.
    pub(super) fn record(&mut self, entries: impl IntoIterator<Item = (i64, Entry)>) {
        self.pending.extend(entries);
    }

    /// The changelog record at `offset` was applied.
    pub(super) fn read_to(&mut self, offset: i64) {
        self.changelog_offset = self.changelog_offset.max(offset + 1);
    }

    /// The index is being rebuilt from the changelog's start: what is stored is dropped, and
    /// everything applied from now on is recorded again.
    pub(super) fn clear(&mut self) -> Result<(), KafkaError> {
        self.pending.clear();
        self.changelog_offset = 0;
        self.store.clear_entries().map_err(state_err)
    }

    /// Writes a checkpoint when `force`, when the interval has passed, or when many entries are
    /// pending: the entries first, then the changelog offset and the progress markers.
    pub(super) fn checkpoint(
        &mut self,
        engine: &Engine,
        progress: &Progress,
        force: bool,
    ) -> Result<(), KafkaError> {
        let due =
            self.last_commit.elapsed() >= self.interval || self.pending.len() >= CHECKPOINT_ENTRIES;
        if !(force || due) {
            return Ok(());
        }
        let progress = serde_json::to_value(progress)
            .map_err(|e| KafkaError::Config(format!("state dir: progress record: {e}")))?;
        let cp = Checkpoint {
            // Not a file run: no stored entry counts as uncommitted.
            next_seq: u64::MAX,
            changelog_offset: Some(self.changelog_offset),
            progress: Some(progress),
            ..Checkpoint::default()
        };
        // Chunk keys must not repeat (a repeat would replace an earlier chunk) and must follow
        // the commits' order (a restart reads a generation's chunks in key order).
        let chunk = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            .max(self.last_chunk + 1);
        self.last_chunk = chunk;
        self.store
            .commit_chunk(&self.pending, &cp, engine.min_live_generation(), chunk)
            .map_err(state_err)?;
        self.pending.clear();
        self.last_commit = Instant::now();
        Ok(())
    }
}
