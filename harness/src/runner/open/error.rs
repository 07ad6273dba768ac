//! Why a run could not be opened. Each error names the port, the file or the step, and
//! carries its cause. Nothing is recorded of a run that did not open: a new run records a
//! harness error, a resumed one can be taken up again once the cause is fixed.

use crate::run::RunError;
use crate::runner::dut::{DutCycleError, DutError};
use crate::runner::fault::ControllerError;
use crate::scenario::ScenarioError;
use crate::workload::WorkloadError;
use faultline_drivers::{LinkError, OpenError as DeviceOpenError};
use std::path::PathBuf;

/// A declared atomic write unit smaller than the device's sector.
#[derive(Debug, thiserror::Error)]
#[error("target.atomic_bytes {declared} is below the device's {sector}-byte logical sector: a drive cannot promise less than a sector")]
pub struct AtomicBelowSector {
    pub declared: u64,
    pub sector: u64,
}

/// Why the ports of a dual-port drive, or the controller of its fault, could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenPortsError {
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
    Open { port: String, source: DeviceOpenError },
    #[error(
        "port {port} ({}): {capacity} bytes in {sector}-byte sectors, but port A has {first_capacity} in {first_sector}: the \
         ports do not reach one namespace",
        path.display()
    )]
    Namespace { port: String, path: PathBuf, capacity: u64, sector: u32, first_capacity: u64, first_sector: u32 },
    #[error(transparent)]
    Atomic(#[from] AtomicBelowSector),
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

/// `port X: ` for a port of a dual-port run; nothing for a one-port run's port A.
fn on(port: &Option<String>) -> String {
    port.as_ref().map_or_else(String::new, |p| format!("port {p}: "))
}

/// Why a run could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{} already holds a run: `faultline resume {}` continues it", .dir.display(), .run_dir.display())]
    Begun { dir: PathBuf, run_dir: PathBuf },
    #[error(
        "a dual-port performance run cannot be resumed: its phases are measured back to back; start it again in a new run \
         directory"
    )]
    PerformanceResume,
    #[error("the simulated drive: {0}")]
    Sim(std::io::Error),
    #[error(transparent)]
    Dut(#[from] DutError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// Boxed: the drivers' errors a port's controller keeps make it large.
    #[error(transparent)]
    Ports(Box<OpenPortsError>),
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error(transparent)]
    Atomic(#[from] AtomicBelowSector),
    #[error("port {port}: its share {percent:?} of the span: {source}")]
    Share { port: String, percent: [u8; 2], source: WorkloadError },
    #[error("{}{source}", on(port))]
    Target { port: Option<String>, source: DutError },
    #[error("{}{source}", on(port))]
    Run { port: Option<String>, source: RunError },
    #[error(
        "{}: {}workload differs from the scenario's ({ledger} in its ledger): the scenario file was changed",
        .dir.display(), on(port)
    )]
    Workload { dir: PathBuf, port: Option<String>, ledger: String },
    #[error("{}prefill: {source}", on(port))]
    Prefill { port: Option<String>, source: DutCycleError },
    #[error(
        "{}workload.ops asks for {op}, which the target {identity} does not carry (its engine, or the device, offers no {op}): take {op} out of workload.ops, or run on a target that carries it",
        on(port)
    )]
    Zeroing { port: Option<String>, identity: String, op: &'static str },
    #[error(
        "{}cut.kind = \"during_format\" formats the whole namespace, but {source}: run it on a whole NVMe namespace (a block device or its generic device) or a simulated drive, with the workload's span all of it",
        on(port)
    )]
    Format { port: Option<String>, source: FormatRefusal },
}

/// Why a run that formats cannot format its target.
#[derive(Debug, thiserror::Error)]
pub enum FormatRefusal {
    #[error("the target {identity} does not carry one (not an NVMe namespace faultline can format)")]
    NotCarried { identity: String },
    #[error("the span [{start}, {end}) is not the whole target (its {capacity} bytes)")]
    PartSpan { start: u64, end: u64, capacity: u64 },
}

impl From<OpenPortsError> for OpenError {
    fn from(e: OpenPortsError) -> Self {
        OpenError::Ports(Box::new(e))
    }
}
