//! Folding one event into the model: what it says of the run, then of its open cycle.

use super::{Cut, CycleEnd, CycleRecord, RunModel, RunStart, Verified, MAX_CYCLE_FINDINGS, MAX_LISTED_PER_CLASS, MAX_OPEN_CYCLES};
use crate::events::{CycleKey, Event, EventKind};
use crate::report::ports::WindowSeries;

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
        self.last_t_ns = self.last_t_ns.max(e.t_ns);
        self.fold_run(e);
        let Some(cycle) = e.cycle.filter(|_| kept_in_cycle(&e.kind)) else { return };
        if let Some(c) = self.cycle(cycle, on_close) {
            c.record(e);
            if matches!(e.kind, EventKind::CycleEnded { .. }) {
                self.close(cycle, on_close);
            }
        }
    }

    /// What `e` says of the run as a whole (its open cycle's record aside).
    fn fold_run(&mut self, e: &Event) {
        match &e.kind {
            EventKind::RunStarted { run_id, scenario, target, contract, cycles_planned, seed, started_at } => {
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
            EventKind::Health { anomalies, .. } => {
                for a in anomalies {
                    self.anomalies.push((e.cycle.unwrap_or_default(), a.clone()));
                }
            }
            EventKind::Verified { sectors, bytes, .. } => {
                if self.sector_bytes.is_none() && *sectors > 0 && bytes % sectors == 0 {
                    self.sector_bytes = Some(bytes / sectors);
                }
            }
            EventKind::Finding { finding } => {
                let class = &mut self.classes[super::class_index(finding.class)];
                class.findings.push_within(finding.clone(), MAX_LISTED_PER_CLASS);
            }
            EventKind::HarnessError { message } => match e.cycle {
                Some(c) => self.cycle_errors.push(format!("cycle {c}: {message}")),
                None => self.run_errors.push(message.clone()),
            },
            EventKind::RunResumed { resumed_at, interrupted_cycle, .. } => self.resumes.push((resumed_at.clone(), *interrupted_cycle)),
            EventKind::RunEnded { verdict, exit_code } => self.end = Some((*verdict, *exit_code)),
            EventKind::RunStopped { reason } => self.stopped = Some(reason.clone()),
            EventKind::RunSuspended { reason } => self.suspended = Some(reason.clone()),
            EventKind::Note { message } => self.notes.push(message.clone()),
            EventKind::ControllerLog { lines } => self.controller_log_lines += lines.len() as u64,
            EventKind::AgentLog { lines } => self.agent_log_lines += lines.len() as u64,
            EventKind::PortPerf { workload, phase, name, figures } => {
                if self.perf.len() < 256 {
                    self.perf.insert(
                        (workload.clone(), phase.clone(), name.clone()),
                        (figures.throughput_bps / 1e6, figures.latency.map(|l| l.p99_us)),
                    );
                }
            }
            EventKind::PortWindow { .. } => self.fold_port_window(e),
            EventKind::CycleStarted { .. }
            | EventKind::CutIssued { .. }
            | EventKind::DeviceGone {}
            | EventKind::PowerRestored { .. }
            | EventKind::LinkRestored {}
            | EventKind::RecoveryCut { .. }
            | EventKind::Ready { .. }
            | EventKind::CycleEnded { .. } => {}
        }
    }

    /// A port's window of one cycle: its chart, and its totals over the run.
    fn fold_port_window(&mut self, e: &Event) {
        let EventKind::PortWindow {
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
        } = &e.kind
        else {
            return;
        };
        self.port_charts.push(&WindowSeries {
            cycle: e.cycle.unwrap_or_default(),
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
        p.id = e.port.map_or(0, |p| p.0);
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

/// The kinds an open cycle's record keeps: those that always belong to a cycle, but a port's
/// window (the port's totals and chart, apart), and a harness error of a cycle. A note, a
/// transcript or a window counts for the run only, and does not open the cycle.
fn kept_in_cycle(kind: &EventKind) -> bool {
    match kind.cycle_key() {
        CycleKey::Always => !matches!(kind, EventKind::PortWindow { .. }),
        CycleKey::Nullable => matches!(kind, EventKind::HarnessError { .. }),
        CycleKey::Optional | CycleKey::Never => false,
    }
}

impl CycleRecord {
    /// What `e`, an event of this cycle, says of it.
    fn record(&mut self, e: &Event) {
        match &e.kind {
            EventKind::CycleStarted { fault, off_time_ms } => {
                self.started_ns = Some(e.t_ns);
                self.fault.clone_from(fault);
                self.off_time_ms = *off_time_ms;
            }
            EventKind::CutIssued { completions, in_flight_ops, bytes_at_risk, phase_us, .. } => {
                self.cut = Some(Cut {
                    t_ns: e.t_ns,
                    completions: *completions,
                    in_flight_ops: *in_flight_ops,
                    bytes_at_risk: *bytes_at_risk,
                    phase_us: *phase_us,
                })
            }
            EventKind::DeviceGone {} => self.device_gone_ns = Some(e.t_ns),
            EventKind::PowerRestored { .. } | EventKind::LinkRestored {} => self.power_restored_ns = Some(e.t_ns),
            EventKind::RecoveryCut { .. } => self.recovery_cuts = self.recovery_cuts.saturating_add(1),
            EventKind::Ready { enumerate_us, first_read_us } => {
                self.enumerate_us = *enumerate_us;
                self.first_read_us = *first_read_us;
            }
            EventKind::Health { smart, anomalies, .. } => {
                self.smart = Some(smart.clone());
                for a in anomalies {
                    self.anomalies.push(a.clone());
                }
            }
            EventKind::Verified { sectors, bytes, verify_ns, counts } => {
                self.verified = Some(Verified { sectors: *sectors, bytes: *bytes, verify_ns: *verify_ns, counts: counts.clone() })
            }
            EventKind::Finding { finding } => {
                self.findings.push_within(finding.clone(), MAX_CYCLE_FINDINGS);
                if !self.classes.contains(&finding.class) {
                    self.classes.push(finding.class);
                }
            }
            EventKind::CycleEnded { .. } => self.end = cycle_end(e),
            EventKind::HarnessError { message } => self.errors.push(message.clone()),
            _ => {}
        }
    }
}

/// The end of a cycle as `cycle_ended` tells it.
fn cycle_end(e: &Event) -> Option<CycleEnd> {
    let EventKind::CycleEnded {
        verdict,
        writes_completed,
        bytes_written,
        write_ns,
        latency_p50_ns,
        latency_p99_ns,
        latency_max_ns,
        max_gap_ns,
        harness_ns,
        zeroing,
    } = &e.kind
    else {
        return None;
    };
    Some(CycleEnd {
        t_ns: e.t_ns,
        verdict: *verdict,
        writes_completed: *writes_completed,
        bytes_written: *bytes_written,
        write_ns: *write_ns,
        latency_p50_ns: *latency_p50_ns,
        latency_p99_ns: *latency_p99_ns,
        latency_max_ns: *latency_max_ns,
        max_gap_ns: *max_gap_ns,
        harness_ns: *harness_ns,
        zeroing: *zeroing,
    })
}
