//! Axis ticks at round numbers and units that fit the range, for the report's charts.
//!
//! A chart's values arrive in base units (nanoseconds, bytes, plain counts); [`Unit::fit`]
//! picks the scale that reads best for the axis' largest value (ns/µs/ms/s, B/KiB/MiB/GiB),
//! and [`Axis::nice`] lays ticks at 1, 2 or 5 × 10^k of that scale ("nice numbers",
//! Heckbert, *Graphics Gems*, 1990), widening the axis to the ticks around the data, so a
//! label never reads "33.8 cycles" or "0.005 milliseconds". Axes that count (cycles,
//! completions) take integer steps only. Hand-written: a dozen lines, where a plotting
//! crate would bring a renderer the self-contained page does not want.

/// What an axis measures, in the base unit the values arrive in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds: shown as ns, µs, ms or s.
    Nanos,
    /// Bytes: shown as B, KiB, MiB, GiB or TiB.
    Bytes,
    /// Things counted (cycles, completions): integer ticks, no unit.
    Count,
    /// A continuous figure in a unit of its own (MiB/s): no rescaling.
    Plain,
}

/// A unit as shown: its name and how many base units it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    pub name: &'static str,
    pub per: f64,
}

const TIME: [Scale; 4] =
    [Scale { name: "ns", per: 1.0 }, Scale { name: "µs", per: 1e3 }, Scale { name: "ms", per: 1e6 }, Scale { name: "s", per: 1e9 }];
const SIZE: [Scale; 5] = [
    Scale { name: "B", per: 1.0 },
    Scale { name: "KiB", per: 1024.0 },
    Scale { name: "MiB", per: 1_048_576.0 },
    Scale { name: "GiB", per: 1_073_741_824.0 },
    Scale { name: "TiB", per: 1_099_511_627_776.0 },
];

impl Unit {
    /// The largest scale in which `max_abs` (base units) is at least 1; the smallest scale
    /// for values below one base unit.
    pub fn fit(self, max_abs: f64) -> Scale {
        let scales: &[Scale] = match self {
            Unit::Nanos => &TIME,
            Unit::Bytes => &SIZE,
            Unit::Count | Unit::Plain => return Scale { name: "", per: 1.0 },
        };
        *scales.iter().rev().find(|s| max_abs >= s.per).unwrap_or(&scales[0])
    }

    fn integer(self) -> bool {
        matches!(self, Unit::Count)
    }
}

/// An axis: its ends (ticks themselves) and the ticks between, in the scale's units.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub step: f64,
    /// Decimals a label needs to show `step` exactly.
    pub decimals: usize,
    pub ticks: Vec<f64>,
}

/// The round step (1, 2 or 5 × 10^k) closest above `raw`, and its decimals.
pub fn nice_step(raw: f64) -> (f64, usize) {
    let raw = if raw.is_finite() && raw > 0.0 { raw } else { 1.0 };
    let k = raw.log10().floor() as i32;
    let base = 10f64.powi(k);
    // `raw / base` is in [1, 10); rounding error can put it a hair outside.
    let m = raw / base;
    let (mantissa, k) = match m {
        m if m <= 1.0 + 1e-9 => (1.0, k),
        m if m <= 2.0 + 1e-9 => (2.0, k),
        m if m <= 5.0 + 1e-9 => (5.0, k),
        _ => (1.0, k + 1),
    };
    let step = mantissa * 10f64.powi(k);
    (step, usize::try_from(-k).unwrap_or(0))
}

impl Axis {
    /// Ticks over `[lo, hi]` (scaled values), about `target` intervals (at least 1), each a
    /// round step; integer steps when `integer`. An empty or inverted range is widened.
    pub fn nice(lo: f64, hi: f64, target: usize, integer: bool) -> Axis {
        let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
            (true, true) if hi > lo => (lo, hi),
            (true, true) if lo == 0.0 => (0.0, 1.0),
            (true, true) => (lo - lo.abs() * 0.5, lo + lo.abs() * 0.5),
            _ => (0.0, 1.0),
        };
        let (mut step, mut decimals) = nice_step((hi - lo) / target.max(1) as f64);
        if integer && step < 1.0 {
            (step, decimals) = (1.0, 0);
        }
        // Work in whole steps so that ticks are exact multiples of `step`.
        let first = (lo / step + 1e-9).floor();
        let last = (hi / step - 1e-9).ceil().max(first + 1.0);
        let ticks = (0..=(last - first) as u64).map(|i| round_to((first + i as f64) * step, decimals)).collect::<Vec<_>>();
        Axis { lo: ticks[0], hi: ticks[ticks.len() - 1], step, decimals, ticks }
    }

    /// A tick's label: exactly as many decimals as the step needs.
    pub fn label(&self, v: f64) -> String {
        let v = if v == 0.0 { 0.0 } else { v }; // never "-0"
        format!("{v:.*}", self.decimals)
    }
}

/// An axis for values `[lo, hi]` in base units of `unit`: the scale, and the ticks in it.
pub fn axis_for(unit: Unit, lo: f64, hi: f64, target: usize) -> (Scale, Axis) {
    let scale = unit.fit(lo.abs().max(hi.abs()));
    (scale, Axis::nice(lo / scale.per, hi / scale.per, target, unit.integer()))
}

fn round_to(v: f64, decimals: usize) -> f64 {
    let p = 10f64.powi(decimals.min(300) as i32);
    (v * p).round() / p
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_axes_of_today_read_round() {
        // The cycle axis of a 135-cycle run read 1, 34.5, 68, 101.5, 135 and "33.8 cycles".
        let a = Axis::nice(1.0, 135.0, 5, true);
        assert_eq!((a.ticks.clone(), a.label(a.ticks[1])), (vec![0.0, 50.0, 100.0, 150.0], "50".to_string()));
        let (s, a) = axis_for(Unit::Nanos, 0.0, 5_000.0, 5);
        assert_eq!((s.name, a.label(a.ticks[1])), ("µs", "1".to_string()));
        let (s, a) = axis_for(Unit::Nanos, 800_000.0, 5_600_000.0, 5);
        assert_eq!((s.name, a.ticks.clone()), ("ms", vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let (s, a) = axis_for(Unit::Bytes, 0.0, 390.0 * 1024.0, 4);
        assert_eq!((s.name, a.ticks.clone()), ("KiB", vec![0.0, 100.0, 200.0, 300.0, 400.0]));
        let (s, a) = axis_for(Unit::Count, 0.0, 3.0, 5);
        assert_eq!((s.name, a.ticks.clone()), ("", vec![0.0, 1.0, 2.0, 3.0]), "counts step by whole numbers");
        let a = Axis::nice(0.0, 0.03, 3, false);
        assert_eq!(a.ticks.iter().map(|&t| a.label(t)).collect::<Vec<_>>(), ["0.00", "0.01", "0.02", "0.03"]);
    }

    #[test]
    fn units_fit_the_range() {
        let names = |u: Unit, vs: &[f64]| vs.iter().map(|&v| u.fit(v).name).collect::<Vec<_>>();
        assert_eq!(names(Unit::Nanos, &[0.0, 999.0, 1e3, 4.5e6, 2e9, 5e12]), ["ns", "ns", "µs", "ms", "s", "s"]);
        assert_eq!(names(Unit::Bytes, &[512.0, 1024.0, 3e6, 2e9, 2e12]), ["B", "KiB", "MiB", "GiB", "TiB"]);
        assert_eq!(Unit::Count.fit(1e12).per, 1.0);
    }

    #[test]
    fn degenerate_ranges_still_make_an_axis() {
        for (lo, hi) in [(0.0, 0.0), (7.0, 7.0), (-3.0, -3.0), (5.0, 1.0), (f64::NAN, 1.0), (0.0, f64::INFINITY)] {
            let a = Axis::nice(lo, hi, 4, false);
            assert!(a.ticks.len() >= 2 && a.hi > a.lo, "{lo}..{hi}: {a:?}");
            if lo.is_finite() && hi.is_finite() && hi >= lo {
                assert!(a.lo <= lo && a.hi >= hi, "{lo}..{hi}: {a:?}");
            }
        }
    }

    fn is_round(step: f64) -> bool {
        let m = step / 10f64.powi(step.log10().floor() as i32);
        [1.0, 2.0, 5.0, 10.0].iter().any(|r| (m - r).abs() < 1e-6)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Ticks cover the data, step by a round number, stay within bounds in count, and
        /// their labels are distinct and parse back to the ticks.
        #[test]
        fn ticks_cover_the_range_are_round_and_few(
            lo in -1e9f64..1e9,
            width in 1e-3f64..1e12,
            target in 2usize..10,
            integer in any::<bool>(),
        ) {
            // Labels show a step's decimals; a range narrower than f64 resolves at `lo` is not
            // an axis anyone draws.
            prop_assume!(width > lo.abs() * 1e-6);
            let hi = lo + width;
            let a = Axis::nice(lo, hi, target, integer);
            prop_assert!(a.lo <= lo + a.step * 1e-6 && a.hi >= hi - a.step * 1e-6, "{:?} for {}..{}", a, lo, hi);
            prop_assert!(is_round(a.step), "step {}", a.step);
            prop_assert!(!integer || a.step.fract() == 0.0, "integer axis stepped by {}", a.step);
            prop_assert!(a.ticks.len() >= 2, "{:?}", a);
            prop_assert!(a.ticks.len() <= target + 3, "{} ticks for target {}", a.ticks.len(), target);
            let labels: Vec<String> = a.ticks.iter().map(|&t| a.label(t)).collect();
            for (t, l) in a.ticks.iter().zip(&labels) {
                let back: f64 = l.parse().unwrap();
                prop_assert!((back - t).abs() <= a.step * 1e-6, "{} labelled {}", t, l);
            }
            let mut dedup = labels.clone();
            dedup.dedup();
            prop_assert_eq!(dedup.len(), labels.len(), "labels repeat: {:?}", labels);
        }

        /// A fitted unit shows the largest value as at least 1 and, but for the largest
        /// unit, under the next unit's size.
        #[test]
        fn fitted_units_show_between_1_and_the_next_unit(v in 1f64..1e18, bytes in any::<bool>()) {
            let u = if bytes { Unit::Bytes } else { Unit::Nanos };
            let s = u.fit(v);
            let shown = v / s.per;
            prop_assert!(shown >= 1.0, "{} in {} is {}", v, s.name, shown);
            let top = if bytes { "TiB" } else { "s" };
            prop_assert!(s.name == top || shown < if bytes { 1024.0 } else { 1000.0 }, "{} in {} is {}", v, s.name, shown);
        }
    }
}
