//! Direct system calls that std does not wrap: block-device ioctls (sizes, discard, zero-out),
//! `fallocate`, the `pwritev2` / `preadv2` pair with per-call flags (`RWF_DSYNC` gives a write
//! FUA semantics on an O_DIRECT block device), the NVMe admin passthrough ioctl and the NVMe I/O
//! passthrough ioctl (`NVME_IOCTL_IO_CMD`, the passthrough engine's read, write, flush, write
//! zeroes and deallocate).
//!
//! Invariant: together with `uring/`, this is the only module with `unsafe`. Every call
//! here borrows its buffer for the duration of the call only; nothing outlives the syscall.

#![expect(
    unsafe_code,
    reason = "block-device and NVMe ioctls, fallocate, pwritev2/preadv2 and statvfs have no safe std wrapper; each unsafe block states why its call is sound"
)]

use std::fs::File;
use std::io;
use std::mem::size_of;
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

/// `BLKDISCARD` = `_IO(0x12, 119)` (linux/fs.h): discards a byte range of a block device.
const BLKDISCARD: u32 = ioc(0, 0x12, 119, 0);
/// `BLKZEROOUT` = `_IO(0x12, 127)` (linux/fs.h): zeroes a byte range of a block device, as
/// REQ_OP_WRITE_ZEROES without unmapping (the kernel writes zero pages where the device
/// lacks the command).
const BLKZEROOUT: u32 = ioc(0, 0x12, 127, 0);

/// A block-device ioctl that takes a byte range, `uint64_t range[2]` (start, length).
fn ioctl_range(file: &File, req: u32, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: BLKDISCARD and BLKZEROOUT read two u64 (start, length) through the pointer, which
    // points at a live local array of exactly that; the call is synchronous and keeps nothing.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), req as _, range.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Discards `len` bytes at `offset` of a block device (BLKDISCARD), synchronously.
pub fn blk_discard(file: &File, offset: u64, len: u64) -> io::Result<()> {
    ioctl_range(file, BLKDISCARD, offset, len)
}

/// Zeroes `len` bytes at `offset` of a block device (BLKZEROOUT), synchronously.
pub fn blk_zeroout(file: &File, offset: u64, len: u64) -> io::Result<()> {
    ioctl_range(file, BLKZEROOUT, offset, len)
}

/// `fallocate(2)` with `mode` (`FALLOC_FL_*`) over `len` bytes at `offset`.
pub fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    };
    // SAFETY: fallocate(2) takes plain integers; `file` is borrowed, so its fd is open for the
    // call, and the kernel is handed no memory of ours.
    if unsafe { libc::fallocate(file.as_raw_fd(), mode, off, n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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

/// `struct nvme_admin_cmd` (`struct nvme_passthru_cmd`, linux/nvme_ioctl.h): one admin command
/// for `NVME_IOCTL_ADMIN_CMD`. `addr`/`data_len` are filled in by `nvme_admin` from its
/// buffer; `result` is the completion's dword 0, written back by the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeAdminCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    pub result: u32,
}

const _: () = assert!(size_of::<NvmeAdminCmd>() == 72);

/// The kernel's `_IOC` request encoding: `dir << 30 | size << 16 | type << 8 | nr`
/// (asm-generic: x86, arm, riscv; powerpc, mips and sparc encode differently).
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// `NVME_IOCTL_ADMIN_CMD` = `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
pub(crate) const NVME_IOCTL_ADMIN_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x41, size_of::<NvmeAdminCmd>());

/// A completion status other than success: the drive answered and refused the command. The
/// value is what the kernel returns from the ioctl, the completion's status field without its
/// phase bit: SC in bits 0-7, SCT in 8-10, CRD 11-12, More 13, DNR (do not retry) 14.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NVMe status {:#06x} ({})", .0, self.describe())]
pub struct NvmeStatus(pub u16);

impl NvmeStatus {
    /// Status code type (0 generic, 1 command specific, 2 media and data integrity, 3 path).
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 0x7) as u8
    }

    /// Status code, within its type.
    pub fn sc(self) -> u8 {
        self.0 as u8
    }

    /// Do Not Retry: the same command will fail again.
    pub fn dnr(self) -> bool {
        self.0 & 0x4000 != 0
    }

    /// The status an admin-command error carries, if the drive refused (None for OS errors).
    pub fn of(e: &io::Error) -> Option<NvmeStatus> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<NvmeStatus>()).copied()
    }

    fn describe(self) -> String {
        match (self.sct(), self.sc()) {
            (0, 0x01) => "invalid command opcode".into(),
            (0, 0x02) => "invalid field in command".into(),
            (0, 0x0B) => "invalid namespace or format".into(),
            (1, 0x09) => "invalid log page".into(),
            (2, 0x82) => "end-to-end guard check error".into(),
            (2, 0x83) => "end-to-end application tag check error".into(),
            (2, 0x84) => "end-to-end reference tag check error".into(),
            (sct, sc) => format!("SCT {sct}, SC {sc:#04x}"),
        }
    }
}

/// `NVME_IOCTL_IO_CMD` = `_IOWR('N', 0x43, struct nvme_passthru_cmd)`: the same 72-byte struct
/// as the admin command (linux/nvme_ioctl.h: `#define nvme_admin_cmd nvme_passthru_cmd`), sent
/// to the controller's one namespace.
pub(crate) const NVME_IOCTL_IO_CMD: u32 = ioc(IOC_READ | IOC_WRITE, b'N', 0x43, size_of::<NvmeAdminCmd>());

/// The data of one NVM I/O command, by direction.
pub enum IoData<'a> {
    /// Flush: no data.
    None,
    /// Write: the device reads this.
    ToDevice(&'a [u8]),
    /// Read: the device writes this.
    FromDevice(&'a mut [u8]),
}

/// Bytes the data of NVM I/O command `cmd` holds: (NLB + 1) logical blocks of `lbs` bytes for
/// a Write (0x01) or Read (0x02), NR + 1 16-byte ranges for a Dataset Management (0x09), none
/// for a Flush (0x00) or Write Zeroes (0x08); `None` for an opcode not known here.
fn io_data_bytes(cmd: &NvmeAdminCmd, lbs: u32) -> Option<u64> {
    match cmd.opcode {
        0x00 | 0x08 => Some(0),
        0x01 | 0x02 => Some((u64::from(cmd.cdw12 & 0xFFFF) + 1) * u64::from(lbs)),
        0x09 => Some((u64::from(cmd.cdw10 & 0xFF) + 1) * 16),
        _ => None,
    }
}

/// Issues one NVM command set I/O command (Flush 0x00, Write 0x01, Read 0x02, Write Zeroes
/// 0x08, Dataset Management 0x09) through `NVME_IOCTL_IO_CMD` on a controller character device
/// and returns the completion's dword 0. `addr`/`data_len` are set from `data`, which must go
/// the command's way (to the device for a Write or Dataset Management, from it for a Read, none
/// for a Flush or Write Zeroes) and hold exactly its transfer ([`io_data_bytes`]); anything
/// else is refused (`InvalidInput`) before the ioctl. Errors as [`nvme_admin`]'s (the kernel
/// refuses the ioctl with EINVAL on a controller with more than one namespace). No metadata:
/// see [`nvme_io_meta`].
pub fn nvme_io(file: &File, cmd: &mut NvmeAdminCmd, data: IoData<'_>, lbs: u32) -> io::Result<u32> {
    nvme_io_meta(file, cmd, data, IoData::None, (lbs, 0))
}

/// [`nvme_io`] with a separate metadata buffer (a namespace formatted with `ms` bytes of
/// metadata per block, not extended: NVMe's MPTR, which the kernel maps as the request's
/// integrity payload, `drivers/nvme/host/ioctl.c`). `format` is the namespace's (`lbs`, `ms`).
/// A Write's metadata goes to the device and a Read's comes from it, exactly `ms` bytes per
/// block the command carries; every other command, and a namespace without metadata, has
/// none. Anything else is refused before the ioctl, as a mismatched data buffer is.
pub fn nvme_io_meta(file: &File, cmd: &mut NvmeAdminCmd, data: IoData<'_>, meta: IoData<'_>, format: (u32, u16)) -> io::Result<u32> {
    let (lbs, ms) = format;
    let (way_ok, ptr, len) = match data {
        IoData::None => (matches!(cmd.opcode, 0x00 | 0x08), 0u64, 0usize),
        IoData::ToDevice(b) => (matches!(cmd.opcode, 0x01 | 0x09), b.as_ptr() as u64, b.len()),
        IoData::FromDevice(b) => (cmd.opcode == 0x02, b.as_mut_ptr() as u64, b.len()),
    };
    let (meta_ok, meta_ptr, meta_len) = match meta {
        IoData::None => (ms == 0 || !matches!(cmd.opcode, 0x01 | 0x02), 0u64, 0usize),
        IoData::ToDevice(b) => (ms > 0 && cmd.opcode == 0x01, b.as_ptr() as u64, b.len()),
        IoData::FromDevice(b) => (ms > 0 && cmd.opcode == 0x02, b.as_mut_ptr() as u64, b.len()),
    };
    let refused = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, format!("I/O opcode {:#04x} {why}: refused", cmd.opcode)));
    match io_data_bytes(cmd, lbs) {
        None => return refused("is not one this engine sends".into()),
        Some(_) if !way_ok => return refused(format!("moves no data that way (a {len}-byte buffer)")),
        Some(want) if want != len as u64 => return refused(format!("transfers {want} bytes, with a {len}-byte buffer")),
        Some(_) => {}
    }
    let meta_want = if meta_ptr == 0 { 0 } else { (u64::from(cmd.cdw12 & 0xFFFF) + 1) * u64::from(ms) };
    if !meta_ok {
        return refused(format!("with {ms} bytes of metadata per block moves no metadata that way (a {meta_len}-byte buffer)"));
    }
    if meta_want != meta_len as u64 {
        return refused(format!("carries {meta_want} bytes of metadata, with a {meta_len}-byte buffer"));
    }
    cmd.addr = ptr;
    cmd.data_len = u32::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes in one command")))?;
    cmd.metadata = meta_ptr;
    cmd.metadata_len = meta_len as u32;
    // SAFETY: `cmd` is a live, exclusively borrowed `struct nvme_passthru_cmd` (layout checked
    // above); the kernel reads it and writes back `result`. `addr`/`data_len` describe exactly
    // the buffer in `data`, and `metadata`/`metadata_len` exactly the one in `meta` (or null
    // and 0), each borrowed (mutably, for a read) for the whole call; the checks above make the
    // command's transfer and its metadata exactly that long (a flush or write zeroes has none).
    // The ioctl is synchronous: nothing touches either buffer after it returns.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_IO_CMD as _, cmd as *mut NvmeAdminCmd) };
    match r {
        0 => Ok(cmd.result),
        r if r < 0 => Err(io::Error::last_os_error()),
        r => Err(match u16::try_from(r) {
            Ok(s) => io::Error::other(NvmeStatus(s)),
            Err(_) => io::Error::other(format!("NVME_IOCTL_IO_CMD returned {r}, not an NVMe status")),
        }),
    }
}

/// Bytes the controller writes into the host buffer for `cmd`, for the admin commands whose
/// transfer length this module knows: Get Log Page (NUMD) and Identify (always 4096).
fn admin_data_in_bytes(cmd: &NvmeAdminCmd) -> Option<u64> {
    match cmd.opcode {
        0x02 => Some(((u64::from(cmd.cdw11 & 0xFFFF) << 16 | u64::from(cmd.cdw10 >> 16)) + 1) * 4),
        0x06 => Some(4096),
        _ => None,
    }
}

/// Issues one admin command through `NVME_IOCTL_ADMIN_CMD` on a controller character device
/// (`/dev/nvmeN`) and returns the completion's dword 0. `data` is the data buffer (`addr` and
/// `data_len` are set from it; admin commands carry no metadata).
///
/// The device DMAs as many bytes as the command says, straight into `data`'s pages, so a
/// command asking for more than `data` holds is refused (`InvalidInput`) before the ioctl, as is
/// a data buffer for an opcode whose transfer length is not known here.
///
/// Errors: the OS error when the ioctl fails (ENOTTY: not an NVMe controller; EACCES: Get Log
/// Page needs CAP_SYS_ADMIN), or an error carrying [`NvmeStatus`] when the drive completed the
/// command with a non-zero status (see [`NvmeStatus::of`]).
pub fn nvme_admin(file: &File, cmd: &mut NvmeAdminCmd, data: &mut [u8]) -> io::Result<u32> {
    let len = u32::try_from(data.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("a {}-byte buffer is too large for one command", data.len())))?;
    match admin_data_in_bytes(cmd) {
        Some(n) if n <= u64::from(len) => {}
        Some(n) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("admin opcode {:#04x} transfers {n} bytes into a {len}-byte buffer", cmd.opcode),
            ))
        }
        None if len == 0 => {}
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("admin opcode {:#04x}: transfer length unknown, refusing a data buffer", cmd.opcode),
            ))
        }
    }
    cmd.addr = if len == 0 { 0 } else { data.as_mut_ptr() as u64 };
    cmd.data_len = len;
    cmd.metadata = 0;
    cmd.metadata_len = 0;
    // SAFETY: `cmd` is a live, exclusively borrowed `struct nvme_admin_cmd` (layout checked
    // above); the kernel reads it and writes back `result`. Its `addr`/`data_len` describe
    // exactly `data`, mutably borrowed for the whole call, and the check above keeps the
    // controller's transfer within it; metadata is null. The ioctl is synchronous: neither the
    // kernel nor the device touches either buffer after it returns.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ADMIN_CMD as _, cmd as *mut NvmeAdminCmd) };
    match r {
        0 => Ok(cmd.result),
        r if r < 0 => Err(io::Error::last_os_error()),
        r => Err(match u16::try_from(r) {
            Ok(s) => io::Error::other(NvmeStatus(s)),
            Err(_) => io::Error::other(format!("NVME_IOCTL_ADMIN_CMD returned {r}, not an NVMe status")),
        }),
    }
}

/// Bytes available to an unprivileged writer on the filesystem holding `path` (`statvfs`).
pub fn available_bytes(path: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `statvfs` is plain data, valid all-zero; `c` is a NUL-terminated path that
    // outlives the call, and `st` a live local that statvfs fills in; nothing is kept after.
    let (r, st) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st), st)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // The field types differ between targets (u32 on some 32-bit ones, u64 here); a generic
    // widening compiles to nothing where they are already u64, without a lint exception.
    fn widen<T: Into<u64>>(v: T) -> u64 {
        v.into()
    }
    let (blocks, block_bytes) = (widen(st.f_bavail), widen(st.f_frsize));
    Ok(blocks.saturating_mul(block_bytes))
}

/// `CLOCK_MONOTONIC` now, in ns: the clock two processes of one host share (an agent's
/// timestamps are mapped onto its coordinator's through it).
pub fn monotonic_ns() -> u64 {
    // SAFETY: `timespec` is plain data, valid all-zero; `ts` is a live local that
    // clock_gettime fills in; CLOCK_MONOTONIC always exists on Linux.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        ts
    };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Sends SIGKILL to every process of process group `pgid` (a transport started in a group of
/// its own: what a `kill` host power switch cuts).
pub fn kill_process_group(pgid: u32) -> std::io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid).ok().filter(|&p| p > 1).ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers; a negative pid names the process group.
    if unsafe { libc::kill(-pgid, libc::SIGKILL) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Marks `fd` close-on-exec, so that no process this one starts (a transport, an `exec:`
/// switch, a test's child) holds it open. serialport opens its ttys and pty pairs without
/// O_CLOEXEC: a child that inherited a pty's master kept it alive after the emulator let go,
/// and the driver then saw silence, not the hang-up of a board that was gone.
pub fn set_cloexec(owner: &impl AsRawFd) -> io::Result<()> {
    let fd = owner.as_raw_fd();
    // SAFETY: fcntl(2) F_GETFD/F_SETFD take and return plain integers; `owner` is borrowed,
    // so its fd is open for the call.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn admin_cmd_layout_and_request_number_match_the_kernel_header() {
        assert_eq!(size_of::<NvmeAdminCmd>(), 72);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
        assert_eq!([offset_of!(NvmeAdminCmd, nsid), offset_of!(NvmeAdminCmd, metadata), offset_of!(NvmeAdminCmd, addr)], [4, 16, 24]);
        assert_eq!([offset_of!(NvmeAdminCmd, data_len), offset_of!(NvmeAdminCmd, cdw10), offset_of!(NvmeAdminCmd, result)], [36, 40, 68]);
    }

    #[test]
    fn block_range_ioctls_are_linux_fs_h_numbers() {
        assert_eq!((BLKDISCARD, BLKZEROOUT), (0x1277, 0x127F));
    }

    #[test]
    fn nvme_status_names_itself_and_survives_io_error_wrapping() {
        let s = NvmeStatus(0x4109);
        assert_eq!((s.sct(), s.sc(), s.dnr()), (1, 0x09, true));
        let e = io::Error::other(s);
        assert_eq!(e.to_string(), "NVMe status 0x4109 (invalid log page)");
        assert_eq!(NvmeStatus::of(&e), Some(s));
        assert_eq!(NvmeStatus(0x4002).to_string(), "NVMe status 0x4002 (invalid field in command)");
        assert_eq!(NvmeStatus(0x0281).to_string(), "NVMe status 0x0281 (SCT 2, SC 0x81)");
        assert_eq!(NvmeStatus::of(&io::Error::from_raw_os_error(libc::ENOTTY)), None);
    }

    #[test]
    fn admin_transfers_longer_than_the_buffer_are_refused_before_the_ioctl() {
        let f = File::open("/dev/null").unwrap();
        // Get Log Page, NUMDL 127: 512 bytes.
        let mut cmd = NvmeAdminCmd { opcode: 0x02, cdw10: 0x007F_0002, ..Default::default() };
        let e = nvme_admin(&f, &mut cmd, &mut [0u8; 256]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("transfers 512 bytes into a 256-byte buffer"), "{e}");
        let mut cmd = NvmeAdminCmd { opcode: 0x06, cdw10: 1, ..Default::default() };
        assert_eq!(nvme_admin(&f, &mut cmd, &mut [0u8; 512]).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        let mut cmd = NvmeAdminCmd { opcode: 0x0A, ..Default::default() };
        assert_eq!(nvme_admin(&f, &mut cmd, &mut [0u8; 4]).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn io_commands_whose_data_is_not_their_transfer_are_refused_before_the_ioctl() {
        let f = File::open("/dev/null").unwrap();
        let refused = |mut cmd: NvmeAdminCmd, data: IoData<'_>| nvme_io(&f, &mut cmd, data, 512).unwrap_err();
        // Dataset Management with two ranges (NR 1) and the data of one.
        let e = refused(NvmeAdminCmd { opcode: 0x09, cdw10: 1, ..Default::default() }, IoData::ToDevice(&[0u8; 16]));
        assert!(e.kind() == io::ErrorKind::InvalidInput && e.to_string().contains("transfers 32 bytes"), "{e}");
        let e = refused(NvmeAdminCmd { opcode: 0x09, ..Default::default() }, IoData::FromDevice(&mut [0u8; 16]));
        assert!(e.to_string().contains("no data that way"), "{e}");
        let e = refused(NvmeAdminCmd { opcode: 0x08, ..Default::default() }, IoData::ToDevice(&[0u8; 512]));
        assert!(e.to_string().contains("no data that way"), "{e}");
        let e = refused(NvmeAdminCmd { opcode: 0x05, ..Default::default() }, IoData::None);
        assert!(e.to_string().contains("not one this engine sends"), "{e}");
        // Each with its own transfer reaches the kernel (ENOTTY: /dev/null is no controller).
        let mut dsm = NvmeAdminCmd { opcode: 0x09, ..Default::default() };
        assert_eq!(nvme_io(&f, &mut dsm, IoData::ToDevice(&[0u8; 16]), 512).unwrap_err().raw_os_error(), Some(libc::ENOTTY));
        let mut wz = NvmeAdminCmd { opcode: 0x08, cdw12: 7, ..Default::default() };
        assert_eq!(nvme_io(&f, &mut wz, IoData::None, 512).unwrap_err().raw_os_error(), Some(libc::ENOTTY));
        // Metadata: 8 bytes a block, each way with its own command, and no other.
        let meta = |mut cmd: NvmeAdminCmd, data: IoData<'_>, meta: IoData<'_>| nvme_io_meta(&f, &mut cmd, data, meta, (512, 8));
        let write2 = NvmeAdminCmd { opcode: 0x01, cdw12: 1, ..Default::default() };
        let e = meta(write2, IoData::ToDevice(&[0u8; 1024]), IoData::ToDevice(&[0u8; 8])).unwrap_err();
        assert!(e.to_string().contains("carries 16 bytes of metadata, with a 8-byte buffer"), "{e}");
        let e = meta(write2, IoData::ToDevice(&[0u8; 1024]), IoData::FromDevice(&mut [0u8; 16])).unwrap_err();
        assert!(e.to_string().contains("no metadata that way"), "{e}");
        let e = meta(write2, IoData::ToDevice(&[0u8; 1024]), IoData::None).unwrap_err();
        assert!(e.to_string().contains("no metadata that way (a 0-byte buffer)"), "{e}");
        let flush = NvmeAdminCmd { opcode: 0x00, ..Default::default() };
        assert!(meta(flush, IoData::None, IoData::ToDevice(&[0u8; 8])).unwrap_err().to_string().contains("no metadata that way"));
        let e = meta(write2, IoData::ToDevice(&[0u8; 1024]), IoData::ToDevice(&[0u8; 16])).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
    }

    #[test]
    fn admin_ioctl_on_something_not_nvme_is_an_os_error_not_a_status() {
        // /dev/null is a character device without this ioctl: the kernel answers ENOTTY.
        let f = File::open("/dev/null").unwrap();
        let mut cmd = NvmeAdminCmd { opcode: 0x02, cdw10: 0x007F_0002, nsid: 0xFFFF_FFFF, ..Default::default() };
        let e = nvme_admin(&f, &mut cmd, &mut [0u8; 512]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY), "{e}");
        assert_eq!(NvmeStatus::of(&e), None);
    }
}
