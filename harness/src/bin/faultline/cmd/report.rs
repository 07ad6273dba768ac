//! `faultline report RUN_DIR`: rebuilds `summary.json`, `junit.xml` and `report.html` from
//! the run's event log (streamed: memory stays bounded whatever its length), and exits with the run's verdict (0 clean, 1 findings, 2 error).

use crate::exit::Exit;
use anyhow::{Context, Result};
use faultline::report::console::verdict_line;
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
    let findings = m.findings_total();
    let anomalies = m.anomalies.total;
    let cycles = m.totals.cycles_ended;
    let contract = m.start.as_ref().map(|s| s.contract);
    let line = verdict_line(verdict, findings, anomalies, contract, &format!("{} recorded", m.harness_errors()));
    println!("{} events, {cycles} cycles{}", r.events, if m.end.is_none() { " (the run did not end)" } else { "" });
    println!("{line}");
    Ok(m.end.map_or(verdict.into(), |(_, code)| Exit::from_code(code)))
}
