//! Decodes arbitrary bytes as one 512-byte and one 4096-byte sector. Decoding must never
//! panic, and a sector it calls valid must re-encode to exactly the same bytes.
//!
//! Random bytes almost never pass the keyed checksum, so the input is also read as a sector
//! identity: that sector is encoded, must decode as valid, and with one bit flipped (chosen
//! by the input) must decode as damaged.

#![no_main]

use faultline::format::{read_header, Decoded, Format, SectorId};
use libfuzzer_sys::fuzz_target;

fn check(data: &[u8], sector_bytes: usize) {
    let mut sector = vec![0u8; sector_bytes];
    let n = data.len().min(sector_bytes);
    sector[..n].copy_from_slice(&data[..n]);
    // Decode as the run the bytes claim to belong to (so a valid sector is reachable), and
    // as a fixed run (the foreign / unrecognised paths).
    let claimed = read_header(&sector).run_id;
    for run_id in [claimed, 0x5eed] {
        let f = Format::new(run_id, sector_bytes);
        match f.decode(&sector) {
            Decoded::Valid(id) => {
                assert_eq!(id.run_id, run_id);
                let mut again = vec![0u8; sector_bytes];
                f.encode(&id, &mut again);
                assert!(
                    again == sector,
                    "a valid sector does not re-encode to the same bytes"
                );
            }
            Decoded::Damaged { id, .. } | Decoded::ForeignRun(id) => {
                assert_eq!(id, read_header(&sector));
            }
            Decoded::Zeros => assert!(sector.iter().all(|&b| b == 0)),
            Decoded::Unrecognized => {}
        }
    }
}

/// Encodes the identity the input spells (bytes 0..46), then flips the bit it names
/// (bytes 46..48).
fn round_trip(data: &[u8], sector_bytes: usize) {
    let mut b = [0u8; 48];
    let n = data.len().min(48);
    b[..n].copy_from_slice(&data[..n]);
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let id = SectorId {
        run_id: u64_at(0),
        addr: u64_at(8),
        write_id: u64_at(16),
        cycle: u32_at(24),
        port: b[28],
        flags: b[29],
        index: u32_at(30),
        count: u32_at(34),
    };
    let f = Format::new(id.run_id, sector_bytes);
    let mut sector = vec![0u8; sector_bytes];
    f.encode(&id, &mut sector);
    assert_eq!(f.decode(&sector), Decoded::Valid(id));
    let bit = u16::from_le_bytes([b[46], b[47]]) as usize % (sector_bytes * 8);
    sector[bit / 8] ^= 1 << (bit % 8);
    assert!(
        matches!(f.decode(&sector), Decoded::Damaged { .. }),
        "flipping bit {bit} of a valid sector was not seen as damage"
    );
}

fuzz_target!(|data: &[u8]| {
    check(data, 512);
    check(data, 4096);
    round_trip(data, 512);
    round_trip(data, 4096);
});
