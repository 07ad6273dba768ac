//! What the drive showed: the `seen` record a verify builds, and the pins that hold it.
//!
//! A run over ten 4 KiB blocks written in order (write `i` on block `(i - 1) % 10`), atomic
//! unit one sector, PLP contract. The ledger is written by hand, the drive's sectors one by
//! one, so that every case is exact.

use super::*;
use crate::ledger::{tests::tempdir, Applied, Contract, EndKind, LedgerWriter, Record, RunHeader, SeenWrite, LEDGER_FORMAT};
use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
use faultline_drivers::Op;
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
use std::time::Duration;

const SPAN: u64 = 10 * 4096;

struct Run {
    sim: SimDrive,
    layout: Layout,
    format: Format,
    ledger: LedgerWriter,
    dir: std::path::PathBuf,
}

fn run() -> Run {
    let sim = SimDrive::new(SimConfig {
        capacity_bytes: SPAN,
        sector_bytes: 512,
        atomic_bytes: 512,
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
        atomic_bytes: 512,
        dealloc_reads: Default::default(),
        contract: Contract::Plp,
        ports: crate::port::PortEntry::single(),
        workload: spec.clone(),
    };
    let dir = tempdir();
    let ledger = LedgerWriter::create(&dir, header).unwrap();
    let layout = Layout::new(spec, 512).unwrap();
    assert_eq!(layout.plan(18).offset, layout.plan(8).offset, "the layout wraps after ten writes");
    Run { sim, layout, format: Format::new(77, 512), ledger, dir }
}

impl Run {
    /// Cycle `cycle` wrote ids `[first, end)` and was cut; those below `durable` are durable.
    fn cycle(&mut self, cycle: u32, first: u64, end: u64, durable: u64) {
        self.ledger.append(&Record::CycleStart { cycle, first_id: first, at: String::new(), port: crate::port::PortId::A }).unwrap();
        self.ledger
            .append(&Record::CycleEnd {
                cycle,
                end: EndKind::Cut,
                submitted_end: end,
                durable_prefix: durable,
                durable_extras: vec![],
                failed: vec![],
                in_flight_at_end: 3,
                bytes_at_risk: 3 * 4096,
            })
            .unwrap();
    }

    /// Sector `i` of write `id` on the drive, as the writer would have put it there.
    fn show(&mut self, id: u64, i: u64) {
        let w = self.layout.plan(id);
        let cycle = self.ledger.history().cycle_of(id).unwrap().cycle;
        let sid = SectorId { run_id: 77, addr: w.offset + i * 512, write_id: id, cycle, port: 0, flags: 0, index: i as u32, count: 8 };
        let mut buf = AlignedBuf::zeroed(512);
        self.format.encode(&sid, &mut buf);
        self.raw(w.offset + i * 512, buf);
    }

    /// Zeros at sector `i` of write `id`'s block (what an unmapped sector reads as).
    fn zero(&mut self, id: u64, i: u64) {
        let at = self.layout.plan(id).offset + i * 512;
        self.raw(at, AlignedBuf::zeroed(512));
    }

    fn raw(&mut self, offset: u64, buf: AlignedBuf) {
        self.sim.submit(Op::Write { token: 1, offset, buf, fua: false, write_id: 999_999 }).unwrap();
        let mut out = Vec::new();
        self.sim.reap(&mut out, 1, Duration::from_secs(1)).unwrap();
        assert!(out[0].result.is_ok());
    }

    /// Verifies the whole span; returns the report and the `seen` record it makes.
    fn verify(&mut self) -> (VerifyReport, Option<Record>) {
        let h = self.ledger.history();
        let rep = Verifier::new(&self.layout, h, &self.format).verify(&mut self.sim, 0, SPAN).unwrap();
        let rec = seen_record(h, &self.layout, &[(0, SPAN)], &rep.seen);
        (rep, rec)
    }

    fn write(&mut self, id: u64) {
        (0..8).for_each(|i| self.show(id, i));
    }
}

fn classes(rep: &VerifyReport) -> Vec<(u64, FindingClass)> {
    rep.findings.iter().flat_map(|f| (f.offset..f.offset + f.length).step_by(512).map(move |o| (o, f.class))).collect()
}

fn seen(id: u64, applied: Applied, sectors: &[[u32; 2]]) -> SeenWrite {
    SeenWrite { id, applied, sectors: sectors.to_vec() }
}

/// Cycle 1: writes 1..=10, 1..=7 durable; 8 landed, 9 on its first four sectors, 10 not at
/// all. Verified and recorded.
fn after_cycle_one() -> Run {
    let mut r = run();
    r.cycle(1, 1, 11, 8);
    (1..=8).for_each(|id| r.write(id));
    (0..4).for_each(|i| r.show(9, i));
    let (rep, rec) = r.verify();
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
    let want = Record::Seen {
        cycle: 1,
        writes: vec![seen(8, Applied::Fully, &[]), seen(9, Applied::Partly, &[[0, 4]]), seen(10, Applied::NotAtAll, &[])].into(),
    };
    assert_eq!(rec.as_ref(), Some(&want));
    r.ledger.append(&want).unwrap();
    r
}

#[test]
fn the_seen_record_says_which_uncertain_writes_landed_and_on_which_sectors() {
    let mut r = after_cycle_one();
    let h = r.ledger.history();
    assert_eq!(h.seen_cycles, vec![1]);
    assert_eq!(h.pins.iter().map(|p| (p.cycle, p.write.id)).collect::<Vec<_>>(), vec![(1, 8), (1, 9)], "not_at_all pins nothing");
    // The same drive verified again holds it all: nothing older than what was seen.
    let (rep, _) = r.verify();
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
}

#[test]
fn a_later_cycle_showing_an_older_version_where_a_write_was_seen_is_stale() {
    let mut r = after_cycle_one();
    // Cycle 2 writes 11..=20 (over the same blocks); only 11..=17 are durable, and the cut
    // left 18, 19 and 20 (blocks of 8, 9 and 10) uncertain.
    r.cycle(2, 11, 21, 18);
    (11..=17).for_each(|id| r.write(id));
    // Block of write 8: write 18 landed on sector 0 (newer: fine), sector 2 went back to zeros.
    r.show(18, 0);
    r.zero(8, 2);
    // Block of write 9: sector 1 (seen new) is zeros again; sector 5 (seen old) now shows
    // write 9, a late landing, which is not a regression.
    r.zero(9, 1);
    r.show(9, 5);
    // Block of write 10 (seen not at all): it shows now, too late but never older.
    r.show(10, 0);
    let (rep, rec) = r.verify();
    let (b8, b9) = (r.layout.plan(8).offset, r.layout.plan(9).offset);
    assert_eq!(classes(&rep), vec![(b8 + 1024, FindingClass::StaleVersion), (b9 + 512, FindingClass::StaleVersion)], "{:#?}", rep.findings);
    let f = &rep.findings[0];
    assert!(
        f.detail.starts_with("write 8 was seen applied at verify of cycle 1; cycle 2 shows zeros")
            && f.detail.contains(&format!("at byte {} (LBA {})", b8 + 1024, (b8 + 1024) / 512)),
        "{}",
        f.detail
    );
    assert!(matches!(f.expected, Shown::Write { write_id: 8, .. }) && f.found == Shown::Zeros {}, "{f:?}");
    // Cycle 2's record: 18 on its first sector only; 19 and 20 nowhere.
    let want = Record::Seen {
        cycle: 2,
        writes: vec![seen(18, Applied::Partly, &[[0, 1]]), seen(19, Applied::NotAtAll, &[]), seen(20, Applied::NotAtAll, &[])].into(),
    };
    assert_eq!(rec, Some(want));
}

#[test]
fn a_newer_durable_write_takes_over_from_the_pin_and_the_contract_judges() {
    let mut r = after_cycle_one();
    // Write 18 is durable this time: zeros in its block are a lost or torn write of 18, as
    // without any pin.
    r.cycle(2, 11, 21, 19);
    (11..=18).for_each(|id| r.write(id));
    r.zero(18, 3);
    let (rep, _) = r.verify();
    assert_eq!(classes(&rep), vec![(r.layout.plan(18).offset + 1536, FindingClass::TornWrite)], "{:#?}", rep.findings);
}

#[test]
fn an_older_version_of_this_run_where_a_newer_one_was_seen_is_stale_too() {
    let mut r = after_cycle_one();
    // Cycle 2's write 18 lands on the whole block; cycle 3 writes nothing and the block shows
    // write 8 again (itself seen in cycle 1, but older than 18).
    r.cycle(2, 11, 21, 18);
    (11..=17).for_each(|id| r.write(id));
    r.write(18);
    let (rep, rec) = r.verify();
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
    let rec = rec.unwrap();
    assert!(matches!(&rec, Record::Seen { writes, .. } if writes[0] == seen(18, Applied::Fully, &[])), "{rec:?}");
    r.ledger.append(&rec).unwrap();
    r.cycle(3, 21, 21, 21);
    r.write(8);
    let (rep, rec) = r.verify();
    let b = r.layout.plan(8).offset;
    assert_eq!(classes(&rep), (0..8).map(|i| (b + i * 512, FindingClass::StaleVersion)).collect::<Vec<_>>(), "{:#?}", rep.findings);
    assert!(rep.findings[0].detail.starts_with("write 18 was seen applied at verify of cycle 2; cycle 3 shows write 8 (cycle 1, older)"));
    assert_eq!(rec, None, "cycle 3 wrote nothing");
}

#[test]
fn sectors_not_read_are_not_held_and_an_open_cycle_records_nothing() {
    let mut r = run();
    r.cycle(1, 1, 11, 8);
    (1..=10).for_each(|id| r.write(id));
    // Only the first half of write 9's block is read.
    let b9 = r.layout.plan(9).offset;
    let h = r.ledger.history();
    let rep = Verifier::new(&r.layout, h, &r.format).verify(&mut r.sim, b9, b9 + 2048).unwrap();
    let rec = seen_record(h, &r.layout, &[(b9, b9 + 2048)], &rep.seen);
    assert_eq!(rec, Some(Record::Seen { cycle: 1, writes: vec![seen(9, Applied::Partly, &[[0, 4]])].into() }));
    // A cycle still open (the harness died in it) is not resolved.
    r.ledger.append(&Record::CycleStart { cycle: 2, first_id: 11, at: String::new(), port: crate::port::PortId::A }).unwrap();
    let h = r.ledger.history();
    let rep = Verifier::new(&r.layout, h, &r.format).verify(&mut r.sim, 0, SPAN).unwrap();
    assert!(rep.seen.is_empty());
    assert_eq!(seen_record(h, &r.layout, &[(0, SPAN)], &rep.seen), None);
}

#[test]
fn a_run_opened_again_holds_what_was_seen_before_it_was_closed() {
    // What a resumed run does: replay the ledger (the harness died after cycle 1's verify).
    let mut r = after_cycle_one();
    r.ledger.sync().unwrap();
    let dir = r.dir.clone();
    let reopened = crate::run::open_run(&dir, &crate::run::DeviceFacts::of(&r.sim), || unreachable!("the run exists")).unwrap();
    assert_eq!(reopened.history().pins, r.ledger.history().pins);
    r.zero(8, 7);
    let rep = Verifier::new(&r.layout, reopened.history(), &r.format).verify(&mut r.sim, 0, SPAN).unwrap();
    assert_eq!(classes(&rep), vec![(r.layout.plan(8).offset + 7 * 512, FindingClass::StaleVersion)], "{:#?}", rep.findings);
}

/// A cycle the harness died in is closed at its last reservation, which can lie far more than
/// MAX_SEEN_WRITES ids beyond what it wrote: the record still holds the writes the verify saw
/// (the window ends at the newest one seen), not only ids that were never written.
#[test]
fn an_interrupted_cycle_reserved_far_ahead_still_records_what_was_seen() {
    let mut r = run();
    let reserved_end = 11 + 3 * MAX_SEEN_WRITES;
    r.ledger.append(&Record::CycleStart { cycle: 1, first_id: 1, at: String::new(), port: crate::port::PortId::A }).unwrap();
    r.ledger
        .append(&Record::CycleEnd {
            cycle: 1,
            end: EndKind::Interrupted,
            submitted_end: reserved_end,
            durable_prefix: 8,
            durable_extras: vec![],
            failed: vec![],
            in_flight_at_end: 0,
            bytes_at_risk: 0,
        })
        .unwrap();
    (1..=9).for_each(|id| r.write(id));
    let (rep, rec) = r.verify();
    assert!(rep.findings.is_empty(), "{:#?}", rep.findings);
    let Some(Record::Seen { cycle: 1, writes }) = rec else { panic!("no seen record: {rec:?}") };
    assert_eq!(writes.0, vec![seen(8, Applied::Fully, &[]), seen(9, Applied::Fully, &[])]);
}
