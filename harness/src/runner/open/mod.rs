//! Opening a run, of one port or many: every port of the plan's target (`devices` for a one-port
//! target, `real` the ports of a real drive, `sim` the simulated dual-port drive's, `remote`
//! ports on other hosts; `atomic` the atomic unit a device is held to), the fault's controller, and each writer port's run over its share of
//! the span (its ledger and layout, bound to the identity of the device seen through that
//! port). The only place that names concrete Duts.
//!
//! A one-port run is port A over the whole span, its run in the run directory itself; a
//! dual-port run keeps each writer port's run in `RUN_DIR/ports/<name>/`, so that two ports
//! never share a write id space, and `faultline verify` works on one share. `faultline resume`
//! opens the same runs again from their ledgers and the saved drive.

mod atomic;
pub(super) mod devices;
pub mod error;
mod real;
mod remote;
mod sim;

pub(crate) use atomic::{atomic_unit, declared_reads};
pub(crate) use devices::sim_config;
pub(crate) use error::{FormatRefusal, OpenError, OpenPortsError};

use super::dut::Dut;
use super::fault::Cutter;
use super::lane::Lane;
use super::options::RunnerOptions;
use super::ports::PortSet;
use super::resume::{Prior, Start};
use super::run_loop::StartAt;
use crate::ledger::{RunHeader, TargetFacts};
use crate::port::PortId;
use crate::run::{exists, open_run, OpenRun};
use crate::scenario::{DualMode, DualPlan, PortRole, RunPlan, TargetPlan};
use crate::workload::Layout;
use std::any::Any;
use std::path::{Path, PathBuf};

/// The directory of port `name`'s run inside a dual-port run directory.
pub fn port_dir(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("ports").join(name)
}

/// Every port of a run's target, and the fault's controller.
pub(crate) struct Devices {
    /// Every port of the plan, in its order.
    pub devs: Vec<Box<dyn Dut>>,
    pub cutter: Cutter,
    /// The run's target identity (the namespace's, as port A sees it).
    pub identity: String,
    pub sector: u64,
    pub capacity: u64,
    /// The atomic write unit the drive is held to.
    pub atomic: u64,
    /// What a deallocated sector reads, where the drive itself declares it (NVMe DLFEAT).
    pub declared_reads: Option<crate::ledger::DeallocRead>,
    pub notes: Vec<String>,
    /// What must live as long as the run (an emulator, the NBD servers of served ports).
    pub _keep: Option<Box<dyn Any>>,
    /// Saves a drive this process serves to other hosts before any port's ledger records
    /// something of it (their writes reach it over NBD, and the ledger hears of them from the
    /// agents, so no writer here knows when to save it).
    pub saves: Option<crate::ledger::file::BeforePromise>,
}

/// A run, opened.
pub(crate) struct Opened {
    pub ports: PortSet,
    pub cutter: Cutter,
    /// Every writer port's share: its run and ledger.
    pub lanes: Vec<Lane>,
    /// Where the cycles take up (a resumed run's cycles ended, the one it died in).
    pub start: StartAt,
    /// The run's target identity, for `run_started`.
    pub identity: String,
    pub notes: Vec<String>,
    pub _keep: Option<Box<dyn Any>>,
}

/// A writer port's share of the span: the port, its name (`None`: a one-port run's port A),
/// where its run lives, and its percent of the span.
struct Share {
    port: usize,
    name: Option<String>,
    dir: PathBuf,
    percent: [u8; 2],
}

/// The writer ports' shares: port A over the whole span in the run directory, or each writer
/// port of a dual-port plan over its share in `ports/<name>/`.
fn shares(plan: &RunPlan, run_dir: &Path) -> Vec<Share> {
    match &plan.dual {
        None => vec![Share { port: 0, name: None, dir: run_dir.to_path_buf(), percent: [0, 100] }],
        Some(_) => plan
            .ports
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == PortRole::Writer)
            .map(|(i, p)| Share { port: i, name: Some(p.name.clone()), dir: port_dir(run_dir, &p.name), percent: p.share_percent })
            .collect(),
    }
}

/// Whether a plan is a dual-port performance run (its cycles are measurement phases).
pub(crate) fn performance(dual: Option<&DualPlan>) -> bool {
    dual.is_some_and(|d| d.spec.mode == DualMode::Performance)
}

/// Opens every port, the fault's controller and every writer port's run. `prior` is `None`
/// for a new run (the run directory must not hold one); for `faultline resume` it holds what
/// the run had recorded, and every run must be there to take up.
pub(crate) fn open(plan: &RunPlan, run_dir: &Path, o: &RunnerOptions, prior: Option<&Prior>) -> Result<Opened, OpenError> {
    let resuming = prior.is_some();
    let begun = exists(run_dir);
    if begun && !resuming {
        return Err(OpenError::Begun { dir: run_dir.to_path_buf(), run_dir: run_dir.to_path_buf() });
    }
    if let Some(dual) = &plan.dual {
        if resuming && performance(Some(dual)) {
            return Err(OpenError::PerformanceResume);
        }
    }
    let Devices { mut devs, cutter, identity, sector, capacity, atomic, declared_reads, mut notes, _keep, saves } = match &plan.dual {
        Some(_) => open_ports(plan, run_dir, o)?,
        None => devices::one_port(plan, run_dir, o, begun)?,
    };
    let full = plan.layout(sector, capacity)?;
    let mut lanes = Vec::new();
    let mut interrupted = None;
    for share in shares(plan, run_dir) {
        let dev = &mut devs[share.port];
        let begun = exists(&share.dir);
        if begun && !resuming {
            return Err(OpenError::Begun { dir: share.dir, run_dir: run_dir.to_path_buf() });
        }
        let held = Held { sector, capacity, atomic, declared_reads };
        let mut run = open_share(plan, o, &full, &share, dev.as_mut(), held, begun)?;
        if let Some(save) = &saves {
            run.ledger.before_promises(std::sync::Arc::clone(save));
        }
        if run.created && plan.scenario.workload.prefill {
            let OpenRun { ledger, layout, format, .. } = &mut run;
            dev.prefill(layout, format, PortId(share.port as u8), ledger)
                .map_err(|source| OpenError::Prefill { port: share.name.clone(), source })?;
        }
        dev.bind(run.history().header.target_identity.clone());
        let from = Start::new(run.history(), prior);
        // The cycle the harness died in is the newest any port's ledger began (a port whose
        // writer had not begun it yet is brought level before it is finished).
        interrupted = interrupted.max(from.interrupted);
        let span = (run.layout.spec().span_start, run.layout.spec().span_end);
        lanes.push(Lane { port: share.port, run, dir: share.dir, span, checked_upto: from.checked_upto });
    }
    // A one-port run names its target as its ledger's header does.
    let identity = match &plan.dual {
        None => lanes.first().map_or(identity, |l| l.run.history().header.target_identity.clone()),
        Some(_) => identity,
    };
    for dev in devs.iter_mut() {
        notes.extend(dev.notes());
    }
    let off = &plan.scenario.health.off;
    if !off.is_empty() {
        let names: Vec<&str> = off.iter().map(|c| c.name()).collect();
        notes.push(format!("health checks off, as the scenario's [health] off declares: {} (not judged in this run)", names.join(", ")));
    }
    let start = StartAt { cycles_ended: prior.map_or(0, Prior::cycles_ended), interrupted };
    let ports = PortSet::new(plan, devs);
    Ok(Opened { ports, cutter, lanes, start, identity, notes, _keep })
}

/// What a run holds the device to: its sector and size, its atomic unit, and what a
/// deallocated sector reads where the drive declares it.
#[derive(Clone, Copy)]
struct Held {
    sector: u64,
    capacity: u64,
    atomic: u64,
    declared_reads: Option<crate::ledger::DeallocRead>,
}

/// Opens (or creates) one writer port's run over its share of the span, bound to the device
/// seen through that port; `begun`: its directory holds the run already (it is taken up).
fn open_share(
    plan: &RunPlan,
    o: &RunnerOptions,
    full: &Layout,
    share: &Share,
    dev: &mut dyn Dut,
    Held { sector, capacity, atomic, declared_reads }: Held,
    begun: bool,
) -> Result<OpenRun, OpenError> {
    let port = || share.name.clone();
    let span = share_span(full.spec().span_start, full.spec().span_end, share.percent);
    let mut spec = full.spec().clone();
    (spec.span_start, spec.span_end) = span;
    let layout = Layout::new(spec, sector).map_err(|source| OpenError::Share {
        port: share.name.clone().unwrap_or_default(),
        percent: share.percent,
        source,
    })?;
    let seen = dev.facts().map_err(|source| OpenError::Target { port: port(), source })?;
    require_zeroing(&layout, &seen, port())?;
    if matches!(plan.cut, crate::scenario::CutPlacement::DuringFormat { .. }) {
        require_format(&layout, &seen, capacity).map_err(|source| OpenError::Format { port: port(), source })?;
    }
    // The drive's own declaration wins over what its engine promises (a block device's
    // discard promises nothing; the NVMe namespace behind it may declare zeros).
    let dealloc_reads = declared_reads.unwrap_or(seen.zeroing.dealloc_reads);
    let facts = TargetFacts { identity: seen.identity.clone(), capacity, sector_bytes: sector, atomic_bytes: atomic, dealloc_reads };
    let header = RunHeader::new(o.run_id, o.started_at.clone(), facts, plan.contract, plan.port_entries(), layout.spec().clone());
    let run = open_run(&share.dir, &seen, move || header).map_err(|source| OpenError::Run { port: port(), source })?;
    if begun && run.layout.spec() != layout.spec() {
        let ledger = serde_json::to_string(run.layout.spec()).unwrap_or_default();
        return Err(OpenError::Workload { dir: share.dir.clone(), port: port(), ledger });
    }
    Ok(run)
}

/// Opens every port of a dual-port plan and the fault's controller.
fn open_ports(plan: &RunPlan, run_dir: &Path, o: &RunnerOptions) -> Result<Devices, OpenPortsError> {
    match &plan.target {
        TargetPlan::Device { expect, .. } if plan.ports.iter().any(|p| p.remote.is_some()) => remote::open_real(plan, expect, o),
        TargetPlan::Sim(t) => sim::open(plan, t, run_dir, o),
        TargetPlan::Device { expect, .. } => real::open(plan, expect, o),
        // Refused when the scenario is validated; kept an error here all the same.
        TargetPlan::Remote { host, .. } => Err(OpenPortsError::Remote(host.clone())),
    }
}

/// `[start, end)` percent of the span, rounded to whole MiB inside it.
fn share_span(start: u64, end: u64, pct: [u8; 2]) -> (u64, u64) {
    const MIB: u64 = 1 << 20;
    let len = end - start;
    let at = |p: u8| start + (len / 100 * p as u64 + (len % 100) * p as u64 / 100) / MIB * MIB;
    (at(pct[0]), if pct[1] == 100 { end } else { at(pct[1]) })
}

/// Why a run that formats cannot format this target: it does not carry a format, or the
/// span is not all of it (a format erases the whole namespace, and faultline never writes
/// outside its span).
fn require_format(layout: &Layout, seen: &crate::run::DeviceFacts, capacity: u64) -> Result<(), FormatRefusal> {
    let s = layout.spec();
    if !seen.zeroing.format {
        return Err(FormatRefusal::NotCarried { identity: seen.identity.clone() });
    }
    if s.span_start != 0 || s.span_end != capacity {
        return Err(FormatRefusal::PartSpan { start: s.span_start, end: s.span_end, capacity });
    }
    Ok(())
}

/// Refuses a workload that deallocates or writes zeroes through a device that does not carry
/// them, before anything is written.
fn require_zeroing(layout: &Layout, seen: &crate::run::DeviceFacts, port: Option<String>) -> Result<(), OpenError> {
    match layout.spec().ops.zeroings().into_iter().find(|&k| !seen.zeroing.carries(k)) {
        None => Ok(()),
        Some(kind) => Err(OpenError::Zeroing { port, identity: seen.identity.clone(), op: kind.name() }),
    }
}
