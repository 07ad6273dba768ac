//! The judgement of a port the fault did not hit: its figures in the fault window against its
//! baseline before the fault, each against the scenario's budget. A breach is a
//! `port_disturbance` finding whose detail names the port, the metric, the figure and the
//! budget.

use crate::scenario::Budget;
use crate::verify::{Finding, FindingClass, Shown};
use crate::writer::WindowFigures;

/// One port's figures around one fault, as judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// Fault window over baseline; `None` when the baseline moved nothing.
    pub throughput_ratio: Option<f64>,
    pub p99_ratio: Option<f64>,
    /// What breached the budget, one line each (empty: undisturbed).
    pub breaches: Vec<String>,
}

/// Judges port `name` (not hit by the fault) in `cycle`.
pub fn judge(name: &str, base: &WindowFigures, during: &WindowFigures, b: &Budget) -> Judged {
    let mut j = Judged::default();
    if during.io_errors > b.io_errors {
        j.breaches.push(format!("{} write errors in the fault window (budget {})", during.io_errors, b.io_errors));
    }
    let stall_ms = during.max_gap_us as f64 / 1000.0;
    if stall_ms > b.max_stall_ms as f64 {
        j.breaches.push(format!("no write completed for {stall_ms:.1} ms in the fault window (budget {} ms)", b.max_stall_ms));
    }
    if base.throughput_bps > 0.0 {
        let r = during.throughput_bps / base.throughput_bps;
        j.throughput_ratio = Some(r);
        if r < b.min_throughput_ratio {
            j.breaches.push(format!(
                "throughput {:.1} MB/s in the fault window, {r:.2}x the baseline's {:.1} MB/s (budget at least {}x)",
                during.throughput_bps / 1e6,
                base.throughput_bps / 1e6,
                b.min_throughput_ratio
            ));
        }
    }
    if let (Some(lb), Some(ld)) = (base.latency, during.latency) {
        if lb.p99_us > 0.0 {
            let r = ld.p99_us / lb.p99_us;
            j.p99_ratio = Some(r);
            if r > b.max_p99_ratio {
                j.breaches.push(format!(
                    "p99 write latency {:.0} µs in the fault window, {r:.2}x the baseline's {:.0} µs (budget at most {}x)",
                    ld.p99_us, lb.p99_us, b.max_p99_ratio
                ));
            }
        }
        if let Some(max_ms) = b.max_latency_ms {
            if ld.max_us / 1000.0 > max_ms as f64 {
                j.breaches.push(format!("a write took {:.1} ms in the fault window (budget {max_ms} ms)", ld.max_us / 1000.0));
            }
        }
    }
    let _ = name;
    j
}

/// The finding for one breach.
pub fn finding(cycle: u32, port: &str, faulted: &str, breach: &str) -> Finding {
    Finding {
        class: FindingClass::PortDisturbance,
        offset: 0,
        length: 0,
        expected: Shown::Prior,
        found: Shown::Prior,
        cycle,
        detail: format!("port {port}, while port {faulted} was faulted: {breach}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::windows::Latency;

    fn fig(bps: f64, gap_ms: u64, p99: f64, errors: u64) -> WindowFigures {
        WindowFigures {
            duration_us: 500_000,
            completions: 1000,
            bytes: 1,
            io_errors: errors,
            throughput_bps: bps,
            max_gap_us: gap_ms * 1000,
            latency: Some(Latency { p50_us: p99 / 2.0, p99_us: p99, p999_us: p99, max_us: p99 }),
        }
    }

    #[test]
    fn each_budget_is_breached_on_its_own_and_named() {
        let b = Budget::default();
        let base = fig(100e6, 5, 200.0, 0);
        assert!(judge("B", &base, &fig(98e6, 6, 210.0, 0), &b).breaches.is_empty());
        let stall = judge("B", &base, &fig(98e6, 600, 210.0, 0), &b);
        assert_eq!(stall.breaches.len(), 1);
        assert!(stall.breaches[0].contains("600.0 ms") && stall.breaches[0].contains("budget 500 ms"), "{stall:?}");
        let slow = judge("B", &base, &fig(40e6, 6, 210.0, 0), &b);
        assert!(slow.breaches[0].contains("0.40x") && slow.breaches[0].contains("at least 0.5x"), "{slow:?}");
        let lat = judge("B", &base, &fig(98e6, 6, 1000.0, 0), &b);
        assert!(lat.breaches[0].contains("5.00x"), "{lat:?}");
        let err = judge("B", &base, &fig(98e6, 6, 210.0, 3), &b);
        assert!(err.breaches[0].contains("3 write errors"), "{err:?}");
        let f = finding(4, "B", "A", &err.breaches[0]);
        assert_eq!(f.class.name(), "port_disturbance");
        assert!(f.detail.starts_with("port B, while port A was faulted: 3 write errors"), "{}", f.detail);
    }
}
