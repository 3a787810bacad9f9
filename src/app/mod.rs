//! The application edge: command line, configuration, telemetry, metrics and evaluation.

pub mod cli;
pub mod config;
pub mod eval;
pub mod explain;
pub mod generate;
pub mod inspect;
pub mod layers;
pub mod metrics;
pub mod telemetry;
