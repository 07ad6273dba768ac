//! One lab guest as a host of a run across hosts (docs/DUALPORT.md, "Two hosts, one drive"),
//! the machine `faultline lab host` becomes: QEMU with one NVMe controller whose namespace is
//! an NBD export (one port of the drive the coordinator serves) and a virtio-serial port wired
//! to the process's stdin and stdout, on which the guest's init runs `faultline agent --stdio
//! --target /dev/nvme0n1`. So the coordinator's transport is the machine itself: killing the
//! transport's process group is the host's power cut (`host_power = "kill"`), and dialling
//! again boots it.

use super::machine::{qemu_escape, NQN, SERIAL};
use super::setup::Lab;
use std::path::Path;
use std::process::Command;

/// The virtio-serial port's name, which the guest's init looks for.
pub const AGENT_PORT: &str = "dev.faultline.agent";

/// The QEMU command line of a host guest: its namespace the export `export` on the Unix socket
/// `socket`, its console into `console`, its agent's port on QEMU's stdin and stdout, with
/// `cpus` virtual CPUs.
pub fn command(lab: &Lab, socket: &Path, export: &str, console: &Path, cpus: u8) -> Command {
    let mut c = Command::new(&lab.qemu);
    c.env("LD_LIBRARY_PATH", &lab.lib_path);
    c.arg("-L").arg(&lab.firmware);
    c.args(["-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", "1024", "-smp", &cpus.to_string()]);
    c.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
    c.args(["-chardev", &format!("file,id=con,path={}", qemu_escape(console)), "-serial", "chardev:con"]);
    c.args(["-chardev", "stdio,id=agent,signal=off"]);
    c.args(["-device", "virtio-serial-pci,id=vser", "-device", &format!("virtserialport,bus=vser.0,chardev=agent,name={AGENT_PORT}")]);
    // iomem=relaxed: as the lab machine's (`machine.rs`), so CAP reads through `resource0`.
    let append = "console=ttyS0 panic=-1 loglevel=4 iomem=relaxed faultline.multipath=N faultline.mode=agent";
    c.arg("-kernel").arg(&lab.kernel).arg("-initrd").arg(&lab.initrd).args(["-append", append]);
    c.args(["-device", "pcie-root-port,id=rp-a,bus=pcie.0,chassis=1,slot=1,addr=0x10"]);
    c.args(["-device", &format!("nvme-subsys,id=subsys0,nqn={NQN}")]);
    let export = format!(",export={}", export.replace(',', ",,"));
    c.args([
        "-drive",
        &format!("driver=nbd,server.type=unix,server.path={}{export},if=none,id=d0,cache.writeback=on,discard=unmap", qemu_escape(socket)),
    ]);
    c.args(["-device", &format!("nvme,id=ctrl-a,serial={SERIAL},subsys=subsys0,bus=rp-a")]);
    c.args(["-device", "nvme-ns,drive=d0,nsid=1,shared=on"]);
    c
}
