//! `simdedup replay`: a backfill of a raw topic range into separate output topics, with fresh
//! state. It runs the topology's exact decision order in one process:
//! 1. the raw partitions are merged by event time, as the route stage does;
//! 2. each post is routed to its partition, and posts within a partition count up (live, they
//!    are numbered by routed offset and place in the envelope: the same order);
//! 3. all partitions are decided in the global order `(partition watermark, arrival, partition,
//!    offset)`, arrival being the raw records' Kafka timestamps (`OrderKey::arrival`).
//!
//! Two replays of the same range give identical verdicts. A replay of a live run's input gives
//! that run's verdicts when the live run had one route worker and no partition fell idle.

use std::collections::VecDeque;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::producer::Producer;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::acks::Acks;
use super::client::{self, QuietContext, Tag};
use super::fetch;
use super::gate::next_in_order;
use super::merge::{earliest, merge_time};
use super::outbox::{send, settle, Out};
use super::{KafkaConfig, KafkaError};
use crate::engine::{Analyzed, Engine, Position};
use crate::input::Decoded;
use crate::io::config::StageConfig;
use crate::io::records::{self, Decided, Sink};
use crate::io::steps::{Admission, PostRouter};
use crate::metrics::{self, Stage};
use crate::text::tokenize::Tokenizer;
use crate::types::Rejection;

/// The engine figures are published to the metrics registry after every this many records.
const PUBLISH_EVERY: u64 = 4096;

/// Which part of the raw topic to replay. Times are event-time bounds on `created_at` (unix
/// seconds, inclusive) used to find start offsets (`offsets_for_times`, i.e. broker timestamps)
/// and to filter records; offsets apply to every partition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayRange {
    /// First offset per partition.
    pub from_offset: Option<i64>,
    /// Last offset per partition (inclusive).
    pub to_offset: Option<i64>,
    /// Skip records with an earlier event time.
    pub from_time: Option<i64>,
    /// Skip records with a later event time.
    pub to_time: Option<i64>,
}

/// Counts of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records read in the range.
    pub records: u64,
    /// Unique posts.
    pub unique: u64,
    /// Duplicate events.
    pub duplicates: u64,
    /// Rejected records.
    pub rejected: u64,
}

/// A raw record of the range, admitted (or rejected) and timed for the merge.
struct Raw {
    offset: i64,
    /// The record's Kafka timestamp (unix ms), if any.
    input_ms: Option<i64>,
    time: i64,
    post: Result<Decoded, Rejection>,
    line: Vec<u8>,
}

/// Replays `range` of `k.input_topic` into `k`'s output topics.
pub fn run(
    k: &KafkaConfig,
    cfg: &StageConfig,
    tokenizer: &Tokenizer,
    range: &ReplayRange,
) -> Result<ReplayStats, KafkaError> {
    metrics::global().set_health("replay", Err("reading the input range".into()));
    let raw = read_range(k, cfg, range)?;
    metrics::global().set_health("replay", Ok(()));
    let merged = merge_by_time(raw);
    let mut router = PostRouter::new(tokenizer, k.routed_partitions, &cfg.routing);
    let mut queues: Vec<VecDeque<(u64, Raw, Analyzed)>> =
        (0..router.partitions()).map(|_| VecDeque::new()).collect();
    let mut rejected = Vec::new();
    for r in merged {
        match &r.post {
            Err(_) => rejected.push(r),
            Ok(post) => {
                let mut a = Analyzed::default();
                let t = metrics::global().timer();
                let p = router.analyze(&post.text, &mut a) as usize;
                metrics::global().observe_since(Stage::Analyze, t);
                let seq = queues[p].len() as u64;
                queues[p].push_back((seq, r, a));
            }
        }
    }
    let (producer, deliveries) = client::producer(k)?;
    let mut acks = Acks::default();
    let mut stats = ReplayStats::default();
    let mut rec = Vec::with_capacity(1024);
    let mut n = 0u64;
    let mut emit =
        |topic: &str, key: &[u8], rec: &[u8], acks: &mut Acks| -> Result<(), KafkaError> {
            acks.register(0, n, 1);
            let out = Out {
                topic,
                partition: None,
                key,
                payload: rec,
                tag: Tag::Record {
                    partition: 0,
                    offset: n,
                },
            };
            n += 1;
            send(&producer, &deliveries, acks, out)
        };
    for r in &rejected {
        if let Err(rj) = &r.post {
            rec.clear();
            records::rejected_record(&mut rec, rj, None, r.offset as u64 + 1, &r.line);
            metrics::global().rejected(rj.reason);
            stats.rejected += 1;
            emit(&k.rejected_topic, &[], &rec, &mut acks)?;
        }
    }
    let mut engine = Engine::new(&cfg.engine).map_err(|e| KafkaError::Config(e.to_string()))?;
    loop {
        let heads = queues.iter().enumerate().filter_map(|(p, q)| {
            let (seq, r, _) = q.front()?;
            Some((
                p as u32,
                *seq,
                r.post.as_ref().ok().and_then(|x| x.created_at),
                r.input_ms,
            ))
        });
        let Some((p, _)) = next_in_order(&engine, heads) else {
            break;
        };
        let p = p as usize;
        let Some((seq, r, a)) = queues[p].pop_front() else {
            break;
        };
        let Ok(post) = &r.post else { continue };
        rec.clear();
        let at = Position {
            partition: p as u32,
            seq,
            arrival: r.input_ms,
        };
        let t = metrics::global().timer();
        let v = engine.decide(at, &post.id, post.created_at, &a);
        metrics::global().observe_since(Stage::Decide, t);
        metrics::global().verdict(&v);
        if (stats.unique + stats.duplicates + stats.rejected).is_multiple_of(PUBLISH_EVERY) {
            metrics::global().publish_engine(&engine);
        }
        let decided = Decided {
            id: &post.id,
            created_at: post.created_at,
            raw: &r.line,
            analyzed: &a,
            line: r.offset as u64 + 1,
        };
        let sink = records::verdict_record(&mut rec, &v, &decided, &cfg.output);
        match sink {
            Sink::Unique => stats.unique += 1,
            Sink::Duplicate => stats.duplicates += 1,
            Sink::Rejected => stats.rejected += 1,
        }
        let topic = k.topic_for(sink);
        engine.take_changes();
        emit(topic, post.id.0.as_bytes(), &rec, &mut acks)?;
    }
    metrics::global().publish_engine(&engine);
    producer.flush(Duration::from_secs(60))?;
    while acks.in_flight() > 0 {
        settle(&deliveries, &mut acks, &mut |_, _| {})?;
        std::thread::sleep(Duration::from_millis(2));
    }
    stats.records = stats.unique + stats.duplicates + stats.rejected;
    Ok(stats)
}

/// Merges the raw partitions by event time and arrival, as the route stage does (records
/// without a time follow the latest time seen).
fn merge_by_time(mut parts: Vec<VecDeque<Raw>>) -> Vec<Raw> {
    let mut out = Vec::new();
    loop {
        let heads = parts.iter().enumerate().filter_map(|(i, q)| {
            q.front()
                .map(|r| (i as u32, r.time, r.input_ms.unwrap_or(0)))
        });
        let Some(i) = earliest(heads) else { return out };
        if let Some(r) = parts[i as usize].pop_front() {
            out.push(r);
        }
    }
}

/// Reads the range from every partition up to the end offsets seen at start.
fn read_range(
    k: &KafkaConfig,
    cfg: &StageConfig,
    range: &ReplayRange,
) -> Result<Vec<VecDeque<Raw>>, KafkaError> {
    let consumer: BaseConsumer<QuietContext> =
        client::create(k, &client::reader_config(k), QuietContext)?;
    let parts = fetch::partition_count(&consumer, &k.input_topic, Duration::from_secs(10))? as i32;
    let mut tpl = TopicPartitionList::new();
    let mut ends = Vec::new();
    for p in 0..parts {
        // The end of a partition is where the reader meets end-of-partition (or --to-offset):
        // high watermarks are not reliable on every Kafka-compatible broker.
        ends.push(range.to_offset.map_or(i64::MAX, |o| o + 1));
        let start = match range.from_offset {
            Some(o) => Offset::Offset(o),
            None => Offset::Beginning,
        };
        tpl.add_partition_offset(&k.input_topic, p, start)?;
    }
    if let Some(t) = range.from_time {
        // Broker timestamps are in milliseconds; records before the start are skipped below anyway.
        let mut times = TopicPartitionList::new();
        for p in 0..parts {
            times.add_partition_offset(&k.input_topic, p, Offset::Offset(t * 1000))?;
        }
        if let Ok(found) = consumer.offsets_for_times(times, Duration::from_secs(10)) {
            for e in found.elements() {
                if let Offset::Offset(o) = e.offset() {
                    let cur = tpl
                        .find_partition(&k.input_topic, e.partition())
                        .map(|x| x.offset());
                    if matches!(cur, Some(Offset::Offset(c)) if o > c) {
                        tpl.set_partition_offset(&k.input_topic, e.partition(), Offset::Offset(o))?;
                    }
                }
            }
        }
    }
    consumer.assign(&tpl)?;
    let admission = Admission::new(cfg);
    let mut out: Vec<VecDeque<Raw>> = (0..parts).map(|_| VecDeque::new()).collect();
    let mut done = vec![false; parts as usize];
    let mut last_time = i64::MIN;
    while done.iter().any(|d| !d) {
        let m = match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(RdError::PartitionEOF(p))) => {
                if let Some(d) = done.get_mut(p as usize) {
                    *d = true;
                }
                continue;
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(m)) => m,
        };
        let (p, o) = (m.partition() as usize, m.offset());
        if o >= ends[p] {
            done[p] = true;
            continue;
        }
        let line = m.payload().unwrap_or_default().to_vec();
        let t = metrics::global().timer();
        let post = admission.admit(&line).map_err(|r| r.rejection);
        metrics::global().observe_since(Stage::Decode, t);
        let time = merge_time(post.as_ref().ok().and_then(|d| d.created_at), last_time);
        if range.from_time.is_some_and(|f| time < f) || range.to_time.is_some_and(|t| time > t) {
            continue;
        }
        last_time = last_time.max(time);
        metrics::global().post_in();
        out[p].push_back(Raw {
            offset: o,
            input_ms: m.timestamp().to_millis(),
            time,
            post,
            line,
        });
    }
    Ok(out)
}
