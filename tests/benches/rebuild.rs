//! Rebuild benchmark: how long a restarted process needs to rebuild the in-memory index from
//! sled. Writes N synthetic representatives (Chinese-like texts of 8..60 characters, spread over
//! the window's generations, committed in checkpoint-sized batches), then times `Store::load` and
//! `Engine::restore` in the same run, one after the other, and then a restart as `dedup
//! --state-dir` and `run --state-dir` run it: each generation read while earlier ones are built.
//!
//! `cargo bench --bench rebuild -- 1000000 10000000` (entry counts; default 1000000).
//! `--restarts K` times the streamed restart K times (default 1) and prints each and the
//! median; `--streamed-only` skips the load-everything-first phase (which holds every stored
//! record and the index at once); `--spill` has the streamed restart write the entries' ids,
//! texts and tokens to spill files in the state directory, as `dedup --state-dir` and `run
//! --state-dir` do by default (`state.spill_texts`), instead of keeping them in memory;
//! `--state DIR` keeps the written state in `DIR/<count>` and reuses it when a previous run left
//! it complete, so that several runs time restarts of one state.

/// The allocator of the `simdedup` binary: large blocks on transparent huge pages.
#[global_allocator]
static ALLOC: simdedup::app::alloc::HugePages = simdedup::app::alloc::HugePages;

use std::time::Instant;

use simdedup::app::config::Config;
use simdedup::engine::Engine;
use simdedup::index::{Entry, OrderKey};
use simdedup::state::{Checkpoint, Identity, Store};
use simdedup::types::{EventTime, Fingerprint, PostId};

const CHARS: &str = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切";

fn synthetic(n: usize, gens: i64, per_checkpoint: usize) -> Vec<Vec<(i64, Entry)>> {
    let chars: Vec<char> = CHARS.chars().collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut batches = Vec::new();
    let mut batch = Vec::with_capacity(per_checkpoint);
    for i in 0..n {
        let len = 8 + (next() % 53) as usize;
        let text: String = (0..len)
            .map(|_| chars[(next() % chars.len() as u64) as usize])
            .collect();
        let tokens: Vec<u32> = {
            let mut t: Vec<u32> = (0..len / 2).map(|_| next() as u32).collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        let gen = (i as i64 * gens) / n as i64;
        batch.push((
            gen,
            Entry {
                id: PostId(format!("{}", 3_500_000_000_000_000u64 + i as u64)),
                key: OrderKey {
                    tau: gen * 21_600,
                    arrival: 0,
                    partition: 0,
                    seq: i as u64,
                },
                time: EventTime(gen * 21_600),
                fingerprint: Fingerprint(next()),
                text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
                chars: text.chars().collect(),
                tokens: tokens.into(),
            },
        ));
        if batch.len() == per_checkpoint {
            batches.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

/// Opens the store again, waiting while sled still holds the lock of the one just dropped.
fn reopen(path: &std::path::Path, cfg: &Config, analysis: &str) -> Store {
    let id = identity(cfg, analysis);
    let cache = cfg.state.cache_capacity_bytes;
    for _ in 0..300 {
        match Store::open(path, &id, cache) {
            Err(simdedup::state::StateError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r.expect("reopen"),
        }
    }
    Store::open(path, &id, cache).expect("reopen")
}

/// The state dir's identity under `cfg`.
fn identity<'a>(cfg: &Config, analysis: &'a str) -> Identity<'a> {
    Identity {
        analysis_id: analysis,
        generation_secs: cfg.window.generation_secs,
    }
}

struct Args {
    counts: Vec<usize>,
    restarts: usize,
    streamed_only: bool,
    spill: bool,
    state: Option<std::path::PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        counts: Vec::new(),
        restarts: 1,
        streamed_only: false,
        spill: false,
        state: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--restarts" => {
                a.restarts = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&k| k > 0)
                    .expect("--restarts needs a positive count")
            }
            "--streamed-only" => a.streamed_only = true,
            "--spill" => a.spill = true,
            "--state" => a.state = Some(it.next().expect("--state needs a directory").into()),
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            _ => a.counts.push(
                x.replace('_', "")
                    .parse()
                    .unwrap_or_else(|_| panic!("not an entry count or flag: {x}")),
            ),
        }
    }
    a
}

/// Marks a kept state as completely written.
const COMPLETE: &str = "rebuild-bench-complete";

fn main() {
    let Args {
        counts,
        restarts,
        streamed_only,
        spill,
        state,
    } = args();
    let counts = if counts.is_empty() {
        vec![1_000_000]
    } else {
        counts
    };
    let cfg = Config::default();
    let gens = cfg.window.window_secs / cfg.window.generation_secs + 1;
    let analysis = cfg.analysis_id().expect("analysis id");
    let threads = simdedup::state::restore_threads();
    for n in counts {
        let tmp;
        let dir = match &state {
            Some(d) => d.join(n.to_string()),
            None => {
                tmp = tempfile::tempdir().expect("tempdir");
                tmp.path().to_path_buf()
            }
        };
        let dir = dir.as_path();
        if dir.join(COMPLETE).exists() {
            println!("entries {n}: reusing the state in {}", dir.display());
        } else {
            if dir.exists() {
                std::fs::remove_dir_all(dir).expect("remove an incomplete state");
            }
            let t = Instant::now();
            let batches = synthetic(n, gens, 50_000);
            let gen_secs = t.elapsed().as_secs_f64();
            let id = identity(&cfg, &analysis);
            let store = Store::open(dir, &id, cfg.state.cache_capacity_bytes).expect("open");
            let t = Instant::now();
            let mut seq = 0u64;
            for b in &batches {
                seq += b.len() as u64;
                let cp = Checkpoint {
                    next_seq: seq,
                    watermarks: [(0, (gens - 1) * 21_600)].into(),
                    window_marks: Default::default(),
                    run: None,
                    ..Checkpoint::default()
                };
                store.commit(b, &cp, None).expect("commit");
            }
            let write_secs = t.elapsed().as_secs_f64();
            println!(
                "entries {n}: synthesize {gen_secs:.1} s, persist {write_secs:.1} s ({:.0} entries/s), sled on disk {:.0} MB",
                n as f64 / write_secs,
                store.size_on_disk() as f64 / 1e6,
            );
            drop(store);
            drop(batches);
            std::fs::write(dir.join(COMPLETE), b"").expect("mark the state complete");
        }
        if !streamed_only {
            load_then_restore(dir, n, &cfg, &analysis, threads);
        }
        let mut times = Vec::new();
        for r in 1..=restarts {
            let (secs, live) = streamed(dir, &cfg, &analysis, threads, spill);
            println!(
                "entries {n}: restart {r} streamed as a restart runs it: {secs:.1} s ({:.0} entries/s), {live} live entries",
                live as f64 / secs
            );
            times.push(secs);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "entries {n}: streamed restart median {:.1} s over {restarts} (min {:.1}, max {:.1}) on {threads} threads",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}

/// Reads every stored record first, then decodes them and builds the index: the two phases
/// apart.
fn load_then_restore(
    dir: &std::path::Path,
    n: usize,
    cfg: &Config,
    analysis: &str,
    threads: usize,
) {
    {
        let t = Instant::now();
        let store = reopen(dir, cfg, analysis);
        let cp = store.checkpoint().expect("checkpoint").expect("present");
        let loaded = store.load(None, cp.next_seq).expect("load");
        let load_secs = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut engine = Engine::new(&cfg.engine()).expect("engine");
        engine
            .restore(cp.watermarks, loaded.generations, threads, None)
            .expect("restore");
        let restore_secs = t.elapsed().as_secs_f64();
        let (live, bytes) = (engine.index().len(), engine.index().approx_bytes());
        println!(
            "entries {n}: rebuild: read {load_secs:.1} s + decode and index {restore_secs:.1} s on {threads} threads = {:.1} s ({:.0} entries/s); live {live} entries, ~{:.0} MB in memory",
            load_secs + restore_secs,
            live as f64 / (load_secs + restore_secs),
            bytes as f64 / 1e6,
        );
    }
}

/// A restart as `dedup --state-dir` and `run --state-dir` run it: generations read one at a time
/// while earlier ones are built. Returns the seconds and the live entries.
fn streamed(
    dir: &std::path::Path,
    cfg: &Config,
    analysis: &str,
    threads: usize,
    spill: bool,
) -> (f64, usize) {
    let t = Instant::now();
    let store = reopen(dir, cfg, analysis);
    let cp = store.checkpoint().expect("checkpoint").expect("present");
    let mut engine = if spill {
        let cold = simdedup::io::cold::FileColdFactory::new(&dir.join("spill")).expect("spill dir");
        Engine::with_cold(&cfg.engine(), cold).expect("engine")
    } else {
        Engine::new(&cfg.engine()).expect("engine")
    };
    store
        .rebuild(None, cp.next_seq, |gens| {
            engine.restore(cp.watermarks, gens, threads, None)
        })
        .expect("restore");
    let secs = t.elapsed().as_secs_f64();
    (secs, engine.index().len())
}
