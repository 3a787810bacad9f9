//! Measurements: a log-linear latency histogram (eighth-octave buckets: quantiles within ~9%;
//! `simdedup::hist`'s ladder jumps from 100 to 250 us, too coarse to read a 200 us p99 off), the
//! process RSS, and one record per checkpoint.

use serde::Serialize;

/// Nanosecond histogram with 8 buckets per power of two.
#[derive(Clone)]
pub struct Latency {
    counts: Vec<u64>,
    sum: u64,
    n: u64,
    /// Observations of at least `PAUSE_NS`, and their sum.
    pauses: u64,
    pause_sum: u64,
}

/// A post's time from which it counts as a pause (a generation sealed, or a growing one's
/// structures merged or grown, on the engine's thread).
pub const PAUSE_NS: u64 = 10_000_000;

const SUB: u32 = 3;

impl Latency {
    /// Empty.
    pub fn new() -> Latency {
        Latency {
            counts: vec![0; 64 << SUB],
            sum: 0,
            n: 0,
            pauses: 0,
            pause_sum: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < (1 << SUB) {
            return v as usize;
        }
        let e = 63 - v.leading_zeros();
        let m = (v >> (e - SUB)) & ((1 << SUB) - 1);
        (((e - SUB + 1) << SUB) + m as u32) as usize
    }

    fn upper(i: usize) -> u64 {
        if i < (1 << SUB) {
            return i as u64;
        }
        let e = (i >> SUB) as u32 + SUB - 1;
        let m = (i & ((1 << SUB) - 1)) as u64;
        ((1u64 << SUB) + m + 1) << (e - SUB)
    }

    /// Records one duration.
    #[inline]
    pub fn observe(&mut self, ns: u64) {
        self.counts[Self::index(ns)] += 1;
        self.sum += ns;
        self.n += 1;
        if ns >= PAUSE_NS {
            self.pauses += 1;
            self.pause_sum += ns;
        }
    }

    /// Removes the observations of `earlier` (a snapshot of this histogram).
    pub fn subtract(&mut self, earlier: &Latency) {
        for (a, b) in self.counts.iter_mut().zip(&earlier.counts) {
            *a -= b;
        }
        self.sum -= earlier.sum;
        self.n -= earlier.n;
        self.pauses -= earlier.pauses;
        self.pause_sum -= earlier.pause_sum;
    }

    /// Observations of at least `PAUSE_NS`, and their share of the sum.
    pub fn pauses(&self) -> (u64, f64) {
        (self.pauses, self.pause_sum as f64 / self.sum.max(1) as f64)
    }

    /// Sum in nanoseconds.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Upper bound of the bucket holding quantile `q`, in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let want = ((self.n as f64) * q).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= want {
                return Self::upper(i) as f64 / 1000.0;
            }
        }
        0.0
    }
}

/// Resident set size of this process in bytes (`VmRSS` in /proc/self/status), 0 if unknown.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU seconds this process used so far (user + system, from /proc/self/stat; 10 ms ticks).
pub fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// The 1-minute load average (other processes share the cores and stretch wall times).
pub fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// Peak resident set size (`VmHWM`) in bytes.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Classes of normalized text length (characters) of the per-length breakdown, by largest
/// member: shorter than the bigram path's 11, its short posts, and longer ones by octave.
const LENGTH_CLASSES: [(&str, usize); 6] = [
    ("<11", 10),
    ("11-19", 19),
    ("20-39", 39),
    ("40-79", 79),
    ("80-159", 159),
    ("160+", usize::MAX),
];

/// Posts, engine time and candidates by normalized text length, over an interval.
#[derive(Clone, Default)]
pub struct ByLength {
    posts: [u64; LENGTH_CLASSES.len()],
    ns: [u64; LENGTH_CLASSES.len()],
    candidates: [u64; LENGTH_CLASSES.len()],
}

impl ByLength {
    /// One post of `chars` normalized characters that took `ns` and verified `candidates`.
    pub fn observe(&mut self, chars: usize, ns: u64, candidates: u64) {
        let c = LENGTH_CLASSES
            .iter()
            .position(|&(_, max)| chars <= max)
            .unwrap_or(LENGTH_CLASSES.len() - 1);
        self.posts[c] += 1;
        self.ns[c] += ns;
        self.candidates[c] += candidates;
    }

    /// The rows of the report.
    pub fn rows(&self) -> Vec<LengthRow> {
        let posts = self.posts.iter().sum::<u64>().max(1) as f64;
        let ns = self.ns.iter().sum::<u64>().max(1) as f64;
        LENGTH_CLASSES
            .iter()
            .enumerate()
            .map(|(c, &(chars, _))| {
                let n = self.posts[c].max(1) as f64;
                LengthRow {
                    chars,
                    share_of_posts: self.posts[c] as f64 / posts,
                    share_of_time: self.ns[c] as f64 / ns,
                    us_per_post: self.ns[c] as f64 / n / 1e3,
                    verified_per_post: self.candidates[c] as f64 / n,
                }
            })
            .collect()
    }
}

/// One length class of a checkpoint.
#[derive(Clone, Debug, Serialize)]
pub struct LengthRow {
    /// The class, in normalized characters.
    pub chars: &'static str,
    /// Its share of the interval's posts.
    pub share_of_posts: f64,
    /// Its share of their analysis + decide time.
    pub share_of_time: f64,
    /// Mean analysis + decide time per post, us.
    pub us_per_post: f64,
    /// Candidates verified per post.
    pub verified_per_post: f64,
}

/// One checkpoint line of the report; rates and per-post figures cover the interval since the
/// previous checkpoint.
#[derive(Clone, Debug, Serialize)]
pub struct Checkpoint {
    /// Why the line was written: "checkpoint", "stop", "dev".
    pub at: String,
    /// Live index entries (representatives and refreshed copies).
    pub live_entries: usize,
    /// Posts decided so far (background and dev).
    pub posts: u64,
    /// Event time covered, hours.
    pub event_hours: f64,
    /// Posts in this interval.
    pub interval_posts: u64,
    /// Interval posts per wall second, generator included.
    pub wall_posts_per_sec: f64,
    /// Interval posts per CPU second of the whole process (generator included): robust when
    /// other processes share the core, unlike the wall-clock figures.
    pub cpu_posts_per_sec: f64,
    /// The machine's 1-minute load average at the checkpoint.
    pub load_avg: f64,
    /// Interval posts per second of analysis + decide time (the engine path alone).
    pub engine_posts_per_sec: f64,
    /// Median analysis + decide time per post, us (bucket upper bound).
    pub p50_us: f64,
    /// 99th percentile, us.
    pub p99_us: f64,
    /// 99.9th percentile, us.
    pub p999_us: f64,
    /// Posts that took at least `PAUSE_NS` (10 ms), and their share of the interval's engine
    /// time.
    pub pauses: u64,
    pub pause_share: f64,
    /// Candidates verified per post (distinct, after the order and id checks).
    pub verified_per_post: f64,
    /// Candidates that failed verification per post.
    pub verify_rejects_per_post: f64,
    /// Candidates past the gates, whose records were read and verified, per post.
    pub reads_per_post: f64,
    /// SimHash buckets looked up per post.
    pub bucket_lookups_per_post: f64,
    /// Entries held by the looked-up buckets per post (before the scan cap).
    pub bucket_entries_per_post: f64,
    /// Bucket scans that hit the cap, and bigram probes that hit the posting cap, per 1000 posts.
    pub capped_scans_per_1000: f64,
    /// Share of the interval's posts that were duplicates.
    pub duplicate_share: f64,
    /// Process RSS, bytes.
    pub rss_bytes: u64,
    /// RSS per live entry.
    pub rss_per_entry: f64,
    /// (RSS - RSS before the first post) per live entry: the index's share.
    pub rss_growth_per_entry: f64,
    /// The index's own estimate (`Index::approx_bytes`) per live entry.
    pub index_estimate_per_entry: f64,
    /// That estimate by structure, bytes per live entry.
    pub index_memory_per_entry: std::collections::BTreeMap<&'static str, f64>,
    /// The interval by normalized text length: where the time goes.
    pub by_length: Vec<LengthRow>,
}

impl Checkpoint {
    /// The human-readable line.
    pub fn line(&self) -> String {
        format!(
            "{:>10} live {:>11}  posts {:>11}  {:>6.1} h  {:>8.0} posts/s wall {:>8.0} cpu {:>8.0} engine (load {:.1})  \
             p50 {:>6.1} p99 {:>7.1} p99.9 {:>7.1} us  pauses {} ({:.1}%)  verified/post {:>6.2} rejects/post {:>6.2} read/post {:>6.2} \
             bucket entries/post {:>7.1}  dup {:>4.1}%  RSS {:>6.0} MB  {:>5.0} B/entry ({:>5.0} growth, {:>5.0} index est.: {})",
            self.at,
            self.live_entries,
            self.posts,
            self.event_hours,
            self.wall_posts_per_sec,
            self.cpu_posts_per_sec,
            self.engine_posts_per_sec,
            self.load_avg,
            self.p50_us,
            self.p99_us,
            self.p999_us,
            self.pauses,
            100.0 * self.pause_share,
            self.verified_per_post,
            self.verify_rejects_per_post,
            self.reads_per_post,
            self.bucket_entries_per_post,
            100.0 * self.duplicate_share,
            self.rss_bytes as f64 / 1e6,
            self.rss_per_entry,
            self.rss_growth_per_entry,
            self.index_estimate_per_entry,
            self.index_memory_per_entry
                .iter()
                .map(|(k, v)| format!("{k} {v:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
        ) + &format!(
            "\n{:>10} by length (chars: posts, time, us/post, verified/post): {}",
            "",
            self.by_length
                .iter()
                .map(|r| format!(
                    "{} {:.0}% {:.0}% {:.1} {:.1}",
                    r.chars,
                    100.0 * r.share_of_posts,
                    100.0 * r.share_of_time,
                    r.us_per_post,
                    r.verified_per_post
                ))
                .collect::<Vec<_>>()
                .join(" | ")
        )
    }
}
