//! `faultline report RUN_DIR`: rebuilds `summary.json`, `junit.xml` and `report.html` from
//! the run's event log, and exits with the run's verdict (0 clean, 1 findings, 2 error).

use crate::exit::Exit;
use anyhow::{Context, Result};
use faultline::report::regenerate;
use faultline::run_dir::EVENTS_FILE;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The run directory (holding events.jsonl).
    run_dir: PathBuf,
}

pub fn cmd_report(a: ReportArgs) -> Result<Exit> {
    let r = regenerate(&a.run_dir).with_context(|| format!("cannot rebuild the reports of {}", a.run_dir.display()))?;
    if r.torn_tail_bytes > 0 {
        eprintln!("faultline: note: {EVENTS_FILE} ends in a torn line ({} bytes, the harness died mid-write), ignored", r.torn_tail_bytes);
    }
    for p in &r.written {
        println!("wrote {}", p.display());
    }
    let m = &r.model;
    let verdict = m.verdict();
    let findings = m.findings().count();
    let cycles = m.cycles.values().filter(|c| c.end.is_some()).count();
    println!(
        "{} events, {cycles} cycles{}; verdict: {}",
        r.events,
        if m.end.is_none() { " (the run did not end)" } else { "" },
        match verdict.exit_code() {
            0 => "clean".to_string(),
            1 => format!("{findings} findings"),
            _ => format!("harness error ({} recorded)", m.harness_errors()),
        }
    );
    Ok(m.end.map_or(verdict.into(), |(_, code)| Exit::from_code(code)))
}
