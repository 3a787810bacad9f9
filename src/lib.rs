//! simdedup: a near-duplicate filter for Chinese microblog firehoses.
//!
//! Data flow: `input` (decode) -> `text` (normalize, tokenize) -> `fingerprint` -> `index`
//! (block tables, bigram index, generations) -> `verify` -> `engine` (the per-post decision) ->
//! `io` (file pipeline, outputs) -> `state` (sled) -> `app` (cli, config, eval).

pub mod app;
pub mod engine;
pub mod fingerprint;
pub mod index;
pub mod input;
pub mod io;
pub mod routing;
pub mod state;
pub mod text;
pub mod types;
pub mod verify;
pub mod window;
