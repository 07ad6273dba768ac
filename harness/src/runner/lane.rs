//! The shares of a run and their verification after a cycle: each writer port's run (its
//! ledger and layout over its share of the span) and what was checked of it, verified
//! through its own port and, on a device with several, through every other one, the ports
//! compared by digest. A single-port run is one share, its run in the run directory.

use super::dut::{Dut, DutError, DutVerifyError, VerifyRequest};
use super::emit::{nanos, Emitter};
use super::fault::{cycle_rng, SAMPLE_SALT};
use super::regions::{sample_regions, union, written_regions};
use super::stop::CycleEnd;
use crate::events::{class_counts, Event, EventKind};
use crate::ledger::{Contract, EndKind, LedgerError, Record};
use crate::port::PortId;
use crate::run::{open_run, DeviceFacts, OpenRun, RunError};
use crate::scenario::{OnEvent, PortRole, RunPlan};
use crate::verify::{differing, seen_record, Digest, Finding, FindingClass, Shown, Verifier, VerifyError};
use std::path::PathBuf;
use std::time::Instant;

/// The share of one writer port: its run (ledger, layout) and what was checked of it.
pub(crate) struct Lane {
    /// The port that writes the share (an index into the run's port table).
    pub port: usize,
    pub run: OpenRun,
    /// Where the port's run is kept: the run directory of a single-port run,
    /// `RUN_DIR/ports/<name>` of a dual-port one.
    pub dir: PathBuf,
    pub span: (u64, u64),
    /// Writes below this id have been verified since they were written.
    pub checked_upto: u64,
}

impl Lane {
    /// Opens the port's run again after its writer failed mid-cycle: replaying the ledger
    /// closes the cycle the writer left open (as `interrupted`, nothing of it durable beyond
    /// its last checkpoint), so the next cycle can begin. The old writer is synced first, so
    /// that it has nothing left to write when the new one opens the file.
    pub fn reopen(&mut self, facts: &DeviceFacts) -> Result<(), ReopenRunError> {
        let why = |cause| ReopenRunError { dir: self.dir.clone(), cause };
        self.run.ledger.sync().map_err(|e| why(RunCause::Ledger(e)))?;
        let header = self.run.history().header.clone();
        self.run = open_run(&self.dir, facts, move || header).map_err(|e| why(RunCause::Run(e)))?;
        self.checked_upto = self.checked_upto.min(self.run.history().submitted_end());
        Ok(())
    }

    /// Makes `cycle` the port's next cycle. A cycle the port's writer never began (its device
    /// was not there, its writer failed before its first record, the harness died first) is
    /// recorded as begun and interrupted with no write, so that every port's ledger numbers
    /// its cycles as the run does.
    pub fn align(&mut self, cycle: u32, port: PortId, at: &str) -> Result<(), crate::ledger::LedgerError> {
        loop {
            let (next, first_id) = self.run.next_cycle();
            if next >= cycle {
                return Ok(());
            }
            self.run.ledger.append(&Record::CycleStart { cycle: next, first_id, at: at.to_string(), port })?;
            self.run.ledger.append(&Record::CycleEnd {
                cycle: next,
                end: EndKind::Interrupted,
                submitted_end: first_id,
                durable_prefix: first_id,
                durable_extras: Vec::new(),
                failed: Vec::new(),
                in_flight_at_end: 0,
                bytes_at_risk: 0,
            })?;
        }
    }
}

/// Which ports read each share, and how what they read is compared.
pub(crate) struct Readers {
    /// Every port's name, in the run's port table's order.
    pub names: Vec<String>,
    /// The ports that read (the others are idle).
    pub readers: Vec<usize>,
    /// Every share is read through every reading port, not only its own.
    pub cross_verify: bool,
    /// The ports' reads of a share are compared (by digest, then sector by sector).
    pub compare: bool,
}

impl Readers {
    /// The plan's port table: every port but an idle one reads; across ports as the dual-port
    /// plan says (a one-port run's port A reads its own share).
    pub fn of(plan: &RunPlan) -> Readers {
        Readers {
            names: plan.ports.iter().map(|p| p.name.clone()).collect(),
            readers: plan.ports.iter().enumerate().filter(|(_, p)| p.role != PortRole::Idle).map(|(i, _)| i).collect(),
            cross_verify: plan.dual.as_ref().is_some_and(|d| d.spec.cross_verify),
            compare: plan.dual.as_ref().is_some_and(|d| d.spec.compare_ports),
        }
    }

    fn several(&self) -> bool {
        self.names.len() > 1
    }

    /// The ports a share written through `own` is read through: its own first, then, with
    /// cross-verification, every other reading port.
    fn through(&self, own: usize) -> Vec<usize> {
        std::iter::once(own).chain(self.readers.iter().copied().filter(|&r| r != own && self.cross_verify)).collect()
    }
}

/// Whether what a cycle's verify sees of its uncertain writes may be held against the drive
/// from now on (recorded as `seen`): under the PLP contract always (the drive claims that
/// whatever it holds survives a cut); under the flush contract only after a power cut that
/// was confirmed (not a glitch or a sag, which the drive may ride through), which emptied the volatile
/// cache before the read (`cut_confirmed`: the
/// cycle's fault ran, not one the harness died in, and no controller step failed). After a
/// link reset, or a cut that may not have happened, a write seen may still sit in the cache,
/// and an honest drive may lose it at a later cut before a flush.
pub(crate) fn may_hold(plan: &RunPlan, cycle: u32, cut_confirmed: bool) -> bool {
    match plan.contract {
        Contract::Plp => true,
        // A glitch or a sag the drive rode through kept its cache: not an emptied one.
        Contract::Flush => plan.fault(cycle).is_power_cut() && plan.fault(cycle).shape().is_none() && cut_confirmed,
    }
}

/// What to verify of a cycle: which, whether it is the run's last, whether what is seen may
/// be held against the drive ([`may_hold`]).
pub(crate) struct CheckOf {
    pub cycle: u32,
    pub last: bool,
    pub hold_seen: bool,
}

/// Verifies what the cycle may have changed of every share: everything written since the
/// last check and a seeded sample of the share, or the whole share when the policy says so;
/// through the port that wrote it and, with cross-verification, every other reading port,
/// compared by digest. Adds the findings (a port that went away is a `dead_device`), records
/// what was seen, emits one `verified` event. Stopping on a finding, the whole share is read
/// once before the run ends. `Err`: a port or a share's ledger failed the harness.
#[expect(clippy::too_many_arguments, reason = "one cycle's state, held by the run")]
pub(crate) fn verify_lanes(
    plan: &RunPlan,
    readers: &Readers,
    of: &CheckOf,
    duts: &mut [Box<dyn Dut>],
    lanes: &mut [Lane],
    em: &mut Emitter<'_>,
    findings: &mut Vec<Finding>,
    end: &mut CycleEnd,
) -> Result<(), ShareCheckError> {
    let (cycle, v) = (of.cycle, &plan.verify);
    let full = (v.full_every_cycles > 0 && cycle.is_multiple_of(v.full_every_cycles)) || (of.last && v.full_at_end);
    let stops = plan.stop.on_finding == OnEvent::Stop && !full && v.full_at_end;
    let several = readers.several();
    let mut read_total = Tally::default();
    let first_finding = findings.len();
    for (li, lane) in lanes.iter_mut().enumerate() {
        let submitted_end = lane.run.history().submitted_end();
        let regions = if full { vec![lane.span] } else { regions_to_check(plan, lane, li, cycle) };
        let own = readers.names[lane.port].clone();
        let ledger_file = lane.dir.join(crate::ledger::LEDGER_FILE);
        let share = (PortId(lane.port as u8), ledger_file.as_path());
        let through = readers.through(lane.port);
        // What the port that wrote the share saw, and of which regions; the findings.
        let (mut seen_own, mut found) = (None, ShareFindings::default());
        // What each port read, digested, when the ports are compared: only what differs is
        // read again (`None`: that port's verify failed, so everything is).
        let compare = readers.compare && through.len() > 1;
        let mut digests: Vec<Option<Vec<Digest>>> = Vec::new();
        for &r in &through {
            let via = readers.names[r].clone();
            let verifier = Verifier::new(&lane.run.layout, lane.run.ledger.history(), &lane.run.format);
            let t0 = Instant::now();
            let mut read = regions.clone();
            let mut reply = match duts[r].verify(&VerifyRequest { verifier: &verifier, regions: &regions, digest: compare, share }) {
                Ok(reply) => reply,
                Err(DutVerifyError::Dut(source)) => return Err(ShareCheckError::Target { port: via, source }),
                Err(e) => {
                    digests.push(None);
                    failed(e, cycle, several.then_some((&own, &via)), em, findings, end);
                    continue;
                }
            };
            // Stopping on a finding: the whole share is read once before the run ends.
            if r == lane.port && stops && reply.report.findings.iter().any(|f| em.is_new(f)) {
                match read_whole(duts[r].as_mut(), &verifier, lane.span, share, &mut reply) {
                    Ok(()) => read = vec![lane.span],
                    Err(DutVerifyError::Dut(source)) => return Err(ShareCheckError::Target { port: via, source }),
                    Err(e) => failed(e, cycle, several.then_some((&own, &via)), em, findings, end),
                }
            }
            // One entry per port read through, in `through` order: `None` where it failed.
            digests.push(reply.digests.take());
            let rep = reply.report;
            read_total.add(rep.sectors, rep.bytes, t0);
            if several {
                rep.findings.into_iter().for_each(|f| found.take(f, (r, &via), lane, readers, findings));
            } else {
                findings.extend(rep.findings);
            }
            if r == lane.port {
                seen_own = Some((rep.seen, read));
            }
        }
        found.name_every_port(&own, findings);
        if let Some((seen, read)) = seen_own.as_ref().filter(|_| of.hold_seen) {
            hold_seen(lane, read, seen)?;
        }
        if compare {
            compare_ports(duts, &through, &digests, &regions, lane, readers, cycle, findings)?;
        }
        // What the port that wrote the share could not read is read again next cycle.
        if seen_own.is_some() {
            lane.checked_upto = submitted_end;
        }
    }
    read_total.emit(em, cycle, &findings[first_finding..]);
    Ok(())
}

/// Stopping on a finding: the whole share (`span`) read once more through `dut` before the
/// run ends, in place of `reply` (what that read first is added to its sectors and bytes).
fn read_whole(
    dut: &mut dyn Dut,
    verifier: &Verifier,
    span: (u64, u64),
    share: (PortId, &std::path::Path),
    reply: &mut super::dut::VerifyReply,
) -> Result<(), DutVerifyError> {
    let (s0, b0) = (reply.report.sectors, reply.report.bytes);
    let mut whole = dut.verify(&VerifyRequest { verifier, regions: &[span], digest: false, share })?;
    (whole.report.sectors, whole.report.bytes) = (whole.report.sectors + s0, whole.report.bytes + b0);
    *reply = whole;
    Ok(())
}

/// What a cycle's verify read, through every port: one `verified` event, when anything was.
#[derive(Default)]
struct Tally {
    sectors: u64,
    bytes: u64,
    ns: u64,
    any: bool,
}

impl Tally {
    /// One port's read of one share, started at `t0`.
    fn add(&mut self, sectors: u64, bytes: u64, t0: Instant) {
        (self.sectors, self.bytes, self.ns, self.any) = (self.sectors + sectors, self.bytes + bytes, self.ns + nanos(t0.elapsed()), true);
    }

    /// The `verified` event, counting `found`, the cycle's findings.
    fn emit(&self, em: &mut Emitter<'_>, cycle: u32, found: &[Finding]) {
        if self.any {
            let (t_ns, counts) = (em.now(), class_counts(found));
            em.emit(Event::in_cycle(
                t_ns,
                cycle,
                EventKind::Verified { sectors: self.sectors, bytes: self.bytes, verify_ns: self.ns, counts },
            ));
        }
    }
}

/// Records in the share's ledger what its own port saw of its uncertain writes in `read`, to
/// hold against the drive from now on.
fn hold_seen(lane: &mut Lane, read: &[(u64, u64)], seen: &[crate::verify::SeenRun]) -> Result<(), ShareCheckError> {
    if let Some(rec) = seen_record(lane.run.history(), &lane.run.layout, read, seen) {
        lane.run.ledger.append(&rec).map_err(|source| ShareCheckError::Seen { dir: lane.dir.clone(), source })?;
    }
    Ok(())
}

/// What a cycle checks of a lane's share short of all of it: everything written since the
/// last check, and a seeded sample of the share.
fn regions_to_check(plan: &RunPlan, lane: &Lane, li: usize, cycle: u32) -> Vec<(u64, u64)> {
    let h = lane.run.history();
    let mut rng = cycle_rng(plan.seed, SAMPLE_SALT ^ li as u64, cycle);
    // A format since the last check changed every sector of the share.
    let written = match h.format_below(h.submitted_end()) {
        Some(f) if f >= lane.checked_upto => vec![lane.span],
        _ => written_regions(&lane.run.layout, lane.checked_upto, h.submitted_end()),
    };
    union(&written, &sample_regions(&mut rng, lane.span.0, lane.span.1, h.header.sector_bytes, plan.verify.sample_bytes))
}

/// The findings of one share read through several ports, as they come in `through` order
/// (the port that wrote the share first).
#[derive(Default)]
struct ShareFindings {
    /// What the port that wrote the share found bad.
    own_bad: Vec<(u64, u64)>,
    /// What the port that wrote the share found (before annotation), where it is in
    /// `findings`, and every port it was read through: the same damage read through another
    /// port is one finding naming both.
    own_found: Vec<(usize, Finding, Vec<String>)>,
}

impl ShareFindings {
    /// Takes finding `f`, read through port `r` (named `via`), into `findings`.
    fn take(&mut self, mut f: Finding, (r, via): (usize, &str), lane: &Lane, readers: &Readers, findings: &mut Vec<Finding>) {
        let own = &readers.names[lane.port];
        // An older version read through another port, where the port that wrote the share
        // reads it intact: the data is on the drive, that port serves a stale copy.
        let older = matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite);
        if r != lane.port && older && !self.own_bad.iter().any(|&(a, b)| a < f.offset + f.length.max(1) && f.offset < b) {
            f.class = FindingClass::StaleVersion;
            f.detail = format!("port {via} serves an older version than port {own} reads: {}", f.detail);
        }
        if r == lane.port {
            self.own_bad.push((f.offset, f.offset + f.length.max(1)));
            self.own_found.push((findings.len(), f.clone(), vec![via.to_string()]));
        } else if let Some((_, _, vias)) = self.own_found.iter_mut().find(|(_, g, _)| same_damage(g, &f)) {
            vias.push(via.to_string());
            return;
        }
        annotate(&mut f, lane, own, via, readers);
        findings.push(f);
    }

    /// A finding of the port that wrote the share that other ports read too names them all.
    fn name_every_port(&self, own: &str, findings: &mut [Finding]) {
        for (at, _, vias) in self.own_found.iter().filter(|(_, _, v)| v.len() > 1) {
            let (one, all) = (format!("read through port {own}: "), format!("read through ports {}: ", vias.join(" and ")));
            findings[*at].detail = findings[*at].detail.replacen(&one, &all, 1);
        }
    }
}

/// A verify that failed: a device gone mid-read is a `dead_device` finding; anything else a
/// harness error. `ports`: the share's port and the port read through, on a device with
/// several.
fn failed(
    e: DutVerifyError,
    cycle: u32,
    ports: Option<(&String, &String)>,
    em: &mut Emitter<'_>,
    findings: &mut Vec<Finding>,
    end: &mut CycleEnd,
) {
    match (e, ports) {
        (DutVerifyError::Verify(VerifyError::DeviceGone(why)), None) => {
            findings.push(Finding::dead_device(cycle, &why));
            end.dead_device = true;
        }
        (DutVerifyError::Verify(VerifyError::DeviceGone(why)), Some((_, via))) => {
            findings.push(Finding::dead_device(cycle, &format!("port {via}: {why}")));
            end.dead_device = true;
        }
        (e, None) => {
            em.error(Some(cycle), e.to_string());
            end.errors += 1;
        }
        (e, Some((own, via))) => {
            em.error(Some(cycle), format!("verify port {own}'s share through port {via}: {e}"));
            end.errors += 1;
        }
    }
}

/// Why a share could not be verified, or its verification recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShareCheckError {
    #[error("port {port}: {source}")]
    Target { port: String, source: DutError },
    #[error("{}: cannot record what the verify saw: {source}", .dir.display())]
    Seen { dir: PathBuf, source: LedgerError },
}

/// Why a port's run (its ledger) could not be opened again after its writer failed.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot open the port's run again after its writer failed: {cause}", .dir.display())]
pub(crate) struct ReopenRunError {
    pub dir: PathBuf,
    pub cause: RunCause,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunCause {
    #[error(transparent)]
    Ledger(LedgerError),
    #[error(transparent)]
    Run(RunError),
}

/// Whether two findings (as the verifier made them) are the same damage.
fn same_damage(a: &Finding, b: &Finding) -> bool {
    (a.class, a.offset, a.length, &a.expected, &a.found) == (b.class, b.offset, b.length, &b.expected, &b.found)
}

/// Names the port a finding was read through, and a ghost write where the older version found
/// was in flight on a faulted port: a write the kernel's multipath failed over while the old
/// controller may still commit it, over newer data.
fn annotate(f: &mut Finding, lane: &Lane, own: &str, via: &str, readers: &Readers) {
    let mut detail = format!("port {own}'s share, read through port {via}: {}", f.detail);
    if matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite) {
        if let Shown::Write { write_id, cycle, port, .. } = f.found {
            let h = lane.run.history();
            if h.cycle_of(write_id).is_some_and(|c| c.cycle == cycle && c.failed.contains(write_id)) {
                let name = readers.names.get(port as usize).map_or_else(|| PortId(port).to_string(), |n| n.clone());
                detail.push_str(&format!(
                    "; the older version is write {write_id}, in flight on port {name} when the fault hit it in cycle {cycle}: a ghost write (it landed after the newer one)"
                ));
                // The durable write was whole until the ghost landed over part of it: those
                // sectors are lost to the ghost, not torn by a cut.
                f.class = FindingClass::LostWrite;
            }
        }
    }
    f.detail = detail;
}

/// Compares what the ports in `through` read of `regions`: where two ports' digests of their
/// verifies differ (or a port's verify failed: all of `regions`), the ranges are read again
/// through both and compared sector by sector; a port serving other data than the first is a
/// finding (a port serving stale data).
#[expect(clippy::too_many_arguments, reason = "one share's comparison across its ports")]
fn compare_ports(
    devs: &mut [Box<dyn Dut>],
    through: &[usize],
    digests: &[Option<Vec<Digest>>],
    regions: &[(u64, u64)],
    lane: &Lane,
    readers: &Readers,
    cycle: u32,
    findings: &mut Vec<Finding>,
) -> Result<(), ShareCheckError> {
    let Some((&first, rest)) = through.split_first() else { return Ok(()) };
    for (k, &r) in rest.iter().enumerate() {
        let ranges = match (&digests[0], &digests[k + 1]) {
            (Some(a), Some(b)) => differing(a, b).unwrap_or_else(|| regions.to_vec()),
            _ => regions.to_vec(),
        };
        compare_bytes(devs, (first, r), &ranges, lane, readers, cycle, findings)?;
    }
    Ok(())
}

/// Compares what the ports `first` and `r` read of `regions`, sector by sector, by the hash
/// of each sector as each port reads it (a port far away sends hashes, not data), a piece of
/// at most 64 MiB at a time. A sector either port could not read is not compared.
fn compare_bytes(
    devs: &mut [Box<dyn Dut>],
    (first, r): (usize, usize),
    regions: &[(u64, u64)],
    lane: &Lane,
    readers: &Readers,
    cycle: u32,
    findings: &mut Vec<Finding>,
) -> Result<(), ShareCheckError> {
    const PIECE: u64 = 64 << 20;
    let sector = lane.run.history().header.sector_bytes;
    let port = |i: usize| move |source| ShareCheckError::Target { port: readers.names[i].clone(), source };
    for &(s, e) in regions {
        let mut at = s;
        while at < e {
            let len = (e - at).min(PIECE);
            let piece = [(at, at + len)];
            let a = devs[first].sector_hashes(&piece, sector).map_err(port(first))?;
            let b = devs[r].sector_hashes(&piece, sector).map_err(port(r))?;
            let differs = |k: usize| matches!((a.get(k), b.get(k)), (Some(Some(x)), Some(Some(y))) if x != y);
            let n = a.len().min(b.len());
            let mut k = 0;
            while k < n {
                if !differs(k) {
                    k += 1;
                    continue;
                }
                let k0 = k;
                while k < n && differs(k) {
                    k += 1;
                }
                let (from, to) = (at + k0 as u64 * sector, at + k as u64 * sector);
                findings.push(Finding {
                    class: FindingClass::StaleVersion,
                    offset: from,
                    length: to - from,
                    expected: Shown::Prior {},
                    found: Shown::Prior {},
                    cycle,
                    detail: format!(
                        "port {} and port {} read different data in [{from}, {to}) of port {}'s share: one port serves a stale copy",
                        readers.names[first], readers.names[r], readers.names[lane.port]
                    ),
                });
            }
            at += len;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{tests::tempdir, Contract};
    use crate::ledger::{RunHeader, TargetFacts};
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
    use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};

    const SPAN: u64 = 1 << 20;

    /// An honest simulated drive of `SPAN` bytes, never written, and a new run over all of it
    /// in a new directory: (the drive, its header, the directory).
    fn fresh() -> (SimDrive, RunHeader, PathBuf) {
        let sim = SimDrive::new(SimConfig {
            capacity_bytes: SPAN,
            sector_bytes: 512,
            atomic_bytes: 512,
            queue_depth: 8,
            seed: 1,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
            dealloc_reads: Default::default(),
        });
        let spec = WorkloadSpec {
            seed: 9,
            pattern: Pattern::Sequential {},
            span_start: 0,
            span_end: SPAN,
            min_write_bytes: 4096,
            max_write_bytes: 4096,
            mean_write_bytes: 4096,
            align_bytes: 4096,
            queue_depth: 8,
            flush: FlushPolicy::default(),
            ops: Default::default(),
        };
        let header = RunHeader::new(5, String::new(), TargetFacts::of(&sim), Contract::Plp, crate::port::PortEntry::single(), spec);
        (sim, header, tempdir())
    }

    #[test]
    fn a_port_whose_writer_never_began_cycles_is_brought_level_and_its_ledger_reads_back() {
        let (sim, header, dir) = fresh();
        let h = header.clone();
        let run = open_run(&dir, &DeviceFacts::of(&sim), move || h).unwrap();
        let mut lane = Lane { port: 1, run, dir: dir.clone(), span: (0, SPAN), checked_upto: 1 };
        assert_eq!(lane.run.next_cycle(), (1, 1));
        lane.align(3, PortId(1), "t").unwrap();
        assert_eq!(lane.run.next_cycle(), (3, 1));
        // Already level: nothing more is recorded.
        lane.align(3, PortId(1), "t").unwrap();
        lane.align(2, PortId(1), "t").unwrap();
        let cycles = &lane.run.history().cycles;
        assert_eq!(cycles.len(), 2);
        for (c, want) in cycles.iter().zip(1..) {
            assert_eq!((c.cycle, c.end, c.first_id, c.submitted_end, c.port), (want, Some(EndKind::Interrupted), 1, 1, PortId(1)));
        }
        lane.run.ledger.sync().unwrap();
        drop(lane);
        let again = open_run(&dir, &DeviceFacts::of(&sim), || unreachable!("the run exists")).unwrap();
        assert_eq!(again.next_cycle(), (3, 1), "the ledger replays the cycles it was brought level with");
    }

    #[test]
    fn a_verify_counts_only_the_findings_it_made() {
        let (sim, header, dir) = fresh();
        let run = open_run(&dir, &DeviceFacts::of(&sim), move || header).unwrap();
        let mut lanes = vec![Lane { port: 0, run, dir, span: (0, SPAN), checked_upto: 1 }];
        let plan = crate::scenario::Scenario::from_toml(crate::scenario::REFERENCE_SCENARIO, "reference.toml")
            .and_then(|s| s.plan("reference.toml", 1))
            .unwrap();
        let mut duts: Vec<Box<dyn Dut>> = vec![Box::new(super::super::dut::SimDut::one(sim.clone()))];
        // A finding the cycle made before its verify (a port's window, a dead port).
        let earlier = Finding::dead_device(1, "port B: gone");
        let mut findings = vec![earlier.clone()];
        let mut events: Vec<Event> = Vec::new();
        let mut sinks = crate::events::Sinks::new();
        sinks.push(&mut events);
        let mut em = Emitter::new(crate::report::Recorder::new(sinks), None, Default::default(), Vec::new());
        let mut end = CycleEnd { cycle: 1, ..CycleEnd::default() };
        // The drive was never written: every sector of the span reads as zeros, which the
        // ledger (nothing written, nothing prefilled) allows.
        let of = CheckOf { cycle: 1, last: true, hold_seen: true };
        verify_lanes(&plan, &Readers::of(&plan), &of, &mut duts, &mut lanes, &mut em, &mut findings, &mut end).unwrap();
        drop(em);
        assert_eq!(findings, vec![earlier], "nothing found on an honest, unwritten drive");
        let verified: Vec<&EventKind> = events.iter().map(|e| &e.kind).filter(|k| matches!(k, EventKind::Verified { .. })).collect();
        let [EventKind::Verified { sectors, counts, .. }] = verified[..] else { panic!("one verified event: {events:?}") };
        assert_eq!(*sectors, SPAN / 512, "the whole span, the run's last cycle");
        assert!(counts.values().all(|&n| n == 0), "the dead port found before the verify is not the verify's: {counts:?}");
        assert_eq!((end.errors, end.dead_device), (0, false));
        assert_eq!(lanes[0].checked_upto, 1, "nothing was submitted, so nothing more is checked");
    }
}
