//! The only `unsafe` in the controllers: the NVMe subsystem-reset ioctl (it has no sysfs
//! equivalent), reading a register of a PCI function's BAR through its sysfs `resource0`
//! mapping (the NVMe CAP register: nothing else shows it to user space), and `geteuid`.

#![expect(
    unsafe_code,
    reason = "the NVMe subsystem-reset ioctl, mmap of a BAR and geteuid have no safe std wrapper; each unsafe block states why its call is sound"
)]

use std::os::fd::AsRawFd;

/// `NVME_IOCTL_SUBSYS_RESET` = `_IO('N', 0x45)` (linux/nvme_ioctl.h): no argument, no data.
pub(crate) const NVME_IOCTL_SUBSYS_RESET: u64 = ((b'N' as u64) << 8) | 0x45;

/// Issues an NVM subsystem reset through the controller's character device.
pub(crate) fn nvme_subsys_reset(dev: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: `_IO` ioctls take no argument and read or write no user memory; the fd is owned
    // by `dev` and stays open for the duration of the call. The kernel checks the fd's type
    // (anything but an NVMe controller fails with ENOTTY).
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), NVME_IOCTL_SUBSYS_RESET as _) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the 64-bit register at byte `offset` (a multiple of 8, within the first page) of the
/// memory that `file` maps: a PCI function's BAR through sysfs `resource0` (a regular file in
/// tests). Read as two 32-bit loads, low dword first, as the kernel's `lo_hi_readq` reads CAP.
/// Refuses a file shorter than the register (mapping past its end would fault on the read).
pub(crate) fn read_mapped_u64(file: &std::fs::File, offset: usize) -> std::io::Result<u64> {
    const PAGE: usize = 4096;
    if !offset.is_multiple_of(8) || offset + 8 > PAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("register offset {offset} is not an aligned u64 in the first page"),
        ));
    }
    let len = file.metadata()?.len();
    if len < (offset + 8) as u64 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{len} bytes: too short to hold the register at {offset}"),
        ));
    }
    let map_len = PAGE.min(usize::try_from(len).unwrap_or(PAGE));
    // SAFETY: a fresh read-only shared mapping of `map_len` bytes of the open fd, placed by
    // the kernel (null hint); nothing else in this process refers to it, and it is unmapped
    // below before returning. The result is checked against MAP_FAILED.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let base = p.cast::<u32>();
    // SAFETY: `offset + 8 <= map_len` (checked above, the file holds at least that much), and
    // `offset` is 8-aligned in a page-aligned mapping, so both u32 loads are in bounds and
    // aligned. Volatile: device registers must be read exactly once each, as the width given.
    let (lo, hi) = unsafe { (base.add(offset / 4).read_volatile(), base.add(offset / 4 + 1).read_volatile()) };
    // SAFETY: `p` and `map_len` are exactly what mmap returned and was given; no reference
    // into the mapping outlives this call.
    unsafe { libc::munmap(p, map_len) };
    Ok(u64::from(lo) | (u64::from(hi) << 32))
}

/// True when the process runs with effective uid 0.
pub(crate) fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn subsys_reset_request_number_matches_the_kernel_header() {
        assert_eq!(super::NVME_IOCTL_SUBSYS_RESET, 0x4E45);
    }

    #[test]
    fn a_mapped_register_reads_little_endian_and_a_short_file_is_refused() {
        let root = crate::fake_root::FakeRoot::new("mmio");
        let mut bar = vec![0u8; 4096];
        bar[..8].copy_from_slice(&0x0000_0010_2003_03ffu64.to_le_bytes());
        bar[8..16].copy_from_slice(&0x0001_0400u64.to_le_bytes());
        let p = root.0.join("resource0");
        std::fs::write(&p, &bar).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        assert_eq!(super::read_mapped_u64(&f, 0).unwrap(), 0x0000_0010_2003_03ff);
        assert_eq!(super::read_mapped_u64(&f, 8).unwrap(), 0x0001_0400);
        assert!(super::read_mapped_u64(&f, 4).is_err(), "unaligned");
        std::fs::write(&p, [0u8; 4]).unwrap();
        let short = std::fs::File::open(&p).unwrap();
        let e = super::read_mapped_u64(&short, 0).unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
    }
}
