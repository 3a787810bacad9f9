//! A generation's prefix form built in one go from its entries (a restart): `PrefixBuilder`.

use super::super::grams::Gram;
use super::super::newest::{length_byte, put_newest_first};
use super::super::numbers::Numbers;
use super::super::prefetch;
use super::super::ranks::Ranks;
use super::{class, limits, put_lists, PrefixPostings};
use crate::verify::VerifyConfig;

/// The prefix form built in one go from a generation's entries, given in slot order: the first
/// pass (`add`) numbers every distinct gram and counts its entries; `finish` renumbers the grams
/// by their place in the order (so that ranking an entry's grams is sorting plain numbers), keeps
/// each entry's prefix, and a counting sort places every kept posting in its gram's list. Each
/// entry's grams are asked for once. A builder is reused from one generation to the next (a
/// restart builds several on each thread): its buffers keep their memory.
#[derive(Default)]
pub struct PrefixBuilder {
    numbers: Numbers,
    /// Per gram number: the gram.
    grams: Vec<Gram>,
    /// Every posting's gram number, slot by slot (its place in the order, after `finish`
    /// renumbers it), and where each slot's postings end.
    seq: Vec<u32>,
    ends: Vec<usize>,
    /// Per gram number: how many entries hold it.
    counts: Vec<u32>,
    /// The grams in the order, each with its count and number (sorted as they are: the count
    /// and the gram decide, gathering neither during the sort), and each number's place in it.
    order: Vec<(u32, Gram, u32)>,
    place: Vec<u32>,
    /// Per slot: how many of its grams are in its prefix.
    kept: Vec<u16>,
    /// Per place in the order: the gram's postings in each list.
    per_class: Vec<[u32; 3]>,
    /// Every kept posting's slot, list by list, and its entry's length byte.
    flat: Vec<u32>,
    flat_sizes: Vec<u8>,
}

impl PrefixBuilder {
    /// Adds the next slot, whose distinct grams are `grams`.
    pub fn add(&mut self, grams: &[Gram]) {
        let (known, seq) = (&mut self.grams, &mut self.seq);
        self.numbers.number_all(grams, |g, id, fresh| {
            if fresh {
                known.push(g);
            }
            seq.push(id);
        });
        self.ends.push(self.seq.len());
    }

    /// The postings of the slots added, whose texts have `chars(slot)` characters. Leaves the
    /// builder empty.
    pub fn finish(&mut self, chars: impl Fn(u32) -> u32, cfg: &VerifyConfig) -> PrefixPostings {
        let PrefixBuilder {
            numbers,
            grams,
            seq,
            ends,
            counts,
            order,
            place,
            kept,
            per_class,
            flat,
            flat_sizes,
        } = self;
        numbers.counts(counts);
        // The order: rarest first, ties by value.
        order.clear();
        order.extend(
            (counts.iter().zip(grams.iter()).enumerate()).map(|(id, (&c, &g))| (c, g, id as u32)),
        );
        order.sort_unstable();
        place.clear();
        place.resize(order.len(), 0);
        for (p, &(_, _, id)) in order.iter().enumerate() {
            place[id as usize] = p as u32;
        }
        // Each slot's prefix, in place at the front of its part of `seq`, as place in the order
        // and class (low two bits); `kept[s]` how many. The gathers here and the scatters below
        // land at random places of arrays of megabytes, so each runs a few slots ahead of its
        // use: a slot's gram numbers are turned into places (and its prefix chosen) the slot
        // before its counts go up, with the counts it will raise asked for then, and the places
        // of the slot after it asked for before that.
        per_class.resize(order.len(), [0; 3]);
        let part_of = |s: usize| (if s == 0 { 0 } else { ends[s - 1] })..ends[s];
        let prefix_of = |s: usize, seq: &mut [u32], kept: &mut Vec<u16>| {
            let part = &mut seq[part_of(s)];
            part.iter_mut().for_each(|id| *id = place[*id as usize]);
            let lim = limits(chars(s as u32), cfg);
            let take = part.len().min(usize::from(lim.1) + 1);
            if take > 0 && take < part.len() {
                part.select_nth_unstable(take - 1);
            }
            part[..take].sort_unstable();
            kept.push(take as u16);
            lim
        };
        let mut next_lim = (!ends.is_empty()).then(|| prefix_of(0, seq, kept));
        for s in 0..ends.len() {
            let lim = next_lim
                .take()
                .expect("a slot's prefix is chosen the slot before");
            if s + 2 < ends.len() {
                for &id in &seq[part_of(s + 2)] {
                    prefetch(&place[id as usize]);
                }
            }
            if s + 1 < ends.len() {
                next_lim = Some(prefix_of(s + 1, seq, kept));
                let start = part_of(s + 1).start;
                for &p in &seq[start..start + usize::from(kept[s + 1])] {
                    prefetch(&per_class[p as usize]);
                }
            }
            let start = part_of(s).start;
            for (j, p) in seq[start..start + usize::from(kept[s])]
                .iter_mut()
                .enumerate()
            {
                let c = class(j.min(usize::from(u16::MAX)) as u16, lim).unwrap_or(2);
                per_class[*p as usize][c] += 1;
                *p = *p << 2 | c as u32;
            }
        }
        // Counting sort: every list's place in `flat`, by place in the order then class.
        let mut pos = Vec::with_capacity(per_class.len() * 3);
        let mut next = 0u32;
        for n in per_class.iter().flatten() {
            pos.push(next);
            next += n;
        }
        flat.resize(next as usize, 0);
        flat_sizes.resize(next as usize, 0);
        let mut begin = 0;
        let at = |v: u32| (v >> 2) as usize * 3 + (v & 3) as usize;
        // Places are asked for `POS_AHEAD` slots ahead: one slot's few lookups are over before
        // the next slot's would arrive.
        const POS_AHEAD: usize = 4;
        for (s, (&end, &k)) in ends.iter().zip(kept.iter()).enumerate() {
            if let Some(&ahead) = kept.get(s + POS_AHEAD) {
                let start = ends[s + POS_AHEAD - 1];
                for &v in &seq[start..start + usize::from(ahead)] {
                    prefetch(&pos[at(v)]);
                }
            }
            let size = length_byte(chars(s as u32));
            for &v in &seq[begin..begin + usize::from(k)] {
                let p = &mut pos[at(v)];
                flat[*p as usize] = s as u32;
                flat_sizes[*p as usize] = size;
                *p += 1;
            }
            begin = end;
        }
        let mut keys = Ranks::with_capacity(order.len());
        let mut run = Vec::with_capacity(2 * flat.len());
        let mut bufs: [Vec<u8>; 3] = Default::default();
        let mut begin = 0;
        // The dictionary's inserts are a cache miss each: their buckets are asked for ahead.
        const AHEAD: usize = 8;
        for (i, (n, &(count, gram, _))) in per_class.iter().zip(order.iter()).enumerate() {
            if let Some(&(_, ahead, _)) = order.get(i + AHEAD) {
                keys.prefetch(ahead);
            }
            for c in 0..3 {
                bufs[c].clear();
                let range = begin..begin + n[c] as usize;
                put_newest_first(&mut bufs[c], &flat[range.clone()], &flat_sizes[range]);
                begin += n[c] as usize;
            }
            keys.insert(gram, count, put_lists(&mut run, *n, &bufs));
        }
        run.shrink_to_fit();
        let postings = flat.len();
        self.clear();
        PrefixPostings {
            keys: Some(keys),
            run,
            postings,
        }
    }

    /// Forgets the slots added (a generation given up half way), keeping the memory.
    pub fn clear(&mut self) {
        self.numbers.clear();
        self.grams.clear();
        self.seq.clear();
        self.ends.clear();
        self.kept.clear();
        self.per_class.clear();
        self.flat.clear();
        self.flat_sizes.clear();
    }
}
