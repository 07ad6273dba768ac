//! The USB side of the lab's Quarch module (`lab run --usb quarch`): what a module's USB
//! firmware does between its bulk endpoints and its command processor, the same processor its
//! serial port reaches. The lab's gadget (FunctionFS on the guest's `dummy_hcd`) runs this, and
//! the command processor is the host's Quarch emulator, reached over the guest's third UART
//! with the serial framing.
//!
//! The USB framing, as quarchpy (`connection_specific/connection_USB.py`, 2.2.23) and
//! faultline's `quarch/usb.rs` speak it:
//! - a command is one bulk OUT packet, the command's text NUL-padded to 64 bytes, no line end;
//! - the reply is bulk IN packets, one line each, NUL-padded to 64 bytes, then one packet that
//!   starts with `>` (the prompt); the module does not echo the command, as its serial port
//!   does;
//! - a module with 64-byte endpoints is locked into USB mode first: `02 00 00 01 04 01` locks
//!   and `02 00 00 01 03 00` unlocks, each one bulk OUT packet of 6 bytes, each answered by a
//!   packet whose byte 2 is 1 (quarchpy checks only byte 2, on both, and so does faultline; the
//!   other bytes are the request's first two here: no public document says what a module puts
//!   there).
//!
//! The firmware can misbehave as a module on a bad cable or with a wedged USB stack does
//! ([`UsbFault`], for the lab's tests of the controller's USB faults): a reply that never
//! comes, a short reply, a stalled endpoint.
//!
//! The gadget side: the module on the guest's USB bus (`lab run --usb quarch`), a FunctionFS
//! function with Quarch's ids (16D0:0449) and one vendor interface of 64-byte bulk endpoints
//! (a full-speed module, of the kind quarchpy and faultline lock into USB mode), which no kernel
//! driver binds: faultline in the guest reaches it through the libusb built into the binary,
//! claims its interface and speaks the USB framing to it. Its [`Firmware`] carries each command
//! to the host's Quarch emulator over the guest's third UART, in the serial framing, and each
//! reply back as bulk packets.
//!
//! Endpoints: the host reads a reply from the IN endpoint of the command endpoint's number
//! (quarchpy: the highest OUT endpoint of interface 0, and its IN twin; faultline the same).
//! `dummy_hcd` gives a function its fixed endpoints in the order of its own table, whatever
//! numbers the descriptors ask for: the first bulk OUT is 0x02, the bulk INs 0x81, 0x86, 0x8b,
//! then 0x82. So the interface asks for one OUT and four INs, and the bridge reads the
//! addresses back from the configuration the host side enumerated and answers on the IN twin
//! of the OUT, failing with the addresses it got if there is none.

pub use super::fault::{FaultSpec, UsbFault};

use super::super::error::{chain, Doing};
use super::{fault, ffs, UsbError};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The 64-byte packet of a command and of each reply line.
pub const PACKET: usize = 64;

/// The module's interface at full speed: vendor class, one OUT and four IN bulk endpoints of
/// 64 bytes (`ep1` the OUT, `ep2`..`ep5` the INs; the lab's gadget answers on the IN that the
/// UDC gave the OUT's number: see [`bridge`]).
pub fn descriptors() -> Vec<u8> {
    let mut eps = vec![(0x01u8, 2u8, PACKET as u16, 0u8)];
    eps.extend((1..=4).map(|n| (0x80 | n, 2, PACKET as u16, 0)));
    ffs::interface([0xff, 0x00, 0x00], &eps)
}
const LOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x04, 0x01];
const UNLOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x03, 0x00];

/// What the firmware does with one bulk OUT packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet {
    /// Answer on bulk IN at once (the USB-mode lock and unlock).
    Answer(Vec<u8>),
    /// Hand this line (ending `\r\n`) to the command processor; its reply goes through
    /// [`Firmware::on_serial`].
    Command(Vec<u8>),
    /// Not a packet this firmware takes (the reason, for the gadget's log); nothing is answered,
    /// so the host's read times out, as on a module that drops it.
    Dropped(String),
    /// Halt the reply endpoint ([`UsbFault::Stall`]); the command goes nowhere.
    Stall,
}

/// The firmware's state: whether the module is locked into USB mode, the command whose reply
/// is awaited, and the serial bytes of that reply read so far.
#[derive(Debug, Default)]
pub struct Firmware {
    pub locked: bool,
    pending: Option<String>,
    serial: Vec<u8>,
    /// The fault of the command awaited.
    fault: Option<UsbFault>,
    /// The fault the last packet met, if any (for the gadget's log, and to clear a `once`).
    pub faulted: Option<UsbFault>,
}

impl Firmware {
    /// One bulk OUT packet from the host.
    pub fn on_packet(&mut self, p: &[u8]) -> Packet {
        self.on_packet_with(p, None)
    }

    /// One bulk OUT packet from the host; a command that `spec` names meets its fault (the
    /// USB-mode lock is answered whatever the fault). [`Firmware::faulted`] says whether it did.
    pub fn on_packet_with(&mut self, p: &[u8], spec: Option<&FaultSpec>) -> Packet {
        self.faulted = None;
        if p == LOCK || p == UNLOCK {
            self.locked = p == LOCK;
            return Packet::Answer(vec![p[0], p[1], 1]);
        }
        if p.len() != PACKET {
            return Packet::Dropped(format!("a {}-byte packet that is neither a command (64 bytes) nor the USB-mode lock", p.len()));
        }
        let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
        let cmd = &p[..end];
        if let Some(at) = p[end..].iter().position(|&b| b != 0) {
            return Packet::Dropped(format!("a command packet with bytes after its NUL padding began (byte {})", end + at));
        }
        if !cmd.iter().all(|&c| (0x20..0x7f).contains(&c)) {
            return Packet::Dropped("a command packet with non-text bytes".into());
        }
        let text = String::from_utf8_lossy(cmd).into_owned();
        let fault = spec.filter(|s| text.starts_with(&s.prefix)).map(|s| s.fault);
        self.faulted = fault;
        if fault == Some(UsbFault::Stall) {
            return Packet::Stall;
        }
        self.fault = fault;
        self.pending = Some(text.clone());
        self.serial.clear();
        let mut line = text.into_bytes();
        line.extend_from_slice(b"\r\n");
        Packet::Command(line)
    }

    /// Bytes from the command processor (its serial framing: the command echoed, the reply's
    /// lines, then the prompt `>`): the bulk IN packets of the reply once the prompt has come,
    /// none before. Bytes while no command is awaited are dropped.
    pub fn on_serial(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let Some(cmd) = self.pending.as_ref() else { return Vec::new() };
        self.serial.extend_from_slice(bytes);
        let prompt = (0..self.serial.len()).find(|&i| self.serial[i] == b'>' && (i == 0 || self.serial[i - 1] == b'\n'));
        let Some(at) = prompt else { return Vec::new() };
        let text = String::from_utf8_lossy(&self.serial[..at]).into_owned();
        let mut lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
        // The serial port's echo is the first line; the USB side has none.
        if lines.first().is_some_and(|l| l.trim() == cmd.trim()) {
            lines.remove(0);
        }
        let fault = self.fault.take();
        self.pending = None;
        self.serial.clear();
        let mut out = Vec::new();
        match fault {
            Some(UsbFault::Timeout) => return out,
            Some(UsbFault::Short) => {
                let first = lines.iter().find(|l| !l.is_empty()).map_or(&b">"[..], |l| l.as_bytes());
                return vec![first[..1].to_vec()];
            }
            _ => {}
        }
        for l in lines.iter().filter(|l| !l.is_empty()) {
            for chunk in l.as_bytes().chunks(PACKET) {
                out.push(padded(chunk));
            }
        }
        out.push(padded(b">"));
        out
    }
}

fn padded(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    v.resize(PACKET, 0);
    v
}

/// Mounts the function and writes its descriptors (full speed only: `dummy_hcd` is loaded at
/// full speed for this board), then answers ep0 (there is nothing to answer but events).
pub fn start(instance: &str) -> Result<std::thread::JoinHandle<()>, UsbError> {
    ffs::start(instance, "Quarch module", 0, &descriptors(), None, control)
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
fn addresses(device: &Path) -> Result<Vec<u8>, UsbError> {
    let raw = std::fs::read(device.join("descriptors")).doing(|| format!("cannot read {}/descriptors", device.display()))?;
    let mut at = 18usize.min(raw.len());
    let mut eps = Vec::new();
    while at + 2 <= raw.len() {
        let (len, kind) = (usize::from(raw[at]), raw[at + 1]);
        if len < 2 {
            return Err(UsbError::BadDescriptor { device: device.to_path_buf(), len, at });
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
fn endpoints(instance: &str, device: &Path) -> Result<(std::fs::File, std::fs::File), UsbError> {
    let eps = addresses(device)?;
    let cmd = *eps.first().ok_or(UsbError::NoEndpoint)?;
    let Some(i) = eps.iter().position(|&a| a == cmd | 0x80) else {
        let seen: Vec<String> = eps.iter().enumerate().map(|(i, a)| format!("ep{} {a:#04x}", i + 1)).collect();
        return Err(UsbError::NoInTwin(seen.join(", ")));
    };
    let d = ffs::dir(instance);
    let out = std::fs::File::open(d.join("ep1")).doing(|| "cannot open the command endpoint ep1".into())?;
    let p = d.join(format!("ep{}", i + 1));
    // Read as well as written: a read of an IN endpoint halts it (a stall, FunctionFS's way).
    let inp = std::fs::OpenOptions::new().read(true).write(true).open(&p).doing(|| format!("cannot open {}", p.display()))?;
    println!("lab usb: quarch command endpoint ep1 {cmd:#04x}, replies on ep{} {:#04x}", i + 1, eps[i]);
    Ok((out, inp))
}

/// The reply endpoint, while the host has the board enumerated.
type ToHost = Arc<Mutex<Option<std::fs::File>>>;

/// Sends one bulk IN packet, if the reply endpoint is open (a failed write closes it).
fn send(to: &ToHost, p: &[u8]) {
    let mut g = to.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = g.as_mut() {
        if let Err(e) = f.write_all(p) {
            println!("lab usb: quarch bulk IN write failed ({e}); dropped until the host is back");
            *g = None;
        }
    }
}

/// The UART's bytes (the command processor's replies) through the firmware, as bulk IN
/// packets, on a thread of their own for as long as the UART reads.
fn relay_replies(fw: Arc<Mutex<Firmware>>, to_host: ToHost, mut from_emu: Box<dyn Read + Send>) {
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

/// The bridge, until the guest powers off: bulk OUT packets through the firmware to the UART
/// (or answered at once: the USB-mode lock), the UART's replies back as bulk IN packets. An
/// unbind (the board unplugged) closes the endpoints; they are opened again when it is back.
pub fn bridge(instance: &str, device: &Path, from_emu: Box<dyn Read + Send>, mut to_emu: Box<dyn Write + Send>) -> Result<(), UsbError> {
    let fw = Arc::new(Mutex::new(Firmware::default()));
    let to_host: ToHost = Arc::new(Mutex::new(None));
    relay_replies(fw.clone(), to_host.clone(), from_emu);
    // One packet's worth a read: a bulk OUT transfer ends at a short packet or when the buffer
    // is full, so a larger buffer would run full 64-byte commands together.
    let mut buf = [0u8; PACKET];
    loop {
        let (mut out, inp) = match endpoints(instance, device) {
            Ok(eps) => eps,
            Err(e) => {
                println!("lab usb: quarch endpoints: {}", chain(&e));
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        *to_host.lock().unwrap_or_else(|e| e.into_inner()) = Some(inp);
        while let Ok(n) = out.read(&mut buf) {
            on_packet(&buf[..n], &fw, &to_host, &mut *to_emu)?;
        }
        *to_host.lock().unwrap_or_else(|e| e.into_inner()) = None;
        println!("lab usb: quarch command endpoint closed (unbound?); opening it again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One bulk OUT packet: through the firmware (meeting the fault file's fault, if it names
/// it), then answered, sent on to the command processor, dropped or stalled.
fn on_packet(packet: &[u8], fw: &Mutex<Firmware>, to_host: &ToHost, to_emu: &mut dyn Write) -> Result<(), UsbError> {
    let spec = fault::fault_now();
    let (r, met) = {
        let mut f = fw.lock().unwrap_or_else(|e| e.into_inner());
        (f.on_packet_with(packet, spec.as_ref()), f.faulted)
    };
    if let (Some(fault), Some(spec)) = (met, &spec) {
        let what = String::from_utf8_lossy(packet).trim_end_matches('\0').to_string();
        println!("lab usb: quarch fault {fault:?} on {what:?}{}", if spec.once { " (once: cleared)" } else { "" });
        if spec.once {
            let _ = std::fs::remove_file(fault::FAULT_FILE);
        }
    }
    match r {
        Packet::Answer(a) => {
            let locked = fw.lock().unwrap_or_else(|e| e.into_inner()).locked;
            println!("lab usb: quarch USB mode {}", if locked { "locked" } else { "unlocked" });
            send(to_host, &a);
        }
        Packet::Command(line) => to_emu.write_all(&line).and_then(|_| to_emu.flush()).doing(|| "the UART to the host's emulator".into())?,
        Packet::Dropped(why) => println!("lab usb: quarch dropped {why}"),
        Packet::Stall => {
            let mut g = to_host.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = g.as_mut() {
                let r = f.read(&mut [0u8; 1]);
                println!("lab usb: quarch reply endpoint halted ({r:?})");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Vec<u8> {
        padded(s.as_bytes())
    }

    #[test]
    fn the_lock_is_answered_with_byte_2_set_and_a_command_goes_on_as_a_line() {
        let mut f = Firmware::default();
        assert_eq!(f.on_packet(&UNLOCK), Packet::Answer(vec![2, 0, 1]));
        assert_eq!(f.on_packet(&LOCK), Packet::Answer(vec![2, 0, 1]));
        assert!(f.locked);
        assert_eq!(f.on_packet(&cmd("RUN:POWer DOWN")), Packet::Command(b"RUN:POWer DOWN\r\n".to_vec()));
    }

    #[test]
    fn the_reply_is_one_packet_a_line_without_the_echo_then_the_prompt() {
        let mut f = Firmware::default();
        f.on_packet(&cmd("*IDN?"));
        // The serial reply, in pieces, as a UART delivers it.
        assert!(f.on_serial(b"*IDN?\r\nFamily: Torridon\r\nName: Programmable").is_empty());
        let long = "x".repeat(70);
        let out = f.on_serial(format!(" Power Module\r\n{long}\r\n>").as_bytes());
        assert_eq!(
            out,
            vec![cmd("Family: Torridon"), cmd("Name: Programmable Power Module"), cmd(&"x".repeat(64)), cmd("xxxxxx"), cmd(">")]
        );
        // What faultline's USB wire reads back from these packets.
        assert!(f.on_serial(b"late bytes\r\n>").is_empty(), "nothing is awaited");
    }

    #[test]
    fn faults_drop_or_cut_the_reply_or_halt_before_the_command_goes_on() {
        let spec = |fault, prefix: &str| FaultSpec { fault, once: false, prefix: prefix.into() };
        let mut f = Firmware::default();
        assert_eq!(f.on_packet_with(&cmd("RUN:POWer DOWN"), Some(&spec(UsbFault::Stall, ""))), Packet::Stall);
        assert_eq!(f.faulted, Some(UsbFault::Stall));
        assert_eq!(f.on_serial(b"RUN:POWer DOWN\r\nOK\r\n>"), Vec::<Vec<u8>>::new(), "nothing was sent on");
        let timeout = spec(UsbFault::Timeout, "RUN:POWer DOWN");
        assert_eq!(f.on_packet_with(&cmd("RUN:POWer DOWN"), Some(&timeout)), Packet::Command(b"RUN:POWer DOWN\r\n".to_vec()));
        assert!(f.on_serial(b"RUN:POWer DOWN\r\nOK\r\n>").is_empty());
        // A command the prefix does not name is answered whole.
        f.on_packet_with(&cmd("*IDN?"), Some(&timeout));
        assert_eq!(f.faulted, None);
        assert_eq!(f.on_serial(b"*IDN?\r\nName: x\r\n>"), vec![cmd("Name: x"), cmd(">")]);
        f.on_packet_with(&cmd("RUN:POWer?"), Some(&spec(UsbFault::Short, "")));
        assert_eq!(f.on_serial(b"RUN:POWer?\r\nOFF\r\n>"), vec![b"O".to_vec()]);
        // The lock is answered whatever the fault; the next command is whole.
        assert_eq!(f.on_packet_with(&LOCK, Some(&spec(UsbFault::Stall, ""))), Packet::Answer(vec![2, 0, 1]));
        assert_eq!(f.faulted, None);
        f.on_packet(&cmd("RUN:POWer?"));
        assert_eq!(f.on_serial(b"RUN:POWer?\r\nOFF\r\n>"), vec![cmd("OFF"), cmd(">")]);
    }

    #[test]
    fn an_empty_command_gets_the_prompt_alone_and_bad_packets_are_dropped() {
        let mut f = Firmware::default();
        assert_eq!(f.on_packet(&cmd("")), Packet::Command(b"\r\n".to_vec()));
        assert_eq!(f.on_serial(b"\r\n>"), vec![cmd(">")]);
        for (p, why) in [
            (vec![1, 2, 3], "a 3-byte packet"),
            (
                {
                    let mut p = cmd("RUN");
                    p[10] = b'X';
                    p
                },
                "after its NUL padding began (byte 10)",
            ),
            (cmd("RUN\u{7f}"), "non-text"),
        ] {
            match f.on_packet(&p) {
                Packet::Dropped(w) => assert!(w.contains(why), "{w}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
