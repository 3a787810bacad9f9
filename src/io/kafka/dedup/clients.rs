//! A dedup worker's Kafka clients, and which producer the changelog goes through.

use std::cell::OnceCell;
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;

use super::super::client::{self, AckContext, Delivery, RebalanceLog};
use super::super::polled::PolledProducer;
use super::super::queues::Split;
use super::super::{KafkaConfig, KafkaError};

/// A dedup worker's Kafka clients.
pub(super) struct Clients {
    /// The group consumer of the routed topic, each owned partition read from a queue of its
    /// own (`queues::Split`; made on the thread that reads it).
    pub(super) routed: Split<RebalanceLog>,
    pub(super) reader: BaseConsumer<client::QuietContext>,
    pub(super) ahead: BaseConsumer<client::QuietContext>,
    /// Outputs (verdicts, rejections), and the changelog until `own_changelog` is set.
    pub(super) producer: PolledProducer<AckContext>,
    /// The changelog's producer once this worker shares the routed partitions with others
    /// (`Clients::separate_changelog`).
    pub(super) own_changelog: OnceCell<PolledProducer<AckContext>>,
    /// Where delivery reports go, for `own_changelog`.
    pub(super) reports: Sender<Delivery>,
    pub(super) deliveries: Receiver<Delivery>,
}

/// How long a worker's consumer waits for a topic's metadata at most (the read-ahead consumer's
/// for the routed topic, the changelog reader's for the changelog).
pub(super) const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

impl Clients {
    /// The group consumer of the routed topic, the changelog reader, the read-ahead consumer
    /// and the producer.
    pub(super) fn new(k: &KafkaConfig) -> Result<Clients, KafkaError> {
        let (producer, reports, deliveries) = client::producer_and_sender(k)?;
        Ok(Clients {
            routed: Split::new(
                client::create(
                    k,
                    &client::consumer_config(k, &format!("{}.dedup", k.group_id)),
                    RebalanceLog::new(&k.routed_topic),
                )?,
                &k.routed_topic,
            ),
            reader: client::create(k, &client::reader_config(k), client::QuietContext)?,
            ahead: client::create(k, &client::ahead_config(k), client::QuietContext)?,
            producer,
            own_changelog: OnceCell::new(),
            reports,
            deliveries,
        })
    }

    /// The producer of changelog records (index entries, progress markers, sync records).
    pub(super) fn changelog(&self) -> &PolledProducer<AckContext> {
        self.own_changelog.get().unwrap_or(&self.producer)
    }

    /// Gives the changelog a producer of its own, once. Other workers wait for this worker's
    /// markers; behind the outputs' requests on a busy broker a marker took 29–31 ms to be
    /// acknowledged (median), alone 7 ms. A worker that owns every routed partition keeps one
    /// producer: nobody waits for its markers, and a second producer's requests cost a
    /// lone `--role all` 5–10% of its throughput. What the shared producer holds is delivered
    /// first, so the changelog keeps its order (a marker vouches for the entries before it).
    /// The read-ahead consumer learns the routed topic's metadata then, too.
    pub(super) fn separate_changelog(&self, k: &KafkaConfig) -> Result<(), KafkaError> {
        if self.own_changelog.get().is_some() {
            return Ok(());
        }
        self.producer
            .flush(Duration::from_millis(k.shutdown_timeout_ms))?;
        let p = client::producer_reporting_to(k, self.reports.clone())?;
        let _ = self.own_changelog.set(p);
        // The read-ahead consumer will read the routed topic: learn where its partitions are
        // now, not when a post first waits (librdkafka asked then, and fetched 0.1 s later).
        if let Err(e) = self
            .ahead
            .fetch_metadata(Some(&k.routed_topic), METADATA_TIMEOUT)
        {
            tracing::debug!(error = %e, "routed topic metadata for reading ahead");
        }
        tracing::info!(
            "routed partitions shared with other workers: the changelog gets a producer of its own"
        );
        Ok(())
    }

    /// Waits for the producers' outstanding records (`timeout` each, at most).
    pub(super) fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        if let Some(p) = self.own_changelog.get() {
            p.flush(timeout)?;
        }
        self.producer.flush(timeout)?;
        Ok(())
    }
}
