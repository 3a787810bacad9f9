//! The Kafka topology. Stage `route` (stateless) decodes, normalizes, segments and fingerprints
//! raw posts and produces them to a keyed internal topic, on the partition named by the
//! fingerprint's dominant block. Stage `dedup` (stateful) decides the posts of the partitions it
//! owns against a replicated index: every worker applies every partition's index entries from a
//! changelog topic, and decides its own posts in a global order so that verdicts do not depend on
//! which worker owns what, or when.

pub mod acks;
pub mod admin;
pub mod client;
pub mod dedup;
pub mod fetch;
mod gate;
mod lookahead;
mod merge;
pub mod outbox;
pub mod polled;
mod queues;
pub mod replay;
pub mod route;
mod sched;
pub mod tools;
mod upstream;
pub mod wire;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Deploy-time Kafka settings (the `[kafka]` config section; each also a flag and a
/// `SIMDEDUP_*` variable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma-separated `host:port`.
    pub brokers: String,
    /// Consumer group prefix: stages join `<group_id>.route` and `<group_id>.dedup`.
    pub group_id: String,
    /// Topic of raw posts (JSON).
    pub input_topic: String,
    /// Internal keyed topic between the stages.
    pub routed_topic: String,
    /// Partitions of the routed topic (created if missing); the unit of dedup parallelism.
    pub routed_partitions: u32,
    /// Unique posts (the original JSON).
    pub unique_topic: String,
    /// Duplicate-cluster events.
    pub duplicates_topic: String,
    /// Rejected records.
    pub rejected_topic: String,
    /// Replicated index changelog (one partition; keep at least the window).
    pub changelog_topic: String,
    /// Partitions of the output topics when they are created.
    pub output_partitions: u32,
    /// Replication factor of created topics.
    pub replication_factor: i32,
    /// A caught-up partition with no new record for this long stops holding other partitions
    /// back (its owner declares it idle). The clock starts at assignment (a routed partition
    /// taken over where its previous owner left it idle, with nothing new since, is idle at
    /// once). An empty routed partition is idle only once what the raw topic held is routed:
    /// in `run --role all`, once its route stage has routed for this long or caught up (with
    /// the only route worker of the group, a partition fetched to its end is idle as soon as
    /// that stage has been caught up for a moment); in a dedup worker without a route stage,
    /// once the route group's committed offsets reach the raw topic's high watermarks read
    /// since the partition's last record (`upstream`).
    pub idle_after_ms: u64,
    /// After a record arrives on a quiet partition (a burst after silence), quiet partitions
    /// keep holding the others back for this long, so that records written together to several
    /// partitions, which reach a consumer one partition at a time, are still merged in order.
    /// 0 lets a quiet partition's last report stand (the first records of a burst may then be
    /// ordered by arrival).
    pub wake_grace_ms: u64,
    /// How often a dedup worker publishes progress markers for its partitions; also the longest
    /// round of decisions between two polls of its consumers (at least 1 ms).
    pub marker_interval_ms: u64,
    /// Event-time tick, in seconds, of the cross-partition order. A post sees the entries of other
    /// routed partitions from earlier ticks only (its own partition's from every earlier post), so
    /// dedup workers decide a tick in parallel and wait for each other once per tick instead of
    /// once per post. 0 (the default) = strict order: every earlier post of every partition, the
    /// file pipeline's verdicts, but several workers run in lock step on a backlog. Must be the
    /// same for every worker and replay of a topology.
    pub order_tick_secs: u64,
    /// Live slack, in ms: a live post (`live_lag_secs`) does not see another routed partition's
    /// posts of its own event second that arrived (raw record timestamp) less than this before
    /// it, so dedup workers wait for each other only until the others have decided what arrived
    /// that long before, instead of post by post. A backlog keeps the strict order. 0 = strict
    /// order always. Must be the same for every worker and replay of a topology.
    pub live_slack_ms: u64,
    /// A post is live when its raw record arrived at most this many seconds after the event
    /// time its routed partition had reached: only live posts get the slack (`live_slack_ms`),
    /// and only their arrival orders posts of one event second before the partition does.
    pub live_lag_secs: u64,
    /// Shutdown deadline: finish, flush and commit within this time after the first signal. `run`
    /// and `passthrough` end the process (exit code 1) 2 s past it.
    pub shutdown_timeout_ms: u64,
    /// Make the stages' librdkafka threads under Linux's `SCHED_BATCH` policy, so that their
    /// wakeups do not preempt the threads deciding posts (`sched`); they run on a free core or
    /// when the running thread's time slice ends. No effect elsewhere than on Linux.
    pub batch_client_threads: bool,
    /// Extra librdkafka consumer settings (SASL/SSL and tuning). Keys that would break delivery
    /// semantics are pinned and overridden with a warning.
    pub consumer: BTreeMap<String, String>,
    /// Extra librdkafka producer settings.
    pub producer: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            group_id: "simdedup".into(),
            input_topic: "posts".into(),
            routed_topic: "simdedup.routed".into(),
            routed_partitions: 8,
            unique_topic: "posts.unique".into(),
            duplicates_topic: "posts.duplicates".into(),
            rejected_topic: "posts.rejected".into(),
            changelog_topic: "simdedup.changelog".into(),
            output_partitions: 8,
            replication_factor: 1,
            idle_after_ms: 2_000,
            wake_grace_ms: 250,
            marker_interval_ms: 50,
            order_tick_secs: 0,
            live_slack_ms: 250,
            live_lag_secs: 60,
            shutdown_timeout_ms: 30_000,
            batch_client_threads: true,
            consumer: BTreeMap::new(),
            producer: BTreeMap::new(),
        }
    }
}

impl KafkaConfig {
    /// The cross-partition visibility rule these settings give (`OrderKey::sees`).
    pub fn visibility(&self) -> crate::index::Visibility {
        crate::index::Visibility {
            tick_secs: self.order_tick_secs,
            slack_ms: self.live_slack_ms,
            live_lag_secs: self.live_lag_secs,
        }
    }

    /// The output topic of a sink.
    pub fn topic_for(&self, sink: crate::io::records::Sink) -> &str {
        use crate::io::records::Sink;
        match sink {
            Sink::Unique => &self.unique_topic,
            Sink::Duplicate => &self.duplicates_topic,
            Sink::Rejected => &self.rejected_topic,
        }
    }
}

/// Kafka-side failures. All are fatal for the worker: offsets already stored cover only fully
/// delivered outputs, so a restart resumes without loss.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// librdkafka reported an error.
    #[error("kafka: {0}")]
    Client(#[from] rdkafka::error::KafkaError),
    /// An output could not be delivered.
    #[error("delivery to {topic} failed: {message}")]
    Delivery {
        /// Topic.
        topic: String,
        /// librdkafka's message.
        message: String,
    },
    /// Topic creation failed.
    #[error("cannot create topic {topic}: {message}")]
    Admin {
        /// Topic.
        topic: String,
        /// Broker's message.
        message: String,
    },
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
}
