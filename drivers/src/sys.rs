//! Direct system calls that std does not wrap: block-device ioctls and the `pwritev2` /
//! `preadv2` pair with per-call flags (`RWF_DSYNC` gives a write FUA semantics on an
//! O_DIRECT block device).
//!
//! Invariant: together with `uring.rs`, this is the only module with `unsafe`. Every call
//! here borrows its buffer for the duration of the call only; nothing outlives the syscall.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// `_IOR(0x12, 114, size_t)`: device size in bytes. libc does not export it.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn ioctl_int(file: &File, req: libc::c_ulong) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: BLKSSZGET and BLKPBSZGET write one `int` through the pointer, which points at a
    // live local of that type; the fd is open for the duration of the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), req as _, &mut v as *mut libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(v).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Logical block size (BLKSSZGET).
pub fn logical_block_size(file: &File) -> io::Result<u32> {
    ioctl_int(file, libc::BLKSSZGET as libc::c_ulong)
}

/// Physical block size (BLKPBSZGET).
pub fn physical_block_size(file: &File) -> io::Result<u32> {
    ioctl_int(file, libc::BLKPBSZGET as libc::c_ulong)
}

/// Capacity in bytes (BLKGETSIZE64).
pub fn device_size_bytes(file: &File) -> io::Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at a live local
    // u64; the fd is open for the duration of the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut v as *mut u64) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// One positioned write with `RWF_*` flags. Returns the bytes written (may be short).
pub fn pwritev2(file: &File, buf: &[u8], offset: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the iovec points into `buf`, which is borrowed for the whole call; the kernel
    // only reads from it, and the call is synchronous, so nothing refers to it afterwards.
    let r = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// One positioned read with `RWF_*` flags. Returns the bytes read (0 at end of file).
pub fn preadv2(file: &File, buf: &mut [u8], offset: u64, flags: i32) -> io::Result<usize> {
    let iov = libc::iovec { iov_base: buf.as_mut_ptr() as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: the iovec points into `buf`, mutably borrowed for the whole call; the call is
    // synchronous, so the kernel writes into it only before it returns.
    let r = unsafe { libc::preadv2(file.as_raw_fd(), &iov, 1, offset as libc::off_t, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}
