//! What the binary supplies to a run.

use faultline_drivers::control::ControlEnv;
use std::path::PathBuf;

/// What the binary supplies: the run id and the wall clock (the harness has none).
pub struct RunnerOptions {
    pub run_id: u64,
    /// Wall-clock start of the run, RFC 3339.
    pub started_at: String,
    /// Wall-clock timestamps for the ledger's cycle records.
    pub clock: fn() -> String,
    /// Where controllers find the machine, and their timeouts.
    pub control_env: ControlEnv,
    /// This faultline binary, for a transport that starts an agent on this machine
    /// (`{faultline}` in `[[ports]] transport`); `None` where there is none (library tests).
    pub faultline_exe: Option<PathBuf>,
}
