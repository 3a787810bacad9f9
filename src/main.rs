//! The `simdedup` binary: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use simdedup::app::{alloc::HugePages, cli, telemetry};

/// mimalloc, with large blocks on transparent huge pages (see `app::alloc`).
#[global_allocator]
static ALLOC: HugePages = HugePages;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    telemetry::init(cli.log_format, &cli.log_level);
    cli::run(cli)
}
