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
use crate::port::PortId;
use crate::verify::prefill_id;
use crate::workload::{Layout, WorkloadSpec, WritePlan};
use faultline_drivers::{AlignedBuf, BlockTarget, Completion, LatencyHistogram, LatencySummary, Op, TargetError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::time::{Duration, Instant};

const FLUSH_TOKEN: u64 = 1 << 63;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("cut: {0}")]
    Cut(String),
    #[error("target: {0}")]
    Stalled(String),
}

/// How a cycle is driven and ended.
#[derive(Clone, Debug)]
pub struct CycleOptions {
    pub cycle: u32,
    pub first_id: u64,
    /// Wall-clock timestamp recorded with the cycle start (the harness logic has no clock).
    pub started_at: String,
    pub port: PortId,
    /// Stop gracefully after this many writes were submitted.
    pub max_writes: Option<u64>,
    /// Stop gracefully after this long.
    pub duration: Option<Duration>,
    /// When to cut (call the cut hook); `None` ends the cycle gracefully.
    pub cut: Option<CutPlacement>,
    /// Interval between checkpoints (recovery points if the harness itself dies).
    pub checkpoint_every: Duration,
    /// How long to wait for in-flight operations to come back after a cut or at the end.
    pub drain_timeout: Duration,
    /// Ends the cycle gracefully when stopped from another thread (`None`: it ends by its
    /// placement, `max_writes` or `duration` alone).
    pub stop: Option<StopToken>,
}

/// Ends a cycle from another thread, gracefully: the writer stops submitting, drains, flushes
/// and records, as at the end of its `duration` (a surviving port's writer is stopped this way
/// when its fault window is over).
#[derive(Clone, Debug, Default)]
pub struct StopToken(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StopToken {
    pub fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Where in the workload the cut lands. Every placement but `Idle` cuts from inside the I/O
/// loop with the queue full: never after quiescing, which would test nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CutPlacement {
    /// As soon as this many writes have completed.
    AfterCompletions { completions: u64 },
    /// This long after the workload started.
    AfterTime { after_ms: u64 },
    /// Once this many writes have completed, while a flush is outstanding (the writer
    /// submits one then if none is in flight).
    WhileFlushOutstanding { after_completions: u64 },
    /// The control case: after this many completions, stop submitting, let everything
    /// complete, then cut a quiet drive.
    Idle { after_completions: u64 },
}

/// What a cycle did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    pub end: Option<EndKind>,
    pub submitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub flushes: u64,
    pub bytes_written: u64,
    pub in_flight_at_cut: u32,
    pub bytes_at_risk: u64,
    pub submitted_end: u64,
    pub elapsed: Duration,
    /// When the cut hook was called, from the start of the cycle, on the same monotonic clock
    /// as the completions.
    pub cut_at: Option<Duration>,
    /// When the first operation failed after the cut (the device stopped answering).
    pub device_gone_at: Option<Duration>,
    /// Completions before the cut.
    pub completed_at_cut: u64,
    /// A flush was in flight when the cut was issued.
    pub flush_outstanding_at_cut: bool,
    /// Latencies of this cycle's writes that completed successfully, from submission to the
    /// completion's timestamp (same monotonic clock); `None` when none completed.
    pub write_latency: Option<LatencySummary>,
}

struct FlushSnap {
    prefix: u64,
    extras: Vec<u64>,
}

/// Durable-state bookkeeping for one cycle, independent of any device.
pub struct Tracker {
    contract: Contract,
    first_id: u64,
    /// Every id below this has finished (completed or failed).
    finished_prefix: u64,
    /// Finished ids at or past `finished_prefix`.
    finished_above: BTreeSet<u64>,
    /// Successfully completed ids at or past `finished_prefix`.
    completed_above: BTreeSet<u64>,
    failed: Vec<u64>,
    /// Flush contract: every id below this is durable unless failed.
    flushed_prefix: u64,
    /// Flush contract: durable ids at or past `flushed_prefix` (flushed extras, FUA).
    flushed_extras: BTreeSet<u64>,
    flushes: HashMap<u64, FlushSnap>,
}

impl Tracker {
    pub fn new(contract: Contract, first_id: u64) -> Self {
        Tracker {
            contract,
            first_id,
            finished_prefix: first_id,
            finished_above: BTreeSet::new(),
            completed_above: BTreeSet::new(),
            failed: Vec::new(),
            flushed_prefix: first_id,
            flushed_extras: BTreeSet::new(),
            flushes: HashMap::new(),
        }
    }

    pub fn finished_prefix(&self) -> u64 {
        self.finished_prefix
    }

    pub fn write_done(&mut self, id: u64, ok: bool, fua: bool) {
        debug_assert!(id >= self.first_id);
        if ok {
            if id >= self.finished_prefix {
                self.completed_above.insert(id);
            }
            if fua && id >= self.flushed_prefix {
                self.flushed_extras.insert(id);
            }
        } else {
            self.failed.push(id);
        }
        self.finished_above.insert(id);
        while self.finished_above.remove(&self.finished_prefix) {
            self.finished_prefix += 1;
        }
        self.completed_above = self.completed_above.split_off(&self.finished_prefix);
    }

    /// Captures what a flush submitted now covers.
    pub fn flush_submitted(&mut self, flush: u64) {
        let snap = FlushSnap { prefix: self.finished_prefix, extras: self.completed_above.iter().copied().collect() };
        self.flushes.insert(flush, snap);
    }

    pub fn flush_done(&mut self, flush: u64, ok: bool) {
        let Some(snap) = self.flushes.remove(&flush) else { return };
        if !ok {
            return;
        }
        if snap.prefix > self.flushed_prefix {
            self.flushed_prefix = snap.prefix;
        }
        self.flushed_extras.extend(snap.extras);
        self.flushed_extras = self.flushed_extras.split_off(&self.flushed_prefix);
    }

    /// (durable prefix, durable ids past it, failed ids) under the contract.
    pub fn durable(&self) -> (u64, Vec<u64>, Vec<u64>) {
        let mut failed = self.failed.clone();
        failed.sort_unstable();
        match self.contract {
            Contract::Plp => (self.finished_prefix, self.completed_above.iter().copied().collect(), failed),
            Contract::Flush => (self.flushed_prefix, self.flushed_extras.iter().copied().collect(), failed),
        }
    }
}

/// Fills `buf` with the tagged sectors of write `w`.
pub fn fill_write(format: &Format, w: &WritePlan, cycle: u32, port: u8, buf: &mut [u8]) {
    let sector = format.sector_bytes();
    let count = (w.len / sector as u64) as u32;
    for (i, s) in buf.chunks_exact_mut(sector).enumerate() {
        let id = SectorId {
            run_id: format.run_id(),
            addr: w.offset + (i * sector) as u64,
            write_id: w.id,
            cycle,
            port,
            flags: 0,
            index: i as u32,
            count,
        };
        format.encode(&id, s);
    }
}

/// Runs one cycle. `cut` is called once, from inside the I/O loop (with the queue full,
/// except for the `Idle` placement), when the cut placement is reached.
///
/// Tagged buffers are made ahead, in id order, on a helper thread (the tagging is the
/// harness's main CPU cost; on two cores it overlaps with the I/O loop).
pub fn run_cycle(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    ledger: &mut dyn Ledger,
    contract: Contract,
    opts: &CycleOptions,
    cut: &mut dyn FnMut() -> Result<(), String>,
) -> Result<CycleOutcome, WriteError> {
    let qd = (layout.spec().queue_depth as usize).min(target.queue_depth()).max(1);
    let (cycle, port, first, max_bytes) = (opts.cycle, opts.port, opts.first_id, layout.spec().max_write_bytes as usize);
    std::thread::scope(|sc| {
        let (filled, rx) = sync_channel::<(WritePlan, AlignedBuf)>(qd);
        let (back, returned) = channel::<AlignedBuf>();
        sc.spawn(move || {
            for id in first.. {
                let w = layout.plan(id);
                let mut buf = returned.try_recv().unwrap_or_else(|_| AlignedBuf::zeroed(max_bytes));
                buf.resize(w.len as usize);
                fill_write(format, &w, cycle, port.0, &mut buf);
                if filled.send((w, buf)).is_err() {
                    return; // the cycle is over
                }
            }
        });
        let mut filler = Filler { rx, back, next: None };
        run_cycle_inner(target, layout, ledger, contract, opts, cut, qd, &mut filler)
    })
}

/// The receiving end of the buffer-making thread.
struct Filler {
    rx: Receiver<(WritePlan, AlignedBuf)>,
    back: Sender<AlignedBuf>,
    next: Option<(WritePlan, AlignedBuf)>,
}

impl Filler {
    /// The next write, in id order, without taking it.
    fn peek(&mut self) -> Result<WritePlan, WriteError> {
        if self.next.is_none() {
            self.next = Some(self.rx.recv().map_err(|_| WriteError::Stalled("the buffer-making thread stopped".into()))?);
        }
        Ok(self.next.as_ref().expect("just filled").0)
    }

    fn take(&mut self) -> Result<(WritePlan, AlignedBuf), WriteError> {
        self.peek()?;
        Ok(self.next.take().expect("peeked"))
    }

    fn give_back(&self, buf: AlignedBuf) {
        // The thread may have stopped at the end of the cycle; the buffer is then dropped.
        let _ = self.back.send(buf);
    }
}

#[expect(clippy::too_many_arguments, reason = "the cycle's inputs, passed through from run_cycle")]
fn run_cycle_inner(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    ledger: &mut dyn Ledger,
    contract: Contract,
    opts: &CycleOptions,
    cut: &mut dyn FnMut() -> Result<(), String>,
    qd: usize,
    filler: &mut Filler,
) -> Result<CycleOutcome, WriteError> {
    let mut c = CycleLoop::start(target, layout.spec(), ledger, contract, opts, qd, filler)?;
    loop {
        // Cut placements that wait for something: an outstanding flush (submit one if none
        // is in flight), or a drained queue.
        let placement_ready = match opts.cut {
            Some(CutPlacement::WhileFlushOutstanding { after_completions: k }) | Some(CutPlacement::Idle { after_completions: k }) => {
                !c.cut_done && c.out.completed >= k
            }
            _ => false,
        };
        let quiescing = placement_ready && matches!(opts.cut, Some(CutPlacement::Idle { .. }));
        c.submit(placement_ready, quiescing)?;
        if opts.duration.is_some_and(|d| c.start.elapsed() >= d) || opts.stop.as_ref().is_some_and(StopToken::is_stopped) {
            c.stopping = true;
        }

        // Reap.
        if c.cut_due(placement_ready, quiescing) {
            c.cut(cut)?;
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

        if c.last_checkpoint.elapsed() >= opts.checkpoint_every {
            c.checkpoint()?;
            c.last_checkpoint = Instant::now();
        }
    }
    c.finish()
}

/// The state of one cycle's I/O loop (`run_cycle_inner`): what is in flight, what the
/// ledger has reserved, and what the cycle has seen so far.
struct CycleLoop<'a> {
    target: &'a mut dyn BlockTarget,
    spec: &'a WorkloadSpec,
    ledger: &'a mut dyn Ledger,
    opts: &'a CycleOptions,
    filler: &'a mut Filler,
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
    cut_done: bool,
    cut_instant: Option<Instant>,
}

impl<'a> CycleLoop<'a> {
    /// Records the cycle start and the first reservation.
    fn start(
        target: &'a mut dyn BlockTarget,
        spec: &'a WorkloadSpec,
        ledger: &'a mut dyn Ledger,
        contract: Contract,
        opts: &'a CycleOptions,
        qd: usize,
        filler: &'a mut Filler,
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
            cut_done: false,
            cut_instant: None,
        })
    }

    /// Submits while there is room: flushes when due (or when the cut placement waits for
    /// one), writes in id order within the window and the reservation, never two
    /// overlapping writes in flight.
    fn submit(&mut self, placement_ready: bool, quiescing: bool) -> Result<(), WriteError> {
        let (spec, opts, cycle) = (self.spec, self.opts, self.opts.cycle);
        while !self.stopping && !quiescing && self.inflight.len() + self.flushes_inflight < self.qd {
            let force_flush = placement_ready && self.flushes_inflight == 0;
            let wants_flush = force_flush
                || spec.flush.every_writes.is_some_and(|n| self.since_flush >= n)
                || spec.flush.every_ms.is_some_and(|ms| self.since_flush > 0 && self.last_flush.elapsed() >= Duration::from_millis(ms));
            if wants_flush {
                self.flush_no += 1;
                self.t.flush_submitted(self.flush_no);
                self.target.submit(Op::Flush { token: FLUSH_TOKEN | self.flush_no })?;
                self.flushes_inflight += 1;
                self.since_flush = 0;
                self.last_flush = Instant::now();
                self.out.flushes += 1;
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
            let submitted_at = Instant::now();
            self.target.submit(Op::Write { token: w.id, offset: w.offset, buf, fua: w.fua, write_id: w.id })?;
            self.inflight.insert(w.id, (w, submitted_at));
            self.next_id += 1;
            self.since_flush += 1;
            self.out.submitted += 1;
            if opts.max_writes.is_some_and(|m| self.out.submitted >= m) || opts.duration.is_some_and(|d| self.start.elapsed() >= d) {
                self.stopping = true;
            }
        }
        Ok(())
    }

    /// Whether the cut placement is reached now.
    fn cut_due(&self, placement_ready: bool, quiescing: bool) -> bool {
        !self.cut_done
            && match self.opts.cut {
                None => false,
                Some(CutPlacement::AfterCompletions { completions }) => self.out.completed >= completions,
                Some(CutPlacement::AfterTime { after_ms }) => self.start.elapsed() >= Duration::from_millis(after_ms),
                Some(CutPlacement::WhileFlushOutstanding { .. }) => placement_ready && self.flushes_inflight > 0,
                Some(CutPlacement::Idle { .. }) => quiescing && self.inflight.is_empty() && self.flushes_inflight == 0,
            }
    }

    /// Records what is at risk and cuts. A failed cut drains what is in flight and ends the
    /// cycle with the error.
    fn cut(&mut self, cut: &mut dyn FnMut() -> Result<(), String>) -> Result<(), WriteError> {
        self.out.in_flight_at_cut = (self.inflight.len() + self.flushes_inflight) as u32;
        self.out.bytes_at_risk = self.inflight.values().map(|(w, _)| w.len).sum();
        self.out.completed_at_cut = self.out.completed;
        self.out.flush_outstanding_at_cut = self.flushes_inflight > 0;
        self.cut_instant = Some(Instant::now());
        self.out.cut_at = Some(self.start.elapsed());
        if let Err(e) = cut() {
            // The cut may or may not have happened. Let what is in flight finish (or
            // fail) so that the target is idle for whatever comes next; nothing of this
            // cycle counts as durable beyond its last checkpoint.
            self.drain_after_failed_cut()?;
            return Err(WriteError::Cut(e));
        }
        self.cut_done = true;
        self.stopping = true;
        Ok(())
    }

    fn drain_after_failed_cut(&mut self) -> Result<(), WriteError> {
        let deadline = Instant::now() + self.opts.drain_timeout;
        while (!self.inflight.is_empty() || self.flushes_inflight > 0) && Instant::now() < deadline {
            self.done.clear();
            if self.target.reap(&mut self.done, 1, deadline.saturating_duration_since(Instant::now()))? == 0 {
                break;
            }
            for c in self.done.drain(..) {
                if c.token & FLUSH_TOKEN != 0 {
                    self.flushes_inflight = self.flushes_inflight.saturating_sub(1);
                } else if self.inflight.remove(&c.token).is_some() {
                    if let Some(b) = c.buf {
                        self.filler.give_back(b);
                    }
                }
            }
        }
        Ok(())
    }

    /// Waits for completions and records them. `Ok(false)`: nothing came back after the
    /// cut, and the cycle is over.
    fn reap(&mut self) -> Result<bool, WriteError> {
        self.done.clear();
        let wait = if self.stopping { self.opts.drain_timeout } else { Duration::from_secs(30) };
        let got = self.target.reap(&mut self.done, 1, wait)?;
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
        match c.result {
            Ok(()) => {
                let ns = c.at.saturating_duration_since(submitted_at).as_nanos();
                self.write_latency.record(u64::try_from(ns).unwrap_or(u64::MAX));
                self.out.completed += 1;
                self.out.bytes_written += w.len;
                self.t.write_done(w.id, true, w.fua);
            }
            Err(e) => {
                self.out.failed += 1;
                self.t.write_done(w.id, false, w.fua);
                // Failures during the drain after a cut are expected by the thousand;
                // they are recorded in the cycle end, not one record each.
                if !self.cut_done {
                    self.ledger.append(&Record::WriteFailed { cycle: self.opts.cycle, id: w.id, errno: e.errno, detail: e.detail })?;
                }
            }
        }
        Ok(())
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
            self.flush_no += 1;
            self.t.flush_submitted(self.flush_no);
            self.target.submit(Op::Flush { token: FLUSH_TOKEN | self.flush_no })?;
            self.done.clear();
            self.target.reap(&mut self.done, 1, self.opts.drain_timeout)?;
            let ok = self.done.first().is_some_and(|c| c.token == FLUSH_TOKEN | self.flush_no && c.result.is_ok());
            self.t.flush_done(self.flush_no, ok);
            self.out.flushes += 1;
            EndKind::Graceful
        };
        let (durable_prefix, durable_extras, failed) = self.t.durable();
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

/// Writes the prefill version of every sector in the span, flushes, and records it.
pub fn prefill(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    port: PortId,
    ledger: &mut dyn Ledger,
) -> Result<u64, WriteError> {
    prefill_then(target, layout, format, port, ledger, &mut || Ok(()))
}

/// As [`prefill`], calling `before_record` once the data is written and flushed and before the
/// ledger records it (a simulated drive saves itself there, so that the ledger never claims
/// more than the saved drive holds).
pub fn prefill_then(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    port: PortId,
    ledger: &mut dyn Ledger,
    before_record: &mut dyn FnMut() -> Result<(), String>,
) -> Result<u64, WriteError> {
    let spec = layout.spec();
    let sector = format.sector_bytes();
    let chunk = 1u64 << 20;
    let qd = target.queue_depth().clamp(1, 32);
    let mut pos = spec.span_start;
    let mut pool: Vec<AlignedBuf> = Vec::new();
    let mut done = Vec::new();
    let mut inflight = 0usize;
    let mut failures = Vec::new();
    while pos < spec.span_end || inflight > 0 {
        while pos < spec.span_end && inflight < qd {
            let n = (spec.span_end - pos).min(chunk);
            let mut buf = pool.pop().unwrap_or_else(|| AlignedBuf::zeroed(chunk as usize));
            buf.resize(n as usize);
            for (i, s) in buf.chunks_exact_mut(sector).enumerate() {
                format.encode(&prefill_id(format.run_id(), pos + (i * sector) as u64, port.0), s);
            }
            target.submit(Op::Write { token: pos, offset: pos, buf, fua: false, write_id: 0 })?;
            inflight += 1;
            pos += n;
        }
        done.clear();
        if target.reap(&mut done, 1, Duration::from_secs(60))? == 0 {
            return Err(WriteError::Stalled("prefill: no completion within 60 s".into()));
        }
        for c in done.drain(..) {
            inflight -= 1;
            if let Err(e) = c.result {
                failures.push(e.to_string());
            }
            pool.extend(c.buf);
        }
    }
    target.submit(Op::Flush { token: FLUSH_TOKEN })?;
    done.clear();
    target.reap(&mut done, 1, Duration::from_secs(60))?;
    if let Some(e) = failures.first().cloned().or_else(|| done.first().and_then(|c| c.result.as_ref().err().map(|e| e.to_string()))) {
        return Err(WriteError::Stalled(format!("prefill failed ({} errors), first: {e}", failures.len().max(1))));
    }
    before_record().map_err(WriteError::Stalled)?;
    ledger.append(&Record::PrefillDone { span_start: spec.span_start, span_end: spec.span_end })?;
    ledger.sync()?;
    Ok(spec.span_end - spec.span_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{tests::tempdir, LedgerWriter, RunHeader, LEDGER_FORMAT};
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
    use faultline_drivers::{Geometry, IoFailure, PowerSwitch};
    use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};

    /// A drive whose in-flight operations never come back after the cut (a hung device):
    /// wraps the simulated drive and withholds every completion once power is off.
    struct Hangs {
        sim: SimDrive,
        cut: std::rc::Rc<std::cell::Cell<bool>>,
    }

    impl BlockTarget for Hangs {
        fn geometry(&self) -> Geometry {
            self.sim.geometry()
        }
        fn identity(&self) -> String {
            self.sim.identity()
        }
        fn queue_depth(&self) -> usize {
            self.sim.queue_depth()
        }
        fn submit(&mut self, op: Op) -> Result<(), TargetError> {
            self.sim.submit(op)
        }
        fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
            if self.cut.get() {
                return Ok(0);
            }
            self.sim.reap(out, min, timeout)
        }
        fn in_flight(&self) -> usize {
            self.sim.in_flight()
        }
        fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
            self.sim.read_at(offset, buf)
        }
    }

    /// A 1 MiB simulated drive, a run on it (random 4 KiB writes, QD16) and the cycle options.
    struct Rig {
        sim: SimDrive,
        ledger: LedgerWriter,
        layout: Layout,
        format: Format,
        opts: CycleOptions,
    }

    fn rig(model: FaultModel, contract: Contract, placement: CutPlacement, seed: u64) -> Rig {
        let truth = match contract {
            Contract::Plp => TruthContract::Plp,
            Contract::Flush => TruthContract::Flush,
        };
        let sim = SimDrive::new(SimConfig {
            capacity_bytes: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            queue_depth: 16,
            seed,
            model,
            contract: truth,
        });
        let spec = WorkloadSpec {
            seed,
            pattern: Pattern::Random,
            span_start: 0,
            span_end: 1 << 20,
            min_write_bytes: 4096,
            max_write_bytes: 4096,
            mean_write_bytes: 4096,
            align_bytes: 4096,
            queue_depth: 16,
            flush: FlushPolicy::default(),
        };
        let header = RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: seed,
            created_at: String::new(),
            target_identity: sim.identity(),
            target_capacity: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            contract,
            ports: crate::port::PortEntry::single(),
            workload: spec.clone(),
        };
        let opts = CycleOptions {
            cycle: 1,
            first_id: 1,
            started_at: String::new(),
            port: crate::port::PortId::A,
            max_writes: None,
            duration: None,
            cut: Some(placement),
            checkpoint_every: Duration::from_secs(60),
            drain_timeout: Duration::from_secs(1),
            stop: None,
        };
        let ledger = LedgerWriter::create(&tempdir(), header).unwrap();
        Rig { sim, ledger, layout: Layout::new(spec, 512).unwrap(), format: Format::new(seed, 512), opts }
    }

    fn sim_cycle(model: FaultModel, contract: Contract, placement: CutPlacement) -> (CycleOutcome, crate::verify::VerifyReport) {
        let mut r = rig(model, contract, placement, 5);
        let mut power = r.sim.power();
        let mut target = r.sim.clone();
        let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, contract, &r.opts, &mut || {
            power.power_off().map_err(|e| e.to_string())
        })
        .unwrap();
        power.power_on().unwrap();
        let rep = crate::verify::Verifier::new(&r.layout, r.ledger.history(), &r.format).verify(&mut target, 0, 1 << 20).unwrap();
        (out, rep)
    }

    #[test]
    fn cut_placements_land_where_asked_and_are_timed() {
        let (o, rep) = sim_cycle(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 300 });
        assert_eq!((o.end, o.completed_at_cut), (Some(EndKind::Cut), 300));
        assert!(o.in_flight_at_cut > 0 && o.bytes_at_risk > 0, "the queue is full at the cut: {o:?}");
        let (cut, gone) = (o.cut_at.unwrap(), o.device_gone_at.unwrap());
        assert!(gone >= cut, "the device stops answering after the cut: {o:?}");
        assert!(rep.findings.is_empty());

        let (o, _) = sim_cycle(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterTime { after_ms: 30 });
        assert!(o.cut_at.unwrap() >= Duration::from_millis(30) && o.in_flight_at_cut > 0, "{o:?}");

        let (o, rep) =
            sim_cycle(FaultModel::HonestVolatile, Contract::Flush, CutPlacement::WhileFlushOutstanding { after_completions: 200 });
        assert!(o.flush_outstanding_at_cut && o.completed_at_cut >= 200, "{o:?}");
        assert!(rep.findings.is_empty(), "{:?}", rep.findings);

        let (o, rep) = sim_cycle(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 200 });
        assert_eq!((o.in_flight_at_cut, o.bytes_at_risk, o.device_gone_at), (0, 0, None), "the control case cuts a quiet drive: {o:?}");
        assert!(rep.findings.is_empty());
    }

    #[test]
    fn sectors_carry_the_cycle_port_and_the_verifier_expects_it() {
        // A cycle through port B: its sectors say port 1, the ledger records it, and the
        // verifier expects it (before ports were recorded, any port but 0 was unexpected).
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 100 }, 9);
        r.opts.port = crate::port::PortId(1);
        let mut power = r.sim.power();
        let mut target = r.sim.clone();
        let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || {
            power.power_off().map_err(|e| e.to_string())
        })
        .unwrap();
        power.power_on().unwrap();
        assert_eq!(r.ledger.history().cycles[0].port, crate::port::PortId(1));
        let v = crate::verify::Verifier::new(&r.layout, r.ledger.history(), &r.format);
        let rep = v.verify(&mut target, 0, 1 << 20).unwrap();
        assert!(rep.findings.is_empty() && rep.durable_ok > 0, "{:?}", rep.findings);
        // A sector of a completed write rewritten as if port A had written it: not this write.
        let w = r.layout.plan(1);
        let mut sector = AlignedBuf::zeroed(512);
        target.read_at(w.offset, &mut sector).unwrap();
        let mut id = crate::format::read_header(&sector);
        assert_eq!((id.write_id, id.port), (1, 1), "{out:?}");
        id.port = 0;
        r.format.encode(&id, &mut sector);
        target.submit(Op::Write { token: 1, offset: w.offset, buf: sector, fua: true, write_id: 0 }).unwrap();
        let mut done = Vec::new();
        target.reap(&mut done, 1, Duration::from_secs(1)).unwrap();
        let rep = v.verify(&mut target, w.offset, w.offset + 512).unwrap();
        assert_eq!(rep.findings.len(), 1, "{:?}", rep.findings);
        assert!(rep.findings[0].detail.contains("port A") && rep.findings[0].detail.contains("port B"), "{:?}", rep.findings);
    }

    #[test]
    fn a_stop_token_ends_the_cycle_gracefully_from_another_thread() {
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 100 }, 4);
        let token = StopToken::default();
        (r.opts.cut, r.opts.stop) = (None, Some(token.clone()));
        let mut target = r.sim.clone();
        let out = std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                token.stop();
            });
            run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Err("no cut".into())).unwrap()
        });
        assert!(token.is_stopped());
        assert_eq!(out.end, Some(EndKind::Graceful), "{out:?}");
        assert!(out.completed > 0 && out.failed == 0 && out.cut_at.is_none(), "{out:?}");
        let rep = crate::verify::Verifier::new(&r.layout, r.ledger.history(), &r.format).verify(&mut target, 0, 1 << 20).unwrap();
        assert!(rep.findings.is_empty() && rep.durable_ok > 0, "everything it wrote is durable: {:?}", rep.findings);
    }

    #[test]
    fn a_cycle_reports_the_latencies_of_its_completed_writes() {
        fn check(o: &CycleOutcome) {
            let l = o.write_latency.unwrap_or_else(|| panic!("writes completed, so latencies are known: {o:?}"));
            assert_eq!(l.count, o.completed, "one latency per completed write, none for failed ones: {o:?}");
            assert!(l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns, "{l:?}");
            assert!(Duration::from_nanos(l.max_ns) <= o.elapsed, "no write outlasts its cycle: {l:?} {o:?}");
        }
        // A cut cycle: writes in flight at the cut fail, and only the completed ones count.
        let (o, _) = sim_cycle(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 300 });
        assert!(o.completed >= 300 && o.failed > 0, "{o:?}");
        check(&o);

        // A graceful cycle of 500 writes.
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 0 }, 9);
        (r.opts.cut, r.opts.max_writes) = (None, Some(500));
        let mut target = r.sim.clone();
        let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(())).unwrap();
        assert_eq!((o.end, o.completed, o.failed), (Some(EndKind::Graceful), 500, 0));
        check(&o);
    }

    #[test]
    fn a_cycle_whose_writes_all_failed_has_no_latencies() {
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 0 }, 4);
        let mut power = r.sim.power();
        let mut target = r.sim.clone();
        let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || {
            power.power_off().map_err(|e| e.to_string())
        })
        .unwrap();
        assert_eq!((o.completed, o.write_latency), (0, None), "{o:?}");
        assert!(o.failed > 0, "the cut landed on writes in flight: {o:?}");
    }

    #[test]
    fn operations_that_never_return_after_a_cut_are_recorded_as_failed() {
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 100 }, 3);
        r.opts.drain_timeout = Duration::from_millis(10);
        let mut power = r.sim.power();
        let cut = std::rc::Rc::new(std::cell::Cell::new(false));
        let mut target = Hangs { sim: r.sim.clone(), cut: cut.clone() };
        let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || {
            cut.set(true);
            power.power_off().map_err(|e| e.to_string())
        })
        .unwrap();
        let ledger = r.ledger;
        assert_eq!(out.end, Some(EndKind::Cut));
        assert!(out.in_flight_at_cut > 0);
        assert_eq!(out.failed, out.in_flight_at_cut as u64, "every abandoned write counts as failed");
        let c = &ledger.history().cycles[0];
        assert_eq!(c.end, Some(EndKind::Cut));
        assert_eq!(c.failed.len() as u32, out.in_flight_at_cut);
        assert!(c.failed.iter().all(|&id| !ledger.history().is_durable(id)));
    }

    #[test]
    fn plp_prefix_skips_failures_and_keeps_extras_bounded() {
        let mut t = Tracker::new(Contract::Plp, 10);
        t.write_done(11, true, false);
        t.write_done(13, true, false);
        assert_eq!(t.durable(), (10, vec![11, 13], vec![]));
        t.write_done(10, false, false);
        assert_eq!(t.durable(), (12, vec![13], vec![10]));
        t.write_done(12, true, false);
        assert_eq!(t.durable(), (14, vec![], vec![10]));
    }

    #[test]
    fn flush_covers_only_what_completed_before_its_submission() {
        let mut t = Tracker::new(Contract::Flush, 1);
        t.write_done(1, true, false);
        t.write_done(3, true, false);
        t.flush_submitted(1);
        t.write_done(2, true, false); // completes after the flush was submitted
        t.write_done(4, true, true); // FUA: durable on its own
        assert_eq!(t.durable(), (1, vec![4], vec![]));
        t.flush_done(1, true);
        assert_eq!(t.durable(), (2, vec![3, 4], vec![]));
        t.flush_submitted(2);
        t.flush_done(2, false);
        assert_eq!(t.durable(), (2, vec![3, 4], vec![]), "a failed flush makes nothing durable");
        t.flush_submitted(3);
        t.flush_done(3, true);
        assert_eq!(t.durable(), (5, vec![], vec![]));
    }
}
