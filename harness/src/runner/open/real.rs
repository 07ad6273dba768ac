//! The ports of a real dual-port drive on this host: one block device per port (a per-path
//! node, a loop device of a two-path rig), each a [`RealDut::port`] followed across a fault by
//! the path it goes through: found again by the namespace's identity plus its path's (the PCI
//! function, else the cntlid, else the controller; a re-plugged controller may come back as
//! `nvme2`), only when exactly one path matches, never by an identity the drive's paths share.
//! A device without a controller path (a loop device) is followed by its name.

use super::super::dut::{read_health, Dut, RealDut};
use super::super::fault::{real_cutter, Cutter};
use super::super::options::RunnerOptions;
use super::error::OpenPortsError;
use super::{atomic_unit, Devices};
use crate::scenario::{FaultPlan, PortRole, RunPlan};
use faultline_drivers::blockdev::{scan_paths, Expectation, SysRoots};
use faultline_drivers::identity::PathId;
use faultline_drivers::{open_target, LinkController, OpenSpec, ResetKind};
use std::path::Path;

/// Opens every port of a real dual-port drive on this host, and the fault's controller.
pub(super) fn open(plan: &RunPlan, expect: &Expectation, o: &RunnerOptions) -> Result<Devices, OpenPortsError> {
    let qd = plan.scenario.workload.queue_depth as usize;
    let mut devs: Vec<Box<dyn Dut>> = Vec::new();
    let mut notes = Vec::new();
    let mut geometry = None;
    for p in &plan.ports {
        let path = p.path.clone().ok_or_else(|| OpenPortsError::NoPath(p.name.clone()))?;
        // A port that writes nothing is opened read-only (no O_EXCL claim): the multipath head
        // can then be both the writer and the idle port that names the path a fault pulls.
        let writable = p.role == PortRole::Writer;
        let spec = OpenSpec { writable, queue_depth: qd, expect: expect.clone(), allow_overwrite_signature: false, io_threads: 1 };
        let opened = open_target(&path, &spec).map_err(|source| OpenPortsError::Open { port: p.name.clone(), source })?;
        let g = opened.target.geometry();
        match geometry {
            None => geometry = Some(g),
            Some(g0) if g0.capacity_bytes != g.capacity_bytes || g0.logical_block_bytes != g.logical_block_bytes => {
                return Err(OpenPortsError::Namespace {
                    port: p.name.clone(),
                    path,
                    capacity: g.capacity_bytes,
                    sector: g.logical_block_bytes,
                    first_capacity: g0.capacity_bytes,
                    first_sector: g0.logical_block_bytes,
                })
            }
            Some(_) => {}
        }
        notes.extend(opened.notes.into_iter().map(|n| format!("port {}: {n}", p.name)));
        let follow = path_selector(&path, expect, g.capacity_bytes);
        // Each port's controller reports its own health: a dual-port power cut is one unsafe
        // shutdown through each.
        let first_health = match path.to_str().is_some_and(faultline_drivers::nbd::looks_like_nbd) {
            true => {
                notes.push(format!(
                    "port {}: no SMART/health checks: {} is an NBD export, which has no health logs",
                    p.name,
                    path.display()
                ));
                None
            }
            false => match read_health(&path, &SysRoots::system()) {
                Ok(logs) => Some(logs),
                Err(why) => {
                    notes.push(format!("port {}: no SMART/health checks: {why}", p.name));
                    None
                }
            },
        };
        let mut spec = spec;
        spec.allow_overwrite_signature = true;
        devs.push(Box::new(RealDut::port(path, spec, opened.target, follow, first_health)));
    }
    let g = geometry.ok_or(OpenPortsError::NoPorts)?;
    let sector = (g.logical_block_bytes as u64).max(512);
    // As the single-port runner: the unit the scenario declares, else the namespace's own
    // (read through the first port), else one sector.
    let drive = match &plan.ports[0].path {
        Some(p) if !p.to_str().is_some_and(faultline_drivers::nbd::looks_like_nbd) => {
            super::devices::drive_declares(p, &SysRoots::system(), &mut notes)
        }
        _ => None,
    };
    let (atomic, why) = atomic_unit(plan.scenario.target.atomic_bytes, sector, drive.as_ref())?;
    notes.extend(why);
    let (declared_reads, said) = super::declared_reads(drive.as_ref());
    notes.extend(said.filter(|_| !plan.scenario.workload.ops.mix().unwrap_or_default().writes_only()));
    // A link reset hits the port the cycle faults: opened aimed at the first faulted port.
    let mut faults = plan.faults.clone();
    for (f, _) in faults.entries.iter_mut() {
        if let FaultPlan::LinkReset { port, .. } = f {
            *port = Some(plan.ports[plan.fault_ports[0]].fault_name().to_string());
        }
    }
    let cutter = real_cutter(&faults, &o.control_env).map_err(OpenPortsError::Controller)?;
    require_all(&cutter, plan)?;
    let port = plan.ports[0].name.clone();
    let identity = devs[0].facts().map_err(|source| OpenPortsError::NotOpen { port, source })?.identity;
    Ok(Devices { devs, cutter, identity, sector, capacity: g.capacity_bytes, atomic, declared_reads, notes, _keep: None, saves: None })
}

/// Checks that the link controller can do every link reset of the run on every port the
/// scenario faults.
pub(super) fn require_all(cutter: &Cutter, plan: &RunPlan) -> Result<(), OpenPortsError> {
    let Some(ctl) = cutter.link_controller() else { return Ok(()) };
    for f in plan.faults.all() {
        if let FaultPlan::LinkReset { kind, .. } = f {
            require(ctl, plan, *kind)?;
        }
    }
    Ok(())
}

/// Checks that the link controller can fault every port the scenario faults.
pub(super) fn require(ctl: &dyn LinkController, plan: &RunPlan, kind: ResetKind) -> Result<(), OpenPortsError> {
    for &i in &plan.fault_ports {
        ctl.require(plan.ports[i].fault_name(), kind)
            .map_err(|source| OpenPortsError::Require { port: plan.ports[i].name.clone(), source })?;
    }
    Ok(())
}

/// How to find the port at `path` again if its name changes: the namespace (the scenario's
/// expectation with the size, so a partition is not the disk) and the path it goes through,
/// selected by its PCI function when it has one (a re-plug may hand out another cntlid and
/// controller name), else its cntlid or controller. `None` for a device without a controller
/// path (a loop device): followed by its name only.
fn path_selector(path: &Path, expect: &Expectation, capacity: u64) -> Option<(Expectation, PathId)> {
    if expect.is_empty() {
        return None;
    }
    let expect = Expectation { size_bytes: Some(capacity), ..expect.clone() };
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let here = canon(path);
    let m = scan_paths(&SysRoots::system()).ok()?.into_iter().find(|m| canon(&m.dev) == here)?;
    let p = m.path;
    let want = match (p.pci_address, p.cntlid, p.controller) {
        (Some(a), _, _) => PathId { pci_address: Some(a), ..PathId::default() },
        (None, Some(c), _) => PathId { cntlid: Some(c), ..PathId::default() },
        (None, None, Some(c)) => PathId { controller: Some(c), ..PathId::default() },
        (None, None, None) => return None,
    };
    Some((expect, want))
}
