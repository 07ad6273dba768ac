//! The link resets an agent runs on its own host ([`HostReset`]): of the NVMe controller, or
//! its PCI function, behind the one target the agent opened. The wire names the kind only;
//! the device is the agent's own finding (the target's controller in sysfs, its PCI address),
//! so nothing from the wire picks what is reset. The reset itself is the Linux link
//! controller `faultline run` uses on its own host (`faultline_drivers::control::linux`).

use super::proto::{HostReset, ResetReport};
use faultline_drivers::control::linux::LinuxLink;
use faultline_drivers::control::{ControlEnv, ControllerSpec};
use faultline_drivers::{LinkController, PciResetMethod};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a reset controller or a rescanned function may take to come back: below the
/// coordinator's bound on an agent's silence (20 s), so a reset that hangs is this host's
/// failure to report, not a lost host.
const SETTLE: Duration = Duration::from_secs(15);

/// Why this host cannot run a reset on its port's target (said in the refusal of an open or a
/// cycle, and so to the coordinator).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CannotReset(pub String);

/// One reset, ready to run on the controller it found.
pub(crate) struct Reset {
    link: LinuxLink,
    port: String,
    reset: HostReset,
}

/// The Linux link controller spec for `reset` of the NVMe controller behind `listed` (the
/// target as the agent's command line lists it), or why this host cannot do it there.
pub(crate) fn spec_for(listed: &str, reset: HostReset) -> Result<ControllerSpec, CannotReset> {
    let what = reset.kind();
    if faultline_drivers::nbd::looks_like_nbd(listed) {
        return Err(CannotReset(format!(
            "{what}: {listed} is an NBD export, with no NVMe controller or PCI function on this host to reset"
        )));
    }
    let admin =
        faultline_drivers::nvme::NvmeAdmin::open_for_block_device(Path::new(listed)).map_err(|e| CannotReset(format!("{what}: {e}")))?;
    let ctrl = admin.controller_name().to_string();
    let bdf = || -> Result<String, CannotReset> {
        let at = Path::new("/sys/class/nvme").join(&ctrl).join("address");
        let a = std::fs::read_to_string(&at).map(|s| s.trim().to_string()).unwrap_or_default();
        if a.is_empty() {
            return Err(CannotReset(format!(
                "{what}: {ctrl} (behind {listed}) has no PCI address in {} (not NVMe over PCIe)",
                at.display()
            )));
        }
        Ok(a)
    };
    Ok(match reset {
        HostReset::NvmeController => ControllerSpec::NvmeReset { ctrl },
        HostReset::NvmeSubsystem => ControllerSpec::NvmeSubsysReset { ctrl },
        HostReset::PciFunction => ControllerSpec::PciReset { bdf: bdf()?, method: None },
        HostReset::PciFunctionFlr => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Flr) },
        HostReset::PciFunctionBus => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Bus) },
        HostReset::PciFunctionPm => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Pm) },
        HostReset::PciRemoveRescan => ControllerSpec::PciRemoveRescan { bdf: bdf()? },
    })
}

impl Reset {
    /// Finds the controller and opens the link controller for it (its checks: the sysfs
    /// files, root, a subsystem reset the controller has).
    pub(crate) fn open(listed: &str, reset: HostReset) -> Result<Reset, CannotReset> {
        let spec = spec_for(listed, reset)?;
        let env = ControlEnv { settle_timeout: SETTLE, ..ControlEnv::default() };
        let link = LinuxLink::open(&spec, &env).map_err(|e| CannotReset(e.to_string()))?;
        let port = link.ports().first().map(|p| p.port.clone()).unwrap_or_default();
        Ok(Reset { link, port, reset })
    }

    /// Runs the reset, holding a down phase for `hold`.
    pub(crate) fn run(&mut self, hold: Duration) -> ResetReport {
        let t0 = Instant::now();
        let r = self.link.reset(&self.port, self.reset.kind(), hold);
        ResetReport {
            controller: self.link.name(),
            took_ns: t0.elapsed().as_nanos().min(u64::MAX as u128) as u64,
            error: r.err().map(|e| e.to_string()),
            log: self.link.take_log(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_nbd_export_or_a_plain_file_has_nothing_to_reset_and_says_so() {
        let e = spec_for("nbd+unix:///A?socket=/tmp/x.sock", HostReset::NvmeController).unwrap_err().0;
        assert_eq!(
            e,
            "nvme-controller-reset: nbd+unix:///A?socket=/tmp/x.sock is an NBD export, with no NVMe controller or PCI function on this host to reset"
        );
        let f = std::env::temp_dir().join(format!("faultline-reset-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let e = spec_for(f.to_str().unwrap(), HostReset::PciFunctionFlr).unwrap_err().0;
        let _ = std::fs::remove_file(&f);
        assert!(e.starts_with("pci-function-reset(flr): ") && e.contains("regular file"), "{e}");
    }

    #[test]
    fn every_reset_a_host_can_run_goes_to_the_wire_and_back() {
        for r in [
            HostReset::NvmeController,
            HostReset::NvmeSubsystem,
            HostReset::PciFunction,
            HostReset::PciFunctionFlr,
            HostReset::PciFunctionBus,
            HostReset::PciFunctionPm,
            HostReset::PciRemoveRescan,
        ] {
            assert_eq!(HostReset::of(r.kind()), Some(r));
        }
        for k in [faultline_drivers::ResetKind::SlotPower, faultline_drivers::ResetKind::PortPull, faultline_drivers::ResetKind::Perst] {
            assert_eq!(HostReset::of(k), None, "{k}");
        }
    }
}
