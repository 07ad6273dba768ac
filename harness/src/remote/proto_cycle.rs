//! The frames of one cycle on an agent's port: what the coordinator asks ([`CycleRequest`],
//! its reset) and what the agent's writer counted ([`CycleSummary`]).

use super::LinkReset;
use crate::ledger::{EndKind, RunHeader};
use crate::port::PortId;
use crate::writer::{CutPlacement, CycleOutcome, ZeroingDone};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One cycle on an agent's port: the run (its header gives the workload, the sector format
/// and the contract) and the cycle's options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleRequest {
    pub header: RunHeader,
    pub cycle: u32,
    pub first_id: u64,
    pub started_at: String,
    pub port: PortId,
    pub max_writes: Option<u64>,
    pub duration_ms: Option<u64>,
    /// Where the writer asks for the cut (`cut_due`); `None`: the cycle ends gracefully.
    pub cut: Option<CutPlacement>,
    /// How often the agent streams what is durable (a checkpoint record).
    pub stream_every_ms: u64,
    pub drain_timeout_ms: u64,
    /// Stream every write completion (`samples` frames): a dual-port run's windows judge the
    /// port by them.
    #[serde(default)]
    pub samples: bool,
    /// A link reset the agent runs on its own host once the coordinator says the cut is done
    /// (`cut_done`), with the writer's queue full: the cycle's fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetRequest>,
}

/// A cycle's reset: which, and how long a reset with a down phase (remove and rescan) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetRequest {
    /// A kind a host runs on itself ([`LinkReset::on_host`]); the agent refuses any other.
    pub reset: LinkReset,
    pub hold_ms: u64,
}

/// What an agent's reset did: the controller it reset (as a link controller spec names it),
/// how long the reset took, why it failed, and what the controller noted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResetReport {
    pub controller: String,
    pub took_ns: u64,
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
}

/// What a cycle did, as the agent's writer counted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleSummary {
    pub end: Option<EndKind>,
    pub submitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub flushes: u64,
    pub bytes_written: u64,
    pub submitted_end: u64,
    pub in_flight_at_cut: u32,
    pub bytes_at_risk: u64,
    /// The cut hook's call and the cycle's end, from the cycle's start, on the agent's
    /// monotonic clock (`started_ns` is that start).
    pub started_ns: u64,
    pub cut_at_ns: Option<u64>,
    pub elapsed_ns: u64,
    pub device_lost: Option<String>,
    pub final_flush_failed: bool,
    /// Completions before the cut, and whether a flush was in flight then.
    pub completed_at_cut: u64,
    pub flush_outstanding_at_cut: bool,
    /// When the first operation failed after the cut, from the cycle's start.
    pub device_gone_at_ns: Option<u64>,
    /// The longest the port went without a completion before the cut.
    pub max_completion_gap_ns: Option<u64>,
    /// When a graceful cycle's writes had all come back, before its closing flush.
    pub drained_at_ns: Option<u64>,
    /// Write latency: [p50, p99, max] in ns and how many completed.
    pub write_latency: Option<[u64; 4]>,
    /// The deallocates and Write Zeroes among `completed` (absent: none).
    #[serde(default, skip_serializing_if = "ZeroingDone::is_empty")]
    pub zeroing: ZeroingDone,
    /// The reset the request asked for, as it ran (`None`: none was asked, or the cycle
    /// never reached its cut).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetReport>,
    /// With `samples`: each time a thread of the agent that only sleeps (2 ms at a time) woke
    /// late, `[t_ns, late_us]` (`t_ns` on the agent's clock): how long the agent's host kept it
    /// from running, which the coordinator does not charge to the drive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<[u64; 2]>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl CycleSummary {
    /// What the agent's writer counted, for the wire; `started_ns` is the cycle's start on
    /// the agent's clock.
    pub fn of(out: CycleOutcome, started_ns: u64) -> CycleSummary {
        CycleSummary {
            end: out.end,
            submitted: out.submitted,
            completed: out.completed,
            failed: out.failed,
            flushes: out.flushes,
            bytes_written: out.bytes_written,
            submitted_end: out.submitted_end,
            in_flight_at_cut: out.in_flight_at_cut,
            bytes_at_risk: out.bytes_at_risk,
            started_ns,
            cut_at_ns: out.cut_at.map(ns),
            elapsed_ns: ns(out.elapsed),
            device_lost: out.device_lost,
            final_flush_failed: out.final_flush_failed,
            completed_at_cut: out.completed_at_cut,
            flush_outstanding_at_cut: out.flush_outstanding_at_cut,
            device_gone_at_ns: out.device_gone_at.map(ns),
            max_completion_gap_ns: out.max_completion_gap.map(ns),
            drained_at_ns: out.drained_at.map(ns),
            write_latency: out.write_latency.map(|l| [l.p50_ns, l.p99_ns, l.max_ns, l.count]),
            zeroing: out.zeroing,
            reset: None,
            late: Vec::new(),
        }
    }
}

/// The coordinator's side: the agent's counts as the runner's outcome (durations from the
/// cycle's start, so no clock mapping is needed).
impl From<CycleSummary> for CycleOutcome {
    fn from(sum: CycleSummary) -> CycleOutcome {
        let ns = Duration::from_nanos;
        CycleOutcome {
            end: sum.end,
            submitted: sum.submitted,
            completed: sum.completed,
            failed: sum.failed,
            flushes: sum.flushes,
            bytes_written: sum.bytes_written,
            in_flight_at_cut: sum.in_flight_at_cut,
            bytes_at_risk: sum.bytes_at_risk,
            submitted_end: sum.submitted_end,
            elapsed: ns(sum.elapsed_ns),
            cut_at: sum.cut_at_ns.map(ns),
            device_lost: sum.device_lost,
            final_flush_failed: sum.final_flush_failed,
            completed_at_cut: sum.completed_at_cut,
            flush_outstanding_at_cut: sum.flush_outstanding_at_cut,
            device_gone_at: sum.device_gone_at_ns.map(ns),
            max_completion_gap: sum.max_completion_gap_ns.map(ns),
            drained_at: sum.drained_at_ns.map(ns),
            zeroing: sum.zeroing,
            write_latency: sum.write_latency.map(|[p50_ns, p99_ns, max_ns, count]| faultline_drivers::LatencySummary {
                p50_ns,
                p99_ns,
                max_ns,
                count,
            }),
        }
    }
}
