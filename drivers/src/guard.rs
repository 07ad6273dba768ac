//! Safety guards: refuse to write to a block device that anything else is using, or that
//! carries data someone may want.
//!
//! A device is in use when it, or any partition of it, is mounted (`/proc/self/mountinfo`,
//! matched by major:minor and by source path), swapped on (`/proc/swaps`), held by
//! device-mapper, md or LVM (`/sys/block/X/holders`, also per partition), or backs the root
//! filesystem. Those refusals have no override: the fix is to release the device.
//!
//! A device that carries a partition table or a filesystem/volume signature is refused unless
//! the caller explicitly allows destroying it. Offsets follow libblkid's probes: MBR boot
//! signature 0x55AA at 510 with a plausible partition entry, GPT "EFI PART" at LBA 1 (for 512
//! and 4096-byte LBAs), ext2/3/4 magic 0xEF53 at 1080, XFS "XFSB" at 0, btrfs "_BHRfS_M" at
//! 65600, swap "SWAPSPACE2"/"SWAP-SPACE" at the end of the first page (4 KiB and 64 KiB
//! pages), LUKS "LUKS\xba\xbe" at 0, LVM2 "LABELONE" + "LVM2 001" in one of sectors 0-3.

use crate::blockdev::sysfs_dir;
use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Why a device is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("{dev} is in use: {why}; faultline never writes to a device in use (unmount/swapoff/release it first)")]
    InUse { dev: String, why: String },
    #[error(
        "{dev} carries {what}; writing would destroy it. If that is intended, pass --allow-overwrite-signature \
         (or wipe it first: wipefs -a {dev})"
    )]
    Signature { dev: String, what: String },
    #[error("{dev} is not the expected device: {why}; check that you named the right device")]
    Identity { dev: String, why: String },
}

/// The whole disk of `rdev` and all its partitions: (dev numbers, kernel names, sysfs dirs).
fn family(rdev: u64) -> (BTreeSet<u64>, Vec<String>, Vec<PathBuf>) {
    let mut devs = BTreeSet::from([rdev]);
    let mut names = Vec::new();
    let mut dirs = Vec::new();
    let Some(dir) = sysfs_dir(rdev) else { return (devs, names, dirs) };
    let disk = if dir.join("partition").exists() { dir.parent().map(Path::to_path_buf).unwrap_or(dir) } else { dir };
    let mut add = |d: &Path| {
        if let Ok(s) = std::fs::read_to_string(d.join("dev")) {
            if let Some((ma, mi)) = s.trim().split_once(':') {
                if let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse()) {
                    devs.insert(libc::makedev(ma, mi));
                }
            }
            names.push(d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
            dirs.push(d.to_path_buf());
        }
    };
    add(&disk);
    if let Ok(rd) = std::fs::read_dir(&disk) {
        for e in rd.flatten() {
            if e.path().join("partition").exists() {
                add(&e.path());
            }
        }
    }
    (devs, names, dirs)
}

fn rdev_of(path: &str) -> Option<u64> {
    let m = std::fs::metadata(path).ok()?;
    m.file_type().is_block_device().then(|| m.rdev())
}

/// Unescapes the octal escapes of mountinfo/swaps fields (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every reason the device `rdev` (shown as `dev`), or a partition of it, is in use.
pub fn in_use(dev: &str, rdev: u64) -> Vec<String> {
    let (devs, names, dirs) = family(rdev);
    let mut why = Vec::new();
    if let Ok(root) = std::fs::metadata("/") {
        if devs.contains(&root.dev()) {
            why.push("it backs the root filesystem".to_string());
        }
    }
    if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in mi.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 5 {
                continue;
            }
            let by_num = f[2].split_once(':').and_then(|(a, b)| Some(libc::makedev(a.parse().ok()?, b.parse().ok()?)));
            let source = f.iter().position(|x| *x == "-").and_then(|i| f.get(i + 2)).map(|s| unescape(s));
            let by_src = source.as_deref().and_then(rdev_of);
            if by_num.is_some_and(|d| devs.contains(&d)) || by_src.is_some_and(|d| devs.contains(&d)) {
                let what = source.unwrap_or_else(|| f[2].to_string());
                why.push(format!("{what} is mounted at {}", unescape(f[4])));
            }
        }
    }
    if let Ok(sw) = std::fs::read_to_string("/proc/swaps") {
        for line in sw.lines().skip(1) {
            if let Some(p) = line.split_whitespace().next().map(unescape) {
                if rdev_of(&p).is_some_and(|d| devs.contains(&d)) {
                    why.push(format!("{p} is in use as swap"));
                }
            }
        }
    }
    for (name, d) in names.iter().zip(&dirs) {
        if let Ok(rd) = std::fs::read_dir(d.join("holders")) {
            let holders: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            if !holders.is_empty() {
                why.push(format!("{name} is held by {} (device-mapper/md/LVM)", holders.join(", ")));
            }
        }
    }
    why.sort();
    why.dedup();
    let _ = dev;
    why
}

/// Refuses the device when it, or a partition of it, is in use.
pub fn check_not_in_use(dev: &str, rdev: u64) -> Result<(), GuardError> {
    let why = in_use(dev, rdev);
    if why.is_empty() {
        Ok(())
    } else {
        Err(GuardError::InUse { dev: dev.to_string(), why: why.join("; ") })
    }
}

/// Bytes of the device probed for signatures.
pub const PROBE_BYTES: usize = 68 * 1024;

/// Names the partition tables and filesystem/volume signatures in `head` (the first
/// [`PROBE_BYTES`] of the device, or fewer if it is smaller).
pub fn signatures(head: &[u8]) -> Vec<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()).is_some_and(|b| b == magic);
    let mut out = Vec::new();
    if at(510, &[0x55, 0xAA]) {
        // A boot sector with at least one plausible partition entry (boot flag 0x00 or 0x80,
        // a type, a size), as libblkid's DOS probe wants; a bare 0x55AA is not enough.
        let plausible = (0..4).any(|i| {
            let e = &head[446 + 16 * i..446 + 16 * (i + 1)];
            (e[0] == 0 || e[0] == 0x80) && e[4] != 0 && u32::from_le_bytes([e[12], e[13], e[14], e[15]]) != 0
        });
        if plausible {
            out.push(if (0..4).any(|i| head[446 + 16 * i + 4] == 0xEE) { "a protective MBR (GPT disk)" } else { "an MBR partition table" });
        }
    }
    if at(512, b"EFI PART") || at(4096, b"EFI PART") {
        out.push("a GPT partition table");
    }
    if at(1080, &[0x53, 0xEF]) {
        out.push("an ext2/3/4 filesystem");
    }
    if at(0, b"XFSB") {
        out.push("an XFS filesystem");
    }
    if at(65536 + 64, b"_BHRfS_M") {
        out.push("a btrfs filesystem");
    }
    if at(4096 - 10, b"SWAPSPACE2") || at(4096 - 10, b"SWAP-SPACE") || at(65536 - 10, b"SWAPSPACE2") {
        out.push("a swap signature");
    }
    if at(0, b"LUKS\xba\xbe") {
        out.push("a LUKS header");
    }
    if (0..4).any(|s| at(s * 512, b"LABELONE") && at(s * 512 + 24, b"LVM2 001")) {
        out.push("an LVM2 physical volume label");
    }
    out
}

/// Reads the head of `file` and refuses it when it carries a signature.
pub fn check_no_signature(dev: &str, file: &File) -> Result<(), GuardError> {
    let head = read_head(file).map_err(|e| GuardError::InUse { dev: dev.to_string(), why: format!("cannot read its first bytes: {e}") })?;
    let found = signatures(&head);
    if found.is_empty() {
        Ok(())
    } else {
        Err(GuardError::Signature { dev: dev.to_string(), what: found.join(" and ") })
    }
}

/// The first [`PROBE_BYTES`] (fewer on a small device), read through an aligned buffer so
/// that it works on an O_DIRECT descriptor.
fn read_head(file: &File) -> std::io::Result<Vec<u8>> {
    let mut buf = crate::block::AlignedBuf::zeroed(PROBE_BYTES);
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && done > 0 => break,
            Err(e) => return Err(e),
        }
    }
    Ok(buf[..done].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head() -> Vec<u8> {
        vec![0u8; PROBE_BYTES]
    }

    #[test]
    fn blank_and_random_heads_carry_no_signature() {
        assert!(signatures(&head()).is_empty());
        let mut h = head();
        h[510] = 0x55;
        h[511] = 0xAA; // boot signature alone, no partition entry
        assert!(signatures(&h).is_empty());
    }

    #[test]
    fn each_known_signature_is_named() {
        let cases: Vec<(usize, &[u8], &str)> = vec![
            (512, b"EFI PART", "GPT"),
            (1080, &[0x53, 0xEF], "ext2/3/4"),
            (0, b"XFSB", "XFS"),
            (65600, b"_BHRfS_M", "btrfs"),
            (4086, b"SWAPSPACE2", "swap"),
            (0, b"LUKS\xba\xbe", "LUKS"),
        ];
        for (off, magic, name) in cases {
            let mut h = head();
            h[off..off + magic.len()].copy_from_slice(magic);
            let s = signatures(&h);
            assert!(s.iter().any(|x| x.contains(name)), "{name}: {s:?}");
        }
        let mut h = head();
        h[512..520].copy_from_slice(b"LABELONE");
        h[536..544].copy_from_slice(b"LVM2 001");
        assert_eq!(signatures(&h), vec!["an LVM2 physical volume label"]);
        let mut h = head();
        h[510] = 0x55;
        h[511] = 0xAA;
        h[446 + 4] = 0x83;
        h[446 + 12] = 0x10;
        assert_eq!(signatures(&h), vec!["an MBR partition table"]);
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
