//! Keys of the `entries` tree: chunks of entries by generation, in insertion order, each
//! stored in pieces.

/// Most bytes of encoded entries in one stored value (a piece may exceed it by its last entry).
/// sled writes a value much over 100 KiB as a blob file of its own, and its recovery reads every
/// blob file the log names in full on each open: with chunks of whole checkpoints (megabytes),
/// opening a state dir of 1M entries took 0.5-1 s. In pieces of this size they stay in sled's
/// log, which opens in milliseconds and is read faster.
pub(super) const PIECE_BYTES: usize = 48 << 10;

/// Chunk key: generation (sign bit flipped so negative generations sort first) then the first
/// sequence number of the chunk, both big-endian, so key order is (generation, insertion) order.
pub(super) fn entry_key(gen: i64, first_seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&((gen as u64) ^ (1 << 63)).to_be_bytes());
    k[8..].copy_from_slice(&first_seq.to_be_bytes());
    k
}

/// Key of a chunk's piece `i`: the chunk key for the first piece, then the chunk key followed by
/// `i` big-endian, so a chunk's pieces follow it in key order, before the next chunk.
pub(super) fn piece_key(gen: i64, first_seq: u64, i: u32) -> Vec<u8> {
    let mut k = entry_key(gen, first_seq).to_vec();
    if i > 0 {
        k.extend_from_slice(&i.to_be_bytes());
    }
    k
}

/// The keys of generation `gen`'s chunks: from its first possible key to the first of the next
/// generation (past every key for the last generation there can be).
pub(super) fn generation_keys(gen: i64) -> std::ops::Range<Vec<u8>> {
    let end = match gen.checked_add(1) {
        Some(next) => entry_key(next, 0).to_vec(),
        None => vec![0xFF; 17],
    };
    entry_key(gen, 0).to_vec()..end
}

pub(super) fn key_generation(k: &[u8]) -> i64 {
    let mut g = [0u8; 8];
    g.copy_from_slice(&k[..8.min(k.len())]);
    (u64::from_be_bytes(g) ^ (1 << 63)) as i64
}

/// The first sequence number (or chunk number) of the chunk a key belongs to.
pub(super) fn chunk_seq(k: &[u8]) -> u64 {
    let mut s = [0u8; 8];
    if let Some(b) = k.get(8..16) {
        s.copy_from_slice(b);
    }
    u64::from_be_bytes(s)
}
