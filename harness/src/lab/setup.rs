//! `faultline lab setup`: everything the lab boots, from Debian's archive, into a cache
//! directory, nothing installed on the host.
//!
//! Steps, each with a stamp file holding the key it was built from (rerunning with the same
//! key does nothing):
//! 1. `packages`: `apt-get download` of QEMU (qemu-system-x86 and the packages it needs for
//!    firmware), the kernel `linux-image-amd64` points at, busybox-static and nvme-cli, plus
//!    every `Depends` of those that the host does not have installed, and theirs in turn (on a
//!    bookworm image: QEMU's libcapstone4, libfdt1, libslirp0, libvdeplug2, nvme-cli's
//!    libnvme1; on a fresh one also libpmem1's libndctl6 and libdaxctl1, ...), each
//!    `dpkg -x`'d into `root/`. Nothing is installed with dpkg or apt: bookworm's QEMU 7.2
//!    conflicts with the preinstalled qemu-utils 10, and extraction needs no root. QEMU then
//!    runs with `LD_LIBRARY_PATH` on the extracted libraries; `ldd` must find every one.
//! 2. `base.cpio`: busybox, the guest init, the NVMe, 9p and virtio modules (and, in
//!    `lib/modules/usb/`, the USB modules a board in the guest loads: [`USB_MODULES`]) with their
//!    dependencies (read from each module's `.modinfo` `depends=`: the kernel package ships no
//!    modules.dep, which its postinst would build with depmod), nvme-cli and its libraries.
//! 3. `vmlinux`: the kernel unpacked from its bzImage, which QEMU boots through the PVH
//!    entry point without the kernel's own decompressor (2.5-3 s of each boot under TCG;
//!    `vmlinux.rs`). Where that cannot be done the lab boots the bzImage and setup says why.
//! 4. `faultline.cpio`: the faultline binary (this one, unless `--faultline` names another)
//!    and its libraries, rebuilt when the binary changed. `initrd.cpio` is the two archives
//!    concatenated (the kernel unpacks them in turn).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::{Doing, IoStep};
use super::initramfs::{modules_in_load_order, Archive, ArchiveError};
use super::vmlinux;

/// Why the lab's cache could not be filled, or is not filled.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Io(#[from] IoStep),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("{cmd} failed ({status}): {stderr}")]
    Command { cmd: String, status: std::process::ExitStatus, stderr: String },
    #[error("apt has no candidate for package {0} (run `apt-get update` first; the lab needs Debian bookworm's archive)")]
    NoCandidate(String),
    #[error("apt-cache depends linux-image-amd64 names no linux-image-*-amd64 (run `apt-get update` first)")]
    NoKernelPackage,
    #[error("{0}: a path without a file name")]
    NoName(PathBuf),
    #[error("the lab's initramfs is not built in {0}: run `faultline lab setup` first")]
    NoInitramfs(PathBuf),
    #[error("the lab is not set up in {cache} (no {qemu}): run `faultline lab setup` first")]
    NotSetUp { cache: PathBuf, qemu: PathBuf },
    #[error("no kernel in {0}")]
    NoKernel(PathBuf),
    #[error("{bin} needs libraries that neither the host nor the lab cache has: {missing}")]
    MissingLibraries { bin: PathBuf, missing: String },
}

type Result<T, E = SetupError> = std::result::Result<T, E>;

/// The packages fetched by name (the kernel is added by [`kernel_package`]).
const PACKAGES: &[&str] =
    &["qemu-system-x86", "qemu-system-common", "qemu-system-data", "seabios", "ipxe-qemu", "busybox-static", "nvme-cli"];
/// Packages whose `Depends` are fetched too when the host lacks them.
const DEPENDS_OF: &[&str] = &["qemu-system-x86", "nvme-cli", "libnvme1"];
/// The modules the guest loads (their dependencies are added), in this order.
pub const MODULES: &[&str] =
    &["crct10dif_generic", "crc-t10dif", "t10-pi", "nvme-core", "nvme", "virtio_pci", "9pnet_virtio", "9p", "virtio_console"];
/// The modules a USB board in the guest needs (`lab guest usb`, loaded then, not at boot): the
/// dummy host and device controller pair, the gadget framework with its functions, and the
/// host-side class drivers that bind to the gadgets as to a board on a desk.
pub const USB_MODULES: &[&str] = &["dummy_hcd", "libcomposite", "usb_f_acm", "usb_f_fs", "cdc-acm", "ch341", "usbhid", "hid-generic"];
/// The guest's init script.
const INIT: &str = include_str!("init.sh");
const LIBDIR: &str = "lib/x86_64-linux-gnu";
/// The unpacked guest kernel in the cache (step 3).
const VMLINUX: &str = "vmlinux";

/// What `lab run` needs from the cache.
#[derive(Clone, Debug)]
pub struct Lab {
    pub qemu: PathBuf,
    pub firmware: PathBuf,
    pub lib_path: String,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().doing(|| format!("cannot run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(SetupError::Command { cmd: format!("{cmd:?}"), status: out.status, stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The candidate version apt offers for each package (one `apt-cache policy` for all), or
/// an error naming the first without one and saying to run `apt-get update`.
fn candidates(pkgs: &BTreeSet<String>) -> Result<BTreeMap<String, String>> {
    let out = run(Command::new("apt-cache").arg("policy").args(pkgs))?;
    let mut found = BTreeMap::new();
    let mut cur: Option<String> = None;
    for l in out.lines() {
        if !l.starts_with(' ') && l.ends_with(':') {
            cur = Some(l.trim_end_matches(':').to_string());
        } else if let (Some(p), Some(v)) = (&cur, l.trim().strip_prefix("Candidate:")) {
            let v = v.trim();
            if !v.is_empty() && v != "(none)" {
                found.insert(p.clone(), v.to_string());
            }
        }
    }
    if let Some(p) = pkgs.iter().find(|p| !found.contains_key(*p)) {
        return Err(SetupError::NoCandidate(p.clone()));
    }
    Ok(found)
}

/// The `Depends` of each package (one `apt-cache depends` for all), without virtual ones.
fn depends(pkgs: &[&str]) -> Result<Vec<String>> {
    let out = run(Command::new("apt-cache").arg("depends").args(pkgs))?;
    Ok(out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .filter(|p| !p.starts_with('<'))
        .map(str::to_string)
        .collect())
}

/// What `roots` need that the host lacks: their `Depends` the host has not installed, and
/// theirs in turn (a fresh bookworm image lacks QEMU's libpmem1 and libibverbs1, and with them
/// libndctl6, libdaxctl1, libnl-3-200 and libnl-route-3-200, which QEMU's `ldd` then misses).
fn missing_depends(roots: &[&str]) -> Result<BTreeSet<String>> {
    let mut missing = BTreeSet::new();
    let mut frontier: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while !frontier.is_empty() {
        let of: Vec<&str> = frontier.iter().map(String::as_str).collect();
        frontier = not_installed(depends(&of)?).into_iter().filter(|p| missing.insert(p.clone())).collect();
    }
    Ok(missing)
}

/// The kernel image package `linux-image-amd64` depends on (`linux-image-6.1.0-N-amd64`).
fn kernel_package() -> Result<String> {
    depends(&["linux-image-amd64"])?
        .into_iter()
        .find(|p| p.starts_with("linux-image-") && p.ends_with("-amd64"))
        .ok_or(SetupError::NoKernelPackage)
}

/// Those of `pkgs` that are not installed on the host (one `dpkg-query` for all).
fn not_installed(pkgs: Vec<String>) -> Vec<String> {
    let out = Command::new("dpkg-query").args(["-W", "-f", "${Package} ${db:Status-Status}\n"]).args(&pkgs).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let have: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_suffix(" installed")).map(|p| p.split(':').next().unwrap_or(p)).collect();
    pkgs.into_iter().filter(|p| !have.contains(p.as_str())).collect()
}

fn stamp_ok(cache: &Path, step: &str, key: &str) -> bool {
    std::fs::read_to_string(cache.join(format!("stamp.{step}"))).is_ok_and(|s| s == key)
}

fn write_stamp(cache: &Path, step: &str, key: &str) -> Result<()> {
    let p = cache.join(format!("stamp.{step}"));
    std::fs::write(&p, key).doing(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

/// What one step did, for the summary line.
#[derive(Debug, Default)]
pub struct Report {
    pub steps: Vec<(String, bool)>,
    /// What setup could not do and what the lab does instead.
    pub notes: Vec<String>,
}

/// Puts `modules` into `dir` of the archive, with `dir/load-order` naming them in order (what
/// the guest's init, or `lab guest usb`, insmods).
fn add_modules(a: &mut Archive, dir: &str, modules: &[PathBuf]) -> Result<()> {
    let mut order = String::new();
    a.dir(dir)?;
    for m in modules {
        let name = m.file_name().and_then(|n| n.to_str()).ok_or_else(|| SetupError::NoName(m.clone()))?;
        a.file(&format!("{dir}/{name}"), m, 0o644)?;
        order.push_str(name);
        order.push('\n');
    }
    a.bytes(&format!("{dir}/load-order"), order.as_bytes(), 0o644)?;
    Ok(())
}

/// Runs the steps; `faultline_bin` is the binary to put in the guest.
pub fn setup(cache: &Path, faultline_bin: &Path, report: &mut Report) -> Result<Lab> {
    std::fs::create_dir_all(cache).doing(|| format!("cannot create the lab cache {}", cache.display()))?;
    let cache = &std::fs::canonicalize(cache).doing(|| format!("cannot resolve {}", cache.display()))?;
    let key = packages(cache, report)?;
    let lab = locate(cache)?;
    check_ldd(&lab.qemu, &lab.lib_path)?;
    let root = cache.join("root");
    let kver = kernel_version(&root)?;
    base_archive(cache, &lab, &key, &kver, report)?;
    unpack_kernel(cache, &root, &kver, report)?;
    let lab = locate(cache)?;
    let fresh = refresh_faultline(cache, &lab, faultline_bin)?;
    report.steps.push((format!("faultline ({})", faultline_bin.display()), fresh));
    Ok(lab)
}

/// Step 1: the packages, downloaded and extracted into `root/` when their versions changed.
/// Returns the key they were fetched by (each package's version).
fn packages(cache: &Path, report: &mut Report) -> Result<String> {
    let mut names: BTreeSet<String> = PACKAGES.iter().map(|s| s.to_string()).collect();
    names.insert(kernel_package()?);
    names.extend(missing_depends(DEPENDS_OF)?);
    let versions = candidates(&names)?;
    let key: String = versions.iter().map(|(n, v)| format!("{n}={v}\n")).collect();
    let root = cache.join("root");
    let fresh = !stamp_ok(cache, "packages", &key);
    if fresh {
        let debs = cache.join("debs");
        let _ = std::fs::remove_dir_all(&debs);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&debs).doing(|| format!("cannot create {}", debs.display()))?;
        let pins: Vec<String> = versions.iter().map(|(n, v)| format!("{n}={v}")).collect();
        run(Command::new("apt-get").arg("download").arg("-q").args(&pins).current_dir(&debs))?;
        let reading = || format!("cannot read {}", debs.display());
        for e in std::fs::read_dir(&debs).doing(reading)? {
            let deb = e.doing(reading)?.path();
            run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
        }
        write_stamp(cache, "packages", &key)?;
    }
    report.steps.push(("packages".into(), fresh));
    Ok(key)
}

/// Step 2: `base.cpio` (busybox, the init, the modules, nvme-cli), rebuilt when what goes in
/// it changed.
fn base_archive(cache: &Path, lab: &Lab, key: &str, kver: &str, report: &mut Report) -> Result<()> {
    let root = cache.join("root");
    let moddir = root.join("lib/modules").join(kver);
    let modules = modules_in_load_order(&moddir, MODULES)?;
    let usb_modules: Vec<PathBuf> = modules_in_load_order(&moddir, USB_MODULES)?.into_iter().filter(|m| !modules.contains(m)).collect();
    let nvme = root.join("usr/sbin/nvme");
    let nvme_libs = ldd_libs(&nvme, &lab.lib_path)?;
    let busybox = root.join("bin/busybox");
    let mut h = blake3::Hasher::new();
    h.update(key.as_bytes()).update(INIT.as_bytes());
    for m in modules.iter().chain(&usb_modules) {
        h.update(m.as_os_str().as_encoded_bytes());
    }
    for l in &nvme_libs {
        h.update(l.as_os_str().as_encoded_bytes());
    }
    let base_key = h.finalize().to_hex().to_string();
    let base = cache.join("base.cpio");
    let fresh = !stamp_ok(cache, "base", &base_key) || !base.exists();
    if fresh {
        let mut a = Archive::create(&base)?;
        for d in ["bin", "sbin", "dev", "proc", "sys", "tmp", "share", "etc", "lib", "lib64", "usr", "usr/sbin", LIBDIR, "run"] {
            a.dir(d)?;
        }
        a.file("bin/busybox", &busybox, 0o755)?;
        a.bytes("init", INIT.as_bytes(), 0o755)?;
        a.file("usr/sbin/nvme", &nvme, 0o755)?;
        add_libs(&mut a, &nvme_libs)?;
        add_modules(&mut a, "lib/modules", &modules)?;
        add_modules(&mut a, "lib/modules/usb", &usb_modules)?;
        a.finish()?;
        write_stamp(cache, "base", &base_key)?;
    }
    report.steps.push(("initramfs (busybox, modules, nvme-cli)".into(), fresh));
    Ok(())
}

/// Step 3: the kernel unpacked, for QEMU's PVH boot (`vmlinux.rs`); the bzImage otherwise, and
/// a note saying why.
fn unpack_kernel(cache: &Path, root: &Path, kver: &str, report: &mut Report) -> Result<()> {
    let vmlinuz = root.join(format!("boot/vmlinuz-{kver}"));
    let kernel_key =
        format!("{}\n{kver}", blake3::hash(&std::fs::read(&vmlinuz).doing(|| format!("cannot read {}", vmlinuz.display()))?).to_hex());
    // Only a kernel unpacked whole is stamped, so a setup after a failed one tries again
    // (and says so again).
    let fresh = !stamp_ok(cache, "kernel", &kernel_key) || !cache.join(VMLINUX).exists();
    if fresh {
        let _ = std::fs::remove_file(cache.join(VMLINUX));
        let _ = std::fs::remove_file(cache.join("stamp.kernel"));
        match vmlinux::unpack(&vmlinuz, &cache.join(VMLINUX)) {
            Ok(()) => write_stamp(cache, "kernel", &kernel_key)?,
            Err(e) => report.notes.push(format!(
                "the guest boots the compressed kernel (its decompressor takes seconds under TCG): {}",
                super::error::chain(&e)
            )),
        }
    }
    report.steps.push(("kernel unpacked for a direct boot".into(), fresh));
    Ok(())
}

/// Step 4: puts `faultline_bin` and its libraries into the initrd when it changed since
/// the last time (or the base archive did). True when it rebuilt the initrd.
pub fn refresh_faultline(cache: &Path, lab: &Lab, faultline_bin: &Path) -> Result<bool> {
    let base = cache.join("base.cpio");
    let base_key = std::fs::read_to_string(cache.join("stamp.base"))
        .ok()
        .filter(|_| base.exists())
        .ok_or_else(|| SetupError::NoInitramfs(cache.to_path_buf()))?;
    let bin = std::fs::read(faultline_bin).doing(|| format!("cannot read the faultline binary {}", faultline_bin.display()))?;
    let fl_key = format!("{}\n{base_key}", blake3::hash(&bin).to_hex());
    if stamp_ok(cache, "faultline", &fl_key) && lab.initrd.exists() {
        return Ok(false);
    }
    let fl_libs = ldd_libs(faultline_bin, &lab.lib_path)?;
    // Names of this process's own: two `lab host`s (two guests of one run) may refresh at once.
    let part = cache.join(format!("faultline.cpio.{}", std::process::id()));
    let mut a = Archive::create(&part)?;
    a.dir("usr")?;
    a.dir("usr/bin")?;
    a.bytes("usr/bin/faultline", &bin, 0o755)?;
    add_libs(&mut a, &fl_libs)?;
    a.finish()?;
    let tmp = cache.join(format!("initrd.cpio.tmp.{}", std::process::id()));
    let writing = || format!("cannot write {}", tmp.display());
    let mut out = std::fs::File::create(&tmp).doing(writing)?;
    for p in [&base, &part] {
        std::fs::File::open(p)
            .and_then(|mut f| std::io::copy(&mut f, &mut out))
            .doing(|| format!("cannot copy {} into {}", p.display(), tmp.display()))?;
    }
    out.sync_all().doing(writing)?;
    std::fs::rename(&tmp, &lab.initrd).doing(|| format!("cannot rename {} to {}", tmp.display(), lab.initrd.display()))?;
    std::fs::rename(&part, cache.join("faultline.cpio")).doing(|| format!("cannot rename {}", part.display()))?;
    write_stamp(cache, "faultline", &fl_key)?;
    Ok(true)
}

/// The paths of a cache that `setup` filled; an error naming what is missing otherwise.
pub fn locate(cache: &Path) -> Result<Lab> {
    let root = cache.join("root");
    let qemu = root.join("usr/bin/qemu-system-x86_64");
    if !qemu.exists() {
        return Err(SetupError::NotSetUp { cache: cache.to_path_buf(), qemu });
    }
    let kver = kernel_version(&root)?;
    let lib_path = [format!("{}/usr/{LIBDIR}", root.display()), format!("{}/{LIBDIR}", root.display())].join(":");
    // The unpacked kernel, when setup made one from this cache's bzImage (its stamp names
    // the bzImage's hash and version; a failed unpack leaves neither file nor stamp).
    let unpacked = cache.join(VMLINUX);
    let fresh_unpack = std::fs::read_to_string(cache.join("stamp.kernel")).is_ok_and(|k| k.ends_with(&format!("\n{kver}")));
    Ok(Lab {
        qemu,
        firmware: root.join("usr/share/qemu"),
        lib_path,
        kernel: if fresh_unpack && unpacked.exists() { unpacked } else { root.join(format!("boot/vmlinuz-{kver}")) },
        initrd: cache.join("initrd.cpio"),
    })
}

fn kernel_version(root: &Path) -> Result<String> {
    let dir = root.join("lib/modules");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .doing(|| format!("no kernel modules in {}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    v.sort();
    v.pop().ok_or(SetupError::NoKernel(dir))
}

/// `ldd` of `bin` with the cache's libraries on the path: every library it loads (and the
/// interpreter); an error naming the ones not found.
pub fn ldd_libs(bin: &Path, lib_path: &str) -> Result<Vec<PathBuf>> {
    let out = run(Command::new("ldd").arg(bin).env("LD_LIBRARY_PATH", lib_path))?;
    let missing: Vec<&str> = out.lines().filter(|l| l.contains("not found")).map(str::trim).collect();
    if !missing.is_empty() {
        return Err(SetupError::MissingLibraries { bin: bin.to_path_buf(), missing: missing.join(", ") });
    }
    let mut libs = Vec::new();
    for l in out.lines() {
        let l = l.trim();
        let path = match l.split_once("=>") {
            Some((_, rhs)) => rhs.trim(),
            None => l,
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

fn check_ldd(bin: &Path, lib_path: &str) -> Result<()> {
    ldd_libs(bin, lib_path).map(|_| ())
}

/// Libraries go to `/lib/x86_64-linux-gnu/NAME` (the guest's init puts it on the loader's
/// path), the interpreter where the binaries expect it.
fn add_libs(a: &mut Archive, libs: &[PathBuf]) -> Result<()> {
    for l in libs {
        let name = l.file_name().and_then(|n| n.to_str()).ok_or_else(|| SetupError::NoName(l.clone()))?;
        let dest = if name.starts_with("ld-linux") { format!("lib64/{name}") } else { format!("{LIBDIR}/{name}") };
        a.file_once(&dest, l, 0o755)?;
    }
    Ok(())
}
