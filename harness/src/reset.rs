//! The kinds of link reset, named once for the whole harness: the scenario, the plan, the
//! cutter and the agents' wire all use [`LinkReset`].

use faultline_drivers::{PciResetMethod, ResetKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The one enum of reset kinds: a scenario's `fault.reset` and the agents' wire name it; the
// drivers' `ResetKind` is the mechanism that runs it. (Its doc line is the scenario schema's.)
/// One kind of link reset (`faultline_drivers::ResetKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LinkReset {
    /// NVMe controller reset.
    NvmeController,
    /// NVM subsystem reset: every controller of the subsystem (both ports of a dual-port drive).
    NvmeSubsystem,
    /// PCI function reset, method chosen by the kernel.
    PciFunction,
    /// PCI function-level reset.
    PciFunctionFlr,
    /// PCI secondary bus reset.
    PciFunctionBus,
    /// PCI power-management (D3hot to D0) reset.
    PciFunctionPm,
    /// Remove the PCI function, wait, rescan.
    PciRemoveRescan,
    /// Slot power off, wait, on.
    SlotPower,
    /// A hot-plug module disconnects the port's signals, waits, reconnects them.
    PortPull,
    /// A hot-plug module holds PERST# asserted, waits, releases it.
    Perst,
}

impl LinkReset {
    pub fn reset_kind(self) -> ResetKind {
        match self {
            LinkReset::NvmeController => ResetKind::NvmeController,
            LinkReset::NvmeSubsystem => ResetKind::NvmeSubsystem,
            LinkReset::PciFunction => ResetKind::PciFunction(None),
            LinkReset::PciFunctionFlr => ResetKind::PciFunction(Some(PciResetMethod::Flr)),
            LinkReset::PciFunctionBus => ResetKind::PciFunction(Some(PciResetMethod::Bus)),
            LinkReset::PciFunctionPm => ResetKind::PciFunction(Some(PciResetMethod::Pm)),
            LinkReset::PciRemoveRescan => ResetKind::PciRemoveRescan,
            LinkReset::SlotPower => ResetKind::SlotPower,
            LinkReset::PortPull => ResetKind::PortPull,
            LinkReset::Perst => ResetKind::Perst,
        }
    }

    /// The name for `kind`: every kind the drivers run has one.
    pub fn of(kind: ResetKind) -> LinkReset {
        match kind {
            ResetKind::NvmeController => LinkReset::NvmeController,
            ResetKind::NvmeSubsystem => LinkReset::NvmeSubsystem,
            ResetKind::PciFunction(None) => LinkReset::PciFunction,
            ResetKind::PciFunction(Some(PciResetMethod::Flr)) => LinkReset::PciFunctionFlr,
            ResetKind::PciFunction(Some(PciResetMethod::Bus)) => LinkReset::PciFunctionBus,
            ResetKind::PciFunction(Some(PciResetMethod::Pm)) => LinkReset::PciFunctionPm,
            ResetKind::PciRemoveRescan => LinkReset::PciRemoveRescan,
            ResetKind::SlotPower => LinkReset::SlotPower,
            ResetKind::PortPull => LinkReset::PortPull,
            ResetKind::Perst => LinkReset::Perst,
        }
    }

    /// Whether a host's agent can run this reset on itself, of the controller or PCI function
    /// behind its own target (a slot's power, a hot-plug module's pull and PERST# need
    /// something outside the host).
    pub fn on_host(self) -> bool {
        !matches!(self, LinkReset::SlotPower | LinkReset::PortPull | LinkReset::Perst)
    }
}
