//! The write phase of one cycle, for one port or many: every writer port writes on its own
//! thread, the fault runs on its own ([`FaultThread`]), and the port the fault hits (every
//! writer, for a fault that hits every port) ends its cycle at the cut, fired from its
//! writer's hook.
//!
//! Where the cut lands is the cycle's placement. With windows (a dual-port plan), the ports the
//! fault does not hit are sampled on one clock, the fault lands after warm-up and baseline, and
//! the main thread keeps the windows: it fires a fault on a port that writes nothing, waits
//! until the faulted port answers again after a link fault (its writer's thread waits for it)
//! and the settle time, then stops the other writers. Without windows, every writer cuts at
//! the placement and the phase ends when they do; one writer without windows (a single-port
//! run) writes on the runner's own thread.

use super::dut::{DutCycleError, DutError, Readiness, Workload};
use super::fault::{ControllerError, Cutter};
use super::fault_thread::FaultThread;
use super::lane::Lane;
use super::options::RunnerOptions;
use super::ports::PortSet;
use crate::run::OpenRun;
use crate::scenario::{DualSpec, RunPlan};
use crate::writer::windows::TICK;
use crate::writer::{CutPlacement, CycleOptions, CycleOutcome, Phase, PortSamples, StopToken, Windows, WriteError};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a port's writer ended its cycle without an outcome.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriterError {
    #[error("{0}")]
    Target(DutError),
    #[error("{0}")]
    Write(WriteError),
}

impl From<DutCycleError> for WriterError {
    fn from(e: DutCycleError) -> WriterError {
        match e {
            DutCycleError::Write(e) => WriterError::Write(e),
            DutCycleError::Dut(e) => WriterError::Target(e),
            DutCycleError::HostLost { why, .. } => WriterError::Target(DutError::NotBack(super::dut::Cause::text(why))),
        }
    }
}

/// What a writer thread gives back.
pub(super) struct PortEnd {
    /// What the port's writer wrote. A cut the controller failed still gives the outcome (the
    /// writer ended the cycle as cut all the same); the failure comes with [`Written::landed`].
    pub outcome: Result<CycleOutcome, WriterError>,
    /// A port a link fault hit, with windows: how long it took to answer again after the
    /// fault, or why not.
    pub ready: Option<Result<Readiness, DutError>>,
}

/// Why a cycle had no cut.
#[derive(Clone, Debug)]
pub(super) enum NoCut {
    /// The controller failed the command (the cut may or may not have happened).
    Controller(ControllerError),
    /// The faulted port's writer ended (failed) before it reached the fault.
    WriterEnded,
}

/// What the write phase of a cycle left.
pub(super) struct Written {
    /// Each writer port's end, by port index.
    pub ends: Vec<(usize, PortEnd)>,
    /// The fault: how long its command took, or why there was no cut (`None`: it never
    /// landed).
    pub landed: Option<Result<Duration, NoCut>>,
    /// Each port's samples, with windows.
    pub windows: Option<Arc<Windows>>,
    pub started: Instant,
    pub t_end: Instant,
}

/// The cycle's write phase, as the cycle asks for it.
pub(super) struct WritePhase<'a> {
    pub cycle: u32,
    /// The port the fault hits (an index into the run's ports), and whether it hits every port.
    pub hit: usize,
    pub every: bool,
    /// Whether the fault is a power cut (after which every port waits for the power, not for
    /// its own link).
    pub power: bool,
    /// Where the faulted writers cut.
    pub place: CutPlacement,
    /// The windows of a dual-port plan.
    pub windows: Option<&'a DualSpec>,
    /// Where a port is probed for an answer.
    pub probe_at: u64,
}

/// Runs the write phase: each lane's writer through its port, on its own thread (a lone
/// writer without windows on this one).
pub(super) fn write(
    plan: &RunPlan,
    o: &RunnerOptions,
    ports: &mut PortSet,
    lanes: &mut [Lane],
    cutter: &mut Cutter,
    p: &WritePhase<'_>,
) -> Written {
    let windows = p.windows.map(|_| Arc::new(Windows::new(ports.len())));
    let stop = StopToken::default();
    let fault_lane = lanes.iter().position(|l| l.port == p.hit);
    let started = Instant::now();
    let (landed_tx, landed_rx) = mpsc::channel::<Result<Duration, NoCut>>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<Readiness, DutError>>();
    let ids: Vec<_> = (0..ports.len()).map(|i| ports.id(i)).collect();
    // One writer without windows writes on this thread: a real device's io_uring ring takes
    // submissions only from the thread that made it (a single issuer).
    let inline = windows.is_none() && lanes.len() == 1;
    let ticking = std::sync::atomic::AtomicBool::new(true);
    // The fault's thread outlives the writers' (whose hooks fire it): an outer scope.
    std::thread::scope(|outer| {
        let fault = &fault_thread(outer, cutter, plan, p, lanes.len());
        std::thread::scope(|sc| {
            let (mut handles, mut ends, mut idle) = (Vec::new(), Vec::new(), Vec::new());
            let mut lane_of: Vec<Option<&mut Lane>> = (0..ports.len()).map(|_| None).collect();
            for l in lanes.iter_mut() {
                let i = l.port;
                lane_of[i] = Some(l);
            }
            for (i, (dev, lane)) in ports.duts.iter_mut().zip(lane_of).enumerate() {
                let Some(lane) = lane else {
                    idle.push((i, dev));
                    continue;
                };
                // This writer's cycle ends at the cut; the port it writes through is hit.
                let cuts = i == p.hit || p.every;
                let copts = cycle_options(o, p, lane, ids[i], dev.checkpoint_every(), cuts, (&stop, &windows, i), (started, plan));
                let job = WriterJob {
                    i,
                    dev,
                    lane,
                    copts,
                    windows: windows.clone(),
                    fault,
                    landed_tx: landed_tx.clone(),
                    ready_tx: ready_tx.clone(),
                    cuts,
                    phase: p,
                    plan,
                };
                if inline {
                    ends.push(job.run());
                } else {
                    handles.push(sc.spawn(move || job.run()));
                }
            }
            drop((landed_tx, ready_tx));
            let landed = match (p.windows, &windows) {
                (Some(spec), Some(windows)) => {
                    let ticker = ticker(sc, windows, &ticking);
                    let hit_idle = idle.iter_mut().find(|(i, _)| *i == p.hit).map(|(_, d)| &mut ***d as &mut dyn crate::runner::dut::Dut);
                    let landed = through_windows(plan, p, spec, windows, fault, (fault_lane, hit_idle), (&landed_rx, &ready_rx));
                    stop.stop();
                    ticking.store(false, std::sync::atomic::Ordering::Release);
                    let _ = ticker.join();
                    landed
                }
                _ if fault_lane.is_none() && !p.every => Some(fault.fire().map_err(NoCut::Controller)),
                // Every writer cuts at the placement: the phase ends when they do.
                _ => None,
            };
            ends.extend(handles.into_iter().filter_map(|h| h.join().ok()));
            let landed = landed.or_else(|| landed_rx.try_recv().ok());
            Written { ends, landed, windows: windows.clone(), started, t_end: Instant::now() }
        })
    })
}

/// The phase's fault thread: a clean shutdown of every host gathers all `writers` (each
/// drains, and the cut finds them all drained); any other cut is fired by the first writer.
fn fault_thread<'s, 'e>(
    scope: &'s std::thread::Scope<'s, 'e>,
    cutter: &'e mut Cutter,
    plan: &RunPlan,
    p: &WritePhase<'_>,
    writers: usize,
) -> FaultThread {
    let fault = FaultThread::spawn(scope, cutter, plan.off_time(p.cycle));
    if p.every && matches!(p.place, CutPlacement::Shutdown { .. }) {
        fault.gather(writers);
    }
    fault
}

/// One writer's cycle options: it cuts at the placement when the fault hits its port, else
/// it writes until `stop`; with windows, it samples into its slot on the phase's clock.
#[expect(clippy::too_many_arguments, reason = "one writer's share of the phase, named where it is built")]
fn cycle_options(
    o: &RunnerOptions,
    p: &WritePhase<'_>,
    lane: &mut Lane,
    port: crate::port::PortId,
    checkpoint_every: Duration,
    cuts: bool,
    (stop, windows, i): (&StopToken, &Option<Arc<Windows>>, usize),
    (started, plan): (Instant, &RunPlan),
) -> CycleOptions {
    let (c, first_id) = lane.run.next_cycle();
    debug_assert_eq!(c, p.cycle);
    CycleOptions {
        cycle: p.cycle,
        first_id,
        started_at: (o.clock)(),
        port,
        max_writes: None,
        duration: None,
        cut: cuts.then_some(p.place),
        checkpoint_every,
        drain_timeout: plan.readiness_timeout.clamp(Duration::from_secs(1), Duration::from_secs(30)),
        stop: (!cuts).then(|| stop.clone()),
        samples: windows.as_ref().map(|w| PortSamples::slot(w, i)),
        fill: crate::writer::Fill::Auto,
        clock_from: windows.is_some().then_some(started),
        before_end: None,
    }
}

/// One writer port's share of the write phase, run on its own thread (or this one).
struct WriterJob<'a, 'p> {
    i: usize,
    dev: &'a mut Box<dyn crate::runner::dut::Dut>,
    lane: &'a mut Lane,
    copts: CycleOptions,
    windows: Option<Arc<Windows>>,
    fault: &'a FaultThread,
    landed_tx: mpsc::Sender<Result<Duration, NoCut>>,
    ready_tx: mpsc::Sender<Result<Readiness, DutError>>,
    cuts: bool,
    phase: &'p WritePhase<'p>,
    plan: &'a RunPlan,
}

impl WriterJob<'_, '_> {
    /// Writes the cycle through the port, firing the fault from the hook at the placement;
    /// with windows, a port a link fault hit is waited for here, so that the others' fault
    /// window ends when it answers again.
    fn run(self) -> (usize, PortEnd) {
        let WriterJob { i, dev, lane, copts, windows, fault, landed_tx, ready_tx, cuts, phase: p, plan } = self;
        let OpenRun { ledger, layout, format, .. } = &mut lane.run;
        let mut arrived = false;
        let mut hook = || {
            if let Some(w) = &windows {
                w.enter(Phase::Fault);
            }
            arrived = true;
            let r = fault.fire();
            let _ = landed_tx.send(r.clone().map_err(NoCut::Controller));
            r.map(|_| ())
        };
        let w = Workload { layout, format, contract: plan.contract, opts: &copts };
        let outcome = match dev.run_cycle(&w, ledger, &mut hook) {
            Ok(out) => Ok(out),
            // A fault that failed may or may not have happened: the writer ended the cycle as
            // cut all the same, and what it wrote is settled (verified, recorded) like any
            // cycle's.
            Err(DutCycleError::Write(WriteError::Cut { outcome, .. })) => Ok(*outcome),
            // A host the cut took (its power), before or after its own writer reached the
            // placement: the cycle closed from what the coordinator held.
            Err(DutCycleError::HostLost { outcome, .. }) if fault.fired() => Ok(*outcome),
            Err(e) => Err(WriterError::from(e)),
        };
        if cuts && !arrived {
            // A cut that waits for every writer no longer waits for this one.
            fault.leave();
        }
        if i == p.hit && outcome.is_err() && !fault.fired() {
            // The fault did not land: tell the main thread not to wait for it.
            let _ = landed_tx.send(Err(NoCut::WriterEnded));
        }
        // After a power cut, every port waits for the power to come back on: first for the
        // whole cut to land (a host cut that took this port's host may still be holding it
        // off), then for the port to answer.
        let ready = (windows.is_some() && cuts && !p.power).then(|| {
            fault.settled();
            dev.wait_ready(p.probe_at, plan.readiness_timeout)
        });
        if let (Some(r), true) = (&ready, i == p.hit) {
            let _ = ready_tx.send(r.clone());
        }
        (i, PortEnd { outcome, ready })
    }
}

/// The windows around the fault, on the main thread: warm-up and baseline, the fault, the
/// port it hit back and answering (told by its writer, or waited for here when it is idle),
/// the settle time; then the after phase. What the fault came to, if it was fired.
#[expect(clippy::type_complexity, reason = "the phase's two channels, named where they are made")]
fn through_windows(
    plan: &RunPlan,
    p: &WritePhase<'_>,
    spec: &DualSpec,
    windows: &Windows,
    fault: &FaultThread,
    (fault_lane, hit_idle): (Option<usize>, Option<&mut dyn crate::runner::dut::Dut>),
    (landed_rx, ready_rx): (&mpsc::Receiver<Result<Duration, NoCut>>, &mpsc::Receiver<Result<Readiness, DutError>>),
) -> Option<Result<Duration, NoCut>> {
    let readiness = plan.readiness_timeout;
    let drains = matches!(p.place, CutPlacement::Shutdown { .. });
    let landed = keep_windows(spec, windows, fault, fault_lane.is_some() || p.every, drains, landed_rx, plan);
    let ready = match (&landed, fault_lane) {
        (Some(Ok(_)), _) if p.power => None,
        (Some(Ok(_)), Some(_)) => ready_rx.recv_timeout(readiness + Duration::from_secs(35)).ok(),
        (Some(Ok(_)), None) => hit_idle.map(|d| d.wait_ready(p.probe_at, readiness)),
        _ => None,
    };
    if matches!(ready, Some(Ok(_))) {
        std::thread::sleep(Duration::from_millis(spec.settle_ms));
    }
    windows.enter(Phase::After);
    landed
}

/// A thread that only sleeps: how late it wakes is how long the machine kept the harness from
/// running. A port that stalls while the harness itself could not run says nothing about the
/// drive.
fn ticker<'s>(
    sc: &'s std::thread::Scope<'s, '_>,
    windows: &Arc<Windows>,
    ticking: &'s std::sync::atomic::AtomicBool,
) -> std::thread::ScopedJoinHandle<'s, ()> {
    let windows = Arc::clone(windows);
    sc.spawn(move || {
        while ticking.load(std::sync::atomic::Ordering::Acquire) {
            let wanted = Instant::now() + TICK;
            std::thread::sleep(TICK);
            windows.record_lateness(wanted, Instant::now());
        }
    })
}

/// The windows on the main thread: warm-up, baseline, the fault (fired here when no writer
/// cuts: a fault on a port that writes nothing), until it has landed. A fault whose writer
/// `drains` first (a host's clean shutdown) begins when the drain does: its window opens at
/// the placement, before the writer's hook fires the cut.
fn keep_windows(
    spec: &DualSpec,
    windows: &Windows,
    fault: &FaultThread,
    a_writer_cuts: bool,
    drains: bool,
    landed_rx: &mpsc::Receiver<Result<Duration, NoCut>>,
    plan: &RunPlan,
) -> Option<Result<Duration, NoCut>> {
    std::thread::sleep(Duration::from_millis(spec.warmup_ms));
    windows.enter(Phase::Baseline);
    if !a_writer_cuts || drains {
        std::thread::sleep(Duration::from_millis(spec.baseline_ms));
        windows.enter(Phase::Fault);
    }
    if !a_writer_cuts {
        return Some(fault.fire().map_err(NoCut::Controller));
    }
    let fire_at = spec.warmup_ms + spec.baseline_ms;
    let budget = Duration::from_millis(fire_at) + plan.off_times.longest() + plan.readiness_timeout + Duration::from_secs(30);
    landed_rx.recv_timeout(budget).ok()
}
