//! Which buffered post a dedup worker decides next. Every owned partition is a lane; a lane's
//! head may be decided when every other partition allows it in the global order (`gate`) or
//! clears it: nothing undecided there that the head sees could match it. Another worker's
//! partition is cleared by read-ahead (`lookahead`); one of this worker's own by its buffer,
//! by the same rule. So a post that may match an undecided post elsewhere waits for it, and
//! the other lanes go on meanwhile.

use std::cell::{Cell, OnceCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::gate;
use super::super::gate::frontier;
use super::super::lookahead::{screen_range, Check};
use super::super::KafkaError;
use super::{Clients, Worker, SETTLE_EVERY_DECISIONS};
use crate::index::OrderKey;
use crate::metrics;
use crate::verify::{Bits, Sketch};

/// The shortest round of decisions: a `marker_interval_ms` below it counts as it.
const MIN_ROUND: Duration = Duration::from_millis(1);

/// The longest round of a worker in a hurry (`Worker::hurry`).
const HURRY_ROUND: Duration = Duration::from_millis(2);

/// A worker with at least this many posts buffered is catching up (a backlog, a replay): see
/// `Worker::hurry`.
const CATCHING_UP_BUFFERED: usize = 2_000;

/// How long one round of decisions may last: a worker's markers go out every
/// `marker_interval_ms`, and between rounds it polls its consumers, publishes its markers and
/// stores its offsets. A round that went on while anything was ready once decided for minutes
/// (hundreds of thousands of buffered posts of a slow stream): the other workers waited on its
/// markers all along, and the routed consumer, not polled for `max.poll.interval.ms` (5 min),
/// left the group and its partitions were decided again. While `Worker::hurry`, rounds last
/// `HURRY_ROUND` at most: the marker of a post another worker awaits goes out right after the
/// round that decides it.
fn round_budget(marker_interval_ms: u64, hurry: bool) -> Duration {
    let interval = Duration::from_millis(marker_interval_ms).max(MIN_ROUND);
    match hurry {
        true => interval.min(HURRY_ROUND),
        false => interval,
    }
}

impl Worker<'_> {
    /// Whether this worker is catching up: `CATCHING_UP_BUFFERED` posts or more buffered. Only
    /// then does it hurry, and do its markers say that it waits on another worker
    /// (`Marker::waiting`): on a live stream, where buffers stay short, markers sent for that
    /// alone cost CPU per post (README, Backlog).
    pub(super) fn catching_up(&self) -> bool {
        self.owned.values().map(|o| o.buf.len()).sum::<usize>() >= CATCHING_UP_BUFFERED
    }

    /// Whether this worker should decide in short rounds (`HURRY_ROUND`) and publish its markers
    /// after each: it is catching up and shares the routed partitions with other workers. Their
    /// heads wait on its markers, and compare themselves with every post of its partitions read
    /// ahead that no marker has yet said is decided: the sooner its markers come, the fewer
    /// (README, Backlog).
    pub(super) fn hurry(&self) -> bool {
        self.catching_up() && self.owned.len() < self.partitions as usize
    }

    /// Decides buffered posts while some lane's head may be decided, the earliest such head
    /// first, for one round (`round_budget`); returns how many.
    pub(super) fn decide_next(&mut self, c: &Clients) -> Result<usize, KafkaError> {
        let mut n = 0;
        let v = self.k.visibility();
        let until = Instant::now() + round_budget(self.k.marker_interval_ms, self.hurry());
        self.held_by_other = false;
        // Each lane's head key, kept across decisions: deciding lane `p` changes only `p`'s
        // head (its buffer front and its watermark), so only that one is computed again.
        let mut heads: Vec<(u32, Option<OrderKey>)> =
            self.owned.keys().map(|p| (*p, self.head_key(*p))).collect();
        // Within a round this worker learns nothing new of other workers' partitions (markers
        // and read-ahead are read between rounds), and its own lanes change only as it decides
        // their posts: a head held back by a partition stays held back until that partition,
        // one of its own lanes, has decided a post. Per lane held back: that partition and how
        // many posts it had decided this round then. (Checking every waiting head again after
        // each decision cost most of a worker's time with many partitions.)
        let mut held: BTreeMap<u32, (u32, usize)> = BTreeMap::new();
        let mut decided: BTreeMap<u32, usize> = BTreeMap::new();
        // The heads in key order, made again after each decision in one buffer.
        let mut order: Vec<(OrderKey, u32)> = Vec::with_capacity(heads.len());
        loop {
            order.clear();
            order.extend(heads.iter().filter_map(|(p, k)| k.map(|k| (k, *p))));
            order.sort_unstable();
            let mut next = None;
            for (key, p) in &order {
                let still_held = held
                    .get(p)
                    .is_some_and(|(q, then)| decided.get(q).copied().unwrap_or(0) == *then);
                if still_held {
                    continue;
                }
                match self.may_decide_head(*p, key, &heads) {
                    Ok(ahead) => {
                        next = Some((*p, ahead));
                        break;
                    }
                    Err(q) => {
                        held.insert(*p, (q, decided.get(&q).copied().unwrap_or(0)));
                        self.held_by_other |= !self.owned.contains_key(&q);
                        // Reading ahead serves heads that wait in the strict order (a backlog).
                        // A live head waits only for what arrived a slack before it, which
                        // other workers' markers settle; reading ahead for it cost the broker
                        // more than it saved (README, Live latency).
                        self.ahead.wanted |= !key.waits_with_slack(&v);
                        if let Some(o) = self.owned.get_mut(p) {
                            o.head.waiting_since.get_or_insert_with(Instant::now);
                        }
                    }
                }
            }
            let Some((p, ahead)) = next else {
                return Ok(n);
            };
            if ahead {
                self.stats.ahead += 1;
                metrics::global().decided_ahead();
            }
            self.decide_one(c, p)?;
            *decided.entry(p).or_default() += 1;
            held.remove(&p);
            n += 1;
            if n.is_multiple_of(SETTLE_EVERY_DECISIONS) {
                self.settle(c)?;
            }
            if Instant::now() >= until {
                return Ok(n);
            }
            if let Some(h) = heads.iter_mut().find(|(q, _)| *q == p) {
                h.1 = self.head_key(p);
            }
        }
    }

    /// Whether the head of lane `p`, with key `key`, may be decided now: `Ok(ahead)`, where
    /// `ahead` says some partition cleared it before its turn, or `Err` with the partition that
    /// holds it back. `heads`: every lane's head key.
    fn may_decide_head(
        &self,
        p: u32,
        key: &OrderKey,
        heads: &[(u32, Option<OrderKey>)],
    ) -> Result<bool, u32> {
        let lane = self.owned.get(&p).ok_or(p)?;
        let head = lane.buf.front().ok_or(p)?;
        let v = self.k.visibility();
        let ahead = Cell::new(false);
        // Its gates hold its bits already (`Slot::new`); a post without gates has an empty text.
        let bits = OnceCell::new();
        let clears = |q| {
            let clear = match &head.post {
                Ok(post) => {
                    let sketch = post.analyzed.sketch();
                    let bits = bits.get_or_init(|| {
                        head.gates
                            .as_ref()
                            .map_or_else(|| Bits::of(&sketch), |g| g.bits)
                    });
                    let mut checked = lane.head.checked.borrow_mut();
                    let from = checked.entry(q).or_default();
                    let c = if self.owned.contains_key(&q) {
                        self.own_check(q, key, &sketch, bits, from)
                    } else {
                        let c = self.lookahead.check_resuming(q, key, &sketch, bits, from);
                        if let (Check::MayMatch, Some(x)) = (c, *from) {
                            self.ahead.awaited.borrow_mut().push((q, x));
                        }
                        c
                    };
                    self.ahead.note(c);
                    c == Check::Clear
                }
                // A malformed record is rejected whatever else was decided.
                Err(_) => true,
            };
            ahead.set(ahead.get() || clear);
            clear
        };
        // A lane with a head is bounded by it (`bound`), known here without computing it again.
        let bound = |q| match heads.iter().find(|(l, _)| *l == q) {
            Some((_, Some(k))) => gate::Bound::Key(*k),
            _ => self.bound(q),
        };
        match gate::held_back_by(key, p, self.partitions, &v, bound, clears) {
            None => Ok(ahead.get()),
            Some(q) => Err(q),
        }
    }

    /// `Lookahead::check_resuming` for lane `q` of this worker: its buffered posts, keyed as
    /// planned (`Owned::plan`; at most `Lookahead::scan_limit` of them per check), then what is
    /// not buffered yet. The buffered posts with keys below `*checked` were compared with this
    /// post before and cannot match it (the buffer only loses posts at its front, as they are
    /// decided, and gains them at its back); `*checked` moves past those found not to match this
    /// time.
    pub(super) fn own_check(
        &self,
        q: u32,
        key: &OrderKey,
        post: &Sketch<'_>,
        bits: &Bits,
        checked: &mut Option<OrderKey>,
    ) -> Check {
        let Some(o) = self.owned.get(&q).filter(|o| o.started) else {
            return Check::NotFollowed;
        };
        let v = self.k.visibility();
        // A post only an identical text can match is compared with copies of its text alone,
        // and no other post with it (`Lookahead::exact_only`).
        let la = &self.lookahead;
        let exact = la.exact_only(post.chars.len(), post.tokens.len());
        // Without a copy of its text buffered, only what is not buffered yet can hold it back.
        let scan = !exact || o.copies.contains_key(&(post.text_hash as u32));
        if scan {
            let screen = la.screen(post, bits);
            let limit = la.scan_limit();
            // Planned posts are in key order, and the one `*checked` names was planned.
            let from = checked.map_or(0, |c| o.planned_below(&c));
            // Planned as far as the first post it does not see, or one past the limit; the
            // posts it sees are a prefix of those (keys grow along the lane).
            let cap = o.buf.len().min(from + limit + 1);
            let seen = |i: usize| o.buf[i].plan.get().is_some_and(|p| key.sees(&p.key, &v));
            while o.planned() < cap && (o.planned() <= from || seen(o.planned() - 1)) {
                if o.plan(o.planned(), &self.engine, q).is_none() {
                    break;
                }
            }
            let to = first_unseen(from, o.planned().min(cap), seen);
            let may = |i: usize| {
                let s = &o.buf[i];
                let (Ok(r), Some(g)) = (&s.post, &s.gates) else {
                    return false;
                };
                la.same_class(exact, post.text_hash as u32, g)
                    && la.may_match(post, bits, g, || r.analyzed.sketch())
            };
            let end = to.min(from + limit);
            if let Some(i) = screen_range(screen.as_ref(), &o.screens, from..end, may) {
                *checked = o.buf[i].plan.get().map(|p| p.key);
                return Check::MayMatch;
            }
            if end < to {
                return Check::Far;
            }
            if let Some(unseen) = o.buf.get(to).and_then(|s| s.plan.get()) {
                *checked = Some(unseen.key);
                return Check::Clear;
            }
        }
        let lane = match o.buf.len() {
            0 => self.engine.lane(q),
            n => match o.plan(n - 1, &self.engine, q) {
                Some(plan) => plan.after,
                None => return Check::Unread,
            },
        };
        // Every buffered post was compared (or none needed to be): what comes next is after them.
        if let Some(last) = o.buf.back().and_then(|s| s.plan.get()) {
            *checked = Some(last.key).max(*checked);
        }
        let next_offset = o.buf.back().map_or(o.next_offset, |s| s.offset + 1);
        let frontier = frontier(q, next_offset, lane.watermark, lane.arrival);
        if key.sees(&frontier, &v) {
            Check::Unread
        } else {
            Check::Clear
        }
    }
}

/// The first index of `from..to` where `seen` is false, `to` if none: `seen` holds on a prefix
/// of the range, usually a short one, so it is found by doubling steps from `from`, then
/// halving.
fn first_unseen(from: usize, to: usize, seen: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut step) = (from, 1);
    // `seen` holds below `lo`; look `step` further.
    while lo + step <= to && seen(lo + step - 1) {
        lo += step;
        step *= 2;
    }
    let mut hi = (lo + step).min(to);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if seen(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::{first_unseen, round_budget, HURRY_ROUND, MIN_ROUND};
    use std::time::Duration;

    #[test]
    fn rounds_last_the_marker_interval_and_a_hurry_cuts_them_short() {
        let ms = Duration::from_millis;
        assert_eq!(round_budget(50, false), ms(50));
        assert_eq!(round_budget(50, true), HURRY_ROUND);
        // An interval shorter than a hurry's rounds is kept in a hurry too.
        assert_eq!(round_budget(2, false), ms(2));
        assert_eq!(round_budget(2, true), ms(2));
        // No round is shorter than the floor.
        assert_eq!(round_budget(0, false), MIN_ROUND);
        assert_eq!(round_budget(0, true), MIN_ROUND);
    }

    #[test]
    fn first_unseen_finds_the_end_of_the_seen_prefix() {
        for from in 0..12 {
            for to in from..40 {
                for end in from..=to {
                    let got = first_unseen(from, to, |i| {
                        assert!((from..to).contains(&i), "{i} outside {from}..{to}");
                        i < end
                    });
                    assert_eq!(got, end, "from {from} to {to} end {end}");
                }
            }
        }
    }
}
