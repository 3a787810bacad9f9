//! Adding entries to a generation, and restoring whole generations at once: a restart builds
//! several generations in parallel, each on a thread of its own, while the caller reads the next
//! one from storage.

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc, Mutex};

use super::cold::ColdFactory;
use super::grams::{self, Gram};
use super::postings::Postings;
use super::prefix::PrefixPostings;
use super::segment::Segment;
use super::{Entry, Index, IndexConfig, Scratch, TableLayout};
use crate::verify::{VerifyConfig, VerifyMode};

/// What indexing an entry needs of the index: its configuration, not its generations, so that
/// restore threads can share it.
#[derive(Clone, Copy)]
pub(super) struct Indexer<'a> {
    layout: &'a TableLayout,
    verify: &'a VerifyConfig,
    simhash_only: bool,
    simhash_min_tokens: usize,
    min_gram_chars: usize,
    gram_max_chars: usize,
}

impl<'a> Indexer<'a> {
    pub(super) fn new(
        layout: &'a TableLayout,
        cfg: &IndexConfig,
        verify: &'a VerifyConfig,
        min_gram_chars: usize,
    ) -> Self {
        Indexer {
            layout,
            verify,
            simhash_only: verify.mode == VerifyMode::SimhashOnly,
            simhash_min_tokens: verify.simhash_min_tokens,
            min_gram_chars,
            gram_max_chars: cfg.gram_max_chars,
        }
    }

    /// Whether an entry with `tokens` distinct tokens goes into the block tables: only posts with
    /// enough tokens for a stable fingerprint (all of them in `simhash_only` mode).
    pub(super) fn tabled(&self, tokens: usize) -> bool {
        self.simhash_only || tokens >= self.simhash_min_tokens
    }

    /// Whether a text of `chars` characters goes into the bigram index.
    pub(super) fn gram_indexed(&self, chars: usize) -> bool {
        !self.simhash_only && chars >= self.min_gram_chars && chars <= self.gram_max_chars
    }

    /// Stores `entry` in `seg` and indexes it; returns its slot. `merge` lets the postings seal
    /// their head as it grows (a live generation); without it they wait for `Segment::seal`.
    pub(super) fn add(
        &self,
        seg: &mut Segment,
        entry: &Entry,
        grams_buf: &mut Vec<Gram>,
        merge: bool,
    ) -> u32 {
        let slot = seg.push(entry);
        if self.tabled(entry.tokens.len()) {
            for (t, table) in seg.tables.iter_mut().enumerate() {
                let key = self.layout.key(t, entry.fingerprint);
                if merge {
                    table.push(key, slot);
                } else {
                    table.push_unsealed(key, slot);
                }
            }
        }
        if self.gram_indexed(entry.chars.len()) {
            grams::distinct_bigrams(&entry.chars, grams_buf);
            for g in grams_buf.iter() {
                if merge {
                    seg.grams.push(*g, slot);
                } else {
                    seg.grams.push_unsealed(*g, slot);
                }
            }
        }
        slot
    }

    /// A sealed generation `gen` holding `entries` in order, its records in a store of `cold`.
    /// The block tables and bigram postings are built in one go (`Postings::build`,
    /// `PrefixPostings::build`), as pushing every entry and sealing would leave them.
    fn build(&self, cold: &dyn ColdFactory, gen: i64, entries: Vec<Entry>) -> Segment {
        let mut seg = Segment::new(gen, self.layout.tables(), cold.create(gen));
        for e in &entries {
            seg.push(e);
        }
        let n = entries.len() as u32;
        for (t, table) in seg.tables.iter_mut().enumerate() {
            *table = Postings::build(n, |slot, out| {
                out.clear();
                let e = &entries[slot as usize];
                if self.tabled(e.tokens.len()) {
                    out.push(self.layout.key(t, e.fingerprint));
                }
            });
        }
        let prefix = PrefixPostings::build(
            n,
            |slot, out| {
                let e = &entries[slot as usize];
                if self.gram_indexed(e.chars.len()) {
                    grams::distinct_bigrams(&e.chars, out);
                } else {
                    out.clear();
                }
            },
            |slot| entries[slot as usize].chars.len() as u32,
            self.verify,
        );
        seg.prefix = (prefix.postings() > 0).then_some(prefix);
        seg.seal(self.verify);
        seg
    }
}

impl Index {
    /// Adds whole generations (a restart), each in insertion order, in the form `insert_all`
    /// gives them. Up to `threads` generations are built at once, each on a thread of its own,
    /// while `gens` (which runs on the calling thread, reading storage) produces the next; only
    /// the generations being built are held as entries. A generation the index already holds,
    /// or one that `gens` yields twice, is added entry by entry afterwards.
    pub fn insert_generations(
        &mut self,
        gens: impl Iterator<Item = (i64, Vec<Entry>)>,
        threads: usize,
    ) {
        let ix = Indexer::new(&self.layout, &self.cfg, &self.verify, self.min_gram_chars);
        let cold: &dyn ColdFactory = &*self.cold;
        let have: BTreeSet<i64> = self.segments.iter().map(|s| s.gen).collect();
        let mut later = Vec::new();
        let (tx, rx) = mpsc::sync_channel::<(i64, Vec<Entry>)>(0);
        // Each builder holds the receiver: once all have stopped (a panic), it is dropped and a
        // send fails instead of waiting for a builder forever.
        let rx = Arc::new(Mutex::new(rx));
        let built: Vec<Segment> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    let rx = Arc::clone(&rx);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        loop {
                            // A poisoned lock means another builder panicked: its join rethrows.
                            let job = match rx.lock() {
                                Ok(r) => r.recv(),
                                Err(_) => break,
                            };
                            let Ok((gen, entries)) = job else { break };
                            out.push(ix.build(cold, gen, entries));
                        }
                        out
                    })
                })
                .collect();
            drop(rx);
            let mut sent = BTreeSet::new();
            for (gen, entries) in gens {
                if have.contains(&gen) || !sent.insert(gen) {
                    later.push((gen, entries));
                } else if let Err(mpsc::SendError(job)) = tx.send((gen, entries)) {
                    // Every builder stopped (one panicked): keep the entries, the join rethrows.
                    later.push(job);
                    break;
                }
            }
            drop(tx);
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for seg in built {
            let i = self
                .segments
                .iter()
                .position(|s| s.gen > seg.gen)
                .unwrap_or(self.segments.len());
            self.segments.insert(i, seg);
        }
        let mut scratch = Scratch::default();
        for (gen, entries) in later {
            self.insert_all(gen, entries, &mut scratch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::OrderKey;
    use crate::types::{EventTime, Fingerprint, PostId};

    fn entries(gen: i64, n: u64) -> Vec<Entry> {
        const CHARS: [char; 8] = ['天', '地', '人', '和', '风', '雨', '云', '山'];
        (0..n)
            .map(|i| {
                let x = (gen as u64 * 7919 + i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let len = 8 + (x % 30) as usize;
                let text: String = (0..len)
                    .map(|k| CHARS[((x >> (k % 60)) % 8) as usize])
                    .collect();
                Entry {
                    id: PostId(format!("{gen}-{i}")),
                    key: OrderKey {
                        tau: gen * 100 + i as i64,
                        arrival: 0,
                        partition: 0,
                        seq: gen as u64 * 1000 + i,
                    },
                    time: EventTime(gen * 100),
                    fingerprint: Fingerprint(x),
                    chars: text.chars().collect(),
                    text_hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
                    tokens: (0..(x % 12) as u32)
                        .map(|t| t * 31 + (x as u32 % 5))
                        .collect(),
                }
            })
            .collect()
    }

    fn fingerprint_of(index: &Index) -> Vec<String> {
        let shapes = index.shape().into_iter().map(|mut s| {
            s.buckets.sort_unstable();
            s.postings.sort_unstable();
            format!(
                "{} {} {} {} {} {:?} {:?}",
                s.gen, s.entries, s.tabled, s.gram_indexed, s.both, s.buckets, s.postings
            )
        });
        let entries = index.entries().map(|(r, e)| format!("{r:?} {e:?}"));
        shapes.chain(entries).collect()
    }

    /// Cold stores for every generation but 4, whose builder panics.
    struct FailsOnFour;

    impl ColdFactory for FailsOnFour {
        fn create(&self, gen: i64) -> Box<dyn crate::index::cold::ColdStore> {
            assert_ne!(gen, 4, "no store for generation 4");
            crate::index::cold::in_memory().create(gen)
        }
    }

    // A builder that panics makes the restore panic, with one builder or several, instead of
    // leaving the reader waiting to hand it the next generation.
    #[test]
    fn a_panicking_builder_fails_the_restore() {
        for threads in [1, 2] {
            let (done, wait) = mpsc::channel();
            std::thread::spawn(move || {
                let mut idx = Index::with_cold(
                    IndexConfig::default(),
                    VerifyConfig::default(),
                    Arc::new(FailsOnFour),
                )
                .unwrap();
                let feed = (3..9).map(|g| (g, entries(g, 50)));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    idx.insert_generations(feed, threads)
                }));
                let _ = done.send(r.is_err());
            });
            let panicked = wait.recv_timeout(std::time::Duration::from_secs(60));
            assert_eq!(panicked, Ok(true), "threads {threads}");
        }
    }

    #[test]
    fn parallel_restore_builds_what_one_by_one_builds() {
        let gens = [3i64, 4, 6, 9];
        let mut one = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
        let mut scratch = Scratch::default();
        for g in gens {
            let mut all = entries(g, 300);
            // Generation 4 comes in two parts below: the second joins a sealed generation, whose
            // earlier entries are already in prefix form.
            let rest = all.split_off(if g == 4 { 120 } else { 300 });
            one.insert_all(g, all, &mut scratch);
            if !rest.is_empty() {
                one.insert_all(g, rest, &mut scratch);
            }
        }
        for threads in [1, 2, 3] {
            let mut par = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
            // Out of order, and generation 4 twice: its second half joins the first.
            let mut four = entries(4, 300);
            let rest = four.split_off(120);
            let feed = vec![
                (9, entries(9, 300)),
                (4, four),
                (3, entries(3, 300)),
                (6, entries(6, 300)),
                (4, rest),
            ];
            par.insert_generations(feed.into_iter(), threads);
            assert_eq!(
                fingerprint_of(&par),
                fingerprint_of(&one),
                "threads {threads}"
            );
        }
    }
}
