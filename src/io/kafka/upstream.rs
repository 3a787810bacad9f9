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
//! instant.)

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

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

/// Instants at which everything the raw topic held was found routed: `(t0, t1)`, the high
/// watermarks read at `t0`, the committed offsets that reached them read at `t1`.
#[derive(Debug, Default)]
pub(crate) struct Confirmations {
    kept: VecDeque<(Instant, Instant)>,
}

impl Confirmations {
    /// Notes a confirmation.
    pub(crate) fn note(&mut self, t0: Instant, t1: Instant) {
        keep_newest(&mut self.kept, (t0, t1), KEPT);
    }

    /// Whether everything the raw topic held at some instant at or after `since` was found
    /// routed at least `settle` before `now` (so that the routed partitions' fetches have
    /// reported the high watermarks since).
    pub(crate) fn confirm(&self, since: Instant, now: Instant, settle: Duration) -> bool {
        self.kept
            .iter()
            .any(|(t0, t1)| *t0 >= since && now.saturating_duration_since(*t1) >= settle)
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
    /// Starts watching the route group of `k` (`<group_id>.route`) on `k.input_topic`.
    pub(crate) fn start(k: &KafkaConfig) -> Result<RouteWatch, KafkaError> {
        let mut config = client::consumer_config(k, &format!("{}.route", k.group_id));
        // It only reads the group's offsets: it never joins, and never commits.
        config.set("enable.auto.commit", "false");
        let consumer: BaseConsumer = config.create()?;
        let (shared, wanted, stop) = Default::default();
        let (s, w, st) = (Arc::clone(&shared), Arc::clone(&wanted), Arc::clone(&stop));
        let topic = k.input_topic.clone();
        let thread = std::thread::Builder::new()
            .name("route-watch".into())
            .spawn(move || watch(&consumer, &topic, &s, &w, &st))
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
    /// or after `since` is routed, `settle` ago at least: `routed_since` without its fallback.
    /// Asking starts the broker requests when it is not known yet.
    pub(crate) fn confirmed_since(&self, since: Instant, settle: Duration) -> bool {
        let s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        if s.confirmed.confirm(since, Instant::now(), settle) {
            return true;
        }
        self.wanted.store(true, Ordering::Relaxed);
        false
    }

    /// Whether everything the raw topic held at or after `since` is known routed, `settle`
    /// ago at least. Asking starts the broker requests when it is not known yet. When the route
    /// group has shown no committed offset for `give_up` since the watch started (no route
    /// stage in this group), the answer is yes, with a warning.
    pub(crate) fn routed_since(&self, since: Instant, settle: Duration, give_up: Duration) -> bool {
        if self.confirmed_since(since, settle) {
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
    topic: &str,
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
        match ask(consumer, topic, &mut pending) {
            Ok((confirmed, seen)) => {
                let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                s.route_seen |= seen;
                if let Some((t0, t1)) = confirmed {
                    s.confirmed.note(t0, t1);
                }
            }
            Err(e) => tracing::debug!(error = %e, "route group offsets unknown"),
        }
        std::thread::sleep(ASK_EVERY.saturating_sub(round.elapsed()));
    }
}

/// One round: reads the route group's committed offsets and confirms the newest watermark
/// snapshot they reach (`Snapshots::confirmed_by`), then reads the raw topic's watermarks as the
/// next snapshot. Returns the confirmation `(t0, t1)`, if any, and whether the group has
/// committed any offset or the topic is empty. On a stream that keeps flowing, the committed
/// offsets never reach the watermarks of the same instant (the route group commits once a
/// second): they reach a snapshot taken a moment before.
fn ask(
    consumer: &BaseConsumer,
    topic: &str,
    pending: &mut Snapshots,
) -> Result<(Option<(Instant, Instant)>, bool), KafkaError> {
    let partitions: Vec<u32> =
        (0..client::partition_count(consumer, topic, REQUEST_TIMEOUT)? as u32).collect();
    let committed = client::committed_offsets(consumer, topic, &partitions, REQUEST_TIMEOUT)?;
    let t1 = Instant::now();
    let confirmed = pending.confirmed_by(&committed).map(|t0| (t0, t1));
    let t0 = Instant::now();
    let mut marks = BTreeMap::new();
    for p in &partitions {
        marks.insert(
            *p,
            consumer.fetch_watermarks(topic, *p as i32, REQUEST_TIMEOUT)?,
        );
    }
    let empty = marks.values().all(|(low, high)| low >= high);
    if !partitions.is_empty() {
        pending.push(t0, marks);
    }
    Ok((confirmed, empty || committed.values().any(Option::is_some)))
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
    fn a_confirmation_counts_only_from_its_watermarks_on_and_once_settled() {
        let base = Instant::now();
        let at = |ms: u64| base + Duration::from_millis(ms);
        let settle = Duration::from_millis(250);
        let mut c = Confirmations::default();
        assert!(!c.confirm(at(0), at(10_000), settle));
        // Watermarks read at 1 s, found routed at 1.5 s.
        c.note(at(1_000), at(1_500));
        // Not before it settled.
        assert!(!c.confirm(at(500), at(1_600), settle));
        assert!(c.confirm(at(500), at(1_750), settle));
        assert!(c.confirm(at(1_000), at(1_750), settle));
        // A partition quiet since after the watermarks were read needs a newer confirmation.
        assert!(!c.confirm(at(1_001), at(5_000), settle));
        c.note(at(2_000), at(2_100));
        assert!(c.confirm(at(1_001), at(5_000), settle));
        // Only the newest are kept.
        for i in 0..KEPT as u64 {
            c.note(at(3_000 + i), at(3_100 + i));
        }
        assert!(!c.confirm(at(500), at(3_000), settle));
        assert!(c.confirm(at(500), at(4_000), settle));
    }
}
