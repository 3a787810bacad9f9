//! Command-line interface: clap definitions and the dispatch from subcommands to the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::app::config::Config;
use crate::app::eval;
use crate::io::file::{self, FileJob, Summary};
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

/// Near-duplicate filter for Chinese microblog firehoses.
///
/// Normalizes Weibo-style posts (repost chains, @mentions, links, [emoticons], emoji, full-width
/// characters), segments them with jieba, fingerprints them with a 64-bit SimHash and checks an
/// event-time sliding window of earlier unique posts: SimHash block tables plus a character-bigram
/// index for short posts, every candidate verified. Unique posts, duplicate-cluster events and
/// rejected records go to three outputs.
#[derive(Debug, Parser)]
#[command(name = "simdedup", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SIMDEDUP_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter (tracing-subscriber syntax, e.g. `info` or `simdedup=debug`).
    #[arg(long, global = true, default_value = "info", env = "SIMDEDUP_LOG")]
    pub log_level: String,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done (`run`, `passthrough`: stopped by SIGINT/SIGTERM after \
draining); 1 runtime failure (I/O, Kafka, state store; outputs consistent up to the last checkpoint \
or committed offset), or a `run`/`passthrough` shutdown that overran `kafka.shutdown_timeout_ms` \
by 2 s (an unreachable broker); 2 usage or configuration error; 3 `dedup` refused: the state dir \
already completed a run of this input file (new --state-dir to start fresh, --no-resume to decide it \
again); 130 `dedup` interrupted by a signal after a \
clean checkpoint (rerun the same command to resume), or a second signal to `dedup`, `run` or \
`passthrough`, which exits at once. The other commands have no drain: a signal ends them as it \
ends any program. Each command's --help has the details.";

/// Log formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Deduplicate a JSON-lines file or stdin, in one process (no Kafka).
    #[command(after_help = DEDUP_EXAMPLES)]
    Dedup(DedupArgs),
    /// Run the Kafka stream processor (stage route, dedup, or both in one process).
    #[command(after_help = RUN_EXAMPLES)]
    Run(RunArgs),
    /// Backfill: decide a range of the raw topic into separate output topics, with fresh state.
    #[command(after_help = REPLAY_EXAMPLES)]
    Replay(ReplayArgs),
    /// Produce the lines of a JSON-lines file or stdin to a topic (to feed a raw topic).
    #[command(after_help = PRODUCE_HELP)]
    Produce(ProduceArgs),
    /// Write all records of a topic to a JSON-lines file (stops after --idle-ms without records).
    #[command(after_help = EXPORT_HELP)]
    Export(ExportArgs),
    /// Throughput baseline: copy a topic to another unchanged, with the stages' built-in client
    /// settings.
    #[command(after_help = PASSTHROUGH_HELP)]
    Passthrough(PassthroughArgs),
    /// Score the engine on a labelled stream (truth.jsonl as in the benchmark).
    #[command(after_help = EVAL_EXAMPLES)]
    Eval(EvalArgs),
    /// Check the configuration and print it as TOML, secrets redacted (exit 2 if invalid).
    #[command(after_help = CHECK_CONFIG_HELP)]
    CheckConfig(ConfigArgs),
    /// Look into a state dir, read-only: window, entry counts, bucket sizes, or `query TEXT`.
    #[command(after_help = crate::app::inspect::HELP)]
    Inspect(crate::app::inspect::InspectArgs),
    /// Show why post B is or is not a duplicate of post A, step by step.
    #[command(after_help = crate::app::explain::HELP)]
    Explain(crate::app::explain::ExplainArgs),
    /// Load generator: Weibo-style posts with a duplicate mix, to a file, stdout or a topic.
    #[command(after_help = crate::app::generate::EXAMPLES)]
    Generate(crate::app::generate::GenerateArgs),
}

const DEDUP_EXAMPLES: &str = "Examples:
  simdedup dedup --input posts.jsonl --unique-out unique.jsonl \\
      --duplicates-out dups.jsonl --rejected-out rejected.jsonl --state-dir state/
  cat posts.jsonl | simdedup dedup --input - --unique-out - \\
      --duplicates-out dups.jsonl --rejected-out rejected.jsonl --state-dir state/

Rerunning an interrupted command with the same state dir resumes at its last checkpoint;
running another input with the same state dir continues the window.

Exit codes: 0 input done (with --metrics-hold: after the signal that ends the hold); 1 runtime
failure (outputs consistent up to the last checkpoint); 2 usage or configuration error (also a
metrics address that cannot be bound); 130 stopped by SIGINT/SIGTERM after a clean checkpoint, or
at once by a second signal: rerun the same command with the same --state-dir to resume (without
--state-dir nothing persists, so a rerun starts over).";

const RUN_EXAMPLES: &str = "Examples:
  simdedup run --role all --brokers 127.0.0.1:9092 --input-topic posts
  SIMDEDUP_BROKERS=kafka:9092 simdedup run --role dedup --config /etc/simdedup.toml

Workers of one role that share --group-id form a consumer group: add workers to scale out.
Missing topics are created (the routed one with --routed-partitions, the changelog with one
partition, the others with `kafka.output_partitions`).

Runs until SIGINT/SIGTERM. Exit codes: 0 stopped by a signal after draining (finish the record
in hand, flush the producer, commit; within `kafka.shutdown_timeout_ms`); 1 Kafka failure, or
a shutdown still running 2 s past that deadline (an unreachable broker), which is cut short
(offsets are committed only for acknowledged outputs: a restart re-processes from there);
2 usage or configuration error, or a metrics address that cannot be bound; 130 a second signal,
which exits at once.";

/// Which stages a `run` process hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Stateless: raw topic to routed topic.
    Route,
    /// Stateful: routed topic to the output topics.
    Dedup,
    /// Both stages in one process.
    All,
}

/// `run` options: deploy-time knobs override the config file's `[kafka]` section.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Stages to run.
    #[arg(long, value_enum, env = "SIMDEDUP_ROLE")]
    pub role: Role,
    /// Bootstrap servers, comma-separated host:port [default: `kafka.brokers` of the config,
    /// 127.0.0.1:9092].
    #[arg(long, env = "SIMDEDUP_BROKERS")]
    pub brokers: Option<String>,
    /// Consumer group prefix: the stages join `<id>.route` and `<id>.dedup` [default:
    /// `kafka.group_id`, simdedup].
    #[arg(long, env = "SIMDEDUP_GROUP_ID")]
    pub group_id: Option<String>,
    /// Raw posts topic [default: `kafka.input_topic`, posts].
    #[arg(long, env = "SIMDEDUP_INPUT_TOPIC")]
    pub input_topic: Option<String>,
    /// Internal routed topic between the stages [default: `kafka.routed_topic`, simdedup.routed].
    #[arg(long, env = "SIMDEDUP_ROUTED_TOPIC")]
    pub routed_topic: Option<String>,
    /// Partitions of the routed topic: route spreads posts over this many and dedup orders its
    /// decisions over them; the topic is created with it if missing. An existing topic is not
    /// checked: give every worker its partition count [default: `kafka.routed_partitions`, 8].
    #[arg(long, env = "SIMDEDUP_ROUTED_PARTITIONS")]
    pub routed_partitions: Option<u32>,
    /// Unique posts topic [default: `kafka.unique_topic`, posts.unique].
    #[arg(long, env = "SIMDEDUP_UNIQUE_TOPIC")]
    pub unique_topic: Option<String>,
    /// Duplicate events topic [default: `kafka.duplicates_topic`, posts.duplicates].
    #[arg(long, env = "SIMDEDUP_DUPLICATES_TOPIC")]
    pub duplicates_topic: Option<String>,
    /// Rejected records topic [default: `kafka.rejected_topic`, posts.rejected].
    #[arg(long, env = "SIMDEDUP_REJECTED_TOPIC")]
    pub rejected_topic: Option<String>,
    /// Replicated index changelog topic, one partition; keep at least the window [default:
    /// `kafka.changelog_topic`, simdedup.changelog].
    #[arg(long, env = "SIMDEDUP_CHANGELOG_TOPIC")]
    pub changelog_topic: Option<String>,
    /// Not used by `run`: the dedup stage keeps no local state and rebuilds its index from the
    /// changelog topic on start. Accepted so that SIMDEDUP_STATE_DIR (read by `dedup`) can be set
    /// for every command.
    #[arg(long, env = "SIMDEDUP_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Serve GET /metrics and /health on this host:port (port 0: a free port; `off`: none)
    /// [default: `metrics.address` of the config, 127.0.0.1:9464].
    #[arg(long, env = "SIMDEDUP_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
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
    fn start(&self) -> Result<(), (u8, String)> {
        start_metrics(self.metrics_addr.as_deref())
    }

    /// Blocks until `stop` is set when `--metrics-hold` was given and the endpoint is on.
    fn hold(&self, stop: &AtomicBool) {
        if self.metrics_hold && crate::app::metrics::global().enabled() {
            tracing::info!("input done; serving metrics until SIGINT/SIGTERM");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// Starts the metrics endpoint (`None`: not asked for); a bind failure is a usage error.
fn start_metrics(address: Option<&str>) -> Result<(), (u8, String)> {
    match address {
        Some(a) => crate::app::metrics::serve(a)
            .map(|_| ())
            .map_err(|e| usage(e.to_string())),
        None => Ok(()),
    }
}

const EVAL_EXAMPLES: &str = "Example:
  simdedup eval --posts bench/posts.jsonl --truth bench/truth.jsonl

Runs the engine in memory (no state dir, no Kafka) with the configured analysis and index.

Exit codes: 0 done; 1 a file that cannot be read or a malformed truth line; 2 configuration
error.";

/// Options shared by commands that build an engine.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// TOML config file over the compiled defaults (keys as in config/default.toml); repeat it
    /// to layer files, later ones win. `SIMDEDUP_<SECTION>__<KEY>` variables override the files.
    #[arg(long, env = "SIMDEDUP_CONFIG")]
    pub config: Vec<PathBuf>,
}

const CHECK_CONFIG_HELP: &str = "Layers, later wins: compiled defaults (= config/default.toml), \
--config files in order, SIMDEDUP_<SECTION>__<KEY> variables (`__` separates the key path; \
in [kafka.consumer]/[kafka.producer] `_` becomes `.`), then the flags of run/replay.

Examples:
  simdedup check-config --config config/local.toml
  SIMDEDUP_INDEX__BLOCKS=5 SIMDEDUP_KAFKA__CONSUMER__SASL_PASSWORD=s3cret \\
      simdedup check-config --config base.toml --config site.toml

Prints the effective configuration as TOML on stdout (secret librdkafka values shown as
\"<redacted>\", pinned librdkafka settings that are overridden listed as comments).
Exit 0 if valid, 2 with the file or variable and the key if not.";

/// `dedup` options.
#[derive(Debug, Args)]
pub struct DedupArgs {
    /// Input JSON lines, `-` for stdin.
    #[arg(long)]
    pub input: String,
    /// Unique posts, `-` for stdout: the original JSON line (with fields added under
    /// `output.enrich_key` for --enrich, and to mark a post with no text left).
    #[arg(long, default_value = "-")]
    pub unique_out: String,
    /// Duplicate-cluster events (JSON lines), `-` for stdout.
    #[arg(long)]
    pub duplicates_out: String,
    /// Rejected records with their reason (JSON lines), `-` for stdout.
    #[arg(long)]
    pub rejected_out: String,
    /// State directory (sled). Without it the window lives in memory and nothing persists.
    #[arg(long, env = "SIMDEDUP_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Start a new run even if the state dir holds an interrupted or completed run of this input.
    #[arg(long)]
    pub no_resume: bool,
    /// Never draw the progress bar (it is drawn only when stderr is a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Add `simhash` (hex) and `tokens` to unique posts (turns `output.enrich` on).
    #[arg(long)]
    pub enrich: bool,
    /// Metrics endpoint.
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

const REPLAY_EXAMPLES: &str = "Example:
  simdedup replay --brokers 127.0.0.1:9092 --input-topic posts --from-time 1700000000 \\
      --unique-topic backfill.unique --duplicates-topic backfill.duplicates --rejected-topic backfill.rejected

Deterministic: the same range gives the same verdicts, in the order the live topology decides.
Reads the whole range into memory first, then decides it; missing output topics are created.

Exit codes: 0 done (with --metrics-hold: after the signal that ends the hold); 1 Kafka failure;
2 usage or configuration error (also a metrics address that cannot be bound). No checkpoint: a
signal during the replay ends it at once, and a rerun starts over, appending to the output topics
again.";

/// `replay` options.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Bootstrap servers, comma-separated host:port [default: `kafka.brokers` of the config,
    /// 127.0.0.1:9092].
    #[arg(long, env = "SIMDEDUP_BROKERS")]
    pub brokers: Option<String>,
    /// Raw posts topic to read [default: `kafka.input_topic`, posts].
    #[arg(long, env = "SIMDEDUP_INPUT_TOPIC")]
    pub input_topic: Option<String>,
    /// Unique posts of the replay (use topics separate from the live ones).
    #[arg(long)]
    pub unique_topic: String,
    /// Duplicate events of the replay.
    #[arg(long)]
    pub duplicates_topic: String,
    /// Rejected records of the replay.
    #[arg(long)]
    pub rejected_topic: String,
    /// Routed partitions to decide with (must match the live topology for identical verdicts)
    /// [default: `kafka.routed_partitions`, 8].
    #[arg(long, env = "SIMDEDUP_ROUTED_PARTITIONS")]
    pub routed_partitions: Option<u32>,
    /// First offset of every partition.
    #[arg(long)]
    pub from_offset: Option<i64>,
    /// Last offset (inclusive) of every partition.
    #[arg(long)]
    pub to_offset: Option<i64>,
    /// Skip posts with an earlier event time (unix seconds). With --from-offset, reading also
    /// starts at the broker timestamp's offset if that is later.
    #[arg(long)]
    pub from_time: Option<i64>,
    /// Skip posts with a later event time (unix seconds).
    #[arg(long)]
    pub to_time: Option<i64>,
    /// Metrics endpoint.
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

const PRODUCE_HELP: &str = "Example:
  simdedup produce --brokers 127.0.0.1:9092 --topic posts --input tests/data/sample_posts.jsonl

Each line is one record, keyed by its line number (0, 1, ...), so the records spread over the
partitions. A missing topic is created (replication factor 1). Client settings are the built-in
ones: no --config, so no [kafka.producer] settings (SASL/SSL).

Exit codes: 0 every record acknowledged; 1 a read or Kafka error.";

/// `produce` options.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "SIMDEDUP_BROKERS")]
    pub brokers: String,
    /// Destination topic.
    #[arg(long)]
    pub topic: String,
    /// Partitions of the topic if it has to be created.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// JSON-lines file, `-` for stdin.
    #[arg(long)]
    pub input: String,
}

const EXPORT_HELP: &str = "Example:
  simdedup export --brokers 127.0.0.1:9092 --topic posts.unique --output unique.jsonl

Reads every partition from the beginning, outside any consumer group (no offsets committed), and
writes each record's value as one line (keys are dropped; partitions interleave). Client settings
are the built-in ones: no --config, so no [kafka.consumer] settings (SASL/SSL).

Exit codes: 0 done; 1 a write or Kafka error.";

/// `export` options.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "SIMDEDUP_BROKERS")]
    pub brokers: String,
    /// Source topic.
    #[arg(long)]
    pub topic: String,
    /// Output file, `-` for stdout.
    #[arg(long, default_value = "-")]
    pub output: String,
    /// Stop after this many milliseconds without a record.
    #[arg(long, default_value_t = 3000)]
    pub idle_ms: u64,
}

const PASSTHROUGH_HELP: &str = "Example:
  simdedup passthrough --brokers 127.0.0.1:9092 --from posts --to posts.copy

Consumes --from in a consumer group and produces each record, key and value, to --to (created
with 8 partitions if missing), storing an offset only after its copy is acknowledged, as the
stages do. Client settings are the stages' built-in ones: no --config, so no [kafka.consumer] or
[kafka.producer] settings (SASL/SSL).

Runs until SIGINT/SIGTERM. Exit codes: 0 stopped by a signal after flushing; 1 Kafka failure,
or a shutdown still running 32 s after the signal (an unreachable broker); 130 a second signal,
which exits at once.";

/// `passthrough` options.
#[derive(Debug, Args)]
pub struct PassthroughArgs {
    /// Bootstrap servers, comma-separated host:port.
    #[arg(long, env = "SIMDEDUP_BROKERS")]
    pub brokers: String,
    /// Source topic.
    #[arg(long)]
    pub from: String,
    /// Destination topic.
    #[arg(long)]
    pub to: String,
    /// Consumer group prefix (joins `<id>.passthrough`).
    #[arg(long, default_value = "simdedup")]
    pub group_id: String,
}

/// `eval` options.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Posts, one JSON object per line, in stream order.
    #[arg(long)]
    pub posts: PathBuf,
    /// Truth: `{"id","cluster","label","kind"}` per line, same order.
    #[arg(long)]
    pub truth: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Replay the stream through this many partitions, routed as the Kafka topology routes
    /// them (`[routing]`), and score that; 1 is the single-partition engine.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Defaults <- `--config` files <- `SIMDEDUP_*__*` variables; callers apply their flags last.
pub(crate) fn load_config(args: &ConfigArgs) -> Result<Config, String> {
    crate::app::layers::load(&args.config, std::env::vars_os())
        .map(|l| l.config)
        .map_err(|e| e.to_string())
}

fn check_config(a: ConfigArgs) -> CmdResult {
    let loaded = crate::app::layers::load(&a.config, std::env::vars_os())
        .map_err(|e| usage(e.to_string()))?;
    let c = &loaded.config;
    c.stopwords().map_err(|e| usage(e.to_string()))?;
    if c.kafka.routed_partitions == 0 {
        return Err(usage("key `kafka.routed_partitions`: must be at least 1"));
    }
    print!("{}", loaded.render().map_err(|e| (EXIT_FAILURE, e))?);
    Ok(EXIT_OK)
}

pub(crate) fn build_tokenizer(cfg: &Config) -> Result<Tokenizer, String> {
    let stop = cfg.stopwords().map_err(|e| e.to_string())?;
    Ok(Tokenizer::new(cfg.text.weighting, &stop))
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Dedup(a) => dedup(a),
        Command::Run(a) => run_stream(a),
        Command::Produce(a) => produce(a),
        Command::Replay(a) => replay(a),
        Command::Export(a) => export(a),
        Command::Passthrough(a) => passthrough(a),
        Command::Eval(a) => run_eval(a),
        Command::CheckConfig(a) => check_config(a),
        Command::Inspect(a) => crate::app::inspect::run(a),
        Command::Explain(a) => crate::app::explain::run(a),
        Command::Generate(a) => crate::app::generate::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err((code, msg)) => {
            eprintln!("simdedup: error: {msg}");
            ExitCode::from(code)
        }
    }
}

pub(crate) type CmdResult = Result<u8, (u8, String)>;

pub(crate) fn usage(msg: impl Into<String>) -> (u8, String) {
    (EXIT_USAGE, msg.into())
}

fn dedup(a: DedupArgs) -> CmdResult {
    let mut cfg = load_config(&a.config).map_err(usage)?;
    cfg.output.enrich |= a.enrich;
    let outs = [&a.unique_out, &a.duplicates_out, &a.rejected_out];
    for (i, x) in outs.iter().enumerate() {
        if outs[i + 1..].contains(x) && !file::is_stream(x) {
            return Err(usage(format!(
                "output {x} is given twice; each output needs its own file"
            )));
        }
    }
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    a.metrics.start()?;
    let stop = stop_flag();
    let job = FileJob {
        input: a.input,
        unique_out: a.unique_out,
        duplicates_out: a.duplicates_out,
        rejected_out: a.rejected_out,
        state_dir: a.state_dir,
        progress: !a.no_progress,
        no_resume: a.no_resume,
    };
    let summary = file::run(&job, &cfg, &tokenizer, &stop).map_err(|e| match e {
        file::PipelineError::Config(m) => usage(m),
        e @ file::PipelineError::AlreadyDone { .. } => (EXIT_ALREADY_DONE, e.to_string()),
        other => (EXIT_FAILURE, other.to_string()),
    })?;
    eprintln!("{}", render_summary(&summary));
    if summary.completed {
        a.metrics.hold(&stop);
    }
    Ok(if summary.completed || summary.output_closed.is_some() {
        EXIT_OK
    } else {
        EXIT_INTERRUPTED
    })
}

/// The closing summary printed on stderr.
pub fn render_summary(s: &Summary) -> String {
    let mut out = format!(
        "simdedup: {} records in {:.2} s ({:.0} records/s): {} unique ({} empty), {} duplicates, {} rejected",
        s.records,
        s.elapsed_secs,
        s.rate(),
        s.unique,
        s.empty,
        s.duplicates,
        s.rejected
    );
    if !s.rejected_by_reason.is_empty() {
        let parts: Vec<String> = s
            .rejected_by_reason
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        out.push_str(&format!(" [{}]", parts.join(", ")));
    }
    if s.late > 0 {
        out.push_str(&format!("; {} late (older than the window, passed as unique)", s.late));
    }
    if let Some(r) = s.resumed_at_record {
        out.push_str(&format!("; resumed after record {r}"));
    }
    if s.restored_entries > 0 {
        out.push_str(&format!(
            "; {} entries restored in {:.2} s",
            s.restored_entries, s.restore_secs
        ));
    }
    out.push_str(&format!("; {} live index entries", s.index_entries));
    if let Some(o) = &s.output_closed {
        out.push_str(&format!("; stopped early: the reader of {o} went away"));
    } else if !s.completed {
        out.push_str("; interrupted: rerun the same command to resume");
    }
    out
}

fn run_eval(a: EvalArgs) -> CmdResult {
    let cfg = load_config(&a.config).map_err(usage)?;
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    let failed = |e: eval::EvalError| (EXIT_FAILURE, e.to_string());
    let (r, factor) = if a.partitions > 1 {
        let (r, f) = eval::evaluate_partitioned(&a.posts, &a.truth, &cfg, &tokenizer, a.partitions)
            .map_err(failed)?;
        (r, Some(f))
    } else {
        (
            eval::evaluate(&a.posts, &a.truth, &cfg, &tokenizer).map_err(failed)?,
            None,
        )
    };
    if a.json {
        let mut v = serde_json::to_value(&r).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
        if let Some(f) = factor {
            v["partitions"] = a.partitions.into();
            v["engine_calls_per_post"] = f.into();
        }
        let text = serde_json::to_string_pretty(&v).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
        println!("{text}");
        return Ok(EXIT_OK);
    }
    print_report(&r);
    if let Some(f) = factor {
        println!(
            "partitions {}: {f:.3} engine calls per post (decision + replica registrations)",
            a.partitions
        );
    }
    Ok(EXIT_OK)
}

fn print_report(r: &eval::Report) {
    println!(
        "posts {}  lost {}  output twice {}  scored {}",
        r.posts, r.lost, r.duplicated_outputs, r.scored_posts
    );
    println!(
        "precision {:.4}  recall {:.4}  F1 {:.4}  (predicted dup {}, false positives {})",
        r.precision, r.recall, r.f1, r.predicted_dup, r.false_positives
    );
    for (k, v) in &r.recall_by_kind {
        println!(
            "  recall {k:<10} {v:.4}  (of {})",
            r.truth_dup_by_kind.get(k).copied().unwrap_or(0)
        );
    }
    println!(
        "lcqmc_neg flagged {} of {}",
        r.lcqmc_neg_fp, r.lcqmc_neg_posts_scored
    );
    for (m, [ok, wrong]) in &r.by_method {
        println!("  method {m:<12} correct {ok:>6}  wrong {wrong:>4}");
    }
    println!(
        "candidates verified {} (rejected {}), capped scans: buckets {} postings {}",
        r.candidates, r.verify_rejects, r.bucket_scans_capped, r.posting_scans_capped
    );
    println!("engine rate {:.0} posts/s", r.posts_per_sec);
}

/// The configuration of `run`: defaults <- files <- `env` <- `run`'s flags.
pub(crate) fn run_config<I>(a: &RunArgs, env: I) -> Result<Config, String>
where
    I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
{
    let mut cfg = crate::app::layers::load(&a.config.config, env)
        .map_err(|e| e.to_string())?
        .config;
    let k = &mut cfg.kafka;
    let set = |dst: &mut String, v: &Option<String>| {
        if let Some(v) = v {
            dst.clone_from(v);
        }
    };
    set(&mut k.brokers, &a.brokers);
    set(&mut k.group_id, &a.group_id);
    set(&mut k.input_topic, &a.input_topic);
    set(&mut k.routed_topic, &a.routed_topic);
    set(&mut k.unique_topic, &a.unique_topic);
    set(&mut k.duplicates_topic, &a.duplicates_topic);
    set(&mut k.rejected_topic, &a.rejected_topic);
    set(&mut k.changelog_topic, &a.changelog_topic);
    if let Some(p) = a.routed_partitions {
        k.routed_partitions = p;
    }
    Ok(cfg)
}

fn run_stream(a: RunArgs) -> CmdResult {
    let cfg = run_config(&a, std::env::vars_os()).map_err(usage)?;
    if cfg.kafka.routed_partitions == 0 {
        return Err(usage("--routed-partitions must be at least 1"));
    }
    start_metrics(Some(
        a.metrics_addr.as_deref().unwrap_or(&cfg.metrics.address),
    ))?;
    let stop = stop_flag();
    shutdown_watchdog(
        &stop,
        std::time::Duration::from_millis(cfg.kafka.shutdown_timeout_ms),
    );
    let kc = cfg.kafka.clone();
    let out_parts = kc.output_partitions as i32;
    let topics = [
        (kc.input_topic.as_str(), out_parts),
        (kc.routed_topic.as_str(), kc.routed_partitions as i32),
        (kc.unique_topic.as_str(), out_parts),
        (kc.duplicates_topic.as_str(), out_parts),
        (kc.rejected_topic.as_str(), out_parts),
        (kc.changelog_topic.as_str(), 1),
    ];
    crate::io::kafka::client::ensure_topics(&kc, &topics)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    let fail = |e: crate::io::kafka::KafkaError| (EXIT_FAILURE, e.to_string());
    // With both stages here, dedup holds off declaring partitions idle until route routes.
    let routing = AtomicBool::new(false);
    let routing = (a.role == Role::All).then_some(&routing);
    std::thread::scope(|s| {
        // Whichever stage ends first (error or signal) stops the other.
        let route = (a.role != Role::Dedup).then(|| {
            s.spawn(|| {
                let r = crate::io::kafka::route::run(&kc, &cfg, &tokenizer, &stop, routing);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                r
            })
        });
        let dedup = (a.role != Role::Route).then(|| {
            s.spawn(|| {
                let r = crate::io::kafka::dedup::run(&kc, &cfg, &stop, routing);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                r
            })
        });
        let mut result = Ok(EXIT_OK);
        if let Some(h) = route {
            match h.join() {
                Ok(Ok(st)) => tracing::info!(
                    records = st.records,
                    routed = st.routed,
                    rejected = st.rejected,
                    "route stage stopped"
                ),
                Ok(Err(e)) => result = Err(fail(e)),
                Err(_) => result = Err((EXIT_FAILURE, "route stage panicked".to_string())),
            }
        }
        if let Some(h) = dedup {
            match h.join() {
                Ok(Ok(st)) => eprintln!(
                    "simdedup: dedup stage decided {} records: {} unique, {} duplicates, {} rejected",
                    st.records, st.unique, st.duplicates, st.rejected
                ),
                Ok(Err(e)) => result = Err(fail(e)),
                Err(_) => result = Err((EXIT_FAILURE, "dedup stage panicked".to_string())),
            }
        }
        result
    })
}

fn produce(a: ProduceArgs) -> CmdResult {
    let k = crate::io::kafka::KafkaConfig {
        brokers: a.brokers,
        ..Default::default()
    };
    let n = crate::io::kafka::tools::produce(&k, &a.topic, Some(a.partitions), &a.input)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: produced {n} records to {}", a.topic);
    Ok(EXIT_OK)
}

fn export(a: ExportArgs) -> CmdResult {
    let k = crate::io::kafka::KafkaConfig {
        brokers: a.brokers,
        ..Default::default()
    };
    let mut out: Box<dyn std::io::Write> = if a.output == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout()))
    } else {
        let f = std::fs::File::create(&a.output)
            .map_err(|e| (EXIT_FAILURE, format!("cannot create {}: {e}", a.output)))?;
        Box::new(std::io::BufWriter::new(f))
    };
    let n = crate::io::kafka::tools::export(
        &k,
        &a.topic,
        &mut out,
        std::time::Duration::from_millis(a.idle_ms),
    )
    .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    out.flush().map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: exported {n} records from {}", a.topic);
    Ok(EXIT_OK)
}

fn passthrough(a: PassthroughArgs) -> CmdResult {
    let k = crate::io::kafka::KafkaConfig {
        brokers: a.brokers,
        group_id: a.group_id,
        ..Default::default()
    };
    let stop = stop_flag();
    shutdown_watchdog(
        &stop,
        std::time::Duration::from_millis(k.shutdown_timeout_ms),
    );
    let n = crate::io::kafka::tools::passthrough(&k, &a.from, &a.to, &stop)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: passed {n} records from {} to {}", a.from, a.to);
    Ok(EXIT_OK)
}

fn replay(a: ReplayArgs) -> CmdResult {
    let mut cfg = load_config(&a.config).map_err(usage)?;
    let k = &mut cfg.kafka;
    if let Some(b) = a.brokers {
        k.brokers = b;
    }
    if let Some(t) = a.input_topic {
        k.input_topic = t;
    }
    if let Some(p) = a.routed_partitions {
        k.routed_partitions = p;
    }
    k.unique_topic = a.unique_topic;
    k.duplicates_topic = a.duplicates_topic;
    k.rejected_topic = a.rejected_topic;
    let kc = cfg.kafka.clone();
    let parts = kc.output_partitions as i32;
    let topics = [
        (kc.unique_topic.as_str(), parts),
        (kc.duplicates_topic.as_str(), parts),
        (kc.rejected_topic.as_str(), parts),
    ];
    crate::io::kafka::client::ensure_topics(&kc, &topics)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    let range = crate::io::kafka::replay::ReplayRange {
        from_offset: a.from_offset,
        to_offset: a.to_offset,
        from_time: a.from_time,
        to_time: a.to_time,
    };
    a.metrics.start()?;
    // Replay has no checkpoint: a signal during it ends it at once (the default action). The
    // stop flag exists only for --metrics-hold, once the input is done; registered earlier, it
    // would swallow the first signal and the replay would go on.
    let st = crate::io::kafka::replay::run(&kc, &cfg, &tokenizer, &range)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!(
        "simdedup: replayed {} records: {} unique, {} duplicates, {} rejected",
        st.records, st.unique, st.duplicates, st.rejected
    );
    if a.metrics.metrics_hold {
        a.metrics.hold(&stop_flag());
    }
    Ok(EXIT_OK)
}

/// The stop flag of a long-running command: the first SIGINT/SIGTERM sets it (finish, flush,
/// checkpoint or commit), a second one exits at once with `EXIT_INTERRUPTED`.
/// Ends the process with exit code 1 if a shutdown has not finished `deadline` plus 2 s after
/// `stop` was set. librdkafka's final commit and group leave can block far longer than any
/// deadline while the broker is unreachable; at-least-once delivery makes the abandoned work
/// safe: uncommitted records are processed again after a restart.
fn shutdown_watchdog(stop: &Arc<AtomicBool>, deadline: std::time::Duration) {
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

fn stop_flag() -> Arc<AtomicBool> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand, nested ones too, shows at least one example in its --help.
    #[test]
    fn every_subcommand_help_has_an_example() {
        fn walk(cmd: &mut clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands_mut().filter(|s| s.get_name() != "help") {
                let name = format!("{path} {}", sub.get_name());
                if !sub.render_long_help().to_string().contains("Example") {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        let mut cmd = Cli::command();
        cmd.build();
        walk(&mut cmd, "simdedup", &mut missing);
        assert!(missing.is_empty(), "no example in --help of: {missing:?}");
    }

    /// The exit codes the help promises are the ones the code returns.
    #[test]
    fn help_exit_codes_are_the_constants() {
        for (code, text) in [
            (EXIT_OK, "0 done"),
            (EXIT_FAILURE, "1 runtime failure"),
            (EXIT_USAGE, "2 usage"),
            (EXIT_ALREADY_DONE, "3 `dedup` refused"),
            (EXIT_INTERRUPTED, "130 `dedup` interrupted"),
        ] {
            assert!(
                EXIT_CODES.contains(text) && text.starts_with(&format!("{code} ")),
                "{text}"
            );
        }
    }
}
