//! Input decoding: turns one JSON line into a [`Decoded`] post (id, text, event time, user) or
//! a [`Rejection`] with a precise reason. Owns the input configuration (field paths and
//! presets for generic JSON, Sina Weibo and Twitter), time parsing, and the single-pass
//! extraction that reads only the wanted fields of each line.

mod extract;
mod preset;
mod time;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::types::{EventTime, PostId, RejectReason, Rejection};

use extract::{empty_slots, PathSet, Scalar, Slots};
use preset::{Labels, Plan};
#[cfg(test)]
pub(crate) use time::parse_time;
pub use time::MILLIS_THRESHOLD;

/// Field preset: where the id, text, time and user are found in each record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// Any JSON object; fields come from `id_field`, `text_field`, `time_field`, `user_field`.
    #[default]
    Generic,
    /// Sina Weibo API status objects (`idstr`/`mid`/`id`, `text` or `longText`, `user.idstr`).
    Weibo,
    /// Twitter API v1.1 tweets and v2 tweets (wrapped in `{"data": ...}` or bare).
    Twitter,
}

impl Preset {
    /// Every preset, in a fixed order.
    pub const ALL: [Preset; 3] = [Preset::Generic, Preset::Weibo, Preset::Twitter];

    /// The snake_case name used in configuration files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Preset::Generic => "generic",
            Preset::Weibo => "weibo",
            Preset::Twitter => "twitter",
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown preset {s:?} (expected generic, weibo or twitter)"))
    }
}

/// How input lines are read (the `[input]` section of the configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputConfig {
    /// Field preset: `generic` (use the four `*_field` paths below), `weibo` (Sina Weibo API
    /// status objects) or `twitter` (Twitter API v1.1 or v2 tweets). The weibo and twitter
    /// presets ignore the `*_field` settings. Default: `generic`.
    pub preset: Preset,
    /// Path of the post id, as dotted object keys (`id`, `user.idstr`). Ids may be strings or
    /// integers; integers are written in decimal. Generic preset only. Default: `id`.
    pub id_field: String,
    /// Path of the post text; it must be a string. Generic preset only. Default: `text`.
    pub text_field: String,
    /// Path of the event time; a missing or null time is allowed. Accepted: unix seconds or
    /// milliseconds (integers of 100000000000 or more in absolute value are milliseconds), as
    /// numbers or decimal strings; RFC 3339; `Tue May 31 17:46:55 +0800 2011`; and
    /// `2011-05-31 17:46:55`, taken as UTC. Generic preset only. Default: `created_at`.
    pub time_field: String,
    /// Path of the posting user (a string or an integer); optional. Generic preset only.
    /// Default: `user`.
    pub user_field: String,
    /// Longest accepted text, in UTF-8 bytes; longer records are rejected as `text_too_long`.
    /// Default: 16384.
    pub max_text_bytes: usize,
}

impl Default for InputConfig {
    fn default() -> Self {
        InputConfig {
            preset: Preset::Generic,
            id_field: "id".to_string(),
            text_field: "text".to_string(),
            time_field: "created_at".to_string(),
            user_field: "user".to_string(),
            max_text_bytes: 16 * 1024,
        }
    }
}

/// A decoded post. It borrows nothing; the caller keeps the raw line itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The post id (integers rendered in decimal).
    pub id: PostId,
    /// The text to deduplicate, exactly as in the input (possibly empty).
    pub text: String,
    /// The event time, when the record has one.
    pub created_at: Option<EventTime>,
    /// The posting user's id, when the record has one.
    pub user: Option<String>,
}

/// Decodes input lines under one [`InputConfig`]; field paths are precomputed once.
#[derive(Clone, Debug)]
pub struct Decoder {
    paths: PathSet,
    plan: Plan,
    labels: Labels,
    max_text_bytes: usize,
}

impl Decoder {
    /// Builds a decoder for `cfg`.
    pub fn new(cfg: &InputConfig) -> Decoder {
        let mut paths = PathSet::new();
        let (plan, labels) = Plan::new(cfg, &mut paths);
        Decoder {
            paths,
            plan,
            labels,
            max_text_bytes: cfg.max_text_bytes,
        }
    }

    /// Decodes one input line (without its trailing newline; a trailing `\r` and a leading
    /// UTF-8 byte-order mark are tolerated). Never panics: every line yields either a post or
    /// a rejection, checked in the order utf-8, json, id, text, time.
    pub fn decode(&self, line: &[u8]) -> Result<Decoded, Rejection> {
        let line = trim_line(line);
        // The fast check first; the standard one only to say where a line is not UTF-8.
        let json = match simdutf8::basic::from_utf8(line) {
            Ok(json) => json,
            Err(_) => std::str::from_utf8(line)
                .map_err(|e| reject(RejectReason::InvalidUtf8, e.to_string()))?,
        };
        let mut slots = empty_slots();
        self.paths
            .extract(json, &mut slots)
            .map_err(|e| reject(RejectReason::InvalidJson, e.to_string()))?;
        let chosen = self.plan.choose(&slots);
        let id = self.id(&slots, chosen.id)?;
        let text_slot = self.text_slot(&slots, chosen.text)?;
        let created_at = time_of(&slots, chosen.time)?;
        let user = chosen.user.and_then(|slot| user_of(get(&slots, slot)?));
        // moved out last because other fields may share the text's slot; moving avoids a copy
        // when unescaping already produced an owned string
        let text = match slots.get_mut(text_slot).and_then(Option::take) {
            Some(Scalar::Str(text)) => text.into_owned(),
            _ => return Err(self.no_text()),
        };
        Ok(Decoded {
            id,
            text,
            created_at,
            user,
        })
    }

    /// The id of a line `decode` rejected, if it can be read (the line is a JSON object, after
    /// invalid UTF-8 is replaced, with a usable id): rejected records then name their post.
    pub fn id_of_rejected(&self, line: &[u8]) -> Option<PostId> {
        let json = String::from_utf8_lossy(trim_line(line));
        let mut slots = empty_slots();
        self.paths.extract(&json, &mut slots).ok()?;
        let chosen = self.plan.choose(&slots);
        self.id(&slots, chosen.id).ok()
    }

    fn id(&self, slots: &Slots<'_>, slot: Option<usize>) -> Result<PostId, Rejection> {
        let empty = |what: &str| reject(RejectReason::EmptyId, format!("id is {what}"));
        let value = slot.and_then(|s| get(slots, s)).ok_or_else(|| {
            reject(
                RejectReason::MissingId,
                format!("no id at {}", self.labels.id),
            )
        })?;
        match value {
            // whitespace-only ids are as useless as empty ones
            Scalar::Str(s) if s.trim().is_empty() => Err(empty("an empty string")),
            Scalar::Str(s) => Ok(PostId(s.to_string())),
            Scalar::U64(n) => Ok(PostId(n.to_string())),
            Scalar::I64(n) => Ok(PostId(n.to_string())),
            Scalar::BigInt(n) => Ok(PostId(n.to_string())),
            Scalar::Null => Err(empty("null")),
            other => Err(empty(type_name(other))),
        }
    }

    /// The slot holding a valid text (a string within the length limit).
    fn text_slot(&self, slots: &Slots<'_>, slot: Option<usize>) -> Result<usize, Rejection> {
        let missing = |what: String| reject(RejectReason::MissingText, what);
        let (slot, value) = slot
            .and_then(|s| Some((s, get(slots, s)?)))
            .ok_or_else(|| self.no_text())?;
        match value {
            Scalar::Str(text) if text.len() > self.max_text_bytes => {
                let detail = format!(
                    "text is {} bytes, limit {}",
                    text.len(),
                    self.max_text_bytes
                );
                Err(reject(RejectReason::TextTooLong, detail))
            }
            Scalar::Str(_) => Ok(slot),
            Scalar::Null => Err(missing("text is null".to_string())),
            other => Err(missing(format!(
                "text is {}, not a string",
                type_name(other)
            ))),
        }
    }

    fn no_text(&self) -> Rejection {
        reject(
            RejectReason::MissingText,
            format!("no text at {}", self.labels.text),
        )
    }
}

/// Drops a trailing `\n`, a trailing `\r` and a leading byte-order mark.
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

fn time_of(slots: &Slots<'_>, slot: Option<usize>) -> Result<Option<EventTime>, Rejection> {
    let parsed = match slot.and_then(|s| get(slots, s)) {
        None | Some(Scalar::Null) => return Ok(None),
        Some(Scalar::Str(s)) => time::parse_time_str(s),
        Some(Scalar::U64(n)) => time::from_u64(*n),
        Some(Scalar::I64(n)) => time::from_i64(*n),
        Some(Scalar::F64(f)) => time::from_f64(*f),
        Some(other) => Err(format!("time is {}", type_name(other))),
    };
    parsed
        .map(Some)
        .map_err(|detail| reject(RejectReason::BadTime, detail))
}

/// A user id from a string or an integer; anything else (including "") means no user.
fn user_of(value: &Scalar<'_>) -> Option<String> {
    match value {
        Scalar::Str(s) if !s.is_empty() => Some(s.to_string()),
        Scalar::U64(n) => Some(n.to_string()),
        Scalar::I64(n) => Some(n.to_string()),
        Scalar::BigInt(n) => Some(n.to_string()),
        _ => None,
    }
}

fn get<'s, 'de>(slots: &'s Slots<'de>, slot: usize) -> Option<&'s Scalar<'de>> {
    slots.get(slot).and_then(Option::as_ref)
}

fn type_name(value: &Scalar<'_>) -> &'static str {
    match value {
        Scalar::Str(_) => "a string",
        Scalar::U64(_) | Scalar::I64(_) => "an integer",
        Scalar::BigInt(_) => "an integer past 64 bits",
        Scalar::F64(_) => "a float",
        Scalar::Bool(_) => "a boolean",
        Scalar::Null => "null",
        Scalar::Compound => "an object or array",
    }
}

fn reject(reason: RejectReason, detail: String) -> Rejection {
    Rejection::new(reason, detail)
}
