//! Routed-hop benchmark: what the route stage's envelopes cost per post to build (encode and
//! compress, `wire::Envelope`) and to read back, whole as the owner decodes them
//! (`decode_routed_record`, without token words) and as another worker reads them ahead
//! (`decode_sketch_record`). Envelopes are filled as the route stage fills them (64 KB of posts
//! each, the raw record included). A second line does the same with every token's word left out:
//! what no routed format can go below by spelling the tokens more cheaply (for instance as spans
//! of the normalized text), since each token's hash and weight must still travel. Prints
//! microseconds per post (medians of R repetitions) and envelope bytes per post.
//!
//! `cargo bench --bench wire -- [POSTS.jsonl] [R]`: by default the dev stream
//! (`../shared/bench/weibo-dev-small/posts.jsonl`, else the project's sample posts), R 7.

use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::engine::{Analyzed, Analyzer};
use simdedup::input::Decoder;
use simdedup::io::kafka::route::ENVELOPE_MAX_BYTES;
use simdedup::io::kafka::wire::{
    decode_routed_record, decode_sketch_record, encode_routed_into, Envelope, Words,
    ENVELOPE_MAX_POSTS,
};
use simdedup::text::tokenize::{Tokenizer, DEFAULT_STOPWORDS};
use simdedup::types::{EventTime, PostId};

#[path = "posts_arg.rs"]
mod posts_arg;

struct Post {
    id: PostId,
    created_at: Option<EventTime>,
    a: Analyzed,
    raw: Vec<u8>,
}

fn main() {
    let (path, numbers) = posts_arg::posts_and_numbers();
    let reps = numbers.first().copied().unwrap_or(7).max(1);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));

    let cfg = Config::default();
    let decoder = Decoder::new(&cfg.input);
    let tokenizer = Tokenizer::new(cfg.text.weighting, DEFAULT_STOPWORDS);
    let mut analyzer = Analyzer::new(&tokenizer);
    let mut posts = Vec::new();
    for line in text.split(|b| *b == b'\n') {
        let Ok(post) = decoder.decode(line) else {
            continue;
        };
        let mut a = Analyzed::default();
        analyzer.analyze(&post.text, &mut a);
        posts.push(Post {
            id: post.id,
            created_at: post.created_at,
            a,
            raw: line.to_vec(),
        });
    }
    assert!(!posts.is_empty(), "{path}: no posts");
    for words in [true, false] {
        if !words {
            for p in &mut posts {
                p.a.tokens.iter_mut().for_each(|t| t.word.clear());
            }
        }
        let (mut build, mut whole, mut ahead) = (vec![], vec![], vec![]);
        let mut bytes = 0;
        for _ in 0..reps {
            let t0 = Instant::now();
            let envelopes = fill(&posts);
            build.push(t0.elapsed().as_secs_f64());
            bytes = envelopes.iter().map(Vec::len).sum::<usize>();
            let t0 = Instant::now();
            let n: usize = envelopes
                .iter()
                .map(|e| decode_routed_record(e, Words::Skip).expect("decodes").len())
                .sum();
            whole.push(t0.elapsed().as_secs_f64());
            let t0 = Instant::now();
            let m: usize = envelopes
                .iter()
                .map(|e| decode_sketch_record(e).expect("decodes").len())
                .sum();
            ahead.push(t0.elapsed().as_secs_f64());
            assert_eq!((n, m), (posts.len(), posts.len()));
        }
        let us = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2] * 1e6 / posts.len() as f64
        };
        println!(
            "wire posts={} tokens={} build_us={:.3} decode_us={:.3} decode_ahead_us={:.3} \
             bytes_per_post={:.1} (medians of {reps})",
            posts.len(),
            if words { "with words" } else { "without words" },
            us(&mut build),
            us(&mut whole),
            us(&mut ahead),
            bytes as f64 / posts.len() as f64,
        );
    }
}

/// The posts in envelopes, as the route stage fills them (all bound for one partition).
fn fill(posts: &[Post]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut env = Envelope::default();
    let mut rec = Vec::with_capacity(1024);
    for p in posts {
        encode_routed_into(&mut rec, &p.id, p.created_at, Some(0), &p.a, &p.raw);
        env.push(&rec);
        // Full as the route stage's `Outgoing::full` has it.
        if env.len() >= ENVELOPE_MAX_POSTS || env.bytes() >= ENVELOPE_MAX_BYTES {
            out.push(env.take());
        }
    }
    if !env.is_empty() {
        out.push(env.take());
    }
    out
}
