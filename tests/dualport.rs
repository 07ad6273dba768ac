//! Dual-port runs on the simulated dual-port drive: the shipped demo through the CLI (honest:
//! exit 0; a drive that freezes the other port: `port_disturbance`, exit 1), the performance
//! mode, and what a dual-port scenario refuses. (The dual-port models against the drive's
//! ground truth are rows of the detection matrix: tests/detection_matrix.rs.)

use crate::common::{run, text};
use serde_json::Value;
use std::path::PathBuf;

/// A run directory that does not exist yet.
fn scratch(name: &str) -> PathBuf {
    let d = crate::common::scratch(name);
    let _ = std::fs::remove_dir(&d);
    d
}

/// Dual-port runs measure the ports' figures: each runs [`crate::common::alone`], so that no
/// other test's writers take the CPU from its judged port.
fn one_at_a_time() -> std::sync::RwLockWriteGuard<'static, ()> {
    crate::common::alone()
}

/// The shipped demo, 4 of its 10 pulls (each port hit twice, judged twice): within the suite's
/// time (the whole demo twice took 46 s of it).
fn run_demo(model: &str, dir: &std::path::Path) -> (i32, Value) {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml");
    let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--model", model, "--cycles", "4"]);
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

/// The two-host demo (scenarios/two-host-demo.toml), 4 of its 6 cycles: each port on a host of
/// its own, an agent started here for each, and each cycle cuts one host's power (SIGKILL of its
/// agent's process group) while the other host writes. Honest: clean, each killed host dialled
/// again (a new agent process) and its share verified; every surviving port judged through the
/// completions its agent streamed. A drive that stalls the other port when one port's link
/// drops (`dual-freeze-on-pull`; a host that loses power drops its link): `port_disturbance` on
/// the surviving host's port, every cycle.
#[test]
fn two_hosts_one_drive_a_host_power_cut_is_clean_on_an_honest_drive_and_a_drive_that_freezes_the_other_port_is_found() {
    let _one = one_at_a_time();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml");
    for (model, code) in [("dual-honest", 0), ("dual-freeze-on-pull", 1)] {
        let dir = scratch(&format!("two-host-{model}"));
        let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--model", model, "--cycles", "4"]);
        let summary =
            std::fs::read_to_string(dir.join("summary.json")).unwrap_or_else(|e| panic!("{model}: no summary ({e}): {}", text(&o)));
        let s: Value = serde_json::from_str(&summary).unwrap();
        assert_eq!(o.status.code(), Some(code), "{model}: {}\n{s}", text(&o));
        let ev = events(&dir);
        let of = |kind: &str| ev.iter().filter(|e| e["event"] == kind).collect::<Vec<_>>();
        // Each cycle: the cut (the host's writes counted from what this machine held), the
        // host's power back, its port ready again, every share verified.
        for k in ["cut_issued", "power_restored", "ready", "verified", "cycle_ended"] {
            assert_eq!(of(k).len(), 4, "{model}: {k}: {}", text(&o));
        }
        assert!(of("cut_issued").iter().all(|e| e["completions"].as_u64().unwrap() > 0), "{model}");
        assert!(of("verified").iter().all(|e| e["counts"].as_object().unwrap().iter().all(|(k, n)| k == "port_disturbance" || n == 0)));
        // A host cut is a new agent process when it is dialled again.
        let pids = agent_pids(&ev);
        assert_eq!(pids.len(), 2 + 4, "{model}: two agents, then one more per cut: {pids:?}");
        assert!(of("agent_log").iter().any(|e| e.to_string().contains("request") && e.to_string().contains("cycle")), "{model}");
        assert!(of("controller_log").iter().any(|e| e.to_string().contains("SIGKILL to process group")), "{model}");
        let ports = s["ports"].as_array().unwrap();
        assert!(ports.iter().all(|p| p["cycles_judged"] == 2 && p["cycles_faulted"] == 2), "{model}: {s}");
        if code == 0 {
            assert!(ports.iter().all(|p| p["disturbed"] == false && p["io_errors"] == 0), "{s}");
        } else {
            let found: Vec<(u64, String)> = of("finding")
                .iter()
                .filter(|e| e["finding"]["class"] == "port_disturbance")
                .map(|e| (e["cycle"].as_u64().unwrap(), e["finding"]["detail"].as_str().unwrap().to_string()))
                .collect();
            for (c, judged, hit) in [(1, "B", "A"), (2, "A", "B"), (3, "B", "A"), (4, "A", "B")] {
                let want = format!("port {judged}, while port {hit} was faulted: no write completed for");
                assert!(found.iter().any(|(k, d)| *k == c && d.starts_with(&want)), "cycle {c}: {want}: {found:?}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A host's clean shutdown and its power cut, in turn (`scenarios/two-host-shutdown.toml`),
/// each host's share prefilled through its agent first (recorded here once the agent says it
/// is flushed; the full verifies of cycles 2 and 4 read the prefill pattern back): A
/// then B shut down cleanly (each agent asked for the `shutdown` placement: drain, flush, hand
/// over what is durable, then the host goes down), then A's and B's power is cut with writes
/// in flight. Each host comes back as a new agent, every share verifies clean, the other host
/// is judged in every cycle and undisturbed, and the drive's ground truth agrees. That the
/// coordinator then lacks no acknowledged write is `tests/agent.rs:
/// a_host_clean_shutdown_leaves_the_coordinator_holding_every_acknowledged_write`.
#[test]
fn a_host_shut_down_cleanly_then_one_whose_power_is_cut_each_come_back_and_the_other_host_is_judged() {
    let _one = one_at_a_time();
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-shutdown.toml");
    let dir = scratch("two-host-shutdown");
    // Each host prefills its share first, through its agent.
    let o = run(&["run", scenario, "--run-dir", dir.to_str().unwrap(), "--check-truth", "--set", "workload.prefill=true"]);
    assert_eq!(o.status.code(), Some(0), "seed 20261206: {}", text(&o));
    for (port, share) in [("A", "\"span_start\":0,\"span_end\":33554432"), ("B", "\"span_start\":33554432,\"span_end\":67108864")] {
        let ledger = String::from_utf8_lossy(&std::fs::read(dir.join(format!("ports/{port}/ledger.fl"))).unwrap()).into_owned();
        assert!(ledger.contains(&format!("\"type\":\"prefill_done\",{share}")), "port {port} prefilled its share {share}");
    }
    assert!(text(&o).contains("ground truth: faultline and the drive agree"), "{}", text(&o));
    let ev = events(&dir);
    let of = |kind: &str| ev.iter().filter(|e| e["event"] == kind).collect::<Vec<_>>();
    let faults: Vec<&str> = of("cycle_started").iter().map(|e| e["fault"].as_str().unwrap()).collect();
    assert_eq!(faults, ["host-shutdown", "host-shutdown", "host-power-cut", "host-power-cut"], "{}", text(&o));
    for k in ["cut_issued", "power_restored", "ready", "verified", "cycle_ended"] {
        assert_eq!(of(k).len(), 4, "{k}: {}", text(&o));
    }
    // What each faulted host was asked for, in the audit of what the coordinator sent.
    let sent: Vec<String> = of("agent_log").iter().map(|e| e.to_string()).collect();
    let asked = |host: &str, cycle: u32, cut: &str| {
        sent.iter().any(|l| l.contains(host) && l.contains(&format!("cycle {cycle} first id")) && l.contains(&format!("cut Some({cut}")))
    };
    for (cycle, host, cut) in [(1, "host-a", "Shutdown"), (2, "host-b", "Shutdown"), (3, "host-a", "AfterTime"), (4, "host-b", "AfterTime")]
    {
        assert!(asked(host, cycle, cut), "cycle {cycle}: {host} asked for {cut}: {sent:?}");
    }
    let pids = agent_pids(&ev);
    assert_eq!(pids.len(), 2 + 4, "two agents, then one more per host brought down: {pids:?}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    for f in ["host-shutdown", "host-power-cut"] {
        assert_eq!((s["faults"][f]["cycles"].as_u64(), s["faults"][f]["clean"].as_u64()), (Some(2), Some(2)), "{f}: {s}");
    }
    let ports = s["ports"].as_array().unwrap();
    assert!(ports.iter().all(|p| p["cycles_judged"] == 2 && p["cycles_faulted"] == 2 && p["disturbed"] == false), "{s}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the two-host demo for 2 cycles with `sets` (a fault of every host at once), with its
/// ground truth; checks what every such run shows: exit 0, the truth agreeing, both hosts
/// taken down in the ports' order each cycle, and no port judged (the fault hit every port).
/// Returns the events.
fn every_host_at_once(name: &str, sets: &[&str]) -> Vec<Value> {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml");
    let dir = scratch(name);
    let mut args = vec!["run", demo, "--run-dir", dir.to_str().unwrap(), "--cycles", "2", "--check-truth"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let o = run(&args);
    assert_eq!(o.status.code(), Some(0), "seed 20261205: {}", text(&o));
    assert!(text(&o).contains("ground truth: faultline and the drive agree"), "{}", text(&o));
    let ev = events(&dir);
    for log in ev.iter().filter(|e| e["event"] == "controller_log") {
        let lines: Vec<&str> = log["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
        let kills: Vec<&str> = lines.iter().filter(|l| l.contains("SIGKILL")).map(|l| &l[..6]).collect();
        assert_eq!(kills, ["host-a", "host-b"], "{lines:?}");
    }
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!((s["cycles_done"].as_u64(), s["findings"].as_u64()), (Some(2), Some(0)), "{s}");
    assert!(s["ports"].as_array().unwrap().iter().all(|p| p["cycles_judged"] == 0), "{s}");
    let _ = std::fs::remove_dir_all(&dir);
    ev
}

/// Both hosts at once, staggered (`all_hosts`, `stagger_ms`): each cycle cuts host A, then host B
/// 150 ms later, holds both off, restores them in the same order; both are dialled again, no
/// port is judged (the fault hit every port), every share verifies clean, and the drive's
/// ground truth agrees. The cut is recorded once per cycle.
#[test]
fn every_host_cut_at_once_staggered_comes_back_and_verifies_clean() {
    let _one = one_at_a_time();
    let ev = every_host_at_once("two-host-all", &["fault.all_hosts=true", "fault.stagger_ms=150"]);
    let of = |kind: &str| ev.iter().filter(|e| e["event"] == kind).collect::<Vec<_>>();
    assert_eq!((of("cut_issued").len(), of("ready").len(), of("cycle_ended").len()), (2, 4, 2));
    // Off A, 150 ms, off B, the off time (300 ms), on A, 150 ms, on B.
    assert!(of("cut_issued").iter().all(|e| e["command_us"].as_u64().unwrap() >= 600_000), "{:?}", of("cut_issued"));
}

/// Every host shut down cleanly at once (`host_shutdown` with `all_hosts`): each cycle, both
/// hosts' agents are asked for the `shutdown` placement (drain, flush, hand over what is
/// durable), and only once both have drained does either host go down: each agent asks for
/// the cut and hears it done, none is killed mid-drain by the other's cut. Both are
/// dialled again, no port is judged (the fault hit every port), every share verifies clean,
/// and the drive's ground truth agrees.
#[test]
fn every_host_shut_down_at_once_drains_both_before_either_goes_and_verifies_clean() {
    let _one = one_at_a_time();
    let ev = every_host_at_once("two-host-all-shutdown", &["fault.kind=host_shutdown", "fault.all_hosts=true"]);
    for cycle in [1, 2] {
        let lines: Vec<&str> = ev
            .iter()
            .filter(|e| e["event"] == "agent_log" && e["cycle"] == cycle)
            .flat_map(|e| e["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()))
            .collect();
        for host in ["host-a", "host-b"] {
            let mine = |what: &[&str]| lines.iter().any(|l| l.contains(&format!("{host} request")) && what.iter().all(|w| l.contains(w)));
            let asked = mine(&[&format!("cycle {cycle} first id"), "cut Some(Shutdown"]);
            assert!(asked, "cycle {cycle}: {host} asked to shut down: {lines:?}");
            // It drained, then asked for the cut and heard it done: a host killed by another's
            // cut before its own drain ended would never ask.
            assert!(mine(&[": cut done"]), "cycle {cycle}: {host} drained and asked for the cut: {lines:?}");
        }
    }
}

/// Each share of a run across hosts verified and compared through the other host's port too
/// (`dual.cross_verify`, `dual.compare_ports`; protocol version 6): each host's agent is sent
/// both shares' histories and verifies both through its own port, so every cycle reads twice
/// the sectors a run without them reads (the same seeded regions), and the honest drive is
/// clean through both ports, the ground truth agreeing.
#[test]
fn two_hosts_each_share_verified_and_compared_through_the_other_hosts_port_too() {
    let _one = one_at_a_time();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml");
    let sectors = |cross: bool| {
        let dir = scratch(if cross { "two-host-cross" } else { "two-host-own" });
        let mut args = vec!["run", demo, "--run-dir", dir.to_str().unwrap(), "--cycles", "2", "--check-truth"];
        if cross {
            args.extend(["--set", "dual.cross_verify=true", "--set", "dual.compare_ports=true"]);
        }
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "seed 20261205: cross {cross}: {}", text(&o));
        assert!(text(&o).contains("ground truth: faultline and the drive agree"), "{}", text(&o));
        let ev = events(&dir);
        let lines: Vec<String> = ev
            .iter()
            .filter(|e| e["event"] == "agent_log")
            .flat_map(|e| e["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect::<Vec<_>>())
            .collect();
        for (host, other) in [("host-a", "B"), ("host-b", "A")] {
            let read =
                lines.iter().any(|l| l.contains(&format!("{host} request")) && l.contains(&format!("regions of share {other} digest")));
            assert_eq!(read, cross, "{host} verified share {other}: {lines:#?}");
        }
        let n: u64 = ev.iter().filter(|e| e["event"] == "verified").map(|e| e["sectors"].as_u64().unwrap()).sum();
        let _ = std::fs::remove_dir_all(&dir);
        n
    };
    let (own, both) = (sectors(false), sectors(true));
    assert!(own > 0 && both == 2 * own, "sectors read: each through its own port {own}, through both {both}");
}

/// A host that does not boot after its power cut (its agent cannot be dialled again: here its
/// transport refuses every start after the first) is a `dead_host` finding within the readiness
/// timeout, naming the host and the port, and `stop.on_dead_host = "stop"` (the default) ends
/// the run there; the other host's cycle is unaffected.
#[test]
fn a_host_that_does_not_come_back_after_its_power_cut_is_a_dead_host_finding_and_the_stop_policy_ends_the_run() {
    let _one = one_at_a_time();
    let dir = scratch("dead-host");
    std::fs::create_dir_all(&dir).unwrap();
    let mark = dir.join("host-b-booted-once");
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml")).unwrap();
    let b = "name = \"B\"\nhost = \"host-b\"\ntransport = [\"{faultline}\", \"agent\", \"--stdio\", \"--target\", \"{target}\"]";
    assert!(demo.contains(b));
    let refusing = format!(
        "name = \"B\"\nhost = \"host-b\"\ntransport = [\"sh\", \"-c\", 'if [ -e \"$2\" ]; then echo \"host-b: no route to host\" >&2; exit 255; fi; : > \"$2\"; exec \"$0\" agent --stdio --target \"$1\"', \"{{faultline}}\", \"{{target}}\", \"{}\"]",
        mark.display()
    );
    let scenario = dir.join("dead-host.toml");
    let edited = demo
        .replace(b, &refusing)
        .replace("readiness_timeout_s = 20", "readiness_timeout_s = 3")
        .replace("name = \"two-host-demo\"", "name = \"dead-host\"");
    std::fs::write(&scenario, edited).unwrap();
    let run_dir = dir.join("run");
    let o = run(&["run", scenario.to_str().unwrap(), "--run-dir", run_dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let ev = events(&run_dir);
    let dead: Vec<&Value> = ev.iter().filter(|e| e["event"] == "finding" && e["finding"]["class"] == "dead_host").collect();
    assert_eq!(dead.len(), 1, "{}", text(&o));
    assert_eq!(dead[0]["cycle"], 2, "cycle 1 cut host A, which came back; cycle 2 cut host B");
    let detail = dead[0]["finding"]["detail"].as_str().unwrap();
    assert!(detail.starts_with("port B: host-b: its agent did not answer within 3 s"), "{detail}");
    let stopped = ev.iter().find(|e| e["event"] == "run_stopped").unwrap_or_else(|| panic!("{}", text(&o)));
    assert_eq!(stopped["reason"], "cycle 2: a host did not come back (stop.on_dead_host = \"stop\")", "{}", text(&o));
    assert!(text(&o).contains("stopped after 2 of 6 cycles: cycle 2: a host did not come back"), "{}", text(&o));
    // Cycle 1 (host A's cut) was clean.
    assert!(ev.iter().any(|e| e["event"] == "cycle_ended" && e["cycle"] == 1 && e["verdict"] == "clean"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real drive's ports on two hosts: `faultline emulate nbd --model dual-honest` serves the
/// drive as two NBD exports (one per port, as a real drive's two paths), and each host's
/// agent lists its port's export as its target, as a server lists its `/dev/nvme0n1`. The run
/// holds both ports to one namespace, cuts each host in turn while the other writes, and is
/// clean; the drive's own ground truth holds no loss.
#[test]
fn a_real_drives_ports_on_two_hosts_are_held_to_one_namespace_and_each_host_cut_is_clean() {
    let _one = one_at_a_time();
    let dir = scratch("two-host-real");
    std::fs::create_dir_all(&dir).unwrap();
    let truth = dir.join("truth.json");
    let (mut child, uris, _quarch) = emulated_dual("dual-honest", &truth);
    let port = |name: &str, uri: &str| {
        format!(
            "[[ports]]\nname = \"{name}\"\nhost = \"host-{name}\"\npath = \"{uri}\"\ntransport = [\"{{faultline}}\", \"agent\", \"--stdio\", \"--target\", \"{{target}}\"]\nhost_power = \"kill\"\n"
        )
    };
    let text_of = format!(
        r#"format_version = 1
name = "two-host-real"
seed = 20261205
contract = "plp"
[target]
size_bytes = 67108864
[workload]
pattern = {{ kind = "random" }}
span_end_bytes = 33554432
min_write_bytes = 4096
max_write_bytes = 65536
mean_write_bytes = 16384
align_bytes = 4096
queue_depth = 16
{a}{b}[fault]
kind = "host_power_cut"
[cut]
kind = "after_completions"
completions = 1
[cycles]
count = 2
off_time_ms = 200
readiness_timeout_s = 10
[verify]
sample_bytes = 1048576
full_every_cycles = 2
[dual]
fault_ports = ["A", "B"]
warmup_ms = 100
baseline_ms = 300
settle_ms = 100
cross_verify = false
compare_ports = false
budget = {{ io_errors = 0, max_stall_ms = 500, min_throughput_ratio = 0.3, max_p99_ratio = 6.0 }}
"#,
        a = port("A", &uris[0]),
        b = port("B", &uris[1]),
    );
    let sc = dir.join("two-host-real.toml");
    std::fs::write(&sc, text_of).unwrap();
    let rd = dir.join("run");
    let o = run(&["run", sc.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]);
    let _ = std::process::Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let n = kinds(&rd);
    assert_eq!((n.get("cycle_ended"), n.get("ready"), n.get("harness_error")), (Some(&2), Some(&2), None), "{n:?}\n{}", text(&o));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    assert!(s["ports"].as_array().unwrap().iter().all(|p| p["cycles_judged"] == 1 && p["disturbed"] == false), "{s}");
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
    assert_eq!(t.as_array().map(Vec::len), Some(0), "the drive's truth: {t}");
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

/// A host's own link reset needs the NVMe controller behind its port's path: an agent whose
/// target is an NBD export has none, and says so when the coordinator opens its port, before
/// anything is written (the run directory holds no cycle).
#[test]
fn a_host_link_reset_of_an_agent_whose_target_has_no_controller_is_refused_before_any_write() {
    let _one = one_at_a_time();
    let dir = scratch("host-reset-nbd");
    std::fs::create_dir_all(&dir).unwrap();
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml")).unwrap();
    let scenario = dir.join("reset.toml");
    std::fs::write(
        &scenario,
        demo.replace("[fault]\nkind = \"host_power_cut\"", "[fault]\nkind = \"host_link_reset\"\nreset = \"nvme_controller\""),
    )
    .unwrap();
    let run_dir = dir.join("run");
    let o = run(&["run", scenario.to_str().unwrap(), "--run-dir", run_dir.to_str().unwrap()]);
    let out = text(&o);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("this host cannot run the run's link reset: nvme-controller-reset: nbd+unix://")
            && out.contains("is an NBD export, with no NVMe controller or PCI function on this host to reset"),
        "{out}"
    );
    assert!(
        !run_dir.join("events.jsonl").exists() || !std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap().contains("cycle_started"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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

/// The performance mode across hosts (the two-host demo, `dual.mode = "performance"`): each
/// host's agent writes through its port in turn and together, and runs the read load over the
/// wire (`read_load`, protocol version 6), its completions put into the windows on this
/// machine's clock; every phase measures a rate for each port it ran on.
#[test]
fn performance_mode_across_hosts_runs_each_phase_and_the_read_load_through_the_agents() {
    let _one = one_at_a_time();
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/two-host-demo.toml");
    let dir = scratch("two-host-perf");
    let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--set", "dual.mode=performance", "--set", "dual.perf_ms=300"]);
    assert_eq!(o.status.code(), Some(0), "seed 20261205: {}", text(&o));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let perf = s["performance"].as_array().unwrap_or_else(|| panic!("no performance: {s}"));
    let workloads: Vec<&str> = perf.iter().map(|w| w["workload"].as_str().unwrap()).collect();
    assert_eq!(workloads, ["seq-read-128k-qd1", "write"], "{s}");
    for w in perf {
        for (phase, ports) in [("A only", &["A"][..]), ("B only", &["B"][..]), ("A+B", &["A", "B"][..])] {
            for p in ports {
                assert!(w["mb_s"][phase][p].as_f64().is_some_and(|v| v > 0.0), "{phase} {p}: {w}");
            }
        }
    }
    let lines: Vec<String> = events(&dir)
        .iter()
        .filter(|e| e["event"] == "agent_log")
        .flat_map(|e| e["lines"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_string()).collect::<Vec<_>>())
        .collect();
    for host in ["host-a", "host-b"] {
        assert!(lines.iter().any(|l| l.contains(&format!("{host} request")) && l.contains("read load over")), "{host}: {lines:#?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
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
fn kinds(dir: &std::path::Path) -> std::collections::BTreeMap<String, usize> {
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
    let o = run(&["run", plp, "--run-dir", dir.to_str().unwrap(), "--cycles", "3", "--set", "workload.prefill=true"]);
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
        let share = if port == "A" { "\"span_start\":0,\"span_end\":33554432" } else { "\"span_start\":33554432,\"span_end\":67108864" };
        assert!(ledger.contains(&format!("\"type\":\"prefill_done\",{share}")), "port {port} prefilled its share {share}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    let dir = scratch("plp-lossy");
    let o = run(&["run", plp, "--run-dir", dir.to_str().unwrap(), "--cycles", "3", "--model", "dual-lose-cache-at-cut"]);
    assert_eq!(o.status.code(), Some(1), "seed 20261202: {}", text(&o));
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let lost: Vec<&str> = log.lines().filter(|l| l.contains("\"event\":\"finding\"") && l.contains("\"lost_write\"")).collect();
    // The same loss read through both ports is one finding naming both.
    for words in ["port A's share, read through ports A and B: ", "port B's share, read through ports B and A: "] {
        assert!(lost.iter().any(|l| l.contains(words)), "no lost_write in {words}: {} lost_write findings", lost.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pids of the agents a run dialled (each a `note` naming the agent and its clock offset):
/// a host brought down is a new agent when it is dialled again.
fn agent_pids(ev: &[Value]) -> std::collections::BTreeSet<String> {
    ev.iter()
        .filter(|e| e["event"] == "note")
        .filter_map(|e| e["message"].as_str())
        .filter(|m| m.contains(": agent faultline") && m.contains("clock offset"))
        .map(|m| m.split("(pid ").nth(1).unwrap().split(')').next().unwrap().to_string())
        .collect()
}

/// The events of a run directory, parsed.
fn events(dir: &std::path::Path) -> Vec<Value> {
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
    let dir = scratch("soak-honest");
    let o = run(&["run", soak, "--run-dir", dir.to_str().unwrap(), "--cycles", "11"]);
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
    let _ = std::fs::remove_dir_all(&dir);

    // In sequence: 3 pulls, a reset, 2 power cuts (cycles 5 and 6).
    let dir = scratch("soak-lossy");
    let args = ["--cycles", "6", "--set", "fault.pick=\"sequence\"", "--model", "dual-lose-cache-at-cut"];
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
fn emulated_dual(model: &str, truth: &std::path::Path) -> (std::process::Child, [String; 2], String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(crate::common::BIN)
        .args(["emulate", "nbd", "--tcp", "127.0.0.1:0", "--model", model, "--seed", "20261204", "--quarch-pty", "--quiet"])
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
span_end_bytes = 33554432
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
