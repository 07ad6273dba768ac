//! A synchronous target over a regular file: the first real engine, and the reference the
//! io_uring engine will be compared against.
//!
//! Operations execute at submission (queue depth is accepted but each call completes before
//! the next starts); their completions queue up for `reap`. The file is opened with
//! O_DIRECT where the filesystem supports it (not tmpfs), so verification reads see what the
//! storage holds, not a page-cache copy; `direct()` says which mode is in use.
//!
//! Block devices are refused here: writing to one needs the identity and in-use guards of
//! the block-device engine.

use crate::block::{BlockTarget, Completion, Geometry, IoFailure, Op, TargetError};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct FileTarget {
    path: PathBuf,
    file: File,
    direct: bool,
    capacity: u64,
    depth: usize,
    done: VecDeque<Completion>,
}

/// Sector size assumed for regular files.
pub const FILE_SECTOR_BYTES: u32 = 512;

impl FileTarget {
    /// Opens an existing regular file. With `writable`, it is opened for writing too.
    pub fn open(path: &Path, writable: bool, depth: usize) -> Result<Self, TargetError> {
        let shown = path.display().to_string();
        let meta = std::fs::metadata(path).map_err(|source| TargetError::Open { path: shown.clone(), source })?;
        let ft = meta.file_type();
        if ft.is_block_device() || ft.is_char_device() {
            return Err(TargetError::Unsupported {
                path: shown,
                reason: "is a device; this build writes only to regular files (block devices \
                         need the block-device engine with its safety guards)"
                    .into(),
            });
        }
        if !ft.is_file() {
            return Err(TargetError::Unsupported { path: shown, reason: "is not a regular file".into() });
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(writable);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                (open(false).map_err(|source| TargetError::Open { path: shown.clone(), source })?, false)
            }
            Err(source) => return Err(TargetError::Open { path: shown, source }),
        };
        Ok(FileTarget { path: path.to_path_buf(), file, direct, capacity: meta.len(), depth: depth.max(1), done: VecDeque::new() })
    }

    /// True when the file was opened with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct
    }

    fn fail(&self, what: String, e: std::io::Error) -> IoFailure {
        IoFailure::new(e.raw_os_error().unwrap_or(libc::EIO), format!("{} {what}", self.path.display()))
    }
}

impl BlockTarget for FileTarget {
    fn geometry(&self) -> Geometry {
        Geometry { logical_block_bytes: FILE_SECTOR_BYTES, physical_block_bytes: 4096, capacity_bytes: self.capacity }
    }

    fn identity(&self) -> String {
        let canon = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        format!("file:{} size={}", canon.display(), self.capacity)
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if self.done.len() >= self.depth {
            return Err(TargetError::QueueFull { path: self.path.display().to_string(), depth: self.depth });
        }
        let completion = match op {
            Op::Write { token, offset, buf, fua, .. } => {
                let mut result =
                    self.file.write_all_at(&buf, offset).map_err(|e| self.fail(format!("write of {} bytes at {offset}", buf.len()), e));
                if fua && result.is_ok() {
                    result = self.file.sync_data().map_err(|e| self.fail(format!("FUA sync after write at {offset}"), e));
                }
                Completion { token, result, buf: Some(buf) }
            }
            Op::Flush { token } => {
                let result = self.file.sync_data().map_err(|e| self.fail("flush".into(), e));
                Completion { token, result, buf: None }
            }
        };
        self.done.push_back(completion);
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, _timeout: Duration) -> Result<usize, TargetError> {
        // Every operation already ran at submission, so `min` is always satisfiable when
        // anything is in flight.
        let n = self.done.len().max(min.min(self.done.len()));
        out.extend(self.done.drain(..n));
        Ok(n)
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        if offset + buf.len() as u64 > self.capacity {
            return Err(IoFailure::new(
                libc::EINVAL,
                format!("{}: read of {} bytes at {offset} passes the end ({})", self.path.display(), buf.len(), self.capacity),
            ));
        }
        self.file.read_exact_at(buf, offset).map_err(|e| self.fail(format!("read of {} bytes at {offset}", buf.len()), e))
    }
}
