//! The verifier: reads a region of the target and classifies every sector against the
//! envelope the ledger and the contract allow (docs/DOMAIN.md section 2).
//!
//! For each sector, D is the newest durable write covering it (computed from the workload
//! mapping and the ledger's watermarks, stepping back past writes that are not durable), or
//! the prefill version, or nothing. Acceptable: D, or any submitted write newer than D that
//! covers the sector (in flight at a cut, failed, completed but unflushed). Everything else
//! is a finding, returned as data:
//!
//! - `misdirected_write`: a valid sector of this run whose own address is another;
//! - `unexpected_version`: a valid sector claiming a write that was never submitted, or whose
//!   identity disagrees with the workload (wrong extent, cycle, position or port). A valid
//!   sector whose write id is above every reservation the ledger holds is not a finding but
//!   `VerifyError::LedgerBehind`: ids are reserved durably before they are submitted and the
//!   keyed checksum proves faultline wrote the sector, so the ledger lost records (a restored
//!   run directory, a filesystem that lied about fsync); the drive cannot invent it;
//! - `corruption`: our sector with a failing checksum, or bytes within a few bits of D, or
//!   bytes that are no version at all (not ours, not another run's, not zeros) where every
//!   version the sector held before D is known to be this run's (the prefill or an earlier
//!   write of the run covered it): nothing older can explain them;
//! - `lost_write` / `torn_write`: sectors older than D. Grouped by D: when none of D's
//!   expected sectors show it, the write is lost; when some do, it is torn. Inside an atomic
//!   unit, a write that is not durable must be all-or-nothing too: a unit where some of its
//!   sectors show it and others show older content is a torn write;
//! - `unreadable`: reads fail (media error) or time out;
//! - `stale_version`: older than a write an earlier verify saw on the sector (below).
//!
//! Never-written space (no durable write, no prefill) accepts anything except a sector of
//! this run that no acceptable write explains.
//!
//! What a sector under a durable D may show instead, and its class:
//! - zeros (an unmapped read): older content, so D is lost (or torn);
//! - another run's sector: what the drive held before this run, brought back: older content;
//! - this run's sector written for another address: `misdirected_write`, whatever D is;
//! - bytes that are no version at all: `corruption` when the sector's whole history in this
//!   run is known (above); when D is the first version of this run there and the span was not
//!   prefilled, the bytes may be what the sector held before the run, so D is lost (prefill
//!   the span to tell the two apart).
//!
//! # What the drive showed (`seen` records, [`seen_record`])
//!
//! The contract leaves some writes of a cut cycle uncertain: in flight, failed, or completed
//! and unflushed. The verify after the cut resolves them: for each, which of its sectors show
//! it (fully, partly, or not at all applied), appended to the ledger as one `seen` record per
//! cycle, O(uncertain writes) in size. From then on each sector seen holding write W is held
//! to it: W, or any newer version, is acceptable there; anything older is `stale_version`,
//! naming the cycle whose verify saw W. This raises the sector's floor only where the pin is
//! newer than its durable version D; where D is W or newer, the contract's verdict (lost,
//! torn) stands. A sector that showed an older version while W was uncertain is not held:
//! W may still appear there later. An honest drive never does that (after power returns and
//! a read shows the old version, an in-flight write that did not land never lands), but it is
//! a late landing, not a regression, and this class is about the drive going back.
//!
//! When a pin is safe to take: a sector seen holding W after a power cut is on the media (the
//! cut emptied the volatile cache before the read), so an honest drive keeps it. The runner
//! records `seen` after every verify under the PLP contract (the drive claims its whole
//! state survives a cut) and, under the flush contract, only after a confirmed power cut:
//! after a link reset, or a cut that may not have happened, W may still sit in the volatile
//! cache, and losing it at a later cut before a flush is honest. `faultline verify` records
//! the last cycle's under PLP, and under flush only for a cycle the runner already resolved
//! (it adds sectors a later read saw). Across cycles pins accumulate; where two writes were
//! seen on one sector the newer holds it, and a durable write at least as new makes it moot.

mod classify;
mod digest;
#[cfg(test)]
mod readahead_tests;
mod seen;
#[cfg(test)]
mod seen_tests;
mod tally;
mod taxonomy;
#[cfg(test)]
mod tests;
mod zeroed;
#[cfg(test)]
mod zeroed_tests;

use crate::ledger::PinAt;
pub use digest::{differing, Digest, Digests, MAX_DIGESTS};
use seen::push_seen;
pub use seen::{offline_seen_record, seen_record, SeenRun, MAX_SEEN_WRITES};
use tally::unreadable;
use taxonomy::push;
pub use taxonomy::{prefill_id, Finding, FindingClass, Shown, VerifyError, VerifyReport};

use crate::format::{bit_distance, Decoded, Format, SectorId, FLAG_PREFILL, PREFILL_WRITE_ID};
use crate::ledger::History;
use crate::workload::{Layout, WritePlan};
use faultline_drivers::{AlignedBuf, BlockTarget, IoFailure};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the contract requires of one sector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Durable {
    Prior,
    Prefill,
    Write(WritePlan),
}

impl Durable {
    fn rank(&self) -> u64 {
        match self {
            Durable::Prior => 0,
            Durable::Prefill => 1,
            Durable::Write(w) => w.id + 1,
        }
    }
}

enum Verdict {
    /// Acceptable; the version shown, ranked like `Durable::rank` (0 prior, 1 prefill, id+1).
    Ok {
        rank: u64,
        durable: bool,
    },
    /// Acceptable: all 00h or FFh as a zeroing op ranked `rank` leaves it (`exact`: the one
    /// explanation, and not a deallocate, so that the sector counts in its atomic unit).
    Zeroed {
        rank: u64,
        durable: bool,
        exact: bool,
    },
    Old {
        found: Shown,
    },
    Finding {
        class: FindingClass,
        found: Shown,
        detail: String,
    },
    /// A valid sector of this run whose write id is above every reservation in the ledger.
    LedgerBehind {
        write_id: u64,
        cycle: u32,
    },
    /// Older than the write an earlier verify saw here (`expected`).
    Stale {
        expected: Shown,
        found: Shown,
        detail: String,
    },
}

struct Group {
    plan: WritePlan,
    shows: u64,
    old: Vec<(u64, Shown)>,
}

/// Verifies sectors against a run's history.
pub struct Verifier<'a> {
    layout: &'a Layout,
    history: &'a History,
    format: &'a Format,
    sector: u64,
    atomic: u64,
    cycle: u32,
    /// The sectors earlier verifies saw uncertain writes on.
    pins: &'a crate::ledger::PinIndex,
    /// Uncertain writes from this id on are recorded as [`SeenRun`]s (the last cycle's).
    track_from: u64,
    /// The read buffer and scan state of the last one-read verification, kept so that
    /// random-read verification (one call per block) allocates nothing per call.
    reuse: Mutex<Option<(AlignedBuf, Scan)>>,
}

/// Bound on stepping back through non-durable writes for one sector.
const MAX_STEPS_BACK: u32 = 1 << 20;
/// The most one read asks for. 4 MiB: on a loop device a full-span verify ran 1.17-1.26x fio
/// crc32c's 1 MiB reads with 4 MiB chunks, 1.03-1.06x with 1 MiB (tmpfs: no difference);
/// the kernel splits a read the device cannot take whole.
const READ_CHUNK: u64 = 4 << 20;
/// Chunks read ahead of the one being checked: one, so the device sees one read at a time
/// (measured on tmpfs, a second in flight made the scan slower: the kernel's copy of two
/// reads competed with the check for two cores).
const READ_AHEAD: usize = 1;

impl<'a> Verifier<'a> {
    pub fn new(layout: &'a Layout, history: &'a History, format: &'a Format) -> Self {
        let sector = format.sector_bytes() as u64;
        let atomic = history.header.atomic_bytes.max(sector);
        let pins = &history.pin_index;
        let track_from = seen::track_from(history);
        Verifier { layout, history, format, sector, atomic, cycle: history.last_cycle(), pins, track_from, reuse: Mutex::new(None) }
    }

    /// D for `addr`, and the end of the run of addresses from `addr` that share it.
    /// Verifies `[start, end)` (sector-aligned, inside the span) of `target`.
    /// The history this verifier holds the drive to.
    pub fn history(&self) -> &'a History {
        self.history
    }

    pub fn verify(&self, target: &mut dyn BlockTarget, start: u64, end: u64) -> Result<VerifyReport, VerifyError> {
        self.verify_with_progress(target, start, end, &mut |_, _| {})
    }

    /// As [`Verifier::verify`], calling `progress(bytes done, findings so far)` after every
    /// read chunk ([`READ_CHUNK`]).
    pub fn verify_with_progress(
        &self,
        target: &mut dyn BlockTarget,
        start: u64,
        end: u64,
        progress: &mut dyn FnMut(u64, usize),
    ) -> Result<VerifyReport, VerifyError> {
        self.check_region(start, end)?;
        if end - start <= READ_CHUNK {
            // One read: nothing to overlap, so no second thread (random-read verification
            // calls this per block, so the buffer and scan state of the last call are reused:
            // a scan starts from the same state as a new one, see `Scan::reset`).
            let len = (end - start) as usize;
            let kept = self.reuse.lock().unwrap_or_else(|p| p.into_inner()).take();
            let (buf, mut scan) = match kept {
                Some((mut buf, mut scan)) if buf.capacity() >= len => {
                    buf.resize(len);
                    scan.reset(end);
                    (buf, scan)
                }
                _ => (target.buffers(1, len).pop().unwrap_or_else(|| AlignedBuf::zeroed(len)), Scan::new(end)),
            };
            let chunk = self.read_chunk(target, start, buf)?;
            let checked = self.check_chunk(&mut scan, &chunk);
            self.close_groups(&mut scan.groups, u64::MAX, &mut scan.rep.findings);
            let mut rep = std::mem::take(&mut scan.rep);
            *self.reuse.lock().unwrap_or_else(|p| p.into_inner()) = Some((chunk.buf, scan));
            checked?;
            rep.findings.sort_by_key(|f| (f.offset, f.class));
            progress(end - start, rep.findings.len());
            return Ok(rep);
        }
        self.scan_regions(target, &[(start, end)], progress, None)
    }

    /// Verifies each of `regions` (sector-aligned, inside the span, in any order; each as
    /// [`Verifier::verify`] would) and merges the reports in the order given: in address
    /// order, regions in address order keep the report's `seen` runs in address order.
    ///
    /// The read of the next chunk goes in before the current one is checked, across region
    /// boundaries too, so a list of small regions (a cycle's written regions, random 4 KiB
    /// samples) costs the device one read at a time and never waits for a check.
    pub fn verify_regions(&self, target: &mut dyn BlockTarget, regions: &[(u64, u64)]) -> Result<VerifyReport, VerifyError> {
        match regions {
            [] => Ok(VerifyReport::default()),
            [(a, b)] => self.verify(target, *a, *b),
            _ => {
                for &(a, b) in regions {
                    self.check_region(a, b)?;
                }
                self.scan_regions(target, regions, &mut |_, _| {}, None)
            }
        }
    }

    /// As [`Verifier::verify_regions`], adding a digest of every chunk read to `digests`
    /// (made by [`Digests::for_regions`] of the same regions): another port's verify of the
    /// same regions pairs with it digest by digest.
    pub fn verify_regions_digested(
        &self,
        target: &mut dyn BlockTarget,
        regions: &[(u64, u64)],
        digests: &mut Digests,
    ) -> Result<VerifyReport, VerifyError> {
        for &(a, b) in regions {
            self.check_region(a, b)?;
        }
        self.scan_regions(target, regions, &mut |_, _| {}, Some(digests))
    }

    fn check_region(&self, start: u64, end: u64) -> Result<(), VerifyError> {
        let spec = self.layout.spec();
        if start >= end
            || start < spec.span_start
            || end > spec.span_end
            || !start.is_multiple_of(self.sector)
            || !end.is_multiple_of(self.sector)
        {
            return Err(VerifyError::BadRegion { start, end, span_start: spec.span_start, span_end: spec.span_end });
        }
        Ok(())
    }

    /// One thread reads ahead and checks: the read of the next chunk is in the device (or
    /// the kernel) while this thread checks the current one, so the device is never idle
    /// while it checks, and no chunk is handed between threads (an engine without
    /// asynchronous reads reads it at `read_start`). Buffers come from the target's pool
    /// where it has one (registered once with the kernel): one per read in flight and the
    /// one being checked. Each region is scanned alone (its torn-write groups close at its
    /// end); `progress` gets the bytes done over all regions.
    fn scan_regions(
        &self,
        target: &mut dyn BlockTarget,
        regions: &[(u64, u64)],
        progress: &mut dyn FnMut(u64, usize),
        mut digests: Option<&mut Digests>,
    ) -> Result<VerifyReport, VerifyError> {
        let largest = regions.iter().map(|&(a, b)| b - a).max().unwrap_or(0);
        let mut spare = target.buffers(READ_AHEAD + 1, READ_CHUNK.min(largest) as usize);
        let mut ahead = ReadAhead { queue: std::collections::VecDeque::with_capacity(READ_AHEAD), regions, region: 0, next: None };
        let mut total = VerifyReport::default();
        let mut scan = Scan::new(0);
        let mut current: Option<usize> = None;
        let mut done = 0u64;
        ahead.top_up(target, &mut spare);
        let checked = loop {
            let Some((region, pos, ticket)) = ahead.queue.pop_front() else { break Ok(()) };
            let (buf, whole) = target.read_finish(ticket);
            let chunk = match self.finish_chunk(target, pos, buf, whole) {
                Ok(chunk) => chunk,
                Err(e) => break Err(e),
            };
            // The next read goes in before this chunk is checked.
            ahead.top_up(target, &mut spare);
            if let Some(d) = digests.as_deref_mut() {
                d.add(chunk.pos, &chunk.buf, chunk.errors.iter().any(Option::is_some));
            }
            if current != Some(region) {
                if current.is_some() {
                    self.finish_region(&mut scan, &mut total);
                }
                scan.reset(regions[region].1);
                current = Some(region);
            }
            let r = self.check_chunk(&mut scan, &chunk);
            done += chunk.buf.len() as u64;
            spare.push(chunk.buf);
            if let Err(e) = r {
                break Err(e);
            }
            progress(done, total.findings.len() + scan.rep.findings.len());
        };
        // A scan that stopped early still finishes the reads it started (the engine keeps
        // their buffers until then).
        for (_, _, ticket) in ahead.queue {
            drop(target.read_finish(ticket));
        }
        checked?;
        if current.is_some() {
            self.finish_region(&mut scan, &mut total);
        }
        Ok(total)
    }

    /// Closes the region `scan` covered and adds its report to `total`.
    fn finish_region(&self, scan: &mut Scan, total: &mut VerifyReport) {
        self.close_groups(&mut scan.groups, u64::MAX, &mut scan.rep.findings);
        let mut rep = std::mem::take(&mut scan.rep);
        rep.findings.sort_by_key(|f| (f.offset, f.class));
        total.merge(rep);
    }

    /// Reads one chunk; when the read fails, reads it sector by sector to find exactly
    /// which sectors fail.
    fn read_chunk(&self, target: &mut dyn BlockTarget, pos: u64, buf: AlignedBuf) -> Result<Chunk, VerifyError> {
        let (buf, whole) = target.read_owned(pos, buf);
        self.finish_chunk(target, pos, buf, whole)
    }

    /// A chunk read at `pos` with the result `whole`; when it failed, reads it again sector
    /// by sector to find exactly which sectors fail.
    fn finish_chunk(
        &self,
        target: &mut dyn BlockTarget,
        pos: u64,
        mut buf: AlignedBuf,
        whole: Result<(), IoFailure>,
    ) -> Result<Chunk, VerifyError> {
        let mut errors: Vec<Option<IoFailure>> = Vec::new();
        if let Err(e) = whole {
            if e.device_gone() {
                return Err(VerifyError::DeviceGone(e.to_string()));
            }
            for (i, s) in buf.chunks_mut(self.sector as usize).enumerate() {
                let r = target.read_at(pos + i as u64 * self.sector, s);
                if let Err(e) = &r {
                    if e.device_gone() {
                        return Err(VerifyError::DeviceGone(e.to_string()));
                    }
                }
                errors.push(r.err());
            }
        }
        Ok(Chunk { pos, buf, errors })
    }

    /// Classifies every sector of one chunk, in address order, into `scan`.
    fn check_chunk(&self, scan: &mut Scan, chunk: &Chunk) -> Result<(), VerifyError> {
        // The checksums every sector should carry, computed for the whole chunk at once.
        scan.sums.clear();
        self.format.sums_of(&chunk.buf, &mut scan.sums);
        for (i, bytes) in chunk.buf.chunks(self.sector as usize).enumerate() {
            let addr = chunk.pos + i as u64 * self.sector;
            if addr >= scan.cached.2 {
                scan.cached = self.durable(addr)?;
            }
            let (d, z) = (scan.cached.0, scan.cached.1);
            let verdict = match chunk.errors.get(i) {
                Some(Some(e)) => unreadable(e),
                _ => self.classify(addr, bytes, &scan.sums[i], (&d, &z), &mut scan.last_plan),
            };
            let verdict = self.pinned(scan, addr, bytes, &d, verdict);
            scan.rep.sectors += 1;
            let unit_rank = self.tally(scan, addr, &d, verdict)?;
            if self.atomic > self.sector {
                self.track_unit(scan, addr, &d, unit_rank);
            }
        }
        let n = chunk.buf.len() as u64;
        scan.rep.bytes += n;
        self.close_groups(&mut scan.groups, chunk.pos + n, &mut scan.rep.findings);
        Ok(())
    }

    /// Judges durable writes whose extents the scan has passed: lost when none of their
    /// expected sectors show them, torn when some do.
    fn close_groups(&self, groups: &mut HashMap<u64, Group>, upto: u64, out: &mut Vec<Finding>) {
        for (_, g) in groups.extract_if(|_, g| g.plan.end() <= upto) {
            let class = match g.plan.zeroing() {
                Some(crate::workload::Zeroing::Deallocate | crate::workload::Zeroing::Format) => FindingClass::Resurrection,
                _ if g.shows == 0 => FindingClass::LostWrite,
                _ => FindingClass::TornWrite,
            };
            let what = g.plan.zeroing().map_or("write", |z| z.name());
            let total = g.shows + g.old.len() as u64;
            for (addr, found) in g.old {
                let expected = self.shown_of(&Durable::Write(g.plan), addr);
                let detail = format!(
                    "durable {what} {} [{}, {}): {} of its {total} expected sectors hold older content",
                    g.plan.id,
                    g.plan.offset,
                    g.plan.end(),
                    total - g.shows
                );
                push(out, Finding { class, offset: addr, length: self.sector, expected, found, cycle: self.cycle, detail });
            }
        }
    }

    /// Inside one atomic unit, every write that is not durable must show on all of its
    /// sectors in the unit or on none (newer writes over it excepted).
    fn check_unit(&self, unit: &[UnitSector], out: &mut Vec<Finding>) {
        // Writes shown somewhere in the unit as a version newer than the durable one.
        let mut seen: Vec<u64> = unit.iter().filter(|u| u.ok && u.shown >= 2 && u.durable_rank < u.shown).map(|u| u.shown).collect();
        seen.sort_unstable();
        seen.dedup();
        for rank in seen {
            let w = self.history.plan(self.layout, rank - 1);
            // If any other sector of the write in this unit holds older content, every sector
            // of the write in the unit is part of the tear (those showing it and those not).
            let mine = || unit.iter().filter(|u| u.ok && w.overlaps(u.addr, 1));
            if !mine().any(|u| u.shown < rank) {
                continue;
            }
            for u in mine().filter(|u| u.shown <= rank) {
                let found = match u.shown {
                    0 => Shown::Prior {},
                    1 => Shown::Prefill {},
                    r => self.shown_of(&Durable::Write(self.history.plan(self.layout, r - 1)), u.addr),
                };
                let expected = self.shown_of(&Durable::Write(w), u.addr);
                let detail = format!(
                    "write {} is partly applied inside the {}-byte atomic unit at byte {}",
                    w.id,
                    self.atomic,
                    u.addr / self.atomic * self.atomic
                );
                push(
                    out,
                    Finding {
                        class: FindingClass::TornWrite,
                        offset: u.addr,
                        length: self.sector,
                        expected,
                        found,
                        cycle: self.cycle,
                        detail,
                    },
                );
            }
        }
    }
}

/// The reads a scan has started, in order, and where the next one starts: regions in the
/// order given, each in address order, in chunks of at most [`READ_CHUNK`].
struct ReadAhead<'r> {
    queue: std::collections::VecDeque<(usize, u64, faultline_drivers::ReadTicket)>,
    regions: &'r [(u64, u64)],
    /// The region the next read is in, and where in it (`None`: at its start).
    region: usize,
    next: Option<u64>,
}

impl ReadAhead<'_> {
    /// Starts reads until [`READ_AHEAD`] are in flight or every region is all asked for.
    fn top_up(&mut self, target: &mut dyn BlockTarget, spare: &mut Vec<AlignedBuf>) {
        while self.queue.len() < READ_AHEAD && self.region < self.regions.len() {
            let (start, end) = self.regions[self.region];
            let at = self.next.unwrap_or(start);
            let n = (end - at).min(READ_CHUNK) as usize;
            let mut buf = spare.pop().unwrap_or_else(|| AlignedBuf::zeroed(n));
            buf.resize(n);
            self.queue.push_back((self.region, at, target.read_start(at, buf)));
            if at + n as u64 >= end {
                (self.region, self.next) = (self.region + 1, None);
            } else {
                self.next = Some(at + n as u64);
            }
        }
    }
}

/// One chunk read from the target, with per-sector read errors when the whole read failed.
struct Chunk {
    pos: u64,
    buf: AlignedBuf,
    errors: Vec<Option<IoFailure>>,
}

/// State of a scan, carried from chunk to chunk.
struct Scan {
    end: u64,
    rep: VerifyReport,
    groups: HashMap<u64, Group>,
    unit: Vec<UnitSector>,
    /// D, the zeroing ops newer than it, and the end of the run of sectors sharing both
    /// (computed once per piece).
    cached: (Durable, zeroed::Zeroings, u64),
    last_plan: Option<WritePlan>,
    /// The pin covering the sector and the end of the run of sectors sharing it.
    pin: (Option<PinAt>, u64),
    /// Checksums the chunk's sectors should carry (reused from chunk to chunk).
    sums: Vec<[u8; 16]>,
}

impl Scan {
    fn new(end: u64) -> Self {
        Scan {
            end,
            rep: VerifyReport::default(),
            groups: HashMap::new(),
            unit: Vec::new(),
            cached: (Durable::Prior, zeroed::Zeroings::default(), 0),
            last_plan: None,
            pin: (None, 0),
            sums: Vec::new(),
        }
    }

    /// The state of `Scan::new(end)`, keeping the allocations. Built from `Scan::new`, so a
    /// field added later (a cache keyed by address, say) cannot be carried over stale.
    fn reset(&mut self, end: u64) {
        let (mut groups, mut unit, sums) =
            (std::mem::take(&mut self.groups), std::mem::take(&mut self.unit), std::mem::take(&mut self.sums));
        groups.clear();
        unit.clear();
        *self = Scan { groups, unit, sums, ..Scan::new(end) };
    }
}

/// One sector of the atomic unit being scanned.
struct UnitSector {
    addr: u64,
    /// Version shown, ranked as in `Durable::rank` (`u64::MAX` when it is a finding).
    shown: u64,
    durable_rank: u64,
    /// The sector's own verdict was acceptable.
    ok: bool,
}
