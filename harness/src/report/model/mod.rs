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

use super::ports::PortCharts;
use super::series::{Buckets, Dist, Thinned};
use crate::events::{HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, FindingClass, Shown};
use std::borrow::Cow;
use std::collections::BTreeMap;

mod close;
mod fold;
#[cfg(test)]
pub(crate) mod tests;

/// Off times tallied apart ([`RunModel::off_times`]).
pub const MAX_OFF_TIMES: usize = 256;

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
    /// Per off time (ms) of a run whose off time changes from cycle to cycle (at most
    /// [`MAX_OFF_TIMES`]: the first so many off times the run drew).
    pub off_times: BTreeMap<u64, FaultTotals>,
    /// Per fault and off time of a run that mixes faults and changes its off time (a link
    /// reset's off time is how long it holds the link down): at most [`MAX_OFF_TIMES`].
    pub fault_off_times: BTreeMap<(String, u64), FaultTotals>,
    /// `dual.mode = "performance"`: (workload, phase, port) -> MB/s and p99 µs (at most 256).
    pub perf: BTreeMap<(String, String, String), (f64, Option<f64>)>,
    /// The cycle the report charts per port ([`super::ports`]).
    pub port_charts: PortCharts,
}

/// The cycles of one fault of a mix (or of one off time), by verdict, and how long the device
/// took to answer again after them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultTotals {
    pub cycles: u32,
    pub clean: u32,
    pub findings: u32,
    pub error: u32,
    /// Cycles with a time to ready (a `ready` event's first good read), their sum and the
    /// longest, µs.
    pub ready_n: u32,
    pub ready_sum_us: u64,
    pub ready_max_us: u64,
}

impl FaultTotals {
    /// One more cycle, of verdict `v`, whose device answered `first_read_us` after the power
    /// (or the link) came back, if it did.
    pub fn add(&mut self, v: Verdict, first_read_us: Option<u64>) {
        self.cycles += 1;
        match v {
            Verdict::Clean => self.clean += 1,
            Verdict::Findings => self.findings += 1,
            Verdict::Error => self.error += 1,
        }
        if let Some(us) = first_read_us {
            self.ready_n += 1;
            self.ready_sum_us = self.ready_sum_us.saturating_add(us);
            self.ready_max_us = self.ready_max_us.max(us);
        }
    }

    /// The mean time to ready, µs.
    pub fn ready_mean_us(&self) -> Option<u64> {
        (self.ready_n > 0).then(|| self.ready_sum_us / u64::from(self.ready_n))
    }
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
    /// The deallocates and Write Zeroes among the writes (their bytes in `bytes_written`).
    pub zeroing: crate::writer::ZeroingDone,
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
            off_times: BTreeMap::new(),
            fault_off_times: BTreeMap::new(),
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
    pub zeroing: crate::writer::ZeroingDone,
}

/// Everything recorded about one cycle (while it is open).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleRecord {
    pub cycle: u32,
    pub started_ns: Option<u64>,
    /// The cycle's fault, in a run that mixes faults.
    pub fault: Option<String>,
    /// The cycle's off time, ms, in a run whose off time changes from cycle to cycle.
    pub off_time_ms: Option<u64>,
    pub cut: Option<Cut>,
    pub device_gone_ns: Option<u64>,
    /// When the power came back, the last time (after the last recovery cut, if any).
    pub power_restored_ns: Option<u64>,
    /// Cuts while the drive recovered (`recovery_cut` events).
    pub recovery_cuts: u32,
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
        Shown::Ones {} => "all bytes FFh".to_string(),
        Shown::Zeroed { write_id, op } => format!("what {op} {write_id} leaves"),
        Shown::Unrecognized {} => "bytes of no faultline sector".to_string(),
        Shown::ReadError { errno, detail } => format!("read error (errno {errno}: {detail})"),
    }
}
