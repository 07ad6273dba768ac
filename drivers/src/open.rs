//! Opening a target: discovery, the safety guards, then the engine (io_uring, or the
//! synchronous fallback when io_uring cannot be set up; for an NVMe controller's character
//! device, the passthrough engine).
//!
//! Order matters: the in-use guard runs before the device is opened for writing, the
//! identity check before anything is written, the signature probe on the opened descriptor.

use crate::block::{BlockTarget, TargetError};
use crate::blockdev::{discover, Expectation, TargetKind};
use crate::guard::{check_no_signature, check_not_in_use, GuardError};
use crate::sharded::ShardedTarget;
use crate::sync::SyncTarget;
use crate::uring::UringTarget;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// What the caller asks for.
#[derive(Clone, Debug, Default)]
pub struct OpenSpec {
    pub writable: bool,
    pub queue_depth: usize,
    /// Identity the device must have (block devices; on a regular file only `size_bytes`
    /// is checked).
    pub expect: Expectation,
    /// Write even over a partition table or filesystem signature.
    pub allow_overwrite_signature: bool,
    /// io_uring worker threads, each with its own ring (0 or 1: one ring on the caller's
    /// thread).
    pub io_threads: usize,
}

/// Which engine serves the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    IoUring,
    Sync,
    /// `NVME_IOCTL_IO_CMD` on a controller's or a namespace's generic character device
    /// ([`crate::passthru`]).
    NvmePassthru,
    /// An NBD export's requests over its connection ([`crate::nbd`]).
    Nbd,
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Engine::IoUring => "io_uring",
            Engine::Sync => "pwritev2/preadv2",
            Engine::NvmePassthru => "nvme-passthru",
            Engine::Nbd => "nbd",
        })
    }
}

/// An opened target, with the lines its opener must show the user.
pub struct Opened {
    pub target: Box<dyn BlockTarget>,
    pub engine: Engine,
    pub block_device: bool,
    /// Opened with O_DIRECT.
    pub direct: bool,
    /// One line each: fallback engine, buffered I/O.
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Guard(#[from] GuardError),
    #[error(transparent)]
    Nbd(#[from] crate::nbd::NbdOpenError),
}

/// Opens `path` as `spec` says, refusing devices the guards reject. A path that is an NBD URI
/// (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`) opens that export.
pub fn open_target(path: &Path, spec: &OpenSpec) -> Result<Opened, OpenError> {
    if let Some(uri) = path.to_str().filter(|s| crate::nbd::looks_like_nbd(s)) {
        return open_nbd(uri, spec);
    }
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|source| TargetError::Open { path: shown.clone(), source })?;
    let is_block = meta.file_type().is_block_device();
    if meta.file_type().is_char_device() {
        // An NVMe controller (`/dev/nvme1`): its one namespace through I/O passthrough, the
        // way to reach one controller of several when native multipath hides their disks.
        let roots = crate::blockdev::SysRoots::system();
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if canon.file_name().is_some_and(|n| roots.sys.join("class/nvme").join(n).exists()) {
            return crate::passthru::open_controller_target(path, spec, &roots);
        }
        // A namespace's generic device (`/dev/ng0n2`): that namespace through I/O passthrough,
        // whatever else its controller serves, with its metadata and protection information.
        if canon.file_name().is_some_and(|n| roots.sys.join("class/nvme-generic").join(n).exists()) {
            return crate::passthru::open_generic_target(path, spec, &roots);
        }
    }
    if is_block && spec.writable {
        check_not_in_use(&shown, meta.rdev())?;
    }
    let d = discover(path, spec.writable)?;
    match &d.kind {
        TargetKind::Block { identity, .. } => {
            let bad = spec.expect.mismatches(identity);
            if !bad.is_empty() {
                return Err(GuardError::Identity { dev: shown, why: bad.join("; ") }.into());
            }
            if spec.writable && !spec.allow_overwrite_signature {
                check_no_signature(&shown, &d.file)?;
            }
        }
        TargetKind::File => {
            if let Some(sz) = spec.expect.size_bytes.filter(|s| *s != d.geometry.capacity_bytes) {
                return Err(GuardError::Identity {
                    dev: shown,
                    why: format!("size is {} bytes, expected {sz} (--expect-size)", d.geometry.capacity_bytes),
                }
                .into());
            }
        }
    }
    let mut notes: Vec<String> = d.zeroing_note.iter().cloned().collect();
    let direct = d.direct;
    if !direct {
        notes.push(format!("{shown} does not support O_DIRECT (tmpfs?); using buffered I/O"));
    }
    let depth = spec.queue_depth.max(1);
    if spec.io_threads > 1 {
        // Probe that io_uring works at all before starting workers; otherwise fall through
        // to the single-ring path and its fallback.
        if let Ok(probe) = d.try_clone().map(|c| UringTarget::new(c, 1)) {
            if probe.is_ok() {
                drop(probe);
                let t = ShardedTarget::new(d, depth, spec.io_threads)?;
                return Ok(Opened { target: Box::new(t), engine: Engine::IoUring, block_device: is_block, direct, notes });
            }
        }
    }
    let (target, engine): (Box<dyn BlockTarget>, Engine) = match UringTarget::new(d, depth) {
        Ok(t) => (Box::new(t), Engine::IoUring),
        Err(failed) => {
            let (d, e) = *failed;
            notes.push(format!(
                "io_uring is unavailable ({e}); using the synchronous pwritev2/preadv2 engine (one operation at a time, much slower)"
            ));
            (Box::new(SyncTarget::new(d, depth)), Engine::Sync)
        }
    };
    Ok(Opened { target, engine, block_device: is_block, direct, notes })
}

/// An NBD export: the URI names it (there is no sysfs identity to check, so a serial, WWID,
/// model or backing file expected of it is refused as unknowable), its size is checked, and
/// its first bytes are probed for a partition table or filesystem before anything is written.
/// Whether another client writes the same export is the server's to refuse, not this host's.
fn open_nbd(uri: &str, spec: &OpenSpec) -> Result<Opened, OpenError> {
    use crate::nbd::{NbdOpenError, NbdTarget, NbdUri};
    let parsed = NbdUri::parse(uri).map_err(NbdOpenError::Uri)?;
    let e = &spec.expect;
    let unknowable: Vec<&str> = [
        ("serial", e.serial.is_some()),
        ("WWID", e.wwid.is_some()),
        ("model", e.model.is_some()),
        ("backing file", e.backing_file.is_some()),
    ]
    .iter()
    .filter(|(_, given)| *given)
    .map(|(w, _)| *w)
    .collect();
    if !unknowable.is_empty() {
        return Err(GuardError::Identity {
            dev: uri.to_string(),
            why: format!("an NBD export reports no {}: name it by its URI (and its size)", unknowable.join(" or ")),
        }
        .into());
    }
    let mut t = NbdTarget::open(&parsed, spec.writable, spec.queue_depth)?;
    let size = t.export().size;
    if let Some(want) = e.size_bytes.filter(|w| *w != size) {
        return Err(GuardError::Identity { dev: uri.to_string(), why: format!("size is {size} bytes, expected {want}") }.into());
    }
    if spec.writable && !spec.allow_overwrite_signature {
        let lbs = t.geometry().logical_block_bytes as usize;
        let len = (crate::guard::PROBE_BYTES.min(size as usize) / lbs * lbs).max(lbs);
        let mut head = vec![0u8; len];
        t.read_at(0, &mut head)
            .map_err(|f| GuardError::InUse { dev: uri.to_string(), why: format!("cannot read its first bytes: {f}") })?;
        let found = crate::guard::signatures(&head);
        if !found.is_empty() {
            return Err(GuardError::Signature { dev: uri.to_string(), what: found.join(" and ") }.into());
        }
    }
    let notes = t.notes();
    Ok(Opened { target: Box::new(t), engine: Engine::Nbd, block_device: false, direct: true, notes })
}
