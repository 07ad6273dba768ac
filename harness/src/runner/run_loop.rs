//! The loop over a run's cycles, for one port or many: the free-space check before each
//! cycle (a run short of space is suspended, not ended), the pin-mate step of a sweep, the
//! cycle the harness died in finished first when a run is resumed, the stop policy after
//! every cycle (a dead device power-cycled once more when it says so). What one cycle is
//! belongs to the [`Cycler`]: one writer (`runner/cycle.rs`) or one per port
//! (`runner/dual/`).

use super::cycle::Ending;
use super::emit::Emitter;
use super::fault::ControllerError;
use super::resume::Prior;
use super::stop::{decide, short_of_space, ControllerStep, CycleEnd, ErrorStreak, Next};
use super::RunnerOptions;
use crate::events::Event;
use crate::scenario::RunPlan;
use std::path::Path;

/// What a run's cycles are, to the loop.
pub(super) trait Cycler<'e> {
    type Error;

    fn em(&mut self) -> &mut Emitter<'e>;

    /// How much the device's files in the run directory may still grow.
    fn growth_bytes(&self) -> u64;

    /// Sets the pin-mate step of the next cut.
    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), ControllerError>;

    /// Runs cycle `cycle`: what it came to, for the stop policy.
    fn cycle(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Self::Error>;

    /// Finishes cycle `cycle`, which the harness died in (`faultline resume`): whatever it
    /// was doing, power the drive (back) on, wait for every port, check every write of the
    /// cycle. The ledgers have closed it as interrupted, so none of its writes counts as
    /// durable beyond what had been recorded.
    fn finish_interrupted(&mut self, cycle: u32, last: bool) -> Result<CycleEnd, Self::Error>;

    /// `stop.on_dead_device = "continue"`: cut power once more and wait once more for every
    /// port; `Some(why)` ends the run.
    fn power_cycle_dead_device(&mut self, cycle: u32) -> Option<String>;

    /// A resumed run whose cycles had all ended: the drive is powered on, as between any two
    /// cycles (the harness may have died before its switch's state was saved).
    fn power_on_between_cycles(&mut self);

    /// Makes every ledger durable at the end of the run.
    fn sync(&mut self) -> Result<(), Self::Error>;
}

/// Where the loop starts: the cycles the ledgers had ended, and the one the harness died in.
pub(super) struct StartAt {
    pub cycles_ended: u32,
    pub interrupted: Option<u32>,
}

/// Runs the plan's cycles through `c`, from `from`; `prior` is set for a resumed run.
/// `cycles_run` counts the cycles begun (or finished) here.
pub(super) fn run_cycles<'e, C: Cycler<'e>>(
    c: &mut C,
    plan: &RunPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    from: StartAt,
    prior: Option<&Prior>,
    cycles_run: &mut u32,
) -> Result<Ending, C::Error> {
    // A stop made while the run directory is short of space was most likely caused by that:
    // the run is suspended, not ended.
    let stopped = |c: &C, why: String| match short_of_space(run_dir, c.growth_bytes()) {
        Some(space) => Ending::Suspended(format!("{why}; {space}")),
        None => Ending::Stopped(why),
    };
    let mut streak = ErrorStreak::default();
    // The stop policy's decision after a cycle; `Some(why)` ends the run.
    fn after<'e, C: Cycler<'e>>(c: &mut C, plan: &RunPlan, streak: &mut ErrorStreak, end: &CycleEnd) -> Option<String> {
        match decide(&plan.stop, streak, end) {
            Next::GoOn => None,
            Next::Stop(why) => Some(why),
            Next::PowerCycleDeadDevice => c.power_cycle_dead_device(end.cycle),
        }
    }
    let mut done = from.cycles_ended;
    if let Some(prior) = prior {
        if let Some(why) = short_of_space(run_dir, c.growth_bytes()) {
            return Ok(Ending::Suspended(why));
        }
        let em = c.em();
        let t_ns = em.now();
        let (resumed_at, last_event) = ((o.clock)(), prior.last_kind.clone());
        em.emit(Event::RunResumed { t_ns, resumed_at, cycles_ended: done, interrupted_cycle: from.interrupted, last_event });
        if let Some(cycle) = from.interrupted {
            *cycles_run += 1;
            done += 1;
            let end = c.finish_interrupted(cycle, done == plan.cycles)?;
            if let Some(why) = after(c, plan, &mut streak, &end) {
                return Ok(stopped(c, why));
            }
        } else {
            c.power_on_between_cycles();
        }
    }
    while done < plan.cycles {
        if let Some(why) = short_of_space(run_dir, c.growth_bytes()) {
            return Ok(Ending::Suspended(why));
        }
        let cycle = done + 1;
        // Pin-mate sequencing sweeps its steps, one per cycle; a failure to set it up starts
        // no cycle.
        if let Some(step) = plan.fault(cycle).mate_step_ms(cycle) {
            if let Err(e) = c.set_mate_step(step) {
                c.em().error(None, format!("cycle {cycle}: setting the pin-mate step to {step} ms: {e}"));
                let end = CycleEnd { cycle, controller_failure: Some(ControllerStep::MateStep), errors: 1, ..CycleEnd::default() };
                match decide(&plan.stop, &mut streak, &end) {
                    Next::Stop(why) => return Ok(Ending::Stopped(why)),
                    _ => continue,
                }
            }
        }
        done += 1;
        *cycles_run += 1;
        let end = c.cycle(cycle, done == plan.cycles)?;
        if let Some(why) = after(c, plan, &mut streak, &end) {
            return Ok(stopped(c, why));
        }
    }
    c.sync()?;
    Ok(Ending::Done)
}
