//! Digests of what a verify read: a BLAKE3 hash per run of consecutive read chunks, in read
//! order. Two ports' verifies of the same regions chunk them alike, so their digests pair up
//! entry by entry; only the ranges whose digests differ need reading again through both ports
//! and comparing sector by sector (the port comparison of a dual-port run). A remote port can
//! send its digests instead of its bytes.
//!
//! Bounded: once the regions hold more than [`MAX_DIGESTS`] read chunks, consecutive chunks
//! share one digest (its range grows, the count does not), so a full-span verify of any
//! capacity keeps at most about [`MAX_DIGESTS`] entries.

use super::READ_CHUNK;

/// The most digests one verify keeps (48 bytes each), whatever the bytes it reads.
pub const MAX_DIGESTS: u64 = 16_384;

/// One digest: the range `[start, end)` it covers and the hash of its bytes. `unreadable`:
/// some sector of it could not be read, so its bytes say nothing and it pairs with nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    pub start: u64,
    pub end: u64,
    pub hash: [u8; 32],
    pub unreadable: bool,
}

/// The digests of one verify, in read order.
#[derive(Clone, Debug)]
pub struct Digests {
    /// The most bytes one digest covers (a multiple of the read chunk).
    granule: u64,
    open: Option<(u64, u64, blake3::Hasher, bool)>,
    entries: Vec<Digest>,
}

impl Digests {
    /// Empty digests for a verify of `regions`, their granule chosen so that at most about
    /// [`MAX_DIGESTS`] are kept.
    pub fn for_regions(regions: &[(u64, u64)]) -> Self {
        Self::bounded(regions, MAX_DIGESTS)
    }

    fn bounded(regions: &[(u64, u64)], max: u64) -> Self {
        let total: u64 = regions.iter().map(|&(a, b)| b.saturating_sub(a)).sum();
        let chunks = total.div_ceil(READ_CHUNK);
        let granule = chunks.div_ceil(max).max(1) * READ_CHUNK;
        Digests { granule, open: None, entries: Vec::new() }
    }

    /// Adds one chunk read at `pos`; `unreadable` when a sector of it failed to read.
    pub(super) fn add(&mut self, pos: u64, data: &[u8], unreadable: bool) {
        let end = pos + data.len() as u64;
        match &mut self.open {
            Some((start, e, h, bad)) if *e == pos && end - *start <= self.granule => {
                h.update(data);
                *e = end;
                *bad |= unreadable;
            }
            _ => {
                self.close();
                let mut h = blake3::Hasher::new();
                h.update(data);
                self.open = Some((pos, end, h, unreadable));
            }
        }
    }

    fn close(&mut self) {
        if let Some((start, end, h, unreadable)) = self.open.take() {
            self.entries.push(Digest { start, end, hash: *h.finalize().as_bytes(), unreadable });
        }
    }

    /// The digests, the last one closed.
    pub fn finish(mut self) -> Vec<Digest> {
        self.close();
        self.entries
    }
}

/// The ranges where two verifies' digests differ (or either could not read), merged where
/// they touch; `None` when the two did not read the same ranges (one stopped early), so
/// nothing pairs and everything must be compared.
pub fn differing(a: &[Digest], b: &[Digest]) -> Option<Vec<(u64, u64)>> {
    if a.len() != b.len() {
        return None;
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (x, y) in a.iter().zip(b) {
        if (x.start, x.end) != (y.start, y.end) {
            return None;
        }
        if x.hash == y.hash && !x.unreadable && !y.unreadable {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == x.start => last.1 = x.end,
            _ => out.push((x.start, x.end)),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(regions: &[(u64, u64)], data: impl Fn(u64) -> u8) -> Vec<Digest> {
        let mut d = Digests::for_regions(regions);
        for &(a, b) in regions {
            let mut at = a;
            while at < b {
                let n = (b - at).min(READ_CHUNK);
                let bytes: Vec<u8> = (at..at + n).step_by(512).flat_map(|s| std::iter::repeat_n(data(s), 512)).collect();
                d.add(at, &bytes, false);
                at += n;
            }
        }
        d.finish()
    }

    #[test]
    fn only_the_ranges_that_differ_are_named() {
        let regions = [(0, 3 * READ_CHUNK), (5 * READ_CHUNK, 5 * READ_CHUNK + 8192)];
        let a = digest(&regions, |_| 1);
        assert_eq!(a.len(), 4, "one digest per read chunk while the count is small");
        assert_eq!(differing(&a, &a), Some(vec![]));
        let b = digest(&regions, |s| if s == READ_CHUNK + 4096 || s == 5 * READ_CHUNK { 2 } else { 1 });
        assert_eq!(differing(&a, &b), Some(vec![(READ_CHUNK, 2 * READ_CHUNK), (5 * READ_CHUNK, 5 * READ_CHUNK + 8192)]));
        let c = digest(&regions, |s| if s < 2 * READ_CHUNK { 2 } else { 1 });
        assert_eq!(differing(&a, &c), Some(vec![(0, 2 * READ_CHUNK)]), "ranges that touch are merged");
        assert_eq!(differing(&a, &a[..3]), None, "a verify that stopped early pairs with nothing");
    }

    #[test]
    fn the_count_is_bounded_whatever_the_bytes() {
        // As for_regions with MAX_DIGESTS, on a bound small enough to hash quickly.
        const MAX: u64 = 8;
        let span = (MAX * 3 + 7) * READ_CHUNK;
        let mut d = Digests::bounded(&[(0, span)], MAX);
        let chunk = vec![0u8; READ_CHUNK as usize];
        for k in 0..span / READ_CHUNK {
            d.add(k * READ_CHUNK, &chunk, false);
        }
        let v = d.finish();
        assert!(v.len() as u64 <= MAX, "{} digests", v.len());
        assert_eq!((v[0].start, v.last().map(|x| x.end)), (0, Some(span)));
        assert!(v.windows(2).all(|w| w[0].end == w[1].start));
    }

    #[test]
    fn an_unreadable_chunk_always_differs() {
        let mut a = Digests::for_regions(&[(0, 4096)]);
        a.add(0, &[0; 4096], true);
        let a = a.finish();
        assert_eq!(differing(&a, &a), Some(vec![(0, 4096)]));
    }
}
