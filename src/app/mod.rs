//! The application edge: command line, configuration, telemetry and evaluation.

pub mod cli;
pub mod config;
pub mod eval;
pub mod layers;
pub mod explain;
pub mod inspect;
pub mod telemetry;
