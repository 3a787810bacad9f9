//! Fixed-bucket histograms as plain counts: no atomics, no locks, no clock. The pure core counts
//! into them (candidates per query, SimHash bucket sizes); `metrics` merges and `app::metrics` serves
//! them. Two scales keep observing cheap on the per-post path: powers of two for counts (one
//! `leading_zeros`) and a short fixed ladder of durations in nanoseconds.

/// Most buckets a histogram has, the overflow (`+Inf`) bucket included.
pub const MAX_BUCKETS: usize = 20;

/// Upper bounds (inclusive) of the `Nanos` scale: 1 µs to 10 s.
const NANOS_BOUNDS: [u64; 19] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
    2_500_000_000,
    10_000_000_000,
];

/// Upper bounds (inclusive) of the `Millis` scale: 1 ms to 60 s.
const MILLIS_BOUNDS: [u64; 19] = [
    1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 750, 1_000, 1_500, 2_000, 3_000, 5_000, 10_000,
    30_000, 60_000,
];

/// How a histogram's buckets are laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scale {
    /// Counts: buckets `<= 0, <= 1, <= 2, <= 4, ... <= 2^17`, then `+Inf`.
    #[default]
    Pow2,
    /// Durations in nanoseconds: 1 µs, 2.5 µs, 5 µs, 10 µs, ... 10 s, then `+Inf`.
    Nanos,
    /// Longer durations in milliseconds (end-to-end latency): 1 ms, 2 ms, 5 ms, ... 300 ms,
    /// 500 ms, 750 ms, 1 s, 1.5 s, ... 60 s, then `+Inf`.
    Millis,
}

impl Scale {
    /// Number of finite buckets.
    pub const fn finite(self) -> usize {
        match self {
            Scale::Pow2 => MAX_BUCKETS - 1,
            Scale::Nanos => NANOS_BOUNDS.len(),
            Scale::Millis => MILLIS_BOUNDS.len(),
        }
    }

    /// Upper bound of finite bucket `i`.
    pub fn bound(self, i: usize) -> u64 {
        match self {
            Scale::Pow2 if i == 0 => 0,
            Scale::Pow2 => 1 << (i - 1),
            Scale::Nanos => NANOS_BOUNDS[i],
            Scale::Millis => MILLIS_BOUNDS[i],
        }
    }

    fn index(self, v: u64) -> usize {
        let i = match self {
            Scale::Pow2 if v == 0 => 0,
            // ceil(log2 v) + 1: 1 -> 1, 2 -> 2, 3..=4 -> 3, 5..=8 -> 4.
            Scale::Pow2 => 1 + (64 - (v - 1).leading_zeros()) as usize,
            Scale::Nanos => NANOS_BOUNDS.partition_point(|b| *b < v),
            Scale::Millis => MILLIS_BOUNDS.partition_point(|b| *b < v),
        };
        i.min(self.finite())
    }
}

/// A histogram of non-negative integer observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hist {
    scale: Scale,
    /// Per bucket (not cumulative); index `scale.finite()` is the overflow bucket.
    counts: [u64; MAX_BUCKETS],
    sum: u64,
    count: u64,
}

impl Hist {
    /// An empty histogram on `scale`.
    pub const fn new(scale: Scale) -> Hist {
        Hist {
            scale,
            counts: [0; MAX_BUCKETS],
            sum: 0,
            count: 0,
        }
    }

    /// Counts one observation.
    #[inline]
    pub fn observe(&mut self, v: u64) {
        self.counts[self.scale.index(v)] += 1;
        self.sum = self.sum.saturating_add(v);
        self.count += 1;
    }

    /// Adds every observation of `other` (same scale).
    pub fn merge(&mut self, other: &Hist) {
        debug_assert_eq!(self.scale, other.scale);
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum = self.sum.saturating_add(other.sum);
        self.count += other.count;
    }

    /// The scale.
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the observations.
    pub fn sum(&self) -> u64 {
        self.sum
    }

    /// Observations per bucket (not cumulative), `le` ascending: `(Some(upper bound), n)` for
    /// each finite bucket, then `(None, n)` for the overflow (`+Inf`) bucket.
    pub fn buckets(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        let finite = self.scale.finite();
        (0..=finite).map(move |i| ((i < finite).then(|| self.scale.bound(i)), self.counts[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cumulative(h: &Hist) -> Vec<(Option<u64>, u64)> {
        let mut acc = 0;
        h.buckets()
            .map(|(b, n)| {
                acc += n;
                (b, acc)
            })
            .collect()
    }

    #[test]
    fn pow2_buckets_are_inclusive_upper_bounds() {
        let mut h = Hist::new(Scale::Pow2);
        for v in [0, 1, 2, 3, 4, 5, 8, 9, 1 << 40] {
            h.observe(v);
        }
        let c = cumulative(&h);
        assert_eq!(
            c[..6],
            [
                (Some(0), 1),
                (Some(1), 2),
                (Some(2), 3),
                (Some(4), 5),
                (Some(8), 7),
                (Some(16), 8)
            ]
        );
        assert_eq!(c.len(), MAX_BUCKETS);
        assert_eq!(c[c.len() - 2], (Some(1 << 17), 8));
        assert_eq!(c[c.len() - 1], (None, 9), "a huge value lands in +Inf");
        assert_eq!(h.count(), 9);
    }

    #[test]
    fn nanos_buckets_and_merge() {
        let mut a = Hist::new(Scale::Nanos);
        a.observe(1_000);
        a.observe(1_001);
        let mut b = Hist::new(Scale::Nanos);
        b.observe(20_000_000_000);
        a.merge(&b);
        let c = cumulative(&a);
        assert_eq!(c[..2], [(Some(1_000), 1), (Some(2_500), 2)]);
        assert_eq!(c[c.len() - 2], (Some(10_000_000_000), 2));
        assert_eq!(c[c.len() - 1], (None, 3));
        assert_eq!((a.count(), a.sum()), (3, 20_000_002_001));
    }
}
