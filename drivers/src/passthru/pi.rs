//! Metadata and end-to-end protection information (PI) through NVMe I/O passthrough.
//!
//! A namespace formatted with metadata (Identify Namespace: the format's MS, FLBAS bit 4 clear
//! for a separate buffer) takes `MS` bytes per block beside the data, through the command's
//! metadata pointer. With PI (DPS bits 2:0 type 1, 2 or 3), 8 of those bytes are the block's
//! tuple, the first 8 when DPS bit 3 is set, else the last 8 (NVM Command Set specification,
//! "End-to-end Data Protection"): a 16-bit guard (CRC-16 T10-DIF, polynomial 8BB7h, big endian,
//! of the block's data and, with the tuple last, of the metadata bytes before it, as the
//! specification's figure of the 16b guard PI says and QEMU computes it: `nvme_dif_pract_generate_dif`),
//! a 16-bit application tag and a 32-bit reference tag (type 1:
//! the low 32 bits of the block's LBA; type 2: the command's initial reference tag plus the
//! block's index; type 3: opaque), each big endian.
//!
//! The engine writes with PRACT clear, its own tuple in the buffer (the reference tag from the
//! LBA, which satisfies types 1 and 2 alike, and application tag [`APP_TAG`]), and asks the
//! controller to check the guard and, for types 1 and 2, the reference tag (PRCHK), as a host
//! that generates PI does. It reads with PRCHK clear, so that what the drive stored comes back
//! whatever it is, and checks every tuple itself ([`Metadata::check`]): a block whose guard is
//! not its data's CRC, or whose tags are not the ones written, is a protection information
//! mismatch naming the field, what it holds and what it should. A tuple whose application tag
//! is FFFFh (types 1 and 2), or whose application and reference tags are all ones (type 3),
//! is the escape that disables checking, as it does for the drive: a deallocated block may
//! read so. Write Zeroes goes with PRACT set, so the controller writes the tuples of the zeros.
//!
//! The guard is 16-bit, or 64-bit where the format's extended LBA format (Identify Namespace
//! for the NVM command set, CNS 05h) says PIF 2: a 16-byte tuple of a CRC-64/NVME guard (init
//! and final XOR all ones, reflected; the specification's "64b CRC"), the application tag and
//! a 48-bit reference tag (no storage tag), the initial one's upper 16 bits in CDW3. A 32-bit
//! guard (PIF 1) or a format that interleaves metadata with the data (extended LBA) is refused
//! when the engine opens.

use crate::nvme::NamespaceIdentity;
use crc::{Crc, CRC_16_T10_DIF, CRC_64_NVME};

/// Bytes of one PI tuple with a 16-bit guard (16 with a 64-bit one).
pub const PI_BYTES: usize = 8;
/// The application tag the engine writes (and, with PRACT, asks Write Zeroes for).
pub const APP_TAG: u16 = 0;
/// CDW12 bit 29: Protection Information Action (the controller generates or strips PI).
pub const PRINFO_PRACT: u32 = 1 << 29;
/// CDW12 bits 28 and 26: the controller checks the guard, or the reference tag (bit 27, the
/// application tag, is not asked for: the engine checks that tag itself on reads).
pub const PRCHK_GUARD: u32 = 1 << 28;
pub const PRCHK_REF: u32 = 1 << 26;

const T10_DIF: Crc<u16> = Crc::<u16>::new(&CRC_16_T10_DIF);
const NVME_64: Crc<u64> = Crc::<u64>::new(&CRC_64_NVME);

/// The guard of a block's data: CRC-16 T10-DIF.
pub fn guard(data: &[u8]) -> u16 {
    T10_DIF.checksum(data)
}

/// The guard of a block whose tuple follows `before` bytes of its metadata: CRC-16 T10-DIF of
/// its data, then of those bytes.
pub fn guard_with(data: &[u8], before: &[u8]) -> u16 {
    let mut d = T10_DIF.digest();
    d.update(data);
    d.update(before);
    d.finalize()
}

/// The guard of a block whose 64-bit-guard tuple follows `before` bytes of its metadata:
/// CRC-64/NVME of its data, then of those bytes.
pub fn guard64_with(data: &[u8], before: &[u8]) -> u64 {
    let mut d = NVME_64.digest();
    d.update(data);
    d.update(before);
    d.finalize()
}

/// The guard's width (the format's PIF).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// CRC-16 T10-DIF, an 8-byte tuple with a 32-bit reference tag.
    Crc16,
    /// CRC-64/NVME, a 16-byte tuple with a 48-bit reference tag.
    Crc64,
}

impl Guard {
    /// Bytes of its tuple.
    pub fn tuple_bytes(self) -> usize {
        match self {
            Guard::Crc16 => PI_BYTES,
            Guard::Crc64 => 2 * PI_BYTES,
        }
    }

    /// The reference tag's bits.
    fn ref_mask(self) -> u64 {
        match self {
            Guard::Crc16 => u64::from(u32::MAX),
            Guard::Crc64 => (1 << 48) - 1,
        }
    }
}

/// Which protection information type the namespace is formatted with (DPS bits 2:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiType {
    Type1,
    Type2,
    Type3,
}

/// A namespace's metadata: `bytes` per block, in a separate buffer, with PI or without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    pub bytes: u16,
    pub pi: Option<Pi>,
}

/// Where the tuple is and which type it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pi {
    pub kind: PiType,
    /// DPS bit 3: the tuple is the metadata's first bytes (else its last).
    pub first: bool,
    pub guard: Guard,
}

/// One block whose tuple does not match, and how many did in the same transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PiMismatch {
    pub lba: u64,
    /// Each field that differs: "guard 0000h where its data gives 1A2Bh".
    pub fields: Vec<String>,
    pub blocks: u64,
}

impl std::fmt::Display for PiMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the protection information of LBA {}: {}", self.lba, self.fields.join(", "))?;
        if self.blocks > 1 {
            write!(f, " ({} blocks of this transfer do not match)", self.blocks)?;
        }
        Ok(())
    }
}

impl Metadata {
    /// The namespace's metadata as Identify Namespace gives it; `guard_format` is the format's
    /// PIF from CNS 05h (0: 16-bit guard), `None` where the controller has no extended LBA
    /// formats (every guard is then 16-bit). `Ok(None)`: no metadata. `Err` says why the engine
    /// cannot carry it.
    pub fn from_identify(ns: &NamespaceIdentity, guard_format: Option<u8>) -> Result<Option<Metadata>, String> {
        if ns.metadata_bytes == 0 {
            return Ok(None);
        }
        if ns.flbas & 0x10 != 0 {
            return Err(format!(
                "its format interleaves {} bytes of metadata with each block's data (extended LBA, FLBAS bit 4): faultline's \
                 passthrough engine carries metadata in a separate buffer only",
                ns.metadata_bytes
            ));
        }
        let kind = match ns.dps & 0x07 {
            0 => return Ok(Some(Metadata { bytes: ns.metadata_bytes, pi: None })),
            1 => PiType::Type1,
            2 => PiType::Type2,
            3 => PiType::Type3,
            t => return Err(format!("DPS names protection information type {t}, which NVMe does not define")),
        };
        let guard = match guard_format.unwrap_or(0) {
            0 => Guard::Crc16,
            2 => Guard::Crc64,
            pif => {
                let bits = if pif == 1 { "32-bit" } else { "reserved" };
                return Err(format!(
                    "its protection information has a {bits} guard (PIF {pif}): faultline computes the 16- and 64-bit guards only"
                ));
            }
        };
        if usize::from(ns.metadata_bytes) < guard.tuple_bytes() {
            return Err(format!(
                "DPS declares protection information of {} bytes in {} bytes of metadata",
                guard.tuple_bytes(),
                ns.metadata_bytes
            ));
        }
        Ok(Some(Metadata { bytes: ns.metadata_bytes, pi: Some(Pi { kind, first: ns.dps & 0x08 != 0, guard }) }))
    }

    /// "8 bytes of metadata, protection information type 1 in its last 8" (", 64-bit guard").
    pub fn describe(&self) -> String {
        match self.pi {
            None => format!("{} bytes of metadata, no protection information", self.bytes),
            Some(pi) => format!(
                "{} bytes of metadata, protection information type {} in its {} {}{}",
                self.bytes,
                pi.kind as u8 + 1,
                if pi.first { "first" } else { "last" },
                pi.guard.tuple_bytes(),
                if pi.guard == Guard::Crc64 { ", 64-bit guard" } else { "" }
            ),
        }
    }

    fn tuple_at(&self, pi: Pi) -> usize {
        if pi.first {
            0
        } else {
            usize::from(self.bytes) - pi.guard.tuple_bytes()
        }
    }

    /// CDW3 of a Read or Write from `slba` with a 64-bit guard: the initial reference tag's
    /// upper 16 bits (CDW14 holds its low 32); 0 otherwise.
    pub fn cdw3(&self, slba: u64) -> u32 {
        match self.pi {
            Some(Pi { guard: Guard::Crc64, .. }) => ((slba >> 32) & 0xFFFF) as u32,
            _ => 0,
        }
    }

    /// The PRINFO bits of a Write: the controller checks the guard, and the reference tag of
    /// types 1 and 2.
    pub fn write_prinfo(&self) -> u32 {
        match self.pi {
            None => 0,
            Some(Pi { kind: PiType::Type3, .. }) => PRCHK_GUARD,
            Some(_) => PRCHK_GUARD | PRCHK_REF,
        }
    }

    /// Fills `meta` (`bytes` per block) for `data`, whose first block is `slba`: zeros, and
    /// each block's tuple where the namespace has PI.
    pub fn fill(&self, data: &[u8], lbs: usize, slba: u64, meta: &mut [u8]) {
        meta.fill(0);
        let Some(pi) = self.pi else { return };
        let at = self.tuple_at(pi);
        for (i, (block, m)) in data.chunks(lbs).zip(meta.chunks_mut(usize::from(self.bytes))).enumerate() {
            let reftag = (slba + i as u64) & pi.guard.ref_mask();
            match pi.guard {
                Guard::Crc16 => {
                    let g = guard_with(block, &m[..at]);
                    let t = &mut m[at..at + PI_BYTES];
                    t[0..2].copy_from_slice(&g.to_be_bytes());
                    t[2..4].copy_from_slice(&APP_TAG.to_be_bytes());
                    t[4..8].copy_from_slice(&(reftag as u32).to_be_bytes());
                }
                Guard::Crc64 => {
                    let g = guard64_with(block, &m[..at]);
                    let t = &mut m[at..at + 2 * PI_BYTES];
                    t[0..8].copy_from_slice(&g.to_be_bytes());
                    t[8..10].copy_from_slice(&APP_TAG.to_be_bytes());
                    t[10..16].copy_from_slice(&reftag.to_be_bytes()[2..]);
                }
            }
        }
    }

    /// Checks the tuple of every block of `data` (first block `slba`) in `meta`: the first
    /// block that does not match, with every field that differs, and how many did not.
    pub fn check(&self, data: &[u8], lbs: usize, slba: u64, meta: &[u8]) -> Result<(), PiMismatch> {
        let Some(pi) = self.pi else { return Ok(()) };
        let mut first: Option<PiMismatch> = None;
        for (i, (block, m)) in data.chunks(lbs).zip(meta.chunks(usize::from(self.bytes))).enumerate() {
            let lba = slba + i as u64;
            let fields = self.mismatched(pi, block, m, lba);
            if fields.is_empty() {
                continue;
            }
            match &mut first {
                None => first = Some(PiMismatch { lba, fields, blocks: 1 }),
                Some(m) => m.blocks += 1,
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The fields of block `lba`'s tuple (in its metadata `m`) that do not match its data and
    /// address; none where the tuple is the escape.
    fn mismatched(&self, pi: Pi, block: &[u8], m: &[u8], lba: u64) -> Vec<String> {
        let at = self.tuple_at(pi);
        let t = &m[at..at + pi.guard.tuple_bytes()];
        let (guard, want, app, r, w) = match pi.guard {
            Guard::Crc16 => {
                let g = u64::from(u16::from_be_bytes([t[0], t[1]]));
                let r = u64::from(u32::from_be_bytes([t[4], t[5], t[6], t[7]]));
                (g, u64::from(guard_with(block, &m[..at])), u16::from_be_bytes([t[2], t[3]]), r, 4)
            }
            Guard::Crc64 => {
                let g = u64::from_be_bytes(t[0..8].try_into().unwrap_or_default());
                let r = t[10..16].iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b));
                (g, guard64_with(block, &m[..at]), u16::from_be_bytes([t[8], t[9]]), r, 16)
            }
        };
        let mask = pi.guard.ref_mask();
        if app == 0xFFFF && (pi.kind != PiType::Type3 || r == mask) {
            return Vec::new();
        }
        let mut fields = Vec::new();
        if guard != want {
            fields.push(format!("guard {guard:0w$X}h where its data gives {want:0w$X}h"));
        }
        if app != APP_TAG {
            fields.push(format!("application tag {app:04X}h where {APP_TAG:04X}h was written"));
        }
        let lba_tag = lba & mask;
        let rw = if pi.guard == Guard::Crc64 { 12 } else { 8 };
        if pi.kind != PiType::Type3 && r != lba_tag {
            fields.push(format!("reference tag {r:0rw$X}h where its LBA gives {lba_tag:0rw$X}h"));
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(ms: u16, flbas: u8, dps: u8) -> NamespaceIdentity {
        NamespaceIdentity {
            block_bytes: 512,
            metadata_bytes: ms,
            nsfeat: 0,
            flbas,
            dps,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
        }
    }

    #[test]
    fn the_guard_is_crc16_t10_dif_of_the_data_and_the_metadata_before_the_tuple() {
        // The catalogue's check value (reveng: CRC-16/T10-DIF, "123456789" -> D0DBh); a zero
        // block's guard is 0, which is why all-zero metadata passes the guard check of zeros.
        assert_eq!(guard(b"123456789"), 0xD0DB);
        assert_eq!(guard(&[0u8; 512]), 0);
        assert_eq!(guard_with(b"12345", b"6789"), 0xD0DB, "one CRC over both");
        // With the tuple last in 64 bytes, the 56 bytes before it count, zeros or not.
        let m = Metadata { bytes: 64, pi: Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc16 }) };
        let data = [0x5Au8; 512];
        let mut meta = [0u8; 64];
        m.fill(&data, 512, 7, &mut meta);
        assert_eq!(u16::from_be_bytes([meta[56], meta[57]]), guard_with(&data, &[0u8; 56]));
        assert_ne!(guard_with(&data, &[0u8; 56]), guard(&data));
    }

    #[test]
    fn identify_gives_the_metadata_and_refuses_what_the_engine_cannot_carry() {
        assert_eq!(Metadata::from_identify(&ns(0, 0, 0), None), Ok(None));
        assert_eq!(Metadata::from_identify(&ns(16, 0, 0), None), Ok(Some(Metadata { bytes: 16, pi: None })));
        let t1 = Metadata::from_identify(&ns(8, 0, 1), None).unwrap().unwrap();
        assert_eq!(t1.pi, Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc16 }));
        assert_eq!(t1.describe(), "8 bytes of metadata, protection information type 1 in its last 8");
        let first = Metadata::from_identify(&ns(64, 0, 0x08 | 3), Some(0)).unwrap().unwrap();
        assert_eq!(first.pi, Some(Pi { kind: PiType::Type3, first: true, guard: Guard::Crc16 }));
        assert!(Metadata::from_identify(&ns(8, 0x10, 1), None).unwrap_err().contains("extended LBA"));
        assert!(Metadata::from_identify(&ns(16, 0, 1), Some(1)).unwrap_err().contains("32-bit guard (PIF 1)"));
        let g64 = Metadata::from_identify(&ns(16, 0, 1), Some(2)).unwrap().unwrap();
        assert_eq!(g64.pi, Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc64 }));
        assert_eq!(g64.describe(), "16 bytes of metadata, protection information type 1 in its last 16, 64-bit guard");
        assert!(Metadata::from_identify(&ns(8, 0, 1), Some(2)).unwrap_err().contains("of 16 bytes in 8 bytes"));
        assert!(Metadata::from_identify(&ns(8, 0, 5), None).unwrap_err().contains("type 5"));
        assert!(Metadata::from_identify(&ns(4, 0, 1), None).unwrap_err().contains("of 8 bytes in 4 bytes"));
    }

    #[test]
    fn a_filled_tuple_checks_and_each_field_changed_is_named() {
        for (ms, first) in [(8u16, false), (64, false), (64, true)] {
            let m = Metadata { bytes: ms, pi: Some(Pi { kind: PiType::Type1, first, guard: Guard::Crc16 }) };
            let data: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8).collect();
            let mut meta = vec![0xAAu8; 4 * usize::from(ms)];
            m.fill(&data, 512, 0x1_0000_0010, &mut meta);
            assert_eq!(m.check(&data, 512, 0x1_0000_0010, &meta), Ok(()));
            let at = if first { 0 } else { usize::from(ms) - 8 };
            // The reference tag is the LBA's low 32 bits, big endian.
            assert_eq!(meta[usize::from(ms) + at + 4..usize::from(ms) + at + 8], [0, 0, 0, 0x11]);
            // Block 1's data changed: its guard; block 3's reference tag: its LBA.
            let mut bad = data.clone();
            bad[600] ^= 1;
            let e = m.check(&bad, 512, 0x1_0000_0010, &meta).unwrap_err();
            assert_eq!((e.lba, e.blocks, e.fields.len()), (0x1_0000_0011, 1, 1), "{e}");
            assert!(e.fields[0].starts_with("guard "), "{e}");
            let mut wrong = meta.clone();
            wrong[3 * usize::from(ms) + at + 7] ^= 1;
            wrong[3 * usize::from(ms) + at + 2] = 0x12;
            let e = m.check(&data, 512, 0x1_0000_0010, &wrong).unwrap_err();
            assert_eq!(e.to_string(), "the protection information of LBA 4294967315: application tag 1200h where 0000h was written, reference tag 00000012h where its LBA gives 00000013h");
            // Read back from another LBA: every block's reference tag is wrong.
            let e = m.check(&data, 512, 0x20, &meta).unwrap_err();
            assert_eq!((e.lba, e.blocks), (0x20, 4), "{e}");
        }
    }

    #[test]
    fn the_64_bit_guard_tuple_is_crc64_nvme_an_app_tag_and_a_48_bit_reference_tag() {
        // The catalogue's check value (reveng: CRC-64/NVME, "123456789" -> AE8B14860A799888h).
        assert_eq!(guard64_with(b"1234", b"56789"), 0xAE8B_1486_0A79_9888);
        let m = Metadata { bytes: 32, pi: Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc64 }) };
        let data: Vec<u8> = (0..1024u32).map(|i| (i * 13 + 1) as u8).collect();
        let mut meta = vec![0u8; 64];
        let slba = 0x0000_1234_5678_9AB0u64;
        m.fill(&data, 512, slba, &mut meta);
        assert_eq!(m.check(&data, 512, slba, &meta), Ok(()));
        // Block 1's tuple, the last 16 of its 32 bytes: the guard over data and the 16 before.
        let t = &meta[48..64];
        assert_eq!(t[0..8], guard64_with(&data[512..], &[0u8; 16]).to_be_bytes());
        assert_eq!(t[10..16], [0x12, 0x34, 0x56, 0x78, 0x9A, 0xB1], "48 bits of the LBA");
        assert_eq!(m.cdw3(slba), 0x1234);
        let mut wrong = meta.clone();
        wrong[63] ^= 3;
        let e = m.check(&data, 512, slba, &wrong).unwrap_err();
        assert_eq!(e.fields, ["reference tag 123456789AB2h where its LBA gives 123456789AB1h"]);
        // The escape: application tag FFFFh.
        wrong[56..58].copy_from_slice(&[0xFF, 0xFF]);
        assert_eq!(m.check(&data, 512, slba, &wrong), Ok(()));
    }

    #[test]
    fn the_escape_tags_disable_the_check_as_they_do_for_the_drive() {
        let t1 = Metadata { bytes: 8, pi: Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc16 }) };
        let data = [0x5Au8; 512];
        // Application tag FFFFh: nothing checked (a deallocated block may read so).
        assert_eq!(t1.check(&data, 512, 9, &[0, 0, 0xFF, 0xFF, 0, 0, 0, 0]), Ok(()));
        // Type 3 needs the reference tag all ones too; and its reference tag is not checked.
        let t3 = Metadata { bytes: 8, pi: Some(Pi { kind: PiType::Type3, first: false, guard: Guard::Crc16 }) };
        assert!(t3.check(&data, 512, 9, &[0, 0, 0xFF, 0xFF, 0, 0, 0, 0]).is_err());
        assert_eq!(t3.check(&data, 512, 9, &[0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]), Ok(()));
        let g = guard(&data).to_be_bytes();
        assert_eq!(t3.check(&data, 512, 9, &[g[0], g[1], 0, 0, 1, 2, 3, 4]), Ok(()));
        // All-zero metadata over nonzero data: guard and reference tag both named.
        let e = t1.check(&data, 512, 9, &[0; 8]).unwrap_err();
        assert_eq!(e.fields.len(), 2, "{e}");
        // No PI: nothing to check.
        assert_eq!(Metadata { bytes: 8, pi: None }.check(&data, 512, 9, &[0; 8]), Ok(()));
    }
}
