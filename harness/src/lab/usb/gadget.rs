//! A board on the guest's USB bus (`lab guest usb BOARD`). The board's logic is faultline's emulator on the host, wired to the lab drive's power as the
//! serial Quarch module is. In the guest, `lab guest usb BOARD` loads the USB modules, makes
//! the gadget through configfs with the board's ids, binds it to the dummy UDC, and carries
//! bytes between the gadget's function and the guest's third UART (`/dev/ttyS2`, the host
//! emulator's pty):
//!
//! ```text
//! faultline (guest) -> /dev/ttyACM0 -> cdc-acm -> usbcore -> dummy_hcd -> f_acm -> /dev/ttyGS0
//!   -> this bridge -> /dev/ttyS2 -> QEMU -> host pty -> NumatoEmu -> the drive's power
//! faultline (guest) -> /dev/ttyUSB0 -> ch341 -> usbcore -> dummy_hcd -> FunctionFS ep2
//!   -> the CH340's bridge (`ch340.rs`) -> /dev/ttyS2 -> QEMU -> host pty -> LcusEmu -> ...
//! faultline (guest) -> libusb -> usbfs -> usbcore -> dummy_hcd (full speed) -> FunctionFS ep1
//!   -> the module's firmware (`quarch.rs`) -> /dev/ttyS2 -> QEMU -> host pty
//!   -> QuarchEmu (serial framing) -> ...
//! faultline (guest) -> libusb (usbhid detached) -> usbfs -> usbcore -> dummy_hcd -> FunctionFS
//!   ep0 -> the relay's firmware (`hid.rs`) -> relay 1's contact: /dev/ttyS2 -> QEMU
//!   -> host pty -> LcusEmu -> ...
//! ```

use super::super::error::Doing;
use super::{ch340, hid, quarch, Board, UsbError, READY};
use faultline_drivers::control::open_serial;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MODULES: &str = "/lib/modules/usb";
const CONFIGFS: &str = "/sys/kernel/config";

type Result<T, E = UsbError> = std::result::Result<T, E>;

fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).doing(|| format!("cannot write {v:?} to {}", p.display()))?;
    Ok(())
}

/// A UART or tty, raw, written to.
fn open(p: &Path) -> Result<Box<dyn Write + Send>> {
    Ok(open_serial(p, 115_200, Duration::from_millis(200)).map_err(|source| UsbError::Serial { path: p.to_path_buf(), source })?)
}

/// A UART or tty, raw, with reads that time out (so that a bridge's loop can look around):
/// a handle to read from and one to write to (`what` names it when the second cannot be had).
fn open_pair(p: &Path, what: &str) -> Result<(Box<dyn Read + Send>, Box<dyn Write + Send>)> {
    let port = open_serial(p, 115_200, Duration::from_millis(200)).map_err(|source| UsbError::Serial { path: p.to_path_buf(), source })?;
    let reader = port.try_clone().map_err(std::io::Error::from).doing(|| format!("cannot clone {what}"))?;
    Ok((reader, port))
}

/// Loads the USB modules in their order (one already loaded is fine); `dummy_hcd` at full
/// speed for a board whose endpoints are full-speed ones (64-byte bulk: the Quarch module; the
/// HID relay, a low-speed V-USB device on a real desk, which dummy_hcd cannot be).
fn load_modules(board: Board) -> Result<()> {
    let order = std::fs::read_to_string(Path::new(MODULES).join("load-order"))
        .doing(|| format!("no {MODULES}/load-order: the lab's initramfs predates USB boards (run `faultline lab setup`)"))?;
    for m in order.lines().filter(|l| !l.is_empty()) {
        let mut insmod = std::process::Command::new("insmod");
        insmod.arg(Path::new(MODULES).join(m));
        if matches!(board, Board::Quarch | Board::Hidrelay) && m.starts_with("dummy_hcd.") {
            insmod.arg("is_high_speed=0");
        }
        let o = insmod.output().doing(|| "cannot run insmod".into())?;
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() && !err.contains("File exists") {
            return Err(UsbError::Command { what: format!("insmod {m}"), stderr: err.trim().to_string() });
        }
    }
    Ok(())
}

/// Makes the gadget through configfs and binds it to the first UDC; returns the gadget's
/// directory, and for a FunctionFS board the thread answering its `ep0`. `uart`: the guest's
/// line to the board's emulator on the host, which a board whose firmware runs in the guest
/// (the HID relay) switches the rig through.
fn make_gadget(board: Board, uart: &Path) -> Result<(PathBuf, Option<std::thread::JoinHandle<()>>)> {
    if !Path::new(CONFIGFS).join("usb_gadget").is_dir() {
        let o =
            std::process::Command::new("mount").args(["-t", "configfs", "none", CONFIGFS]).output().doing(|| "cannot run mount".into())?;
        if !o.status.success() {
            let stderr = String::from_utf8_lossy(&o.stderr).trim().to_string();
            return Err(UsbError::Command { what: format!("cannot mount configfs on {CONFIGFS}"), stderr });
        }
    }
    let ids = board.ids();
    let g = Path::new(CONFIGFS).join("usb_gadget").join(board.name());
    std::fs::create_dir(&g).doing(|| format!("cannot create the gadget {}", g.display()))?;
    write(&g.join("idVendor"), &format!("0x{:04x}", ids.vendor))?;
    write(&g.join("idProduct"), &format!("0x{:04x}", ids.product))?;
    let strings = g.join("strings/0x409");
    std::fs::create_dir_all(&strings).doing(|| format!("cannot create {}", strings.display()))?;
    if let Some(serial) = board.serial() {
        write(&strings.join("serialnumber"), serial)?;
    }
    if !ids.manufacturer.is_empty() {
        write(&strings.join("manufacturer"), ids.manufacturer)?;
    }
    write(&strings.join("product"), ids.product_name)?;
    let config = g.join("configs/c.1");
    std::fs::create_dir_all(&config).doing(|| format!("cannot create {}", config.display()))?;
    let f = g.join("functions").join(ids.function);
    std::fs::create_dir(&f).doing(|| format!("cannot create the function {}", f.display()))?;
    std::os::unix::fs::symlink(&f, config.join(ids.function)).doing(|| format!("cannot link {} into {}", f.display(), config.display()))?;
    let mut ep0 = None;
    if let Some(instance) = ids.function.strip_prefix("ffs.") {
        ep0 = Some(match board {
            Board::Quarch => quarch::start(instance)?,
            Board::Hidrelay => {
                let to_rig = open(uart)?;
                let fw = hid::Board { id: *b"FLHID", mask: 0b01, relays: 2 };
                hid::start(instance, fw, to_rig)?
            }
            _ => ch340::start(instance)?,
        });
    }
    let udc = std::fs::read_dir("/sys/class/udc")
        .doing(|| "no /sys/class/udc: dummy_hcd is not loaded".into())?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .ok_or(UsbError::NoUdc)?;
    write(&g.join("UDC"), &udc)?;
    Ok((g, ep0))
}

/// The tty the host side's class driver made for the board: the `ttyACM*` or `ttyUSB*` whose
/// USB device has the board's ids (and serial, where it has one).
fn host_tty(board: Board) -> Option<PathBuf> {
    let ids = board.ids();
    let attr = |d: &Path, a: &str| std::fs::read_to_string(d.join(a)).map(|s| s.trim().to_string()).unwrap_or_default();
    for e in std::fs::read_dir("/sys/class/tty").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(ids.tty) {
            continue;
        }
        // ttyACM0: .../1-1/1-1:1.0 (the interface); ttyUSB0: .../1-1/1-1:1.0/ttyUSB0 (the
        // usb-serial port). The USB device is the nearest ancestor with an idVendor.
        let Ok(mut dev) = std::fs::canonicalize(e.path().join("device")) else { continue };
        while !dev.join("idVendor").exists() {
            if !dev.pop() {
                break;
            }
        }
        let ours = attr(&dev, "idVendor") == format!("{:04x}", ids.vendor)
            && attr(&dev, "idProduct") == format!("{:04x}", ids.product)
            && board.serial().is_none_or(|s| attr(&dev, "serial") == s);
        if ours {
            return Some(Path::new("/dev").join(name));
        }
    }
    None
}

/// The board's USB device as the host side enumerated it (`bus B address A`, and its sysfs
/// directory): the device in /sys/bus/usb/devices with its ids and serial.
fn host_device(board: Board) -> Option<(String, PathBuf)> {
    let ids = board.ids();
    let attr = |d: &Path, a: &str| std::fs::read_to_string(d.join(a)).map(|s| s.trim().to_string()).unwrap_or_default();
    for e in std::fs::read_dir("/sys/bus/usb/devices").ok()?.flatten() {
        let d = e.path();
        if attr(&d, "idVendor") == format!("{:04x}", ids.vendor)
            && attr(&d, "idProduct") == format!("{:04x}", ids.product)
            && board.serial().is_none_or(|s| attr(&d, "serial") == s)
        {
            return Some((format!("bus {} address {}", attr(&d, "busnum"), attr(&d, "devnum")), d));
        }
    }
    None
}

/// The gadget side of the bridge, as the host-to-gadget direction writes to it: `None` while
/// the gadget is unbound (a board unplugged loses what is sent to it).
type GadgetOut = std::sync::Arc<std::sync::Mutex<Option<Box<dyn Write + Send>>>>;

fn lock(g: &GadgetOut) -> std::sync::MutexGuard<'_, Option<Box<dyn Write + Send>>> {
    g.lock().unwrap_or_else(|e| e.into_inner())
}

/// The Quarch module: no tty on either side, its function's endpoints bridged to the UART.
fn serve_quarch(g: PathBuf, uart: &Path, t0: Instant) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let (at, device) = loop {
        if let Some(at) = host_device(Board::Quarch) {
            break at;
        }
        if Instant::now() > deadline {
            let missing = format!("no 16d0:0449 with serial {}", Board::Quarch.serial().unwrap_or_default());
            return Err(UsbError::NotEnumerated { board: "quarch", gadget: g, missing });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (from_emu, u) = open_pair(uart, "the UART")?;
    println!(
        "lab usb: quarch on the bus as {at} after {} ms; bridging its bulk endpoints <-> {}",
        t0.elapsed().as_millis(),
        uart.display()
    );
    write(Path::new(READY), &format!("{at}\n"))?;
    quarch::bridge("quarch", &device, from_emu, u)
}

/// The HID relay: its firmware answers on ep0 (`hid_gadget.rs`, the thread `ep0`); this waits
/// until the host side has enumerated it and says which driver bound it, then waits on that
/// thread, which answers for as long as the guest runs.
fn serve_hidrelay(g: PathBuf, ep0: std::thread::JoinHandle<()>, t0: Instant) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    // usbhid binds within a second of enumeration; a board left unbound is said so.
    let bind_deadline = Instant::now() + Duration::from_secs(5);
    let driver = |device: &Path| {
        let name = device.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        std::fs::read_link(device.join(format!("{name}:1.0")).join("driver")).ok()
    };
    let (at, bound) = loop {
        if let Some((at, device)) = host_device(Board::Hidrelay) {
            let bound = driver(&device);
            if bound.is_some() || Instant::now() > bind_deadline {
                break (at, bound);
            }
        }
        if Instant::now() > deadline {
            return Err(UsbError::NotEnumerated { board: "hidrelay", gadget: g, missing: "no 16c0:05df".into() });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let bound = bound.and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    println!(
        "lab usb: hidrelay on the bus as {at} after {} ms; its interface bound by {}",
        t0.elapsed().as_millis(),
        bound.as_deref().unwrap_or("no driver")
    );
    write(Path::new(READY), &format!("{at}\n"))?;
    ep0.join().map_err(|_| UsbError::Ep0Panicked("hidrelay"))
}

/// `lab guest usb BOARD`: the gadget on the bus, then the bridge, until the guest powers off.
/// The bridge outlives an unbind of the gadget (a board unplugged, `echo > UDC`) and its
/// rebinding (the board plugged back, at another bus address): the board's logic is the
/// host's emulator, which keeps running as a board's firmware does, and the gadget's tty is
/// opened again when it is back.
pub fn serve(board: Board, uart: &Path) -> Result<()> {
    let t0 = Instant::now();
    load_modules(board)?;
    let (g, ep0) = make_gadget(board, uart)?;
    if board == Board::Quarch {
        return serve_quarch(g, uart, t0);
    }
    if let (Board::Hidrelay, Some(ep0)) = (board, ep0) {
        return serve_hidrelay(g, ep0, t0);
    }
    let gadget_tty = Path::new("/dev/ttyGS0");
    let acm = board == Board::Numato;
    let tty = wait_for_tty(board, g, acm.then_some(gadget_tty))?;
    if !acm {
        let (from_host, u) = open_pair(uart, "the UART")?;
        println!(
            "lab usb: {} on the bus as {} after {} ms; bridging its bulk endpoints <-> {}",
            board.name(),
            tty.display(),
            t0.elapsed().as_millis(),
            uart.display()
        );
        write(Path::new(READY), &format!("{}\n", tty.display()))?;
        return ch340::bridge(board.ids().function.trim_start_matches("ffs."), from_host, u);
    }
    println!(
        "lab usb: {} on the bus as {} after {} ms; bridging {} <-> {}",
        board.name(),
        tty.display(),
        t0.elapsed().as_millis(),
        gadget_tty.display(),
        uart.display()
    );
    bridge_tty(board, gadget_tty, uart, &tty, t0)
}

/// The host side's tty of the board, once its class driver made it (and, for an ACM board,
/// once the gadget's own tty is there too); an error after 20 s.
fn wait_for_tty(board: Board, g: PathBuf, gadget_tty: Option<&Path>) -> Result<PathBuf> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = host_tty(board).filter(|t| t.exists() && gadget_tty.is_none_or(Path::exists)) {
            return Ok(t);
        }
        if Instant::now() > deadline {
            let ids = board.ids();
            let missing = format!(
                "no {}* of {:04x}:{:04x}{}",
                ids.tty,
                ids.vendor,
                ids.product,
                board.serial().map_or(String::new(), |s| format!(" with serial {s}"))
            );
            return Err(UsbError::NotEnumerated { board: board.name(), gadget: g, missing });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The ACM board's bridge, until the guest powers off: the UART's bytes to the gadget's tty
/// (lost while it is unbound), and the gadget's tty's to the UART, opened again after each
/// hang-up.
fn bridge_tty(board: Board, gadget_tty: &Path, uart: &Path, tty: &Path, t0: Instant) -> Result<()> {
    let (mut from_host, mut to_host) = open_pair(uart, "the UART")?;
    let out: GadgetOut = std::sync::Arc::new(std::sync::Mutex::new(None));
    write(Path::new(READY), &format!("{}\n", tty.display()))?;
    let gadget_out = out.clone();
    // Host to gadget: the UART is always there; the gadget may not be.
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        loop {
            match from_host.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    let mut g = lock(&gadget_out);
                    if g.as_mut().is_some_and(|w| w.write_all(&buf[..n]).and_then(|_| w.flush()).is_err()) {
                        *g = None;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
                Err(_) => return,
            }
        }
    });
    // Gadget to host, and the gadget's tty opened again after each hang-up.
    let mut buf = [0u8; 512];
    loop {
        let (mut from_gadget, to_gadget) = match open_pair(gadget_tty, "the gadget's tty") {
            Ok(r) => r,
            Err(UsbError::Serial { .. }) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e),
        };
        *lock(&out) = Some(to_gadget);
        loop {
            match from_gadget.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => to_host.write_all(&buf[..n]).and_then(|_| to_host.flush()).doing(|| "the UART to the host's emulator".into())?,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
                Err(_) => break,
            }
        }
        *lock(&out) = None;
        println!("lab usb: {}'s gadget tty hung up after {} ms (unbound?); opening it again", board.name(), t0.elapsed().as_millis());
        std::thread::sleep(Duration::from_millis(50));
    }
}
