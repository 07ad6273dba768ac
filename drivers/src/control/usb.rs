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
    let ctx = rusb::Context::new().map_err(|e| {
        // libusb's Linux backend needs usbfs; without it, all it says is "Other error".
        if std::path::Path::new("/dev/bus/usb").exists() {
            format!("cannot initialise libusb: {e}")
        } else {
            format!(
                "cannot initialise libusb ({e}): this host has no /dev/bus/usb, so no USB device can be reached \
                 (no USB host controller, or a container started without --device /dev/bus/usb)"
            )
        }
    })?;
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

// --- bulk pipes ------------------------------------------------------------------------------

/// 64-byte bulk packets to and from one endpoint pair.
pub trait BulkPipe: Send {
    fn write(&mut self, packet: &[u8], timeout: Duration) -> Result<usize, String>;
    /// Reads one packet; an error containing "Timeout" means nothing arrived in time.
    fn read(&mut self, buf: &mut [u8], timeout: Duration) -> Result<usize, String>;
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
    pub fn open(vid: u16, pid: u16, label: &str, want: &str, matches: impl Fn(&str) -> bool) -> Result<RusbBulk, String> {
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
            h.claim_interface(0).map_err(|e| format!("cannot claim interface 0 of {label} {sn}: {e}"))?;
            // The command endpoint is the highest OUT endpoint of interface 0.
            let cfg = d.active_config_descriptor().map_err(|e| format!("cannot read configuration of {label} {sn}: {e}"))?;
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
            let (ep, max_packet) = best.ok_or_else(|| format!("{label} {sn} has no OUT endpoint on interface 0"))?;
            return Ok(RusbBulk { handle: h, ep, max_packet });
        }
        Err(format!("no {label} USB module with serial {want:?} (found: {seen:?})"))
    }

    /// The OUT endpoint's maximum packet size.
    pub fn max_packet_size(&self) -> u16 {
        self.max_packet
    }
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
}
