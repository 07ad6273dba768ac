//! What every emulator does while it runs: stop on SIGINT or SIGTERM, log each exchange, say
//! whether the drive is powered.

use anyhow::{Context, Result};
use faultline_fixtures::emu::Tap;
use faultline_fixtures::{SimDrive, SimPower};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A flag SIGINT and SIGTERM set.
pub(super) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install the signal handler")?;
    }
    Ok(stop)
}

pub(super) fn drive_state(d: &SimDrive) -> &'static str {
    if d.present() {
        "on"
    } else {
        "off"
    }
}

/// Logs each exchange on stderr: `> command`, `< reply` (escaped, one line), and the drive's
/// power after it.
pub(super) fn install_log(tap: &Tap, power: SimPower, count: Arc<AtomicU64>, quiet: bool) {
    tap.set(move |cmd, reply| {
        count.fetch_add(1, Ordering::SeqCst);
        if quiet {
            return;
        }
        let mut p = power.clone();
        let state = match faultline_drivers::PowerSwitch::state(&mut p) {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        let reply = if reply.is_empty() { "(no reply)".to_string() } else { reply.escape_ascii().to_string() };
        eprintln!("> {cmd}\n< {reply}\n  drive power: {state}");
    });
}
