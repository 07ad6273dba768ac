//! The `DuringFormat` placement's steps in a cycle's I/O loop: once the queue is drained and
//! flushed, record what is durable and the format's id, send the format, and cut while it runs
//! (docs/DOMAIN.md, "Format NVM under a cut").

use super::{CutPlacement, CycleLoop, WriteError};
use crate::ledger::Record;
use crate::workload::WritePlan;
use faultline_drivers::{Op, Zeroing};
use std::time::{Duration, Instant};

impl CycleLoop<'_, '_> {
    /// Called on each turn while the placement quiesces: flushes once drained, then, once the
    /// flush is back, sends the format (once).
    pub(super) fn toward_format(&mut self) -> Result<(), WriteError> {
        if !self.inflight.is_empty() || self.flushes_inflight > 0 || self.format_sent.is_some() {
            return Ok(());
        }
        if !self.shutdown_flushed {
            self.submit_flush()?;
            self.shutdown_flushed = true;
            return Ok(());
        }
        self.send_format()
    }

    /// Records what is durable, then the format's id (the next one), synced before the
    /// command goes out, and sends the format of the span as an operation that is durable
    /// once complete.
    fn send_format(&mut self) -> Result<(), WriteError> {
        let (cycle, id) = (self.opts.cycle, self.next_id);
        self.checkpoint()?;
        if id >= self.reserved_req {
            self.reserved_req = id + 1;
            self.reserve_seq = self.ledger.append(&Record::Reserve { cycle, upto: self.reserved_req })?;
        }
        self.ledger.append(&Record::Format { cycle, id })?;
        self.ledger.sync()?;
        self.reserved_ok = self.reserved_req;
        let w = WritePlan::format(self.spec, id);
        self.target.submit(Op::Zero { token: id, offset: w.offset, len: w.len, kind: Zeroing::Format, write_id: id })?;
        let now = Instant::now();
        self.inflight.insert(id, (w, now));
        self.format_sent = Some(now);
        self.next_id += 1;
        self.out.submitted += 1;
        Ok(())
    }

    /// Whether the cut is due: `cut_after_ms` since the format was sent, or the format back.
    pub(super) fn format_cut_due(&self, cut_after_ms: u64) -> bool {
        self.format_sent.is_some_and(|t| t.elapsed() >= Duration::from_millis(cut_after_ms) || self.inflight.is_empty())
    }

    /// How long a reap may wait, and whether a reap that got nothing is only the wait for the
    /// cut (a format still running when the cut is due is no stall).
    pub(super) fn format_wait(&self, wait: Duration) -> (Duration, bool) {
        match (self.opts.cut, self.format_sent) {
            (Some(CutPlacement::DuringFormat { cut_after_ms, .. }), Some(t)) if !self.cut_done => {
                let left = Duration::from_millis(cut_after_ms).saturating_sub(t.elapsed());
                (wait.min(left.max(Duration::from_millis(1))), true)
            }
            _ => (wait, false),
        }
    }
}
