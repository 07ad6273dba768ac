//! Linux NVMe and PCIe link control (`docs/DOMAIN.md` section 6; the sysfs files
//! are the kernel's `Documentation/ABI/testing/sysfs-bus-pci` and `sysfs-class-nvme`):
//! - NVMe controller reset: `echo 1 > /sys/class/nvme/nvmeX/reset_controller`, then wait for
//!   `state` to read `live` again.
//! - NVM subsystem reset: ioctl `NVME_IOCTL_SUBSYS_RESET` on `/dev/nvmeX` (see `sys.rs`). Only
//!   a controller whose CAP register has NSSRS (bit 36) set has one; the kernel answers the
//!   ioctl with ENOTTY otherwise (`nvme_reset_subsystem`: `if (!ctrl->subsystem) return
//!   -ENOTTY`). CAP is in BAR0, which user space reads only by mapping the function's sysfs
//!   `resource0` (as `nvme show-regs` does): read when the controller is opened, and a
//!   controller without NSSR is refused there, before any run. Where the mapping is refused
//!   (kernel lockdown, a fabrics controller), the first reset's ENOTTY says it.
//! - PCI function reset: `reset_method` set to the chosen method (and put back afterwards),
//!   then `echo 1 > /sys/bus/pci/devices/BDF/reset`. A reset the kernel reports failed is
//!   looked at: refused at once (faster than any reset takes) it did not happen; refused after
//!   the kernel's own wait (a secondary bus reset whose link came up after the kernel stopped
//!   waiting) the function is watched until its link is up, its config space reads and its
//!   NVMe controller is `live` again: then it happened, late, and the controller's log says so.
//! - Remove and rescan: `.../BDF/remove`, wait, `/sys/bus/pci/rescan`, wait for the function.
//! - Slot power: `/sys/bus/pci/slots/N/power` (0, wait, 1), read back after each write.
//!
//! Every path lives under [`ControlEnv::sysfs_root`] / [`ControlEnv::dev_root`] (default `/`),
//! so tests run against a fake tree. Paths, and root when the real tree is used, are checked
//! when the controller is opened, before any run.

use super::{ControlEnv, ControllerSpec};
use crate::link::{LinkController, LinkError, PciResetMethod, PortCaps, ResetKind};
use crate::power::{PowerCaps, PowerError, PowerState, PowerSwitch};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
enum Target {
    NvmeReset { ctrl: String },
    NvmeSubsys { ctrl: String },
    PciReset { bdf: String, method: Option<PciResetMethod> },
    RemoveRescan { bdf: String },
    Slot { slot: String },
}

/// One Linux link controller, for the port (controller, function or slot) its spec names.
#[derive(Clone, Debug)]
pub struct LinuxLink {
    name: String,
    target: Target,
    sys: PathBuf,
    dev: PathBuf,
    settle: Duration,
    /// A PCI reset the kernel refuses faster than this was never started (a secondary bus
    /// reset alone holds the bus 2 ms and then waits at least 100 ms for the link).
    min_reset: Duration,
    /// What the controller has to say beyond success or failure (a reset that came back late).
    log: Vec<String>,
}

/// NVMe controller `ctrl`'s CAP register (offset 0 of BAR0), through its PCI function's
/// `resource0` under the sysfs root `sys` (as `nvme show-regs` reads it). CAP.TO, bits 31:24,
/// is the longest the controller may take to become ready, in 500 ms units.
pub fn controller_cap(sys: &Path, ctrl: &str) -> std::io::Result<u64> {
    let f = std::fs::File::open(sys.join("class/nvme").join(ctrl).join("device/resource0"))?;
    super::sys::read_mapped_u64(&f, 0)
}

/// The NVMe CAP register's NSSRS bit: NVM Subsystem Reset Supported (bit 36).
const CAP_NSSRS: u64 = 1 << 36;

/// What went wrong with a sysfs (or dev) file, or what it read that says the device is not
/// (yet) where it should be. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    #[error("cannot open {}: {source}", .path.display())]
    Open { path: PathBuf, source: std::io::Error },
    #[error("writing {value:?} to {} failed: {source}", .path.display())]
    Write { path: PathBuf, value: String, source: std::io::Error },
    #[error("cannot read {}: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The controller's CAP register could not be read through the mapped `resource0`.
    #[error("cannot read CAP from {}: {source}", .path.display())]
    ReadCap { path: PathBuf, source: std::io::Error },
    /// A value written did not read back.
    #[error("{} reads {got:?} after writing {want}", .path.display())]
    ReadBack { path: PathBuf, got: String, want: &'static str },
    /// A PCI function's config space reads all ones, or nothing.
    #[error("{} does not read back (vendor id all ones, or empty)", .path.display())]
    ConfigUnreadable { path: PathBuf },
    #[error("{} reads {speed:?}: the link is down", .path.display())]
    LinkDown { path: PathBuf, speed: String },
    #[error("{} reads {state:?}, not \"live\"", .path.display())]
    NotLive { path: PathBuf, state: String },
}

fn sysfs_write(path: &Path, value: &str) -> Result<(), SysfsError> {
    // O_TRUNC as the shell's `echo 1 > file` does; sysfs ignores it, the fake tree needs it.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|source| SysfsError::Open { path: path.into(), source })?;
    f.write_all(value.as_bytes()).map_err(|source| SysfsError::Write { path: path.into(), value: value.to_string(), source })
}

fn sysfs_read(path: &Path) -> Result<String, SysfsError> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|source| SysfsError::Read { path: path.into(), source })
}

impl LinuxLink {
    /// Checks the paths (and root, on the real tree) and returns the controller. Panics on a
    /// spec that is not a Linux link kind (a caller bug).
    pub fn open(spec: &ControllerSpec, env: &ControlEnv) -> Result<LinuxLink, LinkError> {
        let target = match spec {
            ControllerSpec::NvmeReset { ctrl } => Target::NvmeReset { ctrl: ctrl.clone() },
            ControllerSpec::NvmeSubsysReset { ctrl } => Target::NvmeSubsys { ctrl: ctrl.clone() },
            ControllerSpec::PciReset { bdf, method } => Target::PciReset { bdf: bdf.clone(), method: *method },
            ControllerSpec::PciRemoveRescan { bdf } => Target::RemoveRescan { bdf: bdf.clone() },
            ControllerSpec::PciSlotPower { slot } => Target::Slot { slot: slot.clone() },
            other => panic!("LinuxLink::open called with {other}"),
        };
        let mut l = LinuxLink {
            name: spec.to_string(),
            target,
            sys: env.sysfs_root.join("sys"),
            dev: env.dev_root.join("dev"),
            settle: env.settle_timeout,
            min_reset: Duration::from_millis(100),
            log: Vec::new(),
        };
        l.check(env)?;
        if let Target::NvmeSubsys { ctrl } = &l.target {
            match l.read_cap(ctrl) {
                Ok(cap) if cap & CAP_NSSRS == 0 => {
                    return Err(l.fail(
                        "open",
                        format!(
                            "{ctrl} has no NVM subsystem reset: its CAP register reads {cap:#018x}, NSSRS (bit 36) clear, so the \
                             kernel refuses NVME_IOCTL_SUBSYS_RESET on it; reset it with nvme-reset://{ctrl} or a pci-reset:// \
                             of its function instead"
                        ),
                    ))
                }
                Ok(_) => {}
                // Not known before the first reset: its ENOTTY will say so.
                Err(why) => l.log.push(format!("cannot tell whether {ctrl} has an NVM subsystem reset before trying one: {why}")),
            }
        }
        Ok(l)
    }

    /// The controller's CAP register (offset 0 of BAR0), through its PCI function's
    /// `resource0`.
    fn read_cap(&self, ctrl: &str) -> Result<u64, SysfsError> {
        let p = self.nvme_dir(ctrl).join("device/resource0");
        let f = std::fs::File::open(&p).map_err(|source| SysfsError::Open { path: p.clone(), source })?;
        super::sys::read_mapped_u64(&f, 0).map_err(|source| SysfsError::ReadCap { path: p, source })
    }

    /// After the kernel reported a PCI reset of `bdf` failed (`err`, after `took`): whether
    /// it happened, by looking. See the module doc.
    fn after_failed_reset(&mut self, cmd: &str, bdf: &str, err: SysfsError, took: Duration) -> Result<(), LinkError> {
        let ms = took.as_millis();
        if took < self.min_reset {
            return Err(
                self.fail(cmd, format!("{err} after {ms} ms: refused before any reset could have happened; the reset did not happen"))
            );
        }
        let dir = self.pci_dir(bdf);
        let end = Instant::now() + self.settle;
        loop {
            let missing = function_back(&dir);
            match missing {
                Ok(seen) => {
                    self.log.push(format!(
                        "{cmd} of {bdf}: the kernel reported {err} after {ms} ms, but the reset happened: the function came back \
                         ({seen}); its link came up after the kernel stopped waiting"
                    ));
                    return Ok(());
                }
                Err(why) if Instant::now() >= end => {
                    return Err(self.fail(cmd, format!("{err} after {ms} ms, and the function is not back within {:?}: {why}", self.settle)))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn fail(&self, command: &str, reason: String) -> LinkError {
        LinkError::Failed { controller: self.name.clone(), command: command.into(), reason }
    }

    fn nvme_dir(&self, ctrl: &str) -> PathBuf {
        self.sys.join("class/nvme").join(ctrl)
    }

    fn pci_dir(&self, bdf: &str) -> PathBuf {
        self.sys.join("bus/pci/devices").join(bdf)
    }

    fn slot_power(&self, slot: &str) -> PathBuf {
        self.sys.join("bus/pci/slots").join(slot).join("power")
    }

    /// The files this controller will touch.
    fn paths(&self) -> Vec<PathBuf> {
        match &self.target {
            Target::NvmeReset { ctrl } => vec![self.nvme_dir(ctrl).join("reset_controller")],
            Target::NvmeSubsys { ctrl } => vec![self.dev.join(ctrl)],
            Target::PciReset { bdf, method } => {
                let mut v = vec![self.pci_dir(bdf).join("reset")];
                if method.is_some() {
                    v.push(self.pci_dir(bdf).join("reset_method"));
                }
                v
            }
            Target::RemoveRescan { bdf } => vec![self.pci_dir(bdf).join("remove"), self.sys.join("bus/pci/rescan")],
            Target::Slot { slot } => vec![self.slot_power(slot)],
        }
    }

    fn check(&self, env: &ControlEnv) -> Result<(), LinkError> {
        let real = env.sysfs_root == Path::new("/") || env.dev_root == Path::new("/");
        if real && !super::sys::running_as_root() {
            return Err(self.fail("open", "needs root (sysfs reset files and NVMe ioctls are privileged); run it with sudo".into()));
        }
        for p in self.paths() {
            if !p.exists() {
                let hint = match &self.target {
                    Target::NvmeReset { .. } | Target::NvmeSubsys { .. } => "is the controller name right? see `ls /sys/class/nvme`",
                    Target::PciReset { .. } => {
                        "is the PCI address right (`lspci -D`)? no `reset` file means the function has no reset method"
                    }
                    Target::RemoveRescan { .. } => "is the PCI address right? see `lspci -D`",
                    Target::Slot { .. } => "is pciehp loaded and the slot name right? see `ls /sys/bus/pci/slots`",
                };
                return Err(self.fail("open", format!("{} does not exist ({hint})", p.display())));
            }
        }
        Ok(())
    }

    fn port(&self) -> &str {
        match &self.target {
            Target::NvmeReset { ctrl } | Target::NvmeSubsys { ctrl } => ctrl,
            Target::PciReset { bdf, .. } | Target::RemoveRescan { bdf } => bdf,
            Target::Slot { slot } => slot,
        }
    }

    fn kind(&self) -> ResetKind {
        match &self.target {
            Target::NvmeReset { .. } => ResetKind::NvmeController,
            Target::NvmeSubsys { .. } => ResetKind::NvmeSubsystem,
            Target::PciReset { method, .. } => ResetKind::PciFunction(*method),
            Target::RemoveRescan { .. } => ResetKind::PciRemoveRescan,
            Target::Slot { .. } => ResetKind::SlotPower,
        }
    }

    /// Polls `ok` every 50 ms until it holds or the settle timeout passes.
    fn wait_for(&self, command: &str, what: &str, ok: impl Fn() -> bool) -> Result<(), LinkError> {
        let end = Instant::now() + self.settle;
        loop {
            if ok() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(self.fail(command, format!("{what} did not happen within {:?}", self.settle)));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn set_slot_power(&self, slot: &str, on: bool) -> Result<(), SysfsError> {
        let p = self.slot_power(slot);
        let want = if on { "1" } else { "0" };
        sysfs_write(&p, want)?;
        let got = sysfs_read(&p)?;
        if got != want {
            return Err(SysfsError::ReadBack { path: p, got, want });
        }
        Ok(())
    }
}

/// Whether the PCI function at `dir` is back after a reset: its config space reads (a vendor
/// id other than all ones), its link is up (`current_link_speed` not `Unknown`, where sysfs
/// has it) and its NVMe controller, if it has one, reads `live`. `Ok`: what was seen; `Err`:
/// what is not back yet.
fn function_back(dir: &Path) -> Result<String, SysfsError> {
    let config = dir.join("config");
    let head = std::fs::read(&config).map_err(|source| SysfsError::Read { path: config.clone(), source })?;
    match head.get(..2) {
        Some(v) if v != [0xff, 0xff] => {}
        _ => return Err(SysfsError::ConfigUnreadable { path: config }),
    }
    let mut seen = vec!["config space readable".to_string()];
    let speed_file = dir.join("current_link_speed");
    if speed_file.exists() {
        let speed = sysfs_read(&speed_file)?;
        if speed.is_empty() || speed.starts_with("Unknown") {
            return Err(SysfsError::LinkDown { path: speed_file, speed });
        }
        seen.push(format!("link at {speed}"));
    }
    if let Ok(rd) = std::fs::read_dir(dir.join("nvme")) {
        for c in rd.flatten() {
            let state = c.path().join("state");
            let st = sysfs_read(&state)?;
            if st != "live" {
                return Err(SysfsError::NotLive { path: state, state: st });
            }
            seen.push(format!("{} live", c.file_name().to_string_lossy()));
        }
    }
    Ok(seen.join(", "))
}

impl LinkController for LinuxLink {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    fn ports(&self) -> Vec<PortCaps> {
        vec![PortCaps { port: self.port().to_string(), kinds: vec![self.kind()] }]
    }

    fn reset(&mut self, port: &str, kind: ResetKind, hold: Duration) -> Result<(), LinkError> {
        self.require(port, kind)?;
        let cmd = kind.to_string();
        match self.target.clone() {
            Target::NvmeReset { ctrl } => {
                let dir = self.nvme_dir(&ctrl);
                sysfs_write(&dir.join("reset_controller"), "1").map_err(|e| self.fail(&cmd, e.to_string()))?;
                let state = dir.join("state");
                if state.exists() {
                    self.wait_for(&cmd, &format!("{} reading \"live\"", state.display()), || {
                        sysfs_read(&state).is_ok_and(|s| s == "live")
                    })?;
                }
                Ok(())
            }
            Target::NvmeSubsys { ctrl } => {
                let path = self.dev.join(&ctrl);
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| self.fail(&cmd, format!("cannot open {}: {e}", path.display())))?;
                super::sys::nvme_subsys_reset(&f).map_err(|e| {
                    let why = if e.raw_os_error() == Some(libc::ENOTTY) {
                        format!(
                            "{e}: {ctrl} has no NVM subsystem reset (the kernel answers so when the controller's CAP.NSSRS is \
                             clear), or {} is not an NVMe controller; reset it with nvme-reset://{ctrl} instead",
                            path.display()
                        )
                    } else {
                        e.to_string()
                    };
                    self.fail(&cmd, format!("ioctl NVME_IOCTL_SUBSYS_RESET on {} failed: {why}", path.display()))
                })
            }
            Target::PciReset { bdf, method } => {
                let dir = self.pci_dir(&bdf);
                let rm = dir.join("reset_method");
                let previous = match method {
                    Some(m) => {
                        let prev = sysfs_read(&rm).map_err(|e| self.fail(&cmd, e.to_string()))?;
                        sysfs_write(&rm, m.as_str())
                            .map_err(|e| self.fail(&cmd, format!("{e} (the function may not support {})", m.as_str())))?;
                        Some(prev)
                    }
                    None => None,
                };
                let t0 = Instant::now();
                let r = sysfs_write(&dir.join("reset"), "1");
                let took = t0.elapsed();
                if let Some(prev) = previous {
                    // Put the kernel's method list back; an empty list means the default.
                    let restore = if prev.is_empty() { "default".to_string() } else { prev };
                    sysfs_write(&rm, &restore)
                        .map_err(|e| self.fail(&cmd, format!("reset done, but restoring reset_method failed: {e}")))?;
                }
                match r {
                    Ok(()) => Ok(()),
                    Err(e) => self.after_failed_reset(&cmd, &bdf, e, took),
                }
            }
            Target::RemoveRescan { bdf } => {
                let dir = self.pci_dir(&bdf);
                sysfs_write(&dir.join("remove"), "1").map_err(|e| self.fail(&cmd, e.to_string()))?;
                std::thread::sleep(hold);
                sysfs_write(&self.sys.join("bus/pci/rescan"), "1").map_err(|e| self.fail(&cmd, e.to_string()))?;
                self.wait_for(&cmd, &format!("{} reappearing after rescan", dir.display()), || dir.exists())
            }
            Target::Slot { slot } => {
                self.set_slot_power(&slot, false).map_err(|e| self.fail(&cmd, e.to_string()))?;
                std::thread::sleep(hold);
                self.set_slot_power(&slot, true).map_err(|e| self.fail(&cmd, e.to_string()))
            }
        }
    }
}

/// Slot power as a power switch: `/sys/bus/pci/slots/N/power`, read back after each write.
pub struct SlotPower {
    link: LinuxLink,
}

impl SlotPower {
    /// Panics unless `link` is a `pci-slot-power` controller (a caller bug).
    pub fn new(link: LinuxLink) -> SlotPower {
        assert!(matches!(link.target, Target::Slot { .. }), "SlotPower needs a pci-slot-power controller");
        SlotPower { link }
    }

    fn set(&mut self, on: bool) -> Result<(), PowerError> {
        let slot = self.link.port().to_string();
        self.link.set_slot_power(&slot, on).map_err(|e| PowerError::Failed {
            switch: self.link.name.clone(),
            command: format!("slot power {}", if on { "on" } else { "off" }),
            reason: e.to_string(),
        })
    }
}

impl PowerSwitch for SlotPower {
    fn name(&self) -> String {
        self.link.name.clone()
    }
    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: true, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        self.set(false)
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        self.set(true)
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        let p = self.link.slot_power(self.link.port());
        let fail = |reason: String| PowerError::Failed { switch: self.link.name.clone(), command: "read slot power".into(), reason };
        match sysfs_read(&p).map_err(|e| fail(e.to_string()))?.as_str() {
            "1" => Ok(PowerState::On),
            "0" => Ok(PowerState::Off),
            other => Err(fail(format!("{} reads {other:?}", p.display()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::parse_spec;
    use crate::fake_root::FakeRoot;

    impl FakeRoot {
        fn env(&self) -> ControlEnv {
            ControlEnv {
                sysfs_root: self.0.clone(),
                dev_root: self.0.clone(),
                settle_timeout: Duration::from_millis(300),
                ..ControlEnv::default()
            }
        }
    }

    fn open(spec: &str, root: &FakeRoot) -> Result<LinuxLink, LinkError> {
        LinuxLink::open(&parse_spec(spec).unwrap(), &root.env())
    }

    #[test]
    fn nvme_controller_reset_writes_sysfs_and_waits_for_live() {
        let root = FakeRoot::new("nvme");
        root.file("sys/class/nvme/nvme0/reset_controller", "");
        root.file("sys/class/nvme/nvme0/state", "live\n");
        let mut l = open("nvme-reset://nvme0", &root).unwrap();
        l.reset("nvme0", ResetKind::NvmeController, Duration::ZERO).unwrap();
        assert_eq!(root.read("sys/class/nvme/nvme0/reset_controller"), "1");
        root.file("sys/class/nvme/nvme0/state", "resetting\n");
        let e = l.reset("nvme0", ResetKind::NvmeController, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("nvme-reset://nvme0") && e.contains("\"live\"") && e.contains("did not happen"), "{e}");
        let e = l.reset("nvme0", ResetKind::NvmeSubsystem, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("cannot do nvme-subsystem-reset"), "{e}");
    }

    #[test]
    fn missing_paths_are_refused_at_open_with_a_hint() {
        let root = FakeRoot::new("missing");
        let e = open("nvme-reset://nvme7", &root).unwrap_err().to_string();
        assert!(e.contains("nvme7/reset_controller does not exist") && e.contains("ls /sys/class/nvme"), "{e}");
        let e = open("pci-slot-power://4", &root).unwrap_err().to_string();
        assert!(e.contains("slots/4/power does not exist"), "{e}");
    }

    #[test]
    fn subsystem_reset_ioctl_failure_names_the_device_and_errno() {
        let root = FakeRoot::new("subsys");
        // A regular file stands in for /dev/nvme0: the kernel refuses the ioctl (ENOTTY).
        root.file("dev/nvme0", "");
        let mut l = open("nvme-subsys-reset://nvme0", &root).unwrap();
        let e = l.reset("nvme0", ResetKind::NvmeSubsystem, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("NVME_IOCTL_SUBSYS_RESET") && e.contains("dev/nvme0"), "{e}");
    }

    /// Writes a BAR0 image whose CAP register is `cap` as nvme0's `resource0`.
    fn bar0(root: &FakeRoot, cap: u64) {
        let mut b = vec![0u8; 4096];
        b[..8].copy_from_slice(&cap.to_le_bytes());
        root.file("sys/class/nvme/nvme0/device/resource0", "");
        std::fs::write(root.0.join("sys/class/nvme/nvme0/device/resource0"), b).unwrap();
    }

    #[test]
    fn a_controller_without_nvm_subsystem_reset_is_refused_at_open_by_its_cap_register() {
        let root = FakeRoot::new("nssrs");
        root.file("dev/nvme0", "");
        // QEMU's emulated controller: CAP = 0x0000_0010_2003_03ff-like, NSSRS (bit 36) clear.
        bar0(&root, 0x0000_0020_2014_03ff & !(1 << 36));
        let e = open("nvme-subsys-reset://nvme0", &root).unwrap_err().to_string();
        assert!(e.contains("nvme0 has no NVM subsystem reset") && e.contains("NSSRS (bit 36) clear"), "{e}");
        assert!(e.contains("nvme-reset://nvme0"), "names what to use instead: {e}");
        // NSSRS set: opened, and it is the ioctl's answer that counts (here ENOTTY: the fake
        // /dev/nvme0 is a regular file).
        bar0(&root, 0x0000_0030_2014_03ff);
        let mut l = open("nvme-subsys-reset://nvme0", &root).unwrap();
        assert!(l.take_log().is_empty());
        let e = l.reset("nvme0", ResetKind::NvmeSubsystem, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("has no NVM subsystem reset") && e.contains("CAP.NSSRS"), "ENOTTY is explained: {e}");
    }

    #[test]
    fn an_unreadable_cap_register_is_noted_and_the_reset_left_to_say() {
        let root = FakeRoot::new("nocap");
        root.file("dev/nvme0", "");
        root.file("sys/class/nvme/nvme0/device/resource0", "");
        let mut l = open("nvme-subsys-reset://nvme0", &root).unwrap();
        let log = l.take_log();
        assert!(
            log.len() == 1 && log[0].contains("cannot tell whether nvme0 has an NVM subsystem reset") && log[0].contains("too short"),
            "{log:?}"
        );
    }

    /// A PCI function with an NVMe controller, whose `reset` fails when written (a directory).
    fn failing_function(tag: &str) -> FakeRoot {
        let root = FakeRoot::new(tag);
        let f = "sys/bus/pci/devices/0000:3b:00.0";
        root.dir(&format!("{f}/reset"));
        root.file(&format!("{f}/reset_method"), "flr bus\n");
        std::fs::write(root.0.join(format!("{f}/config")), [0x86, 0x80, 0x0a, 0xf1]).unwrap();
        root.file(&format!("{f}/current_link_speed"), "8.0 GT/s PCIe\n");
        root.file(&format!("{f}/nvme/nvme0/state"), "live\n");
        root
    }

    #[test]
    fn a_pci_reset_refused_at_once_did_not_happen() {
        let root = failing_function("pci-not");
        let mut l = open("pci-reset://0000:3b:00.0?method=bus", &root).unwrap();
        let e = l.reset("0000:3b:00.0", ResetKind::PciFunction(Some(PciResetMethod::Bus)), Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("the reset did not happen"), "{e}");
        assert_eq!(root.read("sys/bus/pci/devices/0000:3b:00.0/reset_method"), "flr bus", "the method list is put back");
    }

    #[test]
    fn a_pci_reset_reported_failed_after_the_kernel_waited_is_looked_at() {
        let root = failing_function("pci-late");
        let mut l = open("pci-reset://0000:3b:00.0?method=bus", &root).unwrap();
        // As if the kernel had waited for the link before giving up.
        l.min_reset = Duration::ZERO;
        let bus = ResetKind::PciFunction(Some(PciResetMethod::Bus));
        l.reset("0000:3b:00.0", bus, Duration::ZERO).unwrap();
        let log = l.take_log();
        assert!(
            log.len() == 1 && log[0].contains("the reset happened") && log[0].contains("link at 8.0 GT/s") && log[0].contains("nvme0 live"),
            "{log:?}"
        );
        // Link still down and the controller not back within the settle time: a failure that
        // says what is missing.
        root.file("sys/bus/pci/devices/0000:3b:00.0/current_link_speed", "Unknown\n");
        let e = l.reset("0000:3b:00.0", bus, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("not back") && e.contains("the link is down"), "{e}");
        root.file("sys/bus/pci/devices/0000:3b:00.0/current_link_speed", "8.0 GT/s PCIe\n");
        root.file("sys/bus/pci/devices/0000:3b:00.0/nvme/nvme0/state", "resetting\n");
        let e = l.reset("0000:3b:00.0", bus, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("not \"live\""), "{e}");
        root.file("sys/bus/pci/devices/0000:3b:00.0/nvme/nvme0/state", "live\n");
        std::fs::write(root.0.join("sys/bus/pci/devices/0000:3b:00.0/config"), [0xff, 0xff, 0xff, 0xff]).unwrap();
        let e = l.reset("0000:3b:00.0", bus, Duration::ZERO).unwrap_err().to_string();
        assert!(e.contains("does not read back"), "{e}");
    }

    #[test]
    fn pci_reset_sets_the_method_and_puts_the_old_list_back() {
        let root = FakeRoot::new("pcireset");
        root.file("sys/bus/pci/devices/0000:3b:00.0/reset", "");
        root.file("sys/bus/pci/devices/0000:3b:00.0/reset_method", "flr bus\n");
        let mut l = open("pci-reset://0000:3b:00.0?method=bus", &root).unwrap();
        assert!(l.require("0000:3b:00.0", ResetKind::PciFunction(Some(PciResetMethod::Flr))).is_err());
        l.reset("0000:3b:00.0", ResetKind::PciFunction(Some(PciResetMethod::Bus)), Duration::ZERO).unwrap();
        assert_eq!(root.read("sys/bus/pci/devices/0000:3b:00.0/reset"), "1");
        assert_eq!(root.read("sys/bus/pci/devices/0000:3b:00.0/reset_method"), "flr bus");
    }

    #[test]
    fn remove_rescan_waits_for_the_function_to_return() {
        let root = FakeRoot::new("rescan");
        root.file("sys/bus/pci/devices/0000:3b:00.0/remove", "");
        root.file("sys/bus/pci/rescan", "");
        let mut l = open("pci-remove-rescan://0000:3b:00.0", &root).unwrap();
        // The fake tree does not remove the function, so it is "back" at once.
        l.reset("0000:3b:00.0", ResetKind::PciRemoveRescan, Duration::from_millis(1)).unwrap();
        assert_eq!(root.read("sys/bus/pci/rescan"), "1");
        // A function removed for real, that the rescan does not bring back, is an error.
        let dir = root.0.join("sys/bus/pci/devices/0000:3b:00.0");
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::remove_dir_all(dir).unwrap();
        });
        let e = l.reset("0000:3b:00.0", ResetKind::PciRemoveRescan, Duration::from_millis(100)).unwrap_err().to_string();
        remover.join().unwrap();
        assert!(e.contains("reappearing after rescan did not happen"), "{e}");
    }

    #[test]
    fn slot_power_is_a_switch_with_readback() {
        let root = FakeRoot::new("slot");
        root.file("sys/bus/pci/slots/12/power", "1\n");
        let mut l = open("pci-slot-power://12", &root).unwrap();
        let mut p = SlotPower::new(l.clone());
        p.power_off().unwrap();
        assert_eq!(p.state().unwrap(), PowerState::Off);
        p.power_on().unwrap();
        assert_eq!(p.state().unwrap(), PowerState::On);
        l.reset("12", ResetKind::SlotPower, Duration::from_millis(1)).unwrap();
        assert_eq!(root.read("sys/bus/pci/slots/12/power"), "1");
    }
}
