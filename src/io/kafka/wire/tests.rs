use super::*;
use crate::engine::Analyzer;
use crate::text::tokenize::{Tokenizer, Weighting};

#[test]
fn routed_round_trip_keeps_what_dedup_needs() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut a = Analyzed::default();
    Analyzer::new(&tok).analyze("今天早上地铁二号线又停运了 //@x: 哈哈", &mut a);
    let raw = br#"{"id":"1","text":"..."}"#;
    let buf = encode_routed(&PostId("1".into()), Some(EventTime(42)), Some(7), &a, raw);
    // Into a buffer that held something: the same bytes.
    let mut reused = b"left over".to_vec();
    encode_routed_into(
        &mut reused,
        &PostId("1".into()),
        Some(EventTime(42)),
        Some(7),
        &a,
        raw,
    );
    assert_eq!(reused, buf);
    let d = decode_routed(&buf, Words::Keep).unwrap();
    assert_eq!(d.id.0, "1");
    assert_eq!(d.input_ms, Some(7));
    assert_eq!(d.created_at, Some(EventTime(42)));
    assert_eq!(d.raw, raw);
    assert_eq!(d.analyzed.normalized, a.normalized);
    assert_eq!(d.analyzed.token_set, a.token_set);
    assert_eq!(d.analyzed.grams, a.grams);
    assert_eq!(d.analyzed.text_hash, a.text_hash);
    assert_eq!(d.analyzed.fingerprint(), a.fingerprint());
    let words = |p: &RoutedPost| -> Vec<String> {
        p.analyzed.tokens.iter().map(|t| t.word.clone()).collect()
    };
    let given: Vec<String> = a.tokens.iter().map(|t| t.word.clone()).collect();
    assert!(!given.is_empty());
    assert_eq!(words(&d), given);
    // Without words, the same hashes, weights and token set.
    let s = decode_routed(&buf, Words::Skip).unwrap();
    assert!(words(&s).iter().all(String::is_empty));
    // Read ahead: the same view for verification, and the same times.
    let c = decode_sketch(&buf).unwrap();
    let (cs, ss) = (c.sketch(), s.analyzed.sketch());
    assert_eq!((cs.chars, cs.tokens), (ss.chars, ss.tokens));
    assert_eq!(
        (cs.text_hash, cs.fingerprint),
        (ss.text_hash, ss.fingerprint)
    );
    assert_eq!((c.created_at, c.input_ms), (s.created_at, s.input_ms));
    assert!(!s.analyzed.grams.is_empty());
    let hw = |p: &RoutedPost| -> Vec<(u64, u32)> {
        p.analyzed
            .tokens
            .iter()
            .map(|t| (t.hash, t.weight.to_bits()))
            .collect()
    };
    assert_eq!(hw(&s), hw(&d));
    assert_eq!(s.analyzed.token_set, a.token_set);
    // A record one decoder refuses, the other refuses too.
    // Cut anywhere but before the optional input time, it is refused by both.
    for cut in 0..buf.len() {
        let part = &buf[..cut];
        let refused = cut != buf.len() - 8;
        assert_eq!(
            decode_routed(part, Words::Keep).is_err(),
            refused,
            "cut at {cut}"
        );
        assert_eq!(decode_sketch(part).is_err(), refused, "cut at {cut}");
    }
    // A token that is not UTF-8.
    let word = a.tokens[0].word.as_bytes();
    let at = buf.windows(word.len()).rposition(|w| w == word).unwrap();
    let mut bad = buf.clone();
    bad[at] = 0xff;
    assert!(decode_routed(&bad, Words::Keep).is_err() && decode_sketch(&bad).is_err());
    // Without the trailing input time (as earlier writers sent it).
    let old = encode_routed(&PostId("1".into()), Some(EventTime(42)), None, &a, raw);
    assert_eq!(old.len() + 8, buf.len());
    assert_eq!(decode_routed(&old, Words::Keep).unwrap().input_ms, None);
}

#[test]
fn envelopes_carry_posts_in_order_and_single_posts_still_decode() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut a = Analyzed::default();
    let mut env = Envelope::default();
    let mut single = Vec::new();
    for (i, text) in ["第一条微博", "第二条微博", ""].iter().enumerate() {
        Analyzer::new(&tok).analyze(text, &mut a);
        let rec = encode_routed(&PostId(i.to_string()), None, None, &a, text.as_bytes());
        env.push(&rec);
        single = rec;
    }
    assert_eq!((env.len(), env.is_empty()), (3, false));
    let buf = env.take();
    assert!(env.is_empty() && env.bytes() == 0);
    // The envelope is used again: the next record holds only what was pushed since.
    env.push(&single);
    let again = decode_routed_record(&env.take(), Words::Keep).unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id.0, "2");
    let posts = decode_routed_record(&buf, Words::Keep).unwrap();
    let ids: Vec<&str> = posts.iter().map(|p| p.id.0.as_str()).collect();
    assert_eq!(ids, ["0", "1", "2"]);
    let sketches = decode_sketch_record(&buf).unwrap();
    let chars: Vec<&[char]> = sketches.iter().map(|s| &s.chars[..]).collect();
    let want: Vec<&[char]> = posts.iter().map(|p| &p.analyzed.chars[..]).collect();
    assert_eq!(chars, want);
    assert!(decode_sketch_record(&buf[..buf.len() - 1]).is_err());
    assert_eq!(posts[1].raw, "第二条微博".as_bytes());
    assert_eq!(
        decode_routed_record(&single, Words::Keep).unwrap()[0].id.0,
        "2"
    );
    assert!(decode_routed_record(&buf[..buf.len() - 1], Words::Keep).is_err());
    assert!(decode_routed_record(ENVELOPE_MAGIC, Words::Keep).is_err());
    // Repeated text compresses; a corrupt frame is an error, not a panic.
    assert_eq!(buf[4], 1, "zstd");
    let mut corrupt = buf.clone();
    let n = corrupt.len();
    corrupt[n - 4] ^= 0xff;
    assert!(decode_routed_record(&corrupt, Words::Keep).is_err());
    // A body zstd cannot shrink is stored.
    let mut tiny = Envelope::default();
    tiny.push(b"x");
    let stored = tiny.take();
    assert_eq!(stored[4], 0);
    assert!(
        decode_routed_record(&stored, Words::Keep).is_err(),
        "not a post"
    );
    assert!(routed_seq(7, 4095) < routed_seq(8, 0));
    assert!(routed_seq(7, 1) > routed_seq(7, 0));
}
