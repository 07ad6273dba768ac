//! Dual-port runs: one writer thread per port, each with its own target, ledger and stop
//! token, sampled in windows on one clock; a fault that hits one port (from the fault's own
//! thread) while the others write; then the other ports judged against their baseline, and
//! every port's share verified through its own port and through every other one.
//!
//! A cycle: `start all writers -> warm-up -> baseline -> fault on port X (X's writer cuts) ->
//! X back and answering -> settle -> stop the others -> verify every share through every port
//! -> compare the ports -> judge the others -> record`.
//!
//! Each writer port keeps its run in `RUN_DIR/ports/<name>/` (a ledger and a layout over its
//! share of the span, bound to the identity of the device seen through that port), so that
//! two ports never share a write id space, and `faultline verify` works on one share. A
//! dual-port run cannot be resumed yet: `faultline resume` refuses it.
//!
//! Files: `mod.rs` (this: the cycle), `judge.rs` (the budgets), `device.rs` (the ports of a
//! simulated or real drive).

mod device;
mod judge;
mod perf;
mod sim;

use super::emit::{nanos, Emitter};
use super::fault::{cycle_rng, Cutter, SAMPLE_SALT};
use super::regions::{sample_regions, union, written_regions};
use super::stop::{decide, CycleEnd, ErrorStreak, Next};
use super::{CycleCheck, CycleObserver, RunnerOptions};
use crate::events::{class_counts, Event, Verdict};
use crate::ledger::{RunHeader, LEDGER_FORMAT};
use crate::port::PortId;
use crate::run::{open_run, OpenRun};
use crate::scenario::{DualPlan, FaultPlan, PortRole, RunPlan};
use crate::verify::{seen_record, Finding, FindingClass, Shown, Verifier};
use crate::workload::Layout;
use crate::writer::CutPlacement;
use crate::writer::{run_cycle, CycleOptions, CycleOutcome, Phase, PortSamples, StopToken, Windows};
use device::{open_ports, PortDev, Ports};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use judge::{judge, Judged};

/// How often the harness checks that it is being scheduled.
const TICK: Duration = Duration::from_millis(2);

/// The share of one writer port: its run (ledger, layout) and what was checked of it.
struct Lane {
    port: usize,
    run: OpenRun,
    /// Where the port's run is kept (`RUN_DIR/ports/<name>`).
    dir: PathBuf,
    span: (u64, u64),
    checked_upto: u64,
}

impl Lane {
    /// Opens the port's run again after its writer failed mid-cycle: replaying the ledger
    /// closes the cycle the writer left open (as `interrupted`, nothing of it durable beyond
    /// its last checkpoint), so the next cycle can begin. The old writer is synced first, so
    /// that it has nothing left to write when the new one opens the file.
    fn reopen(&mut self, target: &mut dyn faultline_drivers::BlockTarget) -> Result<(), String> {
        let why =
            |e: &dyn std::fmt::Display| format!("{}: cannot open the port's run again after its writer failed: {e}", self.dir.display());
        self.run.ledger.sync().map_err(|e| why(&e))?;
        let header = self.run.history().header.clone();
        self.run = open_run(&self.dir, target, move || header).map_err(|e| why(&e))?;
        self.checked_upto = self.checked_upto.min(self.run.history().submitted_end());
        Ok(())
    }
}

/// The directory of port `name`'s run inside a dual-port run directory.
pub fn port_dir(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("ports").join(name)
}

/// What a writer thread gives back.
struct PortEnd {
    outcome: Result<CycleOutcome, String>,
    /// The faulted port: how long it took to answer again after the fault, or why not.
    ready: Option<Result<Duration, String>>,
}

/// Runs a dual-port plan; events go to `em`.
pub(crate) fn run(
    plan: &RunPlan,
    dual: &DualPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    em: &mut Emitter<'_>,
    mut observer: Option<&mut (dyn CycleObserver + 'static)>,
    cycles_run: &mut u32,
) -> Result<Option<String>, String> {
    let Ports { mut devs, cutter, identity, sector, capacity, notes, _keep } = open_ports(plan, dual, run_dir, o)?;
    let mut cutter = cutter;
    em.emit(Event::RunStarted {
        t_ns: 0,
        run_id: format!("{:016x}", o.run_id),
        scenario: plan.name().to_string(),
        target: identity.clone(),
        contract: plan.contract,
        // A performance run's cycles are its phases: each writer port alone, then all.
        cycles_planned: match dual.spec.mode {
            crate::scenario::DualMode::Performance => {
                let writers = dual.ports.iter().filter(|p| p.role == PortRole::Writer).count() as u32;
                writers + u32::from(writers > 1)
            }
            crate::scenario::DualMode::Failover => plan.cycles,
        },
        seed: plan.seed,
        started_at: o.started_at.clone(),
    });
    for message in notes {
        let t_ns = em.now();
        em.emit(Event::Note { t_ns, cycle: None, message });
    }
    let full = plan.layout(sector, capacity).map_err(|e| e.to_string())?;
    let mut lanes = Vec::new();
    for (i, p) in dual.ports.iter().enumerate().filter(|(_, p)| p.role == PortRole::Writer) {
        let span = share(full.spec().span_start, full.spec().span_end, p.share_percent);
        let mut spec = full.spec().clone();
        (spec.span_start, spec.span_end) = span;
        let layout =
            Layout::new(spec.clone(), sector).map_err(|e| format!("port {}: its share {:?} of the span: {e}", p.name, p.share_percent))?;
        let atomic = sector.max(devs[i].atomic_bytes());
        let target = devs[i].target().map_err(|e| format!("port {}: {e}", p.name))?;
        let header = RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: o.run_id,
            created_at: o.started_at.clone(),
            target_identity: target.identity(),
            target_capacity: capacity,
            sector_bytes: sector,
            atomic_bytes: atomic,
            contract: plan.contract,
            ports: plan.ports.clone(),
            workload: layout.spec().clone(),
        };
        let dir = port_dir(run_dir, &p.name);
        if crate::run::exists(&dir) {
            return Err(format!("{} already holds a run: a dual-port run cannot be resumed yet", dir.display()));
        }
        let run = open_run(&dir, target, move || header).map_err(|e| format!("port {}: {e}", p.name))?;
        let checked_upto = run.history().submitted_end();
        lanes.push(Lane { port: i, run, dir, span, checked_upto });
    }
    if plan.scenario.workload.prefill {
        return Err("workload.prefill is not supported in a dual-port run yet".into());
    }
    if dual.spec.mode == crate::scenario::DualMode::Performance {
        let n = perf::run(plan, dual, &mut devs, &mut lanes, em, o)?;
        *cycles_run = n;
        // What the measurements wrote is verified as any cycle's is, through every port.
        let (mut findings, mut end) = (Vec::new(), CycleEnd { cycle: n, ..CycleEnd::default() });
        verify_all(plan, dual, n, true, &mut devs, &mut lanes, em, &mut findings, &mut end)?;
        em.findings(n, &findings);
        return Ok(None);
    }
    let mut streak = ErrorStreak::default();
    for cycle in 1..=plan.cycles {
        *cycles_run = cycle;
        let last = cycle == plan.cycles;
        let end = one_cycle(plan, dual, cycle, last, &mut devs, &mut lanes, &mut cutter, em, o, observer.as_deref_mut())?;
        if let Next::Stop(why) = decide(&plan.stop, &mut streak, &end) {
            return Ok(Some(why));
        }
    }
    Ok(None)
}

/// `[start, end)` percent of the span, rounded to whole MiB inside it.
fn share(start: u64, end: u64, pct: [u8; 2]) -> (u64, u64) {
    const MIB: u64 = 1 << 20;
    let len = end - start;
    let at = |p: u8| start + (len / 100 * p as u64 + (len % 100) * p as u64 / 100) / MIB * MIB;
    (at(pct[0]), if pct[1] == 100 { end } else { at(pct[1]) })
}

#[expect(clippy::too_many_arguments, reason = "one cycle's state, held by the run")]
fn one_cycle(
    plan: &RunPlan,
    dual: &DualPlan,
    cycle: u32,
    last: bool,
    devs: &mut [Box<dyn PortDev>],
    lanes: &mut [Lane],
    cutter: &mut Cutter,
    em: &mut Emitter<'_>,
    o: &RunnerOptions,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
) -> Result<CycleEnd, String> {
    let spec = &dual.spec;
    // A power cut and an NVM subsystem reset hit every port: none is judged against its
    // baseline (each one's writes are still verified).
    let power =
        matches!(plan.fault, FaultPlan::PowerCut { .. } | FaultPlan::LinkReset { kind: faultline_drivers::ResetKind::NvmeSubsystem, .. });
    let hit = dual.faulted(cycle);
    let faulted_name = if power { "all".to_string() } else { dual.ports[hit].name.clone() };
    if let Cutter::Link { port, .. } = cutter {
        port.clone_from(&dual.ports[hit].fault_port);
    }
    let t_start = em.now();
    em.emit(Event::CycleStarted { t_ns: t_start, cycle });
    let windows = Arc::new(Windows::new(devs.len()));
    let fire_at = spec.warmup_ms + spec.baseline_ms;
    let stop = StopToken::default();
    let fault_lane = lanes.iter().position(|l| l.port == hit);
    let mut end = CycleEnd { cycle, ..CycleEnd::default() };
    let started = Instant::now();
    let (landed_tx, landed_rx) = mpsc::channel::<(Instant, Result<Duration, String>)>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Duration, String>>();
    let readiness = plan.readiness_timeout;
    let at0 = lanes.first().map_or(0, |l| l.span.0);
    // The fault's own thread (as `FaultThread`, with a channel the writer threads can share):
    // the faulted port's writer fires it and waits for the cut to land.
    let (go_tx, go_rx) = mpsc::sync_channel::<bool>(1);
    let (cut_tx, cut_rx) = mpsc::sync_channel::<Result<Duration, String>>(1);
    let cut_rx = std::sync::Mutex::new(cut_rx);
    let fire = || -> Result<Duration, String> {
        let gone = || "the fault thread ended before it cut".to_string();
        go_tx.send(true).map_err(|_| gone())?;
        cut_rx.lock().unwrap_or_else(|e| e.into_inner()).recv().map_err(|_| gone())?
    };
    let fire = &fire;
    let off = plan.off_time;
    let ticking = std::sync::atomic::AtomicBool::new(true);
    let ends: Vec<(usize, PortEnd)> = std::thread::scope(|sc| {
        sc.spawn(move || {
            if go_rx.recv() == Ok(true) {
                let t = Instant::now();
                let _ = cut_tx.send(cutter.cut(off).map(|()| t.elapsed()).map_err(|e| e.to_string()));
            }
        });
        let mut handles = Vec::new();
        let mut lane_of: Vec<Option<&mut Lane>> = (0..devs.len()).map(|_| None).collect();
        for l in lanes.iter_mut() {
            let p = l.port;
            lane_of[p] = Some(l);
        }
        let mut idle = Vec::new();
        for (i, (dev, lane)) in devs.iter_mut().zip(lane_of).enumerate() {
            let Some(lane) = lane else {
                idle.push((i, dev));
                continue;
            };
            let (landed_tx, ready_tx, windows, stop) = (landed_tx.clone(), ready_tx.clone(), Arc::clone(&windows), stop.clone());
            let is_hit = i == hit || power;
            let fires = i == hit;
            let (c, first_id) = lane.run.next_cycle();
            debug_assert_eq!(c, cycle);
            let copts = CycleOptions {
                cycle,
                first_id,
                started_at: (o.clock)(),
                port: PortId(i as u8),
                max_writes: None,
                duration: None,
                cut: fires.then_some(CutPlacement::AfterTime { after_ms: fire_at }),
                checkpoint_every: Duration::from_secs(3600),
                drain_timeout: readiness.clamp(Duration::from_secs(1), Duration::from_secs(30)),
                stop: (!fires).then_some(stop),
                samples: Some(PortSamples { windows: Arc::clone(&windows), slot: i }),
                fill: crate::writer::Fill::Auto,
            };
            handles.push(sc.spawn(move || {
                let contract = plan.contract;
                let OpenRun { ledger, layout, format, .. } = &mut lane.run;
                let mut hook = || {
                    windows.enter(Phase::Fault);
                    let r = fire();
                    let _ = landed_tx.send((Instant::now(), r.clone()));
                    r.map(|_| ())
                };
                let outcome = match dev.target() {
                    Ok(t) => run_cycle(t, layout, format, ledger, contract, &copts, &mut hook).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let ready = is_hit.then(|| {
                    if fires && outcome.is_err() {
                        // The fault did not land: tell the main thread not to wait for it.
                        let _ = landed_tx.send((Instant::now(), Err("the faulted port's writer ended before its fault".into())));
                    }
                    dev.wait_ready(at0, readiness).map_err(|e| e.to_string())
                });
                if let Some(r) = &ready {
                    if fires {
                        let _ = ready_tx.send(r.clone());
                    }
                }
                (i, PortEnd { outcome, ready })
            }));
        }
        drop((landed_tx, ready_tx));
        // A thread that only sleeps: how late it wakes is how long the machine kept the
        // harness from running. A port that stalls while the harness itself could not run
        // says nothing about the drive.
        let ticker = {
            let (windows, ticking) = (Arc::clone(&windows), &ticking);
            sc.spawn(move || {
                while ticking.load(std::sync::atomic::Ordering::Acquire) {
                    let wanted = Instant::now() + TICK;
                    std::thread::sleep(TICK);
                    windows.record_lateness(wanted, Instant::now());
                }
            })
        };
        // The main thread: the windows, a fault on a port that writes nothing, the end.
        std::thread::sleep(Duration::from_millis(spec.warmup_ms));
        windows.enter(Phase::Baseline);
        let mut landed = None;
        if fault_lane.is_none() {
            std::thread::sleep(Duration::from_millis(spec.baseline_ms));
            windows.enter(Phase::Fault);
            let r = fire();
            landed = Some((Instant::now(), r));
        }
        let budget = Duration::from_millis(fire_at) + plan.off_time + readiness + Duration::from_secs(30);
        let landed = match landed {
            Some(l) => Some(l),
            None => landed_rx.recv_timeout(budget).ok(),
        };
        let ready = match (&landed, fault_lane) {
            (Some((_, Ok(_))), Some(_)) => ready_rx.recv_timeout(readiness + Duration::from_secs(35)).ok(),
            (Some((_, Ok(_))), None) => {
                idle.iter_mut().find(|(i, _)| *i == hit).map(|(_, d)| d.wait_ready(at0, readiness).map_err(|e| e.to_string()))
            }
            _ => None,
        };
        if matches!(ready, Some(Ok(_))) {
            std::thread::sleep(Duration::from_millis(spec.settle_ms));
        }
        windows.enter(Phase::After);
        stop.stop();
        // A fault that was never fired: let its thread end.
        let _ = go_tx.try_send(false);
        ticking.store(false, std::sync::atomic::Ordering::Release);
        let _ = ticker.join();
        let mut out: Vec<(usize, PortEnd)> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
        if let Some((_, Err(e))) = &landed {
            out.push((usize::MAX, PortEnd { outcome: Err(format!("the fault: {e}")), ready: None }));
        } else if landed.is_none() {
            out.push((usize::MAX, PortEnd { outcome: Err("the fault never landed".into()), ready: None }));
        }
        out
    });
    let t_end = Instant::now();
    for message in devs.iter_mut().flat_map(|d| d.take_notes()) {
        let t_ns = em.now();
        em.emit(Event::Note { t_ns, cycle: Some(cycle), message });
    }
    // A port whose writer failed left its cycle open in its ledger: close it.
    for (i, pe) in &ends {
        if pe.outcome.is_ok() || *i == usize::MAX {
            continue;
        }
        if let Some(lane) = lanes.iter_mut().find(|l| l.port == *i) {
            let target = devs[*i].target().map_err(|e| format!("port {}: {e}", dual.ports[*i].name))?;
            lane.reopen(target)?;
        }
    }
    // What each port did.
    let mut faulted_outcome = None;
    for (i, pe) in &ends {
        match &pe.outcome {
            Err(e) => {
                let who = if *i == usize::MAX { String::new() } else { format!("port {}: ", dual.ports[*i].name) };
                em.error(Some(cycle), format!("{who}{e}"));
                end.errors += 1;
            }
            Ok(out) if *i == hit => {
                em.cut(cycle, started, out, Some(fire_at), None);
                faulted_outcome = Some(out.clone());
            }
            Ok(_) => {}
        }
        if let Some(r) = &pe.ready {
            match r {
                Ok(d) => {
                    let t_ns = em.now();
                    em.emit(Event::Ready { t_ns, cycle, enumerate_us: None, first_read_us: Some(d.as_micros() as u64) });
                }
                Err(why) => {
                    em.error(Some(cycle), format!("port {}: {why}", dual.ports[*i].name));
                    end.dead_device = true;
                }
            }
        }
    }
    for d in devs.iter_mut() {
        if let Err(e) = d.persist() {
            return Err(format!("cannot save the simulated drive: {e}"));
        }
    }
    // Judge the ports the fault did not hit, unless the harness itself was kept from running
    // long enough to explain a breach (an overloaded machine): then the breaches are noted,
    // not found.
    let mut findings: Vec<Finding> = Vec::new();
    let starved = windows.lateness(Phase::Fault).max(windows.lateness(Phase::Baseline));
    let void = starved > Duration::from_millis((spec.budget.max_stall_ms / 5).max(25));
    for (i, p) in dual.ports.iter().enumerate() {
        let is_hit = i == hit || power;
        let base = windows.figures(i, Phase::Baseline, t_end);
        let during = windows.figures(i, Phase::Fault, t_end);
        let mut judged = Judged::default();
        if let (false, PortRole::Writer, Some(b), Some(d)) = (is_hit, p.role, &base, &during) {
            judged = judge(&p.name, b, d, &spec.budget);
            if void && !judged.breaches.is_empty() {
                let t_ns = em.now();
                em.emit(Event::Note {
                    t_ns,
                    cycle: Some(cycle),
                    message: format!(
                        "port {} not judged in cycle {cycle}: the harness itself was kept from running for {:.1} ms (the machine is overloaded), so these say nothing about the drive: {}",
                        p.name,
                        starved.as_secs_f64() * 1e3,
                        judged.breaches.join("; ")
                    ),
                });
                judged.breaches.clear();
            }
            for breach in &judged.breaches {
                findings.push(judge::finding(cycle, &p.name, &faulted_name, breach));
            }
        }
        let t_ns = em.now();
        let series = windows.series(i);
        let from = windows.started(Phase::Baseline).map_or(0, |d| (d.as_nanos() / crate::writer::windows::BUCKET.as_nanos()) as usize);
        // To the last completion: the drain after the window shows a stalled port coming back.
        let upto = series.len();
        let kept = series.get(from.min(upto)..upto).unwrap_or_default();
        let t_of = |ph| windows.started(ph).map(|d| em.ns(windows.epoch() + d));
        em.emit(Event::PortWindow {
            t_ns,
            cycle,
            port: PortId(i as u8),
            name: p.name.clone(),
            faulted: is_hit,
            baseline_t_ns: t_of(Phase::Baseline),
            fault_t_ns: t_of(Phase::Fault),
            window_end_t_ns: t_of(Phase::After),
            baseline: base,
            fault: during,
            throughput_ratio: judged.throughput_ratio,
            p99_ratio: judged.p99_ratio,
            disturbed: !judged.breaches.is_empty(),
            harness_late_us: Some(u64::try_from(starved.as_micros()).unwrap_or(u64::MAX)),
            bucket_ms: crate::writer::windows::BUCKET.as_millis() as u32,
            series_bytes: kept.iter().map(|b| b.bytes).collect(),
            series_max_latency_us: kept.iter().map(|b| b.max_latency_us).collect(),
        });
    }
    // Verify every share through its own port and through every other one.
    if !end.dead_device {
        verify_all(plan, dual, cycle, last, devs, lanes, em, &mut findings, &mut end)?;
    }
    let truth = devs.iter().find_map(|d| d.ground_truth());
    if let Some(obs) = observer {
        obs.checked(&CycleCheck { cycle, findings: &findings, truth });
    }
    end.new_findings = em.findings(cycle, &findings);
    let verdict = if end.errors > 0 {
        Verdict::Error
    } else if end.new_findings > 0 {
        Verdict::Findings
    } else {
        Verdict::Clean
    };
    em.end_cycle(cycle, verdict, faulted_outcome.as_ref(), None);
    Ok(end)
}

#[expect(clippy::too_many_arguments, reason = "one cycle's state, held by the run")]
fn verify_all(
    plan: &RunPlan,
    dual: &DualPlan,
    cycle: u32,
    last: bool,
    devs: &mut [Box<dyn PortDev>],
    lanes: &mut [Lane],
    em: &mut Emitter<'_>,
    findings: &mut Vec<Finding>,
    end: &mut CycleEnd,
) -> Result<(), String> {
    let v = &plan.verify;
    let full = (v.full_every_cycles > 0 && cycle.is_multiple_of(v.full_every_cycles)) || (last && v.full_at_end);
    let readers: Vec<usize> = dual.ports.iter().enumerate().filter(|(_, p)| p.role != PortRole::Idle).map(|(i, _)| i).collect();
    let (mut sectors, mut bytes, mut ns) = (0u64, 0u64, 0u64);
    let mut counts_all = Vec::new();
    for (li, lane) in lanes.iter_mut().enumerate() {
        let h = lane.run.history();
        let submitted_end = h.submitted_end();
        let regions = if full {
            vec![lane.span]
        } else {
            let mut rng = cycle_rng(plan.seed, SAMPLE_SALT ^ (li as u64 + 1), cycle);
            let sector = h.header.sector_bytes;
            union(
                &written_regions(&lane.run.layout, lane.checked_upto, submitted_end),
                &sample_regions(&mut rng, lane.span.0, lane.span.1, sector, v.sample_bytes),
            )
        };
        let own = dual.ports[lane.port].name.clone();
        let through: Vec<usize> =
            std::iter::once(lane.port).chain(readers.iter().copied().filter(|&r| r != lane.port && dual.spec.cross_verify)).collect();
        let mut seen_own = None;
        let mut own_bad: Vec<(u64, u64)> = Vec::new();
        for &r in &through {
            let via = dual.ports[r].name.clone();
            let verifier = Verifier::new(&lane.run.layout, lane.run.ledger.history(), &lane.run.format);
            let t0 = Instant::now();
            let target = devs[r].target().map_err(|e| e.to_string())?;
            let rep = match verifier.verify_regions(target, &regions) {
                Ok(rep) => rep,
                Err(e) => {
                    em.error(Some(cycle), format!("verify port {own}'s share through port {via}: {e}"));
                    end.errors += 1;
                    continue;
                }
            };
            ns += nanos(t0.elapsed());
            sectors += rep.sectors;
            bytes += rep.bytes;
            for mut f in rep.findings {
                // An older version read through another port, where the port that wrote the
                // share reads it intact: the data is on the drive, that port serves a stale
                // copy.
                let older = matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite);
                if r != lane.port && older && !own_bad.iter().any(|&(a, b)| a < f.offset + f.length.max(1) && f.offset < b) {
                    f.class = FindingClass::StaleVersion;
                    f.detail = format!("port {via} serves an older version than port {own} reads: {}", f.detail);
                }
                if r == lane.port {
                    own_bad.push((f.offset, f.offset + f.length.max(1)));
                }
                annotate(&mut f, lane, &own, &via, dual);
                findings.push(f);
            }
            if r == lane.port {
                seen_own = Some(rep.seen);
            }
        }
        if let Some(seen) = seen_own.filter(|_| plan.contract == crate::ledger::Contract::Plp) {
            let h = lane.run.history();
            if let Some(rec) = seen_record(h, &lane.run.layout, &regions, &seen) {
                lane.run.ledger.append(&rec).map_err(|e| e.to_string())?;
            }
        }
        if dual.spec.compare_ports && through.len() > 1 {
            compare(devs, &through, &regions, lane, dual, cycle, findings)?;
        }
        lane.checked_upto = submitted_end;
        counts_all.extend(findings.iter().cloned());
    }
    let t_ns = em.now();
    em.emit(Event::Verified { t_ns, cycle, sectors, bytes, verify_ns: ns, counts: class_counts(&counts_all) });
    Ok(())
}

/// Names the port a finding was read through, and a ghost write where the older version found
/// was in flight on a faulted port: a write the kernel's multipath failed over while the old
/// controller may still commit it, over newer data.
fn annotate(f: &mut Finding, lane: &Lane, own: &str, via: &str, dual: &DualPlan) {
    let mut detail = format!("port {own}'s share, read through port {via}: {}", f.detail);
    if matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite) {
        if let Shown::Write { write_id, cycle, port, .. } = f.found {
            let h = lane.run.history();
            if h.cycle_of(write_id).is_some_and(|c| c.cycle == cycle && c.failed.contains(write_id)) {
                let name = dual.ports.get(port as usize).map_or_else(|| PortId(port).to_string(), |p| p.name.clone());
                detail.push_str(&format!(
                    "; the older version is write {write_id}, in flight on port {name} when the fault hit it in cycle {cycle}: a ghost write (it landed after the newer one)"
                ));
                // The durable write was whole until the ghost landed over part of it: those
                // sectors are lost to the ghost, not torn by a cut.
                f.class = FindingClass::LostWrite;
            }
        }
    }
    f.detail = detail;
}

/// Reads `regions` through every port in `through` and compares: a port serving other data
/// than the first is a finding (a port serving stale data).
fn compare(
    devs: &mut [Box<dyn PortDev>],
    through: &[usize],
    regions: &[(u64, u64)],
    lane: &Lane,
    dual: &DualPlan,
    cycle: u32,
    findings: &mut Vec<Finding>,
) -> Result<(), String> {
    const CHUNK: u64 = 1 << 20;
    let sector = lane.run.history().header.sector_bytes;
    let (first, rest) = through.split_first().ok_or("no port to read through")?;
    let mut a = faultline_drivers::AlignedBuf::zeroed(CHUNK as usize);
    let mut b = faultline_drivers::AlignedBuf::zeroed(CHUNK as usize);
    for &(s, e) in regions {
        let mut at = s;
        while at < e {
            let len = (e - at).min(CHUNK);
            a.resize(len as usize);
            b.resize(len as usize);
            if devs[*first].target().map_err(|e| e.to_string())?.read_at(at, &mut a).is_err() {
                at += len;
                continue;
            }
            for &r in rest {
                if devs[r].target().map_err(|e| e.to_string())?.read_at(at, &mut b).is_err() {
                    continue;
                }
                let size = sector as usize;
                let differs = |k: usize| a[k * size..(k + 1) * size] != b[k * size..(k + 1) * size];
                let n = (len / sector) as usize;
                let mut k = 0;
                while k < n {
                    if !differs(k) {
                        k += 1;
                        continue;
                    }
                    let k0 = k;
                    while k < n && differs(k) {
                        k += 1;
                    }
                    let (from, to) = (at + k0 as u64 * sector, at + k as u64 * sector);
                    findings.push(Finding {
                        class: FindingClass::StaleVersion,
                        offset: from,
                        length: to - from,
                        expected: Shown::Prior,
                        found: Shown::Prior,
                        cycle,
                        detail: format!(
                            "port {} and port {} read different data in [{from}, {to}) of port {}'s share: one port serves a stale copy",
                            dual.ports[*first].name, dual.ports[r].name, dual.ports[lane.port].name
                        ),
                    });
                }
            }
            at += len;
        }
    }
    Ok(())
}
