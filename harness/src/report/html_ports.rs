//! The dual-port part of `report.html` (only for a run with `port_window` events), under the
//! run's table and above the findings per class: a table of
//! every port over the run, and the charted cycle ([`super::ports`]) as two charts, each
//! port's write throughput per bucket with the total of all ports as one more line (A, B and
//! A+B, as a dual-port test plan draws them), and each port's longest write latency per
//! bucket, both with the fault window (fault start to window end) shaded.

use super::escape::esc;
use super::model::{PortTotals, RunModel};
use super::ports::CycleChart;
use super::svg::{xy_chart_shaded, Quantity, Series, Shade, Shape};
use super::ticks::Unit;
use std::fmt::Write;

const COLORS: [&str; 8] = ["#2980b9", "#d35400", "#8e44ad", "#16a085", "#c0392b", "#7f8c8d", "#27ae60", "#b7950b"];
const TOTAL_COLOR: &str = "#222";
const TIME: Quantity = Quantity { label: "time from the baseline's start", unit: Unit::Nanos };

/// The port table and charts, if the run has ports.
pub fn section(h: &mut String, m: &RunModel) {
    if m.ports.is_empty() && m.port_charts.chart().is_none() {
        return;
    }
    table(h, m);
    if let Some(c) = m.port_charts.chart() {
        charts(h, c);
    }
}

fn ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "\u{2014}".to_string(), |r| format!("{r:.2}"))
}

fn row(h: &mut String, name: &str, p: &PortTotals) {
    let mb_s = (p.baseline_us > 0).then(|| p.baseline_bytes as f64 / p.baseline_us as f64);
    let stall = if p.cycles_judged > 0 { format!("{:.1}", p.max_stall_us as f64 / 1000.0) } else { "\u{2014}".to_string() };
    let _ = writeln!(
        h,
        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{stall}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
        esc(name),
        p.cycles_faulted,
        p.cycles_judged,
        p.cycles_disturbed,
        p.io_errors,
        ratio(p.min_throughput_ratio),
        ratio(p.max_p99_ratio),
        mb_s.map_or_else(|| "\u{2014}".to_string(), |v| format!("{v:.1}")),
        if p.cycles_disturbed > 0 { "yes" } else { "no" },
    );
}

fn table(h: &mut String, m: &RunModel) {
    h.push_str(
        "\n<h2>Ports</h2>\n<table class=\"ports\"><tr><th>port</th><th>cycles faulted</th><th>cycles judged</th>\
         <th>cycles disturbed</th><th>I/O errors</th><th>longest stall (ms)</th><th>lowest throughput ratio</th>\
         <th>highest p99 ratio</th><th>mean baseline MB/s</th><th>disturbed</th></tr>\n",
    );
    for (name, p) in &m.ports {
        row(h, name, p);
    }
    h.push_str("</table>\n");
    h.push_str(
        "<p class=\"note\">A port is judged in the cycles whose fault hit another port: its fault window against its baseline \
         (stall, throughput and p99 ratios, I/O errors), each against the scenario's budget.</p>\n",
    );
}

/// Each port's buckets on one grid from the chart's origin (a bucket without a completion
/// is 0 bytes), as (bytes, longest latency µs) per bucket.
fn grid(c: &CycleChart) -> Vec<Vec<(u64, u32)>> {
    let bucket = f64::from(c.bucket_ms.max(1));
    let offset = |start_ms: f64| (start_ms / bucket).round().max(0.0) as usize;
    let len = c.ports.iter().map(|p| offset(p.start_ms) + p.bytes.len().max(p.max_latency_us.len())).max().unwrap_or(0);
    c.ports
        .iter()
        .map(|p| {
            let o = offset(p.start_ms);
            (0..len)
                .map(|k| {
                    let i = k.wrapping_sub(o);
                    (p.bytes.get(i).copied().unwrap_or(0), p.max_latency_us.get(i).copied().unwrap_or(0))
                })
                .collect()
        })
        .collect()
}

fn charts(h: &mut String, c: &CycleChart) {
    let bucket_ms = f64::from(c.bucket_ms.max(1));
    let x = |k: usize| (k as f64 + 0.5) * bucket_ms * 1e6;
    // Bytes per bucket over the bucket's µs: MB/s.
    let mb_s = |bytes: u64| bytes as f64 / (bucket_ms * 1000.0);
    let g = grid(c);
    let len = g.first().map_or(0, Vec::len);
    let tput: Vec<Vec<(f64, f64)>> = g.iter().map(|p| p.iter().enumerate().map(|(k, &(b, _))| (x(k), mb_s(b))).collect()).collect();
    let total: Vec<(f64, f64)> = (0..len).map(|k| (x(k), mb_s(g.iter().map(|p| p[k].0).sum()))).collect();
    // No completion in a bucket: no latency to draw there.
    let lat: Vec<Vec<(f64, f64)>> = g
        .iter()
        .map(|p| p.iter().enumerate().map(|(k, &(b, l))| (x(k), if b == 0 && l == 0 { f64::NAN } else { f64::from(l) * 1000.0 })).collect())
        .collect();
    let names: Vec<String> = c.ports.iter().map(|p| if p.faulted { format!("{} (faulted)", p.name) } else { p.name.clone() }).collect();
    let total_name = c.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join("+");
    let shades = match (c.fault_ms, c.window_end_ms) {
        (Some(a), Some(b)) => vec![Shade { from: a * 1e6, to: b * 1e6, label: "fault window" }],
        _ => Vec::new(),
    };
    let mut series: Vec<Series> = tput
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (pts, name))| Series { name, color: COLORS[i % COLORS.len()], shape: Shape::Line(pts) })
        .collect();
    if c.ports.len() > 1 {
        series.push(Series { name: &total_name, color: TOTAL_COLOR, shape: Shape::Line(&total) });
    }
    let _ = writeln!(h, "\n<h2>Ports around the fault</h2>\n<p class=\"note\">Cycle {}: {}. {} ms buckets; the fault window (shaded) runs from the fault to the faulted port's return plus the settle time.</p>\n<div class=\"charts\">",
        c.cycle,
        if c.disturbed {
            let who: Vec<&str> = c.ports.iter().filter(|p| p.disturbed).map(|p| p.name.as_str()).collect();
            format!("the first cycle in which a port was disturbed ({})", esc(&who.join(", ")))
        } else {
            "no port was disturbed in the run; its first cycle".to_string()
        },
        c.bucket_ms
    );
    h.push_str(&xy_chart_shaded(
        &format!("Write throughput per port, cycle {}", c.cycle),
        TIME,
        Quantity { label: "MB/s", unit: Unit::Plain },
        &series,
        &shades,
    ));
    let series: Vec<Series> = lat
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (pts, name))| Series { name, color: COLORS[i % COLORS.len()], shape: Shape::Line(pts) })
        .collect();
    h.push_str(&xy_chart_shaded(
        &format!("Longest write latency per port, cycle {}", c.cycle),
        TIME,
        Quantity { label: "latency", unit: Unit::Nanos },
        &series,
        &shades,
    ));
    h.push_str("</div>\n");
}

#[cfg(test)]
mod tests {
    use crate::report::html::render;
    use crate::report::model::RunModel;
    use crate::report::testdata;

    #[test]
    fn a_dual_port_page_has_the_port_table_and_both_charts_of_the_disturbed_cycle() {
        let m = RunModel::from_events(&testdata::dual_run());
        let page = render(&m);
        let table = &page[page.find("<table class=\"ports\">").expect("a port table")..];
        let table = &table[..table.find("</table>").unwrap()];
        // A: faulted in cycles 1 and 3, judged in 2 (disturbed); B: faulted in 2, judged in 1 and 3.
        assert!(
            table.contains("<tr><td>A</td><td class=\"n\">2</td><td class=\"n\">1</td><td class=\"n\">1</td><td class=\"n\">0</td>"),
            "{table}"
        );
        assert!(
            table.contains("<td class=\"n\">0.40</td><td class=\"n\">150.00</td><td class=\"n\">200.0</td><td>yes</td></tr>"),
            "{table}"
        );
        assert!(table.contains("<tr><td>B</td><td class=\"n\">1</td><td class=\"n\">2</td><td class=\"n\">0</td>"), "{table}");
        assert!(table.ends_with("<td>no</td></tr>\n"), "{table}");
        assert!(page.contains("Cycle 2: the first cycle in which a port was disturbed (A)"), "{page}");
        for t in ["Write throughput per port, cycle 2", "Longest write latency per port, cycle 2"] {
            assert!(page.contains(&format!("<title>{t}</title>")), "{t}");
        }
        assert_eq!(page.matches("class=\"shade\"").count(), 2, "the fault window shaded on both charts");
        assert!(page.contains(">A+B</text>") && page.contains(">B (faulted)</text>"), "legend");
        // The ports' part heads the page, under the run's table: the first chart above the fold.
        assert!(page.find("<table class=\"run\">") < page.find("<h2>Ports</h2>"));
        assert!(page.find("<h2>Ports around the fault</h2>") < page.find("<h2>Findings per class</h2>"));
    }

    #[test]
    fn a_single_port_page_has_no_port_part() {
        let page = render(&RunModel::from_events(&testdata::run()));
        assert!(!page.contains("<h2>Ports") && !page.contains("class=\"shade\""), "{page}");
    }

    #[test]
    fn the_total_is_the_sum_of_the_ports_and_a_quiet_bucket_draws_no_latency() {
        let m = RunModel::from_events(&testdata::dual_run());
        let c = m.port_charts.chart().unwrap();
        let g = super::grid(c);
        assert_eq!((g.len(), g[0].len(), g[1].len()), (2, 41, 41), "B's short series padded to A's");
        // Bucket 20: A (judged, disturbed) frozen, B (faulted) gone.
        assert_eq!((g[0][20], g[1][20], g[0][5].0 + g[1][5].0), ((0, 0), (0, 0), 10_001_000));
    }
}
