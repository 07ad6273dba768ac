//! The NVMe passthrough engine: reads, writes and flushes as NVM commands sent through
//! `NVME_IOCTL_IO_CMD` on a controller's character device (`/dev/nvmeX`), so that the I/O goes
//! through that controller and no other, or on a namespace's generic device (`/dev/ngXnY`),
//! that namespace whatever else the controller serves. The first is how one port of a dual-port
//! drive is reached when native multipath (`nvme_core.multipath=Y`, the default) hides the
//! per-controller block devices (`docs/DOMAIN.md` section 9); both carry a namespace's metadata
//! and protection information (`pi.rs`), which no block device path lets faultline write itself.
//!
//! What the kernel imposes (`drivers/nvme/host/ioctl.c`): the ioctl is synchronous, needs
//! CAP_SYS_ADMIN, is refused (EINVAL) on a controller with more than one namespace (so this
//! engine refuses such a controller when opened), and logs a "deprecated" warning. Queue depth
//! comes from threads: a pool of as many workers as the queue depth, each issuing one ioctl at
//! a time on the shared descriptor; `submit` hands an operation to the pool over a channel and
//! `reap` collects completions from another. A write longer than a command may carry (`queue/
//! max_hw_sectors_kb`, a page less than `queue/max_segments` pages, one page of metadata) is
//! sent as several commands in order, as the block layer would split it; FUA is the command's
//! FUA bit, a flush the Flush command for the namespace. Deallocate and write zeroes are Dataset
//! Management and Write Zeroes, carried as the controller's Identify says (`zero.rs`).
//!
//! The namespace is found in sysfs (`open.rs`): under the controller, `nvmeXnY` with multipath
//! off, the hidden per-path node `nvmeScXnY` with it on; for a generic device, the block device
//! of its name. That block device (the node itself, or the multipath head `nvmeSnY`) is what the
//! safety guards look at, and is held open exclusively while the engine runs, so nobody mounts
//! it under the writes.

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, TargetError, ZeroingSupport};
use crate::sys::{nvme_io, nvme_io_meta, IoData, NvmeAdminCmd, NvmeStatus};
use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod open;
mod pi;
mod zero;
use open::unsupported;
pub use open::{
    controller_namespace, find_controller, generic_namespace, open_controller_target, open_generic_target, ControllerNamespace,
    SeveralControllers,
};
pub use pi::{
    guard, guard64_with, guard_with, Guard, Metadata, Pi, PiMismatch, PiType, APP_TAG, PI_BYTES, PRCHK_GUARD, PRCHK_REF, PRINFO_PRACT,
};
pub use zero::{
    deallocate_commands, write_zeroes_commands, zeroing_from_identify, MAX_DSM_RANGES, MAX_RANGE_BLOCKS, OPC_DATASET_MANAGEMENT,
    OPC_WRITE_ZEROES,
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
/// The most metadata one command carries, bytes: one page.
const META_PAGE: usize = 4096;
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
    /// The namespace's metadata, carried in a buffer beside each Read and Write (`pi.rs`).
    meta: Option<Metadata>,
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

    /// Reads or writes `buf` at `offset`, in commands of at most `max_transfer` bytes, each
    /// with its blocks' metadata where the namespace has some: a write's generated, a read's
    /// checked (a mismatch fails the read with EILSEQ, as the block layer's integrity check
    /// does).
    fn transfer(&self, opcode: u8, offset: u64, buf: &mut [u8], fua: bool) -> Result<(), IoFailure> {
        let what = match (opcode, fua) {
            (OPC_WRITE, true) => "write (FUA)",
            (OPC_WRITE, false) => "write",
            _ => "read",
        };
        self.check(offset, buf.len(), what)?;
        let lbs = u64::from(self.lbs);
        let len = buf.len();
        let ms = self.meta.map_or(0, |m| m.bytes);
        // A command's metadata stays within one page-aligned page: the kernel maps it as one
        // integrity segment (docs/DOMAIN.md, "Protection information through passthrough").
        let per = if ms > 0 { self.max_transfer.min(META_PAGE as u64 / u64::from(ms) * lbs).max(lbs) } else { self.max_transfer };
        let mut meta = AlignedBuf::zeroed(if ms > 0 { (per / lbs) as usize * usize::from(ms) } else { 0 });
        for (i, chunk) in buf.chunks_mut(per as usize).enumerate() {
            let at = offset + i as u64 * per;
            let (slba, blocks) = (at / lbs, chunk.len() as u64 / lbs);
            let mut cmd = rw_command(opcode, self.nsid, slba, blocks as u32, fua);
            let failed = |e: std::io::Error| self.failure(&e, &format!("{what} of {len} bytes at {offset}"));
            let Some(m) = self.meta else {
                let data = if opcode == OPC_WRITE { IoData::ToDevice(chunk) } else { IoData::FromDevice(chunk) };
                nvme_io(&self.file, &mut cmd, data, self.lbs).map_err(failed)?;
                continue;
            };
            let meta = &mut meta[..blocks as usize * usize::from(ms)];
            if opcode == OPC_WRITE {
                m.fill(chunk, self.lbs as usize, slba, meta);
                // The tuple's checks (PRCHK), from the initial reference tag (the LBA's low
                // 32 bits) and the application tag written.
                cmd.cdw12 |= m.write_prinfo();
                (cmd.cdw3, cmd.cdw14, cmd.cdw15) = (m.cdw3(slba), slba as u32, u32::from(APP_TAG));
                nvme_io_meta(&self.file, &mut cmd, IoData::ToDevice(chunk), IoData::ToDevice(meta), (self.lbs, ms)).map_err(failed)?;
            } else {
                nvme_io_meta(&self.file, &mut cmd, IoData::FromDevice(chunk), IoData::FromDevice(meta), (self.lbs, ms)).map_err(failed)?;
                m.check(chunk, self.lbs as usize, slba, meta)
                    .map_err(|pi| IoFailure::new(libc::EILSEQ, format!("{} {what} of {len} bytes at {offset}: {pi}", self.shown)))?;
            }
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
            meta: ns.metadata,
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
