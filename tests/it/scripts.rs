//! The project's scripts against a broker: `scripts/topic-batches.py` on librdkafka's mock
//! cluster.

use std::time::Duration;

use rdkafka::mocking::MockCluster;

#[test]
fn topic_batches_counts_the_batches_and_records_each_partition_holds() {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("tb.posts", 2, 1).unwrap();
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("linger.ms", "1000")
        .create()
        .unwrap();
    let send = |partition, n| {
        for i in 0..n {
            let payload = format!("record {i}");
            let rec = BaseRecord::<(), _>::to("tb.posts")
                .partition(partition)
                .payload(&payload);
            producer.send(rec).map_err(|(e, _)| e).unwrap();
        }
        // Sent at once, whatever the linger: what was queued goes out as one batch.
        producer.flush(Duration::from_secs(10)).unwrap();
    };
    // Partition 0: three batches of one record, then one of five; partition 1: one of two.
    for _ in 0..3 {
        send(0, 1);
    }
    send(0, 5);
    send(1, 2);
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/topic-batches.py"
        ))
        .arg(cluster.bootstrap_servers())
        .arg("tb.posts:2")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "tb.posts: 5 batches, 10 records (2.0 per batch), at most 4 batches in one of 2 partitions\n"
    );
}
