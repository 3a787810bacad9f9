//! The real text the background is recombined from: clauses of the weibo-rumdect posts of
//! dev-split events (`sha1(eid) % 10 < 7`), minus every event and post of the labelled dev
//! stream, plus the empirical length distribution of those posts.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::rng::Rng;
use crate::sha1;

/// Clauses longer than this (characters) go to the "long" bucket only.
pub const MAX_BUCKET: usize = 40;
/// Post lengths above this are capped when sampling (real posts rarely exceed 140 + chain).
const MAX_POST_CHARS: u32 = 280;

/// Clause separators: CJK and ASCII sentence punctuation and white space.
fn is_separator(c: char) -> bool {
    matches!(
        c,
        '，' | '。' | '！' | '？' | '；' | '、' | '…' | ',' | '!' | '?' | ';' | '~' | '～'
    ) || c.is_whitespace()
}

/// Clause text in one arena, indexed by character length.
pub struct Corpus {
    arena: String,
    spans: Vec<(u32, u32)>,
    by_len: Vec<Vec<u32>>,
    lengths: Vec<u32>,
    /// Posts read from the file.
    pub posts_read: u64,
    /// Posts of dev-split events used.
    pub posts_used: u64,
    /// Posts skipped because their event or id is in the labelled dev stream.
    pub posts_excluded: u64,
    /// Dev-split events used.
    pub events_used: usize,
}

#[derive(serde::Deserialize)]
struct Row<'a> {
    #[serde(borrow)]
    eid: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    mid: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    original_text: std::borrow::Cow<'a, str>,
}

impl Corpus {
    /// Reads `posts.jsonl.gz` through `gzip -dc`, skipping holdout events, the events in
    /// `exclude_events` and the posts in `exclude_ids`.
    pub fn load(
        path: &Path,
        exclude_events: &HashSet<String>,
        exclude_ids: &HashSet<String>,
    ) -> std::io::Result<Corpus> {
        sha1::self_check();
        let mut child = Command::new("gzip")
            .arg("-dc")
            .arg(path)
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut c = Corpus {
            arena: String::new(),
            spans: Vec::new(),
            by_len: vec![Vec::new(); MAX_BUCKET + 2],
            lengths: Vec::new(),
            posts_read: 0,
            posts_used: 0,
            posts_excluded: 0,
            events_used: 0,
        };
        let mut split_of: std::collections::HashMap<String, bool> = Default::default();
        let mut line = String::new();
        let mut reader = BufReader::with_capacity(1 << 20, stdout);
        while reader.read_line(&mut line)? > 0 {
            c.posts_read += 1;
            let row: Row = match serde_json::from_str(line.trim_end()) {
                Ok(r) => r,
                Err(e) => panic!("{}: line {}: {e}", path.display(), c.posts_read),
            };
            let dev = *split_of
                .entry(row.eid.to_string())
                .or_insert_with(|| sha1::digest_mod(row.eid.as_bytes(), 10) < 7);
            if dev {
                if exclude_events.contains(row.eid.as_ref())
                    || exclude_ids.contains(row.mid.as_ref())
                {
                    c.posts_excluded += 1;
                } else {
                    c.add_post(&row.original_text);
                }
            }
            line.clear();
        }
        child.wait()?;
        c.events_used = split_of
            .iter()
            .filter(|(e, dev)| **dev && !exclude_events.contains(*e))
            .count();
        c.arena.shrink_to_fit();
        c.spans.shrink_to_fit();
        Ok(c)
    }

    fn add_post(&mut self, text: &str) {
        self.posts_used += 1;
        self.lengths
            .push((text.chars().count() as u32).min(MAX_POST_CHARS));
        let mut start = None;
        let mut chars = 0usize;
        for (i, ch) in text.char_indices() {
            if is_separator(ch) {
                if let Some(s) = start.take() {
                    self.add_clause(&text[s..i], chars);
                }
                chars = 0;
            } else {
                start.get_or_insert(i);
                chars += 1;
            }
        }
        if let Some(s) = start {
            self.add_clause(&text[s..], chars);
        }
    }

    fn add_clause(&mut self, clause: &str, chars: usize) {
        let id = self.spans.len() as u32;
        self.spans
            .push((self.arena.len() as u32, clause.len() as u32));
        self.arena.push_str(clause);
        self.by_len[chars.min(MAX_BUCKET + 1)].push(id);
    }

    /// Number of clauses.
    pub fn clauses(&self) -> usize {
        self.spans.len()
    }

    /// Bytes of clause text held.
    pub fn arena_bytes(&self) -> usize {
        self.arena.len()
    }

    fn text(&self, id: u32) -> &str {
        let (s, l) = self.spans[id as usize];
        &self.arena[s as usize..(s + l) as usize]
    }

    /// A post length (characters) drawn from the real posts' distribution.
    pub fn sample_len(&self, rng: &mut Rng) -> usize {
        self.lengths[rng.below(self.lengths.len())] as usize
    }

    /// Any clause, as often as it occurs in the corpus.
    pub fn any_clause(&self, rng: &mut Rng) -> (&str, usize) {
        let id = rng.below(self.spans.len()) as u32;
        let t = self.text(id);
        (t, t.chars().count())
    }

    /// A clause of exactly `len` characters (or the nearest shorter length that has one).
    pub fn clause_of_len(&self, rng: &mut Rng, len: usize) -> (&str, usize) {
        let mut l = len.clamp(1, MAX_BUCKET);
        while l > 1 && self.by_len[l].is_empty() {
            l -= 1;
        }
        let bucket = &self.by_len[l];
        let id = bucket[rng.below(bucket.len())];
        (self.text(id), l)
    }
}
