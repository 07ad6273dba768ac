//! What the drive showed: the sectors where a verify saw an uncertain write of the last cycle
//! (collected during the scan as [`SeenRun`]s), the `seen` record built from them
//! ([`seen_record`]), and the verdict on a sector held to a write seen before
//! (`crate::ledger::PinIndex` keeps them). The rules are in the module doc of [`crate::verify`].

use super::{Decoded, Durable, Shown, Verdict};
use crate::ledger::{Applied, History, PinAt, Record, SeenWrite};
use crate::workload::Layout;

pub use crate::ledger::MAX_SEEN_WRITES;

/// Sectors `[start, end)` (bytes) showing write `id`, which the contract left uncertain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeenRun {
    pub id: u64,
    pub start: u64,
    pub end: u64,
}

/// Appends sector `[addr, addr + sector)` showing `id`, merging with the previous run.
pub(super) fn push_seen(out: &mut Vec<SeenRun>, id: u64, addr: u64, sector: u64) {
    if let Some(last) = out.last_mut() {
        if last.id == id && last.end == addr {
            last.end += sector;
            return;
        }
    }
    out.push(SeenRun { id, start: addr, end: addr + sector });
}

/// The first id a scan records [`SeenRun`]s for: the last cycle's first, once it has ended
/// (`u64::MAX`, none, while it is open).
pub(super) fn track_from(history: &History) -> u64 {
    match history.cycles.last() {
        Some(c) if c.end.is_some() => c.first_id,
        _ => u64::MAX,
    }
}

/// The `seen` record for the last cycle from a verify that read `regions` (sorted, disjoint
/// byte ranges) and saw `runs`: for each write of the cycle the contract left uncertain
/// (the newest [`MAX_SEEN_WRITES`]), whether its sectors read showed it fully, partly or not
/// at all. Writes none of whose sectors were read, or whose sectors all show newer writes, are
/// left out; `None` when nothing is left (or the last cycle is still open).
pub fn seen_record(history: &History, layout: &Layout, regions: &[(u64, u64)], runs: &[SeenRun]) -> Option<Record> {
    let c = history.cycles.last().filter(|c| c.end.is_some())?;
    let sector = history.header.sector_bytes;
    let mut runs = runs.to_vec();
    runs.sort_unstable_by_key(|r| r.start);
    // The newest MAX_SEEN_WRITES ids of the cycle. A cycle the harness died in ends at its
    // last reservation, which may lie far beyond the writes it submitted (reservations grow
    // geometrically): when the cycle holds more ids than the window, the window ends at the
    // newest write the verify saw, not among ids that may never have been written.
    let mut end = c.submitted_end;
    if end - c.first_id > MAX_SEEN_WRITES {
        if let Some(newest) = runs.iter().map(|r| r.id).filter(|&id| id >= c.first_id && id < end).max() {
            end = newest + 1;
        }
    }
    let first = c.first_id.max(end.saturating_sub(MAX_SEEN_WRITES));
    let mut writes = Vec::new();
    for id in (first..end).filter(|&id| !history.is_durable(id)) {
        let w = history.plan(layout, id);
        if w.zeroing().is_some() {
            // A deallocate or Write Zeroes leaves nothing that names it: never pinned.
            continue;
        }
        let n = (w.len / sector) as usize;
        // Per sector of the write: 0 not read, 1 older, 2 shows it, 3 shows a newer write.
        let mut st = vec![0u8; n];
        let idx = |a: u64| ((a.max(w.offset) - w.offset) / sector) as usize;
        let from = regions.partition_point(|r| r.1 <= w.offset);
        for &(a, b) in regions[from..].iter().take_while(|r| r.0 < w.end()) {
            st[idx(a)..idx(b.min(w.end()))].fill(1);
        }
        let from = runs.partition_point(|r| r.end <= w.offset);
        for r in runs[from..].iter().take_while(|r| r.start < w.end()) {
            let mark = match r.id.cmp(&id) {
                std::cmp::Ordering::Equal => 2,
                std::cmp::Ordering::Greater => 3,
                std::cmp::Ordering::Less => continue,
            };
            st[idx(r.start)..idx(r.end.min(w.end()))].fill(mark);
        }
        let (shows, older) = (st.contains(&2), st.contains(&1));
        let applied = match (shows, older) {
            (false, false) => continue,
            (false, true) => Applied::NotAtAll,
            (true, _) if st.iter().all(|&s| s == 2) => Applied::Fully,
            (true, _) => Applied::Partly,
        };
        let mut sectors: Vec<[u32; 2]> = Vec::new();
        if applied == Applied::Partly {
            for (i, &s) in st.iter().enumerate() {
                if s != 2 {
                    continue;
                }
                match sectors.last_mut() {
                    Some(r) if r[1] == i as u32 => r[1] += 1,
                    _ => sectors.push([i as u32, i as u32 + 1]),
                }
            }
        }
        writes.push(SeenWrite { id, applied, sectors });
    }
    (!writes.is_empty()).then_some(Record::Seen { cycle: c.cycle, writes: writes.into() })
}

impl super::Verifier<'_> {
    /// A sector an earlier verify saw write `pin` on, where the contract alone asks for less
    /// (its durable version is older than the pin): anything older than the pinned write is a
    /// `stale_version`. Where the durable version is the pin or newer, the contract's own
    /// verdict stands.
    pub(super) fn held(&self, pin: PinAt, d: &Durable, addr: u64, bytes: &[u8], verdict: Verdict) -> Verdict {
        let pinned = pin.id + 1;
        if d.rank() >= pinned {
            return verdict;
        }
        let found = match verdict {
            Verdict::Ok { rank, .. } | Verdict::Zeroed { rank, .. } if rank < pinned => self.shown_bytes(bytes),
            Verdict::Old { found } => found,
            v => return v,
        };
        let shown = match &found {
            Shown::Write { write_id, cycle, .. } => format!("write {write_id} (cycle {cycle}, older)"),
            Shown::Prefill {} => "the prefill version (older)".into(),
            Shown::Zeros {} => "zeros (older: unmapped)".into(),
            Shown::ForeignRun { run_id, .. } => format!("a sector of run {run_id:016x} (older: from before this run)"),
            Shown::Prior {} => "content from before the run (older)".into(),
            other => format!("{other:?}"),
        };
        let detail = format!(
            "write {} was seen applied at verify of cycle {}; cycle {} shows {shown} at byte {addr} (LBA {})",
            pin.id,
            pin.cycle,
            self.cycle,
            addr / self.sector
        );
        let expected = self.shown_of(&Durable::Write(self.layout.plan(pin.id)), addr);
        Verdict::Stale { expected, found, detail }
    }

    /// What a sector's bytes are, as a finding names them.
    fn shown_bytes(&self, bytes: &[u8]) -> Shown {
        match self.format.decode(bytes) {
            Decoded::Valid(id) => super::taxonomy::shown_valid(&id),
            Decoded::Zeros => Shown::Zeros {},
            Decoded::ForeignRun(f) => Shown::ForeignRun { run_id: f.run_id, write_id: f.write_id },
            Decoded::Damaged { id, .. } => Shown::Damaged { write_id: id.write_id, cycle: id.cycle, addr: id.addr, run_id: id.run_id },
            _ => Shown::Unrecognized {},
        }
    }
}

/// The `seen` record a verify outside a run (`faultline verify`) appends, when there is one
/// to append: under the PLP contract for the last cycle once it ended; under the flush
/// contract only when the runner already recorded one for that cycle (it did so because the
/// cycle ended in a confirmed power cut; after a link reset a seen write may still sit in the
/// volatile cache). `None` too when it would hold no sector that the ledger does not hold
/// already, so that verifying again does not grow the ledger.
pub fn offline_seen_record(history: &History, layout: &Layout, regions: &[(u64, u64)], runs: &[SeenRun]) -> Option<Record> {
    let last = history.cycles.last()?.cycle;
    if history.header.contract == crate::ledger::Contract::Flush && history.seen_cycles.last() != Some(&last) {
        return None;
    }
    let rec = seen_record(history, layout, regions, runs)?;
    let Record::Seen { writes, .. } = &rec else { return None };
    let held = |w: &SeenWrite| history.pins.iter().any(|p| p.cycle == last && p.write == *w);
    writes.iter().any(|w| w.applied != Applied::NotAtAll && !held(w)).then_some(rec)
}
