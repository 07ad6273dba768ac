//! `faultline selftest`: the detection matrix.

use crate::exit::Exit;
use anyhow::Result;
use clap::Parser;
use faultline::selftest::{honest_rows, run_dual_matrix, run_matrix, table, MatrixOptions};
use std::time::Instant;

#[derive(Parser)]
pub struct SelftestArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cycles per row on honest models.
    #[arg(long, default_value_t = 850)]
    honest_cycles: u32,
    /// Honest cut cycles in total, split evenly over the honest rows (overrides
    /// --honest-cycles): `--cycles 100000` for a long confidence run.
    #[arg(long)]
    cycles: Option<u32>,
    /// Port pulls of the honest dual-port row (`--dual-honest-cycles 2000` for the issue's
    /// 2,000 port faults).
    #[arg(long, default_value_t = 100)]
    dual_honest_cycles: u32,
    /// Only the dual-port rows (numbered, and so seeded, as in the whole matrix).
    #[arg(long)]
    only_dual: bool,
    /// Cycles per row on faulty models.
    #[arg(long, default_value_t = 40)]
    faulty_cycles: u32,
    #[arg(long)]
    json: bool,
}

pub fn cmd_selftest(a: SelftestArgs) -> Result<Exit> {
    let span_bytes = 2 << 20;
    let honest_cycles = match a.cycles {
        Some(0) => anyhow::bail!("--cycles 0: give the honest cut cycles in total, at least 1"),
        Some(total) => total.div_ceil(honest_rows(span_bytes)),
        None => a.honest_cycles,
    };
    let opts =
        MatrixOptions { seed: a.seed, honest_cycles, faulty_cycles: a.faulty_cycles, span_bytes, dual_honest_cycles: a.dual_honest_cycles };
    let scratch = std::env::temp_dir().join(format!("faultline-selftest-{}", std::process::id()));
    let t = Instant::now();
    let mut on_row = |r: &faultline::selftest::RowResult| {
        if !a.json {
            eprintln!(
                "  {} {} {}: {} cycles{}",
                r.model,
                r.contract,
                r.workload,
                r.cycles,
                if r.clean() {
                    String::new()
                } else {
                    format!(" MISMATCH (seed {}): {}", r.seed, r.first_problem.clone().unwrap_or_default())
                }
            );
        }
    };
    let rows = if a.only_dual {
        let single: u64 = faultline::selftest::single_rows(span_bytes);
        run_dual_matrix(&opts, &scratch, &mut on_row, single)?
    } else {
        run_matrix(&opts, &scratch, &mut on_row)?
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let bad = rows.iter().filter(|r| !r.clean()).count();
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print!("{}", table(&rows));
        let cycles: u32 = rows.iter().map(|r| r.cycles).sum();
        let honest: u32 = rows.iter().filter(|r| r.honest).map(|r| r.cycles).sum();
        println!(
            "{} rows, {cycles} cut cycles ({honest} on honest models) in {:.1} s, seed {}: {}",
            rows.len(),
            t.elapsed().as_secs_f64(),
            a.seed,
            if bad == 0 {
                "every injected violation detected and classified, no false findings".to_string()
            } else {
                format!("{bad} rows disagree with ground truth")
            }
        );
    }
    Ok(if bad == 0 { Exit::Clean } else { Exit::Findings })
}
