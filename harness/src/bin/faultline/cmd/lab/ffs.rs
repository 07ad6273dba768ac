//! FunctionFS (`usb_f_fs`): a USB function whose descriptors and endpoints are userspace's, as
//! the lab's CH340 (`ch340.rs`), Quarch module (`quarch_gadget.rs`) and HID relay
//! (`hid_gadget.rs`) are. A function's mount is `/dev/usb-ffs/INSTANCE`; its endpoints are the
//! files `ep1`, `ep2`, ... in the order of its descriptors (the addresses the host sees are the
//! UDC's: `dummy_hcd` hands out its endpoints in the order of its own table, not the numbers the
//! descriptors ask for). The blobs and the events are the library's
//! ([`faultline::lab::ffs`]); this is their I/O.

use anyhow::{bail, Context, Result};
use faultline::lab::ffs::{descriptors, events, strings, Event, Setup, EVENT};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const FFS: &str = "/dev/usb-ffs";

/// Reads the function's events from `ep0` for as long as the guest runs: each control request
/// goes to `on_setup`, which must answer it on `ep0` (a write of the data for an IN request, a
/// read of its data, or of nothing, for an OUT one; the other way round stalls it), and each
/// other event (bind, unbind, enable, disable, suspend, resume) to `on_event`.
pub fn serve_ep0(mut ep0: std::fs::File, mut on_setup: impl FnMut(&mut std::fs::File, Setup), mut on_event: impl FnMut(u8)) {
    let mut buf = [0u8; EVENT * 4];
    loop {
        let n = match ep0.read(&mut buf) {
            Ok(n) => n,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        for e in events(&buf[..n]) {
            match e {
                Event::Setup(s) => on_setup(&mut ep0, s),
                Event::Other(kind) => on_event(kind),
            }
        }
    }
}

/// The function's mount, where its `ep0` and endpoints are.
pub fn dir(instance: &str) -> PathBuf {
    Path::new(FFS).join(instance)
}

/// Mounts the function's FunctionFS, writes its descriptors (`flags`, the full-speed set and
/// maybe the high-speed one; `what` names the board in errors) and hands its `ep0` to
/// `control` on a thread of its own, which answers it for as long as the function lives (as
/// [`serve_ep0`] does). The gadget may be bound once this returns.
pub fn start(
    instance: &str,
    what: &str,
    flags: u32,
    fs: &[u8],
    hs: Option<&[u8]>,
    control: impl FnOnce(std::fs::File) + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    let d = dir(instance);
    std::fs::create_dir_all(&d)?;
    let o = std::process::Command::new("mount").args(["-t", "functionfs", instance]).arg(&d).output().context("cannot run mount")?;
    if !o.status.success() {
        bail!("cannot mount functionfs {instance} on {}: {}", d.display(), String::from_utf8_lossy(&o.stderr).trim());
    }
    let mut ep0 = std::fs::OpenOptions::new().read(true).write(true).open(d.join("ep0")).context("cannot open ep0")?;
    ep0.write_all(&descriptors(flags, fs, hs)).with_context(|| format!("FunctionFS refused the {what}'s descriptors"))?;
    ep0.write_all(&strings()).with_context(|| format!("FunctionFS refused the {what}'s strings"))?;
    Ok(std::thread::spawn(move || control(ep0)))
}
