//! Relay boards: USB HID relays, CH340 "LCUS" serial relays and Numato USB relays.
//!
//! Wiring convention: the drive is powered while the relay is energised ("on"), i.e. its
//! supply runs through the normally-open contact. Protocols (`docs/DOMAIN.md`
//! section 5; the HID report layout as the `usbrelay` project drives DCT Tech boards, the
//! transfers as hidapi's libusb backend performs them; Numato from Numato Lab's USB relay
//! module documentation):
//! - HID relay (16C0:05DF): output report `[0x00, 0xFF on | 0xFD off, relay 1..8, 0 x6]`;
//!   feature report 1 returns the board id in bytes 0..5 and the relay bitmask in byte 7.
//!   The state is read back after every switch, so a cut is confirmed.
//! - LCUS (CH340, 9600 8N1): 4-byte frames `A0 channel state checksum`, checksum the low byte
//!   of the sum of the other three. Never acknowledged, no state query: the capabilities say
//!   so, and the caller must confirm a cut by the device disappearing.
//! - Numato (CDC-ACM): `relay on N\r`, `relay off N\r`, `relay read N\r`; the board echoes the
//!   command, answers (`on`/`off` for `read`), and ends with `\n\r>`. The state is read back
//!   after every switch.

use super::usb::{HidReports, RusbHid};
use super::{drain, open_serial, read_until, show_bytes, write_all, ControlEnv, ReadFault};
use crate::power::{PowerCaps, PowerError, PowerState, PowerSwitch};
use std::path::Path;
use std::time::{Duration, Instant};

// --- HID -------------------------------------------------------------------------------------

/// A USB HID relay channel.
pub struct HidRelay<H: HidReports = RusbHid> {
    dev: H,
    relay: u8,
    name: String,
}

impl HidRelay<RusbHid> {
    pub fn open_usb(serial: &str, relay: u8, env: &ControlEnv) -> Result<Self, PowerError> {
        let name = format!("hidrelay+usb://{serial}?relay={relay}");
        let dev = RusbHid::open(serial, env.timeout).map_err(|e| PowerError::Failed {
            switch: name.clone(),
            command: "open".into(),
            reason: e.to_string(),
        })?;
        HidRelay::new(dev, relay, name)
    }
}

impl<H: HidReports> HidRelay<H> {
    pub fn new(dev: H, relay: u8, name: String) -> Result<Self, PowerError> {
        if !(1..=8).contains(&relay) {
            return Err(PowerError::Failed { switch: name, command: "open".into(), reason: format!("relay {relay} is not in 1..=8") });
        }
        Ok(HidRelay { dev, relay, name })
    }

    /// The output report that switches `relay`.
    pub fn report(relay: u8, on: bool) -> [u8; 9] {
        let mut r = [0u8; 9];
        r[1] = if on { 0xFF } else { 0xFD };
        r[2] = relay;
        r
    }

    fn err(&self, command: &str, reason: String) -> PowerError {
        PowerError::Failed { switch: self.name.clone(), command: command.into(), reason }
    }

    /// The board's relay bitmask (feature report 1, byte 7).
    pub fn bitmask(&mut self) -> Result<u8, PowerError> {
        let mut buf = [0u8; 9];
        buf[0] = 1;
        let n = self.dev.read_feature(1, &mut buf).map_err(|e| self.err("read state (feature report 1)", e.to_string()))?;
        if n < 8 {
            return Err(self.err("read state (feature report 1)", format!("short report: {}", show_bytes(&buf[..n]))));
        }
        Ok(buf[7])
    }

    fn set(&mut self, on: bool) -> Result<(), PowerError> {
        let cmd = if on { "relay on" } else { "relay off" };
        self.dev.write_output(&Self::report(self.relay, on)).map_err(|e| self.err(cmd, e.to_string()))?;
        let mask = self.bitmask()?;
        if (mask >> (self.relay - 1)) & 1 != on as u8 {
            return Err(self.err(cmd, format!("relay {} still reads {} (bitmask {mask:#04x})", self.relay, if on { "off" } else { "on" })));
        }
        Ok(())
    }
}

impl<H: HidReports> PowerSwitch for HidRelay<H> {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: true, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        self.set(false)
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        self.set(true)
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        let m = self.bitmask()?;
        Ok(if (m >> (self.relay - 1)) & 1 == 1 { PowerState::On } else { PowerState::Off })
    }
    fn identify(&mut self) -> Result<String, PowerError> {
        let m = self.bitmask()?;
        Ok(format!("{} (USB HID relay, relay bitmask {m:#010b})", self.name))
    }
}

// --- LCUS ------------------------------------------------------------------------------------

/// A CH340 "LCUS" serial relay channel. Write-only hardware.
pub struct Lcus {
    port: Box<dyn serialport::SerialPort>,
    channel: u8,
    name: String,
}

impl Lcus {
    pub fn open(path: &Path, channel: u8, env: &ControlEnv) -> Result<Lcus, PowerError> {
        let name = format!("lcus+serial://{}?channel={channel}", path.display());
        let port = open_serial(path, 9600, env.timeout).map_err(|e| PowerError::Failed {
            switch: name.clone(),
            command: "open".into(),
            reason: e.to_string(),
        })?;
        Ok(Lcus { port, channel, name })
    }

    /// The 4-byte frame that switches `channel`.
    pub fn frame(channel: u8, on: bool) -> [u8; 4] {
        let state = on as u8;
        [0xA0, channel, state, 0xA0u8.wrapping_add(channel).wrapping_add(state)]
    }

    fn send(&mut self, on: bool) -> Result<(), PowerError> {
        let f = Self::frame(self.channel, on);
        write_all(&mut self.port, &f).map_err(|e| PowerError::Failed {
            switch: self.name.clone(),
            command: format!("frame {}", show_bytes(&f)),
            reason: e.to_string(),
        })
        // The frame has left the host (flush waits for the UART); whether the board acted on
        // it is unknowable, which the capabilities say.
    }
}

impl PowerSwitch for Lcus {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: false, voltage_readback: false, acknowledges: false, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        self.send(false)
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        self.send(true)
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        Err(PowerError::Unsupported {
            switch: self.name.clone(),
            what: "read its state (LCUS relays neither acknowledge nor report)".into(),
        })
    }
    fn identify(&mut self) -> Result<String, PowerError> {
        Ok(format!("{} (CH340 LCUS relay: write-only, no acknowledgement, no state readback)", self.name))
    }
}

// --- Numato ----------------------------------------------------------------------------------

/// Why one exchange with a Numato board failed: each quotes what the board sent.
#[derive(Debug, thiserror::Error)]
pub enum NumatoError {
    #[error("non-text reply {}", show_bytes(.reply))]
    NonText { reply: Vec<u8> },
    #[error("no prompt in {}", show_bytes(.reply))]
    NoPrompt { reply: Vec<u8> },
    #[error("echo does not match {cmd:?}: {}", show_bytes(.reply))]
    Echo { cmd: String, reply: Vec<u8> },
    #[error("write: {0}")]
    Write(#[source] std::io::Error),
    #[error("no prompt within {after:?} (got {})", show_bytes(.got))]
    Timeout { after: Duration, got: Vec<u8> },
    #[error("reply too long ({})", show_bytes(.got))]
    TooLong { got: Vec<u8> },
    #[error("port closed (got {})", show_bytes(.got))]
    Closed { got: Vec<u8> },
    #[error("read: {source} (got {})", show_bytes(.got))]
    Read { source: std::io::Error, got: Vec<u8> },
}

impl NumatoError {
    /// The board's tty hung up under us (USB unplug: the kernel's tty answers EPIPE, EIO or
    /// ENODEV to a write, end of file to a read).
    pub fn hung_up(&self) -> bool {
        match self {
            NumatoError::Write(e) => {
                e.kind() == std::io::ErrorKind::BrokenPipe || matches!(e.raw_os_error(), Some(5 | 6 | 19))
                // EIO, ENXIO, ENODEV
            }
            NumatoError::Closed { .. } => true,
            _ => false,
        }
    }
}

/// A Numato USB relay channel.
pub struct Numato {
    port: Box<dyn serialport::SerialPort>,
    relay: u8,
    name: String,
    timeout: Duration,
    attempts: u32,
    /// The board's USB serial number (`numato+usb://`): after a hang-up its tty is looked up
    /// again, under whatever name the kernel gave it, and the command resent there.
    serial: Option<String>,
}

/// Why a Numato board's tty was not found (again).
#[derive(Debug, thiserror::Error)]
pub enum NumatoLookupError {
    #[error(transparent)]
    List(#[from] super::SerialError),
    /// No tty has the serial; `seen`: the Numato ttys found, with their serials.
    #[error("no tty of a Numato board with USB serial {serial:?} (Numato boards seen: {})", if seen.is_empty() { "none".to_string() } else { seen.join(", ") })]
    NotFound { serial: String, seen: Vec<String> },
    /// The board is named by its tty's path, which is gone.
    #[error("it is named by its tty's path (numato+usb://SERIAL finds it again by its serial)")]
    NamedByPath,
    #[error(transparent)]
    Open(super::SerialError),
}

/// The tty of the Numato board whose USB serial number is `serial` (sysfs, through
/// serialport's scan), or why there is none.
pub fn numato_tty(serial: &str) -> Result<std::path::PathBuf, NumatoLookupError> {
    let ports = super::list_serial_ports()?;
    let mut seen = Vec::new();
    for p in ports {
        let Some((vid, _, sn, _)) = &p.usb else { continue };
        if *vid != super::usb::NUMATO_VID {
            continue;
        }
        if sn.as_deref() == Some(serial) {
            return Ok(p.path.into());
        }
        seen.push(format!("{} serial {}", p.path, sn.as_deref().unwrap_or("?")));
    }
    Err(NumatoLookupError::NotFound { serial: serial.to_string(), seen })
}

fn set_port_timeout(p: &mut Box<dyn serialport::SerialPort>, t: Duration) {
    let _ = p.set_timeout(t);
}

impl Numato {
    pub fn open(path: &Path, relay: u8, env: &ControlEnv) -> Result<Numato, PowerError> {
        let name = format!("numato+serial://{}?relay={relay}", path.display());
        let port = open_serial(path, 19200, env.timeout).map_err(|e| PowerError::Failed {
            switch: name.clone(),
            command: "open".into(),
            reason: e.to_string(),
        })?;
        Ok(Numato { port, relay, name, timeout: env.timeout, attempts: env.attempts.max(1), serial: None })
    }

    /// The board whose USB serial number is `serial`, through its tty wherever it is now.
    pub fn open_usb(serial: &str, relay: u8, env: &ControlEnv) -> Result<Numato, PowerError> {
        let name = format!("numato+usb://{serial}?relay={relay}");
        let fail = |reason: String| PowerError::Failed { switch: name.clone(), command: "open".into(), reason };
        let path = numato_tty(serial).map_err(|e| fail(e.to_string()))?;
        let port = open_serial(&path, 19200, env.timeout).map_err(|e| fail(e.to_string()))?;
        Ok(Numato { port, relay, name, timeout: env.timeout, attempts: env.attempts.max(1), serial: Some(serial.to_string()) })
    }

    /// After a hang-up, a board named by serial is looked for again, for up to the timeout (a
    /// replugged board takes a moment to enumerate), and its tty opened; returns where, or why
    /// not.
    fn reopen(&mut self) -> Result<std::path::PathBuf, NumatoLookupError> {
        let serial = self.serial.clone().ok_or(NumatoLookupError::NamedByPath)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            match numato_tty(&serial) {
                Ok(path) => {
                    self.port = open_serial(&path, 19200, self.timeout).map_err(NumatoLookupError::Open)?;
                    return Ok(path);
                }
                Err(why) if Instant::now() >= deadline => return Err(why),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Relay numbers above 9 are letters on the boards (`A` for 10, ...).
    pub fn index(relay: u8) -> String {
        match relay {
            0..=9 => relay.to_string(),
            n => ((b'A' + n - 10) as char).to_string(),
        }
    }

    /// Parses `echo\n\r[answer\n\r]>`; returns the answer (empty for set commands).
    pub fn parse_reply(cmd: &str, buf: &[u8]) -> Result<String, NumatoError> {
        let text = std::str::from_utf8(buf).map_err(|_| NumatoError::NonText { reply: buf.to_vec() })?;
        let body = text.strip_suffix('>').ok_or_else(|| NumatoError::NoPrompt { reply: buf.to_vec() })?;
        let mut lines = body.split(['\n', '\r']).filter(|l| !l.is_empty());
        match lines.next() {
            Some(echo) if echo.trim() == cmd => {}
            _ => return Err(NumatoError::Echo { cmd: cmd.to_string(), reply: buf.to_vec() }),
        }
        let answer: Vec<&str> = lines.collect();
        if answer.iter().any(|l| l.bytes().any(|c| !(0x20..0x7f).contains(&c))) {
            return Err(NumatoError::NonText { reply: buf.to_vec() });
        }
        Ok(answer.join(" ").trim().to_string())
    }

    fn exchange_once(&mut self, cmd: &str) -> Result<String, NumatoError> {
        write_all(&mut self.port, format!("{cmd}\r").as_bytes()).map_err(NumatoError::Write)?;
        let mut buf = Vec::new();
        match read_until(&mut self.port, &mut buf, Instant::now() + self.timeout, set_port_timeout, |b| b.ends_with(b"\n\r>")) {
            Ok(()) => Self::parse_reply(cmd, &buf),
            Err(ReadFault::Timeout) => Err(NumatoError::Timeout { after: self.timeout, got: buf }),
            Err(ReadFault::TooLong) => Err(NumatoError::TooLong { got: buf }),
            Err(ReadFault::Closed) => Err(NumatoError::Closed { got: buf }),
            Err(ReadFault::Io(source)) => Err(NumatoError::Read { source, got: buf }),
        }
    }

    /// One command, resynchronising (a bare `\r` re-prompts the board) and resending after a
    /// garbled or missing reply, at most `attempts` times. All commands are idempotent.
    fn command(&mut self, cmd: &str) -> Result<String, PowerError> {
        let mut faults = Vec::new();
        let mut reopened = false;
        for attempt in 0..self.attempts {
            if attempt > 0 {
                let quiet = Duration::from_millis(60);
                drain(&mut self.port, quiet, self.timeout, set_port_timeout);
                let _ = write_all(&mut self.port, b"\r");
                let mut buf = Vec::new();
                let _ = read_until(&mut self.port, &mut buf, Instant::now() + self.timeout, set_port_timeout, |b| b.ends_with(b">"));
                drain(&mut self.port, quiet, self.timeout, set_port_timeout);
            }
            match self.exchange_once(cmd) {
                Ok(a) => return Ok(a),
                // A tty that hung up stays hung up: no retry brings the board back to it. A board
                // named by serial is looked for again, once, and the command resent there.
                Err(e) if e.hung_up() => {
                    let gone = format!(
                        "the board is gone: its tty hung up ({e}); unplugged, or re-enumerated (a board plugged back while this tty was open comes back under another name)"
                    );
                    if reopened {
                        faults.push(gone);
                        break;
                    }
                    reopened = true;
                    match self.reopen() {
                        Ok(path) => faults.push(format!("{gone}; found again at {}", path.display())),
                        Err(why) => {
                            return Err(PowerError::Failed {
                                switch: self.name.clone(),
                                command: cmd.into(),
                                reason: format!("{gone}; {why}"),
                            })
                        }
                    }
                }
                Err(e) => faults.push(e.to_string()),
            }
        }
        Err(PowerError::Failed {
            switch: self.name.clone(),
            command: cmd.into(),
            reason: format!("gave up after {} attempts: {}", self.attempts, faults.join("; ")),
        })
    }

    fn set(&mut self, on: bool) -> Result<(), PowerError> {
        let cmd = format!("relay {} {}", if on { "on" } else { "off" }, Self::index(self.relay));
        let a = self.command(&cmd)?;
        if !a.is_empty() {
            return Err(PowerError::Failed { switch: self.name.clone(), command: cmd, reason: format!("unexpected answer {a:?}") });
        }
        let got = self.state()?;
        let want = if on { PowerState::On } else { PowerState::Off };
        if got != want {
            return Err(PowerError::Failed {
                switch: self.name.clone(),
                command: cmd,
                reason: format!("the board accepted it, but the relay reads {got} afterwards"),
            });
        }
        Ok(())
    }
}

impl PowerSwitch for Numato {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: true, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }
    fn power_off(&mut self) -> Result<(), PowerError> {
        self.set(false)
    }
    fn power_on(&mut self) -> Result<(), PowerError> {
        self.set(true)
    }
    fn state(&mut self) -> Result<PowerState, PowerError> {
        let cmd = format!("relay read {}", Self::index(self.relay));
        let a = self.command(&cmd)?;
        match a.as_str() {
            "on" => Ok(PowerState::On),
            "off" => Ok(PowerState::Off),
            _ => Err(PowerError::Failed {
                switch: self.name.clone(),
                command: cmd,
                reason: format!("expected on or off, board answered {a:?}"),
            }),
        }
    }
    fn identify(&mut self) -> Result<String, PowerError> {
        let v = self.command("ver")?;
        Ok(format!("{} (Numato relay, firmware {v})", self.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::usb::UsbError;

    /// A HID relay board in memory: what a V-USB relay does with the two reports.
    struct FakeBoard {
        mask: u8,
        written: Vec<Vec<u8>>,
        ignore_writes: bool,
    }

    impl HidReports for FakeBoard {
        fn write_output(&mut self, report: &[u8]) -> Result<(), UsbError> {
            self.written.push(report.to_vec());
            if !self.ignore_writes {
                let bit = 1u8 << (report[2] - 1);
                match report[1] {
                    0xFF => self.mask |= bit,
                    0xFD => self.mask &= !bit,
                    // What a board does with a request it does not know.
                    _ => return Err(UsbError::Report { request: "SET_REPORT", source: rusb::Error::Pipe }),
                }
            }
            Ok(())
        }
        fn read_feature(&mut self, id: u8, buf: &mut [u8]) -> Result<usize, UsbError> {
            assert_eq!(id, 1);
            buf[..5].copy_from_slice(b"HURTM");
            buf[7] = self.mask;
            Ok(8)
        }
    }

    #[test]
    fn hid_reports_have_the_documented_bytes() {
        assert_eq!(HidRelay::<FakeBoard>::report(2, true), [0x00, 0xFF, 2, 0, 0, 0, 0, 0, 0]);
        assert_eq!(HidRelay::<FakeBoard>::report(8, false), [0x00, 0xFD, 8, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn hid_relay_switches_and_confirms_by_the_feature_report() {
        let board = FakeBoard { mask: 0b0000_0001, written: vec![], ignore_writes: false };
        let mut r = HidRelay::new(board, 3, "hidrelay+usb://HURTM?relay=3".into()).unwrap();
        r.power_on().unwrap();
        assert_eq!(r.state().unwrap(), PowerState::On);
        assert_eq!(r.dev.mask, 0b0000_0101);
        r.power_off().unwrap();
        assert_eq!(r.state().unwrap(), PowerState::Off);
        assert_eq!(r.dev.mask, 0b0000_0001, "other relays untouched");
        assert_eq!(r.dev.written, vec![vec![0, 0xFF, 3, 0, 0, 0, 0, 0, 0], vec![0, 0xFD, 3, 0, 0, 0, 0, 0, 0]]);
    }

    #[test]
    fn hid_relay_that_does_not_switch_is_an_error() {
        let board = FakeBoard { mask: 0b100, written: vec![], ignore_writes: true };
        let mut r = HidRelay::new(board, 3, "hidrelay+usb://HURTM?relay=3".into()).unwrap();
        let e = r.power_off().unwrap_err().to_string();
        assert!(e.contains("relay off") && e.contains("still reads on"), "{e}");
        assert!(HidRelay::new(FakeBoard { mask: 0, written: vec![], ignore_writes: false }, 9, "x".into()).is_err());
    }

    #[test]
    fn lcus_frames_carry_their_checksum() {
        assert_eq!(Lcus::frame(1, true), [0xA0, 0x01, 0x01, 0xA2]);
        assert_eq!(Lcus::frame(1, false), [0xA0, 0x01, 0x00, 0xA1]);
        assert_eq!(Lcus::frame(0x70, true), [0xA0, 0x70, 0x01, 0x11]);
    }

    #[test]
    fn numato_replies_parse() {
        assert_eq!(Numato::parse_reply("relay read 0", b"relay read 0\n\ron\n\r>").unwrap(), "on");
        assert_eq!(Numato::parse_reply("relay on 0", b"relay on 0\n\r>").unwrap(), "");
        let e = Numato::parse_reply("relay on 0", b"relay on 1\n\r>").unwrap_err();
        assert_eq!(e.to_string(), "echo does not match \"relay on 0\": \"relay on 1\\n\\r>\"");
        let e = Numato::parse_reply("relay on 0", b"relay on 0\n\r").unwrap_err();
        assert_eq!(e.to_string(), "no prompt in \"relay on 0\\n\\r\"");
        assert_eq!(Numato::index(11), "B");
    }
}
