//! Real kernel parts: the io_uring engine, its guards, finding a device by its identity alone
//! and the CLI on loop devices created by the tests (`losetup --direct-io=on`, 512 and
//! 4096-byte sectors), plus a conformance suite whose test bodies run against both the
//! simulated drive and a loop device: if both pass, the simulator predicts the kernel; and
//! a third arm, the lab guest's NVMe namespace through the real NVMe driver (`lab_arm`).
//!
//! Loop devices need root. Where the environment cannot provide one, the test prints
//! `SKIP <test>: <reason>` and returns; it never skips silently. Every loop device and mount
//! is undone by a Drop guard, and every scratch directory removed. Seeds are fixed and printed.

mod bench;
mod lab_arm;
mod lab_pi;
mod zeroing;

use crate::common::{ok, run, s, sh, skip, text, BIN};
use faultline::ledger::{Contract, LedgerWriter, RunHeader, LEDGER_FORMAT};
use faultline::verify::Verifier;
use faultline::workload::{FlushPolicy, Layout, Pattern, WorkloadSpec};
use faultline::writer::{run_cycle, CutPlacement, CycleOptions};
use faultline_drivers::blockdev::{find_by_identity, Expectation, FindError, SysRoots};
use faultline_drivers::{open_target, AlignedBuf, BlockTarget, Completion, Engine, Op, OpenSpec, TargetError};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A test's scratch directory (`crate::common::scratch`), removed on drop, also when the test
/// panics: the backing files in it are up to 128 MiB each, and every run used to leave them in
/// the temporary directory. Declared before the loop devices over its files, it is dropped
/// after they are detached.
struct Scratch(PathBuf);

fn scratch(name: &str) -> Scratch {
    Scratch(crate::common::scratch(name))
}

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loop device over a sparse file, detached on drop.
struct Loop {
    dev: String,
    file: PathBuf,
    /// Held while the device is: no test re-attaches loop nodes meanwhile.
    nodes: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

impl Loop {
    fn new(dir: &Path, bytes: u64, sector: u32) -> Result<Loop, String> {
        if sh("id", &["-u"])? != "0" {
            return Err("not root (loop devices need root)".into());
        }
        let file = dir.join(format!("backing-{sector}.img"));
        std::fs::File::create(&file).and_then(|f| f.set_len(bytes)).map_err(|e| e.to_string())?;
        Loop::attach(&file, sector)
    }

    /// Attaches `file` to the first free loop device, with `sector`-byte logical blocks.
    fn attach(file: &Path, sector: u32) -> Result<Loop, String> {
        let ss = sector.to_string();
        let mut args = vec!["-f", "--show", "--direct-io=on"];
        if sector != 512 {
            args.extend(["--sector-size", ss.as_str()]);
        }
        args.push(file.to_str().unwrap());
        // Concurrent tests may race for the same free device: retry a few times.
        let mut last = String::new();
        for _ in 0..5 {
            match sh("losetup", &args) {
                Ok(dev) => return Ok(Loop { dev, file: file.to_path_buf(), nodes: Some(crate::common::loop_nodes_shared()) }),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("losetup failed: {last}"))
    }

    /// Attaches `file` to the loop device `dev` itself (fails when `dev` is in use).
    fn attach_at(dev: &str, file: &Path) -> Result<Loop, String> {
        sh("losetup", &["--direct-io=on", dev, file.to_str().unwrap()])?;
        Ok(Loop { dev: dev.to_string(), file: file.to_path_buf(), nodes: Some(crate::common::loop_nodes_shared()) })
    }

    fn path(&self) -> &Path {
        Path::new(&self.dev)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        if let Err(e) = sh("losetup", &["-d", &self.dev]) {
            eprintln!("warning: could not detach {}: {e}", self.dev);
        }
    }
}

/// Returns the loop device or prints why the test is skipped.
fn loop_or_skip(test: &str, dir: &Path, bytes: u64, sector: u32) -> Option<Loop> {
    match Loop::new(dir, bytes, sector) {
        Ok(l) => Some(l),
        Err(why) => {
            skip(test, &why);
            None
        }
    }
}

struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = sh("umount", &[self.0.to_str().unwrap()]);
    }
}

fn refused(args: &[&str], why: &str) -> Output {
    let o = run(args);
    assert_eq!(o.status.code(), Some(2), "faultline {args:?} should be refused\n{}", text(&o));
    assert!(text(&o).contains(why), "expected '{why}' in:\n{}", text(&o));
    o
}

fn reap_all(t: &mut dyn BlockTarget, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let start = Instant::now();
    while out.len() < n && start.elapsed() < Duration::from_secs(10) {
        t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
    }
    assert_eq!(out.len(), n, "completions");
    out
}

fn open_rw(dev: &Path, qd: usize) -> Box<dyn BlockTarget> {
    open_target(dev, &OpenSpec { writable: true, queue_depth: qd, allow_overwrite_signature: true, ..Default::default() }).unwrap().target
}

// ---------------------------------------------------------------------------------------------
// Engine on loop devices
// ---------------------------------------------------------------------------------------------

#[test]
fn capacity_and_sector_sizes_are_discovered() {
    let d = scratch("geom");
    for sector in [512u32, 4096] {
        let Some(lp) = loop_or_skip("capacity_and_sector_sizes_are_discovered", &d, 16 << 20, sector) else { return };
        let o = open_target(lp.path(), &OpenSpec { writable: false, queue_depth: 4, ..Default::default() }).unwrap();
        assert_eq!(o.engine, Engine::IoUring);
        assert!(o.block_device && o.direct);
        let g = o.target.geometry();
        assert_eq!(g.capacity_bytes, 16 << 20);
        assert_eq!(g.logical_block_bytes, sector);
        assert!(g.physical_block_bytes >= sector);
        let id = o.target.identity();
        assert!(id.contains(&format!("loop-backing={}", lp.file.display())) && id.contains("size=16777216"), "{id}");
        assert!(!id.contains("/dev/loop"), "identity must not name the /dev path: {id}");
    }
}

#[test]
fn flush_and_fua_complete_and_are_timed() {
    let d = scratch("fua");
    let Some(lp) = loop_or_skip("flush_and_fua_complete_and_are_timed", &d, 8 << 20, 512) else { return };
    let mut t = open_rw(lp.path(), 16);
    for i in 0..8u64 {
        let mut buf = AlignedBuf::zeroed(4096);
        buf.fill(i as u8 + 1);
        t.submit(Op::Write { token: i, offset: i * 4096, buf, fua: i % 2 == 0, write_id: i }).unwrap();
    }
    t.submit(Op::Flush { token: 100 }).unwrap();
    let out = reap_all(t.as_mut(), 9);
    assert!(out.iter().all(|c| c.result.is_ok()), "{out:?}");
    assert!(out.iter().filter(|c| c.token < 8).all(|c| c.buf.is_some()), "write buffers come back");
    let lat = t.latencies();
    let count = |n: &str| lat.iter().find(|(k, _)| *k == n).map_or(0, |(_, h)| h.count());
    assert_eq!((count("write"), count("write_fua"), count("flush")), (4, 4, 1), "{lat:?}");
    let mut back = AlignedBuf::zeroed(4096);
    t.read_at(3 * 4096, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 4));
}

#[test]
fn misaligned_io_fails_cleanly_on_4kn_and_works_on_512() {
    let d = scratch("align");
    let Some(l4) = loop_or_skip("misaligned_io_fails_cleanly_on_4kn_and_works_on_512", &d, 8 << 20, 4096) else { return };
    let mut t = open_rw(l4.path(), 4);
    t.submit(Op::Write { token: 1, offset: 512, buf: AlignedBuf::zeroed(4096), fua: false, write_id: 1 }).unwrap();
    let out = reap_all(t.as_mut(), 1);
    let e = out[0].result.as_ref().unwrap_err();
    assert_eq!(e.errno, libc::EINVAL, "{e}");
    assert!(out[0].buf.is_some());
    drop(t);
    let rd = d.join("run4k");
    refused(&["write", "--target", &l4.dev, "--run-dir", s(&rd), "--seed", "5", "--writes", "100", "--misaligned"], "4Kn");

    let l5 = Loop::new(&d, 8 << 20, 512).expect("a second loop device");
    let rd = d.join("run512");
    println!("seed 5");
    ok(&[
        "write",
        "--target",
        &l5.dev,
        "--run-dir",
        s(&rd),
        "--seed",
        "5",
        "--writes",
        "3000",
        "--misaligned",
        "--min-write",
        "512",
        "--max-write",
        "65536",
        "--mean-write",
        "8192",
    ]);
    let o = ok(&["verify", "--target", &l5.dev, "--run-dir", s(&rd)]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("verdict: clean"), "{}", text(&o));
}

#[test]
fn killed_writer_then_verify_is_clean_on_512_and_4096_sectors() {
    let d = scratch("kill");
    for sector in [512u32, 4096] {
        let Some(lp) = loop_or_skip("killed_writer_then_verify_is_clean_on_512_and_4096_sectors", &d, 64 << 20, sector) else { return };
        let rd = d.join(format!("run{sector}"));
        println!("sector {sector}, seed 21");
        let mut child = Command::new(BIN)
            .args(["write", "--target", &lp.dev, "--run-dir", s(&rd), "--seed", "21", "--duration-s", "30"])
            .args(["--min-write", "4096", "--max-write", "131072", "--mean-write", "16384", "--contract", "flush"])
            .args(["--flush-every", "32", "--fua-percent", "10", "--prefill", "--queue-depth", "32"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        child.kill().unwrap();
        let _ = child.wait();
        let o = run(&["verify", "--target", &lp.dev, "--run-dir", s(&rd), "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["findings"].as_array().unwrap().is_empty(), "{v}");
        // Every sector holds its durable version or a newer one that was in flight or not yet
        // flushed (with several passes per checkpoint interval, mostly the latter).
        assert_eq!(v["durable_ok"].as_u64().unwrap() + v["newer_ok"].as_u64().unwrap(), v["sectors"].as_u64().unwrap(), "{v}");
        // The run continues as a new cycle after the kill.
        ok(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "500"]);
        ok(&["verify", "--target", &lp.dev, "--run-dir", s(&rd)]);
    }
}

// ---------------------------------------------------------------------------------------------
// Guards
// ---------------------------------------------------------------------------------------------

#[test]
fn mounted_ext4_is_refused_and_its_signature_needs_the_flag() {
    let d = scratch("mounted");
    let Some(lp) = loop_or_skip("mounted_ext4_is_refused_and_its_signature_needs_the_flag", &d, 32 << 20, 512) else { return };
    if let Err(e) = sh("mkfs.ext4", &["-q", "-F", &lp.dev]) {
        skip("mounted_ext4_is_refused_and_its_signature_needs_the_flag", &format!("mkfs.ext4 failed: {e}"));
        return;
    }
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let rd = d.join("run");
    {
        if let Err(e) = sh("mount", &[&lp.dev, s(&mnt)]) {
            skip("mounted_ext4_is_refused_and_its_signature_needs_the_flag", &format!("mount failed: {e}"));
            return;
        }
        let _m = Mount(mnt.clone());
        let o =
            refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "10", "--allow-overwrite-signature"], "is mounted at");
        assert!(text(&o).contains(s(&mnt)), "{}", text(&o));
    }
    refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "10"], "an ext2/3/4 filesystem");
    assert!(!rd.join("ledger.fl").exists(), "a refused write must not create a run");
    ok(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "100", "--allow-overwrite-signature"]);
    ok(&["verify", "--target", &lp.dev, "--run-dir", s(&rd)]);
}

#[test]
fn partitioned_device_is_refused_without_the_flag() {
    let d = scratch("parts");
    // An MBR with one Linux partition (type 0x83) from sector 2048, 8192 sectors.
    let file = d.join("disk.img");
    std::fs::File::create(&file).unwrap().set_len(16 << 20).unwrap();
    let mut mbr = vec![0u8; 512];
    let e = &mut mbr[446..462];
    e[4] = 0x83;
    e[8..12].copy_from_slice(&2048u32.to_le_bytes());
    e[12..16].copy_from_slice(&8192u32.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xAA;
    use std::os::unix::fs::FileExt;
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().write_all_at(&mbr, 0).unwrap();
    let Some(lp) = loop_or_skip("partitioned_device_is_refused_without_the_flag", &d, 16 << 20, 512) else { return };
    // Put the MBR on the loop device's own backing file.
    std::fs::OpenOptions::new().write(true).open(&lp.file).unwrap().write_all_at(&mbr, 0).unwrap();
    let rd = d.join("run");
    refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "10"], "MBR partition table");
    refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "10"], "--allow-overwrite-signature");
    ok(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "200", "--allow-overwrite-signature"]);
    ok(&["verify", "--target", &lp.dev, "--run-dir", s(&rd)]);
}

#[test]
fn identity_mismatch_is_refused_and_identity_survives_reattach() {
    let d = scratch("ident");
    let rd = d.join("run");
    let file;
    {
        let Some(lp) = loop_or_skip("identity_mismatch_is_refused_and_identity_survives_reattach", &d, 8 << 20, 512) else { return };
        file = lp.file.clone();
        refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--expect-size", "12345"], "--expect-size");
        refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--expect-serial", "S3EVNX0K123456"], "--expect-serial");
        refused(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--expect-model", "ACME"], "not the expected device");
        ok(&["write", "--target", &lp.dev, "--run-dir", s(&rd), "--writes", "300", "--expect-size", "8388608"]);
    }
    // Re-attach the same backing file (possibly under another /dev/loopN): same identity.
    let out = sh("losetup", &["-f", "--show", "--direct-io=on", s(&file)]).unwrap();
    let lp = Loop { dev: out, file, nodes: Some(crate::common::loop_nodes_shared()) };
    ok(&["verify", "--target", &lp.dev, "--run-dir", s(&rd)]);
    // Another device is not the run's target.
    std::fs::create_dir_all(d.join("x")).unwrap();
    let Some(other) = loop_or_skip("identity_mismatch_is_refused_and_identity_survives_reattach", &d.join("x"), 8 << 20, 512) else {
        return;
    };
    refused(&["verify", "--target", &other.dev, "--run-dir", s(&rd)], "belongs to target");
}

#[test]
fn fallback_engine_is_selected_and_announced_when_io_uring_is_unavailable() {
    // A regular file, so this runs without root.
    let d = scratch("fallback");
    let t = d.join("t.img");
    std::fs::File::create(&t).unwrap().set_len(8 << 20).unwrap();
    let rd = d.join("run");
    let args =
        ["write", "--target", s(&t), "--run-dir", s(&rd), "--seed", "4", "--writes", "2000", "--fua-percent", "10", "--contract", "flush"];
    let o = Command::new(BIN).args(args).env("FAULTLINE_DISABLE_IO_URING", "1").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let notes: Vec<_> =
        String::from_utf8_lossy(&o.stderr).lines().filter(|l| l.contains("io_uring is unavailable")).map(String::from).collect();
    assert_eq!(notes.len(), 1, "exactly one announcement line:\n{}", text(&o));
    assert!(notes[0].contains("pwritev2"), "{}", notes[0]);
    let o =
        Command::new(BIN).args(["verify", "--target", s(&t), "--run-dir", s(&rd)]).env("FAULTLINE_DISABLE_IO_URING", "1").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Without the switch, the io_uring engine serves the same run, silently.
    let o = ok(&["verify", "--target", s(&t), "--run-dir", s(&rd)]);
    assert!(!text(&o).contains("io_uring is unavailable"), "{}", text(&o));
}

// ---------------------------------------------------------------------------------------------
// Finding a device by its identity alone
// ---------------------------------------------------------------------------------------------

/// The backing file as the kernel reports it (absolute, symlinks resolved).
fn backing(file: &Path) -> String {
    std::fs::canonicalize(file).unwrap().to_string_lossy().into_owned()
}

#[test]
fn device_that_comes_back_under_another_name_is_found_by_identity() {
    let test = "device_that_comes_back_under_another_name_is_found_by_identity";
    let d = scratch("find");
    let roots = SysRoots::system();
    let Some(first) = loop_or_skip(test, &d, 8 << 20, 512) else { return };
    let file = first.file.clone();
    let expect = Expectation { backing_file: Some(backing(&file)), size_bytes: Some(8 << 20), ..Default::default() };
    assert_eq!(find_by_identity(&expect, &roots).unwrap(), first.path());
    let old = first.dev.clone();
    drop(first);
    // Gone (the kernel may finish the detach a moment later): nothing matches.
    let start = Instant::now();
    let gone = loop {
        match find_by_identity(&expect, &roots) {
            Err(e @ FindError::NotFound { .. }) => break e,
            other if start.elapsed() > Duration::from_secs(5) => panic!("{old} still found after detach: {other:?}"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert!(gone.to_string().contains("scanned"), "{gone}");

    // Back under another name: a dummy holds the old number, so the kernel hands out another.
    let dummy = d.join("dummy.img");
    std::fs::File::create(&dummy).unwrap().set_len(1 << 20).unwrap();
    let mut holder = None;
    let mut again = None;
    for _ in 0..5 {
        if holder.is_none() {
            // Fails when another test took the old number meanwhile: it is held either way.
            holder = Loop::attach_at(&old, &dummy).ok();
        }
        let l = Loop::attach(&file, 512).expect("re-attach the backing file");
        if l.dev != old {
            again = Some(l);
            break;
        }
        // The other test let the old number go again before we attached: hold it and retry.
    }
    let again = again.expect("the backing file came back under a new name");
    println!("{} came back as {}", old, again.dev);
    let found = find_by_identity(&expect, &roots).unwrap();
    assert_eq!(found, again.path());
    // The real open measures the device itself and checks the expectation again.
    let spec = OpenSpec { writable: true, queue_depth: 4, expect: expect.clone(), ..Default::default() };
    let o = open_target(&found, &spec).unwrap();
    assert!(o.block_device);
    assert_eq!(o.target.geometry().capacity_bytes, 8 << 20);
    let id = o.target.identity();
    assert!(id.contains(&format!("loop-backing={}", backing(&file))), "{id}");
    drop(o);
    if let Some(h) = &holder {
        // The old name is another device now, and the same expectation refuses it.
        let e = open_target(h.path(), &spec).err().expect("the old name must be refused");
        assert!(e.to_string().contains("--expect-backing-file"), "{e}");
    }
}

#[test]
fn two_loop_devices_of_one_size_are_ambiguous_by_size() {
    let test = "two_loop_devices_of_one_size_are_ambiguous_by_size";
    // A size no other test's device has.
    const SIZE: u64 = (5 << 20) + 12288;
    let d = scratch("find-ambiguous");
    let (da, db) = (d.join("a"), d.join("b"));
    std::fs::create_dir_all(&da).unwrap();
    std::fs::create_dir_all(&db).unwrap();
    let Some(a) = loop_or_skip(test, &da, SIZE, 512) else { return };
    let b = Loop::new(&db, SIZE, 512).expect("a second loop device");
    let roots = SysRoots::system();
    let e = find_by_identity(&Expectation { size_bytes: Some(SIZE), ..Default::default() }, &roots).unwrap_err();
    let FindError::Ambiguous { matches, .. } = &e else { panic!("expected a refusal, got: {e}") };
    let paths: Vec<&Path> = matches.iter().map(|c| c.path.as_path()).collect();
    assert!(paths.contains(&a.path()) && paths.contains(&b.path()), "{e}");
    assert!(e.to_string().contains(&a.dev) && e.to_string().contains(&b.dev), "{e}");
    // The backing file tells them apart.
    let one = Expectation { backing_file: Some(backing(&b.file)), size_bytes: Some(SIZE), ..Default::default() };
    assert_eq!(find_by_identity(&one, &roots).unwrap(), b.path());
}

// ---------------------------------------------------------------------------------------------
// Conformance: the same bodies against the simulated drive and a loop device
// ---------------------------------------------------------------------------------------------

const CAP: u64 = 8 << 20;

/// One target under test: the target, how to cut it and how to bring it back.
struct Subject {
    name: &'static str,
    target: Box<dyn BlockTarget>,
    cut: Box<dyn FnMut() -> Result<(), faultline::writer::HookError>>,
    power_on: Box<dyn FnMut()>,
    _keep: Option<Loop>,
}

fn sim_subject(depth: usize) -> Subject {
    let sim = SimDrive::new(SimConfig {
        capacity_bytes: CAP,
        sector_bytes: 512,
        atomic_bytes: 512,
        queue_depth: depth,
        seed: 3,
        model: FaultModel::HonestPlp,
        contract: TruthContract::Plp,
        dealloc_reads: Default::default(),
    });
    let mut p1 = sim.power();
    let mut p2 = sim.power();
    use faultline_drivers::PowerSwitch;
    Subject {
        name: "sim",
        target: Box::new(sim),
        cut: Box::new(move || Ok(p1.power_off()?)),
        power_on: Box::new(move || p2.power_on().unwrap()),
        _keep: None,
    }
}

fn loop_subject(test: &str, dir: &Path, depth: usize, io_threads: usize) -> Option<Subject> {
    let lp = loop_or_skip(test, dir, CAP, 512)?;
    let spec = OpenSpec { writable: true, queue_depth: depth, allow_overwrite_signature: true, io_threads, ..Default::default() };
    let target = open_target(lp.path(), &spec).unwrap().target;
    // A loop device cannot lose power; its "cut" stops the writer with the queue full, which
    // is what a killed harness does.
    let name = if io_threads > 1 { "loop, 2 io worker rings" } else { "loop" };
    Some(Subject { name, target, cut: Box::new(|| Ok(())), power_on: Box::new(|| {}), _keep: Some(lp) })
}

/// Runs `body` against the simulated drive and, where possible, a loop device through one
/// ring and through two worker rings.
///
/// The third arm, the NVMe namespace of the lab guest through the real Linux NVMe driver
/// (QEMU's emulated controller), runs in the guest: `conformance_in_the_lab_guest` boots the
/// lab once with this test binary and runs these tests there with `FAULTLINE_CONF_NVME`
/// naming the namespace, which makes `conformance` run that arm alone, through one ring and
/// two worker rings; its cut is a controller reset with the queue full (`lab_arm`).
fn conformance(test: &str, depth: usize, body: fn(&mut Subject)) {
    if std::env::var_os(lab_arm::NVME_ENV).is_some() {
        lab_arm::conformance_nvme(test, depth, body);
        return;
    }
    let mut sim = sim_subject(depth);
    body(&mut sim);
    for io_threads in [1, 2] {
        let d = scratch(&format!("{test}-{io_threads}"));
        if let Some(mut lp) = loop_subject(test, &d, depth, io_threads) {
            body(&mut lp);
        }
    }
}

fn body_cut_cycles_verify_clean(s: &mut Subject) {
    cut_cycles_verify_clean(s, 8, Default::default());
}

/// The mixed workload over the conformance span at `seed` (with `ops`' deallocates and
/// Write Zeroes beside the writes).
fn mixed_spec(seed: u64, ops: faultline::workload::OpMix) -> WorkloadSpec {
    WorkloadSpec {
        seed,
        pattern: Pattern::Random {},
        span_start: 0,
        span_end: CAP,
        min_write_bytes: 512,
        max_write_bytes: 65536,
        mean_write_bytes: 8192,
        align_bytes: 512,
        queue_depth: 16,
        flush: FlushPolicy { every_writes: Some(32), every_ms: None, fua_percent: 5 },
        ops,
    }
}

/// A PLP run of `spec` on `s`'s target: its ledger (in `dir`), layout and sector format.
fn plp_run(s: &Subject, spec: WorkloadSpec, dir: &Path) -> (LedgerWriter, Layout, faultline::format::Format) {
    plp_run_on(s.target.as_ref(), spec, dir, 512)
}

/// [`plp_run`] on target `t` with `sector`-byte sectors (and atomic unit).
fn plp_run_on(t: &dyn BlockTarget, spec: WorkloadSpec, dir: &Path, sector: u64) -> (LedgerWriter, Layout, faultline::format::Format) {
    let header = RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: 0xc0ffee,
        created_at: String::new(),
        target_identity: t.identity(),
        target_capacity: CAP,
        sector_bytes: sector,
        atomic_bytes: sector,
        dealloc_reads: t.zeroing().dealloc_reads.into(),
        contract: Contract::Plp,
        ports: faultline::port::PortEntry::single(),
        workload: spec.clone(),
    };
    let ledger = LedgerWriter::create(dir, header).unwrap();
    (ledger, Layout::new(spec, sector).unwrap(), faultline::format::Format::new(0xc0ffee, sector as usize))
}

/// Cycle `cycle` of port A from `first_id`: cut where `cut` says, else ended after
/// `max_writes` with a closing flush.
fn cycle_opts(cycle: u32, first_id: u64, cut: Option<CutPlacement>, max_writes: Option<u64>) -> CycleOptions {
    CycleOptions {
        cycle,
        first_id,
        started_at: String::new(),
        port: faultline::port::PortId::A,
        max_writes,
        duration: None,
        cut,
        checkpoint_every: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(5),
        stop: None,
        samples: None,
        fill: faultline::writer::Fill::Auto,
        clock_from: None,
        before_end: None,
    }
}

/// Three cycles of the mixed workload (with `ops`' deallocates and Write Zeroes beside the
/// writes), each cut with the queue full and verified whole: clean, holding a deallocated
/// sector to what the target says it reads.
fn cut_cycles_verify_clean(s: &mut Subject, seed: u64, ops: faultline::workload::OpMix) {
    println!("{}: seed {seed}", s.name);
    let dir = scratch(&format!("conf-{}-{}", s.name, seed));
    let (mut ledger, layout, format) = plp_run(s, mixed_spec(seed, ops), &dir);
    let mut first_id = 1;
    for cycle in 1..=3u32 {
        let cut = CutPlacement::AfterCompletions { completions: 500 * cycle as u64 };
        let opts = cycle_opts(cycle, first_id, Some(cut), None);
        let out = run_cycle(s.target.as_mut(), &layout, &format, &mut ledger, Contract::Plp, &opts, &mut *s.cut).unwrap();
        assert!(out.completed >= 500 * cycle as u64, "{}: {out:?}", s.name);
        // Only what the cut caught in flight may fail; an engine that refuses work it was
        // given (a worker ring over its depth, say) shows up here.
        assert!(out.failed <= out.in_flight_at_cut as u64, "{}: {out:?}", s.name);
        first_id = out.submitted_end;
        (s.power_on)();
        let rep = Verifier::new(&layout, ledger.history(), &format).verify(s.target.as_mut(), 0, CAP).unwrap();
        assert!(rep.findings.is_empty(), "{} cycle {cycle} seed {seed}: {:?}", s.name, &rep.findings[..rep.findings.len().min(3)]);
        assert!(rep.durable_ok > 0);
    }
}

fn body_bad_requests_fail_as_data(s: &mut Subject) {
    let t = s.target.as_mut();
    // Not sector-aligned, and past the end: failed completions (buffer returned), never a panic.
    t.submit(Op::Write { token: 1, offset: 100, buf: AlignedBuf::zeroed(512), fua: false, write_id: 1 }).unwrap();
    t.submit(Op::Write { token: 2, offset: CAP - 512, buf: AlignedBuf::zeroed(1024), fua: false, write_id: 2 }).unwrap();
    let mut out = reap_all(t, 2);
    out.sort_by_key(|c| c.token);
    for c in &out {
        let e = c.result.as_ref().expect_err(s.name);
        assert_eq!(e.errno, libc::EINVAL, "{}: {e}", s.name);
        assert!(c.buf.is_some(), "{}: the buffer comes back", s.name);
    }
    let mut buf = AlignedBuf::zeroed(1024);
    let e = t.read_at(CAP - 512, &mut buf).expect_err(s.name);
    assert_eq!(e.errno, libc::EINVAL, "{}: {e}", s.name);
}

fn body_queue_depth_is_enforced(s: &mut Subject) {
    let t = s.target.as_mut();
    let depth = t.queue_depth();
    for i in 0..depth as u64 {
        t.submit(Op::Write { token: i, offset: i * 4096, buf: AlignedBuf::zeroed(4096), fua: false, write_id: i + 1 }).unwrap();
    }
    let e = t.submit(Op::Flush { token: 99 }).expect_err(s.name);
    assert!(matches!(e, TargetError::QueueFull { .. }), "{}: {e}", s.name);
    let out = reap_all(t, depth);
    assert!(out.iter().all(|c| c.result.is_ok()), "{}", s.name);
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn conformance_cut_cycles_verify_clean() {
    conformance("conformance_cut_cycles_verify_clean", 16, body_cut_cycles_verify_clean);
}

#[test]
fn conformance_bad_requests_fail_as_data() {
    conformance("conformance_bad_requests_fail_as_data", 4, body_bad_requests_fail_as_data);
}

#[test]
fn conformance_queue_depth_is_enforced() {
    conformance("conformance_queue_depth_is_enforced", 8, body_queue_depth_is_enforced);
}

/// Detaches, on drop, the loop devices whose names the power scripts of a test wrote down.
struct ScriptLoops(PathBuf);

impl Drop for ScriptLoops {
    fn drop(&mut self) {
        for f in ["cur", "dummy"] {
            if let Ok(dev) = std::fs::read_to_string(self.0.join(f)) {
                let _ = sh("losetup", &["-d", dev.trim()]);
            }
        }
    }
}

#[test]
fn the_runner_finds_its_target_by_identity_and_again_when_it_comes_back_renamed() {
    let test = "the_runner_finds_its_target_by_identity_and_again_when_it_comes_back_renamed";
    let d = scratch("renamed");
    // An unusual size, so that the size alone names this device among the machine's.
    let size: u64 = (6 << 20) + 20 * 1024;
    let Some(mut first) = loop_or_skip(test, &d, size, 512) else { return };
    let file = first.file.clone();
    std::fs::write(d.join("cur"), &first.dev).unwrap();
    let original = first.dev.clone();
    let _nodes = first.nodes.take(); // held to the end of the test, not forgotten with `first`
    std::mem::forget(first); // from here on the scripts own it, and ScriptLoops detaches it
    let _guard = ScriptLoops(d.clone());
    std::fs::File::create(d.join("dummy.img")).unwrap().set_len(1 << 20).unwrap();
    std::fs::write(d.join("state"), "on\n").unwrap();
    let dir = d.to_str().unwrap();
    // "Power off": detach the device (the kernel finishes it when the harness lets go).
    // "Power on": a dummy takes the old name, so the target comes back under another one.
    let script = |name: &str, body: String| {
        let p = d.join(name);
        std::fs::write(&p, format!("#!/bin/sh\nset -e\ncd {dir}\n{body}")).unwrap();
        sh("chmod", &["+x", p.to_str().unwrap()]).unwrap();
        p.to_str().unwrap().to_string()
    };
    let off = script("off.sh", "losetup -d \"$(cat cur)\"\necho off > state\n".into());
    let on = script(
        "on.sh",
        format!(
            "old=$(cat cur)\nif [ -f dummy ]; then losetup -d \"$(cat dummy)\" || true; rm -f dummy; fi\n\
             i=0; until losetup \"$old\" dummy.img 2>/dev/null; do i=$((i+1)); [ $i -lt 100 ] || exit 1; sleep 0.05; done\n\
             echo \"$old\" > dummy\nlosetup -f --show --direct-io=on {} > cur\ncat cur >> names\necho on > state\n",
            file.display()
        ),
    );
    let state = script("state.sh", "cat state\n".into());
    let scenario = format!(
        "format_version = 1\nname = \"renamed\"\nseed = 77\ncontract = \"plp\"\n\
         [target]\nsize_bytes = {size}\n\
         [workload]\npattern = {{ kind = \"random\" }}\nmin_write_bytes = 4096\nmax_write_bytes = 65536\nmean_write_bytes = 8192\n\
         align_bytes = 4096\nqueue_depth = 16\n\
         [controllers]\npower = \"exec:?off={off}&on={on}&state={state}\"\n\
         [fault]\nkind = \"power_cut\"\n[cut]\nkind = \"uniform_time\"\nwindow_start_ms = 20\nwindow_end_ms = 60\n\
         [cycles]\ncount = 3\noff_time_ms = 20\nreadiness_timeout_s = 10\n\
         [verify]\nsample_bytes = 1048576\nfull_every_cycles = 0\n"
    );
    let sf = d.join("renamed.toml");
    std::fs::write(&sf, scenario).unwrap();
    let rd = d.join("run");
    let o = Command::new(BIN).args(["run", sf.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("no SMART/health checks") && out.contains("not an NVMe device"), "{out}");
    let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    let ev: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let started = ev.iter().find(|e| e["event"] == "run_started").unwrap();
    assert!(started["target"].as_str().unwrap().contains(&format!("loop-backing={}", backing(&file))), "{started}");
    let ready: Vec<_> = ev.iter().filter(|e| e["event"] == "ready").collect();
    assert_eq!(ready.len(), 3, "{out}");
    assert!(ready.iter().all(|r| r["enumerate_us"].as_u64().is_some()), "re-opened each cycle: {ready:?}");
    assert_eq!(ev.iter().filter(|e| e["event"] == "verified").count(), 3, "{out}");
    let names = std::fs::read_to_string(d.join("names")).unwrap();
    let seen: Vec<&str> = std::iter::once(original.as_str()).chain(names.lines()).collect();
    assert_eq!(seen.len(), 4, "{names}");
    assert!(seen.windows(2).all(|w| w[0] != w[1]), "the device came back under a new name each cycle: {seen:?}");
    println!("the target was {}", seen.join(", then "));
}
