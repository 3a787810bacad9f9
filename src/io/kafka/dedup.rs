//! Stage `dedup`: decides the routed posts of the partitions this worker owns, against a
//! replicated index.
//!
//! Every worker applies every index entry, whichever partition decided it, from the changelog
//! topic. Decisions stay partitioned. A post is compared only with entries whose order key
//! `(partition watermark, partition, offset and place in the envelope)` is smaller than its own
//! (across partitions: from an earlier event-time tick, when `kafka.order_tick_secs` is set; see
//! `OrderKey::sees`). Before deciding a post, the worker waits until every other partition is
//! known to have decided everything the post can see. It learns this from progress markers on
//! the changelog, or from local state for the partitions it owns. A verdict therefore depends
//! only on the routed topic's contents, not on which worker owned which partition, when it ran,
//! or how often it restarted. One exception: a partition that fell idle (caught up for
//! `idle_after_ms`) stops holding others back, so records arriving on it later may be decided in
//! another order than in a replay.
//!
//! Delivery: an input offset (a routed envelope) is stored only after the outputs of all its
//! posts are acknowledged and a progress marker covering it is acknowledged on the changelog
//! (index entries go before the marker, in batches, on the same ordered partition). Replays
//! re-emit identical verdicts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::producer::{Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::acks::Acks;
use super::client::{self, AckContext, Delivery, RebalanceEvent, RebalanceLog, Tag};
use super::outbox::{self, send, settle, Out};
use super::wire::{
    decode_changelog, decode_routed_record, encode_changelog, routed_seq, ChangelogRecord, Marker,
    RoutedPost,
};
use super::{KafkaConfig, KafkaError};
use crate::io::config::StageConfig;
use crate::metrics::{self, Stage};
use crate::engine::{Engine, Position};
use crate::index::OrderKey;
use crate::io::records::{self, Decided, Sink};
use crate::types::{RejectReason, Rejection};

/// Counters of a dedup worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DedupStats {
    /// Routed records decided.
    pub records: u64,
    /// Unique posts emitted.
    pub unique: u64,
    /// Duplicate events emitted.
    pub duplicates: u64,
    /// Rejected records emitted.
    pub rejected: u64,
    /// Changelog entries applied from the topic (including this worker's own, echoed).
    pub applied: u64,
}

/// What is known about where a partition's next undecided record lies in the global order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    /// Every record still to come has a larger key.
    Key(OrderKey),
    /// The partition is idle: it holds nobody back.
    Idle,
    /// Nothing known yet.
    Unknown,
}

impl Bound {
    /// Whether a post with key `k` (of another partition) can be decided: no record still to
    /// come on this partition is one `k` would see (`OrderKey::sees`).
    fn allows(self, k: &OrderKey, tick_secs: u64) -> bool {
        match self {
            Bound::Key(b) if tick_secs > 0 => b.tick(tick_secs) >= k.tick(tick_secs),
            Bound::Key(b) => b > *k,
            Bound::Idle => true,
            Bound::Unknown => false,
        }
    }
}

/// A routed post waiting for its turn: post `index` of the `count` in the record at `offset`.
struct Slot {
    offset: u64,
    index: u32,
    count: u32,
    post: Result<RoutedPost, String>,
}

/// A partition this worker owns.
struct Owned {
    buf: VecDeque<Slot>,
    started: bool,
    next_offset: u64,
    /// When the last record arrived (or the partition was assigned): a partition with nothing
    /// buffered, nothing new for `idle_after_ms` and nothing left to fetch (`fetch`) is idle.
    /// End-of-partition events are not relied on: some brokers send none when the committed
    /// offset already is the end.
    last_record: Instant,
    fetch: client::FetchProgress,
    last: Option<(u64, i64)>,
    sent: Option<(Bound, Option<(u64, i64)>)>,
    sent_at: Instant,
    acked_markers: VecDeque<u64>,
    stored: Option<u64>,
}

impl Owned {
    fn new(start: Option<Option<i64>>) -> Owned {
        Owned {
            buf: VecDeque::new(),
            started: false,
            next_offset: 0,
            last_record: Instant::now(),
            fetch: client::FetchProgress::new(start),
            last: None,
            sent: None,
            sent_at: Instant::now(),
            acked_markers: VecDeque::new(),
            stored: None,
        }
    }
}

/// The worker's state besides the Kafka clients.
struct Worker<'a> {
    k: &'a KafkaConfig,
    cfg: &'a StageConfig,
    partitions: u32,
    engine: Engine,
    owned: BTreeMap<u32, Owned>,
    progress: BTreeMap<u32, (Bound, Option<(u64, i64)>)>,
    history: BTreeMap<u32, BTreeMap<u64, i64>>,
    acks: Acks,
    stats: DedupStats,
    rec: Vec<u8>,
    /// Set on assignment: this worker writes a sync record with this nonce to the changelog, and
    /// a partition taken over starts only once the reader has read it back, so every marker the
    /// previous owner wrote before is known (high watermarks are not reliable on every broker).
    sync_nonce: Option<u64>,
    /// Index entries decided but not yet sent to the changelog.
    unsent: Vec<(i64, crate::index::Entry)>,
    /// The route stage of this process, if any: set once it routes (see `run`).
    routing: Option<&'a AtomicBool>,
    /// When `routing` was first seen set.
    routing_since: Option<Instant>,
    started_at: Instant,
}

/// Index entries per changelog record, at most.
const CHANGELOG_BATCH: usize = 512;

/// Partition number of sync records on the changelog (no routed partition has it).
const SYNC_PARTITION: u32 = u32::MAX;

struct Clients {
    consumer: BaseConsumer<RebalanceLog>,
    reader: BaseConsumer<client::QuietContext>,
    producer: ThreadedProducer<AckContext>,
    deliveries: Receiver<Delivery>,
}

/// Runs a dedup worker until `stop` is set. With `routing` (the flag of a route stage in the
/// same process, see `route::run`), no partition counts as idle before that flag is set and
/// `idle_after_ms` has passed since: on a backlog the route stage's first records can take
/// longer than `idle_after_ms`, and partitions declared idle meanwhile would let the first
/// posts that arrive be decided out of order. After ten times `idle_after_ms` without the
/// flag, the wait is given up.
pub fn run(
    k: &KafkaConfig,
    cfg: &StageConfig,
    stop: &AtomicBool,
    routing: Option<&AtomicBool>,
) -> Result<DedupStats, KafkaError> {
    let consumer: BaseConsumer<RebalanceLog> =
        client::consumer_config(k, &format!("{}.dedup", k.group_id))
            .create_with_context(RebalanceLog::new(&k.routed_topic))?;
    let reader: BaseConsumer<client::QuietContext> =
        client::reader_config(k).create_with_context(client::QuietContext)?;
    let (producer, deliveries) = client::producer(k)?;
    let c = Clients {
        consumer,
        reader,
        producer,
        deliveries,
    };
    let engine = Engine::new(&cfg.engine).map_err(|e| KafkaError::Config(e.to_string()))?;
    let mut w = Worker {
        k,
        cfg,
        partitions: k.routed_partitions,
        engine,
        owned: BTreeMap::new(),
        progress: BTreeMap::new(),
        history: BTreeMap::new(),
        acks: Acks::default(),
        stats: DedupStats::default(),
        rec: Vec::with_capacity(1024),
        sync_nonce: None,
        unsent: Vec::new(),
        routing,
        routing_since: None,
        started_at: Instant::now(),
    };
    // The replicated index first: nothing is decided before the changelog is caught up.
    let health = |state| metrics::global().set_health("dedup", state);
    health(Err("catching up the replicated index".into()));
    w.read_changelog_from_start(&c.reader, stop, "replicated index caught up")?;
    metrics::global().publish_engine(&w.engine);
    health(Err("waiting for partition assignment".into()));
    c.consumer.subscribe(&[&k.routed_topic])?;
    let mut last_decision = Instant::now();
    let mut last_report = Instant::now();
    let mut last_publish = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if w.routing_since.is_none() && w.routing.is_some_and(|r| r.load(Ordering::Relaxed)) {
            w.routing_since = Some(Instant::now());
        }
        w.settle(&c)?;
        w.rebalance(&c)?;
        w.read_changelog(&c.reader, Duration::ZERO, false);
        let busy = w.poll_routed(&c)?;
        w.start_partitions(&c, stop)?;
        let decided = w.decide_ready(&c)?;
        if decided > 0 {
            last_decision = Instant::now();
        } else if last_decision.elapsed() > Duration::from_secs(5)
            && last_report.elapsed() > Duration::from_secs(5)
        {
            last_report = Instant::now();
            w.report_waiting();
        }
        w.publish_markers(&c, decided == 0)?;
        w.store_offsets(&c)?;
        if last_publish.elapsed() > Duration::from_millis(200) {
            metrics::global().publish_engine(&w.engine);
            last_publish = Instant::now();
        }
        if !busy && decided == 0 {
            // Nothing to do until the changelog moves: wait on it briefly instead of spinning.
            w.read_changelog(&c.reader, Duration::from_millis(5), false);
        }
    }
    health(Err("stopping".into()));
    w.shutdown(&c)?;
    metrics::global().publish_engine(&w.engine);
    Ok(w.stats)
}

impl<'a> Worker<'a> {
    /// Applies changelog records; returns true when the reader reached the end of the log.
    fn read_changelog(
        &mut self,
        reader: &BaseConsumer<client::QuietContext>,
        first_wait: Duration,
        until_eof: bool,
    ) -> bool {
        let mut wait = first_wait;
        for _ in 0..10_000 {
            let Some(m) = reader.poll(wait) else {
                return false;
            };
            wait = Duration::ZERO;
            let m = match m {
                Ok(m) => m,
                Err(RdError::PartitionEOF(_)) => return true,
                Err(e) => {
                    tracing::warn!(error = %e, "changelog read error");
                    return false;
                }
            };
            match decode_changelog(m.payload().unwrap_or_default()) {
                Ok(ChangelogRecord::Entries(entries)) => {
                    for (gen, entry) in entries {
                        self.stats.applied += 1;
                        self.engine.apply(gen, entry);
                    }
                }
                Ok(ChangelogRecord::Marker(mk)) => self.note_marker(mk),
                Err(e) => {
                    tracing::warn!(error = %e, offset = m.offset(), "skipping malformed changelog record")
                }
            }
        }
        !until_eof
    }

    fn note_marker(&mut self, m: Marker) {
        if m.partition == SYNC_PARTITION {
            if self.sync_nonce == Some(m.lower_bound.seq) {
                self.sync_nonce = None;
            }
            return;
        }
        let bound = if m.idle {
            Bound::Idle
        } else {
            Bound::Key(m.lower_bound)
        };
        self.progress.insert(m.partition, (bound, m.last));
        if let Some((offset, tau)) = m.last {
            let h = self.history.entry(m.partition).or_default();
            h.insert(offset, tau);
            while h.len() > 4096 {
                h.pop_first();
            }
        }
    }

    fn rebalance(&mut self, c: &Clients) -> Result<(), KafkaError> {
        for ev in c.consumer.context().drain() {
            match ev {
                RebalanceEvent::Assigned(ps) => {
                    metrics::global().set_health("dedup", Ok(()));
                    if !ps.is_empty() {
                        self.send_sync(c)?;
                    }
                    let starts = client::committed_starts(&c.consumer, &self.k.routed_topic, &ps);
                    for p in ps {
                        self.owned.insert(p, Owned::new(starts.get(&p).copied()));
                    }
                }
                RebalanceEvent::Revoked(ps) => {
                    for p in ps {
                        self.owned.remove(&p);
                        self.acks.remove(p);
                        self.engine.set_watermark(p, None);
                    }
                }
            }
        }
        Ok(())
    }

    /// Buffers routed records; returns whether anything arrived. Rebalance events are applied
    /// right after each poll, before its record: a record never lands in state that an
    /// assignment is about to reset, and records of revoked partitions are dropped (their next
    /// owner decides them).
    fn poll_routed(&mut self, c: &Clients) -> Result<bool, KafkaError> {
        let mut any = false;
        let idle = self.owned.values().all(|o| o.buf.is_empty());
        let mut wait = if idle {
            Duration::from_millis(5)
        } else {
            Duration::ZERO
        };
        for _ in 0..2_000 {
            let polled = c.consumer.poll(wait);
            self.rebalance(c)?;
            let Some(m) = polled else { break };
            wait = Duration::ZERO;
            let m = match m {
                Ok(m) => m,
                Err(RdError::PartitionEOF(_)) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "routed consumer error");
                    continue;
                }
            };
            let (p, offset) = (m.partition() as u32, m.offset() as u64);
            let Some(owned) = self.owned.get_mut(&p) else {
                continue;
            };
            any = true;
            owned.last_record = Instant::now();
            owned.fetch.polled(offset);
            match decode_routed_record(m.payload().unwrap_or_default()) {
                Ok(posts) => {
                    let count = posts.len() as u32;
                    for (index, post) in posts.into_iter().enumerate() {
                        owned.buf.push_back(Slot {
                            offset,
                            index: index as u32,
                            count,
                            post: Ok(post),
                        });
                    }
                }
                Err(e) => owned.buf.push_back(Slot {
                    offset,
                    index: 0,
                    count: 1,
                    post: Err(e.to_string()),
                }),
            }
            if owned.buf.len() > 50_000 {
                break;
            }
        }
        for (p, o) in self.owned.iter_mut() {
            o.fetch.refresh(&c.consumer, &self.k.routed_topic, *p);
        }
        Ok(any)
    }

    /// Starts partitions whose first record is buffered, once the changelog has been read to its
    /// end since they were assigned: each resumes with the watermark its previous owner had just
    /// before the resume offset (commits happen only right after a progress marker). A partition
    /// that resumes behind what this worker's index has already expired gets the index rebuilt.
    fn start_partitions(&mut self, c: &Clients, stop: &AtomicBool) -> Result<(), KafkaError> {
        if self.sync_nonce.is_some() {
            return Ok(());
        }
        let waiting: Vec<(u32, u64)> = self
            .owned
            .iter()
            .filter(|(_, o)| !o.started)
            .filter_map(|(p, o)| o.buf.front().map(|s| (*p, s.offset)))
            .collect();
        for (p, offset) in waiting {
            let tau = self
                .history
                .get(&p)
                .and_then(|h| h.range(..offset).next_back())
                .map(|(o, t)| {
                    if *o + 1 != offset {
                        tracing::warn!(
                            partition = p,
                            offset,
                            marker = *o,
                            "no progress marker right before the resume offset"
                        );
                    }
                    *t
                });
            self.engine
                .set_watermark(p, if offset == 0 { None } else { tau });
            if let Some(o) = self.owned.get_mut(&p) {
                o.started = true;
                o.next_offset = offset;
            }
        }
        let behind: Vec<u32> = self
            .owned
            .keys()
            .copied()
            .filter(|p| {
                self.head_key(*p)
                    .is_some_and(|k| self.engine.lacks_generations_for(k.tau))
            })
            .collect();
        if !behind.is_empty() {
            tracing::info!(
                partitions = ?behind,
                "partitions resume behind entries this worker expired: rebuilding the index"
            );
            self.rebuild_index(c, stop)?;
        }
        Ok(())
    }

    /// Empties the index and applies the changelog again from its start (the partitions' new
    /// watermarks decide what is live). Everything this worker decided is delivered first, so
    /// the log holds it.
    fn rebuild_index(&mut self, c: &Clients, stop: &AtomicBool) -> Result<(), KafkaError> {
        self.flush_changelog(c)?;
        c.producer
            .flush(Duration::from_millis(self.k.shutdown_timeout_ms))?;
        self.settle(c)?;
        self.engine.clear_index();
        self.read_changelog_from_start(&c.reader, stop, "replicated index rebuilt")
    }

    /// Points the reader at the changelog's start and applies it to its end (or until `stop`),
    /// then logs `done` with the entry count and the time it took.
    fn read_changelog_from_start(
        &mut self,
        reader: &BaseConsumer<client::QuietContext>,
        stop: &AtomicBool,
        done: &str,
    ) -> Result<(), KafkaError> {
        let t = Instant::now();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.k.changelog_topic, 0, Offset::Beginning)?;
        reader.assign(&tpl)?;
        while !stop.load(Ordering::Relaxed)
            && !self.read_changelog(reader, Duration::from_millis(200), true)
        {}
        tracing::info!(
            entries = self.engine.index().len(),
            secs = t.elapsed().as_secs_f64(),
            "{done}"
        );
        Ok(())
    }

    /// Logs why nothing was decided for a while: the head this worker waits with and every
    /// partition's bound.
    fn report_waiting(&self) {
        let head = self.owned.keys().filter_map(|p| self.head_key(*p)).min();
        let bounds: Vec<String> = (0..self.partitions)
            .map(|q| format!("{q}:{:?}", self.bound(q)))
            .collect();
        let buffered: usize = self.owned.values().map(|o| o.buf.len()).sum();
        tracing::info!(?head, buffered, sync_pending = self.sync_nonce.is_some(), bounds = %bounds.join(" "), "waiting");
    }

    /// Writes a sync record to the changelog; see `sync_nonce`.
    fn send_sync(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        self.sync_nonce = Some(nonce);
        let m = Marker {
            partition: SYNC_PARTITION,
            lower_bound: OrderKey {
                tau: 0,
                partition: SYNC_PARTITION,
                seq: nonce,
            },
            idle: true,
            last: None,
        };
        let value = encode_changelog(&ChangelogRecord::Marker(m));
        let tag = Tag::Marker {
            partition: SYNC_PARTITION,
            last_offset: None,
        };
        send(
            &c.producer,
            &c.deliveries,
            &mut self.acks,
            Out {
                topic: &self.k.changelog_topic,
                partition: Some(0),
                key: &[],
                payload: &value,
                tag,
            },
        )
    }

    /// The order key the head record of `p` will get (mirrors `Engine::decide`).
    fn head_key(&self, p: u32) -> Option<OrderKey> {
        let o = self.owned.get(&p).filter(|o| o.started)?;
        let s = o.buf.front()?;
        let time = s.post.as_ref().ok().and_then(|r| r.created_at);
        Some(self.engine.order_key(
            Position {
                partition: p,
                seq: routed_seq(s.offset, s.index),
            },
            time,
        ))
    }

    /// Whether this process's route stage, if it has one, has been routing for `idle_after`
    /// (or the wait for it was given up): only then is an empty partition really quiet.
    fn upstream_quiet(&self, idle_after: Duration) -> bool {
        self.routing.is_none()
            || self
                .routing_since
                .is_some_and(|t| t.elapsed() >= idle_after)
            || self.started_at.elapsed() >= idle_after * 10
    }

    fn bound(&self, q: u32) -> Bound {
        let Some(o) = self.owned.get(&q) else {
            return self.progress.get(&q).map_or(Bound::Unknown, |(b, _)| *b);
        };
        if let Some(k) = self.head_key(q) {
            return Bound::Key(k);
        }
        let idle_after = Duration::from_millis(self.k.idle_after_ms);
        if o.last_record.elapsed() >= idle_after
            && o.fetch.may_be_caught_up()
            && self.upstream_quiet(idle_after)
        {
            return Bound::Idle;
        }
        if !o.started {
            return Bound::Unknown;
        }
        // Watermarks never fall, so the next record's key is at least this.
        let tau = self
            .engine
            .watermarks()
            .get(&q)
            .copied()
            .unwrap_or(i64::MIN);
        Bound::Key(OrderKey {
            tau,
            partition: q,
            seq: routed_seq(o.next_offset, 0),
        })
    }

    /// Decides every record that is next in the global order; returns how many. Their index
    /// entries are on their way to the changelog when it returns.
    fn decide_ready(&mut self, c: &Clients) -> Result<usize, KafkaError> {
        let n = self.decide_next(c)?;
        self.flush_changelog(c)?;
        Ok(n)
    }

    fn decide_next(&mut self, c: &Clients) -> Result<usize, KafkaError> {
        let mut n = 0;
        loop {
            let Some((p, key)) = self
                .owned
                .keys()
                .filter_map(|p| self.head_key(*p).map(|k| (*p, k)))
                .min_by_key(|(_, k)| *k)
            else {
                return Ok(n);
            };
            if !(0..self.partitions)
                .filter(|q| *q != p)
                .all(|q| self.bound(q).allows(&key, self.k.order_tick_secs))
            {
                return Ok(n);
            }
            self.decide_one(c, p)?;
            n += 1;
            if n.is_multiple_of(1024) {
                self.settle(c)?;
            }
        }
    }

    fn decide_one(&mut self, c: &Clients, p: u32) -> Result<(), KafkaError> {
        let Some(slot) = self.owned.get_mut(&p).and_then(|o| o.buf.pop_front()) else {
            return Ok(());
        };
        let offset = slot.offset;
        self.stats.records += 1;
        if self.stats.records.is_multiple_of(10_000) {
            let s = &self.stats;
            let index = self.engine.index().len();
            tracing::info!(
                records = s.records,
                unique = s.unique,
                duplicates = s.duplicates,
                index,
                "progress"
            );
        }
        self.rec.clear();
        let (topic, key) = match slot.post {
            Err(detail) => {
                let r = Rejection::new(
                    RejectReason::InvalidJson,
                    format!("malformed routed record: {detail}"),
                );
                records::rejected_record(&mut self.rec, &r, None, offset + 1, b"");
                metrics::global().rejected(r.reason);
                self.stats.rejected += 1;
                (self.k.rejected_topic.as_str(), Vec::new())
            }
            Ok(post) => self.verdict(p, (offset, slot.index), &post),
        };
        self.unsent.extend(self.engine.take_changes());
        if slot.index == 0 {
            // One output per post of the record.
            self.acks.register(p, offset, slot.count);
        }
        let tag = Tag::Record {
            partition: p,
            offset,
        };
        send(
            &c.producer,
            &c.deliveries,
            &mut self.acks,
            Out {
                topic,
                partition: None,
                key: &key,
                payload: &self.rec,
                tag,
            },
        )?;
        if self.unsent.len() >= CHANGELOG_BATCH {
            self.flush_changelog(c)?;
        }
        if slot.index + 1 < slot.count {
            return Ok(());
        }
        let tau = self.engine.watermarks().get(&p).copied().unwrap_or(0);
        if let Some(o) = self.owned.get_mut(&p) {
            o.last = Some((offset, tau));
            o.next_offset = offset + 1;
        }
        Ok(())
    }

    /// Decides post `index` of the record at `offset` and formats its output; returns (topic,
    /// record key).
    fn verdict(
        &mut self,
        p: u32,
        (offset, index): (u64, u32),
        post: &RoutedPost,
    ) -> (&'a str, Vec<u8>) {
        let at = Position {
            partition: p,
            seq: routed_seq(offset, index),
        };
        let t = metrics::global().timer();
        let v = self
            .engine
            .decide(at, &post.id, post.created_at, &post.analyzed);
        metrics::global().observe_since(Stage::Decide, t);
        metrics::global().verdict(&v);
        let decided = Decided {
            id: &post.id,
            created_at: post.created_at,
            raw: &post.raw,
            analyzed: &post.analyzed,
            line: offset + 1,
        };
        let sink = records::verdict_record(&mut self.rec, &v, &decided, &self.cfg.output);
        match sink {
            Sink::Unique => self.stats.unique += 1,
            Sink::Duplicate => self.stats.duplicates += 1,
            Sink::Rejected => self.stats.rejected += 1,
        }
        (self.k.topic_for(sink), post.id.0.as_bytes().to_vec())
    }

    /// Sends the unsent index entries as one changelog record.
    fn flush_changelog(&mut self, c: &Clients) -> Result<(), KafkaError> {
        if self.unsent.is_empty() {
            return Ok(());
        }
        let value = encode_changelog(&ChangelogRecord::Entries(std::mem::take(&mut self.unsent)));
        let out = Out {
            topic: &self.k.changelog_topic,
            partition: Some(0),
            key: &[],
            payload: &value,
            tag: Tag::Changelog,
        };
        send(&c.producer, &c.deliveries, &mut self.acks, out)
    }

    /// Publishes a progress marker for each owned partition whose bound changed, at most every
    /// `marker_interval_ms` (immediately when this worker is waiting). Entries go first: a marker
    /// vouches for every entry before it on the changelog.
    fn publish_markers(&mut self, c: &Clients, waiting: bool) -> Result<(), KafkaError> {
        self.flush_changelog(c)?;
        let interval = Duration::from_millis(self.k.marker_interval_ms);
        let parts: Vec<u32> = self.owned.keys().copied().collect();
        for p in parts {
            let bound = self.bound(p);
            let Some(o) = self.owned.get(&p) else {
                continue;
            };
            let state = (bound, o.last);
            if o.sent == Some(state)
                || (!waiting && o.sent_at.elapsed() < interval)
                || bound == Bound::Unknown
            {
                continue;
            }
            let (lower_bound, idle) = match bound {
                Bound::Key(k) => (k, false),
                _ => (OrderKey::default(), true),
            };
            let m = Marker {
                partition: p,
                lower_bound,
                idle,
                last: o.last,
            };
            let value = encode_changelog(&ChangelogRecord::Marker(m));
            let tag = Tag::Marker {
                partition: p,
                last_offset: o.last.map(|(off, _)| off),
            };
            let out = Out {
                topic: &self.k.changelog_topic,
                partition: Some(0),
                key: &[],
                payload: &value,
                tag,
            };
            send(&c.producer, &c.deliveries, &mut self.acks, out)?;
            if let Some(o) = self.owned.get_mut(&p) {
                o.sent = Some(state);
                o.sent_at = Instant::now();
            }
        }
        Ok(())
    }

    fn settle(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let owned = &mut self.owned;
        settle(&c.deliveries, &mut self.acks, &mut |p, last| {
            if let (Some(o), Some(last)) = (owned.get_mut(&p), last) {
                o.acked_markers.push_back(last);
            }
        })
    }

    /// Stores, per partition, the offset after the newest acknowledged marker whose records are
    /// all acknowledged: a worker taking over there finds that marker's watermark. (librdkafka's
    /// offset store commits the given offset + 1, so the marker's own offset is passed.)
    fn store_offsets(&mut self, c: &Clients) -> Result<(), KafkaError> {
        for (p, o) in self.owned.iter_mut() {
            let Some(done) = self.acks.done_through(*p) else {
                continue;
            };
            let mut best = None;
            while o.acked_markers.front().is_some_and(|m| *m <= done) {
                best = o.acked_markers.pop_front();
            }
            if let Some(m) = best.filter(|m| o.stored.is_none_or(|s| s < *m)) {
                match c
                    .consumer
                    .store_offset(&self.k.routed_topic, *p as i32, m as i64)
                {
                    Ok(()) => o.stored = Some(m),
                    // Revoked while the report was in flight: the next owner re-decides from its commit.
                    Err(e) => tracing::debug!(partition = p, error = %e, "offset not stored"),
                }
            }
        }
        Ok(())
    }

    /// Stop deciding, publish final markers, wait for outstanding deliveries, store and commit.
    fn shutdown(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let deadline = Instant::now() + Duration::from_millis(self.k.shutdown_timeout_ms);
        self.publish_markers(c, true)?;
        c.producer
            .flush(Duration::from_millis(self.k.shutdown_timeout_ms))?;
        while Instant::now() < deadline {
            self.settle(c)?;
            self.store_offsets(c)?;
            if self.acks.in_flight() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.settle(c)?;
        self.store_offsets(c)?;
        outbox::commit(&c.consumer)?;
        tracing::info!(
            records = self.stats.records,
            unique = self.stats.unique,
            duplicates = self.stats.duplicates,
            "dedup worker stopped"
        );
        Ok(())
    }
}
