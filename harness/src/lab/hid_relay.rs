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
        assert_eq!(super::super::ffs::count(&d), 3);
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
