//! A normal shutdown's host side (`normal_shutdown`): the drive's controllers shut down
//! (CC.SHN set, CSTS.SHST complete awaited) before the power goes, and taken up again after.
//!
//! On Linux the nvme driver makes the handshake itself when a PCI function is unbound from it
//! (`nvme_remove` -> `nvme_dev_disable(dev, true)` -> `nvme_disable_ctrl(ctrl, true)`: CC.SHN
//! normal, then CSTS.SHST polled until complete, bounded by RTD3 Entry Latency or the
//! driver's `shutdown_timeout`), so a write of the function's address to
//! `/sys/bus/pci/drivers/nvme/unbind` returns once the controller reported its shutdown
//! complete (or the driver gave up, which it logs). After the power is back, a function that
//! came back unbound (a switch that cuts the slot's power without a hot-plug) is bound again;
//! one the kernel re-enumerated was probed already. Every controller of the namespace's
//! subsystem is shut down: a dual-ported drive's other port too, or its cache is not the
//! host's to promise.
//!
//! The simulated drive's controller shuts down in-process ([`SimShutdown`]).

use super::shared::Shared;
use faultline_drivers::blockdev::SysRoots;
use faultline_fixtures::SimPower;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a normal shutdown's host side could not be found, or did not happen.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ShutdownError {
    /// The simulated drive is off or gone.
    #[error("the drive is off or gone: its controller did not answer CC.SHN")]
    DriveAbsent,
    /// A sysfs entry the search needs could not be read.
    #[error("{}: {what}: {source}", .path.display())]
    Sysfs {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: Shared<std::io::Error>,
    },
    /// A controller on another transport than PCIe has no function to unbind.
    #[error("{controller} is on the {transport:?} transport: only a PCIe function is unbound from the nvme driver")]
    NotPcie { controller: String, transport: String },
    /// A controller's `device` is not a PCI address.
    #[error("{controller}: its device {device:?} is not a PCI address")]
    NotPciAddress { controller: String, device: String },
    /// The namespace's parent names no NVMe controller.
    #[error("{}: not an NVMe namespace (no controller found in sysfs under {})", .dev.display(), .parent.display())]
    NoController { dev: PathBuf, parent: PathBuf },
    /// Writing a function's address to the nvme driver's `unbind` or `bind` failed.
    #[error("{action} {function} (the nvme driver's {}): {source}", .file.display())]
    Write {
        action: &'static str,
        function: String,
        file: PathBuf,
        #[source]
        source: Shared<std::io::Error>,
    },
    /// A function still bound after its unbind: its controller did not shut down.
    #[error("{function} is still bound after its unbind: its controller did not shut down")]
    StillBound { function: String },
    /// A function that came back unbound, bound by neither the kernel nor the bind write in
    /// time (the last write's failure, if one failed).
    #[error("binding {function} to the nvme driver again: it stayed unbound for {} s{}", .waited.as_secs(), .last.as_ref().map(|e| format!(" (the last bind: {e})")).unwrap_or_default())]
    Unbound { function: String, waited: Duration, last: Option<Shared<std::io::Error>> },
}

impl ShutdownError {
    fn sysfs(path: &Path, what: &'static str, e: std::io::Error) -> ShutdownError {
        ShutdownError::Sysfs { path: path.to_path_buf(), what, source: Shared::new(e) }
    }
}

/// Shuts a drive's controllers down before a cut, and takes them up again after.
pub trait ControllerShutdown: Send {
    /// What is shut down, for the log (`sim`, `0000:01:00.0`).
    fn name(&self) -> String;
    /// Shuts the controllers down; how long the handshake took.
    fn shutdown(&mut self) -> Result<Duration, ShutdownError>;
    /// After the power is back: binds again what came back unbound.
    fn resume(&mut self) -> Result<(), ShutdownError>;
}

/// The simulated drive's controller.
pub struct SimShutdown(pub SimPower);

impl ControllerShutdown for SimShutdown {
    fn name(&self) -> String {
        "the simulated drive's controller".into()
    }

    fn shutdown(&mut self) -> Result<Duration, ShutdownError> {
        let t = Instant::now();
        if self.0.shutdown_controller() {
            Ok(t.elapsed())
        } else {
            Err(ShutdownError::DriveAbsent)
        }
    }

    fn resume(&mut self) -> Result<(), ShutdownError> {
        Ok(())
    }
}

/// The PCIe NVMe controllers of a namespace's subsystem, shut down by unbinding them from the
/// nvme driver.
pub struct NvmeShutdown {
    sys: PathBuf,
    /// The controllers' PCI functions (`0000:01:00.0`), in name order.
    functions: Vec<String>,
    /// After the power is back: how long a function may stay unbound before it is bound by
    /// hand, and how long it may take to be bound again.
    waits: (Duration, Duration),
}

impl NvmeShutdown {
    /// The controllers of the namespace block device at `dev` (under `roots`).
    pub fn of_namespace(dev: &Path, roots: &SysRoots) -> Result<NvmeShutdown, ShutdownError> {
        let canon = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
        let name = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let block = roots.sys.join("class/block").join(&name);
        let disk = std::fs::canonicalize(&block).map_err(|e| ShutdownError::sysfs(&block, "not a block device in sysfs", e))?;
        let disk = if disk.join("partition").exists() { disk.parent().map(Path::to_path_buf).unwrap_or(disk) } else { disk };
        // The disk's parent: its controller (one path), or its subsystem (native multipath).
        let parent = disk.parent().unwrap_or(&disk).to_path_buf();
        let functions = controllers_under(&parent, &roots.sys)?
            .iter()
            .map(|c| pci_function(&roots.sys, c))
            .collect::<Result<Vec<String>, ShutdownError>>()?;
        if functions.is_empty() {
            return Err(ShutdownError::NoController { dev: dev.to_path_buf(), parent });
        }
        Ok(NvmeShutdown { sys: roots.sys.clone(), functions, waits: (BIND_AFTER, RESUME_WAIT) })
    }

    fn driver_file(&self, what: &str) -> PathBuf {
        self.sys.join("bus/pci/drivers/nvme").join(what)
    }
}

/// The controllers (`nvmeN`) a namespace's parent names: itself when it is one, else the
/// subsystem's members.
fn controllers_under(parent: &Path, sys: &Path) -> Result<Vec<String>, ShutdownError> {
    let name = parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let is_ctrl = |n: &str| n.strip_prefix("nvme").is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()));
    if is_ctrl(&name) && sys.join("class/nvme").join(&name).exists() {
        return Ok(vec![name]);
    }
    let entries = std::fs::read_dir(parent).map_err(|e| ShutdownError::sysfs(parent, "cannot list it", e))?;
    let mut ctrls: Vec<String> = entries
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| is_ctrl(n) && sys.join("class/nvme").join(n).exists())
        .collect();
    ctrls.sort();
    Ok(ctrls)
}

/// The PCI function of controller `ctrl`: its `device` link's target, on the PCIe transport.
fn pci_function(sys: &Path, ctrl: &str) -> Result<String, ShutdownError> {
    let dir = sys.join("class/nvme").join(ctrl);
    let transport = std::fs::read_to_string(dir.join("transport")).unwrap_or_default().trim().to_string();
    if transport != "pcie" {
        return Err(ShutdownError::NotPcie { controller: ctrl.to_string(), transport });
    }
    let link = dir.join("device");
    let dev = std::fs::canonicalize(&link).map_err(|e| ShutdownError::sysfs(&link, "no PCI device", e))?;
    let bdf = dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ok = bdf.len() == 12 && bdf.as_bytes()[4] == b':' && bdf.as_bytes()[7] == b':' && bdf.as_bytes()[10] == b'.';
    if !ok {
        return Err(ShutdownError::NotPciAddress { controller: ctrl.to_string(), device: bdf });
    }
    Ok(bdf)
}

impl ControllerShutdown for NvmeShutdown {
    fn name(&self) -> String {
        self.functions.join(" and ")
    }

    fn shutdown(&mut self) -> Result<Duration, ShutdownError> {
        let t = Instant::now();
        let unbind = self.driver_file("unbind");
        for f in &self.functions {
            std::fs::write(&unbind, f).map_err(|e| ShutdownError::Write {
                action: "unbinding",
                function: f.clone(),
                file: unbind.clone(),
                source: Shared::new(e),
            })?;
            if self.sys.join("bus/pci/devices").join(f).join("driver").exists() {
                return Err(ShutdownError::StillBound { function: f.clone() });
            }
        }
        Ok(t.elapsed())
    }

    fn resume(&mut self) -> Result<(), ShutdownError> {
        let bind = self.driver_file("bind");
        for f in &self.functions {
            let dev = self.sys.join("bus/pci/devices").join(f);
            let settled = || !dev.exists() || dev.join("driver").exists();
            // Gone (to be re-enumerated) or probed again by the kernel (a hot-plug brings the
            // function back and probes it): nothing to do. A function the kernel has just
            // added may not be probed yet, and a write to `bind` then races the probe (the
            // lab saw ENODEV): it is asked to bind only once it stayed unbound a while, and
            // again each time after, until it is bound or the time is up.
            let start = Instant::now();
            let mut last = None;
            while !settled() {
                if start.elapsed() >= self.waits.1 {
                    return Err(ShutdownError::Unbound { function: f.clone(), waited: self.waits.1, last: last.map(Shared::new) });
                }
                if start.elapsed() >= self.waits.0 {
                    last = std::fs::write(&bind, f).err();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

/// How long a function may stay unbound after the power is back before it is bound by hand.
const BIND_AFTER: Duration = Duration::from_millis(500);
/// How long a function may take to be bound again, by the kernel's probe or by hand.
const RESUME_WAIT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: controllers `nvme0` (0000:01:00.0) and `nvme1` (0000:02:00.0) of one
    /// subsystem, its multipath disk `nvme0n1`, and the nvme driver's bind files.
    fn tree(root: &Path) -> SysRoots {
        let sys = root.join("sys");
        for (n, bdf) in [(0, "0000:01:00.0"), (1, "0000:02:00.0")] {
            let pci = sys.join(format!("devices/pci0000:00/{bdf}"));
            let ctrl = pci.join(format!("nvme/nvme{n}"));
            std::fs::create_dir_all(&ctrl).unwrap();
            std::fs::write(ctrl.join("transport"), "pcie\n").unwrap();
            symlink(&pci, ctrl.join("device")).unwrap();
            std::fs::create_dir_all(sys.join("class/nvme")).unwrap();
            symlink(&ctrl, sys.join(format!("class/nvme/nvme{n}"))).unwrap();
            std::fs::create_dir_all(sys.join("bus/pci/devices")).unwrap();
            symlink(&pci, sys.join(format!("bus/pci/devices/{bdf}"))).unwrap();
        }
        let subsys = sys.join("devices/virtual/nvme-subsystem/nvme-subsys0");
        std::fs::create_dir_all(subsys.join("nvme0n1")).unwrap();
        for n in [0, 1] {
            symlink(sys.join(format!("class/nvme/nvme{n}")), subsys.join(format!("nvme{n}"))).unwrap();
        }
        std::fs::create_dir_all(sys.join("class/block")).unwrap();
        symlink(subsys.join("nvme0n1"), sys.join("class/block/nvme0n1")).unwrap();
        let drv = sys.join("bus/pci/drivers/nvme");
        std::fs::create_dir_all(&drv).unwrap();
        SysRoots { sys, dev: root.join("dev") }
    }

    #[test]
    fn every_controller_of_the_namespaces_subsystem_is_unbound_and_bound_again_if_it_came_back_unbound() {
        let root = std::env::temp_dir().join(format!("faultline-shutdown-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let roots = tree(&root);
        let mut s = NvmeShutdown::of_namespace(&root.join("dev/nvme0n1"), &roots).unwrap();
        assert_eq!(s.functions, ["0000:01:00.0", "0000:02:00.0"]);
        assert_eq!(s.name(), "0000:01:00.0 and 0000:02:00.0");
        s.shutdown().unwrap();
        // The fake driver file keeps the last address written: each was, in turn.
        let drv = roots.sys.join("bus/pci/drivers/nvme");
        assert_eq!(std::fs::read_to_string(drv.join("unbind")).unwrap(), "0000:02:00.0");
        // Back: one probed again by the kernel is left alone; one that stays unbound is bound
        // by hand (here the fake driver binds what is written to its `bind`).
        std::fs::create_dir_all(roots.sys.join("devices/pci0000:00/0000:02:00.0/driver")).unwrap();
        s.waits = (Duration::from_millis(20), Duration::from_secs(5));
        let bind = drv.join("bind");
        let sys = roots.sys.clone();
        let driver = std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(f) = std::fs::read_to_string(&bind) {
                    std::fs::create_dir_all(sys.join(format!("bus/pci/devices/{f}/driver"))).unwrap();
                    return f;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            String::new()
        });
        s.resume().unwrap();
        assert_eq!(driver.join().unwrap(), "0000:01:00.0");
        // One that nothing binds: the time runs out, named.
        std::fs::remove_dir_all(roots.sys.join("devices/pci0000:00/0000:01:00.0/driver")).unwrap();
        std::fs::remove_file(drv.join("bind")).unwrap();
        s.waits = (Duration::from_millis(20), Duration::from_millis(200));
        let e = s.resume().unwrap_err().to_string();
        assert!(e.starts_with("binding 0000:01:00.0 to the nvme driver again"), "{e}");
        // A function still bound after its unbind did not shut down.
        let e = s.shutdown().unwrap_err().to_string();
        assert!(e.contains("0000:02:00.0 is still bound"), "{e}");
        // Not on PCIe: refused by name.
        std::fs::write(roots.sys.join("devices/pci0000:00/0000:01:00.0/nvme/nvme0/transport"), "tcp\n").unwrap();
        let e = NvmeShutdown::of_namespace(&root.join("dev/nvme0n1"), &roots).err().unwrap().to_string();
        assert!(e.contains("nvme0 is on the \"tcp\" transport"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
