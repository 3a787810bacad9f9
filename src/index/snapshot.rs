//! A sealed generation written out whole and read back as it was, so that a restart loads its
//! arrays instead of decoding and indexing every stored entry again: the per-slot records, the
//! exact-text table, the direct block tables, the prefix postings, the bigram postings of
//! entries that joined it late (merged first: `Index::settle`) and the gram dictionary, as flat
//! little-endian arrays, each behind its length. The cold records are the caller's to
//! place (`ColdStore::detach`, `ColdFactory::load`); where the bytes go, and when they are
//! still valid, is the caller's too (`state::sealed`). Everything written passes through a hash
//! that the reader computes again, so a damaged file is refused, never half used.

use std::io::{self, Read, Write};

use super::arrays::{invalid, In, Out};
use super::cold::{ColdCopy, ColdStore};
use super::grams::Gram;
use super::postings::Postings;
use super::ranks::Ranks;
use super::segment::Segment;
use super::Index;

/// The arrays' layout version: a file of another one is refused. 2: late entries' bigram
/// postings.
pub const FORMAT: u32 = 2;

/// What writing a generation's arrays wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes of arrays.
    pub bytes: u64,
    /// Their hash (xxh3), which reading them computes again.
    pub hash: u64,
    /// Entries of the generation.
    pub entries: u64,
    /// Bytes of its cold records (`Index::detach_cold`).
    pub cold_bytes: u64,
}

/// A sealed generation read back, ready to join an index (`Index::adopt`).
pub struct SealedGeneration {
    seg: Segment,
    dict: Ranks,
}

impl SealedGeneration {
    /// What it holds (its generation, its entries).
    pub fn held(&self) -> Built<'_> {
        Built { seg: &self.seg }
    }

    /// Reads the arrays `Index::write_sealed` wrote for generation `gen`: exactly `bytes` of
    /// them, hashing to `hash`. `cold` holds its cold records (as many bytes as were written
    /// with them). Anything else (a short read, a length past what is left, a hash that
    /// differs, arrays that do not fit together) is an `InvalidData` error.
    pub fn read(
        gen: i64,
        r: &mut dyn Read,
        bytes: u64,
        hash: u64,
        cold: Box<dyn ColdStore>,
    ) -> io::Result<SealedGeneration> {
        let mut r = In::new(r, bytes);
        let cold_bytes = r.u64()?;
        if cold_bytes != cold.len() {
            return Err(invalid("its cold records are not the ones written with it"));
        }
        let store = super::store::Store::read_from(&mut r, cold)?;
        let texts = super::slots::SlotTable::read_from(&mut r)?;
        let tables = r.u64()?;
        let sealed_tables = (0..tables)
            .map(|_| super::sealed_table::SealedTable::read_from(&mut r))
            .collect::<io::Result<Vec<_>>>()?;
        let prefix = match r.u64()? {
            0 => None,
            _ => Some(super::prefix::PrefixPostings::read_from(&mut r)?),
        };
        let grams = Postings::read_from(&mut r, store.len())?;
        let pairs: Vec<[u64; 2]> = r.vec()?;
        let mut dict = Ranks::with_capacity(pairs.len());
        for [gram, word] in pairs {
            let (count, start) = ((word >> 32) as u32, word as u32);
            if count == 0 || dict.get(gram).is_some() {
                return Err(invalid("its gram dictionary is malformed"));
            }
            dict.insert(gram, count, start);
        }
        if r.left() != 0 || r.digest() != hash {
            return Err(invalid("its arrays do not hash to what was written"));
        }
        let slots = store.len();
        if texts.len() != slots
            || sealed_tables.iter().any(|t| !t.fits(slots))
            || (prefix.is_none() && dict.len() > 0)
        {
            return Err(invalid("its arrays do not fit together"));
        }
        let seg = Segment {
            gen,
            store,
            texts,
            tables: Vec::new(),
            sealed_tables,
            grams,
            prefix,
        };
        Ok(SealedGeneration { seg, dict })
    }
}

impl Index {
    /// A digest of every setting the arrays of a sealed generation depend on, with their
    /// layout version: arrays written under another one are not read back.
    pub fn sealed_digest(&self) -> u64 {
        let settings = serde_json::json!({
            "format": FORMAT,
            "little_endian": cfg!(target_endian = "little"),
            "index": self.cfg,
            "verify": self.verify,
            "min_gram_chars": self.min_gram_chars,
        });
        xxhash_rust::xxh3::xxh3_64(settings.to_string().as_bytes())
    }

    /// Generations held, oldest first, with their entry counts.
    pub fn generation_sizes(&self) -> Vec<(i64, usize)> {
        self.segments
            .iter()
            .map(|s| (s.gen, s.store.len()))
            .collect()
    }

    /// Writes the arrays of generation `gen` (see the module documentation) if it is sealed
    /// with anything added since merged (`settle`); `None` if it is not, or is not held.
    pub fn write_sealed(&self, gen: i64, w: &mut dyn Write) -> io::Result<Option<Written>> {
        let Some(seg) = self.segment(gen) else {
            return Ok(None);
        };
        match self.columns.column(gen) {
            Some(c) => write_segment(seg, self.columns.column_entries(c), w),
            None => write_segment(seg, seg.prefix.iter().flat_map(|p| p.iter_dictionary()), w),
        }
    }

    /// The cold records of generation `gen` so far, to be copied out (`ColdStore::detach`);
    /// `None` if it is not held.
    pub fn detach_cold(&self, gen: i64) -> io::Result<Option<Box<dyn ColdCopy>>> {
        self.segment(gen)
            .map(|seg| seg.store.detach_cold())
            .transpose()
    }

    /// Makes generation `gen`, sealed, ready to be written whole: what late entries added to it
    /// since it was sealed is merged into the compact forms that hold them (the direct block
    /// tables, and the run of its own bigram postings), as a growing generation's merges do;
    /// the candidates of any query stay the same. Whether it is held.
    pub fn settle(&mut self, gen: i64) -> bool {
        let layout = &self.layout;
        self.segments
            .iter_mut()
            .find(|s| s.gen == gen)
            .map(|seg| seg.settle(layout))
            .is_some()
    }

    /// Adds generations read back whole, each unless the index holds its generation already
    /// (those are handed back). They must have been written under this index's settings
    /// (`sealed_digest`); one with another number of block tables is handed back too.
    pub fn adopt(&mut self, gens: Vec<SealedGeneration>) -> Vec<SealedGeneration> {
        let mut refused = Vec::new();
        for SealedGeneration { mut seg, dict } in gens {
            let held = self.segments.iter().any(|s| s.gen == seg.gen);
            if held || seg.sealed_tables.len() != self.layout.tables() {
                refused.push(SealedGeneration { seg, dict });
                continue;
            }
            seg.tables = (0..self.layout.tables())
                .map(|_| Postings::default())
                .collect();
            if let Some(p) = seg.prefix.as_mut() {
                p.put_dictionary(dict);
            }
            self.place(seg);
        }
        self.reindex_columns();
        refused
    }
}

/// A sealed generation a restart just built, as its builder hands it over to be written whole
/// (`Index::insert_generations`), or one read back (`SealedGeneration::held`).
pub struct Built<'a> {
    pub(super) seg: &'a Segment,
}

impl Built<'_> {
    /// Its generation.
    pub fn gen(&self) -> i64 {
        self.seg.gen
    }

    /// Its entries.
    pub fn len(&self) -> usize {
        self.seg.store.len()
    }

    /// True when it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes its arrays, as `Index::write_sealed` does.
    pub fn write_arrays(&self, w: &mut dyn Write) -> io::Result<Option<Written>> {
        let dict = self.seg.prefix.iter().flat_map(|p| p.iter_dictionary());
        write_segment(self.seg, dict, w)
    }

    /// Its cold records, to be copied out (`ColdStore::detach`).
    pub fn detach_cold(&self) -> io::Result<Box<dyn ColdCopy>> {
        self.seg.store.detach_cold()
    }
}

/// Writes the arrays of `seg`, whose gram dictionary is `dict`, unless what was added to it since
/// it was sealed is not merged (`None`: `Index::settle`).
fn write_segment(
    seg: &Segment,
    dict: impl Iterator<Item = (Gram, u32, u32)>,
    w: &mut dyn Write,
) -> io::Result<Option<Written>> {
    if !seg.grams.is_sealed() || seg.tables.iter().any(|t| !t.is_empty()) {
        return Ok(None);
    }
    let mut out = Out::new(w);
    let cold_bytes = seg.store.cold_len();
    out.u64(cold_bytes)?;
    seg.store.write_to(&mut out)?;
    seg.texts.write_to(&mut out)?;
    out.u64(seg.sealed_tables.len() as u64)?;
    for t in &seg.sealed_tables {
        t.write_to(&mut out)?;
    }
    match &seg.prefix {
        None => out.u64(0)?,
        Some(p) => {
            out.u64(1)?;
            p.write_to(&mut out)?;
        }
    }
    seg.grams.write_to(&mut out)?;
    let pairs: Vec<[u64; 2]> = dict
        .map(|(g, n, s)| [g, u64::from(n) << 32 | u64::from(s)])
        .collect();
    out.slice(&pairs)?;
    Ok(Some(Written {
        bytes: out.bytes(),
        hash: out.digest(),
        entries: seg.store.len() as u64,
        cold_bytes,
    }))
}

#[cfg(test)]
mod tests;
