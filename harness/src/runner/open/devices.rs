//! The device of a one-port target (the simulated drive, a block device, an NBD export, a port
//! on another host through its agent) and the fault's controller, with an emulator for a
//! simulated drive's switch.

use super::atomic::{atomic_unit, declared, Declared};
use super::error::OpenError;
use super::Devices;
use crate::ledger::Contract;
use crate::remote::coordinator::dut::{RemoteDut, RemotePort};
use crate::runner::dut::{Dut, DutError, NbdDut, RealDut, SimDut};
use crate::runner::fault::{real_cutter, require_shapes, sim_switch, ControllerError, Cutter};
use crate::runner::options::RunnerOptions;
use crate::runner::shutdown::{NvmeShutdown, SimShutdown};
use crate::scenario::{FaultPlan, RunPlan, SimSwitch, SimTarget, Switch, TargetPlan};
use faultline_drivers::blockdev::SysRoots;
use faultline_fixtures::{SimConfig, SimDrive, TruthContract};
use std::any::Any;
use std::path::Path;
use std::time::Duration;

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
        dealloc_reads: t.dealloc_reads.into(),
    }
}

fn sim_dut(plan: &RunPlan, t: &SimTarget, run_dir: &Path, o: &RunnerOptions) -> Result<(SimDut, Cutter, Emulator), OpenError> {
    let cfg = sim_config(plan, t);
    // The drive keeps itself in the run directory, so that it outlives a harness that is
    // killed, as a real drive does.
    let drive = SimDrive::persistent(cfg, run_dir).map_err(OpenError::Sim)?;
    // Every fault of the simulated one-port drive goes through its one switch.
    let switch = plan.faults.all().map(|f| match f {
        FaultPlan::PowerCut { switch: Switch::Sim(s), .. } | FaultPlan::CleanShutdown { switch: Switch::Sim(s), .. } => Some(*s),
        _ => None,
    });
    let switch = match switch.collect::<Option<Vec<SimSwitch>>>().and_then(|s| s.first().copied()) {
        Some(s) => s,
        None => return Err(ControllerError::from(crate::runner::fault::Missing::SimSwitch).into()),
    };
    let (mut cutter, emu) = sim_switch(switch, drive.power(), plan.seed, &o.control_env)?;
    require_shapes(&cutter, &plan.faults)?;
    if normal_shutdowns(plan) {
        cutter = cutter.with_shutdown(Box::new(SimShutdown(drive.power())));
    }
    Ok((SimDut::one(drive), cutter, emu))
}

/// Whether any fault of the run is a normal shutdown (its controllers shut down first).
fn normal_shutdowns(plan: &RunPlan) -> bool {
    plan.faults.all().any(FaultPlan::is_normal_shutdown)
}

/// A normal shutdown of a target whose controllers are not this host's.
fn not_here(target: &str) -> OpenError {
    ControllerError::NotShutdownable {
        target: target.to_string(),
        why: "a normal_shutdown shuts an NVMe controller of this host down: not an NBD export's or a drive's on another host",
    }
    .into()
}

/// Whether a target path is an NBD URI (`nbd://`, `nbd+unix://`).
fn is_nbd(p: &Path) -> bool {
    p.to_str().is_some_and(faultline_drivers::nbd::looks_like_nbd)
}

/// A target on another host, through its agent: dialled with the run's nonce (derived from
/// the run id the binary drew).
fn remote_dut(
    plan: &RunPlan,
    o: &RunnerOptions,
    host: &str,
    transport: &[String],
    target: &str,
    expect: &faultline_drivers::blockdev::Expectation,
) -> Result<RemoteDut, OpenError> {
    let transport = crate::transport::Transport::new(transport, host).map_err(DutError::Transport)?;
    Ok(RemoteDut::open(remote_port(plan, o, host, transport, target, expect))?)
}

/// How to reach a port on `host` for this run.
pub(crate) fn remote_port(
    plan: &RunPlan,
    o: &RunnerOptions,
    host: &str,
    transport: crate::transport::Transport,
    target: &str,
    expect: &faultline_drivers::blockdev::Expectation,
) -> RemotePort {
    RemotePort {
        host: host.to_string(),
        transport,
        run: crate::remote::proto::Nonce::from_words(o.run_id, crate::rng::mix64(o.run_id)),
        coordinator: format!("faultline run (pid {})", std::process::id()),
        target: target.to_string(),
        expect: expect.clone(),
        queue_depth: plan.scenario.workload.queue_depth,
        timeout: REMOTE_ANSWER,
        stream_every: Duration::from_millis(1),
        policy: crate::remote::coordinator::cycle::StreamPolicy {
            ledger_checkpoint_every: Duration::from_millis(500),
            silence: REMOTE_ANSWER,
        },
        resets: plan.faults.all().filter_map(FaultPlan::host_reset).collect(),
    }
}

/// How long an agent's handshake and each of its answers may take (a cycle's silence too).
const REMOTE_ANSWER: Duration = Duration::from_secs(20);

/// Opens the one port of a one-port target and the fault's controller. `begun`: the run
/// directory holds the run (a device that carries a signature may then be opened).
pub(super) fn one_port(plan: &RunPlan, run_dir: &Path, o: &RunnerOptions, begun: bool) -> Result<Devices, OpenError> {
    let mut notes = Vec::new();
    let mut declared = None;
    let (dut, cutter, keep, sector, atomic, capacity): (Box<dyn Dut>, _, _, u64, u64, u64) = match &plan.target {
        TargetPlan::Sim(t) => {
            let (dut, cutter, emu) = sim_dut(plan, t, run_dir, o)?;
            (Box::new(dut), cutter, emu, t.sector_bytes as u64, t.atomic_bytes as u64, t.capacity_bytes)
        }
        TargetPlan::Device { path: Some(uri), .. } if normal_shutdowns(plan) && is_nbd(uri) => {
            return Err(not_here(&uri.to_string_lossy()));
        }
        TargetPlan::Remote { target, .. } if normal_shutdowns(plan) => return Err(not_here(target)),
        TargetPlan::Device { path: Some(uri), expect, .. } if is_nbd(uri) => {
            let queue_depth = plan.scenario.workload.queue_depth as usize;
            let dut = NbdDut::open(&uri.to_string_lossy(), expect, queue_depth, begun)?;
            with_facts(plan, o, Box::new(dut), None, &mut notes)?
        }
        TargetPlan::Remote { host, transport, target, expect } => {
            let dut = remote_dut(plan, o, host, transport, target, expect)?;
            with_facts(plan, o, Box::new(dut), None, &mut notes)?
        }
        TargetPlan::Device { path, expect, via } => {
            let roots = SysRoots { sys: o.control_env.sysfs_root.join("sys"), dev: o.control_env.dev_root.join("dev") };
            let queue_depth = plan.scenario.workload.queue_depth as usize;
            let mut dut = RealDut::open(path.as_deref(), expect, via.as_ref(), queue_depth, begun, roots.clone())?;
            if matches!(plan.cut, crate::scenario::CutPlacement::DuringFormat { .. }) {
                dut = dut.formatting()?;
            }
            let drive = drive_declares(dut.path(), &roots, &mut notes);
            let (reads, said) = super::declared_reads(drive.as_ref());
            declared = reads;
            notes.extend(said.filter(|_| !plan.scenario.workload.ops.mix().unwrap_or_default().writes_only()));
            let shutdown = match normal_shutdowns(plan) {
                true => Some(NvmeShutdown::of_namespace(dut.path(), &roots).map_err(|source| ControllerError::Shutdown {
                    what: format!("{} (a normal_shutdown needs an NVMe namespace on PCIe)", dut.path().display()),
                    source,
                })?),
                false => None,
            };
            let mut opened = with_facts(plan, o, Box::new(dut), drive.as_ref(), &mut notes)?;
            if let Some(s) = shutdown {
                opened.1 = opened.1.with_shutdown(Box::new(s));
            }
            opened
        }
    };

    let mut devs = vec![dut];
    let identity = devs[0].facts()?.identity;
    Ok(Devices { devs, cutter, identity, sector, capacity, atomic, declared_reads: declared, notes, _keep: keep, saves: None })
}

/// What the NVMe namespace at `path` declares of its atomicity (`None`: not NVMe, or not
/// readable, which `notes` then says).
pub(super) fn drive_declares(path: &Path, roots: &SysRoots, notes: &mut Vec<String>) -> Option<Declared> {
    declared(path, roots).unwrap_or_else(|e| {
        notes.push(format!("atomic unit: the namespace's Identify could not be read ({e}): held to the scenario's or one sector"));
        None
    })
}

/// A real device's sector and size, as it reports them, the atomic unit it is held to (the
/// note saying why in `notes`), and the fault's controller.
#[expect(clippy::type_complexity, reason = "one_port's tuple, built once a target kind")]
fn with_facts(
    plan: &RunPlan,
    o: &RunnerOptions,
    mut dut: Box<dyn Dut>,
    drive: Option<&Declared>,
    notes: &mut Vec<String>,
) -> Result<(Box<dyn Dut>, Cutter, Emulator, u64, u64, u64), OpenError> {
    let facts = dut.facts()?;
    let sector = facts.sector_bytes();
    let (atomic, why) = atomic_unit(plan.scenario.target.atomic_bytes, sector, drive)?;
    notes.extend(why);
    let cutter = real_cutter(&plan.faults, &o.control_env)?;
    Ok((dut, cutter, None, sector, atomic, facts.capacity_bytes))
}
