//! The rusb layer: listing USB controllers, HID reports and bulk pipes.
//!
//! rusb hands out raw libusb handles that cannot be faked, so everything above it talks to two
//! small traits: [`HidReports`] (an output report, a feature report) and [`BulkPipe`] (64-byte
//! bulk packets). The relay and Quarch protocol bytes (`relay.rs`, `quarch/usb.rs`) are tested
//! against fakes of these traits; the thin rusb implementations here need real hardware and
//! are not tested. This file knows no controller protocol: it imports nothing from the
//! drivers built on it.

use std::time::Duration;

pub const QUARCH_VID: u16 = 0x16D0;
pub const QUARCH_PID: u16 = 0x0449;
pub const HID_RELAY_VID: u16 = 0x16C0;
pub const HID_RELAY_PID: u16 = 0x05DF;
pub const CH340_VID: u16 = 0x1A86;
pub const CH340_PID: u16 = 0x7523;
/// Numato Lab's USB vendor id (their relay boards enumerate as CDC-ACM serial ports).
pub const NUMATO_VID: u16 = 0x2A19;

/// What went wrong in the rusb layer: each names the device or the transfer, and libusb's error.
#[derive(Debug, thiserror::Error)]
pub enum UsbError {
    #[error("cannot initialise libusb: {0}")]
    Init(#[source] rusb::Error),
    /// libusb's Linux backend needs usbfs; without it, all it says is "Other error".
    #[error(
        "cannot initialise libusb ({0}): this host has no /dev/bus/usb, so no USB device can be reached \
         (no USB host controller, or a container started without --device /dev/bus/usb)"
    )]
    NoUsbfs(#[source] rusb::Error),
    #[error("cannot list USB devices: {0}")]
    List(#[source] rusb::Error),
    #[error("cannot open HID relay at bus {bus} address {address}: {source}")]
    OpenHid { bus: u8, address: u8, source: rusb::Error },
    #[error("cannot claim HID relay interface: {0}")]
    ClaimHid(#[source] rusb::Error),
    /// No HID relay board reports this id; `seen`: the ids the boards found report.
    #[error("no USB HID relay with id {id:?} (found: {seen:?})")]
    NoHidRelay { id: String, seen: Vec<String> },
    /// A HID class request (`SET_REPORT`, `GET_REPORT`) failed.
    #[error("{request}: {source}")]
    Report { request: &'static str, source: rusb::Error },
    #[error("SET_REPORT sent {sent} of {len} bytes")]
    ShortReport { sent: usize, len: usize },
    /// A feature report shorter than the board's 8 bytes.
    #[error("GET_REPORT: a short feature report, {} of 8 bytes: {got:02x?}", got.len())]
    ShortFeature { got: Vec<u8> },
    #[error("cannot claim interface 0 of {label} {serial}: {source}")]
    Claim { label: String, serial: String, source: rusb::Error },
    #[error("cannot read configuration of {label} {serial}: {source}")]
    Config { label: String, serial: String, source: rusb::Error },
    #[error("{label} {serial} has no OUT endpoint on interface 0")]
    NoOutEndpoint { label: String, serial: String },
    /// No `label` device has the serial number asked for; `seen`: the ones found.
    #[error("no {label} USB module with serial {want:?} (found: {seen:?})")]
    NotFound { label: String, want: String, seen: Vec<String> },
    /// A bulk transfer (`op`: `bulk write`, `bulk read`) failed; shown with libusb's error name.
    #[error("{op}: {source:?}")]
    Bulk { op: &'static str, source: rusb::Error },
}

impl UsbError {
    /// True when the device has left the bus (libusb's `NoDevice`): unplugged, or
    /// re-enumerated; nothing sent to this handle reaches it again.
    pub fn is_gone(&self) -> bool {
        matches!(self, UsbError::Bulk { source: rusb::Error::NoDevice, .. } | UsbError::Report { source: rusb::Error::NoDevice, .. })
    }

    /// True when the device stalled the endpoint (libusb's `Pipe`).
    pub fn is_stall(&self) -> bool {
        matches!(self, UsbError::Bulk { source: rusb::Error::Pipe, .. } | UsbError::Report { source: rusb::Error::Pipe, .. })
    }

    /// True when a transfer got nothing in time, as opposed to failing.
    pub fn is_timeout(&self) -> bool {
        matches!(self, UsbError::Bulk { source: rusb::Error::Timeout, .. } | UsbError::Report { source: rusb::Error::Timeout, .. })
    }
}

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
    /// A HID relay's board id, from its feature report (these boards have no USB serial
    /// number; the id is what `hidrelay+usb://ID` names). `None` for other kinds, or when the
    /// board could not be read.
    pub board_id: Option<String>,
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
pub fn list_controllers() -> Result<Vec<UsbController>, UsbError> {
    let devices = usb_devices()?;
    let mut out = Vec::new();
    for d in devices.iter() {
        let Ok(desc) = d.device_descriptor() else { continue };
        let Some(kind) = controller_kind(desc.vendor_id(), desc.product_id()) else { continue };
        let (mut serial, mut product, mut board_id) = (None, None, None);
        if let Ok(h) = d.open() {
            serial = h.read_serial_number_string_ascii(&desc).ok();
            product = h.read_product_string_ascii(&desc).ok();
            if kind == "hidrelay+usb" {
                // The interface is usbhid's: detached for the read, given back on release.
                let _ = h.set_auto_detach_kernel_driver(true);
                if h.claim_interface(0).is_ok() {
                    let mut hid = RusbHid { handle: h, timeout: Duration::from_millis(500) };
                    board_id = hid.board_id().ok();
                    let _ = hid.handle.release_interface(0);
                }
            }
        }
        out.push(UsbController {
            vid: desc.vendor_id(),
            pid: desc.product_id(),
            serial,
            product,
            bus: d.bus_number(),
            address: d.address(),
            kind,
            board_id,
        });
    }
    Ok(out)
}

/// Every USB device, through a fresh libusb context (rusb's global context panics where
/// libusb cannot initialise, e.g. without /dev/bus/usb; this returns an error instead).
fn usb_devices() -> Result<rusb::DeviceList<rusb::Context>, UsbError> {
    use rusb::UsbContext;
    let ctx = rusb::Context::new().map_err(|e| {
        if std::path::Path::new("/dev/bus/usb").exists() {
            UsbError::Init(e)
        } else {
            UsbError::NoUsbfs(e)
        }
    })?;
    ctx.devices().map_err(UsbError::List)
}

// --- HID relays ------------------------------------------------------------------------------

/// The two HID transfers a USB HID relay needs (report bytes as hidapi presents them: byte 0 is
/// the report id).
pub trait HidReports: Send {
    /// Sends an output report (`report[0]` is the report id, 0 for none).
    fn write_output(&mut self, report: &[u8]) -> Result<(), UsbError>;
    /// Reads feature report `id` into `buf` (`buf[0]` comes back as the id); returns the length.
    fn read_feature(&mut self, id: u8, buf: &mut [u8]) -> Result<usize, UsbError>;
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
    pub fn open(serial: &str, timeout: Duration) -> Result<RusbHid, UsbError> {
        let devices = usb_devices()?;
        let mut seen = Vec::new();
        for d in devices.iter() {
            let Ok(desc) = d.device_descriptor() else { continue };
            if (desc.vendor_id(), desc.product_id()) != (HID_RELAY_VID, HID_RELAY_PID) {
                continue;
            }
            let h = d.open().map_err(|source| UsbError::OpenHid { bus: d.bus_number(), address: d.address(), source })?;
            let _ = h.set_auto_detach_kernel_driver(true);
            h.claim_interface(0).map_err(UsbError::ClaimHid)?;
            let mut hid = RusbHid { handle: h, timeout };
            match hid.board_id() {
                Ok(id) if id == serial => return Ok(hid),
                Ok(id) => seen.push(id),
                // A board whose id cannot be read is named by where it is, and why.
                Err(e) => seen.push(format!("bus {} address {}: {e}", d.bus_number(), d.address())),
            }
        }
        Err(UsbError::NoHidRelay { id: serial.to_string(), seen })
    }

    /// The board id from feature report 1 (bytes 0..5 of its 8).
    pub fn board_id(&mut self) -> Result<String, UsbError> {
        let mut buf = [0u8; 9];
        let n = self.read_feature(1, &mut buf)?;
        if n < 8 {
            return Err(UsbError::ShortFeature { got: buf[..n].to_vec() });
        }
        Ok(String::from_utf8_lossy(&buf[..5]).trim_end_matches('\0').to_string())
    }
}

impl HidReports for RusbHid {
    fn write_output(&mut self, report: &[u8]) -> Result<(), UsbError> {
        let rt = rusb::request_type(rusb::Direction::Out, rusb::RequestType::Class, rusb::Recipient::Interface);
        let (id, data) = (report[0], if report[0] == 0 { &report[1..] } else { report });
        // SET_REPORT (0x09), report type output (2).
        let n = self
            .handle
            .write_control(rt, 0x09, (2u16 << 8) | id as u16, 0, data, self.timeout)
            .map_err(|source| UsbError::Report { request: "SET_REPORT", source })?;
        if n != data.len() {
            return Err(UsbError::ShortReport { sent: n, len: data.len() });
        }
        Ok(())
    }

    fn read_feature(&mut self, id: u8, buf: &mut [u8]) -> Result<usize, UsbError> {
        let rt = rusb::request_type(rusb::Direction::In, rusb::RequestType::Class, rusb::Recipient::Interface);
        // GET_REPORT (0x01), report type feature (3). The relay firmware answers with its
        // 8-byte report (id in bytes 0..5, bitmask in byte 7), which is what callers index.
        self.handle
            .read_control(rt, 0x01, (3u16 << 8) | id as u16, 0, buf, self.timeout)
            .map_err(|source| UsbError::Report { request: "GET_REPORT", source })
    }
}

// --- bulk pipes ------------------------------------------------------------------------------

/// 64-byte bulk packets to and from one endpoint pair.
pub trait BulkPipe: Send {
    fn write(&mut self, packet: &[u8], timeout: Duration) -> Result<usize, UsbError>;
    /// Reads one packet; an error that [`UsbError::is_timeout`] means nothing arrived in time.
    fn read(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize, UsbError>;
}

pub struct RusbBulk {
    handle: rusb::DeviceHandle<rusb::Context>,
    ep: u8,
    max_packet: u16,
}

impl RusbBulk {
    /// Opens interface 0 of the first `vid:pid` device whose USB serial number `matches`, for
    /// bulk transfers on its highest OUT endpoint (and the IN endpoint of the same number).
    /// `label` names the device kind in errors and `want` the serial asked for.
    pub fn open(vid: u16, pid: u16, label: &str, want: &str, matches: impl Fn(&str) -> bool) -> Result<RusbBulk, UsbError> {
        let devices = usb_devices()?;
        let mut seen = Vec::new();
        for d in devices.iter() {
            let Ok(desc) = d.device_descriptor() else { continue };
            if (desc.vendor_id(), desc.product_id()) != (vid, pid) {
                continue;
            }
            let Ok(h) = d.open() else { continue };
            let sn = h.read_serial_number_string_ascii(&desc).unwrap_or_default();
            if !matches(&sn) {
                seen.push(sn);
                continue;
            }
            let _ = h.set_auto_detach_kernel_driver(true);
            h.claim_interface(0).map_err(|source| UsbError::Claim { label: label.to_string(), serial: sn.clone(), source })?;
            // The command endpoint is the highest OUT endpoint of interface 0.
            let cfg =
                d.active_config_descriptor().map_err(|source| UsbError::Config { label: label.to_string(), serial: sn.clone(), source })?;
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
            let (ep, max_packet) = best.ok_or_else(|| UsbError::NoOutEndpoint { label: label.to_string(), serial: sn.clone() })?;
            return Ok(RusbBulk { handle: h, ep, max_packet });
        }
        Err(UsbError::NotFound { label: label.to_string(), want: want.to_string(), seen })
    }

    /// The OUT endpoint's maximum packet size.
    pub fn max_packet_size(&self) -> u16 {
        self.max_packet
    }
}

impl BulkPipe for RusbBulk {
    fn write(&mut self, packet: &[u8], timeout: Duration) -> Result<usize, UsbError> {
        self.handle.write_bulk(self.ep, packet, timeout).map_err(|source| UsbError::Bulk { op: "bulk write", source })
    }
    /// A stalled endpoint (libusb's `Pipe`) stays halted until the host clears it: cleared here,
    /// so that the caller's next transfer (a retry) can reach the device.
    fn read(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize, UsbError> {
        let ep = self.ep | 0x80;
        self.handle.read_bulk(ep, buf, timeout).map_err(|source| {
            if source == rusb::Error::Pipe {
                let _ = self.handle.clear_halt(ep);
            }
            UsbError::Bulk { op: "bulk read", source }
        })
    }
}

impl Drop for RusbBulk {
    fn drop(&mut self) {
        let _ = self.handle.release_interface(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_kinds_by_vendor_and_product() {
        assert_eq!(controller_kind(0x16D0, 0x0449), Some("quarch+usb"));
        assert_eq!(controller_kind(0x16C0, 0x05DF), Some("hidrelay+usb"));
        assert_eq!(controller_kind(0x1A86, 0x7523), Some("lcus+serial"));
        assert_eq!(controller_kind(0x1234, 0x5678), None);
    }

    #[test]
    fn errors_read_as_libusb_words_and_only_a_timeout_is_one() {
        let read = |source| UsbError::Bulk { op: "bulk read", source };
        assert_eq!(read(rusb::Error::Timeout).to_string(), "bulk read: Timeout");
        assert!(read(rusb::Error::Timeout).is_timeout() && !read(rusb::Error::Pipe).is_timeout());
        let get = UsbError::Report { request: "GET_REPORT", source: rusb::Error::Timeout };
        assert_eq!(get.to_string(), format!("GET_REPORT: {}", rusb::Error::Timeout));
        assert!(get.is_timeout());
        let none = UsbError::NotFound { label: "Quarch".into(), want: "QTL1".into(), seen: vec!["2".into()] };
        assert_eq!(none.to_string(), "no Quarch USB module with serial \"QTL1\" (found: [\"2\"])");
    }
}
