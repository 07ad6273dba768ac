//! `cycles.off_time_ms`: how long each cycle's fault holds the power off (or the link down),
//! one number for every cycle, a list swept in order, or a range each cycle draws from.
//!
//! A drive whose capacitors have not recharged, or whose rails have not drained, loses data
//! to an off time that a run of one fixed off time never tries; sweeping it finds the
//! shortest off time the drive survives.

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The longest off time, ms: an hour.
pub const MAX_OFF_TIME_MS: u64 = 3_600_000;
/// The most entries a sweep holds.
pub const MAX_SWEEP: usize = 10_000;
/// Salt of a cycle's draw from a range (beside the fault mix's own).
const OFF_TIME_SALT: u64 = 0x0ff7_0000_0000_0004;

/// How long power stays off after each cycle's cut, or the link down for the resets that have
/// a down phase, in ms: `3000` (every cycle), `[1, 10, 100, 1000]` (cycle 1 the first, in
/// order, starting over after the last), or `{ min = 1, max = 500 }` (each cycle draws from
/// the run's seed, uniformly, both ends included). Each from 1 to 3600000 (an hour).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum OffTime {
    /// Every cycle the same.
    Fixed(u64),
    /// One per cycle, in order, round again after the last.
    Sweep(Vec<u64>),
    /// Drawn per cycle from the run's seed, between `min` and `max` inclusive.
    Range { min: u64, max: u64 },
}

impl Default for OffTime {
    fn default() -> Self {
        OffTime::Fixed(3000)
    }
}

impl OffTime {
    /// Cycle `cycle`'s (from 1) off time, in a run of seed `seed`.
    pub fn at(&self, seed: u64, cycle: u32) -> Duration {
        Duration::from_millis(match self {
            OffTime::Fixed(ms) => *ms,
            OffTime::Sweep(list) if list.is_empty() => 0,
            OffTime::Sweep(list) => list[cycle.saturating_sub(1) as usize % list.len()],
            OffTime::Range { min, max } => {
                min + crate::rng::WyRand::for_cycle(seed, OFF_TIME_SALT, cycle).below(max.saturating_sub(*min).saturating_add(1))
            }
        })
    }

    /// Whether the off time changes from cycle to cycle (each cycle's is then recorded).
    pub fn varies(&self) -> bool {
        match self {
            OffTime::Fixed(_) => false,
            OffTime::Sweep(list) => list.windows(2).any(|w| w[0] != w[1]),
            OffTime::Range { min, max } => min != max,
        }
    }

    /// The shortest off time any cycle can get.
    pub fn shortest(&self) -> Duration {
        Duration::from_millis(match self {
            OffTime::Fixed(ms) => *ms,
            OffTime::Sweep(list) => list.iter().copied().min().unwrap_or(0),
            OffTime::Range { min, .. } => *min,
        })
    }

    /// The longest off time any cycle can get.
    pub fn longest(&self) -> Duration {
        Duration::from_millis(match self {
            OffTime::Fixed(ms) => *ms,
            OffTime::Sweep(list) => list.iter().copied().max().unwrap_or(0),
            OffTime::Range { max, .. } => *max,
        })
    }

    /// What is wrong with it, if anything: `(where, what)`, `where` below `cycles.off_time_ms`.
    pub fn check(&self) -> Result<(), (String, String)> {
        let in_range = |ms: u64| (1..=MAX_OFF_TIME_MS).contains(&ms);
        let out = |ms: u64| format!("{ms}: expected 1 to {MAX_OFF_TIME_MS} (one hour)");
        match self {
            OffTime::Fixed(ms) if !in_range(*ms) => Err((String::new(), out(*ms))),
            OffTime::Fixed(_) => Ok(()),
            OffTime::Sweep(list) if list.is_empty() => Err((String::new(), "an empty list: give at least one off time".into())),
            OffTime::Sweep(list) if list.len() > MAX_SWEEP => {
                Err((String::new(), format!("{} off times: at most {MAX_SWEEP} (the sweep starts over after the last)", list.len())))
            }
            OffTime::Sweep(list) => match list.iter().position(|ms| !in_range(*ms)) {
                Some(i) => Err((format!("[{i}]"), out(list[i]))),
                None => Ok(()),
            },
            OffTime::Range { min, .. } if !in_range(*min) => Err((".min".into(), out(*min))),
            OffTime::Range { max, .. } if !in_range(*max) => Err((".max".into(), out(*max))),
            OffTime::Range { min, max } if min > max => Err((String::new(), format!("min {min} is above max {max}"))),
            OffTime::Range { .. } => Ok(()),
        }
    }
}

impl<'de> Deserialize<'de> for OffTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OffTimeVisitor)
    }
}

/// Reads the three shapes, with an error that names them (serde's untagged enums only say
/// that nothing matched).
struct OffTimeVisitor;

impl<'de> Visitor<'de> for OffTimeVisitor {
    type Value = OffTime;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("milliseconds: a number, a list of numbers (swept in order), or { min = MS, max = MS } (drawn per cycle)")
    }

    fn visit_u64<E: de::Error>(self, ms: u64) -> Result<OffTime, E> {
        Ok(OffTime::Fixed(ms))
    }

    fn visit_i64<E: de::Error>(self, ms: i64) -> Result<OffTime, E> {
        u64::try_from(ms).map(OffTime::Fixed).map_err(|_| E::invalid_value(de::Unexpected::Signed(ms), &self))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OffTime, A::Error> {
        let mut list = Vec::new();
        while let Some(ms) = seq.next_element::<u64>()? {
            if list.len() == MAX_SWEEP {
                return Err(de::Error::custom(format!("more than {MAX_SWEEP} off times")));
            }
            list.push(ms);
        }
        Ok(OffTime::Sweep(list))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OffTime, A::Error> {
        let (mut min, mut max) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                "min" => &mut min,
                "max" => &mut max,
                _ => return Err(de::Error::unknown_field(&key, &["min", "max"])),
            };
            if slot.replace(map.next_value::<u64>()?).is_some() {
                return Err(de::Error::custom(format!("duplicate field `{key}`")));
            }
        }
        match (min, max) {
            (Some(min), Some(max)) => Ok(OffTime::Range { min, max }),
            (None, _) => Err(de::Error::missing_field("min")),
            (_, None) => Err(de::Error::missing_field("max")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_goes_in_order_and_starts_over() {
        let s = OffTime::Sweep(vec![1, 10, 100]);
        let got: Vec<u128> = (1..=7).map(|c| s.at(9, c).as_millis()).collect();
        assert_eq!(got, [1, 10, 100, 1, 10, 100, 1]);
        assert!(s.varies());
        assert_eq!((s.shortest(), s.longest()), (Duration::from_millis(1), Duration::from_millis(100)));
        assert!(!OffTime::Sweep(vec![5, 5]).varies());
    }

    #[test]
    fn a_range_is_drawn_from_the_seed_within_its_ends() {
        let r = OffTime::Range { min: 1, max: 20 };
        let a: Vec<Duration> = (1..=500).map(|c| r.at(7, c)).collect();
        let b: Vec<Duration> = (1..=500).map(|c| r.at(7, c)).collect();
        assert_eq!(a, b, "the same seed draws the same off times");
        assert!(a.iter().all(|d| (1..=20).contains(&d.as_millis())));
        // Both ends are drawn.
        assert!(a.iter().any(|d| d.as_millis() == 1) && a.iter().any(|d| d.as_millis() == 20));
        let other: Vec<Duration> = (1..=500).map(|c| r.at(8, c)).collect();
        assert_ne!(a, other, "another seed, other off times");
        assert_eq!(OffTime::Range { min: 4, max: 4 }.at(1, 3), Duration::from_millis(4));
    }

    #[test]
    fn what_is_wrong_is_named_with_where() {
        assert_eq!(OffTime::Fixed(0).check().unwrap_err().0, "");
        assert_eq!(OffTime::Sweep(vec![]).check().unwrap_err().1, "an empty list: give at least one off time");
        assert_eq!(
            OffTime::Sweep(vec![1, 3_600_001]).check().unwrap_err(),
            ("[1]".into(), "3600001: expected 1 to 3600000 (one hour)".into())
        );
        assert_eq!(OffTime::Range { min: 0, max: 5 }.check().unwrap_err().0, ".min");
        assert_eq!(OffTime::Range { min: 9, max: 5 }.check().unwrap_err().1, "min 9 is above max 5");
        assert!(OffTime::Range { min: 1, max: 1 }.check().is_ok());
    }

    #[test]
    fn the_three_shapes_read_and_write_back() {
        #[derive(Deserialize, Serialize)]
        struct T {
            off_time_ms: OffTime,
        }
        for (text, want) in [
            ("off_time_ms = 250", OffTime::Fixed(250)),
            ("off_time_ms = [1, 10, 100]", OffTime::Sweep(vec![1, 10, 100])),
            ("off_time_ms = { min = 1, max = 500 }", OffTime::Range { min: 1, max: 500 }),
        ] {
            let t: T = toml::from_str(text).unwrap();
            assert_eq!(t.off_time_ms, want, "{text}");
            let back: T = toml::from_str(&toml::to_string(&t).unwrap()).unwrap();
            assert_eq!(back.off_time_ms, want, "{text}");
        }
        for (text, says) in [
            ("off_time_ms = -5", "milliseconds: a number"),
            ("off_time_ms = \"fast\"", "milliseconds: a number"),
            ("off_time_ms = { min = 1 }", "missing field `max`"),
            ("off_time_ms = { min = 1, max = 2, mean = 3 }", "unknown field `mean`"),
            ("off_time_ms = [1, \"x\"]", "invalid type"),
        ] {
            let e = toml::from_str::<T>(text).err().unwrap_or_else(|| panic!("{text} read")).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
