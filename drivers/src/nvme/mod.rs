//! NVMe admin commands through the Linux passthrough ioctl (`NVME_IOCTL_ADMIN_CMD`, see
//! `sys.rs`; `docs/DOMAIN.md` section 6): Get Log Page for the SMART / health log
//! (0x02) and the OCP datacenter SMART extended log (0xC0), and Identify Controller. The bytes
//! are returned as the drive sent them; `faultline::health` parses the log pages.
//!
//! Admin commands go to the controller character device (`/dev/nvmeN`), found from a
//! namespace block device through sysfs: `/sys/dev/block/MAJ:MIN` resolves to
//! `.../nvme/nvmeN/nvmeNnM` (the parent is the controller), or, with native multipath, to
//! `.../nvme-subsystem/nvme-subsysK/nvmeKnM`, whose controllers are listed under
//! `/sys/class/nvme-subsystem/nvme-subsysK/` (the first live one is used). Every path lives
//! under [`SysRoots`], so the resolution is tested against a fake tree.
//!
//! Privileges: the kernel allows Identify without privileges but Get Log Page only with
//! CAP_SYS_ADMIN (EACCES otherwise). Opening the controller read-only is enough for both.
//!
//! Testing: the pure parts (command encoding, Identify parsing, sysfs resolution) are tested
//! here; the ioctl is exercised only on things that are not NVMe (the kernel's ENOTTY). The
//! machine the tests were written on has no `/dev/nvme*`, so no test reads a real drive.
//!
//! Files: `mod.rs` (this: the controller, its commands and logs), `namespace.rs` (Identify
//! Namespace: the block size, atomicity and deallocate fields).

mod format;
mod namespace;
use crate::sys::nvme_admin;
pub use crate::sys::{NvmeAdminCmd, NvmeStatus};
pub use format::{format_nvm_cmd, FORMAT_TIMEOUT_MS, OPC_FORMAT_NVM};
pub use namespace::{identify_namespace_cmd, DeallocatedReads, NamespaceDataError, NamespaceIdentity};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

pub const OPC_GET_LOG_PAGE: u8 = 0x02;
pub const OPC_IDENTIFY: u8 = 0x06;
/// SMART / health information log.
pub const LID_SMART: u8 = 0x02;
/// OCP datacenter SMART extended log (vendor-specific range, defined by the OCP NVMe SSD spec).
pub const LID_OCP_SMART: u8 = 0xC0;
/// The namespace id meaning "the controller as a whole".
pub const NSID_ALL: u32 = 0xFFFF_FFFF;
/// Persistent Event Log.
pub const LID_PEL: u8 = 0x0D;
/// Get Log Page's log-specific field (CDW10 bits 11:8) for the Persistent Event Log: read with
/// the context established, establish a context and read, release the context.
pub const PEL_READ: u8 = 0;
pub const PEL_ESTABLISH_AND_READ: u8 = 1;
pub const PEL_RELEASE: u8 = 2;
/// Size of the SMART / health log and of the OCP SMART extended log.
pub const LOG_PAGE_BYTES: usize = 512;
/// Size of every Identify data structure.
pub const IDENTIFY_BYTES: usize = 4096;

/// What went wrong, naming the device and what was attempted.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    #[error("{}: not an NVMe device: {why}", .path.display())]
    NotNvme { path: PathBuf, why: String },
    #[error("{}: cannot find its NVMe controller: {why}", .path.display())]
    NoController { path: PathBuf, why: String },
    #[error("{}: {what} failed: {source}{}", .path.display(), privilege_hint(.source))]
    Io {
        path: PathBuf,
        what: String,
        #[source]
        source: io::Error,
    },
    /// The drive completed the command with an error status (e.g. a log page it does not have).
    #[error("{}: {what} refused by the drive: {status}", .path.display())]
    Refused { path: PathBuf, what: String, status: NvmeStatus },
    #[error("invalid NVMe command: {0}")]
    InvalidCommand(String),
    /// The drive answered with data that cannot be what the command returns.
    #[error("{}: {what}: the drive's data is malformed: {why}", .path.display())]
    BadData { path: PathBuf, what: String, why: String },
}

fn privilege_hint(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => " (NVMe admin passthrough needs root)",
        _ => "",
    }
}

impl NvmeStatus {
    /// The drive's way of saying it has no such log page: Invalid Log Page, or Invalid Field
    /// in Command (what many drives answer for an unknown LID).
    pub fn log_page_unsupported(self) -> bool {
        matches!((self.sct(), self.sc()), (1, 0x09) | (0, 0x02))
    }
}

/// Get Log Page for `len` bytes (a non-zero multiple of 4) of log `lid`, from byte `offset`
/// (dword-aligned) on. Offsets and transfers over 256 KiB need the controller's extended
/// data support ([`ControllerIdentity::extended_log_data`]).
pub fn get_log_page_cmd(lid: u8, nsid: u32, len: usize, offset: u64) -> Result<NvmeAdminCmd, NvmeError> {
    let bytes = u32::try_from(len).ok().filter(|&b| b > 0 && b.is_multiple_of(4)).ok_or_else(|| {
        NvmeError::InvalidCommand(format!("Get Log Page of {len} bytes: the length must be a non-zero multiple of 4 below 4 GiB"))
    })?;
    if !offset.is_multiple_of(4) {
        return Err(NvmeError::InvalidCommand(format!("Get Log Page at offset {offset}: the offset must be a multiple of 4")));
    }
    let numd = bytes / 4 - 1;
    Ok(NvmeAdminCmd {
        opcode: OPC_GET_LOG_PAGE,
        nsid,
        cdw10: (numd & 0xFFFF) << 16 | u32::from(lid),
        cdw11: numd >> 16,
        cdw12: offset as u32,
        cdw13: (offset >> 32) as u32,
        ..Default::default()
    })
}

/// Identify Controller (CNS 1): 4096 bytes.
pub fn identify_controller_cmd() -> NvmeAdminCmd {
    NvmeAdminCmd { opcode: OPC_IDENTIFY, cdw10: 1, ..Default::default() }
}

/// The Identify Controller fields faultline records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerIdentity {
    /// PCI vendor id (bytes 0-1).
    pub vendor_id: u16,
    /// Serial number (bytes 4-23), model (24-63), firmware revision (64-71): ASCII, trimmed.
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// Log Page Attributes (byte 261). Bit 0: SMART log per namespace; bit 1: commands
    /// supported and effects log; bit 2: extended data for Get Log Page; bit 3: telemetry.
    pub lpa: u8,
    /// Optional NVM Command Support (bytes 520-521): bit 2 Dataset Management, bit 3 Write
    /// Zeroes.
    pub oncs: u16,
    /// Atomic Write Unit Normal and Power Fail (bytes 526-527, 528-529), 0's based, in
    /// logical blocks, controller-wide (Linux uses neither since "nvme: stop using AWUPF";
    /// recorded, not held to).
    pub awun: u16,
    pub awupf: u16,
    /// Controller Attributes (bytes 96-99); bit 15 ELBAS: extended LBA formats, whose guard
    /// may be 32 or 64 bits (Identify CNS 05h says which).
    pub ctratt: u32,
}

impl ControllerIdentity {
    pub fn parse(b: &[u8; IDENTIFY_BYTES]) -> ControllerIdentity {
        let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&b[r]).trim_matches([' ', '\0']).to_string();
        ControllerIdentity {
            vendor_id: u16::from_le_bytes([b[0], b[1]]),
            serial: text(4..24),
            model: text(24..64),
            firmware: text(64..72),
            lpa: b[261],
            oncs: u16::from_le_bytes([b[520], b[521]]),
            awun: u16::from_le_bytes([b[526], b[527]]),
            awupf: u16::from_le_bytes([b[528], b[529]]),
            ctratt: u32::from_le_bytes([b[96], b[97], b[98], b[99]]),
        }
    }

    /// CTRATT bit 15: the controller has extended LBA formats (a guard of 16, 32 or 64 bits).
    pub fn extended_lba_formats(&self) -> bool {
        self.ctratt & (1 << 15) != 0
    }

    /// LPA bit 2: Get Log Page takes offsets and transfers over 256 KiB (NUMDU).
    pub fn extended_log_data(&self) -> bool {
        self.lpa & (1 << 2) != 0
    }
}

pub use crate::blockdev::SysRoots;

/// Why a device number did not lead to a controller.
#[derive(Debug, PartialEq, Eq)]
enum Unresolved {
    NotNvme(String),
    NoController(String),
}

/// `name` is `prefix` followed by a decimal number: that number.
fn numbered(name: &str, prefix: &str) -> Option<u32> {
    name.strip_prefix(prefix).filter(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())).and_then(|d| d.parse().ok())
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The canonical sysfs directory of a device (`kind` is "block" or "char").
fn sysfs_dir(sys: &Path, kind: &str, rdev: u64) -> Result<PathBuf, Unresolved> {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    let link = sys.join(format!("dev/{kind}/{maj}:{min}"));
    std::fs::canonicalize(&link)
        .map_err(|e| Unresolved::NotNvme(format!("{kind} device {maj}:{min} has no sysfs entry ({}: {e})", link.display())))
}

fn is_controller(sys: &Path, name: &str) -> bool {
    numbered(name, "nvme").is_some() && sys.join("class/nvme").join(name).exists()
}

/// The controller (`nvmeN`) of a namespace block device (or one of its partitions).
fn controller_of_block(sys: &Path, rdev: u64) -> Result<String, Unresolved> {
    let dir = sysfs_dir(sys, "block", rdev)?;
    let disk: &Path = if dir.join("partition").exists() { dir.parent().unwrap_or(&dir) } else { &dir };
    let parent = disk.parent().map(file_name).unwrap_or_default();
    if is_controller(sys, &parent) {
        return Ok(parent);
    }
    if numbered(&parent, "nvme-subsys").is_some() {
        return live_controller(sys, &parent);
    }
    Err(Unresolved::NotNvme(format!("{} is not an NVMe namespace (sysfs: {})", file_name(disk), disk.display())))
}

/// The namespace id of a namespace block device (or a partition of it), from its sysfs
/// `nsid` (under `roots`).
pub fn namespace_id(block_dev_path: &Path, roots: &SysRoots) -> Result<u32, NvmeError> {
    let path = std::fs::canonicalize(block_dev_path).unwrap_or_else(|_| block_dev_path.to_path_buf());
    let meta = std::fs::metadata(&path).map_err(|source| NvmeError::Io { path: path.clone(), what: "stat".into(), source })?;
    let r = if meta.file_type().is_block_device() { nsid_of_block(&roots.sys, meta.rdev()) } else { Err("not a block device".into()) };
    r.map_err(|why| NvmeError::NotNvme { path, why })
}

/// [`namespace_id`] of block device `rdev`: its disk's `nsid`.
fn nsid_of_block(sys: &Path, rdev: u64) -> Result<u32, String> {
    let dir = sysfs_dir(sys, "block", rdev).map_err(|u| match u {
        Unresolved::NotNvme(why) | Unresolved::NoController(why) => why,
    })?;
    let disk: &Path = if dir.join("partition").exists() { dir.parent().unwrap_or(&dir) } else { &dir };
    let file = disk.join("nsid");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("no namespace id ({}: {e})", file.display()))?;
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| *n != 0 && *n != NSID_ALL)
        .ok_or_else(|| format!("{} holds {:?}, not a namespace id", file.display(), text.trim()))
}

/// The controller behind a controller character device (`/dev/nvmeN`).
fn controller_of_char(sys: &Path, rdev: u64) -> Result<String, Unresolved> {
    let dir = sysfs_dir(sys, "char", rdev)?;
    let name = file_name(&dir);
    if is_controller(sys, &name) {
        return Ok(name);
    }
    Err(Unresolved::NotNvme(format!("{name} is not an NVMe controller (sysfs: {})", dir.display())))
}

/// The lowest-numbered controller of a multipath subsystem whose `state` reads `live`.
fn live_controller(sys: &Path, subsys: &str) -> Result<String, Unresolved> {
    let dir = sys.join("class/nvme-subsystem").join(subsys);
    let entries = std::fs::read_dir(&dir).map_err(|e| Unresolved::NoController(format!("cannot list {}: {e}", dir.display())))?;
    let mut ctrls: Vec<(u32, String)> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| is_controller(sys, n))
        .filter_map(|n| numbered(&n, "nvme").map(|k| (k, n)))
        .collect();
    ctrls.sort();
    let mut seen = Vec::new();
    for (_, name) in ctrls {
        let state = std::fs::read_to_string(dir.join(&name).join("state")).map(|s| s.trim().to_string()).unwrap_or_default();
        if state == "live" {
            return Ok(name);
        }
        seen.push(format!("{name}: {}", if state.is_empty() { "no state" } else { &state }));
    }
    Err(Unresolved::NoController(if seen.is_empty() {
        format!("{} lists no controllers", dir.display())
    } else {
        format!("no live controller in {subsys} ({})", seen.join(", "))
    }))
}

/// An open NVMe controller character device, for admin commands.
#[derive(Debug)]
pub struct NvmeAdmin {
    file: File,
    path: PathBuf,
}

impl NvmeAdmin {
    /// The controller of a namespace block device (`/dev/nvme0n1`, a partition of it, or a
    /// symlink such as `/dev/disk/by-id/nvme-...`); a controller device (`/dev/nvme0`) is taken
    /// as it is. Anything else (a loop device, a regular file, `/dev/null`) is
    /// [`NvmeError::NotNvme`].
    pub fn open_for_block_device(block_dev_path: &Path) -> Result<NvmeAdmin, NvmeError> {
        NvmeAdmin::open_for_block_device_in(block_dev_path, &SysRoots::system())
    }

    /// [`NvmeAdmin::open_for_block_device`] with sysfs and `/dev` under `roots`.
    pub fn open_for_block_device_in(block_dev_path: &Path, roots: &SysRoots) -> Result<NvmeAdmin, NvmeError> {
        let path = std::fs::canonicalize(block_dev_path).unwrap_or_else(|_| block_dev_path.to_path_buf());
        let meta = std::fs::metadata(&path).map_err(|source| NvmeError::Io { path: path.clone(), what: "stat".into(), source })?;
        let sys = roots.sys.clone();
        let ft = meta.file_type();
        let ctrl = if ft.is_block_device() {
            controller_of_block(&sys, meta.rdev())
        } else if ft.is_char_device() {
            controller_of_char(&sys, meta.rdev())
        } else {
            Err(Unresolved::NotNvme(format!(
                "is a {}, not a block device",
                if ft.is_file() { "regular file" } else { "directory or other file" }
            )))
        };
        let ctrl = ctrl.map_err(|u| match u {
            Unresolved::NotNvme(why) => NvmeError::NotNvme { path: path.clone(), why },
            Unresolved::NoController(why) => NvmeError::NoController { path: path.clone(), why },
        })?;
        let dev = roots.dev.join(&ctrl);
        if !dev.exists() {
            return Err(NvmeError::NoController { path, why: format!("controller {ctrl} has no device node {}", dev.display()) });
        }
        NvmeAdmin::open_controller(&dev)
    }

    /// Opens a controller character device (`/dev/nvme0`) read-only.
    pub fn open_controller(dev: &Path) -> Result<NvmeAdmin, NvmeError> {
        let file = File::open(dev).map_err(|source| NvmeError::Io { path: dev.to_path_buf(), what: "open".into(), source })?;
        Ok(NvmeAdmin { file, path: dev.to_path_buf() })
    }

    /// The controller device's path (`/dev/nvme0`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The controller's kernel name (`nvme0`).
    pub fn controller_name(&self) -> &str {
        self.path.file_name().and_then(|n| n.to_str()).unwrap_or_default()
    }

    fn admin(&self, what: &str, mut cmd: NvmeAdminCmd, data: &mut [u8]) -> Result<u32, NvmeError> {
        nvme_admin(&self.file, &mut cmd, data).map_err(|source| match NvmeStatus::of(&source) {
            Some(status) => NvmeError::Refused { path: self.path.clone(), what: what.into(), status },
            None => NvmeError::Io { path: self.path.clone(), what: what.into(), source },
        })
    }

    /// `len` bytes of log page `lid` for namespace `nsid` ([`NSID_ALL`]: the controller).
    pub fn log_page(&self, lid: u8, nsid: u32, len: usize) -> Result<Vec<u8>, NvmeError> {
        let cmd = get_log_page_cmd(lid, nsid, len, 0)?;
        let mut buf = vec![0u8; len];
        self.admin(&format!("Get Log Page {lid:#04x}"), cmd, &mut buf)?;
        Ok(buf)
    }

    /// The Persistent Event Log, whole: a context established with its 512-byte header read,
    /// the rest read when the header's total length (TLL, bytes 8..16) is longer, the context
    /// released whatever happened. `None` when the drive has no such log; a log longer than
    /// `max` bytes is an error (its newest events are at its end).
    pub fn persistent_event_log(&self, max: u64) -> Result<Option<Vec<u8>>, NvmeError> {
        let lsp = |action: u8| -> Result<NvmeAdminCmd, NvmeError> {
            let mut cmd = get_log_page_cmd(LID_PEL, NSID_ALL, LOG_PAGE_BYTES, 0)?;
            cmd.cdw10 |= u32::from(action) << 8;
            Ok(cmd)
        };
        let release = || self.admin("Get Log Page 0x0d (release context)", lsp(PEL_RELEASE)?, &mut [0u8; LOG_PAGE_BYTES]);
        let mut head = vec![0u8; LOG_PAGE_BYTES];
        match self.admin("Get Log Page 0x0d (establish context)", lsp(PEL_ESTABLISH_AND_READ)?, &mut head) {
            Ok(_) => {}
            Err(NvmeError::Refused { status, .. }) if status.log_page_unsupported() => return Ok(None),
            // A context left established (a reader that died before releasing it): released,
            // and established again.
            Err(NvmeError::Refused { status, .. }) if (status.sct(), status.sc()) == (0, 0x0C) => {
                release()?;
                self.admin("Get Log Page 0x0d (establish context)", lsp(PEL_ESTABLISH_AND_READ)?, &mut head)?;
            }
            Err(e) => return Err(e),
        }
        let read = self.read_pel(&head, max);
        let released = release();
        let log = read?;
        released?;
        Ok(Some(log))
    }

    /// The whole log, given its header (read with the context established).
    fn read_pel(&self, head: &[u8], max: u64) -> Result<Vec<u8>, NvmeError> {
        let tll = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        if tll > max {
            return Err(NvmeError::InvalidCommand(format!(
                "the persistent event log holds {tll} bytes (its header's TLL), more than the {max} read"
            )));
        }
        if tll <= LOG_PAGE_BYTES as u64 {
            return Ok(head.to_vec());
        }
        // A multiple of 4, as Get Log Page transfers are; the tail past TLL is ignored.
        let len = usize::try_from(tll.next_multiple_of(4)).unwrap_or(usize::MAX);
        let mut cmd = get_log_page_cmd(LID_PEL, NSID_ALL, len, 0)?;
        cmd.cdw10 |= u32::from(PEL_READ) << 8;
        let mut buf = vec![0u8; len];
        self.admin("Get Log Page 0x0d", cmd, &mut buf)?;
        Ok(buf)
    }

    /// The SMART / health information log (512 bytes, whole controller).
    pub fn smart_log(&self) -> Result<Vec<u8>, NvmeError> {
        self.log_page(LID_SMART, NSID_ALL, LOG_PAGE_BYTES)
    }

    /// The OCP SMART extended log (512 bytes), or `None` when the drive answers that it has no
    /// such page ([`NvmeStatus::log_page_unsupported`]); any other failure is an error.
    pub fn ocp_smart_log(&self) -> Result<Option<Vec<u8>>, NvmeError> {
        match self.log_page(LID_OCP_SMART, NSID_ALL, LOG_PAGE_BYTES) {
            Ok(b) => Ok(Some(b)),
            Err(NvmeError::Refused { status, .. }) if status.log_page_unsupported() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Identify Controller.
    pub fn identify(&self) -> Result<ControllerIdentity, NvmeError> {
        let mut buf = [0u8; IDENTIFY_BYTES];
        self.admin("Identify Controller", identify_controller_cmd(), &mut buf)?;
        Ok(ControllerIdentity::parse(&buf))
    }

    /// Identify Namespace of namespace `nsid`.
    pub fn identify_namespace(&self, nsid: u32) -> Result<NamespaceIdentity, NvmeError> {
        let mut buf = Box::new([0u8; IDENTIFY_BYTES]);
        let what = format!("Identify Namespace {nsid}");
        self.admin(&what, identify_namespace_cmd(nsid), &mut buf[..])?;
        NamespaceIdentity::parse(&buf).map_err(|e| NvmeError::BadData { path: self.path.clone(), what, why: e.to_string() })
    }

    /// The protection information format (PIF: 0 a 16-bit guard, 1 32-bit, 2 64-bit) of LBA
    /// format `index` of namespace `nsid`: bits 8:7 of its Extended LBA Format (from byte 12,
    /// 4 bytes each) in the NVM command set's Identify Namespace (CNS 05h, CSI 00h).
    pub fn guard_format(&self, nsid: u32, index: usize) -> Result<u8, NvmeError> {
        let mut buf = Box::new([0u8; IDENTIFY_BYTES]);
        let what = format!("Identify Namespace {nsid} for the NVM command set");
        self.admin(&what, NvmeAdminCmd { opcode: OPC_IDENTIFY, nsid, cdw10: 0x05, ..Default::default() }, &mut buf[..])?;
        let at = 12 + 4 * index.min(63);
        let elbaf = u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        Ok(((elbaf >> 7) & 0x3) as u8)
    }
}

#[cfg(test)]
mod tests;
