//! The agent's side (`faultline agent --stdio`): one coordinator per process, over the
//! process's stdin and stdout (an ssh session, a local pipe, a guest's serial port). It
//! answers the handshake, then each typed request of the run it was greeted for, and refuses,
//! saying why in a last frame, anything else: another version, another run's frame, an
//! oversized or malformed frame, a request out of order.
//!
//! A port's cycle ([`Op::Cycle`]) runs the writer here and streams what the coordinator's
//! ledger needs as it happens ([`stream`](super::stream)): the agent keeps no record of its
//! own, so a host that loses power loses nothing the coordinator had not been told.

use super::proto::{self, Answer, CycleRequest, CycleSummary, Frame, FrameError, Nonce, Op, TargetInfo};
use super::stream::{Link, StreamLedger};
use super::verify::{send_part, Mirror};
use crate::format::Format;
use crate::workload::Layout;
use crate::writer::{run_cycle, CycleOptions, Fill, StopToken};
use faultline_drivers::{open_target, BlockTarget, OpenSpec};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// What the agent says of itself, and what it may open.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub software: String,
    pub host: String,
    pub pid: u32,
    pub allow_exec: bool,
    /// The targets this agent may open (its own command line's `--target`s): a path or an
    /// NBD URI each. An `open` naming anything else is refused.
    pub targets: Vec<String>,
}

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The coordinator said goodbye.
    Bye,
    /// The coordinator's side of the stream closed (it died, or the transport did).
    Closed,
}

/// Why the agent refused to go on (it sent the coordinator a `refused` frame saying so).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refused the coordinator: {0}")]
    Refused(String),
    #[error("the session failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Frames as the reader thread hands them over.
pub(crate) type Inbox = Receiver<Result<Frame, FrameError>>;

/// Reads frames from `r` on a thread of its own until the stream ends or a frame is bad
/// (the last item is that error), so that a cycle can hear the coordinator while it writes.
fn reader(mut r: impl Read + Send + 'static) -> Inbox {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || loop {
        let f = proto::read_frame(&mut r);
        let end = f.is_err();
        if tx.send(f).is_err() || end {
            return;
        }
    });
    rx
}

/// Sends a `refused` frame saying why, and the error to end the session with.
pub(crate) fn refuse(w: &mut dyn Write, why: String, theirs: Vec<u32>) -> ServeError {
    let mut w = w;
    let _ = proto::write_frame(&mut w, &Frame::Refused { why: why.clone(), ours: proto::VERSIONS.to_vec(), theirs });
    ServeError::Refused(why)
}

/// Serves one coordinator on `r`/`w` until it says goodbye or goes away.
pub fn serve(r: impl Read + Send + 'static, w: &mut impl Write, o: &ServeOptions) -> Result<Ended, ServeError> {
    let inbox = reader(r);
    let ours = proto::VERSIONS.to_vec();
    let (run, coordinator) = match inbox.recv().unwrap_or(Err(FrameError::Closed)) {
        Ok(Frame::Hello { versions, run, coordinator }) => match proto::choose(&versions) {
            Some(v) => {
                let agent = proto::AgentInfo { software: o.software.clone(), host: o.host.clone(), pid: o.pid, allow_exec: o.allow_exec };
                proto::write_frame(w, &Frame::Welcome { version: v, agent })?;
                (run, coordinator)
            }
            None => {
                let why = format!("this agent speaks protocol version(s) {ours:?}; coordinator {coordinator} offered {versions:?}");
                return Err(refuse(w, why, versions));
            }
        },
        Ok(other) => return Err(refuse(w, format!("the first frame must be a hello, not {}", kind(&other)), Vec::new())),
        Err(FrameError::Closed) => return Ok(Ended::Closed),
        Err(e) => return Err(refuse(w, format!("before the hello: {e}"), Vec::new())),
    };
    let mut port = Port { target: None, opened: None };
    let mut mirror = Mirror::default();
    let mut last_seq = 0u64;
    loop {
        let f = match inbox.recv().unwrap_or(Err(FrameError::Closed)) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Ok(Ended::Closed),
            Err(e) => return Err(refuse(w, e.to_string(), Vec::new())),
        };
        let (seq, op) = match f {
            Frame::Request { run: r2, .. } if r2 != run => {
                let why = format!("a frame of run {r2}; this agent serves run {run} (of coordinator {coordinator}), and no other");
                return Err(refuse(w, why, Vec::new()));
            }
            Frame::Request { seq, .. } if seq <= last_seq => {
                return Err(refuse(w, format!("request {seq} after request {last_seq}: requests are numbered upwards"), Vec::new()));
            }
            Frame::Request { seq, op, .. } => (seq, op),
            Frame::Hello { coordinator: c2, run: r2, .. } => {
                let why = format!("a second hello (coordinator {c2}, run {r2}): this agent serves coordinator {coordinator}, run {run}");
                return Err(refuse(w, why, Vec::new()));
            }
            other => return Err(refuse(w, format!("a {} frame outside a cycle", kind(&other)), Vec::new())),
        };
        last_seq = seq;
        let result = match op {
            Op::Clock => Answer::Clock { monotonic_ns: faultline_drivers::monotonic_ns() },
            Op::Bye => {
                proto::write_frame(w, &Frame::Reply { run: run.clone(), seq, result: Answer::Bye })?;
                return Ok(Ended::Bye);
            }
            Op::Open { target, identity, expect, queue_depth, resets } => {
                port.open(o, &target, identity.as_deref(), &expect, queue_depth, &resets)
            }
            Op::History { first, records } => mirror.apply(first, records),
            Op::Probe { at } => match port.target.as_mut() {
                None => failed("no target is open"),
                Some(t) => Answer::Probed { error: crate::runner::dut::probe(t.as_mut(), at, PROBE_TIMEOUT).err().map(|e| e.to_string()) },
            },
            Op::WaitReady { at, timeout_ms } => port.wait_ready(at, Duration::from_millis(timeout_ms)),
            Op::Release => {
                port.target = None;
                Answer::Released
            }
            Op::SectorHashes { ranges, sector } => match port.target.as_mut() {
                None => failed("no target is open"),
                Some(t) => {
                    let ranges: Vec<(u64, u64)> = ranges.iter().map(|r| (r[0], r[1])).collect();
                    let hashes = crate::runner::dut::sector_hashes_on(t.as_mut(), &ranges, sector);
                    for c in hashes.chunks(super::verify::PART_ITEMS) {
                        let part = super::proto::VerifiedPart::Hashes(c.iter().map(|h| h.map(|h| super::verify::hex(&h))).collect());
                        send_part(w, &run, seq, part)?;
                    }
                    Answer::Hashed { count: hashes.len() as u64 }
                }
            },
            Op::Health => port.health(),
            Op::Prefill { header, port: which } => match port.target.as_mut() {
                None => failed("no target is open: open one first"),
                Some(t) => prefill(t.as_mut(), &header, which),
            },
            Op::Verify { regions, digest } => {
                let Some(t) = port.target.as_mut() else {
                    proto::write_frame(w, &Frame::Reply { run: run.clone(), seq, result: failed("no target is open: open one first") })?;
                    continue;
                };
                mirror.verify(t.as_mut(), &regions, digest, &mut |part| send_part(w, &run, seq, part))?
            }
            Op::Cycle(req) => {
                let Some(t) = port.target.as_mut() else {
                    proto::write_frame(w, &Frame::Reply { run: run.clone(), seq, result: failed("no target is open: open one first") })?;
                    continue;
                };
                let listed = port.opened.as_ref().map(|(l, _, _)| l.clone()).unwrap_or_default();
                match cycle(t.as_mut(), &listed, &req, &inbox, w, &run, seq)? {
                    Some(a) => a,
                    None => return Ok(Ended::Closed),
                }
            }
        };
        proto::write_frame(w, &Frame::Reply { run: run.clone(), seq, result })?;
    }
}

/// Writes the port's share with its prefill pattern and flushes; the coordinator records it.
fn prefill(target: &mut dyn BlockTarget, h: &crate::ledger::RunHeader, port: crate::port::PortId) -> Answer {
    let layout = match Layout::new(h.workload.clone(), h.sector_bytes) {
        Ok(l) => l,
        Err(e) => return failed(format!("the run's workload: {e}")),
    };
    let format = Format::new(h.run_id, h.sector_bytes as usize);
    match crate::writer::prefill_data(target, &layout, &format, port) {
        Ok(()) => Answer::Prefilled { span_start: h.workload.span_start, span_end: h.workload.span_end },
        Err(e) => failed(format!("the prefill: {e}")),
    }
}

fn failed(why: impl Into<String>) -> Answer {
    Answer::Failed { why: why.into() }
}

/// How long a probe's read may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The agent's one port: its open target, and how it was opened (to open it again).
struct Port {
    target: Option<Box<dyn BlockTarget>>,
    /// The listed target, the identity it was found with, the queue depth.
    opened: Option<(String, String, u32)>,
}

impl Port {
    /// The health pages of the listed target (a block device on an NVMe controller), raw.
    fn health(&self) -> Answer {
        let Some((listed, _, _)) = &self.opened else { return failed("no target was opened") };
        let path = std::path::Path::new(listed);
        if faultline_drivers::nbd::looks_like_nbd(listed) {
            return Answer::Health { smart: None, ocp: None, none: Some(format!("{listed} is an NBD export, which has no health logs")) };
        }
        let admin =
            match faultline_drivers::nvme::NvmeAdmin::open_for_block_device_in(path, &faultline_drivers::blockdev::SysRoots::system()) {
                Ok(a) => a,
                Err(e) => return Answer::Health { smart: None, ocp: None, none: Some(format!("{listed}: {e}")) },
            };
        let smart = match admin.smart_log() {
            Ok(b) => super::verify::hex(&b),
            Err(e) => return failed(format!("{listed}: SMART / health log: {e}")),
        };
        match admin.ocp_smart_log() {
            Ok(ocp) => Answer::Health { smart: Some(smart), ocp: ocp.map(|b| super::verify::hex(&b)), none: None },
            Err(e) => failed(format!("{listed}: OCP SMART log: {e}")),
        }
    }

    /// Waits until the target answers a read at `at`, opening it again (the same listed
    /// target, held to the identity it had) whenever it is not open.
    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Answer {
        let Some((listed, identity, qd)) = self.opened.clone() else { return failed("no target was opened") };
        let t0 = std::time::Instant::now();
        let until = t0 + timeout;
        let mut enumerate = None;
        let mut last = String::from("not tried");
        loop {
            if self.target.is_none() {
                let spec = OpenSpec {
                    writable: true,
                    queue_depth: qd as usize,
                    expect: Default::default(),
                    allow_overwrite_signature: true,
                    io_threads: 1,
                };
                match open_target(std::path::Path::new(&listed), &spec) {
                    Ok(o) if o.target.identity() == identity => {
                        self.target = Some(o.target);
                        enumerate = Some(t0.elapsed());
                    }
                    Ok(o) => last = format!("{listed} is now {}, not {identity}", o.target.identity()),
                    Err(e) => last = format!("{listed}: {e}"),
                }
            }
            if let Some(t) = self.target.as_mut() {
                let r0 = std::time::Instant::now();
                match crate::runner::dut::probe(t.as_mut(), at, PROBE_TIMEOUT) {
                    Ok(()) => {
                        let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
                        return Answer::Ready { enumerate_ns: enumerate.map(ns), first_read_ns: ns(r0.elapsed()) };
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            if std::time::Instant::now() >= until {
                return failed(format!("{listed} did not answer a read at byte {at} within {timeout:?}: {last}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn open(
        &mut self,
        o: &ServeOptions,
        target: &str,
        identity: Option<&str>,
        expect: &proto::Expect,
        queue_depth: u32,
        resets: &[proto::HostReset],
    ) -> Answer {
        if !o.targets.iter().any(|t| t == target) {
            return failed(format!(
                "{target} is not a target this agent may open: it was started with {}",
                if o.targets.is_empty() { "no --target".to_string() } else { format!("--target {}", o.targets.join(", --target ")) }
            ));
        }
        // Every reset the run will ask of this host is found and checked before anything is
        // written (and found again at each cycle: a rescan may rename the controller).
        for r in resets {
            if let Err(why) = super::reset::Reset::open(target, *r) {
                return failed(format!(
                    "{target}: this host cannot run the run's link reset: {why} (host_link_reset needs the port's path to be an \
                     NVMe namespace on that host; for another target, cut the host's power instead: host_power_cut)"
                ));
            }
        }
        // A run that has begun wrote its own data there: its signature check was done when
        // the run was created, as `faultline write` does.
        let spec = OpenSpec {
            writable: true,
            queue_depth: queue_depth.max(1) as usize,
            expect: expect.into(),
            allow_overwrite_signature: identity.is_some(),
            io_threads: 1,
        };
        self.target = None;
        let opened = match open_target(std::path::Path::new(target), &spec) {
            Ok(o) => o,
            Err(e) => return failed(format!("{target}: {e}")),
        };
        let found = opened.target.identity();
        if let Some(want) = identity.filter(|want| *want != found) {
            return failed(format!("{target} is {found}, not the run's target {want}: refusing to write to it"));
        }
        let g = opened.target.geometry();
        self.target = Some(opened.target);
        self.opened = Some((target.to_string(), found.clone(), queue_depth));
        Answer::Opened {
            target: TargetInfo {
                identity: found,
                capacity_bytes: g.capacity_bytes,
                logical_block_bytes: g.logical_block_bytes as u64,
                physical_block_bytes: g.physical_block_bytes as u64,
                engine: opened.engine.to_string(),
            },
        }
    }
}

/// Runs request `seq`'s cycle on `target`, streaming its records. `Ok(None)`: the coordinator
/// went away mid-cycle (the writer stopped; nothing is left to answer).
fn cycle(
    target: &mut dyn BlockTarget,
    listed: &str,
    req: &CycleRequest,
    inbox: &Inbox,
    w: &mut dyn Write,
    run: &Nonce,
    seq: u64,
) -> Result<Option<Answer>, ServeError> {
    let h = &req.header;
    let layout = match Layout::new(h.workload.clone(), h.sector_bytes) {
        Ok(l) => l,
        Err(e) => return Ok(Some(failed(format!("the run's workload: {e}")))),
    };
    let format = Format::new(h.run_id, h.sector_bytes as usize);
    // The cycle's reset, found before the first write.
    let mut reset = match req.reset {
        Some(r) => match super::reset::Reset::open(listed, r.reset) {
            Ok(x) => Some((x, Duration::from_millis(r.hold_ms))),
            Err(why) => return Ok(Some(failed(format!("{listed}: cannot run the cycle's link reset: {why}")))),
        },
        None => None,
    };
    let mut report = None;
    let stop = StopToken::default();
    let wire = req.samples.then(|| crate::writer::WireSamples::new(faultline_drivers::monotonic_ns()));
    let opts = CycleOptions {
        cycle: req.cycle,
        first_id: req.first_id,
        started_at: req.started_at.clone(),
        port: req.port,
        max_writes: req.max_writes,
        duration: req.duration_ms.map(Duration::from_millis),
        cut: req.cut,
        checkpoint_every: Duration::from_millis(req.stream_every_ms.max(1)),
        drain_timeout: Duration::from_millis(req.drain_timeout_ms.max(1)),
        stop: Some(stop.clone()),
        samples: wire.clone().map(crate::writer::PortSamples::Wire),
        fill: Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    let mut link = Link::new(w, inbox, run.clone(), seq, stop, Duration::from_millis(req.drain_timeout_ms.max(1000)));
    if let Some(ws) = wire {
        link = link.with_samples(ws);
    }
    let link = RefCell::new(link);
    let mut ledger = StreamLedger::new(&link, h.clone());
    let started_ns = faultline_drivers::monotonic_ns();
    // The cut: the coordinator's (a host's power, another host's reset), then this host's
    // own reset when the request asks for one, with the writer's queue still full.
    let mut cut = || -> Result<(), crate::writer::HookError> {
        link.borrow_mut().cut()?;
        let Some((r, hold)) = reset.as_mut() else { return Ok(()) };
        let ran = r.run(*hold);
        let failed = ran.error.clone();
        report = Some(ran);
        match failed {
            Some(why) => Err(why.into()),
            None => Ok(()),
        }
    };
    // With samples (the port is judged by them), how late this host let the agent run.
    let ticking = std::sync::atomic::AtomicBool::new(req.samples);
    let (r, late) = std::thread::scope(|sc| {
        let ticker = sc.spawn(|| crate::writer::windows::tick_until_stopped(&ticking));
        let r = run_cycle(target, &layout, &format, &mut ledger, h.contract, &opts, &mut cut);
        ticking.store(false, std::sync::atomic::Ordering::Release);
        (r, ticker.join().unwrap_or_default())
    });
    drop(ledger);
    let mut l = link.into_inner();
    // The completions since the last record (those of the closing flush's wait).
    let _ = l.send_samples();
    if let Some(e) = l.fatal.take() {
        // The coordinator went away, or broke the protocol: the writer stopped at its next
        // record; nothing it did since is claimed anywhere.
        return match e {
            super::stream::Fatal::Closed => Ok(None),
            super::stream::Fatal::Refused(why) => Err(refuse(l.w, why, Vec::new())),
            super::stream::Fatal::Io(e) => Err(ServeError::Io(e)),
        };
    }
    let out = match r {
        Ok(out) => out,
        // The cut failed: the writer ended the cycle as a cut all the same and recorded it.
        Err(crate::writer::WriteError::Cut { outcome, .. }) => *outcome,
        Err(e) => return Ok(Some(failed(format!("cycle {}: {e}", req.cycle)))),
    };
    let mut summary = CycleSummary::of(out, started_ns);
    summary.reset = report;
    summary.late = late;
    Ok(Some(Answer::CycleDone { summary: Box::new(summary) }))
}

pub(crate) fn kind(f: &Frame) -> &'static str {
    match f {
        Frame::Hello { .. } => "hello",
        Frame::Welcome { .. } => "welcome",
        Frame::Refused { .. } => "refused",
        Frame::Request { .. } => "request",
        Frame::Reply { .. } => "reply",
        Frame::Records { .. } => "records",
        Frame::CutDue { .. } => "cut_due",
        Frame::Sync { .. } => "sync",
        Frame::Durable { .. } => "durable",
        Frame::CutDone { .. } => "cut_done",
        Frame::Stop { .. } => "stop",
        Frame::Verified { .. } => "verified",
        Frame::Samples { .. } => "samples",
    }
}

/// The nonce a frame carries, for a peer's log.
pub fn run_of(f: &Frame) -> Option<&Nonce> {
    match f {
        Frame::Hello { run, .. }
        | Frame::Request { run, .. }
        | Frame::Reply { run, .. }
        | Frame::Records { run, .. }
        | Frame::CutDue { run, .. }
        | Frame::Sync { run, .. }
        | Frame::Durable { run, .. }
        | Frame::CutDone { run, .. }
        | Frame::Stop { run, .. }
        | Frame::Verified { run, .. }
        | Frame::Samples { run, .. } => Some(run),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ServeOptions {
        ServeOptions { software: "faultline test".into(), host: "here".into(), pid: 1, allow_exec: false, targets: vec![] }
    }

    fn frames(fs: &[Frame]) -> Vec<u8> {
        let mut b = Vec::new();
        for f in fs {
            proto::write_frame(&mut b, f).unwrap();
        }
        b
    }

    fn replies(out: &[u8]) -> Vec<Frame> {
        let mut r = out;
        let mut v = Vec::new();
        while let Ok(f) = proto::read_frame(&mut r) {
            v.push(f);
        }
        v
    }

    fn hello(versions: Vec<u32>) -> Frame {
        Frame::Hello { versions, run: Nonce::from_words(1, 1), coordinator: "c1".into() }
    }

    fn req(run: Nonce, seq: u64, op: Op) -> Frame {
        Frame::Request { run, seq, op }
    }

    fn serve_bytes(input: Vec<u8>, out: &mut Vec<u8>, o: &ServeOptions) -> Result<Ended, ServeError> {
        serve(std::io::Cursor::new(input), out, o)
    }

    #[test]
    fn a_session_answers_in_order_and_ends_at_bye() {
        let run = Nonce::from_words(1, 1);
        let input = frames(&[hello(vec![5]), req(run.clone(), 1, Op::Clock), req(run.clone(), 2, Op::Bye)]);
        let mut out = Vec::new();
        assert_eq!(serve_bytes(input, &mut out, &opts()).unwrap(), Ended::Bye);
        let r = replies(&out);
        assert!(matches!(&r[0], Frame::Welcome { version: 5, agent } if agent.host == "here"));
        assert!(matches!(&r[1], Frame::Reply { seq: 1, result: Answer::Clock { monotonic_ns }, .. } if *monotonic_ns > 0));
        assert!(matches!(&r[2], Frame::Reply { seq: 2, result: Answer::Bye, .. }));
    }

    #[test]
    fn refusals_say_why_in_a_last_frame() {
        let run = Nonce::from_words(1, 1);
        let other = Nonce::from_words(2, 2);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (frames(&[hello(vec![7, 8])]), "speaks protocol version(s) [5]; coordinator c1 offered [7, 8]"),
            (frames(&[req(run.clone(), 1, Op::Clock)]), "the first frame must be a hello"),
            (frames(&[hello(vec![5]), req(other.clone(), 1, Op::Clock)]), "this agent serves run 00000000000000010000000000000001"),
            (frames(&[hello(vec![5]), req(run.clone(), 2, Op::Clock), req(run.clone(), 2, Op::Clock)]), "numbered upwards"),
            (frames(&[hello(vec![5]), hello(vec![5])]), "a second hello"),
            (frames(&[hello(vec![5]), Frame::Durable { run: run.clone(), seq: 1, upto: 3 }]), "a durable frame outside a cycle"),
            ([frames(&[hello(vec![5])]), (proto::MAX_FRAME + 1).to_be_bytes().to_vec()].concat(), "at most"),
        ];
        for (input, says) in cases {
            let mut out = Vec::new();
            let e = serve_bytes(input, &mut out, &opts()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            match replies(&out).last() {
                Some(Frame::Refused { why, ours, .. }) => assert!(why.contains(says) && ours == &vec![5], "{why}"),
                other => panic!("no refused frame last: {other:?}"),
            }
        }
        // A refused version names both sides'.
        let mut out = Vec::new();
        let _ = serve_bytes(frames(&[hello(vec![7])]), &mut out, &opts());
        assert!(matches!(replies(&out).last(), Some(Frame::Refused { theirs, .. }) if theirs == &vec![7]));
        // A coordinator that goes away ends the session quietly.
        assert_eq!(serve_bytes(frames(&[hello(vec![5])]), &mut Vec::new(), &opts()).unwrap(), Ended::Closed);
    }

    #[test]
    fn only_the_targets_on_the_agents_own_command_line_are_opened() {
        let run = Nonce::from_words(1, 1);
        let d = crate::ledger::tests::tempdir();
        let listed = d.join("listed.img");
        std::fs::write(&listed, vec![0u8; 1 << 20]).unwrap();
        let unlisted = d.join("other.img");
        std::fs::write(&unlisted, vec![0u8; 1 << 20]).unwrap();
        let o = ServeOptions { targets: vec![listed.display().to_string()], ..opts() };
        let open = |t: &std::path::Path| Op::Open {
            target: t.display().to_string(),
            identity: None,
            expect: Default::default(),
            queue_depth: 4,
            resets: Vec::new(),
        };
        let input = frames(&[hello(vec![5]), req(run.clone(), 1, open(&unlisted)), req(run.clone(), 2, open(&listed))]);
        let mut out = Vec::new();
        assert_eq!(serve_bytes(input, &mut out, &o).unwrap(), Ended::Closed);
        let r = replies(&out);
        match &r[1] {
            Frame::Reply { result: Answer::Failed { why }, .. } => {
                assert!(why.contains("is not a target this agent may open") && why.contains("listed.img"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&r[2], Frame::Reply { result: Answer::Opened { target }, .. } if target.capacity_bytes == 1 << 20), "{:?}", r[2]);
        // A run's identity that the target does not have is refused.
        let input = frames(&[
            hello(vec![5]),
            req(
                run.clone(),
                1,
                Op::Open {
                    target: listed.display().to_string(),
                    identity: Some("file:elsewhere".into()),
                    expect: Default::default(),
                    queue_depth: 4,
                    resets: Vec::new(),
                },
            ),
        ]);
        let mut out = Vec::new();
        let _ = serve_bytes(input, &mut out, &o);
        assert!(matches!(&replies(&out)[1], Frame::Reply { result: Answer::Failed { why }, .. } if why.contains("not the run's target")));
    }
}
