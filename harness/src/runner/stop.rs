//! The stop policy: one function from what a cycle came to, to going on or stopping with a
//! reason; and suspension, when the run directory runs short of space.

use crate::scenario::{OnEvent, StopPolicy};
use std::path::Path;

/// Free space the run directory's filesystem must keep before a cycle starts (besides what a
/// simulated drive's media image may still grow by): the ledger, the event log and the
/// reports of thousands of cycles fit in far less.
pub const MIN_FREE_BYTES: u64 = 64 << 20;

/// The controller step that failed in a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerStep {
    /// Setting the pin-mate step before the cycle.
    MateStep,
    /// The cut (or link reset) command.
    Cut,
    /// The cut happened by the controller's word, but could not be confirmed.
    Unconfirmed,
    /// Power on after the off time.
    PowerOn,
}

/// What a cycle came to, as far as the stop policy cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleEnd {
    pub cycle: u32,
    pub controller_failure: Option<ControllerStep>,
    /// Harness errors in the cycle (a controller failure counts as one).
    pub errors: u32,
    /// The device did not come back.
    pub dead_device: bool,
    /// A host a host power cut hit did not come back.
    pub dead_host: bool,
    /// Findings not seen in an earlier cycle.
    pub new_findings: usize,
}

/// A cycle's verdict, the same for one port or many: findings (new ones, or health
/// anomalies) first, since they are data about the drive whatever else went wrong; then a
/// harness error (a fault that failed or was not confirmed, a port that could not be
/// verified), since such a cycle tested less than it should; then clean.
pub fn verdict(end: &CycleEnd, anomalies: usize) -> crate::events::Verdict {
    use crate::events::Verdict;
    if end.new_findings > 0 || anomalies > 0 {
        Verdict::Findings
    } else if end.errors > 0 || end.controller_failure.is_some() {
        Verdict::Error
    } else {
        Verdict::Clean
    }
}

/// What the run does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    GoOn,
    /// The run ends early, for this reason.
    Stop(String),
    /// `stop.on_dead_device = "continue"`: cut power once more and wait once more.
    PowerCycleDeadDevice,
}

/// Counts the cycles in a row that ended with a harness error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorStreak(pub u32);

/// Decides after each cycle; `streak` is updated first (a cycle with errors extends it, a
/// clean one resets it). Precedence: a controller failure under `on_controller_failure =
/// "stop"`, then too many harness errors in a row, then a dead device, then new findings.
pub fn decide(policy: &StopPolicy, streak: &mut ErrorStreak, end: &CycleEnd) -> Next {
    streak.0 = if end.errors > 0 || end.controller_failure.is_some() { streak.0 + 1 } else { 0 };
    let cycle = end.cycle;
    if let (Some(step), OnEvent::Stop) = (end.controller_failure, policy.on_controller_failure) {
        let what = match step {
            ControllerStep::MateStep | ControllerStep::Cut => "controller failure",
            ControllerStep::Unconfirmed => "the cut was not confirmed",
            ControllerStep::PowerOn => "power could not be restored",
        };
        return Next::Stop(format!("cycle {cycle}: {what} (stop.on_controller_failure = \"stop\")"));
    }
    if streak.0 >= policy.max_consecutive_harness_errors {
        return Next::Stop(format!("{} cycles in a row ended by a harness error", streak.0));
    }
    if end.dead_device {
        return match policy.on_dead_device {
            OnEvent::Stop => Next::Stop(format!("cycle {cycle}: the device did not come back (stop.on_dead_device = \"stop\")")),
            OnEvent::Continue => Next::PowerCycleDeadDevice,
        };
    }
    if end.dead_host {
        return match policy.on_dead_host {
            OnEvent::Stop => Next::Stop(format!("cycle {cycle}: a host did not come back (stop.on_dead_host = \"stop\")")),
            OnEvent::Continue => Next::PowerCycleDeadDevice,
        };
    }
    if end.new_findings > 0 && policy.on_finding == OnEvent::Stop {
        return Next::Stop(format!("cycle {cycle}: findings (stop.on_finding = \"stop\")"));
    }
    Next::GoOn
}

/// Why the run directory cannot take another cycle: too little free space for the run's own
/// files plus `growth_bytes` (what a simulated drive's media image may still grow by);
/// `None`: enough, or the free space cannot be read.
pub fn short_of_space(run_dir: &Path, growth_bytes: u64) -> Option<String> {
    let free = faultline_drivers::available_bytes(run_dir).ok()?;
    let need = MIN_FREE_BYTES + growth_bytes;
    (free < need).then(|| {
        format!(
            "the run directory {} has {} MiB free, and a cycle needs {} MiB there (the ledger, event log and reports{}): \
             the run is suspended; free some space and `faultline resume {}` takes it up again",
            run_dir.display(),
            free >> 20,
            need.div_ceil(1 << 20),
            if growth_bytes > 0 { ", and what the simulated drive's media image may still grow by" } else { "" },
            run_dir.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(on: OnEvent) -> StopPolicy {
        StopPolicy { on_finding: on, on_dead_device: on, on_dead_host: on, on_controller_failure: on, max_consecutive_harness_errors: 3 }
    }

    #[test]
    fn stop_policy_precedence_and_reasons() {
        let stop = policy(OnEvent::Stop);
        let mut s = ErrorStreak::default();
        let e = |f: fn(&mut CycleEnd)| {
            let mut c = CycleEnd { cycle: 4, ..CycleEnd::default() };
            f(&mut c);
            c
        };
        assert_eq!(decide(&stop, &mut s, &e(|_| {})), Next::GoOn);
        let both = e(|c| {
            c.controller_failure = Some(ControllerStep::Unconfirmed);
            c.dead_device = true;
            c.new_findings = 2;
        });
        assert_eq!(
            decide(&stop, &mut s, &both),
            Next::Stop("cycle 4: the cut was not confirmed (stop.on_controller_failure = \"stop\")".into()),
            "a controller failure comes first"
        );
        assert_eq!(
            decide(&stop, &mut s, &e(|c| c.dead_device = true)),
            Next::Stop("cycle 4: the device did not come back (stop.on_dead_device = \"stop\")".into())
        );
        assert_eq!(decide(&stop, &mut s, &e(|c| c.new_findings = 1)), Next::Stop("cycle 4: findings (stop.on_finding = \"stop\")".into()));
        let go = policy(OnEvent::Continue);
        assert_eq!(decide(&go, &mut s, &e(|c| c.dead_device = true)), Next::PowerCycleDeadDevice);
        assert_eq!(decide(&go, &mut s, &e(|c| c.new_findings = 1)), Next::GoOn);
        // A dead host: its own policy, which power-cycles the host (the cutter is aimed at it).
        assert_eq!(
            decide(&stop, &mut s, &e(|c| c.dead_host = true)),
            Next::Stop("cycle 4: a host did not come back (stop.on_dead_host = \"stop\")".into())
        );
        assert_eq!(decide(&go, &mut s, &e(|c| c.dead_host = true)), Next::PowerCycleDeadDevice);
    }

    #[test]
    fn stop_policy_counts_harness_errors_in_a_row() {
        let go = policy(OnEvent::Continue);
        let mut s = ErrorStreak::default();
        let failed = CycleEnd { cycle: 1, controller_failure: Some(ControllerStep::Cut), errors: 1, ..CycleEnd::default() };
        let clean = CycleEnd { cycle: 1, ..CycleEnd::default() };
        assert_eq!(decide(&go, &mut s, &failed), Next::GoOn);
        assert_eq!(decide(&go, &mut s, &failed), Next::GoOn);
        assert_eq!(decide(&go, &mut s, &clean), Next::GoOn, "a clean cycle resets the streak");
        assert_eq!(s, ErrorStreak(0));
        decide(&go, &mut s, &failed);
        decide(&go, &mut s, &failed);
        assert_eq!(decide(&go, &mut s, &failed), Next::Stop("3 cycles in a row ended by a harness error".into()));
    }
}
