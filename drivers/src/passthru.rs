//! The NVMe passthrough engine: reads, writes and flushes as NVM commands sent through
//! `NVME_IOCTL_IO_CMD` on a controller's character device (`/dev/nvmeX`), so that the I/O goes
//! through that controller and no other. It is how one port of a dual-port drive is reached
//! when native multipath (`nvme_core.multipath=Y`, the default) hides the per-controller block
//! devices (`docs/DOMAIN.md` section 9).
//!
//! What the kernel imposes (`drivers/nvme/host/ioctl.c`): the ioctl is synchronous, needs
//! CAP_SYS_ADMIN, is refused (EINVAL) on a controller with more than one namespace (so this
//! engine refuses such a controller when opened), and logs a "deprecated" warning. Queue depth
//! comes from threads: a pool of as many workers as the queue depth, each issuing one ioctl at
//! a time on the shared descriptor; `submit` hands an operation to the pool over a channel and
//! `reap` collects completions from another. A write longer than the namespace's largest
//! transfer (`queue/max_hw_sectors_kb`) is sent as several commands in order, as the block layer
//! would split it; FUA is the command's FUA bit, a flush the Flush command for the namespace.
//! Deallocate and write zeroes are Dataset Management and Write Zeroes, carried as the
//! controller's Identify says (`zero.rs`).
//!
//! The namespace the controller serves is found in sysfs, under the controller: `nvmeXnY` with
//! multipath off, the hidden per-path node `nvmeScXnY` with it on. Its block device (the node
//! itself, or the multipath head `nvmeSnY`) is what the safety guards look at, and is held open
//! exclusively while the engine runs, so nobody mounts it under the writes.

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, TargetError, ZeroingSupport};
use crate::blockdev::{identify_sysfs, DeviceIdentity, Expectation, SysRoots};
use crate::guard::{check_no_signature, check_not_in_use, GuardError};
use crate::identity::{read_trim, PathId};
use crate::open::{Engine, OpenError, OpenSpec, Opened};
use crate::sys::{nvme_io, IoData, NvmeAdminCmd, NvmeStatus};
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod zero;
pub use zero::{
    deallocate_commands, identify_zeroing, write_zeroes_commands, zeroing_from_identify, MAX_DSM_RANGES, MAX_RANGE_BLOCKS,
    OPC_DATASET_MANAGEMENT, OPC_WRITE_ZEROES,
};

/// NVM command set opcodes.
pub const OPC_FLUSH: u8 = 0x00;
pub const OPC_WRITE: u8 = 0x01;
pub const OPC_READ: u8 = 0x02;
/// CDW12 bit 30: Force Unit Access.
const CDW12_FUA: u32 = 1 << 30;
/// The most logical blocks one command carries (NLB is a 0-based 16-bit field).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 1 << 16;
/// EIOs in a row after which the device counts as gone (as the other engines count).
const EIO_GONE_AFTER: u32 = 8;
/// Worker threads at most, whatever the queue depth.
const MAX_THREADS: usize = 256;

/// A Read or Write of `blocks` logical blocks (1 to [`MAX_BLOCKS_PER_COMMAND`]) at `slba` of
/// namespace `nsid`: SLBA in CDW10 (low) and CDW11 (high), NLB - 1 in CDW12 bits 0-15, FUA in
/// bit 30 (NVM Command Set specification, Read and Write commands). `addr`/`data_len` are set
/// when it is sent.
pub fn rw_command(opcode: u8, nsid: u32, slba: u64, blocks: u32, fua: bool) -> NvmeAdminCmd {
    debug_assert!((1..=MAX_BLOCKS_PER_COMMAND).contains(&blocks) && (opcode == OPC_READ || opcode == OPC_WRITE));
    NvmeAdminCmd {
        opcode,
        nsid,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: (blocks - 1) | if fua { CDW12_FUA } else { 0 },
        ..Default::default()
    }
}

/// A Flush of namespace `nsid` (no data, no command dwords).
pub fn flush_command(nsid: u32) -> NvmeAdminCmd {
    NvmeAdminCmd { opcode: OPC_FLUSH, nsid, ..Default::default() }
}

/// The one namespace a controller serves, as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerNamespace {
    /// The controller (`nvme1`).
    pub controller: String,
    /// The namespace's sysfs directory under the controller (`.../nvme1/nvme1n1` or
    /// `.../nvme1/nvme0c1n1`).
    pub dir: PathBuf,
    pub nsid: u32,
    /// The namespace's block device node, if it has one: the node itself, or the multipath
    /// head for a hidden per-path node.
    pub block_dev: Option<PathBuf>,
    pub geometry: Geometry,
    /// The most bytes one command may carry (`queue/max_hw_sectors_kb`, at most
    /// [`MAX_BLOCKS_PER_COMMAND`] blocks).
    pub max_transfer: u64,
    /// What the block device path of the same namespace would record (serial, model, WWID).
    pub identity: DeviceIdentity,
    /// Which controller this is (name, `cntlid`, PCI address), to find it again after a
    /// re-enumeration.
    pub path: PathId,
}

/// `nvme<a>n<b>` or `nvme<a>c<b>n<c>`: a namespace (or a per-path node of one). Returns the
/// name of its block device: itself, or the multipath head `nvme<a>n<c>`.
fn namespace_block_name(name: &str) -> Option<String> {
    let num = |s: &str| -> Option<usize> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then_some(n)
    };
    let r = name.strip_prefix("nvme")?;
    let a = num(r)?;
    let (subsys, r) = r.split_at(a);
    let r = if let Some(c) = r.strip_prefix('c') { &c[num(c)?..] } else { r };
    let ns = r.strip_prefix('n')?;
    (num(ns)? == ns.len()).then(|| format!("nvme{subsys}n{ns}"))
}

fn unsupported(path: &Path, reason: String) -> TargetError {
    TargetError::Unsupported { path: path.display().to_string(), reason }
}

/// The namespace of controller `ctrl` (`nvme1`), refusing a controller with none or with more
/// than one (the kernel refuses `NVME_IOCTL_IO_CMD` there). `shown` names the target in errors.
pub fn controller_namespace(ctrl: &str, roots: &SysRoots, shown: &Path) -> Result<ControllerNamespace, TargetError> {
    let cdir = roots.sys.join("class/nvme").join(ctrl);
    let rd = std::fs::read_dir(&cdir)
        .map_err(|e| unsupported(shown, format!("is not an NVMe controller: cannot list {}: {e}", cdir.display())))?;
    let mut found: Vec<(String, String)> = rd
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            namespace_block_name(&n).map(|b| (n, b))
        })
        .collect();
    found.sort();
    let (name, block) = match &found[..] {
        [one] => one.clone(),
        [] => return Err(unsupported(shown, format!("controller {ctrl} has no namespace in {}", cdir.display()))),
        many => {
            let names: Vec<&str> = many.iter().map(|(n, _)| n.as_str()).collect();
            return Err(unsupported(
                shown,
                format!(
                    "controller {ctrl} has {} namespaces ({}): the kernel refuses NVMe I/O passthrough on a controller with more \
                     than one; target one namespace's block device instead (with nvme_core.multipath=N each controller has its own)",
                    many.len(),
                    names.join(", ")
                ),
            ));
        }
    };
    let dir = cdir.join(&name);
    let nsid = match read_trim(&dir.join("nsid")).parse::<u32>() {
        Ok(n) => n,
        Err(_) => name.rsplit('n').next().and_then(|n| n.parse().ok()).unwrap_or(1),
    };
    // A hidden per-path node may lack the queue attributes; its head has them.
    let head_dir = roots.sys.join("class/block").join(&block);
    let attr = |rel: &str| {
        let v = read_trim(&dir.join(rel));
        if v.is_empty() {
            read_trim(&head_dir.join(rel))
        } else {
            v
        }
    };
    let lbs: u32 = attr("queue/logical_block_size").parse().unwrap_or(0);
    let sectors: u64 = attr("size").parse().unwrap_or(0);
    if lbs == 0 || sectors == 0 {
        return Err(unsupported(shown, format!("namespace {name} of {ctrl}: sysfs gives no size or logical block size")));
    }
    let pbs: u32 = attr("queue/physical_block_size").parse().unwrap_or(lbs);
    let hw_kb: u64 = attr("queue/max_hw_sectors_kb").parse().unwrap_or(128);
    let max_transfer = (hw_kb * 1024).min(u64::from(MAX_BLOCKS_PER_COMMAND) * u64::from(lbs)).max(u64::from(lbs));
    let max_transfer = max_transfer - max_transfer % u64::from(lbs);
    let capacity = sectors * 512;
    let mut identity = identify_sysfs(&std::fs::canonicalize(&dir).unwrap_or(dir.clone()), capacity, lbs);
    if identity.wwid.is_empty() {
        identity.wwid = read_trim(&head_dir.join("wwid"));
    }
    let block_dev = Some(roots.dev.join(&block)).filter(|p| p.exists());
    let address = read_trim(&cdir.join("address"));
    let transport = read_trim(&cdir.join("transport"));
    let path = PathId {
        device: ctrl.to_string(),
        controller: Some(ctrl.to_string()),
        cntlid: read_trim(&cdir.join("cntlid")).parse().ok(),
        pci_address: (!address.is_empty() && (transport.is_empty() || transport == "pcie")).then_some(address),
    };
    Ok(ControllerNamespace {
        controller: ctrl.to_string(),
        dir,
        nsid,
        block_dev,
        geometry: Geometry { logical_block_bytes: lbs, physical_block_bytes: pbs.max(lbs), capacity_bytes: capacity },
        max_transfer,
        identity,
        path,
    })
}

/// The controller `want` selects (by `cntlid`, else PCI address, else name; see [`PathId`])
/// whose one namespace matches `expect` (every field given; an empty expectation matches
/// any): after a remove and rescan `nvme1` may be back as `nvme2`. `Ok(None)`: none (yet);
/// `Err`: several, named.
pub fn find_controller(expect: &Expectation, want: &PathId, roots: &SysRoots) -> Result<Option<PathBuf>, SeveralControllers> {
    let class = roots.sys.join("class/nvme");
    let Ok(rd) = std::fs::read_dir(&class) else { return Ok(None) };
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut hits = Vec::new();
    for n in names {
        let Ok(ns) = controller_namespace(&n, roots, &class.join(&n)) else { continue };
        if want.selects(&ns.path) && expect.mismatches(&ns.identity).is_empty() {
            hits.push(ns);
        }
    }
    match &hits[..] {
        [] => Ok(None),
        [one] => Ok(Some(roots.dev.join(&one.controller))),
        many => Err(SeveralControllers {
            want: want.to_string(),
            expect: expect.summary(),
            paths: many.iter().map(|m| m.path.to_string()).collect(),
        }),
    }
}

/// More than one controller is the one [`find_controller`] looks for: waiting will not tell
/// them apart.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} controllers are {want} and match {expect}: {}", .paths.len(), .paths.join("; "))]
pub struct SeveralControllers {
    /// The path selector looked for.
    pub want: String,
    /// The namespace's expectation, summarised.
    pub expect: String,
    /// Each controller's path.
    pub paths: Vec<String>,
}

/// Opens the controller at `path` (`/dev/nvme1`) as a target through its one namespace: the
/// namespace found in sysfs under `roots`, checked against `spec.expect`; when writable, its
/// block device (the node, or the multipath head) must not be in use and carry no signature
/// (unless allowed), and is held open exclusively while the engine runs.
pub fn open_controller_target(path: &Path, spec: &OpenSpec, roots: &SysRoots) -> Result<Opened, OpenError> {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let ctrl = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let shown = path.display().to_string();
    let ns = controller_namespace(&ctrl, roots, path)?;
    let bad = spec.expect.mismatches(&ns.identity);
    if !bad.is_empty() {
        return Err(GuardError::Identity { dev: shown, why: bad.join("; ") }.into());
    }
    let hold = match (&ns.block_dev, spec.writable) {
        (Some(b), true) => {
            let bshown = b.display().to_string();
            let meta = std::fs::metadata(b).map_err(|source| TargetError::Open { path: bshown.clone(), source })?;
            if meta.file_type().is_block_device() {
                check_not_in_use(&bshown, meta.rdev())?;
            }
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_CLOEXEC | if meta.file_type().is_block_device() { libc::O_EXCL } else { 0 })
                .open(b)
                .map_err(|source| TargetError::Open { path: bshown.clone(), source })?;
            if !spec.allow_overwrite_signature {
                check_no_signature(&bshown, &f)?;
            }
            Some(f)
        }
        (None, true) => {
            return Err(unsupported(
                path,
                format!(
                    "namespace {} of {ctrl} has no block device node in {}: faultline does not write to a namespace it cannot \
                     check is unused",
                    ns.nsid,
                    roots.dev.display()
                ),
            )
            .into())
        }
        (_, false) => None,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(spec.writable)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| TargetError::Open { path: shown.clone(), source })?;
    let mut notes = Vec::new();
    let zeroing = match spec.writable.then(|| identify_zeroing(path, ns.nsid)) {
        None => ZeroingSupport::default(),
        Some(Ok(z)) => z,
        Some(Err(why)) => {
            notes.push(format!("{shown}: deallocate and write zeroes not carried: {why}"));
            ZeroingSupport::default()
        }
    };
    let t = PassthruTarget::new(file, path, &ns, spec.queue_depth, spec.writable, hold, zeroing);
    notes.insert(
        0,
        format!(
            "{shown}: NVMe I/O passthrough to controller {ctrl}, namespace {}: synchronous NVME_IOCTL_IO_CMD on {} threads \
         (one per queue slot), slower than a block device, and the kernel may log a warning per command",
            ns.nsid,
            t.threads()
        ),
    );
    Ok(Opened { target: Box::new(t), engine: Engine::NvmePassthru, block_device: false, direct: true, notes })
}

/// One operation for the pool.
struct Job {
    op: Op,
}

/// What the workers share: the controller, the namespace, and whether the device is gone.
struct Shared {
    file: File,
    shown: String,
    nsid: u32,
    lbs: u32,
    capacity: u64,
    max_transfer: u64,
    writable: bool,
    /// What Identify said the controller carries (`zero.rs`).
    zeroing: ZeroingSupport,
    gone: Mutex<(Option<IoFailure>, u32)>,
}

impl Shared {
    fn failure(&self, e: &std::io::Error, what: &str) -> IoFailure {
        match NvmeStatus::of(e) {
            Some(s) => IoFailure::new(libc::EIO, format!("{} {what}: {s}", self.shown)),
            None => IoFailure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{} {what}", self.shown)),
        }
    }

    fn check(&self, offset: u64, len: usize, what: &str) -> Result<(), IoFailure> {
        let lbs = u64::from(self.lbs);
        if len == 0 || !offset.is_multiple_of(lbs) || !(len as u64).is_multiple_of(lbs) {
            return Err(IoFailure::new(
                libc::EINVAL,
                format!("{} {what} of {len} bytes at {offset} is not aligned to the {lbs}-byte logical block", self.shown),
            ));
        }
        if offset + len as u64 > self.capacity {
            return Err(IoFailure::new(
                libc::EINVAL,
                format!("{} {what} of {len} bytes at {offset} passes the end ({})", self.shown, self.capacity),
            ));
        }
        Ok(())
    }

    /// Records a result for the device-gone rule; a failure once gone is what every later
    /// operation fails with.
    fn note(&self, r: &Result<(), IoFailure>) {
        let mut g = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(()) => g.1 = 0,
            Err(f) => {
                if f.errno == libc::EIO {
                    g.1 += 1;
                }
                if g.0.is_none() && (f.device_gone() || g.1 >= EIO_GONE_AFTER) {
                    g.0 = Some(f.clone());
                }
            }
        }
    }

    fn gone(&self) -> Option<IoFailure> {
        let g = self.gone.lock().unwrap_or_else(|p| p.into_inner());
        g.0.as_ref().map(|g| IoFailure::new(g.errno, format!("not submitted: the device is gone ({})", g.detail)))
    }

    /// Reads or writes `buf` at `offset`, in commands of at most `max_transfer` bytes.
    fn transfer(&self, opcode: u8, offset: u64, buf: &mut [u8], fua: bool) -> Result<(), IoFailure> {
        let what = if opcode == OPC_WRITE {
            if fua {
                "write (FUA)"
            } else {
                "write"
            }
        } else {
            "read"
        };
        self.check(offset, buf.len(), what)?;
        let lbs = u64::from(self.lbs);
        let len = buf.len();
        for (i, chunk) in buf.chunks_mut(self.max_transfer as usize).enumerate() {
            let at = offset + i as u64 * self.max_transfer;
            let mut cmd = rw_command(opcode, self.nsid, at / lbs, (chunk.len() as u64 / lbs) as u32, fua);
            let data = if opcode == OPC_WRITE { IoData::ToDevice(chunk) } else { IoData::FromDevice(chunk) };
            nvme_io(&self.file, &mut cmd, data, self.lbs).map_err(|e| self.failure(&e, &format!("{what} of {len} bytes at {offset}")))?;
        }
        Ok(())
    }

    fn run(&self, op: Op) -> Completion {
        match op {
            Op::Write { token, offset, mut buf, fua, .. } => {
                let r = match self.gone() {
                    Some(g) => Err(g),
                    None if !self.writable => Err(IoFailure::new(libc::EBADF, format!("{} opened read-only", self.shown))),
                    None => {
                        let r = self.transfer(OPC_WRITE, offset, &mut buf, fua);
                        self.note(&r);
                        r
                    }
                };
                Completion::new(token, r, Some(buf))
            }
            Op::Flush { token } => {
                let r = match self.gone() {
                    Some(g) => Err(g),
                    None => {
                        let mut cmd = flush_command(self.nsid);
                        let r = nvme_io(&self.file, &mut cmd, IoData::None, self.lbs).map(|_| ()).map_err(|e| self.failure(&e, "flush"));
                        self.note(&r);
                        r
                    }
                };
                Completion::new(token, r, None)
            }
            Op::Zero { token, offset, len, kind, .. } => {
                let r = match self.gone() {
                    Some(g) => Err(g),
                    None if !self.writable => Err(IoFailure::new(libc::EBADF, format!("{} opened read-only", self.shown))),
                    None => {
                        let r = self.zero(offset, len, kind);
                        self.note(&r);
                        r
                    }
                };
                Completion::new(token, r, None)
            }
        }
    }
}

/// The engine: a controller's namespace through `NVME_IOCTL_IO_CMD`, on a pool of threads.
pub struct PassthruTarget {
    shared: Arc<Shared>,
    geometry: Geometry,
    identity: String,
    depth: usize,
    jobs: Option<Sender<Job>>,
    done: Receiver<Completion>,
    workers: Vec<std::thread::JoinHandle<()>>,
    in_flight: usize,
    /// The namespace's block device, held open exclusively for as long as the engine runs.
    _hold: Option<File>,
}

impl PassthruTarget {
    /// The engine over `file` (the controller, opened read-write) serving `ns`, with `depth`
    /// operations in flight at most (and as many worker threads, up to 256). `hold`: the
    /// namespace's block device, kept open (exclusively) while the engine runs. `zeroing`: what
    /// the controller's Identify says it carries ([`identify_zeroing`]).
    pub fn new(
        file: File,
        shown: &Path,
        ns: &ControllerNamespace,
        depth: usize,
        writable: bool,
        hold: Option<File>,
        zeroing: ZeroingSupport,
    ) -> PassthruTarget {
        let depth = depth.max(1);
        let shared = Arc::new(Shared {
            file,
            shown: shown.display().to_string(),
            nsid: ns.nsid,
            lbs: ns.geometry.logical_block_bytes,
            capacity: ns.geometry.capacity_bytes,
            max_transfer: ns.max_transfer,
            writable,
            zeroing,
            gone: Mutex::new((None, 0)),
        });
        let (jobs, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let (tx, done) = channel::<Completion>();
        let workers = (0..depth.min(MAX_THREADS))
            .map(|_| {
                let (shared, rx, tx) = (shared.clone(), rx.clone(), tx.clone());
                std::thread::spawn(move || loop {
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok(job) = job else { return };
                    if tx.send(shared.run(job.op)).is_err() {
                        return;
                    }
                })
            })
            .collect();
        PassthruTarget {
            shared,
            geometry: ns.geometry,
            identity: ns.identity.stable(),
            depth,
            jobs: Some(jobs),
            done,
            workers,
            in_flight: 0,
            _hold: hold,
        }
    }

    /// Worker threads serving the queue.
    pub fn threads(&self) -> usize {
        self.workers.len()
    }
}

impl Drop for PassthruTarget {
    fn drop(&mut self) {
        // Closing the job channel ends every worker once its ioctl returns.
        self.jobs.take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl BlockTarget for PassthruTarget {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if self.in_flight >= self.depth {
            return Err(TargetError::QueueFull { path: self.shared.shown.clone(), depth: self.depth });
        }
        let jobs = self.jobs.as_ref().ok_or_else(|| unsupported(Path::new(&self.shared.shown), "the engine is closed".into()))?;
        jobs.send(Job { op }).map_err(|_| unsupported(Path::new(&self.shared.shown), "the I/O threads are gone".into()))?;
        self.in_flight += 1;
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        let deadline = Instant::now() + timeout;
        let want = min.min(self.in_flight);
        let mut n = 0;
        while n < want {
            match self.done.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(c) => {
                    out.push(c);
                    n += 1;
                    self.in_flight -= 1;
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(c) = self.done.try_recv() {
            out.push(c);
            n += 1;
            self.in_flight -= 1;
        }
        Ok(n)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn zeroing(&self) -> ZeroingSupport {
        if self.shared.writable {
            self.shared.zeroing
        } else {
            ZeroingSupport::default()
        }
    }

    fn buffers(&mut self, count: usize, len: usize) -> Vec<AlignedBuf> {
        (0..count).map(|_| AlignedBuf::zeroed(len)).collect()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        if let Some(g) = self.shared.gone() {
            return Err(g);
        }
        let r = self.shared.transfer(OPC_READ, offset, buf, false);
        self.shared.note(&r);
        r
    }
}

#[cfg(test)]
mod tests;
