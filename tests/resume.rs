//! `faultline resume` after SIGKILL: the real binary runs the demo scenario and is killed at
//! seeded random moments, again and again, each time taken up by `faultline resume`; the run
//! it finally completes must reach the verdict of an uninterrupted run with the same seed, with
//! no false finding, no harness error and every cycle recorded exactly once.
//!
//! The kill delays come from `SEED` (printed on failure). Where each kill landed is read from
//! the last event the run had recorded, and the phases hit are printed.

use crate::common::{scratch, text, BIN};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEMO: &str = include_str!("../scenarios/demo.toml");
const SEED: u64 = 20261130;

/// SplitMix64: the kill delays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (((z ^ (z >> 31)) as u128 * n as u128) >> 64) as u64
    }
}

/// The demo with `count` cycles, a 16 MiB drive (quick to reload) and `model`.
fn scenario(count: u32, model: &str) -> String {
    let s = DEMO
        .replace("count = 300", &format!("count = {count}"))
        .replace("capacity_bytes = 67108864", "capacity_bytes = 16777216")
        .replace("model = { kind = \"rollback\", writes_per_cut = 1 }", &format!("model = {model}"))
        .replace("full_every_cycles = 50", "full_every_cycles = 10")
        // Power off for 20 ms from the cut, so that kills land between the cut and power-on
        // too (with the demo's 5 ms, that stretch is mostly the writers' ending, 2-37 ms).
        .replace("off_time_ms = 5", "off_time_ms = 20");
    assert_eq!(s.matches(&format!("count = {count}")).count(), 1, "the demo scenario changed shape; update this test");
    assert!(
        s.contains(model) && s.contains("16777216") && s.contains("full_every_cycles = 10") && s.contains("off_time_ms = 20"),
        "the demo changed shape"
    );
    s
}

fn events(rd: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(rd.join("events.jsonl")) else { return Vec::new() };
    // A torn last line (the process was killed mid-write) is not an event yet.
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn summary(rd: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(rd.join("summary.json")).expect("summary.json")).unwrap()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn faultline")
}

/// Classes with findings, from a summary.
fn classes(s: &Value) -> BTreeSet<String> {
    s["findings_per_class"].as_object().unwrap().iter().filter(|(_, n)| n.as_u64().unwrap() > 0).map(|(c, _)| c.clone()).collect()
}

/// Runs `scenario` in `rd`, killing it `kills` times at random moments and resuming it after
/// each; returns the exit code of the run that completed and the phases the kills landed in.
fn run_with_kills(file: &Path, rd: &Path, kills: u32, delay_ms: (u64, u64), rng: &mut Rng) -> (i32, BTreeMap<String, u32>) {
    let mut phases: BTreeMap<String, u32> = BTreeMap::new();
    let mut killed = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(Instant::now() < deadline, "seed {SEED}: the run did not complete within 300 s");
        // Before the scenario is in the run directory there is nothing to resume: start again.
        let mut child = if rd.join("scenario.toml").exists() {
            spawn(&["resume", rd.to_str().unwrap()])
        } else {
            spawn(&["run", file.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()])
        };
        if killed < kills {
            std::thread::sleep(Duration::from_millis(delay_ms.0 + rng.below(delay_ms.1)));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                killed += 1;
                let last = events(rd).last().map_or("nothing recorded".to_string(), |e| e["event"].as_str().unwrap().to_string());
                *phases.entry(last).or_default() += 1;
                continue;
            }
        }
        let o = child.wait_with_output().unwrap();
        let code = o.status.code().expect("exited");
        assert!(code == 0 || code == 1, "seed {SEED}: after {killed} kills the run ended with {}", text(&o));
        if killed < kills {
            panic!("seed {SEED}: the run completed after only {killed} of {kills} kills; make it longer");
        }
        return (code, phases);
    }
}

/// Every cycle ended exactly once, the log and ledger read back, nothing is an error.
fn check_records(rd: &Path, count: u32, what: &str) {
    let ev = events(rd);
    let mut ended: BTreeMap<u64, u32> = BTreeMap::new();
    for e in ev.iter().filter(|e| e["event"] == "cycle_ended") {
        *ended.entry(e["cycle"].as_u64().unwrap()).or_default() += 1;
        assert_ne!(e["verdict"], "error", "seed {SEED}: {what}: {e}");
    }
    assert_eq!(ended.len() as u32, count, "seed {SEED}: {what}: cycles ended {:?}", ended.keys().collect::<Vec<_>>());
    assert!(ended.values().all(|&n| n == 1), "seed {SEED}: {what}: a cycle ended twice: {ended:?}");
    assert_eq!(ended.keys().copied().collect::<Vec<_>>(), (1..=u64::from(count)).collect::<Vec<_>>());
    assert!(ev.iter().all(|e| e["event"] != "harness_error"), "seed {SEED}: {what}: harness error recorded");
    assert_eq!(ev.iter().filter(|e| e["event"] == "run_ended").count(), 1, "seed {SEED}: {what}");
    // The reports rebuild from the log alone, to the same summary.
    let before = summary(rd);
    let o = Command::new(BIN).args(["report", rd.to_str().unwrap()]).output().unwrap();
    assert!(o.status.code() == Some(0) || o.status.code() == Some(1), "{}", text(&o));
    assert_eq!(summary(rd), before, "seed {SEED}: {what}: report rebuilds the summary");
}

fn kill_and_compare(name: &str, model: &str, count: u32, kills: u32, rng: &mut Rng) -> (Value, Value, BTreeMap<String, u32>) {
    kill_and_compare_text(name, &scenario(count, model), count, kills, (10, 150), rng)
}

/// Runs the scenario `text` straight and killed `kills` times (each after a delay in
/// `[delay_ms.0, delay_ms.0 + delay_ms.1)`), resumed after each; compares the two.
fn kill_and_compare_text(
    name: &str,
    scenario_text: &str,
    count: u32,
    kills: u32,
    delay_ms: (u64, u64),
    rng: &mut Rng,
) -> (Value, Value, BTreeMap<String, u32>) {
    let d = scratch(name);
    let file = d.join(format!("{name}.toml"));
    std::fs::write(&file, scenario_text).unwrap();
    let straight = d.join("straight");
    let o = Command::new(BIN).args(["run", file.to_str().unwrap(), "--run-dir", straight.to_str().unwrap()]).output().unwrap();
    assert!(o.status.code() == Some(0) || o.status.code() == Some(1), "{}", text(&o));
    check_records(&straight, count, "uninterrupted");
    let killed = d.join("killed");
    let (code, phases) = run_with_kills(&file, &killed, kills, delay_ms, rng);
    check_records(&killed, count, "killed and resumed");
    let (a, b) = (summary(&straight), summary(&killed));
    assert_eq!(o.status.code(), Some(code), "seed {SEED}: {name}: same exit code");
    assert_eq!(a["verdict"], b["verdict"], "seed {SEED}: {name}: same verdict\nuninterrupted {a}\nkilled {b}");
    assert!(b["resumes"].as_u64().unwrap() >= 1, "seed {SEED}: {b}");
    eprintln!("{name}: {kills} kills landed after {phases:?}; uninterrupted {:?}, killed {:?}", classes(&a), classes(&b));
    let _ = std::fs::remove_dir_all(&d);
    (a, b, phases)
}

#[test]
fn sigkill_at_random_points_and_resume_reaches_the_uninterrupted_verdict() {
    let _busy = crate::common::shared();
    let mut rng = Rng(SEED);
    // An honest drive: not one false finding however often the harness dies.
    let (a, b, p1) = kill_and_compare("honest", "{ kind = \"honest_plp\" }", 200, 30, &mut rng);
    assert_eq!(a["verdict"], "clean", "seed {SEED}: {a}");
    assert_eq!(b["findings"], 0, "seed {SEED}: {b}");
    // The demo's drive, which rolls back one acknowledged write per cut: found out just the same.
    let (a, b, p2) = kill_and_compare("rollback", "{ kind = \"rollback\", writes_per_cut = 1 }", 200, 25, &mut rng);
    assert_eq!(a["verdict"], "findings", "seed {SEED}: {a}");
    let allowed: BTreeSet<String> = ["lost_write", "torn_write"].map(String::from).into();
    assert!(classes(&a).contains("lost_write") && classes(&b).contains("lost_write"), "seed {SEED}: {a}\n{b}");
    assert!(classes(&b).is_subset(&allowed), "seed {SEED}: a kill made up a class: {b}");
    // The kills hit each part of the cycle: writing, between the cut and power-on, and while
    // waiting for the device or verifying it.
    let mut all = p1;
    for (k, n) in p2 {
        *all.entry(k).or_default() += n;
    }
    let total: u32 = all.values().sum();
    assert!(total >= 55, "{all:?}");
    let phase = |e: &str| match e {
        "cut_issued" | "device_gone" => "cut",
        "power_restored" | "ready" | "health" | "verified" | "finding" => "settle",
        _ => "write",
    };
    let hit: BTreeSet<&str> = all.keys().map(|e| phase(e)).collect();
    assert_eq!(hit.len(), 3, "seed {SEED}: the kills missed a phase: {all:?}");
}

/// The shipped dual-port PLP scenario with `count` cycles, the dual-port `model` and a 16 MiB
/// drive (each cycle's verify reads every share through both ports).
fn dual_scenario(count: u32, model: &str) -> String {
    let s = include_str!("../scenarios/dualport-plp.toml")
        .replace("count = 10", &format!("count = {count}"))
        .replace("capacity_bytes = 67108864", "capacity_bytes = 16777216")
        .replace("dual = { model = { kind = \"dual_honest\" }", &format!("dual = {{ model = {{ kind = \"{model}\" }}"));
    assert!(
        s.contains(&format!("count = {count}")) && s.contains(model) && s.contains("16777216"),
        "dualport-plp.toml changed shape; update this test"
    );
    s
}

/// `dualport-soak.toml` (its mix in sequence: 3 pulls, a controller reset, 2 power cuts) on a
/// smaller drive.
fn soak_scenario(count: u32) -> String {
    let s = include_str!("../scenarios/dualport-soak.toml")
        .replace("count = 12", &format!("count = {count}"))
        .replace("capacity_bytes = 67108864", "capacity_bytes = 16777216")
        .replace("pick = \"weighted\"", "pick = \"sequence\"");
    assert!(
        s.contains(&format!("count = {count}")) && s.contains("pick = \"sequence\"") && s.contains("16777216"),
        "dualport-soak.toml changed shape; update this test"
    );
    s
}

#[test]
fn a_dual_port_run_killed_at_random_points_and_resumed_reaches_the_uninterrupted_verdict() {
    let _busy = crate::common::shared();
    let mut rng = Rng(SEED ^ 2);
    // Every port's ledger is taken up again, the cycle the harness died in is finished
    // through both ports (powered back on or not as its own fault of the mix needs), and an
    // honest drive shows not one false finding.
    let (a, b, p1) = kill_and_compare_text("dual-honest", &soak_scenario(6), 6, 4, (300, 1500), &mut rng);
    assert_eq!(a["verdict"], "clean", "seed {SEED}: {a}");
    assert_eq!(b["findings"], 0, "seed {SEED}: {b}");
    assert_eq!(b["ports"].as_array().map(Vec::len), Some(2), "seed {SEED}: {b}");
    // A drive that loses its shared cache at every cut: found out just the same.
    let lossy = dual_scenario(6, "dual_lose_cache_at_cut");
    let (a, b, p2) = kill_and_compare_text("dual-lossy", &lossy, 6, 4, (300, 1500), &mut rng);
    assert_eq!(a["verdict"], "findings", "seed {SEED}: {a}");
    let allowed: BTreeSet<String> = ["lost_write", "torn_write"].map(String::from).into();
    assert!(classes(&a).contains("lost_write") && classes(&b).contains("lost_write"), "seed {SEED}: {a}\n{b}");
    assert!(classes(&b).is_subset(&allowed), "seed {SEED}: a kill made up a class: {b}");
    eprintln!("dual-port kills landed after {p1:?} and {p2:?}");
}

/// A run across hosts (the two-host demo: each port's writer is an agent, the simulated drive
/// served to them over NBD by the coordinator) whose coordinator is SIGKILLed at random points
/// and resumed: the agents go with it, the drive it served is the one saved before each record
/// that promised something of it, the hosts are dialled afresh, and the honest drive shows no
/// finding, as uninterrupted.
#[test]
fn a_run_across_hosts_killed_at_random_points_and_resumed_reaches_the_uninterrupted_verdict() {
    let _busy = crate::common::shared();
    let mut rng = Rng(SEED ^ 3);
    let demo = include_str!("../scenarios/two-host-demo.toml");
    assert!(demo.contains("count = 6") && demo.contains("host_power = \"kill\""), "two-host-demo.toml changed shape; update this test");
    let (a, b, phases) = kill_and_compare_text("two-host", demo, 6, 3, (600, 2500), &mut rng);
    assert_eq!(a["verdict"], "clean", "seed {SEED}: {a}");
    assert_eq!(b["findings"], 0, "seed {SEED}: {b}");
    assert_eq!(b["ports"].as_array().map(Vec::len), Some(2), "seed {SEED}: {b}");
    eprintln!("two-host kills landed after {phases:?}");
}

#[test]
fn a_run_in_progress_cannot_be_taken_up_by_a_second_process() {
    let d = scratch("locked");
    let file = d.join("locked.toml");
    std::fs::write(&file, scenario(40, "{ kind = \"honest_plp\" }")).unwrap();
    let rd = d.join("run");
    let mut first = spawn(&["run", file.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]);
    let start = Instant::now();
    while !events(&rd).iter().any(|e| e["event"] == "cycle_ended") {
        assert!(start.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = Command::new(BIN).args(["resume", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", text(&second));
    assert!(text(&second).contains("in use"), "{}", text(&second));
    first.kill().unwrap();
    first.wait().unwrap();
    // Once the first is gone, the lock goes with it.
    let o = Command::new(BIN).args(["resume", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    check_records(&rd, 40, "locked");
    let _ = std::fs::remove_dir_all(&d);
}
