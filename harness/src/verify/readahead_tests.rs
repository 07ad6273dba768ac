//! The scan of many chunks (reads started ahead of the chunk being checked) on the io_uring
//! engine over a scratch file: it finds exactly what verifying each chunk alone finds (the
//! one-read path), damage in the first, a middle and the short last chunk included; and a
//! list of regions verified with reads ahead across them finds what each region alone finds.

use super::*;
use crate::ledger::{tests::tempdir, Contract, LedgerWriter, RunHeader, LEDGER_FORMAT};
use crate::rng::WyRand;
use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
use crate::writer::{prefill, run_cycle, CycleOptions};
use faultline_drivers::{open_target, Op, OpenSpec};
use std::time::Duration;

const SEED: u64 = 0x7ead_a4ead;
/// Three whole chunks and a quarter.
const SPAN: u64 = 3 * READ_CHUNK + READ_CHUNK / 4;

fn rewrite(t: &mut dyn BlockTarget, block: u64, edit: impl FnOnce(&mut [u8])) {
    let mut buf = AlignedBuf::zeroed(4096);
    t.read_at(block, &mut buf).expect("read the block back");
    edit(&mut buf);
    t.submit(Op::Write { token: 1, offset: block, buf, fua: false, write_id: 0 }).unwrap();
    let mut out = Vec::new();
    while out.is_empty() {
        t.reap(&mut out, 1, Duration::from_secs(10)).unwrap();
    }
    assert!(out[0].result.is_ok(), "seed {SEED:#x}: {:?}", out[0].result);
}

/// A prefilled scratch file on the io_uring engine, one cycle written over it, and three
/// sectors damaged; the damaged sectors' offsets.
struct Damaged {
    dir: std::path::PathBuf,
    t: Box<dyn BlockTarget>,
    ledger: LedgerWriter,
    layout: Layout,
    format: Format,
    damaged: Vec<u64>,
}

fn damaged() -> Damaged {
    let dir = tempdir();
    let path = dir.join("target.img");
    std::fs::File::create(&path).and_then(|f| f.set_len(SPAN)).unwrap();
    let opened = open_target(&path, &OpenSpec { writable: true, queue_depth: 8, ..Default::default() }).unwrap();
    assert_eq!(opened.engine.to_string(), "io_uring", "seed {SEED:#x}: this test is about the io_uring engine's reads");
    let mut t = opened.target;
    let spec = WorkloadSpec {
        seed: SEED,
        pattern: Pattern::Random {},
        span_start: 0,
        span_end: SPAN,
        min_write_bytes: 4096,
        max_write_bytes: 16384,
        mean_write_bytes: 8192,
        align_bytes: 4096,
        queue_depth: 8,
        flush: FlushPolicy::default(),
        ops: Default::default(),
    };
    let header = RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: 91,
        created_at: String::new(),
        target_identity: t.identity(),
        target_capacity: SPAN,
        sector_bytes: 512,
        atomic_bytes: 512,
        dealloc_reads: Default::default(),
        contract: Contract::Plp,
        ports: crate::port::PortEntry::single(),
        workload: spec.clone(),
    };
    let mut ledger = LedgerWriter::create(&dir, header).unwrap();
    let layout = Layout::new(spec, 512).unwrap();
    let format = Format::new(91, 512);
    prefill(t.as_mut(), &layout, &format, crate::port::PortId::A, &mut ledger).unwrap();
    let opts = CycleOptions {
        cycle: 1,
        first_id: 1,
        started_at: String::new(),
        port: crate::port::PortId::A,
        max_writes: Some(200),
        duration: None,
        cut: None,
        checkpoint_every: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(10),
        stop: None,
        samples: None,
        fill: crate::writer::Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    run_cycle(t.as_mut(), &layout, &format, &mut ledger, Contract::Plp, &opts, &mut || Ok(())).unwrap();
    // Damage: a flipped bit, a zeroed sector and garbage, in the first, a middle and the
    // last (short) chunk, at places drawn from the seed.
    let mut rng = WyRand::new(SEED);
    let mut damaged = Vec::new();
    for chunk in [0, 2, 3] {
        let room = (SPAN - chunk * READ_CHUNK).min(READ_CHUNK) / 4096;
        let block = chunk * READ_CHUNK + rng.below(room) * 4096;
        let k = rng.below(8) as usize * 512;
        let how = rng.below(3);
        rewrite(t.as_mut(), block, |b| match how {
            0 => b[k + 100] ^= 4,
            1 => b[k..k + 512].fill(0),
            _ => b[k..k + 512].fill(0x5a),
        });
        damaged.push(block + k as u64);
    }
    Damaged { dir, t, ledger, layout, format, damaged }
}

#[test]
fn a_scan_reading_ahead_finds_what_each_chunk_alone_finds() {
    let Damaged { dir, mut t, ledger, layout, format, damaged } = damaged();
    let v = Verifier::new(&layout, ledger.history(), &format);
    let mut progress = Vec::new();
    let whole = v.verify_with_progress(t.as_mut(), 0, SPAN, &mut |done, _| progress.push(done)).unwrap();
    let mut pieces = VerifyReport::default();
    for at in (0..SPAN).step_by(READ_CHUNK as usize) {
        let rep = v.verify(t.as_mut(), at, (at + READ_CHUNK).min(SPAN)).unwrap();
        pieces.sectors += rep.sectors;
        pieces.durable_ok += rep.durable_ok;
        pieces.findings.extend(rep.findings);
    }
    let found: Vec<u64> = whole.findings.iter().map(|f| f.offset).collect();
    assert_eq!(found, damaged, "seed {SEED:#x}: {:#?}", whole.findings);
    assert_eq!(whole.findings, pieces.findings, "seed {SEED:#x}");
    assert_eq!((whole.sectors, whole.durable_ok), (pieces.sectors, pieces.durable_ok), "seed {SEED:#x}");
    assert_eq!((whole.sectors, whole.bytes), (SPAN / 512, SPAN), "seed {SEED:#x}");
    assert_eq!(progress, vec![READ_CHUNK, 2 * READ_CHUNK, 3 * READ_CHUNK, SPAN], "seed {SEED:#x}");
    drop(t);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn regions_verified_with_reads_ahead_across_them_find_what_each_alone_finds() {
    let Damaged { dir, mut t, ledger, layout, format, damaged } = damaged();
    let v = Verifier::new(&layout, ledger.history(), &format);
    // Random 4 KiB blocks in random order (some twice), each damaged block, and regions
    // longer than a chunk that start and end off chunk boundaries.
    let mut rng = WyRand::new(SEED ^ 1);
    let mut regions: Vec<(u64, u64)> = (0..300).map(|_| rng.below(SPAN / 4096) * 4096).map(|a| (a, a + 4096)).collect();
    regions.extend(damaged.iter().map(|&d| (d / 4096 * 4096, d / 4096 * 4096 + 4096)));
    regions.push(regions[7]);
    regions.insert(40, (READ_CHUNK / 2, 2 * READ_CHUNK + 4096));
    regions.insert(120, (512, SPAN - 512));
    let together = v.verify_regions(t.as_mut(), &regions).unwrap();
    let mut alone = VerifyReport::default();
    for &(a, b) in &regions {
        alone.merge(v.verify(t.as_mut(), a, b).unwrap());
    }
    assert_eq!(together.findings, alone.findings, "seed {SEED:#x}");
    assert_eq!(
        (together.sectors, together.bytes, together.durable_ok, together.newer_ok, together.prior_ok),
        (alone.sectors, alone.bytes, alone.durable_ok, alone.newer_ok, alone.prior_ok),
        "seed {SEED:#x}"
    );
    let expected: u64 = regions.iter().map(|(a, b)| b - a).sum();
    assert_eq!(together.bytes, expected, "seed {SEED:#x}");
    // Every damaged sector was found (once per region holding it).
    for d in &damaged {
        assert!(together.findings.iter().any(|f| f.offset == *d), "seed {SEED:#x}: {d} not found");
    }
    assert!(matches!(v.verify_regions(t.as_mut(), &[(0, 4096), (100, 4096)]), Err(VerifyError::BadRegion { .. })));
    drop(t);
    let _ = std::fs::remove_dir_all(dir);
}
