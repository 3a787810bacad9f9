//! One generation of the index: its entries (`store`), the exact-text table, the block tables and
//! the bigram postings.

use super::cold::ColdStore;
use super::grams::Gram;
use super::postings::Postings;
use super::prefix::PrefixPostings;
use super::sealed_table::SealedTable;
use super::slots::SlotTable;
use super::store::{self, short_hash, Store};
use super::tables::TableLayout;
use crate::types::Fingerprint;
use crate::verify::VerifyConfig;

/// Generations with fewer entries keep their postings in hash maps when a newer one starts
/// (merging them saves little and costs a sort per generation on sparse streams).
const COMPACT_MIN_ENTRIES: usize = 1024;

/// Slots a growing generation's mutable block tables hold at least before they go to direct
/// form (`Segment::grow_tables`).
const DIRECT_MIN_SLOTS: usize = 1 << 16;

pub(super) struct Segment {
    pub(super) gen: i64,
    /// The entries, compact: candidate filters and verification's cheap gates read one small
    /// record per candidate, and most candidates are rejected without reading the rest.
    pub(super) store: Store,
    /// Slots by text hash: the exact path, and `contains` and `has_copy` (an entry's key
    /// identifies its post, so the same key always comes with the same text).
    pub(super) texts: SlotTable,
    /// The block tables' newest slots: those added since they last went to direct form
    /// (`grow_tables`, `seal`).
    pub(super) tables: Vec<Postings<u64>>,
    /// The block tables of the other slots, one per table (none before the first move), in
    /// direct form.
    pub(super) sealed_tables: Vec<SealedTable>,
    /// Bigram postings of every gram of each entry added since the generation was sealed (all
    /// of them before), for count filtering.
    pub(super) grams: Postings<Gram>,
    /// Bigram postings of the entries present when the generation was sealed, in prefix form.
    pub(super) prefix: Option<PrefixPostings>,
}

impl Segment {
    pub(super) fn new(gen: i64, tables: usize, cold: Box<dyn ColdStore>) -> Segment {
        Segment {
            gen,
            store: Store::new(cold),
            texts: SlotTable::default(),
            tables: (0..tables).map(|_| Postings::default()).collect(),
            sealed_tables: Vec::new(),
            grams: Postings::default(),
            prefix: None,
        }
    }

    /// Stores `e` and enters its text hash in the exact-text table; returns its slot (its block
    /// tables and postings are the caller's).
    pub(super) fn push(&mut self, e: &super::Entry) -> u32 {
        let slot = self.store.push(e);
        self.texts.insert(short_hash(e.text_hash), slot);
        slot
    }

    /// Stores a stored entry (`Store::push_view`); returns its slot and its key in the
    /// exact-text table, where `list_texts` enters it (the batch of a whole generation at once).
    pub(super) fn push_view(
        &mut self,
        v: &super::entry::EntryView<'_>,
        chars: &[char],
        tokens: &[u32],
    ) -> (u32, u32) {
        let slot = self.store.push_view(v, chars, tokens);
        let h = xxhash_rust::xxh3::xxh3_64(v.text.as_bytes());
        (short_hash(h), slot)
    }

    /// Enters `(key, slot)` pairs from `push_view` in the exact-text table, in order.
    pub(super) fn list_texts(&mut self, keyed: &[(u32, u32)]) {
        self.texts.insert_all(keyed);
    }

    /// Makes room for `additional` more entries in the exact-text table.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.texts.reserve(additional);
        self.store.reserve(additional);
    }

    /// Whether `cold`, the record of `slot`, holds exactly the text `chars`.
    pub(super) fn same_text(&self, slot: u32, cold: &store::Cold<'_>, chars: &[char]) -> bool {
        self.store.meta(slot).chars() as usize == chars.len()
            && cold.chars().eq(chars.iter().copied())
    }

    /// Whether an entry whose text has hash `h` satisfies `pred` (unreadable ones do not).
    pub(super) fn any_text(&self, h: u64, mut pred: impl FnMut(&store::Cold<'_>) -> bool) -> bool {
        let mut buf = Vec::new();
        self.texts
            .find(short_hash(h))
            .any(|slot| self.store.cold(slot, &mut buf).is_ok_and(|c| pred(&c)))
    }

    /// Asks for the exact-text table's bucket of hash `h` ahead of `earliest`.
    #[inline]
    pub(super) fn prefetch_text(&self, h: u64) {
        self.texts.prefetch(short_hash(h));
    }

    /// The earliest entry (by order key) whose text is `chars` (hash `h`): the exact path's
    /// candidate. Only 32 bits of the hash are kept, so when several entries share them, their
    /// records are read and those with another text left out; a single one is returned as it is
    /// (the caller compares its text: if it differs, no entry of the generation has this text).
    pub(super) fn earliest(&self, h: u64, chars: &[char]) -> Option<u32> {
        let mut slots = self.texts.find(short_hash(h));
        let first = slots.next()?;
        let mut rest = slots.peekable();
        if rest.peek().is_none() {
            return Some(first);
        }
        let mut buf = Vec::new();
        std::iter::once(first)
            .chain(rest)
            .filter_map(|slot| {
                let c = self.store.cold(slot, &mut buf).ok()?;
                self.same_text(slot, &c, chars).then_some((c.key, slot))
            })
            .min()
            .map(|(_, slot)| slot)
    }

    /// Whether the generation has a `slot`.
    pub(super) fn has_slot(&self, slot: u32) -> bool {
        (slot as usize) < self.store.len()
    }

    /// Seals a generation that stopped growing, unless it is too small for it to matter.
    pub(super) fn compact(&mut self, layout: &TableLayout, verify: &VerifyConfig) {
        if self.store.len() >= COMPACT_MIN_ENTRIES {
            self.seal(layout, verify);
        }
    }

    /// Merges every structure into its compact form: the block tables go to direct form, and
    /// the first time, the bigram postings to prefix form (entries added later, late posts,
    /// stay in `tables` and `grams`).
    pub(super) fn seal(&mut self, layout: &TableLayout, verify: &VerifyConfig) {
        self.store.shrink();
        self.direct_tables(layout);
        self.grams.seal();
        if self.prefix.is_none() && !self.grams.is_empty() {
            let store = &self.store;
            let prefix = PrefixPostings::from_all(
                &self.grams,
                store.len(),
                |s| store.meta(s).chars(),
                verify,
            );
            self.prefix = Some(prefix);
            self.grams = Postings::default();
        }
    }

    /// Merges what was added since the generation was sealed (late entries) into the compact
    /// forms: the mutable block tables into the direct ones, the bigram postings' head into
    /// their run. Prefix postings are built only by `seal`, so the candidates stay the same.
    pub(super) fn settle(&mut self, layout: &TableLayout) {
        self.direct_tables(layout);
        self.grams.seal();
    }

    /// Moves the slots of the mutable block tables into the direct ones once they hold a
    /// quarter as many (and at least `DIRECT_MIN_SLOTS`): a growing generation then scans
    /// fragments, not records, for most of its slots, and each slot is rebuilt about five
    /// times in all. Called after each tabled entry is added.
    pub(super) fn grow_tables(&mut self, layout: &TableLayout) {
        let direct = self.sealed_tables.first().map_or(0, |t| t.slots().len());
        if self.tables[0].postings() >= DIRECT_MIN_SLOTS.max(direct / 4) {
            self.direct_tables(layout);
        }
    }

    /// Rebuilds the direct block tables with the slots of the mutable ones added (those then
    /// empty). The candidates a query gets stay the same: a key's slots are scanned newest
    /// first in either form, and a fragment only drops slots whose record would.
    fn direct_tables(&mut self, layout: &TableLayout) {
        if self.tables.iter().all(Postings::is_empty) {
            return;
        }
        // Every tabled entry is in every table: the first one names them all.
        let mut tabled = vec![false; self.store.len()];
        if let Some(t) = self.sealed_tables.first() {
            t.slots().iter().for_each(|&s| tabled[s as usize] = true);
        }
        for (_, list) in self.tables[0].iter() {
            list.iter().for_each(|s| tabled[s as usize] = true);
        }
        self.sealed_tables = self.build_tables(layout, |s| tabled[s as usize]);
        self.tables
            .iter_mut()
            .for_each(|t| *t = Postings::default());
    }

    /// The direct-form block tables of the entries for which `tabled(slot)` holds.
    pub(super) fn build_tables(
        &self,
        layout: &TableLayout,
        tabled: impl Fn(u32) -> bool,
    ) -> Vec<SealedTable> {
        // One pass over the records, then each table from this compact copy.
        let store = &self.store;
        let fps: Vec<(u32, u64)> = (0..store.len() as u32)
            .filter(|&s| tabled(s))
            .map(|s| (s, store.meta(s).fingerprint))
            .collect();
        (0..layout.tables())
            .map(|t| {
                let permuted = |&(s, fp)| (s, layout.permuted(t, Fingerprint(fp)));
                SealedTable::build(layout.key_bits(t), fps.iter().map(permuted))
            })
            .collect()
    }
}
