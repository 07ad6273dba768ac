//! Decodes arbitrary bytes as one 512-byte and one 4096-byte sector. Decoding must never
//! panic, and a sector it calls valid must re-encode to exactly the same bytes.

#![no_main]

use faultline::format::{read_header, Decoded, Format};
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

fuzz_target!(|data: &[u8]| {
    check(data, 512);
    check(data, 4096);
});
