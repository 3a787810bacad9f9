//! Unit tests of the sled store: round trips, expiry, read-only opens, damage and mismatches.

use super::keys::key_generation;
use super::*;
use crate::index::OrderKey;
use crate::types::{EventTime, Fingerprint, PostId};

/// A store identity with analysis id `a` and the default generation width.
fn id(a: &str) -> Identity<'_> {
    Identity {
        analysis_id: a,
        generation_secs: 21600,
    }
}

fn entry(id: &str, seq: u64) -> Entry {
    let text = format!("文本{id}");
    Entry {
        id: PostId(id.into()),
        key: OrderKey {
            tau: seq as i64,
            arrival: 0,
            partition: 0,
            seq,
        },
        time: EventTime(seq as i64),
        fingerprint: Fingerprint(seq),
        chars: text.chars().collect(),
        text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
        tokens: vec![seq as u32].into(),
    }
}

#[test]
fn commit_then_load_round_trips_and_discards_uncommitted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let cp = Checkpoint {
        next_seq: 3,
        watermarks: [(0, 10)].into(),
        window_marks: Default::default(),
        run: None,
        ..Checkpoint::default()
    };
    store
        .commit(
            &[(1, entry("a", 0)), (2, entry("b", 1)), (1, entry("c", 2))],
            &cp,
            None,
        )
        .unwrap();
    // Written but never checkpointed: a crash between the two writes.
    store
        .entries
        .insert(entry_key(2, 9), {
            let mut v = Vec::new();
            entry("late", 9).encode(&mut v);
            v
        })
        .unwrap();
    drop(store);
    let store = after_drop(|| Store::open(dir.path(), &id("a"), 1 << 20)).unwrap();
    let cp2 = store.checkpoint().unwrap().unwrap();
    assert_eq!(cp2, cp);
    let loaded = store.load(None, cp2.next_seq).unwrap();
    let ids: Vec<Vec<String>> = loaded
        .generations
        .iter()
        .map(|(_, es)| es.entries().unwrap().into_iter().map(|e| e.id.0).collect())
        .collect();
    assert_eq!(ids, vec![vec!["a", "c"], vec!["b"]]);
    assert_eq!(loaded.discarded, 1);
}

#[test]
fn expired_generations_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let cp = checkpoint(2);
    store
        .commit(&[(1, entry("a", 0)), (5, entry("b", 1))], &cp, Some(3))
        .unwrap();
    let loaded = store.load(None, 2).unwrap();
    assert_eq!(loaded.generations.len(), 1);
    assert_eq!(loaded.generations[0].0, 5);
}

#[test]
fn read_only_open_and_read_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    assert!(matches!(
        Store::open_read_only(&missing, &id("a"), 1 << 20),
        Err(StateError::NotAStateDir { .. })
    ));
    assert!(
        !missing.exists(),
        "a read-only open must not create the dir"
    );
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let cp = checkpoint(2);
    store
        .commit(&[(1, entry("a", 0)), (5, entry("b", 1))], &cp, None)
        .unwrap();
    let mut v = Vec::new();
    entry("late", 7).encode(&mut v);
    store.entries.insert(entry_key(5, 7), v).unwrap();
    assert!(
        matches!(
            Store::open_read_only(dir.path(), &id("a"), 1 << 20),
            Err(StateError::Locked { .. })
        ),
        "sled's lock is held by the open store"
    );
    drop(store);
    let ro = after_drop(|| Store::open_read_only(dir.path(), &id("a"), 1 << 20)).unwrap();
    let r = ro.read(Some(3), 2).unwrap();
    assert_eq!((r.entries, r.expired, r.discarded), (1, 1, 1));
    assert_eq!(ro.entries.len(), 3, "read deletes nothing");
    drop(ro);
    assert!(matches!(
        after_drop(|| Store::open_read_only(dir.path(), &id("b"), 1 << 20)),
        Err(StateError::AnalysisMismatch { .. })
    ));
}

#[test]
fn a_panic_inside_the_store_becomes_damaged() {
    let r: Result<(), StateError> = guarded(Path::new("s"), || panic!("cannot find pid 7"));
    match r {
        Err(StateError::Damaged { detail, .. }) => assert!(detail.contains("pid 7")),
        other => panic!("{other:?}"),
    }
}

// Threads that open stores at once (two dedup workers in one process) must not leave the process
// silencing its panics. Run in a child process of this test binary, whose stderr is read back:
// the panic hook is process-wide.
#[test]
fn panics_outside_the_store_are_still_printed_after_concurrent_guarded_calls() {
    const CHILD: &str = "SIMDEDUP_GUARDED_CHILD";
    if std::env::var_os(CHILD).is_some() {
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _ = guarded(Path::new("s"), || -> Result<(), StateError> {
                            panic!("quiet")
                        });
                    }
                });
            }
        });
        let _ = std::thread::spawn(|| panic!("printed after guarded calls")).join();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "state::tests::panics_outside_the_store_are_still_printed_after_concurrent_guarded_calls",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("printed after guarded calls"), "{stderr}");
    assert!(!stderr.contains("quiet"), "{stderr}");
}

#[test]
fn analysis_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), &id("a"), 1 << 20).unwrap());
    assert!(matches!(
        after_drop(|| Store::open(dir.path(), &id("b"), 1 << 20)),
        Err(StateError::AnalysisMismatch { .. })
    ));
}

#[test]
fn another_generation_width_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wide = Identity {
        generation_secs: 43200,
        ..id("a")
    };
    // A new store records the width it is opened with, and accepts it again.
    drop(Store::open(dir.path(), &id("a"), 1 << 20).unwrap());
    drop(after_drop(|| Store::open(dir.path(), &id("a"), 1 << 20)).unwrap());
    assert!(matches!(
        after_drop(|| Store::open_read_only(dir.path(), &wide, 1 << 20)),
        Err(StateError::GenerationMismatch {
            stored: 21600,
            current: 43200,
            ..
        })
    ));
    let err = after_drop(|| Store::open(dir.path(), &wide, 1 << 20))
        .err()
        .unwrap();
    assert!(err.to_string().contains("generation_secs = 21600"), "{err}");
}

#[test]
fn a_store_without_a_width_takes_its_next_writers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    store.commit(&[], &checkpoint(0), None).unwrap();
    // As an earlier version left it: no width recorded.
    store.meta.remove(KEY_GENERATION).unwrap();
    store.db.flush().unwrap();
    drop(store);
    let wide = Identity {
        generation_secs: 43200,
        ..id("a")
    };
    // inspect reads it with its configured width and records nothing...
    drop(after_drop(|| Store::open_read_only(dir.path(), &wide, 1 << 20)).unwrap());
    // ...the next writer records its own...
    drop(after_drop(|| Store::open(dir.path(), &id("a"), 1 << 20)).unwrap());
    // ...and another is refused from then on.
    assert!(matches!(
        after_drop(|| Store::open(dir.path(), &wide, 1 << 20)),
        Err(StateError::GenerationMismatch { .. })
    ));
}

/// A checkpoint at `next_seq` with no watermarks and no run record.
fn checkpoint(next_seq: u64) -> Checkpoint {
    Checkpoint {
        next_seq,
        watermarks: Default::default(),
        window_marks: Default::default(),
        run: None,
        ..Checkpoint::default()
    }
}

/// Entries `p{seq}` for `seqs`, each in generation `gen(seq)`.
fn entries(seqs: std::ops::Range<u64>, gen: impl Fn(u64) -> i64) -> Vec<(i64, Entry)> {
    seqs.map(|i| (gen(i), entry(&format!("p{i}"), i))).collect()
}

#[test]
fn large_chunks_are_stored_in_pieces_and_read_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let batch = |seqs| entries(seqs, |i| 1 + i64::from(i >= 4000 && i % 2 == 0));
    // Two commits, each far over one piece in generation 1, the second also in generation 2;
    // then a third whose checkpoint was never written (a crash between the two writes).
    store
        .commit(&batch(0..4000), &checkpoint(4000), None)
        .unwrap();
    store
        .commit(&batch(4000..9000), &checkpoint(9000), None)
        .unwrap();
    store
        .commit(&batch(9000..12000), &checkpoint(9000), None)
        .unwrap();
    let keys = store.entries.iter().keys().count();
    assert!(keys > 9, "{keys} keys: the chunks were not split");
    assert!(store
        .entries
        .iter()
        .values()
        .all(|v| v.unwrap().len() < PIECE_BYTES + 1024));
    let read = |store: &Store| {
        let mut gens = store.generations(None, 9000).unwrap();
        let read: Vec<(i64, Vec<u64>)> = gens
            .by_ref()
            .map(|g| {
                let (gen, entries) = g.unwrap();
                (gen, entries.views().map(|e| e.unwrap().key.seq).collect())
            })
            .collect();
        (read, gens.finish().unwrap())
    };
    let (got, loaded) = read(&store);
    let want1: Vec<u64> = (0..4000)
        .chain((4000..9000).filter(|i| i % 2 == 1))
        .collect();
    let want2: Vec<u64> = (4000..9000).filter(|i| i % 2 == 0).collect();
    assert_eq!(got, vec![(1, want1.clone()), (2, want2.clone())]);
    assert_eq!((loaded.entries, loaded.discarded), (9000, 3000));
    // Every piece of the uncommitted chunk is gone, the others stay.
    let (again, loaded) = read(&store);
    assert_eq!(again, vec![(1, want1), (2, want2)]);
    assert_eq!((loaded.entries, loaded.discarded), (9000, 0));
    store.remove_generations_below(2).unwrap();
    assert!(store
        .entries
        .iter()
        .keys()
        .all(|k| key_generation(&k.unwrap()) == 2));
}

// A store opened afresh after a full read keeps its entries and checkpoint, and takes commits.
#[test]
fn a_reopened_store_keeps_its_entries_and_takes_commits() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let cp = |next_seq| Checkpoint {
        next_seq,
        watermarks: [(0, 10)].into(),
        ..Checkpoint::default()
    };
    store
        .commit(&[(0, entry("x", 1)), (0, entry("y", 2))], &cp(3), None)
        .unwrap();
    let (store, read) = store
        .rebuild(None, 3, |gens| {
            assert_eq!(gens.map(|(_, p)| p.len()).sum::<usize>(), 2);
            Ok(())
        })
        .unwrap();
    assert_eq!(read.entries, 2);
    assert_eq!(store.checkpoint().unwrap(), Some(cp(3)));
    store.commit(&[(0, entry("z", 3))], &cp(4), None).unwrap();
    let loaded = store.load(None, 4).unwrap();
    assert_eq!(loaded.entries, 3);
}

// A restart's read that opens the store afresh after every chunk it reads reads what a
// plain read does, deletes what a plain load deletes, and gives back a store that works.
#[test]
fn a_rebuild_opening_its_store_afresh_as_it_reads_reads_what_a_plain_read_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let batch = |seqs| entries(seqs, |i| i64::try_from(i % 4).unwrap());
    // Generation 0 expired; generations 1-3 in two checkpoints, one large enough for pieces;
    // then a batch whose checkpoint was never written.
    store
        .commit(&batch(0..100), &checkpoint(100), None)
        .unwrap();
    store
        .commit(&batch(100..6000), &checkpoint(6000), None)
        .unwrap();
    store
        .commit(&batch(6000..6100), &checkpoint(6200), None)
        .unwrap();
    let seqs = |(gen, p): (i64, crate::index::Packed)| -> (i64, Vec<u64>) {
        (gen, p.views().map(|e| e.unwrap().key.seq).collect())
    };
    let want: Vec<(i64, Vec<u64>)> = store
        .read(Some(1), 6000)
        .unwrap()
        .generations
        .into_iter()
        .map(seqs)
        .collect();
    assert_eq!(want.iter().map(|g| g.0).collect::<Vec<_>>(), [1, 2, 3]);
    let mut got = Vec::new();
    let (store, loaded) = store
        .rebuild_reopening_every(1, Some(1), 6000, Default::default(), |gens| {
            got.extend(gens.map(seqs));
            Ok(())
        })
        .unwrap();
    assert_eq!(got, want);
    assert_eq!((loaded.entries, loaded.discarded), (4500, 75));
    assert!(loaded.reopens > 3, "{} reopens", loaded.reopens);
    let again = store.load(None, 6000).unwrap();
    assert_eq!(
        (again.entries, again.discarded, again.expired),
        (4500, 0, 0)
    );
    store
        .commit(&batch(6000..6004), &checkpoint(6004), None)
        .unwrap();
    assert_eq!(store.load(None, 6004).unwrap().entries, 4504);
}

// A generation's last committed key changes with each commit that adds to it, not with commits
// to other generations, and ignores chunks never checkpointed; an earlier last key is still
// covered; a rebuild that skips generations up to a key reads none of their entries up to it,
// returns those after it as their tails, and reads the others as a full one does.
#[test]
fn last_keys_follow_commits_and_a_rebuild_skips_what_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &id("a"), 1 << 20).unwrap();
    let batch = |seqs| entries(seqs, |i| i64::try_from(i % 3).unwrap() + 5);
    store
        .commit(&batch(0..3000), &checkpoint(3000), None)
        .unwrap();
    let first = store.last_keys(3000).unwrap();
    assert_eq!(first.keys().copied().collect::<Vec<_>>(), [5, 6, 7]);
    // Generation 6 alone gains a chunk.
    store
        .commit(&[(6, entry("x", 3000))], &checkpoint(3001), None)
        .unwrap();
    let second = store.last_keys(3001).unwrap();
    assert_eq!(second[&5], first[&5]);
    assert_eq!(second[&7], first[&7]);
    assert_ne!(second[&6], first[&6]);
    assert!(store.covers(6, &first[&6], 3001).unwrap());
    assert!(store.covers(6, &second[&6], 3001).unwrap());
    assert!(
        !store.covers(6, &second[&6], 3000).unwrap(),
        "not committed"
    );
    assert!(
        !store.covers(5, &first[&6], 3001).unwrap(),
        "another generation"
    );
    assert!(!store.covers(6, b"short", 3001).unwrap());
    // A chunk written after the last checkpoint does not count.
    store
        .commit(&[(7, entry("y", 3001))], &checkpoint(3001), None)
        .unwrap();
    assert_eq!(store.last_keys(3001).unwrap(), second);
    assert_ne!(store.last_keys(3002).unwrap()[&7], second[&7]);
    // The largest chunk number stored, whichever generation holds it.
    assert_eq!(store.max_chunk().unwrap(), 3001);
    let mut got = Vec::new();
    let (store, loaded) = store
        .rebuild_skipping(None, 3001, [(6, first[&6].clone())].into(), |gens| {
            got.extend(gens.map(|(g, p)| (g, p.len())));
            Ok(())
        })
        .unwrap();
    assert_eq!(got, [(5, 1000), (7, 1000)]);
    assert_eq!((loaded.entries, loaded.discarded), (2001, 1));
    let tails: Vec<(i64, Vec<String>)> = loaded
        .tails
        .iter()
        .map(|(g, p)| {
            (
                *g,
                p.entries().unwrap().into_iter().map(|e| e.id.0).collect(),
            )
        })
        .collect();
    assert_eq!(tails, [(6, vec!["x".to_string()])]);
    // A skipped generation's uncommitted chunk is deleted all the same: once later commits pass
    // its sequence numbers it would otherwise read as committed.
    store
        .commit(&[(7, entry("z", 3001))], &checkpoint(3001), None)
        .unwrap();
    let (store, loaded) = store
        .rebuild_skipping(
            None,
            3001,
            [(5, first[&5].clone()), (7, first[&7].clone())].into(),
            |gens| {
                assert_eq!(
                    gens.map(|(g, p)| (g, p.len())).collect::<Vec<_>>(),
                    [(6, 1001)]
                );
                Ok(())
            },
        )
        .unwrap();
    assert_eq!((loaded.entries, loaded.discarded), (1001, 1));
    assert!(loaded.tails.is_empty());
    let all = store.load(None, u64::MAX).unwrap();
    assert_eq!((all.entries, all.discarded), (3001, 0));
}
