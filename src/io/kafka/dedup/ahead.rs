//! Reading ahead into the routed partitions other workers own (`lookahead`): a consumer
//! outside the group follows each such partition from its owner's newest progress marker, so
//! that a post whose turn has not come in the global order can still be decided when nothing
//! undecided there could match it. Only read, and only fetched, while posts wait on another
//! partition in the strict order (not live posts with a slack: `OrderKey::waits_with_slack`).
//! A post read ahead that a waiting head may match is itself decided here for the
//! index when that is certain to make it unique, or a duplicate that stores nothing
//! (`Worker::resolve_awaited`).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::super::gate::{self, Bound};
use super::super::lookahead::Check;
use super::super::wire::{decode_sketch_record, routed_offset};
use super::super::KafkaError;
use super::{Clients, Worker};
use crate::engine::Ahead;
use crate::index::grams::distinct_bigrams;
use crate::index::OrderKey;
use crate::verify::{Bits, Sketch};

/// Routed records read ahead per round at most.
const AHEAD_POLL_BATCH: usize = 64;

/// A partition followed stops being fetched while this many of its posts are undecided as far
/// as this worker knows (memory stays bounded while its owner is slow); past that its posts
/// wait for markers as in the strict order.
const AHEAD_MAX_PENDING: usize = 50_000;

/// The read-ahead consumer stops fetching when no head has waited in the strict order for this
/// long, and starts again (from the owners' newest markers, if it lags) when one does: on a
/// live stream markers settle nearly every wait, and each consumer that polls adds to the
/// broker's load, most of all on brokers that hold every fetch for the whole fetch wait
/// (tansu).
const AHEAD_PAUSE_AFTER: Duration = Duration::from_millis(500);

/// A partition is followed again from its owner's newest marker when the reading lags that
/// marker by more than this many records (everything before it is decided).
const AHEAD_RESTART_LAG: u64 = 4;

/// What the consumer reading ahead was told: the partitions it holds (every partition another
/// worker owned when it was last assigned), per partition followed the offset it reads next
/// (where that assignment or a seek since pointed it, moved on by each record read), and per
/// partition whether it is paused.
///
/// Its assignment changes only when the partitions other workers own do, and is first made when
/// a post first waits; a partition followed again from a newer marker is sought. Assigning anew
/// whenever what was followed changed (every few rounds at the end of a backlog, as partitions
/// fell idle) aborted a worker now and then inside librdkafka 2.12
/// (`rd_kafka_assignment_partition_stopped: Assertion rktp->rktp_started failed`): an
/// assignment that removes a partition whose previous removal has not yet been answered stops
/// its fetcher twice (librdkafka issue 5573).
#[derive(Default)]
pub(super) struct AheadReader {
    held: BTreeSet<u32>,
    at: BTreeMap<u32, u64>,
    paused: BTreeMap<u32, bool>,
    /// Per partition, a gap met at this offset: followed again only from a marker past it.
    gaps: BTreeMap<u32, u64>,
    /// Whether a head waited in the strict order (not with a slack) in the last round.
    pub(super) wanted: bool,
    /// When a head last waited in the strict order.
    last_wanted: Option<Instant>,
    /// `Lookahead::check` outcomes: clear, not followed, unread, may match, too far ahead.
    pub(super) checks: std::cell::Cell<[u64; 5]>,
    /// Undecided posts of partitions other workers own that a waiting head may match, by
    /// partition and key, to be resolved after the round (`Worker::resolve_awaited`).
    pub(super) awaited: RefCell<Vec<(u32, OrderKey)>>,
    /// Posts decided for the index ahead of their owners (`Engine::decide_ahead`).
    pub(super) resolved: u64,
}

impl AheadReader {
    /// Counts a `Lookahead::check` outcome.
    pub(super) fn note(&self, c: Check) {
        let mut n = self.checks.get();
        n[c as usize] += 1;
        self.checks.set(n);
    }
}

impl Worker<'_> {
    /// Follows the partitions this worker does not own from their owners' newest markers,
    /// forgets what those markers say is decided, and, if a post waits, reads ahead.
    pub(super) fn read_ahead(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let mut want: BTreeMap<u32, (u64, Option<(i64, i64)>)> = BTreeMap::new();
        for q in 0..self.partitions {
            if self.owned.contains_key(&q) {
                continue;
            }
            let bound = self.progress.bound(q);
            self.lookahead.decided(q, bound);
            if bound == Bound::Idle {
                continue;
            }
            // From the newest marker after a whole record; or from the start, when the owner is
            // still in the partition's first record (an owner starting at offset 0 starts fresh).
            let from = match (self.progress.before(q, u64::MAX), bound) {
                (Some((offset, mark)), _) => Some((offset + 1, Some(mark))),
                (None, Bound::Key(b)) if b.partition == q && routed_offset(b.seq) == 0 => {
                    Some((0, None))
                }
                _ => None,
            };
            if let Some((start, mark)) = from {
                if self.ahead.gaps.get(&q).is_none_or(|g| start > *g) {
                    want.insert(q, (start, mark));
                }
            }
        }
        let wanted = std::mem::take(&mut self.ahead.wanted);
        if wanted {
            self.ahead.last_wanted = Some(Instant::now());
        }
        let followed: BTreeMap<u32, u64> = self.lookahead.followed().collect();
        for q in followed.keys().filter(|q| !want.contains_key(q)) {
            self.lookahead.stop(*q);
        }
        for (q, (start, mark)) in &want {
            // A lagging partition is moved up only when about to be read.
            let restart = followed
                .get(q)
                .is_none_or(|next| wanted && next + AHEAD_RESTART_LAG < *start);
            if restart {
                self.lookahead.start(*q, *start, *mark);
                self.ahead.gaps.remove(q);
            }
        }
        self.assign_ahead(c)?;
        self.pace_ahead(c)?;
        if !wanted || self.ahead.at.is_empty() {
            return Ok(());
        }
        for _ in 0..AHEAD_POLL_BATCH {
            let Some(m) = c.ahead.poll(Duration::ZERO) else {
                break;
            };
            let m = match m {
                Ok(m) => m,
                Err(RdError::PartitionEOF(_)) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "read-ahead consumer error");
                    continue;
                }
            };
            let (q, offset) = (m.partition() as u32, m.offset() as u64);
            if !self.lookahead.follows(q) {
                continue;
            }
            // Read ahead only to be compared, never indexed nor output.
            let posts = decode_sketch_record(m.payload().unwrap_or_default()).ok();
            if self.lookahead.read(q, offset, posts) {
                // The consumer goes on from here by itself: no seek (`assign_ahead`), which
                // would drop what it has fetched beyond.
                if let Some(at) = self.ahead.at.get_mut(&q) {
                    *at = (*at).max(offset + 1);
                }
            } else {
                tracing::debug!(
                    partition = q,
                    offset,
                    "gap in a routed partition read ahead"
                );
                self.ahead.gaps.insert(q, offset);
                self.assign_ahead(c)?;
            }
        }
        Ok(())
    }

    /// Points the read-ahead consumer at what `lookahead` follows, each at its reading point:
    /// assigns it every partition other workers own when those change (the ones not followed
    /// at their end, to be paused), and otherwise seeks a partition followed from a new offset.
    /// A seek that fails (the partition not yet started) is tried again next round; meanwhile
    /// the partition stays paused.
    fn assign_ahead(&mut self, c: &Clients) -> Result<(), KafkaError> {
        if self.owned.is_empty() || self.ahead.last_wanted.is_none() {
            // Nothing of this worker's waits: no assignment, which the group's would replace.
            // Nor before a post first waits: librdkafka fetches a partition it is newly
            // assigned at once, but one resumed after a pause only once its broker thread next
            // wakes up, up to a second later. Assigned when the worker started and paused
            // until the first wait, the read-ahead of two workers starting on a backlog read
            // nothing for 0.9 s while every head waited on it.
            return Ok(());
        }
        let followed: BTreeMap<u32, u64> = self.lookahead.followed().collect();
        let foreign: BTreeSet<u32> = (0..self.partitions)
            .filter(|q| !self.owned.contains_key(q))
            .collect();
        let topic = &self.k.routed_topic;
        if foreign != self.ahead.held {
            let mut tpl = TopicPartitionList::new();
            for q in &foreign {
                let at = followed
                    .get(q)
                    .map_or(Offset::End, |o| Offset::Offset(*o as i64));
                tpl.add_partition_offset(topic, *q as i32, at)?;
            }
            c.ahead.assign(&tpl)?;
            // A partition kept across assignments may keep librdkafka's pause: resume all, so
            // that what `pace_ahead` believes holds.
            c.ahead.resume(&tpl)?;
            self.ahead.held = foreign;
            self.ahead.at = followed;
            self.ahead.paused.clear();
            return Ok(());
        }
        for (q, offset) in &followed {
            if self.ahead.at.get(q) == Some(offset) {
                continue;
            }
            let to = Offset::Offset(*offset as i64);
            match c.ahead.seek(topic, *q as i32, to, Duration::ZERO) {
                Ok(()) => {
                    self.ahead.at.insert(*q, *offset);
                }
                Err(e) => {
                    self.ahead.at.remove(q);
                    tracing::debug!(partition = q, error = %e, "read-ahead seek postponed");
                }
            }
        }
        self.ahead.at.retain(|q, _| followed.contains_key(q));
        Ok(())
    }

    /// Pauses partitions read far ahead of their owners or followed from an offset not yet
    /// sought, or all of them while no post waits, and resumes them once they catch up and a
    /// post waits again. A partition not followed is not paused for that alone (its records
    /// are skipped): resumed once followed, it would be fetched only at librdkafka's next
    /// wake-up (`assign_ahead`), while one fetched all along is sought at once.
    fn pace_ahead(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let unwanted = self
            .ahead
            .last_wanted
            .is_none_or(|t| t.elapsed() >= AHEAD_PAUSE_AFTER);
        for q in &self.ahead.held {
            let pause = unwanted
                || (self.lookahead.follows(*q) && !self.ahead.at.contains_key(q))
                || self.lookahead.pending(*q) >= AHEAD_MAX_PENDING;
            if self.ahead.paused.get(q).copied().unwrap_or(false) == pause {
                continue;
            }
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.k.routed_topic, *q as i32);
            if pause {
                c.ahead.pause(&tpl)?;
            } else {
                c.ahead.resume(&tpl)?;
            }
            self.ahead.paused.insert(*q, pause);
        }
        Ok(())
    }

    /// Decides for the index, ahead of their owners, the posts that waiting heads were found
    /// to wait for (`AheadReader::awaited`), where nothing undecided that such a post sees
    /// could match it (`clear_before`, the checks a head passes) and its decision is certain to
    /// make it unique, or a duplicate that stores nothing (`Engine::decide_ahead`). What it
    /// stores is then known exactly and the heads that wait for it need not
    /// (`Lookahead::resolve`); a local state records a unique post's entry as it would the
    /// owner's, which the changelog brings later and the index recognizes. Returns how many
    /// were resolved. On the dev stream x4 most posts a head waits for are the first of their
    /// cascade on the other worker, with no match yet.
    pub(super) fn resolve_awaited(&mut self) -> usize {
        let awaited: BTreeSet<(u32, OrderKey)> = self.ahead.awaited.take().into_iter().collect();
        let mut n = 0;
        let mut grams = Vec::new();
        for (q, key) in awaited {
            let Some(x) = self.lookahead.awaited(q, &key) else {
                continue;
            };
            if !self.clear_before(q, &key, &x.sketch()) {
                continue;
            }
            distinct_bigrams(&x.chars, &mut grams);
            let known = (&x.id, x.created_at);
            let Some(decided) = self.engine.decide_ahead(&key, known, x.sketch(), &grams) else {
                continue;
            };
            self.lookahead.resolve(q, &key);
            if let (Some(l), Ahead::Unique(gen, entry)) = (self.local.as_mut(), decided) {
                l.record(gen, entry);
            }
            self.ahead.resolved += 1;
            n += 1;
        }
        n
    }

    /// Whether nothing undecided that a post of partition `q` with key `key` sees could match
    /// it: every other partition allows it or clears it, as for a head (`gate::held_back_by`),
    /// and so do the posts before it in its own partition.
    fn clear_before(&self, q: u32, key: &OrderKey, post: &Sketch<'_>) -> bool {
        let bits = Bits::of(post);
        let check = |r: u32| {
            let c = if self.owned.contains_key(&r) {
                self.own_check(r, key, post, &bits, &mut None)
            } else {
                self.lookahead
                    .check_resuming(r, key, post, &bits, &mut None)
            };
            c == Check::Clear
        };
        let bound = |r| match self.head_key(r) {
            Some(k) => Bound::Key(k),
            None => self.bound(r),
        };
        let v = self.k.visibility();
        gate::held_back_by(key, q, self.partitions, &v, bound, check).is_none() && check(q)
    }
}
