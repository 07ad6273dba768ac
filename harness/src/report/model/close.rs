//! Closing a cycle: its record folded into the run's totals, distributions and series.

use super::{class_index, CycleRecord, RunModel, MAX_OFF_TIMES};
use crate::events::Verdict;

impl RunModel {
    /// Folds the open cycle `cycle` into the totals and drops it.
    pub(super) fn close(&mut self, cycle: u32, on_close: &mut dyn FnMut(&CycleRecord)) {
        let Some(c) = self.open.remove(&cycle) else { return };
        on_close(&c);
        self.last_closed = Some(self.last_closed.map_or(cycle, |l| l.max(cycle)));
        self.fold_fault(&c);
        self.fold_off_time(&c);
        self.count(&c);
        self.fold_recovery(&c);
        self.fold_cut(&c);
        self.fold_end(&c);
        self.fold_smart(&c);
    }

    /// The cycle's verdict under its fault, in a run that mixes faults.
    fn fold_fault(&mut self, c: &CycleRecord) {
        let Some(fault) = c.fault.as_ref().filter(|f| self.faults.len() < 64 || self.faults.contains_key(*f)) else { return };
        self.faults.entry(fault.clone()).or_default().add(c.verdict(), c.first_read_us);
    }

    /// The cycle's verdict under its off time, in a run whose off time changes (and under its
    /// fault and off time, in a run that mixes faults too).
    fn fold_off_time(&mut self, c: &CycleRecord) {
        let Some(ms) = c.off_time_ms else { return };
        if self.off_times.len() < MAX_OFF_TIMES || self.off_times.contains_key(&ms) {
            self.off_times.entry(ms).or_default().add(c.verdict(), c.first_read_us);
        }
        let Some(key) = c.fault.clone().map(|f| (f, ms)) else { return };
        if self.fault_off_times.len() < MAX_OFF_TIMES || self.fault_off_times.contains_key(&key) {
            self.fault_off_times.entry(key).or_default().add(c.verdict(), c.first_read_us);
        }
    }

    /// The cycle counted: by verdict, with findings or anomalies, per finding class, verified.
    fn count(&mut self, c: &CycleRecord) {
        let t = &mut self.totals;
        t.cycles += 1;
        match c.verdict() {
            Verdict::Clean => t.cycles_clean += 1,
            Verdict::Findings => t.cycles_with_findings_verdict += 1,
            Verdict::Error => t.cycles_error += 1,
        }
        if !c.findings.is_empty() {
            t.cycles_with_findings += 1;
        }
        if !c.anomalies.is_empty() {
            t.cycles_with_anomalies += 1;
        }
        if let Some(v) = &c.verified {
            t.bytes_verified += v.bytes;
            t.verify_ns += v.verify_ns;
        }
        for class in &c.classes {
            self.classes[class_index(*class)].cycles += 1;
        }
    }

    /// How long the device took to come back.
    fn fold_recovery(&mut self, c: &CycleRecord) {
        if let Some(v) = c.enumerate_us {
            self.figures.enumerate_us.push(v);
        }
        if let Some(v) = c.first_read_us {
            self.figures.first_read_us.push(v);
        }
    }

    /// The queue at the cut, and how long the device took to go.
    fn fold_cut(&mut self, c: &CycleRecord) {
        let Some(cut) = &c.cut else { return };
        let (f, ch) = (&mut self.figures, &mut self.charts);
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
        ch.bytes_at_risk.push(u64::from(c.cycle), cut.bytes_at_risk as f64);
    }

    /// What the cycle wrote, how fast, and what the harness spent on it.
    fn fold_end(&mut self, c: &CycleRecord) {
        let x = u64::from(c.cycle);
        if let Some(e) = &c.end {
            let (t, f, ch) = (&mut self.totals, &mut self.figures, &mut self.charts);
            t.cycles_ended += 1;
            t.writes_completed += e.writes_completed;
            t.bytes_written += e.bytes_written;
            t.zeroing.add(&e.zeroing);
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
            self.charts.throughput_mib_s.push(x, tp);
        }
    }

    /// The health counters over cycles.
    fn fold_smart(&mut self, c: &CycleRecord) {
        let Some(s) = &c.smart else { return };
        let (ch, x) = (&mut self.charts, u64::from(c.cycle));
        ch.unsafe_shutdowns.push(x, s.unsafe_shutdowns as f64);
        ch.power_cycles.push(x, s.power_cycles as f64);
        ch.media_errors.push(x, s.media_errors as f64);
        ch.error_log_entries.push(x, s.error_log_entries as f64);
    }
}
