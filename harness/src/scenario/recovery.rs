//! `recovery` of a `power_cut` fault: cut again while the drive recovers from the cut, before
//! the one verify of the cycle.
//!
//! A drive replays its journal, folds its power-fail dump and recharges its hold-up
//! capacitors after power returns. A second cut then finds it with half-written metadata and
//! empty capacitors, which one clean cut per cycle never tries (US 11205496 claims
//! interruptions "during initialisation"; vendors' PLP plans call a cut while firmware loads
//! the most severe case). `cuts` above 1 is N cuts before one verify.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The most cuts after the cycle's own.
pub const MAX_RECOVERY_CUTS: u32 = 100;
/// The latest moment a recovery cut may be drawn at, ms after power returns (or after ready).
pub const MAX_WITHIN_MS: u64 = 600_000;
/// Salt of a recovery cut's moment (beside the fault mix's and the off time's).
const RECOVERY_SALT: u64 = 0x2ec0_0000_0000_0005;

/// When the cuts during recovery come.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAt {
    /// At a moment drawn after the power returns, without waiting for the drive to answer:
    /// while it boots, enumerates and replays.
    #[default]
    BeforeReady,
    /// At a moment drawn after the drive answers a read again: while it still recovers in
    /// the background (the dump folded back, the capacitors recharging).
    AfterReady,
}

impl RecoveryAt {
    pub fn label(self) -> &'static str {
        match self {
            RecoveryAt::BeforeReady => "before-ready",
            RecoveryAt::AfterReady => "after-ready",
        }
    }
}

/// Cuts while the drive recovers: after the cycle's cut and power-on, `cuts` more, each at a
/// moment drawn from the run's seed within `within_ms` of the power returning (`before_ready`)
/// or of the drive answering again (`after_ready`), each held off for the cycle's off time;
/// then the power stays on and the cycle verifies once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecoveryCuts {
    /// Cuts after the cycle's own, 1 to 100 (2 or more: N cuts before one verify).
    /// Default: 1.
    #[serde(default = "one")]
    pub cuts: u32,
    /// `before_ready` or `after_ready`. Default: `before_ready`.
    #[serde(default)]
    pub at: RecoveryAt,
    /// Each cut's moment is drawn uniformly from 0 to this many ms (both included) after the
    /// power returns or the drive answers, 0 to 600000. Default: 20.
    #[serde(default = "default_within_ms")]
    pub within_ms: u64,
}

fn one() -> u32 {
    1
}

fn default_within_ms() -> u64 {
    20
}

impl RecoveryCuts {
    /// When recovery cut `k` (from 1) of cycle `cycle` comes, after the power returns or the
    /// drive answers, in a run of seed `seed`.
    pub fn delay(&self, seed: u64, cycle: u32, k: u32) -> Duration {
        let mut rng = crate::rng::WyRand::for_cycle(seed, RECOVERY_SALT ^ u64::from(k).wrapping_mul(0x100_0000_01b3), cycle);
        Duration::from_millis(rng.below(self.within_ms.saturating_add(1)))
    }

    /// The fault as reports name it: `power-cut+1-before-ready`.
    pub fn label(&self) -> String {
        format!("power-cut+{}-{}", self.cuts, self.at.label())
    }

    /// What is wrong with it, if anything: `(where, what)`, `where` below the fault's
    /// `recovery`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !(1..=MAX_RECOVERY_CUTS).contains(&self.cuts) {
            return Err(("cuts", format!("{}: expected 1 to {MAX_RECOVERY_CUTS}", self.cuts)));
        }
        if self.within_ms > MAX_WITHIN_MS {
            return Err(("within_ms", format!("{}: expected 0 to {MAX_WITHIN_MS}", self.within_ms)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cut_draws_its_own_moment_from_the_seed_within_the_window() {
        let r = RecoveryCuts { cuts: 3, at: RecoveryAt::BeforeReady, within_ms: 50 };
        let draw = |seed| -> Vec<u128> {
            (1..=200).flat_map(|c| (1..=3).map(move |k| (c, k))).map(|(c, k)| r.delay(seed, c, k).as_millis()).collect()
        };
        let a = draw(3);
        assert_eq!(a, draw(3), "the same seed draws the same moments");
        assert_ne!(a, draw(4), "another seed, other moments");
        assert!(a.iter().all(|ms| *ms <= 50));
        assert!(a.contains(&0) && a.contains(&50), "both ends are drawn");
        // The cuts of one cycle are not one moment repeated.
        assert!((1..=200).any(|c| r.delay(3, c, 1) != r.delay(3, c, 2)));
        assert_eq!(RecoveryCuts { within_ms: 0, ..r }.delay(9, 1, 1), Duration::ZERO);
    }

    #[test]
    fn what_is_wrong_is_named_with_where() {
        let ok = RecoveryCuts { cuts: 1, at: RecoveryAt::AfterReady, within_ms: 0 };
        assert!(ok.check().is_ok());
        assert_eq!(RecoveryCuts { cuts: 0, ..ok }.check().unwrap_err(), ("cuts", "0: expected 1 to 100".into()));
        assert_eq!(RecoveryCuts { cuts: 101, ..ok }.check().unwrap_err().0, "cuts");
        assert_eq!(RecoveryCuts { within_ms: 600_001, ..ok }.check().unwrap_err(), ("within_ms", "600001: expected 0 to 600000".into()));
        assert_eq!(RecoveryCuts { cuts: 2, ..ok }.label(), "power-cut+2-after-ready");
    }

    #[test]
    fn it_reads_with_its_defaults_and_refuses_unknown_fields() {
        let r: RecoveryCuts = toml::from_str("").unwrap();
        assert_eq!(r, RecoveryCuts { cuts: 1, at: RecoveryAt::BeforeReady, within_ms: 20 });
        let r: RecoveryCuts = toml::from_str("cuts = 3\nat = \"after_ready\"\nwithin_ms = 5").unwrap();
        assert_eq!(r, RecoveryCuts { cuts: 3, at: RecoveryAt::AfterReady, within_ms: 5 });
        let e = toml::from_str::<RecoveryCuts>("count = 3").unwrap_err().to_string();
        assert!(e.contains("unknown field `count`"), "{e}");
        let e = toml::from_str::<RecoveryCuts>("at = \"during\"").unwrap_err().to_string();
        assert!(e.contains("before_ready"), "{e}");
    }
}
