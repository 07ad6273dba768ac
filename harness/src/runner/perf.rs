//! `dual.mode = "performance"`: the dual-port test plan's figures. The scenario's write
//! workload and 128 KiB sequential reads (one read in flight per port), each measured A only,
//! B only and A+B for `dual.perf_ms`, after a warm-up: each port's throughput and latency,
//! their fairness (A over B in A+B) and the sum in A+B against the sum of A only and B only.
//! Each phase's writes are recorded in the ports' ledgers and verified at the end, as any
//! cycle's are.

use super::lane::Lane;
use super::writers::WriterError;
use crate::events::{Event, EventKind};
use crate::port::PortId;
use crate::run::OpenRun;
use crate::runner::dut::{Dut, DutError, Workload};
use crate::runner::emit::Emitter;
use crate::runner::options::RunnerOptions;
use crate::scenario::{DualPlan, RunPlan};
use crate::writer::{CycleOptions, Phase, PortSamples, Windows};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The phases: which writer lanes take part (indices into `lanes`).
fn phases(lanes: &[Lane], plan: &RunPlan) -> Vec<(String, Vec<usize>)> {
    let mut v: Vec<(String, Vec<usize>)> =
        lanes.iter().enumerate().map(|(i, l)| (format!("{} only", plan.ports[l.port].name), vec![i])).collect();
    if lanes.len() > 1 {
        let all: Vec<usize> = (0..lanes.len()).collect();
        let name = lanes.iter().map(|l| plan.ports[l.port].name.as_str()).collect::<Vec<_>>().join("+");
        v.push((name, all));
    }
    v
}

/// Runs the measurements; returns how many phases ran. Errors are recorded and end it.
pub(super) fn run(
    plan: &RunPlan,
    dual: &DualPlan,
    devs: &mut [Box<dyn Dut>],
    lanes: &mut [Lane],
    em: &mut Emitter<'_>,
    o: &RunnerOptions,
) -> Result<u32, PerfError> {
    let ms = Duration::from_millis(dual.spec.perf_ms);
    let warm = Duration::from_millis(dual.spec.warmup_ms);
    let mut n = 0;
    for (phase, who) in phases(lanes, plan) {
        n += 1;
        let t_ns = em.now();
        em.emit(Event::in_cycle(t_ns, n, EventKind::CycleStarted { fault: None, off_time_ms: None }));
        let (windows, results, end) = write_phase(plan, devs, lanes, &who, warm, ms, o);
        let mut ran = Vec::new();
        for (i, r) in results {
            if let Err(source) = r {
                return Err(PerfError::Write { phase, port: plan.ports[i].name.clone(), source: Box::new(source) });
            }
            ran.push(i);
        }
        for i in &ran {
            let f = windows.figures(*i, Phase::Baseline, end);
            let t_ns = em.now();
            let kind = EventKind::PortPerf {
                workload: "write".into(),
                phase: phase.clone(),
                name: plan.ports[*i].name.clone(),
                figures: f.unwrap_or_default(),
            };
            em.emit(Event::new(t_ns, kind).on_port(PortId(*i as u8)));
        }
        // The same ports reading their shares, 128 KiB at a time.
        let reads =
            read_phase(devs, lanes, &who, warm, ms).map_err(|(i, source)| PerfError::Read { port: plan.ports[i].name.clone(), source })?;
        for (i, f) in reads {
            let t_ns = em.now();
            let kind = EventKind::PortPerf {
                workload: "seq-read-128k-qd1".into(),
                phase: phase.clone(),
                name: plan.ports[i].name.clone(),
                figures: f,
            };
            em.emit(Event::new(t_ns, kind).on_port(PortId(i as u8)));
        }
        agent_log(devs, plan, em, n);
        let t_ns = em.now();
        em.emit(Event::in_cycle(
            t_ns,
            n,
            EventKind::CycleEnded {
                verdict: crate::events::Verdict::Clean,
                writes_completed: 0,
                bytes_written: 0,
                write_ns: 0,
                latency_p50_ns: None,
                latency_p99_ns: None,
                latency_max_ns: None,
                max_gap_ns: None,
                harness_ns: None,
                zeroing: Default::default(),
            },
        ));
    }
    Ok(n)
}

/// One phase's writes: the ports in `who` writing their shares at once for `warm` then `ms`,
/// sampled in windows on one clock; each port's result, and when the phase ended.
#[expect(clippy::type_complexity, reason = "the phase's windows, each port's result, its end")]
fn write_phase(
    plan: &RunPlan,
    devs: &mut [Box<dyn Dut>],
    lanes: &mut [Lane],
    who: &[usize],
    warm: Duration,
    ms: Duration,
    o: &RunnerOptions,
) -> (Arc<Windows>, Vec<(usize, Result<(), WriterError>)>, Instant) {
    let windows = Arc::new(Windows::new(devs.len()));
    let mut lane_of: Vec<Option<&mut Lane>> = (0..devs.len()).map(|_| None).collect();
    for (i, l) in lanes.iter_mut().enumerate() {
        if who.contains(&i) {
            let p = l.port;
            lane_of[p] = Some(l);
        }
    }
    let results: Vec<(usize, Result<(), WriterError>)> = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (i, (dev, lane)) in devs.iter_mut().zip(lane_of).enumerate() {
            let Some(lane) = lane else { continue };
            let windows = Arc::clone(&windows);
            let (c, first_id) = lane.run.next_cycle();
            let copts = CycleOptions {
                cycle: c,
                first_id,
                started_at: (o.clock)(),
                port: PortId(i as u8),
                max_writes: None,
                duration: Some(warm + ms),
                cut: None,
                checkpoint_every: Duration::from_secs(3600),
                drain_timeout: Duration::from_secs(30),
                stop: None,
                samples: Some(PortSamples::Windows { windows, slot: i }),
                fill: crate::writer::Fill::Auto,
                clock_from: None,
                before_end: None,
            };
            hs.push(sc.spawn(move || {
                let OpenRun { ledger, layout, format, .. } = &mut lane.run;
                let w = Workload { layout, format, contract: plan.contract, opts: &copts };
                let r = dev.run_cycle(&w, ledger, &mut || Ok(())).map(|_| ()).map_err(WriterError::from);
                (i, r)
            }));
        }
        std::thread::sleep(warm);
        windows.enter(Phase::Baseline);
        std::thread::sleep(ms);
        windows.enter(Phase::After);
        hs.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let end = Instant::now();
    (windows, results, end)
}

/// Records what each port's agent was sent during phase `n` (the audit of a port on another
/// host), as a cycle does.
fn agent_log(devs: &mut [Box<dyn Dut>], plan: &RunPlan, em: &mut Emitter<'_>, n: u32) {
    let mut lines = Vec::new();
    for (i, d) in devs.iter_mut().enumerate() {
        lines.extend(d.take_audit().into_iter().map(|l| format!("port {}: {l}", plan.ports[i].name)));
    }
    if !lines.is_empty() {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::AgentLog { lines }).with_cycle(Some(n)));
    }
}

/// Sequential 128 KiB reads through each port of `who` over its own share, one in flight per
/// port, for `ms` after `warm`.
fn read_phase(
    devs: &mut [Box<dyn Dut>],
    lanes: &[Lane],
    who: &[usize],
    warm: Duration,
    ms: Duration,
) -> Result<Vec<(usize, crate::writer::WindowFigures)>, (usize, crate::runner::dut::DutError)> {
    let windows = Arc::new(Windows::new(devs.len()));
    let spans: Vec<Option<(u64, u64)>> =
        (0..devs.len()).map(|p| lanes.iter().enumerate().find(|(i, l)| l.port == p && who.contains(i)).map(|(_, l)| l.span)).collect();
    let errs: Vec<(usize, crate::runner::dut::DutError)> = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (i, (dev, span)) in devs.iter_mut().zip(&spans).enumerate() {
            let Some(span) = *span else { continue };
            let samples = PortSamples::slot(&windows, i);
            hs.push(sc.spawn(move || dev.read_load(span, warm + ms, &samples).map_err(|e| (i, e))));
        }
        std::thread::sleep(warm);
        windows.enter(Phase::Baseline);
        std::thread::sleep(ms);
        windows.enter(Phase::After);
        hs.into_iter().filter_map(|h| h.join().ok()).filter_map(Result::err).collect()
    });
    if let Some(e) = errs.into_iter().next() {
        return Err(e);
    }
    let end = Instant::now();
    Ok(spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_some())
        .map(|(i, _)| (i, windows.figures(i, Phase::Baseline, end).unwrap_or_default()))
        .collect())
}

/// Why a performance run's measurements ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PerfError {
    #[error("performance, {phase}, port {port}: {source}")]
    Write { phase: String, port: String, source: Box<WriterError> },
    #[error("performance, reads, port {port}: {source}")]
    Read { port: String, source: DutError },
}
