//! Looking ahead into routed partitions other workers own, as plain logic. A dedup worker may
//! decide a post before another partition has decided everything the post sees, when it has
//! read that partition's routed records beyond the post's horizon and none of the posts still
//! undecided there could match it: then their verdicts cannot change this one, and waiting for
//! them (a progress-marker round trip per switch of owner) would buy nothing. Keys are computed
//! exactly as the partition's owner will compute them (`engine::next_order_key`), starting from
//! a progress marker's watermark and arrival. No Kafka here: the worker feeds records and
//! markers in and asks `clears`.

use std::collections::{BTreeMap, VecDeque};

use crate::engine::{next_order_key, Analyzed, Position};
use crate::index::{OrderKey, Visibility};
use crate::verify::{self, Bits, Gates, Sketch, VerifyConfig, VerifyMode};

use super::gate::{frontier, Bound};
use super::wire::{routed_seq, RoutedPost};

/// A check compares a post with at most this many undecided posts of one partition; past that
/// it waits for the owner to move on, as in the strict order. The comparisons a post makes grow
/// with how far its worker runs ahead of the owner, and spent on every head in turn they cost
/// more than the wait: a second worker's CPU per post halved, and two workers drained a backlog
/// 1.15x as fast (`scripts/bench-backlog.sh 2`, README *Measured results*).
pub(crate) const MAX_SCAN: usize = 512;

/// A post read ahead, not yet known to be decided.
struct Pending {
    key: OrderKey,
    gates: Gates,
    analyzed: Analyzed,
}

/// One partition followed ahead: where reading continues and the watermark and arrival there.
struct Ahead {
    next_offset: u64,
    watermark: Option<i64>,
    arrival: i64,
    posts: VecDeque<Pending>,
}

impl Ahead {
    /// Every post not read yet gets a key at least this.
    fn frontier(&self, partition: u32) -> OrderKey {
        frontier(partition, self.next_offset, self.watermark, self.arrival)
    }
}

/// What verification's gates need of a post, `None` for an empty text (it matches nothing).
pub(crate) fn gates_of(a: &Analyzed) -> Option<Gates> {
    if a.chars.is_empty() {
        return None;
    }
    let s = a.sketch();
    Some(Gates {
        chars: s.chars.len(),
        tokens: s.tokens.len(),
        fingerprint: s.fingerprint,
        text_hash: Some(s.text_hash as u32),
        bits: Bits::of(&s),
    })
}

/// What `Lookahead::check` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing there can change the post's verdict.
    Clear,
    /// The partition is not followed.
    NotFollowed,
    /// Records the post may see have not been read yet.
    Unread,
    /// An undecided post there may match it.
    MayMatch,
    /// It sees more undecided posts there than one check compares (`MAX_SCAN`).
    Far,
}

/// The partitions followed ahead and their undecided posts.
pub(crate) struct Lookahead {
    parts: BTreeMap<u32, Ahead>,
    visibility: Visibility,
    verify: VerifyConfig,
    /// With `verify.mode = simhash_only` any fingerprint within this distance matches.
    max_distance: u32,
}

impl Lookahead {
    pub(crate) fn new(visibility: Visibility, verify: VerifyConfig, max_distance: u32) -> Self {
        Lookahead {
            parts: BTreeMap::new(),
            visibility,
            verify,
            max_distance,
        }
    }

    /// Follows `partition` from `offset`, where its watermark and arrival are `mark` (none at
    /// the partition's start), forgetting what was read of it before.
    pub(crate) fn start(&mut self, partition: u32, offset: u64, mark: Option<(i64, i64)>) {
        self.parts.insert(
            partition,
            Ahead {
                next_offset: offset,
                watermark: mark.map(|m| m.0),
                arrival: mark.map_or(0, |m| m.1),
                posts: VecDeque::new(),
            },
        );
    }

    /// Stops following `partition`.
    pub(crate) fn stop(&mut self, partition: u32) {
        self.parts.remove(&partition);
    }

    /// The partitions followed, with the offset reading continues at.
    pub(crate) fn followed(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.parts.iter().map(|(p, a)| (*p, a.next_offset))
    }

    /// Posts of `partition` read and not known to be decided.
    pub(crate) fn pending(&self, partition: u32) -> usize {
        self.parts.get(&partition).map_or(0, |a| a.posts.len())
    }

    /// Reads the routed record at `offset` of `partition` (its posts, or `None` when it does not
    /// decode: its owner will reject it, which changes no watermark). A record before the
    /// reading point was read already. After a gap the keys of what follows are unknown (the
    /// watermark may have moved in between): the partition is no longer followed, and `false`
    /// says so.
    pub(crate) fn read(
        &mut self,
        partition: u32,
        offset: u64,
        posts: Option<Vec<RoutedPost>>,
    ) -> bool {
        let Some(a) = self.parts.get_mut(&partition) else {
            return true;
        };
        if offset < a.next_offset {
            return true;
        }
        if offset > a.next_offset {
            self.parts.remove(&partition);
            return false;
        }
        a.next_offset = offset + 1;
        for (index, post) in posts.into_iter().flatten().enumerate() {
            let at = Position {
                partition,
                seq: routed_seq(offset, index as u32),
                arrival: post.input_ms,
            };
            let key = next_order_key(
                a.watermark,
                a.arrival,
                at,
                post.created_at,
                &self.visibility,
            );
            a.watermark = Some(key.tau);
            if key.arrival != 0 {
                a.arrival = key.arrival;
            }
            let Some(gates) = gates_of(&post.analyzed) else {
                continue;
            };
            a.posts.push_back(Pending {
                key,
                gates,
                analyzed: post.analyzed,
            });
        }
        true
    }

    /// Forgets the posts of `partition` that its owner has decided: those below `bound`, what
    /// the owner's latest progress marker says (their index entries are applied by then).
    pub(crate) fn decided(&mut self, partition: u32, bound: Bound) {
        let Some(a) = self.parts.get_mut(&partition) else {
            return;
        };
        match bound {
            Bound::Idle => a.posts.clear(),
            Bound::Key(b) => {
                while a.posts.front().is_some_and(|p| p.key < b) {
                    a.posts.pop_front();
                }
            }
            Bound::Unknown => {}
        }
    }

    /// Whether a post with key `key` and sketch `post` (of another partition) may be decided
    /// without waiting for `partition` (`Check::Clear`): everything of `partition` it sees has
    /// been read, and no post read and not yet decided there that it sees could match it (at
    /// most `MAX_SCAN` of them compared: `Check::Far` past that).
    /// The undecided posts with keys below `*checked` were compared with it before and cannot
    /// match it; `*checked` moves past those found not to match this time. (A waiting post is
    /// checked again after every decision of another lane: without this, each check compared
    /// every undecided post again, a third of a worker's CPU with two workers.)
    pub(crate) fn check_resuming(
        &self,
        partition: u32,
        key: &OrderKey,
        post: &Sketch<'_>,
        bits: &Bits,
        checked: &mut Option<OrderKey>,
    ) -> Check {
        let Some(a) = self.parts.get(&partition) else {
            return Check::NotFollowed;
        };
        let v = &self.visibility;
        if key.sees(&a.frontier(partition), v) {
            return Check::Unread;
        }
        let from = checked.map_or(0, |k| a.posts.partition_point(|p| p.key < k));
        // The posts are in key order, and a key sees those of another partition up to a point.
        let to = a.posts.partition_point(|p| key.sees(&p.key, v));
        if to.saturating_sub(from) > MAX_SCAN {
            return Check::Far;
        }
        for p in a.posts.range(from..to.max(from)) {
            if self.may_match(post, bits, &p.gates, || p.analyzed.sketch()) {
                *checked = Some(p.key);
                return Check::MayMatch;
            }
        }
        // Every undecided post before the first one it does not see was compared (all of them
        // when it sees the last: what is read later comes after it).
        let unseen = a.posts.get(to).map(|p| p.key);
        *checked = unseen.or(a.posts.back().map(|p| p.key)).max(*checked);
        Check::Clear
    }

    /// Whether `post` (whose `Bits` are `bits`) may match another post (whose gates are
    /// `gates` and whose sketch `other` gives) by any rule of verification: the cheap gates
    /// first, then `verify` itself.
    pub(crate) fn may_match<'o>(
        &self,
        post: &Sketch<'_>,
        bits: &Bits,
        gates: &Gates,
        other: impl FnOnce() -> Sketch<'o>,
    ) -> bool {
        if self.verify.mode == VerifyMode::SimhashOnly {
            return post.fingerprint.hamming(gates.fingerprint) <= self.max_distance;
        }
        verify::may_accept(post, bits, gates, &self.verify)
            && verify::verify(post, &other(), &self.verify).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Analyzer, Engine, EngineConfig};
    use crate::text::tokenize::{Tokenizer, Weighting};
    use crate::types::{EventTime, PostId};

    const LIVE: Visibility = Visibility {
        tick_secs: 0,
        slack_ms: 250,
        live_lag_secs: 60,
    };

    fn routed(
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

    impl Lookahead {
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
            la.read(3, offset as u64, Some(vec![p]));
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
            la.read(
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
    fn a_post_compares_at_most_max_scan_undecided_posts_then_waits() {
        let tok = Tokenizer::new(Weighting::Tf, "");
        let mut la = ahead();
        la.start(1, 0, Some((0, 0)));
        // MAX_SCAN + 1 undecided posts, none of which can match the query, then one it does
        // not see.
        let n = MAX_SCAN as u64 + 1;
        for i in 0..n {
            la.read(
                1,
                i,
                Some(vec![routed(&tok, "b", Some(10 + i as i64), 1, B)]),
            );
        }
        la.read(1, n, Some(vec![routed(&tok, "c", Some(10_000), 1, B)]));
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
        assert_eq!(la.pending(1), MAX_SCAN + 1);
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
        la.read(1, 10, Some(vec![routed(&tok, "b", Some(95), 1, B)]));
        la.read(1, 11, Some(vec![routed(&tok, "a", Some(99), 1, A)]));
        assert_eq!(la.pending(1), 2);
        assert!(
            !la.clears(1, &key(100, 0, 50), &query),
            "the frontier is at 99"
        );
        la.read(1, 12, Some(vec![routed(&tok, "c", Some(120), 1, B)]));
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
        la.read(1, 13, None);
        assert_eq!(la.followed().collect::<Vec<_>>(), vec![(1, 14)]);
        la.decided(1, Bound::Idle);
        assert_eq!(la.pending(1), 0);
        // A gap: what follows cannot be keyed, the partition is dropped.
        assert!(!la.read(1, 16, None));
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
        la.read(2, 4, Some(vec![routed(&tok, "old", Some(11), 1, A)]));
        assert_eq!(la.pending(2), 0);
        la.read(
            2,
            5,
            Some(vec![
                routed(&tok, "x", Some(11), 1, A),
                routed(&tok, "y", Some(12), 1, ""),
            ]),
        );
        la.read(2, 5, Some(vec![routed(&tok, "x", Some(11), 1, A)]));
        assert_eq!(la.pending(2), 1, "empty texts never match");
        assert_eq!(la.parts[&2].watermark, Some(12));
    }
}
