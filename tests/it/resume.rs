//! Durable state: a second run continues the window, a run killed with SIGKILL resumes from
//! its checkpoint with exactly the outputs of an uninterrupted run, and a state dir refuses a
//! run whose generation width would misread its generations.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{data, read_jsonl, run_ok, varied_posts, Outs};

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

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Asserts that a start's log says it loaded three sealed generations whole.
fn assert_loaded_three(log: &str) {
    assert!(
        log.contains("sealed generations loaded generations=3"),
        "{log}"
    );
}

// A restart writes the sealed generations it rebuilt whole, and so does a run that seals them,
// and a later start from the same stored state loads them instead, with the late entries stored
// after a file was written added: all decide the next posts exactly as a start that rebuilds
// every generation from sled. (That a file is not used once its generation lost the chunks it
// was written from is the state module's unit tests'.)
#[test]
fn sealed_generations_kept_whole_give_the_same_verdicts_as_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    // About 1,800 posts per 6-hour generation: a partial one (too small to write), three full
    // ones, then the growing one.
    varied_posts(&a, 0, 6000, |i| i - 5);
    // Later posts, half of them edits of posts in the first generations.
    varied_posts(&b, 6000, 1000, |i| (i * 7) % 5000);
    let run = |name: &str, input: &Path, state: &Path, keep: bool| {
        let outs = Outs::in_dir(dir.path(), name);
        let mut c = outs.command(input, Some(state));
        c.arg("--no-resume")
            .env("SIMDEDUP_STATE__KEEP_SEALED", keep.to_string());
        let log = String::from_utf8_lossy(&run_ok(c).stderr).into_owned();
        (
            std::fs::read(&outs.unique).unwrap(),
            std::fs::read(&outs.dups).unwrap(),
            log,
        )
    };
    let state = dir.path().join("state");
    run("a", &a, &state, false);
    assert!(!state.join("sealed").exists());
    let before = dir.path().join("before");
    copy_dir(&state, &before);
    let rebuilt_dir = dir.path().join("rebuilt");
    copy_dir(&before, &rebuilt_dir);
    let rebuilt = run("rebuilt", &b, &rebuilt_dir, false);
    assert!(!rebuilt_dir.join("sealed").exists());
    let dups = read_jsonl(&dir.path().join("rebuilt-dups.jsonl"));
    let old = dups.iter().filter(|d| {
        d["cluster_id"]
            .as_str()
            .and_then(|c| c[1..].parse::<usize>().ok())
            < Some(3600)
    });
    assert!(old.count() > 50, "matches in the older generations");
    // The first start writes them.
    let writing = run("writing", &b, &state, true);
    assert!(writing.2.contains("sealed_writing=3"), "{}", writing.2);
    assert_eq!((&writing.0, &writing.1), (&rebuilt.0, &rebuilt.1));
    // A start from the state before, with those files: loaded, same verdicts.
    let loading_dir = dir.path().join("loading");
    copy_dir(&before, &loading_dir);
    copy_dir(&state.join("sealed"), &loading_dir.join("sealed"));
    let loading = run("loading", &b, &loading_dir, true);
    assert_loaded_three(&loading.2);
    assert_eq!((&loading.0, &loading.1), (&rebuilt.0, &rebuilt.1));
    // The posts since joined the growing generation only: the next start loads the same three.
    let again = run("again", &b, &state, true);
    assert_loaded_three(&again.2);
    // A run that seals generations writes them whole after its checkpoints: a start from its
    // state loads them, with the same verdicts.
    let live = dir.path().join("live");
    let first = run("live-a", &a, &live, true);
    assert!(
        first.2.contains("sealed generation written whole"),
        "{}",
        first.2
    );
    let from_live = run("from-live", &b, &live, true);
    assert_loaded_three(&from_live.2);
    assert_eq!((&from_live.0, &from_live.1), (&rebuilt.0, &rebuilt.1));
    // Late posts join the oldest full generation after its file was written.
    let (late, c) = (dir.path().join("late.jsonl"), dir.path().join("c.jsonl"));
    let fresh = dir.path().join("fresh.jsonl");
    varied_posts(&fresh, 20_000, 300, |i| i - 5);
    let moved: Vec<String> = read_jsonl(&fresh)
        .into_iter()
        .enumerate()
        .map(|(k, mut p)| {
            p["id"] = format!("late{k}").into();
            p["created_at"] = (1_700_000_000 + 12 * (1000 + k as i64)).into();
            p.to_string() + "\n"
        })
        .collect();
    std::fs::write(&late, moved.concat()).unwrap();
    // Then posts, a fifth of them edits of those late ones.
    varied_posts(&c, 8000, 600, |i| 20_000 + i % 300);
    let late_run = run("late", &late, &live, true);
    assert!(
        !late_run.2.contains("sealed generation written whole"),
        "a file is not written again for a few late entries: {}",
        late_run.2
    );
    let late_rebuilt = dir.path().join("late-rebuilt");
    copy_dir(&live, &late_rebuilt);
    std::fs::remove_dir_all(late_rebuilt.join("sealed")).unwrap();
    let want = run("c-rebuilt", &c, &late_rebuilt, false);
    let got = run("c-tail", &c, &live, true);
    assert_loaded_three(&got.2);
    let tail = got
        .2
        .split("files added to them entries=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(
        tail.is_some_and(|n| (250..=300).contains(&n)),
        "the late posts' entries added: {tail:?} {}",
        got.2
    );
    let late_matches = read_jsonl(&dir.path().join("c-tail-dups.jsonl"))
        .iter()
        .filter(|d| {
            d["cluster_id"]
                .as_str()
                .is_some_and(|c| c.starts_with("late"))
        })
        .count();
    assert!(late_matches > 50, "{late_matches} matches of late entries");
    assert_eq!((&got.0, &got.1), (&want.0, &want.1));
}
