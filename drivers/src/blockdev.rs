//! Discovery: what a target path is, its geometry and its stable identity.
//!
//! Block devices are measured with ioctls (BLKSSZGET, BLKPBSZGET, BLKGETSIZE64) and named by
//! what sysfs says about the hardware (model, serial, WWID/EUI), not by their `/dev` path:
//! `/dev/nvme0n1` may be another drive after the next re-enumeration, and a run directory
//! must never be continued on the wrong drive. Regular files are named by canonical path.

use crate::block::{Geometry, TargetError};
use crate::sys;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Sector size assumed for regular files.
pub const FILE_SECTOR_BYTES: u32 = 512;

/// What sysfs says about a block device. Empty strings where sysfs has nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// Kernel name (`sda`, `nvme0n1`, `loop3`, `sda2`): informative only, never compared.
    pub name: String,
    pub model: String,
    pub serial: String,
    /// WWID, EUI-64 or NGUID as the kernel reports it (`/sys/block/X/wwid` or `device/wwid`).
    pub wwid: String,
    /// For loop devices: the backing file (their only stable name).
    pub backing_file: String,
    /// For partitions: the partition number and its start (bytes) on the parent disk.
    pub partition: Option<(u32, u64)>,
    pub capacity_bytes: u64,
    pub logical_block_bytes: u32,
}

impl DeviceIdentity {
    /// The one-line identity recorded in a run header: stable across re-enumeration.
    pub fn stable(&self) -> String {
        let mut s = String::from("block:");
        let mut parts = Vec::new();
        if !self.model.is_empty() {
            parts.push(format!("model={}", self.model.replace(' ', "_")));
        }
        if !self.serial.is_empty() {
            parts.push(format!("serial={}", self.serial));
        }
        if !self.wwid.is_empty() {
            parts.push(format!("wwid={}", self.wwid.replace(' ', "_")));
        }
        if !self.backing_file.is_empty() {
            parts.push(format!("loop-backing={}", self.backing_file));
        }
        if self.model.is_empty() && self.serial.is_empty() && self.wwid.is_empty() && self.backing_file.is_empty() {
            // Nothing stable is known: the kernel name is the best there is.
            parts.push(format!("name={}", self.name));
        }
        if let Some((n, start)) = self.partition {
            parts.push(format!("part={n}@{start}"));
        }
        parts.push(format!("size={}", self.capacity_bytes));
        parts.push(format!("lbs={}", self.logical_block_bytes));
        s.push_str(&parts.join(" "));
        s
    }
}

/// What the caller expects the device to be; every field given must match exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectation {
    pub serial: Option<String>,
    pub wwid: Option<String>,
    pub model: Option<String>,
    pub size_bytes: Option<u64>,
}

impl Expectation {
    pub fn is_empty(&self) -> bool {
        self.serial.is_none() && self.wwid.is_none() && self.model.is_none() && self.size_bytes.is_none()
    }

    /// Every mismatch, as "what (flag): found X, expected Y".
    pub fn mismatches(&self, id: &DeviceIdentity) -> Vec<String> {
        let mut out = Vec::new();
        let mut cmp = |what: &str, flag: &str, found: &str, want: &Option<String>| {
            if let Some(w) = want {
                if found.trim() != w.trim() {
                    out.push(format!("{what} is '{found}', expected '{w}' ({flag})"));
                }
            }
        };
        cmp("serial", "--expect-serial", &id.serial, &self.serial);
        cmp("WWID", "--expect-wwid", &id.wwid, &self.wwid);
        cmp("model", "--expect-model", &id.model, &self.model);
        if let Some(sz) = self.size_bytes {
            if sz != id.capacity_bytes {
                out.push(format!("capacity is {} bytes, expected {sz} (--expect-size)", id.capacity_bytes));
            }
        }
        out
    }
}

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

fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The sysfs directory of a block device (`/sys/dev/block/MAJ:MIN`, canonicalized).
pub fn sysfs_dir(rdev: u64) -> Option<PathBuf> {
    let p = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)));
    std::fs::canonicalize(p).ok()
}

/// Identity of a block device from sysfs (a partition takes its disk's hardware identity).
pub fn identify(rdev: u64, capacity_bytes: u64, logical_block_bytes: u32) -> DeviceIdentity {
    let mut id = DeviceIdentity { capacity_bytes, logical_block_bytes, ..Default::default() };
    let Some(dir) = sysfs_dir(rdev) else { return id };
    id.name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let disk = if dir.join("partition").exists() {
        let n: u32 = read_trim(&dir.join("partition")).parse().unwrap_or(0);
        let start: u64 = read_trim(&dir.join("start")).parse().unwrap_or(0);
        id.partition = Some((n, start * 512));
        dir.parent().map(Path::to_path_buf).unwrap_or(dir.clone())
    } else {
        dir.clone()
    };
    id.model = read_trim(&disk.join("device/model"));
    id.serial = read_trim(&disk.join("device/serial"));
    if id.serial.is_empty() {
        id.serial = read_trim(&disk.join("serial"));
    }
    id.wwid = read_trim(&disk.join("wwid"));
    if id.wwid.is_empty() {
        id.wwid = read_trim(&disk.join("device/wwid"));
    }
    id.backing_file = read_trim(&disk.join("loop/backing_file"));
    id
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
        let file = open(true, writable).map_err(|e| {
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
        return Ok(Discovered {
            path: path.to_path_buf(),
            file,
            kind: TargetKind::Block { rdev: meta.rdev(), identity },
            geometry: Geometry { logical_block_bytes: lbs, physical_block_bytes: pbs.max(lbs), capacity_bytes: cap },
            direct: true,
            writable,
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
    Ok(Discovered {
        path: path.to_path_buf(),
        file,
        kind: TargetKind::File,
        geometry: Geometry { logical_block_bytes: FILE_SECTOR_BYTES, physical_block_bytes: 4096, capacity_bytes: meta.len() },
        direct,
        writable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_identity_names_hardware_not_paths() {
        let id = DeviceIdentity {
            name: "nvme0n1".into(),
            model: "ACME SSD 9000".into(),
            serial: "S123".into(),
            wwid: "eui.0025388b91b2c3d4".into(),
            capacity_bytes: 1 << 40,
            logical_block_bytes: 512,
            ..Default::default()
        };
        let s = id.stable();
        assert_eq!(s, "block:model=ACME_SSD_9000 serial=S123 wwid=eui.0025388b91b2c3d4 size=1099511627776 lbs=512");
        assert!(!s.contains("nvme0n1"));
        let e = Expectation { serial: Some("S999".into()), size_bytes: Some(1 << 40), ..Default::default() };
        let m = e.mismatches(&id);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("--expect-serial"), "{m:?}");
    }
}
