//! `faultline run [SCENARIO.toml]` and `faultline resume RUN_DIR`: load the scenario, make (or
//! take up) the run directory, wire the event consumers (log, console, file reports) and hand
//! the run to `faultline::runner`.
//!
//! A run directory holds the scenario as run (`scenario.toml`, with its seed), the ledger, the
//! event log, the reports and, for a simulated drive, the drive itself: all `resume` needs
//! (`faultline::run_dir` names them). The process running a run holds its lock.

use anyhow::{bail, Context, Result};
use faultline::events::{EventSink, Sinks};
use faultline::report::console::Console;
use faultline::report::jsonl::{for_each_event, EventLog};
use faultline::report::{file_reports, regenerate};
use faultline::run::exists;
use faultline::run_dir::{lock, EVENTS_FILE, HTML_FILE, SCENARIO_FILE};
use faultline::runner::{run_observed, run_scenario, CycleObserver, Prior, RunSummary, RunnerOptions};
use faultline::scenario::{origin_with, Override, Scenario};
use faultline_drivers::control::ControlEnv;
use std::path::{Path, PathBuf};

use crate::args::ModelParser;
use crate::exit::Exit;
use crate::metrics::{MetricsArgs, MetricsFeed};
use anyhow::anyhow;
use clap::Parser;
use faultline::scenario::NamedModel;

#[derive(Parser)]
pub struct RunArgs {
    /// Scenario file (see scenarios/). Without it: the embedded demo (scenarios/demo.toml),
    /// which the options below adjust.
    scenario: Option<PathBuf>,
    /// Run directory (default: faultline-runs/<timestamp>-<name>). Must not hold a run yet.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Seed for the workload, the drive's faults and the cut points. With a scenario file,
    /// used only when the scenario gives none; for the demo it replaces the demo's own.
    /// Default: random.
    #[arg(long)]
    seed: Option<u64>,
    /// Number of cycles: short for `--set cycles.count=N` (the demo's default: 300).
    #[arg(long)]
    cycles: Option<u32>,
    /// Override a value of the scenario (repeatable): a dotted path into the file and a TOML
    /// value, e.g. `--set cycles.count=5 --set target.path=/dev/nvme2n1`, checked as the
    /// file is and kept in the run directory's scenario.toml, so `resume` runs the same.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<Override>,
    /// The simulated drive's fault model (default: the scenario's; the demo's loses the
    /// newest acknowledged write at each cut). `dual-*` models need a dual-port drive.
    #[arg(long, value_parser = ModelParser)]
    model: Option<NamedModel>,
    /// Demo only: the contract the drive is held to (default: the demo's, plp).
    #[arg(long, value_parser = ["plp", "flush"], conflicts_with = "scenario")]
    contract: Option<String>,
    /// The simulated drive only: score every cycle's findings against the drive's ground
    /// truth (what it lost, tore or misplaced, and the ports it stalled, each named by its
    /// port: per host in a run across hosts), print the table, and exit 2 when faultline and
    /// the drive disagree (a miss or a false finding).
    #[arg(long)]
    check_truth: bool,
    #[command(flatten)]
    metrics: MetricsArgs,
}

#[derive(Parser)]
pub struct ResumeArgs {
    /// The run directory of the run to take up.
    pub run_dir: PathBuf,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// The embedded default of `faultline run` with no scenario file.
pub const DEMO: &str = include_str!("../../../../../scenarios/demo.toml");

/// The default run directory name: a timestamp and the scenario's name, made path-safe.
fn default_dir(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
    PathBuf::from("faultline-runs").join(format!("{}-{safe}", chrono::Local::now().format("%Y%m%d-%H%M%S")))
}

fn describe_target(s: &Scenario) -> String {
    match (&s.target.sim, &s.target.path) {
        (Some(sim), _) => format!("simulated drive ({}, {} bytes, switch {})", sim.model, sim.capacity_bytes, sim.switch),
        (None, Some(p)) => p.display().to_string(),
        (None, None) => "a device found by identity".to_string(),
    }
}

fn options() -> RunnerOptions {
    RunnerOptions {
        run_id: crate::random_u64(),
        started_at: crate::now(),
        clock: crate::now,
        control_env: ControlEnv::default(),
        faultline_exe: std::env::current_exe().ok(),
    }
}

/// Prints what a run left to say and returns its exit code.
fn finish(summary: &RunSummary, s: &Scenario, dir: &Path) -> Exit {
    for n in &summary.notes {
        eprintln!("faultline: note: {n}");
    }
    for e in &summary.errors {
        eprintln!("faultline: harness error: {e}");
    }
    if summary.suspended {
        eprintln!("faultline: suspended after {} cycles: {}", summary.cycles_run, summary.stopped.as_deref().unwrap_or_default());
        return Exit::HarnessError;
    }
    if let Some(why) = summary.stopped.as_ref().filter(|w| !summary.errors.contains(w)) {
        println!("stopped after {} of {} cycles: {why}", summary.cycles_run, s.cycles.count);
    }
    // The console printed the verdict line as the run ended.
    println!("reports: {} (rebuild them with `faultline report {}`)", dir.join(HTML_FILE).display(), dir.display());
    summary.verdict.into()
}

/// Runs `s` (read from `origin`) in a new run directory. The seed is the scenario's, else
/// `seed`, else a random one; it is written into the run directory's copy of the scenario.
/// Runs scenario `s`; `observer` (the lab's ground-truth check) is told of every cycle's
/// verification.
pub fn cmd_run_scenario(
    s: Scenario,
    origin: &str,
    run_dir: Option<PathBuf>,
    seed: Option<u64>,
    metrics: &MetricsArgs,
    observer: Option<&mut (dyn CycleObserver + 'static)>,
) -> Result<Exit> {
    let dir = run_dir.unwrap_or_else(|| default_dir(&s.name));
    if exists(&dir) || dir.join(EVENTS_FILE).exists() || dir.join(SCENARIO_FILE).exists() {
        bail!("{} already holds a run: `faultline resume {}` continues it, or use a new run directory", dir.display(), dir.display());
    }
    let plan = s.plan(origin, seed.unwrap_or_else(crate::random_u64))?;
    let (s, seed) = (&plan.scenario, plan.seed);
    println!(
        "faultline run: scenario {} ({origin}), target {}, contract {}, {} cycles, seed {seed}",
        s.name,
        describe_target(s),
        s.contract,
        s.cycles.count
    );
    println!("run directory: {}", dir.display());
    let feed = MetricsFeed::start(metrics)?;
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let _lock = lock(&dir)?;
    let text = s.to_toml()?;
    let tmp = dir.join(format!("{SCENARIO_FILE}.tmp"));
    std::fs::write(&tmp, format!("# The scenario as run (from {origin}); `faultline resume` reads it.\n{text}"))
        .and_then(|()| std::fs::rename(&tmp, dir.join(SCENARIO_FILE)))
        .with_context(|| format!("cannot write {}", dir.join(SCENARIO_FILE).display()))?;
    let mut sinks = Sinks::new();
    sinks.push(EventLog::append(&dir.join(EVENTS_FILE))?).push(Console::stdout());
    for r in file_reports(&dir) {
        sinks.push(r);
    }
    if let Some(f) = feed {
        sinks.push(f);
    }
    let summary = run_observed(&plan, &dir, sinks, &options(), None, observer)?;
    Ok(finish(&summary, s, &dir))
}

/// Takes up the run in `dir` after the harness died.
pub fn cmd_resume(dir: &Path, metrics: &MetricsArgs) -> Result<Exit> {
    let scenario_path = dir.join(SCENARIO_FILE);
    if !scenario_path.is_file() {
        bail!("{} is not a run directory of `faultline run SCENARIO` (no {SCENARIO_FILE} in it)", dir.display());
    }
    let _lock = lock(dir)?;
    let s = Scenario::load(&scenario_path)?;
    let Some(seed) = s.seed else {
        bail!("{}: the scenario as run has no seed, so the run cannot be continued as it began", scenario_path.display());
    };
    // The log is read twice, streamed: once to fold what the runner needs (and whether the
    // run had ended), once to feed the reports, the console and the metrics. Memory stays
    // bounded whatever the log's length.
    let log = dir.join(EVENTS_FILE);
    let mut prior = Prior::default();
    if log.exists() {
        let read = for_each_event(&log, &mut |e| {
            prior.fold(&e);
            Ok(())
        })
        .with_context(|| format!("cannot resume the run in {}", dir.display()))?;
        if read.torn_tail_bytes > 0 {
            // The harness died mid-line: the log goes on from its last whole event.
            let len = std::fs::metadata(&log)?.len() - read.torn_tail_bytes as u64;
            std::fs::OpenOptions::new().write(true).open(&log)?.set_len(len)?;
            eprintln!(
                "faultline: note: {EVENTS_FILE} ended in a torn line ({} bytes, the harness died mid-write), dropped",
                read.torn_tail_bytes
            );
        }
    }
    if let Some((verdict, exit_code)) = prior.run_ended {
        // It ended after all (the harness may have died while writing the reports).
        println!("the run in {} had ended (verdict: {}); nothing to resume", dir.display(), verdict.name());
        regenerate(dir).with_context(|| format!("cannot rebuild the reports of {}", dir.display()))?;
        println!("reports: {} (rebuilt)", dir.join(HTML_FILE).display());
        return Ok(Exit::from_code(exit_code));
    }
    println!(
        "faultline resume: scenario {}, target {}, {} of {} cycles ended, seed {seed}",
        s.name,
        describe_target(&s),
        prior.cycles_ended(),
        s.cycles.count
    );
    println!("run directory: {}", dir.display());
    // The reports and the console fold the earlier events (the console without printing
    // them, so its totals and verdict line count the whole run); the log holds them already.
    let mut console = Console::stdout();
    let mut reports = file_reports(dir);
    let mut feed = MetricsFeed::start(metrics)?;
    if log.exists() {
        for_each_event(&log, &mut |e| {
            console.replay(std::slice::from_ref(&e))?;
            for r in &mut reports {
                r.event(&e)?;
            }
            if let Some(f) = &mut feed {
                f.event(&e)?;
            }
            Ok(())
        })
        .with_context(|| format!("cannot resume the run in {}", dir.display()))?;
    }
    let mut sinks = Sinks::new();
    sinks.push(console);
    for r in reports {
        sinks.push(r);
    }
    if let Some(f) = feed {
        sinks.push(f);
    }
    sinks.push(EventLog::append(&log)?);
    let plan = s.plan(&scenario_path.display().to_string(), seed)?;
    let mut o = options();
    if let Some(at) = &prior.started_at {
        o.started_at = at.clone();
    }
    let summary = run_scenario(&plan, dir, sinks, &o, Some(prior))?;
    Ok(finish(&summary, &s, dir))
}

/// The overrides of a run: `--cycles N` first (as `--set cycles.count=N`), then each `--set`.
pub fn overrides(cycles: Option<u32>, set: &[Override]) -> Vec<Override> {
    let mut all: Vec<Override> = cycles.map(|n| Override::new("cycles.count", toml::Value::Integer(n.into()))).into_iter().collect();
    all.extend(set.iter().cloned());
    all
}

pub fn cmd_run(a: RunArgs) -> Result<Exit> {
    let sets = overrides(a.cycles, &a.set);
    if let Some(path) = &a.scenario {
        let mut s = Scenario::load_with(path, &sets)?;
        let origin = origin_with(&path.display().to_string(), &sets);
        if let Some(m) = a.model {
            m.apply(&mut s).map_err(|e| anyhow!("{origin}: {e}"))?;
        }
        if !a.check_truth {
            return cmd_run_scenario(s, &origin, a.run_dir.clone(), a.seed, &a.metrics, None);
        }
        let Some(sim) = &s.target.sim else { bail!("--check-truth: {origin} is not a simulated drive, which alone has a ground truth") };
        let mut check = TruthCheck { sector: u64::from(sim.sector_bytes), ..TruthCheck::default() };
        let exit = cmd_run_scenario(s, &origin, a.run_dir.clone(), a.seed, &a.metrics, Some(&mut check))?;
        return Ok(check.report(exit));
    }
    if a.check_truth {
        bail!("--check-truth: give a scenario of the simulated drive");
    }
    let origin = origin_with("the embedded demo, scenarios/demo.toml", &sets);
    let mut s = Scenario::from_toml_with(DEMO, "the embedded demo, scenarios/demo.toml", &sets)?;
    let origin = origin.as_str();
    if let Some(m) = a.model {
        m.apply(&mut s).map_err(|e| anyhow!("the demo: {e}"))?;
    }
    if let Some(c) = &a.contract {
        s.contract = c.parse().map_err(|e: faultline::ledger::UnknownContract| anyhow!(e))?;
    }
    if a.seed.is_some() {
        s.seed = a.seed;
    }
    // Validated (with the demo's seed or a drawn one) when it is planned.
    cmd_run_scenario(s, origin, a.run_dir, None, &a.metrics, None)
}

/// `faultline run --check-truth`: every cycle's findings scored against the simulated drive's
/// ground truth, as the detection matrix scores its rows (`selftest::score_cycle`).
#[derive(Default)]
struct TruthCheck {
    sector: u64,
    cycles: u32,
    scores: std::collections::BTreeMap<&'static str, faultline::selftest::ClassScore>,
    /// Each cycle's first disagreement.
    problems: Vec<String>,
}

impl CycleObserver for TruthCheck {
    fn checked(&mut self, check: &faultline::runner::CycleCheck<'_>) {
        self.cycles += 1;
        if check.truth.is_none() {
            self.problems.push(format!("cycle {}: no ground truth was taken", check.cycle));
        } else if let Some(p) = faultline::selftest::score_cycle(check, self.sector, &mut self.scores) {
            self.problems.push(p);
        }
    }
}

impl TruthCheck {
    /// Prints the table; a disagreement turns the run's exit into a harness error.
    fn report(&self, exit: Exit) -> Exit {
        println!("ground truth: {} cycles scored against the simulated drive's truth", self.cycles);
        println!("  {:<20} {:>9} {:>9} {:>9} {:>9} {:>9}", "class", "injected", "detected", "other", "missed", "false");
        for (class, c) in &self.scores {
            println!("  {class:<20} {:>9} {:>9} {:>9} {:>9} {:>9}", c.injected, c.detected, c.misclassified, c.missed, c.false_findings);
        }
        if self.scores.is_empty() {
            println!("  (nothing injected, nothing found)");
        }
        if self.problems.is_empty() && self.cycles > 0 {
            println!("ground truth: faultline and the drive agree");
            return exit;
        }
        for p in &self.problems {
            eprintln!("faultline: ground truth disagrees: {p}");
        }
        if self.cycles == 0 {
            eprintln!("faultline: ground truth: no cycle was scored");
        }
        Exit::HarnessError
    }
}
