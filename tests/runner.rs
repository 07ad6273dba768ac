//! `faultline run SCENARIO.toml` end to end: the real binary runs scenario files against the
//! simulated drive, its power switched in-process or through the protocol emulators driven
//! by the real controller drivers. Seeds are in the scenarios; failures print the output.

use crate::common::{scratch, skip, text, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod zeroing;

const DEMO: &str = include_str!("../scenarios/demo.toml");

/// The demo scenario with `count` cycles, an honest drive if `honest`, and `switch`.
fn demo(count: u32, honest: bool, switch: &str) -> String {
    let mut s =
        DEMO.replace("count = 300", &format!("count = {count}")).replace("switch = \"quarch_serial\"", &format!("switch = \"{switch}\""));
    if honest {
        s = s.replace("kind = \"rollback\", writes_per_cut = 1", "kind = \"honest_plp\"");
    }
    assert_ne!(s, DEMO, "the demo scenario changed shape; update this test");
    s
}

/// Writes `scenario` into `dir` and runs it with a fresh run directory there.
fn run(dir: &Path, name: &str, scenario: &str) -> (Output, PathBuf) {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, scenario).unwrap();
    let rd = dir.join(format!("run-{name}"));
    let o = Command::new(BIN).args(["run", file.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]).output().unwrap();
    (o, rd)
}

fn events(rd: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn of<'a>(ev: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    ev.iter().filter(move |e| e["event"] == kind)
}

#[test]
fn the_demo_scenario_finds_lost_writes_through_the_quarch_emulator() {
    let d = scratch("demo");
    let (o, rd) = run(&d, "demo", &demo(20, false, "quarch_serial"));
    assert_eq!(o.status.code(), Some(1), "the demo drive loses acknowledged writes\n{}", text(&o));
    let ev = events(&rd);
    let cuts: Vec<&Value> = of(&ev, "cut_issued").collect();
    assert_eq!(cuts.len(), 20, "{}", text(&o));
    assert!(cuts.iter().all(|c| c["in_flight_ops"].as_u64().unwrap() > 0 && c["bytes_at_risk"].as_u64().unwrap() > 0));
    // Each cut command's round trip through the pty to the module, its read-back included.
    assert!(cuts.iter().all(|c| c["command_us"].as_u64().is_some_and(|us| us > 0)), "{cuts:?}");
    assert!(of(&ev, "finding").count() > 0);
    assert_eq!(of(&ev, "run_ended").next().unwrap()["exit_code"], 1);
    for f in ["summary.json", "junit.xml", "report.html", "ledger.fl"] {
        assert!(rd.join(f).is_file(), "{f} missing\n{}", text(&o));
    }
    let summary: Value = serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["verdict"], "findings", "{summary}");
    // A run directory is never reused.
    let again = Command::new(BIN).args(["run", d.join("demo.toml").to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("faultline resume"), "{}", text(&again));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn an_honest_drive_is_clean_through_every_switch() {
    let d = scratch("honest");
    for switch in ["direct", "quarch_serial", "quarch_tcp", "lcus_serial", "numato_serial"] {
        let (o, rd) = run(&d, switch, &demo(4, true, switch));
        assert_eq!(o.status.code(), Some(0), "{switch}\n{}", text(&o));
        let ev = events(&rd);
        assert_eq!(of(&ev, "ready").count(), 4, "{switch}");
        assert_eq!(of(&ev, "cut_issued").count(), 4, "{switch}");
        assert_eq!(of(&ev, "finding").count(), 0, "{switch}");
        assert_eq!(of(&ev, "harness_error").count(), 0, "{switch}");
        assert!(of(&ev, "cycle_ended").all(|c| c["verdict"] == "clean"), "{switch}");
        // Write latency from the completions, per cycle: p50 <= p99 <= max.
        for c in of(&ev, "cycle_ended").filter(|c| c["writes_completed"].as_u64() > Some(0)) {
            let ns = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{switch}: {k} missing in {c}"));
            assert!(ns("latency_p50_ns") <= ns("latency_p99_ns") && ns("latency_p99_ns") <= ns("latency_max_ns"), "{switch}: {c}");
            // The longest stretch without a completion lies inside the write phase.
            assert!(ns("max_gap_ns") > 0 && ns("max_gap_ns") <= ns("write_ns"), "{switch}: {c}");
        }
        assert!(of(&ev, "verified").all(|v| v["bytes"].as_u64().unwrap() > 0), "{switch}");
        // The last cycle reads the whole span (`full_at_end`).
        let last = of(&ev, "verified").last().unwrap();
        assert_eq!(last["bytes"].as_u64(), Some(64 << 20), "{switch}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn uniform_time_cuts_are_drawn_from_the_seed() {
    let d = scratch("seeded");
    let planned = |name: &str, scenario: &str| {
        let (o, rd) = run(&d, name, scenario);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        of(&events(&rd), "cut_issued").map(|c| c["planned_after_ms"].as_u64().unwrap()).collect::<Vec<_>>()
    };
    let a = planned("a", &demo(6, true, "direct"));
    assert_eq!(a.len(), 6);
    assert!(a.iter().all(|&ms| (2..=20).contains(&ms)), "{a:?}");
    assert_eq!(a, planned("b", &demo(6, true, "direct")), "same seed, same cut times");
    assert_ne!(a, planned("c", &demo(6, true, "direct").replace("seed = 20130212", "seed = 7")), "another seed, other cut times");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_dead_device_is_a_finding_and_stops_the_run() {
    let d = scratch("dead");
    let s = demo(5, true, "direct")
        .replace("kind = \"honest_plp\"", "kind = \"dies_after_cuts\", cuts = 2")
        .replace("readiness_timeout_s = 5", "readiness_timeout_s = 1")
        .replace("on_finding = \"continue\"", "on_finding = \"continue\"\non_dead_device = \"stop\"");
    let (o, rd) = run(&d, "dead", &s);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let ev = events(&rd);
    assert_eq!(of(&ev, "cycle_started").count(), 2, "the run stops at the dead device");
    let f: Vec<&Value> = of(&ev, "finding").collect();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["finding"]["class"], "dead_device");
    // Why the run stopped is an event, and the summary and the page say it.
    let stopped: Vec<&Value> = of(&ev, "run_stopped").collect();
    assert_eq!(stopped.len(), 1, "{ev:?}");
    let why = stopped[0]["reason"].as_str().unwrap();
    assert!(why.contains("cycle 2") && why.contains("on_dead_device"), "{why}");
    let summary: Value = serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["stopped"].as_str(), Some(why), "{summary}");
    assert!(std::fs::read_to_string(rd.join("report.html")).unwrap().contains("on_dead_device"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_clean_shutdown_cuts_a_drained_drive() {
    let d = scratch("clean");
    let s = demo(3, true, "lcus_serial")
        .replace("kind = \"power_cut\"", "kind = \"clean_shutdown\"")
        .replace("kind = \"uniform_time\"\nwindow_start_ms = 2\nwindow_end_ms = 20", "kind = \"while_idle\"\nafter_completions = 500");
    let (o, rd) = run(&d, "clean", &s);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ev = events(&rd);
    assert_eq!(of(&ev, "cut_issued").count(), 3);
    assert!(of(&ev, "cut_issued").all(|c| c["in_flight_ops"] == 0 && c["completions"].as_u64().unwrap() >= 500));
    // Drained and flushed before the cut: under the flush contract every acknowledged write
    // is owed. A volatile cache that honours the flush keeps them all; one that acknowledges
    // the flush without doing it is found losing them.
    for (model, code) in [("honest_volatile", 0), ("lies_about_flush", 1)] {
        let flushed =
            s.replace("contract = \"plp\"", "contract = \"flush\"").replace("kind = \"honest_plp\"", &format!("kind = \"{model}\""));
        let (o, rd) = run(&d, &format!("clean-{model}"), &flushed);
        assert_eq!(o.status.code(), Some(code), "{model}: {}", text(&o));
        let lost = of(&events(&rd), "finding").filter(|f| f["finding"]["class"] == "lost_write").count();
        assert_eq!(lost > 0, code == 1, "{model}: {}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_cut_nothing_confirms_is_a_harness_error() {
    // A file target behind a switch that cannot read its state back: the "cut" leaves the
    // file answering, so the cycle must not pass.
    let d = scratch("unconfirmed");
    let img = d.join("target.img");
    std::fs::File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let s = format!(
        "format_version = 1\nname = \"unconfirmed\"\nseed = 3\ncontract = \"plp\"\n[target]\npath = \"{}\"\n[controllers]\npower = \"exec:?off=true&on=true\"\n[fault]\nkind = \"power_cut\"\n[cut]\nkind = \"after_completions\"\ncompletions = 100\n[cycles]\ncount = 3\noff_time_ms = 1\nreadiness_timeout_s = 2\n",
        img.display()
    );
    let (o, rd) = run(&d, "unconfirmed", &s);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let ev = events(&rd);
    let errs: Vec<&Value> = of(&ev, "harness_error").collect();
    assert!(errs.iter().any(|e| e["message"].as_str().unwrap().contains("not confirmed")), "{errs:?}");
    assert_eq!(of(&ev, "cycle_started").count(), 1, "stop.on_controller_failure defaults to stop");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn pin_mate_steps_are_swept_one_per_cycle_through_the_hotplug_emulator() {
    let d = scratch("mate");
    let s = demo(4, true, "quarch_hotplug_serial").replace("kind = \"power_cut\"", "kind = \"power_cut\"\nmate_steps_ms = [10, 25, 100]");
    let (o, rd) = run(&d, "mate", &s);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ev = events(&rd);
    let steps: Vec<u64> = of(&ev, "cut_issued").map(|c| c["mate_step_ms"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![10, 25, 100, 10]);
    // A power module has no pin-mate sequencing: the scenario is refused before anything runs.
    let (o, _) = run(&d, "mate-power", &s.replace("quarch_hotplug_serial", "quarch_serial"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("fault.mate_steps_ms"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// `cycles.off_time_ms` as a list: swept in order, round again, each cycle's in its
/// `cycle_started`, held at least that long between the cut and the power coming back, and
/// summary.json counts each off time's cycles by verdict. As a range: drawn per cycle from the
/// seed, within its ends, the same again for the same seed (seed 2 of the demo).
#[test]
fn off_times_are_swept_in_order_or_drawn_from_the_seed_and_each_is_held_and_tallied() {
    let d = scratch("off-times");
    let s = demo(5, false, "quarch_serial").replace("off_time_ms = 5", "off_time_ms = [1, 10, 200]");
    let (o, rd) = run(&d, "sweep", &s);
    assert_eq!(o.status.code(), Some(1), "the demo drive loses acknowledged writes\n{}", text(&o));
    let ev = events(&rd);
    let off: Vec<u64> = of(&ev, "cycle_started").map(|c| c["off_time_ms"].as_u64().unwrap()).collect();
    assert_eq!(off, [1, 10, 200, 1, 10]);
    let cut: Vec<u64> = of(&ev, "cut_issued").map(|c| c["t_ns"].as_u64().unwrap()).collect();
    let back: Vec<u64> = of(&ev, "power_restored").map(|c| c["t_ns"].as_u64().unwrap()).collect();
    assert_eq!((cut.len(), back.len()), (5, 5), "{}", text(&o));
    // Each held at least its off time, measured from the off command's return to the on
    // command's start (`off_us`), within the cut's and the power's events.
    let held: Vec<u64> = of(&ev, "power_restored").map(|c| c["off_us"].as_u64().unwrap()).collect();
    for (((c, b), ms), us) in cut.iter().zip(&back).zip(&off).zip(&held) {
        assert!(*us >= ms * 1000 && us * 1000 <= b - c, "off {ms} ms: held {us} µs, power back {} µs after the cut", (b - c) / 1000);
    }
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    let per = &summary["off_times"];
    assert_eq!(
        (per["1"]["cycles"].as_u64(), per["10"]["cycles"].as_u64(), per["200"]["cycles"].as_u64()),
        (Some(2), Some(2), Some(1)),
        "{summary}"
    );
    let counted: u64 =
        ["1", "10", "200"].iter().map(|k| ["clean", "findings", "error"].iter().map(|v| per[k][v].as_u64().unwrap()).sum::<u64>()).sum();
    assert_eq!(counted, 5, "{summary}");
    // The console names the off time of a cycle with findings.
    assert!(["off 1 ms: ", "off 10 ms: ", "off 200 ms: "].iter().any(|s| text(&o).contains(s)), "{}", text(&o));
    // A range, twice with the same seed.
    let s = demo(6, true, "quarch_serial").replace("off_time_ms = 5", "off_time_ms = { min = 2, max = 40 }");
    let drawn = |name: &str| {
        let (o, rd) = run(&d, name, &s);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        of(&events(&rd), "cycle_started").map(|c| c["off_time_ms"].as_u64().unwrap()).collect::<Vec<u64>>()
    };
    let (a, b) = (drawn("range-a"), drawn("range-b"));
    assert_eq!(a.len(), 6);
    assert!(a.iter().all(|ms| (2..=40).contains(ms)), "{a:?}");
    assert_eq!(a, b, "the same seed draws the same off times");
    // A fixed off time is the scenario's, not each cycle's.
    let (o, rd) = run(&d, "fixed", &demo(2, true, "quarch_serial"));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(of(&events(&rd), "cycle_started").all(|c| c.get("off_time_ms").is_none()));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_run_directory_short_of_space_suspends_the_run_and_resume_finishes_it() {
    let test = "a_run_directory_short_of_space_suspends_the_run_and_resume_finishes_it";
    let d = scratch("space");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=200m", "tmpfs", mnt.to_str().unwrap()]).output().unwrap();
    if !mounted.status.success() {
        skip(test, &format!("cannot mount a tmpfs (needs root): {}", String::from_utf8_lossy(&mounted.stderr).trim()));
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let s = demo(60, true, "quarch_serial").replace("capacity_bytes = 67108864", "capacity_bytes = 16777216");
    let file = d.join("space.toml");
    std::fs::write(&file, &s).unwrap();
    let rd = mnt.join("run");
    let child = Command::new(BIN)
        .args(["run", file.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A few cycles in, something else fills the filesystem down to 40 MiB free.
    let start = std::time::Instant::now();
    while std::fs::read_to_string(rd.join("events.jsonl")).map_or(0, |t| t.matches("\"cycle_ended\"").count()) < 5 {
        assert!(start.elapsed().as_secs() < 60, "no progress");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = Command::new("df").args(["-B1", "--output=avail", mnt.to_str().unwrap()]).output().unwrap();
    let avail: u64 = String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap();
    let filler = mnt.join("filler");
    let fill = Command::new("fallocate").args(["-l", &(avail - (40 << 20)).to_string(), filler.to_str().unwrap()]).output().unwrap();
    assert!(fill.status.success(), "{}", String::from_utf8_lossy(&fill.stderr));
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("suspended") && err.contains("MiB free") && err.contains("faultline resume"), "{err}");
    let ev = events(&rd);
    let ended = of(&ev, "cycle_ended").count();
    assert!((5..60).contains(&ended), "{ended}");
    assert_eq!(of(&ev, "run_ended").count(), 0, "a suspended run has not ended");
    assert_eq!(of(&ev, "run_suspended").count(), 1, "the suspension is recorded, with its reason");
    assert_eq!(of(&ev, "harness_error").count(), 0, "{ev:?}");

    // Still short: resuming refuses, and records nothing.
    let again = Command::new(BIN).args(["resume", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", text(&again));
    assert_eq!(events(&rd).len(), ev.len(), "nothing recorded while short of space");
    // Space back: the run finishes where it stopped, clean.
    std::fs::remove_file(&filler).unwrap();
    let done = Command::new(BIN).args(["resume", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    let ev = events(&rd);
    let cycles: Vec<u64> = of(&ev, "cycle_ended").map(|e| e["cycle"].as_u64().unwrap()).collect();
    assert_eq!(cycles, (1..=60).collect::<Vec<_>>(), "every cycle recorded once");
    assert_eq!(of(&ev, "run_resumed").count(), 1);
    let summary: Value = serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!((summary["verdict"].as_str(), summary["resumes"].as_u64()), (Some("clean"), Some(1)), "{summary}");
}

#[test]
fn a_controller_that_fails_mid_run_is_reported_and_the_policy_decides() {
    // A switch whose second `off` fails: with stop.on_controller_failure = "continue" the run
    // records the failed cycle as a harness error and goes on; with "stop" it ends there.
    let d = scratch("ctlfail");
    let img = d.join("target.img");
    std::fs::File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let dir = d.to_str().unwrap();
    let off = d.join("off.sh");
    std::fs::write(
        &off,
        format!("#!/bin/sh\ncd {dir}\nn=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n\n[ $n -ne 2 ] || {{ echo 'relay board not answering' >&2; exit 1; }}\necho off > state\n"),
    )
    .unwrap();
    let on = d.join("on.sh");
    std::fs::write(&on, format!("#!/bin/sh\necho on > {dir}/state\n")).unwrap();
    for f in [&off, &on] {
        Command::new("chmod").arg("+x").arg(f).status().unwrap();
    }
    let scenario = |policy: &str| {
        format!(
            "format_version = 1\nname = \"ctlfail\"\nseed = 5\ncontract = \"plp\"\n[target]\npath = \"{}\"\n\
             [controllers]\npower = \"exec:?off={}&on={}&state=cat {dir}/state\"\n[fault]\nkind = \"power_cut\"\n\
             [cut]\nkind = \"after_completions\"\ncompletions = 200\n[cycles]\ncount = 4\noff_time_ms = 1\nreadiness_timeout_s = 2\n\
             [stop]\non_controller_failure = \"{policy}\"\n",
            img.display(),
            off.display(),
            on.display()
        )
    };
    let (o, rd) = run(&d, "continue", &scenario("continue"));
    assert_eq!(o.status.code(), Some(2), "a harness error makes the verdict `error`\n{}", text(&o));
    let ev = events(&rd);
    let verdicts: Vec<&str> = of(&ev, "cycle_ended").map(|c| c["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, vec!["clean", "error", "clean", "clean"], "{}", text(&o));
    let errs: Vec<&Value> = of(&ev, "harness_error").collect();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0]["message"].as_str().unwrap().contains("relay board not answering"), "{errs:?}");
    assert_eq!(errs[0]["cycle"], 2);
    // The exec: switch's transcript is in the log: every command it ran, with its output.
    let logs: Vec<String> = of(&ev, "controller_log").flat_map(|l| l["lines"].as_array().unwrap().iter().map(|x| x.to_string())).collect();
    assert!(logs.iter().any(|l| l.contains("off.sh")) && logs.iter().any(|l| l.contains("on.sh")), "{logs:?}");
    assert!(logs.iter().any(|l| l.contains("relay board not answering")), "the failing command's stderr too: {logs:?}");

    std::fs::remove_file(d.join("n")).unwrap();
    let (o, rd) = run(&d, "stop", &scenario("stop"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(of(&events(&rd), "cycle_started").count(), 2, "the run stops at the failing controller");
    assert!(text(&o).contains("controller failure"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_cycle_whose_fault_failed_records_and_verifies_what_it_wrote() {
    // A switch whose `off` fails in cycle 2, after which the run stops: cycle 2 wrote (and the
    // target completed) its writes until the failed cut; they are counted and verified, and a
    // run stopped after 2 of 4 cycles is not complete.
    let d = scratch("faultfail");
    let img = d.join("target.img");
    std::fs::File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let dir = d.to_str().unwrap();
    let off = d.join("off.sh");
    std::fs::write(
        &off,
        format!(
            "#!/bin/sh\ncd {dir}\nn=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n\n[ $n -ne 2 ] || exit 3\necho off > state\n"
        ),
    )
    .unwrap();
    let on = d.join("on.sh");
    std::fs::write(&on, format!("#!/bin/sh\necho on > {dir}/state\n")).unwrap();
    for f in [&off, &on] {
        Command::new("chmod").arg("+x").arg(f).status().unwrap();
    }
    let scenario = format!(
        "format_version = 1\nname = \"faultfail\"\nseed = 11\ncontract = \"plp\"\n[target]\npath = \"{}\"\n\
         [controllers]\npower = \"exec:?off={}&on={}&state=cat {dir}/state\"\n[fault]\nkind = \"power_cut\"\n\
         [cut]\nkind = \"after_completions\"\ncompletions = 300\n[cycles]\ncount = 4\noff_time_ms = 1\nreadiness_timeout_s = 2\n\
         [verify]\nsample_bytes = 0\n",
        img.display(),
        off.display(),
        on.display()
    );
    let (o, rd) = run(&d, "faultfail", &scenario);
    assert_eq!(o.status.code(), Some(2), "a failed fault is a harness error\n{}", text(&o));
    assert_eq!(text(&o).matches("verdict:").count(), 1, "one verdict line\n{}", text(&o));
    let ev = events(&rd);
    let ended: Vec<&Value> = of(&ev, "cycle_ended").collect();
    assert_eq!(ended.len(), 2, "the run stops at the failed fault\n{}", text(&o));
    assert_eq!(ended[1]["verdict"], "error", "{:?}", ended[1]);
    assert!(ended[1]["writes_completed"].as_u64().unwrap() >= 300, "the writes cycle 2 completed are counted: {:?}", ended[1]);
    let verified: Vec<u64> = of(&ev, "verified").map(|v| v["cycle"].as_u64().unwrap()).collect();
    assert_eq!(verified, [1, 2], "cycle 2's writes are verified too\n{}", text(&o));
    assert!(of(&ev, "verified").all(|v| v["bytes"].as_u64().unwrap() > 0));
    assert_eq!(of(&ev, "finding").count(), 0, "a file keeps what it was given: no findings\n{}", text(&o));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!((summary["complete"].as_bool(), summary["ended"].as_bool()), (Some(false), Some(true)), "{summary}");
    assert_eq!(summary["cycles_done"].as_u64(), Some(2));
    assert!(summary["stopped"].as_str().is_some_and(|s| s.contains("controller failure")), "{summary}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A power cut's `recovery`: in a mix, the plain cut's cycles have one `power_restored` and
/// no `recovery_cut`; the shaped cycles cut twice more once the drive answered (each within
/// its window of the `ready` before it, each followed by the power back and a `ready`), and
/// verify once. A drive whose journal replay is not idempotent shows corruption in the shaped
/// cycles only; the honest drive, cut before it is ready, stays clean. The summary tallies
/// the cycles per shape.
#[test]
fn cuts_while_the_drive_recovers_land_in_their_window_before_one_verify_and_find_a_replay_that_is_not_idempotent() {
    let d = scratch("recovery");
    let mix = "[fault]\nkind = \"mixed\"\npick = \"sequence\"\nfaults = [\n  { fault = { kind = \"power_cut\" } },\n  \
               { fault = { kind = \"power_cut\", recovery = { cuts = 2, at = \"after_ready\", within_ms = 10 } } },\n]\n";
    let s = demo(4, false, "quarch_serial")
        .replace("kind = \"rollback\", writes_per_cut = 1", "kind = \"replay_corrupts\", replay_ms = 10000, sectors_per_cut = 2")
        .replace("[fault]\nkind = \"power_cut\"\n", mix);
    let (o, rd) = run(&d, "replay", &s);
    assert_eq!(o.status.code(), Some(1), "the replay corrupts\n{}", text(&o));
    let ev = events(&rd);
    let in_cycle = |kind: &str, c: u64| of(&ev, kind).filter(|e| e["cycle"] == c).count();
    for c in 1..=4u64 {
        let shaped = c % 2 == 0;
        let want = if shaped { (2, 3, 3, 1) } else { (0, 1, 1, 1) };
        let got = (in_cycle("recovery_cut", c), in_cycle("power_restored", c), in_cycle("ready", c), in_cycle("verified", c));
        assert_eq!(got, want, "cycle {c}\n{}", text(&o));
    }
    for rc in of(&ev, "recovery_cut") {
        assert_eq!(rc["ready"], true, "{rc}");
        let after_us = rc["after_us"].as_u64().unwrap();
        assert!(after_us < 10_000 + 500_000, "{rc}: drawn within 10 ms of ready");
    }
    assert!(of(&ev, "power_restored").all(|e| e["off_us"].as_u64().unwrap() >= 5000), "each cut held its 5 ms");
    let found: Vec<(&Value, &Value)> = of(&ev, "finding").map(|f| (&f["finding"]["class"], &f["cycle"])).collect();
    assert!(!found.is_empty(), "{}", text(&o));
    assert!(found.iter().all(|(class, c)| *class == "corruption" && c.as_u64().unwrap() % 2 == 0), "{found:?}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    let per = &summary["faults"];
    assert_eq!((per["power-cut"]["cycles"].as_u64(), per["power-cut+2-after-ready"]["cycles"].as_u64()), (Some(2), Some(2)), "{summary}");
    assert_eq!(per["power-cut"]["clean"].as_u64(), Some(2), "{summary}");
    assert!(per["power-cut+2-after-ready"]["ready_max_us"].as_u64().is_some(), "time to ready per shape: {summary}");
    // The report tells the shapes apart, with a bar each.
    let html = std::fs::read_to_string(rd.join("report.html")).unwrap();
    assert!(html.contains("Which shape loses data") && html.contains("<td>power-cut+2-after-ready</td>"), "report.html");
    assert!(html.contains(">2 of 2</text>") && html.contains(">0 of 2</text>"), "report.html's bars");

    let s = demo(3, true, "quarch_serial").replace("kind = \"power_cut\"\n", "kind = \"power_cut\"\nrecovery = { cuts = 1 }\n");
    let (o, rd) = run(&d, "honest", &s);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ev = events(&rd);
    let before: Vec<&Value> = of(&ev, "recovery_cut").collect();
    assert_eq!(before.len(), 3, "{}", text(&o));
    assert!(before.iter().all(|e| e["ready"] == false && e["n"] == 1), "{before:?}");
    assert_eq!((of(&ev, "power_restored").count(), of(&ev, "ready").count()), (6, 3), "one ready per cycle: after the last cut");
    let _ = std::fs::remove_dir_all(&d);
}

/// A power glitch through the Quarch hot-plug module's emulator, driven by the real serial
/// driver over a pty: each cycle the module's glitch engine takes the simulated drive's power
/// for 2 ms and gives it back by itself (`power_restored` says 2,000 µs), the writes in flight
/// fail, the drive answers again and is verified: clean on an honest drive, lost writes on one
/// that rolls back. A relay board cannot glitch: refused before any cycle, naming the field.
#[test]
fn a_power_glitch_through_the_quarch_hot_plug_emulator_cuts_for_its_length_and_a_relay_is_refused() {
    let d = scratch("glitch");
    let glitch = "kind = \"power_glitch\"\nlength_us = 2000\n";
    let s = demo(3, true, "quarch_hotplug_serial").replace("kind = \"power_cut\"\n", glitch);
    let (o, rd) = run(&d, "honest", &s);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ev = events(&rd);
    assert_eq!((of(&ev, "cut_issued").count(), of(&ev, "ready").count(), of(&ev, "verified").count()), (3, 3, 3), "{}", text(&o));
    let held: Vec<u64> = of(&ev, "power_restored").map(|e| e["off_us"].as_u64().unwrap()).collect();
    assert_eq!(held, [2000, 2000, 2000]);
    assert_eq!(of(&ev, "device_gone").count(), 3, "the glitch took the drive away each time:\n{}", text(&o));
    let (o, _) = run(&d, "rollback", &demo(3, false, "quarch_hotplug_serial").replace("kind = \"power_cut\"\n", glitch));
    assert_eq!(o.status.code(), Some(1), "a glitch is a cut to this drive\n{}", text(&o));
    let (o, rd) = run(&d, "relay", &demo(3, true, "lcus_serial").replace("kind = \"power_cut\"\n", glitch));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = text(&o);
    assert!(e.contains("controllers.power") && e.contains("a power_glitch needs a Quarch hot-plug module's glitch engine"), "{e}");
    assert!(!rd.join("events.jsonl").exists(), "refused before any cycle");
    let _ = std::fs::remove_dir_all(&d);
}

/// A sag and a ramp through the Quarch power module's emulator, driven by the real serial
/// driver over a pty, mixed with a plain cut (`fault.kind = "mixed"`), on a drive whose
/// power-fail detector trips at 9 V, under its electronics' brown-out at 10 V: the sag to
/// 9.5 V and the ramp's first step (9.6 V) land the writes in flight with a bit flipped and
/// nothing reports it; the plain cut finds nothing. An honest drive meets the same sag as a
/// power loss (its detector trips at 10.8 V) and stays clean. A hot-plug module cannot set a
/// voltage: refused before any cycle.
#[test]
fn a_sag_and_a_ramp_through_the_quarch_power_module_find_a_late_power_fail_detector() {
    let d = scratch("sag");
    let mixed = "kind = \"mixed\"\npick = \"sequence\"\nfaults = [\n  { fault = { kind = \"power_cut\" } },\n  \
                 { fault = { kind = \"power_sag\", to_mv = 9500, length_ms = 5 } },\n  \
                 { fault = { kind = \"power_ramp\", over_ms = 50 } },\n]\n";
    let late = demo(6, false, "quarch_serial")
        .replace("kind = \"power_cut\"\n", mixed)
        .replace("kind = \"rollback\", writes_per_cut = 1", "kind = \"pfail_misses_sag\", detect_mv = 9000");
    let (o, rd) = run(&d, "late", &late);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let ev = events(&rd);
    let found: Vec<(&Value, u64)> = of(&ev, "finding").map(|f| (&f["finding"]["class"], f["cycle"].as_u64().unwrap())).collect();
    assert!(found.iter().all(|(class, c)| *class == "corruption" && c % 3 != 1), "only the sag's and the ramp's cycles: {found:?}");
    let cycles: std::collections::BTreeSet<u64> = found.iter().map(|(_, c)| c % 3).collect();
    assert_eq!(cycles.into_iter().collect::<Vec<_>>(), [0, 2], "both shapes found it:\n{}", text(&o));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    let per = &summary["faults"];
    assert_eq!(per["power-cut"]["clean"].as_u64(), Some(2), "{summary}");
    assert_eq!(per["power-sag-9500mv-5ms"]["cycles"].as_u64(), Some(2), "{summary}");
    assert_eq!(per["power-ramp-50ms-to-0mv"]["cycles"].as_u64(), Some(2), "{summary}");
    let honest = demo(4, true, "quarch_serial").replace("kind = \"power_cut\"\n", "kind = \"power_sag\"\nto_mv = 9500\nlength_ms = 5\n");
    let (o, rd) = run(&d, "honest", &honest);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(of(&events(&rd), "device_gone").count(), 4, "an honest drive's detector cut it each time:\n{}", text(&o));
    let (o, rd) = run(&d, "hotplug", &honest.replace("switch = \"quarch_serial\"", "switch = \"quarch_hotplug_serial\""));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = text(&o);
    assert!(e.contains("controllers.power") && e.contains("a power_sag needs a Quarch power module's programmable rail"), "{e}");
    assert!(!rd.join("events.jsonl").exists(), "refused before any cycle");
    let _ = std::fs::remove_dir_all(&d);
}

/// OCP PLP-1 (scenarios/plp-1.toml, shortened): normal shutdowns (CC.SHN, no flush from the
/// writer) and abrupt cuts alternating, under the flush contract. A drive that makes its
/// cache durable at the shutdown is clean, and each normal shutdown's handshake is in its
/// cycle's `controller_log`; a drive that drops its cache whatever it was told loses, at the
/// normal shutdowns, writes the shutdown made owed.
#[test]
fn plp_1_normal_shutdowns_owe_every_acknowledged_write_and_find_a_drive_that_drops_its_cache() {
    let d = scratch("plp1");
    let plp1 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/plp-1.toml")).unwrap();
    let short = plp1.replace("count = 20", "count = 4").replace("every_writes = 256", "every_writes = 100000");
    assert_ne!(short, plp1);
    let (o, rd) = run(&d, "honest", &short);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ev = events(&rd);
    let shut: Vec<&Value> = of(&ev, "controller_log")
        .filter(|e| e["lines"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("normal shutdown: ")))
        .collect();
    assert_eq!(shut.iter().map(|e| e["cycle"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 3], "{}", text(&o));
    let line = shut[0]["lines"][0].as_str().unwrap();
    assert!(line.contains("the simulated drive's controller shut down (CC.SHN, CSTS.SHST complete) in "), "{line}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["faults"]["normal-shutdown"]["clean"].as_u64(), Some(2), "{summary}");
    // No flush all cycle long: the drive's own shutdown made the cycle's writes durable, so a
    // drive that drops its cache loses writes it owes, in the normal shutdowns' cycles.
    let lossy = short.replace("kind = \"honest_volatile\"", "kind = \"lies_about_flush\"");
    let (o, rd) = run(&d, "lossy", &lossy);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let ev = events(&rd);
    let found: Vec<(&Value, u64)> = of(&ev, "finding").map(|f| (&f["finding"]["class"], f["cycle"].as_u64().unwrap())).collect();
    assert!(found.iter().any(|(c, n)| *c == "lost_write" && n % 2 == 1), "{found:?}");
    let _ = std::fs::remove_dir_all(&d);
}
