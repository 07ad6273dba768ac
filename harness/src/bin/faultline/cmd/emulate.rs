//! `faultline emulate quarch|lcus|numato --pty | --tcp ADDR`: one of the controller emulators
//! (`faultline_fixtures::emu`) on its own, with a simulated drive behind it, for bringing up
//! lab scripts (quarchpy, a relay board's own tool) without hardware. Prints where it listens,
//! then logs each command and reply on stderr until SIGINT or SIGTERM. `emulate nbd` serves the
//! simulated drive itself over NBD (`emulate_nbd.rs`).

use crate::args::ModelParser;
use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use faultline::scenario::NamedModel;
use faultline::scenario::SimModel;
use faultline_fixtures::emu::{LcusEmu, NumatoEmu, QuarchEmu, QuarchKind, QuarchModule, Tap};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, SimPower, TruthContract};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
pub enum Device {
    /// A Quarch module (serial or TCP framing).
    Quarch,
    /// A CH340 "LCUS" relay board (serial only; it never answers).
    Lcus,
    /// A Numato USB relay board (serial only).
    Numato,
    /// The simulated drive itself, served over NBD (`--unix PATH` or `--tcp ADDR`), for QEMU's
    /// NBD client and qemu-io/qemu-img.
    Nbd,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ModuleArg {
    /// A drive control (hot-plug) module: RUN:POWer? answers PLUGGED/PULLED, signals and timed
    /// sources.
    Hotplug,
    /// A programmable power module: RUN:POWer? answers ON/OFF, the 12 V rail can be measured.
    Power,
}

#[derive(clap::Args)]
pub struct EmulateArgs {
    /// The controller to emulate.
    #[arg(value_enum)]
    device: Device,
    /// Serve on a new pseudo-terminal (its path is printed).
    #[arg(long, conflicts_with_all = ["tcp", "unix"])]
    pty: bool,
    /// Quarch or NBD: listen on this TCP address. quarchpy dials port 9760 only: give
    /// 127.0.0.1:9760, or another loopback address with port 9760 (127.0.0.2:9760, ...).
    #[arg(long, value_name = "ADDR")]
    pub(crate) tcp: Option<SocketAddr>,
    /// NBD only: listen on a Unix socket at this path.
    #[arg(long, value_name = "PATH")]
    pub(crate) unix: Option<std::path::PathBuf>,
    /// Quarch only: the kind of module.
    #[arg(long, value_enum, default_value = "hotplug")]
    module: ModuleArg,
    /// The simulated drive's fault model, as `faultline run --model` takes it.
    #[arg(long, value_parser = ModelParser, default_value = "honest-plp")]
    pub(crate) model: NamedModel,
    /// The simulated drive's capacity in bytes.
    #[arg(long, alias = "capacity", default_value_t = 64 << 20)]
    pub(crate) capacity_bytes: u64,
    /// Seed of the simulated drive and of any garbage the emulator sends. Default: random (with
    /// `--sim-dir`, 1, so that the saved drive reloads).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Do not log each command and reply (NBD: each connection and refusal).
    #[arg(long)]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) nbd: super::emulate_nbd::NbdArgs,
}

/// What is serving, kept alive until the command ends.
enum Serving {
    Quarch(QuarchEmu),
    Lcus(LcusEmu),
    Numato(NumatoEmu),
}

pub fn cmd_emulate(a: EmulateArgs) -> Result<Exit> {
    if matches!(a.device, Device::Nbd) {
        return super::emulate_nbd::cmd_emulate_nbd(a);
    }
    if a.unix.is_some() {
        bail!("--unix: only `emulate nbd` listens on a Unix socket");
    }
    a.nbd.refuse_outside_nbd()?;
    if !a.pty && a.tcp.is_none() {
        bail!("say where to listen: --pty (or, Quarch only, --tcp ADDR)");
    }
    if a.tcp.is_some() && !matches!(a.device, Device::Quarch) {
        bail!("--tcp: only the Quarch emulator speaks TCP; LCUS and Numato boards are serial (use --pty)");
    }
    if a.capacity_bytes == 0 || !a.capacity_bytes.is_multiple_of(4096) {
        bail!("--capacity-bytes {}: must be a positive multiple of 4096", a.capacity_bytes);
    }
    let seed = a.seed.unwrap_or_else(crate::random_u64);
    let model: SimModel = a.model.sim_model();
    let fault_model: FaultModel = model.fault_model();
    let drive = SimDrive::new(SimConfig {
        capacity_bytes: a.capacity_bytes,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 32,
        seed,
        model: fault_model,
        contract: TruthContract::Plp,
    });
    let power = drive.power();
    let (serving, what, endpoint, spec, client) = match (a.device, a.tcp) {
        (Device::Quarch, tcp) => {
            let kind = match a.module {
                ModuleArg::Hotplug => QuarchKind::HotPlug,
                ModuleArg::Power => QuarchKind::Power,
            };
            let m = QuarchModule { kind, power: power.clone() };
            let e = match tcp {
                Some(addr) => QuarchEmu::tcp_at(m, seed, addr).with_context(|| format!("cannot listen on {addr}"))?,
                None => QuarchEmu::serial(m, seed).context("cannot open a pseudo-terminal")?,
            };
            let ep = e.endpoint().to_string();
            let (spec, client) = match tcp {
                Some(addr) => (format!("quarch+tcp://{ep}"), format!("quarchpy: quarchDevice(\"TCP:{}\")", addr.ip())),
                None => (format!("quarch+serial://{ep}"), format!("quarchpy: quarchDevice(\"SERIAL:{ep}\")")),
            };
            let what = match kind {
                QuarchKind::HotPlug => "Quarch drive control (hot-plug) module",
                QuarchKind::Power => "Quarch programmable power module",
            };
            (Serving::Quarch(e), what, ep, spec, Some(client))
        }
        (Device::Lcus, _) => {
            let e = LcusEmu::new(vec![(1, power.clone())]).context("cannot open a pseudo-terminal")?;
            let ep = e.path().to_string();
            (Serving::Lcus(e), "LCUS relay board (channel 1)", ep.clone(), format!("lcus+serial://{ep}?channel=1"), None)
        }
        (Device::Numato, _) => {
            let e = NumatoEmu::new(vec![(1, power.clone())], seed).context("cannot open a pseudo-terminal")?;
            let ep = e.path().to_string();
            (Serving::Numato(e), "Numato relay board (relay 1)", ep.clone(), format!("numato+serial://{ep}?relay=1"), None)
        }
        (Device::Nbd, _) => unreachable!("emulate nbd returned above"),
    };
    let exchanges = Arc::new(AtomicU64::new(0));
    let tap = match &serving {
        Serving::Quarch(e) => e.tap(),
        Serving::Lcus(e) => e.tap(),
        Serving::Numato(e) => e.tap(),
    };
    install_log(&tap, power, Arc::clone(&exchanges), a.quiet);

    let stop = stop_on_signals()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {endpoint}")?;
    writeln!(out, "emulating: {what}, simulated drive of {} bytes ({model}, seed {seed})", a.capacity_bytes)?;
    writeln!(out, "faultline spec: {spec}")?;
    if let Some(c) = client {
        writeln!(out, "{c}")?;
    }
    writeln!(out, "stop with SIGINT (Ctrl-C) or SIGTERM")?;
    out.flush()?;
    drop(out);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(serving);
    eprintln!("faultline emulate: stopped after {} commands, the drive powered {}", exchanges.load(Ordering::SeqCst), drive_state(&drive));
    Ok(Exit::Clean)
}

/// A flag SIGINT and SIGTERM set.
pub(crate) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install the signal handler")?;
    }
    Ok(stop)
}

pub(crate) fn drive_state(d: &SimDrive) -> &'static str {
    if d.present() {
        "on"
    } else {
        "off"
    }
}

/// Logs each exchange on stderr: `> command`, `< reply` (escaped, one line), and the drive's
/// power after it.
pub(crate) fn install_log(tap: &Tap, power: SimPower, count: Arc<AtomicU64>, quiet: bool) {
    tap.set(move |cmd, reply| {
        count.fetch_add(1, Ordering::SeqCst);
        if quiet {
            return;
        }
        let mut p = power.clone();
        let state = match faultline_drivers::PowerSwitch::state(&mut p) {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        let reply = if reply.is_empty() { "(no reply)".to_string() } else { reply.escape_ascii().to_string() };
        eprintln!("> {cmd}\n< {reply}\n  drive power: {state}");
    });
}
