//! One posting list of a sealed generation's prefix form (`prefix`), stored newest slot first:
//! the varint of the newest slot, then of each gap down to the next, and after each slot one
//! byte of its entry's length in characters (255 for 255 and more). A scan cut at
//! `posting_scan_cap` decodes only the slots it keeps, and the length filters (`Index::
//! prefix_candidates`) need no read of the entry's record, a cache miss each, unless the byte
//! is saturated.

use super::postings::{put_varint, take_varint};

/// The length byte of an entry of 255 characters or more: its record tells.
pub const LONG: u8 = u8::MAX;

/// One list (see the module documentation).
#[derive(Clone, Copy, Debug, Default)]
pub struct Newest<'a> {
    bytes: &'a [u8],
    len: u32,
}

impl<'a> Newest<'a> {
    /// The list of `len` slots encoded in `bytes` (by `put_newest_first`).
    pub fn new(bytes: &'a [u8], len: u32) -> Newest<'a> {
        Newest { bytes, len }
    }

    /// Number of slots.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the list has no slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slots, newest first, each with its length byte.
    #[inline]
    pub fn iter_sized(&self) -> impl Iterator<Item = (u32, u8)> + 'a {
        let (mut bytes, mut prev) = (self.bytes, None::<u32>);
        (0..self.len).map(move |_| {
            let (v, rest) = take_varint(bytes);
            let (&chars, rest) = rest.split_first().unwrap_or((&LONG, &[]));
            bytes = rest;
            let slot = prev.map_or(v, |p| p.wrapping_sub(v));
            prev = Some(slot);
            (slot, chars)
        })
    }

    /// The slots, newest first.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        self.iter_sized().map(|(slot, _)| slot)
    }
}

/// The length byte of an entry of `chars` characters.
#[inline]
pub fn length_byte(chars: u32) -> u8 {
    chars.min(u32::from(LONG)) as u8
}

/// Appends ascending `slots` newest first, each with its entry's length byte, `bytes[i]` that
/// of `slots[i]` (`length_byte`): the builders have them beside the slots, so that encoding a
/// list reads no entry's length at a random place.
pub fn put_newest_first(out: &mut Vec<u8>, slots: &[u32], bytes: &[u8]) {
    debug_assert_eq!(slots.len(), bytes.len());
    let mut prev = None;
    for (&slot, &b) in slots.iter().zip(bytes).rev() {
        put_varint(out, prev.map_or(slot, |p: u32| p - slot));
        out.push(b);
        prev = Some(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        // A list stored newest first gives back its slots newest first with their lengths
        // (saturated at `LONG`), and any prefix of them decodes alone.
        #[test]
        fn a_list_reads_back_newest_first(set in proptest::collection::btree_set(any::<u32>(), 0..300), take in 0usize..300) {
            let slots: Vec<u32> = set.into_iter().collect();
            let chars = |s: u32| s % 600;
            let sizes: Vec<u8> = slots.iter().map(|&s| length_byte(chars(s))).collect();
            let mut bytes = Vec::new();
            put_newest_first(&mut bytes, &slots, &sizes);
            let list = Newest::new(&bytes, slots.len() as u32);
            let newest: Vec<(u32, u8)> = slots.iter().rev().map(|&s| (s, chars(s).min(255) as u8)).collect();
            prop_assert_eq!(list.iter_sized().collect::<Vec<_>>(), newest.clone());
            prop_assert_eq!(list.iter_sized().take(take).collect::<Vec<_>>(), newest[..take.min(newest.len())].to_vec());
            prop_assert_eq!(list.iter().count(), slots.len());
        }
    }
}
