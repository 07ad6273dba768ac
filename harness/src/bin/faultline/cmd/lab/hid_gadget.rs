//! The lab's USB HID relay board on the guest's USB bus (`lab run --usb hidrelay`): a
//! FunctionFS function with DCT Tech's ids (16C0:05DF, "www.dcttech.com" / "USBRelay2", no
//! serial number), one HID interface with its class descriptor and an interrupt IN endpoint,
//! at full speed. The guest's `usbhid` binds it first (hid-generic, `/dev/hidraw0`), as on a
//! desk; faultline's driver detaches it through libusb and sends the class requests itself.
//!
//! FunctionFS passes the requests addressed to the interface to userspace: the report
//! descriptor (`GET_DESCRIPTOR` of type 0x22, which the composite layer leaves to the
//! function), `SET_IDLE`, `SET_REPORT` and `GET_REPORT`. `f_hid` would not do: Linux 6.1's
//! answers `GET_REPORT` with an empty report of its own, never userspace's. The firmware is
//! [`faultline::lab::hid_relay`]; relay 1's contact is the lab's rig, reached over the guest's
//! third UART with the 4-byte frames of the host's relay emulator (`A0 01 state sum`, the LCUS
//! emulator wired to the rig), which acknowledges nothing: the board's readback is its latch.

use super::ffs;
use anyhow::Result;
use faultline::lab::hid_relay::{self, Board, REPORT, REPORT_DESCRIPTOR};
use faultline::lab::usb_fault::UsbFault;
use std::io::{Read, Write};
use std::time::Duration;

/// Mounts the function and writes its descriptors (full speed: `dummy_hcd` is loaded at full
/// speed for this board), then answers ep0 until the guest powers off: the board's firmware,
/// its relay 1 switching the rig through `to_rig`.
pub fn start(instance: &str, board: Board, to_rig: Box<dyn Write + Send>) -> Result<std::thread::JoinHandle<()>> {
    ffs::start(instance, "HID relay", 0, &hid_relay::descriptors(), None, move |ep0| control(ep0, board, to_rig))
}

const GET_DESCRIPTOR: u8 = 0x06;
const GET_REPORT: u8 = 0x01;
const SET_REPORT: u8 = 0x09;

fn control(ep0: std::fs::File, mut board: Board, mut to_rig: Box<dyn Write + Send>) {
    ffs::serve_ep0(
        ep0,
        |ep0, s| {
            let (rt, req, value, len) = (s.request_type, s.request, s.value, s.length);
            let what = format!("control {rt:02x} {req:02x} value {value:04x} length {len}");
            let stall = |ep0: &mut std::fs::File| {
                // A read for an IN request, a write for an OUT one.
                if rt & 0x80 != 0 {
                    ep0.read(&mut [0u8; 0]).map(|_| 0)
                } else {
                    ep0.write(&[])
                }
            };
            // The fault file's misbehaviour, for the requests it names.
            let named = match (rt, req) {
                (0xa1, GET_REPORT) => Some("GET_REPORT"),
                (0x21, SET_REPORT) => Some("SET_REPORT"),
                _ => None,
            };
            let spec = named.and_then(|n| super::usb::fault_now().filter(|s| n.starts_with(&s.prefix)));
            if let (Some(n), Some(spec)) = (named, spec) {
                println!("lab usb: hidrelay fault {:?} on {n}{}", spec.fault, if spec.once { " (once: cleared)" } else { "" });
                if spec.once {
                    let _ = std::fs::remove_file(super::usb::FAULT_FILE);
                }
                match spec.fault {
                    UsbFault::Stall => println!("lab usb: hidrelay {what}: stalled ({:?})", stall(ep0)),
                    // Unanswered until the host has given up (faultline waits 2 s): reading or
                    // writing ep0 at once would answer it (an OUT request's data read is its
                    // acknowledgement; a read during an IN request stalls it).
                    UsbFault::Timeout => {
                        std::thread::sleep(Duration::from_millis(2500));
                        println!("lab usb: hidrelay {what}: left unanswered for 2.5 s, then stalled ({:?})", stall(ep0));
                    }
                    UsbFault::Short if n == "GET_REPORT" => {
                        let report = board.feature_report();
                        println!("lab usb: hidrelay {what}: 3 bytes of the report: {:?}", ep0.write(&report[..3.min(len)]));
                    }
                    UsbFault::Short => println!("lab usb: hidrelay {what}: stalled, a SET_REPORT has no short form ({:?})", stall(ep0)),
                }
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
                (0x21, SET_REPORT) => {
                    let mut data = vec![0u8; len];
                    let r = ep0.read(&mut data);
                    let kind = match value >> 8 {
                        2 => "output",
                        3 => "feature",
                        _ => "other",
                    };
                    match board.set_report(&data) {
                        Ok(switched) => {
                            println!(
                                "lab usb: hidrelay {what} (SET_REPORT, {kind} report {data:02x?}): {r:?}; bitmask now {:#04x}",
                                board.mask
                            );
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
                (0x21, _) => {
                    // SET_IDLE and the other class writes: taken, nothing done.
                    let r = ep0.read(&mut vec![0u8; len]);
                    println!("lab usb: hidrelay {what}: {r:?}");
                }
                // Anything else is stalled.
                _ => println!("lab usb: hidrelay {what}: stalled ({:?})", stall(ep0)),
            }
        },
        |e| println!("lab usb: hidrelay function event {e}"),
    )
}
