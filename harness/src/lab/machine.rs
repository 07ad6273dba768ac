//! The lab machine: QEMU (q35, TCG) with a dual-port NVM subsystem, a 9p share, the serial
//! console in a file (or on the terminal), QMP on a unix socket; and the host side of the
//! share's port requests (the guest asks for one controller to be unplugged or plugged back).
//!
//! The subsystem: one `nvme-subsys`, two `nvme` controllers with the same serial (as every
//! controller of a subsystem must have), port A behind root port `rp-a` (slot 0x10, so PCI
//! 0000:01:00.0 in the guest) and port B behind `rp-b` (0000:02:00.0), each hot-unpluggable
//! (on `pcie.0` directly QEMU refuses to unplug), and one `nvme-ns` with `shared=on` that both
//! controllers attach: a dual-port drive.

use serde_json::json;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::error::{chain, Doing, IoStep};
use super::qmp::{Qmp, QmpError};
use super::setup::Lab;

/// Why the machine failed (the lab failed, not the drive), or a port request was refused.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error(transparent)]
    Qmp(#[from] QmpError),
    #[error("cannot start {qemu}")]
    Start {
        qemu: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("QEMU did not come up: {why}; its stderr: {stderr}")]
    NoQmp { why: String, stderr: String },
    #[error(
        "the guest stopped: its heartbeat ({heartbeat}) has not changed for {stall_s} s (its uptime at the last beat: {last}); \
         the console's last lines ({console}):\n{tail}"
    )]
    Stalled { heartbeat: PathBuf, stall_s: u64, last: String, console: PathBuf, tail: String },
    #[error("the guest did not boot within {boot_s} s; the console's last lines ({console}):\n{tail}")]
    NoBoot { boot_s: u64, console: PathBuf, tail: String },
    #[error("the lab run passed its timeout of {timeout_s} s; the console's last lines:\n{tail}")]
    Timeout { timeout_s: u64, tail: String },
    #[error("QEMU exited with {status} before the guest finished: {stderr}\nconsole:\n{tail}")]
    Exited { status: ExitStatus, stderr: String, tail: String },
    #[error("no lab port {0:?} (the lab's ports are A and B)")]
    NoPort(String),
    #[error("port {0:?} is unplugged already")]
    Unplugged(Port),
    #[error("port {0:?} is plugged already")]
    Plugged(Port),
    #[error("port {0:?} is unplugged because the drive is powered off")]
    PoweredOff(Port),
    #[error("unknown lab request {0:?} (del A|B, add A|B)")]
    UnknownRequest(String),
    #[error("truth request {0:?} is not a cycle number")]
    BadTruthRequest(String),
    #[error("{0}")]
    Truth(String),
}

type Result<T, E = MachineError> = std::result::Result<T, E>;

/// The serial number both controllers report.
pub const SERIAL: &str = "FAULTLINELAB0001";
/// The NVM subsystem's NQN.
pub const NQN: &str = "nqn.2026-12.dev.faultline:lab";

/// A guest's virtual CPUs when nothing says otherwise (`lab --cpus`, `$FAULTLINE_LAB_CPUS`).
/// Under multi-threaded TCG each is a host thread: two let the guest's ports write at once,
/// but two guests of two each on two host cores cost twice the CPU of two guests of one (two
/// `lab run`s of lab-power-cut-fua.toml side by side: 62 core-seconds at 2 vCPUs, 31 at 1;
/// one alone, 17), since a vCPU the host has descheduled holds up the other's spinning.
pub const DEFAULT_CPUS: u8 = 2;
/// The most vCPUs a guest gets: each is a host thread, and the lab's guests are small.
pub const MAX_CPUS: u8 = 8;

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
            _ => Err(MachineError::NoPort(s.to_string())),
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
    /// `discard=unmap`: QEMU's default (`ignore`) drops the guest's deallocates before the
    /// drive while its namespace still declares that a deallocated block reads zeros
    /// (DLFEAT 001b, hw/nvme/ns.c); with `unmap` they reach the drive (a hole punched in a file,
    /// an NBD trim), as on hardware (docs/LAB.md).
    fn qemu_arg(&self) -> String {
        match self {
            Drive::File(p) => format!("file={},format=raw,if=none,id=d0,discard=unmap", qemu_escape(p)),
            Drive::Nbd(s, export) => {
                let export = export.as_ref().map(|e| format!(",export={}", e.replace(',', ",,"))).unwrap_or_default();
                format!("driver=nbd,server.type=unix,server.path={}{export},if=none,id=d0,cache.writeback=on,discard=unmap", qemu_escape(s))
            }
        }
    }
}

/// QEMU's option syntax doubles commas inside a value.
pub fn qemu_escape(p: &Path) -> String {
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
    /// Virtual CPUs (`-smp`), 1 to [`MAX_CPUS`].
    pub cpus: u8,
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
    /// The namespaces with protection information ([`PI_NAMESPACES`], in order), each on
    /// its raw image; none, or all.
    pub pi_drives: Vec<PathBuf>,
}

pub use super::pi_namespaces::{PiNamespace, PI_NAMESPACES};

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

/// Why the machine did not carry out a [`RigCall`].
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The machine refused or failed it (its error and causes, in one line).
    #[error("{}", chain(.0))]
    Machine(MachineError),
    #[error("the lab machine is gone")]
    Gone,
    #[error("the lab machine did not carry out {call:?} within {timeout:?}")]
    Late { call: RigCall, timeout: Duration },
}

/// A [`RigCall`] and where its answer goes.
pub type RigRequest = (RigCall, std::sync::mpsc::Sender<Result<Duration, CallError>>);

/// Why a cycle's ground truth could not be taken (the simulated drive's own error).
pub type TruthError = Box<dyn std::error::Error + Send + Sync>;

/// What the host side does besides serving the guest's port requests.
#[derive(Default)]
pub struct Hooks<'a> {
    /// Calls from the lab's Quarch rig.
    pub rig: Option<std::sync::mpsc::Receiver<RigRequest>>,
    /// Called when the guest asks for the drive's ground truth after cycle N
    /// (`share/lab/truth-req`); its error is the guest's answer.
    pub truth: Option<&'a mut dyn FnMut(u32) -> std::result::Result<(), TruthError>>,
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
        // iomem=relaxed: Debian's kernel (CONFIG_IO_STRICT_DEVMEM) refuses to map a BAR its
        // driver holds, so CAP (CAP.TO, CAP.NSSRS) is read through `resource0` only so.
        let append = format!(
            "console=ttyS0 panic=-1 loglevel=4 iomem=relaxed faultline.multipath={} faultline.mode={}",
            if self.multipath { "Y" } else { "N" },
            if self.shell { "shell" } else { "run" }
        );
        let console = if self.shell {
            format!("stdio,id=con,signal=off,logfile={}", qemu_escape(&self.console()))
        } else {
            format!("file,id=con,path={}", qemu_escape(&self.console()))
        };
        c.arg("-L").arg(&self.lab.firmware);
        c.args(["-machine", "q35", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", "1024", "-smp", &self.cpus.to_string()]);
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
        for (ns, img) in PI_NAMESPACES.iter().zip(&self.pi_drives) {
            let id = format!("pi{}", ns.nsid);
            c.args(["-drive", &format!("file={},format=raw,if=none,id={id},discard=unmap", qemu_escape(img))]);
            c.args(["-device", &ns.qemu_arg(&id)]);
        }
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

/// Starts the machine and waits for it to power off, copying the guest command's output
/// (`share/lab/guest.log`) to `echo` as it grows. Fails (the lab failed, not the drive) when QEMU cannot start, the
/// guest does not boot within `boot_timeout`, or the whole run passes `timeout`.
pub fn run(
    spec: &Spec,
    boot_timeout: Duration,
    timeout: Duration,
    mut echo: Option<&mut (dyn Write + '_)>,
    mut hooks: Hooks,
) -> Result<Outcome> {
    let mut m = Running::start(spec)?;
    let status = loop {
        if let Some(st) = m.child.0.try_wait().doing(|| "cannot wait for QEMU".into())? {
            break st;
        }
        m.check_limits(boot_timeout, timeout)?;
        m.serve(&mut hooks, echo.as_deref_mut())?;
    };
    m.finish(status, echo)
}

/// A machine running: QEMU, its QMP connection, and what the host side has seen of it.
struct Running<'s> {
    spec: &'s Spec<'s>,
    /// The share's `lab/`, where the guest's requests and the host's answers go.
    labctl: PathBuf,
    stderr_path: PathBuf,
    t0: Instant,
    child: Guard,
    qmp: Option<Qmp>,
    boot_s: Option<f64>,
    log_pos: u64,
    plugged: Plugged,
    beat: Heartbeat,
}

impl<'s> Running<'s> {
    /// Clears what a previous machine left in the share, starts QEMU and connects to its QMP.
    fn start(spec: &'s Spec<'s>) -> Result<Running<'s>> {
        let labctl = spec.share.join("lab");
        std::fs::create_dir_all(&labctl).doing(|| format!("cannot create {}", labctl.display()))?;
        for f in ["booted", "exit-code", "guest.log", "req", "rep", "truth-req", "truth-rep", "heartbeat", "dmesg.log"] {
            let _ = std::fs::remove_file(labctl.join(f));
        }
        let _ = std::fs::remove_file(spec.qmp_sock());
        let _ = std::fs::remove_file(spec.console());
        let stderr_path = spec.lab_dir.join("qemu.stderr");
        let stderr = std::fs::File::create(&stderr_path).doing(|| format!("cannot create {}", stderr_path.display()))?;
        let mut cmd = spec.command();
        cmd.stderr(stderr);
        if !spec.shell {
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
        }
        let t0 = Instant::now();
        let mut child = Guard(cmd.spawn().map_err(|source| MachineError::Start { qemu: spec.lab.qemu.clone(), source })?);
        let qmp = match Qmp::connect(&spec.qmp_sock(), Duration::from_secs(20)) {
            Ok(q) => q,
            Err(e) => {
                let _ = child.0.try_wait();
                let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default().trim().to_string();
                return Err(MachineError::NoQmp { why: chain(&e), stderr });
            }
        };
        let beat = Heartbeat::new(labctl.join("heartbeat"));
        Ok(Running { spec, labctl, stderr_path, t0, child, qmp: Some(qmp), boot_s: None, log_pos: 0, plugged: Plugged::default(), beat })
    }

    /// Fails when the guest did not boot in time, stopped beating, or the run is past its
    /// timeout.
    fn check_limits(&mut self, boot_timeout: Duration, timeout: Duration) -> Result<()> {
        let spec = self.spec;
        if self.boot_s.is_none() && self.labctl.join("booted").exists() {
            self.boot_s = Some(self.t0.elapsed().as_secs_f64());
        }
        let tail = || console_tail(&spec.console(), 30);
        if self.boot_s.is_some() && !spec.shell {
            if let Some(last) = self.beat.stalled(HEARTBEAT_STALL) {
                let (heartbeat, stall_s) = (self.labctl.join("heartbeat"), HEARTBEAT_STALL.as_secs());
                return Err(MachineError::Stalled { heartbeat, stall_s, last, console: spec.console(), tail: tail() });
            }
        }
        if self.boot_s.is_none() && self.t0.elapsed() > boot_timeout {
            return Err(MachineError::NoBoot { boot_s: boot_timeout.as_secs(), console: spec.console(), tail: tail() });
        }
        if self.t0.elapsed() > timeout {
            return Err(MachineError::Timeout { timeout_s: timeout.as_secs(), tail: tail() });
        }
        Ok(())
    }

    /// One tick: the guest's port and truth requests, the guest's output, and a call from the
    /// rig (answered at once, not at the next tick: the guest's Quarch driver is waiting for
    /// the module's reply).
    fn serve(&mut self, hooks: &mut Hooks, echo: Option<&mut (dyn Write + '_)>) -> Result<()> {
        if let Some(q) = self.qmp.as_mut() {
            serve_request(&self.labctl, q, &mut self.plugged)?;
        }
        if let Some(f) = hooks.truth.as_deref_mut() {
            serve_truth(&self.labctl, f)?;
        }
        if let Some(out) = echo {
            self.log_pos = copy_new(&self.labctl.join("guest.log"), self.log_pos, out);
        }
        match (hooks.rig.as_ref(), self.qmp.as_mut()) {
            (Some(rx), Some(q)) => {
                if let Ok((call, answer)) = rx.recv_timeout(Duration::from_millis(50)) {
                    let t = Instant::now();
                    let r = rig_call(q, call, &mut self.plugged).map(|()| t.elapsed()).map_err(CallError::Machine);
                    let _ = answer.send(r);
                }
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
        Ok(())
    }

    /// After QEMU exited: the rest of the guest's output, and its command's exit code.
    fn finish(mut self, status: ExitStatus, echo: Option<&mut (dyn Write + '_)>) -> Result<Outcome> {
        drop(self.qmp.take());
        if let Some(out) = echo {
            copy_new(&self.labctl.join("guest.log"), self.log_pos, out);
        }
        let exit_code = std::fs::read_to_string(self.labctl.join("exit-code")).ok().and_then(|s| s.trim().parse().ok());
        if exit_code.is_none() && !status.success() {
            let stderr = std::fs::read_to_string(&self.stderr_path).unwrap_or_default().trim().to_string();
            return Err(MachineError::Exited { status, stderr, tail: console_tail(&self.spec.console(), 30) });
        }
        Ok(Outcome { exit_code, boot_s: self.boot_s, total_s: self.t0.elapsed().as_secs_f64() })
    }
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

fn copy_new(path: &Path, pos: u64, out: &mut (dyn Write + '_)) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else { return pos };
    if f.seek(std::io::SeekFrom::Start(pos)).is_err() {
        return pos;
    }
    let mut buf = Vec::new();
    let n = f.read_to_end(&mut buf).unwrap_or(0);
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
    q.execute("device_add", p.device_args())?;
    Ok(())
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
        RigCall::Unplug(p) if st.out[idx(p)] => Err(MachineError::Unplugged(p)),
        RigCall::Unplug(p) => {
            unplug(q, &[p])?;
            st.out[idx(p)] = true;
            Ok(())
        }
        RigCall::Plug(p) if !st.out[idx(p)] => Err(MachineError::Plugged(p)),
        RigCall::Plug(p) if st.by_cut[idx(p)] => Err(MachineError::PoweredOff(p)),
        RigCall::Plug(p) => {
            plug(q, p)?;
            st.out[idx(p)] = false;
            Ok(())
        }
    }
}

/// The guest's request for the drive's ground truth after a cycle (`share/lab/truth-req`:
/// the cycle's number), answered in `share/lab/truth-rep` (`ok` or `error WHY`).
fn serve_truth(labctl: &Path, f: &mut dyn FnMut(u32) -> std::result::Result<(), TruthError>) -> Result<()> {
    let req_path = labctl.join("truth-req");
    let Ok(req) = std::fs::read_to_string(&req_path) else { return Ok(()) };
    let _ = std::fs::remove_file(&req_path);
    let r = req.trim().parse::<u32>().map_err(|_| TruthError::from(MachineError::BadTruthRequest(req.clone()))).and_then(&mut *f);
    let rep = match r {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("error {}\n", chain(&*e)),
    };
    answer(labctl, "truth-rep", &rep)
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
            _ => Err(MachineError::UnknownRequest(req.clone())),
        }
    })();
    let rep = match r {
        Ok(()) => format!("ok {}\n", t.elapsed().as_millis()),
        Err(e) => format!("error {}\n", chain(&e)),
    };
    answer(labctl, "rep", &rep)
}

/// Writes an answer into the share whole (a file the guest polls for: written aside, then
/// renamed).
fn answer(labctl: &Path, name: &str, text: &str) -> Result<()> {
    let tmp = labctl.join(format!("{name}.tmp"));
    std::fs::write(&tmp, text).doing(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, labctl.join(name)).doing(|| format!("cannot rename {}", tmp.display()))?;
    Ok(())
}
