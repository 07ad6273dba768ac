//! The fleet summary (`faultline report --fleet DIR...`): many run directories, from many
//! hosts and copied together, merged into `fleet.json` and one self-contained `fleet.html`.
//!
//! Each run is read through its event log alone ([`super::jsonl::read_events`] folded into a
//! [`RunModel`], summarised by [`summarize`]), as `faultline report` reads it, so the fleet
//! agrees with every run's own `summary.json`. Runs are grouped per drive (model, firmware,
//! serial, parsed from the identity the run recorded) and, within a drive, per scenario:
//! cycles run, findings per class, dead devices, time to ready (power-on to the first good
//! read) p50/p99 over every cycle of the group, SMART anomalies, and the group's verdict (the
//! worst of its runs: findings over error over clean). A directory that looks like a run
//! (holds `events.jsonl`, `summary.json`, `scenario.toml` or a ledger) but cannot be read gets
//! a row saying what is wrong; the rest of the fleet is still summarised.
//!
//! Runs record no firmware revision today: `firmware` is `null` (and "not recorded" on the
//! page) until the run header carries one.

use super::escape::esc;
use super::jsonl::for_each_event;
use super::model::RunModel;
use super::series::Dist;
use super::summary::{summarize, Stats, Summary};
use crate::events::{zero_counts, Verdict};
use crate::run_dir::{EVENTS_FILE, HTML_FILE, LEDGER_FILE, SCENARIO_FILE, SUMMARY_FILE};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Version of `fleet.json`'s layout.
pub const FLEET_FORMAT: u32 = 1;
pub const FLEET_JSON: &str = "fleet.json";
pub const FLEET_HTML: &str = "fleet.html";

/// A drive as a run identified it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Drive {
    pub model: String,
    /// Not recorded by runs yet (see the module doc).
    pub firmware: Option<String>,
    pub serial: String,
}

impl Drive {
    /// Parses the identity a run records: `block:model=M serial=S ...` for a real device,
    /// `sim:SEED size=N` for the simulated drive, anything else whole as the serial.
    pub fn from_target(target: &str) -> Drive {
        if let Some(rest) = target.strip_prefix("block:") {
            // Spaces in the model are recorded as `_` (see `DeviceIdentity::stable`).
            let field = |k: &str| rest.split_whitespace().find_map(|w| w.strip_prefix(k)).map(str::to_string);
            let serial = field("serial=").or_else(|| field("wwid=")).unwrap_or_else(|| rest.to_string());
            let model = field("model=").map_or_else(|| "unknown".into(), |m| m.replace('_', " "));
            return Drive { model, firmware: None, serial };
        }
        if target.starts_with("sim:") {
            let serial = target.split_whitespace().next().unwrap_or(target).to_string();
            return Drive { model: "simulated drive".into(), firmware: None, serial };
        }
        Drive { model: "unknown".into(), firmware: None, serial: target.to_string() }
    }
}

/// Time to ready of a group of cycles, microseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    pub cycles: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

impl Ready {
    fn of(d: &Dist) -> Option<Ready> {
        Stats::of_dist(d).map(|s| Ready { cycles: s.n, p50_us: s.p50, p99_us: s.p99 })
    }
}

/// One run directory of the fleet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FleetRun {
    /// The run directory, as found under the directories given.
    pub dir: String,
    /// Its `report.html`, relative to the fleet page (`None`: the run has none).
    pub report: Option<String>,
    /// Why the run could not be read (then nothing below is set).
    pub error: Option<String>,
    pub drive: Option<Drive>,
    pub scenario: Option<String>,
    pub run_id: Option<String>,
    pub started_at: Option<String>,
    pub verdict: Option<Verdict>,
    pub complete: bool,
    pub cycles_done: u32,
    pub cycles_planned: Option<u32>,
    pub findings: u64,
    pub findings_per_class: BTreeMap<String, u64>,
    pub dead_devices: u64,
    pub smart_anomalies: u64,
    pub harness_errors: u64,
    pub time_to_ready: Option<Ready>,
}

/// One scenario run on one drive, over all its runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRow {
    pub scenario: String,
    pub runs: u32,
    pub cycles: u64,
    pub findings: u64,
    pub findings_per_class: BTreeMap<String, u64>,
    pub dead_devices: u64,
    pub smart_anomalies: u64,
    pub time_to_ready: Option<Ready>,
    pub verdict: Verdict,
    /// The runs' `report.html`, relative to the fleet page.
    pub reports: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DriveRow {
    #[serde(flatten)]
    pub drive: Drive,
    pub scenarios: Vec<ScenarioRow>,
}

/// `fleet.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    pub fleet_format: u32,
    pub drives: Vec<DriveRow>,
    /// Every run directory found, readable or not, in path order.
    pub runs: Vec<FleetRun>,
    /// Runs that could not be read.
    pub unreadable: u32,
    /// The worst verdict of all: findings over error over clean (an unreadable run counts as
    /// an error).
    pub verdict: Verdict,
}

/// Findings are the worst outcome (the drive lost data), then an error (no verdict), then clean.
fn worse(a: Verdict, b: Verdict) -> Verdict {
    let rank = |v: Verdict| match v {
        Verdict::Clean => 0,
        Verdict::Error => 1,
        Verdict::Findings => 2,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

fn looks_like_run(dir: &Path) -> bool {
    [EVENTS_FILE, SUMMARY_FILE, SCENARIO_FILE, LEDGER_FILE].iter().any(|f| dir.join(f).is_file())
}

/// Every run directory under `root` (itself included), in path order; a run directory's own
/// subdirectories are not searched. Unlistable directories are reported as runs that cannot
/// be read, never skipped silently.
fn find_runs(root: &Path, out: &mut Vec<Result<PathBuf, (PathBuf, String)>>) {
    if looks_like_run(root) {
        out.push(Ok(root.to_path_buf()));
        return;
    }
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) => {
            out.push(Err((root.to_path_buf(), format!("cannot list the directory: {e}"))));
            return;
        }
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    for d in dirs {
        find_runs(&d, out);
    }
}

/// `target` relative to the directory `base` (both made absolute first), with `/` separators.
fn relative(target: &Path, base: &Path) -> String {
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (t, b) = (abs(target), abs(base));
    let rel = pathdiff::diff_paths(&t, &b).unwrap_or(t);
    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

/// One run directory read: its row, and the time to ready of its cycles.
fn read_run(dir: &Path, out_dir: &Path) -> (FleetRun, Dist) {
    let mut run = FleetRun {
        dir: dir.display().to_string(),
        report: dir.join(HTML_FILE).is_file().then(|| relative(&dir.join(HTML_FILE), out_dir)),
        error: None,
        drive: None,
        scenario: None,
        run_id: None,
        started_at: None,
        verdict: None,
        complete: false,
        cycles_done: 0,
        cycles_planned: None,
        findings: 0,
        findings_per_class: zero_counts(),
        dead_devices: 0,
        smart_anomalies: 0,
        harness_errors: 0,
        time_to_ready: None,
    };
    // Streamed: memory stays bounded whatever the log's length.
    let mut model = RunModel::default();
    if let Err(e) = for_each_event(&dir.join(EVENTS_FILE), &mut |e| {
        model.apply(&e);
        Ok(())
    }) {
        run.error = Some(e.to_string());
        return (run, Dist::default());
    }
    let Some(start) = model.start.as_ref() else {
        run.error = Some(format!("{}: no run_started event (not the log of a run)", dir.join(EVENTS_FILE).display()));
        return (run, Dist::default());
    };
    let s: Summary = summarize(&model);
    run.drive = Some(Drive::from_target(&start.target));
    run.scenario = Some(start.scenario.clone());
    run.run_id = Some(start.run_id.clone());
    run.started_at = Some(start.started_at.clone());
    run.verdict = Some(s.verdict);
    run.complete = s.ended;
    run.cycles_done = s.cycles_done;
    run.cycles_planned = s.cycles_planned;
    run.findings = s.findings;
    run.dead_devices = s.findings_per_class.get("dead_device").copied().unwrap_or(0);
    run.findings_per_class = s.findings_per_class;
    run.smart_anomalies = s.health_anomalies;
    run.harness_errors = s.harness_errors.len() as u64;
    let ready = model.settled().figures.first_read_us.clone();
    run.time_to_ready = Ready::of(&ready);
    (run, ready)
}

/// Reads every run under `dirs` and merges them; links are made relative to `out_dir`, where
/// the fleet files are to be written.
pub fn collect(dirs: &[PathBuf], out_dir: &Path) -> Fleet {
    let mut found = Vec::new();
    for d in dirs {
        find_runs(d, &mut found);
    }
    let mut runs = Vec::new();
    // Time-to-ready samples per run, pooled per group below (percentiles do not average).
    let mut samples: Vec<Dist> = Vec::new();
    for f in found {
        match f {
            Ok(dir) => {
                let (r, ready) = read_run(&dir, out_dir);
                samples.push(ready);
                runs.push(r);
            }
            Err((dir, why)) => {
                let (mut r, _) = read_run(&dir, out_dir);
                (r.error, r.drive, r.scenario, r.verdict) = (Some(why), None, None, None);
                samples.push(Dist::default());
                runs.push(r);
            }
        }
    }
    let mut groups: BTreeMap<Drive, BTreeMap<String, (ScenarioRow, Dist)>> = BTreeMap::new();
    for (r, ready) in runs.iter().zip(&samples) {
        let (Some(drive), Some(scenario), Some(verdict)) = (&r.drive, &r.scenario, r.verdict) else { continue };
        let (row, pooled) = groups.entry(drive.clone()).or_default().entry(scenario.clone()).or_insert_with(|| {
            (
                ScenarioRow {
                    scenario: scenario.clone(),
                    runs: 0,
                    cycles: 0,
                    findings: 0,
                    findings_per_class: zero_counts(),
                    dead_devices: 0,
                    smart_anomalies: 0,
                    time_to_ready: None,
                    verdict: Verdict::Clean,
                    reports: Vec::new(),
                },
                Dist::default(),
            )
        });
        row.runs += 1;
        row.cycles += u64::from(r.cycles_done);
        row.findings += r.findings;
        for (k, v) in &r.findings_per_class {
            *row.findings_per_class.entry(k.clone()).or_insert(0) += v;
        }
        row.dead_devices += r.dead_devices;
        row.smart_anomalies += r.smart_anomalies;
        row.verdict = worse(row.verdict, verdict);
        row.reports.extend(r.report.clone());
        pooled.merge(ready);
    }
    let drives: Vec<DriveRow> = groups
        .into_iter()
        .map(|(drive, rows)| DriveRow {
            drive,
            scenarios: rows
                .into_values()
                .map(|(mut row, pooled)| {
                    row.time_to_ready = Ready::of(&pooled);
                    row
                })
                .collect(),
        })
        .collect();
    let unreadable = runs.iter().filter(|r| r.error.is_some()).count() as u32;
    let mut verdict = if unreadable > 0 { Verdict::Error } else { Verdict::Clean };
    for r in &runs {
        if let Some(v) = r.verdict {
            verdict = worse(verdict, v);
        }
    }
    Fleet { fleet_format: FLEET_FORMAT, drives, runs, unreadable, verdict }
}

/// The text of `fleet.json`.
pub fn render_json(f: &Fleet) -> String {
    let mut s = serde_json::to_string_pretty(f).expect("a fleet always serializes");
    s.push('\n');
    s
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:80em;color:#222}\
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;vertical-align:top}\
td.n{text-align:right}.clean{background:#d9f2d9}.findings{background:#f8d0d0}.error{background:#f5e0a0}";

fn verdict_cell(v: Verdict) -> String {
    let name = match v {
        Verdict::Clean => "clean",
        Verdict::Findings => "findings",
        Verdict::Error => "error",
    };
    format!("<td class=\"{name}\">{name}</td>")
}

fn classes(per_class: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = per_class.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{} {n}", esc(k))).collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// A duration in the unit that fits it: µs below a millisecond, ms below ten seconds, else s.
fn duration_us(us: u64) -> String {
    match us {
        0..=999 => format!("{us} µs"),
        1_000..=9_999_999 => format!("{:.1} ms", us as f64 / 1e3),
        _ => format!("{:.1} s", us as f64 / 1e6),
    }
}

fn ready_cells(r: Option<&Ready>) -> String {
    match r {
        Some(r) => format!("<td class=\"n\">{}</td><td class=\"n\">{}</td>", duration_us(r.p50_us), duration_us(r.p99_us)),
        None => "<td>-</td><td>-</td>".into(),
    }
}

/// The text of `fleet.html`: one self-contained page (no scripts, nothing fetched), every text
/// from a run escaped.
pub fn render_html(f: &Fleet) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>faultline fleet</title><style>{STYLE}</style></head><body>\n\
         <h1>faultline fleet: {} drives, {} runs</h1>\n<p>Overall: <span class=\"{v}\">{v}</span>",
        f.drives.len(),
        f.runs.len(),
        v = match f.verdict {
            Verdict::Clean => "clean",
            Verdict::Findings => "findings",
            Verdict::Error => "error",
        }
    );
    if f.unreadable > 0 {
        let _ = write!(h, "; {} run directories could not be read (listed below)", f.unreadable);
    }
    h.push_str("</p>\n<h2>Per drive and scenario</h2>\n");
    h.push_str(
        "<table><tr><th>model</th><th>firmware</th><th>serial</th><th>scenario</th><th>runs</th><th>cycles</th><th>findings</th>\
         <th>per class</th><th>dead devices</th><th>ready p50</th><th>ready p99</th><th>SMART anomalies</th><th>verdict</th><th>reports</th></tr>\n",
    );
    for d in &f.drives {
        for s in &d.scenarios {
            let links: Vec<String> =
                s.reports.iter().enumerate().map(|(i, l)| format!("<a href=\"{}\">run {}</a>", esc(l), i + 1)).collect();
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                 <td>{}</td><td class=\"n\">{}</td>{}<td class=\"n\">{}</td>{}<td>{}</td></tr>",
                esc(&d.drive.model),
                d.drive.firmware.as_deref().map_or("not recorded".into(), esc),
                esc(&d.drive.serial),
                esc(&s.scenario),
                s.runs,
                s.cycles,
                s.findings,
                classes(&s.findings_per_class),
                s.dead_devices,
                ready_cells(s.time_to_ready.as_ref()),
                s.smart_anomalies,
                verdict_cell(s.verdict),
                links.join(" ")
            );
        }
    }
    h.push_str("</table>\n<h2>Runs</h2>\n<table><tr><th>run directory</th><th>drive</th><th>scenario</th><th>started</th><th>cycles</th><th>findings</th><th>verdict</th><th>report</th></tr>\n");
    for r in &f.runs {
        let report = r.report.as_deref().map_or("-".into(), |l| format!("<a href=\"{0}\">{0}</a>", esc(l)));
        if let Some(why) = &r.error {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td colspan=\"5\" class=\"error\">unreadable: {}</td><td class=\"error\">error</td><td>{report}</td></tr>",
                esc(&r.dir),
                esc(why)
            );
            continue;
        }
        let drive = r.drive.as_ref().map_or(String::new(), |d| format!("{} {}", esc(&d.model), esc(&d.serial)));
        let cycles = match r.cycles_planned {
            Some(p) => format!("{} of {p}{}", r.cycles_done, if r.complete { "" } else { " (did not end)" }),
            None => r.cycles_done.to_string(),
        };
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{drive}</td><td>{}</td><td>{}</td><td>{cycles}</td><td class=\"n\">{}</td>{}<td>{report}</td></tr>",
            esc(&r.dir),
            esc(r.scenario.as_deref().unwrap_or_default()),
            esc(r.started_at.as_deref().unwrap_or_default()),
            r.findings,
            verdict_cell(r.verdict.unwrap_or(Verdict::Error)),
        );
    }
    h.push_str(
        "</table>\n<p>Time to ready: power-on to the first good read, over every cycle of the group. \
         Generated by faultline from each run's events.jsonl; <code>faultline report --fleet DIR...</code> rebuilds this page.</p>\n</body></html>\n",
    );
    h
}

/// What [`write`] wrote.
#[derive(Debug)]
pub struct FleetWritten {
    pub fleet: Fleet,
    pub written: Vec<PathBuf>,
}

/// Collects the fleet under `dirs` and writes `fleet.json` and `fleet.html` into `out_dir`
/// (made if missing).
pub fn write(dirs: &[PathBuf], out_dir: &Path) -> Result<FleetWritten, crate::events::SinkError> {
    std::fs::create_dir_all(out_dir).map_err(|e| crate::events::SinkError::io("cannot make the output directory", out_dir, e))?;
    let fleet = collect(dirs, out_dir);
    let json = out_dir.join(FLEET_JSON);
    let html = out_dir.join(FLEET_HTML);
    super::write_atomically(&json, &render_json(&fleet))?;
    super::write_atomically(&html, &render_html(&fleet))?;
    Ok(FleetWritten { fleet, written: vec![json, html] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drives_are_parsed_from_the_recorded_identity() {
        let d = Drive::from_target("block:model=Samsung_SSD_990 serial=S7KGNU0X wwid=eui.0025 size=1000 lbs=512");
        assert_eq!(d, Drive { model: "Samsung SSD 990".into(), firmware: None, serial: "S7KGNU0X".into() });
        assert_eq!(Drive::from_target("sim:7 size=67108864").serial, "sim:7");
        assert_eq!(Drive::from_target("block:loop-backing=/x size=1 lbs=512").model, "unknown");
        assert_eq!(Drive::from_target("odd").serial, "odd");
    }

    #[test]
    fn durations_take_the_unit_that_fits() {
        assert_eq!((duration_us(7), duration_us(1500), duration_us(12_000_000)), ("7 µs".into(), "1.5 ms".into(), "12.0 s".into()));
    }

    #[test]
    fn findings_outrank_errors_outrank_clean() {
        assert_eq!(worse(Verdict::Clean, Verdict::Error), Verdict::Error);
        assert_eq!(worse(Verdict::Findings, Verdict::Error), Verdict::Findings);
        assert_eq!(worse(Verdict::Error, Verdict::Findings), Verdict::Findings);
        assert_eq!(worse(Verdict::Clean, Verdict::Clean), Verdict::Clean);
    }

    #[test]
    fn an_unreadable_run_gets_a_row_and_the_rest_is_summarised() {
        let root = std::env::temp_dir().join(format!("faultline-fleet-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (good, bad) = (root.join("host1/good"), root.join("host2/bad"));
        std::fs::create_dir_all(&good).unwrap();
        std::fs::create_dir_all(&bad).unwrap();
        let mut log = super::super::jsonl::EventLog::append(&good.join(EVENTS_FILE)).unwrap();
        for e in super::super::testdata::run() {
            crate::events::EventSink::event(&mut log, &e).unwrap();
        }
        drop(log);
        std::fs::write(bad.join(EVENTS_FILE), "{\"v\":2,\"event\":\"no_such_event\"}\n<html>\n").unwrap();
        let f = collect(std::slice::from_ref(&root), &root);
        assert_eq!((f.runs.len(), f.unreadable, f.verdict), (2, 1, Verdict::Findings));
        let bad_row = f.runs.iter().find(|r| r.dir.ends_with("bad")).unwrap();
        assert!(bad_row.error.as_deref().unwrap().contains("line 1"), "{:?}", bad_row.error);
        assert_eq!(f.drives.len(), 1);
        let html = render_html(&f);
        assert!(html.contains("unreadable: ") && !html.contains("<html>\n</td>"), "the bad log's text is escaped");
        let _ = std::fs::remove_dir_all(&root);
    }
}
