//! Property tests for input decoding: no input makes the decoder panic, the generic preset
//! agrees with a straightforward `serde_json::Value` reference, and the hand-written time
//! parsers agree with chrono.

use chrono::{DateTime, Datelike, TimeZone};
use proptest::prelude::*;
use serde_json::Value;

use super::tests::preset;
use super::time::{from_f64, from_i64, from_u64, parse_time_str};
use super::*;

/// The generic preset's outcome computed the slow, obvious way from a `serde_json::Value`.
fn reference(cfg: &InputConfig, line: &str) -> Result<Decoded, RejectReason> {
    let v: Value = serde_json::from_str(line).map_err(|_| RejectReason::InvalidJson)?;
    if !v.is_object() {
        return Err(RejectReason::InvalidJson);
    }
    let at = |path: &str| path.split('.').try_fold(&v, |v, k| v.as_object()?.get(k));
    let id = match at(&cfg.id_field).ok_or(RejectReason::MissingId)? {
        Value::String(s) if !s.trim().is_empty() => s.clone(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        _ => return Err(RejectReason::EmptyId),
    };
    let text = at(&cfg.text_field)
        .and_then(Value::as_str)
        .ok_or(RejectReason::MissingText)?;
    if text.len() > cfg.max_text_bytes {
        return Err(RejectReason::TextTooLong);
    }
    let created_at = match at(&cfg.time_field) {
        None | Some(Value::Null) => None,
        Some(t) => Some(parse_time(t).map_err(|_| RejectReason::BadTime)?),
    };
    let user = match at(&cfg.user_field) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    };
    Ok(Decoded {
        id: PostId(id),
        text: text.to_string(),
        created_at,
        user,
    })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e12f64..1e13).prop_map(Value::from),
        prop::sample::select(vec![
            "",
            " ",
            "2011-05-31 17:46:55",
            "Tue May 31 17:46:55 +0800 2011",
            "1306835215",
            "x"
        ])
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "id",
        "text",
        "created_at",
        "user",
        "a",
        "b",
        "idstr",
        "data",
    ]);
    leaf().prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(keys.clone().prop_map(String::from), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn top_object() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "id",
        "text",
        "created_at",
        "user",
        "a",
        "b",
        "idstr",
        "data",
    ]);
    prop::collection::btree_map(keys.prop_map(String::from), json_value(), 0..6)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Mostly valid field values, with every kind of invalid one mixed in.
fn field_value(kind: usize) -> BoxedStrategy<Value> {
    let valid = match kind {
        0 => prop_oneof![
            any::<u64>().prop_map(Value::from),
            "[0-9]{1,20}".prop_map(Value::from)
        ]
        .boxed(),
        1 => "\\PC{0,12}".prop_map(Value::from).boxed(),
        2 => prop_oneof![
            (-1e12f64..1e13).prop_map(Value::from),
            prop::sample::select(vec![
                "2011-05-31 17:46:55",
                "Tue May 31 17:46:55 +0800 2011",
                "-12"
            ])
            .prop_map(Value::from),
        ]
        .boxed(),
        _ => prop_oneof![
            any::<i64>().prop_map(Value::from),
            "[a-z0-9]{0,8}".prop_map(Value::from)
        ]
        .boxed(),
    };
    prop_oneof![4 => valid, 1 => leaf(), 1 => json_value()].boxed()
}

/// Writes `value` at a dotted path, turning whatever is in the way into objects.
fn insert_at(root: &mut Value, path: &str, value: Value) {
    let mut node = root;
    for key in path.split('.') {
        if !node.is_object() {
            *node = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = node else { return };
        node = map.entry(key).or_insert(Value::Null);
    }
    *node = value;
}

/// A generic-preset configuration and a record that mostly fills its paths.
fn generic_record() -> impl Strategy<Value = (InputConfig, Value)> {
    let paths = (
        prop::sample::select(vec!["id", "a.id", "a.b.id"]),
        prop::sample::select(vec!["text", "a.text", "id"]),
        prop::sample::select(vec!["created_at", "a.created_at"]),
        prop::sample::select(vec!["user", "user.id", "a"]),
    );
    let fields: Vec<_> = (0..4)
        .map(|k| prop::option::weighted(0.85, field_value(k)))
        .collect();
    (paths, fields, top_object(), 0usize..40).prop_map(|(paths, fields, mut v, max_text_bytes)| {
        let cfg = InputConfig {
            preset: Preset::Generic,
            id_field: paths.0.into(),
            text_field: paths.1.into(),
            time_field: paths.2.into(),
            user_field: paths.3.into(),
            max_text_bytes,
        };
        let targets = [
            &cfg.id_field,
            &cfg.text_field,
            &cfg.time_field,
            &cfg.user_field,
        ];
        for (path, value) in targets.into_iter().zip(fields) {
            if let Some(value) = value {
                insert_at(&mut v, path, value);
            }
        }
        (cfg, v)
    })
}

proptest! {
    #[test]
    fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for p in Preset::ALL {
            let _ = preset(p).decode(&bytes);
        }
    }

    #[test]
    fn never_panics_on_json_ish(s in r#"[{}\[\]":,.0-9a-zA-Z_ +\-\\\r\n\t中文]{0,160}"#) {
        for p in Preset::ALL {
            let _ = preset(p).decode(s.as_bytes());
        }
    }

    #[test]
    fn generic_matches_value_reference((cfg, v) in generic_record()) {
        let line = v.to_string();
        let got = Decoder::new(&cfg).decode(line.as_bytes()).map_err(|r| r.reason);
        prop_assert_eq!(got, reference(&cfg, &line));
    }

    #[test]
    fn presets_never_panic_on_structured_json(v in top_object()) {
        for p in Preset::ALL {
            let _ = preset(p).decode(v.to_string().as_bytes());
        }
    }
}

proptest! {
    #[test]
    fn rfc3339_agrees_with_chrono(
        y in 1i32..9999, mo in 1u32..=12, d in 1u32..=28, h in 0u32..24, mi in 0u32..60,
        s in 0u32..60, frac in proptest::option::of(0u32..1_000_000), off in -1439i32..=1439,
    ) {
        let frac = frac.map(|f| format!(".{f:06}")).unwrap_or_default();
        let sign = if off < 0 { '-' } else { '+' };
        let (oh, om) = (off.abs() / 60, off.abs() % 60);
        let text = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}{sign}{oh:02}:{om:02}");
        let expected = DateTime::parse_from_rfc3339(&text).map(|t| t.timestamp());
        prop_assert_eq!(parse_time_str(&text).ok().map(|t| t.0), expected.ok());
    }

    #[test]
    fn api_form_agrees_with_chrono(secs in -2_000_000_000i64..4_000_000_000, off in -1439i32..=1439) {
        let tz = chrono::FixedOffset::east_opt(off * 60).ok_or_else(|| TestCaseError::fail("offset"))?;
        let local = tz.timestamp_opt(secs, 0).single().ok_or_else(|| TestCaseError::fail("time"))?;
        prop_assume!(local.year() >= 1000);
        let text = local.format("%a %b %d %H:%M:%S %z %Y").to_string();
        prop_assert_eq!(parse_time_str(&text).ok().map(|t| t.0), Some(secs));
    }

    #[test]
    fn never_panics(s in "\\PC{0,40}", f in any::<f64>(), i in any::<i64>(), u in any::<u64>()) {
        let _ = parse_time_str(&s);
        let _ = from_f64(f);
        let _ = from_i64(i);
        let _ = from_u64(u);
    }
}
