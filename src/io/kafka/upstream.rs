//! Whether the route stage has routed what the raw topic held, for a dedup worker without a
//! route stage in its process. An empty routed partition may count as idle only once nothing
//! bound for it can still be waiting upstream: a dedup worker that started before the route
//! workers (or beside slow ones, on a backlog) would otherwise declare its empty partitions idle
//! and decide what they receive later by arrival, out of the order a replay gives.
//!
//! The route group commits a raw offset only after the envelopes of every record before it are
//! acknowledged on the routed topic. So once the route group's committed offsets reach the raw
//! topic's high watermarks read at an instant `t0`, every raw record of `t0` is on the routed
//! topic: a record a routed partition receives after that comes from a raw record that arrived
//! after `t0`. A thread asks the broker a few times a second, and only while the worker wants
//! to know: each round reads the route group's committed offsets, which confirm the newest
//! earlier watermark snapshot they reach, then the raw topic's high watermarks, the next
//! snapshot. (On a stream that keeps flowing, commits never reach the watermarks of their own
//! instant.) Right after commits confirm a snapshot, the round reads the routed topic's high
//! watermarks: every envelope of the confirmed raw records lies below them, so a routed partition
//! that the worker has fetched up to its mark holds nothing more from them (`Confirmation`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use super::fetch;
use super::{client, KafkaConfig, KafkaError};

/// How often the thread asks the broker while the worker wants to know.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// Timeout of each request to the broker.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Confirmations kept (the newest).
const KEPT: usize = 8;

/// Watermark snapshots kept (the newest): about 13 s of rounds, longer than the route group's
/// commits trail a flowing stream (its commit interval, plus the time its event-time merge waits
/// on quiet raw partitions). With fewer, every snapshot kept could be newer than what the
/// commits reach, and none would ever be confirmed while the stream flows.
const SNAPSHOTS_KEPT: usize = 64;

/// The raw topic's low and high watermarks, per partition.
pub(crate) type Marks = BTreeMap<u32, (i64, i64)>;

/// The route group's committed offset per raw partition (`None`: none).
pub(crate) type Committed = BTreeMap<u32, Option<i64>>;

/// Whether the route group has committed everything `marks` (per raw partition: low and high
/// watermark) held: its committed offset reaches the high watermark, or the partition holds
/// nothing (nothing committed and low equals high). A partition without marks is not caught up.
pub(crate) fn routed_all(marks: &Marks, committed: &Committed) -> bool {
    marks.iter().all(
        |(p, (low, high))| match committed.get(p).copied().flatten() {
            Some(c) => c >= *high,
            None => low >= high,
        },
    )
}

/// Appends `item`, dropping the oldest past `max`.
fn keep_newest<T>(kept: &mut VecDeque<T>, item: T, max: usize) {
    kept.push_back(item);
    while kept.len() > max {
        kept.pop_front();
    }
}

/// Everything the raw topic held at `t0` found routed: the route group's commits reached the
/// raw high watermarks read at `t0`, and `routed` holds the routed topic's low and high
/// watermarks read after those commits. Every envelope of a raw record of `t0` lies below
/// `routed`'s high watermark of its partition.
#[derive(Clone, Debug)]
pub(crate) struct Confirmation {
    pub(crate) t0: Instant,
    pub(crate) routed: Marks,
}

/// Where a consumer of a routed partition stands: one past the last record it polled since its
/// assignment, else where it started (`Some(None)`: the log start; `None`: unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) polled_to: Option<u64>,
    pub(crate) start: Option<Option<i64>>,
}

impl Confirmation {
    /// Whether a consumer at `at` on routed partition `q` has polled every record below the
    /// high watermark read: past it, or started at or past it, or started at the log start of a
    /// partition that held nothing then. Unknown when the marks of `q` are missing.
    pub(crate) fn fetched(&self, q: u32, at: Position) -> bool {
        let Some(&(low, high)) = self.routed.get(&q) else {
            return false;
        };
        match (at.polled_to, at.start) {
            (Some(next), _) => next as i64 >= high,
            (None, Some(Some(committed))) => committed >= high,
            (None, Some(None)) => low >= high,
            (None, None) => false,
        }
    }
}

/// The newest confirmations (at most `KEPT`).
#[derive(Debug, Default)]
pub(crate) struct Confirmations {
    kept: VecDeque<Confirmation>,
}

impl Confirmations {
    /// Notes a confirmation.
    pub(crate) fn note(&mut self, c: Confirmation) {
        keep_newest(&mut self.kept, c, KEPT);
    }

    /// Whether everything the raw topic held at some instant at or after `since` was found
    /// routed, and a consumer at `at` on routed partition `q` has polled every envelope of it.
    pub(crate) fn confirm(&self, since: Instant, q: u32, at: Position) -> bool {
        self.kept.iter().any(|c| c.t0 >= since && c.fetched(q, at))
    }
}

#[derive(Default)]
struct Shared {
    confirmed: Confirmations,
    /// Whether the route group was ever seen with a committed offset, or the raw topic empty.
    route_seen: bool,
}

/// The thread watching the route group, and what it found.
pub(crate) struct RouteWatch {
    shared: Arc<Mutex<Shared>>,
    wanted: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    started: Instant,
    warned: AtomicBool,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RouteWatch {
    /// Starts watching the route group of `k` (`<group_id>.route`) on `k.input_topic`, and the
    /// routed topic's watermarks.
    pub(crate) fn start(k: &KafkaConfig) -> Result<RouteWatch, KafkaError> {
        let mut config = client::consumer_config(k, &format!("{}.route", k.group_id));
        // It only reads the group's offsets: it never joins, and never commits.
        config.set("enable.auto.commit", "false");
        let consumer: BaseConsumer =
            client::create(k, &config, rdkafka::consumer::DefaultConsumerContext)?;
        let (shared, wanted, stop) = Default::default();
        let (s, w, st) = (Arc::clone(&shared), Arc::clone(&wanted), Arc::clone(&stop));
        let topics = (k.input_topic.clone(), k.routed_topic.clone());
        let thread = std::thread::Builder::new()
            .name("route-watch".into())
            .spawn(move || watch(&consumer, &topics, &s, &w, &st))
            .map_err(|e| KafkaError::Config(format!("cannot start the route watch: {e}")))?;
        Ok(RouteWatch {
            shared,
            wanted,
            stop,
            started: Instant::now(),
            warned: AtomicBool::new(false),
            thread: Some(thread),
        })
    }

    /// Whether the route group's commits have confirmed that everything the raw topic held at
    /// or after `since` is routed, and a consumer at `at` on routed partition `q` has polled
    /// all of it that went to `q`: `routed_since` without its fallback. Asking starts the
    /// broker requests when it is not known yet.
    pub(crate) fn confirmed_since(&self, since: Instant, q: u32, at: Position) -> bool {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.confirmed.confirm(since, q, at) {
            return true;
        }
        self.wanted.store(true, Ordering::Relaxed);
        false
    }

    /// Whether everything the raw topic held at or after `since` is known routed, and polled
    /// from `q` by a consumer at `at` (`confirmed_since`). When the route group has shown no
    /// committed offset for `give_up` since the watch started (no route stage in this group),
    /// the answer is yes, with a warning.
    pub(crate) fn routed_since(
        &self,
        since: Instant,
        q: u32,
        at: Position,
        give_up: Duration,
    ) -> bool {
        if self.confirmed_since(since, q, at) {
            return true;
        }
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if !s.route_seen && self.started.elapsed() >= give_up {
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the route group has committed nothing: empty partitions are told idle by time only"
                );
            }
            return true;
        }
        false
    }
}

impl Drop for RouteWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(
    consumer: &BaseConsumer,
    topics: &(String, String),
    shared: &Mutex<Shared>,
    wanted: &AtomicBool,
    stop: &AtomicBool,
) {
    let mut pending = Snapshots::default();
    while !stop.load(Ordering::Relaxed) {
        if !wanted.swap(false, Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let round = Instant::now();
        match ask(consumer, topics, &mut pending) {
            Ok((confirmed, seen)) => {
                let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                s.route_seen |= seen;
                if let Some(c) = confirmed {
                    s.confirmed.note(c);
                }
            }
            Err(e) => tracing::debug!(error = %e, "route group offsets unknown"),
        }
        std::thread::sleep(ASK_EVERY.saturating_sub(round.elapsed()));
    }
}

/// One round: reads the route group's committed offsets and confirms the newest watermark
/// snapshot they reach (`Snapshots::confirmed_by`), with the routed topic's watermarks read
/// right after, then reads the raw topic's watermarks as the next snapshot. Returns the
/// confirmation, if any, and whether the group has committed any offset or the raw topic is
/// empty. On a stream that keeps flowing, the committed offsets never reach the watermarks of
/// the same instant (the route group commits once a second): they reach a snapshot taken a
/// moment before.
fn ask(
    consumer: &BaseConsumer,
    (raw, routed): &(String, String),
    pending: &mut Snapshots,
) -> Result<(Option<Confirmation>, bool), KafkaError> {
    let partitions = partitions_of(consumer, raw)?;
    let committed = fetch::committed_offsets(consumer, raw, &partitions, REQUEST_TIMEOUT)?;
    let confirmed = match pending.confirmed_by(&committed) {
        Some(t0) => Some(Confirmation {
            t0,
            routed: watermarks(consumer, routed, &partitions_of(consumer, routed)?)?,
        }),
        None => None,
    };
    let t0 = Instant::now();
    let marks = watermarks(consumer, raw, &partitions)?;
    let empty = marks.values().all(|(low, high)| low >= high);
    if !marks.is_empty() {
        pending.push(t0, marks);
    }
    Ok((confirmed, empty || committed.values().any(Option::is_some)))
}

/// The partitions of `topic` (a metadata request).
fn partitions_of(consumer: &BaseConsumer, topic: &str) -> Result<Vec<u32>, KafkaError> {
    Ok((0..fetch::partition_count(consumer, topic, REQUEST_TIMEOUT)? as u32).collect())
}

/// The low and high watermarks of `parts` of `topic` (two requests, `fetch::watermarks`).
fn watermarks(consumer: &BaseConsumer, topic: &str, parts: &[u32]) -> Result<Marks, KafkaError> {
    fetch::watermarks(consumer, topic, parts, REQUEST_TIMEOUT)
}

/// Watermark snapshots of the raw topic not yet reached by the route group's commits, oldest
/// first (at most `SNAPSHOTS_KEPT`).
#[derive(Default)]
pub(crate) struct Snapshots {
    kept: VecDeque<(Instant, Marks)>,
}

impl Snapshots {
    /// Adds the watermarks read at `t0`.
    pub(crate) fn push(&mut self, t0: Instant, marks: Marks) {
        keep_newest(&mut self.kept, (t0, marks), SNAPSHOTS_KEPT);
    }

    /// The instant of the newest snapshot that `committed` reaches (`routed_all`), if any;
    /// it and every older one are dropped.
    pub(crate) fn confirmed_by(&mut self, committed: &Committed) -> Option<Instant> {
        let newest = self
            .kept
            .iter()
            .rposition(|(_, marks)| routed_all(marks, committed))?;
        let t0 = self.kept[newest].0;
        self.kept.drain(..=newest);
        Some(t0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_all_needs_every_partition_committed_to_its_high_watermark() {
        let marks: Marks = [(0, (0, 10)), (1, (5, 5))].into();
        // Partition 1 holds nothing: nothing need be committed there.
        assert!(routed_all(&marks, &[(0, Some(10)), (1, None)].into()));
        assert!(routed_all(&marks, &[(0, Some(12)), (1, Some(5))].into()));
        assert!(!routed_all(&marks, &[(0, Some(9)), (1, None)].into()));
        // Nothing committed where records are: the route stage has not routed them.
        assert!(!routed_all(&marks, &[(0, None), (1, None)].into()));
        assert!(!routed_all(&marks, &[(1, None)].into()));
    }

    #[test]
    fn commits_confirm_the_newest_snapshot_they_reach() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        let marks = |high: i64| -> Marks { [(0, (0, high)), (1, (0, 3))].into() };
        let mut s = Snapshots::default();
        s.push(at(0), marks(10));
        s.push(at(200), marks(20));
        s.push(at(400), marks(30));
        // A stream that keeps flowing: the commits trail the newest watermarks.
        let committed = |c: i64| -> Committed { [(0, Some(c)), (1, Some(3))].into() };
        assert_eq!(s.confirmed_by(&committed(5)), None);
        assert_eq!(s.confirmed_by(&committed(25)), Some(at(200)));
        // Confirmed snapshots, and the older ones, are gone.
        assert_eq!(s.confirmed_by(&committed(25)), None);
        assert_eq!(s.confirmed_by(&committed(30)), Some(at(400)));
        assert_eq!(s.confirmed_by(&committed(30)), None);
        // Commits that trail by many rounds still reach a snapshot kept from back then.
        for i in 0..20 {
            s.push(at(600 + 200 * i), marks(40 + 10 * i as i64));
        }
        assert_eq!(s.confirmed_by(&committed(40)), Some(at(600)));
    }

    #[test]
    fn a_confirmation_counts_from_its_watermarks_on_once_the_routed_marks_are_polled() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        // Raw watermarks read at `ms` found routed; routed partition 0 then held `high`
        // records, partition 1 none past its log start.
        let confirmation = |ms: u64, high: i64| Confirmation {
            t0: at(ms),
            routed: [(0, (0, high)), (1, (4, 4))].into(),
        };
        let polled = |next: u64| Position {
            polled_to: Some(next),
            start: Some(None),
        };
        let mut c = Confirmations::default();
        assert!(!c.confirm(at(0), 0, polled(100)));
        c.note(confirmation(1_000, 10));
        // Not before the consumer has polled all 10, however long ago the commits came.
        assert!(!c.confirm(at(500), 0, polled(9)));
        assert!(c.confirm(at(500), 0, polled(10)));
        assert!(c.confirm(at(1_000), 0, polled(10)));
        // Nothing polled yet: where it started tells.
        let started = |start| Position {
            polled_to: None,
            start,
        };
        assert!(c.confirm(at(500), 0, started(Some(Some(10)))));
        assert!(!c.confirm(at(500), 0, started(Some(Some(3)))));
        assert!(!c.confirm(at(500), 0, started(Some(None))));
        assert!(!c.confirm(at(500), 0, started(None)));
        // Partition 1 held nothing past its log start; a partition without marks is unknown.
        assert!(c.confirm(at(500), 1, started(Some(None))));
        assert!(!c.confirm(at(500), 2, polled(1_000)));
        // A partition quiet since after the watermarks were read needs a newer confirmation.
        assert!(!c.confirm(at(1_001), 0, polled(10)));
        c.note(confirmation(2_000, 12));
        assert!(!c.confirm(at(1_001), 0, polled(10)));
        assert!(c.confirm(at(1_001), 0, polled(12)));
        // Only the newest are kept.
        for i in 0..KEPT as u64 {
            c.note(confirmation(3_000 + i, 20));
        }
        assert!(!c.confirm(at(500), 0, polled(12)));
        assert!(c.confirm(at(500), 0, polled(20)));
    }
}
