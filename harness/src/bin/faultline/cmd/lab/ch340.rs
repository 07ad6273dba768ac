//! The lab's CH340 (`lab run --usb lcus`) through FunctionFS: its descriptors and its answers
//! to the vendor control requests the kernel's `ch341` driver sends at probe and open
//! ([`faultline::lab::ch340`]), and the bulk data carried to the host's LCUS emulator. FunctionFS hands requests addressed to the device (as `ch341`'s
//! are) to userspace only with `FUNCTIONFS_ALL_CTRL_RECIP` (Linux 4.15 and later).

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::time::Duration;

use super::ffs::{self, dir};
use faultline::lab::ch340;

/// Mounts the function's FunctionFS, writes its descriptors and starts answering ep0; the
/// gadget may be bound once this returns.
pub fn start(instance: &str) -> Result<std::thread::JoinHandle<()>> {
    let (fs, hs) = ch340::descriptors();
    ffs::start(instance, "CH340", faultline::lab::ffs::ALL_CTRL_RECIP, &fs, Some(&hs), control)
}

/// The control requests, answered as a CH340 answers them ([`ch340::reply`]), every vendor
/// write acknowledged. Each is printed (`lab/usb.log`).
fn control(ep0: std::fs::File) {
    ffs::serve_ep0(
        ep0,
        |ep0, s| {
            let (rt, req, len) = (s.request_type, s.request, s.length);
            let r = if rt & 0x80 != 0 {
                let reply = ch340::reply(req, len);
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
pub fn bridge(instance: &str, mut from_host: Box<dyn Read + Send>, mut to_emu: Box<dyn Write + Send>) -> Result<()> {
    let d = dir(instance);
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
            to_emu.write_all(&buf[..n]).and_then(|_| to_emu.flush()).context("the UART to the host's emulator")?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
