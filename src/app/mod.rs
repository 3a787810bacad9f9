//! The application edge: command line, configuration, telemetry, the metrics endpoint,
//! evaluation and the load generator.

pub mod alloc;
pub mod cli;
pub mod cmd;
pub mod common;
pub mod config;
pub mod eval;
pub mod generate;
pub mod layers;
pub mod metrics;
pub mod telemetry;
pub mod view;
