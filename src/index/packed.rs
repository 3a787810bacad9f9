//! A generation's entries in their stored encoding, one after another: what a restart reads from
//! state and hands to the threads that build the index, so that no entry is allocated on its way
//! from storage into a sealed generation.

use std::sync::Arc;

use super::entry::{skim, DecodeError, EntryView};
use super::{Entry, OrderKey};

/// Encoded entries (`Entry::encode`), in insertion order, in pieces: buffers read from storage
/// kept as they are (`push_piece`) and copies of single records. Built of whole records only
/// (each is skimmed on the way in), so walking it never splits a record; the id, text and tokens
/// are validated when the records are decoded (`views`).
#[derive(Clone, Default)]
pub struct Packed {
    pieces: Vec<Piece>,
    len: usize,
}

/// Bytes shared with whoever read them (a storage buffer), never copied.
pub type Shared = Arc<dyn AsRef<[u8]> + Send + Sync>;

#[derive(Clone)]
enum Piece {
    Owned(Vec<u8>),
    Shared(Shared),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Owned(v) => v,
            Piece::Shared(b) => (**b).as_ref(),
        }
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("entries", &self.len)
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Packed {
    /// The entries, encoded.
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Packed {
        let mut p = Packed::default();
        for e in entries {
            p.push(e);
        }
        p
    }

    /// Appends `e`.
    pub fn push(&mut self, e: &Entry) {
        e.encode(self.owned());
        self.len += 1;
    }

    /// The owned piece at the end, added if the last one is shared.
    fn owned(&mut self) -> &mut Vec<u8> {
        if !matches!(self.pieces.last(), Some(Piece::Owned(_))) {
            self.pieces.push(Piece::Owned(Vec::new()));
        }
        match self.pieces.last_mut() {
            Some(Piece::Owned(v)) => v,
            _ => unreachable!("an owned piece was just added"),
        }
    }

    /// Splits the encoded entry at the front of `buf` off: appends it when `keep` says so of its
    /// order key. Returns the rest of `buf`.
    pub fn push_record<'b>(
        &mut self,
        buf: &'b [u8],
        keep: impl FnOnce(&OrderKey) -> bool,
    ) -> Result<&'b [u8], DecodeError> {
        let (key, n) = skim(buf)?;
        if keep(&key) {
            self.owned().extend_from_slice(&buf[..n]);
            self.len += 1;
        }
        Ok(&buf[n..])
    }

    /// Appends the encoded entries of `piece` that `keep` says so of, by order key: the piece
    /// itself when it keeps them all, else copies of the records kept. Nothing is appended when
    /// a record is malformed.
    pub fn push_piece(
        &mut self,
        piece: Shared,
        mut keep: impl FnMut(&OrderKey) -> bool,
    ) -> Result<(), DecodeError> {
        let bytes = (*piece).as_ref();
        let mut rest = bytes;
        let mut kept = Vec::new();
        let mut all = true;
        while !rest.is_empty() {
            let (key, n) = skim(rest)?;
            let at = bytes.len() - rest.len();
            if keep(&key) {
                kept.push(at..at + n);
            } else {
                all = false;
            }
            rest = &rest[n..];
        }
        self.len += kept.len();
        if all && !kept.is_empty() {
            self.pieces.push(Piece::Shared(piece));
        } else {
            for r in kept {
                self.owned().extend_from_slice(&bytes[r]);
            }
        }
        Ok(())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the encoded entries.
    pub fn bytes(&self) -> usize {
        self.pieces.iter().map(|p| p.bytes().len()).sum()
    }

    /// The entries, decoded in order without allocating; decoding stops at the first record
    /// that fails.
    pub fn views(&self) -> impl Iterator<Item = Result<EntryView<'_>, DecodeError>> + '_ {
        let mut pieces = self.pieces.iter();
        let mut rest: &[u8] = &[];
        std::iter::from_fn(move || {
            while rest.is_empty() {
                rest = pieces.next()?.bytes();
            }
            match EntryView::decode(rest) {
                Ok((v, tail)) => {
                    rest = tail;
                    Some(Ok(v))
                }
                Err(e) => {
                    rest = &[];
                    pieces = [].iter();
                    Some(Err(e))
                }
            }
        })
    }

    /// Hands the entries to `f` in order, decoded without allocating, letting go of each piece
    /// once its entries were handed over: a restart's builder holds a generation's stored bytes
    /// only while it reads them, and what it lets go of serves the reads that follow. Stops at
    /// the first record that does not decode, or that `f` fails.
    pub fn drain<E: From<DecodeError>>(
        self,
        mut f: impl FnMut(EntryView<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        for piece in self.pieces {
            let mut rest = piece.bytes();
            while !rest.is_empty() {
                let (v, tail) = EntryView::decode(rest)?;
                f(v)?;
                rest = tail;
            }
        }
        Ok(())
    }

    /// The entries, owned.
    pub fn entries(&self) -> Result<Vec<Entry>, DecodeError> {
        self.views().map(|v| v.map(|v| v.to_entry())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EventTime, Fingerprint, PostId};

    fn entry(seq: u64, text: &str) -> Entry {
        Entry {
            id: PostId(format!("id{seq}")),
            key: OrderKey {
                tau: 100,
                arrival: 7,
                partition: 2,
                seq,
            },
            time: EventTime(99),
            fingerprint: Fingerprint(seq * 31),
            chars: text.chars().collect(),
            text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
            tokens: vec![1, 2, seq as u32 + 3].into(),
        }
    }

    #[test]
    fn records_are_kept_by_their_key_and_decode_to_the_entries() {
        let all = [entry(1, "转发微博"), entry(2, ""), entry(3, "abc 😀 测试")];
        let mut buf = Vec::new();
        for e in &all {
            e.encode(&mut buf);
        }
        let mut p = Packed::default();
        let mut rest = buf.as_slice();
        while !rest.is_empty() {
            rest = p.push_record(rest, |k| k.seq != 2).unwrap();
        }
        assert_eq!(p.len(), 2);
        assert_eq!(p.entries().unwrap(), vec![all[0].clone(), all[2].clone()]);
        assert_eq!(
            p.entries(),
            Packed::from_entries([&all[0], &all[2]]).entries()
        );
        // A piece whose records are all kept is held as it is; one with a record left out is
        // copied without it; pieces and records keep their order.
        let buf: Shared = Arc::new(buf);
        let mut q = Packed::default();
        q.push(&all[1]);
        q.push_piece(Arc::clone(&buf), |_| true).unwrap();
        q.push_piece(Arc::clone(&buf), |k| k.seq != 1).unwrap();
        q.push(&all[0]);
        let seqs: Vec<u64> = q.views().map(|v| v.unwrap().key.seq).collect();
        assert_eq!(seqs, vec![2, 1, 2, 3, 2, 3, 1]);
        assert_eq!(q.len(), 7);
        assert!(matches!(q.pieces[1], Piece::Shared(_)));
        assert_eq!(q.pieces.len(), 3);
        let mut drained = Vec::new();
        q.clone()
            .drain(|v| {
                drained.push(v.to_entry());
                Ok::<_, DecodeError>(())
            })
            .unwrap();
        assert_eq!(Ok(drained), q.entries());
        let v = p.views().nth(1).unwrap().unwrap();
        assert_eq!((v.id, v.text, v.key.seq), ("id3", "abc 😀 测试", 3));
        assert_eq!(v.tokens().collect::<Vec<_>>(), vec![1, 2, 6]);
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_panic() {
        let mut buf = Vec::new();
        entry(1, "转发微博").encode(&mut buf);
        let mut p = Packed::default();
        assert_eq!(
            p.push_record(&buf[..buf.len() - 1], |_| true),
            Err(DecodeError::Malformed)
        );
        let cut: Shared = Arc::new(buf[..buf.len() - 1].to_vec());
        assert_eq!(p.push_piece(cut, |_| true), Err(DecodeError::Malformed));
        assert!(p.is_empty());
        // A text that is not UTF-8 passes the skim and fails the decode, which then stops.
        let at = buf.windows(3).position(|w| w == "转".as_bytes()).unwrap();
        buf[at] = 0xFF;
        p.push_record(&buf, |_| true).unwrap();
        p.push_record(&buf, |_| true).unwrap();
        let decoded: Vec<_> = p.views().collect();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].as_ref().unwrap_err(), &DecodeError::Malformed);
        assert_eq!(p.entries(), Err(DecodeError::Malformed));
        let mut seen = 0;
        let drained = p.drain(|_| {
            seen += 1;
            Ok::<_, DecodeError>(())
        });
        assert_eq!((drained, seen), (Err(DecodeError::Malformed), 0));
    }
}
