//! A three-cycle run's events, shared by the reports' tests.

use crate::events::{Event, HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, FindingClass, Shown};
use std::collections::BTreeMap;

pub fn finding(cycle: u32, class: FindingClass, detail: &str) -> Finding {
    Finding {
        class,
        offset: 8192 * cycle as u64,
        length: 4096,
        expected: Shown::Write { write_id: 40 + cycle as u64, cycle, port: 0, addr: 8192 * cycle as u64, index: 0, count: 8 },
        found: Shown::Prefill,
        cycle,
        detail: detail.to_string(),
    }
}

/// A three-cycle run: cycle 2 finds a lost write whose detail is hostile markup.
pub fn run() -> Vec<Event> {
    let counts: BTreeMap<String, u64> = crate::events::zero_counts();
    let mut ev = vec![Event::RunStarted {
        t_ns: 0,
        run_id: "00000000000000ab".into(),
        scenario: "demo <sim> & \"quotes\"".into(),
        target: "sim:8MiB".into(),
        contract: Contract::Flush,
        cycles_planned: 3,
        seed: 4,
        started_at: "2026-01-01T00:00:00+00:00".into(),
    }];
    for c in 1..=3u32 {
        let t = c as u64 * 1_000_000_000;
        ev.push(Event::CycleStarted { t_ns: t, cycle: c });
        ev.push(Event::CutIssued {
            t_ns: t + 1000,
            cycle: c,
            completions: 100 * c as u64,
            in_flight_ops: 30,
            bytes_at_risk: 65536,
            phase_us: 1000 * c as u64,
            planned_after_ms: None,
            mate_step_ms: None,
        });
        ev.push(Event::DeviceGone { t_ns: t + 2000, cycle: c });
        ev.push(Event::PowerRestored { t_ns: t + 3000, cycle: c });
        ev.push(Event::Ready { t_ns: t + 4000, cycle: c, enumerate_us: Some(1500 * c as u64), first_read_us: Some(2000 * c as u64) });
        ev.push(Event::Health {
            t_ns: t + 5000,
            cycle: c,
            smart: SmartFigures { unsafe_shutdowns: 10 + c as u64, power_cycles: 20 + c as u64, ..SmartFigures::default() },
            anomalies: if c == 3 {
                vec![HealthNote { kind: "media_errors_grew".into(), detail: "media errors 0 -> 1".into() }]
            } else {
                Vec::new()
            },
        });
        let mut cc = counts.clone();
        if c == 2 {
            *cc.get_mut("lost_write").unwrap() = 1;
        }
        ev.push(Event::Verified { t_ns: t + 6000, cycle: c, sectors: 16384, bytes: 8 << 20, verify_ns: 3_000_000, counts: cc });
        if c == 2 {
            ev.push(Event::Finding {
                t_ns: t + 6000,
                cycle: c,
                finding: finding(c, FindingClass::LostWrite, "<script>alert('x')</script> & gone"),
            });
        }
        ev.push(Event::CycleEnded {
            t_ns: t + 7000,
            cycle: c,
            verdict: if c == 1 { Verdict::Clean } else { Verdict::Findings },
            writes_completed: 100 * c as u64,
            bytes_written: 1 << 20,
            write_ns: 5_000_000,
            latency_p50_ns: Some(80_000),
            latency_p99_ns: Some(900_000),
            latency_max_ns: Some(2_500_000),
            max_gap_ns: None,
            harness_ns: Some(2_000_000),
        });
    }
    ev.push(Event::RunEnded { t_ns: 4_000_000_000, verdict: Verdict::Findings, exit_code: 1 });
    ev
}
