//! In the lab guest: faultline's own NVMe passthrough engine on each namespace with
//! protection information (`lab --pi-namespace-mib`: `PI_NAMESPACES`, types 1 to 3, 16- and
//! 64-bit guards), through the namespace's generic device (`/dev/ng0nN`). The engine
//! writes each block's guard, application and reference tags and has the controller check them;
//! it reads with checking off and checks every tuple itself. `conformance_in_the_lab_guest`
//! (lab_arm.rs) runs the body below in its boot, after the block-device bodies.

use super::lab_arm::{blank, LAB_SERIAL};
use super::*;

/// The lab's namespaces with protection information, as the lab makes them.
pub use faultline::lab::machine::{PiNamespace, PI_NAMESPACES};
use faultline_drivers::passthru::{Guard, Metadata, Pi, PiType};

/// How the lines of this body name a namespace's format: "4096+64, type 1, tuple last".
pub fn format_of(ns: &PiNamespace) -> String {
    let place = match (ns.metadata_bytes == tuple_bytes(ns), ns.first) {
        (true, _) => "",
        (false, true) => ", tuple first",
        (false, false) => ", tuple last",
    };
    let guard = if ns.guard64 { ", 64-bit guard" } else { "" };
    format!("{}+{}, type {}{guard}{place}", ns.block_bytes, ns.metadata_bytes, ns.pi_type)
}

fn tuple_bytes(ns: &PiNamespace) -> u64 {
    if ns.guard64 {
        16
    } else {
        8
    }
}

/// Whether the workload deallocates there: not where a block is smaller than the image file's
/// 4 KiB block, where QEMU leaves a block a deallocate zeroed with its old tuple (see
/// [`qemu_leaves_the_old_tuple_beside_a_block_a_short_deallocate_zeroed`]).
fn deallocates(ns: &PiNamespace) -> bool {
    ns.block_bytes >= 4096
}

/// Whether the workload writes zeroes there: not with a 64-bit guard after other metadata,
/// whose guard QEMU's Write Zeroes gets wrong (see
/// [`qemu_writes_zeroes_under_a_64_bit_guard_of_the_data_alone`]).
fn writes_zeroes(ns: &PiNamespace) -> bool {
    !(ns.guard64 && !ns.first && ns.metadata_bytes > tuple_bytes(ns))
}

/// The namespace's metadata as the engine carries it.
fn metadata_of(ns: &PiNamespace) -> Metadata {
    let kind = match ns.pi_type {
        1 => PiType::Type1,
        2 => PiType::Type2,
        _ => PiType::Type3,
    };
    let guard = if ns.guard64 { Guard::Crc64 } else { Guard::Crc16 };
    Metadata { bytes: ns.metadata_bytes as u16, pi: Some(Pi { kind, first: ns.first, guard }) }
}

/// Three cycles of the mixed workload with 10% deallocates and 10% Write Zeroes, each cut with
/// the queue full and verified whole through the same engine (a tuple that does not match is
/// a finding); then one block's reference tag (type 3, whose reference tag is opaque: its
/// application tag) is overwritten through nvme-cli (its data and guard unchanged, PRINFO 0
/// so the controller stores what it is given), and the verifier must name that block, and
/// only it, with the field and both values.
#[test]
#[ignore = "runs in the lab guest on its PI namespaces (conformance_in_the_lab_guest runs it there)"]
fn passthrough_writes_and_checks_protection_information_on_the_lab_guest_s_pi_namespaces() {
    for ns in &PI_NAMESPACES {
        let dev = std::env::var(ns.env).unwrap_or_else(|_| panic!("runs in the lab guest with {} set", ns.env));
        let ng = PathBuf::from(dev.replacen("/dev/nvme", "/dev/ng", 1));
        pi_namespace_through_passthrough(&ng, ns);
    }
}

fn pi_namespace_through_passthrough(ng: &Path, ns: &PiNamespace) {
    let (format, ms, deallocates, write_zeroes) = (format_of(ns), ns.metadata_bytes, deallocates(ns), writes_zeroes(ns));
    // The boot's earlier bodies wrote these namespaces (one planted a bad tuple on the first,
    // which the signature probe's read through the kernel would fail on): blanked below.
    let spec = OpenSpec {
        writable: true,
        queue_depth: 16,
        expect: Expectation { serial: Some(LAB_SERIAL.into()), size_bytes: Some(CAP), ..Default::default() },
        allow_overwrite_signature: true,
        io_threads: 1,
    };
    let name = ng.display().to_string();
    let mut o = open_target(ng, &spec).unwrap_or_else(|e| panic!("open {name}: {e}"));
    assert_eq!(o.engine, Engine::NvmePassthru, "{name}: {:?}", o.notes);
    let pi_note = metadata_of(ns).describe();
    assert!(o.notes.iter().any(|n| n.contains(&pi_note)), "{name}: no '{pi_note}' in {:?}", o.notes);
    let t = o.target.as_mut();
    let lbs = u64::from(t.geometry().logical_block_bytes);
    blank(t, &name);
    let ops = faultline::workload::OpMix {
        deallocate_ppm: if deallocates { 100_000 } else { 0 },
        write_zeroes_ppm: if write_zeroes { 100_000 } else { 0 },
    };
    let wspec = WorkloadSpec { min_write_bytes: lbs, align_bytes: lbs, ..mixed_spec(21, ops) };
    let dir = scratch(&format!("conf-pi-{}", ng.file_name().unwrap().to_string_lossy()));
    let (mut ledger, layout, fmt) = plp_run_on(t, wspec, &dir, lbs);
    let (mut first_id, mut zeroing) = (1, (0, 0));
    for cycle in 1..=3u32 {
        let opts = cycle_opts(cycle, first_id, Some(CutPlacement::AfterCompletions { completions: 300 * cycle as u64 }), None);
        let out = run_cycle(t, &layout, &fmt, &mut ledger, Contract::Plp, &opts, &mut || Ok(())).unwrap();
        assert!(out.completed >= 300 * cycle as u64 && out.failed <= out.in_flight_at_cut as u64, "{name}: {out:?}");
        (first_id, zeroing) = (out.submitted_end, (zeroing.0 + out.zeroing.deallocates, zeroing.1 + out.zeroing.write_zeroes));
        let rep = Verifier::new(&layout, ledger.history(), &fmt).verify(t, 0, CAP).unwrap();
        let shown: Vec<String> = rep.findings.iter().take(3).map(|f| format!("{} at {}: {}", f.class.name(), f.offset, f.detail)).collect();
        assert!(rep.findings.is_empty() && rep.durable_ok > 0, "{name} ({format}) cycle {cycle} seed 21: {shown:?}");
    }
    assert!((zeroing.0 > 0) == deallocates && (zeroing.1 > 0) == write_zeroes, "{name}: deallocates and Write Zeroes sent: {zeroing:?}");
    // The first block of id 1 (a write, or a zeroing op's zeros): its data and guard as they
    // are, its reference tag that of the next LBA (type 3: its application tag 1234h).
    let at = layout.plan(1).offset;
    let lba = at / lbs;
    let mut block = AlignedBuf::zeroed(lbs as usize);
    t.read_at(at, &mut block).unwrap_or_else(|e| panic!("{name}: read {at}: {e}"));
    let meta = planted_tuple(&block, lba, ns);
    let (data_f, meta_f) = (dir.join("block.bin"), dir.join("meta.bin"));
    std::fs::write(&data_f, &block[..]).unwrap();
    std::fs::write(&meta_f, &meta).unwrap();
    let (lba_s, size_s, ms_s) = (lba.to_string(), format!("--data-size={lbs}"), format!("--metadata-size={ms}"));
    let args = ["write", s(ng), "--start-block", &lba_s, "--block-count=0", &size_s, "--data", s(&data_f)];
    let planted = sh("nvme", &[&args[..], &[&ms_s, "--metadata", s(&meta_f), "--prinfo=0"]].concat()).unwrap_or_else(|e| panic!("{e}"));
    let rep = Verifier::new(&layout, ledger.history(), &fmt).verify(t, 0, CAP).unwrap();
    let f: Vec<String> = rep.findings.iter().map(|f| format!("{} at {} (+{}): {}", f.class.name(), f.offset, f.length, f.detail)).collect();
    assert_eq!(f.len(), 1, "{name}: {planted}: {f:?}");
    let f0 = &rep.findings[0];
    assert_eq!((f0.class, f0.offset, f0.length), (faultline::verify::FindingClass::Unreadable, at, lbs), "{f:?}");
    let w = if ns.guard64 { 12 } else { 8 };
    let want = if ns.pi_type == 3 {
        "application tag 1234h where 0000h was written".to_string()
    } else {
        format!("reference tag {:0w$X}h where its LBA gives {:0w$X}h", lba + 1, lba)
    };
    assert!(f0.detail.starts_with("protection information mismatch: ") && f0.detail.contains(&want), "{f:?}");
    // The same data written back through the engine gets its tuple again: clean, and the
    // namespace is left as a later run (lab-pi-passthrough.toml) expects to find it.
    t.submit(Op::Write { token: 7, offset: at, buf: block, fua: true, write_id: 1 }).unwrap();
    assert!(reap_all(t, 1)[0].result.is_ok(), "{name}: rewriting {at}");
    let rep = Verifier::new(&layout, ledger.history(), &fmt).verify(t, 0, CAP).unwrap();
    assert!(rep.findings.is_empty(), "{name}: after the rewrite: {:?}", &rep.findings[..rep.findings.len().min(3)]);
    println!(
        "pi passthru: {name} ({format}): 3 cut cycles with {} deallocates and {} Write Zeroes verified clean; the planted tag found: {}",
        zeroing.0, zeroing.1, f[0]
    );
}

/// `block`'s metadata with its tuple right but for one field: the reference tag of the next LBA
/// (type 3, whose reference tag is opaque: application tag 1234h). The engine's own filling,
/// whose guard QEMU checks on every write of the bodies above.
fn planted_tuple(block: &[u8], lba: u64, ns: &PiNamespace) -> Vec<u8> {
    let mut meta = vec![0u8; ns.metadata_bytes as usize];
    let m = metadata_of(ns);
    if ns.pi_type == 3 {
        m.fill(block, block.len(), lba, &mut meta);
        let app = if ns.first { 0 } else { (ns.metadata_bytes - tuple_bytes(ns)) as usize } + if ns.guard64 { 8 } else { 2 };
        meta[app..app + 2].copy_from_slice(&0x1234u16.to_be_bytes());
    } else {
        m.fill(block, block.len(), lba + 1, &mut meta);
    }
    meta
}

/// The generic device of the namespace guest variable `var` names, opened with queue depth 1.
fn generic_device_of(var: &str) -> (PathBuf, faultline_drivers::Opened) {
    let dev = std::env::var(var).unwrap_or_else(|_| panic!("runs in the lab guest with {var} set"));
    let ng = PathBuf::from(dev.replacen("/dev/nvme", "/dev/ng", 1));
    let spec = OpenSpec { writable: true, queue_depth: 1, allow_overwrite_signature: true, ..Default::default() };
    let o = open_target(&ng, &spec).unwrap_or_else(|e| panic!("open {}: {e}", ng.display()));
    (ng, o)
}

/// Submits `op` to `t` and waits for its result.
fn op(t: &mut dyn BlockTarget, op: Op) -> Result<(), faultline_drivers::IoFailure> {
    t.submit(op).unwrap();
    reap_all(t, 1).remove(0).result
}

/// In the guest, on the 512+8 PI namespace's generic device: QEMU's deallocate (hw/nvme/ctrl.c,
/// `nvme_dsm_md_cb`) punches the range out of the image, which zeroes a block that does not
/// fill the image file's 4 KiB block in place; it then zeroes the metadata only where the
/// image reports the whole range as zero, which such a range is not, so the block reads zeros
/// beside the tuple of the data it held. NVMe says a deallocated block's guard is FFFFh or,
/// with DLFEAT bit 4, the CRC of what it reads (a tuple faultline would accept); a block that
/// was not deallocated reads its old data. Either way, zeros under the old tuple are neither.
/// A deallocate of a whole 4 KiB of the image is reported zero, and reads the escape tuple.
#[test]
#[ignore = "runs in the lab guest on its PI namespaces (conformance_in_the_lab_guest runs it there)"]
fn qemu_leaves_the_old_tuple_beside_a_block_a_short_deallocate_zeroed() {
    let (ng, mut o) = generic_device_of("LAB_NS_PI");
    let t = o.target.as_mut();
    // 16 blocks at LBA 64 (two 4 KiB of the image), not zeros; then one block deallocated,
    // LBA 67, and the whole second 4 KiB, LBA 72 to 79.
    let mut data = AlignedBuf::zeroed(16 * 512);
    data.fill(0x5A);
    op(t, Op::Write { token: 1, offset: 64 * 512, buf: data, fua: true, write_id: 1 }).unwrap();
    let zero = |offset, len| Op::Zero { token: 2, offset, len, kind: faultline_drivers::Zeroing::Deallocate, write_id: 2 };
    op(t, zero(67 * 512, 512)).unwrap();
    op(t, zero(72 * 512, 8 * 512)).unwrap();
    let mut block = AlignedBuf::zeroed(512);
    let e = t.read_at(67 * 512, &mut block).expect_err("LBA 67 reads zeros beside its old tuple");
    assert_eq!(e.errno, libc::EILSEQ, "{e}");
    let want = format!("LBA 67: guard {:04X}h where its data gives 0000h", faultline_drivers::passthru::guard(&[0x5A; 512]));
    assert!(e.detail.contains(&want) && block.iter().all(|b| *b == 0), "{e}");
    let mut whole = AlignedBuf::zeroed(8 * 512);
    t.read_at(72 * 512, &mut whole).expect("a whole 4 KiB deallocated reads the escape tuple");
    assert!(whole.iter().all(|b| *b == 0));
    println!("pi qemu: a 512-byte deallocate on {}: {}", ng.display(), e.detail);
}

/// In the guest, on the namespace with a 64-bit guard and its 16-byte tuple last in 32 bytes
/// of metadata: QEMU's Write Zeroes with PRACT writes a guard computed over the data alone
/// (CRC-64/NVME of 4096 zeros, 6482D367EB22B64Eh), where the guard covers the data and the 16
/// bytes of metadata before the tuple (18CF1C18CFDC17D1h), as QEMU's own check of a written
/// tuple (PRCHK) computes it: it took the engine's writes of zeros with that guard. A finding
/// on QEMU; the 16-bit guard of zeros is 0 either way, so only a 64-bit guard shows it.
#[test]
#[ignore = "runs in the lab guest on its PI namespaces (conformance_in_the_lab_guest runs it there)"]
fn qemu_writes_zeroes_under_a_64_bit_guard_of_the_data_alone() {
    let (ng, mut o) = generic_device_of("LAB_NS_PI_G64L");
    let t = o.target.as_mut();
    // Zeros written by the engine (its guard, which QEMU checks): read back clean.
    op(t, Op::Write { token: 1, offset: 6 * 4096, buf: AlignedBuf::zeroed(4096), fua: true, write_id: 1 }).unwrap();
    let mut block = AlignedBuf::zeroed(4096);
    t.read_at(6 * 4096, &mut block).expect("zeros the engine wrote read back clean");
    // Zeros by Write Zeroes: QEMU's guard.
    let wz = Op::Zero { token: 2, offset: 5 * 4096, len: 4096, kind: faultline_drivers::Zeroing::WriteZeroes, write_id: 2 };
    op(t, wz).unwrap();
    let e = t.read_at(5 * 4096, &mut block).expect_err("LBA 5 reads its data-only guard");
    assert_eq!(e.errno, libc::EILSEQ, "{e}");
    let data_alone = faultline_drivers::passthru::guard64_with(&[0u8; 4096], &[]);
    let want = faultline_drivers::passthru::guard64_with(&[0u8; 4096], &[0u8; 16]);
    assert!(e.detail.contains(&format!("LBA 5: guard {data_alone:016X}h where its data gives {want:016X}h")), "{e}");
    println!("pi qemu: Write Zeroes on {}: {}", ng.display(), e.detail);
}
