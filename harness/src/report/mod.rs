//! The outputs of a run, each an independent consumer of the one event stream
//! ([`crate::events`]):
//!
//! - `events.jsonl` ([`jsonl`]): every event, one JSON object per line, the record itself;
//! - `summary.json` ([`summary`]): verdict, counts per class, cycles, timings, figures;
//! - `junit.xml` ([`junit`]): one test case per cycle, for CI;
//! - `report.html` ([`html`]): one self-contained page with inline SVG charts;
//! - the console ([`console`]): a progress bar on a terminal, plain periodic lines elsewhere.
//!
//! Each file report folds the events into its own [`RunModel`] and writes its file when the
//! run ends; [`regenerate`] rebuilds all three from `events.jsonl` alone, byte for byte the
//! same as the live run wrote them. No report reads anything but events.

pub mod console;
pub mod html;
pub mod jsonl;
pub mod junit;
pub mod summary;
mod svg;

use crate::events::{Event, EventSink, HealthNote, SinkError, Sinks, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, Shown};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use crate::run_dir::{EVENTS_FILE, HTML_FILE, JUNIT_FILE, SUMMARY_FILE};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{path}: line {line} is not an event: {message}")]
    BadLine { path: String, line: usize, message: String },
    #[error("{0}: no events (is this a run directory?)")]
    Empty(String),
}

/// The run as told by its events, folded in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunModel {
    pub start: Option<RunStart>,
    pub cycles: BTreeMap<u32, CycleRecord>,
    /// Harness errors not tied to a cycle.
    pub run_errors: Vec<String>,
    pub end: Option<(Verdict, u8)>,
    /// The latest timestamp seen.
    pub last_t_ns: u64,
    /// Each time `faultline resume` took the run up again: (wall clock, interrupted cycle).
    pub resumes: Vec<(String, Option<u32>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunStart {
    pub run_id: String,
    pub scenario: String,
    pub target: String,
    pub contract: Contract,
    pub cycles_planned: u32,
    pub seed: u64,
    pub started_at: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    pub t_ns: u64,
    pub completions: u64,
    pub in_flight_ops: u32,
    pub bytes_at_risk: u64,
    pub phase_us: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    pub sectors: u64,
    pub bytes: u64,
    pub verify_ns: u64,
    pub counts: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleEnd {
    pub t_ns: u64,
    pub verdict: Verdict,
    pub writes_completed: u64,
    pub bytes_written: u64,
    pub write_ns: u64,
    pub latency_p50_ns: Option<u64>,
    pub latency_p99_ns: Option<u64>,
    pub harness_ns: Option<u64>,
}

/// Everything recorded about one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleRecord {
    pub cycle: u32,
    pub started_ns: Option<u64>,
    pub cut: Option<Cut>,
    pub device_gone_ns: Option<u64>,
    pub power_restored_ns: Option<u64>,
    pub enumerate_us: Option<u64>,
    pub first_read_us: Option<u64>,
    pub smart: Option<SmartFigures>,
    pub anomalies: Vec<HealthNote>,
    pub verified: Option<Verified>,
    /// Findings that first appeared in this cycle.
    pub findings: Vec<Finding>,
    pub errors: Vec<String>,
    pub end: Option<CycleEnd>,
}

impl CycleRecord {
    /// The cycle's verdict: an error or an unfinished cycle is `error`; otherwise what the
    /// runner said when it ended the cycle.
    pub fn verdict(&self) -> Verdict {
        match &self.end {
            _ if !self.errors.is_empty() => Verdict::Error,
            None => Verdict::Error,
            Some(e) if e.verdict == Verdict::Clean && !(self.findings.is_empty() && self.anomalies.is_empty()) => Verdict::Findings,
            Some(e) => e.verdict,
        }
    }

    /// Throughput of the write phase, MiB/s.
    pub fn throughput_mib_s(&self) -> Option<f64> {
        let e = self.end.as_ref()?;
        (e.write_ns > 0).then(|| e.bytes_written as f64 / 1_048_576.0 / (e.write_ns as f64 / 1e9))
    }
}

impl RunModel {
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut m = RunModel::default();
        for e in events {
            m.apply(e);
        }
        m
    }

    fn cycle(&mut self, cycle: u32) -> &mut CycleRecord {
        self.cycles.entry(cycle).or_insert_with(|| CycleRecord { cycle, ..CycleRecord::default() })
    }

    pub fn apply(&mut self, e: &Event) {
        self.last_t_ns = self.last_t_ns.max(e.t_ns());
        match e {
            Event::RunStarted { run_id, scenario, target, contract, cycles_planned, seed, started_at, .. } => {
                self.start = Some(RunStart {
                    run_id: run_id.clone(),
                    scenario: scenario.clone(),
                    target: target.clone(),
                    contract: *contract,
                    cycles_planned: *cycles_planned,
                    seed: *seed,
                    started_at: started_at.clone(),
                })
            }
            Event::CycleStarted { t_ns, cycle } => self.cycle(*cycle).started_ns = Some(*t_ns),
            Event::CutIssued { t_ns, cycle, completions, in_flight_ops, bytes_at_risk, phase_us, .. } => {
                self.cycle(*cycle).cut = Some(Cut {
                    t_ns: *t_ns,
                    completions: *completions,
                    in_flight_ops: *in_flight_ops,
                    bytes_at_risk: *bytes_at_risk,
                    phase_us: *phase_us,
                })
            }
            Event::DeviceGone { t_ns, cycle } => self.cycle(*cycle).device_gone_ns = Some(*t_ns),
            Event::PowerRestored { t_ns, cycle } => self.cycle(*cycle).power_restored_ns = Some(*t_ns),
            Event::Ready { cycle, enumerate_us, first_read_us, .. } => {
                let c = self.cycle(*cycle);
                c.enumerate_us = *enumerate_us;
                c.first_read_us = *first_read_us;
            }
            Event::Health { cycle, smart, anomalies, .. } => {
                let c = self.cycle(*cycle);
                c.smart = Some(smart.clone());
                c.anomalies.extend(anomalies.iter().cloned());
            }
            Event::Verified { cycle, sectors, bytes, verify_ns, counts, .. } => {
                self.cycle(*cycle).verified =
                    Some(Verified { sectors: *sectors, bytes: *bytes, verify_ns: *verify_ns, counts: counts.clone() })
            }
            Event::Finding { cycle, finding, .. } => self.cycle(*cycle).findings.push(finding.clone()),
            Event::CycleEnded {
                t_ns,
                cycle,
                verdict,
                writes_completed,
                bytes_written,
                write_ns,
                latency_p50_ns,
                latency_p99_ns,
                harness_ns,
            } => {
                self.cycle(*cycle).end = Some(CycleEnd {
                    t_ns: *t_ns,
                    verdict: *verdict,
                    writes_completed: *writes_completed,
                    bytes_written: *bytes_written,
                    write_ns: *write_ns,
                    latency_p50_ns: *latency_p50_ns,
                    latency_p99_ns: *latency_p99_ns,
                    harness_ns: *harness_ns,
                })
            }
            Event::HarnessError { cycle: Some(c), message, .. } => self.cycle(*c).errors.push(message.clone()),
            Event::HarnessError { cycle: None, message, .. } => self.run_errors.push(message.clone()),
            Event::RunResumed { resumed_at, interrupted_cycle, .. } => self.resumes.push((resumed_at.clone(), *interrupted_cycle)),
            Event::RunEnded { verdict, exit_code, .. } => self.end = Some((*verdict, *exit_code)),
        }
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.cycles.values().flat_map(|c| c.findings.iter())
    }

    pub fn harness_errors(&self) -> usize {
        self.run_errors.len() + self.cycles.values().map(|c| c.errors.len()).sum::<usize>()
    }

    /// The run's verdict: what `run_ended` said; for a run that never ended (the harness
    /// died), `findings` if it found any, else `error` (an unfinished run is not clean).
    pub fn verdict(&self) -> Verdict {
        match self.end {
            Some((v, _)) => v,
            None if self.harness_errors() == 0 && self.findings().next().is_some() => Verdict::Findings,
            None => Verdict::Error,
        }
    }

    /// The verdict the events imply, for the runner to put in `run_ended`: any harness error
    /// is `error`, else any finding or health anomaly is `findings`, else `clean`.
    pub fn implied_verdict(&self) -> Verdict {
        if self.harness_errors() > 0 {
            Verdict::Error
        } else if self.cycles.values().any(|c| c.verdict() == Verdict::Findings) {
            Verdict::Findings
        } else {
            Verdict::Clean
        }
    }
}

/// The runner's end of the stream: forwards each event to the consumers, keeps its own
/// [`RunModel`] so the run's verdict is the one the events imply, and remembers the first
/// consumer that failed (the run then ends as a harness error).
pub struct Recorder<'a> {
    sinks: Sinks<'a>,
    model: RunModel,
    first_error: Option<SinkError>,
}

impl<'a> Recorder<'a> {
    pub fn new(sinks: Sinks<'a>) -> Self {
        Recorder::resumed(sinks, RunModel::default())
    }

    /// A recorder taking up a run whose earlier events `model` holds (the consumers in `sinks`
    /// have seen them too, except the log, which holds them already).
    pub fn resumed(sinks: Sinks<'a>, model: RunModel) -> Self {
        Recorder { sinks, model, first_error: None }
    }

    pub fn emit(&mut self, e: &Event) {
        self.model.apply(e);
        if let Err(err) = self.sinks.event(e) {
            self.first_error.get_or_insert(err);
        }
    }

    pub fn model(&self) -> &RunModel {
        &self.model
    }

    /// Emits `run_ended` with the verdict the events imply (`error` if any consumer failed)
    /// and returns it, or the first consumer error.
    pub fn end(mut self, t_ns: u64) -> Result<Verdict, SinkError> {
        let verdict = if self.first_error.is_some() { Verdict::Error } else { self.model.implied_verdict() };
        self.emit(&Event::RunEnded { t_ns, verdict, exit_code: verdict.exit_code() });
        match self.first_error {
            Some(e) => Err(e),
            None => Ok(verdict),
        }
    }
}

/// A decoded sector identity, in words.
pub fn describe(s: &Shown) -> String {
    match s {
        Shown::Prior => "prior content (no write of this run)".to_string(),
        Shown::Prefill => "the prefill version".to_string(),
        Shown::Write { write_id, cycle, port, addr, index, count } => {
            format!("write {write_id} (cycle {cycle}, port {port}), sector {} of {count}, for byte {addr}", index + 1)
        }
        Shown::Damaged { write_id, cycle, addr, run_id } => {
            format!("damaged sector (checksum fails) claiming write {write_id}, cycle {cycle}, byte {addr}, run {run_id:016x}")
        }
        Shown::ForeignRun { run_id, write_id } => format!("a sector of another run ({run_id:016x}, write {write_id})"),
        Shown::Zeros => "zeros".to_string(),
        Shown::Unrecognized => "bytes of no faultline sector".to_string(),
        Shown::ReadError { errno, detail } => format!("read error (errno {errno}: {detail})"),
    }
}

/// A file report: folds the events and writes `path` (whole, through a temporary file and a
/// rename, so a reader never sees half a report) when the run ends.
pub struct FileReport {
    path: PathBuf,
    model: RunModel,
    render: fn(&RunModel) -> String,
}

impl FileReport {
    pub fn new(path: PathBuf, render: fn(&RunModel) -> String) -> Self {
        FileReport { path, model: RunModel::default(), render }
    }
}

impl EventSink for FileReport {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.model.apply(e);
        if matches!(e, Event::RunEnded { .. }) {
            write_atomically(&self.path, &(self.render)(&self.model))?;
        }
        Ok(())
    }
}

pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), SinkError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| SinkError::io("cannot write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| SinkError::io("cannot rename into place", path, e))
}

/// The file reports of a run directory: `summary.json`, `junit.xml`, `report.html`.
pub fn file_reports(run_dir: &Path) -> [FileReport; 3] {
    [
        FileReport::new(run_dir.join(SUMMARY_FILE), summary::render),
        FileReport::new(run_dir.join(JUNIT_FILE), junit::render),
        FileReport::new(run_dir.join(HTML_FILE), html::render),
    ]
}

/// What [`regenerate`] found and wrote.
#[derive(Debug)]
pub struct Regenerated {
    pub model: RunModel,
    pub events: usize,
    /// Bytes of a torn last line (the harness died mid-write), ignored.
    pub torn_tail_bytes: usize,
    pub written: Vec<PathBuf>,
}

/// Rebuilds `summary.json`, `junit.xml` and `report.html` from `RUN_DIR/events.jsonl`.
pub fn regenerate(run_dir: &Path) -> Result<Regenerated, ReportError> {
    let log = jsonl::read_events(&run_dir.join(EVENTS_FILE))?;
    if log.events.is_empty() {
        return Err(ReportError::Empty(run_dir.join(EVENTS_FILE).display().to_string()));
    }
    let model = RunModel::from_events(&log.events);
    let mut written = Vec::new();
    for r in file_reports(run_dir) {
        write_atomically(&r.path, &(r.render)(&model))?;
        written.push(r.path);
    }
    Ok(Regenerated { model, events: log.events.len(), torn_tail_bytes: log.torn_tail_bytes, written })
}

#[cfg(test)]
pub(crate) mod testdata {
    use crate::events::{Event, HealthNote, SmartFigures, Verdict};
    use crate::ledger::Contract;
    use crate::verify::{Finding, FindingClass, Shown};
    use std::collections::BTreeMap;

    pub fn finding(cycle: u32, class: FindingClass, detail: &str) -> Finding {
        Finding {
            class,
            offset: 8192 * cycle as u64,
            length: 4096,
            expected: Shown::Write { write_id: 40 + cycle as u64, cycle, port: 0, addr: 8192 * cycle as u64, index: 0, count: 8 },
            found: Shown::Prefill,
            cycle,
            detail: detail.to_string(),
        }
    }

    /// A three-cycle run: cycle 2 finds a lost write whose detail is hostile markup.
    pub fn run() -> Vec<Event> {
        let counts: BTreeMap<String, u64> = crate::events::zero_counts();
        let mut ev = vec![Event::RunStarted {
            t_ns: 0,
            run_id: "00000000000000ab".into(),
            scenario: "demo <sim> & \"quotes\"".into(),
            target: "sim:8MiB".into(),
            contract: Contract::Flush,
            cycles_planned: 3,
            seed: 4,
            started_at: "2026-01-01T00:00:00+00:00".into(),
        }];
        for c in 1..=3u32 {
            let t = c as u64 * 1_000_000_000;
            ev.push(Event::CycleStarted { t_ns: t, cycle: c });
            ev.push(Event::CutIssued {
                t_ns: t + 1000,
                cycle: c,
                completions: 100 * c as u64,
                in_flight_ops: 30,
                bytes_at_risk: 65536,
                phase_us: 1000 * c as u64,
                planned_after_ms: None,
                mate_step_ms: None,
            });
            ev.push(Event::DeviceGone { t_ns: t + 2000, cycle: c });
            ev.push(Event::PowerRestored { t_ns: t + 3000, cycle: c });
            ev.push(Event::Ready { t_ns: t + 4000, cycle: c, enumerate_us: Some(1500 * c as u64), first_read_us: Some(2000 * c as u64) });
            ev.push(Event::Health {
                t_ns: t + 5000,
                cycle: c,
                smart: SmartFigures { unsafe_shutdowns: 10 + c as u64, power_cycles: 20 + c as u64, ..SmartFigures::default() },
                anomalies: if c == 3 {
                    vec![HealthNote { kind: "media_errors_grew".into(), detail: "media errors 0 -> 1".into() }]
                } else {
                    Vec::new()
                },
            });
            let mut cc = counts.clone();
            if c == 2 {
                *cc.get_mut("lost_write").unwrap() = 1;
            }
            ev.push(Event::Verified { t_ns: t + 6000, cycle: c, sectors: 16384, bytes: 8 << 20, verify_ns: 3_000_000, counts: cc });
            if c == 2 {
                ev.push(Event::Finding {
                    t_ns: t + 6000,
                    cycle: c,
                    finding: finding(c, FindingClass::LostWrite, "<script>alert('x')</script> & gone"),
                });
            }
            ev.push(Event::CycleEnded {
                t_ns: t + 7000,
                cycle: c,
                verdict: if c == 1 { Verdict::Clean } else { Verdict::Findings },
                writes_completed: 100 * c as u64,
                bytes_written: 1 << 20,
                write_ns: 5_000_000,
                latency_p50_ns: Some(80_000),
                latency_p99_ns: Some(900_000),
                harness_ns: Some(2_000_000),
            });
        }
        ev.push(Event::RunEnded { t_ns: 4_000_000_000, verdict: Verdict::Findings, exit_code: 1 });
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_folds_cycles_findings_and_verdicts() {
        let m = RunModel::from_events(&testdata::run());
        assert_eq!(m.cycles.len(), 3);
        let v: Vec<Verdict> = m.cycles.values().map(CycleRecord::verdict).collect();
        assert_eq!(v, [Verdict::Clean, Verdict::Findings, Verdict::Findings], "cycle 3 has a health anomaly");
        assert_eq!((m.verdict(), m.implied_verdict(), m.findings().count()), (Verdict::Findings, Verdict::Findings, 1));
        assert_eq!(m.cycles[&2].throughput_mib_s(), Some(200.0));

        // A run that died mid-cycle: findings stay findings, and nothing else is clean.
        let mut ev = testdata::run();
        ev.truncate(ev.len() - 2);
        let m = RunModel::from_events(&ev);
        assert_eq!((m.cycles[&3].verdict(), m.verdict()), (Verdict::Error, Verdict::Findings));
        let m = RunModel::from_events(&ev[..3]);
        assert_eq!(m.verdict(), Verdict::Error, "an unfinished run without findings is not clean");
    }

    #[test]
    fn the_recorder_ends_with_the_implied_verdict() {
        let mut seen = Vec::new();
        let mut sinks = Sinks::new();
        sinks.push(&mut seen);
        let mut rec = Recorder::new(sinks);
        let ev = testdata::run();
        for e in &ev[..ev.len() - 1] {
            rec.emit(e);
        }
        assert_eq!(rec.end(9).unwrap(), Verdict::Findings);
        assert_eq!(seen.last(), Some(&Event::RunEnded { t_ns: 9, verdict: Verdict::Findings, exit_code: 1 }));
        let mut rec = Recorder::new(Sinks::new());
        rec.emit(&ev[0]);
        rec.emit(&Event::HarnessError { t_ns: 1, cycle: None, message: "ledger unreadable".into() });
        assert_eq!(rec.end(2).unwrap(), Verdict::Error);
    }

    #[test]
    fn identities_are_decoded_in_words() {
        let w = Shown::Write { write_id: 7, cycle: 2, port: 1, addr: 4096, index: 0, count: 8 };
        assert_eq!(describe(&w), "write 7 (cycle 2, port 1), sector 1 of 8, for byte 4096");
        assert!(describe(&Shown::ForeignRun { run_id: 0xab, write_id: 3 }).contains("00000000000000ab"));
        assert!(describe(&Shown::ReadError { errno: 5, detail: "EIO".into() }).contains("errno 5"));
    }
}
