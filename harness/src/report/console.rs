//! The console view of a run: a line for every cycle that brought new findings, the totals
//! and the verdict at the end, and progress in between: an indicatif bar with ETA and
//! running finding counts when stderr is a terminal, plain periodic lines (timed by the
//! events' own clock, so they are deterministic) when it is not.

use crate::events::{zero_counts, Event, EventKind, EventSink, SinkError, Verdict};
use crate::ledger::Contract;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::Write;

/// The one verdict line of a run: `verdict: clean`, `verdict: 1 finding: the drive broke its
/// plp promise`, `verdict: 2 health anomalies: ...`, `verdict: harness error (...)`.
/// `cycles` over `secs` as a rate in the unit that shows it: cycles per second, else per
/// minute, else per hour, to two significant figures (`0.45 cycles/s` would read as nothing
/// at `{:.0}`; a lab run does a few cycles a minute).
pub fn cycle_rate(cycles: u64, secs: f64) -> String {
    let per_s = cycles as f64 / secs.max(1e-9);
    let (rate, unit) = if per_s >= 1.0 || cycles == 0 {
        (per_s, "s")
    } else if per_s * 60.0 >= 1.0 {
        (per_s * 60.0, "min")
    } else {
        (per_s * 3600.0, "h")
    };
    format!("{} cycles/{unit}", two_figures(rate))
}

/// `x` to two significant figures (`0.50`, `2.2`, `27`, `1500`).
fn two_figures(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return "0".to_string();
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (1 - magnitude).max(0) as usize;
    let scale = 10f64.powi(magnitude - 1);
    let rounded = (x / scale).round() * scale;
    // Rounding can carry into a new figure (9.96 -> 10): one decimal fewer then.
    let decimals = if rounded.abs() >= 10f64.powi(magnitude + 1) { decimals.saturating_sub(1) } else { decimals };
    format!("{rounded:.decimals$}")
}

pub fn verdict_line(verdict: Verdict, findings: u64, anomalies: u64, contract: Option<Contract>, error: &str) -> String {
    let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match verdict {
        Verdict::Clean => "verdict: clean".to_string(),
        Verdict::Error => format!("verdict: harness error ({error})"),
        Verdict::Findings => {
            let mut parts = Vec::new();
            if findings > 0 {
                parts.push(count(findings, "finding", "findings"));
            }
            if anomalies > 0 {
                parts.push(count(anomalies, "health anomaly", "health anomalies"));
            }
            let why = match (findings > 0, contract) {
                (true, Some(c)) => format!(": the drive broke its {c} promise"),
                (true, None) => String::new(),
                (false, _) => ": the drive's health logs disagree with what was done to it".to_string(),
            };
            format!("verdict: {}{why}", parts.join(" and "))
        }
    }
}

/// How progress is shown between cycle lines.
pub enum Progress {
    /// A progress bar on stderr.
    Bar,
    /// A line every `every_ns` of run time.
    Lines { every_ns: u64 },
}

pub struct Console<W: Write> {
    out: W,
    progress: Progress,
    bar: Option<ProgressBar>,
    contract: Option<Contract>,
    totals: BTreeMap<String, u64>,
    anomalies: u64,
    cycles_done: u64,
    bad_cycles: u64,
    last_line_ns: u64,
    /// The current cycle's cut (completions, in flight) and new findings.
    cut: Option<(u64, u32)>,
    new: Vec<crate::verify::Finding>,
    /// The current cycle's fault, in a run that mixes faults.
    fault: Option<String>,
    /// The current cycle's off time, in a run whose off time changes.
    off_time_ms: Option<u64>,
    /// Folding earlier events without printing them ([`Console::replay`]).
    quiet: bool,
}

impl Console<std::io::Stdout> {
    /// Lines on stdout; a bar on stderr when stderr is a terminal, else a progress line
    /// every 10 seconds.
    pub fn stdout() -> Self {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        Console::new(std::io::stdout(), if tty { Progress::Bar } else { Progress::Lines { every_ns: 10_000_000_000 } })
    }
}

impl<W: Write> Console<W> {
    pub fn new(out: W, progress: Progress) -> Self {
        Console {
            out,
            progress,
            bar: None,
            contract: None,
            totals: zero_counts(),
            anomalies: 0,
            cycles_done: 0,
            bad_cycles: 0,
            last_line_ns: 0,
            cut: None,
            new: Vec::new(),
            fault: None,
            off_time_ms: None,
            quiet: false,
        }
    }

    /// Takes in the events a resumed run recorded before, printing nothing, so that the
    /// totals and the verdict line count the whole run, not just what follows the resume.
    pub fn replay(&mut self, prior: &[Event]) -> Result<(), SinkError> {
        self.quiet = true;
        let r = prior.iter().try_for_each(|e| self.event(e));
        self.quiet = false;
        r
    }

    /// Writes a line, above the bar if there is one.
    fn line(&mut self, text: String) -> Result<(), SinkError> {
        if self.quiet {
            return Ok(());
        }
        let out = &mut self.out;
        let mut write = || writeln!(out, "{text}").and_then(|_| out.flush());
        let r = match &self.bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        };
        r.map_err(|e| SinkError::io("cannot write", std::path::Path::new("the console"), e))
    }

    fn counts_text(&self) -> String {
        let parts: Vec<String> = self.totals.iter().filter(|(_, n)| **n > 0).map(|(c, n)| format!("{c} {n}")).collect();
        if parts.is_empty() {
            "no findings".to_string()
        } else {
            parts.join(", ")
        }
    }
}

impl<W: Write> Console<W> {
    fn run_started(&mut self, cycles_planned: u32, contract: Contract) {
        self.contract = Some(contract);
        if matches!(self.progress, Progress::Bar) {
            let bar = ProgressBar::with_draw_target(Some(u64::from(cycles_planned)), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} cycles, ETA {eta} | {msg}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_message("no findings");
            self.bar = Some(bar);
        }
    }

    /// A cycle's line: its first new finding, the harness error that ended it, or (every
    /// so often) that it found nothing new.
    fn cycle_ended(&mut self, t_ns: u64, cycle: u32, verdict: Verdict) -> Result<(), SinkError> {
        self.cycles_done += 1;
        if self.new.is_empty() && verdict == Verdict::Error {
            // Not "no new findings": the cycle tested less than it should have.
            self.line(format!("cycle {cycle:>5}: ended by the harness error above; nothing found in what could be checked"))?;
        } else if let Some(f) = self.new.first() {
            self.bad_cycles += 1;
            let mut cut = match self.cut {
                Some((c, n)) => format!("cut after {c} completions with {n} in flight"),
                None => "no cut recorded".to_string(),
            };
            if let Some(ms) = self.off_time_ms {
                cut = format!("{cut}, off {ms} ms");
            }
            if let Some(fault) = &self.fault {
                cut = format!("{fault}, {cut}");
            }
            let text = format!(
                "cycle {cycle:>5}: {cut}: {} new findings, first: {} at byte {} ({})",
                self.new.len(),
                f.class.name(),
                f.offset,
                f.detail
            );
            self.line(text)?;
        } else if let Progress::Lines { every_ns } = self.progress {
            if t_ns.saturating_sub(self.last_line_ns) >= every_ns {
                let rate = cycle_rate(self.cycles_done, t_ns as f64 / 1e9);
                let text = format!(
                    "cycle {cycle:>5}: no new findings ({} cycles with findings so far, {rate}; {})",
                    self.bad_cycles,
                    self.counts_text()
                );
                self.line(text)?;
                self.last_line_ns = t_ns;
            }
        }
        if let Some(bar) = &self.bar {
            bar.inc(1);
            bar.set_message(self.counts_text());
        }
        Ok(())
    }

    fn run_resumed(&mut self, cycles_ended: u32, interrupted_cycle: Option<u32>, last_event: &str) -> Result<(), SinkError> {
        if let Some(bar) = &self.bar {
            bar.set_position(u64::from(cycles_ended));
        }
        let what = interrupted_cycle.map_or(String::new(), |c| format!("; finishing cycle {c}, interrupted after `{last_event}`"));
        self.line(format!("resumed after {cycles_ended} cycles{what}"))
    }

    /// The run's closing lines: its pace, findings per class, and the verdict.
    fn run_ended(&mut self, t_ns: u64, verdict: Verdict, exit_code: u8) -> Result<(), SinkError> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        let secs = (t_ns as f64 / 1e9).max(1e-9);
        self.line(format!(
            "{} cycles in {secs:.1} s ({}); {} cycles brought new findings",
            self.cycles_done,
            cycle_rate(self.cycles_done, secs),
            self.bad_cycles
        ))?;
        let lines: Vec<String> = self.totals.iter().filter(|(_, n)| **n > 0).map(|(c, n)| format!("  {c:<20} {n}")).collect();
        for l in lines {
            self.line(l)?;
        }
        let n: u64 = self.totals.values().sum();
        let line = verdict_line(verdict, n, self.anomalies, self.contract, &format!("exit {exit_code}"));
        self.line(line)
    }
}

impl<W: Write> EventSink for Console<W> {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        match &e.kind {
            EventKind::RunStarted { cycles_planned, contract, .. } => self.run_started(*cycles_planned, *contract),
            EventKind::CycleStarted { fault, off_time_ms } => {
                self.cut = None;
                self.new.clear();
                self.fault.clone_from(fault);
                self.off_time_ms = *off_time_ms;
            }
            EventKind::CutIssued { completions, in_flight_ops, .. } => self.cut = Some((*completions, *in_flight_ops)),
            EventKind::Finding { finding } => {
                *self.totals.entry(finding.class.name().to_string()).or_default() += 1;
                self.new.push(finding.clone());
            }
            EventKind::CycleEnded { verdict, .. } => self.cycle_ended(e.t_ns, e.cycle.unwrap_or_default(), *verdict)?,
            EventKind::RunResumed { cycles_ended, interrupted_cycle, last_event, .. } => {
                self.run_resumed(*cycles_ended, *interrupted_cycle, last_event)?
            }
            EventKind::HarnessError { message } => {
                let at = e.cycle.map_or(String::new(), |c| format!(" in cycle {c}"));
                self.line(format!("harness error{at}: {message}"))?;
            }
            EventKind::RunEnded { verdict, exit_code } => self.run_ended(e.t_ns, *verdict, *exit_code)?,
            // The binary prints why a run stopped or was suspended, and the notes, from the
            // run's summary; controller transcripts are for the log.
            EventKind::RunStopped { .. }
            | EventKind::RunSuspended { .. }
            | EventKind::Note { .. }
            | EventKind::ControllerLog { .. }
            | EventKind::AgentLog { .. }
            | EventKind::PortWindow { .. } => {}
            EventKind::PortPerf { workload, phase, name, figures } => {
                let lat = figures.latency.map_or(String::new(), |l| format!(", p99 {:.0} µs", l.p99_us));
                self.line(format!("performance {workload:<18} {phase:<7} port {name}: {:>8.1} MB/s{lat}", figures.throughput_bps / 1e6))?;
            }
            EventKind::Health { anomalies, .. } => self.anomalies += anomalies.len() as u64,
            EventKind::DeviceGone {}
            | EventKind::PowerRestored { .. }
            | EventKind::LinkRestored {}
            | EventKind::RecoveryCut { .. }
            | EventKind::Ready { .. }
            | EventKind::Verified { .. } => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cycle_rates_pick_a_unit_and_two_figures() {
        use super::cycle_rate;
        assert_eq!(cycle_rate(5, 11.1), "27 cycles/min");
        assert_eq!(cycle_rate(300, 10.4), "29 cycles/s");
        assert_eq!(cycle_rate(3000, 2.0), "1500 cycles/s");
        assert_eq!(cycle_rate(9, 4.0), "2.3 cycles/s");
        assert_eq!(cycle_rate(1, 1.0), "1.0 cycles/s");
        assert_eq!(cycle_rate(2, 3600.0), "2.0 cycles/h");
        assert_eq!(cycle_rate(1, 7200.0), "0.50 cycles/h");
        assert_eq!(cycle_rate(599, 60.0), "10 cycles/s");
        assert_eq!(cycle_rate(0, 3.0), "0 cycles/s");
        assert_eq!(cycle_rate(59, 60.0), "59 cycles/min");
    }

    use super::*;
    use crate::report::testdata;

    fn lines(progress: Progress) -> String {
        let mut buf = Vec::new();
        let mut c = Console::new(&mut buf, progress);
        for e in testdata::run() {
            c.event(&e).unwrap();
        }
        drop(c);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn a_cycle_ended_by_a_harness_error_does_not_read_as_no_new_findings() {
        let mut buf = Vec::new();
        let mut c = Console::new(&mut buf, Progress::Lines { every_ns: 0 });
        for mut e in testdata::run() {
            if let (EventKind::CycleEnded { verdict, .. }, Some(1)) = (&mut e.kind, e.cycle) {
                *verdict = Verdict::Error;
            }
            c.event(&e).unwrap();
        }
        drop(c);
        let out = String::from_utf8(buf).unwrap();
        assert!(out.contains("cycle     1: ended by the harness error above"), "{out}");
        assert!(!out.contains("cycle     1: no new findings"), "{out}");
    }

    #[test]
    fn cycle_lines_totals_and_the_verdict() {
        let out = lines(Progress::Lines { every_ns: u64::MAX });
        assert!(
            out.contains("cycle     2: cut after 200 completions with 30 in flight: 1 new findings, first: lost_write at byte 16384"),
            "{out}"
        );
        assert!(out.contains("3 cycles in 4.0 s") && out.contains("  lost_write           1"), "{out}");
        assert!(out.ends_with("verdict: 1 finding and 1 health anomaly: the drive broke its flush promise\n"), "{out}");
        assert!(!out.contains("no new findings"), "no periodic line within the interval: {out}");
    }

    #[test]
    fn a_mixed_run_names_each_cycle_s_fault() {
        let mut buf = Vec::new();
        let mut c = Console::new(&mut buf, Progress::Lines { every_ns: u64::MAX });
        for mut e in testdata::run() {
            if let EventKind::CycleStarted { fault, .. } = &mut e.kind {
                *fault = Some("port-pull".into());
            }
            c.event(&e).unwrap();
        }
        drop(c);
        let out = String::from_utf8(buf).unwrap();
        assert!(out.contains("cycle     2: port-pull, cut after 200 completions"), "{out}");
    }

    #[test]
    fn plain_progress_lines_follow_the_event_clock() {
        let out = lines(Progress::Lines { every_ns: 500_000_000 });
        assert_eq!(out.matches("no new findings").count(), 2, "cycles 1 and 3: {out}");
        assert!(out.contains("cycle     3: no new findings (1 cycles with findings so far"), "{out}");
    }

    #[test]
    fn a_replayed_start_prints_nothing_but_counts_in_the_totals() {
        let ev = testdata::run();
        let mut buf = Vec::new();
        let mut c = Console::new(&mut buf, Progress::Lines { every_ns: u64::MAX });
        let (before, after) = ev.split_at(ev.len() - 1);
        c.replay(before).unwrap();
        c.event(&after[0]).unwrap();
        drop(c);
        let out = String::from_utf8(buf).unwrap();
        assert!(!out.contains("cycle     2:"), "{out}");
        assert!(
            out.starts_with("3 cycles in 4.0 s")
                && out.ends_with("verdict: 1 finding and 1 health anomaly: the drive broke its flush promise\n"),
            "{out}"
        );
    }

    #[test]
    fn one_verdict_line_counts_in_the_singular_and_never_says_0_findings() {
        let v = |f, a| verdict_line(Verdict::Findings, f, a, Some(Contract::Plp), "");
        assert_eq!(v(1, 0), "verdict: 1 finding: the drive broke its plp promise");
        assert_eq!(v(3, 2), "verdict: 3 findings and 2 health anomalies: the drive broke its plp promise");
        assert_eq!(v(0, 1), "verdict: 1 health anomaly: the drive's health logs disagree with what was done to it");
        assert_eq!(verdict_line(Verdict::Clean, 0, 0, None, ""), "verdict: clean");
        assert_eq!(verdict_line(Verdict::Error, 0, 0, None, "exit 2"), "verdict: harness error (exit 2)");
    }
}
