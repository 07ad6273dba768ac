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

/// Why the bytes at an offset are not a frame that checks out.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("only {left} bytes left, a frame header needs {FRAME_HEADER}")]
    ShortHeader { left: usize },
    #[error("bad frame magic")]
    Magic,
    #[error("payload length {len} is implausible")]
    ImplausibleLength { len: usize },
    #[error("payload of {len} bytes runs past the end of the file")]
    PastEnd { len: usize },
    #[error("checksum mismatch")]
    Checksum,
    /// A frame that checked out as streamed and not when read again.
    #[error("frame changed while read")]
    Changed,
}

/// Parses the frame at `at`; `Err(why)` when it does not check out.
fn parse_frame(bytes: &[u8], at: usize) -> Result<(u64, &[u8]), FrameError> {
    let rest = &bytes[at..];
    if rest.len() < FRAME_HEADER {
        return Err(FrameError::ShortHeader { left: rest.len() });
    }
    if rest[..4] != FRAME_MAGIC {
        return Err(FrameError::Magic);
    }
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4")) as usize;
    if len > MAX_PAYLOAD {
        return Err(FrameError::ImplausibleLength { len });
    }
    if rest.len() < FRAME_HEADER + len {
        return Err(FrameError::PastEnd { len });
    }
    let seq = u64::from_le_bytes(rest[8..16].try_into().expect("8"));
    let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
    if rest[16..24] != frame_check(seq, payload) {
        return Err(FrameError::Checksum);
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
                    let why = why.to_string();
                    return Err(LedgerError::CorruptMiddle { path: path.into(), index, offset: at as u64, why, next: next as u64 });
                }
                return Ok((out, at as u64, (bytes.len() - at) as u64));
            }
        }
    }
    Ok((out, at as u64, 0))
}

/// Streams the records of the ledger file at `path` through `f` with their byte offsets, in
/// memory bounded by the largest frame: the same frames, errors, torn tail and refusal of
/// damage in the middle as [`parse_ledger`] on the whole image (only after a frame that does
/// not check out is the rest of the file read at once, to tell the two apart). Returns (valid
/// length, torn tail bytes).
pub fn stream_ledger(path: &Path, f: &mut dyn FnMut(u64, u64, Record) -> Result<(), LedgerError>) -> Result<(u64, u64), LedgerError> {
    use std::io::{Read, Seek, SeekFrom};
    let io = |source| LedgerError::Io { path: path.into(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut r = std::io::BufReader::with_capacity(1 << 16, &mut file);
    let (mut at, mut index) = (0u64, 0u64);
    let mut fr: Vec<u8> = Vec::new();
    while at < len {
        // One frame into `fr`, checked by the same parser as an image; anything short of a
        // whole, plausible frame falls through to the slow path below.
        let whole = (|| -> std::io::Result<bool> {
            if len - at < FRAME_HEADER as u64 {
                return Ok(false);
            }
            fr.resize(FRAME_HEADER, 0);
            r.read_exact(&mut fr)?;
            let plen = u32::from_le_bytes(fr[4..8].try_into().expect("4")) as usize;
            if fr[..4] != FRAME_MAGIC || plen > MAX_PAYLOAD || len - at < (FRAME_HEADER + plen) as u64 {
                return Ok(false);
            }
            fr.resize(FRAME_HEADER + plen, 0);
            r.read_exact(&mut fr[FRAME_HEADER..])?;
            Ok(true)
        })()
        .map_err(io)?;
        match whole.then(|| parse_frame(&fr, 0)) {
            Some(Ok((seq, payload))) => {
                let invalid = |why: String| LedgerError::Invalid { path: path.into(), index, offset: at, why };
                if seq != index {
                    return Err(invalid(format!("sequence number {seq}, expected {index}")));
                }
                let rec: Record = serde_json::from_slice(payload).map_err(|e| invalid(format!("undecodable record: {e}")))?;
                let n = (FRAME_HEADER + payload.len()) as u64;
                f(index, at, rec)?;
                at += n;
                index += 1;
            }
            _ => {
                drop(r);
                let mut rest = Vec::new();
                file.seek(SeekFrom::Start(at)).map_err(io)?;
                file.read_to_end(&mut rest).map_err(io)?;
                let why = parse_frame(&rest, 0).err().unwrap_or(FrameError::Changed).to_string();
                let next = (1..rest.len().saturating_sub(FRAME_HEADER - 1))
                    .find(|&p| rest[p..p + 4] == FRAME_MAGIC && parse_frame(&rest, p).is_ok());
                if let Some(next) = next {
                    return Err(LedgerError::CorruptMiddle { path: path.into(), index, offset: at, why, next: at + next as u64 });
                }
                return Ok((at, len - at));
            }
        }
    }
    Ok((at, 0))
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

        /// Streaming a file gives what parsing its image gives: records, lengths, errors.
        #[test]
        fn streaming_a_file_equals_parsing_its_image(cut in 0usize..2000, flip in proptest::option::of((0usize..2000, 0u8..8))) {
            let mut img = image(&sample_records());
            if let Some((at, bit)) = flip {
                let at = at % img.len();
                img[at] ^= 1 << bit;
            }
            img.truncate(cut.min(img.len()));
            let dir = crate::ledger::tests::tempdir();
            let path = dir.join("ledger.fl");
            std::fs::write(&path, &img).unwrap();
            let mut got = Vec::new();
            let streamed = stream_ledger(&path, &mut |_, at, r| {
                got.push((at, r));
                Ok(())
            });
            match parse_ledger(&path, &img) {
                Ok((recs, valid, torn)) => {
                    let (v, t) = streamed.unwrap();
                    prop_assert_eq!((got, v, t), (recs, valid, torn));
                }
                Err(e) => prop_assert_eq!(streamed.unwrap_err().to_string(), e.to_string()),
            }
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_ledger(Path::new("x"), &bytes);
        }
    }
}
