//! Deallocate and write zeroes on a loop device with 4096-byte sectors and direct I/O: through
//! the io_uring engine (the block layer's io_uring discard command; fallocate, which the kernel
//! makes a write zeroes without unmapping) and the synchronous one (`BLKDISCARD`,
//! `BLKZEROOUT`); and what each says it carries, as the loop's request queue says it in sysfs.
//! The loop driver punches a hole in its backing file for a discard, so a deallocated block
//! reads zeros here, though a block device promises nothing (`DeallocReads::Unreported`).

use super::{loop_or_skip, reap_all, scratch};
use faultline_drivers::blockdev::discover;
use faultline_drivers::sync::SyncTarget;
use faultline_drivers::uring::UringTarget;
use faultline_drivers::{AlignedBuf, BlockTarget, DeallocReads, Op, Zeroing};
use std::path::Path;

const BS: u64 = 4096;

/// A loop device's queue limit `name` (bytes; 0: not carried).
fn queue_limit(dev: &Path, name: &str) -> u64 {
    let n = dev.file_name().unwrap().to_string_lossy().into_owned();
    let p = format!("/sys/block/{n}/queue/{name}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")).trim().parse().unwrap()
}

/// A block's pattern: differs per block and per seed.
fn pattern(seed: u64, block: u64, out: &mut [u8]) {
    let mut x = (seed ^ block.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    for w in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
}

/// Three blocks of a pattern at `base`, the middle one deallocated and the third written with
/// zeroes (submitted together), read back: pattern, zeros, zeros. Then the ranges refused.
fn three_blocks_zeroed(t: &mut dyn BlockTarget, base: u64, seed: u64) {
    let b = BS as usize;
    let mut buf = AlignedBuf::zeroed(3 * b);
    for k in 0..3 {
        pattern(seed, k, &mut buf[k as usize * b..(k as usize + 1) * b]);
    }
    let first = buf[..b].to_vec();
    t.submit(Op::Write { token: 1, offset: base, buf, fua: false, write_id: 1 }).unwrap();
    assert!(reap_all(t, 1)[0].result.is_ok(), "seed {seed:#x}");
    t.submit(Op::Zero { token: 2, offset: base + BS, len: BS, kind: Zeroing::Deallocate, write_id: 2 }).unwrap();
    t.submit(Op::Zero { token: 3, offset: base + 2 * BS, len: BS, kind: Zeroing::WriteZeroes, write_id: 3 }).unwrap();
    for c in reap_all(t, 2) {
        assert!(c.result.is_ok() && c.buf.is_none(), "seed {seed:#x}: token {}: {:?}", c.token, c.result);
    }
    let (back, r) = t.read_owned(base, AlignedBuf::zeroed(3 * b));
    r.unwrap();
    assert!(back[..b] == first[..], "seed {seed:#x}: the block before the zeroed ones changed");
    assert!(back[b..2 * b].iter().all(|&x| x == 0), "seed {seed:#x}: the discarded block (a hole in the loop's file) is not zeros");
    assert!(back[2 * b..].iter().all(|&x| x == 0), "seed {seed:#x}: the block written with zeroes is not zeros");
    let lat = t.latencies();
    let count = |n: &str| lat.iter().find(|(k, _)| *k == n).map_or(0, |(_, h)| h.count());
    assert_eq!((count("deallocate"), count("write_zeroes")), (1, 1), "{lat:?}");
    let cap = t.geometry().capacity_bytes;
    for (k, (offset, len)) in [(base + 512, BS), (base, 512), (base, 0), (cap - BS, 2 * BS)].into_iter().enumerate() {
        let kind = if k % 2 == 0 { Zeroing::Deallocate } else { Zeroing::WriteZeroes };
        t.submit(Op::Zero { token: 10 + k as u64, offset, len, kind, write_id: 10 }).unwrap();
        let c = reap_all(t, 1);
        let f = c[0].result.as_ref().unwrap_err();
        assert!(f.errno == libc::EINVAL && f.detail.contains(&format!("{} of {len} bytes at {offset}", kind.name())), "{f}");
    }
}

/// The kernel release's (major, minor).
fn kernel() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut it = r.trim().split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[test]
fn a_4kn_loop_device_deallocates_and_writes_zeroes_through_uring_and_sync_as_its_queue_says() {
    let test = "a_4kn_loop_device_deallocates_and_writes_zeroes_through_uring_and_sync_as_its_queue_says";
    let d = scratch("zeroing");
    let Some(lp) = loop_or_skip(test, &d, 16 << 20, 4096) else { return };
    let (discard, zeroes) = (queue_limit(lp.path(), "discard_max_bytes") > 0, queue_limit(lp.path(), "write_zeroes_max_bytes") > 0);
    assert!(discard && zeroes, "a loop device over a file on this filesystem takes both");

    let mut u = UringTarget::new(discover(lp.path(), true).unwrap(), 8).map_err(|e| e.1).unwrap();
    assert!(u.direct());
    let z = u.zeroing();
    assert_eq!((z.deallocate, z.write_zeroes, z.dealloc_reads), (discard, zeroes, DeallocReads::Unreported));
    three_blocks_zeroed(&mut u, 1 << 20, 0x5eed_2e50);
    // Linux 6.12 has the io_uring discard command; an older kernel falls back to the ioctl.
    println!("io_uring discard: {}", if u.discards_by_ioctl() { "BLKDISCARD (the kernel refused the command)" } else { "the command" });
    if kernel() >= (6, 12) {
        assert!(!u.discards_by_ioctl(), "Linux {:?} has BLOCK_URING_CMD_DISCARD", kernel());
    }
    drop(u);

    let mut s = SyncTarget::new(discover(lp.path(), true).unwrap(), 4);
    assert_eq!(s.zeroing(), z);
    three_blocks_zeroed(&mut s, 2 << 20, 0x5eed_5ec0);

    // Read-only: nothing carried.
    let ro = SyncTarget::new(discover(lp.path(), false).unwrap(), 4);
    assert!(!ro.zeroing().deallocate && !ro.zeroing().write_zeroes);
}

/// The conformance body with 10% deallocates and 10% Write Zeroes among the writes: the
/// simulated drive, a loop device through one ring and two worker rings, and (in the lab
/// guest) the real NVMe driver's namespace, where they reach QEMU's controller as Dataset
/// Management and Write Zeroes.
#[test]
fn conformance_deallocates_and_write_zeroes_under_cuts_verify_clean() {
    super::conformance("conformance_deallocates_and_write_zeroes_under_cuts_verify_clean", 16, |s| {
        let z = s.target.zeroing();
        assert!(z.deallocate && z.write_zeroes, "{}: carries {z:?}", s.name);
        super::cut_cycles_verify_clean(s, 11, faultline::workload::OpMix { deallocate_ppm: 100_000, write_zeroes_ppm: 100_000 });
    });
}
