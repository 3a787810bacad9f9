//! The two similarity candidate sources of one generation: SimHash block-table buckets and the
//! bigram posting lists (prefix and count filtering, see `grams`; a sealed generation's are in
//! prefix form, see `prefix`).

use super::newest::{Newest, LONG};
use super::postings::List;
use super::prefix::{PrefixPostings, NO_LISTS};
use super::{grams, EntryRef, Index, Query, QueryStats, Scratch, Segment};

/// How many records ahead a scan prefetches (`Store::prefetch`).
pub(super) const PREFETCH_AHEAD: usize = 8;

/// The flag bit of a slot's counter on the counted bigram path.
const IN_PREFIX: u8 = 0x80;

/// An emptied `v` with its allocation kept, for lists borrowed from another segment (the
/// in-place `collect` of an empty vector into one of a type with the same layout).
fn recycle<'b>(mut v: Vec<List<'_>>) -> Vec<List<'b>> {
    v.clear();
    v.into_iter().map(|_| List::default()).collect()
}

/// The items of `items` in order, each `PREFETCH_AHEAD` places ahead handed to `prefetch` as
/// one is taken, and the first `PREFETCH_AHEAD` before the first: a scan of records at random
/// slots then overlaps their cache misses from its start (most scans are shorter than that).
pub(super) fn prefetched<'a, T>(
    items: &'a [T],
    prefetch: impl Fn(&T) + 'a,
) -> impl Iterator<Item = &'a T> + 'a {
    items.iter().take(PREFETCH_AHEAD).for_each(&prefetch);
    items.iter().enumerate().map(move |(i, item)| {
        if let Some(ahead) = items.get(i + PREFETCH_AHEAD) {
            prefetch(ahead);
        }
        item
    })
}

/// The newest `cap` of `slots` (a decoded list, oldest first, reordered in place), newest
/// first, their records prefetched ahead (`prefetched`).
fn newest_first<'a>(
    seg: &'a Segment,
    slots: &'a mut Vec<u32>,
    cap: usize,
) -> impl Iterator<Item = u32> + 'a {
    slots.drain(..slots.len().saturating_sub(cap));
    slots.reverse();
    prefetched(slots, |&s| seg.store.prefetch(s)).copied()
}

impl Index {
    /// Asks for what the first lookups of `q`'s candidates in `seg` read (its sealed block
    /// tables' directory entries, its gram dictionary's entries, and the buckets of the run keys
    /// of its mutable tables and postings), so that they are in cache
    /// when `seg` is searched: called while the generation before it is searched (and before
    /// the first).
    pub(super) fn prefetch_candidates(&self, seg: &Segment, q: &Query<'_>) {
        if self.tabled(q.sketch.tokens.len()) {
            let fp = q.sketch.fingerprint;
            for (t, sealed) in seg.sealed_tables.iter().enumerate() {
                sealed.prefetch_dir(self.layout.permuted(t, fp));
            }
            for (t, table) in seg.tables.iter().enumerate() {
                table.prefetch(&self.layout.key(t, fp));
            }
        }
        if self.gram_path() && q.sketch.chars.len() >= self.min_gram_chars {
            if let Some(p) = &seg.prefix {
                match self.columns.column(seg.gen) {
                    // The joint table, for every sealed generation at once: asked for ahead
                    // of the newest one, the first a search reaches.
                    Some(c) if c + 1 == self.columns.width() => self.columns.prefetch_all(q.grams),
                    Some(_) => {}
                    None => p.prefetch_ranks(q.grams),
                }
            }
            for g in q.grams {
                seg.grams.prefetch(g);
            }
        }
    }

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
        let cap = self.cfg.bucket_scan_cap;
        // Every table's newest `bucket_scan_cap` slots first (those added since the generation
        // was sealed are the newest), then their fingerprints: buckets are short, so a prefetch
        // ahead within one bucket would come too late. A sealed table's scan leaves out the
        // slots whose stored fragment is already too far.
        scratch.slots.clear();
        // The sealed tables' buckets asked for ahead (their directory entries were, by
        // `prefetch_candidates`): each is a cache miss, and four tables' misses then overlap.
        let permuted = |t| self.layout.permuted(t, fp);
        for (t, sealed) in seg.sealed_tables.iter().enumerate() {
            sealed.prefetch_bucket(permuted(t));
        }
        for (t, table) in seg.tables.iter().enumerate() {
            let bucket = table.get(&self.layout.key(t, fp));
            let start = scratch.slots.len();
            bucket.append_to(&mut scratch.slots);
            let older = (scratch.slots.len() - start).saturating_sub(cap);
            scratch.slots.drain(start..start + older);
            let mut size = bucket.len();
            if let Some(sealed) = seg.sealed_tables.get(t) {
                let left = cap.saturating_sub(bucket.len());
                size += sealed.scan(permuted(t), self.cfg.max_distance, left, &mut scratch.slots);
            }
            stats.bucket_sizes.observe(size as u64);
            if size > cap {
                stats.bucket_scans_capped += 1;
            }
        }
        for &slot in prefetched(&scratch.slots, |&s| seg.store.prefetch(s)) {
            if (seg.store.meta(slot).fingerprint ^ fp.0).count_ones() <= self.cfg.max_distance {
                scratch.cands.push(EntryRef { gen: seg.gen, slot });
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
        if !self.gram_path() || n < self.min_gram_chars || q.grams.is_empty() {
            return;
        }
        if let Some(p) = &seg.prefix {
            self.prefix_candidates(seg, p, q, scratch, stats);
        }
        if seg.grams.is_empty() {
            return;
        }
        let missing = grams::max_missing_grams(n, &self.verify);
        // One lookup per gram: its list is kept for the scan, by the gram's position.
        let mut found = recycle(std::mem::take(&mut scratch.found));
        // A match lacks at most `missing` of the query's grams: once more than that are absent
        // from the whole generation (a small one, usually), no entry of it can match.
        let mut absent = 0;
        for g in q.grams {
            let list = seg.grams.get(g);
            absent += usize::from(list.is_empty());
            if absent > missing {
                scratch.found = recycle(found);
                return;
            }
            found.push(list);
        }
        scratch.lists.clear();
        scratch
            .lists
            .extend(found.iter().enumerate().map(|(i, l)| (i, l.len() as u32)));
        // Any `missing + 1` distinct grams are complete (see grams::max_missing_grams): take the
        // rarest in this generation to keep the scan short.
        scratch.lists.sort_unstable_by_key(|&(i, len)| (len, i));
        let need = grams::count_threshold(&scratch.lists, missing, self.cfg.posting_scan_cap);
        if need > 1 {
            self.counted_gram_candidates(seg, q, &found, missing + need, need, scratch);
            scratch.found = recycle(found);
            return;
        }
        let mut budget = self.cfg.posting_scan_cap;
        for &(i, len) in scratch.lists.iter().take(missing + 1) {
            if len == 0 {
                continue;
            }
            let list = found[i];
            if list.len() > budget {
                stats.posting_scans_capped += 1;
            }
            scratch.slots.clear();
            list.append_to(&mut scratch.slots);
            for slot in newest_first(seg, &mut scratch.slots, budget) {
                if self.comparable_lengths(n, seg.store.meta(slot).chars()) {
                    scratch.cands.push(EntryRef { gen: seg.gen, slot });
                }
            }
            budget = budget.saturating_sub(list.len());
            if budget == 0 {
                break;
            }
        }
        scratch.found = recycle(found);
    }

    /// The prefix path of a sealed generation (see `prefix`): the query's grams ranked in the
    /// generation's order, and for the first `max_missing_grams + 1` of them the lists that can
    /// hold a match, newest first, within `posting_scan_cap` postings. An entry reached only as
    /// a possible containment must also be on the right side of the query's length.
    fn prefix_candidates(
        &self,
        seg: &Segment,
        p: &PrefixPostings,
        q: &Query<'_>,
        scratch: &mut Scratch,
        stats: &mut QueryStats,
    ) {
        let n = q.sketch.chars.len();
        let mx = grams::max_missing_grams(n, &self.verify);
        let ex = grams::edit_missing_grams(n, &self.verify);
        scratch.ranked.clear();
        let ranked = &mut scratch.ranked;
        match self.columns.column(seg.gen) {
            Some(c) => {
                if !scratch.columns_read {
                    scratch.columns.clear();
                    self.columns
                        .rank_all(q.grams, (0, NO_LISTS), &mut scratch.columns);
                    scratch.columns_read = true;
                }
                let at = scratch.columns.iter().skip(c).step_by(self.columns.width());
                ranked.extend(
                    q.grams
                        .iter()
                        .zip(at)
                        .map(|(&g, &(n, start))| (n, g, start)),
                );
            }
            None => p.rank_all(q.grams, |g, (count, start)| ranked.push((count, g, start))),
        }
        let probes = (mx + 1).min(scratch.ranked.len());
        if probes < scratch.ranked.len() {
            scratch.ranked.select_nth_unstable(probes - 1);
        }
        scratch.ranked[..probes].sort_unstable();
        // Each list's header is a cache miss of its own: ask for all of them first.
        for &(_, _, start) in &scratch.ranked[..probes] {
            p.prefetch_lists(start);
        }
        // The lists' newest slots within `posting_scan_cap`, kept if their length (the byte
        // beside each, unless the entry is too long for it) is on the side the list asks for and
        // comparable: only the candidates kept have their records read (by verification).
        let mut budget = self.cfg.posting_scan_cap;
        for i in 0..probes {
            let lists = p.lists(scratch.ranked[i].2);
            // (list, the rules a match found there can verify by: see the module documentation
            // of `prefix`; the lengths they allow are checked below).
            let scans = [
                (
                    lists.first,
                    match i {
                        0 => Rules::Any,
                        _ if i <= ex => Rules::EditOrContained(Side::Shorter),
                        _ => Rules::Contained(Side::Shorter),
                    },
                ),
                (
                    if i <= ex {
                        lists.edit
                    } else {
                        Newest::default()
                    },
                    match i {
                        0 => Rules::EditOrContained(Side::Longer),
                        _ => Rules::Edit,
                    },
                ),
                (
                    if i == 0 {
                        lists.containing
                    } else {
                        Newest::default()
                    },
                    Rules::Contained(Side::Longer),
                ),
            ];
            for (list, rules) in scans {
                if list.is_empty() || budget == 0 {
                    continue;
                }
                if list.len() > budget {
                    stats.posting_scans_capped += 1;
                }
                for (slot, chars) in list.iter_sized().take(budget) {
                    let m = match chars {
                        LONG => seg.store.meta(slot).chars(),
                        short => u32::from(short),
                    };
                    if self.lengths_allow(rules, n, m) {
                        scratch.cands.push(EntryRef { gen: seg.gen, slot });
                    }
                }
                budget = budget.saturating_sub(list.len());
            }
        }
    }

    /// Count filtering: scans the `probes` rarest lists of `scratch.lists` in full (their total
    /// fits `posting_scan_cap`, see `grams::count_threshold`) and keeps an entry only if it
    /// occurs in at least `need` of them, since a match under the char rules lacks at most
    /// `probes - need` of the query's grams, and in one of the first `probes - need + 1` (the
    /// plain prefix filter's lists), so the candidates are a subset of the plain prefix
    /// filter's. The bigram path answers for the char rules only: the SimHash rule's candidates
    /// come from the block tables. `found` holds each query gram's list.
    ///
    /// Counts go to a per-slot counter array (`scratch.counts`, zero between calls): one
    /// increment per posting instead of a sort of all of them.
    fn counted_gram_candidates(
        &self,
        seg: &Segment,
        q: &Query<'_>,
        found: &[List<'_>],
        probes: usize,
        need: usize,
        scratch: &mut Scratch,
    ) {
        let prefix = probes - need + 1;
        let counts = &mut scratch.counts;
        if counts.len() < seg.store.len() {
            counts.resize(seg.store.len(), 0);
        }
        scratch.touched.clear();
        for (k, &(i, _)) in scratch.lists.iter().take(probes).enumerate() {
            // High bit: seen in the plain prefix filter's lists; the low bits count (up to 127,
            // more than `need` ever is).
            let in_prefix = if k < prefix { IN_PREFIX } else { 0 };
            for slot in found[i].iter() {
                let c = &mut counts[slot as usize];
                if *c == 0 {
                    scratch.touched.push(slot);
                }
                *c = (*c & IN_PREFIX | in_prefix) | ((*c & !IN_PREFIX) + 1).min(!IN_PREFIX);
            }
        }
        // The slots worth a look first (and every counter back to zero), then their records,
        // read with a prefetch a few slots ahead: each record is a cache miss of its own.
        let mut kept = 0;
        for i in 0..scratch.touched.len() {
            let slot = scratch.touched[i];
            let c = std::mem::take(&mut counts[slot as usize]);
            if c & IN_PREFIX != 0 && usize::from(c & !IN_PREFIX) >= need {
                scratch.touched[kept] = slot;
                kept += 1;
            }
        }
        scratch.touched.truncate(kept);
        let n = q.sketch.chars.len();
        for &slot in prefetched(&scratch.touched, |&s| seg.store.prefetch(s)) {
            if self.comparable_lengths(n, seg.store.meta(slot).chars()) {
                scratch.cands.push(EntryRef { gen: seg.gen, slot });
            }
        }
    }

    /// Both char rules need comparable lengths; the gram path skips the rest before verification.
    fn comparable_lengths(&self, query_chars: usize, entry_chars: u32) -> bool {
        entry_chars as f32 >= self.min_len_ratio * query_chars as f32
            && query_chars as f32 >= self.min_len_ratio * entry_chars as f32
    }

    /// Whether an entry of `entry_chars` characters, found in a prefix list whose matches verify
    /// by `rules`, may match a query of `query_chars`: the edit rule's band (as
    /// `verify::may_accept` computes it), or comparable lengths with the entry on the side a
    /// containment needs.
    fn lengths_allow(&self, rules: Rules, query_chars: usize, entry_chars: u32) -> bool {
        let m = entry_chars as usize;
        let edit = || {
            let (short, long) = (query_chars.min(m), query_chars.max(m));
            long - short <= crate::verify::max_edits(long, &self.verify)
        };
        let contained = |side| {
            let sided = match side {
                Side::Shorter => m <= query_chars,
                Side::Longer => m >= query_chars,
            };
            sided && self.comparable_lengths(query_chars, entry_chars)
        };
        match rules {
            Rules::Any => self.comparable_lengths(query_chars, entry_chars),
            Rules::EditOrContained(side) => edit() || contained(side),
            Rules::Edit => edit(),
            Rules::Contained(side) => contained(side),
        }
    }
}

/// The char rules a match found in one prefix list can verify by (see `prefix`).
#[derive(Clone, Copy, Debug)]
enum Rules {
    /// Either rule, the entry on either side.
    Any,
    /// The edit rule, or a containment with the entry on this side.
    EditOrContained(Side),
    /// The edit rule alone.
    Edit,
    /// A containment with the entry on this side.
    Contained(Side),
}

/// Where an entry lies against the query in a containment.
#[derive(Clone, Copy, Debug)]
enum Side {
    /// Inside the query: not longer.
    Shorter,
    /// Around it: not shorter.
    Longer,
}
