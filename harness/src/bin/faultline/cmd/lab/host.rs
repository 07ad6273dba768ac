//! `faultline lab host --export URI --name NAME`: one lab guest as a host of a run across hosts
//! (docs/DUALPORT.md, "Two hosts, one drive"), and the transport of its agent. It becomes QEMU
//! (exec), with one NVMe controller whose namespace is the NBD export (one port of the drive
//! the coordinator serves) and a virtio-serial port wired to this process's stdin and stdout,
//! on which the guest's init runs `faultline agent --stdio --target /dev/nvme0n1`. So the
//! coordinator's transport is the machine itself: killing the transport's process group is the
//! host's power cut (`host_power = "kill"`), and dialling again boots it.

use super::machine::{qemu_escape, NQN, SERIAL};
use super::setup;
use crate::Exit;
use anyhow::{bail, Context, Result};
use clap::Args;
use faultline_drivers::nbd::{Endpoint, NbdUri};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The virtio-serial port's name, which the guest's init looks for.
pub const AGENT_PORT: &str = "dev.faultline.agent";

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
    let cache = setup::cache_dir(a.cache.as_deref())?;
    let lab = setup::locate(&cache)?;
    let me = std::env::current_exe().context("cannot tell where this faultline binary is")?;
    // The guest runs this binary's agent (a no-op when `lab setup` put this binary there).
    setup::refresh_faultline(&cache, &lab, &me)?;
    let console = a.console.unwrap_or_else(|| socket.with_file_name(format!("lab-host-{}.console.log", a.name)));
    let mut c = Command::new(&lab.qemu);
    c.env("LD_LIBRARY_PATH", &lab.lib_path);
    c.arg("-L").arg(&lab.firmware);
    c.args(["-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", "1024", "-smp", "2"]);
    c.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
    c.args(["-chardev", &format!("file,id=con,path={}", qemu_escape(&console)), "-serial", "chardev:con"]);
    c.args(["-chardev", "stdio,id=agent,signal=off"]);
    c.args(["-device", "virtio-serial-pci,id=vser", "-device", &format!("virtserialport,bus=vser.0,chardev=agent,name={AGENT_PORT}")]);
    let append = "console=ttyS0 panic=-1 loglevel=4 faultline.multipath=N faultline.mode=agent";
    c.arg("-kernel").arg(&lab.kernel).arg("-initrd").arg(&lab.initrd).args(["-append", append]);
    c.args(["-device", "pcie-root-port,id=rp-a,bus=pcie.0,chassis=1,slot=1,addr=0x10"]);
    c.args(["-device", &format!("nvme-subsys,id=subsys0,nqn={NQN}")]);
    let export = format!(",export={}", uri.export.replace(',', ",,"));
    c.args([
        "-drive",
        &format!("driver=nbd,server.type=unix,server.path={}{export},if=none,id=d0,cache.writeback=on", qemu_escape(socket)),
    ]);
    c.args(["-device", &format!("nvme,id=ctrl-a,serial={SERIAL},subsys=subsys0,bus=rp-a")]);
    c.args(["-device", "nvme-ns,drive=d0,nsid=1,shared=on"]);
    // This process becomes the machine: its stdin and stdout are the agent's port.
    let e = c.exec();
    Err(e).with_context(|| format!("cannot start {}", lab.qemu.display()))
}
