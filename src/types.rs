//! Domain values shared by every stage: post ids, event times, fingerprints, cluster ids and the
//! reasons a record is rejected.

use std::fmt;

/// A post's id as it appears in the input (string form; numeric JSON ids are rendered in decimal).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PostId(pub String);

impl PostId {
    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Event time of a post in unix seconds (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventTime(pub i64);

/// A 64-bit SimHash fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Fingerprint(pub u64);

impl Fingerprint {
    /// Number of differing bits.
    pub fn hamming(self, other: Fingerprint) -> u32 {
        (self.0 ^ other.0).count_ones()
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A cluster's id: the id of the cluster's first unique post.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClusterId(pub PostId);

/// Why an input record did not become a post. Every rejected record carries one of these to the
/// rejected output, so nothing is dropped without a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectReason {
    /// The bytes are not valid UTF-8.
    InvalidUtf8,
    /// The line is not a JSON object.
    InvalidJson,
    /// No id at the configured id field(s).
    MissingId,
    /// The id is present but empty (or not a string/number).
    EmptyId,
    /// No text at the configured text field(s), or it is not a string.
    MissingText,
    /// The text is longer than `max_text_bytes`.
    TextTooLong,
    /// The time field is present but could not be parsed.
    BadTime,
    /// The event time lies further in the future than `max_clock_skew_secs` allows.
    FutureTime,
    /// The text normalizes to nothing and `empty_posts = "reject"` is configured.
    Empty,
}

impl RejectReason {
    /// Every reason, in a fixed order (for metrics and summaries).
    pub const ALL: [RejectReason; 9] = [
        RejectReason::InvalidUtf8,
        RejectReason::InvalidJson,
        RejectReason::MissingId,
        RejectReason::EmptyId,
        RejectReason::MissingText,
        RejectReason::TextTooLong,
        RejectReason::BadTime,
        RejectReason::FutureTime,
        RejectReason::Empty,
    ];

    /// The stable snake_case label written to the rejected output and used in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::InvalidUtf8 => "invalid_utf8",
            RejectReason::InvalidJson => "invalid_json",
            RejectReason::MissingId => "missing_id",
            RejectReason::EmptyId => "empty_id",
            RejectReason::MissingText => "missing_text",
            RejectReason::TextTooLong => "text_too_long",
            RejectReason::BadTime => "bad_time",
            RejectReason::FutureTime => "future_time",
            RejectReason::Empty => "empty",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejected record: the reason plus a human-readable detail (for example the JSON parser's
/// message or the offending time string).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Machine-readable reason.
    pub reason: RejectReason,
    /// Human-readable detail.
    pub detail: String,
}

impl Rejection {
    /// Builds a rejection.
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Self {
        Rejection {
            reason,
            detail: detail.into(),
        }
    }
}
