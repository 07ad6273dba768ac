//! The on-drive sector format, version 1. The byte layout is documented in
//! `docs/FORMAT.md`; keep the two in step (a test decodes the document's worked example).
//!
//! Every sector identifies itself, so the verifier can tell, sector by sector, which write
//! produced it, where it was meant to go and whether its bytes are intact: that is what
//! makes torn writes visible at 512 B granularity and misdirected writes visible at all.
//! The payload is derived from the identity (incompressible, never the same twice), and a
//! BLAKE3 keyed checksum, keyed per run, authenticates the header.
//!
//! Why the checksum covers only the header: the payload is a pure function of the header, so
//! the verifier regenerates it and compares every byte, which is stricter than any checksum
//! and about ten times cheaper than hashing 448+ bytes per sector with BLAKE3 (whose SIMD
//! paths need inputs of many KiB). A flipped bit anywhere in the sector is still detected.

use crate::rng::{hash_words, WyRand};
use crate::sector_sums::Sums;
use serde::{Deserialize, Serialize};

/// Bytes 0..8 of every sector.
pub const MAGIC: [u8; 8] = *b"FLTLSECT";
/// Format version written in bytes 8..10.
pub const VERSION: u16 = 1;
/// Header length: identity then checksum.
pub const HEADER_BYTES: usize = 64;
/// Smallest sector the format supports.
pub const MIN_SECTOR_BYTES: usize = 512;
/// Largest sector the format supports (drives report 512 B to 16 KiB logical blocks).
pub const MAX_SECTOR_BYTES: usize = 64 << 10;

/// Why a sector size cannot be used, or `None` when it can: a power of two from
/// [`MIN_SECTOR_BYTES`] to [`MAX_SECTOR_BYTES`]. Every sector size that arrives from outside
/// (a ledger's header, a peer's frame) is held to this before a [`Format`] is made of it.
pub fn bad_sector_size(n: u64) -> Option<String> {
    let ok = n.is_power_of_two() && (MIN_SECTOR_BYTES as u64..=MAX_SECTOR_BYTES as u64).contains(&n);
    (!ok).then(|| format!("sector_bytes {n}: a sector is a power of two from {MIN_SECTOR_BYTES} to {MAX_SECTOR_BYTES} bytes"))
}
/// The write id of prefill sectors (real writes count from 1).
pub const PREFILL_WRITE_ID: u64 = 0;
/// Flag bit: the sector was written by the prefill pass.
pub const FLAG_PREFILL: u8 = 1;

const CHECKED_PREFIX: usize = 48;

/// Who wrote a sector, as written in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectorId {
    pub run_id: u64,
    /// Byte offset of this sector on the target.
    pub addr: u64,
    pub write_id: u64,
    pub cycle: u32,
    pub port: u8,
    pub flags: u8,
    /// Position of this sector within its write, in sectors.
    pub index: u32,
    /// Length of the write, in sectors.
    pub count: u32,
}

/// Per-run formatting state: the checksum key and sector size.
#[derive(Clone)]
pub struct Format {
    run_id: u64,
    key: [u8; 32],
    sums: Sums,
    sector_bytes: usize,
}

/// What a sector's bytes turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A well-formed sector of this run, checksum verified.
    Valid(SectorId),
    /// Our format (magic or run id match) but the checksum fails: corrupted in place.
    /// The identity is as read, unverified.
    Damaged { id: SectorId, magic_ok: bool, version: u16 },
    /// A well-formed faultline sector of another run (checksum not checkable).
    ForeignRun(SectorId),
    /// All zero bytes.
    Zeros,
    /// Anything else.
    Unrecognized,
}

impl Format {
    pub fn new(run_id: u64, sector_bytes: usize) -> Self {
        // Callers hold outside values to `bad_sector_size` first (a run header cannot be read
        // with a bad one): this is a programming error, not input.
        assert!(bad_sector_size(sector_bytes as u64).is_none(), "sector size {sector_bytes}");
        let key = blake3::derive_key("faultline sector v1 checksum key", &run_id.to_le_bytes());
        Format { run_id, key, sums: Sums::new(&key), sector_bytes }
    }

    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    pub fn sector_bytes(&self) -> usize {
        self.sector_bytes
    }

    /// Fills `out` (exactly one sector) with the sector `id` describes.
    pub fn encode(&self, id: &SectorId, out: &mut [u8]) {
        assert_eq!(out.len(), self.sector_bytes);
        debug_assert_eq!(id.run_id, self.run_id);
        write_header(id, out);
        fill_payload(id, &mut out[HEADER_BYTES..]);
        let sum = self.checksum(out);
        out[CHECKED_PREFIX..HEADER_BYTES].copy_from_slice(&sum);
        debug_assert_eq!(self.decode(out), Decoded::Valid(*id));
    }

    /// Fills `out` (whole sectors) with the sectors `id_of(i)` describes for sector `i`,
    /// byte for byte what `encode` makes of each, with the checksums computed many at once.
    pub fn encode_sectors(&self, out: &mut [u8], mut id_of: impl FnMut(usize) -> SectorId, sums: &mut Vec<[u8; 16]>) {
        assert!(out.len().is_multiple_of(self.sector_bytes));
        for (i, s) in out.chunks_exact_mut(self.sector_bytes).enumerate() {
            let id = id_of(i);
            debug_assert_eq!(id.run_id, self.run_id);
            write_header(&id, s);
            fill_payload(&id, &mut s[HEADER_BYTES..]);
        }
        sums.clear();
        self.sums.of_sectors(out, self.sector_bytes, sums);
        for (s, sum) in out.chunks_exact_mut(self.sector_bytes).zip(sums.iter()) {
            s[CHECKED_PREFIX..HEADER_BYTES].copy_from_slice(sum);
            debug_assert!(matches!(self.decode(s), Decoded::Valid(_)));
        }
    }

    /// The checksum each sector of `sectors` (whole sectors) should carry, appended to `out`:
    /// what [`Format::decode_summed`] takes.
    pub fn sums_of(&self, sectors: &[u8], out: &mut Vec<[u8; 16]>) {
        self.sums.of_sectors(sectors, self.sector_bytes, out);
    }

    /// Keyed BLAKE3 of the header's identity bytes (0..48), first 16 bytes.
    fn checksum(&self, sector: &[u8]) -> [u8; 16] {
        let mut out = [0u8; 16];
        out.copy_from_slice(&blake3::keyed_hash(&self.key, &sector[..CHECKED_PREFIX]).as_bytes()[..16]);
        out
    }

    /// Classifies one sector's bytes (exactly one sector).
    pub fn decode(&self, sector: &[u8]) -> Decoded {
        self.decode_with(sector, || self.checksum(sector))
    }

    /// As [`Format::decode`], given the checksum the sector's first 48 bytes call for
    /// (from [`Format::sums_of`]), so that a whole chunk's checksums are computed together.
    pub fn decode_summed(&self, sector: &[u8], sum: &[u8; 16]) -> Decoded {
        self.decode_with(sector, || *sum)
    }

    fn decode_with(&self, sector: &[u8], sum: impl FnOnce() -> [u8; 16]) -> Decoded {
        assert_eq!(sector.len(), self.sector_bytes);
        let magic_ok = sector[..8] == MAGIC;
        let id = read_header(sector);
        // One flipped bit must not turn our sector into "someone else's": a sector is ours
        // when the magic matches and the run id is within a few bits of ours, or the run id
        // matches exactly whatever the magic says.
        let close_run = (id.run_id ^ self.run_id).count_ones() <= 3;
        if !(magic_ok && close_run || id.run_id == self.run_id) {
            if magic_ok {
                return Decoded::ForeignRun(id);
            }
            return if sector.iter().all(|&b| b == 0) { Decoded::Zeros } else { Decoded::Unrecognized };
        }
        let version = u16::from_le_bytes([sector[8], sector[9]]);
        if magic_ok
            && version == VERSION
            && id.run_id == self.run_id
            && sector[CHECKED_PREFIX..HEADER_BYTES] == sum()
            && payload_matches(&id, &sector[HEADER_BYTES..])
        {
            Decoded::Valid(id)
        } else {
            Decoded::Damaged { id, magic_ok, version }
        }
    }
}

/// Reads the identity fields without checking anything (for dumps and diagnostics).
pub fn read_header(s: &[u8]) -> SectorId {
    let u32_at = |o: usize| u32::from_le_bytes(s[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(s[o..o + 8].try_into().expect("8 bytes"));
    SectorId {
        port: s[10],
        flags: s[11],
        cycle: u32_at(12),
        run_id: u64_at(16),
        addr: u64_at(24),
        write_id: u64_at(32),
        index: u32_at(40),
        count: u32_at(44),
    }
}

/// The write a sector claims, as one number, for a reader that holds no run key (the NBD
/// server in front of the simulated drive, which must name each write to the drive without
/// parsing it itself): the magic and version match and the header says the sector belongs at
/// `offset`. The number is the write id with the port byte above it (`port << 56 | id`):
/// each port of a dual-port run numbers its own writes from 1, so the id alone would name two
/// writes through two ports as one. Port 0 (every single-port run) and the prefill (id 0,
/// every sector a write of its own) leave the id as it is; the number stays below the NBD
/// server's ids for foreign data (`1 << 63`). The checksum is not checked (it needs the run's
/// key): this names a write, it does not vouch for its bytes.
pub fn claimed_write_id(sector: &[u8], offset: u64) -> Option<u64> {
    if sector.len() < HEADER_BYTES || sector[..8] != MAGIC || sector[8..10] != VERSION.to_le_bytes() {
        return None;
    }
    let id = read_header(sector);
    let fits = id.write_id < 1 << 56 && id.port < 0x80;
    (id.addr == offset && fits).then_some(if id.write_id == 0 { 0 } else { u64::from(id.port) << 56 | id.write_id })
}

fn write_header(id: &SectorId, s: &mut [u8]) {
    s[..8].copy_from_slice(&MAGIC);
    s[8..10].copy_from_slice(&VERSION.to_le_bytes());
    s[10] = id.port;
    s[11] = id.flags;
    s[12..16].copy_from_slice(&id.cycle.to_le_bytes());
    s[16..24].copy_from_slice(&id.run_id.to_le_bytes());
    s[24..32].copy_from_slice(&id.addr.to_le_bytes());
    s[32..40].copy_from_slice(&id.write_id.to_le_bytes());
    s[40..44].copy_from_slice(&id.index.to_le_bytes());
    s[44..48].copy_from_slice(&id.count.to_le_bytes());
}

/// Payload bytes: wyrand seeded by a hash of the whole identity, 8 bytes at a time.
fn fill_payload(id: &SectorId, out: &mut [u8]) {
    payload_rng(id).fill_le(out);
}

/// True when `payload` is exactly what `fill_payload` makes for `id`: made a piece at a time
/// and compared, stopping at the first piece that differs.
fn payload_matches(id: &SectorId, payload: &[u8]) -> bool {
    const PIECE: usize = 512;
    let mut rng = payload_rng(id);
    let mut want = [0u8; PIECE];
    payload.chunks(PIECE).all(|piece| {
        let want = &mut want[..piece.len()];
        rng.fill_le(want);
        piece == want
    })
}

fn payload_rng(id: &SectorId) -> WyRand {
    let seed = hash_words(&[
        id.run_id,
        id.addr,
        id.write_id,
        (id.cycle as u64) << 32 | (id.port as u64) << 8 | id.flags as u64,
        (id.index as u64) << 32 | id.count as u64,
    ]);
    WyRand::new(seed)
}

/// Number of differing bits between two equal-length byte strings.
pub fn bit_distance(a: &[u8], b: &[u8]) -> u64 {
    a.chunks(8)
        .zip(b.chunks(8))
        .map(|(x, y)| {
            let mut xa = [0u8; 8];
            let mut ya = [0u8; 8];
            xa[..x.len()].copy_from_slice(x);
            ya[..y.len()].copy_from_slice(y);
            (u64::from_le_bytes(xa) ^ u64::from_le_bytes(ya)).count_ones() as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_id(run_id: u64) -> impl Strategy<Value = SectorId> {
        (any::<u64>(), any::<u64>(), any::<u32>(), any::<u8>(), any::<u8>(), any::<u32>(), any::<u32>()).prop_map(
            move |(addr, write_id, cycle, port, flags, index, count)| SectorId { run_id, addr, write_id, cycle, port, flags, index, count },
        )
    }

    #[test]
    fn a_sector_names_its_write_to_a_reader_without_the_key_only_where_it_belongs() {
        let f = Format::new(0xF00D, 512);
        let id = SectorId { run_id: 0xF00D, addr: 4096, write_id: 77, cycle: 3, port: 0, flags: 0, index: 1, count: 2 };
        let mut s = vec![0u8; 512];
        f.encode(&id, &mut s);
        assert_eq!(claimed_write_id(&s, 4096), Some(77));
        assert_eq!(claimed_write_id(&s, 4608), None, "a sector written elsewhere than its header says is not claimed");
        assert_eq!(claimed_write_id(&[0u8; 512], 0), None);
        s[8] ^= 0xFF;
        assert_eq!(claimed_write_id(&s, 4096), None, "another format version");
        // Two ports of a dual-port run number their writes alike: the port tells them apart.
        let through_b = SectorId { port: 1, ..id };
        f.encode(&through_b, &mut s);
        assert_eq!(claimed_write_id(&s, 4096), Some(1 << 56 | 77));
        f.encode(&SectorId { write_id: 0, ..through_b }, &mut s);
        assert_eq!(claimed_write_id(&s, 4096), Some(0), "the prefill is one id whatever the port");
    }

    proptest! {
        #[test]
        fn round_trip(run in any::<u64>(), id in any_id(0), big in any::<bool>()) {
            let id = SectorId { run_id: run, ..id };
            let f = Format::new(run, if big { 4096 } else { 512 });
            let mut s = vec![0u8; f.sector_bytes()];
            f.encode(&id, &mut s);
            prop_assert_eq!(f.decode(&s), Decoded::Valid(id));
        }

        #[test]
        fn any_single_bit_flip_is_detected(run in any::<u64>(), id in any_id(0), bit in 0usize..4096) {
            let id = SectorId { run_id: run, ..id };
            let f = Format::new(run, 512);
            let mut s = vec![0u8; 512];
            f.encode(&id, &mut s);
            s[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(matches!(f.decode(&s), Decoded::Damaged { .. }), "flip of bit {} not seen as damage", bit);
        }

        #[test]
        fn encode_sectors_equals_encode_and_decode_summed_equals_decode(run in any::<u64>(), id in any_id(0), n in 1usize..40, flip in any::<Option<(usize, u8)>>()) {
            let f = Format::new(run, 512);
            let ids: Vec<SectorId> = (0..n).map(|i| SectorId { run_id: run, addr: id.addr.wrapping_add(512 * i as u64), index: i as u32, ..id }).collect();
            let mut many = vec![0u8; 512 * n];
            let mut sums = Vec::new();
            f.encode_sectors(&mut many, |i| ids[i], &mut sums);
            let mut one = vec![0u8; 512];
            for (i, s) in many.chunks_exact(512).enumerate() {
                f.encode(&ids[i], &mut one);
                prop_assert_eq!(s, &one[..], "sector {} of {}", i, n);
            }
            if let Some((at, bits)) = flip {
                let at = at % many.len();
                many[at] ^= bits;
            }
            sums.clear();
            f.sums_of(&many, &mut sums);
            for (i, s) in many.chunks_exact(512).enumerate() {
                prop_assert_eq!(f.decode_summed(s, &sums[i]), f.decode(s), "sector {} of {}", i, n);
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 512)) {
            let _ = Format::new(7, 512).decode(&bytes);
        }
    }

    #[test]
    fn other_runs_and_blank_sectors_are_not_ours() {
        let a = Format::new(1, 512);
        let b = Format::new(0xdead_beef_0000_0000, 512);
        let id = SectorId { run_id: 0xdead_beef_0000_0000, addr: 0, write_id: 5, cycle: 1, port: 0, flags: 0, index: 0, count: 1 };
        let mut s = vec![0u8; 512];
        b.encode(&id, &mut s);
        assert_eq!(a.decode(&s), Decoded::ForeignRun(id));
        assert_eq!(a.decode(&[0u8; 512]), Decoded::Zeros);
        assert_eq!(a.decode(&[0x5au8; 512]), Decoded::Unrecognized);
    }

    #[test]
    fn payload_differs_between_versions() {
        let f = Format::new(9, 512);
        let id = SectorId { run_id: 9, addr: 4096, write_id: 1, cycle: 1, port: 0, flags: 0, index: 0, count: 8 };
        let (mut a, mut b) = (vec![0u8; 512], vec![0u8; 512]);
        f.encode(&id, &mut a);
        f.encode(&SectorId { write_id: 2, ..id }, &mut b);
        assert!(bit_distance(&a[64..], &b[64..]) > 1000);
    }

    /// The bytes of a sector are the on-disk contract (FORMAT.md): a run written by one build
    /// is verified by another. These digests were taken with the one-output-at-a-time payload
    /// generator, before the payload was made eight outputs at a time; any change to the
    /// header, the checksum or the payload shows here.
    #[test]
    fn the_bytes_of_a_sector_are_pinned() {
        let id = SectorId { run_id: 0x0123_4567_89ab_cdef, addr: 1 << 33, write_id: 77, cycle: 3, port: 1, flags: 0, index: 2, count: 8 };
        for (bytes, want) in [
            (512usize, "7ff764073bdaed88c789d0fe5759a2443fe98ce3a42b233edcd57f8f98146534"),
            (4096, "1ffd9d32f3ebe177932a808b7b5484253801113313cedc35b1460d0e2cd747e2"),
        ] {
            let mut s = vec![0u8; bytes];
            Format::new(id.run_id, bytes).encode(&id, &mut s);
            assert_eq!(blake3::hash(&s).to_hex().as_str(), want, "{bytes}-byte sector");
        }
    }
}
