//! The simulated dual-port drive's ports, as the opener hands them out: two port handles on one
//! media and cache, its link controller (`controllers.link = "sim"`) for port pulls and
//! controller resets, its power switch for cuts that hit both ports.

use super::error::OpenPortsError;
use super::real::require_all;
use super::Devices;
use crate::format::Format;
use crate::ledger::Ledger;
use crate::port::PortId;
use crate::runner::dut::{
    local_calls, Dut, DutCycleError, DutError, FaultHook, GroundTruth, HealthLogs, HealthReadError, Readiness, Workload,
};
use crate::runner::fault::{sim_switch, Cutter};
use crate::runner::options::RunnerOptions;
use crate::scenario::{DualSimModel, FaultPlan, RunPlan, SimSwitch, SimTarget, Switch};
use crate::workload::Layout;
use crate::writer::{prefill_then, run_cycle, CycleOutcome, EndHook, HookError};
use faultline_drivers::control::{self, parse_spec};
use faultline_drivers::BlockTarget;
use faultline_fixtures::emu::QuarchEmu;
use faultline_fixtures::{DualConfig, DualModel, DualSim, SimPort};
use std::path::Path;
use std::time::Duration;

impl DualSimModel {
    pub fn dual_model(self) -> DualModel {
        match self {
            DualSimModel::DualHonest => DualModel::Honest,
            DualSimModel::DualFreezeOnPull { stall_ms } => DualModel::FreezeOnPull { stall_ms },
            DualSimModel::DualGhostWrites { after_writes } => DualModel::GhostWrites { after_writes },
            DualSimModel::DualStalePort { for_ms } => DualModel::StalePort { for_ms },
            DualSimModel::DualDropCacheOnReset => DualModel::DropCacheOnReset,
            DualSimModel::DualLoseCacheAtCut => DualModel::LoseCacheAtCut,
        }
    }
}

/// One port of the simulated dual-port drive.
struct SimPortDut {
    port: SimPort,
    /// Port A answers for the drive: its ground truth, its growth, the save after a cycle.
    answers_for_drive: bool,
    drive: DualSim,
}

impl SimPortDut {
    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        Ok(&mut self.port)
    }
}

impl Dut for SimPortDut {
    local_calls!();

    /// The drive is saved before the writer records what it holds durable: at the cut, and
    /// again right before it records its cycle's end (the ports a fault did not hit go on
    /// writing after the fault), so that a harness killed after a record resumes on a drive
    /// that holds it. A save holds the drive only while it takes the changes
    /// (`DualSim::persist`).
    fn run_cycle(&mut self, w: &Workload<'_>, ledger: &mut dyn Ledger, fault: &mut FaultHook<'_>) -> Result<CycleOutcome, DutCycleError> {
        let mut opts = w.opts.clone();
        let (drive, then) = (self.drive.clone(), opts.before_end.take());
        opts.before_end = Some(EndHook(std::sync::Arc::new(move || {
            if let Some(h) = &then {
                (h.0)()?;
            }
            drive.persist().map_err(|e| HookError::from(format!("cannot save the simulated drive: {e}")))
        })));
        let drive = self.drive.clone();
        let mut hook = || -> Result<(), HookError> {
            let faulted = fault();
            // Whether or not the fault worked: a failed one still ends the cycle as a cut.
            drive.persist().map_err(|e| HookError::from(format!("cannot save the simulated drive after the cut: {e}")))?;
            Ok(faulted?)
        };
        Ok(run_cycle(&mut self.port, w.layout, w.format, ledger, w.contract, &opts, &mut hook)?)
    }

    fn prefill(&mut self, layout: &Layout, format: &Format, port: PortId, ledger: &mut dyn Ledger) -> Result<u64, DutCycleError> {
        let drive = self.drive.clone();
        let mut persist = || -> Result<(), HookError> {
            drive.persist().map_err(|e| HookError::from(format!("cannot save the simulated drive after the prefill: {e}")))
        };
        Ok(prefill_then(&mut self.port, layout, format, port, ledger, &mut persist)?)
    }

    fn ground_truth(&self) -> Option<GroundTruth> {
        let d = self.answers_for_drive.then_some(&self.drive)?;
        Some(GroundTruth { extents: d.truth(), dead: false, disturbed: d.disturbances().iter().map(|x| (x.port, x.cut)).collect() })
    }

    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        crate::runner::dut::sim_wait_ready(&mut self.port, at, timeout)
    }

    fn release(&mut self) {}

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        None
    }

    fn checkpoint_every(&self) -> Duration {
        Duration::MAX
    }

    fn growth_bytes(&self) -> u64 {
        if self.answers_for_drive {
            self.drive.media_growth_bytes()
        } else {
            0
        }
    }

    fn notes(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn save(&mut self) -> Result<(), DutError> {
        if self.answers_for_drive {
            self.drive.persist().map_err(|e| DutError::Persist(crate::runner::dut::Shared::new(e)))?;
        }
        Ok(())
    }
}

pub(super) fn open(plan: &RunPlan, t: &SimTarget, run_dir: &Path, o: &RunnerOptions) -> Result<Devices, OpenPortsError> {
    let d = t.dual.ok_or(OpenPortsError::SingleSim)?;
    let cfg = super::sim_config(plan, t);
    let dcfg = DualConfig { model: d.model.dual_model(), ports: 2, port_mbps: Some(d.port_mbps).filter(|&m| m > 0) };
    let drive = DualSim::persistent(cfg, dcfg, run_dir).map_err(OpenPortsError::Sim)?;
    if plan.ports.iter().any(|p| p.remote.is_some()) {
        return super::remote::open(plan, t, drive, run_dir, o);
    }
    let power_switch = plan.faults.all().find_map(|f| match f {
        FaultPlan::PowerCut { switch: Switch::Sim(s), .. } => Some(*s),
        _ => None,
    });
    if plan.faults.all().any(|f| !matches!(f, FaultPlan::LinkReset { .. } | FaultPlan::PowerCut { switch: Switch::Sim(_), .. })) {
        return Err(OpenPortsError::Fault);
    }
    let port = plan.ports[plan.fault_ports[0]].fault_name().to_string();
    let first_kind = plan.faults.all().find_map(|f| match f {
        FaultPlan::LinkReset { kind, .. } => Some(*kind),
        _ => None,
    });
    let (cutter, keep) = match (first_kind, power_switch) {
        (Some(kind), _) if t.switch == SimSwitch::QuarchHotplugSerial => {
            // The real Quarch driver, over a pty, to the hot-plug module's emulator in front
            // of the drive's ports: it pulls them, and switches the drive's power too.
            let emu = QuarchEmu::serial_dual(drive.power(), drive.link(), plan.seed).map_err(OpenPortsError::Emulator)?;
            let spec = parse_spec(&format!("quarch+serial://{}", emu.endpoint())).map_err(|e| OpenPortsError::Controller(e.into()))?;
            let c = control::open(&spec, &o.control_env).map_err(|e| OpenPortsError::Controller(e.into()))?;
            let mut cutter = Cutter::link(c.link.ok_or(OpenPortsError::NoLink)?, port, kind);
            if let (Some(p), Some(_)) = (c.power, power_switch) {
                cutter = cutter.joined(Cutter::power(p));
            }
            (cutter, Some(Box::new(emu) as Box<dyn std::any::Any>))
        }
        (Some(kind), power_switch) => {
            let (mut cutter, mut keep) = (Cutter::link(Box::new(drive.link()), port, kind), None);
            if let Some(s) = power_switch {
                let (p, k) = sim_switch(s, drive.power(), plan.seed, &o.control_env).map_err(OpenPortsError::Controller)?;
                (cutter, keep) = (cutter.joined(p), k);
            }
            (cutter, keep)
        }
        (None, Some(s)) => sim_switch(s, drive.power(), plan.seed, &o.control_env).map_err(OpenPortsError::Controller)?,
        (None, None) => return Err(OpenPortsError::Fault),
    };
    require_all(&cutter, plan)?;
    let devs: Vec<Box<dyn Dut>> = (0..2u8)
        .map(|p| Box::new(SimPortDut { port: drive.port(p), answers_for_drive: p == 0, drive: drive.clone() }) as Box<dyn Dut>)
        .collect();
    let identity = drive.identity();
    let atomic = drive.port(0).geometry().physical_block_bytes as u64;
    let (sector, capacity) = (t.sector_bytes as u64, t.capacity_bytes);
    Ok(Devices { devs, cutter, identity, sector, capacity, atomic: atomic.max(sector), notes: Vec::new(), _keep: keep, saves: None })
}
