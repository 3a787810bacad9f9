//! A post another worker owns, decided here ahead of its owner as far as the index goes: when
//! its decision is certain to make it unique, its entry is known exactly before its owner
//! publishes it, and the posts of this worker that wait for it need not wait.

use super::{Engine, Entry, OrderKey, PostId, Query, QueryStats, Scratch};
use crate::index::grams::Gram;
use crate::types::EventTime;
use crate::verify::Sketch;

impl Engine {
    /// Adds to the index the entry of the post with key `key`, id `id`, event time `time` and
    /// analysis `sketch` and `grams`, not decided yet by the worker that owns its partition,
    /// when that decision is certain to make it a unique post stored in generation
    /// `generation(time)`: nothing the post sees matches it. The caller vouches that no post
    /// ordered before it that it could match is undecided (every entry it will see is in this
    /// index); then the owner's decision finds nothing either, and stores the same entry, which
    /// this index recognizes when the changelog brings it (by generation, key and text hash).
    /// Returns the entry and its generation, or `None` (nothing added) when that is not
    /// certain:
    /// - the post has no event time, or might be late (its generation before the window at its
    ///   key's watermark, which bounds its own from above);
    /// - this index has dropped a generation the post's window may need (from the window at its
    ///   own time, which bounds the decision's from below), or that generation's entry cannot
    ///   be added;
    /// - the search found a match, or was cut short (a scan cap, the verification budget, an
    ///   unreadable record), where the owner's might not be;
    /// - an entry with its id and text is already in that generation (a rerun: the owner
    ///   stores nothing).
    pub fn unique_ahead(
        &mut self,
        key: &OrderKey,
        (id, time): (&PostId, Option<EventTime>),
        sketch: Sketch<'_>,
        grams: &[Gram],
    ) -> Option<(i64, Entry)> {
        let t = time?.0;
        let gen = self.window.generation(t);
        if sketch.chars.is_empty() || gen < self.window.min_live_generation(key.tau) {
            return None;
        }
        let min_gen = self.window.min_live_generation(t);
        if self.dropped_below.is_some_and(|d| d > min_gen)
            || !self.admits(gen, key, sketch.text_hash)
            || self.index.has_copy(gen, id, sketch.text_hash)
        {
            return None;
        }
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
        if self
            .index
            .find(&q, &mut Scratch::default(), &mut stats)
            .is_some()
            || stats.bucket_scans_capped > 0
            || stats.posting_scans_capped > 0
            || stats.verify_budget_exhausted > 0
            || stats.candidates_unverified > 0
            || stats.cold_read_errors > 0
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
        Some((gen, entry))
    }
}
