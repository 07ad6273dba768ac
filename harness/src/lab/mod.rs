//! The QEMU lab's parts that need no boot (docs/LAB.md). The `faultline lab` command
//! (`bin/faultline/cmd/lab/`) boots the machine, carries out the rig's calls and does the
//! gadgets' I/O; what it concludes from a run, and what its USB boards say and answer, lives
//! here, so it is tested without a guest:
//! - [`reconcile`]: the guest's findings scored against the lab drive's ground truth, sector
//!   by sector, each sector held to what the guest could prove;
//! - [`ffs`]: FunctionFS's descriptor blobs and `ep0` events, for the lab's USB gadgets;
//! - [`ch340`]: the lab CH340's descriptors and its answers to `ch341`'s vendor requests;
//! - [`hid_relay`]: the lab HID relay board's descriptors and firmware (its reports, its latch);
//! - [`quarch_usb`]: the lab Quarch module's descriptors and USB firmware, between its bulk
//!   endpoints and its command processor (the host's emulator);
//! - [`usb_fault`]: the USB faults the boards can be told to show.

pub mod ch340;
pub mod ffs;
pub mod hid_relay;
pub mod quarch_usb;
pub mod reconcile;
pub mod usb_fault;
