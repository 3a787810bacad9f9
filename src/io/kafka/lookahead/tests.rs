use super::*;
use crate::engine::{Analyzed, Analyzer, Engine, EngineConfig};
use crate::io::kafka::wire::{decode_sketch_record, encode_routed, RoutedPost};
use crate::text::tokenize::{Tokenizer, Weighting};
use crate::types::{EventTime, PostId};

const LIVE: Visibility = Visibility {
    tick_secs: 0,
    slack_ms: 250,
    live_lag_secs: 60,
};

/// A routed post of `text`, as the route stage sends it.
pub(crate) fn routed(
    tok: &Tokenizer,
    id: &str,
    time: Option<i64>,
    input_ms: i64,
    text: &str,
) -> RoutedPost {
    let mut analyzed = Analyzed::default();
    Analyzer::new(tok).analyze(text, &mut analyzed);
    RoutedPost {
        id: PostId(id.into()),
        created_at: time.map(EventTime),
        analyzed,
        raw: Vec::new(),
        input_ms: Some(input_ms),
    }
}

/// A routed post as a worker reading ahead decodes it: encoded, then decoded by `wire`.
fn sketched(p: &RoutedPost) -> RoutedSketch {
    let raw = encode_routed(&p.id, p.created_at, p.input_ms, &p.analyzed, &p.raw);
    let mut one = decode_sketch_record(&raw).unwrap();
    one.pop().unwrap()
}

impl Lookahead {
    fn read_posts(&mut self, partition: u32, offset: u64, posts: Option<Vec<RoutedPost>>) -> bool {
        self.read(
            partition,
            offset,
            posts.map(|v| v.iter().map(sketched).collect()),
        )
    }

    fn check(&self, partition: u32, key: &OrderKey, post: &Sketch<'_>, bits: &Bits) -> Check {
        self.check_resuming(partition, key, post, bits, &mut None)
    }

    fn clears(&self, partition: u32, key: &OrderKey, post: &Sketch<'_>) -> bool {
        self.check(partition, key, post, &Bits::of(post)) == Check::Clear
    }
}

fn ahead() -> Lookahead {
    Lookahead::new(LIVE, VerifyConfig::default(), 3)
}

fn key(tau: i64, partition: u32, offset: u64) -> OrderKey {
    OrderKey {
        tau,
        arrival: 0,
        partition,
        seq: routed_seq(offset, 0),
    }
}

const A: &str = "今天早上地铁二号线又停运了上班的朋友们记得绕行";
const A2: &str = "今天早上地铁二号线又停运了上班的朋友们记得绕行啊";
const B: &str = "周末去西湖看荷花的人太多了根本挤不进去还是在家吧";

#[test]
fn keys_follow_the_partition_as_its_owner_computes_them() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let cfg = EngineConfig {
        index: crate::index::IndexConfig::default(),
        verify: VerifyConfig::default(),
        window: crate::window::WindowConfig::default(),
        empty_posts: crate::engine::EmptyPolicy::Pass,
        visibility: LIVE,
    };
    let mut engine = Engine::new(&cfg).unwrap();
    let mut la = ahead();
    la.start(3, 0, None);
    // Late and early event times, posts without one, live and backlog arrivals.
    let now = 1_700_000_000_i64;
    let posts = [
        (Some(now), now * 1000 + 5),
        (Some(now - 50), now * 1000 + 9),
        (None, now * 1000 + 3),
        (Some(now + 2), now * 1000 - 999_000),
        (Some(now + 2), now * 1000 + 2_500),
        (Some(now + 1), 1),
    ];
    for (offset, (time, input_ms)) in posts.into_iter().enumerate() {
        let text = if offset % 2 == 0 { A } else { B };
        let p = routed(&tok, &offset.to_string(), time, input_ms, text);
        let at = Position {
            partition: 3,
            seq: routed_seq(offset as u64, 0),
            arrival: p.input_ms,
        };
        let expected = engine.order_key(at, p.created_at);
        engine.decide(at, &p.id, p.created_at, &p.analyzed);
        la.read_posts(3, offset as u64, Some(vec![p]));
        let got = la.parts[&3].posts.back().unwrap().key;
        assert_eq!(got, expected, "post {offset}");
        let a = &la.parts[&3];
        assert_eq!(a.watermark, engine.watermarks().get(&3).copied());
        assert_eq!(a.arrival, engine.arrivals().get(&3).copied().unwrap_or(0));
    }
}

#[test]
fn a_check_resumed_where_the_last_one_stopped_agrees_with_a_full_one() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    la.start(1, 10, Some((90, 0)));
    let texts = [B, A, B, "明天下午三点开会请大家准时参加不要迟到", A, B];
    let queries = [A2, "明天下午三点开会请大家准时参加不要迟到啊"];
    let posts: Vec<RoutedPost> = queries
        .iter()
        .map(|t| routed(&tok, "q", None, 1, t))
        .collect();
    let mut cursors = [[None; 3]; 2];
    let keys = [key(97, 0, 50), key(101, 0, 50), key(200, 0, 50)];
    let agree = |la: &Lookahead, cursors: &mut [[Option<OrderKey>; 3]; 2]| {
        for (q, post) in posts.iter().enumerate() {
            let sketch = post.analyzed.sketch();
            let bits = Bits::of(&sketch);
            for (k, key) in keys.iter().enumerate() {
                let full = la.check(1, key, &sketch, &bits);
                let resumed = la.check_resuming(1, key, &sketch, &bits, &mut cursors[q][k]);
                assert_eq!(resumed, full, "query {q} at {key:?}");
            }
        }
    };
    for (i, text) in texts.iter().enumerate() {
        let t = 95 + 2 * i as i64;
        la.read_posts(
            1,
            10 + i as u64,
            Some(vec![routed(&tok, "p", Some(t), 1, text)]),
        );
        agree(&la, &mut cursors);
        if i == 3 {
            // The owner decided the first near copy (at 97).
            la.decided(1, Bound::Key(key(98, 1, 12)));
            agree(&la, &mut cursors);
        }
    }
    // Below the cursor nothing is compared again: one past the near copy at 103 clears.
    let sketch = posts[0].analyzed.sketch();
    let (at, bits) = (key(105, 0, 50), Bits::of(&sketch));
    assert_eq!(la.check(1, &at, &sketch, &bits), Check::MayMatch);
    let mut past = Some(key(104, 1, 0));
    assert_eq!(
        la.check_resuming(1, &at, &sketch, &bits, &mut past),
        Check::Clear
    );
}

#[test]
fn a_post_compares_at_most_max_screened_undecided_posts_then_waits() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    la.start(1, 0, Some((0, 0)));
    // MAX_SCREENED + 1 undecided posts, none of which can match the query, then one it does
    // not see.
    let n = MAX_SCREENED as u64 + 1;
    for i in 0..n {
        la.read_posts(
            1,
            i,
            Some(vec![routed(&tok, "b", Some(10 + i as i64), 1, B)]),
        );
    }
    la.read_posts(1, n, Some(vec![routed(&tok, "c", Some(10_000), 1, B)]));
    let q = routed(&tok, "q", None, 1, A);
    let query = q.analyzed.sketch();
    let bits = Bits::of(&query);
    let at = key(5_000, 0, 50);
    assert_eq!(la.check(1, &at, &query, &bits), Check::Far);
    // Those compared before are not counted again: from past the first one, it is clear.
    let mut checked = Some(key(11, 1, 0));
    assert_eq!(
        la.check_resuming(1, &at, &query, &bits, &mut checked),
        Check::Clear
    );
    // So it is once the owner has decided the first one.
    la.decided(1, Bound::Key(key(11, 1, 0)));
    assert_eq!(la.pending(1), MAX_SCREENED + 1);
    assert_eq!(la.check(1, &at, &query, &bits), Check::Clear);
}

#[test]
fn a_post_waits_for_unread_records_and_for_undecided_posts_that_may_match_it() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    // Nothing known of partition 1: never clear.
    let q = routed(&tok, "q", None, 1, A2);
    let query = q.analyzed.sketch();
    assert!(!la.clears(1, &key(100, 0, 50), &query));
    // Partition 1 followed from a marker at watermark 90.
    la.start(1, 10, Some((90, 0)));
    assert!(
        !la.clears(1, &key(100, 0, 50), &query),
        "its next record may come at 90"
    );
    assert!(
        la.clears(1, &key(90, 0, 50), &query),
        "lower partition first"
    );
    // Read: a different post at 95, then a near copy at 99.
    la.read_posts(1, 10, Some(vec![routed(&tok, "b", Some(95), 1, B)]));
    la.read_posts(1, 11, Some(vec![routed(&tok, "a", Some(99), 1, A)]));
    assert_eq!(la.pending(1), 2);
    assert!(
        !la.clears(1, &key(100, 0, 50), &query),
        "the frontier is at 99"
    );
    la.read_posts(1, 12, Some(vec![routed(&tok, "c", Some(120), 1, B)]));
    // At 97 the post sees only "b", which cannot match it.
    assert!(la.clears(1, &key(97, 0, 50), &query));
    // At 100 it also sees "a", a near copy still undecided.
    assert_eq!(
        la.check(1, &key(100, 0, 50), &query, &Bits::of(&query)),
        Check::MayMatch
    );
    assert_eq!(
        la.check(1, &key(121, 0, 50), &query, &Bits::of(&query)),
        Check::Unread
    );
    assert_eq!(
        la.check(5, &key(100, 0, 50), &query, &Bits::of(&query)),
        Check::NotFollowed
    );
    // Another text at 100 is clear of both.
    let other = routed(&tok, "o", None, 1, "明天下午三点开会请大家准时参加不要迟到");
    assert!(la.clears(1, &key(100, 0, 50), &other.analyzed.sketch()));
    // Once the owner's marker passes "a", its entry is in the index: no wait.
    la.decided(1, Bound::Key(key(120, 1, 12)));
    assert_eq!(la.pending(1), 1);
    assert!(la.clears(1, &key(100, 0, 50), &query));
    // A record that does not decode still moves the frontier.
    la.read_posts(1, 13, None);
    assert_eq!(la.followed().collect::<Vec<_>>(), vec![(1, 14)]);
    la.decided(1, Bound::Idle);
    assert_eq!(la.pending(1), 0);
    // A gap: what follows cannot be keyed, the partition is dropped.
    assert!(!la.read_posts(1, 16, None));
    assert_eq!(la.followed().count(), 0);
    la.start(1, 14, Some((120, 0)));
    la.stop(1);
    assert!(!la.clears(1, &key(100, 0, 50), &query));
}

#[test]
fn records_read_twice_count_once() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    la.start(2, 5, Some((10, 0)));
    la.read_posts(2, 4, Some(vec![routed(&tok, "old", Some(11), 1, A)]));
    assert_eq!(la.pending(2), 0);
    la.read_posts(
        2,
        5,
        Some(vec![
            routed(&tok, "x", Some(11), 1, A),
            routed(&tok, "y", Some(12), 1, ""),
        ]),
    );
    la.read_posts(2, 5, Some(vec![routed(&tok, "x", Some(11), 1, A)]));
    assert_eq!(la.pending(2), 1, "empty texts never match");
    assert_eq!(la.parts[&2].watermark, Some(12));
}

/// What a check of partition 1 finds by comparing `q` with every undecided post it sees there.
fn plain(la: &Lookahead, at: &OrderKey, q: &Sketch<'_>) -> Check {
    let a = &la.parts[&1];
    if at.sees(&a.frontier(1), &LIVE) {
        return Check::Unread;
    }
    let bits = Bits::of(q);
    let seen = a.posts.iter().chain(&a.exact);
    if seen
        .filter(|p| at.sees(&p.key, &LIVE))
        .any(|p| la.may_match(q, &bits, &p.gates, || p.post.sketch()))
    {
        Check::MayMatch
    } else {
        Check::Clear
    }
}

#[test]
fn a_check_through_the_screen_agrees_with_a_plain_scan_where_the_queue_wraps() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    la.start(1, 0, Some((0, 0)));
    const C: &str = "明天下午三点开会请大家准时参加不要迟到";
    let mut offset = 0u64;
    let mut read = |la: &mut Lookahead, texts: &[&str], n: u64| {
        for i in 0..n as usize {
            let text = texts[i % texts.len()];
            let p = routed(&tok, &offset.to_string(), Some(offset as i64), 1, text);
            la.read_posts(1, offset, Some(vec![p]));
            offset += 1;
        }
    };
    // 64 posts, the first 40 decided, then 30 more: the newest wrap to the queue's start, and the
    // screens' records lie in two slices. Copies of A come only in the second slice.
    read(&mut la, &[B, C], 64);
    la.decided(1, Bound::Key(key(40, 1, 0)));
    read(&mut la, &[A, B, C, A2], 30);
    let (head, tail) = la.parts[&1].screens.as_slices();
    assert!(
        !head.is_empty() && !tail.is_empty(),
        "{} and {}",
        head.len(),
        tail.len()
    );
    assert_eq!(head.len() + tail.len(), la.parts[&1].posts.len());
    for query in [
        A,
        A2,
        B,
        "明天下午三点开会请大家准时参加不要迟到啊",
        "周末一起去爬山吧天气预报说晴天",
    ] {
        let q = routed(&tok, "q", None, 1, query);
        let q = q.analyzed.sketch();
        for tau in 38..96 {
            let at = key(tau, 0, 50);
            let got = la.check(1, &at, &q, &Bits::of(&q));
            assert_eq!(got, plain(&la, &at, &q), "{query} at {tau}");
        }
    }
}

#[test]
fn short_posts_are_compared_by_their_text_and_agree_with_a_plain_scan() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    la.start(1, 0, Some((0, 0)));
    // Short texts (only an identical copy can match them) and long ones, read in turn.
    let texts = [
        "好消息",
        A,
        "转发微博",
        B,
        "好消息",
        A2,
        "哈哈哈",
        "转发微博",
    ];
    for (i, t) in texts.iter().enumerate() {
        let p = routed(&tok, &i.to_string(), Some(10 + i as i64), 1, t);
        la.read_posts(1, i as u64, Some(vec![p]));
    }
    assert_eq!(la.pending(1), texts.len());
    assert_eq!(la.parts[&1].exact.len(), 5, "the short ones");
    // A check agrees with comparing every undecided post the query sees.
    for forgotten in [0, 12, 15] {
        la.decided(1, Bound::Key(key(forgotten, 1, 0)));
        for query in ["好消息", "转发微博", "哈哈哈", "坏消息", A, A2, B] {
            let q = routed(&tok, "q", None, 1, query);
            let q = q.analyzed.sketch();
            for tau in 8..20 {
                let at = key(tau, 0, 50);
                let got = la.check(1, &at, &q, &Bits::of(&q));
                assert_eq!(got, plain(&la, &at, &q), "{query} at {tau}");
            }
        }
    }
    // A short post waits for an undecided copy of its text only: the copies of 好消息 (at 10
    // and 14) are forgotten by now, that of 转发微博 at 17 is not.
    la.read_posts(1, 8, Some(vec![routed(&tok, "8", Some(30), 1, B)]));
    let at = key(18, 0, 50);
    for (query, before) in [("转发微博", Check::MayMatch), ("好消息", Check::Clear)] {
        let q = routed(&tok, "q", None, 1, query);
        let q = q.analyzed.sketch();
        assert_eq!(la.check(1, &at, &q, &Bits::of(&q)), before, "{query}");
    }
    assert_eq!(la.parts[&1].by_hash.len(), 2, "forgotten hashes leave");
    la.decided(1, Bound::Key(key(18, 1, 0)));
    let q = routed(&tok, "q", None, 1, "转发微博");
    let q = q.analyzed.sketch();
    assert_eq!(la.check(1, &at, &q, &Bits::of(&q)), Check::Clear);
    assert!(la.parts[&1].by_hash.is_empty());
    la.decided(1, Bound::Idle);
    assert_eq!(la.pending(1), 0);
    // The same classes, pair by pair, for a worker's own buffered posts.
    let gates = |t: &str| gates_of(&routed(&tok, "g", None, 1, t).analyzed.sketch()).unwrap();
    let hash = |t: &str| gates(t).text_hash.unwrap();
    assert!(la.same_class(true, hash("好消息"), &gates("好消息")));
    assert!(!la.same_class(true, hash("好消息"), &gates("坏消息")));
    assert!(la.same_class(false, hash(A), &gates(B)));
    assert!(!la.same_class(false, hash(A), &gates("好消息")));
}

#[test]
fn without_a_screen_a_post_compares_at_most_max_scan_undecided_posts() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let verify = VerifyConfig {
        mode: VerifyMode::SimhashOnly,
        ..VerifyConfig::default()
    };
    let q = routed(&tok, "q", None, 1, A);
    let query = q.analyzed.sketch();
    let bits = Bits::of(&query);
    let at = key(5_000, 0, 50);
    // `n` undecided posts it sees, none of which can match it, then one it does not see.
    let check_past = |n: usize| {
        let mut la = Lookahead::new(LIVE, verify.clone(), 3);
        assert_eq!(la.scan_limit(), MAX_SCAN);
        assert!(la.screen(&query, &bits).is_none());
        la.start(1, 0, Some((0, 0)));
        for i in 0..n as u64 {
            let post = routed(&tok, "b", Some(10 + i as i64), 1, B);
            la.read_posts(1, i, Some(vec![post]));
        }
        let unseen = routed(&tok, "c", Some(10_000), 1, B);
        la.read_posts(1, n as u64, Some(vec![unseen]));
        la.check(1, &at, &query, &bits)
    };
    assert_eq!(check_past(MAX_SCAN), Check::Clear);
    assert_eq!(check_past(MAX_SCAN + 1), Check::Far);
    // With a screen (every other mode) the limit is MAX_SCREENED.
    assert_eq!(ahead().scan_limit(), MAX_SCREENED);
}

#[test]
fn with_simhash_only_no_post_is_compared_by_its_text_alone() {
    let verify = VerifyConfig {
        mode: VerifyMode::SimhashOnly,
        ..VerifyConfig::default()
    };
    assert!(!Lookahead::new(LIVE, verify, 3).exact_only(1, 0));
    assert!(ahead().exact_only(10, 7));
    assert!(!ahead().exact_only(11, 7));
}

#[test]
fn a_resolved_post_holds_nobody_back_and_is_found_by_its_key() {
    let tok = Tokenizer::new(Weighting::Tf, "");
    let mut la = ahead();
    let q = routed(&tok, "q", None, 1, A2);
    let query = q.analyzed.sketch();
    la.start(1, 10, Some((90, 0)));
    la.read_posts(1, 10, Some(vec![routed(&tok, "a", Some(99), 1, A)]));
    la.read_posts(1, 11, Some(vec![routed(&tok, "c", Some(120), 1, B)]));
    // The check names the post it may match by its key.
    let mut at = None;
    let bits = Bits::of(&query);
    let c = la.check_resuming(1, &key(100, 0, 50), &query, &bits, &mut at);
    assert_eq!(c, Check::MayMatch);
    let a = at.unwrap();
    assert_eq!(la.awaited(1, &a).map(|p| p.id.0.as_str()), Some("a"));
    assert!(
        la.awaited(1, &key(98, 1, 10)).is_none(),
        "no post has that key"
    );
    // Once its entry is in the index ahead of its owner, the post waits for it no more.
    la.resolve(1, &a);
    assert!(la.awaited(1, &a).is_none());
    assert!(la.clears(1, &key(100, 0, 50), &query));
    assert_eq!(
        la.pending(1),
        2,
        "still undecided as far as the markers tell"
    );
    // An index rebuilt from the changelog no longer holds that entry.
    la.forget_resolved();
    assert_eq!(
        la.check(1, &key(100, 0, 50), &query, &Bits::of(&query)),
        Check::MayMatch
    );
}
