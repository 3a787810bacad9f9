//! Output record formats (schema version 1), shared by the file pipeline and Kafka sinks.
//!
//! - unique: the original post JSON, byte for byte; with enrichment (or for an empty post) one
//!   object is added under the configured key: `{"schema":"simdedup.unique.v1","simhash":"hex",
//!   "tokens":[...],"empty":bool}`; a post older than the window also gets `"late":true` there.
//! - duplicate event: `{"schema":"simdedup.duplicate.v1","post_id","cluster_id","matched_id",
//!   "method","distance","similarity","overlap","text_similarity","created_at",
//!   "matched_created_at"}`.
//! - rejected: `{"schema":"simdedup.rejected.v1","reason","detail","id","line","raw"}`.

use serde::Serialize;

use crate::engine::{Analyzed, Duplicate, Verdict};
use crate::io::config::OutputConfig;
use crate::types::{EventTime, PostId, Rejection};

/// Which output a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// Unique posts.
    Unique,
    /// Duplicate-cluster events.
    Duplicate,
    /// Rejected records.
    Rejected,
}

/// Schema tag of unique-post enrichment.
pub const UNIQUE_SCHEMA: &str = "simdedup.unique.v1";
/// Schema tag of duplicate events.
pub const DUPLICATE_SCHEMA: &str = "simdedup.duplicate.v1";
/// Schema tag of rejected records.
pub const REJECTED_SCHEMA: &str = "simdedup.rejected.v1";

#[derive(Serialize)]
struct Enrichment<'a> {
    schema: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    simhash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<Vec<&'a str>>,
    empty: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    late: bool,
}

/// A unique post's marks beside its analysis.
#[derive(Clone, Copy, Debug, Default)]
pub struct Marks {
    /// The text normalized to nothing.
    pub empty: bool,
    /// Older than the window and matching no live entry (passed as unique, not indexed).
    pub late: bool,
}

/// Appends a unique-post record (without newline) to `out`. `raw` must be the JSON object the
/// decoder accepted. When `enrich` is false and the post is not empty, `raw` is copied unchanged.
pub fn unique_record(
    out: &mut Vec<u8>,
    raw: &[u8],
    a: Option<&Analyzed>,
    marks: Marks,
    enrich: bool,
    key: &str,
) {
    let Marks { empty, late } = marks;
    if !(enrich || empty || late) {
        // Byte for byte, a trailing `\r` (CRLF input) included.
        out.extend_from_slice(raw);
        return;
    }
    let body = trim_ascii_end(raw);
    if body.last() != Some(&b'}') {
        out.extend_from_slice(raw);
        return;
    }
    let trailer = &raw[body.len()..];
    // An input that already has the key gets it replaced, never twice.
    let without;
    let body = match member_span(body, key) {
        Some((from, to)) => {
            without = [&body[..from], &body[to..]].concat();
            &without[..]
        }
        None => body,
    };
    let e = Enrichment {
        schema: UNIQUE_SCHEMA,
        simhash: enrich
            .then(|| a.map(|a| a.fingerprint().to_string()))
            .flatten(),
        tokens: enrich
            .then(|| a.map(|a| a.tokens.iter().map(|t| t.word.as_str()).collect()))
            .flatten(),
        empty,
        late,
    };
    let inner = &body[..body.len() - 1];
    out.extend_from_slice(inner);
    // `{}` has no members to follow; any other object needs a separating comma.
    if trim_ascii_end(inner).last() != Some(&b'{') {
        out.push(b',');
    }
    let _ = serde_json::to_writer(&mut *out, key);
    out.push(b':');
    let _ = serde_json::to_writer(&mut *out, &e);
    out.push(b'}');
    out.extend_from_slice(trailer);
}

/// The byte range of the top-level member `key` of a JSON object (with the comma that separates
/// it from its neighbour), if present. Only called for objects quoting the key somewhere.
fn member_span(obj: &[u8], key: &str) -> Option<(usize, usize)> {
    use serde::de::{Deserializer, MapAccess, Visitor};
    use serde_json::value::RawValue;
    let quoted = serde_json::to_vec(key).ok()?;
    if !obj.windows(quoted.len()).any(|w| w == quoted.as_slice()) {
        return None;
    }
    let text = std::str::from_utf8(obj).ok()?;
    struct Members<'a>(&'a str);
    impl<'de> Visitor<'de> for Members<'_> {
        type Value = Vec<(bool, usize, usize)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut spans = Vec::new();
            while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                let v: &'de RawValue = map.next_value()?;
                let start = v.get().as_ptr() as usize;
                spans.push((k == self.0, start, start + v.get().len()));
            }
            Ok(spans)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let spans = (&mut de).deserialize_map(Members(key)).ok()?;
    let base = text.as_ptr() as usize;
    let spans: Vec<(bool, usize, usize)> = spans
        .into_iter()
        .map(|(hit, a, b)| (hit, a - base, b - base))
        .collect();
    let i = spans.iter().rposition(|(hit, _, _)| *hit)?;
    if i > 0 {
        // From the end of the previous value: `, "key": value`.
        Some((spans[i - 1].2, spans[i].2))
    } else if let Some(next) = spans.get(1) {
        // The first member: up to the next member's key (found after the comma).
        let comma = obj[spans[0].2..next.1].iter().position(|b| *b == b',')? + spans[0].2;
        Some((obj.iter().position(|b| *b == b'{')? + 1, comma + 1))
    } else {
        Some((obj.iter().position(|b| *b == b'{')? + 1, spans[0].2))
    }
}

#[derive(Serialize)]
struct DuplicateEvent<'a> {
    schema: &'static str,
    post_id: &'a str,
    cluster_id: &'a str,
    matched_id: &'a str,
    method: &'static str,
    distance: u32,
    similarity: f32,
    overlap: f32,
    text_similarity: f32,
    created_at: Option<i64>,
    matched_created_at: i64,
}

/// Appends a duplicate event (without newline) to `out`.
pub fn duplicate_record(
    out: &mut Vec<u8>,
    post: &PostId,
    created_at: Option<EventTime>,
    d: &Duplicate,
) {
    let m = &d.matched_by;
    let ev = DuplicateEvent {
        schema: DUPLICATE_SCHEMA,
        post_id: post.as_str(),
        cluster_id: d.cluster.as_str(),
        matched_id: d.matched.as_str(),
        method: m.method.as_str(),
        distance: m.distance,
        similarity: round4(m.similarity),
        overlap: round4(m.overlap),
        text_similarity: round4(m.score),
        created_at: created_at.map(|t| t.0),
        matched_created_at: d.matched_time.0,
    };
    let _ = serde_json::to_writer(out, &ev);
}

#[derive(Serialize)]
struct RejectedRecord<'a> {
    schema: &'static str,
    reason: &'static str,
    detail: &'a str,
    id: Option<&'a str>,
    line: u64,
    raw: std::borrow::Cow<'a, str>,
}

/// Appends a rejected record (without newline) to `out`. `line` is the 1-based input line.
pub fn rejected_record(
    out: &mut Vec<u8>,
    r: &Rejection,
    id: Option<&PostId>,
    line: u64,
    raw: &[u8],
) {
    let rec = RejectedRecord {
        schema: REJECTED_SCHEMA,
        reason: r.reason.as_str(),
        detail: &r.detail,
        id: id.map(PostId::as_str),
        line,
        raw: String::from_utf8_lossy(raw),
    };
    let _ = serde_json::to_writer(out, &rec);
}

/// A decided post, as every front end formats it.
pub struct Decided<'a> {
    /// The post's id.
    pub id: &'a PostId,
    /// Its event time.
    pub created_at: Option<EventTime>,
    /// The original input record.
    pub raw: &'a [u8],
    /// Its analysis (for enrichment).
    pub analyzed: &'a Analyzed,
    /// Its position for rejected records: line number, or offset + 1.
    pub line: u64,
}

/// Appends the output record of a verdict to `out` (cleared by the caller) and returns its sink.
pub fn verdict_record(
    out: &mut Vec<u8>,
    v: &Verdict,
    post: &Decided<'_>,
    cfg: &OutputConfig,
) -> Sink {
    match v {
        Verdict::Unique { empty, late } => {
            unique_record(
                out,
                post.raw,
                Some(post.analyzed),
                Marks {
                    empty: *empty,
                    late: *late,
                },
                cfg.enrich,
                &cfg.enrich_key,
            );
            Sink::Unique
        }
        Verdict::Duplicate(d) => {
            duplicate_record(out, post.id, post.created_at, d);
            Sink::Duplicate
        }
        Verdict::Rejected(r) => {
            rejected_record(out, r, Some(post.id), post.line, post.raw);
            Sink::Rejected
        }
    }
}

fn round4(x: f32) -> f32 {
    (x * 10_000.0).round() / 10_000.0
}

fn trim_ascii_end(b: &[u8]) -> &[u8] {
    let mut end = b.len();
    while end > 0 && b[end - 1].is_ascii_whitespace() {
        end -= 1;
    }
    &b[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::RejectReason;

    #[test]
    fn unique_passes_raw_through_unchanged() {
        let mut out = Vec::new();
        unique_record(
            &mut out,
            br#"{"id":"1","text":"x"}  "#,
            None,
            Marks::default(),
            false,
            "simdedup",
        );
        assert_eq!(out, br#"{"id":"1","text":"x"}  "#);
        out.clear();
        unique_record(
            &mut out,
            b"{\"id\":\"1\"}\r",
            None,
            Marks::default(),
            false,
            "simdedup",
        );
        assert_eq!(out, b"{\"id\":\"1\"}\r", "CRLF input keeps its \\r");
    }

    #[test]
    fn an_existing_enrich_key_is_replaced_not_repeated() {
        for raw in [
            r#"{"id":"1","simdedup":{"old":1},"text":"x"}"#,
            r#"{"simdedup":[1,{"a":"}"}], "id":"1","text":"x"}"#,
            r#"{"id":"1","text":"x","simdedup":null}"#,
            r#"{"simdedup":1}"#,
        ] {
            let mut out = Vec::new();
            let marks = Marks {
                empty: true,
                late: false,
            };
            unique_record(&mut out, raw.as_bytes(), None, marks, false, "simdedup");
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.matches("\"simdedup\"").count(), 1, "{text}");
            let v: serde_json::Value = serde_json::from_str(&text).expect(&text);
            assert_eq!(v["simdedup"]["empty"], true, "{text}");
        }
    }

    #[test]
    fn empty_post_is_marked() {
        let mut out = Vec::new();
        unique_record(
            &mut out,
            br#"{"id":"1","text":"[doge]"}"#,
            None,
            Marks {
                empty: true,
                late: false,
            },
            false,
            "simdedup",
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["simdedup"]["empty"], true);
        assert_eq!(v["id"], "1");
    }

    #[test]
    fn rejected_keeps_raw_and_reason() {
        let mut out = Vec::new();
        rejected_record(
            &mut out,
            &Rejection::new(RejectReason::InvalidJson, "eof"),
            None,
            7,
            b"{oops",
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["reason"], "invalid_json");
        assert_eq!(v["line"], 7);
        assert_eq!(v["raw"], "{oops");
    }
}
