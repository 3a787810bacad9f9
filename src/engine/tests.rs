//! Unit tests of the per-post decision: verdicts, empty-post policy, window and index changes.

use super::*;
use crate::text::tokenize::Tokenizer;

fn cfg() -> EngineConfig {
    EngineConfig {
        index: IndexConfig::default(),
        verify: VerifyConfig::default(),
        window: WindowConfig {
            window_secs: 1000,
            generation_secs: 100,
            max_future_secs: 0,
            max_watermark_step_secs: 0,
        },
        empty_posts: EmptyPolicy::Pass,
        visibility: Default::default(),
    }
}

fn post(tok: &Tokenizer, text: &str) -> Analyzed {
    let mut a = Analyzed::default();
    Analyzer::new(tok).analyze(text, &mut a);
    a
}

fn id(s: &str) -> PostId {
    PostId(s.to_string())
}

fn at(partition: u32, seq: u64) -> Position {
    Position::new(partition, seq)
}

const TEXT: &str = "今天早上地铁二号线又停运了上班的朋友们记得绕行";

#[test]
fn exact_copy_joins_the_first_posts_cluster_and_own_id_never_matches() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut e = Engine::new(&cfg()).unwrap();
    let a = post(&tok, TEXT);
    assert_eq!(
        e.decide(at(0, 1), &id("a"), Some(EventTime(10)), &a),
        Verdict::Unique {
            empty: false,
            late: false
        }
    );
    match e.decide(at(0, 2), &id("b"), Some(EventTime(20)), &a) {
        Verdict::Duplicate(d) => assert_eq!(d.cluster, id("a")),
        other => panic!("expected duplicate, got {other:?}"),
    }
    // Re-deciding "a" (a replay) finds only itself: unique again.
    assert!(matches!(
        e.decide(at(0, 1), &id("a"), Some(EventTime(10)), &a),
        Verdict::Unique { .. }
    ));
}

#[test]
fn a_partition_resumed_behind_expired_entries_is_detected_and_a_rebuild_restores_them() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut e = Engine::new(&cfg()).unwrap();
    let a = post(&tok, TEXT);
    e.decide(at(0, 1), &id("a"), Some(EventTime(10)), &a);
    let log = e.take_changes();
    assert!(!e.lacks_generations_for(10), "nothing dropped yet");
    // The partition runs ahead past the window (1000 s): generation 0 expires.
    e.decide(
        at(0, 2),
        &id("far"),
        Some(EventTime(2000)),
        &post(&tok, "完全不同的另一条"),
    );
    assert!(
        e.lacks_generations_for(500),
        "a resume at 500 needs generation 0"
    );
    assert!(!e.lacks_generations_for(2000));
    // Taken over at an earlier committed offset: without a rebuild the copy is missed.
    e.set_watermark(0, Some((500, 0)));
    assert!(matches!(
        e.decide(at(0, 2), &id("b"), Some(EventTime(500)), &a),
        Verdict::Unique { .. }
    ));
    e.clear_index();
    assert!(!e.lacks_generations_for(500));
    for (gen, entry) in log {
        assert!(e.apply(gen, entry));
    }
    match e.decide(at(0, 2), &id("b"), Some(EventTime(500)), &a) {
        Verdict::Duplicate(d) => assert_eq!(d.cluster, id("a")),
        other => panic!("expected duplicate after the rebuild, got {other:?}"),
    }
}

#[test]
fn a_held_window_survives_a_rebuild_and_other_partitions_running_ahead() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let a = post(&tok, TEXT);
    let mut first = Engine::new(&cfg()).unwrap();
    first.decide(at(0, 1), &id("a"), Some(EventTime(10)), &a);
    let log = first.take_changes();
    // A worker owns partition 1, far ahead (2000), and starts partition 0 from its first record
    // (no watermark yet; its head is at 500, whose window reaches back to generation 0).
    let mut e = Engine::new(&cfg()).unwrap();
    e.set_watermark(1, Some((2000, 0)));
    e.set_watermark(0, None);
    let rebuild = |e: &mut Engine| {
        e.clear_index();
        log.iter()
            .filter(|(gen, entry)| e.apply(*gen, entry.clone()))
            .count()
    };
    assert_eq!(
        rebuild(&mut e),
        0,
        "without a hold, partition 1's window drops it"
    );
    e.hold_window_of(Some(500));
    assert_eq!(rebuild(&mut e), 1, "held for partition 0's head");
    // Partition 1 decides on meanwhile: nothing partition 0's head needs expires.
    e.decide(
        at(1, 9),
        &id("x"),
        Some(EventTime(2001)),
        &post(&tok, "完全不同的另一条"),
    );
    match e.decide(at(0, 2), &id("b"), Some(EventTime(500)), &a) {
        Verdict::Duplicate(d) => assert_eq!(d.cluster, id("a")),
        other => panic!("expected duplicate, got {other:?}"),
    }
    // Partition 0 now has its own horizon: the hold is lifted and expiry goes on.
    e.hold_window_of(None);
    assert_eq!(
        e.min_live_generation(),
        Some(e.window().min_live_generation(500))
    );
}

#[test]
fn entries_ordered_after_the_post_are_invisible_to_it() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut e = Engine::new(&cfg()).unwrap();
    let a = post(&tok, TEXT);
    // Partition 1 already decided a post at watermark 500; partition 0 is at 150.
    let mut other = Engine::new(&cfg()).unwrap();
    other.decide(at(1, 7), &id("later"), Some(EventTime(500)), &a);
    let (gen, entry) = other.take_changes().remove(0);
    assert!(e.apply(gen, entry.clone()));
    assert!(!e.apply(gen, entry), "a replicated entry is applied once");
    assert!(matches!(
        e.decide(at(0, 1), &id("early"), Some(EventTime(150)), &a),
        Verdict::Unique { .. }
    ));
    // A post of partition 0 ordered after it does see it.
    assert!(matches!(
        e.decide(at(0, 2), &id("after"), Some(EventTime(600)), &a),
        Verdict::Duplicate(_)
    ));
}

#[test]
fn window_expires_by_event_time() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut e = Engine::new(&cfg()).unwrap();
    let a = post(&tok, TEXT);
    e.decide(at(0, 1), &id("a"), Some(EventTime(0)), &a);
    // 1000 s window, 100 s generations: at t = 1200 generation 0 has expired.
    assert!(matches!(
        e.decide(at(0, 2), &id("b"), Some(EventTime(1200)), &a),
        Verdict::Unique { .. }
    ));
    assert_eq!(
        e.index().generations().map(|(g, _)| g).collect::<Vec<_>>(),
        vec![12]
    );
}

#[test]
fn empty_posts_follow_the_policy() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let a = post(&tok, "//@某人: 转发");
    let mut pass = Engine::new(&cfg()).unwrap();
    assert_eq!(
        pass.decide(at(0, 1), &id("x"), None, &a),
        Verdict::Unique {
            empty: true,
            late: false
        }
    );
    let mut reject = Engine::new(&EngineConfig {
        empty_posts: EmptyPolicy::Reject,
        ..cfg()
    })
    .unwrap();
    assert!(
        matches!(reject.decide(at(0, 1), &id("x"), None, &a), Verdict::Rejected(r) if r.reason == RejectReason::Empty)
    );
}

#[test]
fn only_a_live_posts_arrival_orders_it_and_the_arrival_never_falls() {
    let mut c = cfg();
    c.visibility.live_lag_secs = 60;
    let e = Engine::new(&c).unwrap();
    let arriving = |ms| Position {
        arrival: Some(ms),
        ..at(3, 1)
    };
    let t = Some(EventTime(1_000));
    assert_eq!(e.order_key(arriving(1_000_400), t).arrival, 1_000_400);
    // Read a day after its event time: a backlog, ordered by partition within the second.
    assert_eq!(e.order_key(arriving(87_400_000), t).arrival, 0);
    let mut e = Engine::new(&c).unwrap();
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    e.decide(arriving(1_000_400), &id("a"), t, &post(&tok, TEXT));
    assert_eq!(e.arrivals().get(&3), Some(&1_000_400));
    // A later backlog post of the partition keeps the largest arrival: keys only grow.
    assert_eq!(e.order_key(arriving(87_400_000), t).arrival, 1_000_400);
    assert_eq!(e.order_key(at(3, 2), t).arrival, 1_000_400);
}

#[test]
fn one_analyzer_gives_each_text_what_a_fresh_one_does_repeats_included() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::TfidfLen, "的\n了");
    let texts = [
        TEXT,
        "转发微博",
        TEXT,
        "//@甲: 今天早上地铁二号线又停运了上班的朋友们记得绕行",
        "",
        "哈哈哈哈[哈哈]",
        TEXT,
        "今天早上地铁二号线又停运了",
        "哈哈哈哈",
        "今天早上地铁二号线又停运了",
        "今天早上地铁二号线又停运了",
        "转发微博",
    ];
    let mut one = Analyzer::new(&tok);
    let mut a = Analyzed::default();
    for t in texts.iter().cycle().take(3 * texts.len()) {
        one.analyze(t, &mut a);
        let fresh = post(&tok, t);
        assert_eq!(a.normalized, fresh.normalized);
        assert_eq!(a.tokens, fresh.tokens, "{t}");
        assert_eq!(a.token_set, fresh.token_set);
        assert_eq!(a.fingerprint(), fresh.fingerprint());
        assert_eq!(a.grams, fresh.grams);
        assert_eq!(a.text_hash, fresh.text_hash);
    }
}

/// The cluster a duplicate names when it matches two: generation 1 holds a copy of each,
/// made by the first post of the generation that matched it (`Engine::refresh`).
fn cluster_of(v: &Verdict) -> &str {
    match v {
        Verdict::Duplicate(d) => &d.cluster.0,
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

#[test]
fn a_copy_made_by_a_later_post_does_not_change_what_earlier_posts_copy_or_a_rerun_finds() {
    // Two clusters of generation 0; in generation 1, `a` (partition 1) matches the first, `b`
    // (partition 1) the second, and `p` (partition 3, after both in the global order) both,
    // the second better. A dedup worker can decide `p` before partition 1's posts when that
    // partition looked idle; the copy `p` made must not keep `b` from making its own, or a
    // rerun of `p` would find only the first cluster's copy in generation 1.
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let s16 = post(
        &tok,
        "#周末读书# 最近在读一本讲城市规划历史的书，推荐给大家 第0轮",
    );
    let s17 = post(
        &tok,
        "最近在读一本讲城市规划历史的书，推荐给大家 #周末读书#",
    );
    let a16 = post(
        &tok,
        "#周末读书# 最近在读一本讲城市规划历史的书，推荐给大家 第47轮",
    );
    let p18 = post(
        &tok,
        "#周末读书# 最近在读一本讲城市规划历史的书，推荐给大家看看",
    );
    let seed = |e: &mut Engine| {
        assert!(matches!(
            e.decide(at(1, 1), &id("r16"), Some(EventTime(10)), &s16),
            Verdict::Unique { .. }
        ));
        assert!(matches!(
            e.decide(at(1, 2), &id("r17"), Some(EventTime(11)), &s17),
            Verdict::Unique { .. }
        ));
    };
    let (a, b, p) = (
        |e: &mut Engine| e.decide(at(1, 3), &id("a"), Some(EventTime(110)), &a16),
        |e: &mut Engine| e.decide(at(1, 4), &id("b"), Some(EventTime(111)), &s17),
        |e: &mut Engine| e.decide(at(3, 1), &id("p"), Some(EventTime(112)), &p18),
    );
    let mut in_order = Engine::new(&cfg()).unwrap();
    seed(&mut in_order);
    assert_eq!(cluster_of(&a(&mut in_order)), "r16");
    assert_eq!(cluster_of(&b(&mut in_order)), "r17");
    let want = p(&mut in_order);
    assert_eq!(cluster_of(&want), "r17");

    let mut ahead = Engine::new(&cfg()).unwrap();
    seed(&mut ahead);
    assert_eq!(p(&mut ahead), want, "generation 0 holds both clusters");
    assert_eq!(cluster_of(&a(&mut ahead)), "r16");
    assert_eq!(cluster_of(&b(&mut ahead)), "r17");
    assert_eq!(p(&mut ahead), want, "a rerun repeats the verdict");
    // A post after all of them finds both copies of generation 1, as in order.
    let after = |e: &mut Engine| e.decide(at(3, 2), &id("q"), Some(EventTime(113)), &p18);
    assert_eq!(after(&mut ahead), after(&mut in_order));
}

#[test]
fn plans_made_ahead_give_the_keys_and_states_deciding_in_order_gives() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut c = cfg();
    // The outlier guard keeps state between posts: a jump waits for the next timed post.
    c.window.max_watermark_step_secs = 50;
    c.visibility = Visibility {
        tick_secs: 0,
        slack_ms: 250,
        live_lag_secs: 60,
    };
    let mut e = Engine::new(&c).unwrap();
    let now = 1_700_000_000_i64;
    // (event time, arrival): late, early, none, outliers confirmed and not, live and backlog.
    let posts = [
        (Some(now), Some(now * 1000 + 5)),
        (Some(now - 50), Some(now * 1000 + 9)),
        (None, None),
        (Some(now + 400), Some(now * 1000 + 20)),
        (Some(now + 3), Some(now * 1000 + 2_500)),
        (Some(now + 410), None),
        (Some(now + 420), Some((now + 420) * 1000)),
        (None, Some(1)),
    ];
    let mut lane = e.lane(7);
    let plans: Vec<Plan> = posts
        .iter()
        .enumerate()
        .map(|(i, (t, arrival))| {
            let at = Position {
                partition: 7,
                seq: i as u64,
                arrival: *arrival,
            };
            let plan = e.plan(&lane, at, t.map(EventTime));
            lane = plan.after;
            plan
        })
        .collect();
    for (i, ((t, arrival), plan)) in posts.iter().zip(&plans).enumerate() {
        let at = Position {
            partition: 7,
            seq: i as u64,
            arrival: *arrival,
        };
        assert_eq!(e.order_key(at, t.map(EventTime)), plan.key, "post {i}");
        e.decide(at, &id(&i.to_string()), t.map(EventTime), &post(&tok, TEXT));
        assert_eq!(e.lane(7), plan.after, "post {i}");
    }
    assert_eq!(e.window_marks()[&7], plans[7].mark);
}

#[test]
fn a_post_decided_ahead_stores_what_its_owners_decision_will() {
    let tok = Tokenizer::new(crate::text::tokenize::Weighting::Tf, "");
    let mut e = Engine::new(&cfg()).unwrap();
    let mut owner = Engine::new(&cfg()).unwrap();
    let a = post(&tok, TEXT);
    let near = post(&tok, "今天早上地铁二号线又停运了上班的朋友们要记得绕行");
    let other = post(&tok, "新开的那家面馆味道一般价格倒是挺实惠的下次还会去吗");
    let key = |e: &Engine, p, seq, t| e.order_key(at(p, seq), Some(EventTime(t)));
    let ahead = |e: &mut Engine, k: &OrderKey, who: &str, t: Option<i64>, p: &Analyzed| {
        e.decide_ahead(k, (&id(who), t.map(EventTime)), p.sketch(), &p.grams)
    };
    // Nothing indexed: "a" of partition 1 will be unique; its entry is added as its owner's
    // decision will store it, and the changelog's copy of it is recognized.
    let ka = key(&e, 1, 1, 150);
    let Some(Ahead::Unique(gen, entry)) = ahead(&mut e, &ka, "a", Some(150), &a) else {
        panic!("a is unique ahead");
    };
    assert_eq!((gen, entry.key, entry.time), (1, ka, EventTime(150)));
    assert_eq!(e.index().len(), 1);
    assert!(matches!(
        owner.decide(at(1, 1), &id("a"), Some(EventTime(150)), &a),
        Verdict::Unique { .. }
    ));
    assert_eq!(owner.take_changes(), vec![(gen, entry)]);
    assert!(
        !e.admits(gen, &ka, a.text_hash),
        "the changelog's copy is recognized"
    );
    // A near copy of its generation is a duplicate that stores nothing, here and at its owner.
    let kb = key(&e, 0, 1, 160);
    assert_eq!(
        ahead(&mut e, &kb, "b", Some(160), &near),
        Some(Ahead::Duplicate)
    );
    assert_eq!(e.index().len(), 1);
    match owner.decide(at(0, 1), &id("b"), Some(EventTime(160)), &near) {
        Verdict::Duplicate(d) => assert_eq!(d.cluster, id("a")),
        other => panic!("expected a duplicate of a, got {other:?}"),
    }
    assert!(owner.take_changes().is_empty());
    // One a generation later would copy "a" into its own, unless a copy it does not see yet
    // spares it: not certain. Its owner's decision makes the copy; the next post of that
    // generation finds it and stores nothing.
    let kc = key(&e, 2, 1, 260);
    assert_eq!(ahead(&mut e, &kc, "c", Some(260), &near), None);
    owner.decide(at(2, 1), &id("c"), Some(EventTime(260)), &near);
    let changes = owner.take_changes();
    assert_eq!(changes.len(), 1);
    for (gen, entry) in changes {
        assert!(e.apply(gen, entry));
    }
    let kd = key(&e, 2, 2, 270);
    assert_eq!(
        ahead(&mut e, &kd, "d", Some(270), &a),
        Some(Ahead::Duplicate)
    );
    assert_eq!(e.index().len(), 2);
    // Another text is unique ahead; without an event time, not.
    let (ko, kx, ky) = (key(&e, 3, 1, 270), key(&e, 3, 2, 270), key(&e, 4, 1, 280));
    assert!(matches!(
        ahead(&mut e, &ko, "o", Some(270), &other),
        Some(Ahead::Unique(..))
    ));
    assert!(ahead(&mut e, &kx, "x", None, &other).is_none());
    // A rerun of "a" matches nothing (a post never matches its own id) but stores nothing
    // either (its entry is there): not a unique post, and not certain.
    assert!(ahead(&mut e, &ky, "a", Some(150), &a).is_none());
}
