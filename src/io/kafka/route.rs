//! Stage `route`: raw posts in, routed posts out. Stateless: decode, normalize, segment,
//! fingerprint, pick the partition by the dominant block. Posts bound for one routed partition
//! travel in envelopes (one record for many posts: the broker's cost is per record), sent when
//! full or when nothing more can go out before the next poll. Bad input goes straight to the
//! rejected topic. An input offset is stored only after its output is acknowledged, and after all
//! earlier offsets of its partition.

use std::collections::BTreeMap;
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
    let ends = status.map_or_else(Default::default, |s| s.delivered.clone());
    let (producer, deliveries) = client::envelope_producer(k, ends)?;
    let c = Clients {
        q: Split::new(consumer, &k.input_topic),
        producer,
        deliveries,
    };
    let mut r = RouteWorker::new(k, cfg, tokenizer, status);
    r.health(Err("waiting for partition assignment".into()));
    while !stop.load(Ordering::Relaxed) {
        r.round(&c)?;
    }
    r.health(Err("stopping".into()));
    shutdown(
        k,
        c.q.consumer(),
        &c.producer,
        &c.deliveries,
        &mut r.acks,
        &mut r.stored,
    )?;
    Ok(r.stats)
}

/// A route worker's Kafka clients.
struct Clients {
    /// The group consumer of the raw topic, each owned partition read from a queue of its own.
    q: Split<RebalanceLog>,
    /// Envelopes and rejections.
    producer: PolledProducer<AckContext>,
    deliveries: Receiver<Delivery>,
}

/// A route worker's state besides its Kafka clients.
struct RouteWorker<'a> {
    k: &'a KafkaConfig,
    status: Option<&'a RouteStatus>,
    encoder: Encoder<'a>,
    admission: Admission,
    acks: Acks,
    /// The input offsets stored (safe to commit), per raw partition.
    stored: BTreeMap<u32, u64>,
    /// The stored offsets as last committed by `COMMIT_CAUGHT_UP_EVERY`'s early commits.
    committed: BTreeMap<u32, u64>,
    last_commit: Instant,
    stats: RouteStats,
    parts: BTreeMap<u32, RawPartition>,
    /// The event time of the last record routed (the merge's clock).
    last_time: i64,
    idle: Duration,
    wake: Wake,
    /// Whether the last round's merge let a record out.
    progressed: bool,
    assigned: bool,
    /// The envelope being filled per routed partition.
    outgoing: Vec<Outgoing>,
}

impl<'a> RouteWorker<'a> {
    fn new(
        k: &'a KafkaConfig,
        cfg: &StageConfig,
        tokenizer: &'a Tokenizer,
        status: Option<&'a RouteStatus>,
    ) -> Self {
        RouteWorker {
            k,
            status,
            encoder: Encoder {
                router: PostRouter::new(tokenizer, k.routed_partitions, &cfg.routing),
                a: Analyzed::default(),
                rec: Vec::with_capacity(1024),
            },
            admission: Admission::new(cfg),
            acks: Acks::default(),
            stored: BTreeMap::new(),
            committed: BTreeMap::new(),
            last_commit: Instant::now(),
            stats: RouteStats::default(),
            parts: BTreeMap::new(),
            last_time: i64::MIN,
            idle: Duration::from_millis(k.idle_after_ms),
            wake: Wake::new(Duration::from_millis(k.wake_grace_ms)),
            progressed: true,
            assigned: false,
            outgoing: (0..k.routed_partitions)
                .map(|_| Outgoing::default())
                .collect(),
        }
    }

    fn health(&self, state: Result<(), String>) {
        metrics::global().set_health("route", state);
    }

    /// One round: settle deliveries, read, route what the merge lets out, send the partial
    /// envelopes, commit early when caught up, and tell the dedup stage of this process.
    fn round(&mut self, c: &Clients) -> Result<(), KafkaError> {
        settle(&c.deliveries, &mut self.acks, &mut |_, _| {})?;
        store_offsets(
            c.q.consumer(),
            &self.k.input_topic,
            &self.acks,
            &mut self.stored,
        )?;
        let got = self.poll(c);
        // Block briefly unless records are ready to go out (avoids spinning while a silent
        // partition is waited for); any queue receiving something ends the wait.
        if got == 0 && !(self.parts.values().any(|p| !p.buf.is_empty()) && self.progressed) {
            c.q.wait(Duration::from_millis(50));
        }
        for (p, x) in self.parts.iter_mut() {
            x.fetch.refresh(c.q.consumer(), &self.k.input_topic, *p);
        }
        self.merge(c)?;
        // Nothing more can go out before the next poll: send the partial envelopes.
        for (partition, o) in self.outgoing.iter_mut().enumerate() {
            o.send(
                self.k,
                partition as i32,
                &c.producer,
                &c.deliveries,
                &mut self.acks,
            )?;
        }
        self.report(c)
    }

    /// Reads without waiting; returns how many records (and partition events) it took. The
    /// consumer's own queue first, until it is empty: rebalances, and any record fetched before
    /// its partition's queue was split, which comes before what that queue holds. Then each
    /// partition's own queue, while the merge's buffer of it is short: the merge gets every
    /// partition's next records however the broker batched them.
    fn poll(&mut self, c: &Clients) -> usize {
        let mut got = 0;
        for _ in 0..POLL_BATCH {
            if c.q.main_pending() == 0 {
                break;
            }
            match c.q.poll_main() {
                // A rebalance is served by a poll that returns nothing.
                None => self.rebalance(c),
                Some(msg) => {
                    got += 1;
                    self.take(msg);
                }
            }
        }
        if c.q.main_pending() > 0 {
            return got;
        }
        let share = (POLL_BATCH / self.parts.len().max(1)).max(1);
        let owned: Vec<u32> = self.parts.keys().copied().collect();
        for p in owned {
            let room = |r: &Self| {
                r.parts
                    .get(&p)
                    .is_some_and(|x| x.buf.len() < MAX_RAW_BUFFERED)
            };
            if !room(self) {
                continue;
            }
            got += c.q.read_partition(p, share, |msg| {
                self.take(msg);
                room(self)
            });
        }
        got
    }

    /// Applies the rebalance events the last poll served.
    fn rebalance(&mut self, c: &Clients) {
        for ev in c.q.consumer().context().drain() {
            match ev {
                RebalanceEvent::Assigned(ps) => {
                    self.health(Ok(()));
                    self.assigned = true;
                    let starts = fetch::committed_starts(c.q.consumer(), &self.k.input_topic, &ps);
                    for p in ps {
                        c.q.split(p);
                        self.parts
                            .entry(p)
                            .or_insert_with(|| RawPartition::new(starts.get(&p).copied()));
                    }
                    if let Some(s) = self.status {
                        let sole = owns_all(c.q.consumer(), self.k, self.parts.len());
                        s.sole.store(sole, Ordering::Relaxed);
                    }
                }
                RebalanceEvent::Revoked(ps) => {
                    if let Some(s) = self.status {
                        s.sole.store(false, Ordering::Relaxed);
                    }
                    for p in ps {
                        c.q.remove(p);
                        self.acks.remove(p);
                        self.parts.remove(&p);
                    }
                }
            }
        }
    }

    /// Buffers a polled raw record (or notes its partition's end) for the merge.
    fn take(&mut self, msg: rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>) {
        let msg = match msg {
            Ok(m) => m,
            Err(RdError::PartitionEOF(p)) => {
                if let Some(x) = self.parts.get_mut(&(p as u32)) {
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
        let post = self.admission.admit_timed(&line);
        // Records without a usable time go out in arrival order.
        let time = merge_time(
            post.as_ref().ok().and_then(|p| p.created_at),
            self.last_time,
        );
        // A record of a partition revoked in the same poll belongs to its next owner.
        let Some(part) = self.parts.get_mut(&(msg.partition() as u32)) else {
            return;
        };
        let now = Instant::now();
        self.wake.record(part.caught_up(self.idle), now);
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

    /// Routes records while the earliest buffered one cannot be overtaken: every partition has
    /// a buffered record or is caught up (and no partition woke up just now, `Wake`).
    fn merge(&mut self, c: &Clients) -> Result<(), KafkaError> {
        self.progressed = false;
        self.wake.tick(Instant::now());
        let settled = self.wake.settled();
        let idle = self.idle;
        while self
            .parts
            .values()
            .all(|p| !p.buf.is_empty() || (settled && p.caught_up(idle)))
        {
            self.progressed = true;
            let heads = self
                .parts
                .iter()
                .filter_map(|(p, x)| x.buf.front().map(|h| (*p, h.time, h.input_ms.unwrap_or(0))));
            let Some(p) = earliest(heads) else {
                break;
            };
            let Some(rec) = self.parts.get_mut(&p).and_then(|x| x.buf.pop_front()) else {
                break;
            };
            self.route(c, p, rec)?;
        }
        Ok(())
    }

    /// Routes raw record `rec` of partition `p`: into its routed partition's envelope, or to the
    /// rejected topic.
    fn route(&mut self, c: &Clients, p: u32, rec: Pending) -> Result<(), KafkaError> {
        self.last_time = self.last_time.max(rec.time);
        self.stats.records += 1;
        metrics::global().post_in();
        self.acks.register(p, rec.offset, 1);
        match &rec.post {
            Err(rj) => {
                metrics::global().rejected(rj.reason);
                let buf = &mut self.encoder.rec;
                buf.clear();
                rejected_record(buf, rj, None, rec.offset + 1, &rec.line);
                self.stats.rejected += 1;
                let out = Out {
                    topic: &self.k.rejected_topic,
                    partition: None,
                    key: &[],
                    payload: buf,
                    tag: Tag::Record {
                        partition: p,
                        offset: rec.offset,
                    },
                };
                send(&c.producer, &c.deliveries, &mut self.acks, out)?;
                if let Some(ms) = rec.input_ms {
                    metrics::global().observe_end_to_end(ms, crate::clock::now_millis());
                }
            }
            Ok(post) => {
                let t = metrics::global().timer();
                let partition = self.encoder.encode(post, rec.input_ms, &rec.line);
                metrics::global().observe_since(Stage::Analyze, t);
                self.stats.routed += 1;
                let o = &mut self.outgoing[partition as usize];
                o.env.push(&self.encoder.rec);
                o.inputs.push((p, rec.offset));
                if o.full() {
                    o.send(
                        self.k,
                        partition,
                        &c.producer,
                        &c.deliveries,
                        &mut self.acks,
                    )?;
                }
            }
        }
        if self.stats.records.is_multiple_of(ROUTED_LOG_EVERY) {
            let s = &self.stats;
            tracing::info!(
                records = s.records,
                routed = s.routed,
                rejected = s.rejected,
                "routed so far"
            );
        }
        Ok(())
    }

    /// After a round: commits at once when everything read is routed, and tells the dedup
    /// stage of this process whether the stage routes and is caught up.
    fn report(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let caught_up = self.assigned
            && self.acks.in_flight() == 0
            && self
                .parts
                .values()
                .all(|p| p.buf.is_empty() && (p.at_eof || p.fetch.caught_up()));
        if caught_up
            && self.committed != self.stored
            && self.last_commit.elapsed() >= COMMIT_CAUGHT_UP_EVERY
        {
            // Everything read is routed: commit now rather than at the next auto-commit, so
            // that dedup workers elsewhere learn it sooner (`upstream::RouteWatch`).
            commit_with(c.q.consumer(), CommitMode::Async)?;
            self.committed.clone_from(&self.stored);
            self.last_commit = Instant::now();
        }
        if let Some(s) = self.status {
            if self.assigned && self.progressed {
                s.routing.store(true, Ordering::Relaxed);
            }
            // Release: the envelope ends noted before these reports were settled are visible
            // to a reader that sees `caught_up`.
            s.caught_up.store(caught_up, Ordering::Release);
        }
        Ok(())
    }
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
    stored: &mut BTreeMap<u32, u64>,
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
