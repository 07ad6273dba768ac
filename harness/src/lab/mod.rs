//! The QEMU lab's parts that need no boot (docs/LAB.md). The `faultline lab` command
//! (`bin/faultline/cmd/lab/`) boots the machine and carries out the rig's calls; what it
//! concludes from a run lives here, so it is tested without a guest:
//! - [`reconcile`]: the guest's findings scored against the lab drive's ground truth, sector
//!   by sector, each sector held to what the guest could prove;
//! - [`hid_relay`]: the lab HID relay board's firmware (its reports and its latch);
//! - [`quarch_usb`]: the lab Quarch module's USB firmware, between its bulk endpoints and its
//!   command processor (the host's emulator).

pub mod hid_relay;
pub mod quarch_usb;
pub mod reconcile;
