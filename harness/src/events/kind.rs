//! What happened, by kind: each kind's own keys, without the envelope's (`t_ns`, `cycle`,
//! `port`, `host`; see [`super::Event`]).

use super::{HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::Finding;
use crate::writer::{WindowFigures, ZeroingDone};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What happened (the envelope, [`super::Event`], says when, in which cycle, on which port).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Unknown keys are refused: a damaged key must not pass as an event with a field left out.
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventKind {
    RunStarted {
        /// The run id, 16 hex digits (as the ledger and the sectors carry it).
        run_id: String,
        scenario: String,
        /// The stable identity of the target (serial, WWID, or the simulator's name).
        target: String,
        contract: Contract,
        cycles_planned: u32,
        seed: u64,
        /// Wall-clock start, RFC 3339, supplied by the binary (the harness has no clock).
        started_at: String,
    },
    CycleStarted {
        /// The cycle's fault, in a run that mixes faults (`power-cut`, `port-pull`, ...; the
        /// port a one-port fault hits is the cycle's `port_window` with `faulted`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<String>,
        /// How long this cycle's fault holds the power off or the link down, ms, in a run whose
        /// off time changes from cycle to cycle (`cycles.off_time_ms` a list or a range).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        off_time_ms: Option<u64>,
    },
    /// The cut command was issued (`t_ns` is when), with the queue as it stood.
    CutIssued {
        /// Writes completed before the cut.
        completions: u64,
        in_flight_ops: u32,
        /// Bytes of writes in flight: the data the contract lets the drive lose or keep.
        bytes_at_risk: u64,
        /// Workload phase: microseconds from the start of the cycle's workload to the cut.
        phase_us: u64,
        /// The cut time drawn for a `uniform_time` placement, ms after the workload started
        /// (absent for placements counted in completions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        planned_after_ms: Option<u64>,
        /// The pin-mate step the hot-plug fixture was set to for this cut, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mate_step_ms: Option<u32>,
        /// How long the cut command took to return, µs: the switch's exchange through every
        /// layer to the board, and its read-back where it has one (absent when the command
        /// failed, and in logs written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command_us: Option<u64>,
    },
    /// The device stopped answering (first failed operation after the cut).
    DeviceGone {},
    /// The power is back on after a power cut or clean shutdown. (Format 2 and older logs also
    /// called the end of a link reset this: it read as `power_restored` there.)
    PowerRestored {
        /// How long the power was off, µs: from the off command's return to the on command's
        /// start. The cycle's off time, or longer when the writers took longer to end after
        /// the cut (the power comes back only once their ports were let go). The switch's own
        /// release and operate times are not in it. Absent for a host's power, and in logs
        /// written before it was recorded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        off_us: Option<u64>,
    },
    /// The link fault is over (a controller, subsystem or PCI reset done, a removed function
    /// rescanned): the device was never powered off. Events format 3 and newer.
    LinkRestored {},
    /// The power was cut again while the drive recovered from the cycle's cut (the fault's
    /// `recovery`); a `power_restored` follows each.
    RecoveryCut {
        /// Which of the cycle's recovery cuts, from 1.
        n: u32,
        /// How long after the power came back (`ready` false) or after every port answered
        /// again (`ready` true) the off command was sent, µs.
        after_us: u64,
        /// Whether the drive had answered again before this cut (`at = "after_ready"`).
        ready: bool,
    },
    /// The device is back: time from power-on to enumeration and to the first good read.
    Ready {
        enumerate_us: Option<u64>,
        first_read_us: Option<u64>,
    },
    /// A controller's health logs after the fault, judged against its last reading.
    Health {
        smart: SmartFigures,
        anomalies: Vec<HealthNote>,
        /// The PCIe link (speed, width, AER totals) and CAP.TO, for a controller on PCIe.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pcie: Option<crate::pcie::PcieHealth>,
    },
    Verified {
        sectors: u64,
        bytes: u64,
        verify_ns: u64,
        /// Findings per class in this verification, including damage seen in earlier cycles.
        counts: BTreeMap<String, u64>,
    },
    /// A finding, emitted once, in the cycle where it first appeared.
    Finding {
        finding: Finding,
    },
    CycleEnded {
        verdict: Verdict,
        /// Writes the device acknowledged.
        writes_completed: u64,
        bytes_written: u64,
        /// Duration of the write phase (cycle start to the end of the drain).
        write_ns: u64,
        latency_p50_ns: Option<u64>,
        latency_p99_ns: Option<u64>,
        /// The slowest write completion of the cycle (absent in logs from before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        latency_max_ns: Option<u64>,
        /// The longest the port went without a write completing before the cut (absent in
        /// logs from before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_gap_ns: Option<u64>,
        /// Time the harness itself spent on the cycle: all of it less writing until the cut,
        /// controller commands, the off time, waiting for the device, health reads and
        /// verification (what is left: draining, saving, the ledger, events, bookkeeping).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        harness_ns: Option<u64>,
        /// The deallocates and Write Zeroes among `writes_completed` and the bytes they
        /// covered (absent: none, or a log from before they were counted).
        #[serde(default, skip_serializing_if = "ZeroingDone::is_empty")]
        zeroing: ZeroingDone,
    },
    HarnessError {
        message: String,
    },
    /// `faultline resume` took the run up again after the harness died (killed, or its host
    /// rebooted). `t_ns` goes on from the last event recorded; the time the harness was away
    /// is not known on the run clock (`resumed_at` is the wall clock).
    RunResumed {
        /// Wall clock, RFC 3339, supplied by the binary.
        resumed_at: String,
        /// Cycles that had ended before the harness died.
        cycles_ended: u32,
        /// The cycle the harness died in, finished now (its writes are verified; none of
        /// them counts as durable beyond what the ledger had recorded).
        interrupted_cycle: Option<u32>,
        /// The last event recorded before the harness died, by kind.
        last_event: String,
    },
    /// The stop policy (or a harness error) ended the run before its planned cycles.
    RunStopped {
        reason: String,
    },
    /// The run stopped without ending (the run directory ran short of space); `faultline
    /// resume` takes it up again.
    RunSuspended {
        reason: String,
    },
    /// Something the user should know that is neither a finding nor an error: the engine in
    /// use (a fallback, buffered I/O), health checks that cannot be made.
    Note {
        message: String,
    },
    /// What a controller exchanged (the commands an `exec:` switch ran, with their output).
    ControllerLog {
        lines: Vec<String>,
    },
    /// The audit log of a target on another host: every operation the coordinator sent its
    /// agent since the last such event, a line each (`HOST request N: OPERATION`, with how long
    /// before this event it was sent).
    AgentLog {
        lines: Vec<String>,
    },
    RunEnded {
        verdict: Verdict,
        exit_code: u8,
    },
    /// One port of a dual-port run around one cycle's fault: its baseline before the fault,
    /// the fault window (until the faulted port was back and ready, plus the settle time), the
    /// ratios it was judged by and a coarse series (bytes and the longest write per bucket,
    /// from the baseline's start to the port's last completion of the cycle).
    PortWindow {
        name: String,
        /// The fault hit this port (it is not judged).
        faulted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        baseline_t_ns: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault_t_ns: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window_end_t_ns: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        baseline: Option<WindowFigures>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<WindowFigures>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        throughput_ratio: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        p99_ratio: Option<f64>,
        /// A budget was breached (a `port_disturbance` finding says which).
        disturbed: bool,
        /// The longest the harness itself was kept from running in the baseline and fault
        /// windows, µs (here, or on the host of the agent that runs the port); past a fifth of
        /// the stall budget (at least 25 ms) the port is not judged (a note says so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        harness_late_us: Option<u64>,
        bucket_ms: u32,
        series_bytes: Vec<u64>,
        series_max_latency_us: Vec<u32>,
    },
    /// `dual.mode = "performance"`: one port's figures in one phase (`A only`, `B only`,
    /// `A+B`) of one workload (`write`: the scenario's; `seq-read-128k-qd1`).
    PortPerf {
        workload: String,
        phase: String,
        name: String,
        figures: WindowFigures,
    },
}

/// Whether a kind of event belongs to a cycle, and how its line says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleKey {
    /// Always in a cycle: the line's `cycle` is required.
    Always,
    /// Sometimes in a cycle: `cycle` is written when there is one.
    Optional,
    /// Sometimes in a cycle: `cycle` is always written, `null` when there is none (`harness_error`).
    Nullable,
    /// Never in a cycle: a `cycle` key is refused.
    Never,
}

impl EventKind {
    /// The kind's name as written in the log (`"cycle_started"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "run_started",
            EventKind::CycleStarted { .. } => "cycle_started",
            EventKind::CutIssued { .. } => "cut_issued",
            EventKind::DeviceGone {} => "device_gone",
            EventKind::PowerRestored { .. } => "power_restored",
            EventKind::LinkRestored {} => "link_restored",
            EventKind::RecoveryCut { .. } => "recovery_cut",
            EventKind::Ready { .. } => "ready",
            EventKind::Health { .. } => "health",
            EventKind::Verified { .. } => "verified",
            EventKind::Finding { .. } => "finding",
            EventKind::CycleEnded { .. } => "cycle_ended",
            EventKind::HarnessError { .. } => "harness_error",
            EventKind::RunResumed { .. } => "run_resumed",
            EventKind::RunStopped { .. } => "run_stopped",
            EventKind::RunSuspended { .. } => "run_suspended",
            EventKind::Note { .. } => "note",
            EventKind::ControllerLog { .. } => "controller_log",
            EventKind::AgentLog { .. } => "agent_log",
            EventKind::RunEnded { .. } => "run_ended",
            EventKind::PortWindow { .. } => "port_window",
            EventKind::PortPerf { .. } => "port_perf",
        }
    }

    /// Whether the kind belongs to a cycle. (`run_resumed` names the cycle it took up again
    /// in its own `interrupted_cycle`; the event itself belongs to the run.)
    pub fn cycle_key(&self) -> CycleKey {
        match self {
            EventKind::RunStarted { .. }
            | EventKind::RunResumed { .. }
            | EventKind::RunStopped { .. }
            | EventKind::RunSuspended { .. }
            | EventKind::RunEnded { .. }
            | EventKind::PortPerf { .. } => CycleKey::Never,
            EventKind::HarnessError { .. } => CycleKey::Nullable,
            EventKind::Note { .. } | EventKind::ControllerLog { .. } | EventKind::AgentLog { .. } => CycleKey::Optional,
            EventKind::CycleStarted { .. }
            | EventKind::CutIssued { .. }
            | EventKind::DeviceGone {}
            | EventKind::PowerRestored { .. }
            | EventKind::LinkRestored {}
            | EventKind::RecoveryCut { .. }
            | EventKind::Ready { .. }
            | EventKind::Health { .. }
            | EventKind::Verified { .. }
            | EventKind::Finding { .. }
            | EventKind::CycleEnded { .. }
            | EventKind::PortWindow { .. } => CycleKey::Always,
        }
    }

    /// Where a line puts the event's `port` among its keys: last for the kinds that had it as
    /// their own last key before it was the envelope's (`ready`, `health`), after `cycle` for
    /// the rest, so every line reads as it was written before.
    pub fn port_last(&self) -> bool {
        matches!(self, EventKind::Ready { .. } | EventKind::Health { .. })
    }

    /// The kind is about one port and its line must name it (any other event may).
    pub fn needs_port(&self) -> bool {
        matches!(self, EventKind::PortWindow { .. } | EventKind::PortPerf { .. })
    }
}
