//! Local sled state of a dedup worker (`run --state-dir`): the replicated index and the
//! changelog offset it covers, checkpointed as the worker runs, so that a restarted worker
//! rebuilds its index from local disk and reads only the changelog's tail instead of the whole
//! log. Entries are recorded once, as the changelog brings them: others' when the index gains
//! them, this worker's own when they come back (`Unconfirmed`), so the state never holds an
//! entry the changelog lacks. A crash between checkpoints loses nothing: the changelog is read
//! again from the stored offset, and entries the index already holds are skipped.
//! Sealed generations are kept whole beside the entries (`state.keep_sealed`, `io::restore`):
//! loaded at a start, written when a start rebuilds them, and written after the checkpoint that
//! stores the last of their entries when the worker seals them while it runs.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use super::super::gate::Progress;
use super::super::KafkaError;
use crate::engine::Engine;
use crate::index::{Entry, OrderKey};
use crate::io::restore::Keeper;
use crate::state::{Checkpoint, Identity, StateError, Store};

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
    /// This worker's own entries not read back from the changelog yet.
    unconfirmed: Unconfirmed,
    /// The changelog offset the index covers up to (exclusive).
    changelog_offset: i64,
    last_commit: Instant,
    last_chunk: u64,
    interval: Duration,
    /// Writes sealed generations whole (`None` before `restore`, or with `keep_sealed` off).
    keeper: Option<Keeper>,
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
        generation_secs: i64,
        cache_bytes: u64,
        interval: Duration,
    ) -> Result<(LocalState, Option<Restored>), KafkaError> {
        let t = Instant::now();
        let id = Identity {
            analysis_id,
            generation_secs,
        };
        let store = Store::open(dir, &id, cache_bytes).map_err(state_err)?;
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
        // Chunk keys go on from the largest stored, even if the clock went back since: a
        // generation's newest chunk always sorts last, which is what tells a sealed generation's
        // file from a stale one (`state::sealed`).
        let last_chunk = store.max_chunk().map_err(state_err)?;
        let local = LocalState {
            store,
            pending: Vec::new(),
            unconfirmed: Unconfirmed::default(),
            changelog_offset,
            last_commit: Instant::now(),
            last_chunk,
            interval,
            keeper: None,
        };
        Ok((local, restored))
    }

    /// Rebuilds `engine`'s index from the stored entries (none in a new state dir), opening
    /// the store afresh as it reads (`Store::rebuild`). With `keep_sealed`
    /// (`state.keep_sealed`), sealed generations kept whole are loaded and those rebuilt
    /// written whole (`io::restore`), made durable in the background while the worker runs;
    /// the generations it seals later are written after checkpoints (`checkpoint`). Returns
    /// the entries restored, and how many of them were loaded whole.
    pub(super) fn restore(
        mut self,
        engine: &mut Engine,
        keep_sealed: bool,
    ) -> Result<(LocalState, usize, usize), KafkaError> {
        let t = Instant::now();
        let opts = crate::io::restore::RestoreOptions {
            min_gen: None,
            next_seq: u64::MAX,
            threads: crate::state::restore_threads(),
            keep_sealed,
        };
        let (store, restored) =
            crate::io::restore::restore(self.store, engine, Default::default(), opts)
                .map_err(state_err)?;
        self.store = store;
        let entries = restored.entries();
        tracing::info!(
            entries,
            sealed_loaded = restored.sealed_loaded.1,
            sealed_writing = restored.sealed_writing,
            store_reopens = restored.loaded.reopens,
            changelog_offset = self.changelog_offset,
            secs = t.elapsed().as_secs_f64(),
            "local state restored"
        );
        self.keeper = restored.keeper;
        Ok((self, entries, restored.sealed_loaded.1))
    }

    /// Notes entries this worker decided: recorded once the changelog brings them back
    /// (`confirm`).
    pub(super) fn decided(&mut self, entries: impl IntoIterator<Item = (i64, Entry)>) {
        self.unconfirmed.decided(entries);
    }

    /// Takes this worker's own entry with generation `gen` and key `key` off the unconfirmed
    /// ones, if it is one, and records it: the changelog holds it now.
    pub(super) fn confirm(&mut self, gen: i64, key: &OrderKey) -> bool {
        match self.unconfirmed.echoed(gen, key) {
            Some(e) => {
                self.pending.push((gen, e));
                true
            }
            None => false,
        }
    }

    /// Records an entry of another worker that the index gained from the changelog.
    pub(super) fn record(&mut self, gen: i64, entry: Entry) {
        self.pending.push((gen, entry));
    }

    /// The changelog record at `offset` was applied.
    pub(super) fn read_to(&mut self, offset: i64) {
        self.changelog_offset = self.changelog_offset.max(offset + 1);
    }

    /// The index is being rebuilt from the changelog's start: what is stored is dropped, and
    /// everything applied from now on is recorded again.
    pub(super) fn clear(&mut self) -> Result<(), KafkaError> {
        self.pending.clear();
        self.unconfirmed = Unconfirmed::default();
        self.changelog_offset = 0;
        if let Some(k) = &self.keeper {
            k.forget();
        }
        self.store.clear_entries().map_err(state_err)
    }

    /// Writes a checkpoint when `force`, when the interval has passed, or when many entries are
    /// pending: the entries first, then the changelog offset and the progress markers; then
    /// the sealed generations whose entries are all stored now are written whole
    /// (`Keeper::after_checkpoint`).
    pub(super) fn checkpoint(
        &mut self,
        engine: &mut Engine,
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
        // The index holds what is stored now, and this worker's entries not echoed yet.
        if let Some(k) = &self.keeper {
            let unconfirmed = &self.unconfirmed;
            k.after_checkpoint(&self.store, engine, u64::MAX, &|gen| unconfirmed.holds(gen));
        }
        Ok(())
    }

    /// Waits until the generation files being written are in place.
    pub(super) fn finish(&mut self) {
        if let Some(k) = self.keeper.as_mut() {
            k.finish();
        }
    }
}

/// A worker's own index entries between deciding them and reading them back from the
/// changelog. A checkpoint that stored one before the changelog held it could outlive it: after
/// a crash the post is decided again, finds its own entry in the restored index, and sends
/// nothing, so no other worker would ever get the entry.
#[derive(Default)]
struct Unconfirmed(HashMap<(i64, OrderKey), Entry>);

impl Unconfirmed {
    fn decided(&mut self, entries: impl IntoIterator<Item = (i64, Entry)>) {
        self.0
            .extend(entries.into_iter().map(|(gen, e)| ((gen, e.key), e)));
    }

    /// Whether an entry of generation `gen` is still to be read back.
    fn holds(&self, gen: i64) -> bool {
        self.0.keys().any(|(g, _)| *g == gen)
    }

    /// The entry of this worker with generation `gen` and key `key`, read back now, if any.
    fn echoed(&mut self, gen: i64, key: &OrderKey) -> Option<Entry> {
        self.0.remove(&(gen, *key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventTime, Fingerprint, PostId};

    fn entry(id: &str, seq: u64) -> Entry {
        Entry {
            id: PostId(id.into()),
            key: OrderKey {
                tau: 100,
                arrival: 0,
                partition: 2,
                seq,
            },
            time: EventTime(100),
            fingerprint: Fingerprint(7),
            chars: "今天下雨".chars().collect(),
            text_hash: 1,
            tokens: Box::default(),
        }
    }

    #[test]
    fn own_entries_are_recorded_when_the_changelog_brings_them_back() {
        let dir = std::env::temp_dir().join(format!("simdedup-local-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut l, restored) =
            LocalState::open(&dir, "test", 3600, 1 << 20, Duration::from_secs(3600)).unwrap();
        assert!(restored.is_none());
        let (a, b) = (entry("a", 1), entry("b", 2));
        l.decided([(0, a.clone()), (0, b.clone())]);
        assert!(l.pending.is_empty(), "not on the changelog yet");
        // Another worker's entry, and an echo that is not this worker's: not confirmations.
        assert!(!l.confirm(0, &entry("c", 9).key));
        l.record(0, entry("c", 9));
        // `a` comes back; `b` never made it to the changelog (the worker crashes).
        assert!(l.confirm(0, &a.key));
        assert!(!l.confirm(0, &a.key), "confirmed once");
        assert!(!l.confirm(1, &b.key), "another generation");
        let ids: Vec<&str> = l.pending.iter().map(|(_, e)| e.id.0.as_str()).collect();
        assert_eq!(ids, ["c", "a"]);
        l.clear().unwrap();
        assert!(
            !l.confirm(0, &b.key),
            "a rebuild forgets what was unconfirmed"
        );
        drop(l);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
