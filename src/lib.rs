//! simdedup: a near-duplicate filter for Chinese microblog firehoses.
//!
//! Data flow: `input` (decode) -> `text` (normalize, tokenize) -> `fingerprint` -> `index`
//! (block tables, bigram index, generations) -> `verify` -> `engine` (the per-post decision) ->
//! `io` (file pipeline, outputs) -> `state` (sled) -> `app` (cli, config, eval, telemetry,
//! metrics endpoint). `hist` holds the plain histograms the core counts into, `metrics` the
//! registry `io` counts into, `clock` the wall clock.

pub mod app;
pub mod clock;
pub mod engine;
pub mod fingerprint;
pub mod hist;
pub mod index;
pub mod input;
pub mod io;
pub mod metrics;
pub mod routing;
pub mod state;
pub mod text;
pub mod types;
pub mod verify;
pub mod window;
