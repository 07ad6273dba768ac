//! Tests only: the check every local engine's zeroing passes on a regular file, through the
//! kernel: three blocks of a known pattern, the middle one deallocated and the third zeroed,
//! read back; and the ranges a zeroing operation is refused for.

use crate::block::{AlignedBuf, BlockTarget, Completion, DeallocReads, Op, Zeroing};
use std::time::Duration;

/// A pattern that differs per block and per seed.
pub(crate) fn pattern(seed: u64, block: u64, out: &mut [u8]) {
    let mut x = seed ^ block.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for w in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
}

/// Reaps until `n` completions are back.
fn reap_n(t: &mut dyn BlockTarget, n: usize) -> Vec<Completion> {
    let mut done = Vec::new();
    while done.len() < n {
        let want = n - done.len();
        assert!(t.reap(&mut done, want, Duration::from_secs(10)).unwrap() > 0 || done.len() >= n, "nothing completed in 10 s");
    }
    done
}

/// Writes three `bs`-byte blocks of a pattern at `base`, deallocates the middle one and
/// writes zeroes over the third (both submitted before either is reaped), and reads them
/// back: the first unchanged, the third zeros, the second zeros too where the target says a
/// deallocated block reads zeros (else zeros or the pattern), each latency counted. A kind the
/// target does not carry (a filesystem without zeroed ranges: tmpfs) is refused with
/// EOPNOTSUPP instead, its block unchanged.
pub(crate) fn three_blocks_zeroed(t: &mut dyn BlockTarget, base: u64, bs: u64, seed: u64) {
    let z = t.zeroing();
    let b = bs as usize;
    let mut buf = AlignedBuf::zeroed(3 * b);
    for k in 0..3 {
        pattern(seed, k, &mut buf[k as usize * b..(k as usize + 1) * b]);
    }
    let written = buf.to_vec();
    t.submit(Op::Write { token: 1, offset: base, buf, fua: false, write_id: 1 }).unwrap();
    let done = reap_n(t, 1);
    assert!(done[0].result.is_ok(), "seed {seed:#x}: {:?}", done[0].result);
    t.submit(Op::Zero { token: 2, offset: base + bs, len: bs, kind: Zeroing::Deallocate, write_id: 2 }).unwrap();
    t.submit(Op::Zero { token: 3, offset: base + 2 * bs, len: bs, kind: Zeroing::WriteZeroes, write_id: 3 }).unwrap();
    let mut done = reap_n(t, 2);
    done.sort_by_key(|c| c.token);
    for (c, kind) in done.iter().zip([Zeroing::Deallocate, Zeroing::WriteZeroes]) {
        assert!(c.buf.is_none());
        match &c.result {
            Ok(()) => assert!(z.carries(kind), "seed {seed:#x}: {} done, where the target says it is not carried", kind.name()),
            Err(f) => assert!(!z.carries(kind) && f.errno == libc::EOPNOTSUPP, "seed {seed:#x}: {}: {f}", kind.name()),
        }
    }
    let (back, r) = t.read_owned(base, AlignedBuf::zeroed(3 * b));
    r.unwrap();
    let zeros = vec![0u8; b];
    assert!(back[..b] == written[..b], "seed {seed:#x}: the block before the zeroed ones changed");
    let middle = &back[b..2 * b];
    let middle_ok = match (z.deallocate, z.dealloc_reads) {
        (false, _) => middle == &written[b..2 * b],
        (true, DeallocReads::Zeros) => middle == &zeros[..],
        (true, DeallocReads::Ones) => middle.iter().all(|&x| x == 0xFF),
        (true, DeallocReads::Unreported) => middle == &zeros[..] || middle == &written[b..2 * b] || middle.iter().all(|&x| x == 0xFF),
    };
    assert!(middle_ok, "seed {seed:#x}: the deallocated block does not read what {:?} allows", z.dealloc_reads);
    let third = if z.write_zeroes { &zeros[..] } else { &written[2 * b..] };
    assert!(&back[2 * b..] == third, "seed {seed:#x}: the block written with zeroes reads wrong (carried: {})", z.write_zeroes);
    let lat = t.latencies();
    let count = |name: &str| lat.iter().find(|(n, _)| *n == name).map_or(0, |(_, h)| h.count());
    assert_eq!((count("deallocate"), count("write_zeroes")), (u64::from(z.deallocate), u64::from(z.write_zeroes)), "{lat:?}");
}

/// A zeroing operation over a misaligned offset, a length of no blocks, a length that is not
/// whole blocks, and past the end completes with EINVAL, naming its offset.
pub(crate) fn bad_zero_ranges_are_refused(t: &mut dyn BlockTarget, lbs: u64) {
    let cap = t.geometry().capacity_bytes;
    let bad = [(lbs + 1, lbs), (0, 0), (lbs, lbs + 1), (cap - lbs, 2 * lbs), (u64::MAX - lbs + 1, lbs)];
    for (k, &(offset, len)) in bad.iter().enumerate() {
        let kind = if k % 2 == 0 { Zeroing::Deallocate } else { Zeroing::WriteZeroes };
        t.submit(Op::Zero { token: k as u64, offset, len, kind, write_id: k as u64 }).unwrap();
        let done = reap_n(t, 1);
        let f = done[0].result.as_ref().unwrap_err();
        assert_eq!(f.errno, libc::EINVAL, "{f}");
        assert!(f.detail.contains(&format!("{} of {len} bytes at {offset}", kind.name())), "{f}");
    }
    assert_eq!(t.in_flight(), 0);
}
