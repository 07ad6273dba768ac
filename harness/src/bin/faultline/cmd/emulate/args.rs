//! `faultline emulate`'s arguments: the device, where it listens, the simulated drive behind it,
//! and the options only `emulate nbd` takes.

use crate::args::ModelParser;
use anyhow::{bail, Result};
use clap::ValueEnum;
use faultline::scenario::NamedModel;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    pub device: Device,
    /// Serve on a new pseudo-terminal (its path is printed).
    #[arg(long, conflicts_with_all = ["tcp", "unix"])]
    pub pty: bool,
    /// Quarch or NBD: listen on this TCP address. quarchpy dials port 9760 only: give
    /// 127.0.0.1:9760, or another loopback address with port 9760 (127.0.0.2:9760, ...).
    #[arg(long, value_name = "ADDR")]
    pub tcp: Option<SocketAddr>,
    /// NBD only: listen on a Unix socket at this path.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<std::path::PathBuf>,
    /// Quarch only: the kind of module.
    #[arg(long, value_enum, default_value = "hotplug")]
    pub module: ModuleArg,
    /// The simulated drive's fault model, as `faultline run --model` takes it.
    #[arg(long, value_parser = ModelParser, default_value = "honest-plp")]
    pub model: NamedModel,
    /// The simulated drive's capacity in bytes.
    #[arg(long, alias = "capacity", default_value_t = 64 << 20)]
    pub capacity_bytes: u64,
    /// Seed of the simulated drive and of any garbage the emulator sends. Default: random (with
    /// `--sim-dir`, 1, so that the saved drive reloads).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Do not log each command and reply (NBD: each connection and refusal).
    #[arg(long)]
    pub quiet: bool,
    #[command(flatten)]
    pub nbd: NbdArgs,
}

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
    pub sim_dir: Option<PathBuf>,
    /// NBD only: the drive's sector size, 512 or 4096 (give the guest's NVMe namespace the same
    /// logical block size: write ids are read per sector). Default 512.
    #[arg(long)]
    pub sector_bytes: Option<u32>,
    /// NBD only: the drive's atomic write unit in bytes, a multiple of the sector. Default 4096.
    #[arg(long)]
    pub atomic_bytes: Option<u32>,
    /// NBD only: the promise ground truth holds the drive to. Default plp.
    #[arg(long, value_enum)]
    pub contract: Option<ContractArg>,
    /// NBD only: while operations are in flight, the drive completes one per this many
    /// microseconds, so that a cut finds writes in flight (0: as fast as possible). Default 100.
    #[arg(long, value_name = "US")]
    pub service_us: Option<u64>,
    /// NBD only: the drive's queue depth. Default 64.
    #[arg(long)]
    pub queue_depth: Option<usize>,
    /// NBD only: the export's name (the default, empty name reaches it too). Default "sim".
    #[arg(long)]
    pub export: Option<String>,
    /// NBD only: also serve a Quarch hot-plug module on a new pseudo-terminal, switching this
    /// drive's power (its path is printed).
    #[arg(long)]
    pub quarch_pty: bool,
    /// NBD only: when stopped, write the drive's ground truth to this file (a JSON list of
    /// extents: offset, length, class, write_id).
    #[arg(long, value_name = "FILE")]
    pub truth_out: Option<PathBuf>,
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
