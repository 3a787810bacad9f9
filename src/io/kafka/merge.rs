//! Merging raw partitions by event time, as the route stage and `replay` both do: the record to
//! take next is the earliest buffered head; within an event second, the one whose raw record
//! arrived first (its Kafka timestamp), then the lower partition; a record without a usable time
//! takes the latest time seen before it, so it goes out in arrival order. Breaking ties by
//! arrival lets a live stream flow: by partition alone, a head of a high partition waited until
//! every lower partition had a record of the next event second (up to a second, measured).

use std::time::{Duration, Instant};

use crate::types::EventTime;

/// When the partitions of a stage last woke up: a record arrived on a partition that was quiet
/// (caught up and silent). Records of several partitions written together (one producer's
/// batch) reach a consumer one partition at a time, and a quiet partition's evidence of being
/// caught up (the broker's last high watermark, an end-of-partition event) predates the burst:
/// for `grace` after a wake-up, quiet partitions hold the others back as if their next record
/// were on its way, so the first records of a burst are merged in order, not in arrival order.
/// The clock is read once a round (`tick`), not each time a partition's bound is asked for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wake {
    grace: Duration,
    at: Option<Instant>,
}

impl Wake {
    /// No wake-up yet; each one holds quiet partitions back for `grace` (zero: never).
    pub(crate) fn new(grace: Duration) -> Wake {
        Wake { grace, at: None }
    }

    /// Notes a record that arrived at `now` on a partition that was quiet (`was_quiet`).
    pub(crate) fn record(&mut self, was_quiet: bool, now: Instant) {
        if was_quiet && !self.grace.is_zero() {
            self.at = Some(now);
        }
    }

    /// Ends the grace if it has passed by `now`.
    pub(crate) fn tick(&mut self, now: Instant) {
        if self
            .at
            .is_some_and(|t| now.saturating_duration_since(t) >= self.grace)
        {
            self.at = None;
        }
    }

    /// Whether quiet partitions may stop holding others back (as of the last `tick`).
    pub(crate) fn settled(&self) -> bool {
        self.at.is_none()
    }
}

/// The merge time of a record: its event time, or `latest` (the latest time seen) without one.
pub(crate) fn merge_time(created_at: Option<EventTime>, latest: i64) -> i64 {
    created_at.map_or(latest, |t| t.0)
}

/// Of the partitions' buffered heads `(partition, merge time, arrival)`, the one to take next
/// (arrival: the record's Kafka timestamp in ms, 0 if it has none).
pub(crate) fn earliest(heads: impl IntoIterator<Item = (u32, i64, i64)>) -> Option<u32> {
    heads
        .into_iter()
        .map(|(p, time, arrival)| (time, arrival, p))
        .min()
        .map(|(_, _, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_head_first_then_first_arrived_then_lower_partition() {
        assert_eq!(earliest([(0, 20, 0), (1, 10, 9), (2, 15, 0)]), Some(1));
        assert_eq!(earliest([(3, 10, 5), (1, 10, 5)]), Some(1));
        assert_eq!(earliest([(1, 10, 7), (3, 10, 5)]), Some(3));
        assert_eq!(earliest(std::iter::empty()), None);
    }

    #[test]
    fn quiet_partitions_hold_back_for_the_grace_after_a_wake_up() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = Wake::new(ms(250));
        assert!(w.settled(), "nothing woke yet");
        // A record on a partition that was busy anyway: no wake-up.
        w.record(false, t0);
        assert!(w.settled());
        w.record(true, t0);
        assert!(!w.settled());
        w.tick(t0 + ms(249));
        assert!(!w.settled());
        w.tick(t0 + ms(250));
        assert!(w.settled());
        // Another wake-up starts the grace again.
        w.record(true, t0 + ms(5000));
        w.tick(t0 + ms(5100));
        assert!(!w.settled());
        // A zero grace never holds back.
        let mut z = Wake::new(Duration::ZERO);
        z.record(true, t0);
        assert!(z.settled());
    }

    #[test]
    fn a_record_without_time_follows_the_latest() {
        assert_eq!(merge_time(None, 42), 42);
        assert_eq!(merge_time(Some(EventTime(7)), 42), 7);
    }
}
