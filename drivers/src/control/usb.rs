//! The rusb layer: listing USB controllers, HID relay reports and Quarch bulk pipes.
//!
//! rusb hands out raw libusb handles that cannot be faked, so everything above it talks to two
//! small traits: [`HidReports`] (an output report, a feature report) and [`BulkPipe`] (64-byte
//! bulk packets). The relay and Quarch protocol bytes are tested against fakes of these traits;
//! the thin rusb implementations below them need real hardware and are not tested here.

use super::quarch::{QuarchWire, WireFault};
use std::time::{Duration, Instant};

pub const QUARCH_VID: u16 = 0x16D0;
pub const QUARCH_PID: u16 = 0x0449;
pub const HID_RELAY_VID: u16 = 0x16C0;
pub const HID_RELAY_PID: u16 = 0x05DF;
pub const CH340_VID: u16 = 0x1A86;
pub const CH340_PID: u16 = 0x7523;
/// Numato Lab's USB vendor id (their relay boards enumerate as CDC-ACM serial ports).
pub const NUMATO_VID: u16 = 0x2A19;

/// A USB device that looks like a supported controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsbController {
    pub vid: u16,
    pub pid: u16,
    pub serial: Option<String>,
    pub product: Option<String>,
    pub bus: u8,
    pub address: u8,
    /// The spec scheme faultline would use, e.g. `quarch+usb`.
    pub kind: &'static str,
}

/// Which supported controller kind a vendor/product pair is.
pub fn controller_kind(vid: u16, pid: u16) -> Option<&'static str> {
    match (vid, pid) {
        (QUARCH_VID, QUARCH_PID) => Some("quarch+usb"),
        (HID_RELAY_VID, HID_RELAY_PID) => Some("hidrelay+usb"),
        (CH340_VID, CH340_PID) => Some("lcus+serial"),
        (NUMATO_VID, _) => Some("numato+serial"),
        _ => None,
    }
}

/// Lists USB devices that look like supported controllers (serial numbers need read access to
/// the device; they are `None` otherwise).
pub fn list_controllers() -> Result<Vec<UsbController>, String> {
    let devices = usb_devices()?;
    let mut out = Vec::new();
    for d in devices.iter() {
        let Ok(desc) = d.device_descriptor() else { continue };
        let Some(kind) = controller_kind(desc.vendor_id(), desc.product_id()) else { continue };
        let (mut serial, mut product) = (None, None);
        if let Ok(h) = d.open() {
            serial = h.read_serial_number_string_ascii(&desc).ok();
            product = h.read_product_string_ascii(&desc).ok();
        }
        out.push(UsbController {
            vid: desc.vendor_id(),
            pid: desc.product_id(),
            serial,
            product,
            bus: d.bus_number(),
            address: d.address(),
            kind,
        });
    }
    Ok(out)
}

/// Every USB device, through a fresh libusb context (rusb's global context panics where
/// libusb cannot initialise, e.g. without /dev/bus/usb; this returns an error instead).
fn usb_devices() -> Result<rusb::DeviceList<rusb::Context>, String> {
    use rusb::UsbContext;
    let ctx = rusb::Context::new().map_err(|e| format!("cannot initialise libusb: {e}"))?;
    ctx.devices().map_err(|e| format!("cannot list USB devices: {e}"))
}

// --- HID relays ------------------------------------------------------------------------------

/// The two HID transfers a USB HID relay needs (report bytes as hidapi presents them: byte 0 is
/// the report id).
pub trait HidReports: Send {
    /// Sends an output report (`report[0]` is the report id, 0 for none).
    fn write_output(&mut self, report: &[u8]) -> Result<(), String>;
    /// Reads feature report `id` into `buf` (`buf[0]` comes back as the id); returns the length.
    fn read_feature(&mut self, id: u8, buf: &mut [u8]) -> Result<usize, String>;
}

/// A HID device through libusb control transfers (SET_REPORT / GET_REPORT on interface 0), the
/// way hidapi's libusb backend talks to devices without an interrupt OUT endpoint (V-USB relays
/// have none).
pub struct RusbHid {
    handle: rusb::DeviceHandle<rusb::Context>,
    timeout: Duration,
}

impl RusbHid {
    /// Opens the relay board with this id (the 5-character id the board reports in its
    /// feature report; these boards have no USB serial number).
    pub fn open(serial: &str, timeout: Duration) -> Result<RusbHid, String> {
        let devices = usb_devices()?;
        let mut seen = Vec::new();
        for d in devices.iter() {
            let Ok(desc) = d.device_descriptor() else { continue };
            if (desc.vendor_id(), desc.product_id()) != (HID_RELAY_VID, HID_RELAY_PID) {
                continue;
            }
            let h = d.open().map_err(|e| format!("cannot open HID relay at bus {} address {}: {e}", d.bus_number(), d.address()))?;
            let _ = h.set_auto_detach_kernel_driver(true);
            h.claim_interface(0).map_err(|e| format!("cannot claim HID relay interface: {e}"))?;
            let mut hid = RusbHid { handle: h, timeout };
            let id = hid.board_id().unwrap_or_default();
            if id == serial {
                return Ok(hid);
            }
            seen.push(id);
        }
        Err(format!("no USB HID relay with id {serial:?} (found: {seen:?})"))
    }

    /// The board id from feature report 1 (bytes 0..5).
    pub fn board_id(&mut self) -> Result<String, String> {
        let mut buf = [0u8; 9];
        let n = self.read_feature(1, &mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n.min(5)]).trim_end_matches('\0').to_string())
    }
}

impl HidReports for RusbHid {
    fn write_output(&mut self, report: &[u8]) -> Result<(), String> {
        let rt = rusb::request_type(rusb::Direction::Out, rusb::RequestType::Class, rusb::Recipient::Interface);
        let (id, data) = (report[0], if report[0] == 0 { &report[1..] } else { report });
        // SET_REPORT (0x09), report type output (2).
        let n =
            self.handle.write_control(rt, 0x09, (2u16 << 8) | id as u16, 0, data, self.timeout).map_err(|e| format!("SET_REPORT: {e}"))?;
        if n != data.len() {
            return Err(format!("SET_REPORT sent {n} of {} bytes", data.len()));
        }
        Ok(())
    }

    fn read_feature(&mut self, id: u8, buf: &mut [u8]) -> Result<usize, String> {
        let rt = rusb::request_type(rusb::Direction::In, rusb::RequestType::Class, rusb::Recipient::Interface);
        // GET_REPORT (0x01), report type feature (3). The relay firmware answers with its
        // 8-byte report (id in bytes 0..5, bitmask in byte 7), which is what callers index.
        self.handle.read_control(rt, 0x01, (3u16 << 8) | id as u16, 0, buf, self.timeout).map_err(|e| format!("GET_REPORT: {e}"))
    }
}

// --- Quarch bulk pipe ------------------------------------------------------------------------

/// 64-byte bulk packets to and from one endpoint pair.
pub trait BulkPipe: Send {
    fn write(&mut self, packet: &[u8], timeout: Duration) -> Result<usize, String>;
    /// Reads one packet; an error containing "Timeout" means nothing arrived in time.
    fn read(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize, String>;
}

pub struct RusbBulk {
    handle: rusb::DeviceHandle<rusb::Context>,
    ep: u8,
    unlock_on_close: bool,
}

impl BulkPipe for RusbBulk {
    fn write(&mut self, packet: &[u8], timeout: Duration) -> Result<usize, String> {
        self.handle.write_bulk(self.ep, packet, timeout).map_err(|e| format!("bulk write: {e:?}"))
    }
    fn read(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize, String> {
        self.handle.read_bulk(self.ep | 0x80, buf, timeout).map_err(|e| format!("bulk read: {e:?}"))
    }
}

impl Drop for RusbBulk {
    fn drop(&mut self) {
        if self.unlock_on_close {
            let mut buf = [0u8; 64];
            let t = Duration::from_millis(500);
            if self.write(&QUARCH_USB_UNLOCK, t).is_ok() {
                let _ = self.read(&mut buf, t);
            }
        }
        let _ = self.handle.release_interface(0);
    }
}

const QUARCH_USB_LOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x04, 0x01];
const QUARCH_USB_UNLOCK: [u8; 6] = [0x02, 0x00, 0x00, 0x01, 0x03, 0x00];

/// The Quarch USB framing over any [`BulkPipe`].
pub struct QuarchUsbWire<P: BulkPipe = RusbBulk> {
    pipe: P,
}

impl QuarchUsbWire<RusbBulk> {
    /// Opens the Quarch module whose USB serial number is `serial` (a `QTL` prefix is ignored
    /// on both sides, as quarchpy does).
    pub fn open(serial: &str, timeout: Duration) -> Result<QuarchUsbWire<RusbBulk>, String> {
        let strip = |s: &str| s.trim().trim_start_matches("QTL").trim_start_matches("qtl").to_string();
        let want = strip(serial);
        let devices = usb_devices()?;
        let mut seen = Vec::new();
        for d in devices.iter() {
            let Ok(desc) = d.device_descriptor() else { continue };
            if (desc.vendor_id(), desc.product_id()) != (QUARCH_VID, QUARCH_PID) {
                continue;
            }
            let Ok(h) = d.open() else { continue };
            let sn = h.read_serial_number_string_ascii(&desc).unwrap_or_default();
            if strip(&sn) != want {
                seen.push(sn);
                continue;
            }
            let _ = h.set_auto_detach_kernel_driver(true);
            h.claim_interface(0).map_err(|e| format!("cannot claim interface 0 of Quarch {sn}: {e}"))?;
            // The command endpoint is the highest OUT endpoint of interface 0.
            let cfg = d.active_config_descriptor().map_err(|e| format!("cannot read configuration of Quarch {sn}: {e}"))?;
            let mut best: Option<(u8, u16)> = None;
            for intf in cfg.interfaces().filter(|i| i.number() == 0) {
                for alt in intf.descriptors() {
                    for ep in alt.endpoint_descriptors() {
                        if ep.direction() == rusb::Direction::Out && best.is_none_or(|(a, _)| ep.address() > a) {
                            best = Some((ep.address(), ep.max_packet_size()));
                        }
                    }
                }
            }
            let (ep, max) = best.ok_or_else(|| format!("Quarch {sn} has no OUT endpoint on interface 0"))?;
            let mut pipe = RusbBulk { handle: h, ep, unlock_on_close: max <= 64 };
            if max <= 64 {
                lock_usb_mode(&mut pipe, timeout)?;
            }
            return Ok(QuarchUsbWire { pipe });
        }
        Err(format!("no Quarch USB module with serial {serial:?} (found: {seen:?})"))
    }
}

/// Locks a 64-byte-endpoint module into USB mode (unlock first, to free a module a previous
/// process left locked).
pub fn lock_usb_mode<P: BulkPipe>(pipe: &mut P, timeout: Duration) -> Result<(), String> {
    let mut buf = [0u8; 64];
    pipe.write(&QUARCH_USB_UNLOCK, timeout)?;
    let _ = pipe.read(&mut buf, timeout);
    pipe.write(&QUARCH_USB_LOCK, timeout)?;
    let n = pipe.read(&mut buf, timeout)?;
    if n < 3 || buf[2] != 1 {
        return Err(format!("USB-mode lock refused: {}", super::show_bytes(&buf[..n])));
    }
    Ok(())
}

impl<P: BulkPipe> QuarchUsbWire<P> {
    pub fn new(pipe: P) -> Self {
        QuarchUsbWire { pipe }
    }

    /// The 64-byte, NUL-padded command packet.
    pub fn packet(cmd: &str) -> Result<[u8; 64], String> {
        let b = cmd.as_bytes();
        if b.len() > 64 {
            return Err(format!("command of {} bytes does not fit a 64-byte USB packet", b.len()));
        }
        let mut p = [0u8; 64];
        p[..b.len()].copy_from_slice(b);
        Ok(p)
    }
}

impl<P: BulkPipe> QuarchWire for QuarchUsbWire<P> {
    fn exchange(&mut self, cmd: &str, timeout: Duration) -> Result<String, WireFault> {
        let packet = Self::packet(cmd).map_err(|why| WireFault::Garbage { got: Vec::new(), why })?;
        let n = self.pipe.write(&packet, timeout).map_err(|why| WireFault::Closed { got: Vec::new(), why })?;
        if n != 64 {
            return Err(WireFault::Closed { got: Vec::new(), why: format!("bulk write sent {n} of 64 bytes") });
        }
        let mut lines: Vec<String> = Vec::new();
        let mut raw = Vec::new();
        let deadline = Instant::now() + timeout;
        // Bounded: at most 1024 packets (64 KiB), and the deadline.
        for _ in 0..1024 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(WireFault::Timeout { got: raw });
            }
            let mut buf = [0u8; 64];
            let n = match self.pipe.read(&mut buf, left) {
                Ok(n) => n,
                Err(why) if why.contains("Timeout") || why.contains("timed out") => return Err(WireFault::Timeout { got: raw }),
                Err(why) => return Err(WireFault::Closed { got: raw, why }),
            };
            raw.extend_from_slice(&buf[..n]);
            let end = buf[..n].iter().position(|&c| c == 0).unwrap_or(n);
            let line = &buf[..end];
            if !line.iter().all(|&c| c == b'\r' || c == b'\n' || c == b'\t' || (0x20..0x7f).contains(&c)) {
                return Err(WireFault::Garbage { got: raw, why: "non-text bytes in the reply".into() });
            }
            let line = String::from_utf8_lossy(line).trim().to_string();
            if line.starts_with('>') {
                return Ok(lines.join("\r\n").trim().to_string());
            }
            lines.push(line);
        }
        Err(WireFault::Garbage { got: raw, why: "no prompt after 1024 packets".into() })
    }

    /// Sends a junk command and reads until the pipe is quiet, as quarchpy's
    /// `clean_and_flush_stuck_usb_comms` does.
    fn resync(&mut self, timeout: Duration) -> Result<(), WireFault> {
        let p = Self::packet("HEZZ0?").expect("fits");
        self.pipe.write(&p, timeout).map_err(|why| WireFault::Closed { got: Vec::new(), why })?;
        let mut buf = [0u8; 64];
        for _ in 0..1024 {
            if self.pipe.read(&mut buf, Duration::from_millis(250)).is_err() {
                return Ok(());
            }
        }
        Err(WireFault::Garbage { got: Vec::new(), why: "the pipe never went quiet".into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[derive(Default)]
    struct FakePipe {
        written: Vec<Vec<u8>>,
        replies: VecDeque<Vec<u8>>,
    }

    impl BulkPipe for FakePipe {
        fn write(&mut self, packet: &[u8], _t: Duration) -> Result<usize, String> {
            self.written.push(packet.to_vec());
            Ok(packet.len())
        }
        fn read(&mut self, buf: &mut [u8], _t: Duration) -> Result<usize, String> {
            let r = self.replies.pop_front().ok_or("bulk read: Timeout")?;
            buf[..r.len()].copy_from_slice(&r);
            Ok(r.len())
        }
    }

    fn padded(s: &str) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.resize(64, 0);
        v
    }

    #[test]
    fn usb_commands_are_nul_padded_to_64_bytes_and_replies_end_at_the_prompt() {
        let mut pipe = FakePipe::default();
        pipe.replies.extend([padded("Family: Torridon\r\n"), padded("Name: Drive Control Module"), padded(">")]);
        let mut w = QuarchUsbWire::new(pipe);
        let r = w.exchange("*IDN?", Duration::from_millis(10)).unwrap();
        assert_eq!(r, "Family: Torridon\r\nName: Drive Control Module");
        assert_eq!(w.pipe.written, vec![padded("*IDN?")]);
        assert!(QuarchUsbWire::<FakePipe>::packet(&"x".repeat(65)).is_err());
    }

    #[test]
    fn usb_missing_prompt_is_a_timeout_and_binary_is_garbage() {
        let mut pipe = FakePipe::default();
        pipe.replies.push_back(padded("OK"));
        let mut w = QuarchUsbWire::new(pipe);
        assert!(matches!(w.exchange("RUN:POWer UP", Duration::from_millis(10)), Err(WireFault::Timeout { .. })));
        w.pipe.replies.push_back(vec![b'O', 0xff, b'K']);
        assert!(matches!(w.exchange("RUN:POWer UP", Duration::from_millis(10)), Err(WireFault::Garbage { .. })));
    }

    #[test]
    fn usb_mode_lock_checks_the_reply() {
        let mut pipe = FakePipe::default();
        pipe.replies.extend([vec![0, 0, 1], vec![2, 0, 1]]);
        lock_usb_mode(&mut pipe, Duration::from_millis(10)).unwrap();
        assert_eq!(pipe.written, vec![QUARCH_USB_UNLOCK.to_vec(), QUARCH_USB_LOCK.to_vec()]);
        pipe.replies.extend([vec![0, 0, 1], vec![2, 0, 0]]);
        assert!(lock_usb_mode(&mut pipe, Duration::from_millis(10)).unwrap_err().contains("refused"));
    }

    #[test]
    fn controller_kinds_by_vendor_and_product() {
        assert_eq!(controller_kind(0x16D0, 0x0449), Some("quarch+usb"));
        assert_eq!(controller_kind(0x16C0, 0x05DF), Some("hidrelay+usb"));
        assert_eq!(controller_kind(0x1A86, 0x7523), Some("lcus+serial"));
        assert_eq!(controller_kind(0x1234, 0x5678), None);
    }
}
