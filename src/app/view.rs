//! How `explain` and `inspect query` show a verdict and candidate sources (text and JSON).

use serde::Serialize;

use crate::engine::Verdict;
use crate::index::Sources;

/// The engine's verdict, as `inspect` and `explain` print it.
#[derive(Debug, Serialize)]
pub struct VerdictView {
    /// `unique`, `duplicate` or `rejected`.
    pub kind: &'static str,
    /// Cluster joined (duplicates).
    pub cluster: Option<String>,
    /// Accepting rule (duplicates).
    pub method: Option<&'static str>,
    /// Hamming distance to the match (duplicates).
    pub distance: Option<u32>,
    /// Zhou's Sim with the match (duplicates).
    pub similarity: Option<f32>,
    /// Empty after normalization, late, or the rejection reason.
    pub note: Option<String>,
}

impl VerdictView {
    /// The view of an engine verdict.
    pub fn of(v: &Verdict) -> VerdictView {
        let mut view = VerdictView {
            kind: "unique",
            cluster: None,
            method: None,
            distance: None,
            similarity: None,
            note: None,
        };
        match v {
            Verdict::Unique { empty, late } => {
                if *empty {
                    view.note = Some("normalizes to nothing; never indexed".into());
                } else if *late {
                    view.note = Some("older than the window; not indexed".into());
                }
            }
            Verdict::Duplicate(d) => {
                view.kind = "duplicate";
                view.cluster = Some(d.cluster.to_string());
                view.method = Some(d.matched_by.method.as_str());
                view.distance = Some(d.matched_by.distance);
                view.similarity = Some(d.matched_by.similarity);
            }
            Verdict::Rejected(r) => {
                view.kind = "rejected";
                view.note = Some(format!("{}: {}", r.reason, r.detail));
            }
        }
        view
    }
}

/// The `verdict: ...` line of `explain` and `inspect query`.
pub fn render_verdict(v: &VerdictView) -> String {
    match v.kind {
        "duplicate" => format!(
            "verdict: duplicate of {} by {} (distance {}, Sim {:.3})\n",
            v.cluster.as_deref().unwrap_or("?"),
            v.method.unwrap_or("?"),
            v.distance.unwrap_or(0),
            v.similarity.unwrap_or(0.0)
        ),
        k => format!(
            "verdict: {k}{}\n",
            v.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
    }
}

/// "exact+simhash+gram" style label of candidate sources.
pub fn sources_label(s: Sources) -> String {
    let names: Vec<&str> = [
        (s.exact, "exact"),
        (s.simhash, "simhash"),
        (s.gram, "bigram"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join("+")
    }
}
