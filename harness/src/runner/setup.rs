//! Opening what a run needs: the device under test, the fault's controller (with an emulator
//! for a simulated drive's switch), and the run directory bound to the device.

use super::dut::{Dut, DutError, NbdDut, RealDut, RemoteDut, RemotePort, SimDut};
use super::fault::{real_cutter, sim_switch, ControllerError, Cutter};
use super::ports::PortSet;
use crate::ledger::{Contract, RunHeader, TargetFacts};
use crate::run::{exists, open_run, OpenRun, RunError};
use crate::scenario::{FaultPlan, RunPlan, ScenarioError, SimSwitch, SimTarget, Switch, TargetPlan};
use faultline_drivers::blockdev::SysRoots;
use faultline_drivers::control::ControlEnv;
use faultline_fixtures::{SimConfig, SimDrive, TruthContract};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the binary supplies: the run id and the wall clock (the harness has none).
pub struct RunnerOptions {
    pub run_id: u64,
    /// Wall-clock start of the run, RFC 3339.
    pub started_at: String,
    /// Wall-clock timestamps for the ledger's cycle records.
    pub clock: fn() -> String,
    /// Where controllers find the machine, and their timeouts.
    pub control_env: ControlEnv,
    /// This faultline binary, for a transport that starts an agent on this machine
    /// (`{faultline}` in `[[ports]] transport`); `None` where there is none (library tests).
    pub faultline_exe: Option<PathBuf>,
}

/// Why a run could not be set up; nothing was recorded of it.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{} already holds a run: `faultline resume {}` continues it", .0.display(), .0.display())]
    Begun(PathBuf),
    #[error("the simulated drive: {0}")]
    Sim(std::io::Error),
    #[error(transparent)]
    Dut(#[from] DutError),
    #[error("prefill: {0}")]
    Prefill(#[from] super::dut::DutCycleError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{}: the run's workload differs from the scenario's ({ledger} in the ledger): the scenario file was changed", .dir.display())]
    WorkloadChanged { dir: PathBuf, ledger: String },
    #[error(
        "target.atomic_bytes {declared} is below the device's {sector}-byte logical sector: a drive cannot promise less than a sector"
    )]
    Atomic { declared: u64, sector: u64 },
}

/// The atomic write unit a real device is held to: the scenario's `target.atomic_bytes`, else
/// one logical sector.
pub(crate) fn atomic_unit(declared: Option<u32>, sector: u64) -> Result<u64, SetupError> {
    match declared.map(u64::from) {
        None => Ok(sector),
        Some(d) if d < sector => Err(SetupError::Atomic { declared: d, sector }),
        Some(d) => Ok(d),
    }
}

/// Everything a run holds open.
pub(crate) struct Setup {
    /// The device's one port.
    pub ports: PortSet,
    pub cutter: Cutter,
    /// Taken by the cycles (`cycle::cycles`), which hold it as the run's one share.
    pub run: Option<OpenRun>,
    pub header: RunHeader,
    pub notes: Vec<String>,
    /// The emulator serving the simulated drive's switch (kept alive for the run).
    pub _emulator: Option<Box<dyn Any>>,
}

/// An emulator kept alive for the run (dropped, it stops serving).
type Emulator = Option<Box<dyn Any>>;

/// The simulated drive's configuration for a plan.
pub(crate) fn sim_config(plan: &RunPlan, t: &SimTarget) -> SimConfig {
    SimConfig {
        capacity_bytes: t.capacity_bytes,
        sector_bytes: t.sector_bytes,
        atomic_bytes: t.atomic_bytes,
        queue_depth: t.queue_depth as usize,
        seed: plan.seed,
        model: t.model.fault_model(),
        contract: match plan.contract {
            Contract::Plp => TruthContract::Plp,
            Contract::Flush => TruthContract::Flush,
        },
    }
}

fn sim_dut(plan: &RunPlan, t: &SimTarget, run_dir: &Path, o: &RunnerOptions) -> Result<(SimDut, Cutter, Emulator), SetupError> {
    let cfg = sim_config(plan, t);
    // The drive keeps itself in the run directory, so that it outlives a harness that is
    // killed, as a real drive does.
    let drive = SimDrive::persistent(cfg, run_dir).map_err(SetupError::Sim)?;
    // Every fault of the simulated one-port drive goes through its one switch.
    let switch = plan.faults.all().map(|f| match f {
        FaultPlan::PowerCut { switch: Switch::Sim(s), .. } | FaultPlan::CleanShutdown { switch: Switch::Sim(s) } => Some(*s),
        _ => None,
    });
    let switch = match switch.collect::<Option<Vec<SimSwitch>>>().and_then(|s| s.first().copied()) {
        Some(s) => s,
        None => return Err(ControllerError::from(super::fault::Missing::SimSwitch).into()),
    };
    let (cutter, emu) = sim_switch(switch, drive.power(), plan.seed, &o.control_env)?;
    Ok((SimDut { drive }, cutter, emu))
}

/// Whether a target path is an NBD URI (`nbd://`, `nbd+unix://`).
fn is_nbd(p: &Path) -> bool {
    p.to_str().is_some_and(faultline_drivers::nbd::looks_like_nbd)
}

/// A target on another host, through its agent: dialled with the run's nonce (derived from
/// the run id the binary drew), its ledger the run directory's.
fn remote_dut(
    plan: &RunPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    host: &str,
    transport: &[String],
    target: &str,
    expect: &faultline_drivers::blockdev::Expectation,
) -> Result<RemoteDut, SetupError> {
    let transport = crate::agent::dial::Transport::new(transport, host).map_err(DutError::Transport)?;
    Ok(RemoteDut::open(remote_port(plan, o, host, transport, target, expect, run_dir.join(crate::run_dir::LEDGER_FILE)))?)
}

/// How to reach a port on `host` for this run: its ledger is `ledger_file`.
pub(crate) fn remote_port(
    plan: &RunPlan,
    o: &RunnerOptions,
    host: &str,
    transport: crate::agent::dial::Transport,
    target: &str,
    expect: &faultline_drivers::blockdev::Expectation,
    ledger_file: PathBuf,
) -> RemotePort {
    RemotePort {
        host: host.to_string(),
        transport,
        run: crate::agent::proto::Nonce::from_words(o.run_id, crate::rng::mix64(o.run_id)),
        coordinator: format!("faultline run (pid {})", std::process::id()),
        target: target.to_string(),
        expect: expect.clone(),
        queue_depth: plan.scenario.workload.queue_depth,
        ledger_file,
        timeout: REMOTE_ANSWER,
        stream_every: Duration::from_millis(1),
        policy: crate::agent::cycle::StreamPolicy { ledger_checkpoint_every: Duration::from_millis(500), silence: REMOTE_ANSWER },
        resets: plan.faults.all().filter_map(FaultPlan::host_reset).collect(),
    }
}

/// How long an agent's handshake and each of its answers may take (a cycle's silence too).
const REMOTE_ANSWER: Duration = Duration::from_secs(20);

/// Opens the device, the controller and the run directory. `resuming`: the run directory must
/// hold the run (else it must not).
pub(crate) fn setup(plan: &RunPlan, run_dir: &Path, o: &RunnerOptions, resuming: bool) -> Result<Setup, SetupError> {
    let begun = exists(run_dir);
    if begun && !resuming {
        return Err(SetupError::Begun(run_dir.to_path_buf()));
    }
    let (mut dut, cutter, emulator, sector, atomic, capacity): (Box<dyn Dut>, _, _, u64, u64, u64) = match &plan.target {
        TargetPlan::Sim(t) => {
            let (dut, cutter, emu) = sim_dut(plan, t, run_dir, o)?;
            (Box::new(dut), cutter, emu, t.sector_bytes as u64, t.atomic_bytes as u64, t.capacity_bytes)
        }
        TargetPlan::Device { path: Some(uri), expect, .. } if is_nbd(uri) => {
            let queue_depth = plan.scenario.workload.queue_depth as usize;
            let mut dut = NbdDut::open(&uri.to_string_lossy(), expect, queue_depth, begun)?;
            let facts = dut.facts()?;
            let sector = facts.sector_bytes();
            let atomic = atomic_unit(plan.scenario.target.atomic_bytes, sector)?;
            let cutter = real_cutter(&plan.faults, &o.control_env)?;
            (Box::new(dut), cutter, None, sector, atomic, facts.capacity_bytes)
        }
        TargetPlan::Remote { host, transport, target, expect } => {
            let mut dut = remote_dut(plan, run_dir, o, host, transport, target, expect)?;
            let facts = dut.facts()?;
            let sector = facts.sector_bytes();
            let atomic = atomic_unit(plan.scenario.target.atomic_bytes, sector)?;
            let cutter = real_cutter(&plan.faults, &o.control_env)?;
            (Box::new(dut), cutter, None, sector, atomic, facts.capacity_bytes)
        }
        TargetPlan::Device { path, expect, via } => {
            let roots = SysRoots { sys: o.control_env.sysfs_root.join("sys"), dev: o.control_env.dev_root.join("dev") };
            let queue_depth = plan.scenario.workload.queue_depth as usize;
            let mut dut = RealDut::open(path.as_deref(), expect, via.as_ref(), queue_depth, begun, roots)?;
            let facts = dut.facts()?;
            let sector = facts.sector_bytes();
            let atomic = atomic_unit(plan.scenario.target.atomic_bytes, sector)?;
            let cutter = real_cutter(&plan.faults, &o.control_env)?;
            (Box::new(dut), cutter, None, sector, atomic, facts.capacity_bytes)
        }
    };
    let layout = plan.layout(sector, capacity)?;
    let seen = dut.facts()?;
    let facts = TargetFacts { identity: seen.identity.clone(), capacity, sector_bytes: sector, atomic_bytes: atomic };
    let header = RunHeader::new(o.run_id, o.started_at.clone(), facts, plan.contract, plan.ports.clone(), layout.spec().clone());
    let run = open_run(run_dir, &seen, move || header)?;
    if begun && run.layout.spec() != layout.spec() {
        let ledger = serde_json::to_string(run.layout.spec()).unwrap_or_default();
        return Err(SetupError::WorkloadChanged { dir: run_dir.to_path_buf(), ledger });
    }
    let mut run = run;
    if run.created && plan.scenario.workload.prefill {
        dut.prefill(&run.layout, &run.format, plan.first_port(), &mut run.ledger)?;
    }
    let header = run.history().header.clone();
    dut.bind(header.target_identity.clone());
    let mut notes = dut.notes();
    let off = &plan.scenario.health.off;
    if !off.is_empty() {
        let names: Vec<&str> = off.iter().map(|c| c.name()).collect();
        notes.push(format!("health checks off, as the scenario's [health] off declares: {} (not judged in this run)", names.join(", ")));
    }
    let ports = PortSet::new(plan, vec![dut]);
    Ok(Setup { ports, cutter, run: Some(run), header, notes, _emulator: emulator })
}
