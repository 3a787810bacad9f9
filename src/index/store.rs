//! Compact storage of one generation's entries, without a heap allocation per entry: what the
//! candidate filters and verification's cheap gates read of every candidate sits in one 40-byte
//! record per slot (`Meta`); the rest (order key, time, id, normalized text as UTF-8, token
//! hashes) is appended to two arenas and read back only for candidates that pass the gates.

use crate::types::{EventTime, Fingerprint, PostId};
use crate::verify::{Gates, Sketch};

use super::entry::{Entry, OrderKey};

/// Per-slot record: what filters and gates need, plus where the rest lives.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    /// SimHash fingerprint.
    pub fingerprint: u64,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// Offset of the entry's record in the byte arena.
    offset: u64,
    /// Low 32 bits of xxh3 of the id (a cheap "is this the post's own entry" test).
    pub id_hash: u32,
    /// Normalized text length in characters.
    pub chars: u32,
    /// Distinct tokens.
    pub tokens: u32,
}

impl Meta {
    /// What verification's gates need.
    pub fn gates(&self) -> Gates {
        Gates {
            chars: self.chars as usize,
            tokens: self.tokens as usize,
            fingerprint: Fingerprint(self.fingerprint),
            text_hash: self.text_hash,
        }
    }
}

/// The id hash stored in `Meta::id_hash`.
pub fn id_hash(id: &str) -> u32 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes()) as u32
}

/// One generation's entries.
#[derive(Default)]
pub struct Store {
    meta: Vec<Meta>,
    /// Per entry: tau, partition, seq, time, start in `tokens` (u64), id length (u32), text
    /// length in bytes (u32), id, text.
    bytes: Vec<u8>,
    tokens: Vec<u32>,
}

const HEADER: usize = 8 + 4 + 8 + 8 + 8 + 4 + 4;

/// The cold part of an entry, read from the arenas.
pub struct Cold<'a> {
    /// Order key of the post that created the entry.
    pub key: OrderKey,
    /// Event time of that post.
    pub time: EventTime,
    /// Representative id.
    pub id: &'a str,
    /// Normalized text.
    pub text: &'a str,
    /// Sorted distinct token hashes.
    pub tokens: &'a [u32],
}

impl Store {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The record of `slot`.
    pub fn meta(&self, slot: u32) -> &Meta {
        &self.meta[slot as usize]
    }

    /// Appends `e`; returns its slot.
    pub fn push(&mut self, e: &Entry) -> u32 {
        let slot = self.meta.len() as u32;
        let offset = self.bytes.len() as u64;
        let start = self.tokens.len() as u64;
        let id = e.id.0.as_bytes();
        let mut text = [0u8; 4];
        let text_len: usize = e.chars.iter().map(|c| c.len_utf8()).sum();
        let b = &mut self.bytes;
        b.extend_from_slice(&e.key.tau.to_le_bytes());
        b.extend_from_slice(&e.key.partition.to_le_bytes());
        b.extend_from_slice(&e.key.seq.to_le_bytes());
        b.extend_from_slice(&e.time.0.to_le_bytes());
        b.extend_from_slice(&start.to_le_bytes());
        b.extend_from_slice(&(id.len() as u32).to_le_bytes());
        b.extend_from_slice(&(text_len as u32).to_le_bytes());
        b.extend_from_slice(id);
        for c in e.chars.iter() {
            b.extend_from_slice(c.encode_utf8(&mut text).as_bytes());
        }
        self.tokens.extend_from_slice(&e.tokens);
        self.meta.push(Meta {
            fingerprint: e.fingerprint.0,
            text_hash: e.text_hash,
            offset,
            id_hash: id_hash(&e.id.0),
            chars: e.chars.len() as u32,
            tokens: e.tokens.len() as u32,
        });
        slot
    }

    /// The cold part of `slot`.
    pub fn cold(&self, slot: u32) -> Cold<'_> {
        let m = &self.meta[slot as usize];
        let b = &self.bytes[m.offset as usize..];
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let start = u64_at(28) as usize;
        let id_len = u32_at(36) as usize;
        let text_len = u32_at(40) as usize;
        let id = &b[HEADER..HEADER + id_len];
        let text = &b[HEADER + id_len..HEADER + id_len + text_len];
        Cold {
            key: OrderKey {
                tau: u64_at(0) as i64,
                partition: u32_at(8),
                seq: u64_at(12),
            },
            time: EventTime(u64_at(20) as i64),
            // Written from `&str` and `char`s above, so always valid UTF-8.
            id: std::str::from_utf8(id).unwrap_or_default(),
            text: std::str::from_utf8(text).unwrap_or_default(),
            tokens: &self.tokens[start..start + m.tokens as usize],
        }
    }

    /// The verification view of `slot` (whose cold part is `cold`), its characters decoded
    /// into `chars`.
    pub fn sketch<'a>(
        &'a self,
        slot: u32,
        cold: &Cold<'a>,
        chars: &'a mut Vec<char>,
    ) -> Sketch<'a> {
        let m = &self.meta[slot as usize];
        chars.clear();
        chars.extend(cold.text.chars());
        Sketch {
            chars,
            text_hash: m.text_hash,
            fingerprint: Fingerprint(m.fingerprint),
            tokens: cold.tokens,
        }
    }

    /// The entry at `slot`, rebuilt.
    pub fn entry(&self, slot: u32) -> Entry {
        let m = &self.meta[slot as usize];
        let c = self.cold(slot);
        Entry {
            id: PostId(c.id.to_string()),
            key: c.key,
            time: c.time,
            fingerprint: Fingerprint(m.fingerprint),
            chars: c.text.chars().collect(),
            text_hash: m.text_hash,
            tokens: c.tokens.into(),
        }
    }

    /// Approximate bytes held.
    pub fn approx_bytes(&self) -> usize {
        self.meta.capacity() * std::mem::size_of::<Meta>()
            + self.bytes.capacity()
            + self.tokens.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_meta_stays_small() {
        assert_eq!(std::mem::size_of::<Meta>(), 40);
        let mut s = Store::default();
        let e = |id: &str, text: &str, seq| Entry {
            id: PostId(id.into()),
            key: OrderKey {
                tau: -5,
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
        assert_eq!(s.entry(0), a);
        assert_eq!(s.entry(1), b);
        let mut buf = Vec::new();
        let cold = s.cold(0);
        let sk = s.sketch(0, &cold, &mut buf);
        assert_eq!(sk.chars, &*a.chars);
        assert_eq!(cold.id, "甲1");
        assert_eq!(s.meta(0).id_hash, id_hash("甲1"));
        assert_eq!(s.meta(1).chars, 0);
    }
}
