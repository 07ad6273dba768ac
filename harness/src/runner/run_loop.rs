//! The loop over a run's cycles, for one port or many: the free-space check before each
//! cycle (a run short of space is suspended, not ended), the pin-mate step of a sweep, the
//! cycle the harness died in finished first when a run is resumed, the stop policy after
//! every cycle (a dead device power-cycled once more when it says so). What one cycle is
//! belongs to `runner/cycle.rs`, for one port or many.

use super::cycle::{Cycles, Ending, Fatal};
use super::options::RunnerOptions;
use super::resume::Prior;
use super::stop::{decide, short_of_space, ControllerStep, CycleEnd, ErrorStreak, Next};
use crate::events::{Event, EventKind};
use crate::scenario::RunPlan;
use std::path::Path;

/// Where the loop starts: the cycles the ledgers had ended, and the one the harness died in.
#[derive(Clone, Copy, Debug)]
pub(super) struct StartAt {
    pub cycles_ended: u32,
    pub interrupted: Option<u32>,
}

/// Runs the plan's cycles through `c`, from `from`; `prior` is set for a resumed run.
/// `cycles_run` counts the cycles begun (or finished) here.
pub(super) fn run_cycles(
    c: &mut Cycles<'_, '_>,
    plan: &RunPlan,
    run_dir: &Path,
    o: &RunnerOptions,
    from: StartAt,
    prior: Option<&Prior>,
    cycles_run: &mut u32,
) -> Result<Ending, Fatal> {
    // A stop made while the run directory is short of space was most likely caused by that:
    // the run is suspended, not ended.
    let stopped = |c: &Cycles<'_, '_>, why: String| match short_of_space(run_dir, c.growth_bytes()) {
        Some(space) => Ending::Suspended(format!("{why}; {space}")),
        None => Ending::Stopped(why),
    };
    let mut streak = ErrorStreak::default();
    // The stop policy's decision after a cycle; `Some(why)` ends the run.
    fn after(c: &mut Cycles<'_, '_>, plan: &RunPlan, streak: &mut ErrorStreak, end: &CycleEnd) -> Option<String> {
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
        em.emit(Event::new(
            t_ns,
            EventKind::RunResumed { resumed_at, cycles_ended: done, interrupted_cycle: from.interrupted, last_event },
        ));
        if let Some(cycle) = from.interrupted {
            *cycles_run += 1;
            done += 1;
            let end = c.interrupted(cycle, done == plan.cycles)?;
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
        let end = c.one_cycle(cycle, done == plan.cycles)?;
        if let Some(why) = after(c, plan, &mut streak, &end) {
            return Ok(stopped(c, why));
        }
    }
    c.sync()?;
    Ok(Ending::Done)
}
