//! Decoder unit tests for the generic preset: configuration, every rejection reason, id, text,
//! time and user rules, nested paths and line-ending tolerance. Preset samples live beside the
//! presets; property tests live in `proptests.rs`.

use super::*;

fn generic() -> Decoder {
    Decoder::new(&InputConfig::default())
}

pub(super) fn preset(p: Preset) -> Decoder {
    Decoder::new(&InputConfig {
        preset: p,
        ..InputConfig::default()
    })
}

pub(super) fn ok(d: &Decoder, line: &str) -> Decoded {
    match d.decode(line.as_bytes()) {
        Ok(post) => post,
        Err(r) => panic!("{line}: rejected {}: {}", r.reason, r.detail),
    }
}

pub(super) fn reason(d: &Decoder, line: &[u8]) -> RejectReason {
    match d.decode(line) {
        Ok(post) => panic!("{}: accepted {post:?}", String::from_utf8_lossy(line)),
        Err(r) => r.reason,
    }
}

#[test]
fn config_defaults_and_serde() {
    let cfg = InputConfig::default();
    assert_eq!((cfg.preset, cfg.max_text_bytes), (Preset::Generic, 16384));
    let parsed: InputConfig =
        serde_json::from_str(r#"{"preset":"weibo","id_field":"mid"}"#).unwrap();
    assert_eq!(
        parsed,
        InputConfig {
            preset: Preset::Weibo,
            id_field: "mid".into(),
            ..cfg
        }
    );
    assert!(serde_json::from_str::<InputConfig>(r#"{"presett":"weibo"}"#).is_err());
    assert_eq!("twitter".parse::<Preset>(), Ok(Preset::Twitter));
    assert!("Weibo".parse::<Preset>().is_err());
    assert_eq!(serde_json::to_string(&Preset::Weibo).unwrap(), "\"weibo\"");
}

#[test]
fn plain_generic_record() {
    let post = ok(
        &generic(),
        r#"{"id": "2111105031607336", "text": "毛新宇 深情演唱", "created_at": 1304404747, "user": "1760369714"}"#,
    );
    assert_eq!(post.id, PostId("2111105031607336".into()));
    assert_eq!(post.text, "毛新宇 深情演唱");
    assert_eq!(post.created_at, Some(EventTime(1304404747)));
    assert_eq!(post.user.as_deref(), Some("1760369714"));
}

#[test]
fn invalid_utf8_is_checked_before_json() {
    assert_eq!(
        reason(&generic(), b"{\"id\":\"1\",\"text\":\"\xff\"}"),
        RejectReason::InvalidUtf8
    );
    assert_eq!(reason(&generic(), b"\xc3("), RejectReason::InvalidUtf8);
    let r = generic().decode(b"{\"text\":\"\xe4\xbd\"}").unwrap_err();
    assert!(r.detail.contains("utf-8"), "{}", r.detail);
}

#[test]
fn invalid_json_and_non_objects() {
    for line in [
        "",
        "not json",
        "[1,2]",
        "\"text\"",
        "42",
        "null",
        "{\"id\":1",
        "{\"id\":1} {}",
        "{'id':1}",
    ] {
        assert_eq!(
            reason(&generic(), line.as_bytes()),
            RejectReason::InvalidJson,
            "{line}"
        );
    }
    let r = generic().decode(b"[1]").unwrap_err();
    assert!(r.detail.contains("expected a JSON object"), "{}", r.detail);
}

#[test]
fn missing_and_empty_ids() {
    let d = generic();
    assert_eq!(reason(&d, br#"{"text":"t"}"#), RejectReason::MissingId);
    assert_eq!(
        reason(&d, br#"{"ID":"1","text":"t"}"#),
        RejectReason::MissingId
    );
    for id in [r#""""#, r#""  ""#, "null", "true", "1.5", "{}", "[1]"] {
        let line = format!(r#"{{"id":{id},"text":"t"}}"#);
        assert_eq!(reason(&d, line.as_bytes()), RejectReason::EmptyId, "{line}");
    }
    assert_eq!(
        d.decode(br#"{"id":null,"text":"t"}"#).unwrap_err().detail,
        "id is null"
    );
}

#[test]
fn big_integer_ids_stay_exact() {
    let d = generic();
    for id in [
        "3350040253028385",
        "5608068867871836930",
        "18446744073709551615",
        "-7",
        "0",
    ] {
        let line = format!(r#"{{"id":{id},"text":"t"}}"#);
        assert_eq!(ok(&d, &line).id.as_str(), id);
    }
    assert_eq!(
        ok(&d, r#"{"id":"005608068867871836930","text":"t"}"#)
            .id
            .as_str(),
        "005608068867871836930"
    );
}

#[test]
fn text_rules() {
    let d = Decoder::new(&InputConfig {
        max_text_bytes: 6,
        ..InputConfig::default()
    });
    assert_eq!(reason(&d, br#"{"id":1}"#), RejectReason::MissingText);
    assert_eq!(
        reason(&d, br#"{"id":1,"text":null}"#),
        RejectReason::MissingText
    );
    assert_eq!(
        reason(&d, br#"{"id":1,"text":5}"#),
        RejectReason::MissingText
    );
    assert_eq!(
        reason(&d, br#"{"id":1,"text":["a"]}"#),
        RejectReason::MissingText
    );
    // two CJK characters are exactly 6 bytes; three are 9
    assert_eq!(ok(&d, r#"{"id":1,"text":"你好"}"#).text, "你好");
    assert_eq!(
        reason(&d, r#"{"id":1,"text":"你好吗"}"#.as_bytes()),
        RejectReason::TextTooLong
    );
    assert_eq!(ok(&d, r#"{"id":1,"text":""}"#).text, "");
    // escaped text is unescaped and measured after unescaping
    assert_eq!(ok(&d, r#"{"id":1,"text":"\u4f60\u597d"}"#).text, "你好");
    assert_eq!(
        d.decode(r#"{"id":1,"text":"你好吗"}"#.as_bytes())
            .unwrap_err()
            .detail,
        "text is 9 bytes, limit 6"
    );
}

#[test]
fn time_rules() {
    let d = generic();
    let time = |t: &str| ok(&d, &format!(r#"{{"id":1,"text":"t","created_at":{t}}}"#)).created_at;
    assert_eq!(ok(&d, r#"{"id":1,"text":"t"}"#).created_at, None);
    assert_eq!(time("null"), None);
    assert_eq!(time("0"), Some(EventTime(0)));
    assert_eq!(time("-86400"), Some(EventTime(-86400)));
    assert_eq!(time("1306835215123"), Some(EventTime(1306835215)));
    assert_eq!(time("1306835215.5"), Some(EventTime(1306835215)));
    assert_eq!(time(r#""1306835215""#), Some(EventTime(1306835215)));
    assert_eq!(
        time(r#""2011-05-31T17:46:55+08:00""#),
        Some(EventTime(1306835215))
    );
    assert_eq!(
        time(r#""Tue May 31 17:46:55 +0800 2011""#),
        Some(EventTime(1306835215))
    );
    assert_eq!(
        time(r#""2011-05-31 09:46:55""#),
        Some(EventTime(1306835215))
    );
    for bad in [r#""yesterday""#, "true", "{}", r#""""#, "1e300"] {
        let line = format!(r#"{{"id":1,"text":"t","created_at":{bad}}}"#);
        assert_eq!(reason(&d, line.as_bytes()), RejectReason::BadTime, "{bad}");
    }
    let r = d
        .decode(r#"{"id":1,"text":"t","created_at":"5分钟前"}"#.as_bytes())
        .unwrap_err();
    assert_eq!(r.detail, "unrecognized time \"5分钟前\"");
}

#[test]
fn rejection_order_is_id_text_time() {
    let d = generic();
    assert_eq!(
        reason(&d, br#"{"created_at":"x"}"#),
        RejectReason::MissingId
    );
    assert_eq!(
        reason(&d, br#"{"id":1,"created_at":"x"}"#),
        RejectReason::MissingText
    );
}

#[test]
fn users() {
    let d = generic();
    let user = |u: &str| ok(&d, &format!(r#"{{"id":1,"text":"t","user":{u}}}"#)).user;
    assert_eq!(ok(&d, r#"{"id":1,"text":"t"}"#).user, None);
    assert_eq!(user(r#""alice""#).as_deref(), Some("alice"));
    assert_eq!(user("1760369714").as_deref(), Some("1760369714"));
    assert_eq!(user("-5").as_deref(), Some("-5"));
    for none in ["null", r#""""#, "true", "1.5", r#"{"id":1}"#, "[]"] {
        assert_eq!(user(none), None, "{none}");
    }
}

#[test]
fn nested_generic_paths() {
    let cfg = InputConfig {
        id_field: "meta.post.id".into(),
        text_field: "content.body".into(),
        time_field: "meta.ts".into(),
        user_field: "author.uid".into(),
        ..InputConfig::default()
    };
    let d = Decoder::new(&cfg);
    let line = r#"{"meta":{"post":{"id":5608068867871836930},"ts":"2011-05-31T09:46:55Z"},"content":{"body":"正文","lang":"zh"},"author":{"uid":42},"id":"decoy","text":"decoy"}"#;
    let post = ok(&d, line);
    assert_eq!(post.id.as_str(), "5608068867871836930");
    assert_eq!(post.text, "正文");
    assert_eq!(post.created_at, Some(EventTime(1306835215)));
    assert_eq!(post.user.as_deref(), Some("42"));
    assert_eq!(
        reason(&d, br#"{"meta":{"post":"1"},"content":{"body":"x"}}"#),
        RejectReason::MissingId
    );
    assert_eq!(
        reason(&d, br#"{"meta":{"post":{"id":"1"}},"content":"x"}"#),
        RejectReason::MissingText
    );
    let r = d.decode(br#"{"content":{"body":"x"}}"#).unwrap_err();
    assert_eq!(r.detail, "no id at \"meta.post.id\"");
}

#[test]
fn same_path_for_two_fields() {
    let cfg = InputConfig {
        id_field: "text".into(),
        user_field: "text".into(),
        ..InputConfig::default()
    };
    let post = ok(&Decoder::new(&cfg), r#"{"text":"abc"}"#);
    assert_eq!(
        (post.id.as_str(), post.text.as_str(), post.user.as_deref()),
        ("abc", "abc", Some("abc"))
    );
}

#[test]
fn line_endings_and_bom() {
    let d = generic();
    for line in [
        &b"{\"id\":1,\"text\":\"t\"}\r"[..],
        b"{\"id\":1,\"text\":\"t\"}\r\n",
        b"\xEF\xBB\xBF{\"id\":1,\"text\":\"t\"}\r",
    ] {
        assert_eq!(d.decode(line).map(|p| p.text), Ok("t".to_string()));
    }
}
