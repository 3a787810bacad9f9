//! librdkafka clients as the stages need them: consumers whose offsets are stored only by us,
//! producers whose delivery reports come back over a channel, rebalance events recorded for the
//! worker loop (topic creation is `admin`'s).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Message;

use super::acks::DeliveredEnds;
use super::polled::PolledProducer;
use super::{sched, KafkaConfig, KafkaError};
use crate::metrics;

/// Consumer keys the delivery semantics depend on: (key, pinned value).
const PINNED_CONSUMER: &[(&str, &str)] = &[
    ("enable.auto.offset.store", "false"),
    ("enable.auto.commit", "true"),
    ("enable.partition.eof", "true"),
    ("isolation.level", "read_committed"),
];
/// Producer keys the delivery semantics depend on.
const PINNED_PRODUCER: &[(&str, &str)] = &[("acks", "all"), ("enable.idempotence", "true")];

/// The configured `[kafka.consumer]` / `[kafka.producer]` settings that simdedup overrides
/// because delivery semantics depend on them, one line each (for `check-config`).
pub fn pinned_overrides(k: &KafkaConfig) -> Vec<String> {
    let sections = [
        ("consumer", &k.consumer, PINNED_CONSUMER),
        ("producer", &k.producer, PINNED_PRODUCER),
    ];
    let mut out = Vec::new();
    for (name, extra, pinned) in sections {
        for (key, v) in pinned {
            if let Some(given) = extra.get(*key) {
                out.push(format!(
                    "kafka.{name}.\"{key}\" = {given:?} is ignored: simdedup pins it to {v:?}"
                ));
            }
        }
    }
    out
}

fn base(
    k: &KafkaConfig,
    extra: &std::collections::BTreeMap<String, String>,
    pinned: &[(&str, &str)],
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers);
    c.set_log_level(log_level(extra));
    for (key, v) in extra {
        if pinned.iter().any(|(p, _)| p == key) {
            tracing::warn!(key = %key, "librdkafka setting is pinned by simdedup; ignoring the configured value");
            continue;
        }
        c.set(key, v);
    }
    for (key, v) in pinned {
        c.set(*key, *v);
    }
    c
}

/// The most verbose librdkafka level passed on to `ClientContext::log`: warnings and errors,
/// or everything when the tracing filter enables `librdkafka=debug` or a `debug` context list
/// is configured (librdkafka would otherwise drop its debug lines before they reach us).
fn log_level(extra: &std::collections::BTreeMap<String, String>) -> RDKafkaLogLevel {
    let traced = tracing::enabled!(target: "librdkafka", tracing::Level::DEBUG);
    if extra.contains_key("debug") && !traced {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            tracing::warn!("librdkafka `debug` is set but its lines are filtered out: add librdkafka=debug to --log-level");
        });
    }
    if traced || extra.contains_key("debug") {
        RDKafkaLogLevel::Debug
    } else {
        RDKafkaLogLevel::Warning
    }
}

/// Forwards a librdkafka log line to `tracing` (target `librdkafka`, field `facility`).
fn forward_log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    use RDKafkaLogLevel as L;
    match level {
        L::Emerg | L::Alert | L::Critical | L::Error => {
            tracing::error!(target: "librdkafka", facility, "{message}")
        }
        L::Warning => tracing::warn!(target: "librdkafka", facility, "{message}"),
        L::Notice | L::Info => tracing::info!(target: "librdkafka", facility, "{message}"),
        L::Debug => tracing::debug!(target: "librdkafka", facility, "{message}"),
    }
}

/// How long librdkafka postpones fetching a partition once its prefetch queue is over
/// `queued.min.messages`. Its 1 s default stalled a backlog: tansu 0.6 answers a fetch with a
/// whole partition (it ignores `max.partition.fetch.bytes`), so one response overfills the queue,
/// and the route stage's event-time merge then waits a second for the partitions not yet fetched
/// (400,000 posts in 8 partitions: 2.2 s from the first record to the first routed envelope).
const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// Config of a group consumer.
pub fn consumer_config(k: &KafkaConfig, group: &str) -> ClientConfig {
    let mut c = base(k, &k.consumer, PINNED_CONSUMER);
    c.set("group.id", group);
    c.set_if_absent("auto.offset.reset", "earliest");
    c.set_if_absent("auto.commit.interval.ms", "1000");
    // Eager: cooperative-sticky left partitions unassigned on tansu 0.6 after a member died
    // (measured); brokers that handle it can opt in through [kafka.consumer].
    c.set_if_absent("partition.assignment.strategy", "range,roundrobin");
    // A fetch that finds nothing new returns after this long: librdkafka's 500 ms default
    // added up to half a second per stage on brokers that hold an empty fetch for the whole
    // wait (tansu 0.6; measured end-to-end at 1,000 posts/s: mean 1.37 s -> 0.65 s).
    c.set_if_absent("fetch.wait.max.ms", "10");
    c.set_if_absent("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    if metrics::global().enabled() {
        // Consumer lag per partition comes from librdkafka's statistics (RebalanceLog::stats).
        c.set_if_absent("statistics.interval.ms", "5000");
    }
    c
}

/// Config of a consumer outside any group (the changelog reader assigns its partition itself).
pub fn reader_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = base(k, &k.consumer, PINNED_CONSUMER);
    // librdkafka requires a group id even for assign(); it never joins (no subscribe).
    c.set("group.id", format!("{}.reader", k.group_id));
    c.set("enable.auto.commit", "false");
    // Progress markers gate other workers' decisions: fetch them with low latency.
    c.set_if_absent("fetch.wait.max.ms", "5");
    c.set_if_absent("fetch.error.backoff.ms", "5");
    c.set_if_absent("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    c
}

/// Config of the consumer that reads other workers' routed partitions ahead (dedup workers,
/// outside the group like the changelog reader): fetched with low latency, and a small
/// prefetch queue, since it is read only while a post waits.
pub fn ahead_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = reader_config(k);
    c.set("group.id", format!("{}.ahead", k.group_id));
    c.set_if_absent("queued.max.messages.kbytes", "16384");
    c
}

/// Config of a producer.
pub fn producer_config(k: &KafkaConfig) -> ClientConfig {
    producer_with(k, "1", "lz4")
}

/// Config of a dedup worker's output producer (verdicts and rejections; a lone worker's
/// changelog too). Outputs are keyed by post id, so each producer batches for every output
/// partition; librdkafka's produce path took a sixth of a worker's CPU, lz4 6%, most of it
/// setting up (allocating and zeroing) a context per batch. Uncompressed with a 5 ms linger,
/// one and two workers drained a backlog 1.10x and 1.11x as fast (README, Backlog). A worker
/// that shares the routed partitions writes half the outputs into as many partitions, in
/// batches half as large: with 20 ms, two workers' librdkafka threads spent 4.3 us per post
/// against 5.3 and drained the routed backlog 1.15x as fast, a lone worker as fast, live p99
/// about 10 ms later (README, Outputs lingering 20 ms). Nobody waits on outputs. The changelog's
/// own producer keeps 1 ms and lz4: other workers await its markers.
fn output_producer_config(k: &KafkaConfig) -> ClientConfig {
    producer_with(k, "20", "none")
}

/// Config of the route stage's producer (`envelope_producer`): its envelopes are
/// zstd-compressed already (`wire::Envelope`), so librdkafka does not compress them again unless
/// `compression.type` is configured (lz4 over them took about 2% of `run --role all`'s CPU for
/// no gain).
fn envelope_producer_config(k: &KafkaConfig) -> ClientConfig {
    producer_with(k, "1", "none")
}

/// Producer config whose `linger.ms` and `compression.type`, unless configured, are these.
///
/// Producers connect to every broker they learn of at once (`enable.sparse.connections`
/// false), not only to the ones they have a request for. An idempotent producer sends nothing
/// before a broker has given it a producer id, and it asks only a broker whose connection is
/// up: with sparse connections none is at its start (the bootstrap connection does not count),
/// and it looks again every 500 ms, having connected to the broker it found on the first look
/// just after it. Each stage's first records left about a second after its producer was made
/// (librdkafka's debug log: the id acquired 1.0 s after the producer started, against 5 ms
/// without sparse connections), the route stage's envelopes and, once the changelog no longer
/// held it back (`dedup::changelog::assign`), a dedup worker's sync record with them:
/// `run --role all` on 100,000 posts gave its first 10,000 verdicts 0.70–1.00 s after launch,
/// against 1.53–1.57 s (README, Kafka throughput against a pass-through).
fn producer_with(k: &KafkaConfig, linger_ms: &str, compression: &str) -> ClientConfig {
    let mut c = base(k, &k.producer, PINNED_PRODUCER);
    c.set_if_absent("linger.ms", linger_ms);
    c.set_if_absent("compression.type", compression);
    c.set_if_absent("enable.sparse.connections", "false");
    c
}

pub(crate) trait SetIfAbsent {
    fn set_if_absent(&mut self, key: &str, v: &str);
}

impl SetIfAbsent for ClientConfig {
    fn set_if_absent(&mut self, key: &str, v: &str) {
        if self.get(key).is_none() {
            self.set(key, v);
        }
    }
}

/// What a produced record stands for, so its delivery report can be credited.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tag {
    /// An output of input `offset` of `partition`.
    Record {
        /// Input partition.
        partition: u32,
        /// Input offset.
        offset: u64,
    },
    /// A routed envelope: one output of each input (partition, offset) it carries.
    Records(Vec<(u32, u64)>),
    /// A batch of index entries on the changelog. It credits no input: a progress marker written
    /// after it on the same changelog partition is acknowledged only once the batch is, and input
    /// offsets are stored only behind acknowledged markers (idempotent, ordered producer).
    Changelog,
    /// A progress marker of a dedup partition covering inputs through `last_offset`.
    Marker {
        /// Routed partition.
        partition: u32,
        /// Last decided offset the marker covers.
        last_offset: Option<u64>,
    },
}

/// What a delivery report says, tagged by the sender.
#[derive(Debug)]
pub struct Delivery {
    /// The tag given at send time.
    pub tag: Tag,
    /// `Err(message)` when librdkafka gave up on the record.
    pub result: Result<(), String>,
    /// Topic of the record, when its delivery failed (empty otherwise: a delivered record's
    /// report costs no allocation).
    pub topic: String,
}

/// Producer context that forwards delivery reports to a channel.
pub struct AckContext {
    tx: Mutex<Sender<Delivery>>,
    /// Where delivered routed envelopes (`Tag::Records`) end, if tracked.
    envelopes: Option<Arc<DeliveredEnds>>,
    /// Set once librdkafka's statistics show the idempotent producer's id assigned
    /// (`paced_producer`); `None` when not watched.
    id_assigned: Option<Arc<AtomicBool>>,
}

impl ClientContext for AckContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn stats_raw(&self, raw: &[u8]) {
        let Some(flag) = self
            .id_assigned
            .as_ref()
            .filter(|f| !f.load(Ordering::Relaxed))
        else {
            return;
        };
        if let Ok(s) = serde_json::from_slice::<rdkafka::Statistics>(raw) {
            if s.eos.is_some_and(|e| e.idemp_state == "Assigned") {
                flag.store(true, Ordering::Release);
            }
        }
    }
}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Box<Tag>;

    fn delivery(&self, r: &DeliveryResult<'_>, tag: Box<Tag>) {
        if let (Some(ends), Ok(m), Tag::Records(_)) = (&self.envelopes, r, &*tag) {
            ends.note(m.partition(), m.offset());
        }
        let (result, topic) = match r {
            Ok(_) => (Ok(()), String::new()),
            Err((e, m)) => (Err(e.to_string()), m.topic().to_string()),
        };
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(Delivery {
                tag: *tag,
                result,
                topic,
            });
        }
    }
}

/// A producer and the receiving end of its delivery reports.
pub fn producer(
    k: &KafkaConfig,
) -> Result<(PolledProducer<AckContext>, Receiver<Delivery>), KafkaError> {
    with_acks(k, producer_config(k), None)
}

/// How often a paced producer's statistics are read (`paced_producer`): the wait for them comes
/// once, before the first record, and librdkafka keeps writing them for the producer's life.
const PACED_STATS_MS: &str = "100";

/// A producer (`producer_config`) for a source that timestamps its records as it sends them
/// (`generate --rate`), its delivery reports, and a flag set once it can deliver: librdkafka
/// holds an idempotent producer's records until the broker has assigned it a producer id, and
/// when its first request finds no broker connection ready, it asks again 500 ms later. The
/// first records of a paced stream then reached tansu about half a second after their
/// timestamps (a confluent-kafka producer with these settings: two starts of three; none in six
/// starts without idempotence). Its statistics tell when the id came (within milliseconds since
/// producers connect to every broker at once, `producer_with`, unless configured otherwise).
pub fn paced_producer(k: &KafkaConfig) -> Result<PacedProducer, KafkaError> {
    let mut c = producer_config(k);
    c.set_if_absent("statistics.interval.ms", PACED_STATS_MS);
    let (tx, rx) = channel();
    let ready = Arc::new(AtomicBool::new(false));
    let producer = with_acks_to(k, c, tx, None, Some(ready.clone()))?;
    Ok((producer, rx, ready))
}

/// A paced producer, the receiving end of its delivery reports, and whether its producer id has
/// been assigned (`paced_producer`).
pub type PacedProducer = (
    PolledProducer<AckContext>,
    Receiver<Delivery>,
    Arc<AtomicBool>,
);

/// The route stage's producer (`envelope_producer_config`); where its envelopes end is noted in
/// `envelopes`.
pub fn envelope_producer(
    k: &KafkaConfig,
    envelopes: Arc<DeliveredEnds>,
) -> Result<(PolledProducer<AckContext>, Receiver<Delivery>), KafkaError> {
    with_acks(k, envelope_producer_config(k), Some(envelopes))
}

/// A producer, a sender of delivery reports and their receiving end.
pub type Reporting = (
    PolledProducer<AckContext>,
    Sender<Delivery>,
    Receiver<Delivery>,
);

/// A dedup worker's output producer (`output_producer_config`), the receiving end of its
/// delivery reports, and a sender for more producers reporting there (`producer_reporting_to`).
pub fn producer_and_sender(k: &KafkaConfig) -> Result<Reporting, KafkaError> {
    let (tx, rx) = channel();
    Ok((
        with_acks_to(k, output_producer_config(k), tx.clone(), None, None)?,
        tx,
        rx,
    ))
}

/// A producer (`producer_config`) whose delivery reports go to `tx`.
pub fn producer_reporting_to(
    k: &KafkaConfig,
    tx: Sender<Delivery>,
) -> Result<PolledProducer<AckContext>, KafkaError> {
    with_acks_to(k, producer_config(k), tx, None, None)
}

/// A producer made from `c` whose delivery reports arrive on the receiver.
fn with_acks(
    k: &KafkaConfig,
    c: ClientConfig,
    envelopes: Option<Arc<DeliveredEnds>>,
) -> Result<(PolledProducer<AckContext>, Receiver<Delivery>), KafkaError> {
    let (tx, rx) = channel();
    Ok((with_acks_to(k, c, tx, envelopes, None)?, rx))
}

/// A producer made from `c` whose delivery reports go to `tx` (`AckContext` for `envelopes`
/// and `id_assigned`).
fn with_acks_to(
    k: &KafkaConfig,
    c: ClientConfig,
    tx: Sender<Delivery>,
    envelopes: Option<Arc<DeliveredEnds>>,
    id_assigned: Option<Arc<AtomicBool>>,
) -> Result<PolledProducer<AckContext>, KafkaError> {
    create(
        k,
        &c,
        AckContext {
            tx: Mutex::new(tx),
            envelopes,
            id_assigned,
        },
    )
}

/// A stage's client made from `c`, its threads under the policy `kafka.batch_client_threads`
/// asks for (`sched`).
pub fn create<C: ClientContext, T: FromClientConfigAndContext<C>>(
    k: &KafkaConfig,
    c: &ClientConfig,
    context: C,
) -> Result<T, KafkaError> {
    Ok(sched::batch_threads(k.batch_client_threads, || {
        c.create_with_context(context)
    })?)
}

/// A rebalance as the worker loop sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceEvent {
    /// Partitions added to this member.
    Assigned(Vec<u32>),
    /// Partitions taken away.
    Revoked(Vec<u32>),
}

/// Consumer context recording rebalances for the loop to act on after `poll` returns.
#[derive(Default)]
pub struct RebalanceLog {
    topic: String,
    events: Mutex<Vec<RebalanceEvent>>,
}

impl RebalanceLog {
    /// A log for rebalances of `topic`.
    pub fn new(topic: &str) -> RebalanceLog {
        RebalanceLog {
            topic: topic.to_string(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Events since the last call.
    pub fn drain(&self) -> Vec<RebalanceEvent> {
        self.events
            .lock()
            .map(|mut e| std::mem::take(&mut *e))
            .unwrap_or_default()
    }
}

impl ClientContext for RebalanceLog {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        log_client_error(error, reason);
    }

    fn stats(&self, s: rdkafka::Statistics) {
        for (topic, t) in &s.topics {
            let lags: Vec<(i32, Option<i64>)> = t
                .partitions
                .values()
                .filter(|p| p.partition >= 0)
                .map(|p| {
                    let lag = p.consumer_lag;
                    (p.partition, (lag >= 0).then_some(lag))
                })
                .collect();
            metrics::global().consumer_lag(topic, &lags);
        }
    }
}

/// Client context of consumers outside a group: librdkafka errors go to `tracing`, end-of-
/// partition notices (expected with `enable.partition.eof`) are dropped.
pub struct QuietContext;

impl ClientContext for QuietContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        log_client_error(error, reason);
    }
}

impl ConsumerContext for QuietContext {}

fn log_client_error(error: rdkafka::error::KafkaError, reason: &str) {
    use rdkafka::error::KafkaError as E;
    if !matches!(
        error,
        E::PartitionEOF(_) | E::Global(RDKafkaErrorCode::PartitionEOF)
    ) {
        tracing::error!(error = %error, reason, "librdkafka error");
    }
}

impl ConsumerContext for RebalanceLog {
    fn post_rebalance(&self, _c: &BaseConsumer<Self>, r: &Rebalance<'_>) {
        let parts = |tpl: &rdkafka::TopicPartitionList| -> Vec<u32> {
            tpl.elements()
                .iter()
                .filter(|e| e.topic() == self.topic)
                .map(|e| e.partition() as u32)
                .collect()
        };
        let ev = match r {
            Rebalance::Assign(tpl) => RebalanceEvent::Assigned(parts(tpl)),
            Rebalance::Revoke(tpl) => RebalanceEvent::Revoked(parts(tpl)),
            Rebalance::Error(e) => {
                metrics::global().rebalance("error");
                tracing::warn!(error = %e, "rebalance error");
                return;
            }
        };
        metrics::global().rebalance(match ev {
            RebalanceEvent::Assigned(_) => "assign",
            RebalanceEvent::Revoked(_) => "revoke",
        });
        tracing::info!(topic = %self.topic, event = ?ev, "rebalance");
        if let Ok(mut e) = self.events.lock() {
            e.push(ev);
        }
    }
}

/// Config of an admin client (`admin`).
pub(super) fn admin_config(k: &KafkaConfig) -> ClientConfig {
    base(k, &k.producer, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(c: &ClientConfig, key: &str) -> String {
        c.get(key).unwrap_or_default().to_string()
    }

    #[test]
    fn a_paced_producer_learns_when_its_producer_id_is_assigned() {
        let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
        let k = KafkaConfig {
            brokers: cluster.bootstrap_servers(),
            ..Default::default()
        };
        let (_producer, _reports, ready) = paced_producer(&k).unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !ready.load(Ordering::Acquire) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(ready.load(Ordering::Acquire), "no producer id seen in 20 s");
    }

    #[test]
    fn producers_default_by_purpose_and_configured_keys_win() {
        let k = KafkaConfig::default();
        let out = output_producer_config(&k);
        assert_eq!(
            (get(&out, "linger.ms"), get(&out, "compression.type")),
            ("20".into(), "none".into())
        );
        let changelog = producer_config(&k);
        assert_eq!(
            (
                get(&changelog, "linger.ms"),
                get(&changelog, "compression.type")
            ),
            ("1".into(), "lz4".into())
        );
        let envelopes = envelope_producer_config(&k);
        assert_eq!(get(&envelopes, "compression.type"), "none");
        for c in [&out, &changelog, &envelopes] {
            assert_eq!(get(c, "acks"), "all");
            assert_eq!(get(c, "enable.idempotence"), "true");
            assert_eq!(get(c, "enable.sparse.connections"), "false");
        }
        let mut k = KafkaConfig::default();
        k.producer.insert("compression.type".into(), "zstd".into());
        k.producer.insert("linger.ms".into(), "20".into());
        let out = output_producer_config(&k);
        assert_eq!(
            (get(&out, "linger.ms"), get(&out, "compression.type")),
            ("20".into(), "zstd".into())
        );
    }
}
