//! How far a consumer has fetched its partitions, as librdkafka last heard from the broker, and
//! the offsets its group committed: what the stages' idleness rules read.

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use super::KafkaError;

/// The low and high watermarks of a partition as librdkafka last heard them from the broker
/// (fetch responses update them; no request is made), if known. rust-rdkafka 0.39 wraps only
/// the querying variant, which asks the broker and blocks.
pub fn cached_watermarks<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    partition: u32,
) -> Option<(i64, i64)> {
    use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the handle is valid while `client` is borrowed; `topic` is NUL-terminated and
    // outlives the call; `low` and `high` are valid for writes. The function only reads
    // librdkafka's cached partition state under its own lock.
    let err = unsafe {
        rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            topic.as_ptr(),
            partition as i32,
            &mut low,
            &mut high,
        )
    };
    (err == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some((low, high))
}

/// Whether a consumer has fetched all of a partition, as far as it can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The broker's last reported high watermark is where consumption stands.
    All,
    /// The broker reported records past it: a fetch left the partition out (tansu fills a
    /// response from the first partitions it lists), so more is coming.
    More,
    /// No fetch response for the partition yet.
    NoWatermark,
    /// The start offset could not be looked up: only the idle timer can tell.
    Unknown,
}

/// What a stage knows about how far it has fetched one of its partitions. Both stages merge
/// their partitions in order and let a silent partition stop holding the others back after
/// `idle_after_ms`; this keeps a partition that is silent only because it has not been fetched
/// yet from counting as caught up.
#[derive(Clone, Debug)]
pub struct FetchProgress {
    /// Where consumption started after the assignment: the committed offset, or `None` for
    /// the log start (nothing committed). Outer `None`: the lookup failed.
    start: Option<Option<i64>>,
    polled_to: Option<u64>,
    state: Fetched,
}

impl FetchProgress {
    /// Progress of a partition just assigned, starting at `start` (see `committed_starts`).
    pub fn new(start: Option<Option<i64>>) -> FetchProgress {
        FetchProgress {
            start,
            polled_to: None,
            state: Fetched::NoWatermark,
        }
    }

    /// Notes a polled record.
    pub fn polled(&mut self, offset: u64) {
        self.polled_to = Some(offset + 1);
    }

    /// One past the last record polled since the assignment, if any was.
    pub fn polled_to(&self) -> Option<u64> {
        self.polled_to
    }

    /// Where consumption started after the assignment (see `new`).
    pub fn start(&self) -> Option<Option<i64>> {
        self.start
    }

    /// Compares the position with librdkafka's cached watermarks (no request).
    pub fn refresh<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>, topic: &str, p: u32) {
        let marks = cached_watermarks(consumer.client(), topic, p);
        let position = match (self.polled_to, self.start, marks) {
            (Some(next), _, _) => Some(next as i64),
            (None, Some(Some(committed)), _) => Some(committed),
            (None, Some(None), Some((low, _))) => Some(low),
            _ => None,
        };
        self.state = match (marks, position) {
            (Some((_, high)), Some(at)) if high > at => Fetched::More,
            (Some(_), Some(_)) => Fetched::All,
            (None, _) if self.start.is_some() || self.polled_to.is_some() => Fetched::NoWatermark,
            _ => Fetched::Unknown,
        };
    }

    /// Whether the broker reported nothing past what was fetched (not just no report).
    pub fn caught_up(&self) -> bool {
        matches!(self.state, Fetched::All)
    }

    /// Whether the partition may be caught up: the broker reported nothing past what was
    /// fetched, or there is no way to tell.
    pub fn may_be_caught_up(&self) -> bool {
        matches!(self.state, Fetched::All | Fetched::Unknown)
    }
}

/// How many partitions `topic` has, as the broker reports it (a metadata request); 0 when the
/// topic does not exist.
pub fn partition_count<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> Result<usize, KafkaError> {
    let md = consumer.fetch_metadata(Some(topic), timeout)?;
    Ok(md.topics().first().map_or(0, |t| t.partitions().len()))
}

/// The start offsets of newly assigned partitions: the group's committed offset, `None` when
/// nothing is committed (consumption starts at the log start). Partitions missing from the
/// map could not be looked up.
pub fn committed_starts<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    parts: &[u32],
) -> std::collections::BTreeMap<u32, Option<i64>> {
    committed_offsets(consumer, topic, parts, Duration::from_secs(5)).unwrap_or_else(|e| {
        tracing::warn!(topic, error = %e, "committed offsets unknown: idle partitions are told by time only");
        Default::default()
    })
}

/// The offsets the consumer's group has committed on `parts` of `topic` (a request): `None`
/// for a partition without one.
pub fn committed_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    parts: &[u32],
    timeout: Duration,
) -> Result<std::collections::BTreeMap<u32, Option<i64>>, KafkaError> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in parts {
        tpl.add_partition(topic, *p as i32);
    }
    Ok(consumer
        .committed_offsets(tpl, timeout)?
        .elements()
        .iter()
        .map(|e| {
            let at = match e.offset() {
                rdkafka::Offset::Offset(o) => Some(o),
                _ => None,
            };
            (e.partition() as u32, at)
        })
        .collect())
}

/// The low and high watermarks of `parts` of `topic`, asked in two ListOffsets requests (the
/// log start of every partition at once, then the end of every partition at once). Read one
/// partition at a time with `fetch_watermarks` (two requests, answered before the next
/// partition is asked), 8 partitions took 16 requests, one after another.
pub fn watermarks<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    parts: &[u32],
    timeout: Duration,
) -> Result<std::collections::BTreeMap<u32, (i64, i64)>, KafkaError> {
    let low = list_offsets(consumer, topic, parts, rdkafka::Offset::Beginning, timeout)?;
    let high = list_offsets(consumer, topic, parts, rdkafka::Offset::End, timeout)?;
    parts
        .iter()
        .map(|p| match (low.get(p), high.get(p)) {
            (Some(l), Some(h)) => Ok((*p, (*l, *h))),
            _ => Err(KafkaError::Config(format!(
                "the broker answered no watermarks for {topic} partition {p}"
            ))),
        })
        .collect()
}

/// The offset at `end` (`Offset::Beginning` or `Offset::End`) of each of `parts` of `topic`,
/// in one ListOffsets request (`offsets_for_times` with the protocol's special timestamps).
fn list_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    parts: &[u32],
    end: rdkafka::Offset,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<u32, i64>, KafkaError> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in parts {
        tpl.add_partition_offset(topic, *p as i32, end)?;
    }
    let mut out = std::collections::BTreeMap::new();
    for e in consumer.offsets_for_times(tpl, timeout)?.elements() {
        e.error()?;
        if let rdkafka::Offset::Offset(o) = e.offset() {
            out.insert(e.partition() as u32, o);
        }
    }
    Ok(out)
}
