//! The simulated drive as a device under test, in this process: the one-port drive, or one
//! port of the dual-port drive. One Dut for both: the drive keeps itself in the run directory,
//! and the Dut that answers for it (the one-port drive's only port, port A of the dual-port
//! drive) saves it whenever the writer is about to record what it holds, and hands out its
//! ground truth and its growth.

use super::{local_calls, probe, Cause, Dut, DutCycleError, DutError, FaultHook, GroundTruth, HealthLogs, HealthReadError};
use super::{Readiness, Shared, Workload};
use crate::format::Format;
use crate::ledger::Ledger;
use crate::port::PortId;
use crate::workload::Layout;
use crate::writer::{prefill_then, run_cycle, CycleOutcome, EndHook, HookError};
use faultline_drivers::BlockTarget;
use faultline_fixtures::{DualSim, SimDrive};
use std::time::{Duration, Instant};

/// The drive a simulated Dut belongs to. Clones share the drive.
#[derive(Clone)]
enum Drive {
    One(SimDrive),
    Dual(DualSim),
}

impl Drive {
    fn persist(&self) -> std::io::Result<()> {
        match self {
            Drive::One(d) => d.persist(),
            Drive::Dual(d) => d.persist(),
        }
    }

    fn truth(&self) -> GroundTruth {
        match self {
            Drive::One(d) => GroundTruth { extents: d.truth(), dead: !d.present(), disturbed: Vec::new() },
            Drive::Dual(d) => {
                GroundTruth { extents: d.truth(), dead: false, disturbed: d.disturbances().iter().map(|x| (x.port, x.cut)).collect() }
            }
        }
    }

    fn growth_bytes(&self) -> u64 {
        match self {
            Drive::One(d) => d.media_growth_bytes(),
            Drive::Dual(d) => d.media_growth_bytes(),
        }
    }
}

/// The simulated drive, or one port of it.
pub struct SimDut {
    target: Box<dyn BlockTarget>,
    drive: Drive,
    /// Whether this Dut answers for the drive: its saves, its ground truth, its growth.
    answers: bool,
}

impl SimDut {
    /// The one-port drive.
    pub fn one(drive: SimDrive) -> SimDut {
        SimDut { target: Box::new(drive.clone()), drive: Drive::One(drive), answers: true }
    }

    /// Port `p` of the dual-port drive; port A (0) answers for the drive.
    pub fn port(drive: &DualSim, p: u8) -> SimDut {
        SimDut { target: Box::new(drive.port(p)), drive: Drive::Dual(drive.clone()), answers: p == 0 }
    }

    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        Ok(self.target.as_mut())
    }

    /// A save of the drive, for the writer's hooks (every port saves the drive it writes to:
    /// what a port records durable must be in the saved drive, whichever port answers for it).
    fn saver(&self) -> impl Fn() -> Result<(), HookError> + Send + Sync + 'static {
        let drive = self.drive.clone();
        move || drive.persist().map_err(|e| HookError::from(DutError::Persist(Shared::new(e))))
    }
}

impl Dut for SimDut {
    local_calls!();

    /// The drive is saved at the cut, whether or not the fault worked (a failed one still ends
    /// the cycle as a cut in the ledger), before the writer records what the cut left durable.
    /// The ports of a multi-port drive that a fault did not hit go on writing after it, so
    /// their drive is saved again right before the writer records the cycle's end. A save holds
    /// the drive only while it takes the changes.
    fn run_cycle(&mut self, w: &Workload<'_>, ledger: &mut dyn Ledger, fault: &mut FaultHook<'_>) -> Result<CycleOutcome, DutCycleError> {
        let mut opts = std::borrow::Cow::Borrowed(w.opts);
        if matches!(self.drive, Drive::Dual(_)) {
            let (save, then) = (self.saver(), w.opts.before_end.clone());
            opts.to_mut().before_end = Some(EndHook(std::sync::Arc::new(move || {
                if let Some(h) = &then {
                    (h.0)()?;
                }
                save()
            })));
        }
        let save = self.saver();
        let mut hook = || -> Result<(), HookError> {
            let faulted = fault();
            save()?;
            Ok(faulted?)
        };
        Ok(run_cycle(self.target.as_mut(), w.layout, w.format, ledger, w.contract, &opts, &mut hook)?)
    }

    fn prefill(&mut self, layout: &Layout, format: &Format, port: PortId, ledger: &mut dyn Ledger) -> Result<u64, DutCycleError> {
        let save = self.saver();
        Ok(prefill_then(self.target.as_mut(), layout, format, port, ledger, &mut || save())?)
    }

    fn ground_truth(&self) -> Option<GroundTruth> {
        self.answers.then(|| self.drive.truth())
    }

    /// The drive never goes away, so it is never opened again: waits until it answers.
    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        let start = Instant::now();
        loop {
            match probe(self.target.as_mut(), at, timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(100))) {
                Ok(()) => return Ok(Readiness { enumerate: None, first_read: start.elapsed() }),
                // A read that fails for one bad block still shows a device that answers; the
                // verifier reports the block.
                Err(e) if !e.device_gone() => return Ok(Readiness { enumerate: None, first_read: start.elapsed() }),
                Err(e) if start.elapsed() >= timeout => {
                    return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last: Cause::of(e) })
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }

    fn release(&mut self) {}

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        None
    }

    /// The drive is saved at each cut, and a checkpoint must never claim more than the saved
    /// drive holds: none.
    fn checkpoint_every(&self) -> Duration {
        Duration::MAX
    }

    fn growth_bytes(&self) -> u64 {
        if self.answers {
            self.drive.growth_bytes()
        } else {
            0
        }
    }

    fn notes(&mut self) -> Vec<String> {
        Vec::new()
    }

    fn save(&mut self) -> Result<(), DutError> {
        if self.answers {
            self.drive.persist().map_err(|e| DutError::Persist(Shared::new(e)))?;
        }
        Ok(())
    }
}
