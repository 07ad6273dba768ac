//! The synchronous fallback engine: `pwritev2`/`preadv2` on the same descriptor the io_uring
//! engine would use, for hosts where io_uring is unavailable (disabled by sysctl, filtered
//! by seccomp, or switched off with `FAULTLINE_DISABLE_IO_URING`). Whoever opens it says so
//! in one line; it is never chosen silently.
//!
//! Operations execute at submission, one at a time; FUA is `RWF_DSYNC` on the write itself,
//! a flush is `fdatasync`. Deallocate and write zeroes are the `BLKDISCARD` and `BLKZEROOUT`
//! ioctls on a block device (zero-out writes zeroes without unmapping), `fallocate` on a
//! regular file (a punched hole, a zeroed range, the file's size kept). After the device is gone (ENODEV, ENXIO, ESHUTDOWN, or several EIOs
//! in a row) nothing more is sent: new operations fail at once with that failure.

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, TargetError, Zeroing, ZeroingSupport};
use crate::blockdev::zeroing::{FILE_DEALLOCATE, FILE_WRITE_ZEROES};
use crate::blockdev::{Discovered, TargetKind};
use crate::latency::LatencyHistogram;
use crate::sys;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const EIO_GONE_AFTER: u32 = 8;
/// Latency histograms, by operation.
const LAT_NAMES: [&str; 5] = ["write", "write_fua", "flush", "deallocate", "write_zeroes"];

pub struct SyncTarget {
    d: Discovered,
    depth: usize,
    done: VecDeque<Completion>,
    gone: Option<IoFailure>,
    eio_run: u32,
    lat: [LatencyHistogram; 5],
}

impl SyncTarget {
    pub fn new(d: Discovered, depth: usize) -> Self {
        SyncTarget { d, depth: depth.max(1), done: VecDeque::new(), gone: None, eio_run: 0, lat: Default::default() }
    }

    pub fn direct(&self) -> bool {
        self.d.direct
    }

    fn failure(&self, e: std::io::Error, what: String) -> IoFailure {
        IoFailure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{} {what}", self.d.path.display()))
    }

    fn note(&mut self, r: &Result<(), IoFailure>) {
        match r {
            Ok(()) => self.eio_run = 0,
            Err(f) => {
                if f.errno == libc::EIO {
                    self.eio_run += 1;
                }
                if self.gone.is_none() && (f.device_gone() || self.eio_run >= EIO_GONE_AFTER) {
                    self.gone = Some(f.clone());
                }
            }
        }
    }

    fn write(&mut self, offset: u64, buf: &AlignedBuf, fua: bool) -> Result<(), IoFailure> {
        let lbs = if self.d.direct { self.d.geometry.logical_block_bytes as u64 } else { 1 };
        let len = buf.len();
        let inval = |what: String| Err(IoFailure::new(libc::EINVAL, format!("{} {what}", self.d.path.display())));
        if len == 0 || !offset.is_multiple_of(lbs) || !(len as u64).is_multiple_of(lbs) {
            return inval(format!("write of {len} bytes at {offset} is not aligned to the {lbs}-byte logical block"));
        }
        if offset + len as u64 > self.d.geometry.capacity_bytes {
            return inval(format!("write of {len} bytes at {offset} passes the end ({})", self.d.geometry.capacity_bytes));
        }
        let flags = if fua { libc::RWF_DSYNC } else { 0 };
        let mut done = 0;
        while done < len {
            match sys::pwritev2(&self.d.file, &buf[done..], offset + done as u64, flags) {
                Ok(0) => {
                    return Err(IoFailure::new(libc::EIO, format!("{} short write at {offset}: {done} of {len}", self.d.path.display())))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failure(e, format!("write of {len} bytes at {offset}{}", if fua { " (FUA)" } else { "" }))),
            }
        }
        Ok(())
    }

    /// A deallocate or write zeroes of `len` bytes at `offset`, refusing (EINVAL) one that is
    /// not whole logical blocks inside the target and (EOPNOTSUPP) a kind it does not carry.
    fn zero(&mut self, offset: u64, len: u64, kind: Zeroing) -> Result<(), IoFailure> {
        let g = self.d.geometry;
        if let Some(why) = kind.range_fault(offset, len, u64::from(g.logical_block_bytes), g.capacity_bytes) {
            return Err(IoFailure::new(libc::EINVAL, format!("{} {why}", self.d.path.display())));
        }
        let what = format!("{} of {len} bytes at {offset}", kind.name());
        if !self.d.zeroing.carries(kind) {
            return Err(IoFailure::new(libc::EOPNOTSUPP, format!("{} {what}: not carried by this target", self.d.path.display())));
        }
        let start = Instant::now();
        let r = match (&self.d.kind, kind) {
            (TargetKind::Block { .. }, Zeroing::Deallocate) => sys::blk_discard(&self.d.file, offset, len),
            (TargetKind::Block { .. }, Zeroing::WriteZeroes) => sys::blk_zeroout(&self.d.file, offset, len),
            (TargetKind::File, Zeroing::Deallocate) => sys::fallocate(&self.d.file, FILE_DEALLOCATE, offset, len),
            (TargetKind::File, Zeroing::WriteZeroes) => sys::fallocate(&self.d.file, FILE_WRITE_ZEROES, offset, len),
            // Not carried (checked above): a format is an admin command, never an I/O.
            (_, Zeroing::Format) => return Err(IoFailure::new(libc::EOPNOTSUPP, format!("{} {what}: not an I/O", self.d.path.display()))),
        };
        self.lat[if kind == Zeroing::Deallocate { 3 } else { 4 }].record(start.elapsed().as_nanos() as u64);
        r.map_err(|e| self.failure(e, what))
    }
}

impl BlockTarget for SyncTarget {
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
        if self.done.len() >= self.depth {
            return Err(TargetError::QueueFull { path: self.d.path.display().to_string(), depth: self.depth });
        }
        let start = Instant::now();
        let c = match op {
            Op::Write { token, offset, buf, fua, .. } => {
                let result = match &self.gone {
                    Some(g) => Err(IoFailure::new(g.errno, format!("not submitted: the device is gone ({})", g.detail))),
                    None if !self.d.writable => Err(IoFailure::new(libc::EBADF, format!("{} opened read-only", self.d.path.display()))),
                    None => {
                        let r = self.write(offset, &buf, fua);
                        self.note(&r);
                        self.lat[usize::from(fua)].record(start.elapsed().as_nanos() as u64);
                        r
                    }
                };
                Completion::new(token, result, Some(buf))
            }
            Op::Flush { token } => {
                let result = match &self.gone {
                    Some(g) => Err(IoFailure::new(g.errno, format!("not submitted: the device is gone ({})", g.detail))),
                    None => {
                        let r = self.d.file.sync_data().map_err(|e| self.failure(e, "flush".into()));
                        self.note(&r);
                        self.lat[2].record(start.elapsed().as_nanos() as u64);
                        r
                    }
                };
                Completion::new(token, result, None)
            }
            Op::Zero { token, offset, len, kind, .. } => {
                let result = match &self.gone {
                    Some(g) => Err(IoFailure::new(g.errno, format!("not submitted: the device is gone ({})", g.detail))),
                    None if !self.d.writable => Err(IoFailure::new(libc::EBADF, format!("{} opened read-only", self.d.path.display()))),
                    None => {
                        let r = self.zero(offset, len, kind);
                        self.note(&r);
                        r
                    }
                };
                Completion::new(token, result, None)
            }
        };
        self.done.push_back(c);
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, _min: usize, _timeout: Duration) -> Result<usize, TargetError> {
        // Everything ran at submission: all of it is complete.
        let n = self.done.len();
        out.extend(self.done.drain(..));
        Ok(n)
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn zeroing(&self) -> ZeroingSupport {
        self.d.zeroing
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        let len = buf.len();
        if offset + len as u64 > self.d.geometry.capacity_bytes {
            return Err(IoFailure::new(
                libc::EINVAL,
                format!("{} read of {len} bytes at {offset} passes the end ({})", self.d.path.display(), self.d.geometry.capacity_bytes),
            ));
        }
        let mut done = 0;
        while done < len {
            match sys::preadv2(&self.d.file, &mut buf[done..], offset + done as u64, 0) {
                Ok(0) => {
                    return Err(IoFailure::new(libc::EIO, format!("{} short read at {offset}: {done} of {len}", self.d.path.display())))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failure(e, format!("read of {len} bytes at {offset}"))),
            }
        }
        Ok(())
    }

    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        LAT_NAMES.iter().zip(&self.lat).filter(|(_, h)| !h.is_empty()).map(|(n, h)| (*n, h.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::{DeallocReads, Zeroing};
    use crate::zero_check::{bad_zero_ranges_are_refused, three_blocks_zeroed};

    #[test]
    fn a_file_deallocates_and_writes_zeroes_with_fallocate() {
        let path = std::env::temp_dir().join(format!("faultline-sync-zero-{}", std::process::id()));
        std::fs::File::create(&path).and_then(|f| f.set_len(1 << 20)).unwrap();
        let mut t = SyncTarget::new(crate::blockdev::discover(&path, true).unwrap(), 4);
        assert_eq!(t.zeroing().dealloc_reads, DeallocReads::Zeros);
        three_blocks_zeroed(&mut t, 8 * 4096, 4096, 0x5eed_5a0c);
        bad_zero_ranges_are_refused(&mut t, 512);
        drop(t);
        let mut ro = SyncTarget::new(crate::blockdev::discover(&path, false).unwrap(), 4);
        assert_eq!(ro.zeroing(), ZeroingSupport::default());
        ro.submit(Op::Zero { token: 1, offset: 0, len: 512, kind: Zeroing::Deallocate, write_id: 1 }).unwrap();
        let mut out = Vec::new();
        ro.reap(&mut out, 1, Duration::ZERO).unwrap();
        assert_eq!(out[0].result.as_ref().unwrap_err().errno, libc::EBADF);
        let _ = std::fs::remove_file(path);
    }
}
