//! The `simdedup` binary: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use simdedup::app::{cli, telemetry};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    telemetry::init(cli.log_format, &cli.log_level);
    cli::run(cli)
}
