//! `simdedup dedup`: the file pipeline (`io::file`) from the command line: options, the
//! closing summary and the exit code.

use std::path::PathBuf;

use clap::Args;

use crate::app::common::{
    build_tokenizer, load_config, stop_flag, usage, CmdResult, ConfigArgs, MetricsArgs,
    EXIT_ALREADY_DONE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK,
};
use crate::io::file::{self, FileJob, Summary};

pub(crate) const EXAMPLES: &str = "Examples:
  simdedup dedup --input posts.jsonl --unique-out unique.jsonl \\
      --duplicates-out dups.jsonl --rejected-out rejected.jsonl --state-dir state/
  cat posts.jsonl | simdedup dedup --input - --unique-out - \\
      --duplicates-out dups.jsonl --rejected-out rejected.jsonl --state-dir state/

Rerunning an interrupted command with the same state dir resumes at its last checkpoint;
running another input with the same state dir continues the window; running an input file the
state dir already completed is refused (exit 3: use a new --state-dir, or --no-resume to decide
it again). /dev/null, pipes and devices may serve as several outputs; a stream output whose
reader goes away ends the run after a checkpoint, exit 0.

Exit codes: 0 input done, or a stream output's reader went away (with --metrics-hold: after the
signal that ends the hold); 1 runtime failure (outputs consistent up to the last checkpoint), or
a damaged or unusable state dir; 2 usage or configuration error (also a metrics address that
cannot be bound); 3 the state dir already completed a run of this input file; 130 stopped by
SIGINT/SIGTERM after a clean checkpoint, or at once by a second signal: rerun the same command
with the same --state-dir to resume (without --state-dir nothing persists, so a rerun starts
over).";

/// `dedup` options.
#[derive(Debug, Args)]
pub struct DedupArgs {
    /// Input JSON lines, `-` for stdin.
    #[arg(long)]
    pub input: String,
    /// Unique posts, `-` for stdout: the original JSON line (with fields added under
    /// `output.enrich_key` for --enrich, and to mark a post with no text left or a late post).
    #[arg(long, default_value = "-")]
    pub unique_out: String,
    /// Duplicate-cluster events (JSON lines), `-` for stdout.
    #[arg(long)]
    pub duplicates_out: String,
    /// Rejected records with their reason (JSON lines), `-` for stdout.
    #[arg(long)]
    pub rejected_out: String,
    /// State directory (sled). Without it the window lives in memory and nothing persists.
    #[arg(long, env = "SIMDEDUP_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Start a new run even if the state dir holds an interrupted or completed run of this input.
    #[arg(long)]
    pub no_resume: bool,
    /// Never draw the progress bar (it is drawn only when stderr is a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Add `simhash` (hex) and `tokens` to unique posts (turns `output.enrich` on).
    #[arg(long)]
    pub enrich: bool,
    /// Metrics endpoint.
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Runs `simdedup dedup`.
pub(crate) fn run(a: DedupArgs) -> CmdResult {
    let mut cfg = load_config(&a.config).map_err(usage)?;
    cfg.output.enrich |= a.enrich;
    let outs = [&a.unique_out, &a.duplicates_out, &a.rejected_out];
    for (i, x) in outs.iter().enumerate() {
        if outs[i + 1..].contains(x) && !file::is_stream(x) {
            return Err(usage(format!(
                "output {x} is given twice; each output needs its own file"
            )));
        }
    }
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    a.metrics.start()?;
    let stop = stop_flag();
    let job = FileJob {
        input: a.input,
        unique_out: a.unique_out,
        duplicates_out: a.duplicates_out,
        rejected_out: a.rejected_out,
        state_dir: a.state_dir,
        progress: !a.no_progress,
        no_resume: a.no_resume,
        analysis_id: cfg.analysis_id().map_err(|e| usage(e.to_string()))?,
    };
    let summary = file::run(&job, &cfg.stages(), &tokenizer, &stop).map_err(|e| match e {
        file::PipelineError::Config(m) => usage(m),
        e @ file::PipelineError::AlreadyDone { .. } => (EXIT_ALREADY_DONE, e.to_string()),
        other => (EXIT_FAILURE, other.to_string()),
    })?;
    eprintln!("{}", render_summary(&summary));
    if summary.completed {
        a.metrics.hold(&stop);
    }
    Ok(if summary.completed || summary.output_closed.is_some() {
        EXIT_OK
    } else {
        EXIT_INTERRUPTED
    })
}

/// The closing summary printed on stderr.
pub fn render_summary(s: &Summary) -> String {
    let mut out = format!(
        "simdedup: {} records in {:.2} s ({:.0} records/s): {} unique ({} empty), {} duplicates, {} rejected",
        s.records,
        s.elapsed_secs,
        s.rate(),
        s.unique,
        s.empty,
        s.duplicates,
        s.rejected
    );
    if !s.rejected_by_reason.is_empty() {
        let parts: Vec<String> = s
            .rejected_by_reason
            .iter()
            .map(|(r, n)| format!("{r}={n}"))
            .collect();
        out.push_str(&format!(" [{}]", parts.join(", ")));
    }
    if let Some(r) = s.resumed_at_record {
        out.push_str(&format!("; resumed after record {r}"));
    }
    if s.restored_entries > 0 {
        out.push_str(&format!(
            "; {} entries restored in {:.2} s",
            s.restored_entries, s.restore_secs
        ));
    }
    if s.late > 0 {
        out.push_str(&format!(
            "; {} late (older than the window, passed as unique)",
            s.late
        ));
    }
    out.push_str(&format!("; {} live index entries", s.index_entries));
    if let Some(o) = &s.output_closed {
        out.push_str(&format!("; stopped early: the reader of {o} went away"));
    } else if !s.completed {
        out.push_str("; interrupted: rerun the same command to resume");
    }
    out
}
