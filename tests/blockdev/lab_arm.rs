//! The conformance suite's third arm: the lab guest's NVMe namespace (docs/LAB.md), through
//! the real Linux NVMe driver on QEMU's emulated controller and faultline's io_uring engine.
//!
//! The bodies call the library (run_cycle, Verifier), so they must run where the namespace
//! is: inside the guest. The host test below boots the lab once (`faultline lab exec`, the
//! namespace 8 MiB = [`CAP`], multipath off) with this very test binary put in the share, and
//! the guest runs the three conformance tests of that binary one after another with
//! [`NVME_ENV`] naming the namespace: there `conformance()` runs the NVMe arm alone. Each arm
//! prints a pass line only after its body returned; the host test fails unless every body
//! passed on the NVMe device through both engines (and, with a reset cut, each cut was a
//! controller reset).

use super::*;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::thread::JoinHandle;

/// Set in the guest only: the namespace's block device (`/dev/nvme0n1`).
pub const NVME_ENV: &str = "FAULTLINE_CONF_NVME";
/// Set with it: the controller behind that block device (`nvme0`), whose reset is the cut.
pub const NVME_CTRL_ENV: &str = "FAULTLINE_CONF_NVME_CTRL";
/// The NVMe arm's cut ([`NvmeCut`]), set on the host and passed on to the guest: `stop`
/// (default), `reset` or `reset-into-writes`.
pub const CUT_ENV: &str = "FAULTLINE_CONF_NVME_CUT";

/// What the NVMe arm's cut does (see [`nvme_subject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeCut {
    /// Stop the writer with the queue full, as the loop arm does.
    Stop,
    /// A controller reset; the writer waits until it has landed, then drains.
    Reset,
    /// A controller reset; the writer drains as soon as it has begun.
    ResetIntoWrites,
}

impl NvmeCut {
    fn from_env() -> NvmeCut {
        match std::env::var(CUT_ENV).as_deref() {
            Err(_) | Ok("") | Ok("stop") => NvmeCut::Stop,
            Ok("reset") => NvmeCut::Reset,
            Ok("reset-into-writes") => NvmeCut::ResetIntoWrites,
            Ok(other) => panic!("{CUT_ENV}={other:?}: expected stop, reset or reset-into-writes"),
        }
    }
    fn name(self) -> &'static str {
        match self {
            NvmeCut::Stop => "stop",
            NvmeCut::Reset => "reset",
            NvmeCut::ResetIntoWrites => "reset-into-writes",
        }
    }
}
/// The serial of the lab drive's controllers (`cmd/lab/machine.rs`).
pub(super) const LAB_SERIAL: &str = "FAULTLINELAB0001";
/// The conformance tests the guest runs, each with its NVMe arm.
const TESTS: [&str; 4] = [
    "conformance_cut_cycles_verify_clean",
    "conformance_bad_requests_fail_as_data",
    "conformance_queue_depth_is_enforced",
    "zeroing::conformance_deallocates_and_write_zeroes_under_cuts_verify_clean",
];
/// The tests the guest runs on the protection-information namespace (`$LAB_NS_PI`).
const PI_TESTS: &str = "blockdev::conformance_cut_cycles_verify_clean \
     blockdev::lab_arm::a_pi_mismatch_on_the_lab_guest_s_pi_namespace_is_found_at_its_sector \
     blockdev::lab_pi::passthrough_writes_and_checks_protection_information_on_the_lab_guest_s_pi_namespaces \
     blockdev::lab_pi::qemu_leaves_the_old_tuple_beside_a_block_a_short_deallocate_zeroed \
     blockdev::lab_pi::qemu_writes_zeroes_under_a_64_bit_guard_of_the_data_alone";
/// The tests of [`TESTS`] that cut (three cycles each).
const CUTTING: [&str; 2] = [TESTS[0], TESTS[3]];
/// The NVMe arm's engines, as `conformance()` names them: one ring, two worker rings.
const ARMS: [(&str, usize); 2] = [("nvme", 1), ("nvme, 2 io worker rings", 2)];

/// A reset under way.
type Reset = JoinHandle<Result<ResetFigures, String>>;

/// What a reset met: the writes the block layer held in flight when it was issued, how many
/// completed while it ran, and when it was issued.
struct ResetFigures {
    held: u64,
    during: u64,
    /// `writes_done` when it returned.
    end: u64,
    t: Instant,
}

/// Write requests the block layer completed so far (`stat`'s fifth field).
fn writes_done(stat: &Path) -> Result<u64, String> {
    let s = sysfs(stat)?;
    s.split_whitespace().nth(4).and_then(|w| w.parse().ok()).ok_or(format!("{}: {s:?}", stat.display()))
}

/// Writes the block layer holds in flight (`inflight` is "READS WRITES").
fn held_writes(inflight: &Path) -> Result<u64, String> {
    let held = sysfs(inflight)?;
    held.split_whitespace().nth(1).and_then(|w| w.parse().ok()).ok_or(format!("{}: {held:?}", inflight.display()))
}

fn sysfs(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).map_err(|e| format!("{}: {e}", p.display()))
}

/// The NVMe arm, in the guest: `dev` opened as faultline opens a target (`open_target`, every
/// guard on: in use, identity = the lab's serial and [`CAP`], no signature), through the
/// io_uring engine with `io_threads` rings, and blanked first (zeroes, flushed), as a fresh
/// loop device is: every arm writes the same run id, so one arm's sectors would be
/// another's "written by a run the ledger does not know".
///
/// The cut, by default, stops the writer with the queue full, as the loop arm's does: the
/// namespace is a raw image that loses nothing, so under the PLP contract every completed
/// write must verify and the writes in flight land whole or not at all. The stronger cut, a
/// controller reset (`/sys/class/nvme/CTRL/reset_controller`) with the writer's last writes
/// outstanding, is what the bodies were meant to meet here, and is one `CUT_ENV` away
/// (`reset`: on its own thread, the writer waiting until it has landed, as the runner's
/// faults do; `reset-into-writes`: the writer drains as soon as it has begun, into a
/// controller that is resetting). It is not the default because it wedges the lab: in 6 of
/// 15 runs, after a reset the emulated controller never completed some command of an I/O
/// queue, through every reset the kernel then tried (docs/LAB.md). Each
/// reset prints what it met: the writes the block layer had in flight when it was issued
/// (`/sys/block/NAME/inflight`), and those completed while it ran and after it, before the
/// next verify (`stat`). Returns the subject and the count of its completed resets.
pub fn nvme_subject(depth: usize, io_threads: usize) -> (Subject, Rc<Cell<u32>>) {
    let dev = PathBuf::from(std::env::var_os(NVME_ENV).expect("the NVMe arm runs with FAULTLINE_CONF_NVME set"));
    let ctrl = std::env::var(NVME_CTRL_ENV).unwrap_or_else(|_| panic!("{NVME_CTRL_ENV} must name the controller of {}", dev.display()));
    let name = ARMS.iter().find(|a| a.1 == io_threads).map(|a| a.0).expect("an engine of ARMS");
    let spec = OpenSpec {
        writable: true,
        queue_depth: depth,
        expect: Expectation { serial: Some(LAB_SERIAL.into()), size_bytes: Some(CAP), ..Default::default() },
        allow_overwrite_signature: false,
        io_threads,
    };
    let mut o = open_target(&dev, &spec).unwrap_or_else(|e| panic!("{name}: open {}: {e}", dev.display()));
    assert!(o.block_device && o.direct, "{name}: {} is not a block device opened O_DIRECT", dev.display());
    assert_eq!(o.engine, Engine::IoUring, "{name}: {:?}", o.notes);
    let id = o.target.identity();
    assert!(id.contains(LAB_SERIAL), "{name}: {} is not the lab drive: {id}", dev.display());
    blank(o.target.as_mut(), name);
    let disk = dev.file_name().expect("a device name").to_string_lossy().into_owned();
    let inflight = PathBuf::from(format!("/sys/block/{disk}/inflight"));
    let cdir = PathBuf::from(format!("/sys/class/nvme/{ctrl}"));
    // The controller must be this namespace's: its disk is listed under it.
    assert!(cdir.join(&disk).exists(), "{name}: {disk} is not a namespace of {ctrl} (multipath must be off)");
    let stat = PathBuf::from(format!("/sys/block/{disk}/stat"));
    let running: Rc<RefCell<Option<Reset>>> = Rc::default();
    let started = running.clone();
    let state = cdir.join("state");
    let mode = NvmeCut::from_env();
    let into_writes = mode == NvmeCut::ResetIntoWrites;
    let cut = move || -> Result<(), faultline::writer::HookError> {
        let (inflight, stat, cdir) = (inflight.clone(), stat.clone(), cdir.clone());
        let reset = std::thread::spawn(move || -> Result<ResetFigures, String> {
            let held = held_writes(&inflight)?;
            let before = writes_done(&stat)?;
            let t = Instant::now();
            std::fs::write(cdir.join("reset_controller"), "1").map_err(|e| format!("reset_controller: {e}"))?;
            let end = writes_done(&stat)?;
            Ok(ResetFigures { held, during: end - before, end, t })
        });
        // Back to the writer once the reset has landed; or, the stronger cut, once it has
        // begun, so that what the writer still holds reaches a controller that is resetting.
        let t = Instant::now();
        while !reset.is_finished() && (!into_writes || sysfs(&state)? == "live") {
            if into_writes && t.elapsed() > Duration::from_secs(5) {
                return Err(format!("{} still live 5 s after its reset was asked for", state.display()).into());
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "the write to reset_controller has not returned after 60 s ({} is {})",
                    state.display(),
                    sysfs(&state)?
                )
                .into());
            }
            if into_writes {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        *started.borrow_mut() = Some(reset);
        Ok(())
    };
    let resets = Rc::new(Cell::new(0u32));
    let counted = resets.clone();
    let stat = PathBuf::from(format!("/sys/block/{disk}/stat"));
    let power_on = move || {
        let Some(reset) = running.borrow_mut().take() else { return };
        let f = reset.join().expect("the reset thread").unwrap_or_else(|e| panic!("reset {ctrl}: {e}"));
        let after_reset = writes_done(&stat).unwrap() - f.end;
        loop {
            let now = sysfs(&Path::new("/sys/class/nvme").join(&ctrl).join("state")).unwrap();
            if now == "live" {
                break;
            }
            assert!(f.t.elapsed() < Duration::from_secs(30), "{ctrl} still {now} 30 s after its reset");
            std::thread::sleep(Duration::from_millis(5));
        }
        counted.set(counted.get() + 1);
        println!(
            "nvme arm: reset {ctrl} with {} writes in the block layer, {} completed during it, {} after; live {} ms after it was issued",
            f.held,
            f.during,
            after_reset,
            f.t.elapsed().as_millis()
        );
    };
    let subject = match mode {
        NvmeCut::Stop => Subject { name, target: o.target, cut: Box::new(|| Ok(())), power_on: Box::new(|| {}), _keep: None },
        NvmeCut::Reset | NvmeCut::ResetIntoWrites => {
            Subject { name, target: o.target, cut: Box::new(cut), power_on: Box::new(power_on), _keep: None }
        }
    };
    (subject, resets)
}

/// Zeroes the whole namespace through `t` and flushes.
pub(super) fn blank(t: &mut dyn BlockTarget, name: &str) {
    const CHUNK: u64 = 1 << 20;
    for (i, offset) in (0..CAP).step_by(CHUNK as usize).enumerate() {
        t.submit(Op::Write { token: i as u64, offset, buf: AlignedBuf::zeroed(CHUNK as usize), fua: false, write_id: 0 }).unwrap();
        let c = reap_all(t, 1);
        assert!(c[0].result.is_ok(), "{name}: blanking at {offset}: {:?}", c[0].result);
    }
    t.submit(Op::Flush { token: u64::MAX }).unwrap();
    let c = reap_all(t, 1);
    assert!(c[0].result.is_ok(), "{name}: flush after blanking: {:?}", c[0].result);
}

/// Runs `body` on the NVMe arm through both engines, and says so once it passed.
pub fn conformance_nvme(test: &str, depth: usize, body: fn(&mut Subject)) {
    let dev = std::env::var(NVME_ENV).unwrap_or_default();
    for (name, io_threads) in ARMS {
        let (mut s, resets) = nvme_subject(depth, io_threads);
        body(&mut s);
        let resets = resets.get();
        let cut = NvmeCut::from_env().name();
        println!("conformance nvme: {test} passed on {dev} ({name}, cut {cut}, {resets} controller resets)");
    }
}

/// The host's side: one boot for every body. `lab setup` first, as tests/lab.rs does (a
/// no-op when the cache is warm); SKIP only where there is no apt to get the lab from.
#[test]
fn conformance_in_the_lab_guest() {
    let test = "conformance_in_the_lab_guest";
    if std::env::var_os(NVME_ENV).is_some() {
        panic!("{test} runs on the host, not in the guest: run the guest's tests with --exact");
    }
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        skip(test, "the lab runs on x86-64 Linux only");
        return;
    }
    if Command::new("apt-get").arg("--version").output().is_err() {
        skip(test, "no apt-get: the lab is fetched from Debian's archive");
        return;
    }
    let o = run(&["lab", "setup"]);
    assert!(o.status.success(), "faultline lab setup failed:\n{}", text(&o));
    // One of the lab's boot slots (its guests and this one, at most one a core).
    let _boot = crate::lab::boot_slot();
    // The guest carries the libraries faultline links (`lab setup` puts in what `ldd` says):
    // this binary must need no other.
    let me = std::env::current_exe().unwrap();
    let libs = |bin: &Path| -> Vec<String> {
        let out = sh("ldd", &[s(bin)]).unwrap_or_else(|e| panic!("{e}"));
        out.lines().filter_map(|l| l.split_whitespace().next()).filter(|l| !l.starts_with("linux-vdso")).map(String::from).collect()
    };
    let carried = libs(Path::new(BIN));
    let missing: Vec<String> = libs(&me).into_iter().filter(|l| !carried.contains(l)).collect();
    assert!(
        missing.is_empty(),
        "{} links {missing:?}, which the lab's initramfs does not carry (it has faultline's: {carried:?})",
        me.display()
    );

    let cut = NvmeCut::from_env();
    println!("{CUT_ENV}={}", cut.name());
    let pi_scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(PI_SCENARIO);
    let d = scratch("lab-arm");
    let script = d.join("conf.sh");
    // Run from the guest's tmpfs, not from the 9p share; the tests one at a time (they share
    // the namespace), printing as they go; then what the kernel logged of the drive (the
    // console shows errors only).
    std::fs::write(
        &script,
        format!(
            "set -e\ncp /share/{exe} /tmp/conf && chmod +x /tmp/conf\necho \"conf: ns=$LAB_NS_A ctrl=$LAB_CTRL_A\"\nset +e\n\
             {CUT_ENV}={mode} {NVME_ENV}=\"$LAB_NS_A\" {NVME_CTRL_ENV}=\"$LAB_CTRL_A\" /tmp/conf --exact --nocapture --test-threads=1 {}\nrc=$?\n\
             echo \"conf: pi ns=$LAB_NS_PI $(cat /sys/block/${{LAB_NS_PI#/dev/}}/integrity/format)\"\n\
             {CUT_ENV}={mode} {NVME_ENV}=\"$LAB_NS_PI\" {NVME_CTRL_ENV}=\"$LAB_CTRL_A\" /tmp/conf --exact --nocapture --test-threads=1 --include-ignored {PI_TESTS}\n\
             rc_pi=$?\n\
             faultline lab guest run /share/{PI_SCENARIO} /share/run-pi > /share/out-pi.log 2>&1; echo \"exit {PI_SCENARIO} $?\"\n\
             echo \"conf: the kernel's log\"; dmesg | grep -E 'nvme|I/O|blk|protection|guard' | tail -n 80\n[ $rc -ne 0 ] && exit $rc\nexit $rc_pi\n",
            TESTS.map(|t| format!("blockdev::{t}")).join(" "),
            exe = me.file_name().unwrap().to_string_lossy(),
            mode = cut.name(),
        ),
    )
    .unwrap();
    let rd = d.join("run");
    let t = Instant::now();
    let o = run(&[
        "lab",
        "exec",
        s(&script),
        "--put",
        s(&me),
        "--put",
        s(&pi_scenario),
        "--run-dir",
        s(&rd),
        "--multipath",
        "off",
        "--size-mib",
        "8",
        // Seven namespaces with PI (types 1, 2 and 3; 16- and 64-bit guards; 512+8 to 4096+64),
        // each the size of the first.
        "--pi-namespace-mib",
        "8",
        "--timeout-s",
        "900",
        // One vCPU, as every guest that boots beside another (tests/lab.rs, `lab`).
        "--cpus",
        "1",
    ]);
    let wall = t.elapsed();
    let log = std::fs::read_to_string(rd.join("lab/share/lab/guest.log")).unwrap_or_default();
    let console = std::fs::read_to_string(rd.join("lab/console.log")).unwrap_or_default();
    let ctx = format!("seed 8 (body_cut_cycles_verify_clean)\n{}\nguest:\n{log}\nconsole:\n{console}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert!(log.contains("conf: ns=/dev/nvme0n1 ctrl=nvme0"), "{ctx}");
    let per_arm = if cut == NvmeCut::Stop { 0 } else { 3 };
    for test in TESTS {
        for (name, _) in ARMS {
            let resets = if CUTTING.contains(&test) { per_arm } else { 0 };
            let test = test.rsplit("::").next().unwrap_or(test);
            let line = format!("conformance nvme: {test} passed on /dev/nvme0n1 ({name}, cut {}, {resets} controller resets)", cut.name());
            assert!(log.contains(&line), "missing '{line}'\n{ctx}");
        }
    }
    assert!(log.contains(&format!("test result: ok. {} passed; 0 failed", TESTS.len())), "{ctx}");
    // The PI namespace: the cut cycles through both engines, then the planted mismatch found.
    assert!(log.contains(&format!("conf: pi ns=/dev/nvme0n2 {PI_FORMAT}")), "{ctx}");
    for (name, _) in ARMS {
        let line = format!(
            "conformance nvme: conformance_cut_cycles_verify_clean passed on /dev/nvme0n2 ({name}, cut {}, {per_arm} controller resets)",
            cut.name()
        );
        assert!(log.contains(&line), "missing '{line}'\n{ctx}");
    }
    // faultline's passthrough engine on each PI namespace's generic device: cut cycles verified
    // with every tuple checked, and a planted reference tag found; then QEMU's stale tuple.
    for ns in &super::lab_pi::PI_NAMESPACES {
        let format = super::lab_pi::format_of(ns);
        let line = log.lines().find_map(|l| l.find(&format!(" ({format}): 3 cut cycles with ")).map(|_| l));
        let line = line.unwrap_or_else(|| panic!("no passthrough line for {format}\n{ctx}"));
        let field = if ns.pi_type == 3 { "application tag " } else { "reference tag " };
        assert!(line.contains("verified clean; the planted tag found: unreadable at ") && line.contains(field), "{line}");
        println!("{}", &line[line.find("pi passthru: ").unwrap_or(0)..]);
    }
    let qemu: Vec<&str> = log.lines().filter_map(|l| l.find("pi qemu: ").map(|i| &l[i..])).collect();
    assert_eq!(qemu.len(), 2, "the two QEMU findings on PI namespaces\n{ctx}");
    println!("{}", qemu.join("\n"));
    pi_scenario_ran_clean(&rd.join("lab/share"), &log, &ctx);
    // libtest prints a test's name and then, on the same line, what it printed.
    let pi = log.lines().find_map(|l| l.find("pi arm: nvme0n2 (").map(|i| &l[i..]));
    let pi = pi.unwrap_or_else(|| panic!("no pi arm line\n{ctx}"));
    assert!(pi.starts_with(&format!("pi arm: nvme0n2 ({PI_FORMAT}): the zeroed PI of byte ")), "{pi}\n{ctx}");
    println!("{pi}");
    assert!(log.contains("test result: ok. 5 passed; 0 failed"), "{ctx}");
    assert!(log.contains("nvme: seed 8") && log.contains("nvme, 2 io worker rings: seed 8"), "{ctx}");
    // With a reset cut, each cut was one (three per cutting body and engine). Per reset:
    // (writes in the block layer when it was issued, completed during it, after it); printed,
    // not judged: under TCG most resets meet an idle controller.
    let met: Vec<[u64; 3]> = log
        .lines()
        .filter_map(|l| {
            let l = l.strip_prefix("nvme arm: reset nvme0 with ")?;
            let n: Vec<u64> = l.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).take(3).collect();
            n.try_into().ok()
        })
        .collect();
    // Every cutting body, and the PI namespace's cut cycles, on both engines.
    assert_eq!(met.len(), (CUTTING.len() + 1) * ARMS.len() * per_arm as usize, "{ctx}");
    let booted = text(&o).lines().find(|l| l.contains("lab: booted in")).unwrap_or("").trim().to_string();
    println!(
        "lab arm: {:.1} s wall ({booted}); writes each reset met (in the block layer, completed during, after): {met:?}",
        wall.as_secs_f64()
    );
}

/// The shipped scenario the guest runs last, on the 4096+8 PI namespace's generic device.
const PI_SCENARIO: &str = "lab-pi-passthrough.toml";

/// `lab-pi-passthrough.toml` ran in the guest (`lab guest run`, its target kept: a generic
/// device): every cycle removed port A's PCI function under PI-checked I/O, the namespace was
/// followed to its generic device's new name, and every verify was clean.
fn pi_scenario_ran_clean(share: &Path, log: &str, ctx: &str) {
    let out = std::fs::read_to_string(share.join("out-pi.log")).unwrap_or_default();
    let ctx = format!("{PI_SCENARIO} (seed 13)\n{out}\n{ctx}");
    assert!(log.contains(&format!("exit {PI_SCENARIO} 0")), "{ctx}");
    let events = std::fs::read_to_string(share.join("run-pi/events.jsonl")).unwrap_or_else(|e| panic!("no events.jsonl: {e}\n{ctx}"));
    let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
    assert_eq!((of("cut_issued"), of("ready"), of("cycle_ended")), (3, 3, 3), "{ctx}");
    assert!(events.contains("protection information type 1 in its last 8: faultline writes each block's tuple"), "{ctx}");
    let back = events.lines().find(|l| l.contains("/dev/ng0n3 is back as /dev/ng")).unwrap_or_else(|| panic!("not followed\n{ctx}"));
    assert!(!events.contains("\"verdict\":\"findings\""), "{ctx}");
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(share.join("run-pi/summary.json")).unwrap()).unwrap();
    assert_eq!(summary["verdict"], "clean", "{ctx}");
    let z = &summary["figures"]["zeroing"];
    println!("{PI_SCENARIO}: 3 cycles clean, zeroing {z}; {}", back[back.find("/dev/ng0n3").unwrap_or(0)..].trim_end_matches("\"}"));
}

/// Set in the guest with the protection-information namespace (`$LAB_NS_PI`): the kernel's
/// integrity format it must show.
const PI_FORMAT: &str = "T10-DIF-TYPE1-CRC";

/// In the guest, on the namespace formatted 512+8 with PI type 1 (`lab --pi-namespace-mib`),
/// whose block device [`NVME_ENV`] names: the kernel's block integrity writes each sector's
/// guard and reference tag and checks them on every read. One graceful cycle, verified clean;
/// then one sector's protection information is overwritten with zeros through nvme-cli's
/// passthrough (PRINFO 0: the controller checks nothing and stores what it is given, the data
/// unchanged), as a drive that lost or garbled a tag would leave it: the verifier names that
/// sector, and only it, a protection information mismatch.
#[test]
#[ignore = "runs in the lab guest on its PI namespace (conformance_in_the_lab_guest runs it there)"]
fn a_pi_mismatch_on_the_lab_guest_s_pi_namespace_is_found_at_its_sector() {
    let dev = PathBuf::from(std::env::var_os(NVME_ENV).expect("runs in the lab guest with FAULTLINE_CONF_NVME set"));
    let disk = dev.file_name().unwrap().to_string_lossy().into_owned();
    let integrity = sysfs(Path::new(&format!("/sys/block/{disk}/integrity/format"))).unwrap();
    assert_eq!(integrity, PI_FORMAT, "{disk} is not the PI namespace");
    let (mut subject, _) = nvme_subject(16, 1);
    let dir = scratch("conf-pi");
    let (mut ledger, layout, format) = plp_run(&subject, mixed_spec(9, Default::default()), &dir);
    let opts = cycle_opts(1, 1, None, Some(1000));
    let out = run_cycle(subject.target.as_mut(), &layout, &format, &mut ledger, Contract::Plp, &opts, &mut *subject.cut).unwrap();
    assert_eq!((out.completed, out.failed), (1000, 0), "{out:?}");
    let verify = |t: &mut dyn BlockTarget| Verifier::new(&layout, ledger.history(), &format).verify(t, 0, CAP).unwrap();
    let rep = verify(subject.target.as_mut());
    assert!(rep.findings.is_empty() && rep.durable_ok > 0, "{:?}", &rep.findings[..rep.findings.len().min(3)]);
    // The first sector of the first write: the same data, its 8 bytes of PI zeroed.
    let at = layout.plan(1).offset;
    let mut sector = AlignedBuf::zeroed(512);
    subject.target.read_at(at, &mut sector).unwrap();
    let (data, meta) = (dir.join("sector.bin"), dir.join("pi.bin"));
    std::fs::write(&data, &sector[..]).unwrap();
    std::fs::write(&meta, [0u8; 8]).unwrap();
    let lba = (at / 512).to_string();
    // Through the namespace's generic character device: faultline holds the block device
    // open exclusively.
    let ng = PathBuf::from(format!("/dev/{}", disk.replacen("nvme", "ng", 1)));
    let args = ["write", s(&ng), "--start-block", &lba, "--block-count=0", "--data-size=512", "--data", s(&data)];
    let planted =
        sh("nvme", &[&args[..], &["--metadata-size=8", "--metadata", s(&meta), "--prinfo=0"]].concat()).unwrap_or_else(|e| panic!("{e}"));
    let rep = verify(subject.target.as_mut());
    let f: Vec<String> = rep.findings.iter().map(|f| format!("{} at {} (+{}): {}", f.class.name(), f.offset, f.length, f.detail)).collect();
    assert_eq!(f.len(), 1, "{planted}: {f:?}");
    let f0 = &rep.findings[0];
    assert!((f0.class, f0.offset, f0.length) == (faultline::verify::FindingClass::Unreadable, at, 512), "{f:?}");
    assert!(f0.detail.starts_with("protection information mismatch: "), "{f:?}");
    println!("pi arm: {disk} ({integrity}): the zeroed PI of byte {at} found: {}", f[0]);
}
