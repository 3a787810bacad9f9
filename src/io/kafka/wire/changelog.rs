//! The changelog topic's records: replicated index entries, in batches, and partition
//! progress markers. Pure encode/decode, versioned by a magic prefix.

use super::{Reader, WireError};
use crate::index::{Entry, EntryView, OrderKey};

const CHANGELOG_MAGIC: &[u8; 4] = b"SDC1";

/// How far a dedup partition has got, published on the changelog so that workers owning other
/// partitions know which of its entries they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// The routed partition.
    pub partition: u32,
    /// Every record of the partition with a smaller key is decided and its entries precede this
    /// marker on the changelog.
    pub lower_bound: OrderKey,
    /// The partition had no pending records (caught up for a while): it blocks nobody.
    pub idle: bool,
    /// The publishing worker has a post held back by a partition another worker owns (never
    /// set with `idle`; earlier versions read it as not idle, which it is not). Still written
    /// for workers of earlier versions in the same group, which hurried only for a worker that
    /// said so; a worker now hurries whenever it catches up on shared partitions
    /// (`Worker::hurry`) and reads it no more.
    pub waiting: bool,
    /// The last decided offset and the partition watermark and arrival there, if any: a worker
    /// taking the partition over at `offset + 1` resumes with them.
    pub last: Option<(u64, i64, i64)>,
}

/// One changelog record.
#[derive(Debug, PartialEq)]
pub enum ChangelogRecord {
    /// Index entries decided by some partitions, as (generation, entry), in decision order. A
    /// worker batches the entries of many decisions into one record: the broker's cost is per
    /// record, and a marker written after the batch still covers every entry in it.
    Entries(Vec<(i64, Entry)>),
    /// A progress marker.
    Marker(Marker),
}

/// Encodes a changelog record.
pub fn encode_changelog(rec: &ChangelogRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(CHANGELOG_MAGIC);
    match rec {
        ChangelogRecord::Entries(entries) => {
            out.push(3);
            out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for (gen, entry) in entries {
                out.extend_from_slice(&gen.to_le_bytes());
                entry.encode(&mut out);
            }
        }
        ChangelogRecord::Marker(m) => {
            out.push(4);
            out.extend_from_slice(&m.partition.to_le_bytes());
            put_key(&mut out, &m.lower_bound);
            // Flags: 1 idle, 2 waiting. Earlier versions read "idle" as the byte being 1.
            out.push(u8::from(m.idle) | (u8::from(m.waiting && !m.idle) << 1));
            out.push(u8::from(m.last.is_some()));
            let (o, t, a) = m.last.unwrap_or((0, 0, 0));
            out.extend_from_slice(&o.to_le_bytes());
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&a.to_le_bytes());
        }
    }
    out
}

/// A changelog record as read: its entries borrowed from it, each decoded whole only by a
/// worker that adds it to its index (`EntryView::to_entry`).
#[derive(Debug)]
pub enum ChangelogRead<'a> {
    /// Index entries, as (generation, entry).
    Entries(Vec<(i64, EntryView<'a>)>),
    /// A progress marker.
    Marker(Marker),
}

/// Decodes a changelog record.
pub fn decode_changelog(buf: &[u8]) -> Result<ChangelogRead<'_>, WireError> {
    let err = || WireError("changelog");
    let mut r = Reader(buf.strip_prefix(CHANGELOG_MAGIC).ok_or_else(err)?);
    match r.u8().ok_or_else(err)? {
        // 1: a single entry (written by earlier versions); 3: a batch.
        kind @ (1 | 3) => {
            let n = if kind == 1 {
                1
            } else {
                r.u32().ok_or_else(err)?
            };
            let mut entries = Vec::with_capacity(n.min(4096) as usize);
            for _ in 0..n {
                let gen = r.u64().ok_or_else(err)? as i64;
                let (entry, rest) = EntryView::decode(r.0).map_err(|_| err())?;
                r.0 = rest;
                entries.push((gen, entry));
            }
            if !r.0.is_empty() {
                return Err(err());
            }
            Ok(ChangelogRead::Entries(entries))
        }
        // 2: a marker without arrivals (written by earlier versions, taken as 0); 4: with them.
        kind @ (2 | 4) => {
            let with_arrival = kind == 4;
            let partition = r.u32().ok_or_else(err)?;
            let tau = r.u64().ok_or_else(err)? as i64;
            let key_arrival = if with_arrival {
                r.u64().ok_or_else(err)? as i64
            } else {
                0
            };
            let lower_bound = OrderKey {
                tau,
                arrival: key_arrival,
                partition: r.u32().ok_or_else(err)?,
                seq: r.u64().ok_or_else(err)?,
            };
            let flags = r.u8().ok_or_else(err)?;
            let (idle, waiting) = (flags & 1 == 1, flags & 2 == 2);
            let has_last = r.u8().ok_or_else(err)? == 1;
            let (offset, tau) = (r.u64().ok_or_else(err)?, r.u64().ok_or_else(err)? as i64);
            let last_arrival = if with_arrival {
                r.u64().ok_or_else(err)? as i64
            } else {
                0
            };
            let last = (offset, tau, last_arrival);
            Ok(ChangelogRead::Marker(Marker {
                partition,
                lower_bound,
                idle,
                waiting: waiting && !idle,
                last: has_last.then_some(last),
            }))
        }
        _ => Err(err()),
    }
}

fn put_key(out: &mut Vec<u8>, k: &OrderKey) {
    out.extend_from_slice(&k.tau.to_le_bytes());
    out.extend_from_slice(&k.arrival.to_le_bytes());
    out.extend_from_slice(&k.partition.to_le_bytes());
    out.extend_from_slice(&k.seq.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventTime, Fingerprint, PostId};

    #[test]
    fn changelog_round_trip() {
        let m = ChangelogRecord::Marker(Marker {
            partition: 3,
            lower_bound: OrderKey {
                tau: 99,
                arrival: 99_500,
                partition: 3,
                seq: 7,
            },
            idle: true,
            waiting: false,
            last: Some((6, 98, 98_750)),
        });
        let buf = encode_changelog(&m);
        let ChangelogRead::Marker(read) = decode_changelog(&buf).unwrap() else {
            panic!("not a marker");
        };
        assert_eq!(ChangelogRecord::Marker(read), m);
        // A marker as earlier versions wrote it (kind 2, no arrivals) reads with arrivals 0.
        let mut old = buf.clone();
        old[4] = 2;
        old.drain(old.len() - 8..);
        old.drain(4 + 1 + 4 + 8..4 + 1 + 4 + 16);
        let ChangelogRead::Marker(o) = decode_changelog(&old).unwrap() else {
            panic!("not a marker");
        };
        assert_eq!((o.lower_bound.arrival, o.last), (0, Some((6, 98, 0))));
        assert_eq!(
            (o.lower_bound.tau, o.lower_bound.seq, o.idle),
            (99, 7, true)
        );
        let text = "测试文本";
        // A waiting worker's marker: the flag reads back; earlier versions, which take the
        // flags byte being 1 as idle, read it as not idle; an idle marker is never waiting.
        let flags_at = 4 + 1 + 4 + 28;
        for (idle, waiting, byte) in [(false, true, 2), (true, true, 1), (false, false, 0)] {
            let ChangelogRecord::Marker(mut w) = m else {
                unreachable!()
            };
            (w.idle, w.waiting) = (idle, waiting);
            let buf = encode_changelog(&ChangelogRecord::Marker(w));
            assert_eq!(buf[flags_at], byte);
            let ChangelogRead::Marker(r) = decode_changelog(&buf).unwrap() else {
                panic!("not a marker");
            };
            assert_eq!((r.idle, r.waiting), (idle, waiting && !idle));
        }
        let entry = |seq| Entry {
            id: PostId("x".into()),
            key: OrderKey {
                tau: 5,
                arrival: 5_001,
                partition: 1,
                seq,
            },
            time: EventTime(5),
            fingerprint: Fingerprint(9),
            chars: text.chars().collect(),
            text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
            tokens: vec![1, 2].into(),
        };
        let entries = vec![(-2, entry(2)), (7, entry(3))];
        let buf = encode_changelog(&ChangelogRecord::Entries(entries.clone()));
        let ChangelogRead::Entries(read) = decode_changelog(&buf).unwrap() else {
            panic!("not entries");
        };
        let read: Vec<(i64, Entry)> = read.iter().map(|(g, v)| (*g, v.to_entry())).collect();
        assert_eq!(read, entries);
        assert!(decode_changelog(&buf[..buf.len() - 1]).is_err());
        assert!(decode_changelog(b"junk").is_err());
    }
}
