//! Adding entries to a generation, and restoring whole generations at once: a restart builds
//! several generations in parallel, each on a thread of its own, while the caller reads the next
//! one from storage, and may write each one whole as soon as it is built (`snapshot`).

use std::collections::BTreeSet;
use std::sync::{mpsc, Arc, Mutex};

use super::cold::ColdFactory;
use super::entry::DecodeError;
use super::grams::{self, Gram};
use super::packed::Packed;
use super::prefix::PrefixBuilder;
use super::segment::Segment;
use super::snapshot::Built;
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
            if merge {
                seg.grow_tables(self.layout);
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

    /// A sealed generation `gen` holding the stored entries `packed` in order, its records in a
    /// store of `cold`. Each entry is decoded once, without allocating, and goes straight into
    /// the generation's store, the stored bytes let go of as they are read; the block tables and
    /// bigram postings are built in one go (`SealedTable::build`, `PrefixBuilder`), as pushing
    /// every entry and sealing would leave them. `scratch` keeps its memory from one generation
    /// to the next.
    fn build(
        &self,
        cold: &dyn ColdFactory,
        gen: i64,
        packed: Packed,
        scratch: &mut BuildScratch,
    ) -> Result<Segment, DecodeError> {
        let BuildScratch {
            prefix,
            chars,
            tokens,
            grams,
            lens,
            texts,
        } = scratch;
        let mut seg = Segment::new(gen, self.layout.tables(), cold.create(gen));
        seg.reserve(packed.len());
        // A generation that failed to decode may have left slots behind.
        prefix.clear();
        lens.clear();
        texts.clear();
        packed.drain(|v| {
            chars.clear();
            chars.extend(v.text.chars());
            tokens.clear();
            tokens.extend(v.tokens());
            texts.push(seg.push_view(&v, chars, tokens));
            if self.gram_indexed(chars.len()) {
                grams::distinct_bigrams(chars, grams);
            } else {
                grams.clear();
            }
            prefix.add(grams);
            lens.push(chars.len() as u32);
            Ok::<_, DecodeError>(())
        })?;
        seg.list_texts(texts);
        seg.sealed_tables =
            seg.build_tables(self.layout, |s| self.tabled(seg.store.meta(s).tokens()));
        let prefix = prefix.finish(|slot| lens[slot as usize], self.verify);
        seg.prefix = (prefix.postings() > 0).then_some(prefix);
        seg.seal(self.layout, self.verify);
        Ok(seg)
    }
}

impl Index {
    /// Adds `seg` among the generations, in order (the caller reindexes the columns).
    pub(super) fn place(&mut self, seg: Segment) {
        let i = self
            .segments
            .iter()
            .position(|s| s.gen > seg.gen)
            .unwrap_or(self.segments.len());
        self.segments.insert(i, seg);
    }
}

/// What a restore thread keeps from one generation it builds to the next, so that each one does
/// not fault its buffers in again.
#[derive(Default)]
struct BuildScratch {
    prefix: PrefixBuilder,
    chars: Vec<char>,
    tokens: Vec<u32>,
    grams: Vec<Gram>,
    lens: Vec<u32>,
    /// Each entry's key in the exact-text table, with its slot.
    texts: Vec<(u32, u32)>,
}

impl Index {
    /// Adds whole generations of stored entries (a restart), each in insertion order, in the
    /// form `insert_all` gives them. Up to `threads` generations are built at once, each on a
    /// thread of its own, while `gens` (which runs on the calling thread, reading storage)
    /// produces the next; only the generations being built are held, in their stored encoding.
    /// A generation the index already holds, or one that `gens` yields twice, is added entry by
    /// entry afterwards. A record that does not decode fails the restore (after every
    /// generation was read); the generations built before it stay.
    pub fn insert_generations(
        &mut self,
        gens: impl Iterator<Item = (i64, Packed)>,
        threads: usize,
    ) -> Result<(), DecodeError> {
        self.insert_generations_keeping(gens, threads, None)
    }

    /// `insert_generations`, handing each generation built to `keep` on its builder's thread,
    /// as soon as it is built (to write it whole: `snapshot`).
    pub fn insert_generations_keeping(
        &mut self,
        gens: impl Iterator<Item = (i64, Packed)>,
        threads: usize,
        keep: Option<&(dyn Fn(Built<'_>) + Sync)>,
    ) -> Result<(), DecodeError> {
        let ix = Indexer::new(&self.layout, &self.cfg, &self.verify, self.min_gram_chars);
        let cold: &dyn ColdFactory = &*self.cold;
        let have: BTreeSet<i64> = self.segments.iter().map(|s| s.gen).collect();
        let mut later = Vec::new();
        let (tx, rx) = mpsc::sync_channel::<(i64, Packed)>(0);
        // Each builder holds the receiver: once all have stopped (a panic), it is dropped and a
        // send fails instead of waiting for a builder forever.
        let rx = Arc::new(Mutex::new(rx));
        let built: Vec<Result<Segment, DecodeError>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads.max(1))
                .map(|_| {
                    let rx = Arc::clone(&rx);
                    s.spawn(move || {
                        let mut out = Vec::new();
                        let mut scratch = BuildScratch::default();
                        loop {
                            // A poisoned lock means another builder panicked: its join rethrows.
                            let job = match rx.lock() {
                                Ok(r) => r.recv(),
                                Err(_) => break,
                            };
                            let Ok((gen, packed)) = job else { break };
                            let built = ix.build(cold, gen, packed, &mut scratch);
                            if let (Some(keep), Ok(seg)) = (keep, &built) {
                                keep(Built { seg });
                            }
                            out.push(built);
                        }
                        out
                    })
                })
                .collect();
            drop(rx);
            let mut sent = BTreeSet::new();
            for (gen, packed) in gens {
                if have.contains(&gen) || !sent.insert(gen) {
                    later.push((gen, packed));
                } else if let Err(mpsc::SendError(job)) = tx.send((gen, packed)) {
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
        let mut failed = Ok(());
        for seg in built {
            let seg = match seg {
                Ok(seg) => seg,
                Err(e) => {
                    failed = failed.and(Err(e));
                    continue;
                }
            };
            self.place(seg);
        }
        self.reindex_columns();
        let mut scratch = Scratch::default();
        for (gen, packed) in later {
            self.insert_all(gen, packed.entries()?, &mut scratch);
        }
        failed
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

        fn load(
            &self,
            gen: i64,
            file: std::fs::File,
            offset: u64,
            len: u64,
        ) -> std::io::Result<Box<dyn crate::index::cold::ColdStore>> {
            crate::index::cold::in_memory().load(gen, file, offset, len)
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
                let feed = (3..9).map(|g| (g, Packed::from_entries(&entries(g, 50))));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    idx.insert_generations(feed, threads)
                }));
                let _ = done.send(r.is_err());
            });
            let panicked = wait.recv_timeout(std::time::Duration::from_secs(60));
            assert_eq!(panicked, Ok(true), "threads {threads}");
        }
    }

    // A stored record whose text is not UTF-8 fails the restore with an error; the generations
    // that decoded are built all the same.
    #[test]
    fn a_record_that_does_not_decode_fails_the_restore() {
        let first = entries(5, 1).remove(0);
        let mut enc = Vec::new();
        first.encode(&mut enc);
        // Format, tau, arrival, partition, seq, time, fingerprint; then the id, then the text.
        let text_at = 45 + 4 + first.id.0.len() + 4;
        enc[text_at] = 0xFF;
        // Good records first: the builder has taken them in when it meets the bad one.
        let mut bad = Packed::from_entries(&entries(5, 30)[1..]);
        bad.push_record(&enc, |_| true).unwrap();
        for threads in [1, 2] {
            let mut idx = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
            let feed = vec![
                (3, Packed::from_entries(&entries(3, 40))),
                (5, bad.clone()),
                (6, Packed::from_entries(&entries(6, 40))),
            ];
            let r = idx.insert_generations(feed.into_iter(), threads);
            assert_eq!(r, Err(DecodeError::Malformed), "threads {threads}");
            // The others are built as they would be without it.
            let mut good = Index::new(IndexConfig::default(), VerifyConfig::default()).unwrap();
            let feed = [3, 6].map(|g| (g, Packed::from_entries(&entries(g, 40))));
            good.insert_generations(feed.into_iter(), 1).unwrap();
            assert_eq!(
                fingerprint_of(&idx),
                fingerprint_of(&good),
                "threads {threads}"
            );
            assert_eq!(idx.len(), 80);
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
            let feed = feed.into_iter().map(|(g, e)| (g, Packed::from_entries(&e)));
            par.insert_generations(feed, threads).unwrap();
            assert_eq!(
                fingerprint_of(&par),
                fingerprint_of(&one),
                "threads {threads}"
            );
        }
    }
}
