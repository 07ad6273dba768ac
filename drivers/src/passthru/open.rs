//! Finding the namespace a passthrough target reaches, and opening it: a controller's
//! character device (`/dev/nvme1`, its one namespace) or a namespace's generic device
//! (`/dev/ng0n2`), the safety guards on the namespace's block device, and what Identify says
//! the engine must carry (zeroing, metadata and protection information).

use super::{zeroing_from_identify, Metadata, PassthruTarget, MAX_BLOCKS_PER_COMMAND};
use crate::block::{Geometry, TargetError, ZeroingSupport};
use crate::blockdev::{identify_sysfs, DeviceIdentity, Expectation, SysRoots};
use crate::guard::{check_no_signature, check_not_in_use, GuardError};
use crate::identity::{read_trim, PathId};
use crate::nvme::NvmeAdmin;
use crate::open::{Engine, OpenError, OpenSpec, Opened};
use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The page the kernel maps a buffer by (the smallest Linux has).
const PAGE: u64 = 4096;

/// The one namespace a controller serves, as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerNamespace {
    /// The controller (`nvme1`).
    pub controller: String,
    /// The namespace's sysfs directory under the controller (`.../nvme1/nvme1n1` or
    /// `.../nvme1/nvme0c1n1`).
    pub dir: PathBuf,
    pub nsid: u32,
    /// The namespace's block device node, if it has one: the node itself, or the multipath
    /// head for a hidden per-path node.
    pub block_dev: Option<PathBuf>,
    pub geometry: Geometry,
    /// The most bytes one command may carry (`queue/max_hw_sectors_kb`, at most a page per
    /// segment of `queue/max_segments` and [`MAX_BLOCKS_PER_COMMAND`] blocks).
    pub max_transfer: u64,
    /// What the block device path of the same namespace would record (serial, model, WWID).
    pub identity: DeviceIdentity,
    /// Which controller this is (name, `cntlid`, PCI address), to find it again after a
    /// re-enumeration.
    pub path: PathId,
    /// The namespace's metadata and protection information, from Identify when the engine
    /// opens ([`identify_format`]); sysfs alone does not say (`None`).
    pub metadata: Option<Metadata>,
}

/// `nvme<a>n<b>` or `nvme<a>c<b>n<c>`: a namespace (or a per-path node of one). Returns the
/// name of its block device: itself, or the multipath head `nvme<a>n<c>`.
fn namespace_block_name(name: &str) -> Option<String> {
    let num = |s: &str| -> Option<usize> {
        let n = s.bytes().take_while(u8::is_ascii_digit).count();
        (n > 0).then_some(n)
    };
    let r = name.strip_prefix("nvme")?;
    let a = num(r)?;
    let (subsys, r) = r.split_at(a);
    let r = if let Some(c) = r.strip_prefix('c') { &c[num(c)?..] } else { r };
    let ns = r.strip_prefix('n')?;
    (num(ns)? == ns.len()).then(|| format!("nvme{subsys}n{ns}"))
}

pub(super) fn unsupported(path: &Path, reason: String) -> TargetError {
    TargetError::Unsupported { path: path.display().to_string(), reason }
}

/// The namespace of controller `ctrl` (`nvme1`), refusing a controller with none or with more
/// than one (the kernel refuses `NVME_IOCTL_IO_CMD` there). `shown` names the target in errors.
pub fn controller_namespace(ctrl: &str, roots: &SysRoots, shown: &Path) -> Result<ControllerNamespace, TargetError> {
    let cdir = roots.sys.join("class/nvme").join(ctrl);
    let rd = std::fs::read_dir(&cdir)
        .map_err(|e| unsupported(shown, format!("is not an NVMe controller: cannot list {}: {e}", cdir.display())))?;
    let mut found: Vec<(String, String)> = rd
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            namespace_block_name(&n).map(|b| (n, b))
        })
        .collect();
    found.sort();
    let (name, block) = match &found[..] {
        [one] => one.clone(),
        [] => return Err(unsupported(shown, format!("controller {ctrl} has no namespace in {}", cdir.display()))),
        many => {
            let names: Vec<&str> = many.iter().map(|(n, _)| n.as_str()).collect();
            return Err(unsupported(
                shown,
                format!(
                    "controller {ctrl} has {} namespaces ({}): the kernel refuses NVMe I/O passthrough on a controller with more \
                     than one; target one namespace's generic device (/dev/ngXnY) or block device instead (with \
                     nvme_core.multipath=N each controller has its own of both)",
                    many.len(),
                    names.join(", ")
                ),
            ));
        }
    };
    let dir = cdir.join(&name);
    namespace_at(&dir, &block, (ctrl, Some(&cdir)), roots, shown)
}

/// The namespace whose sysfs directory is `dir` (a node under a controller, or a block
/// device's own) and whose block device is named `block`, reached through `via`: the device's
/// name and, for a controller, its sysfs directory (for its PCI address and `cntlid`).
fn namespace_at(
    dir: &Path,
    block: &str,
    via: (&str, Option<&Path>),
    roots: &SysRoots,
    shown: &Path,
) -> Result<ControllerNamespace, TargetError> {
    let (ctrl, cdir) = via;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let nsid = match read_trim(&dir.join("nsid")).parse::<u32>() {
        Ok(n) => n,
        Err(_) => name.rsplit('n').next().and_then(|n| n.parse().ok()).unwrap_or(1),
    };
    // A hidden per-path node may lack the queue attributes; its head has them.
    let head_dir = roots.sys.join("class/block").join(block);
    let attr = |rel: &str| {
        let v = read_trim(&dir.join(rel));
        if v.is_empty() {
            read_trim(&head_dir.join(rel))
        } else {
            v
        }
    };
    let lbs: u32 = attr("queue/logical_block_size").parse().unwrap_or(0);
    let sectors: u64 = attr("size").parse().unwrap_or(0);
    if lbs == 0 || sectors == 0 {
        return Err(unsupported(shown, format!("namespace {name} of {ctrl}: sysfs gives no size or logical block size")));
    }
    let pbs: u32 = attr("queue/physical_block_size").parse().unwrap_or(lbs);
    let hw_kb: u64 = attr("queue/max_hw_sectors_kb").parse().unwrap_or(128);
    // The kernel maps a command's buffer page by page, one segment each where pages are not
    // physically adjacent, and refuses (EINVAL) a request of more segments than the queue
    // takes: 128 pages of a 512 KiB command, with 127 segments allowed, failed that way in the
    // lab now and then. A page less than the segments, for a buffer that starts mid-page.
    let segments: u64 = attr("queue/max_segments").parse().unwrap_or(0);
    let by_segments = if segments > 1 { (segments - 1) * PAGE } else { u64::MAX };
    let max_transfer = (hw_kb * 1024).min(by_segments).min(u64::from(MAX_BLOCKS_PER_COMMAND) * u64::from(lbs)).max(u64::from(lbs));
    let max_transfer = max_transfer - max_transfer % u64::from(lbs);
    let capacity = sectors * 512;
    let mut identity = identify_sysfs(&std::fs::canonicalize(dir).unwrap_or(dir.to_path_buf()), capacity, lbs);
    if identity.wwid.is_empty() {
        identity.wwid = read_trim(&head_dir.join("wwid"));
    }
    let block_dev = Some(roots.dev.join(block)).filter(|p| p.exists());
    let at = |rel: &str| cdir.map(|c| read_trim(&c.join(rel))).unwrap_or_default();
    let (address, transport) = (at("address"), at("transport"));
    let path = PathId {
        device: ctrl.to_string(),
        controller: cdir.map(|_| ctrl.to_string()),
        cntlid: at("cntlid").parse().ok(),
        pci_address: (!address.is_empty() && (transport.is_empty() || transport == "pcie")).then_some(address),
    };
    Ok(ControllerNamespace {
        controller: ctrl.to_string(),
        dir: dir.to_path_buf(),
        nsid,
        block_dev,
        geometry: Geometry { logical_block_bytes: lbs, physical_block_bytes: pbs.max(lbs), capacity_bytes: capacity },
        max_transfer,
        identity,
        path,
        metadata: None,
    })
}

/// The namespace of generic character device `ng` (`ng0n2`, `class/nvme-generic`): one
/// namespace, whatever else its controller serves (the kernel takes `NVME_IOCTL_IO_CMD` on it
/// for that namespace), and the block device of the same name (`nvme0n2`: a controller's own
/// namespace, or with multipath the head, whose I/O the kernel sends down a live path).
pub fn generic_namespace(ng: &str, roots: &SysRoots, shown: &Path) -> Result<ControllerNamespace, TargetError> {
    let block = ng.strip_prefix("ng").map(|n| format!("nvme{n}")).filter(|b| namespace_block_name(b).as_deref() == Some(b.as_str()));
    let Some(block) = block else {
        return Err(unsupported(shown, format!("{ng} is not a namespace's generic device (ngXnY)")));
    };
    let dir = roots.sys.join("class/block").join(&block);
    if !dir.exists() {
        return Err(unsupported(shown, format!("{ng} has no block device {block} in {}", dir.parent().unwrap_or(&dir).display())));
    }
    namespace_at(&dir, &block, (ng, None), roots, shown)
}

/// The controller `want` selects (by `cntlid`, else PCI address, else name; see [`PathId`])
/// whose one namespace matches `expect` (every field given; an empty expectation matches
/// any): after a remove and rescan `nvme1` may be back as `nvme2`. `Ok(None)`: none (yet);
/// `Err`: several, named.
pub fn find_controller(expect: &Expectation, want: &PathId, roots: &SysRoots) -> Result<Option<PathBuf>, SeveralControllers> {
    let class = roots.sys.join("class/nvme");
    let Ok(rd) = std::fs::read_dir(&class) else { return Ok(None) };
    let mut names: Vec<String> = rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut hits = Vec::new();
    for n in names {
        let Ok(ns) = controller_namespace(&n, roots, &class.join(&n)) else { continue };
        if want.selects(&ns.path) && expect.mismatches(&ns.identity).is_empty() {
            hits.push(ns);
        }
    }
    match &hits[..] {
        [] => Ok(None),
        [one] => Ok(Some(roots.dev.join(&one.controller))),
        many => Err(SeveralControllers {
            want: want.to_string(),
            expect: expect.summary(),
            paths: many.iter().map(|m| m.path.to_string()).collect(),
        }),
    }
}

/// More than one controller is the one [`find_controller`] looks for: waiting will not tell
/// them apart.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} controllers are {want} and match {expect}: {}", .paths.len(), .paths.join("; "))]
pub struct SeveralControllers {
    /// The path selector looked for.
    pub want: String,
    /// The namespace's expectation, summarised.
    pub expect: String,
    /// Each controller's path.
    pub paths: Vec<String>,
}

/// Opens the controller at `path` (`/dev/nvme1`) as a target through its one namespace: the
/// namespace found in sysfs under `roots`, checked against `spec.expect`; when writable, its
/// block device (the node, or the multipath head) must not be in use and carry no signature
/// (unless allowed), and is held open exclusively while the engine runs.
pub fn open_controller_target(path: &Path, spec: &OpenSpec, roots: &SysRoots) -> Result<Opened, OpenError> {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let ctrl = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ns = controller_namespace(&ctrl, roots, path)?;
    open_namespace(path, ns, spec, roots)
}

/// Opens a namespace's generic character device (`/dev/ng0n2`) as a target, with the guards of
/// [`open_controller_target`] on its block device (`/dev/nvme0n2`).
pub fn open_generic_target(path: &Path, spec: &OpenSpec, roots: &SysRoots) -> Result<Opened, OpenError> {
    let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let ng = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let ns = generic_namespace(&ng, roots, path)?;
    open_namespace(path, ns, spec, roots)
}

fn open_namespace(path: &Path, mut ns: ControllerNamespace, spec: &OpenSpec, roots: &SysRoots) -> Result<Opened, OpenError> {
    let shown = path.display().to_string();
    let bad = spec.expect.mismatches(&ns.identity);
    if !bad.is_empty() {
        return Err(GuardError::Identity { dev: shown, why: bad.join("; ") }.into());
    }
    let hold = hold_block_device(path, &ns, spec, roots)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(spec.writable)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| TargetError::Open { path: shown.clone(), source })?;
    let mut notes = Vec::new();
    let (zeroing, metadata) = match identify_format(path, ns.nsid) {
        Ok(found) => found,
        Err(why) => {
            // Without Identify, only sysfs can say the namespace has metadata, which a command
            // without a metadata buffer would have the controller write to no buffer at all.
            if let Some(format) = integrity_format(&ns, roots) {
                return Err(unsupported(
                    path,
                    format!("namespace {} carries metadata (sysfs: integrity format {format}) and Identify failed: {why}", ns.nsid),
                )
                .into());
            }
            if spec.writable {
                notes.push(format!("{shown}: deallocate and write zeroes not carried: {why}"));
            }
            (ZeroingSupport::default(), Ok(None))
        }
    };
    let zeroing = if spec.writable { zeroing } else { ZeroingSupport::default() };
    ns.metadata = metadata.map_err(|why| unsupported(path, format!("namespace {}: {why}", ns.nsid)))?;
    let t = PassthruTarget::new(file, path, &ns, spec.queue_depth, spec.writable, hold, zeroing);
    let via =
        if ns.path.controller.is_some() { format!("controller {}", ns.controller) } else { format!("generic device {}", ns.controller) };
    notes.insert(
        0,
        format!(
            "{shown}: NVMe I/O passthrough to {via}, namespace {}: synchronous NVME_IOCTL_IO_CMD on {} threads \
         (one per queue slot), slower than a block device, and the kernel may log a warning per command",
            ns.nsid,
            t.threads()
        ),
    );
    if let Some(m) = ns.metadata {
        let pi = if m.pi.is_some() { ": faultline writes each block's tuple and checks it on every read" } else { "" };
        notes.push(format!("{shown}: namespace {}: {}{pi}", ns.nsid, m.describe()));
    }
    Ok(Opened { target: Box::new(t), engine: Engine::NvmePassthru, block_device: false, direct: true, notes })
}

/// The block integrity format sysfs shows for the namespace (`T10-DIF-TYPE1-CRC`, `nop` for
/// metadata without PI), where it has one: under its node, else under its block device.
fn integrity_format(ns: &ControllerNamespace, roots: &SysRoots) -> Option<String> {
    let block = ns.block_dev.as_ref().and_then(|b| b.file_name()).map(|b| roots.sys.join("class/block").join(b));
    [Some(ns.dir.clone()), block]
        .into_iter()
        .flatten()
        .map(|d| read_trim(&d.join("integrity/format")))
        .find(|f| !f.is_empty())
        .filter(|f| f != "none")
}

/// Where the target is writable: the namespace's block device, checked unused and blank
/// (unless allowed), opened exclusively to be held while the engine runs. A namespace without
/// a block device node is not written to.
fn hold_block_device(path: &Path, ns: &ControllerNamespace, spec: &OpenSpec, roots: &SysRoots) -> Result<Option<File>, OpenError> {
    if !spec.writable {
        return Ok(None);
    }
    let Some(b) = &ns.block_dev else {
        return Err(unsupported(
            path,
            format!(
                "namespace {} of {} has no block device node in {}: faultline does not write to a namespace it cannot check is unused",
                ns.nsid,
                ns.controller,
                roots.dev.display()
            ),
        )
        .into());
    };
    let bshown = b.display().to_string();
    let meta = std::fs::metadata(b).map_err(|source| TargetError::Open { path: bshown.clone(), source })?;
    if meta.file_type().is_block_device() {
        check_not_in_use(&bshown, meta.rdev())?;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | if meta.file_type().is_block_device() { libc::O_EXCL } else { 0 })
        .open(b)
        .map_err(|source| TargetError::Open { path: bshown.clone(), source })?;
    if !spec.allow_overwrite_signature {
        check_no_signature(&bshown, &f)?;
    }
    Ok(Some(f))
}

/// What Identify says of namespace `nsid` through `dev` (a controller, or a namespace's
/// generic device, whose admin commands the kernel sends to its controller): the zeroing the
/// controller carries, and the namespace's metadata, or why the engine cannot carry it.
/// `Err`: Identify itself failed.
type Format = (ZeroingSupport, Result<Option<Metadata>, String>);
fn identify_format(dev: &Path, nsid: u32) -> Result<Format, crate::nvme::NvmeError> {
    let admin = NvmeAdmin::open_controller(dev)?;
    let ctrl = admin.identify()?;
    let ns = admin.identify_namespace(nsid)?;
    let pif = if ctrl.extended_lba_formats() && ns.metadata_bytes > 0 && ns.dps & 0x07 != 0 {
        Some(admin.guard_format(nsid, ns.format_index())?)
    } else {
        None
    };
    Ok((zeroing_from_identify(&ctrl, &ns), Metadata::from_identify(&ns, pif)))
}
