use std::io::Write as _;

use super::*;
use crate::index::cold;
use crate::index::{Entry, IndexConfig, OrderKey, Packed, QueryStats, Scratch};
use crate::types::{EventTime, Fingerprint, PostId};
use crate::verify::VerifyConfig;

const CLAUSES: [&str; 10] = [
    "今天天气很好",
    "我们去公园散步",
    "明天可能下雨",
    "记得带伞",
    "北京的交通",
    "越来越堵了",
    "周末一起吃饭吧",
    "这家店的面条",
    "非常好吃",
    "排队的人很多",
];

/// Entry `i` of generation `gen`: texts of a few shared clauses, so that many are near
/// duplicates; tokens for some, so that they go into the block tables.
fn entry(gen: i64, i: u64) -> Entry {
    let x = (gen as u64 * 7919 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let text: String = (0..1 + x % 4)
        .map(|k| CLAUSES[((x >> (8 * k)) % 10) as usize])
        .collect();
    Entry {
        id: PostId(format!("{gen}-{i}")),
        key: OrderKey {
            tau: gen * 10_000 + i as i64,
            arrival: 0,
            partition: 0,
            seq: gen as u64 * 100_000 + i,
        },
        time: EventTime(gen * 10_000),
        fingerprint: Fingerprint(x & 0xFFFF_0000_FFFF_00FF),
        text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
        chars: text.chars().collect(),
        tokens: (0..(x % 9) as u32)
            .map(|t| t * 31 + (x as u32 % 5))
            .collect(),
    }
}

fn index() -> Index {
    Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap()
}

/// An index of generations 3, 4 and 6, restored whole (every one sealed).
fn restored() -> Index {
    let mut idx = index();
    let feed = [3i64, 4, 6].map(|g| {
        let entries: Vec<Entry> = (0..1500).map(|i| entry(g, i)).collect();
        (g, Packed::from_entries(&entries))
    });
    idx.insert_generations(feed.into_iter(), 2).unwrap();
    idx
}

/// Generation `gen` of `idx` written out: arrays, their summary, and its cold records in a file.
fn written(idx: &Index, gen: i64) -> (Vec<u8>, Written, std::fs::File) {
    let mut arrays = Vec::new();
    let w = idx.write_sealed(gen, &mut arrays).unwrap().unwrap();
    let mut file = tempfile::tempfile().unwrap();
    let n = idx
        .detach_cold(gen)
        .unwrap()
        .unwrap()
        .copy_to(&mut file)
        .unwrap();
    file.flush().unwrap();
    assert_eq!((w.bytes, n), (arrays.len() as u64, w.cold_bytes));
    (arrays, w, file)
}

fn read(
    gen: i64,
    arrays: &[u8],
    w: &Written,
    file: &std::fs::File,
) -> io::Result<SealedGeneration> {
    let cold = cold::in_memory().load(gen, file.try_clone()?, 0, w.cold_bytes)?;
    SealedGeneration::read(gen, &mut &arrays[..], w.bytes, w.hash, cold)
}

/// What `idx` finds for `e` as a query, and its score.
fn find(idx: &Index, e: &Entry, scratch: &mut Scratch) -> Option<(EntryRef, f32)> {
    let mut grams = Vec::new();
    crate::index::grams::distinct_bigrams(&e.chars, &mut grams);
    let q = crate::index::tests::query_of(e, &grams);
    let found = idx.find(&q, scratch, &mut QueryStats::default());
    found.map(|f| (f.r, f.m.score))
}

/// What `idx` finds for a set of queries, near and far.
fn answers(idx: &Index) -> Vec<Option<(EntryRef, f32)>> {
    let mut scratch = Scratch::default();
    let mut out = Vec::new();
    for i in 0..400 {
        let mut e = entry(9, i);
        if i % 3 == 0 {
            let mut chars = e.chars.to_vec();
            chars.push('啊');
            e.chars = chars.into();
        }
        out.push(find(idx, &e, &mut scratch));
    }
    out
}

use crate::index::EntryRef;

// Generations written whole and read back make an index that holds the same entries and finds
// the same matches, and goes on the same way when a late entry joins a sealed generation.
#[test]
fn generations_read_back_answer_as_the_ones_written() {
    let mut a = restored();
    let mut b = index();
    let gens: Vec<SealedGeneration> = [3i64, 4, 6]
        .iter()
        .map(|&g| {
            let (arrays, w, file) = written(&a, g);
            assert_eq!(w.entries, 1500);
            read(g, &arrays, &w, &file).unwrap()
        })
        .collect();
    assert!(b.adopt(gens).is_empty());
    assert_eq!(b.len(), a.len());
    assert!(a
        .entries()
        .map(|(r, e)| format!("{r:?} {e:?}"))
        .eq(b.entries().map(|(r, e)| format!("{r:?} {e:?}"))));
    let found = answers(&a);
    assert!(found.iter().filter(|f| f.is_some()).count() > 50);
    assert_eq!(found, answers(&b));
    // A late entry joins generation 4 in both.
    let mut scratch = Scratch::default();
    for i in 1500..1600 {
        a.insert(4, &entry(4, i), &mut scratch);
        b.insert(4, &entry(4, i), &mut scratch);
    }
    assert_eq!(answers(&a), answers(&b));
    // Generation 4 holds late entries now: it is written once they are merged (`settle`), and
    // read back it answers as it did, late entries included.
    assert_eq!(a.write_sealed(4, &mut Vec::new()).unwrap(), None);
    assert_eq!(a.write_sealed(5, &mut Vec::new()).unwrap(), None);
    assert!(!a.settle(5));
    let before = answers(&a);
    assert!(a.settle(4));
    assert_eq!(answers(&a), before, "merging changes no answer");
    let mut c = index();
    let gens: Vec<SealedGeneration> = [3i64, 4, 6]
        .iter()
        .map(|&g| {
            let (arrays, w, file) = written(&a, g);
            read(g, &arrays, &w, &file).unwrap()
        })
        .collect();
    assert_eq!(gens[1].held().len(), 1600);
    assert!(c.adopt(gens).is_empty());
    assert!(a
        .entries()
        .map(|(r, e)| format!("{r:?} {e:?}"))
        .eq(c.entries().map(|(r, e)| format!("{r:?} {e:?}"))));
    assert_eq!(answers(&c), before);
    // Late entries that match only one another are found through their own postings.
    let late = |idx: &Index| {
        let mut e = entry(4, 1550);
        e.id = PostId("late-copy".into());
        e.key.seq += 1_000_000;
        e.key.tau += 1_000_000;
        find(idx, &e, &mut Scratch::default())
    };
    assert!(late(&a).is_some());
    assert_eq!(late(&a), late(&c));
}

// A generation the index holds already is handed back, not added twice.
#[test]
fn a_generation_held_already_is_handed_back() {
    let a = restored();
    let (arrays, w, file) = written(&a, 4);
    let mut b = restored();
    let back = b.adopt(vec![read(4, &arrays, &w, &file).unwrap()]);
    let back: Vec<i64> = back.iter().map(|g| g.held().gen()).collect();
    assert_eq!(back, [4]);
    assert_eq!(b.len(), a.len());
}

// Damaged arrays are refused: a flipped byte anywhere, a cut, cold records of another length.
#[test]
fn damaged_arrays_are_refused() {
    let a = restored();
    let (arrays, w, file) = written(&a, 6);
    for at in [0, 9, arrays.len() / 3, arrays.len() / 2, arrays.len() - 1] {
        let mut bad = arrays.clone();
        bad[at] ^= 0x10;
        let e = read(6, &bad, &w, &file)
            .err()
            .expect("a flipped byte is refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "byte {at}");
    }
    let cut = &arrays[..arrays.len() - 5];
    assert!(read(
        6,
        cut,
        &Written {
            bytes: cut.len() as u64,
            ..w
        },
        &file
    )
    .is_err());
    assert!(read(6, cut, &w, &file).is_err());
    let short = Written {
        cold_bytes: w.cold_bytes - 1,
        ..w
    };
    assert!(read(6, &arrays, &short, &file).is_err());
}

// The digest follows the settings the arrays depend on.
#[test]
fn the_digest_follows_the_settings() {
    let base = index().sealed_digest();
    assert_eq!(base, index().sealed_digest());
    let cfg = IndexConfig {
        blocks: 5,
        max_distance: 3,
        ..IndexConfig::default()
    };
    let other = Index::new(cfg, VerifyConfig::default()).unwrap();
    assert_ne!(base, other.sealed_digest());
    let verify = VerifyConfig {
        edit_similarity: 0.5,
        ..VerifyConfig::default()
    };
    assert_ne!(
        base,
        Index::new(IndexConfig::default(), verify)
            .unwrap()
            .sealed_digest()
    );
}
