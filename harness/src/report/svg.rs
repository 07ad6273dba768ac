//! Two small chart drawers for the HTML report, as inline SVG text: a histogram and an x/y
//! chart (dots, lines, or min/max bands around a mean line for downsampled series). No
//! scripts, no fonts or styles fetched: the page must open offline, in a lab, years later.
//! Axes tick at round numbers in units that fit the range ([`super::ticks`]). Every label
//! is escaped (`escape.rs`). Tick labels carry the classes `xt` and `yt`.

use super::escape::esc;
use super::series::{Bucket, Dist};
use super::ticks::{axis_for, Axis, Scale, Unit};
use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 44.0;
/// Intervals an axis aims for.
const TICKS: usize = 5;

/// What an axis shows: its name and the unit its values arrive in.
#[derive(Clone, Copy)]
pub struct Quantity<'a> {
    pub label: &'a str,
    pub unit: Unit,
}

/// The values of one series.
pub enum Shape<'a> {
    /// Points drawn as dots.
    Dots(&'a [(f64, f64)]),
    /// A series over cycles: a line through the means, and where a bucket holds more than
    /// one cycle, a band from its min to its max.
    Band(&'a [Bucket]),
    /// Points joined by a line, broken where y is not finite (no value there).
    Line(&'a [(f64, f64)]),
}

/// A stretch of the x axis shaded behind the series (a fault window), with its name.
pub struct Shade<'a> {
    pub from: f64,
    pub to: f64,
    pub label: &'a str,
}

/// One series on an x/y chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub shape: Shape<'a>,
}

impl Series<'_> {
    /// Every (x, y) the series reaches.
    fn extent(&self) -> Vec<(f64, f64)> {
        match self.shape {
            Shape::Dots(p) => p.to_vec(),
            Shape::Line(p) => p.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect(),
            Shape::Band(b) => b.iter().flat_map(|b| [(b.x0 as f64, b.min), (b.x1 as f64, b.max)]).collect(),
        }
    }
}

/// An axis title with its unit: `latency (ms)`.
fn titled(q: Quantity, s: Scale) -> String {
    if s.name.is_empty() {
        q.label.to_string()
    } else {
        format!("{} ({})", q.label, s.name)
    }
}

/// The frame, ticks and axis titles; returns the maps from (scaled) values to pixels.
struct Frame {
    x: Axis,
    y: Axis,
    xs: Scale,
    ys: Scale,
}

impl Frame {
    fn px(&self, v: f64) -> f64 {
        let (x0, x1) = (LEFT, W - RIGHT);
        x0 + (v / self.xs.per - self.x.lo) / (self.x.hi - self.x.lo) * (x1 - x0)
    }

    fn py(&self, v: f64) -> f64 {
        let (y0, y1) = (H - BOTTOM, TOP);
        y0 - (v / self.ys.per - self.y.lo) / (self.y.hi - self.y.lo) * (y0 - y1)
    }
}

fn frame(svg: &mut String, title: &str, x: (Quantity, f64, f64), y: (Quantity, f64, f64)) -> Frame {
    let (xs, xa) = axis_for(x.0.unit, x.1, x.2, TICKS);
    let (ys, ya) = axis_for(y.0.unit, y.1, y.2, TICKS);
    let f = Frame { x: xa, y: ya, xs, ys };
    let _ = write!(
        svg,
        "<svg role=\"img\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" class=\"chart\">\
         <title>{t}</title><text x=\"{cx}\" y=\"18\" text-anchor=\"middle\" class=\"ct\">{t}</text>",
        t = esc(title),
        cx = W / 2.0
    );
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let _ = write!(svg, "<path d=\"M{x0} {y1}V{y0}H{x1}\" class=\"axis\"/>");
    for &t in &f.x.ticks {
        let px = f.px(t * f.xs.per);
        let _ = write!(svg, "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"xt\">{}</text>", y0 + 14.0, f.x.label(t));
    }
    for &t in &f.y.ticks {
        let py = f.py(t * f.ys.per);
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" class=\"yt\">{}</text><path d=\"M{x0} {py:.1}H{x1}\" class=\"grid\"/>",
            x0 - 4.0,
            py + 4.0,
            f.y.label(t)
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"xl\">{}</text><text x=\"12\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 12 {:.1})\" class=\"yl\">{}</text>",
        (x0 + x1) / 2.0,
        H - 8.0,
        esc(&titled(x.0, f.xs)),
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        esc(&titled(y.0, f.ys))
    );
    f
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

/// A histogram of the cycles' values of `x`, in about `bins` bins of a round width between
/// round ends.
pub fn histogram(title: &str, x: Quantity, d: &Dist, bins: usize) -> String {
    let Some((lo, hi)) = d.range() else {
        return no_data(title);
    };
    let (xs, xa) = axis_for(x.unit, lo as f64, hi as f64, TICKS);
    // Bins split each tick interval evenly, so bar edges meet the ticks.
    let intervals = xa.ticks.len() - 1;
    let per = (bins / intervals).max(1);
    let n = intervals * per;
    let counts = d.bins(xa.lo * xs.per, xa.hi * xs.per, n);
    let top = *counts.iter().max().expect("at least one bin") as f64;
    let mut svg = String::new();
    let f = frame(&mut svg, title, (x, xa.lo * xs.per, xa.hi * xs.per), (Quantity { label: "cycles", unit: Unit::Count }, 0.0, top));
    let bw = (W - RIGHT - LEFT) / n as f64;
    for (i, &c) in counts.iter().enumerate() {
        let y = f.py(c as f64);
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" class=\"bar\"><title>{c}</title></rect>",
            LEFT + i as f64 * bw + 1.0,
            (bw - 2.0).max(1.0),
            (H - BOTTOM - y).max(0.0)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// An x/y chart of one or more series, with a legend. The y axis starts at 0 unless a value
/// is negative.
pub fn xy_chart(title: &str, x: Quantity, y: Quantity, series: &[Series]) -> String {
    xy_chart_shaded(title, x, y, series, &[])
}

/// [`xy_chart`] with stretches of the x axis shaded behind the series (`rect.shade`, its
/// name as a tooltip and a label at its top); the x axis reaches every shade.
pub fn xy_chart_shaded(title: &str, x: Quantity, y: Quantity, series: &[Series], shades: &[Shade]) -> String {
    let pts: Vec<(f64, f64)> = series.iter().flat_map(Series::extent).collect();
    let Some(&(fx, fy)) = pts.first() else {
        return no_data(title);
    };
    let (mut xl, mut xh, mut yl, mut yh) = (fx, fx, fy.min(0.0), fy);
    for &(a, b) in &pts {
        (xl, xh, yl, yh) = (xl.min(a), xh.max(a), yl.min(b), yh.max(b));
    }
    for s in shades.iter().filter(|s| s.from.is_finite() && s.to.is_finite()) {
        (xl, xh) = (xl.min(s.from), xh.max(s.to));
    }
    let mut svg = String::new();
    let f = frame(&mut svg, title, (x, xl, xh), (y, yl, yh));
    for s in shades.iter().filter(|s| s.from.is_finite() && s.to.is_finite()) {
        shade(&mut svg, &f, s);
    }
    for (k, s) in series.iter().enumerate() {
        let c = esc(s.color);
        match s.shape {
            Shape::Dots(points) => dots(&mut svg, &f, &c, s.name, points),
            Shape::Band(buckets) => band(&mut svg, &f, &c, buckets),
            Shape::Line(points) => line(&mut svg, &f, &c, points),
        }
        legend(&mut svg, k, &c, s.name);
    }
    svg.push_str("</svg>");
    svg
}

/// A stretch of the x axis shaded, its label at its top.
fn shade(svg: &mut String, f: &Frame, s: &Shade) {
    let (a, b) = (f.px(s.from.min(s.to)), f.px(s.from.max(s.to)));
    let _ = write!(
        svg,
        "<rect x=\"{a:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f0a30a\" fill-opacity=\"0.2\" class=\"shade\"><title>{l}</title></rect>\
         <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#9a6a00\" class=\"sl\">{l}</text>",
        (b - a).max(1.0),
        H - BOTTOM - TOP,
        a + 3.0,
        TOP + 11.0,
        l = esc(s.label)
    );
}

/// A scatter series: one group, its name every dot's tooltip (written once).
fn dots(svg: &mut String, f: &Frame, c: &str, name: &str, points: &[(f64, f64)]) {
    let _ = write!(svg, "<g fill=\"{c}\" class=\"dots\"><title>{}</title>", esc(name));
    for &(a, b) in points {
        let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\"/>", f.px(a), f.py(b));
    }
    svg.push_str("</g>");
}

/// A bucketed series: the band from each bucket's min to its max, and the line of its means.
fn band(svg: &mut String, f: &Frame, c: &str, buckets: &[Bucket]) {
    let mid = |b: &Bucket| (b.x0 as f64 + b.x1 as f64) / 2.0;
    if buckets.iter().any(|b| b.n > 1) {
        let top = buckets.iter().map(|b| format!("{:.1} {:.1}", f.px(mid(b)), f.py(b.max)));
        let bottom = buckets.iter().rev().map(|b| format!("{:.1} {:.1}", f.px(mid(b)), f.py(b.min)));
        let d: Vec<String> = top.chain(bottom).collect();
        let _ = write!(svg, "<path d=\"M{}Z\" fill=\"{c}\" fill-opacity=\"0.25\" stroke=\"none\" class=\"band\"/>", d.join("L"));
    }
    if buckets.len() > 1 {
        let d: Vec<String> = buckets.iter().map(|b| format!("{:.1} {:.1}", f.px(mid(b)), f.py(b.mean()))).collect();
        let _ = write!(svg, "<path d=\"M{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" class=\"line\"/>", d.join("L"));
    } else if let Some(b) = buckets.first() {
        let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{c}\"/>", f.px(mid(b)), f.py(b.mean()));
    }
}

/// A line series, broken where a point is not finite (a lone point is a dot).
fn line(svg: &mut String, f: &Frame, c: &str, points: &[(f64, f64)]) {
    for run in points.split(|(a, b)| !(a.is_finite() && b.is_finite())).filter(|r| !r.is_empty()) {
        if let [(a, b)] = run {
            let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{c}\"/>", f.px(*a), f.py(*b));
        } else {
            let d: Vec<String> = run.iter().map(|&(a, b)| format!("{:.1} {:.1}", f.px(a), f.py(b))).collect();
            let _ = write!(svg, "<path d=\"M{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.5\" class=\"line\"/>", d.join("L"));
        }
    }
}

/// The `k`th series' entry in the legend.
fn legend(svg: &mut String, k: usize, c: &str, name: &str) {
    let ly = TOP + 4.0 + 14.0 * k as f64;
    let x1 = W - RIGHT;
    let _ = write!(
        svg,
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"legend\">{}</text>",
        x1 - 150.0,
        ly,
        x1 - 136.0,
        ly + 9.0,
        esc(name),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::series::Buckets;

    fn labels(svg: &str, class: &str) -> Vec<String> {
        let open = format!("class=\"{class}\">");
        svg.split(&open).skip(1).map(|s| s[..s.find('<').unwrap()].to_string()).collect()
    }

    #[test]
    fn histograms_put_every_value_in_a_bin_between_round_ticks() {
        let mut d = Dist::default();
        for v in [0, 1, 1, 9, 10] {
            d.push(v);
        }
        let svg = histogram("t", Quantity { label: "x", unit: Unit::Count }, &d, 5);
        assert_eq!(labels(&svg, "xt"), ["0", "2", "4", "6", "8", "10"], "{svg}");
        // Five bins of width 2 from 0: [0, 2) holds 0, 1, 1; the last bin holds 9 and 10.
        assert_eq!(svg.matches("<rect ").count(), 5);
        assert!(svg.contains("<title>3</title></rect><rect") && svg.ends_with("<title>2</title></rect></svg>"), "{svg}");
        let mut one = Dist::default();
        one.push(3);
        assert!(
            histogram("one value", Quantity { label: "x", unit: Unit::Count }, &one, 4).contains("<rect "),
            "a single value still draws"
        );
        assert!(histogram("none", Quantity { label: "x", unit: Unit::Count }, &Dist::default(), 4).contains("not recorded"));
    }

    #[test]
    fn times_read_in_a_unit_that_fits() {
        let mut d = Dist::default();
        for v in [1_200_000, 3_400_000, 5_000_000] {
            d.push(v);
        }
        let svg = histogram("ready", Quantity { label: "time to ready", unit: Unit::Nanos }, &d, 20);
        assert_eq!(labels(&svg, "xt"), ["1", "2", "3", "4", "5"], "{svg}");
        assert_eq!(labels(&svg, "xl"), ["time to ready (ms)"]);
    }

    #[test]
    fn lines_break_where_there_is_no_value_and_shades_widen_the_axis() {
        let pts = [(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 1.0), (4.0, f64::NAN), (5.0, 3.0), (6.0, 3.0)];
        let s = [Series { name: "p", color: "#123", shape: Shape::Line(&pts) }];
        let q = Quantity { label: "x", unit: Unit::Count };
        let shade = [Shade { from: 2.0, to: 12.0, label: "fault <window>" }];
        let svg = xy_chart_shaded("t", q, q, &s, &shade);
        assert_eq!((svg.matches("class=\"line\"").count(), svg.matches("<circle ").count()), (2, 1), "{svg}");
        assert_eq!(svg.matches("class=\"shade\"").count(), 1);
        assert!(svg.contains("<title>fault &lt;window&gt;</title>"), "{svg}");
        // The data end at 6; the shade at 12, so the axis runs to the round tick past it.
        assert_eq!(labels(&svg, "xt").last().map(String::as_str), Some("15"), "{svg}");
        // Without shades, the chart is the plain x/y chart.
        assert_eq!(xy_chart_shaded("t", q, q, &s, &[]), xy_chart("t", q, q, &s));
    }

    #[test]
    fn charts_draw_bands_dots_and_escape_labels() {
        let mut b = Buckets::new(2);
        for x in 1..=20 {
            b.push(x, x as f64 * 1e6);
        }
        let dots = [(1.5, 1e6)];
        let s = [
            Series { name: "a<b", color: "#123", shape: Shape::Band(b.buckets()) },
            Series { name: "dots", color: "red", shape: Shape::Dots(&dots) },
        ];
        let svg = xy_chart("c & d", Quantity { label: "cycle", unit: Unit::Count }, Quantity { label: "latency", unit: Unit::Nanos }, &s);
        assert_eq!(
            (svg.matches("class=\"band\"").count(), svg.matches("class=\"line\"").count(), svg.matches("<circle ").count()),
            (1, 1, 1)
        );
        assert_eq!(labels(&svg, "xt"), ["0", "5", "10", "15", "20"], "{svg}");
        assert_eq!(labels(&svg, "yt"), ["0", "5", "10", "15", "20"], "{svg}");
        assert_eq!(labels(&svg, "yl"), ["latency (ms)"]);
        assert!(svg.contains("a&lt;b") && svg.contains("c &amp; d") && !svg.contains("a<b"), "{svg}");
        let q = Quantity { label: "x", unit: Unit::Plain };
        assert!(xy_chart("empty", q, q, &[]).contains("not recorded"));
    }
}
