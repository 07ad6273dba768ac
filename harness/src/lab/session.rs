//! One lab machine's host side, around a boot: the run directory, its `lab/` folder and the
//! share prepared, the drive chosen (an image, an NBD export, or the simulated drive with its
//! rig), the guest's command script ([`preamble`]), the boot ([`Prepared::boot`]), and the
//! guest's run directory brought back ([`bring_back`]). [`check_rig`] refuses, before a boot,
//! a scenario whose faults the lab cannot carry out.

use super::error::{Doing, IoStep};
use super::machine::{self, Drive, Hooks, MachineError, Outcome, Spec};
use super::setup::{self, Lab, SetupError};
use super::sim::{self, DriveSpec, SimError, SimLab};
use super::usb::{self, Board};
use crate::scenario::{Fault, NamedModel, Scenario};
use faultline_fixtures::TruthContract;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the lab's power switch is, inside the guest: the simulated drive's Quarch module on the
/// guest's second UART.
pub const LAB_POWER: &str = "quarch+serial:///dev/ttyS1";

/// Why a machine could not be prepared, booted, or a scenario run in it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error("--usb-fault {0:?}: there is no USB board to misbehave (--usb BOARD, or the scenario's [lab] usb)")]
    FaultWithoutBoard(String),
    #[error("--usb {0}: a USB board in the lab switches the simulated drive: it needs --sim MODEL (or the scenario's [lab] sim)")]
    BoardWithoutSim(&'static str),
    #[error("{0} already holds a lab run (its lab/ folder exists): use a new run directory")]
    RunDirTaken(PathBuf),
    #[error("no drive image {path}")]
    NoImage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0}: a power fault in the lab needs the simulated drive (--sim MODEL, e.g. --sim honest-plp, or the scenario's [lab] sim): a raw image or another NBD export lives in the host's page cache and loses nothing"
    )]
    PowerWithoutSim(String),
    #[error("{0}: {LAB_POWER} is the simulated drive's Quarch module, which only `--sim MODEL` puts on the guest's second UART")]
    RigWithoutSim(String),
    #[error(
        "{origin}: controllers.power is {given:?}; the lab's drive is switched by its Quarch module on the guest's second UART: power = \"{LAB_POWER}\"{board}"
    )]
    NotTheLabsSwitch { origin: String, given: String, board: String },
}

type Result<T, E = SessionError> = std::result::Result<T, E>;

/// What backs the namespace.
#[derive(Clone, Debug)]
pub enum DriveChoice {
    /// This raw image file; `None`: a sparse image of `size_mib` made in `RUN_DIR/lab/`.
    File(Option<PathBuf>),
    /// The NBD export on this Unix socket, and its name (`None`: the server's default).
    Nbd(PathBuf, Option<String>),
    /// faultline's simulated drive of this model, completing one operation per `service`
    /// while it has any in flight.
    Sim { model: NamedModel, service: Duration },
}

/// How to prepare one machine (what the command line and the scenario said).
#[derive(Clone, Debug)]
pub struct MachineOpts {
    pub cache: PathBuf,
    /// The faultline binary to put in the guest.
    pub faultline: PathBuf,
    pub multipath: bool,
    /// The guest's virtual CPUs.
    pub cpus: u8,
    pub run_dir: PathBuf,
    pub drive: DriveChoice,
    pub usb: Option<Board>,
    /// A fault line the board's firmware takes (`usb::fault`).
    pub usb_fault: Option<String>,
    /// Size of the image made, or of the simulated drive.
    pub size_mib: u64,
    /// Namespaces with protection information, each of this many MiB of data
    /// (`RUN_DIR/lab/piN.img`, [`machine::PI_NAMESPACES`]).
    pub pi_mib: Option<u64>,
    pub boot_timeout: Duration,
    pub timeout: Duration,
}

/// What the scenario says of the simulated drive: its contract, atomic unit, seed.
#[derive(Clone, Debug)]
pub struct SimFromScenario {
    pub contract: TruthContract,
    pub atomic: u32,
    pub seed: u64,
    /// The guest's workload, where it deallocates or writes zeroes (see `lab::sim::DriveSpec`).
    pub workload: Option<crate::workload::WorkloadSpec>,
}

impl Default for SimFromScenario {
    fn default() -> Self {
        SimFromScenario { contract: TruthContract::Plp, atomic: 512, seed: 1, workload: None }
    }
}

/// A machine's host side, prepared: the lab cache (with the faultline binary in it), the run
/// directory, its `lab/` folder and the share.
pub struct Prepared {
    pub lab: Lab,
    pub dir: PathBuf,
    pub lab_dir: PathBuf,
    pub share: PathBuf,
    pub drive: Drive,
    /// The simulated drive (`--sim`).
    pub sim: Option<SimLab>,
    /// Whether the guest's faultline binary was refreshed (it changed since the last boot).
    pub refreshed: bool,
    /// Where the machine's unix sockets go (removed with it).
    socks: tempfile::TempDir,
    /// The protection-information namespaces' images (`--pi-namespace-mib`).
    pub pi_drives: Vec<PathBuf>,
}

/// Refuses a USB board or fault that cannot be had, and a dual-port model.
fn check_opts(m: &MachineOpts) -> Result<()> {
    if let (Some(f), None) = (&m.usb_fault, m.usb) {
        return Err(SessionError::FaultWithoutBoard(f.clone()));
    }
    let sim = match &m.drive {
        DriveChoice::Sim { model, .. } => Some(*model),
        _ => None,
    };
    if let (Some(b), None) = (m.usb, sim) {
        return Err(SessionError::BoardWithoutSim(b.name()));
    }
    if let Some(model) = sim {
        sim::refuse_dual(model)?;
    }
    Ok(())
}

/// Prepares a machine: the cache located (the guest's faultline refreshed), the run directory
/// made, the drive set up.
pub fn prepare(m: &MachineOpts, from: SimFromScenario) -> Result<Prepared> {
    check_opts(m)?;
    let lab = setup::locate(&m.cache)?;
    let refreshed = setup::refresh_faultline(&m.cache, &lab, &m.faultline)?;
    let dir = m.run_dir.clone();
    let lab_dir = dir.join("lab");
    if lab_dir.exists() {
        return Err(SessionError::RunDirTaken(dir));
    }
    let share = lab_dir.join("share");
    std::fs::create_dir_all(share.join("lab")).doing(|| format!("cannot create {}", share.display()))?;
    let lab_dir = std::fs::canonicalize(&lab_dir).doing(|| format!("cannot resolve {}", lab_dir.display()))?;
    let share = lab_dir.join("share");
    let socks =
        tempfile::Builder::new().prefix("faultline-lab-").tempdir().doing(|| "cannot make a directory for the lab's sockets".into())?;
    let sim = match &m.drive {
        DriveChoice::Sim { model, service } => {
            let SimFromScenario { contract, atomic, seed, workload } = from;
            let workload = workload.and_then(|w| crate::workload::Layout::new(w, sim::SECTOR as u64).ok());
            let spec = DriveSpec { contract, capacity: m.size_mib << 20, atomic, seed, service: *service, workload };
            Some(SimLab::start(&lab_dir, &socks.path().join("drive.sock"), *model, spec, m.usb)?)
        }
        _ => None,
    };
    let drive = match (&m.drive, &sim) {
        (_, Some(s)) => Drive::Nbd(s.socket().to_path_buf(), Some("sim".into())),
        (DriveChoice::File(Some(f)), None) => {
            Drive::File(std::fs::canonicalize(f).map_err(|source| SessionError::NoImage { path: f.clone(), source })?)
        }
        (DriveChoice::Nbd(s, export), None) => Drive::Nbd(s.clone(), export.clone()),
        (DriveChoice::File(None) | DriveChoice::Sim { .. }, None) => {
            let img = lab_dir.join("drive.img");
            let f = std::fs::File::create(&img).doing(|| format!("cannot create {}", img.display()))?;
            f.set_len(m.size_mib << 20).doing(|| format!("cannot size {}", img.display()))?;
            Drive::File(img)
        }
    };
    let mut pi_drives = Vec::new();
    for ns in m.pi_mib.map_or(&[][..], |_| &machine::PI_NAMESPACES[..]) {
        let img = lab_dir.join(format!("pi{}.img", ns.nsid));
        let f = std::fs::File::create(&img).doing(|| format!("cannot create {}", img.display()))?;
        let bytes = ns.image_bytes(m.pi_mib.unwrap_or(0) << 20);
        f.set_len(bytes).doing(|| format!("cannot size {}", img.display()))?;
        pi_drives.push(img);
    }
    Ok(Prepared { lab, dir, lab_dir, share, drive, sim, refreshed, socks, pi_drives })
}

/// What every guest command script starts with: the drive's devices as variables, and
/// `lab_port del|add A|B`, which asks the host to unplug (QMP device_del, waiting for
/// DEVICE_DELETED) or plug back (device_add) one controller and prints `ok MS` or `error ...`.
/// `lab_port` is a script on the PATH (`/bin/lab_port`), so that faultline's own `exec:`
/// link controller (`exec:?pull=lab_port del {port}&plug=lab_port add {port}&ports=A,B`,
/// scenarios/lab-dualport-pull.toml) can call it too.
const PREAMBLE: &str = r#"eval "$(faultline lab guest env | sed 's/^/export /')"
cat > /bin/lab_port <<'LAB_PORT'
#!/bin/sh
rm -f /share/lab/rep
echo "$1 $2" > /share/lab/req.tmp && mv /share/lab/req.tmp /share/lab/req
while [ ! -f /share/lab/rep ]; do sleep 0.05; done
r=$(cat /share/lab/rep); rm -f /share/lab/rep; echo "$r"
case "$r" in ok*) exit 0 ;; *) exit 1 ;; esac
LAB_PORT
chmod +x /bin/lab_port
"#;

/// [`PREAMBLE`], and with a USB board the board put on the guest's USB bus (its bridge left
/// running; `lab/usb.log` says how it went), then `faultline controller list` as the guest
/// sees its controllers, and the board's `identify` and `status` through faultline's driver
/// (`lab/controllers.txt`), before anything switches; `usb_fault` written where the board's
/// firmware reads it.
pub fn preamble(usb: Option<Board>, usb_fault: Option<&str>) -> String {
    let mut s = PREAMBLE.to_string();
    if let Some(b) = usb {
        s += &format!(
            r#"faultline lab guest usb {name} > /share/lab/usb.log 2>&1 &
i=0
while [ ! -e {ready} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -e {ready} ] || {{ echo "lab: the USB board {name} did not come up:"; cat /share/lab/usb.log; exit 2; }}
faultline controller list > /share/lab/controllers.txt 2>&1
faultline controller '{power}' identify >> /share/lab/controllers.txt 2>&1
faultline controller '{power}' status >> /share/lab/controllers.txt 2>&1
"#,
            name = b.name(),
            ready = usb::READY,
            power = b.power()
        );
        if let Some(f) = usb_fault {
            s += &format!("echo '{f}' > {}\n", usb::fault::FAULT_FILE);
        }
    }
    s
}

impl Prepared {
    /// Writes the guest's command script (`share/lab/cmd`).
    pub fn write_cmd(&self, script: &str) -> Result<()> {
        let p = self.share.join("lab/cmd");
        std::fs::write(&p, script).doing(|| format!("cannot write {}", p.display()))?;
        Ok(())
    }

    /// Boots the machine and waits for it to power off (the guest's shell on this terminal with
    /// `shell`), the guest command's output copied to `echo` as it grows; the simulated drive's
    /// rig and ground truth served meanwhile.
    pub fn boot(&mut self, m: &MachineOpts, shell: bool, echo: Option<&mut dyn Write>) -> Result<Outcome> {
        let spec = Spec {
            lab: &self.lab,
            lab_dir: &self.lab_dir,
            share: &self.share,
            drive: self.drive.clone(),
            multipath: m.multipath,
            cpus: m.cpus,
            shell,
            uart: self.sim.as_ref().map(|s| s.uart().to_path_buf()),
            usb_uart: self.sim.as_ref().and_then(|s| s.usb_uart()).map(Path::to_path_buf),
            sock_dir: self.socks.path(),
            pi_drives: self.pi_drives.clone(),
        };
        let mut hooks = Hooks::default();
        let mut take_truth;
        if let Some(sim) = self.sim.as_mut() {
            hooks.rig = sim.take_rig();
            take_truth = |cycle| sim.take_truth(cycle).map_err(super::machine::TruthError::from);
            hooks.truth = Some(&mut take_truth);
        }
        Ok(machine::run(&spec, m.boot_timeout, m.timeout, echo, hooks)?)
    }

    /// The console log (`lab/console.log`).
    pub fn console(&self) -> PathBuf {
        self.lab_dir.join("console.log")
    }
}

/// Moves the guest's run directory's files into `dir` (beside `lab/`).
pub fn bring_back(from: &Path, dir: &Path) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(from) else { return Ok(()) };
    for e in rd {
        let e = e.doing(|| format!("cannot read {}", from.display()))?;
        let to = dir.join(e.file_name());
        std::fs::rename(e.path(), &to).doing(|| format!("cannot move {} to {}", e.path().display(), to.display()))?;
    }
    let _ = std::fs::remove_dir(from);
    Ok(())
}

/// Refuses, before a boot, a scenario (read from `origin`) whose faults the lab cannot carry
/// out: a power fault without the simulated drive (`sim`), the lab's Quarch module without it,
/// a power switch that is neither the module nor the USB `board`'s.
pub fn check_rig(s: &Scenario, origin: &str, sim: bool, board: Option<Board>) -> Result<()> {
    let powered = s.fault.each().iter().any(|f| {
        matches!(
            f,
            Fault::PowerCut { .. }
                | Fault::PowerGlitch { .. }
                | Fault::PowerSag { .. }
                | Fault::PowerRamp { .. }
                | Fault::CleanShutdown
                | Fault::NormalShutdown
        )
    });
    if powered && !sim {
        return Err(SessionError::PowerWithoutSim(origin.to_string()));
    }
    let rigged = [&s.controllers.power, &s.controllers.link].iter().any(|c| c.as_deref() == Some(LAB_POWER));
    if rigged && !sim {
        return Err(SessionError::RigWithoutSim(origin.to_string()));
    }
    let board_power = board.map(|b| b.power());
    let power = s.controllers.power.as_deref();
    if powered && power != Some(LAB_POWER) && power != board_power {
        let board = board_power.map_or(String::new(), |p| format!(", or its USB board: power = \"{p}\""));
        let given = power.unwrap_or("not given").to_string();
        return Err(SessionError::NotTheLabsSwitch { origin: origin.to_string(), given, board });
    }
    Ok(())
}
