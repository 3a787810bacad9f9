//! Restart from sled: the live window is committed with `Store::commit` in checkpoint-sized
//! batches (generation by generation, insertion order kept), the engine is dropped, and a fresh
//! `Store::open` + `Store::load` + `Engine::restore` is timed, as a restarted file pipeline
//! does it.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use simdedup::app::config::Config;
use simdedup::engine::Engine;
use simdedup::index::EntryRef;
use simdedup::state::{Checkpoint, Store};

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
    /// Seconds for open + checkpoint + load (read and decode).
    pub load_secs: f64,
    /// Seconds for `Engine::restore` (index rebuild).
    pub restore_secs: f64,
    /// load + restore.
    pub restart_secs: f64,
    /// Entries live after the restore.
    pub restored: usize,
    /// RSS after the restore, bytes (includes memory the process kept from before).
    pub rss_after_bytes: u64,
}

/// Commits `engine`'s live window to a new store in `dir`, with `next_seq` as the checkpoint.
pub fn commit(cfg: &Config, engine: &Engine, dir: &Path, next_seq: u64) -> (usize, f64, u64) {
    let analysis = cfg.analysis_id().expect("analysis id");
    let store = Store::open(dir, &analysis, cfg.state.cache_capacity_bytes).expect("open store");
    let cp = Checkpoint {
        next_seq,
        watermarks: engine.watermarks().clone(),
        window_marks: engine.window_marks(),
        run: None,
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

/// Opens the store in `dir` afresh and rebuilds an engine from it.
/// Returns (load secs, restore secs, live entries, RSS bytes with the restored engine).
pub fn restart(
    cfg: &Config,
    dir: &Path,
    cold: std::sync::Arc<dyn simdedup::index::cold::ColdFactory>,
) -> (f64, f64, usize, u64) {
    let analysis = cfg.analysis_id().expect("analysis id");
    let t = Instant::now();
    let store = Store::open(dir, &analysis, cfg.state.cache_capacity_bytes).expect("reopen");
    let cp = store.checkpoint().expect("checkpoint").expect("present");
    let mut engine = Engine::with_cold(&cfg.engine(), cold).expect("engine");
    let min_gen = simdedup::engine::min_live_generation(engine.window(), &cp.watermarks);
    let loaded = store.load(min_gen, cp.next_seq).expect("load");
    let load_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    engine.restore(cp.watermarks, loaded.generations);
    let restore_secs = t.elapsed().as_secs_f64();
    (
        load_secs,
        restore_secs,
        engine.index().len(),
        crate::report::rss_bytes(),
    )
}
