//! The stateless half of a decision: normalize, segment, weight and fingerprint a post's text
//! (`Analyzer::analyze`), which depends on the text alone, so that the route stage can run it
//! alone.

use crate::fingerprint::{simhash, SimHash};
use crate::index::grams::{distinct_bigrams, Gram};
use crate::text::memo::SegmentMemo;
use crate::text::normalize::{Normalizer, Removed};
use crate::text::tokenize::{Tokenizer, WeightedToken, WordPool};
use crate::types::Fingerprint;
use crate::verify::Sketch;

/// Everything the stateless analysis produced for one post.
#[derive(Clone, Debug, Default)]
pub struct Analyzed {
    /// Normalized text.
    pub normalized: String,
    /// Normalized text as characters.
    pub chars: Vec<char>,
    /// What normalization removed.
    pub removed: Removed,
    /// Distinct weighted tokens.
    pub tokens: Vec<WeightedToken>,
    /// Sorted distinct 32-bit token hashes.
    pub token_set: Vec<u32>,
    /// Fingerprint and accumulator.
    pub simhash: Option<SimHash>,
    /// xxh3 of the normalized text.
    pub text_hash: u64,
    /// Distinct character bigrams.
    pub grams: Vec<Gram>,
}

impl Analyzed {
    /// The fingerprint (0 for a post without tokens).
    pub fn fingerprint(&self) -> Fingerprint {
        self.simhash
            .as_ref()
            .map_or(Fingerprint(0), |s| s.fingerprint)
    }

    /// The verification view.
    pub fn sketch(&self) -> Sketch<'_> {
        Sketch {
            chars: &self.chars,
            text_hash: self.text_hash,
            fingerprint: self.fingerprint(),
            tokens: &self.token_set,
        }
    }
}

/// Normalization, segmentation and fingerprinting; one per worker thread. Its output depends on
/// the text alone: it keeps recent segmentations (`SegmentMemo`) only to spare repeating them.
pub struct Analyzer<'t> {
    normalizer: Normalizer,
    tokenizer: &'t Tokenizer,
    memo: SegmentMemo,
    /// Strings for the words of `Analyzed::tokens` (`WordPool`).
    pool: WordPool,
}

impl<'t> Analyzer<'t> {
    /// An analyzer sharing `tokenizer`.
    pub fn new(tokenizer: &'t Tokenizer) -> Self {
        Analyzer {
            normalizer: Normalizer::new(),
            tokenizer,
            memo: SegmentMemo::default(),
            pool: WordPool::default(),
        }
    }

    /// Fills `out` from the raw post text.
    pub fn analyze(&mut self, raw: &str, out: &mut Analyzed) {
        self.normalizer
            .normalize_into(raw, &mut out.normalized, Some(&mut out.removed));
        out.chars.clear();
        out.chars.extend(out.normalized.chars());
        out.text_hash = xxhash_rust::xxh3::xxh3_64(out.normalized.as_bytes());
        if !self.memo.recall(
            &out.normalized,
            out.text_hash,
            &mut out.tokens,
            &mut self.pool,
        ) {
            self.tokenizer
                .tokenize(&out.normalized, &mut out.tokens, &mut self.pool);
            self.memo.note(&out.normalized, out.text_hash, &out.tokens);
        }
        out.token_set.clear();
        out.token_set
            .extend(out.tokens.iter().map(|t| t.hash as u32));
        out.token_set.sort_unstable();
        out.token_set.dedup();
        out.simhash = Some(simhash(&out.tokens));
        distinct_bigrams(&out.chars, &mut out.grams);
    }
}
