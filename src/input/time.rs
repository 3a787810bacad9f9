//! Event-time parsing for input records: turns a JSON time value into whole unix seconds.
//!
//! Accepted forms:
//! - integer or float unix seconds, and unix milliseconds (see [`MILLIS_THRESHOLD`]);
//! - the same numbers written as decimal strings (`"1306835215"`, `"1306835215123"`, `"1.5"`);
//! - RFC 3339 (`2011-05-31T17:46:55+08:00`, `...Z`, fractional seconds, `T` or a space);
//! - the Weibo/Twitter API form `Tue May 31 17:46:55 +0800 2011`;
//! - naive `2011-05-31 17:46:55` (optionally with fractional seconds), taken as UTC.
//!
//! Results are floored to whole seconds and must lie within chrono's representable range, so
//! every [`EventTime`] can later be formatted.

use chrono::{DateTime, NaiveDate, Utc};
#[cfg(test)]
use serde_json::Value;

use crate::types::EventTime;

/// Numeric times whose absolute value is at least this are unix milliseconds, not seconds.
///
/// 1e11 seconds is in the year 5138, while 1e11 milliseconds is 1973-03-03, so real seconds and
/// real milliseconds never collide. The price: millisecond times before March 1973 are read as
/// seconds. The same threshold applies to floats and to numeric strings.
pub const MILLIS_THRESHOLD: i64 = 100_000_000_000;

/// Longest excerpt of an offending time string quoted in a rejection detail.
const DETAIL_MAX_CHARS: usize = 80;

const MIN_SECS: i64 = DateTime::<Utc>::MIN_UTC.timestamp();
const MAX_SECS: i64 = DateTime::<Utc>::MAX_UTC.timestamp();

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

/// Parses a JSON time value (number or string, see the module docs) into unix seconds.
///
/// `null`, booleans, arrays and objects are errors; callers that treat `null` as "no time" must
/// check for it first. The error is a short lowercase detail suitable for a rejection. The
/// decoder reads times without building a `Value` (see `super`); this is the reference the
/// tests compare it with.
#[cfg(test)]
pub(crate) fn parse_time(v: &Value) -> Result<EventTime, String> {
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                from_i64(i)
            } else if let Some(u) = n.as_u64() {
                from_u64(u)
            } else {
                n.as_f64()
                    .map_or_else(|| Err(format!("unusable time number {n}")), from_f64)
            }
        }
        Value::String(s) => parse_time_str(s),
        Value::Null => Err("time is null".to_string()),
        Value::Bool(_) => Err("time is a boolean".to_string()),
        Value::Array(_) => Err("time is an array".to_string()),
        Value::Object(_) => Err("time is an object".to_string()),
    }
}

/// Integer seconds or, at or above [`MILLIS_THRESHOLD`] in absolute value, milliseconds.
pub(crate) fn from_i64(i: i64) -> Result<EventTime, String> {
    let secs = if i.unsigned_abs() >= MILLIS_THRESHOLD.unsigned_abs() {
        i.div_euclid(1000)
    } else {
        i
    };
    checked(secs).ok_or_else(|| format!("time out of range: {i}"))
}

/// An integer too big for i64 can only be milliseconds (and is far out of range anyway).
pub(crate) fn from_u64(u: u64) -> Result<EventTime, String> {
    match i64::try_from(u) {
        Ok(i) => from_i64(i),
        Err(_) => Err(format!("time out of range: {u}")),
    }
}

/// Float seconds (or milliseconds past the threshold), floored.
pub(crate) fn from_f64(f: f64) -> Result<EventTime, String> {
    // the threshold is exactly representable as f64
    let secs = if f.abs() >= MILLIS_THRESHOLD as f64 {
        (f / 1000.0).floor()
    } else {
        f.floor()
    };
    // comparing in f64 before the cast, because `as` saturates instead of failing
    if secs.is_finite() && secs >= MIN_SECS as f64 && secs <= MAX_SECS as f64 {
        Ok(EventTime(secs as i64))
    } else {
        Err(format!("time out of range: {f}"))
    }
}

fn checked(secs: i64) -> Option<EventTime> {
    (MIN_SECS..=MAX_SECS)
        .contains(&secs)
        .then_some(EventTime(secs))
}

/// Parses a time string in any accepted form.
pub(crate) fn parse_time_str(s: &str) -> Result<EventTime, String> {
    let t = s.trim();
    if let Some(number) = parse_numeric(t) {
        return number;
    }
    let parsed = match t.as_bytes().first() {
        Some(c) if c.is_ascii_digit() => parse_iso(t.as_bytes()),
        Some(c) if c.is_ascii_alphabetic() => parse_api(t),
        _ => None,
    };
    parsed.ok_or_else(|| format!("unrecognized time {:?}", excerpt(s)))
}

/// `Some` when `t` is written as a number; `None` lets the date parsers try.
fn parse_numeric(t: &str) -> Option<Result<EventTime, String>> {
    let b = t.as_bytes();
    let unsigned = match b.first() {
        Some(b'+' | b'-') => &b[1..],
        _ => b,
    };
    if !unsigned.is_empty() && unsigned.iter().all(u8::is_ascii_digit) {
        return Some(match t.parse::<i64>() {
            Ok(i) => from_i64(i),
            Err(_) => Err(format!("time out of range: {:?}", excerpt(t))),
        });
    }
    // only plain decimal notation: f64's parser would also take "inf" and "nan"
    let decimal = b.iter().all(|c| c.is_ascii_digit() || b"+-.eE".contains(c))
        && b.iter().any(u8::is_ascii_digit);
    if decimal {
        if let Ok(f) = t.parse::<f64>() {
            return Some(from_f64(f));
        }
    }
    None
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|±HH:MM|±HHMM|±HH]`; without an offset the time is UTC.
/// A single space may precede a numeric offset (`2011-05-31 17:46:55 +0800`).
fn parse_iso(b: &[u8]) -> Option<EventTime> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = i32::try_from(digits(&b[0..4])?).ok()?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let (h, m, s) = parse_hms(&b[11..19])?;
    let mut rest = &b[19..];
    if let [b'.' | b',', tail @ ..] = rest {
        // fractional seconds never change the floored second, so they are only validated
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        rest = &tail[n..];
    }
    let offset = match rest {
        [] => 0,
        [b'Z' | b'z'] => 0,
        [b' ', off @ ..] if matches!(off.first(), Some(b'+' | b'-')) => parse_offset(off)?,
        off => parse_offset(off)?,
    };
    to_unix(year, month, day, (h, m, s), offset)
}

/// `Tue May 31 17:46:55 +0800 2011` (Weibo and Twitter v1.1 `created_at`).
///
/// The weekday must be a real weekday name but is not cross-checked against the date: the
/// digits carry the information and a mismatch cannot be repaired anyway.
fn parse_api(t: &str) -> Option<EventTime> {
    let mut parts = t.split_ascii_whitespace();
    let weekday = parts.next()?;
    let month_name = parts.next()?;
    let day = parts.next()?;
    let hms = parts.next()?;
    let offset = parts.next()?;
    let year = parts.next()?;
    if parts.next().is_some() || !WEEKDAYS.iter().any(|w| w.eq_ignore_ascii_case(weekday)) {
        return None;
    }
    let month = MONTHS
        .iter()
        .position(|m| m.eq_ignore_ascii_case(month_name))?;
    let day = day.as_bytes();
    if day.is_empty() || day.len() > 2 || year.len() != 4 {
        return None;
    }
    let year = i32::try_from(digits(year.as_bytes())?).ok()?;
    let hms = parse_hms(hms.as_bytes())?;
    let month = u32::try_from(month + 1).ok()?;
    to_unix(
        year,
        month,
        digits(day)?,
        hms,
        parse_offset(offset.as_bytes())?,
    )
}

/// `HH:MM:SS`. A leap second (`60`) is read as `59`, the same floored unix second.
fn parse_hms(b: &[u8]) -> Option<(u32, u32, u32)> {
    if b.len() != 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let s = digits(&b[6..8])?;
    let s = if s == 60 { 59 } else { s };
    Some((digits(&b[0..2])?, digits(&b[3..5])?, s))
}

/// `±HH:MM`, `±HHMM` or `±HH`, as seconds east of UTC.
fn parse_offset(b: &[u8]) -> Option<i64> {
    let (sign, rest) = match b.split_first()? {
        (b'+', rest) => (1, rest),
        (b'-', rest) => (-1, rest),
        _ => return None,
    };
    let (h, m) = match rest {
        [h1, h2] => (digits(&[*h1, *h2])?, 0),
        [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?),
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * i64::from(h * 3600 + m * 60))
}

fn to_unix(
    year: i32,
    month: u32,
    day: u32,
    hms: (u32, u32, u32),
    offset: i64,
) -> Option<EventTime> {
    let local = NaiveDate::from_ymd_opt(year, month, day)?.and_hms_opt(hms.0, hms.1, hms.2)?;
    Some(EventTime(local.and_utc().timestamp() - offset))
}

/// All-digit slice (at most 9 digits) as a number.
fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 9 {
        return None;
    }
    b.iter().try_fold(0u32, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
    })
}

/// The first [`DETAIL_MAX_CHARS`] characters of `s`, marked when cut.
pub(crate) fn excerpt(s: &str) -> String {
    match s.char_indices().nth(DETAIL_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    fn ok(v: Value) -> i64 {
        match parse_time(&v) {
            Ok(t) => t.0,
            Err(e) => panic!("{v} did not parse: {e}"),
        }
    }

    fn bad(v: Value) -> String {
        match parse_time(&v) {
            Ok(t) => panic!("{v} parsed as {t:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn integer_and_float_seconds() {
        assert_eq!(ok(json!(1306835215)), 1306835215);
        assert_eq!(ok(json!(0)), 0);
        assert_eq!(ok(json!(-1)), -1);
        assert_eq!(ok(json!(1306835215.9)), 1306835215);
        // floor, not truncation toward zero
        assert_eq!(ok(json!(-0.5)), -1);
        assert_eq!(ok(json!(-1306835215.5)), -1306835216);
    }

    #[test]
    fn milliseconds_threshold() {
        assert_eq!(ok(json!(1306835215123i64)), 1306835215);
        assert_eq!(ok(json!(99_999_999_999i64)), 99_999_999_999);
        assert_eq!(ok(json!(100_000_000_000i64)), 100_000_000);
        assert_eq!(ok(json!(-100_000_000_001i64)), -100_000_001);
        assert_eq!(ok(json!(1306835215123.0)), 1306835215);
        assert_eq!(ok(json!(-1306835215123.5)), -1306835216);
        assert_eq!(ok(json!(-8_000_000_000_000_000i64)), -8_000_000_000_000);
    }

    #[test]
    fn out_of_range_numbers() {
        assert!(bad(json!(u64::MAX)).contains("out of range"));
        assert!(bad(json!(i64::MIN)).contains("out of range"));
        assert!(bad(json!(1e300)).contains("out of range"));
        assert!(bad(json!("99999999999999999999")).contains("out of range"));
    }

    #[test]
    fn numeric_strings() {
        assert_eq!(ok(json!("1306835215")), 1306835215);
        assert_eq!(ok(json!(" 1306835215 ")), 1306835215);
        assert_eq!(ok(json!("1306835215123")), 1306835215);
        assert_eq!(ok(json!("-5")), -5);
        assert_eq!(ok(json!("+5")), 5);
        assert_eq!(ok(json!("1306835215.75")), 1306835215);
        assert_eq!(ok(json!("1.3e9")), 1_300_000_000);
        bad(json!("inf"));
        bad(json!("NaN"));
        bad(json!("-"));
        bad(json!("1.2.3"));
    }

    #[test]
    fn rfc3339() {
        assert_eq!(ok(json!("2011-05-31T17:46:55+08:00")), 1306835215);
        assert_eq!(ok(json!("2011-05-31T09:46:55Z")), 1306835215);
        assert_eq!(ok(json!("2011-05-31t09:46:55z")), 1306835215);
        assert_eq!(ok(json!("2011-05-31T09:46:55.999Z")), 1306835215);
        assert_eq!(ok(json!("2011-05-31T04:16:55-05:30")), 1306835215);
        assert_eq!(ok(json!("2011-05-31T17:46:55+0800")), 1306835215);
        assert_eq!(ok(json!("2018-10-10T20:19:24.000Z")), 1539202764);
        assert_eq!(ok(json!("1969-12-31T23:59:59.5Z")), -1);
        assert_eq!(ok(json!("2016-12-31T23:59:60Z")), 1483228799);
    }

    #[test]
    fn naive_is_utc() {
        assert_eq!(ok(json!("2011-05-31 09:46:55")), 1306835215);
        assert_eq!(ok(json!("2011-05-31T09:46:55")), 1306835215);
        assert_eq!(ok(json!("2011-05-31 09:46:55.25")), 1306835215);
        assert_eq!(ok(json!("2011-05-31 17:46:55 +0800")), 1306835215);
        assert_eq!(ok(json!("1970-01-01 00:00:00")), 0);
    }

    #[test]
    fn api_form_with_offset() {
        assert_eq!(ok(json!("Tue May 31 17:46:55 +0800 2011")), 1306835215);
        assert_eq!(ok(json!("Wed Oct 10 20:19:24 +0000 2018")), 1539202764);
        assert_eq!(ok(json!("tue may 31 17:46:55 +0800 2011")), 1306835215);
        assert_eq!(ok(json!("Thu Jan 1 00:00:00 +0000 1970")), 0);
    }

    #[test]
    fn malformed_dates() {
        for s in [
            "",
            "   ",
            "2011-02-30 00:00:00",
            "2011-05-31 25:00:00",
            "2011-05-31T17:46:55+24:00",
            "2011-05-31T17:46:55.Z",
            "2011-05-31T17:46:55 Z",
            "2011-05-31",
            "Xyz May 31 17:46:55 +0800 2011",
            "Tue Foo 31 17:46:55 +0800 2011",
            "Tue May 31 17:46:55 CST 2011",
            "Tue May 31 17:46:55 +0800 2011 extra",
            "Tue May 31 17:46:55 +0800 11",
            "5分钟前",
            "昨天 12:00",
        ] {
            assert!(bad(json!(s)).starts_with("unrecognized time"), "{s}");
        }
    }

    #[test]
    fn non_time_types() {
        assert_eq!(bad(json!(null)), "time is null");
        assert_eq!(bad(json!(true)), "time is a boolean");
        bad(json!([1]));
        bad(json!({"a": 1}));
    }

    #[test]
    fn detail_is_truncated() {
        let long = "x".repeat(500);
        let detail = bad(json!(long));
        assert_eq!(detail, format!("unrecognized time \"{}…\"", "x".repeat(80)));
        assert_eq!(excerpt("短"), "短");
        assert_eq!(excerpt(&"时".repeat(81)), format!("{}…", "时".repeat(80)));
    }
}
