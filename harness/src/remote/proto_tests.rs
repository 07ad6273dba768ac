//! The frames' tests: round trips, refusals, and every frame with an unknown field anywhere.
use super::*;
use crate::writer::{CutPlacement, CycleOutcome};

fn round(f: Frame) {
    let mut b = Vec::new();
    write_frame(&mut b, &f).unwrap();
    assert_eq!(u32::from_be_bytes(b[..4].try_into().unwrap()) as usize, b.len() - 4);
    assert_eq!(read_frame(&mut &b[..]).unwrap(), f);
}

#[test]
fn frames_round_trip() {
    let run = Nonce::from_words(1, 2);
    assert_eq!(run.0, "00000000000000010000000000000002");
    round(Frame::Hello { versions: vec![3], run: run.clone(), coordinator: "lab1:42".into() });
    let agent = AgentInfo { software: "faultline 0.1.0".into(), host: "h".into(), pid: 7, allow_exec: false };
    round(Frame::Welcome { version: 3, agent });
    round(Frame::Refused { why: "no".into(), ours: vec![1], theirs: vec![9] });
    round(Frame::Request { run: run.clone(), seq: 3, op: Op::Clock {} });
    round(Frame::Reply { run: run.clone(), seq: 3, result: Answer::Clock { monotonic_ns: 99 } });
    round(Frame::Request {
        run: run.clone(),
        seq: 4,
        op: Op::Open {
            target: "nbd://127.0.0.1:10809/A".into(),
            identity: Some("nbd:x".into()),
            expect: Expect { serial: Some("S1".into()), ..Expect::default() },
            queue_depth: 32,
            resets: vec![LinkReset::NvmeController, LinkReset::PciFunctionFlr],
        },
    });
    let header = crate::ledger::tests::header();
    let req = CycleRequest {
        header,
        cycle: 2,
        first_id: 100,
        started_at: "t".into(),
        port: PortId(1),
        max_writes: None,
        duration_ms: Some(500),
        cut: Some(CutPlacement::AfterTime { after_ms: 120 }),
        stream_every_ms: 1,
        drain_timeout_ms: 5000,
        samples: false,
        reset: Some(ResetRequest { reset: LinkReset::PciRemoveRescan, hold_ms: 100 }),
    };
    round(Frame::Request { run: run.clone(), seq: 5, op: Op::Cycle(Box::new(req)) });
    round(Frame::Records { run: run.clone(), seq: 5, first: 0, records: crate::ledger::tests::sample_records() });
    round(Frame::CutDue { run: run.clone(), seq: 5 });
    round(Frame::Sync { run: run.clone(), seq: 5, upto: 9 });
    round(Frame::Durable { run: run.clone(), seq: 5, upto: 3 });
    round(Frame::CutDone { run: run.clone(), seq: 5, failed: Some("no".into()) });
    round(Frame::Stop { run, seq: 5 });
}

#[test]
fn bad_frames_are_refused_saying_why() {
    let big = (MAX_FRAME + 1).to_be_bytes();
    assert!(matches!(read_frame(&mut &big[..]), Err(FrameError::TooBig { len }) if len == MAX_FRAME + 1));
    assert!(matches!(read_frame(&mut &[0u8, 0, 0, 0][..]), Err(FrameError::Empty)));
    assert!(matches!(read_frame(&mut &[][..]), Err(FrameError::Closed)));
    assert!(matches!(read_frame(&mut &[0u8, 0][..]), Err(FrameError::Io(_))));
    let mut b = 5u32.to_be_bytes().to_vec();
    b.extend_from_slice(b"hello");
    let e = read_frame(&mut &b[..]).unwrap_err().to_string();
    assert!(e.contains("not one the protocol knows") && e.contains("hello"), "{e}");
    // A shell string is no operation: the request is answered `failed`, saying so.
    let e = parse(br#"{"frame":"request","run":"x","seq":1,"op":{"op":"exec","cmd":"rm -rf /"}}"#).unwrap_err();
    assert!(matches!(&e, FrameError::BadOp { seq: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("unknown variant `exec`"), "{e}");
    let e = parse(br#"{"frame":"request","run":"x","seq":2,"op":{"op":"clock","x":1}}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `x`"), "{e}");
    // An envelope that does not read is no request at all.
    let e = parse(br#"{"frame":"request","run":"x","seq":-1,"op":{"op":"clock"}}"#).unwrap_err();
    assert!(matches!(&e, FrameError::Malformed { .. }), "{e:?}");
    let e = parse(br#"{"frame":"hello","versions":[1],"run":"x","coordinator":"c","extra":1}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `extra`"), "{e}");
}

/// One frame of every kind, each operation and answer among them, with every optional
/// part filled in (so that each object the wire can carry is here).
pub(crate) fn every_frame() -> Vec<Frame> {
    let run = Nonce::from_words(1, 2);
    let header = crate::ledger::tests::header();
    let cycle = CycleRequest {
        header: header.clone(),
        cycle: 2,
        first_id: 100,
        started_at: "t".into(),
        port: PortId(1),
        max_writes: Some(9),
        duration_ms: Some(500),
        cut: Some(CutPlacement::AfterTime { after_ms: 120 }),
        stream_every_ms: 1,
        drain_timeout_ms: 5000,
        samples: true,
        reset: Some(ResetRequest { reset: LinkReset::PciRemoveRescan, hold_ms: 100 }),
    };
    let ops = vec![
        Op::Clock {},
        Op::Bye {},
        Op::Open {
            target: "t".into(),
            identity: Some("i".into()),
            expect: Expect { serial: Some("S".into()), wwid: Some("w".into()), model: Some("m".into()), size_bytes: Some(1) },
            queue_depth: 4,
            resets: vec![LinkReset::NvmeController],
        },
        Op::Cycle(Box::new(cycle)),
        Op::History { first: 0, records: crate::ledger::tests::sample_records(), share: crate::port::PortId(1) },
        Op::Verify { regions: vec![[0, 512]], digest: true, share: crate::port::PortId(1) },
        Op::Probe { at: 0 },
        Op::WaitReady { at: 0, timeout_ms: 10 },
        Op::Release {},
        Op::SectorHashes { ranges: vec![[0, 512]], sector: 512 },
        Op::Health {},
        Op::Prefill { header: Box::new(header), port: PortId(0) },
        Op::ReadLoad { span: [0, 512], run_ms: 10 },
    ];
    let target = TargetInfo {
        identity: "i".into(),
        capacity_bytes: 1,
        logical_block_bytes: 512,
        physical_block_bytes: 512,
        engine: "e".into(),
        zeroing: Default::default(),
    };
    let mut summary = CycleSummary::of(CycleOutcome::default(), 1);
    summary.reset = Some(ResetReport { controller: "c".into(), took_ns: 1, error: Some("e".into()), log: vec!["l".into()] });
    summary.late = vec![[1, 2]];
    summary.zeroing = crate::writer::ZeroingDone { deallocates: 1, deallocated_bytes: 2, write_zeroes: 3, zeroed_bytes: 4, formats: 5 };
    let counts = VerifyCounts { sectors: 1, bytes: 1, durable_ok: 1, newer_ok: 0, prior_ok: 0, findings: 1, seen: 0, digests: Some(1) };
    let answers = vec![
        Answer::Clock { monotonic_ns: 1 },
        Answer::Bye {},
        Answer::Opened { target },
        Answer::CycleDone { summary: Box::new(summary) },
        Answer::HistoryAt { records: 1 },
        Answer::Verified { counts },
        Answer::Probed { error: Some("e".into()) },
        Answer::Ready { enumerate_ns: Some(1), first_read_ns: 1 },
        Answer::Released {},
        Answer::Hashed { count: 1 },
        Answer::Health { smart: Some("00".into()), ocp: Some("00".into()), none: Some("n".into()) },
        Answer::Prefilled { span_start: 0, span_end: 1 },
        Answer::ReadLoaded { count: 1 },
        Answer::Failed { why: "w".into() },
    ];
    let shown = [
        crate::verify::Shown::Prior {},
        crate::verify::Shown::Prefill {},
        crate::verify::Shown::Write { write_id: 1, cycle: 1, port: 0, addr: 0, index: 0, count: 1 },
        crate::verify::Shown::Damaged { write_id: 1, cycle: 1, addr: 0, run_id: 1 },
        crate::verify::Shown::ForeignRun { run_id: 1, write_id: 1 },
        crate::verify::Shown::Zeros {},
        crate::verify::Shown::Unrecognized {},
        crate::verify::Shown::ReadError { errno: 5, detail: "d".into() },
    ];
    let findings = shown
        .iter()
        .map(|s| crate::verify::Finding {
            class: crate::verify::FindingClass::Unreadable,
            offset: 0,
            length: 512,
            expected: s.clone(),
            found: s.clone(),
            cycle: 1,
            detail: "d".into(),
        })
        .collect();
    let parts = vec![
        VerifiedPart::Findings(findings),
        VerifiedPart::Seen(vec![[1, 0, 512]]),
        VerifiedPart::Digests(vec![DigestWire { start: 0, end: 512, hash: "00".into(), unreadable: false }]),
        VerifiedPart::Hashes(vec![Some("00".into()), None]),
        VerifiedPart::Samples(vec![[1, 2, 512, 1]]),
    ];
    let mut frames = vec![
        Frame::Hello { versions: vec![6], run: run.clone(), coordinator: "c".into() },
        Frame::Welcome { version: 6, agent: AgentInfo { software: "s".into(), host: "h".into(), pid: 1, allow_exec: false } },
        Frame::Refused { why: "w".into(), ours: vec![6], theirs: vec![5] },
        Frame::Records { run: run.clone(), seq: 1, first: 0, records: crate::ledger::tests::sample_records() },
        Frame::CutDue { run: run.clone(), seq: 1 },
        Frame::Sync { run: run.clone(), seq: 1, upto: 1 },
        Frame::Durable { run: run.clone(), seq: 1, upto: 1 },
        Frame::CutDone { run: run.clone(), seq: 1, failed: Some("f".into()) },
        Frame::Stop { run: run.clone(), seq: 1 },
        Frame::Samples { run: run.clone(), seq: 1, samples: vec![[1, 2, 3, 1]] },
    ];
    frames.extend(ops.into_iter().enumerate().map(|(i, op)| Frame::Request { run: run.clone(), seq: i as u64 + 1, op }));
    frames.extend(answers.into_iter().map(|result| Frame::Reply { run: run.clone(), seq: 1, result }));
    frames.extend(parts.into_iter().map(|part| Frame::Verified { run: run.clone(), seq: 1, part }));
    frames
}

/// Every JSON object inside `v`, by its path (a pointer).
fn objects(v: &serde_json::Value, at: String, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            out.push(at.clone());
            for (k, x) in m {
                objects(x, format!("{at}/{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                objects(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn an_unknown_field_anywhere_in_any_frame_is_refused() {
    let mut checked = 0;
    for f in every_frame() {
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(parse(v.to_string().as_bytes()).unwrap(), f, "the frame as sent reads back");
        let mut at = Vec::new();
        objects(&v, String::new(), &mut at);
        for path in at {
            let mut bad = v.clone();
            bad.pointer_mut(&path).unwrap().as_object_mut().unwrap().insert("zz_unknown".into(), 1.into());
            let r = parse(bad.to_string().as_bytes());
            assert!(r.is_err(), "an unknown field at {path:?} of {} was taken: {bad}", f.kind());
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} objects checked");
}

#[test]
fn versions_are_chosen_newest_first() {
    assert_eq!(choose(&[6]), Some(6));
    assert_eq!(choose(&[0, 1, 2, 3, 4, 5, 6, 7]), Some(6));
    assert_eq!(choose(&[1, 2, 3, 4, 5]), None, "versions this build no longer speaks");
    assert_eq!(choose(&[]), None);
}

proptest::proptest! {
    /// Whatever bytes arrive, reading a frame ends with a frame or an error, never a panic,
    /// and never reads a body longer than the bound.
    #[test]
    fn any_bytes(b in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let _ = read_frame(&mut &b[..]);
    }

    #[test]
    fn any_body(b in proptest::collection::vec(proptest::num::u8::ANY, 1..300)) {
        let _ = parse(&b);
    }

    #[test]
    fn any_json_text(s in "\\PC{0,200}") {
        let _ = parse(s.as_bytes());
        let _ = parse(format!(r#"{{"frame":"request","run":"r","seq":1,"op":{s}}}"#).as_bytes());
    }
}
