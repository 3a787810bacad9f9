//! Durable state: a second run continues the window, a run killed with SIGKILL resumes from
//! its checkpoint with exactly the outputs of an uninterrupted run, and a state dir refuses a
//! run whose generation width would misread its generations.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{data, read_jsonl, run_ok, Outs};

fn split_sample(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let text = std::fs::read(data("sample_posts.jsonl")).unwrap();
    let nl = text.iter().position(|b| *b == b'\n').unwrap() + 1;
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    std::fs::write(&a, &text[..nl]).unwrap();
    std::fs::write(&b, &text[nl..]).unwrap();
    (a, b)
}

fn cluster_of(dups: &Path, id: &str) -> Option<String> {
    read_jsonl(dups)
        .into_iter()
        .find(|d| d["post_id"] == id)
        .and_then(|d| d["cluster_id"].as_str().map(String::from))
}

#[test]
fn second_run_with_same_state_dir_continues_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = split_sample(dir.path());
    let state = dir.path().join("state");
    run_ok(Outs::in_dir(dir.path(), "a").command(&a, Some(&state)));
    let second = Outs::in_dir(dir.path(), "b");
    let out = run_ok(second.command(&b, Some(&state)));
    assert!(String::from_utf8_lossy(&out.stderr).contains("entries restored"));
    assert_eq!(cluster_of(&second.dups, "p02").as_deref(), Some("p01"));

    // Control: without the first run's state, p02 starts its own cluster.
    let fresh = Outs::in_dir(dir.path(), "fresh");
    run_ok(fresh.command(&b, Some(&dir.path().join("state2"))));
    assert_eq!(cluster_of(&fresh.dups, "p02"), None);
}

#[test]
fn a_state_dir_refuses_another_generation_width() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = split_sample(dir.path());
    let state = dir.path().join("state");
    run_ok(Outs::in_dir(dir.path(), "a").command(&a, Some(&state)));
    let mut second = Outs::in_dir(dir.path(), "b").command(&b, Some(&state));
    let out = second
        .env("SIMDEDUP_WINDOW__GENERATION_SECS", "43200")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("window.generation_secs = 21600, but this run uses 43200"),
        "{err}"
    );
    // The width it was built with still resumes it.
    run_ok(Outs::in_dir(dir.path(), "c").command(&b, Some(&state)));
}

#[test]
fn killed_run_resumes_with_identical_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("stream.jsonl");
    crate::common::write_stream(&input, 10_000);
    let cfg = dir.path().join("cfg.toml");
    std::fs::write(
        &cfg,
        "[state]\ncheckpoint_every_records = 2000\ncheckpoint_interval_ms = 50\n",
    )
    .unwrap();

    let clean = Outs::in_dir(dir.path(), "clean");
    let mut c = clean.command(&input, Some(&dir.path().join("clean-state")));
    c.arg("--config").arg(&cfg);
    run_ok(c);

    let crashed = Outs::in_dir(dir.path(), "crash");
    let state = dir.path().join("crash-state");
    let mut c = crashed.command(&input, Some(&state));
    c.arg("--config")
        .arg(&cfg)
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::metadata(&crashed.dups)
        .map(|m| m.len())
        .unwrap_or(0)
        < 2_000_000
    {
        assert!(Instant::now() < deadline, "run made no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "run finished before it could be killed; make the stream longer"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let mut c = crashed.command(&input, Some(&state));
    c.arg("--config").arg(&cfg);
    let out = run_ok(c);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("resumed after record"),
        "second run did not resume: {stderr}"
    );
    for (a, b) in [
        (&clean.unique, &crashed.unique),
        (&clean.dups, &crashed.dups),
        (&clean.rejected, &crashed.rejected),
    ] {
        assert!(
            std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
            "{} differs from {}",
            b.display(),
            a.display()
        );
    }
}
