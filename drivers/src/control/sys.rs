//! The only `unsafe` in the controllers: the NVMe subsystem-reset ioctl (it has no sysfs
//! equivalent) and `geteuid`.

#![expect(
    unsafe_code,
    reason = "the NVMe subsystem-reset ioctl and geteuid have no safe std wrapper; each unsafe block states why its call is sound"
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
}
