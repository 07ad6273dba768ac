//! End-to-end tests: the real `faultline` binary on real files in scratch directories.
//! Every test is deterministic from the seeds it names; failures print them.

use crate::common::{ok, run, s, scratch, text, BIN};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn target(dir: &Path, bytes: u64) -> PathBuf {
    let p = dir.join("target.img");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(bytes).unwrap();
    p
}

fn verify_json(t: &Path, rd: &Path) -> (i32, Value) {
    let o = run(&["verify", "--target", t.to_str().unwrap(), "--run-dir", rd.to_str().unwrap(), "--json"]);
    let code = o.status.code().unwrap();
    assert!(code == 0 || code == 1, "verify failed as a harness error:\n{}", text(&o));
    (code, serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("verify --json output is not JSON ({e}):\n{}", text(&o))))
}

#[test]
fn write_then_verify_is_clean_and_continues_as_new_cycles() {
    let d = scratch("clean");
    let t = target(&d, 8 << 20);
    let rd = d.join("run");
    ok(&[
        "write",
        "--target",
        s(&t),
        "--run-dir",
        s(&rd),
        "--seed",
        "11",
        "--writes",
        "3000",
        "--min-write",
        "512",
        "--max-write",
        "65536",
        "--mean-write",
        "8192",
        "--flush-every",
        "50",
        "--contract",
        "flush",
        "--prefill",
        "--atomic-bytes",
        "4096",
    ]);
    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 0, "seed 11: {v}");
    assert_eq!(v["summary"]["lost_write"], 0);
    assert_eq!(v["sectors"], (8 << 20) / 512);
    assert_eq!(v["prior_ok"], 0, "prefill leaves no never-written sector");
    // Same run directory again: a new cycle of the same run.
    let o = ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--writes", "2000"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("cycle 2:"), "{}", text(&o));
    let (code, v) = verify_json(&t, &rd);
    assert_eq!((code, v["cycle"].as_u64()), (0, Some(2)), "{v}");
    // Changing the workload of an existing run is refused, naming the option.
    let o = run(&["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "12"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--seed 12 (the run has 11)"), "{}", text(&o));
}

fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x10;
    f.write_all_at(&b, offset).unwrap();
}

fn copy_range(path: &Path, from: &[u8], offset: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(from, offset).unwrap();
}

fn read_range(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut b = vec![0u8; len];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, offset).unwrap();
    b
}

fn classes_at(v: &Value, offset: u64) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["offset"].as_u64().unwrap() <= offset && offset < f["offset"].as_u64().unwrap() + f["length"].as_u64().unwrap())
        .map(|f| f["class"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn damage_done_to_the_file_is_found_and_classified() {
    // Sequential 64 KiB writes over a 4 MiB span: two passes, so every block has an older
    // version to roll back to.
    let d = scratch("damage");
    let t = target(&d, 4 << 20);
    let rd = d.join("run");
    let w = |extra: &[&str]| {
        let mut a = vec!["write", "--target", s(&t), "--run-dir", s(&rd), "--block-size", "65536", "--pattern", "seq"];
        a.extend_from_slice(extra);
        ok(&a);
    };
    w(&["--seed", "21", "--writes", "64"]);
    let old = read_range(&t, 1 << 20, 65536);
    w(&["--writes", "64"]);
    assert_eq!(verify_json(&t, &rd).0, 0);

    // Bit flip inside a payload: corruption, exactly there.
    flip_byte(&t, (2 << 20) + 700);
    // An older version of one whole write: lost write.
    copy_range(&t, &old, 1 << 20);
    // A sector copied to another address: misdirected write.
    let sec = read_range(&t, 512 * 10, 512);
    copy_range(&t, &sec, 512 * 4000);

    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 1, "{v}");
    assert_eq!(classes_at(&v, (2 << 20) + 512), vec!["corruption"], "{v}");
    assert_eq!(classes_at(&v, (1 << 20) + 4096), vec!["lost_write"], "{v}");
    assert_eq!(classes_at(&v, 512 * 4000), vec!["misdirected_write"], "{v}");
    assert_eq!(v["summary"]["lost_write"], 1, "one lost write, reported as one extent");
    let lost = v["findings"].as_array().unwrap().iter().find(|f| f["class"] == "lost_write").unwrap();
    assert_eq!((lost["offset"].as_u64(), lost["length"].as_u64()), (Some(1 << 20), Some(65536)));
    assert_eq!(lost["expected"]["kind"], "write");
    assert_eq!(lost["found"]["kind"], "write");
    assert!(lost["found"]["write_id"].as_u64() < lost["expected"]["write_id"].as_u64());
}

/// Issue 12: a sector inside a durable write overwritten with bytes that are no version at
/// all was reported as a torn write ("7 of its 8 expected sectors hold older content").
#[test]
fn garbage_inside_a_durable_write_is_corruption_not_a_torn_write() {
    let d = scratch("garbage");
    let garbage = |seed: u64| -> Vec<u8> {
        // Deterministic bytes that decode as nothing (SplitMix64).
        let mut x = seed;
        (0..512)
            .map(|_| {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    };
    let class_of_garbage = |name: &str, cycles: u32, prefill: bool| {
        let t = target(&d, 8 << 20);
        let rd = d.join(name);
        for c in 0..cycles {
            let mut a = vec!["write", "--target", s(&t), "--run-dir", s(&rd), "--block-size", "4096"];
            if c == 0 {
                a.extend(["--seed", "12"]);
                if prefill {
                    a.push("--prefill");
                }
            }
            ok(&a);
        }
        assert_eq!(verify_json(&t, &rd).0, 0);
        let at = (3 << 20) + 512;
        copy_range(&t, &garbage(7), at);
        let (code, v) = verify_json(&t, &rd);
        assert_eq!(code, 1, "{v}");
        assert_eq!(v["findings"].as_array().unwrap().len(), 1, "{v}");
        let f = &v["findings"][0];
        assert_eq!((f["offset"].as_u64(), f["length"].as_u64()), (Some(at), Some(512)), "{v}");
        (f["class"].as_str().unwrap().to_string(), f["detail"].as_str().unwrap().to_string())
    };
    // Two full passes: the sector held only this run's versions, so nothing older explains it.
    let (class, detail) = class_of_garbage("two-cycles", 2, false);
    assert_eq!(class, "corruption", "{detail}");
    assert!(detail.contains("matches no version"), "{detail}");
    // Prefilled, one pass: the same.
    assert_eq!(class_of_garbage("prefilled", 1, true).0, "corruption");
    // One pass, no prefill: the bytes may be what the sector held before the run (the file was
    // zeros here, but the verifier cannot know that of a drive): older content, so torn.
    assert_eq!(class_of_garbage("first-version", 1, false).0, "torn_write");
    let _ = std::fs::remove_dir_all(&d);
}

/// The byte offset just past the ledger frame holding the first record for which `pick`
/// says yes (frames: 24-byte header with the payload length at bytes 4..8, JSON payload).
fn ledger_boundary_after(ledger: &[u8], pick: impl Fn(&Value) -> bool) -> usize {
    let mut at = 0;
    while at + 24 <= ledger.len() {
        let len = u32::from_le_bytes(ledger[at + 4..at + 8].try_into().unwrap()) as usize;
        let rec: Value = serde_json::from_slice(&ledger[at + 24..at + 24 + len]).unwrap();
        at += 24 + len;
        if pick(&rec) {
            return at;
        }
    }
    panic!("no such ledger record");
}

/// Issue 12: a ledger cut short at a frame boundary (a run directory restored from an old
/// backup) made `verify` blame the drive with `unexpected_version` findings. A valid sector of
/// this run above every reservation proves the ledger lost records: a harness error.
#[test]
fn a_ledger_that_lost_records_is_a_harness_error_not_a_finding() {
    let d = scratch("ledger-behind");
    let t = target(&d, 8 << 20);
    let rd = d.join("run");
    ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "21", "--block-size", "4096", "--writes", "1500"]);
    ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--writes", "1500"]);
    assert_eq!(verify_json(&t, &rd).0, 0);
    let ledger_path = rd.join("ledger.fl");
    let ledger = std::fs::read(&ledger_path).unwrap();
    let cut = ledger_boundary_after(&ledger, |r| r["type"] == "cycle_end" && r["cycle"] == 1);
    assert!(cut < ledger.len());
    std::fs::write(&ledger_path, &ledger[..cut]).unwrap();
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd), "--json"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "seed 21: {out}");
    assert!(
        out.contains("the ledger lost records")
            && out.contains("of cycle 2, a valid sector of this run")
            && out.contains("ids only below 1501"),
        "seed 21: {out}"
    );
    assert!(!out.contains("unexpected_version"), "seed 21: {out}");
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 12: a user who dumped a drive with `dd` verifies the dump against the run directory,
/// explicitly, read-only; `write` refuses the option.
#[test]
fn a_copy_of_the_target_verifies_only_when_named_a_copy() {
    let d = scratch("image-of-target");
    let t = target(&d, 8 << 20);
    let rd = d.join("run");
    ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "23", "--block-size", "4096", "--pattern", "seq", "--writes", "1200"]);
    let copy = d.join("dump.img");
    std::fs::copy(&t, &copy).unwrap();
    // Without the option, the copy is another target: refused, with the hint.
    let o = run(&["verify", "--target", s(&copy), "--run-dir", s(&rd)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--image-of-target"), "{}", text(&o));
    // With it: verified, both identities in the output.
    let o = run(&["verify", "--target", s(&copy), "--run-dir", s(&rd), "--json", "--image-of-target"]);
    assert_eq!(o.status.code(), Some(0), "seed 23: {}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["target"]["identity"].as_str().unwrap().contains("dump.img"), "{v}");
    assert!(v["target"]["image_of"].as_str().unwrap().contains("target.img"), "{v}");
    // A copy's verify records nothing in the run's ledger.
    assert!(v["seen_recorded"].is_null(), "{v}");
    // Damage in the copy is found in the copy.
    flip_byte(&copy, 4096 * 10 + 100);
    let o = run(&["verify", "--target", s(&copy), "--run-dir", s(&rd), "--image-of-target"]);
    assert_eq!(o.status.code(), Some(1), "seed 23: {}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("verified as a copy of"), "{}", text(&o));
    // A copy too short for the span is refused.
    let short = d.join("short.img");
    std::fs::write(&short, vec![0u8; 1 << 20]).unwrap();
    let o = run(&["verify", "--target", s(&short), "--run-dir", s(&rd), "--image-of-target"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("shorter than the run's span end"), "{}", text(&o));
    // `write` refuses it.
    let o = run(&["write", "--target", s(&copy), "--run-dir", s(&rd), "--image-of-target"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("read-only `faultline verify`"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn half_rolled_back_write_is_torn() {
    let d = scratch("torn");
    let t = target(&d, 2 << 20);
    let rd = d.join("run");
    let args =
        |n: &'static str| vec!["write", "--target", s(&t), "--run-dir", s(&rd), "--block-size", "65536", "--pattern", "seq", "--writes", n];
    let mut a = args("32");
    a.extend(["--seed", "5"]);
    ok(&a);
    let old = read_range(&t, 65536 * 3, 65536);
    ok(&args("32"));
    copy_range(&t, &old[16384..24576], 65536 * 3 + 16384);
    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 1);
    assert_eq!(v["summary"]["torn_write"], 1, "{v}");
    let f = &v["findings"][0];
    assert_eq!(
        (f["class"].as_str(), f["offset"].as_u64(), f["length"].as_u64()),
        (Some("torn_write"), Some(65536 * 3 + 16384), Some(8192)),
        "{v}"
    );
}

#[test]
fn killing_the_writer_keeps_the_ledger_usable() {
    // SIGKILL at seeded points: the manual power-loss mode. A regular file keeps every
    // completed write (the page cache survives the process), so each verify must be clean,
    // and the next write must close the interrupted cycle and carry on.
    let seed = 0x5eed_u64;
    let d = scratch("kill");
    let t = target(&d, 64 << 20);
    let rd = d.join("run");
    let mut x = seed;
    for round in 0..4 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay_ms = 80 + (x >> 33) % 400;
        let mut args = vec![
            "write",
            "--target",
            s(&t),
            "--run-dir",
            s(&rd),
            "--duration-s",
            "20",
            "--min-write",
            "512",
            "--max-write",
            "131072",
            "--mean-write",
            "16384",
            "--flush-every",
            "100",
            "--contract",
            "flush",
        ];
        if round == 0 {
            args.extend(["--seed", "77"]);
        }
        let mut child = Command::new(BIN).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let (code, v) = verify_json(&t, &rd);
        assert_eq!(
            code,
            0,
            "seed {seed:#x} round {round}, killed after {delay_ms} ms: {v}\nwriter stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each verify closed the cycle the kill left open, so the next write finds none open.
    let o = ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--writes", "500"]);
    assert!(!text(&o).contains("was interrupted"), "{}", text(&o));
    assert_eq!(verify_json(&t, &rd).0, 0);
}

/// The manual power-loss mode as the README gives it: `write` killed mid-cycle, `verify`;
/// then the drive "forgets" that cycle (the image put back to what it held before it). The
/// first verify closed the interrupted cycle and recorded which of its uncertain writes it
/// saw landed, so the second calls those `stale_version` (the drive went back on what it
/// showed), not just `lost_write`.
#[test]
fn a_verify_after_a_killed_write_records_what_it_saw() {
    let seed = 91;
    let d = scratch("kill-seen");
    let t = target(&d, 32 << 20);
    let rd = d.join("run");
    let common = ["--min-write", "4096", "--max-write", "65536", "--mean-write", "16384", "--contract", "plp"];
    let mut args = vec!["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "91", "--writes", "1000"];
    args.extend(common);
    ok(&args);
    let before = std::fs::read(&t).unwrap();
    let mut args = vec!["write", "--target", s(&t), "--run-dir", s(&rd), "--duration-s", "20"];
    args.extend(common);
    // Killed 300 ms after its cycle began (the ledger has its start), however slowly a loaded
    // machine started it.
    let ledger = rd.join("ledger.fl");
    let size = || std::fs::metadata(&ledger).map_or(0, |m| m.len());
    let after_cycle_1 = size();
    let mut child = Command::new(BIN).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = std::time::Instant::now();
    while size() == after_cycle_1 && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    let _ = child.wait_with_output().unwrap();
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd), "--json"]);
    assert_eq!(o.status.code(), Some(0), "seed {seed}\n{}", text(&o));
    assert!(text(&o).contains("cycle 2 was interrupted"), "seed {seed}\n{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let held = v["seen_recorded"]["held"].as_u64().unwrap_or_else(|| panic!("seed {seed}: the verify recorded nothing: {v}"));
    assert!(held > 0, "seed {seed}: {v}");
    std::fs::write(&t, &before).unwrap();
    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 1, "seed {seed}: {v}");
    assert!(v["summary"]["stale_version"].as_u64().unwrap_or(0) > 0, "seed {seed}: the writes seen landed must be stale now: {v}");
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let d = scratch("bad");
    let t = target(&d, 4 << 20);
    let rd = d.join("run");
    ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "3", "--writes", "200"]);

    // A run directory from another target.
    let other = d.join("other.img");
    std::fs::File::create(&other).unwrap().set_len(4 << 20).unwrap();
    let o = run(&["verify", "--target", s(&other), "--run-dir", s(&rd)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("belongs to target"), "{}", text(&o));

    // A truncated target: its identity (which includes the size) no longer matches.
    let content = std::fs::read(&t).unwrap();
    std::fs::OpenOptions::new().write(true).open(&t).unwrap().set_len(1 << 20).unwrap();
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("belongs to target") && text(&o).contains("size=1048576"), "{}", text(&o));
    std::fs::write(&t, &content).unwrap();

    // A torn final record is ignored with a note.
    let ledger = rd.join("ledger.fl");
    let good = std::fs::read(&ledger).unwrap();
    let mut torn = good.clone();
    torn.extend_from_slice(b"FLR1\x20\x00\x00\x00partial");
    std::fs::write(&ledger, &torn).unwrap();
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("torn record"), "{}", text(&o));

    // A corrupted record in the middle: refused, with the record and offset.
    let mut bad = good.clone();
    bad[100] ^= 0xff;
    std::fs::write(&ledger, &bad).unwrap();
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd)]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("corrupted in the middle"), "{}", text(&o));
    std::fs::write(&ledger, &good).unwrap();

    // No ledger at all.
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&d.join("nothing"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("ledger"), "{}", text(&o));

    // A workload that does not fit.
    let o = run(&["write", "--target", s(&t), "--run-dir", s(&d.join("r2")), "--min-write", "1000", "--max-write", "4096"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("min_write_bytes 1000"), "{}", text(&o));
    // Character devices are not targets (block devices are: see tests/blockdev.rs).
    let o = run(&["write", "--target", "/dev/null", "--run-dir", s(&d.join("r3"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("neither a regular file nor a block device"), "{}", text(&o));
    // An OS error is said once, not once by the message and again as its cause.
    let o = run(&["write", "--target", s(&d.join("no-such.img")), "--run-dir", s(&d.join("r4"))]);
    assert_eq!(o.status.code(), Some(2));
    let said = text(&o);
    assert_eq!(said.matches("No such file or directory").count(), 1, "{said}");
    assert!(said.contains("no-such.img"), "{said}");
}

#[test]
fn decode_prints_sector_identities() {
    let d = scratch("decode");
    let t = target(&d, 1 << 20);
    let rd = d.join("run");
    ok(&["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "9", "--block-size", "8192", "--pattern", "seq", "--writes", "4"]);
    let o = ok(&["decode", "--target", s(&t), "--offset", "0", "--length", "65536"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    assert!(lines[0].contains("write 1 cycle 1 port 0 sectors of 16") && lines[0].contains("+8192"), "{out}");
    assert!(lines[3].contains("write 4"), "{out}");
    assert!(lines[4].contains("zeros") && lines[4].contains("+32768"), "{out}");
    let o = ok(&["decode", "--target", s(&t), "--offset", "512", "--length", "1024", "--each"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("(sector 2)"));
}

#[test]
fn the_demo_runs_and_finds_the_simulated_drive_out() {
    let d = scratch("demo");
    let o = run(&["run", "--run-dir", s(&d.join("r")), "--cycles", "40", "--seed", "4", "--model", "lies-about-flush"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("lost_write"), "{}", text(&o));
    let o = run(&["run", "--run-dir", s(&d.join("r2")), "--cycles", "40", "--seed", "4", "--model", "honest-plp"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("verdict: clean"), "{}", text(&o));
    // Each run directory holds its simulated drive.
    let _ = std::fs::remove_dir_all(&d);
}

/// `selftest --cycles N` splits N honest cut cycles evenly over the honest rows.
#[test]
fn selftest_cycles_is_the_honest_total() {
    let o = ok(&["selftest", "--seed", "5", "--cycles", "24", "--faulty-cycles", "1", "--dual-honest-cycles", "3", "--json"]);
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    // The dual-port honest row counts port pulls, not cuts: --dual-honest-cycles.
    let (dual, single): (Vec<&Value>, Vec<&Value>) = rows.iter().partition(|r| r["workload"] == "dual-port pull");
    assert_eq!(dual.iter().filter(|r| r["honest"] == true).map(|r| r["cycles"].as_u64()).collect::<Vec<_>>(), [Some(3)], "seed 5");
    // The plain rows (a single cut per cycle) share the total; the rows that cut again while
    // the drive recovers, or shape the power, and the rows that deallocate and write zeroes
    // (`mixed-ops`) or format (`format`) take an eighth of a plain row's each.
    let single: Vec<&Value> = single.into_iter().filter(|r| r["honest"] == true && r["workload"] != "dual-port power cut").collect();
    let (honest, shaped): (Vec<&Value>, Vec<&Value>) = single.into_iter().partition(|r| {
        r["shape"] == "single cut" && !r["workload"].as_str().is_some_and(|w| w.starts_with("mixed-ops") || w.starts_with("format"))
    });
    assert!(!honest.is_empty() && !shaped.is_empty());
    let per_row = 24u64.div_ceil(honest.len() as u64);
    for r in &honest {
        assert_eq!(r["cycles"].as_u64(), Some(per_row), "seed 5: {r}");
    }
    for r in &shaped {
        assert_eq!(r["cycles"].as_u64(), Some(per_row.div_ceil(8)), "seed 5: {r}");
    }
    let o = run(&["selftest", "--cycles", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// The subcommands `faultline [SUB] --help` lists (without `help`).
fn subcommands(prefix: &[&str]) -> Vec<String> {
    let mut args = prefix.to_vec();
    args.push("--help");
    let help = String::from_utf8(ok(&args).stdout).unwrap();
    let list = help.split("Commands:\n").nth(1).unwrap_or_default().split("\n\n").next().unwrap_or_default();
    list.lines().filter_map(|l| l.split_whitespace().next()).filter(|c| *c != "help").map(str::to_string).collect()
}

#[test]
fn install_extras_gives_man_pages_and_completions_for_every_subcommand() {
    let d = scratch("extras");
    let o = ok(&["install-extras", "--prefix", s(&d)]);
    let listed = String::from_utf8_lossy(&o.stdout).to_string();
    let top = subcommands(&[]);
    assert!(top.len() >= 14 && top.contains(&"run".to_string()) && top.contains(&"install-extras".to_string()), "{top:?}");
    let man1 = d.join("share/man/man1");
    let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}\ninstalled:\n{listed}", p.display()));
    let bash = read(d.join("share/bash-completion/completions/faultline"));
    let zsh = read(d.join("share/zsh/site-functions/_faultline"));
    let fish = read(d.join("share/fish/vendor_completions.d/faultline.fish"));
    assert!(read(man1.join("faultline.1")).starts_with(".ie"), "faultline.1 is not roff");
    let mut pairs: Vec<(String, String)> = top.iter().map(|c| ("faultline".to_string(), c.clone())).collect();
    pairs.extend(subcommands(&["lab"]).into_iter().map(|c| ("faultline-lab".to_string(), c)));
    for (parent, sub) in &pairs {
        let page = read(man1.join(format!("{parent}-{sub}.1")));
        assert!(page.contains(&format!(".TH {parent}-{sub} 1")), "{parent}-{sub}.1:\n{page}");
        let bash_case = format!("{},{sub})", parent.replace("faultline-", "faultline__subcmd__"));
        assert!(bash.contains(&bash_case), "bash completion lacks {bash_case}");
        assert!(zsh.contains(&format!("'{sub}:")), "zsh completion lacks {sub}");
        assert!(fish.contains(&format!("-a \"{sub}\"")), "fish completion lacks {sub}");
    }
    // The hidden `lab guest` is the guest's, not a user's: no page for it.
    assert!(!man1.join("faultline-lab-guest.1").exists());
    // `completions SHELL` prints what was installed, and bash reads it.
    assert_eq!(String::from_utf8(ok(&["completions", "bash"]).stdout).unwrap(), bash);
    let check = Command::new("bash").args(["-n", s(&d.join("share/bash-completion/completions/faultline"))]).output().unwrap();
    assert!(check.status.success(), "bash -n: {}", String::from_utf8_lossy(&check.stderr));
    // A new option shows in both: --set is in `run`'s page and its completion.
    assert!(read(man1.join("faultline-run.1")).contains("\\-\\-set"));
    assert!(bash.contains("--set"));
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(name)
}

#[test]
fn a_scenario_run_takes_overrides_and_keeps_them_for_resume() {
    let d = scratch("overrides");
    let rd = d.join("run");
    let demo = scenario("demo.toml");
    let o = ok(&[
        "run",
        s(&demo),
        "--cycles",
        "3",
        "--set",
        "seed=5",
        "--set",
        "target.sim.model={kind = \"honest_plp\"}",
        "--run-dir",
        s(&rd),
    ]);
    let out = text(&o);
    assert!(out.contains("3 cycles, seed 5") && out.contains("verdict: clean"), "{out}");
    // The rate is in a unit that shows it, to two figures (never `0 cycles/s`).
    assert!(out.contains(" cycles/s)") || out.contains(" cycles/min)"), "{out}");
    let kept = std::fs::read_to_string(rd.join("scenario.toml")).unwrap();
    assert!(kept.contains("with --set cycles.count=3 --set seed=5 --set target.sim.model={kind = \"honest_plp\"}"), "{kept}");
    assert!(kept.contains("\ncount = 3\n") && kept.contains("\nseed = 5\n") && kept.contains("kind = \"honest_plp\""), "{kept}");
    // `resume` reads the run directory's copy: the same three cycles, already ended.
    let o = ok(&["resume", s(&rd)]);
    assert!(text(&o).contains("had ended (verdict: clean)"), "{}", text(&o));
    // A bad override is refused before anything is made, naming it.
    let o = run(&["run", s(&demo), "--set", "cycles.count=three", "--run-dir", s(&d.join("bad"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("demo.toml: --set cycles.count=three: invalid type: string \"three\", expected u32"), "{}", text(&o));
    assert!(!d.join("bad").exists());
}

#[test]
fn a_lab_scenario_says_what_it_needs_before_any_boot() {
    let d = scratch("lab-needs");
    let o = run(&["lab", "run", s(&scenario("lab-dualport-pull.toml")), "--multipath", "on", "--run-dir", s(&d.join("a"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("this scenario needs multipath off in the guest") && text(&o).contains("pass --multipath off"),
        "{}",
        text(&o)
    );
    let o = run(&["lab", "run", s(&scenario("lab-power-cut.toml")), "--set", "lab.sim=bogus", "--run-dir", s(&d.join("b"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("lab.sim: `bogus` is not a model of the simulated drive (one of: honest-plp,"), "{}", text(&o));
    let o = run(&["lab", "run", s(&scenario("lab-power-cut.toml")), "--set", "lab.multipath=sideways", "--run-dir", s(&d.join("c"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--set lab.multipath=sideways: unknown variant `sideways`, expected `on` or `off`"), "{}", text(&o));
}

#[test]
fn bench_leaves_nothing_where_it_was_started() {
    let test = "bench_leaves_nothing_where_it_was_started";
    if Command::new("fio").arg("--version").output().is_err() {
        return crate::common::skip(test, "no fio to bench against (apt-get install fio)");
    }
    let d = scratch("bench-cwd");
    // A relative target in the directory the user stands in: fio must still find it, and
    // leave nothing beside it (its verify state goes to the bench's scratch directory).
    let o = Command::new(BIN)
        .args([
            "bench",
            "--target",
            "b.img",
            "--size",
            "16777216",
            "--seconds",
            "0.2",
            "--rounds",
            "1",
            "--workloads",
            "randwrite,fullspan,trimwrite",
        ])
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("4k randwrite qd32") && text(&o).contains("full-span seq verify"), "{}", text(&o));
    // fio cannot trim a file (BLKDISCARD): its columns are n/a and the bench says why, while
    // faultline punches holes.
    assert!(text(&o).contains("4k randwrite + 10% trim qd32: fio n/a:") && text(&o).contains("is not a block device"), "{}", text(&o));
    assert!(text(&o).contains("faultline waits, 4k randwrite + 10% trim qd32"), "{}", text(&o));
    let left: Vec<String> = std::fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, vec!["b.img".to_string()], "the bench left files where it was started");
}
