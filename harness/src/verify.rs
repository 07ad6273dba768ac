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
//!   identity disagrees with the workload (wrong extent, cycle, position or port);
//! - `corruption`: our sector with a failing checksum, or bytes within a few bits of D, or
//!   bytes that are no version at all (not ours, not another run's, not zeros) where every
//!   version the sector held before D is known to be this run's (the prefill or an earlier
//!   write of the run covered it): nothing older can explain them;
//! - `lost_write` / `torn_write`: sectors older than D. Grouped by D: when none of D's
//!   expected sectors show it, the write is lost; when some do, it is torn. Inside an atomic
//!   unit, a write that is not durable must be all-or-nothing too: a unit where some of its
//!   sectors show it and others show older content is a torn write;
//! - `unreadable`: reads fail (media error) or time out.
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

use crate::format::{bit_distance, Decoded, Format, SectorId, FLAG_PREFILL, PREFILL_WRITE_ID};
use crate::ledger::History;
use crate::workload::{Layout, WritePlan};
use faultline_drivers::{AlignedBuf, BlockTarget, IoFailure};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel};

/// Classes of finding (docs/DOMAIN.md section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingClass {
    LostWrite,
    TornWrite,
    MisdirectedWrite,
    Corruption,
    UnexpectedVersion,
    Unreadable,
    DeadDevice,
}

impl FindingClass {
    pub const ALL: [FindingClass; 7] = [
        FindingClass::LostWrite,
        FindingClass::TornWrite,
        FindingClass::MisdirectedWrite,
        FindingClass::Corruption,
        FindingClass::UnexpectedVersion,
        FindingClass::Unreadable,
        FindingClass::DeadDevice,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FindingClass::LostWrite => "lost_write",
            FindingClass::TornWrite => "torn_write",
            FindingClass::MisdirectedWrite => "misdirected_write",
            FindingClass::Corruption => "corruption",
            FindingClass::UnexpectedVersion => "unexpected_version",
            FindingClass::Unreadable => "unreadable",
            FindingClass::DeadDevice => "dead_device",
        }
    }
}

/// The identity a sector should have had, or the one it had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Shown {
    /// No write of this run; content from before the run.
    Prior,
    /// The prefill pass's version of this sector.
    Prefill,
    /// Sector `index` of write `write_id` (cycle `cycle`, port `port`).
    Write {
        write_id: u64,
        cycle: u32,
        port: u8,
        addr: u64,
        index: u32,
        count: u32,
    },
    /// Our format, but the checksum fails; fields as read.
    Damaged {
        write_id: u64,
        cycle: u32,
        addr: u64,
        run_id: u64,
    },
    /// A faultline sector of another run.
    ForeignRun {
        run_id: u64,
        write_id: u64,
    },
    Zeros,
    Unrecognized,
    ReadError {
        errno: i32,
        detail: String,
    },
}

/// One finding: data, never an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub class: FindingClass,
    /// Byte offset on the target.
    pub offset: u64,
    /// Bytes affected.
    pub length: u64,
    /// What the contract required at `offset` (first sector of the range).
    pub expected: Shown,
    /// What was there (first sector of the range).
    pub found: Shown,
    /// Cycle in which the verification ran.
    pub cycle: u32,
    pub detail: String,
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("verify: region [{start}, {end}) is not inside the span [{span_start}, {span_end}) or not sector-aligned")]
    BadRegion { start: u64, end: u64, span_start: u64, span_end: u64 },
    #[error("verify: the target is gone: {0}")]
    DeviceGone(String),
    #[error("verify: {0}")]
    Inconsistent(String),
}

/// Counts and findings of one verification pass.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VerifyReport {
    pub sectors: u64,
    pub bytes: u64,
    /// Sectors holding their durable version.
    pub durable_ok: u64,
    /// Sectors holding a newer, legitimately uncertain version.
    pub newer_ok: u64,
    /// Sectors with no durable expectation holding prior content.
    pub prior_ok: u64,
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// Findings per class, every class present.
    pub fn summary(&self) -> BTreeMap<&'static str, u64> {
        let mut m: BTreeMap<&'static str, u64> = FindingClass::ALL.iter().map(|c| (c.name(), 0)).collect();
        for f in &self.findings {
            *m.get_mut(f.class.name()).expect("all classes") += 1;
        }
        m
    }
}

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
    Old {
        found: Shown,
    },
    Finding {
        class: FindingClass,
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
}

/// Bound on stepping back through non-durable writes for one sector.
const MAX_STEPS_BACK: u32 = 1 << 20;
const READ_CHUNK: u64 = 1 << 20;

impl<'a> Verifier<'a> {
    pub fn new(layout: &'a Layout, history: &'a History, format: &'a Format) -> Self {
        let sector = format.sector_bytes() as u64;
        let atomic = history.header.atomic_bytes.max(sector);
        Verifier { layout, history, format, sector, atomic, cycle: history.last_cycle() }
    }

    /// D for `addr`, and the end of the run of addresses from `addr` that share it.
    fn durable(&self, addr: u64) -> Result<(Durable, u64), VerifyError> {
        let mut bound = self.history.submitted_end();
        let mut end = u64::MAX;
        let mut steps = 0u32;
        loop {
            let (w, e) = self.layout.latest_covering_span(addr, bound);
            end = end.min(e);
            match w {
                None => break,
                Some(w) if self.history.is_durable(w.id) => return Ok((Durable::Write(w), end)),
                Some(w) => bound = w.id,
            }
            steps += 1;
            if steps >= MAX_STEPS_BACK {
                return Err(VerifyError::Inconsistent(format!("more than {MAX_STEPS_BACK} non-durable writes cover byte {addr}")));
            }
        }
        Ok(match self.history.prefill {
            Some((s, e)) if addr >= s && addr < e => (Durable::Prefill, end.min(e)),
            Some((s, _)) if addr < s => (Durable::Prior, end.min(s)),
            _ => (Durable::Prior, end),
        })
    }

    /// The sector identity a durable version has at `addr`.
    fn expected_id(&self, d: &Durable, addr: u64) -> Option<SectorId> {
        let h = &self.history.header;
        match d {
            Durable::Prior => None,
            Durable::Prefill => Some(prefill_id(h.run_id, addr, h.first_port().0)),
            Durable::Write(w) => Some(SectorId {
                run_id: h.run_id,
                addr,
                write_id: w.id,
                cycle: self.history.cycle_of(w.id).map_or(0, |c| c.cycle),
                port: self.history.cycle_of(w.id).map_or(h.first_port(), |c| c.port).0,
                flags: 0,
                index: ((addr - w.offset) / self.sector) as u32,
                count: (w.len / self.sector) as u32,
            }),
        }
    }

    fn shown_of(&self, d: &Durable, addr: u64) -> Shown {
        match (d, self.expected_id(d, addr)) {
            (Durable::Prior, _) | (_, None) => Shown::Prior,
            (Durable::Prefill, _) => Shown::Prefill,
            (Durable::Write(_), Some(id)) => shown_valid(&id),
        }
    }

    /// Whether everything the sector at `addr` held before its durable version `d` is known to
    /// be this run's: the prefill covered it, or an earlier write of the run did (before that,
    /// it held whatever the drive had, which a lost write may bring back).
    fn only_own_versions_before(&self, d: &Durable, addr: u64) -> bool {
        let prefilled = self.history.prefill.is_some_and(|(s, e)| addr >= s && addr < e);
        match d {
            Durable::Prior => false,
            Durable::Prefill => true,
            Durable::Write(w) => prefilled || self.layout.latest_covering(addr, w.id).is_some(),
        }
    }

    /// `last_plan` caches the previous sector's write (sectors of one write come in runs).
    fn classify(&self, addr: u64, bytes: &[u8], d: &Durable, last_plan: &mut Option<WritePlan>) -> Verdict {
        let decoded = self.format.decode(bytes);
        let id = match decoded {
            Decoded::Valid(id) => id,
            Decoded::Damaged { id, magic_ok, version } => {
                return Verdict::Finding {
                    class: FindingClass::Corruption,
                    found: Shown::Damaged { write_id: id.write_id, cycle: id.cycle, addr: id.addr, run_id: id.run_id },
                    detail: format!("checksum mismatch (magic {}, version {version})", if magic_ok { "intact" } else { "damaged" }),
                }
            }
            other => {
                let found = match other {
                    Decoded::Zeros => Shown::Zeros,
                    Decoded::ForeignRun(f) => Shown::ForeignRun { run_id: f.run_id, write_id: f.write_id },
                    _ => Shown::Unrecognized,
                };
                let Some(exp) = self.expected_id(d, addr) else {
                    return Verdict::Ok { rank: 0, durable: true };
                };
                // Within 1/32 of the bits of what should be here: damaged in place, not lost.
                let mut want = vec![0u8; bytes.len()];
                self.format.encode(&exp, &mut want);
                let dist = bit_distance(&want, bytes);
                if dist <= (bytes.len() as u64 * 8) / 32 {
                    return Verdict::Finding {
                        class: FindingClass::Corruption,
                        found,
                        detail: format!("{dist} bits differ from the durable version"),
                    };
                }
                // Bytes that are no version at all, where every version the sector ever held is
                // known to be this run's: nothing older can explain them.
                if found == Shown::Unrecognized && self.only_own_versions_before(d, addr) {
                    return Verdict::Finding {
                        class: FindingClass::Corruption,
                        found,
                        detail: "matches no version of this run: neither the durable one nor any older one".into(),
                    };
                }
                return Verdict::Old { found };
            }
        };
        let found = shown_valid(&id);
        if id.addr != addr {
            return Verdict::Finding {
                class: FindingClass::MisdirectedWrite,
                found,
                detail: format!("sector written for byte {} found at byte {addr}", id.addr),
            };
        }
        let unexpected = |detail: String| Verdict::Finding { class: FindingClass::UnexpectedVersion, found: found.clone(), detail };
        if id.write_id == PREFILL_WRITE_ID {
            if id.flags & FLAG_PREFILL == 0 || id.cycle != 0 || id.index != 0 || id.count != 1 {
                return unexpected("write id 0 without the prefill identity".into());
            }
            if !self.history.prefill.is_some_and(|(s, e)| addr >= s && addr < e) {
                return unexpected("prefill sector, but the ledger records no prefill here".into());
            }
            return match d {
                Durable::Write(_) => Verdict::Old { found: Shown::Prefill },
                Durable::Prefill | Durable::Prior => Verdict::Ok { rank: 1, durable: true },
            };
        }
        let Some(c) = self.history.cycle_of(id.write_id) else {
            return unexpected(format!(
                "write {} was never submitted (ids submitted end below {})",
                id.write_id,
                self.history.submitted_end()
            ));
        };
        let plan = match *last_plan {
            Some(p) if p.id == id.write_id => p,
            _ => {
                let p = self.layout.plan(id.write_id);
                *last_plan = Some(p);
                p
            }
        };
        if !plan.overlaps(addr, 1) {
            return unexpected(format!("write {} covers [{}, {}), not this sector", id.write_id, plan.offset, plan.end()));
        }
        let (index, count) = (((addr - plan.offset) / self.sector) as u32, (plan.len / self.sector) as u32);
        if id.index != index || id.count != count || id.cycle != c.cycle || id.port != c.port.0 || id.flags != 0 {
            return unexpected(format!(
                "identity disagrees with write {}: sector {}/{} cycle {} port {} flags {:#x}, expected {index}/{count} cycle {} port {} flags 0",
                id.write_id,
                id.index,
                id.count,
                id.cycle,
                crate::port::PortId(id.port),
                id.flags,
                c.cycle,
                c.port
            ));
        }
        let rank = id.write_id + 1;
        match d.rank().cmp(&rank) {
            std::cmp::Ordering::Equal => Verdict::Ok { rank, durable: true },
            std::cmp::Ordering::Less => Verdict::Ok { rank, durable: false },
            std::cmp::Ordering::Greater => Verdict::Old { found },
        }
    }

    /// Verifies `[start, end)` (sector-aligned, inside the span) of `target`.
    pub fn verify(&self, target: &mut dyn BlockTarget, start: u64, end: u64) -> Result<VerifyReport, VerifyError> {
        self.verify_with_progress(target, start, end, &mut |_, _| {})
    }

    /// As [`Verifier::verify`], calling `progress(bytes done, findings so far)` after every
    /// read chunk (1 MiB).
    pub fn verify_with_progress(
        &self,
        target: &mut dyn BlockTarget,
        start: u64,
        end: u64,
        progress: &mut dyn FnMut(u64, usize),
    ) -> Result<VerifyReport, VerifyError> {
        let spec = self.layout.spec();
        if start >= end
            || start < spec.span_start
            || end > spec.span_end
            || !start.is_multiple_of(self.sector)
            || !end.is_multiple_of(self.sector)
        {
            return Err(VerifyError::BadRegion { start, end, span_start: spec.span_start, span_end: spec.span_end });
        }
        if end - start <= READ_CHUNK {
            // One read: nothing to overlap, so no second thread (random-read verification
            // calls this per block).
            let chunk = self.read_chunk(target, start, AlignedBuf::zeroed((end - start) as usize))?;
            let mut scan = Scan::new(end);
            self.check_chunk(&mut scan, &chunk)?;
            self.close_groups(&mut scan.groups, u64::MAX, &mut scan.rep.findings);
            scan.rep.findings.sort_by_key(|f| (f.offset, f.class));
            progress(end - start, scan.rep.findings.len());
            return Ok(scan.rep);
        }
        // The calling thread reads (the target stays on it); a scoped thread checks the
        // chunks in order, so reading chunk N+1 overlaps checking chunk N. Buffers circulate
        // between the two: at most three exist.
        let findings_so_far = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            let (to_check, checking) = sync_channel::<Chunk>(1);
            let (give_back, returned) = channel::<AlignedBuf>();
            let found_count = &findings_so_far;
            let checker = sc.spawn(move || {
                let mut scan = Scan::new(end);
                for chunk in checking {
                    let r = self.check_chunk(&mut scan, &chunk);
                    found_count.store(scan.rep.findings.len(), Ordering::Relaxed);
                    // The reader may have stopped already; the buffer is then simply dropped.
                    let _ = give_back.send(chunk.buf);
                    r?;
                }
                self.close_groups(&mut scan.groups, u64::MAX, &mut scan.rep.findings);
                scan.rep.findings.sort_by_key(|f| (f.offset, f.class));
                Ok(scan.rep)
            });
            let mut spare = 3usize;
            let mut pos = start;
            let mut read_result = Ok(());
            while pos < end {
                let n = (end - pos).min(READ_CHUNK);
                let mut buf = if spare > 0 {
                    spare -= 1;
                    AlignedBuf::zeroed(READ_CHUNK.min(end - start) as usize)
                } else {
                    match returned.recv() {
                        Ok(b) => b,
                        Err(_) => break, // the checker stopped: its result says why
                    }
                };
                buf.resize(n as usize);
                match self.read_chunk(target, pos, buf) {
                    Ok(chunk) => {
                        if to_check.send(chunk).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        read_result = Err(e);
                        break;
                    }
                }
                pos += n;
                progress(pos - start, findings_so_far.load(Ordering::Relaxed));
            }
            drop(to_check);
            let checked = checker.join().expect("the verification thread does not panic");
            read_result?;
            checked
        })
    }

    /// Reads one chunk; when the read fails, reads it sector by sector to find exactly
    /// which sectors fail.
    fn read_chunk(&self, target: &mut dyn BlockTarget, pos: u64, buf: AlignedBuf) -> Result<Chunk, VerifyError> {
        let (mut buf, whole) = target.read_owned(pos, buf);
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
        let end = scan.end;
        let rep = &mut scan.rep;
        for (i, bytes) in chunk.buf.chunks(self.sector as usize).enumerate() {
            let addr = chunk.pos + i as u64 * self.sector;
            if addr >= scan.cached.1 {
                scan.cached = self.durable(addr)?;
            }
            let d = scan.cached.0;
            let verdict = match chunk.errors.get(i) {
                Some(Some(e)) => Verdict::Finding {
                    class: FindingClass::Unreadable,
                    found: Shown::ReadError { errno: e.errno, detail: e.detail.clone() },
                    detail: e.to_string(),
                },
                _ => self.classify(addr, bytes, &d, &mut scan.last_plan),
            };
            rep.sectors += 1;
            let expected = || self.shown_of(&d, addr);
            let mut unit_rank = None;
            match verdict {
                Verdict::Ok { rank, durable } => {
                    match (durable, rank) {
                        (true, 0) => rep.prior_ok += 1,
                        (true, _) => rep.durable_ok += 1,
                        (false, _) => rep.newer_ok += 1,
                    }
                    if let Durable::Write(w) = d {
                        scan.groups.entry(w.id).or_insert(Group { plan: w, shows: 0, old: vec![] }).shows += 1;
                    }
                    unit_rank = Some(rank);
                }
                Verdict::Old { found } => match d {
                    Durable::Write(w) => {
                        scan.groups.entry(w.id).or_insert(Group { plan: w, shows: 0, old: vec![] }).old.push((addr, found))
                    }
                    _ => push(
                        &mut rep.findings,
                        Finding {
                            class: FindingClass::LostWrite,
                            offset: addr,
                            length: self.sector,
                            expected: expected(),
                            found,
                            cycle: self.cycle,
                            detail: "prefill version missing".into(),
                        },
                    ),
                },
                Verdict::Finding { class, found, detail } => push(
                    &mut rep.findings,
                    Finding { class, offset: addr, length: self.sector, expected: expected(), found, cycle: self.cycle, detail },
                ),
            }
            if self.atomic > self.sector {
                scan.unit.push(UnitSector { addr, shown: unit_rank.unwrap_or(u64::MAX), durable_rank: d.rank(), ok: unit_rank.is_some() });
                if (addr + self.sector).is_multiple_of(self.atomic) || addr + self.sector == end {
                    self.check_unit(&scan.unit, &mut rep.findings);
                    scan.unit.clear();
                }
            }
        }
        let n = chunk.buf.len() as u64;
        rep.bytes += n;
        self.close_groups(&mut scan.groups, chunk.pos + n, &mut rep.findings);
        Ok(())
    }

    /// Judges durable writes whose extents the scan has passed: lost when none of their
    /// expected sectors show them, torn when some do.
    fn close_groups(&self, groups: &mut HashMap<u64, Group>, upto: u64, out: &mut Vec<Finding>) {
        let done: Vec<u64> = groups.iter().filter(|(_, g)| g.plan.end() <= upto).map(|(&k, _)| k).collect();
        for k in done {
            let g = groups.remove(&k).expect("key listed");
            let class = if g.shows == 0 { FindingClass::LostWrite } else { FindingClass::TornWrite };
            let total = g.shows + g.old.len() as u64;
            for (addr, found) in g.old {
                let expected = self.shown_of(&Durable::Write(g.plan), addr);
                let detail = format!(
                    "durable write {} [{}, {}): {} of its {total} expected sectors hold older content",
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
            let w = self.layout.plan(rank - 1);
            // If any other sector of the write in this unit holds older content, every sector
            // of the write in the unit is part of the tear (those showing it and those not).
            let mine = || unit.iter().filter(|u| u.ok && w.overlaps(u.addr, 1));
            if !mine().any(|u| u.shown < rank) {
                continue;
            }
            for u in mine().filter(|u| u.shown <= rank) {
                let found = match u.shown {
                    0 => Shown::Prior,
                    1 => Shown::Prefill,
                    r => self.shown_of(&Durable::Write(self.layout.plan(r - 1)), u.addr),
                };
                let expected = self.shown_of(&Durable::Write(w), u.addr);
                let detail =
                    format!("write {} is partly applied inside the atomic unit at byte {}", w.id, u.addr / self.atomic * self.atomic);
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
    /// D and the end of the run of sectors sharing it (computed once per piece).
    cached: (Durable, u64),
    last_plan: Option<WritePlan>,
}

impl Scan {
    fn new(end: u64) -> Self {
        Scan { end, rep: VerifyReport::default(), groups: HashMap::new(), unit: Vec::new(), cached: (Durable::Prior, 0), last_plan: None }
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

/// The identity of the prefill sector at `addr`.
pub fn prefill_id(run_id: u64, addr: u64, port: u8) -> SectorId {
    SectorId { run_id, addr, write_id: PREFILL_WRITE_ID, cycle: 0, port, flags: FLAG_PREFILL, index: 0, count: 1 }
}

fn shown_valid(id: &SectorId) -> Shown {
    if id.write_id == PREFILL_WRITE_ID {
        return Shown::Prefill;
    }
    Shown::Write { write_id: id.write_id, cycle: id.cycle, port: id.port, addr: id.addr, index: id.index, count: id.count }
}

/// Appends, merging with the previous finding when it is the same class, adjacent, and
/// about the same expected write.
fn push(out: &mut Vec<Finding>, f: Finding) {
    if let Some(last) = out.last_mut() {
        let same_write = match (&last.expected, &f.expected) {
            (Shown::Write { write_id: a, .. }, Shown::Write { write_id: b, .. }) => a == b,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        if last.class == f.class
            && last.offset + last.length == f.offset
            && same_write
            && std::mem::discriminant(&last.found) == std::mem::discriminant(&f.found)
        {
            last.length += f.length;
            return;
        }
    }
    out.push(f);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{tests::tempdir, Contract, LedgerWriter, RunHeader, LEDGER_FORMAT};
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
    use crate::writer::{run_cycle, CycleOptions};
    use faultline_drivers::Op;
    use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
    use std::time::Duration;

    const SPAN: u64 = 1 << 20;

    /// An honest drive after one graceful cycle of 300 sequential 4 KiB writes (span of 256
    /// blocks, so the second pass covers the first 44).
    fn setup() -> (SimDrive, Layout, Format, LedgerWriter) {
        let mut sim = SimDrive::new(SimConfig {
            capacity_bytes: SPAN,
            sector_bytes: 512,
            atomic_bytes: 4096,
            queue_depth: 8,
            seed: 1,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
        });
        let spec = WorkloadSpec {
            seed: 9,
            pattern: Pattern::Sequential,
            span_start: 0,
            span_end: SPAN,
            min_write_bytes: 4096,
            max_write_bytes: 4096,
            mean_write_bytes: 4096,
            align_bytes: 4096,
            queue_depth: 8,
            flush: FlushPolicy::default(),
        };
        let header = RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: 77,
            created_at: String::new(),
            target_identity: sim.identity(),
            target_capacity: SPAN,
            sector_bytes: 512,
            atomic_bytes: 4096,
            contract: Contract::Plp,
            ports: crate::port::PortEntry::single(),
            workload: spec.clone(),
        };
        let mut ledger = LedgerWriter::create(&tempdir(), header).unwrap();
        let layout = Layout::new(spec, 512).unwrap();
        let format = Format::new(77, 512);
        let opts = CycleOptions {
            cycle: 1,
            first_id: 1,
            started_at: String::new(),
            port: crate::port::PortId::A,
            max_writes: Some(300),
            duration: None,
            cut: None,
            checkpoint_every: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(1),
            stop: None,
        };
        run_cycle(&mut sim, &layout, &format, &mut ledger, Contract::Plp, &opts, &mut || Ok(())).unwrap();
        (sim, layout, format, ledger)
    }

    fn put(sim: &mut SimDrive, format: &Format, id: SectorId, at: u64) {
        let mut buf = faultline_drivers::AlignedBuf::zeroed(512);
        format.encode(&id, &mut buf);
        sim.submit(Op::Write { token: 1, offset: at, buf, fua: false, write_id: 999_999 }).unwrap();
        let mut out = Vec::new();
        sim.reap(&mut out, 1, Duration::from_secs(1)).unwrap();
        assert!(out[0].result.is_ok());
    }

    fn verify(sim: &mut SimDrive, layout: &Layout, format: &Format, ledger: &LedgerWriter) -> VerifyReport {
        Verifier::new(layout, ledger.history(), format).verify(sim, 0, SPAN).unwrap()
    }

    #[test]
    fn clean_run_has_no_findings() {
        let (mut sim, layout, format, ledger) = setup();
        let rep = verify(&mut sim, &layout, &format, &ledger);
        assert!(rep.findings.is_empty(), "{:?}", rep.findings);
        assert_eq!((rep.durable_ok, rep.prior_ok), (SPAN / 512, 0));
    }

    #[test]
    fn versions_never_submitted_or_not_matching_the_workload_are_unexpected() {
        let (mut sim, layout, format, ledger) = setup();
        let w = layout.plan(100);
        let good = SectorId { run_id: 77, addr: w.offset, write_id: 100, cycle: 1, port: 0, flags: 0, index: 0, count: 8 };
        // A write id past everything submitted.
        put(&mut sim, &format, SectorId { write_id: 5000, ..good }, w.offset);
        // Right write, wrong position inside it.
        put(&mut sim, &format, SectorId { addr: w.offset + 512, index: 3, ..good }, w.offset + 512);
        // Right write, wrong cycle.
        put(&mut sim, &format, SectorId { addr: w.offset + 1024, index: 2, cycle: 2, ..good }, w.offset + 1024);
        // A prefill sector in a run that never prefilled.
        put(&mut sim, &format, prefill_id(77, w.offset + 1536, 0), w.offset + 1536);
        let rep = verify(&mut sim, &layout, &format, &ledger);
        let sectors: Vec<_> =
            rep.findings.iter().flat_map(|f| (f.offset..f.offset + f.length).step_by(512).map(move |o| (o - w.offset, f.class))).collect();
        assert_eq!(sectors, (0..4).map(|i| (i * 512, FindingClass::UnexpectedVersion)).collect::<Vec<_>>(), "{:#?}", rep.findings);
        assert!(rep.findings.iter().any(|f| f.detail.contains("never submitted")), "{:#?}", rep.findings);
    }

    #[test]
    fn foreign_or_blank_content_over_durable_data_is_lost_but_near_misses_are_corruption() {
        let (mut sim, layout, format, ledger) = setup();
        let w = layout.plan(200);
        // Another run's valid sector where write 200 is durable: lost.
        let other = Format::new(0xdead_beef, 512);
        for i in 0..8 {
            put(
                &mut sim,
                &other,
                SectorId {
                    run_id: 0xdead_beef,
                    addr: w.offset + i * 512,
                    write_id: 200,
                    cycle: 1,
                    port: 0,
                    flags: 0,
                    index: i as u32,
                    count: 8,
                },
                w.offset + i * 512,
            );
        }
        let rep = verify(&mut sim, &layout, &format, &ledger);
        assert_eq!(rep.findings.len(), 1, "{:#?}", rep.findings);
        assert_eq!((rep.findings[0].class, rep.findings[0].offset, rep.findings[0].length), (FindingClass::LostWrite, w.offset, 4096));
        assert!(matches!(rep.findings[0].found, Shown::ForeignRun { run_id: 0xdead_beef, .. }));
        // Our sector with one bit flipped in its magic is damage in place, not someone else's.
        let mut sim2 = sim.clone();
        let v = layout.plan(201);
        let mut buf = faultline_drivers::AlignedBuf::zeroed(512);
        sim2.read_at(v.offset, &mut buf).unwrap();
        buf[3] ^= 4;
        sim2.submit(Op::Write { token: 2, offset: v.offset, buf, fua: false, write_id: 999_998 }).unwrap();
        sim2.reap(&mut Vec::new(), 1, Duration::from_secs(1)).unwrap();
        let rep = verify(&mut sim2, &layout, &format, &ledger);
        let f = rep.findings.iter().find(|f| f.offset == v.offset).expect("finding at the flipped sector");
        assert_eq!((f.class, f.length), (FindingClass::Corruption, 512), "{f:?}");
    }

    #[test]
    fn regions_outside_the_span_are_refused() {
        let (mut sim, layout, format, ledger) = setup();
        let v = Verifier::new(&layout, ledger.history(), &format);
        assert!(matches!(v.verify(&mut sim, 0, SPAN + 512), Err(VerifyError::BadRegion { .. })));
        assert!(matches!(v.verify(&mut sim, 100, 4096), Err(VerifyError::BadRegion { .. })));
    }
}
