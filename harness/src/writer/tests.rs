use super::*;
use crate::ledger::{tests::tempdir, LedgerWriter, RunHeader, LEDGER_FORMAT};
use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
use faultline_drivers::{Geometry, IoFailure, PowerSwitch};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};

/// A drive whose in-flight operations never come back after the cut (a hung device):
/// wraps the simulated drive and withholds every completion once power is off.
struct Hangs {
    sim: SimDrive,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
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
        if self.cut.load(std::sync::atomic::Ordering::Relaxed) {
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
        dealloc_reads: Default::default(),
    });
    let spec = WorkloadSpec {
        seed,
        pattern: Pattern::Random {},
        span_start: 0,
        span_end: 1 << 20,
        min_write_bytes: 4096,
        max_write_bytes: 4096,
        mean_write_bytes: 4096,
        align_bytes: 4096,
        queue_depth: 16,
        flush: FlushPolicy::default(),
        ops: Default::default(),
    };
    let header = RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: seed,
        created_at: String::new(),
        target_identity: sim.identity(),
        target_capacity: 1 << 20,
        sector_bytes: 512,
        atomic_bytes: 512,
        dealloc_reads: Default::default(),
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
        samples: None,
        fill: Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    let ledger = LedgerWriter::create(&tempdir(), header).unwrap();
    Rig { sim, ledger, layout: Layout::new(spec, 512).unwrap(), format: Format::new(seed, 512), opts }
}

fn sim_cycle(model: FaultModel, contract: Contract, placement: CutPlacement) -> (CycleOutcome, crate::verify::VerifyReport) {
    sim_cycle_fill(model, contract, placement, Fill::Auto)
}

fn sim_cycle_fill(
    model: FaultModel,
    contract: Contract,
    placement: CutPlacement,
    fill: Fill,
) -> (CycleOutcome, crate::verify::VerifyReport) {
    let mut r = rig(model, contract, placement, 5);
    r.opts.fill = fill;
    let mut power = r.sim.power();
    let mut target = r.sim.clone();
    let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, contract, &r.opts, &mut || Ok(power.power_off()?)).unwrap();
    power.power_on().unwrap();
    let rep = crate::verify::Verifier::new(&r.layout, r.ledger.history(), &r.format).verify(&mut target, 0, 1 << 20).unwrap();
    (out, rep)
}

#[test]
fn cut_placements_land_where_asked_and_are_timed() {
    for fill in [Fill::Thread, Fill::Inline] {
        let (o, rep) = sim_cycle_fill(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 300 }, fill);
        assert_eq!((o.end, o.completed_at_cut), (Some(EndKind::Cut), 300), "{fill:?}");
        assert!(o.in_flight_at_cut > 0 && o.bytes_at_risk > 0, "the queue is full at the cut ({fill:?}): {o:?}");
        let (cut, gone) = (o.cut_at.unwrap(), o.device_gone_at.unwrap());
        assert!(gone >= cut, "the device stops answering after the cut ({fill:?}): {o:?}");
        assert!(rep.findings.is_empty(), "{fill:?}: {:?}", rep.findings);

        let (o, _) = sim_cycle_fill(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterTime { after_ms: 30 }, fill);
        assert!(o.cut_at.unwrap() >= Duration::from_millis(30) && o.in_flight_at_cut > 0, "{fill:?}: {o:?}");

        let placement = CutPlacement::WhileFlushOutstanding { after_completions: 200 };
        let (o, rep) = sim_cycle_fill(FaultModel::HonestVolatile, Contract::Flush, placement, fill);
        assert!(o.flush_outstanding_at_cut && o.completed_at_cut >= 200, "{fill:?}: {o:?}");
        assert!(rep.findings.is_empty(), "{fill:?}: {:?}", rep.findings);

        let (o, rep) = sim_cycle_fill(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 200 }, fill);
        let quiet = (o.in_flight_at_cut, o.bytes_at_risk, o.device_gone_at);
        assert_eq!(quiet, (0, 0, None), "the control case cuts a quiet drive ({fill:?}): {o:?}");
        assert!(rep.findings.is_empty(), "{fill:?}: {:?}", rep.findings);
    }
}

/// A host's clean shutdown drains and flushes before the cut: every write acknowledged is
/// then owed, under the flush contract too. An honest volatile drive keeps them all; one that
/// acknowledges a flush it did not do is found losing them. Cut at the same time with the
/// queue full and no flush, the same liar owes nothing and is not found.
#[test]
fn a_clean_shutdown_drains_flushes_and_owes_every_acknowledged_write() {
    let place = CutPlacement::Shutdown { after_ms: 30, after_completions: 0, controller: false };
    let (o, rep) = sim_cycle(FaultModel::HonestVolatile, Contract::Flush, place);
    assert_eq!((o.in_flight_at_cut, o.bytes_at_risk, o.flush_outstanding_at_cut), (0, 0, false), "a quiet, flushed drive: {o:?}");
    assert!(o.cut_at.unwrap() >= Duration::from_millis(30) && o.flushes >= 1 && o.completed_at_cut > 0, "{o:?}");
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
    assert!(rep.durable_ok > 0 && rep.newer_ok == 0, "everything acknowledged was owed and found: {rep:?}");
    let (o, rep) = sim_cycle(FaultModel::LiesAboutFlush, Contract::Flush, place);
    assert!(o.completed_at_cut > 0, "{o:?}");
    assert!(rep.findings.iter().any(|f| f.class.name() == "lost_write"), "the shutdown's flush was a lie: {:?}", rep.findings);
    let (_, rep) = sim_cycle(FaultModel::LiesAboutFlush, Contract::Flush, CutPlacement::AfterTime { after_ms: 30 });
    assert!(rep.findings.is_empty(), "nothing flushed, nothing owed: {:?}", rep.findings);
}

#[test]
fn both_fills_write_the_same_bytes_and_record_the_same() {
    // One graceful cycle of 700 writes (random 4 KiB at QD16 over 1 MiB, so blocks are
    // written over and over) tagged on the helper thread, the same tagged inline: the drive
    // holds the same bytes and the ledger says the same.
    let run = |fill: Fill| {
        let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 0 }, 21);
        (r.opts.cut, r.opts.max_writes, r.opts.fill) = (None, Some(700), fill);
        let mut target = r.sim.clone();
        let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(())).unwrap();
        let mut bytes = vec![0u8; 1 << 20];
        for (i, b) in bytes.chunks_mut(4096).enumerate() {
            target.read_at(i as u64 * 4096, b).unwrap();
        }
        let rep = crate::verify::Verifier::new(&r.layout, r.ledger.history(), &r.format).verify(&mut target, 0, 1 << 20).unwrap();
        let c = &r.ledger.history().cycles[0];
        ((o.end, o.submitted, o.completed, o.failed, o.flushes, c.submitted_end, c.durable_prefix, blake3::hash(&bytes)), rep)
    };
    let ((thread, thread_rep), (inline, inline_rep)) = (run(Fill::Thread), run(Fill::Inline));
    assert_eq!((thread.0, thread.2), (Some(EndKind::Graceful), 700), "seed 21, thread: {thread:?}");
    assert!(thread_rep.findings.is_empty() && thread_rep.durable_ok > 0, "seed 21: {:?}", thread_rep.findings);
    assert_eq!(thread, inline, "seed 21: the thread's cycle, then the inline one");
    assert_eq!((inline_rep.findings, inline_rep.durable_ok), (thread_rep.findings, thread_rep.durable_ok), "seed 21");
}

#[test]
fn inline_batches_are_kept_small_in_bytes() {
    // A quarter of the queue either way for 4 KiB writes; inline, 128 KiB writes go two at a
    // time and 1 MiB writes one at a time, so reaping is never held up long.
    assert_eq!((batch_size(Fill::Inline, 32, 4096), batch_size(Fill::Thread, 32, 4096)), (8, 8));
    assert_eq!((batch_size(Fill::Inline, 32, 128 << 10), batch_size(Fill::Thread, 32, 128 << 10)), (2, 8));
    assert_eq!((batch_size(Fill::Inline, 256, 1 << 20), batch_size(Fill::Thread, 256, 1 << 20)), (1, 16));
    assert_eq!((batch_size(Fill::Inline, 1, 512), batch_size(Fill::Thread, 1, 512)), (1, 1));
}

#[test]
fn auto_fill_is_inline_on_two_cpus_or_fewer() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let want = if cpus <= INLINE_UP_TO_CPUS { Fill::Inline } else { Fill::Thread };
    assert_eq!(Fill::Auto.resolve(), want, "{cpus} CPUs");
    assert_eq!((Fill::Thread.resolve(), Fill::Inline.resolve()), (Fill::Thread, Fill::Inline));
}

#[test]
fn sectors_carry_the_cycle_port_and_the_verifier_expects_it() {
    // A cycle through port B: its sectors say port 1, the ledger records it, and the
    // verifier expects it (before ports were recorded, any port but 0 was unexpected).
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 100 }, 9);
    r.opts.port = crate::port::PortId(1);
    let mut power = r.sim.power();
    let mut target = r.sim.clone();
    let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(power.power_off()?)).unwrap();
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
    assert_eq!(o.drained_at, None, "a cut cycle is not drained: {o:?}");
    check(&o);

    // A graceful cycle of 500 writes.
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 0 }, 9);
    (r.opts.cut, r.opts.max_writes) = (None, Some(500));
    let mut target = r.sim.clone();
    let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(())).unwrap();
    assert_eq!((o.end, o.completed, o.failed), (Some(EndKind::Graceful), 500, 0));
    // Its writes came back before its closing flush, which the elapsed time includes.
    let drained = o.drained_at.unwrap_or_else(|| panic!("a graceful cycle is drained: {o:?}"));
    assert!(drained <= o.elapsed && drained >= Duration::from_nanos(o.write_latency.expect("writes completed").max_ns), "{o:?}");
    check(&o);
}

#[test]
fn a_cycle_whose_writes_all_failed_has_no_latencies() {
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 0 }, 4);
    let mut power = r.sim.power();
    let mut target = r.sim.clone();
    let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(power.power_off()?)).unwrap();
    assert_eq!((o.completed, o.write_latency), (0, None), "{o:?}");
    assert!(o.failed > 0, "the cut landed on writes in flight: {o:?}");
}

#[test]
fn operations_that_never_return_after_a_cut_are_recorded_as_failed() {
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 100 }, 3);
    r.opts.drain_timeout = Duration::from_millis(10);
    let mut power = r.sim.power();
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut target = Hangs { sim: r.sim.clone(), cut: cut.clone() };
    let out = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || {
        cut.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(power.power_off()?)
    })
    .unwrap();
    let ledger = r.ledger;
    assert_eq!(out.end, Some(EndKind::Cut));
    assert!(out.in_flight_at_cut > 0);
    assert_eq!(out.failed, out.in_flight_at_cut as u64, "every abandoned write counts as failed");
    let c = &ledger.history().cycles[0];
    assert_eq!(c.end, Some(EndKind::Cut));
    assert_eq!(c.failed.len() as u32, out.in_flight_at_cut);
    assert!(c.failed.iter().all(|id| !ledger.history().is_durable(id)));
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

/// The simulated drive, except that once, after `after` completions, it holds the next
/// completions back for `stall` (a drive whose firmware stops answering for a while).
struct Stalling {
    sim: SimDrive,
    after: usize,
    stall: Duration,
    reaped: usize,
    stalled: bool,
}

impl BlockTarget for Stalling {
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
        if !self.stalled && self.reaped >= self.after {
            self.stalled = true;
            std::thread::sleep(self.stall);
        }
        let n = self.sim.reap(out, min, timeout)?;
        self.reaped += n;
        Ok(n)
    }
    fn in_flight(&self) -> usize {
        self.sim.in_flight()
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        self.sim.read_at(offset, buf)
    }
}

#[test]
fn a_cycle_reports_the_longest_stretch_without_a_completion() {
    // A drive that stops completing for 120 ms after 200 completions: the gap is at least that
    // long (a lower bound the sleep guarantees; an upper one would be a timed test), and it
    // lies within the write phase.
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::Idle { after_completions: 0 }, 13);
    (r.opts.cut, r.opts.max_writes) = (None, Some(600));
    let stall = Duration::from_millis(120);
    let mut target = Stalling { sim: r.sim.clone(), after: 200, stall, reaped: 0, stalled: false };
    let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(())).unwrap();
    assert_eq!((o.end, o.completed), (Some(EndKind::Graceful), 600), "seed 13: {o:?}");
    let gap = o.max_completion_gap.expect("writes completed");
    assert!(gap >= stall && gap <= o.elapsed, "seed 13: gap {gap:?}, stall {stall:?}, cycle {:?}", o.elapsed);
    // None completed before the cut: the gap is the stretch from the start to the cut.
    let mut r = rig(FaultModel::HonestPlp, Contract::Plp, CutPlacement::AfterCompletions { completions: 0 }, 4);
    let mut power = r.sim.power();
    let mut target = r.sim.clone();
    let o = run_cycle(&mut target, &r.layout, &r.format, &mut r.ledger, Contract::Plp, &r.opts, &mut || Ok(power.power_off()?)).unwrap();
    assert_eq!((o.completed, o.max_completion_gap.map(|g| g <= o.cut_at.unwrap())), (0, Some(true)), "{o:?}");
    assert!(o.max_completion_gap.unwrap() > Duration::ZERO, "{o:?}");
}
