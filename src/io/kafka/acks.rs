//! In-order offset tracking for at-least-once delivery: an input offset becomes committable only
//! when every output of it and of every earlier offset of its partition is acknowledged. Also
//! where a route stage's delivered envelopes end (`DeliveredEnds`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// Outstanding outputs per input offset, per partition.
#[derive(Debug, Default)]
pub struct Acks {
    parts: BTreeMap<u32, Part>,
}

#[derive(Debug, Default)]
struct Part {
    pending: VecDeque<(u64, u32)>,
    done_through: Option<u64>,
}

impl Acks {
    /// Registers input `offset` of `partition` with `outputs` unacknowledged outputs. Offsets of a
    /// partition must be registered in increasing order.
    pub fn register(&mut self, partition: u32, offset: u64, outputs: u32) {
        let p = self.parts.entry(partition).or_default();
        p.pending.push_back((offset, outputs));
        p.advance();
    }

    /// Acknowledges one output of `offset`.
    pub fn ack(&mut self, partition: u32, offset: u64) {
        let Some(p) = self.parts.get_mut(&partition) else {
            return;
        };
        if let Ok(i) = p.pending.binary_search_by_key(&offset, |(o, _)| *o) {
            p.pending[i].1 = p.pending[i].1.saturating_sub(1);
        }
        p.advance();
    }

    /// The largest offset of `partition` such that it and all earlier registered offsets are fully
    /// acknowledged.
    pub fn done_through(&self, partition: u32) -> Option<u64> {
        self.parts.get(&partition).and_then(|p| p.done_through)
    }

    /// Number of inputs still waiting for acknowledgements.
    pub fn in_flight(&self) -> usize {
        self.parts.values().map(|p| p.pending.len()).sum()
    }

    /// Forgets a partition (revoked).
    pub fn remove(&mut self, partition: u32) {
        self.parts.remove(&partition);
    }
}

impl Part {
    fn advance(&mut self) {
        while let Some(&(o, 0)) = self.pending.front() {
            self.done_through = Some(o);
            self.pending.pop_front();
        }
    }
}

/// Per routed partition, one past the offset of the last envelope a route stage's producer
/// delivered there: noted in the delivery callback, before the report reaches the stage, so once
/// the stage has settled every report these are where its envelopes end on the broker.
#[derive(Debug, Default)]
pub struct DeliveredEnds(Mutex<BTreeMap<u32, u64>>);

impl DeliveredEnds {
    /// Notes a record delivered at `offset` of `partition` (librdkafka's numbers).
    pub(super) fn note(&self, partition: i32, offset: i64) {
        if let (Ok(p), Ok(o), Ok(mut ends)) = (
            u32::try_from(partition),
            u64::try_from(offset),
            self.0.lock(),
        ) {
            let end = ends.entry(p).or_default();
            *end = (*end).max(o + 1);
        }
    }

    /// One past the last envelope delivered to `partition`, if any was.
    pub fn end(&self, partition: u32) -> Option<u64> {
        self.0.lock().ok()?.get(&partition).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivered_ends_keep_the_furthest_offset_per_partition() {
        let e = DeliveredEnds::default();
        assert_eq!(e.end(3), None);
        e.note(3, 41);
        e.note(3, 7);
        e.note(5, 0);
        e.note(5, -1001);
        e.note(-1, 9);
        assert_eq!((e.end(3), e.end(5), e.end(4)), (Some(42), Some(1), None));
    }

    #[test]
    fn an_offset_waits_for_earlier_ones() {
        let mut a = Acks::default();
        a.register(0, 10, 2);
        a.register(0, 11, 1);
        a.ack(0, 11);
        assert_eq!(a.done_through(0), None, "11 is acked but 10 is not");
        a.ack(0, 10);
        assert_eq!(a.done_through(0), None);
        a.ack(0, 10);
        assert_eq!(a.done_through(0), Some(11));
        a.register(0, 12, 0);
        assert_eq!(a.done_through(0), Some(12));
        assert_eq!(a.in_flight(), 0);
    }

    #[test]
    fn partitions_are_independent() {
        let mut a = Acks::default();
        a.register(0, 1, 1);
        a.register(1, 1, 1);
        a.ack(1, 1);
        assert_eq!(a.done_through(0), None);
        assert_eq!(a.done_through(1), Some(1));
    }
}
