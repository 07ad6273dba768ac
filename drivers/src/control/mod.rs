//! Power and link controllers: the drivers behind [`crate::PowerSwitch`] and
//! [`crate::LinkController`] for what labs own.
//!
//! - `spec.rs`: the one-string controller specs (`quarch+tcp://host`, `nvme-reset://nvme0`).
//! - `quarch/`: Quarch power and hot-plug modules, Torridon array controllers: `mod.rs` (the
//!   driver), `wire.rs` (the wire trait, its faults, serial and TCP framing), `usb.rs` (the USB
//!   framing over a bulk pipe).
//! - `relay.rs`: USB HID relays, CH340 "LCUS" serial relays, Numato relays.
//! - `linux.rs`: NVMe controller and subsystem resets, PCI function resets, remove and rescan,
//!   slot power, all through a configurable sysfs/dev root.
//! - `exec.rs`: `exec:` command hooks (`exec_link.rs`: the link-controller form); `manual.rs`: a person at the keyboard.
//! - `usb.rs`: the rusb layer (device listing, HID reports, bulk pipes) behind small traits,
//!   so the protocol bytes are tested without hardware; it knows no controller protocol, and
//!   the protocols above it (`relay.rs`, `quarch/usb.rs`) import it, never the reverse.
//! - `sys.rs`: the only `unsafe` (the NVMe subsystem-reset ioctl, `geteuid`).
//!
//! Invariants: every call has a timeout and every retry loop a bound; every error names the
//! controller, the command and what came back; a command that failed is never reported as
//! done (a switch with readback confirms each cut, a switch without says so in its
//! capabilities and leaves confirmation to the device disappearing).

pub mod exec;
pub mod exec_link;
pub mod linux;
pub mod manual;
pub mod quarch;
pub mod relay;
pub mod spec;
mod sys;
pub mod usb;

pub use spec::{parse as parse_spec, ControllerSpec, QuarchTransport, SpecError, SpecProblem, SPEC_FORMS};

use crate::link::{LinkController, LinkError};
use crate::power::{PowerError, PowerSwitch};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where controllers find the machine, and how long they wait. The defaults are the real
/// machine; tests point the roots at a fake tree in a temporary directory.
#[derive(Clone, Debug)]
pub struct ControlEnv {
    /// Root under which `sys/class/nvme`, `sys/bus/pci` are looked up (default `/`).
    pub sysfs_root: PathBuf,
    /// Root under which `dev/nvme0` is looked up (default `/`).
    pub dev_root: PathBuf,
    /// Timeout of one command exchange with a device.
    pub timeout: Duration,
    /// Attempts per command when the link itself misbehaved (garbage, a lost prompt, a
    /// dropped connection). A command the device answered with a failure is never retried.
    pub attempts: u32,
    /// How long a removed PCI function or a reset NVMe controller may take to come back.
    pub settle_timeout: Duration,
}

impl Default for ControlEnv {
    fn default() -> Self {
        ControlEnv {
            sysfs_root: PathBuf::from("/"),
            dev_root: PathBuf::from("/"),
            timeout: Duration::from_secs(2),
            attempts: 3,
            settle_timeout: Duration::from_secs(30),
        }
    }
}

/// A controller opened from a spec: a power switch, a link controller, or both.
pub struct Controller {
    pub power: Option<Box<dyn PowerSwitch + Send>>,
    pub link: Option<Box<dyn LinkController + Send>>,
}

/// Why a controller could not be opened (each names the controller and what went wrong).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Power(#[from] PowerError),
    #[error(transparent)]
    Link(#[from] LinkError),
}

/// Opens the controller a spec names. `sim` is refused here: only the binary owns a simulated
/// drive, and it maps [`ControllerSpec::Sim`] itself.
pub fn open(spec: &ControllerSpec, env: &ControlEnv) -> Result<Controller, OpenError> {
    let name = spec.to_string();
    let power_only = |p: Box<dyn PowerSwitch + Send>| Controller { power: Some(p), link: None };
    Ok(match spec {
        ControllerSpec::Quarch { transport, module } => {
            let q = quarch::Quarch::open(transport, *module, env)?;
            // One connection serves both roles; a power module simply has no link ports.
            Controller { power: Some(Box::new(q.clone())), link: Some(Box::new(q)) }
        }
        ControllerSpec::HidRelay { serial, relay } => power_only(Box::new(relay::HidRelay::open_usb(serial, *relay, env)?)),
        ControllerSpec::Lcus { path, channel } => power_only(Box::new(relay::Lcus::open(path, *channel, env)?)),
        ControllerSpec::Numato { path, relay } => power_only(Box::new(relay::Numato::open(path, *relay, env)?)),
        ControllerSpec::NumatoUsb { serial, relay } => power_only(Box::new(relay::Numato::open_usb(serial, *relay, env)?)),
        ControllerSpec::NvmeReset { .. }
        | ControllerSpec::NvmeSubsysReset { .. }
        | ControllerSpec::PciReset { .. }
        | ControllerSpec::PciRemoveRescan { .. } => {
            let l = linux::LinuxLink::open(spec, env)?;
            Controller { power: None, link: Some(Box::new(l)) }
        }
        ControllerSpec::PciSlotPower { .. } => {
            let l = linux::LinuxLink::open(spec, env)?;
            let p = linux::SlotPower::new(l.clone());
            Controller { power: Some(Box::new(p)), link: Some(Box::new(l)) }
        }
        ControllerSpec::Exec { off, on, state, timeout_ms } => {
            // Both roles: under `controllers.power` the commands cut power, under
            // `controllers.link` they pull one port (`FAULTLINE_PORT` in their environment).
            let t = Duration::from_millis(*timeout_ms);
            Controller {
                power: Some(Box::new(exec::ExecSwitch::new(off, on, state.as_deref(), t))),
                link: Some(Box::new(exec::ExecLink::new(off, on, state.as_deref(), t))),
            }
        }
        ControllerSpec::ExecLink { pull, plug, ports, timeout_ms } => Controller {
            power: None,
            link: Some(Box::new(exec_link::ExecLink::new(pull, plug, ports, Duration::from_millis(*timeout_ms)))),
        },
        ControllerSpec::Manual => power_only(Box::new(manual::ManualSwitch::open_interactive()?)),
        ControllerSpec::Sim => {
            return Err(PowerError::Unsupported {
                switch: name,
                what: "be opened by the drivers crate (the binary maps `sim` to a simulated drive)".into(),
            }
            .into())
        }
    })
}

/// A serial port as `faultline controller list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerialPortEntry {
    pub path: String,
    /// USB vendor, product, serial number and product string, for USB serial adapters.
    pub usb: Option<(u16, u16, Option<String>, Option<String>)>,
}

impl std::fmt::Display for SerialPortEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.usb {
            None => write!(f, "{}  (not USB: quarch+serial://{} if a module is wired to it)", self.path, self.path),
            Some((vid, pid, serial, product)) => {
                let guess = match usb::controller_kind(*vid, *pid) {
                    Some("lcus+serial") => format!("lcus+serial://{}?channel=1", self.path),
                    Some("numato+serial") => format!("numato+serial://{}?relay=0", self.path),
                    _ => format!("quarch+serial://{} (if a Quarch module is on this adapter)", self.path),
                };
                write!(
                    f,
                    "{}  {vid:04x}:{pid:04x}  {}  serial {}  -> {guess}",
                    self.path,
                    product.as_deref().unwrap_or("?"),
                    serial.as_deref().unwrap_or("?")
                )
            }
        }
    }
}

/// Why serial ports could not be listed or one could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SerialError {
    #[error("/sys/class/tty does not exist")]
    NoTtyClass,
    #[error("cannot list serial ports: {0}")]
    List(#[source] serialport::Error),
    #[error("cannot open serial port {path}: {source}")]
    Open { path: String, source: serialport::Error },
}

/// Serial ports on this machine (sysfs scan; no libudev), USB adapters first.
pub fn list_serial_ports() -> Result<Vec<SerialPortEntry>, SerialError> {
    if !std::path::Path::new("/sys/class/tty").is_dir() {
        return Err(SerialError::NoTtyClass);
    }
    let ports = serialport::available_ports().map_err(SerialError::List)?;
    let mut out: Vec<SerialPortEntry> = ports
        .into_iter()
        .map(|p| {
            let usb = match p.port_type {
                serialport::SerialPortType::UsbPort(u) => Some((u.vid, u.pid, u.serial_number, u.product)),
                _ => None,
            };
            SerialPortEntry { path: p.port_name, usb }
        })
        .collect();
    out.sort_by_key(|e| (e.usb.is_none(), e.path.clone()));
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers for byte-stream devices (serial ports, sockets).
// ---------------------------------------------------------------------------------------------

/// Longest reply any supported controller sends; more is garbage, and reading stops there.
pub(crate) const MAX_REPLY_BYTES: usize = 64 * 1024;

/// Opens a serial port through serialport's normal code path, 8N1, no flow control, and drops
/// whatever was waiting in the input buffer.
pub fn open_serial(path: &std::path::Path, baud: u32, timeout: Duration) -> Result<Box<dyn serialport::SerialPort>, SerialError> {
    let p = path.to_string_lossy();
    let port = serialport::new(p.as_ref(), baud)
        .data_bits(serialport::DataBits::Eight)
        .parity(serialport::Parity::None)
        .stop_bits(serialport::StopBits::One)
        .flow_control(serialport::FlowControl::None)
        .timeout(timeout)
        .open_native()
        .map_err(|source| SerialError::Open { path: p.to_string(), source })?;
    // serialport opens without O_CLOEXEC; a transport or an `exec:` switch started later must
    // not hold the board's tty.
    crate::set_cloexec(&port).map_err(|e| SerialError::Open { path: p.to_string(), source: e.into() })?;
    let _ = serialport::SerialPort::clear(&port, serialport::ClearBuffer::All);
    Ok(Box::new(port))
}

/// Why reading a reply stopped short.
#[derive(Debug)]
pub(crate) enum ReadFault {
    Timeout,
    Closed,
    TooLong,
    Io(std::io::Error),
}

/// Reads from `r` into `buf` until `done(buf)` or the deadline. `set_timeout` gives the reader
/// the time left before each read (serial ports and sockets both time out a blocking read).
pub(crate) fn read_until<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    deadline: Instant,
    mut set_timeout: impl FnMut(&mut R, Duration),
    done: impl Fn(&[u8]) -> bool,
) -> Result<(), ReadFault> {
    let mut chunk = [0u8; 512];
    // Bounded: every pass either reads at least one byte (and the buffer is bounded) or
    // waits; waiting ends at the deadline.
    loop {
        if done(buf) {
            return Ok(());
        }
        if buf.len() > MAX_REPLY_BYTES {
            return Err(ReadFault::TooLong);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ReadFault::Timeout);
        }
        set_timeout(r, (deadline - now).max(Duration::from_millis(1)));
        match r.read(&mut chunk) {
            Ok(0) => return Err(ReadFault::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ReadFault::Io(e)),
        }
    }
}

/// Reads and discards until the line has been quiet for `quiet`, at most `max` in all.
pub(crate) fn drain<R: Read + ?Sized>(r: &mut R, quiet: Duration, max: Duration, mut set_timeout: impl FnMut(&mut R, Duration)) -> Vec<u8> {
    let end = Instant::now() + max;
    let mut out = Vec::new();
    let mut chunk = [0u8; 512];
    while Instant::now() < end && out.len() <= MAX_REPLY_BYTES {
        set_timeout(r, quiet);
        match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    out
}

pub(crate) fn write_all<W: Write + ?Sized>(w: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    w.write_all(bytes)?;
    w.flush()
}

/// Shows device bytes in an error message: text as text, anything else escaped, long replies
/// cut.
pub fn show_bytes(b: &[u8]) -> String {
    const MAX: usize = 200;
    let mut s: String = b[..b.len().min(MAX)].escape_ascii().to_string();
    if b.len() > MAX {
        s.push_str(&format!("... ({} bytes)", b.len()));
    }
    format!("\"{s}\"")
}
