//! The two similarity candidate sources of one generation: SimHash block-table buckets and the
//! bigram posting lists (prefix and count filtering, see `grams`).

use super::{grams, EntryRef, Index, Query, QueryStats, Scratch, Segment};

/// How many records ahead a scan prefetches (`Store::prefetch`).
pub(super) const PREFETCH_AHEAD: usize = 8;

/// The newest `cap` of `slots` (a decoded list, oldest first), newest first, each record
/// prefetched `PREFETCH_AHEAD` slots before it is read.
fn newest_first<'a>(
    seg: &'a Segment,
    slots: &'a [u32],
    cap: usize,
) -> impl Iterator<Item = u32> + 'a {
    let newest = &slots[slots.len().saturating_sub(cap)..];
    newest.iter().enumerate().rev().map(move |(i, &slot)| {
        if let Some(&ahead) = i.checked_sub(PREFETCH_AHEAD).and_then(|j| newest.get(j)) {
            seg.store.prefetch(ahead);
        }
        slot
    })
}

impl Index {
    pub(super) fn simhash_candidates(
        &self,
        seg: &Segment,
        q: &Query<'_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) {
        if !self.tabled(q.sketch.tokens.len()) {
            return;
        }
        let fp = q.sketch.fingerprint;
        for (t, table) in seg.tables.iter().enumerate() {
            let bucket = table.get(&self.layout.key(t, fp));
            stats.bucket_sizes.observe(bucket.len() as u64);
            if bucket.len() > self.cfg.bucket_scan_cap {
                stats.bucket_scans_capped += 1;
            }
            scratch.slots.clear();
            bucket.append_to(&mut scratch.slots);
            for slot in newest_first(seg, &scratch.slots, self.cfg.bucket_scan_cap) {
                if (seg.store.meta(slot).fingerprint ^ fp.0).count_ones() <= self.cfg.max_distance {
                    scratch.cands.push(EntryRef { gen: seg.gen, slot });
                }
            }
        }
    }

    pub(super) fn gram_candidates(
        &self,
        seg: &Segment,
        q: &Query<'_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) {
        let n = q.sketch.chars.len();
        if !self.gram_path()
            || n < self.min_gram_chars
            || q.grams.is_empty()
            || seg.grams.is_empty()
        {
            return;
        }
        let missing = grams::max_missing_grams(n, &self.verify);
        scratch.lists.clear();
        for (i, g) in q.grams.iter().enumerate() {
            let len = seg.grams.get(g).len() as u32;
            scratch.lists.push((i, len));
        }
        // Any `missing + 1` distinct grams are complete (see grams::max_missing_grams): take the
        // rarest in this generation to keep the scan short.
        scratch.lists.sort_unstable_by_key(|&(i, len)| (len, i));
        let need = grams::count_threshold(&scratch.lists, missing, self.cfg.posting_scan_cap);
        if need > 1 {
            self.counted_gram_candidates(seg, q, missing + need, need, scratch);
            return;
        }
        let mut budget = self.cfg.posting_scan_cap;
        for &(i, len) in scratch.lists.iter().take(missing + 1) {
            if len == 0 {
                continue;
            }
            let list = seg.grams.get(&q.grams[i]);
            if list.len() > budget {
                stats.posting_scans_capped += 1;
            }
            scratch.slots.clear();
            list.append_to(&mut scratch.slots);
            for slot in newest_first(seg, &scratch.slots, budget) {
                if self.comparable_lengths(n, seg.store.meta(slot).chars) {
                    scratch.cands.push(EntryRef { gen: seg.gen, slot });
                }
            }
            budget = budget.saturating_sub(list.len());
            if budget == 0 {
                break;
            }
        }
    }

    /// Count filtering: scans the `probes` rarest lists of `scratch.lists` in full (their total
    /// fits `posting_scan_cap`, see `grams::count_threshold`) and keeps an entry only if it
    /// occurs in at least `need` of them, since a match under the char rules lacks at most
    /// `probes - need` of the query's grams, and in one of the first `probes - need + 1` (the
    /// plain prefix filter's lists), so the candidates are a subset of the plain prefix
    /// filter's. The bigram path answers for the char rules only: the SimHash rule's candidates
    /// come from the block tables.
    fn counted_gram_candidates(
        &self,
        seg: &Segment,
        q: &Query<'_>,
        probes: usize,
        need: usize,
        scratch: &mut Scratch,
    ) {
        let prefix = probes - need + 1;
        scratch.hits.clear();
        for (k, &(i, _)) in scratch.lists.iter().take(probes).enumerate() {
            let list = seg.grams.get(&q.grams[i]);
            // Low bit: seen in the plain prefix filter's lists.
            let in_prefix = u64::from(k < prefix);
            scratch
                .hits
                .extend(list.iter().map(|slot| (u64::from(slot) << 1) | in_prefix));
        }
        scratch.hits.sort_unstable();
        // The slots worth a look first, then their records, read with a prefetch a few slots
        // ahead: each record is a cache miss of its own.
        scratch.runs.clear();
        // Each list holds a slot at most once, so a run's length is the slot's count.
        for run in scratch.hits.chunk_by(|a, b| a >> 1 == b >> 1) {
            if run.len() >= need && run.iter().any(|h| h & 1 == 1) {
                scratch.runs.push(run[0] >> 1);
            }
        }
        let n = q.sketch.chars.len();
        for (i, &slot) in scratch.runs.iter().enumerate() {
            if let Some(&ahead) = scratch.runs.get(i + PREFETCH_AHEAD) {
                seg.store.prefetch(ahead as u32);
            }
            let slot = slot as u32;
            if self.comparable_lengths(n, seg.store.meta(slot).chars) {
                scratch.cands.push(EntryRef { gen: seg.gen, slot });
            }
        }
    }

    /// Both char rules need comparable lengths; the gram path skips the rest before verification.
    fn comparable_lengths(&self, query_chars: usize, entry_chars: u32) -> bool {
        entry_chars as f32 >= self.min_len_ratio * query_chars as f32
            && query_chars as f32 >= self.min_len_ratio * entry_chars as f32
    }
}
