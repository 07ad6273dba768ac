//! The block-target interface: a queue of owned-buffer operations and their completions.
//!
//! The shape follows io_uring rather than `Read`/`Write`: the harness submits operations,
//! each carrying an owned buffer, and later reaps completions, which hand the buffer back.
//! A buffer is never borrowed by an in-flight operation, so a device that vanishes mid-flight
//! (power cut, link reset) cannot leave the kernel writing into memory the harness reused.
//! Verification reads are synchronous ([`BlockTarget::read_at`]), or one started ahead and
//! finished later ([`BlockTarget::read_start`]): they run after the cut, on a quiet device, and
//! their failures are data for the verifier, not errors.

use crate::latency::LatencyHistogram;
use std::fmt;
use std::time::{Duration, Instant};

/// Sizes a target reports about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Smallest addressable unit, in bytes (512 or 4096 on real drives).
    pub logical_block_bytes: u32,
    /// The device's physical block, in bytes (often the atomic write unit of 512e drives).
    pub physical_block_bytes: u32,
    /// Usable size in bytes.
    pub capacity_bytes: u64,
}

/// Memory aligned for O_DIRECT, owned, movable into an operation and back.
///
/// Built from an over-allocated `Vec<u8>` and an aligned window into it, which needs no
/// `unsafe`: the allocation never moves while the buffer lives, because it is never grown.
///
/// A buffer may belong to an engine's pool ([`BlockTarget::buffers`]): its memory is then
/// registered with the kernel, and dropping the buffer hands the memory back to the pool
/// instead of freeing it, so memory the kernel has registered is never freed before the
/// engine that registered it (see [`BufPool`]).
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
    home: Option<PoolSlot>,
}

/// Where a pooled buffer's memory goes back to, and which slot of the pool it is.
struct PoolSlot {
    pool: std::sync::Arc<BufPool>,
    index: u16,
}

/// The memory of an engine's pooled buffers that nobody holds at the moment: dropped
/// buffers land here, with their slot index, until the engine hands them out again. The
/// engine keeps the pool alive for as long as its registration lasts; buffers alive when the
/// engine goes keep it alive too, so the memory is freed only after both are gone.
#[derive(Default)]
pub(crate) struct BufPool {
    returned: std::sync::Mutex<Vec<(u16, AlignedBuf)>>,
}

impl BufPool {
    /// Wraps `buf` (which must not belong to a pool) as slot `index` of `pool`.
    pub(crate) fn adopt(pool: &std::sync::Arc<BufPool>, index: u16, mut buf: AlignedBuf) -> AlignedBuf {
        debug_assert!(buf.home.is_none());
        buf.home = Some(PoolSlot { pool: pool.clone(), index });
        buf
    }

    /// Takes back a returned buffer of at least `len` bytes of capacity, resized to `len`.
    pub(crate) fn take(pool: &std::sync::Arc<BufPool>, len: usize) -> Option<AlignedBuf> {
        let mut returned = pool.returned.lock().unwrap_or_else(|p| p.into_inner());
        let k = returned.iter().rposition(|(_, b)| b.capacity() >= len)?;
        let (index, mut buf) = returned.swap_remove(k);
        drop(returned);
        buf.len = len;
        Some(BufPool::adopt(pool, index, buf))
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some(PoolSlot { pool, index }) = self.home.take() {
            let raw = std::mem::take(&mut self.raw);
            let back = AlignedBuf { raw, start: self.start, len: self.len, home: None };
            pool.returned.lock().unwrap_or_else(|p| p.into_inner()).push((index, back));
        }
    }
}

/// Alignment of every [`AlignedBuf`]: enough for O_DIRECT on 4Kn devices.
pub const BUF_ALIGN: usize = 4096;

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to [`BUF_ALIGN`].
    pub fn zeroed(len: usize) -> Self {
        let raw = vec![0u8; len + BUF_ALIGN];
        let start = raw.as_ptr().align_offset(BUF_ALIGN);
        assert!(start < BUF_ALIGN, "align_offset on u8 pointers always succeeds");
        AlignedBuf { raw, start, len, home: None }
    }

    /// The pool and slot this buffer belongs to, if it was handed out by an engine's pool.
    pub(crate) fn pool_slot(&self) -> Option<(&std::sync::Arc<BufPool>, u16)> {
        self.home.as_ref().map(|h| (&h.pool, h.index))
    }

    /// Start of the whole aligned window (its full capacity), for registering it.
    pub(crate) fn window_ptr(&mut self) -> *mut u8 {
        let start = self.start;
        self.raw[start..].as_mut_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity this buffer can be resized to without reallocating.
    pub fn capacity(&self) -> usize {
        self.raw.len() - self.start
    }

    /// Changes the visible length; reallocates (zeroed) only when `len` exceeds the capacity.
    pub fn resize(&mut self, len: usize) {
        if len > self.capacity() {
            *self = AlignedBuf::zeroed(len);
        } else {
            self.len = len;
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// A read begun by [`BlockTarget::read_start`], to hand to [`BlockTarget::read_finish`] of the
/// same target.
#[derive(Debug)]
#[must_use = "a started read must be finished (read_finish), or its engine keeps its buffer"]
pub struct ReadTicket(pub(crate) TicketState);

impl ReadTicket {
    /// A read already done (or refused) with this outcome: what a wrapping target hands out
    /// when it does not pass the read on.
    pub fn done(buf: AlignedBuf, result: Result<(), IoFailure>) -> ReadTicket {
        ReadTicket(TicketState::Done(buf, result))
    }
}

#[derive(Debug)]
pub(crate) enum TicketState {
    /// Read already (synchronous engines).
    Done(AlignedBuf, Result<(), IoFailure>),
    /// In the kernel: the engine (its id) and slot, the read's place and length, when it was
    /// started.
    Pending { engine: u64, slot: u32, offset: u64, len: usize, started: Instant },
}

/// One queued operation. `token` comes back in the completion.
#[derive(Debug)]
pub enum Op {
    /// Write `buf` at byte `offset`. With `fua`, the write is durable when it completes.
    /// `write_id` is the harness's identity for the write: real engines only log it; the
    /// simulated drive keeps it as ground truth.
    Write { token: u64, offset: u64, buf: AlignedBuf, fua: bool, write_id: u64 },
    /// Flush the device's volatile cache.
    Flush { token: u64 },
    /// Change what `len` bytes at `offset` read without sending data: deallocate them, or
    /// write zeroes (see [`Zeroing`]). Durable by the same rules as a write. Submitted only
    /// to a target whose [`BlockTarget::zeroing`] carries `kind`.
    Zero { token: u64, offset: u64, len: u64, kind: Zeroing, write_id: u64 },
}

impl Op {
    pub fn token(&self) -> u64 {
        match self {
            Op::Write { token, .. } | Op::Flush { token } | Op::Zero { token, .. } => *token,
        }
    }
}

/// An operation that changes what sectors read without carrying data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Zeroing {
    /// NVMe Dataset Management with the deallocate attribute, a block device's discard, a
    /// file's punched hole, NBD's TRIM. What the range reads afterwards is the target's
    /// [`DeallocReads`].
    Deallocate,
    /// NVMe Write Zeroes (without the deallocate bit), a block device's zero-out, a file's
    /// zeroed range, NBD's WRITE_ZEROES: a write of zeros.
    WriteZeroes,
    /// NVMe Format NVM of the whole namespace (an admin command, never an I/O: no engine
    /// carries it as an [`Op`]). Once complete, no sector reads as any data written before it
    /// (docs/DOMAIN.md, "Format NVM under a cut").
    Format,
}

impl Zeroing {
    /// The name scenarios and reports use (`deallocate`, `write_zeroes`).
    pub fn name(self) -> &'static str {
        match self {
            Zeroing::Deallocate => "deallocate",
            Zeroing::WriteZeroes => "write_zeroes",
            Zeroing::Format => "format",
        }
    }

    /// Why `len` bytes at `offset` cannot be zeroed on a target of `lbs`-byte logical blocks and
    /// `capacity` bytes, if they cannot: no bytes, not whole blocks, or past the end. What every
    /// engine refuses with `EINVAL` before anything is sent.
    pub fn range_fault(self, offset: u64, len: u64, lbs: u64, capacity: u64) -> Option<String> {
        let what = self.name();
        if len == 0 || !offset.is_multiple_of(lbs) || !len.is_multiple_of(lbs) {
            return Some(format!("{what} of {len} bytes at {offset} is not aligned to the {lbs}-byte logical block"));
        }
        match offset.checked_add(len) {
            Some(end) if end <= capacity => None,
            _ => Some(format!("{what} of {len} bytes at {offset} passes the end ({capacity})")),
        }
    }
}

/// What a deallocated sector reads back, as the target declares it (NVMe: DLFEAT bits 2:0 in
/// Identify Namespace).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeallocReads {
    /// All bytes 00h.
    Zeros,
    /// All bytes FFh.
    Ones,
    /// Not reported: zeros, FFh, or the data last written there (never anything older).
    #[default]
    Unreported,
}

/// Which [`Zeroing`] operations a target carries, and what a deallocated range reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroingSupport {
    pub deallocate: bool,
    pub write_zeroes: bool,
    /// Format NVM of the whole namespace, as an [`Op::Zero`] of its whole capacity: carried
    /// only where the target was opened to format (a simulated drive, or a namespace's engine
    /// wrapped in `format::Formatting`).
    pub format: bool,
    pub dealloc_reads: DeallocReads,
}

impl ZeroingSupport {
    /// Whether `kind` is carried.
    pub fn carries(&self, kind: Zeroing) -> bool {
        match kind {
            Zeroing::Deallocate => self.deallocate,
            Zeroing::WriteZeroes => self.write_zeroes,
            Zeroing::Format => self.format,
        }
    }
}

/// What a device said about one operation.
#[derive(Debug)]
pub struct Completion {
    pub token: u64,
    pub result: Result<(), IoFailure>,
    /// The write buffer, handed back for reuse.
    pub buf: Option<AlignedBuf>,
    /// When the engine saw the completion, on the monotonic clock the harness also uses to
    /// timestamp cuts.
    pub at: Instant,
}

impl Completion {
    /// A completion seen now.
    pub fn new(token: u64, result: Result<(), IoFailure>, buf: Option<AlignedBuf>) -> Self {
        Completion { token, result, buf, at: Instant::now() }
    }
}

/// How an I/O failed. A failure is a fact to record, never a reason to panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoFailure {
    /// The errno the operation ended with (`libc::ETIMEDOUT` for a hang cut short).
    pub errno: i32,
    /// A human-readable account, naming the operation and offset.
    pub detail: String,
}

impl IoFailure {
    pub fn new(errno: i32, detail: impl Into<String>) -> Self {
        IoFailure { errno, detail: detail.into() }
    }

    /// True when the errno says the device is gone (not just one bad block). ENOSPC counts:
    /// I/O never goes past the capacity measured at open, so ENOSPC means the device shrank
    /// under the open descriptor, which is what Linux answers once a disk is removed
    /// (del_gendisk sets its capacity to 0: writes fail ENOSPC, reads return 0 bytes);
    /// measured in the lab on a controller unplugged with QMP `device_del` (docs/LAB.md).
    pub fn device_gone(&self) -> bool {
        matches!(self.errno, libc::ENODEV | libc::ENXIO | libc::ESHUTDOWN | libc::ENOSPC)
    }

    /// An I/O refused before it reached the device because whoever it was for is gone
    /// (`ESHUTDOWN`): callers stop as they do for a device that went away.
    pub fn stopped(detail: impl Into<String>) -> Self {
        IoFailure::new(libc::ESHUTDOWN, detail)
    }

    /// True for EIO (a run of them marks a device gone: see the engines).
    pub fn is_eio(&self) -> bool {
        self.errno == libc::EIO
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.detail, std::io::Error::from_raw_os_error(self.errno))
    }
}

impl std::error::Error for IoFailure {}

/// Failures of the target as a whole (as opposed to one I/O).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("cannot open target {path}: {source}")]
    Open { path: String, source: std::io::Error },
    #[error("target {path}: {reason}")]
    Unsupported { path: String, reason: String },
    #[error("target {path}: queue full ({depth} operations in flight)")]
    QueueFull { path: String, depth: usize },
    #[error("target {path}: {what}: {source}")]
    Io { path: String, what: String, source: std::io::Error },
}

/// A drive under test, or anything that behaves like one.
pub trait BlockTarget: Send {
    /// Sizes of the target.
    fn geometry(&self) -> Geometry;

    /// A one-line identity (path, size; later serial and WWID) recorded in the ledger and
    /// compared on every later use of the same run directory.
    fn identity(&self) -> String;

    /// Maximum operations in flight this target accepts.
    fn queue_depth(&self) -> usize;

    /// Queues one operation.
    fn submit(&mut self, op: Op) -> Result<(), TargetError>;

    /// Appends at least `min` completions to `out` (fewer only when nothing is in flight, or
    /// when `timeout` passes). Returns the number appended.
    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError>;

    /// Operations submitted and not yet reaped.
    fn in_flight(&self) -> usize;

    /// The [`Op::Zero`] kinds this target carries (none unless the engine says so). A run
    /// whose workload needs one the target lacks is refused when it opens.
    fn zeroing(&self) -> ZeroingSupport {
        ZeroingSupport::default()
    }

    /// Hands every queued operation to the device now. An engine that batches submissions
    /// holds a few back until it reaps; the writer calls this just before a cut, so that what
    /// it counts in flight at the cut is in flight at the device when the cut lands. Engines
    /// that submit at once (or whose workers do) keep this default.
    fn submit_queued(&mut self) -> Result<(), TargetError> {
        Ok(())
    }

    /// `count` zeroed-or-reused buffers of `len` bytes for this target's writes and reads.
    /// An engine that registers memory with the kernel hands out buffers from a pool it owns
    /// (the kernel then pins their pages once, not on every operation); a dropped pooled
    /// buffer goes back to that pool. Any buffer works with any target: one this target did
    /// not hand out is simply not registered here. Contents are unspecified (a reused buffer
    /// holds what it last held).
    fn buffers(&mut self, count: usize, len: usize) -> Vec<AlignedBuf> {
        (0..count).map(|_| AlignedBuf::zeroed(len)).collect()
    }

    /// Reads `buf.len()` bytes at `offset`, bypassing any host cache.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure>;

    /// Reads `buf.len()` bytes at `offset` into an owned buffer, handed back with the result.
    /// Engines that give the buffer itself to the kernel override this to avoid a copy; if
    /// such a read hangs they keep the buffer and hand back a fresh one of the same length.
    fn read_owned(&mut self, offset: u64, mut buf: AlignedBuf) -> (AlignedBuf, Result<(), IoFailure>) {
        let r = self.read_at(offset, &mut buf);
        (buf, r)
    }

    /// Starts reading `buf.len()` bytes at `offset` into `buf` and returns at once where the
    /// engine can (the device reads while the caller works); [`BlockTarget::read_finish`]
    /// waits for it and hands the buffer back with the result, as [`BlockTarget::read_owned`]
    /// does. Several reads may be started before the first is finished; every started read
    /// must be finished (an engine keeps the buffer of an unfinished one). The default reads
    /// synchronously here.
    fn read_start(&mut self, offset: u64, buf: AlignedBuf) -> ReadTicket {
        let (buf, result) = self.read_owned(offset, buf);
        ReadTicket(TicketState::Done(buf, result))
    }

    /// Waits for a read begun by [`BlockTarget::read_start`] (its timeout counted from the
    /// start), as [`BlockTarget::read_owned`] would have.
    fn read_finish(&mut self, ticket: ReadTicket) -> (AlignedBuf, Result<(), IoFailure>) {
        match ticket.0 {
            TicketState::Done(buf, result) => (buf, result),
            TicketState::Pending { len, .. } => {
                (AlignedBuf::zeroed(len), Err(IoFailure::new(libc::EINVAL, "a read started on another target was finished here")))
            }
        }
    }

    /// Bounds how long one `read_at` may wait; a read that takes longer fails with
    /// `ETIMEDOUT` (the verifier reports it as `unreadable`). Targets whose reads cannot hang
    /// ignore it.
    fn set_read_timeout(&mut self, _timeout: Duration) {}

    /// How the engine's waits for completions settled (spinning or sleeping, and how often
    /// spinning paid), for a bench's report; `None` for engines that do not choose.
    fn wait_mode(&self) -> Option<String> {
        None
    }

    /// Latency histograms per operation type (`write`, `write_fua`, `flush`, `read`,
    /// `deallocate`, `write_zeroes`), for engines that measure them.
    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        Vec::new()
    }
}
