//! The in-memory near-duplicate index. It holds unique representatives only, in generations
//! (segments) keyed by event-time bucket; a whole generation expires at once by dropping its
//! segment, so expiry never scans the index. Each segment has three candidate sources:
//! an exact map on the normalized-text hash, the SimHash block tables, and a character-bigram
//! inverted index for short texts (the sealed generations' gram dictionaries joined in one
//! table, `columns`, so that a query looks each gram up once for all of them). Every candidate
//! goes through `verify`.

mod arrays;
mod build;
mod candidates;
pub mod cold;
mod columns;
pub mod entry;
mod find;
pub mod grams;
mod inspect;
mod newest;
mod numbers;
pub mod packed;
pub mod postings;
pub mod prefix;
mod ranks;
mod sealed_table;
mod segment;
pub mod slots;
pub mod snapshot;
pub mod store;
pub mod tables;

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use build::Indexer;
use cold::ColdFactory;
use columns::{Columns, Source};
pub use entry::{Entry, EntryView, OrderKey, Visibility};
pub use find::Found;
use grams::Gram;
pub use inspect::{SegmentShape, Sources};
pub use packed::Packed;
use postings::Postings;
use segment::Segment;
pub use snapshot::{Built, SealedGeneration, Written};
pub use tables::{LayoutError, TableLayout};

use crate::hist::Hist;
use crate::types::PostId;
use crate::verify::{Sketch, VerifyConfig, VerifyMode};

/// Index shape and scan bounds (the `[index]` config section).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IndexConfig {
    /// Number of fingerprint blocks b; the index has C(b, k) tables.
    pub blocks: usize,
    /// Maximum Hamming distance k that the block tables guarantee to find.
    pub max_distance: u32,
    /// Most entries scanned in one SimHash bucket per query (newest first); larger buckets are
    /// counted in `bucket_scans_capped`.
    pub bucket_scan_cap: usize,
    /// Texts longer than this many characters are not put in the bigram index (SimHash covers
    /// long posts).
    pub gram_max_chars: usize,
    /// Most posting-list entries scanned per query per generation on the bigram path; the rest
    /// is counted in `posting_scans_capped`.
    pub posting_scan_cap: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            blocks: 4,
            max_distance: 3,
            bucket_scan_cap: 256,
            gram_max_chars: 512,
            posting_scan_cap: 4096,
        }
    }
}

/// Where an entry lives: its generation and its slot in that generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryRef {
    /// Generation (event-time bucket number).
    pub gen: i64,
    /// Slot within the generation.
    pub slot: u32,
}

/// Counters of one query, for metrics (histograms on the default `Pow2` scale).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Distinct candidates verified.
    pub candidates: u64,
    /// Candidates that verification rejected.
    pub verify_rejects: u64,
    /// Of those, the ones its gates rejected before the entry's record was read.
    pub gate_rejects: u64,
    /// Candidates not read because the gates bound their score to no more than that of a
    /// match already found in their generation (they could not change the verdict).
    pub outranked: u64,
    /// SimHash buckets whose scan hit `bucket_scan_cap`.
    pub bucket_scans_capped: u64,
    /// Bigram probes that hit `posting_scan_cap`.
    pub posting_scans_capped: u64,
    /// Verification work spent, in cells (`verify.max_verify_cells_per_post`).
    pub verify_cells: u64,
    /// Queries (posts) whose verification budget ran out: 1 for a query, summed over queries.
    pub verify_budget_exhausted: u64,
    /// Candidates left unverified because the post's verification budget ran out, in the
    /// generation where it ran out (older generations are then not searched).
    pub candidates_unverified: u64,
    /// Candidates skipped because their stored record could not be read.
    pub cold_read_errors: u64,
    /// Size of every SimHash bucket looked up (0 when the key had no bucket).
    pub bucket_sizes: Hist,
}

/// Approximate bytes the index holds in memory, by structure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Per-slot records (`store::Meta`).
    pub meta: usize,
    /// Cold records kept in memory (all of them without spill files, else write buffers and
    /// each generation's newest records).
    pub cold: usize,
    /// The exact-text table.
    pub texts: usize,
    /// The SimHash block tables.
    pub tables: usize,
    /// The bigram posting lists.
    pub grams: usize,
}

impl Memory {
    /// All of it.
    pub fn total(&self) -> usize {
        self.meta + self.cold + self.texts + self.tables + self.grams
    }
}

/// A post looking for its earlier near-duplicates.
pub struct Query<'a> {
    /// The post's own id: a post never matches itself, so replays give the same verdict.
    pub id: &'a PostId,
    /// The post's order key: only entries it sees (`OrderKey::sees`) are candidates (entries of
    /// other partitions may already hold later posts).
    pub before: OrderKey,
    /// The cross-partition visibility rule (`OrderKey::sees`).
    pub visibility: Visibility,
    /// Only generations from this one on are in the post's window.
    pub min_gen: i64,
    /// Generations after this one hold nothing the post sees, and are not searched: the
    /// engine stores an entry in the generation of its event time, which is at most its key's
    /// `tau`, and a post sees only keys with a `tau` at most its own, so the engine passes
    /// `generation(before.tau)`. (`i64::MAX` searches every generation.) A worker that runs
    /// behind the entries another worker replicates to it would otherwise search every
    /// generation between its post and the other worker's newest entry.
    pub max_gen: i64,
    /// Verification view of the post.
    pub sketch: Sketch<'a>,
    /// Distinct bigrams of the normalized text.
    pub grams: &'a [Gram],
}

/// Reusable buffers for queries and inserts (the index itself stays immutable while querying).
#[derive(Default)]
pub struct Scratch {
    cands: Vec<EntryRef>,
    lists: Vec<(usize, u32)>,
    /// A query's grams in a sealed generation's order: (entries holding it, gram, its lists).
    ranked: Vec<(u32, Gram, u32)>,
    /// Each query gram's posting list in the segment being searched (kept empty between
    /// searches).
    found: Vec<postings::List<'static>>,
    /// Per-slot counters of the counted bigram path, all zero between searches (see
    /// `Index::counted_gram_candidates`).
    counts: Vec<u8>,
    /// The slots the counted bigram path met, then those met often enough.
    touched: Vec<u32>,
    grams: Vec<Gram>,
    /// One posting list, decoded.
    slots: Vec<u32>,
    /// The query's grams in every column of `Index::columns` (`Columns::rank_all`), once
    /// `columns_read`: looked up at the first sealed generation a search reaches.
    columns: Vec<(u32, u32)>,
    columns_read: bool,
    /// A candidate's cold record, when read from outside memory.
    cold: Vec<u8>,
    /// A candidate's text and tokens, decoded for verification.
    chars: Vec<char>,
    tokens: Vec<u32>,
}

/// The generational index.
pub struct Index {
    cfg: IndexConfig,
    verify: VerifyConfig,
    layout: TableLayout,
    min_gram_chars: usize,
    min_len_ratio: f32,
    segments: VecDeque<Segment>,
    /// The sealed generations' gram dictionaries in one table (`reindex_columns`).
    columns: Columns,
    cold: Arc<dyn ColdFactory>,
}

impl Index {
    /// An empty index that keeps every entry in memory.
    pub fn new(cfg: IndexConfig, verify: VerifyConfig) -> Result<Index, LayoutError> {
        Index::with_cold(cfg, verify, cold::in_memory())
    }

    /// An empty index whose generations keep their entries' cold records (ids, texts, tokens)
    /// in stores made by `cold`.
    pub fn with_cold(
        cfg: IndexConfig,
        verify: VerifyConfig,
        cold: Arc<dyn ColdFactory>,
    ) -> Result<Index, LayoutError> {
        let layout = TableLayout::new(cfg.blocks, cfg.max_distance)?;
        let min_gram_chars = grams::min_indexed_chars(&verify);
        // Neither char rule accepts a pair whose lengths differ by more than this ratio.
        let min_len_ratio = if verify.containment {
            verify.containment_min_ratio.min(verify.edit_similarity)
        } else {
            verify.edit_similarity
        };
        Ok(Index {
            cfg,
            verify,
            layout,
            min_gram_chars,
            min_len_ratio,
            segments: VecDeque::new(),
            columns: Columns::default(),
            cold,
        })
    }

    /// What makes each generation's cold record store.
    pub fn cold_factory(&self) -> &Arc<dyn ColdFactory> {
        &self.cold
    }

    /// Number of live entries (copies included).
    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.store.len()).sum()
    }

    /// True when no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes held by entries and their postings.
    pub fn approx_bytes(&self) -> usize {
        self.memory().total()
    }

    /// Approximate bytes held, by structure.
    pub fn memory(&self) -> Memory {
        let mut m = Memory::default();
        for s in &self.segments {
            m.meta += s.store.meta_bytes();
            m.cold += s.store.cold_bytes();
            m.texts += s.texts.bytes();
            m.tables += s.tables.iter().map(Postings::approx_bytes).sum::<usize>();
            m.tables += s
                .sealed_tables
                .iter()
                .map(|t| t.approx_bytes())
                .sum::<usize>();
            m.grams += s.grams.approx_bytes();
            m.grams += s.prefix.as_ref().map_or(0, |p| p.approx_bytes());
        }
        m.grams += self.columns.bytes();
        m
    }

    /// Live generations, oldest first.
    pub fn generations(&self) -> impl Iterator<Item = (i64, usize)> + '_ {
        self.segments.iter().map(|s| (s.gen, s.store.len()))
    }

    /// The entry at `r`, rebuilt from its compact form.
    pub fn get(&self, r: EntryRef) -> Option<Entry> {
        self.segment(r.gen)
            .filter(|s| s.has_slot(r.slot))
            .and_then(|s| s.store.entry(r.slot).ok())
    }

    /// Whether generation `gen` already holds an entry with this key, whose text has this hash
    /// (replicated entries can arrive twice).
    pub fn contains(&self, gen: i64, key: &OrderKey, text_hash: u64) -> bool {
        self.segment(gen)
            .is_some_and(|s| s.any_text(text_hash, |c| c.key == *key))
    }

    /// Whether generation `gen` holds a copy of representative `id` with this text (a rerun or
    /// a refresh would otherwise add a second one).
    pub fn has_copy(&self, gen: i64, id: &PostId, text_hash: u64) -> bool {
        self.segment(gen)
            .is_some_and(|s| s.any_text(text_hash, |c| c.id == id.0))
    }

    /// Whether generation `gen` holds a copy of representative `id` (with this text) that a post
    /// with key `by` sees, or made itself (a rerun).
    pub fn has_copy_seen(
        &self,
        gen: i64,
        id: &PostId,
        text_hash: u64,
        by: &OrderKey,
        v: &Visibility,
    ) -> bool {
        self.segment(gen).is_some_and(|s| {
            s.any_text(text_hash, |c| {
                c.id == id.0 && (c.key == *by || by.sees(&c.key, v))
            })
        })
    }

    fn segment(&self, gen: i64) -> Option<&Segment> {
        self.segments.iter().find(|s| s.gen == gen)
    }

    /// Drops every entry (before a rebuild from a log).
    pub fn clear(&mut self) {
        self.segments.clear();
        self.columns = Columns::default();
    }

    /// Rebuilds the sealed generations' joint gram table (`columns`) unless it already holds
    /// exactly the generations that have a gram dictionary: called whenever one is sealed or
    /// expires.
    fn reindex_columns(&mut self) {
        let sealed = self.segments.iter().filter(|s| s.prefix.is_some());
        if sealed.map(|s| s.gen).eq(self.columns.gens()) {
            return;
        }
        let old = std::mem::take(&mut self.columns);
        // The new generations' dictionaries move into the table; the others are its columns.
        let sources: Vec<(i64, Source<'_>)> = self
            .segments
            .iter_mut()
            .filter_map(|s| {
                let p = s.prefix.as_mut()?;
                let source = match old.column(s.gen) {
                    Some(c) => Source::Column(&old, c),
                    None => {
                        let dict = p.take_dictionary();
                        debug_assert!(dict.is_some(), "generation {} lost its dictionary", s.gen);
                        Source::Dict(dict.unwrap_or_default())
                    }
                };
                Some((s.gen, source))
            })
            .collect();
        self.columns = Columns::build(&sources);
    }

    /// The gram dictionary of a sealed generation, (gram, count, start) triples in no
    /// particular order, wherever it is kept.
    fn dictionary_of(&self, seg: &Segment) -> Vec<(Gram, u32, u32)> {
        match (self.columns.column(seg.gen), &seg.prefix) {
            (Some(c), _) => self.columns.column_entries(c).collect(),
            (None, Some(p)) => p.iter_dictionary().collect(),
            (None, None) => Vec::new(),
        }
    }

    /// Drops every generation older than `min_gen`; returns how many entries went with them.
    pub fn expire_before(&mut self, min_gen: i64) -> usize {
        let mut dropped = 0;
        while self.segments.front().is_some_and(|s| s.gen < min_gen) {
            if let Some(s) = self.segments.pop_front() {
                dropped += s.store.len();
            }
        }
        if dropped > 0 {
            self.reindex_columns();
        }
        dropped
    }

    /// Adds the entries of generation `gen` in one go (a restart), merging its postings once.
    pub fn insert_all(
        &mut self,
        gen: i64,
        entries: impl IntoIterator<Item = Entry>,
        scratch: &mut Scratch,
    ) {
        for e in entries {
            self.insert_with(gen, &e, scratch, false);
        }
        if let Some(seg) = self.segments.iter_mut().find(|s| s.gen == gen) {
            seg.seal(&self.layout, &self.verify);
        }
        self.reindex_columns();
    }

    /// Adds an entry to generation `gen` (created on demand) and indexes it.
    pub fn insert(&mut self, gen: i64, entry: &Entry, scratch: &mut Scratch) -> EntryRef {
        self.insert_with(gen, entry, scratch, true)
    }

    fn insert_with(
        &mut self,
        gen: i64,
        entry: &Entry,
        scratch: &mut Scratch,
        merge: bool,
    ) -> EntryRef {
        let pos = self.segments.iter().position(|s| s.gen >= gen);
        let idx = match pos {
            Some(i) if self.segments[i].gen == gen => i,
            Some(i) => {
                let cold = self.cold.create(gen);
                self.segments
                    .insert(i, Segment::new(gen, self.layout.tables(), cold));
                i
            }
            None => {
                // The newest generation so far: the one before it is complete unless late
                // posts arrive, so its postings are merged into their compact form now.
                if let Some(prev) = self.segments.back_mut() {
                    prev.compact(&self.layout, &self.verify);
                }
                self.reindex_columns();
                let cold = self.cold.create(gen);
                self.segments
                    .push_back(Segment::new(gen, self.layout.tables(), cold));
                self.segments.len() - 1
            }
        };
        let ix = Indexer::new(&self.layout, &self.cfg, &self.verify, self.min_gram_chars);
        let slot = ix.add(&mut self.segments[idx], entry, &mut scratch.grams, merge);
        EntryRef { gen, slot }
    }

    fn simhash_only(&self) -> bool {
        self.verify.mode == VerifyMode::SimhashOnly
    }

    fn gram_path(&self) -> bool {
        !self.simhash_only()
    }

    fn indexer(&self) -> Indexer<'_> {
        Indexer::new(&self.layout, &self.cfg, &self.verify, self.min_gram_chars)
    }

    /// Whether an entry with `tokens` distinct tokens goes into the block tables.
    fn tabled(&self, tokens: usize) -> bool {
        self.indexer().tabled(tokens)
    }

    fn gram_indexed(&self, chars: usize) -> bool {
        self.indexer().gram_indexed(chars)
    }
}

/// Asks the CPU to load the cache line holding `at` ahead of its use, so that the cache misses
/// of a batch of random reads overlap instead of following one another. A hint only; nothing
/// happens elsewhere than on x86-64.
#[inline]
pub(crate) fn prefetch<T>(at: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults, and `at` is a live reference.
        unsafe { _mm_prefetch(std::ptr::from_ref(at).cast::<i8>(), _MM_HINT_T0) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[cfg(test)]
mod tests;
