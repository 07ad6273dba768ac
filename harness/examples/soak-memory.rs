//! Peak memory of a run against its length: `cargo run --release -p faultline --example
//! soak-memory [CYCLES...]` (default 300 1200 3000) runs the demo scenario (the simulated
//! drive behind the Quarch emulator, seed 7) once per count, each in a fresh process wired
//! as `faultline run` wires it (event log, console, summary/junit/html reports, metrics), and
//! prints its peak resident set (VmHWM), the growth per cycle between counts, and the size
//! of the files it left. `--without-file-reports` first leaves out summary.json, junit.xml and
//! report.html (each folds its own `RunModel`), to tell their growth from the rest's.

use faultline::events::Sinks;
use faultline::metrics::RunMetrics;
use faultline::report::console::{Console, Progress};
use faultline::report::file_reports;
use faultline::report::jsonl::EventLog;
use faultline::run_dir::{EVENTS_FILE, HTML_FILE};
use faultline::runner::{run_scenario, RunnerOptions};
use faultline::scenario::Scenario;
use std::process::Command;

const DEMO: &str = include_str!("../../scenarios/demo.toml");

fn peak_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB")
}

/// One run of `cycles` cycles; prints `cycles peak_kib events_bytes html_bytes`.
fn one(cycles: u32, file_reports_too: bool) {
    let mut s = Scenario::from_toml(DEMO, "scenarios/demo.toml").expect("the demo parses");
    s.cycles.count = cycles;
    let plan = s.plan("scenarios/demo.toml", 7).expect("the demo plans");
    let dir = std::env::temp_dir().join(format!("faultline-soak-memory-{}-{cycles}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sinks = Sinks::new();
    sinks.push(EventLog::append(&dir.join(EVENTS_FILE)).unwrap());
    sinks.push(Console::new(std::io::sink(), Progress::Lines { every_ns: 10_000_000_000 }));
    if file_reports_too {
        for r in file_reports(&dir) {
            sinks.push(r);
        }
    }
    sinks.push(RunMetrics::new());
    let o = RunnerOptions {
        run_id: 7,
        started_at: "2026-01-01T00:00:00+00:00".into(),
        clock: || "2026-01-01T00:00:00+00:00".into(),
        control_env: Default::default(),
        faultline_exe: None,
    };
    run_scenario(&plan, &dir, sinks, &o, None).expect("the run");
    let size = |f: &str| std::fs::metadata(dir.join(f)).map_or(0, |m| m.len());
    println!("{cycles} {} {} {}", peak_kib(), size(EVENTS_FILE), size(HTML_FILE));
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let without = args.first().is_some_and(|a| a == "--without-file-reports");
    if without {
        args.remove(0);
    }
    if let [flag, n] = args.as_slice() {
        if flag == "--one" {
            return one(n.parse().expect("a cycle count"), !without);
        }
    }
    let counts: Vec<u32> =
        if args.is_empty() { vec![300, 1200, 3000] } else { args.iter().map(|a| a.parse().expect("cycle counts")).collect() };
    let me = std::env::current_exe().expect("this example's path");
    println!("{:>8} {:>12} {:>14} {:>14} {:>14}", "cycles", "peak RSS MB", "KB per cycle", "events.jsonl KB", "report.html KB");
    let mut prev: Option<(u32, u64)> = None;
    for n in counts {
        let mut c = Command::new(&me);
        if without {
            c.arg("--without-file-reports");
        }
        let o = c.args(["--one", &n.to_string()]).output().expect("run this example again");
        assert!(o.status.success(), "{n} cycles: {}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8_lossy(&o.stdout);
        let f: Vec<u64> = out.split_whitespace().map(|w| w.parse().expect("figures")).collect();
        let slope = prev.map_or("".to_string(), |(c, k)| format!("{:.2}", (f[1] as f64 - k as f64) / f64::from(n - c)));
        println!("{n:>8} {:>12.1} {slope:>14} {:>14} {:>14}", f[1] as f64 / 1024.0, f[2] / 1024, f[3] / 1024);
        prev = Some((n, f[1]));
    }
}
