//! A dual-port run on real kernel parts: two loop devices over one backing file are two paths
//! to one medium (ports A and B), and an `exec:` link controller takes one port's "link" down
//! under load while the other writes. `faultline run` must come back clean with both ports
//! judged and each port's share verified through the other port; then a negative control
//! overwrites sectors of A's share in the backing file and `faultline verify` on A's run
//! (`RUN_DIR/ports/A`), through either port, must find them.
//!
//! The pull: `losetup -d` cannot be it. The kernel defers a detach while the device is open
//! (`loop_clr_fd` only sets `LO_FLAGS_AUTOCLEAR`), and the harness holds the port open, so the
//! device keeps serving I/O and re-attaching at the node fails with EBUSY (checked by
//! `detach_of_an_open_loop_device_is_deferred` below). The pull moves the device's offset to
//! the end of its backing file instead (`LOOP_SET_STATUS64`, from `tests/dualport_loop/port.py`):
//! the kernel drains the port's in-flight I/O, its capacity becomes 0 and every I/O through
//! it fails (ENOSPC, EIO) while the node and the open descriptors stay; the plug moves the
//! offset back to 0. The port the controller pulls is `FAULTLINE_PORT`, each port's
//! `fault_port` being its loop device.
//!
//! Needs root and loop devices; without them each test prints `SKIP <test>: <reason>`. Every
//! loop device and the scratch directory are undone by a Drop guard, also on a panic. The
//! scenario's seed and the corruption's seed are fixed and printed.

use crate::common::{run, s, sh, skip, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SEED: u64 = 20261201;

/// The tests here attach, detach and re-attach loop devices by node: one at a time, and with
/// no other test holding loop devices (`crate::common::loop_nodes_alone`), or one test's detach
/// frees a node another test's `losetup -f` takes (seen: both failed at once). A pulled port's
/// cost to the other is measured: alone on the machine too.
fn one_at_a_time() -> (crate::common::Machine, std::sync::RwLockWriteGuard<'static, ()>) {
    (crate::common::alone(), crate::common::loop_nodes_alone())
}
/// The corruption's seed (negative control).
const NOISE_SEED: u64 = 0xD0A1_0BAD;
const CAPACITY: u64 = 64 << 20;
const PORT_PY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/dualport_loop/port.py");

/// Two loop devices over one backing file in a scratch directory; on drop, both detached and
/// the directory removed.
struct Rig {
    dir: PathBuf,
    file: PathBuf,
    devs: Vec<String>,
}

impl Rig {
    fn new(name: &str) -> Result<Rig, String> {
        if sh("id", &["-u"])? != "0" {
            return Err("not root (loop devices need root)".into());
        }
        let dir = crate::common::scratch(name);
        let file = dir.join("medium.img");
        let mut rig = Rig { dir, file, devs: Vec::new() };
        std::fs::File::create(&rig.file).and_then(|f| f.set_len(CAPACITY)).map_err(|e| e.to_string())?;
        for _ in 0..2 {
            // Concurrent tests may race for the same free device: retry a few times.
            let mut last = String::new();
            let dev = (0..5).find_map(|_| match sh("losetup", &["--direct-io=on", "-f", "--show", s(&rig.file)]) {
                Ok(d) => Some(d),
                Err(e) => {
                    last = e;
                    std::thread::sleep(Duration::from_millis(100));
                    None
                }
            });
            rig.devs.push(dev.ok_or(format!("losetup failed: {last}"))?);
        }
        Ok(rig)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for d in &self.devs {
            if let Err(e) = sh("losetup", &["-d", d]) {
                eprintln!("warning: could not detach {d}: {e}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rig_or_skip(test: &str, name: &str) -> Option<Rig> {
    match Rig::new(name) {
        Ok(r) => Some(r),
        Err(why) => {
            skip(test, &why);
            None
        }
    }
}

/// The dual-port scenario on the rig: A and B write half the span each, each cycle pulls one
/// (A, then B) for 300 ms. The budgets are wider than the reference's: loop devices share this
/// machine's two cores with whatever else runs, and a judgement here must not flag the
/// machine; the simulator's tests hold the default budgets.
fn scenario(rig: &Rig, cycles: u32) -> String {
    let (a, b) = (&rig.devs[0], &rig.devs[1]);
    let log = rig.dir.join("pulls.log");
    let off =
        format!("echo \"down $FAULTLINE_PORT $FAULTLINE_RESET\" >> {} %26%26 python3 {PORT_PY} down \"$FAULTLINE_PORT\"", log.display());
    let on = format!("python3 {PORT_PY} up \"$FAULTLINE_PORT\" %26%26 echo \"up $FAULTLINE_PORT\" >> {}", log.display());
    format!(
        "format_version = 1\nname = \"dualport-loop\"\nseed = {SEED}\ncontract = \"flush\"\n\
         [target]\nsize_bytes = {CAPACITY}\n\
         [workload]\npattern = {{ kind = \"random\" }}\nmin_write_bytes = 4096\nmax_write_bytes = 65536\nmean_write_bytes = 16384\n\
         align_bytes = 4096\nqueue_depth = 16\nspan_start_bytes = 1048576\nspan_end_bytes = 66060288\n\
         flush = {{ every_writes = 64 }}\n\
         [[ports]]\nname = \"A\"\npath = \"{a}\"\nfault_port = \"{a}\"\n\
         [[ports]]\nname = \"B\"\npath = \"{b}\"\nfault_port = \"{b}\"\n\
         [controllers]\nlink = 'exec:?off={off}&on={on}&timeout_ms=10000'\n\
         [fault]\nkind = \"link_reset\"\nreset = \"port_pull\"\n\
         [cut]\nkind = \"after_completions\"\ncompletions = 1\n\
         [cycles]\ncount = {cycles}\noff_time_ms = 300\nreadiness_timeout_s = 10\n\
         [dual]\nfault_ports = [\"A\", \"B\"]\nwarmup_ms = 100\nbaseline_ms = 400\nsettle_ms = 200\n\
         budget = {{ io_errors = 0, max_stall_ms = 2000, min_throughput_ratio = 0.1, max_p99_ratio = 50.0 }}\n\
         [verify]\nsample_bytes = 1048576\nfull_every_cycles = 1\n\
         [stop]\non_finding = \"continue\"\n"
    )
}

/// Runs `faultline ARGS`, killed (and the test failed, the guard cleaning up) after `limit`.
fn run_bounded(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(crate::common::BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run faultline");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("faultline {args:?} still running after {limit:?}, killed\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn events(run_dir: &Path) -> Vec<Value> {
    let log = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    log.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// SplitMix64: the negative control's bytes, the same on every machine.
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed;
    (0..n.div_ceil(8))
        .flat_map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)).to_le_bytes()
        })
        .take(n)
        .collect()
}

fn verify_json(dev: &str, run_dir: &Path) -> (i32, Value) {
    let o = run(&["verify", "--target", dev, "--run-dir", s(run_dir), "--json"]);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("verify --json through {dev}: {e}\n{}", text(&o)));
    (o.status.code().unwrap_or(-1), v)
}

#[test]
fn a_port_pulled_under_load_on_two_loop_paths_costs_the_other_nothing_and_every_share_reads_back_through_both() {
    let _one = one_at_a_time();
    let test = "a_port_pulled_under_load_on_two_loop_paths_costs_the_other_nothing_and_every_share_reads_back_through_both";
    let Some(rig) = rig_or_skip(test, "pull") else { return };
    println!("seed {SEED}, ports A = {}, B = {} over {}", rig.devs[0], rig.devs[1], rig.file.display());
    let sf = rig.dir.join("dualport-loop.toml");
    std::fs::write(&sf, scenario(&rig, 4)).unwrap();
    let rd = rig.dir.join("run");
    let o = run_bounded(&["run", s(&sf), "--run-dir", s(&rd)], Duration::from_secs(300));
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "seed {SEED}: {out}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(rd.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["findings"], 0, "seed {SEED}: {summary}");
    let ports = summary["ports"].as_array().unwrap_or_else(|| panic!("summary.json has no ports: {summary}"));
    assert_eq!(ports.iter().map(|p| p["name"].as_str().unwrap()).collect::<Vec<_>>(), ["A", "B"], "{summary}");
    for p in ports {
        println!(
            "port {}: baseline {} MB/s, lowest throughput ratio in a fault window {}, highest p99 ratio {}, longest stall {} ms",
            p["name"], p["baseline_mb_s"], p["throughput_ratio"], p["p99_latency_ratio"], p["max_stall_ms"]
        );
    }
    for p in ports {
        // Each port was pulled twice and judged twice, while the other one was pulled.
        assert_eq!((p["cycles_faulted"].as_u64(), p["cycles_judged"].as_u64()), (Some(2), Some(2)), "seed {SEED}: {p}");
        assert_eq!((p["io_errors"].as_u64(), p["disturbed"].as_bool()), (Some(0), Some(false)), "seed {SEED}: {p}");
        assert!(p["throughput_ratio"].as_f64().is_some_and(|r| r > 0.0) && p["baseline_mb_s"].as_f64().is_some_and(|r| r > 0.0), "{p}");
    }
    // The controller pulled A, then B, then A, then B: each by its loop device.
    let pulls = std::fs::read_to_string(rig.dir.join("pulls.log")).unwrap();
    let (a, b) = (&rig.devs[0], &rig.devs[1]);
    let want: String = [a, b, a, b].iter().map(|d| format!("down {d} port-pull\nup {d}\n")).collect();
    assert_eq!(pulls, want, "seed {SEED}");
    // Every cycle verified both shares in full through both ports: twice the span's sectors.
    let ev = events(&rd);
    let span_sectors = (66060288u64 - 1048576) / 512;
    let verified: Vec<u64> = ev.iter().filter(|e| e["event"] == "verified").map(|e| e["sectors"].as_u64().unwrap()).collect();
    assert_eq!(verified, vec![2 * span_sectors; 4], "seed {SEED}: each share read through its own port and the other one");
    // Each port's run is bound to the device seen through that port, the ports in its header.
    for (name, dev) in [("A", a), ("B", b)] {
        let (code, v) = verify_json(dev, &rd.join("ports").join(name));
        assert_eq!((code, v["findings"].as_array().map(Vec::len)), (0, Some(0)), "port {name} through {dev}: {v}");
        assert!(v["durable_ok"].as_u64().unwrap() > 0, "port {name}: {v}");
    }
    let (code, v) = verify_json(b, &rd.join("ports/A"));
    assert_eq!(code, 0, "A's share through B: {v}");

    // Negative control: random bytes over 16 KiB of A's share that the run wrote, through the
    // backing file; a verify of A's run finds them through either port.
    let medium = std::fs::read(&rig.file).unwrap();
    let share_a = (1048576usize, 32 << 20);
    let at = (share_a.0..share_a.1).step_by(4096).find(|&o| medium[o..o + 4096].iter().any(|&x| x != 0)).expect("A wrote its share");
    drop(medium);
    let bytes = noise(NOISE_SEED, 16384);
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&rig.file).unwrap();
        f.seek(SeekFrom::Start(at as u64)).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
    }
    println!("noise seed {NOISE_SEED:#x}: 16384 random bytes at {at}");
    for dev in [a, b] {
        let (code, v) = verify_json(dev, &rd.join("ports/A"));
        assert_eq!(code, 1, "noise seed {NOISE_SEED:#x} at {at}, through {dev}: {v}");
        let findings = v["findings"].as_array().unwrap();
        assert!(!findings.is_empty(), "{v}");
        for f in findings {
            let off = f["offset"].as_u64().unwrap();
            assert!((at as u64..at as u64 + 16384).contains(&off), "a finding outside the noise, through {dev}: {f}");
        }
    }
    // B's share was not touched.
    let (code, v) = verify_json(a, &rd.join("ports/B"));
    assert_eq!(code, 0, "B's share through A: {v}");
}

/// Why the rig's pull is not `losetup -d`: with the device open, the kernel defers the detach,
/// the device goes on serving I/O, and re-attaching the file at the node fails.
#[test]
fn detach_of_an_open_loop_device_is_deferred() {
    let _one = one_at_a_time();
    let test = "detach_of_an_open_loop_device_is_deferred";
    let Some(rig) = rig_or_skip(test, "deferred") else { return };
    let a = rig.devs[0].clone();
    let held = std::fs::OpenOptions::new().read(true).write(true).open(&a).unwrap();
    sh("losetup", &["-d", &a]).unwrap();
    let listed = sh("losetup", &["--list", "--noheadings", "--output", "AUTOCLEAR,BACK-FILE", &a]).unwrap();
    assert!(listed.starts_with('1') && listed.contains("medium.img"), "still attached, to be cleared on last close: {listed}");
    use std::os::unix::fs::FileExt;
    held.write_all_at(&[7u8; 4096], 4096).expect("the detached device still takes writes while open");
    let again = sh("losetup", &["--direct-io=on", &a, s(&rig.file)]);
    assert!(again.as_ref().is_err_and(|e| e.contains("busy")), "re-attaching at {a} while it is open: {again:?}");
    drop(held);
    // On last close the kernel detaches it; attach it again so the guard's detach finds it.
    let mut attached = Err(String::new());
    for _ in 0..50 {
        attached = sh("losetup", &["--direct-io=on", &a, s(&rig.file)]);
        if attached.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    attached.unwrap_or_else(|e| panic!("{a} after its last close: {e}"));
}

/// The pull itself: the port's capacity drops to 0 and writes through it fail, the other
/// port is untouched, and after the plug the port reads what the other wrote.
#[test]
fn the_rig_pull_fails_io_through_one_port_only_and_the_plug_restores_it() {
    let _one = one_at_a_time();
    let test = "the_rig_pull_fails_io_through_one_port_only_and_the_plug_restores_it";
    let Some(rig) = rig_or_skip(test, "pullunit") else { return };
    use std::os::unix::fs::FileExt;
    let (a, b) = (rig.devs[0].clone(), rig.devs[1].clone());
    let fa = std::fs::OpenOptions::new().read(true).write(true).open(&a).unwrap();
    let fb = std::fs::OpenOptions::new().read(true).write(true).open(&b).unwrap();
    sh("python3", &[PORT_PY, "down", &a]).unwrap();
    let e = fa.write_all_at(&[1u8; 4096], 8192).expect_err("a write through the pulled port");
    println!("a write through the pulled port: {e}");
    fb.write_all_at(&[2u8; 4096], 8192).expect("the other port writes on");
    fb.sync_all().unwrap();
    sh("python3", &[PORT_PY, "up", &a]).unwrap();
    let mut back = [0u8; 4096];
    // The page cache of A's node is not B's: read around it.
    let fa = std::fs::File::open(&a).unwrap();
    let _ = sh("blockdev", &["--flushbufs", &a]);
    fa.read_exact_at(&mut back, 8192).unwrap();
    assert_eq!(back, [2u8; 4096], "after the plug, A reads what B wrote");
}
