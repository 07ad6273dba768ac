//! The outputs of a run, each an independent consumer of the one event stream
//! ([`crate::events`]):
//!
//! - `events.jsonl` ([`jsonl`]): every event, one JSON object per line, the record itself;
//! - `summary.json` ([`summary`]): verdict, counts per class, cycles, timings, figures;
//! - `junit.xml` ([`junit`]): one test case per cycle, for CI;
//! - `report.html` ([`html`]): one self-contained page with inline SVG charts;
//! - the console ([`console`]): a progress bar on a terminal, plain periodic lines elsewhere;
//! - `fleet.json` and `fleet.html` ([`fleet`]): many runs' event logs merged per drive.
//!
//! Each file report folds the events into its own [`RunModel`] and writes its file when the
//! run ends; [`regenerate`] rebuilds all three from `events.jsonl` alone, byte for byte the
//! same as the live run wrote them. No report reads anything but events.

pub mod console;
mod error;
mod escape;
pub mod fleet;
pub mod html;
pub mod jsonl;
pub mod junit;
mod model;
pub mod summary;
mod svg;
#[cfg(test)]
mod testdata;

use crate::events::{Event, EventSink, SinkError, Sinks, Verdict};
pub use error::ReportError;
pub use model::{describe, Cut, CycleEnd, CycleRecord, RunModel, RunStart, Verified};
use std::path::{Path, PathBuf};

pub use crate::run_dir::{EVENTS_FILE, HTML_FILE, JUNIT_FILE, SUMMARY_FILE};

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
mod tests {
    use super::*;

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
}
