//! After a cut that left a format unfinished: a drive may answer every read with an error
//! until it is formatted again (NVMe's Format In Progress, which QEMU's controller keeps
//! answering after a format it could not finish; docs/DOMAIN.md, "Format NVM under a cut").
//! Then the run formats again, recorded, before it verifies, and says so.

use super::{Cycles, Fatal};
use crate::events::{Event, EventKind};
use crate::ledger::Record;
use crate::scenario::CutPlacement;
use std::time::{Duration, Instant};

/// How long the drive may take to format again: the admin command's own timeout.
const FORMAT_TIMEOUT: Duration = Duration::from_millis(faultline_drivers::nvme::FORMAT_TIMEOUT_MS as u64);

impl Cycles<'_, '_> {
    /// For each share whose cycle ended with its format unfinished, where the drive now
    /// refuses a read of the span's first sector: formats again, recorded before it is sent
    /// and once it is done. A format that fails is an error of the cycle, and the verify
    /// reads what the drive gives.
    pub(super) fn format_again_if_refused(&mut self, cycle: u32, errors: &mut u32) -> Result<(), Fatal> {
        if !matches!(self.plan.cut, CutPlacement::DuringFormat { .. }) {
            return Ok(());
        }
        for lane in self.lanes.iter_mut() {
            let h = lane.run.history();
            let Some(c) = h.cycles.last() else { continue };
            let unfinished = h.format_below(h.submitted_end()).is_some_and(|f| f >= c.first_id && !h.is_durable(f));
            let dut = &mut self.ports.duts[lane.port];
            if !unfinished || dut.answers(lane.span.0) {
                continue;
            }
            let id = h.submitted_end();
            let dir = lane.dir.clone();
            let ledger = &mut lane.run.ledger;
            let mut record = |done| -> Result<(), Fatal> {
                let not_saved = |source| Fatal::Reformat { dir: dir.clone(), source };
                ledger.append(&Record::Reformat { cycle, id, done }).map_err(not_saved)?;
                ledger.sync().map_err(not_saved)
            };
            record(false)?;
            // A format may take minutes on a large drive: say what the run waits for.
            let t_ns = self.em.now();
            let message = "the drive refused a read after the format cut short; formatting it again before verifying".to_string();
            self.em.emit(Event::new(t_ns, EventKind::Note { message }).with_cycle(Some(cycle)));
            let t0 = Instant::now();
            let (message, ok) = match dut.format(id, FORMAT_TIMEOUT) {
                Ok(()) => (format!("formatted again in {} ms; verifying", t0.elapsed().as_millis()), true),
                Err(e) => {
                    (format!("formatting again after the format cut short failed ({e}); the verify reads what the drive gives"), false)
                }
            };
            self.waits += t0.elapsed();
            let t_ns = self.em.now();
            if ok {
                record(true)?;
                self.em.emit(Event::new(t_ns, EventKind::Note { message }).with_cycle(Some(cycle)));
            } else {
                self.em.error(Some(cycle), message);
                *errors += 1;
            }
        }
        Ok(())
    }
}
