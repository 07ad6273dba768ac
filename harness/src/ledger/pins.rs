//! The writes verifies saw on the drive (from `seen` records), as an index by address: every
//! pinned byte range, disjoint; where two writes were seen on one sector, the newer holds it.
//! Kept up to date record by record, so a verifier reads it without rebuilding it. Its size
//! is bounded by the pinned ranges (each new pin overwrites what it covers).

use super::{Applied, SeenWrite};
use crate::workload::Layout;
use std::collections::BTreeMap;

/// One write a verify saw applied: `write.applied` is `fully` or `partly`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The cycle whose verify saw it (the write's own cycle).
    pub cycle: u32,
    pub write: SeenWrite,
}

/// A write a verify saw, held over bytes up to `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinAt {
    pub id: u64,
    /// The cycle whose verify saw it.
    pub cycle: u32,
    pub end: u64,
}

/// Every pinned byte range, by start.
#[derive(Clone, Debug, Default)]
pub struct PinIndex {
    map: BTreeMap<u64, PinAt>,
}

impl PinIndex {
    /// Holds the sectors `pin` was seen on to it (`layout` maps its id to its extent).
    pub(super) fn add(&mut self, layout: &Layout, sector: u64, pin: &Pin) {
        let w = layout.plan(pin.write.id);
        let count = (w.len / sector) as u32;
        let runs: Vec<[u32; 2]> = match pin.write.applied {
            Applied::Fully => vec![[0, count]],
            Applied::Partly => pin.write.sectors.clone(),
            Applied::NotAtAll => vec![],
        };
        for [a, b] in runs {
            let (a, b) = (a.min(count), b.min(count));
            if a < b {
                self.insert(w.offset + a as u64 * sector, w.offset + b as u64 * sector, pin.write.id, pin.cycle);
            }
        }
    }

    /// Holds `[start, end)` to write `id` (seen in `cycle`), except where a newer write holds
    /// it already; older ranges it overlaps are cut.
    fn insert(&mut self, start: u64, end: u64, id: u64, cycle: u32) {
        let mut over: Vec<(u64, PinAt)> = Vec::new();
        if let Some((&s, &p)) = self.map.range(..start).next_back() {
            if p.end > start {
                over.push((s, p));
            }
        }
        over.extend(self.map.range(start..end).map(|(&s, &p)| (s, p)));
        // The gaps between newer ranges are where this pin goes.
        let mut gaps = vec![(start, end)];
        for (s, p) in over {
            if p.id > id {
                gaps = gaps.into_iter().flat_map(|(a, b)| [(a, b.min(s)), (a.max(p.end), b)]).filter(|(a, b)| a < b).collect();
                continue;
            }
            self.map.remove(&s);
            if s < start {
                self.map.insert(s, PinAt { end: start, ..p });
            }
            if p.end > end {
                self.map.insert(end, p);
            }
        }
        for (a, b) in gaps {
            self.map.insert(a, PinAt { id, cycle, end: b });
        }
    }

    /// The pin covering `addr`, if any, and the end of the run of bytes from `addr` that share
    /// it (or share having none).
    pub fn at(&self, addr: u64) -> (Option<PinAt>, u64) {
        if let Some((_, &p)) = self.map.range(..=addr).next_back() {
            if p.end > addr {
                return (Some(p), p.end);
            }
        }
        let next = self.map.range(addr..).next().map_or(u64::MAX, |(&s, _)| s);
        (None, next)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Pinned ranges held.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_write_holds_a_sector_whatever_order_pins_come_in() {
        let mut i = PinIndex::default();
        i.insert(1000, 2000, 5, 1);
        i.insert(1500, 1700, 9, 2);
        i.insert(0, 3000, 7, 3);
        let got: Vec<(u64, u64, u64)> = i.map.iter().map(|(&s, p)| (s, p.end, p.id)).collect();
        assert_eq!(got, vec![(0, 1500, 7), (1500, 1700, 9), (1700, 3000, 7)]);
        assert_eq!(i.at(1600), (Some(PinAt { id: 9, cycle: 2, end: 1700 }), 1700));
        assert_eq!(i.at(3000), (None, u64::MAX));
        let mut j = PinIndex::default();
        j.insert(100, 200, 3, 1);
        assert_eq!(j.at(0), (None, 100), "the run without a pin ends where the next pin starts");
    }
}
