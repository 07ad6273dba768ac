//! Every parser of untrusted input in the harness, against arbitrary bytes and against valid
//! documents with bits flipped, bytes cut off, random bytes spliced in and pieces copied
//! elsewhere: no panic, every case done in bounded time (inputs are a few KiB at most), and an
//! error that says what is wrong and, where the parser reports a location, names one.
//!
//! Parsers: scenario files (TOML, the types, validation), the event log (`events.jsonl`, and
//! the reports built from whatever it accepts), the ledger (frames, torn tail, replay), sector
//! decoding and the NVMe SMART / OCP log pages. The drivers' parsers (controller specs and
//! controller replies) are in `drivers/tests/parsers.rs`.
//!
//! Seeds are fixed (see `common/seeded.rs`); a failure prints the one to replay it with.

use crate::common::scratch;
use crate::common::seeded::{check, mutate, mutations};
use faultline::events::{Event, EventKind, HealthNote, SmartFigures, Verdict};
use faultline::format::{Decoded, Format, SectorId};
use faultline::health::{critical_warning_meaning, judge, judge_ocp, parse_ocp_smart, parse_smart, HealthPolicy, Shutdown, LOG_BYTES};
use faultline::ledger::{
    parse_ledger, replay, Contract, EndKind, LedgerError, LedgerWriter, Record, RunHeader, LEDGER_FILE, LEDGER_FORMAT,
};
use faultline::report::jsonl::parse_events;
use faultline::report::{html, junit, summary, ReportError, RunModel};
use faultline::scenario::{Scenario, ScenarioError};
use faultline::verify::{Finding, FindingClass, Shown};
use faultline::workload::{FlushPolicy, Pattern, WorkloadSpec};
use proptest::prelude::*;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

const CASES: u32 = 256;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

// --- scenario files ------------------------------------------------------------------------

const SHIPPED: [(&str, &str); 8] = [
    ("reference.toml", include_str!("../scenarios/reference.toml")),
    ("demo.toml", include_str!("../scenarios/demo.toml")),
    ("plp-validation.toml", include_str!("../scenarios/plp-validation.toml")),
    ("volatile-flush.toml", include_str!("../scenarios/volatile-flush.toml")),
    ("clean-shutdown-control.toml", include_str!("../scenarios/clean-shutdown-control.toml")),
    ("misaligned-torture.toml", include_str!("../scenarios/misaligned-torture.toml")),
    ("link-reset-storm.toml", include_str!("../scenarios/link-reset-storm.toml")),
    ("hotplug-pin-sweep.toml", include_str!("../scenarios/hotplug-pin-sweep.toml")),
];

const ORIGIN: &str = "fuzz.toml";

/// The error names the file, and a syntax error a line and column inside it.
fn scenario_error_is_clear(text: &str, e: &ScenarioError) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(msg.starts_with(ORIGIN), "error does not name the file: {msg}");
    let lines = text.split('\n').count();
    match e {
        ScenarioError::Syntax { line, column, message, .. } => {
            prop_assert!(!message.trim().is_empty(), "empty syntax message: {msg}");
            prop_assert!(*line >= 1 && *line <= lines && *column >= 1, "location {line}:{column} outside the {lines}-line text: {msg}");
            prop_assert!(msg.starts_with(&format!("{ORIGIN}:{line}:{column}: ")), "{msg}");
        }
        ScenarioError::Version { line, column, .. } => {
            prop_assert!(*line >= 1 && *line <= lines && *column >= 1, "location {line}:{column} outside the text: {msg}");
        }
        ScenarioError::Invalid { field, message, .. } => {
            prop_assert!(!field.is_empty() && !message.trim().is_empty(), "invalid value without a field or a reason: {msg}");
        }
        other => prop_assert!(false, "from_toml returned {other:?}, which no text should cause"),
    }
    Ok(())
}

/// A scenario that parsed is valid, round-trips, and its controllers and layout are usable.
fn accepted_scenario_holds(s: &Scenario) -> Result<(), TestCaseError> {
    prop_assert!(s.validate(ORIGIN).is_ok());
    let text = s.to_toml().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back = Scenario::from_toml(&text, ORIGIN).map_err(|e| TestCaseError::fail(format!("re-reading to_toml: {e}\n{text}")))?;
    prop_assert_eq!(&back, s);
    prop_assert!(s.power_controller().is_ok() && s.link_controller().is_ok());
    let cap = s.target.sim.as_ref().map(|t| t.capacity_bytes).or(s.target.size_bytes).unwrap_or(1 << 30);
    if let Err(e) = s.layout(512, cap, 1) {
        prop_assert!(!e.to_string().trim().is_empty());
    }
    Ok(())
}

/// Ok(true) when the text was accepted.
fn scenario_case(text: &str) -> Result<bool, TestCaseError> {
    match Scenario::from_toml(text, ORIGIN) {
        Ok(s) => accepted_scenario_holds(&s).map(|()| true),
        Err(e) => scenario_error_is_clear(text, &e).map(|()| false),
    }
}

/// Counts the cases a parser accepted and refused, so that a property over mutated documents
/// can insist that it saw both (a property whose inputs were all refused at the first byte
/// would test nothing).
#[derive(Default)]
struct Outcomes {
    accepted: AtomicU32,
    refused: AtomicU32,
}

impl Outcomes {
    fn note(&self, r: Result<bool, TestCaseError>) -> Result<(), TestCaseError> {
        let accepted = r?;
        if accepted { &self.accepted } else { &self.refused }.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn assert_both(&self, what: &str) {
        let (a, r) = (self.accepted.load(Ordering::Relaxed), self.refused.load(Ordering::Relaxed));
        assert!(a > 0 && r > 0, "{what}: {a} inputs accepted and {r} refused; the inputs do not reach both outcomes");
    }
}

/// Text made of what TOML is made of, so that the parser gets past the first byte.
fn toml_like() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"([a-z_\[\]\.="' 0-9\n#{},+-]|format_version = 1\n|\[target\]\n|\[target\.sim\]\n){0,200}"#).unwrap()
}

#[test]
fn scenario_arbitrary_bytes() {
    check("scenario_arbitrary_bytes", CASES, bytes(2048), |b| scenario_case(&String::from_utf8_lossy(&b)).map(drop));
}

#[test]
fn scenario_toml_like_text() {
    check("scenario_toml_like_text", CASES, toml_like(), |t| scenario_case(&t).map(drop));
}

#[test]
fn scenario_mutated_shipped_files() {
    let strategy = (0..SHIPPED.len(), mutations(4));
    let seen = Outcomes::default();
    check("scenario_mutated_shipped_files", CASES * 2, strategy, |(i, m)| {
        let text = String::from_utf8_lossy(&mutate(SHIPPED[i].1.as_bytes(), &m)).into_owned();
        seen.note(scenario_case(&text))
    });
    seen.assert_both("mutated scenario files");
}

/// A value changed on one line is caught by validation or parses to a valid scenario; and the
/// error names the field. Exercises validation rather than the TOML syntax.
#[test]
fn scenario_shipped_files_with_one_number_replaced() {
    let strategy = (0..SHIPPED.len(), any::<usize>(), prop_oneof![Just(0u64), Just(1), Just(511), Just(u64::MAX), any::<u64>()]);
    let seen = Outcomes::default();
    check("scenario_shipped_files_with_one_number_replaced", CASES, strategy, |(i, pick, n)| {
        let text = SHIPPED[i].1;
        let numbers: Vec<(usize, usize)> = number_spans(text);
        prop_assume!(!numbers.is_empty());
        let (a, b) = numbers[pick % numbers.len()];
        let edited = format!("{}{}{}", &text[..a], n.min(i64::MAX as u64), &text[b..]);
        seen.note(scenario_case(&edited))
    });
    seen.assert_both("scenario files with one number replaced");
}

/// Byte spans of the integer values (`key = 123`) in a TOML text.
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if let Some(eq) = line.find(" = ") {
            let v = &line[eq + 3..];
            let digits = v.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && !line.trim_start().starts_with('#') {
                out.push((at + eq + 3, at + eq + 3 + digits));
            }
        }
        at += line.len();
    }
    out
}

// --- the event log and the reports built from it -------------------------------------------

fn sample_events() -> Vec<Event> {
    let mut counts = faultline::events::zero_counts();
    *counts.get_mut("lost_write").expect("class") = 1;
    vec![
        Event::new(
            0,
            EventKind::RunStarted {
                run_id: "00000000000000ab".into(),
                scenario: "fuzz <&> \"q\"".into(),
                target: "sim:8MiB".into(),
                contract: Contract::Flush,
                cycles_planned: 2,
                seed: 4,
                started_at: "2026-01-01T00:00:00+00:00".into(),
            },
        ),
        Event::in_cycle(10, 1, EventKind::CycleStarted { fault: None, off_time_ms: None }),
        Event::in_cycle(
            20,
            1,
            EventKind::CutIssued {
                completions: 100,
                in_flight_ops: 8,
                bytes_at_risk: 32768,
                phase_us: 900,
                planned_after_ms: Some(3),
                mate_step_ms: Some(25),
                command_us: Some(4200),
            },
        ),
        Event::in_cycle(30, 1, EventKind::DeviceGone {}),
        Event::in_cycle(40, 1, EventKind::PowerRestored { off_us: None }),
        Event::in_cycle(50, 1, EventKind::Ready { enumerate_us: Some(1500), first_read_us: None })
            .with_port(Some(faultline::port::PortId(1))),
        Event::in_cycle(
            60,
            1,
            EventKind::Health {
                smart: SmartFigures { unsafe_shutdowns: 11, power_cycles: 21, ..SmartFigures::default() },
                anomalies: vec![HealthNote { kind: "media_errors_grew".into(), detail: "media errors 0 -> 1".into() }],
                pcie: Some(faultline::pcie::PcieHealth {
                    link_speed: Some("8.0 GT/s PCIe".into()),
                    link_width: Some(4),
                    aer: [Some(0), None, Some(1)],
                    ready_timeout_ms: Some(7500),
                }),
            },
        ),
        Event::in_cycle(70, 1, EventKind::Verified { sectors: 16384, bytes: 8 << 20, verify_ns: 3_000_000, counts }),
        Event::in_cycle(
            70,
            1,
            EventKind::Finding {
                finding: Finding {
                    class: FindingClass::LostWrite,
                    offset: 8192,
                    length: 4096,
                    expected: Shown::Write { write_id: 41, cycle: 1, port: 0, addr: 8192, index: 0, count: 8 },
                    found: Shown::Prefill {},
                    cycle: 1,
                    detail: "<b>gone</b>".into(),
                },
            },
        ),
        Event::in_cycle(
            80,
            1,
            EventKind::CycleEnded {
                verdict: Verdict::Findings,
                writes_completed: 100,
                bytes_written: 1 << 20,
                write_ns: 5_000_000,
                latency_p50_ns: Some(80_000),
                latency_p99_ns: Some(900_000),
                latency_max_ns: Some(1_200_000),
                max_gap_ns: None,
                harness_ns: Some(2_000_000),
                zeroing: Default::default(),
            },
        ),
        Event::new(85, EventKind::HarnessError { message: "controller said FAIL".into() }).with_cycle(Some(2)),
        Event::new(
            90,
            EventKind::RunResumed {
                resumed_at: "2026-01-01T01:00:00+00:00".into(),
                cycles_ended: 1,
                interrupted_cycle: Some(2),
                last_event: "cycle_started".into(),
            },
        ),
        Event::new(100, EventKind::RunEnded { verdict: Verdict::Findings, exit_code: 1 }),
    ]
}

fn log_bytes(events: &[Event]) -> Vec<u8> {
    let mut b = Vec::new();
    for e in events {
        b.extend(e.to_json().expect("serialises"));
        b.push(b'\n');
    }
    b
}

/// Ok(true) when the log was accepted.
fn events_case(b: &[u8]) -> Result<bool, TestCaseError> {
    match parse_events(b, "events.jsonl") {
        Ok(read) => {
            prop_assert!(read.torn_tail_bytes <= b.len());
            // Whatever the log accepts, every report renders.
            let m = RunModel::from_events(&read.events);
            let _ = (m.verdict(), m.implied_verdict());
            let s = summary::render(&m);
            prop_assert!(serde_json::from_str::<serde_json::Value>(&s).is_ok(), "summary.json is not JSON");
            let _ = junit::render(&read.events);
            let _ = html::render(&m);
            Ok(true)
        }
        Err(ReportError::BadLine { path, line, message }) => {
            let lines = b.split_inclusive(|&c| c == b'\n').count();
            prop_assert_eq!(path.as_str(), "events.jsonl");
            prop_assert!(line >= 1 && line <= lines, "line {} of {}", line, lines);
            prop_assert!(!message.trim().is_empty());
            let err = ReportError::BadLine { path, line, message }.to_string();
            prop_assert!(err.contains(&format!("line {line}")), "{}", err);
            Ok(false)
        }
        Err(other) => Err(TestCaseError::fail(format!("parse_events returned {other}, which no bytes should cause"))),
    }
}

#[test]
fn events_arbitrary_bytes() {
    check("events_arbitrary_bytes", CASES, bytes(2048), |b| events_case(&b).map(drop));
}

#[test]
fn events_mutated_log() {
    let log = log_bytes(&sample_events());
    let seen = Outcomes::default();
    check("events_mutated_log", CASES * 2, mutations(4), |m| seen.note(events_case(&mutate(&log, &m))));
    seen.assert_both("mutated event logs");
}

/// Cut anywhere, the log reads back as a prefix of its events: a torn last line is dropped,
/// never refused, and nothing before it is lost.
#[test]
fn events_cut_anywhere_read_back_as_a_prefix() {
    let events = sample_events();
    let log = log_bytes(&events);
    check("events_cut_anywhere_read_back_as_a_prefix", CASES, 0..=log.len(), |cut| {
        let r = parse_events(&log[..cut], "events.jsonl").map_err(|e| TestCaseError::fail(format!("cut at {cut}: {e}")))?;
        let n = r.events.len();
        prop_assert_eq!(&r.events[..], &events[..n]);
        let whole: usize = log_bytes(&events[..n]).len();
        // Either the kept events end exactly at the cut (give or take their newline) or the
        // rest is the dropped tail.
        prop_assert!(whole == cut + 1 || whole + r.torn_tail_bytes == cut, "cut {} kept {} bytes, torn {}", cut, whole, r.torn_tail_bytes);
        Ok(())
    });
}

// --- the ledger ----------------------------------------------------------------------------

fn header() -> RunHeader {
    RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: 0xab,
        created_at: "2026-01-01T00:00:00+00:00".into(),
        target_identity: "sim:1MiB".into(),
        target_capacity: 1 << 20,
        sector_bytes: 512,
        atomic_bytes: 4096,
        dealloc_reads: Default::default(),
        contract: Contract::Flush,
        ports: faultline::port::PortEntry::single(),
        workload: WorkloadSpec {
            seed: 1,
            pattern: Pattern::Random {},
            span_start: 0,
            span_end: 1 << 20,
            min_write_bytes: 4096,
            max_write_bytes: 4096,
            mean_write_bytes: 4096,
            align_bytes: 4096,
            queue_depth: 4,
            flush: FlushPolicy { every_writes: Some(16), every_ms: None, fua_percent: 5 },
            ops: Default::default(),
        },
    }
}

/// A real ledger image, written by the ledger writer: two cycles, the second interrupted.
fn valid_ledger() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = scratch("ledger-image");
        let mut w = LedgerWriter::create(&dir, header()).expect("create");
        let records = [
            Record::PrefillDone { span_start: 0, span_end: 1 << 20 },
            Record::CycleStart { cycle: 1, first_id: 1, at: "t1".into(), port: faultline::port::PortId::A },
            Record::Reserve { cycle: 1, upto: 64 },
            Record::Checkpoint { cycle: 1, durable_prefix: 20, durable_extras: vec![25, 22], failed: vec![3] },
            Record::WriteFailed { cycle: 1, id: 30, errno: 5, detail: "EIO".into() },
            Record::CycleEnd {
                cycle: 1,
                end: EndKind::Cut,
                submitted_end: 40,
                durable_prefix: 30,
                durable_extras: vec![35],
                failed: vec![3, 30],
                in_flight_at_end: 4,
                bytes_at_risk: 16384,
            },
            Record::CycleStart { cycle: 2, first_id: 64, at: "t2".into(), port: faultline::port::PortId::A },
            Record::Reserve { cycle: 2, upto: 128 },
        ];
        for r in &records {
            w.append(r).expect("append");
        }
        w.close().expect("close");
        let image = std::fs::read(dir.join(LEDGER_FILE)).expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        image
    })
}

/// Ok(true) when the image was accepted.
fn ledger_case(b: &[u8]) -> Result<bool, TestCaseError> {
    match parse_ledger(Path::new("ledger.fl"), b) {
        Ok((records, valid, torn)) => {
            prop_assert_eq!(valid + torn, b.len() as u64, "valid + torn tail must account for every byte");
            let mut last = None;
            for (offset, _) in &records {
                prop_assert!(*offset < valid && last.is_none_or(|l| l < *offset), "record offsets out of order or past the valid part");
                last = Some(*offset);
            }
            Ok(true)
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(msg.starts_with("ledger ledger.fl"), "error does not name the ledger: {}", msg);
            match &e {
                LedgerError::CorruptMiddle { offset, next, why, .. } => {
                    prop_assert!(offset < next && (*next as usize) < b.len() && !why.is_empty());
                    prop_assert!(msg.contains(&format!("at byte {offset}")), "{}", msg);
                }
                LedgerError::Invalid { offset, why, .. } => {
                    prop_assert!((*offset as usize) < b.len() && !why.is_empty());
                    prop_assert!(msg.contains(&format!("at byte {offset}")), "{}", msg);
                }
                other => prop_assert!(false, "parse_ledger returned {other}, which no bytes should cause"),
            }
            Ok(false)
        }
    }
}

#[test]
fn ledger_arbitrary_bytes() {
    check("ledger_arbitrary_bytes", CASES, bytes(1024), |b| ledger_case(&b).map(drop));
}

#[test]
fn ledger_arbitrary_frames() {
    // Well-framed garbage: the documented frame layout around arbitrary payloads, so that the
    // record decoder and replay see input the checksum does not stop.
    let payload = prop_oneof![bytes(64), "[ -~]{0,80}".prop_map(String::into_bytes)];
    let seen = Outcomes::default();
    check("ledger_arbitrary_frames", CASES, proptest::collection::vec(payload, 0..6), |payloads| {
        let mut img = valid_ledger()[..first_frame_len()].to_vec();
        for (i, p) in payloads.iter().enumerate() {
            img.extend(frame(i as u64 + 1, p));
        }
        ledger_case(&img)?;
        seen.note(replay_case(&img))
    });
    seen.assert_both("well-framed ledgers replayed");
}

fn first_frame_len() -> usize {
    let b = valid_ledger();
    24 + u32::from_le_bytes(b[4..8].try_into().expect("4")) as usize
}

/// The frame layout of `ledger/frame.rs`, written out again: magic, length, sequence, check, payload.
fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut h = blake3::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    let mut f = b"FLR1".to_vec();
    f.extend((payload.len() as u32).to_le_bytes());
    f.extend(seq.to_le_bytes());
    f.extend(&h.finalize().as_bytes()[..8]);
    f.extend(payload);
    f
}

/// Ok(true) when the ledger replayed.
fn replay_case(b: &[u8]) -> Result<bool, TestCaseError> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = scratch(&format!("replay-{}", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::write(dir.join(LEDGER_FILE), b).expect("write");
    let r = replay(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(h) => {
            prop_assert_eq!(h.valid_bytes + h.torn_tail_bytes, b.len() as u64);
            prop_assert!(h.records >= 1);
            // The replayed history answers questions about any id without panicking.
            for id in [0, 1, 3, 30, 39, 40, 64, 127, 128, u64::MAX] {
                let _ = (h.is_durable(id), h.cycle_of(id));
            }
            let _ = (h.submitted_end(), h.last_cycle());
            Ok(true)
        }
        Err(e) => {
            prop_assert!(!e.to_string().trim().is_empty());
            Ok(false)
        }
    }
}

#[test]
fn ledger_mutated_image_parses_and_replays() {
    let (parsed, replayed) = (Outcomes::default(), Outcomes::default());
    check("ledger_mutated_image_parses_and_replays", CASES * 2, mutations(3), |m| {
        let img = mutate(valid_ledger(), &m);
        parsed.note(ledger_case(&img))?;
        replayed.note(replay_case(&img))
    });
    parsed.assert_both("mutated ledgers parsed");
    replayed.assert_both("mutated ledgers replayed");
}

/// A ledger cut anywhere (the harness host lost power mid-append) replays as a prefix of its
/// records, never as an error, once the first record is whole.
#[test]
fn ledger_cut_anywhere_replays_a_prefix() {
    let img = valid_ledger();
    let (all, _, _) = parse_ledger(Path::new("ledger.fl"), img).expect("valid image");
    check("ledger_cut_anywhere_replays_a_prefix", CASES, first_frame_len()..=img.len(), |cut| {
        let (recs, valid, torn) =
            parse_ledger(Path::new("ledger.fl"), &img[..cut]).map_err(|e| TestCaseError::fail(format!("cut at {cut}: {e}")))?;
        prop_assert_eq!(&recs[..], &all[..recs.len()]);
        prop_assert_eq!(valid + torn, cut as u64);
        prop_assert_eq!(torn == 0, all.iter().any(|(o, _)| *o == cut as u64) || cut == img.len());
        Ok(())
    });
}

// --- sectors -------------------------------------------------------------------------------

fn sector_id() -> impl Strategy<Value = SectorId> {
    (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), any::<u8>(), any::<u8>(), any::<u32>(), any::<u32>()).prop_map(
        |(run_id, addr, write_id, cycle, port, flags, index, count)| SectorId { run_id, addr, write_id, cycle, port, flags, index, count },
    )
}

#[test]
fn sector_arbitrary_bytes_decode_without_panic() {
    let strategy = (any::<bool>(), any::<u64>(), bytes(4096));
    check("sector_arbitrary_bytes_decode_without_panic", CASES, strategy, |(big, run, b)| {
        let n = if big { 4096 } else { 512 };
        let mut sector = b;
        sector.resize(n, 0);
        for f in [Format::new(run, n), Format::new(faultline::format::read_header(&sector).run_id, n)] {
            match f.decode(&sector) {
                Decoded::Valid(id) => {
                    let mut again = vec![0u8; n];
                    f.encode(&id, &mut again);
                    prop_assert!(again == sector, "a sector decoded as valid does not re-encode to itself");
                }
                Decoded::Zeros => prop_assert!(sector.iter().all(|&c| c == 0)),
                Decoded::Damaged { .. } | Decoded::ForeignRun(_) | Decoded::Unrecognized => {}
            }
        }
        Ok(())
    });
}

/// Any change to a valid sector (flips, splices, copies of its own bytes elsewhere, all within
/// its length) is seen: it never decodes as a valid sector.
#[test]
fn sector_mutated_valid_sector_is_never_valid() {
    let strategy = (any::<bool>(), sector_id(), mutations(3));
    check("sector_mutated_valid_sector_is_never_valid", CASES, strategy, |(big, id, m)| {
        let n = if big { 4096 } else { 512 };
        let f = Format::new(id.run_id, n);
        let mut s = vec![0u8; n];
        f.encode(&id, &mut s);
        let mut bad = mutate(&s, &m);
        bad.resize(n, 0);
        prop_assume!(bad != s);
        let d = f.decode(&bad);
        prop_assert!(!matches!(d, Decoded::Valid(_)), "a changed sector decoded as {:?}", d);
        Ok(())
    });
}

// --- NVMe health log pages -----------------------------------------------------------------

fn u128_at(b: &[u8], off: usize) -> u128 {
    let mut x = [0u8; 16];
    x.copy_from_slice(&b[off..off + 16]);
    u128::from_le_bytes(x)
}

#[test]
fn smart_pages_of_any_length() {
    check("smart_pages_of_any_length", CASES, prop_oneof![bytes(1100), proptest::collection::vec(any::<u8>(), LOG_BYTES)], |b| {
        match parse_smart(&b) {
            Ok(s) => {
                prop_assert_eq!(b.len(), LOG_BYTES);
                // The fields sit at the offsets of the NVMe base specification (docs/DOMAIN.md 6).
                prop_assert_eq!(s.critical_warning, b[0]);
                prop_assert_eq!(s.temperature_k, u16::from_le_bytes([b[1], b[2]]));
                prop_assert_eq!(s.power_cycles, u128_at(&b, 112));
                prop_assert_eq!(s.unsafe_shutdowns, u128_at(&b, 144));
                prop_assert_eq!(s.media_errors, u128_at(&b, 160));
                prop_assert_eq!(s.error_log_entries, u128_at(&b, 176));
                let figures = SmartFigures::from(&s);
                prop_assert_eq!(figures.unsafe_shutdowns as u128, s.unsafe_shutdowns.min(u64::MAX as u128));
            }
            Err(e) => {
                prop_assert_ne!(b.len(), LOG_BYTES);
                let msg = e.to_string();
                prop_assert!(msg.contains(&format!("{} bytes", b.len())) && msg.contains("0x02"), "{}", msg);
            }
        }
        match parse_ocp_smart(&b) {
            Ok(o) => {
                prop_assert_eq!(b.len(), LOG_BYTES);
                prop_assert_eq!(o.incomplete_shutdowns, u32::from_le_bytes([b[112], b[113], b[114], b[115]]));
                prop_assert_eq!(o.capacitor_health_pct, u16::from_le_bytes([b[128], b[129]]));
                prop_assert_eq!(o.plp_start_count, u128_at(&b, 160));
            }
            Err(e) => prop_assert!(e.to_string().contains("0xC0"), "{}", e),
        }
        Ok(())
    });
}

#[test]
fn smart_judgement_of_any_two_pages() {
    let page = || proptest::collection::vec(any::<u8>(), LOG_BYTES);
    let strategy = (page(), page(), any::<bool>(), any::<bool>(), any::<bool>());
    check("smart_judgement_of_any_two_pages", CASES, strategy, |(a, b, dirty, bump, errlog)| {
        let (before, after) = (parse_smart(&a).expect("512"), parse_smart(&b).expect("512"));
        let how = if dirty { Shutdown::Dirty } else { Shutdown::Clean };
        let policy = HealthPolicy { allow_clean_bump: bump, report_error_log_growth: errlog };
        for anomaly in judge(&before, &after, how, policy) {
            let note = HealthNote::from(&anomaly);
            prop_assert!(!note.kind.is_empty() && !note.detail.trim().is_empty());
        }
        let _ = judge_ocp(&parse_ocp_smart(&a).expect("512"), &parse_ocp_smart(&b).expect("512"), how);
        let new_bits = after.critical_warning & !before.critical_warning;
        prop_assert_eq!(new_bits == 0, critical_warning_meaning(new_bits).is_empty());
        Ok(())
    });
}
