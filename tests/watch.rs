//! `faultline watch RUN_DIR` against the real binary on the simulated demo: started before the
//! run (it waits), following it live, and following a run that is killed (SIGKILL) and taken
//! up again by `faultline resume`; and a log written in pieces that split lines, which watch
//! must show exactly as the whole log.
//!
//! Seeds: the demo's `SEED`, and the chunk sizes of the split log from `SEED` (printed on
//! failure).

use crate::common::{s, scratch, text, BIN};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SEED: u64 = 20261202;

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn faultline")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The console's lines of a `run`/`resume` output (without the lines the command itself adds).
fn console_lines(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| {
            !["faultline run:", "faultline resume:", "run directory:", "reports:", "stopped after"].iter().any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect()
}

fn summary(rd: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap()
}

fn cycles_ended(rd: &Path) -> usize {
    std::fs::read_to_string(rd.join("events.jsonl")).map_or(0, |t| t.matches("\"event\":\"cycle_ended\"").count())
}

#[test]
fn watch_started_before_the_run_prints_what_the_run_prints_and_exits_with_its_code() {
    let d = scratch("live");
    let rd = d.join("run");
    let watch = spawn(&["watch", s(&rd), "--poll-ms", "20", "--start-timeout", "120"]);
    std::thread::sleep(Duration::from_millis(300));
    let seed = SEED.to_string();
    let run = spawn(&["run", "--cycles", "30", "--seed", &seed, "--run-dir", s(&rd)]).wait_with_output().unwrap();
    let w = watch.wait_with_output().unwrap();
    assert_eq!(run.status.code(), Some(1), "seed {SEED}: {}", text(&run));
    assert_eq!(w.status.code(), run.status.code(), "seed {SEED}: watch exits as the run did\n{}", text(&w));
    assert!(String::from_utf8_lossy(&w.stderr).contains("waiting for a run to start"), "seed {SEED}: {}", text(&w));
    let (ours, theirs) = (console_lines(&stdout(&w)), console_lines(&stdout(&run)));
    assert_eq!(ours, theirs, "seed {SEED}: watch shows the run as its console did");
    assert!(ours.iter().any(|l| l.contains("new findings, first: lost_write")), "seed {SEED}: {ours:?}");
    assert!(ours.last().unwrap().starts_with("verdict: "), "seed {SEED}: {ours:?}");
    // Once the run has ended, --no-follow shows the same and exits the same.
    let again = Command::new(BIN).args(["watch", s(&rd), "--no-follow"]).output().unwrap();
    assert_eq!((again.status.code(), console_lines(&stdout(&again))), (Some(1), theirs), "seed {SEED}");
    let _ = std::fs::remove_dir_all(&d);
}

/// SplitMix64, for the chunk sizes.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }
}

#[test]
fn lines_written_in_pieces_are_shown_once_whole() {
    let d = scratch("pieces");
    let whole = d.join("whole");
    let seed = SEED.to_string();
    let run = Command::new(BIN).args(["run", "--cycles", "12", "--seed", &seed, "--run-dir", s(&whole)]).output().unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", text(&run));
    let log = std::fs::read(whole.join("events.jsonl")).unwrap();
    // A half-written log: --no-follow shows the whole lines, says a line is being written,
    // and exits as an unfinished run with findings does.
    let part = d.join("part");
    std::fs::create_dir_all(&part).unwrap();
    let cut = log.len() / 2;
    std::fs::write(part.join("events.jsonl"), &log[..cut]).unwrap();
    let o = Command::new(BIN).args(["watch", s(&part), "--no-follow"]).output().unwrap();
    assert!(stdout(&o).contains("the run has not ended"), "{}", text(&o));
    if log[cut - 1] != b'\n' {
        assert!(stdout(&o).contains("of a line being written"), "{}", text(&o));
    }
    // Followed while it is written in random pieces, it shows what the whole log shows.
    let live = d.join("live");
    std::fs::create_dir_all(&live).unwrap();
    let watch = spawn(&["watch", s(&live), "--poll-ms", "5"]);
    let mut rng = Rng(SEED);
    let mut f = std::fs::File::create(live.join("events.jsonl")).unwrap();
    let mut at = 0;
    while at < log.len() {
        let n = (1 + rng.below(700) as usize).min(log.len() - at);
        f.write_all(&log[at..at + n]).unwrap();
        f.flush().unwrap();
        at += n;
        std::thread::sleep(Duration::from_millis(rng.below(8)));
    }
    let w = watch.wait_with_output().unwrap();
    let full = Command::new(BIN).args(["watch", s(&whole), "--no-follow"]).output().unwrap();
    assert_eq!(w.status.code(), Some(1), "seed {SEED}: {}", text(&w));
    assert_eq!(stdout(&w), stdout(&full), "seed {SEED}: pieces shown as the whole log");
    assert_eq!(console_lines(&stdout(&full)), console_lines(&stdout(&run)), "seed {SEED}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn watch_follows_a_run_killed_and_resumed_meanwhile() {
    let d = scratch("resumed");
    let rd = d.join("run");
    let seed = SEED.to_string();
    let mut run = spawn(&["run", "--cycles", "60", "--seed", &seed, "--run-dir", s(&rd)]);
    let watch = spawn(&["watch", s(&rd), "--poll-ms", "20"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while cycles_ended(&rd) < 10 {
        assert!(Instant::now() < deadline, "seed {SEED}: no 10 cycles within 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    run.kill().unwrap(); // SIGKILL
    let killed = run.wait_with_output().unwrap();
    assert_eq!(killed.status.code(), None, "seed {SEED}: killed by a signal\n{}", text(&killed));
    std::thread::sleep(Duration::from_millis(300));
    let resumed = Command::new(BIN).args(["resume", s(&rd)]).output().unwrap();
    let w = watch.wait_with_output().unwrap();
    assert_eq!(resumed.status.code(), Some(1), "seed {SEED}: {}", text(&resumed));
    assert_eq!(w.status.code(), resumed.status.code(), "seed {SEED}: watch exits as the resumed run did\n{}", text(&w));
    let ours = console_lines(&stdout(&w));
    assert!(ours.iter().any(|l| l.starts_with("resumed after ")), "seed {SEED}: {ours:?}");
    // The verdict counts every finding of the run, before the kill and after.
    let sm = summary(&rd);
    let verdict = ours.last().unwrap();
    assert!(verdict.starts_with(&format!("verdict: {} finding", sm["findings"])), "seed {SEED}: {verdict} vs {sm}");
    assert_eq!(sm["resumes"], 1, "seed {SEED}");
    // The resumed process's console counts the whole run too: the same totals and verdict.
    let tail = |v: &[String]| v.iter().skip_while(|l| !l.contains(" cycles in ")).cloned().collect::<Vec<_>>();
    let theirs_tail = tail(&console_lines(&stdout(&resumed)));
    assert!(theirs_tail.len() >= 2, "seed {SEED}: {}", text(&resumed));
    assert_eq!(tail(&ours), theirs_tail, "seed {SEED}: totals and verdict");
    // Each cycle with new findings is shown as the process that ran it showed it (but the
    // interrupted one, which each process saw only part of).
    let interrupted: Option<u64> = std::fs::read_to_string(rd.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["event"] == "run_resumed")
        .and_then(|v| v["interrupted_cycle"].as_u64());
    let found = |out: &str| -> Vec<String> {
        console_lines(out)
            .into_iter()
            .filter(|l| l.contains("new findings, first:"))
            .filter(|l| interrupted.is_none_or(|c| !l.starts_with(&format!("cycle {c:>5}:"))))
            .collect()
    };
    // The killed process may have logged a cycle's end and died before its console printed
    // it: watch, reading the log, shows that one line more, between the two processes' lines.
    let (before, after, ours) = (found(&stdout(&killed)), found(&stdout(&resumed)), found(&stdout(&w)));
    let cycle_of = |l: &String| -> u32 { l["cycle".len()..].split(':').next().unwrap().trim().parse().unwrap() };
    let extra: Vec<&String> = ours.iter().filter(|l| !before.contains(l) && !after.contains(l)).collect();
    let theirs: Vec<&String> = ours.iter().filter(|l| !extra.contains(l)).collect();
    assert_eq!(theirs, before.iter().chain(&after).collect::<Vec<_>>(), "seed {SEED}: interrupted cycle {interrupted:?}");
    assert!(extra.len() <= 1, "seed {SEED}: {extra:?}");
    for l in extra {
        let c = cycle_of(l);
        assert!(before.last().is_none_or(|b| cycle_of(b) < c) && after.first().is_none_or(|a| c < cycle_of(a)), "seed {SEED}: {l}");
    }
    let _ = std::fs::remove_dir_all(&d);
}
