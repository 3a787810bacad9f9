//! The shipped sample through `simdedup dedup`: every input line has exactly the expected outcome.

use std::collections::HashMap;

use crate::common::{data, read_jsonl, run_ok, Outs};

#[test]
fn every_sample_line_gets_its_expected_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let outs = Outs::in_dir(dir.path(), "s");
    let run = run_ok(outs.command(&data("sample_posts.jsonl"), Some(&dir.path().join("state"))));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("31 records"), "summary missing: {stderr}");

    let unique = read_jsonl(&outs.unique);
    let dups = read_jsonl(&outs.dups);
    let rejected = read_jsonl(&outs.rejected);
    assert_eq!(
        unique.len() + dups.len() + rejected.len(),
        31,
        "every line gets exactly one outcome"
    );

    let uniq: HashMap<String, &serde_json::Value> = unique
        .iter()
        .map(|u| (u["id"].as_str().unwrap().to_string(), u))
        .collect();
    let dup: HashMap<String, &serde_json::Value> = dups
        .iter()
        .map(|d| (d["post_id"].as_str().unwrap().to_string(), d))
        .collect();
    let mut rejected_reasons: Vec<String> = rejected
        .iter()
        .map(|r| r["reason"].as_str().unwrap().to_string())
        .collect();
    let mut expected_reasons = Vec::new();
    for e in read_jsonl(&data("sample_expected.jsonl")) {
        let id = e["id"].as_str().unwrap_or_default().to_string();
        match e["expect"].as_str().unwrap() {
            "unique" => {
                let u = uniq
                    .get(&id)
                    .unwrap_or_else(|| panic!("{id} should be unique"));
                assert!(
                    u.get("simdedup").is_none(),
                    "{id}: plain unique posts pass through unchanged"
                );
            }
            "unique-empty" => {
                let u = uniq
                    .get(&id)
                    .unwrap_or_else(|| panic!("{id} should be unique (empty)"));
                assert_eq!(u["simdedup"]["empty"], true, "{id} should be marked empty");
            }
            "duplicate" => {
                let d = dup
                    .get(&id)
                    .unwrap_or_else(|| panic!("{id} should be a duplicate"));
                assert_eq!(
                    d["cluster_id"], e["cluster"],
                    "{id} joined the wrong cluster: {d}"
                );
                assert_eq!(d["schema"], "simdedup.duplicate.v1");
                for key in [
                    "matched_id",
                    "distance",
                    "similarity",
                    "overlap",
                    "created_at",
                    "method",
                ] {
                    assert!(d.get(key).is_some(), "{id}: duplicate event lacks {key}");
                }
            }
            "rejected" => expected_reasons.push(e["reason"].as_str().unwrap().to_string()),
            other => panic!("unknown expectation {other}"),
        }
    }
    rejected_reasons.sort();
    expected_reasons.sort();
    assert_eq!(rejected_reasons, expected_reasons);
    assert!(rejected
        .iter()
        .all(|r| r["schema"] == "simdedup.rejected.v1" && r["line"].as_u64().is_some()));
}

#[test]
fn enrichment_adds_simhash_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let outs = Outs::in_dir(dir.path(), "e");
    let mut cmd = outs.command(&data("sample_posts.jsonl"), None);
    cmd.arg("--enrich");
    run_ok(cmd);
    let unique = read_jsonl(&outs.unique);
    let p01 = unique
        .iter()
        .find(|u| u["id"] == "p01")
        .expect("p01 unique");
    let hex = p01["simdedup"]["simhash"].as_str().expect("simhash");
    assert_eq!(hex.len(), 16);
    assert!(p01["simdedup"]["tokens"]
        .as_array()
        .is_some_and(|t| t.iter().any(|w| w == "地铁")));
}

#[test]
fn reading_stdin_and_writing_stdout_gives_the_same_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let file_outs = Outs::in_dir(dir.path(), "f");
    run_ok(file_outs.command(&data("sample_posts.jsonl"), None));
    let mut cmd = crate::common::bin();
    let dups = dir.path().join("stdin-dups.jsonl");
    cmd.args([
        "dedup",
        "--input",
        "-",
        "--unique-out",
        "-",
        "--duplicates-out",
    ])
    .arg(&dups)
    .arg("--rejected-out")
    .arg(dir.path().join("stdin-rej.jsonl"))
    .stdin(std::fs::File::open(data("sample_posts.jsonl")).unwrap());
    let out = run_ok(cmd);
    assert_eq!(out.stdout, std::fs::read(&file_outs.unique).unwrap());
    assert_eq!(
        std::fs::read(&dups).unwrap(),
        std::fs::read(&file_outs.dups).unwrap()
    );
}

#[test]
fn same_output_twice_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("x.jsonl");
    let out = crate::common::bin()
        .args(["dedup", "--input"])
        .arg(data("sample_posts.jsonl"))
        .arg("--unique-out")
        .arg(&f)
        .arg("--duplicates-out")
        .arg(&f)
        .arg("--rejected-out")
        .arg(dir.path().join("r.jsonl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("given twice"));
}
