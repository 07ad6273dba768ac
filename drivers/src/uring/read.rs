//! The engine's one-read path: a read queued into its own slot, waited for with the read
//! timeout, and a read that hangs left to the kernel with its buffer (the slot keeps it) while
//! later reads fail fast. `read_at`, `read_owned`, `read_start` and `read_finish` are built
//! on it.

use super::*;

impl UringTarget {
    /// One read into `rb`, which the kernel writes directly. On success the buffer comes
    /// back; on failure it comes back too unless the kernel may still write into it (a hang),
    /// in which case its slot keeps it and `None` is returned.
    pub(super) fn read_into(&mut self, offset: u64, rb: AlignedBuf) -> Result<AlignedBuf, (Option<AlignedBuf>, IoFailure)> {
        let len = rb.len();
        let slot = self.read_submit(offset, rb)?;
        self.read_wait(slot, offset, len, Instant::now())
    }

    /// Queues one read into `rb` (entering the kernel only when a batch is full) and returns
    /// its slot; the buffer comes back at once when the read is refused before it is queued.
    pub(super) fn read_submit(&mut self, offset: u64, rb: AlignedBuf) -> Result<u32, (Option<AlignedBuf>, IoFailure)> {
        let len = rb.len();
        let cap = self.d.geometry.capacity_bytes;
        if offset + len as u64 > cap {
            return Err((Some(rb), self.failure(libc::EINVAL, format!("read of {len} bytes at {offset} passes the end ({cap})"))));
        }
        let lbs = if self.d.direct { self.d.geometry.logical_block_bytes as u64 } else { 1 };
        if !offset.is_multiple_of(lbs) || !(len as u64).is_multiple_of(lbs) {
            return Err((
                Some(rb),
                self.failure(libc::EINVAL, format!("read of {len} bytes at {offset} is not aligned to the {lbs}-byte logical block")),
            ));
        }
        if self.hung_reads >= MAX_HUNG_READS {
            return Err((
                Some(rb),
                self.failure(libc::ETIMEDOUT, format!("read at {offset} not issued: {} earlier reads still hang", self.hung_reads)),
            ));
        }
        // The kernel writes into the buffer this call owns: if the read hangs, the slot keeps
        // it (the caller gets a fresh one) until the kernel is done with it.
        let mut rb = rb;
        let ptr = rb.as_mut_ptr();
        let fixed = self.fixed_index(&rb, len);
        let i = self.alloc_slot(Kind::Read { result: None }, Some(rb));
        let e = match fixed {
            Some(k) => sqe!(self, ReadFixed::new(ptr, len as u32, k).offset(offset)),
            None => sqe!(self, Read::new(ptr, len as u32).offset(offset)),
        }
        .user_data(i as u64);
        if let Err(e) = self.push(e, len) {
            // The entry may have reached the kernel: the slot keeps the buffer.
            return Err((None, self.failure(libc::EIO, format!("read at {offset}: {e}"))));
        }
        Ok(i)
    }

    /// Waits for the read in slot `i` (queued by `read_submit` at `start`) for at most the
    /// read timeout from `start`. On a timeout the slot keeps the buffer (`None`).
    pub(super) fn read_wait(
        &mut self,
        i: u32,
        offset: u64,
        len: usize,
        start: Instant,
    ) -> Result<AlignedBuf, (Option<AlignedBuf>, IoFailure)> {
        let fail_enter = |s: &Self, e: TargetError| s.failure(libc::EIO, format!("read at {offset}: {e}"));
        let wait = if self.hung_reads > 0 { self.read_timeout.min(HUNG_READ_WAIT) } else { self.read_timeout };
        loop {
            self.harvest();
            if let Kind::Read { result: Some(res) } = self.slots[i as usize].kind {
                let rb = self.slots[i as usize].buf.take().expect("read slot holds its buffer");
                self.slots[i as usize].kind = Kind::Free;
                self.free.push(i);
                return if res < 0 {
                    let f = self.failure(-res, format!("read of {len} bytes at {offset}"));
                    Err((Some(rb), f))
                } else if res as usize != len {
                    let f = self.failure(libc::EIO, format!("short read at {offset}: {res} of {len} bytes"));
                    Err((Some(rb), f))
                } else {
                    Ok(rb)
                };
            }
            let left = wait.saturating_sub(start.elapsed());
            let spin = self.poll_until(WaitKind::Read, left, |t| matches!(t.slots[i as usize].kind, Kind::Read { result: Some(_) }));
            if spin == Spin::Found {
                continue;
            }
            let slept = Instant::now();
            let timed_out = left.is_zero()
                || match self.enter(1, Some(left)) {
                    Ok(done) => {
                        if done && spin == Spin::Skipped {
                            self.learned[WaitKind::Read as usize].slept(slept.elapsed());
                        }
                        !done && start.elapsed() >= wait
                    }
                    Err(e) => {
                        // The read may still be in flight: its slot keeps the buffer.
                        self.slots[i as usize].kind = Kind::AbandonedRead;
                        self.hung_reads += 1;
                        let f = fail_enter(self, e);
                        return Err((None, f));
                    }
                };
            if timed_out {
                self.harvest();
                if matches!(self.slots[i as usize].kind, Kind::Read { result: Some(_) }) {
                    continue;
                }
                self.slots[i as usize].kind = Kind::AbandonedRead;
                self.hung_reads += 1;
                let f = self.failure(libc::ETIMEDOUT, format!("read of {len} bytes at {offset} did not complete within {wait:?}"));
                return Err((None, f));
            }
        }
    }
}
