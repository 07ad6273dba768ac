//! The run as its events tell it: [`RunModel`] folds the stream, in order, into what every
//! file report renders. It depends on the events alone, never on a report.
//!
//! The model is bounded whatever the number of cycles or findings: a cycle is kept whole
//! only while it is open (begun, not ended; at most [`MAX_OPEN_CYCLES`]), then folded into
//! totals, distributions and downsampled series ([`super::series`]) and dropped. Findings
//! are counted per class, and the first [`MAX_LISTED_PER_CLASS`] of each class kept; lists
//! of messages (harness errors, notes, anomalies, resumes) keep their first entries and count
//! the rest. Everything dropped is still in `events.jsonl`. A consumer that needs each cycle
//! whole (`junit.xml`) gets it as the cycle closes ([`RunModel::fold`]).
//!
//! An event for a cycle that has already closed (none in logs the runner writes) counts in
//! the run's totals but does not reopen the cycle.

use super::ports::{PortCharts, WindowSeries};
use super::series::{Buckets, Dist, Thinned};
use crate::events::{Event, HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, FindingClass, Shown};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Cycles held open at once; beyond that the oldest is closed as unfinished.
pub const MAX_OPEN_CYCLES: usize = 16;
/// Findings kept per class (the report lists these; the rest are counted).
pub const MAX_LISTED_PER_CLASS: usize = 100;
/// Findings kept in an open cycle (for its JUnit failure text).
pub const MAX_CYCLE_FINDINGS: usize = 200;
/// Entries kept of each list of messages (errors, notes, anomalies, resumes).
pub const MAX_MESSAGES: usize = 200;
/// Buckets a series over cycles is downsampled to (between this and twice this).
pub const SERIES_BUCKETS: usize = 200;
/// Points kept of each scatter series.
pub const SCATTER_POINTS: usize = 1000;

/// The first [`MAX_MESSAGES`] of a list, and how many there were in all.
#[derive(Clone, Debug, PartialEq)]
pub struct Capped<T> {
    pub kept: Vec<T>,
    pub total: u64,
}

impl<T> Default for Capped<T> {
    fn default() -> Self {
        Capped { kept: Vec::new(), total: 0 }
    }
}

impl<T> Capped<T> {
    pub fn push(&mut self, v: T) {
        self.push_within(v, MAX_MESSAGES);
    }

    fn push_within(&mut self, v: T, cap: usize) {
        self.total += 1;
        if self.kept.len() < cap {
            self.kept.push(v);
        }
    }

    /// How many were not kept.
    pub fn dropped(&self) -> u64 {
        self.total - self.kept.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// The run as told by its events, folded in order.
#[derive(Clone, Debug, PartialEq)]
pub struct RunModel {
    pub start: Option<RunStart>,
    /// Cycles begun and not yet ended, by number.
    pub open: BTreeMap<u32, CycleRecord>,
    /// The highest cycle closed so far.
    pub last_closed: Option<u32>,
    /// Harness errors not tied to a cycle.
    pub run_errors: Capped<String>,
    /// Harness errors of cycles, as `cycle N: message`.
    pub cycle_errors: Capped<String>,
    pub end: Option<(Verdict, u8)>,
    /// The latest timestamp seen.
    pub last_t_ns: u64,
    /// Each time `faultline resume` took the run up again: (wall clock, interrupted cycle).
    pub resumes: Capped<(String, Option<u32>)>,
    /// Why the run ended before its planned cycles (`run_stopped`).
    pub stopped: Option<String>,
    /// Why the run was last suspended (`run_suspended`).
    pub suspended: Option<String>,
    /// Notes the run recorded (engine, health checks).
    pub notes: Capped<String>,
    /// Lines of controller transcripts in the log.
    pub controller_log_lines: u64,
    /// Operations sent to agents on other hosts (the audit log's lines).
    pub agent_log_lines: u64,
    /// Bytes per sector, from the first verification that tells (to show LBAs).
    pub sector_bytes: Option<u64>,
    /// Findings per class, in [`FindingClass::ALL`] order.
    pub classes: Vec<ClassFindings>,
    /// Health anomalies, as (cycle, note).
    pub anomalies: Capped<(u32, HealthNote)>,
    pub totals: Totals,
    pub figures: Figures,
    pub charts: Charts,
    /// Per port of a dual-port run, by name (at most 8 ports).
    pub ports: BTreeMap<String, PortTotals>,
    /// Per fault of a run that mixes faults, by label (at most 64: a mix's limit).
    pub faults: BTreeMap<String, FaultTotals>,
    /// `dual.mode = "performance"`: (workload, phase, port) -> MB/s and p99 µs (at most 256).
    pub perf: BTreeMap<(String, String, String), (f64, Option<f64>)>,
    /// The cycle the report charts per port ([`super::ports`]).
    pub port_charts: PortCharts,
}

/// The cycles of one fault of a mix, by verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultTotals {
    pub cycles: u32,
    pub clean: u32,
    pub findings: u32,
    pub error: u32,
}

/// One port of a dual-port run, over every cycle's window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortTotals {
    pub id: u8,
    /// Cycles whose fault hit this port.
    pub cycles_faulted: u64,
    /// Cycles in which it was judged (the fault hit another port).
    pub cycles_judged: u64,
    pub cycles_disturbed: u64,
    /// Write errors in fault windows where it was judged.
    pub io_errors: u64,
    /// The longest stall in a fault window where it was judged, µs.
    pub max_stall_us: u64,
    /// The lowest throughput ratio and the highest p99 ratio it was judged by.
    pub min_throughput_ratio: Option<f64>,
    pub max_p99_ratio: Option<f64>,
    /// Bytes and µs of its baseline windows (for the mean baseline throughput).
    pub baseline_bytes: u64,
    pub baseline_us: u64,
}

/// The findings of one class.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassFindings {
    pub class: FindingClass,
    /// The first findings, up to [`MAX_LISTED_PER_CLASS`]; `total` counts them all.
    pub findings: Capped<Finding>,
    /// Cycles in which findings of this class first appeared.
    pub cycles: u64,
}

/// Counts over the closed cycles.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Cycles closed (ended or given up as unfinished).
    pub cycles: u64,
    /// Cycles that ended (`cycle_ended`).
    pub cycles_ended: u64,
    pub cycles_clean: u64,
    pub cycles_with_findings_verdict: u64,
    pub cycles_error: u64,
    /// Cycles in which new findings appeared.
    pub cycles_with_findings: u64,
    pub cycles_with_anomalies: u64,
    pub writes_completed: u64,
    pub bytes_written: u64,
    pub write_ns: u64,
    pub bytes_verified: u64,
    pub verify_ns: u64,
}

/// Distributions of the per-cycle figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figures {
    pub enumerate_us: Dist,
    pub first_read_us: Dist,
    pub cut_to_gone_ns: Dist,
    pub harness_ns: Dist,
    pub cut_completions: Dist,
    pub cut_phase_us: Dist,
    pub in_flight_ops: Dist,
    pub bytes_at_risk: Dist,
    pub latency_p50_ns: Dist,
    pub latency_p99_ns: Dist,
}

/// The charts' series, downsampled.
#[derive(Clone, Debug, PartialEq)]
pub struct Charts {
    /// (workload phase ns, completions) of each cut, without and with new findings.
    pub cuts_clean: Thinned,
    pub cuts_bad: Thinned,
    /// Over cycles: bytes in flight at the cut, MiB/s, latency ns, SMART counters.
    pub bytes_at_risk: Buckets,
    pub throughput_mib_s: Buckets,
    pub latency_p50_ns: Buckets,
    pub latency_p99_ns: Buckets,
    pub unsafe_shutdowns: Buckets,
    pub power_cycles: Buckets,
    pub media_errors: Buckets,
    pub error_log_entries: Buckets,
}

impl Default for Charts {
    fn default() -> Self {
        let b = || Buckets::new(SERIES_BUCKETS);
        Charts {
            cuts_clean: Thinned::new(SCATTER_POINTS),
            cuts_bad: Thinned::new(SCATTER_POINTS),
            bytes_at_risk: b(),
            throughput_mib_s: b(),
            latency_p50_ns: b(),
            latency_p99_ns: b(),
            unsafe_shutdowns: b(),
            power_cycles: b(),
            media_errors: b(),
            error_log_entries: b(),
        }
    }
}

impl Default for RunModel {
    fn default() -> Self {
        RunModel {
            start: None,
            open: BTreeMap::new(),
            last_closed: None,
            run_errors: Capped::default(),
            cycle_errors: Capped::default(),
            end: None,
            last_t_ns: 0,
            resumes: Capped::default(),
            stopped: None,
            suspended: None,
            notes: Capped::default(),
            controller_log_lines: 0,
            agent_log_lines: 0,
            sector_bytes: None,
            classes: FindingClass::ALL.iter().map(|&class| ClassFindings { class, findings: Capped::default(), cycles: 0 }).collect(),
            anomalies: Capped::default(),
            totals: Totals::default(),
            figures: Figures::default(),
            charts: Charts::default(),
            ports: BTreeMap::new(),
            faults: BTreeMap::new(),
            perf: BTreeMap::new(),
            port_charts: PortCharts::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunStart {
    pub run_id: String,
    pub scenario: String,
    pub target: String,
    pub contract: Contract,
    pub cycles_planned: u32,
    pub seed: u64,
    pub started_at: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    pub t_ns: u64,
    pub completions: u64,
    pub in_flight_ops: u32,
    pub bytes_at_risk: u64,
    pub phase_us: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    pub sectors: u64,
    pub bytes: u64,
    pub verify_ns: u64,
    pub counts: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleEnd {
    pub t_ns: u64,
    pub verdict: Verdict,
    pub writes_completed: u64,
    pub bytes_written: u64,
    pub write_ns: u64,
    pub latency_p50_ns: Option<u64>,
    pub latency_p99_ns: Option<u64>,
    pub latency_max_ns: Option<u64>,
    /// The longest the port went without a write completing before the cut.
    pub max_gap_ns: Option<u64>,
    pub harness_ns: Option<u64>,
}

/// Everything recorded about one cycle (while it is open).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleRecord {
    pub cycle: u32,
    pub started_ns: Option<u64>,
    /// The cycle's fault, in a run that mixes faults.
    pub fault: Option<String>,
    pub cut: Option<Cut>,
    pub device_gone_ns: Option<u64>,
    pub power_restored_ns: Option<u64>,
    pub enumerate_us: Option<u64>,
    pub first_read_us: Option<u64>,
    pub smart: Option<SmartFigures>,
    pub anomalies: Capped<HealthNote>,
    pub verified: Option<Verified>,
    /// Findings that first appeared in this cycle (the first [`MAX_CYCLE_FINDINGS`]).
    pub findings: Capped<Finding>,
    /// Classes of the findings that first appeared in this cycle.
    pub classes: Vec<FindingClass>,
    pub errors: Capped<String>,
    pub end: Option<CycleEnd>,
}

impl CycleRecord {
    /// The cycle's verdict: an error or an unfinished cycle is `error`; otherwise what the
    /// runner said when it ended the cycle.
    pub fn verdict(&self) -> Verdict {
        match &self.end {
            _ if !self.errors.is_empty() => Verdict::Error,
            None => Verdict::Error,
            Some(e) if e.verdict == Verdict::Clean && !(self.findings.is_empty() && self.anomalies.is_empty()) => Verdict::Findings,
            Some(e) => e.verdict,
        }
    }

    /// Throughput of the write phase, MiB/s.
    pub fn throughput_mib_s(&self) -> Option<f64> {
        let e = self.end.as_ref()?;
        (e.write_ns > 0).then(|| e.bytes_written as f64 / 1_048_576.0 / (e.write_ns as f64 / 1e9))
    }
}

impl RunModel {
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut m = RunModel::default();
        for e in events {
            m.apply(e);
        }
        m
    }

    pub fn apply(&mut self, e: &Event) {
        self.fold(e, &mut |_| {});
    }

    /// The open record of `cycle`, opened if need be; None for a cycle already closed.
    fn cycle(&mut self, cycle: u32, on_close: &mut dyn FnMut(&CycleRecord)) -> Option<&mut CycleRecord> {
        if !self.open.contains_key(&cycle) {
            if self.last_closed.is_some_and(|c| cycle <= c) {
                return None;
            }
            if self.open.len() >= MAX_OPEN_CYCLES {
                let oldest = *self.open.keys().next().expect("the map is full");
                self.close(oldest, on_close);
            }
            self.open.insert(cycle, CycleRecord { cycle, ..CycleRecord::default() });
        }
        self.open.get_mut(&cycle)
    }

    /// Folds `e` in; `on_close` sees each cycle as it closes (at its `cycle_ended`, or when
    /// too many are open at once), whole, just before it is folded into the totals.
    pub fn fold(&mut self, e: &Event, on_close: &mut dyn FnMut(&CycleRecord)) {
        self.last_t_ns = self.last_t_ns.max(e.t_ns());
        match e {
            Event::RunStarted { run_id, scenario, target, contract, cycles_planned, seed, started_at, .. } => {
                self.start = Some(RunStart {
                    run_id: run_id.clone(),
                    scenario: scenario.clone(),
                    target: target.clone(),
                    contract: *contract,
                    cycles_planned: *cycles_planned,
                    seed: *seed,
                    started_at: started_at.clone(),
                })
            }
            Event::CycleStarted { t_ns, cycle, fault } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.started_ns = Some(*t_ns);
                    c.fault.clone_from(fault);
                }
            }
            Event::CutIssued { t_ns, cycle, completions, in_flight_ops, bytes_at_risk, phase_us, .. } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.cut = Some(Cut {
                        t_ns: *t_ns,
                        completions: *completions,
                        in_flight_ops: *in_flight_ops,
                        bytes_at_risk: *bytes_at_risk,
                        phase_us: *phase_us,
                    })
                }
            }
            Event::DeviceGone { t_ns, cycle } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.device_gone_ns = Some(*t_ns)
                }
            }
            Event::PowerRestored { t_ns, cycle } | Event::LinkRestored { t_ns, cycle } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.power_restored_ns = Some(*t_ns)
                }
            }
            Event::Ready { cycle, enumerate_us, first_read_us, .. } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.enumerate_us = *enumerate_us;
                    c.first_read_us = *first_read_us;
                }
            }
            Event::Health { cycle, smart, anomalies, .. } => {
                for a in anomalies {
                    self.anomalies.push((*cycle, a.clone()));
                }
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.smart = Some(smart.clone());
                    for a in anomalies {
                        c.anomalies.push(a.clone());
                    }
                }
            }
            Event::Verified { cycle, sectors, bytes, verify_ns, counts, .. } => {
                if self.sector_bytes.is_none() && *sectors > 0 && bytes % sectors == 0 {
                    self.sector_bytes = Some(bytes / sectors);
                }
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.verified = Some(Verified { sectors: *sectors, bytes: *bytes, verify_ns: *verify_ns, counts: counts.clone() })
                }
            }
            Event::Finding { cycle, finding, .. } => {
                let class = &mut self.classes[class_index(finding.class)];
                class.findings.push_within(finding.clone(), MAX_LISTED_PER_CLASS);
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.findings.push_within(finding.clone(), MAX_CYCLE_FINDINGS);
                    if !c.classes.contains(&finding.class) {
                        c.classes.push(finding.class);
                    }
                }
            }
            Event::CycleEnded {
                t_ns,
                cycle,
                verdict,
                writes_completed,
                bytes_written,
                write_ns,
                latency_p50_ns,
                latency_p99_ns,
                latency_max_ns,
                max_gap_ns,
                harness_ns,
            } => {
                if let Some(c) = self.cycle(*cycle, on_close) {
                    c.end = Some(CycleEnd {
                        t_ns: *t_ns,
                        verdict: *verdict,
                        writes_completed: *writes_completed,
                        bytes_written: *bytes_written,
                        write_ns: *write_ns,
                        latency_p50_ns: *latency_p50_ns,
                        latency_p99_ns: *latency_p99_ns,
                        latency_max_ns: *latency_max_ns,
                        max_gap_ns: *max_gap_ns,
                        harness_ns: *harness_ns,
                    });
                    self.close(*cycle, on_close);
                }
            }
            Event::HarnessError { cycle: Some(c), message, .. } => {
                self.cycle_errors.push(format!("cycle {c}: {message}"));
                if let Some(r) = self.cycle(*c, on_close) {
                    r.errors.push(message.clone())
                }
            }
            Event::HarnessError { cycle: None, message, .. } => self.run_errors.push(message.clone()),
            Event::RunResumed { resumed_at, interrupted_cycle, .. } => self.resumes.push((resumed_at.clone(), *interrupted_cycle)),
            Event::RunEnded { verdict, exit_code, .. } => self.end = Some((*verdict, *exit_code)),
            Event::RunStopped { reason, .. } => self.stopped = Some(reason.clone()),
            Event::RunSuspended { reason, .. } => self.suspended = Some(reason.clone()),
            Event::Note { message, .. } => self.notes.push(message.clone()),
            Event::ControllerLog { lines, .. } => self.controller_log_lines += lines.len() as u64,
            Event::AgentLog { lines, .. } => self.agent_log_lines += lines.len() as u64,
            Event::PortPerf { workload, phase, name, figures, .. } => {
                if self.perf.len() < 256 {
                    self.perf.insert(
                        (workload.clone(), phase.clone(), name.clone()),
                        (figures.throughput_bps / 1e6, figures.latency.map(|l| l.p99_us)),
                    );
                }
            }
            Event::PortWindow {
                cycle,
                port,
                name,
                faulted,
                baseline_t_ns,
                fault_t_ns,
                window_end_t_ns,
                baseline,
                fault,
                throughput_ratio,
                p99_ratio,
                disturbed,
                bucket_ms,
                series_bytes,
                series_max_latency_us,
                ..
            } => {
                self.port_charts.push(&WindowSeries {
                    cycle: *cycle,
                    name,
                    faulted: *faulted,
                    disturbed: *disturbed,
                    baseline_t_ns: *baseline_t_ns,
                    fault_t_ns: *fault_t_ns,
                    window_end_t_ns: *window_end_t_ns,
                    bucket_ms: *bucket_ms,
                    bytes: series_bytes,
                    max_latency_us: series_max_latency_us,
                });
                if self.ports.len() >= 8 && !self.ports.contains_key(name) {
                    return;
                }
                let p = self.ports.entry(name.clone()).or_default();
                p.id = port.0;
                if let Some(b) = baseline {
                    p.baseline_bytes += b.bytes;
                    p.baseline_us += b.duration_us;
                }
                if *faulted {
                    p.cycles_faulted += 1;
                    return;
                }
                let Some(f) = fault else { return };
                p.cycles_judged += 1;
                p.cycles_disturbed += u64::from(*disturbed);
                p.io_errors += f.io_errors;
                p.max_stall_us = p.max_stall_us.max(f.max_gap_us);
                if let Some(r) = throughput_ratio {
                    p.min_throughput_ratio = Some(p.min_throughput_ratio.map_or(*r, |m| m.min(*r)));
                }
                if let Some(r) = p99_ratio {
                    p.max_p99_ratio = Some(p.max_p99_ratio.map_or(*r, |m| m.max(*r)));
                }
            }
        }
    }

    /// Folds the open cycle `cycle` into the totals and drops it.
    fn close(&mut self, cycle: u32, on_close: &mut dyn FnMut(&CycleRecord)) {
        let Some(c) = self.open.remove(&cycle) else { return };
        on_close(&c);
        self.last_closed = Some(self.last_closed.map_or(cycle, |l| l.max(cycle)));
        self.fold_cycle(&c);
    }

    fn fold_cycle(&mut self, c: &CycleRecord) {
        if let Some(fault) = c.fault.as_ref().filter(|f| self.faults.len() < 64 || self.faults.contains_key(*f)) {
            let ft = self.faults.entry(fault.clone()).or_default();
            ft.cycles += 1;
            match c.verdict() {
                Verdict::Clean => ft.clean += 1,
                Verdict::Findings => ft.findings += 1,
                Verdict::Error => ft.error += 1,
            }
        }
        let (t, f, ch) = (&mut self.totals, &mut self.figures, &mut self.charts);
        let x = u64::from(c.cycle);
        t.cycles += 1;
        match c.verdict() {
            Verdict::Clean => t.cycles_clean += 1,
            Verdict::Findings => t.cycles_with_findings_verdict += 1,
            Verdict::Error => t.cycles_error += 1,
        }
        if !c.findings.is_empty() {
            t.cycles_with_findings += 1;
        }
        for class in &c.classes {
            self.classes[class_index(*class)].cycles += 1;
        }
        if !c.anomalies.is_empty() {
            t.cycles_with_anomalies += 1;
        }
        if let Some(v) = &c.verified {
            t.bytes_verified += v.bytes;
            t.verify_ns += v.verify_ns;
        }
        if let Some(v) = c.enumerate_us {
            f.enumerate_us.push(v);
        }
        if let Some(v) = c.first_read_us {
            f.first_read_us.push(v);
        }
        if let Some(cut) = &c.cut {
            if let Some(gone) = c.device_gone_ns {
                f.cut_to_gone_ns.push(gone.saturating_sub(cut.t_ns));
            }
            f.cut_completions.push(cut.completions);
            f.cut_phase_us.push(cut.phase_us);
            f.in_flight_ops.push(u64::from(cut.in_flight_ops));
            f.bytes_at_risk.push(cut.bytes_at_risk);
            let p = (cut.phase_us as f64 * 1e3, cut.completions as f64);
            if c.findings.is_empty() {
                ch.cuts_clean.push(p)
            } else {
                ch.cuts_bad.push(p)
            }
            ch.bytes_at_risk.push(x, cut.bytes_at_risk as f64);
        }
        if let Some(e) = &c.end {
            t.cycles_ended += 1;
            t.writes_completed += e.writes_completed;
            t.bytes_written += e.bytes_written;
            t.write_ns += e.write_ns;
            if let Some(v) = e.harness_ns {
                f.harness_ns.push(v);
            }
            if let Some(v) = e.latency_p50_ns {
                f.latency_p50_ns.push(v);
                ch.latency_p50_ns.push(x, v as f64);
            }
            if let Some(v) = e.latency_p99_ns {
                f.latency_p99_ns.push(v);
                ch.latency_p99_ns.push(x, v as f64);
            }
        }
        if let Some(tp) = c.throughput_mib_s() {
            ch.throughput_mib_s.push(x, tp);
        }
        if let Some(s) = &c.smart {
            ch.unsafe_shutdowns.push(x, s.unsafe_shutdowns as f64);
            ch.power_cycles.push(x, s.power_cycles as f64);
            ch.media_errors.push(x, s.media_errors as f64);
            ch.error_log_entries.push(x, s.error_log_entries as f64);
        }
    }

    /// The model with its open cycles closed as they stand (a cycle without `cycle_ended`
    /// closes as unfinished): what a report of a run that did not end shows. Borrowed when
    /// no cycle is open.
    pub fn settled(&self) -> Cow<'_, RunModel> {
        if self.open.is_empty() {
            return Cow::Borrowed(self);
        }
        let mut m = self.clone();
        m.close_open(&mut |_| {});
        Cow::Owned(m)
    }

    /// Closes every open cycle as it stands, in cycle order (see [`Self::fold`]).
    pub fn close_open(&mut self, on_close: &mut dyn FnMut(&CycleRecord)) {
        while let Some(&c) = self.open.keys().next() {
            self.close(c, on_close);
        }
    }

    /// Findings recorded, all classes.
    pub fn findings_total(&self) -> u64 {
        self.classes.iter().map(|c| c.findings.total).sum()
    }

    /// Findings of `class` recorded.
    pub fn class(&self, class: FindingClass) -> &ClassFindings {
        &self.classes[class_index(class)]
    }

    pub fn harness_errors(&self) -> u64 {
        self.run_errors.total + self.cycle_errors.total
    }

    /// The run's verdict: what `run_ended` said; for a run that never ended (the harness
    /// died), `findings` if it found any, else `error` (an unfinished run is not clean).
    pub fn verdict(&self) -> Verdict {
        match self.end {
            Some((v, _)) => v,
            None if self.harness_errors() == 0 && self.findings_total() > 0 => Verdict::Findings,
            None => Verdict::Error,
        }
    }

    /// The verdict the events imply, for the runner to put in `run_ended`: any harness error
    /// is `error`, else any finding or health anomaly is `findings`, else `clean`.
    pub fn implied_verdict(&self) -> Verdict {
        if self.harness_errors() > 0 {
            Verdict::Error
        } else if self.totals.cycles_with_findings_verdict > 0 || self.open.values().any(|c| c.verdict() == Verdict::Findings) {
            Verdict::Findings
        } else {
            Verdict::Clean
        }
    }
}

fn class_index(class: FindingClass) -> usize {
    FindingClass::ALL.iter().position(|&c| c == class).expect("ALL holds every class")
}

/// A decoded sector identity, in words.
pub fn describe(s: &Shown) -> String {
    match s {
        Shown::Prior {} => "prior content (no write of this run)".to_string(),
        Shown::Prefill {} => "the prefill version".to_string(),
        Shown::Write { write_id, cycle, port, addr, index, count } => {
            format!("write {write_id} (cycle {cycle}, port {port}), sector {} of {count}, for byte {addr}", index + 1)
        }
        Shown::Damaged { write_id, cycle, addr, run_id } => {
            format!("damaged sector (checksum fails) claiming write {write_id}, cycle {cycle}, byte {addr}, run {run_id:016x}")
        }
        Shown::ForeignRun { run_id, write_id } => format!("a sector of another run ({run_id:016x}, write {write_id})"),
        Shown::Zeros {} => "zeros".to_string(),
        Shown::Unrecognized {} => "bytes of no faultline sector".to_string(),
        Shown::ReadError { errno, detail } => format!("read error (errno {errno}: {detail})"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn the_model_folds_cycles_findings_and_verdicts() {
        let mut closed = Vec::new();
        let mut m = RunModel::default();
        for e in testdata::run() {
            m.fold(&e, &mut |c| closed.push((c.cycle, c.verdict(), c.throughput_mib_s())));
        }
        assert_eq!(
            closed,
            [(1, Verdict::Clean, Some(200.0)), (2, Verdict::Findings, Some(200.0)), (3, Verdict::Findings, Some(200.0))],
            "cycle 3 has a health anomaly"
        );
        assert!(m.open.is_empty());
        assert_eq!((m.verdict(), m.implied_verdict(), m.findings_total()), (Verdict::Findings, Verdict::Findings, 1));
        assert_eq!((m.totals.cycles_ended, m.totals.cycles_with_findings, m.class(FindingClass::LostWrite).cycles), (3, 1, 1));
        assert_eq!(m.sector_bytes, Some(512));

        // A run that died mid-cycle: findings stay findings, and nothing else is clean.
        let mut ev = testdata::run();
        ev.truncate(ev.len() - 2);
        let m = RunModel::from_events(&ev);
        assert_eq!((m.open[&3].verdict(), m.verdict()), (Verdict::Error, Verdict::Findings));
        let m = RunModel::from_events(&ev[..3]);
        assert_eq!(m.verdict(), Verdict::Error, "an unfinished run without findings is not clean");
    }

    #[test]
    fn the_model_stays_bounded_however_many_cycles_and_findings() {
        let ev = testdata::run();
        let (start, cycle) = (&ev[0], &ev[1..ev.len() - 1]);
        let mut m = RunModel::default();
        m.apply(start);
        let mut closed = 0u32;
        for k in 0..5_000u32 {
            for e in cycle {
                let mut e = e.clone();
                // Renumber the template's cycles 1..=3 into 3k+1..=3k+3.
                renumber(&mut e, 3 * k);
                m.fold(&e, &mut |_| closed += 1);
            }
        }
        assert_eq!((closed, m.totals.cycles, m.open.len()), (15_000, 15_000, 0));
        let lost = m.class(FindingClass::LostWrite);
        assert_eq!((lost.findings.total, lost.findings.kept.len(), lost.cycles), (5_000, MAX_LISTED_PER_CLASS, 5_000));
        assert_eq!((m.anomalies.total, m.anomalies.kept.len()), (5_000, MAX_MESSAGES));
        assert!(m.charts.throughput_mib_s.buckets().len() <= 2 * SERIES_BUCKETS);
        assert!(m.charts.cuts_clean.points().len() <= SCATTER_POINTS && m.charts.cuts_bad.points().len() <= SCATTER_POINTS);
        assert_eq!(m.figures.enumerate_us.n(), 15_000);
    }

    /// Moves a template event's cycle numbers up by `by`.
    pub(crate) fn renumber(e: &mut Event, by: u32) {
        match e {
            Event::CycleStarted { cycle, .. }
            | Event::CutIssued { cycle, .. }
            | Event::DeviceGone { cycle, .. }
            | Event::PowerRestored { cycle, .. }
            | Event::LinkRestored { cycle, .. }
            | Event::Ready { cycle, .. }
            | Event::Health { cycle, .. }
            | Event::Verified { cycle, .. }
            | Event::CycleEnded { cycle, .. } => *cycle += by,
            Event::Finding { cycle, finding, .. } => {
                *cycle += by;
                finding.cycle += by;
            }
            _ => {}
        }
    }

    #[test]
    fn late_events_of_a_closed_cycle_count_but_do_not_reopen_it() {
        let mut m = RunModel::from_events(&testdata::run());
        m.apply(&Event::Finding { t_ns: 9, cycle: 1, finding: testdata::finding(1, FindingClass::TornWrite, "late") });
        assert_eq!((m.open.len(), m.findings_total(), m.totals.cycles), (0, 2, 3));
    }

    #[test]
    fn too_many_open_cycles_close_the_oldest_as_unfinished() {
        let mut m = RunModel::default();
        let mut closed = Vec::new();
        for c in 1..=(MAX_OPEN_CYCLES as u32 + 2) {
            m.fold(&Event::CycleStarted { t_ns: u64::from(c), cycle: c, fault: None }, &mut |r| closed.push((r.cycle, r.verdict())));
        }
        assert_eq!(closed, [(1, Verdict::Error), (2, Verdict::Error)]);
        assert_eq!((m.open.len(), m.totals.cycles_error), (MAX_OPEN_CYCLES, 2));
    }

    #[test]
    fn identities_are_decoded_in_words() {
        let w = Shown::Write { write_id: 7, cycle: 2, port: 1, addr: 4096, index: 0, count: 8 };
        assert_eq!(describe(&w), "write 7 (cycle 2, port 1), sector 1 of 8, for byte 4096");
        assert!(describe(&Shown::ForeignRun { run_id: 0xab, write_id: 3 }).contains("00000000000000ab"));
        assert!(describe(&Shown::ReadError { errno: 5, detail: "EIO".into() }).contains("errno 5"));
    }
}
