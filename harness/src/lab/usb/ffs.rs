//! FunctionFS (`usb_f_fs`): a USB function whose descriptors and endpoints are userspace's, as
//! the lab's CH340, Quarch module and HID relay are. Its two sides: the descriptor and strings
//! blobs a function's `ep0` takes first and the events it then reads from it (`struct
//! usb_functionfs_event`; the layouts follow `include/uapi/linux/usb/functionfs.h`, descriptors
//! format v2), tested without a guest; and their I/O in the guest. A function's mount is
//! `/dev/usb-ffs/INSTANCE`; its endpoints are the files `ep1`, `ep2`, ... in the order of its
//! descriptors (the addresses the host sees are the UDC's: `dummy_hcd` hands out its endpoints
//! in the order of its own table, not the numbers the descriptors ask for).

use super::super::error::Doing;
use super::UsbError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const DESCRIPTORS_MAGIC_V2: u32 = 3;
const STRINGS_MAGIC: u32 = 2;
pub const HAS_FS_DESC: u32 = 1;
pub const HAS_HS_DESC: u32 = 2;
/// Control requests of any recipient reach userspace (Linux 4.15 and later).
pub const ALL_CTRL_RECIP: u32 = 64;
/// `struct usb_functionfs_event`: the setup packet, the type, three bytes of padding.
pub const EVENT: usize = 12;
/// The event type of a control request.
const SETUP: u8 = 4;

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

/// How many descriptors a descriptor set holds (each starts with its length).
pub fn count(set: &[u8]) -> u32 {
    let (mut n, mut at) = (0, 0);
    while at < set.len() && set[at] > 0 {
        n += 1;
        at += usize::from(set[at]);
    }
    n
}

/// The descriptors blob (v2): `flags`, the full-speed set and, when given, the high-speed set.
pub fn descriptors(flags: u32, fs: &[u8], hs: Option<&[u8]>) -> Vec<u8> {
    let mut words = vec![DESCRIPTORS_MAGIC_V2, 0, flags | HAS_FS_DESC, count(fs)];
    if let Some(hs) = hs {
        words[2] |= HAS_HS_DESC;
        words.push(count(hs));
    }
    let mut d: Vec<u8> = words.iter().flat_map(|v| v.to_le_bytes()).collect();
    d.extend_from_slice(fs);
    if let Some(hs) = hs {
        d.extend_from_slice(hs);
    }
    let n = d.len() as u32;
    d[4..8].copy_from_slice(&n.to_le_bytes());
    d
}

/// The strings blob with no strings: the interface names nothing.
pub fn strings() -> Vec<u8> {
    [STRINGS_MAGIC, 16, 0, 0].iter().flat_map(|v: &u32| v.to_le_bytes()).collect()
}

/// A control request FunctionFS passed to userspace: its setup packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    pub request_type: u8,
    pub request: u8,
    pub value: u16,
    pub index: u16,
    pub length: usize,
}

/// One event read from `ep0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A control request, to be answered on `ep0`.
    Setup(Setup),
    /// Bind (0), unbind (1), enable (2), disable (3), suspend (5), resume (6).
    Other(u8),
}

/// The events in what one read of `ep0` returned (whole events only).
pub fn events(buf: &[u8]) -> Vec<Event> {
    buf.chunks_exact(EVENT)
        .map(|e| {
            if e[8] != SETUP {
                return Event::Other(e[8]);
            }
            Event::Setup(Setup {
                request_type: e[0],
                request: e[1],
                value: u16::from_le_bytes([e[2], e[3]]),
                index: u16::from_le_bytes([e[4], e[5]]),
                length: usize::from(u16::from_le_bytes([e[6], e[7]])),
            })
        })
        .collect()
}

// The gadget side: the I/O in the guest.

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
) -> Result<std::thread::JoinHandle<()>, UsbError> {
    let d = dir(instance);
    std::fs::create_dir_all(&d).doing(|| format!("cannot create {}", d.display()))?;
    let o =
        std::process::Command::new("mount").args(["-t", "functionfs", instance]).arg(&d).output().doing(|| "cannot run mount".into())?;
    if !o.status.success() {
        let what = format!("cannot mount functionfs {instance} on {}", d.display());
        return Err(UsbError::Command { what, stderr: String::from_utf8_lossy(&o.stderr).trim().to_string() });
    }
    let mut ep0 = std::fs::OpenOptions::new().read(true).write(true).open(d.join("ep0")).doing(|| "cannot open ep0".into())?;
    ep0.write_all(&descriptors(flags, fs, hs)).doing(|| format!("FunctionFS refused the {what}'s descriptors"))?;
    ep0.write_all(&strings()).doing(|| format!("FunctionFS refused the {what}'s strings"))?;
    Ok(std::thread::spawn(move || control(ep0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptors_blob_counts_its_sets_and_carries_its_length() {
        let fs = interface([0xff, 0, 0], &[(0x81, 2, 64, 0), (0x02, 2, 64, 0)]);
        assert_eq!(fs.len(), 9 + 2 * 7);
        assert_eq!(count(&fs), 3);
        let d = descriptors(ALL_CTRL_RECIP, &fs, Some(&fs));
        let word = |i: usize| u32::from_le_bytes(d[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!((word(0), word(1) as usize, word(2), word(3), word(4)), (3, d.len(), 64 | 1 | 2, 3, 3));
        let d = descriptors(0, &fs, None);
        assert_eq!((u32::from_le_bytes(d[8..12].try_into().unwrap()), d.len()), (HAS_FS_DESC, 16 + fs.len()));
        assert_eq!(strings(), [2, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn events_are_read_whole_setup_packets_decoded() {
        let mut buf = vec![0xc0, 0x5f, 0x34, 0x12, 0x02, 0x00, 0x08, 0x00, SETUP, 0, 0, 0];
        buf.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]);
        buf.extend_from_slice(&[1, 2, 3]);
        let setup = Setup { request_type: 0xc0, request: 0x5f, value: 0x1234, index: 2, length: 8 };
        assert_eq!(events(&buf), vec![Event::Setup(setup), Event::Other(2)]);
    }
}
