//! The cycle a dual-port report charts: every port's series of one cycle, so that A, B and
//! A+B are drawn over the same fault. Kept per run: the first cycle in which any port was
//! disturbed, else the first cycle with a `port_window` at all. Bounded: at most
//! [`MAX_PORTS`] ports of [`MAX_SERIES_BUCKETS`] buckets each, in two slots (the chart kept
//! and the cycle being gathered while no disturbed cycle has been seen).
//!
//! The ports of one cycle share the runner's clock and bucket width
//! (`writer::windows::BUCKET`), and each port's series starts at the bucket that holds its
//! baseline's start; a port's series is placed by its own `baseline_t_ns`, so the fault
//! window is exact to within one bucket.

/// Ports charted (a dual-port drive has two; more are ignored beyond this).
pub const MAX_PORTS: usize = 8;
/// Buckets kept of each port's series (the runner keeps at most 1000).
pub const MAX_SERIES_BUCKETS: usize = 4000;

/// One port's series in the charted cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortSeries {
    pub name: String,
    /// The fault hit this port.
    pub faulted: bool,
    /// This port breached a budget in this cycle.
    pub disturbed: bool,
    /// Where its first bucket starts, ms after the chart's origin (the first port's baseline).
    pub start_ms: f64,
    /// Bytes completed, and the longest write latency (µs), per bucket.
    pub bytes: Vec<u64>,
    pub max_latency_us: Vec<u32>,
}

/// Every port's series of one cycle, around its fault.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleChart {
    pub cycle: u32,
    /// Some port was disturbed in this cycle.
    pub disturbed: bool,
    pub bucket_ms: u32,
    /// The chart's origin on the run clock (ns): the first port's baseline start.
    origin_t_ns: Option<u64>,
    /// Fault start and window end, ms after the origin.
    pub fault_ms: Option<f64>,
    pub window_end_ms: Option<f64>,
    /// In the order the events came (the runner emits them in port order).
    pub ports: Vec<PortSeries>,
}

/// One `port_window` event's part in the chart.
pub struct WindowSeries<'a> {
    pub cycle: u32,
    pub name: &'a str,
    pub faulted: bool,
    pub disturbed: bool,
    pub baseline_t_ns: Option<u64>,
    pub fault_t_ns: Option<u64>,
    pub window_end_t_ns: Option<u64>,
    pub bucket_ms: u32,
    pub bytes: &'a [u64],
    pub max_latency_us: &'a [u32],
}

impl CycleChart {
    fn new(w: &WindowSeries) -> CycleChart {
        let ms = |t: Option<u64>| Some(t?.saturating_sub(w.baseline_t_ns?) as f64 / 1e6);
        CycleChart {
            cycle: w.cycle,
            disturbed: false,
            bucket_ms: w.bucket_ms,
            origin_t_ns: w.baseline_t_ns,
            fault_ms: ms(w.fault_t_ns),
            window_end_ms: ms(w.window_end_t_ns),
            ports: Vec::new(),
        }
    }

    fn add(&mut self, w: &WindowSeries) {
        // One width per chart: the ports of a cycle share the runner's bucket.
        if w.bucket_ms != self.bucket_ms {
            return;
        }
        let start_ms = match (w.baseline_t_ns, self.origin_t_ns) {
            (Some(b), Some(o)) => (b as f64 - o as f64) / 1e6,
            _ => 0.0,
        };
        let s = PortSeries {
            name: w.name.to_string(),
            faulted: w.faulted,
            disturbed: w.disturbed,
            start_ms,
            bytes: w.bytes.iter().copied().take(MAX_SERIES_BUCKETS).collect(),
            max_latency_us: w.max_latency_us.iter().copied().take(MAX_SERIES_BUCKETS).collect(),
        };
        self.disturbed |= w.disturbed;
        if let Some(p) = self.ports.iter_mut().find(|p| p.name == w.name) {
            *p = s;
        } else if self.ports.len() < MAX_PORTS {
            self.ports.push(s);
        }
    }
}

/// The chart kept, and the cycle being gathered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortCharts {
    kept: Option<CycleChart>,
    pending: Option<CycleChart>,
}

impl PortCharts {
    /// The cycle to chart: the first with a disturbed port, else the first.
    pub fn chart(&self) -> Option<&CycleChart> {
        self.kept.as_ref()
    }

    pub fn push(&mut self, w: &WindowSeries) {
        match &mut self.kept {
            None => self.kept.insert(CycleChart::new(w)).add(w),
            Some(k) if k.cycle == w.cycle => k.add(w),
            // A disturbed cycle is kept; later cycles are not gathered.
            Some(k) if k.disturbed => {}
            Some(_) => {
                if self.pending.as_ref().is_none_or(|p| p.cycle != w.cycle) {
                    self.pending = Some(CycleChart::new(w));
                }
                let p = self.pending.as_mut().expect("set just above");
                p.add(w);
                if p.disturbed {
                    // Its ports already gathered come along; the rest follow into `kept`.
                    self.kept = self.pending.take();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w<'a>(cycle: u32, name: &'a str, faulted: bool, disturbed: bool, bytes: &'a [u64]) -> WindowSeries<'a> {
        let t = u64::from(cycle) * 10_000_000_000;
        WindowSeries {
            cycle,
            name,
            faulted,
            disturbed,
            baseline_t_ns: Some(t + 100_000_000),
            fault_t_ns: Some(t + 500_000_000),
            window_end_t_ns: Some(t + 1_100_000_000),
            bucket_ms: 25,
            bytes,
            max_latency_us: &[7],
        }
    }

    #[test]
    fn the_first_cycle_with_a_disturbed_port_is_charted_with_every_port_of_it() {
        let mut c = PortCharts::default();
        assert!(c.chart().is_none());
        c.push(&w(1, "A", true, false, &[1]));
        c.push(&w(1, "B", false, false, &[2]));
        let k = c.chart().unwrap();
        assert_eq!((k.cycle, k.disturbed, k.ports.len(), k.fault_ms, k.window_end_ms), (1, false, 2, Some(400.0), Some(1000.0)));
        // Cycle 2: A is judged and disturbed, after B's (faulted) window came first.
        c.push(&w(2, "B", true, false, &[3]));
        assert_eq!(c.chart().unwrap().cycle, 1, "not disturbed yet");
        c.push(&w(2, "A", false, true, &[4, 0]));
        let k = c.chart().unwrap();
        assert_eq!((k.cycle, k.disturbed), (2, true));
        assert_eq!(
            k.ports.iter().map(|p| (p.name.as_str(), p.faulted, p.bytes.clone())).collect::<Vec<_>>(),
            [("B", true, vec![3]), ("A", false, vec![4, 0])]
        );
        // Later disturbed cycles do not replace it.
        c.push(&w(3, "A", true, false, &[5]));
        c.push(&w(3, "B", false, true, &[6]));
        assert_eq!(c.chart().unwrap().cycle, 2);
        assert!(c.pending.is_none());
    }

    #[test]
    fn the_chart_stays_bounded() {
        let long = vec![1u64; 2 * MAX_SERIES_BUCKETS];
        let names: Vec<String> = (0..2 * MAX_PORTS).map(|i| format!("P{i}")).collect();
        let mut c = PortCharts::default();
        for cycle in 1..=50 {
            for n in &names {
                c.push(&w(cycle, n, false, false, &long));
            }
        }
        let k = c.chart().unwrap();
        assert_eq!((k.cycle, k.ports.len()), (1, MAX_PORTS));
        assert!(k.ports.iter().all(|p| p.bytes.len() == MAX_SERIES_BUCKETS));
        let p = c.pending.as_ref().unwrap();
        assert_eq!((p.cycle, p.ports.len()), (50, MAX_PORTS));
    }
}
