//! The verifier on deallocates and Write Zeroes: the drive's state painted byte by byte into
//! a memory image (what an honest or a faulty drive would read), the history built from
//! ledger records, every verdict checked against the rules of `zeroed`.

use super::*;
use crate::ledger::{Contract, DeallocRead, EndKind, History, Record, RunHeader, LEDGER_FORMAT};
use crate::workload::{FlushPolicy, OpMix, Pattern, WorkloadSpec, Zeroing};
use crate::writer::fill_write;
use faultline_drivers::{Completion, Geometry, Op, TargetError};
use std::time::Duration;

const SPAN: u64 = 1 << 20;
const SB: u64 = 512;
const RUN: u64 = 5;

/// The bytes a drive reads: the verifier sees nothing else.
struct Image(Vec<u8>);

impl BlockTarget for Image {
    fn geometry(&self) -> Geometry {
        Geometry { logical_block_bytes: SB as u32, physical_block_bytes: SB as u32, capacity_bytes: SPAN }
    }
    fn identity(&self) -> String {
        "image".into()
    }
    fn queue_depth(&self) -> usize {
        1
    }
    fn submit(&mut self, _: Op) -> Result<(), TargetError> {
        Err(TargetError::Unsupported { path: "image".into(), reason: "read only".into() })
    }
    fn reap(&mut self, _: &mut Vec<Completion>, _: usize, _: Duration) -> Result<usize, TargetError> {
        Ok(0)
    }
    fn in_flight(&self) -> usize {
        0
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), faultline_drivers::IoFailure> {
        buf.copy_from_slice(&self.0[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
}

/// 4 KiB sequential ops over 256 slots (ids 1..=256 the first pass, 257..=512 the second...),
/// 30% deallocates and 20% Write Zeroes, atomic unit 4 KiB.
struct Case {
    layout: Layout,
    format: Format,
    history: History,
    image: Image,
}

impl Case {
    /// Ids below `submitted` submitted in one cycle, those below `durable` durable.
    fn new(reads: DeallocRead, submitted: u64, durable: u64, end: EndKind) -> Case {
        let spec = WorkloadSpec {
            seed: 3,
            pattern: Pattern::Sequential {},
            span_start: 0,
            span_end: SPAN,
            min_write_bytes: 4096,
            max_write_bytes: 4096,
            mean_write_bytes: 4096,
            align_bytes: 4096,
            queue_depth: 8,
            flush: FlushPolicy::default(),
            ops: OpMix { deallocate_ppm: 300_000, write_zeroes_ppm: 200_000 },
        };
        let header = RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: RUN,
            created_at: String::new(),
            target_identity: "image".into(),
            target_capacity: SPAN,
            sector_bytes: SB,
            atomic_bytes: 4096,
            dealloc_reads: reads,
            contract: Contract::Plp,
            ports: crate::port::PortEntry::single(),
            workload: spec.clone(),
        };
        let mut history = History::new(header.clone());
        let recs = [
            Record::RunStart(header),
            Record::CycleStart { cycle: 1, first_id: 1, at: String::new(), port: crate::port::PortId::A },
            Record::Reserve { cycle: 1, upto: submitted },
            Record::CycleEnd {
                cycle: 1,
                end,
                submitted_end: submitted,
                durable_prefix: durable,
                durable_extras: vec![],
                failed: vec![],
                in_flight_at_end: (submitted - durable) as u32,
                bytes_at_risk: 0,
            },
        ];
        for r in recs.into_iter().skip(1) {
            history.apply(r).unwrap();
        }
        let mut case = Case {
            layout: Layout::new(spec, SB).unwrap(),
            format: Format::new(RUN, SB as usize),
            history,
            image: Image(vec![0xA5; SPAN as usize]),
        };
        for id in 1..durable {
            case.apply(id, reads);
        }
        case
    }

    /// What an honest drive leaves after op `id`.
    fn apply(&mut self, id: u64, reads: DeallocRead) {
        let w = self.layout.plan(id);
        let range = w.offset as usize..w.end() as usize;
        match w.zeroing() {
            None => {
                let cycle = self.history.cycle_of(id).map_or(1, |c| c.cycle);
                fill_write(&self.format, &w, cycle, 0, &mut self.image.0[range])
            }
            Some(Zeroing::WriteZeroes) => self.image.0[range].fill(0),
            Some(Zeroing::Format) => self.image.0[range].fill(0),
            Some(Zeroing::Deallocate) => match reads {
                DeallocRead::Zeros => self.image.0[range].fill(0),
                DeallocRead::Ones => self.image.0[range].fill(0xff),
                DeallocRead::Unreported => {} // the last data written stays
            },
        }
    }

    fn verify(&mut self) -> VerifyReport {
        Verifier::new(&self.layout, &self.history, &self.format).verify(&mut self.image, 0, SPAN).unwrap()
    }

    /// The first id at or after `from` of `kind` whose slot held a write in each earlier pass
    /// (`None`: a write).
    fn find(&self, from: u64, kind: Option<Zeroing>, earlier_writes: u64) -> WritePlan {
        (from..)
            .map(|id| self.layout.plan(id))
            .find(|w| {
                w.zeroing() == kind && (1..=earlier_writes).all(|k| w.id > k * 256 && self.layout.plan(w.id - k * 256).zeroing().is_none())
            })
            .unwrap()
    }
}

fn classes(rep: &VerifyReport) -> Vec<(FindingClass, u64)> {
    rep.findings.iter().map(|f| (f.class, f.length)).collect()
}

#[test]
fn an_honest_drive_verifies_clean_whatever_its_deallocates_read() {
    for reads in [DeallocRead::Zeros, DeallocRead::Ones, DeallocRead::Unreported] {
        let mut c = Case::new(reads, 700, 700, EndKind::Graceful);
        let rep = c.verify();
        assert_eq!(classes(&rep), vec![], "{reads:?}: {:?}", &rep.findings[..rep.findings.len().min(3)]);
        assert_eq!(rep.durable_ok, SPAN / SB, "{reads:?}");
    }
}

#[test]
fn old_data_back_after_a_durable_deallocate_is_a_resurrection() {
    let mut c = Case::new(DeallocRead::Zeros, 700, 700, EndKind::Graceful);
    let z = c.find(520, Some(Zeroing::Deallocate), 2);
    // The drive forgot the deallocate: the write before it is back.
    let before = c.layout.plan(z.id - 256);
    fill_write(&c.format, &before, 1, 0, &mut c.image.0[z.offset as usize..z.end() as usize]);
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![(FindingClass::Resurrection, 4096)]);
    assert!(rep.findings[0].detail.contains(&format!("durable deallocate {}", z.id)), "{}", rep.findings[0].detail);
    assert_eq!(rep.findings[0].expected, Shown::Zeroed { write_id: z.id, op: "deallocate".into() });

    // Unreported: the data last written may stay; the version before it may not.
    let mut c = Case::new(DeallocRead::Unreported, 700, 700, EndKind::Graceful);
    let z = c.find(520, Some(Zeroing::Deallocate), 2);
    let last = c.layout.plan(z.id - 256);
    fill_write(&c.format, &last, 1, 0, &mut c.image.0[z.offset as usize..z.end() as usize]);
    assert_eq!(classes(&c.verify()), vec![], "the data last written, kept by an unreported deallocate");
    let older = c.layout.plan(z.id - 512);
    fill_write(&c.format, &older, 1, 0, &mut c.image.0[z.offset as usize..z.end() as usize]);
    assert_eq!(classes(&c.verify()), vec![(FindingClass::Resurrection, 4096)], "older than the data last written");
}

#[test]
fn zeros_where_nothing_zeroed_lose_the_write_and_a_write_zeroes_is_a_write() {
    // A deallocate applied to sectors it did not name: the write durable there reads zeros.
    let mut c = Case::new(DeallocRead::Zeros, 700, 700, EndKind::Graceful);
    let w = c.find(520, None, 0);
    c.image.0[w.offset as usize..w.end() as usize].fill(0);
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![(FindingClass::LostWrite, 4096)]);
    assert_eq!(rep.findings[0].found, Shown::Zeros {});

    // A durable Write Zeroes half applied: torn, as a write would be.
    let mut c = Case::new(DeallocRead::Zeros, 700, 700, EndKind::Graceful);
    let z = c.find(520, Some(Zeroing::WriteZeroes), 1);
    let before = c.layout.plan(z.id - 256);
    let mut old = vec![0u8; 4096];
    fill_write(&c.format, &before, 1, 0, &mut old);
    c.image.0[z.offset as usize + 2048..z.end() as usize].copy_from_slice(&old[2048..]);
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![(FindingClass::TornWrite, 2048)]);
    assert!(rep.findings[0].detail.contains("durable write_zeroes"), "{}", rep.findings[0].detail);
    // FFh is not what a Write Zeroes leaves, nor any version the sector held in this run.
    c.image.0[z.offset as usize..z.end() as usize].fill(0xff);
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![(FindingClass::Corruption, 4096)]);
    assert_eq!(rep.findings[0].found, Shown::Ones {});
}

#[test]
fn an_uncertain_zeroing_op_may_land_or_not_sector_by_sector() {
    // Ids 650..700 in flight at the cut: nothing of them applied, then all of them.
    let mut c = Case::new(DeallocRead::Zeros, 700, 650, EndKind::Cut);
    assert_eq!(classes(&c.verify()), vec![]);
    for id in 650..700 {
        c.apply(id, DeallocRead::Zeros);
    }
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![]);
    assert!(rep.newer_ok > 0);
    // An uncertain deallocate may apply sector by sector; a Write Zeroes is atomic in its unit.
    let mut c = Case::new(DeallocRead::Zeros, 700, 650, EndKind::Cut);
    let d = c.find(650, Some(Zeroing::Deallocate), 0);
    let z = c.find(650, Some(Zeroing::WriteZeroes), 0);
    assert!(d.id < 700 && z.id < 700, "the mix holds both in flight: {} {}", d.id, z.id);
    c.image.0[d.offset as usize..d.offset as usize + 1024].fill(0);
    assert_eq!(classes(&c.verify()), vec![], "a deallocate applied to 2 of its 8 sectors");
    c.image.0[z.offset as usize..z.offset as usize + 1024].fill(0);
    // Zeros prove no uncertain op landed on a sector (a deallocate applied elsewhere leaves
    // them too), so a Write Zeroes in flight is not held to its atomic unit; a durable one is
    // (above).
    assert_eq!(classes(&c.verify()), vec![], "a Write Zeroes in flight applied to 2 of its 8 sectors");
}

#[test]
fn a_sector_never_claims_a_zeroing_op_and_near_zeros_are_corruption() {
    let mut c = Case::new(DeallocRead::Zeros, 700, 700, EndKind::Graceful);
    let z = c.find(520, Some(Zeroing::WriteZeroes), 0);
    // A sector tagged with the Write Zeroes' id: the drive cannot have written it.
    let as_write = WritePlan { op: crate::workload::OpKind::Write, ..z };
    fill_write(&c.format, &as_write, 1, 0, &mut c.image.0[z.offset as usize..z.end() as usize]);
    let rep = c.verify();
    assert_eq!(classes(&rep), vec![(FindingClass::UnexpectedVersion, 4096)]);
    assert!(rep.findings[0].detail.contains("which writes no data"), "{}", rep.findings[0].detail);
    // Zeros with a few bits set: damaged in place.
    c.image.0[z.offset as usize..z.end() as usize].fill(0);
    c.image.0[z.offset as usize + 7] = 0x11;
    assert_eq!(classes(&c.verify()), vec![(FindingClass::Corruption, 512)]);
}

impl Case {
    /// Ids 1..600 durable, id 600 a format (`done`: completed, durable), then cycle 2's ids
    /// 601..650 durable, its writes over what the format left; the image as an honest drive
    /// leaves it (the format applied when `done`, not at all otherwise).
    fn formatted(reads: DeallocRead, done: bool) -> Case {
        let mut c = Case::new(reads, 600, 600, EndKind::Graceful);
        let spec = c.layout.spec().clone();
        let recs = [
            Record::CycleStart { cycle: 2, first_id: 600, at: String::new(), port: crate::port::PortId::A },
            Record::Reserve { cycle: 2, upto: 601 },
            Record::Format { cycle: 2, id: 600 },
            Record::CycleEnd {
                cycle: 2,
                end: EndKind::Cut,
                submitted_end: 601,
                durable_prefix: 600 + u64::from(done),
                durable_extras: vec![],
                failed: vec![],
                in_flight_at_end: u32::from(!done),
                bytes_at_risk: 0,
            },
            Record::CycleStart { cycle: 3, first_id: 601, at: String::new(), port: crate::port::PortId::A },
            Record::Reserve { cycle: 3, upto: 650 },
            Record::CycleEnd {
                cycle: 3,
                end: EndKind::Graceful,
                submitted_end: 650,
                durable_prefix: 650,
                durable_extras: vec![],
                failed: vec![],
                in_flight_at_end: 0,
                bytes_at_risk: 0,
            },
        ];
        for r in recs {
            c.history.apply(r).unwrap();
        }
        if done {
            c.image.0.fill(if reads == DeallocRead::Ones { 0xff } else { 0 });
        }
        assert_eq!(c.history.plan(&c.layout, 600), WritePlan::format(&spec, 600));
        for id in 601..650 {
            c.apply(id, reads);
        }
        c
    }

    /// The cycle-3 write ids 601..650 do not cover: a sector only the format covers since.
    fn only_formatted(&self) -> u64 {
        (0..SPAN / SB).map(|s| s * SB).find(|&a| self.layout.latest_covering(a, 650).is_none_or(|w| w.id < 600)).unwrap()
    }
}

#[test]
fn a_completed_format_leaves_no_old_data_and_one_cut_short_leaves_each_sector_old_or_formatted() {
    for reads in [DeallocRead::Zeros, DeallocRead::Ones, DeallocRead::Unreported] {
        let mut c = Case::formatted(reads, true);
        assert_eq!(classes(&c.verify()), vec![], "{reads:?}: an honest drive after a completed format");
        // Old data back under a completed format: a resurrection, naming the format.
        let a = c.only_formatted() as usize;
        let before = c.layout.latest_covering(a as u64, 600).unwrap();
        let mut old = vec![0u8; before.len as usize];
        fill_write(&c.format, &before, 1, 0, &mut old);
        let at = a - before.offset as usize;
        c.image.0[a..a + SB as usize].copy_from_slice(&old[at..at + SB as usize]);
        let rep = c.verify();
        assert_eq!(classes(&rep), vec![(FindingClass::Resurrection, SB)], "{reads:?}");
        assert!(rep.findings[0].detail.contains("durable format 600"), "{}", rep.findings[0].detail);
        assert_eq!(rep.findings[0].expected, Shown::Zeroed { write_id: 600, op: "format".into() });
    }
    // Cut short: nothing applied, or some sectors zeroed, is fine; the later writes are owed.
    let mut c = Case::formatted(DeallocRead::Zeros, false);
    assert_eq!(classes(&c.verify()), vec![], "a format that never landed");
    let a = c.only_formatted() as usize;
    c.image.0[a..a + 3 * SB as usize].fill(0);
    assert_eq!(classes(&c.verify()), vec![], "a format that landed on 3 sectors");
    // FFh is not what it leaves on a drive whose deallocated sectors read zeros.
    c.image.0[a..a + SB as usize].fill(0xff);
    assert_eq!(classes(&c.verify()).len(), 1, "FFh where a format cut short could leave zeros or the old data");
    // A write after the format, lost: found as any write.
    let mut c = Case::formatted(DeallocRead::Zeros, true);
    let w = c.layout.plan(620);
    c.image.0[w.offset as usize..w.end() as usize].fill(0);
    let rep = c.verify();
    assert!(rep.findings.iter().all(|f| f.class == FindingClass::LostWrite) && !rep.findings.is_empty(), "{:?}", classes(&rep));
}
