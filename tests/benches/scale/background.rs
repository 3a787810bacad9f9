//! The background firehose: new posts recombined from real clauses of different posts, a heavy
//! tail of exact reposts of popular posts (Zipf over a churning pool, often behind a `//@user:`
//! chain or an `@mention` that normalization removes) and light edits of popular posts.

use crate::corpus::{Corpus, MAX_BUCKET};
use crate::rng::{Rng, Zipf};

/// Shares of the post kinds and the pool's shape.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Mix {
    /// Share of exact reposts of a popular post.
    pub copy: f64,
    /// Share of light edits of a popular post.
    pub edit: f64,
    /// Posts in the popular pool.
    pub pool: usize,
    /// Zipf exponent over the pool's slots.
    pub zipf_s: f64,
    /// Chance that a new post replaces a random pool slot (the pool churns).
    pub replace: f64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            copy: 0.22,
            edit: 0.08,
            pool: 20_000,
            zipf_s: 1.0,
            replace: 0.1,
        }
    }
}

/// What a generated post is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Recombined from clauses.
    Fresh,
    /// An exact repost (after normalization) of a pool post.
    Copy,
    /// A light edit of a pool post.
    Edit,
}

/// Counts of generated posts.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Generated {
    /// Recombined posts.
    pub fresh: u64,
    /// Exact reposts.
    pub copy: u64,
    /// Light edits.
    pub edit: u64,
    /// Raw character lengths: posts up to 11, 12..=19, 20..=140, above 140.
    pub len_buckets: [u64; 4],
}

const JOINERS: [&str; 8] = ["，", "，", "，", "。", "！", " ", "？", "、"];
const EMOTICONS: [&str; 8] = [
    "[哈哈]", "[泪]", "[怒]", "[鼓掌]", "[嘻嘻]", "[威武]", "[可怜]", "[围观]",
];

/// The generator.
pub struct Background<'c> {
    corpus: &'c Corpus,
    mix: Mix,
    rng: Rng,
    zipf: Zipf,
    pool: Vec<String>,
    chars: Vec<char>,
    /// What was generated so far.
    pub generated: Generated,
}

impl<'c> Background<'c> {
    /// A generator over `corpus`, deterministic for `seed`.
    pub fn new(corpus: &'c Corpus, mix: Mix, seed: u64) -> Self {
        Background {
            corpus,
            zipf: Zipf::new(mix.pool, mix.zipf_s),
            pool: Vec::with_capacity(mix.pool),
            mix,
            rng: Rng::new(seed),
            chars: Vec::new(),
            generated: Generated::default(),
        }
    }

    /// Writes the next post's raw text into `out`.
    pub fn next(&mut self, out: &mut String) -> Kind {
        out.clear();
        let u = self.rng.unit();
        let kind = if self.pool.is_empty() || u >= self.mix.copy + self.mix.edit {
            Kind::Fresh
        } else if u < self.mix.copy {
            Kind::Copy
        } else {
            Kind::Edit
        };
        match kind {
            Kind::Fresh => {
                self.fresh(out);
                self.generated.fresh += 1;
                if self.pool.len() < self.mix.pool {
                    self.pool.push(out.clone());
                } else if self.rng.chance(self.mix.replace) {
                    let slot = self.rng.below(self.pool.len());
                    self.pool[slot].clone_from(out);
                }
            }
            Kind::Copy => {
                self.copy(out);
                self.generated.copy += 1;
            }
            Kind::Edit => {
                self.edit(out);
                self.generated.edit += 1;
            }
        }
        let n = out.chars().count();
        self.generated.len_buckets[match n {
            0..=11 => 0,
            12..=19 => 1,
            20..=140 => 2,
            _ => 3,
        }] += 1;
        kind
    }

    /// Clauses of different real posts joined until the sampled length is reached: a short
    /// target is usually one real clause of exactly that length.
    fn fresh(&mut self, out: &mut String) {
        let target = self.corpus.sample_len(&mut self.rng).max(1);
        let mut have = 0;
        while have < target {
            if have > 0 {
                out.push_str(JOINERS[self.rng.below(JOINERS.len())]);
                have += 1;
            }
            let need = target.saturating_sub(have).max(1);
            let (clause, n) = if need <= MAX_BUCKET {
                let len = if self.rng.chance(0.5) {
                    need
                } else {
                    1 + self.rng.below(need)
                };
                self.corpus.clause_of_len(&mut self.rng, len)
            } else {
                self.corpus.any_clause(&mut self.rng)
            };
            out.push_str(clause);
            have += n;
        }
    }

    fn popular(&mut self) -> &str {
        let slot = self.zipf.sample(&mut self.rng, self.pool.len());
        &self.pool[slot]
    }

    fn user(&mut self) -> String {
        let len = 2 + self.rng.below(3);
        let (c, _) = self.corpus.clause_of_len(&mut self.rng, len);
        let c: String = c.chars().filter(|ch| ch.is_alphanumeric()).collect();
        format!("{c}{}", self.rng.below(10_000))
    }

    /// An exact repost: the popular text as is, behind a reply mention, or followed by the
    /// `//@user:` chain it reposts (normalization cuts the chain).
    fn copy(&mut self, out: &mut String) {
        let r = self.rng.unit();
        let user = self.user();
        let text = self.popular().to_string();
        if r < 0.4 {
            out.push_str(&text);
        } else if r < 0.85 {
            let (tail, _) = self.corpus.any_clause(&mut self.rng);
            out.push_str(&text);
            out.push_str("//@");
            out.push_str(&user);
            out.push(':');
            out.push_str(tail);
        } else {
            out.push_str("回复@");
            out.push_str(&user);
            out.push(':');
            out.push_str(&text);
        }
    }

    /// A light edit of a popular text: one or two characters deleted, inserted or replaced, an
    /// emoticon or a link added, or punctuation changed.
    fn edit(&mut self, out: &mut String) {
        let text = self.popular().to_string();
        self.chars.clear();
        self.chars.extend(text.chars());
        let r = self.rng.unit();
        if r < 0.6 && !self.chars.is_empty() {
            let edits = if r < 0.4 { 1 } else { 2 };
            for _ in 0..edits {
                self.char_edit();
            }
            out.extend(self.chars.iter());
        } else if r < 0.8 {
            out.push_str(&text);
            if self.rng.chance(0.5) {
                out.push_str(EMOTICONS[self.rng.below(EMOTICONS.len())]);
            } else {
                out.push_str(" http://t.cn/");
                for _ in 0..7 {
                    out.push((b'a' + self.rng.below(26) as u8) as char);
                }
            }
        } else {
            for c in &text.chars().collect::<Vec<_>>() {
                match c {
                    '，' => out.push('。'),
                    '。' | '！' => {}
                    _ => out.push(*c),
                }
            }
            out.push('！');
        }
    }

    fn char_edit(&mut self) {
        let n = self.chars.len();
        let (clause, _) = self.corpus.any_clause(&mut self.rng);
        let new = clause.chars().next().unwrap_or('的');
        match self.rng.below(3) {
            0 if n > 1 => {
                self.chars.remove(self.rng.below(n));
            }
            1 => self.chars.insert(self.rng.below(n + 1), new),
            _ => {
                let i = self.rng.below(n);
                self.chars[i] = new;
            }
        }
    }
}
