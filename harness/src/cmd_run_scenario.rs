//! `faultline run SCENARIO.toml`: loads the scenario, makes the run directory, wires the event
//! consumers (log, console, file reports) and hands the run to `faultline::runner`.

use anyhow::{bail, Context, Result};
use faultline::events::Sinks;
use faultline::report::console::Console;
use faultline::report::jsonl::EventLog;
use faultline::report::{file_reports, EVENTS_FILE, HTML_FILE};
use faultline::run::exists;
use faultline::runner::{run_scenario, RunnerOptions};
use faultline::scenario::Scenario;
use faultline_drivers::control::ControlEnv;
use std::path::{Path, PathBuf};

/// The default run directory name: a timestamp and the scenario's name, made path-safe.
fn default_dir(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
    PathBuf::from("faultline-runs").join(format!("{}-{safe}", chrono::Local::now().format("%Y%m%d-%H%M%S")))
}

pub fn cmd_run_scenario(path: &Path, run_dir: Option<PathBuf>, seed: Option<u64>) -> Result<u8> {
    let s = Scenario::load(path)?;
    let dir = run_dir.unwrap_or_else(|| default_dir(&s.name));
    if exists(&dir) || dir.join(EVENTS_FILE).exists() {
        bail!("{} already holds a run; resuming a run is not supported yet: use a new run directory", dir.display());
    }
    let seed = s.seed.or(seed).unwrap_or_else(super::random_u64);
    let target = match (&s.target.sim, &s.target.path) {
        (Some(sim), _) => format!("simulated drive ({:?}, {} bytes, switch {:?})", sim.model, sim.capacity_bytes, sim.switch),
        (None, Some(p)) => p.display().to_string(),
        (None, None) => "a device found by identity".to_string(),
    };
    println!(
        "faultline run: scenario {} ({}), target {target}, contract {:?}, {} cycles, seed {seed}",
        s.name,
        path.display(),
        s.contract,
        s.cycles.count
    );
    println!("run directory: {}", dir.display());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut sinks = Sinks::new();
    sinks.push(EventLog::append(&dir.join(EVENTS_FILE))?).push(Console::stdout());
    for r in file_reports(&dir) {
        sinks.push(r);
    }
    let opts = RunnerOptions {
        run_id: super::random_u64(),
        seed,
        started_at: super::now(),
        clock: super::now,
        control_env: ControlEnv::default(),
    };
    let summary = run_scenario(&s, &dir, sinks, &opts)?;
    for n in &summary.notes {
        eprintln!("faultline: note: {n}");
    }
    for e in &summary.errors {
        eprintln!("faultline: harness error: {e}");
    }
    if let Some(why) = summary.stopped.as_ref().filter(|w| !summary.errors.contains(w)) {
        println!("stopped after {} of {} cycles: {why}", summary.cycles_run, s.cycles.count);
    }
    println!("verdict: {}", summary.verdict.name());
    println!("reports: {} (rebuild them with `faultline report {}`)", dir.join(HTML_FILE).display(), dir.display());
    Ok(summary.verdict.exit_code())
}
