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
use crate::port::PortId;
use crate::verify::{Finding, FindingClass};
use crate::writer::CycleOutcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod json;
mod kind;

pub use json::EnvelopeError;
pub use kind::{CycleKey, EventKind};
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
            HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts: 1, before, after } => {
                ("unsafe_shutdowns_after_dirty_cut", format!("unsafe shutdowns went {before} -> {after} across a dirty cut (must be +1)"))
            }
            HealthAnomaly::UnsafeShutdownsAfterDirtyCut { cuts, before, after } => (
                "unsafe_shutdowns_after_dirty_cut",
                format!("unsafe shutdowns went {before} -> {after} across {cuts} dirty cuts (must be +1 to +{cuts})"),
            ),
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
            HealthAnomaly::LinkChanged { before, after } => {
                ("link_changed", format!("the PCIe link came back at {after}, not at {before} as before the fault"))
            }
            HealthAnomaly::AerErrors { severity, before, after } => {
                ("aer_errors", format!("{severity} AER errors of the drive's PCI function {before} -> {after} across the fault"))
            }
            HealthAnomaly::ReadyBeyondTimeout { ready_ms, cap_to_ms } => (
                "ready_beyond_timeout",
                format!("the device answered {ready_ms} ms after the fault, past its controller's CAP.TO of {cap_to_ms} ms"),
            ),
            HealthAnomaly::PowerCycleNotLogged { cuts, power_cycles_before, power_cycles_after, new_power_on_events } => (
                "power_cycle_not_logged",
                format!(
                    "persistent event log: power cycle count {power_cycles_before} -> {power_cycles_after}, {new_power_on_events} \
                     power cycles in new power-on events, across {cuts} power cut{} (must be one each{})",
                    if *cuts == 1 { "" } else { "s" },
                    if *cuts == 1 { "" } else { ", or fewer for cuts before the drive was ready, at least one" }
                ),
            ),
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

/// One thing that happened in a run: the envelope every event shares (when, in which cycle,
/// on which port, recorded by which host) around what happened ([`EventKind`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Run-relative nanoseconds on the run's monotonic clock.
    pub t_ns: u64,
    /// The cycle the event belongs to (see [`CycleKey`] for which kinds have one).
    pub cycle: Option<u32>,
    /// The port of the device the event concerns, where it concerns one (a `port_window` or
    /// `port_perf` always names one; a `ready` or `health` of a dual-port run does).
    pub port: Option<PortId>,
    /// The host that recorded the event when it is not this process (read back from a log
    /// line's `host`; a line of this process says [`LOCAL_HOST`]).
    pub host: Option<String>,
    pub kind: EventKind,
}

/// The name a log line gives the host of the process that wrote it.
pub const LOCAL_HOST: &str = "local";

impl Event {
    /// An event of the run (in no cycle, on no port), recorded here.
    pub fn new(t_ns: u64, kind: EventKind) -> Self {
        Event { t_ns, cycle: None, port: None, host: None, kind }
    }

    /// An event of `cycle`.
    pub fn in_cycle(t_ns: u64, cycle: u32, kind: EventKind) -> Self {
        Event { cycle: Some(cycle), ..Event::new(t_ns, kind) }
    }

    /// The same event, in `cycle` (or in none).
    pub fn with_cycle(self, cycle: Option<u32>) -> Self {
        Event { cycle, ..self }
    }

    /// The same event, about `port` (or about none).
    pub fn with_port(self, port: Option<PortId>) -> Self {
        Event { port, ..self }
    }

    /// The same event, about `port`.
    pub fn on_port(self, port: PortId) -> Self {
        self.with_port(Some(port))
    }

    /// The event's kind as written in the log (`"cycle_started"`, ...).
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// (`cause`, not `source`: the message says it already, and error chains would repeat it.)
    #[error("{what} {path}: {cause}")]
    Io { what: &'static str, path: String, cause: std::io::Error },
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
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
        let kind = EventKind::CutIssued {
            completions: o.completed_at_cut,
            in_flight_ops: o.in_flight_at_cut,
            bytes_at_risk: o.bytes_at_risk,
            phase_us: u64::try_from(cut_at.as_micros()).unwrap_or(u64::MAX),
            planned_after_ms,
            mate_step_ms: None,
            command_us: None,
        };
        out.push(Event::in_cycle(start_ns + nanos(cut_at), cycle, kind));
    }
    if let Some(gone) = o.device_gone_at {
        out.push(Event::in_cycle(start_ns + nanos(gone), cycle, EventKind::DeviceGone {}));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Shown;
    use crate::writer::WindowFigures;

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
            Event::in_cycle(
                5,
                3,
                EventKind::CutIssued {
                    completions: 100,
                    in_flight_ops: 32,
                    bytes_at_risk: 1 << 20,
                    phase_us: 900,
                    planned_after_ms: Some(7),
                    mate_step_ms: Some(25),
                    command_us: Some(1250),
                },
            ),
            Event::in_cycle(9, 3, EventKind::Finding { finding: finding(3, "gone") }),
            Event::in_cycle(
                10,
                3,
                EventKind::Health {
                    smart: SmartFigures { unsafe_shutdowns: 7, ..SmartFigures::default() },
                    anomalies: vec![HealthNote::from(&HealthAnomaly::UnsafeShutdownsAfterDirtyCut {
                        cuts: 1,
                        before: u128::MAX - 1,
                        after: u128::MAX,
                    })],
                    pcie: None,
                },
            )
            .with_port(Some(PortId(1))),
            Event::in_cycle(10, 3, EventKind::Ready { enumerate_us: None, first_read_us: Some(40) }),
            Event::new(11, EventKind::RunEnded { verdict: Verdict::Findings, exit_code: 1 }),
        ];
        let value = |e: &Event| serde_json::from_slice::<serde_json::Value>(&e.to_json().unwrap()).unwrap();
        for e in &events {
            let text = e.to_json().unwrap();
            assert_eq!(&serde_json::from_slice::<Event>(&text).unwrap(), e, "{}", String::from_utf8_lossy(&text));
        }
        let v = value(&events[0]);
        assert_eq!((v["event"].as_str(), v["t_ns"].as_u64(), v["cycle"].as_u64()), (Some("cut_issued"), Some(5), Some(3)));
        assert_eq!((events[1].t_ns, events[1].cycle, events[4].cycle), (9, Some(3), None));
        // The port a health reading or a readiness names; a log without it still reads.
        assert_eq!(value(&events[2])["port"].as_u64(), Some(1));
        assert!(value(&events[3]).get("port").is_none());
    }

    #[test]
    fn the_envelope_keys_come_first_and_each_kind_keeps_its_cycle_rule() {
        let cut = Event::in_cycle(5, 3, EventKind::DeviceGone {});
        assert_eq!(cut.to_json().unwrap(), br#"{"event":"device_gone","t_ns":5,"cycle":3}"#);
        let err = Event::new(6, EventKind::HarnessError { message: "x".into() });
        assert_eq!(err.to_json().unwrap(), br#"{"event":"harness_error","t_ns":6,"cycle":null,"message":"x"}"#);
        let note = Event::new(7, EventKind::Note { message: "n".into() });
        assert_eq!(note.to_json().unwrap(), br#"{"event":"note","t_ns":7,"message":"n"}"#);
        let window = Event::new(
            8,
            EventKind::PortPerf { workload: "w".into(), phase: "p".into(), name: "A".into(), figures: WindowFigures::default() },
        );
        let ready = Event::in_cycle(10, 3, EventKind::Ready { enumerate_us: None, first_read_us: Some(40) }).on_port(PortId(1));
        assert_eq!(ready.to_json().unwrap(), br#"{"event":"ready","t_ns":10,"cycle":3,"enumerate_us":null,"first_read_us":40,"port":1}"#);
        // An envelope that does not fit its kind is not written: the line would not read back.
        assert!(matches!(Event::new(1, EventKind::DeviceGone {}).to_json(), Err(EnvelopeError::NoCycle("device_gone"))));
        assert!(matches!(Event::in_cycle(1, 2, EventKind::RunStopped { reason: "r".into() }).to_json(), Err(EnvelopeError::Cycle(_))));
        assert!(matches!(window.to_json(), Err(EnvelopeError::NoPort("port_perf"))));
        let text = window.clone().on_port(PortId(1)).to_json().unwrap();
        assert!(text.starts_with(br#"{"event":"port_perf","t_ns":8,"port":1,"workload":"w""#), "{}", String::from_utf8_lossy(&text));
        // Read back, the same rules hold, and the keys may come in any order (a `port_perf`
        // written before the envelope had its port after `phase`).
        for bad in [
            &br#"{"event":"device_gone","t_ns":5}"#[..],
            br#"{"event":"run_stopped","t_ns":5,"cycle":1,"reason":"r"}"#,
            br#"{"event":"device_gone","cycle":1}"#,
            br#"{"event":"device_gone","t_ns":5,"cycle":1,"extra":0}"#,
        ] {
            assert!(serde_json::from_slice::<Event>(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let old = br#"{"event":"port_perf","t_ns":8,"workload":"w","phase":"p","port":1,"name":"A","figures":{"duration_us":0,"completions":0,"bytes":0,"io_errors":0,"throughput_bps":0.0,"max_gap_us":0}}"#;
        assert_eq!(serde_json::from_slice::<Event>(old).map_err(|e| e.to_string()), Ok(window.on_port(PortId(1))));
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
            let e = Event::in_cycle(1, 1, EventKind::CycleStarted { fault: None, off_time_ms: None });
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
