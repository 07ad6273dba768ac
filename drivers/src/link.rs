//! The link-controller interface: whatever resets or pulls the drive's PCIe/NVMe link while its
//! power stays on (NVMe controller and subsystem resets, PCI function resets, remove and
//! rescan, slot power, a hot-plug module pulling one port of a dual-port drive).
//!
//! Like power switches, link controllers declare up front, per port, which resets they can do;
//! [`LinkController::require`] refuses a scenario before a run starts instead of failing on
//! the first reset at 3 am.

use std::fmt;
use std::time::Duration;

/// How a PCI function is reset (the kernel's `reset_method` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PciResetMethod {
    /// Function-level reset.
    Flr,
    /// Secondary bus reset through the upstream bridge.
    Bus,
    /// D3hot -> D0 power-management reset.
    Pm,
}

impl PciResetMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            PciResetMethod::Flr => "flr",
            PciResetMethod::Bus => "bus",
            PciResetMethod::Pm => "pm",
        }
    }

    pub fn parse(s: &str) -> Option<PciResetMethod> {
        match s {
            "flr" => Some(PciResetMethod::Flr),
            "bus" => Some(PciResetMethod::Bus),
            "pm" => Some(PciResetMethod::Pm),
            _ => None,
        }
    }
}

/// One kind of link disturbance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResetKind {
    /// NVMe controller reset (`reset_controller` in sysfs).
    NvmeController,
    /// NVM subsystem reset (`NVME_IOCTL_SUBSYS_RESET`): every controller of the subsystem.
    NvmeSubsystem,
    /// PCI function reset; `None` lets the kernel pick its method.
    PciFunction(Option<PciResetMethod>),
    /// Remove the PCI function, wait, rescan the bus.
    PciRemoveRescan,
    /// Slot power off, wait, on (pciehp).
    SlotPower,
    /// A hot-plug module disconnects one port's signals, waits, reconnects them.
    PortPull,
    /// A hot-plug module holds PERST# asserted, waits, releases it.
    Perst,
}

impl fmt::Display for ResetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResetKind::NvmeController => f.write_str("nvme-controller-reset"),
            ResetKind::NvmeSubsystem => f.write_str("nvme-subsystem-reset"),
            ResetKind::PciFunction(None) => f.write_str("pci-function-reset"),
            ResetKind::PciFunction(Some(m)) => write!(f, "pci-function-reset({})", m.as_str()),
            ResetKind::PciRemoveRescan => f.write_str("pci-remove-rescan"),
            ResetKind::SlotPower => f.write_str("pci-slot-power-cycle"),
            ResetKind::PortPull => f.write_str("port-pull"),
            ResetKind::Perst => f.write_str("perst"),
        }
    }
}

/// The resets one port supports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortCaps {
    /// The port's name as the controller knows it (`nvme0`, `0000:3b:00.0`, `A`, `B`).
    pub port: String,
    pub kinds: Vec<ResetKind>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("link controller {controller}: {command}: {reason}")]
    Failed { controller: String, command: String, reason: String },
    #[error("link controller {controller} cannot do {kind} on port {port} (it can: {supported})")]
    Unsupported { controller: String, port: String, kind: ResetKind, supported: String },
}

/// Resets or disconnects a drive's link, per port.
pub trait LinkController {
    /// The spec or name the user gave this controller.
    fn name(&self) -> String;
    /// Every port and what can be done to it.
    fn ports(&self) -> Vec<PortCaps>;
    /// Performs one reset of `kind` on `port`. `hold` is how long the link stays down for the
    /// kinds that have a down phase (port pull, PERST#, slot power, remove and rescan); the
    /// others ignore it. Returns once the controller reports the reset done.
    fn reset(&mut self, port: &str, kind: ResetKind, hold: Duration) -> Result<(), LinkError>;

    /// What the controller noted since the last call beyond success or failure (a reset the
    /// kernel called failed that happened all the same), for the run's log.
    fn take_log(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// Refuses, before a run, a reset the controller cannot do.
    fn require(&self, port: &str, kind: ResetKind) -> Result<(), LinkError> {
        let ports = self.ports();
        let found = ports.iter().find(|p| p.port == port);
        if found.is_some_and(|p| p.kinds.contains(&kind)) {
            return Ok(());
        }
        let supported = ports
            .iter()
            .map(|p| format!("{}: {}", p.port, p.kinds.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        let supported = if supported.is_empty() { "nothing".to_string() } else { supported };
        Err(LinkError::Unsupported { controller: self.name(), port: port.to_string(), kind, supported })
    }
}
