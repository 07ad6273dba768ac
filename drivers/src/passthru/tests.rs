use super::*;
use crate::block::Zeroing;
use crate::blockdev::{DeviceIdentity, Expectation, SysRoots};
use crate::fake_root::FakeRoot;
use crate::identity::PathId;
use crate::open::{Engine, OpenSpec};
use crate::sys::NVME_IOCTL_IO_CMD;
use std::mem::offset_of;
use std::path::PathBuf;

#[test]
fn read_write_and_flush_are_encoded_as_the_nvm_command_set_says() {
    let w = rw_command(OPC_WRITE, 1, 0x0000_0001_2345_6789, 8, true);
    assert_eq!((w.opcode, w.nsid, w.cdw10, w.cdw11, w.cdw12), (0x01, 1, 0x2345_6789, 0x1, 7 | 1 << 30));
    assert_eq!((w.cdw13, w.cdw14, w.cdw15, w.addr, w.data_len), (0, 0, 0, 0, 0), "set when sent");
    let r = rw_command(OPC_READ, 3, 4096, MAX_BLOCKS_PER_COMMAND, false);
    assert_eq!((r.opcode, r.nsid, r.cdw10, r.cdw11, r.cdw12), (0x02, 3, 4096, 0, 0xFFFF));
    let f = flush_command(2);
    assert_eq!((f.opcode, f.nsid, f.cdw10, f.cdw12), (0x00, 2, 0, 0));
}

/// The struct and request number against the kernel's own uapi header, compiled by the system
/// C compiler (Debian: `linux-libc-dev`, installed by `.ci/run` when missing).
#[test]
fn the_passthru_struct_and_request_number_match_the_kernel_uapi_header() {
    let header = Path::new("/usr/include/linux/nvme_ioctl.h");
    let cc = ["cc", "gcc", "clang"].into_iter().find(|c| std::process::Command::new(c).arg("--version").output().is_ok());
    let (Some(cc), true) = (cc, header.exists()) else {
        // Written to the process's stderr, which libtest does not capture, so it is seen.
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "SKIP: no C compiler or no {} (package linux-libc-dev)", header.display());
        return;
    };
    let root = FakeRoot::new("uapi");
    let src = root.file(
        "probe.c",
        r#"#include <stdio.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <linux/nvme_ioctl.h>
#define F(f) printf("%zu ", offsetof(struct nvme_passthru_cmd, f))
int main(void) {
    printf("%zu %lu ", sizeof(struct nvme_passthru_cmd), (unsigned long)NVME_IOCTL_IO_CMD);
    F(opcode); F(flags); F(nsid); F(cdw2); F(metadata); F(addr); F(metadata_len); F(data_len);
    F(cdw10); F(cdw11); F(cdw12); F(cdw13); F(cdw14); F(cdw15); F(timeout_ms); F(result);
    return 0;
}
"#,
    );
    let exe = root.0.join("probe");
    let built = std::process::Command::new(cc).arg(&src).arg("-o").arg(&exe).output().unwrap();
    assert!(built.status.success(), "{cc}: {}", String::from_utf8_lossy(&built.stderr));
    let out = std::process::Command::new(&exe).output().unwrap();
    let got: Vec<u64> = String::from_utf8(out.stdout).unwrap().split_whitespace().map(|v| v.parse().unwrap()).collect();
    type C = NvmeAdminCmd;
    let ours = [
        size_of::<C>(),
        NVME_IOCTL_IO_CMD as usize,
        offset_of!(C, opcode),
        offset_of!(C, flags),
        offset_of!(C, nsid),
        offset_of!(C, cdw2),
        offset_of!(C, metadata),
        offset_of!(C, addr),
        offset_of!(C, metadata_len),
        offset_of!(C, data_len),
        offset_of!(C, cdw10),
        offset_of!(C, cdw11),
        offset_of!(C, cdw12),
        offset_of!(C, cdw13),
        offset_of!(C, cdw14),
        offset_of!(C, cdw15),
        offset_of!(C, timeout_ms),
        offset_of!(C, result),
    ];
    assert_eq!(got, ours.map(|v| v as u64), "size, request, then field offsets");
    assert_eq!(NVME_IOCTL_IO_CMD, 0xC048_4E43);
}

#[test]
fn deallocate_is_dataset_management_with_its_ranges_little_endian() {
    let cmds = deallocate_commands(1, 0x1_0000_0010, 8);
    assert_eq!(cmds.len(), 1);
    let (c, data) = &cmds[0];
    assert_eq!((c.opcode, c.nsid, c.cdw10, c.cdw11, c.cdw12), (0x09, 1, 0, 1 << 2, 0), "NR 0 (one range), AD set");
    assert_eq!(data, &[0, 0, 0, 0, 8, 0, 0, 0, 0x10, 0, 0, 0, 1, 0, 0, 0], "attributes, length, starting LBA");
    // Longer than a range holds: several ranges in one command, in order.
    let cmds = deallocate_commands(2, 100, 2 * MAX_RANGE_BLOCKS + 5);
    assert_eq!((cmds.len(), cmds[0].0.cdw10, cmds[0].1.len()), (1, 2, 48));
    let range = |d: &[u8], k: usize| {
        let r = &d[16 * k..16 * (k + 1)];
        (u32::from_le_bytes(r[4..8].try_into().unwrap()), u64::from_le_bytes(r[8..16].try_into().unwrap()))
    };
    let d = &cmds[0].1;
    assert_eq!(
        [range(d, 0), range(d, 1), range(d, 2)],
        [(u32::MAX, 100), (u32::MAX, 100 + MAX_RANGE_BLOCKS), (5, 100 + 2 * MAX_RANGE_BLOCKS)]
    );
    // More ranges than a command carries: a second command.
    let cmds = deallocate_commands(1, 0, (MAX_DSM_RANGES as u64 + 1) * MAX_RANGE_BLOCKS);
    assert_eq!(cmds.iter().map(|(c, d)| (c.cdw10, d.len())).collect::<Vec<_>>(), [(255, 4096), (0, 16)]);
    assert_eq!(range(&cmds[1].1, 0), (u32::MAX, MAX_DSM_RANGES as u64 * MAX_RANGE_BLOCKS));
}

#[test]
fn write_zeroes_writes_without_deallocating_in_commands_of_at_most_65536_blocks() {
    let cmds = write_zeroes_commands(2, 0x1_0000_0000, u64::from(MAX_BLOCKS_PER_COMMAND) + 1);
    let got: Vec<_> = cmds.iter().map(|c| (c.opcode, c.nsid, c.cdw10, c.cdw11, c.cdw12)).collect();
    assert_eq!(got, [(0x08, 2, 0, 1, 0xFFFF), (0x08, 2, 0x1_0000, 1, 0)]);
    assert!(cmds.iter().all(|c| c.cdw12 & (1 << 25 | 1 << 30) == 0), "DEAC and FUA clear");
    assert!(cmds.iter().all(|c| (c.addr, c.data_len, c.cdw13) == (0, 0, 0)));
    assert_eq!(write_zeroes_commands(1, 7, 1)[0].cdw12, 0, "NLB is 0's based");
}

#[test]
fn what_a_controller_carries_is_oncs_and_what_a_deallocated_block_reads_is_dlfeat() {
    use crate::block::DeallocReads;
    use crate::nvme::{ControllerIdentity, NamespaceIdentity};
    let ctrl = |oncs| ControllerIdentity {
        vendor_id: 0,
        serial: String::new(),
        model: String::new(),
        firmware: String::new(),
        lpa: 0,
        oncs,
        awun: 0,
        awupf: 0,
        ctratt: 0,
    };
    let ns = |dlfeat| NamespaceIdentity {
        block_bytes: 4096,
        metadata_bytes: 0,
        nsfeat: 0,
        flbas: 0,
        dps: 0,
        dlfeat,
        nawun: 0,
        nawupf: 0,
        nabsn: 0,
        nabo: 0,
        nabspf: 0,
    };
    let z = |oncs, dlfeat| {
        let s = zeroing_from_identify(&ctrl(oncs), &ns(dlfeat));
        (s.deallocate, s.write_zeroes, s.dealloc_reads)
    };
    assert_eq!(z(0x0C, 0x09), (true, true, DeallocReads::Zeros), "DSM and Write Zeroes; DLFEAT 001b (bit 3 aside)");
    assert_eq!(z(0x04, 0x02), (true, false, DeallocReads::Ones));
    assert_eq!(z(0x08, 0x00), (false, true, DeallocReads::Unreported));
    assert_eq!(z(0xF3, 0x07), (false, false, DeallocReads::Unreported), "other ONCS bits; a reserved DLFEAT");
}

/// Zeroing through the pool against `/dev/null` (ENOTTY from the kernel: the commands passed
/// the ioctl's own checks of their data), refused before the kernel when a range is bad or the
/// controller lacks the kind.
#[test]
fn the_pool_sends_zeroing_to_the_kernel_and_refuses_what_it_cannot_carry() {
    let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
    let only_dsm =
        ZeroingSupport { deallocate: true, write_zeroes: false, format: false, dealloc_reads: crate::block::DeallocReads::Zeros };
    let mut t = PassthruTarget::new(file, Path::new("/dev/null"), &namespace(512, 1 << 20, 4096), 8, true, None, only_dsm);
    assert_eq!(t.zeroing(), only_dsm);
    let ops = [
        (0, 4096, Zeroing::Deallocate),
        (100, 512, Zeroing::Deallocate),
        ((1 << 20) - 512, 1024, Zeroing::Deallocate),
        (0, 512, Zeroing::WriteZeroes),
    ];
    for (k, (offset, len, kind)) in ops.into_iter().enumerate() {
        t.submit(Op::Zero { token: k as u64, offset, len, kind, write_id: k as u64 }).unwrap();
    }
    let mut out = Vec::new();
    while out.len() < ops.len() {
        let more = ops.len() - out.len();
        assert!(t.reap(&mut out, more, Duration::from_secs(5)).unwrap() > 0);
    }
    out.sort_by_key(|c| c.token);
    let errno = |i: usize| out[i].result.as_ref().unwrap_err().errno;
    assert_eq!([errno(0), errno(1), errno(2), errno(3)], [libc::ENOTTY, libc::EINVAL, libc::EINVAL, libc::EOPNOTSUPP], "{out:?}");
    assert!(out[1].result.as_ref().unwrap_err().detail.contains("deallocate of 512 bytes at 100"), "{:?}", out[1].result);
    assert!(out[3].result.as_ref().unwrap_err().detail.contains("ONCS lacks Write Zeroes"), "{:?}", out[3].result);
    // Write Zeroes where carried: to the kernel too.
    let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
    let both = ZeroingSupport { write_zeroes: true, ..only_dsm };
    let mut t = PassthruTarget::new(file, Path::new("/dev/null"), &namespace(512, 1 << 20, 4096), 1, true, None, both);
    t.submit(Op::Zero { token: 9, offset: 512, len: 1024, kind: Zeroing::WriteZeroes, write_id: 9 }).unwrap();
    t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(out[4].result.as_ref().unwrap_err().errno, libc::ENOTTY, "{:?}", out[4].result);
    let file = std::fs::OpenOptions::new().read(true).open("/dev/null").unwrap();
    let ro = PassthruTarget::new(file, Path::new("/dev/null"), &namespace(512, 1 << 20, 4096), 1, false, None, only_dsm);
    assert_eq!(ro.zeroing(), ZeroingSupport::default(), "read-only carries nothing");
}

/// A controller directory with `name`'s namespaces: each `(dir name, nsid)`.
fn controller(root: &FakeRoot, pci: &str, ctrl: &str, cntlid: u16, namespaces: &[(&str, u32)]) {
    let c = format!("sys/devices/pci0000:00/{pci}/nvme/{ctrl}");
    for (k, v) in [("serial", "D1DUAL"), ("model", "ACME DUAL 7000"), ("address", pci), ("transport", "pcie")] {
        root.file(&format!("{c}/{k}"), &format!("{v}\n"));
    }
    root.file(&format!("{c}/cntlid"), &format!("{cntlid}\n"));
    for (ns, nsid) in namespaces {
        root.file(&format!("{c}/{ns}/nsid"), &format!("{nsid}\n"));
        root.file(&format!("{c}/{ns}/wwid"), "eui.6f1d3a2e000040008000000000000001\n");
        root.link(&format!("{c}/{ns}/device"), &c);
    }
    root.link(&format!("sys/class/nvme/{ctrl}"), &c);
    root.file(&format!("dev/{ctrl}"), "");
}

/// The multipath head (or a multipath=N namespace) `name` in class/block with its geometry.
fn disk(root: &FakeRoot, dir: &str, name: &str) {
    root.file(&format!("{dir}/size"), "2097152\n");
    root.file(&format!("{dir}/queue/logical_block_size"), "4096\n");
    root.file(&format!("{dir}/queue/physical_block_size"), "4096\n");
    root.file(&format!("{dir}/queue/max_hw_sectors_kb"), "256\n");
    root.file(&format!("{dir}/queue/max_segments"), "33\n");
    root.link(&format!("sys/class/block/{name}"), dir);
    root.file(&format!("dev/{name}"), "");
}

fn roots(root: &FakeRoot) -> SysRoots {
    SysRoots { sys: root.0.join("sys"), dev: root.0.join("dev") }
}

#[test]
fn a_controllers_one_namespace_is_found_with_and_without_multipath() {
    // multipath=N: nvme1n1 under nvme1, with its own block device.
    let root = FakeRoot::new("ptns");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[("nvme1n1", 1)]);
    disk(&root, "sys/devices/pci0000:00/0000:00:04.0/nvme/nvme1/nvme1n1", "nvme1n1");
    let ns = controller_namespace("nvme1", &roots(&root), Path::new("/dev/nvme1")).unwrap();
    assert_eq!((ns.nsid, ns.geometry.logical_block_bytes, ns.geometry.capacity_bytes), (1, 4096, 2097152 * 512));
    // 256 KiB the hardware takes, 33 segments of a page each, one kept for a buffer that
    // starts mid-page: 128 KiB.
    assert_eq!(ns.max_transfer, 32 * 4096);
    assert_eq!(ns.block_dev, Some(root.0.join("dev/nvme1n1")));
    assert_eq!((ns.identity.serial.as_str(), ns.identity.model.as_str()), ("D1DUAL", "ACME DUAL 7000"));
    assert_eq!((ns.path.cntlid, ns.path.pci_address.as_deref()), (Some(2), Some("0000:00:04.0")));
    // multipath on: the hidden per-path node nvme0c1n1 under nvme1, the head nvme0n1 elsewhere.
    let root = FakeRoot::new("ptmp");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[("nvme0c1n1", 1)]);
    disk(&root, "sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", "nvme0n1");
    let ns = controller_namespace("nvme1", &roots(&root), Path::new("/dev/nvme1")).unwrap();
    assert_eq!(ns.block_dev, Some(root.0.join("dev/nvme0n1")), "the head guards it");
    assert_eq!(ns.geometry.capacity_bytes, 2097152 * 512, "geometry from the head");
    assert!(ns.identity.stable().contains("serial=D1DUAL") && ns.identity.stable().contains("wwid=eui.6f1d"), "{}", ns.identity.stable());
}

#[test]
fn a_controller_with_two_namespaces_or_none_is_refused() {
    let root = FakeRoot::new("pt2");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[("nvme1n1", 1), ("nvme1n2", 2)]);
    let e = controller_namespace("nvme1", &roots(&root), Path::new("/dev/nvme1")).unwrap_err().to_string();
    assert!(e.contains("2 namespaces (nvme1n1, nvme1n2)") && e.contains("refuses NVMe I/O passthrough"), "{e}");
    let root = FakeRoot::new("pt0");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[]);
    let e = controller_namespace("nvme1", &roots(&root), Path::new("/dev/nvme1")).unwrap_err().to_string();
    assert!(e.contains("has no namespace"), "{e}");
    let e = controller_namespace("nvme7", &roots(&root), Path::new("/dev/nvme7")).unwrap_err().to_string();
    assert!(e.contains("not an NVMe controller"), "{e}");
}

#[test]
fn a_controller_is_found_again_by_cntlid_under_a_new_name() {
    let root = FakeRoot::new("ptfind");
    controller(&root, "0000:00:03.0", "nvme0", 1, &[("nvme0c0n1", 1)]);
    controller(&root, "0000:00:04.0", "nvme2", 2, &[("nvme0c2n1", 1)]);
    disk(&root, "sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", "nvme0n1");
    let r = roots(&root);
    let was = PathId { device: "nvme1".into(), controller: Some("nvme1".into()), cntlid: Some(2), pci_address: None };
    let serial = Expectation { serial: Some("D1DUAL".into()), ..Default::default() };
    assert_eq!(find_controller(&serial, &was, &r).unwrap(), Some(root.0.join("dev/nvme2")));
    let wrong = Expectation { serial: Some("OTHER".into()), ..Default::default() };
    assert_eq!(find_controller(&wrong, &was, &r).unwrap(), None, "the same cntlid on another drive is not it");
    let gone = PathId { cntlid: Some(9), ..Default::default() };
    assert_eq!(find_controller(&serial, &gone, &r).unwrap(), None);
    let by_name = PathId { controller: Some("nvme0".into()), ..Default::default() };
    assert_eq!(find_controller(&Expectation::default(), &by_name, &r).unwrap(), Some(root.0.join("dev/nvme0")));
}

fn namespace(lbs: u32, capacity: u64, max_transfer: u64) -> ControllerNamespace {
    ControllerNamespace {
        controller: "nvme9".into(),
        dir: PathBuf::new(),
        nsid: 1,
        block_dev: None,
        geometry: Geometry { logical_block_bytes: lbs, physical_block_bytes: lbs, capacity_bytes: capacity },
        max_transfer,
        identity: DeviceIdentity { serial: "S".into(), capacity_bytes: capacity, logical_block_bytes: lbs, ..Default::default() },
        path: PathId::default(),
        metadata: None,
    }
}

/// The pool, queue and completions for real, against a character device without the ioctl
/// (`/dev/null`: the kernel answers ENOTTY), the nearest to a controller this machine has.
#[test]
fn the_pool_runs_each_operation_through_the_kernel_and_reports_what_it_said() {
    let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
    let mut t = PassthruTarget::new(file, Path::new("/dev/null"), &namespace(512, 1 << 20, 4096), 4, true, None, ZeroingSupport::default());
    assert_eq!((t.threads(), t.queue_depth(), t.identity()), (4, 4, "block:serial=S size=1048576 lbs=512".to_string()));
    let buf = |n| AlignedBuf::zeroed(n);
    t.submit(Op::Write { token: 1, offset: 0, buf: buf(8192), fua: false, write_id: 1 }).unwrap();
    t.submit(Op::Write { token: 2, offset: 100, buf: buf(512), fua: false, write_id: 2 }).unwrap();
    t.submit(Op::Write { token: 3, offset: (1 << 20) - 512, buf: buf(1024), fua: true, write_id: 3 }).unwrap();
    t.submit(Op::Flush { token: 4 }).unwrap();
    let e = t.submit(Op::Flush { token: 5 }).unwrap_err().to_string();
    assert!(e.contains("queue full"), "{e}");
    let mut out = Vec::new();
    while out.len() < 4 {
        let more = 4 - out.len();
        assert!(t.reap(&mut out, more, Duration::from_secs(5)).unwrap() > 0, "every operation completes");
    }
    assert_eq!(t.in_flight(), 0);
    out.sort_by_key(|c| c.token);
    let errno = |i: usize| out[i].result.as_ref().unwrap_err().errno;
    assert_eq!(errno(0), libc::ENOTTY, "sent to the kernel: {:?}", out[0].result);
    assert!(out[0].buf.as_ref().is_some_and(|b| b.len() == 8192), "the buffer comes back");
    assert_eq!(errno(1), libc::EINVAL, "misaligned: refused before the ioctl");
    assert!(out[2].result.as_ref().unwrap_err().detail.contains("passes the end"), "{:?}", out[2].result);
    assert_eq!(errno(3), libc::ENOTTY, "the flush too");
    let mut b = vec![0u8; 512];
    assert_eq!(t.read_at(0, &mut b).unwrap_err().errno, libc::ENOTTY);
    // Nothing more in flight: reap returns at once.
    let t0 = Instant::now();
    assert_eq!(t.reap(&mut out, 1, Duration::from_secs(5)).unwrap(), 0);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn a_device_that_keeps_failing_with_eio_is_gone_and_nothing_more_is_sent() {
    let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
    let t = PassthruTarget::new(file, Path::new("/dev/null"), &namespace(512, 1 << 20, 4096), 1, true, None, ZeroingSupport::default());
    for _ in 0..EIO_GONE_AFTER {
        t.shared.note(&Err(IoFailure::new(libc::EIO, "x")));
    }
    let c = t.shared.run(Op::Flush { token: 1 });
    assert!(c.result.unwrap_err().detail.contains("the device is gone"));
}

#[test]
fn opening_a_controller_checks_its_namespace_and_guards_its_block_device() {
    let root = FakeRoot::new("ptopen");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[("nvme0c1n1", 1)]);
    disk(&root, "sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1", "nvme0n1");
    std::fs::write(root.0.join("dev/nvme0n1"), vec![0u8; 64 << 10]).unwrap();
    let r = roots(&root);
    let dev = root.0.join("dev/nvme1");
    let spec = |serial: &str| OpenSpec {
        writable: true,
        queue_depth: 8,
        expect: Expectation { serial: Some(serial.into()), ..Default::default() },
        ..Default::default()
    };
    let o = open_controller_target(&dev, &spec("D1DUAL"), &r).unwrap();
    assert_eq!((o.engine, o.block_device, o.target.queue_depth()), (Engine::NvmePassthru, false, 8));
    assert!(o.notes[0].contains("controller nvme1, namespace 1") && o.notes[0].contains("8 threads"), "{:?}", o.notes);
    assert_eq!(o.target.geometry().logical_block_bytes, 4096);
    // Not a controller (a plain file here): Identify fails, and nothing is carried, saying why.
    assert_eq!(o.target.zeroing(), ZeroingSupport::default());
    assert!(o.notes[1].contains("deallocate and write zeroes not carried") && o.notes[1].contains("Identify"), "{:?}", o.notes);
    drop(o);
    let e = open_controller_target(&dev, &spec("OTHER"), &r).err().unwrap().to_string();
    assert!(e.contains("serial is 'D1DUAL', expected 'OTHER'"), "{e}");
    // A partition table on the namespace: refused unless allowed.
    let mut head = vec![0u8; 64 << 10];
    head[512..520].copy_from_slice(b"EFI PART");
    std::fs::write(root.0.join("dev/nvme0n1"), &head).unwrap();
    let e = open_controller_target(&dev, &spec("D1DUAL"), &r).err().unwrap().to_string();
    assert!(e.contains("--allow-overwrite-signature"), "{e}");
    assert!(open_controller_target(&dev, &OpenSpec { allow_overwrite_signature: true, ..spec("D1DUAL") }, &r).is_ok());
    // No block device node to guard: not written to.
    std::fs::remove_file(root.0.join("dev/nvme0n1")).unwrap();
    let e = open_controller_target(&dev, &spec("D1DUAL"), &r).err().unwrap().to_string();
    assert!(e.contains("cannot check is unused"), "{e}");
    assert!(open_controller_target(&dev, &OpenSpec { writable: false, ..spec("D1DUAL") }, &r).is_ok(), "reading is fine");
}

/// Measurement, not a test (run it with `--ignored --nocapture`): how many operations a
/// second the pool itself turns over at queue depth 1, 8 and 32, each a real
/// `NVME_IOCTL_IO_CMD` that the kernel refuses at once (`/dev/null`: ENOTTY), so the figure is
/// the engine's own ceiling (hand-over, syscall, completion), not a drive's.
#[test]
#[ignore = "a measurement: prints figures"]
fn measure_the_pools_own_turnover() {
    for depth in [1usize, 8, 32] {
        let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
        let mut t = PassthruTarget::new(
            file,
            Path::new("/dev/null"),
            &namespace(512, 1 << 30, 1 << 20),
            depth,
            true,
            None,
            ZeroingSupport::default(),
        );
        let mut bufs: Vec<AlignedBuf> = (0..depth).map(|_| AlignedBuf::zeroed(4096)).collect();
        let mut out = Vec::new();
        let (n, t0) = (200_000u64, Instant::now());
        let mut token = 0u64;
        while token < n || t.in_flight() > 0 {
            while token < n && t.in_flight() < depth {
                let buf = bufs.pop().unwrap();
                t.submit(Op::Write { token, offset: (token % 1000) * 4096, buf, fua: false, write_id: token }).unwrap();
                token += 1;
            }
            out.clear();
            t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
            bufs.extend(out.drain(..).filter_map(|c| c.buf));
        }
        let s = t0.elapsed().as_secs_f64();
        println!("queue depth {depth:>2}: {n} operations in {s:.2} s = {:.0} ops/s ({:.1} us each)", n as f64 / s, s * 1e6 / n as f64);
    }
}

/// A namespace's generic device (`ng1n2`): that namespace and its block device (`nvme1n2`),
/// whatever else the controller serves; something else named `ng...` is refused.
#[test]
fn a_generic_device_reaches_its_namespace_beside_the_controllers_others() {
    let root = FakeRoot::new("ptng");
    controller(&root, "0000:00:04.0", "nvme1", 2, &[("nvme1n1", 1), ("nvme1n2", 2)]);
    disk(&root, "sys/devices/pci0000:00/0000:00:04.0/nvme/nvme1/nvme1n2", "nvme1n2");
    let r = roots(&root);
    let e = controller_namespace("nvme1", &r, Path::new("/dev/nvme1")).unwrap_err().to_string();
    assert!(e.contains("2 namespaces"), "{e}");
    let ns = generic_namespace("ng1n2", &r, Path::new("/dev/ng1n2")).unwrap();
    assert_eq!((ns.nsid, ns.block_dev.clone(), ns.geometry.logical_block_bytes), (2, Some(root.0.join("dev/nvme1n2")), 4096));
    assert_eq!((ns.path.device.as_str(), ns.path.controller.as_deref(), ns.metadata), ("ng1n2", None, None));
    assert_eq!(ns.identity.serial, "D1DUAL");
    let e = generic_namespace("ng1n3", &r, Path::new("/dev/ng1n3")).unwrap_err().to_string();
    assert!(e.contains("has no block device nvme1n3"), "{e}");
    let e = generic_namespace("ngx", &r, Path::new("/dev/ngx")).unwrap_err().to_string();
    assert!(e.contains("not a namespace's generic device"), "{e}");
    // Opened: Identify fails (a plain file), and sysfs shows no integrity: carried without
    // metadata, as before.
    root.file("dev/ng1n2", "");
    std::fs::write(root.0.join("dev/nvme1n2"), vec![0u8; 64 << 10]).unwrap();
    let spec = OpenSpec { writable: true, queue_depth: 2, ..Default::default() };
    let o = open_generic_target(&root.0.join("dev/ng1n2"), &spec, &r).unwrap();
    assert!(o.notes[0].contains("generic device ng1n2, namespace 2"), "{:?}", o.notes);
    drop(o);
    // With an integrity format in sysfs, a namespace Identify cannot describe is refused: a
    // command without a metadata buffer would leave the controller none to write to.
    root.file("sys/devices/pci0000:00/0000:00:04.0/nvme/nvme1/nvme1n2/integrity/format", "T10-DIF-TYPE1-CRC\n");
    let e = open_generic_target(&root.0.join("dev/ng1n2"), &spec, &r).err().unwrap().to_string();
    assert!(e.contains("carries metadata (sysfs: integrity format T10-DIF-TYPE1-CRC) and Identify failed"), "{e}");
}

/// With metadata, each Read and Write carries its blocks' share of it through the kernel
/// (`/dev/null` refuses the ioctl: ENOTTY, after the buffers were checked: a mismatched one
/// would be EINVAL).
#[test]
fn with_protection_information_each_command_carries_its_metadata() {
    let file = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").unwrap();
    let mut ns = namespace(512, 1 << 20, 4096);
    ns.metadata = Some(Metadata { bytes: 8, pi: Some(Pi { kind: PiType::Type1, first: false, guard: Guard::Crc16 }) });
    let mut t = PassthruTarget::new(file, Path::new("/dev/null"), &ns, 1, true, None, ZeroingSupport::default());
    let mut buf = AlignedBuf::zeroed(8192);
    let e = t.read_at(0, &mut buf).unwrap_err();
    assert_eq!(e.errno, libc::ENOTTY, "{e}");
    t.submit(Op::Write { token: 1, offset: 4096, buf: AlignedBuf::zeroed(8192), fua: false, write_id: 1 }).unwrap();
    let mut out = Vec::new();
    t.reap(&mut out, 1, Duration::from_secs(5)).unwrap();
    assert_eq!(out[0].result.as_ref().unwrap_err().errno, libc::ENOTTY, "{:?}", out[0].result);
}
