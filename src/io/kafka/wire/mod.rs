//! Binary record formats of the two internal topics: the routed topic (envelopes of posts, each
//! with everything the dedup stage needs, so it never segments again) and the changelog
//! (replicated index entries and partition progress markers, `changelog`). Pure encode/decode,
//! versioned by a magic prefix.

use std::cell::RefCell;

mod changelog;
pub use changelog::{decode_changelog, encode_changelog, ChangelogRead, ChangelogRecord, Marker};

use crate::engine::Analyzed;
use crate::fingerprint::SimHash;
use crate::index::grams::distinct_bigrams;
use crate::text::tokenize::{token_hash, WeightedToken};
use crate::types::{EventTime, Fingerprint, PostId};
use crate::verify::Sketch;

const ROUTED_MAGIC: &[u8; 4] = b"SDR1";
const ENVELOPE_MAGIC: &[u8; 4] = b"SDE1";

/// Posts per routed envelope, at most: a post's order key numbers it within its record with 16
/// bits (`routed_seq`).
pub const ENVELOPE_MAX_POSTS: usize = 4096;

/// The order-key sequence number of post `index` of the routed record at `offset`: offsets and
/// positions in the envelope, in order (a replay's running count orders posts the same way).
pub fn routed_seq(offset: u64, index: u32) -> u64 {
    offset << 16 | u64::from(index)
}

/// The routed record offset of an order-key sequence number (`routed_seq`).
pub fn routed_offset(seq: u64) -> u64 {
    seq >> 16
}

/// A malformed internal record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("malformed {0} record")]
pub struct WireError(pub &'static str);

/// A routed post as the dedup stage receives it.
#[derive(Debug)]
pub struct RoutedPost {
    /// Post id.
    pub id: PostId,
    /// Event time, if the post had one.
    pub created_at: Option<EventTime>,
    /// The analysis made by the route stage.
    pub analyzed: Analyzed,
    /// The original input record.
    pub raw: Vec<u8>,
    /// The raw input record's Kafka timestamp (unix ms), if it had one: outputs are timed
    /// against it (end-to-end latency).
    pub input_ms: Option<i64>,
}

/// Encodes a routed post (`encode_routed_into`).
#[cfg(test)]
pub fn encode_routed(
    id: &PostId,
    created_at: Option<EventTime>,
    input_ms: Option<i64>,
    a: &Analyzed,
    raw: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    encode_routed_into(&mut out, id, created_at, input_ms, a, raw);
    out
}

/// Encodes a routed post into `out`, replacing what it held (the route stage reuses one buffer
/// for every post). `input_ms`, the raw record's timestamp, is an optional trailing field:
/// readers of records without it (and earlier readers, which stop after `raw`) still agree.
pub fn encode_routed_into(
    out: &mut Vec<u8>,
    id: &PostId,
    created_at: Option<EventTime>,
    input_ms: Option<i64>,
    a: &Analyzed,
    raw: &[u8],
) {
    out.clear();
    let words: usize = a.tokens.iter().map(|t| 8 + t.word.len()).sum();
    out.reserve(49 + id.0.len() + a.normalized.len() + words + raw.len());
    out.extend_from_slice(ROUTED_MAGIC);
    put_bytes(out, id.0.as_bytes());
    out.push(u8::from(created_at.is_some()));
    out.extend_from_slice(&created_at.map_or(0, |t| t.0).to_le_bytes());
    out.extend_from_slice(&a.fingerprint().0.to_le_bytes());
    put_bytes(out, a.normalized.as_bytes());
    out.extend_from_slice(&(a.tokens.len() as u32).to_le_bytes());
    for t in &a.tokens {
        put_bytes(out, t.word.as_bytes());
        out.extend_from_slice(&t.weight.to_le_bytes());
    }
    put_bytes(out, raw);
    if let Some(ms) = input_ms {
        out.extend_from_slice(&ms.to_le_bytes());
    }
}

/// A routed record being filled: several posts bound for one routed partition. The broker's cost
/// grows with records and bytes (tansu stores a row per record and reads the rows back on every
/// fetch), so the route stage sends envelopes, compressed: a post's text appears in its raw JSON,
/// its normalized form and its tokens, and zstd removes most of that.
///
/// Layout: magic, a flag byte (0 = stored, 1 = zstd), the body's length before compression
/// (u32), then the body: length-prefixed posts (`encode_routed`).
#[derive(Debug, Default)]
pub struct Envelope {
    body: Vec<u8>,
    posts: usize,
}

/// zstd level of envelopes: the fastest of the standard levels.
const ENVELOPE_ZSTD_LEVEL: i32 = 1;

/// Largest envelope body a reader accepts, before compression.
const ENVELOPE_MAX_BODY: usize = 64 << 20;

impl Envelope {
    /// Appends one encoded post (`encode_routed`).
    pub fn push(&mut self, post: &[u8]) {
        put_bytes(&mut self.body, post);
        self.posts += 1;
    }

    /// Posts in the envelope.
    pub fn len(&self) -> usize {
        self.posts
    }

    /// Whether the envelope holds no post.
    pub fn is_empty(&self) -> bool {
        self.posts == 0
    }

    /// Size of the body before compression, in bytes.
    pub fn bytes(&self) -> usize {
        self.body.len()
    }

    /// The record value; empties the envelope, which keeps its buffer for the next posts. The
    /// body is stored uncompressed if zstd fails.
    pub fn take(&mut self) -> Vec<u8> {
        self.posts = 0;
        let body = &self.body;
        let mut out = Vec::with_capacity(16 + body.len() / 2);
        out.extend_from_slice(ENVELOPE_MAGIC);
        match with_zstd(
            &COMPRESSOR,
            || zstd::bulk::Compressor::new(ENVELOPE_ZSTD_LEVEL),
            |z| z.compress(body),
        ) {
            Ok(z) if z.len() < body.len() => {
                out.push(1);
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(&z);
            }
            _ => {
                out.push(0);
                out.extend_from_slice(&(body.len() as u32).to_le_bytes());
                out.extend_from_slice(body);
            }
        }
        self.body.clear();
        out
    }
}

thread_local! {
    /// Each thread's zstd contexts, made once: a context per envelope cost the route stage
    /// about 1% of its time in allocation alone.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's zstd context in `slot`, made by `make` on first use.
fn with_zstd<Z, T>(
    slot: &'static std::thread::LocalKey<RefCell<Option<Z>>>,
    make: impl FnOnce() -> std::io::Result<Z>,
    f: impl FnOnce(&mut Z) -> std::io::Result<T>,
) -> std::io::Result<T> {
    slot.with(|cell| {
        let mut z = cell.borrow_mut();
        if z.is_none() {
            *z = Some(make()?);
        }
        f(z.as_mut().expect("made above"))
    })
}

/// Decodes a routed record: an envelope of posts, or a single post (`SDR1`, as earlier versions
/// wrote). A malformed post fails the whole record.
pub fn decode_routed_record(buf: &[u8], words: Words) -> Result<Vec<RoutedPost>, WireError> {
    envelope_posts(buf, |post| decode_routed(post, words))
}

/// Decodes a routed record as a worker reading it ahead keeps it (`RoutedSketch`). It fails
/// exactly when `decode_routed_record` does: the keys computed ahead of the owner stay the
/// owner's, who rejects such a record whole.
pub fn decode_sketch_record(buf: &[u8]) -> Result<Vec<RoutedSketch>, WireError> {
    envelope_posts(buf, decode_sketch)
}

/// Each post of a routed record (`decode_routed_record`), decoded by `decode`.
fn envelope_posts<T>(
    buf: &[u8],
    mut decode: impl FnMut(&[u8]) -> Result<T, WireError>,
) -> Result<Vec<T>, WireError> {
    let Some(rest) = buf.strip_prefix(ENVELOPE_MAGIC) else {
        return decode(buf).map(|p| vec![p]);
    };
    let err = || WireError("routed envelope");
    let mut r = Reader(rest);
    let flag = r.u8().ok_or_else(err)?;
    let len = r.u32().ok_or_else(err)? as usize;
    if len > ENVELOPE_MAX_BODY {
        return Err(err());
    }
    let inflated;
    let body = match flag {
        0 => r.0,
        1 => {
            inflated = with_zstd(&DECOMPRESSOR, zstd::bulk::Decompressor::new, |z| {
                z.decompress(r.0, len)
            })
            .map_err(|_| err())?;
            &inflated[..]
        }
        _ => return Err(err()),
    };
    if body.len() != len {
        return Err(err());
    }
    // Counted first, so that the posts are decoded into one allocation of the right size, not
    // moved by every doubling of a growing one (a decoded post is over 500 bytes).
    let mut r = Reader(body);
    let mut count = 0;
    while !r.0.is_empty() {
        r.bytes().ok_or_else(err)?;
        count += 1;
        if count > ENVELOPE_MAX_POSTS {
            return Err(err());
        }
    }
    if count == 0 {
        return Err(err());
    }
    let mut r = Reader(body);
    let mut posts = Vec::with_capacity(count);
    while let Some(post) = r.bytes() {
        posts.push(decode(post)?);
    }
    Ok(posts)
}

/// Whether decoded routed posts keep their tokens' words. Only enriched outputs print them
/// (`output.enrich`); a decision needs the tokens' hashes and weights, and a word apiece was the
/// dedup stage's most frequent allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Words {
    /// Tokens keep their words.
    Keep,
    /// Tokens keep hashes and weights; their words are empty.
    Skip,
}

/// The fields of an encoded routed post, borrowed from it, but its tokens (`parse_routed`).
struct Fields<'a> {
    id: &'a str,
    created_at: Option<EventTime>,
    fingerprint: Fingerprint,
    normalized: &'a str,
    raw: &'a [u8],
    input_ms: Option<i64>,
}

/// Parses an encoded routed post (`encode_routed`), handing each token to `token` with the
/// post's token count, its word and its weight. Every decoder of routed posts goes through
/// here, so they accept and refuse the same records.
fn parse_routed<'a>(
    buf: &'a [u8],
    mut token: impl FnMut(usize, &'a str, f32),
) -> Result<Fields<'a>, WireError> {
    let err = || WireError("routed");
    let mut r = Reader(buf.strip_prefix(ROUTED_MAGIC).ok_or_else(err)?);
    let id = r.str().ok_or_else(err)?;
    let has_time = r.u8().ok_or_else(err)? == 1;
    let time = r.u64().ok_or_else(err)? as i64;
    let fingerprint = Fingerprint(r.u64().ok_or_else(err)?);
    let normalized = r.str().ok_or_else(err)?;
    let n = r.u32().ok_or_else(err)? as usize;
    for _ in 0..n {
        let word = r.str().ok_or_else(err)?;
        let weight = f32::from_bits(r.u32().ok_or_else(err)?);
        token(n, word, weight);
    }
    let raw = r.bytes().ok_or_else(err)?;
    let input_ms = match r.0.len() {
        0 => None,
        8 => Some(r.u64().ok_or_else(err)? as i64),
        _ => return Err(err()),
    };
    Ok(Fields {
        id,
        created_at: has_time.then_some(EventTime(time)),
        fingerprint,
        normalized,
        raw,
        input_ms,
    })
}

/// Decodes a routed post.
pub fn decode_routed(buf: &[u8], words: Words) -> Result<RoutedPost, WireError> {
    let mut tokens = Vec::new();
    let f = parse_routed(buf, |n, word, weight| {
        if tokens.capacity() == 0 {
            tokens.reserve_exact(n.min(1024));
        }
        tokens.push(WeightedToken {
            hash: token_hash(word),
            word: match words {
                Words::Keep => word.to_string(),
                Words::Skip => String::new(),
            },
            weight,
        });
    })?;
    let mut a = Analyzed {
        normalized: f.normalized.to_string(),
        tokens,
        ..Analyzed::default()
    };
    a.chars = a.normalized.chars().collect();
    a.text_hash = xxhash_rust::xxh3::xxh3_64(a.normalized.as_bytes());
    a.token_set = a.tokens.iter().map(|t| t.hash as u32).collect();
    a.token_set.sort_unstable();
    a.token_set.dedup();
    a.simhash = Some(SimHash {
        fingerprint: f.fingerprint,
        acc: [0.0; 64],
    });
    distinct_bigrams(&a.chars, &mut a.grams);
    Ok(RoutedPost {
        id: PostId(f.id.to_string()),
        created_at: f.created_at,
        analyzed: a,
        raw: f.raw.to_vec(),
        input_ms: f.input_ms,
    })
}

/// A routed post as a worker reading it ahead keeps it: its times, for the order keys, and what
/// comparing it with other posts needs (`verify::Sketch`), the same as `decode_routed` gives.
/// It is never output, so no raw record, weights or bigrams: three allocations a post instead of
/// five (its id is kept for `Engine::decide_ahead`, which may index it). In a profile of one of
/// two dedup workers draining a backlog, decoding what it read ahead fell from 10% of its CPU,
/// decoded whole, to 7% (zstd about 3% of both).
#[derive(Debug)]
pub struct RoutedSketch {
    /// Event time, if the post had one.
    pub created_at: Option<EventTime>,
    /// The raw input record's Kafka timestamp (unix ms), if it had one.
    pub input_ms: Option<i64>,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// Normalized text as characters.
    pub chars: Vec<char>,
    /// Sorted distinct 32-bit token hashes.
    pub token_set: Vec<u32>,
    /// The post's id.
    pub id: PostId,
}

impl RoutedSketch {
    /// The verification view.
    pub fn sketch(&self) -> Sketch<'_> {
        Sketch {
            chars: &self.chars,
            text_hash: self.text_hash,
            fingerprint: self.fingerprint,
            tokens: &self.token_set,
        }
    }
}

/// Decodes a routed post as read ahead (`decode_sketch_record`).
fn decode_sketch(buf: &[u8]) -> Result<RoutedSketch, WireError> {
    let mut token_set = Vec::new();
    let f = parse_routed(buf, |n, word, _| {
        if token_set.capacity() == 0 {
            token_set.reserve_exact(n.min(1024));
        }
        token_set.push(token_hash(word) as u32);
    })?;
    token_set.sort_unstable();
    token_set.dedup();
    let mut chars = Vec::with_capacity(f.normalized.chars().count());
    chars.extend(f.normalized.chars());
    Ok(RoutedSketch {
        created_at: f.created_at,
        input_ms: f.input_ms,
        fingerprint: f.fingerprint,
        text_hash: xxhash_rust::xxh3::xxh3_64(f.normalized.as_bytes()),
        chars,
        token_set,
        id: PostId(f.id.to_string()),
    })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
}

#[cfg(test)]
mod tests;
