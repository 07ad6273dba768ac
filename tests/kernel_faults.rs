//! The runner against the kernel-facing controllers, on a fake sysfs/`/dev` tree (the real
//! NVMe driver is the QEMU lab's: see the notes on each test for what it must check there).
//! The target is a regular file; the controllers are the real Linux link controllers, reading
//! and writing the fake tree. Seeds are in the scenarios.

use crate::common::scratch;
use faultline::events::{Event, EventSink, SinkError, Verdict};
use faultline::runner::{run_scenario, RunnerOptions};
use faultline::scenario::Scenario;
use faultline_drivers::control::ControlEnv;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Keeps every event of a run.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<Event>>>);

impl EventSink for Kept {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.0.lock().unwrap().push(e.clone());
        Ok(())
    }
}

fn no_clock() -> String {
    String::new()
}

/// Runs `scenario` (TOML) in `dir/run` with the controllers rooted at `dir/root`; returns
/// the events and the verdict.
fn run(dir: &Path, scenario: &str) -> (Vec<Event>, Verdict, Vec<String>) {
    let s = Scenario::from_toml(scenario, "test").unwrap();
    let plan = s.plan("test", 7).unwrap();
    let root = dir.join("root");
    let env = ControlEnv { sysfs_root: root.clone(), dev_root: root, settle_timeout: Duration::from_millis(500), ..ControlEnv::default() };
    let o = RunnerOptions { run_id: 7, started_at: String::new(), clock: no_clock, control_env: env, faultline_exe: None };
    let kept = Kept::default();
    let mut sinks = faultline::events::Sinks::new();
    sinks.push(kept.clone());
    let summary = run_scenario(&plan, &dir.join("run"), sinks, &o, None).unwrap();
    let events = kept.0.lock().unwrap().clone();
    (events, summary.verdict, summary.errors)
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

fn scenario(target: &Path, link: &str, reset: &str) -> String {
    format!(
        "format_version = 1\nname = \"kernel\"\nseed = 7\ncontract = \"plp\"\n[target]\npath = \"{}\"\n\
         [controllers]\nlink = \"{link}\"\n[fault]\nkind = \"link_reset\"\nreset = \"{reset}\"\n\
         [cut]\nkind = \"after_completions\"\ncompletions = 200\n[cycles]\ncount = 2\noff_time_ms = 1\nreadiness_timeout_s = 2\n",
        target.display()
    )
}

fn kinds(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.kind_name().to_string()).collect()
}

/// Lab: `nvme-reset://` on the guest's controller; the log has `link_restored` after each
/// reset and never `power_restored`.
#[test]
fn a_link_reset_ends_in_link_restored_not_power_restored() {
    let d = scratch("linkrestored");
    let img = d.join("target.img");
    std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
    let root = d.join("root");
    write(&root, "sys/class/nvme/nvme0/reset_controller", b"");
    write(&root, "sys/class/nvme/nvme0/state", b"live\n");
    let (ev, verdict, errors) = run(&d, &scenario(&img, "nvme-reset://nvme0", "nvme_controller"));
    let k = kinds(&ev);
    assert_eq!((verdict, errors.len()), (Verdict::Clean, 0), "{errors:?} {k:?}");
    assert_eq!(k.iter().filter(|k| *k == "link_restored").count(), 2, "{k:?}");
    assert!(!k.iter().any(|k| k == "power_restored"), "{k:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Lab: QEMU's controller has CAP.NSSRS = 0; `faultline run` with `nvme-subsys-reset://` must
/// refuse before cycle 1 naming NSSRS, and `faultline controller nvme-subsys-reset://nvmeX
/// identify` must fail the same way.
#[test]
fn a_subsystem_reset_the_controller_does_not_have_is_refused_before_cycle_1() {
    let d = scratch("nssr");
    let img = d.join("target.img");
    std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
    let root = d.join("root");
    write(&root, "dev/nvme0", b"");
    let mut bar = vec![0u8; 4096];
    bar[..8].copy_from_slice(&0x0000_0020_2014_03ffu64.to_le_bytes());
    write(&root, "sys/class/nvme/nvme0/device/resource0", &bar);
    let (ev, verdict, errors) = run(&d, &scenario(&img, "nvme-subsys-reset://nvme0", "nvme_subsystem"));
    let k = kinds(&ev);
    assert_eq!(verdict, Verdict::Error, "{k:?}");
    assert!(!k.iter().any(|k| k == "cycle_started"), "refused before cycle 1: {k:?}");
    assert!(errors.iter().any(|e| e.contains("has no NVM subsystem reset") && e.contains("NSSRS")), "{errors:?}");
    let _ = std::fs::remove_dir_all(&d);
}
