//! Which byte ranges a cycle reads back: what its writes covered (computed from the write ids,
//! coalesced), a seeded random sample of the span, or both.

use crate::rng::WyRand;
use crate::workload::Layout;

/// Size of one random verification chunk.
const SAMPLE_CHUNK_BYTES: u64 = 1 << 20;
/// Written regions collected before they are coalesced in place (bounds memory on long cycles).
pub(crate) const COALESCE_EVERY: usize = 1 << 16;

/// Sorts byte ranges `[start, end)` and merges the ones that overlap or touch.
pub fn coalesce(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|&(s, e)| e > s);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The sorted, coalesced byte ranges of writes `[from, to)`: everything those writes may
/// have changed. Memory is bounded by the number of writes (less once they overlap).
pub fn written_regions(layout: &Layout, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut coalesced_len = 0;
    for id in from..to {
        let w = layout.plan(id);
        v.push((w.offset, w.end()));
        if v.len() >= coalesced_len + COALESCE_EVERY {
            v = coalesce(v);
            coalesced_len = v.len();
        }
    }
    coalesce(v)
}

/// About `bytes` of random chunks of `[span_start, span_end)`, sector-aligned, sorted and
/// coalesced; the whole span when `bytes` reaches its length. Chunks are `SAMPLE_CHUNK_BYTES`
/// (smaller for small samples) at chunk-aligned offsets from the span start.
pub fn sample_regions(rng: &mut WyRand, span_start: u64, span_end: u64, sector: u64, bytes: u64) -> Vec<(u64, u64)> {
    let len = span_end.saturating_sub(span_start);
    if bytes == 0 || len == 0 {
        return Vec::new();
    }
    if bytes >= len {
        return vec![(span_start, span_end)];
    }
    let sector = sector.max(1);
    let chunk = SAMPLE_CHUNK_BYTES.min(bytes.div_ceil(sector) * sector).max(sector);
    let slots = len.div_ceil(chunk);
    let count = bytes.div_ceil(chunk);
    let v = (0..count)
        .map(|_| {
            let s = span_start + rng.below(slots) * chunk;
            (s, (s + chunk).min(span_end))
        })
        .collect();
    coalesce(v)
}

/// Merges two sorted, coalesced region lists.
pub fn union(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    coalesce(a.iter().chain(b).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};

    fn layout() -> Layout {
        let spec = WorkloadSpec {
            seed: 9,
            pattern: Pattern::Random {},
            span_start: 4096,
            span_end: 4 << 20,
            min_write_bytes: 512,
            max_write_bytes: 65536,
            mean_write_bytes: 8192,
            align_bytes: 512,
            queue_depth: 32,
            flush: FlushPolicy { every_writes: None, every_ms: None, fua_percent: 0 },
            ops: Default::default(),
        };
        Layout::new(spec, 512).unwrap()
    }

    fn sorted_disjoint(v: &[(u64, u64)]) -> bool {
        v.iter().all(|&(s, e)| s < e) && v.windows(2).all(|w| w[0].1 < w[1].0)
    }

    #[test]
    fn runner_coalesce_merges_overlapping_and_touching_ranges() {
        let v = vec![(50, 60), (0, 10), (10, 20), (5, 8), (30, 40), (35, 45), (70, 70), (60, 61)];
        assert_eq!(coalesce(v), vec![(0, 20), (30, 45), (50, 61)]);
        assert_eq!(coalesce(Vec::new()), Vec::new());
        assert_eq!(union(&[(0, 4)], &[(4, 8), (16, 20)]), vec![(0, 8), (16, 20)]);
    }

    #[test]
    fn runner_written_regions_cover_exactly_the_writes() {
        let l = layout();
        for (from, to) in [(1u64, 1u64), (1, 2), (100, 2000), (5000, 5000 + 3 * COALESCE_EVERY as u64)] {
            let r = written_regions(&l, from, to);
            assert!(sorted_disjoint(&r), "{r:?}");
            // Every sector of every write is covered, and every covered sector was written.
            let mut sectors = std::collections::BTreeSet::new();
            for id in from..to {
                let w = l.plan(id);
                sectors.extend((w.offset / 512)..(w.end() / 512));
            }
            let covered: std::collections::BTreeSet<u64> = r.iter().flat_map(|&(s, e)| (s / 512)..(e / 512)).collect();
            assert_eq!(covered, sectors, "writes [{from}, {to})");
            assert!(r.len() as u64 <= to - from);
        }
    }

    #[test]
    fn runner_sample_is_seeded_aligned_and_inside_the_span() {
        let (start, end) = (4096u64, 64u64 << 20);
        let a = sample_regions(&mut WyRand::new(3), start, end, 4096, 8 << 20);
        assert_eq!(a, sample_regions(&mut WyRand::new(3), start, end, 4096, 8 << 20), "same seed, same chunks");
        assert_ne!(a, sample_regions(&mut WyRand::new(4), start, end, 4096, 8 << 20));
        assert!(sorted_disjoint(&a));
        assert!(a.iter().all(|&(s, e)| s >= start && e <= end && (s - start) % 4096 == 0 && (e == end || (e - start) % 4096 == 0)));
        let total: u64 = a.iter().map(|&(s, e)| e - s).sum();
        assert!(total > 0 && total <= 8 << 20, "{total}");
        assert_eq!(sample_regions(&mut WyRand::new(3), start, end, 512, end), vec![(start, end)]);
        assert_eq!(sample_regions(&mut WyRand::new(3), start, end, 512, 0), vec![]);
        let small = sample_regions(&mut WyRand::new(3), start, end, 4096, 512);
        assert_eq!(small.len(), 1);
        assert_eq!(small[0].1 - small[0].0, 4096, "a sample smaller than a sector reads one sector");
    }
}
