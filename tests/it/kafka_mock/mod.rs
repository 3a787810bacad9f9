//! The Kafka topology against librdkafka's in-process mock broker: fast, no install. Route and
//! dedup run as in `simdedup run --role all`; every sample record must get exactly the verdict
//! the file pipeline gives it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::mocking::MockCluster;
use simdedup::app::config::Config;
use simdedup::io::kafka::{dedup, route, tools, KafkaConfig};
use simdedup::text::tokenize::{Tokenizer, Weighting, DEFAULT_STOPWORDS};

use crate::common::{data, run_ok, Outs};

mod replay;

/// Each output line of `text` with the post id under `field` (`id` on the unique topic,
/// `post_id` on the duplicates topic) and its parsed value.
fn by_post_id<'a>(
    text: &'a str,
    field: &'a str,
) -> impl Iterator<Item = (String, serde_json::Value, &'a str)> + 'a {
    text.lines().map(move |l| {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        (j[field].as_str().unwrap().to_string(), j, l)
    })
}

fn verdicts(unique: &[u8], dups: &[u8], rejected: &[u8]) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    for (id, _, _) in by_post_id(&String::from_utf8_lossy(unique), "id") {
        v.insert(id, "unique".to_string());
    }
    for (id, j, _) in by_post_id(&String::from_utf8_lossy(dups), "post_id") {
        v.insert(id, format!("dup of {}", j["cluster_id"].as_str().unwrap()));
    }
    let n = String::from_utf8_lossy(rejected).lines().count();
    v.insert("<rejected>".into(), n.to_string());
    v
}

fn export(k: &KafkaConfig, topic: &str) -> Vec<u8> {
    let mut out = Vec::new();
    tools::export(k, topic, &mut out, Duration::from_millis(500), false).unwrap();
    out
}

/// Every verdict on the output topics so far, as `verdicts` reads them.
fn exported(k: &KafkaConfig) -> BTreeMap<String, String> {
    verdicts(
        &export(k, &k.unique_topic),
        &export(k, &k.duplicates_topic),
        &export(k, &k.rejected_topic),
    )
}

/// Every output record on the unique and duplicates topics so far, by post id, in the order each
/// partition holds them.
fn outputs_by_id(k: &KafkaConfig) -> BTreeMap<String, Vec<String>> {
    let mut by_id: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (topic, field) in [(&k.unique_topic, "id"), (&k.duplicates_topic, "post_id")] {
        for (id, _, l) in by_post_id(&String::from_utf8_lossy(&export(k, topic)), field) {
            by_id.entry(id).or_default().push(l.to_string());
        }
    }
    by_id
}

/// The verdicts of the file pipeline on `input` (its outputs written in `dir`).
fn file_verdicts(dir: &std::path::Path, input: &std::path::Path) -> BTreeMap<String, String> {
    let outs = Outs::in_dir(dir, "file");
    run_ok(outs.command(input, None));
    let read = |p: &std::path::Path| std::fs::read(p).unwrap();
    verdicts(
        &read(&outs.unique),
        &read(&outs.dups),
        &read(&outs.rejected),
    )
}

/// A mock broker with the topology's topics (2 raw partitions, 4 routed), and its config.
fn mock_cluster(
    idle_after_ms: u64,
) -> (
    MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    KafkaConfig,
) {
    let cluster = MockCluster::new(1).unwrap();
    let mut k = KafkaConfig {
        brokers: cluster.bootstrap_servers(),
        routed_partitions: 4,
        output_partitions: 2,
        idle_after_ms,
        ..KafkaConfig::default()
    };
    // The mock's group coordinator waits up to the session timeout less one second for members
    // whenever one joins or leaves a group that is not empty: a second pass of workers in one
    // group would wait 44 s with the default. Short sessions keep rebalances short.
    k.consumer
        .insert("session.timeout.ms".into(), "6000".into());
    k.consumer
        .insert("heartbeat.interval.ms".into(), "500".into());
    let topics = [
        (k.input_topic.as_str(), 2),
        (k.routed_topic.as_str(), 4),
        (k.unique_topic.as_str(), 2),
        (k.duplicates_topic.as_str(), 2),
        (k.rejected_topic.as_str(), 2),
        (k.changelog_topic.as_str(), 1),
    ];
    // The mock broker creates topics through its own API (it does not serve CreateTopics).
    for (name, parts) in topics {
        cluster.create_topic(name, parts, 1).unwrap();
    }
    (cluster, k)
}

#[test]
fn route_and_dedup_on_a_mock_broker_match_the_file_pipeline() {
    let (_cluster, k) = mock_cluster(2_000);
    let input = data("sample_posts.jsonl");
    let n = tools::produce(&k, &k.input_topic, None, input.to_str().unwrap()).unwrap();
    assert_eq!(n, 31);

    let mut cfg = Config {
        kafka: k.clone(),
        ..Config::default()
    }
    .stages();
    // Enriched outputs print the tokens' words, which the dedup stage otherwise does not decode.
    cfg.output.enrich = true;
    let tokenizer = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
    let stop = AtomicBool::new(false);
    let routing = route::RouteStatus::default();
    let state = tempfile::tempdir().unwrap();
    let local = dedup::LocalStateDir {
        dir: state.path().to_path_buf(),
        analysis_id: "test".into(),
    };
    let (kafka_verdicts, stats) = std::thread::scope(|s| {
        let r = s.spawn(|| route::run(&k, &cfg, &tokenizer, &stop, Some(&routing)));
        let d = s.spawn(|| dedup::run(&k, &cfg, &stop, Some(&routing), Some(&local)));
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut got = BTreeMap::new();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            got = exported(&k);
            let decided = got.len() - 1 + got["<rejected>"].parse::<usize>().unwrap();
            if decided >= 31 {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let rs = r.join().unwrap().unwrap();
        let ds = d.join().unwrap().unwrap();
        (got, (rs, ds))
    });
    assert_eq!(stats.0.records, 31, "route saw every record");
    // Outputs are timed against their raw records: a timestamped export, and the end-to-end
    // latency histogram counted every verdict.
    let mut stamped = Vec::new();
    tools::export(
        &k,
        &k.unique_topic,
        &mut stamped,
        Duration::from_millis(500),
        true,
    )
    .unwrap();
    let stamped = String::from_utf8_lossy(&stamped);
    assert!(stamped.lines().count() > 0);
    let p01 = stamped
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.split_once('\t')?.1).ok())
        .find(|u| u["id"] == "p01")
        .expect("p01 unique");
    assert!(
        p01["simdedup"]["tokens"]
            .as_array()
            .is_some_and(|t| t.iter().any(|w| w == "地铁")),
        "{p01}"
    );
    for line in stamped.lines() {
        let (ms, value) = line.split_once('\t').expect("a timestamp and a tab");
        assert!(ms.parse::<i64>().unwrap() > 1_600_000_000_000, "{line}");
        assert!(value.starts_with('{'), "{line}");
    }
    let text = simdedup::metrics::global().render();
    let count = text
        .lines()
        .find_map(|l| l.strip_prefix("simdedup_end_to_end_latency_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(count.is_some_and(|n| n >= stats.1.records), "{count:?}");

    let dir = tempfile::tempdir().unwrap();
    assert_eq!(kafka_verdicts, file_verdicts(dir.path(), &input));

    // A restart from the local state dir: the index comes from disk, the changelog only from
    // where the state left off, and a new copy of p01 still finds p01's cluster.
    let copy = r#"{"id": "p99", "text": "今天早上地铁二号线又停运了，上班的朋友们记得绕行", "created_at": 1700000100}"#;
    let more = dir.path().join("more.jsonl");
    std::fs::write(&more, format!("{copy}\n")).unwrap();
    tools::produce(&k, &k.input_topic, None, more.to_str().unwrap()).unwrap();
    stop.store(false, Ordering::Relaxed);
    let second = std::thread::scope(|s| {
        let r = s.spawn(|| route::run(&k, &cfg, &tokenizer, &stop, None));
        let d = s.spawn(|| dedup::run(&k, &cfg, &stop, None, Some(&local)));
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            if String::from_utf8_lossy(&export(&k, &k.duplicates_topic)).contains("\"p99\"") {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap().unwrap();
        d.join().unwrap().unwrap()
    });
    let dups = String::from_utf8_lossy(&export(&k, &k.duplicates_topic)).to_string();
    let p99 = dups
        .lines()
        .find(|l| l.contains("\"post_id\":\"p99\""))
        .expect("p99 decided");
    assert!(p99.contains("\"cluster_id\":\"p01\""), "{p99}");
    assert_eq!(second.records, 1, "only the new post is decided again");
    assert!(
        second.applied < stats.1.unique,
        "the changelog is read from where the state left off: {} entries applied",
        second.applied
    );
}

/// The routed partitions a dedup worker has declared idle so far (its progress markers).
fn idle_markers(k: &KafkaConfig) -> std::collections::BTreeSet<u32> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    use simdedup::io::kafka::wire::{decode_changelog, ChangelogRead};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &k.brokers)
        .set("group.id", "idle-markers")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&k.changelog_topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut idle = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                if let Ok(ChangelogRead::Marker(marker)) =
                    decode_changelog(m.payload().unwrap_or_default())
                {
                    // (A sync record is a marker of no routed partition.)
                    if marker.idle && marker.partition < k.routed_partitions {
                        idle.insert(marker.partition);
                    }
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    idle
}

// A dedup worker started before any route worker, on a backlog: while the raw topic holds posts
// the route group has not routed, it takes none of its empty routed partitions as idle, though
// they stay empty for several times `idle_after_ms` (it would decide their posts by arrival,
// out of the order a replay gives). Once the route stage runs, the verdicts are the file
// pipeline's.
#[test]
fn a_dedup_worker_started_before_the_route_stage_takes_no_partition_as_idle() {
    // The group's first assignment, then three times `idle_after_ms`. The route group's first
    // commit (its join, about 4 s on the mock, then a second) must come well before ten times
    // `idle_after_ms` since the dedup worker's start, after which a route group that never
    // committed anything counts as absent and empty partitions would be told idle by time only.
    let (idle_before_routing, got, _) = route_after_dedup(2_000, Duration::from_millis(6_000));
    assert!(
        idle_before_routing.is_empty(),
        "partitions declared idle before routing: {idle_before_routing:?}"
    );
    assert_eq!(got, file_verdicts_of_the_sample());
}

// The end of a backlog is decided once the route group has routed it, not `idle_after_ms`
// after the last routed record: a dedup worker without a route stage in its process takes an
// empty partition fetched to its end as idle once the route group's commits confirm that the
// raw topic is routed past that partition's last record.
#[test]
fn a_dedup_worker_decides_the_end_of_a_backlog_once_it_is_routed() {
    let idle_after = Duration::from_secs(60);
    let (_, got, took) = route_after_dedup(idle_after.as_millis() as u64, Duration::from_secs(2));
    assert_eq!(got, file_verdicts_of_the_sample());
    assert!(
        took < idle_after / 3,
        "the backlog took {took:?} from the route stage's start"
    );
}

/// The verdicts of the file pipeline on the sample posts.
fn file_verdicts_of_the_sample() -> BTreeMap<String, String> {
    let dir = tempfile::tempdir().unwrap();
    file_verdicts(dir.path(), &data("sample_posts.jsonl"))
}

/// Produces the sample posts, starts a dedup worker without a route stage (`idle_after_ms`
/// as given) and, `delay` later, a route worker. Returns the partitions with idle markers when
/// the route worker started, every verdict once all are out (within 60 s), and how long after
/// the route worker's start they were.
fn route_after_dedup(
    idle_after_ms: u64,
    delay: Duration,
) -> (
    std::collections::BTreeSet<u32>,
    BTreeMap<String, String>,
    Duration,
) {
    let (_cluster, mut k) = mock_cluster(idle_after_ms);
    k.wake_grace_ms = 0;
    let input = data("sample_posts.jsonl");
    tools::produce(&k, &k.input_topic, None, input.to_str().unwrap()).unwrap();
    let cfg = Config {
        kafka: k.clone(),
        ..Config::default()
    }
    .stages();
    let tokenizer = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let d = s.spawn(|| dedup::run(&k, &cfg, &stop, None, None));
        std::thread::sleep(delay);
        let idle = idle_markers(&k);
        let started = Instant::now();
        let r = s.spawn(|| route::run(&k, &cfg, &tokenizer, &stop, None));
        let deadline = started + Duration::from_secs(60);
        let mut got = BTreeMap::new();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            got = exported(&k);
            if got.len() - 1 + got["<rejected>"].parse::<usize>().unwrap() >= 31 {
                break;
            }
        }
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        r.join().unwrap().unwrap();
        d.join().unwrap().unwrap();
        (idle, got, took)
    })
}

// A dedup worker with a state dir writes the generations it seals whole after the checkpoint
// that stores their last entries; its next start loads them instead of rebuilding them, and
// decides as the file pipeline does.
#[test]
fn a_dedup_worker_keeps_the_generations_it_seals_whole() {
    keeps_the_generations_it_seals_whole(1);
}

// So do two workers of one group, each with its own state dir: each holds the whole window, its
// own entries stored once the changelog echoes them, the other's as they arrive (late ones, after
// a generation was written, added at the next start from the store).
#[test]
fn two_dedup_workers_keep_the_generations_they_seal_whole() {
    keeps_the_generations_it_seals_whole(2);
}

fn keeps_the_generations_it_seals_whole(workers: usize) {
    let (_cluster, k) = mock_cluster(1_000);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    // 6-hour generations of 1,800 posts: a partial one (too small to write), three sealed
    // while the workers run `a`, then the growing one, which `b` seals.
    crate::common::varied_posts(&a, 0, 6000, |i| i - 5);
    crate::common::varied_posts(&b, 6000, 2000, |i| (i * 7) % 5000);
    let cfg = Config {
        kafka: k.clone(),
        ..Config::default()
    }
    .stages();
    let tokenizer = Tokenizer::new(Weighting::Tf, DEFAULT_STOPWORDS);
    let locals: Vec<dedup::LocalStateDir> = (0..workers)
        .map(|w| dedup::LocalStateDir {
            dir: dir.path().join(format!("state{w}")),
            analysis_id: "test".into(),
        })
        .collect();
    let stop = AtomicBool::new(false);
    let pass = |input: &std::path::Path, want: usize| {
        tools::produce(&k, &k.input_topic, None, input.to_str().unwrap()).unwrap();
        stop.store(false, Ordering::Relaxed);
        std::thread::scope(|s| {
            let r = s.spawn(|| route::run(&k, &cfg, &tokenizer, &stop, None));
            let d: Vec<_> = locals
                .iter()
                .map(|l| s.spawn(|| dedup::run(&k, &cfg, &stop, None, Some(l))))
                .collect();
            let deadline = Instant::now() + Duration::from_secs(180);
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(500));
                if exported(&k).len() > want {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            r.join().unwrap().unwrap();
            d.into_iter()
                .map(|d| d.join().unwrap().unwrap())
                .collect::<Vec<_>>()
        })
    };
    let files = |l: &dedup::LocalStateDir| -> Vec<String> {
        let mut f: Vec<String> = std::fs::read_dir(l.dir.join("sealed"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        f.sort();
        f
    };
    // A worker that joins a moment after the other makes the group rebalance once more (the
    // mock broker fails the late member's first sync): what was decided before that and not yet
    // committed is decided again by the next owner, as at-least-once delivery allows. So the
    // counts below allow repeats, and every repeat must be the first output again.
    let repeats_are_identical = |by_id: &BTreeMap<String, Vec<String>>| {
        for (id, outs) in by_id {
            assert!(outs.iter().all(|o| *o == outs[0]), "{id}: {outs:?}");
        }
    };
    // One worker alone is never rebalanced: it decides each post once.
    let decided = |stats: &[dedup::DedupStats], posts: u64| {
        let n: u64 = stats.iter().map(|s| s.records).sum();
        match workers {
            1 => assert_eq!(n, posts),
            _ => assert!(n >= posts, "{n}"),
        }
    };
    let first = pass(&a, 6000);
    decided(&first, 6000);
    let after_first = outputs_by_id(&k);
    repeats_are_identical(&after_first);
    for (s, l) in first.iter().zip(&locals) {
        assert_eq!((s.restored, s.sealed_loaded), (0, 0));
        assert_eq!(
            files(l).len(),
            3,
            "the full generations sealed while it ran: {:?}",
            files(l)
        );
    }
    let second = pass(&b, 8000);
    decided(&second, 2000);
    let after_second = outputs_by_id(&k);
    repeats_are_identical(&after_second);
    // The first pass stopped cleanly, committing all it had decided: the second decides none of
    // its posts again.
    for (id, outs) in &after_first {
        assert_eq!(after_second[id].len(), outs.len(), "{id} decided again");
    }
    for (s, l) in second.iter().zip(&locals) {
        // Everything but the worker's own entries the changelog had not echoed when it stopped
        // (the changelog's tail brings those).
        assert!((5900..=6000).contains(&s.restored), "{}", s.restored);
        // Each of the three files holds what its generation had when it was written: all of
        // it with one worker; with two, the other worker's last entries may have come later.
        match workers {
            1 => assert_eq!(s.sealed_loaded, 5400, "three generations loaded whole"),
            _ => assert!(
                (3 * 1024..=5400).contains(&s.sealed_loaded),
                "three generations loaded whole: {}",
                s.sealed_loaded
            ),
        }
        assert_eq!(files(l).len(), 4, "and the one `b` sealed: {:?}", files(l));
    }
    let kafka = exported(&k);
    let both = dir.path().join("both.jsonl");
    let mut text = std::fs::read(&a).unwrap();
    text.extend(std::fs::read(&b).unwrap());
    std::fs::write(&both, text).unwrap();
    assert_eq!(kafka, file_verdicts(dir.path(), &both));
}

#[test]
fn topics_that_exist_need_no_create_topics() {
    // The mock broker serves no CreateTopics: before existing topics were skipped, this waited
    // out the 30 s admin timeout and failed.
    let (_cluster, k) = mock_cluster(2_000);
    let t = Instant::now();
    simdedup::io::kafka::admin::ensure_topics(
        &k,
        &[(k.input_topic.as_str(), 2), (k.changelog_topic.as_str(), 1)],
    )
    .unwrap();
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn watermarks_of_every_partition_in_two_requests_match_one_partition_at_a_time() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let (_cluster, k) = mock_cluster(2_000);
    let lines = (0..50).map(|i| format!("{{\"id\":\"{i}\",\"text\":\"t\"}}").into_bytes());
    assert_eq!(
        tools::produce_lines(&k, &k.input_topic, None, lines).unwrap(),
        50
    );
    let consumer: BaseConsumer = simdedup::io::kafka::client::consumer_config(&k, "marks")
        .create()
        .unwrap();
    let timeout = Duration::from_secs(10);
    // The input topic holds the 50 records (split by key), the changelog nothing.
    for (topic, parts, records) in [(&k.input_topic, 2, 50), (&k.changelog_topic, 1, 0)] {
        let ps: Vec<u32> = (0..parts).collect();
        let marks = simdedup::io::kafka::fetch::watermarks(&consumer, topic, &ps, timeout).unwrap();
        let one_by_one: BTreeMap<u32, (i64, i64)> = ps
            .iter()
            .map(|p| {
                (
                    *p,
                    consumer
                        .fetch_watermarks(topic, *p as i32, timeout)
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(marks, one_by_one, "{topic}");
        assert_eq!(
            marks.values().map(|(l, h)| h - l).sum::<i64>(),
            records,
            "{topic}"
        );
    }
}

#[test]
fn the_mock_broker_command_serves_its_topics_until_a_signal() {
    use std::io::BufRead;
    let mut broker = crate::common::bin()
        .args(["mock-broker", "--topic", "mb.posts:3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(broker.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("SIMDEDUP_BROKERS=")
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_string();
    let input = data("sample_posts.jsonl");
    let mut produce = crate::common::bin();
    produce
        .args([
            "produce",
            "--brokers",
            &addr,
            "--topic",
            "mb.posts",
            "--partitions",
            "3",
        ])
        .arg("--input")
        .arg(&input);
    let produced = run_ok(produce);
    assert!(String::from_utf8_lossy(&produced.stderr).contains("produced 31 records"));
    let k = KafkaConfig {
        brokers: addr,
        ..KafkaConfig::default()
    };
    let back = export(&k, "mb.posts");
    assert_eq!(String::from_utf8_lossy(&back).lines().count(), 31);
    // SAFETY: kill(2) on a child spawned here and not yet reaped.
    unsafe { libc::kill(broker.id() as libc::pid_t, libc::SIGTERM) };
    let status = broker.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}
