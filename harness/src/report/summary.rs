//! `summary.json`: the run in one object, for scripts: verdict and exit code, findings per
//! class, cycles, timings and figures. Built from the events alone (see [`super::RunModel`]),
//! so a regenerated summary is byte-identical to the one the run wrote.

use super::model::{FaultTotals, PortTotals, RunModel};
use super::series::Dist;
use crate::events::{zero_counts, Verdict};
use crate::ledger::Contract;
use crate::writer::ZeroingDone;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of this file's layout.
pub const SUMMARY_FORMAT: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub summary_format: u32,
    pub run_id: Option<String>,
    pub scenario: Option<String>,
    pub target: Option<String>,
    pub contract: Option<Contract>,
    pub seed: Option<u64>,
    pub started_at: Option<String>,
    pub verdict: Verdict,
    pub exit_code: u8,
    /// Every planned cycle ran and the run recorded its end: false for a run the stop policy
    /// ended early (`stopped` says why), a suspended one, or one whose harness died.
    pub complete: bool,
    /// The run recorded its end, complete or stopped early (false: the harness died, or the run
    /// was suspended; the figures cover what was recorded).
    #[serde(default)]
    pub ended: bool,
    pub cycles_planned: Option<u32>,
    /// Cycles that ended.
    pub cycles_done: u32,
    pub cycles_with_findings: u32,
    /// Distinct findings (each counted in the cycle where it first appeared).
    pub findings: u64,
    pub findings_per_class: BTreeMap<String, u64>,
    pub health_anomalies: u64,
    /// The first 200 harness errors outside cycles and the first 200 in cycles; a last line
    /// counts any beyond (all are in `events.jsonl`).
    pub harness_errors: Vec<String>,
    /// Times `faultline resume` took the run up again after the harness died.
    #[serde(default)]
    pub resumes: u32,
    /// Why the run ended before its planned cycles, if it did (`run_stopped`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Notes the run recorded (the engine in use, health checks that cannot be made).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub timings: Timings,
    pub figures: Figures,
    /// Per port of a dual-port run (absent for one port).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortSummary>,
    /// `dual.mode = "performance"`: per workload, each phase's per-port MB/s, the fairness and
    /// the sum against the ports alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub performance: Vec<PerfSummary>,
    /// A run that mixes faults: per fault (`power-cut`, `port-pull`, ...), its cycles by
    /// verdict (absent for a run of one fault).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub faults: BTreeMap<String, FaultSummary>,
    /// A run whose off time changes from cycle to cycle (`cycles.off_time_ms` a list or a
    /// range): per off time, ms, its cycles by verdict (at most the first 256 off times drawn).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub off_times: BTreeMap<u64, FaultSummary>,
    /// A run that mixes faults and changes its off time: per fault and off time (for a link
    /// reset, how long the link was held down), its cycles by verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_off_times: Vec<FaultOffTime>,
}

/// The cycles of one fault at one off time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultOffTime {
    pub fault: String,
    pub off_time_ms: u64,
    #[serde(flatten)]
    pub cycles: FaultSummary,
}

/// The cycles of one fault of a mix (or of one off time), and their time to ready.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultSummary {
    pub cycles: u32,
    pub clean: u32,
    pub findings: u32,
    pub error: u32,
    /// Mean and longest time from the power (or the link) back to the first good read, µs,
    /// over the cycles whose device answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_mean_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_max_us: Option<u64>,
}

impl From<&FaultTotals> for FaultSummary {
    fn from(f: &FaultTotals) -> Self {
        let ready_max_us = (f.ready_n > 0).then_some(f.ready_max_us);
        FaultSummary {
            cycles: f.cycles,
            clean: f.clean,
            findings: f.findings,
            error: f.error,
            ready_mean_us: f.ready_mean_us(),
            ready_max_us,
        }
    }
}

/// One workload of a dual-port performance run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerfSummary {
    pub workload: String,
    /// phase (`A only`, `B only`, `A+B`) -> port -> MB/s.
    pub mb_s: BTreeMap<String, BTreeMap<String, f64>>,
    /// In the phase with every port: the lowest port's MB/s over the highest's (1 is fair).
    pub fairness: Option<f64>,
    /// The sum of every port's MB/s in that phase over the sum of each port's MB/s alone.
    pub sum_over_alone: Option<f64>,
}

fn performance(m: &RunModel) -> Vec<PerfSummary> {
    let mut by: BTreeMap<&str, BTreeMap<String, BTreeMap<String, f64>>> = BTreeMap::new();
    for ((w, phase, port), (mb, _)) in &m.perf {
        by.entry(w.as_str()).or_default().entry(phase.clone()).or_default().insert(port.clone(), *mb);
    }
    by.into_iter()
        .map(|(w, mb_s)| {
            let all = mb_s.iter().max_by_key(|(_, ports)| ports.len()).filter(|(_, p)| p.len() > 1).map(|(_, p)| p.clone());
            let alone: Option<f64> = all.as_ref().map(|all| {
                all.keys().map(|port| mb_s.get(&format!("{port} only")).and_then(|p| p.get(port)).copied().unwrap_or(0.0)).sum()
            });
            let fairness = all.as_ref().and_then(|a| {
                let (lo, hi) = a.values().fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                (hi > 0.0).then(|| lo / hi)
            });
            let sum_over_alone = match (&all, alone) {
                (Some(a), Some(al)) if al > 0.0 => Some(a.values().sum::<f64>() / al),
                _ => None,
            };
            PerfSummary { workload: w.to_string(), mb_s, fairness, sum_over_alone }
        })
        .collect()
}

/// One port of a dual-port run: how it fared while the fault hit another port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortSummary {
    pub name: String,
    pub cycles_faulted: u64,
    pub cycles_judged: u64,
    /// Write errors in its fault windows.
    pub io_errors: u64,
    /// The longest it went without a write completing in a fault window, ms.
    pub max_stall_ms: f64,
    /// The lowest throughput in a fault window over its baseline.
    pub throughput_ratio: Option<f64>,
    /// The highest p99 write latency in a fault window over its baseline.
    pub p99_latency_ratio: Option<f64>,
    /// Its mean throughput over the baselines, MB/s.
    pub baseline_mb_s: Option<f64>,
    /// A budget was breached in at least one cycle.
    pub disturbed: bool,
    pub cycles_disturbed: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// From the start of the run to its last event.
    pub run_ns: u64,
    pub write_ns_total: u64,
    pub verify_ns_total: u64,
    /// Power-on to enumeration, per cycle that measured it.
    pub enumerate_us: Option<Stats>,
    /// Power-on to the first good read.
    pub first_read_us: Option<Stats>,
    /// Cut command issued to the device's first failed operation.
    pub cut_to_gone_ns: Option<Stats>,
    /// Time the harness itself spent per cycle, outside the workload, controller commands,
    /// off time, device waits, health reads and verification.
    #[serde(default)]
    pub harness_ns_per_cycle: Option<Stats>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub writes_completed: u64,
    pub bytes_written: u64,
    /// The deallocates and Write Zeroes among `writes_completed`, and their bytes (also in
    /// `bytes_written`); absent for a workload of writes only.
    #[serde(default, skip_serializing_if = "ZeroingDone::is_empty")]
    pub zeroing: ZeroingDone,
    pub bytes_verified: u64,
    /// Bytes written over the time spent writing, MiB/s.
    pub write_mib_s: Option<f64>,
    pub cut_completions: Option<Stats>,
    pub cut_phase_us: Option<Stats>,
    pub in_flight_ops_at_cut: Option<Stats>,
    pub bytes_at_risk: Option<Stats>,
    pub latency_p50_ns: Option<Stats>,
    pub latency_p99_ns: Option<Stats>,
}

/// Order statistics of a set of integer samples (see [`Stats::of_dist`] for how exact).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    pub mean: f64,
}

impl Stats {
    /// None for no samples. Percentiles are nearest-rank.
    pub fn of(mut v: Vec<u64>) -> Option<Stats> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        let rank = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        let sum: u128 = v.iter().map(|&x| u128::from(x)).sum();
        Some(Stats {
            n: v.len() as u64,
            min: v[0],
            p50: rank(50.0),
            p99: rank(99.0),
            max: v[v.len() - 1],
            mean: sum as f64 / v.len() as f64,
        })
    }

    /// The statistics of a bounded distribution: count, min, max and mean exact,
    /// percentiles nearest-rank to 3 significant digits ([`Dist::percentile`]).
    pub fn of_dist(d: &Dist) -> Option<Stats> {
        let (min, max) = d.range()?;
        Some(Stats { n: d.n(), min, p50: d.percentile(50.0)?, p99: d.percentile(99.0)?, max, mean: d.mean()? })
    }
}

/// The harness errors of a run, the first ones listed, the rest counted.
pub fn error_lines(m: &RunModel) -> Vec<String> {
    let mut errors: Vec<String> = m.run_errors.kept.iter().chain(&m.cycle_errors.kept).cloned().collect();
    let dropped = m.run_errors.dropped() + m.cycle_errors.dropped();
    if dropped > 0 {
        errors.push(format!("... and {dropped} more harness errors; all are in events.jsonl"));
    }
    errors
}

pub fn summarize(m: &RunModel) -> Summary {
    // A run that did not end may leave cycles open: they count as they stand.
    let m = &*m.settled();
    let s = m.start.as_ref();
    let t = &m.totals;
    let mut per_class = zero_counts();
    for c in &m.classes {
        *per_class.get_mut(c.class.name()).expect("every class") = c.findings.total;
    }
    let verdict = m.verdict();
    let mut notes = m.notes.kept.clone();
    if m.notes.dropped() > 0 {
        notes.push(format!("... and {} more notes; all are in events.jsonl", m.notes.dropped()));
    }
    Summary {
        summary_format: SUMMARY_FORMAT,
        run_id: s.map(|s| s.run_id.clone()),
        scenario: s.map(|s| s.scenario.clone()),
        target: s.map(|s| s.target.clone()),
        contract: s.map(|s| s.contract),
        seed: s.map(|s| s.seed),
        started_at: s.map(|s| s.started_at.clone()),
        verdict,
        exit_code: m.end.map_or(verdict.exit_code(), |(_, code)| code),
        complete: m.end.is_some() && m.stopped.is_none() && s.is_none_or(|s| t.cycles_ended >= u64::from(s.cycles_planned)),
        ended: m.end.is_some(),
        cycles_planned: s.map(|s| s.cycles_planned),
        cycles_done: t.cycles_ended as u32,
        cycles_with_findings: t.cycles_with_findings as u32,
        findings: per_class.values().sum(),
        findings_per_class: per_class,
        health_anomalies: m.anomalies.total,
        harness_errors: error_lines(m),
        resumes: m.resumes.total as u32,
        stopped: m.stopped.clone(),
        notes,
        timings: timings(m),
        figures: figures(m),
        ports: m.ports.iter().map(|(name, p)| port_summary(name, p)).collect(),
        performance: performance(m),
        faults: m.faults.iter().map(|(k, f)| (k.clone(), FaultSummary::from(f))).collect(),
        off_times: m.off_times.iter().map(|(k, f)| (*k, FaultSummary::from(f))).collect(),
        fault_off_times: m
            .fault_off_times
            .iter()
            .map(|((fault, ms), f)| FaultOffTime { fault: fault.clone(), off_time_ms: *ms, cycles: FaultSummary::from(f) })
            .collect(),
    }
}

/// How long the run, its writes, verifications and recoveries took.
fn timings(m: &RunModel) -> Timings {
    let (t, f) = (&m.totals, &m.figures);
    Timings {
        run_ns: m.last_t_ns,
        write_ns_total: t.write_ns,
        verify_ns_total: t.verify_ns,
        enumerate_us: Stats::of_dist(&f.enumerate_us),
        first_read_us: Stats::of_dist(&f.first_read_us),
        cut_to_gone_ns: Stats::of_dist(&f.cut_to_gone_ns),
        harness_ns_per_cycle: Stats::of_dist(&f.harness_ns),
    }
}

/// What the run wrote and verified, and the queue at its cuts.
fn figures(m: &RunModel) -> Figures {
    let (t, f) = (&m.totals, &m.figures);
    Figures {
        writes_completed: t.writes_completed,
        bytes_written: t.bytes_written,
        zeroing: t.zeroing,
        bytes_verified: t.bytes_verified,
        write_mib_s: (t.write_ns > 0).then(|| t.bytes_written as f64 / 1_048_576.0 / (t.write_ns as f64 / 1e9)),
        cut_completions: Stats::of_dist(&f.cut_completions),
        cut_phase_us: Stats::of_dist(&f.cut_phase_us),
        in_flight_ops_at_cut: Stats::of_dist(&f.in_flight_ops),
        bytes_at_risk: Stats::of_dist(&f.bytes_at_risk),
        latency_p50_ns: Stats::of_dist(&f.latency_p50_ns),
        latency_p99_ns: Stats::of_dist(&f.latency_p99_ns),
    }
}

/// One port of a dual-port run, over its windows.
fn port_summary(name: &str, p: &PortTotals) -> PortSummary {
    PortSummary {
        name: name.to_string(),
        cycles_faulted: p.cycles_faulted,
        cycles_judged: p.cycles_judged,
        io_errors: p.io_errors,
        max_stall_ms: p.max_stall_us as f64 / 1000.0,
        throughput_ratio: p.min_throughput_ratio,
        p99_latency_ratio: p.max_p99_ratio,
        baseline_mb_s: (p.baseline_us > 0).then(|| p.baseline_bytes as f64 / p.baseline_us as f64),
        disturbed: p.cycles_disturbed > 0,
        cycles_disturbed: p.cycles_disturbed,
    }
}

/// The text of `summary.json`.
pub fn render(m: &RunModel) -> String {
    let mut s = serde_json::to_string_pretty(&summarize(m)).expect("a summary always serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn the_summary_counts_classes_cycles_and_figures() {
        let m = RunModel::from_events(&testdata::run());
        let s = summarize(&m);
        assert_eq!((s.verdict, s.exit_code, s.complete, s.cycles_done, s.cycles_planned), (Verdict::Findings, 1, true, 3, Some(3)));
        assert_eq!((s.findings, s.findings_per_class["lost_write"], s.findings_per_class["torn_write"]), (1, 1, 0));
        assert_eq!((s.cycles_with_findings, s.health_anomalies), (1, 1));
        let e = s.timings.enumerate_us.as_ref().unwrap();
        assert_eq!((e.n, e.min, e.p50, e.max, e.mean), (3, 1500, 3000, 4500, 3000.0));
        assert_eq!(s.timings.cut_to_gone_ns.as_ref().unwrap().max, 1000);
        assert_eq!(s.figures.write_mib_s, Some(200.0));
        assert_eq!(s.figures.cut_phase_us.as_ref().unwrap().p99, 3000);
        let back: Summary = serde_json::from_str(&render(&m)).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let s = Stats::of((1..=100).collect()).unwrap();
        assert_eq!((s.p50, s.p99, s.max, s.mean), (50, 99, 100, 50.5));
        assert_eq!(Stats::of(vec![7]).unwrap().p99, 7);
        assert!(Stats::of(Vec::new()).is_none());
    }
}
