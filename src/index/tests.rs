//! The candidate search against a scan of every live entry.

use proptest::prelude::*;

use super::*;
use crate::types::{EventTime, Fingerprint};
use crate::verify::{verify, Method};

/// An entry with no tokens: it stays out of the block tables (too few tokens for a stable
/// fingerprint), and only the char rules can accept it or a query like it.
fn entry(n: u64, text: &str) -> Entry {
    let s: String = text.into();
    Entry {
        id: PostId(format!("e{n}")),
        key: OrderKey {
            tau: n as i64,
            arrival: 0,
            partition: 0,
            seq: n,
        },
        time: EventTime(n as i64),
        fingerprint: Fingerprint(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        chars: s.chars().collect(),
        text_hash: xxhash_rust::xxh3::xxh3_64(s.as_bytes()),
        tokens: Box::new([]),
    }
}

/// `e` asking for its earlier near-duplicates, over the whole index, with bigrams `grams`.
pub(super) fn query_of<'a>(e: &'a Entry, grams: &'a [Gram]) -> Query<'a> {
    Query {
        id: &e.id,
        before: e.key,
        visibility: Default::default(),
        min_gen: 0,
        max_gen: i64::MAX,
        sketch: e.sketch(),
        grams,
    }
}

/// What `find` must return, by `verify` alone over `entries`: an entry with the query's text if
/// there is one (the newest generation's, then the older slot), else the best match of the newest
/// generation that holds one (ties to the older slot).
fn scan(entries: &[(i64, u32, Entry)], q: &Entry) -> Option<(EntryRef, Method, f32)> {
    let cfg = VerifyConfig::default();
    let mut order: Vec<_> = entries.iter().collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let found =
        |gen: i64, slot: u32, m: crate::verify::Match| (EntryRef { gen, slot }, m.method, m.score);
    if let Some((gen, slot, e)) = order.iter().find(|(_, _, e)| e.chars == q.chars) {
        return verify(&q.sketch(), &e.sketch(), &cfg).map(|m| found(*gen, *slot, m));
    }
    let mut best: Option<(EntryRef, Method, f32)> = None;
    for (gen, slot, e) in order {
        if best.as_ref().is_some_and(|b| b.0.gen != *gen) {
            break;
        }
        if let Some(m) = verify(&q.sketch(), &e.sketch(), &cfg) {
            if best.as_ref().is_none_or(|b| m.score > b.2) {
                best = Some(found(*gen, *slot, m));
            }
        }
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    // Texts from a few shared clauses, so that many are near-duplicates of one another and
    // posting lists are long enough for count filtering: whichever path the bigram search takes
    // (plain prefix or counted), `find` returns the match a scan of every entry finds.
    #[test]
    fn find_returns_what_a_scan_of_every_entry_finds(
        texts in proptest::collection::vec(proptest::collection::vec(0usize..12, 1..5), 40..160),
        edits in proptest::collection::vec((0usize..40, "[天地人和]"), 0..160),
        gens in proptest::collection::vec(0i64..3, 160),
        seal in any::<bool>(),
    ) {
        const CLAUSES: [&str; 12] = [
            "今天天气很好", "我们去公园散步", "明天可能下雨", "记得带伞", "新闻说", "北京的交通",
            "越来越堵了", "周末一起吃饭吧", "这家店的面条", "非常好吃", "排队的人很多", "值得一试",
        ];
        let mut idx = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
        let mut scratch = Scratch::default();
        let mut stored: Vec<(i64, u32, Entry)> = Vec::new();
        let mut sorted_gens = gens.clone();
        sorted_gens.truncate(texts.len());
        sorted_gens.sort_unstable();
        for (n, (parts, gen)) in texts.iter().zip(&sorted_gens).enumerate() {
            let mut text: String = parts.iter().map(|&p| CLAUSES[p]).collect();
            if let Some((at, c)) = edits.get(n) {
                let mut chars: Vec<char> = text.chars().collect();
                let at = at % chars.len();
                chars[at] = c.chars().next().unwrap();
                text = chars.into_iter().collect();
            }
            let e = entry(n as u64, &text);
            let grams_of = |e: &Entry| {
                let mut g = Vec::new();
                grams::distinct_bigrams(&e.chars, &mut g);
                g
            };
            let g = grams_of(&e);
            let q = query_of(&e, &g);
            let want = scan(&stored, &e);
            let mut stats = QueryStats::default();
            let got = idx
                .find(&q, &mut scratch, &mut stats)
                .map(|f| (f.r, f.m.method, f.m.score));
            prop_assert_eq!(got, want, "post {} {:?}", n, text);
            if got.is_none() {
                let r = idx.insert(*gen, &e, &mut scratch);
                stored.push((r.gen, r.slot, e));
            }
            if seal && n % 37 == 0 {
                let v = VerifyConfig::default();
                let layout = idx.layout.clone();
                idx.segments.iter_mut().for_each(|s| s.seal(&layout, &v));
                // The sealed generations' gram dictionaries in one table, as sealing in
                // `insert` leaves them: the search ranks their grams there.
                idx.reindex_columns();
                let sealed: Vec<i64> = idx
                    .segments
                    .iter()
                    .filter(|s| s.prefix.is_some())
                    .map(|s| s.gen)
                    .collect();
                prop_assert!(idx.columns.gens().eq(sealed));
            }
        }
    }
}

// Only 32 bits of a text hash stay in memory: an entry whose hash shares them with the query's,
// but not its text, must not hide the entry that has the query's text (short texts have no
// other path to it).
#[test]
fn a_32_bit_hash_collision_does_not_hide_an_exact_match() {
    let mut seen = std::collections::HashMap::new();
    let (a, b) = (0u64..)
        .map(|i| format!("t{i}"))
        .find_map(|t| {
            let low = xxhash_rust::xxh3::xxh3_64(t.as_bytes()) as u32;
            seen.insert(low, t.clone()).map(|other| (t, other))
        })
        .unwrap();
    let mut idx = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    // The colliding text first, so that its key is the earlier one.
    idx.insert(0, &entry(1, &b), &mut scratch);
    idx.insert(0, &entry(2, &a), &mut scratch);
    let q = entry(3, &a);
    let query = query_of(&q, &[]);
    let got = idx.find(&query, &mut scratch, &mut QueryStats::default());
    assert_eq!(
        got.map(|f| (f.r.slot, f.m.method)),
        Some((1, Method::Exact)),
        "{a} / {b}"
    );
}

// Generations after `Query::max_gen` are not searched, the exact path's included; the ones up
// to it are, newest first.
#[test]
fn generations_after_the_querys_last_are_not_searched() {
    let mut idx = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    let text = "一模一样的一段文字，足够长";
    let near = "一模一样的一段文字，足够长！";
    idx.insert(2, &entry(1, near), &mut scratch);
    idx.insert(5, &entry(2, text), &mut scratch);
    let q = entry(3, text);
    let mut grams = Vec::new();
    crate::index::grams::distinct_bigrams(&q.chars, &mut grams);
    let found = |max_gen| {
        let query = Query {
            max_gen,
            ..query_of(&q, &grams)
        };
        idx.find(&query, &mut Scratch::default(), &mut QueryStats::default())
            .map(|f| (f.r.gen, f.m.method == Method::Exact))
    };
    assert_eq!(found(i64::MAX), Some((5, true)));
    assert_eq!(found(5), Some((5, true)));
    assert_eq!(found(4), Some((2, false)));
    assert_eq!(found(1), None);
}

// Each block table's scan keeps the newest `bucket_scan_cap` slots of the query's bucket, and
// of those the ones within `max_distance` become candidates.
#[test]
fn a_bucket_scan_keeps_each_tables_newest_slots_within_the_distance() {
    let cfg = IndexConfig {
        bucket_scan_cap: 3,
        ..IndexConfig::default()
    };
    let mut idx = Index::new(cfg, VerifyConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    let fp = 0x0123_4567_89ab_cdef_u64;
    // Short texts (no bigram postings) with enough tokens for the block tables; the last one
    // differs from the others in 4 bits of the lowest block only, so it shares the buckets of
    // the three tables keyed on other blocks but is too far to be a candidate.
    let tabled = |n: u64, fp: u64| Entry {
        fingerprint: Fingerprint(fp),
        tokens: (0..8).collect(),
        ..entry(n, "甲乙")
    };
    for n in 0..6 {
        idx.insert(0, &tabled(n, fp), &mut scratch);
    }
    idx.insert(0, &tabled(6, fp ^ 0xf), &mut scratch);
    let q = tabled(7, fp);
    let query = query_of(&q, &[]);
    let simhash: Vec<u32> = idx
        .candidate_sources(&query)
        .into_iter()
        .filter(|(_, s)| s.simhash)
        .map(|(r, _)| r.slot)
        .collect();
    // The lowest block's table: slots 3, 4 and 5; the other tables: 4, 5 and 6, 6 too far.
    assert_eq!(simhash, [3, 4, 5]);
}

// A growing generation moves its block tables' slots to direct form as they grow
// (`Segment::grow_tables`): a query gets the candidates the mutable tables would give, each
// table's newest `bucket_scan_cap` slots of its key within `max_distance`, before a move,
// between moves and after them.
#[test]
fn a_growing_generation_in_direct_form_gives_the_same_simhash_candidates() {
    let cfg = IndexConfig {
        bucket_scan_cap: 5,
        ..IndexConfig::default()
    };
    let mut idx = Index::new(cfg.clone(), VerifyConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Variants of a few thousand fingerprints, a few bits apart: each key's slots then span
    // both forms, and many are near the query.
    let bases: Vec<u64> = (0..4096).map(|_| next()).collect();
    let mut fingerprint = move || {
        let r = next();
        (0..r % 4).fold(bases[(r >> 8) as usize % bases.len()], |fp, i| {
            fp ^ 1 << (r >> (20 + 6 * i) & 63)
        })
    };
    let tabled = |n: u64, fp: u64| Entry {
        fingerprint: Fingerprint(fp),
        tokens: (0..8).collect(),
        ..entry(n, &format!("甲{n}"))
    };
    let (mut fps, mut met) = (Vec::new(), 0);
    for n in 0..150_000u64 {
        if [1_000, 65_537, 70_000, 100_000, 131_073, 150_000 - 1].contains(&n) {
            for _ in 0..20 {
                // Later than every entry, so that it sees them all.
                let q = tabled(1 << 40, fingerprint());
                let got: Vec<u32> = idx
                    .candidate_sources(&query_of(&q, &[]))
                    .into_iter()
                    .filter(|(_, s)| s.simhash)
                    .map(|(r, _)| r.slot)
                    .collect();
                let mut want = std::collections::BTreeSet::<u32>::new();
                for t in 0..idx.layout.tables() {
                    let key = idx.layout.key(t, q.fingerprint);
                    let same: Vec<u32> = (0..fps.len() as u32)
                        .filter(|&s| idx.layout.key(t, Fingerprint(fps[s as usize])) == key)
                        .collect();
                    let newest = &same[same.len().saturating_sub(cfg.bucket_scan_cap)..];
                    want.extend(newest.iter().copied().filter(|&s| {
                        (fps[s as usize] ^ q.fingerprint.0).count_ones() <= cfg.max_distance
                    }));
                }
                assert_eq!(
                    got,
                    want.into_iter().collect::<Vec<_>>(),
                    "after {n} entries"
                );
                met += got.len();
            }
        }
        let fp = fingerprint();
        fps.push(fp);
        idx.insert(0, &tabled(n, fp), &mut scratch);
    }
    assert!(!idx.segments[0].sealed_tables.is_empty());
    assert!(met > 100, "{met} candidates");
}

// A sealed generation's prefix lists keep each entry's length in a byte: an entry too long for
// it (255 characters or more) is filtered by the length its record holds.
#[test]
fn a_sealed_generation_filters_long_entries_by_their_real_length() {
    let mut idx = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
    let mut scratch = Scratch::default();
    let text = |from: u32, n: u32| -> String {
        (from..from + n)
            .map(|i| char::from_u32(0x4e00 + (i * 7919) % 20_000).unwrap())
            .collect()
    };
    let long = text(0, 300);
    idx.insert_all(
        0,
        [entry(1, &long), entry(2, &text(5000, 40))],
        &mut scratch,
    );
    assert!(idx.segments[0].prefix.is_some());
    let gram_candidates = |idx: &Index, q: &Entry| -> Vec<u32> {
        let mut grams = Vec::new();
        grams::distinct_bigrams(&q.chars, &mut grams);
        idx.candidate_sources(&query_of(q, &grams))
            .into_iter()
            .filter(|(_, s)| s.gram)
            .map(|(r, _)| r.slot)
            .collect()
    };
    // 300 characters inside 450 are comparable (0.6 of the longer); 255 would not be.
    let outer = entry(10, &(long.clone() + &text(9000, 150)));
    assert_eq!(gram_candidates(&idx, &outer), [0]);
    let found = idx.find(
        &query_of(&outer, &{
            let mut g = Vec::new();
            grams::distinct_bigrams(&outer.chars, &mut g);
            g
        }),
        &mut scratch,
        &mut QueryStats::default(),
    );
    assert_eq!(found.map(|f| f.r), Some(EntryRef { gen: 0, slot: 0 }));
    // 300 inside 510 are not.
    let far = entry(11, &(long + &text(9000, 210)));
    assert!(gram_candidates(&idx, &far).is_empty());
}
