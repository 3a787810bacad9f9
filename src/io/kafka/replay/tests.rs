//! Tests of `replay`: the merge's and the routing's waits (pure), and a replay on the mock
//! broker whose verdicts do not depend on how much it reads ahead.

use std::collections::BTreeMap;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use super::*;
use crate::io::kafka::tools;

/// Near copies of a few texts, in three raw partitions whose event times interleave (each
/// partition at its own pace, one with late posts), so that the verdicts and clusters depend
/// on the merged order and on the global order of the routed partitions.
fn produce_posts(brokers: &str, topic: &str) -> usize {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let texts = [
        "今天北京的天气非常好我们一起去公园散步吧顺便看看湖边新开的花还有那些老树",
        "这部电影的结局让人非常意外导演的安排实在是太巧妙了演员的表演也很到位",
        "地铁四号线今天早上出现故障很多乘客上班都迟到了半小时希望尽快修好",
        "新开的那家火锅店味道不错价格也很实惠推荐大家周末带着家人朋友去尝尝",
    ];
    let swaps = ["我", "你", "他", "她", "大", "小", "红", "绿", "东", "西"];
    let mut n = 0;
    for part in 0..3i32 {
        for i in 0..700i64 {
            let mut t = 1_700_000_000 + i * (3 + part as i64) + part as i64;
            if part == 2 && i % 5 == 0 {
                // Late: the merged stream goes back in time, and the routed partitions'
                // watermarks, not the merge, order the decisions.
                t -= 400;
            }
            let base = texts[((i as usize) * 7 + part as usize) % texts.len()];
            // One or two characters changed: near copies whose fingerprints differ, so that
            // many land in other routed partitions than their cluster's first post.
            let mut chars: Vec<String> = base.chars().map(String::from).collect();
            let k = (i as usize * 13 + part as usize * 5) % chars.len();
            chars[k] = swaps[(i as usize + part as usize) % swaps.len()].to_string();
            if i % 2 == 0 {
                let k2 = (k + 11) % chars.len();
                chars[k2] = swaps[(i as usize * 3) % swaps.len()].to_string();
            }
            let text = chars.concat();
            let line =
                serde_json::json!({"id": format!("p{part}-{i}"), "text": text, "created_at": t});
            p.send(
                BaseRecord::<(), _>::to(topic)
                    .partition(part)
                    .payload(&line.to_string()),
            )
            .unwrap();
            n += 1;
        }
        p.flush(Duration::from_secs(20)).unwrap();
    }
    n
}

fn outputs(k: &KafkaConfig) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    for (topic, field) in [(&k.unique_topic, "id"), (&k.duplicates_topic, "post_id")] {
        let mut out = Vec::new();
        tools::export(k, topic, &mut out, Duration::from_millis(500), false).unwrap();
        for l in String::from_utf8(out).unwrap().lines() {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            let id = j[field].as_str().unwrap().to_string();
            let verdict = j["cluster_id"].as_str().unwrap_or("unique").to_string();
            assert!(v.insert(id, verdict).is_none(), "one verdict per post");
        }
    }
    v
}

fn raw(offset: i64, time: i64, arrival: i64) -> Raw {
    Raw {
        offset,
        input_ms: Some(arrival),
        time,
        post: Err(crate::types::Rejection::new(
            crate::types::RejectReason::InvalidJson,
            "test",
        )),
        line: Vec::new(),
    }
}

fn offsets(q: &[VecDeque<Raw>]) -> Vec<Vec<i64>> {
    q.iter()
        .map(|q| q.iter().map(|r| r.offset).collect())
        .collect()
}

// A record is merged only once every partition not read to its end has one buffered:
// earliest time first, then earliest arrival, then the lower partition.
#[test]
fn the_merge_waits_for_every_partition_not_read_to_its_end() {
    let mut q: Vec<VecDeque<Raw>> = vec![
        VecDeque::from([raw(0, 20, 5), raw(1, 30, 6)]),
        VecDeque::new(),
        VecDeque::from([raw(0, 20, 4)]),
    ];
    let mut done = vec![false, false, false];
    assert!(matches!(next_in_merge(&mut q, &done), Merge::Read));
    q[1].push_back(raw(7, 10, 9));
    let taken = |q: &mut Vec<VecDeque<Raw>>, done: &[bool]| {
        let mut order = Vec::new();
        loop {
            match next_in_merge(q, done) {
                Merge::Next(r) => order.push((r.time, r.offset)),
                Merge::Read => return (order, false),
                Merge::End => return (order, true),
            }
        }
    };
    // Partition 1's only record first (time 10); then partition 1 is empty and not read to
    // its end, so the others wait.
    assert_eq!(taken(&mut q, &done), (vec![(10, 7)], false));
    // Read to its end: partition 2's record (time 20, arrival 4 before 5), then 2 is empty.
    done[1] = true;
    assert_eq!(taken(&mut q, &done), (vec![(20, 0)], false));
    // Every partition read to its end: the rest, then the end.
    done = vec![true; 3];
    assert_eq!(taken(&mut q, &done), (vec![(20, 0), (30, 1)], true));
    assert_eq!(offsets(&q), vec![Vec::<i64>::new(); 3]);
    assert!(matches!(next_in_merge(&mut q, &done), Merge::End));
}

#[test]
fn posts_are_routed_until_every_routed_partition_has_one_or_the_range_is_read() {
    let q = vec![VecDeque::from([1]), VecDeque::new()];
    assert!(must_route_more(&q, false));
    assert!(!must_route_more(&q, true));
    assert!(!must_route_more(
        &[VecDeque::from([1]), VecDeque::from([2])],
        false
    ));
}

// Reading each raw partition a record at a time gives the verdicts of reading it whole:
// a record is merged, and a post decided, only once every partition has one waiting.
#[test]
fn the_verdicts_do_not_depend_on_how_much_is_read_ahead() {
    let topics: Vec<(String, i32)> = ["in", "u1", "d1", "r1", "u2", "d2", "r2"]
        .iter()
        .map(|t| (t.to_string(), if *t == "in" { 3 } else { 2 }))
        .collect();
    let cluster = crate::io::kafka::admin::mock_broker(1, &topics).unwrap();
    let n = produce_posts(&cluster.bootstrap_servers(), "in");
    let cfg = StageConfig::defaults_for_tests();
    let tokenizer = Tokenizer::new(
        crate::text::tokenize::Weighting::Tf,
        crate::text::tokenize::DEFAULT_STOPWORDS,
    );
    let mut got = Vec::new();
    for (i, buffer) in [(1, usize::MAX), (2, 1)] {
        let k = KafkaConfig {
            brokers: cluster.bootstrap_servers(),
            input_topic: "in".into(),
            unique_topic: format!("u{i}"),
            duplicates_topic: format!("d{i}"),
            rejected_topic: format!("r{i}"),
            routed_partitions: 16,
            ..KafkaConfig::default()
        };
        let st = run_buffered(&k, &cfg, &tokenizer, &ReplayRange::default(), buffer).unwrap();
        assert_eq!(st.records as usize, n);
        assert!(st.duplicates > 1000, "{st:?}");
        got.push(outputs(&k));
    }
    assert_eq!(got[0].len(), n);
    let differ = got[0]
        .iter()
        .filter(|(id, v)| got[1].get(*id) != Some(v))
        .count();
    assert_eq!(differ, 0, "{differ} of {n} verdicts differ");
}
