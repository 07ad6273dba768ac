//! Writes a long, realistic `events.jsonl` without running a drive, to measure what the
//! reports cost at soak lengths (`faultline report` peak memory, `report.html` size) in
//! seconds instead of the hours a simulated 100,000-cycle soak takes at ~25 cycles/s.
//!
//! The log is written by the real writer ([`EventLog`]) from the real event types, shaped
//! like the demo's (a lost write in most cycles, now and then a torn write or corruption, a
//! burst of findings every thousand cycles, latency spikes, SMART counters that climb), and
//! is the same bytes for the same arguments.
//!
//! `cargo run --release -p faultline --example synth-events -- DIR CYCLES [SEED]`, then
//! `/usr/bin/time -v faultline report DIR`.

use faultline::events::{zero_counts, Event, EventKind, EventSink, HealthNote, SmartFigures, Verdict};
use faultline::ledger::Contract;
use faultline::port::PortId;
use faultline::report::jsonl::EventLog;
use faultline::rng::WyRand;
use faultline::verify::{Finding, FindingClass, Shown};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: synth-events DIR CYCLES [SEED]";
    let dir = PathBuf::from(args.next().ok_or(usage)?);
    let cycles: u32 = args.next().ok_or(usage)?.parse().map_err(|e| format!("CYCLES: {e}"))?;
    let seed: u64 = args.next().map_or(Ok(1), |s| s.parse()).map_err(|e| format!("SEED: {e}"))?;
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(faultline::run_dir::EVENTS_FILE);
    if path.exists() {
        std::fs::remove_file(&path)?;
    }
    let mut log = EventLog::append(&path)?;
    let mut rng = WyRand::new(seed);
    let mut t: u64 = 0;
    let mut write_id: u64 = 1;
    let mut findings: u64 = 0;
    let mut smart = SmartFigures { temperature_k: 310, available_spare_pct: 100, ..SmartFigures::default() };
    log.event(&Event::new(
        0,
        EventKind::RunStarted {
            run_id: format!("{:016x}", seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            scenario: "synthetic soak".into(),
            target: "synthetic:64MiB".into(),
            contract: Contract::Plp,
            cycles_planned: cycles,
            seed,
            started_at: "2026-01-01T00:00:00+00:00".into(),
        },
    ))?;
    for cycle in 1..=cycles {
        t += 2_000_000 + rng.below(2_000_000);
        log.event(&Event::in_cycle(t, cycle, EventKind::CycleStarted { fault: None, off_time_ms: None }))?;
        let phase_us = 2_000 + rng.below(18_000);
        let completions = phase_us / 30 + rng.below(50);
        t += phase_us * 1000;
        log.event(&Event::in_cycle(
            t,
            cycle,
            EventKind::CutIssued {
                completions,
                in_flight_ops: 32,
                bytes_at_risk: 100_000 + rng.below(300_000),
                phase_us,
                planned_after_ms: Some(phase_us / 1000),
                mate_step_ms: None,
                command_us: Some(200 + rng.below(2_000)),
            },
        ))?;
        t += 1_000_000 + rng.below(2_000_000);
        log.event(&Event::in_cycle(t, cycle, EventKind::DeviceGone {}))?;
        t += 8_000_000;
        log.event(&Event::in_cycle(t, cycle, EventKind::PowerRestored { off_us: None }))?;
        // Mostly a millisecond or two to enumerate; one cycle in 500 takes a second.
        let enumerate_us = if rng.below(500) == 0 { 900_000 + rng.below(200_000) } else { 1_000 + rng.below(1_500) };
        t += enumerate_us * 1000;
        log.event(
            &Event::in_cycle(
                t,
                cycle,
                EventKind::Ready { enumerate_us: Some(enumerate_us), first_read_us: Some(enumerate_us + 40 + rng.below(100)) },
            )
            .with_port(Some(PortId::A)),
        )?;
        smart.power_cycles += 1;
        smart.unsafe_shutdowns += 1;
        smart.data_units_written += 2 + rng.below(3);
        let mut anomalies = Vec::new();
        if rng.below(5_000) == 0 {
            smart.media_errors += 1;
            anomalies.push(HealthNote {
                kind: "media_errors_grew".into(),
                detail: format!("media errors {} -> {}", smart.media_errors - 1, smart.media_errors),
            });
        }
        t += 300_000;
        log.event(
            &Event::in_cycle(t, cycle, EventKind::Health { smart: smart.clone(), anomalies, pcie: None }).with_port(Some(PortId::A)),
        )?;
        // What this cycle finds: usually one lost write, sometimes more of other classes.
        let mut found: Vec<FindingClass> = Vec::new();
        if rng.below(10) < 8 {
            found.push(FindingClass::LostWrite);
        }
        if rng.below(50) == 0 {
            found.push(FindingClass::TornWrite);
        }
        if rng.below(200) == 0 {
            found.push(FindingClass::Corruption);
        }
        if cycle % 1000 == 500 {
            found.extend(std::iter::repeat_n(FindingClass::UnexpectedVersion, 40));
        }
        let mut counts = zero_counts();
        for c in &found {
            *counts.get_mut(c.name()).expect("every class") += 1;
        }
        t += 3_000_000;
        log.event(&Event::in_cycle(t, cycle, EventKind::Verified { sectors: 11_000, bytes: 5_632_000, verify_ns: 2_800_000, counts }))?;
        let found_any = !found.is_empty();
        for class in found {
            let sectors = 1 + rng.below(64) as u32;
            let addr = rng.below(131_072) * 512;
            let id = write_id + rng.below(completions.max(1));
            findings += 1;
            log.event(&Event::in_cycle(
                t,
                cycle,
                EventKind::Finding {
                    finding: Finding {
                        class,
                        offset: addr,
                        length: u64::from(sectors) * 512,
                        expected: Shown::Write { write_id: id, cycle, port: 0, addr, index: 0, count: sectors },
                        found: if class == FindingClass::LostWrite { Shown::Zeros {} } else { Shown::Prefill {} },
                        cycle,
                        detail: format!(
                            "durable write {id} [{addr}, {}): {sectors} of its {sectors} expected sectors hold older content",
                            addr + u64::from(sectors) * 512
                        ),
                    },
                },
            ))?;
        }
        write_id += completions + 32;
        // p50 near 0.8 ms, p99 near 5 ms, and a 50 ms stall one cycle in 300.
        let stall = rng.below(300) == 0;
        let p50 = 700_000 + rng.below(300_000);
        let p99 = if stall { 50_000_000 + rng.below(10_000_000) } else { 4_000_000 + rng.below(2_000_000) };
        t += 50_000;
        log.event(&Event::in_cycle(
            t,
            cycle,
            EventKind::CycleEnded {
                verdict: if found_any { Verdict::Findings } else { Verdict::Clean },
                writes_completed: completions,
                bytes_written: completions * 8192,
                write_ns: phase_us * 1000 + 1_000_000,
                latency_p50_ns: Some(p50),
                latency_p99_ns: Some(p99),
                latency_max_ns: Some(p99 + rng.below(1_000_000)),
                max_gap_ns: None,
                harness_ns: Some(3_000_000 + rng.below(2_000_000)),
                zeroing: Default::default(),
            },
        ))?;
    }
    log.event(&Event::new(
        t + 1,
        EventKind::RunEnded { verdict: if findings > 0 { Verdict::Findings } else { Verdict::Clean }, exit_code: u8::from(findings > 0) },
    ))?;
    println!("wrote {} ({cycles} cycles, {findings} findings)", path.display());
    Ok(())
}
