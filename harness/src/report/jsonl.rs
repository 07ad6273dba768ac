//! `events.jsonl`: the event stream itself, one JSON object per line, appended.
//!
//! Each line is the event's envelope ([`Event`]) around its kind: `v` (the events format,
//! [`EVENTS_FORMAT`]), `host` (who recorded it: `local` until two hosts share a run), then the
//! event as one object ([`Event::to_json`]): its kind (`event`), `t_ns`, `cycle` where it
//! belongs to one, `port` where it concerns one port of the device, and the kind's own keys.
//! Lines without `v` are format 1 (written before the envelope) and read the same; a line of
//! a newer format is refused, naming it.
//!
//! Each event is written and flushed to the kernel as it happens; the file is fsync'd at
//! the end of every cycle, at a harness error and at the end of the run, so a crash of the
//! harness loses at most the cycle in progress and a power loss of the host at most that
//! too. A reader accepts a torn last line (the harness died mid-write) and refuses damage
//! anywhere else: a line in the middle that does not parse means the log is not ours.

use super::error::ReportError;
pub use crate::events::LOCAL_HOST;
use crate::events::{Event, EventKind, EventSink, SinkError};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The events format this build writes (1: bare events, before the envelope; 2: the
/// envelope; 3: `link_restored` after a link fault, where 1 and 2 wrote `power_restored`).
pub const EVENTS_FORMAT: u32 = 3;

/// Appends events to a log file.
pub struct EventLog {
    path: PathBuf,
    out: BufWriter<File>,
    /// The envelope's opening, `{"v":3,"host":"local",`, written before the keys of each
    /// event of this process.
    prefix: String,
}

impl EventLog {
    /// Opens `path` for appending, creating it if needed.
    pub fn append(path: &Path) -> Result<Self, SinkError> {
        let file =
            OpenOptions::new().create(true).append(true).open(path).map_err(|e| SinkError::io("cannot open the event log", path, e))?;
        Ok(EventLog { path: path.to_path_buf(), out: BufWriter::new(file), prefix: line_prefix(LOCAL_HOST)? })
    }

    fn sync(&mut self) -> Result<(), SinkError> {
        self.out.get_ref().sync_data().map_err(|e| SinkError::io("cannot sync the event log", &self.path, e))
    }
}

impl EventSink for EventLog {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        let mut line = match &e.host {
            None => encode_line(e, &self.prefix)?,
            Some(host) => encode_line(e, &line_prefix(host)?)?,
        };
        debug_assert!(!line.contains(&b'\n'), "serde_json escapes newlines inside strings");
        line.push(b'\n');
        let io = |err| SinkError::io("cannot write the event log", &self.path, err);
        self.out.write_all(&line).map_err(io)?;
        self.out.flush().map_err(io)?;
        if matches!(e.kind, EventKind::CycleEnded { .. } | EventKind::HarnessError { .. } | EventKind::RunEnded { .. }) {
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

/// What streaming a log found besides its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub events: usize,
    /// Length of a torn last line that was dropped (0 if none).
    pub torn_tail_bytes: usize,
}

/// Reads a log written by [`EventLog`], whole, into memory (see [`for_each_event`] to
/// stream it).
pub fn read_events(path: &Path) -> Result<LogRead, ReportError> {
    let mut events = Vec::new();
    let stats = for_each_event(path, &mut |e| {
        events.push(e);
        Ok(())
    })?;
    Ok(LogRead { events, torn_tail_bytes: stats.torn_tail_bytes })
}

/// Streams a log written by [`EventLog`] through `f`, one event at a time, in order, in
/// memory bounded by its longest line.
pub fn for_each_event(path: &Path, f: &mut dyn FnMut(Event) -> Result<(), ReportError>) -> Result<LogStats, ReportError> {
    let file = File::open(path).map_err(|e| SinkError::io("cannot read the event log", path, e))?;
    stream_events(BufReader::with_capacity(1 << 16, file), &path.display().to_string(), f)
        .map_err(|e| e.or_io(|cause| SinkError::io("cannot read the event log", path, cause)))
}

/// Why [`stream_events`] stopped.
pub enum StreamError {
    Report(ReportError),
    Io(std::io::Error),
}

impl StreamError {
    fn or_io(self, io: impl FnOnce(std::io::Error) -> SinkError) -> ReportError {
        match self {
            StreamError::Report(r) => r,
            StreamError::Io(e) => io(e).into(),
        }
    }
}

/// Streams log lines from `r` through `f`; `name` appears in errors. A torn last line (no
/// newline, and not an event) is dropped and counted; any other line that is not an event
/// is refused, naming its line number.
pub fn stream_events(
    mut r: impl BufRead,
    name: &str,
    f: &mut dyn FnMut(Event) -> Result<(), ReportError>,
) -> Result<LogStats, StreamError> {
    let mut stats = LogStats::default();
    let mut line = Vec::new();
    for i in 1.. {
        line.clear();
        if r.read_until(b'\n', &mut line).map_err(StreamError::Io)? == 0 {
            break;
        }
        let complete = line.ends_with(b"\n");
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match decode_line(text) {
            Ok((_, e)) => {
                stats.events += 1;
                f(e).map_err(StreamError::Report)?
            }
            // Only the last line can be torn, and a torn line has no newline: the writer
            // ends every event with one, in the same write.
            Err(_) if !complete => stats.torn_tail_bytes = line.len(),
            Err(e) => return Err(StreamError::Report(ReportError::BadLine { path: name.to_string(), line: i, message: e.to_string() })),
        }
    }
    Ok(stats)
}

/// The opening of a line of the current format recorded by `host`, up to the event's keys.
fn line_prefix(host: &str) -> Result<String, SinkError> {
    Ok(format!("{{\"v\":{EVENTS_FORMAT},\"host\":{},", serde_json::to_string(host)?))
}

/// One event in its envelope (`prefix` is the envelope's opening, up to the event's keys).
fn encode_line(e: &Event, prefix: &str) -> Result<Vec<u8>, SinkError> {
    let body = e.to_json()?;
    // An event always serialises as a non-empty object: `{"event":...}`.
    debug_assert!(body.starts_with(b"{\"event\":"));
    let mut line = Vec::with_capacity(prefix.len() + body.len());
    line.extend_from_slice(prefix.as_bytes());
    line.extend_from_slice(&body[1..]);
    Ok(line)
}

/// What a line's envelope says (the host and port are the event's too).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope {
    /// The events format of the line (1 for a line without an envelope).
    pub format: u32,
    pub host: Option<String>,
    pub port: Option<crate::port::PortId>,
}

/// Why a line of the event log is not an event.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Written by a newer faultline, or not by faultline.
    #[error("events format {0} is not one this faultline reads (1 to {EVENTS_FORMAT}): a newer faultline wrote it")]
    Format(u64),
    #[error("{0}")]
    Envelope(String),
}

/// Reads one line: the envelope, then the event. The event's `host` is the line's unless
/// that is [`LOCAL_HOST`] (this process's name for itself).
pub fn decode_line(text: &[u8]) -> Result<(Envelope, Event), LineError> {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(text)?;
    let mut env = Envelope { format: 1, ..Envelope::default() };
    if let Some(f) = v.remove("v") {
        let f = f.as_u64().ok_or_else(|| LineError::Envelope(format!("`v` must be the events format, a number (found {f})")))?;
        if f == 0 || f > u64::from(EVENTS_FORMAT) {
            return Err(LineError::Format(f));
        }
        env.format = f as u32;
        env.host = match v.remove("host") {
            None => None,
            Some(serde_json::Value::String(h)) => Some(h),
            Some(other) => return Err(LineError::Envelope(format!("`host` must be a string (found {other})"))),
        };
    }
    let mut e = Event::from_object(v)?;
    env.port = e.port;
    e.host = env.host.clone().filter(|h| h != LOCAL_HOST);
    Ok((env, e))
}

/// Parses log bytes; `name` appears in errors.
pub fn parse_events(bytes: &[u8], name: &str) -> Result<LogRead, ReportError> {
    let mut events = Vec::new();
    let stats = stream_events(bytes, name, &mut |e| {
        events.push(e);
        Ok(())
    })
    .map_err(|e| e.or_io(|cause| SinkError::io("cannot read", Path::new(name), cause)))?;
    Ok(LogRead { events, torn_tail_bytes: stats.torn_tail_bytes })
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
        let prefix = "{\"v\":2,\"host\":\"local\",";
        let mut bytes = Vec::new();
        for e in &ev {
            bytes.extend(encode_line(e, prefix).unwrap());
            bytes.push(b'\n');
        }
        let whole = bytes.len();
        // Every cut inside the last line loses that event only.
        let last_len = encode_line(ev.last().unwrap(), prefix).unwrap().len() + 1;
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

    #[test]
    fn a_port_window_keeps_its_own_port_key_through_the_envelope() {
        let windows: Vec<Event> = testdata::dual_run().into_iter().filter(|e| matches!(e.kind, EventKind::PortWindow { .. })).collect();
        assert_eq!(windows.len(), 6);
        for e in &windows {
            let line = encode_line(e, "{\"v\":2,\"host\":\"local\",").unwrap();
            let (env, back) = decode_line(&line).unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&line)));
            assert_eq!((env.port, &back), (e.port, e));
        }
    }

    #[test]
    fn lines_carry_the_envelope_and_logs_of_format_1_still_read() {
        let ev = testdata::run();
        let prefix = "{\"v\":3,\"host\":\"local\",";
        for e in &ev {
            let line = encode_line(e, prefix).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!((v["v"].as_u64(), v["host"].as_str()), (Some(3), Some("local")), "{v}");
            assert_eq!(v["event"].as_str().unwrap(), e.kind_name());
            assert_eq!(v["t_ns"].as_u64(), Some(e.t_ns));
            assert_eq!(v["cycle"].as_u64().map(|c| c as u32), e.cycle.filter(|_| v.get("cycle").is_some()));
            let (env, back) = decode_line(&line).unwrap();
            assert_eq!((env.format, env.host.as_deref(), back), (3, Some("local"), e.clone()));
            // Format 1: the bare event, as faultline wrote it before the envelope.
            let (env1, back1) = decode_line(&e.to_json().unwrap()).unwrap();
            assert_eq!((env1.format, env1.host, back1), (1, None, e.clone()));
        }
        let newer = br#"{"v":4,"host":"local","event":"run_ended","t_ns":1,"verdict":"clean","exit_code":0}"#;
        let err = decode_line(newer).unwrap_err().to_string();
        assert!(err.contains("events format 4") && err.contains("newer"), "{err}");
        let with_port = br#"{"v":2,"host":"b","port":1,"event":"cycle_started","t_ns":1,"cycle":2}"#;
        let (env, e) = decode_line(with_port).unwrap();
        assert_eq!(
            (env.host.as_deref(), env.port, e),
            (
                Some("b"),
                Some(crate::port::PortId(1)),
                Event {
                    host: Some("b".into()),
                    ..Event::in_cycle(1, 2, EventKind::CycleStarted { fault: None, off_time_ms: None }).on_port(crate::port::PortId(1))
                }
            )
        );
    }

    #[test]
    fn a_link_fault_ends_in_link_restored_and_older_logs_with_power_restored_still_read() {
        // Formats 1 and 2 wrote `power_restored` after a link reset too; they read as they were.
        for old in [
            &br#"{"v":2,"host":"local","event":"power_restored","t_ns":7,"cycle":1}"#[..],
            br#"{"event":"power_restored","t_ns":7,"cycle":1}"#,
        ] {
            assert_eq!(decode_line(old).unwrap().1, Event::in_cycle(7, 1, EventKind::PowerRestored { off_us: None }));
        }
        let line = encode_line(&Event::in_cycle(7, 1, EventKind::LinkRestored {}), "{\"v\":3,\"host\":\"local\",").unwrap();
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.contains(r#""event":"link_restored""#), "{text}");
        assert_eq!(
            decode_line(&line).unwrap(),
            (Envelope { format: 3, host: Some("local".into()), port: None }, Event::in_cycle(7, 1, EventKind::LinkRestored {}))
        );
    }
}
