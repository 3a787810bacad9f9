//! The per-post decision. `Analyzer::analyze` is stateless (normalize, segment, weight,
//! fingerprint) so the route stage can run it alone; `Engine::decide` is the one synchronous,
//! stateful call that queries the index, picks a verdict and records index changes for the
//! durable store. No I/O happens here.

use serde::{Deserialize, Serialize};

use crate::fingerprint::{simhash, SimHash};
use crate::index::grams::{distinct_bigrams, Gram};
use crate::index::{Entry, EntryRef, Index, IndexConfig, LayoutError, Query, QueryStats, Scratch};
use crate::text::normalize::{Normalizer, Removed};
use crate::text::tokenize::{Tokenizer, WeightedToken};
use crate::types::{EventTime, Fingerprint, PostId, RejectReason, Rejection};
use crate::verify::{Match, Sketch, VerifyConfig};
use crate::window::{Window, WindowConfig, WindowError};

/// What happens to a post whose text normalizes to nothing (a bare repost chain, emoticons only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyPolicy {
    /// Emit it as unique, marked `"empty": true`; it is never indexed.
    Pass,
    /// Send it to the rejected output with reason `empty`.
    Reject,
}

/// Everything the stateless analysis produced for one post.
#[derive(Clone, Debug, Default)]
pub struct Analyzed {
    /// Normalized text.
    pub normalized: String,
    /// Normalized text as characters.
    pub chars: Vec<char>,
    /// What normalization removed.
    pub removed: Removed,
    /// Distinct weighted tokens.
    pub tokens: Vec<WeightedToken>,
    /// Sorted distinct 32-bit token hashes.
    pub token_set: Vec<u32>,
    /// Fingerprint and accumulator.
    pub simhash: Option<SimHash>,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// Distinct character bigrams.
    pub grams: Vec<Gram>,
}

impl Analyzed {
    /// The fingerprint (0 for a post without tokens).
    pub fn fingerprint(&self) -> Fingerprint {
        self.simhash
            .as_ref()
            .map_or(Fingerprint(0), |s| s.fingerprint)
    }

    /// The verification view.
    pub fn sketch(&self) -> Sketch<'_> {
        Sketch {
            chars: &self.chars,
            text_hash: self.text_hash,
            fingerprint: self.fingerprint(),
            tokens: &self.token_set,
        }
    }
}

/// Normalization, segmentation and fingerprinting; one per worker thread.
pub struct Analyzer<'t> {
    normalizer: Normalizer,
    tokenizer: &'t Tokenizer,
}

impl<'t> Analyzer<'t> {
    /// An analyzer sharing `tokenizer`.
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        Analyzer {
            normalizer: Normalizer::new(),
            tokenizer,
        }
    }

    /// Fills `out` from the raw post text.
    pub fn analyze(&mut self, raw: &str, out: &mut Analyzed) {
        self.normalizer
            .normalize_into(raw, &mut out.normalized, Some(&mut out.removed));
        out.chars.clear();
        out.chars.extend(out.normalized.chars());
        out.text_hash = xxhash_rust::xxh3::xxh3_64(out.normalized.as_bytes());
        self.tokenizer.tokenize(&out.normalized, &mut out.tokens);
        out.token_set.clear();
        out.token_set
            .extend(out.tokens.iter().map(|t| t.hash as u32));
        out.token_set.sort_unstable();
        out.token_set.dedup();
        out.simhash = Some(simhash(&out.tokens));
        distinct_bigrams(&out.chars, &mut out.grams);
    }
}

/// A duplicate verdict's details.
#[derive(Clone, Debug, PartialEq)]
pub struct Duplicate {
    /// The cluster joined: id of its first unique post.
    pub cluster: PostId,
    /// The stored representative that verified.
    pub matched: PostId,
    /// Event time of the matched representative copy.
    pub matched_time: EventTime,
    /// How it verified.
    pub matched_by: Match,
}

/// The outcome for one post.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// First of its cluster (or empty after normalization, with `empty: true`).
    Unique {
        /// The text normalized to nothing.
        empty: bool,
        /// The post was older than the window and could not be indexed.
        late: bool,
    },
    /// A near-duplicate of an earlier post.
    Duplicate(Duplicate),
    /// Bad input.
    Rejected(Rejection),
}

/// Engine settings that are not index or verification thresholds.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Index shape.
    pub index: IndexConfig,
    /// Verification thresholds.
    pub verify: VerifyConfig,
    /// Window.
    pub window: WindowConfig,
    /// Empty-post policy.
    pub empty_posts: EmptyPolicy,
}

/// Engine construction errors (all are configuration errors).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Bad (b, k).
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// Bad window.
    #[error(transparent)]
    Window(#[from] WindowError),
}

/// Counters the engine keeps for summaries and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Sum over queries.
    pub query: QueryStats,
    /// Posts too late for the window (judged, not indexed).
    pub late: u64,
    /// Entries dropped by generation expiry.
    pub expired_entries: u64,
    /// Representatives refreshed into a newer generation.
    pub refreshed: u64,
}

/// The stateful decision maker.
pub struct Engine {
    index: Index,
    window: Window,
    empty_posts: EmptyPolicy,
    scratch: Scratch,
    pending: Vec<(i64, Entry)>,
    stats: EngineStats,
}

impl Engine {
    /// An engine with an empty index.
    pub fn new(cfg: &EngineConfig) -> Result<Engine, EngineError> {
        Ok(Engine {
            index: Index::new(cfg.index.clone(), cfg.verify.clone())?,
            window: Window::new(&cfg.window)?,
            empty_posts: cfg.empty_posts,
            scratch: Scratch::default(),
            pending: Vec::new(),
            stats: EngineStats::default(),
        })
    }

    /// Read access to the index (inspect, metrics).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The window state.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Counters so far.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Restores persisted state: the watermark, then entries per generation in insertion order.
    /// Restored entries are not reported as pending changes.
    pub fn restore(&mut self, watermark: Option<i64>, generations: Vec<(i64, Vec<Entry>)>) {
        self.window = self.window.clone().with_watermark(watermark);
        let min_gen = self.window.min_live_generation();
        let mut newest: rustc_hash::FxHashMap<PostId, i64> = rustc_hash::FxHashMap::default();
        for (gen, entries) in generations {
            if min_gen.is_some_and(|m| gen < m) {
                continue;
            }
            for e in entries {
                newest
                    .entry(e.id.clone())
                    .and_modify(|g| *g = (*g).max(gen))
                    .or_insert(gen);
                self.index.insert(gen, e, &mut self.scratch);
            }
        }
        // Recompute which copies have a newer copy, as the live run had marked them.
        let stale: Vec<EntryRef> = self
            .index
            .generations()
            .map(|(gen, _)| gen)
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|gen| {
                let newest = &newest;
                self.index
                    .entries(gen)
                    .iter()
                    .enumerate()
                    .filter_map(move |(slot, e)| {
                        (newest.get(&e.id).is_some_and(|&g| g > gen)).then_some(EntryRef {
                            gen,
                            slot: slot as u32,
                        })
                    })
            })
            .collect();
        for r in stale {
            self.index.mark_superseded(r);
        }
    }

    /// Index changes since the last call, as (generation, entry), in order.
    pub fn take_changes(&mut self) -> Vec<(i64, Entry)> {
        std::mem::take(&mut self.pending)
    }

    /// Decides one post. `seq` is the post's input sequence number; `a` its analysis.
    pub fn decide(
        &mut self,
        seq: u64,
        id: &PostId,
        time: Option<EventTime>,
        a: &Analyzed,
    ) -> Verdict {
        let t = self.window.effective_time(time);
        self.window.observe(t);
        if let Some(min_gen) = self.window.min_live_generation() {
            self.stats.expired_entries += self.index.expire_before(min_gen) as u64;
        }
        if a.chars.is_empty() {
            return match self.empty_posts {
                EmptyPolicy::Pass => Verdict::Unique {
                    empty: true,
                    late: false,
                },
                EmptyPolicy::Reject => Verdict::Rejected(Rejection::new(
                    RejectReason::Empty,
                    "text normalizes to nothing",
                )),
            };
        }
        let query = Query {
            id,
            sketch: a.sketch(),
            grams: &a.grams,
        };
        let mut qs = QueryStats::default();
        let found = self.index.find(&query, &mut self.scratch, &mut qs);
        self.add_query_stats(qs);
        let gen = self.window.generation(t);
        let late = self.window.is_expired(t);
        match found {
            Some((r, m)) => {
                let (cluster, matched_time) = match self.index.get(r) {
                    Some(e) => (e.id.clone(), e.time),
                    None => (id.clone(), EventTime(t)),
                };
                if r.gen < gen && !late && !self.index.is_superseded(r) {
                    self.refresh(r, seq, t, gen);
                }
                let matched = cluster.clone();
                Verdict::Duplicate(Duplicate {
                    cluster,
                    matched,
                    matched_time,
                    matched_by: m,
                })
            }
            None if late => {
                self.stats.late += 1;
                Verdict::Unique {
                    empty: false,
                    late: true,
                }
            }
            None => {
                let entry = Entry {
                    id: id.clone(),
                    seq,
                    time: EventTime(t),
                    fingerprint: a.fingerprint(),
                    chars: a.chars.as_slice().into(),
                    text_hash: a.text_hash,
                    tokens: a.token_set.as_slice().into(),
                };
                self.pending.push((gen, entry.clone()));
                self.index.insert(gen, entry, &mut self.scratch);
                Verdict::Unique {
                    empty: false,
                    late: false,
                }
            }
        }
    }

    /// Copies a matched representative into the post's (newer) generation, so a cluster that
    /// keeps receiving duplicates stays in the window.
    fn refresh(&mut self, r: EntryRef, seq: u64, t: i64, gen: i64) {
        let Some(old) = self.index.get(r) else { return };
        let copy = Entry {
            seq,
            time: EventTime(t),
            ..old.clone()
        };
        self.index.mark_superseded(r);
        self.pending.push((gen, copy.clone()));
        self.index.insert(gen, copy, &mut self.scratch);
        self.stats.refreshed += 1;
    }

    fn add_query_stats(&mut self, q: QueryStats) {
        let s = &mut self.stats.query;
        s.candidates += q.candidates;
        s.verify_rejects += q.verify_rejects;
        s.bucket_scans_capped += q.bucket_scans_capped;
        s.posting_scans_capped += q.posting_scans_capped;
    }
}
