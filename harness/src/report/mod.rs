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
//! Each file report folds the events into its own [`RunModel`] (bounded: see [`model`]) and
//! writes its file when the run ends; [`regenerate`] rebuilds all three from `events.jsonl`
//! alone, streaming it, byte for byte the same as the live run wrote them. No report reads
//! anything but events.

pub mod console;
mod error;
mod escape;
pub mod fleet;
pub mod html;
mod html_ports;
mod html_shapes;
pub mod jsonl;
pub mod junit;
pub mod model;
pub mod ports;
pub mod series;
pub mod summary;
mod svg;
#[cfg(test)]
mod testdata;
pub mod ticks;

use crate::events::{Event, EventKind, EventSink, SinkError, Sinks, Verdict};
pub use error::ReportError;
pub use model::{describe, Capped, ClassFindings, Cut, CycleEnd, CycleRecord, RunModel, RunStart, Totals, Verified};
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
        self.emit(&Event::new(t_ns, EventKind::RunEnded { verdict, exit_code: verdict.exit_code() }));
        match self.first_error {
            Some(e) => Err(e),
            None => Ok(verdict),
        }
    }
}

/// A file report: folds the events and writes `path` (whole, through a temporary file and a
/// rename, so a reader never sees half a report) when the run ends. Its memory is bounded
/// whatever the run's length (see [`model`]).
pub struct FileReport {
    path: PathBuf,
    kind: Kind,
}

enum Kind {
    /// `summary.json`, `report.html`: rendered from the model.
    Model { model: Box<RunModel>, render: fn(&RunModel) -> String },
    /// `junit.xml`: cases spooled as cycles close (`None` once written).
    Junit(Option<Box<junit::Junit<Spool>>>),
}

impl FileReport {
    pub fn new(path: PathBuf, render: fn(&RunModel) -> String) -> Self {
        FileReport { path, kind: Kind::Model { model: Box::default(), render } }
    }

    /// `junit.xml` at `path`, its cases spooled to `spool` (created when the first case is).
    pub fn junit(path: PathBuf, spool: PathBuf) -> Self {
        FileReport { path, kind: Kind::Junit(Some(Box::new(junit::Junit::new(Spool { path: spool, file: None })))) }
    }

    fn fold(&mut self, e: &Event) {
        match &mut self.kind {
            Kind::Model { model, .. } => model.apply(e),
            Kind::Junit(Some(j)) => j.event(e),
            Kind::Junit(None) => {}
        }
    }

    /// Writes the file from the events folded so far.
    pub fn write(&mut self) -> Result<(), SinkError> {
        match &mut self.kind {
            Kind::Model { model, render } => write_atomically(&self.path, &render(model)),
            Kind::Junit(j) => {
                let Some(j) = j.take() else { return Ok(()) };
                let spool = j.spool_path().to_path_buf();
                let mut j = Some(j);
                let r = write_atomically_with(&self.path, &mut |out| j.take().map_or(Ok(()), |j| (*j).finish(out)));
                match std::fs::remove_file(&spool) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => r.and(Err(SinkError::io("cannot remove the spool", &spool, e))),
                    _ => r,
                }
            }
        }
    }
}

impl EventSink for FileReport {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.fold(e);
        if matches!(e.kind, EventKind::RunEnded { .. }) {
            self.write()?;
        }
        Ok(())
    }
}

/// Where `junit.xml`'s cases wait: a file created on the first write, truncated if it was
/// left over by a harness that died.
pub struct Spool {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl Spool {
    fn file(&mut self) -> std::io::Result<&mut std::fs::File> {
        if self.file.is_none() {
            let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&self.path)?;
            self.file = Some(f);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }
}

impl std::io::Write for Spool {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file()?.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().map_or(Ok(()), std::io::Write::flush)
    }
}

impl std::io::Read for Spool {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.file.as_mut().map_or(Ok(0), |f| f.read(buf))
    }
}

impl std::io::Seek for Spool {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.as_mut().map_or(Ok(0), |f| f.seek(pos))
    }
}

impl junit::Junit<Spool> {
    fn spool_path(&self) -> &Path {
        &self.spool().path
    }
}

pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<(), SinkError> {
    write_atomically_with(path, &mut |out| out.write_all(text.as_bytes()))
}

/// Writes `path` through a temporary file and a rename; `write` gets the temporary file.
fn write_atomically_with(path: &Path, write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>) -> Result<(), SinkError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let file = std::fs::File::create(&tmp).map_err(|e| SinkError::io("cannot write", &tmp, e))?;
    let mut out = std::io::BufWriter::new(file);
    write(&mut out).and_then(|()| out.flush()).map_err(|e| SinkError::io("cannot write", &tmp, e))?;
    drop(out);
    std::fs::rename(&tmp, path).map_err(|e| SinkError::io("cannot rename into place", path, e))
}

/// The file reports of a run directory: `summary.json`, `junit.xml`, `report.html`.
pub fn file_reports(run_dir: &Path) -> [FileReport; 3] {
    [
        FileReport::new(run_dir.join(SUMMARY_FILE), summary::render),
        FileReport::junit(run_dir.join(JUNIT_FILE), run_dir.join(crate::run_dir::JUNIT_SPOOL_FILE)),
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

/// Rebuilds `summary.json`, `junit.xml` and `report.html` from `RUN_DIR/events.jsonl`,
/// streaming the log: memory stays bounded whatever its length.
pub fn regenerate(run_dir: &Path) -> Result<Regenerated, ReportError> {
    let path = run_dir.join(EVENTS_FILE);
    let mut model = RunModel::default();
    let mut reports = file_reports(run_dir);
    let read = jsonl::for_each_event(&path, &mut |e| {
        model.apply(&e);
        for r in &mut reports {
            r.fold(&e);
        }
        Ok(())
    })?;
    if read.events == 0 {
        return Err(ReportError::Empty(path.display().to_string()));
    }
    let mut written = Vec::new();
    for mut r in reports {
        r.write()?;
        written.push(r.path);
    }
    Ok(Regenerated { model, events: read.events, torn_tail_bytes: read.torn_tail_bytes, written })
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
        assert_eq!(seen.last(), Some(&Event::new(9, EventKind::RunEnded { verdict: Verdict::Findings, exit_code: 1 })));
        let mut rec = Recorder::new(Sinks::new());
        rec.emit(&ev[0]);
        rec.emit(&Event::new(1, EventKind::HarnessError { message: "ledger unreadable".into() }));
        assert_eq!(rec.end(2).unwrap(), Verdict::Error);
    }
}
