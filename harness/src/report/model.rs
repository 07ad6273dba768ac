//! The run as its events tell it: [`RunModel`] folds the stream, in order, into what every
//! file report renders. It depends on the events alone, never on a report.

use crate::events::{Event, HealthNote, SmartFigures, Verdict};
use crate::ledger::Contract;
use crate::verify::{Finding, Shown};
use std::collections::BTreeMap;

/// The run as told by its events, folded in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunModel {
    pub start: Option<RunStart>,
    pub cycles: BTreeMap<u32, CycleRecord>,
    /// Harness errors not tied to a cycle.
    pub run_errors: Vec<String>,
    pub end: Option<(Verdict, u8)>,
    /// The latest timestamp seen.
    pub last_t_ns: u64,
    /// Each time `faultline resume` took the run up again: (wall clock, interrupted cycle).
    pub resumes: Vec<(String, Option<u32>)>,
    /// Why the run ended before its planned cycles (`run_stopped`).
    pub stopped: Option<String>,
    /// Why the run was last suspended (`run_suspended`).
    pub suspended: Option<String>,
    /// Notes the run recorded (engine, health checks).
    pub notes: Vec<String>,
    /// Lines of controller transcripts in the log.
    pub controller_log_lines: u64,
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
    pub harness_ns: Option<u64>,
}

/// Everything recorded about one cycle.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CycleRecord {
    pub cycle: u32,
    pub started_ns: Option<u64>,
    pub cut: Option<Cut>,
    pub device_gone_ns: Option<u64>,
    pub power_restored_ns: Option<u64>,
    pub enumerate_us: Option<u64>,
    pub first_read_us: Option<u64>,
    pub smart: Option<SmartFigures>,
    pub anomalies: Vec<HealthNote>,
    pub verified: Option<Verified>,
    /// Findings that first appeared in this cycle.
    pub findings: Vec<Finding>,
    pub errors: Vec<String>,
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

    fn cycle(&mut self, cycle: u32) -> &mut CycleRecord {
        self.cycles.entry(cycle).or_insert_with(|| CycleRecord { cycle, ..CycleRecord::default() })
    }

    pub fn apply(&mut self, e: &Event) {
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
            Event::CycleStarted { t_ns, cycle } => self.cycle(*cycle).started_ns = Some(*t_ns),
            Event::CutIssued { t_ns, cycle, completions, in_flight_ops, bytes_at_risk, phase_us, .. } => {
                self.cycle(*cycle).cut = Some(Cut {
                    t_ns: *t_ns,
                    completions: *completions,
                    in_flight_ops: *in_flight_ops,
                    bytes_at_risk: *bytes_at_risk,
                    phase_us: *phase_us,
                })
            }
            Event::DeviceGone { t_ns, cycle } => self.cycle(*cycle).device_gone_ns = Some(*t_ns),
            Event::PowerRestored { t_ns, cycle } => self.cycle(*cycle).power_restored_ns = Some(*t_ns),
            Event::Ready { cycle, enumerate_us, first_read_us, .. } => {
                let c = self.cycle(*cycle);
                c.enumerate_us = *enumerate_us;
                c.first_read_us = *first_read_us;
            }
            Event::Health { cycle, smart, anomalies, .. } => {
                let c = self.cycle(*cycle);
                c.smart = Some(smart.clone());
                c.anomalies.extend(anomalies.iter().cloned());
            }
            Event::Verified { cycle, sectors, bytes, verify_ns, counts, .. } => {
                self.cycle(*cycle).verified =
                    Some(Verified { sectors: *sectors, bytes: *bytes, verify_ns: *verify_ns, counts: counts.clone() })
            }
            Event::Finding { cycle, finding, .. } => self.cycle(*cycle).findings.push(finding.clone()),
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
                harness_ns,
            } => {
                self.cycle(*cycle).end = Some(CycleEnd {
                    t_ns: *t_ns,
                    verdict: *verdict,
                    writes_completed: *writes_completed,
                    bytes_written: *bytes_written,
                    write_ns: *write_ns,
                    latency_p50_ns: *latency_p50_ns,
                    latency_p99_ns: *latency_p99_ns,
                    latency_max_ns: *latency_max_ns,
                    harness_ns: *harness_ns,
                })
            }
            Event::HarnessError { cycle: Some(c), message, .. } => self.cycle(*c).errors.push(message.clone()),
            Event::HarnessError { cycle: None, message, .. } => self.run_errors.push(message.clone()),
            Event::RunResumed { resumed_at, interrupted_cycle, .. } => self.resumes.push((resumed_at.clone(), *interrupted_cycle)),
            Event::RunEnded { verdict, exit_code, .. } => self.end = Some((*verdict, *exit_code)),
            Event::RunStopped { reason, .. } => self.stopped = Some(reason.clone()),
            Event::RunSuspended { reason, .. } => self.suspended = Some(reason.clone()),
            Event::Note { message, .. } => self.notes.push(message.clone()),
            Event::ControllerLog { lines, .. } => self.controller_log_lines += lines.len() as u64,
        }
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.cycles.values().flat_map(|c| c.findings.iter())
    }

    pub fn harness_errors(&self) -> usize {
        self.run_errors.len() + self.cycles.values().map(|c| c.errors.len()).sum::<usize>()
    }

    /// The run's verdict: what `run_ended` said; for a run that never ended (the harness
    /// died), `findings` if it found any, else `error` (an unfinished run is not clean).
    pub fn verdict(&self) -> Verdict {
        match self.end {
            Some((v, _)) => v,
            None if self.harness_errors() == 0 && self.findings().next().is_some() => Verdict::Findings,
            None => Verdict::Error,
        }
    }

    /// The verdict the events imply, for the runner to put in `run_ended`: any harness error
    /// is `error`, else any finding or health anomaly is `findings`, else `clean`.
    pub fn implied_verdict(&self) -> Verdict {
        if self.harness_errors() > 0 {
            Verdict::Error
        } else if self.cycles.values().any(|c| c.verdict() == Verdict::Findings) {
            Verdict::Findings
        } else {
            Verdict::Clean
        }
    }
}

/// A decoded sector identity, in words.
pub fn describe(s: &Shown) -> String {
    match s {
        Shown::Prior => "prior content (no write of this run)".to_string(),
        Shown::Prefill => "the prefill version".to_string(),
        Shown::Write { write_id, cycle, port, addr, index, count } => {
            format!("write {write_id} (cycle {cycle}, port {port}), sector {} of {count}, for byte {addr}", index + 1)
        }
        Shown::Damaged { write_id, cycle, addr, run_id } => {
            format!("damaged sector (checksum fails) claiming write {write_id}, cycle {cycle}, byte {addr}, run {run_id:016x}")
        }
        Shown::ForeignRun { run_id, write_id } => format!("a sector of another run ({run_id:016x}, write {write_id})"),
        Shown::Zeros => "zeros".to_string(),
        Shown::Unrecognized => "bytes of no faultline sector".to_string(),
        Shown::ReadError { errno, detail } => format!("read error (errno {errno}: {detail})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn the_model_folds_cycles_findings_and_verdicts() {
        let m = RunModel::from_events(&testdata::run());
        assert_eq!(m.cycles.len(), 3);
        let v: Vec<Verdict> = m.cycles.values().map(CycleRecord::verdict).collect();
        assert_eq!(v, [Verdict::Clean, Verdict::Findings, Verdict::Findings], "cycle 3 has a health anomaly");
        assert_eq!((m.verdict(), m.implied_verdict(), m.findings().count()), (Verdict::Findings, Verdict::Findings, 1));
        assert_eq!(m.cycles[&2].throughput_mib_s(), Some(200.0));

        // A run that died mid-cycle: findings stay findings, and nothing else is clean.
        let mut ev = testdata::run();
        ev.truncate(ev.len() - 2);
        let m = RunModel::from_events(&ev);
        assert_eq!((m.cycles[&3].verdict(), m.verdict()), (Verdict::Error, Verdict::Findings));
        let m = RunModel::from_events(&ev[..3]);
        assert_eq!(m.verdict(), Verdict::Error, "an unfinished run without findings is not clean");
    }

    #[test]
    fn identities_are_decoded_in_words() {
        let w = Shown::Write { write_id: 7, cycle: 2, port: 1, addr: 4096, index: 0, count: 8 };
        assert_eq!(describe(&w), "write 7 (cycle 2, port 1), sector 1 of 8, for byte 4096");
        assert!(describe(&Shown::ForeignRun { run_id: 0xab, write_id: 3 }).contains("00000000000000ab"));
        assert!(describe(&Shown::ReadError { errno: 5, detail: "EIO".into() }).contains("errno 5"));
    }
}
