//! The judgement of a port the fault did not hit: its figures in the fault window against its
//! baseline before the fault, each against the scenario's budget. A breach is a
//! `port_disturbance` finding whose detail names the port, the metric, the figure and the
//! budget.

use crate::events::{Event, EventKind};
use crate::port::PortId;
use crate::runner::emit::Emitter;
use crate::scenario::{Budget, PortRole, RunPlan};
use crate::verify::{Finding, FindingClass, Shown};
use crate::writer::{Phase, WindowFigures, Windows};
use std::time::{Duration, Instant};

/// One port's figures around one fault, as judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// Fault window over baseline; `None` when the baseline moved nothing.
    pub throughput_ratio: Option<f64>,
    pub p99_ratio: Option<f64>,
    /// What breached the budget, one line each (empty: undisturbed).
    pub breaches: Vec<String>,
    /// What breached the budget only by less than the harness itself was kept from running
    /// within a stretch that long: the machine may explain it, so it is noted, not found.
    pub excused: Vec<String>,
}

/// How long the harness itself was kept from running in a fault window (here, or on the host
/// of the agent that runs the port).
pub struct Starved<'a> {
    /// The most, summed over its late wake-ups, within any stretch of the span given.
    pub within: &'a dyn Fn(Duration) -> Duration,
    /// Its longest single late wake-up.
    pub longest: Duration,
}

/// Judges port `name` (not hit by the fault) in `cycle`. A write's latency is charged to the
/// drive less what the harness was kept from running within a stretch that long (a write
/// reaped late, or queued behind a thread that could not run, looks slower than the drive
/// was), the throughput over the window's time less what it was kept from running in it, and
/// a stall less the longest the harness was kept from running at once (a stall is lengthened
/// only by a late reap of the completion that ends it; a drive that is frozen has nothing to
/// reap meanwhile).
pub fn judge(name: &str, base: &WindowFigures, during: &WindowFigures, b: &Budget, starved: &Starved<'_>) -> Judged {
    let mut j = Judged::default();
    // A figure over its limit is a breach when it stays over once the harness's own lateness
    // `late` is taken off; else it is excused.
    let charge = |j: &mut Judged, line: String, us: f64, limit_us: f64, late: Duration| {
        if us - late.as_secs_f64() * 1e6 > limit_us {
            j.breaches.push(line);
        } else {
            j.excused
                .push(format!("{line}, but the harness itself was kept from running for {:.1} ms within it", late.as_secs_f64() * 1e3));
        }
    };
    if during.io_errors > b.io_errors {
        j.breaches.push(format!("{} write errors in the fault window (budget {})", during.io_errors, b.io_errors));
    }
    let stall_ms = during.max_gap_us as f64 / 1000.0;
    if stall_ms > b.max_stall_ms as f64 {
        charge(
            &mut j,
            format!("no write completed for {stall_ms:.1} ms in the fault window (budget {} ms)", b.max_stall_ms),
            during.max_gap_us as f64,
            b.max_stall_ms as f64 * 1000.0,
            starved.longest,
        );
    }
    if let (Some(lb), Some(ld)) = (base.latency, during.latency) {
        if lb.p99_us > 0.0 {
            let r = ld.p99_us / lb.p99_us;
            j.p99_ratio = Some(r);
            if r > b.max_p99_ratio {
                charge(
                    &mut j,
                    format!(
                        "p99 write latency {:.0} µs in the fault window, {r:.2}x the baseline's {:.0} µs (budget at most {}x)",
                        ld.p99_us, lb.p99_us, b.max_p99_ratio
                    ),
                    ld.p99_us,
                    lb.p99_us * b.max_p99_ratio,
                    (starved.within)(Duration::from_secs_f64(ld.p99_us / 1e6)),
                );
            }
        }
        if let Some(max_ms) = b.max_latency_ms {
            if ld.max_us / 1000.0 > max_ms as f64 {
                charge(
                    &mut j,
                    format!("a write took {:.1} ms in the fault window (budget {max_ms} ms)", ld.max_us / 1000.0),
                    ld.max_us,
                    max_ms as f64 * 1000.0,
                    (starved.within)(Duration::from_secs_f64(ld.max_us / 1e6)),
                );
            }
        }
    }
    if base.throughput_bps > 0.0 {
        let r = during.throughput_bps / base.throughput_bps;
        j.throughput_ratio = Some(r);
        if r < b.min_throughput_ratio {
            let line = format!(
                "throughput {:.1} MB/s in the fault window, {r:.2}x the baseline's {:.1} MB/s (budget at least {}x)",
                during.throughput_bps / 1e6,
                base.throughput_bps / 1e6,
                b.min_throughput_ratio
            );
            // The window's time less what the harness was kept from running in it.
            let window = Duration::from_micros(during.duration_us);
            let late = (starved.within)(window).min(window);
            let left = (window - late).as_secs_f64();
            let charged = if left > 0.0 { during.bytes as f64 / left / base.throughput_bps } else { f64::INFINITY };
            if charged < b.min_throughput_ratio {
                j.breaches.push(line);
            } else {
                j.excused
                    .push(format!("{line}, but the harness itself was kept from running for {:.1} ms of it", late.as_secs_f64() * 1e3));
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
        expected: Shown::Prior {},
        found: Shown::Prior {},
        cycle,
        detail: format!("port {port}, while port {faulted} was faulted: {breach}"),
    }
}

/// Judges the ports the fault did not hit against their baseline, unless the harness
/// itself was kept from running long enough to explain a breach (an overloaded machine):
/// then the breaches are noted, not found. Emits each port's window.
#[expect(clippy::too_many_arguments, reason = "one cycle's windows and record, lent once")]
pub(crate) fn judge_windows(
    em: &mut Emitter<'_>,
    plan: &RunPlan,
    cycle: u32,
    hit: usize,
    every: bool,
    windows: &Windows,
    t_end: Instant,
    findings: &mut Vec<Finding>,
) {
    let Some(dual) = &plan.dual else { return };
    let spec = &dual.spec;
    let faulted_name = if every { "all".to_string() } else { plan.ports[hit].name.clone() };
    let here = windows.lateness(Phase::Fault).max(windows.lateness(Phase::Baseline));
    let void_past = Duration::from_millis((spec.budget.max_stall_ms / 5).max(25));
    for (i, p) in plan.ports.iter().enumerate() {
        let is_hit = i == hit || every;
        // This host's lateness, or that of the agent that runs the port on its own host.
        let starved = here.max(windows.port_lateness(i, Phase::Fault)).max(windows.port_lateness(i, Phase::Baseline));
        let void = starved > void_past;
        let base = windows.figures(i, Phase::Baseline, t_end);
        let during = windows.figures(i, Phase::Fault, t_end);
        let mut judged = Judged::default();
        if let (false, PortRole::Writer, Some(b), Some(d)) = (is_hit, p.role, &base, &during) {
            let within = |span| windows.starved_within(Phase::Fault, span, Some(i));
            let longest = windows.lateness(Phase::Fault).max(windows.port_lateness(i, Phase::Fault));
            judged = judge(&p.name, b, d, &spec.budget, &Starved { within: &within, longest });
            let mut note = |message: String| {
                let t_ns = em.now();
                em.emit(Event::new(t_ns, EventKind::Note { message }).with_cycle(Some(cycle)));
            };
            if void && !judged.breaches.is_empty() {
                note(format!(
                    "port {} not judged in cycle {cycle}: the harness itself was kept from running for {:.1} ms (the machine is overloaded), so these say nothing about the drive: {}",
                    p.name,
                    starved.as_secs_f64() * 1e3,
                    judged.breaches.join("; ")
                ));
                judged.breaches.clear();
            }
            if !judged.excused.is_empty() {
                note(format!(
                    "port {} in cycle {cycle}: not found, as the machine (the harness kept from running) may explain it: {}",
                    p.name,
                    judged.excused.join("; ")
                ));
            }
            for breach in &judged.breaches {
                findings.push(finding(cycle, &p.name, &faulted_name, breach));
            }
        }
        let t_ns = em.now();
        let series = windows.series(i);
        let from = windows.started(Phase::Baseline).map_or(0, |d| (d.as_nanos() / crate::writer::windows::BUCKET.as_nanos()) as usize);
        // To the last completion: the drain after the window shows a stalled port coming back.
        let upto = series.len();
        let kept = series.get(from.min(upto)..upto).unwrap_or_default();
        let t_of = |ph| windows.started(ph).map(|d| em.ns(windows.epoch() + d));
        let (baseline_t_ns, fault_t_ns, window_end_t_ns) = (t_of(Phase::Baseline), t_of(Phase::Fault), t_of(Phase::After));
        let window = EventKind::PortWindow {
            name: p.name.clone(),
            faulted: is_hit,
            baseline_t_ns,
            fault_t_ns,
            window_end_t_ns,
            baseline: base,
            fault: during,
            throughput_ratio: judged.throughput_ratio,
            p99_ratio: judged.p99_ratio,
            disturbed: !judged.breaches.is_empty(),
            harness_late_us: Some(u64::try_from(starved.as_micros()).unwrap_or(u64::MAX)),
            bucket_ms: crate::writer::windows::BUCKET.as_millis() as u32,
            series_bytes: kept.iter().map(|b| b.bytes).collect(),
            series_max_latency_us: kept.iter().map(|b| b.max_latency_us).collect(),
        };
        em.emit(Event::in_cycle(t_ns, cycle, window).on_port(PortId(i as u8)));
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
        let none = &Starved { within: &|_| Duration::ZERO, longest: Duration::ZERO };
        let base = fig(100e6, 5, 200.0, 0);
        assert!(judge("B", &base, &fig(98e6, 6, 210.0, 0), &b, none).breaches.is_empty());
        let stall = judge("B", &base, &fig(98e6, 600, 210.0, 0), &b, none);
        assert_eq!(stall.breaches.len(), 1);
        assert!(stall.breaches[0].contains("600.0 ms") && stall.breaches[0].contains("budget 500 ms"), "{stall:?}");
        let slow = judge("B", &base, &fig(40e6, 6, 210.0, 0), &b, none);
        assert!(slow.breaches[0].contains("0.40x") && slow.breaches[0].contains("at least 0.5x"), "{slow:?}");
        let lat = judge("B", &base, &fig(98e6, 6, 1000.0, 0), &b, none);
        assert!(lat.breaches[0].contains("5.00x"), "{lat:?}");
        let err = judge("B", &base, &fig(98e6, 6, 210.0, 3), &b, none);
        assert!(err.breaches[0].contains("3 write errors"), "{err:?}");
        let f = finding(4, "B", "A", &err.breaches[0]);
        assert_eq!(f.class.name(), "port_disturbance");
        assert!(f.detail.starts_with("port B, while port A was faulted: 3 write errors"), "{}", f.detail);
    }

    /// A latency or a stall over budget by less than the harness was kept from running within
    /// a stretch that long is excused (noted, not found); by more, it is found.
    #[test]
    fn a_breach_the_harness_own_lateness_explains_is_excused_and_one_it_does_not_is_found() {
        let b = Budget::default();
        let base = fig(100e6, 5, 2000.0, 0);
        // p99 8700 µs against a limit of 8000 µs: 1 ms late within 8.7 ms excuses it.
        let late_1ms = &Starved { within: &|_| Duration::from_millis(1), longest: Duration::from_millis(1) };
        let j = judge("B", &base, &fig(98e6, 6, 8700.0, 0), &b, late_1ms);
        assert!(j.breaches.is_empty(), "{j:?}");
        assert!(j.excused[0].contains("4.35x") && j.excused[0].contains("kept from running for 1.0 ms"), "{j:?}");
        // 9100 µs is over by 1.1 ms: found.
        let j = judge("B", &base, &fig(98e6, 6, 9100.0, 0), &b, late_1ms);
        assert!(j.breaches[0].contains("4.55x") && j.excused.is_empty(), "{j:?}");
        // The span asked is the figure's own; a stall is charged less the longest single
        // lateness (150 ms within its span, 60 ms at once: found; 120 ms at once: excused).
        let asked = std::cell::Cell::new(Duration::ZERO);
        let within = |span| {
            asked.set(span);
            Duration::from_millis(150)
        };
        let j = judge("B", &base, &fig(98e6, 6, 9000.0, 0), &b, &Starved { within: &within, longest: Duration::from_millis(60) });
        assert_eq!(asked.get(), Duration::from_millis(9), "the p99's own span");
        assert!(j.breaches.is_empty() && j.excused[0].contains("4.50x"), "{j:?}");
        let j = judge("B", &base, &fig(98e6, 600, 2000.0, 0), &b, &Starved { within: &within, longest: Duration::from_millis(60) });
        assert!(j.breaches[0].contains("600.0 ms") && j.excused.is_empty(), "{j:?}");
        let j = judge("B", &base, &fig(98e6, 600, 2000.0, 0), &b, &Starved { within: &within, longest: Duration::from_millis(120) });
        assert!(j.breaches.is_empty() && j.excused[0].contains("600.0 ms"), "{j:?}");
        // Write errors are never excused.
        let j = judge(
            "B",
            &base,
            &fig(98e6, 6, 2000.0, 2),
            &b,
            &Starved { within: &|_| Duration::from_secs(1), longest: Duration::from_secs(1) },
        );
        assert_eq!((j.breaches.len(), j.excused.len()), (1, 0), "{j:?}");
        // Throughput over the window's time less the lateness in it: 40 MB/s over 500 ms
        // with 250 ms late is 80 MB/s of 100 (excused); with 50 ms late, 44 (found).
        let slow = WindowFigures { bytes: 20_000_000, ..fig(40e6, 6, 2000.0, 0) };
        let j = judge("B", &base, &slow, &b, &Starved { within: &|_| Duration::from_millis(250), longest: Duration::ZERO });
        assert!(j.breaches.is_empty() && j.excused[0].contains("0.40x") && j.excused[0].contains("250.0 ms of it"), "{j:?}");
        let j = judge("B", &base, &slow, &b, &Starved { within: &|_| Duration::from_millis(50), longest: Duration::ZERO });
        assert_eq!((j.breaches.len(), j.excused.len()), (1, 0), "{j:?}");
    }
}
