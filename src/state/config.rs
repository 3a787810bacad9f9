//! The `[state]` config section: when checkpoints are taken and how much the sled cache holds.

use serde::{Deserialize, Serialize};

/// The `[state]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// A checkpoint (outputs flushed, index changes and input position persisted) is taken after
    /// this many input records...
    pub checkpoint_every_records: u64,
    /// ...or after this many milliseconds, whichever comes first.
    pub checkpoint_interval_ms: u64,
    /// sled page cache size in bytes.
    pub cache_capacity_bytes: u64,
    /// With a state dir, the index keeps its entries' ids, texts and token hashes in spill files
    /// under `<state-dir>/spill/` (unlinked scratch files, rebuilt from sled on start) and only a
    /// 32-byte record of each entry (and its postings) in memory; false keeps everything in
    /// memory.
    pub spill_texts: bool,
    /// With a state dir, each sealed generation is written whole to `<state-dir>/sealed/` (index
    /// arrays and cold records, about as many bytes as the generation's stored entries) by the
    /// start that rebuilt it from sled or the run that sealed it (file run or dedup worker), and
    /// the next start loads it instead of rebuilding it, adding the late entries stored since.
    /// false rebuilds every generation on every start and removes the files.
    pub keep_sealed: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            checkpoint_every_records: 50_000,
            checkpoint_interval_ms: 1_000,
            cache_capacity_bytes: 256 << 20,
            spill_texts: true,
            keep_sealed: true,
        }
    }
}
