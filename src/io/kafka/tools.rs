//! Moving JSON lines between files and topics: `simdedup produce` feeds a raw topic from a file,
//! `simdedup export` writes a topic's records to a file (used by tests, benchmarks and the demo;
//! Debian's kcat cannot talk to every broker librdkafka can).

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::client::{self, AckContext, Tag};
use super::fetch;
use super::polled::PolledProducer;
use super::{KafkaConfig, KafkaError};

/// Records `passthrough` copies per poll round before it settles deliveries and stores offsets.
const PASSTHROUGH_POLL_BATCH: usize = 4096;

/// Produces every line of `input` (`-` for stdin) to `topic` (created with `create` partitions if
/// given and missing), spread over its partitions by line number; returns the number of records,
/// all acknowledged.
pub fn produce(
    k: &KafkaConfig,
    topic: &str,
    create: Option<i32>,
    input: &str,
) -> Result<u64, KafkaError> {
    let reader: Box<dyn BufRead> = if input == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        let f = std::fs::File::open(input)
            .map_err(|e| KafkaError::Config(format!("cannot open {input}: {e}")))?;
        Box::new(std::io::BufReader::with_capacity(1 << 20, f))
    };
    let mut read_err = None;
    let lines = reader.split(b'\n').map_while(|l| match l {
        Ok(l) => Some(l),
        Err(e) => {
            read_err = Some(e);
            None
        }
    });
    let n = produce_lines(k, topic, create, lines)?;
    match read_err {
        Some(e) => Err(KafkaError::Config(format!("cannot read {input}: {e}"))),
        None => Ok(n),
    }
}

/// Produces `lines` to `topic` (created with `create` partitions if given and missing), keyed
/// by line number; returns the number of records, all acknowledged. Delivery reports are
/// settled while sending, so an endless source does not pile them up.
pub fn produce_lines(
    k: &KafkaConfig,
    topic: &str,
    create: Option<i32>,
    lines: impl Iterator<Item = Vec<u8>>,
) -> Result<u64, KafkaError> {
    if let Some(partitions) = create {
        super::admin::ensure_topics(k, &[(topic, partitions)])?;
    }
    let (producer, deliveries, ready) = client::paced_producer(k)?;
    // Connected, and given its producer id, before the first record: a paced source (`generate
    // --rate`) would otherwise timestamp its first records while the client still connects, and
    // they would reach the broker late, in a burst.
    producer
        .client()
        .fetch_metadata(Some(topic), Duration::from_secs(10))?;
    wait_until_ready(&ready, PRODUCER_ID_WAIT);
    let check = |d: client::Delivery| {
        d.result.map_err(|message| KafkaError::Delivery {
            topic: d.topic.clone(),
            message,
        })
    };
    let (mut n, mut acked) = (0u64, 0u64);
    for line in lines {
        let key = n.to_string();
        send_retrying(&producer, topic, key.as_bytes(), &line)?;
        n += 1;
        while let Ok(d) = deliveries.try_recv() {
            check(d)?;
            acked += 1;
        }
    }
    producer.flush(Duration::from_secs(60))?;
    while acked < n {
        let d = deliveries
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| KafkaError::Config("delivery reports stopped".into()))?;
        check(d)?;
        acked += 1;
    }
    Ok(n)
}

/// How long `produce_lines` waits for its producer's id before sending anyway.
const PRODUCER_ID_WAIT: Duration = Duration::from_secs(10);

/// Waits until `ready` is set (`client::paced_producer`), at most `limit`; says so if it is not.
fn wait_until_ready(ready: &AtomicBool, limit: Duration) {
    let until = Instant::now() + limit;
    while !ready.load(Ordering::Acquire) {
        if Instant::now() >= until {
            tracing::warn!(
                waited_secs = limit.as_secs(),
                "the producer has no producer id yet: the first records may reach the broker late"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn send_retrying(
    p: &PolledProducer<AckContext>,
    topic: &str,
    key: &[u8],
    payload: &[u8],
) -> Result<(), KafkaError> {
    let tag = Box::new(Tag::Record {
        partition: 0,
        offset: 0,
    });
    let mut rec = BaseRecord::with_opaque_to(topic, tag)
        .key(key)
        .payload(payload);
    loop {
        match p.send(rec) {
            Ok(()) => return Ok(()),
            Err((RdError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Writes every record of `topic` (all partitions, from the beginning) to `out`, one per line,
/// until no record arrived for `idle`; returns the count. With `timestamps`, each line starts
/// with the record's Kafka timestamp in unix ms (-1 without one) and a tab.
pub fn export(
    k: &KafkaConfig,
    topic: &str,
    out: &mut dyn Write,
    idle: Duration,
    timestamps: bool,
) -> Result<u64, KafkaError> {
    let mut config = client::reader_config(k);
    // Each partition is read from offset 0, not from the start the broker names: tansu 0.6's
    // memory storage can name the second record batch's offset as a partition's start, and an
    // export that asked for it missed the first batch (4 verdicts of 120,000 in one run of
    // `scripts/bench-live.sh 2`). Where 0 is gone (retention), the reset goes to the log's start.
    config.set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer<client::QuietContext> =
        client::create(k, &config, client::QuietContext)?;
    let parts = fetch::partition_count(&consumer, topic, Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    let mut marks = Vec::with_capacity(parts);
    for p in 0..parts {
        tpl.add_partition_offset(topic, p as i32, Offset::Offset(0))?;
        marks.push(consumer.fetch_watermarks(topic, p as i32, Duration::from_secs(10))?);
    }
    consumer.assign(&tpl)?;
    let mut ends = ExportEnds::new(&marks);
    let mut n = 0u64;
    let mut last = Instant::now();
    loop {
        let quiet = last.elapsed();
        if quiet >= idle && ends.short() == 0 {
            return Ok(n);
        }
        if quiet >= idle.max(EXPORT_STALL) {
            return Err(KafkaError::Config(format!(
                "export of {topic}: no record for {} s with {} partition(s) short of the end \
                 offsets read at start ({n} records written)",
                quiet.as_secs(),
                ends.short()
            )));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if timestamps {
                    let ms = m.timestamp().to_millis().unwrap_or(-1);
                    write!(out, "{ms}\t").map_err(|e| KafkaError::Config(e.to_string()))?;
                }
                out.write_all(m.payload().unwrap_or_default())
                    .and_then(|_| out.write_all(b"\n"))
                    .map_err(|e| KafkaError::Config(e.to_string()))?;
                ends.read(m.partition(), m.offset());
                n += 1;
                last = Instant::now();
            }
            Some(Err(RdError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

/// How long `export` waits without a record while a partition is still short of the end offset
/// it read at start (a slow broker serving a large partition) before it fails.
const EXPORT_STALL: Duration = Duration::from_secs(60);

/// The end offsets of a topic's partitions when `export` started, and how far each was read:
/// export never stops on idleness while a partition is short of its end. (A broker whose high
/// watermark lags the log, as tansu's memory storage does, is covered by the idle rule.)
struct ExportEnds {
    end: Vec<i64>,
    next: Vec<i64>,
}

impl ExportEnds {
    /// From each partition's (low, high) watermarks: it is read from low up to high.
    fn new(marks: &[(i64, i64)]) -> Self {
        ExportEnds {
            end: marks.iter().map(|m| m.1).collect(),
            next: marks.iter().map(|m| m.0).collect(),
        }
    }

    fn read(&mut self, partition: i32, offset: i64) {
        if let Some(n) = self.next.get_mut(partition as usize) {
            *n = (*n).max(offset + 1);
        }
    }

    /// Partitions not yet read up to their end offset.
    fn short(&self) -> usize {
        self.end
            .iter()
            .zip(&self.next)
            .filter(|(e, n)| n < e)
            .count()
    }
}

/// The pass-through baseline of the throughput benchmark: consumes `from` in a consumer group and
/// produces every record unchanged to `to`, storing offsets after acknowledgement, with the same
/// client settings as the stages. Logs `progress` every 10,000 records; runs until `stop`.
pub fn passthrough(
    k: &KafkaConfig,
    from: &str,
    to: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u64, KafkaError> {
    use super::acks::Acks;
    use super::client::{RebalanceLog, Tag};
    use super::outbox::{send, settle, store_offsets, Out};
    super::admin::ensure_topics(k, &[(to, k.output_partitions as i32)])?;
    let consumer: BaseConsumer<RebalanceLog> = client::create(
        k,
        &client::consumer_config(k, &format!("{}.passthrough", k.group_id)),
        RebalanceLog::new(from),
    )?;
    consumer.subscribe(&[from])?;
    let (producer, deliveries) = client::producer(k)?;
    let mut acks = Acks::default();
    let mut stored: std::collections::BTreeMap<u32, u64> = Default::default();
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        settle(&deliveries, &mut acks, &mut |_, _| {})?;
        store_offsets(&consumer, from, &acks, &mut stored)?;
        // Drain what is there (up to a batch) before settling and storing offsets, as the stages do.
        let mut wait = Duration::from_millis(50);
        for _ in 0..PASSTHROUGH_POLL_BATCH {
            let Some(Ok(m)) = consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            let (p, o) = (m.partition() as u32, m.offset() as u64);
            acks.register(p, o, 1);
            let tag = Tag::Record {
                partition: p,
                offset: o,
            };
            let key = m.key().unwrap_or_default();
            let out = Out {
                topic: to,
                partition: None,
                key,
                payload: m.payload().unwrap_or_default(),
                tag,
            };
            send(&producer, &deliveries, &mut acks, out)?;
            n += 1;
            if n.is_multiple_of(10_000) {
                tracing::info!(records = n, "progress");
            }
        }
    }
    producer.flush(Duration::from_secs(30))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::ExportEnds;

    #[test]
    fn export_ends_count_partitions_short_of_their_start_end() {
        // Partition 0 holds offsets 0..3, partition 1 is empty after retention (5..5), partition 2
        // starts at 10 and ends at 12.
        let mut e = ExportEnds::new(&[(0, 3), (5, 5), (10, 12)]);
        assert_eq!(e.short(), 2);
        e.read(0, 2);
        assert_eq!(e.short(), 1);
        e.read(2, 10);
        assert_eq!(e.short(), 1, "offset 11 is still to come");
        e.read(2, 11);
        assert_eq!(e.short(), 0);
        // Records past the start's end (written since) and unknown partitions change nothing.
        e.read(0, 7);
        e.read(9, 1);
        assert_eq!(e.short(), 0);
    }
}
