//! Dual-port runs, opened: every port of the drive, each writer port's run over its share,
//! then the cycles, which are a single-port run's (`runner/cycle.rs`) with windows: one
//! writer thread per port, sampled on one clock; a fault that hits one port (from the
//! fault's own thread) while the others write; then the other ports judged against their
//! baseline, and every port's share verified through its own port and through every other
//! one.
//!
//! A cycle: `start all writers -> warm-up -> baseline -> fault on port X (X's writer cuts) ->
//! X back and answering -> settle -> stop the others -> verify every share through every port
//! -> compare the ports -> judge the others -> record`.
//!
//! Each writer port keeps its run in `RUN_DIR/ports/<name>/` (a ledger and a layout over its
//! share of the span, bound to the identity of the device seen through that port), so that
//! two ports never share a write id space, and `faultline verify` works on one share.
//! `faultline resume` takes a dual-port run up again from those ledgers and the saved drive.
//!
//! Files: `mod.rs` (this: opening the run), `judge.rs` (the budgets, the windows judged),
//! `device.rs` (the ports of a real drive), `sim.rs` (those of the simulated one), `perf.rs`
//! (the performance mode), `error.rs`.

mod device;
mod error;
mod judge;
mod perf;
mod served;
mod sim;

pub(super) use judge::judge_windows;

use super::cycle::{Cycles, Ending};
use super::emit::Emitter;
use super::lane::{may_hold, verify_lanes, CheckOf, Lane, Readers};
use super::resume::{Prior, Start};
use super::run_loop::{run_cycles, StartAt};
use super::stop::CycleEnd;
use super::{CycleObserver, RunnerOptions};
use crate::events::{Event, EventKind};
use crate::ledger::{RunHeader, TargetFacts};
use crate::port::PortId;
use crate::run::{open_run, OpenRun};
use crate::runner::ports::PortSet;
use crate::scenario::{DualPlan, PortRole, RunPlan};
use crate::workload::Layout;
use device::{open_ports, Ports};
pub(crate) use error::DualRunError;
use std::path::{Path, PathBuf};

/// The directory of port `name`'s run inside a dual-port run directory.
pub fn port_dir(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("ports").join(name)
}

/// Runs a dual-port plan; events go to `em`. `prior` is `None` for a new run; for `faultline
/// resume` it holds what the run had recorded: every port's run is opened again (its ledger
/// closes the cycle the harness died in), that cycle is finished (power on, every port
/// waited for, health, every share verified through every port), and the cycles go on.
#[expect(clippy::too_many_arguments, reason = "what a run holds open, lent to its cycles once")]
pub(crate) fn run(
    plan: &RunPlan,
    dual: &DualPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    em: &mut Emitter<'_>,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
    cycles_run: &mut u32,
    prior: Option<&Prior>,
) -> Result<Ending, DualRunError> {
    let resuming = prior.is_some();
    if resuming && dual.ports.iter().any(|p| p.remote.is_some()) {
        return Err(DualRunError::RemoteResume);
    }
    let performance = dual.spec.mode == crate::scenario::DualMode::Performance;
    if resuming && performance {
        return Err(DualRunError::PerformanceResume);
    }
    let Ports { mut devs, cutter, identity, sector, capacity, atomic, notes, _keep } = open_ports(plan, dual, run_dir, o)?;
    let mut cutter = cutter;
    if !prior.is_some_and(|p| p.started) {
        em.emit(Event::new(
            0,
            EventKind::RunStarted {
                run_id: format!("{:016x}", o.run_id),
                scenario: plan.name().to_string(),
                target: identity.clone(),
                contract: plan.contract,
                // A performance run's cycles are its phases: each writer port alone, then all.
                cycles_planned: if performance {
                    let writers = dual.ports.iter().filter(|p| p.role == PortRole::Writer).count() as u32;
                    writers + u32::from(writers > 1)
                } else {
                    plan.cycles
                },
                seed: plan.seed,
                started_at: o.started_at.clone(),
            },
        ));
    }
    let full = plan.layout(sector, capacity).map_err(DualRunError::Layout)?;
    let mut lanes = Vec::new();
    for (i, p) in dual.ports.iter().enumerate().filter(|(_, p)| p.role == PortRole::Writer) {
        let span = share(full.spec().span_start, full.spec().span_end, p.share_percent);
        let mut spec = full.spec().clone();
        (spec.span_start, spec.span_end) = span;
        let layout = Layout::new(spec.clone(), sector).map_err(|source| DualRunError::Share {
            port: p.name.clone(),
            percent: p.share_percent,
            source,
        })?;
        let seen = devs[i].facts().map_err(|source| DualRunError::Target { port: p.name.clone(), source })?;
        let facts = TargetFacts { identity: seen.identity.clone(), capacity, sector_bytes: sector, atomic_bytes: atomic };
        let header = RunHeader::new(o.run_id, o.started_at.clone(), facts, plan.contract, plan.ports.clone(), layout.spec().clone());
        let dir = port_dir(run_dir, &p.name);
        let begun = crate::run::exists(&dir);
        if begun && !resuming {
            return Err(DualRunError::Begun { dir, run_dir: run_dir.to_path_buf() });
        }
        let mut run = open_run(&dir, &seen, move || header).map_err(|source| DualRunError::Run { port: p.name.clone(), source })?;
        if begun && run.layout.spec() != layout.spec() {
            let ledger = serde_json::to_string(run.layout.spec()).unwrap_or_default();
            return Err(DualRunError::Workload { dir, port: p.name.clone(), ledger });
        }
        if run.created && plan.scenario.workload.prefill {
            let OpenRun { ledger, layout, format, .. } = &mut run;
            devs[i]
                .prefill(layout, format, PortId(i as u8), ledger)
                .map_err(|source| DualRunError::Prefill { port: p.name.clone(), source })?;
        }
        let from = Start::new(run.history(), prior);
        lanes.push((Lane { port: i, run, dir, span, checked_upto: from.checked_upto }, from));
    }
    for message in notes {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::Note { message }));
    }
    // The cycle the harness died in is the newest any port's ledger began (a port whose
    // writer had not begun it yet is brought level before it is finished).
    let interrupted = lanes.iter().filter_map(|(_, s)| s.interrupted).max();
    let done = prior.map_or(0, Prior::cycles_ended);
    let mut lanes: Vec<Lane> = lanes.into_iter().map(|(l, _)| l).collect();
    if performance {
        let n = perf::run(plan, dual, &mut devs, &mut lanes, em, o)?;
        *cycles_run = n;
        // What the measurements wrote is verified as any cycle's is, through every port.
        let (mut findings, mut end) = (Vec::new(), CycleEnd { cycle: n, ..CycleEnd::default() });
        let of = CheckOf { cycle: n, last: true, hold_seen: may_hold(plan, n, false) };
        verify_lanes(plan, &Readers::of(dual), &of, &mut devs, &mut lanes, em, &mut findings, &mut end)?;
        em.findings(n, &findings);
        return Ok(Ending::Done);
    }
    let mut ports = PortSet::new(plan, devs);
    ports.read_health(em);
    let mut c = Cycles::new(plan, Some(dual), o, &mut ports, &mut lanes, &mut cutter, em, observer);
    c.controller_log(None);
    Ok(run_cycles(&mut c, plan, run_dir, o, StartAt { cycles_ended: done, interrupted }, prior, cycles_run)?)
}

/// `[start, end)` percent of the span, rounded to whole MiB inside it.
fn share(start: u64, end: u64, pct: [u8; 2]) -> (u64, u64) {
    const MIB: u64 = 1 << 20;
    let len = end - start;
    let at = |p: u8| start + (len / 100 * p as u64 + (len % 100) * p as u64 / 100) / MIB * MIB;
    (at(pct[0]), if pct[1] == 100 { end } else { at(pct[1]) })
}
