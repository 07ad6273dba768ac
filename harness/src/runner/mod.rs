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
//! Rooms: `open` (every port, the fault's controller, each writer port's run: the only place
//! that names concrete Duts), [`dut`] (the device seam), [`fault`] (placement, cutters,
//! confirmation), [`regions`], [`stop`] (the stop policy, suspension), `emit` (run clock,
//! finding deduplication), `resume` (taking a run up again), `run_loop` (the loop over
//! cycles), `cycle` (one cycle's steps, for one port or many), `writers` (its write phase),
//! `judge` (a dual-port plan's windows judged), `perf` (its performance mode), `ports` (what
//! every port goes through after a fault), `lane` (each share's run and its verification).

pub(crate) mod controller_error;
mod cycle;
pub mod dut;
mod emit;
pub mod fault;
mod fault_thread;
mod judge;
mod lane;
mod open;
pub mod options;
mod perf;
mod ports;
pub mod regions;
mod resume;
mod run_loop;
pub mod shared;
pub mod shutdown;
pub mod stop;
mod writers;

use crate::events::{Event, EventKind, Sinks, Verdict};
use crate::report::Recorder;
use crate::scenario::RunPlan;
use cycle::{Cycles, Ending};
use emit::Emitter;
use lane::{may_hold, verify_lanes, CheckOf, Readers};
use open::{open, performance, Opened};
use std::path::Path;
use stop::{short_of_space, CycleEnd};

pub use cycle::{CycleCheck, CycleObserver};
pub use open::error::{AtomicBelowSector, OpenError, OpenPortsError};
pub use open::port_dir;
pub use options::RunnerOptions;
pub use resume::Prior;

pub use fault::{draw_after_ms, placement, ControllerError, Missing};
pub use regions::{coalesce, sample_regions, written_regions};
pub use stop::MIN_FREE_BYTES;

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
    Resume(Box<OpenError>),
}

/// Why a run that opened ended with a harness error.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error(transparent)]
    Cycle(#[from] cycle::Fatal),
    #[error(transparent)]
    Perf(#[from] perf::PerfError),
    #[error(transparent)]
    Verify(#[from] lane::ShareCheckError),
}

/// Runs a plan in `run_dir`, sending every event to `sinks`.
///
/// `prior` is `None` for a new run (`run_dir` must not hold one). For `faultline resume` it
/// holds what the events the run had recorded before the harness died say ([`Prior`], folded
/// from them; their consumers in `sinks` other than the log have seen them): the run goes on from the ledger and the saved drive,
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
    prior: Option<Prior>,
) -> Result<RunSummary, RunnerError> {
    run_observed(plan, run_dir, sinks, o, prior, None)
}

/// [`run_scenario`], with `observer` told of every cycle's verification.
pub fn run_observed(
    plan: &RunPlan,
    run_dir: &Path,
    sinks: Sinks<'_>,
    o: &RunnerOptions,
    prior: Option<Prior>,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
) -> Result<RunSummary, RunnerError> {
    let resuming = prior.is_some();
    let mut prior = prior.unwrap_or_default();
    let (model, seen, errors) =
        (std::mem::take(&mut prior.model), std::mem::take(&mut prior.finding_keys), std::mem::take(&mut prior.errors));
    let mut em = Emitter::new(Recorder::resumed(sinks, model), prior.max_t_ns, seen, errors);
    let prior = resuming.then_some(&prior);
    let mut opened = match open(plan, run_dir, o, prior) {
        Ok(opened) => opened,
        // Nothing recorded yet: the run can be resumed once the cause is fixed.
        Err(e) if resuming => return Err(RunnerError::Resume(Box::new(e))),
        Err(e) => {
            em.emit(run_started(plan, o, o.run_id, "unknown (the target was not opened)".into()));
            em.error(None, e.to_string());
            return end(em, 0, Some(e.to_string()), Vec::new());
        }
    };
    if !prior.is_some_and(|p| p.started) {
        em.emit(run_started(plan, o, o.run_id, opened.identity.clone()));
    }
    let notes = std::mem::take(&mut opened.notes);
    for message in &notes {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::Note { message: message.clone() }));
    }
    let mut cycles_run = 0;
    let stopped = match run_opened(plan, run_dir, o, &mut opened, &mut em, observer, prior, &mut cycles_run) {
        Ok(Ending::Done) => None,
        Ok(Ending::Stopped(why)) => Some(why),
        Ok(Ending::Suspended(why)) => return suspended(em, cycles_run, why, notes),
        Err(e) => {
            // Short of space: the error is most likely that; suspend rather than end.
            if let Some(why) = short_of_space(run_dir, opened.ports.growth_bytes()) {
                return suspended(em, cycles_run, format!("{e}; {why}"), notes);
            }
            em.error(None, e.to_string());
            Some(e.to_string())
        }
    };
    end(em, cycles_run, stopped, notes)
}

/// The run's `run_started`.
fn run_started(plan: &RunPlan, o: &RunnerOptions, run_id: u64, target: String) -> Event {
    let cycles_planned = match &plan.dual {
        // A performance run's cycles are its phases: each writer port alone, then all.
        Some(dual) if performance(Some(dual)) => {
            let writers = plan.ports.iter().filter(|p| p.role == crate::scenario::PortRole::Writer).count() as u32;
            writers + u32::from(writers > 1)
        }
        _ => plan.cycles,
    };
    let kind = EventKind::RunStarted {
        run_id: format!("{run_id:016x}"),
        scenario: plan.name().to_string(),
        target,
        contract: plan.contract,
        cycles_planned,
        seed: plan.seed,
        started_at: o.started_at.clone(),
    };
    Event::new(0, kind)
}

/// The cycles of an opened run (or a performance run's phases, then every share verified).
#[expect(clippy::too_many_arguments, reason = "what a run holds open, lent to its cycles once")]
fn run_opened(
    plan: &RunPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    opened: &mut Opened,
    em: &mut Emitter<'_>,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
    prior: Option<&Prior>,
    cycles_run: &mut u32,
) -> Result<Ending, Failed> {
    let Opened { ports, cutter, lanes, start, .. } = opened;
    if let Some(dual) = plan.dual.as_ref().filter(|d| performance(Some(d))) {
        let n = perf::run(plan, dual, &mut ports.duts, lanes, em, o)?;
        *cycles_run = n;
        // What the measurements wrote is verified as any cycle's is, through every port.
        let (mut findings, mut end) = (Vec::new(), CycleEnd { cycle: n, ..CycleEnd::default() });
        let of = CheckOf { cycle: n, last: true, hold_seen: may_hold(plan, n, false) };
        verify_lanes(plan, &Readers::of(plan), &of, &mut ports.duts, lanes, em, &mut findings, &mut end)?;
        em.findings(n, &findings);
        return Ok(Ending::Done);
    }
    ports.read_health(em);
    let mut c = Cycles::new(plan, o, ports, lanes, cutter, em, observer);
    c.controller_log(None);
    Ok(run_loop::run_cycles(&mut c, plan, run_dir, o, *start, prior, cycles_run)?)
}

/// A run stopped without ending, to be resumed.
fn suspended(mut em: Emitter, cycles_run: u32, why: String, notes: Vec<String>) -> Result<RunSummary, RunnerError> {
    // A resume refused at once (still short of space) records nothing: there is no room.
    if em.emitted > 0 {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::RunSuspended { reason: why.clone() }));
    }
    let Emitter { errors, .. } = em;
    Ok(RunSummary { verdict: Verdict::Error, cycles_run, stopped: Some(why), errors, notes, suspended: true })
}

/// The run's end: why it stopped early, if it did, and its verdict.
fn end(mut em: Emitter, cycles_run: u32, stopped: Option<String>, notes: Vec<String>) -> Result<RunSummary, RunnerError> {
    if let Some(reason) = &stopped {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::RunStopped { reason: reason.clone() }));
    }
    let t = em.now();
    let Emitter { rec, errors, .. } = em;
    let verdict = rec.end(t)?;
    Ok(RunSummary { verdict, cycles_run, stopped, errors, notes, suspended: false })
}
