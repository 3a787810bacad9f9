//! The settings the io stages read: the `[output]` section, and `StageConfig`, the sections a
//! pipeline (file, route, dedup, replay, eval) needs, which the application assembles from its
//! configuration. io never sees the application's whole `Config`.

use serde::{Deserialize, Serialize};

use crate::engine::EngineConfig;
use crate::input::InputConfig;
use crate::routing::RoutingConfig;
use crate::state::StateConfig;

/// The `[output]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Add `simhash` (hex) and `tokens` to unique posts, under `enrich_key`.
    pub enrich: bool,
    /// Object key of the added fields in a unique post (also used to mark empty posts).
    pub enrich_key: String,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            enrich: false,
            enrich_key: "simdedup".to_string(),
        }
    }
}

/// The configuration sections a pipeline reads.
#[derive(Clone, Debug, PartialEq)]
pub struct StageConfig {
    /// How input records are decoded.
    pub input: InputConfig,
    /// The decision: index, verification, window, empty posts, order tick.
    pub engine: EngineConfig,
    /// Output records.
    pub output: OutputConfig,
    /// Checkpoints and the sled cache (file pipeline).
    pub state: StateConfig,
    /// Similarity routing between partitions.
    pub routing: RoutingConfig,
}

impl StageConfig {
    /// Posts dated more than this many seconds after the wall clock are rejected (0: no check).
    pub fn max_future_secs(&self) -> i64 {
        self.engine.window.max_future_secs
    }
}

#[cfg(test)]
impl StageConfig {
    /// Every setting at its default, empty posts passing (what `app`'s default config gives,
    /// which `io` cannot name), for tests.
    pub(crate) fn defaults_for_tests() -> StageConfig {
        StageConfig {
            input: Default::default(),
            engine: crate::engine::EngineConfig {
                index: Default::default(),
                verify: Default::default(),
                window: Default::default(),
                empty_posts: crate::engine::EmptyPolicy::Pass,
                visibility: Default::default(),
            },
            output: Default::default(),
            state: Default::default(),
            routing: Default::default(),
        }
    }
}
