//! How the effective configuration is assembled from its layers: compiled defaults, then TOML
//! files (later files win), then `SIMDEDUP_<SECTION>__<KEY>` environment variables. Command-line
//! flags are applied last by the CLI. Also renders the effective configuration for
//! `simdedup check-config`, with secrets redacted.
//!
//! Every layer is checked on its own before the layers are merged, so an error names the file or
//! the variable it came from, and the key.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use crate::app::config::{Config, ConfigError};

/// Prefix of configuration variables (`SIMDEDUP_INDEX__BLOCKS=5`). Only variables whose name
/// also contains [`ENV_SEPARATOR`] are configuration keys; `SIMDEDUP_BROKERS`, `SIMDEDUP_CONFIG`
/// and the like are flag aliases and are left to the CLI.
pub const ENV_PREFIX: &str = "SIMDEDUP_";
/// Separates the parts of a key path in a variable name.
pub const ENV_SEPARATOR: &str = "__";
/// What `check-config` prints instead of a secret.
pub const REDACTED: &str = "<redacted>";

/// Parts of librdkafka key names whose values are secrets.
const SECRET_PARTS: &[&str] = &[
    "password",
    "secret",
    "passphrase",
    "private.key",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "ssl_key",
];

/// The effective configuration and where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The configuration (before command-line flags).
    pub config: Config,
    /// The files read, in order.
    pub files: Vec<PathBuf>,
    /// The configuration variables applied, sorted by name.
    pub env_vars: Vec<String>,
}

/// One configuration variable, parsed.
#[derive(Debug)]
struct EnvSetting {
    var: String,
    path: Vec<String>,
    value: Value,
}

/// Loads compiled defaults <- `files` (in order) <- the configuration variables in `env`.
/// `env` is passed in (normally `std::env::vars_os()`) so that tests need not touch the process.
pub fn load<I>(files: &[PathBuf], env: I) -> Result<Loaded, ConfigError>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut table = Table::new();
    for path in files {
        merge(&mut table, read_file(path)?);
    }
    let settings = env_settings(env)?;
    for s in &settings {
        set_path(&mut table, &s.path, s.value.clone());
    }
    // Each layer type-checked alone; fields are independent, so the merge does too.
    let config = check(table).map_err(|e| ConfigError::Merged { message: e.named })?;
    Ok(Loaded {
        config,
        files: files.to_vec(),
        env_vars: settings.into_iter().map(|s| s.var).collect(),
    })
}

/// Reads one file and checks it over the compiled defaults.
fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    parse_text(&text).map_err(|message| ConfigError::Parse {
        path: path.into(),
        message,
    })
}

/// Parses TOML text and checks it over the compiled defaults; the error names the key and line.
pub(crate) fn parse_text(text: &str) -> Result<Table, String> {
    let table: Table = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    if let Err(e) = check(table.clone()) {
        // The span-carrying parse reports the same first error with its line.
        let line = match toml::from_str::<Config>(text) {
            Err(t) if t.message() == e.raw => t.span().map(|s| line_of(text, s.start)),
            _ => None,
        };
        return Err(match line {
            Some(n) => format!("{} (line {n})", e.named),
            None => e.named,
        });
    }
    Ok(table)
}

fn line_of(text: &str, byte: usize) -> usize {
    text.as_bytes()[..byte.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// A layer that does not deserialize: toml's message, and the same naming the key.
struct CheckError {
    raw: String,
    named: String,
}

/// Deserializes a table over the compiled defaults. The error names the key:
/// "unknown field `blokcs` in [index], expected one of ..." or "key `index.blocks`: invalid type ...".
fn check(table: Table) -> Result<Config, CheckError> {
    Value::Table(table).try_into::<Config>().map_err(|e| {
        let raw = e.message().to_string();
        let full = e.to_string();
        let path = full
            .trim_end()
            .strip_prefix(raw.as_str())
            .and_then(|rest| rest.trim_start().strip_prefix("in `"))
            .and_then(|rest| rest.strip_suffix('`'))
            .unwrap_or("");
        let named = name_key(&raw, path);
        CheckError { raw, named }
    })
}

fn name_key(message: &str, path: &str) -> String {
    const UNKNOWN: &str = "unknown field `";
    if let Some(rest) = message.strip_prefix(UNKNOWN) {
        if let (Some(end), false) = (rest.find('`'), path.is_empty()) {
            let (field, tail) = rest.split_at(end + 1);
            return format!("{UNKNOWN}{field} in [{path}]{tail}");
        }
        return message.to_string();
    }
    if path.is_empty() {
        message.to_string()
    } else {
        format!("key `{path}`: {message}")
    }
}

/// Later tables win; tables are merged key by key.
fn merge(base: &mut Table, over: Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn set_path(table: &mut Table, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut t = table;
    for p in parents {
        let entry = t
            .entry(p.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        if !entry.is_table() {
            *entry = Value::Table(Table::new());
        }
        let Value::Table(next) = entry else {
            unreachable!("replaced by a table above")
        };
        t = next;
    }
    t.insert(last.clone(), value);
}

/// The configuration variables among `env`, each checked alone over the compiled defaults.
fn env_settings<I>(env: I) -> Result<Vec<EnvSetting>, ConfigError>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut out = Vec::new();
    for (name, value) in env {
        let Some(name) = name.to_str() else { continue };
        let Some(path) = env_path(name) else { continue };
        let err = |message: String| ConfigError::Env {
            var: name.to_string(),
            message,
        };
        let path = path.map_err(err)?;
        let value = value
            .into_string()
            .map_err(|_| err("the value is not valid UTF-8".into()))?;
        let value = env_value(&path, value).map_err(err)?;
        out.push(EnvSetting {
            var: name.to_string(),
            path,
            value,
        });
    }
    // Deterministic when two spellings (case) name the same key: the later name wins.
    out.sort_by(|a, b| a.var.cmp(&b.var));
    Ok(out)
}

/// The key path a variable names: `None` if it is no configuration variable.
fn env_path(name: &str) -> Option<Result<Vec<String>, String>> {
    let head = name.get(..ENV_PREFIX.len())?;
    let rest = &name[ENV_PREFIX.len()..];
    if !head.eq_ignore_ascii_case(ENV_PREFIX) || !rest.contains(ENV_SEPARATOR) {
        return None;
    }
    let parts: Vec<String> = rest
        .split(ENV_SEPARATOR)
        .map(|p| p.to_ascii_lowercase())
        .collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Some(Err(format!(
            "empty key part; write SIMDEDUP_<SECTION>{ENV_SEPARATOR}<KEY>"
        )));
    }
    // librdkafka keys are dotted: SIMDEDUP_KAFKA__CONSUMER__SASL_PASSWORD -> sasl.password.
    if parts.len() >= 3 && parts[0] == "kafka" && (parts[1] == "consumer" || parts[1] == "producer")
    {
        let key = parts[2..].join(".").replace('_', ".");
        return Some(Ok(vec![parts[0].clone(), parts[1].clone(), key]));
    }
    Some(Ok(parts))
}

/// The value as a TOML value if that type-checks at `path` (numbers, booleans), else as a string.
fn env_value(path: &[String], raw: String) -> Result<Value, String> {
    let typed = toml::from_str::<Table>(&format!("v = {raw}"))
        .ok()
        .filter(|t| t.len() == 1)
        .and_then(|mut t| t.remove("v"))
        .filter(|v| !v.is_str());
    let try_value = |v: Value| {
        let mut t = Table::new();
        set_path(&mut t, path, v.clone());
        check(t).map(|_| v).map_err(|e| e.named)
    };
    match typed.map(try_value) {
        Some(Ok(v)) => Ok(v),
        // A typed value that does not fit is reported as such unless the string fits.
        Some(Err(typed_err)) => try_value(Value::String(raw)).map_err(|_| typed_err),
        None => try_value(Value::String(raw)),
    }
}

/// Whether a librdkafka setting holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_PARTS.iter().any(|p| k.contains(p))
}

impl Loaded {
    /// The configuration with every secret librdkafka value replaced by [`REDACTED`].
    pub fn redacted(&self) -> Config {
        let mut c = self.config.clone();
        for map in [&mut c.kafka.consumer, &mut c.kafka.producer] {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k) {
                    *v = REDACTED.to_string();
                }
            }
        }
        c
    }

    /// The effective configuration as TOML, secrets redacted, headed by comments naming the
    /// layers and the pinned librdkafka settings that are overridden.
    pub fn render(&self) -> Result<String, String> {
        let mut out = String::from("# simdedup effective configuration (secrets redacted)\n");
        let files: Vec<String> = self.files.iter().map(|f| f.display().to_string()).collect();
        let list = |v: &[String]| match v.is_empty() {
            true => "(none)".to_string(),
            false => v.join(", "),
        };
        out.push_str(&format!(
            "# layers: compiled defaults <- files {} <- environment {}\n",
            list(&files),
            list(&self.env_vars)
        ));
        out.push_str(
            "# run/replay flags and their variables (SIMDEDUP_BROKERS, ...) apply on top.\n",
        );
        for p in crate::io::kafka::client::pinned_overrides(&self.config.kafka) {
            out.push_str(&format!("# pinned: {p}\n"));
        }
        out.push('\n');
        let body = toml::to_string_pretty(&self.redacted()).map_err(|e| e.to_string())?;
        for line in body.lines() {
            out.push_str(&short_float(line));
            out.push('\n');
        }
        Ok(out)
    }
}

/// `x = 0.8500000238418579` -> `x = 0.85`: the config's floats are `f32`, serialized widened to
/// `f64`; the shortest `f32` text parses back to the same value.
fn short_float(line: &str) -> String {
    if let Some((key, v)) = line.split_once(" = ") {
        if let Ok(x) = v.parse::<f64>() {
            let narrow = x as f32;
            if v.contains('.') && f64::from(narrow) == x {
                return format!("{key} = {narrow:?}");
            }
        }
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn load_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        load(&[], env(vars)).map(|l| l.config)
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn env_sets_nested_keys_with_their_types() {
        let c = load_env(&[
            ("SIMDEDUP_INDEX__BLOCKS", "5"),
            ("simdedup_output__enrich", "true"),
            ("SIMDEDUP_VERIFY__SIM_K", "3"),
            ("SIMDEDUP_TEXT__WEIGHTING", "tfidf"),
            ("SIMDEDUP_KAFKA__GROUP_ID", "123"),
        ])
        .unwrap();
        assert_eq!(c.index.blocks, 5);
        assert!(c.output.enrich);
        assert_eq!(c.verify.sim_k, 3.0);
        assert_eq!(c.text.weighting.as_str(), "tfidf");
        // A string field keeps a numeric-looking value as a string.
        assert_eq!(c.kafka.group_id, "123");
    }

    #[test]
    fn env_fills_librdkafka_maps_with_dotted_keys() {
        let c = load_env(&[
            ("SIMDEDUP_KAFKA__CONSUMER__SASL_PASSWORD", "s3cret"),
            ("SIMDEDUP_KAFKA__CONSUMER__SESSION_TIMEOUT_MS", "45000"),
            ("SIMDEDUP_KAFKA__PRODUCER__SECURITY_PROTOCOL", "SASL_SSL"),
        ])
        .unwrap();
        assert_eq!(c.kafka.consumer["sasl.password"], "s3cret");
        assert_eq!(c.kafka.consumer["session.timeout.ms"], "45000");
        assert_eq!(c.kafka.producer["security.protocol"], "SASL_SSL");
    }

    #[test]
    fn variables_without_separator_are_not_config_keys() {
        let c = load_env(&[
            ("SIMDEDUP_BROKERS", "x:1"),
            ("SIMDEDUP_CONFIG", "/nonexistent.toml"),
            ("SIMDEDUP_LOG", "debug"),
            ("OTHER__KEY", "1"),
        ])
        .unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn env_type_error_names_the_variable_and_key() {
        let e = load_env(&[("SIMDEDUP_INDEX__BLOCKS", "many")]).unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with("environment variable SIMDEDUP_INDEX__BLOCKS:"),
            "{m}"
        );
        assert!(m.contains("index.blocks"), "{m}");
        let e = load_env(&[("SIMDEDUP_INDEX__BLOCKS", "-1")]).unwrap_err();
        assert!(e.to_string().contains("integer `-1`"), "{e}");
    }

    #[test]
    fn unknown_variable_is_named() {
        for var in [
            "SIMDEDUP_INDEX__BLOKCS",
            "SIMDEDUP_NOSUCH__KEY",
            "SIMDEDUP_INDEX__",
            "SIMDEDUP_KAFKA__CONSUMER",
        ] {
            let m = load_env(&[(var, "4")]).unwrap_err().to_string();
            assert!(m.contains(var), "{m}");
        }
        let m = load_env(&[("SIMDEDUP_INDEX__BLOKCS", "4")])
            .unwrap_err()
            .to_string();
        assert!(m.contains("unknown field `blokcs` in [index]"), "{m}");
    }

    #[test]
    fn file_typo_names_file_key_and_line() {
        let f = file("[index]\nblocks = 4\nblokcs = 4\n");
        let m = load(&[f.path().into()], []).unwrap_err().to_string();
        assert!(m.contains(&f.path().display().to_string()), "{m}");
        assert!(m.contains("unknown field `blokcs` in [index]"), "{m}");
        assert!(m.ends_with("(line 3)"), "{m}");
        let f = file("[kafka]\nrouted_partitions = \"eight\"\n");
        let m = load(&[f.path().into()], []).unwrap_err().to_string();
        assert!(
            m.contains("key `kafka.routed_partitions`: invalid type"),
            "{m}"
        );
    }

    #[test]
    fn precedence_is_defaults_files_env_flags() {
        let a = file("[index]\nblocks = 5\nmax_distance = 2\n[kafka]\nbrokers = \"a:1\"\ngroup_id = \"a\"\ninput_topic = \"a\"\n");
        let b = file("[index]\nblocks = 6\n[kafka]\ngroup_id = \"b\"\ninput_topic = \"b\"\n");
        let c = load(
            &[a.path().into(), b.path().into()],
            env(&[("SIMDEDUP_KAFKA__INPUT_TOPIC", "env")]),
        )
        .unwrap()
        .config;
        assert_eq!(c.index.blocks, 6, "later file wins");
        assert_eq!(c.index.max_distance, 2, "files merge key by key");
        assert_eq!(
            c.index.bucket_scan_cap,
            Config::default().index.bucket_scan_cap
        );
        assert_eq!(c.kafka.group_id, "b");
        assert_eq!(c.kafka.input_topic, "env", "env beats files");

        use clap::Parser;
        let args = [
            "simdedup",
            "run",
            "--role",
            "all",
            "--input-topic",
            "flag",
            "--config",
            a.path().to_str().unwrap(),
            "--config",
            b.path().to_str().unwrap(),
        ];
        let crate::app::cli::Command::Run(run) = crate::app::cli::Cli::parse_from(args).command
        else {
            panic!("not a run command")
        };
        let c = crate::app::cmd::run::run_config(
            &run,
            env(&[
                ("SIMDEDUP_KAFKA__INPUT_TOPIC", "env"),
                ("SIMDEDUP_KAFKA__BROKERS", "env:1"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.input_topic, "flag", "flags beat env");
        assert_eq!(c.index.blocks, 6);
        // Unless SIMDEDUP_BROKERS (the --brokers alias) is set in this process.
        if std::env::var_os("SIMDEDUP_BROKERS").is_none() {
            assert_eq!(c.kafka.brokers, "env:1");
        }
    }

    #[test]
    fn secrets_are_redacted_and_pinned_keys_reported() {
        let f = file(
            "[kafka.consumer]\n\"sasl.password\" = \"p\"\n\"sasl.username\" = \"u\"\n\
             \"enable.auto.commit\" = \"false\"\n[kafka.producer]\n\"ssl.key.pem\" = \"k\"\n\
             \"sasl.oauthbearer.config\" = \"c\"\n\"sasl.oauthbearer.client.secret\" = \"s\"\n",
        );
        let l = load(
            &[f.path().into()],
            env(&[("SIMDEDUP_KAFKA__PRODUCER__SSL_KEY_PASSWORD", "hunter2")]),
        )
        .unwrap();
        let r = l.redacted();
        assert_eq!(r.kafka.consumer["sasl.password"], REDACTED);
        assert_eq!(r.kafka.consumer["sasl.username"], "u");
        for k in [
            "ssl.key.pem",
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.client.secret",
            "ssl.key.password",
        ] {
            assert_eq!(r.kafka.producer[k], REDACTED, "{k}");
        }
        let text = l.render().unwrap();
        for secret in ["\"p\"", "\"k\"", "\"c\"", "\"s\"", "hunter2"] {
            assert!(!text.contains(secret), "{secret} leaked:\n{text}");
        }
        assert!(
            text.contains("# pinned: kafka.consumer.\"enable.auto.commit\""),
            "{text}"
        );
        // The rendering is the configuration: it parses back to the redacted one.
        assert_eq!(Config::from_toml(&text).unwrap(), r);
    }

    #[test]
    fn render_of_defaults_parses_back_with_short_floats() {
        let l = load(&[], []).unwrap();
        let text = l.render().unwrap();
        assert!(text.contains("edit_similarity = 0.85\n"), "{text}");
        assert_eq!(Config::from_toml(&text).unwrap(), Config::default());
    }

    #[test]
    fn shipped_local_toml_parses() {
        let text = include_str!("../../config/local.toml");
        let c = Config::from_toml(text).unwrap();
        assert_eq!(c.kafka.input_topic, "local.posts");
        assert!(crate::io::kafka::client::pinned_overrides(&c.kafka).is_empty());
    }

    #[test]
    fn shipped_firehose_toml_layers_over_local_toml() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let files = [dir.join("local.toml"), dir.join("firehose.toml")];
        let c = load(&files, []).unwrap().config;
        assert_eq!(c.kafka.input_topic, "local.posts");
        assert_eq!(c.index.posting_scan_cap, 64);
        assert_eq!(c.window.generation_secs, 12 * 3600);
        assert_eq!(c.window.window_secs, Config::default().window.window_secs);
    }
}
