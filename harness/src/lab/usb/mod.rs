//! The lab's USB boards: each device's two sides in one module, its firmware and
//! descriptors (tested without a guest) beside the gadget I/O that runs them in the guest:
//! [`ffs`] FunctionFS (its blobs and events, and the mount and `ep0` they go through), [`ch340`]
//! the LCUS board's CH340, [`quarch`] the Quarch module on USB, [`hid`] the HID relay board,
//! [`fault`] the faults a board can be told to show; [`gadget`] puts a board on the guest's bus
//! and bridges it to its emulator on the host.
//!
//! A board inside the guest (`lab run --usb BOARD`, docs/LAB.md "The USB rig"): the guest's
//! own kernel enumerates a gadget on `dummy_hcd` as it would a board on a desk, and faultline
//! in the guest drives it through the kernel's class driver (or libusb), as it drives a real
//! one. `gadget.rs` has the path of each board's bytes.

pub mod ch340;
pub mod fault;
pub mod ffs;
pub mod gadget;
pub mod hid;
pub mod quarch;

use super::error::IoStep;
use std::path::PathBuf;

/// What a board's gadget side could not do.
#[derive(Debug, thiserror::Error)]
pub enum UsbError {
    #[error(transparent)]
    Io(#[from] IoStep),
    /// A program (`insmod`, `mount`) that failed, and what it said.
    #[error("{what}: {stderr}")]
    Command { what: String, stderr: String },
    #[error("cannot open {path}")]
    Serial {
        path: PathBuf,
        #[source]
        source: faultline_drivers::control::SerialError,
    },
    #[error("no USB device controller in /sys/class/udc")]
    NoUdc,
    #[error("the {board} gadget ({gadget}) did not enumerate within 20 s: {missing} (dmesg says why)")]
    NotEnumerated { board: &'static str, gadget: PathBuf, missing: String },
    #[error("the {0}'s ep0 thread panicked (usb.log has its message)")]
    Ep0Panicked(&'static str),
    #[error("{device}/descriptors: a descriptor of length {len} at byte {at}")]
    BadDescriptor { device: PathBuf, len: usize, at: usize },
    #[error("the board's configuration has no endpoint")]
    NoEndpoint,
    #[error("the UDC gave the Quarch function no IN endpoint of its command endpoint's number ({0})")]
    NoInTwin(String),
}

/// The boards the lab can put on its USB bus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
pub(crate) struct Ids {
    pub vendor: u16,
    pub product: u16,
    pub manufacturer: &'static str,
    pub product_name: &'static str,
    /// The configfs function (`acm.usb0`, `ffs.lcus`).
    pub function: &'static str,
    /// The tty the host side's class driver gives it (`ttyACM`, `ttyUSB`).
    pub tty: &'static str,
}

impl Board {
    pub(crate) fn ids(self) -> Ids {
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

    /// Every board, in the order `--usb` lists them.
    pub const ALL: [Board; 4] = [Board::Numato, Board::Lcus, Board::Quarch, Board::Hidrelay];

    /// The board `name` names (`numato`, `lcus`, `quarch`, `hidrelay`).
    pub fn parse(name: &str) -> Option<Board> {
        Board::ALL.into_iter().find(|b| b.name() == name)
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
