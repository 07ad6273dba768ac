//! Why a call to the device under test failed, each with its cause kept as the source: the
//! drivers' errors finding and opening a device, the agent's session for a port on another
//! host, the simulated drive's file.
//!
//! Each message says what it is about in full, its source's text included (the binary prints
//! a cause once however many errors carry it).

use crate::remote::coordinator::cycle::CycleError;
use crate::remote::coordinator::session::{DialError, TransportError};
use crate::remote::coordinator::verify::PrefillFailed;
pub use crate::runner::shared::{Cause, Shared};
use faultline_drivers::blockdev::{FindError, EXPECT_FLAGS};
use faultline_drivers::passthru::SeveralControllers;
use std::path::PathBuf;

/// A call to the device under test that failed.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DutError {
    /// The device is not open (it went away in a fault and has not come back): its path or NBD
    /// URI.
    #[error("{} is not open (it did not come back)", .0.display())]
    NotOpen(PathBuf),
    /// The device went away and could not be had again, for `0`.
    #[error("{0} is not open (it did not come back)")]
    NotBack(#[source] Cause),
    /// A port on another host is not open: its session was lost.
    #[error("{target} (through {host}): {source} is not open (it did not come back)")]
    Lost { target: String, host: String, source: Cause },
    /// The device did not answer within the readiness timeout; `last`: the last failure seen.
    #[error("the device did not answer a read within {timeout_s} s after the fault: {last}")]
    NotReady {
        timeout_s: u64,
        #[source]
        last: Cause,
    },
    /// The target's identity found no device to use at the start of the run.
    #[error("target: {}", scenario_words(.0))]
    Find(#[source] Shared<FindError>),
    /// The device was found and could not be opened.
    #[error("{0}")]
    Open(#[source] Shared<faultline_drivers::OpenError>),
    /// A format sent after a format cut short failed, or this device cannot take one.
    #[error("the format after a format cut short: {0}")]
    Reformat(String),
    /// The run formats the namespace, and this device cannot be formatted.
    #[error("cut.kind = \"during_format\": {0}")]
    Format(#[source] Shared<faultline_drivers::formatting::FormatOpenError>),
    /// The target's identity names one namespace with several paths, and nothing says which
    /// one the run goes through.
    #[error(
        "target: {expect} matches {} paths of one namespace ({}): the identity cannot tell them apart; name the path the run goes \
         through with target.path (e.g. {}) or by its controller, with target.cntlid, target.pci_address or target.controller{}",
        .paths.len(),
        .paths.join("; "),
        .first.display(),
        .cntlid.map_or(String::new(), |c| format!(" (e.g. cntlid = {c})"))
    )]
    Paths { expect: String, paths: Vec<String>, first: PathBuf, cntlid: Option<u16> },
    /// The target's identity matches more than one device, and nothing says which one the run
    /// is about: a harness error (a scenario to fix), never a finding about the drive.
    #[error(
        "the target is ambiguous: {}; give target.path, or target.cntlid / pci_address / controller (with the identity), to name \
         the one device the run is about",
        .0
    )]
    Ambiguous(#[source] Ambiguity),
    /// The transport command of a port on another host cannot be run.
    #[error("target.transport: {0}")]
    Transport(#[source] TransportError),
    /// A port on another host: its agent could not be dialled, or did not open the target.
    #[error("{0}")]
    Dial(#[source] Shared<DialError>),
    /// A port on another host: its cycle failed.
    #[error("{0}")]
    Cycle(#[source] Shared<CycleError>),
    /// A port on another host: its agent could not write the prefill.
    #[error("{target} (through {host}): {source}")]
    Prefill { target: String, host: String, source: PrefillFailed },
    /// A prefill asked of a span the run's header does not hold.
    #[error("the prefill of bytes {start}..{end}: the run's header says {header_start}..{header_end}")]
    PrefillSpan { start: u64, end: u64, header_start: u64, header_end: u64 },
    /// The agent's copy of the ledger is not the run's history.
    #[error(
        "{}: the ledger file holds {held} records, the run's history {want}: the agent cannot verify against the run's history",
        .file.display()
    )]
    History { file: PathBuf, held: u64, want: u64 },
    /// A call a port on another host does not carry yet.
    #[error("{what} of a port on another host ({host}) is not carried by the agent protocol yet")]
    Unsupported { what: &'static str, host: String },
    /// A target on another host: its agent could not be reached within the timeout (the host
    /// is down, or the transport fails). Inconclusive, and never a finding about the drive,
    /// which nobody could ask.
    #[error("{host}: its agent did not answer within {timeout_s} s (the host is down or unreachable): {source}")]
    HostGone { host: String, timeout_s: u64, source: Shared<DutError> },
    /// Saving the simulated drive's state failed.
    #[error("cannot save the simulated drive: {0}")]
    Persist(#[source] Shared<std::io::Error>),
    /// A thread that opened a port panicked (`0`: what it was doing).
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// The ports of a multi-port run could not be opened.
    #[error("{0}")]
    Ports(#[source] Cause),
}

/// What matches more than one device.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Ambiguity {
    /// The identity (and path) matches several namespaces or paths.
    #[error("{}", scenario_words(.0))]
    Identity(#[source] Shared<FindError>),
    /// The path names several NVMe controllers.
    #[error("{0}")]
    Controllers(#[source] Shared<SeveralControllers>),
}

/// A refusal as a scenario's reader needs it: the fields to add are the scenario's, not the
/// command line's flags.
pub(super) fn scenario_words(e: &FindError) -> String {
    e.to_string()
        .replace(EXPECT_FLAGS, "target.serial, target.wwid, target.model, target.size_bytes (the size tells a disk from its partitions)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_save_that_failed_keeps_the_io_error() {
        let e = DutError::Persist(Shared::new(std::io::Error::from(std::io::ErrorKind::StorageFull)));
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the io error");
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
        assert!(e.to_string().starts_with("cannot save the simulated drive: "), "{e}");
    }

    #[test]
    fn a_host_gone_keeps_why_it_could_not_be_dialled() {
        let dial = DutError::Transport(TransportError::Empty);
        let e = DutError::HostGone { host: "host-a".into(), timeout_s: 1, source: Shared::new(dial) };
        assert!(e.to_string().starts_with("host-a: its agent did not answer within 1 s (the host is down or unreachable): "), "{e}");
        let inner = e.source().and_then(|s| s.downcast_ref::<DutError>()).expect("the dial's error");
        assert!(matches!(inner, DutError::Transport(TransportError::Empty)));
        assert!(inner.source().is_some_and(|s| s.is::<TransportError>()));
    }

    #[test]
    fn a_readiness_timeout_keeps_the_last_failure() {
        let last = Cause::of(faultline_drivers::IoFailure::new(libc::ENODEV, "read of 0: the device is gone"));
        let e = DutError::NotReady { timeout_s: 30, last };
        assert!(e.source().is_some_and(|s| s.is::<faultline_drivers::IoFailure>()), "{e:?}");
    }
}
