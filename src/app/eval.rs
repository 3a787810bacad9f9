//! `simdedup eval`: runs the engine over a labelled stream in memory and scores the verdicts with
//! the rules of the benchmark's `score.py` (precision, recall per kind, F1, lost posts).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::app::config::Config;
use crate::engine::{Analyzed, Engine, Position, Verdict};
use crate::io::process::{Emitted, Processor, Sink};
use crate::io::steps::{Admission, PostRouter};
use crate::text::tokenize::Tokenizer;

#[derive(Deserialize)]
struct TruthRow {
    id: String,
    cluster: String,
    label: String,
    kind: String,
}

/// The score report.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Report {
    /// Posts in the truth.
    pub posts: usize,
    /// Truth posts in neither output.
    pub lost: usize,
    /// Posts output more than once.
    pub duplicated_outputs: usize,
    /// Posts labelled unique or dup.
    pub scored_posts: usize,
    /// Truth duplicates.
    pub truth_dup: usize,
    /// Scored posts flagged as duplicates.
    pub predicted_dup: usize,
    /// Correct duplicate flags (same truth cluster, earlier post).
    pub true_positives: usize,
    /// Wrong duplicate flags.
    pub false_positives: usize,
    /// true_positives / predicted_dup.
    pub precision: f64,
    /// Correct flags among truth duplicates / truth duplicates.
    pub recall: f64,
    /// Harmonic mean.
    pub f1: f64,
    /// Recall per kind.
    pub recall_by_kind: BTreeMap<String, f64>,
    /// Truth duplicates per kind.
    pub truth_dup_by_kind: BTreeMap<String, usize>,
    /// Scored lcqmc_neg posts.
    pub lcqmc_neg_posts_scored: usize,
    /// Of those, flagged as duplicates.
    pub lcqmc_neg_fp: usize,
    /// Correct and wrong duplicate flags per verification method.
    pub by_method: BTreeMap<String, [usize; 2]>,
    /// Candidates verified, over all posts.
    pub candidates: u64,
    /// Candidates verification rejected.
    pub verify_rejects: u64,
    /// SimHash bucket scans cut at `bucket_scan_cap`.
    pub bucket_scans_capped: u64,
    /// Bigram posting scans cut at `posting_scan_cap`.
    pub posting_scans_capped: u64,
    /// Records per second of the engine run (decode to verdict, in memory).
    pub posts_per_sec: f64,
}

/// Errors of `eval`.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A truth line is malformed.
    #[error("{path}:{line}: {message}")]
    Truth {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
}

/// Replays `posts` through `partitions` partitions as the Kafka topology would route them: each
/// post is decided by the engine of its primary partition and registered (decided silently) in
/// its replica partitions. Returns the score and the replication factor (engine calls per post).
pub fn evaluate_partitioned(
    posts: &Path,
    truth: &Path,
    cfg: &Config,
    tokenizer: &Tokenizer,
    partitions: u32,
) -> Result<(Report, f64), EvalError> {
    let truth_rows = read_truth(truth)?;
    let mut router = PostRouter::new(tokenizer, partitions, &cfg.routing);
    let mut engines = Vec::new();
    for _ in 0..router.partitions() {
        engines.push(Engine::new(&cfg.engine()).map_err(|e| EvalError::Config(e.to_string()))?);
    }
    let admission = Admission::new(&cfg.stages());
    let mut a = Analyzed::default();
    let io = |source| EvalError::Io {
        path: posts.display().to_string(),
        source,
    };
    let reader =
        std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(posts).map_err(io)?);
    let (mut pred_unique, mut pred_dup, mut seen) =
        (HashSet::new(), HashMap::new(), HashMap::new());
    let (mut calls, mut n) = (0u64, 0u64);
    let started = std::time::Instant::now();
    for line in reader.split(b'\n') {
        let line = line.map_err(io)?;
        n += 1;
        let Ok(post) = admission.admit(&line) else {
            continue;
        };
        let route = router.analyze_with_replicas(&post.text, &mut a);
        let (primary, replicas) = (route.primary as usize, route.replicas);
        let at = Position::new(primary as u32, n);
        let verdict = engines[primary].decide(at, &post.id, post.created_at, &a);
        calls += 1 + replicas.len() as u64;
        for r in replicas {
            // A registration is decided like a post of that partition, so it indexes only if new there.
            engines[r as usize].decide(Position::new(r, n), &post.id, post.created_at, &a);
        }
        *seen.entry(post.id.0.clone()).or_insert(0u32) += 1;
        match verdict {
            Verdict::Unique { .. } => {
                pred_unique.insert(post.id.0);
            }
            Verdict::Duplicate(d) => {
                pred_dup
                    .entry(post.id.0)
                    .or_insert((d.cluster.0, d.matched_by.method.as_str()));
            }
            Verdict::Rejected(_) => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let mut report = score(&truth_rows, &pred_unique, &pred_dup, &seen);
    report.posts_per_sec = if secs > 0.0 { n as f64 / secs } else { 0.0 };
    Ok((report, calls as f64 / n.max(1) as f64))
}

/// Runs the engine over `posts` (fresh in-memory state) and scores it against `truth`.
pub fn evaluate(
    posts: &Path,
    truth: &Path,
    cfg: &Config,
    tokenizer: &Tokenizer,
) -> Result<Report, EvalError> {
    let truth_rows = read_truth(truth)?;
    let engine = Engine::new(&cfg.engine()).map_err(|e| EvalError::Config(e.to_string()))?;
    let mut proc = Processor::new(&cfg.stages(), tokenizer, engine);
    let io = |source| EvalError::Io {
        path: posts.display().to_string(),
        source,
    };
    let reader =
        std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(posts).map_err(io)?);
    let mut pred_unique: HashSet<String> = HashSet::new();
    let mut pred_dup: HashMap<String, (String, &'static str)> = HashMap::new();
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut emitted = Emitted::default();
    let started = std::time::Instant::now();
    let mut n = 0u64;
    for line in reader.split(b'\n') {
        let line = line.map_err(io)?;
        proc.process(&line, n, n + 1, &mut emitted);
        n += 1;
        let Some(id) = emitted.id.as_ref().map(|i| i.0.clone()) else {
            continue;
        };
        *seen.entry(id.clone()).or_default() += 1;
        match emitted.sink {
            Sink::Unique => {
                pred_unique.insert(id);
            }
            Sink::Duplicate => {
                let c = emitted
                    .cluster
                    .as_ref()
                    .map(|c| c.0.clone())
                    .unwrap_or_default();
                let m = emitted.method.map_or("unknown", |m| m.as_str());
                pred_dup.entry(id).or_insert((c, m));
            }
            Sink::Rejected => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let mut report = score(&truth_rows, &pred_unique, &pred_dup, &seen);
    report.posts_per_sec = if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let q = proc.engine().stats().query;
    report.candidates = q.candidates;
    report.verify_rejects = q.verify_rejects;
    report.bucket_scans_capped = q.bucket_scans_capped;
    report.posting_scans_capped = q.posting_scans_capped;
    Ok(report)
}

fn read_truth(path: &Path) -> Result<Vec<TruthRow>, EvalError> {
    let p = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| EvalError::Io {
        path: p.clone(),
        source,
    })?;
    let mut rows = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| EvalError::Io {
            path: p.clone(),
            source,
        })?;
        if line.trim().is_empty() {
            continue;
        }
        let row: TruthRow = serde_json::from_str(&line).map_err(|e| EvalError::Truth {
            path: p.clone(),
            line: i + 1,
            message: e.to_string(),
        })?;
        rows.push(row);
    }
    Ok(rows)
}

fn score(
    truth: &[TruthRow],
    pred_unique: &HashSet<String>,
    pred_dup: &HashMap<String, (String, &'static str)>,
    seen: &HashMap<String, u32>,
) -> Report {
    let pos: HashMap<&str, usize> = truth
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.as_str(), i))
        .collect();
    let mut r = Report {
        posts: truth.len(),
        ..Report::default()
    };
    r.lost = truth
        .iter()
        .filter(|t| !pred_unique.contains(&t.id) && !pred_dup.contains_key(&t.id))
        .count();
    r.duplicated_outputs = seen
        .iter()
        .filter(|(id, c)| **c > 1 && pos.contains_key(id.as_str()))
        .count();
    let mut hits: BTreeMap<String, usize> = BTreeMap::new();
    for (i, t) in truth.iter().enumerate() {
        if t.label != "unique" && t.label != "dup" {
            continue;
        }
        r.scored_posts += 1;
        if t.label == "dup" {
            *r.truth_dup_by_kind.entry(t.kind.clone()).or_default() += 1;
        }
        let neg = t.kind == "lcqmc_neg";
        r.lcqmc_neg_posts_scored += usize::from(neg);
        let Some((cid, method)) = pred_dup.get(&t.id) else {
            continue;
        };
        r.predicted_dup += 1;
        let ok = *cid != t.id
            && pos
                .get(cid.as_str())
                .is_some_and(|&j| j < i && truth[j].cluster == t.cluster);
        r.by_method.entry(method.to_string()).or_insert([0, 0])[usize::from(!ok)] += 1;
        if ok {
            r.true_positives += 1;
            if t.label == "dup" {
                *hits.entry(t.kind.clone()).or_default() += 1;
            }
        } else {
            r.false_positives += 1;
            r.lcqmc_neg_fp += usize::from(neg);
        }
    }
    r.truth_dup = r.truth_dup_by_kind.values().sum();
    let hit: usize = hits.values().sum();
    r.precision = ratio(r.true_positives, r.predicted_dup);
    r.recall = ratio(hit, r.truth_dup);
    r.f1 = if r.precision + r.recall > 0.0 {
        2.0 * r.precision * r.recall / (r.precision + r.recall)
    } else {
        0.0
    };
    r.recall_by_kind = r
        .truth_dup_by_kind
        .iter()
        .map(|(k, n)| (k.clone(), ratio(hits.get(k).copied().unwrap_or(0), *n)))
        .collect();
    r
}

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        ((a as f64 / b as f64) * 10_000.0).round() / 10_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, cluster: &str, label: &str, kind: &str) -> TruthRow {
        TruthRow {
            id: id.into(),
            cluster: cluster.into(),
            label: label.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn scores_like_score_py() {
        let truth = vec![
            row("a", "a", "unique", "natural"),
            row("b", "a", "dup", "light"),
            row("c", "c", "unique", "lcqmc_neg"),
            row("d", "c", "dup", "heavy"),
            row("e", "e", "unique", "natural"),
        ];
        let uniq: HashSet<String> = ["a", "d"].iter().map(|s| s.to_string()).collect();
        let dup: HashMap<String, (String, &'static str)> = [("b", "a"), ("c", "a")]
            .iter()
            .map(|(a, b)| (a.to_string(), (b.to_string(), "edit")))
            .collect();
        let seen: HashMap<String, u32> = ["a", "b", "c", "d"]
            .iter()
            .map(|s| (s.to_string(), 1))
            .collect();
        let r = score(&truth, &uniq, &dup, &seen);
        assert_eq!(r.lost, 1);
        assert_eq!(r.predicted_dup, 2);
        assert_eq!(r.true_positives, 1);
        assert_eq!(r.lcqmc_neg_fp, 1);
        assert_eq!(r.recall_by_kind.get("light"), Some(&1.0));
        assert_eq!(r.recall_by_kind.get("heavy"), Some(&0.0));
        assert_eq!(r.precision, 0.5);
        assert_eq!(r.by_method.get("edit"), Some(&[1, 1]));
    }
}
