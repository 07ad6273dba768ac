//! `faultline lab host --export URI --name NAME`: one lab guest as a host of a run across hosts
//! (docs/DUALPORT.md, "Two hosts, one drive"), and the transport of its agent. It becomes QEMU
//! (exec) with the machine `faultline::lab::host` describes, its agent's port on this process's
//! stdin and stdout.

use super::args::{cache_dir, cpus, HostArgs};
use crate::Exit;
use anyhow::{bail, Context, Result};
use faultline::lab::{host, setup};
use faultline_drivers::nbd::{Endpoint, NbdUri};
use std::os::unix::process::CommandExt;

pub(super) fn cmd_host(a: HostArgs) -> Result<Exit> {
    let uri = NbdUri::parse(&a.export).map_err(anyhow::Error::msg).with_context(|| format!("--export {}", a.export))?;
    let Endpoint::Unix(socket) = &uri.endpoint else {
        bail!("--export {}: the lab's guests reach an export on a Unix socket (nbd+unix:///NAME?socket=PATH)", a.export)
    };
    if a.name.is_empty() || !a.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        bail!("--name {:?}: letters, digits, - and _ only (it names the console log)", a.name);
    }
    let cache = cache_dir(a.cache.as_deref())?;
    let lab = setup::locate(&cache)?;
    let me = std::env::current_exe().context("cannot tell where this faultline binary is")?;
    // The guest runs this binary's agent (a no-op when `lab setup` put this binary there).
    setup::refresh_faultline(&cache, &lab, &me)?;
    let console = a.console.unwrap_or_else(|| socket.with_file_name(format!("lab-host-{}.console.log", a.name)));
    let mut c = host::command(&lab, socket, &uri.export, &console, cpus(a.cpus)?);
    // This process becomes the machine: its stdin and stdout are the agent's port.
    let e = c.exec();
    Err(e).with_context(|| format!("cannot start {}", lab.qemu.display()))
}
