//! Identify Namespace (CNS 00h): the formatted block size, and what the namespace declares of
//! its write atomicity and of what a deallocated block reads back.
//!
//! Layout (NVMe Base 2.1, Figure "Identify Namespace Data Structure, NVM Command Set"; the
//! same offsets as libnvme's `struct nvme_id_ns` and Linux's `include/linux/nvme.h`):
//! NSFEAT byte 24 (bit 1 NATOMIC: NAWUN, NAWUPF and NACWU are defined for this namespace),
//! NLBAF 25 (0's based), FLBAS 26 (bits 3:0 the format index, 6:5 its high bits, 4 extended LBA),
//! DPS 29 (bits 2:0 the protection information type, 3 its tuple first), DLFEAT 33
//! (bits 2:0: 001b a deallocated block reads zeros, 010b 0xFF, 000b not reported), NAWUN 34,
//! NAWUPF 36, NACWU 38, NABSN 40, NABO 42, NABSPF 44 (each 16-bit, in logical blocks, NAWUPF
//! and NABSPF 0's based, NABSPF 0: no boundary), the LBA formats from byte 128, 4 bytes each
//! (MS 16-bit, LBADS the block size's power of two, RP).

use super::{NvmeAdminCmd, IDENTIFY_BYTES, OPC_IDENTIFY};

/// Identify Namespace (CNS 0) of namespace `nsid`: 4096 bytes.
pub fn identify_namespace_cmd(nsid: u32) -> NvmeAdminCmd {
    NvmeAdminCmd { opcode: OPC_IDENTIFY, nsid, cdw10: 0, ..Default::default() }
}

/// The Identify Namespace fields faultline uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceIdentity {
    /// The formatted logical block, bytes (2^LBADS of the format FLBAS names).
    pub block_bytes: u32,
    /// Metadata bytes per block of that format (MS).
    pub metadata_bytes: u16,
    pub nsfeat: u8,
    /// Formatted LBA Size (byte 26), as the drive gave it (bit 4: metadata interleaved with
    /// the data, an extended LBA).
    pub flbas: u8,
    /// End-to-end Data Protection Type Settings (byte 29): bits 2:0 the PI type (0 none),
    /// bit 3 the tuple in the metadata's first 8 bytes.
    pub dps: u8,
    pub dlfeat: u8,
    pub nawun: u16,
    pub nawupf: u16,
    pub nabsn: u16,
    pub nabo: u16,
    pub nabspf: u16,
}

/// Identify Namespace data that cannot be a namespace's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceDataError {
    #[error("FLBAS names LBA format {index}, past the {count} formats NLBAF declares")]
    FormatIndex { index: usize, count: usize },
    #[error("LBA format {index}: LBADS {lbads} (a {bytes}-byte block) is outside 512 bytes to 64 KiB")]
    BlockSize { index: usize, lbads: u8, bytes: u64 },
}

impl NamespaceIdentity {
    pub fn parse(b: &[u8; IDENTIFY_BYTES]) -> Result<NamespaceIdentity, NamespaceDataError> {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let count = usize::from(b[25]) + 1;
        let flbas = b[26];
        let index = usize::from(flbas & 0x0F) | (usize::from((flbas >> 5) & 0x03) << 4);
        if index >= count.min(64) {
            return Err(NamespaceDataError::FormatIndex { index, count });
        }
        let lbaf = 128 + 4 * index;
        let lbads = b[lbaf + 2];
        if !(9..=16).contains(&lbads) {
            let bytes = 1u64.checked_shl(u32::from(lbads)).unwrap_or(0);
            return Err(NamespaceDataError::BlockSize { index, lbads, bytes });
        }
        Ok(NamespaceIdentity {
            block_bytes: 1 << lbads,
            metadata_bytes: u16_at(lbaf),
            nsfeat: b[24],
            flbas,
            dps: b[29],
            dlfeat: b[33],
            nawun: u16_at(34),
            nawupf: u16_at(36),
            nabsn: u16_at(40),
            nabo: u16_at(42),
            nabspf: u16_at(44),
        })
    }

    /// The index of the format FLBAS names (bits 3:0, and 6:5 as bits 5:4).
    pub fn format_index(&self) -> usize {
        usize::from(self.flbas & 0x0F) | (usize::from((self.flbas >> 5) & 0x03) << 4)
    }

    /// NSFEAT bit 1: the namespace's own atomicity fields (NAWUN, NAWUPF, NACWU) are defined.
    pub fn natomic(&self) -> bool {
        self.nsfeat & 0x02 != 0
    }

    /// The write size the namespace keeps atomic across a power failure, bytes: NAWUPF + 1
    /// blocks where NATOMIC says it is defined; `None` where it is not (Linux then takes one
    /// logical block, since its "nvme: stop using AWUPF").
    pub fn power_fail_unit_bytes(&self) -> Option<u64> {
        self.natomic().then(|| (u64::from(self.nawupf) + 1) * u64::from(self.block_bytes))
    }

    /// The atomic boundaries under power failure, bytes: (size, offset) where NABSPF declares
    /// one (a write that crosses one is not atomic); `None` for no boundary.
    pub fn power_fail_boundary_bytes(&self) -> Option<(u64, u64)> {
        (self.natomic() && self.nabspf != 0).then(|| {
            let b = u64::from(self.block_bytes);
            ((u64::from(self.nabspf) + 1) * b, u64::from(self.nabo) * b)
        })
    }

    /// What a deallocated block reads back (DLFEAT bits 2:0).
    pub fn deallocated_reads(&self) -> DeallocatedReads {
        match self.dlfeat & 0x07 {
            0b001 => DeallocatedReads::Zeros,
            0b010 => DeallocatedReads::Ones,
            _ => DeallocatedReads::NotReported,
        }
    }
}

/// What a deallocated block reads back, as DLFEAT declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeallocatedReads {
    /// 001b: all bytes zero.
    Zeros,
    /// 010b: all bytes 0xFF.
    Ones,
    /// 000b (or a reserved value): not reported (zeros, 0xFF, or the last data written).
    NotReported,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Identify Namespace page with format `index` of 2^`lbads`-byte blocks chosen.
    fn page(index: u8, lbads: u8) -> Box<[u8; IDENTIFY_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_BYTES]);
        b[25] = 3; // four formats
        b[26] = index;
        b[128 + 2] = 9;
        b[128 + 4 * usize::from(index) + 2] = lbads;
        b
    }

    #[test]
    fn the_formatted_block_and_the_atomic_fields_read_from_their_offsets() {
        let mut b = page(1, 12);
        b[128 + 4] = 8; // MS 8 bytes of metadata
        b[24] = 0x02 | 0x10;
        b[33] = 0x09; // bit 3 (deallocate in Write Zeroes) and 001b: zeros
        b[36..38].copy_from_slice(&7u16.to_le_bytes());
        b[42..44].copy_from_slice(&2u16.to_le_bytes());
        b[44..46].copy_from_slice(&15u16.to_le_bytes());
        let ns = NamespaceIdentity::parse(&b).unwrap();
        assert_eq!((ns.block_bytes, ns.metadata_bytes, ns.nawupf, ns.nabo, ns.nabspf), (4096, 8, 7, 2, 15));
        assert!(ns.natomic());
        assert_eq!(ns.power_fail_unit_bytes(), Some(32 * 1024));
        assert_eq!(ns.power_fail_boundary_bytes(), Some((64 * 1024, 8192)));
        assert_eq!(ns.deallocated_reads(), DeallocatedReads::Zeros);
        // NATOMIC clear: the namespace's fields mean nothing, whatever they hold.
        b[24] = 0x10;
        let ns = NamespaceIdentity::parse(&b).unwrap();
        assert_eq!((ns.power_fail_unit_bytes(), ns.power_fail_boundary_bytes()), (None, None));
        b[33] = 0x02;
        assert_eq!(NamespaceIdentity::parse(&b).unwrap().deallocated_reads(), DeallocatedReads::Ones);
        b[33] = 0x00;
        assert_eq!(NamespaceIdentity::parse(&b).unwrap().deallocated_reads(), DeallocatedReads::NotReported);
    }

    #[test]
    fn a_format_index_past_nlbaf_or_an_impossible_block_size_is_refused() {
        let mut b = page(0, 9);
        b[26] = 0x04; // format 4 of 4 (0..=3)
        assert_eq!(NamespaceIdentity::parse(&b), Err(NamespaceDataError::FormatIndex { index: 4, count: 4 }));
        // FLBAS bits 6:5 extend the index past 15.
        b[25] = 63;
        b[26] = 0x21;
        b[128 + 4 * 17 + 2] = 9;
        assert_eq!(NamespaceIdentity::parse(&b).unwrap().block_bytes, 512);
        for lbads in [0, 8, 17, 255] {
            let e = NamespaceIdentity::parse(&page(0, lbads)).unwrap_err();
            assert!(matches!(e, NamespaceDataError::BlockSize { lbads: l, .. } if l == lbads), "{e}");
        }
    }
}
