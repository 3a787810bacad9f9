//! `inspect query TEXT`: every live entry ranked against a text, with the engine's candidate
//! sources and verdict.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{instant, Instant, Opened};
use crate::app::view::{render_verdict, sources_label, VerdictView};
use crate::engine::{Analyzed, Analyzer, Position};
use crate::index::{Entry, EntryRef, OrderKey, Query, Sources};
use crate::text::tokenize::Tokenizer;
use crate::types::PostId;
use crate::verify::verify;

/// One stored post near the query.
#[derive(Debug, Serialize)]
pub struct Near {
    /// Cluster id of the stored representative.
    pub id: String,
    /// Generation of the copy shown (the newest copy when there are several).
    pub gen: i64,
    /// Event time of that copy.
    pub time: Instant,
    /// Hamming distance.
    pub distance: u32,
    /// Token-set Jaccard (Zhou's Dup).
    pub overlap: f32,
    /// Zhou's Sim.
    pub similarity: f32,
    /// The rule that accepts the pair, or `none`.
    pub rule: &'static str,
    /// Ranking score of the accepting rule (see the duplicate schema's `text_similarity`).
    pub score: Option<f32>,
    /// Which candidate sources surface it (`None`: the engine never compares the two).
    pub candidate: Option<Sources>,
    /// Normalized text.
    pub text: String,
}

/// The answer to `inspect query TEXT`.
#[derive(Debug, Serialize)]
pub struct QueryReport {
    /// The query text as given.
    pub text: String,
    /// Normalized.
    pub normalized: String,
    /// Fingerprint, hex.
    pub fingerprint: String,
    /// Live entries compared by brute force.
    pub scanned: usize,
    /// Entries the engine's candidate search returns.
    pub candidates: usize,
    /// The verdict a post with this text would get next (no time: at the watermark).
    pub verdict: VerdictView,
    /// Nearest stored posts: those a rule accepts by its score, then the rest by Zhou's Sim
    /// (which weighs token overlap far above Hamming distance), then distance.
    pub nearest: Vec<Near>,
}

/// Ranks every live entry against `raw` and asks the engine for the verdict; consumes the
/// restored engine (deciding may insert the query into the in-memory index, never on disk).
pub fn query(o: Opened, raw: &str, tokenizer: &Tokenizer, limit: usize) -> QueryReport {
    let Opened { mut engine, .. } = o;
    let mut a = Analyzed::default();
    Analyzer::new(tokenizer).analyze(raw, &mut a);
    let id = PostId("<query>".into());
    let min_gen = engine.min_live_generation().unwrap_or(i64::MIN);
    let q = Query {
        id: &id,
        before: OrderKey {
            tau: i64::MAX,
            arrival: i64::MAX,
            partition: u32::MAX,
            seq: u64::MAX,
        },
        visibility: Default::default(),
        min_gen,
        max_gen: i64::MAX,
        sketch: a.sketch(),
        grams: &a.grams,
    };
    let index = engine.index();
    let cands: BTreeMap<EntryRef, Sources> = index.candidate_sources(&q).into_iter().collect();
    let vcfg = index.verify_config();
    let fp = a.fingerprint();
    let mut rows: Vec<Near> = Vec::new();
    let mut scanned = 0;
    // Newest generation first, so the copy kept for a cluster is its newest.
    let mut all: Vec<(EntryRef, Entry)> =
        index.entries().filter(|(r, _)| r.gen >= min_gen).collect();
    all.sort_by(|x, y| y.0.gen.cmp(&x.0.gen).then(x.0.slot.cmp(&y.0.slot)));
    for (r, e) in all {
        scanned += 1;
        let m = verify(&a.sketch(), &e.sketch(), vcfg);
        let u = crate::verify::unverified(&a.sketch(), &e.sketch(), vcfg);
        rows.push(Near {
            id: e.id.to_string(),
            gen: r.gen,
            time: instant(e.time.0),
            distance: fp.hamming(e.fingerprint),
            overlap: u.overlap,
            similarity: u.similarity,
            rule: m.map_or("none", |m| m.method.as_str()),
            score: m.map(|m| m.score),
            candidate: cands.get(&r).copied(),
            text: e.chars.iter().collect(),
        });
    }
    rows.sort_by(|x, y| {
        y.score
            .is_some()
            .cmp(&x.score.is_some())
            .then(y.score.unwrap_or(0.0).total_cmp(&x.score.unwrap_or(0.0)))
            .then(y.similarity.total_cmp(&x.similarity))
            .then(x.distance.cmp(&y.distance))
    });
    let mut seen = std::collections::HashSet::new();
    rows.retain(|n| seen.insert(n.id.clone()));
    rows.truncate(limit);
    let candidates = cands.len();
    let pos = Position::new(0, u64::MAX);
    let verdict = VerdictView::of(&engine.decide(pos, &id, None, &a));
    QueryReport {
        text: raw.to_string(),
        normalized: a.normalized.clone(),
        fingerprint: fp.to_string(),
        scanned,
        candidates,
        verdict,
        nearest: rows,
    }
}

/// The plain-text rendering of a query answer.
pub fn render_query(q: &QueryReport) -> String {
    let mut o = format!(
        "query: {}\nnormalized: {}\nfingerprint: {}\n",
        q.text, q.normalized, q.fingerprint
    );
    o += &render_verdict(&q.verdict);
    o += &format!(
        "{} live entries compared; the engine's candidate search finds {}\n",
        q.scanned, q.candidates
    );
    o += &format!(
        "{:<20} {:>4} {:>6} {:>6} {:<12} {:<14} text\n",
        "id", "dist", "Dup", "Sim", "rule", "candidate"
    );
    for n in &q.nearest {
        let rule = n
            .score
            .map_or(n.rule.to_string(), |s| format!("{} {s:.2}", n.rule));
        let cand = n.candidate.map_or("-".into(), sources_label);
        o += &format!(
            "{:<20} {:>4} {:>6.3} {:>6.3} {:<12} {:<14} {}\n",
            n.id, n.distance, n.overlap, n.similarity, rule, cand, n.text
        );
    }
    o
}
