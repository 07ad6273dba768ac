//! The QEMU lab (docs/LAB.md): faultline inside a QEMU guest against the real Linux NVMe
//! driver, on an emulated dual-port drive. Everything but the command line is here; the
//! `faultline lab` command (`bin/faultline/cmd/lab/`) parses arguments, calls these, prints
//! and chooses exit codes.
//! - [`setup`]: the cache (QEMU, a Debian kernel, busybox, nvme-cli from Debian's archive),
//!   with [`initramfs`] the guest's archive and [`vmlinux`] the kernel unpacked for a PVH boot;
//!   `init.sh` is the guest's init;
//! - [`session`]: one machine's host side prepared (run directory, share, drive), the guest's
//!   command script, the boot, the run directory brought back;
//! - [`machine`]: QEMU (q35, TCG) with the dual-port NVM subsystem, the 9p share, the guest's
//!   port requests carried out over [`qmp`];
//! - [`sim`]: the simulated drive over NBD ([`crate::sim_nbd`]) with its Quarch rig (and a USB
//!   board's), and its ground truth after each cycle;
//! - [`reconcile`]: the guest's findings scored against that ground truth, sector by sector,
//!   each sector held to what the guest could prove;
//! - [`guest`]: what runs inside (the drive found in sysfs, the scenario made the lab's, the
//!   ground-truth requests);
//! - [`host`]: one guest as a host of a run across hosts (QEMU with its agent on a
//!   virtio-serial port: the transport);
//! - [`usb`]: the USB boards, each device's firmware beside its gadget I/O, and the bridge that
//!   puts a board on the guest's bus;
//! - [`error`]: what the lab's errors share.

pub mod error;
pub mod guest;
pub mod host;
pub mod initramfs;
pub mod machine;
pub mod pi_namespaces;
pub mod qmp;
pub mod reconcile;
pub mod session;
pub mod setup;
pub mod sim;
pub mod usb;
pub mod vmlinux;
