//! The io_uring engine: O_DIRECT writes, flushes and reads on a regular file or block device.
//!
//! One ring per target, driven from the caller's thread: `submit` only queues a submission
//! entry (entering the kernel once a batch has built up), `reap` enters the kernel once to
//! submit the rest and wait, with a timeout, for completions. The file is registered with the
//! ring (fixed file 0) when the kernel allows it. FUA writes carry `RWF_DSYNC`; flushes are
//! `IORING_OP_FSYNC` with `DATASYNC` (on a block device, a cache flush). Deallocate and write
//! zeroes are `IORING_OP_FALLOCATE`, or the block layer's discard command (`zero.rs`).
//!
//! Ownership, the rule everything else follows: the kernel holds a raw pointer to every
//! in-flight buffer, so an operation's buffer stays in its slot until the operation's
//! completion has been seen. `reap` never returns a buffer whose operation has not completed;
//! a read that timed out keeps its buffer until the kernel finishes it; and if the engine is
//! dropped with operations still in flight (a hung device), their buffers are leaked on
//! purpose rather than freed into memory the kernel may still write.
//!
//! Registered buffers: [`BlockTarget::buffers`] hands out buffers from a pool this engine
//! owns, registered once with the ring (a sparse table filled as buffers are made, up to a
//! byte budget), so fixed reads and writes skip pinning the pages on every operation. A
//! buffer is used as fixed only when it came from this engine's pool and lies wholly inside
//! its registered range; any other buffer takes the plain path. Pooled memory is never
//! freed while registered: a dropped pooled buffer returns to the pool, which the engine
//! keeps until it has unregistered the table.
//!
//! Surviving the cut: an operation failing with ENODEV, ENXIO or ESHUTDOWN, or several EIOs
//! in a row, marks the device gone; from then on the engine stops submitting and completes
//! every new operation at once with the failure (it was never sent, which the harness's
//! "failed write" already allows). Nothing here panics on an I/O result.

#![expect(
    unsafe_code,
    reason = "pushing an io_uring submission entry is unsafe: the buffers it names must outlive the operation, as the SAFETY comment at the push explains"
)]

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, ReadTicket, TargetError, TicketState, ZeroingSupport};
use crate::blockdev::{Discovered, TargetKind};
use crate::latency::LatencyHistogram;
use io_uring::{opcode, types, IoUring};
use registry::Registry;
use std::collections::VecDeque;
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

/// Environment switch that makes io_uring setup fail, to exercise the fallback engine.
pub const DISABLE_ENV: &str = "FAULTLINE_DISABLE_IO_URING";

/// Consecutive EIO results after which the device counts as gone.
const EIO_GONE_AFTER: u32 = 8;
/// Queued entries (or bytes) after which `submit` enters the kernel without waiting for `reap`.
const BATCH_ENTRIES: usize = 16;
const BATCH_BYTES: usize = 1 << 20;
/// Reads that may be left hanging in the kernel before new reads fail at once.
const MAX_HUNG_READS: usize = 64;
/// While an earlier read still hangs, later reads wait at most this long.
const HUNG_READ_WAIT: Duration = Duration::from_secs(1);
/// How long `drop` waits for in-flight operations before leaking their buffers.
const DROP_WAIT: Duration = Duration::from_secs(2);

mod complete;
mod registry;
mod wait;

use wait::{Spin, WaitKind};

const LAT_WRITE: usize = 0;
const LAT_FUA: usize = 1;
const LAT_FLUSH: usize = 2;
const LAT_READ: usize = 3;
const LAT_DEALLOCATE: usize = 4;
const LAT_WRITE_ZEROES: usize = 5;
const LAT_NAMES: [&str; 6] = ["write", "write_fua", "flush", "read", "deallocate", "write_zeroes"];

#[derive(Debug)]
enum Kind {
    Free,
    Write {
        token: u64,
        offset: u64,
        len: usize,
        fua: bool,
    },
    Flush {
        token: u64,
    },
    /// A deallocate or write zeroes (`zero.rs`).
    Zero(zero::ZeroOp),
    /// A synchronous read; `result` is set when its completion arrives.
    Read {
        result: Option<i32>,
    },
    /// A read whose caller gave up (timeout); the slot frees itself on completion.
    AbandonedRead,
}

#[derive(Debug)]
struct Slot {
    kind: Kind,
    buf: Option<AlignedBuf>,
    at: Instant,
}

/// Creates a ring, honouring [`DISABLE_ENV`].
fn setup_ring(entries: u32) -> std::io::Result<IoUring> {
    if std::env::var_os(DISABLE_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
        return Err(std::io::Error::other(format!("io_uring disabled by {DISABLE_ENV}")));
    }
    // Single issuer with deferred task work (Linux 6.1+): completions are run when the
    // harness waits instead of by interrupting it, as fio does; older kernels refuse the
    // flags, and the ring is then built without them.
    IoUring::builder()
        .setup_cqsize(entries * 2)
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::builder().setup_cqsize(entries * 2).build(entries))
}

pub struct UringTarget {
    ring: IoUring,
    d: Discovered,
    fixed: bool,
    depth: usize,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Entries pushed but not yet handed to the kernel.
    queued: usize,
    queued_bytes: usize,
    /// Operations the kernel owns (pushed and not completed), reads included.
    kernel: usize,
    /// Harness operations submitted and not yet reaped.
    user: usize,
    ready: VecDeque<Completion>,
    gone: Option<IoFailure>,
    eio_run: u32,
    read_timeout: Duration,
    hung_reads: usize,
    read_bufs: Vec<AlignedBuf>,
    lat: [LatencyHistogram; 6],
    /// Completions gathered by `harvest`, kept to reuse its allocation.
    cqes: Vec<(u64, i32)>,
    /// Slots pushed since the kernel was last entered, to stamp with the submission time.
    unstamped: Vec<u32>,
    /// A placeholder instant for slots not yet submitted.
    epoch: Instant,
    /// The buffers registered with this ring ([`BlockTarget::buffers`]).
    reg: Registry,
    /// This engine's id, in the read tickets it hands out.
    id: u64,
    /// Whether a reap of writes (0) and a read (1) spin before they sleep (`wait.rs`).
    learned: [wait::Learned; 2],
    /// The kernel refused the block layer's io_uring discard command where the `BLKDISCARD`
    /// ioctl worked: discards take the ioctl (`zero.rs`).
    discard_by_ioctl: bool,
}

/// Ids of engines, so a read ticket is finished only by the engine that started it.
/// `IORING_ENTER_GETEVENTS` (linux/io_uring.h; the io-uring crate keeps its `sys` private).
const IORING_ENTER_GETEVENTS: u32 = 1;

static ENGINE_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl UringTarget {
    /// Builds the engine over an opened target. Fails (so the caller can fall back) when
    /// io_uring cannot be set up.
    pub fn new(d: Discovered, depth: usize) -> Result<Self, Box<(Discovered, std::io::Error)>> {
        let depth = depth.clamp(1, 4096);
        let entries = (depth + 1).next_power_of_two().max(8) as u32;
        let ring = match setup_ring(entries) {
            Ok(r) => r,
            Err(e) => return Err(Box::new((d, e))),
        };
        let fixed = ring.submitter().register_files(&[d.file.as_raw_fd()]).is_ok();
        if matches!(d.kind, TargetKind::File) {
            // The kernel hashes writes to a regular file by inode and runs them one at a
            // time on one io-wq worker; a second bounded worker only sleeps and is woken,
            // finding the hash busy, on every write punted to the queue (tmpfs punts them
            // all). One bounded worker: on tmpfs 4 KiB random writes went from 0.74x to
            // 0.83x fio's rate, medians of 6 interleaved `faultline bench` runs. Refused by
            // kernels before 5.15, which keep their default. The limit is the calling
            // thread's (its io-wq serves every ring it submits on, kernel
            // `io_register_iowq_max_workers`) and outlives this ring; a faultline thread
            // drives one target, so no block device's ring shares it.
            let _ = ring.submitter().register_iowq_max_workers(&mut [1, 0]);
        }
        Ok(UringTarget {
            ring,
            d,
            fixed,
            depth,
            slots: Vec::new(),
            free: Vec::new(),
            queued: 0,
            queued_bytes: 0,
            kernel: 0,
            user: 0,
            ready: VecDeque::new(),
            gone: None,
            eio_run: 0,
            read_timeout: Duration::from_secs(30),
            hung_reads: 0,
            read_bufs: Vec::new(),
            lat: Default::default(),
            cqes: Vec::new(),
            unstamped: Vec::new(),
            epoch: Instant::now(),
            reg: Registry::default(),
            id: ENGINE_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            learned: Default::default(),
            discard_by_ioctl: false,
        })
    }

    /// True when the target was opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.d.direct
    }

    /// True when the file is registered with the ring.
    pub fn registered_file(&self) -> bool {
        self.fixed
    }

    /// Number of buffers registered with the ring (0 when the kernel refused registration or
    /// none were asked for).
    pub fn registered_buffers(&self) -> usize {
        self.reg.len()
    }

    /// See [`Registry::fixed_index`].
    fn fixed_index(&self, buf: &AlignedBuf, len: usize) -> Option<u16> {
        self.reg.fixed_index(buf, len)
    }

    /// True once the kernel refused the block layer's io_uring discard command where the
    /// `BLKDISCARD` ioctl worked: discards then take the ioctl, synchronously (`zero.rs`).
    pub fn discards_by_ioctl(&self) -> bool {
        self.discard_by_ioctl
    }

    /// The failure that marked the device gone, if any.
    pub fn gone(&self) -> Option<&IoFailure> {
        self.gone.as_ref()
    }

    fn path(&self) -> String {
        self.d.path.display().to_string()
    }

    /// A slot for a new operation; its `at` is stamped when the kernel is entered with it
    /// (`enter`), one clock reading per batch instead of one per operation.
    fn alloc_slot(&mut self, kind: Kind, buf: Option<AlignedBuf>) -> u32 {
        let slot = Slot { kind, buf, at: self.epoch };
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Pushes one entry, entering the kernel first if the submission queue is full.
    fn push(&mut self, entry: io_uring::squeue::Entry, bytes: usize) -> Result<(), TargetError> {
        loop {
            // SAFETY: every entry built by this module points at a buffer held in
            // `self.slots` (or none, for fsync); the slot keeps the buffer, which is never
            // moved or freed, until the entry's completion is processed in `harvest` (or it is
            // leaked in `drop`). A fixed read or write names a registered slot whose range
            // holds the whole buffer (`fixed_index` checks it). The registered file (or raw
            // fd) belongs to `self.d.file`, which lives as long as the ring.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            self.enter(0, None)?;
        }
        self.queued += 1;
        self.queued_bytes += bytes;
        self.kernel += 1;
        self.unstamped.push(entry.get_user_data() as u32);
        if self.queued >= BATCH_ENTRIES || self.queued_bytes >= BATCH_BYTES {
            self.enter(0, None)?;
        }
        Ok(())
    }

    fn failure(&self, errno: i32, what: String) -> IoFailure {
        IoFailure::new(errno, format!("{} {what}", self.d.path.display()))
    }
}

macro_rules! sqe {
    ($self:ident, $op:ident :: new ( $($arg:expr),* ) $(. $m:ident ( $v:expr ))* ) => {
        if $self.fixed {
            opcode::$op::new(types::Fixed(0) $(, $arg)*) $(. $m($v))* .build()
        } else {
            opcode::$op::new(types::Fd($self.d.file.as_raw_fd()) $(, $arg)*) $(. $m($v))* .build()
        }
    };
}

// After `sqe!`, which the read and zeroing paths use too.
mod read;
mod zero;

impl BlockTarget for UringTarget {
    fn geometry(&self) -> Geometry {
        self.d.geometry
    }

    fn identity(&self) -> String {
        self.d.identity()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if self.user >= self.depth {
            return Err(TargetError::QueueFull { path: self.path(), depth: self.depth });
        }
        if !self.d.writable {
            let token = op.token();
            let buf = match op {
                Op::Write { buf, .. } => Some(buf),
                Op::Flush { .. } | Op::Zero { .. } => None,
            };
            self.refuse(token, buf, self.failure(libc::EBADF, "opened read-only".into()));
            return Ok(());
        }
        if let Some(g) = self.gone.clone() {
            let token = op.token();
            let buf = match op {
                Op::Write { buf, .. } => Some(buf),
                Op::Flush { .. } | Op::Zero { .. } => None,
            };
            self.refuse(token, buf, IoFailure::new(g.errno, format!("not submitted: the device is gone ({})", g.detail)));
            return Ok(());
        }
        match op {
            Op::Write { token, offset, buf, fua, .. } => {
                let lbs = if self.d.direct { self.d.geometry.logical_block_bytes as u64 } else { 1 };
                let len = buf.len();
                if len == 0 || !offset.is_multiple_of(lbs) || !(len as u64).is_multiple_of(lbs) || len > u32::MAX as usize {
                    let f = self
                        .failure(libc::EINVAL, format!("write of {len} bytes at {offset} is not aligned to the {lbs}-byte logical block"));
                    self.refuse(token, Some(buf), f);
                    return Ok(());
                }
                if offset + len as u64 > self.d.geometry.capacity_bytes {
                    let f = self.failure(
                        libc::EINVAL,
                        format!("write of {len} bytes at {offset} passes the end ({})", self.d.geometry.capacity_bytes),
                    );
                    self.refuse(token, Some(buf), f);
                    return Ok(());
                }
                let ptr = buf.as_ptr();
                let fixed = self.fixed_index(&buf, len);
                let i = self.alloc_slot(Kind::Write { token, offset, len, fua }, Some(buf));
                let flags = if fua { libc::RWF_DSYNC } else { 0 };
                let e = match fixed {
                    Some(k) => sqe!(self, WriteFixed::new(ptr, len as u32, k).offset(offset).rw_flags(flags)),
                    None => sqe!(self, Write::new(ptr, len as u32).offset(offset).rw_flags(flags)),
                }
                .user_data(i as u64);
                self.user += 1;
                self.push(e, len)
            }
            Op::Flush { token } => {
                let i = self.alloc_slot(Kind::Flush { token }, None);
                let e = sqe!(self, Fsync::new().flags(types::FsyncFlags::DATASYNC)).user_data(i as u64);
                self.user += 1;
                self.push(e, 0)
            }
            Op::Zero { token, offset, len, kind, .. } => self.submit_zero(token, offset, len, kind),
        }
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        // The clock is read only if the call has to wait.
        let mut deadline: Option<Instant> = None;
        let mut got = 0;
        loop {
            // What is queued goes to the kernel first, in the same entry that collects what
            // has completed.
            if self.queued > 0 {
                self.enter(0, None)?;
            }
            self.harvest();
            while let Some(c) = self.ready.pop_front() {
                out.push(c);
                got += 1;
                self.user -= 1;
            }
            if got >= min || self.user == 0 {
                return Ok(got);
            }
            let left = match deadline {
                None => {
                    deadline = Some(Instant::now() + timeout);
                    timeout
                }
                Some(d) => d.saturating_duration_since(Instant::now()),
            };
            if left.is_zero() {
                return Ok(got);
            }
            let spin = self.poll_until(WaitKind::Reap, left, |t| !t.ready.is_empty());
            if spin == Spin::Found {
                continue;
            }
            let slept = Instant::now();
            let came = self.enter(1, Some(left))?;
            if spin == Spin::Skipped && came {
                self.learned[WaitKind::Reap as usize].slept(slept.elapsed());
            }
            if !came {
                self.harvest();
                while let Some(c) = self.ready.pop_front() {
                    out.push(c);
                    got += 1;
                    self.user -= 1;
                }
                return Ok(got);
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.user
    }

    fn zeroing(&self) -> ZeroingSupport {
        self.d.zeroing
    }

    fn submit_queued(&mut self) -> Result<(), TargetError> {
        if self.queued > 0 {
            self.enter(0, None)?;
        }
        Ok(())
    }

    fn buffers(&mut self, count: usize, len: usize) -> Vec<AlignedBuf> {
        let mut out: Vec<AlignedBuf> = std::iter::from_fn(|| self.reg.take(len)).take(count).collect();
        if out.len() < count {
            let fresh = self.reg.register_new(&self.ring, count - out.len(), len);
            out.extend(fresh);
        }
        while out.len() < count {
            out.push(AlignedBuf::zeroed(len));
        }
        out
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        let mut rb = match self.read_bufs.pop() {
            Some(b) => b,
            None => self.buffers(1, buf.len()).pop().unwrap_or_else(|| AlignedBuf::zeroed(buf.len())),
        };
        rb.resize(buf.len());
        let (rb, r) = self.read_owned(offset, rb);
        if r.is_ok() {
            buf.copy_from_slice(&rb);
        }
        self.read_bufs.push(rb);
        r
    }

    fn read_owned(&mut self, offset: u64, rb: AlignedBuf) -> (AlignedBuf, Result<(), IoFailure>) {
        let len = rb.len();
        match self.read_into(offset, rb) {
            Ok(rb) => (rb, Ok(())),
            Err((rb, e)) => (rb.unwrap_or_else(|| AlignedBuf::zeroed(len)), Err(e)),
        }
    }

    fn read_start(&mut self, offset: u64, rb: AlignedBuf) -> ReadTicket {
        let len = rb.len();
        let started = Instant::now();
        let slot = match self.read_submit(offset, rb) {
            Ok(slot) => slot,
            Err((rb, e)) => return ReadTicket(TicketState::Done(rb.unwrap_or_else(|| AlignedBuf::zeroed(len)), Err(e))),
        };
        // Into the kernel now, so the device works while the caller does.
        // If entering fails the entry stays queued, and the wait enters again and reports it.
        if self.queued > 0 {
            let _ = self.enter(0, None);
        }
        ReadTicket(TicketState::Pending { engine: self.id, slot, offset, len, started })
    }

    fn read_finish(&mut self, ticket: ReadTicket) -> (AlignedBuf, Result<(), IoFailure>) {
        match ticket.0 {
            TicketState::Done(rb, r) => (rb, r),
            TicketState::Pending { engine, slot, offset, len, started } if engine == self.id => {
                match self.read_wait(slot, offset, len, started) {
                    Ok(rb) => (rb, Ok(())),
                    Err((rb, e)) => (rb.unwrap_or_else(|| AlignedBuf::zeroed(len)), Err(e)),
                }
            }
            TicketState::Pending { len, .. } => {
                (AlignedBuf::zeroed(len), Err(self.failure(libc::EINVAL, "read started on another engine finished here".into())))
            }
        }
    }

    fn set_read_timeout(&mut self, timeout: Duration) {
        self.read_timeout = timeout.max(Duration::from_millis(1));
    }

    fn wait_mode(&self) -> Option<String> {
        Some(self.wait_modes())
    }

    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        LAT_NAMES.iter().zip(&self.lat).filter(|(_, h)| !h.is_empty()).map(|(n, h)| (*n, h.clone())).collect()
    }
}

impl Drop for UringTarget {
    fn drop(&mut self) {
        let start = Instant::now();
        while self.kernel > 0 && start.elapsed() < DROP_WAIT {
            let left = DROP_WAIT.saturating_sub(start.elapsed());
            if !matches!(self.enter(1, Some(left)), Ok(true)) {
                break;
            }
            self.harvest();
        }
        if self.kernel == 0 {
            // Release the ring's reference to the file now, so an O_EXCL claim on a block
            // device ends with this drop rather than with the ring's asynchronous teardown.
            if self.fixed {
                let _ = self.ring.submitter().unregister_files();
            }
            // Unpin the registered buffers now; their memory is the pool's, freed after.
            if self.reg.has_table() {
                let _ = self.ring.submitter().unregister_buffers();
            }
        } else {
            // The kernel still owns these buffers (a hung device): leak them rather than free
            // memory it may write into later.
            for s in &mut self.slots {
                if !matches!(s.kind, Kind::Free) {
                    if let Some(b) = s.buf.take() {
                        std::mem::forget(b);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
