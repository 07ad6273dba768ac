//! The firmware of the lab's USB HID relay board (`lab run --usb hidrelay`): a DCT Tech
//! "USBRelay" board (16C0:05DF), as the projects that drive real ones speak to it.
//!
//! - Its HID report descriptor declares one 8-byte feature report without a report id
//!   (vendor usage page), and an interrupt IN endpoint it never sends on.
//! - A command is a `SET_REPORT` of 8 bytes: `FF n` switches relay n on, `FD n` off, `FE` all
//!   on, `FC` all off, `FA` and 5 bytes sets the board's id. usbrelay (`libusbrelay.c`,
//!   `operate_relay`) sends it as an *output* report (hidapi's `hid_write`, report number 0);
//!   libsigrok (`dcttech-usbrelay/protocol.c`) as a *feature* report, also report number 0.
//!   Both drive real boards, so the firmware takes either type, whatever the report id.
//! - `GET_REPORT` (feature) answers 8 bytes: the id in bytes 0..5, the relay bitmask in byte
//!   7 (usbrelay asks for report number 1 and reads `buf[0..5]`, `buf[7]`; libsigrok asks for 0
//!   and reads the same bytes one further on, after hidapi's report-id byte).
//!
//! The readback is the firmware's own latch, as on a real board: it says what the board was
//! told, not that a contact moved.
//!
//! The gadget side, in the guest (`lab run --usb hidrelay`): a FunctionFS function with DCT
//! Tech's ids (16C0:05DF, "www.dcttech.com" / "USBRelay2", no serial number), one HID interface
//! with its class descriptor and an interrupt IN endpoint, at full speed. The guest's `usbhid`
//! binds it first (hid-generic, `/dev/hidraw0`), as on a desk; faultline's driver detaches it
//! through libusb and sends the class requests itself.
//!
//! FunctionFS passes the requests addressed to the interface to userspace: the report
//! descriptor (`GET_DESCRIPTOR` of type 0x22, which the composite layer leaves to the
//! function), `SET_IDLE`, `SET_REPORT` and `GET_REPORT`. `f_hid` would not do: Linux 6.1's
//! answers `GET_REPORT` with an empty report of its own, never userspace's. Relay 1's contact
//! is the lab's rig, reached over the guest's third UART with the 4-byte frames of the host's
//! relay emulator (`A0 01 state sum`, the LCUS emulator wired to the rig), which acknowledges
//! nothing: the board's readback is its latch.

use super::fault::{self, UsbFault};
use super::{ffs, UsbError};
use std::io::{Read, Write};
use std::time::Duration;

/// The HID class descriptor's report descriptor: usage page 0xFF00 (vendor), usage 1, one
/// application collection of 8 bytes (logical 0..255) as a feature report.
pub const REPORT_DESCRIPTOR: [u8; 22] = [
    0x06, 0x00, 0xff, // Usage Page (vendor 0xFF00)
    0x09, 0x01, // Usage (1)
    0xa1, 0x01, // Collection (Application)
    0x15, 0x00, // Logical Minimum (0)
    0x26, 0xff, 0x00, // Logical Maximum (255)
    0x75, 0x08, // Report Size (8)
    0x95, 0x08, // Report Count (8)
    0x09, 0x00, // Usage (0)
    0xb2, 0x02, 0x01, // Feature (Data, Variable, Absolute, Buffered Bytes)
    0xc0, // End Collection
];

/// The bytes of every report.
pub const REPORT: usize = 8;

/// The board's interface at full speed: HID (no subclass, no protocol), its HID class
/// descriptor (HID 1.01, one report descriptor of [`REPORT_DESCRIPTOR`]'s length) and an
/// interrupt IN endpoint of 8 bytes every 20 ms, as V-USB boards have.
pub fn descriptors() -> Vec<u8> {
    let mut d = vec![9, 4, 0, 0, 1, 3, 0, 0, 0];
    let len = REPORT_DESCRIPTOR.len() as u16;
    d.extend_from_slice(&[9, 0x21, 0x01, 0x01, 0, 1, 0x22]);
    d.extend_from_slice(&len.to_le_bytes());
    d.extend_from_slice(&[7, 5, 0x81, 3, REPORT as u8, 0, 20]);
    d
}

/// The board: its id and its relays' latch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Board {
    pub id: [u8; 5],
    /// Bit n-1: relay n energised.
    pub mask: u8,
    /// How many relays it has (1..=8).
    pub relays: u8,
}

/// A relay the board switched: `(relay, energised)`, for the rig.
pub type Switched = Vec<(u8, bool)>;

/// A `SET_REPORT` the firmware ignores (a real board answers such a report and does nothing).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    #[error("an empty report")]
    Empty,
    #[error("relay {relay} of a board with {relays} relays")]
    NoSuchRelay { relay: u8, relays: u8 },
    #[error("a new id of {len} bytes (5 needed)")]
    ShortId { len: usize },
    #[error("command byte {0:#04x}")]
    Command(u8),
}

impl Board {
    /// One `SET_REPORT`'s data: the relays it switched (none for an id change), or why the
    /// firmware ignores it.
    pub fn set_report(&mut self, data: &[u8]) -> Result<Switched, Ignored> {
        let Some(&cmd) = data.first() else { return Err(Ignored::Empty) };
        let all: Vec<u8> = (1..=self.relays).collect();
        let (relays, on) = match cmd {
            0xff | 0xfd => {
                let n = data.get(1).copied().unwrap_or(0);
                if !(1..=self.relays).contains(&n) {
                    return Err(Ignored::NoSuchRelay { relay: n, relays: self.relays });
                }
                (vec![n], cmd == 0xff)
            }
            0xfe => (all, true),
            0xfc => (all, false),
            0xfa => {
                if data.len() < 6 {
                    return Err(Ignored::ShortId { len: data.len().saturating_sub(1) });
                }
                self.id.copy_from_slice(&data[1..6]);
                return Ok(Vec::new());
            }
            c => return Err(Ignored::Command(c)),
        };
        let mut switched = Vec::new();
        for n in relays {
            let bit = 1u8 << (n - 1);
            let before = self.mask & bit != 0;
            if on {
                self.mask |= bit;
            } else {
                self.mask &= !bit;
            }
            if before != on {
                switched.push((n, on));
            }
        }
        Ok(switched)
    }

    /// The feature report `GET_REPORT` answers: the id, two zero bytes, the bitmask.
    pub fn feature_report(&self) -> [u8; REPORT] {
        let mut r = [0u8; REPORT];
        r[..5].copy_from_slice(&self.id);
        r[7] = self.mask;
        r
    }
}

/// Mounts the function and writes its descriptors (full speed: `dummy_hcd` is loaded at full
/// speed for this board), then answers ep0 until the guest powers off: the board's firmware,
/// its relay 1 switching the rig through `to_rig`.
pub fn start(instance: &str, board: Board, to_rig: Box<dyn Write + Send>) -> Result<std::thread::JoinHandle<()>, UsbError> {
    ffs::start(instance, "HID relay", 0, &descriptors(), None, move |ep0| control(ep0, board, to_rig))
}

const GET_DESCRIPTOR: u8 = 0x06;
const GET_REPORT: u8 = 0x01;
const SET_REPORT: u8 = 0x09;

/// Stalls the request in progress: a read for an IN request, a write for an OUT one.
fn stall(ep0: &mut std::fs::File, request_type: u8) -> std::io::Result<usize> {
    if request_type & 0x80 != 0 {
        ep0.read(&mut [0u8; 0]).map(|_| 0)
    } else {
        ep0.write(&[])
    }
}

/// `ep0`, answered as the board's firmware answers it, until the guest powers off.
fn control(ep0: std::fs::File, mut board: Board, mut to_rig: Box<dyn Write + Send>) {
    ffs::serve_ep0(
        ep0,
        |ep0, s| {
            let (rt, req, value, len) = (s.request_type, s.request, s.value, s.length);
            let what = format!("control {rt:02x} {req:02x} value {value:04x} length {len}");
            if misbehave(ep0, &board, s, &what) {
                return;
            }
            match (rt, req) {
                (0x81, GET_DESCRIPTOR) if value >> 8 == 0x22 => {
                    let r = ep0.write(&REPORT_DESCRIPTOR[..len.min(REPORT_DESCRIPTOR.len())]);
                    println!("lab usb: hidrelay {what} (report descriptor): {r:?}");
                }
                (0xa1, GET_REPORT) => {
                    let report = board.feature_report();
                    let r = ep0.write(&report[..len.min(REPORT)]);
                    println!("lab usb: hidrelay {what} (GET_REPORT): {report:02x?} {r:?}");
                }
                (0x21, SET_REPORT) => set_report(ep0, &mut board, &mut *to_rig, s, &what),
                (0x21, _) => {
                    // SET_IDLE and the other class writes: taken, nothing done.
                    let r = ep0.read(&mut vec![0u8; len]);
                    println!("lab usb: hidrelay {what}: {r:?}");
                }
                // Anything else is stalled.
                _ => println!("lab usb: hidrelay {what}: stalled ({:?})", stall(ep0, rt)),
            }
        },
        |e| println!("lab usb: hidrelay function event {e}"),
    )
}

/// The fault file's misbehaviour, for the requests it names (`GET_REPORT`, `SET_REPORT`):
/// true when the request met it (and was answered so).
fn misbehave(ep0: &mut std::fs::File, board: &Board, s: ffs::Setup, what: &str) -> bool {
    let (rt, len) = (s.request_type, s.length);
    let named = match (rt, s.request) {
        (0xa1, GET_REPORT) => Some("GET_REPORT"),
        (0x21, SET_REPORT) => Some("SET_REPORT"),
        _ => None,
    };
    let spec = named.and_then(|n| fault::fault_now().filter(|s| n.starts_with(&s.prefix)));
    let (Some(n), Some(spec)) = (named, spec) else { return false };
    println!("lab usb: hidrelay fault {:?} on {n}{}", spec.fault, if spec.once { " (once: cleared)" } else { "" });
    if spec.once {
        let _ = std::fs::remove_file(fault::FAULT_FILE);
    }
    match spec.fault {
        UsbFault::Stall => println!("lab usb: hidrelay {what}: stalled ({:?})", stall(ep0, rt)),
        // Unanswered until the host has given up (faultline waits 2 s): reading or
        // writing ep0 at once would answer it (an OUT request's data read is its
        // acknowledgement; a read during an IN request stalls it).
        UsbFault::Timeout => {
            std::thread::sleep(Duration::from_millis(2500));
            println!("lab usb: hidrelay {what}: left unanswered for 2.5 s, then stalled ({:?})", stall(ep0, rt));
        }
        UsbFault::Short if n == "GET_REPORT" => {
            let report = board.feature_report();
            println!("lab usb: hidrelay {what}: 3 bytes of the report: {:?}", ep0.write(&report[..3.min(len)]));
        }
        UsbFault::Short => println!("lab usb: hidrelay {what}: stalled, a SET_REPORT has no short form ({:?})", stall(ep0, rt)),
    }
    true
}

/// A `SET_REPORT`: its data read (the request's acknowledgement), the firmware's latch
/// switched, and relay 1's contact sent to the rig as the relay emulator's frame.
fn set_report(ep0: &mut std::fs::File, board: &mut Board, to_rig: &mut dyn Write, s: ffs::Setup, what: &str) {
    let mut data = vec![0u8; s.length];
    let r = ep0.read(&mut data);
    let kind = match s.value >> 8 {
        2 => "output",
        3 => "feature",
        _ => "other",
    };
    match board.set_report(&data) {
        Ok(switched) => {
            println!("lab usb: hidrelay {what} (SET_REPORT, {kind} report {data:02x?}): {r:?}; bitmask now {:#04x}", board.mask);
            for (relay, on) in switched.into_iter().filter(|&(n, _)| n == 1) {
                let state = u8::from(on);
                let frame = [0xa0, relay, state, 0xa0u8.wrapping_add(relay).wrapping_add(state)];
                if let Err(e) = to_rig.write_all(&frame).and_then(|_| to_rig.flush()) {
                    println!("lab usb: hidrelay: relay {relay}'s contact (the UART to the rig): {e}");
                }
            }
        }
        Err(why) => println!("lab usb: hidrelay {what} (SET_REPORT, {kind} report {data:02x?}): ignored: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board() -> Board {
        Board { id: *b"FLHID", mask: 0b01, relays: 2 }
    }

    #[test]
    fn commands_switch_the_latch_and_the_feature_report_reads_it_back() {
        let mut b = board();
        assert_eq!(b.set_report(&[0xfd, 1, 0, 0, 0, 0, 0, 0]), Ok(vec![(1, false)]));
        assert_eq!(b.feature_report(), [b'F', b'L', b'H', b'I', b'D', 0, 0, 0]);
        assert_eq!(b.set_report(&[0xfd, 1, 0, 0, 0, 0, 0, 0]), Ok(vec![]), "already off: nothing moves");
        assert_eq!(b.set_report(&[0xfe, 0, 0, 0, 0, 0, 0, 0]), Ok(vec![(1, true), (2, true)]));
        assert_eq!(b.feature_report()[7], 0b11);
        assert_eq!(b.set_report(&[0xff, 2, 0, 0, 0, 0, 0, 0]), Ok(vec![]));
        assert_eq!(b.set_report(&[0xfc, 0, 0, 0, 0, 0, 0, 0]), Ok(vec![(1, false), (2, false)]));
        assert_eq!(b.set_report(&[0xfa, b'A', b'B', b'C', b'D', b'E', 0, 0]), Ok(vec![]));
        assert_eq!(&b.feature_report()[..5], b"ABCDE");
    }

    #[test]
    fn what_a_board_ignores_is_named() {
        let mut b = board();
        assert!(b.set_report(&[0xff, 3]).unwrap_err().to_string().contains("relay 3 of a board with 2 relays"));
        assert!(b.set_report(&[0x42]).unwrap_err().to_string().contains("command byte 0x42"));
        assert!(b.set_report(&[]).unwrap_err().to_string().contains("empty"));
        assert!(b.set_report(&[0xfa, 1]).unwrap_err().to_string().contains("5 needed"));
        assert_eq!(b, board(), "nothing changed");
    }

    #[test]
    fn the_interface_names_its_report_descriptor_by_length() {
        let d = descriptors();
        assert_eq!(ffs::count(&d), 3);
        // The HID descriptor (type 0x21) after the interface: one report descriptor (0x22).
        assert_eq!(&d[9..16], &[9, 0x21, 0x01, 0x01, 0, 1, 0x22]);
        assert_eq!(u16::from_le_bytes([d[16], d[17]]) as usize, REPORT_DESCRIPTOR.len());
    }

    #[test]
    fn the_report_descriptor_declares_one_8_byte_feature_report() {
        // Report Size 8 x Report Count 8, one Feature main item, no Report ID item (0x85).
        let d = &REPORT_DESCRIPTOR;
        assert!(d.windows(2).any(|w| w == [0x75, 0x08]) && d.windows(2).any(|w| w == [0x95, 0x08]));
        assert_eq!(d.iter().filter(|&&b| b == 0xb2).count(), 1);
        assert!(!d.contains(&0x85) && !d.contains(&0x81) && !d.contains(&0x91), "no report id, input or output item");
    }
}
