//! The lab's CH340 (`lab run --usb lcus`): its FunctionFS descriptors (one vendor interface
//! with a bulk pair and an interrupt endpoint, as the chip has) and its answers to the vendor
//! requests the kernel's `ch341` driver sends at probe and open, tested without a guest; and,
//! in the guest, the function that answers them and carries the bulk data to the host's LCUS
//! emulator. FunctionFS hands requests addressed to the device (as `ch341`'s are) to userspace
//! only with `FUNCTIONFS_ALL_CTRL_RECIP` (Linux 4.15 and later).

use super::super::error::Doing;
use super::{ffs, UsbError};
use std::io::{Read, Write};
use std::time::Duration;

const READ_VERSION: u8 = 0x5f;
const READ_REG: u8 = 0x95;

/// One interface (vendor class), bulk IN 1, bulk OUT 2, interrupt IN 3: `ep1`, `ep2`, `ep3`
/// in the mount, in this order; `bulk` and `interval` per speed.
fn interface(bulk: u16, interval: u8) -> Vec<u8> {
    ffs::interface([0xff, 0x01, 0x02], &[(0x81, 2, bulk, 0), (0x02, 2, bulk, 0), (0x83, 3, 8, interval)])
}

/// The full-speed and high-speed descriptor sets.
pub fn descriptors() -> (Vec<u8>, Vec<u8>) {
    (interface(64, 1), interface(512, 4))
}

/// The data stage of an IN vendor request (`length` bytes), as a CH340 answers it: the chip
/// version (0x31: a CH340 of the kind that uses one line-control register), register reads
/// (the modem status: no line asserted), zeros for anything else.
pub fn reply(request: u8, length: usize) -> Vec<u8> {
    let mut r = match request {
        READ_VERSION => vec![0x31, 0x00],
        READ_REG => vec![0xff, 0xee],
        _ => vec![0; length],
    };
    r.resize(length, 0);
    r
}

/// Mounts the function's FunctionFS, writes its descriptors and starts answering ep0; the
/// gadget may be bound once this returns.
pub fn start(instance: &str) -> Result<std::thread::JoinHandle<()>, UsbError> {
    let (fs, hs) = descriptors();
    ffs::start(instance, "CH340", ffs::ALL_CTRL_RECIP, &fs, Some(&hs), control)
}

/// The control requests, answered as a CH340 answers them ([`reply`]), every vendor
/// write acknowledged. Each is printed (`lab/usb.log`).
fn control(ep0: std::fs::File) {
    ffs::serve_ep0(
        ep0,
        |ep0, s| {
            let (rt, req, len) = (s.request_type, s.request, s.length);
            let r = if rt & 0x80 != 0 {
                let reply = reply(req, len);
                ep0.write_all(&reply).map(|_| reply.len())
            } else {
                // The status stage (and any data): a read of the request's length.
                let mut data = vec![0u8; len];
                ep0.read(&mut data)
            };
            println!("lab usb: ch340 control {rt:02x} {req:02x} value {:04x} index {:04x} length {len}: {r:?}", s.value, s.index);
        },
        |_| {},
    )
}

/// The bulk data both ways: what the host's driver writes (bulk OUT, `ep2`) goes to the host's
/// emulator; what comes back (an LCUS sends nothing) goes to bulk IN (`ep1`).
pub fn bridge(instance: &str, mut from_host: Box<dyn Read + Send>, mut to_emu: Box<dyn Write + Send>) -> Result<(), UsbError> {
    let d = ffs::dir(instance);
    let to_host_path = d.join("ep1");
    std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        loop {
            match from_host.read(&mut buf) {
                Ok(n) if n > 0 => {
                    if let Ok(mut ep) = std::fs::OpenOptions::new().write(true).open(&to_host_path) {
                        let _ = ep.write_all(&buf[..n]);
                    }
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {}
                Err(_) => return,
            }
        }
    });
    let mut buf = [0u8; 512];
    loop {
        let mut ep = match std::fs::File::open(d.join("ep2")) {
            Ok(f) => f,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        while let Ok(n) = ep.read(&mut buf) {
            to_emu.write_all(&buf[..n]).and_then(|_| to_emu.flush()).doing(|| "the UART to the host's emulator".into())?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chip_says_its_version_and_no_modem_line_and_fits_the_request() {
        assert_eq!(reply(READ_VERSION, 2), [0x31, 0x00]);
        assert_eq!(reply(READ_REG, 2), [0xff, 0xee]);
        assert_eq!(reply(READ_REG, 1), [0xff], "never more than the host asked for");
        assert_eq!(reply(0x42, 3), [0, 0, 0]);
        let (fs, hs) = descriptors();
        assert_eq!((ffs::count(&fs), ffs::count(&hs)), (4, 4));
        // Bulk packets of 64 bytes at full speed, 512 at high speed.
        assert_eq!((&fs[13..15], &hs[13..15]), (&[64, 0][..], &[0, 2][..]));
    }
}
