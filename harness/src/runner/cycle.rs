//! One single-port cycle's steps, in order: write with the queue full and fault at the
//! placement (`Cycles::one_cycle`), confirm the fault, then settle: power on after the off
//! time, wait until the device answers, read its health, verify what the cycle wrote, record.
//! The loop around it, the stop policy included, is `run_loop`'s.

use super::dut::{self, HealthLogs};
use super::dut::{DutCycleError, Workload};
use super::emit::Emitter;
use super::fault::{confirm_cut, cycle_rng, placement, saw_device_go, ControllerError, FaultThread, PLACE_SALT};
use super::lane::{may_hold, verify_lanes, CheckOf, Lane, Readers, ReopenRunError, ShareCheckError};
use super::ports::controller_log;
use super::resume;
use super::run_loop::{run_cycles, Cycler, StartAt};
use super::setup::{RunnerOptions, Setup};
use super::stop::{self, ControllerStep, CycleEnd};
use crate::events::{Event, Verdict};
use crate::health::{judge, judge_ocp, HealthAnomaly, HealthCheck, HealthPolicy, Shutdown};
use crate::run::OpenRun;
use crate::scenario::RunPlan;
use crate::verify::{Finding, FindingClass, Shown};
use crate::writer::{CycleOptions, CycleOutcome, WriteError};
use std::path::Path;
use std::time::{Duration, Instant};

/// A cycle whose fault is done (or whose harness died), waiting to be settled.
pub(crate) struct Pending {
    pub cycle: u32,
    /// `None` for a cycle finished by `faultline resume`.
    pub outcome: Option<CycleOutcome>,
    /// The last cycle of the run (the whole span may be verified).
    pub last: bool,
    /// What the cycle came to so far (controller failures, harness errors).
    pub end: CycleEnd,
}

impl Cycles<'_, '_> {
    /// One cycle: write with the queue full, fault at the placement, confirm, then settle.
    fn one_cycle(&mut self, last: bool) -> Result<CycleEnd, Fatal> {
        let plan = self.plan;
        let off = plan.off_time;
        let (cycle, first_id) = self.run()?.next_cycle();
        let fault = plan.fault(cycle);
        let t_start = self.em.now();
        self.em.emit(Event::CycleStarted { t_ns: t_start, cycle, fault: plan.faults.is_mixed().then(|| fault.label()) });
        let (place, planned) = placement(&plan.cut, fault.is_clean_shutdown(), &mut cycle_rng(plan.seed, PLACE_SALT, cycle));
        let copts = CycleOptions {
            cycle,
            first_id,
            started_at: (self.o.clock)(),
            port: plan.first_port(),
            max_writes: None,
            duration: None,
            cut: Some(place),
            checkpoint_every: self.st.ports.first().checkpoint_every(),
            drain_timeout: plan.readiness_timeout.clamp(Duration::from_secs(1), Duration::from_secs(30)),
            stop: None,
            samples: None,
            fill: crate::writer::Fill::Auto,
            clock_from: None,
            before_end: None,
        };
        let started = Instant::now();
        (self.cycle_t0, self.waits) = (started, Duration::ZERO);
        let mut cut_cmd = Duration::ZERO;
        let Setup { ports, cutter, .. } = &mut *self.st;
        let run = &mut self.lanes[0].run;
        // Checked when the run opened: every fault of the run has its controller.
        cutter.aim(fault, None).map_err(Fatal::Aim)?;
        let res = std::thread::scope(|sc| {
            // The cut runs on the fault's thread; the writer waits for it to land.
            let fault_thread = FaultThread::spawn(sc, cutter, off);
            let cut_cmd = &mut cut_cmd;
            let mut fault = || {
                *cut_cmd = fault_thread.fire()?;
                Ok(())
            };
            let w = Workload { layout: &run.layout, format: &run.format, contract: plan.contract, opts: &copts };
            ports.first().run_cycle(&w, &mut run.ledger, &mut fault)
        });
        // A fault that failed may or may not have happened: the writer ended the cycle as cut
        // all the same, and what it wrote is settled (verified, recorded) like any cycle's.
        let (outcome, cut_failed) = match res {
            Ok(out) => (out, None),
            Err(DutCycleError::Write(WriteError::Cut { why, outcome })) => (*outcome, Some(why)),
            Err(e) => return self.failed_cycle(cycle, started, &e),
        };
        self.em.cut(cycle, started, &outcome, planned, self.mate_step_ms);
        // Writing until the cut, and the cut command itself.
        self.waits += outcome.cut_at.unwrap_or(outcome.elapsed) + cut_cmd;
        let t_confirm = Instant::now();
        let mut end = CycleEnd { cycle, ..CycleEnd::default() };
        if let Some(why) = cut_failed {
            self.em.error(Some(cycle), format!("cut: {why}"));
            end.errors += 1;
            end.controller_failure = Some(ControllerStep::Cut);
        } else if let Err(why) = self.confirm(&outcome) {
            self.em.error(Some(cycle), why.to_string());
            end.errors += 1;
            end.controller_failure = Some(ControllerStep::Unconfirmed);
        }
        self.waits += t_confirm.elapsed();
        self.settle(Pending { cycle, outcome: Some(outcome), last, end }, off)
    }

    /// A fault that cannot be confirmed is never a clean pass: the switch reads back `off`, or
    /// the device stopped answering.
    fn confirm(&mut self, outcome: &CycleOutcome) -> Result<(), ControllerError> {
        let Setup { ports, cutter, .. } = &mut *self.st;
        let at = self.span.0;
        confirm_cut(cutter, saw_device_go(outcome), &mut || ports.any_answers(at))
    }

    /// The workload failed: power back on (a partial cut), close the cycle the writer left open;
    /// what the cycle came to, for the stop policy.
    fn failed_cycle(&mut self, cycle: u32, started: Instant, e: &DutCycleError) -> Result<CycleEnd, Fatal> {
        let controller = matches!(e, DutCycleError::Write(WriteError::Cut { .. }));
        self.em.error(Some(cycle), e.to_string());
        if let Err(e2) = self.st.cutter.restore(self.plan.off_time) {
            self.em.error(Some(cycle), format!("power on after the failed cycle: {e2}"));
        }
        self.controller_log(Some(cycle));
        let facts = self.st.ports.first().facts()?;
        self.lanes[0].reopen(&facts)?;
        self.em.end_cycle_written(cycle, Verdict::Error, None, Some(started.elapsed()), None);
        Ok(CycleEnd { cycle, controller_failure: controller.then_some(ControllerStep::Cut), errors: 1, ..CycleEnd::default() })
    }

    /// The rest of a cycle whose fault is done (or whose harness died): power on after `off`,
    /// wait until the device answers, verify what the cycle wrote, record.
    fn settle(&mut self, mut p: Pending, off: Duration) -> Result<CycleEnd, Fatal> {
        let cycle = p.cycle;
        self.st.ports.release_all();
        let t_restore = Instant::now();
        let restored = self.st.cutter.restore(off);
        self.waits += t_restore.elapsed();
        if let Err(e) = restored {
            self.em.error(Some(cycle), format!("power on: {e}"));
            self.controller_log(Some(cycle));
            self.em.end_cycle(cycle, Verdict::Error, p.outcome.as_ref(), None);
            p.end.errors += 1;
            p.end.controller_failure = Some(ControllerStep::PowerOn);
            return Ok(p.end);
        }
        let t_ns = self.em.now();
        self.em.emit(if self.st.cutter.is_link() { Event::LinkRestored { t_ns, cycle } } else { Event::PowerRestored { t_ns, cycle } });

        let mut findings: Vec<Finding> = Vec::new();
        let t_ready = Instant::now();
        // Which device the run is about is unknown (an ambiguous identity): the harness cannot
        // judge this drive.
        let ready = self.st.ports.wait_all(self.span.0, self.plan.readiness_timeout, cycle, self.em, &mut p.end, &mut findings);
        ready.map_err(|(_, e)| Fatal::Dut(e))?;
        self.waits += t_ready.elapsed();
        let mut anomalies = 0;
        if !p.end.dead_device {
            let t_health = Instant::now();
            anomalies = self.st.ports.health_after(self.plan, cycle, p.outcome.is_some(), self.em);
            self.waits += t_health.elapsed();
            self.verify(&mut p, &mut findings)?;
        }
        if let Some(obs) = self.observer.as_deref_mut() {
            obs.checked(&CycleCheck { cycle, findings: &findings, truth: self.st.ports.ground_truth() });
        }
        p.end.new_findings = self.em.findings(cycle, &findings);
        self.controller_log(Some(cycle));
        let harness = self.cycle_t0.elapsed().saturating_sub(self.waits);
        let verdict = stop::verdict(&p.end, anomalies);
        self.em.end_cycle(cycle, verdict, p.outcome.as_ref(), Some(harness));
        Ok(p.end)
    }

    /// Records what the controller exchanged since the last call, if anything.
    pub(super) fn controller_log(&mut self, cycle: Option<u32>) {
        controller_log(&mut self.st.cutter, self.em, cycle);
    }

    /// Verifies what the cycle may have changed ([`verify_lanes`]).
    fn verify(&mut self, p: &mut Pending, findings: &mut Vec<Finding>) -> Result<(), Fatal> {
        let v0 = Instant::now();
        // Nobody knows whether the fault of a cycle the harness died in happened.
        let confirmed = p.outcome.is_some() && p.end.controller_failure.is_none();
        let of = CheckOf { cycle: p.cycle, last: p.last, hold_seen: may_hold(self.plan, p.cycle, confirmed) };
        let readers = Readers::single(self.plan);
        verify_lanes(self.plan, &readers, &of, &mut self.st.ports.duts, &mut self.lanes, self.em, findings, &mut p.end)?;
        self.waits += v0.elapsed();
        Ok(())
    }
}

/// The health anomalies from `before` to `after` a cycle's fault, as the plan's fault and
/// health checks judge them. `faulted` is false for a cycle the harness died in, where nobody
/// knows whether the fault happened.
pub(super) fn judged_health(plan: &RunPlan, cycle: u32, before: &HealthLogs, after: &HealthLogs, faulted: bool) -> Vec<HealthAnomaly> {
    let how = plan.fault(cycle).shutdown().filter(|_| faulted);
    let policy = HealthPolicy { allow_clean_bump: false, report_error_log_growth: true };
    let mut anomalies = judge(&before.smart, &after.smart, how.unwrap_or(Shutdown::Dirty), policy);
    if how.is_none() {
        // A link reset, or an unknown fault: no unsafe shutdown is expected either way.
        anomalies.retain(|a| !matches!(a, HealthAnomaly::UnsafeShutdownsAfterDirtyCut { .. }));
    }
    if let (Some(b), Some(a), Some(how)) = (&before.ocp, &after.ocp, how) {
        anomalies.extend(judge_ocp(b, a, how));
    }
    // The checks the scenario switched off (named once, in the run's notes).
    anomalies.retain(|a| !plan.scenario.health.off.contains(&HealthCheck::of(a)));
    anomalies
}

/// The finding for a device that did not come back.
pub(super) fn dead_device(cycle: u32, why: &str) -> Finding {
    Finding {
        class: FindingClass::DeadDevice,
        offset: 0,
        length: 0,
        expected: Shown::Prior,
        found: Shown::Prior,
        cycle,
        detail: why.to_string(),
    }
}

/// Sees every cycle's verification before its findings are deduplicated, with the device's
/// ground truth where it has one: the detection matrix checks each cycle against it.
pub trait CycleObserver {
    fn checked(&mut self, check: &CycleCheck<'_>);
}

/// One cycle's verification, as a [`CycleObserver`] sees it.
pub struct CycleCheck<'a> {
    pub cycle: u32,
    /// Every finding of the cycle (a `dead_device` included), seen before or not.
    pub findings: &'a [crate::verify::Finding],
    /// The simulated drive's ground truth after the cycle (`None` for a real device).
    pub truth: Option<dut::GroundTruth>,
}

/// An error that ends the run with a harness error (recorded as `harness_error`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Fatal {
    #[error("the run is not open")]
    NotOpen,
    #[error(transparent)]
    Reopen(#[from] ReopenRunError),
    #[error(transparent)]
    Verify(#[from] ShareCheckError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
    #[error(transparent)]
    Dut(#[from] dut::DutError),
    /// The cycle's fault has no controller (checked when the run opened: a defect here).
    #[error("the cycle's fault: {0}")]
    Aim(ControllerError),
}

/// How the cycles ended.
pub(super) enum Ending {
    /// Every cycle ran.
    Done,
    /// The stop policy ended the run early, for this reason.
    Stopped(String),
    /// The run stopped without ending, to be resumed (the run directory ran short of space).
    Suspended(String),
}

/// What the cycles share.
struct Cycles<'r, 'e> {
    plan: &'r RunPlan,
    o: &'r RunnerOptions,
    st: &'r mut Setup,
    em: &'r mut Emitter<'e>,
    observer: Option<&'r mut (dyn CycleObserver + 'static)>,
    span: (u64, u64),
    /// The run's one share: its ledger, in the run directory.
    lanes: Vec<Lane>,
    /// The pin-mate step set for the next cut, if the scenario sweeps them.
    mate_step_ms: Option<u32>,
    /// When the cycle in progress started, and how long of it was spent waiting on the
    /// workload, the controller, the off time and the device (so the rest is the harness's).
    cycle_t0: Instant,
    waits: Duration,
}

impl Cycles<'_, '_> {
    fn run(&mut self) -> Result<&mut OpenRun, Fatal> {
        Ok(&mut self.lanes[0].run)
    }
}

impl<'e> Cycler<'e> for Cycles<'_, 'e> {
    type Error = Fatal;

    fn em(&mut self) -> &mut Emitter<'e> {
        self.em
    }

    fn growth_bytes(&self) -> u64 {
        self.st.ports.growth_bytes()
    }

    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), ControllerError> {
        self.st.cutter.set_mate_step(step_ms)?;
        self.mate_step_ms = Some(step_ms);
        Ok(())
    }

    fn cycle(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Fatal> {
        debug_assert_eq!(self.lanes[0].run.next_cycle().0, cycle);
        self.one_cycle(last)
    }

    fn finish_interrupted(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Fatal> {
        (self.cycle_t0, self.waits) = (Instant::now(), Duration::ZERO);
        // Powered back on as that cycle's fault would have been (in a mix, its own).
        self.st.cutter.aim(self.plan.fault(cycle), None).map_err(Fatal::Aim)?;
        self.settle(Pending { cycle, outcome: None, last, end: CycleEnd { cycle, ..CycleEnd::default() } }, Duration::ZERO)
    }

    fn power_cycle_dead_device(&mut self, cycle: u32) -> Option<String> {
        let Setup { ports, cutter, .. } = &mut *self.st;
        ports.power_cycle_dead_device(cutter, self.plan, self.em, cycle, self.span.0)
    }

    fn sync(&mut self) -> Result<(), Fatal> {
        Ok(self.lanes[0].run.ledger.sync()?)
    }
}

/// The cycles; `Err` ends the run with a harness error.
#[expect(clippy::too_many_arguments, reason = "what a run holds open, lent to its cycles once")]
pub(super) fn cycles<'r>(
    plan: &'r RunPlan,
    o: &'r RunnerOptions,
    run_dir: &'r Path,
    st: &'r mut Setup,
    em: &'r mut Emitter<'_>,
    cycles_run: &mut u32,
    resumed: Option<&resume::Prior>,
    observer: Option<&'r mut (dyn CycleObserver + 'static)>,
) -> Result<Ending, Fatal> {
    let run = st.run.take().ok_or(Fatal::NotOpen)?;
    let spec = run.layout.spec().clone();
    let from = resume::Start::new(run.history(), resumed);
    let span = (spec.span_start, spec.span_end);
    let lane = Lane { port: 0, run, dir: run_dir.to_path_buf(), span, checked_upto: from.checked_upto };
    st.ports.read_health(em);
    let mut c =
        Cycles { plan, o, st, em, observer, span, lanes: vec![lane], mate_step_ms: None, cycle_t0: Instant::now(), waits: Duration::ZERO };
    c.controller_log(None);
    let from = StartAt { cycles_ended: from.cycles_ended, interrupted: from.interrupted };
    run_cycles(&mut c, plan, run_dir, o, from, resumed, cycles_run)
}
