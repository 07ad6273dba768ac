//! A real block device in this host as the device under test ([`RealDut`]): opened by path
//! or identity, refused when its identity is ambiguous, found again after a fault by its
//! identity and the path it goes through (controller, cntlid, PCI address), and its NVMe
//! health logs read.

use super::*;
use faultline_drivers::formatting::{formatting, FormatOpenError};

/// A real block device in this host, and how to find it again after a fault.
pub struct RealDut {
    /// Where it was last found.
    path: PathBuf,
    spec: OpenSpec,
    target: Option<Box<dyn BlockTarget>>,
    /// Its identity, to find it again by when it comes back under another name (`nvme0n1` as
    /// `nvme1n1`); `None` when sysfs names nothing stable (a regular file): found by path.
    find: Option<Expectation>,
    /// The path the run goes through (controller, cntlid, PCI address), followed across
    /// faults: one namespace may have several paths (a dual-port drive with multipath off).
    via: Option<PathId>,
    roots: SysRoots,
    /// The target is an NVMe controller's character device (the passthrough engine): after a
    /// fault it is found again among the controllers, by `via` and the namespace's identity.
    controller: bool,
    /// The target is a namespace's generic character device (`/dev/ng0n2`, the passthrough
    /// engine): after a fault its block device is found again (by identity and `via`, the
    /// path of its controller), and the run goes on through that device's generic node.
    generic: bool,
    /// The run's target identity (the ledger header's): anything else is refused.
    identity: Option<String>,
    /// Whether the health logs can be read (an NVMe device).
    has_health: bool,
    /// The reading taken when the device was opened, handed out by the first `health()`.
    first_health: Option<HealthLogs>,
    notes: Vec<String>,
    /// The run formats the namespace (`cut.kind = "during_format"`): its engine is wrapped to
    /// (`faultline_drivers::formatting`), again at each reopening.
    format: bool,
    /// The thread that opened `target`. An io_uring engine is built single-issuer (Linux 6.1+
    /// answers a submission from any other thread with EEXIST), and a port of a run's table is
    /// used by its writer's thread in a cycle and by the main thread's verify after it: the
    /// target is opened again on the thread that uses it, between cycles, when nothing is in
    /// flight.
    owner: std::thread::ThreadId,
}

impl RealDut {
    /// Opens the device at `path` (or found by `expect` when there is none). `begun`: the
    /// device carries this run's data already (its signature was probed when the run began).
    /// `select`: which path of the namespace to go through when `expect` names one with several
    /// (the scenario's `target.cntlid`, `pci_address` or `controller`).
    pub fn open(
        path: Option<&Path>,
        expect: &Expectation,
        select: Option<&PathId>,
        queue_depth: usize,
        begun: bool,
        roots: SysRoots,
    ) -> Result<RealDut, DutError> {
        let path_given = path.is_some();
        let (path, via) = match select {
            Some(want) if path.is_none() => {
                let m = find_path(expect, want, &roots).map_err(|e| DutError::Find(Shared::new(e)))?;
                (m.dev, Some(m.path))
            }
            _ => first_path(path, expect, &roots)?,
        };
        let mut spec = OpenSpec { writable: true, queue_depth, expect: expect.clone(), allow_overwrite_signature: begun, io_threads: 1 };
        let opened = open_target(&path, &spec).map_err(|e| DutError::Open(Shared::new(e)))?;
        // From here on the device carries this run's data: re-opening it after a fault must not
        // refuse it for what a signature probe might see in that data.
        spec.allow_overwrite_signature = true;
        let g = opened.target.geometry();
        let mut notes = opened.notes;
        // After a fault the device may come back under another name: it is found again by the
        // scenario's identity or, when the scenario gives only a path, by what sysfs says of
        // the device there now.
        let block = generic_block(&path, &roots);
        let (controller, generic) = (is_char_device(&path) && block.is_none(), block.is_some());
        let given_path = path_given;
        let find = match (expect.is_empty(), controller) {
            // A generic device is followed by its namespace's identity (its WWID tells it from
            // the controller's other namespaces), with what the scenario says of it.
            _ if generic => namespace_of_char(&path, &roots).map(|ns| expect.or(&expectation_of(&ns.identity))),
            // A device named by its path is found again with its size too: a serial alone
            // matches the disk and each of its partitions, so a partition would be ambiguous.
            (false, false) if given_path && expect.size_bytes.is_none() => {
                Some(Expectation { size_bytes: Some(g.capacity_bytes), ..expect.clone() })
            }
            (false, _) => Some(expect.clone()),
            (true, false) => derived_expectation(&path, g.capacity_bytes, g.logical_block_bytes),
            (true, true) => namespace_of_char(&path, &roots).map(|ns| expectation_of(&ns.identity)),
        };
        let first_health = match read_health(block.as_deref().unwrap_or(&path), &roots) {
            Ok(logs) => Some(logs),
            Err(why) => {
                notes.push(format!("no SMART/health checks: {why}"));
                None
            }
        };
        notes.extend(health_notes(first_health.as_ref()));
        let has_health = first_health.is_some();
        // A path found by a derived identity (the scenario gave only a path) is followed by it.
        let via = match (via, &find) {
            (Some(v), _) => Some(v),
            (None, Some(f)) if given_path && !controller => path_of(block.as_deref().unwrap_or(&path), f, &roots),
            _ => None,
        };
        Ok(RealDut {
            path,
            spec,
            target: Some(opened.target),
            find,
            via,
            roots,
            controller,
            generic,
            identity: None,
            has_health,
            first_health,
            notes,
            format: false,
            owner: std::thread::current().id(),
        })
    }

    /// The run formats the namespace: its engine formats it, here and after every fault.
    pub fn formatting(mut self) -> Result<RealDut, DutError> {
        self.format = true;
        if let Some(t) = self.target.take() {
            self.target = Some(self.formats(t).map_err(|e| DutError::Format(Shared::new(e)))?);
        }
        Ok(self)
    }

    /// `t`, the engine of the namespace at `self.path`, made to format it too.
    fn formats(&self, t: Box<dyn BlockTarget>) -> Result<Box<dyn BlockTarget>, FormatOpenError> {
        if self.controller {
            return Err(FormatOpenError::Controller(self.path.clone()));
        }
        let block = if self.generic { generic_block(&self.path, &self.roots).unwrap_or_default() } else { self.path.clone() };
        Ok(Box::new(formatting(&block, t, &self.roots)?))
    }

    /// Where the device was last found.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// One port of a drive the run reaches through several (a path of a dual-port drive, a
    /// loop device of a two-path rig), opened by the opener: held to the identity it had then,
    /// and followed by its path (`follow`: the namespace and the path's selector, `None` for a
    /// device without a controller path, followed by its name).
    pub(crate) fn port(
        path: PathBuf,
        spec: OpenSpec,
        opened: Box<dyn BlockTarget>,
        follow: Option<(Expectation, PathId)>,
        first_health: Option<HealthLogs>,
    ) -> RealDut {
        let (find, via) = follow.map_or((None, None), |(e, p)| (Some(e), Some(p)));
        RealDut {
            path,
            spec,
            identity: Some(opened.identity()),
            target: Some(opened),
            find,
            via,
            roots: SysRoots::system(),
            controller: false,
            generic: false,
            has_health: first_health.is_some(),
            notes: health_notes(first_health.as_ref()),
            first_health,
            format: false,
            owner: std::thread::current().id(),
        }
    }

    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        if self.owner != std::thread::current().id() && self.target.as_ref().is_some_and(|t| t.in_flight() == 0) {
            self.target = None;
            self.reopen().map_err(|e| match e {
                Refind::NotYet(c) => DutError::NotBack(c),
                Refind::Ambiguous(a) => DutError::Ambiguous(a),
            })?;
        }
        match &mut self.target {
            Some(t) => Ok(t.as_mut()),
            None => Err(DutError::NotOpen(self.path.clone())),
        }
    }

    /// Finds the device again (by identity when it has one) and opens it on this thread,
    /// refusing anything that is not the run's target; a device found under another name is
    /// noted.
    fn reopen(&mut self) -> Result<(), Refind> {
        let path = if let (true, Some(via)) = (self.controller, &self.via) {
            let expect = self.find.clone().unwrap_or_default();
            match find_controller(&expect, via, &self.roots) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    return Err(Refind::NotYet(Cause::text(format!("no NVMe controller is {via} with {} (yet)", expect.summary()))))
                }
                Err(e) => return Err(Refind::Ambiguous(Ambiguity::Controllers(Shared::new(e)))),
            }
        } else if let Some(e) = &self.find {
            let found = refind(e, self.via.as_ref(), &self.roots)?;
            if self.generic {
                generic_node(&found, &self.roots)
                    .ok_or_else(|| Refind::NotYet(Cause::text(format!("{} is back without its generic device (yet)", found.display()))))?
            } else {
                found
            }
        } else {
            self.path.clone()
        };
        let mut o = open_target(&path, &self.spec).map_err(|e| Refind::NotYet(Cause::of(e)))?;
        if self.format {
            o.target = self.formats(o.target).map_err(|e| Refind::NotYet(Cause::of(e)))?;
        }
        let found = o.target.identity();
        if let Some(want) = self.identity.as_ref().filter(|want| **want != found) {
            return Err(Refind::NotYet(Cause::text(format!("{} is now {found}, not the run's target {want}", path.display()))));
        }
        // Where it was last opened, so that a name found but not yet openable is not taken
        // for where the device is, and its move is noted once it opens there.
        if path != self.path {
            let via = self.via.as_ref().map_or_else(String::new, |v| format!(" ({v})"));
            self.notes.push(format!("{} is back as {}{via}", self.path.display(), path.display()));
            self.path = path;
        }
        self.target = Some(o.target);
        self.owner = std::thread::current().id();
        Ok(())
    }
}

impl Dut for RealDut {
    local_calls!();
    plain_writes!();

    /// The target opened before the fault may be the device that went away (a removed disk
    /// answers a read with 0 bytes, which is no error): opened again, whatever the old one says.
    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        self.target = None;
        wait_reopening(self, at, timeout)
    }

    fn release(&mut self) {
        self.target = None;
    }

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        if let Some(first) = self.first_health.take() {
            return Some(Ok(first));
        }
        let block = if self.generic { generic_block(&self.path, &self.roots) } else { None };
        self.has_health.then(|| read_health(block.as_deref().unwrap_or(&self.path), &self.roots))
    }

    fn checkpoint_every(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn growth_bytes(&self) -> u64 {
        0
    }

    fn notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// A port of a run's table holds the identity it was opened with already.
    fn bind(&mut self, identity: String) {
        self.identity.get_or_insert(identity);
    }
}

impl Reopen for RealDut {
    fn slot(&mut self) -> &mut Option<Box<dyn BlockTarget>> {
        &mut self.target
    }
    fn reopen(&mut self) -> Result<(), Refind> {
        RealDut::reopen(self)
    }
}

/// A device that goes away in a fault and is found again (opened anew) after it.
pub(super) trait Reopen {
    /// Where the open target is kept (`None` while it is away).
    fn slot(&mut self) -> &mut Option<Box<dyn BlockTarget>>;
    /// Finds the device again and opens it into the slot.
    fn reopen(&mut self) -> Result<(), Refind>;
}

/// Waits until the device answers a read of `at`, finding it again while it is away, and
/// letting go of it again while it answers as gone.
pub(super) fn wait_reopening(d: &mut dyn Reopen, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
    let start = Instant::now();
    let deadline = start + timeout;
    let mut last = Cause::text("no attempt");
    let mut enumerate = None;
    loop {
        if d.slot().is_none() {
            match d.reopen() {
                Ok(()) => enumerate = Some(start.elapsed()),
                Err(Refind::NotYet(e)) => last = e,
                Err(Refind::Ambiguous(e)) => return Err(DutError::Ambiguous(e)),
            }
        }
        if let Some(t) = d.slot().as_deref_mut() {
            match probe(t, at, deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100))) {
                // A read that fails for one bad block still shows a device that answers; the
                // verifier reports the block.
                Ok(()) => return Ok(Readiness { enumerate, first_read: start.elapsed() }),
                Err(e) if !e.device_gone() => return Ok(Readiness { enumerate, first_read: start.elapsed() }),
                Err(e) => {
                    last = Cause::of(e);
                    *d.slot() = None;
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Why a device could not be found again after a fault.
#[derive(Clone, Debug)]
pub(super) enum Refind {
    /// Not there (yet): keep waiting until the readiness timeout.
    NotYet(Cause),
    /// More than one device could be it: waiting will not tell them apart.
    Ambiguous(Ambiguity),
}

/// The device a run starts on, and the path it goes through when its namespace has several.
/// With a path, that device (its path recorded when sysfs names one). With an identity alone,
/// its one namespace; if that namespace has several paths (the two ports of a dual-port drive
/// with `nvme_core.multipath=N`), nothing says which to go through: refused before cycle 1.
fn first_path(path: Option<&Path>, expect: &Expectation, roots: &SysRoots) -> Result<(PathBuf, Option<PathId>), DutError> {
    if let Some(p) = path.filter(|p| is_char_device(p)) {
        // An NVMe controller: the path is the controller itself. A generic device's path is
        // its block device's, found once the expectation is known.
        return Ok((p.to_path_buf(), namespace_of_char(p, roots).map(|ns| ns.path).filter(is_controller_path)));
    }
    if let Some(p) = path {
        return Ok((p.to_path_buf(), if expect.is_empty() { None } else { path_of(p, expect, roots) }));
    }
    let paths = find_namespace_paths(expect, roots).map_err(|e| DutError::Find(Shared::new(e)))?;
    match &paths[..] {
        [one] => Ok((one.dev.clone(), Some(one.path.clone()).filter(is_controller_path))),
        several => Err(DutError::Paths {
            expect: expect.summary(),
            paths: several.iter().map(|m| m.path.to_string()).collect(),
            first: several[0].dev.clone(),
            cntlid: several[0].path.cntlid,
        }),
    }
}

fn is_char_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

/// The namespace behind an NVMe controller's character device, or a namespace's generic
/// device, as sysfs shows it.
fn namespace_of_char(dev: &Path, roots: &SysRoots) -> Option<ControllerNamespace> {
    let canon = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let name = canon.file_name()?.to_string_lossy().into_owned();
    controller_namespace(&name, roots, dev).or_else(|_| generic_namespace(&name, roots, dev)).ok()
}

/// The block device of the namespace whose generic device is `dev` (`/dev/ng0n2`:
/// `/dev/nvme0n2`); `None` for anything else.
fn generic_block(dev: &Path, roots: &SysRoots) -> Option<PathBuf> {
    let canon = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let name = canon.file_name()?.to_string_lossy().into_owned();
    if !roots.sys.join("class/nvme-generic").join(&name).exists() {
        return None;
    }
    generic_namespace(&name, roots, dev).ok()?.block_dev
}

/// The generic device of the namespace block device `block` (`/dev/nvme2n2`: `/dev/ng2n2`),
/// when it has one.
fn generic_node(block: &Path, roots: &SysRoots) -> Option<PathBuf> {
    let canon = std::fs::canonicalize(block).unwrap_or_else(|_| block.to_path_buf());
    let ng = canon.file_name()?.to_str()?.strip_prefix("nvme").map(|n| format!("ng{n}"))?;
    roots.sys.join("class/nvme-generic").join(&ng).exists().then(|| roots.dev.join(ng))
}

/// An identity as an expectation to find it again by.
fn expectation_of(id: &DeviceIdentity) -> Expectation {
    let some = |v: &str| (!v.trim().is_empty()).then(|| v.to_string());
    Expectation {
        serial: some(&id.serial),
        wwid: some(&id.wwid),
        model: some(&id.model),
        backing_file: None,
        size_bytes: Some(id.capacity_bytes),
    }
}

/// The path (controller, cntlid, PCI address) of the device at `dev`, when sysfs names one.
fn path_of(dev: &Path, expect: &Expectation, roots: &SysRoots) -> Option<PathId> {
    let want = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let same = |m: &PathMatch| std::fs::canonicalize(&m.dev).unwrap_or_else(|_| m.dev.clone()) == want;
    // Only a controller names a path that survives re-enumeration; a device name alone (a loop
    // device, a SCSI disk) does not, and such a device is found again by its identity.
    find_namespace_paths(expect, roots).ok()?.into_iter().find(same).map(|m| m.path).filter(is_controller_path)
}

fn is_controller_path(p: &PathId) -> bool {
    p.controller.is_some() || p.cntlid.is_some() || p.pci_address.is_some()
}

/// Finds the run's device again: by its path when it has one (the controller may come back
/// under another name), else by its identity alone.
fn refind(expect: &Expectation, via: Option<&PathId>, roots: &SysRoots) -> Result<PathBuf, Refind> {
    let found = match via {
        Some(v) => find_path(expect, v, roots).map(|m| m.dev),
        None => find_by_identity(expect, roots),
    };
    found.map_err(classify)
}

/// Matches in two namespaces, two paths selected, or two devices for an identity without a
/// path: ambiguous. Anything else (nothing there, the path not back): not yet.
fn classify(e: FindError) -> Refind {
    match &e {
        FindError::SeveralNamespaces { .. } | FindError::Ambiguous { .. } => Refind::Ambiguous(Ambiguity::Identity(Shared::new(e))),
        FindError::Path { selected, .. } if *selected > 1 => Refind::Ambiguous(Ambiguity::Identity(Shared::new(e))),
        _ => Refind::NotYet(Cause::of(e)),
    }
}

/// Reads the SMART/health log and, where the drive has it, the OCP extended log.
/// The run's notes on what of a drive's health cannot be judged: no Persistent Event Log, a
/// CAP register that cannot be read.
fn health_notes(first: Option<&HealthLogs>) -> Vec<String> {
    let Some(l) = first else { return Vec::new() };
    let mut out = Vec::new();
    match (&l.pel, &l.pel_unread) {
        (Some(_), _) => {}
        (None, Some(why)) => out.push(format!(
            "the drive's persistent event log (log 0x0d) could not be used: {why}; that each cut cycled its power rests on \
             the switch's read-back and the device going away"
        )),
        (None, None) => out.push(
            "the drive has no persistent event log (log 0x0d): that each cut cycled its power rests on the switch's read-back \
             and the device going away, not on the drive's own record"
                .to_string(),
        ),
    }
    if l.pcie.as_ref().is_some_and(|p| p.ready_timeout_ms.is_none()) {
        out.push(
            "the controller's CAP register could not be read through its PCI function's resource0 (a kernel built with \
             CONFIG_IO_STRICT_DEVMEM refuses to map a BAR its driver holds unless booted with iomem=relaxed): readiness is \
             not judged against CAP.TO"
                .to_string(),
        );
    }
    out
}

pub(crate) fn read_health(path: &Path, roots: &SysRoots) -> Result<HealthLogs, HealthReadError> {
    let admin = NvmeAdmin::open_for_block_device_in(path, roots)?;
    let smart = parse_smart(&admin.smart_log()?)?;
    let ocp = match admin.ocp_smart_log()? {
        Some(b) => Some(parse_ocp_smart(&b)?),
        None => None,
    };
    // A log that cannot be read or parsed costs its own check only, not the SMART ones.
    let (pel, pel_unread) = match admin.persistent_event_log(crate::pel::MAX_LOG_BYTES) {
        Ok(Some(b)) => match crate::pel::parse_pel(&b) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Ok(None) => (None, None),
        Err(e) => (None, Some(e.to_string())),
    };
    // A controller not on PCIe (fabrics) has none of it.
    let pcie = Some(crate::pcie::read_pcie(&roots.sys, admin.controller_name())).filter(|p| *p != Default::default());
    Ok(HealthLogs { smart, ocp, pel, pel_unread, pcie })
}

/// The identity sysfs gives the block device at `path`, as an expectation to find it again by;
/// `None` when it names nothing stable (a regular file, a device without serial or WWID).
fn derived_expectation(path: &Path, capacity: u64, lbs: u32) -> Option<Expectation> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok().filter(|m| m.file_type().is_block_device())?;
    let id = identify(meta.rdev(), capacity, lbs);
    let some = |v: &str| (!v.trim().is_empty()).then(|| v.to_string());
    let e = Expectation {
        serial: some(&id.serial),
        wwid: some(&id.wwid),
        model: some(&id.model),
        backing_file: some(&id.backing_file),
        size_bytes: Some(capacity),
    };
    (e.serial.is_some() || e.wwid.is_some() || e.backing_file.is_some()).then_some(e)
}

#[cfg(test)]
mod tests;
