//! The link resets an agent runs on its own host (a [`LinkReset`] that is
//! [`on_host`](LinkReset::on_host)): of the NVMe controller, or its PCI function, behind the
//! one target the agent opened. The wire names the kind only;
//! the device is the agent's own finding (the target's controller in sysfs, its PCI address),
//! so nothing from the wire picks what is reset. The reset itself is the Linux link
//! controller `faultline run` uses on its own host (`faultline_drivers::control::linux`).

use crate::remote::proto::{LinkReset, ResetReport};
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
    reset: LinkReset,
}

/// The Linux link controller spec for `reset` of the NVMe controller behind `listed` (the
/// target as the agent's command line lists it), or why this host cannot do it there.
pub(crate) fn spec_for(listed: &str, reset: LinkReset) -> Result<ControllerSpec, CannotReset> {
    let what = reset.reset_kind();
    if !reset.on_host() {
        return Err(not_on_host(reset));
    }
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
        LinkReset::NvmeController => ControllerSpec::NvmeReset { ctrl },
        LinkReset::NvmeSubsystem => ControllerSpec::NvmeSubsysReset { ctrl },
        LinkReset::PciFunction => ControllerSpec::PciReset { bdf: bdf()?, method: None },
        LinkReset::PciFunctionFlr => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Flr) },
        LinkReset::PciFunctionBus => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Bus) },
        LinkReset::PciFunctionPm => ControllerSpec::PciReset { bdf: bdf()?, method: Some(PciResetMethod::Pm) },
        LinkReset::PciRemoveRescan => ControllerSpec::PciRemoveRescan { bdf: bdf()? },
        LinkReset::SlotPower | LinkReset::PortPull | LinkReset::Perst => return Err(not_on_host(reset)),
    })
}

fn not_on_host(reset: LinkReset) -> CannotReset {
    CannotReset(format!("{}: not a reset a host runs on itself (it needs a slot's power or a hot-plug module)", reset.reset_kind()))
}

impl Reset {
    /// Finds the controller and opens the link controller for it (its checks: the sysfs
    /// files, root, a subsystem reset the controller has).
    pub(crate) fn open(listed: &str, reset: LinkReset) -> Result<Reset, CannotReset> {
        let spec = spec_for(listed, reset)?;
        let env = ControlEnv { settle_timeout: SETTLE, ..ControlEnv::default() };
        let link = LinuxLink::open(&spec, &env).map_err(|e| CannotReset(e.to_string()))?;
        let port = link.ports().first().map(|p| p.port.clone()).unwrap_or_default();
        Ok(Reset { link, port, reset })
    }

    /// Runs the reset, holding a down phase for `hold`.
    pub(crate) fn run(&mut self, hold: Duration) -> ResetReport {
        let t0 = Instant::now();
        let r = self.link.reset(&self.port, self.reset.reset_kind(), hold);
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
        let e = spec_for("nbd+unix:///A?socket=/tmp/x.sock", LinkReset::NvmeController).unwrap_err().0;
        assert_eq!(
            e,
            "nvme-controller-reset: nbd+unix:///A?socket=/tmp/x.sock is an NBD export, with no NVMe controller or PCI function on this host to reset"
        );
        let f = std::env::temp_dir().join(format!("faultline-reset-{}", std::process::id()));
        std::fs::write(&f, b"x").unwrap();
        let e = spec_for(f.to_str().unwrap(), LinkReset::PciFunctionFlr).unwrap_err().0;
        let _ = std::fs::remove_file(&f);
        assert!(e.starts_with("pci-function-reset(flr): ") && e.contains("regular file"), "{e}");
    }

    #[test]
    fn every_reset_a_host_can_run_goes_to_the_wire_and_back() {
        for r in [
            LinkReset::NvmeController,
            LinkReset::NvmeSubsystem,
            LinkReset::PciFunction,
            LinkReset::PciFunctionFlr,
            LinkReset::PciFunctionBus,
            LinkReset::PciFunctionPm,
            LinkReset::PciRemoveRescan,
        ] {
            assert_eq!(LinkReset::of(r.reset_kind()), r);
            assert!(r.on_host(), "{r:?}");
        }
        for r in [LinkReset::SlotPower, LinkReset::PortPull, LinkReset::Perst] {
            assert_eq!(LinkReset::of(r.reset_kind()), r);
            assert!(!r.on_host(), "{r:?}");
            let e = spec_for("/dev/nvme0n1", r).unwrap_err().0;
            assert!(e.contains("not a reset a host runs on itself"), "{e}");
        }
    }
}
