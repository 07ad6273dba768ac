//! Exit codes: the one place where outcomes become numbers.

use faultline::events::Verdict;
use std::process::ExitCode;

/// How the process ends: 0 clean, 1 findings, 2 harness error (no verdict on the drive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Clean,
    Findings,
    HarnessError,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Clean => 0,
            Exit::Findings => 1,
            Exit::HarnessError => 2,
        }
    }

    /// The code a run's event log recorded when it ended (`run_ended.exit_code`).
    pub fn from_code(code: u8) -> Exit {
        match code {
            0 => Exit::Clean,
            1 => Exit::Findings,
            _ => Exit::HarnessError,
        }
    }
}

impl From<Verdict> for Exit {
    fn from(v: Verdict) -> Exit {
        match v {
            Verdict::Clean => Exit::Clean,
            Verdict::Findings => Exit::Findings,
            Verdict::Error => Exit::HarnessError,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_map_to_the_codes_the_event_log_records() {
        for v in [Verdict::Clean, Verdict::Findings, Verdict::Error] {
            assert_eq!(Exit::from(v).code(), v.exit_code());
            assert_eq!(Exit::from_code(v.exit_code()), Exit::from(v));
        }
    }
}
