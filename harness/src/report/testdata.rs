//! A three-cycle run's events, shared by the reports' tests.

use crate::events::{Event, EventKind, HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, FindingClass, Shown};
use std::collections::BTreeMap;

pub fn finding(cycle: u32, class: FindingClass, detail: &str) -> Finding {
    Finding {
        class,
        offset: 8192 * cycle as u64,
        length: 4096,
        expected: Shown::Write { write_id: 40 + cycle as u64, cycle, port: 0, addr: 8192 * cycle as u64, index: 0, count: 8 },
        found: Shown::Prefill {},
        cycle,
        detail: detail.to_string(),
    }
}

/// A three-cycle run: cycle 2 finds a lost write whose detail is hostile markup.
pub fn run() -> Vec<Event> {
    let counts: BTreeMap<String, u64> = crate::events::zero_counts();
    let mut ev = vec![Event::new(
        0,
        EventKind::RunStarted {
            run_id: "00000000000000ab".into(),
            scenario: "demo <sim> & \"quotes\"".into(),
            target: "sim:8MiB".into(),
            contract: Contract::Flush,
            cycles_planned: 3,
            seed: 4,
            started_at: "2026-01-01T00:00:00+00:00".into(),
        },
    )];
    for c in 1..=3u32 {
        ev.extend(cycle(c, &counts));
    }
    ev.push(Event::new(4_000_000_000, EventKind::RunEnded { verdict: Verdict::Findings, exit_code: 1 }));
    ev
}

/// Cycle `c` of [`run`]: a cut, the drive back, its health, a verify (a lost write in cycle 2,
/// a health anomaly in cycle 3), the end.
fn cycle(c: u32, counts: &BTreeMap<String, u64>) -> Vec<Event> {
    let mut ev = Vec::new();
    let t = c as u64 * 1_000_000_000;
    ev.push(Event::in_cycle(t, c, EventKind::CycleStarted { fault: None, off_time_ms: None }));
    ev.push(Event::in_cycle(
        t + 1000,
        c,
        EventKind::CutIssued {
            completions: 100 * c as u64,
            in_flight_ops: 30,
            bytes_at_risk: 65536,
            phase_us: 1000 * c as u64,
            planned_after_ms: None,
            mate_step_ms: None,
            command_us: None,
        },
    ));
    ev.push(Event::in_cycle(t + 2000, c, EventKind::DeviceGone {}));
    ev.push(Event::in_cycle(t + 3000, c, EventKind::PowerRestored { off_us: None }));
    ev.push(Event::in_cycle(t + 4000, c, EventKind::Ready { enumerate_us: Some(1500 * c as u64), first_read_us: Some(2000 * c as u64) }));
    ev.push(Event::in_cycle(
        t + 5000,
        c,
        EventKind::Health {
            smart: SmartFigures { unsafe_shutdowns: 10 + c as u64, power_cycles: 20 + c as u64, ..SmartFigures::default() },
            anomalies: if c == 3 {
                vec![HealthNote { kind: "media_errors_grew".into(), detail: "media errors 0 -> 1".into() }]
            } else {
                Vec::new()
            },
            pcie: None,
        },
    ));
    let mut cc = counts.clone();
    if c == 2 {
        *cc.get_mut("lost_write").unwrap() = 1;
    }
    ev.push(Event::in_cycle(t + 6000, c, EventKind::Verified { sectors: 16384, bytes: 8 << 20, verify_ns: 3_000_000, counts: cc }));
    if c == 2 {
        ev.push(Event::in_cycle(
            t + 6000,
            c,
            EventKind::Finding { finding: finding(c, FindingClass::LostWrite, "<script>alert('x')</script> & gone") },
        ));
    }
    ev.push(Event::in_cycle(
        t + 7000,
        c,
        EventKind::CycleEnded {
            verdict: if c == 1 { Verdict::Clean } else { Verdict::Findings },
            writes_completed: 100 * c as u64,
            bytes_written: 1 << 20,
            write_ns: 5_000_000,
            latency_p50_ns: Some(80_000),
            latency_p99_ns: Some(900_000),
            latency_max_ns: Some(2_500_000),
            max_gap_ns: None,
            harness_ns: Some(2_000_000),
            zeroing: Default::default(),
        },
    ));
    ev
}

/// One port's window of a dual-port cycle: 25 ms buckets from the baseline's start (at
/// `t + 0.1 s`), the fault 400 ms after it, the window's end 600 ms later. The faulted port
/// completes nothing after the fault; a disturbed port neither, until 300 ms into the window.
pub fn port_window(t: u64, cycle: u32, port: u8, faulted: bool, disturbed: bool) -> Event {
    use crate::writer::windows::WindowFigures;
    let name = ["A", "B"][usize::from(port)].to_string();
    let upto = if faulted { 17 } else { 41 };
    let bytes: Vec<u64> =
        (0..upto).map(|k| if k >= 16 && (faulted || (disturbed && k < 28)) { 0 } else { 5_000_000 + 1000 * u64::from(port) }).collect();
    let lat: Vec<u32> = bytes
        .iter()
        .enumerate()
        .map(|(k, &b)| {
            if b == 0 {
                0
            } else if disturbed && k == 28 {
                300_000
            } else {
                2_000
            }
        })
        .collect();
    let window = |bytes: u64, us: u64| WindowFigures {
        duration_us: us,
        bytes,
        throughput_bps: bytes as f64 / (us as f64 / 1e6),
        ..WindowFigures::default()
    };
    Event::in_cycle(
        t + 1_500_000_000,
        cycle,
        EventKind::PortWindow {
            name,
            faulted,
            baseline_t_ns: Some(t + 100_000_000),
            fault_t_ns: Some(t + 500_000_000),
            window_end_t_ns: Some(t + 1_100_000_000),
            baseline: Some(window(80_000_000, 400_000)),
            fault: Some(window(if faulted { 0 } else { 100_000_000 }, 600_000)),
            throughput_ratio: (!faulted).then_some(if disturbed { 0.4 } else { 1.0 }),
            p99_ratio: (!faulted).then_some(if disturbed { 150.0 } else { 1.0 }),
            disturbed,
            harness_late_us: None,
            bucket_ms: 25,
            series_bytes: bytes,
            series_max_latency_us: lat,
        },
    )
    .on_port(crate::port::PortId(port))
}

/// [`run`] as a dual-port run: before each cycle's end, a `port_window` of A and of B; the
/// fault hits A in odd cycles, B in even ones, and A is disturbed in cycle 2.
pub fn dual_run() -> Vec<Event> {
    let mut out = Vec::new();
    for e in run() {
        if let (EventKind::CycleEnded { .. }, Some(cycle)) = (&e.kind, e.cycle) {
            let t = u64::from(cycle) * 1_000_000_000;
            let hit = if cycle % 2 == 1 { 0 } else { 1 };
            for port in 0..2u8 {
                out.push(port_window(t, cycle, port, port == hit, port != hit && cycle == 2));
            }
        }
        out.push(e);
    }
    out
}
