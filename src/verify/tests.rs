//! Unit and property tests of candidate verification and the edit-distance algorithms.

use super::edit::{banded, count_bound, myers};
use super::*;
use proptest::prelude::*;

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

fn sketch<'a>(c: &'a [char], toks: &'a [u32], fp: u64) -> Sketch<'a> {
    let s: String = c.iter().collect();
    Sketch {
        chars: c,
        text_hash: xxhash_rust::xxh3::xxh3_64(s.as_bytes()),
        fingerprint: Fingerprint(fp),
        tokens: toks,
    }
}

#[test]
fn exact_match() {
    let a = chars("今天天气真不错");
    let m = verify(
        &sketch(&a, &[1, 2], 7),
        &sketch(&a, &[1, 2], 7),
        &VerifyConfig::default(),
    );
    assert_eq!(m.map(|m| m.method), Some(Method::Exact));
}

#[test]
fn one_char_edit_of_a_long_post_matches_but_not_of_a_short_one() {
    let cfg = VerifyConfig::default();
    let a = chars("我愿意了别人不愿意了那就不好办了");
    let b = chars("我愿意了的别人不愿意了那就不好办了");
    assert_eq!(
        verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method),
        Some(Method::Edit)
    );
    let c = chars("大雁肉怎么吃");
    let d = chars("大雁肉怎么做");
    assert!(verify(&sketch(&c, &[], 0), &sketch(&d, &[], 0), &cfg).is_none());
}

#[test]
fn truncation_matches_by_containment() {
    let cfg = VerifyConfig::default();
    let a = chars("任何事情做精致了做到极致都会相同效果");
    let b = chars("任何事情做精致了做到极致都");
    let m = verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method);
    assert_eq!(m, Some(Method::Containment));
}

#[test]
fn simhash_rule_needs_tokens_and_overlap() {
    let cfg = VerifyConfig::default();
    let a = chars("甲乙");
    let b = chars("丙丁");
    let t1: Vec<u32> = (0..10).collect();
    let t2: Vec<u32> = (0..9).chain([99]).collect();
    let m = verify(&sketch(&a, &t1, 0b1), &sketch(&b, &t2, 0b11), &cfg);
    assert_eq!(m.map(|m| m.method), Some(Method::Simhash));
    let t3: Vec<u32> = (50..60).collect();
    assert!(verify(&sketch(&a, &t1, 0), &sketch(&b, &t3, 0), &cfg).is_none());
}

#[test]
fn latin_letters_count_less_toward_the_length_gates() {
    let cfg = VerifyConfig::default();
    let a = chars("dearharumahappybirthday");
    let b = chars("harumahappybirthday");
    assert!(verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).is_none());
    let full = VerifyConfig {
        ascii_char_weight: 1.0,
        ..VerifyConfig::default()
    };
    assert!(verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &full).is_some());
}

#[test]
fn jaccard_of_sorted_sets() {
    assert_eq!(jaccard(&[1, 2, 3], &[2, 3, 4]), 0.5);
    assert_eq!(jaccard(&[], &[]), 0.0);
}

/// Textbook O(n m) Levenshtein, the reference for the banded and bit-parallel versions.
fn naive(a: &[char], b: &[char]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[test]
fn long_texts_sharing_a_prefix_cost_only_their_differing_part() {
    let prefix: String = "今天天气真不错我们去公园散步吧".repeat(300);
    let a = chars(&format!("{prefix}甲乙丙丁戊己庚辛"));
    let b = chars(&format!("{prefix}子丑寅卯辰巳午未申"));
    let mut budget = Budget::unlimited();
    let d = edit_distance_within(&a, &b, a.len(), &mut budget);
    assert_eq!(d, Ok(Some(9)));
    assert!(budget.spent() <= 9 * 64, "spent {}", budget.spent());
}

#[test]
fn a_spent_budget_stops_verification_but_never_changes_an_answer_given() {
    let cfg = VerifyConfig::default();
    let a: Vec<char> = "一二三四五六七八九十".repeat(40).chars().collect();
    let mut b = a.clone();
    for i in (0..b.len()).step_by(9) {
        b[i] = '零';
    }
    let (sa, sb) = (sketch(&a, &[], 0), sketch(&b, &[], 0));
    let full = verify(&sa, &sb, &cfg);
    assert_eq!(full.map(|m| m.method), Some(Method::Edit));
    let mut small = Budget::new(1000);
    assert_eq!(verify_within(&sa, &sb, &cfg, &mut small), Err(Exhausted));
    let mut enough = Budget::new(1 << 20);
    assert_eq!(verify_within(&sa, &sb, &cfg, &mut enough), Ok(full));
}

/// `a` with `edits` applied: (position, 0 insert / 1 delete / 2 substitute, character).
pub(crate) fn edited(a: &[char], edits: &[(usize, u8, String)]) -> Vec<char> {
    let mut b = a.to_vec();
    for (pos, op, c) in edits {
        let p = pos % (b.len() + 1);
        let c = c.chars().next().unwrap();
        match op {
            0 => b.insert(p, c),
            1 if p < b.len() => {
                b.remove(p);
            }
            _ if p < b.len() => b[p] = c,
            _ => {}
        }
    }
    b
}

/// `Gates::of` without the text hash, as the index keeps them.
fn unhashed(s: &Sketch<'_>) -> Gates {
    Gates {
        text_hash: None,
        ..Gates::of(s)
    }
}

#[test]
fn the_score_bound_is_the_score_when_the_gates_see_every_edit() {
    let cfg = VerifyConfig::default();
    let a = chars("今天天气很好我们一起去公园散步吧朋友们");
    let sa = sketch(&a, &[], 0);
    let bits = Bits::of(&sa);
    // `b`'s score against `a`, and its bound from the gates the index keeps.
    let scored = |b: &[char]| {
        let sb = sketch(b, &[], 0);
        let m = verify(&sa, &sb, &cfg).map(|m| m.score);
        (m, score_bound(&sa, &bits, &unhashed(&sb), &cfg))
    };
    let tight = |b: &[char]| {
        let (score, bound) = scored(b);
        let (score, bound) = (score.expect("a near copy"), bound.unwrap());
        assert!(bound >= score && bound - score < 1e-6, "{bound} {score}");
    };
    // Cut at the end: the length difference is the edit distance.
    for cut in 1..=2 {
        tight(&a[..a.len() - cut]);
    }
    // A character no other one shares, substituted: one edit, seen by the character bits.
    let mut b = a.clone();
    b[5] = '龘';
    tight(&b);
    // Identical texts: 1.0 even without the text hash.
    assert_eq!(scored(&a).1, Some(1.0));
}

proptest! {
    #[test]
    fn the_gates_never_reject_what_verify_accepts(
        a in "[abcd]{0,30}", b in "[abcd]{0,30}",
        ta in proptest::collection::btree_set(0u32..20, 0..14),
        tb in proptest::collection::btree_set(0u32..20, 0..14),
        fa: u64, flips in 0u32..4,
    ) {
        let (a, b) = (chars(&a), chars(&b));
        let (ta, tb): (Vec<u32>, Vec<u32>) = (ta.into_iter().collect(), tb.into_iter().collect());
        let fb = fa ^ ((1u64 << flips) - 1);
        let (sa, sb) = (sketch(&a, &ta, fa), sketch(&b, &tb, fb));
        let cfg = VerifyConfig::default();
        let gates = Gates::of(&sb);
        if let Some(m) = verify(&sa, &sb, &cfg) {
            prop_assert!(may_accept(&sa, &Bits::of(&sa), &gates, &cfg));
            // The bound is never below the score, so a candidate skipped for it never wins.
            prop_assert!(score_bound(&sa, &Bits::of(&sa), &gates, &cfg) >= Some(m.score));
            // The index's records leave the text hash out: their gates pass every such pair
            // but identical texts, which the index's exact path finds first.
            let bare = unhashed(&sb);
            prop_assert!(a == b || may_accept(&sa, &Bits::of(&sa), &bare, &cfg));
            let bound = score_bound(&sa, &Bits::of(&sa), &bare, &cfg);
            prop_assert!(bound.is_none() || bound >= Some(m.score), "{:?} {:?}", bound, m);
        }
    }

    // Token sets that mostly overlap, with hashes spread over all 32 bits so that the token
    // sets' bits differ: whenever the SimHash rule accepts, its gate does.
    #[test]
    fn the_token_gate_never_rejects_what_the_simhash_rule_accepts(
        shared in proptest::collection::btree_set(any::<u32>(), 4..40),
        only_a in proptest::collection::btree_set(any::<u32>(), 0..8),
        only_b in proptest::collection::btree_set(any::<u32>(), 0..8),
        fa: u64, flips in 0u32..12,
    ) {
        let ta: Vec<u32> = shared.union(&only_a).copied().collect();
        let tb: Vec<u32> = shared.union(&only_b).copied().collect();
        let (a, b) = (chars("天地人和风雨云雪山水"), chars("abcdefghijkl"));
        let fb = fa ^ ((1u64 << flips) - 1);
        let (sa, sb) = (sketch(&a, &ta, fa), sketch(&b, &tb, fb));
        let cfg = VerifyConfig::default();
        let gates = Gates::of(&sb);
        if let Some(m) = verify(&sa, &sb, &cfg) {
            prop_assert!(may_accept_simhash(&sa, token_bits(&ta), &gates, &cfg));
            prop_assert!(simhash_bound(&sa, token_bits(&ta), &gates, &cfg) >= Some(m.score));
        }
    }

    // The same with a rich alphabet, so the character sets matter: B is A edited, cut or
    // padded; whenever verify accepts, the gates do.
    #[test]
    fn the_character_gate_never_rejects_what_verify_accepts(
        a in "[a-z0-9天地人和风雨云雪山水]{8,60}",
        edits in proptest::collection::vec((0usize..60, 0u8..3, "[a-z0-9天地人和风雨云雪山水]"), 0..8),
        cut in (0usize..20, 0usize..20),
        pad in ("[a-z天地]{0,10}", "[a-z天地]{0,10}"),
    ) {
        let a = chars(&a);
        let b = edited(&a, &edits);
        let end = b.len().saturating_sub(cut.1).max(cut.0.min(b.len()));
        let b: Vec<char> = pad.0.chars().chain(b[cut.0.min(b.len())..end].iter().copied()).chain(pad.1.chars()).collect();
        let (sa, sb) = (sketch(&a, &[], 0), sketch(&b, &[], 0));
        let cfg = VerifyConfig::default();
        let gates = Gates::of(&sb);
        if let Some(m) = verify(&sa, &sb, &cfg) {
            prop_assert!(may_accept(&sa, &Bits::of(&sa), &gates, &cfg), "a={:?} b={:?}", a, b);
            let bound = score_bound(&sa, &Bits::of(&sa), &unhashed(&sb), &cfg);
            prop_assert!(a == b || bound >= Some(m.score), "a={:?} b={:?} {:?} {:?}", a, b, bound, m);
        }
    }

    // A text `exact_only` names is accepted with no other text, either way round, but its
    // identical copy: B is A edited, padded or cut, with a token set of its own.
    #[test]
    fn a_text_exact_only_names_is_accepted_only_with_its_copy(
        a in "[ab天地人]{1,16}",
        edits in proptest::collection::vec((0usize..20, 0u8..3, "[ab天地人]"), 0..3),
        pad in "[ab天地]{0,30}",
        ta in proptest::collection::btree_set(0u32..12, 0..10),
        tb in proptest::collection::btree_set(0u32..12, 0..40),
        fa: u64, flips in 0u32..3,
    ) {
        let a = chars(&a);
        let b: Vec<char> = edited(&a, &edits).into_iter().chain(pad.chars()).collect();
        let (ta, tb): (Vec<u32>, Vec<u32>) = (ta.into_iter().collect(), tb.into_iter().collect());
        let (sa, sb) = (sketch(&a, &ta, fa), sketch(&b, &tb, fa ^ ((1u64 << flips) - 1)));
        let cfg = VerifyConfig::default();
        if exact_only(a.len(), ta.len(), &cfg) && a != b {
            prop_assert!(verify(&sa, &sb, &cfg).is_none());
            prop_assert!(verify(&sb, &sa, &cfg).is_none());
        }
    }

    #[test]
    fn banded_and_bit_parallel_agree_with_the_textbook_dp(
        a in "[abcd]{0,150}", b in "[abcd]{0,150}", max in 0usize..160,
    ) {
        let (a, b) = (chars(&a), chars(&b));
        let full = naive(&a, &b);
        let want = (full <= max).then_some(full);
        if !a.is_empty() && !b.is_empty() {
            let (s, l) = if a.len() <= b.len() { (&a, &b) } else { (&b, &a) };
            prop_assert_eq!(myers(s, l, max), want, "myers");
            prop_assert_eq!(banded(s, l, max), want, "banded");
        }
        prop_assert_eq!(levenshtein_bounded(&a, &b, max), want);
        prop_assert!(count_bound(&a, &b) <= full);
    }

    #[test]
    fn contains_agrees_with_windows(long in "[ab]{0,40}", short in "[ab]{0,8}") {
        let (l, s) = (chars(&long), chars(&short));
        let want = s.is_empty() || l.windows(s.len()).any(|w| w == s.as_slice());
        prop_assert_eq!(contains(&l, &s), want);
    }

    #[test]
    fn bounded_agrees_with_full(a in "[abc]{0,12}", b in "[abc]{0,12}", max in 0usize..6) {
        let (a, b) = (chars(&a), chars(&b));
        let full = levenshtein(&a, &b);
        let bounded = levenshtein_bounded(&a, &b, max);
        prop_assert_eq!(bounded, (full <= max).then_some(full));
    }

    #[test]
    fn verify_is_symmetric(a in "[abcd]{0,16}", b in "[abcd]{0,16}") {
        let (a, b) = (chars(&a), chars(&b));
        let cfg = VerifyConfig::default();
        let x = verify(&sketch(&a, &[], 0), &sketch(&b, &[], 0), &cfg).map(|m| m.method);
        let y = verify(&sketch(&b, &[], 0), &sketch(&a, &[], 0), &cfg).map(|m| m.method);
        prop_assert_eq!(x, y);
    }
}

#[test]
fn a_token_count_too_large_to_keep_passes_the_token_gate() {
    let cfg = VerifyConfig::default();
    let (a, b) = (chars("天地人和风雨云雪山水"), chars("abcdefghijkl"));
    let ta: Vec<u32> = (0..20).collect();
    let sa = sketch(&a, &ta, 0);
    let gates = |tokens| Gates {
        chars: b.len(),
        tokens,
        fingerprint: Fingerprint(u64::MAX),
        text_hash: None,
        bits: Bits::default(),
    };
    // No token bit in common and every fingerprint bit apart: rejected, unless the count
    // stands for "at least this many", which bounds nothing.
    assert!(!may_accept_simhash(&sa, token_bits(&ta), &gates(20), &cfg));
    assert!(may_accept_simhash(
        &sa,
        token_bits(&ta),
        &gates(MANY_TOKENS),
        &cfg
    ));
    // The token sets use the low 48 bits only: the index keeps its count in the rest.
    assert_eq!(token_bits(&(0..5000).collect::<Vec<u32>>()) >> 48, 0);
}

#[test]
fn exact_only_names_texts_below_every_other_rules_reach() {
    let cfg = VerifyConfig::default();
    // The edit rule reaches 11 characters (12 with one edit), containment 11, SimHash 8 tokens.
    assert!(exact_only(10, 7, &cfg));
    assert!(!exact_only(11, 7, &cfg));
    assert!(!exact_only(10, 8, &cfg));
    let no_containment = VerifyConfig {
        containment: false,
        ..cfg.clone()
    };
    assert!(exact_only(10, 7, &no_containment));
    // An edit rule that allows any edit reaches every length.
    let any_edit = VerifyConfig {
        edit_similarity: 0.0,
        containment: false,
        ..cfg
    };
    assert!(!exact_only(1, 0, &any_edit));
}
