//! Integration tests, one binary: the file pipeline end to end through the real `simdedup`
//! executable.

mod common;
mod kafka_mock;
mod pipeline;
mod resume;
