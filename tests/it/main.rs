//! Integration tests, one binary: the file pipeline end to end through the real `simdedup`
//! executable.

mod common;
mod pipeline;
mod resume;
