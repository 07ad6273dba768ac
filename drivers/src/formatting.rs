//! A namespace's engine that also formats it: [`Formatting`] passes every operation to the
//! engine underneath and takes an [`Op::Zero`] of kind [`Zeroing::Format`] over the whole
//! target as a Format NVM of the namespace, sent through the controller's admin passthrough
//! on a thread of its own (the ioctl blocks until the drive completes it, and the writer
//! must be free to cut meanwhile). Its completion comes back through [`BlockTarget::reap`]
//! like any other.

use crate::blockdev::SysRoots;
use crate::nvme::{namespace_id, NvmeAdmin, NvmeError};
use crate::{
    AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, LatencyHistogram, Op, ReadTicket, TargetError, Zeroing, ZeroingSupport,
};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Why a target cannot be formatted.
#[derive(Debug, thiserror::Error)]
pub enum FormatOpenError {
    #[error("{}: a partition, not a whole namespace: a format would erase the rest of the namespace", .0.display())]
    Partition(PathBuf),
    #[error("{}: an NVMe controller's device: give the namespace's block device or generic device to format it", .0.display())]
    Controller(PathBuf),
    #[error(transparent)]
    Nvme(#[from] NvmeError),
}

/// The engine of namespace `nsid` with the admin path to format it.
pub struct Formatting {
    inner: Box<dyn BlockTarget>,
    controller: PathBuf,
    nsid: u32,
    /// The format in flight: its token, and where its result comes.
    pending: Option<(u64, Receiver<Result<(), IoFailure>>)>,
}

/// Wraps `inner`, the engine of the namespace whose block device is `block` (a whole
/// namespace: a partition is refused), so that it formats.
pub fn formatting(block: &Path, inner: Box<dyn BlockTarget>, roots: &SysRoots) -> Result<Formatting, FormatOpenError> {
    if is_partition(block, roots) {
        return Err(FormatOpenError::Partition(block.to_path_buf()));
    }
    let nsid = namespace_id(block, roots)?;
    let controller = NvmeAdmin::open_for_block_device_in(block, roots)?.path().to_path_buf();
    Ok(Formatting { inner, controller, nsid, pending: None })
}

/// Whether block device `block` is a partition (sysfs: its directory has `partition`).
fn is_partition(block: &Path, roots: &SysRoots) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(block) else { return false };
    let link = roots.sys.join(format!("dev/block/{}:{}", libc::major(meta.rdev()), libc::minor(meta.rdev())));
    link.join("partition").exists()
}

impl Formatting {
    /// Sends the format on a thread of its own: its result comes back through `reap`.
    fn start(&mut self, token: u64, offset: u64, len: u64) -> Result<(), IoFailure> {
        let capacity = self.inner.geometry().capacity_bytes;
        if offset != 0 || len != capacity {
            return Err(IoFailure::new(
                libc::EINVAL,
                format!("format of {len} bytes at {offset}: a format is of the whole namespace ({capacity} bytes)"),
            ));
        }
        if self.inner.in_flight() > 0 {
            return Err(IoFailure::new(libc::EBUSY, "format: the namespace has operations in flight"));
        }
        let (tx, rx) = channel();
        let (controller, nsid) = (self.controller.clone(), self.nsid);
        std::thread::Builder::new()
            .name("faultline-format".into())
            .spawn(move || {
                let r = NvmeAdmin::open_controller(&controller).and_then(|a| a.format_namespace(nsid));
                let _ = tx.send(r.map_err(failure));
            })
            .map_err(|e| IoFailure::new(libc::EAGAIN, format!("format: cannot start its thread: {e}")))?;
        self.pending = Some((token, rx));
        Ok(())
    }

    /// The format's completion, if it came within `timeout`.
    fn format_done(&mut self, timeout: Duration) -> Option<Completion> {
        let (token, rx) = self.pending.as_ref()?;
        let result = match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => Err(IoFailure::new(libc::EIO, "format: its thread ended without a result")),
        };
        let c = Completion::new(*token, result, None);
        self.pending = None;
        Some(c)
    }
}

/// An admin error as an operation's failure: the drive's status as EIO, else the ioctl's errno.
fn failure(e: NvmeError) -> IoFailure {
    let errno = match &e {
        NvmeError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EIO,
    };
    IoFailure::new(errno, e.to_string())
}

impl BlockTarget for Formatting {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }
    fn identity(&self) -> String {
        self.inner.identity()
    }
    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }
    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        // Nothing beside a format: the kernel freezes the controller's I/O around it anyway.
        if self.pending.is_some() && !matches!(op, Op::Zero { kind: Zeroing::Format, .. }) {
            return Err(TargetError::QueueFull { path: self.controller.display().to_string(), depth: 1 });
        }
        match op {
            // One format at a time: its completion is the one this target waits for.
            Op::Zero { kind: Zeroing::Format, .. } if self.pending.is_some() => {
                Err(TargetError::QueueFull { path: self.controller.display().to_string(), depth: 1 })
            }
            Op::Zero { token, offset, len, kind: Zeroing::Format, .. } => {
                if let Err(f) = self.start(token, offset, len) {
                    // Refused before anything was sent: completes at once with why.
                    let (tx, rx) = channel();
                    let _ = tx.send(Err(f));
                    self.pending = Some((token, rx));
                }
                Ok(())
            }
            op => self.inner.submit(op),
        }
    }
    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        if self.pending.is_none() {
            return self.inner.reap(out, min, timeout);
        }
        // Nothing else is in flight beside a format (`start` refuses it otherwise).
        let t0 = Instant::now();
        let mut n = 0;
        if self.inner.in_flight() > 0 {
            n += self.inner.reap(out, 0, Duration::ZERO)?;
        }
        if let Some(c) = self.format_done(timeout.saturating_sub(t0.elapsed())) {
            out.push(c);
            n += 1;
        }
        Ok(n)
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + usize::from(self.pending.is_some())
    }
    fn zeroing(&self) -> ZeroingSupport {
        ZeroingSupport { format: true, ..self.inner.zeroing() }
    }
    fn submit_queued(&mut self) -> Result<(), TargetError> {
        self.inner.submit_queued()
    }
    fn buffers(&mut self, count: usize, len: usize) -> Vec<AlignedBuf> {
        self.inner.buffers(count, len)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        self.inner.read_at(offset, buf)
    }
    fn read_owned(&mut self, offset: u64, buf: AlignedBuf) -> (AlignedBuf, Result<(), IoFailure>) {
        self.inner.read_owned(offset, buf)
    }
    fn read_start(&mut self, offset: u64, buf: AlignedBuf) -> ReadTicket {
        self.inner.read_start(offset, buf)
    }
    fn read_finish(&mut self, ticket: ReadTicket) -> (AlignedBuf, Result<(), IoFailure>) {
        self.inner.read_finish(ticket)
    }
    fn set_read_timeout(&mut self, timeout: Duration) {
        self.inner.set_read_timeout(timeout)
    }
    fn wait_mode(&self) -> Option<String> {
        self.inner.wait_mode()
    }
    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        self.inner.latencies()
    }
}
