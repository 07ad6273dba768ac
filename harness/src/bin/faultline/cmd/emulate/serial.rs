//! `faultline emulate quarch|lcus|numato --pty | --tcp ADDR`: one controller emulator with a
//! simulated drive behind it, until SIGINT or SIGTERM.

use super::args::{Device, EmulateArgs, ModuleArg};
use super::live::{drive_state, install_log, stop_on_signals};
use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use faultline::scenario::SimModel;
use faultline_fixtures::emu::{LcusEmu, NumatoEmu, QuarchEmu, QuarchKind, QuarchModule, Tap};
use faultline_fixtures::{SimConfig, SimDrive, SimPower, TruthContract};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What is serving, kept alive until the command ends.
enum Serving {
    Quarch(QuarchEmu),
    Lcus(LcusEmu),
    Numato(NumatoEmu),
}

impl Serving {
    fn tap(&self) -> Tap {
        match self {
            Serving::Quarch(e) => e.tap(),
            Serving::Lcus(e) => e.tap(),
            Serving::Numato(e) => e.tap(),
        }
    }
}

/// One emulator started: what it is, where it listens, the faultline spec reaching it and,
/// for quarchpy, how its own client names it.
struct Started {
    serving: Serving,
    what: &'static str,
    endpoint: String,
    spec: String,
    client: Option<String>,
}

/// Refuses what only another emulator takes, and a missing place to listen.
fn check(a: &EmulateArgs) -> Result<()> {
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
    Ok(())
}

pub(super) fn cmd_emulate_serial(a: EmulateArgs) -> Result<Exit> {
    check(&a)?;
    let seed = a.seed.unwrap_or_else(crate::random_u64);
    let model: SimModel = a.model.sim_model();
    let drive = SimDrive::new(SimConfig {
        capacity_bytes: a.capacity_bytes,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 32,
        seed,
        model: model.fault_model(),
        contract: TruthContract::Plp,
        dealloc_reads: Default::default(),
    });
    let power = drive.power();
    let Started { serving, what, endpoint, spec, client } = start(&a, power.clone(), seed)?;
    let exchanges = Arc::new(AtomicU64::new(0));
    install_log(&serving.tap(), power, Arc::clone(&exchanges), a.quiet);

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

/// Starts the emulator `a.device` names, switching `power`.
fn start(a: &EmulateArgs, power: SimPower, seed: u64) -> Result<Started> {
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
        (Device::Nbd, _) => bail!("emulate nbd serves no controller of its own"),
    };
    Ok(Started { serving, what, endpoint, spec, client })
}
