//! A stored representative and its compact binary encoding (the sled value format).

use crate::types::{EventTime, Fingerprint, PostId};
use crate::verify::Sketch;

/// Version of the entry encoding written; `decode` also reads `ENTRY_FORMAT_V2` (keys without
/// `arrival`).
pub const ENTRY_FORMAT: u8 = 3;

/// The previous entry encoding: the same fields but the order key's `arrival` (taken as 0).
pub const ENTRY_FORMAT_V2: u8 = 2;

/// Version of what stored entries mean (fingerprints, token hashes); a state dir written under
/// another one cannot be reused. Bump when the token hash or the fingerprint changes.
pub const ANALYSIS_FORMAT: u8 = 2;

/// The total order of decisions: a post is compared only with entries whose key is smaller.
/// `tau` is the deciding partition's watermark (largest event time seen in that partition up to
/// and including the post), so keys grow along every partition; `arrival` breaks ties within an
/// event second: the largest Kafka timestamp (ms) of the live raw input records seen in the
/// partition so far, so that in a live stream a post waits for other partitions only until they
/// have seen a post that arrived after it, not until the next event second (0 for files, for
/// records without a timestamp and for a backlog); `seq` is the line number or offset within the partition.
/// The file pipeline is one partition.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct OrderKey {
    /// Partition watermark at the post, unix seconds.
    pub tau: i64,
    /// Largest raw-record arrival time (unix ms) of the partition's live posts up to the post
    /// (`Visibility::is_live`), or 0.
    pub arrival: i64,
    /// Partition of the post (0 for files).
    pub partition: u32,
    /// Sequence number within the partition.
    pub seq: u64,
}

/// How much of the other partitions' decisions a post sees (`OrderKey::sees`). By default
/// every entry ordered before it: the strict order, in which dedup workers that own different
/// partitions wait for each other post by post. Two relaxations let them decide in parallel; both
/// are rules on the keys, so verdicts still depend only on the routed topic's contents. The file
/// pipeline is one partition: neither ever matters there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visibility {
    /// Event-time tick in seconds: across partitions, a post sees entries of earlier ticks only,
    /// and workers wait for each other once per tick (0 = off).
    pub tick_secs: u64,
    /// Live slack in ms: a live post does not see another partition's entries of its own event
    /// second that arrived less than this before it, so a worker waits for the others only
    /// until they have decided what arrived `slack_ms` before its post (0 = off).
    pub slack_ms: u64,
    /// A post is live when its arrival lies at most this many seconds after its partition
    /// watermark (a backlog read long after its event times keeps the strict order).
    pub live_lag_secs: u64,
}

impl Visibility {
    /// Whether a post that arrived at `arrival` (unix ms) with its partition at watermark `tau`
    /// (unix s) is live: it arrived at most `live_lag_secs` after the watermark.
    pub fn is_live(&self, tau: i64, arrival: i64) -> bool {
        arrival > 0
            && arrival.saturating_sub(tau.saturating_mul(1000))
                <= (self.live_lag_secs as i64).saturating_mul(1000)
    }
}

impl OrderKey {
    /// Whether a post with key `self` sees an entry with key `e`. Within its own partition a
    /// post sees every earlier entry; across partitions, those before its `horizon`, or with
    /// ticks (`Visibility::tick_secs`) those of earlier ticks.
    pub fn sees(&self, e: &OrderKey, v: &Visibility) -> bool {
        if e.partition == self.partition {
            return e < self;
        }
        if v.tick_secs > 0 {
            return tick(e.tau, v.tick_secs) < tick(self.tau, v.tick_secs);
        }
        *e < self.horizon(v)
    }

    /// The key below which this post sees other partitions' entries (without ticks): itself
    /// in the strict order; for a live post with a slack, the start of its own arrival less
    /// the slack, within its event second.
    pub fn horizon(&self, v: &Visibility) -> OrderKey {
        if v.slack_ms == 0 || !self.is_live(v) {
            return *self;
        }
        OrderKey {
            tau: self.tau,
            arrival: self.arrival.saturating_sub(v.slack_ms as i64),
            partition: 0,
            seq: 0,
        }
    }

    fn is_live(&self, v: &Visibility) -> bool {
        v.is_live(self.tau, self.arrival)
    }

    /// Whether this post waits for other partitions only up to a slack (a live post, without
    /// ticks): what it waits for arrived `slack_ms` before it or in an earlier event second,
    /// so other workers' progress markers normally settle it. Otherwise it waits in the strict
    /// order, post by post, or for a whole tick.
    pub fn waits_with_slack(&self, v: &Visibility) -> bool {
        v.tick_secs == 0 && self.horizon(v) != *self
    }

    /// The event-time tick of this key.
    pub fn tick(&self, tick_secs: u64) -> i64 {
        tick(self.tau, tick_secs)
    }
}

fn tick(tau: i64, tick_secs: u64) -> i64 {
    if tick_secs == 0 {
        tau
    } else {
        tau.div_euclid(tick_secs as i64)
    }
}

/// One unique representative in the index. Copies of the same representative can live in several
/// generations (a cluster that keeps receiving duplicates is refreshed into the current one).
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Id of the representative post, which is also the cluster id.
    pub id: PostId,
    /// Order key of the post that created this copy.
    pub key: OrderKey,
    /// Event time of the post that created this copy.
    pub time: EventTime,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// Normalized text.
    pub chars: Box<[char]>,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// Sorted distinct 32-bit token hashes (Zhou's Dup is computed on these).
    pub tokens: Box<[u32]>,
}

/// Decoding failures of a stored entry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The value ended early or has trailing bytes.
    #[error("entry record is truncated or malformed")]
    Malformed,
    /// The record was written by an incompatible version.
    #[error("entry format {0} is not supported (expected {ENTRY_FORMAT})")]
    Format(u8),
}

impl Entry {
    /// The verification view of this entry.
    pub fn sketch(&self) -> Sketch<'_> {
        Sketch {
            chars: &self.chars,
            text_hash: self.text_hash,
            fingerprint: self.fingerprint,
            tokens: &self.tokens,
        }
    }

    /// Approximate heap plus inline bytes, for the index-size metric.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Entry>()
            + self.id.0.len()
            + self.chars.len() * 4
            + self.tokens.len() * 4
    }

    /// Appends the binary encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let text_len: usize = self.chars.iter().map(|c| c.len_utf8()).sum();
        out.reserve(49 + self.id.0.len() + text_len + 4 * self.tokens.len());
        out.push(ENTRY_FORMAT);
        out.extend_from_slice(&self.key.tau.to_le_bytes());
        out.extend_from_slice(&self.key.arrival.to_le_bytes());
        out.extend_from_slice(&self.key.partition.to_le_bytes());
        out.extend_from_slice(&self.key.seq.to_le_bytes());
        out.extend_from_slice(&self.time.0.to_le_bytes());
        out.extend_from_slice(&self.fingerprint.0.to_le_bytes());
        put_bytes(out, self.id.0.as_bytes());
        // The text in UTF-8, written from its characters without a string between.
        out.extend_from_slice(&(text_len as u32).to_le_bytes());
        let mut utf8 = [0u8; 4];
        for c in self.chars.iter() {
            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        }
        out.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        for t in self.tokens.iter() {
            out.extend_from_slice(&t.to_le_bytes());
        }
    }

    /// Decodes one entry from the front of `buf`, returning it and the rest of the buffer.
    pub fn decode(buf: &[u8]) -> Result<(Entry, &[u8]), DecodeError> {
        let (v, rest) = EntryView::decode(buf)?;
        Ok((v.to_entry(), rest))
    }
}

/// A stored entry borrowed from its encoding (`Entry::encode`): what a restart reads without
/// allocating per entry.
#[derive(Clone, Copy, Debug)]
pub struct EntryView<'a> {
    /// Order key of the post that created the entry.
    pub key: OrderKey,
    /// Event time of that post.
    pub time: EventTime,
    /// SimHash fingerprint.
    pub fingerprint: Fingerprint,
    /// Representative id.
    pub id: &'a str,
    /// Normalized text.
    pub text: &'a str,
    /// Token hashes, 4 little-endian bytes each.
    tokens: &'a [u8],
}

impl<'a> EntryView<'a> {
    /// Decodes one entry from the front of `buf`, returning it and the rest of the buffer.
    pub fn decode(buf: &'a [u8]) -> Result<(EntryView<'a>, &'a [u8]), DecodeError> {
        let f = Fields::split(buf)?;
        let utf8 = |b| simdutf8::basic::from_utf8(b).map_err(|_| DecodeError::Malformed);
        let view = EntryView {
            key: f.header.key,
            time: f.header.time,
            fingerprint: f.header.fingerprint,
            id: utf8(f.id)?,
            text: utf8(f.text)?,
            tokens: f.tokens,
        };
        Ok((view, f.rest))
    }

    /// The sorted distinct token hashes.
    pub fn tokens(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        le_u32s(self.tokens)
    }

    /// xxh3 of the normalized text (`Entry::text_hash`).
    pub fn text_hash(&self) -> u64 {
        xxhash_rust::xxh3::xxh3_64(self.text.as_bytes())
    }

    /// The owned entry.
    pub fn to_entry(&self) -> Entry {
        Entry {
            id: PostId(self.id.to_string()),
            key: self.key,
            time: self.time,
            fingerprint: self.fingerprint,
            chars: self.text.chars().collect(),
            text_hash: self.text_hash(),
            tokens: self.tokens().collect(),
        }
    }
}

/// The fixed fields at the front of an encoded entry.
struct Header {
    key: OrderKey,
    time: EventTime,
    fingerprint: Fingerprint,
}

impl Header {
    fn read(buf: &[u8]) -> Result<(Header, Reader<'_>), DecodeError> {
        let mut r = Reader(buf);
        let format = r.u8()?;
        if format != ENTRY_FORMAT && format != ENTRY_FORMAT_V2 {
            return Err(DecodeError::Format(format));
        }
        let tau = r.u64()? as i64;
        let arrival = if format == ENTRY_FORMAT {
            r.u64()? as i64
        } else {
            0
        };
        let key = OrderKey {
            tau,
            arrival,
            partition: r.u32()?,
            seq: r.u64()?,
        };
        let time = EventTime(r.u64()? as i64);
        let fingerprint = Fingerprint(r.u64()?);
        Ok((
            Header {
                key,
                time,
                fingerprint,
            },
            r,
        ))
    }
}

/// The order key and the length in bytes of the encoded entry at the front of `buf`, read
/// without decoding its id, text or tokens (which are not validated): how a restart sorts
/// records out before handing them to the threads that decode them.
pub fn skim(buf: &[u8]) -> Result<(OrderKey, usize), DecodeError> {
    let f = Fields::split(buf)?;
    Ok((f.header.key, buf.len() - f.rest.len()))
}

/// The fields of the encoded entry at the front of a buffer, not validated, and what follows.
struct Fields<'a> {
    header: Header,
    id: &'a [u8],
    text: &'a [u8],
    tokens: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    fn split(buf: &'a [u8]) -> Result<Fields<'a>, DecodeError> {
        let (header, mut r) = Header::read(buf)?;
        let id = r.bytes()?;
        let text = r.bytes()?;
        let n = r.u32()? as usize;
        let tokens = r.take(n.checked_mul(4).ok_or(DecodeError::Malformed)?)?;
        Ok(Fields {
            header,
            id,
            text,
            tokens,
            rest: r.0,
        })
    }
}

/// Little-endian 32-bit values, 4 bytes each (a trailing partial value is ignored).
pub fn le_u32s(bytes: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(tau: i64, partition: u32, seq: u64) -> OrderKey {
        OrderKey {
            tau,
            arrival: 0,
            partition,
            seq,
        }
    }

    #[test]
    fn own_partition_sees_every_earlier_post_other_partitions_only_earlier_ticks() {
        let tick = |tick_secs| Visibility {
            tick_secs,
            ..Visibility::default()
        };
        let (t10, t0) = (&tick(10), &tick(0));
        let post = k(105, 1, 50);
        // Own partition: by key, whatever the tick.
        assert!(post.sees(&k(105, 1, 49), t10));
        assert!(!post.sees(&k(105, 1, 51), t10));
        // Other partitions: only earlier ticks (100..109 is one tick of 10 s).
        assert!(post.sees(&k(99, 0, 7), t10));
        assert!(!post.sees(&k(100, 0, 7), t10));
        assert!(!post.sees(&k(104, 0, 7), t10));
        // Tick 0: strict order across partitions.
        assert!(post.sees(&k(104, 0, 7), t0));
        assert!(post.sees(&k(105, 0, 7), t0));
        assert!(!post.sees(&k(105, 2, 0), t0));
        // Negative times fall into earlier ticks, not tick 0.
        assert_eq!(k(-1, 0, 0).tick(10), -1);
    }

    #[test]
    fn a_live_post_does_not_see_other_partitions_within_the_slack() {
        let v = Visibility {
            slack_ms: 250,
            live_lag_secs: 60,
            ..Visibility::default()
        };
        let at = |tau, arrival, partition| OrderKey {
            tau,
            arrival,
            partition,
            seq: 9,
        };
        let post = at(100, 100_400, 1);
        assert!(post.sees(&at(100, 100_100, 0), &v), "300 ms before it");
        assert!(!post.sees(&at(100, 100_200, 0), &v), "200 ms before it");
        assert!(post.sees(&at(100, 100_300, 1), &v), "its own partition");
        assert!(
            post.sees(&at(99, 100_390, 2), &v),
            "an earlier event second"
        );
        // A backlog (arrivals far past the event times) keeps the strict order.
        let old = at(100, 900_000, 1);
        assert!(old.sees(&at(100, 899_900, 0), &v));
        assert_eq!(old.horizon(&v), old);
        assert_eq!(post.horizon(&Visibility::default()), post);
        // Only the live post waits with a slack, and not with ticks nor without a slack.
        assert!(post.waits_with_slack(&v));
        assert!(!old.waits_with_slack(&v));
        assert!(!post.waits_with_slack(&Visibility { tick_secs: 1, ..v }));
        assert!(!post.waits_with_slack(&Visibility { slack_ms: 0, ..v }));
    }

    #[test]
    fn round_trip() {
        let text = "转发微博测试";
        let e = Entry {
            id: PostId("3350040253028385".into()),
            key: OrderKey {
                tau: 1_304_404_747,
                arrival: 1_304_404_747_250,
                partition: 3,
                seq: 42,
            },
            time: EventTime(1_304_404_747),
            fingerprint: Fingerprint(0xdead_beef),
            chars: text.chars().collect(),
            text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
            tokens: vec![1, 5, 9].into(),
        };
        let mut buf = Vec::new();
        e.encode(&mut buf);
        e.encode(&mut buf);
        let (d1, rest) = Entry::decode(&buf).unwrap();
        let (d2, rest) = Entry::decode(rest).unwrap();
        assert!(rest.is_empty());
        assert_eq!(d1, e);
        assert_eq!(d2, e);
        assert_eq!(Entry::decode(&buf[..10]), Err(DecodeError::Malformed));
        // The previous format: no arrival.
        let mut v2 = buf[..buf.len() / 2].to_vec();
        v2[0] = ENTRY_FORMAT_V2;
        v2.drain(9..17);
        let (d, rest) = Entry::decode(&v2).unwrap();
        assert!(rest.is_empty());
        assert_eq!(d.key.arrival, 0);
        assert_eq!(
            (d.key.tau, d.key.seq, d.id),
            (e.key.tau, e.key.seq, e.id.clone())
        );
    }

    #[test]
    fn arrival_orders_posts_of_one_event_second_before_the_partition_does() {
        let at = |arrival, partition| OrderKey {
            tau: 100,
            arrival,
            partition,
            seq: 0,
        };
        assert!(at(5, 7) < at(6, 0));
        assert!(at(5, 0) < at(5, 7));
        assert!(at(9_999, 7) < k(101, 0, 0));
    }
}
