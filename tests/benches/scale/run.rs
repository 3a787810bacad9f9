//! The measured run: background until the target (or the RSS or time ceiling), then the dev
//! stream interleaved with more background. Every post goes through `Analyzer::analyze` and
//! `Engine::decide`, timed together, as the file pipeline's `Processor` calls them.

use std::collections::HashSet;
use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::engine::{Analyzed, Analyzer, Engine, Position, Verdict};
use simdedup::index::{Query, QueryStats, Scratch};
use simdedup::text::tokenize::Tokenizer;
use simdedup::types::{EventTime, PostId};

use crate::background::{Background, Mix};
use crate::corpus::Corpus;
use crate::dev::{DevOutputs, DevStream};
use crate::report::{cpu_secs, load_avg, rss_bytes, ByLength, Checkpoint, Latency};
use crate::Args;

/// Background post ids: 19 digits like real Weibo mids, in a range the dev stream does not use.
const BG_ID_BASE: u64 = 4_000_000_000_000_000_000;
/// Background event time starts here (2014-05-13).
const T0: i64 = 1_400_000_000;
/// How often (posts) the pending changes are drained and the ceilings checked.
const EVERY: u64 = 50_000;

/// What the run leaves for the restart measurement and the summary.
pub struct Outcome {
    /// The engine at the end.
    pub engine: Engine,
    /// The next sequence number (the checkpoint's `next_seq`).
    pub next_seq: u64,
    /// JSON summary of the run.
    pub summary: serde_json::Value,
}

/// Figures at the previous checkpoint, to report intervals.
struct Mark {
    wall: Instant,
    cpu: f64,
    posts: u64,
    dups: u64,
    query: QueryStats,
    lat: Latency,
}

struct Runner<'t> {
    engine: Engine,
    analyzer: Analyzer<'t>,
    a: Analyzed,
    seq: u64,
    bg_posts: u64,
    dups: u64,
    filtered: u64,
    secs_per_entry: f64,
    base_rss: u64,
    lat: Latency,
    by_length: ByLength,
    mark: Mark,
    dev_hashes: HashSet<u64>,
    checkpoints: Vec<Checkpoint>,
}

impl<'t> Runner<'t> {
    fn inserted(&self) -> usize {
        self.engine.index().len() + self.engine.stats().expired_entries as usize
    }

    fn bg_time(&self) -> i64 {
        T0 + (self.inserted() as f64 * self.secs_per_entry) as i64
    }

    /// One background post; posts whose normalized text equals a dev post's are skipped.
    fn background(&mut self, bg: &mut Background, text: &mut String) {
        bg.next(text);
        let t = self.bg_time();
        let id = PostId((BG_ID_BASE + self.bg_posts).to_string());
        let start = Instant::now();
        self.analyzer.analyze(text, &mut self.a);
        if !self.a.chars.is_empty() && self.dev_hashes.contains(&self.a.text_hash) {
            self.filtered += 1;
            return;
        }
        let at = Position::new(0, self.seq);
        let verified = self.engine.stats().query.candidates;
        let v = self.engine.decide(at, &id, Some(EventTime(t)), &self.a);
        let ns = start.elapsed().as_nanos() as u64;
        self.lat.observe(ns);
        let verified = self.engine.stats().query.candidates - verified;
        self.by_length.observe(self.a.chars.len(), ns, verified);
        self.seq += 1;
        self.bg_posts += 1;
        if matches!(v, Verdict::Duplicate(_)) {
            self.dups += 1;
        }
        if self.seq.is_multiple_of(EVERY) {
            drop(self.engine.take_changes());
        }
    }

    fn checkpoint(&mut self, at: &str) {
        let now = Instant::now();
        let n = self.seq - self.mark.posts;
        let per = |v: u64| v as f64 / n.max(1) as f64;
        let s = &self.engine.stats().query;
        let m = &self.mark.query;
        let mut lat = self.lat.clone();
        // The interval's histogram: the running one minus the one at the mark.
        lat.subtract(&self.mark.lat);
        let live = self.engine.index().len();
        let rss = rss_bytes();
        let (pauses, pause_share) = lat.pauses();
        let c = Checkpoint {
            at: at.to_string(),
            live_entries: live,
            posts: self.seq,
            event_hours: (self.bg_time() - T0) as f64 / 3600.0,
            interval_posts: n,
            wall_posts_per_sec: n as f64 / (now - self.mark.wall).as_secs_f64(),
            cpu_posts_per_sec: n as f64 / (cpu_secs() - self.mark.cpu).max(0.01),
            load_avg: load_avg(),
            engine_posts_per_sec: n as f64 / (lat.sum() as f64 / 1e9),
            p50_us: lat.quantile_us(0.5),
            p99_us: lat.quantile_us(0.99),
            p999_us: lat.quantile_us(0.999),
            pauses,
            pause_share,
            verified_per_post: per(s.candidates - m.candidates),
            verify_rejects_per_post: per(s.verify_rejects - m.verify_rejects),
            reads_per_post: per((s.candidates - s.gate_rejects) - (m.candidates - m.gate_rejects)),
            bucket_lookups_per_post: per(s.bucket_sizes.count() - m.bucket_sizes.count()),
            bucket_entries_per_post: per(s.bucket_sizes.sum() - m.bucket_sizes.sum()),
            capped_scans_per_1000: 1000.0
                * per(s.bucket_scans_capped + s.posting_scans_capped
                    - m.bucket_scans_capped
                    - m.posting_scans_capped),
            duplicate_share: per(self.dups - self.mark.dups),
            rss_bytes: rss,
            rss_per_entry: rss as f64 / live.max(1) as f64,
            rss_growth_per_entry: rss.saturating_sub(self.base_rss) as f64 / live.max(1) as f64,
            index_estimate_per_entry: self.engine.index().approx_bytes() as f64
                / live.max(1) as f64,
            index_memory_per_entry: {
                let m = self.engine.index().memory();
                let per = |b: usize| b as f64 / live.max(1) as f64;
                [
                    ("meta", per(m.meta)),
                    ("cold", per(m.cold)),
                    ("texts", per(m.texts)),
                    ("tables", per(m.tables)),
                    ("grams", per(m.grams)),
                ]
                .into_iter()
                .collect()
            },
            by_length: std::mem::take(&mut self.by_length).rows(),
        };
        eprintln!("{}", c.line());
        self.checkpoints.push(c);
        self.mark = Mark {
            wall: Instant::now(),
            cpu: cpu_secs(),
            posts: self.seq,
            dups: self.dups,
            query: self.engine.stats().query,
            lat: self.lat.clone(),
        };
    }
}

/// Runs the background to the target, then the dev stream; see the module doc.
/// Where the engine keeps its entries' cold records: spill files in `<out>/<name>` unless
/// `--in-memory`.
pub fn cold(args: &Args, name: &str) -> std::sync::Arc<dyn simdedup::index::cold::ColdFactory> {
    if args.in_memory {
        return simdedup::index::cold::in_memory();
    }
    simdedup::io::cold::FileColdFactory::new(&args.out.join(name)).expect("spill dir")
}

pub fn run(
    args: &Args,
    cfg: &Config,
    tokenizer: &Tokenizer,
    corpus: &Corpus,
    dev: &mut DevStream,
    dev_ids: &HashSet<String>,
) -> Outcome {
    let mut analyzer = Analyzer::new(tokenizer);
    let mut a = Analyzed::default();
    let mut dev_hashes = HashSet::new();
    for p in &dev.posts {
        analyzer.analyze(&p.text, &mut a);
        if !a.chars.is_empty() {
            dev_hashes.insert(a.text_hash);
        }
    }
    let engine = Engine::with_cold(&cfg.engine(), cold(args, "spill")).expect("engine");
    let base_rss = rss_bytes();
    let mut r = Runner {
        engine,
        analyzer,
        a,
        seq: 0,
        bg_posts: 0,
        dups: 0,
        filtered: 0,
        secs_per_entry: 0.9 * cfg.window.window_secs as f64 / args.entries as f64,
        base_rss,
        lat: Latency::new(),
        by_length: ByLength::default(),
        mark: Mark {
            wall: Instant::now(),
            cpu: cpu_secs(),
            posts: 0,
            dups: 0,
            query: QueryStats::default(),
            lat: Latency::new(),
        },
        dev_hashes,
        checkpoints: Vec::new(),
    };
    let mut bg = Background::new(corpus, Mix::default(), args.seed);
    let mut text = String::new();
    let started = Instant::now();
    let mut next_cp = 0;
    let stop_rss = (args.max_rss_bytes as f64 * 0.9) as u64;
    let stop = loop {
        r.background(&mut bg, &mut text);
        if r.engine.index().len() >= args.checkpoints[next_cp] {
            r.checkpoint("checkpoint");
            next_cp += 1;
            if next_cp == args.checkpoints.len() {
                break "target";
            }
        }
        if r.seq.is_multiple_of(8192) {
            if rss_bytes() >= stop_rss {
                r.checkpoint("stop");
                break "rss";
            }
            if started.elapsed().as_secs_f64() >= args.max_secs {
                r.checkpoint("stop");
                break "time";
            }
        }
    };
    let phase1_secs = started.elapsed().as_secs_f64();
    let reached = r.engine.index().len();
    let bg_phase1 = r.bg_posts;

    // Dev phase: the stream re-timed to start just after the background's clock.
    // A run stopped short of the target gets a proportionally shorter dev span, so the dev
    // phase adds the same share of background entries (span / 0.9 window) and stays under the
    // RSS ceiling.
    let dev_start = r.bg_time() + 1;
    let span = (args.dev_span_secs as f64 * (reached as f64 / args.entries as f64).min(1.0)) as i64;
    dev.retime(dev_start, span, args.dev_gap_cap_secs);
    dev.write(&args.out.join("dev-retimed.jsonl"))
        .expect("write re-timed dev stream");
    let mut out = DevOutputs::create(&args.out).expect("dev outputs");
    let mut dev_lat = Latency::new();
    let (mut dev_unique, mut dev_dup, mut dev_rejected, mut to_bg) = (0u64, 0u64, 0u64, 0u64);
    let mut by_method = std::collections::BTreeMap::<&str, u64>::new();
    let mut scratch = Scratch::default();
    for p in &dev.posts {
        while r.bg_time() < p.time {
            r.background(&mut bg, &mut text);
        }
        let at = Position::new(0, r.seq);
        let start = Instant::now();
        r.analyzer.analyze(&p.text, &mut r.a);
        let verified = r.engine.stats().query.candidates;
        let v = r.engine.decide(at, &p.id, Some(EventTime(p.time)), &r.a);
        let ns = start.elapsed().as_nanos() as u64;
        r.lat.observe(ns);
        let verified = r.engine.stats().query.candidates - verified;
        r.by_length.observe(r.a.chars.len(), ns, verified);
        dev_lat.observe(ns);
        r.seq += 1;
        match v {
            Verdict::Unique { .. } => {
                dev_unique += 1;
                out.unique(&p.id).expect("write");
            }
            Verdict::Duplicate(d) => {
                r.dups += 1;
                dev_dup += 1;
                out.duplicate(&p.id, &d.cluster).expect("write");
                if !dev_ids.contains(&d.cluster.0) {
                    to_bg += 1;
                    *by_method.entry(d.matched_by.method.as_str()).or_default() += 1;
                    // Ask the index again for the background text that verified.
                    let before = r.engine.order_key(at, Some(EventTime(p.time)));
                    let q = Query {
                        id: &p.id,
                        before,
                        visibility: Default::default(),
                        min_gen: r.engine.window().min_live_generation(before.tau),
                        max_gen: r.engine.window().generation(before.tau),
                        sketch: r.a.sketch(),
                        grams: &r.a.grams,
                    };
                    let mut qs = QueryStats::default();
                    let matched = r
                        .engine
                        .index()
                        .find(&q, &mut scratch, &mut qs)
                        .and_then(|f| r.engine.index().get(f.r))
                        .map(|e| e.chars.iter().collect::<String>());
                    out.matched_background(&serde_json::json!({
                        "id": p.id.0, "text": p.text, "normalized": r.a.normalized,
                        "cluster_id": d.cluster.0, "method": d.matched_by.method.as_str(),
                        "score": d.matched_by.score, "distance": d.matched_by.distance,
                        "background_normalized": matched,
                    }))
                    .expect("write");
                }
            }
            Verdict::Rejected(_) => dev_rejected += 1,
        }
    }
    out.flush().expect("flush dev outputs");
    r.checkpoint("dev");
    let g = &bg.generated;
    let total = (g.fresh + g.copy + g.edit).max(1) as f64;
    let summary = serde_json::json!({
        "stopped_by": stop,
        "background_secs": phase1_secs,
        "live_entries_reached": reached,
        "live_entries_final": r.engine.index().len(),
        "posts_decided": r.seq,
        "background_posts_decided": r.bg_posts,
        "background_posts_before_dev": bg_phase1,
        "background_skipped_equal_to_a_dev_text": r.filtered,
        "event_hours": (r.bg_time() - T0) as f64 / 3600.0,
        "generated": {
            "fresh": g.fresh, "copy": g.copy, "edit": g.edit,
            "raw_chars_share": {
                "<12": g.len_buckets[0] as f64 / total, "12-19": g.len_buckets[1] as f64 / total,
                "20-140": g.len_buckets[2] as f64 / total, ">140": g.len_buckets[3] as f64 / total,
            },
        },
        "mix": Mix::default(),
        "checkpoints": r.checkpoints,
        "dev": {
            "posts": dev.posts.len(), "decode_rejected": dev.rejected,
            "retimed_start": dev_start, "retimed_span_secs": dev.posts.last().map_or(0, |p| p.time - dev_start),
            "gap_cap_secs": args.dev_gap_cap_secs,
            "unique": dev_unique, "duplicate": dev_dup, "rejected": dev_rejected,
            "matched_to_background": to_bg, "matched_to_background_by_method": by_method,
            "p50_us": dev_lat.quantile_us(0.5), "p99_us": dev_lat.quantile_us(0.99),
        },
    });
    Outcome {
        engine: r.engine,
        next_seq: r.seq,
        summary,
    }
}
