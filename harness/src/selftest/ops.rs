//! The matrix's ops rows: a workload that deallocates and writes zeroes beside its writes
//! (`workload.ops`), under the honest models (every way a deallocated sector may read) and the
//! models that get those operations wrong; and the format rows, each cycle's cut landing
//! during a format of the namespace (or once it completed).

use super::models;
use crate::ledger::{Contract, DeallocRead};
use crate::scenario::{CutPlacement, Ops, Scenario, Share, SimModel};

/// The ops workload's name in the table.
pub const OPS_WORKLOAD: &str = "mixed-ops";

/// 10% deallocates and 10% Write Zeroes.
pub fn ops_mix() -> Ops {
    Ops { write: Some(Share(0.8)), deallocate: Share(0.1), write_zeroes: Share(0.1) }
}

/// One ops row: the model, what a deallocated sector reads, the contract, whether the model
/// is honest, and whether each cycle formats (else it deallocates and writes zeroes).
#[derive(Clone, Copy, Debug)]
pub struct OpsRow {
    pub model: SimModel,
    pub reads: DeallocRead,
    pub contract: Contract,
    pub honest: bool,
    pub format: bool,
}

/// Every ops row.
pub fn ops_rows() -> Vec<OpsRow> {
    let mut rows: Vec<OpsRow> = zeroing_rows()
        .into_iter()
        .map(|(model, reads, contract, honest)| OpsRow { model, reads, contract, honest, format: false })
        .collect();
    for (model, reads, contract, honest) in [
        (SimModel::HonestPlp, DeallocRead::Zeros, Contract::Plp, true),
        (SimModel::HonestVolatile, DeallocRead::Ones, Contract::Flush, true),
        (SimModel::HonestVolatile, DeallocRead::Unreported, Contract::Flush, true),
        (SimModel::FormatStaysInProgress, DeallocRead::Zeros, Contract::Plp, true),
        (SimModel::CachesFormat, DeallocRead::Zeros, Contract::Flush, false),
    ] {
        rows.push(OpsRow { model, reads, contract, honest, format: true });
    }
    rows
}

/// The (model, what a deallocated sector reads, contract, honest) of every deallocate and
/// Write Zeroes row.
fn zeroing_rows() -> Vec<(SimModel, DeallocRead, Contract, bool)> {
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

/// The workload's name in the table for a row (`format` for the format rows; `-ffh`: a
/// deallocated sector reads all FFh; `-unrep`: not reported, zeros or the data last written).
pub fn ops_workload_name(row: &OpsRow) -> String {
    let base = if row.format { FORMAT_WORKLOAD } else { OPS_WORKLOAD };
    match row.reads {
        DeallocRead::Zeros => base.to_string(),
        DeallocRead::Ones => format!("{base}-ffh"),
        DeallocRead::Unreported => format!("{base}-unrep"),
    }
}

/// The format rows' workload name in the table.
pub const FORMAT_WORKLOAD: &str = "format";

/// The row scenario with the ops mix, or a format each cycle cut during it or once it
/// completed, on a drive whose deallocated sectors read `reads`.
pub fn with_ops(mut s: Scenario, row: &OpsRow) -> Scenario {
    if row.format {
        s.cut = CutPlacement::DuringFormat { after_completions: 100, min_cut_ms: 0, max_cut_ms: 2 };
    } else {
        s.workload.ops = ops_mix();
    }
    if let Some(sim) = s.target.sim.as_mut() {
        sim.dealloc_reads = row.reads;
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
        for (i, row) in ops_rows().into_iter().enumerate() {
            let OpsRow { model, contract, honest, .. } = row;
            let seed = crate::rng::hash_words(&[1, i as u64]);
            let s = with_ops(row_scenario(model, contract, workload.clone(), if honest { 12 } else { 8 }, seed, span), &row);
            let name = format!("{model} {contract} {}", ops_workload_name(&row));
            let scored = run_row(&s, &scratch.join(format!("row-{i}")), &name).unwrap_or_else(|e| panic!("{name} (seed {seed}): {e}"));
            let (injected, detected, false_findings) =
                scored.scores.values().fold((0, 0, 0), |a, c| (a.0 + c.injected, a.1 + c.detected, a.2 + c.false_findings));
            assert_eq!(false_findings, 0, "{name} (seed {seed}): {:?}", scored.first_problem);
            assert_eq!(detected, injected, "{name} (seed {seed}): {:?}", scored.first_problem);
            assert_eq!(injected == 0, honest, "{name} (seed {seed}): {injected} injected");
        }
    }
}
