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
//! confirmation), [`regions`], [`stop`] (the stop policy, suspension), `emit` (run clock,
//! finding deduplication), `resume` (taking a run up again), `run_loop` (the loop over
//! cycles), `cycle` (one cycle's steps, for one port or many), `writers` (its write phase),
//! `dual` (opening a dual-port run, judging its windows, its performance mode), `ports`
//! (what every port goes through after a fault), `lane` (each share's run and its
//! verification).

mod cycle;
mod dual;
pub mod dut;
mod emit;
pub mod fault;
mod lane;
mod ports;
pub mod regions;
mod resume;
mod run_loop;
pub mod setup;
pub mod stop;
mod writers;

use crate::events::{Event, EventKind, Sinks, Verdict};
use crate::report::Recorder;
use crate::scenario::RunPlan;
use cycle::{cycles, Ending};
use emit::Emitter;
use setup::setup;
use std::path::Path;
use stop::short_of_space;

pub use cycle::{CycleCheck, CycleObserver};
pub use resume::Prior;
pub use setup::RunnerOptions;

pub use fault::{draw_after_ms, placement, ControllerError};
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
    Resume(setup::SetupError),
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
    let run_started = |run_id: u64, target: String| {
        let kind = EventKind::RunStarted {
            run_id: format!("{run_id:016x}"),
            scenario: plan.name().to_string(),
            target,
            contract: plan.contract,
            cycles_planned: plan.cycles,
            seed: plan.seed,
            started_at: o.started_at.clone(),
        };
        Event::new(0, kind)
    };
    let resuming = prior.is_some();
    let suspended = |mut em: Emitter, cycles_run, why: String, notes| {
        // A resume refused at once (still short of space) records nothing: there is no room.
        if em.emitted > 0 {
            let t_ns = em.now();
            em.emit(Event::new(t_ns, EventKind::RunSuspended { reason: why.clone() }));
        }
        let Emitter { errors, .. } = em;
        Ok(RunSummary { verdict: Verdict::Error, cycles_run, stopped: Some(why), errors, notes, suspended: true })
    };
    let mut prior = prior.unwrap_or_default();
    let (model, seen, errors) =
        (std::mem::take(&mut prior.model), std::mem::take(&mut prior.finding_keys), std::mem::take(&mut prior.errors));
    let mut em = Emitter::new(Recorder::resumed(sinks, model), prior.max_t_ns, seen, errors);
    if let Some(dual) = &plan.dual {
        let mut cycles_run = 0;
        let stopped = match dual::run(plan, dual, run_dir, o, &mut em, observer, &mut cycles_run, resuming.then_some(&prior)) {
            Ok(Ending::Done) => None,
            Ok(Ending::Stopped(why)) => Some(why),
            Ok(Ending::Suspended(why)) => return suspended(em, cycles_run, why, Vec::new()),
            // Nothing recorded yet: the run can be resumed once the cause is fixed.
            Err(e) if resuming && em.emitted == 0 => {
                return Err(RunnerError::Resume(setup::SetupError::Dut(dut::DutError::Open(e.to_string()))));
            }
            Err(e) => {
                if em.emitted == 0 {
                    em.emit(run_started(o.run_id, "unknown (the target was not opened)".into()));
                }
                let e = e.to_string();
                em.error(None, e.clone());
                Some(e)
            }
        };
        if let Some(reason) = &stopped {
            let t_ns = em.now();
            em.emit(Event::new(t_ns, EventKind::RunStopped { reason: reason.clone() }));
        }
        let t = em.now();
        let Emitter { rec, errors, .. } = em;
        let verdict = rec.end(t)?;
        return Ok(RunSummary { verdict, cycles_run, stopped, errors, notes: Vec::new(), suspended: false });
    }
    let started = prior.started;
    let mut cycles_run = 0;
    let mut notes = Vec::new();
    let stopped = match setup(plan, run_dir, o, resuming) {
        Ok(mut st) => {
            if !started {
                em.emit(run_started(st.header.run_id, st.header.target_identity.clone()));
            }
            notes = std::mem::take(&mut st.notes);
            for message in &notes {
                let t_ns = em.now();
                em.emit(Event::new(t_ns, EventKind::Note { message: message.clone() }));
            }
            match cycles(plan, o, run_dir, &mut st, &mut em, &mut cycles_run, resuming.then_some(&prior), observer) {
                Ok(Ending::Done) => None,
                Ok(Ending::Stopped(why)) => Some(why),
                Ok(Ending::Suspended(why)) => return suspended(em, cycles_run, why, notes),
                Err(e) => {
                    // Short of space: the error is most likely that; suspend rather than end.
                    if let Some(why) = short_of_space(run_dir, st.ports.growth_bytes()) {
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
        em.emit(Event::new(t_ns, EventKind::RunStopped { reason: reason.clone() }));
    }
    let t = em.now();
    let Emitter { rec, errors, .. } = em;
    let verdict = rec.end(t)?;
    Ok(RunSummary { verdict, cycles_run, stopped, errors, notes, suspended: false })
}
