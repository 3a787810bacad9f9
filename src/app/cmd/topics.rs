//! The topic tools: `simdedup produce`, `export` and `passthrough` (`io::kafka::tools`).

use std::io::Write;

use clap::Args;

use crate::app::common::{shutdown_watchdog, stop_flag, CmdResult, EXIT_FAILURE, EXIT_OK};
use crate::io::kafka::{tools, KafkaConfig};

pub(crate) const PRODUCE_HELP: &str = "Example:
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

pub(crate) const EXPORT_HELP: &str = "Example:
  simdedup export --brokers 127.0.0.1:9092 --topic posts.unique --output unique.jsonl

Reads every partition from the beginning, outside any consumer group (no offsets committed), and
writes each record's value as one line (keys are dropped; partitions interleave). It stops once
every partition is read up to the end offset it had when export started and no record came for
--idle-ms (records written meanwhile are included while they keep coming); it fails if a partition
is still short of that end after max(--idle-ms, 60 s) without a record. Client settings are the
built-in ones: no --config, so no [kafka.consumer] settings (SASL/SSL).

Exit codes: 0 done; 1 a write or Kafka error, or a partition left short of its end.";

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
    /// Stop after this many milliseconds without a record, once every partition is read up to
    /// its end offset at start.
    #[arg(long, default_value_t = 3000)]
    pub idle_ms: u64,
    /// Start every line with the record's Kafka timestamp in unix ms (-1 if it has none) and a
    /// tab: `<ms>\t<value>` (end-to-end latency is output time minus input time).
    #[arg(long)]
    pub timestamps: bool,
}

pub(crate) const PASSTHROUGH_HELP: &str = "Example:
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

/// Runs `simdedup produce`.
pub(crate) fn produce(a: ProduceArgs) -> CmdResult {
    let k = KafkaConfig {
        brokers: a.brokers,
        ..Default::default()
    };
    let n = tools::produce(&k, &a.topic, Some(a.partitions), &a.input)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: produced {n} records to {}", a.topic);
    Ok(EXIT_OK)
}

/// Runs `simdedup export`.
pub(crate) fn export(a: ExportArgs) -> CmdResult {
    let k = KafkaConfig {
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
    let n = tools::export(
        &k,
        &a.topic,
        &mut out,
        std::time::Duration::from_millis(a.idle_ms),
        a.timestamps,
    )
    .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    out.flush().map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: exported {n} records from {}", a.topic);
    Ok(EXIT_OK)
}

/// Runs `simdedup passthrough`.
pub(crate) fn passthrough(a: PassthroughArgs) -> CmdResult {
    let k = KafkaConfig {
        brokers: a.brokers,
        group_id: a.group_id,
        ..Default::default()
    };
    let stop = stop_flag();
    shutdown_watchdog(
        &stop,
        std::time::Duration::from_millis(k.shutdown_timeout_ms),
    );
    let n =
        tools::passthrough(&k, &a.from, &a.to, &stop).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    eprintln!("simdedup: passed {n} records from {} to {}", a.from, a.to);
    Ok(EXIT_OK)
}
