//! Two small chart drawers for the HTML report, as inline SVG text: a histogram and an x/y
//! chart (lines or points). No scripts, no fonts or styles fetched: the page must open
//! offline, in a lab, years later. Every label is escaped (`escape.rs`).

use super::escape::esc;
use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 44.0;
const TICKS: usize = 4;

/// One set of points on an x/y chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
    /// Joined by a line (else drawn as dots).
    pub line: bool,
}

/// A tick label: integers as integers, small values with a few significant digits.
fn num(v: f64) -> String {
    if (v == v.trunc() && v.abs() < 1e15) || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// The range to draw for values in `[lo, hi]` (never empty).
fn span(lo: f64, hi: f64) -> (f64, f64) {
    if hi > lo {
        (lo, hi)
    } else {
        (lo - 1.0, hi + 1.0)
    }
}

fn frame(svg: &mut String, title: &str, x_label: &str, y_label: &str, x: (f64, f64), y: (f64, f64)) {
    let _ = write!(
        svg,
        "<svg role=\"img\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" class=\"chart\">\
         <title>{t}</title><text x=\"{cx}\" y=\"18\" text-anchor=\"middle\" class=\"ct\">{t}</text>",
        t = esc(title),
        cx = W / 2.0
    );
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let _ = write!(svg, "<path d=\"M{x0} {y1}V{y0}H{x1}\" class=\"axis\"/>");
    for i in 0..=TICKS {
        let f = i as f64 / TICKS as f64;
        let (px, py) = (x0 + f * (x1 - x0), y0 - f * (y0 - y1));
        let (vx, vy) = (x.0 + f * (x.1 - x.0), y.0 + f * (y.1 - y.0));
        let _ = write!(
            svg,
            "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\
             <path d=\"M{x0} {py:.1}H{x1}\" class=\"grid\"/>",
            y0 + 14.0,
            num(vx),
            x0 - 4.0,
            py + 4.0,
            num(vy)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text x=\"12\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {:.1})\">{}</text>",
        (x0 + x1) / 2.0,
        H - 8.0,
        esc(x_label),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(y_label)
    );
}

fn no_data(title: &str) -> String {
    format!(
        "<svg role=\"img\" viewBox=\"0 0 {W} 60\" width=\"{W}\" height=\"60\" class=\"chart\">\
         <title>{t}</title><text x=\"{cx}\" y=\"18\" text-anchor=\"middle\" class=\"ct\">{t}</text>\
         <text x=\"{cx}\" y=\"44\" text-anchor=\"middle\">not recorded in this run</text></svg>",
        t = esc(title),
        cx = W / 2.0
    )
}

/// A histogram of `values` in `bins` equal-width bins.
pub fn histogram(title: &str, x_label: &str, values: &[f64], bins: usize) -> String {
    let bins = bins.max(1);
    let Some((lo, hi)) = values.iter().fold(None, |r: Option<(f64, f64)>, &v| Some(r.map_or((v, v), |(a, b)| (a.min(v), b.max(v))))) else {
        return no_data(title);
    };
    let (lo, hi) = span(lo, hi);
    let mut counts = vec![0u64; bins];
    for &v in values {
        let i = (((v - lo) / (hi - lo)) * bins as f64) as usize;
        counts[i.min(bins - 1)] += 1;
    }
    let top = *counts.iter().max().expect("at least one bin") as f64;
    let mut svg = String::new();
    frame(&mut svg, title, x_label, "cycles", (lo, hi), (0.0, top));
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let bw = (x1 - x0) / bins as f64;
    for (i, &c) in counts.iter().enumerate() {
        let h = c as f64 / top * (y0 - y1);
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" class=\"bar\"><title>{c}</title></rect>",
            x0 + i as f64 * bw + 1.0,
            y0 - h,
            (bw - 2.0).max(1.0)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// An x/y chart of one or more series, with a legend.
pub fn xy_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let Some(&(fx, fy)) = all().next() else {
        return no_data(title);
    };
    let (mut xl, mut xh, mut yl, mut yh) = (fx, fx, fy.min(0.0), fy);
    for &(x, y) in all() {
        (xl, xh, yl, yh) = (xl.min(x), xh.max(x), yl.min(y), yh.max(y));
    }
    let (x, y) = (span(xl, xh), span(yl, yh));
    let mut svg = String::new();
    frame(&mut svg, title, x_label, y_label, x, y);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let px = |v: f64| x0 + (v - x.0) / (x.1 - x.0) * (x1 - x0);
    let py = |v: f64| y0 - (v - y.0) / (y.1 - y.0) * (y0 - y1);
    for (k, s) in series.iter().enumerate() {
        if s.line && s.points.len() > 1 {
            let d: Vec<String> = s.points.iter().map(|&(a, b)| format!("{:.1} {:.1}", px(a), py(b))).collect();
            let _ = write!(svg, "<path d=\"M{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>", d.join("L"), esc(s.color));
        } else {
            for &(a, b) in &s.points {
                let _ = write!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"><title>{}</title></circle>",
                    px(a),
                    py(b),
                    esc(s.color),
                    esc(s.name)
                );
            }
        }
        let ly = TOP + 4.0 + 14.0 * k as f64;
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x1 - 150.0,
            ly,
            x1 - 136.0,
            ly + 9.0,
            esc(s.name),
            c = esc(s.color)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_put_every_value_in_a_bin() {
        let svg = histogram("t", "x", &[0.0, 1.0, 1.0, 9.0, 10.0], 5);
        assert_eq!(svg.matches("<rect ").count(), 5);
        // Bins of width 2 from 0: [0, 2) holds 0, 1, 1; the last bin holds 9 and 10.
        assert!(svg.contains("<title>3</title></rect><rect") && svg.ends_with("<title>2</title></rect></svg>"), "{svg}");
        assert!(histogram("one value", "x", &[3.0], 4).contains("<rect "), "a single value still draws");
        assert!(histogram("none", "x", &[], 4).contains("not recorded"));
    }

    #[test]
    fn charts_draw_lines_dots_and_escape_labels() {
        let s = [
            Series { name: "a<b", color: "#123", points: vec![(1.0, 2.0), (2.0, 3.0)], line: true },
            Series { name: "dots", color: "red", points: vec![(1.5, 1.0)], line: false },
        ];
        let svg = xy_chart("c & d", "x", "y", &s);
        assert_eq!((svg.matches("<path d=\"M").count() > 1, svg.matches("<circle ").count()), (true, 1));
        assert!(svg.contains("a&lt;b") && svg.contains("c &amp; d") && !svg.contains("a<b"), "{svg}");
        assert!(xy_chart("empty", "x", "y", &[]).contains("not recorded"));
    }
}
