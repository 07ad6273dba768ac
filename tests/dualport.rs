//! Dual-port runs on the simulated dual-port drive: the shipped demo through the CLI (honest:
//! exit 0; a drive that freezes the other port: `port_disturbance`, exit 1), the performance
//! mode, and what a dual-port scenario refuses. (The dual-port models against the drive's
//! ground truth are rows of the detection matrix: tests/detection_matrix.rs.)

use crate::common::{run, text};
use serde_json::Value;
use std::path::PathBuf;

/// A run directory that does not exist yet.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let d = crate::common::scratch(name);
    let _ = std::fs::remove_dir(&d);
    d
}

/// Dual-port runs measure the ports' figures: each runs [`crate::common::alone`], so that no
/// other test's writers take the CPU from its judged port.
/// The shipped simulated dual-port drives hold 64 MiB; the tests run them at 16 MiB, which
/// quarters each full verify through both ports (these tests run alone).
pub(crate) const SMALL: &str = "target.sim.capacity_bytes=16777216";

pub(crate) fn one_at_a_time() -> crate::common::Machine {
    crate::common::alone()
}

/// The shipped demo, 4 of its 10 pulls (each port hit twice, judged twice), on a 16 MiB drive
/// instead of 64: within the suite's time (the whole demo twice took 46 s of it; 4 cycles at
/// 64 MiB 10.6 s, at 16 MiB 6.2 s, most of it the full verify through both ports).
fn run_demo(model: &str, dir: &std::path::Path) -> (i32, Value) {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml");
    let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--model", model, "--cycles", "4", "--set", SMALL]);
    let summary = std::fs::read_to_string(dir.join("summary.json")).unwrap_or_else(|e| panic!("{model}: no summary ({e}): {}", text(&o)));
    (o.status.code().unwrap_or(-1), serde_json::from_str(&summary).unwrap())
}

#[test]
fn the_dual_port_demo_is_clean_on_an_honest_drive_and_finds_a_drive_that_freezes_the_other_port() {
    let _one = one_at_a_time();
    let dir = scratch("honest");
    let (code, s) = run_demo("dual-honest", &dir);
    assert_eq!(code, 0, "{s}");
    let ports = s["ports"].as_array().expect("summary.json has ports");
    assert_eq!(ports.len(), 2, "{s}");
    for p in ports {
        for k in ["name", "io_errors", "max_stall_ms", "throughput_ratio", "p99_latency_ratio", "disturbed"] {
            assert!(p.get(k).is_some(), "ports[].{k} missing: {p}");
        }
        assert_eq!(p["disturbed"], false, "{p}");
        assert_eq!(p["io_errors"], 0, "{p}");
        assert_eq!(p["cycles_judged"], 2, "{p}");
    }
    assert!(dir.join("ports/A/ledger.fl").exists() && dir.join("ports/B/ledger.fl").exists());
    // A pull is a link fault: recorded as a one-port run's is, the link restored and then the
    // port it hit ready, once per cycle; the power is never said to come back.
    let n = kinds(&dir);
    let (pulls, ready) = (n.get("cycle_ended").copied(), n.get("ready").copied());
    assert_eq!((n.get("link_restored").copied(), ready), (pulls, pulls), "{n:?}");
    assert_eq!(n.get("power_restored"), None, "{n:?}");
    let _ = std::fs::remove_dir_all(&dir);

    let dir = scratch("freeze");
    let (code, s) = run_demo("dual-freeze-on-pull", &dir);
    assert_eq!(code, 1, "{s}");
    assert!(s["findings_per_class"]["port_disturbance"].as_u64().unwrap() >= 4, "{s}");
    assert!(s["ports"].as_array().unwrap().iter().all(|p| p["disturbed"] == true), "{s}");
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let stall = log
        .lines()
        .filter(|l| l.contains("\"port_disturbance\""))
        .find(|l| l.contains("no write completed for"))
        .unwrap_or_else(|| panic!("no stall finding: {log}"));
    assert!(stall.contains("while port") && stall.contains("(budget 500 ms)"), "{stall}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dual_port_scenarios_refuse_what_cannot_work() {
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    let check = |edit: &dyn Fn(&str) -> String, want: &str| {
        let s = edit(&base);
        let err = faultline::scenario::Scenario::from_toml(&s, "t.toml").and_then(|sc| sc.plan("t.toml", 1).map(|_| ()));
        let e = err.expect_err(want).to_string();
        assert!(e.contains(want), "{e}");
    };
    check(&|s| s.replace("fault_ports = [\"A\", \"B\"]", "fault_ports = [\"A\", \"C\"]"), "dual.fault_ports[1]: \"C\" is not a port");
    check(&|s| s.replace("[dual]\n", "[ignored]\n"), "unknown field");
    check(&|s| s.replace("max_stall_ms = 500", "max_stall_ms = 0"), "dual.budget.max_stall_ms");
    check(
        &|s| format!("{s}\n[[ports]]\nname = \"A\"\nshare_percent = [0, 60]\n[[ports]]\nname = \"B\"\nshare_percent = [50, 100]\n"),
        "overlaps port A's",
    );
    check(&|s| format!("{s}\n[[ports]]\nname = \"B\"\n[[ports]]\nname = \"A\"\n"), "must be named \"A\"");
    check(&|s| s.replace("link = \"sim\"", "link = \"nvme-reset://nvme0\""), "the simulated drive has no link to reset");
    check(&|s| s.replace("kind = \"honest_plp\"", "kind = \"honest_volatile\""), "target.sim.model: HonestVolatile");

    // Two hosts: what a host power cut needs, and what is not carried over the wire yet.
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml")).unwrap();
    let check = |edit: &dyn Fn(&str) -> String, want: &str| {
        let s = edit(&base);
        let err = faultline::scenario::Scenario::from_toml(&s, "t.toml").and_then(|sc| sc.plan("t.toml", 1).map(|_| ()));
        let e = err.expect_err(want).to_string();
        assert!(e.contains(want), "{e}");
    };
    faultline::scenario::Scenario::from_toml(&base, "t.toml").unwrap().plan("t.toml", 1).unwrap();
    let once = |s: &str, from: &str, to: &str| s.replacen(from, to, 1);
    check(&|s| once(s, "host_power = \"kill\"\n", ""), "ports[0].host_power: host_power_cut hits port A on host-a: say what cuts");
    check(&|s| once(s, "host = \"host-a\"\n", ""), "ports[0].host: transport and host_power are a port on another host's");
    check(&|s| once(s, "host_power = \"kill\"\n", "host_power = \"nonsense\"\n"), "ports[0].host_power: \"nonsense\"");
    check(
        &|s| once(s, "transport = [\"{faultline}\", \"agent\", \"--stdio\", \"--target\", \"{target}\"]", "transport = []"),
        "ports[0].transport: the transport command is empty",
    );
    // Each share verified and compared through the other host's port too: carried (version 6).
    let cross = base.replace("cross_verify = false", "cross_verify = true").replace("compare_ports = false", "compare_ports = true");
    faultline::scenario::Scenario::from_toml(&cross, "t.toml").unwrap().plan("t.toml", 1).unwrap();
    check(
        &|s| s.replace("kind = \"host_power_cut\"", "kind = \"host_power_cut\"\nstagger_ms = 100"),
        "fault.stagger_ms: staggers the cuts of every host: give all_hosts = true too",
    );
    check(
        &|s| s.replace("[fault]\nkind = \"host_power_cut\"", "[controllers]\npower = \"sim\"\n\n[fault]\nkind = \"power_cut\""),
        "fault.kind: power-cut: a fault other than host_power_cut, host_shutdown and host_link_reset",
    );
    // A host's own link reset: one a host can run on itself, on a port with a host.
    let reset = |s: &str, kind: &str| {
        s.replace("[fault]\nkind = \"host_power_cut\"", &format!("[fault]\nkind = \"host_link_reset\"\nreset = \"{kind}\""))
    };
    faultline::scenario::Scenario::from_toml(&reset(&base, "nvme_controller"), "t.toml").unwrap().plan("t.toml", 1).unwrap();
    check(&|s| reset(s, "slot_power"), "fault.reset: pci-slot-power-cycle: not a reset a host runs on itself");
    check(&|s| reset(s, "port_pull"), "fault.reset: port-pull: not a reset a host runs on itself");
    let dualport = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    let e = faultline::scenario::Scenario::from_toml(
        &dualport.replace("kind = \"link_reset\"\nreset = \"port_pull\"", "kind = \"host_power_cut\""),
        "t.toml",
    )
    .and_then(|sc| sc.plan("t.toml", 1).map(|_| ()))
    .expect_err("no hosts")
    .to_string();
    assert!(e.contains("ports[0].host: host_power_cut hits port A: it needs the host it is cabled to"), "{e}");
    let e = faultline::scenario::Scenario::from_toml(
        &dualport.replace("kind = \"link_reset\"\nreset = \"port_pull\"", "kind = \"host_link_reset\"\nreset = \"nvme_controller\""),
        "t.toml",
    )
    .and_then(|sc| sc.plan("t.toml", 1).map(|_| ()))
    .expect_err("no hosts")
    .to_string();
    assert!(e.contains("ports[0].host: host_link_reset hits port A: its host's agent runs the reset"), "{e}");
    let single = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/demo.toml")).unwrap();
    let e = faultline::scenario::Scenario::from_toml(
        &single.replace("kind = \"power_cut\"", "kind = \"host_link_reset\"\nreset = \"nvme_controller\""),
        "t.toml",
    )
    .and_then(|sc| sc.plan("t.toml", 1).map(|_| ()))
    .expect_err("not dual-port")
    .to_string();
    assert!(e.contains("host_link_reset is run by the agent of a dual-port run's port on its own host"), "{e}");
}

#[test]
fn performance_mode_measures_each_port_alone_and_both_and_verifies_what_it_wrote() {
    let _one = one_at_a_time();
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    let d = crate::common::scratch("perf");
    let scenario = d.join("perf.toml");
    std::fs::write(&scenario, base.replace("[dual]\n", "[dual]\nmode = \"performance\"\nperf_ms = 300\n")).unwrap();
    let rd = d.join("run");
    let o = run(&["run", scenario.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    let perf = s["performance"].as_array().unwrap_or_else(|| panic!("no performance: {s}"));
    let workloads: Vec<&str> = perf.iter().map(|w| w["workload"].as_str().unwrap()).collect();
    assert_eq!(workloads, ["seq-read-128k-qd1", "write"], "{s}");
    for w in perf {
        let mb = &w["mb_s"];
        for (phase, ports) in [("A only", &["A"][..]), ("B only", &["B"][..]), ("A+B", &["A", "B"][..])] {
            for p in ports {
                assert!(mb[phase][p].as_f64().is_some_and(|v| v > 0.0), "{phase} {p}: {w}");
            }
        }
        assert!(w["fairness"].as_f64().is_some_and(|f| f > 0.0 && f <= 1.0), "{w}");
        assert!(w["sum_over_alone"].as_f64().is_some_and(|f| f > 0.0), "{w}");
    }
    // What the phases wrote was verified through both ports at the end.
    let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    let verified: Vec<Value> =
        log.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|e| e["event"] == "verified").collect();
    assert_eq!(verified.len(), 1, "{log}");
    assert!(verified[0]["bytes"].as_u64().unwrap() >= 2 * (64 << 20), "both shares read through both ports: {}", verified[0]);
    println!("{}", serde_json::to_string_pretty(&s["performance"]).unwrap());
    // The reports rebuild from the log, port_perf events and all, into the same summary.
    let before = std::fs::read_to_string(rd.join("summary.json")).unwrap();
    let again = run(&["report", rd.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(rd.join("summary.json")).unwrap(), before);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_nvm_subsystem_reset_hits_both_ports_and_judges_neither() {
    // NSSR resets every controller of the subsystem: the port it was issued through and the
    // other one. Judging the other against its baseline would call its write errors during
    // the reset a disturbance (a false finding on an honest drive).
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    // (The simulated drive's own link controller: a Quarch hot-plug module has no NSSR.)
    let nssr = base
        .replace("reset = \"port_pull\"", "reset = \"nvme_subsystem\"")
        .replace("count = 10", "count = 2")
        .replace("switch = \"quarch_hotplug_serial\", ", "");
    assert_ne!(nssr, base);
    let dir = scratch("nssr");
    std::fs::create_dir_all(&dir).unwrap();
    let sf = dir.join("nssr.toml");
    std::fs::write(&sf, nssr).unwrap();
    let rd = dir.join("run");
    let o = run(&["run", sf.to_str().unwrap(), "--run-dir", rd.to_str().unwrap(), "--model", "dual-honest"]);
    assert_eq!(o.status.code(), Some(0), "seed 20250101: {}", text(&o));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    for p in s["ports"].as_array().unwrap() {
        assert_eq!((p["cycles_faulted"].as_u64(), p["cycles_judged"].as_u64()), (Some(2), Some(0)), "{p}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The kinds of a run's events, counted, and those that name a port also as `KIND PORT`
/// (`ready 1`).
pub(crate) fn kinds(dir: &std::path::Path) -> std::collections::BTreeMap<String, usize> {
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let mut n = std::collections::BTreeMap::new();
    for l in log.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let kind = v["event"].as_str().unwrap_or("?").to_string();
        if let Some(port) = v["port"].as_u64() {
            *n.entry(format!("{kind} {port}")).or_insert(0) += 1;
        }
        *n.entry(kind).or_insert(0) += 1;
    }
    n
}

#[test]
fn a_dual_port_power_cut_comes_back_on_every_port_and_a_lost_shared_cache_is_found_through_both() {
    let _one = one_at_a_time();
    let plp = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-plp.toml");
    // Seed 20261202 (the scenario's). Each port prefills its own share first.
    let dir = scratch("plp-honest");
    let o = run(&["run", plp, "--run-dir", dir.to_str().unwrap(), "--cycles", "3", "--set", "workload.prefill=true", "--set", SMALL]);
    assert_eq!(o.status.code(), Some(0), "seed 20261202: {}", text(&o));
    let n = kinds(&dir);
    assert_eq!(n.get("power_restored"), Some(&3), "power back on after every cut: {n:?}");
    assert_eq!(n.get("ready"), Some(&6), "each port answered again after each cut: {n:?}");
    assert_eq!((n.get("ready 0"), n.get("ready 1")), (Some(&3), Some(&3)), "each readiness names its port: {n:?}");
    assert_eq!(n.get("cycle_ended"), Some(&3), "{n:?}");
    assert_eq!(n.get("harness_error"), None, "{n:?}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    for p in s["ports"].as_array().unwrap() {
        // A power cut hits both ports: neither is judged against its baseline.
        assert_eq!((p["cycles_faulted"].as_u64(), p["cycles_judged"].as_u64()), (Some(3), Some(0)), "{p}");
    }
    // Both ledgers closed every cycle at the cut.
    for port in ["A", "B"] {
        let ledger = String::from_utf8_lossy(&std::fs::read(dir.join(format!("ports/{port}/ledger.fl"))).unwrap()).into_owned();
        assert_eq!(ledger.matches("\"end\":\"cut\"").count(), 3, "port {port}'s cycles end at the cut");
        let share = if port == "A" { "\"span_start\":0,\"span_end\":8388608" } else { "\"span_start\":8388608,\"span_end\":16777216" };
        assert!(ledger.contains(&format!("\"type\":\"prefill_done\",{share}")), "port {port} prefilled its share {share}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    let dir = scratch("plp-lossy");
    let o = run(&["run", plp, "--run-dir", dir.to_str().unwrap(), "--cycles", "3", "--model", "dual-lose-cache-at-cut", "--set", SMALL]);
    assert_eq!(o.status.code(), Some(1), "seed 20261202: {}", text(&o));
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let lost: Vec<&str> = log.lines().filter(|l| l.contains("\"event\":\"finding\"") && l.contains("\"lost_write\"")).collect();
    // The same loss read through both ports is one finding naming both.
    for words in ["port A's share, read through ports A and B: ", "port B's share, read through ports B and A: "] {
        assert!(lost.iter().any(|l| l.contains(words)), "no lost_write in {words}: {} lost_write findings", lost.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The events of a run directory, parsed.
pub(crate) fn events(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("events.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// An overnight soak's mix on one drive: port pulls and controller resets (one port each, A
/// and B in turn, the other judged) and power cuts (both ports hit, neither judged), drawn
/// per cycle from the seed. The judgement follows each cycle's fault, the report names it,
/// and a drive that loses its shared cache at a power cut is found in the power-cut cycles
/// only.
#[test]
fn a_soak_that_mixes_faults_judges_each_cycle_by_its_own_fault() {
    let _one = one_at_a_time();
    let soak = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-soak.toml");
    // Seed 20261203 (the scenario's), drawn by weight: 11 cycles give 6 pulls, 4 resets and a
    // power cut (cycle 11), the same in every run.
    // The off time swept (20 ms, then 200): a pull holds the port unplugged that long.
    let dir = scratch("soak-honest");
    let sweep = "cycles.off_time_ms=[20, 200]";
    let o = run(&["run", soak, "--run-dir", dir.to_str().unwrap(), "--cycles", "11", "--set", SMALL, "--set", sweep]);
    assert_eq!(o.status.code(), Some(0), "seed 20261203: {}", text(&o));
    let ev = events(&dir);
    let fault_of: std::collections::BTreeMap<u64, String> = ev
        .iter()
        .filter(|e| e["event"] == "cycle_started")
        .map(|e| (e["cycle"].as_u64().unwrap(), e["fault"].as_str().expect("each cycle names its fault").to_string()))
        .collect();
    assert_eq!(fault_of.len(), 11, "{fault_of:?}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let mut tally = std::collections::BTreeMap::new();
    for f in fault_of.values() {
        *tally.entry(f.clone()).or_insert(0u64) += 1;
    }
    assert_eq!(tally.len(), 3, "seed 20261203: 11 cycles draw every fault of the mix: {tally:?}");
    for (f, n) in &tally {
        assert_eq!((s["faults"][f]["cycles"].as_u64(), s["faults"][f]["clean"].as_u64()), (Some(*n), Some(*n)), "{f}: {s}");
    }
    // Each cycle's windows: a power cut hits both ports (none judged), a pull or a reset one
    // port, the ports hit by one-port faults alternating A, B, A, ...
    let mut hit_one = Vec::new();
    for (cycle, f) in &fault_of {
        let w: Vec<&Value> = ev.iter().filter(|e| e["event"] == "port_window" && e["cycle"] == *cycle).collect();
        let faulted: Vec<&str> = w.iter().filter(|e| e["faulted"] == true).map(|e| e["name"].as_str().unwrap()).collect();
        if f == "power-cut" {
            assert_eq!(faulted, ["A", "B"], "cycle {cycle} ({f})");
            assert!(ev.iter().any(|e| e["event"] == "power_restored" && e["cycle"] == *cycle), "cycle {cycle}: power back on");
        } else {
            assert_eq!(faulted.len(), 1, "cycle {cycle} ({f}): {faulted:?}");
            hit_one.push(faulted[0].to_string());
        }
    }
    let turns: Vec<&str> = (0..hit_one.len()).map(|i| if i % 2 == 0 { "A" } else { "B" }).collect();
    assert_eq!(hit_one, turns, "one-port faults hit A and B in turn");
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    assert!(fault_of.iter().all(|(c, f)| junit.contains(&format!("cycle {c} ({f})"))), "the JUnit cases name the faults");
    // The hold sweep: each cycle's off time, each pull held that long (its command's round
    // trip), and the cycles per fault and off time.
    for e in ev.iter().filter(|e| e["event"] == "cycle_started") {
        let c = e["cycle"].as_u64().unwrap();
        assert_eq!(e["off_time_ms"].as_u64(), Some(if c % 2 == 1 { 20 } else { 200 }), "{e}");
    }
    for e in ev.iter().filter(|e| e["event"] == "cut_issued" && fault_of[&e["cycle"].as_u64().unwrap()] == "port-pull") {
        let held_ms = e["command_us"].as_u64().unwrap() / 1000;
        assert!(held_ms >= if e["cycle"].as_u64().unwrap() % 2 == 1 { 20 } else { 200 }, "{e}");
    }
    let per: Vec<(String, u64, u64)> = s["fault_off_times"]
        .as_array()
        .unwrap_or_else(|| panic!("{s}"))
        .iter()
        .map(|r| (r["fault"].as_str().unwrap().to_string(), r["off_time_ms"].as_u64().unwrap(), r["cycles"].as_u64().unwrap()))
        .collect();
    assert_eq!(per.iter().map(|r| r.2).sum::<u64>(), 11, "{per:?}");
    for (f, ms, n) in &per {
        let want = fault_of.iter().filter(|(c, g)| *g == f && (if *c % 2 == 1 { 20 } else { 200 }) == *ms).count() as u64;
        assert_eq!(*n, want, "{f} at {ms} ms: {per:?}");
    }
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<th>fault, off time</th>") && html.contains("<td>port-pull, 20 ms</td>"), "report.html");
    let _ = std::fs::remove_dir_all(&dir);

    // In sequence: 3 pulls, a reset, 2 power cuts (cycles 5 and 6).
    let dir = scratch("soak-lossy");
    let args = ["--cycles", "6", "--set", "fault.pick=\"sequence\"", "--model", "dual-lose-cache-at-cut", "--set", SMALL];
    let o = run(&[&["run", soak, "--run-dir", dir.to_str().unwrap()][..], &args].concat());
    assert_eq!(o.status.code(), Some(1), "seed 20261203: {}", text(&o));
    let ev = events(&dir);
    let power: Vec<u64> =
        ev.iter().filter(|e| e["event"] == "cycle_started" && e["fault"] == "power-cut").map(|e| e["cycle"].as_u64().unwrap()).collect();
    let lost: Vec<u64> = ev
        .iter()
        .filter(|e| e["event"] == "finding" && e["finding"]["class"] == "lost_write")
        .map(|e| e["cycle"].as_u64().unwrap())
        .collect();
    assert_eq!(power, [5, 6], "in sequence, by weight");
    assert!(!lost.is_empty(), "seed 20261203: the cache lost at the power cuts");
    assert!(lost.iter().all(|c| power.contains(c)), "lost writes in cycles {lost:?}, power cuts in {power:?}");
    let _ = std::fs::remove_dir_all(&dir);

    // A dual-port mix names the ports it faults in dual.fault_ports, as a single fault does.
    let dir = scratch("soak-port");
    let o = run(&["run", soak, "--run-dir", dir.to_str().unwrap(), "--set", "fault.faults.0.fault.port=\"A\""]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("fault.faults[0].fault.port"), "{}", text(&o));
}

/// `faultline emulate nbd --model MODEL` for a dual-port model: one NBD export per port and a
/// Quarch hot-plug module (power, and PORT_A/PORT_B pulls). Returns the emulator, the two
/// URIs and the module's controller URI.
pub(crate) fn emulated_dual(model: &str, truth: &std::path::Path) -> (std::process::Child, [String; 2], String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(crate::common::BIN)
        .args(["emulate", "nbd", "--tcp", "127.0.0.1:0", "--model", model, "--seed", "20261204", "--quarch-pty", "--quiet"])
        .args(["--capacity-bytes", "16777216"])
        .arg("--truth-out")
        .arg(truth)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "emulate ended early: {banner:?}");
        if line.starts_with("stop with") {
            break;
        }
        banner.push(line.trim_end().to_string());
    }
    let field = |p: &str| banner.iter().find_map(|l| l.strip_prefix(p)).unwrap_or_else(|| panic!("no {p} in {banner:?}")).to_string();
    let power = field("power: quarch+serial://");
    let pty = power.split_whitespace().next().unwrap().to_string();
    (child, [field("nbd uri A: "), field("nbd uri B: ")], format!("quarch+serial://{pty}"))
}

/// A dual-port scenario over two NBD exports, its fault through the Quarch module.
fn nbd_dual_scenario(dir: &std::path::Path, uris: &[String; 2], quarch: &str, power_cut: bool) -> PathBuf {
    let fault = if power_cut {
        format!("[controllers]\npower = \"{quarch}\"\n[fault]\nkind = \"power_cut\"\n[dual]\nfault_ports = [\"A\"]\n")
    } else {
        format!("[controllers]\nlink = \"{quarch}\"\n[fault]\nkind = \"link_reset\"\nreset = \"port_pull\"\n[dual]\nfault_ports = [\"A\", \"B\"]\n")
    };
    let text = format!(
        r#"format_version = 1
name = "dualport-nbd"
seed = 20261204
contract = "plp"
[target]
path = "{a}"
[[ports]]
name = "A"
path = "{a}"
[[ports]]
name = "B"
path = "{b}"
[workload]
pattern = {{ kind = "random" }}
span_end_bytes = 8388608
min_write_bytes = 4096
max_write_bytes = 65536
mean_write_bytes = 16384
align_bytes = 4096
queue_depth = 16
[cut]
kind = "after_completions"
completions = 1
[cycles]
count = 4
off_time_ms = 200
readiness_timeout_s = 10
[verify]
sample_bytes = 1048576
full_every_cycles = 2
[stop]
on_finding = "continue"
{fault}warmup_ms = 100
baseline_ms = 300
settle_ms = 100
cross_verify = true
compare_ports = true
budget = {{ io_errors = 0, max_stall_ms = 500, min_throughput_ratio = 0.3, max_p99_ratio = 6.0 }}
"#,
        a = uris[0],
        b = uris[1],
    );
    let p = dir.join("dualport-nbd.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// The simulated dual-port drive served over NBD, one export per port (what two hosts, or two
/// agents, each reach one port through), run by faultline's NBD client as a real dual-port
/// drive: port pulls through the Quarch module's PORT_A/PORT_B signals, the other port judged
/// (honest: clean; a drive that freezes the other port: `port_disturbance`), and a power cut of
/// the whole drive with a drive that loses its shared cache (`lost_write`, read through both
/// ports).
#[test]
fn a_dual_port_drive_served_over_nbd_one_export_per_port_is_run_as_a_real_one() {
    let _one = one_at_a_time();
    for (model, power_cut, code) in [("dual-honest", false, 0), ("dual-freeze-on-pull", false, 1), ("dual-lose-cache-at-cut", true, 1)] {
        let dir = scratch(&format!("nbd-{model}"));
        std::fs::create_dir_all(&dir).unwrap();
        let truth = dir.join("truth.json");
        let (mut child, uris, quarch) = emulated_dual(model, &truth);
        let sc = nbd_dual_scenario(&dir, &uris, &quarch, power_cut);
        let rd = dir.join("run");
        let o = run(&["run", sc.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]);
        let _ = std::process::Command::new("kill").arg(child.id().to_string()).status();
        assert!(child.wait().unwrap().success());
        let ctx = format!("{model}, seed 20261204: {}", text(&o));
        assert_eq!(o.status.code(), Some(code), "{ctx}");
        let n = kinds(&rd);
        assert_eq!(n.get("cycle_ended"), Some(&4), "{n:?}\n{ctx}");
        assert_eq!(n.get("harness_error"), None, "{n:?}\n{ctx}");
        let s: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
        let ports = s["ports"].as_array().unwrap();
        match model {
            "dual-honest" => {
                assert_eq!((n.get("link_restored"), n.get("ready")), (Some(&4), Some(&4)), "{n:?}");
                assert!(ports.iter().all(|p| p["disturbed"] == false && p["cycles_judged"] == 2), "{s}");
            }
            "dual-freeze-on-pull" => {
                assert!(s["findings_per_class"]["port_disturbance"].as_u64().unwrap_or(0) >= 2, "{s}\n{ctx}");
            }
            _ => {
                assert_eq!((n.get("power_restored"), n.get("ready")), (Some(&4), Some(&8)), "{n:?}");
                let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
                assert!(log.contains("read through ports A and B") || log.contains("read through ports B and A"), "{ctx}");
                assert!(s["findings_per_class"]["lost_write"].as_u64().unwrap_or(0) >= 1, "{s}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
