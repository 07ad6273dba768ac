//! The simulated dual-port drive's ports for the dual-port runner: two port handles on one
//! media and cache, its link controller (`controllers.link = "sim"`) for port pulls and
//! controller resets, its power switch for cuts that hit both ports.

use super::device::{require_all, DriveSaver, PortDev, Ports};
use super::error::OpenPortsError;
use crate::format::Format;
use crate::ledger::Ledger;
use crate::port::PortId;
use crate::runner::dut::{DutCycleError, DutError, GroundTruth};
use crate::runner::fault::{sim_switch, ControllerError, Cutter};
use crate::runner::RunnerOptions;
use crate::scenario::{DualPlan, DualSimModel, FaultPlan, RunPlan, SimSwitch, SimTarget, Switch};
use crate::workload::Layout;
use crate::writer::prefill_then;
use crate::writer::HookError;
use faultline_drivers::control::{self, parse_spec};
use faultline_drivers::{AlignedBuf, BlockTarget};
use faultline_fixtures::emu::QuarchEmu;
use faultline_fixtures::{DualConfig, DualModel, DualSim, SimPort};
use std::path::Path;
use std::time::{Duration, Instant};

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

struct SimPortDev {
    port: SimPort,
    /// Port A's handle answers for the drive: its ground truth and its saving.
    drive: Option<DualSim>,
    /// The drive, saved after a prefill through any port.
    saver: DualSim,
}

impl PortDev for SimPortDev {
    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        Ok(&mut self.port)
    }

    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Duration, DutError> {
        let start = Instant::now();
        let mut buf = AlignedBuf::zeroed(4096);
        loop {
            match self.port.read_at(at, &mut buf) {
                Ok(()) => return Ok(start.elapsed()),
                Err(e) if !e.device_gone() => return Ok(start.elapsed()),
                Err(e) if start.elapsed() >= timeout => {
                    return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last: e.to_string() })
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    fn atomic_bytes(&self) -> u64 {
        self.port.geometry().physical_block_bytes as u64
    }

    fn persist(&mut self) -> std::io::Result<()> {
        self.drive.as_ref().map_or(Ok(()), DualSim::persist)
    }

    fn saver(&self) -> Option<DriveSaver> {
        let d = self.drive.clone()?;
        Some(Box::new(move || d.persist()))
    }

    fn growth_bytes(&self) -> u64 {
        self.drive.as_ref().map_or(0, DualSim::media_growth_bytes)
    }

    fn prefill(&mut self, layout: &Layout, format: &Format, port: PortId, ledger: &mut dyn Ledger) -> Result<u64, DutCycleError> {
        let saver = self.saver.clone();
        let mut persist = || -> Result<(), HookError> {
            saver.persist().map_err(|e| HookError::from(format!("cannot save the simulated drive after the prefill: {e}")))
        };
        Ok(prefill_then(&mut self.port, layout, format, port, ledger, &mut persist)?)
    }

    fn ground_truth(&self) -> Option<GroundTruth> {
        let d = self.drive.as_ref()?;
        Some(GroundTruth { extents: d.truth(), dead: false, disturbed: d.disturbances().iter().map(|x| (x.port, x.cut)).collect() })
    }
}

pub(super) fn open(plan: &RunPlan, dual: &DualPlan, t: &SimTarget, run_dir: &Path, o: &RunnerOptions) -> Result<Ports, OpenPortsError> {
    let d = t.dual.ok_or(OpenPortsError::SingleSim)?;
    let cfg = crate::runner::setup::sim_config(plan, t);
    let dcfg = DualConfig { model: d.model.dual_model(), ports: 2, port_mbps: Some(d.port_mbps).filter(|&m| m > 0) };
    let drive = DualSim::persistent(cfg, dcfg, run_dir).map_err(OpenPortsError::Sim)?;
    let power_switch = plan.faults.all().find_map(|f| match f {
        FaultPlan::PowerCut { switch: Switch::Sim(s), .. } => Some(*s),
        _ => None,
    });
    if plan.faults.all().any(|f| !matches!(f, FaultPlan::LinkReset { .. } | FaultPlan::PowerCut { switch: Switch::Sim(_), .. })) {
        return Err(OpenPortsError::Fault);
    }
    let port = dual.ports[dual.fault_ports[0]].fault_port.clone();
    let first_kind = plan.faults.all().find_map(|f| match f {
        FaultPlan::LinkReset { kind, .. } => Some(*kind),
        _ => None,
    });
    let (cutter, keep) = match (first_kind, power_switch) {
        (Some(kind), _) if t.switch == SimSwitch::QuarchHotplugSerial => {
            // The real Quarch driver, over a pty, to the hot-plug module's emulator in front
            // of the drive's ports: it pulls them, and switches the drive's power too.
            let emu = QuarchEmu::serial_dual(drive.power(), drive.link(), plan.seed).map_err(OpenPortsError::Emulator)?;
            let spec = parse_spec(&format!("quarch+serial://{}", emu.endpoint()))
                .map_err(|e| OpenPortsError::Controller(ControllerError::of(e)))?;
            let c = control::open(&spec, &o.control_env).map_err(|e| OpenPortsError::Controller(ControllerError::of(e)))?;
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
    require_all(&cutter, plan, dual)?;
    let devs: Vec<Box<dyn PortDev>> = (0..2u8)
        .map(|p| {
            Box::new(SimPortDev { port: drive.port(p), drive: (p == 0).then(|| drive.clone()), saver: drive.clone() }) as Box<dyn PortDev>
        })
        .collect();
    let identity = drive.identity();
    Ok(Ports { devs, cutter, identity, sector: t.sector_bytes as u64, capacity: t.capacity_bytes, notes: Vec::new(), _keep: keep })
}
