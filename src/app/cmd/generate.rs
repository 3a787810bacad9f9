//! `simdedup generate`: the command-line side of the load generator (`app::generate`): options,
//! pacing, and writing the posts to a file, stdout or a Kafka topic, plus the truth file.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use crate::app::common::{usage, CmdResult, EXIT_FAILURE, EXIT_OK};
use crate::app::generate::{Delay, GenConfig, Generator, Mix};

/// `simdedup generate --help` examples.
pub const EXAMPLES: &str = "Examples:
  simdedup generate --count 20000 --seed 7 --output posts.jsonl --truth truth.jsonl
  simdedup eval --posts posts.jsonl --truth truth.jsonl      # score the engine on them
  simdedup generate --count 100000 --rate 2000 --topic posts --brokers 127.0.0.1:9092
  simdedup generate --mix unique=0.5,exact=0.2,format=0.2,light=0.1 --delay uniform:0:3600

With --rate, `--start now --event-rate` equal to --rate gives live-looking event times.
With --topic, each post is one record keyed by its number and a missing topic is created with
--partitions (built-in client settings: no --config); the first post goes out once the producer
is connected and the broker has given it its producer id, so that records are not timestamped
before they can be sent.

Exit codes: 0 done (with --topic: every record acknowledged); 1 a write or Kafka error; 2 usage
error.";

/// `generate` options.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Posts to write (originals and copies together).
    #[arg(long, default_value_t = 10_000)]
    pub count: u64,
    /// Seed: the same seed and options give the same posts.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Share of each kind of post (normalized to sum 1): unique originals, exact copies (same
    /// text), format copies (same text, other decorations), light (1-2 character edits) and
    /// heavy (crop or added commentary).
    #[arg(
        long,
        default_value = "unique=0.6,exact=0.1,format=0.15,light=0.1,heavy=0.05"
    )]
    pub mix: Mix,
    /// Event-time delay of a copy after its original: `exp:MEAN_SECS`, `uniform:MIN:MAX` or
    /// `fixed:SECS`.
    #[arg(long, default_value = "exp:600")]
    pub delay: Delay,
    /// Event time of the first post: unix seconds, or `now`.
    #[arg(long, default_value = "1700000000")]
    pub start: String,
    /// Posts per second of event time (`created_at` advances by this on average).
    #[arg(long, default_value_t = 20.0)]
    pub event_rate: f64,
    /// Output JSON lines, `-` for stdout; not with --topic.
    #[arg(long, default_value = "-")]
    pub output: String,
    /// Also write the truth: `{"id","cluster","label","kind"}` per post, the format of
    /// `simdedup eval --truth`.
    #[arg(long)]
    pub truth: Option<PathBuf>,
    /// Produce to this Kafka topic instead of writing a file.
    #[arg(long)]
    pub topic: Option<String>,
    /// Bootstrap servers (with --topic).
    #[arg(long, env = "SIMDEDUP_BROKERS", default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Partitions of --topic if it has to be created.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Wall-clock pacing in posts per second; 0 writes as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
}

/// Runs `simdedup generate`.
pub fn run(a: GenerateArgs) -> CmdResult {
    let failed = |m: String| (EXIT_FAILURE, m);
    let start_secs = match a.start.as_str() {
        "now" => chrono::Utc::now().timestamp(),
        s => s
            .parse()
            .map_err(|_| usage(format!("--start: not unix seconds or `now`: {s}")))?,
    };
    if !(a.event_rate.is_finite() && a.event_rate > 0.0) {
        return Err(usage("--event-rate must be positive"));
    }
    if !(a.rate.is_finite() && a.rate >= 0.0) {
        return Err(usage("--rate must be >= 0"));
    }
    if a.topic.is_some() && a.output != "-" {
        return Err(usage("give either --output or --topic, not both"));
    }
    let cfg = GenConfig {
        seed: a.seed,
        mix: a.mix.clone(),
        delay: a.delay,
        start_secs,
        event_rate: a.event_rate,
    };
    let mut truth = match &a.truth {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .map_err(|e| failed(format!("cannot create {}: {e}", p.display())))?,
        )),
        None => None,
    };
    let mut truth_err: Option<std::io::Error> = None;
    let mut pace = Pace::new(a.rate, a.count);
    let lines = Generator::new(cfg).take(a.count as usize).map(|p| {
        pace.tick();
        if let Some(w) = truth.as_mut() {
            if let Err(e) = writeln!(w, "{}", p.truth_json()) {
                truth_err.get_or_insert(e);
            }
        }
        p.to_json().into_bytes()
    });
    let n = match &a.topic {
        Some(topic) => {
            let k = crate::io::kafka::KafkaConfig {
                brokers: a.brokers.clone(),
                ..Default::default()
            };
            crate::io::kafka::tools::produce_lines(&k, topic, Some(a.partitions), lines)
                .map_err(|e| failed(e.to_string()))?
        }
        None => write_lines(&a.output, lines).map_err(failed)?,
    };
    if let Some(e) = truth_err {
        return Err(failed(format!("cannot write the truth file: {e}")));
    }
    if let Some(mut w) = truth {
        w.flush()
            .map_err(|e| failed(format!("cannot write the truth file: {e}")))?;
    }
    let dest = a.topic.as_deref().map_or(a.output.as_str(), |t| t);
    eprintln!("simdedup: generated {n} posts to {dest} (seed {})", a.seed);
    Ok(EXIT_OK)
}

fn write_lines(output: &str, lines: impl Iterator<Item = Vec<u8>>) -> Result<u64, String> {
    let mut out: Box<dyn Write> = if output == "-" {
        Box::new(std::io::BufWriter::new(std::io::stdout().lock()))
    } else {
        let f =
            std::fs::File::create(output).map_err(|e| format!("cannot create {output}: {e}"))?;
        Box::new(std::io::BufWriter::with_capacity(1 << 20, f))
    };
    let mut n = 0u64;
    for line in lines {
        out.write_all(&line)
            .and_then(|_| out.write_all(b"\n"))
            .map_err(|e| format!("cannot write {output}: {e}"))?;
        n += 1;
    }
    out.flush()
        .map_err(|e| format!("cannot write {output}: {e}"))?;
    Ok(n)
}

/// Wall-clock pacing and progress logs.
struct Pace {
    rate: f64,
    total: u64,
    n: u64,
    started: Instant,
    logged: Instant,
}

impl Pace {
    fn new(rate: f64, total: u64) -> Pace {
        let now = Instant::now();
        Pace {
            rate,
            total,
            n: 0,
            started: now,
            logged: now,
        }
    }

    /// Called before each post: sleeps until it is due, logs progress every 10 s. The clock
    /// starts at the first post, not at construction: with --topic the producer connects and
    /// the topic is created first, and posts due meanwhile would go out in one burst.
    fn tick(&mut self) {
        if self.n == 0 {
            self.started = Instant::now();
            self.logged = self.started;
        }
        if self.rate > 0.0 {
            let due = self.started + Duration::from_secs_f64(self.n as f64 / self.rate);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        self.n += 1;
        if self.logged.elapsed() >= Duration::from_secs(10) {
            self.logged = Instant::now();
            let secs = self.started.elapsed().as_secs_f64();
            tracing::info!(
                posts = self.n,
                of = self.total,
                posts_per_sec = (self.n as f64 / secs).round(),
                "progress"
            );
        }
    }
}
