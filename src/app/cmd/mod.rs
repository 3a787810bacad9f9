//! One module per subcommand: its options (clap), its `--help` epilogue and its `run`. Shared
//! pieces come from `app::common`; no command imports another.

pub mod check_config;
pub mod dedup;
pub mod eval;
pub mod explain;
pub mod generate;
pub mod inspect;
pub mod mock_broker;
pub mod replay;
pub mod run;
pub mod topics;
