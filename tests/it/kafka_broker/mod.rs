//! End-to-end tests against a real Kafka-compatible broker (tansu, started by `scripts/test.sh`
//! through `scripts/broker.sh`; address in `SIMDEDUP_TEST_BROKERS`). Every test uses fresh topic
//! and group names. Built only with `--features broker-tests`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    bin, data, family_sum, http_get, kept_on_failure, metrics_address, run_ok, sample,
    sample_posts, Outs,
};

mod topics;

use topics::{brokers, fresh, Topics};

fn stream(dir: &Path, rounds: usize) -> std::path::PathBuf {
    let path = dir.join("stream.jsonl");
    crate::common::write_stream(&path, rounds);
    path
}

fn file_verdicts(dir: &Path, input: &Path) -> BTreeMap<String, String> {
    let outs = Outs::in_dir(dir, "file");
    run_ok(outs.command(input, None));
    let mut v = BTreeMap::new();
    for l in std::fs::read_to_string(&outs.unique).unwrap().lines() {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        v.insert(j["id"].as_str().unwrap().to_string(), "unique".to_string());
    }
    for l in std::fs::read_to_string(&outs.dups).unwrap().lines() {
        let j: serde_json::Value = serde_json::from_str(l).unwrap();
        v.insert(
            j["post_id"].as_str().unwrap().to_string(),
            format!("dup of {}", j["cluster_id"].as_str().unwrap()),
        );
    }
    v
}

fn produce(t: &Topics, input: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
        .args([
            "produce",
            "--brokers",
            &brokers(),
            "--topic",
            &t.input,
            "--input",
        ])
        .arg(input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_for_all(t: &Topics, n: usize, limit: Duration) -> BTreeMap<String, Vec<String>> {
    let deadline = Instant::now() + limit;
    loop {
        let v = t.verdicts(&t.unique, &t.dups);
        if v.len() >= n || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn stop(mut c: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(40);
    while c.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "worker did not stop within its shutdown deadline"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_same(live: &BTreeMap<String, Vec<String>>, file: &BTreeMap<String, String>) {
    let lost: Vec<&String> = file.keys().filter(|id| !live.contains_key(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} posts have no verdict, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let mut differ = 0;
    for (id, want) in file {
        let got = &live[id];
        assert!(
            got.iter().all(|g| g == &got[0]),
            "{id} got conflicting verdicts {got:?}"
        );
        differ += usize::from(&got[0] != want);
    }
    assert_eq!(
        differ, 0,
        "verdicts differ from the file pipeline for {differ} posts"
    );
}

#[test]
fn role_all_matches_the_file_pipeline_across_a_restart_and_replays_identically() {
    let dir = kept_on_failure();
    let input = stream(dir.path(), 60);
    let n = 60 * sample_posts().len();
    let file = file_verdicts(dir.path(), &input);
    let t = Topics::new();
    produce(&t, &input);

    // First run stops (SIGTERM) partway; the second run resumes from the committed offsets.
    let first = t.run("all", &dir.path().join("first.log"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while t.verdicts(&t.unique, &t.dups).len() < n / 4 {
        assert!(
            Instant::now() < deadline,
            "no progress: {}",
            std::fs::read_to_string(dir.path().join("first.log")).unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(first);
    let second = t.run("all", &dir.path().join("second.log"));
    let live = wait_for_all(&t, n, Duration::from_secs(180));
    stop(second);
    assert_same(&live, &file);

    // Two replays of the raw topic into fresh topics: identical to each other and to the live run.
    for i in 0..2 {
        let (u, d, r) = (fresh("ru"), fresh("rd"), fresh("rr"));
        let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args([
                "replay",
                "--brokers",
                &brokers(),
                "--input-topic",
                &t.input,
                "--routed-partitions",
                "4",
            ])
            .args([
                "--unique-topic",
                &u,
                "--duplicates-topic",
                &d,
                "--rejected-topic",
                &r,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "replay {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_same(&t.verdicts(&u, &d), &file);
    }
}

/// Waits until at least `k` posts have a verdict; returns how many have one.
fn wait_for(t: &Topics, k: usize, limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let got = t.verdicts(&t.unique, &t.dups).len();
        assert!(
            Instant::now() < deadline,
            "stuck at {got} verdicts, waiting for {k}"
        );
        if got >= k {
            return got;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The routed partitions a worker owns according to its log: those of its last `Assigned`
/// event, or none after a `Revoked` one.
fn owned_partitions(log: &Path) -> Vec<u32> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let Some(line) = text
        .lines()
        .rfind(|l| l.contains("event=Assigned(") || l.contains("event=Revoked("))
    else {
        return Vec::new();
    };
    if line.contains("Revoked(") {
        return Vec::new();
    }
    let inner = line.split("Assigned([").nth(1).unwrap_or("");
    let inner = inner.split(']').next().unwrap_or("");
    inner
        .split(',')
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

/// Waits until the live workers own all four routed partitions between them, each once.
fn wait_settled(logs: &[&Path]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut all: Vec<u32> = logs.iter().flat_map(|l| owned_partitions(l)).collect();
        all.sort_unstable();
        if all == [0, 1, 2, 3] {
            return;
        }
        if Instant::now() > deadline {
            let events: Vec<String> = logs
                .iter()
                .map(|l| {
                    let text = std::fs::read_to_string(l).unwrap_or_default();
                    let ev: Vec<&str> = text.lines().filter(|x| x.contains("event=")).collect();
                    format!("{}: {}", l.display(), ev.join(" | "))
                })
                .collect();
            panic!(
                "the group did not settle: live workers own {all:?}\n{}",
                events.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Splits the stream file into `k` consecutive chunk files.
fn chunks(input: &Path, k: usize) -> Vec<std::path::PathBuf> {
    let text = std::fs::read_to_string(input).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let size = lines.len().div_ceil(k);
    lines
        .chunks(size)
        .enumerate()
        .map(|(i, c)| {
            let path = input.with_extension(format!("part{i}"));
            std::fs::write(&path, c.join("\n") + "\n").unwrap();
            path
        })
        .collect()
}

/// Membership churn in the dedup group while the stream is decided. The stream is produced in
/// five parts, and each membership change happens while a part is in flight: a worker joins,
/// the first one leaves (SIGTERM), another joins, and one is killed with SIGKILL and replaced.
/// Every post still gets exactly the file pipeline's verdict. Each change waits for the group
/// to settle first: tansu 0.6 hands a departed member's partitions to nobody when the next
/// change arrives before its rebalance ends (see scripts/kafka-check.sh), and gives a killed
/// member's partitions to the next member that joins, not to the survivors.
#[test]
fn dedup_workers_join_leave_and_die_mid_stream_without_changing_a_verdict() {
    let dir = kept_on_failure();
    let input = stream(dir.path(), 100);
    let n = 100 * sample_posts().len();
    let parts = chunks(&input, 5);
    let file = file_verdicts(dir.path(), &input);
    let t = Topics::new();
    // A killed member is evicted after the session timeout; keep it short.
    let config = dir.path().join("churn.toml");
    std::fs::write(
        &config,
        "[kafka.consumer]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"\n",
    )
    .unwrap();
    let log = |name: &str| dir.path().join(name);
    let (la, lb, lc, ld) = (log("a.log"), log("b.log"), log("c.log"), log("d.log"));
    let with_config = |role: &str, l: &Path| t.run_with(role, l, &[&config]);
    let limit = Duration::from_secs(300);
    let upto = |k: usize| k * n / 5;

    produce(&t, &parts[0]);
    let route = with_config("route", &log("route.log"));
    let a = with_config("dedup", &la);
    wait_settled(&[&la]);
    wait_for(&t, upto(1), limit);

    produce(&t, &parts[1]);
    let mut b = with_config("dedup", &lb);
    wait_settled(&[&la, &lb]);
    wait_for(&t, upto(2), limit);

    produce(&t, &parts[2]);
    stop(a);
    wait_settled(&[&lb]);
    let c = with_config("dedup", &lc);
    wait_settled(&[&lb, &lc]);
    wait_for(&t, upto(3), limit);

    produce(&t, &parts[3]);
    b.kill().unwrap();
    b.wait().unwrap();
    // After the session timeout tansu 0.6 evicts the dead member but gives the survivor only its
    // own partitions back; the dead member's go to the next member that joins.
    std::thread::sleep(Duration::from_secs(10));
    let d = with_config("dedup", &ld);
    wait_settled(&[&lc, &ld]);
    wait_for(&t, upto(4), limit);

    produce(&t, &parts[4]);
    let live = wait_for_all(&t, n, limit);
    for w in [route, c, d] {
        stop(w);
    }
    assert_same(&live, &file);
}

fn topic_lines(t: &Topics, topic: &str) -> f64 {
    String::from_utf8_lossy(&t.export(topic)).lines().count() as f64
}

#[test]
fn metrics_scraped_during_a_run_add_up_to_the_output_topics() {
    let dir = kept_on_failure();
    // The generated stream plus the sample, whose last lines are broken (rejected by reason).
    let input = stream(dir.path(), 10);
    let mut text = std::fs::read(&input).unwrap();
    text.extend(std::fs::read(data("sample_posts.jsonl")).unwrap());
    std::fs::write(&input, &text).unwrap();
    let n = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as f64;
    let t = Topics::new();
    produce(&t, &input);
    let log = dir.path().join("all.log");
    // JSON logs with librdkafka's consumer-group debug lines: they must reach the same log.
    let config = dir.path().join("debug.toml");
    std::fs::write(&config, "[kafka.consumer]\ndebug = \"cgrp\"\n").unwrap();
    let mut command = t.command("all", &log);
    // Global flags may follow the subcommand; the last --log-level wins.
    command
        .args([
            "--log-format",
            "json",
            "--log-level",
            "info,librdkafka=debug",
        ])
        .env("SIMDEDUP_CONFIG", &config);
    let worker = t.spawn(command);
    let address = metrics_address(&log);

    // Scrape while the worker runs, until every record is counted (counters are bumped before
    // the outputs are produced) and librdkafka's statistics have reported the consumer lag.
    let deadline = Instant::now() + Duration::from_secs(180);
    let m = loop {
        let (status, m) = http_get(&address, "/metrics");
        assert_eq!(status, 200);
        let done = sample(&m, "simdedup_posts_unique_total").unwrap_or(0.0)
            + sample(&m, "simdedup_posts_duplicate_total").unwrap_or(0.0)
            + family_sum(&m, "simdedup_posts_rejected_total");
        if done >= n && m.contains("simdedup_consumer_lag{") {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "counted {done} of {n}:\n{m}\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(http_get(&address, "/health"), (200, "ready\n".to_string()));
    let get = |s: &str| sample(&m, s).unwrap_or_else(|| panic!("{s} missing:\n{m}"));
    let posts_in = get("simdedup_posts_in_total");
    let unique = get("simdedup_posts_unique_total");
    let dups = get("simdedup_posts_duplicate_total");
    let rejected = family_sum(&m, "simdedup_posts_rejected_total");
    assert_eq!(posts_in, n);
    assert_eq!(
        posts_in,
        unique + dups + rejected,
        "in = unique + duplicates + rejected"
    );
    assert_eq!(unique, topic_lines(&t, &t.unique));
    assert_eq!(dups, topic_lines(&t, &t.dups));
    assert_eq!(rejected, topic_lines(&t, &t.rejected));
    assert!(rejected > 0.0);
    assert!(
        get("simdedup_rebalances_total{kind=\"assign\"}") >= 2.0,
        "route and dedup"
    );
    assert!(get("simdedup_index_entries") > 0.0);
    assert!(get("simdedup_stage_latency_seconds_count{stage=\"decide\"}") > 0.0);
    stop(worker);
    let rdkafka_lines = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["target"] == "librdkafka" && j["fields"]["facility"].is_string())
        .count();
    assert!(rdkafka_lines > 0, "no librdkafka line in the JSON log");
}

/// A broker of the test's own (the shared one must stay up): `scripts/broker.sh` in a run dir
/// under `dir`. Returns its address and pid file.
fn own_broker(dir: &Path) -> (String, std::path::PathBuf) {
    let run = dir.join("run");
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/broker.sh"))
        .args(["start", "--sqlite"])
        .arg(dir.join("broker.db"))
        .env("SIMDEDUP_RUN", &run)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "broker.sh start failed");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let addr = stdout
        .trim()
        .strip_prefix("SIMDEDUP_BROKERS=")
        .unwrap_or_else(|| panic!("unexpected broker.sh output: {stdout}"))
        .to_string();
    (addr, run.join("broker.pid"))
}

#[test]
fn a_worker_whose_broker_died_still_exits_within_its_shutdown_deadline() {
    let dir = kept_on_failure();
    let (addr, pid_file) = own_broker(dir.path());
    let t = Topics::new();
    let log = dir.path().join("all.log");
    let mut c = t.command_at("all", &log, &addr);
    c.env("SIMDEDUP_KAFKA__SHUTDOWN_TIMEOUT_MS", "2000");
    let mut worker = t.spawn(c);
    // Records in flight give the shutdown offsets to commit (with nothing to commit it is quick).
    let input = stream(dir.path(), 2);
    let mut p = bin();
    p.args([
        "produce",
        "--brokers",
        &addr,
        "--topic",
        &t.input,
        "--input",
    ])
    .arg(&input);
    run_ok(p);
    crate::common::wait_for_log(&log, "event=Assigned([", Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(3));
    let broker_pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = Command::new("kill")
        .args(["-KILL", broker_pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    crate::common::terminate(&worker);
    let status = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no exit 30 s after SIGTERM with a 2 s deadline"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let secs = t0.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        secs < 6.0,
        "exited {secs:.1} s after SIGTERM (deadline 2 s + 2 s grace):\n{text}"
    );
    // A shutdown that finished is fine; one cut short says so and exits with 1.
    match status.code() {
        Some(0) => {}
        Some(1) => assert!(text.contains("shutdown overran"), "{text}"),
        other => panic!("exit status {other:?}:\n{text}"),
    }
}
