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

mod namespace;
use crate::sys::nvme_admin;
pub use crate::sys::{NvmeAdminCmd, NvmeStatus};
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
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn get_log_page_encodes_lid_and_dword_counts() {
        let smart = get_log_page_cmd(LID_SMART, NSID_ALL, 512, 0).unwrap();
        assert_eq!((smart.opcode, smart.nsid, smart.cdw10, smart.cdw11), (0x02, 0xFFFF_FFFF, 0x007F_0002, 0));
        assert_eq!(get_log_page_cmd(LID_OCP_SMART, NSID_ALL, 512, 0).unwrap().cdw10, 0x007F_00C0);
        // 16 KiB is 4096 dwords: NUMD 0x0FFF still fits NUMDL.
        let c = get_log_page_cmd(0x07, NSID_ALL, 16 << 10, 0).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0x0FFF_0007, 0));
        // NUMDL holds 16 bits (256 KiB); beyond, NUMDU takes the upper half.
        let c = get_log_page_cmd(0x07, NSID_ALL, (256 << 10) + 4, 0).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0x0000_0007, 1));
        let c = get_log_page_cmd(0x07, NSID_ALL, 1 << 20, 0).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0xFFFF_0007, 3));
        let c = get_log_page_cmd(0x07, NSID_ALL, 4096, 0x1_0000_2000).unwrap();
        assert_eq!((c.cdw12, c.cdw13), (0x2000, 1));
        for len in [0, 3, 510] {
            let e = get_log_page_cmd(LID_SMART, NSID_ALL, len, 0).unwrap_err().to_string();
            assert!(e.contains(&format!("{len} bytes")) && e.contains("multiple of 4"), "{e}");
        }
        assert!(get_log_page_cmd(LID_SMART, NSID_ALL, 512, 2).is_err());
    }

    #[test]
    fn identify_controller_command_and_fields() {
        let c = identify_controller_cmd();
        assert_eq!((c.opcode, c.nsid, c.cdw10), (0x06, 0, 1));
        let mut b = [0u8; IDENTIFY_BYTES];
        b[0..2].copy_from_slice(&0x144Du16.to_le_bytes());
        b[4..24].copy_from_slice(b"S6B0NG0R123456      ");
        b[24..64].copy_from_slice(format!("{:<40}", "SAMSUNG MZQL21T9HCJR-00A07").as_bytes());
        b[64..72].copy_from_slice(b"GDC5602Q");
        b[261] = 0b0000_1110;
        b[520..522].copy_from_slice(&0x005Fu16.to_le_bytes());
        b[528..530].copy_from_slice(&7u16.to_le_bytes());
        let id = ControllerIdentity::parse(&b);
        assert_eq!(
            id,
            ControllerIdentity {
                vendor_id: 0x144D,
                serial: "S6B0NG0R123456".into(),
                model: "SAMSUNG MZQL21T9HCJR-00A07".into(),
                firmware: "GDC5602Q".into(),
                lpa: 0x0E,
                oncs: 0x5F,
                awun: 0,
                awupf: 7,
            }
        );
        assert!(id.extended_log_data());
        // NUL padding (seen on some drives) is trimmed as well.
        b[64..72].copy_from_slice(b"1.0\0\0\0\0\0");
        assert_eq!(ControllerIdentity::parse(&b).firmware, "1.0");
    }

    #[test]
    fn unsupported_log_pages_are_told_from_other_refusals() {
        assert!(NvmeStatus(0x4109).log_page_unsupported());
        assert!(NvmeStatus(0x4002).log_page_unsupported());
        assert!(!NvmeStatus(0x0006).log_page_unsupported(), "internal error");
        assert!(!NvmeStatus(0x0370).log_page_unsupported(), "host path error");
    }

    impl FakeRoot {
        fn sys(&self) -> PathBuf {
            self.0.join("sys")
        }
        /// A PCIe controller `nvmeN` at `bdf`, with its class link and char device entry.
        fn controller(&self, n: u32, bdf: &str, state: &str) -> String {
            let dir = format!("sys/devices/pci0000:00/{bdf}/nvme/nvme{n}");
            self.file(&format!("{dir}/state"), &format!("{state}\n"));
            self.link(&format!("sys/class/nvme/nvme{n}"), &dir);
            self.link(&format!("sys/dev/char/240:{n}"), &dir);
            dir
        }
    }

    fn dev(maj: u32, min: u32) -> u64 {
        libc::makedev(maj, min)
    }

    #[test]
    fn single_path_namespaces_and_partitions_resolve_to_their_controller() {
        let root = FakeRoot::new("single");
        let ctrl = root.controller(0, "0000:01:00.0", "live");
        root.dir(&format!("{ctrl}/nvme0n1"));
        root.file(&format!("{ctrl}/nvme0n1/nvme0n1p2/partition"), "2\n");
        root.link("sys/dev/block/259:0", &format!("{ctrl}/nvme0n1"));
        root.link("sys/dev/block/259:2", &format!("{ctrl}/nvme0n1/nvme0n1p2"));
        assert_eq!(controller_of_block(&root.sys(), dev(259, 0)), Ok("nvme0".into()));
        assert_eq!(controller_of_block(&root.sys(), dev(259, 2)), Ok("nvme0".into()));
        assert_eq!(controller_of_char(&root.sys(), dev(240, 0)), Ok("nvme0".into()));
        // The namespace id, of the disk or of its partition's disk.
        root.file(&format!("{ctrl}/nvme0n1/nsid"), "1\n");
        assert_eq!((nsid_of_block(&root.sys(), dev(259, 0)), nsid_of_block(&root.sys(), dev(259, 2))), (Ok(1), Ok(1)));
        root.file(&format!("{ctrl}/nvme0n1/nsid"), "4294967295\n");
        let e = nsid_of_block(&root.sys(), dev(259, 0)).unwrap_err();
        assert!(e.ends_with("holds \"4294967295\", not a namespace id"), "{e}");
    }

    #[test]
    fn multipath_namespaces_resolve_to_a_live_controller_of_their_subsystem() {
        let root = FakeRoot::new("multipath");
        let subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys1";
        root.dir(&format!("{subsys}/nvme1n1"));
        root.link("sys/class/nvme-subsystem/nvme-subsys1", subsys);
        root.link("sys/dev/block/259:5", &format!("{subsys}/nvme1n1"));
        for (n, bdf, state) in [(2, "0000:03:00.0", "live"), (1, "0000:02:00.0", "resetting"), (3, "0000:04:00.0", "live")] {
            let c = root.controller(n, bdf, state);
            root.link(&format!("{subsys}/nvme{n}"), &c);
        }
        // The hidden per-path node nvme1c2n1 sits under its controller.
        let c2 = "sys/devices/pci0000:00/0000:03:00.0/nvme/nvme2";
        root.dir(&format!("{c2}/nvme1c2n1"));
        root.link("sys/dev/block/259:6", &format!("{c2}/nvme1c2n1"));
        assert_eq!(controller_of_block(&root.sys(), dev(259, 5)), Ok("nvme2".into()));
        assert_eq!(controller_of_block(&root.sys(), dev(259, 6)), Ok("nvme2".into()));
        for n in [2, 3] {
            root.file(&format!("sys/devices/pci0000:00/0000:0{}:00.0/nvme/nvme{n}/state", n + 1), "dead\n");
        }
        match controller_of_block(&root.sys(), dev(259, 5)) {
            Err(Unresolved::NoController(why)) => {
                assert_eq!(why, "no live controller in nvme-subsys1 (nvme1: resetting, nvme2: dead, nvme3: dead)")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn devices_that_are_not_nvme_are_named_as_such() {
        let root = FakeRoot::new("notnvme");
        root.dir("sys/devices/virtual/block/loop0");
        root.link("sys/dev/block/7:0", "sys/devices/virtual/block/loop0");
        root.dir("sys/devices/virtual/mem/null");
        root.link("sys/dev/char/1:3", "sys/devices/virtual/mem/null");
        match controller_of_block(&root.sys(), dev(7, 0)) {
            Err(Unresolved::NotNvme(why)) => assert!(why.starts_with("loop0 is not an NVMe namespace"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(controller_of_char(&root.sys(), dev(1, 3)), Err(Unresolved::NotNvme(_))));
        match controller_of_block(&root.sys(), dev(8, 0)) {
            Err(Unresolved::NotNvme(why)) => assert!(why.contains("block device 8:0 has no sysfs entry"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn regular_files_and_dev_null_are_not_nvme() {
        let root = FakeRoot::new("files");
        let f = root.file("plain.img", "");
        for p in [f.as_path(), Path::new("/dev/null")] {
            match NvmeAdmin::open_for_block_device(p) {
                Err(NvmeError::NotNvme { path, why }) => assert_eq!(path, std::fs::canonicalize(p).unwrap(), "{why}"),
                other => panic!("{}: {other:?}", p.display()),
            }
        }
        let e = NvmeAdmin::open_for_block_device(&f).unwrap_err().to_string();
        assert!(e.contains("plain.img: not an NVMe device: is a regular file"), "{e}");
        let e = NvmeAdmin::open_for_block_device(&root.0.join("absent")).unwrap_err().to_string();
        assert!(e.contains("absent: stat failed"), "{e}");
    }

    #[test]
    fn admin_commands_on_a_non_controller_fail_with_the_os_error_and_the_device() {
        let root = FakeRoot::new("ioctl");
        // A regular file stands in for /dev/nvme0: the kernel refuses the ioctl (ENOTTY), which
        // must come back as an OS error, never as "log page not supported".
        let dev = root.file("dev/nvme0", "");
        let admin = NvmeAdmin::open_controller(&dev).unwrap();
        assert_eq!(admin.controller_name(), "nvme0");
        let e = admin.smart_log().unwrap_err();
        assert!(matches!(&e, NvmeError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTTY)), "{e:?}");
        assert!(e.to_string().contains("dev/nvme0: Get Log Page 0x02 failed"), "{e}");
        assert!(matches!(admin.ocp_smart_log(), Err(NvmeError::Io { .. })));
        let e = admin.identify().unwrap_err().to_string();
        assert!(e.contains("Identify Controller failed"), "{e}");
    }
}
