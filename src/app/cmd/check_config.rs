//! `simdedup check-config`: validates the layered configuration and prints it as TOML.

use crate::app::common::{usage, CmdResult, ConfigArgs, EXIT_FAILURE, EXIT_OK};

pub(crate) const HELP: &str = "Layers, later wins: compiled defaults (= config/default.toml), \
--config files in order, SIMDEDUP_<SECTION>__<KEY> variables (`__` separates the key path; \
in [kafka.consumer]/[kafka.producer] `_` becomes `.`), then the flags of run/replay.

Examples:
  simdedup check-config --config config/local.toml
  SIMDEDUP_INDEX__BLOCKS=5 SIMDEDUP_KAFKA__CONSUMER__SASL_PASSWORD=s3cret \\
      simdedup check-config --config base.toml --config site.toml

Prints the effective configuration as TOML on stdout (secret librdkafka values shown as
\"<redacted>\", pinned librdkafka settings that are overridden listed as comments).
Exit 0 if valid, 2 with the file or variable and the key if not.";

/// Runs `simdedup check-config`.
pub(crate) fn run(a: ConfigArgs) -> CmdResult {
    let loaded = crate::app::layers::load(&a.config, std::env::vars_os())
        .map_err(|e| usage(e.to_string()))?;
    let c = &loaded.config;
    c.stopwords().map_err(|e| usage(e.to_string()))?;
    if c.kafka.routed_partitions == 0 {
        return Err(usage("key `kafka.routed_partitions`: must be at least 1"));
    }
    print!("{}", loaded.render().map_err(|e| (EXIT_FAILURE, e))?);
    Ok(EXIT_OK)
}
