//! Edge contracts of the file pipeline: non-file outputs, closed pipes, rejected ids, reruns,
//! late and outlying event times, signals while waiting on stdin, damaged state.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::{bin, data, read_jsonl, run_ok, write_stream, Outs};

#[test]
fn dev_null_serves_as_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = bin();
    c.args(["dedup", "--input"])
        .arg(data("sample_posts.jsonl"))
        .args([
            "--unique-out",
            "/dev/null",
            "--duplicates-out",
            "/dev/null",
            "--rejected-out",
            "/dev/null",
            "--state-dir",
        ])
        .arg(dir.path().join("state"));
    let out = run_ok(c);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("10 duplicates"), "{err}");
}

#[test]
fn a_closed_stdout_pipe_ends_the_run_quietly_with_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("stream.jsonl");
    write_stream(&input, 2000);
    let outs = Outs::in_dir(dir.path(), "p");
    let state = dir.path().join("state");
    // Frequent checkpoints flush stdout long before the input ends.
    let cfg = dir.path().join("cfg.toml");
    std::fs::write(&cfg, "[state]\ncheckpoint_every_records = 100\n").unwrap();
    let command = |unique: &str| {
        let mut c = bin();
        c.arg("--log-level=warn").arg("dedup").arg("--config").arg(&cfg).arg("--input")
            .arg(&input)
            .args(["--unique-out", unique, "--duplicates-out"])
            .arg(&outs.dups)
            .arg("--rejected-out")
            .arg(&outs.rejected)
            .arg("--state-dir")
            .arg(&state);
        c
    };
    let mut c = command("-");
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader goes away after one line, like `| head -1`.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(first.contains("\"id\""), "{first}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.to_lowercase().contains("broken pipe"), "{err}");
    assert!(err.contains("stopped early"), "{err}");
    // The checkpoint was written: the same command resumes instead of starting over.
    let out = run_ok(command("-"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("resumed after record"), "{err}");
}

#[test]
fn rejected_records_carry_the_id_when_it_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"{\"id\":\"t1\",\"text\":\"x\",\"created_at\":\"yesterday\"}\n");
    bytes.extend_from_slice(b"{\"id\":\"t2\"}\n");
    bytes.extend_from_slice(b"{\"id\":\"t3\",\"text\":\"\xff\xfe\"}\n");
    bytes.extend_from_slice(b"{\"id\":42,\"text\":7}\n");
    std::fs::write(&input, bytes).unwrap();
    let outs = Outs::in_dir(dir.path(), "r");
    run_ok(outs.command(&input, None));
    let rej = read_jsonl(&outs.rejected);
    let got: Vec<(String, String)> = rej
        .iter()
        .map(|r| (r["reason"].as_str().unwrap().into(), r["id"].to_string()))
        .collect();
    assert_eq!(
        got,
        [
            ("bad_time", "\"t1\""),
            ("missing_text", "\"t2\""),
            ("invalid_utf8", "\"t3\""),
            ("missing_text", "\"42\""),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
}
