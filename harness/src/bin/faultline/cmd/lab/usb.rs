//! A USB power board inside the guest (`lab run --usb BOARD`, docs/LAB.md "The USB rig"): the
//! guest's own kernel enumerates a gadget on `dummy_hcd` as it would a board on a desk, and
//! faultline in the guest drives it through the kernel's class driver (or libusb), as it drives
//! a real one.
//!
//! The board's logic is faultline's emulator on the host, wired to the lab drive's power as the
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
//!   -> the module's firmware (`quarch_gadget.rs`) -> /dev/ttyS2 -> QEMU -> host pty
//!   -> QuarchEmu (serial framing) -> ...
//! faultline (guest) -> libusb (usbhid detached) -> usbfs -> usbcore -> dummy_hcd -> FunctionFS
//!   ep0 -> the relay's firmware (`hid_gadget.rs`) -> relay 1's contact: /dev/ttyS2 -> QEMU
//!   -> host pty -> LcusEmu -> ...
//! ```

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use faultline::lab::usb_fault::{FaultSpec, UsbFault};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The boards the lab can put on its USB bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Board {
    /// A Numato relay module: CDC-ACM (`f_acm`), vendor 2A19, which the kernel's `cdc-acm`
    /// driver gives as /dev/ttyACM0; relay 0 switches the drive
    /// (`numato+serial:///dev/ttyACM0?relay=0`).
    Numato,
    /// An LCUS relay board: a CH340 (1A86:7523) made with FunctionFS, answering the vendor
    /// requests the kernel's `ch341` driver sends at probe and open, so that `ch341` binds and
    /// gives /dev/ttyUSB0; channel 1 switches the drive (`lcus+serial:///dev/ttyUSB0?channel=1`).
    /// A CH340 reports no serial number, and neither does this one.
    Lcus,
    /// A Quarch power module on USB (16D0:0449, serial QTL1999-01-001): FunctionFS, one vendor
    /// interface of 64-byte bulk endpoints at full speed, which no kernel driver binds;
    /// faultline reaches it through libusb, locks it into USB mode and speaks the USB framing
    /// (`quarch+usb://QTL1999-01-001`).
    Quarch,
    /// A USB HID relay board (16C0:05DF, "USBRelay2", board id FLHID): FunctionFS, one HID
    /// interface at full speed, which the guest's usbhid binds first; faultline detaches it
    /// through libusb and switches relay 1 with HID class requests
    /// (`hidrelay+usb://FLHID?relay=1`).
    Hidrelay,
}

/// What a board is on the bus.
struct Ids {
    vendor: u16,
    product: u16,
    manufacturer: &'static str,
    product_name: &'static str,
    /// The configfs function (`acm.usb0`, `ffs.lcus`).
    function: &'static str,
    /// The tty the host side's class driver gives it (`ttyACM`, `ttyUSB`).
    tty: &'static str,
}

impl Board {
    fn ids(self) -> Ids {
        match self {
            // Numato Lab's 8-channel USB relay module (its USB ids and strings).
            Board::Numato => Ids {
                vendor: 0x2a19,
                product: 0x0c05,
                manufacturer: "Numato Systems Pvt. Ltd.",
                product_name: "Numato Lab 8 Channel USB Relay Module",
                function: "acm.usb0",
                tty: "ttyACM",
            },
            // What a CH340 says of itself: "USB Serial", no manufacturer, no serial number.
            Board::Lcus => {
                Ids { vendor: 0x1a86, product: 0x7523, manufacturer: "", product_name: "USB Serial", function: "ffs.lcus", tty: "ttyUSB" }
            }
            // No tty: the host reaches it through usbfs (libusb).
            Board::Quarch => Ids {
                vendor: 0x16d0,
                product: 0x0449,
                manufacturer: "Quarch Technology Ltd",
                product_name: "Programmable Power Module",
                function: "ffs.quarch",
                tty: "",
            },
            // What a DCT Tech board says of itself; no serial number (its id is in its
            // feature report), no tty.
            Board::Hidrelay => Ids {
                vendor: 0x16c0,
                product: 0x05df,
                manufacturer: "www.dcttech.com",
                product_name: "USBRelay2",
                function: "ffs.hidrelay",
                tty: "",
            },
        }
    }

    /// The USB serial number the lab's board reports.
    pub fn serial(self) -> Option<&'static str> {
        match self {
            Board::Numato => Some("FLNUMATO0001"),
            Board::Lcus => None,
            Board::Quarch => Some("QTL1999-01-001"),
            Board::Hidrelay => None,
        }
    }

    /// The scenario's power switch through this board, inside the guest.
    pub fn power(self) -> &'static str {
        match self {
            Board::Numato => "numato+serial:///dev/ttyACM0?relay=0",
            Board::Lcus => "lcus+serial:///dev/ttyUSB0?channel=1",
            Board::Quarch => "quarch+usb://QTL1999-01-001",
            Board::Hidrelay => "hidrelay+usb://FLHID?relay=1",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Board::Numato => "numato",
            Board::Lcus => "lcus",
            Board::Quarch => "quarch",
            Board::Hidrelay => "hidrelay",
        }
    }
}

/// The guest's UART that carries the board's bytes to the host emulator.
pub const UART: &str = "/dev/ttyS2";
/// Where the guest says the board is on the bus (its host-side tty, one line).
pub const READY: &str = "/run/lab-usb-ready";
const MODULES: &str = "/lib/modules/usb";
const CONFIGFS: &str = "/sys/kernel/config";

fn write(p: &Path, v: &str) -> Result<()> {
    std::fs::write(p, v).with_context(|| format!("cannot write {v:?} to {}", p.display()))
}

/// Loads the USB modules in their order (one already loaded is fine); `dummy_hcd` at full
/// speed for a board whose endpoints are full-speed ones (64-byte bulk: the Quarch module; the
/// HID relay, a low-speed V-USB device on a real desk, which dummy_hcd cannot be).
fn load_modules(board: Board) -> Result<()> {
    let order = std::fs::read_to_string(Path::new(MODULES).join("load-order"))
        .with_context(|| format!("no {MODULES}/load-order: the lab's initramfs predates USB boards (run `faultline lab setup`)"))?;
    for m in order.lines().filter(|l| !l.is_empty()) {
        let mut insmod = std::process::Command::new("insmod");
        insmod.arg(Path::new(MODULES).join(m));
        if matches!(board, Board::Quarch | Board::Hidrelay) && m.starts_with("dummy_hcd.") {
            insmod.arg("is_high_speed=0");
        }
        let o = insmod.output().context("cannot run insmod")?;
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() && !err.contains("File exists") {
            bail!("insmod {m}: {}", err.trim());
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
        let o = std::process::Command::new("mount").args(["-t", "configfs", "none", CONFIGFS]).output().context("cannot run mount")?;
        if !o.status.success() {
            bail!("cannot mount configfs on {CONFIGFS}: {}", String::from_utf8_lossy(&o.stderr).trim());
        }
    }
    let ids = board.ids();
    let g = Path::new(CONFIGFS).join("usb_gadget").join(board.name());
    std::fs::create_dir(&g).with_context(|| format!("cannot create the gadget {}", g.display()))?;
    write(&g.join("idVendor"), &format!("0x{:04x}", ids.vendor))?;
    write(&g.join("idProduct"), &format!("0x{:04x}", ids.product))?;
    let strings = g.join("strings/0x409");
    std::fs::create_dir_all(&strings)?;
    if let Some(serial) = board.serial() {
        write(&strings.join("serialnumber"), serial)?;
    }
    if !ids.manufacturer.is_empty() {
        write(&strings.join("manufacturer"), ids.manufacturer)?;
    }
    write(&strings.join("product"), ids.product_name)?;
    let config = g.join("configs/c.1");
    std::fs::create_dir_all(&config)?;
    let f = g.join("functions").join(ids.function);
    std::fs::create_dir(&f).with_context(|| format!("cannot create the function {}", f.display()))?;
    std::os::unix::fs::symlink(&f, config.join(ids.function))?;
    let mut ep0 = None;
    if let Some(instance) = ids.function.strip_prefix("ffs.") {
        ep0 = Some(match board {
            Board::Quarch => super::quarch_gadget::start(instance)?,
            Board::Hidrelay => {
                let to_rig = faultline_drivers::control::open_serial(uart, 115_200, Duration::from_millis(200))
                    .with_context(|| format!("cannot open {}", uart.display()))?;
                let fw = faultline::lab::hid_relay::Board { id: *b"FLHID", mask: 0b01, relays: 2 };
                super::hid_gadget::start(instance, fw, to_rig)?
            }
            _ => super::ch340::start(instance)?,
        });
    }
    let udc = std::fs::read_dir("/sys/class/udc")
        .context("no /sys/class/udc: dummy_hcd is not loaded")?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .context("no USB device controller in /sys/class/udc")?;
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

/// Where the guest's script names a USB fault for a board's next requests
/// ([`UsbFault::parse`]: `timeout`, `short` or `stall`, optionally `once`, optionally the
/// requests' prefix); removed to clear it.
pub const FAULT_FILE: &str = "/run/lab-usb-fault";

/// The fault the file names now (logged if the file is bad).
pub fn fault_now() -> Option<FaultSpec> {
    let text = std::fs::read_to_string(FAULT_FILE).ok()?;
    match UsbFault::parse(&text) {
        Ok(f) => f,
        Err(e) => {
            println!("lab usb: {FAULT_FILE}: {e}; no fault");
            None
        }
    }
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
            bail!(
                "the quarch gadget ({}) did not enumerate within 20 s: no 16d0:0449 with serial {} (dmesg says why)",
                g.display(),
                Board::Quarch.serial().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let u = faultline_drivers::control::open_serial(uart, 115_200, Duration::from_millis(200))
        .with_context(|| format!("cannot open {}", uart.display()))?;
    let from_emu = u.try_clone().context("cannot clone the UART")?;
    println!(
        "lab usb: quarch on the bus as {at} after {} ms; bridging its bulk endpoints <-> {}",
        t0.elapsed().as_millis(),
        uart.display()
    );
    write(Path::new(READY), &format!("{at}\n"))?;
    super::quarch_gadget::bridge("quarch", &device, from_emu, u)
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
            bail!("the hidrelay gadget ({}) did not enumerate within 20 s: no 16c0:05df (dmesg says why)", g.display());
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
    ep0.join().map_err(|_| anyhow::anyhow!("the hidrelay's ep0 thread panicked (usb.log has its message)"))
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let tty = loop {
        if let Some(t) = host_tty(board).filter(|t| t.exists() && (!acm || gadget_tty.exists())) {
            break t;
        }
        if Instant::now() > deadline {
            let ids = board.ids();
            bail!(
                "the {} gadget ({}) did not enumerate within 20 s: no {}* of {:04x}:{:04x}{} (dmesg says why)",
                board.name(),
                g.display(),
                ids.tty,
                ids.vendor,
                ids.product,
                board.serial().map_or(String::new(), |s| format!(" with serial {s}"))
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let timeout = Duration::from_millis(200);
    let open =
        |p: &Path| faultline_drivers::control::open_serial(p, 115_200, timeout).with_context(|| format!("cannot open {}", p.display()));
    if !acm {
        let u = open(uart)?;
        let from_host = u.try_clone().context("cannot clone the UART")?;
        println!(
            "lab usb: {} on the bus as {} after {} ms; bridging its bulk endpoints <-> {}",
            board.name(),
            tty.display(),
            t0.elapsed().as_millis(),
            uart.display()
        );
        write(Path::new(READY), &format!("{}\n", tty.display()))?;
        return super::ch340::bridge(board.ids().function.trim_start_matches("ffs."), from_host, u);
    }
    let mut from_host = open(uart)?;
    let mut to_host = from_host.try_clone().context("cannot clone the UART")?;
    let out: GadgetOut = std::sync::Arc::new(std::sync::Mutex::new(None));
    println!(
        "lab usb: {} on the bus as {} after {} ms; bridging {} <-> {}",
        board.name(),
        tty.display(),
        t0.elapsed().as_millis(),
        gadget_tty.display(),
        uart.display()
    );
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
        let mut from_gadget = match open(gadget_tty) {
            Ok(r) => r,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        *lock(&out) = Some(from_gadget.try_clone().context("cannot clone the gadget's tty")?);
        loop {
            match from_gadget.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => to_host.write_all(&buf[..n]).and_then(|_| to_host.flush()).context("the UART to the host's emulator")?,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
                Err(_) => break,
            }
        }
        *lock(&out) = None;
        println!("lab usb: {}'s gadget tty hung up after {} ms (unbound?); opening it again", board.name(), t0.elapsed().as_millis());
        std::thread::sleep(Duration::from_millis(50));
    }
}
