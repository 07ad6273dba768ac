//! Where a run goes on from: what the ledger and the event log recorded before the harness
//! died. Nothing else is trusted; per-cycle randomness derives from (seed, cycle), so nothing
//! else needs saving.

use super::emit::{key, FindingKey};
use crate::events::{Event, EventKind, Verdict};
use crate::ledger::History;
use crate::report::RunModel;
use std::collections::HashSet;

/// What a resumed run needs of the events recorded before the harness died, folded one event
/// at a time ([`Prior::fold`]), so that resuming a run of any length holds no list of its
/// events: the run clock's last reading, the findings already reported (to report each once),
/// the harness errors, the cycles ended and verified, and the reports' bounded model.
#[derive(Default)]
pub struct Prior {
    pub(crate) max_t_ns: Option<u64>,
    pub(crate) finding_keys: HashSet<FindingKey>,
    pub(crate) errors: Vec<String>,
    pub(crate) started: bool,
    /// When the run first started (the wall clock the binary recorded).
    pub started_at: Option<String>,
    pub(crate) last_kind: String,
    pub(crate) cycles_ended: u32,
    pub(crate) last_ended: Option<u32>,
    pub(crate) last_verified: Option<u32>,
    /// The run had ended after all: its verdict and exit code.
    pub run_ended: Option<(Verdict, u8)>,
    pub(crate) model: RunModel,
    /// Events folded.
    pub events: u64,
}

impl Prior {
    /// Cycles whose `cycle_ended` was recorded.
    pub fn cycles_ended(&self) -> u32 {
        self.cycles_ended
    }

    pub fn fold(&mut self, e: &Event) {
        self.events += 1;
        self.model.apply(e);
        self.max_t_ns = Some(self.max_t_ns.map_or(e.t_ns, |t| t.max(e.t_ns)));
        self.last_kind = e.kind_name().to_string();
        match (&e.kind, e.cycle) {
            (EventKind::RunStarted { started_at, .. }, _) => {
                self.started = true;
                self.started_at.get_or_insert_with(|| started_at.clone());
            }
            (EventKind::Finding { finding }, _) => {
                self.finding_keys.insert(key(finding));
            }
            (EventKind::HarnessError { message }, _) => self.errors.push(message.clone()),
            // Cycles end in order, each once; a repeat (none is written) is not counted twice.
            (EventKind::CycleEnded { .. }, Some(cycle)) if self.last_ended.is_none_or(|l| cycle > l) => {
                self.cycles_ended += 1;
                self.last_ended = Some(cycle);
            }
            (EventKind::Verified { .. }, Some(cycle)) => self.last_verified = Some(self.last_verified.map_or(cycle, |v| v.max(cycle))),
            (EventKind::RunEnded { verdict, exit_code }, _) => self.run_ended = Some((*verdict, *exit_code)),
            _ => {}
        }
    }
}

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
    pub fn new(history: &History, prior: Option<&Prior>) -> Start {
        // Verified up to the writes of the last cycle whose verification was recorded.
        let last_verified = prior.and_then(|p| p.last_verified);
        let checked_upto = match last_verified {
            Some(v) => history.cycles.iter().find(|c| c.cycle == v).map_or(1, |c| c.submitted_end),
            None if prior.is_none() => history.submitted_end(),
            None => history.cycles.first().map_or(1, |c| c.first_id),
        };
        let last = history.last_cycle();
        // The ledger's last cycle is the newest any event names: it ended unless its
        // `cycle_ended` is missing.
        let interrupted = prior.filter(|p| last > 0 && p.last_ended != Some(last)).map(|_| last);
        Start { cycles_ended: prior.map_or(0, |p| p.cycles_ended), checked_upto, interrupted }
    }
}
