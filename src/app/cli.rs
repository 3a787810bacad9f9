//! Command-line interface: the clap definitions of the top level and the dispatch to the
//! commands (`app::cmd`, one module each).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::app::cmd;
use crate::app::common::ConfigArgs;
pub use crate::app::telemetry::LogFormat;

/// Near-duplicate filter for Chinese microblog firehoses.
///
/// Normalizes Weibo-style posts (repost chains, @mentions, links, [emoticons], emoji, full-width
/// characters), segments them with jieba, fingerprints them with a 64-bit SimHash and checks an
/// event-time sliding window of earlier unique posts: SimHash block tables plus a character-bigram
/// index for short posts, every candidate verified. Unique posts, duplicate-cluster events and
/// rejected records go to three outputs.
#[derive(Debug, Parser)]
#[command(name = "simdedup", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SIMDEDUP_LOG_FORMAT", help_heading = LOG_HEADING)]
    pub log_format: LogFormat,
    /// Log filter (tracing-subscriber syntax, e.g. `info` or `simdedup=debug`).
    #[arg(long, global = true, default_value = "info", env = "SIMDEDUP_LOG", help_heading = LOG_HEADING)]
    pub log_level: String,
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The `--help` heading of the global logging flags, apart from each command's own options.
const LOG_HEADING: &str = "Logging (every command)";

const EXIT_CODES: &str = "Exit codes: 0 done (`run`, `passthrough`: stopped by SIGINT/SIGTERM after \
draining); 1 runtime failure (I/O, Kafka, state store; outputs consistent up to the last checkpoint \
or committed offset), or a `run`/`passthrough` shutdown that overran `kafka.shutdown_timeout_ms` \
by 2 s (an unreachable broker); 2 usage or configuration error; 3 `dedup` refused: the state dir \
already completed a run of this input file (new --state-dir to start fresh, --no-resume to decide it \
again); 130 `dedup` interrupted by a signal after a \
clean checkpoint (rerun the same command to resume), or a second signal to `dedup`, `run` or \
`passthrough`, which exits at once. The other commands have no drain: a signal ends them as it \
ends any program. Each command's --help has the details.";

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Deduplicate a JSON-lines file or stdin, in one process (no Kafka).
    #[command(after_help = cmd::dedup::EXAMPLES)]
    Dedup(cmd::dedup::DedupArgs),
    /// Run the Kafka stream processor (stage route, dedup, or both in one process).
    #[command(after_help = cmd::run::EXAMPLES)]
    Run(cmd::run::RunArgs),
    /// Backfill: decide a range of the raw topic into separate output topics, with fresh state.
    #[command(after_help = cmd::replay::EXAMPLES)]
    Replay(cmd::replay::ReplayArgs),
    /// Produce the lines of a JSON-lines file or stdin to a topic (to feed a raw topic).
    #[command(after_help = cmd::topics::PRODUCE_HELP)]
    Produce(cmd::topics::ProduceArgs),
    /// Write all records of a topic to a JSON-lines file (up to its end at start, then until --idle-ms without records).
    #[command(after_help = cmd::topics::EXPORT_HELP)]
    Export(cmd::topics::ExportArgs),
    /// Throughput baseline: copy a topic to another unchanged, with the stages' built-in client
    /// settings.
    #[command(after_help = cmd::topics::PASSTHROUGH_HELP)]
    Passthrough(cmd::topics::PassthroughArgs),
    /// Score the engine on a labelled stream (truth.jsonl as in the benchmark).
    #[command(after_help = cmd::eval::EXAMPLES)]
    Eval(cmd::eval::EvalArgs),
    /// Check the configuration and print it as TOML, secrets redacted (exit 2 if invalid).
    #[command(after_help = cmd::check_config::HELP)]
    CheckConfig(ConfigArgs),
    /// Look into a state dir, read-only: window, entry counts, bucket sizes, or `query TEXT`.
    #[command(after_help = cmd::inspect::HELP)]
    Inspect(cmd::inspect::InspectArgs),
    /// Show why post B is or is not a duplicate of post A, step by step.
    #[command(after_help = cmd::explain::HELP)]
    Explain(cmd::explain::ExplainArgs),
    /// Load generator: Weibo-style posts with a duplicate mix, to a file, stdout or a topic.
    #[command(after_help = cmd::generate::EXAMPLES)]
    Generate(cmd::generate::GenerateArgs),
    /// An in-memory Kafka-protocol broker (librdkafka's mock cluster) for tests and benchmarks.
    #[command(after_help = cmd::mock_broker::HELP)]
    MockBroker(cmd::mock_broker::MockBrokerArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Dedup(a) => cmd::dedup::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Produce(a) => cmd::topics::produce(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Export(a) => cmd::topics::export(a),
        Command::Passthrough(a) => cmd::topics::passthrough(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::CheckConfig(a) => cmd::check_config::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::MockBroker(a) => cmd::mock_broker::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err((code, msg)) => {
            eprintln!("simdedup: error: {msg}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::common::{
        EXIT_ALREADY_DONE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE,
    };
    use clap::CommandFactory;

    /// Every subcommand, nested ones too, shows at least one example in its --help.
    #[test]
    fn every_subcommand_help_has_an_example() {
        fn walk(cmd: &mut clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands_mut().filter(|s| s.get_name() != "help") {
                let name = format!("{path} {}", sub.get_name());
                if !sub.render_long_help().to_string().contains("Example") {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        let mut cmd = Cli::command();
        cmd.build();
        walk(&mut cmd, "simdedup", &mut missing);
        assert!(missing.is_empty(), "no example in --help of: {missing:?}");
    }

    /// The exit codes the help promises are the ones the code returns.
    #[test]
    fn help_exit_codes_are_the_constants() {
        for (code, text) in [
            (EXIT_OK, "0 done"),
            (EXIT_FAILURE, "1 runtime failure"),
            (EXIT_USAGE, "2 usage"),
            (EXIT_ALREADY_DONE, "3 `dedup` refused"),
            (EXIT_INTERRUPTED, "130 `dedup` interrupted"),
        ] {
            assert!(
                EXIT_CODES.contains(text) && text.starts_with(&format!("{code} ")),
                "{text}"
            );
        }
    }

    /// A command's --help lists its own options first and the global logging flags under their
    /// own heading after them.
    #[test]
    fn global_log_flags_have_their_own_heading() {
        let mut cmd = Cli::command();
        cmd.build();
        for name in ["dedup", "run", "eval"] {
            let sub = cmd.find_subcommand_mut(name).unwrap();
            let help = sub.render_help().to_string();
            let heading = help.find(LOG_HEADING).expect("log heading");
            assert!(
                help.find("--log-level").unwrap() > heading,
                "{name}: {help}"
            );
            assert!(help.find("--config").unwrap() < heading, "{name}: {help}");
        }
    }

    /// `run --state-dir` is the dedup stage's local state.
    #[test]
    fn run_takes_a_state_dir() {
        let args = ["simdedup", "run", "--role", "all", "--state-dir", "x"];
        let Ok(Cli {
            command: Command::Run(r),
            ..
        }) = Cli::try_parse_from(args)
        else {
            panic!("run --state-dir does not parse");
        };
        assert_eq!(r.state_dir.as_deref(), Some(std::path::Path::new("x")));
    }
}
