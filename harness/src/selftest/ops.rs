//! The matrix's ops rows: a workload that deallocates and writes zeroes beside its writes
//! (`workload.ops`), under the honest models (every way a deallocated sector may read) and the
//! models that get those operations wrong.

use super::models;
use crate::ledger::{Contract, DeallocRead};
use crate::scenario::{Ops, Scenario, Share, SimModel};

/// The ops workload's name in the table.
pub const OPS_WORKLOAD: &str = "mixed-ops";

/// 10% deallocates and 10% Write Zeroes.
pub fn ops_mix() -> Ops {
    Ops { write: Some(Share(0.8)), deallocate: Share(0.1), write_zeroes: Share(0.1) }
}

/// The (model, what a deallocated sector reads, contract, honest) of every ops row.
pub fn ops_rows() -> Vec<(SimModel, DeallocRead, Contract, bool)> {
    use Contract::*;
    use DeallocRead::*;
    let mut rows = vec![
        (SimModel::HonestPlp, Zeros, Plp, true),
        (SimModel::HonestPlp, Zeros, Flush, true),
        (SimModel::HonestPlp, Ones, Plp, true),
        (SimModel::HonestPlp, Unreported, Plp, true),
        (SimModel::HonestVolatile, Zeros, Flush, true),
        (SimModel::HonestVolatile, Unreported, Flush, true),
    ];
    for model in
        [SimModel::LosesDeallocate { per_cut: 2 }, SimModel::DeallocatesWrongRange { shift_sectors: 8 }, SimModel::TearsWriteZeroes]
    {
        rows.push((model, Zeros, Plp, false));
        rows.push((model, Zeros, Flush, false));
    }
    debug_assert!(rows.iter().all(|r| !r.3 || models().iter().any(|(m, _)| *m == r.0)));
    rows
}

/// The workload's name in the table for a drive whose deallocated sectors read `reads`
/// (`-ffh`: all FFh; `-unrep`: not reported, zeros or the data last written).
pub fn ops_workload_name(reads: DeallocRead) -> String {
    match reads {
        DeallocRead::Zeros => OPS_WORKLOAD.to_string(),
        DeallocRead::Ones => format!("{OPS_WORKLOAD}-ffh"),
        DeallocRead::Unreported => format!("{OPS_WORKLOAD}-unrep"),
    }
}

/// The row scenario with the ops mix, on a drive whose deallocated sectors read `reads`.
pub fn with_ops(mut s: Scenario, reads: DeallocRead) -> Scenario {
    s.workload.ops = ops_mix();
    if let Some(sim) = s.target.sim.as_mut() {
        sim.dealloc_reads = reads;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selftest::{row_scenario, run_row, workloads};

    /// Every ops row, a few cycles each: the honest models give no finding, the faulty ones are
    /// found, and no finding is false (the full rows run in the detection matrix).
    #[test]
    fn the_ops_rows_find_every_zeroing_fault_and_nothing_on_honest_drives() {
        let span = 8 << 20;
        let (_, workload) = workloads(span).remove(1);
        let scratch = crate::ledger::tests::tempdir();
        for (i, (model, reads, contract, honest)) in ops_rows().into_iter().enumerate() {
            let seed = crate::rng::hash_words(&[1, i as u64]);
            let s = with_ops(row_scenario(model, contract, workload.clone(), if honest { 12 } else { 8 }, seed, span), reads);
            let name = format!("{model} {contract} {}", ops_workload_name(reads));
            let scored = run_row(&s, &scratch.join(format!("row-{i}")), &name).unwrap_or_else(|e| panic!("{name} (seed {seed}): {e}"));
            let (injected, detected, false_findings) =
                scored.scores.values().fold((0, 0, 0), |a, c| (a.0 + c.injected, a.1 + c.detected, a.2 + c.false_findings));
            assert_eq!(false_findings, 0, "{name} (seed {seed}): {:?}", scored.first_problem);
            assert_eq!(detected, injected, "{name} (seed {seed}): {:?}", scored.first_problem);
            assert_eq!(injected == 0, honest, "{name} (seed {seed}): {injected} injected");
        }
    }
}
