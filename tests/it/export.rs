//! `tools::export` (`simdedup export`) reads each partition from offset 0, not from the start
//! the broker names (tansu 0.6's memory storage can name the second record batch's offset), and
//! from the log's start where offset 0 is gone: librdkafka's mock broker keeps at most 5 MB per
//! partition and drops the oldest records past that, as retention would.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use simdedup::io::kafka::{client, tools, KafkaConfig};

#[test]
fn export_reads_from_the_log_start_once_offset_0_is_gone() {
    let cluster = MockCluster::new(1).unwrap();
    let k = KafkaConfig {
        brokers: cluster.bootstrap_servers(),
        ..KafkaConfig::default()
    };
    cluster.create_topic("big", 1, 1).unwrap();
    // 12,000 records of 1,000 pseudo-random hex digits each, their number first: about 6 MB
    // once compressed, past the mock's 5 MB.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let lines = (0..12_000).map(move |i| {
        let mut line = format!("{i:08} ");
        while line.len() < 1_009 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            line.push_str(&format!("{x:016x}"));
        }
        line.into_bytes()
    });
    assert_eq!(
        tools::produce_lines(&k, "big", None, lines).unwrap(),
        12_000
    );
    let consumer: BaseConsumer = client::consumer_config(&k, "marks").create().unwrap();
    let (low, high) = consumer
        .fetch_watermarks("big", 0, Duration::from_secs(10))
        .unwrap();
    assert!(low > 0 && high == 12_000, "the mock kept {low}..{high}");
    let mut out = Vec::new();
    let n = tools::export(&k, "big", &mut out, Duration::from_millis(500), false).unwrap();
    assert_eq!(n as i64, high - low);
    // Offset i holds record i: the export starts at the log's start and misses nothing after.
    let numbers: Vec<i64> = String::from_utf8_lossy(&out)
        .lines()
        .map(|l| l[..8].parse().unwrap())
        .collect();
    assert_eq!(numbers, (low..high).collect::<Vec<_>>());
}
