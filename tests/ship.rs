//! What a lab copies onto its hosts, and the container image, run as a user would.
//!
//! The static binary is built by the README's one command,
//! `cargo build --profile dist --target x86_64-unknown-linux-musl`, with the profile's
//! optimisation off (`CARGO_PROFILE_DIST_OPT_LEVEL=0`: nothing checked here rests on the
//! optimiser, and it makes the build a fifth of the optimised one's CPU), into a target directory
//! of its own beside the lab's cache (`~/.cache/faultline/ship-target`, or
//! `$FAULTLINE_SHIP_TARGET`): it never waits on the lock of the build running these tests, and
//! a later run rebuilds only what changed, as cargo does (a cold build is under a minute of both
//! cores here). The binary is copied to where the README's command leaves it,
//! `target/x86_64-unknown-linux-musl/dist/faultline`, for the image. It is checked for what
//! "static" promises (no program interpreter, no shared library named) and run: the demo, `controller list` (libusb built with musl), and a
//! write and verify of a file through its io_uring engine. The image is built from the
//! repository's `Containerfile` with buildah (Debian's package, installed by `.ci/run`), on a
//! Debian minbase root made by debootstrap (CI reaches package registries, not image
//! registries), and the demo and nvme-cli run in it.
//!
//! Each test prints SKIP with the reason where its tools cannot be had: the musl target
//! (`rustup target add x86_64-unknown-linux-musl`), musl-gcc (Debian's musl-tools), buildah,
//! debootstrap, root.

use crate::common::{scratch, skip, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const MUSL: &str = "x86_64-unknown-linux-musl";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// faultline's cache root: where `.ci/run` keeps the lab (`$FAULTLINE_LAB_CACHE/..`), else
/// `~/.cache/faultline`.
fn cache_root() -> PathBuf {
    std::env::var_os("FAULTLINE_LAB_CACHE")
        .map(PathBuf::from)
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/faultline"))
}

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

/// The static binary, built once for every test here; Err is the reason to skip.
fn static_binary() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build_static).clone()
}

fn build_static() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output().map_err(|e| format!("{rustc}: {e}"))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if !sysroot.join("lib/rustlib").join(MUSL).is_dir() {
        return Err(format!("the {MUSL} target is not installed in {} (rustup target add {MUSL})", sysroot.display()));
    }
    if !have("musl-gcc") {
        return Err("no musl-gcc, which builds the C the crates vendor (apt-get install musl-tools)".into());
    }
    let target_dir = std::env::var_os("FAULTLINE_SHIP_TARGET").map_or_else(|| cache_root().join("ship-target"), PathBuf::from);
    let o = Command::new(&cargo)
        .args(["build", "--profile", "dist", "--target", MUSL, "-p", "faultline", "--bin", "faultline"])
        .current_dir(repo())
        .env("CARGO_TARGET_DIR", &target_dir)
        // Unoptimised: what is checked here (no interpreter, no shared library, libusb built
        // by musl-gcc, the demo, the io_uring engine) does not rest on the optimiser, and the
        // optimised build of the changed crates took 100 s of both cores in the suite, this one
        // 21 s (measured on 2 cores after a change to each workspace crate).
        .env("CARGO_PROFILE_DIST_OPT_LEVEL", "0")
        .output()
        .map_err(|e| format!("{cargo}: {e}"))?;
    // The tools are there, so a failed build is this test's failure, not a skip.
    assert!(o.status.success(), "the static build failed:\n{}", text(&o));
    let built = target_dir.join(MUSL).join("dist/faultline");
    let documented = repo().join("target").join(MUSL).join("dist/faultline");
    std::fs::create_dir_all(documented.parent().unwrap()).unwrap();
    std::fs::copy(&built, &documented).unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", built.display(), documented.display()));
    Ok(documented)
}

/// The ELF file's program headers: (type, offset, file size) of each.
fn program_headers(elf: &[u8]) -> Vec<(u32, u64, u64)> {
    assert!(elf.len() > 64 && &elf[..4] == b"\x7fELF" && elf[4] == 2 && elf[5] == 1, "not a 64-bit little-endian ELF file");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap());
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36) as usize, u16_at(0x38) as usize);
    (0..phnum).map(|i| phoff + i * phentsize).map(|h| (u32_at(h), u64_at(h + 8), u64_at(h + 32))).collect()
}

/// The shared libraries the dynamic section names (DT_NEEDED entries).
fn needed(elf: &[u8]) -> usize {
    const PT_DYNAMIC: u32 = 2;
    const DT_NEEDED: u64 = 1;
    let Some(&(_, off, size)) = program_headers(elf).iter().find(|h| h.0 == PT_DYNAMIC) else { return 0 };
    let dynamic = &elf[off as usize..(off + size) as usize];
    dynamic.chunks_exact(16).filter(|e| u64::from_le_bytes(e[..8].try_into().unwrap()) == DT_NEEDED).count()
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
}

#[test]
fn the_static_binary_needs_no_library_and_runs_the_demo() {
    let _busy = crate::common::shared(); // a release build
    let bin = match static_binary() {
        Ok(b) => b,
        Err(why) => return skip("the_static_binary_needs_no_library_and_runs_the_demo", &why),
    };
    let elf = std::fs::read(&bin).unwrap();
    const PT_INTERP: u32 = 3;
    assert!(!program_headers(&elf).iter().any(|h| h.0 == PT_INTERP), "{} asks for a program interpreter", bin.display());
    assert_eq!(needed(&elf), 0, "{} names shared libraries", bin.display());
    eprintln!("static binary: {} bytes", elf.len());
    let o = run(&bin, &["--version"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), format!("faultline {}", env!("CARGO_PKG_VERSION")));
    let d = scratch("static");
    // The demo (the Quarch emulator on a pty, the real serial driver): the drive that rolls
    // back its newest write is caught, the honest one passes.
    let o = run(&bin, &["run", "--cycles", "20", "--seed", "7", "--run-dir", d.join("demo").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "seed 7\n{}", text(&o));
    assert!(text(&o).contains("lost_write"), "seed 7\n{}", text(&o));
    let o = run(&bin, &["run", "--cycles", "20", "--seed", "7", "--model", "honest-plp", "--run-dir", d.join("honest").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "seed 7\n{}", text(&o));
    // libusb, built by musl-gcc, starts or says why it cannot; the serial ports are listed.
    let o = run(&bin, &["controller", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("serial ports:") && text(&o).contains("USB controllers:"), "{}", text(&o));
    // The io_uring engine: a file written and verified.
    let img = d.join("t.img");
    std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
    let (img, rd) = (img.to_str().unwrap(), d.join("run"));
    let o = run(&bin, &["write", "--target", img, "--run-dir", rd.to_str().unwrap(), "--seed", "3", "--writes", "2000", "--prefill"]);
    assert_eq!(o.status.code(), Some(0), "seed 3\n{}", text(&o));
    let o = run(&bin, &["verify", "--target", img, "--run-dir", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "seed 3\n{}", text(&o));
}

/// Runs a tool to success; its stdout, trimmed.
fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(o.status.success(), "{cmd} {args:?}\n{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Err (the reason to skip) where buildah cannot make a container, or cannot run a command
/// in one of `image` (its chroot isolation, the one that needs no cgroups or user namespaces).
fn runs_here(image: &str) -> Result<(), String> {
    let o = Command::new("buildah").args(["from", image]).output().map_err(|e| format!("buildah: {e}"))?;
    if !o.status.success() {
        return Err(format!("buildah cannot make a container here: {}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    let ctr = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let run = Command::new("buildah").args(["run", "--isolation", "chroot", &ctr, "--", "/bin/true"]).output();
    let _ = Command::new("buildah").args(["rm", &ctr]).output();
    match run {
        Ok(r) if r.status.success() => Ok(()),
        Ok(r) => Err(format!("buildah cannot run a command in a container here: {}", String::from_utf8_lossy(&r.stderr).trim())),
        Err(e) => Err(format!("buildah: {e}")),
    }
}

/// A Debian minbase root as an image, made once per machine (debootstrap from Debian's
/// archive, cached beside the lab's cache) and imported into buildah's store.
fn base_image() -> Result<String, String> {
    const NAME: &str = "localhost/faultline-test-base:bookworm";
    if Command::new("buildah").args(["inspect", "--type", "image", NAME]).output().is_ok_and(|o| o.status.success()) {
        runs_here(NAME)?;
        return Ok(NAME.into());
    }
    // buildah can at least make an empty container here, or nothing below can work.
    let o = Command::new("buildah").args(["from", "scratch"]).output().map_err(|e| format!("buildah: {e}"))?;
    if !o.status.success() {
        return Err(format!("buildah cannot make a container here: {}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    let _ = Command::new("buildah").args(["rm", String::from_utf8_lossy(&o.stdout).trim()]).output();
    if !have("debootstrap") {
        return Err("no debootstrap to make the image's base (apt-get install debootstrap)".into());
    }
    let tar = cache_root().join("image-base/bookworm-minbase.tar");
    if !tar.exists() {
        let root = cache_root().join("image-base/root");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        sh("debootstrap", &["--variant=minbase", "bookworm", root.to_str().unwrap(), "http://deb.debian.org/debian"]);
        // Slimmed as debian:bookworm-slim is: no downloaded packages or lists, no docs, man
        // pages or locales, and dpkg told to leave them out of what is installed later.
        for d in ["var/cache/apt/archives", "var/lib/apt/lists"] {
            sh("find", &[root.join(d).to_str().unwrap(), "-type", "f", "-delete"]);
        }
        for d in ["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale"] {
            let _ = std::fs::remove_dir_all(root.join(d));
        }
        let excludes = "path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n\
                        path-exclude /usr/share/locale/*\n";
        std::fs::write(root.join("etc/dpkg/dpkg.cfg.d/slim"), excludes).unwrap();
        let part = tar.with_extension("tar.part");
        sh("tar", &["-C", root.to_str().unwrap(), "-cf", part.to_str().unwrap(), "."]);
        std::fs::rename(&part, &tar).unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }
    let ctr = sh("buildah", &["from", "scratch"]);
    sh("buildah", &["add", &ctr, tar.to_str().unwrap(), "/"]);
    sh("buildah", &["commit", "--rm", &ctr, NAME]);
    runs_here(NAME)?;
    Ok(NAME.into())
}

#[test]
fn the_container_image_builds_from_the_repository_and_runs_the_demo() {
    let _busy = crate::common::shared(); // a release build
    let test = "the_container_image_builds_from_the_repository_and_runs_the_demo";
    if !have("buildah") {
        return skip(test, "no buildah to build the image with (apt-get install buildah)");
    }
    if !is_root() {
        return skip(test, "buildah needs root here (its chroot isolation)");
    }
    let bin = match static_binary() {
        Ok(b) => b,
        Err(why) => return skip(test, &format!("no static binary to put in it: {why}")),
    };
    let base = match base_image() {
        Ok(b) => b,
        Err(why) => return skip(test, &why),
    };
    // The README's command, from the repository's root (the context, which .containerignore
    // cuts to the binary), on the local base.
    assert!(bin.starts_with(repo()), "{}", bin.display());
    let image = "localhost/faultline:ship-test";
    let o = Command::new("buildah")
        .args(["bud", "--isolation", "chroot", "--build-arg", &format!("BASE={base}"), "-f", "Containerfile", "-t", image, "."])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "buildah bud\n{}", text(&o));
    let size = sh("buildah", &["images", "--format", "{{.Size}}", image]);
    eprintln!("image {image}: {size}");
    let ctr = sh("buildah", &["from", image]);
    let in_image = |args: &[&str]| Command::new("buildah").args(["run", "--isolation", "chroot", &ctr, "--"]).args(args).output().unwrap();
    let o = in_image(&["faultline", "run", "--cycles", "10", "--seed", "5", "--run-dir", "/var/lib/faultline/demo"]);
    let nvme = in_image(&["nvme", "version"]);
    let _ = Command::new("buildah").args(["rm", &ctr]).output();
    let _ = Command::new("buildah").args(["rmi", image]).output();
    assert_eq!(o.status.code(), Some(1), "the demo in the image, seed 5\n{}", text(&o));
    assert!(text(&o).contains("lost_write"), "seed 5\n{}", text(&o));
    assert!(nvme.status.success() && text(&nvme).contains("nvme version"), "nvme-cli in the image\n{}", text(&nvme));
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
