//! The bigram postings of a sealed generation, prefix-filtered (as in AllPairs and PPJoin): the
//! generation's grams are ordered by how many of its entries hold them, rarest first (ties by
//! value), and each entry is posted only under its first `max_missing_grams + 1` grams in that
//! order, in one of three lists by its rank there. A query then scans a few short lists instead
//! of counting through the whole lists of its rarest grams.
//!
//! Why no match is missed: if gram sets X (the query's) and Y (an entry's) share `a` grams, then
//! in any one total order X's first `|X| - a + 1` grams and Y's first `|Y| - a + 1` share one
//! (were they disjoint, the shared grams would all lie after both, leaving X at most
//! `|X| - (|X| - a + 1)` places for them). With `grams::edit_missing_grams` (e) and
//! `grams::max_missing_grams` (m) of each text's own length:
//! - edit rule: `|X \ Y| <= ex` and `|Y \ X| <= ey`, so a shared gram has query rank `<= ex` and
//!   entry rank `<= ey`;
//! - the entry inside the query: `Y ⊆ X` and `|X \ Y| <= mx`, so the entry's first gram has query
//!   rank `<= mx`;
//! - the query inside the entry: `X ⊆ Y` and `|Y \ X| <= my`, so the query's first gram has
//!   entry rank `<= my`.
//!
//! Each entry is therefore posted under its grams of rank `0..=my`: rank 0 in the gram's `first`
//! list, ranks `1..=ey` in its `edit` list, the rest in its `containing` list. A query's gram of
//! rank `i <= mx` has its `first` list scanned, its `edit` list when `i <= ex`, and its
//! `containing` list when `i == 0`. A query gram absent from the generation counts 0 and ranks
//! first, as it must: no entry of the generation holds it.
//!
//! Each list is stored newest slot first, with each entry's length beside its slot (see
//! `newest`), so a scan cut at `posting_scan_cap` decodes only the slots it keeps, not a long
//! list from its oldest, and filters them by length without reading their records.
//!
//! The order is the generation's own, frozen when it is sealed: built again from the same entries
//! (a restart), a generation gets the same order and the same lists.

use super::grams::{edit_missing_grams, max_missing_grams, Gram};
use super::newest::{length_byte, put_newest_first, Newest};
use super::postings::{put_varint, take_varint, Postings};
use super::ranks::Ranks;
use crate::verify::VerifyConfig;

mod builder;
pub use builder::PrefixBuilder;

/// `start` of a gram that is in no entry's prefix.
pub(super) const NO_LISTS: u32 = u32::MAX;

/// Prefix-filtered postings (see the module documentation).
#[derive(Debug, Default)]
pub struct PrefixPostings {
    /// Per gram of the generation: how many entries hold it (its place in the order), and where
    /// its lists start in `run` (`NO_LISTS` if none). Moved into the index's joint table of the
    /// sealed generations' dictionaries once the generation is in it (`columns`).
    keys: Option<Ranks>,
    /// Per gram with lists: varints of the `first` list's length and bytes, the `edit` list's
    /// length and bytes, the `containing` list's length; then the three lists as varint gaps.
    run: Vec<u8>,
    postings: usize,
}

/// The three lists of one gram (see the module documentation), each newest slot first.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lists<'a> {
    /// Entries whose first gram it is.
    pub first: Newest<'a>,
    /// Entries for which it ranks `1..=ey`.
    pub edit: Newest<'a>,
    /// Entries for which it ranks above `ey`, up to `my`.
    pub containing: Newest<'a>,
}

impl Lists<'_> {
    /// Slots in all three lists.
    pub fn len(&self) -> usize {
        self.first.len() + self.edit.len() + self.containing.len()
    }

    /// True when no list has a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PrefixPostings {
    /// The prefix form of `all`, the complete bigram postings of a generation of `slots` entries
    /// whose normalized texts have `chars(slot)` characters.
    pub fn from_all(
        all: &Postings<Gram>,
        slots: usize,
        chars: impl Fn(u32) -> u32,
        cfg: &VerifyConfig,
    ) -> PrefixPostings {
        let mut order: Vec<(u32, Gram)> = all.iter().map(|(g, l)| (l.len() as u32, g)).collect();
        order.sort_unstable();
        // Each entry's limits and length byte, read once in slot order.
        let limits: Vec<(u16, u16)> = (0..slots as u32).map(|s| limits(chars(s), cfg)).collect();
        let sizes: Vec<u8> = (0..slots as u32).map(|s| length_byte(chars(s))).collect();
        let mut rank = vec![0u16; slots];
        let mut keys = Ranks::with_capacity(order.len());
        let mut run = Vec::new();
        let mut postings = 0;
        let mut bufs: [Vec<u8>; 3] = Default::default();
        let mut classed: [Vec<u32>; 3] = Default::default();
        let mut classed_sizes: [Vec<u8>; 3] = Default::default();
        for (count, g) in order {
            let list = all.get(&g);
            classed.iter_mut().for_each(Vec::clear);
            classed_sizes.iter_mut().for_each(Vec::clear);
            for slot in list.iter() {
                let Some(r) = rank.get_mut(slot as usize) else {
                    continue;
                };
                let j = *r;
                *r = j.saturating_add(1);
                if let Some(class) = class(j, limits[slot as usize]) {
                    classed[class].push(slot);
                    classed_sizes[class].push(sizes[slot as usize]);
                }
            }
            for ((buf, slots), sizes) in bufs.iter_mut().zip(&classed).zip(&classed_sizes) {
                buf.clear();
                put_newest_first(buf, slots, sizes);
            }
            let lens = classed.each_ref().map(|c| c.len() as u32);
            let start = put_lists(&mut run, lens, &bufs);
            postings += lens.iter().sum::<u32>() as usize;
            keys.insert(g, count, start);
        }
        run.shrink_to_fit();
        PrefixPostings {
            keys: Some(keys),
            run,
            postings,
        }
    }

    /// The prefix form of the bigram postings of a generation of `slots` entries built in one go
    /// (a restart), as `from_all` would make it of the complete postings: `grams(slot, out)`
    /// writes each entry's distinct grams to `out` (cleared first), `chars(slot)` gives its
    /// length (see `PrefixBuilder`).
    pub fn build(
        slots: u32,
        mut grams: impl FnMut(u32, &mut Vec<Gram>),
        chars: impl Fn(u32) -> u32,
        cfg: &VerifyConfig,
    ) -> PrefixPostings {
        let mut b = PrefixBuilder::default();
        let mut buf = Vec::new();
        for s in 0..slots {
            grams(s, &mut buf);
            b.add(&buf);
        }
        b.finish(chars, cfg)
    }

    /// How many entries hold `g` (0 if none), and where its lists are (for `lists`).
    #[inline]
    pub fn rank_of(&self, g: &Gram) -> (u32, u32) {
        self.keys
            .as_ref()
            .and_then(|k| k.get(*g))
            .unwrap_or((0, NO_LISTS))
    }

    /// The gram dictionary `rank_of` reads, moved out (into `columns`); `None` once it was.
    /// The lists stay.
    pub(super) fn take_dictionary(&mut self) -> Option<Ranks> {
        self.keys.take()
    }

    /// Puts back a dictionary moved out (a generation read back whole, `snapshot`).
    pub(in crate::index) fn put_dictionary(&mut self, dict: Ranks) {
        self.keys = Some(dict);
    }

    /// Writes the lists (`snapshot`); the dictionary goes separately, wherever it is kept.
    pub(in crate::index) fn write_to(
        &self,
        out: &mut super::arrays::Out<'_>,
    ) -> std::io::Result<()> {
        out.u64(self.postings as u64)?;
        out.slice(&self.run)
    }

    /// The lists `write_to` wrote, without a dictionary (`put_dictionary`).
    pub(in crate::index) fn read_from(
        r: &mut super::arrays::In<'_>,
    ) -> std::io::Result<PrefixPostings> {
        let postings = r.u64()? as usize;
        Ok(PrefixPostings {
            keys: None,
            run: r.vec()?,
            postings,
        })
    }

    /// `f(gram, rank_of(gram))` for each of `grams`, their lookups overlapping (`Ranks::get_all`).
    #[inline]
    pub fn rank_all(&self, grams: &[Gram], mut f: impl FnMut(Gram, (u32, u32))) {
        match &self.keys {
            Some(k) => k.get_all(grams, |g, r| f(g, r.unwrap_or((0, NO_LISTS)))),
            None => grams.iter().for_each(|&g| f(g, (0, NO_LISTS))),
        }
    }

    /// Asks for the dictionary entries `rank_all(grams, ..)` reads ahead of it.
    #[inline]
    pub fn prefetch_ranks(&self, grams: &[Gram]) {
        if let Some(k) = &self.keys {
            k.prefetch_all(grams);
        }
    }

    /// Asks the CPU to load the start of the lists at `start` ahead of `lists` (a hint).
    #[inline]
    pub fn prefetch_lists(&self, start: u32) {
        if let Some(b) = self.run.get(start as usize) {
            super::prefetch(b);
        }
    }

    /// The lists at `start` (from `rank_of`).
    #[inline]
    pub fn lists(&self, start: u32) -> Lists<'_> {
        let Some(bytes) = self.run.get(start as usize..) else {
            return Lists::default();
        };
        let (n0, rest) = take_varint(bytes);
        let (b0, rest) = take_varint(rest);
        let (n1, rest) = take_varint(rest);
        let (b1, rest) = take_varint(rest);
        let (n2, rest) = take_varint(rest);
        let (b0, b1) = (b0 as usize, b1 as usize);
        if rest.len() < b0 + b1 {
            return Lists::default();
        }
        let list = Newest::new;
        Lists {
            first: list(&rest[..b0], n0),
            edit: list(&rest[b0..b0 + b1], n1),
            containing: list(&rest[b0 + b1..], n2),
        }
    }

    /// Every gram in some entry's prefix, with its lists (any order), while the dictionary is
    /// here (see `lists_of` for one moved out).
    pub fn iter(&self) -> impl Iterator<Item = (Gram, Lists<'_>)> + '_ {
        self.lists_of(self.iter_dictionary())
    }

    /// The dictionary's (gram, count, start) triples while it is here (any order).
    pub fn iter_dictionary(&self) -> impl Iterator<Item = (Gram, u32, u32)> + '_ {
        self.keys.iter().flat_map(Ranks::iter)
    }

    /// The grams of `dict`, this generation's (gram, count, start) triples wherever they are
    /// kept, that are in some entry's prefix, with their lists.
    pub fn lists_of<'a>(
        &'a self,
        dict: impl Iterator<Item = (Gram, u32, u32)> + 'a,
    ) -> impl Iterator<Item = (Gram, Lists<'a>)> + 'a {
        dict.filter(|&(_, _, start)| start != NO_LISTS)
            .map(|(g, _, start)| (g, self.lists(start)))
    }

    /// Total slots held.
    pub fn postings(&self) -> usize {
        self.postings
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> usize {
        self.run.capacity() + self.keys.as_ref().map_or(0, Ranks::bytes)
    }
}

/// An entry's `(ey, my)` (see the module documentation) for a text of `chars` characters.
fn limits(chars: u32, cfg: &VerifyConfig) -> (u16, u16) {
    let clamp = |v: usize| v.min(u16::MAX as usize - 1) as u16;
    let n = chars as usize;
    (
        clamp(edit_missing_grams(n, cfg)),
        clamp(max_missing_grams(n, cfg)),
    )
}

/// The list (0 `first`, 1 `edit`, 2 `containing`) of an entry's gram of rank `j`, if any.
#[inline]
fn class(j: u16, (ey, my): (u16, u16)) -> Option<usize> {
    match j {
        0 => Some(0),
        j if j <= ey => Some(1),
        j if j <= my => Some(2),
        _ => None,
    }
}

/// Appends one gram's three lists (`lens` slots each, encoded in `bufs`) to `run`; returns
/// where they start, `NO_LISTS` when all are empty (or the run is past 32-bit offsets).
fn put_lists(run: &mut Vec<u8>, lens: [u32; 3], bufs: &[Vec<u8>; 3]) -> u32 {
    if lens == [0; 3] || run.len() >= NO_LISTS as usize {
        return NO_LISTS;
    }
    let start = run.len() as u32;
    put_varint(run, lens[0]);
    put_varint(run, bufs[0].len() as u32);
    put_varint(run, lens[1]);
    put_varint(run, bufs[1].len() as u32);
    put_varint(run, lens[2]);
    bufs.iter().for_each(|b| run.extend_from_slice(b));
    start
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::grams::distinct_bigrams;
    use crate::types::Fingerprint;
    use crate::verify::tests::edited;
    use crate::verify::{verify, Sketch};
    use proptest::prelude::*;

    fn grams(chars: &[char]) -> Vec<Gram> {
        let mut g = Vec::new();
        distinct_bigrams(chars, &mut g);
        g
    }

    /// Whether `verify` accepts `a` against `b` under the char rules (no tokens).
    fn accepted(a: &[char], b: &[char], cfg: &VerifyConfig) -> bool {
        let sketch = |chars, text_hash| Sketch {
            chars,
            text_hash,
            fingerprint: Fingerprint(0),
            tokens: &[],
        };
        verify(&sketch(a, 1), &sketch(b, 2), cfg).is_some()
    }

    /// The slots a query with `chars` would scan, as `Index::prefix_candidates` scans them.
    fn scanned(p: &PrefixPostings, chars: &[char], cfg: &VerifyConfig) -> Vec<u32> {
        let mut ranked: Vec<(u32, Gram, u32)> = grams(chars)
            .into_iter()
            .map(|g| {
                let (c, s) = p.rank_of(&g);
                (c, g, s)
            })
            .collect();
        ranked.sort_unstable();
        let (mx, ex) = (
            max_missing_grams(chars.len(), cfg),
            edit_missing_grams(chars.len(), cfg),
        );
        let mut out = Vec::new();
        for (i, &(_, _, start)) in ranked.iter().take(mx + 1).enumerate() {
            let l = p.lists(start);
            out.extend(l.first.iter());
            if i <= ex {
                out.extend(l.edit.iter());
            }
            if i == 0 {
                out.extend(l.containing.iter());
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn build(texts: &[Vec<char>], cfg: &VerifyConfig) -> PrefixPostings {
        let mut all = Postings::default();
        for (s, t) in texts.iter().enumerate() {
            for g in grams(t) {
                all.push(g, s as u32);
            }
        }
        PrefixPostings::from_all(&all, texts.len(), |s| texts[s as usize].len() as u32, cfg)
    }

    #[test]
    fn each_entry_is_posted_under_its_prefix_only() {
        let cfg = VerifyConfig::default();
        let texts: Vec<Vec<char>> = [
            "今天天气真好我们一起去公园散步吧",
            "明天下雨我们在家里看书吧朋友们",
        ]
        .iter()
        .map(|t| t.chars().collect())
        .collect();
        let p = build(&texts, &cfg);
        let want: usize = texts
            .iter()
            .map(|t| (max_missing_grams(t.len(), &cfg) + 1).min(grams(t).len()))
            .sum();
        assert_eq!(p.postings(), want);
        // Each entry has exactly one first gram.
        let firsts: usize = p.iter().map(|(_, l)| l.first.len()).sum();
        assert_eq!(firsts, texts.len());
        // A gram held by both entries is counted twice; an unknown one is absent.
        assert_eq!(p.rank_of(&grams(&['我', '们'])[0]).0, 2);
        assert_eq!(p.rank_of(&grams(&['无', '有'])[0]), (0, NO_LISTS));
        assert!(p.lists(NO_LISTS).is_empty());
    }

    /// Every gram's count and lists, sorted, for comparing two builds.
    fn contents(p: &PrefixPostings) -> Vec<(Gram, u32, [Vec<u32>; 3])> {
        let mut v: Vec<_> = p
            .iter_dictionary()
            .map(|(g, count, start)| {
                let l = p.lists(start);
                let lists = [l.first, l.edit, l.containing].map(|x| x.iter().collect());
                (g, count, lists)
            })
            .collect();
        v.sort();
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        // Built in one go, the prefix form equals the one made of the complete postings.
        #[test]
        fn built_in_one_go_equals_converted(texts in proptest::collection::vec("[天地人和风雨云山水火]{0,40}", 0..200)) {
            let cfg = VerifyConfig::default();
            let texts: Vec<Vec<char>> = texts.iter().map(|t| t.chars().collect()).collect();
            let converted = build(&texts, &cfg);
            let built = PrefixPostings::build(
                texts.len() as u32,
                |s, out| distinct_bigrams(&texts[s as usize], out),
                |s| texts[s as usize].len() as u32,
                &cfg,
            );
            prop_assert_eq!(built.postings(), converted.postings());
            prop_assert_eq!(contents(&built), contents(&converted));
        }

        // Every entry that the char rules accept against a query, in a generation of random
        // texts and edited copies, is among the slots the query scans.
        #[test]
        fn prefix_lists_find_every_accepted_entry(
            base in proptest::collection::vec("[天地人和风雨云山水火]{8,40}", 1..6),
            edits in proptest::collection::vec((0usize..6, proptest::collection::vec((0usize..40, 0u8..3, "[天地人和风雨云山水火木]"), 0..6), 0usize..4, 0usize..4), 1..30),
            query in (0usize..6, proptest::collection::vec((0usize..40, 0u8..3, "[天地人和风雨云山水火木]"), 0..4), 0usize..4, 0usize..4),
        ) {
            let cfg = VerifyConfig::default();
            let base: Vec<Vec<char>> = base.iter().map(|b| b.chars().collect()).collect();
            let variant = |(b, e, lo, hi): &(usize, Vec<(usize, u8, String)>, usize, usize)| {
                let t = edited(&base[b % base.len()], e);
                let end = t.len().saturating_sub(*hi).max((*lo).min(t.len()));
                t[(*lo).min(t.len())..end].to_vec()
            };
            let texts: Vec<Vec<char>> = edits.iter().map(variant).collect();
            let min = crate::index::grams::min_indexed_chars(&cfg);
            let indexed: Vec<Vec<char>> = texts.into_iter().filter(|t| t.len() >= min).collect();
            let p = build(&indexed, &cfg);
            let q = variant(&query);
            prop_assume!(q.len() >= min);
            let found = scanned(&p, &q, &cfg);
            for (s, t) in indexed.iter().enumerate() {
                if accepted(&q, t, &cfg) {
                    prop_assert!(found.binary_search(&(s as u32)).is_ok(), "missed {:?} for query {:?}", t, q);
                }
            }
        }
    }
}
