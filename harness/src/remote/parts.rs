//! What both ends of the wire agree on about an answer sent in parts: the most items one part
//! carries, and the hex that hashes and health pages travel in.

use super::proto::DigestWire;
use crate::verify::Digest;

/// The most items one `verified` part carries (each a few hundred bytes of JSON at most, so a
/// part stays far below the frame bound).
pub const PART_ITEMS: usize = 1024;

impl From<&Digest> for DigestWire {
    fn from(d: &Digest) -> Self {
        DigestWire { start: d.start, end: d.end, hash: hex(&d.hash), unreadable: d.unreadable }
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes from hex; `None` unless `s` is exactly `N` bytes of it.
pub(crate) fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}
