//! The simulated dual-port drive's ports, as the opener hands them out: two port Duts
//! ([`SimDut::port`]) on one media and cache, its link controller (`controllers.link = "sim"`) for port pulls and
//! controller resets, its power switch for cuts that hit both ports.

use super::error::OpenPortsError;
use super::real::require_all;
use super::Devices;
use crate::runner::dut::{Dut, SimDut};
use crate::runner::fault::{sim_switch, Cutter};
use crate::runner::options::RunnerOptions;
use crate::scenario::{DualSimModel, FaultPlan, RunPlan, SimSwitch, SimTarget, Switch};
use faultline_drivers::control::{self, parse_spec};
use faultline_drivers::BlockTarget;
use faultline_fixtures::emu::QuarchEmu;
use faultline_fixtures::{DualConfig, DualModel, DualSim};
use std::path::Path;

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
    let devs: Vec<Box<dyn Dut>> = (0..2u8).map(|p| Box::new(SimDut::port(&drive, p)) as Box<dyn Dut>).collect();
    let identity = drive.identity();
    let atomic = drive.port(0).geometry().physical_block_bytes as u64;
    let (sector, capacity) = (t.sector_bytes as u64, t.capacity_bytes);
    Ok(Devices {
        devs,
        cutter,
        identity,
        sector,
        capacity,
        atomic: atomic.max(sector),
        declared_reads: None,
        notes: Vec::new(),
        _keep: keep,
        saves: None,
    })
}
