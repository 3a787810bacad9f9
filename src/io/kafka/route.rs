//! Stage `route`: raw posts in, routed posts out. Stateless: decode, normalize, segment,
//! fingerprint, pick the partition by the dominant block. Posts bound for one routed partition
//! travel in envelopes (one record for many posts: the broker's cost is per record), sent when
//! full or when nothing more can go out before the next poll. Bad input goes straight to the
//! rejected topic. An input offset is stored only after its output is acknowledged, and after all
//! earlier offsets of its partition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::producer::Producer;
use rdkafka::Message;

use super::acks::Acks;
use super::client::{self, AckContext, Delivery, RebalanceEvent, RebalanceLog, Tag};
use super::fetch;
use super::merge::{earliest, merge_time, Wake};
use super::outbox::{commit, commit_with, send, settle, store_offsets, Out};
use super::polled::PolledProducer;
use super::queues::Split;
use super::wire::{encode_routed_into, Envelope, ENVELOPE_MAX_POSTS};
use super::{KafkaConfig, KafkaError};
use crate::engine::Analyzed;
use crate::io::config::StageConfig;
use crate::io::records::rejected_record;
use crate::io::steps::{Admission, PostRouter};
use crate::metrics::{self, Stage};
use crate::text::tokenize::Tokenizer;

/// A route stage with everything it read routed and acknowledged commits its stored offsets
/// at once, at most this often, besides librdkafka's auto-commit (each second): a dedup worker
/// in another process takes an empty routed partition as idle only once the route group's
/// commits show the raw topic routed past its last record (`upstream`), so the end of a
/// backlog, or a quiet partition of a slow stream, is settled sooner.
const COMMIT_CAUGHT_UP_EVERY: Duration = Duration::from_millis(200);

/// What a route stage tells the dedup stage of the same process (`run --role all`).
#[derive(Debug, Default)]
pub struct RouteStatus {
    /// Set once the stage has an assignment and its merge has run: every owned raw partition
    /// had a record or was caught up.
    pub routing: AtomicBool,
    /// Whether, after its last round, the stage held nothing back: every owned raw partition
    /// was fetched to the end the broker reported, nothing was buffered, and every record sent
    /// was acknowledged. Everything it read is then on the routed topic.
    pub caught_up: AtomicBool,
    /// Whether the stage owns every partition of the input topic: no other route worker feeds
    /// the routed topic, so once this stage is caught up, nothing more is on its way.
    pub sole: AtomicBool,
    /// Where the envelopes this stage delivered end, per routed partition.
    pub delivered: std::sync::Arc<super::acks::DeliveredEnds>,
}

/// Counters of a route worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Records consumed.
    pub records: u64,
    /// Routed posts produced.
    pub routed: u64,
    /// Rejected records produced.
    pub rejected: u64,
}

/// A raw record waiting for its turn in event-time order.
struct Pending {
    offset: u64,
    /// The record's Kafka timestamp (unix ms), if any.
    input_ms: Option<i64>,
    time: i64,
    post: Result<crate::input::Decoded, crate::types::Rejection>,
    line: Vec<u8>,
}

/// Per raw partition: buffered records and whether the consumer is caught up.
struct RawPartition {
    buf: std::collections::VecDeque<Pending>,
    at_eof: bool,
    last_record: Instant,
    fetch: fetch::FetchProgress,
}

impl RawPartition {
    fn new(start: Option<Option<i64>>) -> Self {
        RawPartition {
            buf: Default::default(),
            at_eof: false,
            last_record: Instant::now(),
            fetch: fetch::FetchProgress::new(start),
        }
    }

    /// Nothing buffered and nothing more expected soon: at the end, or silent for `idle`
    /// (some brokers send no end-of-partition event when the committed offset is the end), and
    /// the broker reported nothing past what was fetched.
    fn caught_up(&self, idle: Duration) -> bool {
        self.buf.is_empty()
            && (self.at_eof
                || (self.last_record.elapsed() >= idle && self.fetch.may_be_caught_up()))
    }
}

/// Runs a route worker until `stop` is set. Records of the raw partitions this worker owns are
/// merged by event time before they are routed, so each routed partition receives posts in time
/// order even when a backlog is consumed partition by partition, or a burst after silence
/// arrives partition by partition (`merge::Wake`). `status` (for a dedup stage in the same
/// process) is kept up to date after every round.
pub fn run(
    k: &KafkaConfig,
    cfg: &StageConfig,
    tokenizer: &Tokenizer,
    stop: &AtomicBool,
    status: Option<&RouteStatus>,
) -> Result<RouteStats, KafkaError> {
    let consumer: BaseConsumer<RebalanceLog> = client::create(
        k,
        &client::consumer_config(k, &format!("{}.route", k.group_id)),
        RebalanceLog::new(&k.input_topic),
    )?;
    consumer.subscribe(&[&k.input_topic])?;
    let q = Split::new(consumer, &k.input_topic);
    let ends = status.map_or_else(Default::default, |s| s.delivered.clone());
    let (producer, deliveries) = client::envelope_producer(k, ends)?;
    let mut r = Encoder {
        router: PostRouter::new(tokenizer, k.routed_partitions, &cfg.routing),
        a: Analyzed::default(),
        rec: Vec::with_capacity(1024),
    };
    let admission = Admission::new(cfg);
    let mut acks = Acks::default();
    let mut stored: std::collections::BTreeMap<u32, u64> = Default::default();
    // The stored offsets as last committed by `COMMIT_CAUGHT_UP_EVERY`'s early commits.
    let mut committed = stored.clone();
    let mut last_commit = Instant::now();
    let mut stats = RouteStats::default();
    let mut parts: std::collections::BTreeMap<u32, RawPartition> = Default::default();
    let mut last_time = i64::MIN;
    let idle = Duration::from_millis(k.idle_after_ms);
    let mut wake = Wake::new(Duration::from_millis(k.wake_grace_ms));
    let mut progressed = true;
    let mut assigned = false;
    let mut outgoing: Vec<Outgoing> = (0..k.routed_partitions)
        .map(|_| Outgoing::default())
        .collect();
    let health = |state| metrics::global().set_health("route", state);
    health(Err("waiting for partition assignment".into()));
    while !stop.load(Ordering::Relaxed) {
        settle(&deliveries, &mut acks, &mut |_, _| {})?;
        store_offsets(q.consumer(), &k.input_topic, &acks, &mut stored)?;
        // The consumer's own queue first, until it is empty: rebalances, and any record
        // fetched before its partition's queue was split, which comes before what that queue
        // holds.
        let mut got = 0;
        let mut drained = false;
        for _ in 0..POLL_BATCH {
            if q.main_pending() == 0 {
                drained = true;
                break;
            }
            let Some(msg) = q.poll_main() else {
                // A rebalance is served by a poll that returns nothing.
                for ev in q.consumer().context().drain() {
                    match ev {
                        RebalanceEvent::Assigned(ps) => {
                            health(Ok(()));
                            assigned = true;
                            let starts = fetch::committed_starts(q.consumer(), &k.input_topic, &ps);
                            for p in ps {
                                q.split(p);
                                parts
                                    .entry(p)
                                    .or_insert_with(|| RawPartition::new(starts.get(&p).copied()));
                            }
                            if let Some(s) = status {
                                s.sole.store(
                                    owns_all(q.consumer(), k, parts.len()),
                                    Ordering::Relaxed,
                                );
                            }
                        }
                        RebalanceEvent::Revoked(ps) => {
                            if let Some(s) = status {
                                s.sole.store(false, Ordering::Relaxed);
                            }
                            ps.iter().for_each(|p| {
                                q.remove(*p);
                                acks.remove(*p);
                                parts.remove(p);
                            })
                        }
                    }
                }
                continue;
            };
            got += 1;
            take(msg, &mut parts, &admission, &mut wake, idle, last_time);
        }
        // Then each partition's own queue, while the merge's buffer of it is short: the merge
        // gets every partition's next records however the broker batched them.
        if drained {
            let share = (POLL_BATCH / parts.len().max(1)).max(1);
            let owned: Vec<u32> = parts.keys().copied().collect();
            for p in owned {
                let room = |parts: &std::collections::BTreeMap<u32, RawPartition>| {
                    parts
                        .get(&p)
                        .is_some_and(|x| x.buf.len() < MAX_RAW_BUFFERED)
                };
                if !room(&parts) {
                    continue;
                }
                got += q.read_partition(p, share, |msg| {
                    take(msg, &mut parts, &admission, &mut wake, idle, last_time);
                    room(&parts)
                });
            }
        }
        // Block briefly unless records are ready to go out (avoids spinning while a silent
        // partition is waited for); any queue receiving something ends the wait.
        if got == 0 && !(parts.values().any(|p| !p.buf.is_empty()) && progressed) {
            q.wait(Duration::from_millis(50));
        }
        for (p, x) in parts.iter_mut() {
            x.fetch.refresh(q.consumer(), &k.input_topic, *p);
        }
        // Emit while the earliest buffered record cannot be overtaken: every partition has a
        // buffered record or is caught up (and no partition woke up just now, `Wake`).
        progressed = false;
        wake.tick(Instant::now());
        let settled = wake.settled();
        while parts
            .values()
            .all(|p| !p.buf.is_empty() || (settled && p.caught_up(idle)))
        {
            progressed = true;
            let heads = parts
                .iter()
                .filter_map(|(p, x)| x.buf.front().map(|h| (*p, h.time, h.input_ms.unwrap_or(0))));
            let Some(p) = earliest(heads) else {
                break;
            };
            let Some(rec) = parts.get_mut(&p).and_then(|x| x.buf.pop_front()) else {
                break;
            };
            last_time = last_time.max(rec.time);
            stats.records += 1;
            metrics::global().post_in();
            acks.register(p, rec.offset, 1);
            match &rec.post {
                Err(rj) => {
                    metrics::global().rejected(rj.reason);
                    r.rec.clear();
                    rejected_record(&mut r.rec, rj, None, rec.offset + 1, &rec.line);
                    stats.rejected += 1;
                    let tag = Tag::Record {
                        partition: p,
                        offset: rec.offset,
                    };
                    let out = Out {
                        topic: &k.rejected_topic,
                        partition: None,
                        key: &[],
                        payload: &r.rec,
                        tag,
                    };
                    send(&producer, &deliveries, &mut acks, out)?;
                    if let Some(ms) = rec.input_ms {
                        metrics::global().observe_end_to_end(ms, crate::clock::now_millis());
                    }
                }
                Ok(post) => {
                    let t = metrics::global().timer();
                    let partition = r.encode(post, rec.input_ms, &rec.line);
                    metrics::global().observe_since(Stage::Analyze, t);
                    stats.routed += 1;
                    let o = &mut outgoing[partition as usize];
                    o.env.push(&r.rec);
                    o.inputs.push((p, rec.offset));
                    if o.full() {
                        o.send(k, partition, &producer, &deliveries, &mut acks)?;
                    }
                }
            }
            if stats.records.is_multiple_of(ROUTED_LOG_EVERY) {
                tracing::info!(
                    records = stats.records,
                    routed = stats.routed,
                    rejected = stats.rejected,
                    "routed so far"
                );
            }
        }
        // Nothing more can go out before the next poll: send the partial envelopes.
        for (partition, o) in outgoing.iter_mut().enumerate() {
            o.send(k, partition as i32, &producer, &deliveries, &mut acks)?;
        }
        let caught_up = assigned
            && acks.in_flight() == 0
            && parts
                .values()
                .all(|p| p.buf.is_empty() && (p.at_eof || p.fetch.caught_up()));
        if caught_up && committed != stored && last_commit.elapsed() >= COMMIT_CAUGHT_UP_EVERY {
            // Everything read is routed: commit now rather than at the next auto-commit, so
            // that dedup workers elsewhere learn it sooner (`upstream::RouteWatch`).
            commit_with(q.consumer(), CommitMode::Async)?;
            committed.clone_from(&stored);
            last_commit = Instant::now();
        }
        if let Some(s) = status {
            if assigned && progressed {
                s.routing.store(true, Ordering::Relaxed);
            }
            // Release: the envelope ends noted before these reports were settled are visible
            // to a reader that sees `caught_up`.
            s.caught_up.store(caught_up, Ordering::Release);
        }
    }
    health(Err("stopping".into()));
    shutdown(
        k,
        q.consumer(),
        &producer,
        &deliveries,
        &mut acks,
        &mut stored,
    )?;
    Ok(stats)
}

/// Whether `owned` partitions are all of the input topic's (asked of the broker; `false` when
/// it cannot tell).
fn owns_all(consumer: &BaseConsumer<RebalanceLog>, k: &KafkaConfig, owned: usize) -> bool {
    match fetch::partition_count(consumer, &k.input_topic, Duration::from_secs(5)) {
        Ok(n) => n > 0 && owned >= n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot tell whether this route stage owns every input partition");
            false
        }
    }
}

/// Buffers a polled raw record (or notes its partition's end) for the merge.
fn take(
    msg: rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>,
    parts: &mut std::collections::BTreeMap<u32, RawPartition>,
    admission: &Admission,
    wake: &mut Wake,
    idle: Duration,
    last_time: i64,
) {
    let msg = match msg {
        Ok(m) => m,
        Err(RdError::PartitionEOF(p)) => {
            if let Some(x) = parts.get_mut(&(p as u32)) {
                x.at_eof = true;
            }
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "consumer error");
            return;
        }
    };
    if let Some(ms) = msg.timestamp().to_millis() {
        metrics::global().observe_received(false, ms, crate::clock::now_millis());
    }
    let line = msg.payload().unwrap_or_default().to_vec();
    let t = metrics::global().timer();
    let post = admission.admit(&line).map_err(|r| r.rejection);
    metrics::global().observe_since(Stage::Decode, t);
    // Records without a usable time go out in arrival order.
    let time = merge_time(post.as_ref().ok().and_then(|p| p.created_at), last_time);
    // A record of a partition revoked in the same poll belongs to its next owner.
    let Some(part) = parts.get_mut(&(msg.partition() as u32)) else {
        return;
    };
    let now = Instant::now();
    wake.record(part.caught_up(idle), now);
    part.at_eof = false;
    part.last_record = now;
    part.fetch.polled(msg.offset() as u64);
    part.buf.push_back(Pending {
        offset: msg.offset() as u64,
        input_ms: msg.timestamp().to_millis(),
        time,
        post,
        line,
    });
}

/// Raw records buffered per partition, at most, before its queue is left unread: memory stays
/// bounded while the merge waits for another partition.
const MAX_RAW_BUFFERED: usize = 8_192;

/// A `routed so far` log line every this many records (not `progress`: the benches read the
/// dedup stage's `progress` lines from the same log in `run --role all`).
const ROUTED_LOG_EVERY: u64 = 100_000;

/// Raw records taken per poll round before the merge runs and envelopes go out.
const POLL_BATCH: usize = 4096;

/// Bytes of a routed envelope, at most (before the post that crosses it is sent).
pub const ENVELOPE_MAX_BYTES: usize = 64 * 1024;

/// The envelope being filled for one routed partition, and the inputs it carries.
#[derive(Default)]
struct Outgoing {
    env: Envelope,
    inputs: Vec<(u32, u64)>,
}

impl Outgoing {
    fn full(&self) -> bool {
        self.env.len() >= ENVELOPE_MAX_POSTS || self.env.bytes() >= ENVELOPE_MAX_BYTES
    }

    /// Sends the envelope, if it holds anything; its delivery credits every input in it.
    fn send(
        &mut self,
        k: &KafkaConfig,
        partition: i32,
        producer: &PolledProducer<AckContext>,
        deliveries: &Receiver<Delivery>,
        acks: &mut Acks,
    ) -> Result<(), KafkaError> {
        if self.env.is_empty() {
            return Ok(());
        }
        let payload = self.env.take();
        let out = Out {
            topic: &k.routed_topic,
            partition: Some(partition),
            key: &[],
            payload: &payload,
            tag: Tag::Records(std::mem::take(&mut self.inputs)),
        };
        send(producer, deliveries, acks, out)
    }
}

/// Analysis and routing of one post, encoded into `rec`.
struct Encoder<'t> {
    router: PostRouter<'t>,
    a: Analyzed,
    rec: Vec<u8>,
}

impl Encoder<'_> {
    /// Analyzes and encodes `post`; returns its routed partition.
    fn encode(&mut self, post: &crate::input::Decoded, input_ms: Option<i64>, line: &[u8]) -> i32 {
        let partition = self.router.analyze(&post.text, &mut self.a);
        encode_routed_into(
            &mut self.rec,
            &post.id,
            post.created_at,
            input_ms,
            &self.a,
            line,
        );
        partition as i32
    }
}

/// Stop receiving, wait for outstanding deliveries (bounded), store and commit offsets.
fn shutdown(
    k: &KafkaConfig,
    consumer: &BaseConsumer<RebalanceLog>,
    producer: &PolledProducer<AckContext>,
    deliveries: &Receiver<Delivery>,
    acks: &mut Acks,
    stored: &mut std::collections::BTreeMap<u32, u64>,
) -> Result<(), KafkaError> {
    let deadline = Instant::now() + Duration::from_millis(k.shutdown_timeout_ms);
    producer.flush(Duration::from_millis(k.shutdown_timeout_ms))?;
    while acks.in_flight() > 0 && Instant::now() < deadline {
        settle(deliveries, acks, &mut |_, _| {})?;
        std::thread::sleep(Duration::from_millis(5));
    }
    store_offsets(consumer, &k.input_topic, acks, stored)?;
    commit(consumer)
}
