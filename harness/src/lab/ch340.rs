//! The lab's CH340 (`lab run --usb lcus`) without the I/O: its FunctionFS descriptors (one
//! vendor interface with a bulk pair and an interrupt endpoint, as the chip has) and its answers
//! to the vendor requests the kernel's `ch341` driver sends at probe and open.

use super::ffs;

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
