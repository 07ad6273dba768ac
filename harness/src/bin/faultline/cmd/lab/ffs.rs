//! FunctionFS (`usb_f_fs`): a USB function whose descriptors and endpoints are userspace's, as
//! the lab's CH340 (`ch340.rs`) and Quarch module (`quarch_usb.rs`) are. A function's mount is
//! `/dev/usb-ffs/INSTANCE`; its endpoints are the files `ep1`, `ep2`, ... in the order of its
//! descriptors (the addresses the host sees are the UDC's: `dummy_hcd` hands out its
//! endpoints in the order of its own table, not the numbers the descriptors ask for).

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const FFS: &str = "/dev/usb-ffs";
const DESCRIPTORS_MAGIC_V2: u32 = 3;
const STRINGS_MAGIC: u32 = 2;
pub const HAS_FS_DESC: u32 = 1;
pub const HAS_HS_DESC: u32 = 2;
/// Control requests of any recipient reach userspace (Linux 4.15 and later).
pub const ALL_CTRL_RECIP: u32 = 64;
/// `struct usb_functionfs_event`: the setup packet, the type, three bytes of padding.
const EVENT: usize = 12;
/// The event type of a control request.
const SETUP: u8 = 4;

/// A control request FunctionFS passed to userspace: its setup packet.
pub struct Setup {
    pub request_type: u8,
    pub request: u8,
    pub value: u16,
    pub index: u16,
    pub length: usize,
}

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
        for e in buf[..n].chunks_exact(EVENT) {
            if e[8] != SETUP {
                on_event(e[8]);
                continue;
            }
            let setup = Setup {
                request_type: e[0],
                request: e[1],
                value: u16::from_le_bytes([e[2], e[3]]),
                index: u16::from_le_bytes([e[4], e[5]]),
                length: usize::from(u16::from_le_bytes([e[6], e[7]])),
            };
            on_setup(&mut ep0, setup);
        }
    }
}

/// The function's mount, where its `ep0` and endpoints are.
pub fn dir(instance: &str) -> PathBuf {
    Path::new(FFS).join(instance)
}

/// One interface descriptor (`class`, `subclass`, `protocol`) and its endpoints, each
/// `(address, attributes, max packet, interval)`.
pub fn interface(class: [u8; 3], eps: &[(u8, u8, u16, u8)]) -> Vec<u8> {
    let mut d = vec![9, 4, 0, 0, eps.len() as u8, class[0], class[1], class[2], 0];
    for &(addr, attr, size, iv) in eps {
        d.extend_from_slice(&[7, 5, addr, attr]);
        d.extend_from_slice(&size.to_le_bytes());
        d.push(iv);
    }
    d
}

/// The descriptors blob (v2): `flags` and the full-speed and high-speed descriptor sets, each
/// an interface with its endpoints (`count` descriptors in each).
fn descriptors(flags: u32, fs: &[u8], hs: Option<&[u8]>, count: u32) -> Vec<u8> {
    let mut d = Vec::new();
    let words: Vec<u32> = match hs {
        Some(_) => vec![DESCRIPTORS_MAGIC_V2, 0, flags | HAS_FS_DESC | HAS_HS_DESC, count, count],
        None => vec![DESCRIPTORS_MAGIC_V2, 0, flags | HAS_FS_DESC, count],
    };
    for v in words {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d.extend_from_slice(fs);
    if let Some(hs) = hs {
        d.extend_from_slice(hs);
    }
    let n = d.len() as u32;
    d[4..8].copy_from_slice(&n.to_le_bytes());
    d
}

/// No strings: the interface names nothing.
fn strings() -> Vec<u8> {
    let mut d = Vec::new();
    for v in [STRINGS_MAGIC, 16, 0, 0] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d
}

/// Mounts the function's FunctionFS and writes its descriptors (`what` names the board in
/// errors); returns its `ep0`, which must be kept open (and read) for as long as the function
/// lives. The gadget may be bound once this returns.
pub fn start(instance: &str, what: &str, flags: u32, fs: &[u8], hs: Option<&[u8]>, count: u32) -> Result<std::fs::File> {
    let d = dir(instance);
    std::fs::create_dir_all(&d)?;
    let o = std::process::Command::new("mount").args(["-t", "functionfs", instance]).arg(&d).output().context("cannot run mount")?;
    if !o.status.success() {
        bail!("cannot mount functionfs {instance} on {}: {}", d.display(), String::from_utf8_lossy(&o.stderr).trim());
    }
    let mut ep0 = std::fs::OpenOptions::new().read(true).write(true).open(d.join("ep0")).context("cannot open ep0")?;
    ep0.write_all(&descriptors(flags, fs, hs, count)).with_context(|| format!("FunctionFS refused the {what}'s descriptors"))?;
    ep0.write_all(&strings()).with_context(|| format!("FunctionFS refused the {what}'s strings"))?;
    Ok(ep0)
}
