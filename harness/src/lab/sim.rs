//! The lab's simulated drive (`faultline lab run|exec|shell --sim MODEL`): faultline's
//! simulated drive, with the fault model named, served over NBD to QEMU as the shared namespace
//! of the two controllers; a Quarch hot-plug module on the guest's second UART that switches
//! it; and the drive's ground truth after each cycle, for the reconciliation.
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
//! matrix does, each sector held to what the host could prove ([`super::reconcile`]).
//!
//! A USB board (`--usb`): its emulator (Numato, LCUS) is wired to the same rig as the Quarch
//! module, on the guest's third UART, which the guest bridges to the board's gadget
//! (`usb/gadget.rs`).

use super::error::{Doing, IoStep};
use super::reconcile::{reconcile, CycleTruth, HostRecord, ReconcileError, Reconciled};
use crate::runner::dut::GroundTruth;
use crate::sim_nbd::{self, Export, Listen, Served};
use faultline_drivers::{PowerCaps, PowerError, PowerState, PowerSwitch};
use faultline_fixtures::emu::{LcusEmu, NumatoEmu, QuarchEmu, QuarchKind, QuarchRig, RigError};
use faultline_fixtures::nbd::NbdEvent;
use faultline_fixtures::{SimConfig, SimDrive, SimPower, TruthClass, TruthContract};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::machine::{CallError, Port, RigCall, RigRequest};
use super::usb::Board;
use crate::scenario::NamedModel;

/// What the simulated drive could not do.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error(
        "--sim {0}: the lab's drive is one simulated drive behind QEMU's two controllers; the dual-port models belong to the in-process dual-port drive"
    )]
    DualModel(String),
    #[error("the ground truth of cycle {0} was taken already")]
    TruthTaken(u32),
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
    #[error("cannot write {what}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

type Result<T, E = SimError> = std::result::Result<T, E>;

/// The drive's sector (the guest's namespace gets 512-byte logical blocks).
pub(crate) const SECTOR: u32 = 512;

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
    /// The guest's workload, where it deallocates or writes zeroes: the drive names each trim
    /// and write zeroes with its id ([`sim_nbd::workload_namer`]), so that its ground truth
    /// orders them with the writes.
    pub workload: Option<crate::workload::Layout>,
}

/// A USB board's emulator (`--usb`).
enum UsbEmu {
    Numato(NumatoEmu),
    Lcus(LcusEmu),
    /// The Quarch module on USB: a second module (a power module) on the same rig, its serial
    /// framing on the guest's third UART, which the gadget's firmware turns into the USB one.
    Quarch(QuarchEmu),
}

/// The simulated drive, its NBD server and its Quarch module, for one machine.
pub struct SimLab {
    drive: SimDrive,
    /// Kept for as long as the machine runs (dropping it stops the server).
    served: Served,
    _quarch: QuarchEmu,
    /// The USB board's emulator (`--usb`), its relay wired as the Quarch module is.
    board: Option<UsbEmu>,
    uart: PathBuf,
    rig: Option<Receiver<RigRequest>>,
    /// The drive's ground truth after each cycle, as the guest asked for it.
    truth: Vec<CycleTruth>,
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
    pub fn start(lab_dir: &Path, sock: &Path, model: NamedModel, drive: DriveSpec, usb: Option<Board>) -> Result<SimLab> {
        let DriveSpec { contract, capacity, atomic, seed, service, workload } = drive;
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
            // What QEMU's namespace declares (DLFEAT 001b, hw/nvme/ns.c), which its DSM keeps
            // only where the drive below reads zeros after a trim (docs/LAB.md).
            dealloc_reads: faultline_drivers::DeallocReads::Zeros,
        };
        let drive = SimDrive::new(cfg);
        let export = Export {
            name: "sim".into(),
            description: format!("faultline lab: simulated drive ({sim_model}, seed {seed})"),
            service_time: service,
        };
        let log_path = lab_dir.join("nbd.log");
        let log = Mutex::new(std::fs::File::create(&log_path).doing(|| format!("cannot create {}", log_path.display()))?);
        let log = Box::new(move |e: &NbdEvent| {
            let _ = writeln!(log.lock().unwrap_or_else(|e| e.into_inner()), "{e}");
        });
        let served = sim_nbd::serve(drive.clone(), export, Listen::Unix(sock), Some(log))
            .doing(|| format!("cannot listen on {}", sock.display()))?;
        if let Some(layout) = workload {
            served.server.name_zeroes(sim_nbd::workload_namer(layout));
        }
        let (tx, rx) = mpsc::channel();
        let rig_path = lab_dir.join("rig.log");
        let rig_log = std::fs::File::create(&rig_path).doing(|| format!("cannot create {}", rig_path.display()))?;
        let rig = LabRig { power: drive.power(), calls: tx, log: RigLog(Arc::new(Mutex::new((rig_log, Instant::now())))) };
        let board = board_emulator(usb, &rig, seed)?;
        let quarch = QuarchEmu::serial_rig(QuarchKind::HotPlug, Box::new(rig), seed)
            .doing(|| "cannot open a pseudo-terminal for the Quarch module".into())?;
        let uart = PathBuf::from(quarch.endpoint());
        Ok(SimLab { drive, served, _quarch: quarch, board, uart, rig: Some(rx), truth: Vec::new(), model: sim_model.to_string() })
    }

    /// What reached the drive, for the console: QEMU's NBD client passes the guest's writes,
    /// FUA bits and flushes on as it got them (or does not: docs/LAB.md).
    pub fn traffic(&self) -> String {
        let st = self.served.server.stats();
        format!(
            "lab: the drive received {} writes ({} with FUA), {} write zeroes, {} trims, {} flushes, {} reads; {} answered with an error (power off)",
            st.writes, st.fua_writes, st.write_zeroes, st.trims, st.flushes, st.reads, st.drive_errors
        )
    }

    /// The NBD socket QEMU connects to (export `sim`).
    pub fn socket(&self) -> &Path {
        match &self.served.bound {
            sim_nbd::Bound::Unix(p) => p,
            sim_nbd::Bound::Tcp(_) => Path::new(""),
        }
    }

    /// The Quarch module's pty, the guest's `/dev/ttyS1`.
    pub fn uart(&self) -> &Path {
        &self.uart
    }

    /// The USB board's emulator's pty (`--usb`), the guest's `/dev/ttyS2`.
    pub fn usb_uart(&self) -> Option<&Path> {
        self.board.as_ref().map(|b| {
            Path::new(match b {
                UsbEmu::Numato(e) => e.path(),
                UsbEmu::Lcus(e) => e.path(),
                UsbEmu::Quarch(e) => e.endpoint(),
            })
        })
    }

    /// The rig's calls, for the machine to carry out (once).
    pub fn take_rig(&mut self) -> Option<Receiver<RigRequest>> {
        self.rig.take()
    }

    /// Takes the drive's ground truth after `cycle`.
    pub fn take_truth(&mut self, cycle: u32) -> Result<()> {
        if self.truth.iter().any(|t| t.cycle == cycle) {
            return Err(SimError::TruthTaken(cycle));
        }
        // Named as the host knows them, the id and the port it went through.
        let mut extents = self.drive.truth();
        // Which torn writes the drive had made durable (read before the ids are renamed).
        let mut durable_torn = std::collections::BTreeSet::new();
        for e in &extents {
            if let Some(w) = e.write_id.filter(|&w| e.class == TruthClass::TornWrite && self.drive.durable_write_at(e.offset) == Some(w)) {
                durable_torn.insert(host_name(w));
            }
        }
        for e in &mut extents {
            if let Some((Some(port), id)) = e.write_id.map(host_name) {
                (e.write_id, e.port) = (Some(id), Some(port));
            }
        }
        let truth = GroundTruth { extents, dead: !self.drive.present(), disturbed: Vec::new() };
        self.truth.push(CycleTruth { cycle, truth, durable_torn });
        Ok(())
    }

    /// Scores what the guest recorded (`checks.jsonl`) against the ground truth taken
    /// ([`super::reconcile`]), writes `truth.json` and `reconcile.json` into `lab_dir`.
    /// `run_dir` is the guest's run, brought back: its ledger says which writes the guest could
    /// prove durable, its workload which it sent with FUA.
    pub fn reconcile(&self, checks: &Path, lab_dir: &Path, run_dir: &Path) -> Result<Reconciled> {
        let text = std::fs::read_to_string(checks).unwrap_or_default();
        let history = crate::ledger::replay(run_dir).ok();
        let durable = |id: u64| history.as_ref().is_some_and(|h| h.is_durable(id));
        let host = history.as_ref().map(|h| HostRecord {
            durable: &durable,
            layout: crate::workload::Layout::new(h.header.workload.clone(), h.header.sector_bytes).ok(),
        });
        let name = checks.display().to_string();
        let r = reconcile(&self.model, &name, &text, &self.truth, host.as_ref(), self.served.server.stats().fua_writes, u64::from(SECTOR))?;
        let truth: Vec<serde_json::Value> =
            self.truth.iter().map(|t| serde_json::json!({ "cycle": t.cycle, "dead": t.truth.dead, "extents": t.truth.extents })).collect();
        write_json(&lab_dir.join("truth.json"), &truth)?;
        write_json(&lab_dir.join("reconcile.json"), &r)?;
        Ok(r)
    }
}

fn write_json(path: &Path, v: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|source| SimError::Json { what: path.display().to_string(), source })?;
    std::fs::write(path, text).doing(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The USB board's emulator (`--usb`), its relay wired to `rig` as the Quarch module is.
fn board_emulator(usb: Option<Board>, rig: &LabRig, seed: u64) -> Result<Option<UsbEmu>> {
    let pty = || "cannot open a pseudo-terminal for the USB board's emulator".to_string();
    Ok(match usb {
        Some(Board::Numato) => Some(UsbEmu::Numato(NumatoEmu::new(vec![(0, rig.clone())], seed).doing(pty)?)),
        // The HID relay's firmware runs in the guest; its relay 1's contact is this
        // emulator's channel 1 (frames in, nothing back).
        Some(Board::Lcus) | Some(Board::Hidrelay) => Some(UsbEmu::Lcus(LcusEmu::new(vec![(1, rig.clone())]).doing(pty)?)),
        Some(Board::Quarch) => Some(UsbEmu::Quarch(QuarchEmu::serial_rig(QuarchKind::Power, Box::new(rig.clone()), seed).doing(pty)?)),
        None => None,
    })
}

/// A write as the host names it (its port, its id): the drive knows a dual-port run's writes as
/// port << 56 | id (`format::claimed_write_id`), a single-port run's by their id.
fn host_name(id: u64) -> (Option<u8>, u64) {
    if id >> 56 != 0 && id < faultline_fixtures::nbd::FOREIGN_WRITE_IDS {
        (Some((id >> 56) as u8), id & ((1 << 56) - 1))
    } else {
        (None, id)
    }
}

/// The lab's drive is one simulated drive behind QEMU's two controllers: a dual-port model
/// (two ports of the in-process drive) has no meaning there.
pub fn refuse_dual(model: NamedModel) -> Result<()> {
    if model.dual_model().is_some() {
        return Err(SimError::DualModel(model.name().to_string()));
    }
    Ok(())
}

/// The module's rig: the simulated drive's power and the machine's controllers. A USB board's
/// relay switches the same rig (as a [`PowerSwitch`]).
#[derive(Clone)]
struct LabRig {
    power: SimPower,
    calls: Sender<RigRequest>,
    log: RigLog,
}

impl LabRig {
    fn call(&self, call: RigCall) -> Result<(), CallError> {
        let (tx, rx) = mpsc::channel();
        self.calls.send((call, tx)).map_err(|_| CallError::Gone)?;
        let r = rx.recv_timeout(CALL_TIMEOUT).map_err(|_| CallError::Late { call, timeout: CALL_TIMEOUT })?;
        match &r {
            Ok(d) => self.log.line(&format!("{call:?}: done in {} ms", d.as_millis())),
            Err(e) => self.log.line(&format!("{call:?}: failed: {e}")),
        }
        r.map(|_| ())
    }
}

impl PowerSwitch for LabRig {
    fn name(&self) -> String {
        "the lab's rig".into()
    }

    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: true, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }

    fn power_off(&mut self) -> Result<(), PowerError> {
        QuarchRig::power_off(self).map_err(|e| PowerError::Failed {
            switch: self.name(),
            command: "power off".into(),
            reason: e.to_string(),
        })
    }

    fn power_on(&mut self) -> Result<(), PowerError> {
        QuarchRig::power_on(self).map_err(|e| PowerError::Failed { switch: self.name(), command: "power on".into(), reason: e.to_string() })
    }

    fn state(&mut self) -> Result<PowerState, PowerError> {
        PowerSwitch::state(&mut self.power)
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

    /// A power module's 12 V rail, felt by the drive: where its power-fail detector trips it
    /// goes dark and its controllers leave the bus; when the rail is back they return.
    fn set_voltage(&mut self, rail: &str, mv: u32) -> Result<(), RigError> {
        if rail != "12V" {
            return Ok(());
        }
        let was = self.powered();
        self.power.set_millivolts(mv);
        match (was, self.powered()) {
            (true, false) => {
                self.log.line(&format!("12V rail at {mv} mV: its power-fail detector tripped: the drive is dark"));
                self.call(RigCall::UnplugAll).map_err(RigError::other)
            }
            (false, true) => {
                self.log.line(&format!("12V rail at {mv} mV: the drive is back from its media"));
                self.call(RigCall::PlugAll).map_err(RigError::other)
            }
            (true, true) => {
                self.log.line(&format!("12V rail at {mv} mV: the drive rides through"));
                Ok(())
            }
            (false, false) => Ok(()),
        }
    }

    /// A glitch shorter than the drive's hold-up is ridden through (its controllers stay);
    /// a longer one takes the rail through every level (a drive whose detector trips late
    /// browns out first), then the power goes and comes back as at a cut.
    fn glitch(&mut self, length: Duration) -> Result<(), RigError> {
        if !self.power.glitch_falls(length) {
            self.log.line(&format!("glitch of {length:?}: the drive rides through on its hold-up"));
            return Ok(());
        }
        QuarchRig::power_off(self)?;
        std::thread::sleep(length);
        QuarchRig::power_on(self)
    }
}
