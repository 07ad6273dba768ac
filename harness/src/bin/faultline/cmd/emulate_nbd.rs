//! `faultline emulate nbd --unix PATH | --tcp ADDR`: the simulated drive served over NBD
//! (`faultline_fixtures::nbd`), with every fault model, optionally kept in a directory
//! (`--sim-dir`), for QEMU's NBD client (the lab's shared namespace), qemu-io and qemu-img. The
//! sector decoder of `faultline::format` names each write to the drive. With `--quarch-pty`, a
//! Quarch hot-plug module on a pseudo-terminal switches the same drive's power; `--truth-out`
//! writes the drive's ground truth when the emulator stops. Runs until SIGINT or SIGTERM.

use super::emulate::{drive_state, install_log, stop_on_signals, EmulateArgs};
use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use faultline::scenario::SimModel;
use faultline_fixtures::emu::{QuarchEmu, QuarchKind, QuarchModule};
use faultline_fixtures::nbd::{NbdConfig, NbdServer};
use faultline_fixtures::{DualConfig, DualSim, SimConfig, SimDrive, TruthContract};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
pub enum ContractArg {
    /// A write is durable once it completes (a drive with power-loss protection).
    Plp,
    /// A write is durable once a later flush completes, or at once with FUA.
    Flush,
}

/// The options only `emulate nbd` takes.
#[derive(clap::Args)]
pub struct NbdArgs {
    /// NBD only: keep the drive in this directory (created if needed; reloaded when it was
    /// saved there before with the same model, capacity, sector size and seed). Saved at every
    /// power cut and when the emulator stops; ground truth starts afresh at each start.
    #[arg(long, value_name = "DIR")]
    sim_dir: Option<PathBuf>,
    /// NBD only: the drive's sector size, 512 or 4096 (give the guest's NVMe namespace the same
    /// logical block size: write ids are read per sector). Default 512.
    #[arg(long)]
    sector_bytes: Option<u32>,
    /// NBD only: the drive's atomic write unit in bytes, a multiple of the sector. Default 4096.
    #[arg(long)]
    atomic_bytes: Option<u32>,
    /// NBD only: the promise ground truth holds the drive to. Default plp.
    #[arg(long, value_enum)]
    contract: Option<ContractArg>,
    /// NBD only: while operations are in flight, the drive completes one per this many
    /// microseconds, so that a cut finds writes in flight (0: as fast as possible). Default 100.
    #[arg(long, value_name = "US")]
    service_us: Option<u64>,
    /// NBD only: the drive's queue depth. Default 64.
    #[arg(long)]
    queue_depth: Option<usize>,
    /// NBD only: the export's name (the default, empty name reaches it too). Default "sim".
    #[arg(long)]
    export: Option<String>,
    /// NBD only: also serve a Quarch hot-plug module on a new pseudo-terminal, switching this
    /// drive's power (its path is printed).
    #[arg(long)]
    quarch_pty: bool,
    /// NBD only: when stopped, write the drive's ground truth to this file (a JSON list of
    /// extents: offset, length, class, write_id).
    #[arg(long, value_name = "FILE")]
    truth_out: Option<PathBuf>,
}

impl NbdArgs {
    /// Errors naming the first NBD-only option given to another emulator.
    pub fn refuse_outside_nbd(&self) -> Result<()> {
        let given = [
            ("--sim-dir", self.sim_dir.is_some()),
            ("--sector-bytes", self.sector_bytes.is_some()),
            ("--atomic-bytes", self.atomic_bytes.is_some()),
            ("--contract", self.contract.is_some()),
            ("--service-us", self.service_us.is_some()),
            ("--queue-depth", self.queue_depth.is_some()),
            ("--export", self.export.is_some()),
            ("--quarch-pty", self.quarch_pty),
            ("--truth-out", self.truth_out.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|g| g.1) {
            bail!("{flag}: only `emulate nbd` takes it");
        }
        Ok(())
    }
}

pub fn cmd_emulate_nbd(a: EmulateArgs) -> Result<Exit> {
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
    let model: SimModel = a.model.sim_model();
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
        model: model.fault_model(),
        contract,
    };
    let service = Duration::from_micros(n.service_us.unwrap_or(100));
    if let Some(dual) = a.model.dual_model() {
        return serve_dual(&a, cfg, dual.dual_model(), service);
    }
    let drive = match &n.sim_dir {
        Some(dir) => SimDrive::persistent(cfg, dir).with_context(|| format!("--sim-dir {}", dir.display()))?,
        None => SimDrive::new(cfg),
    };
    let export = n.export.clone().unwrap_or_else(|| "sim".to_string());
    let nbd_cfg = NbdConfig {
        export_name: export.clone(),
        description: format!("faultline simulated drive ({model}, seed {seed})"),
        service_time: service,
    };
    let mut server = NbdServer::start(drive.clone(), Box::new(faultline::format::claimed_write_id), nbd_cfg);
    if !a.quiet {
        server.on_event(|e| eprintln!("nbd: {e}"));
    }
    let (endpoint, uri, qemu) = match (&a.unix, a.tcp) {
        (Some(path), None) => {
            server.listen_unix(path).with_context(|| format!("--unix {}", path.display()))?;
            let p = path.display();
            (
                p.to_string(),
                format!("nbd+unix:///{export}?socket={p}"),
                format!("driver=nbd,server.type=unix,server.path={p},export={export}"),
            )
        }
        (None, Some(addr)) => {
            let bound = server.listen_tcp(addr).with_context(|| format!("--tcp {addr}"))?;
            let (host, port) = (bound.ip(), bound.port());
            (
                bound.to_string(),
                format!("nbd://{bound}/{export}"),
                format!("driver=nbd,server.type=inet,server.host={host},server.port={port},export={export}"),
            )
        }
        _ => bail!("emulate nbd listens on --unix PATH or --tcp ADDR (one of them), not on a pty"),
    };
    let quarch = if n.quarch_pty {
        let m = QuarchModule { kind: QuarchKind::HotPlug, power: drive.power() };
        let e = QuarchEmu::serial(m, seed).context("--quarch-pty: cannot open a pseudo-terminal")?;
        install_log(&e.tap(), drive.power(), Arc::new(AtomicU64::new(0)), a.quiet);
        Some(e)
    } else {
        None
    };
    let stop = stop_on_signals()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {endpoint}")?;
    let kept = n.sim_dir.as_ref().map(|d| format!(", kept in {}", d.display())).unwrap_or_default();
    writeln!(
        out,
        "emulating: simulated drive of {} bytes ({model}, seed {seed}, {sector_bytes}-byte sectors, {atomic_bytes}-byte atomic unit, one completion per {} us{kept}) over NBD",
        a.capacity_bytes,
        service.as_micros()
    )?;
    writeln!(out, "nbd uri: {uri}")?;
    writeln!(out, "qemu: -drive {qemu},cache.writeback=on,if=none,id=nbd0")?;
    if let Some(e) = &quarch {
        writeln!(out, "power: quarch+serial://{}", e.endpoint())?;
    }
    writeln!(out, "stop with SIGINT (Ctrl-C) or SIGTERM")?;
    out.flush()?;
    drop(out);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(quarch);
    let st = server.stats();
    drop(server);
    let truth = drive.truth();
    if let Some(path) = &n.truth_out {
        let text = serde_json::to_string_pretty(&truth)?;
        std::fs::write(path, text).with_context(|| format!("--truth-out: cannot write {}", path.display()))?;
    }
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
    let mut servers = Vec::new();
    let mut uris = Vec::new();
    for p in 0..2u8 {
        let name = if p == 0 { "A" } else { "B" };
        let nbd_cfg = NbdConfig {
            export_name: name.into(),
            description: format!("faultline simulated dual-port drive ({}, seed {seed}), port {name}", a.model.name()),
            service_time: service,
        };
        let mut server = NbdServer::start(drive.port(p), Box::new(faultline::format::claimed_write_id), nbd_cfg);
        if !a.quiet {
            server.on_event(move |e| eprintln!("nbd {name}: {e}"));
        }
        let uri = match (&a.unix, a.tcp) {
            (Some(path), None) => {
                let sock = PathBuf::from(format!("{}.{name}", path.display()));
                server.listen_unix(&sock).with_context(|| format!("--unix {} (port {name})", sock.display()))?;
                format!("nbd+unix:///{name}?socket={}", sock.display())
            }
            (None, Some(addr)) => {
                let at = if addr.port() == 0 || p == 0 { addr } else { std::net::SocketAddr::new(addr.ip(), addr.port().wrapping_add(1)) };
                let bound = server.listen_tcp(at).with_context(|| format!("--tcp {at} (port {name})"))?;
                format!("nbd://{bound}/{name}")
            }
            _ => bail!("emulate nbd listens on --unix PATH or --tcp ADDR (one of them), not on a pty"),
        };
        servers.push(server);
        uris.push(uri);
    }
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
    for (p, uri) in ["A", "B"].iter().zip(&uris) {
        writeln!(out, "nbd uri {p}: {uri}")?;
    }
    if let Some(e) = &quarch {
        writeln!(out, "power: quarch+serial://{} (its PORT_A and PORT_B signals pull a port)", e.endpoint())?;
    }
    writeln!(out, "stop with SIGINT (Ctrl-C) or SIGTERM")?;
    out.flush()?;
    drop(out);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(quarch);
    let stats: Vec<_> = servers.iter().map(NbdServer::stats).collect();
    drop(servers);
    if n.sim_dir.is_some() {
        drive.persist().context("--sim-dir: cannot save the drive")?;
    }
    let truth = drive.truth();
    if let Some(path) = &n.truth_out {
        std::fs::write(path, serde_json::to_string_pretty(&truth)?)
            .with_context(|| format!("--truth-out: cannot write {}", path.display()))?;
    }
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
