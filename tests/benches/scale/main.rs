//! Scale benchmark: a realistic background firehose (real Weibo clauses recombined, exact reposts,
//! light edits) streamed straight into one engine until its 48-hour window holds the target
//! number of live entries, then the labelled dev stream re-timed into the window and interleaved
//! with more background, then a restart from sled. Reports at each checkpoint (default 1M, 5M,
//! 10M, 20M live entries) and writes a JSON summary plus the dev posts' verdicts for `score.py`.
//!
//! Event time is paced by the index: every new live entry advances the background clock by
//! 0.9 * window / target seconds, so the target is reached before anything expires.
//!
//! `cargo bench --bench scale -- --entries 1M --out DIR` (see `scripts/bench-scale.sh`; flags in
//! `Args::parse`).

/// The allocator of the `simdedup` binary: large blocks on transparent huge pages.
#[global_allocator]
static ALLOC: simdedup::app::alloc::HugePages = simdedup::app::alloc::HugePages;

mod background;
mod corpus;
mod dev;
mod persist;
mod report;
mod rng;
mod run;
mod sha1;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::app::layers;
use simdedup::text::tokenize::Tokenizer;

/// Command-line settings.
#[derive(Debug, serde::Serialize)]
pub struct Args {
    /// Live entries to reach.
    pub entries: usize,
    /// Checkpoints to report at (those below `entries`, then `entries`).
    pub checkpoints: Vec<usize>,
    /// Stop the background when RSS reaches this many bytes (0.9 of the ceiling, leaving room
    /// for the dev phase).
    pub max_rss_bytes: u64,
    /// Stop the background after this many wall seconds.
    pub max_secs: f64,
    /// Generator seed.
    pub seed: u64,
    /// The weibo-rumdect posts file.
    pub corpus: PathBuf,
    /// The labelled dev stream directory.
    pub dev: PathBuf,
    /// Output directory.
    pub out: PathBuf,
    /// Event-time span the dev stream is re-timed into, seconds.
    pub dev_span_secs: i64,
    /// Gaps between consecutive dev posts are capped at this many seconds before the scaling.
    pub dev_gap_cap_secs: i64,
    /// Skip the sled restart measurement.
    pub no_restart: bool,
    /// Keep the sled state the restart read (`OUT/state`), so that restarts of it can be timed
    /// again, for example with `simdedup dedup --state-dir OUT/state`.
    pub keep_state: bool,
    /// Keep entries' ids, texts and tokens in memory (`state.spill_texts = false`) instead of
    /// spill files under the output directory.
    pub in_memory: bool,
    /// Configuration files layered over the compiled defaults (`--config`, repeatable, else
    /// `SIMDEDUP_CONFIG`), as `simdedup` layers them.
    pub config: Vec<PathBuf>,
}

fn count(s: &str) -> usize {
    let s = s.replace('_', "");
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1e3),
        Some('M' | 'm') => (&s[..s.len() - 1], 1e6),
        _ => (&s[..], 1.0),
    };
    (num.parse::<f64>()
        .unwrap_or_else(|_| panic!("bad count {s}"))
        * mult) as usize
}

impl Args {
    fn parse() -> Args {
        let mut a = Args {
            entries: 1_000_000,
            checkpoints: vec![1_000_000, 5_000_000, 10_000_000, 20_000_000],
            max_rss_bytes: 12 << 30,
            max_secs: 900.0,
            seed: 1,
            corpus: "../shared/data/weibo-rumdect/posts.jsonl.gz".into(),
            dev: "../shared/bench/weibo-dev-small".into(),
            out: "target/bench-scale".into(),
            dev_span_secs: 3 * 3600,
            dev_gap_cap_secs: 60,
            no_restart: false,
            keep_state: false,
            in_memory: false,
            config: Vec::new(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            match flag.as_str() {
                "--bench" => {}
                "--entries" => a.entries = count(&val()),
                "--checkpoints" => a.checkpoints = val().split(',').map(count).collect(),
                "--max-rss-gb" => {
                    a.max_rss_bytes =
                        (val().parse::<f64>().expect("GB") * (1u64 << 30) as f64) as u64
                }
                "--max-secs" => a.max_secs = val().parse().expect("seconds"),
                "--seed" => a.seed = val().parse().expect("seed"),
                "--corpus" => a.corpus = val().into(),
                "--dev" => a.dev = val().into(),
                "--out" => a.out = val().into(),
                "--dev-span-hours" => {
                    a.dev_span_secs = (val().parse::<f64>().expect("hours") * 3600.0) as i64
                }
                "--dev-gap-cap-secs" => a.dev_gap_cap_secs = val().parse().expect("seconds"),
                "--no-restart" => a.no_restart = true,
                "--keep-state" => a.keep_state = true,
                "--in-memory" => a.in_memory = true,
                "--config" => a.config.push(val().into()),
                other => panic!("unknown flag {other}"),
            }
        }
        if a.config.is_empty() {
            a.config
                .extend(std::env::var_os("SIMDEDUP_CONFIG").map(PathBuf::from));
        }
        a.checkpoints.retain(|c| *c < a.entries);
        a.checkpoints.push(a.entries);
        a
    }
}

fn main() {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out).expect("create --out");
    // Compiled defaults, the configuration files, then the configuration variables
    // (`SIMDEDUP_INDEX__POSTING_SCAN_CAP=64`), as `simdedup` layers them.
    let loaded = layers::load(&args.config, std::env::vars_os()).expect("configuration");
    let cfg: Config = loaded.config;
    if !args.config.is_empty() {
        eprintln!("configuration files: {:?}", args.config);
    }
    if !loaded.env_vars.is_empty() {
        eprintln!("configuration variables: {}", loaded.env_vars.join(" "));
    }
    let stop = cfg.stopwords().expect("stopwords");
    let tokenizer = Tokenizer::new(cfg.text.weighting, &stop);
    let decoder = simdedup::input::Decoder::new(&cfg.input);

    let t = Instant::now();
    let mut dev = dev::DevStream::load(&args.dev, &decoder).expect("dev stream");
    let dev_ids: HashSet<String> = dev.posts.iter().map(|p| p.id.0.clone()).collect();
    let corpus = corpus::Corpus::load(&args.corpus, &dev.events, &dev_ids).expect("corpus");
    eprintln!(
        "corpus: {} posts read, {} used from {} dev-split events ({} excluded: events or ids of the dev stream), \
         {} clauses, {:.0} MB of clause text; dev stream {} posts ({} rejected); {:.1} s",
        corpus.posts_read,
        corpus.posts_used,
        corpus.events_used,
        corpus.posts_excluded,
        corpus.clauses(),
        corpus.arena_bytes() as f64 / 1e6,
        dev.posts.len(),
        dev.rejected,
        t.elapsed().as_secs_f64()
    );

    let outcome = run::run(&args, &cfg, &tokenizer, &corpus, &mut dev, &dev_ids);
    let mut summary = serde_json::json!({
        "args": args,
        "config": {"defaults": "config/default.toml", "files": args.config, "variables": loaded.env_vars},
        "corpus": {
            "posts_read": corpus.posts_read, "posts_used": corpus.posts_used,
            "events_used": corpus.events_used, "posts_excluded": corpus.posts_excluded,
            "clauses": corpus.clauses(),
        },
        "run": outcome.summary,
    });
    drop(corpus);
    if !args.no_restart {
        let dir = args.out.join("state");
        let _ = std::fs::remove_dir_all(&dir);
        let (committed, commit_secs, disk_bytes) =
            persist::commit(&cfg, &outcome.engine, &dir, outcome.next_seq);
        eprintln!(
            "sled: committed {committed} entries in {commit_secs:.1} s, {:.0} MB on disk",
            disk_bytes as f64 / 1e6
        );
        drop(outcome.engine);
        let first = persist::restart(&cfg, &dir, run::cold(&args, "spill-restart"));
        let (load_secs, restore_secs, restored) =
            (first.open_secs, first.restore_secs, first.restored);
        eprintln!(
            "restart from sled: open {load_secs:.1} s + read and rebuild {restore_secs:.1} s = {:.1} s for {restored} entries ({} threads), {} sealed generations written whole",
            load_secs + restore_secs,
            first.threads,
            first.written,
        );
        // Again, with the sealed generations the first one wrote.
        let second = (first.written > 0)
            .then(|| persist::restart(&cfg, &dir, run::cold(&args, "spill-restart-2")));
        if let Some(x) = &second {
            eprintln!(
                "restart with sealed generations: {:.1} s for {} entries, {} of them loaded whole",
                x.open_secs + x.restore_secs,
                x.restored,
                x.loaded_whole
            );
        }
        let r = persist::Restart {
            committed,
            commit_secs,
            disk_bytes,
            load_secs,
            restore_secs,
            restart_secs: load_secs + restore_secs,
            restored,
            rss_after_bytes: first.rss,
            threads: first.threads,
            sealed_written: first.written,
            sealed_restart_secs: second.as_ref().map(|x| x.open_secs + x.restore_secs),
            sealed_loaded: second.as_ref().map_or(0, |x| x.loaded_whole),
        };
        summary["restart"] = serde_json::to_value(&r).expect("json");
        if args.keep_state {
            eprintln!("sled state kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    summary["peak_rss_bytes"] = report::peak_rss_bytes().into();
    let text = serde_json::to_string_pretty(&summary).expect("json");
    std::fs::write(args.out.join("summary.json"), &text).expect("write summary");
    println!("{text}");
}
