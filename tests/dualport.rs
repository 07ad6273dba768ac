//! Dual-port runs on the simulated dual-port drive: the detection matrix's dual-port rows
//! against the drive's ground truth, the shipped demo through the CLI (honest: exit 0; a drive
//! that freezes the other port: `port_disturbance`, exit 1), and what a dual-port scenario
//! refuses. Seeds are fixed and printed on failure.

mod common;

use common::{run, text};
use faultline::selftest::{run_dual_matrix, table, MatrixOptions};
use serde_json::Value;
use std::path::PathBuf;

/// A run directory that does not exist yet.
fn scratch(name: &str) -> PathBuf {
    let d = common::scratch(name);
    let _ = std::fs::remove_dir(&d);
    d
}

#[test]
fn dual_port_rows_of_the_matrix_match_ground_truth() {
    let seed = std::env::var("FAULTLINE_MATRIX_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20261201);
    let opts = MatrixOptions { seed, honest_cycles: 0, faulty_cycles: 8, span_bytes: 2 << 20, dual_honest_cycles: 40 };
    let dir = scratch("matrix");
    let rows = run_dual_matrix(&opts, &dir, &mut |_| {}, 0).unwrap_or_else(|e| panic!("dual matrix seed {seed}: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    println!("{}", table(&rows));
    for r in rows.iter().filter(|r| r.first_problem.is_some()) {
        println!("{} (row seed {}): {}", r.model, r.seed, r.first_problem.clone().unwrap_or_default());
    }
    for r in &rows {
        assert!(r.clean(), "dual matrix seed {seed}: row {} (row seed {}): {}\n{}", r.model, r.seed, r.first_problem.clone().unwrap_or_default(), table(&rows));
        let injected: u64 = r.scores.values().map(|s| s.injected).sum();
        assert_eq!(injected > 0, !r.honest, "dual matrix seed {seed}: row {} injected {injected}\n{}", r.model, table(&rows));
    }
}

fn run_demo(model: &str, dir: &std::path::Path) -> (i32, Value) {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml");
    let o = run(&["run", demo, "--run-dir", dir.to_str().unwrap(), "--model", model]);
    let summary = std::fs::read_to_string(dir.join("summary.json")).unwrap_or_else(|e| panic!("{model}: no summary ({e}): {}", text(&o)));
    (o.status.code().unwrap_or(-1), serde_json::from_str(&summary).unwrap())
}

#[test]
fn the_dual_port_demo_is_clean_on_an_honest_drive_and_finds_a_drive_that_freezes_the_other_port() {
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
        assert_eq!(p["cycles_judged"], 5, "{p}");
    }
    assert!(dir.join("ports/A/ledger.fl").exists() && dir.join("ports/B/ledger.fl").exists());
    let _ = std::fs::remove_dir_all(&dir);

    let dir = scratch("freeze");
    let (code, s) = run_demo("dual-freeze-on-pull", &dir);
    assert_eq!(code, 1, "{s}");
    assert!(s["findings_per_class"]["port_disturbance"].as_u64().unwrap() >= 5, "{s}");
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
}

#[test]
fn an_nvm_subsystem_reset_hits_both_ports_and_judges_neither() {
    // NSSR resets every controller of the subsystem: the port it was issued through and the
    // other one. Judging the other against its baseline would call its write errors during
    // the reset a disturbance (a false finding on an honest drive).
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    let nssr = base.replace("reset = \"port_pull\"", "reset = \"nvme_subsystem\"").replace("count = 10", "count = 2");
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

#[test]
fn performance_mode_is_refused_before_anything_runs() {
    // Until the runner measures A only, B only and A+B, it must not run failover cycles (and
    // fault the drive) for a scenario that says no fault runs.
    let base = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/dualport-demo.toml")).unwrap();
    let perf = base.replace("[dual]\n", "[dual]\nmode = \"performance\"\n");
    assert_ne!(perf, base);
    let dir = scratch("perf");
    std::fs::create_dir_all(&dir).unwrap();
    let sf = dir.join("perf.toml");
    std::fs::write(&sf, perf).unwrap();
    let rd = dir.join("run");
    let o = run(&["run", sf.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("dual.mode = \\\"performance\\\"") || text(&o).contains("dual.mode = \"performance\""), "{}", text(&o));
    let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap_or_default();
    assert!(!log.contains("\"cycle_started\""), "no cycle ran: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}
