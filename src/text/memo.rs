//! A memo of recent segmentations. A popular post is reposted thousands of times, most copies
//! moments apart, and segmenting its text again (jieba, then the weights) is most of a post's
//! analysis: a text seen again takes its tokens from the memo instead.
//!
//! Direct-mapped by the normalized text's hash. A text is kept from its second sighting on (the
//! first only writes its hash to the slot), so a stream of texts that never repeat costs one word
//! written per post and keeps nothing, and a hit is confirmed against the whole text. At most
//! `SLOTS` segmentations are kept, a few hundred bytes each.

use super::tokenize::{WeightedToken, WordPool};

/// Slots of the memo (a power of two).
const SLOTS: usize = 1 << 14;

#[derive(Default)]
struct Slot {
    /// Hash of the text last seen in this slot.
    hash: u64,
    /// Its segmentation, once it was seen twice in a row here.
    kept: Option<Box<Kept>>,
}

/// One text's segmentation, compact.
struct Kept {
    text: Box<str>,
    /// The tokens' words, concatenated.
    words: Box<str>,
    /// Per token: its hash, its weight and where its word ends in `words`.
    tokens: Box<[(u64, f32, u32)]>,
}

impl Kept {
    fn of(text: &str, tokens: &[WeightedToken]) -> Kept {
        let mut words = String::new();
        let tokens = tokens
            .iter()
            .map(|t| {
                words.push_str(&t.word);
                (t.hash, t.weight, words.len() as u32)
            })
            .collect();
        Kept {
            text: text.into(),
            words: words.into(),
            tokens,
        }
    }

    /// Writes the tokens to `out`, their words' strings those `out` held and those `pool`
    /// keeps.
    fn fill(&self, out: &mut Vec<WeightedToken>, pool: &mut WordPool) {
        pool.truncate(out, self.tokens.len());
        let mut start = 0;
        for (i, &(hash, weight, end)) in self.tokens.iter().enumerate() {
            let word = &self.words[start..end as usize];
            start = end as usize;
            pool.set(out, i, word, hash, weight);
        }
    }
}

/// Recent segmentations by text (see the module documentation).
#[derive(Default)]
pub struct SegmentMemo {
    slots: Vec<Slot>,
}

impl SegmentMemo {
    /// Writes the tokens of `text` (whose hash is `hash`) to `out` if the memo keeps them
    /// (`Kept::fill`).
    #[inline]
    pub fn recall(
        &self,
        text: &str,
        hash: u64,
        out: &mut Vec<WeightedToken>,
        pool: &mut WordPool,
    ) -> bool {
        let Some(slot) = self.slots.get(hash as usize & (SLOTS - 1)) else {
            return false;
        };
        match &slot.kept {
            Some(k) if slot.hash == hash && *k.text == *text => {
                k.fill(out, pool);
                true
            }
            _ => false,
        }
    }

    /// Notes that `text` (whose hash is `hash`), which `recall` did not find, segments into
    /// `tokens`.
    pub fn note(&mut self, text: &str, hash: u64, tokens: &[WeightedToken]) {
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, Slot::default);
        }
        let slot = &mut self.slots[hash as usize & (SLOTS - 1)];
        if slot.hash == hash && slot.kept.is_none() {
            slot.kept = Some(Box::new(Kept::of(text, tokens)));
        } else {
            // A first sighting, or another text with the same hash.
            slot.hash = hash;
            slot.kept = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(words: &[&str]) -> Vec<WeightedToken> {
        words
            .iter()
            .enumerate()
            .map(|(i, w)| WeightedToken {
                word: w.to_string(),
                hash: super::super::tokenize::token_hash(w),
                weight: 0.5 + i as f32,
            })
            .collect()
    }

    #[test]
    fn a_text_is_recalled_from_its_third_sighting_exactly_as_segmented() {
        let mut m = SegmentMemo::default();
        let mut pool = WordPool::default();
        let (text, toks) = ("地铁二号线停运", tokens(&["地铁", "二号线", "停运"]));
        let mut out = tokens(&["旧", "的", "词", "多", "余"]);
        for _ in 0..2 {
            assert!(!m.recall(text, 7, &mut out, &mut pool));
            m.note(text, 7, &toks);
        }
        assert!(m.recall(text, 7, &mut out, &mut pool));
        assert_eq!(out, toks);
        // Fewer reused tokens than kept ones, and none.
        let mut short = tokens(&["x"]);
        assert!(m.recall(text, 7, &mut short, &mut pool));
        assert_eq!(short, toks);
        let mut empty = Vec::new();
        assert!(m.recall(text, 7, &mut empty, &mut pool));
        assert_eq!(empty, toks);
        // An empty segmentation is kept too.
        for _ in 0..2 {
            m.note("。。", 9, &[]);
        }
        assert!(m.recall("。。", 9, &mut out, &mut pool));
        assert!(out.is_empty());
    }

    #[test]
    fn another_text_with_the_same_hash_or_slot_is_never_recalled_for_it() {
        let mut m = SegmentMemo::default();
        let mut pool = WordPool::default();
        let toks = tokens(&["地铁"]);
        m.note("地铁", 7, &toks);
        m.note("地铁", 7, &toks);
        let mut out = Vec::new();
        assert!(!m.recall("公交", 7, &mut out, &mut pool));
        assert!(!m.recall("地铁", 7 + SLOTS as u64, &mut out, &mut pool));
        // A colliding text takes the slot over: the first text is seen afresh.
        m.note("公交", 7, &tokens(&["公交"]));
        assert!(!m.recall("地铁", 7, &mut out, &mut pool));
        assert!(!m.recall("公交", 7, &mut out, &mut pool));
        m.note("公交", 7, &tokens(&["公交"]));
        assert!(m.recall("公交", 7, &mut out, &mut pool));
        assert_eq!(out, tokens(&["公交"]));
    }
}
