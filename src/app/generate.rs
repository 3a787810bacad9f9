//! The load generator behind `simdedup generate` (the command is `app::cmd::generate`). It makes Weibo-style posts
//! (JSON lines in the `generic` input preset) with a configurable mix of unique posts and
//! exact, format, light and heavy copies, each copy some delay after its original, to a file,
//! stdout or a Kafka topic, optionally paced, and a truth file `simdedup eval` can score.
//! Deterministic: the same arguments and `--seed` give the same bytes.

mod lexicon;
#[cfg(test)]
mod tests;
mod text;

use std::collections::{HashSet, VecDeque};
use std::str::FromStr;

use serde::Serialize;

use crate::text::normalize::Normalizer;
use text::{Rng, Style};

/// The kind of a generated post.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A new original.
    Unique,
    /// The original's text, byte for byte.
    Exact,
    /// The original's core with other decorations: normalizes to the same text.
    Format,
    /// One or two character edits.
    Light,
    /// A crop or added commentary.
    Heavy,
}

impl Kind {
    /// Every kind, in mix order.
    pub const ALL: [Kind; 5] = [
        Kind::Unique,
        Kind::Exact,
        Kind::Format,
        Kind::Light,
        Kind::Heavy,
    ];

    /// The name used in `--mix` and the truth file.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Unique => "unique",
            Kind::Exact => "exact",
            Kind::Format => "format",
            Kind::Light => "light",
            Kind::Heavy => "heavy",
        }
    }
}

/// Shares of the kinds, summing to 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Mix(pub [f64; 5]);

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Mix, String> {
        let mut w = [0.0; 5];
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry {part:?} is not KIND=SHARE"))?;
            let i = Kind::ALL
                .iter()
                .position(|x| x.as_str() == k.trim())
                .ok_or_else(|| {
                    format!("unknown kind {k:?} (expected unique, exact, format, light, heavy)")
                })?;
            let v: f64 = v.trim().parse().map_err(|_| format!("bad share {v:?}"))?;
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("share of {k} must be >= 0"));
            }
            w[i] = v;
        }
        let sum: f64 = w.iter().sum();
        if w[0] <= 0.0 || sum <= 0.0 {
            return Err("the mix needs a positive unique share".into());
        }
        Ok(Mix(w.map(|x| x / sum)))
    }
}

/// Distribution of a copy's delay after its original, in event-time seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Delay {
    /// Exponential with this mean.
    Exp(f64),
    /// Uniform between the two bounds.
    Uniform(f64, f64),
    /// Always this delay.
    Fixed(f64),
}

impl FromStr for Delay {
    type Err = String;

    fn from_str(s: &str) -> Result<Delay, String> {
        let num = |x: &str| -> Result<f64, String> {
            x.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("bad delay seconds {x:?}"))
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["exp", m] => Ok(Delay::Exp(num(m)?)),
            ["fixed", d] => Ok(Delay::Fixed(num(d)?)),
            ["uniform", a, b] if num(a)? <= num(b)? => Ok(Delay::Uniform(num(a)?, num(b)?)),
            _ => Err(format!(
                "bad delay {s:?} (expected exp:MEAN, uniform:MIN:MAX or fixed:SECS)"
            )),
        }
    }
}

impl Delay {
    fn sample(self, rng: &mut Rng) -> f64 {
        match self {
            Delay::Exp(m) => rng.exp(m),
            Delay::Uniform(a, b) => a + (b - a) * rng.unit(),
            Delay::Fixed(d) => d,
        }
    }
}

/// What the stream is made of.
#[derive(Clone, Debug)]
pub struct GenConfig {
    /// Seed.
    pub seed: u64,
    /// Kind shares.
    pub mix: Mix,
    /// Copy delays.
    pub delay: Delay,
    /// Event time of the first post (unix seconds).
    pub start_secs: i64,
    /// Posts per event-time second.
    pub event_rate: f64,
}

/// One generated post with its truth.
#[derive(Clone, Debug, PartialEq)]
pub struct Post {
    /// Post id (a decimal string, Weibo-mid style).
    pub id: String,
    /// Text.
    pub text: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Posting user id.
    pub user: String,
    /// Id of the original this post belongs to (its own id for originals).
    pub cluster: String,
    /// Kind.
    pub kind: Kind,
    /// The text normalizes to nothing (emoticons only): passes through, never indexed.
    pub empty: bool,
}

#[derive(Serialize)]
struct PostLine<'a> {
    id: &'a str,
    text: &'a str,
    created_at: i64,
    user: &'a str,
}

#[derive(Serialize)]
struct TruthLine<'a> {
    id: &'a str,
    cluster: &'a str,
    label: &'a str,
    kind: &'a str,
}

impl Post {
    /// The input line (generic preset fields).
    pub fn to_json(&self) -> String {
        let line = PostLine {
            id: &self.id,
            text: &self.text,
            created_at: self.created_at,
            user: &self.user,
        };
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// The truth line: label `unique`, `dup` or `empty`, kind as in `--mix`.
    pub fn truth_json(&self) -> String {
        let label = match (self.kind, self.empty) {
            (_, true) => "empty",
            (Kind::Unique, _) => "unique",
            _ => "dup",
        };
        let line = TruthLine {
            id: &self.id,
            cluster: &self.cluster,
            label,
            kind: self.kind.as_str(),
        };
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// An original that copies can be made of.
struct Original {
    id: String,
    core: String,
    text: String,
    time: f64,
    /// Popularity: heavy-tailed, so a few originals collect most copies.
    weight: f64,
}

/// Share of unique posts that are decoration only (normalize to nothing).
const EMPTY_SHARE: f64 = 0.03;
/// Originals near the drawn delay that compete for a copy, by popularity.
const CANDIDATES: usize = 32;
/// Chance that a copy repeats the original of a recent copy (rich get richer).
const FOLLOW_RECENT: f64 = 0.25;
/// Users posting; a few post much more than the rest.
const USERS: usize = 50_000;

/// The endless post stream of a [`GenConfig`].
pub struct Generator {
    cfg: GenConfig,
    rng: Rng,
    n: u64,
    time: f64,
    originals: Vec<Original>,
    recent_sources: VecDeque<usize>,
    seen: HashSet<u64>,
    norm: Normalizer,
    scratch: String,
}

impl Generator {
    /// A stream starting at `cfg.start_secs`.
    pub fn new(cfg: GenConfig) -> Generator {
        Generator {
            rng: Rng::new(cfg.seed),
            time: cfg.start_secs as f64,
            cfg,
            n: 0,
            originals: Vec::new(),
            recent_sources: VecDeque::new(),
            seen: HashSet::new(),
            norm: Normalizer::new(),
            scratch: String::new(),
        }
    }

    fn next_id(&mut self) -> String {
        let id = 4_000_000_000_000_000u64
            + (self.cfg.seed % 100_000) * 10_000_000_000
            + (self.n % 10_000_000_000);
        self.n += 1;
        id.to_string()
    }

    fn user(&mut self) -> String {
        // Squaring a uniform skews choice toward low indices: a few heavy posters.
        let u = self.rng.unit();
        (1_000_000_000 + (u * u * USERS as f64) as u64).to_string()
    }

    /// xxh3 of the normalized text; `None` if it normalizes to nothing.
    fn norm_hash(&mut self, text: &str) -> Option<u64> {
        self.norm.normalize_into(text, &mut self.scratch, None);
        (!self.scratch.is_empty()).then(|| xxhash_rust::xxh3::xxh3_64(self.scratch.as_bytes()))
    }

    fn kind(&mut self) -> Kind {
        let mut r = self.rng.unit();
        for (k, share) in Kind::ALL.iter().zip(self.cfg.mix.0) {
            if r < share {
                return *k;
            }
            r -= share;
        }
        Kind::Unique
    }

    fn original(&mut self) -> Post {
        let id = self.next_id();
        let user = self.user();
        let created_at = self.time as i64;
        if self.rng.chance(EMPTY_SHARE) {
            let text = self.rng.pick(lexicon::EMPTY_POSTS).to_string();
            return post(id.clone(), text, created_at, user, id, Kind::Unique, true);
        }
        // Unique by normalized text, so the truth has no accidental exact duplicates.
        let mut tries = 0;
        let (core, text) = loop {
            let topic = self.rng.below(lexicon::TOPICS.len());
            let t = &lexicon::TOPICS[topic];
            let body = text::body(t, &mut self.rng);
            let core = text::core(t, &body, &mut self.rng);
            let text = text::decorate(&core, Style::Everyday, &mut self.rng);
            tries += 1;
            match self.norm_hash(&text) {
                Some(h) if self.seen.insert(h) => break (core, text),
                _ if tries >= 50 => {
                    // Exhausted (tiny lexicon corner): make it unique with a number.
                    let core = format!("{core}{}", self.n);
                    let text = text::decorate(&core, Style::Everyday, &mut self.rng);
                    if let Some(h) = self.norm_hash(&text) {
                        self.seen.insert(h);
                    }
                    break (core, text);
                }
                _ => {}
            }
        };
        let weight = (1.0 - self.rng.unit()).powf(-1.0 / 1.2).min(1000.0);
        self.originals.push(Original {
            id: id.clone(),
            core,
            text: text.clone(),
            time: self.time,
            weight,
        });
        post(id.clone(), text, created_at, user, id, Kind::Unique, false)
    }

    /// Index of the original a copy made now is of.
    fn source(&mut self) -> usize {
        if self.rng.chance(FOLLOW_RECENT) && !self.recent_sources.is_empty() {
            let i = self.rng.below(self.recent_sources.len());
            return self.recent_sources[i];
        }
        // Early in the stream no original is old enough for a long delay: redraw, and fall
        // back to a time between the first original and now (never pile onto the first post).
        let first = self.originals[0].time;
        let mut target = self.time - self.cfg.delay.sample(&mut self.rng);
        for _ in 0..8 {
            if target >= first {
                break;
            }
            target = self.time - self.cfg.delay.sample(&mut self.rng);
        }
        if target < first {
            target = first + self.rng.unit() * (self.time - first);
        }
        let end = self
            .originals
            .partition_point(|o| o.time <= target)
            .max(1)
            .min(self.originals.len());
        let begin = end.saturating_sub(CANDIDATES);
        let total: f64 = self.originals[begin..end].iter().map(|o| o.weight).sum();
        let mut r = self.rng.unit() * total;
        for i in begin..end {
            r -= self.originals[i].weight;
            if r <= 0.0 {
                return i;
            }
        }
        end - 1
    }

    fn copy(&mut self, kind: Kind) -> Post {
        let src = self.source();
        self.recent_sources.push_back(src);
        if self.recent_sources.len() > 512 {
            self.recent_sources.pop_front();
        }
        let id = self.next_id();
        let user = self.user();
        let o = &self.originals[src];
        let (core, orig_text, cluster) = (o.core.clone(), o.text.clone(), o.id.clone());
        let orig_hash = self.norm_hash(&orig_text);
        let mut text = orig_text.clone();
        for _ in 0..20 {
            text = match kind {
                Kind::Unique | Kind::Exact => orig_text.clone(),
                Kind::Format => text::decorate(&core, Style::Heavy, &mut self.rng),
                Kind::Light => {
                    let edited = text::light_edit(&core, &mut self.rng);
                    text::decorate(&edited, Style::Everyday, &mut self.rng)
                }
                Kind::Heavy => {
                    let edited = text::heavy_edit(&core, &mut self.rng);
                    text::decorate(&edited, Style::Everyday, &mut self.rng)
                }
            };
            let h = self.norm_hash(&text);
            let ok = match kind {
                Kind::Unique | Kind::Exact => true,
                Kind::Format => text != orig_text,
                Kind::Light | Kind::Heavy => h.is_some() && h != orig_hash,
            };
            if ok {
                break;
            }
        }
        if let Some(h) = self.norm_hash(&text) {
            self.seen.insert(h);
        }
        post(id, text, self.time as i64, user, cluster, kind, false)
    }
}

fn post(
    id: String,
    text: String,
    created_at: i64,
    user: String,
    cluster: String,
    kind: Kind,
    empty: bool,
) -> Post {
    Post {
        id,
        text,
        created_at,
        user,
        cluster,
        kind,
        empty,
    }
}

impl Iterator for Generator {
    type Item = Post;

    fn next(&mut self) -> Option<Post> {
        if self.n > 0 {
            self.time += self.rng.exp(1.0 / self.cfg.event_rate);
        }
        let kind = self.kind();
        Some(if kind == Kind::Unique || self.originals.is_empty() {
            self.original()
        } else {
            self.copy(kind)
        })
    }
}
