//! `simdedup run`: the Kafka stream processor, stage route, dedup or both in one process.

use clap::{Args, ValueEnum};

use crate::app::common::{
    shutdown_watchdog, start_metrics, stop_flag, usage, CmdResult, ConfigArgs, KafkaFlags,
    EXIT_FAILURE, EXIT_OK,
};
use crate::app::config::Config;
use crate::text::tokenize::Tokenizer;

pub(crate) const EXAMPLES: &str = "Examples:
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
    /// Serve GET /metrics and /health on this host:port (port 0: a free port; `off`: none)
    /// [default: `metrics.address` of the config, 127.0.0.1:9464].
    #[arg(long, env = "SIMDEDUP_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Dedup stage: keep the replicated index in this local sled directory, checkpointed every
    /// `state.checkpoint_interval_ms`, so that a restart rebuilds it from disk and reads only the
    /// changelog's tail (one directory per worker; a directory of `simdedup dedup` is refused).
    #[arg(long, env = "SIMDEDUP_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// The configuration of `run`: defaults <- files <- `env` <- `run`'s flags.
pub(crate) fn run_config<I>(a: &RunArgs, env: I) -> Result<Config, String>
where
    I: IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
{
    let mut cfg = crate::app::layers::load(&a.config.config, env)
        .map_err(|e| e.to_string())?
        .config;
    KafkaFlags {
        brokers: a.brokers.clone(),
        group_id: a.group_id.clone(),
        input_topic: a.input_topic.clone(),
        routed_topic: a.routed_topic.clone(),
        routed_partitions: a.routed_partitions,
        unique_topic: a.unique_topic.clone(),
        duplicates_topic: a.duplicates_topic.clone(),
        rejected_topic: a.rejected_topic.clone(),
        changelog_topic: a.changelog_topic.clone(),
    }
    .apply(&mut cfg.kafka);
    Ok(cfg)
}

/// Runs `simdedup run`.
pub(crate) fn run(a: RunArgs) -> CmdResult {
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
    crate::io::kafka::admin::ensure_topics(&kc, &topics)
        .map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    // The stopwords are read here, so that a missing file is a usage error before any stage
    // starts; the segmenter itself (jieba's dictionary: about 0.08 s and 40 MB) is built by the
    // route stage's thread, beside the dedup stage's start, and not at all by a dedup worker.
    let stopwords = match a.role {
        Role::Dedup => None,
        Role::Route | Role::All => Some(cfg.stopwords().map_err(|e| usage(e.to_string()))?),
    };
    let local = match &a.state_dir {
        Some(dir) => Some(crate::io::kafka::dedup::LocalStateDir {
            dir: dir.clone(),
            analysis_id: cfg.analysis_id().map_err(|e| usage(e.to_string()))?,
        }),
        None => None,
    };
    let fail = |e: crate::io::kafka::KafkaError| (EXIT_FAILURE, e.to_string());
    // With both stages here, dedup holds off declaring partitions idle until route routes.
    let routing = crate::io::kafka::route::RouteStatus::default();
    let routing = (a.role == Role::All).then_some(&routing);
    std::thread::scope(|s| {
        // Whichever stage ends first (error or signal) stops the other.
        let route = stopwords.as_deref().map(|stopwords| {
            s.spawn(|| {
                let tokenizer = Tokenizer::new(cfg.text.weighting, stopwords);
                let r =
                    crate::io::kafka::route::run(&kc, &cfg.stages(), &tokenizer, &stop, routing);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                r
            })
        });
        let dedup = (a.role != Role::Route).then(|| {
            s.spawn(|| {
                let r = crate::io::kafka::dedup::run(
                    &kc,
                    &cfg.stages(),
                    &stop,
                    routing,
                    local.as_ref(),
                );
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
