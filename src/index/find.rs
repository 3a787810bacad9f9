//! A query's search: an exact copy of its text first, then the similarity candidates of one
//! generation at a time, newest first, each verified. The search ends with the newest generation
//! that holds a match, so a duplicate costs the generations it reaches, not the whole window.

use super::candidates::prefetched;
use super::store::Cold;
use super::{EntryRef, Index, Query, QueryStats, Scratch, Segment};
use crate::types::{EventTime, PostId};
use crate::verify::{score_bound, unverified, verify_within, Bits, Budget, Match};

/// A query's match: the entry, how it matched, and the cluster it names (read with the entry's
/// record during the search, so that a duplicate's verdict needs no second read).
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The matched entry.
    pub r: EntryRef,
    /// How it matched.
    pub m: Match,
    /// The entry's representative id.
    pub cluster: PostId,
    /// The representative's event time.
    pub time: EventTime,
}

impl Found {
    fn of(r: EntryRef, m: Match, cold: &Cold<'_>) -> Found {
        Found {
            r,
            m,
            cluster: PostId(cold.id.to_string()),
            time: cold.time,
        }
    }
}

/// The verification state of one query across generations.
struct Verifying<'q, 'a> {
    q: &'q Query<'a>,
    bits: Bits,
    budget: Budget,
    best: Option<Found>,
}

impl Index {
    /// Finds the best verified earlier match of `q` in the newest generation that holds one.
    /// Within a generation ties go to the older entry, so the result is deterministic.
    ///
    /// The newest generation wins (as it does for exact copies) because a cluster that keeps
    /// receiving duplicates is copied into the newest generation of each (`Engine::refresh`):
    /// a live cluster is found there, without the candidates of every older generation.
    pub fn find(
        &self,
        q: &Query<'_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) -> Option<Found> {
        if let Some(found) = self.find_exact(q, scratch, stats) {
            return found;
        }
        let mut v = Verifying {
            q,
            bits: Bits::of(&q.sketch),
            budget: Budget::new(self.verify.max_verify_cells_per_post),
            best: None,
        };
        scratch.columns_read = false;
        let mut segs = self.live_segments(q).peekable();
        if let Some(newest) = segs.peek() {
            self.prefetch_candidates(newest, q);
        }
        while let Some(seg) = segs.next() {
            if let Some(older) = segs.peek() {
                self.prefetch_candidates(older, q);
            }
            scratch.cands.clear();
            self.simhash_candidates(seg, q, scratch, stats);
            self.gram_candidates(seg, q, scratch, stats);
            let mut cands = std::mem::take(&mut scratch.cands);
            // Oldest slot first: the first of equal scores wins.
            cands.sort_unstable_by_key(|r| r.slot);
            cands.dedup();
            let exhausted = self.verify_generation(seg, &cands, &mut v, scratch, stats);
            scratch.cands = cands;
            if exhausted || v.best.is_some() {
                break;
            }
        }
        stats.verify_cells += v.budget.spent();
        v.best
    }

    /// The live generations of `q`'s window, from `q.max_gen` down to `q.min_gen`, newest
    /// first.
    pub(super) fn live_segments<'s>(
        &'s self,
        q: &Query<'_>,
    ) -> impl Iterator<Item = &'s Segment> + 's {
        let (min_gen, max_gen) = (q.min_gen, q.max_gen);
        let end = self.segments.partition_point(|s| s.gen <= max_gen);
        self.segments
            .range(..end)
            .rev()
            .take_while(move |s| s.gen >= min_gen)
    }

    /// The verdict on the newest entry `q` sees whose text is the query's, if there is one.
    fn find_exact(
        &self,
        q: &Query<'_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) -> Option<Option<Found>> {
        // Each generation's table is a cache miss of its own: ask for all of them first.
        for seg in self.live_segments(q) {
            seg.prefetch_text(q.sketch.text_hash);
        }
        for seg in self.live_segments(q) {
            let Some(slot) = seg.earliest(q.sketch.text_hash, q.sketch.chars) else {
                continue;
            };
            let Ok(cold) = seg.store.cold(slot, &mut scratch.cold) else {
                stats.cold_read_errors += 1;
                continue;
            };
            if cold.id != q.id.0
                && q.before.sees(&cold.key, &q.visibility)
                && seg.same_text(slot, &cold, q.sketch.chars)
            {
                let e = cold.sketch(
                    seg.store.meta(slot),
                    &mut scratch.chars,
                    &mut scratch.tokens,
                );
                stats.candidates += 1;
                let r = EntryRef { gen: seg.gen, slot };
                let mut budget = Budget::unlimited();
                let m = verify_within(&q.sketch, &e, &self.verify, &mut budget);
                stats.verify_cells += budget.spent();
                return Some(m.ok().flatten().map(|m| Found::of(r, m, &cold)));
            }
        }
        None
    }

    /// Verifies the candidates of one generation (`cands`, distinct, in slot order), keeping the
    /// best match in `v`. Returns true when the post's verification budget ran out.
    fn verify_generation(
        &self,
        seg: &Segment,
        cands: &[EntryRef],
        v: &mut Verifying<'_, '_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) -> bool {
        let q = v.q;
        for (i, r) in prefetched(cands, |r| seg.store.prefetch(r.slot)).enumerate() {
            if !seg.has_slot(r.slot) {
                continue;
            }
            let meta = seg.store.meta(r.slot);
            if !self.simhash_only() {
                // Rejected by verification's own gates, without reading the entry (nothing is
                // charged to the budget either way). Its own id or a later key would have
                // skipped it before verification; a gate-rejected one counts as verified. (The
                // post's own entry, re-processed, has its text hash and always passes.)
                let Some(bound) = score_bound(&q.sketch, &v.bits, &meta.gates(), &self.verify)
                else {
                    stats.candidates += 1;
                    stats.verify_rejects += 1;
                    stats.gate_rejects += 1;
                    continue;
                };
                // A later slot replaces the match found only with a higher score: one that
                // cannot score higher is not read (the verdict is the same).
                if v.best.as_ref().is_some_and(|b| bound <= b.m.score) {
                    stats.outranked += 1;
                    continue;
                }
            }
            let Ok(cold) = seg.store.cold(r.slot, &mut scratch.cold) else {
                stats.cold_read_errors += 1;
                continue;
            };
            if cold.id == q.id.0 || !q.before.sees(&cold.key, &q.visibility) {
                continue;
            }
            stats.candidates += 1;
            let e = cold.sketch(meta, &mut scratch.chars, &mut scratch.tokens);
            let verdict = if self.simhash_only() {
                Some(unverified(&q.sketch, &e, &self.verify))
            } else {
                match verify_within(&q.sketch, &e, &self.verify, &mut v.budget) {
                    Ok(m) => m,
                    Err(_) => {
                        // Candidates are in a deterministic order, so the cut is too.
                        stats.verify_budget_exhausted = 1;
                        stats.candidates_unverified += (cands.len() - i) as u64;
                        stats.candidates -= 1;
                        return true;
                    }
                }
            };
            match verdict {
                Some(m) if v.best.as_ref().is_none_or(|b| m.score > b.m.score) => {
                    v.best = Some(Found::of(*r, m, &cold))
                }
                Some(_) => {}
                None => stats.verify_rejects += 1,
            }
        }
        false
    }
}
