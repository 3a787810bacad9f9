//! `simdedup replay`: a deterministic backfill of a raw topic range (`io::kafka::replay`).

use clap::Args;

use crate::app::common::{
    build_tokenizer, load_config, stop_flag, usage, CmdResult, ConfigArgs, KafkaFlags, MetricsArgs,
    EXIT_FAILURE, EXIT_OK,
};

pub(crate) const EXAMPLES: &str = "Example:
  simdedup replay --brokers 127.0.0.1:9092 --input-topic posts --from-time 1700000000 \\
      --unique-topic backfill.unique --duplicates-topic backfill.duplicates --rejected-topic backfill.rejected

Deterministic: the same range gives the same verdicts, in the order the live topology decides.
Streams the range (a few thousand records buffered per partition), with a progress line every
100,000 records; missing output topics are created.

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

/// Runs `simdedup replay`.
pub(crate) fn run(a: ReplayArgs) -> CmdResult {
    let mut cfg = load_config(&a.config).map_err(usage)?;
    KafkaFlags {
        brokers: a.brokers.clone(),
        input_topic: a.input_topic.clone(),
        routed_partitions: a.routed_partitions,
        unique_topic: Some(a.unique_topic.clone()),
        duplicates_topic: Some(a.duplicates_topic.clone()),
        rejected_topic: Some(a.rejected_topic.clone()),
        ..KafkaFlags::default()
    }
    .apply(&mut cfg.kafka);
    let kc = cfg.kafka.clone();
    let parts = kc.output_partitions as i32;
    let topics = [
        (kc.unique_topic.as_str(), parts),
        (kc.duplicates_topic.as_str(), parts),
        (kc.rejected_topic.as_str(), parts),
    ];
    crate::io::kafka::admin::ensure_topics(&kc, &topics)
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
    let st = crate::io::kafka::replay::run(&kc, &cfg.stages(), &tokenizer, &range)
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
