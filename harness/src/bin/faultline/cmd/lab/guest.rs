//! The guest side of the lab (`faultline lab guest ...`, run by the guest's command script):
//! finds the lab drive's namespace and controllers in the guest's sysfs, by the PCI address
//! each port has and the serial both report, and runs a scenario against it.
//!
//! A lab scenario names the lab's ports with placeholders, replaced in the guest with what the
//! kernel called them this boot (controller names are assigned in the order the asynchronous
//! probes finish): `{lab.ctrl_a}`, `{lab.ctrl_b}` (`nvme0`), `{lab.bdf_a}`, `{lab.bdf_b}`
//! (`0000:01:00.0`). Its `[target]` is replaced with the lab drive: the multipath head with
//! `--multipath on`, port A's path with `off`, and the drive's serial.

use anyhow::{bail, Context, Result};
use faultline::scenario::{Scenario, Target};
use faultline_drivers::blockdev::{scan_paths, SysRoots};
use std::path::{Path, PathBuf};

use super::machine::{Port, SERIAL};

/// The lab drive as the guest sees it.
#[derive(Debug)]
pub struct GuestDrive {
    pub multipath: bool,
    /// Controller names per port (`nvme0`), when the port is plugged.
    pub ctrl: [Option<String>; 2],
    /// The block device a scenario targets.
    pub ns: PathBuf,
    /// Each port's own block device (multipath off only: with it on, the paths are hidden).
    pub ns_port: [Option<PathBuf>; 2],
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Finds the drive in the running guest's sysfs.
pub fn find() -> Result<GuestDrive> {
    let multipath = read(Path::new("/sys/module/nvme_core/parameters/multipath")) == "Y";
    let mut ctrl = [None, None];
    for e in std::fs::read_dir("/sys/class/nvme").context("no /sys/class/nvme: is the nvme module loaded?")?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let addr = read(&e.path().join("address"));
        for (i, p) in [Port::A, Port::B].into_iter().enumerate() {
            if addr == p.bdf() && read(&e.path().join("serial")) == SERIAL {
                ctrl[i] = Some(name.clone());
            }
        }
    }
    let paths = scan_paths(&SysRoots::system())?;
    let ours: Vec<_> = paths.into_iter().filter(|m| m.identity.serial == SERIAL && m.identity.partition.is_none()).collect();
    let mut ns_port = [None, None];
    for m in &ours {
        for (i, p) in [Port::A, Port::B].into_iter().enumerate() {
            if m.path.pci_address.as_deref() == Some(p.bdf()) {
                ns_port[i] = Some(m.dev.clone());
            }
        }
    }
    let ns = if multipath {
        match &ours[..] {
            [one] => one.dev.clone(),
            _ => bail!("multipath on, yet {} block devices with the lab's serial: {:?}", ours.len(), ours.iter().map(|m| m.dev.display().to_string()).collect::<Vec<_>>()),
        }
    } else {
        ns_port[0].clone().or_else(|| ns_port[1].clone()).with_context(|| format!("no block device of the lab drive (serial {SERIAL}) in the guest"))?
    };
    Ok(GuestDrive { multipath, ctrl, ns, ns_port })
}

impl GuestDrive {
    /// Shell assignments (`LAB_NS=/dev/nvme0n1`, ...), one a line.
    pub fn env(&self) -> String {
        let opt = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        let mut s = String::new();
        s += &format!("LAB_SERIAL={SERIAL}\nLAB_MULTIPATH={}\n", if self.multipath { "on" } else { "off" });
        s += &format!("LAB_NS={}\nLAB_NS_A={}\nLAB_NS_B={}\n", self.ns.display(), opt(&self.ns_port[0]), opt(&self.ns_port[1]));
        s += &format!("LAB_CTRL_A={}\nLAB_CTRL_B={}\n", self.ctrl[0].clone().unwrap_or_default(), self.ctrl[1].clone().unwrap_or_default());
        s += &format!("LAB_BDF_A={}\nLAB_BDF_B={}\n", Port::A.bdf(), Port::B.bdf());
        s
    }
}

/// Replaces the lab placeholders in a scenario's text.
pub fn substitute(text: &str, ctrl_a: &str, ctrl_b: &str) -> String {
    text.replace("{lab.ctrl_a}", ctrl_a)
        .replace("{lab.ctrl_b}", ctrl_b)
        .replace("{lab.bdf_a}", Port::A.bdf())
        .replace("{lab.bdf_b}", Port::B.bdf())
}

/// The scenario at `path` made the lab's: placeholders replaced, the target the lab drive
/// at `ns`. Refuses a scenario of the simulated drive (it would not touch the lab).
pub fn lab_scenario(path: &Path, ctrl_a: &str, ctrl_b: &str, ns: &Path) -> Result<Scenario> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut s = Scenario::from_toml(&substitute(&text, ctrl_a, ctrl_b), &path.display().to_string())?;
    if s.target.sim.is_some() {
        bail!("{}: [target] is the simulated drive, which runs in-process and never touches the lab's NVMe drive", path.display());
    }
    s.target = Target { path: Some(ns.to_path_buf()), serial: Some(SERIAL.to_string()), ..Target::default() };
    s.link_controller()?;
    s.power_controller()?;
    Ok(s)
}
