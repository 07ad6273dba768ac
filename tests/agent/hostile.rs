//! A coordinator that lies, floods or dies, played by hand against the real binary's agent
//! (`faultline agent --stdio`), and an agent that lies, played by `cat` of frames against the
//! real coordinator (docs/PROTOCOL.md, "Limits").

use crate::common::{scratch, text, BIN};
use faultline::remote::coordinator::session::{self as dial, DialError, Transport};
use faultline::remote::proto::{self, Answer, Frame, Nonce, Op};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// A run header for a file target of `size` bytes, the whole of it the span.
fn header(size: u64, sector_bytes: u64) -> faultline::ledger::RunHeader {
    serde_json::from_value(serde_json::json!({
        "ledger_format": 1, "run_id": 7, "created_at": "now", "target_identity": "file", "target_capacity": size,
        "sector_bytes": sector_bytes, "atomic_bytes": 4096, "contract": "plp", "ports": [{"id": 0, "name": "A"}],
        "workload": {"align_bytes": 4096, "flush": {"every_ms": null, "every_writes": null, "fua_percent": 0},
            "max_write_bytes": 65536, "mean_write_bytes": 16384, "min_write_bytes": 4096, "pattern": {"kind": "random"},
            "queue_depth": 32, "seed": 1, "span_end": size, "span_start": 0}
    }))
    .unwrap()
}

/// The agent as a child with its pipes, allowed to open `target`, greeted for a run.
struct Agent {
    child: std::process::Child,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    run: Nonce,
    seq: u64,
    peak: Option<std::thread::JoinHandle<u64>>,
}

impl Agent {
    fn start(target: &Path) -> Agent {
        let mut child = Command::new(BIN)
            .args(["agent", "--stdio", "--target", &target.display().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let peak = Some(follow_peak(child.id()));
        let mut a = Agent { child, stdin, stdout, run: Nonce::from_words(3, 4), seq: 0, peak };
        a.send(&Frame::Hello { versions: vec![6], run: a.run.clone(), coordinator: "hand".into() });
        assert!(matches!(a.next(), Frame::Welcome { .. }));
        a
    }

    fn send(&mut self, f: &Frame) {
        proto::write_frame(self.stdin.as_mut().unwrap(), f).unwrap();
    }

    fn request(&mut self, op: Op) -> u64 {
        self.seq += 1;
        let f = Frame::Request { run: self.run.clone(), seq: self.seq, op };
        self.send(&f);
        self.seq
    }

    fn next(&mut self) -> Frame {
        proto::read_frame(self.stdout.as_mut().unwrap()).unwrap()
    }

    fn call(&mut self, op: Op) -> Answer {
        let seq = self.request(op);
        loop {
            match self.next() {
                Frame::Reply { seq: s, result, .. } if s == seq => return result,
                Frame::Verified { .. } => {}
                other => panic!("{other:?} where the reply to {seq} was due"),
            }
        }
    }

    fn open(&mut self, target: &Path) {
        let op =
            Op::Open { target: target.display().to_string(), identity: None, expect: Default::default(), queue_depth: 32, resets: vec![] };
        assert!(matches!(self.call(op), Answer::Opened { .. }));
    }

    /// Waits for the agent to exit, with the peak memory (KiB) its status last showed.
    fn wait(mut self) -> (std::process::ExitStatus, String, u64) {
        self.stdin.take();
        self.stdout.take();
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        let status = self.child.wait().unwrap();
        let peak = self.peak.take().map_or(0, |p| p.join().unwrap());
        (status, err, peak)
    }
}

/// Follows `pid`'s peak resident memory (`VmHWM`, KiB) every 2 ms until it exits: the last
/// figure it showed.
fn follow_peak(pid: u32) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            match s.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
                Some(v) => peak = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(peak),
                None => break,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    })
}

/// A sparse file of `size` bytes.
fn sparse(d: &Path, size: u64) -> std::path::PathBuf {
    let p = d.join("target.img");
    std::fs::File::create(&p).unwrap().set_len(size).unwrap();
    p
}

/// An agent prefilling a sparse file target of `size` bytes (the prefill's request sent, its
/// answer not yet read), and the target.
fn prefilling(name: &str, size: u64) -> (Agent, std::path::PathBuf) {
    let t = sparse(&scratch(name), size);
    let mut a = Agent::start(&t);
    a.open(&t);
    a.request(Op::Prefill { header: Box::new(header(size, 512)), port: faultline::port::PortId(0) });
    (a, t)
}

/// A coordinator killed mid-prefill (its pipes closed): the agent stops at its next submit,
/// exits 2 saying so, and the rest of the span is never written.
#[test]
fn a_coordinator_gone_mid_prefill_stops_the_agent_writing_at_once() {
    let _alone = crate::common::alone(); // stop times and memory measured
    let size = 4u64 << 30;
    let (a, t) = prefilling("gone-prefill", size);
    std::thread::sleep(Duration::from_millis(300));
    let gone = Instant::now();
    let (status, err, _) = a.wait();
    let exited = gone.elapsed();
    eprintln!("the agent exited {exited:?} after its coordinator went: {err}");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("went away during request 2 (prefill)"), "{err}");
    assert!(exited < Duration::from_secs(10), "{exited:?}");
    // What it says of its last submit: none after, or within a submit's race of it.
    assert!(submitted_after_ms(&err).is_none_or(|ms| ms < 100.0), "{err}");
    // The prefill went on no further: the last GiB was never written.
    let mut f = std::fs::File::open(&t).unwrap();
    f.seek(std::io::SeekFrom::Start(size - (1 << 30))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..1024 {
        f.read_exact(&mut buf).unwrap();
        assert!(buf.iter().all(|b| *b == 0), "the prefill wrote on after its coordinator went");
    }
}

/// The figure an agent's last words give of its last submit after its coordinator went, in
/// ms (`None`: nothing was submitted after).
fn submitted_after_ms(err: &str) -> Option<f64> {
    err.split("submitted ").nth(1).and_then(|r| r.split(" ms").next()).and_then(|m| m.parse::<f64>().ok())
}

/// A coordinator killed mid-cycle (its pipes closed while it answers the writer's syncs): the
/// writer's next submit is refused, the agent exits 2 saying so.
#[test]
fn a_coordinator_gone_mid_cycle_stops_the_agents_writer_at_its_next_submit() {
    let _alone = crate::common::alone(); // stop times and memory measured
    let d = scratch("gone-cycle");
    let size = 256u64 << 20;
    let t = sparse(&d, size);
    let mut a = Agent::start(&t);
    a.open(&t);
    let req = faultline::remote::proto::CycleRequest {
        header: header(size, 512),
        cycle: 1,
        first_id: 1,
        started_at: "t".into(),
        port: faultline::port::PortId(0),
        max_writes: None,
        duration_ms: Some(60_000),
        cut: None,
        stream_every_ms: 50,
        drain_timeout_ms: 5000,
        samples: false,
        reset: None,
    };
    a.request(Op::Cycle(Box::new(req)));
    // Answer each sync as a coordinator would, for 300 ms of writing.
    let until = Instant::now() + Duration::from_millis(300);
    let mut records = 0;
    while Instant::now() < until {
        match a.next() {
            Frame::Sync { run, seq, upto } => a.send(&Frame::Durable { run, seq, upto }),
            Frame::Records { records: r, .. } => records += r.len(),
            Frame::Samples { .. } => {}
            other => panic!("{other:?} mid-cycle"),
        }
    }
    assert!(records > 2, "the cycle wrote: {records} records");
    let gone = Instant::now();
    let (status, err, _) = a.wait();
    let exited = gone.elapsed();
    eprintln!("the agent exited {exited:?} after its coordinator went: {err}");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("went away during request 2 (cycle)"), "{err}");
    assert!(submitted_after_ms(&err).is_none_or(|ms| ms < 100.0), "{err}");
    assert!(exited < Duration::from_secs(10), "{exited:?}");
}

/// A coordinator killed while the agent waits for its target to come back (a 60 s wait): the
/// agent stops waiting within one of its 50 ms polls and exits 2 (it once ran on for the
/// whole timeout).
#[test]
fn a_coordinator_gone_during_wait_ready_stops_the_wait() {
    let _alone = crate::common::alone(); // stop times and memory measured
    let d = scratch("gone-wait");
    let t = sparse(&d, 8 << 20);
    let mut a = Agent::start(&t);
    a.open(&t);
    assert!(matches!(a.call(Op::Release {}), Answer::Released {}));
    std::fs::remove_file(&t).unwrap();
    a.request(Op::WaitReady { at: 0, timeout_ms: 60_000 });
    std::thread::sleep(Duration::from_millis(300));
    let gone = Instant::now();
    let (status, err, _) = a.wait();
    let exited = gone.elapsed();
    eprintln!("the agent exited {exited:?} after its coordinator went: {err}");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("went away during request 3 (wait_ready)"), "{err}");
    assert!(exited < Duration::from_secs(5), "{exited:?}");
}

/// A coordinator that floods the agent while it works: past 8 frames ahead the agent stops
/// reading, stops its operation and refuses, its memory bounded (700 frames of 1 MiB once
/// took an agent to 713 MiB).
#[test]
fn a_flood_of_frames_is_refused_and_the_agents_memory_stays_bounded() {
    let _alone = crate::common::alone(); // stop times and memory measured
    let (mut a, _t) = prefilling("flood", 4 << 30);
    // Frames of about 1 MiB each, every one a request that reads.
    let regions = vec![[0u64, 512]; 100_000];
    let mut flood = Vec::new();
    let mut stdin = a.stdin.take().unwrap();
    let (run, first) = (a.run.clone(), a.seq + 1);
    let writer = std::thread::spawn(move || {
        for seq in first..first + 700 {
            flood.clear();
            let f = Frame::Request {
                run: run.clone(),
                seq,
                op: Op::Verify { regions: regions.clone(), digest: false, share: Default::default() },
            };
            proto::write_frame(&mut flood, &f).unwrap();
            assert!(flood.len() as u32 <= proto::MAX_FRAME + 4 && flood.len() > 1 << 19, "{}", flood.len());
            if stdin.write_all(&flood).is_err() {
                return seq - first;
            }
        }
        700
    });
    let refused = loop {
        match proto::read_frame(a.stdout.as_mut().unwrap()) {
            Ok(Frame::Refused { why, .. }) => break why,
            Ok(_) => {}
            Err(e) => panic!("no refusal: {e}"),
        }
    };
    assert!(refused.contains("more than 8 frames ahead"), "{refused}");
    let (status, err, maxrss_kib) = a.wait();
    let sent = writer.join().unwrap();
    eprintln!("the agent took {sent} frames of the flood; its peak memory {} MiB", maxrss_kib / 1024);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(sent < 700, "the agent read the whole flood");
    assert!(maxrss_kib < 96 << 10, "peak memory {maxrss_kib} KiB");
}

/// Bad values are answered `failed`, naming the field, and the session goes on: a run header
/// whose sector size the format cannot take (it once hit an assert and killed the agent),
/// hashes over a range past the target (once gathered in memory until it aborted), an
/// unknown field in an operation that has none, a wait without end.
#[test]
fn bad_values_are_failed_naming_the_field_and_the_session_goes_on() {
    let d = scratch("bad-values");
    let t = sparse(&d, 8 << 20);
    let mut a = Agent::start(&t);
    a.open(&t);
    let failed = |a: Answer| match a {
        Answer::Failed { why } => why,
        other => panic!("{other:?}"),
    };
    // A header with 256-byte sectors, sent as the wire carries it.
    for bad in [256u64, 0] {
        let mut h = serde_json::to_value(header(8 << 20, 512)).unwrap();
        h["sector_bytes"] = bad.into();
        a.seq += 1;
        let body = serde_json::json!({"frame": "request", "run": a.run, "seq": a.seq, "op": {"op": "prefill", "header": h, "port": 0}});
        let body = serde_json::to_vec(&body).unwrap();
        let mut b = (body.len() as u32).to_be_bytes().to_vec();
        b.extend_from_slice(&body);
        a.stdin.as_mut().unwrap().write_all(&b).unwrap();
        let why = match a.next() {
            Frame::Reply { result: Answer::Failed { why }, .. } => why,
            other => panic!("{other:?}"),
        };
        assert!(why.contains(&format!("sector_bytes {bad}")), "{why}");
    }
    let why = failed(a.call(Op::SectorHashes { ranges: vec![[0, 1 << 36]], sector: 512 }));
    assert!(why.contains("ranges[0]") && why.contains("not inside"), "{why}");
    let why = failed(a.call(Op::SectorHashes { ranges: vec![[0, 4096]], sector: 256 }));
    assert!(why.contains("sector") && why.contains("power of two"), "{why}");
    let why = failed(a.call(Op::WaitReady { at: 0, timeout_ms: u64::MAX }));
    assert!(why.contains("timeout_ms"), "{why}");
    let why = failed(a.call(Op::Probe { at: u64::MAX - 511 }));
    assert!(why.contains("at"), "{why}");
    // `{"op":"clock","x":1}`.
    a.seq += 1;
    let body = format!(r#"{{"frame":"request","run":"{}","seq":{},"op":{{"op":"clock","x":1}}}}"#, a.run, a.seq);
    let mut b = (body.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(body.as_bytes());
    a.stdin.as_mut().unwrap().write_all(&b).unwrap();
    assert!(matches!(a.next(), Frame::Reply { result: Answer::Failed { why }, .. } if why.contains("unknown field `x`")));
    // Hashes over the whole target stream in parts, and the session is still there.
    match a.call(Op::SectorHashes { ranges: vec![[0, 8 << 20]], sector: 512 }) {
        Answer::Hashed { count } => assert_eq!(count, (8 << 20) / 512),
        other => panic!("{other:?}"),
    }
    assert!(matches!(a.call(Op::Clock {}), Answer::Clock { .. }));
    assert!(matches!(a.call(Op::Bye {}), Answer::Bye {}));
    let (status, err, _) = a.wait();
    assert_eq!(status.code(), Some(0), "{err}");
}

/// An agent that lies (`cat` of frames standing for it): the coordinator holds no more of
/// an answer than what it asked can give, and says which agent broke the protocol.
#[test]
fn a_lying_agents_answers_are_bounded_by_what_was_asked() {
    let d = scratch("lying-agent");
    let run = Nonce::from_words(5, 6);
    let mut b = Vec::new();
    let welcome = proto::AgentInfo { software: "liar".into(), host: "h".into(), pid: 1, allow_exec: false };
    proto::write_frame(&mut b, &Frame::Welcome { version: 6, agent: welcome }).unwrap();
    // Asked for 8 sectors' hashes, it sends parts without end.
    for _ in 0..64 {
        let part = proto::VerifiedPart::Hashes(vec![None; 1024]);
        proto::write_frame(&mut b, &Frame::Verified { run: run.clone(), seq: 1, part }).unwrap();
    }
    let frames = d.join("frames");
    std::fs::write(&frames, &b).unwrap();
    let t = Transport::new(&["sh".into(), "-c".into(), format!("cat {}; sleep 30", frames.display())], "liar").unwrap();
    let mut s = dial::dial(&t, "liar", &run, "test", Duration::from_secs(10)).unwrap();
    let e = s.sector_hashes(&[(0, 4096)], 512, Duration::from_secs(10)).unwrap_err();
    assert!(matches!(&e, DialError::Protocol { .. }) && e.to_string().contains("more sector hashes than the 8 sectors asked"), "{e}");
    let _ = text;
}
