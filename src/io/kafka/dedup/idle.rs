//! When an owned routed partition with nothing buffered stops holding the others back
//! (`Worker::bound`): after `idle_after_ms` without a record, or sooner once nothing can still be
//! on its way to it, as this process's route stage or the route group's commits tell
//! (`upstream::RouteWatch`): the partition has then been polled past every envelope either has
//! put on it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::fetch::FetchProgress;
use super::super::gate::{self, Bound};
use super::super::upstream::Position;
use super::Worker;

/// The wait for this process's route stage (see `run`) is given up after this many times
/// `idle_after_ms`.
const ROUTING_WAIT_FACTOR: u32 = 10;

/// How long this process's route stage must have been caught up (everything it read is on the
/// routed topic) before an empty partition counts as quiet: this worker's fetches (every
/// `fetch.wait.max.ms`, 10 ms by default) must have reported the high watermarks since, which
/// cover what other or earlier route workers put there. (What this process's route stage put
/// there is known exactly: `DeliveredEnds`.)
const UPSTREAM_SETTLE: Duration = Duration::from_millis(250);

/// How long an empty partition must have had no record before the route watch is asked whether
/// it is drained (`upstream::RouteWatch`, without a route stage in this process). Each of the
/// watch's rounds asks the broker for both topics' watermarks (ListOffsets requests), which
/// tansu answers by listing every batch of every partition asked about. On a flowing stream a
/// routed partition often goes a few hundred milliseconds without an envelope when the broker
/// is busy: asked after 100 ms, the watch still ran through a stream of 2,000 posts/s, and its
/// requests were about a sixth of tansu's CPU with one route and two dedup workers. A
/// confirmation waits for the route group's next commit (once a second) anyway, so the end of a
/// burst comes at most this much later, still well before `idle_after_ms`.
const ASK_UPSTREAM_AFTER: Duration = Duration::from_millis(500);

/// Where the consumer of a routed partition stands, for `upstream::RouteWatch`.
fn position(fetch: &FetchProgress) -> Position {
    Position {
        polled_to: fetch.polled_to(),
        start: fetch.start(),
    }
}

impl Worker<'_> {
    /// Notes the state of this process's route stage, if it has one.
    pub(super) fn watch_route(&mut self) {
        let Some(r) = self.routing else { return };
        let now = Instant::now();
        if self.routing_since.is_none() && r.routing.load(Ordering::Relaxed) {
            self.routing_since = Some(now);
        }
        if r.caught_up.load(Ordering::Acquire) {
            self.caught_up_since.get_or_insert(now);
        } else {
            self.caught_up_since = None;
        }
    }

    /// Whether empty partition `q`, quiet since `since`, is really quiet upstream. With this
    /// process's route stage: it has been routing for `idle_after`, or has been caught up for
    /// `UPSTREAM_SETTLE` and `q` has been polled past what it delivered there (or the wait for
    /// it was given up). Without: the route group had routed everything the raw topic held at
    /// some instant since then, and `q` has been polled past the routed high watermark read
    /// after that (`upstream`).
    fn upstream_quiet(
        &self,
        q: u32,
        fetch: &FetchProgress,
        idle_after: Duration,
        since: Instant,
    ) -> bool {
        let give_up = idle_after * ROUTING_WAIT_FACTOR;
        if let Some(u) = &self.upstream {
            return u.routed_since(since, q, position(fetch), give_up);
        }
        let held = |t: Option<Instant>, d| t.is_some_and(|t| t.elapsed() >= d);
        held(self.routing_since, idle_after)
            || (held(self.caught_up_since, UPSTREAM_SETTLE) && self.polled_delivered(q, fetch))
            || self.started_at.elapsed() >= give_up
    }

    /// Whether `q` has been polled past the last envelope this process's route stage delivered
    /// there (true when it delivered none, or there is no route stage here).
    fn polled_delivered(&self, q: u32, fetch: &FetchProgress) -> bool {
        self.routing.is_none_or(|r| {
            r.delivered
                .end(q)
                .is_none_or(|end| fetch.polled_to().is_some_and(|at| at >= end))
        })
    }

    /// Whether owned partition `q`, whose last record came at `since`, has nothing more coming,
    /// without waiting out `idle_after_ms` (the end of a backlog): this process's route stage
    /// is the only one and has been caught up for `UPSTREAM_SETTLE`, and this worker has polled
    /// past the last envelope it delivered to `q` and to the high watermark its fetches last
    /// reported (earlier route workers' records). Without a route stage here: `q` has had no
    /// record for `ASK_UPSTREAM_AFTER`, the route group's commits confirmed that the raw topic is
    /// routed past `since` (never the watch's fallback), and this worker has polled `q` to the
    /// routed high watermark read after them.
    fn drained(&self, q: u32, fetch: &FetchProgress, since: Instant) -> bool {
        let Some(r) = self.routing else {
            return fetch.caught_up()
                && since.elapsed() >= ASK_UPSTREAM_AFTER
                && self
                    .upstream
                    .as_ref()
                    .is_some_and(|u| u.confirmed_since(since, q, position(fetch)));
        };
        r.sole.load(Ordering::Relaxed)
            && self
                .caught_up_since
                .is_some_and(|t| t.elapsed() >= UPSTREAM_SETTLE)
            && fetch.caught_up()
            && self.polled_delivered(q, fetch)
    }

    /// What is known about partition `q` (see `gate`). For `wake_grace_ms` after an owned
    /// partition woke up, no partition counts as idle: an owned one is bounded by where it
    /// stands, another worker's by its last marker's record (`Progress::bound_held`).
    pub(super) fn bound(&self, q: u32) -> Bound {
        let settled = self.wake.settled();
        let Some(o) = self.owned.get(&q) else {
            return match settled {
                true => self.progress.bound(q),
                false => self.progress.bound_held(q),
            };
        };
        let head = self.head_key(q);
        let idle_after = Duration::from_millis(self.k.idle_after_ms);
        let quiet = settled
            && head.is_none()
            && (o.last_record.elapsed() >= idle_after
                || (o.idle_before && o.fetch.caught_up())
                || self.drained(q, &o.fetch, o.last_record))
            && o.fetch.may_be_caught_up()
            && self.upstream_quiet(q, &o.fetch, idle_after, o.last_record);
        let watermark = self.engine.watermarks().get(&q).copied();
        let arrival = self.engine.arrivals().get(&q).copied().unwrap_or(0);
        gate::local_bound(
            q,
            head,
            quiet,
            o.started,
            (watermark, arrival),
            o.next_offset,
        )
    }
}
