//! A run directory's layout: every file name in it, and the lock held by the process running
//! the run.
//!
//! | file | what | written by |
//! |---|---|---|
//! | [`SCENARIO_FILE`] `scenario.toml` | the scenario as run, with its seed; `resume` reads it | `faultline run` (via `scenario.toml.tmp`, renamed) |
//! | [`LEDGER_FILE`] `ledger.fl` | what the durability contract made durable | [`crate::ledger`] |
//! | [`EVENTS_FILE`] `events.jsonl` | the one event stream | `report::jsonl` |
//! | [`SUMMARY_FILE`] `summary.json`, [`JUNIT_FILE`] `junit.xml`, [`HTML_FILE`] `report.html` | reports, rebuilt from the events by `faultline report` | [`crate::report`] |
//! | [`JUNIT_SPOOL_FILE`] `junit.cases.tmp` | `junit.xml`'s test cases while they are written, removed once it is | [`crate::report`] |
//! | [`LOCK_FILE`] `run.lock` | held (`flock`) while a process runs the run | [`lock`] |
//! | [`SIM_MEDIA_FILE`] `sim-drive.media`, [`SIM_STATE_FILE`] `sim-drive.json` | a simulated drive kept in the run directory (media image, state saved at each cut, via `sim-drive.json.tmp`) | `faultline_fixtures::SimDrive::persistent` |
//!
//! The simulated drive names its files itself: the fixtures crate cannot depend on this one,
//! so its constants (`MEDIA_FILE`, `STATE_FILE` in `fixtures/src/sim/store.rs`) are the source and
//! the two here mirror them; a test checks that they agree.
//!
//! This module depends on nothing else in the crate, so the ledger, the reports and the binary
//! all take names from it. Binding a run directory to its target (opening its ledger, checking
//! the target's identity) is [`crate::run`]'s.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// The scenario as run, with its seed.
pub const SCENARIO_FILE: &str = "scenario.toml";
/// The ledger.
pub const LEDGER_FILE: &str = "ledger.fl";
/// The event log.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The run's summary (JSON).
pub const SUMMARY_FILE: &str = "summary.json";
/// The run as JUnit XML.
pub const JUNIT_FILE: &str = "junit.xml";
/// `junit.xml`'s test cases, spooled while the run goes on (removed once the file is written).
pub const JUNIT_SPOOL_FILE: &str = "junit.cases.tmp";
/// The run's HTML report.
pub const HTML_FILE: &str = "report.html";
/// Held (`flock`) by the process running the run, so a second one cannot take it up too.
pub const LOCK_FILE: &str = "run.lock";
/// A simulated drive's media image (mirrors the fixtures crate's name).
pub const SIM_MEDIA_FILE: &str = "sim-drive.media";
/// A simulated drive's saved state (mirrors the fixtures crate's name).
pub const SIM_STATE_FILE: &str = "sim-drive.json";

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{} is in use: another faultline process is running this run (it holds {LOCK_FILE})", dir.display())]
    InUse { dir: PathBuf },
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lock {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A run directory locked by this process; the lock is released when it is dropped (or the
/// process dies: `flock` locks go with the file descriptor).
#[derive(Debug)]
pub struct RunDirLock {
    _file: File,
}

/// Locks the run directory `dir` for this process; refused ([`RunDirError::InUse`]) while
/// another holder has it, in this process or another. The lock file is created when missing
/// and left in place afterwards.
pub fn lock(dir: &Path) -> Result<RunDirLock, RunDirError> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| RunDirError::Open { path: path.clone(), source })?;
    match file.try_lock() {
        Ok(()) => Ok(RunDirLock { _file: file }),
        Err(TryLockError::WouldBlock) => Err(RunDirError::InUse { dir: dir.to_path_buf() }),
        Err(TryLockError::Error(source)) => Err(RunDirError::Lock { path, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::tests::tempdir;

    #[test]
    fn a_second_lock_is_refused_while_the_first_is_held() {
        let dir = tempdir();
        let first = lock(&dir).unwrap();
        let e = lock(&dir).unwrap_err();
        assert!(matches!(&e, RunDirError::InUse { dir: d } if *d == dir), "{e}");
        assert!(e.to_string().contains("is in use") && e.to_string().contains(LOCK_FILE), "{e}");
        drop(first);
        let again = lock(&dir).expect("free once the first holder is gone");
        assert!(matches!(lock(&dir), Err(RunDirError::InUse { .. })));
        drop(again);
        lock(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_directory_is_an_open_error() {
        let dir = tempdir().join("absent");
        let e = lock(&dir).unwrap_err();
        assert!(matches!(&e, RunDirError::Open { path, .. } if *path == dir.join(LOCK_FILE)), "{e}");
    }

    #[test]
    fn the_simulated_drive_keeps_the_files_named_here() {
        use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
        let dir = tempdir();
        let cfg = SimConfig {
            capacity_bytes: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 4096,
            queue_depth: 4,
            seed: 1,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
            dealloc_reads: Default::default(),
        };
        SimDrive::persistent(cfg, &dir).unwrap().persist().unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, [SIM_STATE_FILE, SIM_MEDIA_FILE]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
