//! The lab machine: QEMU (q35, TCG) with a dual-port NVM subsystem, a 9p share, the serial
//! console in a file (or on the terminal), QMP on a unix socket; and the host side of the
//! share's port requests (the guest asks for one controller to be unplugged or plugged back).
//!
//! The subsystem: one `nvme-subsys`, two `nvme` controllers with the same serial (as every
//! controller of a subsystem must have), port A behind root port `rp-a` (slot 0x10, so PCI
//! 0000:01:00.0 in the guest) and port B behind `rp-b` (0000:02:00.0), each hot-unpluggable
//! (on `pcie.0` directly QEMU refuses to unplug), and one `nvme-ns` with `shared=on` that both
//! controllers attach: a dual-port drive.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::qmp::Qmp;
use super::setup::Lab;

/// The serial number both controllers report.
pub const SERIAL: &str = "FAULTLINELAB0001";
/// The NVM subsystem's NQN.
pub const NQN: &str = "nqn.2026-12.dev.faultline:lab";

/// One port of the dual-port drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    A,
    B,
}

impl Port {
    pub fn parse(s: &str) -> Result<Port> {
        match s {
            "A" | "a" => Ok(Port::A),
            "B" | "b" => Ok(Port::B),
            _ => bail!("no lab port {s:?} (the lab's ports are A and B)"),
        }
    }
    fn id(self) -> &'static str {
        match self {
            Port::A => "ctrl-a",
            Port::B => "ctrl-b",
        }
    }
    fn bus(self) -> &'static str {
        match self {
            Port::A => "rp-a",
            Port::B => "rp-b",
        }
    }
    /// The controller's PCI address in the guest.
    pub fn bdf(self) -> &'static str {
        match self {
            Port::A => "0000:01:00.0",
            Port::B => "0000:02:00.0",
        }
    }
    fn device_args(self) -> serde_json::Value {
        json!({ "driver": "nvme", "id": self.id(), "serial": SERIAL, "subsys": "subsys0", "bus": self.bus() })
    }
}

/// What backs the shared namespace. A file now; an NBD export (the simulated drive behind
/// `faultline emulate nbd`, or any other server) through QEMU's own NBD client.
#[derive(Clone, Debug)]
pub enum Drive {
    /// A raw image file.
    File(PathBuf),
    /// An NBD server on a unix socket, and the export's name (`None`: the server's default).
    Nbd(PathBuf, Option<String>),
}

impl Drive {
    fn qemu_arg(&self) -> String {
        match self {
            Drive::File(p) => format!("file={},format=raw,if=none,id=d0", qemu_escape(p)),
            Drive::Nbd(s, export) => {
                let export = export.as_ref().map(|e| format!(",export={}", e.replace(',', ",,"))).unwrap_or_default();
                format!("driver=nbd,server.type=unix,server.path={}{export},if=none,id=d0,cache.writeback=on", qemu_escape(s))
            }
        }
    }
}

/// QEMU's option syntax doubles commas inside a value.
pub(super) fn qemu_escape(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

/// How to start one machine.
pub struct Spec<'a> {
    pub lab: &'a Lab,
    /// Where the console log, QMP socket and QEMU's stderr go.
    pub lab_dir: &'a Path,
    /// The 9p share (`/share` in the guest).
    pub share: &'a Path,
    pub drive: Drive,
    pub multipath: bool,
    /// The guest's shell on this terminal instead of running `share/lab/cmd`.
    pub shell: bool,
    /// A host tty (the Quarch emulator's pty) on the guest's second UART, `/dev/ttyS1`.
    pub uart: Option<PathBuf>,
    /// A host tty (a USB board's emulator, `lab run --usb`) on the guest's third UART,
    /// `/dev/ttyS2`, which the guest bridges to the board's gadget. Needs `uart`.
    pub usb_uart: Option<PathBuf>,
    /// A short private directory for the QMP socket (a unix socket's path is limited to 107
    /// bytes; `lab_dir` may be longer).
    pub sock_dir: &'a Path,
}

/// What the host asks of the machine while it runs, from another thread (the lab's Quarch
/// rig): each call is answered with how long it took, or why it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RigCall {
    /// Unplug every plugged controller (the drive lost power), waiting until each is gone.
    UnplugAll,
    /// Plug back every controller unplugged by `UnplugAll` (the drive has power again).
    PlugAll,
    /// Unplug one controller.
    Unplug(Port),
    /// Plug one controller back.
    Plug(Port),
}

/// A [`RigCall`] and where its answer goes.
pub type RigRequest = (RigCall, std::sync::mpsc::Sender<Result<Duration, String>>);

/// What the host side does besides serving the guest's port requests.
#[derive(Default)]
pub struct Hooks<'a> {
    /// Calls from the lab's Quarch rig.
    pub rig: Option<std::sync::mpsc::Receiver<RigRequest>>,
    /// Called when the guest asks for the drive's ground truth after cycle N
    /// (`share/lab/truth-req`); its error is the guest's answer.
    pub truth: Option<&'a mut dyn FnMut(u32) -> Result<()>>,
}

impl Spec<'_> {
    pub fn console(&self) -> PathBuf {
        self.lab_dir.join("console.log")
    }
    fn qmp_sock(&self) -> PathBuf {
        self.sock_dir.join("qmp.sock")
    }

    /// The QEMU command line.
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.lab.qemu);
        c.env("LD_LIBRARY_PATH", &self.lab.lib_path);
        let append = format!(
            "console=ttyS0 panic=-1 loglevel=4 faultline.multipath={} faultline.mode={}",
            if self.multipath { "Y" } else { "N" },
            if self.shell { "shell" } else { "run" }
        );
        let console = if self.shell {
            format!("stdio,id=con,signal=off,logfile={}", qemu_escape(&self.console()))
        } else {
            format!("file,id=con,path={}", qemu_escape(&self.console()))
        };
        c.arg("-L").arg(&self.lab.firmware);
        c.args(["-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", "1024", "-smp", "2"]);
        c.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
        c.args(["-chardev", &console, "-serial", "chardev:con"]);
        if let Some(tty) = &self.uart {
            // QEMU's tty backend opens the pty's slave end and sets its line discipline raw.
            c.args(["-chardev", &format!("serial,id=uart1,path={}", qemu_escape(tty)), "-serial", "chardev:uart1"]);
            if let Some(tty) = &self.usb_uart {
                c.args(["-chardev", &format!("serial,id=uart2,path={}", qemu_escape(tty)), "-serial", "chardev:uart2"]);
            }
        }
        c.arg("-kernel").arg(&self.lab.kernel).arg("-initrd").arg(&self.lab.initrd).args(["-append", &append]);
        c.args(["-qmp", &format!("unix:{},server=on,wait=off", qemu_escape(&self.qmp_sock()))]);
        c.args(["-virtfs", &format!("local,path={},mount_tag=lab,security_model=none,id=fs0", qemu_escape(self.share))]);
        c.args(["-device", "pcie-root-port,id=rp-a,bus=pcie.0,chassis=1,slot=1,addr=0x10"]);
        c.args(["-device", "pcie-root-port,id=rp-b,bus=pcie.0,chassis=2,slot=2,addr=0x11"]);
        c.args(["-device", &format!("nvme-subsys,id=subsys0,nqn={NQN}")]);
        c.args(["-drive", &self.drive.qemu_arg()]);
        for p in [Port::A, Port::B] {
            c.args(["-device", &format!("nvme,id={},serial={SERIAL},subsys=subsys0,bus={}", p.id(), p.bus())]);
        }
        c.args(["-device", "nvme-ns,drive=d0,nsid=1,shared=on"]);
        c
    }
}

/// How a machine ended.
pub struct Outcome {
    /// The guest command's exit code (`share/lab/exit-code`); `None` when the guest never
    /// wrote one.
    pub exit_code: Option<i32>,
    pub boot_s: Option<f64>,
    pub total_s: f64,
}

/// The last `n` lines of the console log, for error messages.
pub fn console_tail(path: &Path, n: usize) -> String {
    let s = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts the machine and waits for it to power off. `echo` copies the guest command's
/// output (`share/lab/guest.log`) to stdout as it grows. Fails (the lab failed, not the
/// drive) when QEMU cannot start, the guest does not boot within `boot_timeout`, or the
/// whole run passes `timeout`.
pub fn run(spec: &Spec, boot_timeout: Duration, timeout: Duration, echo: bool, mut hooks: Hooks) -> Result<Outcome> {
    let labctl = spec.share.join("lab");
    std::fs::create_dir_all(&labctl)?;
    for f in ["booted", "exit-code", "guest.log", "req", "rep", "truth-req", "truth-rep", "heartbeat", "dmesg.log"] {
        let _ = std::fs::remove_file(labctl.join(f));
    }
    let _ = std::fs::remove_file(spec.qmp_sock());
    let _ = std::fs::remove_file(spec.console());
    let stderr_path = spec.lab_dir.join("qemu.stderr");
    let stderr = std::fs::File::create(&stderr_path)?;
    let mut cmd = spec.command();
    cmd.stderr(stderr);
    if !spec.shell {
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
    }
    let t0 = Instant::now();
    let mut child = Guard(cmd.spawn().with_context(|| format!("cannot start {}", spec.lab.qemu.display()))?);
    let mut qmp = match Qmp::connect(&spec.qmp_sock(), Duration::from_secs(20)) {
        Ok(q) => Some(q),
        Err(e) => {
            let _ = child.0.try_wait();
            let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            bail!("QEMU did not come up: {e:#}; its stderr: {}", err.trim());
        }
    };
    let mut boot_s = None;
    let mut log_pos = 0u64;
    let mut plugged = Plugged::default();
    let mut beat = Heartbeat::new(labctl.join("heartbeat"));
    let status = loop {
        if let Some(st) = child.0.try_wait()? {
            break st;
        }
        if boot_s.is_none() && labctl.join("booted").exists() {
            boot_s = Some(t0.elapsed().as_secs_f64());
        }
        if boot_s.is_some() && !spec.shell {
            if let Some(last) = beat.stalled(HEARTBEAT_STALL) {
                bail!(
                    "the guest stopped: its heartbeat ({}) has not changed for {} s (its uptime at the last beat: {last}); \
                     the console's last lines ({}):\n{}",
                    labctl.join("heartbeat").display(),
                    HEARTBEAT_STALL.as_secs(),
                    spec.console().display(),
                    console_tail(&spec.console(), 30)
                );
            }
        }
        if boot_s.is_none() && t0.elapsed() > boot_timeout {
            bail!(
                "the guest did not boot within {} s; the console's last lines ({}):\n{}",
                boot_timeout.as_secs(),
                spec.console().display(),
                console_tail(&spec.console(), 30)
            );
        }
        if t0.elapsed() > timeout {
            bail!(
                "the lab run passed its timeout of {} s; the console's last lines:\n{}",
                timeout.as_secs(),
                console_tail(&spec.console(), 30)
            );
        }
        if let Some(q) = qmp.as_mut() {
            serve_request(&labctl, q, &mut plugged)?;
        }
        if let Some(f) = hooks.truth.as_deref_mut() {
            serve_truth(&labctl, f)?;
        }
        if echo {
            log_pos = copy_new(&labctl.join("guest.log"), log_pos);
        }
        match (hooks.rig.as_ref(), qmp.as_mut()) {
            // A call from the rig is answered at once, not at the next tick: the guest's
            // Quarch driver is waiting for the module's reply.
            (Some(rx), Some(q)) => {
                if let Ok((call, answer)) = rx.recv_timeout(Duration::from_millis(50)) {
                    let t = Instant::now();
                    let r = rig_call(q, call, &mut plugged).map(|()| t.elapsed()).map_err(|e| format!("{e:#}"));
                    let _ = answer.send(r);
                }
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    drop(qmp.take());
    if echo {
        copy_new(&labctl.join("guest.log"), log_pos);
    }
    let exit_code = std::fs::read_to_string(labctl.join("exit-code")).ok().and_then(|s| s.trim().parse().ok());
    if exit_code.is_none() && !status.success() {
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        bail!("QEMU exited with {status} before the guest finished: {}\nconsole:\n{}", err.trim(), console_tail(&spec.console(), 30));
    }
    Ok(Outcome { exit_code, boot_s, total_s: t0.elapsed().as_secs_f64() })
}

/// A guest whose heartbeat has not changed for this long has stopped (it beats every 2 s;
/// TCG on a loaded machine stretches that to seconds, never to a minute).
const HEARTBEAT_STALL: Duration = Duration::from_secs(60);

/// The guest's heartbeat file (its uptime, rewritten every 2 s by `init`), read once a second.
struct Heartbeat {
    path: PathBuf,
    last: String,
    changed: Instant,
    read: Instant,
}

impl Heartbeat {
    fn new(path: PathBuf) -> Self {
        let now = Instant::now();
        Heartbeat { path, last: String::new(), changed: now, read: now }
    }

    /// The last beat's text when none came for `stall`.
    fn stalled(&mut self, stall: Duration) -> Option<String> {
        if self.read.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.read = Instant::now();
        let now = std::fs::read_to_string(&self.path).map(|s| s.trim().to_string()).unwrap_or_default();
        if now != self.last {
            (self.last, self.changed) = (now, Instant::now());
        }
        (self.changed.elapsed() >= stall).then(|| if self.last.is_empty() { "none".into() } else { format!("{} s", self.last) })
    }
}

fn copy_new(path: &Path, pos: u64) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else { return pos };
    if f.seek(std::io::SeekFrom::Start(pos)).is_err() {
        return pos;
    }
    let mut buf = Vec::new();
    let n = f.read_to_end(&mut buf).unwrap_or(0);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&buf[..n]);
    let _ = out.flush();
    pos + n as u64
}

/// Which controllers are plugged, and which a power cut unplugged.
#[derive(Default)]
struct Plugged {
    /// Port A and B unplugged (by the guest's request, the rig or a power cut).
    out: [bool; 2],
    /// Unplugged by the last power cut, to be plugged back at power-on.
    by_cut: [bool; 2],
}

fn unplug(q: &mut Qmp, ports: &[Port]) -> Result<()> {
    q.events.clear();
    for p in ports {
        q.execute("device_del", json!({ "id": p.id() }))?;
    }
    for p in ports {
        q.wait_event("DEVICE_DELETED", Duration::from_secs(30), |d| d.get("device").and_then(|v| v.as_str()) == Some(p.id()))?;
    }
    Ok(())
}

fn plug(q: &mut Qmp, p: Port) -> Result<()> {
    q.execute("device_add", p.device_args()).map(|_| ())
}

/// Carries out one call of the lab's Quarch rig.
fn rig_call(q: &mut Qmp, call: RigCall, st: &mut Plugged) -> Result<()> {
    let idx = |p: Port| p as usize;
    match call {
        RigCall::UnplugAll => {
            // Both at once: the drive went dark for both ports at the same instant.
            let ports: Vec<Port> = [Port::A, Port::B].into_iter().filter(|&p| !st.out[idx(p)]).collect();
            unplug(q, &ports)?;
            for p in ports {
                st.out[idx(p)] = true;
                st.by_cut[idx(p)] = true;
            }
            Ok(())
        }
        RigCall::PlugAll => {
            for p in [Port::A, Port::B] {
                if st.by_cut[idx(p)] {
                    plug(q, p)?;
                    st.out[idx(p)] = false;
                    st.by_cut[idx(p)] = false;
                }
            }
            Ok(())
        }
        RigCall::Unplug(p) if st.out[idx(p)] => bail!("port {p:?} is unplugged already"),
        RigCall::Unplug(p) => {
            unplug(q, &[p])?;
            st.out[idx(p)] = true;
            Ok(())
        }
        RigCall::Plug(p) if !st.out[idx(p)] => bail!("port {p:?} is plugged already"),
        RigCall::Plug(p) if st.by_cut[idx(p)] => bail!("port {p:?} is unplugged because the drive is powered off"),
        RigCall::Plug(p) => {
            plug(q, p)?;
            st.out[idx(p)] = false;
            Ok(())
        }
    }
}

/// The guest's request for the drive's ground truth after a cycle (`share/lab/truth-req`:
/// the cycle's number), answered in `share/lab/truth-rep` (`ok` or `error WHY`).
fn serve_truth(labctl: &Path, f: &mut dyn FnMut(u32) -> Result<()>) -> Result<()> {
    let req_path = labctl.join("truth-req");
    let Ok(req) = std::fs::read_to_string(&req_path) else { return Ok(()) };
    let _ = std::fs::remove_file(&req_path);
    let r = req.trim().parse::<u32>().map_err(|_| anyhow::anyhow!("truth request {req:?} is not a cycle number")).and_then(&mut *f);
    let rep = match r {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("error {e:#}\n"),
    };
    let tmp = labctl.join("truth-rep.tmp");
    std::fs::write(&tmp, rep)?;
    std::fs::rename(&tmp, labctl.join("truth-rep"))?;
    Ok(())
}

/// One request from the guest (`share/lab/req`: `del A`, `add B`): unplugs or plugs back a
/// controller through QMP and answers in `share/lab/rep` (`ok MS` or `error WHY`).
fn serve_request(labctl: &Path, q: &mut Qmp, st: &mut Plugged) -> Result<()> {
    let req_path = labctl.join("req");
    let Ok(req) = std::fs::read_to_string(&req_path) else { return Ok(()) };
    let _ = std::fs::remove_file(&req_path);
    let t = Instant::now();
    let r = (|| -> Result<()> {
        let mut w = req.split_whitespace();
        match (w.next(), w.next().map(Port::parse).transpose()?) {
            (Some("del"), Some(p)) => rig_call(q, RigCall::Unplug(p), st),
            (Some("add"), Some(p)) => rig_call(q, RigCall::Plug(p), st),
            _ => bail!("unknown lab request {req:?} (del A|B, add A|B)"),
        }
    })();
    let rep = match r {
        Ok(()) => format!("ok {}\n", t.elapsed().as_millis()),
        Err(e) => format!("error {e:#}\n"),
    };
    let tmp = labctl.join("rep.tmp");
    std::fs::write(&tmp, rep)?;
    std::fs::rename(&tmp, labctl.join("rep"))?;
    Ok(())
}
