//! `report.html`'s "Which shape loses data": for a run that mixes faults (a plain cut, a cut
//! with cuts while the drive recovers, a link reset...) or whose off time changes from cycle
//! to cycle, a table per fault and per off time (cycles by verdict, the share with findings,
//! the time to ready) and a bar chart of the share with findings, where a person would rather
//! look than read; with both, a table per fault and off time (a link reset's hold time). Off
//! times past [`MAX_ROWS`] distinct values are grouped in powers of two.

use super::escape::esc;
use super::model::{FaultTotals, RunModel};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Off times shown one per row; more are grouped.
const MAX_ROWS: usize = 16;

/// The section, when the run has faults or off times to tell apart.
pub fn section(h: &mut String, m: &RunModel) {
    if m.faults.is_empty() && m.off_times.is_empty() {
        return;
    }
    h.push_str("\n<h2>Which shape loses data</h2>\n");
    if !m.faults.is_empty() {
        let rows: Vec<(String, FaultTotals)> = m.faults.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        table(h, "fault", &rows);
        h.push_str(&bars("Cycles with findings, per fault", &rows));
    }
    if !m.off_times.is_empty() {
        let rows = off_time_rows(&m.off_times);
        table(h, "off time", &rows);
        h.push_str(&bars("Cycles with findings, per off time", &rows));
    }
    if !m.fault_off_times.is_empty() {
        h.push_str("<p>A link reset's off time is how long it holds the link down (a port pull, PERST#, the wait between a remove and its rescan).</p>\n");
        let rows: Vec<(String, FaultTotals)> =
            m.fault_off_times.iter().map(|((fault, ms), t)| (format!("{fault}, {ms} ms"), t.clone())).collect();
        table(h, "fault, off time", &rows);
        h.push_str(&bars("Cycles with findings, per fault and off time", &rows));
    }
}

/// One row per off time, or per power-of-two group of them when there are many.
fn off_time_rows(off: &BTreeMap<u64, FaultTotals>) -> Vec<(String, FaultTotals)> {
    if off.len() <= MAX_ROWS {
        return off.iter().map(|(ms, t)| (format!("{ms} ms"), t.clone())).collect();
    }
    let mut groups: BTreeMap<u32, FaultTotals> = BTreeMap::new();
    for (ms, t) in off {
        let g = groups.entry(ms.max(&1).ilog2()).or_default();
        g.cycles += t.cycles;
        g.clean += t.clean;
        g.findings += t.findings;
        g.error += t.error;
        g.ready_n += t.ready_n;
        g.ready_sum_us = g.ready_sum_us.saturating_add(t.ready_sum_us);
        g.ready_max_us = g.ready_max_us.max(t.ready_max_us);
    }
    groups.into_iter().map(|(k, t)| (format!("{}-{} ms", 1u64 << k, (1u64 << (k + 1)) - 1), t)).collect()
}

/// A time to ready, in the unit that shows it.
fn ms(us: u64) -> String {
    if us < 1000 {
        format!("{us} µs")
    } else {
        format!("{:.1} ms", us as f64 / 1000.0)
    }
}

fn table(h: &mut String, what: &str, rows: &[(String, FaultTotals)]) {
    let _ = writeln!(
        h,
        "<table class=\"shapes\"><tr><th>{}</th><th>cycles</th><th>clean</th><th>with findings</th><th>error</th>\
         <th>share with findings</th><th>time to ready, mean</th><th>longest</th></tr>",
        esc(what)
    );
    for (name, t) in rows {
        let share = if t.cycles == 0 { 0.0 } else { 100.0 * f64::from(t.findings) / f64::from(t.cycles) };
        let mean = t.ready_mean_us().map_or("-".into(), ms);
        let max = if t.ready_n > 0 { ms(t.ready_max_us) } else { "-".into() };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{share:.0}%</td><td class=\"n\">{mean}</td><td class=\"n\">{max}</td></tr>",
            esc(name),
            t.cycles,
            t.clean,
            t.findings,
            t.error
        );
    }
    h.push_str("</table>\n");
}

/// A horizontal bar per row: the share of its cycles with findings, labelled `k of n`.
fn bars(title: &str, rows: &[(String, FaultTotals)]) -> String {
    const W: f64 = 640.0;
    const LABEL: f64 = 200.0;
    const BAR: f64 = 18.0;
    const GAP: f64 = 6.0;
    const TOP: f64 = 28.0;
    let height = TOP + rows.len() as f64 * (BAR + GAP) + 24.0;
    let span = W - LABEL - 90.0;
    let mut s = format!(
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\">\
         <text class=\"ct\" x=\"0\" y=\"16\">{}</text>",
        esc(title)
    );
    for (i, (name, t)) in rows.iter().enumerate() {
        let y = TOP + i as f64 * (BAR + GAP);
        let share = if t.cycles == 0 { 0.0 } else { f64::from(t.findings) / f64::from(t.cycles) };
        let color = if t.findings == 0 { "#27ae60" } else { "#c0392b" };
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text><rect x=\"{LABEL}\" y=\"{y:.1}\" width=\"{span:.1}\" height=\"{BAR}\" fill=\"#eee\"/>\
             <rect x=\"{LABEL}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{} of {}</text>",
            LABEL - 6.0,
            y + BAR - 5.0,
            esc(name),
            (share * span).max(if t.findings > 0 { 2.0 } else { 0.0 }),
            LABEL + span + 6.0,
            y + BAR - 5.0,
            t.findings,
            t.cycles
        );
    }
    let axis = TOP + rows.len() as f64 * (BAR + GAP) + 14.0;
    let _ = writeln!(
        s,
        "<text x=\"{LABEL}\" y=\"{axis:.1}\">0%</text><text x=\"{:.1}\" y=\"{axis:.1}\" text-anchor=\"end\">100% of the cycles</text></svg>",
        LABEL + span
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(cycles: u32, findings: u32, ready: &[u64]) -> FaultTotals {
        let mut f = FaultTotals::default();
        for i in 0..cycles {
            let v = if i < findings { crate::events::Verdict::Findings } else { crate::events::Verdict::Clean };
            f.add(v, ready.get(i as usize).copied());
        }
        f
    }

    #[test]
    fn each_shape_gets_its_row_and_bar_and_many_off_times_are_grouped() {
        let mut m = RunModel::default();
        m.faults.insert("power-cut".into(), t(10, 0, &[1000, 3000]));
        m.faults.insert("power-cut+1-before-ready<x>".into(), t(10, 4, &[]));
        let mut h = String::new();
        section(&mut h, &m);
        assert!(h.contains("<td>power-cut</td><td class=\"n\">10</td><td class=\"n\">10</td><td class=\"n\">0</td>"), "{h}");
        assert!(h.contains("<td class=\"n\">2.0 ms</td><td class=\"n\">3.0 ms</td>"), "mean and longest time to ready: {h}");
        assert!(h.contains("power-cut+1-before-ready&lt;x&gt;") && !h.contains("<x>"), "escaped: {h}");
        assert!(h.contains(">4 of 10</text>") && h.contains("40%"), "{h}");
        assert!(!h.contains("per off time"));
        let mut m = RunModel::default();
        for ms in 1..=40u64 {
            m.off_times.insert(ms, t(1, u32::from(ms < 4), &[]));
        }
        let rows = off_time_rows(&m.off_times);
        let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["1-1 ms", "2-3 ms", "4-7 ms", "8-15 ms", "16-31 ms", "32-63 ms"]);
        assert_eq!((rows[1].1.cycles, rows[1].1.findings, rows[5].1.cycles), (2, 2, 9));
        let mut h = String::new();
        section(&mut h, &m);
        assert!(h.contains("Cycles with findings, per off time") && h.contains("<td>2-3 ms</td>"), "{h}");
        let mut h = String::new();
        section(&mut h, &RunModel::default());
        assert!(h.is_empty(), "nothing to tell apart: no section");
    }
}
