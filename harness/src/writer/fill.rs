//! Where a cycle's tagged writes are made ([`Fill`]): the [`Maker`] tags them in id order, a
//! batch at a time, and the I/O loop takes them from a [`Filler`], which either runs the
//! maker itself (inline) or receives its batches from a helper thread (`handoff`).

use super::handoff::Handoff;
use super::{fill_write_with, WriteError};
use crate::format::Format;
use crate::workload::{Layout, WritePlan};
use faultline_drivers::AlignedBuf;
use std::collections::VecDeque;
use std::sync::mpsc::Sender;

/// Where a cycle's tagged writes are made: on the I/O loop's thread, or ahead of it on a
/// helper thread. The bytes, their order and everything recorded are the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fill {
    /// [`Fill::Inline`] on a machine of at most [`INLINE_UP_TO_CPUS`] CPUs, else
    /// [`Fill::Thread`].
    #[default]
    Auto,
    /// On a helper thread, handed over in batches: tagging overlaps with the I/O loop, for a
    /// hand-over (a lock, and a wake-up when either side waits) per batch.
    Thread,
    /// On the I/O loop's thread, a batch at a time, when the loop needs the next write.
    Inline,
}

/// Up to this many CPUs, [`Fill::Auto`] tags inline. The kernel's side of the I/O (an
/// io-wq worker for a regular file, the loop device's worker, completion softirqs) takes
/// a CPU of its own, so on two CPUs a helper thread only competes with it and with the
/// I/O loop, and adds its hand-over. On the project's 2-CPU VM, inline against the helper
/// thread, medians of 4 interleaved `faultline bench` runs: 4 KiB random writes on tmpfs
/// 1.27x/1.05x fio crc32c/plain against 1.07x/0.88x, on a loop device 1.09x/1.17x against
/// 0.93x/1.05x; CPU per GB on tmpfs 0.74 s against 0.97 s. No machine with more CPUs was
/// measured, so above two the helper thread stays, as before.
pub const INLINE_UP_TO_CPUS: usize = 2;

impl Fill {
    /// `Auto` decided for this machine.
    pub fn resolve(self) -> Fill {
        match self {
            Fill::Auto => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                if cpus <= INLINE_UP_TO_CPUS {
                    Fill::Inline
                } else {
                    Fill::Thread
                }
            }
            f => f,
        }
    }
}

/// Makes the cycle's tagged writes, in id order, a batch at a time.
pub(super) struct Maker<'a> {
    layout: &'a Layout,
    format: &'a Format,
    cycle: u32,
    port: u8,
    /// The next write id.
    id: u64,
    /// Buffers not yet used.
    pool: Vec<AlignedBuf>,
    sums: Vec<[u8; 16]>,
    batch: usize,
    max_bytes: usize,
}

impl<'a> Maker<'a> {
    /// Tags writes from id `first` on, into buffers drawn from `pool` (fresh ones once it and
    /// the returned ones run out), `batch` writes at a time.
    #[expect(clippy::too_many_arguments, reason = "what a write's tags are made of, and the batch")]
    pub(super) fn new(
        layout: &'a Layout,
        format: &'a Format,
        cycle: u32,
        port: u8,
        first: u64,
        pool: Vec<AlignedBuf>,
        batch: usize,
        max_bytes: usize,
    ) -> Self {
        Maker { layout, format, cycle, port, id: first, pool, sums: Vec::new(), batch, max_bytes }
    }

    /// Appends the next batch to `out`; `returned` gives back buffers whose writes have
    /// completed.
    pub(super) fn batch(&mut self, out: &mut impl Extend<(WritePlan, AlignedBuf)>, mut returned: impl FnMut() -> Option<AlignedBuf>) {
        for _ in 0..self.batch {
            let w = self.layout.plan(self.id);
            let mut buf = returned().or_else(|| self.pool.pop()).unwrap_or_else(|| AlignedBuf::zeroed(self.max_bytes));
            if w.zeroing().is_none() {
                buf.resize(w.len as usize);
                fill_write_with(self.format, &w, self.cycle, self.port, &mut buf, &mut self.sums);
            } else {
                // A deallocate or Write Zeroes sends no data: its slot's buffer goes straight
                // back to the pool when it is submitted.
                buf.resize(0);
            }
            out.extend([(w, buf)]);
            self.id += 1;
        }
    }

    /// The next batch, as one hand-over to the I/O loop.
    pub(super) fn batch_vec(&mut self, returned: impl FnMut() -> Option<AlignedBuf>) -> Vec<(WritePlan, AlignedBuf)> {
        let mut b = Vec::with_capacity(self.batch);
        self.batch(&mut b, returned);
        b
    }
}

/// Where the I/O loop's filled writes come from.
pub(super) enum Source<'a> {
    /// The buffer-making thread, through the hand-over; buffers go back by `back`.
    Thread { handoff: std::sync::Arc<Handoff<Vec<(WritePlan, AlignedBuf)>>>, back: Sender<AlignedBuf> },
    /// Made on the I/O loop's own thread when it needs them.
    Inline { maker: Maker<'a>, returned: Vec<AlignedBuf> },
}

/// The receiving end of the buffer maker.
pub(super) struct Filler<'a> {
    source: Source<'a>,
    /// The rest of the batch being submitted, in id order.
    next: VecDeque<(WritePlan, AlignedBuf)>,
    /// Time passed in `peek`: it waited for the thread, or made a batch (cleared by `waited`).
    waited: bool,
}

impl Drop for Filler<'_> {
    fn drop(&mut self) {
        if let Source::Thread { handoff, .. } = &self.source {
            handoff.close();
        }
    }
}

impl<'a> Filler<'a> {
    pub(super) fn new(source: Source<'a>) -> Self {
        Filler { source, next: VecDeque::new(), waited: false }
    }

    /// The next write, in id order, without taking it.
    pub(super) fn peek(&mut self) -> Result<WritePlan, WriteError> {
        if self.next.is_empty() {
            match &mut self.source {
                Source::Thread { handoff, .. } => {
                    let (b, waited) = handoff.take().ok_or_else(|| WriteError::Stalled("the buffer-making thread stopped".into()))?;
                    self.waited |= waited;
                    self.next.extend(b);
                }
                Source::Inline { maker, returned } => {
                    // Straight into `next`: no batch is allocated on the I/O loop's thread.
                    maker.batch(&mut self.next, || returned.pop());
                    self.waited = true; // time passed while it was made
                }
            }
        }
        Ok(self.next.front().ok_or_else(|| WriteError::Stalled("the buffer-making thread sent an empty batch".into()))?.0)
    }

    pub(super) fn take(&mut self) -> Result<(WritePlan, AlignedBuf), WriteError> {
        self.peek()?;
        Ok(self.next.pop_front().expect("peeked"))
    }

    /// Whether time passed in a `peek` since the last call.
    pub(super) fn waited(&mut self) -> bool {
        std::mem::take(&mut self.waited)
    }

    pub(super) fn give_back(&mut self, buf: AlignedBuf) {
        match &mut self.source {
            // The thread may have stopped at the end of the cycle; the buffer is then dropped.
            Source::Thread { back, .. } => {
                let _ = back.send(buf);
            }
            Source::Inline { returned, .. } => returned.push(buf),
        }
    }
}
