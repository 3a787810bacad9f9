//! `inspect` and `explain` through the binary: counts agree with a real `dedup` run, `query`
//! agrees with the duplicate event and with `explain`, and a running worker's lock is reported.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::{bin, data, read_jsonl, run_ok, sample_posts, Outs};

fn json(out: std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("stdout is JSON")
}

fn text_of(id: &str) -> String {
    let posts = sample_posts();
    let p = posts
        .iter()
        .find(|p| p["id"] == id)
        .expect("post in sample");
    p["text"].as_str().unwrap().to_string()
}

#[test]
fn inspect_counts_query_and_explain_agree_with_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let outs = Outs::in_dir(dir.path(), "s");
    run_ok(outs.command(&data("sample_posts.jsonl"), Some(&state)));
    let unique = read_jsonl(&outs.unique);
    let indexed = unique
        .iter()
        .filter(|u| u["simdedup"]["empty"] != true)
        .count();

    let mut c = bin();
    c.args(["inspect", "--json", "--state-dir"]).arg(&state);
    let r = json(run_ok(c));
    // The sample spans minutes: every non-empty unique post is one live representative.
    assert_eq!(r["entries"]["representatives"], indexed);
    let per_gen: u64 = r["entries"]["per_generation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g[1].as_u64().unwrap())
        .sum();
    assert_eq!(r["entries"]["total"], per_gen);
    assert_eq!(r["run"]["completed"], true);
    assert_eq!(r["run"]["counts"][0], unique.len());

    // A near (not exact) duplicate from the run: query its text, then explain the pair.
    let dups = read_jsonl(&outs.dups);
    let d = dups
        .iter()
        .find(|d| d["method"] == "edit")
        .expect("the sample has an edit duplicate");
    let cluster = d["cluster_id"].as_str().unwrap();
    let dup_text = text_of(d["post_id"].as_str().unwrap());
    let mut c = bin();
    c.args(["inspect", "--state-dir"])
        .arg(&state)
        .args(["query", &dup_text, "--limit", "3", "--json"]);
    let q = json(run_ok(c));
    assert_eq!(q["verdict"]["kind"], "duplicate");
    assert_eq!(q["verdict"]["cluster"], cluster);
    let top = &q["nearest"][0];
    assert_eq!(top["id"], cluster);
    assert_eq!(top["rule"], "edit");
    assert_eq!(top["distance"], d["distance"]);
    assert_eq!(q["nearest"].as_array().unwrap().len(), 3);

    let mut c = bin();
    c.args(["explain", "--json", &text_of(cluster), &dup_text]);
    let e = json(run_ok(c));
    assert_eq!(e["distance"], top["distance"]);
    let (es, qs) = (
        e["similarity"].as_f64().unwrap(),
        top["similarity"].as_f64().unwrap(),
    );
    assert!((es - qs).abs() < 1e-6, "explain Sim {es} vs query Sim {qs}");
    assert_eq!(e["verdict"]["method"], "edit");
}

#[test]
fn inspect_refuses_a_locked_state_dir_and_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let outs = Outs::in_dir(dir.path(), "s");
    run_ok(outs.command(&data("sample_posts.jsonl"), Some(&state)));
    // A worker reading stdin holds the state dir open until stdin closes.
    let worker_outs = Outs::in_dir(dir.path(), "w");
    let mut w = worker_outs.command(std::path::Path::new("-"), Some(&state));
    let mut child = w
        .args(["--no-progress", "--log-level", "info"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("state restored") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "worker exited early"
        );
    }
    let mut c = bin();
    c.args(["inspect", "--state-dir"]).arg(&state);
    let out = c.output().unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert_eq!(out.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("in use by a running worker"), "{msg}");

    let missing = dir.path().join("typo");
    let mut c = bin();
    c.args(["inspect", "--state-dir"]).arg(&missing);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!missing.exists(), "inspect must not create a state dir");
}
