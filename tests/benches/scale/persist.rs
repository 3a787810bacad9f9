//! Restart from sled: the live window is committed with `Store::commit` in checkpoint-sized
//! batches (generation by generation, insertion order kept), the engine is dropped, and a fresh
//! `Store::open` + `io::restore::restore` is timed, as a restarted file pipeline does it: once
//! from sled alone (which writes the sealed generations whole, `state.keep_sealed`), then again
//! with those files.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use simdedup::app::config::Config;
use simdedup::engine::Engine;
use simdedup::index::EntryRef;
use simdedup::io::restore::{restore, RestoreOptions};
use simdedup::state::{Checkpoint, Identity, Store};

/// Entries per commit (the file pipeline's default checkpoint size).
const BATCH: usize = 50_000;

/// What the restart measurement found.
#[derive(Debug, Serialize)]
pub struct Restart {
    /// Entries committed.
    pub committed: usize,
    /// Seconds to commit them.
    pub commit_secs: f64,
    /// sled's size on disk after the commit, bytes.
    pub disk_bytes: u64,
    /// Seconds to open the store and read its checkpoint.
    pub load_secs: f64,
    /// Seconds for `Store::rebuild`: reading generations from sled one at a time while earlier
    /// ones are decoded and built on `threads` threads.
    pub restore_secs: f64,
    /// load + restore.
    pub restart_secs: f64,
    /// Entries live after the restore.
    pub restored: usize,
    /// RSS after the restore, bytes (includes memory the process kept from before).
    pub rss_after_bytes: u64,
    /// Threads the rebuild ran on (every core of the machine).
    pub threads: usize,
    /// Sealed generations the first restart wrote whole (0 without `state.keep_sealed`).
    pub sealed_written: usize,
    /// A second restart, with those files: open + restore seconds, and the entries loaded
    /// whole.
    pub sealed_restart_secs: Option<f64>,
    pub sealed_loaded: usize,
}

/// One restart measured.
pub struct Timed {
    pub open_secs: f64,
    pub restore_secs: f64,
    pub restored: usize,
    pub loaded_whole: usize,
    pub written: usize,
    pub rss: u64,
    pub threads: usize,
}

/// Commits `engine`'s live window to a new store in `dir`, with `next_seq` as the checkpoint.
pub fn commit(cfg: &Config, engine: &Engine, dir: &Path, next_seq: u64) -> (usize, f64, u64) {
    let analysis = cfg.analysis_id().expect("analysis id");
    let id = Identity {
        analysis_id: &analysis,
        generation_secs: cfg.window.generation_secs,
    };
    let store = Store::open(dir, &id, cfg.state.cache_capacity_bytes).expect("open store");
    let cp = Checkpoint {
        next_seq,
        watermarks: engine.watermarks().clone(),
        window_marks: engine.window_marks(),
        run: None,
        ..Checkpoint::default()
    };
    let t = Instant::now();
    let index = engine.index();
    let gens: Vec<(i64, usize)> = index.generations().collect();
    let mut batch = Vec::with_capacity(BATCH);
    let mut committed = 0;
    for (gen, n) in gens {
        for slot in 0..n as u32 {
            if let Some(e) = index.get(EntryRef { gen, slot }) {
                batch.push((gen, e.clone()));
            }
            if batch.len() == BATCH {
                store.commit(&batch, &cp, None).expect("commit");
                committed += batch.len();
                batch.clear();
            }
        }
    }
    store.commit(&batch, &cp, None).expect("commit");
    committed += batch.len();
    let secs = t.elapsed().as_secs_f64();
    (committed, secs, store.size_on_disk())
}

/// Opens the store in `dir` afresh and rebuilds an engine from it, as `simdedup dedup
/// --state-dir` does (sealed generation files loaded and written per `state.keep_sealed`; the
/// written ones are durable before it returns).
pub fn restart(
    cfg: &Config,
    dir: &Path,
    cold: std::sync::Arc<dyn simdedup::index::cold::ColdFactory>,
) -> Timed {
    let analysis = cfg.analysis_id().expect("analysis id");
    // A restart runs on every core, as `simdedup dedup --state-dir` does; the run itself is
    // pinned to one.
    let threads = use_every_core();
    let t = Instant::now();
    let id = Identity {
        analysis_id: &analysis,
        generation_secs: cfg.window.generation_secs,
    };
    let store = Store::open(dir, &id, cfg.state.cache_capacity_bytes).expect("reopen");
    let cp = store.checkpoint().expect("checkpoint").expect("present");
    let mut engine = Engine::with_cold(&cfg.engine(), cold).expect("engine");
    let min_gen = simdedup::engine::min_live_generation(engine.window(), &cp.watermarks);
    let open_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let opts = RestoreOptions {
        min_gen,
        next_seq: cp.next_seq,
        threads,
        keep_sealed: cfg.state.keep_sealed,
    };
    let (_store, mut restored) = restore(store, &mut engine, cp.watermarks, opts).expect("restore");
    let restore_secs = t.elapsed().as_secs_f64();
    Timed {
        open_secs,
        restore_secs,
        restored: engine.index().len(),
        loaded_whole: restored.sealed_loaded.1,
        written: restored.finish_writes(),
        rss: crate::report::rss_bytes(),
        threads,
    }
}

/// Lets this process run on every online core again; returns how many it may use.
fn use_every_core() -> usize {
    // SAFETY: `set` is a plain bit set owned by this frame, and sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let cores = libc::sysconf(libc::_SC_NPROCESSORS_ONLN).max(1) as usize;
        for c in 0..cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
    simdedup::state::restore_threads()
}
