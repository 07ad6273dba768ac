//! What a target opened by [`super::discover`] carries of deallocate and write zeroes
//! ([`ZeroingSupport`]), learnt when it is opened.
//!
//! A block device's request queue says it in sysfs: `queue/discard_max_bytes` and
//! `queue/write_zeroes_max_bytes` are 0 when the device takes no such request (a partition
//! answers with its disk's queue). The block layer promises nothing about what a discarded
//! range reads back, so a block device's deallocated range reads [`DeallocReads::Unreported`].
//!
//! A regular file's filesystem carries what it does with `fallocate`: a punched hole
//! (deallocate, which reads zeros after) and a zeroed range (write zeroes). Not every one does
//! both (tmpfs punches holes but zeroes no range), so each is tried on an unnamed temporary
//! file in the target's directory (`O_TMPFILE`, gone when closed): the target is not touched.

use crate::block::{DeallocReads, ZeroingSupport};
use crate::sys;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// `fallocate` mode of a file's deallocate: a hole, the file's size kept.
pub const FILE_DEALLOCATE: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
/// `fallocate` mode of a file's write zeroes (and of a block device's, through io_uring: the
/// kernel's `blkdev_fallocate` makes it REQ_OP_WRITE_ZEROES without unmapping).
pub const FILE_WRITE_ZEROES: i32 = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;

/// What a block device's request queue takes, bytes per request (sysfs `queue/`); 0: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueZeroing {
    pub discard_max_bytes: u64,
    pub write_zeroes_max_bytes: u64,
}

impl QueueZeroing {
    /// What a target over this queue carries.
    pub fn support(&self) -> ZeroingSupport {
        ZeroingSupport {
            deallocate: self.discard_max_bytes > 0,
            write_zeroes: self.write_zeroes_max_bytes > 0,
            format: false,
            dealloc_reads: DeallocReads::Unreported,
        }
    }
}

/// Why a filesystem's punch hole and zero range could not be tried.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot make an unnamed temporary file in {} to try fallocate on: {source}", .dir.display())]
    TempFile { dir: PathBuf, source: std::io::Error },
    #[error("fallocate ({what}) on a temporary file in {}: {source}", .dir.display())]
    Fallocate { what: &'static str, dir: PathBuf, source: std::io::Error },
}

/// A queue limit that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("cannot read {}: {source}", .file.display())]
    Unreadable { file: PathBuf, source: std::io::Error },
    #[error("{} holds {text:?}, not a byte count", .file.display())]
    NotANumber { file: PathBuf, text: String },
}

/// The zeroing limits of the disk whose (canonical) sysfs directory is `disk`. A limit the
/// kernel does not have (no such file) reads 0: not carried.
pub fn queue_zeroing(disk: &Path) -> Result<QueueZeroing, QueueError> {
    let limit = |name: &str| -> Result<u64, QueueError> {
        let file = disk.join("queue").join(name);
        match std::fs::read_to_string(&file) {
            Ok(text) => text.trim().parse::<u64>().map_err(|_| QueueError::NotANumber { file, text: text.trim().to_string() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(source) => Err(QueueError::Unreadable { file, source }),
        }
    };
    Ok(QueueZeroing { discard_max_bytes: limit("discard_max_bytes")?, write_zeroes_max_bytes: limit("write_zeroes_max_bytes")? })
}

/// What the filesystem holding the regular file `target` carries: a punched hole
/// ([`FILE_DEALLOCATE`]; reads zeros) and a zeroed range ([`FILE_WRITE_ZEROES`]), each tried
/// on an unnamed temporary file in `target`'s directory. `Err` says why it could not be tried.
pub fn file_zeroing(target: &Path) -> Result<ZeroingSupport, ProbeError> {
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let probe = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir)
        .and_then(|f| f.set_len(8192).map(|()| f))
        .map_err(|source| ProbeError::TempFile { dir: dir.to_path_buf(), source })?;
    let carried = |mode: i32, what: &'static str| match sys::fallocate(&probe, mode, 0, 4096) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
        Err(source) => Err(ProbeError::Fallocate { what, dir: dir.to_path_buf(), source }),
    };
    Ok(ZeroingSupport {
        deallocate: carried(FILE_DEALLOCATE, "punch hole")?,
        write_zeroes: carried(FILE_WRITE_ZEROES, "zero range")?,
        format: false,
        dealloc_reads: DeallocReads::Zeros,
    })
}

/// What [`super::discover`] records of the block device `rdev` (`Some`) or the regular file
/// at `path`, with a line for its opener when it could not be learnt (then nothing is
/// carried). A target opened read-only carries nothing.
pub(super) fn discovered(path: &Path, rdev: Option<u64>, writable: bool) -> Result<(ZeroingSupport, Option<String>), QueueError> {
    if !writable {
        return Ok((ZeroingSupport::default(), None));
    }
    let not_carried =
        |why: String| (ZeroingSupport::default(), Some(format!("{}: deallocate and write zeroes not carried: {why}", path.display())));
    match rdev {
        Some(rdev) => match super::sysfs_dir(rdev) {
            Some(dir) => Ok((queue_zeroing(&crate::identity::disk_dir(&dir))?.support(), None)),
            None => Ok(not_carried(format!(
                "block device {}:{} has no sysfs directory to read its queue's limits from",
                libc::major(rdev),
                libc::minor(rdev)
            ))),
        },
        None => Ok(file_zeroing(path).map_or_else(|e| not_carried(e.to_string()), |s| (s, None))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_root::FakeRoot;

    #[test]
    fn queue_limits_say_what_a_block_device_carries_and_a_bad_one_is_named() {
        let root = FakeRoot::new("qz");
        let disk = root.dir("sys/block/sdz");
        root.file("sys/block/sdz/queue/discard_max_bytes", "2147450880\n");
        root.file("sys/block/sdz/queue/write_zeroes_max_bytes", "0\n");
        let q = queue_zeroing(&disk).unwrap();
        assert_eq!(q, QueueZeroing { discard_max_bytes: 2147450880, write_zeroes_max_bytes: 0 });
        let s = q.support();
        assert_eq!((s.deallocate, s.write_zeroes, s.dealloc_reads), (true, false, DeallocReads::Unreported));
        // A kernel without the limit: not carried.
        std::fs::remove_file(disk.join("queue/write_zeroes_max_bytes")).unwrap();
        assert_eq!(queue_zeroing(&disk).unwrap().write_zeroes_max_bytes, 0);
        root.file("sys/block/sdz/queue/discard_max_bytes", "lots\n");
        let e = queue_zeroing(&disk).unwrap_err().to_string();
        assert!(e.contains("queue/discard_max_bytes") && e.contains("\"lots\""), "{e}");
    }

    #[test]
    fn a_file_on_this_filesystem_is_probed_without_touching_it() {
        let root = FakeRoot::new("fz");
        let target = root.file("t.img", "keep");
        let s = file_zeroing(&target).unwrap();
        assert_eq!(s.dealloc_reads, DeallocReads::Zeros);
        assert!(s.deallocate, "every filesystem faultline runs its tests on punches holes");
        assert_eq!(root.read("t.img"), "keep");
        assert_eq!(std::fs::read_dir(&root.0).unwrap().count(), 1, "the probe leaves no file behind");
        let e = file_zeroing(&root.0.join("missing/t.img")).unwrap_err().to_string();
        assert!(e.contains("missing") && e.contains("unnamed temporary file"), "{e}");
    }
}
