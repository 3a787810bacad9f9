//! The ordering gate of the dedup stage, as plain logic: which routed post comes next in the
//! global order `(partition watermark, partition, offset and place in the envelope)`, and
//! whether every other partition is known to have decided everything that post can see
//! (`OrderKey::sees`). What is known about a partition is a `Bound`: from the progress markers
//! other workers publish on the changelog (`Progress`), or from local state for a partition this
//! worker owns (`local_bound`). No Kafka here: the worker loop feeds it and obeys it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{Engine, Position};
use crate::index::{OrderKey, Visibility};
use crate::types::EventTime;

use super::wire::routed_seq;

/// Markers remembered per partition (offset -> watermark), newest kept: a worker taking a
/// partition over resumes at a committed offset, which is right after a recent marker.
pub(crate) const MARKER_HISTORY: usize = 4096;

/// What is known about where a partition's next undecided record lies in the global order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Bound {
    /// Every record still to come has a larger key.
    Key(OrderKey),
    /// The partition is idle: it holds nobody back.
    Idle,
    /// Nothing known yet.
    Unknown,
}

impl Bound {
    /// Whether a post with key `k` (of another partition) can be decided: no record still to
    /// come on this partition is one `k` would see (`OrderKey::sees`).
    pub(crate) fn allows(self, k: &OrderKey, v: &Visibility) -> bool {
        match self {
            Bound::Key(b) if v.tick_secs > 0 => b.tick(v.tick_secs) >= k.tick(v.tick_secs),
            Bound::Key(b) => b > k.horizon(v),
            Bound::Idle => true,
            Bound::Unknown => false,
        }
    }
}

/// The last record a partition's owner decided: its offset, and the partition watermark and
/// arrival after it.
pub(crate) type Last = Option<(u64, i64, i64)>;

/// What the changelog's progress markers say about the partitions this worker does not own.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Progress {
    latest: BTreeMap<u32, (Bound, Last)>,
    history: BTreeMap<u32, BTreeMap<u64, (i64, i64)>>,
}

impl Progress {
    /// Records a marker of `partition` (`idle`, else bounded by `lower_bound`).
    pub(crate) fn note(&mut self, partition: u32, lower_bound: OrderKey, idle: bool, last: Last) {
        let bound = if idle {
            Bound::Idle
        } else {
            Bound::Key(lower_bound)
        };
        self.latest.insert(partition, (bound, last));
        if let Some((offset, tau, arrival)) = last {
            let h = self.history.entry(partition).or_default();
            h.insert(offset, (tau, arrival));
            while h.len() > MARKER_HISTORY {
                h.pop_first();
            }
        }
    }

    /// What a worker resuming `partition` at the committed offset `start` takes over from its
    /// previous owner: the last decided record, if a marker placed it right before `start`, and
    /// whether the latest marker declared the partition idle there (an idle marker without a
    /// record comes from an owner that decided nothing since it resumed at that same offset).
    /// Such a partition had been idle before the handover (or restart), and if nothing arrived
    /// since, it still is: it need not wait out `idle_after_ms` again.
    pub(crate) fn resume(&self, partition: u32, start: Option<i64>) -> (Last, bool) {
        let Some(at) = start.and_then(|s| u64::try_from(s).ok()) else {
            return (None, false);
        };
        let last = self
            .before(partition, at)
            .filter(|(o, _)| o + 1 == at)
            .map(|(o, (tau, arrival))| (o, tau, arrival));
        let idle = last.is_some()
            && self
                .latest
                .get(&partition)
                .is_some_and(|(b, l)| *b == Bound::Idle && (l.is_none() || *l == last));
        (last, idle)
    }

    /// The bound the latest marker of `partition` published.
    pub(crate) fn bound(&self, partition: u32) -> Bound {
        self.latest
            .get(&partition)
            .map_or(Bound::Unknown, |(b, _)| *b)
    }

    /// The bound of `partition` while idle partitions must hold others back (`merge::Wake`):
    /// an idle one is bounded by the record after its last decided one, with that record's
    /// watermark and arrival (they never fall), or unknown when its marker names no record.
    pub(crate) fn bound_held(&self, partition: u32) -> Bound {
        match self.latest.get(&partition) {
            Some((Bound::Idle, Some((offset, tau, arrival)))) => {
                Bound::Key(frontier(partition, offset + 1, Some(*tau), *arrival))
            }
            Some((Bound::Idle, None)) => Bound::Unknown,
            _ => self.bound(partition),
        }
    }

    /// The newest marker before `offset`: (its record's offset, the watermark and arrival after
    /// it). A worker resuming `partition` at `offset` starts from them.
    pub(crate) fn before(&self, partition: u32, offset: u64) -> Option<(u64, (i64, i64))> {
        self.history
            .get(&partition)
            .and_then(|h| h.range(..offset).next_back())
            .map(|(o, t)| (*o, *t))
    }
}

/// The bound of a partition this worker owns. `head`: the order key of its first buffered post
/// (if started); `quiet`: nothing arrived for `idle_after_ms`, nothing is left to fetch and the
/// upstream route stage (if in this process) is routing; `watermark`: the partition's watermark;
/// `next_offset`: the offset of the next record to decide.
pub(crate) fn local_bound(
    partition: u32,
    head: Option<OrderKey>,
    quiet: bool,
    started: bool,
    (watermark, arrival): (Option<i64>, i64),
    next_offset: u64,
) -> Bound {
    if let Some(k) = head {
        return Bound::Key(k);
    }
    if quiet {
        return Bound::Idle;
    }
    if !started {
        return Bound::Unknown;
    }
    // Watermarks and arrivals never fall, so the next record's key is at least this.
    Bound::Key(frontier(partition, next_offset, watermark, arrival))
}

/// The key below which every post of a partition not yet seen lies no lower: at `next_offset`,
/// with the partition's watermark (none before its first post) and arrival (watermarks and
/// arrivals never fall).
pub(crate) fn frontier(
    partition: u32,
    next_offset: u64,
    watermark: Option<i64>,
    arrival: i64,
) -> OrderKey {
    OrderKey {
        tau: watermark.unwrap_or(i64::MIN),
        arrival: if watermark.is_some() {
            arrival
        } else {
            i64::MIN
        },
        partition,
        seq: routed_seq(next_offset, 0),
    }
}

/// Which partition holds back the post of `partition` with key `key`, if any: the first other
/// of the `partitions` that neither allows it nor `clears` it (nothing undecided there can
/// change its verdict, `lookahead`; asked only of partitions whose bound does not allow it).
/// `None`: it may be decided now.
pub(crate) fn held_back_by(
    key: &OrderKey,
    partition: u32,
    partitions: u32,
    v: &Visibility,
    bound: impl Fn(u32) -> Bound,
    mut clears: impl FnMut(u32) -> bool,
) -> Option<u32> {
    (0..partitions)
        .filter(|q| *q != partition)
        .find(|q| !(bound(*q).allows(key, v) || clears(*q)))
}

/// The partition whose head comes first in the global order, with its order key (as
/// `Engine::decide` will compute it). `heads`: per partition, its head's sequence number within
/// the partition and event time.
pub(crate) fn next_in_order(
    engine: &Engine,
    heads: impl IntoIterator<Item = (u32, u64, Option<EventTime>, Option<i64>)>,
) -> Option<(u32, OrderKey)> {
    heads
        .into_iter()
        .map(|(partition, seq, time, arrival)| {
            let at = Position {
                partition,
                seq,
                arrival,
            };
            let key = engine.order_key(at, time);
            (key, partition)
        })
        .min()
        .map(|(key, p)| (p, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Visibility = Visibility {
        tick_secs: 0,
        slack_ms: 0,
        live_lag_secs: 0,
    };
    const TICK10: Visibility = Visibility {
        tick_secs: 10,
        slack_ms: 0,
        live_lag_secs: 0,
    };

    fn key(tau: i64, partition: u32, seq: u64) -> OrderKey {
        OrderKey {
            tau,
            arrival: 0,
            partition,
            seq,
        }
    }

    #[test]
    fn a_partition_resumed_right_after_its_idle_marker_is_taken_over_idle() {
        let mut p = Progress::default();
        assert_eq!(p.resume(3, Some(8)), (None, false));
        p.note(3, key(5, 3, 7), false, Some((7, 5, 0)));
        assert_eq!(p.resume(3, Some(8)), (Some((7, 5, 0)), false));
        p.note(3, OrderKey::default(), true, Some((7, 5, 0)));
        assert_eq!(p.resume(3, Some(8)), (Some((7, 5, 0)), true));
        // Resumed elsewhere (records after the marker, or a replay from the start), or with
        // nothing committed: nothing is taken over.
        assert_eq!(p.resume(3, Some(9)), (None, false));
        assert_eq!(p.resume(3, Some(0)), (None, false));
        assert_eq!(p.resume(3, None), (None, false));
        assert_eq!(p.resume(4, Some(8)), (None, false));
        // An idle marker without a decided record says nothing about where it stood...
        p.note(4, OrderKey::default(), true, None);
        assert_eq!(p.resume(4, Some(0)), (None, false));
        // ...but after one that did, it comes from an owner that decided nothing since.
        p.note(3, OrderKey::default(), true, None);
        assert_eq!(p.resume(3, Some(8)), (Some((7, 5, 0)), true));
        assert_eq!(p.resume(3, Some(9)), (None, false));
        // Busy again: not idle, though the last record is still known.
        p.note(3, key(6, 3, 8), false, None);
        assert_eq!(p.resume(3, Some(8)), (Some((7, 5, 0)), false));
    }

    #[test]
    fn a_held_idle_partition_bounds_others_by_its_next_record() {
        let mut p = Progress::default();
        assert_eq!(p.bound_held(2), Bound::Unknown);
        p.note(2, key(5, 2, 7), false, Some((7, 5, 0)));
        assert_eq!(
            p.bound_held(2),
            Bound::Key(key(5, 2, 7)),
            "busy: as published"
        );
        p.note(2, OrderKey::default(), true, Some((9, 40, 0)));
        assert_eq!(p.bound(2), Bound::Idle);
        let held = p.bound_held(2);
        assert_eq!(held, Bound::Key(frontier(2, 10, Some(40), 0)));
        // A post of another partition before the idle one's watermark may go; a later one
        // waits as if the idle partition's next record were on its way.
        assert!(held.allows(&key(39, 5, 0), &STRICT));
        assert!(!held.allows(&key(41, 0, 0), &STRICT));
        // An idle marker that names no record says nothing about where the partition stands.
        p.note(6, OrderKey::default(), true, None);
        assert_eq!(p.bound_held(6), Bound::Unknown);
    }

    #[test]
    fn a_key_bound_allows_only_smaller_keys() {
        let b = Bound::Key(key(100, 1, 5));
        assert!(b.allows(&key(99, 2, 9), &STRICT));
        assert!(
            b.allows(&key(100, 0, 9), &STRICT),
            "same time, lower partition first"
        );
        assert!(
            !b.allows(&key(100, 2, 0), &STRICT),
            "same time, higher partition waits"
        );
        assert!(!b.allows(&key(101, 0, 0), &STRICT));
    }

    #[test]
    fn within_an_event_second_arrival_comes_before_the_partition() {
        let at = |arrival, partition| OrderKey {
            tau: 100,
            arrival,
            partition,
            seq: 0,
        };
        // Partition 0 has seen a record that arrived after the post of partition 5: the post
        // goes without waiting for the next event second.
        let b = local_bound(0, None, false, true, (Some(100), 100_020), 9);
        assert!(b.allows(&at(100_010, 5), &STRICT));
        assert!(
            !b.allows(&at(100_030, 5), &STRICT),
            "it may still get one before"
        );
        // With a live slack of 250 ms, a live post waits only for what arrived 250 ms before it.
        let live = Visibility {
            slack_ms: 250,
            live_lag_secs: 60,
            ..STRICT
        };
        assert!(b.allows(&at(100_260, 5), &live));
        assert!(!b.allows(&at(100_280, 5), &live));
    }

    #[test]
    fn idle_allows_everything_and_unknown_nothing() {
        let k = key(i64::MAX, u32::MAX, u64::MAX);
        assert!(Bound::Idle.allows(&k, &STRICT));
        assert!(!Bound::Unknown.allows(&key(i64::MIN, 0, 0), &STRICT));
    }

    #[test]
    fn with_ticks_a_bound_allows_its_own_tick() {
        // Within one tick posts of different partitions do not see each other.
        let b = Bound::Key(key(100, 3, 0));
        assert!(b.allows(&key(109, 0, 0), &TICK10), "same tick, later time");
        assert!(!b.allows(&key(110, 0, 0), &TICK10), "a later tick waits");
        assert!(
            b.allows(&key(100, 5, 7), &TICK10),
            "same tick, any partition"
        );
    }

    #[test]
    fn local_bound_prefers_the_head_then_idleness() {
        let head = key(50, 2, 7);
        assert_eq!(
            local_bound(2, Some(head), true, true, (None, 0), 0),
            Bound::Key(head)
        );
        assert_eq!(local_bound(2, None, true, false, (None, 0), 0), Bound::Idle);
        assert_eq!(
            local_bound(2, None, false, false, (None, 0), 0),
            Bound::Unknown
        );
        assert_eq!(
            local_bound(2, None, false, true, (Some(40), 0), 3),
            Bound::Key(key(40, 2, routed_seq(3, 0)))
        );
    }

    #[test]
    fn takeover_resumes_from_the_marker_before_the_offset() {
        let mut p = Progress::default();
        assert_eq!(p.bound(4), Bound::Unknown);
        p.note(4, key(10, 4, 0), false, Some((9, 10, 10_500)));
        p.note(4, key(20, 4, 0), false, Some((19, 20, 20_500)));
        assert_eq!(p.before(4, 20), Some((19, (20, 20_500))));
        assert_eq!(p.before(4, 15), Some((9, (10, 10_500))));
        assert_eq!(p.before(4, 9), None);
        assert_eq!(p.bound(4), Bound::Key(key(20, 4, 0)));
        p.note(4, OrderKey::default(), true, None);
        assert_eq!(p.bound(4), Bound::Idle);
        assert_eq!(
            p.before(4, 100),
            Some((19, (20, 20_500))),
            "an idle marker keeps the history"
        );
    }

    #[test]
    fn marker_history_is_bounded() {
        let mut p = Progress::default();
        let n = MARKER_HISTORY as u64 + 10;
        for o in 0..n {
            p.note(0, key(o as i64, 0, 0), false, Some((o, o as i64, 0)));
        }
        assert_eq!(p.before(0, 10), None, "the 10 oldest markers are dropped");
        assert_eq!(p.before(0, 11), Some((10, (10, 0))));
        assert_eq!(p.before(0, n), Some((n - 1, (n as i64 - 1, 0))));
    }

    #[test]
    fn a_post_is_held_back_by_the_first_partition_that_neither_allows_nor_clears_it() {
        let k = key(10, 1, 0);
        let bounds = [Bound::Idle, Bound::Unknown, Bound::Key(key(11, 2, 0))];
        let never = |_| false;
        assert_eq!(
            held_back_by(&k, 1, 3, &STRICT, |q| bounds[q as usize], never),
            None,
            "its own bound is not asked"
        );
        assert_eq!(
            held_back_by(&k, 0, 3, &STRICT, |q| bounds[q as usize], never),
            Some(1)
        );
        // A partition that does not allow it can clear it; only such partitions are asked.
        let mut asked = Vec::new();
        let all = |q| {
            asked.push(q);
            true
        };
        assert_eq!(
            held_back_by(&k, 0, 3, &STRICT, |q| bounds[q as usize], all),
            None
        );
        assert_eq!(asked, vec![1]);
        let only_2 = |q| q == 2;
        assert_eq!(
            held_back_by(&k, 0, 3, &STRICT, |q| bounds[q as usize], only_2),
            Some(1)
        );
        let bounds = [Bound::Idle, Bound::Idle, Bound::Unknown];
        assert_eq!(
            held_back_by(&k, 0, 3, &STRICT, |q| bounds[q as usize], never),
            Some(2)
        );
    }
}
