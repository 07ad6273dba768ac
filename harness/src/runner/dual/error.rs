//! Why a dual-port run could not go on. Each error names the port, the file or the step, and
//! carries its cause; what the run had recorded stays recorded (the runner emits the error
//! and ends the run).

use crate::run::RunError;
use crate::runner::dut::{DutCycleError, DutError};
use crate::runner::fault::ControllerError;
use crate::runner::setup::SetupError;
use crate::scenario::ScenarioError;
use crate::workload::WorkloadError;
use faultline_drivers::blockdev::FindError;
use faultline_drivers::{LinkError, OpenError};
use std::path::PathBuf;

/// Why the ports of a dual-port drive, or the controller of its fault, could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenPortsError {
    #[error("target.sim.dual: the simulated drive is single-port")]
    SingleSim,
    #[error("the simulated dual-port drive: {0}")]
    Sim(std::io::Error),
    #[error("cannot start the Quarch hot-plug emulator: {0}")]
    Emulator(std::io::Error),
    #[error("{0}")]
    Controller(ControllerError),
    #[error("the Quarch hot-plug module opened without a link controller")]
    NoLink,
    /// The link controller cannot fault a port the scenario lists.
    #[error("port {port}: {source}")]
    Require { port: String, source: LinkError },
    #[error("the simulated dual-port drive is faulted by controllers.link = \"sim\" or its power switch")]
    Fault,
    #[error("port {0}: no path")]
    NoPath(String),
    #[error("port {port}: {source}")]
    Open { port: String, source: OpenError },
    #[error(
        "port {port} ({}): {capacity} bytes in {sector}-byte sectors, but port A has {first_capacity} in {first_sector}: the \
         ports do not reach one namespace",
        path.display()
    )]
    Namespace { port: String, path: PathBuf, capacity: u64, sector: u32, first_capacity: u64, first_sector: u32 },
    #[error(transparent)]
    Atomic { source: SetupError },
    #[error("no ports")]
    NoPorts,
    #[error("target.host {0}: a dual-port run with ports on other hosts is not supported yet")]
    Remote(String),
    #[error("port {port}: {source}")]
    NotOpen { port: String, source: DutError },
    /// A port on another host could not be served or reached.
    #[error("port {port} (on {host}): {why}")]
    Served { port: String, host: String, why: String },
}

/// Why a dual-port port's device could not be opened again at its path, or found again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReopenPortError {
    #[error("{0}")]
    Open(OpenError),
    #[error("port {port}: {} is now {found}, not the run's {want}", path.display())]
    Other { port: String, path: PathBuf, found: String, want: String },
    #[error("{at_path}; port {port} not found again by its path ({want}): {source}")]
    NotFound { at_path: Box<ReopenPortError>, port: String, want: String, source: Box<FindError> },
}

pub(crate) use crate::runner::writers::WriterError;

/// Why a performance run's measurements ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PerfError {
    #[error("performance, {phase}, port {port}: {source}")]
    Write { phase: String, port: String, source: Box<WriterError> },
    #[error("performance, reads, port {port}: {source}")]
    Read { port: String, source: DutError },
}

/// Why a dual-port run ended early with a harness error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DualRunError {
    #[error(
        "a dual-port performance run cannot be resumed: its phases are measured back to back; start it again in a new run \
         directory"
    )]
    PerformanceResume,
    #[error(
        "a run with ports on other hosts is not resumed yet: the simulated drive they reach over NBD is saved only at the run's end, \
         so after the harness died its state may be older than the ledger (a false finding); start a new run"
    )]
    RemoteResume,
    /// Boxed: the drivers' errors a port's controller keeps make it large.
    #[error(transparent)]
    Open(Box<OpenPortsError>),
    #[error("{0}")]
    Layout(ScenarioError),
    #[error("port {port}: its share {percent:?} of the span: {source}")]
    Share { port: String, percent: [u8; 2], source: WorkloadError },
    #[error("port {port}: {source}")]
    Target { port: String, source: DutError },
    #[error("{} already holds a run: `faultline resume {}` continues it", .dir.display(), .run_dir.display())]
    Begun { dir: PathBuf, run_dir: PathBuf },
    #[error("port {port}: {source}")]
    Run { port: String, source: RunError },
    #[error(
        "{}: port {port}'s workload differs from the scenario's ({ledger} in its ledger): the scenario file was changed",
        .dir.display()
    )]
    Workload { dir: PathBuf, port: String, ledger: String },
    #[error("port {port}: prefill: {source}")]
    Prefill { port: String, source: DutCycleError },
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error(transparent)]
    Verify(#[from] crate::runner::lane::ShareCheckError),
    #[error(transparent)]
    Cycle(#[from] crate::runner::cycle::Fatal),
}

impl From<OpenPortsError> for DualRunError {
    fn from(e: OpenPortsError) -> Self {
        DualRunError::Open(Box::new(e))
    }
}
