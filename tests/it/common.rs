//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built binary.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simdedup"))
}

/// A fixture under tests/data.
pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Reads a JSON-lines file into values.
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("output file is UTF-8");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("output line is JSON"))
        .collect()
}

/// The well-formed posts of the shipped sample (its last lines are deliberately broken).
pub fn sample_posts() -> Vec<serde_json::Value> {
    let bytes = std::fs::read(data("sample_posts.jsonl")).expect("sample exists");
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["id"].as_str().is_some_and(|s| s.starts_with('p')) && v["text"].is_string())
        .collect()
}

/// Output paths of one run in `dir`.
pub struct Outs {
    pub unique: PathBuf,
    pub dups: PathBuf,
    pub rejected: PathBuf,
}

impl Outs {
    pub fn in_dir(dir: &Path, tag: &str) -> Outs {
        Outs {
            unique: dir.join(format!("{tag}-unique.jsonl")),
            dups: dir.join(format!("{tag}-dups.jsonl")),
            rejected: dir.join(format!("{tag}-rejected.jsonl")),
        }
    }

    pub fn command(&self, input: &Path, state: Option<&Path>) -> Command {
        let mut c = bin();
        c.arg("dedup")
            .arg("--input")
            .arg(input)
            .arg("--unique-out")
            .arg(&self.unique)
            .arg("--duplicates-out")
            .arg(&self.dups)
            .arg("--rejected-out")
            .arg(&self.rejected);
        if let Some(s) = state {
            c.arg("--state-dir").arg(s);
        }
        c
    }
}

/// Runs a command and insists it succeeded.
pub fn run_ok(mut c: Command) -> Output {
    let out = c.output().expect("spawn simdedup");
    assert!(
        out.status.success(),
        "simdedup failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A stream of `rounds` x 23 posts built from the sample: each round re-posts the sample's texts
/// under new ids, 10 minutes later, with a round number that makes every third post new.
pub fn write_stream(path: &Path, rounds: usize) {
    use std::io::Write;
    let posts = sample_posts();
    assert!(posts.len() > 20);
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for r in 0..rounds {
        for (i, p) in posts.iter().enumerate() {
            let text = p["text"].as_str().unwrap();
            let text = if i % 3 == 0 {
                format!("{text} 第{}轮", r % 97)
            } else {
                text.to_string()
            };
            let t = 1_700_000_000 + (r as i64) * 600 + i as i64;
            let id = format!("r{r}-{}", p["id"].as_str().unwrap());
            writeln!(
                f,
                "{}",
                serde_json::json!({"id": id, "text": text, "created_at": t})
            )
            .unwrap();
        }
    }
}

/// A temporary directory for a test that is kept, and named on stderr, if the test fails: the
/// workers' logs in it are what explains a failure seen only on a CI machine. (Only the broker
/// tests use it.)
#[cfg(feature = "broker-tests")]
pub struct KeptOnFailure(tempfile::TempDir);

#[cfg(feature = "broker-tests")]
pub fn kept_on_failure() -> KeptOnFailure {
    KeptOnFailure(tempfile::tempdir().unwrap())
}

#[cfg(feature = "broker-tests")]
impl KeptOnFailure {
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(feature = "broker-tests")]
impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!(
                "test failed: its files are kept in {}",
                self.0.path().display()
            );
        }
    }
}

/// Waits until `log` (a child's stderr file) has a line containing `needle`; returns that line.
pub fn wait_for_log(log: &Path, needle: &str, limit: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(needle)) {
            return l.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no `{needle}` in the log within {limit:?}:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The metrics endpoint a child announced in its log (`metrics listening address=HOST:PORT`).
pub fn metrics_address(log: &Path) -> String {
    let line = wait_for_log(log, "metrics listening", std::time::Duration::from_secs(30));
    // Text logs say `address=HOST:PORT`, JSON logs `"address":"HOST:PORT"`.
    let at = ["address=", "\"address\":\""]
        .iter()
        .find_map(|k| line.find(k).map(|i| i + k.len()))
        .expect("address field");
    line[at..]
        .split(|c: char| c.is_whitespace() || c == '"' || c == ',')
        .next()
        .unwrap()
        .to_string()
}

/// `GET path` over plain TCP: (status code, body).
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(address).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("HTTP status line");
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

/// The value of the sample `series` (name with labels, exactly as exposed), if present.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The sum of every sample of a labelled family, e.g. `simdedup_posts_rejected_total`.
pub fn family_sum(exposition: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    exposition
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Sends SIGTERM to a child.
pub fn terminate(c: &std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
}

/// `n` posts from `first` on, 12 s apart, of distinct texts (random CJK characters), every fifth
/// one from `first + 5` on a light edit of post `echo(i)`.
pub fn varied_posts(path: &Path, first: usize, n: usize, echo: impl Fn(usize) -> usize) {
    let text = |i: usize| -> String {
        let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (0..20 + i % 40)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from_u32(0x4E00 + (x % 2000) as u32).unwrap()
            })
            .collect()
    };
    let mut out = String::new();
    for i in first..first + n {
        let body = if i >= first + 5 && i % 5 == 0 {
            format!("{}了", text(echo(i)))
        } else {
            text(i)
        };
        let t = 1_700_000_000 + 12 * i as i64;
        let post = serde_json::json!({"id": format!("v{i}"), "text": body, "created_at": t});
        out.push_str(&format!("{post}\n"));
    }
    std::fs::write(path, out).unwrap();
}
