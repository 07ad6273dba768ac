//! `faultline lab`'s arguments, as clap parses them, and what they become for the library:
//! the machine's options ([`MachineArgs::opts`]), the scenario's `[lab]` needs taken as their
//! defaults ([`take_needs`]), the USB boards with their help text ([`BoardArg`]).

use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand, ValueEnum};
use faultline::lab::machine::{DEFAULT_CPUS, MAX_CPUS};
use faultline::lab::session::{DriveChoice, MachineOpts};
use faultline::lab::usb::{self, Board};
use faultline::scenario::{NamedModel, OnOff, Override, Scenario};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::args::ModelParser;

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub(super) cmd: LabCmd,
}

#[derive(Subcommand)]
pub(super) enum LabCmd {
    /// Fetch QEMU, a Debian kernel, busybox and nvme-cli from Debian's archive into the cache
    /// (nothing is installed) and build the guest's initramfs with this faultline in it.
    /// Idempotent: a second run does nothing unless something changed.
    Setup(SetupArgs),
    /// Boot the lab and run a scenario in the guest against the lab's drive; the run
    /// directory comes back to --run-dir. Exits as `faultline run` does, 2 when the lab failed.
    Run(RunArgs),
    /// Boot the lab and run a shell script in the guest (with LAB_NS, LAB_NS_A, LAB_CTRL_A,
    /// ... set and `lab_port del|add A|B` to unplug or plug back a controller); its output
    /// lands in RUN_DIR/lab/guest.log. Exits 0 when the script did, else 1 (2: the lab failed).
    Exec(ExecArgs),
    /// Boot the lab with the guest's shell on this terminal (`exit` powers it off).
    Shell(MachineArgs),
    /// Become one lab guest that is a host of a run across hosts: QEMU with one NVMe
    /// controller on the NBD export, and the guest's `faultline agent --stdio` on this
    /// process's stdin and stdout (a `[[ports]] transport`; killing it is the host's power cut).
    Host(HostArgs),
    /// Inside the guest only: what the guest's command script calls.
    #[command(hide = true, subcommand)]
    Guest(GuestCmd),
}

#[derive(Args)]
pub(super) struct HostArgs {
    /// The NBD export the guest's NVMe namespace is (`nbd+unix:///A?socket=PATH`, as the
    /// coordinator serves one port of the simulated drive).
    #[arg(long)]
    pub(super) export: String,
    /// The host's name, for its console log's file name.
    #[arg(long)]
    pub(super) name: String,
    /// Where the guest's console goes (default: `lab-host-NAME.console.log` beside the export's
    /// socket).
    #[arg(long)]
    pub(super) console: Option<PathBuf>,
    /// Cache directory (default: $FAULTLINE_LAB_CACHE, else ~/.cache/faultline/lab).
    #[arg(long)]
    pub(super) cache: Option<PathBuf>,
    /// The guest's virtual CPUs, as for `lab run`.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=MAX_CPUS as i64))]
    pub(super) cpus: Option<u8>,
}

#[derive(Args)]
pub(super) struct SetupArgs {
    /// Cache directory (default: $FAULTLINE_LAB_CACHE, else ~/.cache/faultline/lab).
    #[arg(long)]
    pub(super) cache: Option<PathBuf>,
    /// The faultline binary to put in the guest (default: this one).
    #[arg(long)]
    pub(super) faultline: Option<PathBuf>,
}

#[derive(Args)]
pub(super) struct MachineArgs {
    /// Cache directory (as for `lab setup`).
    #[arg(long)]
    pub(super) cache: Option<PathBuf>,
    /// The faultline binary to put in the guest (default: this one).
    #[arg(long)]
    pub(super) faultline: Option<PathBuf>,
    /// Native NVMe multipath in the guest (`nvme_core.multipath`): on gives one block device
    /// for the drive's two controllers, off one per controller. Default: what `lab run`'s
    /// scenario declares (`[lab] multipath`), else on.
    #[arg(long, value_parser = PossibleValuesParser::new(["on", "off"]).map(|v| if v == "on" { OnOff::On } else { OnOff::Off }))]
    pub(super) multipath: Option<OnOff>,
    /// The guest's virtual CPUs (QEMU's -smp; default: $FAULTLINE_LAB_CPUS, else 2). Each is a
    /// host thread under TCG: give two guests on a two-core host one each (docs/LAB.md).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=MAX_CPUS as i64))]
    pub(super) cpus: Option<u8>,
    /// Run directory on the host (default: faultline-runs/lab-<timestamp>).
    #[arg(long)]
    pub(super) run_dir: Option<PathBuf>,
    /// Back the namespace with this raw image file (default: RUN_DIR/lab/drive.img, made
    /// sparse with --size-mib).
    #[arg(long, conflicts_with = "nbd")]
    pub(super) drive_file: Option<PathBuf>,
    /// Back the namespace with the NBD export on this unix socket (QEMU's own NBD client).
    #[arg(long)]
    pub(super) nbd: Option<PathBuf>,
    /// The NBD export's name (e.g. `sim` for `faultline emulate nbd`; default: the server's).
    #[arg(long, requires = "nbd")]
    pub(super) nbd_export: Option<String>,
    /// Back the namespace with faultline's simulated drive of this fault model (over NBD,
    /// --size-mib of it), switched by a Quarch hot-plug module on the guest's /dev/ttyS1
    /// (`quarch+serial:///dev/ttyS1`): power cuts, port pulls, and the run's findings scored
    /// against the drive's ground truth (`lab run`). Default for `lab run`: the scenario's
    /// `[lab] sim`, if it names one.
    #[arg(long, value_parser = ModelParser, value_name = "MODEL", conflicts_with_all = ["drive_file", "nbd"])]
    pub(super) sim: Option<NamedModel>,
    /// The simulated drive completes one operation per this many microseconds while it has
    /// any in flight, so that its queue fills and a cut finds writes in flight there (what the
    /// torn-write and cache models act on), as on a real drive under load.
    #[arg(long, value_name = "US", default_value_t = 500, requires = "sim")]
    pub(super) sim_service_us: u64,
    /// Put a USB power board on the guest's own USB bus (a gadget on dummy_hcd, which the
    /// guest's kernel enumerates and its class driver binds, as on a desk), its relay wired to
    /// the simulated drive as the Quarch module is: `numato` gives
    /// `numato+serial:///dev/ttyACM0?relay=0`, `lcus` gives `lcus+serial:///dev/ttyUSB0?channel=1`,
    /// `quarch` gives `quarch+usb://QTL1999-01-001`, `hidrelay` gives
    /// `hidrelay+usb://FLHID?relay=1` (docs/LAB.md, "The USB rig").
    #[arg(long, value_enum, value_name = "BOARD")]
    pub(super) usb: Option<BoardArg>,
    /// Have the USB board misbehave from the start, as `/run/lab-usb-fault` says (the Quarch
    /// module and the HID relay): `timeout|short|stall [once] [PREFIX]`, e.g. `timeout
    /// RUN:POWer DOWN` (docs/LAB.md, "The USB rig").
    #[arg(long, value_name = "FAULT", value_parser = usb_fault_arg)]
    pub(super) usb_fault: Option<String>,
    /// Size of the image made when neither --drive-file nor --nbd is given.
    #[arg(long, default_value_t = 256)]
    pub(super) size_mib: u64,
    /// Three more namespaces of this many MiB of data each, with protection information type
    /// 1: nsid 2 formatted 512+8 (`$LAB_NS_PI` in the guest), whose guard and reference tags
    /// the guest kernel's block integrity writes and checks; nsid 3, 4096+8
    /// (`$LAB_NS_PI_4K`); nsid 4, 4096+64 with the tuple last (`$LAB_NS_PI_4K64`). faultline's
    /// passthrough engine carries them all through their generic devices (docs/LAB.md).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(super) pi_namespace_mib: Option<u64>,
    /// Seconds the guest gets to boot (TCG on two shared cores: 12-40 s).
    #[arg(long, default_value_t = 180)]
    pub(super) boot_timeout_s: u64,
    /// Seconds the whole machine gets.
    #[arg(long, default_value_t = 3600)]
    pub(super) timeout_s: u64,
}

#[derive(Args)]
pub(super) struct RunArgs {
    /// The scenario (see scenarios/lab-*.toml); its [target] is replaced by the lab drive.
    pub(super) scenario: PathBuf,
    /// Number of cycles: short for `--set cycles.count=N`.
    #[arg(long)]
    pub(super) cycles: Option<u32>,
    /// Override a value of the scenario (repeatable), as for `faultline run`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub(super) set: Vec<Override>,
    #[command(flatten)]
    pub(super) m: MachineArgs,
}

impl MachineArgs {
    pub(super) fn multipath_on(&self) -> bool {
        self.multipath != Some(OnOff::Off)
    }

    /// The options as the library takes them: the cache and binary found, the run directory
    /// named (`faultline-runs/lab-TIMESTAMP-NAME` unless given), the drive chosen.
    pub(super) fn opts(&self, name: &str) -> Result<MachineOpts> {
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            PathBuf::from("faultline-runs").join(format!("lab-{}-{name}", chrono::Local::now().format("%Y%m%d-%H%M%S")))
        });
        let drive = match (self.sim, &self.drive_file, &self.nbd) {
            (Some(model), _, _) => DriveChoice::Sim { model, service: Duration::from_micros(self.sim_service_us) },
            (None, Some(f), _) => DriveChoice::File(Some(f.clone())),
            (None, None, Some(s)) => DriveChoice::Nbd(s.clone(), self.nbd_export.clone()),
            (None, None, None) => DriveChoice::File(None),
        };
        Ok(MachineOpts {
            cache: cache_dir(self.cache.as_deref())?,
            faultline: this_binary(&self.faultline)?,
            multipath: self.multipath_on(),
            cpus: cpus(self.cpus)?,
            run_dir,
            drive,
            usb: self.usb.map(Board::from),
            usb_fault: self.usb_fault.clone(),
            size_mib: self.size_mib,
            pi_mib: self.pi_namespace_mib,
            boot_timeout: Duration::from_secs(self.boot_timeout_s),
            timeout: Duration::from_secs(self.timeout_s),
        })
    }
}

impl From<BoardArg> for Board {
    fn from(b: BoardArg) -> Board {
        match b {
            BoardArg::Numato => Board::Numato,
            BoardArg::Lcus => Board::Lcus,
            BoardArg::Quarch => Board::Quarch,
            BoardArg::Hidrelay => Board::Hidrelay,
        }
    }
}

/// Takes what the scenario's `[lab]` table needs as the machine's defaults, and refuses an
/// option that contradicts it, saying what to pass.
pub(super) fn take_needs(path: &Path, s: &Scenario, m: &mut MachineArgs) -> Result<()> {
    let Some(needs) = &s.lab else { return Ok(()) };
    if let Some(want) = needs.multipath {
        match m.multipath {
            None => m.multipath = Some(want),
            Some(given) if given != want => bail!(
                "{}: this scenario needs multipath {want} in the guest (its [lab] multipath = \"{want}\"); pass --multipath {want}, \
                 or leave --multipath out",
                path.display()
            ),
            Some(_) => {}
        }
    }
    if let (None, Some(mib)) = (m.pi_namespace_mib, needs.pi_namespace_mib) {
        if !(1..=4096).contains(&mib) {
            bail!("{}: lab.pi_namespace_mib is {mib}: give 1 to 4096 (MiB of data per namespace)", path.display());
        }
        m.pi_namespace_mib = Some(mib);
        println!("lab run: the namespaces with protection information have {mib} MiB each, the scenario's [lab] pi_namespace_mib");
    }
    if let (None, Some(name)) = (m.sim, &needs.sim) {
        let model = NamedModel::parse(name).map_err(|e| anyhow::anyhow!("{}: lab.sim: {e}", path.display()))?;
        m.sim = Some(model);
        println!("lab run: the simulated drive's model is {name}, the scenario's [lab] sim (--sim MODEL for another)");
    }
    if let (None, Some(name)) = (m.usb, &needs.usb) {
        let board = BoardArg::from_str(name, false).map_err(|_| {
            let known: Vec<&str> = BoardArg::value_variants().iter().map(|b| Board::from(*b).name()).collect();
            anyhow::anyhow!("{}: lab.usb: no USB board {name:?} in the lab (it has: {})", path.display(), known.join(", "))
        })?;
        m.usb = Some(board);
        println!("lab run: the USB board is {name}, the scenario's [lab] usb");
    }
    Ok(())
}

#[derive(Args)]
pub(super) struct ExecArgs {
    /// The shell script to run in the guest (busybox sh).
    pub(super) script: PathBuf,
    /// Copy FILE into the share before the boot, as the guest's /share/NAME (repeatable):
    /// a program of your own to run in the guest, with the libraries faultline links.
    #[arg(long, value_name = "FILE")]
    pub(super) put: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) m: MachineArgs,
}

#[derive(Subcommand)]
pub(super) enum GuestCmd {
    /// Print the lab drive's devices as shell assignments.
    Env,
    /// Run SCENARIO against the lab drive into RUN_DIR.
    Run {
        scenario: PathBuf,
        run_dir: PathBuf,
        /// After each cycle, have the host take the simulated drive's ground truth and record
        /// the cycle's findings beside it (`lab run --sim`).
        #[arg(long)]
        truth: bool,
    },
    /// Put BOARD on the guest's USB bus (configfs on dummy_hcd) and carry its bytes to the host
    /// emulator over UART, until the guest powers off.
    Usb {
        #[arg(value_enum)]
        board: BoardArg,
        #[arg(long, default_value = usb::UART)]
        uart: PathBuf,
    },
    /// Print the SMART / health log of the controller behind DEV, read with faultline's admin
    /// passthrough and parser, as JSON (nvme-cli's `smart-log -o json` names).
    Smart { dev: PathBuf },
    /// Print the Identify Controller fields of the controller behind DEV, read with
    /// faultline's admin passthrough and parser, as JSON (nvme-cli's `id-ctrl -o json` names).
    Identify { dev: PathBuf },
    /// Hold DEV open (O_DIRECT) and write then read its first 4 KiB every INTERVAL_MS for
    /// SECONDS, printing each change of outcome (the errno a vanished device returns).
    Probe {
        dev: PathBuf,
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        #[arg(long, default_value_t = 20)]
        interval_ms: u64,
    },
}

/// The boards the lab can put on its USB bus (the library's [`Board`], with its help text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BoardArg {
    /// A Numato relay module: CDC-ACM (`f_acm`), vendor 2A19, which the kernel's `cdc-acm`
    /// driver gives as /dev/ttyACM0; relay 0 switches the drive
    /// (`numato+serial:///dev/ttyACM0?relay=0`).
    Numato,
    /// An LCUS relay board: a CH340 (1A86:7523) made with FunctionFS, answering the vendor
    /// requests the kernel's `ch341` driver sends at probe and open, so that `ch341` binds and
    /// gives /dev/ttyUSB0; channel 1 switches the drive (`lcus+serial:///dev/ttyUSB0?channel=1`).
    /// A CH340 reports no serial number, and neither does this one.
    Lcus,
    /// A Quarch power module on USB (16D0:0449, serial QTL1999-01-001): FunctionFS, one vendor
    /// interface of 64-byte bulk endpoints at full speed, which no kernel driver binds;
    /// faultline reaches it through libusb, locks it into USB mode and speaks the USB framing
    /// (`quarch+usb://QTL1999-01-001`).
    Quarch,
    /// A USB HID relay board (16C0:05DF, "USBRelay2", board id FLHID): FunctionFS, one HID
    /// interface at full speed, which the guest's usbhid binds first; faultline detaches it
    /// through libusb and switches relay 1 with HID class requests
    /// (`hidrelay+usb://FLHID?relay=1`).
    Hidrelay,
}

/// The cache directory: `--cache`, else `$FAULTLINE_LAB_CACHE`, else `~/.cache/faultline/lab`.
pub(super) fn cache_dir(given: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("FAULTLINE_LAB_CACHE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty()).context("neither --cache, $FAULTLINE_LAB_CACHE nor $HOME is set")?;
    Ok(PathBuf::from(home).join(".cache/faultline/lab"))
}

/// The guest's vCPUs: `--cpus`, else `$FAULTLINE_LAB_CPUS`, else [`DEFAULT_CPUS`].
pub(super) fn cpus(given: Option<u8>) -> Result<u8> {
    if let Some(n) = given {
        return Ok(n);
    }
    match std::env::var("FAULTLINE_LAB_CPUS") {
        Ok(v) if !v.is_empty() => match v.trim().parse::<u8>() {
            Ok(n) if (1..=MAX_CPUS).contains(&n) => Ok(n),
            _ => bail!("$FAULTLINE_LAB_CPUS={v:?}: a guest's virtual CPUs, 1 to {MAX_CPUS}"),
        },
        _ => Ok(DEFAULT_CPUS),
    }
}

pub(super) fn this_binary(given: &Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().context("cannot tell where this faultline binary is"),
    }
}

/// `--usb-fault`: one the boards' firmware takes ([`faultline::lab::usb::fault::UsbFault::parse`]).
fn usb_fault_arg(s: &str) -> Result<String, String> {
    match faultline::lab::usb::fault::UsbFault::parse(s).map_err(|e| e.to_string())? {
        Some(_) if !s.contains(['\n', '\'']) => Ok(s.trim().to_string()),
        Some(_) => Err("one line, without a quote".into()),
        None => Err("empty: name a fault (timeout, short or stall)".into()),
    }
}
