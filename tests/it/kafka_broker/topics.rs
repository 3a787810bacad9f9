//! Fresh topic and group names per test, the topology's topics on the test broker, and what a
//! run wrote to them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::*;

pub(super) fn brokers() -> String {
    std::env::var("SIMDEDUP_TEST_BROKERS")
        .expect("SIMDEDUP_TEST_BROKERS is not set: run scripts/test.sh, which starts a broker")
}

pub(super) fn fresh(name: &str) -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("t{}-{}-{name}", std::process::id(), n % 1_000_000_000)
}

pub(super) struct Topics {
    pub(super) group: String,
    pub(super) input: String,
    pub(super) routed: String,
    pub(super) unique: String,
    pub(super) dups: String,
    pub(super) rejected: String,
    pub(super) changelog: String,
    /// Workers started by this test: killed when the test ends, also when it fails.
    pub(super) workers: std::cell::RefCell<Vec<u32>>,
}

impl Drop for Topics {
    fn drop(&mut self) {
        for pid in self.workers.borrow().iter() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Topics {
    pub(super) fn new() -> Topics {
        let p = fresh("x");
        Topics {
            group: format!("{p}.g"),
            input: format!("{p}.posts"),
            routed: format!("{p}.routed"),
            unique: format!("{p}.unique"),
            dups: format!("{p}.dups"),
            rejected: format!("{p}.rejected"),
            changelog: format!("{p}.changelog"),
            workers: Default::default(),
        }
    }

    pub(super) fn run(&self, role: &str, log: &Path) -> Child {
        self.run_with(role, log, &[])
    }

    /// Starts a worker with `--config` files.
    pub(super) fn run_with(&self, role: &str, log: &Path, configs: &[&Path]) -> Child {
        let mut c = self.command(role, log);
        for f in configs {
            c.arg("--config").arg(f);
        }
        self.spawn(c)
    }

    pub(super) fn spawn(&self, mut c: Command) -> Child {
        let child = c.spawn().unwrap();
        self.workers.borrow_mut().push(child.id());
        child
    }

    pub(super) fn command(&self, role: &str, log: &Path) -> Command {
        self.command_at(role, log, &brokers())
    }

    /// A worker of this test's topology against the broker at `addr`.
    pub(super) fn command_at(&self, role: &str, log: &Path, addr: &str) -> Command {
        let mut c = bin();
        c.args([
            "--log-level",
            "info",
            "run",
            "--role",
            role,
            "--brokers",
            addr,
            "--routed-partitions",
            "4",
        ])
        .args([
            "--group-id",
            &self.group,
            "--input-topic",
            &self.input,
            "--routed-topic",
            &self.routed,
        ])
        .args([
            "--unique-topic",
            &self.unique,
            "--duplicates-topic",
            &self.dups,
            "--rejected-topic",
            &self.rejected,
        ])
        .args(["--changelog-topic", &self.changelog])
        // Several workers share this machine: each gets a free port for its metrics.
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
        c
    }

    pub(super) fn export(&self, topic: &str) -> Vec<u8> {
        let out = Command::new(env!("CARGO_BIN_EXE_simdedup"))
            .args([
                "export",
                "--brokers",
                &brokers(),
                "--topic",
                topic,
                "--idle-ms",
                "700",
            ])
            .output()
            .unwrap();
        out.stdout
    }

    /// Post id -> every verdict seen ("unique" or "dup of X"); at-least-once may repeat a post.
    pub(super) fn verdicts(&self, unique: &str, dups: &str) -> BTreeMap<String, Vec<String>> {
        let mut v: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in String::from_utf8_lossy(&self.export(unique)).lines() {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            v.entry(j["id"].as_str().unwrap().into())
                .or_default()
                .push("unique".into());
        }
        for l in String::from_utf8_lossy(&self.export(dups)).lines() {
            let j: serde_json::Value = serde_json::from_str(l).unwrap();
            v.entry(j["post_id"].as_str().unwrap().into())
                .or_default()
                .push(format!("dup of {}", j["cluster_id"].as_str().unwrap()));
        }
        v
    }
}
