//! faultline's boundary with the outside world.
//!
//! Everything that performs I/O on a device, or talks to a power or link controller, lives
//! here behind small traits: [`block::BlockTarget`] for the drive under test,
//! [`power::PowerSwitch`] for what cuts its power and [`link::LinkController`] for what resets
//! its links. The harness crate holds the logic (workload,
//! ledger, verifier) and reaches devices only through these traits, so the simulated drive in
//! `faultline-fixtures` and the real engines are interchangeable. [`nvme`] reads a drive's
//! health logs and identity through the NVMe admin passthrough ioctl.
//!
//! Invariant: nothing here knows the on-disk block format, the ledger or the contracts. A
//! target moves bytes and reports what the device said; it never decides what a result means.

pub mod block;
pub mod blockdev;
pub mod control;
#[cfg(test)]
mod fake_root;
pub mod formatting;
pub mod guard;
pub mod identity;
pub mod latency;
pub mod link;
pub mod nbd;
pub mod nvme;
pub mod open;
pub mod passthru;
pub mod power;
pub mod sharded;
pub mod sync;
mod sys;
pub mod uring;
#[cfg(test)]
mod zero_check;

pub use block::{
    AlignedBuf, BlockTarget, Completion, DeallocReads, Geometry, IoFailure, Op, ReadTicket, TargetError, Zeroing, ZeroingSupport,
};
pub use latency::{LatencyHistogram, LatencySummary};
pub use link::{LinkController, LinkError, PciResetMethod, PortCaps, ResetKind};
pub use open::{open_target, Engine, OpenError, OpenSpec, Opened};
pub use power::{PowerCaps, PowerError, PowerShape, PowerState, PowerSwitch};
pub use sys::{available_bytes, kill_process_group, monotonic_ns, set_cloexec};
