//! The coordinator's side: a transport command whose stdin and stdout carry the protocol (as
//! `rsync -e` and `GIT_SSH_COMMAND` do), by default `ssh -o BatchMode=yes HOST faultline agent
//! --stdio` through the system's OpenSSH client, so the lab's keys, `known_hosts`, jump hosts
//! and ControlMaster keep working. faultline never turns host-key checking off; with
//! `BatchMode` an unknown host key or a refused user key fails at once instead of prompting,
//! and what ssh said is turned into what to do about it.

use crate::remote::proto::{self, AgentInfo, Answer, Frame, FrameError, Nonce, Op};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much of the transport's stderr is kept for error messages.
const STDERR_KEPT: usize = 8 << 10;

pub use crate::transport::{Transport, TransportError, SSH};

/// An operation the agent could not do on its host, with its reason as it gave it (the
/// session is fine: the host answered).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AgentFailed(pub String);

/// Why a session could not be had or went wrong.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("{host}: cannot start the transport {argv:?}: {source}")]
    Spawn { host: String, argv: Vec<String>, source: std::io::Error },
    #[error(
        "{host}: its host key is not one known_hosts trusts (ssh said: {said}). faultline never turns host-key checking off: check \
         the key's fingerprint with the host's owner and add it to known_hosts (ssh-keyscan prints it)"
    )]
    HostKey { host: String, said: String },
    #[error("{host} refused the user key (ssh said: {said}): add the coordinator's public key to the agent user's authorized_keys")]
    UserKey { host: String, said: String },
    #[error("{host} cannot be reached (ssh said: {said})")]
    Unreachable { host: String, said: String },
    #[error("{host}: no faultline agent answered (the transport said: {said}); is faultline on the PATH of the agent's user there?")]
    NoAgent { host: String, said: String },
    #[error("{host}: the agent refused: {why} (it speaks protocol {ours:?}; this coordinator offered {theirs:?})")]
    Refused { host: String, why: String, ours: Vec<u32>, theirs: Vec<u32> },
    #[error("{host}: {why}")]
    Protocol { host: String, why: String },
    #[error("{host}: no answer to {what} within {timeout:?}: the transport stalled or the host is gone (inconclusive, not a finding)")]
    Timeout { host: String, what: String, timeout: Duration },
    #[error("{host}: the transport ended{}", if said.is_empty() { String::new() } else { format!(" (it said: {said})") })]
    Ended { host: String, said: String },
}

/// The agent's clock against the coordinator's: `agent = coordinator + offset_ns`, known to
/// within `uncertainty_ns` (half the shortest round trip).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockOffset {
    pub offset_ns: i64,
    pub uncertainty_ns: u64,
    pub samples: u32,
    pub best_rtt_ns: u64,
}

/// One frame the coordinator sent an agent, for the run's audit log: when (the coordinator's
/// monotonic clock), to whom, and what, in a line (an operation with its arguments but not
/// its bulk: a cycle names its number, a history its record count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    pub t_ns: u64,
    pub host: String,
    pub seq: u64,
    pub what: String,
}

/// Where a session reports each frame it sends.
pub type Audit = Box<dyn FnMut(&Sent) + Send>;

/// What a frame the coordinator sends is, in a line.
fn describe(f: &Frame) -> (u64, String) {
    match f {
        Frame::Hello { versions, coordinator, .. } => (0, format!("hello versions {versions:?} from {coordinator}")),
        Frame::Request { seq, op, .. } => (
            *seq,
            match op {
                Op::Clock {} => "clock".into(),
                Op::Bye {} => "bye".into(),
                Op::Open { target, identity, expect, queue_depth, resets } => {
                    format!("open {target} identity {identity:?} expecting {expect:?} queue depth {queue_depth} resets {resets:?}")
                }
                Op::Cycle(r) => format!("cycle {} first id {} port {} cut {:?} reset {:?}", r.cycle, r.first_id, r.port, r.cut, r.reset),
                Op::History { first, records, share } => format!("history of share {share} {} records from {first}", records.len()),
                Op::Verify { regions, digest, share } => format!("verify {} regions of share {share} digest {digest}", regions.len()),
                Op::Probe { at } => format!("probe at {at}"),
                Op::WaitReady { at, timeout_ms } => format!("wait ready at {at} within {timeout_ms} ms"),
                Op::Release {} => "release".into(),
                Op::SectorHashes { ranges, sector } => format!("sector hashes of {} ranges, {sector}-byte sectors", ranges.len()),
                Op::Health {} => "health".into(),
                Op::ReadLoad { span, run_ms } => format!("read load over [{}, {}) for {run_ms} ms", span[0], span[1]),
                Op::Prefill { header, port } => {
                    format!("prefill port {port} bytes {}..{}", header.workload.span_start, header.workload.span_end)
                }
            },
        ),
        Frame::Durable { seq, upto, .. } => (*seq, format!("durable up to record {upto}")),
        Frame::CutDone { seq, failed, .. } => {
            (*seq, format!("cut done{}", failed.as_ref().map(|f| format!(", failed: {f}")).unwrap_or_default()))
        }
        Frame::Stop { seq, .. } => (*seq, "stop".into()),
        other => (0, format!("{other:?}")),
    }
}

/// A session with one agent.
pub struct Session {
    /// Told of every frame sent (`set_audit`).
    audit: Option<Audit>,
    pub(super) host: String,
    child: Child,
    stdin: Option<ChildStdin>,
    frames: super::frames::AgentFrames,
    stderr: Arc<Mutex<String>>,
    /// Set when the transport's stderr has ended (all it said is in `stderr`).
    stderr_done: Arc<AtomicBool>,
    pub(super) run: Nonce,
    pub(super) seq: u64,
    /// History records the agent holds of each share ([`Session::sync_history`]).
    pub(super) history_sent: std::collections::BTreeMap<crate::port::PortId, u64>,
    /// The version the agent chose.
    pub version: u32,
    pub agent: AgentInfo,
}

/// Starts `t` for `host` and greets the agent for `run`.
pub fn dial(t: &Transport, host: &str, run: &Nonce, coordinator: &str, timeout: Duration) -> Result<Session, DialError> {
    // In a process group of its own: a `kill` host power switch cuts the whole of it (the
    // agent, or ssh and what it started), and a signal to the coordinator's group does not.
    let mut child = Command::new(&t.argv[0])
        .args(&t.argv[1..])
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| DialError::Spawn { host: host.into(), argv: t.argv.clone(), source })?;
    let stdout = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    // At most `COORDINATOR_QUEUE_BYTES` of the agent's frames wait here; past that the
    // reader waits.
    let frames = super::frames::AgentFrames::read(stdout);
    let stderr = Arc::new(Mutex::new(String::new()));
    let kept = Arc::clone(&stderr);
    let stderr_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&stderr_done);
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        loop {
            let n = match err.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut s = kept.lock().unwrap_or_else(|p| p.into_inner());
            s.push_str(&String::from_utf8_lossy(&b[..n]));
            if s.len() > STDERR_KEPT {
                let cut = s.len() - STDERR_KEPT;
                let cut = (cut..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
                s.drain(..cut);
            }
        }
        done.store(true, Ordering::SeqCst);
    });
    let stdin = child.stdin.take();
    let mut s = Session {
        audit: None,
        host: host.into(),
        child,
        stdin,
        frames,
        stderr,
        stderr_done,
        run: run.clone(),
        seq: 0,
        history_sent: Default::default(),
        version: 0,
        agent: AgentInfo { software: String::new(), host: String::new(), pid: 0, allow_exec: false },
    };
    let hello = Frame::Hello { versions: proto::VERSIONS.to_vec(), run: run.clone(), coordinator: coordinator.into() };
    s.send(&hello)?;
    match s.next("the hello", timeout)? {
        Frame::Welcome { version, agent } if proto::VERSIONS.contains(&version) => {
            s.version = version;
            s.agent = agent;
            Ok(s)
        }
        Frame::Welcome { version, .. } => Err(s.protocol(format!(
            "the agent chose protocol {version}, which this coordinator did not offer (it speaks {:?})",
            proto::VERSIONS
        ))),
        Frame::Refused { why, ours, theirs } => Err(DialError::Refused { host: host.into(), why, ours, theirs }),
        other => Err(s.protocol(format!("the agent answered the hello with {other:?}"))),
    }
}

impl Session {
    fn said(&self) -> String {
        let s = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        s.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" / ")
    }

    pub(super) fn protocol(&self, why: String) -> DialError {
        DialError::Protocol { host: self.host.clone(), why }
    }

    /// What the transport's end means, from what it said on stderr.
    pub(super) fn ended(&mut self) -> DialError {
        // Let the transport finish saying why (ssh prints, then exits).
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && (matches!(self.child.try_wait(), Ok(None)) || !self.stderr_done.load(Ordering::SeqCst)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let said = self.said();
        let host = self.host.clone();
        let code = self.child.try_wait().ok().flatten().and_then(|s| s.code());
        if said.contains("Host key verification failed") || said.contains("REMOTE HOST IDENTIFICATION HAS CHANGED") {
            DialError::HostKey { host, said }
        } else if said.contains("Permission denied") {
            DialError::UserKey { host, said }
        } else if ["Connection refused", "Could not resolve hostname", "No route to host", "Connection timed out", "Network is unreachable"]
            .iter()
            .any(|w| said.contains(w))
        {
            DialError::Unreachable { host, said }
        } else if code == Some(127) || said.contains("command not found") || said.contains("No such file or directory") {
            DialError::NoAgent { host, said }
        } else {
            DialError::Ended { host, said }
        }
    }

    /// Reports every frame sent from now on to `audit`.
    pub fn set_audit(&mut self, audit: Audit) {
        self.audit = Some(audit);
    }

    pub(super) fn send(&mut self, f: &Frame) -> Result<(), DialError> {
        if let Some(a) = self.audit.as_mut() {
            let (seq, what) = describe(f);
            a(&Sent { t_ns: faultline_drivers::monotonic_ns(), host: self.host.clone(), seq, what });
        }
        let Some(w) = self.stdin.as_mut() else { return Err(self.ended()) };
        if proto::write_frame(w, f).is_err() {
            return Err(self.ended());
        }
        Ok(())
    }

    pub(super) fn next(&mut self, what: &str, timeout: Duration) -> Result<Frame, DialError> {
        match self.frames.recv_timeout(timeout) {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(FrameError::Closed)) | Err(RecvTimeoutError::Disconnected) => Err(self.ended()),
            Ok(Err(e)) => Err(self.protocol(format!("answering {what}: {e}"))),
            Err(RecvTimeoutError::Timeout) => Err(DialError::Timeout { host: self.host.clone(), what: what.into(), timeout }),
        }
    }

    /// The next frame if one comes within `timeout`, `None` if none does.
    pub(super) fn poll(&mut self, what: &str, timeout: Duration) -> Result<Option<Frame>, DialError> {
        match self.next(what, timeout) {
            Ok(f) => Ok(Some(f)),
            Err(DialError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sends `op` and waits for its answer.
    pub fn call(&mut self, op: Op, timeout: Duration) -> Result<Answer, DialError> {
        self.seq += 1;
        let seq = self.seq;
        let what = format!("request {seq} ({op:?})");
        self.send(&Frame::Request { run: self.run.clone(), seq, op })?;
        match self.next(&what, timeout)? {
            Frame::Reply { run, seq: s, result } if run == self.run && s == seq => Ok(result),
            Frame::Reply { run, seq: s, .. } => {
                Err(self.protocol(format!("a reply to request {s} of run {run}, where request {seq} of run {} was due", self.run)))
            }
            Frame::Refused { why, ours, theirs } => Err(DialError::Refused { host: self.host.clone(), why, ours, theirs }),
            other => Err(self.protocol(format!("{other:?} where the reply to request {seq} was due"))),
        }
    }

    /// The agent's clock against this process's, from `n` round trips (the shortest one
    /// bounds the offset best).
    pub fn clock(&mut self, n: u32, timeout: Duration) -> Result<ClockOffset, DialError> {
        let mut best: Option<(u64, i64)> = None;
        for _ in 0..n.max(1) {
            let t0 = faultline_drivers::monotonic_ns();
            let a = self.call(Op::Clock {}, timeout)?;
            let t1 = faultline_drivers::monotonic_ns();
            let Answer::Clock { monotonic_ns } = a else { return Err(self.protocol(format!("{a:?} answered a clock request"))) };
            let rtt = t1.saturating_sub(t0);
            let offset = monotonic_ns as i64 - (t0 + rtt / 2) as i64;
            if best.is_none_or(|(r, _)| rtt < r) {
                best = Some((rtt, offset));
            }
        }
        let (rtt, offset) = best.expect("at least one round trip");
        Ok(ClockOffset { offset_ns: offset, uncertainty_ns: rtt.div_ceil(2), samples: n.max(1), best_rtt_ns: rtt })
    }

    /// Says goodbye and waits for the transport to end.
    pub fn bye(mut self, timeout: Duration) -> Result<(), DialError> {
        let r = self.call(Op::Bye {}, timeout);
        self.stdin.take();
        let until = Instant::now() + timeout;
        while Instant::now() < until && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        r.map(|_| ())
    }

    /// The agent process's transport, for a whole-host fault in tests (killing it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stdin.take();
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
