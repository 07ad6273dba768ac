//! Deallocate and write zeroes through NVMe I/O passthrough (NVM Command Set specification).
//!
//! Deallocate is Dataset Management (opcode 09h) with the Attribute Deallocate bit (CDW11 bit 2)
//! and NR (CDW10 bits 7:0, the number of ranges, 0's based): its data is NR + 1 16-byte ranges,
//! each the context attributes (u32), the length in logical blocks (u32) and the starting LBA
//! (u64), little endian. A range carries at most 2^32 - 1 blocks and a command 256 ranges; a
//! longer extent is sent as several commands, in order.
//!
//! Write zeroes is Write Zeroes (opcode 08h): SLBA in CDW10 (low) and CDW11 (high), NLB - 1 in
//! CDW12 bits 15:0, Deallocate (CDW12 bit 25) clear, so that the blocks are written with zeros,
//! not deallocated; more than 65,536 blocks are sent as several commands, in order. (The
//! controller's Write Zeroes Size Limit is not read: a controller that sets one may refuse a
//! long command, which then fails as the drive's refusal.)
//!
//! On a namespace with protection information, Write Zeroes sets PRACT: the controller writes
//! each zeroed block's tuple (`pi.rs`).
//!
//! What the controller carries comes from Identify when the engine opens: ONCS bit 2 (Dataset
//! Management) and bit 3 (Write Zeroes) of Identify Controller, and what a deallocated block
//! reads, DLFEAT bits 2:0 of Identify Namespace.

use super::{Shared, APP_TAG, MAX_BLOCKS_PER_COMMAND, PRINFO_PRACT};
use crate::block::{AlignedBuf, DeallocReads, IoFailure, Zeroing, ZeroingSupport};
use crate::nvme::{ControllerIdentity, DeallocatedReads, NamespaceIdentity};
use crate::sys::{nvme_io, IoData, NvmeAdminCmd};

pub const OPC_WRITE_ZEROES: u8 = 0x08;
pub const OPC_DATASET_MANAGEMENT: u8 = 0x09;
/// Dataset Management CDW11 bit 2: Attribute Deallocate.
const CDW11_AD: u32 = 1 << 2;
/// The most ranges one Dataset Management command carries (NR is 8 bits, 0's based).
pub const MAX_DSM_RANGES: usize = 256;
/// The most blocks one range carries (a 32-bit length).
pub const MAX_RANGE_BLOCKS: u64 = u32::MAX as u64;
/// ONCS bits: Dataset Management, Write Zeroes.
const ONCS_DSM: u16 = 1 << 2;
const ONCS_WRITE_ZEROES: u16 = 1 << 3;

/// The Dataset Management commands (with their range data) that deallocate `blocks` logical
/// blocks from `slba` of namespace `nsid`.
pub fn deallocate_commands(nsid: u32, slba: u64, blocks: u64) -> Vec<(NvmeAdminCmd, Vec<u8>)> {
    let mut ranges: Vec<[u8; 16]> = Vec::new();
    let (mut at, mut left) = (slba, blocks);
    while left > 0 {
        let n = left.min(MAX_RANGE_BLOCKS);
        let mut r = [0u8; 16];
        r[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        r[8..16].copy_from_slice(&at.to_le_bytes());
        ranges.push(r);
        (at, left) = (at + n, left - n);
    }
    ranges
        .chunks(MAX_DSM_RANGES)
        .map(|rs| {
            let cmd =
                NvmeAdminCmd { opcode: OPC_DATASET_MANAGEMENT, nsid, cdw10: rs.len() as u32 - 1, cdw11: CDW11_AD, ..Default::default() };
            (cmd, rs.concat())
        })
        .collect()
}

/// The Write Zeroes commands that zero `blocks` logical blocks from `slba` of namespace `nsid`
/// (no data; FUA and Deallocate clear).
pub fn write_zeroes_commands(nsid: u32, slba: u64, blocks: u64) -> Vec<NvmeAdminCmd> {
    let per = u64::from(MAX_BLOCKS_PER_COMMAND);
    (0..blocks.div_ceil(per))
        .map(|k| {
            let at = slba + k * per;
            let n = (blocks - k * per).min(per);
            NvmeAdminCmd {
                opcode: OPC_WRITE_ZEROES,
                nsid,
                cdw10: at as u32,
                cdw11: (at >> 32) as u32,
                cdw12: (n - 1) as u32,
                ..Default::default()
            }
        })
        .collect()
}

/// What Identify says a controller and its namespace carry.
pub fn zeroing_from_identify(ctrl: &ControllerIdentity, ns: &NamespaceIdentity) -> ZeroingSupport {
    ZeroingSupport {
        deallocate: ctrl.oncs & ONCS_DSM != 0,
        write_zeroes: ctrl.oncs & ONCS_WRITE_ZEROES != 0,
        format: false,
        dealloc_reads: match ns.deallocated_reads() {
            DeallocatedReads::Zeros => DeallocReads::Zeros,
            DeallocatedReads::Ones => DeallocReads::Ones,
            DeallocatedReads::NotReported => DeallocReads::Unreported,
        },
    }
}

impl Shared {
    /// Deallocates or writes zeroes over `len` bytes at `offset`, refusing (EINVAL) a range that
    /// is not whole blocks inside the namespace and (EOPNOTSUPP) a kind the controller lacks.
    pub(super) fn zero(&self, offset: u64, len: u64, kind: Zeroing) -> Result<(), IoFailure> {
        let lbs = u64::from(self.lbs);
        if let Some(why) = kind.range_fault(offset, len, lbs, self.capacity) {
            return Err(IoFailure::new(libc::EINVAL, format!("{} {why}", self.shown)));
        }
        let what = format!("{} of {len} bytes at {offset}", kind.name());
        if !self.zeroing.carries(kind) {
            let oncs = match kind {
                Zeroing::Deallocate => "Dataset Management",
                Zeroing::WriteZeroes => "Write Zeroes",
                Zeroing::Format => "an I/O format (Format NVM is an admin command)",
            };
            return Err(IoFailure::new(
                libc::EOPNOTSUPP,
                format!("{} {what}: not carried (Identify Controller's ONCS lacks {oncs}, or Identify failed)", self.shown),
            ));
        }
        let (slba, blocks) = (offset / lbs, len / lbs);
        match kind {
            Zeroing::Deallocate => {
                for (mut cmd, ranges) in deallocate_commands(self.nsid, slba, blocks) {
                    let mut data = AlignedBuf::zeroed(ranges.len());
                    data.copy_from_slice(&ranges);
                    nvme_io(&self.file, &mut cmd, IoData::ToDevice(&data), self.lbs).map_err(|e| self.failure(&e, &what))?;
                }
            }
            Zeroing::WriteZeroes => {
                for mut cmd in write_zeroes_commands(self.nsid, slba, blocks) {
                    if let Some(m) = self.meta.filter(|m| m.pi.is_some()) {
                        // The controller writes the zeros' tuples (PRACT), from the command's
                        // first LBA and the application tag the engine writes.
                        let first = u64::from(cmd.cdw10) | u64::from(cmd.cdw11) << 32;
                        cmd.cdw12 |= PRINFO_PRACT;
                        (cmd.cdw3, cmd.cdw14, cmd.cdw15) = (m.cdw3(first), cmd.cdw10, u32::from(APP_TAG));
                    }
                    nvme_io(&self.file, &mut cmd, IoData::None, self.lbs).map_err(|e| self.failure(&e, &what))?;
                }
            }
            // Refused above: never carried as an I/O.
            Zeroing::Format => return Err(IoFailure::new(libc::EOPNOTSUPP, format!("{} {what}: not an I/O", self.shown))),
        }
        Ok(())
    }
}
