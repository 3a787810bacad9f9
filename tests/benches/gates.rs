//! Gate benchmark: what a dedup worker's read-ahead check costs per pair of posts. A worker that
//! shares the routed partitions compares each waiting head with the undecided posts it has read
//! ahead of the other workers, and nearly every pair is rejected. Here each post of a stream is
//! compared with the next W posts in the file's order (posts close in time, as read ahead), three
//! ways: by the gates alone (`verify::may_accept`, their bound); through `verify::Screen` first,
//! one record at a time, and the gates only for what it lets through; and as `lookahead` compares
//! them, through the screen eight records at a time where the CPU has AVX-512 (one at a time
//! elsewhere, when the last two lines time the same code). Prints, for each, nanoseconds per pair
//! (the median of R repetitions), the pairs compared and how many the gates let through: that
//! count must be the same on every line, and must not change with an optimization.
//!
//! `cargo bench --bench gates -- [POSTS.jsonl] [W] [R]`: by default the dev stream
//! (`../shared/bench/weibo-dev-small/posts.jsonl`, else the project's sample posts), W 256, R 7.

use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::engine::{Analyzed, Analyzer};
use simdedup::input::Decoder;
use simdedup::text::tokenize::{Tokenizer, DEFAULT_STOPWORDS};
use simdedup::verify::{self, Gates, Screen, Screened};

#[path = "posts_arg.rs"]
mod posts_arg;

fn main() {
    let (path, numbers) = posts_arg::posts_and_numbers();
    let window = numbers.first().copied().unwrap_or(256);
    let reps = numbers.get(1).copied().unwrap_or(7).max(1);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));

    let cfg = Config::default();
    let decoder = Decoder::new(&cfg.input);
    let tokenizer = Tokenizer::new(cfg.text.weighting, DEFAULT_STOPWORDS);
    let mut analyzer = Analyzer::new(&tokenizer);
    let mut posts: Vec<Analyzed> = Vec::new();
    // Rejected lines and empty texts are left out: a worker compares neither.
    for post in text
        .lines()
        .filter_map(|l| decoder.decode(l.as_bytes()).ok())
    {
        let mut a = Analyzed::default();
        analyzer.analyze(&post.text, &mut a);
        if !a.chars.is_empty() {
            posts.push(a);
        }
    }
    // What a post read ahead keeps for the gates, as `lookahead` computes it.
    let gates: Vec<Gates> = posts.iter().map(|a| Gates::of(&a.sketch())).collect();

    let records: Vec<Screened> = gates.iter().map(|g| Screened::of(g, &cfg.verify)).collect();
    // The gates alone, as a check compared each pair before the screen; then the screen with
    // the gates behind it, one record at a time, and as `lookahead` compares them now (eight at
    // a time where the CPU has AVX-512). The count let through must agree.
    for (name, screened, by_one) in [
        ("gates", false, false),
        ("screen(one by one)+gates", true, true),
        ("screen+gates", true, false),
    ] {
        let mut times = Vec::with_capacity(reps);
        let (mut pairs, mut through) = (0u64, 0u64);
        for _ in 0..reps {
            (pairs, through) = (0, 0);
            let t0 = Instant::now();
            for (i, a) in posts.iter().enumerate() {
                let sketch = a.sketch();
                let bits = &gates[i].bits;
                let end = (i + 1 + window).min(gates.len());
                pairs += (end - i - 1) as u64;
                let gate = |j: usize| verify::may_accept(&sketch, bits, &gates[j], &cfg.verify);
                if screened {
                    let screen = Screen::new(&sketch, bits, &cfg.verify);
                    let count = |j: usize| {
                        through += u64::from(gate(i + 1 + j));
                        false
                    };
                    if by_one {
                        screen.find_one_by_one(&records[i + 1..end], count);
                    } else {
                        screen.find(&records[i + 1..end], count);
                    }
                } else {
                    through += (i + 1..end).filter(|&j| gate(j)).count() as u64;
                }
            }
            times.push(t0.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "{} posts={} window={window} pairs={pairs} through={through} ({:.3}%) \
             ns_per_pair={:.2} (median of {reps}; fastest {:.2}, slowest {:.2})",
            name,
            posts.len(),
            100.0 * through as f64 / pairs.max(1) as f64,
            median * 1e9 / pairs.max(1) as f64,
            times[0] * 1e9 / pairs.max(1) as f64,
            times[times.len() - 1] * 1e9 / pairs.max(1) as f64,
        );
    }
}
