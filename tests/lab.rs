//! The lab (`faultline lab`, docs/LAB.md): faultline in a QEMU guest (q35, TCG) against the
//! real Linux NVMe driver, on QEMU's emulated dual-port drive (two controllers of one NVM
//! subsystem sharing a namespace), each test one boot (~10-25 s under TCG on two cores).
//!
//! `.ci/run` runs `faultline lab setup` first (Debian's archive); each test runs it again (a
//! no-op then, ~2 s) and skips with a printed reason only where there is no apt to get the
//! lab from. Two guests of one vCPU each boot side by side ([`lab`]); a test judged on timing
//! boots alone, with two ([`lab_alone`]).
//! Seeds are fixed (the scenarios' and the scripts' `--seed`) and printed on failure.

use crate::common::{s, skip, text, BIN};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Condvar, Mutex, OnceLock};

/// A test's scratch directory, removed when the test passes (a lab run leaves a drive image
/// of up to 256 MiB behind); kept, for a look, when it fails.
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch(name: &str) -> Scratch {
    Scratch(crate::common::scratch(name))
}

/// Boots at once: one per core of this 2-core machine (a guest under TCG keeps about one core
/// busy: `lab run` of lab-power-cut-quarch-usb.toml, 21.7 s, used 17.7 s user and 2.0 s
/// system). A test whose verdict rests on timing (an undisturbed port's latency, a multipath
/// head's stall budget) boots alone: [`lab_alone`].
const SLOTS: u32 = 2;

#[derive(Default)]
struct Gate {
    used: u32,
    /// Tests waiting to boot alone: no new boot starts beside them.
    alone_waiting: u32,
}

static GATE: Mutex<Gate> = Mutex::new(Gate { used: 0, alone_waiting: 0 });
static FREED: Condvar = Condvar::new();

/// Held for as long as a test's boots run: gives its slots back on drop (and then its hold
/// on the machine, which the other modules' tests share).
struct Boot(u32, #[expect(dead_code, reason = "held, not read")] crate::common::Machine);

impl Drop for Boot {
    fn drop(&mut self) {
        GATE.lock().unwrap_or_else(|e| e.into_inner()).used -= self.0;
        FREED.notify_all();
    }
}

/// `slots` of the lab's boots; all of them also keep every other module's busy tests away
/// ([`crate::common::alone`]), one shares the machine with them.
fn take(slots: u32) -> Boot {
    // The machine first, then the gate (the order every test takes its locks in).
    let machine = if slots == SLOTS { crate::common::alone() } else { crate::common::shared() };
    let mut g = GATE.lock().unwrap_or_else(|e| e.into_inner());
    if slots == SLOTS {
        g.alone_waiting += 1;
        while g.used > 0 {
            g = FREED.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        g.alone_waiting -= 1;
    } else {
        while g.used + slots > SLOTS || g.alone_waiting > 0 {
            g = FREED.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
    g.used += slots;
    Boot(slots, machine)
}

/// A boot slot for a guest another module boots (`blockdev`'s conformance arm in the lab).
pub(crate) fn boot_slot() -> impl Drop {
    take(1)
}

/// `faultline lab setup`, once per test process: `Err` (skip) only when this host has no
/// apt to fetch the lab with; a setup that fails otherwise fails the test. Then a boot slot
/// (another test's guest may run beside this one's) for a guest of one virtual CPU: two
/// guests of two vCPUs each on two cores cost twice the CPU (docs/LAB.md, "Figures").
fn lab(test: &str) -> Option<Boot> {
    lab_slots(test, 1, 1)
}

/// [`lab`], with no other guest running beside this test's, and two vCPUs: for a verdict
/// that rests on timing, and for two ports writing at once.
fn lab_alone(test: &str) -> Option<Boot> {
    lab_slots(test, SLOTS, 2)
}

thread_local! {
    /// The vCPUs of the guests this test boots ([`lab_slots`]), which [`lab_cmd`] passes on
    /// (as `$FAULTLINE_LAB_CPUS`, so that the guests a two-host run starts get them too).
    static GUEST_CPUS: std::cell::Cell<u8> = const { std::cell::Cell::new(1) };
}

/// `faultline lab setup`, twice, once per test process: `Err` (skip) only when this host has no
/// apt to fetch the lab with; a first setup that fails fails the test. `Ok` holds the second
/// setup's output, for [`setup_twice_does_nothing_the_second_time`] (run here, before any boot,
/// so that it needs no boot slot and never waits for the machine: it rewrites the cache
/// every guest boots from).
fn setup() -> &'static Result<Output, String> {
    static SETUP: OnceLock<Result<Output, String>> = OnceLock::new();
    SETUP.get_or_init(|| {
        if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
            return Err("the lab runs on x86-64 Linux only".into());
        }
        if Command::new("apt-get").arg("--version").output().is_err() {
            return Err("no apt-get: the lab is fetched from Debian's archive".into());
        }
        let o = Command::new(BIN).args(["lab", "setup"]).output().expect("run faultline lab setup");
        assert!(o.status.success(), "faultline lab setup failed:\n{}", text(&o));
        Ok(Command::new(BIN).args(["lab", "setup"]).output().expect("run faultline lab setup again"))
    })
}

fn lab_slots(test: &str, slots: u32, cpus: u8) -> Option<Boot> {
    match setup() {
        Ok(_) => {
            GUEST_CPUS.set(cpus);
            Some(take(slots))
        }
        Err(why) => {
            skip(test, why);
            None
        }
    }
}

/// Runs `faultline lab ARGS`. A run the lab itself failed in a way it names (an emulated
/// controller that came back on the bus and never initialised, a guest that stopped beating:
/// QEMU 7.2 defects, docs/LAB.md) says nothing of faultline or the drive: it runs once more,
/// in a fresh run directory, and says so on stderr. Any other outcome, and a second failure,
/// stand.
fn lab_cmd(args: &[&str]) -> Output {
    let cpus = GUEST_CPUS.get().to_string();
    let run = || Command::new(BIN).env("FAULTLINE_LAB_CPUS", &cpus).arg("lab").args(args).output().expect("run faultline lab");
    let o = run();
    let err = String::from_utf8_lossy(&o.stderr);
    let lab_failed = o.status.code() == Some(2)
        && (err.contains("so this run says nothing of the drive")
            || err.contains("the guest stopped: its heartbeat")
            || err.contains("QEMU exited with signal: 11"));
    if !lab_failed {
        return o;
    }
    let why = err
        .lines()
        .find(|l| l.contains("the lab failed") || l.contains("the guest stopped") || l.contains("QEMU exited"))
        .unwrap_or_default()
        .to_string();
    eprintln!("lab test: the lab failed ({why}); running `faultline lab {}` once more (docs/LAB.md)", args.join(" "));
    if let Some(i) = args.iter().position(|a| *a == "--run-dir") {
        let _ = std::fs::remove_dir_all(args[i + 1]);
    }
    run()
}

/// Runs `script` in the guest (`faultline lab exec`); returns the command's output and what
/// the script printed.
fn exec(dir: &Path, script: &str, multipath: &str) -> (Output, String) {
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--run-dir", s(&run_dir), "--multipath", multipath]);
    let log = std::fs::read_to_string(run_dir.join("lab/share/lab/guest.log")).unwrap_or_default();
    (o, log)
}

fn console(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("run/lab/console.log")).unwrap_or_default()
}

#[test]
fn setup_twice_does_nothing_the_second_time() {
    let o = match setup() {
        Ok(o) => o,
        Err(why) => return skip("setup_twice_does_nothing_the_second_time", why),
    };
    let out = text(o);
    assert!(o.status.success(), "{out}");
    // Debian's kernel is xz-compressed with CONFIG_PVH: with xz here, the guest boots it
    // unpacked (docs/LAB.md, setup); without, setup tries to unpack it every time.
    if Command::new("xz").arg("--version").output().is_ok() {
        assert_eq!(out.matches(": up to date").count(), 4, "every step should be up to date:\n{out}");
        assert!(out.contains("/vmlinux, in "), "the lab should boot the unpacked kernel:\n{out}");
    } else {
        assert_eq!(out.matches(": up to date").count(), 3, "every step but the kernel's should be up to date:\n{out}");
    }
}

/// Writes through port A's block device, verifies through port B's (multipath off: one block
/// device per controller, the same namespace behind both). Over the first 32 MiB of the
/// namespace: 5,000 random 4 KiB writes touch about 45% of each damaged MiB below, and the
/// two verifies read 32 MiB, not the whole 256 (under TCG, 20,000 writes and whole-namespace
/// verifies took 128 s of a core).
#[test]
fn written_through_one_controller_verified_through_the_other() {
    let Some(_boot) = lab("written_through_one_controller_verified_through_the_other") else { return };
    let dir = scratch("a-to-b");
    let script = r#"set -e
[ -n "$LAB_NS_A" ] && [ -n "$LAB_NS_B" ] && [ "$LAB_NS_A" != "$LAB_NS_B" ]
echo "paths: A=$LAB_NS_A B=$LAB_NS_B"
faultline write --target "$LAB_NS_A" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r --seed 7 --span-end 33554432 --writes 5000 --flush-every 256 --queue-depth 32
faultline verify --target "$LAB_NS_B" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r
# Then damage two ranges through A (random bytes over [4, 5) MiB, zeroes over [16, 17) MiB)
# and verify through B again: every finding must lie in them.
set +e
dd if=/dev/urandom of="$LAB_NS_A" bs=4096 seek=1024 count=256 conv=notrunc,fsync 2>/dev/null
dd if=/dev/zero of="$LAB_NS_A" bs=4096 seek=4096 count=256 conv=notrunc,fsync 2>/dev/null
faultline verify --target "$LAB_NS_B" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r --json > /tmp/v.json
echo "damaged verify exit $?"
echo "json $(tr -d '\n' < /tmp/v.json)"
"#;
    let (o, log) = exec(&dir, script, "off");
    let ctx = format!("seed 7\n{}\nguest:\n{log}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert!(log.contains("paths: A=/dev/nvme0n1 B=/dev/nvme1n1"), "{ctx}");
    assert!(log.contains("5000 writes (0 failed)"), "{ctx}");
    assert!(log.contains("verdict: clean"), "{ctx}");
    assert!(!log.contains(" 0 durable"), "the verify through B should see A's writes durable:\n{ctx}");
    assert!(log.contains("damaged verify exit 1"), "{ctx}");
    let v = &json_lines(&log, "json ")[0];
    let findings = v["findings"].as_array().unwrap_or_else(|| panic!("no findings array\n{ctx}"));
    let ranges = [(4u64 << 20, 5u64 << 20), (16 << 20, 17 << 20)];
    let mut hit = [0usize; 2];
    for f in findings {
        let (off, len) = (f["offset"].as_u64().unwrap(), f["length"].as_u64().unwrap());
        let i = ranges.iter().position(|&(a, b)| off >= a && off + len <= b);
        let Some(i) = i else { panic!("a finding outside the damaged ranges: {f}\n{ctx}") };
        hit[i] += 1;
    }
    assert!(hit.iter().all(|&n| n > 0), "each damaged range has findings: {hit:?}\n{ctx}");
}

fn json_lines(log: &str, prefix: &str) -> Vec<serde_json::Value> {
    log.lines().filter_map(|l| l.strip_prefix(prefix)).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// SMART through faultline's admin passthrough and parser against nvme-cli's
/// `smart-log -o json`, both controllers, in the same guest with nothing in between.
#[test]
fn smart_and_identify_through_the_admin_ioctl_match_nvme_cli() {
    let Some(_boot) = lab("smart_and_identify_through_the_admin_ioctl_match_nvme_cli") else { return };
    let dir = scratch("smart");
    let script = r#"set -e
faultline write --target "$LAB_NS_A" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r --seed 9 --writes 5000 --queue-depth 16 >/dev/null
for p in A B; do
    eval dev=\$LAB_NS_$p
    eval ctrl=\$LAB_CTRL_$p
    echo "faultline $p $(faultline lab guest smart "$dev")"
    echo "nvme-cli $p $(nvme smart-log -o json "/dev/$ctrl" | tr -d '\n ')"
    echo "faultline-id $p $(faultline lab guest identify "$dev")"
    echo "nvme-cli-id $p $(nvme id-ctrl -o json "/dev/$ctrl" | tr -d '\n')"
    echo "nvme-cli-ns $p $(nvme id-ns -o json "$dev" | tr -d '\n')"
done
"#;
    let (o, log) = exec(&dir, script, "off");
    let ctx = format!("seed 9\n{}\nguest:\n{log}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    for port in ["A", "B"] {
        let ours = json_lines(&log, &format!("faultline {port} "));
        let theirs = json_lines(&log, &format!("nvme-cli {port} "));
        assert_eq!((ours.len(), theirs.len()), (1, 1), "{ctx}");
        let (ours, theirs) = (&ours[0], &theirs[0]);
        // nvme-cli prints the 128-bit counters as strings, the 8-bit fields as numbers.
        let norm = |v: &serde_json::Value| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
        for key in [
            "critical_warning",
            "temperature",
            "avail_spare",
            "spare_thresh",
            "percent_used",
            "data_units_read",
            "data_units_written",
            "power_cycles",
            "power_on_hours",
            "unsafe_shutdowns",
            "media_errors",
            "num_err_log_entries",
        ] {
            assert_eq!(norm(&ours[key]), norm(&theirs[key]), "port {port}, {key}\n{ctx}");
        }
        // 5,000 writes of 4 KiB are 40,000 sectors: 40 data units of 1,000 sectors.
        assert_eq!(norm(&ours["data_units_written"]), "40", "port {port}\n{ctx}");
        // Identify Controller, through the same ioctl and faultline's parser.
        let ours = json_lines(&log, &format!("faultline-id {port} "));
        let theirs = json_lines(&log, &format!("nvme-cli-id {port} "));
        assert_eq!((ours.len(), theirs.len()), (1, 1), "{ctx}");
        let trim = |v: &serde_json::Value| v.as_str().map(|s| s.trim().to_string()).unwrap_or_else(|| v.to_string());
        for key in ["vid", "sn", "mn", "fr", "lpa", "oncs", "awun", "awupf"] {
            assert_eq!(trim(&ours[0][key]), trim(&theirs[0][key]), "port {port}, identify {key}\n{ctx}");
        }
        // Identify Namespace: the atomicity and deallocate fields, and the formatted block.
        let ns = json_lines(&log, &format!("nvme-cli-ns {port} "));
        assert_eq!(ns.len(), 1, "{ctx}");
        for key in ["nsfeat", "flbas", "dlfeat", "nawun", "nawupf", "nabsn", "nabo", "nabspf"] {
            assert_eq!(trim(&ours[0]["ns"][key]), trim(&ns[0][key]), "port {port}, id-ns {key}\n{ctx}");
        }
        let flbas = ns[0]["flbas"].as_u64().unwrap() as usize;
        let lbads = ns[0]["lbafs"][flbas & 0x0F]["ds"].as_u64().unwrap();
        assert_eq!(ours[0]["ns"]["block_bytes"].as_u64(), Some(1 << lbads), "{ctx}");
        assert_eq!(trim(&ours[0]["sn"]), "FAULTLINELAB0001", "{ctx}");
    }
}

fn lab_run(dir: &Path, scenario: &str, multipath: &str) -> (Output, PathBuf) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(scenario);
    let run_dir = dir.join("run");
    let o = lab_cmd(&["run", s(&path), "--run-dir", s(&run_dir), "--multipath", multipath]);
    (o, run_dir)
}

/// The run came back to the host whole and clean, each cycle through a real link fault.
fn assert_clean_run(o: &Output, run_dir: &Path, cycles: usize, ctx: &str) {
    let ctx = format!("{ctx}\n{}\nconsole:\n{}", text(o), std::fs::read_to_string(run_dir.join("lab/console.log")).unwrap_or_default());
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    let events =
        std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_else(|e| panic!("no events.jsonl on the host: {e}\n{ctx}"));
    let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
    assert_eq!(of("cut_issued"), cycles, "{ctx}");
    assert_eq!(of("ready"), cycles, "the device came back every cycle:\n{ctx}");
    assert_eq!(of("cycle_ended"), cycles, "{ctx}");
    assert!(!events.contains("\"verdict\":\"findings\""), "{ctx}");
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["verdict"], "clean", "{ctx}");
}

/// The link faults faultline's own Linux controllers make from inside the guest (NVMe
/// controller reset, PCI function level reset, PCI remove and rescan of port A), one shipped
/// scenario each, run one after another in one boot (`lab exec`, each scenario put in the
/// share): every cycle the device is found again by identity, and every run is clean. Each
/// runs 2 cycles here (the shipped files run 5 and 3), within the suite's time.
fn link_faults_run_clean(test: &str, multipath: &str) {
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let runs = [("lab-nvme-reset", 2, 11), ("lab-pci-flr", 2, 12), ("lab-pci-remove-rescan", 2, 12)];
    let mut args = vec!["exec".to_string()];
    let mut script = String::new();
    for (name, cycles, _) in runs {
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&shipped).unwrap();
        let counts = text.lines().filter(|l| l.starts_with("count = ")).count();
        assert_eq!(counts, 1, "{}: one `count = ` line under [cycles]", shipped.display());
        let text: String =
            text.lines().map(|l| if l.starts_with("count = ") { format!("count = {cycles}\n") } else { format!("{l}\n") }).collect();
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        args.extend(["--put".to_string(), s(&path).to_string()]);
        script += &format!(
            "faultline lab guest run /share/{name}.toml /share/run-{name} > /share/out-{name}.log 2>&1; echo \"exit {name} $?\"\n"
        );
    }
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    // A 32 MiB namespace: each verify reads the whole device, which at the default 256 MiB took
    // 1.7-2.0 s of each cycle under TCG (docs/LAB.md, "Figures").
    args.extend([s(&file).to_string(), "--run-dir".into(), s(&run_dir).into(), "--multipath".into(), multipath.into()]);
    args.extend(["--size-mib".into(), "32".into()]);
    let o = lab_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let share = run_dir.join("lab/share");
    let log = std::fs::read_to_string(share.join("lab/guest.log")).unwrap_or_default();
    for (name, cycles, seed) in runs {
        let out = std::fs::read_to_string(share.join(format!("out-{name}.log"))).unwrap_or_default();
        let ctx =
            format!("{name}.toml (seed {seed}), multipath {multipath}\n{}\nguest:\n{log}\n{out}\nconsole:\n{}", text(&o), console(&dir));
        assert!(log.contains(&format!("exit {name} 0")), "{ctx}");
        let events = std::fs::read_to_string(share.join(format!("run-{name}/events.jsonl")))
            .unwrap_or_else(|e| panic!("no events.jsonl: {e}\n{ctx}"));
        let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
        assert_eq!(of("cut_issued"), cycles, "{ctx}");
        assert_eq!(of("link_restored"), cycles, "{ctx}");
        assert_eq!(of("ready"), cycles, "the device came back every cycle:\n{ctx}");
        assert_eq!(of("cycle_ended"), cycles, "{ctx}");
        assert!(!events.contains("\"verdict\":\"findings\""), "{ctx}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(share.join(format!("run-{name}/summary.json"))).unwrap()).unwrap();
        assert_eq!(summary["verdict"], "clean", "{ctx}");
        // The atomic unit: the scenario declares none, and QEMU 7.2's namespace declares no
        // NAWUPF (NSFEAT.NATOMIC clear): one 512-byte block, said so in the run's notes.
        let unit = "atomic unit 512 bytes, one logical block: the namespace declares no NAWUPF (Identify: NSFEAT.NATOMIC 0, NAWUPF 0";
        assert!(events.contains(unit), "{ctx}");
        // The PCIe gates: the guest's sysfs gives the function's link, and BAR0 its CAP.TO
        // (QEMU's: 7.5 s); read after every fault, judged against the reading before.
        let health: Vec<serde_json::Value> =
            events.lines().filter(|l| l.contains("\"event\":\"health\"")).map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(health.len(), cycles, "{ctx}");
        for h in &health {
            let p = &h["pcie"];
            assert!(p["link_speed"].as_str().is_some_and(|s| s.contains("GT/s")) && p["link_width"].as_u64().is_some(), "{h}\n{ctx}");
            assert_eq!(p["ready_timeout_ms"].as_u64(), Some(7500), "{h}\n{ctx}");
            assert_eq!(h["anomalies"], serde_json::json!([]), "{ctx}");
        }
        eprintln!("{name}: the link after each fault: {}", health.iter().map(|h| h["pcie"].to_string()).collect::<Vec<_>>().join("; "));
    }
    assert_eq!(o.status.code(), Some(0), "{}\n{log}", text(&o));
}

#[test]
fn link_faults_run_clean_multipath_on() {
    link_faults_run_clean("link_faults_run_clean_multipath_on", "on");
}

#[test]
fn link_faults_run_clean_multipath_off() {
    link_faults_run_clean("link_faults_run_clean_multipath_off", "off");
}

/// A dual-port failover run through the real NVMe driver (multipath off: one block device per
/// controller): each cycle the lab's host unplugs one controller (QMP device_del) and plugs
/// it back while both ports write; the runner finds the pulled port again (it comes back as
/// `nvme2n1`, `nvme3n1`: by the namespace's identity plus its PCI function), judges the other
/// port against its baseline and verifies every share through both ports.
#[test]
fn a_port_pull_under_load_leaves_the_other_port_undisturbed() {
    let Some(_boot) = lab_alone("a_port_pull_under_load_leaves_the_other_port_undisturbed") else { return };
    let dir = scratch("dualport-pull");
    // The pulls go through the Quarch module on the guest's ttyS1 (the real driver over the
    // real UART), in front of the simulated drive, whose ground truth scores each cycle too.
    // Neither --sim nor --multipath: the scenario's [lab] table says honest-plp, multipath off.
    let (o, run_dir, rec, ctx) = sim_run(&dir, "lab-dualport-quarch-pull.toml", "", "");
    assert!(String::from_utf8_lossy(&o.stdout).contains("(multipath off, simulated drive"), "{ctx}");
    assert_clean_run(&o, &run_dir, 2, &ctx);
    assert_eq!((rec["cycles"].as_u64(), rec["disagreements"].clone()), (Some(2), serde_json::json!([])), "{ctx}");
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    for call in ["Unplug(A): done", "Plug(A): done", "Unplug(B): done", "Plug(B): done"] {
        assert_eq!(rig.matches(call).count(), 1, "{call}: one controller at a time, by the module's PORT_x\n{ctx}");
    }
    assert!(!rig.contains("UnplugAll"), "a port pull is no power cut:\n{ctx}");
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["findings_per_class"]["port_disturbance"].as_u64().unwrap_or(0), 0, "{ctx}\n{summary}");
    let ports = summary["ports"].as_array().unwrap_or_else(|| panic!("no ports in summary.json\n{ctx}\n{summary}"));
    assert_eq!(ports.len(), 2, "{ctx}\n{summary}");
    for (p, name) in ports.iter().zip(["A", "B"]) {
        assert_eq!(p["name"], name, "{ctx}\n{summary}");
        assert_eq!(p["cycles_faulted"], 1, "port {name} pulled once:\n{ctx}\n{summary}");
        assert_eq!(p["cycles_judged"], 1, "port {name} judged while the other was pulled:\n{ctx}\n{summary}");
        assert_eq!(p["io_errors"], 0, "{ctx}\n{summary}");
        assert_eq!(p["disturbed"], false, "{ctx}\n{summary}");
        // Figures for the lead (and docs/LAB.md): what the surviving port saw.
        eprintln!(
            "port {name} judged: max stall {} ms, throughput {:.2}x, p99 {:.2}x",
            p["max_stall_ms"], p["throughput_ratio"], p["p99_latency_ratio"]
        );
    }
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    // Each pulled controller came back under a new name (measured: nvme2, then nvme3): the
    // runner found it again by the namespace and its PCI function, and said so.
    for (port, bdf) in [("A", "0000:01:00.0"), ("B", "0000:02:00.0")] {
        assert!(
            events
                .lines()
                .any(|l| l.contains("\"note\"") && l.contains(&format!("port {port}: ")) && l.contains("is back as") && l.contains(bdf)),
            "no note of port {port} found again by its PCI function {bdf}:\n{ctx}"
        );
    }
    // The last cycle verifies fully: each port's share through its own port and the other's,
    // so twice the namespace (256 MiB).
    let last = events.lines().rfind(|l| l.contains("\"event\":\"verified\"")).unwrap_or_else(|| panic!("no verify\n{ctx}"));
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    assert_eq!(v["bytes"].as_u64(), Some(2 << 28), "each share read through both ports:\n{last}\n{ctx}");
}

/// Link redundancy through the multipath head: port A's controller unplugged (QMP) and
/// plugged back under writes to the head; every write in flight at the pull completes (the
/// kernel moves it to port B), none fails, the longest gap between completions stays within
/// the lab's stall budget, and the data verifies clean through the head.
#[test]
fn the_multipath_head_rides_through_a_port_pull() {
    let Some(_boot) = lab_alone("the_multipath_head_rides_through_a_port_pull") else { return };
    let dir = scratch("multipath-pull");
    let (o, run_dir) = lab_run(&dir, "lab-multipath-pull.toml", "on");
    let ctx = "lab-multipath-pull.toml (seed 14), multipath on";
    assert_clean_run(&o, &run_dir, 2, ctx);
    let ctx = format!("{ctx}\n{}", text(&o));
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let of = |kind: &str| -> Vec<serde_json::Value> {
        events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    assert!(of("harness_error").is_empty(), "{ctx}");
    for (cut, end) in of("cut_issued").iter().zip(of("cycle_ended")) {
        let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}\n{ctx}"));
        // Every write in flight when port A went completed: none failed.
        assert_eq!(n(&end, "writes_completed"), n(cut, "completions") + n(cut, "in_flight_ops"), "{cut}\n{end}\n{ctx}");
        assert!(n(&end, "max_gap_ns") <= 2_000_000_000, "a stall past the 2 s budget:\n{end}\n{ctx}");
        eprintln!(
            "cycle {}: {} writes in flight at the pull, all completed; longest gap {:.1} ms, longest write {:.1} ms",
            end["cycle"],
            n(cut, "in_flight_ops"),
            n(&end, "max_gap_ns") as f64 / 1e6,
            n(&end, "latency_max_ns") as f64 / 1e6
        );
    }
}

/// `faultline write` while the controller under it is unplugged (QMP device_del) and a probe
/// holding the device open: the write stops and says so, exit 2; the probe records the errno.
fn unplugged_mid_write(test: &str, multipath: &str, dels: &str) -> (Output, String, Scratch) {
    let dir = scratch(test);
    let script = format!(
        r#"faultline lab guest probe "$LAB_NS" --seconds 7 > /tmp/probe.txt 2>&1 &
P=$!
faultline write --target "$LAB_NS" --expect-serial "$LAB_SERIAL" --run-dir /tmp/w --seed 3 --duration-s 7 --queue-depth 32 > /tmp/w.txt 2>&1 &
W=$!
sleep 2
for p in {dels}; do echo "del $p at uptime $(cut -d' ' -f1 /proc/uptime): $(lab_port del $p)"; sleep 1; done
wait $W; echo "write exit $?"
wait $P
cat /tmp/w.txt /tmp/probe.txt
"#
    );
    let (o, log) = exec(&dir, &script, multipath);
    (o, log, dir)
}

#[test]
fn a_write_whose_only_path_is_unplugged_stops_and_says_so() {
    let Some(_boot) = lab("a_write_whose_only_path_is_unplugged_stops_and_says_so") else { return };
    let (o, log, dir) = unplugged_mid_write("unplug-off", "off", "A");
    let ctx = format!("seed 3, multipath off\n{}\nguest:\n{log}\nconsole:\n{}", text(&o), console(&dir));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert!(log.contains("del A at uptime") && log.contains(": ok "), "{ctx}");
    // Linux: a removed disk has capacity 0; writes fail with ENOSPC, reads return 0 bytes.
    assert!(log.contains("write=errno 28"), "{ctx}");
    assert!(log.contains("read=ok(0)"), "{ctx}");
    assert!(log.contains("write exit 2"), "{ctx}");
    assert!(log.contains("the target went away during cycle 1") && log.contains("os error 28"), "{ctx}");
}

#[test]
fn a_multipath_write_survives_one_path_and_stops_when_the_last_goes() {
    let Some(_boot) = lab("a_multipath_write_survives_one_path_and_stops_when_the_last_goes") else { return };
    let (o, log, dir) = unplugged_mid_write("unplug-on", "on", "A B");
    let ctx = format!("seed 3, multipath on\n{}\nguest:\n{log}\nconsole:\n{}", text(&o), console(&dir));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert_eq!(log.matches(": ok ").count(), 2, "both unplugs done:\n{ctx}");
    // The head fails I/O with EIO while it has no path ("no available path - failing I/O"),
    // then is removed: ENOSPC and empty reads, as for a single path. That window lasts tens of
    // milliseconds: the probe's write or its read lands in it, or only the writer's queue does.
    assert!(log.contains("=errno 5 ") || log.contains("(os error 5)"), "no EIO while the head had no path:\n{ctx}");
    assert!(log.contains("write=errno 28"), "{ctx}");
    assert!(log.contains("write exit 2"), "{ctx}");
    assert!(log.contains("the target went away during cycle 1"), "{ctx}");
    // Port A went 2 s in, B a second after A's unplug was done: I/O failed only once B went
    // (both on the guest's uptime clock).
    let uptime = |l: &str, key: &str| l.split(key).nth(1)?.split([' ', ')', ':']).next()?.parse::<f64>().ok();
    let del_b = log.lines().find(|l| l.starts_with("del B at uptime")).and_then(|l| uptime(l, "at uptime ")).expect("del B's uptime");
    let first_error = log
        .lines()
        .filter(|l| l.starts_with("probe ") && l.contains("errno"))
        .filter_map(|l| uptime(l, "(uptime "))
        .fold(f64::MAX, f64::min);
    assert!(first_error >= del_b, "no I/O error while port B was left (first at {first_error} s, B unplugged at {del_b} s):\n{ctx}");
}

/// A child process killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The namespace backed by an NBD export instead of a file (`--nbd SOCK`, QEMU's own NBD
/// client): here qemu-nbd (qemu-utils) serving a sparse image, written and verified through
/// the guest.
#[test]
fn the_namespace_can_be_an_nbd_export() {
    let Some(_boot) = lab("the_namespace_can_be_an_nbd_export") else { return };
    if Command::new("qemu-nbd").arg("--version").output().is_err() {
        skip("the_namespace_can_be_an_nbd_export", "no qemu-nbd (package qemu-utils; .ci/run installs it)");
        return;
    }
    let dir = scratch("nbd");
    let (img, sock) = (dir.join("export.img"), dir.join("nbd.sock"));
    std::fs::File::create(&img).unwrap().set_len(256 << 20).unwrap();
    let server = Child(
        Command::new("qemu-nbd")
            .args(["--persistent", "-f", "raw", "--cache=writeback", "--socket", s(&sock), s(&img)])
            .spawn()
            .expect("start qemu-nbd"),
    );
    let t0 = std::time::Instant::now();
    while !sock.exists() && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let file = dir.join("script.sh");
    std::fs::write(
        &file,
        r#"set -e
faultline write --target "$LAB_NS" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r --seed 5 --writes 10000 --flush-every 128 --queue-depth 32
faultline verify --target "$LAB_NS" --expect-serial "$LAB_SERIAL" --run-dir /tmp/r
"#,
    )
    .unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--run-dir", s(&run_dir), "--nbd", s(&sock)]);
    drop(server);
    let log = std::fs::read_to_string(run_dir.join("lab/share/lab/guest.log")).unwrap_or_default();
    let ctx = format!("seed 5\n{}\nguest:\n{log}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert!(log.contains("10000 writes (0 failed)") && log.contains("80000 durable") && log.contains("verdict: clean"), "{ctx}");
    // The writes reached the export: the image is no longer all zeroes.
    let data = std::fs::read(&img).unwrap();
    assert!(data.iter().any(|&b| b != 0), "nothing reached the NBD export\n{ctx}");
}

// ---------------------------------------------------------------------------------------------
// Power cuts: the simulated drive over NBD, switched by the Quarch module on the guest's ttyS1
// ---------------------------------------------------------------------------------------------

/// `lab run SCENARIO --sim MODEL`: the output, the run directory, and the lab's reconciliation
/// of the guest's findings with the drive's ground truth (`lab/reconcile.json`). An empty
/// `model` or `multipath` leaves the option out, for the scenario's `[lab]` table to give.
fn sim_run(dir: &Path, scenario: &str, model: &str, multipath: &str) -> (Output, PathBuf, serde_json::Value, String) {
    sim_run_with(dir, scenario, model, multipath, &[])
}

/// [`sim_run`] of 3 cycles, for the power-cut scenarios that ship 5: within the suite's time.
fn power_run(dir: &Path, scenario: &str, model: &str, multipath: &str) -> (Output, PathBuf, serde_json::Value, String) {
    sim_run_with(dir, scenario, model, multipath, &["--cycles", "3"])
}

fn sim_run_with(dir: &Path, scenario: &str, model: &str, multipath: &str, extra: &[&str]) -> (Output, PathBuf, serde_json::Value, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios").join(scenario);
    let run_dir = dir.join("run");
    let mut args = vec!["run", s(&path), "--run-dir", s(&run_dir)];
    args.extend(extra);
    if !model.is_empty() {
        args.extend(["--sim", model]);
    }
    if !multipath.is_empty() {
        args.extend(["--multipath", multipath]);
    }
    let o = lab_cmd(&args);
    let ctx = format!(
        "{scenario} (its seed), --sim {model}, multipath {multipath}\n{}{}\nrig:\n{}\nconsole tail:\n{}",
        said(&o),
        text(&o),
        std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default(),
        console_tail(&run_dir)
    );
    let rec = std::fs::read_to_string(run_dir.join("lab/reconcile.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or_else(|e| panic!("no lab/reconcile.json: {e}\n{ctx}"));
    (o, run_dir, rec, ctx)
}

/// What faultline and the lab said on stderr, without QEMU's and the guest kernel's lines
/// (which a cut prints by the hundred): first in a failure's message, so that a log cut short
/// in the middle still shows why the run ended.
fn said(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.starts_with("qemu-system") && !l.trim_start().starts_with('[')).collect();
    format!("faultline and the lab said:\n{}\n", lines[lines.len().saturating_sub(20)..].join("\n"))
}

fn console_tail(run_dir: &Path) -> String {
    let c = std::fs::read_to_string(run_dir.join("lab/console.log")).unwrap_or_default();
    let lines: Vec<&str> = c.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Every cycle was a power loss through the lab's rig (a cut, or a sag below the drive's
/// detector): the drive went dark and both controllers
/// left, then came back and the device was found again; the reconciliation scored every cycle.
fn assert_power_cycles(run_dir: &Path, rec: &serde_json::Value, cycles: usize, ctx: &str) {
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_else(|e| panic!("no events.jsonl: {e}\n{ctx}"));
    let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
    assert_eq!((of("cut_issued"), of("power_restored"), of("ready"), of("cycle_ended")), (cycles, cycles, cycles, cycles), "{ctx}");
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    // A cut, or a sag or a ramp below the drive's power-fail detector.
    assert_eq!(rig.matches("the drive is dark").count(), cycles, "{ctx}");
    assert_eq!(rig.matches("UnplugAll: done").count(), cycles, "both controllers unplugged at every cut:\n{ctx}");
    assert_eq!(rig.matches("PlugAll: done").count(), cycles, "{ctx}");
    assert_eq!(rec["cycles"], cycles, "every cycle scored against the ground truth:\n{ctx}");
    assert_eq!(rec["disagreements"], serde_json::json!([]), "{ctx}");
    // QEMU keeps no unsafe-shutdown count (docs/LAB.md): pinned, and declared off, not judged.
    assert!(events.contains("health checks off, as the scenario's [health] off declares: unsafe_shutdowns"), "{ctx}");
    let health: Vec<&str> = events.lines().filter(|l| l.contains("\"event\":\"health\"")).collect();
    assert_eq!(health.len(), cycles, "SMART read through the admin ioctl after every cut:\n{ctx}");
    assert!(health.iter().all(|l| l.contains("\"unsafe_shutdowns\":0") && l.contains("\"anomalies\":[]")), "{ctx}");
    // QEMU's controller has no persistent event log (its Get Log Page answers 0x0d with
    // Invalid Field): asked for, found missing, and said so.
    assert!(events.contains("the drive has no persistent event log (log 0x0d)"), "{ctx}");
}

fn score(rec: &serde_json::Value, class: &str, key: &str) -> u64 {
    rec["scores"][class][key].as_u64().unwrap_or(0)
}

/// An honest PLP drive under every shape of the power the lab's hot-plug module makes, on the
/// real NVMe driver (scenarios/lab-power-shapes.toml, one boot): a plain cut held 20 ms; a cut
/// held 200 ms and another before the drive is ready again; a 2 ms glitch the module's engine
/// times. Each shape is in its cycle's events, each cut took the drive dark and both
/// controllers off the bus and back, and the run is clean and agrees with the drive's ground
/// truth in every cycle.
#[test]
fn power_shapes_of_an_honest_plp_drive_are_clean_and_agree_with_its_ground_truth() {
    let Some(_boot) = lab("power_shapes_of_an_honest_plp_drive_are_clean_and_agree_with_its_ground_truth") else { return };
    let dir = scratch("power-shapes-honest-plp");
    let (o, run_dir, rec, ctx) = sim_run(&dir, "lab-power-shapes.toml", "honest-plp", "on");
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    let ev: Vec<serde_json::Value> = std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap_or_else(|e| panic!("no events.jsonl: {e}\n{ctx}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |kind: &str| ev.iter().filter(|e| e["event"] == kind).cloned().collect::<Vec<_>>();
    let started: Vec<(String, u64)> = of("cycle_started")
        .iter()
        .map(|e| (e["fault"].as_str().unwrap_or_default().to_string(), e["off_time_ms"].as_u64().unwrap_or(0)))
        .collect();
    let want = [("power-cut", 20), ("power-cut+1-before-ready", 200), ("power-glitch-2000us", 50)];
    assert_eq!(started, want.map(|(f, ms)| (f.to_string(), ms)), "{ctx}");
    let rc = of("recovery_cut");
    assert_eq!(rc.len(), 1, "{ctx}");
    assert_eq!((rc[0]["cycle"].as_u64(), rc[0]["ready"].as_bool()), (Some(2), Some(false)), "{ctx}");
    let held: Vec<(u64, u64)> =
        of("power_restored").iter().map(|e| (e["cycle"].as_u64().unwrap(), e["off_us"].as_u64().unwrap())).collect();
    assert_eq!(held.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 2, 2, 3], "{ctx}");
    assert!(held[0].1 >= 20_000 && held[1].1 >= 200_000 && held[2].1 >= 200_000, "each cut held its off time: {held:?}\n{ctx}");
    assert_eq!(held[3].1, 2_000, "the glitch: its length, timed by the module\n{ctx}");
    assert_eq!((of("ready").len(), of("cycle_ended").len()), (3, 3), "{ctx}");
    // Four times dark, both controllers off the bus and back: two cuts, a recovery cut, a glitch.
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    assert_eq!(rig.matches("power off: the drive is dark").count(), 4, "{ctx}");
    assert_eq!((rig.matches("UnplugAll: done").count(), rig.matches("PlugAll: done").count()), (4, 4), "{ctx}");
    assert_eq!(rec["cycles"], 3, "every cycle scored against the ground truth:\n{ctx}");
    assert_eq!(rec["disagreements"], serde_json::json!([]), "{ctx}");
    assert_eq!((rec["findings"].as_u64(), rec["truth_extents"].as_u64()), (Some(0), Some(0)), "{ctx}");
    assert!(text(&o).contains("agree, sector by sector, in every one of 3 cycles"), "{ctx}");
    // The summary and the report tell the shapes and the off times apart.
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["faults"]["power-glitch-2000us"]["clean"].as_u64(), Some(1), "{summary}");
    assert_eq!(summary["off_times"]["200"]["cycles"].as_u64(), Some(1), "{summary}");
}

/// OCP PLP-1 on the real NVMe driver (scenarios/lab-plp-1.toml): a normal shutdown unbinds
/// both controllers from the guest's nvme driver (CC.SHN, CSTS.SHST complete), and QEMU's
/// flush at that shutdown reaches the drive over NBD before the power goes; the writer sent
/// no flush, so the run is clean, and the drive's ground truth agrees, only if it did. The
/// abrupt cuts in between owe nothing. Each handshake's time is in its cycle's log.
#[test]
fn plp_1_normal_shutdowns_flush_the_drive_through_the_kernels_cc_shn_and_agree_with_its_ground_truth() {
    let Some(_boot) = lab("plp_1_normal_shutdowns_flush_the_drive_through_the_kernels_cc_shn_and_agree_with_its_ground_truth") else {
        return;
    };
    let dir = scratch("plp-1");
    let (o, run_dir, rec, ctx) = sim_run(&dir, "lab-plp-1.toml", "", "on");
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 4, &ctx);
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let shut: Vec<serde_json::Value> = events
        .lines()
        .filter(|l| l.contains("\"event\":\"controller_log\"") && l.contains("normal shutdown: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(shut.iter().map(|e| e["cycle"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 3], "{ctx}");
    for e in &shut {
        let line = e["lines"].as_array().unwrap().iter().filter_map(|l| l.as_str()).find(|l| l.starts_with("normal shutdown: ")).unwrap();
        // Both controllers of the subsystem (two PCI functions), each unbound in turn.
        assert!(line.contains(" and ") && line.contains("shut down (CC.SHN, CSTS.SHST complete) in "), "{line}\n{ctx}");
        eprintln!("cycle {}: {line}", e["cycle"]);
    }
    // The writer sent no flush: those the drive received are the controllers' shutdowns'.
    let traffic = text(&o);
    let flushes = traffic.split(" flushes,").next().and_then(|t| t.rsplit(' ').next()).and_then(|n| n.parse::<u64>().ok());
    assert!(flushes.is_some_and(|n| n >= 2), "{flushes:?}\n{ctx}");
    assert!(traffic.contains("agree, sector by sector, in every one of 4 cycles"), "{ctx}");
    assert!(rec["truth_extents"].as_u64().is_some(), "{ctx}");
}

/// A faulty drive's power cuts: findings (exit 1), and every sector of `class` the drive's
/// ground truth holds is found as that class, none missed, none false.
fn power_cuts_find_exactly(test: &str, model: &str, multipath: &str, class: &str, why: &str) {
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let (o, run_dir, rec, ctx) = power_run(&dir, "lab-power-cut.toml", model, multipath);
    assert_eq!(o.status.code(), Some(1), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    let injected = score(&rec, class, "injected");
    assert!(injected > 0, "{why}:\n{ctx}");
    assert_eq!(score(&rec, class, "detected"), injected, "{ctx}");
    for k in ["misclassified", "missed", "false_findings"] {
        assert_eq!(score(&rec, class, k), 0, "{k}\n{ctx}");
    }
}

#[test]
fn power_cuts_of_a_rolling_back_drive_find_exactly_its_ground_truth() {
    power_cuts_find_exactly(
        "power_cuts_of_a_rolling_back_drive_find_exactly_its_ground_truth",
        "rollback",
        "off",
        "lost_write",
        "the rollback model rolls back a completed write at every cut",
    );
}

#[test]
fn power_cuts_of_a_tearing_drive_find_exactly_its_ground_truth() {
    power_cuts_find_exactly(
        "power_cuts_of_a_tearing_drive_find_exactly_its_ground_truth",
        "torn-writes",
        "on",
        "torn_write",
        "writes in flight at the drive are torn inside the declared 4 KiB unit",
    );
}

#[test]
fn power_cuts_of_an_honest_volatile_cache_under_the_flush_contract_are_clean() {
    let Some(_boot) = lab("power_cuts_of_an_honest_volatile_cache_under_the_flush_contract_are_clean") else { return };
    let dir = scratch("power-volatile");
    let (o, run_dir, rec, ctx) = power_run(&dir, "lab-power-cut-flush.toml", "honest-volatile", "off");
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    assert!(text(&o).contains("flushes") && !text(&o).contains(" 0 flushes"), "the guest's flushes reach the drive:\n{ctx}");
}

/// The dual-port power cut through the real driver: both ports write their own share, the
/// lab's Quarch module cuts the drive's power (both controllers leave the bus and come back),
/// every share is verified through both ports and SMART read through each controller; the
/// drive rolls back a completed write at every cut, and the guest finds exactly that, through
/// both ports, as the drive's ground truth says.
#[test]
fn dual_port_power_cuts_find_a_rolled_back_write_through_both_ports_as_the_ground_truth_says() {
    let Some(_boot) = lab("dual_port_power_cuts_find_a_rolled_back_write_through_both_ports_as_the_ground_truth_says") else { return };
    let dir = scratch("power-dual-rollback");
    let (o, run_dir, rec, ctx) = sim_run(&dir, "lab-dualport-power-cut.toml", "rollback", "");
    assert_eq!(o.status.code(), Some(1), "the rolled-back writes are findings:\n{ctx}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap_or_else(|e| panic!("no events.jsonl: {e}\n{ctx}"));
    let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
    // Power off hits both ports; power on waits for both; SMART through each controller.
    assert_eq!((of("cut_issued"), of("power_restored"), of("ready"), of("health"), of("cycle_ended")), (3, 3, 6, 6, 3), "{ctx}");
    assert_eq!(of("harness_error"), 0, "{ctx}");
    // Each readiness and each SMART reading names its port: three of each per port.
    for kind in ["ready", "health"] {
        for port in [0, 1] {
            let n =
                events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\"")) && l.contains(&format!("\"port\":{port}"))).count();
            assert_eq!(n, 3, "{kind} events of port {port}:\n{ctx}");
        }
    }
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    assert_eq!(rig.matches("power off: the drive is dark").count(), 3, "{ctx}");
    assert_eq!(rec["cycles"], 3, "every cycle scored against the ground truth:\n{ctx}");
    assert_eq!(rec["disagreements"], serde_json::json!([]), "{ctx}");
    let injected = score(&rec, "lost_write", "injected");
    assert!(injected > 0, "the rollback model rolls back a completed write at every cut:\n{ctx}");
    assert_eq!(score(&rec, "lost_write", "detected"), injected, "{ctx}");
    for k in ["misclassified", "missed", "false_findings"] {
        assert_eq!(score(&rec, "lost_write", k), 0, "{k}\n{ctx}");
    }
    // Each loss is one finding, read through both ports.
    let lost: Vec<&str> = events.lines().filter(|l| l.contains("\"event\":\"finding\"") && l.contains("\"lost_write\"")).collect();
    assert!(
        !lost.is_empty() && lost.iter().all(|l| l.contains("read through ports A and B") || l.contains("read through ports B and A")),
        "{ctx}"
    );
}

/// QEMU 7.2's emulated NVMe controller drops the FUA bit of a Write: the drive gets a plain
/// write, caches it and loses it at the cut. faultline in the guest reports those writes lost
/// (rightly: the guest's FUA promise was broken), the drive's ground truth says the drive kept
/// its own (rightly), and the lab names the layer between, with the evidence. Pinned so that a
/// QEMU that honours FUA shows here.
#[test]
fn fua_writes_are_lost_because_the_emulated_controller_drops_the_fua_bit() {
    let Some(_boot) = lab("fua_writes_are_lost_because_the_emulated_controller_drops_the_fua_bit") else { return };
    let dir = scratch("power-fua");
    // Half the writes with FUA and a flush every 256 writes (the scenario: 10%, every 64), so
    // that every cut finds FUA writes the drive holds only in its cache: with the scenario's
    // own mix, one CI run's 3 cuts found none unflushed (no finding, the drive's truth empty
    // too) and the test failed.
    let mix = ["--cycles", "3", "--set", "workload.flush.fua_percent=50", "--set", "workload.flush.every_writes=256"];
    let (o, run_dir, rec, ctx) = sim_run_with(&dir, "lab-power-cut-fua.toml", "honest-volatile", "off", &mix);
    assert_eq!(o.status.code(), Some(1), "the guest's FUA writes were lost: findings\n{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    assert!(text(&o).contains("writes (0 with FUA"), "the drive received no FUA write:\n{ctx}");
    let explained = rec["explained"].as_array().cloned().unwrap_or_default();
    assert!(!explained.is_empty(), "{ctx}");
    assert!(explained.iter().all(|e| e.as_str().unwrap().contains("the emulated NVMe controller dropped the FUA bit")), "{ctx}");
    assert_eq!(rec["truth_extents"], 0, "the drive broke no promise of its own:\n{ctx}");
}

/// A power-cut run through a USB board on the guest's own bus (`scenario`'s `[lab] usb`): the
/// board came up (`usb.log`), `faultline controller list` named it through sysfs (`tty_line`)
/// and through the libusb built into the binary (`usb_line`), its `identify` and `status`
/// answered through faultline's driver (`status`), and every cut went through it; the
/// rolling-back drive's losses are found exactly as its ground truth says. Returns the
/// board's log.
fn power_cuts_through_a_usb_board(test: &str, scenario: &str, tty_line: &str, usb_line: &str, status: &str) -> Option<String> {
    let _boot = lab(test)?;
    let dir = scratch(test);
    let (o, run_dir, rec, ctx) = sim_run(&dir, scenario, "", "");
    let share = run_dir.join("lab/share/lab");
    let usb = std::fs::read_to_string(share.join("usb.log")).unwrap_or_default();
    let list = std::fs::read_to_string(share.join("controllers.txt")).unwrap_or_default();
    let ctx = format!("{ctx}\nusb.log:\n{usb}\ncontrollers.txt:\n{list}");
    assert!(usb.contains(" on the bus as "), "{ctx}");
    assert!(list.contains(tty_line), "the tty, found through sysfs:\n{ctx}");
    assert!(list.lines().any(|l| l.contains(usb_line)), "the device, found through libusb:\n{ctx}");
    assert!(list.contains(status), "{ctx}");
    assert_eq!(o.status.code(), Some(1), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    let injected = score(&rec, "lost_write", "injected");
    assert!(injected > 0, "the rollback model rolls back a completed write at every cut:\n{ctx}");
    assert_eq!(score(&rec, "lost_write", "detected"), injected, "{ctx}");
    for k in ["misclassified", "missed", "false_findings"] {
        assert_eq!(score(&rec, "lost_write", k), 0, "{k}\n{ctx}");
    }
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    Some(format!("{usb}\nrig.log:\n{rig}"))
}

/// A Numato relay board (`[lab] usb = "numato"`: a CDC-ACM gadget on dummy_hcd with Numato's
/// ids), bound by the guest's cdc-acm as /dev/ttyACM0; its relay switched off, then on, and
/// read back at each cut.
#[test]
fn power_cuts_through_a_numato_board_on_the_guests_usb_bus_find_exactly_the_ground_truth() {
    power_cuts_through_a_usb_board(
        "power_cuts_through_a_numato_board_on_the_guests_usb_bus_find_exactly_the_ground_truth",
        "lab-power-cut-numato.toml",
        "/dev/ttyACM0  2a19:0c05  Numato Lab 8 Channel USB Relay Module  serial FLNUMATO0001  -> numato+serial:///dev/ttyACM0?relay=0",
        "2a19:0c05 bus 1 address 2  Numato Lab 8 Channel USB Relay Module  serial FLNUMATO0001",
        "numato+serial:///dev/ttyACM0?relay=0 (Numato relay, firmware 00000008)\ncontroller: numato+serial:///dev/ttyACM0?relay=0\ncapabilities: state readback yes, voltage readback no, acknowledges commands yes\nstate: on",
    );
}

/// An LCUS relay board (`[lab] usb = "lcus"`: a CH340 made with FunctionFS), which the
/// kernel's own ch341 driver probes with its vendor requests and binds as /dev/ttyUSB0; the
/// board acknowledges nothing, so each cut is confirmed by the drive's controllers leaving.
#[test]
fn power_cuts_through_an_lcus_board_on_the_guests_usb_bus_find_exactly_the_ground_truth() {
    let Some(usb) = power_cuts_through_a_usb_board(
        "power_cuts_through_an_lcus_board_on_the_guests_usb_bus_find_exactly_the_ground_truth",
        "lab-power-cut-lcus.toml",
        "/dev/ttyUSB0  1a86:7523  USB Serial  ",
        "1a86:7523 bus 1 address 2  USB Serial",
        "acknowledges commands no\nnote: this switch cannot confirm a cut",
    ) else {
        return;
    };
    // ch341's probe: the chip version read, the serial init, the divisor and line control.
    for req in ["control c0 5f value 0000 index 0000 length 2: Ok(2)", "control 40 a1 ", "control 40 9a value 1312 "] {
        assert!(usb.contains(req), "{req}:\n{usb}");
    }
}

/// A Quarch power module on USB (`[lab] usb = "quarch"`: 16D0:0449 made with FunctionFS, at
/// full speed with 64-byte bulk endpoints, bound by no kernel driver), reached through the
/// libusb in the binary by its USB serial number, locked into USB mode, and each cut switched
/// and read back in 64-byte packets.
#[test]
fn power_cuts_through_a_quarch_module_on_the_guests_usb_bus_find_exactly_the_ground_truth() {
    let Some(usb) = power_cuts_through_a_usb_board(
        "power_cuts_through_a_quarch_module_on_the_guests_usb_bus_find_exactly_the_ground_truth",
        "lab-power-cut-quarch-usb.toml",
        "USB controllers:\n  16d0:0449 bus 1 address 2  Programmable Power Module  serial QTL1999-01-001  -> quarch+usb://QTL1999-01-001",
        "16d0:0449 bus 1 address 2  Programmable Power Module  serial QTL1999-01-001",
        "quarch+usb://QTL1999-01-001 (Power module)\nFamily: Torridon System\nName: Programmable Power Module\nPart#: QTL1999-01\nProcessor: QTL1159-01,4.000\nSerial#: QTL1999-01-001\ncontroller: quarch+usb://QTL1999-01-001\ncapabilities: state readback yes, voltage readback yes, acknowledges commands yes\nstate: on",
    ) else {
        return;
    };
    // The endpoints as dummy_hcd gave them (the command endpoint's IN twin found), the
    // USB-mode lock taken by every open (after the unlock that frees a module left locked),
    // and every packet a command or the lock.
    assert!(usb.contains("quarch command endpoint ep1 0x02, replies on ep5 0x82"), "{usb}");
    assert!(usb.contains("quarch USB mode unlocked\nlab usb: quarch USB mode locked"), "{usb}");
    assert!(!usb.contains("quarch dropped"), "{usb}");
    // The sag and the ramp, over USB, felt by the drive: 9.5 V trips its detector, and so
    // does the ramp's second step (9.6 V); the rail put back each time.
    for line in [
        "12V rail at 9500 mV: its power-fail detector tripped: the drive is dark",
        "12V rail at 9600 mV: its power-fail detector tripped: the drive is dark",
    ] {
        assert!(usb.contains(line), "{line}:\n{usb}");
    }
    assert_eq!(usb.matches("12V rail at 12000 mV: the drive is back from its media").count(), 2, "{usb}");
    // The ramp's first step (10.8 V) is at the detector's threshold, not below: ridden through.
    assert_eq!(usb.matches("rides through").count(), 1, "{usb}");
    assert!(usb.contains("12V rail at 10800 mV: the drive rides through"), "{usb}");
}

/// The same module's sag and ramp on a drive whose power-fail detector trips late (`--sim
/// pfail-misses-sag`: at 9 V, under its electronics' 10 V brown-out), through the real NVMe
/// driver: the sag to 9.5 V never takes the drive away, yet the writes in flight land with a
/// bit flipped and complete as good; the ramp browns any in flight on its way down (9.6 V)
/// before the detector cuts (8.4 V). The plain cut finds nothing. Every corrupt sector the drive's
/// ground truth holds is found as `corruption`, none missed, none false.
#[test]
fn a_sag_through_the_quarch_module_on_usb_finds_a_late_power_fail_detector_as_the_ground_truth_says() {
    let test = "a_sag_through_the_quarch_module_on_usb_finds_a_late_power_fail_detector_as_the_ground_truth_says";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    // The writer stops submitting when the fault fires, so the sag browns what is still in
    // flight when the rail gets there: the module's read-back and set, two USB round trips
    // of ~17 ms, must come before the drive's queue drains. At the lab drive's default 500 µs
    // an operation its 32 writes drain in 16 ms, and one CI run's sag found none in flight
    // (clean, and the truth agreed): a drive of 2 ms an operation holds them 64 ms.
    let slower = ["--sim-service-us", "2000"];
    let (o, run_dir, rec, ctx) = sim_run_with(&dir, "lab-power-cut-quarch-usb.toml", "pfail-misses-sag", "", &slower);
    assert_eq!(o.status.code(), Some(1), "{ctx}");
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    assert!(rig.contains("12V rail at 9500 mV: the drive rides through"), "the sag never took it away:\n{ctx}");
    assert!(rig.contains("12V rail at 8400 mV: its power-fail detector tripped: the drive is dark"), "{ctx}");
    assert_eq!(rig.matches("the drive is dark").count(), 2, "the cut and the ramp:\n{ctx}");
    let injected = score(&rec, "corruption", "injected");
    assert!(injected > 0, "browned writes:\n{ctx}");
    assert_eq!(score(&rec, "corruption", "detected"), injected, "{ctx}");
    for k in ["misclassified", "missed", "false_findings"] {
        assert_eq!(score(&rec, "corruption", k), 0, "{k}\n{ctx}");
    }
    assert_eq!(rec["disagreements"], serde_json::json!([]), "{ctx}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    let found_in: std::collections::BTreeSet<u64> = events
        .lines()
        .filter(|l| l.contains("\"event\":\"finding\""))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["cycle"].as_u64().unwrap())
        .collect();
    assert!(!found_in.contains(&1), "the plain cut finds nothing: {found_in:?}\n{ctx}");
}

/// A USB HID relay board (`[lab] usb = "hidrelay"`: 16C0:05DF made with FunctionFS, one HID
/// interface), bound first by the guest's usbhid as on a desk (hid-generic, hidraw0), which
/// faultline's driver detaches through libusb; relay 1 switched with SET_REPORT and read back
/// with GET_REPORT at each cut, every request answered by the gadget's firmware.
#[test]
fn power_cuts_through_a_hid_relay_on_the_guests_usb_bus_find_exactly_the_ground_truth() {
    let Some(usb) = power_cuts_through_a_usb_board(
        "power_cuts_through_a_hid_relay_on_the_guests_usb_bus_find_exactly_the_ground_truth",
        "lab-power-cut-hidrelay.toml",
        "USB controllers:\n  16c0:05df bus 1 address 2  USBRelay2  board id FLHID  -> hidrelay+usb://FLHID?relay=N",
        "16c0:05df bus 1 address 2  USBRelay2  board id FLHID",
        "hidrelay+usb://FLHID?relay=1 (USB HID relay, relay bitmask 0b00000001)\ncontroller: hidrelay+usb://FLHID?relay=1\ncapabilities: state readback yes, voltage readback no, acknowledges commands yes\nstate: on",
    ) else {
        return;
    };
    // usbhid had it first: it asked for the report descriptor and set the idle rate.
    assert!(usb.contains("its interface bound by usbhid"), "{usb}");
    assert!(usb.contains("control 81 06 value 2200 length 22 (report descriptor): Ok(22)"), "{usb}");
    // Each cut: relay 1 off, then on, each an output report, each read back.
    assert_eq!(usb.matches("(SET_REPORT, output report [fd, 01, 00, 00, 00, 00, 00, 00]): Ok(8); bitmask now 0x00").count(), 3, "{usb}");
    assert_eq!(usb.matches("(SET_REPORT, output report [ff, 01, 00, 00, 00, 00, 00, 00]): Ok(8); bitmask now 0x01").count(), 3, "{usb}");
    assert!(usb.contains("(GET_REPORT): [46, 4c, 48, 49, 44, 00, 00, 00] Ok(8)"), "{usb}");
    assert!(!usb.contains("ignored") && !usb.contains("stalled"), "{usb}");
}

/// A lab exec with a USB board (`--usb BOARD`) whose gadget is unbound from the UDC 0.8 s into
/// a `controller SPEC cycle --off-ms 1500` (the board unplugged during its off time), then
/// bound again: the guest's log, the gadget's (`usb.log`) and a context for failures; the
/// drive went dark once, and came back only at the last `on`. `present` is the path that
/// exists while the board is on the bus.
fn unplugged_mid_command(test: &str, board: &str, spec: &str, present: &str) -> Option<(String, String, String)> {
    let _boot = lab_alone(test)?; // the unplug lands 0.8 s into the cycle: within its 1.5 s off time only on a guest not slowed by another
    let dir = scratch(test);
    let script = format!(
        r#"S='{spec}'
G=/sys/kernel/config/usb_gadget/{board}
echo "address before: $(cat /sys/bus/usb/devices/1-1/devnum)"
( sleep 0.8; echo "" > $G/UDC ) &
faultline controller "$S" cycle --off-ms 1500; echo "cycle rc=$?"
faultline controller "$S" status; echo "status unplugged rc=$?"
ls /sys/class/udc > $G/UDC
i=0; while [ ! -e {present} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
echo "address after: $(cat /sys/bus/usb/devices/1-1/devnum)"
faultline controller list
faultline controller "$S" status; echo "status plugged back rc=$?"
faultline controller "$S" on; echo "on rc=$?"
"#
    );
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--sim", "honest-plp", "--usb", board, "--run-dir", s(&run_dir)]);
    let share = run_dir.join("lab/share/lab");
    let log = std::fs::read_to_string(share.join("guest.log")).unwrap_or_default();
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    let usb = std::fs::read_to_string(share.join("usb.log")).unwrap_or_default();
    let ctx = format!("{}\nguest:\n{log}\nrig:\n{rig}\nusb.log:\n{usb}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    // The drive went dark once, at the cycle's off, and came back only at the last `on`.
    assert_eq!((rig.matches("power off: the drive is dark").count(), rig.matches("power on:").count()), (1, 1), "{ctx}");
    Some((log, usb, ctx))
}

/// The HID relay's USB faults, one boot for all (`/run/lab-usb-fault` naming the request): a
/// SET_REPORT stalled, or left unanswered until the host gives up; a GET_REPORT stalled, or
/// answered with 3 of its 8 bytes (which the open, reading the board's id, meets first). Each
/// fails the `off` within a bounded wait, saying what the board did (before, a board whose id
/// could not be read was listed as `""`, and a short id as its first bytes), never done; the
/// relay reads on afterwards, as no command reached it.
#[test]
fn a_hid_relay_that_stalls_times_out_or_answers_short_is_never_done() {
    let test = "a_hid_relay_that_stalls_times_out_or_answers_short_is_never_done";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let script = r#"P='hidrelay+usb://FLHID?relay=1'
F=/run/lab-usb-fault
for f in "stall SET_REPORT" "timeout SET_REPORT" "stall GET_REPORT" "short GET_REPORT"; do
  echo "$f" > $F
  t0=$(cut -d' ' -f1 /proc/uptime)
  faultline controller "$P" off; echo "$f: off rc=$?"
  echo "$f: took $t0 $(cut -d' ' -f1 /proc/uptime)"
  rm -f $F
  faultline controller "$P" status | grep state; echo "$f: read afterwards"
done
"#;
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--sim", "honest-plp", "--usb", "hidrelay", "--run-dir", s(&run_dir)]);
    let share = run_dir.join("lab/share/lab");
    let log = std::fs::read_to_string(share.join("guest.log")).unwrap_or_default();
    let usb = std::fs::read_to_string(share.join("usb.log")).unwrap_or_default();
    let ctx = format!("{}\nguest:\n{log}\nusb.log:\n{usb}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    let failed = "faultline: error: power switch hidrelay+usb://FLHID?relay=1: ";
    for (f, why) in [
        ("stall SET_REPORT", "relay off: SET_REPORT: Pipe error"),
        ("timeout SET_REPORT", "relay off: SET_REPORT: Operation timed out"),
        ("stall GET_REPORT", "open: no USB HID relay with id \"FLHID\" (found: [\"bus 1 address 2: GET_REPORT: Pipe error\"])"),
        (
            "short GET_REPORT",
            "open: no USB HID relay with id \"FLHID\" (found: [\"bus 1 address 2: GET_REPORT: a short feature report, 3 of 8 bytes: [46, 4c, 48]\"])",
        ),
    ] {
        assert!(log.contains(&format!("{failed}{why}\n{f}: off rc=2")), "{f}:\n{ctx}");
        let took = took_s(&log, f, &ctx);
        assert!(took < 10.0, "{f}: a bounded wait, took {took:.1} s:\n{ctx}");
        assert!(log.contains(&format!("state: on\n{f}: read afterwards")), "{f}:\n{ctx}");
    }
}

/// The Quarch module on USB unplugged mid-command (its gadget unbound during a `cycle`'s off
/// time): libusb's handle is gone, and the `on` fails at once saying so, never done, no retry
/// on a device that left the bus; the drive stays off. Bound again, it enumerates at another
/// bus address and is found again by its USB serial number, reads off and switches on.
#[test]
fn a_quarch_module_on_usb_unplugged_mid_command_fails_at_once_and_is_found_again_by_serial() {
    let test = "a_quarch_module_on_usb_unplugged_mid_command_fails_at_once_and_is_found_again_by_serial";
    let present = "/sys/bus/usb/devices/1-1/devnum";
    let Some((log, _, ctx)) = unplugged_mid_command(test, "quarch", "quarch+usb://QTL1999-01-001", present) else { return };
    assert!(log.contains("address before: 2") && log.contains("off after ") && log.contains("state: off\n"), "{ctx}");
    assert!(
        log.contains("quarch+usb://QTL1999-01-001: RUN:POWer UP: the module is gone: bulk write: NoDevice (the USB device left the bus")
            && !log.contains("gave up after")
            && log.contains("cycle rc=2"),
        "{ctx}"
    );
    assert!(
        log.contains("no Quarch USB module with serial \"QTL1999-01-001\" (found: [])") && log.contains("status unplugged rc=2"),
        "{ctx}"
    );
    assert!(
        log.contains("address after: 3") && log.contains("16d0:0449 bus 1 address 3  Programmable Power Module  serial QTL1999-01-001"),
        "{ctx}"
    );
    assert!(log.contains("state: off\nstatus plugged back rc=0") && log.contains("on rc=0"), "{ctx}");
}

/// How long the command of fault `f` took in a fault script's log: its line `{f}: took T0 T1`
/// (the guest's uptime before and after).
fn took_s(log: &str, f: &str, ctx: &str) -> f64 {
    let took = log.lines().find_map(|l| l.strip_prefix(&format!("{f}: took "))).unwrap_or_else(|| panic!("{f}:\n{ctx}"));
    let t: Vec<f64> = took.split(' ').map(|v| v.parse().unwrap_or_else(|e| panic!("{f}: {v:?}: {e}\n{ctx}"))).collect();
    t[1] - t[0]
}

/// A run whose cut command the Quarch module on USB never answers (`--usb-fault "timeout
/// RUN:POWer DOWN"`: the module switches, unconfirmed): the cycle's fault is a harness error
/// naming the module and each attempt, the stop policy (`on_controller_failure = "stop"`, the
/// default) ends the run after that cycle, the verdict is a harness error (exit 2), never
/// clean, and what the cycle found agrees with the drive's ground truth.
#[test]
fn a_cut_the_quarch_module_on_usb_never_confirms_is_a_harness_error_and_the_policy_stops_the_run() {
    let test = "a_cut_the_quarch_module_on_usb_never_confirms_is_a_harness_error_and_the_policy_stops_the_run";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let (o, run_dir, rec, ctx) = sim_run_with(&dir, "lab-power-cut-quarch-usb.toml", "", "", &["--usb-fault", "timeout RUN:POWer DOWN"]);
    assert_eq!(o.status.code(), Some(2), "{ctx}");
    let out = text(&o);
    let why = "the fault: power switch quarch+usb://QTL1999-01-001: RUN:POWer DOWN: gave up after 3 attempts: no complete reply in time";
    assert!(out.contains(&format!("harness error in cycle 1: {why}")), "{ctx}");
    assert!(out.contains("stopped after 1 of 3 cycles: cycle 1: controller failure (stop.on_controller_failure = \"stop\")"), "{ctx}");
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(run_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["verdict"], "error", "never clean:\n{ctx}\n{summary}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    assert_eq!(events.lines().filter(|l| l.contains("\"event\":\"harness_error\"")).count(), 1, "{ctx}");
    assert_eq!((rec["cycles"].as_u64(), rec["disagreements"].clone()), (Some(1), serde_json::json!([])), "{ctx}");
}

/// The Quarch module's USB faults, one boot for all of them (the gadget's firmware told
/// through `/run/lab-usb-fault` to misbehave on `RUN:POWer DOWN`): a reply that never comes
/// (the module switched, unconfirmed), a short reply (one byte, no prompt), a stalled reply
/// endpoint (the command never reached the module). Each, every time, fails the `off` within
/// a bounded wait (three attempts of 2 s), naming the module and what it did, never done; the
/// state read afterwards is the truth (off after a timeout or a short reply, on after a stall).
/// Each once only: the driver's retry (resync, resend) gets the command done, and the next `on`
/// works, so a stall's halt was cleared.
#[test]
fn a_quarch_module_on_usb_that_times_out_replies_short_or_stalls_is_never_done_and_recovers() {
    let test = "a_quarch_module_on_usb_that_times_out_replies_short_or_stalls_is_never_done_and_recovers";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let script = r#"S='quarch+usb://QTL1999-01-001'
F=/run/lab-usb-fault
for f in timeout short stall; do
  echo "$f RUN:POWer DOWN" > $F
  t0=$(cut -d' ' -f1 /proc/uptime)
  faultline controller "$S" off; echo "$f: off rc=$?"
  echo "$f: took $t0 $(cut -d' ' -f1 /proc/uptime)"
  rm -f $F
  faultline controller "$S" status | grep state; echo "$f: read afterwards"
  faultline controller "$S" on >/dev/null; echo "$f: on rc=$?"
  echo "$f once RUN:POWer DOWN" > $F
  faultline controller "$S" off; echo "$f once: off rc=$?"
  faultline controller "$S" on; echo "$f once: on rc=$?"
done
"#;
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--sim", "honest-plp", "--usb", "quarch", "--run-dir", s(&run_dir)]);
    let share = run_dir.join("lab/share/lab");
    let log = std::fs::read_to_string(share.join("guest.log")).unwrap_or_default();
    let usb = std::fs::read_to_string(share.join("usb.log")).unwrap_or_default();
    let ctx = format!("{}\nguest:\n{log}\nusb.log:\n{usb}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    let failed = "faultline: error: power switch quarch+usb://QTL1999-01-001: RUN:POWer DOWN: gave up after 3 attempts: ";
    for (f, why, after) in [
        ("timeout", "no complete reply in time (got \"\")", "off"),
        ("short", "no complete reply in time (got \"O\")", "off"),
        ("stall", "connection lost: bulk read: Pipe (the module stalled the endpoint; the halt was cleared) (got \"\")", "on"),
    ] {
        assert!(log.contains(&format!("{failed}{why}; {why}; {why}\n{f}: off rc=2")), "{f}:\n{ctx}");
        let took = took_s(&log, f, &ctx);
        assert!(took < 15.0, "{f}: a bounded wait, took {took:.1} s:\n{ctx}");
        assert!(log.contains(&format!("state: {after}\n{f}: read afterwards\n{f}: on rc=0")), "{f}:\n{ctx}");
        assert!(log.contains(&format!("{f} once: off rc=0\nstate: on\n{f} once: on rc=0")), "{f}:\n{ctx}");
    }
    assert_eq!(usb.matches("reply endpoint halted").count(), 4, "{ctx}");
}

/// The Numato board unplugged mid-command (its gadget unbound from the UDC during a `cycle`'s
/// off time): the `on` fails at once, naming the board and saying it is gone, never done; the
/// drive stays off. Plugged back (bound again), it enumerates at another bus address, is found
/// again, reads its relay off, and switches the drive on.
#[test]
fn a_numato_board_unplugged_mid_command_fails_at_once_and_is_found_again_at_another_address() {
    let test = "a_numato_board_unplugged_mid_command_fails_at_once_and_is_found_again_at_another_address";
    let Some((log, usb, ctx)) = unplugged_mid_command(test, "numato", "numato+serial:///dev/ttyACM0?relay=0", "/dev/ttyACM0") else {
        return;
    };
    assert!(log.contains("address before: 2"), "{ctx}");
    assert!(
        log.contains("numato+serial:///dev/ttyACM0?relay=0: relay on 0: the board is gone: its tty hung up") && log.contains("cycle rc=2"),
        "{ctx}"
    );
    assert!(log.contains("cannot open serial port /dev/ttyACM0") && log.contains("status unplugged rc=2"), "{ctx}");
    assert!(
        log.contains("address after: 3") && log.contains("bus 1 address 3  Numato Lab 8 Channel USB Relay Module  serial FLNUMATO0001"),
        "{ctx}"
    );
    assert!(log.contains("state: off\nstatus plugged back rc=0") && log.contains("on rc=0"), "{ctx}");
    assert!(usb.contains("gadget tty hung up"), "{ctx}");
}

/// A Numato board replugged while a process still holds its tty open (as a run that has not
/// noticed the unplug does) comes back under another name, `ttyACM1`. Named by its USB serial
/// (`numato+usb://FLNUMATO0001`), the `cycle`'s `on` finds its tty again by the serial and
/// switches the drive back on; named by the old path, the same replug fails the `on` at once,
/// saying how to name it so that it is found again.
#[test]
fn a_numato_board_named_by_its_usb_serial_is_found_again_under_a_new_tty_name() {
    let test = "a_numato_board_named_by_its_usb_serial_is_found_again_under_a_new_tty_name";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    // The replug lands in the cycle's off time: 0.2 s after the cycle says the relay is off
    // (at most 10 s after it starts). A fixed delay from the start raced the guest's own
    // speed: once, under load, the replug came before the `off` was sent.
    let script = r#"G=/sys/kernel/config/usb_gadget/numato
replug() { : > /tmp/c.out; ( n=0; until grep -q "^off after" /tmp/c.out || [ $n -ge 200 ]; do sleep 0.05; n=$((n+1)); done; sleep 0.2; echo "" > $G/UDC; sleep 0.3; ls /sys/class/udc > $G/UDC ) & R=$!; }
exec 3</dev/ttyACM0
replug
faultline controller 'numato+usb://FLNUMATO0001?relay=0' cycle --off-ms 2500 > /tmp/c.out 2>&1; rc=$?; cat /tmp/c.out; echo "by serial: cycle rc=$rc"
wait $R
echo "ttys: $(ls /dev/ttyACM*)"
exec 4</dev/ttyACM1
replug
faultline controller 'numato+serial:///dev/ttyACM1?relay=0' cycle --off-ms 2500 > /tmp/c.out 2>&1; rc=$?; cat /tmp/c.out; echo "by path: cycle rc=$rc"
wait $R
echo "ttys: $(ls /dev/ttyACM*)"
exec 3<&- 4<&-
faultline controller 'numato+usb://FLNUMATO0001?relay=0' on; echo "on rc=$?"
"#;
    let file = dir.join("script.sh");
    std::fs::write(&file, script).unwrap();
    let run_dir = dir.join("run");
    let o = lab_cmd(&["exec", s(&file), "--sim", "honest-plp", "--usb", "numato", "--run-dir", s(&run_dir)]);
    let log = std::fs::read_to_string(run_dir.join("lab/share/lab/guest.log")).unwrap_or_default();
    let rig = std::fs::read_to_string(run_dir.join("lab/rig.log")).unwrap_or_default();
    let ctx = format!("{}\nguest:\n{log}\nrig:\n{rig}", text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert!(log.contains("state: on\nby serial: cycle rc=0\nttys: /dev/ttyACM1\n"), "{ctx}");
    assert!(
        log.contains("numato+serial:///dev/ttyACM1?relay=0: relay on 0: the board is gone: its tty hung up")
            && log.contains("it is named by its tty's path (numato+usb://SERIAL finds it again by its serial)\nby path: cycle rc=2"),
        "{ctx}"
    );
    assert!(log.contains("state: on\non rc=0"), "{ctx}");
    // Off and on through the serial; off through the path, on again only at the end.
    assert_eq!((rig.matches("power off: the drive is dark").count(), rig.matches("power on:").count()), (2, 2), "{ctx}");
}

/// Refusals that need no boot: each names what was wrong.
#[test]
fn bad_lab_input_is_refused_before_any_boot() {
    let dir = scratch("refusals");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/demo.toml");
    let empty = dir.join("empty-cache");
    std::fs::create_dir_all(&empty).unwrap();
    // No lab in the cache.
    let reset = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/lab-nvme-reset.toml");
    let o = lab_cmd(&["run", s(&reset), "--cache", s(&empty), "--run-dir", s(&dir.join("r1"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not set up") && text(&o).contains("faultline lab setup"), "{}", text(&o));
    // A scenario of the simulated drive (refused whatever the cache holds).
    let o = lab_cmd(&["run", s(&demo), "--run-dir", s(&dir.join("r2"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("simulated drive") && text(&o).contains("demo.toml"), "{}", text(&o));
    // A power fault without the simulated drive (a raw image loses nothing), and a simulated
    // dual-port model (the lab's drive is one drive behind QEMU's two controllers).
    // (lab-power-cut.toml names its model in [lab]; without that table it names none.)
    let cut = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/lab-power-cut.toml");
    let text_of_cut = std::fs::read_to_string(&cut).unwrap();
    let (head, lab_table) = text_of_cut.split_once("\n[lab]\n").expect("lab-power-cut.toml has a [lab] table");
    assert!(lab_table.trim_start().starts_with("sim = "), "{lab_table}");
    let bare = dir.join("lab-power-cut-no-model.toml");
    std::fs::write(&bare, head).unwrap();
    let o = lab_cmd(&["run", s(&bare), "--run-dir", s(&dir.join("r4"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("needs the simulated drive (--sim MODEL, e.g. --sim honest-plp"), "{}", text(&o));
    let o = lab_cmd(&["run", s(&cut), "--sim", "dual-honest", "--run-dir", s(&dir.join("r5"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("dual-port models"), "{}", text(&o));
    // A missing script.
    let o = lab_cmd(&["exec", s(&dir.join("nope.sh")), "--run-dir", s(&dir.join("r3"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("nope.sh"), "{}", text(&o));
    // A USB fault the boards do not know, and one with no board to show it.
    let o = lab_cmd(&["run", s(&cut), "--usb", "quarch", "--usb-fault", "babble", "--run-dir", s(&dir.join("r6"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no USB fault \"babble\" (timeout, short or stall"), "{}", text(&o));
    let o = lab_cmd(&["run", s(&cut), "--usb-fault", "stall", "--run-dir", s(&dir.join("r7"))]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--usb-fault \"stall\": there is no USB board to misbehave"), "{}", text(&o));
}

/// A guest that does not boot in time is the lab's failure (exit 2), with the console's tail.
#[test]
fn a_boot_timeout_is_a_lab_failure_with_the_console_tail() {
    let Some(_boot) = lab("a_boot_timeout_is_a_lab_failure_with_the_console_tail") else { return };
    let dir = scratch("boot-timeout");
    let file = dir.join("script.sh");
    std::fs::write(&file, "true\n").unwrap();
    let o = lab_cmd(&["exec", s(&file), "--run-dir", s(&dir.join("run")), "--boot-timeout-s", "2"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(out.contains("did not boot within 2 s") && out.contains("console.log"), "{out}");
}

/// The two-host arm (scenarios/lab-two-hosts.toml): two guests, each a host whose one NVMe
/// controller's namespace is one port of the same simulated dual-port drive (served over NBD
/// by the coordinator, this process's `faultline run`), each running `faultline agent` on a
/// virtio-serial port (`faultline lab host` is the transport). Each cycle kills one guest's
/// QEMU (the host's power) while the other guest writes through the kernel's NVMe driver, then
/// boots it again by dialling it. Scored against the drive's ground truth per port (per host,
/// `--check-truth`): on an honest drive guest A shuts down cleanly first (its agent drains and
/// flushes before its VM is killed: asked with the Shutdown placement) and guest B loses its
/// power; clean, and the truth agrees. A drive that stalls the surviving port when one port's
/// link drops is found stalling the other host's port, each cycle, and agrees. Then (scenarios/lab-two-hosts-reset.toml) each guest's agent resets its own NVMe
/// controller in turn, found by the agent behind its /dev/nvme0n1, with its writes in flight,
/// while the other guest writes: the reset guest's writes come back without an error, its
/// share verifies, the other guest is judged unaffected, and the truth agrees.
#[test]
fn two_guests_share_one_drive_each_loses_its_power_or_resets_its_controller_in_turn_and_the_other_is_judged_against_the_truth() {
    // Two guests (each a host, `faultline lab host`), one vCPU each ($FAULTLINE_LAB_CPUS below).
    let Some(_boot) = lab_slots(
        "two_guests_share_one_drive_each_loses_its_power_or_resets_its_controller_in_turn_and_the_other_is_judged_against_the_truth",
        SLOTS,
        1,
    ) else {
        return;
    };
    // A host's own controller reset: two boots, no reboot.
    let dir = scratch("two-guests-reset");
    let rd = dir.0.join("run");
    let reset = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/lab-two-hosts-reset.toml");
    let o = Command::new(BIN)
        .env("FAULTLINE_LAB_CPUS", "1")
        .args(["run", reset, "--check-truth", "--run-dir", s(&rd)])
        .output()
        .expect("run faultline run");
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("ground truth: faultline and the drive agree"), "{out}");
    let events: Vec<serde_json::Value> =
        std::fs::read_to_string(rd.join("events.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |k: &str| events.iter().filter(|e| e["event"] == k).count();
    assert_eq!((of("cut_issued"), of("link_restored"), of("verified"), of("cycle_ended")), (2, 2, 2, 2), "{out}");
    let resets: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "controller_log")
        .flat_map(|e| e["lines"].as_array().unwrap().iter().filter_map(|l| l.as_str()))
        .filter(|l| l.contains("nvme-controller-reset of nvme-reset://nvme0"))
        .collect();
    assert_eq!(resets.len(), 2, "{resets:?}");
    assert!(resets[0].starts_with("guest-a: ") && resets[1].starts_with("guest-b: "), "{resets:?}");
    assert!(resets.iter().all(|l| l.contains(" done in ")), "{resets:?}");
    // The reset port's writes in flight came back (requeued by the driver), none failed.
    let faulted: Vec<&serde_json::Value> = events.iter().filter(|e| e["event"] == "port_window" && e["faulted"] == true).collect();
    assert_eq!(faulted.len(), 2, "{out}");
    assert!(faulted.iter().all(|w| w["fault"]["io_errors"] == 0 && w["fault"]["completions"].as_u64() > Some(0)), "{faulted:?}");
    assert_eq!(of("finding"), 0, "{out}");
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/lab-two-hosts.toml");
    // On an honest drive, guest A shuts down cleanly (its agent drains and flushes, then its
    // VM is killed) and guest B loses its power; on a drive that stalls the other port, each
    // guest loses its power in turn.
    let mixed = "fault={kind=\"mixed\",pick=\"sequence\",faults=[{fault={kind=\"host_shutdown\"}},{fault={kind=\"host_power_cut\"}}]}";
    for (model, code, fault) in [("dual-honest", 0, mixed), ("dual-freeze-on-pull", 1, "fault.kind=\"host_power_cut\"")] {
        let dir = scratch(&format!("two-guests-{model}"));
        let rd = dir.0.join("run");
        let kind = fault;
        let o = Command::new(BIN)
            .env("FAULTLINE_LAB_CPUS", "1")
            .args(["run", scenario, "--check-truth", "--model", model, "--set", kind, "--run-dir", s(&rd)])
            .output()
            .expect("run faultline run");
        let out = text(&o);
        assert_eq!(o.status.code(), Some(code), "{model} {fault}: {out}");
        assert!(out.contains("ground truth: faultline and the drive agree"), "{model} {fault}: {out}");
        let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
        let events: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let of = |k: &str| events.iter().filter(|e| e["event"] == k).count();
        assert_eq!((of("cut_issued"), of("ready"), of("verified"), of("cycle_ended")), (2, 2, 2, 2), "{model}: {out}");
        // Each guest booted twice (its first boot, and after its cut), its agent on the
        // guest's own clock.
        let agents: Vec<&str> = events
            .iter()
            .filter_map(|e| e["message"].as_str())
            .filter(|m| m.contains(": agent faultline") && m.contains("clock offset"))
            .collect();
        assert_eq!(agents.len(), 4, "{model}: {agents:?}");
        for host in ["guest-a", "guest-b"] {
            let console = std::fs::read_to_string(rd.join(format!("lab-host-{host}.console.log"))).unwrap_or_default();
            assert!(console.contains("lab-init: booted as a host, nvme0"), "{model} {host}: {console}");
        }
        let asked: Vec<String> = events.iter().filter(|e| e["event"] == "agent_log").map(|e| e.to_string()).collect();
        let first = if fault == mixed { "cut Some(Shutdown" } else { "cut Some(AfterTime" };
        for (cycle, host, placement) in [(1, "guest-a", first), (2, "guest-b", "cut Some(AfterTime")] {
            let want = format!("cycle {cycle} first id");
            assert!(
                asked.iter().any(|l| l.contains(host) && l.contains(&want) && l.contains(placement)),
                "{fault} cycle {cycle}: {asked:?}"
            );
        }
        if code == 0 {
            assert_eq!(of("finding"), 0, "{model} {fault}: {out}");
        }
        if code == 1 {
            let stalls = events
                .iter()
                .filter(|e| e["event"] == "finding" && e["finding"]["class"] == "port_disturbance")
                .filter_map(|e| Some((e["cycle"].as_u64()?, e["finding"]["detail"].as_str()?.to_string())))
                .filter(|(_, d)| d.contains("no write completed for"))
                .collect::<Vec<_>>();
            assert!(stalls.iter().any(|(c, d)| *c == 1 && d.starts_with("port B, while port A was faulted")), "{stalls:?}");
            assert!(stalls.iter().any(|(c, d)| *c == 2 && d.starts_with("port A, while port B was faulted")), "{stalls:?}");
        }
    }
}

/// Deallocates and Write Zeroes through the real NVMe driver to the simulated drive, whose
/// `loses_deallocate` model undoes the latest durable deallocate at each cut: the guest finds
/// every resurrected sector the drive's ground truth holds, and nothing the truth does not
/// (the writes and Write Zeroes around them included).
#[test]
fn deallocates_through_the_nvme_driver_find_exactly_a_drive_that_loses_them() {
    let test = "deallocates_through_the_nvme_driver_find_exactly_a_drive_that_loses_them";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let (o, run_dir, rec, ctx) = power_run(&dir, "lab-trim-power-cut.toml", "loses-deallocate", "off");
    assert_eq!(o.status.code(), Some(1), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    let traffic = text(&o);
    let count =
        |what: &str| traffic.split(&format!(" {what},")).next().and_then(|t| t.rsplit(' ').next()).and_then(|n| n.parse::<u64>().ok());
    assert!(count("trims").is_some_and(|n| n > 0) && count("write zeroes").is_some_and(|n| n > 0), "{ctx}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    assert!(events.contains("deallocated sectors held to read zeros: the namespace's DLFEAT 0x01"), "{ctx}");
    let injected = score(&rec, "resurrection", "injected");
    assert!(injected > 0, "the model undoes a durable deallocate at every cut:\n{ctx}");
    assert_eq!(score(&rec, "resurrection", "detected"), injected, "{ctx}");
    for k in ["misclassified", "missed", "false_findings"] {
        assert_eq!(score(&rec, "resurrection", k), 0, "{k}\n{ctx}");
    }
}

/// Format NVM through the real NVMe driver (scenarios/lab-format-power-cut.toml): every cycle
/// drains, flushes, formats the namespace through the admin passthrough and cuts the power a
/// drawn time after it was sent. On an honest PLP drive the run is clean and agrees with the
/// drive's ground truth, sector by sector, in every cycle; QEMU's controller formats by
/// writing zeroes through to the drive. Where a format cut short leaves QEMU answering reads
/// with Format In Progress, the run formats again before verifying, and says so.
#[test]
fn formats_through_the_nvme_driver_cut_while_running_agree_with_the_ground_truth() {
    let test = "formats_through_the_nvme_driver_cut_while_running_agree_with_the_ground_truth";
    let Some(_boot) = lab(test) else { return };
    let dir = scratch(test);
    let (o, run_dir, rec, ctx) = sim_run_with(&dir, "lab-format-power-cut.toml", "", "", &["--size-mib", "64", "--cycles", "3"]);
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    assert_power_cycles(&run_dir, &rec, 3, &ctx);
    let ledger = String::from_utf8_lossy(&std::fs::read(run_dir.join("ledger.fl")).unwrap()).into_owned();
    assert_eq!(ledger.matches("\"type\":\"format\"").count(), 3, "a format sent in every cycle:\n{ctx}");
    let traffic = text(&o);
    let zeroes = traffic.split(" write zeroes,").next().and_then(|t| t.rsplit(' ').next()).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    assert!(zeroes > 0, "QEMU's format reached the drive as write zeroes:\n{ctx}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    // Every cycle read the whole namespace back after its format.
    assert_eq!(events.matches("\"event\":\"verified\"").count(), 3, "{ctx}");
    assert!(events.lines().filter(|l| l.contains("\"event\":\"verified\"")).all(|l| l.contains("\"bytes\":67108864")), "{ctx}");
    let reformats = ledger.matches("\"type\":\"reformat\"").count();
    assert_eq!(reformats % 2, 0, "each format after a cut short recorded when sent and when done:\n{ctx}");
    assert_eq!(events.matches("formatted again in").count(), reformats / 2, "{ctx}");
    eprintln!("{test}: {} of 3 formats formatted again after the cut", reformats / 2);
}
