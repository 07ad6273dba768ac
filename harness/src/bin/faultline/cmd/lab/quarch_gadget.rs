//! The lab's Quarch power module on the guest's USB bus (`lab run --usb quarch`): a FunctionFS
//! function with Quarch's ids (16D0:0449) and one vendor interface of 64-byte bulk endpoints
//! (a full-speed module, of the kind quarchpy and faultline lock into USB mode), which no kernel
//! driver binds: faultline in the guest reaches it through the libusb built into the binary,
//! claims its interface and speaks the USB framing to it. Its firmware
//! ([`faultline::lab::quarch_usb`]) carries each command to the host's Quarch emulator over
//! the guest's third UART, in the serial framing, and each reply back as bulk packets.
//!
//! Endpoints: the host reads a reply from the IN endpoint of the command endpoint's number
//! (quarchpy: the highest OUT endpoint of interface 0, and its IN twin; faultline the same).
//! `dummy_hcd` gives a function its fixed endpoints in the order of its own table, whatever
//! numbers the descriptors ask for: the first bulk OUT is 0x02, the bulk INs 0x81, 0x86, 0x8b,
//! then 0x82. So the interface asks for one OUT and four INs, and the bridge reads the
//! addresses back from the configuration the host side enumerated and answers on the IN twin
//! of the OUT, failing with the addresses it got if there is none.

use super::ffs::{self, dir};
use anyhow::{bail, Context, Result};
use faultline::lab::quarch_usb::{self, Firmware, Packet, PACKET};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Mounts the function and writes its descriptors (full speed only: `dummy_hcd` is loaded at
/// full speed for this board), then answers ep0 (there is nothing to answer but events).
pub fn start(instance: &str) -> Result<std::thread::JoinHandle<()>> {
    ffs::start(instance, "Quarch module", 0, &quarch_usb::descriptors(), None, control)
}

/// ep0: the function's events (bind, enable, ...), logged; a control request to the interface
/// (none is sent by quarchpy or faultline) is answered with nothing.
fn control(ep0: std::fs::File) {
    ffs::serve_ep0(
        ep0,
        |ep0, s| {
            let len = s.length;
            let r = if s.request_type & 0x80 != 0 { ep0.write(&vec![0; len]) } else { ep0.read(&mut vec![0u8; len]) };
            println!("lab usb: quarch control {:02x} {:02x} length {len}: {r:?}", s.request_type, s.request);
        },
        |e| println!("lab usb: quarch function event {e}"),
    )
}

/// The endpoint addresses of the board's configuration, in the order of its descriptors
/// (which is the order of the function's `ep1`, `ep2`, ...), as the host side read them: the
/// raw descriptors of the USB device (`descriptors` in its sysfs directory, the device
/// descriptor then the active configuration's).
fn addresses(device: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(device.join("descriptors")).with_context(|| format!("cannot read {}/descriptors", device.display()))?;
    let mut at = 18usize.min(raw.len());
    let mut eps = Vec::new();
    while at + 2 <= raw.len() {
        let (len, kind) = (usize::from(raw[at]), raw[at + 1]);
        if len < 2 {
            bail!("{}/descriptors: a descriptor of length {len} at byte {at}", device.display());
        }
        if kind == 5 && at + 3 <= raw.len() {
            eps.push(raw[at + 2]);
        }
        at += len;
    }
    Ok(eps)
}

/// The command endpoint (`ep1`) and its IN twin, opened once the host has enumerated the
/// board (`device`: its sysfs directory).
fn endpoints(instance: &str, device: &Path) -> Result<(std::fs::File, std::fs::File)> {
    let eps = addresses(device)?;
    let cmd = *eps.first().context("the board's configuration has no endpoint")?;
    let Some(i) = eps.iter().position(|&a| a == cmd | 0x80) else {
        let seen: Vec<String> = eps.iter().enumerate().map(|(i, a)| format!("ep{} {a:#04x}", i + 1)).collect();
        bail!("the UDC gave the Quarch function no IN endpoint of its command endpoint's number ({})", seen.join(", "));
    };
    let d = dir(instance);
    let out = std::fs::File::open(d.join("ep1")).context("cannot open the command endpoint ep1")?;
    let p = d.join(format!("ep{}", i + 1));
    // Read as well as written: a read of an IN endpoint halts it (a stall, FunctionFS's way).
    let inp = std::fs::OpenOptions::new().read(true).write(true).open(&p).with_context(|| format!("cannot open {}", p.display()))?;
    println!("lab usb: quarch command endpoint ep1 {cmd:#04x}, replies on ep{} {:#04x}", i + 1, eps[i]);
    Ok((out, inp))
}

/// The bridge, until the guest powers off: bulk OUT packets through the firmware to the UART
/// (or answered at once: the USB-mode lock), the UART's replies back as bulk IN packets. An
/// unbind (the board unplugged) closes the endpoints; they are opened again when it is back.
pub fn bridge(instance: &str, device: &Path, mut from_emu: Box<dyn Read + Send>, mut to_emu: Box<dyn Write + Send>) -> Result<()> {
    let fw = Arc::new(Mutex::new(Firmware::default()));
    let to_host: Arc<Mutex<Option<std::fs::File>>> = Arc::new(Mutex::new(None));
    let lock = |m: &Arc<Mutex<Firmware>>| m.lock().unwrap_or_else(|e| e.into_inner()).locked;
    let send = |to: &Arc<Mutex<Option<std::fs::File>>>, p: &[u8]| {
        let mut g = to.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = g.as_mut() {
            if let Err(e) = f.write_all(p) {
                println!("lab usb: quarch bulk IN write failed ({e}); dropped until the host is back");
                *g = None;
            }
        }
    };
    {
        let (fw, to_host) = (fw.clone(), to_host.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            loop {
                match from_emu.read(&mut buf) {
                    Ok(n) if n > 0 => {
                        let packets = fw.lock().unwrap_or_else(|e| e.into_inner()).on_serial(&buf[..n]);
                        for p in packets {
                            send(&to_host, &p);
                        }
                    }
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
                    Err(_) => return,
                }
            }
        });
    }
    // One packet's worth a read: a bulk OUT transfer ends at a short packet or when the buffer
    // is full, so a larger buffer would run full 64-byte commands together.
    let mut buf = [0u8; PACKET];
    loop {
        let (mut out, inp) = match endpoints(instance, device) {
            Ok(eps) => eps,
            Err(e) => {
                println!("lab usb: quarch endpoints: {e:#}");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        *to_host.lock().unwrap_or_else(|e| e.into_inner()) = Some(inp);
        while let Ok(n) = out.read(&mut buf) {
            let spec = super::usb::fault_now();
            let (r, met) = {
                let mut f = fw.lock().unwrap_or_else(|e| e.into_inner());
                (f.on_packet_with(&buf[..n], spec.as_ref()), f.faulted)
            };
            if let (Some(fault), Some(spec)) = (met, &spec) {
                let what = String::from_utf8_lossy(&buf[..n]).trim_end_matches('\0').to_string();
                println!("lab usb: quarch fault {fault:?} on {what:?}{}", if spec.once { " (once: cleared)" } else { "" });
                if spec.once {
                    let _ = std::fs::remove_file(super::usb::FAULT_FILE);
                }
            }
            match r {
                Packet::Answer(a) => {
                    println!("lab usb: quarch USB mode {}", if lock(&fw) { "locked" } else { "unlocked" });
                    send(&to_host, &a);
                }
                Packet::Command(line) => to_emu.write_all(&line).and_then(|_| to_emu.flush()).context("the UART to the host's emulator")?,
                Packet::Dropped(why) => println!("lab usb: quarch dropped {why}"),
                Packet::Stall => {
                    let mut g = to_host.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(f) = g.as_mut() {
                        let r = f.read(&mut [0u8; 1]);
                        println!("lab usb: quarch reply endpoint halted ({r:?})");
                    }
                }
            }
        }
        *to_host.lock().unwrap_or_else(|e| e.into_inner()) = None;
        println!("lab usb: quarch command endpoint closed (unbound?); opening it again");
        std::thread::sleep(Duration::from_millis(50));
    }
}
