//! The detection matrix: every fault model, under both contracts and several workloads,
//! for many cut cycles, with the verifier's findings compared against the simulator's
//! ground truth sector by sector.
//!
//! Per class it counts injected sectors, and of those the ones detected (a finding of the
//! same class covers the sector), misclassified (only findings of another class cover it)
//! and missed (no finding covers it); findings on sectors the simulator did not damage are
//! false findings. A device that does not come back counts once, as `dead_device`.

use crate::ledger::Contract;
use crate::soak::{run_sim_soak, CycleResult, SoakConfig, SoakError};
use crate::verify::FindingClass;
use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};
use faultline_fixtures::{FaultModel, TruthClass};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Counts for one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassScore {
    pub injected: u64,
    pub detected: u64,
    pub misclassified: u64,
    pub missed: u64,
    pub false_findings: u64,
}

/// One row: a model, a contract, a workload.
#[derive(Clone, Debug, Serialize)]
pub struct RowResult {
    pub model: String,
    pub contract: Contract,
    pub workload: String,
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

/// The workloads the matrix runs.
pub fn workloads(span_bytes: u64, seed: u64) -> Vec<(&'static str, WorkloadSpec)> {
    let base = |pattern, min, max, mean, align, qd, every| WorkloadSpec {
        seed,
        pattern,
        span_start: 0,
        span_end: span_bytes,
        min_write_bytes: min,
        max_write_bytes: max,
        mean_write_bytes: mean,
        align_bytes: align,
        queue_depth: qd,
        flush: FlushPolicy { every_writes: Some(every), every_ms: None, fua_percent: 5 },
    };
    vec![
        ("4k-random-qd32", base(Pattern::Random, 4096, 4096, 4096, 4096, 32, 64)),
        ("mixed-512-aligned", base(Pattern::Random, 512, 65536, 8192, 512, 16, 24)),
        ("seq-128k-qd8", base(Pattern::Sequential, 131072, 131072, 131072, 4096, 8, 16)),
        ("hot-cold-512", base(Pattern::HotCold { hot_span_percent: 10, hot_write_percent: 90 }, 512, 16384, 4096, 512, 16, 32)),
    ]
}

/// The fault models, with the contracts each row runs under, and whether it is honest there.
pub fn models() -> Vec<(FaultModel, Vec<(Contract, bool)>)> {
    use Contract::*;
    vec![
        (FaultModel::HonestPlp, vec![(Plp, true), (Flush, true)]),
        (FaultModel::HonestVolatile, vec![(Flush, true), (Plp, false)]),
        (FaultModel::LiesAboutFlush, vec![(Flush, false), (Plp, false)]),
        (FaultModel::TornWrites, vec![(Plp, false), (Flush, false)]),
        (FaultModel::Misdirects { per_mille: 8 }, vec![(Plp, false), (Flush, false)]),
        (FaultModel::BitRot { flips_per_cut: 2 }, vec![(Plp, false), (Flush, false)]),
        (FaultModel::Rollback { writes_per_cut: 2 }, vec![(Plp, false), (Flush, false)]),
        (FaultModel::ReadErrors { sectors_per_cut: 2 }, vec![(Plp, false)]),
        (FaultModel::ReadHangs { sectors_per_cut: 1 }, vec![(Plp, false)]),
        (FaultModel::DiesAfterCuts(7), vec![(Plp, false)]),
    ]
}

/// How big the matrix is.
#[derive(Clone, Debug)]
pub struct MatrixOptions {
    pub seed: u64,
    pub honest_cycles: u32,
    pub faulty_cycles: u32,
    pub span_bytes: u64,
}

fn truth_class(c: TruthClass) -> FindingClass {
    match c {
        TruthClass::LostWrite => FindingClass::LostWrite,
        TruthClass::TornWrite => FindingClass::TornWrite,
        TruthClass::MisdirectedWrite => FindingClass::MisdirectedWrite,
        TruthClass::Corruption => FindingClass::Corruption,
        TruthClass::Unreadable => FindingClass::Unreadable,
    }
}

/// Scores one cycle into `scores`; returns a description of the first disagreement.
pub fn score_cycle(r: &CycleResult, sector: u64, scores: &mut BTreeMap<&'static str, ClassScore>) -> Option<String> {
    let mut problem = None;
    let mut found: HashMap<u64, Vec<FindingClass>> = HashMap::new();
    for f in &r.findings {
        if f.class == FindingClass::DeadDevice {
            continue;
        }
        for s in (f.offset / sector)..((f.offset + f.length) / sector) {
            found.entry(s).or_default().push(f.class);
        }
    }
    let mut truth: HashMap<u64, FindingClass> = HashMap::new();
    for t in &r.truth {
        for s in (t.offset / sector)..((t.offset + t.length) / sector) {
            truth.insert(s, truth_class(t.class));
        }
    }
    let mut note = |p: String| {
        if problem.is_none() {
            problem = Some(p);
        }
    };
    for (&s, &class) in &truth {
        let e = scores.entry(class.name()).or_default();
        e.injected += 1;
        match found.get(&s) {
            Some(v) if v.contains(&class) => e.detected += 1,
            Some(v) => {
                e.misclassified += 1;
                note(format!("cycle {}: sector at byte {} is {} in truth, found as {:?}", r.cycle, s * sector, class.name(), v));
            }
            None => {
                e.missed += 1;
                note(format!("cycle {}: sector at byte {} is {} in truth, not found", r.cycle, s * sector, class.name()));
            }
        }
    }
    for (&s, classes) in &found {
        if !truth.contains_key(&s) {
            for c in classes {
                scores.entry(c.name()).or_default().false_findings += 1;
            }
            let f = r.findings.iter().find(|f| f.offset / sector <= s && s < (f.offset + f.length) / sector);
            note(format!("cycle {}: false finding at byte {}: {:?}", r.cycle, s * sector, f));
        }
    }
    let dead_found = r.findings.iter().any(|f| f.class == FindingClass::DeadDevice);
    if r.truth_dead || dead_found {
        let e = scores.entry(FindingClass::DeadDevice.name()).or_default();
        match (r.truth_dead, dead_found) {
            (true, true) => {
                e.injected += 1;
                e.detected += 1;
            }
            (true, false) => {
                e.injected += 1;
                e.missed += 1;
                note(format!("cycle {}: device dead, not reported", r.cycle));
            }
            (false, _) => {
                e.false_findings += 1;
                note(format!("cycle {}: dead_device reported for a live device", r.cycle));
            }
        }
    }
    problem
}

/// Runs the whole matrix, calling `on_row` after each row. Run directories go under `scratch`.
pub fn run_matrix(opts: &MatrixOptions, scratch: &Path, on_row: &mut dyn FnMut(&RowResult)) -> Result<Vec<RowResult>, SoakError> {
    let mut rows = Vec::new();
    let mut n = 0u64;
    for (model, contracts) in models() {
        for (contract, honest) in contracts {
            for (wname, spec) in workloads(opts.span_bytes, opts.seed) {
                n += 1;
                let seed = crate::rng::hash_words(&[opts.seed, n]);
                let cycles = if honest { opts.honest_cycles } else { opts.faulty_cycles };
                let cfg = SoakConfig {
                    model: model.clone(),
                    contract,
                    workload: WorkloadSpec { seed, ..spec },
                    cycles,
                    seed,
                    capacity_bytes: opts.span_bytes,
                    sector_bytes: 512,
                    atomic_bytes: 4096,
                    prefill: n.is_multiple_of(2),
                    cut_after: (8, 400),
                };
                let dir = scratch.join(format!("row-{n}"));
                let _ = std::fs::remove_dir_all(&dir);
                let mut scores = BTreeMap::new();
                let mut first_problem = None;
                let mut ran = 0;
                run_sim_soak(&cfg, &dir, seed, &mut |r| {
                    ran += 1;
                    if let Some(p) = score_cycle(r, 512, &mut scores) {
                        first_problem.get_or_insert(p);
                    }
                })?;
                let _ = std::fs::remove_dir_all(&dir);
                let row = RowResult {
                    model: format!("{model:?}"),
                    contract,
                    workload: wname.to_string(),
                    seed,
                    cycles: ran,
                    honest,
                    scores,
                    first_problem,
                };
                on_row(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// A plain-text table of the matrix, one line per row and class seen.
pub fn table(rows: &[RowResult]) -> String {
    let mut s = format!(
        "{:<34} {:<8} {:<18} {:>6} {:<19} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
        "model", "contract", "workload", "cycles", "class", "injected", "detected", "misclass", "missed", "false"
    );
    for r in rows {
        let contract = format!("{:?}", r.contract).to_lowercase();
        if r.scores.is_empty() {
            s += &format!(
                "{:<34} {:<8} {:<18} {:>6} {:<19} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
                r.model, contract, r.workload, r.cycles, "(none)", 0, 0, 0, 0, 0
            );
        }
        for (class, c) in &r.scores {
            s += &format!(
                "{:<34} {:<8} {:<18} {:>6} {:<19} {:>9} {:>9} {:>9} {:>7} {:>7}\n",
                r.model, contract, r.workload, r.cycles, class, c.injected, c.detected, c.misclassified, c.missed, c.false_findings
            );
        }
    }
    s
}
