//! Read-only views of the index for `inspect` and `explain`: live entries, per-generation
//! structure sizes, and which candidate sources surface an entry for a query.

use serde::Serialize;

use super::grams::Gram;
use super::{Entry, EntryRef, Index, IndexConfig, Query, QueryStats, Scratch};
use crate::verify::VerifyConfig;

/// Which candidate sources surface an entry for a query (for `inspect` and `explain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Sources {
    /// The exact map (identical normalized text).
    pub exact: bool,
    /// A SimHash block-table bucket, within `max_distance`.
    pub simhash: bool,
    /// The bigram probes.
    pub gram: bool,
}

/// The shape of one generation's structures, for `inspect`.
#[derive(Clone, Debug, Default)]
pub struct SegmentShape {
    /// Generation.
    pub gen: i64,
    /// Entries (copies included).
    pub entries: usize,
    /// Entries in the block tables.
    pub tabled: usize,
    /// Entries in the bigram index.
    pub gram_indexed: usize,
    /// Entries in both.
    pub both: usize,
    /// Block-table buckets: (table, key, entries, newest slot).
    pub buckets: Vec<(usize, u64, usize, u32)>,
    /// Bigram posting lists: (gram, entries posted under it, newest slot). A sealed generation
    /// posts an entry under its prefix grams only (`prefix`), so a gram can be listed twice:
    /// once for the sealed entries, once for those added since.
    pub postings: Vec<(Gram, usize, u32)>,
}

impl Index {
    /// Every live entry, oldest generation first, in insertion order (rebuilt from the compact
    /// form).
    pub(crate) fn entries(&self) -> impl Iterator<Item = (EntryRef, Entry)> + '_ {
        self.segments.iter().flat_map(|s| {
            (0..s.store.len() as u32).filter_map(move |slot| {
                Some((EntryRef { gen: s.gen, slot }, s.store.entry(slot).ok()?))
            })
        })
    }

    /// The configured index shape.
    pub(crate) fn config(&self) -> &IndexConfig {
        &self.cfg
    }

    /// The verification thresholds the index verifies with.
    pub(crate) fn verify_config(&self) -> &VerifyConfig {
        &self.verify
    }

    /// Per-generation structure sizes.
    pub(crate) fn shape(&self) -> Vec<SegmentShape> {
        self.segments
            .iter()
            .map(|s| {
                let mut sh = SegmentShape {
                    gen: s.gen,
                    entries: s.store.len(),
                    ..SegmentShape::default()
                };
                for slot in 0..s.store.len() as u32 {
                    let m = s.store.meta(slot);
                    let t = self.tabled(m.tokens());
                    let g = self.gram_indexed(m.chars() as usize);
                    sh.tabled += usize::from(t);
                    sh.gram_indexed += usize::from(g);
                    sh.both += usize::from(t && g);
                }
                for (t, table) in s.tables.iter().enumerate() {
                    sh.buckets.extend(
                        table
                            .iter()
                            .map(|(k, v)| (t, k, v.len(), v.last().unwrap_or(0))),
                    );
                }
                for (t, table) in s.sealed_tables.iter().enumerate() {
                    sh.buckets
                        .extend(table.buckets().map(|(k, n, newest)| (t, k, n, newest)));
                }
                sh.postings.extend(
                    s.grams
                        .iter()
                        .map(|(g, v)| (g, v.len(), v.last().unwrap_or(0))),
                );
                if let Some(p) = &s.prefix {
                    let dict = self.dictionary_of(s).into_iter();
                    sh.postings.extend(p.lists_of(dict).map(|(g, l)| {
                        let newest = [l.first, l.edit, l.containing]
                            .iter()
                            .filter_map(|v| v.iter().next())
                            .max();
                        (g, l.len(), newest.unwrap_or(0))
                    }));
                }
                sh
            })
            .collect()
    }

    /// Every entry the candidate search of `find` would verify for `q`, with the sources that
    /// surface it. Uses the same per-segment searches as `find`, one source at a time.
    pub(crate) fn candidate_sources(&self, q: &Query<'_>) -> Vec<(EntryRef, Sources)> {
        let mut found: std::collections::BTreeMap<EntryRef, Sources> = Default::default();
        let mut stats = QueryStats::default();
        for seg in self.live_segments(q) {
            if let Some(slot) = seg.earliest(q.sketch.text_hash, q.sketch.chars) {
                let mut buf = Vec::new();
                if seg
                    .store
                    .cold(slot, &mut buf)
                    .is_ok_and(|c| seg.same_text(slot, &c, q.sketch.chars))
                {
                    let r = EntryRef { gen: seg.gen, slot };
                    found.entry(r).or_default().exact = true;
                }
            }
            let mut scratch = Scratch::default();
            self.simhash_candidates(seg, q, &mut scratch, &mut stats);
            for r in scratch.cands.drain(..) {
                found.entry(r).or_default().simhash = true;
            }
            self.gram_candidates(seg, q, &mut scratch, &mut stats);
            for r in scratch.cands.drain(..) {
                found.entry(r).or_default().gram = true;
            }
        }
        found
            .into_iter()
            .filter(|(r, _)| {
                self.get(*r)
                    .is_some_and(|e| e.id != *q.id && q.before.sees(&e.key, &q.visibility))
            })
            .collect()
    }
}
