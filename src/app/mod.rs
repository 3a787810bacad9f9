//! The application edge: command line, configuration, telemetry, metrics and evaluation.

pub mod cli;
pub mod config;
pub mod eval;
pub mod layers;
pub mod explain;
pub mod inspect;
pub mod metrics;
pub mod generate;
pub mod telemetry;
