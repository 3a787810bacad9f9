//! The gram dictionaries of the sealed generations (see `prefix`) in one table: per gram, its
//! count and the start of its lists in each generation, side by side in one bucket. A query
//! that reaches the sealed generations looks each of its grams up once for all of them, one
//! cache miss, instead of once per generation: in a window of millions of entries every lookup
//! misses the cache, and a query of 30 grams in four sealed generations made 120 of them.
//!
//! A generation's dictionary is built with its prefix postings and then moved into the table
//! (it is held once); the table is built again whenever a generation is sealed or expires
//! (`Index::reindex_columns`), from its own columns and the new dictionaries. It answers exactly
//! as the dictionaries did, so the candidates and verdicts are the same.

use super::grams::Gram;
use super::ranks::{self, Ranks};

/// A vacant bucket's gram: no bigram has it (a bigram is two 21-bit characters).
const VACANT: Gram = u64::MAX;

/// Where a column's grams come from: a dictionary moved out of its generation, or a column of
/// the table before.
pub enum Source<'a> {
    /// A generation's own dictionary.
    Dict(Ranks),
    /// Column `c` of a table.
    Column(&'a Columns, usize),
}

impl Source<'_> {
    /// Every (gram, count, start) held, in no particular order.
    fn each(&self, mut f: impl FnMut(Gram, u32, u32)) {
        match self {
            Source::Dict(d) => d.iter().for_each(|(g, n, s)| f(g, n, s)),
            Source::Column(t, c) => t.column_entries(*c).for_each(|(g, n, s)| f(g, n, s)),
        }
    }

    /// How many grams it holds, at most.
    fn len(&self) -> usize {
        match self {
            Source::Dict(d) => d.len(),
            Source::Column(t, _) => t.len,
        }
    }
}

/// Gram → per generation (count, start), as each generation's `PrefixPostings::rank_of`
/// answers.
#[derive(Debug, Default)]
pub struct Columns {
    /// The generations held, one column each, in the order given to `build`.
    gens: Vec<i64>,
    /// Per bucket: the gram, then (count, start) per column; `stride` words of 32 bits.
    words: Box<[u32]>,
    stride: usize,
    /// log2 of the bucket count.
    bits: u32,
    /// Grams held.
    len: usize,
}

impl Columns {
    /// The table of `dicts`, (generation, its grams) pairs, a column each in that order.
    pub fn build(dicts: &[(i64, Source<'_>)]) -> Columns {
        if dicts.is_empty() {
            return Columns::default();
        }
        // The union's size, for a table at most three quarters full.
        let mut all: Vec<Gram> = Vec::with_capacity(dicts.iter().map(|(_, d)| d.len()).sum());
        for (_, d) in dicts {
            d.each(|g, _, _| all.push(g));
        }
        all.sort_unstable();
        all.dedup();
        let n = all.len();
        drop(all);
        let bits = ranks::bits_for(n);
        let stride = 2 + 2 * dicts.len();
        let mut t = Columns {
            gens: dicts.iter().map(|&(g, _)| g).collect(),
            words: vec![0; stride << bits].into_boxed_slice(),
            stride,
            bits,
            len: n,
        };
        for b in 0..1usize << bits {
            t.set_gram(b, VACANT);
        }
        for (c, (_, d)) in dicts.iter().enumerate() {
            d.each(|g, count, start| {
                let b = t.bucket_for(g);
                let w = &mut t.words[b * stride + 2 + 2 * c..][..2];
                w[0] = count;
                w[1] = start;
            });
        }
        t
    }

    /// Every (gram, count, start) of column `c`, in no particular order.
    pub fn column_entries(&self, c: usize) -> impl Iterator<Item = (Gram, u32, u32)> + '_ {
        let buckets = if self.gens.is_empty() {
            0
        } else {
            1usize << self.bits
        };
        (0..buckets).filter_map(move |b| {
            let g = self.gram(b);
            let w = &self.words[b * self.stride + 2 + 2 * c..][..2];
            (g != VACANT && w[0] != 0).then_some((g, w[0], w[1]))
        })
    }

    /// The column of generation `gen`, if the table holds it.
    pub fn column(&self, gen: i64) -> Option<usize> {
        self.gens.iter().position(|&g| g == gen)
    }

    /// The generations held, a column each.
    pub fn gens(&self) -> impl Iterator<Item = i64> + '_ {
        self.gens.iter().copied()
    }

    /// Number of columns.
    pub fn width(&self) -> usize {
        self.gens.len()
    }

    #[inline]
    fn home(&self, gram: Gram) -> usize {
        ranks::home(gram, self.bits)
    }

    #[inline]
    fn gram(&self, b: usize) -> Gram {
        let w = &self.words[b * self.stride..];
        u64::from(w[0]) | u64::from(w[1]) << 32
    }

    fn set_gram(&mut self, b: usize, g: Gram) {
        let w = &mut self.words[b * self.stride..];
        w[0] = g as u32;
        w[1] = (g >> 32) as u32;
    }

    /// The bucket of `g`, claimed for it if it had none.
    fn bucket_for(&mut self, g: Gram) -> usize {
        let mask = (1 << self.bits) - 1;
        let mut b = self.home(g);
        loop {
            match self.gram(b) {
                VACANT => {
                    self.set_gram(b, g);
                    return b;
                }
                x if x == g => return b,
                _ => b = (b + 1) & mask,
            }
        }
    }

    /// The bucket of `g`, if the table holds it.
    #[inline]
    fn find(&self, g: Gram) -> Option<usize> {
        if self.gens.is_empty() {
            return None;
        }
        let mask = (1 << self.bits) - 1;
        let mut b = self.home(g);
        loop {
            match self.gram(b) {
                VACANT => return None,
                x if x == g => return Some(b),
                _ => b = (b + 1) & mask,
            }
        }
    }

    /// Asks for the buckets of `grams` ahead of `rank_all` (a hint).
    #[inline]
    pub fn prefetch_all(&self, grams: &[Gram]) {
        if self.gens.is_empty() {
            return;
        }
        for &g in grams {
            let b = self.home(g) * self.stride;
            super::prefetch(&self.words[b]);
            // A bucket wider than what is left of its cache line spills into the next one.
            super::prefetch(&self.words[b + self.stride - 1]);
        }
    }

    /// Each of `grams`' (count, start) in every column, `width()` pairs a gram, appended to
    /// `out` in order; `missing` for a column that lacks the gram.
    pub fn rank_all(&self, grams: &[Gram], missing: (u32, u32), out: &mut Vec<(u32, u32)>) {
        self.prefetch_all(grams);
        let cols = self.width();
        for &g in grams {
            match self.find(g) {
                Some(b) => {
                    let w = &self.words[b * self.stride + 2..][..2 * cols];
                    out.extend(w.chunks_exact(2).map(|p| match p[0] {
                        0 => missing,
                        count => (count, p[1]),
                    }));
                }
                None => out.extend(std::iter::repeat_n(missing, cols)),
            }
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.words.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Every column answers as its generation's dictionary does, for grams it holds and
        // grams it does not.
        #[test]
        fn each_column_answers_as_its_dictionary(
            dicts in proptest::collection::vec(
                proptest::collection::btree_map(0u64..1 << 12, (1u32..1000, 0u32..u32::MAX), 0..300),
                0..5,
            ),
            asked in proptest::collection::vec(0u64..1 << 12, 0..60),
        ) {
            let ranks: Vec<Ranks> = dicts
                .iter()
                .map(|d| {
                    let mut r = Ranks::with_capacity(d.len());
                    for (&g, &(c, s)) in d {
                        r.insert(g, c, s);
                    }
                    r
                })
                .collect();
            let gens: Vec<(i64, Source<'_>)> = dicts
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut r = Ranks::with_capacity(d.len());
                    for (&g, &(c, s)) in d {
                        r.insert(g, c, s);
                    }
                    (10 + i as i64, Source::Dict(r))
                })
                .collect();
            let first = Columns::build(&gens);
            // Built again from its own columns, as when a generation expires or joins.
            let again: Vec<(i64, Source<'_>)> =
                (0..first.width()).map(|c| (10 + c as i64, Source::Column(&first, c))).collect();
            let t = Columns::build(&again);
            prop_assert_eq!(t.width(), dicts.len());
            let missing = (0, u32::MAX);
            let mut got = Vec::new();
            t.rank_all(&asked, missing, &mut got);
            prop_assert_eq!(got.len(), asked.len() * dicts.len());
            for (i, g) in asked.iter().enumerate() {
                for (c, r) in ranks.iter().enumerate() {
                    prop_assert_eq!(t.column(10 + c as i64), Some(c));
                    prop_assert_eq!(got[i * dicts.len() + c], r.get(*g).unwrap_or(missing));
                }
            }
            for (c, r) in ranks.iter().enumerate() {
                let mut col: Vec<_> = t.column_entries(c).collect();
                col.sort_unstable();
                let mut want: Vec<_> = r.iter().collect();
                want.sort_unstable();
                prop_assert_eq!(col, want);
            }
        }
    }
}
