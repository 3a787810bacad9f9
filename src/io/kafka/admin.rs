//! Topics: creating the ones a stage needs that do not exist yet, and librdkafka's in-memory mock
//! broker (`simdedup mock-broker`) for tests and benchmarks.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use super::client;
use super::{KafkaConfig, KafkaError};

/// Creates the topics that do not exist yet: (name, partitions). Topics the broker's metadata
/// already lists are left alone, so that the call needs no CreateTopics right (or support: the
/// librdkafka mock broker serves none) when every topic exists.
pub fn ensure_topics(k: &KafkaConfig, topics: &[(&str, i32)]) -> Result<(), KafkaError> {
    let admin: AdminClient<DefaultClientContext> = client::admin_config(k).create()?;
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))?;
    let existing: std::collections::BTreeSet<&str> = md
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.name())
        .collect();
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .filter(|(n, _)| !existing.contains(n))
        .map(|(n, p)| NewTopic::new(n, *p, TopicReplication::Fixed(k.replication_factor)))
        .collect();
    if new.is_empty() {
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| KafkaError::Config(e.to_string()))?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = rt.block_on(admin.create_topics(new.iter(), &opts))?;
    for r in results {
        if let Err((topic, code)) = r {
            if code != RDKafkaErrorCode::TopicAlreadyExists {
                return Err(KafkaError::Admin {
                    topic,
                    message: code.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// librdkafka's in-memory mock broker (`simdedup mock-broker`), serving until dropped.
pub type MockBroker =
    rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>;

/// Starts librdkafka's in-memory mock broker with `brokers` brokers and `topics` (name,
/// partitions) created, since it serves no CreateTopics. For tests and benchmarks: its log lives
/// in memory and ends with the process.
pub fn mock_broker(brokers: i32, topics: &[(String, i32)]) -> Result<MockBroker, KafkaError> {
    let cluster = MockBroker::new(brokers)?;
    for (name, partitions) in topics {
        cluster.create_topic(name, *partitions, 1)?;
    }
    Ok(cluster)
}
