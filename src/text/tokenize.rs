//! Segmentation and token weights: jieba-rs words, a stopword list, and the three weighting schemes
//! (`tf`, `tfidf`, `tfidf_len`). Token hashes are xxh3-64 with a fixed seed, part of the persisted
//! state format: changing them invalidates stored fingerprints.

use jieba_rs::Jieba;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

/// Distinct tokens up to which `tokenize` finds a repeated token by a linear scan.
const SCAN_TOKENS: usize = 32;

/// Seed of the token hash. Persisted fingerprints depend on it: never change it without bumping
/// the state format version.
pub const TOKEN_HASH_SEED: u64 = 0x5113_d0ed_0000_0001;

/// Wang (2019) word-length relevance: a normal curve over the word's length in characters.
const LEN_MU: f32 = 4.51;
const LEN_SIGMA: f32 = 2.207;

/// The jieba IDF table (jieba's `idf.txt`, MIT licence), embedded so the binary runs anywhere.
const DEFAULT_IDF: &str = include_str!("../../config/idf.txt");
/// The shipped stopword list.
pub const DEFAULT_STOPWORDS: &str = include_str!("../../config/stopwords.txt");

/// How token weights are computed before they enter the SimHash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Weighting {
    /// Term frequency within the post.
    Tf,
    /// Term frequency times jieba's IDF (median IDF for unknown words).
    Tfidf,
    /// `tfidf` times the word-length relevance factor exp(-(len-4.51)^2 / (2*2.207^2)).
    TfidfLen,
}

impl Weighting {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Weighting::Tf => "tf",
            Weighting::Tfidf => "tfidf",
            Weighting::TfidfLen => "tfidf_len",
        }
    }
}

/// One distinct token of a post with its weight.
#[derive(Clone, Debug, PartialEq)]
pub struct WeightedToken {
    /// The word as segmented (normalized text, so already lowercase).
    pub word: String,
    /// Stable 64-bit hash of the word.
    pub hash: u64,
    /// Weight fed into the SimHash accumulator.
    pub weight: f32,
}

/// Most strings a `WordPool` keeps.
const POOL_WORDS: usize = 4096;

/// Strings of the words that token lists dropped, kept to spell the tokens of later posts:
/// without it, a post with more tokens than the one before allocated a string for each one past
/// that count, and a post with fewer freed them. One per analyzing thread, beside the token list
/// it serves.
#[derive(Debug, Default)]
pub struct WordPool(Vec<String>);

impl WordPool {
    /// Sets token `i` of `out` to `word`, `hash` and `weight`; `i` is at most `out.len()`, where
    /// it is pushed with a kept string.
    #[inline]
    pub fn set(
        &mut self,
        out: &mut Vec<WeightedToken>,
        i: usize,
        word: &str,
        hash: u64,
        weight: f32,
    ) {
        if i == out.len() {
            let word = self.0.pop().unwrap_or_default();
            out.push(WeightedToken { word, hash, weight });
        }
        let t = &mut out[i];
        t.word.clear();
        t.word.push_str(word);
        t.hash = hash;
        t.weight = weight;
    }

    /// Shortens `out` to `n` tokens, keeping the strings of the words dropped (up to
    /// `POOL_WORDS` in all).
    pub fn truncate(&mut self, out: &mut Vec<WeightedToken>, n: usize) {
        if n >= out.len() {
            return;
        }
        let room = POOL_WORDS.saturating_sub(self.0.len());
        self.0.extend(out.drain(n..).take(room).map(|t| t.word));
    }

    /// Strings kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when it keeps none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Hashes a token with the persisted seed.
pub fn token_hash(word: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(word.as_bytes(), TOKEN_HASH_SEED)
}

/// The word-length relevance factor of Wang (2019), peak 1.0 at 4.51 characters.
pub fn length_factor(chars: usize) -> f32 {
    let z = (chars as f32 - LEN_MU) / LEN_SIGMA;
    (-0.5 * z * z).exp()
}

struct IdfTable {
    map: FxHashMap<&'static str, f32>,
    median: f32,
}

impl IdfTable {
    fn parse(text: &'static str) -> IdfTable {
        let mut map = FxHashMap::default();
        map.reserve(280_000);
        let mut values = Vec::with_capacity(280_000);
        for line in text.lines() {
            let mut parts = line.split(' ');
            if let (Some(word), Some(v)) = (parts.next(), parts.next()) {
                if let Ok(idf) = v.trim().parse::<f32>() {
                    map.insert(word, idf);
                    values.push(idf);
                }
            }
        }
        let median = if values.is_empty() {
            1.0
        } else {
            let mid = (values.len() - 1) / 2;
            let (_, m, _) = values.select_nth_unstable_by(mid, f32::total_cmp);
            *m
        };
        IdfTable { map, median }
    }

    fn get(&self, word: &str) -> f32 {
        self.map.get(word).copied().unwrap_or(self.median)
    }
}

/// Segments normalized text into weighted tokens. Built once per process (loading jieba's
/// dictionary takes ~100 ms) and shared read-only.
pub struct Tokenizer {
    jieba: Jieba,
    stopwords: FxHashSet<String>,
    idf: Option<IdfTable>,
    weighting: Weighting,
}

impl Tokenizer {
    /// Builds the tokenizer; `stopwords` is the text of a stopword file (one word per line, `#`
    /// comments). The IDF table is loaded only when the weighting needs it.
    pub fn new(weighting: Weighting, stopwords: &str) -> Tokenizer {
        let stopwords = stopwords
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_lowercase)
            .collect();
        let idf = match weighting {
            Weighting::Tf => None,
            Weighting::Tfidf | Weighting::TfidfLen => Some(IdfTable::parse(DEFAULT_IDF)),
        };
        Tokenizer {
            jieba: Jieba::new(),
            stopwords,
            idf,
            weighting,
        }
    }

    /// Segments `normalized` and puts its distinct non-stopword tokens in `out` (replacing what
    /// it held), in order of first occurrence, with weights per the configured scheme. The
    /// words' strings are those `out` held and those `pool` keeps, before a new one is
    /// allocated; the ones left over go to `pool`.
    pub fn tokenize(&self, normalized: &str, out: &mut Vec<WeightedToken>, pool: &mut WordPool) {
        // Tokens found so far are `out[..n]`; the rest are spare.
        let mut n = 0;
        if normalized.is_empty() {
            pool.truncate(out, 0);
            return;
        }
        // Each distinct token's place in `out` by hash, once `out` outgrows a linear scan.
        let mut places: FxHashMap<u64, usize> = FxHashMap::default();
        for tok in self.jieba.cut(normalized, false) {
            let word = tok.word;
            if self.stopwords.contains(word) {
                continue;
            }
            let hash = token_hash(word);
            let same = |t: &WeightedToken| t.hash == hash && t.word == word;
            let found = &out[..n];
            // Most posts are short: a linear scan beats hashing for their handful of tokens. A
            // long post's thousands would make it quadratic.
            let found = if n <= SCAN_TOKENS {
                found.iter().position(same)
            } else {
                if places.is_empty() {
                    for (i, t) in found.iter().enumerate() {
                        places.entry(t.hash).or_insert(i);
                    }
                }
                match places.get(&hash) {
                    Some(&i) if same(&found[i]) => Some(i),
                    // Two words with one hash: the map holds the first, scan for the others.
                    Some(_) => found.iter().position(same),
                    None => None,
                }
            };
            match found {
                Some(i) => out[i].weight += 1.0,
                None => {
                    if !places.is_empty() {
                        places.entry(hash).or_insert(n);
                    }
                    pool.set(out, n, word, hash, 1.0);
                    n += 1;
                }
            }
        }
        pool.truncate(out, n);
        if let Some(idf) = &self.idf {
            for t in out.iter_mut() {
                t.weight *= idf.get(&t.word);
                if self.weighting == Weighting::TfidfLen {
                    t.weight *= length_factor(t.word.chars().count());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(t: &Tokenizer, s: &str) -> Vec<String> {
        let mut out = Vec::new();
        t.tokenize(s, &mut out, &mut WordPool::default());
        out.into_iter().map(|t| t.word).collect()
    }

    #[test]
    fn segments_chinese_and_drops_stopwords() {
        let t = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
        let w = words(&t, "我们今天去北京大学看看");
        assert!(w.contains(&"北京大学".to_string()), "{w:?}");
        assert!(!w.contains(&"我们".to_string()), "stopword kept: {w:?}");
    }

    #[test]
    fn tf_counts_repeats_once_per_distinct_token() {
        let t = Tokenizer::new(Weighting::Tf, "");
        let mut out = Vec::new();
        t.tokenize("北京北京上海", &mut out, &mut WordPool::default());
        let bj = out.iter().find(|x| x.word == "北京").map(|x| x.weight);
        assert_eq!(bj, Some(2.0));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn tfidf_len_prefers_mid_length_words() {
        assert!(length_factor(4) > length_factor(1));
        assert!(length_factor(5) > length_factor(9));
        assert!((length_factor(4) - 0.974).abs() < 0.01);
        let t = Tokenizer::new(Weighting::TfidfLen, "");
        let mut out = Vec::new();
        t.tokenize("北京大学生物系", &mut out, &mut WordPool::default());
        assert!(out.iter().all(|x| x.weight > 0.0));
    }

    #[test]
    fn long_posts_count_tokens_as_short_ones_do() {
        let t = Tokenizer::new(Weighting::TfidfLen, DEFAULT_STOPWORDS);
        // Thousands of distinct tokens, each several times, past the linear scan.
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!("转发微博测试第{}号消息abc{} ", i % 700, i % 997));
        }
        let mut got = Vec::new();
        t.tokenize(&text, &mut got, &mut WordPool::default());
        assert!(got.len() > 10 * SCAN_TOKENS, "{} tokens", got.len());
        // The same, counted with a linear scan all the way.
        let mut want: Vec<WeightedToken> = Vec::new();
        for tok in t.jieba.cut(&text, false) {
            if t.stopwords.contains(tok.word) {
                continue;
            }
            match want.iter_mut().find(|w| w.word == tok.word) {
                Some(w) => w.weight += 1.0,
                None => want.push(WeightedToken {
                    word: tok.word.to_string(),
                    hash: token_hash(tok.word),
                    weight: 1.0,
                }),
            }
        }
        let idf = t.idf.as_ref().unwrap();
        for w in &mut want {
            w.weight *= idf.get(&w.word);
            w.weight *= length_factor(w.word.chars().count());
        }
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.word, g.hash, g.weight), (&w.word, w.hash, w.weight));
        }
    }

    #[test]
    fn a_reused_output_gives_what_a_fresh_one_does() {
        let t = Tokenizer::new(Weighting::TfidfLen, DEFAULT_STOPWORDS);
        let texts = [
            "北京大学生物系的同学们今天去上海交通大学参观访问",
            "北京北京上海",
            "",
            "转发微博",
            "今天天气很好我们去公园散步吧顺便买点水果回家",
        ];
        let (mut reused, mut pool) = (Vec::new(), WordPool::default());
        for text in texts.iter().chain(texts.iter().rev()) {
            t.tokenize(text, &mut reused, &mut pool);
            let mut fresh = Vec::new();
            t.tokenize(text, &mut fresh, &mut WordPool::default());
            assert_eq!(reused, fresh, "{text}");
        }
    }

    #[test]
    fn the_words_a_post_drops_spell_the_next_posts_tokens() {
        let t = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
        let long = "北京大学生物系的同学们今天去上海交通大学参观访问";
        let (mut out, mut pool) = (Vec::new(), WordPool::default());
        t.tokenize(long, &mut out, &mut pool);
        let many = out.len();
        assert!(many > 4, "{out:?}");
        let strings = |out: &[WeightedToken]| -> Vec<*const u8> {
            out.iter().map(|w| w.word.as_ptr()).collect()
        };
        // A string comes back from the pool at another place than the one it left, and grows
        // there if it must (which may move it, as the allocator decides); two rounds give each
        // one room for both of its places.
        let mut round = |out: &mut Vec<WeightedToken>| {
            t.tokenize("北京上海", out, &mut pool);
            assert_eq!(out.len(), 2);
            assert_eq!(pool.len(), many - 2);
            t.tokenize(long, out, &mut pool);
            assert!(pool.is_empty());
        };
        round(&mut out);
        round(&mut out);
        let before = strings(&out);
        round(&mut out);
        // The same strings, none allocated anew.
        let (mut after, mut before) = (strings(&out), before);
        after.sort();
        before.sort();
        assert_eq!(after, before);
        let mut fresh = Vec::new();
        t.tokenize(long, &mut fresh, &mut WordPool::default());
        assert_eq!(out, fresh);
    }

    #[test]
    fn token_hash_is_stable() {
        // Persisted fingerprints depend on these values: they must never change.
        assert_eq!(token_hash("微博"), 0x694a_a1f9_5e9c_f70d);
        assert_eq!(token_hash("hello"), 0xf125_a7e9_8a96_5846);
    }
}
