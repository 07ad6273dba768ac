//! `faultline lab host --export URI --name NAME`: one lab guest as a host of a run across hosts
//! (docs/DUALPORT.md, "Two hosts, one drive"), and the transport of its agent. It becomes QEMU
//! (exec) with the machine `faultline::lab::host` describes, its agent's port on this process's
//! stdin and stdout.

use crate::Exit;
use anyhow::{bail, Context, Result};
use clap::Args;
use faultline::lab::{host, setup};
use faultline_drivers::nbd::{Endpoint, NbdUri};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(Args)]
pub(super) struct HostArgs {
    /// The NBD export the guest's NVMe namespace is (`nbd+unix:///A?socket=PATH`, as the
    /// coordinator serves one port of the simulated drive).
    #[arg(long)]
    export: String,
    /// The host's name, for its console log's file name.
    #[arg(long)]
    name: String,
    /// Where the guest's console goes (default: `lab-host-NAME.console.log` beside the export's
    /// socket).
    #[arg(long)]
    console: Option<PathBuf>,
    /// Cache directory (default: $FAULTLINE_LAB_CACHE, else ~/.cache/faultline/lab).
    #[arg(long)]
    cache: Option<PathBuf>,
}

pub(super) fn cmd_host(a: HostArgs) -> Result<Exit> {
    let uri = NbdUri::parse(&a.export).map_err(anyhow::Error::msg).with_context(|| format!("--export {}", a.export))?;
    let Endpoint::Unix(socket) = &uri.endpoint else {
        bail!("--export {}: the lab's guests reach an export on a Unix socket (nbd+unix:///NAME?socket=PATH)", a.export)
    };
    if a.name.is_empty() || !a.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        bail!("--name {:?}: letters, digits, - and _ only (it names the console log)", a.name);
    }
    let cache = super::cache_dir(a.cache.as_deref())?;
    let lab = setup::locate(&cache)?;
    let me = std::env::current_exe().context("cannot tell where this faultline binary is")?;
    // The guest runs this binary's agent (a no-op when `lab setup` put this binary there).
    setup::refresh_faultline(&cache, &lab, &me)?;
    let console = a.console.unwrap_or_else(|| socket.with_file_name(format!("lab-host-{}.console.log", a.name)));
    let mut c = host::command(&lab, socket, &uri.export, &console);
    // This process becomes the machine: its stdin and stdout are the agent's port.
    let e = c.exec();
    Err(e).with_context(|| format!("cannot start {}", lab.qemu.display()))
}
