//! One dual-port cycle: every writer port writes; the fault lands after warm-up and baseline
//! (fired by the faulted port's writer, or by every writer for a fault that hits every port);
//! then what a one-port cycle does after its fault, for every port: confirm the cut, power on
//! after the off time, wait until each port answers (found again by its identity), read each
//! controller's health; then the windows of the ports the fault did not hit are judged, and
//! every share is verified through every port.

use super::error::WriterError;
use super::judge::{self, judge, Judged};
use super::{DualRunError, PortEnd, TICK};
use crate::events::Event;
use crate::port::PortId;
use crate::run::OpenRun;
use crate::runner::dut::{DutCycleError, DutError, Readiness, Workload};
use crate::runner::emit::Emitter;
use crate::runner::fault::{confirm_cut, saw_device_go, ControllerError, Cutter, FaultThread};
use crate::runner::lane::{may_hold, verify_lanes, CheckOf, Lane, Readers, ReopenRunError, ShareCheckError};
use crate::runner::ports::{controller_log, PortSet};
use crate::runner::run_loop::Cycler;
use crate::runner::stop::{self, ControllerStep, CycleEnd};
use crate::runner::{CycleCheck, CycleObserver, RunnerOptions};
use crate::scenario::{DualPlan, PortRole, RunPlan};
use crate::verify::Finding;
use crate::writer::{CutPlacement, CycleOptions, Phase, PortSamples, StopToken, Windows};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a dual-port run holds across its cycles.
pub(super) struct DualCycles<'r, 'e> {
    pub plan: &'r RunPlan,
    pub dual: &'r DualPlan,
    pub ports: &'r mut PortSet,
    pub lanes: &'r mut [Lane],
    pub cutter: &'r mut Cutter,
    pub em: &'r mut Emitter<'e>,
    pub o: &'r RunnerOptions,
    /// The pin-mate step set for the next cut, if the scenario sweeps them.
    pub mate_step_ms: Option<u32>,
    pub observer: Option<&'r mut (dyn CycleObserver + 'static)>,
}

impl<'e> Cycler<'e> for DualCycles<'_, 'e> {
    type Error = DualRunError;

    fn em(&mut self) -> &mut Emitter<'e> {
        self.em
    }

    fn growth_bytes(&self) -> u64 {
        self.ports.growth_bytes()
    }

    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), ControllerError> {
        self.cutter.set_mate_step(step_ms)?;
        self.mate_step_ms = Some(step_ms);
        Ok(())
    }

    fn cycle(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, DualRunError> {
        Ok(self.one_cycle(cycle, last)?)
    }

    fn finish_interrupted(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, DualRunError> {
        Ok(self.interrupted(cycle, last)?)
    }

    fn power_cycle_dead_device(&mut self, cycle: u32) -> Option<String> {
        let at = self.probe_at();
        self.ports.power_cycle_dead_device(self.cutter, self.plan, self.em, cycle, at)
    }

    fn sync(&mut self) -> Result<(), DualRunError> {
        for lane in self.lanes.iter_mut() {
            lane.run.ledger.sync().map_err(|source| DualRunError::Sync { dir: lane.dir.clone(), source })?;
        }
        Ok(())
    }
}

/// What the write phase of a cycle left.
struct Written {
    ends: Vec<(usize, PortEnd)>,
    /// The fault: how long its command took, or why there was no cut (`None`: it never
    /// landed).
    landed: Option<Result<Duration, NoCut>>,
    windows: Arc<Windows>,
    started: Instant,
    t_end: Instant,
}

/// What ends a dual-port run in a harness error, from inside a cycle.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DualCycleError {
    /// A port whose writer failed could not be opened again.
    #[error("port {port}: {source}")]
    Port { port: String, source: DutError },
    /// A port's run (its ledger) could not be taken up again after its writer failed.
    #[error(transparent)]
    Reopen(#[from] ReopenRunError),
    /// The simulated drive could not be saved after the fault.
    #[error("port {port}: {source}")]
    Save { port: String, source: DutError },
    /// A share could not be verified or its verification recorded.
    #[error(transparent)]
    Verify(#[from] ShareCheckError),
    /// The cycle's fault has no controller (checked when the ports opened: a defect here).
    #[error("the cycle's fault: {0}")]
    Aim(ControllerError),
    /// A port's ledger could not be brought level with the run's cycle.
    #[error("{}: cannot record the cycles its writer never began: {source}", .dir.display())]
    Align { dir: std::path::PathBuf, source: crate::ledger::LedgerError },
}

/// Why a cycle had no cut.
#[derive(Clone, Debug)]
enum NoCut {
    /// The controller failed the command (the cut may or may not have happened).
    Controller(ControllerError),
    /// The faulted port's writer ended (failed) before it reached the fault.
    WriterEnded,
}

impl DualCycles<'_, '_> {
    /// Where a port is probed for an answer: the start of the first share.
    fn probe_at(&self) -> u64 {
        self.lanes.first().map_or(0, |l| l.span.0)
    }

    /// Brings every port's ledger level with the run: `cycle` is each one's next.
    fn align(&mut self, cycle: u32) -> Result<(), DualCycleError> {
        let at = (self.o.clock)();
        for lane in self.lanes.iter_mut() {
            let port = PortId(lane.port as u8);
            lane.align(cycle, port, &at).map_err(|source| DualCycleError::Align { dir: lane.dir.clone(), source })?;
        }
        Ok(())
    }

    /// Finishes the cycle the harness died in (`faultline resume`): whatever it was doing,
    /// power the drive (back) on, wait for every port, read each controller's health (an
    /// unsafe shutdown is not expected or ruled out: nobody knows whether the fault landed),
    /// and verify every share through every port. Every port's ledger has closed the cycle as
    /// interrupted, so none of its writes counts as durable beyond what had been recorded.
    fn interrupted(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, DualCycleError> {
        // A port whose writer had not begun the cycle: begun and interrupted, with no write.
        self.align(cycle + 1)?;
        let mut end = CycleEnd { cycle, ..CycleEnd::default() };
        let mut findings: Vec<Finding> = Vec::new();
        self.ports.release_all();
        // Powered back on as that cycle's fault would have been (in a mix, its own).
        let hit = self.dual.faulted(self.plan, cycle);
        self.cutter.aim(self.plan.fault(cycle), Some(&self.dual.ports[hit].fault_port)).map_err(DualCycleError::Aim)?;
        if let Err(e) = self.cutter.restore(Duration::ZERO) {
            self.em.error(Some(cycle), format!("power on: {e}"));
            self.controller_log(Some(cycle));
            end.errors += 1;
            end.controller_failure = Some(ControllerStep::PowerOn);
            self.em.end_cycle(cycle, crate::events::Verdict::Error, None, None);
            return Ok(end);
        }
        let t_ns = self.em.now();
        self.em.emit(if self.cutter.is_link() { Event::LinkRestored { t_ns, cycle } } else { Event::PowerRestored { t_ns, cycle } });
        self.wait_all(cycle, &mut end, &mut findings)?;
        let mut anomalies = 0;
        if !end.dead_device {
            anomalies = self.ports.health_after(self.plan, cycle, false, self.em);
            let (plan, dual) = (self.plan, self.dual);
            // Nobody knows whether the fault happened: under the flush contract, what is seen
            // may still sit in a cache.
            let of = CheckOf { cycle, last, hold_seen: may_hold(plan, cycle, false) };
            verify_lanes(plan, &Readers::of(dual), &of, &mut self.ports.duts, self.lanes, self.em, &mut findings, &mut end)?;
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
        outcome: Option<&crate::writer::CycleOutcome>,
    ) -> Result<CycleEnd, DualCycleError> {
        let truth = self.ports.ground_truth();
        if let Some(obs) = self.observer.as_deref_mut() {
            obs.checked(&CycleCheck { cycle, findings: &findings, truth });
        }
        end.new_findings = self.em.findings(cycle, &findings);
        self.controller_log(Some(cycle));
        self.em.end_cycle(cycle, stop::verdict(&end, anomalies), outcome, None);
        Ok(end)
    }

    /// One cycle; what it came to, for the stop policy.
    fn one_cycle(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, DualCycleError> {
        let (plan, dual) = (self.plan, self.dual);
        let fault = plan.fault(cycle);
        let (every, power) = (fault.hits_every_port(), fault.is_power_cut());
        let hit = dual.faulted(plan, cycle);
        // Checked when the ports opened: every fault of the run has its controller, and the
        // link controller can fault every port the scenario faults.
        self.cutter.aim(fault, Some(&dual.ports[hit].fault_port)).map_err(DualCycleError::Aim)?;
        self.align(cycle)?;
        let t_start = self.em.now();
        self.em.emit(Event::CycleStarted { t_ns: t_start, cycle, fault: plan.faults.is_mixed().then(|| fault.label()) });
        let mut end = CycleEnd { cycle, ..CycleEnd::default() };
        let w = self.write(cycle, hit, every, power);
        for message in self.ports.notes() {
            let t_ns = self.em.now();
            self.em.emit(Event::Note { t_ns, cycle: Some(cycle), message });
        }
        // A port whose writer failed left its cycle open in its ledger: close it.
        for (i, pe) in &w.ends {
            if pe.outcome.is_ok() {
                continue;
            }
            if let Some(lane) = self.lanes.iter_mut().find(|l| l.port == *i) {
                let facts =
                    self.ports.duts[*i].facts().map_err(|source| DualCycleError::Port { port: dual.ports[*i].name.clone(), source })?;
                lane.reopen(&facts)?;
            }
        }
        let mut findings: Vec<Finding> = Vec::new();
        // What each port's writer did.
        let mut faulted_outcome = None;
        for (i, pe) in &w.ends {
            match &pe.outcome {
                Err(e) => {
                    self.em.error(Some(cycle), format!("port {}: {e}", dual.ports[*i].name));
                    end.errors += 1;
                }
                Ok(out) if *i == hit || (every && faulted_outcome.is_none()) => {
                    self.em.cut(cycle, w.started, out, Some(dual.spec.warmup_ms + dual.spec.baseline_ms), self.mate_step_ms);
                    faulted_outcome = Some(out.clone());
                }
                Ok(_) => {}
            }
            if let Some(r) = &pe.ready {
                self.ports
                    .ready(*i, cycle, r.clone(), self.em, &mut end, &mut findings)
                    .map_err(|source| DualCycleError::Port { port: dual.ports[*i].name.clone(), source })?;
            }
        }
        match &w.landed {
            Some(Ok(_)) => {}
            Some(Err(NoCut::Controller(e))) => {
                self.em.error(Some(cycle), format!("the fault: {e}"));
                end.errors += 1;
                end.controller_failure = Some(ControllerStep::Cut);
            }
            Some(Err(NoCut::WriterEnded)) => {
                self.em.error(Some(cycle), "the fault: the faulted port's writer ended before its fault".into());
                end.errors += 1;
            }
            None => {
                self.em.error(Some(cycle), "the fault never landed".into());
                end.errors += 1;
            }
        }
        // Saved in the writers' hooks (at the cut, and right before each records its cycle's
        // end, after which nothing writes); saved here only when no writer recorded an end.
        if w.ends.iter().all(|(_, pe)| pe.outcome.is_err()) {
            for (i, d) in self.ports.duts.iter_mut().enumerate() {
                d.save().map_err(|source| DualCycleError::Save { port: dual.ports[i].name.clone(), source })?;
            }
        }
        let cut = matches!(w.landed, Some(Ok(_) | Err(NoCut::Controller(_))));
        if power && cut {
            // The power went off (or may have: a cut that failed may still have happened):
            // confirm it while it is off, then power on after the off time and wait for every
            // port, as a one-port cycle does.
            if w.landed.as_ref().is_some_and(Result::is_ok) {
                let gone = w.ends.iter().any(|(_, pe)| pe.outcome.as_ref().is_ok_and(saw_device_go));
                let at = self.probe_at();
                let ports = &mut *self.ports;
                if let Err(why) = confirm_cut(self.cutter, gone, &mut || ports.any_answers(at)) {
                    self.em.error(Some(cycle), why.to_string());
                    end.errors += 1;
                    end.controller_failure = Some(ControllerStep::Unconfirmed);
                }
            }
            if let Err(e) = self.power_on(cycle) {
                self.em.error(Some(cycle), format!("power on: {e}"));
                self.controller_log(Some(cycle));
                end.errors += 1;
                end.controller_failure = Some(ControllerStep::PowerOn);
                self.em.end_cycle(cycle, crate::events::Verdict::Error, faulted_outcome.as_ref(), None);
                return Ok(end);
            }
            self.wait_all(cycle, &mut end, &mut findings)?;
        }
        let mut anomalies = 0;
        if !end.dead_device && cut {
            anomalies = self.ports.health_after(self.plan, cycle, true, self.em);
        }
        self.judge_windows(cycle, hit, every, &w, &mut findings);
        // Verify every share through its own port and through every other one.
        if !end.dead_device {
            let (plan, dual) = (self.plan, self.dual);
            let of = CheckOf { cycle, last, hold_seen: may_hold(plan, cycle, cut && end.controller_failure.is_none()) };
            verify_lanes(plan, &Readers::of(dual), &of, &mut self.ports.duts, self.lanes, self.em, &mut findings, &mut end)?;
        }
        self.finish(cycle, findings, end, anomalies, faulted_outcome.as_ref())
    }

    /// Waits for every port to answer again (a `ready` event each, or a dead device); which
    /// device a port is about being unknown (an ambiguous identity) ends the run.
    fn wait_all(&mut self, cycle: u32, end: &mut CycleEnd, findings: &mut Vec<Finding>) -> Result<(), DualCycleError> {
        let at = self.probe_at();
        self.ports
            .wait_all(at, self.plan.readiness_timeout, cycle, self.em, end, findings)
            .map_err(|(i, source)| DualCycleError::Port { port: self.dual.ports[i].name.clone(), source })
    }

    /// Power on after the off time (the cutter sleeps it), and say so.
    fn power_on(&mut self, cycle: u32) -> Result<(), ControllerError> {
        self.ports.release_all();
        self.cutter.restore(self.plan.off_time)?;
        let t_ns = self.em.now();
        self.em.emit(Event::PowerRestored { t_ns, cycle });
        Ok(())
    }

    /// Records what the controller exchanged since the last call, if anything.
    pub fn controller_log(&mut self, cycle: Option<u32>) {
        controller_log(self.cutter, self.em, cycle);
    }

    /// The write phase: every writer port on its own thread, the fault on its own, the
    /// windows on the main thread; the faulted port's writer (every writer, for a fault that
    /// hits every port) ends its cycle at the cut, the others are stopped after the settle.
    fn write(&mut self, cycle: u32, hit: usize, every: bool, power: bool) -> Written {
        let (plan, dual, o) = (self.plan, self.dual, self.o);
        let spec = &dual.spec;
        let windows = Arc::new(Windows::new(self.ports.len()));
        let fire_at = spec.warmup_ms + spec.baseline_ms;
        let stop = StopToken::default();
        let fault_lane = self.lanes.iter().position(|l| l.port == hit);
        let started = Instant::now();
        let (landed_tx, landed_rx) = mpsc::channel::<Result<Duration, NoCut>>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Readiness, DutError>>();
        let readiness = plan.readiness_timeout;
        let at0 = self.probe_at();
        let ticking = std::sync::atomic::AtomicBool::new(true);
        let (devs, lanes, cutter) = (&mut self.ports.duts, &mut *self.lanes, &mut *self.cutter);
        // The fault's thread outlives the writers' (whose hooks fire it): an outer scope.
        std::thread::scope(|outer| {
            let fault = FaultThread::spawn(outer, cutter, plan.off_time);
            let fault = &fault;
            std::thread::scope(|sc| {
                let mut handles = Vec::new();
                let mut lane_of: Vec<Option<&mut Lane>> = (0..devs.len()).map(|_| None).collect();
                for l in lanes.iter_mut() {
                    let p = l.port;
                    lane_of[p] = Some(l);
                }
                let mut idle = Vec::new();
                for (i, (dev, lane)) in devs.iter_mut().zip(lane_of).enumerate() {
                    let Some(lane) = lane else {
                        idle.push((i, dev));
                        continue;
                    };
                    let (landed_tx, ready_tx, windows, stop) = (landed_tx.clone(), ready_tx.clone(), Arc::clone(&windows), stop.clone());
                    // This writer's cycle ends at the cut; the port it writes through is hit.
                    let cuts = i == hit || every;
                    let (c, first_id) = lane.run.next_cycle();
                    debug_assert_eq!(c, cycle);
                    let copts = CycleOptions {
                        cycle,
                        first_id,
                        started_at: (o.clock)(),
                        port: PortId(i as u8),
                        max_writes: None,
                        duration: None,
                        cut: cuts.then_some(CutPlacement::AfterTime { after_ms: fire_at }),
                        checkpoint_every: dev.checkpoint_every(),
                        drain_timeout: readiness.clamp(Duration::from_secs(1), Duration::from_secs(30)),
                        stop: (!cuts).then_some(stop),
                        samples: Some(PortSamples { windows: Arc::clone(&windows), slot: i }),
                        fill: crate::writer::Fill::Auto,
                        clock_from: Some(started),
                        before_end: None,
                    };
                    handles.push(sc.spawn(move || {
                        let OpenRun { ledger, layout, format, .. } = &mut lane.run;
                        let mut hook = || {
                            windows.enter(Phase::Fault);
                            let r = fault.fire();
                            let _ = landed_tx.send(r.clone().map_err(NoCut::Controller));
                            r.map(|_| ())
                        };
                        let w = Workload { layout, format, contract: plan.contract, opts: &copts };
                        let outcome = dev.run_cycle(&w, ledger, &mut hook).map_err(|e| match e {
                            DutCycleError::Write(e) => WriterError::Write(e),
                            DutCycleError::Dut(e) => WriterError::Target(e),
                        });
                        if i == hit && outcome.is_err() && !fault.fired() {
                            // The fault did not land: tell the main thread not to wait for it.
                            let _ = landed_tx.send(Err(NoCut::WriterEnded));
                        }
                        // A link fault is back when its reset returns: the port it hit is waited for
                        // here. After a power cut, every port waits for the power to come back on.
                        let ready = (cuts && !power).then(|| dev.wait_ready(at0, readiness));
                        if let (Some(r), true) = (&ready, i == hit) {
                            let _ = ready_tx.send(r.clone());
                        }
                        (i, PortEnd { outcome, ready })
                    }));
                }
                drop((landed_tx, ready_tx));
                // A thread that only sleeps: how late it wakes is how long the machine kept the
                // harness from running. A port that stalls while the harness itself could not run
                // says nothing about the drive.
                let ticker = {
                    let (windows, ticking) = (Arc::clone(&windows), &ticking);
                    sc.spawn(move || {
                        while ticking.load(std::sync::atomic::Ordering::Acquire) {
                            let wanted = Instant::now() + TICK;
                            std::thread::sleep(TICK);
                            windows.record_lateness(wanted, Instant::now());
                        }
                    })
                };
                // The main thread: the windows, a fault on a port that writes nothing, the end.
                std::thread::sleep(Duration::from_millis(spec.warmup_ms));
                windows.enter(Phase::Baseline);
                let mut landed = None;
                if fault_lane.is_none() && !every {
                    std::thread::sleep(Duration::from_millis(spec.baseline_ms));
                    windows.enter(Phase::Fault);
                    landed = Some(fault.fire().map_err(NoCut::Controller));
                }
                let budget = Duration::from_millis(fire_at) + plan.off_time + readiness + Duration::from_secs(30);
                let landed = match landed {
                    Some(l) => Some(l),
                    None => landed_rx.recv_timeout(budget).ok(),
                };
                let ready = match (&landed, fault_lane) {
                    (Some(Ok(_)), _) if power => None,
                    (Some(Ok(_)), Some(_)) => ready_rx.recv_timeout(readiness + Duration::from_secs(35)).ok(),
                    (Some(Ok(_)), None) => idle.iter_mut().find(|(i, _)| *i == hit).map(|(_, d)| d.wait_ready(at0, readiness)),
                    _ => None,
                };
                if matches!(ready, Some(Ok(_))) {
                    std::thread::sleep(Duration::from_millis(spec.settle_ms));
                }
                windows.enter(Phase::After);
                stop.stop();
                ticking.store(false, std::sync::atomic::Ordering::Release);
                let _ = ticker.join();
                let ends: Vec<(usize, PortEnd)> = handles.into_iter().filter_map(|h| h.join().ok()).collect();
                let t_end = Instant::now();
                Written { ends, landed, windows: Arc::clone(&windows), started, t_end }
            })
        })
    }

    /// Judges the ports the fault did not hit against their baseline, unless the harness
    /// itself was kept from running long enough to explain a breach (an overloaded machine):
    /// then the breaches are noted, not found. Emits each port's window.
    fn judge_windows(&mut self, cycle: u32, hit: usize, every: bool, w: &Written, findings: &mut Vec<Finding>) {
        let (dual, spec) = (self.dual, &self.dual.spec);
        let windows = &w.windows;
        let faulted_name = if every { "all".to_string() } else { dual.ports[hit].name.clone() };
        let starved = windows.lateness(Phase::Fault).max(windows.lateness(Phase::Baseline));
        let void = starved > Duration::from_millis((spec.budget.max_stall_ms / 5).max(25));
        for (i, p) in dual.ports.iter().enumerate() {
            let is_hit = i == hit || every;
            let base = windows.figures(i, Phase::Baseline, w.t_end);
            let during = windows.figures(i, Phase::Fault, w.t_end);
            let mut judged = Judged::default();
            if let (false, PortRole::Writer, Some(b), Some(d)) = (is_hit, p.role, &base, &during) {
                judged = judge(&p.name, b, d, &spec.budget);
                if void && !judged.breaches.is_empty() {
                    let t_ns = self.em.now();
                    self.em.emit(Event::Note {
                        t_ns,
                        cycle: Some(cycle),
                        message: format!(
                            "port {} not judged in cycle {cycle}: the harness itself was kept from running for {:.1} ms (the machine is overloaded), so these say nothing about the drive: {}",
                            p.name,
                            starved.as_secs_f64() * 1e3,
                            judged.breaches.join("; ")
                        ),
                    });
                    judged.breaches.clear();
                }
                for breach in &judged.breaches {
                    findings.push(judge::finding(cycle, &p.name, &faulted_name, breach));
                }
            }
            let t_ns = self.em.now();
            let series = windows.series(i);
            let from = windows.started(Phase::Baseline).map_or(0, |d| (d.as_nanos() / crate::writer::windows::BUCKET.as_nanos()) as usize);
            // To the last completion: the drain after the window shows a stalled port coming back.
            let upto = series.len();
            let kept = series.get(from.min(upto)..upto).unwrap_or_default();
            let em = &mut *self.em;
            let t_of = |ph| windows.started(ph).map(|d| em.ns(windows.epoch() + d));
            let (baseline_t_ns, fault_t_ns, window_end_t_ns) = (t_of(Phase::Baseline), t_of(Phase::Fault), t_of(Phase::After));
            em.emit(Event::PortWindow {
                t_ns,
                cycle,
                port: PortId(i as u8),
                name: p.name.clone(),
                faulted: is_hit,
                baseline_t_ns,
                fault_t_ns,
                window_end_t_ns,
                baseline: base,
                fault: during,
                throughput_ratio: judged.throughput_ratio,
                p99_ratio: judged.p99_ratio,
                disturbed: !judged.breaches.is_empty(),
                harness_late_us: Some(u64::try_from(starved.as_micros()).unwrap_or(u64::MAX)),
                bucket_ms: crate::writer::windows::BUCKET.as_millis() as u32,
                series_bytes: kept.iter().map(|b| b.bytes).collect(),
                series_max_latency_us: kept.iter().map(|b| b.max_latency_us).collect(),
            });
        }
    }
}
