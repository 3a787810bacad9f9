//! What the commands share: exit codes, the result type, the `--config` and metrics options,
//! configuration loading with the `[kafka]` flag overlay, the tokenizer, the stop flag and the
//! shutdown watchdog. Every command module imports this one; it imports no command.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Args;

use crate::app::config::Config;
use crate::io::kafka::KafkaConfig;
use crate::text::tokenize::Tokenizer;

/// Exit code: the input was processed to the end.
pub const EXIT_OK: u8 = 0;
/// Exit code: a runtime failure (I/O, state store); outputs are consistent up to the last checkpoint.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code: bad usage or configuration (clap uses 2 as well).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: stopped by SIGINT/SIGTERM after a clean checkpoint; rerun the same command to resume.
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code: `dedup` refused to decide again an input file its state dir already completed.
pub const EXIT_ALREADY_DONE: u8 = 3;

/// A command's outcome: its exit code, or an exit code and the message printed before exiting.
pub(crate) type CmdResult = Result<u8, (u8, String)>;

/// A usage or configuration error (exit code 2).
pub(crate) fn usage(msg: impl Into<String>) -> (u8, String) {
    (EXIT_USAGE, msg.into())
}

/// Options shared by commands that build an engine.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// TOML config file over the compiled defaults (keys as in config/default.toml); repeat it
    /// to layer files, later ones win. `SIMDEDUP_<SECTION>__<KEY>` variables override the files.
    #[arg(long, env = "SIMDEDUP_CONFIG")]
    pub config: Vec<PathBuf>,
}

/// Defaults <- `--config` files <- `SIMDEDUP_*__*` variables; callers apply their flags last.
pub(crate) fn load_config(args: &ConfigArgs) -> Result<Config, String> {
    crate::app::layers::load(&args.config, std::env::vars_os())
        .map(|l| l.config)
        .map_err(|e| e.to_string())
}

pub(crate) fn build_tokenizer(cfg: &Config) -> Result<Tokenizer, String> {
    let stop = cfg.stopwords().map_err(|e| e.to_string())?;
    Ok(Tokenizer::new(cfg.text.weighting, &stop))
}

/// Command-line values over the `[kafka]` section (`run` and `replay` flags); `None` keeps the
/// configured value.
#[derive(Clone, Debug, Default)]
pub(crate) struct KafkaFlags {
    pub brokers: Option<String>,
    pub group_id: Option<String>,
    pub input_topic: Option<String>,
    pub routed_topic: Option<String>,
    pub routed_partitions: Option<u32>,
    pub unique_topic: Option<String>,
    pub duplicates_topic: Option<String>,
    pub rejected_topic: Option<String>,
    pub changelog_topic: Option<String>,
}

impl KafkaFlags {
    /// Sets every given value in `k`.
    pub(crate) fn apply(&self, k: &mut KafkaConfig) {
        let set = |dst: &mut String, v: &Option<String>| {
            if let Some(v) = v {
                dst.clone_from(v);
            }
        };
        set(&mut k.brokers, &self.brokers);
        set(&mut k.group_id, &self.group_id);
        set(&mut k.input_topic, &self.input_topic);
        set(&mut k.routed_topic, &self.routed_topic);
        set(&mut k.unique_topic, &self.unique_topic);
        set(&mut k.duplicates_topic, &self.duplicates_topic);
        set(&mut k.rejected_topic, &self.rejected_topic);
        set(&mut k.changelog_topic, &self.changelog_topic);
        if let Some(p) = self.routed_partitions {
            k.routed_partitions = p;
        }
    }
}

/// Metrics options of the batch commands (`dedup`, `replay`): off unless an address is given.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Serve GET /metrics and /health on this host:port (port 0: a free port, logged as
    /// `metrics listening`; `off`: none) [default: off for this command].
    #[arg(long, env = "SIMDEDUP_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// When the input is done, keep serving /metrics until SIGINT/SIGTERM (exit 0), so the final
    /// figures can be scraped.
    #[arg(long, requires = "metrics_addr")]
    pub metrics_hold: bool,
}

impl MetricsArgs {
    /// Starts the endpoint if an address was given.
    pub(crate) fn start(&self) -> Result<(), (u8, String)> {
        start_metrics(self.metrics_addr.as_deref())
    }

    /// Blocks until `stop` is set when `--metrics-hold` was given and the endpoint is on.
    pub(crate) fn hold(&self, stop: &AtomicBool) {
        if self.metrics_hold && crate::metrics::global().enabled() {
            tracing::info!("input done; serving metrics until SIGINT/SIGTERM");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// Starts the metrics endpoint (`None`: not asked for); a bind failure is a usage error.
pub(crate) fn start_metrics(address: Option<&str>) -> Result<(), (u8, String)> {
    match address {
        Some(a) => crate::app::metrics::serve(a)
            .map(|_| ())
            .map_err(|e| usage(e.to_string())),
        None => Ok(()),
    }
}

/// Ends the process with exit code 1 if a shutdown has not finished `deadline` plus 2 s after
/// `stop` was set. librdkafka's final commit and group leave can block far longer than any
/// deadline while the broker is unreachable; at-least-once delivery makes the abandoned work
/// safe: uncommitted records are processed again after a restart.
pub(crate) fn shutdown_watchdog(stop: &Arc<AtomicBool>, deadline: std::time::Duration) {
    let stop = Arc::clone(stop);
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let grace = deadline + std::time::Duration::from_secs(2);
        std::thread::sleep(grace);
        tracing::error!(
            secs = grace.as_secs_f64(),
            "shutdown overran kafka.shutdown_timeout_ms: exiting now; records not yet committed \
             are processed again after a restart"
        );
        std::process::exit(EXIT_FAILURE as i32);
    });
}

/// The stop flag of a long-running command: the first SIGINT/SIGTERM sets it (finish, flush,
/// checkpoint or commit), a second one exits at once with `EXIT_INTERRUPTED`.
pub(crate) fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Registered first, so it sees the flag as the previous signal left it.
        let _ = signal_hook::flag::register_conditional_shutdown(
            sig,
            EXIT_INTERRUPTED as i32,
            Arc::clone(&stop),
        );
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    stop
}

/// Reads a text argument: `-` is stdin, `@PATH` is the file at PATH when one exists (a Weibo text
/// starting with an @mention stays literal), anything else is the text itself.
pub(crate) fn read_text_arg(arg: &str) -> Result<String, String> {
    let trim = |s: String| {
        s.strip_suffix('\n')
            .map(|t| t.trim_end_matches('\r').to_string())
            .unwrap_or(s)
    };
    if arg == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        return Ok(trim(s));
    }
    if let Some(path) = arg
        .strip_prefix('@')
        .filter(|p| std::path::Path::new(p).is_file())
    {
        return std::fs::read_to_string(path)
            .map(trim)
            .map_err(|e| format!("cannot read {path}: {e}"));
    }
    Ok(arg.to_string())
}
