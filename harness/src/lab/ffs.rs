//! FunctionFS (`usb_f_fs`) without the I/O: the descriptor and strings blobs a function's
//! `ep0` takes first, and the events it then reads from it (`struct usb_functionfs_event`). The
//! lab's gadgets (`bin/faultline/cmd/lab/`) mount the function and carry these; the layouts
//! follow `include/uapi/linux/usb/functionfs.h` (descriptors format v2).

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
