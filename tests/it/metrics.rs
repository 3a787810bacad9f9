//! The metrics endpoint of `simdedup dedup`: scraped over TCP after the run (`--metrics-hold`),
//! its counters add up and equal the output files; `/health` is ready; a taken port is a usage
//! error naming the address.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{
    data, family_sum, http_get, metrics_address, sample, terminate, wait_for_log, Outs,
};

fn lines(path: &std::path::Path) -> f64 {
    std::fs::read(path)
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as f64
}

#[test]
fn dedup_metrics_add_up_and_equal_the_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let outs = Outs::in_dir(dir.path(), "m");
    let log = dir.path().join("stderr.log");
    let input = data("sample_posts.jsonl");
    let mut cmd = outs.command(&input, None);
    cmd.args(["--metrics-addr", "127.0.0.1:0", "--metrics-hold"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut child = cmd.spawn().unwrap();
    let address = metrics_address(&log);
    wait_for_log(&log, "serving metrics until", Duration::from_secs(60));

    let (status, health) = http_get(&address, "/health");
    assert_eq!((status, health.as_str()), (200, "ready\n"));
    let (status, m) = http_get(&address, "/metrics");
    assert_eq!(status, 200);
    let get = |s: &str| sample(&m, s).unwrap_or_else(|| panic!("{s} missing:\n{m}"));
    let posts_in = get("simdedup_posts_in_total");
    let unique = get("simdedup_posts_unique_total");
    let dups = get("simdedup_posts_duplicate_total");
    let rejected = family_sum(&m, "simdedup_posts_rejected_total");
    assert_eq!(
        posts_in,
        unique + dups + rejected,
        "in = unique + duplicates + rejected"
    );
    assert_eq!(posts_in, lines(&input));
    assert_eq!(unique, lines(&outs.unique));
    assert_eq!(dups, lines(&outs.dups));
    assert_eq!(rejected, lines(&outs.rejected));
    assert_eq!(
        get("simdedup_posts_rejected_total{reason=\"invalid_json\"}"),
        2.0
    );
    assert_eq!(family_sum(&m, "simdedup_matches_total"), dups);
    // Histograms count every post that reached the index, and every stage saw every record.
    assert!(get("simdedup_candidates_per_query_count") > 0.0);
    assert!(get("simdedup_bucket_size_count") > 0.0);
    assert_eq!(
        get("simdedup_stage_latency_seconds_count{stage=\"decode\"}"),
        posts_in
    );
    assert_eq!(
        get("simdedup_stage_latency_seconds_count{stage=\"output\"}"),
        posts_in
    );
    assert!(get("simdedup_index_entries") > 0.0);
    assert!(get("simdedup_index_bytes") > 0.0);
    assert!(sample(&m, "simdedup_window_lag_seconds").is_some());
    assert_eq!(http_get(&address, "/nope").0, 404);

    terminate(&child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "held process did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "a finished, held run exits 0");
}

#[test]
fn a_taken_metrics_port_is_a_usage_error_naming_the_address() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let outs = Outs::in_dir(dir.path(), "b");
    let mut cmd = outs.command(&data("sample_posts.jsonl"), None);
    cmd.args(["--metrics-addr", &address]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot serve metrics on {address}")),
        "{stderr}"
    );
}
