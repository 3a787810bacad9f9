//! The Prometheus metrics registry. One registry per process, reached through `global()`, so the
//! stages count without threading a handle through every call. It sits below `io` (which counts
//! into it); `app::metrics` only serves it over HTTP (`GET /metrics`, `GET /health`). Counters are atomics bumped per
//! record; engine figures (candidates, buckets, index size, watermark) are published as a
//! snapshot of the engine's own plain counters, so the decision stays free of metrics code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::engine::{Engine, EngineStats, Verdict};
use crate::hist::{Hist, Scale};
use crate::types::RejectReason;
use crate::verify::Method;

/// The `address` value that disables the endpoint.
pub const OFF: &str = "off";

/// A processing stage whose per-record latency is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Input record to post (JSON, fields, time).
    Decode,
    /// Normalization, segmentation, fingerprint.
    Analyze,
    /// `Engine::decide`: index query, verification, insert.
    Decide,
    /// Formatting and writing the output record (file pipeline).
    Output,
}

impl Stage {
    /// Every stage, in label order.
    pub const ALL: [Stage; 4] = [Stage::Decode, Stage::Analyze, Stage::Decide, Stage::Output];

    /// The `stage` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::Analyze => "analyze",
            Stage::Decide => "decide",
            Stage::Output => "output",
        }
    }
}

const METHODS: [Method; 4] = [
    Method::Exact,
    Method::Edit,
    Method::Containment,
    Method::Simhash,
];

type Label = [(&'static str, &'static str); 1];
type PartitionLabel = [(&'static str, String); 2];

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    enabled: AtomicBool,
    posts_in: Counter,
    unique: Counter,
    duplicates: Counter,
    rejected: [Counter; RejectReason::ALL.len()],
    matches: [Counter; METHODS.len()],
    rebalances: Family<Label, Counter>,
    consumer_lag: Family<PartitionLabel, Gauge>,
    stages: [SharedHist; Stage::ALL.len()],
    end_to_end: SharedHist,
    /// Reception latency: [route stage (raw records), dedup stage (routed posts)].
    received: [SharedHist; 2],
    order_wait: Counter<f64, std::sync::atomic::AtomicU64>,
    post_wait: SharedHist,
    marker_delay: SharedHist,
    decided_ahead: Counter,
    outputs_acked: Counter,
    engine: Arc<EngineCell>,
    health: Mutex<BTreeMap<&'static str, Option<String>>>,
}

/// The process-wide metrics (created on first use; counting works whether or not they are served).
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Milliseconds from `from_ms` to `to_ms` (wall-clock timestamps); a clock skew that would make
/// it negative counts as 0.
fn ms_between(from_ms: i64, to_ms: i64) -> u64 {
    to_ms.saturating_sub(from_ms).max(0) as u64
}

impl Metrics {
    /// A registry with every metric at zero.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let counter = |r: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            r.register(name, help, c.clone());
            c
        };
        let posts_in = counter(
            &mut r,
            "simdedup_posts_in",
            "Input records read (file lines, raw topic records); every one ends unique, duplicate or rejected",
        );
        let unique = counter(&mut r, "simdedup_posts_unique", "Unique posts emitted");
        let duplicates = counter(
            &mut r,
            "simdedup_posts_duplicate",
            "Duplicate events emitted",
        );
        let rejected_family = Family::<Label, Counter>::default();
        r.register(
            "simdedup_posts_rejected",
            "Rejected records emitted, by reason",
            rejected_family.clone(),
        );
        let rejected = RejectReason::ALL.map(|x| {
            rejected_family
                .get_or_create(&[("reason", x.as_str())])
                .clone()
        });
        let matches_family = Family::<Label, Counter>::default();
        r.register(
            "simdedup_matches",
            "Duplicates by the verification rule that accepted them",
            matches_family.clone(),
        );
        let matches = METHODS.map(|m| {
            matches_family
                .get_or_create(&[("method", m.as_str())])
                .clone()
        });
        let rebalances = Family::<Label, Counter>::default();
        r.register(
            "simdedup_rebalances",
            "Consumer group rebalances seen by this process, by kind (assign, revoke, error)",
            rebalances.clone(),
        );
        let consumer_lag = Family::<PartitionLabel, Gauge>::default();
        r.register(
            "simdedup_consumer_lag",
            "Records between the committed offset and the high watermark, per assigned partition (librdkafka statistics)",
            consumer_lag.clone(),
        );
        let stages = stage_hists(
            &mut r,
            "simdedup_stage_latency_seconds",
            "Time per record in each processing stage",
            || SharedHist::new(Scale::Nanos),
            Stage::ALL.map(Stage::as_str),
        );
        let end_to_end = SharedHist::new(Scale::Millis);
        r.register(
            "simdedup_end_to_end_latency_seconds",
            "Kafka stages: output record time minus the raw input record's timestamp, per post (dedup workers: verdicts; route workers: rejections)",
            end_to_end.clone(),
        );
        let received = stage_hists(
            &mut r,
            "simdedup_received_latency_seconds",
            "Kafka stages: time a post was received minus its raw input record's timestamp (stage=route: the raw record, one broker hop; stage=dedup: its routed post, the route stage and two hops; end-to-end minus the dedup figure is the dedup stage)",
            || SharedHist::new(Scale::Millis),
            ["route", "dedup"],
        );
        let order_wait = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        r.register(
            "simdedup_order_wait_seconds",
            "Dedup workers: time with posts buffered but none allowed by the global order (waiting for other partitions' progress)",
            order_wait.clone(),
        );
        let post_wait = SharedHist::new(Scale::Millis);
        r.register(
            "simdedup_post_wait_seconds",
            "Dedup workers: per post that waited in the global order, the time from its first wait to its decision",
            post_wait.clone(),
        );
        let marker_delay = SharedHist::new(Scale::Millis);
        r.register(
            "simdedup_marker_delay_seconds",
            "Dedup workers: per progress marker of a partition another worker owns, the time from its changelog record's timestamp (when it was written) to its application here",
            marker_delay.clone(),
        );
        let decided_ahead = Counter::default();
        r.register(
            "simdedup_decided_ahead",
            "Dedup workers: posts decided before other partitions reached them in the global order, read-ahead having shown nothing undecided there could match",
            decided_ahead.clone(),
        );
        let outputs_acked = Counter::default();
        r.register(
            "simdedup_outputs_acked",
            "Kafka stages: output records the broker acknowledged (dedup workers: verdicts; route workers: routed envelopes and rejections)",
            outputs_acked.clone(),
        );
        let engine = Arc::new(EngineCell::default());
        r.register_collector(Box::new(Arc::clone(&engine)));
        Metrics {
            registry: r,
            enabled: AtomicBool::new(false),
            posts_in,
            unique,
            duplicates,
            rejected,
            matches,
            rebalances,
            consumer_lag,
            stages,
            end_to_end,
            received,
            order_wait,
            post_wait,
            marker_delay,
            decided_ahead,
            outputs_acked,
            engine,
            health: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether the endpoint is being served (stages skip optional timing when it is not).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// One input record read.
    #[inline]
    pub fn post_in(&self) {
        self.posts_in.inc();
    }

    /// One record rejected before it reached the engine.
    #[inline]
    pub fn rejected(&self, reason: RejectReason) {
        if let Some(i) = RejectReason::ALL.iter().position(|r| *r == reason) {
            self.rejected[i].inc();
        }
    }

    /// One engine verdict emitted.
    #[inline]
    pub fn verdict(&self, v: &Verdict) {
        match v {
            Verdict::Unique { .. } => {
                self.unique.inc();
            }
            Verdict::Duplicate(d) => {
                self.duplicates.inc();
                if let Some(i) = METHODS.iter().position(|m| *m == d.matched_by.method) {
                    self.matches[i].inc();
                }
            }
            Verdict::Rejected(r) => self.rejected(r.reason),
        }
    }

    /// One stage latency, measured by the caller.
    pub fn observe_stage(&self, stage: Stage, d: Duration) {
        self.stages[stage as usize].with(|h| h.observe(d.as_nanos() as u64));
    }

    /// Time a dedup worker spent with posts buffered that the global order did not allow yet.
    pub fn order_wait(&self, d: Duration) {
        self.order_wait.inc_by(d.as_secs_f64());
    }

    /// How long a post that waited in the global order waited, from its first wait to its
    /// decision.
    pub fn observe_post_wait(&self, d: Duration) {
        self.post_wait.with(|h| h.observe(d.as_millis() as u64));
    }

    /// A progress marker of another worker's partition applied at `now_ms`, written at
    /// `written_ms` (its changelog record's timestamp; `ms_between`).
    pub fn observe_marker_delay(&self, written_ms: i64, now_ms: i64) {
        let ms = ms_between(written_ms, now_ms);
        self.marker_delay.with(|h| h.observe(ms));
    }

    /// A post decided ahead of its turn in the global order (`io::kafka::lookahead`).
    pub fn decided_ahead(&self) {
        self.decided_ahead.inc();
    }

    /// An output record acknowledged by the broker.
    pub fn output_acked(&self) {
        self.outputs_acked.inc();
    }

    /// One post's end-to-end latency: `now_ms` (when its output was sent) minus `input_ms`, the
    /// raw input record's timestamp (`ms_between`).
    pub fn observe_end_to_end(&self, input_ms: i64, now_ms: i64) {
        let ms = ms_between(input_ms, now_ms);
        self.end_to_end.with(|h| h.observe(ms));
    }

    /// When a post reached a stage (`dedup`: its routed post, else its raw record): `now_ms`
    /// minus its raw record's timestamp.
    pub fn observe_received(&self, dedup: bool, input_ms: i64, now_ms: i64) {
        let ms = ms_between(input_ms, now_ms);
        self.received[usize::from(dedup)].with(|h| h.observe(ms));
    }

    /// Starts timing a stage, only while metrics are served (the clock read costs a little per
    /// post); pass the result to `observe_since`.
    #[inline]
    pub fn timer(&self) -> Option<std::time::Instant> {
        self.enabled().then(std::time::Instant::now)
    }

    /// Records the latency of a stage whose `timer` started.
    #[inline]
    pub fn observe_since(&self, stage: Stage, started: Option<std::time::Instant>) {
        if let Some(t) = started {
            self.observe_stage(stage, t.elapsed());
        }
    }

    /// Adds latencies accumulated locally (the file pipeline batches them).
    pub fn merge_stage(&self, stage: Stage, local: &Hist) {
        self.stages[stage as usize].with(|h| h.merge(local));
    }

    /// Publishes the engine's counters, index size and watermark (a snapshot: call it as often as
    /// the figures should be fresh).
    pub fn publish_engine(&self, e: &Engine) {
        let snap = EngineSnapshot {
            stats: e.stats().clone(),
            index_entries: e.index().len() as u64,
            index_bytes: e.index().approx_bytes() as u64,
            watermark: e.watermarks().values().max().copied(),
        };
        if let Ok(mut s) = self.engine.snapshot.lock() {
            *s = Some(snap);
        }
    }

    /// One rebalance event of kind `assign`, `revoke` or `error`.
    pub fn rebalance(&self, kind: &'static str) {
        self.rebalances.get_or_create(&[("kind", kind)]).inc();
    }

    /// Consumer lag per partition of `topic`; `None` (unassigned or unknown) drops the series.
    pub fn consumer_lag(&self, topic: &str, lags: &[(i32, Option<i64>)]) {
        for (p, lag) in lags {
            let key = [("topic", topic.to_string()), ("partition", p.to_string())];
            match lag {
                Some(l) => {
                    self.consumer_lag.get_or_create(&key).set(*l);
                }
                None => {
                    self.consumer_lag.remove(&key);
                }
            }
        }
    }

    /// Sets a component's readiness: `Ok` ready, `Err(reason)` not ready. `/health` is ready when
    /// every registered component is.
    pub fn set_health(&self, component: &'static str, state: Result<(), String>) {
        if let Ok(mut h) = self.health.lock() {
            h.insert(component, state.err());
        }
    }

    /// `None` when ready, else the reason.
    pub fn health(&self) -> Option<String> {
        let h = self.health.lock().ok()?;
        if h.is_empty() {
            return Some("starting".into());
        }
        h.iter()
            .find_map(|(c, r)| r.as_ref().map(|r| format!("{c}: {r}")))
    }

    /// Turns on the per-stage latency clocks (called when the registry is served).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail; a collector error would be a bug in this file.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics encoding failed");
        }
        out
    }
}

/// A histogram behind a lock, shared between the stages and the registry.
#[derive(Clone, Debug)]
struct SharedHist(Arc<Mutex<Hist>>);

impl SharedHist {
    fn new(scale: Scale) -> SharedHist {
        SharedHist(Arc::new(Mutex::new(Hist::new(scale))))
    }

    fn with(&self, f: impl FnOnce(&mut Hist)) {
        if let Ok(mut h) = self.0.lock() {
            f(&mut h);
        }
    }
}

impl TypedMetric for SharedHist {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for SharedHist {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = self.0.lock().map(|h| *h).unwrap_or_default();
        encode_hist(encoder, &h)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Encodes `h`; durations (the `Nanos` scale) in seconds.
fn encode_hist(mut encoder: MetricEncoder, h: &Hist) -> Result<(), std::fmt::Error> {
    // Dividing (not multiplying by 1e-9) gives the nearest float to the decimal bound: `le="1e-6"`.
    let per_unit = match h.scale() {
        Scale::Pow2 => 1.0,
        Scale::Nanos => 1e9,
        Scale::Millis => 1e3,
    };
    let buckets: Vec<(f64, u64)> = h
        .buckets()
        .map(|(b, n)| (b.map_or(f64::INFINITY, |b| b as f64 / per_unit), n))
        .collect();
    encoder.encode_histogram::<NoLabelSet>(h.sum() as f64 / per_unit, h.count(), &buckets, None)
}

/// What `publish_engine` last saw.
#[derive(Clone, Debug)]
struct EngineSnapshot {
    stats: EngineStats,
    index_entries: u64,
    index_bytes: u64,
    watermark: Option<i64>,
}

/// Collector of the engine figures, read at scrape time from the last snapshot.
#[derive(Debug, Default)]
struct EngineCell {
    snapshot: Mutex<Option<EngineSnapshot>>,
}

impl Collector for EngineCell {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.snapshot.lock().ok().and_then(|s| s.clone());
        let stats = snap.as_ref().map(|s| s.stats.clone()).unwrap_or_default();
        let q = &stats.query;
        let hists = [
            (
                "simdedup_candidates_per_query",
                "Distinct candidates verified per post that reached the index",
                &stats.candidates_per_query,
            ),
            (
                "simdedup_bucket_size",
                "Entries in each SimHash block-table bucket a query looked up (0: no bucket)",
                &q.bucket_sizes,
            ),
        ];
        for (name, help, h) in hists {
            let e = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
            encode_hist(e, h)?;
        }
        let counters = [
            ("simdedup_candidates", "Candidates verified", q.candidates),
            (
                "simdedup_verify_rejects",
                "Candidates that no verification rule accepted",
                q.verify_rejects,
            ),
            (
                "simdedup_gate_rejects",
                "Candidates rejected by cheap gates before their record was read",
                q.gate_rejects,
            ),
            (
                "simdedup_outranked",
                "Candidates not read: their gates bound their score to no more than a match already found",
                q.outranked,
            ),
            (
                "simdedup_bucket_scans_capped",
                "SimHash bucket scans cut at index.bucket_scan_cap",
                q.bucket_scans_capped,
            ),
            (
                "simdedup_posting_scans_capped",
                "Bigram posting scans cut at index.posting_scan_cap",
                q.posting_scans_capped,
            ),
            (
                "simdedup_verify_budget_exhausted",
                "Posts whose verification work reached verify.max_verify_cells_per_post",
                q.verify_budget_exhausted,
            ),
            (
                "simdedup_candidates_unverified",
                "Candidates of the generation where their post's verification budget ran out, left unverified",
                q.candidates_unverified,
            ),
            (
                "simdedup_cold_read_errors",
                "Candidates skipped because their stored record could not be read (spill files)",
                q.cold_read_errors,
            ),
            (
                "simdedup_verify_cells",
                "Verification work: edit-distance cells and token or substring comparisons",
                q.verify_cells,
            ),
            (
                "simdedup_late_posts",
                "Posts older than the window that matched no live entry: passed as unique, marked late, not indexed",
                stats.late,
            ),
            (
                "simdedup_expired_entries",
                "Index entries dropped by generation expiry",
                stats.expired_entries,
            ),
        ];
        for (name, help, v) in counters {
            let c = ConstCounter::new(v);
            c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        let Some(s) = snap else { return Ok(()) };
        let mut gauges = vec![
            (
                "simdedup_index_entries",
                "Live index entries (representatives and their refreshed copies)",
                s.index_entries as i64,
            ),
            (
                "simdedup_index_bytes",
                "Approximate bytes held by index entries and postings",
                s.index_bytes as i64,
            ),
        ];
        if let Some(w) = s.watermark {
            let now = crate::clock::now_secs();
            gauges.push((
                "simdedup_watermark_seconds",
                "Largest event time decided (unix seconds)",
                w,
            ));
            gauges.push((
                "simdedup_window_lag_seconds",
                "Wall clock minus the watermark: how far event time trails real time",
                now - w,
            ));
        }
        for (name, help, v) in gauges {
            let g = ConstGauge::new(v);
            g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// Registers a histogram family labelled by `stage` and returns its members in `stages`' order.
fn stage_hists<const N: usize>(
    r: &mut Registry,
    name: &str,
    help: &str,
    new: fn() -> SharedHist,
    stages: [&'static str; N],
) -> [SharedHist; N] {
    let family = Family::<Label, SharedHist, fn() -> SharedHist>::new_with_constructor(new);
    r.register(name, help, family.clone());
    stages.map(|s| family.get_or_create(&[("stage", s)]).clone())
}

#[cfg(test)]
mod tests;
