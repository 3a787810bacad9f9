//! `simdedup eval`: scores the engine on a labelled stream (`app::eval`) and prints the report.

use std::path::PathBuf;

use clap::Args;

use crate::app::common::{
    build_tokenizer, load_config, usage, CmdResult, ConfigArgs, EXIT_FAILURE, EXIT_OK,
};
use crate::app::eval;

pub(crate) const EXAMPLES: &str = "Example:
  simdedup eval --posts bench/posts.jsonl --truth bench/truth.jsonl

Runs the engine in memory (no state dir, no Kafka) with the configured analysis and index.

Exit codes: 0 done; 1 a file that cannot be read or a malformed truth line; 2 configuration
error.";

/// `eval` options.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Posts, one JSON object per line, in stream order.
    #[arg(long)]
    pub posts: PathBuf,
    /// Truth: `{"id","cluster","label","kind"}` per line, same order.
    #[arg(long)]
    pub truth: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Replay the stream through this many partitions, routed as the Kafka topology routes
    /// them (`[routing]`), and score that; 1 is the single-partition engine.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
}

/// Runs `simdedup eval`.
pub(crate) fn run(a: EvalArgs) -> CmdResult {
    let cfg = load_config(&a.config).map_err(usage)?;
    let tokenizer = build_tokenizer(&cfg).map_err(usage)?;
    let failed = |e: eval::EvalError| (EXIT_FAILURE, e.to_string());
    let (r, factor) = if a.partitions > 1 {
        let (r, f) = eval::evaluate_partitioned(&a.posts, &a.truth, &cfg, &tokenizer, a.partitions)
            .map_err(failed)?;
        (r, Some(f))
    } else {
        (
            eval::evaluate(&a.posts, &a.truth, &cfg, &tokenizer).map_err(failed)?,
            None,
        )
    };
    if a.json {
        let mut v = serde_json::to_value(&r).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
        if let Some(f) = factor {
            v["partitions"] = a.partitions.into();
            v["engine_calls_per_post"] = f.into();
        }
        let text = serde_json::to_string_pretty(&v).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
        println!("{text}");
        return Ok(EXIT_OK);
    }
    print_report(&r);
    if let Some(f) = factor {
        println!(
            "partitions {}: {f:.3} engine calls per post (decision + replica registrations)",
            a.partitions
        );
    }
    Ok(EXIT_OK)
}

fn print_report(r: &eval::Report) {
    println!(
        "posts {}  lost {}  output twice {}  scored {}",
        r.posts, r.lost, r.duplicated_outputs, r.scored_posts
    );
    println!(
        "precision {:.4}  recall {:.4}  F1 {:.4}  (predicted dup {}, false positives {})",
        r.precision, r.recall, r.f1, r.predicted_dup, r.false_positives
    );
    for (k, v) in &r.recall_by_kind {
        println!(
            "  recall {k:<10} {v:.4}  (of {})",
            r.truth_dup_by_kind.get(k).copied().unwrap_or(0)
        );
    }
    println!(
        "lcqmc_neg flagged {} of {}",
        r.lcqmc_neg_fp, r.lcqmc_neg_posts_scored
    );
    for (m, [ok, wrong]) in &r.by_method {
        println!("  method {m:<12} correct {ok:>6}  wrong {wrong:>4}");
    }
    println!(
        "candidates verified {} (rejected {}), capped scans: buckets {} postings {}",
        r.candidates, r.verify_rejects, r.bucket_scans_capped, r.posting_scans_capped
    );
    println!("engine rate {:.0} posts/s", r.posts_per_sec);
}
