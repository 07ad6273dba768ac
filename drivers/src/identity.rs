//! Device identity in two halves: what a namespace is, and which path reaches it.
//!
//! A dual-port NVMe drive (or one namespace attached to two controllers of a subsystem) shows
//! the same namespace through several controllers. Without native multipath (`nvme_core
//! multipath=N`) each controller gets its own block device: `nvme0n1` through `nvme0` and
//! `nvme1n1` through `nvme1`, both the same storage. So the identity splits:
//! - [`NamespaceId`]: the same through every path (NGUID, EUI-64, WWID, subsystem NQN, serial,
//!   model, size, logical block size);
//! - [`PathId`]: which controller the block device goes through (controller name, its
//!   `cntlid` in the subsystem, its PCI address). For a device that is not NVMe (loop, sd) or a
//!   native-multipath head (whose `device` is the subsystem, not a controller), only the
//!   device name is known.
//!
//! Both are read from sysfs: the namespace's block directory (`/sys/class/block/X/{wwid,nguid,
//! eui}`) and its controller (`X/device`, i.e. `/sys/class/nvme/nvmeN/{cntlid,subsysnqn,
//! address,transport,serial,model}`). Controller names are not stable (`nvme1` may come back
//! as `nvme2`); `cntlid` is, within its subsystem.

use std::path::{Path, PathBuf};

/// What one namespace is, whichever path it is seen through. Empty strings where sysfs has
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceId {
    /// NVMe namespace globally unique identifier (`nguid`), as sysfs prints it.
    pub nguid: String,
    /// NVMe IEEE EUI-64 (`eui`), as sysfs prints it.
    pub eui64: String,
    /// WWID as the kernel reports it (`wwid` or `device/wwid`): `eui.`, `nvme.`, `naa.`, `t10.`.
    pub wwid: String,
    /// NVMe subsystem NQN (the controller's `subsysnqn`); empty for non-NVMe devices.
    pub subsys_nqn: String,
    pub serial: String,
    pub model: String,
    pub capacity_bytes: u64,
    pub logical_block_bytes: u32,
}

impl NamespaceId {
    /// The identifier that tells namespaces apart: the NGUID, else the EUI-64, else the WWID,
    /// as `nguid:…`, `eui:…`, `wwid:…`. All-zero NGUIDs and EUI-64s (drives that do not
    /// implement them) do not count. `None` when the device reports none of them (a loop
    /// device): such a device is never taken for another path of anything.
    pub fn key(&self) -> Option<String> {
        let real = |s: &str| s.chars().any(|c| c.is_ascii_hexdigit() && c != '0');
        if real(&self.nguid) {
            Some(format!("nguid:{}", self.nguid))
        } else if real(&self.eui64) {
            Some(format!("eui:{}", self.eui64))
        } else if !self.wwid.is_empty() {
            Some(format!("wwid:{}", self.wwid))
        } else {
            None
        }
    }

    /// True when both are the same namespace: the same [`NamespaceId::key`] (both present),
    /// size and logical block size.
    pub fn same_namespace(&self, other: &NamespaceId) -> bool {
        self.key().is_some()
            && self.key() == other.key()
            && self.capacity_bytes == other.capacity_bytes
            && self.logical_block_bytes == other.logical_block_bytes
    }
}

/// Which path reaches a namespace. As a selector ([`crate::blockdev::find_path`]), the most
/// stable field given decides: `cntlid`, else the PCI address, else the controller name,
/// else the device name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PathId {
    /// The kernel block device name (`nvme1n1`, `nvme1n1p2`, `sda`, `loop3`).
    pub device: String,
    /// The NVMe controller (`nvme1`); `None` for non-NVMe devices and native-multipath heads.
    pub controller: Option<String>,
    /// The controller's id within its subsystem (`cntlid`): survives a controller rename.
    pub cntlid: Option<u16>,
    /// The controller's PCI address (`0000:01:00.0`), for NVMe over PCIe.
    pub pci_address: Option<String>,
}

impl PathId {
    /// True when `other` (a path found by a scan) is the path this one selects; see
    /// [`PathId`] for which field decides.
    pub fn selects(&self, other: &PathId) -> bool {
        if let Some(c) = self.cntlid {
            other.cntlid == Some(c)
        } else if let Some(a) = &self.pci_address {
            other.pci_address.as_deref() == Some(a.as_str())
        } else if let Some(c) = &self.controller {
            other.controller.as_deref() == Some(c.as_str())
        } else {
            !self.device.is_empty() && self.device == other.device
        }
    }
}

impl std::fmt::Display for PathId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", if self.device.is_empty() { "?" } else { &self.device })?;
        if let Some(c) = &self.controller {
            write!(f, " via {c}")?;
        }
        if let Some(id) = self.cntlid {
            write!(f, " cntlid={id}")?;
        }
        if let Some(a) = &self.pci_address {
            write!(f, " pci={a}")?;
        }
        Ok(())
    }
}

pub(crate) fn read_trim(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The whole disk's sysfs directory: `dir` itself, or its parent when `dir` is a partition.
pub(crate) fn disk_dir(dir: &Path) -> PathBuf {
    if dir.join("partition").exists() {
        dir.parent().map(Path::to_path_buf).unwrap_or_else(|| dir.to_path_buf())
    } else {
        dir.to_path_buf()
    }
}

/// The NVMe controller directory behind a disk's `device` link, when it is one (it has a
/// `cntlid`).
fn controller_dir(disk: &Path) -> Option<PathBuf> {
    let c = std::fs::canonicalize(disk.join("device")).ok()?;
    c.join("cntlid").exists().then_some(c)
}

/// The namespace identity of the block device whose (canonical) sysfs directory is `dir`, with
/// the capacity and logical block size given (a partition takes its disk's identifiers).
pub fn namespace_id_sysfs(dir: &Path, capacity_bytes: u64, logical_block_bytes: u32) -> NamespaceId {
    let disk = disk_dir(dir);
    let first = |names: &[&str]| names.iter().map(|n| read_trim(&disk.join(n))).find(|v| !v.is_empty()).unwrap_or_default();
    NamespaceId {
        nguid: read_trim(&disk.join("nguid")),
        eui64: read_trim(&disk.join("eui")),
        wwid: first(&["wwid", "device/wwid"]),
        subsys_nqn: read_trim(&disk.join("device/subsysnqn")),
        serial: first(&["device/serial", "serial"]),
        model: read_trim(&disk.join("device/model")),
        capacity_bytes,
        logical_block_bytes,
    }
}

/// The path of the block device whose (canonical) sysfs directory is `dir`: its name, and for
/// an NVMe namespace its controller's name, `cntlid` and PCI address.
pub fn path_id_sysfs(dir: &Path) -> PathId {
    let device = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(c) = controller_dir(&disk_dir(dir)) else { return PathId { device, ..Default::default() } };
    let transport = read_trim(&c.join("transport"));
    let address = read_trim(&c.join("address"));
    PathId {
        device,
        controller: c.file_name().map(|n| n.to_string_lossy().into_owned()),
        cntlid: read_trim(&c.join("cntlid")).parse().ok(),
        pci_address: (!address.is_empty() && (transport.is_empty() || transport == "pcie")).then_some(address),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_told_apart_by_their_strongest_real_identifier() {
        let ns = |nguid: &str, eui: &str, wwid: &str| NamespaceId {
            nguid: nguid.into(),
            eui64: eui.into(),
            wwid: wwid.into(),
            capacity_bytes: 1 << 30,
            logical_block_bytes: 512,
            ..Default::default()
        };
        let zero_nguid = "00000000-0000-0000-0000-000000000000";
        assert_eq!(ns("11112222-0000-0000-0000-000000000001", "", "eui.1").key().unwrap(), "nguid:11112222-0000-0000-0000-000000000001");
        assert_eq!(ns(zero_nguid, "00 25 38 8b", "eui.1").key().unwrap(), "eui:00 25 38 8b");
        assert_eq!(ns(zero_nguid, "00 00 00 00", "nvme.8086-5331").key().unwrap(), "wwid:nvme.8086-5331");
        assert_eq!(ns("", "", "").key(), None);
        let a = ns("", "", "eui.1");
        assert!(a.same_namespace(&a.clone()));
        assert!(!a.same_namespace(&NamespaceId { capacity_bytes: 1 << 31, ..a.clone() }), "a size mismatch is another namespace");
        assert!(!ns("", "", "").same_namespace(&ns("", "", "")), "no identifier: never the same as anything");
    }

    #[test]
    fn a_path_selector_goes_by_its_most_stable_field() {
        let found = PathId {
            device: "nvme2n1".into(),
            controller: Some("nvme2".into()),
            cntlid: Some(2),
            pci_address: Some("0000:00:04.0".into()),
        };
        let was = PathId { device: "nvme1n1".into(), controller: Some("nvme1".into()), ..found.clone() };
        assert!(was.selects(&found), "renamed controller, same cntlid");
        assert!(!PathId { cntlid: Some(1), ..found.clone() }.selects(&found));
        assert!(PathId { pci_address: Some("0000:00:04.0".into()), ..Default::default() }.selects(&found));
        assert!(PathId { controller: Some("nvme2".into()), ..Default::default() }.selects(&found));
        assert!(!PathId { controller: Some("nvme1".into()), ..Default::default() }.selects(&found));
        assert!(PathId { device: "loop3".into(), ..Default::default() }.selects(&PathId { device: "loop3".into(), ..Default::default() }));
        assert!(!PathId::default().selects(&PathId::default()), "an empty selector selects nothing");
        assert_eq!(found.to_string(), "nvme2n1 via nvme2 cntlid=2 pci=0000:00:04.0");
    }
}
