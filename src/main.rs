//! The `simdedup` binary: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use simdedup::app::{alloc, alloc::HugePages, cli, telemetry};

/// Large blocks on transparent huge pages (see `app::alloc`).
#[global_allocator]
static ALLOC: HugePages = HugePages;

fn main() -> ExitCode {
    // glibc's heaps on huge pages too: the process starts again once with the tunable set.
    alloc::with_malloc_huge_pages();
    let cli = cli::Cli::parse();
    telemetry::init(cli.log_format, &cli.log_level);
    cli::run(cli)
}
