//! Merging raw partitions by event time, as the route stage and `replay` both do: the record to
//! take next is the earliest buffered head; within an event second, the one whose raw record
//! arrived first (its Kafka timestamp), then the lower partition; a record without a usable time
//! takes the latest time seen before it, so it goes out in arrival order. Breaking ties by
//! arrival lets a live stream flow: by partition alone, a head of a high partition waited until
//! every lower partition had a record of the next event second (up to a second, measured).

use crate::types::EventTime;

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
    fn a_record_without_time_follows_the_latest() {
        assert_eq!(merge_time(None, 42), 42);
        assert_eq!(merge_time(Some(EventTime(7)), 42), 7);
    }
}
