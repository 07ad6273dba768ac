//! The guest's initramfs: a newc cpio archive (the `cpio` crate writes the entries), and the
//! kernel modules it needs in an order `insmod` can load them in.

use super::error::{Doing, IoStep};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Why the initramfs could not be written, or its modules not be put in order.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error("{name}: too large for a cpio entry")]
    TooLarge { name: String },
    #[error("archive already finished")]
    Finished,
    #[error("{module}: {why}")]
    Module { module: String, why: &'static str },
    #[error("module dependencies loop at {0}")]
    Loop(String),
    #[error("kernel module {0} is neither in the kernel package nor built in")]
    NoModule(String),
}

type Result<T, E = ArchiveError> = std::result::Result<T, E>;

/// A newc archive being written.
pub struct Archive {
    out: Option<BufWriter<std::fs::File>>,
    path: PathBuf,
    ino: u32,
    names: BTreeSet<String>,
}

impl Archive {
    pub fn create(path: &Path) -> Result<Archive> {
        let f = std::fs::File::create(path).doing(|| format!("cannot create {}", path.display()))?;
        Ok(Archive { out: Some(BufWriter::new(f)), path: path.to_path_buf(), ino: 1, names: BTreeSet::new() })
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) -> Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| ArchiveError::TooLarge { name: name.to_string() })?;
        self.ino += 1;
        let w = self.out.take().ok_or(ArchiveError::Finished)?;
        let mut e = cpio::newc::Builder::new(name).ino(self.ino).mode(mode).nlink(1).write(w, size);
        let writing = || format!("cannot write {}", self.path.display());
        e.write_all(data).doing(writing)?;
        self.out = Some(e.finish().doing(writing)?);
        self.names.insert(name.to_string());
        Ok(())
    }

    pub fn dir(&mut self, name: &str) -> Result<()> {
        self.entry(name, 0o040755, &[])
    }

    pub fn bytes(&mut self, name: &str, data: &[u8], perm: u32) -> Result<()> {
        self.entry(name, 0o100000 | perm, data)
    }

    pub fn file(&mut self, name: &str, src: &Path, perm: u32) -> Result<()> {
        let data = std::fs::read(src).doing(|| format!("cannot read {}", src.display()))?;
        self.bytes(name, &data, perm)
    }

    /// [`Archive::file`], unless `name` is already in the archive.
    pub fn file_once(&mut self, name: &str, src: &Path, perm: u32) -> Result<()> {
        if self.names.contains(name) {
            return Ok(());
        }
        self.file(name, src, perm)
    }

    pub fn finish(mut self) -> Result<()> {
        let w = self.out.take().ok_or(ArchiveError::Finished)?;
        let writing = || format!("cannot write {}", self.path.display());
        let mut w = cpio::newc::trailer(w).doing(writing)?;
        w.flush().doing(writing)?;
        w.into_inner().map_err(|e| e.into_error()).and_then(|f| f.sync_all()).doing(writing)?;
        Ok(())
    }
}

/// Module names compare with `-` and `_` as one (as the kernel does).
fn norm(name: &str) -> String {
    name.replace('-', "_")
}

/// The `depends=` of a module, from its `.modinfo` section (NUL-separated `key=value`).
fn depends(ko: &Path) -> Result<Vec<String>> {
    use object::{Object, ObjectSection};
    let data = std::fs::read(ko).doing(|| format!("cannot read {}", ko.display()))?;
    let bad = |why| ArchiveError::Module { module: ko.display().to_string(), why };
    let file = object::File::parse(&*data).map_err(|_| bad("not an ELF module"))?;
    let sec = file.section_by_name(".modinfo").ok_or_else(|| bad("no .modinfo section"))?;
    let info = sec.data().map_err(|_| bad("unreadable .modinfo"))?;
    Ok(info
        .split(|&b| b == 0)
        .filter_map(|kv| kv.strip_prefix(b"depends="))
        .flat_map(|v| String::from_utf8_lossy(v).split(',').filter(|s| !s.is_empty()).map(norm).collect::<Vec<_>>())
        .collect())
}

fn walk(dir: &Path, out: &mut BTreeMap<String, PathBuf>) -> Result<()> {
    let reading = || format!("cannot read {}", dir.display());
    for e in std::fs::read_dir(dir).doing(reading)? {
        let p = e.doing(reading)?.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if let Some(stem) = p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".ko")) {
            out.insert(norm(stem), p);
        }
    }
    Ok(())
}

/// The module files for `wanted` and everything they depend on, each after its
/// dependencies, found under `moddir` (`lib/modules/VERSION`). A module built into the
/// kernel (`modules.builtin`) is skipped; one that is neither is an error naming it.
pub fn modules_in_load_order(moddir: &Path, wanted: &[&str]) -> Result<Vec<PathBuf>> {
    let mut index = BTreeMap::new();
    walk(&moddir.join("kernel"), &mut index)?;
    let builtin: BTreeSet<String> = std::fs::read_to_string(moddir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.rsplit('/').next()?.strip_suffix(".ko").map(norm))
        .collect();
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    fn visit(
        name: &str,
        index: &BTreeMap<String, PathBuf>,
        builtin: &BTreeSet<String>,
        done: &mut BTreeSet<String>,
        order: &mut Vec<PathBuf>,
        depth: usize,
    ) -> Result<()> {
        if done.contains(name) || builtin.contains(name) {
            return Ok(());
        }
        if depth > 32 {
            return Err(ArchiveError::Loop(name.to_string()));
        }
        let Some(p) = index.get(name) else { return Err(ArchiveError::NoModule(name.to_string())) };
        for d in depends(p)? {
            visit(&d, index, builtin, done, order, depth + 1)?;
        }
        done.insert(name.to_string());
        order.push(p.clone());
        Ok(())
    }
    for w in wanted {
        visit(&norm(w), &index, &builtin, &mut done, &mut order, 0)?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// What [`Archive`] writes, read back with the `cpio` crate's reader: names, modes and
    /// contents, then the trailer.
    #[test]
    fn an_archive_reads_back_entry_by_entry() {
        let dir = std::env::temp_dir().join(format!("faultline-lab-cpio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("src.bin");
        std::fs::write(&src, b"module bytes").unwrap();
        let path = dir.join("t.cpio");
        let mut a = Archive::create(&path).unwrap();
        a.dir("lib").unwrap();
        a.bytes("init", b"#!/bin/sh\n", 0o755).unwrap();
        a.file("lib/m.ko", &src, 0o644).unwrap();
        a.file_once("lib/m.ko", &src, 0o644).unwrap();
        a.finish().unwrap();
        let mut f = std::fs::File::open(&path).unwrap();
        let mut seen = Vec::new();
        loop {
            let mut r = cpio::NewcReader::new(f).unwrap();
            if r.entry().is_trailer() {
                break;
            }
            let mut data = Vec::new();
            r.read_to_end(&mut data).unwrap();
            seen.push((r.entry().name().to_string(), r.entry().mode(), data));
            f = r.finish().unwrap();
        }
        assert_eq!(
            seen,
            vec![
                ("lib".to_string(), 0o040755, vec![]),
                ("init".to_string(), 0o100755, b"#!/bin/sh\n".to_vec()),
                ("lib/m.ko".to_string(), 0o100644, b"module bytes".to_vec()),
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
