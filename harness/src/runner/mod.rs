//! The scenario-driven cycle runner behind `faultline run SCENARIO.toml`.
//!
//! One cycle: `start -> write (queue full) -> fault at the placement -> confirm -> off time ->
//! restore -> ready -> health -> verify -> record -> stop policy`. The fault is a power cut
//! through the power switch, a link reset through the link controller, or a clean shutdown (the
//! writer drains, then power is cut).
//!
//! The runner takes a [`RunPlan`] (a scenario validated once) and reaches the device only
//! through [`Dut`](dut::Dut): the simulated drive, its power switched in-process or through a
//! protocol emulator started here and driven by the real controller driver (so the whole path
//! from controller spec to verification runs without hardware); or a real device, found again
//! by its identity after every fault.
//!
//! Verification after every fault covers every byte written or in flight since the previous
//! check ([`regions`]), plus `verify.sample_bytes` of seeded random chunks of the span; the
//! whole span every `verify.full_every_cycles` and at the end.
//!
//! Rooms: [`setup`] (opening), [`dut`] (the device seam), [`fault`] (placement, cutters,
//! confirmation), [`regions`], [`stop`] (the stop policy, suspension), [`emit`] (run clock,
//! finding deduplication), [`resume`] (taking a run up again), `cycle` (one cycle's steps).

mod cycle;
pub mod dut;
mod emit;
pub mod fault;
pub mod regions;
mod resume;
pub mod setup;
pub mod stop;

use crate::events::{Event, Sinks, Verdict};
use crate::report::{Recorder, RunModel};
use crate::run::OpenRun;
use crate::scenario::RunPlan;
use dut::HealthLogs;
use emit::Emitter;
use faultline_drivers::control::ControlEnv;
use setup::{setup, Setup};
use std::path::Path;
use std::time::{Duration, Instant};
use stop::{short_of_space, ErrorStreak};

pub use fault::{draw_after_ms, placement, ControllerError};
pub use regions::{coalesce, sample_regions, written_regions};
pub use stop::MIN_FREE_BYTES;

/// What the binary supplies: the run id and the wall clock (the harness has none).
pub struct RunnerOptions {
    pub run_id: u64,
    /// Wall-clock start of the run, RFC 3339.
    pub started_at: String,
    /// Wall-clock timestamps for the ledger's cycle records.
    pub clock: fn() -> String,
    /// Where controllers find the machine, and their timeouts.
    pub control_env: ControlEnv,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub verdict: Verdict,
    pub cycles_run: u32,
    /// Why the run ended before `cycles.count`, if it did.
    pub stopped: Option<String>,
    /// Every harness error, as the events carry them.
    pub errors: Vec<String>,
    /// Lines the opener of a real target asks to show (fallback engine, buffered I/O).
    pub notes: Vec<String>,
    /// The run stopped without ending (the run directory ran short of space): `stopped` says
    /// why, and `faultline resume` takes it up again.
    pub suspended: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A consumer of the event stream failed: the run's outputs are incomplete.
    #[error("the run's reports are incomplete: {0}")]
    Reports(#[from] crate::events::SinkError),
    /// A run could not be taken up again; nothing was recorded.
    #[error("cannot resume the run: {0}")]
    Resume(setup::SetupError),
}

/// An error that ends the run with a harness error (recorded as `harness_error`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Fatal {
    #[error("the run is not open")]
    NotOpen,
    #[error("cannot reopen the run after a failed cycle: {0}")]
    Reopen(crate::run::RunError),
    #[error(transparent)]
    Ledger(#[from] crate::ledger::LedgerError),
    #[error(transparent)]
    Dut(#[from] dut::DutError),
}

/// How the cycles ended.
enum Ending {
    /// Every cycle ran.
    Done,
    /// The stop policy ended the run early, for this reason.
    Stopped(String),
    /// The run stopped without ending, to be resumed (the run directory ran short of space).
    Suspended(String),
}

/// Runs a plan in `run_dir`, sending every event to `sinks`.
///
/// `prior` is `None` for a new run (`run_dir` must not hold one). For `faultline resume` it
/// holds the events the run had recorded before the harness died (their consumers in `sinks`
/// other than the log have seen them): the run goes on from the ledger and the saved drive,
/// finishing the cycle the harness died in, until `cycles.count` cycles have ended.
///
/// Harness errors end up as `harness_error` events and an `error` verdict; `Err` when a
/// consumer of the events failed, or when a resumed run could not be set up again (then
/// nothing is recorded, and the run can be resumed once the cause is fixed).
pub fn run_scenario(
    plan: &RunPlan,
    run_dir: &Path,
    sinks: Sinks<'_>,
    o: &RunnerOptions,
    prior: Option<&[Event]>,
) -> Result<RunSummary, RunnerError> {
    run_observed(plan, run_dir, sinks, o, prior, None)
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

/// [`run_scenario`], with `observer` told of every cycle's verification.
pub fn run_observed(
    plan: &RunPlan,
    run_dir: &Path,
    sinks: Sinks<'_>,
    o: &RunnerOptions,
    prior: Option<&[Event]>,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
) -> Result<RunSummary, RunnerError> {
    let resuming = prior.is_some();
    let prior = prior.unwrap_or_default();
    let mut em = Emitter::new(Recorder::resumed(sinks, RunModel::from_events(prior)), prior);
    let started = prior.iter().any(|e| matches!(e, Event::RunStarted { .. }));
    let run_started = |run_id: u64, target: String| Event::RunStarted {
        t_ns: 0,
        run_id: format!("{run_id:016x}"),
        scenario: plan.name().to_string(),
        target,
        contract: plan.contract,
        cycles_planned: plan.cycles,
        seed: plan.seed,
        started_at: o.started_at.clone(),
    };
    let mut cycles_run = 0;
    let mut notes = Vec::new();
    let suspended = |mut em: Emitter, cycles_run, why: String, notes| {
        // A resume refused at once (still short of space) records nothing: there is no room.
        if em.emitted > 0 {
            let t_ns = em.now();
            em.emit(Event::RunSuspended { t_ns, reason: why.clone() });
        }
        let Emitter { errors, .. } = em;
        Ok(RunSummary { verdict: Verdict::Error, cycles_run, stopped: Some(why), errors, notes, suspended: true })
    };
    let stopped = match setup(plan, run_dir, o, resuming) {
        Ok(mut st) => {
            if !started {
                em.emit(run_started(st.header.run_id, st.header.target_identity.clone()));
            }
            notes = std::mem::take(&mut st.notes);
            for message in &notes {
                let t_ns = em.now();
                em.emit(Event::Note { t_ns, cycle: None, message: message.clone() });
            }
            match cycles(plan, o, run_dir, &mut st, &mut em, &mut cycles_run, resuming.then_some(prior), observer) {
                Ok(Ending::Done) => None,
                Ok(Ending::Stopped(why)) => Some(why),
                Ok(Ending::Suspended(why)) => return suspended(em, cycles_run, why, notes),
                Err(e) => {
                    // Short of space: the error is most likely that; suspend rather than end.
                    if let Some(why) = short_of_space(run_dir, st.dut.growth_bytes()) {
                        return suspended(em, cycles_run, format!("{e}; {why}"), notes);
                    }
                    em.error(None, e.to_string());
                    Some(e.to_string())
                }
            }
        }
        Err(e) if resuming => return Err(RunnerError::Resume(e)),
        Err(e) => {
            em.emit(run_started(o.run_id, "unknown (the target was not opened)".into()));
            em.error(None, e.to_string());
            Some(e.to_string())
        }
    };
    if let Some(reason) = &stopped {
        let t_ns = em.now();
        em.emit(Event::RunStopped { t_ns, reason: reason.clone() });
    }
    let t = em.now();
    let Emitter { rec, errors, .. } = em;
    let verdict = rec.end(t)?;
    Ok(RunSummary { verdict, cycles_run, stopped, errors, notes, suspended: false })
}

/// What the cycles share.
struct Cycles<'r, 'e> {
    plan: &'r RunPlan,
    o: &'r RunnerOptions,
    run_dir: &'r Path,
    st: &'r mut Setup,
    em: &'r mut Emitter<'e>,
    observer: Option<&'r mut (dyn CycleObserver + 'static)>,
    span: (u64, u64),
    /// Writes below this id have been verified since they were written.
    checked_upto: u64,
    streak: ErrorStreak,
    /// The pin-mate step set for the next cut, if the scenario sweeps them.
    mate_step_ms: Option<u32>,
    /// The health logs as last read, to compare the next cycle's with.
    health: Option<HealthLogs>,
    /// When the cycle in progress started, and how long of it was spent waiting on the
    /// workload, the controller, the off time and the device (so the rest is the harness's).
    cycle_t0: Instant,
    waits: Duration,
}

impl Cycles<'_, '_> {
    fn run(&mut self) -> Result<&mut OpenRun, Fatal> {
        self.st.run.as_mut().ok_or(Fatal::NotOpen)
    }

    /// A stop made while the run directory is short of space was most likely caused by that:
    /// the run is suspended, not ended.
    fn stopped(&self, why: String) -> Ending {
        match short_of_space(self.run_dir, self.st.dut.growth_bytes()) {
            Some(space) => Ending::Suspended(format!("{why}; {space}")),
            None => Ending::Stopped(why),
        }
    }
}

/// The cycles; `Err` ends the run with a harness error.
fn cycles<'r>(
    plan: &'r RunPlan,
    o: &'r RunnerOptions,
    run_dir: &'r Path,
    st: &'r mut Setup,
    em: &'r mut Emitter<'_>,
    cycles_run: &mut u32,
    resumed: Option<&[Event]>,
    observer: Option<&'r mut (dyn CycleObserver + 'static)>,
) -> Result<Ending, Fatal> {
    let run = st.run.as_ref().ok_or(Fatal::NotOpen)?;
    let spec = run.layout.spec().clone();
    let from = resume::From::new(run.history(), resumed);
    let health = match st.dut.health() {
        Some(Ok(logs)) => Some(logs),
        Some(Err(why)) => {
            em.error(None, format!("SMART/health log: {why}"));
            None
        }
        None => None,
    };
    let mut c = Cycles {
        plan,
        o,
        run_dir,
        st,
        em,
        observer,
        span: (spec.span_start, spec.span_end),
        checked_upto: from.checked_upto,
        streak: ErrorStreak::default(),
        mate_step_ms: None,
        health,
        cycle_t0: Instant::now(),
        waits: Duration::ZERO,
    };
    c.controller_log(None);
    let mut done = from.cycles_ended;
    if let Some(prior) = resumed {
        if let Some(why) = short_of_space(c.run_dir, c.st.dut.growth_bytes()) {
            return Ok(Ending::Suspended(why));
        }
        let t_ns = c.em.now();
        let last_event = prior.last().map(Event::kind).unwrap_or_default();
        let interrupted = from.interrupted;
        c.em.emit(Event::RunResumed { t_ns, resumed_at: (o.clock)(), cycles_ended: done, interrupted_cycle: interrupted, last_event });
        if let Some(cycle) = interrupted {
            // The harness died inside this cycle: whatever it was doing, power the drive (back)
            // on and check every write of the cycle; the ledger has closed it as interrupted, so
            // none of them counts as durable beyond what had been recorded.
            *cycles_run += 1;
            done += 1;
            (c.cycle_t0, c.waits) = (Instant::now(), Duration::ZERO);
            let end = cycle::Pending { cycle, outcome: None, last: done == plan.cycles, end: Default::default() };
            if let Some(why) = c.settle(end, Duration::ZERO)? {
                return Ok(c.stopped(why));
            }
        }
    }
    while done < plan.cycles {
        if let Some(why) = short_of_space(c.run_dir, c.st.dut.growth_bytes()) {
            return Ok(Ending::Suspended(why));
        }
        // Pin-mate sequencing sweeps its steps, one per cycle; a failure to set it up starts
        // no cycle.
        let next = c.run()?.next_cycle().0;
        if let Some(step) = plan.fault.mate_step_ms(next) {
            if let Err(e) = c.st.cutter.set_mate_step(step) {
                c.em.error(None, format!("cycle {next}: setting the pin-mate step to {step} ms: {e}"));
                let end = stop::CycleEnd {
                    cycle: next,
                    controller_failure: Some(stop::ControllerStep::MateStep),
                    errors: 1,
                    ..Default::default()
                };
                match stop::decide(&plan.stop, &mut c.streak, &end) {
                    stop::Next::Stop(why) => return Ok(Ending::Stopped(why)),
                    _ => continue,
                }
            }
            c.mate_step_ms = Some(step);
        }
        done += 1;
        *cycles_run += 1;
        if let Some(why) = c.cycle(done == plan.cycles)? {
            return Ok(c.stopped(why));
        }
    }
    c.run()?.ledger.sync()?;
    Ok(Ending::Done)
}
