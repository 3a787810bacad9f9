//! Moving bytes: the settings the stages read (`config`), the per-record steps every front end
//! shares (`steps`: admit, analyze and route), the one-process processor (`process`), output
//! record formats (`records`), the file pipeline (`file`) and the Kafka topology (`kafka`).

pub mod cold;
pub mod config;
pub mod file;
pub mod kafka;
pub mod process;
pub mod records;
pub(crate) mod steps;
