//! The guest side of the lab (`faultline lab guest ...`, run by the guest's command script):
//! finds the lab drive's namespace and controllers in the guest's sysfs, by the PCI address
//! each port has and the serial both report, and runs a scenario against it.
//!
//! At boot port A's controller is `nvme0` at PCI 0000:01:00.0, port B's `nvme1` at
//! 0000:02:00.0 (the guest's init probes them in turn), so scenarios name them as they are.
//! A scenario's `[target]` is replaced with the lab drive: the multipath head with
//! `--multipath on`, port A's path with `off` (both `/dev/nvme0n1` at boot), and the serial.

use crate::health::{parse_smart, HealthError};
use crate::scenario::{Scenario, Target};
use faultline_drivers::blockdev::{scan_paths, FindError, PathMatch, SysRoots};
use faultline_drivers::nvme::{NvmeAdmin, NvmeError};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{chain, Doing, IoStep};
use super::machine::{Port, PI_NAMESPACES, SERIAL};

/// What the guest side could not do.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error(transparent)]
    Find(#[from] FindError),
    #[error("multipath on, yet {} block devices with the lab's serial: {:?}", .0.len(), .0)]
    NotOneHead(Vec<String>),
    #[error("no block device of the lab drive (serial {SERIAL}) in the guest")]
    NoDrive,
    #[error(
        "{0}: its ports are on hosts of their own (each guest a host, `faultline lab host` its transport): \
         run it with `faultline run {0}`, which stays on this machine as the coordinator and boots the guests"
    )]
    HostsOwnPorts(String),
    #[error("{0}: [target] is the simulated drive, which runs in-process and never touches the lab's NVMe drive")]
    SimTarget(String),
    #[error("cannot open the controller of {dev}")]
    Controller {
        dev: PathBuf,
        #[source]
        source: NvmeError,
    },
    #[error(transparent)]
    Nvme(#[from] NvmeError),
    #[error(transparent)]
    Smart(#[from] HealthError),
    #[error("the host could not take the ground truth: {0}")]
    TruthRefused(String),
    #[error("the host did not answer the ground-truth request of cycle {0} within 60 s")]
    TruthUnanswered(u32),
}

type Result<T, E = GuestError> = std::result::Result<T, E>;

/// The lab drive as the guest sees it.
#[derive(Debug)]
pub struct GuestDrive {
    pub multipath: bool,
    /// Controller names per port (`nvme0`), when the port is plugged.
    pub ctrl: [Option<String>; 2],
    /// The block device a scenario targets.
    pub ns: PathBuf,
    /// Each port's own block device (multipath off only: with it on, the paths are hidden).
    pub ns_port: [Option<PathBuf>; 2],
    /// The namespaces with protection information (`lab --pi-namespace-mib`), in the order
    /// of [`PI_NAMESPACES`], as `ns` is the drive's: the head with multipath on, else port
    /// A's (else B's).
    pub ns_pi: [Option<PathBuf>; PI_NAMESPACES.len()],
}

/// The namespace id of block device `dev` (`/dev/nvme0n1`), from sysfs; 0 when unknown.
fn nsid_of(dev: &Path) -> u32 {
    let name = dev.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    read(&Path::new("/sys/block").join(name).join("nsid")).parse().unwrap_or(0)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// Finds the drive in the running guest's sysfs.
pub fn find() -> Result<GuestDrive> {
    let multipath = read(Path::new("/sys/module/nvme_core/parameters/multipath")) == "Y";
    let mut ctrl = [None, None];
    for e in std::fs::read_dir("/sys/class/nvme").doing(|| "no /sys/class/nvme: is the nvme module loaded?".into())?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let addr = read(&e.path().join("address"));
        for (i, p) in [Port::A, Port::B].into_iter().enumerate() {
            if addr == p.bdf() && read(&e.path().join("serial")) == SERIAL {
                ctrl[i] = Some(name.clone());
            }
        }
    }
    let paths = scan_paths(&SysRoots::system())?;
    let (ours, pi): (Vec<_>, Vec<_>) = paths
        .into_iter()
        .filter(|m| m.identity.serial == SERIAL && m.identity.partition.is_none())
        .partition(|m| !PI_NAMESPACES.iter().any(|p| p.nsid == nsid_of(&m.dev)));
    let per_port = |devs: &[PathMatch]| {
        let mut by = [None, None];
        for m in devs {
            for (i, p) in [Port::A, Port::B].into_iter().enumerate() {
                if m.path.pci_address.as_deref() == Some(p.bdf()) {
                    by[i] = Some(m.dev.clone());
                }
            }
        }
        by
    };
    let ns_port = per_port(&ours);
    let ns = if multipath {
        match &ours[..] {
            [one] => one.dev.clone(),
            _ => return Err(GuestError::NotOneHead(ours.iter().map(|m| m.dev.display().to_string()).collect())),
        }
    } else {
        ns_port[0].clone().or_else(|| ns_port[1].clone()).ok_or(GuestError::NoDrive)?
    };
    let ns_pi = PI_NAMESPACES.map(|p| {
        let these: Vec<PathMatch> = pi.iter().filter(|m| nsid_of(&m.dev) == p.nsid).cloned().collect();
        match (multipath, &these[..]) {
            (true, [one]) => Some(one.dev.clone()),
            (true, _) => None,
            (false, _) => {
                let [a, b] = per_port(&these);
                a.or(b)
            }
        }
    });
    Ok(GuestDrive { multipath, ctrl, ns, ns_port, ns_pi })
}

impl GuestDrive {
    /// Shell assignments (`LAB_NS=/dev/nvme0n1`, ...), one a line.
    pub fn env(&self) -> String {
        let opt = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        let mut s = String::new();
        s += &format!("LAB_SERIAL={SERIAL}\nLAB_MULTIPATH={}\n", if self.multipath { "on" } else { "off" });
        s += &format!("LAB_NS={}\nLAB_NS_A={}\nLAB_NS_B={}\n", self.ns.display(), opt(&self.ns_port[0]), opt(&self.ns_port[1]));
        s += &format!("LAB_CTRL_A={}\nLAB_CTRL_B={}\n", self.ctrl[0].clone().unwrap_or_default(), self.ctrl[1].clone().unwrap_or_default());
        for (p, dev) in PI_NAMESPACES.iter().zip(&self.ns_pi) {
            s += &format!("{}={}\n", p.env, opt(dev));
        }
        s += &format!("LAB_BDF_A={}\nLAB_BDF_B={}\n", Port::A.bdf(), Port::B.bdf());
        s
    }
}

/// Scenario `s` (read from `origin`) made the lab's: its target is the lab drive at `ns` (or the
/// lab drive's generic device it names, `/dev/ngXnY`). Refuses a
/// scenario of the simulated drive (it would not touch the lab).
pub fn lab_scenario(mut s: Scenario, origin: &str, ns: &Path) -> Result<Scenario> {
    if s.target.sim.is_some() && s.ports.iter().any(|p| p.host.is_some()) {
        return Err(GuestError::HostsOwnPorts(origin.to_string()));
    }
    if s.target.sim.is_some() {
        return Err(GuestError::SimTarget(origin.to_string()));
    }
    // The drive's atomic unit is the scenario's to declare (the lab's simulated drive keeps the
    // one declared).
    let atomic_bytes = s.target.atomic_bytes;
    // A scenario aimed at a namespace's generic device (`/dev/ng0n3`: one of the namespaces
    // with protection information, through the passthrough engine) keeps it, held to the lab
    // drive's serial and to the size it gives.
    let generic = s.target.path.clone().filter(|p| p.to_str().is_some_and(|p| p.starts_with("/dev/ng")));
    let size_bytes = generic.as_ref().and(s.target.size_bytes);
    let path = generic.unwrap_or_else(|| ns.to_path_buf());
    s.target = Target { path: Some(path), serial: Some(SERIAL.to_string()), atomic_bytes, size_bytes, ..Target::default() };
    Ok(s)
}

/// The SMART / health log of the controller behind `dev` through faultline's own admin
/// passthrough ([`NvmeAdmin`]) and parser, under nvme-cli's JSON names (counters as decimal
/// strings, as nvme-cli prints its 128-bit ones), plus the controller read.
pub fn smart_json(dev: &Path) -> Result<String> {
    let admin = NvmeAdmin::open_for_block_device(dev).map_err(|source| GuestError::Controller { dev: dev.to_path_buf(), source })?;
    let s = parse_smart(&admin.smart_log()?)?;
    let v = serde_json::json!({
        "controller": admin.controller_name(),
        "critical_warning": s.critical_warning,
        "temperature": s.temperature_k,
        "avail_spare": s.available_spare_pct,
        "spare_thresh": s.spare_threshold_pct,
        "percent_used": s.percentage_used,
        "data_units_read": s.data_units_read.to_string(),
        "data_units_written": s.data_units_written.to_string(),
        "power_cycles": s.power_cycles.to_string(),
        "power_on_hours": s.power_on_hours.to_string(),
        "unsafe_shutdowns": s.unsafe_shutdowns.to_string(),
        "media_errors": s.media_errors.to_string(),
        "num_err_log_entries": s.error_log_entries.to_string(),
    });
    Ok(v.to_string())
}

/// The Identify Controller fields faultline reads through its admin passthrough, under
/// nvme-cli's `id-ctrl -o json` names, and under `ns` the namespace's (`id-ns -o json`).
pub fn identify_json(dev: &Path) -> Result<String> {
    let admin = NvmeAdmin::open_for_block_device(dev).map_err(|source| GuestError::Controller { dev: dev.to_path_buf(), source })?;
    let id = admin.identify()?;
    let nsid = faultline_drivers::nvme::namespace_id(dev, &faultline_drivers::blockdev::SysRoots::system())
        .map_err(|source| GuestError::Controller { dev: dev.to_path_buf(), source })?;
    let n = admin.identify_namespace(nsid)?;
    let ns = serde_json::json!({
        "nsfeat": n.nsfeat, "flbas": n.flbas, "dlfeat": n.dlfeat, "nawun": n.nawun, "nawupf": n.nawupf,
        "nabsn": n.nabsn, "nabo": n.nabo, "nabspf": n.nabspf, "block_bytes": n.block_bytes,
    });
    let v = serde_json::json!({
        "vid": id.vendor_id, "sn": id.serial, "mn": id.model, "fr": id.firmware, "lpa": id.lpa,
        "oncs": id.oncs, "awun": id.awun, "awupf": id.awupf, "ns": ns,
    });
    Ok(v.to_string())
}

/// `O_DIRECT` on x86-64 Linux (the binary reaches the OS through std only).
const O_DIRECT: i32 = 0o40000;

/// Holds `dev` open and writes then reads its first 4 KiB every `interval` for `total`,
/// printing `T_MS write=... read=...` each time the outcome changes: what a device that
/// vanished under an open descriptor answers. The lines go to `out`.
pub fn probe(dev: &Path, total: Duration, interval: Duration, out: &mut dyn std::io::Write) -> Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(O_DIRECT)
        .open(dev)
        .doing(|| format!("cannot open {}", dev.display()))?;
    let mut raw = vec![0u8; 8192];
    let off = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[off..off + 4096];
    let t0 = std::time::Instant::now();
    let outcome = |r: std::io::Result<usize>| match r {
        Ok(n) => format!("ok({n})"),
        Err(e) => format!("errno {} ({})", e.raw_os_error().unwrap_or(0), e.kind()),
    };
    let mut last = String::new();
    while t0.elapsed() < total {
        let w = outcome(f.write_at(buf, 0));
        let r = outcome(f.read_at(buf, 0));
        let now = format!("write={w} read={r}");
        if now != last {
            // The guest's uptime too, to order these lines against other commands'.
            let up = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
            let up = up.split_whitespace().next().unwrap_or("?");
            writeln!(out, "probe {} {} ms (uptime {up} s): {now}", dev.display(), t0.elapsed().as_millis())
                .doing(|| "cannot print".into())?;
            last = now;
        }
        std::thread::sleep(interval);
    }
    writeln!(out, "probe {} {} ms: end ({last})", dev.display(), t0.elapsed().as_millis()).doing(|| "cannot print".into())?;
    Ok(())
}

/// The guest's half of the ground-truth reconciliation (`faultline lab run --sim`): after each
/// cycle's verification it asks the host to take the simulated drive's ground truth
/// (`/share/lab/truth-req`, the cycle's number), waits until it has (before the next cycle
/// writes anything), and appends the cycle's findings, every one seen before or not, to
/// `/share/lab/checks.jsonl` for the host to score against that truth.
pub struct TruthSync {
    dir: PathBuf,
    /// Why a request failed, once: the host then scores nothing of this run.
    failed: bool,
}

impl TruthSync {
    pub fn new(dir: &Path) -> TruthSync {
        TruthSync { dir: dir.to_path_buf(), failed: false }
    }

    fn ask(&self, cycle: u32) -> Result<()> {
        let rep = self.dir.join("truth-rep");
        let _ = std::fs::remove_file(&rep);
        let tmp = self.dir.join("truth-req.tmp");
        std::fs::write(&tmp, format!("{cycle}\n")).doing(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, self.dir.join("truth-req")).doing(|| format!("cannot rename {}", tmp.display()))?;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Ok(r) = std::fs::read_to_string(&rep) {
                let _ = std::fs::remove_file(&rep);
                return match r.trim() {
                    "ok" => Ok(()),
                    other => Err(GuestError::TruthRefused(other.to_string())),
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(GuestError::TruthUnanswered(cycle))
    }
}

impl crate::runner::CycleObserver for TruthSync {
    fn checked(&mut self, check: &crate::runner::CycleCheck<'_>) {
        if self.failed {
            return;
        }
        let line = match self.ask(check.cycle) {
            Ok(()) => serde_json::json!({ "cycle": check.cycle, "findings": check.findings }),
            Err(e) => {
                self.failed = true;
                eprintln!("lab: {}", chain(&e));
                serde_json::json!({ "cycle": check.cycle, "error": chain(&e) })
            }
        };
        use std::io::Write;
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("checks.jsonl"))
            .and_then(|mut f| writeln!(f, "{line}").and_then(|()| f.sync_data()));
        if let Err(e) = r {
            self.failed = true;
            eprintln!("lab: cannot record cycle {}'s findings for the ground-truth check: {e}", check.cycle);
        }
    }
}
