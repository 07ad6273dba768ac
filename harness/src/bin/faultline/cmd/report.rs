//! `faultline report RUN_DIR`: rebuilds `summary.json`, `junit.xml` and `report.html` from
//! the run's event log (streamed: memory stays bounded whatever its length), and exits with the run's verdict (0 clean, 1 findings, 2 error).
//! `faultline report --fleet DIR... [--out DIR]`: merges every run directory under the DIRs
//! into `fleet.json` and `fleet.html` (`faultline::report::fleet`); exits 1 if any run has
//! findings, else 2 if any run ended in error or could not be read, else 0.

use crate::exit::Exit;
use anyhow::{Context, Result};
use faultline::events::Verdict;
use faultline::report::console::verdict_line;
use faultline::report::regenerate;
use faultline::run_dir::EVENTS_FILE;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ReportArgs {
    /// The run directory (holding events.jsonl).
    #[arg(required_unless_present = "fleet", conflicts_with = "fleet")]
    run_dir: Option<PathBuf>,
    /// Merge every run directory found under these directories (copied together from many
    /// hosts) into one fleet.json and fleet.html: per drive and scenario, cycles, findings per
    /// class, dead devices, time to ready, SMART anomalies, links to each run's report.
    #[arg(long, num_args = 1.., value_name = "DIR")]
    fleet: Vec<PathBuf>,
    /// With --fleet: where to write fleet.json and fleet.html (default: the first DIR).
    #[arg(long, requires = "fleet", value_name = "DIR")]
    out: Option<PathBuf>,
}

pub fn cmd_report(a: ReportArgs) -> Result<Exit> {
    if !a.fleet.is_empty() {
        return fleet(&a.fleet, a.out.as_ref().unwrap_or(&a.fleet[0]));
    }
    let run_dir = a.run_dir.expect("clap requires it without --fleet");
    let r = regenerate(&run_dir).with_context(|| format!("cannot rebuild the reports of {}", run_dir.display()))?;
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

fn fleet(dirs: &[PathBuf], out: &std::path::Path) -> Result<Exit> {
    for d in dirs {
        if !d.is_dir() {
            anyhow::bail!("--fleet {}: not a directory", d.display());
        }
    }
    let w = faultline::report::fleet::write(dirs, out).with_context(|| format!("cannot write the fleet summary into {}", out.display()))?;
    for p in &w.written {
        println!("wrote {}", p.display());
    }
    let f = &w.fleet;
    for r in f.runs.iter().filter(|r| r.error.is_some()) {
        eprintln!("faultline: {}: unreadable: {}", r.dir, r.error.as_deref().unwrap_or_default());
    }
    let runs_with_findings = f.runs.iter().filter(|r| r.findings > 0).count();
    println!(
        "{} drives, {} runs ({} with findings, {} unreadable): {}",
        f.drives.len(),
        f.runs.len(),
        runs_with_findings,
        f.unreadable,
        match f.verdict {
            Verdict::Clean => "clean",
            Verdict::Findings => "findings",
            Verdict::Error => "error",
        }
    );
    Ok(f.verdict.into())
}
