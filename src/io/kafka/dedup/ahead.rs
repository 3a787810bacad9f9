//! Reading ahead into the routed partitions other workers own (`lookahead`): a consumer
//! outside the group follows each such partition from its owner's newest progress marker, so
//! that a post whose turn has not come in the global order can still be decided when nothing
//! undecided there could match it. Only read, and only fetched, while posts wait on another
//! partition.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::super::gate::Bound;
use super::super::lookahead::Check;
use super::super::wire::{decode_routed_record, routed_offset, Words};
use super::super::KafkaError;
use super::{Clients, Worker};

/// Routed records read ahead per round at most.
const AHEAD_POLL_BATCH: usize = 64;

/// A partition followed stops being fetched while this many of its posts are undecided as far
/// as this worker knows (memory stays bounded while its owner is slow); past that its posts
/// wait for markers as in the strict order.
const AHEAD_MAX_PENDING: usize = 50_000;

/// The read-ahead consumer stops fetching when no post has waited on another worker's
/// partition for this long, and starts again (from the owners' newest markers, if it lags)
/// when one does: on a live stream markers settle nearly every wait, and each consumer that
/// polls adds to the broker's load, most of all on brokers that hold every fetch for the
/// whole fetch wait (tansu).
const AHEAD_PAUSE_AFTER: Duration = Duration::from_millis(500);

/// A partition is followed again from its owner's newest marker when the reading lags that
/// marker by more than this many records (everything before it is decided).
const AHEAD_RESTART_LAG: u64 = 4;

/// What the consumer reading ahead was told: per partition, the offset it was assigned at and
/// whether it is paused.
#[derive(Default)]
pub(super) struct AheadReader {
    assigned: BTreeMap<u32, u64>,
    paused: BTreeMap<u32, bool>,
    /// Per partition, a gap met at this offset: followed again only from a marker past it.
    gaps: BTreeMap<u32, u64>,
    /// Whether a post waited on a partition it does not own in the last round.
    pub(super) wanted: bool,
    /// When a post last waited on a partition this worker does not own.
    last_wanted: Option<Instant>,
    /// `Lookahead::check` outcomes: clear, not followed, unread, may match, too far ahead.
    pub(super) checks: std::cell::Cell<[u64; 5]>,
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
        let mut changed = followed.keys().any(|q| !want.contains_key(q));
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
                changed = true;
            }
        }
        if changed {
            self.assign_ahead(c)?;
        }
        self.pace_ahead(c)?;
        if !wanted || self.ahead.assigned.is_empty() {
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
            // Read ahead only to be checked, never output: no words.
            let posts = decode_routed_record(m.payload().unwrap_or_default(), Words::Skip).ok();
            if !self.lookahead.read(q, offset, posts) {
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

    /// Assigns the read-ahead consumer what `lookahead` follows, each at its reading point.
    fn assign_ahead(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let followed: BTreeMap<u32, u64> = self.lookahead.followed().collect();
        if followed == self.ahead.assigned {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (q, offset) in &followed {
            tpl.add_partition_offset(
                &self.k.routed_topic,
                *q as i32,
                Offset::Offset(*offset as i64),
            )?;
        }
        c.ahead.assign(&tpl)?;
        // A partition kept across assignments may keep librdkafka's pause: resume all, so that
        // what `pace_ahead` believes holds.
        c.ahead.resume(&tpl)?;
        self.ahead.assigned = followed;
        self.ahead.paused.clear();
        Ok(())
    }

    /// Pauses partitions read far ahead of their owners, or all of them while no post waits,
    /// and resumes them once they catch up and a post waits again.
    fn pace_ahead(&mut self, c: &Clients) -> Result<(), KafkaError> {
        let unwanted = self
            .ahead
            .last_wanted
            .is_none_or(|t| t.elapsed() >= AHEAD_PAUSE_AFTER);
        for q in self.ahead.assigned.keys() {
            let pause = unwanted || self.lookahead.pending(*q) >= AHEAD_MAX_PENDING;
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
}
