//! Discovery: what a target path is, its geometry and its stable identity.
//!
//! Block devices are measured with ioctls (BLKSSZGET, BLKPBSZGET, BLKGETSIZE64) and named by
//! what sysfs says about the hardware (model, serial, WWID/EUI), not by their `/dev` path:
//! `/dev/nvme0n1` may be another drive after the next re-enumeration, and a run directory
//! must never be continued on the wrong drive. Regular files are named by canonical path.
//!
//! The same identity finds a device again after it re-enumerates under a new name
//! (`nvme0n1` back as `nvme1n1` after a power cycle): [`find_by_identity`] scans sysfs for
//! the one device matching an [`Expectation`], and refuses when none or several match.

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
    /// A loop device's backing file as the kernel reports it (`loop/backing_file`: the
    /// absolute path, symlinks resolved).
    pub backing_file: Option<String>,
}

impl Expectation {
    pub fn is_empty(&self) -> bool {
        self.serial.is_none() && self.wwid.is_none() && self.model.is_none() && self.size_bytes.is_none() && self.backing_file.is_none()
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
        cmp("backing file", "--expect-backing-file", &id.backing_file, &self.backing_file);
        if let Some(sz) = self.size_bytes {
            if sz != id.capacity_bytes {
                out.push(format!("capacity is {} bytes, expected {sz} (--expect-size)", id.capacity_bytes));
            }
        }
        out
    }

    /// How many fields are given.
    fn given(&self) -> usize {
        [self.serial.is_some(), self.wwid.is_some(), self.model.is_some(), self.size_bytes.is_some(), self.backing_file.is_some()]
            .iter()
            .filter(|g| **g)
            .count()
    }

    /// The given string fields, with their flags.
    fn strings(&self) -> [(&'static str, &Option<String>); 4] {
        [
            ("--expect-serial", &self.serial),
            ("--expect-wwid", &self.wwid),
            ("--expect-model", &self.model),
            ("--expect-backing-file", &self.backing_file),
        ]
    }

    /// The fields given, on one line (`serial="S1" size=1000`), for messages.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (flag, v) in self.strings() {
            if let Some(v) = v {
                parts.push(format!("{}={v:?}", flag.trim_start_matches("--expect-")));
            }
        }
        if let Some(sz) = self.size_bytes {
            parts.push(format!("size={sz}"));
        }
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join(" ")
        }
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
/// Capacity and logical block size are the caller's (measured with ioctls).
pub fn identify(rdev: u64, capacity_bytes: u64, logical_block_bytes: u32) -> DeviceIdentity {
    match sysfs_dir(rdev) {
        Some(dir) => identify_sysfs(&dir, capacity_bytes, logical_block_bytes),
        None => DeviceIdentity { capacity_bytes, logical_block_bytes, ..Default::default() },
    }
}

/// The whole disk's sysfs directory: `dir` itself, or its parent when `dir` is a partition.
fn disk_dir(dir: &Path) -> PathBuf {
    if dir.join("partition").exists() {
        dir.parent().map(Path::to_path_buf).unwrap_or_else(|| dir.to_path_buf())
    } else {
        dir.to_path_buf()
    }
}

/// Identity of the block device whose (canonical) sysfs directory is `dir`: the name,
/// partition, model, serial, WWID and loop backing file from sysfs, with the capacity and
/// logical block size given. A partition takes its disk's hardware identity.
pub fn identify_sysfs(dir: &Path, capacity_bytes: u64, logical_block_bytes: u32) -> DeviceIdentity {
    let mut id = DeviceIdentity { capacity_bytes, logical_block_bytes, ..Default::default() };
    id.name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let disk = disk_dir(dir);
    if disk != dir {
        let n: u32 = read_trim(&dir.join("partition")).parse().unwrap_or(0);
        let start: u64 = read_trim(&dir.join("start")).parse().unwrap_or(0);
        id.partition = Some((n, start * 512));
    }
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

/// Where sysfs and the device nodes are: `/sys` and `/dev` on a running system, a
/// temporary tree in tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysRoots {
    pub sys: PathBuf,
    pub dev: PathBuf,
}

impl SysRoots {
    pub fn system() -> SysRoots {
        SysRoots { sys: PathBuf::from("/sys"), dev: PathBuf::from("/dev") }
    }
}

impl Default for SysRoots {
    fn default() -> SysRoots {
        SysRoots::system()
    }
}

/// A block device seen by a sysfs scan: its device node and its identity, with capacity
/// from sysfs `size` and logical block size from the disk's `queue/logical_block_size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    pub identity: DeviceIdentity,
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.identity.stable())
    }
}

/// Why [`find_by_identity`] found no device to use.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error(
        "nothing to find a device by: give at least one of serial, wwid, model, size or backing file \
         (--expect-serial, --expect-wwid, --expect-model, --expect-size, --expect-backing-file)"
    )]
    EmptyExpectation,
    #[error("{flag} is given but empty; give its value or leave it out")]
    BlankField { flag: &'static str },
    #[error("cannot list block devices in {dir}: {source}")]
    Scan { dir: String, source: std::io::Error },
    #[error("{}", not_found_text(.expect, *.scanned, .closest, *.omitted))]
    NotFound {
        expect: Box<Expectation>,
        /// Block devices scanned (hidden ones not counted).
        scanned: usize,
        /// Devices matching some of the fields, most matching first; when none matches any,
        /// the devices with a non-zero capacity (what is there).
        closest: Vec<Candidate>,
        /// Further candidates left out of `closest`.
        omitted: usize,
    },
    #[error("{}", ambiguous_text(.expect, .matches))]
    Ambiguous { expect: Box<Expectation>, matches: Vec<Candidate> },
}

/// At most this many candidates are listed when nothing matches.
const MAX_CLOSEST: usize = 10;

fn not_found_text(expect: &Expectation, scanned: usize, closest: &[Candidate], omitted: usize) -> String {
    let mut s = format!("no block device matches {} ({scanned} scanned)", expect.summary());
    let some = closest.iter().any(|c| expect.mismatches(&c.identity).len() < expect.given());
    if closest.is_empty() {
        s.push_str("; none has a non-zero capacity");
        return s;
    }
    s.push_str(if some { "; closest, matching some fields:" } else { "; none matches any field; devices present:" });
    for c in closest {
        s.push_str(&format!("\n  {c}\n    differs: {}", expect.mismatches(&c.identity).join("; ")));
    }
    if omitted > 0 {
        s.push_str(&format!("\n  ({omitted} more not shown)"));
    }
    s
}

fn ambiguous_text(expect: &Expectation, matches: &[Candidate]) -> String {
    let mut s = format!(
        "{} block devices match {}; faultline never picks one (writing to the wrong drive destroys it): \
         give more of --expect-serial, --expect-wwid, --expect-model, --expect-size, --expect-backing-file to tell them apart:",
        matches.len(),
        expect.summary()
    );
    for c in matches {
        s.push_str(&format!("\n  {c}"));
    }
    s
}

/// A hidden disk: a native NVMe multipath per-path node (`nvmeXcYnZ`), which has no device
/// node and must never be written to directly. sysfs says so with `hidden` = 1; kernels
/// without that attribute are caught by the name.
fn is_hidden(dir: &Path) -> bool {
    if read_trim(&dir.join("hidden")) == "1" {
        return true;
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let digits = |s: &str| -> Option<usize> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then_some(n)
    };
    let path_node = || -> Option<()> {
        let r = name.strip_prefix("nvme")?;
        let r = r[digits(r)?..].strip_prefix('c')?;
        let r = r[digits(r)?..].strip_prefix('n')?;
        (digits(r)? == r.len()).then_some(())
    };
    path_node().is_some()
}

/// The device node's name under the /dev root: `DEVNAME` from `uevent`, else the kernel
/// name with `!` for `/` (as in `cciss!c0d0`).
fn dev_name(dir: &Path, name: &str) -> String {
    let uevent = std::fs::read_to_string(dir.join("uevent")).unwrap_or_default();
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| name.replace('!', "/"))
}

/// Every block device in `<sys>/class/block` (whole disks and partitions; hidden NVMe
/// per-path nodes skipped), sorted by kernel name, with its `/dev` path and its identity
/// read the same way [`identify`] reads it.
pub fn scan_block_devices(roots: &SysRoots) -> Result<Vec<Candidate>, FindError> {
    let class = roots.sys.join("class/block");
    let rd = std::fs::read_dir(&class).map_err(|source| FindError::Scan { dir: class.display().to_string(), source })?;
    let mut out = Vec::new();
    for e in rd.flatten() {
        let dir = std::fs::canonicalize(e.path()).unwrap_or_else(|_| e.path());
        let disk = disk_dir(&dir);
        if is_hidden(&dir) || is_hidden(&disk) {
            continue;
        }
        let sectors: u64 = read_trim(&dir.join("size")).parse().unwrap_or(0);
        let lbs: u32 = read_trim(&disk.join("queue/logical_block_size")).parse().unwrap_or(0);
        let identity = identify_sysfs(&dir, sectors.saturating_mul(512), lbs);
        let path = roots.dev.join(dev_name(&dir, &identity.name));
        out.push(Candidate { path, identity });
    }
    out.sort_by(|a, b| a.identity.name.cmp(&b.identity.name));
    Ok(out)
}

/// The `/dev` path of the one block device whose identity matches every field `expect`
/// gives, found by scanning sysfs: a device that re-enumerated under a new name is found
/// again. Whole disks and partitions are both candidates (a partition has its disk's serial,
/// WWID and model, so those alone match the disk and each of its partitions: add the size).
///
/// Refuses an empty expectation, a blank string field, no match (naming how many devices
/// were scanned and the closest ones) and more than one match (naming all of them): it never
/// picks one. Capacity and block size come from sysfs here; open the path with
/// [`crate::open::open_target`] and the same expectation, which measures with ioctls and
/// checks again.
pub fn find_by_identity(expect: &Expectation, roots: &SysRoots) -> Result<PathBuf, FindError> {
    if expect.is_empty() {
        return Err(FindError::EmptyExpectation);
    }
    if let Some((flag, _)) = expect.strings().into_iter().find(|(_, v)| v.as_deref().is_some_and(|v| v.trim().is_empty())) {
        return Err(FindError::BlankField { flag });
    }
    let all = scan_block_devices(roots)?;
    let scanned = all.len();
    let (mut matches, rest): (Vec<Candidate>, Vec<Candidate>) = all.into_iter().partition(|c| expect.mismatches(&c.identity).is_empty());
    match matches.len() {
        1 => Ok(matches.remove(0).path),
        0 => {
            let given = expect.given();
            let score = |c: &Candidate| given - expect.mismatches(&c.identity).len();
            let mut closest: Vec<Candidate> = rest.iter().filter(|c| score(c) > 0).cloned().collect();
            if closest.is_empty() {
                closest = rest.into_iter().filter(|c| c.identity.capacity_bytes > 0).collect();
            }
            // Stable: equal scores keep the name order.
            closest.sort_by_key(|c| std::cmp::Reverse(score(c)));
            let omitted = closest.len().saturating_sub(MAX_CLOSEST);
            closest.truncate(MAX_CLOSEST);
            Err(FindError::NotFound { expect: Box::new(expect.clone()), scanned, closest, omitted })
        }
        _ => Err(FindError::Ambiguous { expect: Box::new(expect.clone()), matches }),
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
    use crate::fake_root::FakeRoot;

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
        let e = Expectation { backing_file: Some("/var/tmp/a.img".into()), ..Default::default() };
        assert!(!e.is_empty());
        let m = e.mismatches(&id);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains("--expect-backing-file"), "{m:?}");
    }

    /// A fake sysfs and /dev under a temporary directory, removed on drop. Block devices are
    /// laid out as the kernel does: real directories under `sys/devices`, symlinks to them in
    /// `sys/class/block`, partitions inside their disk's directory.
    struct FakeSys {
        root: FakeRoot,
    }

    impl FakeSys {
        fn new(name: &str) -> FakeSys {
            let root = FakeRoot::new(&format!("sys-{name}"));
            root.dir("sys/class/block");
            root.dir("dev");
            FakeSys { root }
        }

        fn roots(&self) -> SysRoots {
            SysRoots { sys: self.root.0.join("sys"), dev: self.root.0.join("dev") }
        }

        fn write(&self, rel: &str, text: &str) {
            self.root.file(&format!("sys/{rel}"), &format!("{text}\n"));
        }

        fn link(&self, rel: &str, target: &str) {
            let p = self.root.0.join("sys").join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, p).unwrap();
        }

        /// A block device at `sys/devices/<devpath>`, listed in class/block.
        fn block(&self, devpath: &str, sectors: u64, attrs: &[(&str, &str)]) {
            let name = devpath.rsplit('/').next().unwrap();
            let dir = format!("devices/{devpath}");
            self.write(&format!("{dir}/size"), &sectors.to_string());
            self.write(&format!("{dir}/uevent"), &format!("MAJOR=259\nMINOR=0\nDEVNAME={name}\nDEVTYPE=disk"));
            for (k, v) in attrs {
                self.write(&format!("{dir}/{k}"), v);
            }
            self.link(&format!("class/block/{name}"), self.root.0.join("sys").join(&dir).to_str().unwrap());
        }
    }

    const NVME0: &str = "pci0000:00/0000:00:01.0/nvme/nvme0";
    const NVME1: &str = "pci0000:00/0000:00:02.0/nvme/nvme1";

    /// Two NVMe namespaces of one model with different serials, a hidden multipath per-path
    /// node of the first (same serial, WWID and size), a partition of the first, an attached
    /// loop device and a detached one.
    fn machine(name: &str) -> FakeSys {
        let f = FakeSys::new(name);
        f.write(&format!("devices/{NVME0}/model"), "ACME SSD 9000                           ");
        f.write(&format!("devices/{NVME0}/serial"), "S1AAA   ");
        f.block(&format!("{NVME0}/nvme0n1"), 2_000_000, &[("wwid", "eui.0001"), ("queue/logical_block_size", "512"), ("hidden", "0")]);
        f.link(&format!("devices/{NVME0}/nvme0n1/device"), "..");
        f.block(&format!("{NVME0}/nvme0n1/nvme0n1p1"), 1_000_000, &[("partition", "1"), ("start", "2048")]);
        f.block(&format!("{NVME0}/nvme0c0n1"), 2_000_000, &[("wwid", "eui.0001"), ("queue/logical_block_size", "512"), ("hidden", "1")]);
        f.link(&format!("devices/{NVME0}/nvme0c0n1/device"), "..");
        f.write(&format!("devices/{NVME1}/model"), "ACME SSD 9000");
        f.write(&format!("devices/{NVME1}/serial"), "S2BBB");
        f.block(&format!("{NVME1}/nvme1n1"), 4_000_000, &[("wwid", "eui.0002"), ("queue/logical_block_size", "4096")]);
        f.link(&format!("devices/{NVME1}/nvme1n1/device"), "..");
        f.block("virtual/block/loop3", 16384, &[("queue/logical_block_size", "512"), ("loop/backing_file", "/var/tmp/a.img")]);
        f.block("virtual/block/loop0", 0, &[("queue/logical_block_size", "512")]);
        f
    }

    fn exp(serial: Option<&str>, model: Option<&str>, size_bytes: Option<u64>) -> Expectation {
        Expectation { serial: serial.map(String::from), model: model.map(String::from), size_bytes, ..Default::default() }
    }

    #[test]
    fn scan_reads_identities_and_skips_hidden_path_nodes() {
        let f = machine("scan");
        let all = scan_block_devices(&f.roots()).unwrap();
        let names: Vec<&str> = all.iter().map(|c| c.identity.name.as_str()).collect();
        assert_eq!(names, ["loop0", "loop3", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
        let by = |n: &str| all.iter().find(|c| c.identity.name == n).unwrap();
        let p1 = by("nvme0n1p1");
        assert_eq!(p1.path, f.root.0.join("dev/nvme0n1p1"));
        assert_eq!(p1.identity.serial, "S1AAA");
        assert_eq!(p1.identity.model, "ACME SSD 9000");
        assert_eq!(p1.identity.wwid, "eui.0001");
        assert_eq!(p1.identity.partition, Some((1, 2048 * 512)));
        assert_eq!((p1.identity.capacity_bytes, p1.identity.logical_block_bytes), (1_000_000 * 512, 512), "lbs from the disk's queue");
        let n1 = by("nvme1n1");
        assert_eq!(
            (n1.identity.serial.as_str(), n1.identity.capacity_bytes, n1.identity.logical_block_bytes),
            ("S2BBB", 2_048_000_000, 4096)
        );
        assert_eq!(by("loop3").identity.backing_file, "/var/tmp/a.img");
        // identify() reads through the same function.
        let dir = std::fs::canonicalize(f.root.0.join("sys/class/block/nvme0n1p1")).unwrap();
        assert_eq!(identify_sysfs(&dir, 1_000_000 * 512, 512), p1.identity);
        // The per-path node is recognised by name too, on kernels without `hidden`.
        assert!(is_hidden(Path::new("/sys/x/nvme12c3n45")));
        assert!(!is_hidden(Path::new("/sys/x/nvme1n1")) && !is_hidden(Path::new("/sys/x/nvme1c2n")));
        // And by the attribute alone, whatever the name.
        f.write("devices/virtual/block/loop3/hidden", "1");
        let names: Vec<String> = scan_block_devices(&f.roots()).unwrap().into_iter().map(|c| c.identity.name).collect();
        assert_eq!(names, ["loop0", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
    }

    #[test]
    fn one_match_is_found_by_any_field() {
        let f = machine("unique");
        let r = f.roots();
        let dev = |n: &str| f.root.0.join("dev").join(n);
        assert_eq!(find_by_identity(&exp(Some("S2BBB"), None, None), &r).unwrap(), dev("nvme1n1"));
        // The hidden node shares serial and size with nvme0n1: had it been scanned, this would
        // be ambiguous.
        assert_eq!(find_by_identity(&exp(Some("S1AAA"), None, Some(1_024_000_000)), &r).unwrap(), dev("nvme0n1"));
        assert_eq!(find_by_identity(&exp(Some("S1AAA"), Some("ACME SSD 9000"), Some(512_000_000)), &r).unwrap(), dev("nvme0n1p1"));
        let wwid = Expectation { wwid: Some("eui.0002".into()), ..Default::default() };
        assert_eq!(find_by_identity(&wwid, &r).unwrap(), dev("nvme1n1"));
        let backing = Expectation { backing_file: Some("/var/tmp/a.img".into()), ..Default::default() };
        assert_eq!(find_by_identity(&backing, &r).unwrap(), dev("loop3"));
    }

    #[test]
    fn size_alone_finds_a_device() {
        let f = machine("size");
        let r = f.roots();
        assert_eq!(find_by_identity(&exp(None, None, Some(2_048_000_000)), &r).unwrap(), f.root.0.join("dev/nvme1n1"));
        assert_eq!(find_by_identity(&exp(None, None, Some(16384 * 512)), &r).unwrap(), f.root.0.join("dev/loop3"));
        let e = find_by_identity(&exp(None, None, Some(12345)), &r).unwrap_err();
        assert!(matches!(e, FindError::NotFound { scanned: 5, .. }), "{e}");
    }

    #[test]
    fn no_match_lists_what_was_scanned_and_the_closest() {
        let f = machine("nomatch");
        let e = find_by_identity(&exp(Some("S9ZZZ"), Some("ACME SSD 9000"), None), &f.roots()).unwrap_err();
        let FindError::NotFound { scanned, closest, omitted, .. } = &e else { panic!("{e}") };
        assert_eq!((*scanned, *omitted), (5, 0));
        let names: Vec<&str> = closest.iter().map(|c| c.identity.name.as_str()).collect();
        assert_eq!(names, ["nvme0n1", "nvme0n1p1", "nvme1n1"], "those with the model");
        let msg = e.to_string();
        for want in
            ["no block device matches", "serial=\"S9ZZZ\"", "5 scanned", "closest, matching some fields", "serial=S2BBB", "--expect-serial"]
        {
            assert!(msg.contains(want), "{want} not in:\n{msg}");
        }
        assert!(msg.contains(f.root.0.join("dev/nvme1n1").to_str().unwrap()), "{msg}");

        // Nothing matches any field: the devices present are listed (not the empty loop0).
        let e = find_by_identity(&exp(Some("S9ZZZ"), None, None), &f.roots()).unwrap_err();
        let FindError::NotFound { closest, .. } = &e else { panic!("{e}") };
        let names: Vec<&str> = closest.iter().map(|c| c.identity.name.as_str()).collect();
        assert_eq!(names, ["loop3", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
        assert!(e.to_string().contains("none matches any field"), "{e}");
    }

    #[test]
    fn several_matches_are_refused_naming_each() {
        let f = machine("ambiguous");
        let e = find_by_identity(&exp(None, Some("ACME SSD 9000"), None), &f.roots()).unwrap_err();
        let FindError::Ambiguous { matches, .. } = &e else { panic!("{e}") };
        assert_eq!(matches.len(), 3);
        let msg = e.to_string();
        assert!(msg.contains("3 block devices match") && msg.contains("never picks one"), "{msg}");
        for n in ["nvme0n1", "nvme0n1p1", "nvme1n1"] {
            assert!(msg.contains(&format!("{}:", f.root.0.join("dev").join(n).display())), "{n} not in:\n{msg}");
        }
        // A serial names the disk and each of its partitions.
        let e = find_by_identity(&exp(Some("S1AAA"), None, None), &f.roots()).unwrap_err();
        let FindError::Ambiguous { matches, .. } = &e else { panic!("{e}") };
        let names: Vec<&str> = matches.iter().map(|c| c.identity.name.as_str()).collect();
        assert_eq!(names, ["nvme0n1", "nvme0n1p1"]);
    }

    #[test]
    fn empty_or_blank_expectations_are_refused() {
        let f = machine("empty");
        let e = find_by_identity(&Expectation::default(), &f.roots()).unwrap_err();
        assert!(matches!(e, FindError::EmptyExpectation), "{e}");
        assert!(e.to_string().contains("give at least one of serial, wwid, model, size"), "{e}");
        let e = find_by_identity(&exp(Some("  "), None, Some(1)), &f.roots()).unwrap_err();
        assert!(matches!(e, FindError::BlankField { flag: "--expect-serial" }), "{e}");
        let missing = SysRoots { sys: f.root.0.join("nosys"), dev: f.root.0.join("dev") };
        let e = find_by_identity(&exp(Some("S1AAA"), None, None), &missing).unwrap_err();
        assert!(matches!(e, FindError::Scan { .. }), "{e}");
    }
}
