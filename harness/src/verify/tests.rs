use super::*;
use crate::ledger::{tests::tempdir, Contract, LedgerWriter, RunHeader, LEDGER_FORMAT};
use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
use crate::writer::{run_cycle, CycleOptions};
use faultline_drivers::Op;
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
use std::time::Duration;

const SPAN: u64 = 1 << 20;

/// An honest drive after one graceful cycle of 300 sequential 4 KiB writes (span of 256
/// blocks, so the second pass covers the first 44).
fn setup() -> (SimDrive, Layout, Format, LedgerWriter) {
    let mut sim = SimDrive::new(SimConfig {
        capacity_bytes: SPAN,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 8,
        seed: 1,
        model: FaultModel::HonestPlp,
        contract: TruthContract::Plp,
        dealloc_reads: Default::default(),
    });
    let spec = WorkloadSpec {
        seed: 9,
        pattern: Pattern::Sequential {},
        span_start: 0,
        span_end: SPAN,
        min_write_bytes: 4096,
        max_write_bytes: 4096,
        mean_write_bytes: 4096,
        align_bytes: 4096,
        queue_depth: 8,
        flush: FlushPolicy::default(),
        ops: Default::default(),
    };
    let header = RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: 77,
        created_at: String::new(),
        target_identity: sim.identity(),
        target_capacity: SPAN,
        sector_bytes: 512,
        atomic_bytes: 4096,
        dealloc_reads: Default::default(),
        contract: Contract::Plp,
        ports: crate::port::PortEntry::single(),
        workload: spec.clone(),
    };
    let mut ledger = LedgerWriter::create(&tempdir(), header).unwrap();
    let layout = Layout::new(spec, 512).unwrap();
    let format = Format::new(77, 512);
    let opts = CycleOptions {
        cycle: 1,
        first_id: 1,
        started_at: String::new(),
        port: crate::port::PortId::A,
        max_writes: Some(300),
        duration: None,
        cut: None,
        checkpoint_every: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(1),
        stop: None,
        samples: None,
        fill: crate::writer::Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    run_cycle(&mut sim, &layout, &format, &mut ledger, Contract::Plp, &opts, &mut || Ok(())).unwrap();
    (sim, layout, format, ledger)
}

fn put(sim: &mut SimDrive, format: &Format, id: SectorId, at: u64) {
    let mut buf = faultline_drivers::AlignedBuf::zeroed(512);
    format.encode(&id, &mut buf);
    sim.submit(Op::Write { token: 1, offset: at, buf, fua: false, write_id: 999_999 }).unwrap();
    let mut out = Vec::new();
    sim.reap(&mut out, 1, Duration::from_secs(1)).unwrap();
    assert!(out[0].result.is_ok());
}

fn verify(sim: &mut SimDrive, layout: &Layout, format: &Format, ledger: &LedgerWriter) -> VerifyReport {
    Verifier::new(layout, ledger.history(), format).verify(sim, 0, SPAN).unwrap()
}

#[test]
fn clean_run_has_no_findings() {
    let (mut sim, layout, format, ledger) = setup();
    let rep = verify(&mut sim, &layout, &format, &ledger);
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
    assert_eq!((rep.durable_ok, rep.prior_ok), (SPAN / 512, 0));
}

#[test]
fn versions_never_submitted_or_not_matching_the_workload_are_unexpected() {
    let (mut sim, layout, format, ledger) = setup();
    let w = layout.plan(100);
    let good = SectorId { run_id: 77, addr: w.offset, write_id: 100, cycle: 1, port: 0, flags: 0, index: 0, count: 8 };
    // A submitted write whose extent is elsewhere.
    put(&mut sim, &format, SectorId { write_id: 101, ..good }, w.offset);
    // Right write, wrong position inside it.
    put(&mut sim, &format, SectorId { addr: w.offset + 512, index: 3, ..good }, w.offset + 512);
    // Right write, wrong cycle.
    put(&mut sim, &format, SectorId { addr: w.offset + 1024, index: 2, cycle: 2, ..good }, w.offset + 1024);
    // A prefill sector in a run that never prefilled.
    put(&mut sim, &format, prefill_id(77, w.offset + 1536, 0), w.offset + 1536);
    let rep = verify(&mut sim, &layout, &format, &ledger);
    let sectors: Vec<_> =
        rep.findings.iter().flat_map(|f| (f.offset..f.offset + f.length).step_by(512).map(move |o| (o - w.offset, f.class))).collect();
    assert_eq!(sectors, (0..4).map(|i| (i * 512, FindingClass::UnexpectedVersion)).collect::<Vec<_>>(), "{:#?}", rep.findings);
    assert!(rep.findings.iter().any(|f| f.detail.contains("covers [")), "{:#?}", rep.findings);
}

#[test]
fn a_valid_sector_above_every_reservation_means_the_ledger_lost_records() {
    // Ids are reserved in the ledger before they are submitted, and the keyed checksum proves
    // faultline wrote the sector: the drive cannot invent it, so this is the harness's error.
    let (mut sim, layout, format, ledger) = setup();
    let w = layout.plan(100);
    let id = SectorId { run_id: 77, addr: w.offset, write_id: 5000, cycle: 3, port: 0, flags: 0, index: 0, count: 8 };
    put(&mut sim, &format, id, w.offset);
    let err = Verifier::new(&layout, ledger.history(), &format).verify(&mut sim, 0, SPAN).unwrap_err();
    match &err {
        VerifyError::LedgerBehind { addr, write_id, cycle, submitted_end, last_cycle } => {
            assert_eq!((*addr, *write_id, *cycle, *submitted_end, *last_cycle), (w.offset, 5000, 3, 301, 1));
        }
        other => panic!("expected LedgerBehind, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("the ledger lost records") && msg.contains("ledger reserved ids only below 301") && msg.contains("not the drive's"),
        "{msg}"
    );
    // A sector of another run with a high id is no evidence about this ledger.
    let (mut sim, layout, format, ledger) = setup();
    put(&mut sim, &Format::new(78, 512), SectorId { run_id: 78, ..id }, w.offset);
    assert!(Verifier::new(&layout, ledger.history(), &format).verify(&mut sim, 0, SPAN).is_ok());
}

#[test]
fn foreign_or_blank_content_over_durable_data_is_lost_but_near_misses_are_corruption() {
    let (mut sim, layout, format, ledger) = setup();
    let w = layout.plan(200);
    // Another run's valid sector where write 200 is durable: lost.
    let other = Format::new(0xdead_beef, 512);
    for i in 0..8 {
        put(
            &mut sim,
            &other,
            SectorId {
                run_id: 0xdead_beef,
                addr: w.offset + i * 512,
                write_id: 200,
                cycle: 1,
                port: 0,
                flags: 0,
                index: i as u32,
                count: 8,
            },
            w.offset + i * 512,
        );
    }
    let rep = verify(&mut sim, &layout, &format, &ledger);
    assert_eq!(rep.findings.len(), 1, "{:#?}", rep.findings);
    assert_eq!((rep.findings[0].class, rep.findings[0].offset, rep.findings[0].length), (FindingClass::LostWrite, w.offset, 4096));
    assert!(matches!(rep.findings[0].found, Shown::ForeignRun { run_id: 0xdead_beef, .. }));
    // Our sector with one bit flipped in its magic is damage in place, not someone else's.
    let mut sim2 = sim.clone();
    let v = layout.plan(201);
    let mut buf = faultline_drivers::AlignedBuf::zeroed(512);
    sim2.read_at(v.offset, &mut buf).unwrap();
    buf[3] ^= 4;
    sim2.submit(Op::Write { token: 2, offset: v.offset, buf, fua: false, write_id: 999_998 }).unwrap();
    sim2.reap(&mut Vec::new(), 1, Duration::from_secs(1)).unwrap();
    let rep = verify(&mut sim2, &layout, &format, &ledger);
    let f = rep.findings.iter().find(|f| f.offset == v.offset).expect("finding at the flipped sector");
    assert_eq!((f.class, f.length), (FindingClass::Corruption, 512), "{f:?}");
}

#[test]
fn regions_outside_the_span_are_refused() {
    let (mut sim, layout, format, ledger) = setup();
    let v = Verifier::new(&layout, ledger.history(), &format);
    assert!(matches!(v.verify(&mut sim, 0, SPAN + 512), Err(VerifyError::BadRegion { .. })));
    assert!(matches!(v.verify(&mut sim, 100, 4096), Err(VerifyError::BadRegion { .. })));
}

/// A read the block layer failed with EILSEQ (its protection error) is an unreadable sector
/// whose detail says the protection information did not match; another errno says itself.
#[test]
fn a_protection_error_on_read_is_named_as_a_pi_mismatch() {
    let detail = |errno: i32| match tally::unreadable(&faultline_drivers::IoFailure::new(errno, "read of 512 bytes at 4096")) {
        Verdict::Finding { class: FindingClass::Unreadable, found: Shown::ReadError { errno: e, .. }, detail } if e == errno => detail,
        _ => panic!("errno {errno}: not an unreadable sector reporting it"),
    };
    let pi = detail(libc::EILSEQ);
    assert!(pi.starts_with("protection information mismatch: ") && pi.contains("read of 512 bytes at 4096"), "{pi}");
    // The passthrough engine's own check names the field: said as it is.
    let own =
        "/dev/ng0n2 read of 512 bytes at 4096: the protection information of LBA 8: reference tag 00000009h where its LBA gives 00000008h";
    match tally::unreadable(&faultline_drivers::IoFailure::new(libc::EILSEQ, own)) {
        Verdict::Finding { detail, .. } => assert_eq!(detail, format!("protection information mismatch: {own}")),
        _ => panic!("not a finding"),
    }
    assert!(!detail(libc::EIO).contains("protection"), "{}", detail(libc::EIO));
}
