//! A group consumer whose partitions are read from queues of their own (librdkafka's split
//! partition queues), so that a stage takes records from the partitions it needs rather than in
//! the order the broker answered.
//!
//! A consumer's single queue hands out records in the order its fetches returned them, and a
//! broker may answer a fetch with one partition's records up to `fetch.max.bytes`: tansu 0.6
//! answers with whole partitions. The route stage merges its partitions by event time, so it
//! emits nothing until every partition has a record: reading one queue, it decoded and buffered
//! 352,248 of a 400,000-post backlog in eight partitions before its first post went out, and the
//! dedup stage of `run --role all` sat idle for the 0.8 s that took. Split, each partition's
//! queue is read only while the stage's buffer for it is short, and librdkafka bounds each
//! partition's prefetch on its own (`queued.min.messages`, `queued.max.messages.kbytes`).
//!
//! Records of a partition fetched before its queue was split stay on the consumer's queue: a
//! reader empties that queue (`Split::main_pending`) before reading the partition queues, so
//! each partition's records still come in offset order.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::Thread;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;

/// A group consumer of one topic with a queue per assigned partition. It wakes the thread that
/// made it (`Split::wait`) when any of its queues receives something.
pub struct Split<C: ConsumerContext + 'static> {
    // Dropped before the consumer (fields drop in order).
    queues: RefCell<BTreeMap<u32, Rc<PartitionQueue<C>>>>,
    main: MainQueue,
    consumer: Arc<BaseConsumer<C>>,
    topic: String,
    reader: Thread,
}

/// A handle on the consumer's own queue, to count what it holds.
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_queue_get_consumer` and is destroyed once,
        // before the consumer it belongs to (`Split`'s field order).
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

impl<C: ConsumerContext + 'static> Split<C> {
    /// Wraps `consumer` of `topic`, to be read by the calling thread.
    pub fn new(mut consumer: BaseConsumer<C>, topic: &str) -> Self {
        let reader = std::thread::current();
        let wake = reader.clone();
        consumer.set_nonempty_callback(move || wake.unpark());
        // SAFETY: the client pointer is valid while `consumer` lives; the returned handle (a
        // new reference to its queue, never null for a consumer) is released by `MainQueue`.
        let main = MainQueue(unsafe {
            rdsys::rd_kafka_queue_get_consumer(consumer.client().native_ptr())
        });
        assert!(!main.0.is_null(), "a group consumer has a consumer queue");
        Split {
            queues: RefCell::default(),
            main,
            consumer: Arc::new(consumer),
            topic: topic.to_string(),
            reader,
        }
    }

    /// The consumer (commits, offsets, metadata).
    pub fn consumer(&self) -> &BaseConsumer<C> {
        &self.consumer
    }

    /// Gives partition `p` a queue of its own. Called after every assignment that includes it:
    /// an assignment deactivates the queues split before it. Returns whether librdkafka knew
    /// the partition (if not, its records keep arriving on the consumer's queue).
    pub fn split(&self, p: u32) -> bool {
        let Some(mut q) = self.consumer.split_partition_queue(&self.topic, p as i32) else {
            self.remove(p);
            return false;
        };
        let wake = self.reader.clone();
        q.set_nonempty_callback(move || wake.unpark());
        self.queues.borrow_mut().insert(p, Rc::new(q));
        true
    }

    /// Forgets partition `p`'s queue (revoked).
    pub fn remove(&self, p: u32) {
        self.queues.borrow_mut().remove(&p);
    }

    /// How many events and records the consumer's queue holds. Polling it returns nothing
    /// after serving a rebalance, a log line or statistics, so only this tells it is empty.
    pub fn main_pending(&self) -> usize {
        // SAFETY: the handle is valid while `self` lives.
        unsafe { rdsys::rd_kafka_queue_length(self.main.0) }
    }

    /// The next event or record of the consumer's queue, without waiting: rebalances (served
    /// by the context while polling) and records fetched before their partition was split.
    /// `None` also after an event was served (`main_pending`).
    pub fn poll_main(&self) -> Option<KafkaResult<BorrowedMessage<'_>>> {
        self.consumer.poll(Duration::ZERO)
    }

    /// Hands the records (and partition events, such as its end) of partition `p`'s own queue
    /// to `take`, without waiting: at most `max` of them, while it returns true and the queue
    /// holds any. Returns how many it was handed (none if the partition has no queue of its
    /// own).
    pub fn read_partition(
        &self,
        p: u32,
        max: usize,
        mut take: impl FnMut(KafkaResult<BorrowedMessage<'_>>) -> bool,
    ) -> usize {
        let Some(q) = self.queues.borrow().get(&p).cloned() else {
            return 0;
        };
        let mut n = 0;
        while n < max {
            let Some(m) = q.poll(Duration::ZERO) else {
                break;
            };
            n += 1;
            if !take(m) {
                break;
            }
        }
        n
    }

    /// Blocks the reading thread until one of the queues receives something, or for `timeout`
    /// at most (it may return sooner). A queue wakes it only as it goes from empty to holding
    /// something (librdkafka's non-empty callback): a queue left holding a record or an event
    /// does not wake it again, so a reader empties the queues it waits for first.
    pub fn wait(&self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rdkafka::consumer::Consumer;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{ClientConfig, Message};

    use super::*;
    use crate::io::kafka::client::{consumer_config, RebalanceEvent, RebalanceLog};
    use crate::io::kafka::KafkaConfig;

    fn produce(brokers: &str, partition: i32, n: usize, tag: &str) {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .unwrap();
        for i in 0..n {
            let v = format!("{tag}{i}");
            p.send(
                BaseRecord::<(), _>::to("t")
                    .partition(partition)
                    .payload(&v),
            )
            .unwrap();
            p.poll(Duration::ZERO);
        }
        p.flush(Duration::from_secs(20)).unwrap();
    }

    // A partition's records are read from its own queue, in offset order, without reading the
    // backlog of another partition first; the reader is woken when a queue receives a record.
    #[test]
    fn each_partition_is_read_on_its_own_in_order_and_arrivals_wake_the_reader() {
        let cluster = crate::io::kafka::admin::mock_broker(1, &[("t".into(), 2)]).unwrap();
        let brokers = cluster.bootstrap_servers();
        produce(&brokers, 0, 3_000, "a");
        produce(&brokers, 1, 5, "b");
        let k = KafkaConfig {
            brokers: brokers.clone(),
            ..Default::default()
        };
        let consumer: BaseConsumer<RebalanceLog> = consumer_config(&k, "g")
            .create_with_context(RebalanceLog::new("t"))
            .unwrap();
        consumer.subscribe(&["t"]).unwrap();
        let q = Split::new(consumer, "t");
        let mut got: [Vec<String>; 2] = Default::default();
        let take = |m: KafkaResult<BorrowedMessage<'_>>, got: &mut [Vec<String>; 2]| {
            if let Ok(m) = m {
                let v = String::from_utf8_lossy(m.payload().unwrap()).to_string();
                assert_eq!(m.offset() as usize, got[m.partition() as usize].len());
                got[m.partition() as usize].push(v);
            }
        };
        let until = Instant::now() + Duration::from_secs(30);
        // Partition 1 in full, reading partition 0 only where it reached the consumer's queue
        // before the split.
        while got[1].len() < 5 {
            assert!(Instant::now() < until, "partition 1 not read: {got:?}");
            if q.main_pending() > 0 {
                if let Some(m) = q.poll_main() {
                    take(m, &mut got);
                }
                for ev in q.consumer().context().drain() {
                    if let RebalanceEvent::Assigned(ps) = ev {
                        ps.into_iter().for_each(|p| assert!(q.split(p)));
                    }
                }
                continue;
            }
            q.read_partition(1, usize::MAX, |m| {
                take(m, &mut got);
                true
            });
            q.wait(Duration::from_millis(50));
        }
        assert!(got[0].len() < 3_000, "partition 0 was read first");
        while got[0].len() < 3_000 {
            assert!(
                Instant::now() < until,
                "partition 0 not read: {}",
                got[0].len()
            );
            let n = q.read_partition(0, usize::MAX, |m| {
                take(m, &mut got);
                !got[0].len().is_multiple_of(1_000)
            });
            if n == 0 {
                q.wait(Duration::from_millis(50));
            }
        }
        assert_eq!(got[0].last().map(String::as_str), Some("a2999"));
        // A record arriving wakes a reader that waits long, once it has emptied the queue: a
        // queue wakes it only as it goes from empty to holding something. (Waiting first, this
        // test failed under load: partition 1's end-of-partition event, left on its queue since
        // the loop above, kept the record from waking it.)
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            produce(&brokers, 1, 1, "c");
        });
        let start = Instant::now();
        loop {
            q.read_partition(1, usize::MAX, |m| {
                take(m, &mut got);
                true
            });
            if got[1].len() == 6 {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "not woken");
            q.wait(Duration::from_secs(60));
        }
        late.join().unwrap();
        assert_eq!(got[1], ["b0", "b1", "b2", "b3", "b4", "c0"]);
    }
}
