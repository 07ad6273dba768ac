//! One cycle's steps, for one port or many (a single-port run is one port): write with the
//! queue full on every writer port and fault at the placement (`writers`), confirm the
//! fault, then settle: power on after the off time, wait until every port the fault hit
//! answers, read every controller's health, judge the windows of the ports the fault did not
//! hit (a dual-port plan), verify every share through every port, record. The loop around it,
//! the stop policy included, is `run_loop`'s.

use super::dut::{self, DutError, Readiness};
use super::emit::{micros, Emitter};
use super::fault::{confirm_cut, cycle_rng, placement, saw_device_go, ControllerError, Cutter, PLACE_SALT};
use super::lane::{may_hold, verify_lanes, CheckOf, Lane, Readers, ReopenRunError, ShareCheckError};
use super::options::RunnerOptions;
use super::ports::{controller_log, PortSet};
use super::stop::{self, ControllerStep, CycleEnd};
use super::writers::{self, NoCut, WritePhase, Written};
use crate::events::{Event, EventKind, Verdict};
use crate::scenario::{RecoveryAt, RecoveryCuts, RunPlan};
use crate::verify::Finding;
use crate::writer::{CutPlacement, CycleOutcome};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod reformat;

/// What a run's cycles share: its ports, their shares, the cutter, the record.
pub(super) struct Cycles<'r, 'e> {
    plan: &'r RunPlan,
    o: &'r RunnerOptions,
    ports: &'r mut PortSet,
    /// Every writer port's share: its run and ledger (for one port, the run directory's).
    lanes: &'r mut [Lane],
    cutter: &'r mut Cutter,
    em: &'r mut Emitter<'e>,
    observer: Option<&'r mut (dyn CycleObserver + 'static)>,
    /// The pin-mate step set for the next cut, if the scenario sweeps them.
    mate_step_ms: Option<u32>,
    /// When the cycle in progress started, and how long of it was spent waiting on the
    /// workload, the controller, the off time and the device (so the rest is the harness's).
    cycle_t0: Instant,
    waits: Duration,
}

/// What the loop over cycles (`run_loop`) asks of them.
impl<'e> Cycles<'_, 'e> {
    pub fn em(&mut self) -> &mut Emitter<'e> {
        self.em
    }

    /// How much the device's files in the run directory may still grow.
    pub fn growth_bytes(&self) -> u64 {
        self.ports.growth_bytes()
    }

    /// Sets the pin-mate step of the next cut.
    pub fn set_mate_step(&mut self, step_ms: u32) -> Result<(), ControllerError> {
        self.cutter.set_mate_step(step_ms)?;
        self.mate_step_ms = Some(step_ms);
        Ok(())
    }

    /// `stop.on_dead_device = "continue"`: cut power once more and wait once more for every
    /// port; `Some(why)` ends the run.
    pub fn power_cycle_dead_device(&mut self, cycle: u32) -> Option<String> {
        let at = self.probe_at();
        self.ports.power_cycle_dead_device(self.cutter, self.plan, self.em, cycle, at)
    }

    /// A resumed run whose cycles had all ended: the drive is powered on, as between any two
    /// cycles (the harness may have died before its switch's state was saved).
    pub fn power_on_between_cycles(&mut self) {
        match self.cutter.power_on_if_off() {
            Ok(false) => {}
            Ok(true) => {
                let t_ns = self.em.now();
                let message = "the power switch read back off between cycles (the harness died after it was turned back on, or \
                               something else turned it off): turned on before the next cycle"
                    .to_string();
                self.em.emit(Event::new(t_ns, EventKind::Note { message }));
            }
            Err(e) => self.em.error(None, format!("power on before the next cycle: {e}")),
        }
    }

    /// Makes every ledger durable at the end of the run.
    pub fn sync(&mut self) -> Result<(), Fatal> {
        for lane in self.lanes.iter_mut() {
            lane.run.ledger.sync().map_err(|source| Fatal::Sync { dir: lane.dir.clone(), source })?;
        }
        Ok(())
    }
}

impl<'r, 'e> Cycles<'r, 'e> {
    pub fn new(
        plan: &'r RunPlan,
        o: &'r RunnerOptions,
        ports: &'r mut PortSet,
        lanes: &'r mut [Lane],
        cutter: &'r mut Cutter,
        em: &'r mut Emitter<'e>,
        observer: Option<&'r mut (dyn CycleObserver + 'static)>,
    ) -> Self {
        Cycles { plan, o, ports, lanes, cutter, em, observer, mate_step_ms: None, cycle_t0: Instant::now(), waits: Duration::ZERO }
    }

    /// Where a port is probed for an answer: the start of the first share.
    fn probe_at(&self) -> u64 {
        self.lanes.first().map_or(0, |l| l.span.0)
    }

    /// How the shares are read: through their own port, and through every other one.
    fn readers(&self) -> Readers {
        Readers::of(self.plan)
    }

    /// The port cycle `cycle`'s fault hits (every port, for a fault that hits every port).
    fn hit(&self, cycle: u32) -> usize {
        self.plan.faulted(cycle)
    }

    /// Aims the cutter at cycle `cycle`'s fault, on the port it hits.
    fn aim(&mut self, cycle: u32) -> Result<(), Fatal> {
        let port = self.plan.ports[self.hit(cycle)].fault_port.as_deref();
        // Checked when the run opened: every fault of the run has its controller, and the
        // link controller can fault every port the scenario faults.
        self.cutter.aim(self.plan.fault(cycle), port, self.plan.off_time(cycle)).map_err(Fatal::Aim)
    }

    /// Brings every port's ledger level with the run: `cycle` is each one's next.
    fn align(&mut self, cycle: u32) -> Result<(), Fatal> {
        let at = (self.o.clock)();
        for lane in self.lanes.iter_mut() {
            let port = self.ports.id(lane.port);
            lane.align(cycle, port, &at).map_err(|source| Fatal::Align { dir: lane.dir.clone(), source })?;
        }
        Ok(())
    }

    /// Records what the controller exchanged since the last call, if anything.
    pub fn controller_log(&mut self, cycle: Option<u32>) {
        controller_log(self.cutter, self.em, cycle);
        let lines = self.ports.take_audit();
        if !lines.is_empty() {
            let t_ns = self.em.now();
            self.em.emit(Event::new(t_ns, EventKind::AgentLog { lines }).with_cycle(cycle));
        }
    }

    /// Runs cycle `cycle`; what it came to, for the stop policy.
    pub fn one_cycle(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Fatal> {
        let plan = self.plan;
        let fault = plan.fault(cycle);
        // A fault on the one port of a one-port run hits every port.
        let (every, power) = (fault.hits_every_port() || self.ports.len() == 1, fault.is_power_cut());
        let hit = self.hit(cycle);
        self.aim(cycle)?;
        self.align(cycle)?;
        let t_start = self.em.now();
        let started =
            EventKind::CycleStarted { fault: plan.faults.is_mixed().then(|| fault.label()), off_time_ms: plan.recorded_off_time_ms(cycle) };
        self.em.emit(Event::in_cycle(t_start, cycle, started));
        let (place, planned) = cycle_placement(plan, cycle);
        (self.cycle_t0, self.waits) = (Instant::now(), Duration::ZERO);
        let phase = WritePhase { cycle, hit, every, power, place, windows: plan.dual.as_ref().map(|d| &d.spec), probe_at: self.probe_at() };
        let w = writers::write(plan, self.o, self.ports, self.lanes, self.cutter, &phase);
        for message in self.ports.notes() {
            let t_ns = self.em.now();
            self.em.emit(Event::new(t_ns, EventKind::Note { message }).with_cycle(Some(cycle)));
        }
        let mut end = CycleEnd { cycle, ..CycleEnd::default() };
        let mut findings: Vec<Finding> = Vec::new();
        let faulted = self.writers_ended(cycle, hit, every, planned, &w, &mut end)?;
        self.waits += match (&w.windows, &faulted, &w.landed) {
            // The windows are timed: the whole phase waited on them.
            (Some(_), _, _) => w.t_end - w.started,
            // Writing until the cut, and the cut command itself.
            (None, Some(out), landed) => {
                out.cut_at.unwrap_or(out.elapsed) + landed.as_ref().and_then(|l| l.as_ref().ok()).copied().unwrap_or_default()
            }
            (None, None, _) => w.t_end - w.started,
        };
        let cut = matches!(w.landed, Some(Ok(_) | Err(NoCut::Controller(_))));
        self.record_landing(cycle, &w, faulted.as_ref(), &mut end);
        if cut {
            // The ports the fault hit that have not answered yet: every port after a power
            // cut; the hit one after a link fault, unless its writer waited for it.
            let waiting: Vec<usize> = (0..self.ports.len())
                .filter(|i| *i == hit || every)
                .filter(|i| !w.ends.iter().any(|(j, pe)| j == i && pe.ready.is_some()))
                .collect();
            let answered: Vec<_> = w.ends.iter().filter_map(|(i, pe)| Some((*i, pe.ready.clone()?))).collect();
            // Cut again while the drive recovers only after a cut that landed.
            let hold = (plan.off_time(cycle), fault.recovery().filter(|_| matches!(w.landed, Some(Ok(_)))));
            if !self.settle_ports(cycle, &answered, &waiting, hold, &mut end, &mut findings)? {
                self.em.end_cycle(cycle, Verdict::Error, faulted.as_ref(), None);
                return Ok(end);
            }
        }
        if !end.dead_device && !end.dead_host && cut {
            self.format_again_if_refused(cycle, &mut end.errors)?;
        }
        let mut anomalies = 0;
        if !end.dead_device && !end.dead_host && cut {
            let t_health = Instant::now();
            anomalies = self.ports.health_after(plan, cycle, true, self.em);
            self.waits += t_health.elapsed();
        }
        if let Some(windows) = &w.windows {
            super::judge::judge_windows(self.em, plan, cycle, hit, every, windows, w.t_end, &mut findings);
        }
        // A device or host not back: nothing can be read through it this cycle (what it holds is
        // verified in a later one, if it comes back).
        if !end.dead_device && !end.dead_host {
            self.verify(cycle, last, cut && end.controller_failure.is_none(), &mut end, &mut findings)?;
        }
        self.finish(cycle, findings, end, anomalies, faulted.as_ref())
    }

    /// How the cycle's fault landed, recorded: a cut confirmed (or not: an error), a fault
    /// the controller failed, or none at all.
    fn record_landing(&mut self, cycle: u32, w: &Written, faulted: Option<&CycleOutcome>, end: &mut CycleEnd) {
        match &w.landed {
            Some(Ok(_)) => {
                // A fault that cannot be confirmed is never a clean pass: the switch reads back
                // `off`, or every port stopped answering.
                let t_confirm = Instant::now();
                let gone = w.ends.iter().any(|(_, pe)| pe.outcome.as_ref().is_ok_and(saw_device_go));
                let at = self.probe_at();
                let ports = &mut *self.ports;
                if let Err(why) = confirm_cut(self.cutter, gone, &mut || ports.any_answers(at)) {
                    self.em.error(Some(cycle), why.to_string());
                    end.errors += 1;
                    end.controller_failure = Some(ControllerStep::Unconfirmed);
                }
                self.waits += t_confirm.elapsed();
            }
            Some(Err(NoCut::Controller(e))) => {
                self.em.error(Some(cycle), format!("the fault: {e}"));
                end.errors += 1;
                end.controller_failure = Some(ControllerStep::Cut);
            }
            // The faulted writer's own error is recorded.
            Some(Err(NoCut::WriterEnded)) => {}
            None => {
                let why = match faulted.and_then(|o| o.device_lost.as_ref()) {
                    // No fault at all: the device went away while it was written.
                    Some(lost) => format!("the device went away before its fault: {lost}"),
                    None => "the fault never landed".to_string(),
                };
                self.em.error(Some(cycle), why);
                end.errors += 1;
            }
        }
    }

    /// What each port's writer did: a writer that failed has its cycle closed in its ledger and
    /// is an error; the faulted port's outcome (the first, for a fault that hits every port) is
    /// the cut's. Saves the simulated drive when no writer recorded an end (their hooks saved
    /// it otherwise).
    fn writers_ended(
        &mut self,
        cycle: u32,
        hit: usize,
        every: bool,
        planned: Option<u64>,
        w: &Written,
        end: &mut CycleEnd,
    ) -> Result<Option<CycleOutcome>, Fatal> {
        let mut faulted = None;
        for (i, pe) in &w.ends {
            if let Err(e) = &pe.outcome {
                self.em.error(Some(cycle), format!("{}{e}", self.ports.prefix(*i)));
                end.errors += 1;
                // A port whose writer failed left its cycle open in its ledger: close it.
                if let Some(lane) = self.lanes.iter_mut().find(|l| l.port == *i) {
                    let facts = self.ports.duts[*i].facts().map_err(|source| Fatal::Port { prefix: self.ports.prefix(*i), source })?;
                    lane.reopen(&facts)?;
                }
            }
        }
        // The cut's outcome: the hit port's, else (a fault that hits every port) the first port's
        // that has one; recorded once.
        let cut_of = w
            .ends
            .iter()
            .find(|(i, pe)| *i == hit && pe.outcome.is_ok())
            .or_else(|| w.ends.iter().find(|(_, pe)| every && pe.outcome.is_ok()));
        if let Some(Ok(out)) = cut_of.map(|(_, pe)| &pe.outcome) {
            let command = w.landed.as_ref().and_then(|l| l.as_ref().ok()).copied();
            self.em.cut(cycle, w.started, out, planned, self.mate_step_ms, command);
            faulted = Some(out.clone());
        }
        if w.ends.iter().all(|(_, pe)| pe.outcome.is_err()) {
            for i in 0..self.ports.len() {
                self.ports.duts[i].save().map_err(|source| Fatal::Save { prefix: self.ports.prefix(i), source })?;
            }
        }
        Ok(faulted)
    }

    /// After a cut (or a cut the controller failed, which may still have happened): power on
    /// after `off` (a link fault is back when its reset returned), say so, cut again while the
    /// drive recovers (`recovery`), record the ports whose writers waited for them
    /// (`answered`), and wait for the ports in `waiting`.
    /// `false` when the power could not be turned on (recorded).
    fn settle_ports(
        &mut self,
        cycle: u32,
        answered: &[(usize, Result<Readiness, DutError>)],
        waiting: &[usize],
        (off, recovery): (Duration, Option<&RecoveryCuts>),
        end: &mut CycleEnd,
        findings: &mut Vec<Finding>,
    ) -> Result<bool, Fatal> {
        self.ports.release(waiting);
        if !self.power_back(cycle, off, end) {
            return Ok(false);
        }
        if let Some(rc) = recovery {
            // All of it waits on the switch, the off times and the device: counted once (the
            // power-ons inside count their own).
            let (t_recovery, waited) = (Instant::now(), self.waits);
            let back = self.recovery_cuts(cycle, rc, waiting, off, end, findings)?;
            self.waits = waited + t_recovery.elapsed();
            if !back {
                return Ok(false);
            }
            // A port that did not come back between the cuts is recorded already.
            if end.dead_device || end.dead_host {
                return Ok(true);
            }
        }
        for (i, r) in answered {
            let prefix = self.ports.prefix(*i);
            self.ports.ready(*i, cycle, r.clone(), self.em, end, findings).map_err(|source| Fatal::Port { prefix, source })?;
        }
        let t_ready = Instant::now();
        self.wait_for(cycle, waiting, end, findings)?;
        self.waits += t_ready.elapsed();
        Ok(true)
    }

    /// Power on once it has been off for `off` (a link fault is back when its reset returned),
    /// and say so; `false` when the power could not be turned on (recorded).
    fn power_back(&mut self, cycle: u32, off: Duration, end: &mut CycleEnd) -> bool {
        let t_restore = Instant::now();
        let restored = self.cutter.restore(off);
        self.waits += t_restore.elapsed();
        let held = match restored {
            Ok(held) => held,
            Err(e) => {
                self.em.error(Some(cycle), format!("power on: {e}"));
                self.controller_log(Some(cycle));
                end.errors += 1;
                end.controller_failure = Some(ControllerStep::PowerOn);
                return false;
            }
        };
        let t_ns = self.em.now();
        self.em.emit(if self.cutter.is_link() {
            Event::in_cycle(t_ns, cycle, EventKind::LinkRestored {})
        } else {
            Event::in_cycle(t_ns, cycle, EventKind::PowerRestored { off_us: held.map(micros) })
        });
        true
    }

    /// The fault's cuts while the drive recovers: each at its moment drawn after the power
    /// returned (`before_ready`), or after every port in `waiting` answered again
    /// (`after_ready`: their `ready` events), held off for `off`, the drive saved after each
    /// (a persistent simulated one). A cut the switch failed ends them: the power is turned
    /// on and the cycle verifies what it can. `false` when the power could not be turned on
    /// (recorded).
    fn recovery_cuts(
        &mut self,
        cycle: u32,
        rc: &RecoveryCuts,
        waiting: &[usize],
        off: Duration,
        end: &mut CycleEnd,
        findings: &mut Vec<Finding>,
    ) -> Result<bool, Fatal> {
        let ready = rc.at == RecoveryAt::AfterReady;
        let mut since = Instant::now();
        for n in 1..=rc.cuts {
            if ready {
                self.wait_for(cycle, waiting, end, findings)?;
                if end.dead_device || end.dead_host {
                    return Ok(true);
                }
                since = Instant::now();
                self.ports.release(waiting);
            }
            std::thread::sleep(rc.delay(self.plan.seed, cycle, n).saturating_sub(since.elapsed()));
            let after_us = micros(since.elapsed());
            let cut = self.cutter.cut(off);
            let t_ns = self.em.now();
            self.em.emit(Event::in_cycle(t_ns, cycle, EventKind::RecoveryCut { n, after_us, ready }));
            // Confirmed where the switch reads its state back (a relay that cannot is taken at
            // its word; the persistent event log, where the drive keeps one, still counts it).
            let cut = cut.and_then(|()| self.cutter.confirm().unwrap_or(Ok(())));
            for i in 0..self.ports.len() {
                self.ports.duts[i].save().map_err(|source| Fatal::Save { prefix: self.ports.prefix(i), source })?;
            }
            if let Err(e) = &cut {
                self.em.error(Some(cycle), format!("recovery cut {n}: {e}"));
                end.errors += 1;
                end.controller_failure = Some(ControllerStep::Cut);
            }
            if !self.power_back(cycle, off, end) {
                return Ok(false);
            }
            if cut.is_err() {
                break;
            }
            since = Instant::now();
        }
        Ok(true)
    }

    /// Waits for the ports in `which` to answer again (a `ready` event each, or a dead
    /// device); which device a port is about being unknown (an ambiguous identity) ends the
    /// run.
    fn wait_for(&mut self, cycle: u32, which: &[usize], end: &mut CycleEnd, findings: &mut Vec<Finding>) -> Result<(), Fatal> {
        let at = self.probe_at();
        self.ports
            .wait_for(which, at, self.plan.readiness_timeout, cycle, self.em, end, findings)
            .map_err(|(i, source)| Fatal::Port { prefix: self.ports.prefix(i), source })
    }

    /// Verifies every share through every port ([`verify_lanes`]); `confirmed`: the cycle's
    /// fault is known to have happened.
    fn verify(&mut self, cycle: u32, last: bool, confirmed: bool, end: &mut CycleEnd, findings: &mut Vec<Finding>) -> Result<(), Fatal> {
        let v0 = Instant::now();
        let of = CheckOf { cycle, last, hold_seen: may_hold(self.plan, cycle, confirmed) };
        let readers = self.readers();
        verify_lanes(self.plan, &readers, &of, &mut self.ports.duts, self.lanes, self.em, findings, end)?;
        self.waits += v0.elapsed();
        Ok(())
    }

    /// Finishes the cycle the harness died in (`faultline resume`): whatever it was doing,
    /// power the drive (back) on as that cycle's fault would have been (in a mix, its own),
    /// wait for every port, read each controller's health (an unsafe shutdown is not expected
    /// or ruled out: nobody knows whether the fault landed), and verify every share through
    /// every port. Every port's ledger has closed the cycle as interrupted, so none of its
    /// writes counts as durable beyond what had been recorded.
    pub fn interrupted(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Fatal> {
        (self.cycle_t0, self.waits) = (Instant::now(), Duration::ZERO);
        // A port whose writer had not begun the cycle: begun and interrupted, with no write.
        self.align(cycle + 1)?;
        let mut end = CycleEnd { cycle, ..CycleEnd::default() };
        let mut findings: Vec<Finding> = Vec::new();
        self.aim(cycle)?;
        let every: Vec<usize> = (0..self.ports.len()).collect();
        // No cut during recovery: nobody knows whether the cycle's own cut came.
        if !self.settle_ports(cycle, &[], &every, (Duration::ZERO, None), &mut end, &mut findings)? {
            self.em.end_cycle(cycle, Verdict::Error, None, None);
            return Ok(end);
        }
        let mut anomalies = 0;
        if !end.dead_device && !end.dead_host {
            anomalies = self.ports.health_after(self.plan, cycle, false, self.em);
            // Nobody knows whether the fault happened: under the flush contract, what is seen
            // may still sit in a cache.
            self.verify(cycle, last, false, &mut end, &mut findings)?;
        }
        self.finish(cycle, findings, end, anomalies, None)
    }

    /// The end of every cycle: the observer, the findings, the controller's log, the record.
    fn finish(
        &mut self,
        cycle: u32,
        findings: Vec<Finding>,
        mut end: CycleEnd,
        anomalies: usize,
        outcome: Option<&CycleOutcome>,
    ) -> Result<CycleEnd, Fatal> {
        if let Some(obs) = self.observer.as_deref_mut() {
            obs.checked(&CycleCheck { cycle, findings: &findings, truth: self.ports.ground_truth() });
        }
        end.new_findings = self.em.findings(cycle, &findings);
        self.controller_log(Some(cycle));
        let harness = self.cycle_t0.elapsed().saturating_sub(self.waits);
        self.em.end_cycle(cycle, stop::verdict(&end, anomalies), outcome, Some(harness));
        Ok(end)
    }
}

/// Where cycle `cycle`'s fault lands, and the `after_ms` drawn or planned for it: the
/// scenario's `[cut]` placement, or, with windows around the fault (a dual-port plan), right
/// after the warm-up and the baseline (where a host's clean shutdown begins: its writer drains
/// and flushes, then the host goes down).
fn cycle_placement(plan: &RunPlan, cycle: u32) -> (CutPlacement, Option<u64>) {
    let fault = plan.fault(cycle);
    match &plan.dual {
        Some(d) => {
            let fire_at = d.spec.warmup_ms + d.spec.baseline_ms;
            let place = if fault.is_host_shutdown() {
                CutPlacement::Shutdown { after_ms: fire_at, after_completions: 0, controller: false }
            } else {
                CutPlacement::AfterTime { after_ms: fire_at }
            };
            (place, Some(fire_at))
        }
        None => {
            let shutdown = fault.is_clean_shutdown().then(|| fault.is_normal_shutdown());
            placement(&plan.cut, shutdown, &mut cycle_rng(plan.seed, PLACE_SALT, cycle))
        }
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
    #[error(transparent)]
    Reopen(#[from] ReopenRunError),
    #[error(transparent)]
    Verify(#[from] ShareCheckError),
    /// The cycle's fault has no controller (checked when the run opened: a defect here).
    #[error("the cycle's fault: {0}")]
    Aim(ControllerError),
    /// A port could not be opened again, or its identity matches more than one device.
    #[error("{prefix}{source}")]
    Port { prefix: String, source: DutError },
    /// The simulated drive could not be saved after the write phase.
    #[error("{prefix}{source}")]
    Save { prefix: String, source: DutError },
    /// A port's ledger could not be brought level with the run's cycle.
    #[error("{}: cannot record the cycles its writer never began: {source}", .dir.display())]
    Align { dir: PathBuf, source: crate::ledger::LedgerError },
    /// The format sent after a format cut short could not be recorded.
    #[error("{}: cannot record the format sent after the cut: {source}", .dir.display())]
    Reformat { dir: PathBuf, source: crate::ledger::LedgerError },
    /// A ledger could not be made durable at the end of the run.
    #[error("{}: {source}", .dir.display())]
    Sync { dir: PathBuf, source: crate::ledger::LedgerError },
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
