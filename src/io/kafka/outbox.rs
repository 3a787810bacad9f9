//! The producer outbox shared by the Kafka stages: send a record tagged with the inputs it
//! answers for, apply delivery reports to the acknowledgement ledger (`acks`), store the offsets
//! whose outputs are all acknowledged, and commit. Offsets are stored only after delivery: a
//! failed delivery is fatal and its input is re-processed after a restart.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError as RdError, RDKafkaErrorCode};
use rdkafka::producer::BaseRecord;

use super::acks::Acks;
use super::client::{AckContext, Delivery, RebalanceLog, Tag};
use super::polled::PolledProducer;
use super::KafkaError;

/// How long `send` sleeps when librdkafka's local queue is full, before settling reports and
/// trying again.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(2);

/// One record to produce.
pub(crate) struct Out<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub key: &'a [u8],
    pub payload: &'a [u8],
    pub tag: Tag,
}

/// Sends one record, settling delivery reports while the local queue is full.
pub(crate) fn send(
    producer: &PolledProducer<AckContext>,
    deliveries: &Receiver<Delivery>,
    acks: &mut Acks,
    out: Out<'_>,
) -> Result<(), KafkaError> {
    let mut r = BaseRecord::with_opaque_to(out.topic, Box::new(out.tag)).payload(out.payload);
    // An empty key is sent as none: librdkafka hashes an empty key to one fixed partition, but
    // spreads keyless records over all of them.
    if !out.key.is_empty() {
        r = r.key(out.key);
    }
    if let Some(p) = out.partition {
        r = r.partition(p);
    }
    loop {
        match producer.send(r) {
            Ok(()) => return Ok(()),
            Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                r = back;
                std::thread::sleep(QUEUE_FULL_BACKOFF);
                settle(deliveries, acks, &mut |_, _| {})?;
            }
            Err((e, _)) => return Err(e.into()),
        }
    }
}

/// Applies delivery reports: outputs credit `acks`, markers go to `on_marker`. A failed delivery
/// is fatal: its offset is never stored, so a restart re-processes it.
pub(crate) fn settle(
    deliveries: &Receiver<Delivery>,
    acks: &mut Acks,
    on_marker: &mut dyn FnMut(u32, Option<u64>),
) -> Result<(), KafkaError> {
    while let Ok(d) = deliveries.try_recv() {
        if let Err(message) = d.result {
            return Err(KafkaError::Delivery {
                topic: d.topic,
                message,
            });
        }
        match d.tag {
            Tag::Record { partition, offset } => {
                crate::metrics::global().output_acked();
                acks.ack(partition, offset)
            }
            Tag::Records(inputs) => {
                crate::metrics::global().output_acked();
                inputs.into_iter().for_each(|(p, o)| acks.ack(p, o))
            }
            Tag::Changelog => {}
            Tag::Marker {
                partition,
                last_offset,
            } => on_marker(partition, last_offset),
        }
    }
    Ok(())
}

/// Stores, per assigned partition, the last offset whose outputs (and all earlier ones') are
/// acknowledged.
pub(crate) fn store_offsets(
    consumer: &BaseConsumer<RebalanceLog>,
    topic: &str,
    acks: &Acks,
    stored: &mut BTreeMap<u32, u64>,
) -> Result<(), KafkaError> {
    let parts: Vec<u32> = consumer
        .assignment()?
        .elements()
        .iter()
        .map(|e| e.partition() as u32)
        .collect();
    for p in parts {
        if let Some(done) = acks.done_through(p) {
            if stored.get(&p) != Some(&done) {
                // librdkafka's offset_store commits `offset + 1`: pass the last processed offset.
                consumer.store_offset(topic, p as i32, done as i64)?;
                stored.insert(p, done);
            }
        }
    }
    Ok(())
}

/// Commits the stored offsets synchronously. `NoOffset` (nothing stored since the last commit,
/// or nothing assigned) is not an error.
pub(crate) fn commit<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Result<(), KafkaError> {
    commit_with(consumer, CommitMode::Sync)
}

/// Commits the stored offsets as `mode` says; `NoOffset` is not an error.
pub(crate) fn commit_with<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    mode: CommitMode,
) -> Result<(), KafkaError> {
    consumer.commit_consumer_state(mode).or_else(|e| match e {
        RdError::ConsumerCommit(RDKafkaErrorCode::NoOffset) => Ok(()),
        other => Err(other),
    })?;
    Ok(())
}
