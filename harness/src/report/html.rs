//! `report.html`: one self-contained page: the verdict, findings per class, every finding
//! with its decoded expected and found identities, and charts drawn as inline SVG (time to
//! ready, cut points against the workload phase, throughput and latency over the run, SMART
//! counters over cycles). No scripts, no external fonts, styles or images: nothing is
//! fetched, so the page opens the same offline. Every text from the run is escaped.

use super::escape::esc;
use super::model::{describe, RunModel};
use super::svg::{histogram, xy_chart, Series};
use crate::events::Verdict;
use crate::verify::FindingClass;
use std::fmt::Write;

/// Findings listed in the table; the rest are counted (the event log has them all).
pub const MAX_FINDING_ROWS: usize = 2000;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}\
td.n{text-align:right}.verdict{font-size:1.4em;padding:.4em .8em;display:inline-block}\
.clean{background:#d9f2d9}.findings{background:#f8d0d0}.error{background:#f5e0a0}\
svg.chart{display:block;margin:1em 0;font-size:11px}svg .ct{font-size:13px;font-weight:600}\
svg .axis{fill:none;stroke:#444}svg .grid{stroke:#eee}svg .bar{fill:#4a78b5}";

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The text of `report.html`.
pub fn render(m: &RunModel) -> String {
    let mut h = String::new();
    let s = m.start.as_ref();
    let title = format!("faultline run {}", s.map_or("(no start recorded)", |s| s.run_id.as_str()));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(&title),
        esc(&title)
    );
    let verdict = m.verdict();
    let findings = m.findings().count();
    let text = match verdict {
        Verdict::Clean => "clean: no finding".to_string(),
        Verdict::Findings => format!("{findings} findings"),
        Verdict::Error => {
            format!("harness error ({} recorded){}", m.harness_errors(), if m.end.is_none() { "; the run did not end" } else { "" })
        }
    };
    let _ = writeln!(h, "<p class=\"verdict {}\">verdict: {}</p>", verdict.name(), esc(&text));

    h.push_str("<table>\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    };
    if let Some(s) = s {
        row("scenario", s.scenario.clone());
        row("target", s.target.clone());
        row("contract", s.contract.to_string());
        row("seed", s.seed.to_string());
        row("started", s.started_at.clone());
        row("cycles", format!("{} of {} planned", m.cycles.values().filter(|c| c.end.is_some()).count(), s.cycles_planned));
    }
    row("duration", format!("{:.1} s", m.last_t_ns as f64 / 1e9));
    if let Some(h) = super::summary::Stats::of(m.cycles.values().filter_map(|c| c.end.as_ref()?.harness_ns).collect()) {
        row(
            "harness time per cycle",
            format!(
                "{:.1} ms mean, {:.1} ms p99 (outside the workload, controller, off time, device waits and verification)",
                h.mean / 1e6,
                h.p99 as f64 / 1e6
            ),
        );
    }
    if !m.resumes.is_empty() {
        let list: Vec<String> = m.resumes.iter().map(|(at, c)| c.map_or(at.clone(), |c| format!("{at} (cycle {c} interrupted)"))).collect();
        row("resumed", format!("{} times after the harness died: {}", m.resumes.len(), list.join(", ")));
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Findings per class</h2>\n<table><tr><th>class</th><th>findings</th><th>cycles</th></tr>\n");
    for class in FindingClass::ALL {
        let n = m.findings().filter(|f| f.class == class).count();
        let cycles = m.cycles.values().filter(|c| c.findings.iter().any(|f| f.class == class)).count();
        let _ = writeln!(h, "<tr><td>{}</td><td class=\"n\">{n}</td><td class=\"n\">{cycles}</td></tr>", class.name());
    }
    let anomalies: usize = m.cycles.values().map(|c| c.anomalies.len()).sum();
    let _ = writeln!(h, "<tr><td>health anomaly</td><td class=\"n\">{anomalies}</td><td class=\"n\">{}</td></tr></table>", {
        m.cycles.values().filter(|c| !c.anomalies.is_empty()).count()
    });

    if findings > 0 {
        h.push_str("<h2>Findings</h2>\n<table><tr><th>cycle</th><th>class</th><th>byte</th><th>length</th><th>expected</th><th>found</th><th>detail</th></tr>\n");
        for f in m.findings().take(MAX_FINDING_ROWS) {
            let _ = writeln!(
                h,
                "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.cycle,
                f.class.name(),
                f.offset,
                f.length,
                esc(&describe(&f.expected)),
                esc(&describe(&f.found)),
                esc(&f.detail)
            );
        }
        h.push_str("</table>\n");
        if findings > MAX_FINDING_ROWS {
            let _ = writeln!(h, "<p>{} more findings: see events.jsonl.</p>", findings - MAX_FINDING_ROWS);
        }
    }
    let notes: Vec<String> = m
        .cycles
        .values()
        .flat_map(|c| c.anomalies.iter().map(move |a| format!("cycle {}: {}: {}", c.cycle, a.kind, a.detail)))
        .chain(m.run_errors.iter().map(|e| format!("harness error: {e}")))
        .chain(m.cycles.values().flat_map(|c| c.errors.iter().map(move |e| format!("cycle {}: harness error: {e}", c.cycle))))
        .collect();
    if !notes.is_empty() {
        h.push_str("<h2>Health anomalies and harness errors</h2>\n<ul>\n");
        for n in notes {
            let _ = writeln!(h, "<li>{}</li>", esc(&n));
        }
        h.push_str("</ul>\n");
    }

    h.push_str("<h2>Time to ready</h2>\n");
    let enumerate: Vec<f64> = m.cycles.values().filter_map(|c| c.enumerate_us).map(|u| u as f64 / 1e3).collect();
    let first_read: Vec<f64> = m.cycles.values().filter_map(|c| c.first_read_us).map(|u| u as f64 / 1e3).collect();
    h.push_str(&histogram("Power-on to enumeration", "milliseconds", &enumerate, 20));
    h.push_str(&histogram("Power-on to first good read", "milliseconds", &first_read, 20));

    h.push_str("\n<h2>Cut points</h2>\n");
    let (mut clean, mut bad) = (Vec::new(), Vec::new());
    for c in m.cycles.values() {
        if let Some(cut) = &c.cut {
            let p = (cut.phase_us as f64 / 1e3, cut.completions as f64);
            if c.findings.is_empty() {
                clean.push(p)
            } else {
                bad.push(p)
            }
        }
    }
    let phases: Vec<f64> = clean.iter().chain(&bad).map(|p| p.0).collect();
    h.push_str(&histogram("Cuts over the workload phase", "ms from workload start to cut", &phases, 20));
    h.push_str(&xy_chart(
        "Cut point against workload phase",
        "ms from workload start to cut",
        "completions before the cut",
        &[
            Series { name: "no new finding", color: "#4a78b5", points: clean, line: false },
            Series { name: "new findings", color: "#c0392b", points: bad, line: false },
        ],
    ));
    let at_risk: Vec<(f64, f64)> =
        m.cycles.values().filter_map(|c| Some((c.cycle as f64, c.cut.as_ref()?.bytes_at_risk as f64 / 1024.0))).collect();
    h.push_str(&xy_chart(
        "Bytes at risk at the cut",
        "cycle",
        "KiB in flight",
        &[Series { name: "in flight at the cut", color: "#8e44ad", points: at_risk, line: true }],
    ));

    h.push_str("\n<h2>Throughput and latency over the run</h2>\n");
    let tput: Vec<(f64, f64)> = m.cycles.values().filter_map(|c| Some((c.cycle as f64, c.throughput_mib_s()?))).collect();
    h.push_str(&xy_chart(
        "Write throughput",
        "cycle",
        "MiB/s",
        &[Series { name: "write MiB/s", color: "#27ae60", points: tput, line: true }],
    ));
    let lat = |f: fn(&super::CycleEnd) -> Option<u64>| -> Vec<(f64, f64)> {
        m.cycles.values().filter_map(|c| Some((c.cycle as f64, ms(f(c.end.as_ref()?)?)))).collect()
    };
    h.push_str(&xy_chart(
        "Write latency",
        "cycle",
        "milliseconds",
        &[
            Series { name: "p50", color: "#2980b9", points: lat(|e| e.latency_p50_ns), line: true },
            Series { name: "p99", color: "#d35400", points: lat(|e| e.latency_p99_ns), line: true },
        ],
    ));

    h.push_str("\n<h2>SMART counters over cycles</h2>\n");
    let smart = |f: fn(&crate::events::SmartFigures) -> u64| -> Vec<(f64, f64)> {
        m.cycles.values().filter_map(|c| Some((c.cycle as f64, f(c.smart.as_ref()?) as f64))).collect()
    };
    h.push_str(&xy_chart(
        "SMART counters",
        "cycle",
        "count",
        &[
            Series { name: "unsafe shutdowns", color: "#c0392b", points: smart(|s| s.unsafe_shutdowns), line: true },
            Series { name: "power cycles", color: "#2980b9", points: smart(|s| s.power_cycles), line: true },
            Series { name: "media errors", color: "#8e44ad", points: smart(|s| s.media_errors), line: true },
            Series { name: "error-log entries", color: "#7f8c8d", points: smart(|s| s.error_log_entries), line: true },
        ],
    ));
    h.push_str(
        "\n<p>Generated by faultline from events.jsonl; <code>faultline report RUN_DIR</code> rebuilds this page.</p>\n</body></html>\n",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn the_page_is_self_contained_escaped_and_charted() {
        let page = render(&RunModel::from_events(&testdata::run()));
        for bad in ["http://", "https://", "<script", "src=", "href=", "@import", "url("] {
            assert!(!page.contains(bad), "found {bad:?}");
        }
        assert!(page.contains("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; gone"));
        assert!(page.contains("verdict: 1 findings"));
        assert!(page.contains("write 42 (cycle 2, port 0), sector 1 of 8, for byte 16384"));
        assert!(page.contains("media_errors_grew"));
        assert!(page.matches("<svg ").count() >= 7, "every chart drawn");
        assert!(!page.contains("not recorded"), "the test run records every figure");
    }
}
