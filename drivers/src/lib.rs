//! faultline's boundary with the outside world.
//!
//! Everything that performs I/O on a device, or will talk to a power or link controller, lives
//! here behind small traits: [`block::BlockTarget`] for the drive under test and
//! [`power::PowerSwitch`] for what cuts its power. The harness crate holds the logic (workload,
//! ledger, verifier) and reaches devices only through these traits, so the simulated drive in
//! `faultline-fixtures` and the real engines are interchangeable.
//!
//! Invariant: nothing here knows the on-disk block format, the ledger or the contracts. A
//! target moves bytes and reports what the device said; it never decides what a result means.

pub mod block;
pub mod file;
pub mod power;

pub use block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, TargetError};
pub use file::FileTarget;
pub use power::{PowerCaps, PowerError, PowerState, PowerSwitch};
