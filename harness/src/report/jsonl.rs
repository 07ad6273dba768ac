//! `events.jsonl`: the event stream itself, one JSON object per line, appended.
//!
//! Each event is written and flushed to the kernel as it happens; the file is fsync'd at
//! the end of every cycle, at a harness error and at the end of the run, so a crash of the
//! harness loses at most the cycle in progress and a power loss of the host at most that
//! too. A reader accepts a torn last line (the harness died mid-write) and refuses damage
//! anywhere else: a line in the middle that does not parse means the log is not ours.

use super::error::ReportError;
use crate::events::{Event, EventSink, SinkError};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Appends events to a log file.
pub struct EventLog {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventLog {
    /// Opens `path` for appending, creating it if needed.
    pub fn append(path: &Path) -> Result<Self, SinkError> {
        let file =
            OpenOptions::new().create(true).append(true).open(path).map_err(|e| SinkError::io("cannot open the event log", path, e))?;
        Ok(EventLog { path: path.to_path_buf(), out: BufWriter::new(file) })
    }

    fn sync(&mut self) -> Result<(), SinkError> {
        self.out.get_ref().sync_data().map_err(|e| SinkError::io("cannot sync the event log", &self.path, e))
    }
}

impl EventSink for EventLog {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        let mut line = serde_json::to_vec(e)?;
        debug_assert!(!line.contains(&b'\n'), "serde_json escapes newlines inside strings");
        line.push(b'\n');
        let io = |err| SinkError::io("cannot write the event log", &self.path, err);
        self.out.write_all(&line).map_err(io)?;
        self.out.flush().map_err(io)?;
        if matches!(e, Event::CycleEnded { .. } | Event::HarnessError { .. } | Event::RunEnded { .. }) {
            self.sync()?;
        }
        Ok(())
    }
}

/// The events read back from a log.
#[derive(Debug, Default)]
pub struct LogRead {
    pub events: Vec<Event>,
    /// Length of a torn last line that was dropped (0 if none).
    pub torn_tail_bytes: usize,
}

/// Reads a log written by [`EventLog`].
pub fn read_events(path: &Path) -> Result<LogRead, ReportError> {
    let bytes = std::fs::read(path).map_err(|e| SinkError::io("cannot read the event log", path, e))?;
    parse_events(&bytes, &path.display().to_string())
}

/// Parses log bytes; `name` appears in errors.
pub fn parse_events(bytes: &[u8], name: &str) -> Result<LogRead, ReportError> {
    let mut out = LogRead::default();
    let mut lines = bytes.split_inclusive(|&b| b == b'\n').enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let last = lines.peek().is_none();
        let complete = line.ends_with(b"\n");
        let text = line.strip_suffix(b"\n").unwrap_or(line);
        match serde_json::from_slice::<Event>(text) {
            Ok(e) => out.events.push(e),
            // Only the last line can be torn, and a torn line has no newline: the writer
            // ends every event with one, in the same write.
            Err(_) if last && !complete => out.torn_tail_bytes = line.len(),
            Err(e) => return Err(ReportError::BadLine { path: name.to_string(), line: i + 1, message: e.to_string() }),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn a_log_reads_back_event_for_event_and_appends() {
        let dir = std::env::temp_dir().join(format!("faultline-jsonl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("events.jsonl");
        let _ = std::fs::remove_file(&path);
        let ev = testdata::run();
        let (a, b) = ev.split_at(5);
        for part in [a, b] {
            let mut log = EventLog::append(&path).unwrap();
            for e in part {
                log.event(e).unwrap();
            }
        }
        let back = read_events(&path).unwrap();
        assert_eq!((back.events, back.torn_tail_bytes), (ev, 0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_torn_last_line_is_dropped_but_damage_in_the_middle_is_refused() {
        let ev = testdata::run();
        let mut bytes = Vec::new();
        for e in &ev {
            bytes.extend(serde_json::to_vec(e).unwrap());
            bytes.push(b'\n');
        }
        let whole = bytes.len();
        // Every cut inside the last line loses that event only.
        let last_len = serde_json::to_vec(ev.last().unwrap()).unwrap().len() + 1;
        for cut in (whole - last_len + 1)..whole - 1 {
            let r = parse_events(&bytes[..cut], "log").unwrap();
            assert_eq!(r.events, ev[..ev.len() - 1], "cut at {cut}");
            assert_eq!(r.torn_tail_bytes, cut - (whole - last_len));
        }
        // Only the newline lost: the event is whole, and kept.
        assert_eq!(parse_events(&bytes[..whole - 1], "log").unwrap().events, ev);
        // A damaged line with more after it is not a torn tail.
        let mut bad = bytes.clone();
        let second = bad.iter().position(|&b| b == b'\n').unwrap() + 3;
        bad[second] = b'#';
        let err = parse_events(&bad, "log").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(parse_events(b"", "log").unwrap().events.is_empty());
    }
}
