//! `faultline selftest`: the detection matrix.

use crate::exit::Exit;
use anyhow::Result;
use clap::Parser;
use faultline::selftest::{run_matrix, table, MatrixOptions};
use std::time::Instant;

#[derive(Parser)]
pub struct SelftestArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cycles per row on honest models.
    #[arg(long, default_value_t = 850)]
    honest_cycles: u32,
    /// Cycles per row on faulty models.
    #[arg(long, default_value_t = 40)]
    faulty_cycles: u32,
    #[arg(long)]
    json: bool,
}

pub fn cmd_selftest(a: SelftestArgs) -> Result<Exit> {
    let opts = MatrixOptions { seed: a.seed, honest_cycles: a.honest_cycles, faulty_cycles: a.faulty_cycles, span_bytes: 2 << 20 };
    let scratch = std::env::temp_dir().join(format!("faultline-selftest-{}", std::process::id()));
    let t = Instant::now();
    let rows = run_matrix(&opts, &scratch, &mut |r| {
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
    })?;
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
