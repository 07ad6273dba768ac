//! The ledger's framing (see the table in [`super`]): checksummed, sequence-numbered frames
//! appended one after another. A frame that does not check out at the end of the file is a
//! torn tail and is dropped; one followed by any valid frame is damage in the middle, refused.

use super::{LedgerError, Record};
use std::path::Path;

const FRAME_MAGIC: [u8; 4] = *b"FLR1";
const FRAME_HEADER: usize = 24;
/// Largest payload accepted on replay; a length past it marks a damaged frame.
const MAX_PAYLOAD: usize = 64 << 20;

pub(super) fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADER + payload.len());
    f.extend_from_slice(&FRAME_MAGIC);
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&frame_check(seq, payload));
    f.extend_from_slice(payload);
    f
}

fn frame_check(seq: u64, payload: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    h.finalize().as_bytes()[..8].try_into().expect("8 bytes")
}

/// Parses the frame at `at`; `Err(why)` when it does not check out.
fn parse_frame(bytes: &[u8], at: usize) -> Result<(u64, &[u8]), String> {
    let rest = &bytes[at..];
    if rest.len() < FRAME_HEADER {
        return Err(format!("only {} bytes left, a frame header needs {FRAME_HEADER}", rest.len()));
    }
    if rest[..4] != FRAME_MAGIC {
        return Err("bad frame magic".into());
    }
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4")) as usize;
    if len > MAX_PAYLOAD {
        return Err(format!("payload length {len} is implausible"));
    }
    if rest.len() < FRAME_HEADER + len {
        return Err(format!("payload of {len} bytes runs past the end of the file"));
    }
    let seq = u64::from_le_bytes(rest[8..16].try_into().expect("8"));
    let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
    if rest[16..24] != frame_check(seq, payload) {
        return Err("checksum mismatch".into());
    }
    Ok((seq, payload))
}

/// A parsed ledger image: (records with their byte offsets, valid length, torn tail bytes).
pub type ParsedLedger = (Vec<(u64, Record)>, u64, u64);

/// Splits a ledger image into records.
pub fn parse_ledger(path: &Path, bytes: &[u8]) -> Result<ParsedLedger, LedgerError> {
    let mut at = 0usize;
    let mut out = Vec::new();
    while at < bytes.len() {
        let index = out.len() as u64;
        match parse_frame(bytes, at) {
            Ok((seq, payload)) => {
                let invalid = |why: String| LedgerError::Invalid { path: path.into(), index, offset: at as u64, why };
                if seq != index {
                    return Err(invalid(format!("sequence number {seq}, expected {index}")));
                }
                let rec: Record = serde_json::from_slice(payload).map_err(|e| invalid(format!("undecodable record: {e}")))?;
                out.push((at as u64, rec));
                at += FRAME_HEADER + payload.len();
            }
            Err(why) => {
                // Torn tail or damage in the middle? Any valid frame after this point says
                // the damage is not at the end.
                let next = (at + 1..bytes.len().saturating_sub(FRAME_HEADER - 1))
                    .find(|&p| bytes[p..p + 4] == FRAME_MAGIC && parse_frame(bytes, p).is_ok());
                if let Some(next) = next {
                    return Err(LedgerError::CorruptMiddle { path: path.into(), index, offset: at as u64, why, next: next as u64 });
                }
                return Ok((out, at as u64, (bytes.len() - at) as u64));
            }
        }
    }
    Ok((out, at as u64, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::tests::{image, sample_records};
    use proptest::prelude::*;

    #[test]
    fn damage_in_the_middle_is_refused_with_its_offset() {
        let mut img = image(&sample_records());
        img[200] ^= 0x40;
        let e = parse_ledger(Path::new("x"), &img).unwrap_err().to_string();
        assert!(e.contains("corrupted in the middle") && e.contains("record 0"), "{e}");
    }

    proptest! {
        #[test]
        fn record_frames_round_trip(prefix in any::<u64>(), extras in proptest::collection::vec(any::<u64>(), 0..20), cycle in any::<u32>()) {
            let rec = Record::Checkpoint { cycle, durable_prefix: prefix, durable_extras: extras, failed: vec![1, 2] };
            let img = frame(0, &serde_json::to_vec(&rec).unwrap());
            let (recs, valid, torn) = parse_ledger(Path::new("x"), &img).unwrap();
            prop_assert_eq!(recs, vec![(0, rec)]);
            prop_assert_eq!((valid as usize, torn), (img.len(), 0));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_ledger(Path::new("x"), &bytes);
        }
    }
}
