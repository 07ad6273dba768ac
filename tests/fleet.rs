//! `faultline report --fleet`: three demo runs made by the real binary (different seeds, one
//! drive with findings), moved under one directory as if copied from three hosts, plus a run
//! directory whose event log is corrupt. fleet.json must agree with each run's own
//! summary.json, fleet.html must link every run's report, and the corrupt run must get a row
//! saying what is wrong, without hiding the others.

use crate::common::{run, s, scratch, text};
use serde_json::Value;

/// (seed, model): the demo's own model (rollback) loses writes at every cut; honest-plp never.
const RUNS: [(u64, Option<&str>); 3] = [(101, None), (202, Some("honest-plp")), (303, Some("honest-plp"))];

#[test]
fn the_fleet_page_merges_runs_from_many_hosts_per_drive() {
    let root = scratch("fleet");
    let fleet = root.join("fleet");
    for (i, (seed, model)) in RUNS.iter().enumerate() {
        let made = root.join(format!("made-{seed}"));
        let seed_s = seed.to_string();
        let mut args = vec!["run", "--cycles", "12", "--seed", &seed_s, "--run-dir", s(&made)];
        if let Some(m) = model {
            args.extend(["--model", m]);
        }
        let o = run(&args);
        let want = if model.is_none() { 1 } else { 0 };
        assert_eq!(o.status.code(), Some(want), "seed {seed}: {}", text(&o));
        let host = fleet.join(format!("host-{i}"));
        std::fs::create_dir_all(&host).unwrap();
        std::fs::rename(&made, host.join(format!("run-{seed}"))).unwrap();
    }
    let broken = fleet.join("host-9/run-broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("events.jsonl"), "{\"v\":2,\"host\":\"local\",\"event\":\"run_started\",\"t_ns\":\"<b>soon</b>\"}\n")
        .unwrap();

    let out = root.join("out");
    let o = run(&["report", "--fleet", s(&fleet), "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "a fleet with findings exits 1\n{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("3 drives, 4 runs (1 with findings, 1 unreadable): findings"), "{}", text(&o));

    let f: Value = serde_json::from_str(&std::fs::read_to_string(out.join("fleet.json")).unwrap()).unwrap();
    assert_eq!(f["fleet_format"], 1);
    assert_eq!(f["unreadable"], 1);
    assert_eq!(f["verdict"], "findings");
    let drives = f["drives"].as_array().unwrap();
    assert_eq!(drives.len(), 3, "{f:#}");
    let html = std::fs::read_to_string(out.join("fleet.html")).unwrap();
    for (i, (seed, model)) in RUNS.iter().enumerate() {
        let dir = fleet.join(format!("host-{i}/run-{seed}"));
        let sum: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        let serial = format!("sim:{seed}");
        let d = drives.iter().find(|d| d["serial"] == serial.as_str()).unwrap_or_else(|| panic!("seed {seed}: no drive {serial} in {f:#}"));
        assert_eq!(d["model"], "simulated drive");
        assert!(d["firmware"].is_null(), "runs record no firmware");
        let rows = d["scenarios"].as_array().unwrap();
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!(row["scenario"], sum["scenario"]);
        assert_eq!(row["runs"], 1);
        assert_eq!(row["cycles"], sum["cycles_done"], "seed {seed}");
        assert_eq!(row["findings"], sum["findings"], "seed {seed}");
        assert_eq!(row["findings_per_class"], sum["findings_per_class"], "seed {seed}");
        assert_eq!(row["dead_devices"], sum["findings_per_class"]["dead_device"], "seed {seed}");
        assert_eq!(row["smart_anomalies"], sum["health_anomalies"], "seed {seed}");
        assert_eq!(row["verdict"], sum["verdict"], "seed {seed}");
        let ready = &sum["timings"]["first_read_us"];
        assert_eq!(row["time_to_ready"]["cycles"], ready["n"], "seed {seed}");
        assert_eq!(row["time_to_ready"]["p50_us"], ready["p50"], "seed {seed}");
        assert_eq!(row["time_to_ready"]["p99_us"], ready["p99"], "seed {seed}");
        if model.is_none() {
            assert!(sum["findings"].as_u64().unwrap() > 0, "the demo's drive must lose writes (seed {seed})");
        }
        let link = format!("../fleet/host-{i}/run-{seed}/report.html");
        assert_eq!(row["reports"], serde_json::json!([link]), "seed {seed}");
        assert!(out.join(&link).is_file(), "the link resolves from the fleet page: {link}");
        assert!(html.contains(&format!("href=\"{link}\"")), "seed {seed}: fleet.html does not link {link}");
    }
    let runs = f["runs"].as_array().unwrap();
    let bad = runs.iter().find(|r| r["dir"].as_str().unwrap().ends_with("run-broken")).unwrap();
    let why = bad["error"].as_str().unwrap();
    assert!(why.contains("events.jsonl") && why.contains("line 1"), "{why}");
    assert!(why.contains("<b>soon</b>"), "the error quotes what it found: {why}");
    assert!(html.contains("unreadable: ") && html.contains("&lt;b&gt;soon&lt;/b&gt;"), "the row says what is wrong, escaped");
    assert!(!html.contains("<b>soon</b>"), "text from a run is escaped");
    assert!(!html.contains("http://") && !html.contains("https://") && !html.contains("<script"), "nothing fetched, no scripts");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_fleet_refuses_a_directory_that_is_not_one() {
    let root = scratch("fleet-missing");
    let o = run(&["report", "--fleet", s(&root.join("nope"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nope: not a directory"), "{}", text(&o));
    let o = run(&["report"]);
    assert_eq!(o.status.code(), Some(2), "neither a run directory nor --fleet: {}", text(&o));
}
