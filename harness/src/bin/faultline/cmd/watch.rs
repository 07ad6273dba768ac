//! `faultline watch RUN_DIR`: follows a run's event log as it grows (from another terminal,
//! or over ssh) and shows it as the run's own console does: the progress, each cycle that
//! brought new findings, the verdict at the end; then exits with the run's exit code.
//!
//! The log is read line by line with the reader of `faultline report` (`decode_line`). A
//! line still being written (no newline yet) is read again on the next poll, from its start.
//! A run killed and taken up again by `faultline resume` goes on in the same log, after the
//! resume drops the torn line the kill left, so watching simply goes on too (`run_resumed`
//! shows as a line); a run suspended for lack of space is waited for the same way. A run
//! directory with no log yet is waited for, up to `--start-timeout`.

use crate::exit::Exit;
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use faultline::events::{EventKind, EventSink};
use faultline::report::console::Console;
use faultline::report::jsonl::decode_line;
use faultline::run_dir::EVENTS_FILE;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Parser)]
pub struct WatchArgs {
    /// The run directory of a run of `faultline run` or `resume`, running or not.
    run_dir: PathBuf,
    /// Print what the log holds now and exit, without waiting for more.
    #[arg(long)]
    no_follow: bool,
    /// Seconds to wait for the run to start (its event log to appear) before giving up.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    start_timeout: u64,
    /// How often to look for new events, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    poll_ms: u64,
}

/// What the events so far say about the run's end, in O(1) memory.
#[derive(Default)]
struct Tally {
    events: u64,
    findings: u64,
    errors: u64,
}

impl Tally {
    /// The exit code of a run that has not ended (yet): findings if it found any and nothing
    /// went wrong, else a harness error (an unfinished run is not clean), as its summary says.
    fn unfinished(&self) -> Exit {
        if self.errors == 0 && self.findings > 0 {
            Exit::Findings
        } else {
            Exit::HarnessError
        }
    }
}

/// Waits for `path` to exist, up to `timeout`.
fn wait_for(path: &Path, timeout: Duration, poll: Duration, dir: &Path) -> Result<()> {
    let t0 = Instant::now();
    let mut said = false;
    while !path.exists() {
        if t0.elapsed() >= timeout {
            bail!("no run started in {} within {} s (it has no {EVENTS_FILE})", dir.display(), timeout.as_secs());
        }
        if !said {
            eprintln!("faultline watch: waiting for a run to start in {}", dir.display());
            said = true;
        }
        std::thread::sleep(poll);
    }
    Ok(())
}

pub fn cmd_watch(a: WatchArgs) -> Result<Exit> {
    let dir = &a.run_dir;
    let path = dir.join(EVENTS_FILE);
    let poll = Duration::from_millis(a.poll_ms.max(1));
    if a.no_follow && !path.exists() {
        bail!("{} has no event log ({EVENTS_FILE}): no run has started there", dir.display());
    }
    wait_for(&path, Duration::from_secs(a.start_timeout), poll, dir)?;
    let mut console = Console::stdout();
    let mut tally = Tally::default();
    // Bytes of whole lines consumed; the line after them is read again until it is whole.
    let mut offset = 0u64;
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    let t0 = Instant::now();
    loop {
        let mut f = std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
        let len = f.metadata().with_context(|| format!("cannot read {}", path.display()))?.len();
        if len < offset {
            bail!("{} shrank to {len} bytes, below the {offset} already read: it was replaced or cut, not appended to", path.display());
        }
        buf.clear();
        f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_to_end(&mut buf)).with_context(|| format!("cannot read {}", path.display()))?;
        let mut used = 0;
        while let Some(nl) = buf[used..].iter().position(|&b| b == b'\n') {
            let line = &buf[used..used + nl];
            used += nl + 1;
            line_no += 1;
            let (_, e) = decode_line(line).map_err(|err| anyhow!("{}: line {line_no}: {err}", path.display()))?;
            tally.events += 1;
            match &e.kind {
                EventKind::Finding { .. } => tally.findings += 1,
                EventKind::HarnessError { .. } => tally.errors += 1,
                _ => {}
            }
            console.event(&e)?;
            if let EventKind::RunEnded { exit_code, .. } = e.kind {
                return Ok(Exit::from_code(exit_code));
            }
        }
        offset += used as u64;
        if a.no_follow {
            let partial =
                if buf.len() > used { format!(" (and {} bytes of a line being written)", buf.len() - used) } else { String::new() };
            println!("the run has not ended: {} events so far{partial}", tally.events);
            return Ok(tally.unfinished());
        }
        if tally.events == 0 && t0.elapsed() >= Duration::from_secs(a.start_timeout) {
            bail!("no run started in {} within {} s (its {EVENTS_FILE} holds no event)", dir.display(), a.start_timeout);
        }
        std::thread::sleep(poll);
    }
}
