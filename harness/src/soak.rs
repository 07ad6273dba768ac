//! Power-cut cycles against the simulated drive, in memory: write with the queue full, cut at
//! a seeded point, power on, verify the whole span. This is the loop behind the detection
//! matrix (`faultline selftest`), which checks every cycle against the drive's ground truth;
//! `faultline run` goes through `runner.rs` instead.

use crate::ledger::{Contract, RunHeader, LEDGER_FORMAT};
use crate::rng::WyRand;
use crate::run::{open_run, RunError};
use crate::verify::{Finding, FindingClass, Shown, Verifier, VerifyError, VerifyReport};
use crate::workload::WorkloadSpec;
use crate::writer::{prefill, run_cycle, CutPlacement, CycleOptions, CycleOutcome, WriteError};
use faultline_drivers::{BlockTarget, PowerSwitch};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract, TruthExtent};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub model: FaultModel,
    pub contract: Contract,
    pub workload: WorkloadSpec,
    pub cycles: u32,
    /// Seeds the drive's fault choices and the cut points (the workload has its own seed).
    pub seed: u64,
    pub capacity_bytes: u64,
    pub sector_bytes: u32,
    pub atomic_bytes: u32,
    pub prefill: bool,
    /// Cut after a number of completions drawn uniformly from this inclusive range.
    pub cut_after: (u64, u64),
}

#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error("power switch: {0}")]
    Power(#[from] faultline_drivers::PowerError),
}

/// What one cycle produced.
#[derive(Clone, Debug)]
pub struct CycleResult {
    pub cycle: u32,
    pub cut_after: u64,
    pub outcome: CycleOutcome,
    /// None when the device did not come back.
    pub verify: Option<VerifyReport>,
    /// `dead_device` and verifier findings together.
    pub findings: Vec<Finding>,
    /// What the simulator injected that the contract forbids (sector extents).
    pub truth: Vec<TruthExtent>,
    /// The simulator says the device is gone for good.
    pub truth_dead: bool,
    /// When the cycle's workload started, on the monotonic clock of the completions (the
    /// outcome's `cut_at` and `device_gone_at` count from about here, within microseconds).
    pub started: Instant,
    /// Power restored, from `started`.
    pub power_restored_at: Duration,
    /// How long verification took.
    pub verify_elapsed: Duration,
}

/// Runs `cfg.cycles` cut cycles (fewer if the device dies) in `run_dir`.
pub fn run_sim_soak(
    cfg: &SoakConfig,
    run_dir: &Path,
    run_id: u64,
    on_cycle: &mut dyn FnMut(&CycleResult),
) -> Result<Vec<CycleResult>, SoakError> {
    let mut sim = SimDrive::new(SimConfig {
        capacity_bytes: cfg.capacity_bytes,
        sector_bytes: cfg.sector_bytes,
        atomic_bytes: cfg.atomic_bytes,
        queue_depth: cfg.workload.queue_depth as usize,
        seed: cfg.seed,
        model: cfg.model.clone(),
        contract: match cfg.contract {
            Contract::Plp => TruthContract::Plp,
            Contract::Flush => TruthContract::Flush,
        },
    });
    let mut power = sim.power();
    let mut run = open_run(run_dir, &sim, || RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id,
        created_at: String::new(),
        target_identity: sim.identity(),
        target_capacity: cfg.capacity_bytes,
        sector_bytes: cfg.sector_bytes as u64,
        atomic_bytes: cfg.atomic_bytes as u64,
        contract: cfg.contract,
        port: 0,
        workload: cfg.workload.clone(),
    })?;
    if cfg.prefill && run.created {
        prefill(&mut sim, &run.layout, &run.format, 0, &mut run.ledger)?;
    }
    let mut rng = WyRand::new(cfg.seed ^ 0x50a4);
    let mut results = Vec::new();
    for _ in 0..cfg.cycles {
        let (cycle, first_id) = run.next_cycle();
        let cut_after = cfg.cut_after.0 + rng.below(cfg.cut_after.1 - cfg.cut_after.0 + 1);
        let opts = CycleOptions {
            cycle,
            first_id,
            started_at: String::new(),
            port: 0,
            max_writes: None,
            duration: None,
            cut: Some(CutPlacement::AfterCompletions { completions: cut_after }),
            checkpoint_every: Duration::from_secs(3600),
            drain_timeout: Duration::from_secs(5),
        };
        let started = Instant::now();
        let mut cut = || power.power_off().map_err(|e| e.to_string());
        let outcome = run_cycle(&mut sim, &run.layout, &run.format, &mut run.ledger, cfg.contract, &opts, &mut cut)?;
        power.power_on()?;
        let power_restored_at = started.elapsed();
        let verify_start = Instant::now();
        let span = run.layout.spec();
        let verifier = Verifier::new(&run.layout, run.ledger.history(), &run.format);
        let (verify, findings) = match verifier.verify(&mut sim, span.span_start, span.span_end) {
            Ok(rep) => {
                let f = rep.findings.clone();
                (Some(rep), f)
            }
            Err(VerifyError::DeviceGone(why)) => (None, vec![dead_device(cycle, &why)]),
            Err(e) => return Err(e.into()),
        };
        let verify_elapsed = verify_start.elapsed();
        let r = CycleResult {
            cycle,
            cut_after,
            outcome,
            verify,
            findings,
            truth: sim.truth(),
            truth_dead: !sim.present(),
            started,
            power_restored_at,
            verify_elapsed,
        };
        on_cycle(&r);
        let dead = r.verify.is_none();
        results.push(r);
        if dead {
            break;
        }
    }
    run.ledger.sync().map_err(RunError::from)?;
    Ok(results)
}

/// The finding for a device that did not come back.
pub fn dead_device(cycle: u32, why: &str) -> Finding {
    Finding {
        class: FindingClass::DeadDevice,
        offset: 0,
        length: 0,
        expected: Shown::Prior,
        found: Shown::Prior,
        cycle,
        detail: why.to_string(),
    }
}
