//! The application edge: command line, configuration, telemetry and evaluation.

pub mod cli;
pub mod config;
pub mod eval;
pub mod generate;
pub mod telemetry;
