//! Fixed-size summaries of per-cycle figures, so that a report's memory and size do not grow
//! with the number of cycles (a week-long soak is 100,000 of them):
//!
//! - [`Buckets`]: a series over cycles, downsampled to at most `2 × target` buckets of
//!   min, max and mean, merging neighbours pairwise as the run grows (so a spike in one
//!   cycle stays visible as a bucket's max);
//! - [`Thinned`]: at most `cap` points of a scatter, every `stride`-th kept, the stride
//!   doubling when full (an even thinning over the whole run);
//! - [`Dist`]: a distribution: exact count, min, max and mean, percentiles to 3 significant
//!   digits (hdrhistogram), and equal-width bins for a histogram chart.
//!
//! Each is a pure function of the values pushed, in order, so a report rebuilt from the
//! event log equals the one the run wrote.

use hdrhistogram::Histogram;

/// One bucket of a downsampled series: cycles `[x0, x1]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    pub x0: u64,
    pub x1: u64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub n: u64,
}

impl Bucket {
    pub fn mean(&self) -> f64 {
        self.sum / self.n as f64
    }

    fn merge(&mut self, o: &Bucket) {
        self.x0 = self.x0.min(o.x0);
        self.x1 = self.x1.max(o.x1);
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        self.sum += o.sum;
        self.n += o.n;
    }
}

/// A series over cycles in at most `2 × target` buckets, each `width` cycles wide
/// (cycle `x` falls in bucket `x / width`).
#[derive(Clone, Debug, PartialEq)]
pub struct Buckets {
    target: usize,
    width: u64,
    /// Ascending by `x0 / width`.
    buckets: Vec<Bucket>,
}

impl Buckets {
    pub fn new(target: usize) -> Self {
        Buckets { target: target.max(1), width: 1, buckets: Vec::new() }
    }

    pub fn push(&mut self, x: u64, y: f64) {
        if !y.is_finite() {
            return;
        }
        let b = Bucket { x0: x, x1: x, min: y, max: y, sum: y, n: 1 };
        let key = x / self.width;
        // Cycles arrive in order; a resumed run may repeat one, which binary search places.
        match self.buckets.binary_search_by_key(&key, |b| b.x0 / self.width) {
            Ok(i) => self.buckets[i].merge(&b),
            Err(i) => self.buckets.insert(i, b),
        }
        if self.buckets.len() > 2 * self.target {
            self.width *= 2;
            let mut merged: Vec<Bucket> = Vec::with_capacity(self.target + 1);
            for b in self.buckets.drain(..) {
                match merged.last_mut() {
                    Some(last) if last.x0 / self.width == b.x0 / self.width => last.merge(&b),
                    _ => merged.push(b),
                }
            }
            self.buckets = merged;
        }
    }

    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// Cycles per bucket (1 until the series outgrew `2 × target`).
    pub fn width(&self) -> u64 {
        self.width
    }
}

/// At most `cap` points of a scatter, evenly thinned.
#[derive(Clone, Debug, PartialEq)]
pub struct Thinned {
    cap: usize,
    stride: u64,
    seen: u64,
    points: Vec<(f64, f64)>,
}

impl Thinned {
    pub fn new(cap: usize) -> Self {
        Thinned { cap: cap.max(2), stride: 1, seen: 0, points: Vec::new() }
    }

    pub fn push(&mut self, p: (f64, f64)) {
        if self.seen.is_multiple_of(self.stride) {
            self.points.push(p);
            if self.points.len() > self.cap {
                // Kept points are those with index a multiple of `stride`; keeping every
                // other one leaves the multiples of twice the stride.
                let mut i = 0;
                self.points.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }

    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// Points offered, kept or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

/// A distribution of integer samples (nanoseconds, bytes, counts).
#[derive(Clone, Debug, PartialEq)]
pub struct Dist {
    hist: Histogram<u64>,
    n: u64,
    min: u64,
    max: u64,
    sum: u128,
}

impl Default for Dist {
    fn default() -> Self {
        Dist { hist: Histogram::new(3).expect("3 significant digits is a valid precision"), n: 0, min: u64::MAX, max: 0, sum: 0 }
    }
}

impl Dist {
    pub fn push(&mut self, v: u64) {
        // `record` grows the auto-resizing histogram; `saturating_record` would clamp to its
        // current top instead. It fails only beyond what any histogram can track.
        if self.hist.record(v).is_err() {
            self.hist.saturating_record(v);
        }
        self.n += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += u128::from(v);
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    /// (min, max), None when empty.
    pub fn range(&self) -> Option<(u64, u64)> {
        (self.n > 0).then_some((self.min, self.max))
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    /// The nearest-rank `p`th percentile: exact for values below 2048 and for values that
    /// are multiples of their bucket's width, else within 0.1% (the lowest value of the
    /// bucket the rank falls in), never outside `[min, max]`.
    pub fn percentile(&self, p: f64) -> Option<u64> {
        let (min, max) = self.range()?;
        let rank = ((p / 100.0 * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for v in self.hist.iter_recorded() {
            seen += v.count_since_last_iteration();
            if seen >= rank {
                return Some(self.hist.lowest_equivalent(v.value_iterated_to()).clamp(min, max));
            }
        }
        Some(max)
    }

    /// Adds every sample of `other` (pooling runs: percentiles do not average).
    pub fn merge(&mut self, other: &Dist) {
        if other.n == 0 {
            return;
        }
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist.saturating_record_n(v.value_iterated_to(), v.count_since_last_iteration());
            }
        }
        self.n += other.n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    /// The distribution of every value times `k` (microseconds to nanoseconds, say).
    pub fn scaled(&self, k: u64) -> Dist {
        let mut d = Dist::default();
        for v in self.hist.iter_recorded() {
            let x = self.hist.lowest_equivalent(v.value_iterated_to()).clamp(self.min, self.max);
            let (x, n) = (x.saturating_mul(k), v.count_since_last_iteration());
            if d.hist.record_n(x, n).is_err() {
                d.hist.saturating_record_n(x, n);
            }
        }
        Dist { hist: d.hist, n: self.n, min: self.min.saturating_mul(k), max: self.max.saturating_mul(k), sum: self.sum * u128::from(k) }
    }

    /// Counts in `bins` equal-width bins over `[lo, hi]` (each value counted at its bucket's
    /// lowest equivalent, so within 0.1% of where it was).
    pub fn bins(&self, lo: f64, hi: f64, bins: usize) -> Vec<u64> {
        let bins = bins.max(1);
        let mut counts = vec![0; bins];
        let width = (hi - lo) / bins as f64;
        for v in self.hist.iter_recorded() {
            let x = (self.hist.lowest_equivalent(v.value_iterated_to()) as f64).clamp(self.min as f64, self.max as f64);
            let i = if width > 0.0 { ((x - lo) / width).floor().max(0.0) as usize } else { 0 };
            counts[i.min(bins - 1)] += v.count_since_last_iteration();
        }
        counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_series_stays_within_twice_its_target_and_keeps_its_spikes() {
        let mut s = Buckets::new(100);
        for x in 1..=100_000u64 {
            s.push(x, if x == 54_321 { 1e6 } else { (x % 7) as f64 });
        }
        let b = s.buckets();
        assert!(b.len() <= 200 && b.len() > 100, "{} buckets", b.len());
        assert_eq!(b.iter().map(|b| b.n).sum::<u64>(), 100_000);
        assert_eq!((b[0].x0, b[b.len() - 1].x1), (1, 100_000));
        let spike = b.iter().find(|b| b.x0 <= 54_321 && 54_321 <= b.x1).unwrap();
        assert_eq!((spike.max, spike.min), (1e6, 0.0));
        assert!(b.windows(2).all(|w| w[0].x1 < w[1].x0), "buckets are disjoint and ordered");
        let mut small = Buckets::new(100);
        for x in 1..=5 {
            small.push(x, x as f64);
        }
        assert_eq!((small.width(), small.buckets().len(), small.buckets()[2].mean()), (1, 5, 3.0));
    }

    #[test]
    fn thinning_keeps_an_even_spread_of_at_most_cap_points() {
        let mut t = Thinned::new(64);
        for i in 0..10_000 {
            t.push((i as f64, 0.0));
        }
        let p = t.points();
        assert!(p.len() <= 64 && p.len() > 32, "{}", p.len());
        let stride = p[1].0 - p[0].0;
        assert!(p.windows(2).all(|w| w[1].0 - w[0].0 == stride), "evenly spaced: {p:?}");
        assert_eq!((p[0].0, t.seen()), (0.0, 10_000));
    }

    #[test]
    fn distributions_give_exact_extremes_and_close_percentiles() {
        let mut d = Dist::default();
        for v in [1500, 3000, 4500] {
            d.push(v);
        }
        assert_eq!(
            (d.percentile(50.0), d.percentile(99.0), d.range(), d.mean()),
            (Some(3000), Some(4500), Some((1500, 4500)), Some(3000.0))
        );
        assert_eq!(d.bins(1500.0, 4500.0, 3), [1, 1, 1]);
        assert_eq!(Dist::default().percentile(50.0), None);
    }

    proptest! {
        /// Percentiles are within 0.1% of the exact nearest-rank ones, and inside the range.
        #[test]
        fn percentiles_are_within_a_tenth_of_a_percent(mut v in proptest::collection::vec(0u64..10_000_000_000, 1..400), p in 1.0f64..100.0) {
            let mut d = Dist::default();
            for &x in &v {
                d.push(x);
            }
            v.sort_unstable();
            let exact = v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
            let got = d.percentile(p).unwrap();
            prop_assert!(got <= exact && exact - got <= exact / 1000, "p{} = {} but exactly {}", p, got, exact);
            prop_assert_eq!(d.bins(v[0] as f64, v[v.len() - 1] as f64, 20).iter().sum::<u64>(), v.len() as u64);
        }
    }
}
