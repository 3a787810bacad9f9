//! The labelled dev stream: decoded the way the file pipeline decodes it, re-timed into a span of
//! the window (order kept, gaps capped), and the verdicts of its posts written in the record
//! shapes `score.py` reads.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use simdedup::input::Decoder;
use simdedup::types::PostId;

/// One dev post.
pub struct DevPost {
    /// Id.
    pub id: PostId,
    /// Raw text.
    pub text: String,
    /// Event time after re-timing (unix seconds).
    pub time: i64,
    /// Poster, kept for the re-timed copy.
    pub user: Option<String>,
}

/// The decoded dev stream.
pub struct DevStream {
    /// Posts in stream order.
    pub posts: Vec<DevPost>,
    /// Lines the decoder rejected (they are in neither output, as in the file pipeline).
    pub rejected: u64,
    /// Event ids the stream was built from (`summary.json`).
    pub events: HashSet<String>,
}

impl DevStream {
    /// Reads `dir/posts.jsonl` and `dir/summary.json`.
    pub fn load(dir: &Path, decoder: &Decoder) -> std::io::Result<DevStream> {
        let file = std::fs::File::open(dir.join("posts.jsonl"))?;
        let mut posts = Vec::new();
        let mut rejected = 0;
        let mut last = 0;
        for line in BufReader::new(file).split(b'\n') {
            let line = line?;
            match decoder.decode(&line) {
                Ok(d) => {
                    let time = d.created_at.map_or(last, |t| t.0);
                    last = time;
                    posts.push(DevPost {
                        id: d.id,
                        text: d.text,
                        time,
                        user: d.user,
                    });
                }
                Err(_) => rejected += 1,
            }
        }
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("summary.json"))?)?;
        let events = summary["events"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(DevStream {
            posts,
            rejected,
            events,
        })
    }

    /// Moves the stream into `[start, start + span_secs]`, keeping stream order: every gap
    /// between consecutive posts is capped at `cap_secs` (the original stream spans years of
    /// events), then the capped timeline is scaled linearly onto the span.
    pub fn retime(&mut self, start: i64, span_secs: i64, cap_secs: i64) {
        let mut capped = Vec::with_capacity(self.posts.len());
        let mut acc = 0i64;
        let mut prev = self.posts.first().map_or(0, |p| p.time);
        for p in &self.posts {
            acc += (p.time - prev).clamp(0, cap_secs);
            prev = p.time;
            capped.push(acc);
        }
        let scale = if acc > 0 {
            span_secs as f64 / acc as f64
        } else {
            0.0
        };
        for (p, c) in self.posts.iter_mut().zip(capped) {
            p.time = start + (c as f64 * scale) as i64;
        }
    }

    /// Writes the re-timed stream (id, text, created_at, user) for the dev-only baseline run.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut w = BufWriter::new(std::fs::File::create(path)?);
        for p in &self.posts {
            let rec = serde_json::json!({
                "id": p.id.0, "text": p.text, "created_at": p.time, "user": p.user,
            });
            serde_json::to_writer(&mut w, &rec)?;
            w.write_all(b"\n")?;
        }
        w.flush()
    }
}

/// Output files of the dev posts' verdicts.
pub struct DevOutputs {
    unique: BufWriter<std::fs::File>,
    duplicates: BufWriter<std::fs::File>,
    to_background: BufWriter<std::fs::File>,
}

impl DevOutputs {
    /// Creates `unique.jsonl`, `duplicates.jsonl` and `to-background.jsonl` in `dir`.
    pub fn create(dir: &Path) -> std::io::Result<DevOutputs> {
        let f = |n: &str| std::fs::File::create(dir.join(n)).map(BufWriter::new);
        Ok(DevOutputs {
            unique: f("unique.jsonl")?,
            duplicates: f("duplicates.jsonl")?,
            to_background: f("to-background.jsonl")?,
        })
    }

    /// A unique dev post.
    pub fn unique(&mut self, id: &PostId) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.unique, &serde_json::json!({ "id": id.0 }))?;
        self.unique.write_all(b"\n")
    }

    /// A duplicate dev post.
    pub fn duplicate(&mut self, id: &PostId, cluster: &PostId) -> std::io::Result<()> {
        let rec = serde_json::json!({ "post_id": id.0, "cluster_id": cluster.0 });
        serde_json::to_writer(&mut self.duplicates, &rec)?;
        self.duplicates.write_all(b"\n")
    }

    /// A dev post whose cluster is a background post.
    pub fn matched_background(&mut self, rec: &serde_json::Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.to_background, rec)?;
        self.to_background.write_all(b"\n")
    }

    /// Flushes all three files.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.unique.flush()?;
        self.duplicates.flush()?;
        self.to_background.flush()
    }
}
