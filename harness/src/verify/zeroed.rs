//! Sectors a deallocate or a Write Zeroes may have left: all 00h, all FFh, or (a deallocate
//! on a drive that does not report what it reads) the data last written before it.
//!
//! The rules (docs/DOMAIN.md, "Deallocate and Write Zeroes"): a Write Zeroes is a write of
//! zeros under the write's contract. A deallocate reads as the run's `DeallocRead` says:
//! zeros, FFh, or (unreported) either, or the data last written there and nothing older; in
//! flight at a cut it may apply or not per sector, so it takes no part in atomic units. Old
//! data back where a deallocate is durable is a `resurrection`.

use super::*;
use crate::ledger::DeallocRead;

/// A sector's bytes when every byte is one value a zeroing op leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fill {
    Zeros,
    Ones,
}

impl Fill {
    pub(super) fn of(bytes: &[u8]) -> Option<Fill> {
        match bytes.first() {
            Some(0) if bytes.iter().all(|&b| b == 0) => Some(Fill::Zeros),
            Some(0xff) if bytes.iter().all(|&b| b == 0xff) => Some(Fill::Ones),
            _ => None,
        }
    }
}

/// The zeroing ops newer than a sector's durable version that cover it and may read as one
/// fill: how many, the newest (its rank), and whether one is a deallocate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Explains {
    count: u32,
    newest: u64,
    dealloc: bool,
}

impl Explains {
    fn add(&mut self, w: &WritePlan) {
        self.count += 1;
        self.newest = self.newest.max(w.id + 1);
        self.dealloc |= w.zeroing() == Some(Zeroing::Deallocate);
    }
}

/// The uncertain zeroing ops covering a run of sectors, per fill they may read as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Zeroings {
    zeros: Explains,
    ones: Explains,
}

impl Zeroings {
    fn of(&self, fill: Fill) -> &Explains {
        match fill {
            Fill::Zeros => &self.zeros,
            Fill::Ones => &self.ones,
        }
    }
}

use crate::workload::Zeroing;

impl Verifier<'_> {
    /// Whether `w` (a zeroing op) may leave a sector reading `fill`.
    fn leaves(&self, w: &WritePlan, fill: Fill) -> bool {
        match (w.zeroing(), fill) {
            (None, _) => false,
            (Some(Zeroing::WriteZeroes), f) => f == Fill::Zeros,
            // A format leaves what a deallocated sector reads (never the old data, which only
            // `kept_by_deallocate` allows, and only a deallocate).
            (Some(Zeroing::Deallocate | Zeroing::Format), f) => match self.history.header.dealloc_reads {
                DeallocRead::Zeros => f == Fill::Zeros,
                DeallocRead::Ones => f == Fill::Ones,
                DeallocRead::Unreported => true,
            },
        }
    }

    /// Notes an uncertain op `w` met stepping back from the newest id to a sector's durable
    /// version.
    pub(super) fn note_uncertain(&self, z: &mut Zeroings, w: &WritePlan) {
        if self.leaves(w, Fill::Zeros) {
            z.zeros.add(w);
        }
        if self.leaves(w, Fill::Ones) {
            z.ones.add(w);
        }
    }

    /// The verdict on a sector reading `fill` when a zeroing op explains it: an uncertain one
    /// (ranked as the newest that may have left it, never counted in an atomic unit), else the
    /// durable version itself. `None`:
    /// nothing zeroing explains it, and it is judged as any content older than `d`.
    pub(super) fn classify_fill(&self, fill: Fill, d: &Durable, z: &Zeroings) -> Option<Verdict> {
        let e = z.of(fill);
        // Where nothing of the run is durable, the sector may still hold whatever it held
        // before the run: zeros too, so they prove no uncertain op landed.
        let durable_leaves = match d {
            Durable::Write(w) => self.leaves(w, fill),
            Durable::Prior => true,
            Durable::Prefill => false,
        };
        // Zeros never take part in an atomic unit's check as an uncertain op's: what else may
        // have left them (a deallocate's, older content) a read cannot tell.
        if e.count > 0 {
            return Some(Verdict::Zeroed { rank: e.newest, durable: false, exact: false });
        }
        durable_leaves.then(|| Verdict::Zeroed { rank: d.rank(), durable: true, exact: true })
    }

    /// Whether the version ranked `shown` may be, at `addr`, the data the sector held when
    /// the durable deallocate `d` came, which a drive that does not report what a deallocated
    /// sector reads may keep showing: a version older than `d` and no older than the newest
    /// durable write or Write Zeroes below it (writes between them were uncertain, and any of
    /// them may be what the sector held; deallocates below it may have kept data too, so
    /// they are stepped past).
    pub(super) fn kept_by_deallocate(&self, d: &Durable, addr: u64, shown: u64) -> bool {
        let Durable::Write(w) = d else { return false };
        if w.zeroing() != Some(Zeroing::Deallocate) || self.history.header.dealloc_reads != DeallocRead::Unreported {
            return false;
        }
        if shown > w.id {
            return false;
        }
        let mut bound = w.id;
        for _ in 0..MAX_KEPT_STEPS {
            match self.layout.latest_covering(addr, bound) {
                Some(p) if self.history.is_durable(p.id) && p.zeroing() != Some(Zeroing::Deallocate) => return shown > p.id,
                Some(p) => bound = p.id,
                None => {
                    let prefilled = self.history.prefill.is_some_and(|(s, e)| addr >= s && addr < e);
                    return shown >= u64::from(prefilled);
                }
            }
        }
        false
    }

    /// What a durable zeroing op `w` leaves at a sector, as a finding names it.
    pub(super) fn shown_zeroed(&self, w: &WritePlan) -> Option<Shown> {
        w.zeroing().map(|z| Shown::Zeroed { write_id: w.id, op: z.name().to_string() })
    }

    /// A sector under a durable zeroing op `w` holding bytes that are no version of the run:
    /// corrupt when within 1/32 of the bits of a fill `w` may leave, else older content.
    pub(super) fn classify_near_fill(&self, w: &WritePlan, bytes: &[u8], found: Shown) -> Verdict {
        let limit = (bytes.len() as u64 * 8) / 32;
        for (fill, byte) in [(Fill::Zeros, 0u8), (Fill::Ones, 0xff)] {
            if !self.leaves(w, fill) {
                continue;
            }
            let dist: u64 = bytes.iter().map(|&b| u64::from((b ^ byte).count_ones())).sum();
            if dist <= limit {
                let what = w.zeroing().map_or("", |z| z.name());
                return Verdict::Finding {
                    class: FindingClass::Corruption,
                    found,
                    detail: format!("{dist} bits differ from what durable {what} {} leaves", w.id),
                };
            }
        }
        Verdict::Old { found }
    }
}

/// Bound on stepping back through deallocates for the data one kept.
const MAX_KEPT_STEPS: u32 = 64;
