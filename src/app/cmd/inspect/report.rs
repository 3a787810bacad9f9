//! The state report of `inspect`: window bounds, entry counts, bucket-size histograms, the
//! largest buckets and posting lists, and what is knowable about clusters.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::{instant, Instant, Opened};
use crate::app::config::Config;
use crate::index::{Entry, EntryRef};
use crate::state::RunRecord;
use crate::types::PostId;

/// Window bounds.
#[derive(Debug, Serialize)]
pub struct WindowView {
    /// `window.window_secs`.
    pub window_secs: i64,
    /// `window.generation_secs`.
    pub generation_secs: i64,
    /// Smallest partition watermark (the one that decides expiry).
    pub watermark: Option<Instant>,
    /// `watermark - window_secs`.
    pub horizon: Option<Instant>,
    /// Oldest live generation and the start of its time span.
    pub oldest_generation: Option<(i64, Instant)>,
    /// Newest generation holding entries and the end of its time span.
    pub newest_generation: Option<(i64, Instant)>,
    /// Oldest event time among live entries.
    pub oldest_entry: Option<Instant>,
    /// Newest event time among live entries.
    pub newest_entry: Option<Instant>,
}

/// Entry counts.
#[derive(Debug, Serialize)]
pub struct Counts {
    /// Live entries, copies included (what a resumed run rebuilds).
    pub total: usize,
    /// Distinct representatives (clusters) among them.
    pub representatives: usize,
    /// In the SimHash block tables.
    pub in_tables: usize,
    /// In the bigram index.
    pub in_bigrams: usize,
    /// In the bigram index but not the tables.
    pub bigram_only: usize,
    /// In the tables but not the bigram index.
    pub tables_only: usize,
    /// In neither: found by the exact map only.
    pub exact_only: usize,
    /// (generation, entries), oldest first.
    pub per_generation: Vec<(i64, usize)>,
    /// Still on disk but in expired generations (a resumed run deletes them).
    pub expired_on_disk: usize,
    /// Written after the last checkpoint (a resumed run discards them).
    pub uncommitted_on_disk: usize,
}

/// Sizes in power-of-two bins.
#[derive(Debug, PartialEq, Serialize)]
pub struct Histogram {
    /// Buckets (or posting lists).
    pub count: usize,
    /// Sum of their sizes.
    pub entries: usize,
    /// Largest size.
    pub max: usize,
    /// Mean size.
    pub mean: f64,
    /// Scan cap that applies to one of them.
    pub cap: usize,
    /// How many exceed the cap (their scans are truncated, newest first).
    pub over_cap: usize,
    /// (lowest size, highest size, how many), for sizes 1, 2-3, 4-7, ...; empty bins left out.
    pub bins: Vec<(usize, usize, usize)>,
}

/// Bins sizes by their highest set bit.
pub fn histogram(sizes: impl IntoIterator<Item = usize>, cap: usize) -> Histogram {
    let mut bins = [0usize; 65];
    let (mut count, mut entries, mut max, mut over) = (0, 0, 0, 0);
    for s in sizes {
        count += 1;
        entries += s;
        max = max.max(s);
        over += usize::from(s > cap);
        let bin = if s == 0 { 0 } else { 1 + s.ilog2() as usize };
        bins[bin] += 1;
    }
    let bins = bins
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| match b {
            0 => (0, 0, *n),
            b => (1 << (b - 1), (1 << b) - 1, *n),
        })
        .collect();
    Histogram {
        count,
        entries,
        max,
        mean: if count == 0 {
            0.0
        } else {
            entries as f64 / count as f64
        },
        cap,
        over_cap: over,
        bins,
    }
}

/// One large bucket or posting list; `S` is the newest entry's slot, then its text.
#[derive(Debug, Serialize)]
pub struct Hot<S = String> {
    /// Generation.
    pub gen: i64,
    /// `table N key HEX` or `bigram XY`.
    pub what: String,
    /// Entries in it.
    pub entries: usize,
    /// Normalized text of its newest entry.
    pub sample: S,
}

/// A cluster as far as entries tell.
#[derive(Debug, Serialize)]
pub struct ClusterView {
    /// Cluster id (its first unique post).
    pub cluster: String,
    /// Live copies of the representative: 1 + the later generations it was refreshed into.
    pub copies: usize,
    /// Generations holding a copy.
    pub generations: Vec<i64>,
    /// Normalized text.
    pub text: String,
}

/// Why cluster sizes are not shown.
pub const CLUSTER_NOTE: &str = "entries store only representatives (the cluster id and one copy per generation it was \
refreshed into), not members: duplicate counts per cluster are not in the state dir. Count them from the duplicates \
output, e.g. `jq -r .cluster_id dups.jsonl | sort | uniq -c | sort -rn | head`. Listed: clusters with the most \
live copies (each extra copy means a duplicate arrived in a later generation).";

/// The whole `inspect` report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The state dir.
    pub state_dir: String,
    /// Sequence number of the next record; entries from it on are uncommitted.
    pub next_seq: u64,
    /// The file run of the last checkpoint.
    pub run: Option<RunRecord>,
    /// Watermark per partition.
    pub watermarks: Vec<(u32, Instant)>,
    /// Window bounds.
    pub window: WindowView,
    /// Entry counts.
    pub entries: Counts,
    /// Block-table bucket sizes (one bucket = one key of one table in one generation).
    pub table_buckets: Histogram,
    /// Bigram posting-list sizes (per generation; a sealed generation lists each entry under its
    /// prefix grams only).
    pub bigram_postings: Histogram,
    /// The largest buckets.
    pub largest_buckets: Vec<Hot>,
    /// The longest posting lists.
    pub largest_postings: Vec<Hot>,
    /// See `cluster_note`.
    pub clusters: Vec<ClusterView>,
    /// What cluster data exists.
    pub cluster_note: &'static str,
}

/// Builds the report; `top` bounds the lists.
pub fn report(dir: &Path, o: &Opened, cfg: &Config, top: usize) -> Report {
    let index = o.engine.index();
    let shape = index.shape();
    let text = |e: &Entry| e.chars.iter().collect::<String>();
    let mut counts = Counts {
        total: index.len(),
        representatives: 0,
        in_tables: 0,
        in_bigrams: 0,
        bigram_only: 0,
        tables_only: 0,
        exact_only: 0,
        per_generation: shape.iter().map(|s| (s.gen, s.entries)).collect(),
        expired_on_disk: o.expired,
        uncommitted_on_disk: o.discarded,
    };
    for s in &shape {
        counts.in_tables += s.tabled;
        counts.in_bigrams += s.gram_indexed;
        counts.bigram_only += s.gram_indexed - s.both;
        counts.tables_only += s.tabled - s.both;
        counts.exact_only += s.entries + s.both - s.tabled - s.gram_indexed;
    }
    let mut by_cluster: BTreeMap<PostId, (Vec<i64>, Entry)> = BTreeMap::new();
    let (mut oldest, mut newest) = (None::<i64>, None::<i64>);
    for (r, e) in index.entries() {
        oldest = Some(oldest.map_or(e.time.0, |t| t.min(e.time.0)));
        newest = Some(newest.map_or(e.time.0, |t| t.max(e.time.0)));
        by_cluster
            .entry(e.id.clone())
            .or_insert_with(|| (Vec::new(), e))
            .0
            .push(r.gen);
    }
    counts.representatives = by_cluster.len();
    let mut clusters: Vec<ClusterView> = by_cluster
        .into_iter()
        .map(|(id, (gens, e))| ClusterView {
            cluster: id.to_string(),
            copies: gens.len(),
            generations: gens,
            text: text(&e),
        })
        .collect();
    clusters.sort_by(|a, b| {
        b.copies
            .cmp(&a.copies)
            .then_with(|| a.cluster.cmp(&b.cluster))
    });
    clusters.truncate(top);
    let icfg = index.config();
    let sample = |gen: i64, slot: u32| {
        index
            .get(EntryRef { gen, slot })
            .map(|e| text(&e))
            .unwrap_or_default()
    };
    let mut buckets: Vec<Hot<u32>> = Vec::new();
    let mut postings: Vec<Hot<u32>> = Vec::new();
    for s in &shape {
        buckets.extend(s.buckets.iter().map(|&(t, k, n, slot)| Hot {
            gen: s.gen,
            what: format!("table {t} key {k:016x}"),
            entries: n,
            sample: slot,
        }));
        postings.extend(s.postings.iter().map(|&(g, n, slot)| Hot {
            gen: s.gen,
            what: format!("bigram {}", gram_text(g)),
            entries: n,
            sample: slot,
        }));
    }
    let table_buckets = histogram(buckets.iter().map(|h| h.entries), icfg.bucket_scan_cap);
    let bigram_postings = histogram(postings.iter().map(|h| h.entries), icfg.posting_scan_cap);
    let hottest = |mut list: Vec<Hot<u32>>| -> Vec<Hot> {
        list.sort_by(|a, b| {
            b.entries
                .cmp(&a.entries)
                .then_with(|| b.gen.cmp(&a.gen))
                .then_with(|| a.what.cmp(&b.what))
        });
        list.truncate(top);
        list.into_iter()
            .map(|h| Hot {
                sample: sample(h.gen, h.sample),
                gen: h.gen,
                what: h.what,
                entries: h.entries,
            })
            .collect()
    };
    let (largest_buckets, largest_postings) = (hottest(buckets), hottest(postings));
    let window = window_view(o, cfg, oldest, newest);
    Report {
        state_dir: dir.display().to_string(),
        next_seq: o.next_seq,
        run: o.run.clone(),
        watermarks: o
            .engine
            .watermarks()
            .iter()
            .map(|(p, w)| (*p, instant(*w)))
            .collect(),
        window,
        entries: counts,
        table_buckets,
        bigram_postings,
        largest_buckets,
        largest_postings,
        clusters,
        cluster_note: CLUSTER_NOTE,
    }
}

fn gram_text(g: u64) -> String {
    [(g >> 21) as u32, (g & 0x1f_ffff) as u32]
        .iter()
        .filter_map(|c| char::from_u32(*c))
        .collect()
}

fn window_view(o: &Opened, cfg: &Config, oldest: Option<i64>, newest: Option<i64>) -> WindowView {
    let gs = cfg.window.generation_secs;
    let wm = o.engine.watermarks().values().min().copied();
    let gens: Vec<i64> = o.engine.index().generations().map(|(g, _)| g).collect();
    WindowView {
        window_secs: cfg.window.window_secs,
        generation_secs: gs,
        watermark: wm.map(instant),
        horizon: wm.map(|w| instant(w - cfg.window.window_secs)),
        oldest_generation: o.engine.min_live_generation().map(|g| (g, instant(g * gs))),
        newest_generation: gens.last().map(|g| (*g, instant((g + 1) * gs))),
        oldest_entry: oldest.map(instant),
        newest_entry: newest.map(instant),
    }
}

fn opt_instant(i: &Option<Instant>) -> String {
    i.as_ref()
        .map_or("-".into(), |i| format!("{} ({})", i.utc, i.unix))
}

fn render_histogram(name: &str, h: &Histogram) -> String {
    let mut o = format!(
        "{name}: {} of them, {} entries, max {}, mean {:.2}, {} over the scan cap of {}\n",
        h.count, h.entries, h.max, h.mean, h.over_cap, h.cap
    );
    for (lo, hi, n) in &h.bins {
        let label = if lo == hi {
            format!("{lo}")
        } else {
            format!("{lo}-{hi}")
        };
        o += &format!("  size {label:>11}: {n}\n");
    }
    o
}

/// The plain-text rendering of the report.
pub fn render(r: &Report) -> String {
    let mut o = format!("state dir: {}\n", r.state_dir);
    o += &format!("checkpoint: next_seq {}\n", r.next_seq);
    match &r.run {
        Some(run) => {
            o += &format!(
                "  run: input {} at byte {} after {} records ({}), {} unique, {} duplicates, {} rejected\n",
                run.input, run.input_offset, run.records,
                if run.completed { "completed" } else { "interrupted: rerun to resume" },
                run.counts[0], run.counts[1], run.counts[2]
            );
            for m in &run.outputs {
                o += &format!("  output {} at {} bytes\n", m.path, m.len);
            }
        }
        None => o += "  run: none recorded\n",
    }
    let w = &r.window;
    o += &format!(
        "window: {} s in generations of {} s\n",
        w.window_secs, w.generation_secs
    );
    for (p, t) in &r.watermarks {
        o += &format!(
            "  watermark partition {p}: {}\n",
            opt_instant(&Some(t.clone()))
        );
    }
    o += &format!(
        "  horizon (watermark - window): {}\n",
        opt_instant(&w.horizon)
    );
    let gen = |g: &Option<(i64, Instant)>| {
        g.as_ref()
            .map_or("-".into(), |(g, t)| format!("{g} ({} = {})", t.utc, t.unix))
    };
    o += &format!(
        "  oldest live generation: {} start\n",
        gen(&w.oldest_generation)
    );
    o += &format!(
        "  newest generation:      {} end\n",
        gen(&w.newest_generation)
    );
    o += &format!(
        "  entry event times: {} .. {}\n",
        opt_instant(&w.oldest_entry),
        opt_instant(&w.newest_entry)
    );
    let c = &r.entries;
    o += &format!(
        "entries: {} live ({} representatives); {} in SimHash tables, {} in the bigram index \
({} bigram only, {} tables only), {} exact map only\n",
        c.total,
        c.representatives,
        c.in_tables,
        c.in_bigrams,
        c.bigram_only,
        c.tables_only,
        c.exact_only
    );
    let gens: Vec<String> = c
        .per_generation
        .iter()
        .map(|(g, n)| format!("{g}:{n}"))
        .collect();
    o += &format!("  per generation: {}\n", gens.join(" "));
    o += &format!(
        "  on disk but not live: {} in expired generations, {} uncommitted (a resumed run deletes both)\n",
        c.expired_on_disk, c.uncommitted_on_disk
    );
    o += &render_histogram("block-table buckets", &r.table_buckets);
    o += &render_histogram("bigram postings", &r.bigram_postings);
    for (title, list) in [
        ("largest buckets", &r.largest_buckets),
        ("longest postings", &r.largest_postings),
    ] {
        o += &format!("{title}:\n");
        for h in list {
            o += &format!(
                "  {:>6}  gen {} {}  newest: {}\n",
                h.entries, h.gen, h.what, h.sample
            );
        }
    }
    o += "clusters with the most live copies:\n";
    for cl in &r.clusters {
        let noun = if cl.copies == 1 { "copy  " } else { "copies" };
        o += &format!("  {:>3} {noun}  {}  {}\n", cl.copies, cl.cluster, cl.text);
    }
    o += &format!("  note: {}\n", r.cluster_note);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_by_power_of_two() {
        let h = histogram([1, 2, 3, 4, 7, 8, 300], 256);
        assert_eq!(
            h.bins,
            vec![(1, 1, 1), (2, 3, 2), (4, 7, 2), (8, 15, 1), (256, 511, 1)]
        );
        assert_eq!((h.count, h.entries, h.max, h.over_cap), (7, 325, 300, 1));
        assert!((h.mean - 325.0 / 7.0).abs() < 1e-9);
        let empty = histogram([], 4);
        assert_eq!((empty.count, empty.mean, empty.bins.len()), (0, 0.0, 0));
    }

    #[test]
    fn bigram_text_unpacks_both_chars() {
        let c: Vec<char> = "地铁".chars().collect();
        let mut g = Vec::new();
        crate::index::grams::distinct_bigrams(&c, &mut g);
        assert_eq!(gram_text(g[0]), "地铁");
    }
}
