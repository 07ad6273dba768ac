//! A small QMP client (QEMU Machine Protocol: JSON lines over a unix socket): the greeting,
//! `qmp_capabilities`, commands, and the events that arrive meanwhile.
//!
//! Hand-written over serde_json on purpose: the `qapi` crate generates the whole QAPI schema
//! of one QEMU release (hundreds of types, a long build on two cores) for the three commands
//! the lab sends, and its async client brings tokio; the protocol itself is a JSON object per
//! line.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// What went wrong talking to QEMU.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("cannot connect to QMP at {sock}")]
    Connect {
        sock: String,
        #[source]
        source: std::io::Error,
    },
    #[error("QMP: read failed")]
    Read(#[source] std::io::Error),
    #[error("QMP: write failed")]
    Write(#[source] std::io::Error),
    /// Setting the socket's read timeout or cloning it.
    #[error("QMP: the socket")]
    Socket(#[source] std::io::Error),
    #[error("QMP: QEMU closed the connection")]
    Closed,
    #[error("QMP: not JSON: {line:?}")]
    NotJson {
        line: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("QMP: expected the greeting, got {0}")]
    NoGreeting(Value),
    #[error("QMP {cmd}: {desc}")]
    Refused { cmd: String, desc: String },
    #[error("QMP {cmd}: unexpected reply {reply}")]
    Unexpected { cmd: String, reply: Value },
    #[error("QMP: no {name} event within {timeout:?}")]
    NoEvent { name: String, timeout: Duration },
}

type Result<T, E = QmpError> = std::result::Result<T, E>;

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events received while waiting for replies (`{"event": ..., "data": ...}`), oldest first.
    pub events: Vec<Value>,
}

impl Qmp {
    /// Connects (retrying until `timeout`: QEMU creates the socket as it starts), reads the
    /// greeting and leaves negotiation mode.
    pub fn connect(sock: &Path, timeout: Duration) -> Result<Qmp> {
        let t0 = Instant::now();
        let stream = loop {
            match UnixStream::connect(sock) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() < timeout => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(source) => return Err(QmpError::Connect { sock: sock.display().to_string(), source }),
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(QmpError::Socket)?;
        let mut q = Qmp { reader: BufReader::new(stream.try_clone().map_err(QmpError::Socket)?), writer: stream, events: Vec::new() };
        q.greeting()?;
        q.execute("qmp_capabilities", json!({}))?;
        Ok(q)
    }

    /// Reads up to the greeting, keeping the events that came before it. QEMU sends the
    /// greeting first as a rule, but an event raised while a client is being accepted can
    /// reach it first (seen here with QEMU 7.2: a `RESUME` ahead of the greeting, on a
    /// connection made as the machine started; other QMP clients report the same since QEMU
    /// 4.0, kata-containers/govmm#90). Anything else first is refused.
    fn greeting(&mut self) -> Result<()> {
        loop {
            let v = self.read()?;
            if v.get("QMP").is_some() {
                return Ok(());
            }
            if v.get("event").is_none() {
                return Err(QmpError::NoGreeting(v));
            }
            self.events.push(v);
        }
    }

    fn read(&mut self) -> Result<Value> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).map_err(QmpError::Read)? == 0 {
            return Err(QmpError::Closed);
        }
        serde_json::from_str(&line).map_err(|source| QmpError::NotJson { line, source })
    }

    /// Runs `cmd` with `args`; its `return` value, or an error with QEMU's `desc`.
    pub fn execute(&mut self, cmd: &str, args: Value) -> Result<Value> {
        let mut msg = json!({ "execute": cmd, "arguments": args });
        if let Some(o) = msg.as_object_mut().filter(|_| args.as_object().is_some_and(|o| o.is_empty())) {
            o.remove("arguments");
        }
        writeln!(self.writer, "{msg}").map_err(QmpError::Write)?;
        loop {
            let v = self.read()?;
            if v.get("event").is_some() {
                self.events.push(v);
            } else if let Some(r) = v.get("return") {
                return Ok(r.clone());
            } else if let Some(e) = v.get("error") {
                let desc = e.get("desc").and_then(Value::as_str).unwrap_or("error without a description").to_string();
                return Err(QmpError::Refused { cmd: cmd.to_string(), desc });
            } else {
                return Err(QmpError::Unexpected { cmd: cmd.to_string(), reply: v });
            }
        }
    }

    /// Waits up to `timeout` for an event named `name` whose data matches `pred` (events
    /// already received count).
    pub fn wait_event(&mut self, name: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Result<Value> {
        let matches = |v: &Value| v.get("event").and_then(Value::as_str) == Some(name) && pred(v.get("data").unwrap_or(&Value::Null));
        if let Some(i) = self.events.iter().position(matches) {
            return Ok(self.events.remove(i));
        }
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            self.reader
                .get_ref()
                .set_read_timeout(Some((timeout - t0.elapsed()).max(Duration::from_millis(1))))
                .map_err(QmpError::Socket)?;
            let v = match self.read() {
                Ok(v) => v,
                Err(_) if t0.elapsed() >= timeout => break,
                Err(e) => return Err(e),
            };
            if matches(&v) {
                self.reader.get_ref().set_read_timeout(Some(Duration::from_secs(30))).map_err(QmpError::Socket)?;
                return Ok(v);
            }
            self.events.push(v);
        }
        self.reader.get_ref().set_read_timeout(Some(Duration::from_secs(30))).map_err(QmpError::Socket)?;
        Err(QmpError::NoEvent { name: name.to_string(), timeout })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// Serves `lines` to the first client, then answers every command with `{"return": {}}`.
    fn serve(lines: &'static [&'static str]) -> (tempfile::TempDir, std::thread::JoinHandle<()>) {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("qmp.sock");
        let l = UnixListener::bind(&sock).unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            for line in lines {
                writeln!(s, "{line}").unwrap();
            }
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut cmd = String::new();
            while r.read_line(&mut cmd).unwrap_or(0) > 0 {
                writeln!(s, r#"{{"return": {{}}}}"#).unwrap();
                cmd.clear();
            }
        });
        (dir, h)
    }

    const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}"#;
    const RESUME: &str = r#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "RESUME"}"#;

    #[test]
    fn an_event_ahead_of_the_greeting_is_kept_and_the_connection_goes_on() {
        let (dir, _h) = serve(&[RESUME, GREETING]);
        let mut q = Qmp::connect(&dir.path().join("qmp.sock"), Duration::from_secs(5)).unwrap();
        assert_eq!(q.events.len(), 1, "{:?}", q.events);
        q.wait_event("RESUME", Duration::from_secs(1), |_| true).unwrap();
        assert_eq!(q.execute("query-status", json!({})).unwrap(), json!({}));
    }

    #[test]
    fn anything_else_ahead_of_the_greeting_is_refused_and_named() {
        let (dir, _h) = serve(&[r#"{"return": {}}"#, GREETING]);
        let e = Qmp::connect(&dir.path().join("qmp.sock"), Duration::from_secs(5)).err().expect("refused");
        assert!(e.to_string().contains(r#"expected the greeting, got {"return":{}}"#), "{e}");
    }
}
