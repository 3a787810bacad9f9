//! Integration tests, one binary: the file pipeline end to end through the real `simdedup`
//! executable.

mod common;
mod edges;
mod export;
mod inspect;
#[cfg(feature = "broker-tests")]
mod kafka_broker;
mod kafka_mock;
mod metrics;
mod pipeline;
mod resume;
mod scripts;
