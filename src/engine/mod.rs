//! The per-post decision. `Analyzer::analyze` (`analyze`) depends on the post's text alone
//! (normalize, segment, weight, fingerprint) so the route stage can run it alone; `Engine::decide` is the
//! one synchronous, stateful call that queries the index, picks a verdict and records index
//! changes for the durable store. No I/O happens here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hist::Hist;
use crate::index::entry::DecodeError;
use crate::index::{
    Built, Entry, EntryRef, Found, Index, IndexConfig, LayoutError, OrderKey, Packed, Query,
    QueryStats, Scratch, SealedGeneration, Visibility,
};
use crate::types::{EventTime, PostId, RejectReason, Rejection};
use crate::verify::{Match, VerifyConfig};
use crate::window::{Horizon, Window, WindowConfig, WindowError};

mod ahead;
pub use ahead::Ahead;
mod analyze;
mod lane;
pub use analyze::{Analyzed, Analyzer};
pub use lane::{next_order_key, Lane, Plan};

/// What happens to a post whose text normalizes to nothing (a bare repost chain, emoticons only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyPolicy {
    /// Emit it as unique, marked `"empty": true`; it is never indexed.
    Pass,
    /// Send it to the rejected output with reason `empty`.
    Reject,
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

/// The oldest generation any partition still needs: the smallest partition watermark decides.
pub fn min_live_generation(window: &Window, watermarks: &BTreeMap<u32, i64>) -> Option<i64> {
    watermarks
        .values()
        .min()
        .map(|w| window.min_live_generation(*w))
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
    /// Cross-partition visibility (`OrderKey::sees`); the default is the strict order.
    pub visibility: Visibility,
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
    /// Distinct candidates verified per query (posts that reached the index).
    pub candidates_per_query: Hist,
    /// Posts older than the window that matched no live entry (passed as unique, marked late,
    /// not indexed).
    pub late: u64,
    /// Entries dropped by generation expiry.
    pub expired_entries: u64,
    /// Representatives refreshed into a newer generation.
    pub refreshed: u64,
}

/// Where a post sits in its input: partition (0 for files), sequence number (line or offset)
/// and, in Kafka, when its raw record arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// Partition.
    pub partition: u32,
    /// Sequence number within the partition.
    pub seq: u64,
    /// The raw input record's Kafka timestamp (unix ms), if any (`OrderKey::arrival`).
    pub arrival: Option<i64>,
}

impl Position {
    /// A position without an arrival time (files).
    pub fn new(partition: u32, seq: u64) -> Position {
        Position {
            partition,
            seq,
            arrival: None,
        }
    }
}

/// The stateful decision maker.
pub struct Engine {
    index: Index,
    window: Window,
    /// Largest event time seen per partition: orders decisions (`OrderKey::tau`).
    watermarks: BTreeMap<u32, i64>,
    /// Largest arrival time seen per partition: orders decisions within an event second
    /// (`OrderKey::arrival`).
    arrivals: BTreeMap<u32, i64>,
    /// Per partition, the watermark the window expires by: the largest event time without
    /// unconfirmed outliers (`Window::advance`).
    horizons: BTreeMap<u32, Horizon>,
    empty_posts: EmptyPolicy,
    visibility: Visibility,
    scratch: Scratch,
    pending: Vec<(i64, Entry)>,
    stats: EngineStats,
    /// Generations below this were dropped (expired, or skipped when applied).
    dropped_below: Option<i64>,
    /// Generations from this one on are kept whatever the partitions' horizons say
    /// (`hold_window_of`).
    hold: Option<i64>,
}

impl Engine {
    /// An engine with an empty index that keeps every entry in memory.
    pub fn new(cfg: &EngineConfig) -> Result<Engine, EngineError> {
        Engine::with_cold(cfg, crate::index::cold::in_memory())
    }

    /// An engine with an empty index whose entries' ids, texts and tokens go to stores made by
    /// `cold` (see `index::cold`).
    pub fn with_cold(
        cfg: &EngineConfig,
        cold: std::sync::Arc<dyn crate::index::cold::ColdFactory>,
    ) -> Result<Engine, EngineError> {
        Ok(Engine {
            index: Index::with_cold(cfg.index.clone(), cfg.verify.clone(), cold)?,
            window: Window::new(&cfg.window)?,
            watermarks: BTreeMap::new(),
            arrivals: BTreeMap::new(),
            horizons: BTreeMap::new(),
            empty_posts: cfg.empty_posts,
            visibility: cfg.visibility,
            scratch: Scratch::default(),
            pending: Vec::new(),
            stats: EngineStats::default(),
            dropped_below: None,
            hold: None,
        })
    }

    /// Read access to the index (inspect, metrics, writing sealed generations).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Merges what late entries added to sealed generation `gen` into its compact form, so that
    /// it can be written whole (`Index::settle`); whether it is held.
    pub fn settle_generation(&mut self, gen: i64) -> bool {
        self.index.settle(gen)
    }

    /// Adds the entries stored after a generation read back whole was written (`Loaded::tails`),
    /// in their order, as the late entries they were; returns how many.
    pub fn restore_tail(&mut self, gen: i64, tail: &Packed) -> Result<usize, DecodeError> {
        let entries = tail.entries()?;
        let n = entries.len();
        for e in entries {
            self.index.insert(gen, &e, &mut self.scratch);
        }
        Ok(n)
    }

    /// Adds generations read back whole (`Index::adopt`), those below the live window left
    /// out; hands back the ones not added (below the window, or already held).
    pub fn adopt_sealed(&mut self, gens: Vec<SealedGeneration>) -> Vec<SealedGeneration> {
        let min_gen = self.min_live_generation();
        let (live, mut out): (Vec<_>, Vec<_>) = gens
            .into_iter()
            .partition(|g| min_gen.is_none_or(|m| g.held().gen() >= m));
        out.extend(self.index.adopt(live));
        out
    }

    /// Window arithmetic.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Watermark (largest event time seen) per partition.
    pub fn watermarks(&self) -> &BTreeMap<u32, i64> {
        &self.watermarks
    }

    /// Largest arrival time seen per partition (`OrderKey::arrival`; absent: 0).
    pub fn arrivals(&self) -> &BTreeMap<u32, i64> {
        &self.arrivals
    }

    /// The window watermark per partition (what expiry goes by), for checkpoints.
    pub fn window_marks(&self) -> BTreeMap<u32, i64> {
        self.horizons.iter().map(|(p, h)| (*p, h.mark)).collect()
    }

    /// Restores the window watermarks a checkpoint stored (`window_marks`).
    pub fn restore_window_marks(&mut self, marks: &BTreeMap<u32, i64>) {
        for (p, m) in marks {
            self.horizons.insert(*p, Horizon::at(*m));
        }
    }

    /// The oldest generation any partition still needs, if any post was seen (and no older
    /// one is held, `hold_window_of`).
    pub fn min_live_generation(&self) -> Option<i64> {
        let own = self
            .horizons
            .values()
            .map(|h| self.window.min_live_generation(h.mark))
            .min()?;
        Some(self.hold.map_or(own, |h| own.min(h)))
    }

    /// Keeps the window of a post at event time `tau` (`None`: lifts the hold) whatever the
    /// partitions' horizons say: a Kafka worker holds the window of a partition it starts from
    /// the beginning, which has no horizon until its first post is decided, so that deciding
    /// (or applying) other partitions' posts meanwhile does not expire what that post needs.
    pub fn hold_window_of(&mut self, tau: Option<i64>) {
        self.hold = tau.map(|t| self.window.min_live_generation(t));
    }

    /// Counters so far.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Restores persisted state: the watermarks (also as window marks, unless
    /// `restore_window_marks` set them first), then entries per generation in insertion order,
    /// generations below the live window skipped. Up to `threads` generations are built at once
    /// while `generations` yields the next (see `Index::insert_generations`). Restored entries
    /// are not reported as pending changes. A stored entry that does not decode fails it.
    /// Each generation built is handed to `keep`, if given, on its builder's thread
    /// (`Index::insert_generations_keeping`).
    pub fn restore(
        &mut self,
        watermarks: BTreeMap<u32, i64>,
        generations: impl IntoIterator<Item = (i64, Packed)>,
        threads: usize,
        keep: Option<&(dyn Fn(Built<'_>) + Sync)>,
    ) -> Result<(), DecodeError> {
        // Window marks restored first (`restore_window_marks`) win over the order watermarks.
        for (p, w) in &watermarks {
            self.horizons.entry(*p).or_insert(Horizon::at(*w));
        }
        self.watermarks = watermarks;
        let min_gen = self.min_live_generation();
        let live = generations
            .into_iter()
            .filter(|(gen, _)| min_gen.is_none_or(|m| *gen >= m));
        self.index.insert_generations_keeping(live, threads, keep)
    }

    /// Applies an entry decided elsewhere (another partition's worker): it joins the index unless
    /// its generation expired or it is already there. Returns whether it was added. Watermarks
    /// are not touched: they belong to the partitions this engine decides.
    pub fn apply(&mut self, gen: i64, entry: Entry) -> bool {
        if !self.admits(gen, &entry.key, entry.text_hash) {
            return false;
        }
        self.index.insert(gen, &entry, &mut self.scratch);
        true
    }

    /// Whether `apply` would add an entry of generation `gen` with key `key` and text hash
    /// `text_hash`: its generation is live (one that is not is noted as dropped, as `apply`
    /// does) and the index does not hold it yet. A worker reading its own entries back from the
    /// changelog decodes none of them whole.
    pub fn admits(&mut self, gen: i64, key: &OrderKey, text_hash: u64) -> bool {
        if let Some(m) = self.min_live_generation().filter(|m| gen < *m) {
            self.dropped_below = self.dropped_below.max(Some(m));
            return false;
        }
        !self.index.contains(gen, key, text_hash)
    }

    /// Whether posts at watermark `tau` would need generations this engine has dropped: a
    /// partition resumed far behind the others needs the index rebuilt (`clear_index`, then the
    /// log applied again).
    pub fn lacks_generations_for(&self, tau: i64) -> bool {
        self.dropped_below
            .is_some_and(|d| self.window.min_live_generation(tau) < d)
    }

    /// Empties the index, keeping watermarks and counters, before it is rebuilt from a log.
    pub fn clear_index(&mut self) {
        self.index.clear();
        self.dropped_below = None;
    }

    /// Sets a partition's watermark and arrival: a worker taking a partition over resumes with
    /// those its previous owner had at the committed offset; `None` forgets the partition.
    pub fn set_watermark(&mut self, partition: u32, watermark: Option<(i64, i64)>) {
        match watermark {
            Some((w, arrival)) => {
                self.horizons.insert(partition, Horizon::at(w));
                self.watermarks.insert(partition, w);
                self.arrivals.insert(partition, arrival);
            }
            None => {
                self.horizons.remove(&partition);
                self.watermarks.remove(&partition);
                self.arrivals.remove(&partition);
            }
        };
    }

    /// Index changes since the last call, as (generation, entry), in order.
    pub fn take_changes(&mut self) -> Vec<(i64, Entry)> {
        std::mem::take(&mut self.pending)
    }

    /// The order key a post at `at` with event time `time` gets when decided next: the
    /// partition's watermark and arrival including this post (a post without a time takes the
    /// watermark). Only a live post's arrival counts (`Visibility::is_live`): a backlog keeps
    /// the order by partition within an event second, which lets several workers decide long
    /// runs of one partition between waits. Workers use the key to decide posts of several
    /// partitions in the global order.
    pub fn order_key(&self, at: Position, time: Option<EventTime>) -> OrderKey {
        next_order_key(
            self.watermarks.get(&at.partition).copied(),
            self.arrivals.get(&at.partition).copied().unwrap_or(0),
            at,
            time,
            &self.visibility,
        )
    }

    /// The state partition `partition` has reached: what its next post is planned from.
    pub fn lane(&self, partition: u32) -> Lane {
        Lane {
            watermark: self.watermarks.get(&partition).copied(),
            arrival: self.arrivals.get(&partition).copied().unwrap_or(0),
            horizon: self.horizons.get(&partition).copied(),
        }
    }

    /// The plan of a post at `at` with event time `time`, next after a partition in state
    /// `lane` (`engine::lane`).
    pub fn plan(&self, lane: &Lane, at: Position, time: Option<EventTime>) -> Plan {
        lane::plan(lane, at, time, &self.window, &self.visibility)
    }

    /// Decides one post at `at`. The post is compared with the entries ordered before it that
    /// lie in its window; if unique (and not too late for the window) it becomes an entry.
    pub fn decide(
        &mut self,
        at: Position,
        id: &PostId,
        time: Option<EventTime>,
        a: &Analyzed,
    ) -> Verdict {
        let plan = self.plan(&self.lane(at.partition), at, time);
        self.commit(at.partition, &plan.after);
        self.decide_at(&plan, id, time, a)
    }

    /// Moves partition `partition` to state `lane`.
    fn commit(&mut self, partition: u32, lane: &Lane) {
        if let Some(w) = lane.watermark {
            self.watermarks.insert(partition, w);
        }
        if lane.arrival != 0 {
            self.arrivals.insert(partition, lane.arrival);
        }
        if let Some(h) = lane.horizon {
            self.horizons.insert(partition, h);
        }
    }

    /// Decides a post as planned (`plan`), its partition's state moved past it.
    fn decide_at(
        &mut self,
        plan: &Plan,
        id: &PostId,
        time: Option<EventTime>,
        a: &Analyzed,
    ) -> Verdict {
        let (key, mark) = (plan.key, plan.mark);
        let t = time.map_or(mark, |t| t.0);
        // The post is compared with a window ending at its own time when it lies ahead of the
        // watermark (an unconfirmed jump); expiry and lateness go by the watermark.
        let tau = mark.max(t);
        if let Some(min_gen) = self.min_live_generation() {
            self.stats.expired_entries += self.index.expire_before(min_gen) as u64;
            self.dropped_below = self.dropped_below.max(Some(min_gen));
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
        let min_gen = self.window.min_live_generation(tau);
        let query = Query {
            id,
            before: key,
            visibility: self.visibility,
            min_gen,
            max_gen: self.window.generation(key.tau),
            sketch: a.sketch(),
            grams: &a.grams,
        };
        let mut qs = QueryStats::default();
        let found = self.index.find(&query, &mut self.scratch, &mut qs);
        self.add_query_stats(&qs);
        let gen = self.window.generation(t);
        let late = gen < self.window.min_live_generation(mark);
        match found {
            Some(Found {
                r,
                m,
                cluster,
                time: matched_time,
            }) => {
                // The newest generation holding a match wins, so an existing copy in `gen` wins
                // and no second copy is made.
                if r.gen < gen && !late {
                    self.refresh(r, key, gen);
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
                // A rerun of input already in the window finds its own entry: never a second copy.
                if self.index.has_copy(gen, id, a.text_hash) {
                    return Verdict::Unique {
                        empty: false,
                        late: false,
                    };
                }
                let entry = Entry {
                    id: id.clone(),
                    key,
                    time: EventTime(t),
                    fingerprint: a.fingerprint(),
                    chars: a.chars.as_slice().into(),
                    text_hash: a.text_hash,
                    tokens: a.token_set.as_slice().into(),
                };
                // A replayed post may find its own entry already replicated back.
                if !self.index.contains(gen, &key, a.text_hash) {
                    self.index.insert(gen, &entry, &mut self.scratch);
                }
                self.pending.push((gen, entry));
                Verdict::Unique {
                    empty: false,
                    late: false,
                }
            }
        }
    }

    /// Copies a matched representative into the post's (newer) generation, so a cluster that
    /// keeps receiving duplicates stays in the window.
    /// The copy keeps the representative's own event time (reported as `matched_created_at`).
    ///
    /// Only a copy this post sees (or made, in a rerun) spares it another: a copy made by a post
    /// ordered after it, decided first by another worker, does not. The copies every post sees
    /// then depend on the posts it sees, not on the order workers decided them in (a dedup worker
    /// may decide ahead of an idle partition); otherwise the later copy hides the cluster from
    /// the posts ordered between the two, and a rerun of one of them can name another cluster.
    fn refresh(&mut self, r: EntryRef, key: OrderKey, gen: i64) {
        let Some(old) = self.index.get(r) else { return };
        if self
            .index
            .has_copy_seen(gen, &old.id, old.text_hash, &key, &self.visibility)
        {
            return;
        }
        let copy = Entry { key, ..old };
        if !self.index.contains(gen, &key, copy.text_hash) {
            self.index.insert(gen, &copy, &mut self.scratch);
        }
        self.pending.push((gen, copy));
        self.stats.refreshed += 1;
    }

    fn add_query_stats(&mut self, q: &QueryStats) {
        self.stats.candidates_per_query.observe(q.candidates);
        let s = &mut self.stats.query;
        s.bucket_sizes.merge(&q.bucket_sizes);
        s.candidates += q.candidates;
        s.verify_rejects += q.verify_rejects;
        s.gate_rejects += q.gate_rejects;
        s.outranked += q.outranked;
        s.bucket_scans_capped += q.bucket_scans_capped;
        s.posting_scans_capped += q.posting_scans_capped;
        s.verify_cells += q.verify_cells;
        s.verify_budget_exhausted += q.verify_budget_exhausted;
        s.candidates_unverified += q.candidates_unverified;
        s.cold_read_errors += q.cold_read_errors;
    }
}

#[cfg(test)]
mod tests;
