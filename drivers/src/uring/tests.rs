//! The io_uring engine's tests, on scratch files in the temporary directory.

use super::*;

const SEED: u64 = 0x5eed_f1ed;

/// A pattern that differs per block and per seed, so a read served from the wrong buffer
/// or offset cannot match.
fn pattern(seed: u64, block: u64, out: &mut [u8]) {
    let mut x = seed ^ block.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for w in out.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes());
    }
}

fn engine(name: &str, bytes: u64) -> (UringTarget, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("faultline-uring-{name}-{}", std::process::id()));
    std::fs::File::create(&path).and_then(|f| f.set_len(bytes)).expect("scratch file");
    let d = crate::blockdev::discover(&path, true).expect("discover the scratch file");
    (UringTarget::new(d, 8).map_err(|e| e.1).expect("io_uring on this kernel"), path)
}

#[test]
fn pooled_buffers_are_registered_written_read_and_reused() {
    let (mut t, path) = engine("pool", 1 << 20);
    let mut bufs = t.buffers(4, 4096);
    assert_eq!(t.registered_buffers(), 4, "seed {SEED:#x}: the kernel refused to register 4 buffers");
    let addrs: Vec<usize> = bufs.iter().map(|b| b.as_ptr() as usize).collect();
    for (k, b) in bufs.iter_mut().enumerate() {
        assert!(t.fixed_index(b, 4096).is_some());
        pattern(SEED, k as u64, b);
    }
    for (k, b) in bufs.drain(..).enumerate() {
        t.submit(Op::Write { token: k as u64, offset: k as u64 * 4096, buf: b, fua: false, write_id: k as u64 }).unwrap();
    }
    let done = reap_n(&mut t, 4);
    assert!(done.iter().all(|c| c.result.is_ok()), "seed {SEED:#x}: {done:?}");
    // Back into the pool: the next request gets the same registered memory, no new slots.
    drop(done);
    let again = t.buffers(4, 4096);
    assert_eq!(t.registered_buffers(), 4);
    let mut again_addrs: Vec<usize> = again.iter().map(|b| b.as_ptr() as usize).collect();
    again_addrs.sort_unstable();
    let mut want = addrs.clone();
    want.sort_unstable();
    assert_eq!(again_addrs, want);
    // Fixed reads into pooled buffers, and plain reads into foreign ones, see what was written.
    let mut expect = vec![0u8; 4096];
    for (k, b) in again.into_iter().enumerate() {
        pattern(SEED, k as u64, &mut expect);
        let (b, r) = t.read_owned(k as u64 * 4096, b);
        r.unwrap();
        assert!(b[..] == expect[..], "seed {SEED:#x}: fixed read of block {k} differs");
        let (plain, r) = t.read_owned(k as u64 * 4096, AlignedBuf::zeroed(4096));
        r.unwrap();
        assert!(plain[..] == expect[..], "seed {SEED:#x}: plain read of block {k} differs");
    }
    drop(t);
    let _ = std::fs::remove_file(path);
}

/// Reaps until `n` completions are back.
fn reap_n(t: &mut UringTarget, n: usize) -> Vec<Completion> {
    let mut done = Vec::new();
    while done.len() < n {
        let want = n - done.len();
        t.reap(&mut done, want, Duration::from_secs(10)).unwrap();
    }
    done
}

/// Writes fewer than a batch wait in the submission queue until something enters the
/// kernel; `submit_queued` (the writer's call just before a cut) hands them over at once.
#[test]
fn queued_writes_reach_the_kernel_when_asked_not_only_at_the_next_reap() {
    let (mut t, path) = engine("kick", 1 << 20);
    for k in 0..3u64 {
        let mut b = AlignedBuf::zeroed(4096);
        pattern(SEED, k, &mut b);
        t.submit(Op::Write { token: k, offset: k * 4096, buf: b, fua: false, write_id: k }).unwrap();
    }
    assert_eq!((t.queued, t.ring.submission().len()), (3, 3), "fewer than a batch stay queued");
    t.submit_queued().unwrap();
    assert_eq!((t.queued, t.ring.submission().len()), (0, 0), "handed to the kernel");
    let done = reap_n(&mut t, 3);
    assert!(done.iter().all(|c| c.result.is_ok()), "seed {SEED:#x}: {done:?}");
    drop(t);
    let _ = std::fs::remove_file(path);
}

#[test]
fn reads_started_together_finish_in_any_order_with_their_own_bytes() {
    let (mut t, path) = engine("ahead", 1 << 20);
    let mut expect = vec![0u8; 4096];
    for k in 0..8u64 {
        pattern(SEED, k, &mut expect);
        let mut b = AlignedBuf::zeroed(4096);
        b.copy_from_slice(&expect);
        t.submit(Op::Write { token: k, offset: k * 4096, buf: b, fua: false, write_id: k }).unwrap();
    }
    let mut done = Vec::new();
    while done.len() < 8 {
        let want = 8 - done.len();
        t.reap(&mut done, want, Duration::from_secs(10)).unwrap();
    }
    // Six reads in flight at once, pooled and plain buffers mixed, finished last first.
    let mut bufs = t.buffers(3, 4096);
    bufs.extend((0..3).map(|_| AlignedBuf::zeroed(4096)));
    let tickets: Vec<(u64, ReadTicket)> = bufs.into_iter().enumerate().map(|(k, b)| (k as u64, t.read_start(k as u64 * 4096, b))).collect();
    assert!(tickets.iter().all(|(_, tk)| matches!(tk.0, TicketState::Pending { .. })), "seed {SEED:#x}");
    for (k, tk) in tickets.into_iter().rev() {
        let (b, r) = t.read_finish(tk);
        r.unwrap();
        pattern(SEED, k, &mut expect);
        assert!(b[..] == expect[..], "seed {SEED:#x}: read-ahead of block {k} differs");
    }
    assert_eq!(t.kernel, 0);
    // Refused at once: past the end. Refused when finished: another engine's ticket.
    let past_end = t.read_start(1 << 20, AlignedBuf::zeroed(4096));
    let (b, r) = t.read_finish(past_end);
    assert_eq!((b.len(), r.unwrap_err().errno), (4096, libc::EINVAL));
    let (mut other, po) = engine("ahead-other", 1 << 16);
    let tk = other.read_start(0, AlignedBuf::zeroed(4096));
    let (_, r) = t.read_finish(tk);
    assert!(r.unwrap_err().detail.contains("another engine"));
    drop((t, other));
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(po);
}

#[test]
fn a_buffer_of_another_engine_or_grown_past_its_window_is_not_used_as_fixed() {
    let (mut a, pa) = engine("pool-a", 1 << 16);
    let (mut b, pb) = engine("pool-b", 1 << 16);
    let mut from_a = a.buffers(1, 4096).pop().unwrap();
    assert!(a.fixed_index(&from_a, 4096).is_some());
    assert!(b.fixed_index(&from_a, 4096).is_none(), "another ring's buffer must take the plain path");
    assert!(a.fixed_index(&AlignedBuf::zeroed(4096), 4096).is_none());
    // Growing past the window reallocates: the new memory is not registered anywhere.
    from_a.resize(from_a.capacity() + 1);
    assert!(a.fixed_index(&from_a, from_a.len()).is_none());
    // The old window went back to a's pool and is handed out again.
    assert_eq!(a.buffers(1, 4096).len(), 1);
    assert_eq!(a.registered_buffers(), 1);
    // A write with b's plain path over a's buffer still lands.
    pattern(SEED, 7, &mut from_a[..4096]);
    from_a.resize(4096);
    let want = from_a.to_vec();
    b.submit(Op::Write { token: 1, offset: 0, buf: from_a, fua: false, write_id: 1 }).unwrap();
    let mut done = Vec::new();
    b.reap(&mut done, 1, Duration::from_secs(10)).unwrap();
    assert!(done[0].result.is_ok(), "seed {SEED:#x}: {:?}", done[0].result);
    let mut back = vec![0u8; 4096];
    b.read_at(0, &mut back).unwrap();
    assert_eq!(back, want, "seed {SEED:#x}");
    drop((a, b));
    let _ = std::fs::remove_file(pa);
    let _ = std::fs::remove_file(pb);
}

/// Deallocate (a punched hole) and write zeroes (a zeroed range) on a file, through the ring's
/// fallocate: the blocks read zeros, the one before them is untouched, and ranges that are not
/// whole blocks inside the file are refused with EINVAL naming their offset.
#[test]
fn a_file_deallocates_and_writes_zeroes_through_the_ring() {
    let (mut t, path) = engine("zero", 1 << 20);
    let z = t.zeroing();
    assert_eq!(z.dealloc_reads, crate::block::DeallocReads::Zeros, "a punched hole reads zeros");
    crate::zero_check::three_blocks_zeroed(&mut t, 4 * 4096, 4096, SEED);
    crate::zero_check::bad_zero_ranges_are_refused(&mut t, 512);
    drop(t);
    // Opened read-only: nothing carried, and a zeroing is refused before the kernel.
    let d = crate::blockdev::discover(&path, false).unwrap();
    let mut ro = UringTarget::new(d, 2).map_err(|e| e.1).unwrap();
    assert_eq!(ro.zeroing(), ZeroingSupport::default());
    ro.submit(Op::Zero { token: 9, offset: 0, len: 4096, kind: crate::block::Zeroing::WriteZeroes, write_id: 9 }).unwrap();
    let done = reap_n(&mut ro, 1);
    assert_eq!(done[0].result.as_ref().unwrap_err().errno, libc::EBADF);
    drop(ro);
    let _ = std::fs::remove_file(path);
}

/// The discard command's entry: the length in the command area's first 8 bytes (`addr3`),
/// its opcode `_IO(0x12, 0)` as linux/blkdev.h defines `BLOCK_URING_CMD_DISCARD`.
#[test]
fn the_block_discard_command_carries_its_length_where_the_kernel_reads_it() {
    assert_eq!(zero::BLOCK_URING_CMD_DISCARD, 0x1200);
    let c = zero::discard_cmd_area(0x0102_0304_0506_0708);
    assert_eq!(u64::from_ne_bytes(c[..8].try_into().unwrap()), 0x0102_0304_0506_0708);
    assert_eq!(&c[8..], &[0u8; 8]);
}

/// The fallback's wiring, on a regular file taken for a block device: the kernel refuses the
/// discard command (a file has no `uring_cmd`: EOPNOTSUPP), the engine tries `BLKDISCARD`,
/// which a file refuses too (ENOTTY), and the failure names both; discards keep the command.
#[test]
fn a_discard_command_the_kernel_refuses_is_tried_with_the_ioctl_and_both_answers_are_named() {
    let (t, path) = engine("discard-fallback", 1 << 20);
    let mut d = crate::blockdev::discover(&path, true).unwrap();
    drop(t);
    d.kind = TargetKind::Block { rdev: 0, identity: Default::default() };
    d.zeroing.deallocate = true;
    let mut t = UringTarget::new(d, 2).map_err(|e| e.1).unwrap();
    t.submit(Op::Zero { token: 1, offset: 4096, len: 4096, kind: crate::block::Zeroing::Deallocate, write_id: 1 }).unwrap();
    let done = reap_n(&mut t, 1);
    let f = done[0].result.as_ref().unwrap_err();
    assert_eq!(f.errno, libc::ENOTTY, "{f}");
    assert!(f.detail.contains("deallocate of 4096 bytes at 4096 (BLKDISCARD)") && f.detail.contains("discard command too"), "{f}");
    assert!(!t.discards_by_ioctl(), "the ioctl did not work: the command stays");
    assert_eq!(t.latencies().iter().find(|(n, _)| *n == "deallocate").map(|(_, h)| h.count()), Some(1));
    drop(t);
    let _ = std::fs::remove_file(path);
}
