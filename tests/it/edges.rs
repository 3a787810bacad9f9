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
        c.arg("--log-level=warn")
            .arg("dedup")
            .arg("--config")
            .arg(&cfg)
            .arg("--input")
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
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
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

fn write_lines(path: &std::path::Path, posts: &[serde_json::Value]) {
    let text: String = posts.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(path, text).unwrap();
}

const TEXT: &str = "今天早上地铁二号线又停运了上班的朋友们记得绕行，据说要到中午才能恢复";

#[test]
fn a_rerun_of_a_completed_input_is_refused_and_leaves_the_outputs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let outs = Outs::in_dir(dir.path(), "a");
    run_ok(outs.command(&data("sample_posts.jsonl"), Some(&state)));
    let before = std::fs::read(&outs.dups).unwrap();
    let out = outs
        .command(&data("sample_posts.jsonl"), Some(&state))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("already completed a run") && err.contains("--no-resume"),
        "{err}"
    );
    assert_eq!(std::fs::read(&outs.dups).unwrap(), before);
    // Asked for explicitly, it runs, and adds no second copy of any post to the index.
    let mut again = outs.command(&data("sample_posts.jsonl"), Some(&state));
    again.arg("--no-resume");
    let err = String::from_utf8_lossy(&run_ok(again).stderr).into_owned();
    assert!(err.contains("; 12 live index entries"), "{err}");
}

#[test]
fn a_post_older_than_the_window_is_marked_late_never_a_silent_unique() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let t0 = 1_700_000_000i64;
    let day = 86_400;
    write_lines(
        &input,
        &[
            serde_json::json!({"id": "a", "text": TEXT, "created_at": t0}),
            serde_json::json!({"id": "b", "text": "完全不同的一条微博内容在这里", "created_at": t0 + 3 * day}),
            serde_json::json!({"id": "c", "text": "另一条毫不相干的消息今天天气很好", "created_at": t0 + 3 * day + 10}),
            serde_json::json!({"id": "old", "text": TEXT, "created_at": t0 + 5}),
        ],
    );
    let outs = Outs::in_dir(dir.path(), "l");
    let err = String::from_utf8_lossy(&run_ok(outs.command(&input, None)).stderr).into_owned();
    let unique = read_jsonl(&outs.unique);
    let old = unique
        .iter()
        .find(|u| u["id"] == "old")
        .expect("old is unique");
    assert_eq!(old["simdedup"]["late"], true, "{old}");
    assert!(unique
        .iter()
        .filter(|u| u["id"] != "old")
        .all(|u| u.get("simdedup").is_none()));
    assert!(err.contains("1 late"), "{err}");
}

#[test]
fn one_outlying_current_timestamp_does_not_switch_deduplication_off() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let t0 = 1_300_000_000i64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    write_lines(
        &input,
        &[
            serde_json::json!({"id": "a", "text": TEXT, "created_at": t0}),
            serde_json::json!({"id": "now", "text": "完全不同的一条微博内容在这里", "created_at": now}),
            serde_json::json!({"id": "b", "text": TEXT, "created_at": t0 + 60}),
        ],
    );
    let outs = Outs::in_dir(dir.path(), "o");
    run_ok(outs.command(&input, None));
    let dups = read_jsonl(&outs.dups);
    assert_eq!(dups.len(), 1, "{dups:?}");
    assert_eq!(dups[0]["post_id"], "b");
    assert_eq!(dups[0]["matched_created_at"], t0);
    assert!(read_jsonl(&outs.unique)
        .iter()
        .all(|u| u.get("simdedup").is_none()));
}

#[test]
fn a_signal_while_waiting_on_stdin_stops_at_once_and_is_not_a_completed_run() {
    let dir = tempfile::tempdir().unwrap();
    let outs = Outs::in_dir(dir.path(), "s");
    let state = dir.path().join("state");
    let mut c = outs.command(std::path::Path::new("-"), Some(&state));
    let mut child = c
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let sent = std::time::Instant::now();
    std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            sent.elapsed() < std::time::Duration::from_secs(2),
            "still running 2 s after SIGINT"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(stdin);
    assert_eq!(status.code(), Some(130));
    // The state records an interrupted run: the same command resumes it.
    let mut again = outs.command(std::path::Path::new("-"), Some(&state));
    again.stdin(std::fs::File::open(data("sample_posts.jsonl")).unwrap());
    let err = String::from_utf8_lossy(&run_ok(again).stderr).into_owned();
    assert!(err.contains("resumed after record 0"), "{err}");
}

#[test]
fn a_damaged_state_dir_is_a_clear_error_never_a_panic_or_a_silent_restart() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("sample_posts.jsonl");
    let state = dir.path().join("state");
    let outs = Outs::in_dir(dir.path(), "d");
    run_ok(outs.command(&input, Some(&state)));
    let db = state.join("db");
    let zeroed = dir.path().join("zeroed");
    let flipped = dir.path().join("flipped");
    for copy in [&zeroed, &flipped] {
        std::fs::create_dir_all(copy).unwrap();
        for f in std::fs::read_dir(&state).unwrap() {
            let f = f.unwrap();
            if f.file_type().unwrap().is_file() {
                std::fs::copy(f.path(), copy.join(f.file_name())).unwrap();
            }
        }
    }
    let bytes = std::fs::read(&db).unwrap();
    std::fs::write(zeroed.join("db"), vec![0u8; bytes.len()]).unwrap();
    let mut bad = bytes.clone();
    for b in bad.iter_mut().skip(100).step_by(7) {
        *b ^= 0x5a;
    }
    std::fs::write(flipped.join("db"), bad).unwrap();
    for s in [&zeroed, &flipped] {
        let out = outs.command(&input, Some(s)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("is damaged") && err.contains("move it aside or delete it"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn crlf_input_passes_through_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let line = format!("{}\r\n", serde_json::json!({"id": "a", "text": TEXT}));
    std::fs::write(&input, &line).unwrap();
    let outs = Outs::in_dir(dir.path(), "c");
    run_ok(outs.command(&input, None));
    assert_eq!(std::fs::read_to_string(&outs.unique).unwrap(), line);
}

#[test]
fn a_thirty_digit_integer_id_is_kept_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        format!(
            "{{\"id\":123456789012345678901234567890,\"text\":\"{TEXT}\"}}\n{{\"id\":-98765432109876543210987,\"text\":\"{TEXT}\"}}\n"
        ),
    )
    .unwrap();
    let outs = Outs::in_dir(dir.path(), "b");
    run_ok(outs.command(&input, None));
    assert!(read_jsonl(&outs.rejected).is_empty());
    let dups = read_jsonl(&outs.dups);
    assert_eq!(dups[0]["post_id"], "-98765432109876543210987");
    assert_eq!(dups[0]["cluster_id"], "123456789012345678901234567890");
}
