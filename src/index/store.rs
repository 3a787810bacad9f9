//! Compact storage of one generation's entries, without a heap allocation per entry: what the
//! candidate filters and verification's cheap gates read of every candidate sits in one 32-byte
//! record per slot (`Meta`); the rest (order key, time, id, normalized text as UTF-8, token
//! hashes) is one record in the generation's `ColdStore`, read back only for candidates that
//! pass the gates.

use crate::types::{EventTime, Fingerprint, PostId};
use crate::verify::{char_bits, token_bits, Bits, Gates, Sketch, MANY_TOKENS};

use super::cold::{ColdStore, InMemory};
use super::entry::{le_u32s, Entry, EntryView, OrderKey};

/// Per-slot record: what filters and gates need, plus where the rest lives. 32 bytes, aligned
/// to 32, so that reading one never touches two cache lines. (The text hash of the exact path
/// is kept in the exact-text table, `SlotTable`.)
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(32))]
pub struct Meta {
    /// SimHash fingerprint.
    pub fingerprint: u64,
    /// Where the entry's cold record starts (high 38 bits; it ends where the next one starts)
    /// and the normalized text's length in characters (low 26 bits: a text no record holds
    /// whole is longer than `MAX_RECORD` bytes, so the length never saturates for a readable
    /// entry).
    loc: u64,
    /// `verify::char_bits` of the normalized text.
    char_bits: u64,
    /// `verify::token_bits` of its distinct tokens (low 48 bits; `token_bits` sets no other)
    /// and how many there are (high 16 bits, at most `verify::MANY_TOKENS`).
    token_word: u64,
}

/// The bit of `Meta::token_word` where the token count starts.
const TOKEN_COUNT_SHIFT: u32 = 48;

impl Meta {
    /// What verification's gates need.
    #[inline]
    pub fn gates(&self) -> Gates {
        Gates {
            chars: self.chars() as usize,
            tokens: self.tokens(),
            fingerprint: Fingerprint(self.fingerprint),
            text_hash: None,
            bits: Bits {
                chars: self.char_bits,
                tokens: self.token_word & ((1 << TOKEN_COUNT_SHIFT) - 1),
            },
        }
    }

    /// Distinct tokens, at most `verify::MANY_TOKENS` (which stands for that many or more).
    #[inline]
    pub fn tokens(&self) -> usize {
        (self.token_word >> TOKEN_COUNT_SHIFT) as usize
    }

    /// Normalized text length in characters.
    #[inline]
    pub fn chars(&self) -> u32 {
        (self.loc & ((1 << LEN_BITS) - 1)) as u32
    }

    fn offset(&self) -> u64 {
        self.loc >> LEN_BITS
    }
}

/// Bits of `Meta::loc` for the text length in characters: up to 64 Mi (no readable record holds
/// more, `MAX_RECORD`); generations up to 256 GiB of records.
const LEN_BITS: u32 = 26;

/// Longest cold record: an entry's id, text and tokens (`input.max_text_bytes` is 16 KiB by
/// default).
pub const MAX_RECORD: usize = (1 << LEN_BITS) - 1;

/// The low 32 bits of a text hash, as `Meta` keeps them.
#[inline]
pub fn short_hash(text_hash: u64) -> u32 {
    text_hash as u32
}

/// One generation's entries.
pub struct Store {
    meta: Vec<Meta>,
    /// Per entry: tau, arrival, partition, seq, time, id length (u32), text length in bytes (u32), id,
    /// text, token hashes (u32 each), all little-endian.
    cold: Box<dyn ColdStore>,
    record: Vec<u8>,
}

impl Default for Store {
    fn default() -> Self {
        Store::new(Box::<InMemory>::default())
    }
}

const HEADER: usize = 8 + 8 + 4 + 8 + 8 + 4 + 4;

/// An entry as `Store::append` takes it, from an `Entry` or a stored record.
struct Parts<'a> {
    key: OrderKey,
    time: EventTime,
    fingerprint: Fingerprint,
    id: &'a [u8],
    /// The text as UTF-8, when at hand (else `chars` are encoded).
    utf8: Option<&'a [u8]>,
    chars: &'a [char],
    tokens: &'a [u32],
}

/// The cold part of an entry.
pub struct Cold<'a> {
    /// Order key of the post that created the entry.
    pub key: OrderKey,
    /// Event time of that post.
    pub time: EventTime,
    /// Representative id.
    pub id: &'a str,
    /// Normalized text, UTF-8 (`chars` decodes it).
    pub text: &'a [u8],
    tokens: &'a [u8],
}

impl Cold<'_> {
    /// The verification view of the entry whose record this is and whose `Meta` is `m`: its
    /// text decoded into `chars` and its token hashes into `tokens`.
    pub fn sketch<'b>(
        &self,
        m: &Meta,
        chars: &'b mut Vec<char>,
        tokens: &'b mut Vec<u32>,
    ) -> Sketch<'b> {
        chars.clear();
        chars.extend(self.chars());
        self.tokens(tokens);
        Sketch {
            chars,
            text_hash: xxhash_rust::xxh3::xxh3_64(self.text),
            fingerprint: Fingerprint(m.fingerprint),
            tokens,
        }
    }

    /// The text's characters, decoded in one pass: the store wrote valid UTF-8, so it is not
    /// validated first; a damaged byte decodes as U+FFFD, never a panic.
    pub fn chars(&self) -> impl Iterator<Item = char> + '_ {
        let b = self.text;
        let mut i = 0;
        std::iter::from_fn(move || {
            let x = *b.get(i)?;
            let (n, mut c) = match x {
                0..=0x7F => (1, u32::from(x)),
                0xC0..=0xDF => (2, u32::from(x & 0x1F)),
                0xE0..=0xEF => (3, u32::from(x & 0x0F)),
                0xF0..=0xF7 => (4, u32::from(x & 0x07)),
                _ => {
                    i += 1;
                    return Some(char::REPLACEMENT_CHARACTER);
                }
            };
            for k in 1..n {
                match b.get(i + k) {
                    Some(&y) if y & 0xC0 == 0x80 => c = (c << 6) | u32::from(y & 0x3F),
                    _ => {
                        i += k;
                        return Some(char::REPLACEMENT_CHARACTER);
                    }
                }
            }
            i += n;
            Some(char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
        })
    }

    /// Sorted distinct token hashes, written to `out` (cleared first).
    pub fn tokens(&self, out: &mut Vec<u32>) {
        out.clear();
        out.extend(le_u32s(self.tokens));
    }
}

impl Store {
    /// An empty store whose cold records go to `cold`.
    pub fn new(cold: Box<dyn ColdStore>) -> Store {
        Store {
            meta: Vec::new(),
            cold,
            record: Vec::new(),
        }
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The record of `slot`.
    #[inline]
    pub fn meta(&self, slot: u32) -> &Meta {
        &self.meta[slot as usize]
    }

    /// Asks the CPU to load the record of `slot` into cache ahead of use: a scan over posting
    /// lists reads records at random slots, each a cache miss, and prefetching a few ahead lets
    /// those misses overlap (`index::prefetch`).
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        if let Some(m) = self.meta.get(slot as usize) {
            super::prefetch(m);
        }
    }

    /// Makes room for `additional` more per-slot records.
    pub fn reserve(&mut self, additional: usize) {
        self.meta.reserve_exact(additional);
    }

    /// Appends `e`; returns its slot.
    pub fn push(&mut self, e: &Entry) -> u32 {
        self.append(&Parts {
            key: e.key,
            time: e.time,
            fingerprint: e.fingerprint,
            id: e.id.0.as_bytes(),
            utf8: None,
            chars: &e.chars,
            tokens: &e.tokens,
        })
    }

    /// Appends the stored entry `v`, whose text decodes to `chars` and whose tokens are `tokens`
    /// (the caller decoded them for its own use); returns its slot. The same as `push` of
    /// `v.to_entry()`, without the allocations.
    pub fn push_view(&mut self, v: &EntryView<'_>, chars: &[char], tokens: &[u32]) -> u32 {
        self.append(&Parts {
            key: v.key,
            time: v.time,
            fingerprint: v.fingerprint,
            id: v.id.as_bytes(),
            utf8: Some(v.text.as_bytes()),
            chars,
            tokens,
        })
    }

    fn append(&mut self, e: &Parts<'_>) -> u32 {
        let slot = self.meta.len() as u32;
        let id = e.id;
        let text_len: usize = match e.utf8 {
            Some(t) => t.len(),
            None => e.chars.iter().map(|c| c.len_utf8()).sum(),
        };
        let b = &mut self.record;
        b.clear();
        b.extend_from_slice(&e.key.tau.to_le_bytes());
        b.extend_from_slice(&e.key.arrival.to_le_bytes());
        b.extend_from_slice(&e.key.partition.to_le_bytes());
        b.extend_from_slice(&e.key.seq.to_le_bytes());
        b.extend_from_slice(&e.time.0.to_le_bytes());
        b.extend_from_slice(&(id.len() as u32).to_le_bytes());
        b.extend_from_slice(&(text_len as u32).to_le_bytes());
        b.extend_from_slice(id);
        match e.utf8 {
            Some(t) => b.extend_from_slice(t),
            None => {
                let mut utf8 = [0u8; 4];
                for c in e.chars {
                    b.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        for t in e.tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        // A record past the limit keeps its text and drops its tokens (only the SimHash rule
        // reads them); a text past it (`input.max_text_bytes` above 64 MiB) is cut, its record
        // no longer parses, and the entry is skipped as unreadable (`cold_read_errors`).
        if b.len() > MAX_RECORD {
            b.truncate(HEADER + id.len() + text_len);
            b.truncate(MAX_RECORD);
        }
        let offset = self.cold.len();
        self.cold.append(b);
        self.meta.push(Meta {
            fingerprint: e.fingerprint.0,
            loc: (offset << LEN_BITS) | e.chars.len().min(MAX_RECORD) as u64,
            char_bits: char_bits(e.chars),
            token_word: token_bits(e.tokens)
                | (e.tokens.len().min(MANY_TOKENS) as u64) << TOKEN_COUNT_SHIFT,
        });
        slot
    }

    /// The cold part of `slot`, read into `buf` unless it is in memory.
    pub fn cold<'a>(&'a self, slot: u32, buf: &'a mut Vec<u8>) -> std::io::Result<Cold<'a>> {
        let start = self.meta[slot as usize].offset();
        let end = self
            .meta
            .get(slot as usize + 1)
            .map_or(self.cold.len(), Meta::offset);
        let b = self.cold.read(start, (end - start) as u32, buf)?;
        parse(b).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed entry record")
        })
    }

    /// The entry at `slot`, rebuilt.
    pub fn entry(&self, slot: u32) -> std::io::Result<Entry> {
        let m = &self.meta[slot as usize];
        let mut buf = Vec::new();
        let c = self.cold(slot, &mut buf)?;
        let mut tokens = Vec::new();
        c.tokens(&mut tokens);
        Ok(Entry {
            id: PostId(c.id.to_string()),
            key: c.key,
            time: c.time,
            fingerprint: Fingerprint(m.fingerprint),
            chars: c.chars().collect(),
            text_hash: xxhash_rust::xxh3::xxh3_64(c.text),
            tokens: tokens.into(),
        })
    }

    /// Bytes of cold records appended.
    pub fn cold_len(&self) -> u64 {
        self.cold.len()
    }

    /// The cold records so far, to be copied out (`ColdStore::detach`).
    pub fn detach_cold(&self) -> std::io::Result<Box<dyn super::cold::ColdCopy>> {
        self.cold.detach()
    }

    /// Writes the per-slot records (`snapshot`).
    pub(super) fn write_to(&self, out: &mut super::arrays::Out<'_>) -> std::io::Result<()> {
        out.slice(&self.meta)
    }

    /// The store `write_to` wrote, its cold records in `cold`.
    pub(super) fn read_from(
        r: &mut super::arrays::In<'_>,
        cold: Box<dyn ColdStore>,
    ) -> std::io::Result<Store> {
        let meta: Vec<Meta> = r.vec()?;
        // Each record starts where the one before ends, and the last ends within the store.
        let ends = meta.windows(2).all(|w| w[0].offset() <= w[1].offset());
        if !ends || meta.last().is_some_and(|m| m.offset() > cold.len()) {
            return Err(super::arrays::invalid("its records are out of order"));
        }
        Ok(Store {
            meta,
            cold,
            record: Vec::new(),
        })
    }

    /// Gives back the per-slot records' spare capacity (a generation that stopped growing).
    pub fn shrink(&mut self) {
        self.meta.shrink_to_fit();
    }

    /// Bytes of the per-slot records.
    pub fn meta_bytes(&self) -> usize {
        self.meta.capacity() * std::mem::size_of::<Meta>()
    }

    /// Bytes of cold records held in memory.
    pub fn cold_bytes(&self) -> usize {
        self.cold.memory_bytes()
    }
}

fn parse(b: &[u8]) -> Option<Cold<'_>> {
    let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let id_len = u32_at(36)? as usize;
    let text_len = u32_at(40)? as usize;
    let text_end = HEADER + id_len + text_len;
    Some(Cold {
        key: OrderKey {
            tau: u64_at(0)? as i64,
            arrival: u64_at(8)? as i64,
            partition: u32_at(16)?,
            seq: u64_at(20)?,
        },
        time: EventTime(u64_at(28)? as i64),
        id: std::str::from_utf8(b.get(HEADER..HEADER + id_len)?).ok()?,
        text: b.get(HEADER + id_len..text_end)?,
        tokens: b.get(text_end..)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_meta_stays_small() {
        assert_eq!(std::mem::size_of::<Meta>(), 32);
        assert_eq!(std::mem::align_of::<Meta>(), 32);
        let mut s = Store::default();
        let e = |id: &str, text: &str, seq| Entry {
            id: PostId(id.into()),
            key: OrderKey {
                tau: -5,
                arrival: 1_700_000_000_123,
                partition: 7,
                seq,
            },
            time: EventTime(1_700_000_000),
            fingerprint: Fingerprint(0xfeed),
            chars: text.chars().collect(),
            text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
            tokens: vec![3, 9, seq as u32].into(),
        };
        let a = e("甲1", "转发微博 abc😀", 1);
        let b = e("", "", 2);
        assert_eq!(s.push(&a), 0);
        assert_eq!(s.push(&b), 1);
        assert_eq!(s.entry(0).unwrap(), a);
        assert_eq!(s.entry(1).unwrap(), b);
        // A stored record pushed as it is gives the same slot contents.
        let mut v = Store::default();
        let mut enc = Vec::new();
        a.encode(&mut enc);
        let (view, _) = EntryView::decode(&enc).unwrap();
        v.push_view(&view, &a.chars, &a.tokens);
        assert_eq!(v.entry(0).unwrap(), a);
        assert_eq!(format!("{:?}", v.meta(0)), format!("{:?}", s.meta(0)));
        let damaged = Cold {
            key: a.key,
            time: a.time,
            id: "",
            text: b"a\xE4\xB8\xE4\xB8\x80\xFF",
            tokens: &[],
        };
        assert_eq!(
            damaged.chars().collect::<String>(),
            "a\u{FFFD}\u{4E00}\u{FFFD}"
        );
        let mut buf = Vec::new();
        let cold = s.cold(0, &mut buf).unwrap();
        assert_eq!(cold.id, "甲1");
        assert_eq!(cold.key, a.key);
        let (mut chars, mut tokens) = (Vec::new(), Vec::new());
        let sk = cold.sketch(s.meta(0), &mut chars, &mut tokens);
        assert_eq!(sk.chars, &*a.chars);
        assert_eq!(sk.tokens, &*a.tokens);
        assert_eq!(s.meta(1).chars(), 0);
        assert_eq!(s.meta(0).chars(), 9);
        assert_eq!(sk.text_hash, a.text_hash);
        // The gates' token count and set, kept in one word.
        assert_eq!(s.meta(0).tokens(), 3);
        assert_eq!(s.meta(0).gates().bits.tokens, token_bits(&a.tokens));
        let many = Entry {
            tokens: (0..70_000).collect::<Vec<u32>>().into(),
            ..e("many", "很多词", 3)
        };
        let slot = s.push(&many);
        assert_eq!(s.meta(slot).tokens(), MANY_TOKENS);
        assert_eq!(s.meta(slot).gates().bits.tokens, token_bits(&many.tokens));
        assert_eq!(s.meta(slot).fingerprint, 0xfeed);
    }
}
