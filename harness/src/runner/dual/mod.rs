//! Dual-port runs: one writer thread per port, each with its own target, ledger and stop
//! token, sampled in windows on one clock; a fault that hits one port (from the fault's own
//! thread) while the others write; then the other ports judged against their baseline, and
//! every port's share verified through its own port and through every other one.
//!
//! A cycle: `start all writers -> warm-up -> baseline -> fault on port X (X's writer cuts) ->
//! X back and answering -> settle -> stop the others -> verify every share through every port
//! -> compare the ports -> judge the others -> record`.
//!
//! Each writer port keeps its run in `RUN_DIR/ports/<name>/` (a ledger and a layout over its
//! share of the span, bound to the identity of the device seen through that port), so that
//! two ports never share a write id space, and `faultline verify` works on one share.
//! `faultline resume` takes a failover run up again from those ledgers and the saved drive.
//!
//! Files: `mod.rs` (this: the cycle), `judge.rs` (the budgets), `device.rs` (the ports of a
//! simulated or real drive).

mod cycle;
mod device;
mod error;
mod judge;
mod perf;
mod sim;

use super::cycle::Ending;
use super::emit::{nanos, Emitter};
use super::fault::{cycle_rng, SAMPLE_SALT};
use super::regions::{sample_regions, union, written_regions};
use super::resume::{Prior, Start};
use super::stop::{decide, short_of_space, ControllerStep, CycleEnd, ErrorStreak, Next};
use super::{CycleObserver, RunnerOptions};
use crate::events::{class_counts, Event};
use crate::ledger::{EndKind, Record, RunHeader, TargetFacts};
use crate::port::PortId;
use crate::run::DeviceFacts;
use crate::run::{open_run, OpenRun};
use crate::runner::dut::{Dut, DutError, DutVerifyError, Readiness, VerifyRequest};
use crate::runner::ports::PortSet;
use crate::scenario::{DualPlan, PortRole, RunPlan};
use crate::verify::{differing, seen_record, Digest, Finding, FindingClass, Shown, Verifier};
use crate::workload::Layout;
use crate::writer::CycleOutcome;
use cycle::DualCycles;
use device::{open_ports, Ports};
pub(crate) use error::DualRunError;
use error::{ReopenRunError, RunCause, ShareCheckError, WriterError};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often the harness checks that it is being scheduled.
const TICK: Duration = Duration::from_millis(2);

/// The share of one writer port: its run (ledger, layout) and what was checked of it.
struct Lane {
    port: usize,
    run: OpenRun,
    /// Where the port's run is kept (`RUN_DIR/ports/<name>`).
    dir: PathBuf,
    span: (u64, u64),
    checked_upto: u64,
}

impl Lane {
    /// Opens the port's run again after its writer failed mid-cycle: replaying the ledger
    /// closes the cycle the writer left open (as `interrupted`, nothing of it durable beyond
    /// its last checkpoint), so the next cycle can begin. The old writer is synced first, so
    /// that it has nothing left to write when the new one opens the file.
    fn reopen(&mut self, facts: &DeviceFacts) -> Result<(), ReopenRunError> {
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
    fn align(&mut self, cycle: u32, port: PortId, at: &str) -> Result<(), crate::ledger::LedgerError> {
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

/// The directory of port `name`'s run inside a dual-port run directory.
pub fn port_dir(run_dir: &Path, name: &str) -> PathBuf {
    run_dir.join("ports").join(name)
}

/// What a writer thread gives back.
struct PortEnd {
    outcome: Result<CycleOutcome, WriterError>,
    /// A port a link fault hit: how long it took to answer again after the fault, or why not.
    ready: Option<Result<Readiness, DutError>>,
}

/// Runs a dual-port plan; events go to `em`. `prior` is `None` for a new run; for `faultline
/// resume` it holds what the run had recorded: every port's run is opened again (its ledger
/// closes the cycle the harness died in), that cycle is finished (power on, every port
/// waited for, health, every share verified through every port), and the cycles go on.
#[expect(clippy::too_many_arguments, reason = "what a run holds open, lent to its cycles once")]
pub(crate) fn run(
    plan: &RunPlan,
    dual: &DualPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    em: &mut Emitter<'_>,
    mut observer: Option<&mut (dyn CycleObserver + 'static)>,
    cycles_run: &mut u32,
    prior: Option<&Prior>,
) -> Result<Ending, DualRunError> {
    let resuming = prior.is_some();
    let performance = dual.spec.mode == crate::scenario::DualMode::Performance;
    if resuming && performance {
        return Err(DualRunError::PerformanceResume);
    }
    let Ports { mut devs, cutter, identity, sector, capacity, atomic, notes, _keep } = open_ports(plan, dual, run_dir, o)?;
    let mut cutter = cutter;
    if !prior.is_some_and(|p| p.started) {
        em.emit(Event::RunStarted {
            t_ns: 0,
            run_id: format!("{:016x}", o.run_id),
            scenario: plan.name().to_string(),
            target: identity.clone(),
            contract: plan.contract,
            // A performance run's cycles are its phases: each writer port alone, then all.
            cycles_planned: if performance {
                let writers = dual.ports.iter().filter(|p| p.role == PortRole::Writer).count() as u32;
                writers + u32::from(writers > 1)
            } else {
                plan.cycles
            },
            seed: plan.seed,
            started_at: o.started_at.clone(),
        });
    }
    let full = plan.layout(sector, capacity).map_err(DualRunError::Layout)?;
    let mut lanes = Vec::new();
    for (i, p) in dual.ports.iter().enumerate().filter(|(_, p)| p.role == PortRole::Writer) {
        let span = share(full.spec().span_start, full.spec().span_end, p.share_percent);
        let mut spec = full.spec().clone();
        (spec.span_start, spec.span_end) = span;
        let layout = Layout::new(spec.clone(), sector).map_err(|source| DualRunError::Share {
            port: p.name.clone(),
            percent: p.share_percent,
            source,
        })?;
        let seen = devs[i].facts().map_err(|source| DualRunError::Target { port: p.name.clone(), source })?;
        let facts = TargetFacts { identity: seen.identity.clone(), capacity, sector_bytes: sector, atomic_bytes: atomic };
        let header = RunHeader::new(o.run_id, o.started_at.clone(), facts, plan.contract, plan.ports.clone(), layout.spec().clone());
        let dir = port_dir(run_dir, &p.name);
        let begun = crate::run::exists(&dir);
        if begun && !resuming {
            return Err(DualRunError::Begun { dir, run_dir: run_dir.to_path_buf() });
        }
        let mut run = open_run(&dir, &seen, move || header).map_err(|source| DualRunError::Run { port: p.name.clone(), source })?;
        if begun && run.layout.spec() != layout.spec() {
            let ledger = serde_json::to_string(run.layout.spec()).unwrap_or_default();
            return Err(DualRunError::Workload { dir, port: p.name.clone(), ledger });
        }
        if run.created && plan.scenario.workload.prefill {
            let OpenRun { ledger, layout, format, .. } = &mut run;
            devs[i]
                .prefill(layout, format, PortId(i as u8), ledger)
                .map_err(|source| DualRunError::Prefill { port: p.name.clone(), source })?;
        }
        let from = Start::new(run.history(), prior);
        lanes.push((Lane { port: i, run, dir, span, checked_upto: from.checked_upto }, from));
    }
    for message in notes {
        let t_ns = em.now();
        em.emit(Event::Note { t_ns, cycle: None, message });
    }
    // The cycle the harness died in is the newest any port's ledger began (a port whose
    // writer had not begun it yet is brought level before it is finished).
    let interrupted = lanes.iter().filter_map(|(_, s)| s.interrupted).max();
    let mut done = prior.map_or(0, Prior::cycles_ended);
    let mut lanes: Vec<Lane> = lanes.into_iter().map(|(l, _)| l).collect();
    if performance {
        let n = perf::run(plan, dual, &mut devs, &mut lanes, em, o)?;
        *cycles_run = n;
        // What the measurements wrote is verified as any cycle's is, through every port.
        let (mut findings, mut end) = (Vec::new(), CycleEnd { cycle: n, ..CycleEnd::default() });
        verify_all(plan, dual, n, true, &mut devs, &mut lanes, em, &mut findings, &mut end)?;
        em.findings(n, &findings);
        return Ok(Ending::Done);
    }
    let mut ports = PortSet::new(plan, devs);
    ports.read_health(em);
    let mut c = DualCycles { plan, dual, ports: &mut ports, lanes: &mut lanes, cutter: &mut cutter, em, o, mate_step_ms: None };
    c.controller_log(None);
    let growth = |c: &DualCycles<'_, '_>| c.ports.growth_bytes();
    let stopped = |c: &DualCycles<'_, '_>, why: String| match short_of_space(run_dir, growth(c)) {
        Some(space) => Ending::Suspended(format!("{why}; {space}")),
        None => Ending::Stopped(why),
    };
    let mut streak = ErrorStreak::default();
    if let Some(prior) = prior {
        if let Some(why) = short_of_space(run_dir, growth(&c)) {
            return Ok(Ending::Suspended(why));
        }
        let t_ns = c.em.now();
        let (resumed_at, last_event) = ((o.clock)(), prior.last_kind.clone());
        c.em.emit(Event::RunResumed { t_ns, resumed_at, cycles_ended: done, interrupted_cycle: interrupted, last_event });
        if let Some(cycle) = interrupted {
            *cycles_run += 1;
            done += 1;
            let end = c.finish_interrupted(cycle, done == plan.cycles, observer.as_deref_mut())?;
            if let Some(why) = c.decide(&mut streak, &end) {
                return Ok(stopped(&c, why));
            }
        }
    }
    while done < plan.cycles {
        if let Some(why) = short_of_space(run_dir, growth(&c)) {
            return Ok(Ending::Suspended(why));
        }
        let cycle = done + 1;
        // Pin-mate sequencing sweeps its steps, one per cycle; a failure to set it up starts
        // no cycle.
        if let Some(step) = plan.fault(cycle).mate_step_ms(cycle) {
            if let Err(e) = c.cutter.set_mate_step(step) {
                c.em.error(None, format!("cycle {cycle}: setting the pin-mate step to {step} ms: {e}"));
                let end = CycleEnd { cycle, controller_failure: Some(ControllerStep::MateStep), errors: 1, ..CycleEnd::default() };
                match decide(&plan.stop, &mut streak, &end) {
                    Next::Stop(why) => return Ok(Ending::Stopped(why)),
                    _ => continue,
                }
            }
            c.mate_step_ms = Some(step);
        }
        done += 1;
        *cycles_run += 1;
        let end = c.cycle(cycle, done == plan.cycles, observer.as_deref_mut())?;
        if let Some(why) = c.decide(&mut streak, &end) {
            return Ok(stopped(&c, why));
        }
    }
    for lane in c.lanes.iter_mut() {
        lane.run.ledger.sync().map_err(|source| DualRunError::Sync { dir: lane.dir.clone(), source })?;
    }
    Ok(Ending::Done)
}

/// `[start, end)` percent of the span, rounded to whole MiB inside it.
fn share(start: u64, end: u64, pct: [u8; 2]) -> (u64, u64) {
    const MIB: u64 = 1 << 20;
    let len = end - start;
    let at = |p: u8| start + (len / 100 * p as u64 + (len % 100) * p as u64 / 100) / MIB * MIB;
    (at(pct[0]), if pct[1] == 100 { end } else { at(pct[1]) })
}

#[expect(clippy::too_many_arguments, reason = "one cycle's state, held by the run")]
fn verify_all(
    plan: &RunPlan,
    dual: &DualPlan,
    cycle: u32,
    last: bool,
    devs: &mut [Box<dyn Dut>],
    lanes: &mut [Lane],
    em: &mut Emitter<'_>,
    findings: &mut Vec<Finding>,
    end: &mut CycleEnd,
) -> Result<(), ShareCheckError> {
    let v = &plan.verify;
    let full = (v.full_every_cycles > 0 && cycle.is_multiple_of(v.full_every_cycles)) || (last && v.full_at_end);
    let readers: Vec<usize> = dual.ports.iter().enumerate().filter(|(_, p)| p.role != PortRole::Idle).map(|(i, _)| i).collect();
    let (mut sectors, mut bytes, mut ns) = (0u64, 0u64, 0u64);
    let mut counts_all = Vec::new();
    for (li, lane) in lanes.iter_mut().enumerate() {
        let h = lane.run.history();
        let submitted_end = h.submitted_end();
        let regions = if full {
            vec![lane.span]
        } else {
            let mut rng = cycle_rng(plan.seed, SAMPLE_SALT ^ (li as u64 + 1), cycle);
            let sector = h.header.sector_bytes;
            union(
                &written_regions(&lane.run.layout, lane.checked_upto, submitted_end),
                &sample_regions(&mut rng, lane.span.0, lane.span.1, sector, v.sample_bytes),
            )
        };
        let own = dual.ports[lane.port].name.clone();
        let through: Vec<usize> =
            std::iter::once(lane.port).chain(readers.iter().copied().filter(|&r| r != lane.port && dual.spec.cross_verify)).collect();
        let mut seen_own = None;
        let mut own_bad: Vec<(u64, u64)> = Vec::new();
        // What the port that wrote the share found (before annotation), where it is in
        // `findings`, and every port it was read through: the same damage read through another
        // port is one finding naming both.
        let mut own_found: Vec<(usize, Finding, Vec<String>)> = Vec::new();
        // What each port read, digested, when the ports are compared: only what differs is
        // read again (`None`: that port's verify failed, so everything is).
        let compare = dual.spec.compare_ports && through.len() > 1;
        let mut digests: Vec<Option<Vec<Digest>>> = Vec::new();
        for &r in &through {
            let via = dual.ports[r].name.clone();
            let verifier = Verifier::new(&lane.run.layout, lane.run.ledger.history(), &lane.run.format);
            let t0 = Instant::now();
            let verified = devs[r].verify(&VerifyRequest { verifier: &verifier, regions: &regions, digest: compare });
            let verified = match verified {
                Err(DutVerifyError::Dut(source)) => return Err(ShareCheckError::Target { port: via.clone(), source }),
                Err(DutVerifyError::Verify(e)) => Err(e),
                Ok(reply) => Ok(reply),
            };
            // One entry per port read through, in `through` order: `None` where it failed.
            digests.push(verified.as_ref().ok().and_then(|r| r.digests.clone()));
            let rep = match verified {
                Ok(reply) => reply.report,
                Err(e) => {
                    em.error(Some(cycle), format!("verify port {own}'s share through port {via}: {e}"));
                    end.errors += 1;
                    continue;
                }
            };
            ns += nanos(t0.elapsed());
            sectors += rep.sectors;
            bytes += rep.bytes;
            for mut f in rep.findings {
                // An older version read through another port, where the port that wrote the
                // share reads it intact: the data is on the drive, that port serves a stale
                // copy.
                let older = matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite);
                if r != lane.port && older && !own_bad.iter().any(|&(a, b)| a < f.offset + f.length.max(1) && f.offset < b) {
                    f.class = FindingClass::StaleVersion;
                    f.detail = format!("port {via} serves an older version than port {own} reads: {}", f.detail);
                }
                if r == lane.port {
                    own_bad.push((f.offset, f.offset + f.length.max(1)));
                    own_found.push((findings.len(), f.clone(), vec![via.clone()]));
                } else if let Some((_, _, vias)) = own_found.iter_mut().find(|(_, g, _)| same_damage(g, &f)) {
                    vias.push(via.clone());
                    continue;
                }
                annotate(&mut f, lane, &own, &via, dual);
                findings.push(f);
            }
            if r == lane.port {
                seen_own = Some(rep.seen);
            }
        }
        for (at, _, vias) in own_found.iter().filter(|(_, _, v)| v.len() > 1) {
            let (one, all) = (format!("read through port {own}: "), format!("read through ports {}: ", vias.join(" and ")));
            findings[*at].detail = findings[*at].detail.replacen(&one, &all, 1);
        }
        if let Some(seen) = seen_own.filter(|_| plan.contract == crate::ledger::Contract::Plp) {
            let h = lane.run.history();
            if let Some(rec) = seen_record(h, &lane.run.layout, &regions, &seen) {
                lane.run.ledger.append(&rec).map_err(|source| ShareCheckError::Seen { dir: lane.dir.clone(), source })?;
            }
        }
        if compare {
            compare_ports(devs, &through, &digests, &regions, lane, dual, cycle, findings)?;
        }
        lane.checked_upto = submitted_end;
        counts_all.extend(findings.iter().cloned());
    }
    let t_ns = em.now();
    em.emit(Event::Verified { t_ns, cycle, sectors, bytes, verify_ns: ns, counts: class_counts(&counts_all) });
    Ok(())
}

/// Whether two findings (as the verifier made them) are the same damage.
fn same_damage(a: &Finding, b: &Finding) -> bool {
    (a.class, a.offset, a.length, &a.expected, &a.found) == (b.class, b.offset, b.length, &b.expected, &b.found)
}

/// Names the port a finding was read through, and a ghost write where the older version found
/// was in flight on a faulted port: a write the kernel's multipath failed over while the old
/// controller may still commit it, over newer data.
fn annotate(f: &mut Finding, lane: &Lane, own: &str, via: &str, dual: &DualPlan) {
    let mut detail = format!("port {own}'s share, read through port {via}: {}", f.detail);
    if matches!(f.class, FindingClass::LostWrite | FindingClass::TornWrite) {
        if let Shown::Write { write_id, cycle, port, .. } = f.found {
            let h = lane.run.history();
            if h.cycle_of(write_id).is_some_and(|c| c.cycle == cycle && c.failed.contains(write_id)) {
                let name = dual.ports.get(port as usize).map_or_else(|| PortId(port).to_string(), |p| p.name.clone());
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
    dual: &DualPlan,
    cycle: u32,
    findings: &mut Vec<Finding>,
) -> Result<(), ShareCheckError> {
    let Some((&first, rest)) = through.split_first() else { return Ok(()) };
    for (k, &r) in rest.iter().enumerate() {
        let ranges = match (&digests[0], &digests[k + 1]) {
            (Some(a), Some(b)) => differing(a, b).unwrap_or_else(|| regions.to_vec()),
            _ => regions.to_vec(),
        };
        compare_bytes(devs, (first, r), &ranges, lane, dual, cycle, findings)?;
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
    dual: &DualPlan,
    cycle: u32,
    findings: &mut Vec<Finding>,
) -> Result<(), ShareCheckError> {
    const PIECE: u64 = 64 << 20;
    let sector = lane.run.history().header.sector_bytes;
    let port = |i: usize| move |source| ShareCheckError::Target { port: dual.ports[i].name.clone(), source };
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
                    expected: Shown::Prior,
                    found: Shown::Prior,
                    cycle,
                    detail: format!(
                        "port {} and port {} read different data in [{from}, {to}) of port {}'s share: one port serves a stale copy",
                        dual.ports[first].name, dual.ports[r].name, dual.ports[lane.port].name
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
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
    use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};

    #[test]
    fn a_port_whose_writer_never_began_cycles_is_brought_level_and_its_ledger_reads_back() {
        const SPAN: u64 = 1 << 20;
        let sim = SimDrive::new(SimConfig {
            capacity_bytes: SPAN,
            sector_bytes: 512,
            atomic_bytes: 512,
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
        let header = RunHeader::new(5, String::new(), TargetFacts::of(&sim), Contract::Plp, crate::port::PortEntry::single(), spec);
        let dir = tempdir();
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
}
