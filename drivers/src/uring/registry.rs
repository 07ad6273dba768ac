//! The io_uring engine's registered buffers: a pool of aligned buffers registered once in the
//! ring's sparse buffer table, so fixed reads and writes skip pinning pages per operation.
//! See the ownership rule in [`super`]: pooled memory is never freed while registered.

#![expect(
    unsafe_code,
    reason = "updating a ring's registered-buffer table is unsafe: the memory must outlive its registration, as the SAFETY comment there explains"
)]

use crate::block::{AlignedBuf, BufPool};
use io_uring::IoUring;
use std::sync::Arc;

/// Slots in the ring's table of registered buffers.
const REG_SLOTS: u32 = 1024;
/// Bytes of buffer memory the engine registers (pins) at most; buffers asked for beyond it
/// are plain ones.
const REG_BUDGET: usize = 64 << 20;

/// The buffers one ring registered.
#[derive(Default)]
pub(super) struct Registry {
    /// The pool the registered buffers belong to.
    pool: Arc<BufPool>,
    /// Registered range (address, bytes) of each slot of the buffer table, by slot index.
    reg: Vec<(usize, usize)>,
    reg_bytes: usize,
    /// The sparse buffer table exists (`Some(true)`), could not be made (`Some(false)`), or
    /// was not asked for yet.
    table: Option<bool>,
}

impl Registry {
    /// Buffers registered so far.
    pub(super) fn len(&self) -> usize {
        self.reg.len()
    }

    /// The table exists, so it must be unregistered before the pool's memory is freed.
    pub(super) fn has_table(&self) -> bool {
        self.table == Some(true)
    }

    /// A pooled buffer of `len` bytes given back earlier, if any.
    pub(super) fn take(&self, len: usize) -> Option<AlignedBuf> {
        BufPool::take(&self.pool, len)
    }

    /// The registered slot of `buf` when the whole of `[buf, buf + len)` lies inside what
    /// this ring registered for it; `None` for any other buffer (plain operation then).
    pub(super) fn fixed_index(&self, buf: &AlignedBuf, len: usize) -> Option<u16> {
        let (pool, k) = buf.pool_slot()?;
        if !Arc::ptr_eq(pool, &self.pool) {
            return None;
        }
        let &(addr, cap) = self.reg.get(k as usize)?;
        let p = buf.as_ptr() as usize;
        (p >= addr && p + len <= addr + cap).then_some(k)
    }

    /// Makes up to `want` new buffers of `len` bytes and registers them in free slots of the
    /// ring's buffer table (made on first use). Returns fewer (possibly none) when the table
    /// is full, the budget spent, or the kernel refuses.
    pub(super) fn register_new(&mut self, ring: &IoUring, want: usize, len: usize) -> Vec<AlignedBuf> {
        if self.table.is_none() {
            self.table = Some(ring.submitter().register_buffers_sparse(REG_SLOTS).is_ok());
        }
        if self.table != Some(true) || len == 0 {
            return Vec::new();
        }
        let free_slots = REG_SLOTS as usize - self.reg.len();
        let by_budget = REG_BUDGET.saturating_sub(self.reg_bytes) / (len + crate::block::BUF_ALIGN);
        let n = want.min(free_slots).min(by_budget);
        if n == 0 {
            return Vec::new();
        }
        let mut bufs: Vec<AlignedBuf> = (0..n).map(|_| AlignedBuf::zeroed(len)).collect();
        let iovecs: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.window_ptr().cast(), iov_len: b.capacity() }).collect();
        let first = self.reg.len() as u32;
        // SAFETY: each iovec is the whole aligned window of a buffer made just above. That
        // memory is never freed while the ring may use it: the buffers belong to `self.pool`
        // from here on, and a dropped pooled buffer's memory goes back into the pool rather
        // than to the allocator; the engine holds the pool until after it has unregistered the
        // table (or leaked whatever is still in flight) in `drop`. The slots are fresh, so no
        // operation in flight names them.
        if unsafe { ring.submitter().register_buffers_update(first, &iovecs, None) }.is_err() {
            return Vec::new();
        }
        self.reg.extend(iovecs.iter().map(|v| (v.iov_base as usize, v.iov_len)));
        self.reg_bytes += iovecs.iter().map(|v| v.iov_len).sum::<usize>();
        bufs.into_iter().enumerate().map(|(k, b)| BufPool::adopt(&self.pool, first as u16 + k as u16, b)).collect()
    }
}
