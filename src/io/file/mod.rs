//! The embedded default: files or stdin/stdout instead of Kafka, same engine, same sled state.
//! Checkpoints flush the outputs, persist index changes and the input position; a rerun of an
//! interrupted command resumes there, truncating file outputs back to their checkpointed length,
//! so the finished outputs equal those of an uninterrupted run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engine::Engine;
use crate::io::config::StageConfig;
use crate::io::process::{Emitted, Processor, Sink};
use crate::metrics;
use crate::state::{Checkpoint, Identity, RunRecord, StateError, Store};
use crate::text::tokenize::Tokenizer;
use crate::types::RejectReason;

mod input;
mod output;

use input::{open_input, Read};
pub use output::is_stream;
use output::Output;

/// What to run.
#[derive(Clone, Debug)]
pub struct FileJob {
    /// Input path, `-` for stdin.
    pub input: String,
    /// Unique posts, `-` for stdout.
    pub unique_out: String,
    /// Duplicate events.
    pub duplicates_out: String,
    /// Rejected records.
    pub rejected_out: String,
    /// Durable state; `None` keeps the index in memory only.
    pub state_dir: Option<PathBuf>,
    /// Draw a progress bar on stderr when it is a terminal.
    pub progress: bool,
    /// Start a new run even if the state holds an interrupted or completed run of the same input.
    pub no_resume: bool,
    /// The analysis settings' identifier, stored in the state dir (see `Store::open`).
    pub analysis_id: String,
}

/// Errors of a file run.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// An input or output file failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The durable store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// Configuration problem.
    #[error("{0}")]
    Config(String),
    /// The state dir already completed a run of this input file.
    #[error("state dir {state} already completed a run of {input} ({records} records: {unique} unique, {duplicates} duplicates, {rejected} rejected); its outputs stand. Deciding the same input again against the window it left would give other verdicts. To start fresh use a new --state-dir (or delete this one); to decide it again anyway pass --no-resume")]
    AlreadyDone {
        /// The state dir.
        state: PathBuf,
        /// The input.
        input: String,
        /// Records of the completed run.
        records: u64,
        /// Its unique posts.
        unique: u64,
        /// Its duplicates.
        duplicates: u64,
        /// Its rejected records.
        rejected: u64,
    },
}

/// Counts of a finished (or interrupted) run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Input records handled in this process.
    pub records: u64,
    /// Unique posts (empty ones included).
    pub unique: u64,
    /// Of the unique posts, those empty after normalization.
    pub empty: u64,
    /// Of the unique posts, those older than the window that matched no live entry (not indexed).
    pub late: u64,
    /// Duplicate events.
    pub duplicates: u64,
    /// Rejected records.
    pub rejected: u64,
    /// Rejected records by reason.
    pub rejected_by_reason: Vec<(RejectReason, u64)>,
    /// Records skipped because an earlier process already checkpointed them.
    pub resumed_at_record: Option<u64>,
    /// Whether the input was read to the end.
    pub completed: bool,
    /// The output whose reader went away (a closed pipe), which ended the run early.
    pub output_closed: Option<String>,
    /// Live index entries at the end.
    pub index_entries: usize,
    /// Entries rebuilt from the state dir at start.
    pub restored_entries: usize,
    /// Seconds spent restoring state.
    pub restore_secs: f64,
    /// Wall-clock seconds of the run.
    pub elapsed_secs: f64,
}

impl Summary {
    /// Records per second of this process.
    pub fn rate(&self) -> f64 {
        if self.elapsed_secs > 0.0 {
            self.records as f64 / self.elapsed_secs
        } else {
            0.0
        }
    }
}

fn progress_bar(enabled: bool, len: Option<u64>) -> Option<indicatif::ProgressBar> {
    if !enabled || !std::io::stderr().is_terminal() {
        return None;
    }
    let style = |t: &str| indicatif::ProgressStyle::with_template(t).ok();
    let pb = match len {
        Some(l) => {
            let pb = indicatif::ProgressBar::new(l);
            if let Some(s) = style("{bar:40} {bytes}/{total_bytes} {msg} eta {eta}") {
                pb.set_style(s);
            }
            pb
        }
        None => indicatif::ProgressBar::new_spinner(),
    };
    pb.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
    Some(pb)
}

/// Runs the file pipeline until the input ends or `stop` is set (then checkpoints and returns
/// with `completed: false`).
pub fn run(
    job: &FileJob,
    cfg: &StageConfig,
    tokenizer: &Tokenizer,
    stop: &AtomicBool,
) -> Result<Summary, PipelineError> {
    let started = Instant::now();
    let health = |state| metrics::global().set_health("engine", state);
    health(Err("loading state".into()));
    let (mut engine, store, cp) = open_state(job, cfg)?;
    let resume = resumable(job, &cp);
    let mut summary = Summary::default();
    let (store, mut restored_from) = match store {
        Some(s) => {
            let (s, r) = restore_state(s, &mut engine, &cp, cfg, &mut summary)?;
            (Some(s), Some(r))
        }
        None => (None, None),
    };
    let (mut input, skipped) = open_input(&job.input, resume.as_ref(), stop)?;
    let mark = |p: &str| {
        resume
            .as_ref()
            .and_then(|r| r.outputs.iter().find(|o| o.path == p).map(|o| o.len))
    };
    let mut outs = [
        Output::open(&job.unique_out, mark(&job.unique_out))?,
        Output::open(&job.duplicates_out, mark(&job.duplicates_out))?,
        Output::open(&job.rejected_out, mark(&job.rejected_out))?,
    ];
    let mut counts = resume.as_ref().map_or([0; 3], |r| r.counts);
    if let Some(r) = &resume {
        summary.resumed_at_record = Some(r.records);
        tracing::info!(
            record = r.records,
            offset = r.input_offset,
            "resuming interrupted run"
        );
    }
    let mut proc = Processor::new(cfg, tokenizer, engine);
    health(Ok(()));
    let mut ctx = RunCtx {
        store: store.as_ref(),
        keeper: restored_from.as_ref().and_then(|r| r.keeper.as_ref()),
        job,
        seq: cp.next_seq,
        records: skipped,
        counts: &mut counts,
    };
    let pb = progress_bar(job.progress, input.len);
    let mut reasons = [0u64; RejectReason::ALL.len()];
    let mut line = Vec::with_capacity(4096);
    let mut emitted = Emitted::default();
    let mut since_cp = 0u64;
    let mut last_cp = Instant::now();
    let interval = Duration::from_millis(cfg.state.checkpoint_interval_ms);
    let mut completed = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let read = input
            .next_line(&mut line, stop)
            .map_err(|source| PipelineError::Io {
                what: "cannot read",
                path: job.input.clone(),
                source,
            })?;
        let n = match read {
            Read::Line(n) => n,
            Read::Stopped => break,
            // A signal that came with the end of input (its producer stopped too) still
            // means the run was interrupted: it is not recorded as completed.
            Read::End => {
                completed = !stop.load(Ordering::Relaxed);
                break;
            }
        };
        input.offset += n as u64;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        ctx.records += 1;
        proc.process(&line, ctx.seq, ctx.records, &mut emitted);
        ctx.seq += 1;
        tally(&emitted, &mut summary, ctx.counts, &mut reasons);
        let i = match emitted.sink {
            Sink::Unique => 0,
            Sink::Duplicate => 1,
            Sink::Rejected => 2,
        };
        if !outs[i].write_record(&emitted.record)? {
            summary.output_closed = Some(outs[i].path.clone());
            break;
        }
        proc.output_done();
        if ctx.records.is_multiple_of(4096) {
            proc.flush_metrics();
        }
        since_cp += 1;
        if since_cp >= cfg.state.checkpoint_every_records
            || (since_cp.is_multiple_of(1024) && last_cp.elapsed() >= interval)
        {
            ctx.checkpoint(&mut proc, &mut outs, input.offset, false)?;
            since_cp = 0;
            last_cp = Instant::now();
        }
        if let Some(pb) = pb.as_ref().filter(|_| ctx.records.is_multiple_of(8192)) {
            pb.set_position(input.offset);
            pb.set_message(format!("{} records", ctx.records));
        }
    }
    ctx.checkpoint(&mut proc, &mut outs, input.offset, completed)?;
    if let Some(o) = outs.iter().find(|o| o.closed) {
        summary.output_closed.get_or_insert_with(|| o.path.clone());
    }
    proc.flush_metrics();
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    // The generations a restart wrote whole are durable before the run ends.
    if let Some(r) = restored_from.as_mut() {
        r.finish_writes();
    }
    summary.completed = completed;
    summary.index_entries = proc.engine().index().len();
    summary.rejected_by_reason = RejectReason::ALL
        .iter()
        .zip(reasons)
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| (*r, n))
        .collect();
    summary.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// The engine, the state store (with `--state-dir`) and its checkpoint. Refuses a state dir of
/// a Kafka dedup worker, and one whose run of this same input completed (unless `no_resume`).
fn open_state(
    job: &FileJob,
    cfg: &StageConfig,
) -> Result<(Engine, Option<Store>, Checkpoint), PipelineError> {
    let cold = crate::io::cold::factory_for(job.state_dir.as_deref(), cfg.state.spill_texts)
        .map_err(PipelineError::Config)?;
    let engine =
        Engine::with_cold(&cfg.engine, cold).map_err(|e| PipelineError::Config(e.to_string()))?;
    let id = Identity {
        analysis_id: &job.analysis_id,
        generation_secs: cfg.engine.window.generation_secs,
    };
    let store = match &job.state_dir {
        Some(dir) => Some(Store::open(dir, &id, cfg.state.cache_capacity_bytes)?),
        None => None,
    };
    let cp = match &store {
        Some(s) => s.checkpoint()?.unwrap_or_default(),
        None => Checkpoint::default(),
    };
    if let (Some(_), Some(dir)) = (cp.changelog_offset, job.state_dir.as_ref()) {
        return Err(PipelineError::Config(format!(
            "state dir {} belongs to a Kafka dedup worker (`run --state-dir`), not to a file run: use another --state-dir",
            dir.display()
        )));
    }
    if let (Some(run), Some(dir)) = (cp.run.as_ref(), job.state_dir.as_ref()) {
        // stdin is a new stream every time; a file of the same name is the same input.
        if run.completed && !job.no_resume && job.input != "-" && run.input == job.input {
            return Err(PipelineError::AlreadyDone {
                state: dir.clone(),
                input: run.input.clone(),
                records: run.records,
                unique: run.counts[0],
                duplicates: run.counts[1],
                rejected: run.counts[2],
            });
        }
    }
    Ok((engine, store, cp))
}

/// Rebuilds the engine's window from the state store as of checkpoint `cp`; notes the entries
/// restored and the time it took in `summary`.
fn restore_state(
    store: Store,
    engine: &mut Engine,
    cp: &Checkpoint,
    cfg: &StageConfig,
    summary: &mut Summary,
) -> Result<(Store, crate::io::restore::Restored), PipelineError> {
    let t = Instant::now();
    let marks = if cp.window_marks.is_empty() {
        &cp.watermarks
    } else {
        &cp.window_marks
    };
    let min_gen = crate::engine::min_live_generation(engine.window(), marks);
    // Generations are read one at a time and built in parallel while the next is read.
    engine.restore_window_marks(marks);
    let opts = crate::io::restore::RestoreOptions {
        min_gen,
        next_seq: cp.next_seq,
        threads: crate::state::restore_threads(),
        keep_sealed: cfg.state.keep_sealed,
    };
    let (store, restored) =
        crate::io::restore::restore(store, engine, cp.watermarks.clone(), opts)?;
    summary.restored_entries = restored.entries();
    summary.restore_secs = t.elapsed().as_secs_f64();
    tracing::info!(
        entries = summary.restored_entries,
        sealed_loaded = restored.sealed_loaded.1,
        discarded = restored.loaded.discarded,
        store_reopens = restored.loaded.reopens,
        sealed_writing = restored.sealed_writing,
        secs = summary.restore_secs,
        "state restored"
    );
    Ok((store, restored))
}

fn tally(e: &Emitted, s: &mut Summary, counts: &mut [u64; 3], reasons: &mut [u64]) {
    s.records += 1;
    match e.sink {
        Sink::Unique => {
            s.unique += 1;
            counts[0] += 1;
            s.empty += u64::from(e.empty);
            s.late += u64::from(e.late);
        }
        Sink::Duplicate => {
            s.duplicates += 1;
            counts[1] += 1;
        }
        Sink::Rejected => {
            s.rejected += 1;
            counts[2] += 1;
            if let Some(i) = e
                .reason
                .and_then(|r| RejectReason::ALL.iter().position(|x| *x == r))
            {
                reasons[i] += 1;
            }
        }
    }
}

/// An interrupted run of the same command can resume; anything else starts a new run over the
/// same window state.
fn resumable(job: &FileJob, cp: &Checkpoint) -> Option<RunRecord> {
    let run = cp.run.as_ref()?;
    if run.completed || job.no_resume {
        return None;
    }
    let same_outputs = [&job.unique_out, &job.duplicates_out, &job.rejected_out]
        .iter()
        .all(|p| run.outputs.iter().any(|o| &o.path == *p));
    if run.input == job.input && same_outputs {
        Some(run.clone())
    } else {
        tracing::warn!(input = %run.input, "state holds an interrupted run of another command; starting a new run over its checkpointed window");
        None
    }
}

struct RunCtx<'a> {
    store: Option<&'a Store>,
    /// Writes generations sealed whole after a checkpoint (`state.keep_sealed`).
    keeper: Option<&'a crate::io::restore::Keeper>,
    job: &'a FileJob,
    seq: u64,
    records: u64,
    counts: &'a mut [u64; 3],
}

impl RunCtx<'_> {
    /// Outputs first (flushed and synced), then the index changes and the checkpoint record.
    fn checkpoint(
        &mut self,
        proc: &mut Processor<'_>,
        outs: &mut [Output; 3],
        offset: u64,
        completed: bool,
    ) -> Result<(), PipelineError> {
        let mut marks = Vec::with_capacity(3);
        for o in outs.iter_mut() {
            marks.push(o.sync()?);
        }
        let changes = proc.engine_mut().take_changes();
        let min_live = proc.engine().min_live_generation();
        let Some(store) = self.store else {
            return Ok(());
        };
        let cp = Checkpoint {
            next_seq: self.seq,
            watermarks: proc.engine().watermarks().clone(),
            window_marks: proc.engine().window_marks(),
            run: Some(RunRecord {
                input: self.job.input.clone(),
                input_offset: offset,
                records: self.records,
                outputs: marks,
                completed,
                counts: *self.counts,
            }),
            ..Checkpoint::default()
        };
        store.commit(&changes, &cp, min_live)?;
        // Every change is committed: the index holds exactly the stored entries.
        if let Some(k) = self.keeper {
            k.after_checkpoint(store, proc.engine_mut(), self.seq, &|_| false);
        }
        Ok(())
    }
}
