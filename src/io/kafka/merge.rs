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
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wake {
    at: Option<Instant>,
}

impl Wake {
    /// Notes a record that arrived at `now` on a partition that was quiet (`was_quiet`).
    pub(crate) fn record(&mut self, was_quiet: bool, now: Instant) {
        if was_quiet {
            self.at = Some(now);
        }
    }

    /// Whether quiet partitions may stop holding others back at `now`.
    pub(crate) fn settled(&self, grace: Duration, now: Instant) -> bool {
        self.at
            .is_none_or(|t| now.saturating_duration_since(t) >= grace)
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
        let grace = Duration::from_millis(250);
        let mut w = Wake::default();
        assert!(w.settled(grace, t0), "nothing woke yet");
        // A record on a partition that was busy anyway: no wake-up.
        w.record(false, t0);
        assert!(w.settled(grace, t0));
        w.record(true, t0);
        assert!(!w.settled(grace, t0));
        assert!(!w.settled(grace, t0 + Duration::from_millis(249)));
        assert!(w.settled(grace, t0 + grace));
        // Another wake-up starts the grace again; a zero grace never holds back.
        w.record(true, t0 + Duration::from_secs(5));
        assert!(!w.settled(grace, t0 + Duration::from_millis(5100)));
        assert!(w.settled(Duration::ZERO, t0 + Duration::from_secs(5)));
    }

    #[test]
    fn a_record_without_time_follows_the_latest() {
        assert_eq!(merge_time(None, 42), 42);
        assert_eq!(merge_time(Some(EventTime(7)), 42), 7);
    }
}
