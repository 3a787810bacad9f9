//! `simdedup inspect`: a read-only look into a state dir. It rebuilds the index exactly as a
//! resumed run would (same checkpoint, same live generations, uncommitted entries left out) but
//! deletes nothing, then reports the window, entry counts, bucket-size histograms and the most
//! refreshed clusters, or answers `query TEXT` with the nearest stored posts.

mod query;
mod report;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use query::{query, render_query, Near, QueryReport};
pub use report::{
    histogram, render, report, ClusterView, Counts, Histogram, Hot, Report, WindowView,
};

use crate::app::common::{
    build_tokenizer, load_config, read_text_arg, usage, CmdResult, ConfigArgs, EXIT_FAILURE,
    EXIT_OK, EXIT_USAGE,
};
use crate::app::config::Config;
use crate::engine::{min_live_generation, Engine};
use crate::state::{Identity, RunRecord, StateError, Store};

/// `--help` epilogue.
pub const HELP: &str = "Examples:
  simdedup inspect --state-dir state/
  simdedup inspect --state-dir state/ --top 20 --json
  simdedup inspect --state-dir state/ query '今天早上地铁二号线又停运了' --limit 5
  simdedup inspect --state-dir state/ query @post.txt

Read-only as far as simdedup goes: no entry or checkpoint is written or deleted (expired and
uncommitted entries are counted, not removed). sled has no read-only mode: the first open after a
worker may write sled's own recovery snapshot (snap.*), as a resumed run's open would; what a
resumed run then does is unchanged. sled takes an exclusive lock, so a state dir in use by a
running `dedup` cannot be opened: stop the worker or inspect a copy (cp -r). Use the
worker's --config: the analysis settings must match the state dir, and the index and window
settings decide what the rebuilt index looks like.

Exit codes: 0 done; 1 runtime failure, including a state dir locked by a running worker;
2 usage or configuration error (not a state dir, analysis settings differ from the state dir's).";

/// `inspect query --help` epilogue.
const QUERY_HELP: &str = "Examples:
  simdedup inspect --state-dir state/ query '今天早上地铁二号线又停运了' --limit 5
  simdedup inspect --state-dir state/ query @post.txt --json

--state-dir and --config go before `query`. Exit codes as for `inspect`.";

/// `inspect` options.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// State directory written by `dedup --state-dir`.
    #[arg(long, env = "SIMDEDUP_STATE_DIR")]
    pub state_dir: PathBuf,
    /// Length of the report's lists (largest buckets and postings, most refreshed clusters);
    /// `query` has --limit.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print the report as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Without an action, the state report.
    #[command(subcommand)]
    pub action: Option<InspectAction>,
}

/// What to inspect besides the report.
#[derive(Debug, clap::Subcommand)]
pub enum InspectAction {
    /// List the stored posts nearest to TEXT (`-` reads stdin, `@FILE` a file) with Hamming
    /// distance, Zhou's Sim, the verification rule that accepts the pair and whether the
    /// engine's candidate search finds it; and the verdict a post with this text would get next.
    #[command(after_help = QUERY_HELP)]
    Query {
        /// The post text; `-` reads stdin, `@FILE` a file when FILE exists.
        text: String,
        /// How many stored posts to list.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
}

/// Runs `inspect`.
pub fn run(a: InspectArgs) -> CmdResult {
    let cfg = load_config(&a.config).map_err(usage)?;
    let opened = open(&a.state_dir, &cfg).map_err(|e| {
        let code = if e.is_usage() {
            EXIT_USAGE
        } else {
            EXIT_FAILURE
        };
        (code, e.to_string())
    })?;
    let (text, json) = match a.action {
        None => {
            let r = report(&a.state_dir, &opened, &cfg, a.top);
            (render(&r), serde_json::to_string_pretty(&r))
        }
        Some(InspectAction::Query { text, limit }) => {
            let raw = read_text_arg(&text).map_err(usage)?;
            let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
            let q = query(opened, &raw, &tokenizer, limit);
            (render_query(&q), serde_json::to_string_pretty(&q))
        }
    };
    if a.json {
        println!("{}", json.map_err(|e| (EXIT_FAILURE, e.to_string()))?);
    } else {
        print!("{text}");
    }
    Ok(EXIT_OK)
}

/// Inspect failures; `usage` says whether the fault is in the command line or config.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The state store could not be opened or read.
    #[error(transparent)]
    State(#[from] StateError),
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
}

impl InspectError {
    /// Bad path or settings (exit 2) rather than a runtime failure (exit 1; a locked dir is one).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            InspectError::Config(_)
                | InspectError::State(StateError::AnalysisMismatch { .. })
                | InspectError::State(StateError::GenerationMismatch { .. })
                | InspectError::State(StateError::NotAStateDir { .. })
        )
    }
}

/// An instant in both forms.
#[derive(Clone, Debug, Serialize)]
pub struct Instant {
    /// Unix seconds.
    pub unix: i64,
    /// RFC 3339, UTC.
    pub utc: String,
}

fn instant(unix: i64) -> Instant {
    let utc = chrono::DateTime::from_timestamp(unix, 0).map_or_else(
        || "out of range".into(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    Instant { unix, utc }
}

/// An index rebuilt read-only from a state dir.
pub struct Opened {
    /// The engine, restored as a resumed run would restore it.
    pub engine: Engine,
    /// Checkpoint facts.
    pub next_seq: u64,
    /// Run record of the checkpoint.
    pub run: Option<RunRecord>,
    /// Entries in expired generations.
    pub expired: usize,
    /// Uncommitted entries.
    pub discarded: usize,
}

/// Opens `dir` read-only and rebuilds its index; the sled lock is released before returning.
pub fn open(dir: &Path, cfg: &Config) -> Result<Opened, InspectError> {
    let analysis = cfg
        .analysis_id()
        .map_err(|e| InspectError::Config(e.to_string()))?;
    let mut engine = Engine::new(&cfg.engine()).map_err(|e| InspectError::Config(e.to_string()))?;
    let id = Identity {
        analysis_id: &analysis,
        generation_secs: cfg.window.generation_secs,
    };
    let store = Store::open_read_only(dir, &id, cfg.state.cache_capacity_bytes)?;
    let cp = store.checkpoint()?.unwrap_or_default();
    let min_gen = min_live_generation(engine.window(), &cp.watermarks);
    let loaded = store.read(min_gen, cp.next_seq)?;
    drop(store);
    engine
        .restore(
            cp.watermarks.clone(),
            loaded.generations,
            crate::state::restore_threads(),
            None,
        )
        .map_err(crate::state::StateError::corrupt_entry)?;
    Ok(Opened {
        engine,
        next_seq: cp.next_seq,
        run: cp.run,
        expired: loaded.expired,
        discarded: loaded.discarded,
    })
}
