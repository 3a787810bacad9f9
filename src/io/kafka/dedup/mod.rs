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
//! `idle_after_ms`, or taken over where its previous owner's last marker left it idle, with
//! nothing new since, or fetched to its end once everything the raw topic held since its last
//! record is routed) stops holding others back, so records arriving
//! on it later may be decided in another order than in a replay. For `kafka.wake_grace_ms` after
//! a record arrives on a quiet partition of this worker, no partition counts as idle
//! (`merge::Wake`): the first records of a burst after silence are decided in order.
//!
//! This module is the worker loop; the ordering decisions are `super::gate` (pure), the
//! changelog replication is `changelog`, the owned partitions' buffers are `owned`.
//!
//! Delivery: an input offset (a routed envelope) is stored only after the outputs of all its
//! posts are acknowledged and a progress marker covering it is acknowledged on the changelog
//! (index entries go before the marker, in batches, on the same ordered partition). Replays
//! re-emit identical verdicts.

mod ahead;
mod changelog;
mod clients;
mod idle;
mod lanes;
mod local;
mod owned;
mod wait;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::Offset;

use super::acks::Acks;
use super::client::Tag;
use super::gate::Progress;
use super::lookahead::Lookahead;
use super::merge::Wake;
use super::outbox::{self, send, settle, Out};
use super::route::RouteStatus;
use super::upstream::RouteWatch;
use super::wire::{routed_seq, RoutedPost};
use super::{KafkaConfig, KafkaError};
use crate::engine::{Engine, Position};
use crate::index::OrderKey;
use crate::io::config::StageConfig;
use crate::io::records::{self, Decided, Sink};
use crate::metrics::{self, Stage};
use crate::types::{RejectReason, Rejection};
use changelog::CHANGELOG_BATCH;
use clients::Clients;
use owned::Owned;
use wait::WaitClock;

/// A dedup worker's local state dir (`run --state-dir`).
#[derive(Clone, Debug)]
pub struct LocalStateDir {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// The analysis settings' identifier (`Config::analysis_id`): a state dir written under
    /// other settings is refused.
    pub analysis_id: String,
}

/// Counters of a dedup worker.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DedupStats {
    /// Routed records decided.
    pub records: u64,
    /// Unique posts emitted.
    pub unique: u64,
    /// Duplicate events emitted.
    pub duplicates: u64,
    /// Rejected records emitted.
    pub rejected: u64,
    /// Changelog entries applied from the topic (including this worker's own, echoed, but
    /// none while its reader is paused: `Worker::pace_reader`).
    pub applied: u64,
    /// Time with posts buffered but none allowed by the global order, in seconds.
    pub waited_secs: f64,
    /// Posts decided before their turn in the global order, read-ahead having shown that
    /// nothing undecided in other partitions could match them.
    pub ahead: u64,
    /// Index entries restored from the local state dir at the start.
    pub restored: u64,
    /// Of those, the entries of sealed generations loaded whole (`state.keep_sealed`).
    pub sealed_loaded: u64,
}

/// The worker's state besides the Kafka clients.
struct Worker<'a> {
    k: &'a KafkaConfig,
    cfg: &'a StageConfig,
    partitions: u32,
    engine: Engine,
    owned: BTreeMap<u32, Owned>,
    /// What the changelog's markers say about the other partitions.
    progress: Progress,
    acks: Acks,
    stats: DedupStats,
    rec: Vec<u8>,
    /// Whether the changelog reader is paused (`Worker::pace_reader`).
    reader_paused: bool,
    /// Set on assignment: this worker writes a sync record with this nonce to the changelog, and
    /// a partition taken over starts only once the reader has read it back, so every marker the
    /// previous owner wrote before is known (high watermarks are not reliable on every broker).
    sync_nonce: Option<u64>,
    /// Index entries decided but not yet sent to the changelog.
    unsent: Vec<(i64, crate::index::Entry)>,
    /// The route stage of this process, if any (see `run`).
    routing: Option<&'a RouteStatus>,
    /// When it was first seen routing.
    routing_since: Option<Instant>,
    /// Since when it has been seen caught up without a break.
    caught_up_since: Option<Instant>,
    started_at: Instant,
    /// The local state dir (`run --state-dir`), if any.
    local: Option<local::LocalState>,
    /// Other workers' partitions read ahead (`lookahead`).
    lookahead: Lookahead,
    ahead: ahead::AheadReader,
    /// Whether a head was held back by a partition another worker owns in the last round
    /// (published on this worker's markers: `Marker::waiting`).
    held_by_other: bool,
    /// When an owned partition last woke up (`merge::Wake`).
    wake: Wake,
    /// Without a route stage in this process: what the route group has routed.
    upstream: Option<RouteWatch>,
}

/// Delivery reports are applied after every this many decisions in one round (the producer
/// queue never fills with unsettled reports).
pub(super) const SETTLE_EVERY_DECISIONS: usize = 1024;

/// A `progress` log line every this many records.
const PROGRESS_LOG_EVERY: u64 = 10_000;

/// With nothing decided for this long, the worker logs what it waits for (at most as often).
const WAITING_REPORT_AFTER: Duration = Duration::from_secs(5);

/// The engine figures are published to the metrics registry at most this often.
const ENGINE_PUBLISH_INTERVAL: Duration = Duration::from_millis(200);

/// How long a round with nothing to do blocks on a consumer before trying again.
pub(super) const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Runs a dedup worker until `stop` is set. With `routing` (the status of a route stage in the
/// same process, see `route::run`), no partition counts as idle before that stage has been
/// routing for `idle_after_ms`, or has been caught up for `UPSTREAM_SETTLE`: on a backlog the
/// route stage's first records can take longer than `idle_after_ms`, and partitions declared
/// idle meanwhile would let the first posts that arrive be decided out of order. After
/// `ROUTING_WAIT_FACTOR` times `idle_after_ms` without either, the wait is given up. Without
/// it, an empty partition counts as idle only once the route group has routed what the raw
/// topic held since its last record and the partition is polled past the routed high watermark
/// read after that (`upstream::RouteWatch`), and then at once if it is fetched to its end.
pub fn run(
    k: &KafkaConfig,
    cfg: &StageConfig,
    stop: &AtomicBool,
    routing: Option<&RouteStatus>,
    state: Option<&LocalStateDir>,
) -> Result<DedupStats, KafkaError> {
    let c = Clients::new(k)?;
    let cold = crate::io::cold::factory_for(state.map(|s| s.dir.as_path()), cfg.state.spill_texts)
        .map_err(KafkaError::Config)?;
    let mut engine =
        Engine::with_cold(&cfg.engine, cold).map_err(|e| KafkaError::Config(e.to_string()))?;
    let (local, restored) = match state {
        Some(s) => {
            let interval = Duration::from_millis(cfg.state.checkpoint_interval_ms.max(1));
            let (l, r) = local::LocalState::open(
                &s.dir,
                &s.analysis_id,
                cfg.engine.window.generation_secs,
                cfg.state.cache_capacity_bytes,
                interval,
            )?;
            (Some(l), r)
        }
        None => (None, None),
    };
    let (progress, from) = match restored {
        Some(r) => (r.progress, Offset::Offset(r.changelog_offset)),
        None => (Progress::default(), Offset::Beginning),
    };
    // The reader fetches the changelog's tail while the index is rebuilt from local state.
    let t = Instant::now();
    changelog::assign(&c.reader, &k.changelog_topic, from)?;
    // A new state dir restores nothing, but gets the writer of sealed generations.
    let (local, restored_entries) = match local {
        Some(l) => {
            let (l, entries, sealed) = l.restore(&mut engine, cfg.state.keep_sealed)?;
            (Some(l), (entries as u64, sealed as u64))
        }
        None => (None, (0, 0)),
    };
    let mut w = Worker::new(k, cfg, engine, progress, local, routing, restored_entries)?;
    // The replicated index first: nothing is decided before the changelog is caught up.
    let health = |state| metrics::global().set_health("dedup", state);
    health(Err("catching up the replicated index".into()));
    w.catch_up_changelog(&c.reader, t, stop, "replicated index caught up");
    metrics::global().publish_engine(&w.engine);
    health(Err("waiting for partition assignment".into()));
    c.routed.consumer().subscribe(&[&k.routed_topic])?;
    let mut last_decision = Instant::now();
    let mut last_report = Instant::now();
    let mut last_publish = Instant::now();
    let mut waiting = WaitClock::default();
    while !stop.load(Ordering::Relaxed) {
        w.watch_route();
        w.settle(&c)?;
        w.rebalance(&c)?;
        w.pace_reader(&c)?;
        w.read_changelog(&c.reader, Duration::ZERO, false);
        let busy = w.poll_routed(&c, false)?;
        w.wake.tick(Instant::now());
        w.start_partitions(&c, stop)?;
        w.read_ahead(&c)?;
        let look = Instant::now();
        let decided = w.decide_ready(&c)?;
        let resolved = w.resolve_awaited();
        let blocked = decided == 0 && w.owned.values().any(|o| !o.buf.is_empty());
        let waited = waiting.mark(look, blocked);
        if !waited.is_zero() {
            w.stats.waited_secs += waited.as_secs_f64();
            metrics::global().order_wait(waited);
        }
        if decided > 0 {
            last_decision = Instant::now();
        } else if last_decision.elapsed() > WAITING_REPORT_AFTER
            && last_report.elapsed() > WAITING_REPORT_AFTER
        {
            last_report = Instant::now();
            w.report_waiting();
        }
        w.publish_markers(&c, decided == 0)?;
        w.store_offsets(&c)?;
        w.checkpoint_local(false)?;
        if last_publish.elapsed() > ENGINE_PUBLISH_INTERVAL {
            metrics::global().publish_engine(&w.engine);
            last_publish = Instant::now();
        }
        if !busy && decided == 0 && resolved == 0 {
            // Nothing to do until the changelog moves or a routed record comes: wait on the
            // changelog briefly instead of spinning, or on the routed records while the reader
            // is paused (a lone worker's own entries coming back woke it early before).
            if w.reader_paused {
                w.poll_routed(&c, true)?;
            } else {
                w.read_changelog(&c.reader, IDLE_WAIT, false);
            }
        }
    }
    health(Err("stopping".into()));
    w.shutdown(&c)?;
    metrics::global().publish_engine(&w.engine);
    Ok(w.stats)
}

impl<'a> Worker<'a> {
    /// A worker around `engine` (restored from `local`, if any, and `progress`, the markers
    /// known at its checkpoint); `restored` counts the entries restored and those of sealed
    /// generations loaded whole.
    fn new(
        k: &'a KafkaConfig,
        cfg: &'a StageConfig,
        engine: Engine,
        progress: Progress,
        local: Option<local::LocalState>,
        routing: Option<&'a RouteStatus>,
        restored: (u64, u64),
    ) -> Result<Self, KafkaError> {
        Ok(Worker {
            k,
            cfg,
            partitions: k.routed_partitions,
            engine,
            owned: BTreeMap::new(),
            progress,
            acks: Acks::default(),
            stats: DedupStats {
                restored: restored.0,
                sealed_loaded: restored.1,
                ..DedupStats::default()
            },
            rec: Vec::with_capacity(1024),
            sync_nonce: None,
            reader_paused: false,
            unsent: Vec::new(),
            routing,
            routing_since: None,
            caught_up_since: None,
            started_at: Instant::now(),
            local,
            lookahead: Lookahead::new(
                k.visibility(),
                cfg.engine.verify.clone(),
                cfg.engine.index.max_distance,
            ),
            ahead: ahead::AheadReader::default(),
            held_by_other: false,
            wake: Wake::new(Duration::from_millis(k.wake_grace_ms)),
            upstream: routing
                .is_none()
                .then(|| RouteWatch::start(k))
                .transpose()?,
        })
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

    /// The order key the head record of `p` will get (its plan, `Owned::plan`).
    pub(super) fn head_key(&self, p: u32) -> Option<OrderKey> {
        let o = self.owned.get(&p).filter(|o| o.started)?;
        o.plan(0, &self.engine, p).map(|plan| plan.key)
    }

    /// Decides every record that is next in the global order; returns how many. Their index
    /// entries are on their way to the changelog when it returns.
    fn decide_ready(&mut self, c: &Clients) -> Result<usize, KafkaError> {
        let n = self.decide_next(c)?;
        self.flush_changelog(c)?;
        Ok(n)
    }

    pub(super) fn decide_one(&mut self, c: &Clients, p: u32) -> Result<(), KafkaError> {
        let Some(o) = self.owned.get_mut(&p) else {
            return Ok(());
        };
        let Some(slot) = o.pop_front() else {
            return Ok(());
        };
        if let Some(since) = std::mem::take(&mut o.head).waiting_since {
            metrics::global().observe_post_wait(since.elapsed());
        }
        let offset = slot.offset;
        self.stats.records += 1;
        if self.stats.records.is_multiple_of(PROGRESS_LOG_EVERY) {
            let s = &self.stats;
            let index = self.engine.index().len();
            tracing::info!(
                records = s.records,
                unique = s.unique,
                duplicates = s.duplicates,
                index,
                decided_ahead = s.ahead,
                ahead_checks = ?self.ahead.checks.get(),
                resolved_ahead = self.ahead.resolved,
                "progress"
            );
        }
        self.rec.clear();
        let input_ms = slot.post.as_ref().ok().and_then(|p| p.input_ms);
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
        let changes = self.engine.take_changes();
        if let Some(l) = self.local.as_mut() {
            l.decided(changes.iter().cloned());
        }
        self.unsent.extend(changes);
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
        if let Some(ms) = input_ms {
            metrics::global().observe_end_to_end(ms, crate::clock::now_millis());
        }
        if self.unsent.len() >= CHANGELOG_BATCH {
            self.flush_changelog(c)?;
        }
        if slot.index + 1 < slot.count {
            return Ok(());
        }
        let tau = self.engine.watermarks().get(&p).copied().unwrap_or(0);
        let arrival = self.engine.arrivals().get(&p).copied().unwrap_or(0);
        if let Some(o) = self.owned.get_mut(&p) {
            o.last = Some((offset, tau, arrival));
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
            arrival: post.input_ms,
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

    /// Checkpoints the local state, if any (`force`: now; else when one is due).
    fn checkpoint_local(&mut self, force: bool) -> Result<(), KafkaError> {
        match self.local.as_mut() {
            Some(l) => l.checkpoint(&mut self.engine, &self.progress, force),
            None => Ok(()),
        }
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
                    .routed
                    .consumer()
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
        c.flush(Duration::from_millis(self.k.shutdown_timeout_ms))?;
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
        outbox::commit(c.routed.consumer())?;
        self.checkpoint_local(true)?;
        // The generation files being written are durable before the worker stops.
        if let Some(l) = self.local.as_mut() {
            l.finish();
        }
        tracing::info!(
            records = self.stats.records,
            unique = self.stats.unique,
            duplicates = self.stats.duplicates,
            waited_secs = self.stats.waited_secs,
            decided_ahead = self.stats.ahead,
            ahead_checks = ?self.ahead.checks,
            resolved_ahead = self.ahead.resolved,
            "dedup worker stopped"
        );
        Ok(())
    }
}
