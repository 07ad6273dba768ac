//! The lab's simulated drive (`faultline lab run|exec|shell --sim MODEL`): faultline's
//! simulated drive, with the fault model named, served over NBD to QEMU as the shared namespace
//! of the two controllers; a Quarch hot-plug module on the guest's second UART that switches
//! it; and the reconciliation of the guest's findings with the drive's ground truth.
//!
//! Power, as a drive loses it: at `RUN:POWer DOWN` the simulated drive goes dark first (what its
//! model keeps of its volatile cache is all that survives, every operation in flight and every
//! later one fails), then both controllers leave the bus (QMP `device_del`, waiting for each to
//! be gone). The order matters: an orderly unplug makes the guest shut each controller down,
//! and QEMU then flushes the namespace, a flush a dark drive must fail rather than honour. At
//! `RUN:POWer UP` the drive comes back from its media, then both controllers are plugged in
//! again and the guest enumerates them (under new names, in either order). `SIGnal:PORT_A` /
//! `PORT_B` unplug one controller and leave the other alone.
//!
//! Ground truth: after each cycle's verification the guest (`lab guest run --truth`) asks for
//! the drive's ground truth and waits; the host takes it then, before the next cycle writes
//! anything, and scores the cycle's findings against it sector by sector, as the detection
//! matrix does ([`score_cycle`]).

use anyhow::{bail, Context, Result};
use faultline::runner::dut::GroundTruth;
use faultline::runner::CycleCheck;
use faultline::selftest::{score_cycle, ClassScore};
use faultline::verify::{Finding, FindingClass};
use faultline_drivers::{PowerState, PowerSwitch};
use faultline_fixtures::emu::{QuarchEmu, QuarchKind, QuarchRig, RigError};
use faultline_fixtures::nbd::{NbdConfig, NbdServer};
use faultline_fixtures::{SimConfig, SimDrive, SimPower, TruthClass, TruthContract, TruthExtent};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::machine::{Port, RigCall, RigRequest};
use faultline::scenario::NamedModel;

/// The drive's sector (the guest's namespace gets 512-byte logical blocks).
const SECTOR: u32 = 512;

/// How long a rig call may take (two hot-unplugs under TCG take about a second).
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// What the simulated drive is besides its model.
pub struct DriveSpec {
    /// The promise its ground truth holds it to (the scenario's contract).
    pub contract: TruthContract,
    pub capacity: u64,
    /// Its atomic write unit: the scenario's `target.atomic_bytes`, else one sector, which is
    /// what QEMU's emulated controller advertises (AWUPF 0) and so what faultline in the
    /// guest holds the drive to.
    pub atomic: u32,
    pub seed: u64,
    /// One completion per this while operations are in flight.
    pub service: Duration,
}

/// The simulated drive, its NBD server and its Quarch module, for one machine.
pub struct SimLab {
    drive: SimDrive,
    /// Kept for as long as the machine runs (dropping it stops the server).
    server: NbdServer,
    _quarch: QuarchEmu,
    sock: PathBuf,
    uart: PathBuf,
    rig: Option<Receiver<RigRequest>>,
    /// The drive's ground truth after each cycle, as the guest asked for it.
    truth: Vec<(u32, GroundTruth)>,
    pub model: String,
}

/// Appends timed lines to `lab/rig.log`.
#[derive(Clone)]
struct RigLog(Arc<Mutex<(std::fs::File, Instant)>>);

impl RigLog {
    fn line(&self, s: &str) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ms = g.1.elapsed().as_millis();
        let _ = writeln!(g.0, "{ms:>8} ms  {s}");
    }
}

impl SimLab {
    /// Starts the drive (`model`, as `drive` says) on the unix socket `sock` (its logs in
    /// `lab_dir`), and its Quarch module on a new pty.
    pub fn start(lab_dir: &Path, sock: &Path, model: NamedModel, drive: DriveSpec) -> Result<SimLab> {
        let DriveSpec { contract, capacity, atomic, seed, service } = drive;
        refuse_dual(model)?;
        let sim_model = model.sim_model();
        let cfg = SimConfig {
            capacity_bytes: capacity,
            sector_bytes: SECTOR,
            atomic_bytes: atomic,
            queue_depth: 64,
            seed,
            model: sim_model.fault_model(),
            contract,
        };
        let drive = SimDrive::new(cfg);
        let nbd = NbdConfig {
            export_name: "sim".into(),
            description: format!("faultline lab: simulated drive ({sim_model}, seed {seed})"),
            service_time: service,
        };
        let mut server = NbdServer::start(drive.clone(), Box::new(faultline::format::claimed_write_id), nbd);
        let log = std::fs::File::create(lab_dir.join("nbd.log"))?;
        let log = Mutex::new(log);
        server.on_event(move |e| {
            let _ = writeln!(log.lock().unwrap_or_else(|e| e.into_inner()), "{e}");
        });
        let sock = sock.to_path_buf();
        server.listen_unix(&sock).with_context(|| format!("cannot listen on {}", sock.display()))?;
        let (tx, rx) = mpsc::channel();
        let rig_log = RigLog(Arc::new(Mutex::new((std::fs::File::create(lab_dir.join("rig.log"))?, Instant::now()))));
        let rig = LabRig { power: drive.power(), calls: tx, log: rig_log };
        let quarch = QuarchEmu::serial_rig(QuarchKind::HotPlug, Box::new(rig), seed)
            .context("cannot open a pseudo-terminal for the Quarch module")?;
        let uart = PathBuf::from(quarch.endpoint());
        Ok(SimLab { drive, server, _quarch: quarch, sock, uart, rig: Some(rx), truth: Vec::new(), model: sim_model.to_string() })
    }

    /// What reached the drive, for the console: QEMU's NBD client passes the guest's writes,
    /// FUA bits and flushes on as it got them (or does not: docs/LAB.md).
    pub fn traffic(&self) -> String {
        let st = self.server.stats();
        format!(
            "lab: the drive received {} writes ({} with FUA, {} zero-writes), {} flushes, {} reads; {} answered with an error (power off)",
            st.writes, st.fua_writes, st.write_zeroes, st.flushes, st.reads, st.drive_errors
        )
    }

    /// The NBD socket QEMU connects to (export `sim`).
    pub fn socket(&self) -> &Path {
        &self.sock
    }

    /// The Quarch module's pty, the guest's `/dev/ttyS1`.
    pub fn uart(&self) -> &Path {
        &self.uart
    }

    /// The rig's calls, for the machine to carry out (once).
    pub fn take_rig(&mut self) -> Option<Receiver<RigRequest>> {
        self.rig.take()
    }

    /// Takes the drive's ground truth after `cycle`.
    pub fn take_truth(&mut self, cycle: u32) -> Result<()> {
        if self.truth.iter().any(|(c, _)| *c == cycle) {
            bail!("the ground truth of cycle {cycle} was taken already");
        }
        // The drive knows a dual-port run's writes as port << 56 | id (format::claimed_write_id):
        // named as the host knows them, the id and the port it went through.
        let mut extents = self.drive.truth();
        for e in &mut extents {
            if let Some(id) = e.write_id.filter(|&id| id >> 56 != 0 && id < faultline_fixtures::nbd::FOREIGN_WRITE_IDS) {
                (e.write_id, e.port) = (Some(id & ((1 << 56) - 1)), Some((id >> 56) as u8));
            }
        }
        let gt = GroundTruth { extents, dead: !self.drive.present(), disturbed: Vec::new() };
        self.truth.push((cycle, gt));
        Ok(())
    }

    /// Scores what the guest recorded (`checks.jsonl`) against the ground truth taken, writes
    /// `truth.json` and `reconcile.json` into `lab_dir`. `run_dir` is the guest's run, brought
    /// back: its ledger and workload say which writes the guest sent with FUA.
    pub fn reconcile(&self, checks: &Path, lab_dir: &Path, run_dir: &Path) -> Result<Reconciled> {
        let text = std::fs::read_to_string(checks).unwrap_or_default();
        let mut r = Reconciled { model: self.model.clone(), ..Reconciled::default() };
        let history = faultline::ledger::replay(run_dir).ok();
        let fua = FuaCheck::new(history.as_ref(), self.server.stats().fua_writes);
        for (i, line) in text.lines().enumerate() {
            let at = || format!("{}:{}", checks.display(), i + 1);
            let v: serde_json::Value = serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
            let cycle = v["cycle"].as_u64().and_then(|c| u32::try_from(c).ok()).with_context(|| format!("{}: no cycle", at()))?;
            if let Some(e) = v["error"].as_str() {
                r.disagreements.push(format!("cycle {cycle}: not checked: {e}"));
                continue;
            }
            let findings: Vec<Finding> =
                serde_json::from_value(v["findings"].clone()).with_context(|| format!("{}: findings unreadable", at()))?;
            let Some((_, gt)) = self.truth.iter().find(|(c, _)| *c == cycle) else {
                r.disagreements.push(format!("cycle {cycle}: the guest recorded findings, the host took no ground truth"));
                continue;
            };
            r.cycles += 1;
            r.findings += findings.len() as u64;
            r.truth_extents += gt.extents.len() as u64;
            // The drive counts a write durable by its own order (NVMe: a flush covers the
            // commands it completed before the flush was submitted to it); the host can hold
            // it only to what it can prove: a flush it submitted after it saw the write
            // complete. A write the drive completed just before a flush arrived, whose
            // completion reached the guest after it had sent that flush, is durable at the drive
            // and not provably so at the host. A sector the drive lost of such a write, and that
            // faultline did not report (it holds a version the host can demand, or newer), is
            // no finding a host can make: counted apart, not scored. One faultline reported
            // (older than what the host can demand) stays, and scores.
            let gt = match &history {
                Some(h) => {
                    let (kept, apart) = drive_only(gt, &findings, h, u64::from(SECTOR));
                    r.drive_only_lost_sectors += apart;
                    kept
                }
                None => gt.clone(),
            };
            let gt = &gt;
            let check = CycleCheck { cycle, findings: &findings, truth: Some(gt.clone()) };
            let mut mine = BTreeMap::new();
            let problem = score_cycle(&check, u64::from(SECTOR), &mut mine);
            // A sector missed or found as another class: nothing explains that.
            let mut missed = false;
            for (class, c) in mine {
                let e = r.scores.entry(class).or_default();
                e.injected += c.injected;
                e.detected += c.detected;
                e.misclassified += c.misclassified;
                e.missed += c.missed;
                e.false_findings += c.false_findings;
                missed |= c.missed + c.misclassified > 0;
            }
            let Some(problem) = problem else { continue };
            // A dead device the drive's ground truth says was live, where the guest saw the
            // controller back on the bus but not initialised: the lab's QEMU failed.
            if let Some(why) = stuck_controller(&findings, gt).filter(|_| !missed) {
                r.lab_faults.push(format!("cycle {cycle}: {why}"));
                continue;
            }
            // If only false findings are left: are they all writes the guest sent with FUA
            // that reached the drive without it?
            match fua.explain(&findings, gt) {
                Some(why) if !missed => r.explained.push(format!("cycle {cycle}: {why}")),
                _ => r.disagreements.push(problem),
            }
        }
        if r.cycles < self.truth.len() as u32 {
            r.disagreements.push(format!(
                "the host took the ground truth of {} cycles, the guest recorded the findings of {}",
                self.truth.len(),
                r.cycles
            ));
        }
        let truth: Vec<serde_json::Value> =
            self.truth.iter().map(|(c, gt)| serde_json::json!({ "cycle": c, "dead": gt.dead, "extents": gt.extents })).collect();
        std::fs::write(lab_dir.join("truth.json"), serde_json::to_string_pretty(&truth)?)?;
        std::fs::write(lab_dir.join("reconcile.json"), serde_json::to_string_pretty(&r)?)?;
        Ok(r)
    }
}

/// When the cycle's only finding is a dead device, the drive was live, and the guest saw a
/// controller of the drive present but not initialised (QEMU 7.2's emulated controller, after
/// a hot-plug, left its first admin command unanswered: docs/LAB.md), says so.
fn stuck_controller(findings: &[Finding], gt: &GroundTruth) -> Option<String> {
    let [f] = findings else { return None };
    if gt.dead || f.class != FindingClass::DeadDevice {
        return None;
    }
    let seen = f.detail.lines().map(str::trim).find(|l| l.starts_with("controller ") && l.contains("initialisation not finished"))?;
    Some(format!(
        "the guest reported a dead device while the drive was live: {seen}. QEMU's emulated NVMe controller came back on the bus \
         after the plug and did not finish initialising; the lab failed, not the drive (docs/LAB.md)"
    ))
}

/// `gt` less the lost sectors of writes the host could not prove durable that no finding
/// covers, and how many sectors that took out.
fn drive_only(gt: &GroundTruth, findings: &[Finding], h: &faultline::ledger::History, sector: u64) -> (GroundTruth, u64) {
    let covered: std::collections::HashSet<u64> = findings.iter().flat_map(|f| f.offset / sector..(f.offset + f.length) / sector).collect();
    let found = |s: u64| covered.contains(&s);
    let mut kept = GroundTruth { extents: Vec::new(), dead: gt.dead, disturbed: gt.disturbed.clone() };
    let mut apart = 0;
    for t in &gt.extents {
        let unprovable = t.class == TruthClass::LostWrite && t.write_id.is_some_and(|w| !h.is_durable(w));
        if !unprovable {
            kept.extents.push(t.clone());
            continue;
        }
        // Split at the sectors a finding covers: those stay.
        let mut run: Option<(u64, u64)> = None;
        for s in t.offset / sector..(t.offset + t.length) / sector {
            if found(s) {
                run = Some(run.map_or((s, s + 1), |(a, _)| (a, s + 1)));
            } else {
                apart += 1;
                if let Some((a, e)) = run.take() {
                    kept.extents.push(TruthExtent { offset: a * sector, length: (e - a) * sector, ..t.clone() });
                }
            }
        }
        if let Some((a, e)) = run {
            kept.extents.push(TruthExtent { offset: a * sector, length: (e - a) * sector, ..t.clone() });
        }
    }
    (kept, apart)
}

/// The lab's drive is one simulated drive behind QEMU's two controllers: a dual-port model
/// (two ports of the in-process drive) has no meaning there.
pub fn refuse_dual(model: NamedModel) -> Result<()> {
    if model.dual_model().is_some() {
        bail!(
            "--sim {}: the lab's drive is one simulated drive behind QEMU's two controllers; the dual-port models belong to the in-process dual-port drive",
            model.name()
        );
    }
    Ok(())
}

/// The guest's findings scored against the drive's ground truth, per class in sectors.
#[derive(Debug, Default, Serialize)]
pub struct Reconciled {
    pub model: String,
    /// Cycles scored.
    pub cycles: u32,
    /// Findings the guest recorded over those cycles (each cycle's, seen before or not).
    pub findings: u64,
    /// Ground-truth extents over those cycles.
    pub truth_extents: u64,
    pub scores: BTreeMap<&'static str, ClassScore>,
    /// Sectors the drive lost of writes it had made durable by its own order, which the host
    /// could not prove durable (not scored: see [`SimLab::reconcile`]).
    pub drive_only_lost_sectors: u64,
    /// Cycles the lab itself failed (an emulated controller that did not come back), which
    /// say nothing of the drive: the run fails as the lab's failure (exit 2).
    pub lab_faults: Vec<String>,
    /// Each cycle's first disagreement that nothing explains (a sector found as another class,
    /// missed, or a false finding), and anything that kept a cycle from being scored.
    pub disagreements: Vec<String>,
    /// Cycles whose false findings are all explained by a layer between faultline and the
    /// drive (QEMU's emulated controller dropping FUA), with the evidence.
    pub explained: Vec<String>,
}

impl Reconciled {
    /// A table for the console.
    pub fn table(&self) -> String {
        let mut s = format!(
            "lab: ground truth ({}): {} cycles scored, {} findings, {} truth extents\n",
            self.model, self.cycles, self.findings, self.truth_extents
        );
        s += "lab:   class (sectors)     injected  detected  misclassified  missed  false\n";
        for (class, c) in &self.scores {
            s += &format!(
                "lab:   {class:<19} {:>8}  {:>8}  {:>13}  {:>6}  {:>5}\n",
                c.injected, c.detected, c.misclassified, c.missed, c.false_findings
            );
        }
        if self.scores.is_empty() {
            s += "lab:   (nothing injected, nothing found)\n";
        }
        if self.drive_only_lost_sectors > 0 {
            s += &format!(
                "lab:   not scored: {} lost sectors of writes durable by the drive's order only (it completed them before a flush arrived; the guest saw them complete after sending it), which no host can prove, and which hold what the host can demand\n",
                self.drive_only_lost_sectors
            );
        }
        s
    }
}

/// Whether false findings are writes the guest sent with FUA that the drive got without it:
/// the drive, having received a plain write, kept its promise by losing it; the layer between
/// (QEMU 7.2's emulated NVMe controller ignores the FUA bit, docs/LAB.md) broke the guest's.
struct FuaCheck {
    /// The guest's workload, to tell its FUA writes (`None`: no readable run, or the drive did
    /// receive FUA writes, so dropping is not what happened).
    layout: Option<faultline::workload::Layout>,
}

impl FuaCheck {
    fn new(history: Option<&faultline::ledger::History>, fua_received: u64) -> FuaCheck {
        let layout = history
            .filter(|h| fua_received == 0 && h.header.workload.flush.fua_percent > 0)
            .and_then(|h| faultline::workload::Layout::new(h.header.workload.clone(), h.header.sector_bytes).ok());
        FuaCheck { layout }
    }

    /// The explanation when every false finding of a cycle is a FUA write.
    fn explain(&self, findings: &[Finding], gt: &GroundTruth) -> Option<String> {
        let layout = self.layout.as_ref()?;
        let in_truth = |f: &Finding| gt.extents.iter().any(|t| t.offset < f.offset + f.length && f.offset < t.offset + t.length);
        let mut ids = Vec::new();
        for f in findings.iter().filter(|f| !in_truth(f)) {
            match f.expected {
                faultline::verify::Shown::Write { write_id, .. } if layout.plan(write_id).fua => ids.push(write_id),
                _ => return None,
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let shown: Vec<String> = ids.iter().take(5).map(|i| i.to_string()).collect();
        Some(format!(
            "{} false findings, all on writes the guest sent with FUA (write {}{}) and the drive received without it (it received no FUA write at all): the emulated NVMe controller dropped the FUA bit",
            findings.iter().filter(|f| !in_truth(f)).count(),
            shown.join(", "),
            if ids.len() > 5 { ", ..." } else { "" }
        ))
    }
}

/// The module's rig: the simulated drive's power and the machine's controllers.
struct LabRig {
    power: SimPower,
    calls: Sender<RigRequest>,
    log: RigLog,
}

impl LabRig {
    fn call(&self, call: RigCall) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        self.calls.send((call, tx)).map_err(|_| "the lab machine is gone".to_string())?;
        let r = rx.recv_timeout(CALL_TIMEOUT).map_err(|_| format!("the lab machine did not carry out {call:?} within {CALL_TIMEOUT:?}"))?;
        match &r {
            Ok(d) => self.log.line(&format!("{call:?}: done in {} ms", d.as_millis())),
            Err(e) => self.log.line(&format!("{call:?}: failed: {e}")),
        }
        r.map(|_| ())
    }
}

impl QuarchRig for LabRig {
    fn power_off(&mut self) -> Result<(), RigError> {
        // The drive goes dark first, then its controllers leave the bus (see the module doc).
        self.power.power_off()?;
        self.log.line("power off: the drive is dark");
        self.call(RigCall::UnplugAll).map_err(RigError::other)
    }

    fn power_on(&mut self) -> Result<(), RigError> {
        self.power.power_on()?;
        self.log.line("power on: the drive is back from its media");
        self.call(RigCall::PlugAll).map_err(RigError::other)
    }

    fn powered(&mut self) -> bool {
        self.power.state().is_ok_and(|s| s == PowerState::On)
    }

    fn has_ports(&self) -> bool {
        true
    }

    fn pull(&mut self, p: u8) -> Result<(), RigError> {
        self.call(RigCall::Unplug(if p == 0 { Port::A } else { Port::B })).map_err(RigError::other)
    }

    fn plug(&mut self, p: u8) -> Result<(), RigError> {
        self.call(RigCall::Plug(if p == 0 { Port::A } else { Port::B })).map_err(RigError::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline::verify::Shown;
    use faultline_drivers::blockdev::IdleController;

    fn dead(detail: String) -> Finding {
        Finding { class: FindingClass::DeadDevice, offset: 0, length: 0, expected: Shown::Prior, found: Shown::Prior, cycle: 5, detail }
    }

    /// The dead device's detail is the drivers' own text for a path not found: the marker
    /// read here is the one `IdleController` writes.
    #[test]
    fn a_dead_device_with_a_controller_stuck_initialising_on_a_live_drive_is_the_labs_failure() {
        let stuck = IdleController { name: "nvme0".into(), pci_address: Some("0000:01:00.0".into()), state: "connecting".into() };
        let detail =
            format!("the device did not answer a read within 30 s after the fault: the namespace ...:\n  /dev/nvme1n1: ...\n  {stuck}");
        let live = GroundTruth { extents: Vec::new(), dead: false, disturbed: Vec::new() };
        let why = stuck_controller(&[dead(detail.clone())], &live).expect("named");
        assert!(
            why.contains("controller nvme0 pci=0000:01:00.0 is present in state \"connecting\"") && why.contains("the lab failed"),
            "{why}"
        );
        // The drive dark: a dead device is the drive's.
        assert!(stuck_controller(&[dead(detail.clone())], &GroundTruth { dead: true, ..live.clone() }).is_none());
        // No controller seen at all: nothing says the lab failed.
        assert!(stuck_controller(&[dead("no block device matches serial=X".into())], &live).is_none());
        // A controller the kernel gave up on is not "stuck initialising".
        let gone = IdleController { state: "dead".into(), ..stuck };
        assert!(stuck_controller(&[dead(format!("...\n  {gone}"))], &live).is_none());
    }
}
