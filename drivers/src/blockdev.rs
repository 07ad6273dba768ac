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
//!
//! One namespace may be reached through several controllers (a dual-port drive without native
//! multipath: `nvme0n1` and `nvme1n1`, the same storage). [`find_namespace_paths`] returns
//! every path of the one namespace an expectation names, refusing matches that belong to
//! different namespaces, and [`find_path`] follows one given path (by `cntlid`, PCI address or
//! controller name, see [`PathId`]) across re-enumeration. The namespace/path split itself is
//! in [`crate::identity`].
//!
//! Files: this one (identities, finding devices), `opened.rs` ([`discover`]: opening and
//! measuring a target), `zeroing.rs` (what a target carries of deallocate and write zeroes).

use crate::identity::{disk_dir, namespace_id_sysfs, path_id_sysfs, read_trim, NamespaceId, PathId};
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
    /// This expectation with each field it leaves open taken from `other`.
    pub fn or(&self, other: &Expectation) -> Expectation {
        Expectation {
            serial: self.serial.clone().or_else(|| other.serial.clone()),
            wwid: self.wwid.clone().or_else(|| other.wwid.clone()),
            model: self.model.clone().or_else(|| other.model.clone()),
            size_bytes: self.size_bytes.or(other.size_bytes),
            backing_file: self.backing_file.clone().or_else(|| other.backing_file.clone()),
        }
    }

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
    /// [`find_namespace_paths`], [`find_path`]: the matches belong to more than one namespace
    /// (or to a disk and its partitions); each inner list is one namespace's paths.
    #[error("{}", several_namespaces_text(.expect, .namespaces))]
    SeveralNamespaces { expect: Box<Expectation>, namespaces: Vec<Vec<PathMatch>> },
    /// [`find_path`]: the namespace was found, but `want` selects none of its paths, or
    /// several.
    /// `idle` lists the NVMe controllers `want` names that have no path to the namespace
    /// (a controller back on the bus whose initialisation has not finished, say), each with
    /// its sysfs `state`.
    #[error("{}", no_such_path_text(.expect, .want, .paths, *.selected, .idle))]
    Path { expect: Box<Expectation>, want: Box<PathId>, paths: Vec<PathMatch>, selected: usize, idle: Vec<IdleController> },
}

/// The command-line flags that narrow an identity, as the refusals name them; a caller with
/// other names for them (a scenario's `target.*` fields) replaces this phrase.
pub const EXPECT_FLAGS: &str = "--expect-serial, --expect-wwid, --expect-model, --expect-size, --expect-backing-file";

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
         give more of {EXPECT_FLAGS} to tell them apart:",
        matches.len(),
        expect.summary()
    );
    for c in matches {
        s.push_str(&format!("\n  {c}"));
    }
    s
}

fn several_namespaces_text(expect: &Expectation, namespaces: &[Vec<PathMatch>]) -> String {
    let mut s = format!(
        "block devices of {} different namespaces match {}; faultline never picks one (writing to the wrong drive destroys it): \
         give more of {EXPECT_FLAGS} to tell them apart:",
        namespaces.len(),
        expect.summary()
    );
    for (i, paths) in namespaces.iter().enumerate() {
        let key = paths.first().and_then(|m| m.namespace.key()).unwrap_or_else(|| "no NGUID, EUI-64 or WWID".into());
        s.push_str(&format!("\n  namespace {} ({key}):", i + 1));
        for m in paths {
            s.push_str(&format!("\n    {m}"));
        }
    }
    s
}

fn no_such_path_text(expect: &Expectation, want: &PathId, paths: &[PathMatch], selected: usize, idle: &[IdleController]) -> String {
    let what = if selected == 0 { "none".to_string() } else { format!("{selected}") };
    let mut s = format!("the namespace matching {} has {} path(s); {what} of them is {want}:", expect.summary(), paths.len());
    for m in paths {
        s.push_str(&format!("\n  {m}"));
    }
    for c in idle {
        s.push_str(&format!("\n  {c}"));
    }
    s
}

/// An NVMe controller in sysfs (`/sys/class/nvme/<name>`) without a path to the namespace
/// looked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleController {
    pub name: String,
    pub pci_address: Option<String>,
    /// Its `state` attribute (`live`, `connecting`, `resetting`, `deleting`, `dead`...).
    pub state: String,
}

impl std::fmt::Display for IdleController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "controller {}", self.name)?;
        if let Some(a) = &self.pci_address {
            write!(f, " pci={a}")?;
        }
        write!(f, " is present in state {:?} with no path to this namespace", self.state)?;
        match self.state.as_str() {
            "new" | "connecting" | "resetting" => write!(f, " (back on the bus, its initialisation not finished: commands unanswered)"),
            "deleting" | "deleting (no IO)" | "dead" => write!(f, " (the kernel gave it up)"),
            _ => Ok(()),
        }
    }
}

/// The controllers in `<sys>/class/nvme` that `want` names (by PCI address, else by name)
/// and that none of `paths` goes through.
fn idle_controllers(want: &PathId, paths: &[PathMatch], roots: &SysRoots) -> Vec<IdleController> {
    let Ok(dir) = std::fs::read_dir(roots.sys.join("class/nvme")) else { return Vec::new() };
    let mut out: Vec<IdleController> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let address = crate::identity::read_trim(&e.path().join("address"));
            let pci_address = (!address.is_empty()).then_some(address);
            let named = match (&want.pci_address, &want.controller) {
                (Some(a), _) => pci_address.as_deref() == Some(a.as_str()),
                (None, Some(c)) => *c == name,
                (None, None) => false,
            };
            let has_path = paths.iter().any(|m| m.path.controller.as_deref() == Some(name.as_str()));
            (named && !has_path).then(|| IdleController { state: crate::identity::read_trim(&e.path().join("state")), name, pci_address })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
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
    Ok(scan_paths(roots)?.into_iter().map(|m| Candidate { path: m.dev, identity: m.identity }).collect())
}

/// One block device seen by [`scan_paths`]: a path to a namespace (or to a partition of one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathMatch {
    /// The device node (`/dev/nvme1n1`).
    pub dev: PathBuf,
    /// The identity [`find_by_identity`] compares (and run headers record).
    pub identity: DeviceIdentity,
    /// What the namespace is, the same through each of its paths.
    pub namespace: NamespaceId,
    /// Which controller this device goes through.
    pub path: PathId,
}

impl std::fmt::Display for PathMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.dev.display(), self.identity.stable(), self.path)
    }
}

/// What [`scan_block_devices`] sees, with each device's namespace and path identities.
pub fn scan_paths(roots: &SysRoots) -> Result<Vec<PathMatch>, FindError> {
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
        let dev = roots.dev.join(dev_name(&dir, &identity.name));
        let namespace = namespace_id_sysfs(&dir, identity.capacity_bytes, lbs);
        out.push(PathMatch { dev, identity, namespace, path: path_id_sysfs(&dir) });
    }
    out.sort_by(|a, b| a.identity.name.cmp(&b.identity.name));
    Ok(out)
}

/// Refuses an empty expectation and a blank string field.
fn check_expectation(expect: &Expectation) -> Result<(), FindError> {
    if expect.is_empty() {
        return Err(FindError::EmptyExpectation);
    }
    if let Some((flag, _)) = expect.strings().into_iter().find(|(_, v)| v.as_deref().is_some_and(|v| v.trim().is_empty())) {
        return Err(FindError::BlankField { flag });
    }
    Ok(())
}

/// Nothing matched: the closest candidates, most matching fields first.
fn not_found(expect: &Expectation, scanned: usize, rest: Vec<Candidate>) -> FindError {
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
    FindError::NotFound { expect: Box::new(expect.clone()), scanned, closest, omitted }
}

/// Whether the kernel has finished setting the block device up: a logical block size of 0 in
/// sysfs is a disk still being added or revalidated (seen in the lab right after a
/// controller came back from a power cut: one path of the namespace with `lbs=0` beside
/// another with 512, which then looked like two namespaces). Such a device is not a match
/// yet; it is found once it is set up (a caller waiting for the device looks again).
fn set_up(id: &DeviceIdentity) -> bool {
    id.logical_block_bytes != 0
}

/// Every path of the one namespace whose identity matches every field `expect` gives,
/// sorted by device name: `nvme0n1` and `nvme1n1` for one namespace behind two controllers,
/// a single path for most devices. Matches are the same namespace when they share an NGUID,
/// EUI-64 or WWID ([`NamespaceId::same_namespace`]) and are the same partition (or both the
/// whole disk); a device reporting none of these identifiers is a namespace of its own.
///
/// Refuses what [`find_by_identity`] refuses, except that several paths of one namespace are
/// the answer; matches in two different namespaces (or a disk and its partition) are refused,
/// naming every one.
pub fn find_namespace_paths(expect: &Expectation, roots: &SysRoots) -> Result<Vec<PathMatch>, FindError> {
    check_expectation(expect)?;
    let all = scan_paths(roots)?;
    let scanned = all.len();
    let (matches, rest): (Vec<PathMatch>, Vec<PathMatch>) =
        all.into_iter().partition(|m| expect.mismatches(&m.identity).is_empty() && set_up(&m.identity));
    if matches.is_empty() {
        let rest = rest.into_iter().map(|m| Candidate { path: m.dev, identity: m.identity }).collect();
        return Err(not_found(expect, scanned, rest));
    }
    let mut namespaces: Vec<Vec<PathMatch>> = Vec::new();
    for m in matches {
        let same = |g: &Vec<PathMatch>| g[0].namespace.same_namespace(&m.namespace) && g[0].identity.partition == m.identity.partition;
        match namespaces.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(m),
            None => namespaces.push(vec![m]),
        }
    }
    if namespaces.len() == 1 {
        Ok(namespaces.remove(0))
    } else {
        Err(FindError::SeveralNamespaces { expect: Box::new(expect.clone()), namespaces })
    }
}

/// The path `want` selects (see [`PathId`]: by `cntlid`, else PCI address, else controller
/// name, else device name) among the paths of the one namespace `expect` names
/// ([`find_namespace_paths`]): after re-enumeration `nvme1n1` through `nvme1` may be back as
/// `nvme2n1` through `nvme2`, with the same `cntlid` and PCI address. Refuses when it selects
/// none of the paths, or more than one.
pub fn find_path(expect: &Expectation, want: &PathId, roots: &SysRoots) -> Result<PathMatch, FindError> {
    let paths = find_namespace_paths(expect, roots)?;
    let selected: Vec<usize> = (0..paths.len()).filter(|&i| want.selects(&paths[i].path)).collect();
    if let [i] = selected[..] {
        return Ok(paths[i].clone());
    }
    let idle = if selected.is_empty() { idle_controllers(want, &paths, roots) } else { Vec::new() };
    Err(FindError::Path { expect: Box::new(expect.clone()), want: Box::new(want.clone()), paths, selected: selected.len(), idle })
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
    check_expectation(expect)?;
    let all = scan_block_devices(roots)?;
    let scanned = all.len();
    let (mut matches, rest): (Vec<Candidate>, Vec<Candidate>) =
        all.into_iter().partition(|c| expect.mismatches(&c.identity).is_empty() && set_up(&c.identity));
    match matches.len() {
        1 => Ok(matches.remove(0).path),
        0 => Err(not_found(expect, scanned, rest)),
        _ => Err(FindError::Ambiguous { expect: Box::new(expect.clone()), matches }),
    }
}

mod opened;
#[cfg(test)]
mod tests;
pub mod zeroing;

pub use opened::{discover, Discovered, TargetKind};
