//! Moving bytes: the settings the stages read (`config`), the per-record steps every front end
//! shares (`steps`: admit, analyze and route), the one-process processor (`process`), output
//! record formats (`records`), a start from a state dir (`restore`), the file pipeline (`file`)
//! and the Kafka topology (`kafka`).

pub mod cold;
pub mod config;
pub mod file;
pub mod kafka;
pub mod process;
pub mod records;
pub mod restore;
pub(crate) mod steps;
