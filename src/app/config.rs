//! Configuration: the sections and their compiled defaults. The layers over them (TOML files,
//! `SIMDEDUP_<SECTION>__<KEY>` variables) are assembled in `app::layers`, command-line flags by
//! the CLI. Unknown keys are errors that name the key and the file or variable. Sections owned
//! by a lower layer are defined there (`[output]` in `io::config`, `[state]` in `state`,
//! `[kafka]` in `io::kafka`, the core's in their modules); this file assembles them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::engine::{EmptyPolicy, EngineConfig};
use crate::index::IndexConfig;
use crate::input::InputConfig;
use crate::io::config::{OutputConfig, StageConfig};
use crate::io::kafka::KafkaConfig;
use crate::routing::RoutingConfig;
use crate::state::StateConfig;
use crate::text::tokenize::Weighting;
use crate::verify::VerifyConfig;
use crate::window::WindowConfig;

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// How input lines are decoded.
    pub input: InputConfig,
    /// Normalization and segmentation.
    pub text: TextConfig,
    /// SimHash block tables and the bigram index.
    pub index: IndexConfig,
    /// Verification thresholds.
    pub verify: VerifyConfig,
    /// Sliding window.
    pub window: WindowConfig,
    /// Durable state.
    pub state: StateConfig,
    /// Output records.
    pub output: OutputConfig,
    /// Similarity routing between partitions (Kafka topology).
    pub routing: RoutingConfig,
    /// Kafka topology: brokers, group, topics, librdkafka pass-through settings.
    pub kafka: KafkaConfig,
    /// Prometheus `/metrics` and `/health` endpoint.
    pub metrics: MetricsConfig,
}

/// The `[metrics]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `host:port` of the HTTP endpoint serving `/metrics` and `/health` for `simdedup run`
    /// (also `--metrics-addr` / `SIMDEDUP_METRICS_ADDR`); port 0 picks a free port, `"off"`
    /// disables it. `dedup` and `replay` serve metrics only when given `--metrics-addr`.
    pub address: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            address: "127.0.0.1:9464".to_string(),
        }
    }
}

/// The `[text]` section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TextConfig {
    /// Token weighting: `tf`, `tfidf` (jieba's IDF) or `tfidf_len` (IDF times word-length factor).
    pub weighting: Weighting,
    /// Stopword file (one word per line, `#` comments). Empty: the list shipped in
    /// `config/stopwords.txt`, compiled into the binary.
    pub stopwords_file: String,
    /// Posts whose text normalizes to nothing: `pass` (unique, marked empty) or `reject`.
    pub empty_posts: EmptyPolicy,
}

impl Default for TextConfig {
    fn default() -> Self {
        TextConfig {
            weighting: Weighting::Tf,
            stopwords_file: String::new(),
            empty_posts: EmptyPolicy::Pass,
        }
    }
}

/// Configuration loading errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown key or a bad value.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The TOML error, which names the key.
        message: String,
    },
    /// A configuration variable names no key or has a bad value.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable.
        var: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// The layers, each valid alone, do not deserialize together.
    #[error("configuration: {message}")]
    Merged {
        /// The error, naming the key.
        message: String,
    },
    /// The stopword file could not be read.
    #[error("cannot read stopwords file {path}: {source}")]
    Stopwords {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl Config {
    /// Parses TOML text over the compiled defaults; the error names the key and line.
    #[cfg(test)]
    pub(crate) fn from_toml(text: &str) -> Result<Config, String> {
        let table = crate::app::layers::parse_text(text)?;
        toml::Value::Table(table)
            .try_into()
            .map_err(|e| e.to_string())
    }

    /// The engine's part.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            index: self.index.clone(),
            verify: self.verify.clone(),
            window: self.window.clone(),
            empty_posts: self.text.empty_posts,
            visibility: self.kafka.visibility(),
        }
    }

    /// The sections the io stages read.
    pub fn stages(&self) -> StageConfig {
        StageConfig {
            input: self.input.clone(),
            engine: self.engine(),
            output: self.output.clone(),
            state: self.state.clone(),
            routing: self.routing.clone(),
        }
    }

    /// The stopword list text (the shipped one unless a file is configured).
    pub fn stopwords(&self) -> Result<String, ConfigError> {
        if self.text.stopwords_file.is_empty() {
            return Ok(crate::text::tokenize::DEFAULT_STOPWORDS.to_string());
        }
        let path = PathBuf::from(&self.text.stopwords_file);
        std::fs::read_to_string(&path).map_err(|source| ConfigError::Stopwords { path, source })
    }

    /// An identifier of every setting that changes stored fingerprints or token hashes; a state
    /// dir built under another one cannot be reused.
    pub fn analysis_id(&self) -> Result<String, ConfigError> {
        let stop = self.stopwords()?;
        let h = xxhash_rust::xxh3::xxh3_64(stop.as_bytes());
        Ok(format!(
            "entry{}-seed{:x}-{}-stop{:016x}",
            crate::index::entry::ANALYSIS_FORMAT,
            crate::text::tokenize::TOKEN_HASH_SEED,
            self.text.weighting.as_str(),
            h
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_default_toml_equals_compiled_defaults() {
        let text = include_str!("../../config/default.toml");
        let parsed = Config::from_toml(text).unwrap();
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn unknown_key_is_named() {
        let err = Config::from_toml("[index]\nblokcs = 4\n").unwrap_err();
        assert!(err.contains("blokcs"), "{err}");
    }
}
