//! `faultline emulate nbd --unix PATH | --tcp ADDR`: the simulated drive served over NBD
//! (`faultline::sim_nbd`, where every simulated drive is served), with every fault model, optionally kept in a directory
//! (`--sim-dir`), for QEMU's NBD client (the lab's shared namespace), qemu-io and qemu-img. The
//! sector decoder of `faultline::format` names each write to the drive. With `--quarch-pty`, a
//! Quarch hot-plug module on a pseudo-terminal switches the same drive's power; `--truth-out`
//! writes the drive's ground truth when the emulator stops. Runs until SIGINT or SIGTERM.

use super::args::{ContractArg, EmulateArgs};
use super::live::{drive_state, install_log, stop_on_signals};
use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use faultline::scenario::SimModel;
use faultline::sim_nbd::{self, EventLog, Export, Listen, Served};
use faultline_fixtures::emu::{QuarchEmu, QuarchKind, QuarchModule};
use faultline_fixtures::nbd::NbdEvent;
use faultline_fixtures::{DualConfig, DualSim, SimConfig, SimDrive, TruthContract};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The drive `a` describes, checked: its configuration and service time.
fn drive_config(a: &EmulateArgs) -> Result<(SimConfig, Duration)> {
    let n = &a.nbd;
    let sector_bytes = n.sector_bytes.unwrap_or(512);
    let atomic_bytes = n.atomic_bytes.unwrap_or(4096);
    if sector_bytes != 512 && sector_bytes != 4096 {
        bail!("--sector-bytes {sector_bytes}: the simulated drive has 512- or 4096-byte sectors");
    }
    if atomic_bytes < sector_bytes || !atomic_bytes.is_multiple_of(sector_bytes) {
        bail!("--atomic-bytes {atomic_bytes}: must be a multiple of the {sector_bytes}-byte sector");
    }
    if a.capacity_bytes == 0 || !a.capacity_bytes.is_multiple_of(4096) {
        bail!("--capacity-bytes {}: must be a positive multiple of 4096", a.capacity_bytes);
    }
    let seed = a.seed.unwrap_or_else(|| if n.sim_dir.is_some() { 1 } else { crate::random_u64() });
    let contract = match n.contract.unwrap_or(ContractArg::Plp) {
        ContractArg::Plp => TruthContract::Plp,
        ContractArg::Flush => TruthContract::Flush,
    };
    let cfg = SimConfig {
        capacity_bytes: a.capacity_bytes,
        sector_bytes,
        atomic_bytes,
        queue_depth: n.queue_depth.unwrap_or(64).max(1),
        seed,
        model: a.model.sim_model().fault_model(),
        contract,
        dealloc_reads: Default::default(),
    };
    Ok((cfg, Duration::from_micros(n.service_us.unwrap_or(100))))
}

/// Where `--unix` / `--tcp` say to serve the single-port drive.
fn listen_at(a: &EmulateArgs) -> Result<(Listen<'_>, String)> {
    match (&a.unix, a.tcp) {
        (Some(path), None) => Ok((Listen::Unix(path), format!("--unix {}", path.display()))),
        (None, Some(addr)) => Ok((Listen::Tcp(addr), format!("--tcp {addr}"))),
        _ => bail!("emulate nbd listens on --unix PATH or --tcp ADDR (one of them), not on a pty"),
    }
}

/// Logs each event on stderr, prefixed (`nbd`, `nbd A`), unless `--quiet`.
fn event_log(quiet: bool, prefix: &'static str) -> Option<EventLog> {
    if quiet {
        return None;
    }
    Some(Box::new(move |e: &NbdEvent| eprintln!("{prefix}: {e}")))
}

/// Waits until SIGINT or SIGTERM set `stop`.
fn wait_for_stop(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `--truth-out`: the drive's ground truth, written when the emulator stops.
fn write_truth(path: Option<&PathBuf>, truth: &impl serde::Serialize) -> Result<()> {
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(truth)?;
        std::fs::write(path, text).with_context(|| format!("--truth-out: cannot write {}", path.display()))?;
    }
    Ok(())
}

pub(super) fn cmd_emulate_nbd(a: EmulateArgs) -> Result<Exit> {
    let (cfg, service) = drive_config(&a)?;
    if let Some(dual) = a.model.dual_model() {
        return serve_dual(&a, cfg, dual.dual_model(), service);
    }
    let n = &a.nbd;
    let (seed, model): (u64, SimModel) = (cfg.seed, a.model.sim_model());
    let drive = match &n.sim_dir {
        Some(dir) => SimDrive::persistent(cfg, dir).with_context(|| format!("--sim-dir {}", dir.display()))?,
        None => SimDrive::new(cfg),
    };
    let export = n.export.clone().unwrap_or_else(|| "sim".to_string());
    let description = format!("faultline simulated drive ({model}, seed {seed})");
    let (at, flag) = listen_at(&a)?;
    let served = sim_nbd::serve(drive.clone(), Export { name: export, description, service_time: service }, at, event_log(a.quiet, "nbd"))
        .with_context(|| flag)?;
    let quarch = if n.quarch_pty {
        let m = QuarchModule { kind: QuarchKind::HotPlug, power: drive.power() };
        let e = QuarchEmu::serial(m, seed).context("--quarch-pty: cannot open a pseudo-terminal")?;
        install_log(&e.tap(), drive.power(), Arc::new(AtomicU64::new(0)), a.quiet);
        Some(e)
    } else {
        None
    };
    let stop = stop_on_signals()?;
    say_serving(&a, &served, quarch.as_ref(), service, model, seed)?;
    wait_for_stop(&stop);
    drop(quarch);
    let st = served.server.stats();
    drop(served);
    let truth = drive.truth();
    write_truth(n.truth_out.as_ref(), &truth)?;
    eprintln!(
        "faultline emulate: stopped after {} connections ({} reads, {} writes, {} with FUA, {} flushes, {} drive errors, {} refused), the drive powered {}, ground truth: {} extents",
        st.connections,
        st.reads,
        st.writes,
        st.fua_writes,
        st.flushes,
        st.drive_errors,
        st.refused,
        drive_state(&drive),
        truth.len()
    );
    Ok(Exit::Clean)
}

/// What the single-port drive's emulator prints once it listens.
fn say_serving(a: &EmulateArgs, served: &Served, quarch: Option<&QuarchEmu>, service: Duration, model: SimModel, seed: u64) -> Result<()> {
    let n = &a.nbd;
    let (sector_bytes, atomic_bytes) = (n.sector_bytes.unwrap_or(512), n.atomic_bytes.unwrap_or(4096));
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", served.endpoint())?;
    let kept = n.sim_dir.as_ref().map(|d| format!(", kept in {}", d.display())).unwrap_or_default();
    writeln!(
        out,
        "emulating: simulated drive of {} bytes ({model}, seed {seed}, {sector_bytes}-byte sectors, {atomic_bytes}-byte atomic unit, one completion per {} us{kept}) over NBD",
        a.capacity_bytes,
        service.as_micros()
    )?;
    writeln!(out, "nbd uri: {}", served.uri())?;
    writeln!(out, "qemu: -drive {},cache.writeback=on,if=none,id=nbd0", served.qemu_drive())?;
    if let Some(e) = quarch {
        writeln!(out, "power: quarch+serial://{}", e.endpoint())?;
    }
    writeln!(out, "stop with SIGINT (Ctrl-C) or SIGTERM")?;
    out.flush()?;
    Ok(())
}

/// The simulated dual-port drive (`--model dual-*`): one NBD server per port, each with one
/// export named after its port (`A`, `B`), on `--unix PATH` as `PATH.A` and `PATH.B`, or on
/// `--tcp ADDR` and the port after it (two free ports for port 0); with `--quarch-pty`, a
/// hot-plug module that cuts the whole drive's power and pulls either port
/// (`SIGnal:PORT_A:SOURce 0`). Two hosts, or two agents of one, each reach one port.
fn serve_dual(a: &EmulateArgs, cfg: SimConfig, model: faultline_fixtures::DualModel, service: Duration) -> Result<Exit> {
    let n = &a.nbd;
    if n.export.is_some() {
        bail!("--export: a dual-port drive's exports are named after its ports, A and B");
    }
    let seed = cfg.seed;
    let dcfg = DualConfig { model, ports: 2, port_mbps: None };
    let drive = match &n.sim_dir {
        Some(dir) => DualSim::persistent(cfg, dcfg, dir).with_context(|| format!("--sim-dir {}", dir.display()))?,
        None => DualSim::new(cfg, dcfg),
    };
    let servers = serve_ports(a, &drive, service, seed)?;
    let quarch = if n.quarch_pty {
        let e = QuarchEmu::serial_dual(drive.power(), drive.link(), seed).context("--quarch-pty: cannot open a pseudo-terminal")?;
        install_log(&e.tap(), drive.power(), Arc::new(AtomicU64::new(0)), a.quiet);
        Some(e)
    } else {
        None
    };
    let stop = stop_on_signals()?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "emulating: simulated dual-port drive of {} bytes ({}, seed {seed}, one completion per {} us per port) over NBD, one export per port",
        a.capacity_bytes,
        a.model.name(),
        service.as_micros()
    )?;
    for (p, s) in ["A", "B"].iter().zip(&servers) {
        writeln!(out, "nbd uri {p}: {}", s.uri())?;
    }
    if let Some(e) = &quarch {
        writeln!(out, "power: quarch+serial://{} (its PORT_A and PORT_B signals pull a port)", e.endpoint())?;
    }
    writeln!(out, "stop with SIGINT (Ctrl-C) or SIGTERM")?;
    out.flush()?;
    drop(out);
    wait_for_stop(&stop);
    drop(quarch);
    stop_dual(n.sim_dir.is_some(), n.truth_out.as_ref(), servers, &drive)
}

/// Serves each port of the dual-port drive on its own socket or TCP port.
fn serve_ports(a: &EmulateArgs, drive: &DualSim, service: Duration, seed: u64) -> Result<Vec<Served>> {
    let mut servers = Vec::new();
    for p in 0..2u8 {
        let name = if p == 0 { "A" } else { "B" };
        let export = Export {
            name: name.into(),
            description: format!("faultline simulated dual-port drive ({}, seed {seed}), port {name}", a.model.name()),
            service_time: service,
        };
        let log = event_log(a.quiet, if p == 0 { "nbd A" } else { "nbd B" });
        let served = match (&a.unix, a.tcp) {
            (Some(path), None) => {
                let sock = PathBuf::from(format!("{}.{name}", path.display()));
                sim_nbd::serve(drive.port(p), export, Listen::Unix(&sock), log)
                    .with_context(|| format!("--unix {} (port {name})", sock.display()))?
            }
            (None, Some(addr)) => {
                let at = if addr.port() == 0 || p == 0 { addr } else { std::net::SocketAddr::new(addr.ip(), addr.port().wrapping_add(1)) };
                sim_nbd::serve(drive.port(p), export, Listen::Tcp(at), log).with_context(|| format!("--tcp {at} (port {name})"))?
            }
            _ => bail!("emulate nbd listens on --unix PATH or --tcp ADDR (one of them), not on a pty"),
        };
        servers.push(served);
    }
    Ok(servers)
}

/// Stops the dual-port drive's servers, saves it (`--sim-dir`), writes its ground truth
/// (`--truth-out`) and says what each port served.
fn stop_dual(keep: bool, truth_out: Option<&PathBuf>, servers: Vec<Served>, drive: &DualSim) -> Result<Exit> {
    let stats: Vec<_> = servers.iter().map(|s| s.server.stats()).collect();
    drop(servers);
    if keep {
        drive.persist().context("--sim-dir: cannot save the drive")?;
    }
    let truth = drive.truth();
    write_truth(truth_out, &truth)?;
    for (p, st) in ["A", "B"].iter().zip(stats) {
        eprintln!(
            "faultline emulate: port {p}: {} connections ({} reads, {} writes, {} with FUA, {} flushes, {} drive errors, {} refused)",
            st.connections, st.reads, st.writes, st.fua_writes, st.flushes, st.drive_errors, st.refused
        );
    }
    eprintln!(
        "faultline emulate: stopped, the drive powered {}, ground truth: {} extents",
        if drive.present(0) || drive.present(1) { "on" } else { "off" },
        truth.len()
    );
    Ok(Exit::Clean)
}
