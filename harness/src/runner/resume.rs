//! Where a run goes on from: what the ledger and the event log recorded before the harness
//! died. Nothing else is trusted; per-cycle randomness derives from (seed, cycle), so nothing
//! else needs saving.

use crate::events::Event;
use crate::ledger::History;
use std::collections::HashSet;

/// The state a run (new or resumed) starts its cycles from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Start {
    /// Cycles whose `cycle_ended` was recorded.
    pub cycles_ended: u32,
    /// Writes below this id have been verified since they were written.
    pub checked_upto: u64,
    /// The cycle the harness died in (the ledger has closed it as interrupted), if any.
    pub interrupted: Option<u32>,
}

impl Start {
    /// `prior` is `None` for a new run.
    pub fn new(history: &History, prior: Option<&[Event]>) -> Start {
        let events = prior.unwrap_or_default();
        let ended: HashSet<u32> =
            events.iter().filter_map(|e| if let Event::CycleEnded { cycle, .. } = e { Some(*cycle) } else { None }).collect();
        // Verified up to the writes of the last cycle whose verification was recorded.
        let last_verified = events.iter().filter_map(|e| if let Event::Verified { cycle, .. } = e { Some(*cycle) } else { None }).max();
        let checked_upto = match last_verified {
            Some(v) => history.cycles.iter().find(|c| c.cycle == v).map_or(1, |c| c.submitted_end),
            None if prior.is_none() => history.submitted_end(),
            None => history.cycles.first().map_or(1, |c| c.first_id),
        };
        let last = history.last_cycle();
        let interrupted = (prior.is_some() && last > 0 && !ended.contains(&last)).then_some(last);
        Start { cycles_ended: ended.len() as u32, checked_upto, interrupted }
    }
}
