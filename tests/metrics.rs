//! `faultline run --metrics-file / --metrics-listen`: the real binary on the simulated demo,
//! its metrics scraped over HTTP while it runs and read from the file when it ends, both
//! parsed by the Prometheus project's Python parser (`prometheus_client.parser`, installed by
//! `.ci/run`), and checked against the run's own `summary.json`.
//!
//! The demo's seed is `SEED` (printed on failure).

use crate::common::{s, scratch, skip, text, BIN};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SEED: u64 = 20261201;

/// Parses exposition text (from a file, or scraped from a URL by Python's own HTTP client)
/// with `prometheus_client.parser.text_string_to_metric_families` and prints every family as
/// JSON: `{name: {"type": t, "samples": [[name, labels, value], ...]}}`.
const PARSE: &str = r#"
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
src = sys.argv[1]
if src.startswith("http://"):
    with urllib.request.urlopen(src, timeout=10) as r:
        ctype = r.headers.get("Content-Type")
        text = r.read().decode()
else:
    ctype = None
    text = open(src).read()
out = {"content_type": ctype, "families": {}}
for f in text_string_to_metric_families(text):
    out["families"][f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;

/// Why the parser cannot be had, if it cannot.
fn parser_missing() -> Option<String> {
    match Command::new("python3").args(["-c", "import prometheus_client.parser"]).output() {
        Err(e) => Some(format!("python3 cannot be run ({e})")),
        Ok(o) if !o.status.success() => {
            Some(format!("python3 has no prometheus_client module ({})", String::from_utf8_lossy(&o.stderr).trim()))
        }
        Ok(_) => None,
    }
}

struct Families(BTreeMap<String, Value>, Option<String>);

fn parse(src: &str) -> Families {
    let o = Command::new("python3").args(["-c", PARSE, src]).output().expect("python3");
    assert!(o.status.success(), "seed {SEED}: the Prometheus parser refused {src}:\n{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let fams = v["families"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    Families(fams, v["content_type"].as_str().map(str::to_string))
}

impl Families {
    fn family(&self, name: &str, ty: &str) -> &Value {
        let f = self.0.get(name).unwrap_or_else(|| panic!("seed {SEED}: no family {name} in {:?}", self.0.keys()));
        assert_eq!(f["type"], ty, "seed {SEED}: {name}");
        f
    }

    /// The value of the one sample `sample` of family `name` whose labels include `labels`.
    fn value(&self, name: &str, ty: &str, sample: &str, labels: &[(&str, &str)]) -> f64 {
        let f = self.family(name, ty);
        let hits: Vec<f64> = f["samples"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s[0] == sample && labels.iter().all(|(k, v)| s[1][k] == *v))
            .map(|s| s[2].as_f64().unwrap())
            .collect();
        assert_eq!(hits.len(), 1, "seed {SEED}: {sample}{labels:?} in {f}");
        hits[0]
    }

    /// Every sample of every family carries the run's labels.
    fn all_labelled(&self, run: &[(&str, &str)]) {
        for (name, f) in &self.0 {
            if name == "faultline_build_info" {
                continue;
            }
            for smp in f["samples"].as_array().unwrap() {
                for (k, v) in run {
                    assert_eq!(smp[1][k], *v, "seed {SEED}: {name}: {smp}");
                }
            }
        }
    }
}

fn summary(rd: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap()
}

fn cycles_ended(rd: &Path) -> usize {
    std::fs::read_to_string(rd.join("events.jsonl")).map_or(0, |t| t.matches("\"event\":\"cycle_ended\"").count())
}

/// Checks the metrics of a run that ended against its summary.
fn check_against_summary(m: &Families, rd: &Path) {
    let sm = &summary(rd);
    let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    // A cycle that completed a write, or was cut (the stretch to the cut counts), has a stall.
    let with_max = log
        .lines()
        .filter(|l| l.contains("\"event\":\"cycle_ended\"") && (l.contains("\"max_gap_ns\"") || l.contains("\"latency_max_ns\"")))
        .count();
    let run = [
        ("run_id", sm["run_id"].as_str().unwrap()),
        ("scenario", sm["scenario"].as_str().unwrap()),
        ("target", sm["target"].as_str().unwrap()),
    ];
    m.all_labelled(&run);
    let cycles: f64 = ["clean", "findings", "error"]
        .iter()
        .map(|v| m.value("faultline_cycles", "counter", "faultline_cycles_total", &[("verdict", v)]))
        .sum();
    assert_eq!(cycles, sm["cycles_done"].as_f64().unwrap(), "seed {SEED}: cycles by verdict add up to the cycles run");
    let with_findings = m.value("faultline_cycles", "counter", "faultline_cycles_total", &[("verdict", "findings")]);
    assert!(with_findings >= sm["cycles_with_findings"].as_f64().unwrap(), "seed {SEED}: {with_findings} {sm}");
    for (class, n) in sm["findings_per_class"].as_object().unwrap() {
        let got = m.value("faultline_findings", "counter", "faultline_findings_total", &[("class", class)]);
        assert_eq!(got, n.as_f64().unwrap(), "seed {SEED}: findings of class {class}");
    }
    let errors = m.value("faultline_harness_errors", "counter", "faultline_harness_errors_total", &[]);
    assert_eq!(errors, sm["harness_errors"].as_array().unwrap().len() as f64, "seed {SEED}");
    assert_eq!(m.value("faultline_resumes", "counter", "faultline_resumes_total", &[]), sm["resumes"].as_f64().unwrap(), "seed {SEED}");
    for (state, v) in [("running", 0.0), ("suspended", 0.0), ("ended", 1.0)] {
        assert_eq!(m.value("faultline_run_state", "gauge", "faultline_run_state", &[("state", state)]), v, "seed {SEED}: state {state}");
    }
    assert_eq!(m.value("faultline_cycles_planned", "gauge", "faultline_cycles_planned", &[]), sm["cycles_planned"].as_f64().unwrap());
    let port = [("port", "A")];
    assert_eq!(
        m.value("faultline_written_bytes", "counter", "faultline_written_bytes_total", &port),
        sm["figures"]["bytes_written"].as_f64().unwrap()
    );
    assert_eq!(
        m.value("faultline_writes_completed", "counter", "faultline_writes_completed_total", &port),
        sm["figures"]["writes_completed"].as_f64().unwrap()
    );
    assert_eq!(
        m.value("faultline_verified_bytes", "counter", "faultline_verified_bytes_total", &[]),
        sm["figures"]["bytes_verified"].as_f64().unwrap()
    );
    let ready =
        m.value("faultline_time_to_ready_seconds", "histogram", "faultline_time_to_ready_seconds_count", &[("stage", "first_read")]);
    assert_eq!(ready, sm["timings"]["first_read_us"]["n"].as_f64().unwrap(), "seed {SEED}");
    let durations = m.value("faultline_cycle_duration_seconds", "histogram", "faultline_cycle_duration_seconds_count", &[]);
    assert_eq!(durations, sm["cycles_done"].as_f64().unwrap(), "seed {SEED}");
    let stalls = m.value("faultline_port_stall_seconds", "histogram", "faultline_port_stall_seconds_count", &port);
    assert_eq!(stalls, with_max as f64, "seed {SEED}: one stall per cycle that completed a write or was cut");
    // The simulated drive has no health log: no SMART gauge says 0 for a reading never taken.
    for smart in ["faultline_smart_unsafe_shutdowns", "faultline_smart_temperature_celsius"] {
        assert!(!m.0.contains_key(smart), "seed {SEED}: {smart} without a health reading");
    }
    let version = m.family("faultline_build_info", "gauge")["samples"][0][1]["version"].clone();
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "seed {SEED}");
}

#[test]
fn metrics_scraped_live_and_written_to_a_file_agree_with_the_summary() {
    if let Some(why) = parser_missing() {
        return skip("metrics_scraped_live_and_written_to_a_file_agree_with_the_summary", &why);
    }
    let d = scratch("live");
    let (rd, prom) = (d.join("run"), d.join("faultline.prom"));
    let seed = SEED.to_string();
    let args =
        ["run", "--cycles", "40", "--seed", &seed, "--run-dir", s(&rd), "--metrics-file", s(&prom), "--metrics-listen", "127.0.0.1:0"];
    let mut child = Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("faultline: metrics on ")
        .unwrap_or_else(|| panic!("seed {SEED}: no address on stderr: {line:?}"))
        .to_string();
    let rest = std::thread::spawn(move || {
        let mut t = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut t).unwrap();
        t
    });
    // Scrape while it runs: the run has started and some cycles have ended.
    let deadline = Instant::now() + Duration::from_secs(60);
    while cycles_ended(&rd) < 3 {
        assert!(Instant::now() < deadline, "seed {SEED}: no cycle ended within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = parse(&url);
    assert_eq!(live.1.as_deref(), Some("text/plain; version=0.0.4; charset=utf-8"), "seed {SEED}");
    let done: f64 = ["clean", "findings", "error"]
        .iter()
        .map(|v| live.value("faultline_cycles", "counter", "faultline_cycles_total", &[("verdict", v)]))
        .sum();
    assert!((3.0..=40.0).contains(&done), "seed {SEED}: {done} cycles at the scrape");
    let running = live.value("faultline_run_state", "gauge", "faultline_run_state", &[("state", "running")]);
    let ended = live.value("faultline_run_state", "gauge", "faultline_run_state", &[("state", "ended")]);
    assert_eq!(running + ended, 1.0, "seed {SEED}: one state at a time");
    // The file, mid-run, is whole (replaced by rename, never written in place).
    let mid = parse(s(&prom));
    mid.family("faultline_cycles", "counter");

    let out = child.wait_with_output().unwrap();
    let err = rest.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "seed {SEED}: the demo's drive loses writes\n{}\n{err}", text(&out));
    assert!(!err.contains("warning"), "seed {SEED}: {err}");
    check_against_summary(&parse(s(&prom)), &rd);
    let leftovers: Vec<_> =
        std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
    assert!(leftovers.is_empty(), "seed {SEED}: {leftovers:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_metrics_file_that_cannot_be_written_is_warned_about_once_and_the_run_goes_on() {
    let d = scratch("unwritable");
    let rd = d.join("run");
    let prom = d.join("no-such-dir").join("faultline.prom");
    let seed = SEED.to_string();
    let o = Command::new(BIN)
        .args(["run", "--cycles", "5", "--seed", &seed, "--run-dir", s(&rd), "--metrics-file", s(&prom)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "seed {SEED}: {}", text(&o));
    assert_eq!(err.matches("cannot write the metrics file").count(), 1, "seed {SEED}: once\n{err}");
    assert!(err.contains("no-such-dir"), "seed {SEED}: names the path\n{err}");
    assert_eq!(summary(&rd)["cycles_done"], 5, "seed {SEED}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_listen_address_that_is_not_one_is_refused_before_the_run_starts() {
    let d = scratch("badaddr");
    let rd = d.join("run");
    let o = Command::new(BIN).args(["run", "--cycles", "2", "--run-dir", s(&rd), "--metrics-listen", "localhost-ish"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--metrics-listen localhost-ish"), "{}", text(&o));
    assert!(!rd.join("events.jsonl").exists(), "nothing ran");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_resumed_run_counts_its_whole_log_in_the_metrics() {
    if let Some(why) = parser_missing() {
        return skip("a_resumed_run_counts_its_whole_log_in_the_metrics", &why);
    }
    let d = scratch("resumed");
    let (rd, prom) = (d.join("run"), d.join("faultline.prom"));
    let seed = SEED.to_string();
    let mut run = Command::new(BIN)
        .args(["run", "--cycles", "30", "--seed", &seed, "--run-dir", s(&rd), "--metrics-file", s(&prom)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while cycles_ended(&rd) < 5 {
        assert!(Instant::now() < deadline, "seed {SEED}: no 5 cycles within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    run.kill().unwrap(); // SIGKILL
    run.wait().unwrap();
    // What the killed run left: a whole file, still saying `running`.
    let left = parse(s(&prom));
    assert_eq!(left.value("faultline_run_state", "gauge", "faultline_run_state", &[("state", "running")]), 1.0, "seed {SEED}");
    let o = Command::new(BIN).args(["resume", s(&rd), "--metrics-file", s(&prom)]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "seed {SEED}: {}", text(&o));
    let m = parse(s(&prom));
    assert_eq!(m.value("faultline_resumes", "counter", "faultline_resumes_total", &[]), 1.0, "seed {SEED}");
    check_against_summary(&m, &rd);
    let _ = std::fs::remove_dir_all(&d);
}
