//! Helpers shared by the end-to-end tests: scratch directories, running the real binary and
//! showing what it did, and skipping with a printed reason. Each test file is its own crate
//! and uses what it needs (hence the `dead_code` allowance); `mod common;` brings them in.

#![allow(dead_code, reason = "each test crate uses only some of these helpers")]

pub mod seeded;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `faultline` binary this package builds.
pub const BIN: &str = env!("CARGO_BIN_EXE_faultline");

/// A fresh, empty directory for one test: `faultline-<test file>-<name>-<pid>` under the
/// system temporary directory (whatever an earlier run left there is removed first).
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-{}-{name}-{}", env!("CARGO_CRATE_NAME"), std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `faultline ARGS` to completion.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run faultline")
}

/// Exit code, stdout and stderr of a run, for failure messages and `contains` checks.
pub fn text(o: &Output) -> String {
    format!("exit {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `faultline ARGS` and insists that it exits 0.
pub fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert_eq!(o.status.code(), Some(0), "faultline {args:?}\n{}", text(&o));
    o
}

/// A path as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Skips of this test binary so far.
static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Says why `test` is skipped, where `cargo test` shows it: libtest captures what `println!`
/// and `eprintln!` print from a passing test, but not a write to the process's own stderr,
/// so the line reaches the output whether the test passes or not, counted per test binary
/// (`SKIP 2 in blockdev: ...`). A test never skips silently.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let n = SKIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let line = format!("SKIP {n} in {}: {test}: {why}", env!("CARGO_CRATE_NAME"));
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    // Also captured with the test's output, for a run with --nocapture or a failure beside it.
    println!("{line}");
}

/// Runs a system tool; its trimmed stdout, or an error naming the command and its stderr.
pub fn sh(cmd: &str, args: &[&str]) -> Result<String, String> {
    let o = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr).trim()))
    }
}
