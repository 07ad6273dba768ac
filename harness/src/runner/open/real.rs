//! The ports of a real dual-port drive on this host: one block device per port (a per-path
//! node, a loop device of a two-path rig), each followed by the path it was given across a fault, never
//! re-found by an identity two paths of one drive share: when the device at the path is gone
//! or is another one (a re-plugged controller may come back as `nvme2`), the port is found
//! again by the namespace's identity plus its path's (the PCI function, else the cntlid, else
//! the controller), and only when exactly one path matches.

use super::super::dut::{local_calls, plain_writes, read_health, Dut, DutError, HealthLogs, HealthReadError, Readiness};
use super::super::fault::{real_cutter, Cutter};
use super::super::options::RunnerOptions;
use super::error::{OpenPortsError, ReopenPortError};
use super::{atomic_unit, Devices};
use crate::scenario::{FaultPlan, PortRole, RunPlan};
use faultline_drivers::blockdev::{find_path, scan_paths, Expectation, SysRoots};
use faultline_drivers::identity::PathId;
use faultline_drivers::{open_target, AlignedBuf, BlockTarget, LinkController, OpenSpec, ResetKind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A block device reached through one port, followed by its path.
struct RealPort {
    name: String,
    path: PathBuf,
    spec: OpenSpec,
    target: Option<Box<dyn BlockTarget>>,
    /// The identity the device at the path had when the run began: anything else found there
    /// after a fault is refused.
    identity: String,
    /// How to find the port again when its name changed: the namespace and the path
    /// selector (`None`: a device without a controller path, followed by its name only).
    refind: Option<(Expectation, PathId)>,
    /// Where the port was found again under another name, for the run's log.
    moved: Vec<String>,
    /// The thread that opened `target`. An io_uring engine is built single-issuer (Linux 6.1+
    /// answers a submission from any other thread with EEXIST), and a port is used by its
    /// writer's thread in a cycle and by the main thread's verify after it: the target is
    /// opened again on the thread that uses it, between cycles, when nothing is in flight.
    owner: std::thread::ThreadId,
    /// The health logs read when the port was opened (handed out by the first `health`), or
    /// `None` when the port has none (a loop device): then it is never asked again.
    first_health: Option<HealthLogs>,
    has_health: bool,
}

impl RealPort {
    fn reopen(&mut self) -> Result<(), ReopenPortError> {
        match self.open_at(&self.path.clone()) {
            Ok(()) => Ok(()),
            Err(at_path) => {
                let Some((expect, want)) = &self.refind else { return Err(at_path) };
                let m = match find_path(expect, want, &SysRoots::system()) {
                    Ok(m) => m,
                    Err(source) => {
                        let (port, want, source) = (self.name.clone(), want.to_string(), Box::new(source));
                        return Err(ReopenPortError::NotFound { at_path: Box::new(at_path), port, want, source });
                    }
                };
                if m.dev == self.path {
                    return Err(at_path);
                }
                self.open_at(&m.dev)?;
                self.moved.push(format!("{} is back as {} ({})", self.path.display(), m.dev.display(), m.path));
                self.path = m.dev;
                Ok(())
            }
        }
    }

    fn open_at(&mut self, path: &Path) -> Result<(), ReopenPortError> {
        let o = open_target(path, &self.spec).map_err(ReopenPortError::Open)?;
        let found = o.target.identity();
        if found != self.identity {
            return Err(ReopenPortError::Other { port: self.name.clone(), path: path.to_path_buf(), found, want: self.identity.clone() });
        }
        self.target = Some(o.target);
        self.owner = std::thread::current().id();
        Ok(())
    }
}

impl RealPort {
    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        if self.owner != std::thread::current().id() && self.target.as_ref().is_some_and(|t| t.in_flight() == 0) {
            self.target = None;
        }
        if self.target.is_none() {
            self.reopen().map_err(|e| DutError::NotBack(crate::runner::dut::Cause::of(e)))?;
        }
        match &mut self.target {
            Some(t) => Ok(t.as_mut()),
            None => Err(DutError::NotOpen(self.path.clone())),
        }
    }
}

impl Dut for RealPort {
    local_calls!();
    plain_writes!();

    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        let start = Instant::now();
        let mut last = crate::runner::dut::Cause::text("no attempt");
        let mut enumerate = None;
        // The fd opened before the fault points at the device that went away: open the path
        // again, whatever the old one says.
        self.target = None;
        loop {
            if self.target.is_none() {
                match self.reopen() {
                    Ok(()) => enumerate = Some(start.elapsed()),
                    Err(e) => last = crate::runner::dut::Cause::of(e),
                }
            }
            if let Some(t) = self.target.as_deref_mut() {
                t.set_read_timeout(Duration::from_secs(2));
                let mut buf = AlignedBuf::zeroed((t.geometry().logical_block_bytes as usize).max(512));
                match t.read_at(at, &mut buf) {
                    Ok(()) => return Ok(Readiness { enumerate, first_read: start.elapsed() }),
                    Err(e) if !e.device_gone() => return Ok(Readiness { enumerate, first_read: start.elapsed() }),
                    Err(e) => {
                        last = crate::runner::dut::Cause::of(e);
                        self.target = None;
                    }
                }
            }
            if start.elapsed() >= timeout {
                return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.moved)
    }

    fn release(&mut self) {
        self.target = None;
    }

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        if let Some(first) = self.first_health.take() {
            return Some(Ok(first));
        }
        self.has_health.then(|| read_health(&self.path, &SysRoots::system()))
    }

    fn checkpoint_every(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn growth_bytes(&self) -> u64 {
        0
    }
}

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
        let identity = opened.target.identity();
        let refind = path_selector(&path, expect, g.capacity_bytes);
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
        devs.push(Box::new(RealPort {
            name: p.name.clone(),
            path,
            spec,
            target: Some(opened.target),
            identity,
            refind,
            moved: Vec::new(),
            owner: std::thread::current().id(),
            has_health: first_health.is_some(),
            first_health,
        }));
    }
    let g = geometry.ok_or(OpenPortsError::NoPorts)?;
    let sector = (g.logical_block_bytes as u64).max(512);
    // As the single-port runner: the unit the scenario declares, else one sector.
    let atomic = atomic_unit(plan.scenario.target.atomic_bytes, sector)?;
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
    Ok(Devices { devs, cutter, identity, sector, capacity: g.capacity_bytes, atomic, notes, _keep: None, saves: None })
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
