//! Opening a target and discovering it: [`discover`] opens a regular file or a block device
//! with O_DIRECT where it can (a block device exclusively when writable) and measures it.

use super::{identify, zeroing, DeviceIdentity, FILE_SECTOR_BYTES};
use crate::block::{Geometry, TargetError, ZeroingSupport};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Kind of target behind a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetKind {
    File,
    Block { rdev: u64, identity: DeviceIdentity },
}

/// An opened target: the descriptor and everything discovered about it.
#[derive(Debug)]
pub struct Discovered {
    pub path: PathBuf,
    pub file: File,
    pub kind: TargetKind,
    pub geometry: Geometry,
    /// Opened with O_DIRECT (false only for files on filesystems without it, e.g. tmpfs).
    pub direct: bool,
    pub writable: bool,
    /// What it carries of deallocate and write zeroes ([`super::zeroing`]), and why not where that
    /// could not be learnt (a line for its opener).
    pub zeroing: ZeroingSupport,
    pub zeroing_note: Option<String>,
}

impl Discovered {
    /// The same target on a duplicated descriptor (same open file description, so an
    /// O_EXCL claim is shared, not repeated): one per io_uring worker.
    pub fn try_clone(&self) -> std::io::Result<Discovered> {
        Ok(Discovered {
            path: self.path.clone(),
            file: self.file.try_clone()?,
            kind: self.kind.clone(),
            geometry: self.geometry,
            direct: self.direct,
            writable: self.writable,
            zeroing: self.zeroing,
            zeroing_note: self.zeroing_note.clone(),
        })
    }

    /// The identity recorded in run headers.
    pub fn identity(&self) -> String {
        match &self.kind {
            TargetKind::File => {
                let canon = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
                format!("file:{} size={}", canon.display(), self.geometry.capacity_bytes)
            }
            TargetKind::Block { identity, .. } => identity.stable(),
        }
    }
}

/// How long an exclusive open keeps retrying a device that is busy.
const BUSY_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens with `open`, retrying `EBUSY` for [`BUSY_GRACE`] when opening exclusively. A process
/// killed with io_uring operations in flight lets go of its files only when the kernel's
/// teardown of its ring has run (asynchronously, after the process is reaped), so the device a
/// killed writer held can stay busy for a moment after it died: `faultline write` right after
/// a `kill -9` (the manual power-loss mode) met `EBUSY` on a loaded machine. A device that is
/// mounted or held stays busy, and is refused after the grace.
fn open_retrying_busy(open: impl Fn() -> std::io::Result<File>, exclusive: bool) -> std::io::Result<File> {
    let start = std::time::Instant::now();
    loop {
        match open() {
            Err(e) if exclusive && e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < BUSY_GRACE => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

fn open_err(path: &Path) -> impl Fn(std::io::Error) -> TargetError + '_ {
    move |source| TargetError::Open { path: path.display().to_string(), source }
}

/// Opens `path` (a regular file or a block device) with O_DIRECT where possible and
/// discovers its geometry. Block devices are opened O_EXCL when writable, so the kernel
/// itself refuses one that is mounted or held (and nobody can mount it while we write).
pub fn discover(path: &Path, writable: bool) -> Result<Discovered, TargetError> {
    let shown = path.display().to_string();
    let meta = std::fs::metadata(path).map_err(open_err(path))?;
    let ft = meta.file_type();
    let open = |direct: bool, excl: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(writable);
        let mut flags = libc::O_CLOEXEC;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if excl {
            flags |= libc::O_EXCL;
        }
        o.custom_flags(flags);
        o.open(path)
    };
    if ft.is_block_device() {
        let file = open_retrying_busy(|| open(true, writable), writable).map_err(|e| {
            if e.raw_os_error() == Some(libc::EBUSY) {
                TargetError::Unsupported {
                    path: shown.clone(),
                    reason: "the kernel refuses exclusive access (EBUSY): it is mounted, swapped on, or held by \
                             device-mapper/md/LVM; unmount or release it first"
                        .into(),
                }
            } else {
                TargetError::Open { path: shown.clone(), source: e }
            }
        })?;
        let io = |what: &str| {
            let what = what.to_string();
            let shown = shown.clone();
            move |source| TargetError::Io { path: shown, what, source }
        };
        let lbs = sys::logical_block_size(&file).map_err(io("BLKSSZGET"))?;
        let pbs = sys::physical_block_size(&file).map_err(io("BLKPBSZGET"))?;
        let cap = sys::device_size_bytes(&file).map_err(io("BLKGETSIZE64"))?;
        let identity = identify(meta.rdev(), cap, lbs);
        let (zeroing, zeroing_note) = zeroing::discovered(path, Some(meta.rdev()), writable)
            .map_err(|e| TargetError::Unsupported { path: shown.clone(), reason: format!("its request queue's zeroing limits: {e}") })?;
        return Ok(Discovered {
            path: path.to_path_buf(),
            file,
            kind: TargetKind::Block { rdev: meta.rdev(), identity },
            geometry: Geometry { logical_block_bytes: lbs, physical_block_bytes: pbs.max(lbs), capacity_bytes: cap },
            direct: true,
            writable,
            zeroing,
            zeroing_note,
        });
    }
    if !ft.is_file() {
        return Err(TargetError::Unsupported { path: shown, reason: "is neither a regular file nor a block device".into() });
    }
    let (file, direct) = match open(true, false) {
        Ok(f) => (f, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (open(false, false).map_err(open_err(path))?, false),
        Err(e) => return Err(open_err(path)(e)),
    };
    let (zeroing, zeroing_note) =
        zeroing::discovered(path, None, writable).map_err(|e| TargetError::Unsupported { path: shown.clone(), reason: e.to_string() })?;
    Ok(Discovered {
        path: path.to_path_buf(),
        file,
        kind: TargetKind::File,
        geometry: Geometry { logical_block_bytes: FILE_SECTOR_BYTES, physical_block_bytes: 4096, capacity_bytes: meta.len() },
        direct,
        writable,
        zeroing,
        zeroing_note,
    })
}
