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
//!
//! It streams: each raw partition is read from a queue of its own while fewer than
//! `RAW_BUFFER` of its records wait (`queues::Split`), a record is merged once every partition
//! not read to its end has one buffered, and a post is decided once every routed partition has
//! one waiting (or the range is read). The order is then the one the whole range in memory
//! would give, since each queue only grows at its back, and memory follows the buffers, not the
//! range.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::producer::Producer;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::acks::Acks;
use super::client::{self, QuietContext, SetIfAbsent, Tag};
use super::fetch;
use super::gate::next_in_order;
use super::merge::{earliest, merge_time};
use super::outbox::{send, settle, Out};
use super::queues::Split;
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

/// A raw partition's queue is read only while fewer than this many of its records are buffered
/// (librdkafka's prefetch is bounded by `queued.max.messages.kbytes` on top).
const RAW_BUFFER: usize = 4096;

/// Records taken from one partition's queue at a time.
const RAW_READ_BATCH: usize = 512;

/// librdkafka's prefetch per raw partition, in KB, and the most a fetch brings of one partition
/// and of all (bytes): a broker may answer with whole partitions (tansu 0.6 does), which on a
/// long range held hundreds of MB at the start.
const RAW_PREFETCH_KB: &str = "4096";
const RAW_PARTITION_FETCH_BYTES: &str = "1048576";
const RAW_FETCH_BYTES: &str = "8388608";
/// librdkafka stops fetching a raw partition once its prefetch holds this many records (each
/// costs it a few hundred bytes besides the record: short posts, many records per MB).
const RAW_PREFETCH_MESSAGES: &str = "8192";

/// A `replay progress` line every this many records.
const PROGRESS_EVERY: u64 = 100_000;

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
    run_buffered(k, cfg, tokenizer, range, RAW_BUFFER)
}

/// `run`, reading a raw partition while fewer than `raw_buffer` of its records are buffered.
fn run_buffered(
    k: &KafkaConfig,
    cfg: &StageConfig,
    tokenizer: &Tokenizer,
    range: &ReplayRange,
    raw_buffer: usize,
) -> Result<ReplayStats, KafkaError> {
    metrics::global().set_health("replay", Err("assigning the input range".into()));
    let mut input = RangeReader::open(k, cfg, range, raw_buffer.max(1))?;
    metrics::global().set_health("replay", Ok(()));
    let mut router = PostRouter::new(tokenizer, k.routed_partitions, &cfg.routing);
    let mut queues: Vec<VecDeque<(u64, Raw, Analyzed)>> =
        (0..router.partitions()).map(|_| VecDeque::new()).collect();
    let mut seqs = vec![0u64; queues.len()];
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
    let mut engine = Engine::new(&cfg.engine).map_err(|e| KafkaError::Config(e.to_string()))?;
    let started = Instant::now();
    let mut read_all = false;
    loop {
        // Route merged records until every routed partition has a head, or the range is read:
        // only then is the head first in order the one the whole range would put first.
        while must_route_more(&queues, read_all) {
            let Some(r) = input.next_merged()? else {
                read_all = true;
                break;
            };
            match &r.post {
                Err(rj) => {
                    rec.clear();
                    records::rejected_record(&mut rec, rj, None, r.offset as u64 + 1, &r.line);
                    metrics::global().rejected(rj.reason);
                    stats.rejected += 1;
                    emit(&k.rejected_topic, &[], &rec, &mut acks)?;
                }
                Ok(post) => {
                    let mut a = Analyzed::default();
                    let t = metrics::global().timer();
                    let p = router.analyze(&post.text, &mut a) as usize;
                    metrics::global().observe_since(Stage::Analyze, t);
                    queues[p].push_back((seqs[p], r, a));
                    seqs[p] += 1;
                }
            }
        }
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
        let done = stats.unique + stats.duplicates + stats.rejected;
        if done.is_multiple_of(PUBLISH_EVERY) {
            metrics::global().publish_engine(&engine);
            // Delivery reports applied as they come: a failed delivery stops the replay now, and
            // the reports of a long range do not pile up until its end.
            settle(&deliveries, &mut acks, &mut |_, _| {})?;
        }
        if done.is_multiple_of(PROGRESS_EVERY) {
            tracing::info!(
                records = done,
                unique = stats.unique,
                duplicates = stats.duplicates,
                rejected = stats.rejected,
                index = engine.index().len(),
                buffered = input.buffered() + queues.iter().map(VecDeque::len).sum::<usize>(),
                records_per_sec = (done as f64 / started.elapsed().as_secs_f64()).round(),
                "replay progress"
            );
        }
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

/// The raw partitions of the range, read as they are merged.
struct RangeReader {
    q: Split<QuietContext>,
    bufs: Buffers,
    /// A partition's queue is read while fewer of its records than this are buffered.
    raw_buffer: usize,
}

/// What has been read of each raw partition and not merged yet.
struct Buffers {
    admission: Admission,
    range: ReplayRange,
    /// Per partition: records read, not yet merged.
    raw: Vec<VecDeque<Raw>>,
    /// Where every partition ends (exclusive; `--to-offset`, else `i64::MAX`): the range's end
    /// within a partition is where the reader meets end-of-partition, or this offset.
    end: i64,
    /// Per partition: read to its end.
    done: Vec<bool>,
    /// The latest merge time read (records without a time follow it).
    last_time: i64,
}

impl RangeReader {
    /// A reader of `range`, assigned every partition of the raw topic from the range's start.
    fn open(
        k: &KafkaConfig,
        cfg: &StageConfig,
        range: &ReplayRange,
        raw_buffer: usize,
    ) -> Result<Self, KafkaError> {
        let mut c = client::reader_config(k);
        c.set_if_absent("queued.max.messages.kbytes", RAW_PREFETCH_KB);
        c.set_if_absent("max.partition.fetch.bytes", RAW_PARTITION_FETCH_BYTES);
        c.set_if_absent("fetch.max.bytes", RAW_FETCH_BYTES);
        c.set_if_absent("queued.min.messages", RAW_PREFETCH_MESSAGES);
        let consumer: BaseConsumer<QuietContext> = client::create(k, &c, QuietContext)?;
        let parts =
            fetch::partition_count(&consumer, &k.input_topic, Duration::from_secs(10))? as i32;
        let mut tpl = TopicPartitionList::new();
        for p in 0..parts {
            let start = match range.from_offset {
                Some(o) => Offset::Offset(o),
                None => Offset::Beginning,
            };
            tpl.add_partition_offset(&k.input_topic, p, start)?;
        }
        if let Some(t) = range.from_time {
            // Broker timestamps are in milliseconds; records before the start are skipped
            // anyway.
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
                            tpl.set_partition_offset(
                                &k.input_topic,
                                e.partition(),
                                Offset::Offset(o),
                            )?;
                        }
                    }
                }
            }
        }
        consumer.assign(&tpl)?;
        let q = Split::new(consumer, &k.input_topic);
        for p in 0..parts {
            q.split(p as u32);
        }
        Ok(RangeReader {
            q,
            raw_buffer,
            bufs: Buffers {
                admission: Admission::new(cfg),
                range: range.clone(),
                raw: (0..parts).map(|_| VecDeque::new()).collect(),
                // High watermarks are not reliable on every Kafka-compatible broker: a
                // partition ends where the reader meets end-of-partition.
                end: range.to_offset.map_or(i64::MAX, |o| o + 1),
                done: vec![false; parts as usize],
                last_time: i64::MIN,
            },
        })
    }

    /// Records read and not merged yet.
    fn buffered(&self) -> usize {
        self.bufs.raw.iter().map(VecDeque::len).sum()
    }

    /// The next record in the merged order (event time, then arrival, as the route stage
    /// merges; records without a time follow the latest time read), or `None` once the range
    /// is read. A record is taken only once every partition not read to its end has one
    /// buffered, so the order is the one the whole range would give.
    fn next_merged(&mut self) -> Result<Option<Raw>, KafkaError> {
        loop {
            match next_in_merge(&mut self.bufs.raw, &self.bufs.done) {
                Merge::Next(r) => return Ok(Some(r)),
                Merge::End => return Ok(None),
                Merge::Read => self.read()?,
            }
        }
    }

    /// Reads what has arrived: the consumer's own queue first (records fetched before their
    /// partition's queue was split come before what that queue holds), then each partition
    /// whose buffer is short; waits a little when nothing came.
    fn read(&mut self) -> Result<(), KafkaError> {
        let mut any = false;
        let mut failed = None;
        while self.q.main_pending() > 0 {
            if let Some(m) = self.q.poll_main() {
                any = true;
                self.bufs.take(m)?;
            }
        }
        for p in 0..self.bufs.raw.len() {
            let room = self.raw_buffer.saturating_sub(self.bufs.raw[p].len());
            if self.bufs.done[p] || room == 0 {
                continue;
            }
            let bufs = &mut self.bufs;
            let n = self
                .q
                .read_partition(p as u32, room.min(RAW_READ_BATCH), |m| match bufs.take(m) {
                    Ok(()) => true,
                    Err(e) => {
                        failed = Some(e);
                        false
                    }
                });
            if let Some(e) = failed.take() {
                return Err(e);
            }
            any |= n > 0;
        }
        if !any {
            // Woken when a queue receives something.
            self.q.wait(Duration::from_millis(50));
        }
        Ok(())
    }
}

/// What the merge of the raw partitions can do next (`next_in_merge`).
enum Merge {
    /// Take this record.
    Next(Raw),
    /// Read more first: a partition not read to its end has nothing buffered.
    Read,
    /// Every partition is read to its end and merged.
    End,
}

/// The record that comes next in the merged order (event time, then arrival, then partition),
/// if it is certain: every partition not read to its end (`done`) has one buffered, since a
/// partition's next record could come before the others' heads.
fn next_in_merge(raw: &mut [VecDeque<Raw>], done: &[bool]) -> Merge {
    if (0..raw.len()).any(|p| !done[p] && raw[p].is_empty()) {
        return Merge::Read;
    }
    let heads = raw.iter().enumerate().filter_map(|(i, q)| {
        q.front()
            .map(|r| (i as u32, r.time, r.input_ms.unwrap_or(0)))
    });
    match earliest(heads).and_then(|i| raw[i as usize].pop_front()) {
        Some(r) => Merge::Next(r),
        None => Merge::End,
    }
}

/// Whether the routed partitions' heads may not be the ones the whole range would give yet:
/// one has no post waiting and the range is not read to its end.
fn must_route_more<T>(queues: &[VecDeque<T>], read_all: bool) -> bool {
    !read_all && queues.iter().any(VecDeque::is_empty)
}

impl Buffers {
    /// Buffers one record (or notes a partition's end).
    fn take(
        &mut self,
        m: rdkafka::error::KafkaResult<rdkafka::message::BorrowedMessage<'_>>,
    ) -> Result<(), KafkaError> {
        let m = match m {
            Err(RdError::PartitionEOF(p)) => {
                if let Some(d) = self.done.get_mut(p as usize) {
                    *d = true;
                }
                return Ok(());
            }
            Err(e) => return Err(e.into()),
            Ok(m) => m,
        };
        let (p, o) = (m.partition() as usize, m.offset());
        if p >= self.raw.len() || self.done[p] {
            return Ok(());
        }
        if o >= self.end {
            self.done[p] = true;
            return Ok(());
        }
        let line = m.payload().unwrap_or_default().to_vec();
        let post = self.admission.admit_timed(&line);
        let time = merge_time(
            post.as_ref().ok().and_then(|d| d.created_at),
            self.last_time,
        );
        let r = &self.range;
        if r.from_time.is_some_and(|f| time < f) || r.to_time.is_some_and(|t| time > t) {
            return Ok(());
        }
        self.last_time = self.last_time.max(time);
        metrics::global().post_in();
        self.raw[p].push_back(Raw {
            offset: o,
            input_ms: m.timestamp().to_millis(),
            time,
            post,
            line,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
