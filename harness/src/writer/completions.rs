//! A cycle's completions: the reap (waiting, bounded, what never comes back after a cut
//! recorded as failed) and each completion recorded (latency, durability, failures).

use super::{CycleLoop, WriteError, FLUSH_TOKEN, GONE_AFTER_EIOS};
use crate::ledger::Record;
use faultline_drivers::Completion;
use std::time::Duration;

impl CycleLoop<'_, '_> {
    /// Waits for completions and records them. `Ok(false)`: nothing came back after the
    /// cut, and the cycle is over.
    pub(super) fn reap(&mut self) -> Result<bool, WriteError> {
        self.done.clear();
        let wait = if self.stopping { self.opts.drain_timeout } else { Duration::from_secs(30) };
        let (wait, awaiting_cut) = self.format_wait(wait);
        let got = self.target.reap(&mut self.done, 1, wait)?;
        if got == 0 && awaiting_cut {
            return Ok(true);
        }
        if got == 0 {
            if self.cut_done {
                // After a cut, operations that never come back are uncertain, exactly like
                // failed ones: record them as failed and close the cycle. Their buffers stay
                // with the target, which must never free memory the kernel may still use.
                self.out.failed += self.inflight.len() as u64;
                for id in std::mem::take(&mut self.inflight).into_keys() {
                    self.t.write_done(id, false, false);
                }
                return Ok(false);
            }
            // A stall without a cut: keep what is known, then fail the cycle.
            self.checkpoint()?;
            self.ledger.sync()?;
            return Err(WriteError::Stalled(format!(
                "no completion within {} ms with {} writes and {} flushes in flight",
                wait.as_millis(),
                self.inflight.len(),
                self.flushes_inflight
            )));
        }
        let mut done = std::mem::take(&mut self.done);
        let recorded = done.drain(..).try_for_each(|c| self.complete(c));
        self.done = done;
        recorded?;
        Ok(true)
    }

    /// Records one completion.
    fn complete(&mut self, c: Completion) -> Result<(), WriteError> {
        if let (Some(t0), None, Err(_)) = (self.cut_instant, self.out.device_gone_at, &c.result) {
            if c.at >= t0 {
                self.out.device_gone_at = Some(c.at.duration_since(self.start));
            }
        }
        if c.token & FLUSH_TOKEN != 0 {
            let no = c.token & !FLUSH_TOKEN;
            self.flushes_inflight = self.flushes_inflight.saturating_sub(1);
            self.t.flush_done(no, c.result.is_ok());
            return Ok(());
        }
        // A completion for an operation abandoned in an earlier cycle (a device that came
        // back late) is stale: it changes nothing recorded.
        if let Some(b) = c.buf {
            self.filler.give_back(b);
        }
        let Some((w, submitted_at)) = self.inflight.remove(&c.token) else {
            return Ok(());
        };
        if let Some(s) = &self.opts.samples {
            s.record(c.at, c.at.saturating_duration_since(submitted_at), w.len, c.result.is_ok());
        }
        match c.result {
            // A format: counted, and kept out of the writes' latencies, gaps and bytes.
            Ok(()) if w.zeroing() == Some(faultline_drivers::Zeroing::Format) => {
                self.out.completed += 1;
                self.out.zeroing.count(faultline_drivers::Zeroing::Format, w.len);
                self.t.write_done(w.id, true, w.fua);
            }
            Ok(()) => {
                let ns = c.at.saturating_duration_since(submitted_at).as_nanos();
                self.write_latency.record(u64::try_from(ns).unwrap_or(u64::MAX));
                if !self.cut_done {
                    let gap = c.at.saturating_duration_since(self.last_completion.unwrap_or(self.start));
                    self.out.max_completion_gap = Some(self.out.max_completion_gap.map_or(gap, |m| m.max(gap)));
                    self.last_completion = Some(self.last_completion.map_or(c.at, |l| l.max(c.at)));
                }
                self.out.completed += 1;
                self.out.bytes_written += w.len;
                if let crate::workload::OpKind::Zero(kind) = w.op {
                    self.out.zeroing.count(kind, w.len);
                }
                self.t.write_done(w.id, true, w.fua);
                self.eio_run = 0;
            }
            Err(e) => {
                self.out.failed += 1;
                self.t.write_done(w.id, false, w.fua);
                // Before any cut, a device that went away ends the cycle: writing on would
                // only fail, for the rest of the cycle.
                if !self.cut_done && self.out.device_lost.is_none() {
                    self.eio_run = if e.is_eio() { self.eio_run + 1 } else { 0 };
                    if e.device_gone() || self.eio_run >= GONE_AFTER_EIOS {
                        self.out.device_lost = Some(e.to_string());
                        self.stopping = true;
                    }
                }
                // Failures during the drain after a cut are expected by the thousand;
                // they are recorded in the cycle end, not one record each.
                if !self.cut_done {
                    self.ledger.append(&Record::WriteFailed { cycle: self.opts.cycle, id: w.id, errno: e.errno, detail: e.detail })?;
                }
            }
        }
        Ok(())
    }
}
