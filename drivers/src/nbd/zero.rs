//! Deallocate and write zeroes over NBD (the NetworkBlockDevice project's `doc/proto.md`).
//!
//! Deallocate is `NBD_CMD_TRIM` (4), sent only to an export whose transmission flags have
//! `NBD_FLAG_SEND_TRIM` (bit 5). The protocol promises nothing about what a trimmed range reads
//! afterwards (zeros, or the data last written there), so it reads
//! [`DeallocReads::Unreported`]. Write zeroes is `NBD_CMD_WRITE_ZEROES` (6) with
//! `NBD_CMD_FLAG_NO_HOLE` (bit 1), so the server writes zeros and does not punch a hole, sent
//! only to an export with `NBD_FLAG_SEND_WRITE_ZEROES` (bit 6). Neither carries a payload; each
//! is bounded by the export's largest payload as a write is (the protocol's 32-bit length, and
//! servers that hold these commands to the payload limit, faultline's own among them), and
//! completes with its reply, whose error fails it as a write's does.

use super::{proto, NbdTarget, Pending};
use crate::block::{Completion, DeallocReads, Zeroing, ZeroingSupport};
use std::time::Instant;

impl NbdTarget {
    /// What the export offers, when opened for writing.
    pub(super) fn zeroing_carried(&self) -> ZeroingSupport {
        ZeroingSupport {
            deallocate: self.writable && self.export.trim(),
            write_zeroes: self.writable && self.export.write_zeroes(),
            format: false,
            dealloc_reads: DeallocReads::Unreported,
        }
    }

    /// Sends a trim or write zeroes of `len` bytes at `offset`, or completes it at once with why
    /// it cannot be sent: the connection is gone, the export read-only (EBADF), the range not
    /// whole blocks inside the export or longer than a request carries (EINVAL), the export
    /// does not offer the command (EOPNOTSUPP).
    pub(super) fn submit_zero(&mut self, token: u64, offset: u64, len: u64, kind: Zeroing, started: Instant) {
        let (cmd, flags, offer) = match kind {
            Zeroing::Deallocate => (proto::CMD_TRIM, 0, "NBD_FLAG_SEND_TRIM"),
            Zeroing::WriteZeroes => (proto::CMD_WRITE_ZEROES, proto::CMD_FLAG_NO_HOLE, "NBD_FLAG_SEND_WRITE_ZEROES"),
            // Not carried (`zeroing_carried`): NBD has no format command.
            Zeroing::Format => (0, 0, "a format command, which NBD has not"),
        };
        let what = format!("{} of {len} bytes at {offset}", kind.name());
        let max = self.export.max_payload();
        let lbs = u64::from(self.geometry.logical_block_bytes);
        let bad = if let Some(f) = &self.gone {
            Some(f.clone())
        } else if !self.writable {
            Some(self.failure(libc::EBADF, format!("{what}: the export was opened read-only")))
        } else if let Some(why) = kind.range_fault(offset, len, lbs, self.export.size) {
            Some(self.failure(libc::EINVAL, why))
        } else if len > u64::from(max) {
            Some(self.failure(libc::EINVAL, format!("{what}: the export takes at most {max} per request")))
        } else if !self.zeroing_carried().carries(kind) {
            Some(self.failure(libc::EOPNOTSUPP, format!("{what}: the export does not offer it (no {offer})")))
        } else {
            None
        };
        if let Some(f) = bad {
            self.done.push_back(Completion::new(token, Err(f), None));
            return;
        }
        self.ops += 1;
        self.request(flags, cmd, offset, len as u32, &[], Pending::Zero { token, kind, started });
    }
}
