//! Merging raw partitions by event time, as the route stage and `replay` both do: the record to
//! take next is the earliest buffered head, ties to the lower partition; a record without a
//! usable time takes the latest time seen before it, so it goes out in arrival order.

use crate::types::EventTime;

/// The merge time of a record: its event time, or `latest` (the latest time seen) without one.
pub(crate) fn merge_time(created_at: Option<EventTime>, latest: i64) -> i64 {
    created_at.map_or(latest, |t| t.0)
}

/// Of the partitions' buffered heads `(partition, merge time)`, the one to take next.
pub(crate) fn earliest(heads: impl IntoIterator<Item = (u32, i64)>) -> Option<u32> {
    heads
        .into_iter()
        .map(|(p, time)| (time, p))
        .min()
        .map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_head_first_ties_to_the_lower_partition() {
        assert_eq!(earliest([(0, 20), (1, 10), (2, 15)]), Some(1));
        assert_eq!(earliest([(3, 10), (1, 10)]), Some(1));
        assert_eq!(earliest(std::iter::empty()), None);
    }

    #[test]
    fn a_record_without_time_follows_the_latest() {
        assert_eq!(merge_time(None, 42), 42);
        assert_eq!(merge_time(Some(EventTime(7)), 42), 7);
    }
}
