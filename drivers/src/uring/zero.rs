//! Deallocate and write zeroes ([`Op::Zero`]) on the ring.
//!
//! A regular file: `IORING_OP_FALLOCATE`, a punched hole (deallocate) or a zeroed range (write
//! zeroes), the file's size kept. A block device: write zeroes is the same fallocate, which the
//! kernel's `blkdev_fallocate` turns into REQ_OP_WRITE_ZEROES without unmapping; deallocate is
//! the block layer's own discard command, `IORING_OP_URING_CMD` with `BLOCK_URING_CMD_DISCARD`
//! (Linux 6.12+, linux/blkdev.h): the byte offset in the entry's `addr`, the byte length in
//! `addr3` (the first 8 bytes of the 16-byte command area), `len`, `rw_flags` and `ioprio` zero,
//! as block/ioctl.c's `blkdev_uring_cmd` reads it.
//!
//! A kernel without that command refuses it: EOPNOTSUPP before 6.12 (a block device has no
//! `uring_cmd`), EINVAL before 5.19 (no such opcode). The engine then discards with the
//! `BLKDISCARD` ioctl instead, synchronously on the caller's thread (the one operation of this
//! engine that blocks it); once the ioctl has worked where the command was refused, every later
//! discard takes it at once. A device without discard refuses both, and the ioctl's answer is
//! what the operation fails with.

use super::*;
use crate::block::Zeroing;
use crate::blockdev::zeroing::{FILE_DEALLOCATE, FILE_WRITE_ZEROES};

/// `BLOCK_URING_CMD_DISCARD` = `_IO(0x12, 0)` (linux/blkdev.h).
pub(super) const BLOCK_URING_CMD_DISCARD: u32 = 0x12 << 8;

/// How a zeroing operation reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ZeroVia {
    /// `IORING_OP_FALLOCATE` with [`FILE_DEALLOCATE`] or [`FILE_WRITE_ZEROES`].
    Fallocate,
    /// `IORING_OP_URING_CMD` with [`BLOCK_URING_CMD_DISCARD`].
    DiscardCmd,
}

/// A zeroing operation in its slot.
#[derive(Clone, Copy, Debug)]
pub(super) struct ZeroOp {
    token: u64,
    offset: u64,
    len: u64,
    kind: Zeroing,
    via: ZeroVia,
}

/// The command area of a block discard of `len` bytes: its first 8 bytes are the entry's
/// `addr3`, the length (the offset goes in `addr`).
pub(super) fn discard_cmd_area(len: u64) -> [u8; 16] {
    let mut cmd = [0u8; 16];
    cmd[..8].copy_from_slice(&len.to_ne_bytes());
    cmd
}

impl UringTarget {
    /// Queues a deallocate or write zeroes of `len` bytes at `offset`, refusing (EINVAL) one
    /// that is not whole logical blocks inside the target, and (EOPNOTSUPP) a kind the target
    /// does not carry ([`BlockTarget::zeroing`]).
    pub(super) fn submit_zero(&mut self, token: u64, offset: u64, len: u64, kind: Zeroing) -> Result<(), TargetError> {
        let g = self.d.geometry;
        if let Some(why) = kind.range_fault(offset, len, u64::from(g.logical_block_bytes), g.capacity_bytes) {
            let f = self.failure(libc::EINVAL, why);
            self.refuse(token, None, f);
            return Ok(());
        }
        if !self.d.zeroing.carries(kind) {
            let f = self.failure(libc::EOPNOTSUPP, format!("{} of {len} bytes at {offset}: not carried by this target", kind.name()));
            self.refuse(token, None, f);
            return Ok(());
        }
        let block = matches!(self.d.kind, TargetKind::Block { .. });
        if block && kind == Zeroing::Deallocate && self.discard_by_ioctl {
            let started = Instant::now();
            let result = self.blkdiscard(offset, len, None);
            self.lat[LAT_DEALLOCATE].record(started.elapsed().as_nanos() as u64);
            self.note_result(result.as_ref().err());
            self.user += 1;
            self.ready.push_back(Completion::new(token, result, None));
            return Ok(());
        }
        let via = if block && kind == Zeroing::Deallocate { ZeroVia::DiscardCmd } else { ZeroVia::Fallocate };
        let i = self.alloc_slot(Kind::Zero(ZeroOp { token, offset, len, kind, via }), None);
        let mode = if kind == Zeroing::Deallocate { FILE_DEALLOCATE } else { FILE_WRITE_ZEROES };
        let e = match via {
            ZeroVia::DiscardCmd => sqe!(self, UringCmd16::new(BLOCK_URING_CMD_DISCARD).cmd(discard_cmd_area(len)).addr(Some(offset))),
            ZeroVia::Fallocate => sqe!(self, Fallocate::new(len).offset(offset).mode(mode)),
        };
        self.user += 1;
        self.push(e.user_data(u64::from(i)), 0)
    }

    /// A zeroing operation's completion (`res`: the kernel's result, `ns` its latency, `now`
    /// when it was seen). A discard command the kernel refused is done again with the ioctl,
    /// its time counted in the latency and the completion seen when it returns.
    pub(super) fn zero_done(&mut self, z: ZeroOp, res: i32, ns: u64, now: Instant) {
        let (result, ns, at) = match res {
            0.. => (Ok(()), ns, now),
            _ if z.via == ZeroVia::DiscardCmd && matches!(-res, libc::EINVAL | libc::EOPNOTSUPP) => {
                let r = self.blkdiscard(z.offset, z.len, Some(-res));
                let at = Instant::now();
                (r, ns + at.duration_since(now).as_nanos() as u64, at)
            }
            _ => (Err(self.failure(-res, format!("{} of {} bytes at {}", z.kind.name(), z.len, z.offset))), ns, now),
        };
        self.lat[if z.kind == Zeroing::Deallocate { LAT_DEALLOCATE } else { LAT_WRITE_ZEROES }].record(ns);
        self.note_result(result.as_ref().err());
        self.ready.push_back(Completion { token: z.token, result, buf: None, at });
    }

    /// A discard through the `BLKDISCARD` ioctl, synchronously; `refused`: the errno the
    /// kernel refused the io_uring discard command with, which the ioctl working shows to be a
    /// kernel without the command (later discards then take the ioctl at once).
    fn blkdiscard(&mut self, offset: u64, len: u64, refused: Option<i32>) -> Result<(), IoFailure> {
        match crate::sys::blk_discard(&self.d.file, offset, len) {
            Ok(()) => {
                if refused.is_some() {
                    self.discard_by_ioctl = true;
                }
                Ok(())
            }
            Err(e) => {
                let before = refused.map_or(String::new(), |r| {
                    format!(" (refused by io_uring's discard command too: {})", std::io::Error::from_raw_os_error(r))
                });
                Err(self
                    .failure(e.raw_os_error().unwrap_or(libc::EIO), format!("deallocate of {len} bytes at {offset} (BLKDISCARD){before}")))
            }
        }
    }
}
