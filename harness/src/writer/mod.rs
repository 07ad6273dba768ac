//! The writer: drives a workload against a target for one cycle and records, in the ledger,
//! exactly what the contract lets the verifier rely on afterwards.
//!
//! It keeps the queue full (the cut must land on a busy drive, never a quiesced one), never
//! has two overlapping writes in flight (NVMe orders neither), counts a failed write as
//! failed (it may still have reached media, so it is "may", never "must"), and captures a
//! flush's coverage when the flush is *submitted*: a flush covers only writes that had
//! completed by then.
//!
//! State is bounded: ids are handed out in order, so durable state is a prefix plus the few
//! ids completed past it (at most the submission window), plus failed ids.

use crate::format::{Format, SectorId};
use crate::ledger::{Contract, EndKind, Ledger, LedgerError, Record};
use crate::workload::{Layout, WorkloadSpec, WritePlan};
use faultline_drivers::{AlignedBuf, BlockTarget, Completion, LatencyHistogram, Op, TargetError};
use handoff::{Handoff, MakerGuard};
use std::collections::BTreeMap;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

mod completions;
mod cycle_types;
mod fill;
mod format;
mod handoff;
mod prefill;
mod tracker;
pub mod windows;

pub use cycle_types::{CutPlacement, CycleOptions, CycleOutcome, EndHook, StopToken, ZeroingDone};
pub use fill::{Fill, INLINE_UP_TO_CPUS};
use fill::{Filler, Maker, Source};
pub use prefill::{prefill, prefill_data, prefill_then};
pub use tracker::Tracker;
pub use windows::{record_remote, Phase, PortSamples, WindowFigures, Windows, WireSample, WireSamples};

/// Flush tokens carry this bit (write tokens are write ids).
const FLUSH_TOKEN: u64 = 1 << 63;

/// What a hook the writer calls (the cut; the save before the prefill is recorded) failed
/// with: the caller's own error, kept whole (its source chain too).
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The fault failed (the controller reported an error): it may or may not have happened.
    /// The cycle was ended as a cut all the same (its in-flight writes uncertain) and recorded;
    /// `outcome` is what it wrote, to be verified like any other cycle's.
    #[error("cut: {why}")]
    Cut { why: HookError, outcome: Box<CycleOutcome> },
    #[error("target: {0}")]
    Stalled(String),
    /// The hook before the prefill or the cycle's end is recorded failed: nothing of it is
    /// recorded.
    #[error("target: {0}")]
    BeforeRecord(HookError),
}

/// The most bytes the I/O loop tags at a time when it tags inline ([`Fill::Inline`]):
/// about 20 to 30 µs of tagging at the 8.7 to 12.5 GB/s per core that `tagging-bench`
/// prints on the project's 2-CPU VM.
const INLINE_BATCH_BYTES: usize = 256 << 10;

/// Consecutive writes failing with EIO after which the writer takes the device as gone (the
/// engines' rule, `drivers`).
pub const GONE_AFTER_EIOS: u32 = 8;

/// Fills `buf` with the tagged sectors of write `w`.
pub fn fill_write(format: &Format, w: &WritePlan, cycle: u32, port: u8, buf: &mut [u8]) {
    fill_write_with(format, w, cycle, port, buf, &mut Vec::new());
}

/// As [`fill_write`], with a scratch vector for the checksums kept by the caller.
pub fn fill_write_with(format: &Format, w: &WritePlan, cycle: u32, port: u8, buf: &mut [u8], sums: &mut Vec<[u8; 16]>) {
    let sector = format.sector_bytes();
    let count = (w.len / sector as u64) as u32;
    let id_of = |i: usize| SectorId {
        run_id: format.run_id(),
        addr: w.offset + (i * sector) as u64,
        write_id: w.id,
        cycle,
        port,
        flags: 0,
        index: i as u32,
        count,
    };
    format.encode_sectors(buf, id_of, sums);
}

/// Runs one cycle. `cut` is called once, from inside the I/O loop (with the queue full,
/// except for the `Idle` placement), when the cut placement is reached.
///
/// Tagged buffers are made in id order, in batches, on the I/O loop's thread or ahead of it
/// on a helper thread ([`Fill`]; the tagging is the harness's main CPU cost).
pub fn run_cycle(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    ledger: &mut dyn Ledger,
    contract: Contract,
    opts: &CycleOptions,
    cut: &mut dyn FnMut() -> Result<(), HookError>,
) -> Result<CycleOutcome, WriteError> {
    let qd = (layout.spec().queue_depth as usize).min(target.queue_depth()).max(1);
    let (cycle, port, first, max_bytes) = (opts.cycle, opts.port, opts.first_id, layout.spec().max_write_bytes as usize);
    // Filled writes travel in batches: one hand-over per batch instead of per write, and the
    // filler is woken only once the I/O loop has taken half of what it queued (`handoff`).
    let fill = opts.fill.resolve();
    let batch = batch_size(fill, qd, max_bytes);
    let queued_batches = 2 * (qd / batch).max(1);
    // Buffers the maker draws from: as many as can be in use at once (in flight, the batch
    // being filled and the one being submitted, and with the helper thread those queued to
    // the I/O loop), from the target's own pool where it has one (registered with the kernel
    // once, instead of pinned on every write).
    let queued = if fill == Fill::Thread { queued_batches * batch } else { 0 };
    let pool = target.buffers(qd + queued + 2 * batch, max_bytes);
    let mut maker = Maker::new(layout, format, cycle, port.0, first, pool, batch, max_bytes);
    if fill == Fill::Inline {
        let mut filler = Filler::new(Source::Inline { maker, returned: Vec::new() });
        return run_cycle_inner(target, layout, ledger, contract, opts, cut, qd, &mut filler);
    }
    let handoff = std::sync::Arc::new(Handoff::<Vec<(WritePlan, AlignedBuf)>>::new(queued_batches));
    std::thread::scope(|sc| {
        let (back, returned) = channel::<AlignedBuf>();
        let guard = handoff.clone();
        sc.spawn(move || {
            let _gone = MakerGuard(&guard);
            loop {
                let b = maker.batch_vec(|| returned.try_recv().ok());
                if guard.put(b).is_err() {
                    return; // the cycle is over
                }
            }
        });
        let mut filler = Filler::new(Source::Thread { handoff: handoff.clone(), back });
        // Dropping the filler closes the hand-over (on every way out, a panic included), so
        // the filler thread stops and the scope can end.
        run_cycle_inner(target, layout, ledger, contract, opts, cut, qd, &mut filler)
    })
}

/// Writes tagged at a time: a quarter of the queue, at most 16. Inline, at most
/// [`INLINE_BATCH_BYTES`] (or one write) as well: while it tags a batch the I/O loop reaps
/// nothing, and a completion is stamped when it is reaped, so the delay this adds to the
/// latencies and completion gaps stays at tens of microseconds.
fn batch_size(fill: Fill, qd: usize, max_bytes: usize) -> usize {
    let batch = (qd / 4).clamp(1, 16);
    match fill {
        Fill::Inline => batch.min((INLINE_BATCH_BYTES / max_bytes.max(1)).max(1)),
        _ => batch,
    }
}

#[expect(clippy::too_many_arguments, reason = "the cycle's inputs, passed through from run_cycle")]
fn run_cycle_inner(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    ledger: &mut dyn Ledger,
    contract: Contract,
    opts: &CycleOptions,
    cut: &mut dyn FnMut() -> Result<(), HookError>,
    qd: usize,
    filler: &mut Filler<'_>,
) -> Result<CycleOutcome, WriteError> {
    let mut c = CycleLoop::start(target, layout.spec(), ledger, contract, opts, qd, filler)?;
    loop {
        let placement_ready = c.placement_ready();
        let quiescing = placement_ready && opts.cut.is_some_and(|p| p.quiesces());
        c.submit(placement_ready, quiescing)?;
        if quiescing && matches!(opts.cut, Some(CutPlacement::DuringFormat { .. })) {
            c.toward_format()?;
        }
        if quiescing && matches!(opts.cut, Some(CutPlacement::Shutdown { .. })) && c.inflight.is_empty() && c.flushes_inflight == 0 {
            if !c.shutdown_flushed {
                // Drained: the shutdown's flush, once; a normal shutdown's is the drive's own
                // (the controller's shutdown, at the cut): what it covers is taken now, and it
                // counts once the cut returns done.
                if matches!(opts.cut, Some(CutPlacement::Shutdown { controller: true, .. })) {
                    c.flush_no += 1;
                    c.t.flush_submitted(c.flush_no);
                    c.controller_flush = Some(c.flush_no);
                } else {
                    c.submit_flush()?;
                }
                c.shutdown_flushed = true;
            } else if !c.cut_done {
                // Flushed: what is durable goes to the ledger (and, for an agent, to the
                // coordinator) before the host goes down.
                c.checkpoint()?;
                c.ledger.sync()?;
            }
        }
        // One clock reading per turn of the loop, for the duration and the checkpoint interval.
        let now = Instant::now();
        if opts.duration.is_some_and(|d| now.duration_since(c.start) >= d) || opts.stop.as_ref().is_some_and(StopToken::is_stopped) {
            c.stopping = true;
        }

        // Reap.
        if c.cut_due(placement_ready, quiescing) {
            c.cut(cut);
        }
        if c.inflight.is_empty() && c.flushes_inflight == 0 {
            if c.stopping {
                break;
            }
            continue;
        }
        if !c.reap()? {
            break;
        }

        if now.duration_since(c.last_checkpoint) >= opts.checkpoint_every {
            c.checkpoint()?;
            c.last_checkpoint = Instant::now();
        }
    }
    let cut_failed = c.cut_failed.take();
    let out = c.finish()?;
    match cut_failed {
        Some(why) => Err(WriteError::Cut { why, outcome: Box::new(out) }),
        None => Ok(out),
    }
}

/// The state of one cycle's I/O loop (`run_cycle_inner`): what is in flight, what the
/// ledger has reserved, and what the cycle has seen so far.
struct CycleLoop<'a, 'f> {
    target: &'a mut dyn BlockTarget,
    spec: &'a WorkloadSpec,
    ledger: &'a mut dyn Ledger,
    opts: &'a CycleOptions,
    filler: &'a mut Filler<'f>,
    qd: usize,
    window: u64,
    reserve_step: u64,
    start: Instant,
    out: CycleOutcome,
    t: Tracker,
    /// In-flight writes with the instant each was submitted.
    inflight: BTreeMap<u64, (WritePlan, Instant)>,
    write_latency: LatencyHistogram,
    flushes_inflight: usize,
    done: Vec<Completion>,
    reserved_req: u64,
    reserve_seq: u64,
    reserved_ok: u64,
    next_id: u64,
    since_flush: u64,
    last_flush: Instant,
    last_checkpoint: Instant,
    flush_no: u64,
    stopping: bool,
    /// Consecutive writes failed with EIO before the cut.
    eio_run: u32,
    cut_done: bool,
    /// The `Shutdown` or `DuringFormat` placement's flush was submitted.
    shutdown_flushed: bool,
    /// `DuringFormat`: when the format was sent.
    format_sent: Option<Instant>,
    /// A normal shutdown: the flush number standing for the controller's shutdown, which
    /// covers what had completed when the writer drained, once the cut returned done.
    controller_flush: Option<u64>,
    /// The cut hook failed with this: the cycle ends as after a cut, and says so.
    cut_failed: Option<HookError>,
    cut_instant: Option<Instant>,
    /// The last successful write completion before the cut.
    last_completion: Option<Instant>,
}

impl<'a, 'f> CycleLoop<'a, 'f> {
    /// Records the cycle start and the first reservation.
    fn start(
        target: &'a mut dyn BlockTarget,
        spec: &'a WorkloadSpec,
        ledger: &'a mut dyn Ledger,
        contract: Contract,
        opts: &'a CycleOptions,
        qd: usize,
        filler: &'a mut Filler<'f>,
    ) -> Result<Self, WriteError> {
        // Reservations double (up to 2^20 ids) so a cycle appends O(log writes) of them; the
        // price is that after a harness crash up to one step of never-submitted ids counts as
        // possibly submitted.
        let reserve_step = 1024.max(16 * qd as u64);
        let cycle = opts.cycle;
        let start = Instant::now();
        ledger.append(&Record::CycleStart { cycle, first_id: opts.first_id, at: opts.started_at.clone(), port: opts.port })?;
        let reserved_req = opts.first_id + reserve_step;
        let reserve_seq = ledger.append(&Record::Reserve { cycle, upto: reserved_req })?;
        Ok(CycleLoop {
            target,
            spec,
            ledger,
            opts,
            filler,
            qd,
            window: 4 * qd as u64 + 64,
            reserve_step,
            start,
            out: CycleOutcome::default(),
            t: Tracker::new(contract, opts.first_id),
            inflight: BTreeMap::new(),
            write_latency: LatencyHistogram::new(),
            last_completion: None,
            flushes_inflight: 0,
            done: Vec::new(),
            reserved_req,
            reserve_seq,
            reserved_ok: opts.first_id,
            next_id: opts.first_id,
            since_flush: 0,
            last_flush: Instant::now(),
            last_checkpoint: Instant::now(),
            flush_no: 0,
            stopping: false,
            eio_run: 0,
            cut_done: false,
            shutdown_flushed: false,
            format_sent: None,
            controller_flush: None,
            cut_failed: None,
            cut_instant: None,
        })
    }

    /// Submits while there is room: flushes when due (or when the cut placement waits for
    /// one), writes in id order within the window and the reservation, never two
    /// overlapping writes in flight.
    fn submit(&mut self, placement_ready: bool, quiescing: bool) -> Result<(), WriteError> {
        let (spec, opts, cycle) = (self.spec, self.opts, self.opts.cycle);
        // Writes submitted in one call reach the target together: one clock reading for all.
        let mut now: Option<Instant> = None;
        while !self.stopping && !quiescing && self.inflight.len() + self.flushes_inflight < self.qd {
            let force_flush = placement_ready && self.flushes_inflight == 0;
            let wants_flush = force_flush
                || spec.flush.every_writes.is_some_and(|n| self.since_flush >= n)
                || spec.flush.every_ms.is_some_and(|ms| self.since_flush > 0 && self.last_flush.elapsed() >= Duration::from_millis(ms));
            if wants_flush {
                self.submit_flush()?;
                continue;
            }
            if self.next_id >= self.t.finished_prefix() + self.window {
                break;
            }
            if self.next_id >= self.reserved_ok {
                if !self.ledger.is_durable(self.reserve_seq) {
                    self.ledger.wait_durable(self.reserve_seq)?;
                }
                self.reserved_ok = self.reserved_req;
            }
            if self.next_id + self.reserve_step / 2 >= self.reserved_req {
                self.reserve_step = (self.reserve_step * 2).min(1 << 20).max(self.reserve_step);
                self.reserved_req += self.reserve_step;
                self.reserve_seq = self.ledger.append(&Record::Reserve { cycle, upto: self.reserved_req })?;
            }
            let w = self.filler.peek()?;
            debug_assert_eq!(w.id, self.next_id);
            if self.inflight.values().any(|(o, _)| o.overlaps(w.offset, w.len)) {
                break;
            }
            let (w, buf) = self.filler.take()?;
            if self.filler.waited() {
                now = None; // time passed while the filler caught up
            }
            let submitted_at = *now.get_or_insert_with(Instant::now);
            let op = match w.zeroing() {
                None => Op::Write { token: w.id, offset: w.offset, buf, fua: w.fua, write_id: w.id },
                Some(kind) => {
                    self.filler.give_back(buf);
                    Op::Zero { token: w.id, offset: w.offset, len: w.len, kind, write_id: w.id }
                }
            };
            self.target.submit(op)?;
            self.inflight.insert(w.id, (w, submitted_at));
            self.next_id += 1;
            self.since_flush += 1;
            self.out.submitted += 1;
            if opts.max_writes.is_some_and(|m| self.out.submitted >= m)
                || opts.duration.is_some_and(|d| submitted_at.duration_since(self.start) >= d)
            {
                self.stopping = true;
            }
        }
        Ok(())
    }

    /// Submits a flush.
    fn submit_flush(&mut self) -> Result<(), WriteError> {
        self.flush_no += 1;
        self.t.flush_submitted(self.flush_no);
        self.target.submit(Op::Flush { token: FLUSH_TOKEN | self.flush_no })?;
        self.flushes_inflight += 1;
        self.since_flush = 0;
        self.last_flush = Instant::now();
        self.out.flushes += 1;
        Ok(())
    }

    /// Whether a cut placement that waits for something is reached: an outstanding flush
    /// (submit one if none is in flight), or a drained queue.
    fn placement_ready(&self) -> bool {
        !self.cut_done
            && match self.opts.cut {
                Some(CutPlacement::WhileFlushOutstanding { after_completions: k } | CutPlacement::Idle { after_completions: k }) => {
                    self.out.completed >= k
                }
                Some(CutPlacement::Shutdown { after_ms, after_completions, .. }) => {
                    self.out.completed >= after_completions && self.since_clock() >= Duration::from_millis(after_ms)
                }
                Some(CutPlacement::DuringFormat { after_completions, .. }) => self.out.completed >= after_completions,
                _ => false,
            }
    }

    /// How long since the clock the time placements count from started.
    fn since_clock(&self) -> Duration {
        self.opts.clock_from.unwrap_or(self.start).elapsed()
    }

    /// Whether the cut placement is reached now.
    fn cut_due(&self, placement_ready: bool, quiescing: bool) -> bool {
        !self.cut_done
            && match self.opts.cut {
                None => false,
                Some(CutPlacement::AfterCompletions { completions }) => self.out.completed >= completions,
                Some(CutPlacement::AfterTime { after_ms }) => self.since_clock() >= Duration::from_millis(after_ms),
                Some(CutPlacement::WhileFlushOutstanding { .. }) => placement_ready && self.flushes_inflight > 0,
                Some(CutPlacement::Idle { .. }) => quiescing && self.inflight.is_empty() && self.flushes_inflight == 0,
                Some(CutPlacement::Shutdown { .. }) => {
                    quiescing && self.shutdown_flushed && self.inflight.is_empty() && self.flushes_inflight == 0
                }
                Some(CutPlacement::DuringFormat { cut_after_ms, .. }) => self.format_cut_due(cut_after_ms),
            }
    }

    /// Records what is at risk and cuts. A failed cut may or may not have happened: the cycle
    /// goes on as after a cut (what is in flight drains or fails, and is uncertain), is
    /// recorded as cut, and ends with the error (so what it wrote is still verified).
    fn cut(&mut self, cut: &mut dyn FnMut() -> Result<(), HookError>) {
        // What the engine still holds back goes to the device first: the writes counted in
        // flight at the cut are then in flight there. (Should that fail, the reap after the
        // cut enters them again and reports what the device answers.)
        let _ = self.target.submit_queued();
        self.out.in_flight_at_cut = (self.inflight.len() + self.flushes_inflight) as u32;
        self.out.bytes_at_risk = self.inflight.values().map(|(w, _)| w.len).sum();
        self.out.completed_at_cut = self.out.completed;
        self.out.flush_outstanding_at_cut = self.flushes_inflight > 0;
        let now = Instant::now();
        self.cut_instant = Some(now);
        // The stretch from the last completion (or the start) to the cut counts too: a cut
        // that comes before any completion still says how long the port went without one.
        let tail = now.saturating_duration_since(self.last_completion.unwrap_or(self.start));
        self.out.max_completion_gap = Some(self.out.max_completion_gap.map_or(tail, |m| m.max(tail)));
        self.out.cut_at = Some(self.start.elapsed());
        match cut() {
            Err(e) => self.cut_failed = Some(e),
            // The controller shut down before the power went: what it covers is durable.
            Ok(()) => {
                if let Some(no) = self.controller_flush.take() {
                    self.t.flush_done(no, true);
                }
            }
        }
        self.cut_done = true;
        self.stopping = true;
    }

    /// Appends a checkpoint of what is durable so far.
    fn checkpoint(&mut self) -> Result<(), WriteError> {
        let (durable_prefix, durable_extras, failed) = self.t.durable();
        self.ledger.append(&Record::Checkpoint { cycle: self.opts.cycle, durable_prefix, durable_extras, failed })?;
        Ok(())
    }

    /// Ends the cycle (a last flush if it ended gracefully) and records its end.
    fn finish(mut self) -> Result<CycleOutcome, WriteError> {
        let end = if self.cut_done {
            EndKind::Cut
        } else {
            // Graceful: everything finished; one last flush makes it all durable.
            self.out.drained_at = Some(self.start.elapsed());
            self.flush_no += 1;
            self.t.flush_submitted(self.flush_no);
            self.target.submit(Op::Flush { token: FLUSH_TOKEN | self.flush_no })?;
            self.done.clear();
            self.target.reap(&mut self.done, 1, self.opts.drain_timeout)?;
            let ok = self.done.first().is_some_and(|c| c.token == FLUSH_TOKEN | self.flush_no && c.result.is_ok());
            self.t.flush_done(self.flush_no, ok);
            self.out.flushes += 1;
            self.out.final_flush_failed = !ok;
            EndKind::Graceful
        };
        let (durable_prefix, durable_extras, failed) = self.t.durable();
        if let Some(h) = &self.opts.before_end {
            (h.0)().map_err(WriteError::BeforeRecord)?;
        }
        let mut out = self.out;
        out.submitted_end = self.next_id;
        self.ledger.append(&Record::CycleEnd {
            cycle: self.opts.cycle,
            end,
            submitted_end: self.next_id,
            durable_prefix,
            durable_extras,
            failed,
            in_flight_at_end: out.in_flight_at_cut,
            bytes_at_risk: out.bytes_at_risk,
        })?;
        self.ledger.sync()?;
        out.end = Some(end);
        out.elapsed = self.start.elapsed();
        out.write_latency = self.write_latency.summary();
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
