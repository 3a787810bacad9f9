//! Post texts for the load generator: bodies filled from the lexicon's templates, the
//! decorations a Weibo post carries, and the edits that turn an original into a copy.

use super::lexicon::{self, Topic};

/// A small deterministic generator (SplitMix64): the same seed gives the same stream on every
/// platform, and the crate needs no RNG dependency.
#[derive(Clone, Debug)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_5EED)
    }

    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }

    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    pub(super) fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    /// Exponential with the given mean.
    pub(super) fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }
}

/// Replaces every `{slot}` of `template` with a word of that slot.
pub(super) fn fill(template: &str, rng: &mut Rng) -> String {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        let name = &rest[open + 1..open + close];
        match lexicon::slot(name) {
            Some(words) => out.push_str(rng.pick(words)),
            None => out.push_str(&rest[open..=open + close]),
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// A free clause of 3–8 everyday words: the long tail of vocabulary real posts have and
/// templates lack.
pub(super) fn chatter(rng: &mut Rng) -> String {
    let words: Vec<char> = lexicon::WORDS.chars().collect();
    let pairs = words.len() / 2;
    let n = 3 + rng.below(6);
    let mut out = String::new();
    for _ in 0..n {
        let i = rng.below(pairs);
        out.extend(&words[2 * i..2 * i + 2]);
    }
    out
}

/// Longest body, in characters (decorations come on top; Weibo's limit was 140).
const MAX_BODY_CHARS: usize = 120;

/// The body of an original post on `topic`: about a quarter short (under ~12 characters),
/// half one or two sentences, the rest three to six sentences.
pub(super) fn body(topic: &Topic, rng: &mut Rng) -> String {
    let r = rng.unit();
    if r < 0.25 {
        return fill(rng.pick(topic.short), rng);
    }
    let sentences = if r < 0.70 {
        1 + rng.below(2)
    } else {
        3 + rng.below(4)
    };
    let mut out = String::new();
    for i in 0..sentences {
        let s = if rng.chance(0.5) {
            chatter(rng)
        } else if i > 0 && rng.chance(0.3) {
            fill(rng.pick(lexicon::COMMENTS), rng)
        } else {
            fill(rng.pick(topic.sentences), rng)
        };
        if out.chars().count() + s.chars().count() > MAX_BODY_CHARS && !out.is_empty() {
            break;
        }
        if !out.is_empty() && !out.ends_with(['？', '！', '。']) {
            out.push_str(rng.pick(&["，", "。", "！", "。", "；"]));
        }
        out.push_str(&s);
    }
    let end = rng.pick(&["。", "！", "", "", "？", "……", "。"]);
    if !out.ends_with(['？', '！', '。']) {
        out.push_str(end);
    }
    out
}

/// The core of an original: its body, with a hashtag in front or behind for some posts. The
/// hashtag's words survive normalization, so a copy that keeps the core keeps the hashtag.
pub(super) fn core(topic: &Topic, body: &str, rng: &mut Rng) -> String {
    if !rng.chance(0.18) {
        return body.to_string();
    }
    let tag = fill(rng.pick(topic.hashtags), rng);
    if rng.chance(0.7) {
        format!("#{tag}#{body}")
    } else {
        format!("{body}#{tag}#")
    }
}

fn user_name(rng: &mut Rng) -> String {
    if rng.chance(0.2) {
        return fill(rng.pick(lexicon::ACCOUNTS), rng);
    }
    format!(
        "{}{}",
        rng.pick(lexicon::NAME_HEADS),
        rng.pick(lexicon::NAME_TAILS)
    )
}

/// How much decoration to add: originals get the everyday mix, format copies more of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Style {
    Everyday,
    Heavy,
}

/// Decorates `core` the way real posts are: reply prefixes, @mentions, emoticons, emoji,
/// t.cn links, `//@` repost chains, half-width or full-width punctuation and letters.
/// Normalization removes every one of these, so the result normalizes like `core`.
pub(super) fn decorate(core: &str, style: Style, rng: &mut Rng) -> String {
    let f = if style == Style::Heavy { 2.2 } else { 1.0 };
    let mut text = core.to_string();
    if rng.chance(0.12 * f) {
        text = punctuation_half_width(&text);
    }
    if rng.chance(0.06 * f) {
        text = letters_full_width(&text);
    }
    if rng.chance(0.18 * f) {
        let e = format!("[{}]", rng.pick(lexicon::EMOTICONS));
        text = match text.find('，') {
            Some(i) if rng.chance(0.5) => format!("{}{e}{}", &text[..i], &text[i..]),
            _ => format!("{text}{e}"),
        };
    }
    if rng.chance(0.10 * f) {
        for _ in 0..1 + rng.below(3) {
            text.push_str(rng.pick(lexicon::EMOJI));
        }
    }
    if rng.chance(0.05 * f) {
        text.push_str(rng.pick(&["！！！", "~~", "。。。", "!!", "……"]));
    }
    if rng.chance(0.12 * f) {
        text = format!("@{} {text}", user_name(rng));
    } else if rng.chance(0.06 * f) {
        text = format!("{text} @{}", user_name(rng));
    }
    if rng.chance(0.04 * f) {
        text = format!("回复@{}:{text}", user_name(rng));
    }
    if rng.chance(0.15 * f) {
        text.push_str(&format!(" http://t.cn/{}", short_code(rng)));
    }
    if rng.chance(0.15 * f) {
        for _ in 0..1 + rng.below(3) {
            let comment = rng.pick(lexicon::REPOST_COMMENTS);
            text.push_str(&format!("//@{}:{comment}", user_name(rng)));
        }
    }
    text
}

fn short_code(rng: &mut Rng) -> String {
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..7).map(|_| rng.pick(ALNUM) as char).collect()
}

fn punctuation_half_width(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '，' => ',',
            '。' => '.',
            '！' => '!',
            '？' => '?',
            '；' => ';',
            '：' => ':',
            other => other,
        })
        .collect()
}

/// ASCII letters and digits to their full-width forms (NFKC folds them back).
fn letters_full_width(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                char::from_u32(c as u32 - 0x21 + 0xFF01).unwrap_or(c)
            } else {
                c
            }
        })
        .collect()
}

/// Common characters used for substitutions and insertions.
const COMMON: &str = "的一是了我不人在有这个上们来到时大地为子中你说生国年着就那和要她出也得里后\
自以会家可下而过天去能对小多然于心学么之都好看起发当没成只如事把还用第样道想作种开美总从无情己面最";

fn is_cjk(c: char) -> bool {
    ('\u{4E00}'..='\u{9FFF}').contains(&c)
}

/// One or two character edits (substitute, delete, insert, swap) at CJK positions of `s`.
pub(super) fn light_edit(s: &str, rng: &mut Rng) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let common: Vec<char> = COMMON.chars().collect();
    let edits = 1 + rng.below(2);
    for _ in 0..edits {
        let cjk: Vec<usize> = (0..chars.len()).filter(|&i| is_cjk(chars[i])).collect();
        if cjk.is_empty() {
            chars.push(rng.pick(&common));
            continue;
        }
        let i = rng.pick(&cjk);
        match rng.below(4) {
            0 => chars[i] = rng.pick(&common),
            1 if cjk.len() > 3 => {
                chars.remove(i);
            }
            2 if i + 1 < chars.len() && is_cjk(chars[i + 1]) => chars.swap(i, i + 1),
            _ => chars.insert(i, rng.pick(&common)),
        }
    }
    chars.into_iter().collect()
}

/// A substantial change: crop to 40–75% of the text, add a comment sentence, or both.
pub(super) fn heavy_edit(s: &str, rng: &mut Rng) -> String {
    let chars: Vec<char> = s.chars().collect();
    let crop = |rng: &mut Rng| -> String {
        let keep = ((chars.len() as f64) * (0.4 + 0.35 * rng.unit())).ceil() as usize;
        let keep = keep.clamp(1, chars.len());
        if rng.chance(0.75) {
            chars[..keep].iter().collect()
        } else {
            chars[chars.len() - keep..].iter().collect()
        }
    };
    let comment = |rng: &mut Rng| fill(rng.pick(lexicon::COMMENTS), rng);
    match rng.below(4) {
        0 => crop(rng),
        1 => format!("{}……{}", crop(rng), comment(rng)),
        2 => format!("{}：{s}", comment(rng)),
        _ => format!("{s}{}{}", rng.pick(&["，", "。", "！"]), comment(rng)),
    }
}
