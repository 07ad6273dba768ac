//! The agent's side (`faultline agent --stdio`): one coordinator per process, over the
//! process's stdin and stdout (an ssh session, a local pipe, a guest's serial port). It
//! answers the handshake, then each typed request of the run it was greeted for, and refuses,
//! saying why in a last frame, anything else: another version, another run's frame, an
//! oversized or malformed frame, a request out of order.
//!
//! A port's cycle ([`Op::Cycle`]) runs the writer here and streams what the coordinator's
//! ledger needs as it happens ([`stream`](super::stream)): the agent keeps no record of its
//! own, so a host that loses power loses nothing the coordinator had not been told.

use super::checked;
use super::mirror::{send_part, Mirror};
use super::peer::{Frames, Gone, Inbox, Watched};
use super::port::{failed, prefill, refused, Port, PROBE_TIMEOUT};
use super::stream::{Link, StreamLedger};
use crate::remote::parts::{hex, PART_ITEMS};
use crate::remote::proto::{self, Answer, CycleRequest, CycleSummary, Frame, FrameError, Nonce, Op};
use crate::writer::{run_cycle, CycleOptions, Fill, StopToken};
use faultline_drivers::BlockTarget;
use std::cell::RefCell;
use std::io::{Read, Write};
use std::time::Duration;

pub use super::port::ServeOptions;

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The coordinator said goodbye.
    Bye,
    /// The coordinator's side of the stream closed between operations (it died, or the
    /// transport did).
    Closed,
    /// The coordinator went away while request `seq` (`op`) ran, and the agent stopped it at
    /// its next I/O: `submitted_after` is how long after the agent saw it go it still handed
    /// a write on (`None`: not once).
    Left { op: &'static str, seq: u64, submitted_after: Option<Duration> },
}

/// Why the agent refused to go on (it sent the coordinator a `refused` frame saying so).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("refused the coordinator: {0}")]
    Refused(String),
    #[error("the session failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Sends a `refused` frame saying why, and the error to end the session with.
pub(crate) fn refuse(w: &mut dyn Write, why: String, theirs: Vec<u32>) -> ServeError {
    let mut w = w;
    let _ = proto::write_frame(&mut w, &Frame::Refused { why: why.clone(), ours: proto::VERSIONS.to_vec(), theirs });
    ServeError::Refused(why)
}

/// What flooding the agent is told.
fn flooded() -> String {
    format!(
        "the coordinator sent more than {} frames ahead of the answers (at most that many wait, of at most {} bytes each)",
        super::peer::INBOX_FRAMES,
        proto::MAX_FRAME
    )
}

/// Answers the coordinator's hello: the run and the coordinator greeted (`None`: it went away
/// first).
fn handshake(inbox: &Inbox, w: &mut impl Write, o: &ServeOptions) -> Result<Option<(Nonce, String)>, ServeError> {
    let ours = proto::VERSIONS.to_vec();
    match inbox.frames.recv().unwrap_or(Err(FrameError::Closed)) {
        Ok(Frame::Hello { versions, run, coordinator }) => match proto::choose(&versions) {
            Some(v) => {
                let agent = proto::AgentInfo { software: o.software.clone(), host: o.host.clone(), pid: o.pid, allow_exec: o.allow_exec };
                proto::write_frame(w, &Frame::Welcome { version: v, agent })?;
                Ok(Some((run, coordinator)))
            }
            None => {
                let why = format!("this agent speaks protocol version(s) {ours:?}; coordinator {coordinator} offered {versions:?}");
                Err(refuse(w, why, versions))
            }
        },
        Ok(other) => Err(refuse(w, format!("the first frame must be a hello, not {}", other.kind()), Vec::new())),
        Err(FrameError::Closed) => Ok(None),
        Err(e) => Err(refuse(w, format!("before the hello: {e}"), Vec::new())),
    }
}

/// Serves one coordinator on `r`/`w` until it says goodbye or goes away.
pub fn serve(r: impl Read + Send + 'static, w: &mut impl Write, o: &ServeOptions) -> Result<Ended, ServeError> {
    serve_inbox(super::peer::inbox(r), w, o)
}

/// [`serve`], the coordinator's frames read into `inbox`.
fn serve_inbox(inbox: Inbox, w: &mut impl Write, o: &ServeOptions) -> Result<Ended, ServeError> {
    let Some((run, coordinator)) = handshake(&inbox, w, o)? else { return Ok(Ended::Closed) };
    let mut s = Served { o, w, inbox, run, port: Port::default(), mirror: Mirror::default() };
    let mut last_seq = 0u64;
    loop {
        if s.inbox.peer.gone() == Some(Gone::Flooded) {
            return Err(refuse(s.w, flooded(), Vec::new()));
        }
        let f = match s.inbox.frames.recv().unwrap_or(Err(FrameError::Closed)) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Ok(Ended::Closed),
            // A request of this run, in order, whose operation does not read: `failed`.
            Err(FrameError::BadOp { run, seq, why }) if run == s.run && seq > last_seq => {
                last_seq = seq;
                let result = failed(format!("request {seq}: the operation is not one this agent runs: {why}"));
                proto::write_frame(s.w, &Frame::Reply { run, seq, result })?;
                continue;
            }
            Err(FrameError::BadOp { run, seq, .. }) => {
                let why = if run != s.run {
                    format!("a frame of run {run}; this agent serves run {} (of coordinator {coordinator}), and no other", s.run)
                } else {
                    format!("request {seq} after request {last_seq}: requests are numbered upwards")
                };
                return Err(refuse(s.w, why, Vec::new()));
            }
            Err(e) => return Err(refuse(s.w, e.to_string(), Vec::new())),
        };
        let run = &s.run;
        let (seq, op) = match f {
            Frame::Request { run: r2, .. } if r2 != *run => {
                let why = format!("a frame of run {r2}; this agent serves run {run} (of coordinator {coordinator}), and no other");
                return Err(refuse(s.w, why, Vec::new()));
            }
            Frame::Request { seq, .. } if seq <= last_seq => {
                return Err(refuse(s.w, format!("request {seq} after request {last_seq}: requests are numbered upwards"), Vec::new()));
            }
            Frame::Request { seq, op, .. } => (seq, op),
            Frame::Hello { coordinator: c2, run: r2, .. } => {
                let why = format!("a second hello (coordinator {c2}, run {r2}): this agent serves coordinator {coordinator}, run {run}");
                return Err(refuse(s.w, why, Vec::new()));
            }
            other => return Err(refuse(s.w, format!("a {} frame outside a cycle", other.kind()), Vec::new())),
        };
        last_seq = seq;
        let name = op_name(&op);
        let done = s.answer(seq, op);
        // The coordinator flooded the agent, or went away while the operation ran and cut it
        // short: nothing more is answered.
        match (s.inbox.peer.gone(), &done) {
            (Some(Gone::Flooded), _) => return Err(refuse(s.w, flooded(), Vec::new())),
            (Some(_), Ok(Step::Stopped(Ok(after)))) => return Ok(Ended::Left { op: name, seq, submitted_after: *after }),
            (Some(_), Err(_)) => return Ok(Ended::Left { op: name, seq, submitted_after: None }),
            _ => {}
        }
        match done? {
            Step::Reply(result) | Step::Stopped(Err(result)) => proto::write_frame(s.w, &Frame::Reply { run: s.run.clone(), seq, result })?,
            Step::Stopped(Ok(_)) => {}
            Step::End(e) => return Ok(e),
        }
    }
}

/// What answering a request came to.
enum Step {
    /// Its answer, to send.
    Reply(Answer),
    /// It ran on a watched target (`Ok`: how long after the coordinator went it still
    /// submitted, if the coordinator went), or it failed before it began (`Err`: the answer).
    Stopped(Result<Option<Duration>, Answer>),
    /// The session ends (its last reply was sent).
    End(Ended),
}

/// One coordinator's session, after the hello.
struct Served<'a, W: Write> {
    o: &'a ServeOptions,
    w: &'a mut W,
    inbox: Inbox,
    run: Nonce,
    port: Port,
    mirror: Mirror,
}

impl<W: Write> Served<'_, W> {
    fn answer(&mut self, seq: u64, op: Op) -> Result<Step, ServeError> {
        let peer = self.inbox.peer.clone();
        let (run, w) = (self.run.clone(), &mut *self.w);
        let no_target = || Step::Reply(failed("no target is open: open one first"));
        Ok(Step::Reply(match op {
            Op::Clock {} => Answer::Clock { monotonic_ns: faultline_drivers::monotonic_ns() },
            Op::Bye {} => {
                proto::write_frame(w, &Frame::Reply { run, seq, result: Answer::Bye {} })?;
                return Ok(Step::End(Ended::Bye));
            }
            Op::Open { target, identity, expect, queue_depth, resets } => {
                self.port.open(self.o, &target, identity.as_deref(), &expect, queue_depth, &resets)
            }
            Op::History { first, records, share } => self.mirror.apply(share, first, records),
            Op::Probe { at } => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                if let Err(e) = checked::offset("at", at, &t.geometry()) {
                    return Ok(Step::Reply(refused(e)));
                }
                let mut t = Watched::new(t.as_mut(), &peer);
                Answer::Probed { error: crate::runner::dut::probe(&mut t, at, PROBE_TIMEOUT).err().map(|e| e.to_string()) }
            }
            Op::WaitReady { at, timeout_ms } => {
                let a = self.port.wait_ready(at, timeout_ms, &peer);
                return Ok(Step::Stopped(if peer.gone().is_some() { Ok(None) } else { Err(a) }));
            }
            Op::Release {} => {
                self.port.target = None;
                Answer::Released {}
            }
            Op::SectorHashes { ranges, sector } => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                let ranges = match checked::hash_ranges(&ranges, sector, &t.geometry()) {
                    Ok(r) => r,
                    Err(e) => return Ok(Step::Reply(refused(e))),
                };
                let mut t = Watched::new(t.as_mut(), &peer);
                return Ok(Step::Stopped(match send_hashes(&mut t, &peer, &ranges, sector, &mut |part| send_part(w, &run, seq, part))? {
                    Some(count) => Err(Answer::Hashed { count }),
                    None => Ok(None),
                }));
            }
            Op::Health {} => self.port.health(),
            Op::ReadLoad { span, run_ms } => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                let mut t = Watched::new(t.as_mut(), &peer);
                let a = super::load::read_load(&mut t, &peer, (span, run_ms), &mut |part| send_part(w, &run, seq, part))?;
                return Ok(Step::Stopped(if peer.gone().is_some() { Ok(None) } else { Err(a) }));
            }
            Op::Prefill { header, port: which } => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                let mut t = Watched::new(t.as_mut(), &peer);
                let a = prefill(&mut t, &header, which);
                return Ok(Step::Stopped(if peer.gone().is_some() { Ok(t.submitted_after_gone()) } else { Err(a) }));
            }
            Op::Verify { regions, digest, share } => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                let mut t = Watched::new(t.as_mut(), &peer);
                let a = self.mirror.verify(&mut t, (share, &regions), digest, &mut |part| send_part(w, &run, seq, part))?;
                return Ok(Step::Stopped(if peer.gone().is_some() { Ok(None) } else { Err(a) }));
            }
            Op::Cycle(req) => {
                let Some(t) = self.port.target.as_mut() else { return Ok(no_target()) };
                let listed = self.port.opened.as_ref().map(|(l, _, _)| l.clone()).unwrap_or_default();
                let mut t = Watched::new(t.as_mut(), &peer);
                let a = cycle(&mut t, &listed, &req, &self.inbox.frames, w, &run, seq)?;
                return Ok(Step::Stopped(match a {
                    Some(a) if peer.gone().is_none() => Err(a),
                    _ => Ok(t.submitted_after_gone()),
                }));
            }
        }))
    }
}

/// Sends the hashes of `ranges` in `hashes` parts as they are read (one part's worth held at
/// a time); `None` when the coordinator went before the last.
fn send_hashes(
    t: &mut Watched<'_>,
    peer: &super::peer::Peer,
    ranges: &[(u64, u64)],
    sector: u64,
    send: &mut dyn FnMut(crate::remote::proto::VerifiedPart) -> std::io::Result<()>,
) -> std::io::Result<Option<u64>> {
    let mut held: Vec<Option<String>> = Vec::with_capacity(PART_ITEMS);
    let mut count = 0u64;
    let mut flush = |held: &mut Vec<Option<String>>| send(crate::remote::proto::VerifiedPart::Hashes(std::mem::take(held)));
    let r = crate::runner::dut::each_sector_hash(t, ranges, sector, &mut |hashes| {
        if peer.gone().is_some() {
            return Err(None);
        }
        for h in hashes {
            held.push(h.map(|h| hex(&h)));
            count += 1;
            if held.len() == PART_ITEMS {
                flush(&mut held).map_err(Some)?;
            }
        }
        Ok(())
    });
    match r {
        Ok(()) => {}
        Err(None) => return Ok(None),
        Err(Some(e)) => return Err(e),
    }
    if !held.is_empty() {
        flush(&mut held)?;
    }
    Ok(Some(count))
}

/// An operation's name, for the agent's last words.
fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Clock {} => "clock",
        Op::Bye {} => "bye",
        Op::Open { .. } => "open",
        Op::Cycle(_) => "cycle",
        Op::History { .. } => "history",
        Op::Verify { .. } => "verify",
        Op::Probe { .. } => "probe",
        Op::WaitReady { .. } => "wait_ready",
        Op::Release {} => "release",
        Op::SectorHashes { .. } => "sector_hashes",
        Op::Health {} => "health",
        Op::ReadLoad { .. } => "read_load",
        Op::Prefill { .. } => "prefill",
    }
}

/// Runs request `seq`'s cycle on `target`, streaming its records. `Ok(None)`: the coordinator
/// went away mid-cycle (the writer stopped; nothing is left to answer).
fn cycle(
    target: &mut dyn BlockTarget,
    listed: &str,
    req: &CycleRequest,
    inbox: &Frames,
    w: &mut dyn Write,
    run: &Nonce,
    seq: u64,
) -> Result<Option<Answer>, ServeError> {
    let h = &req.header;
    let (layout, format) = match checked::run(h, &target.geometry()) {
        Ok(x) => x,
        Err(e) => return Ok(Some(refused(e))),
    };
    let times = match checked::cycle_times(req) {
        Ok(t) => t,
        Err(e) => return Ok(Some(refused(e))),
    };
    // The cycle's reset, found before the first write.
    let mut reset = match open_reset(listed, req, times.hold) {
        Ok(r) => r,
        Err(answer) => return Ok(Some(answer)),
    };
    let mut report = None;
    let stop = StopToken::default();
    let wire = req.samples.then(|| crate::writer::WireSamples::new(crate::writer::windows::clock_anchor()));
    let opts = cycle_options(req, &times, stop.clone(), wire.clone());
    let mut link = Link::new(w, inbox, run.clone(), seq, stop, times.drain.max(Duration::from_secs(1)));
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
        return coordinator_gone(l.w, e);
    }
    Ok(Some(cycle_answer(r, req.cycle, started_ns, report, late)))
}

/// The cycle's own link reset when the request asks for one, opened before the first write,
/// with its `hold`; `Err`: the answer saying why it cannot run.
fn open_reset(listed: &str, req: &CycleRequest, hold: Duration) -> Result<Option<(super::reset::Reset, Duration)>, Answer> {
    match req.reset {
        Some(r) => match super::reset::Reset::open(listed, r.reset) {
            Ok(x) => Ok(Some((x, hold))),
            Err(why) => Err(failed(format!("{listed}: cannot run the cycle's link reset: {why}"))),
        },
        None => Ok(None),
    }
}

/// The writer's options for cycle request `req`, with its checked `times`: `stop` ends the
/// cycle, `wire` takes its completions when the request asks for them.
fn cycle_options(
    req: &CycleRequest,
    times: &checked::CycleTimes,
    stop: StopToken,
    wire: Option<crate::writer::WireSamples>,
) -> CycleOptions {
    CycleOptions {
        cycle: req.cycle,
        first_id: req.first_id,
        started_at: req.started_at.clone(),
        port: req.port,
        max_writes: req.max_writes,
        duration: times.duration,
        cut: req.cut,
        checkpoint_every: times.stream_every.max(Duration::from_millis(1)),
        drain_timeout: times.drain.max(Duration::from_millis(1)),
        stop: Some(stop),
        samples: wire.map(crate::writer::PortSamples::Wire),
        fill: Fill::Auto,
        clock_from: None,
        before_end: None,
    }
}

/// The coordinator went away, or broke the protocol (`fatal`): the writer stopped at its next
/// record; nothing it did since is claimed anywhere.
fn coordinator_gone(w: &mut dyn Write, fatal: super::stream::Fatal) -> Result<Option<Answer>, ServeError> {
    match fatal {
        super::stream::Fatal::Closed => Ok(None),
        super::stream::Fatal::Refused(why) => Err(refuse(w, why, Vec::new())),
        super::stream::Fatal::Io(e) => Err(ServeError::Io(e)),
    }
}

/// The answer to cycle `cycle`, run from `started_ns`: its summary, with this host's `reset`
/// and how `late` it let the agent run, or why it failed.
fn cycle_answer(
    r: Result<crate::writer::CycleOutcome, crate::writer::WriteError>,
    cycle: u32,
    started_ns: u64,
    reset: Option<proto::ResetReport>,
    late: Vec<[u64; 2]>,
) -> Answer {
    let out = match r {
        Ok(out) => out,
        // The cut failed: the writer ended the cycle as a cut all the same and recorded it.
        Err(crate::writer::WriteError::Cut { outcome, .. }) => *outcome,
        Err(e) => return failed(format!("cycle {cycle}: {e}")),
    };
    let mut summary = CycleSummary::of(out, started_ns);
    summary.reset = reset;
    summary.late = late;
    Answer::CycleDone { summary: Box::new(summary) }
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
        let input = frames(&[hello(vec![6]), req(run.clone(), 1, Op::Clock {}), req(run.clone(), 2, Op::Bye {})]);
        let mut out = Vec::new();
        assert_eq!(serve_bytes(input, &mut out, &opts()).unwrap(), Ended::Bye);
        let r = replies(&out);
        assert!(matches!(&r[0], Frame::Welcome { version: 6, agent } if agent.host == "here"));
        assert!(matches!(&r[1], Frame::Reply { seq: 1, result: Answer::Clock { monotonic_ns }, .. } if *monotonic_ns > 0));
        assert!(matches!(&r[2], Frame::Reply { seq: 2, result: Answer::Bye {}, .. }));
    }

    #[test]
    fn refusals_say_why_in_a_last_frame() {
        let run = Nonce::from_words(1, 1);
        let other = Nonce::from_words(2, 2);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (frames(&[hello(vec![7, 8])]), "speaks protocol version(s) [6]; coordinator c1 offered [7, 8]"),
            (frames(&[req(run.clone(), 1, Op::Clock {})]), "the first frame must be a hello"),
            (frames(&[hello(vec![6]), req(other.clone(), 1, Op::Clock {})]), "this agent serves run 00000000000000010000000000000001"),
            (frames(&[hello(vec![6]), req(run.clone(), 2, Op::Clock {}), req(run.clone(), 2, Op::Clock {})]), "numbered upwards"),
            (frames(&[hello(vec![6]), hello(vec![6])]), "a second hello"),
            (frames(&[hello(vec![6]), Frame::Durable { run: run.clone(), seq: 1, upto: 3 }]), "a durable frame outside a cycle"),
            ([frames(&[hello(vec![6])]), (proto::MAX_FRAME + 1).to_be_bytes().to_vec()].concat(), "at most"),
        ];
        for (input, says) in cases {
            let mut out = Vec::new();
            let e = serve_bytes(input, &mut out, &opts()).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            match replies(&out).last() {
                Some(Frame::Refused { why, ours, .. }) => assert!(why.contains(says) && ours == &vec![6], "{why}"),
                other => panic!("no refused frame last: {other:?}"),
            }
        }
        // A refused version names both sides'.
        let mut out = Vec::new();
        let _ = serve_bytes(frames(&[hello(vec![7])]), &mut out, &opts());
        assert!(matches!(replies(&out).last(), Some(Frame::Refused { theirs, .. }) if theirs == &vec![7]));
        // A coordinator that goes away ends the session quietly.
        assert_eq!(serve_bytes(frames(&[hello(vec![6])]), &mut Vec::new(), &opts()).unwrap(), Ended::Closed);
    }

    /// A verify whose coordinator is gone (its bytes end with the request) stops at its
    /// first read and answers nothing.
    #[test]
    fn a_verify_for_a_coordinator_that_is_gone_stops() {
        let run = Nonce::from_words(1, 1);
        let d = crate::ledger::tests::tempdir();
        let listed = d.join("listed.img");
        std::fs::write(&listed, vec![0u8; 1 << 20]).unwrap();
        let o = ServeOptions { targets: vec![listed.display().to_string()], ..opts() };
        let open =
            Op::Open { target: listed.display().to_string(), identity: None, expect: Default::default(), queue_depth: 4, resets: vec![] };
        let history = Op::History {
            first: 0,
            records: vec![crate::ledger::Record::RunStart(crate::ledger::tests::header())],
            share: Default::default(),
        };
        let input = frames(&[
            hello(vec![6]),
            req(run.clone(), 1, open),
            req(run.clone(), 2, history),
            req(run.clone(), 3, Op::Verify { regions: vec![[0, 1 << 20]], digest: true, share: Default::default() }),
        ]);
        let mut out = Vec::new();
        // Served once the coordinator's side has ended.
        let inbox = super::super::peer::inbox(std::io::Cursor::new(input));
        while inbox.peer.gone().is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let ended = serve_inbox(inbox, &mut out, &o).unwrap();
        assert_eq!(ended, Ended::Left { op: "verify", seq: 3, submitted_after: None });
        assert!(!replies(&out).iter().any(|f| matches!(f, Frame::Reply { seq: 3, .. } | Frame::Verified { .. })));
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
        let input = frames(&[hello(vec![6]), req(run.clone(), 1, open(&unlisted)), req(run.clone(), 2, open(&listed))]);
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
            hello(vec![6]),
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
