//! faultline's harness: the sector format, the workload, the ledger, the writer and the
//! verifier, scenarios and their plans, the cycle runner, the event stream and its reports,
//! and the detection matrix. The `faultline` binary (`src/bin/faultline/`) wires it to the
//! command line.
//!
//! Invariants (ARCHITECTURE.md has the rest):
//! - no `unsafe` here (the workspace lints deny it; the drivers' syscall modules hold it all);
//! - no wall clock and no OS randomness: the binary supplies run ids, seeds and timestamps;
//! - no clap, anyhow or exit codes: functions return typed errors and verdicts;
//! - hardware is reached only through the drivers crate's traits and openers, a device under
//!   test only through [`runner::dut::Dut`];
//! - a finding is data, never an error; every fact a run reports is an [`events::Event`].

pub mod events;
pub mod format;
pub mod health;
pub mod lab;
pub mod ledger;
pub mod metrics;
pub mod pcie;
pub mod pel;
pub mod port;
pub mod remote;
pub mod report;
pub mod reset;
pub mod rng;
pub mod run;
pub mod run_dir;
pub mod runner;
pub mod scenario;
pub mod sector_sums;
pub mod selftest;
pub mod sim_nbd;
pub mod transport;
pub mod verify;
pub mod workload;
pub mod writer;
