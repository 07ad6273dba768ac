//! Dual-port runs whose ports are on other hosts (the two-host demo: each port's writer an
//! agent, the simulated drive served to them over NBD): host power cuts and clean shutdowns,
//! one host or every host at once, a host that does not come back, a real drive's ports on
//! two hosts, cross-port verification and the performance mode over the wire.

use super::dualport::{emulated_dual, events, kinds, one_at_a_time, scratch, SMALL};
use crate::common::{run, text};
use serde_json::Value;

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
        let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--model", model, "--cycles", "4", "--set", SMALL]);
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
    let o = run(&["run", scenario, "--run-dir", dir.to_str().unwrap(), "--check-truth", "--set", "workload.prefill=true", "--set", SMALL]);
    assert_eq!(o.status.code(), Some(0), "seed 20261206: {}", text(&o));
    for (port, share) in [("A", "\"span_start\":0,\"span_end\":8388608"), ("B", "\"span_start\":8388608,\"span_end\":16777216")] {
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
    let mut args = vec!["run", demo, "--run-dir", dir.to_str().unwrap(), "--cycles", "2", "--check-truth", "--set", SMALL];
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
        let mut args = vec!["run", demo, "--run-dir", dir.to_str().unwrap(), "--cycles", "2", "--check-truth", "--set", SMALL];
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
size_bytes = 16777216
[workload]
pattern = {{ kind = "random" }}
span_end_bytes = 8388608
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
