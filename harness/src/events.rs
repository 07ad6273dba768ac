//! The run's event stream: the one record of what a run did, in the order it happened.
//!
//! The cycle runner emits [`Event`]s; every output (the JSON Lines log, `summary.json`,
//! `junit.xml`, `report.html`, the console) is an independent consumer of the same stream
//! (an [`EventSink`]), so `faultline report RUN_DIR` can rebuild every file from the log alone.
//!
//! Times are run-relative nanoseconds on one monotonic clock (`t_ns`), the clock the I/O
//! completions are stamped with, so a cut, the device going away and the completions around
//! them can be ordered. Quantities are integers with their unit in the name: a JSON float does
//! not always parse back to the same bits, and a regenerated report must equal the live one.
//! A figure the runner cannot measure is `None`, never an estimate.

use crate::health::{HealthAnomaly, SmartLog};
use crate::ledger::Contract;
use crate::port::PortId;
use crate::verify::{Finding, FindingClass};
use crate::writer::{CycleOutcome, WindowFigures};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How a cycle or a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing outside the envelope the contract allows.
    Clean,
    /// At least one finding.
    Findings,
    /// The harness could not do its job (bad input, broken run): no verdict on the drive.
    Error,
}

impl Verdict {
    /// The process exit code: 0 clean, 1 findings, 2 harness error.
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Clean => 0,
            Verdict::Findings => 1,
            Verdict::Error => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Clean => "clean",
            Verdict::Findings => "findings",
            Verdict::Error => "error",
        }
    }
}

/// The SMART / health counters a report follows over cycles. Counters saturate at `u64::MAX`
/// (the log's are 128-bit; no drive comes near 2^64 power cycles), which keeps the event
/// log readable by any JSON parser.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartFigures {
    pub critical_warning: u8,
    pub temperature_k: u16,
    pub available_spare_pct: u8,
    pub percentage_used: u8,
    pub power_cycles: u64,
    pub unsafe_shutdowns: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
    pub data_units_written: u64,
}

impl From<&SmartLog> for SmartFigures {
    fn from(s: &SmartLog) -> Self {
        let sat = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        SmartFigures {
            critical_warning: s.critical_warning,
            temperature_k: s.temperature_k,
            available_spare_pct: s.available_spare_pct,
            percentage_used: s.percentage_used,
            power_cycles: sat(s.power_cycles),
            unsafe_shutdowns: sat(s.unsafe_shutdowns),
            media_errors: sat(s.media_errors),
            error_log_entries: sat(s.error_log_entries),
            data_units_written: sat(s.data_units_written),
        }
    }
}

/// One health anomaly as the log records it: its kind and a sentence. (The anomaly's own
/// counters are 128-bit, which a tagged event cannot carry through serde's buffering.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthNote {
    pub kind: String,
    pub detail: String,
}

impl From<&HealthAnomaly> for HealthNote {
    fn from(a: &HealthAnomaly) -> Self {
        let (kind, detail) = match a {
            HealthAnomaly::UnsafeShutdownsAfterDirtyCut { before, after } => {
                ("unsafe_shutdowns_after_dirty_cut", format!("unsafe shutdowns went {before} -> {after} across a dirty cut (must be +1)"))
            }
            HealthAnomaly::UnsafeShutdownsAfterCleanShutdown { before, after } => (
                "unsafe_shutdowns_after_clean_shutdown",
                format!("unsafe shutdowns went {before} -> {after} across a clean shutdown (must not change)"),
            ),
            HealthAnomaly::CriticalWarning { new_bits, meaning } => {
                ("critical_warning", format!("new critical-warning bits {new_bits:#04x}: {meaning}"))
            }
            HealthAnomaly::MediaErrorsGrew { before, after } => ("media_errors_grew", format!("media errors {before} -> {after}")),
            HealthAnomaly::ErrorLogGrew { before, after } => ("error_log_grew", format!("error-log entries {before} -> {after}")),
            HealthAnomaly::PlpNotStarted { before, after } => {
                ("plp_not_started", format!("OCP PLP start count {before} -> {after} across a dirty cut (must rise)"))
            }
        };
        HealthNote { kind: kind.to_string(), detail }
    }
}

/// Findings per class, every class present (zeros included), keyed by the class name.
pub fn class_counts<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> BTreeMap<String, u64> {
    let mut m = zero_counts();
    for f in findings {
        *m.get_mut(f.class.name()).expect("every class is present") += 1;
    }
    m
}

/// A count of zero for every finding class.
pub fn zero_counts() -> BTreeMap<String, u64> {
    FindingClass::ALL.iter().map(|c| (c.name().to_string(), 0)).collect()
}

/// One thing that happened in a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Unknown keys are refused: a damaged key must not pass as an event with a field left out.
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    RunStarted {
        t_ns: u64,
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
        t_ns: u64,
        cycle: u32,
        /// The cycle's fault, in a run that mixes faults (`power-cut`, `port-pull`, ...; the
        /// port a one-port fault hits is the cycle's `port_window` with `faulted`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<String>,
    },
    /// The cut command was issued (`t_ns` is when), with the queue as it stood.
    CutIssued {
        t_ns: u64,
        cycle: u32,
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
    DeviceGone {
        t_ns: u64,
        cycle: u32,
    },
    /// The power is back on after a power cut or clean shutdown. (Format 2 and older logs also
    /// called the end of a link reset this: it read as `power_restored` there.)
    PowerRestored {
        t_ns: u64,
        cycle: u32,
    },
    /// The link fault is over (a controller, subsystem or PCI reset done, a removed function
    /// rescanned): the device was never powered off. Events format 3 and newer.
    LinkRestored {
        t_ns: u64,
        cycle: u32,
    },
    /// The device is back: time from power-on to enumeration and to the first good read.
    Ready {
        t_ns: u64,
        cycle: u32,
        enumerate_us: Option<u64>,
        first_read_us: Option<u64>,
        /// The port that answered (one event per port of a dual-port run); absent in logs
        /// written before ports were named here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<PortId>,
    },
    /// A controller's health logs after the fault, judged against its last reading.
    Health {
        t_ns: u64,
        cycle: u32,
        smart: SmartFigures,
        anomalies: Vec<HealthNote>,
        /// The port whose controller was read (one event per port of a dual-port run);
        /// absent in logs written before ports were named here.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        port: Option<PortId>,
    },
    Verified {
        t_ns: u64,
        cycle: u32,
        sectors: u64,
        bytes: u64,
        verify_ns: u64,
        /// Findings per class in this verification, including damage seen in earlier cycles.
        counts: BTreeMap<String, u64>,
    },
    /// A finding, emitted once, in the cycle where it first appeared.
    Finding {
        t_ns: u64,
        cycle: u32,
        finding: Finding,
    },
    CycleEnded {
        t_ns: u64,
        cycle: u32,
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
    },
    HarnessError {
        t_ns: u64,
        cycle: Option<u32>,
        message: String,
    },
    /// `faultline resume` took the run up again after the harness died (killed, or its host
    /// rebooted). `t_ns` goes on from the last event recorded; the time the harness was away
    /// is not known on the run clock (`resumed_at` is the wall clock).
    RunResumed {
        t_ns: u64,
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
        t_ns: u64,
        reason: String,
    },
    /// The run stopped without ending (the run directory ran short of space); `faultline
    /// resume` takes it up again.
    RunSuspended {
        t_ns: u64,
        reason: String,
    },
    /// Something the user should know that is neither a finding nor an error: the engine in
    /// use (a fallback, buffered I/O), health checks that cannot be made.
    Note {
        t_ns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cycle: Option<u32>,
        message: String,
    },
    /// What a controller exchanged (the commands an `exec:` switch ran, with their output).
    ControllerLog {
        t_ns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cycle: Option<u32>,
        lines: Vec<String>,
    },
    /// The audit log of a target on another host: every operation the coordinator sent its
    /// agent since the last such event, a line each (`HOST request N: OPERATION`, with how long
    /// before this event it was sent).
    AgentLog {
        t_ns: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cycle: Option<u32>,
        lines: Vec<String>,
    },
    RunEnded {
        t_ns: u64,
        verdict: Verdict,
        exit_code: u8,
    },
    /// One port of a dual-port run around one cycle's fault: its baseline before the fault,
    /// the fault window (until the faulted port was back and ready, plus the settle time), the
    /// ratios it was judged by and a coarse series (bytes and the longest write per bucket,
    /// from the baseline's start to the port's last completion of the cycle).
    PortWindow {
        t_ns: u64,
        cycle: u32,
        port: PortId,
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
        t_ns: u64,
        workload: String,
        phase: String,
        port: PortId,
        name: String,
        figures: WindowFigures,
    },
}

impl Event {
    /// The event's kind as written in the log (`"cycle_started"`, ...).
    pub fn kind(&self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v.get("event").and_then(|k| k.as_str()).map(str::to_string)).unwrap_or_default()
    }

    pub fn t_ns(&self) -> u64 {
        match self {
            Event::RunStarted { t_ns, .. }
            | Event::CycleStarted { t_ns, .. }
            | Event::CutIssued { t_ns, .. }
            | Event::DeviceGone { t_ns, .. }
            | Event::PowerRestored { t_ns, .. }
            | Event::LinkRestored { t_ns, .. }
            | Event::Ready { t_ns, .. }
            | Event::Health { t_ns, .. }
            | Event::Verified { t_ns, .. }
            | Event::Finding { t_ns, .. }
            | Event::CycleEnded { t_ns, .. }
            | Event::HarnessError { t_ns, .. }
            | Event::RunResumed { t_ns, .. }
            | Event::RunStopped { t_ns, .. }
            | Event::RunSuspended { t_ns, .. }
            | Event::Note { t_ns, .. }
            | Event::ControllerLog { t_ns, .. }
            | Event::AgentLog { t_ns, .. }
            | Event::RunEnded { t_ns, .. }
            | Event::PortWindow { t_ns, .. }
            | Event::PortPerf { t_ns, .. } => *t_ns,
        }
    }

    /// The cycle the event belongs to, if any.
    pub fn cycle(&self) -> Option<u32> {
        match self {
            Event::RunStarted { .. }
            | Event::RunEnded { .. }
            | Event::RunStopped { .. }
            | Event::RunSuspended { .. }
            | Event::PortPerf { .. } => None,
            Event::Note { cycle, .. } | Event::ControllerLog { cycle, .. } | Event::AgentLog { cycle, .. } => *cycle,
            Event::RunResumed { interrupted_cycle, .. } => *interrupted_cycle,
            Event::HarnessError { cycle, .. } => *cycle,
            Event::CycleStarted { cycle, .. }
            | Event::CutIssued { cycle, .. }
            | Event::DeviceGone { cycle, .. }
            | Event::PowerRestored { cycle, .. }
            | Event::LinkRestored { cycle, .. }
            | Event::Ready { cycle, .. }
            | Event::Health { cycle, .. }
            | Event::Verified { cycle, .. }
            | Event::Finding { cycle, .. }
            | Event::PortWindow { cycle, .. }
            | Event::CycleEnded { cycle, .. } => Some(*cycle),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// (`cause`, not `source`: the message says it already, and error chains would repeat it.)
    #[error("{what} {path}: {cause}")]
    Io { what: &'static str, path: String, cause: std::io::Error },
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
}

impl SinkError {
    pub fn io(what: &'static str, path: &std::path::Path, cause: std::io::Error) -> Self {
        SinkError::Io { what, path: path.display().to_string(), cause }
    }
}

/// A consumer of the event stream.
pub trait EventSink {
    /// Takes one event. An error means this consumer's output is incomplete (a full disk
    /// under the event log, say): a harness error, never a finding.
    fn event(&mut self, e: &Event) -> Result<(), SinkError>;
}

impl<S: EventSink + ?Sized> EventSink for &mut S {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        (**self).event(e)
    }
}

/// Fans each event out to several consumers. Every consumer sees every event even when
/// another fails; the first error is returned.
#[derive(Default)]
pub struct Sinks<'a> {
    sinks: Vec<Box<dyn EventSink + 'a>>,
}

impl<'a> Sinks<'a> {
    pub fn new() -> Self {
        Sinks { sinks: Vec::new() }
    }

    pub fn push(&mut self, s: impl EventSink + 'a) -> &mut Self {
        self.sinks.push(Box::new(s));
        self
    }
}

impl EventSink for Sinks<'_> {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        let mut first = Ok(());
        for s in &mut self.sinks {
            if let Err(err) = s.event(e) {
                if first.is_ok() {
                    first = Err(err);
                }
            }
        }
        first
    }
}

/// Collects events in memory (tests, and the rebuild in `faultline report`).
impl EventSink for Vec<Event> {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.push(e.clone());
        Ok(())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `cut_issued` and `device_gone` of a cycle whose workload started at `start_ns` on the run
/// clock (the outcome's times count from that start).
pub fn cut_events(start_ns: u64, cycle: u32, o: &CycleOutcome, planned_after_ms: Option<u64>) -> Vec<Event> {
    let mut out = Vec::new();
    if let Some(cut_at) = o.cut_at {
        out.push(Event::CutIssued {
            t_ns: start_ns + nanos(cut_at),
            cycle,
            completions: o.completed_at_cut,
            in_flight_ops: o.in_flight_at_cut,
            bytes_at_risk: o.bytes_at_risk,
            phase_us: u64::try_from(cut_at.as_micros()).unwrap_or(u64::MAX),
            planned_after_ms,
            mate_step_ms: None,
            command_us: None,
        });
    }
    if let Some(gone) = o.device_gone_at {
        out.push(Event::DeviceGone { t_ns: start_ns + nanos(gone), cycle });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Shown;

    pub(crate) fn finding(cycle: u32, detail: &str) -> Finding {
        Finding {
            class: FindingClass::LostWrite,
            offset: 4096,
            length: 8192,
            expected: Shown::Write { write_id: 12, cycle: 2, port: 0, addr: 4096, index: 0, count: 16 },
            found: Shown::Prefill {},
            cycle,
            detail: detail.to_string(),
        }
    }

    #[test]
    fn events_are_tagged_snake_case_and_round_trip() {
        let events = vec![
            Event::CutIssued {
                t_ns: 5,
                cycle: 3,
                completions: 100,
                in_flight_ops: 32,
                bytes_at_risk: 1 << 20,
                phase_us: 900,
                planned_after_ms: Some(7),
                mate_step_ms: Some(25),
                command_us: Some(1250),
            },
            Event::Finding { t_ns: 9, cycle: 3, finding: finding(3, "gone") },
            Event::Health {
                t_ns: 10,
                cycle: 3,
                smart: SmartFigures { unsafe_shutdowns: 7, ..SmartFigures::default() },
                anomalies: vec![HealthNote::from(&HealthAnomaly::UnsafeShutdownsAfterDirtyCut { before: u128::MAX - 1, after: u128::MAX })],
                port: Some(PortId(1)),
            },
            Event::Ready { t_ns: 10, cycle: 3, enumerate_us: None, first_read_us: Some(40), port: None },
            Event::RunEnded { t_ns: 11, verdict: Verdict::Findings, exit_code: 1 },
        ];
        for e in &events {
            let text = serde_json::to_string(e).unwrap();
            assert_eq!(&serde_json::from_str::<Event>(&text).unwrap(), e, "{text}");
        }
        let v: serde_json::Value = serde_json::to_value(&events[0]).unwrap();
        assert_eq!((v["event"].as_str(), v["t_ns"].as_u64(), v["cycle"].as_u64()), (Some("cut_issued"), Some(5), Some(3)));
        assert_eq!((events[1].t_ns(), events[1].cycle(), events[4].cycle()), (9, Some(3), None));
        // The port a health reading or a readiness names; a log without it still reads.
        assert_eq!(serde_json::to_value(&events[2]).unwrap()["port"].as_u64(), Some(1));
        assert!(serde_json::to_value(&events[3]).unwrap().get("port").is_none());
    }

    #[test]
    fn smart_counters_saturate_instead_of_wrapping() {
        let log = SmartLog {
            critical_warning: 0x10,
            temperature_k: 310,
            available_spare_pct: 100,
            spare_threshold_pct: 10,
            percentage_used: 1,
            data_units_read: 0,
            data_units_written: 5,
            power_cycles: 40,
            power_on_hours: 9,
            unsafe_shutdowns: u128::from(u64::MAX) + 5,
            media_errors: 2,
            error_log_entries: 3,
        };
        let f = SmartFigures::from(&log);
        assert_eq!((f.unsafe_shutdowns, f.power_cycles, f.media_errors, f.critical_warning), (u64::MAX, 40, 2, 0x10));
    }

    struct Failing;
    impl EventSink for Failing {
        fn event(&mut self, _: &Event) -> Result<(), SinkError> {
            Err(SinkError::io("write", std::path::Path::new("/full"), std::io::Error::other("disk full")))
        }
    }

    #[test]
    fn fan_out_reaches_every_consumer_even_past_a_failing_one() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        {
            let mut s = Sinks::new();
            s.push(&mut a).push(Failing).push(&mut b);
            let e = Event::CycleStarted { t_ns: 1, cycle: 1, fault: None };
            assert!(s.event(&e).unwrap_err().to_string().contains("disk full"));
        }
        assert_eq!((a.len(), b.len()), (1, 1));
    }

    #[test]
    fn verdicts_map_to_exit_codes() {
        assert_eq!([Verdict::Clean, Verdict::Findings, Verdict::Error].map(Verdict::exit_code), [0, 1, 2]);
        assert_eq!(class_counts([&finding(1, "x")])["lost_write"], 1);
        assert_eq!(zero_counts().len(), FindingClass::ALL.len());
    }
}
