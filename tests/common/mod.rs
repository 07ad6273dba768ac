//! Helpers shared by the end-to-end tests (one test binary, `tests/tests.rs`): scratch
//! directories, running the real binary and showing what it did, skipping with a printed
//! reason, and the locks that keep tests of different modules from disturbing each other.

pub mod seeded;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The `faultline` binary this package builds.
pub const BIN: &str = env!("CARGO_BIN_EXE_faultline");

/// The test file that called: `agent` for tests/agent.rs and tests/agent/hostile.rs.
#[track_caller]
fn caller_file() -> &'static str {
    let file = std::panic::Location::caller().file();
    let rel = file.rsplit_once("tests/").map_or(file, |(_, r)| r);
    let top = rel.split('/').next().unwrap_or(rel);
    top.strip_suffix(".rs").unwrap_or(top)
}

/// A fresh, empty directory for one test: `faultline-<test file>-<name>-<pid>` under the
/// system temporary directory (whatever an earlier run left there is removed first).
#[track_caller]
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-{}-{name}-{}", caller_file(), std::process::id()));
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

/// Skips so far.
static SKIPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Says why `test` is skipped, where `cargo test` shows it: libtest captures what `println!`
/// and `eprintln!` print from a passing test, but not a write to the process's own stderr,
/// so the line reaches the output whether the test passes or not, counted over the run
/// (`SKIP 2 in blockdev: ...`). A test never skips silently.
#[track_caller]
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    let n = SKIPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let line = format!("SKIP {n} in {}: {test}: {why}", caller_file());
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

/// The machine, as the tests share it: one permit a core. libtest runs more tests at a time
/// than there are cores (`RUST_TEST_THREADS` in `.cargo/config.toml`), so that a test that
/// waits (on a guest's boot, a lock, an off time, a child process) leaves its core to
/// another; a test that keeps a core busy (a lab guest, a run of many cycles, a build) takes
/// [`shared`], one permit, so that no more of them run at once than there are cores. A test
/// whose verdict rests on timing (a judged port's figures, a kill due within milliseconds, a
/// benchmark, a lab guest's stall budget) takes [`alone`], every permit, so that no test that
/// took [`shared`] runs beside it; once it waits, no new [`shared`] starts before it. Take it
/// first, before any lock of a module's own.
struct Permits {
    held: usize,
    alone_waiting: usize,
}

static MACHINE: Mutex<Permits> = Mutex::new(Permits { held: 0, alone_waiting: 0 });
static FREED: Condvar = Condvar::new();

/// The permits: one a core of this machine.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// Permits held for as long as this lives: how many, when they were asked for and when got.
#[must_use = "the permits go back when this is dropped"]
pub struct Machine(usize, std::time::Instant, std::time::Instant);

impl Drop for Machine {
    fn drop(&mut self) {
        MACHINE.lock().unwrap_or_else(PoisonError::into_inner).held -= self.0;
        FREED.notify_all();
        log_permits(self);
    }
}

/// With `FAULTLINE_TEST_PERMITS=FILE`, each test's wait for its permits and its hold of them,
/// one line a test (`test permits waited_s held_s`), to see where the suite's time goes.
fn log_permits(m: &Machine) {
    use std::io::Write;
    let Some(path) = std::env::var_os("FAULTLINE_TEST_PERMITS") else { return };
    let name = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("{name} {} {:.1} {:.1}\n", m.0, (m.2 - m.1).as_secs_f64(), m.2.elapsed().as_secs_f64());
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(line.as_bytes());
    }
}

/// No test that took [`shared`] runs while this is held.
pub fn alone() -> Machine {
    let asked = std::time::Instant::now();
    let all = cores();
    let mut m = MACHINE.lock().unwrap_or_else(PoisonError::into_inner);
    m.alone_waiting += 1;
    while m.held > 0 {
        m = FREED.wait(m).unwrap_or_else(PoisonError::into_inner);
    }
    m.alone_waiting -= 1;
    m.held = all;
    Machine(all, asked, std::time::Instant::now())
}

/// This test keeps a core busy: not beside one that took [`alone`], and at most one such test
/// a core.
pub fn shared() -> Machine {
    let asked = std::time::Instant::now();
    let all = cores();
    let mut m = MACHINE.lock().unwrap_or_else(PoisonError::into_inner);
    while m.held + 1 > all || m.alone_waiting > 0 {
        m = FREED.wait(m).unwrap_or_else(PoisonError::into_inner);
    }
    m.held += 1;
    Machine(1, asked, std::time::Instant::now())
}

/// Runs `work` on a thread of its own at the scheduler's idle priority (`SCHED_IDLE`, which
/// the threads it starts inherit), holding no permit: it gets the CPU the tests that hold
/// permits leave (a quarter of both cores, summed over a whole run, at 1e8011f: `vmstat`), and
/// gives it back the moment one of them wakes. Only for work whose verdict rests on no
/// timing and that no timeout of its own can fail when it waits for the CPU (the detection
/// matrix's single-port rows, scored against ground truth). Where the policy cannot be set,
/// `work` takes [`shared`] instead.
pub fn background<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(std::thread::current().name().unwrap_or("background").to_string())
            .spawn_scoped(scope, || {
                let _permit = (!this_thread_idle()).then(shared);
                work()
            })
            .expect("start a background thread")
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Puts the calling thread in `SCHED_IDLE` with util-linux's `chrt` (its thread id read from
/// `/proc/thread-self`, so that no test needs unsafe code); whether that worked.
fn this_thread_idle() -> bool {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else { return false };
    let Some(tid) = link.file_name().and_then(|t| t.to_str()).map(str::to_string) else { return false };
    Command::new("chrt").args(["--idle", "--pid", "0", &tid]).status().is_ok_and(|s| s.success())
}

/// Loop device nodes. A test that detaches a loop device and attaches a file to the same node
/// again takes [`loop_nodes_alone`], or another test's `losetup -f` may take the node between
/// the two (seen: both failed at once); a test holding loop devices of its own takes
/// [`loop_nodes_shared`] for as long as it holds them.
static LOOP_NODES: RwLock<()> = RwLock::new(());

pub fn loop_nodes_alone() -> RwLockWriteGuard<'static, ()> {
    LOOP_NODES.write().unwrap_or_else(PoisonError::into_inner)
}

pub fn loop_nodes_shared() -> RwLockReadGuard<'static, ()> {
    LOOP_NODES.read().unwrap_or_else(PoisonError::into_inner)
}
