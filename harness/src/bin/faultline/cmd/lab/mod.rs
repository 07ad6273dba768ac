//! `faultline lab`: faultline inside a QEMU guest against the real Linux NVMe driver, on an
//! emulated dual-port drive (docs/LAB.md).
//!
//! `setup` fills the cache ([`setup`]), `run` / `exec` / `shell` start the machine
//! ([`machine`]) with a run directory shared over 9p, `guest` is what the guest's command
//! script calls ([`guest`]).

mod ch340;
mod ffs;
mod guest;
mod hid_gadget;
mod host;
mod initramfs;
mod machine;
mod qmp;
mod quarch_gadget;
mod setup;
mod sim;
mod usb;
mod vmlinux;

use anyhow::{bail, Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use faultline::scenario::{origin_with, OnOff, Override, Scenario};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::args::ModelParser;
use crate::exit::Exit;
use faultline::scenario::NamedModel;
use faultline_fixtures::TruthContract;
use machine::{Drive, Hooks, Spec};

#[derive(Args)]
pub struct LabArgs {
    #[command(subcommand)]
    cmd: LabCmd,
}

#[derive(Subcommand)]
enum LabCmd {
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
    Host(host::HostArgs),
    /// Inside the guest only: what the guest's command script calls.
    #[command(hide = true, subcommand)]
    Guest(GuestCmd),
}

#[derive(Args)]
struct SetupArgs {
    /// Cache directory (default: $FAULTLINE_LAB_CACHE, else ~/.cache/faultline/lab).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The faultline binary to put in the guest (default: this one).
    #[arg(long)]
    faultline: Option<PathBuf>,
}

#[derive(Args)]
struct MachineArgs {
    /// Cache directory (as for `lab setup`).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// The faultline binary to put in the guest (default: this one).
    #[arg(long)]
    faultline: Option<PathBuf>,
    /// Native NVMe multipath in the guest (`nvme_core.multipath`): on gives one block device
    /// for the drive's two controllers, off one per controller. Default: what `lab run`'s
    /// scenario declares (`[lab] multipath`), else on.
    #[arg(long, value_parser = PossibleValuesParser::new(["on", "off"]).map(|v| if v == "on" { OnOff::On } else { OnOff::Off }))]
    multipath: Option<OnOff>,
    /// Run directory on the host (default: faultline-runs/lab-<timestamp>).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Back the namespace with this raw image file (default: RUN_DIR/lab/drive.img, made
    /// sparse with --size-mib).
    #[arg(long, conflicts_with = "nbd")]
    drive_file: Option<PathBuf>,
    /// Back the namespace with the NBD export on this unix socket (QEMU's own NBD client).
    #[arg(long)]
    nbd: Option<PathBuf>,
    /// The NBD export's name (e.g. `sim` for `faultline emulate nbd`; default: the server's).
    #[arg(long, requires = "nbd")]
    nbd_export: Option<String>,
    /// Back the namespace with faultline's simulated drive of this fault model (over NBD,
    /// --size-mib of it), switched by a Quarch hot-plug module on the guest's /dev/ttyS1
    /// (`quarch+serial:///dev/ttyS1`): power cuts, port pulls, and the run's findings scored
    /// against the drive's ground truth (`lab run`). Default for `lab run`: the scenario's
    /// `[lab] sim`, if it names one.
    #[arg(long, value_parser = ModelParser, value_name = "MODEL", conflicts_with_all = ["drive_file", "nbd"])]
    sim: Option<NamedModel>,
    /// The simulated drive completes one operation per this many microseconds while it has
    /// any in flight, so that its queue fills and a cut finds writes in flight there (what the
    /// torn-write and cache models act on), as on a real drive under load.
    #[arg(long, value_name = "US", default_value_t = 500, requires = "sim")]
    sim_service_us: u64,
    /// Put a USB power board on the guest's own USB bus (a gadget on dummy_hcd, which the
    /// guest's kernel enumerates and its class driver binds, as on a desk), its relay wired to
    /// the simulated drive as the Quarch module is: `numato` gives
    /// `numato+serial:///dev/ttyACM0?relay=0`, `lcus` gives `lcus+serial:///dev/ttyUSB0?channel=1`,
    /// `quarch` gives `quarch+usb://QTL1999-01-001`, `hidrelay` gives
    /// `hidrelay+usb://FLHID?relay=1` (docs/LAB.md, "The USB rig").
    #[arg(long, value_enum, value_name = "BOARD")]
    usb: Option<usb::Board>,
    /// Have the USB board misbehave from the start, as `/run/lab-usb-fault` says (the Quarch
    /// module and the HID relay): `timeout|short|stall [once] [PREFIX]`, e.g. `timeout
    /// RUN:POWer DOWN` (docs/LAB.md, "The USB rig").
    #[arg(long, value_name = "FAULT", value_parser = usb_fault_arg)]
    usb_fault: Option<String>,
    /// Size of the image made when neither --drive-file nor --nbd is given.
    #[arg(long, default_value_t = 256)]
    size_mib: u64,
    /// Seconds the guest gets to boot (TCG on two shared cores: 12-40 s).
    #[arg(long, default_value_t = 180)]
    boot_timeout_s: u64,
    /// Seconds the whole machine gets.
    #[arg(long, default_value_t = 3600)]
    timeout_s: u64,
}

#[derive(Args)]
struct RunArgs {
    /// The scenario (see scenarios/lab-*.toml); its [target] is replaced by the lab drive.
    scenario: PathBuf,
    /// Number of cycles: short for `--set cycles.count=N`.
    #[arg(long)]
    cycles: Option<u32>,
    /// Override a value of the scenario (repeatable), as for `faultline run`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    set: Vec<Override>,
    #[command(flatten)]
    m: MachineArgs,
}

impl MachineArgs {
    fn multipath_on(&self) -> bool {
        self.multipath != Some(OnOff::Off)
    }
}

/// Takes what the scenario's `[lab]` table needs as the machine's defaults, and refuses an
/// option that contradicts it, saying what to pass.
fn take_needs(path: &Path, s: &Scenario, m: &mut MachineArgs) -> Result<()> {
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
    if let (None, Some(name)) = (m.sim, &needs.sim) {
        let model = NamedModel::parse(name).map_err(|e| anyhow::anyhow!("{}: lab.sim: {e}", path.display()))?;
        m.sim = Some(model);
        println!("lab run: the simulated drive's model is {name}, the scenario's [lab] sim (--sim MODEL for another)");
    }
    if let (None, Some(name)) = (m.usb, &needs.usb) {
        let board = <usb::Board as clap::ValueEnum>::from_str(name, false).map_err(|_| {
            let known: Vec<&str> = <usb::Board as clap::ValueEnum>::value_variants().iter().map(|b| b.name()).collect();
            anyhow::anyhow!("{}: lab.usb: no USB board {name:?} in the lab (it has: {})", path.display(), known.join(", "))
        })?;
        m.usb = Some(board);
        println!("lab run: the USB board is {name}, the scenario's [lab] usb");
    }
    Ok(())
}

#[derive(Args)]
struct ExecArgs {
    /// The shell script to run in the guest (busybox sh).
    script: PathBuf,
    /// Copy FILE into the share before the boot, as the guest's /share/NAME (repeatable):
    /// a program of your own to run in the guest, with the libraries faultline links.
    #[arg(long, value_name = "FILE")]
    put: Vec<PathBuf>,
    #[command(flatten)]
    m: MachineArgs,
}

#[derive(Subcommand)]
enum GuestCmd {
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
        board: usb::Board,
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

pub fn cmd_lab(a: LabArgs) -> Result<Exit> {
    match a.cmd {
        LabCmd::Setup(s) => cmd_setup(s),
        LabCmd::Run(r) => cmd_run(r),
        LabCmd::Exec(e) => cmd_exec(e),
        LabCmd::Shell(m) => cmd_shell(m),
        LabCmd::Host(h) => host::cmd_host(h),
        LabCmd::Guest(g) => cmd_guest(g),
    }
}

fn this_binary(given: &Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().context("cannot tell where this faultline binary is"),
    }
}

fn cmd_setup(a: SetupArgs) -> Result<Exit> {
    let cache = setup::cache_dir(a.cache.as_deref())?;
    let t0 = Instant::now();
    let mut report = setup::Report::default();
    let lab = setup::setup(&cache, &this_binary(&a.faultline)?, &mut report)?;
    for (step, fresh) in &report.steps {
        println!("lab setup: {step}: {}", if *fresh { "done" } else { "up to date" });
    }
    for n in &report.notes {
        eprintln!("faultline: note: {n}");
    }
    println!("lab setup: cache {}, kernel {}, in {:.1} s", cache.display(), lab.kernel.display(), t0.elapsed().as_secs_f64());
    Ok(Exit::Clean)
}

/// A machine's host side, prepared: the lab cache (with this faultline in it), the run
/// directory, its `lab/` folder and the share.
struct Prepared {
    lab: setup::Lab,
    dir: PathBuf,
    lab_dir: PathBuf,
    share: PathBuf,
    drive: Drive,
    /// The simulated drive (`--sim`).
    sim: Option<sim::SimLab>,
    /// Where the machine's unix sockets go (removed with it).
    socks: tempfile::TempDir,
}

/// What the scenario says of the simulated drive (`--sim`): its contract, atomic unit, seed.
struct SimFromScenario {
    contract: TruthContract,
    atomic: u32,
    seed: u64,
}

impl Default for SimFromScenario {
    fn default() -> Self {
        SimFromScenario { contract: TruthContract::Plp, atomic: 512, seed: 1 }
    }
}

/// Prepares a machine.
fn prepare(m: &MachineArgs, name: &str, from: SimFromScenario) -> Result<Prepared> {
    if let (Some(f), None) = (&m.usb_fault, m.usb) {
        bail!("--usb-fault {f:?}: there is no USB board to misbehave (--usb BOARD, or the scenario's [lab] usb)");
    }
    if let (Some(b), None) = (m.usb, m.sim) {
        bail!(
            "--usb {}: a USB board in the lab switches the simulated drive: it needs --sim MODEL (or the scenario's [lab] sim)",
            b.name()
        );
    }
    if let Some(model) = m.sim {
        sim::refuse_dual(model)?;
    }
    let cache = setup::cache_dir(m.cache.as_deref())?;
    let lab = setup::locate(&cache)?;
    if setup::refresh_faultline(&cache, &lab, &this_binary(&m.faultline)?)? {
        println!("lab: the guest's faultline binary refreshed");
    }
    let dir = m
        .run_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("faultline-runs").join(format!("lab-{}-{name}", chrono::Local::now().format("%Y%m%d-%H%M%S"))));
    let lab_dir = dir.join("lab");
    if lab_dir.exists() {
        bail!("{} already holds a lab run (its lab/ folder exists): use a new run directory", dir.display());
    }
    let share = lab_dir.join("share");
    std::fs::create_dir_all(share.join("lab")).with_context(|| format!("cannot create {}", share.display()))?;
    let lab_dir = std::fs::canonicalize(&lab_dir)?;
    let share = lab_dir.join("share");
    let socks = tempfile::Builder::new().prefix("faultline-lab-").tempdir().context("cannot make a directory for the lab's sockets")?;
    let sim = match m.sim {
        Some(model) => {
            let service = Duration::from_micros(m.sim_service_us);
            let SimFromScenario { contract, atomic, seed } = from;
            let spec = sim::DriveSpec { contract, capacity: m.size_mib << 20, atomic, seed, service };
            Some(sim::SimLab::start(&lab_dir, &socks.path().join("drive.sock"), model, spec, m.usb)?)
        }
        None => None,
    };
    let drive = match (&m.drive_file, &m.nbd, &sim) {
        (_, _, Some(s)) => Drive::Nbd(s.socket().to_path_buf(), Some("sim".into())),
        (Some(f), _, None) => Drive::File(std::fs::canonicalize(f).with_context(|| format!("no drive image {}", f.display()))?),
        (None, Some(s), None) => Drive::Nbd(s.clone(), m.nbd_export.clone()),
        (None, None, None) => {
            let img = lab_dir.join("drive.img");
            let f = std::fs::File::create(&img).with_context(|| format!("cannot create {}", img.display()))?;
            f.set_len(m.size_mib << 20)?;
            Drive::File(img)
        }
    };
    Ok(Prepared { lab, dir, lab_dir, share, drive, sim, socks })
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

/// [`PREAMBLE`], and with `--usb BOARD` the board put on the guest's USB bus (its bridge left
/// running; `lab/usb.log` says how it went), then `faultline controller list` as the guest
/// sees its controllers, and the board's `identify` and `status` through faultline's driver
/// (`lab/controllers.txt`), before anything switches.
fn preamble(m: &MachineArgs) -> String {
    let mut s = PREAMBLE.to_string();
    if let Some(b) = m.usb {
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
        if let Some(f) = &m.usb_fault {
            s += &format!("echo '{f}' > {}\n", usb::FAULT_FILE);
        }
    }
    s
}

fn boot(p: &mut Prepared, m: &MachineArgs, shell: bool, echo: bool) -> Result<machine::Outcome> {
    let spec = Spec {
        lab: &p.lab,
        lab_dir: &p.lab_dir,
        share: &p.share,
        drive: p.drive.clone(),
        multipath: m.multipath_on(),
        shell,
        uart: p.sim.as_ref().map(|s| s.uart().to_path_buf()),
        usb_uart: p.sim.as_ref().and_then(|s| s.usb_uart()).map(Path::to_path_buf),
        sock_dir: p.socks.path(),
    };
    let mut hooks = Hooks::default();
    let mut take_truth;
    if let Some(sim) = p.sim.as_mut() {
        hooks.rig = sim.take_rig();
        take_truth = |cycle| sim.take_truth(cycle);
        hooks.truth = Some(&mut take_truth);
    }
    let out = machine::run(&spec, Duration::from_secs(m.boot_timeout_s), Duration::from_secs(m.timeout_s), echo, hooks)?;
    let boot = out.boot_s.map_or("?".to_string(), |b| format!("{b:.1}"));
    eprintln!("lab: booted in {boot} s, powered off after {:.1} s (console: {})", out.total_s, spec.console().display());
    Ok(out)
}

/// `--usb-fault`: one the boards' firmware takes ([`faultline::lab::usb_fault::UsbFault::parse`]).
fn usb_fault_arg(s: &str) -> Result<String, String> {
    match faultline::lab::usb_fault::UsbFault::parse(s).map_err(|e| e.to_string())? {
        Some(_) if !s.contains(['\n', '\'']) => Ok(s.trim().to_string()),
        Some(_) => Err("one line, without a quote".into()),
        None => Err("empty: name a fault (timeout, short or stall)".into()),
    }
}

/// Where the lab's power switch is, inside the guest.
const LAB_POWER: &str = "quarch+serial:///dev/ttyS1";

fn cmd_run(mut a: RunArgs) -> Result<Exit> {
    // Checked on the host first, so a bad file fails before the boot.
    let sets = super::run::overrides(a.cycles, &a.set);
    let given = Scenario::load_with(&a.scenario, &sets)?;
    take_needs(&a.scenario, &given, &mut a.m)?;
    let s = guest::lab_scenario(given.clone(), &a.scenario.display().to_string(), Path::new("/dev/nvme0n1"))?;
    let powered =
        s.fault.each().iter().any(|f| matches!(f, faultline::scenario::Fault::PowerCut { .. } | faultline::scenario::Fault::CleanShutdown));
    if powered && a.m.sim.is_none() {
        bail!(
            "{}: a power fault in the lab needs the simulated drive (--sim MODEL, e.g. --sim honest-plp, or the scenario's [lab] sim): a raw image or another NBD export lives in the host's page cache and loses nothing",
            a.scenario.display()
        );
    }
    let rigged = [&s.controllers.power, &s.controllers.link].iter().any(|c| c.as_deref() == Some(LAB_POWER));
    if rigged && a.m.sim.is_none() {
        bail!(
            "{}: {LAB_POWER} is the simulated drive's Quarch module, which only `--sim MODEL` puts on the guest's second UART",
            a.scenario.display()
        );
    }
    let board_power = a.m.usb.map(|b| b.power());
    if powered && s.controllers.power.as_deref() != Some(LAB_POWER) && s.controllers.power.as_deref() != board_power {
        let board = board_power.map_or(String::new(), |p| format!(", or its USB board: power = \"{p}\""));
        bail!(
            "{}: controllers.power is {:?}; the lab's drive is switched by its Quarch module on the guest's second UART: power = \"{LAB_POWER}\"{board}",
            a.scenario.display(),
            s.controllers.power.as_deref().unwrap_or("not given")
        );
    }
    let contract = match s.contract {
        faultline::ledger::Contract::Plp => TruthContract::Plp,
        faultline::ledger::Contract::Flush => TruthContract::Flush,
    };
    let name = a.scenario.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let from = SimFromScenario { contract, atomic: s.target.atomic_bytes.unwrap_or(512), seed: s.seed.unwrap_or(1) };
    let mut p = prepare(&a.m, &name, from)?;
    // The scenario as given, overrides applied: the guest puts the lab's drive in [target].
    let text = format!("# {} (the lab's copy)\n{}", origin_with(&a.scenario.display().to_string(), &sets), given.to_toml()?);
    std::fs::write(p.share.join("scenario.toml"), text).with_context(|| format!("cannot copy {} into the share", a.scenario.display()))?;
    let truth = if p.sim.is_some() { " --truth" } else { "" };
    std::fs::write(p.share.join("lab/cmd"), format!("{}faultline lab guest run{truth} /share/scenario.toml /share/run\n", preamble(&a.m)))?;
    let drive = p.sim.as_ref().map_or(String::new(), |s| format!(", simulated drive {}", s.model));
    let multipath = if a.m.multipath_on() { OnOff::On } else { OnOff::Off };
    println!("lab run: {} in {} (multipath {multipath}{drive})", a.scenario.display(), p.dir.display());
    let out = boot(&mut p, &a.m, false, true)?;
    bring_back(&p.share.join("run"), &p.dir)?;
    let Some(code) = out.exit_code else {
        bail!(
            "the guest powered off without faultline's exit code (see {}); the console's last lines:\n{}",
            p.share.join("lab/guest.log").display(),
            machine::console_tail(&p.lab_dir.join("console.log"), 30)
        )
    };
    if let Some(sim) = &p.sim {
        let r = sim.reconcile(&p.share.join("lab/checks.jsonl"), &p.lab_dir, &p.dir)?;
        println!("{}", sim.traffic());
        print!("{}", r.table());
        for e in &r.explained {
            println!("lab: a finding about the layer between faultline and the drive, not about the drive: {e} (docs/LAB.md)");
        }
        if !r.lab_faults.is_empty() {
            bail!(
                "the lab failed in {} of {} cycles, so this run says nothing of the drive ({}; run it again, and see \
                 docs/LAB.md for this QEMU defect):\n  {}{}",
                r.lab_faults.len(),
                r.cycles,
                p.lab_dir.join("reconcile.json").display(),
                r.lab_faults.join("\n  "),
                if r.disagreements.is_empty() {
                    String::new()
                } else {
                    format!("\nand disagreements besides:\n  {}", r.disagreements.join("\n  "))
                }
            );
        }
        if !r.disagreements.is_empty() {
            bail!(
                "faultline in the guest and the drive's ground truth disagree ({} of {} cycles; {}):\n  {}",
                r.disagreements.len(),
                r.cycles,
                p.lab_dir.join("reconcile.json").display(),
                r.disagreements.join("\n  ")
            );
        }
        if r.explained.is_empty() {
            println!("lab: the guest's findings and the drive's ground truth agree, sector by sector, in every one of {} cycles", r.cycles);
        } else {
            println!(
                "lab: the guest's findings and the drive's ground truth agree in {} of {} cycles; the others' differences are explained above",
                r.cycles as usize - r.explained.len(),
                r.cycles
            );
        }
    }
    Ok(Exit::from_code(u8::try_from(code).unwrap_or(2)))
}

/// Moves the guest's run directory's files into `dir` (beside `lab/`).
fn bring_back(from: &Path, dir: &Path) -> Result<()> {
    let Ok(rd) = std::fs::read_dir(from) else { return Ok(()) };
    for e in rd {
        let e = e?;
        let to = dir.join(e.file_name());
        std::fs::rename(e.path(), &to).with_context(|| format!("cannot move {} to {}", e.path().display(), to.display()))?;
    }
    let _ = std::fs::remove_dir(from);
    Ok(())
}

fn cmd_exec(a: ExecArgs) -> Result<Exit> {
    let script = std::fs::read_to_string(&a.script).with_context(|| format!("cannot read {}", a.script.display()))?;
    let mut p = prepare(&a.m, "exec", SimFromScenario::default())?;
    for f in &a.put {
        let name =
            f.file_name().filter(|n| *n != "lab").with_context(|| format!("--put {}: not a file name the share can take", f.display()))?;
        std::fs::copy(f, p.share.join(name)).with_context(|| format!("--put: cannot copy {} into the share", f.display()))?;
    }
    std::fs::write(p.share.join("lab/cmd"), format!("{}{script}", preamble(&a.m)))?;
    let out = boot(&mut p, &a.m, false, false)?;
    if let Some(sim) = &p.sim {
        eprintln!("{}", sim.traffic());
    }
    match out.exit_code {
        Some(0) => Ok(Exit::Clean),
        Some(c) => {
            eprintln!("lab exec: the script exited with {c} (its output: {})", p.share.join("lab/guest.log").display());
            Ok(Exit::Findings)
        }
        None => bail!(
            "the guest powered off without the script's exit code; console:\n{}",
            machine::console_tail(&p.lab_dir.join("console.log"), 30)
        ),
    }
}

fn cmd_shell(m: MachineArgs) -> Result<Exit> {
    let mut p = prepare(&m, "shell", SimFromScenario::default())?;
    std::fs::write(p.share.join("lab/cmd"), preamble(&m))?;
    boot(&mut p, &m, true, false)?;
    Ok(Exit::Clean)
}

fn cmd_guest(g: GuestCmd) -> Result<Exit> {
    match &g {
        GuestCmd::Usb { board, uart } => {
            usb::serve(*board, uart)?;
            return Ok(Exit::Clean);
        }
        GuestCmd::Smart { dev } => {
            println!("{}", guest::smart_json(dev)?);
            return Ok(Exit::Clean);
        }
        GuestCmd::Identify { dev } => {
            println!("{}", guest::identify_json(dev)?);
            return Ok(Exit::Clean);
        }
        GuestCmd::Probe { dev, seconds, interval_ms } => {
            guest::probe(dev, Duration::from_secs(*seconds), Duration::from_millis(*interval_ms))?;
            return Ok(Exit::Clean);
        }
        _ => {}
    }
    let d = guest::find()?;
    match g {
        GuestCmd::Env => {
            print!("{}", d.env());
            Ok(Exit::Clean)
        }
        GuestCmd::Run { scenario, run_dir, truth } => {
            let origin = scenario.display().to_string();
            let s = guest::lab_scenario(Scenario::load(&scenario)?, &origin, &d.ns)?;
            let mut sync = guest::TruthSync::new(Path::new("/share/lab"));
            let observer: Option<&mut (dyn faultline::runner::CycleObserver + 'static)> = if truth { Some(&mut sync) } else { None };
            super::run::cmd_run_scenario(s, &scenario.display().to_string(), Some(run_dir), None, &Default::default(), observer)
        }
        GuestCmd::Smart { .. } | GuestCmd::Identify { .. } | GuestCmd::Probe { .. } | GuestCmd::Usb { .. } => unreachable!("handled above"),
    }
}
