//! Moving bytes: the per-record processor, output record formats and the file pipeline.

pub mod config;
pub mod file;
pub mod kafka;
pub mod process;
pub mod records;
pub mod steps;
