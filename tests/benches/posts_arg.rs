//! The arguments the post-stream benchmarks share (`gates`, `wire`): an optional path to a
//! JSON-lines file of posts, by default the dev stream (else the project's sample posts, so the
//! benchmark runs without `../shared`), and numbers.

const DEV_STREAM: &str = "../shared/bench/weibo-dev-small/posts.jsonl";
const SAMPLE: &str = "tests/data/sample_posts.jsonl";

/// The posts file given (the first argument ending in `.jsonl`), or the default, and the
/// numeric arguments in order. `cargo bench` adds `--bench`, which is left out.
pub fn posts_and_numbers() -> (String, Vec<usize>) {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let path = args
        .iter()
        .find(|a| a.ends_with(".jsonl"))
        .cloned()
        .unwrap_or_else(|| {
            let dev = std::path::Path::new(DEV_STREAM);
            (if dev.exists() { DEV_STREAM } else { SAMPLE }).to_string()
        });
    let numbers = args.iter().filter_map(|a| a.parse().ok()).collect();
    (path, numbers)
}
