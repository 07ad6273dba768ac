//! Completion latencies and their percentiles, over an HdrHistogram.
//!
//! Values are nanoseconds on the monotonic clock. The histogram keeps 3 significant figures
//! (a percentile is within 0.1% of the exact nearest-rank value) and grows its range as values
//! arrive, so its size follows the largest latency seen, not a bound fixed in advance. The
//! count, sum and maximum are kept exactly beside it: the histogram's own maximum and mean are
//! rounded to its resolution.

use hdrhistogram::Histogram;
use std::fmt;

/// Significant figures kept: a reported percentile is within 1 part in 1,000 of the exact one.
const SIGFIGS: u8 = 3;

/// Latencies of one kind of operation, recorded one by one and merged with [`add`](Self::add).
#[derive(Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    sum_ns: u64,
    /// The largest latency recorded, exact (0 when none was).
    pub max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            hist: Histogram::new(SIGFIGS).expect("3 significant figures is within hdrhistogram's 0..=5"),
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency in nanoseconds.
    pub fn record(&mut self, ns: u64) {
        // The histogram resizes itself to hold `ns`; that fails only if its counts array would
        // not fit in a usize, which no u64 value reaches on a 64-bit host. Should it ever fail,
        // the value is clamped to the largest one the histogram holds rather than lost.
        if self.hist.record(ns).is_err() {
            self.hist.saturating_record(ns);
        }
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The nearest-rank `p`-th percentile (0 < p <= 100) in ns, to 3 significant figures and
    /// never above the exact maximum; 0 when nothing was recorded.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        self.hist.value_at_percentile(p).min(self.max_ns)
    }

    /// The exact mean in ns (0 when nothing was recorded).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count()).unwrap_or(0)
    }

    /// Adds another histogram's latencies to this one (several rings' latencies as one).
    pub fn add(&mut self, other: &LatencyHistogram) {
        // Both histograms resize themselves, so adding only fails where recording would.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist.saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// p50, p99 and max with the count, or `None` when nothing was recorded.
    pub fn summary(&self) -> Option<LatencySummary> {
        (!self.is_empty()).then(|| LatencySummary {
            p50_ns: self.percentile_ns(50.0),
            p99_ns: self.percentile_ns(99.0),
            max_ns: self.max_ns,
            count: self.count(),
        })
    }
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("count", &self.count())
            .field("p50_ns", &self.percentile_ns(50.0))
            .field("p99_ns", &self.percentile_ns(99.0))
            .field("max_ns", &self.max_ns)
            .field("mean_ns", &self.mean_ns())
            .finish()
    }
}

/// The figures a report keeps of one set of latencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySummary {
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// Exact.
    pub max_ns: u64,
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact nearest-rank percentile of sorted values: the smallest value with at least
    /// `p`% of the values at or below it.
    fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank - 1]
    }

    fn within_a_thousandth(got: u64, exact: u64) -> bool {
        got.abs_diff(exact) as f64 <= exact as f64 * 1e-3
    }

    /// 1,000 writes with a p99 of 600 us: 989 spread over 100..600 us, 10 at 600..645 us and
    /// one at 2 ms. The power-of-two buckets this replaced put all of 524,288..1,048,575 ns in
    /// one bucket and answered its upper bound, 1,048,576 ns, for the p99.
    fn samples() -> Vec<u64> {
        let mut v: Vec<u64> = (0..989u64).map(|i| 100_000 + i * 500_000 / 989).collect();
        v.extend((0..10u64).map(|i| 600_000 + i * 5_000));
        v.push(2_000_000);
        v
    }

    #[test]
    fn percentiles_are_within_a_thousandth_of_nearest_rank() {
        let mut v = samples();
        let mut h = LatencyHistogram::new();
        for &ns in &v {
            h.record(ns);
        }
        v.sort_unstable();
        for p in [1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let (got, exact) = (h.percentile_ns(p), nearest_rank(&v, p));
            assert!(within_a_thousandth(got, exact), "p{p}: {got} ns against exact {exact} ns");
        }
        let p99 = h.percentile_ns(99.0);
        assert_eq!(nearest_rank(&v, 99.0), 600_000);
        assert!((600_000..=600_600).contains(&p99), "p99 {p99} ns: the old buckets said 1,048,576");
        assert_eq!((h.count(), h.max_ns), (1000, 2_000_000));
        assert_eq!(h.mean_ns(), v.iter().sum::<u64>() / 1000);
    }

    #[test]
    fn added_histograms_equal_one_that_saw_every_value() {
        let v = samples();
        let (mut all, mut a, mut b) = (LatencyHistogram::new(), LatencyHistogram::new(), LatencyHistogram::new());
        for (i, &ns) in v.iter().enumerate() {
            all.record(ns);
            if i % 3 == 0 { &mut a } else { &mut b }.record(ns);
        }
        // A third histogram with a much larger range: adding it must grow the sum's range.
        let mut slow = LatencyHistogram::new();
        slow.record(3_600_000_000_000);
        all.record(3_600_000_000_000);
        a.add(&b);
        a.add(&slow);
        assert_eq!((a.count(), a.max_ns, a.mean_ns()), (all.count(), all.max_ns, all.mean_ns()));
        for p in [50.0, 99.0, 99.99, 100.0] {
            assert_eq!(a.percentile_ns(p), all.percentile_ns(p), "p{p}");
        }
        assert_eq!(a.percentile_ns(100.0), 3_600_000_000_000, "capped at the exact max");
    }

    #[test]
    fn summary_is_none_when_empty_and_ordered_otherwise() {
        let mut h = LatencyHistogram::new();
        assert_eq!((h.summary(), h.percentile_ns(99.0), h.mean_ns()), (None, 0, 0));
        h.record(0);
        h.record(7);
        h.record(1_000_003);
        let s = h.summary().unwrap();
        assert_eq!((s.count, s.max_ns), (3, 1_000_003));
        assert!(s.p50_ns <= s.p99_ns && s.p99_ns <= s.max_ns, "{s:?}");
        assert_eq!(s.p50_ns, 7);
        assert_eq!(format!("{h:?}"), "LatencyHistogram { count: 3, p50_ns: 7, p99_ns: 1000003, max_ns: 1000003, mean_ns: 333336 }");
    }
}
