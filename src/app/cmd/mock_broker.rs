//! `simdedup mock-broker`: librdkafka's in-memory mock broker as a process, for tests and
//! benchmarks on a machine without Kafka (`io::kafka::admin::mock_broker`).

use clap::Args;

use crate::app::common::{stop_flag, CmdResult, EXIT_FAILURE, EXIT_OK};
use crate::io::kafka::admin;

pub(crate) const HELP: &str = "Example:
  simdedup mock-broker --topic posts:8 --topic posts.routed:8 --topic simdedup.changelog:1

Prints SIMDEDUP_BROKERS=HOST:PORT on stdout once the broker answers, then serves until SIGINT or
SIGTERM. It is librdkafka's mock cluster: records live in memory and go with the process, it has
no transactions, and it serves no CreateTopics, so name every topic here (the stages' and
`produce`'s topic creation skip topics that exist). Fetches that find nothing are held for the
consumer's fetch.wait.max.ms; fetches with records return at once. For tests and benchmarks, not
production.

Exit codes: 0 stopped by a signal; 1 the broker could not start; 2 a malformed --topic.";

/// `mock-broker` options.
#[derive(Debug, Args)]
pub struct MockBrokerArgs {
    /// A topic to create, NAME:PARTITIONS (repeat for more).
    #[arg(long = "topic", value_parser = parse_topic)]
    pub topics: Vec<(String, i32)>,
    /// Brokers in the mock cluster.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=16))]
    pub brokers: i32,
}

/// Parses NAME:PARTITIONS.
fn parse_topic(s: &str) -> Result<(String, i32), String> {
    let (name, n) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("'{s}': expected NAME:PARTITIONS"))?;
    let n: i32 = n
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("'{s}': PARTITIONS must be a positive number"))?;
    if name.is_empty() {
        return Err(format!("'{s}': empty topic name"));
    }
    Ok((name.to_string(), n))
}

/// Runs `simdedup mock-broker`.
pub(crate) fn run(a: MockBrokerArgs) -> CmdResult {
    let stop = stop_flag();
    let cluster =
        admin::mock_broker(a.brokers, &a.topics).map_err(|e| (EXIT_FAILURE, e.to_string()))?;
    println!("SIMDEDUP_BROKERS={}", cluster.bootstrap_servers());
    eprintln!(
        "simdedup: mock broker at {} with {} topic(s); stop with SIGINT or SIGTERM",
        cluster.bootstrap_servers(),
        a.topics.len()
    );
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::parse_topic;

    #[test]
    fn topics_are_name_and_a_positive_partition_count() {
        assert_eq!(parse_topic("a.b:8"), Ok(("a.b".to_string(), 8)));
        assert_eq!(parse_topic("a:b:2"), Ok(("a:b".to_string(), 2)));
        assert!(parse_topic("a").is_err());
        assert!(parse_topic("a:0").is_err());
        assert!(parse_topic(":3").is_err());
        assert!(parse_topic("a:x").is_err());
    }
}
