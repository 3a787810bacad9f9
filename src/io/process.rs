//! One input record to one output record: admit, analyze, decide, format, in one process (the
//! file pipeline and `eval`). The Kafka stages split the same steps (`io::steps`) between route
//! and dedup, so every front end gives the same verdicts.

use std::time::Instant;

use crate::engine::{Analyzed, Analyzer, Engine, Position, Verdict};
use crate::hist::{Hist, Scale};
use crate::io::config::{OutputConfig, StageConfig};
use crate::io::records::{self, Decided};
use crate::io::steps::Admission;
use crate::metrics::{self, Stage};
use crate::text::tokenize::Tokenizer;
use crate::types::{PostId, RejectReason, Rejection};
use crate::verify::Method;

pub use crate::io::records::Sink;

/// The outcome of one record, formatted.
#[derive(Debug)]
pub struct Emitted {
    /// Destination.
    pub sink: Sink,
    /// The record bytes, without a trailing newline.
    pub record: Vec<u8>,
    /// The post id, when decoding got that far.
    pub id: Option<PostId>,
    /// The cluster joined, for duplicates.
    pub cluster: Option<PostId>,
    /// The rule that verified, for duplicates.
    pub method: Option<Method>,
    /// The rejection reason, for rejected records.
    pub reason: Option<RejectReason>,
    /// Whether a unique post was empty after normalization.
    pub empty: bool,
    /// Whether a unique post was older than the window (compared with the live entries, matched
    /// none, not indexed).
    pub late: bool,
}

impl Default for Emitted {
    fn default() -> Self {
        Emitted {
            sink: Sink::Unique,
            record: Vec::with_capacity(512),
            id: None,
            cluster: None,
            method: None,
            reason: None,
            empty: false,
            late: false,
        }
    }
}

/// Decoder, analyzer and engine together.
pub struct Processor<'t> {
    admission: Admission,
    analyzer: Analyzer<'t>,
    engine: Engine,
    analyzed: Analyzed,
    output: OutputConfig,
    clock: Option<StageClock>,
}

/// Per-stage latencies, accumulated here and merged into the registry by `flush_metrics`
/// (only while metrics are served: the clock reads cost a little per post).
struct StageClock {
    hists: [Hist; Stage::ALL.len()],
    mark: Instant,
}

impl StageClock {
    fn lap(&mut self, stage: Stage) {
        let now = Instant::now();
        self.hists[stage as usize].observe((now - self.mark).as_nanos() as u64);
        self.mark = now;
    }
}

impl<'t> Processor<'t> {
    /// A processor over an engine (fresh or restored).
    pub fn new(cfg: &StageConfig, tokenizer: &'t Tokenizer, engine: Engine) -> Self {
        Processor {
            admission: Admission::new(cfg),
            analyzer: Analyzer::new(tokenizer),
            engine,
            analyzed: Analyzed::default(),
            output: cfg.output.clone(),
            clock: metrics::global().enabled().then(|| StageClock {
                hists: [Hist::new(Scale::Nanos); Stage::ALL.len()],
                mark: Instant::now(),
            }),
        }
    }

    /// Ends the `output` stage of the record just processed (the caller wrote it).
    pub fn output_done(&mut self) {
        if let Some(c) = &mut self.clock {
            c.lap(Stage::Output);
        }
    }

    /// Publishes stage latencies and the engine's figures to the metrics registry.
    pub fn flush_metrics(&mut self) {
        let Some(c) = &mut self.clock else { return };
        let m = metrics::global();
        for (stage, h) in Stage::ALL.iter().zip(c.hists.iter_mut()) {
            m.merge_stage(*stage, h);
            *h = Hist::new(Scale::Nanos);
        }
        m.publish_engine(&self.engine);
    }

    fn lap(&mut self, stage: Stage) {
        if let Some(c) = &mut self.clock {
            c.lap(stage);
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, mutably (checkpointing drains its changes).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Processes one input line. `seq` is its global sequence number, `line_no` its 1-based line
    /// number in this input.
    pub fn process(&mut self, line: &[u8], seq: u64, line_no: u64, out: &mut Emitted) {
        out.record.clear();
        out.cluster = None;
        out.method = None;
        out.reason = None;
        out.empty = false;
        out.late = false;
        out.id = None;
        metrics::global().post_in();
        if let Some(c) = &mut self.clock {
            c.mark = Instant::now();
        }
        let post = self.admission.admit(line);
        self.lap(Stage::Decode);
        let post = match post {
            Ok(p) => p,
            Err(r) => {
                out.id = r.id;
                return self.reject(out, r.rejection, line_no, line);
            }
        };
        out.id = Some(post.id.clone());
        self.analyzer.analyze(&post.text, &mut self.analyzed);
        self.lap(Stage::Analyze);
        let at = Position::new(0, seq);
        let v = self
            .engine
            .decide(at, &post.id, post.created_at, &self.analyzed);
        self.lap(Stage::Decide);
        metrics::global().verdict(&v);
        let decided = Decided {
            id: &post.id,
            created_at: post.created_at,
            raw: line,
            analyzed: &self.analyzed,
            line: line_no,
        };
        out.sink = records::verdict_record(&mut out.record, &v, &decided, &self.output);
        match v {
            Verdict::Unique { empty, late } => {
                out.empty = empty;
                out.late = late;
            }
            Verdict::Duplicate(d) => {
                out.method = Some(d.matched_by.method);
                out.cluster = Some(d.cluster);
            }
            Verdict::Rejected(r) => out.reason = Some(r.reason),
        }
    }

    fn reject(&self, out: &mut Emitted, r: Rejection, line_no: u64, line: &[u8]) {
        metrics::global().rejected(r.reason);
        out.sink = Sink::Rejected;
        out.reason = Some(r.reason);
        records::rejected_record(&mut out.record, &r, out.id.as_ref(), line_no, line);
    }
}
