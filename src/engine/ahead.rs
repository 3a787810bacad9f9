//! A post another worker owns, decided here ahead of its owner as far as the index goes: when
//! its decision is certain to store its own entry (a unique post) or nothing (a duplicate whose
//! match is in its own generation or newer), that is known before its owner publishes it, and
//! the posts of this worker that wait for it need not wait.

use super::{Engine, Entry, OrderKey, PostId, Query, QueryStats, Scratch};
use crate::index::grams::Gram;
use crate::types::EventTime;
use crate::verify::Sketch;

/// What the owner's decision of a post decided ahead will store (`Engine::decide_ahead`).
#[derive(Debug, PartialEq)]
pub enum Ahead {
    /// A unique post: its entry, in generation `.0`, added to this index already.
    Unique(i64, Entry),
    /// A duplicate that stores nothing: its match is in its own generation or newer.
    Duplicate,
}

impl Engine {
    /// Decides for this index the post with key `key`, id `id`, event time `time` and analysis
    /// `sketch` and `grams`, not decided yet by the worker that owns its partition, when that
    /// decision is certain to make it unique, or a duplicate that stores nothing (`Ahead`).
    /// The caller vouches that no post ordered before it that it could match is undecided
    /// (every entry it will see is in this index); then the owner's decision finds the same
    /// match, or nothing. A unique post's entry is added as the owner will store it, which this
    /// index recognizes when the changelog brings it (by generation, key and text hash).
    /// Returns `None` (nothing added) when that is not certain:
    /// - the post has no event time, or might be late (its generation before the window at its
    ///   key's watermark, which bounds its own from above);
    /// - it is unique here but this index has dropped a generation the post's window may need
    ///   (from the window at its own time, which bounds the decision's from below);
    /// - the search was cut short (a scan cap, the verification budget, an unreadable record),
    ///   where the owner's might not be;
    /// - it is unique but an entry with its id and text is already in its generation (a rerun:
    ///   the owner stores nothing), or the entry cannot be added;
    /// - it is a duplicate whose decision copies its match into its own generation
    ///   (`Engine::decide`): whether a copy it does not see yet, made by an undecided post that
    ///   cannot match it, spares it that is not known here.
    pub fn decide_ahead(
        &mut self,
        key: &OrderKey,
        (id, time): (&PostId, Option<EventTime>),
        sketch: Sketch<'_>,
        grams: &[Gram],
    ) -> Option<Ahead> {
        let t = time?.0;
        let gen = self.window.generation(t);
        let live_from = self.window.min_live_generation(key.tau);
        if sketch.chars.is_empty() || gen < live_from {
            return None;
        }
        let min_gen = self.window.min_live_generation(t);
        let q = Query {
            id,
            before: *key,
            visibility: self.visibility,
            min_gen,
            max_gen: self.window.generation(key.tau),
            sketch,
            grams,
        };
        let mut stats = QueryStats::default();
        let found = self.index.find(&q, &mut Scratch::default(), &mut stats);
        if stats.bucket_scans_capped > 0
            || stats.posting_scans_capped > 0
            || stats.verify_budget_exhausted > 0
            || stats.candidates_unverified > 0
            || stats.cold_read_errors > 0
        {
            return None;
        }
        let Some(found) = found else {
            if self.dropped_below.is_some_and(|d| d > min_gen) {
                return None;
            }
            if !self.admits(gen, key, sketch.text_hash)
                || self.index.has_copy(gen, id, sketch.text_hash)
            {
                return None;
            }
            let entry = Entry {
                id: id.clone(),
                key: *key,
                time: EventTime(t),
                fingerprint: sketch.fingerprint,
                chars: sketch.chars.into(),
                text_hash: sketch.text_hash,
                tokens: sketch.tokens.into(),
            };
            self.index.insert(gen, &entry, &mut self.scratch);
            return Some(Ahead::Unique(gen, entry));
        };
        // Any match the owner finds is in that generation or newer: it copies none.
        (found.r.gen >= gen).then_some(Ahead::Duplicate)
    }
}
