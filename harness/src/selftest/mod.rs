//! The detection matrix (`faultline selftest`): every fault model of the simulated drive,
//! under both contracts and several workloads, for many cut cycles, run through the scenario
//! runner (the one cycle loop) with a consumer that scores each cycle's findings against the
//! drive's ground truth sector by sector.
//!
//! Per class it counts injected sectors, and of those the ones detected (a finding of the
//! same class covers the sector), misclassified (only findings of another class cover it)
//! and missed (no finding covers it); findings on sectors the simulator did not damage are
//! false findings. A device that does not come back counts once, as `dead_device`.
//!
//! Every row is a scenario: the simulated drive (in-process switch), the whole span verified
//! after every cut, cuts after a number of completions drawn per cycle from its seed.

mod ops;
mod score;
mod shapes;

use ops::{ops_rows, ops_workload_name, with_ops, OpsRow};
pub use score::{score_cycle, ClassScore};
use shapes::{shape_cycles, shape_name, shape_rows, shaped, SINGLE_CUT};

use crate::events::Sinks;
use crate::ledger::Contract;
use crate::runner::{run_observed, CycleCheck, CycleObserver, RunnerError, RunnerOptions};
use crate::scenario::{
    Budget, Controllers, CutPlacement, Cycles, DualMode, DualSimModel, DualSpec, Fault, Flush, LinkReset, OffTime, OnEvent, Scenario,
    ScenarioError, SimDual, SimModel, SimSwitch, SimTarget, StopPolicy, Target, VerifyPolicy, Workload, FORMAT_VERSION,
};
use crate::workload::Pattern;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// One row: a model, a contract, a workload.
#[derive(Clone, Debug, Serialize)]
pub struct RowResult {
    pub model: String,
    pub contract: Contract,
    pub workload: String,
    /// The cut's shape: `single cut`, or the fault's recovery cuts (`power-cut+1-before-ready`).
    pub shape: String,
    pub seed: u64,
    pub cycles: u32,
    pub honest: bool,
    pub scores: BTreeMap<&'static str, ClassScore>,
    /// First disagreement, for the failure message.
    pub first_problem: Option<String>,
}

impl RowResult {
    pub fn clean(&self) -> bool {
        self.scores.values().all(|s| s.misclassified == 0 && s.missed == 0 && s.false_findings == 0)
            && (!self.honest || self.scores.values().all(|s| s.injected == 0))
    }
}

/// Why the matrix could not run.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("row {row}: {source}")]
    Scenario { row: String, source: ScenarioError },
    #[error("row {row}: {source}")]
    Runner { row: String, source: RunnerError },
    /// The harness failed inside a row: the row's verdict would mean nothing.
    #[error("row {row} (seed {seed}): harness error: {message}")]
    Harness { row: String, seed: u64, message: String },
}

/// The workloads the matrix runs (the `[workload]` of each row's scenario; `prefill` is set
/// per row).
pub fn workloads(span_bytes: u64) -> Vec<(&'static str, Workload)> {
    let base = |pattern, min, max, mean, align, qd, every| Workload {
        pattern,
        span_start_bytes: 0,
        span_end_bytes: Some(span_bytes),
        min_write_bytes: min,
        max_write_bytes: max,
        mean_write_bytes: mean,
        align_bytes: align,
        queue_depth: qd,
        flush: Flush { every_writes: Some(every), every_ms: None, fua_percent: 5 },
        ops: Default::default(),
        prefill: false,
    };
    vec![
        ("4k-random-qd32", base(Pattern::Random {}, 4096, 4096, 4096, 4096, 32, 64)),
        ("mixed-512-aligned", base(Pattern::Random {}, 512, 65536, 8192, 512, 16, 24)),
        ("seq-128k-qd8", base(Pattern::Sequential {}, 131072, 131072, 131072, 4096, 8, 16)),
        ("hot-cold-512", base(Pattern::HotCold { hot_span_percent: 10, hot_write_percent: 90 }, 512, 16384, 4096, 512, 16, 32)),
    ]
}

/// The fault models, with the contracts each row runs under, and whether it is honest there.
pub fn models() -> Vec<(SimModel, Vec<(Contract, bool)>)> {
    use Contract::*;
    vec![
        (SimModel::HonestPlp, vec![(Plp, true), (Flush, true)]),
        (SimModel::HonestVolatile, vec![(Flush, true), (Plp, false)]),
        (SimModel::LiesAboutFlush, vec![(Flush, false), (Plp, false)]),
        (SimModel::TornWrites, vec![(Plp, false), (Flush, false)]),
        (SimModel::Misdirects { per_mille: 8 }, vec![(Plp, false), (Flush, false)]),
        (SimModel::BitRot { flips_per_cut: 2 }, vec![(Plp, false), (Flush, false)]),
        (SimModel::Rollback { writes_per_cut: 2 }, vec![(Plp, false), (Flush, false)]),
        (SimModel::ReadErrors { sectors_per_cut: 2 }, vec![(Plp, false)]),
        (SimModel::ReadHangs { sectors_per_cut: 1 }, vec![(Plp, false)]),
        (SimModel::DiesAfterCuts { cuts: 7 }, vec![(Plp, false)]),
        (SimModel::Resurrect { after_cuts: 2 }, vec![(Plp, false), (Flush, false)]),
    ]
}

/// How many single-port rows the matrix has (the dual-port rows are numbered after them):
/// the plain rows, then the shape rows, then the ops rows.
pub fn single_rows(span_bytes: u64) -> u64 {
    let per_model: usize = models().iter().map(|(_, cs)| cs.len()).sum();
    (per_model * workloads(span_bytes).len() + shape_rows().len() + ops_rows().len()) as u64
}

/// How many rows run an honest model (under a contract it keeps): the rows whose cycles
/// must give no finding at all.
pub fn honest_rows(span_bytes: u64) -> u32 {
    let per_model: usize = models().iter().map(|(_, cs)| cs.iter().filter(|(_, honest)| *honest).count()).sum();
    (per_model * workloads(span_bytes).len()) as u32
}

/// How big the matrix is.
#[derive(Clone, Debug)]
pub struct MatrixOptions {
    pub seed: u64,
    pub honest_cycles: u32,
    pub faulty_cycles: u32,
    pub span_bytes: u64,
    /// Cycles (port pulls) of the honest dual-port row.
    pub dual_honest_cycles: u32,
}

/// One row's scenario: the simulated drive behind its in-process switch, the whole span
/// verified after every cut, cuts after 8 to 400 completions.
pub fn row_scenario(model: SimModel, contract: Contract, workload: Workload, cycles: u32, seed: u64, span_bytes: u64) -> Scenario {
    Scenario {
        format_version: FORMAT_VERSION,
        name: format!("selftest-{seed:016x}"),
        description: String::new(),
        seed: Some(seed),
        contract,
        target: Target {
            sim: Some(SimTarget {
                capacity_bytes: span_bytes,
                sector_bytes: 512,
                atomic_bytes: 4096,
                queue_depth: workload.queue_depth,
                model,
                dealloc_reads: crate::ledger::DeallocRead::Zeros,
                switch: SimSwitch::Direct,
                dual: None,
            }),
            ..Target::default()
        },
        workload,
        controllers: Controllers { power: Some("sim".into()), link: None },
        fault: Fault::PowerCut { mate_steps_ms: Vec::new(), recovery: None },
        cut: CutPlacement::UniformCompletions { min_completions: 8, max_completions: 400 },
        cycles: Cycles { count: cycles, off_time_ms: OffTime::Fixed(1), readiness_timeout_s: 1 },
        verify: VerifyPolicy { sample_bytes: 0, full_every_cycles: 1, full_at_end: true },
        // A dead device ends the row, as it would end a run; findings do not.
        stop: StopPolicy {
            on_finding: OnEvent::Continue,
            on_dead_device: OnEvent::Stop,
            on_dead_host: OnEvent::Stop,
            on_controller_failure: OnEvent::Stop,
            max_consecutive_harness_errors: 1,
        },
        ports: Vec::new(),
        dual: None,
        health: Default::default(),
        lab: None,
    }
}

/// The ground-truth consumer: scores every cycle of a row.
#[derive(Default)]
struct Scorer {
    scores: BTreeMap<&'static str, ClassScore>,
    first_problem: Option<String>,
    cycles: u32,
}

impl CycleObserver for Scorer {
    fn checked(&mut self, check: &CycleCheck<'_>) {
        self.cycles += 1;
        if let Some(p) = score_cycle(check, 512, &mut self.scores) {
            self.first_problem.get_or_insert(p);
        }
    }
}

fn no_clock() -> String {
    String::new()
}

/// Runs one row in `dir` (emptied first and removed after).
fn run_row(s: &Scenario, dir: &Path, row: &str) -> Result<Scorer, MatrixError> {
    let seed = s.seed.unwrap_or_default();
    let plan = s.plan(row, seed).map_err(|source| MatrixError::Scenario { row: row.into(), source })?;
    let _ = std::fs::remove_dir_all(dir);
    let o =
        RunnerOptions { run_id: seed, started_at: String::new(), clock: no_clock, control_env: Default::default(), faultline_exe: None };
    let mut scorer = Scorer::default();
    let summary = run_observed(&plan, dir, Sinks::new(), &o, None, Some(&mut scorer));
    let _ = std::fs::remove_dir_all(dir);
    let summary = summary.map_err(|source| MatrixError::Runner { row: row.into(), source })?;
    if let Some(message) = summary.errors.first() {
        return Err(MatrixError::Harness { row: row.into(), seed, message: message.clone() });
    }
    Ok(scorer)
}

/// One row, ready to run in `scratch/row-{n}`.
struct Job {
    n: u64,
    name: String,
    model: String,
    contract: Contract,
    workload: String,
    shape: String,
    honest: bool,
    scenario: Scenario,
}

/// Runs the whole matrix, calling `on_row` after each row, in row order. Run directories go
/// under `scratch`. Rows run on up to [`row_workers`] threads at once: each row is its own
/// run (its own seed, directory and simulated drive), so its result does not depend on what
/// runs beside it. The dual-port rows, whose verdicts rest on stall budgets, run after the
/// single-port rows (which keep every CPU busy), beside each other only: they spend their
/// time in their ports' paced transfers and timed windows, not on a CPU.
pub fn run_matrix(opts: &MatrixOptions, scratch: &Path, on_row: &mut dyn FnMut(&RowResult)) -> Result<Vec<RowResult>, MatrixError> {
    let mut rows = run_single_matrix(opts, scratch, on_row)?;
    rows.extend(run_dual_matrix(opts, scratch, on_row, rows.len() as u64)?);
    Ok(rows)
}

/// The single-port rows of [`run_matrix`] (the first [`single_rows`] of it), on up to
/// [`row_workers`] threads. Their verdicts rest on no timing: each is scored against its
/// drive's ground truth, however slowly it runs.
pub fn run_single_matrix(opts: &MatrixOptions, scratch: &Path, on_row: &mut dyn FnMut(&RowResult)) -> Result<Vec<RowResult>, MatrixError> {
    let mut jobs = Vec::new();
    let mut n = 0u64;
    for (model, contracts) in models() {
        for (contract, honest) in contracts {
            for (wname, mut workload) in workloads(opts.span_bytes) {
                n += 1;
                let seed = crate::rng::hash_words(&[opts.seed, n]);
                let cycles = if honest { opts.honest_cycles } else { opts.faulty_cycles };
                workload.prefill = n.is_multiple_of(2);
                let scenario = row_scenario(model, contract, workload, cycles, seed, opts.span_bytes);
                jobs.push(Job {
                    n,
                    name: format!("{model} {contract} {wname}"),
                    model: model.to_string(),
                    contract,
                    workload: wname.to_string(),
                    shape: SINGLE_CUT.into(),
                    honest,
                    scenario,
                });
            }
        }
    }
    // The shape rows, on the mixed workload (writes of every size, straddling units).
    let (wname, workload) = workloads(opts.span_bytes).remove(1);
    for (model, contract, honest, shape) in shape_rows() {
        n += 1;
        let seed = crate::rng::hash_words(&[opts.seed, n]);
        let mut workload = workload.clone();
        workload.prefill = n.is_multiple_of(2);
        let scenario = shaped(row_scenario(model, contract, workload, shape_cycles(opts, honest), seed, opts.span_bytes), &shape);
        let shape = shape_name(&shape);
        jobs.push(Job {
            n,
            name: format!("{model} {contract} {wname} {shape}"),
            model: model.to_string(),
            contract,
            workload: wname.to_string(),
            shape,
            honest,
            scenario,
        });
    }
    // The ops rows, on the mixed workload with deallocates and Write Zeroes.
    for row in ops_rows() {
        let OpsRow { model, contract, honest, .. } = row;
        n += 1;
        let seed = crate::rng::hash_words(&[opts.seed, n]);
        let mut workload = workload.clone();
        workload.prefill = n.is_multiple_of(2);
        let cycles = shape_cycles(opts, honest);
        let scenario = with_ops(row_scenario(model, contract, workload, cycles, seed, opts.span_bytes), &row);
        let wname = ops_workload_name(&row);
        jobs.push(Job {
            n,
            name: format!("{model} {contract} {wname}"),
            model: model.to_string(),
            contract,
            workload: wname,
            shape: SINGLE_CUT.into(),
            honest,
            scenario,
        });
    }
    run_jobs(jobs, scratch, row_workers(), on_row)
}

/// How many single-port rows run at once: one per CPU, at most 4.
pub fn row_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
}

/// Runs `jobs` on `workers` threads and hands each result to
/// `on_row` in row order as soon as the rows before it are done. After a row fails no new
/// row starts, and the first failure in row order is returned.
fn run_jobs(jobs: Vec<Job>, scratch: &Path, workers: usize, on_row: &mut dyn FnMut(&RowResult)) -> Result<Vec<RowResult>, MatrixError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut done: Vec<Option<Result<RowResult, MatrixError>>> = (0..jobs.len()).map(|_| None).collect();
    let mut rows = Vec::with_capacity(jobs.len());
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..workers.max(1).min(jobs.len()) {
            let (tx, jobs, next, failed) = (tx.clone(), &jobs, &next, &failed);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= jobs.len() || failed.load(Ordering::SeqCst) {
                    return;
                }
                let j = &jobs[i];
                let r = run_row(&j.scenario, &scratch.join(format!("row-{}", j.n)), &j.name).map(|scored| RowResult {
                    model: j.model.clone(),
                    contract: j.contract,
                    workload: j.workload.clone(),
                    shape: j.shape.clone(),
                    seed: j.scenario.seed.unwrap_or_default(),
                    cycles: scored.cycles,
                    honest: j.honest,
                    scores: scored.scores,
                    first_problem: scored.first_problem,
                });
                if r.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                if tx.send((i, r)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut emitted = 0;
        for (i, r) in rx {
            done[i] = Some(r);
            while let Some(Some(Ok(row))) = done.get(emitted) {
                on_row(row);
                emitted += 1;
            }
        }
    });
    for r in done.into_iter().flatten() {
        rows.push(r?);
    }
    Ok(rows)
}

/// The dual-port rows of the matrix alone (numbered from `after + 1`, as in the whole
/// matrix, so a row's seed is the same either way).
pub fn run_dual_matrix(
    opts: &MatrixOptions,
    scratch: &Path,
    on_row: &mut dyn FnMut(&RowResult),
    after: u64,
) -> Result<Vec<RowResult>, MatrixError> {
    let mut jobs = Vec::new();
    let pulls = dual_models().len();
    for (k, (model, honest)) in dual_models().into_iter().enumerate() {
        let n = after + 1 + k as u64;
        let seed = crate::rng::hash_words(&[opts.seed, n]);
        // Every faulty dual-port cycle injects (one fault per cycle), and each costs a pull and
        // three full reads of the span: a dozen say what they need to.
        let ghost = matches!(model, DualSimModel::DualGhostWrites { .. });
        // A ghost shows only where a newer write covered its sectors before it landed and
        // none covered them again after: a span larger than what a cycle writes. Whether one
        // shows at a check is up to how much the ports wrote meanwhile, which a loaded machine
        // changes: a dozen pulls showed none in 2 of 7 matrix tests (the honest rows beside
        // them), so the row takes up to 30.
        let cycles = match (honest, ghost) {
            (true, _) => opts.dual_honest_cycles,
            (false, true) => opts.faulty_cycles.clamp(12, 30),
            (false, false) => opts.faulty_cycles.clamp(6, 12),
        };
        let span = if ghost { opts.span_bytes.max(32 << 20) } else { opts.span_bytes };
        jobs.push(Job {
            n,
            name: format!("{} plp dual-port pull", dual_name(model)),
            model: dual_name(model).to_string(),
            contract: Contract::Plp,
            workload: "dual-port pull".into(),
            shape: SINGLE_CUT.into(),
            honest,
            scenario: dual_row_scenario(model, cycles, seed, span),
        });
    }
    // Power cuts of the whole dual-port drive, numbered after the pulls.
    for (k, (model, honest)) in dual_cut_models().into_iter().enumerate() {
        let n = after + 1 + (pulls + k) as u64;
        let seed = crate::rng::hash_words(&[opts.seed, n]);
        let cycles = if honest { opts.dual_honest_cycles.div_ceil(2) } else { opts.faulty_cycles.clamp(6, 12) };
        jobs.push(Job {
            n,
            name: format!("{} plp dual-port power cut", dual_name(model)),
            model: dual_name(model).to_string(),
            contract: Contract::Plp,
            workload: "dual-port power cut".into(),
            shape: SINGLE_CUT.into(),
            honest,
            scenario: dual_cut_row_scenario(model, cycles, seed, opts.span_bytes),
        });
    }
    run_jobs(jobs, scratch, row_workers().min(2), on_row)
}

/// The dual-port models of the matrix, and whether each is honest.
pub fn dual_models() -> Vec<(DualSimModel, bool)> {
    vec![
        (DualSimModel::DualHonest, true),
        (DualSimModel::DualFreezeOnPull { stall_ms: 900 }, false),
        (DualSimModel::DualGhostWrites { after_writes: 8000 }, false),
        (DualSimModel::DualStalePort { for_ms: 10_000 }, false),
        (DualSimModel::DualDropCacheOnReset, false),
    ]
}

/// The dual-port models of the power-cut rows, and whether each is honest under them.
pub fn dual_cut_models() -> Vec<(DualSimModel, bool)> {
    vec![(DualSimModel::DualHonest, true), (DualSimModel::DualLoseCacheAtCut, false)]
}

fn dual_name(m: DualSimModel) -> &'static str {
    match m {
        DualSimModel::DualHonest => "dual-honest",
        DualSimModel::DualFreezeOnPull { .. } => "dual-freeze-on-pull",
        DualSimModel::DualGhostWrites { .. } => "dual-ghost-writes",
        DualSimModel::DualStalePort { .. } => "dual-stale-port",
        DualSimModel::DualDropCacheOnReset => "dual-drop-cache-on-reset",
        DualSimModel::DualLoseCacheAtCut => "dual-lose-cache-at-cut",
    }
}

/// A dual-port row: the simulated dual-port drive, each cycle pulls port A then B in turn
/// under load for 20 ms while the other writes; short windows; the whole span verified
/// through both ports after every pull. The budget's stall (400 ms) sits well below the
/// freeze model's stall and well above what the harness itself costs a port.
pub fn dual_row_scenario(model: DualSimModel, cycles: u32, seed: u64, span_bytes: u64) -> Scenario {
    let mut s = row_scenario(SimModel::HonestPlp, Contract::Plp, workloads(span_bytes).remove(0).1, cycles, seed, span_bytes);
    if let Some(sim) = s.target.sim.as_mut() {
        sim.dual = Some(SimDual { model, port_mbps: 100 });
    }
    s.workload.prefill = false;
    s.workload.queue_depth = s.workload.queue_depth.min(16);
    s.controllers = Controllers { power: None, link: Some("sim".into()) };
    s.fault = Fault::LinkReset { reset: LinkReset::PortPull, port: None };
    s.cycles.off_time_ms = OffTime::Fixed(20);
    s.dual = Some(DualSpec {
        mode: DualMode::Failover,
        fault_ports: vec!["A".into(), "B".into()],
        warmup_ms: 20,
        baseline_ms: 100,
        settle_ms: 50,
        budget: Budget { io_errors: 0, max_stall_ms: 400, min_throughput_ratio: 0.0, max_p99_ratio: 1000.0, max_latency_ms: None },
        cross_verify: true,
        compare_ports: true,
        perf_ms: 2000,
    });
    s
}

/// A dual-port power-cut row: the dual-port row's drive and windows, but each cycle cuts the
/// power of the whole drive (through the in-process switch) with both ports writing, turns
/// it back on after 20 ms, and verifies both shares through both ports.
pub fn dual_cut_row_scenario(model: DualSimModel, cycles: u32, seed: u64, span_bytes: u64) -> Scenario {
    let mut s = dual_row_scenario(model, cycles, seed, span_bytes);
    s.controllers = Controllers { power: Some("sim".into()), link: None };
    s.fault = Fault::PowerCut { mate_steps_ms: Vec::new(), recovery: None };
    if let Some(d) = s.dual.as_mut() {
        d.fault_ports = vec!["A".into()];
    }
    s
}

/// A plain-text table of the matrix, one line per row and class seen.
pub fn table(rows: &[RowResult]) -> String {
    let line = |r: &RowResult, class: &str, c: &ClassScore| {
        let (model, contract, workload, shape, cycles) = (&r.model, r.contract.to_string(), &r.workload, &r.shape, r.cycles);
        format!(
            "{model:<34} {contract:<8} {workload:<18} {shape:<24} {cycles:>6} {class:<19} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
            c.injected, c.detected, c.misclassified, c.missed, c.false_findings
        )
    };
    let mut s = format!(
        "{:<34} {:<8} {:<18} {:<24} {:>6} {:<19} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
        "model", "contract", "workload", "shape", "cycles", "class", "injected", "detected", "misclass", "missed", "false"
    );
    for r in rows {
        if r.scores.is_empty() {
            s += &line(r, "(none)", &ClassScore::default());
        }
        for (class, c) in &r.scores {
            s += &line(r, class, c);
        }
    }
    s
}
