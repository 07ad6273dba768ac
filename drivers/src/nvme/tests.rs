use super::*;
use crate::fake_root::FakeRoot;

#[test]
fn get_log_page_encodes_lid_and_dword_counts() {
    let smart = get_log_page_cmd(LID_SMART, NSID_ALL, 512, 0).unwrap();
    assert_eq!((smart.opcode, smart.nsid, smart.cdw10, smart.cdw11), (0x02, 0xFFFF_FFFF, 0x007F_0002, 0));
    assert_eq!(get_log_page_cmd(LID_OCP_SMART, NSID_ALL, 512, 0).unwrap().cdw10, 0x007F_00C0);
    // 16 KiB is 4096 dwords: NUMD 0x0FFF still fits NUMDL.
    let c = get_log_page_cmd(0x07, NSID_ALL, 16 << 10, 0).unwrap();
    assert_eq!((c.cdw10, c.cdw11), (0x0FFF_0007, 0));
    // NUMDL holds 16 bits (256 KiB); beyond, NUMDU takes the upper half.
    let c = get_log_page_cmd(0x07, NSID_ALL, (256 << 10) + 4, 0).unwrap();
    assert_eq!((c.cdw10, c.cdw11), (0x0000_0007, 1));
    let c = get_log_page_cmd(0x07, NSID_ALL, 1 << 20, 0).unwrap();
    assert_eq!((c.cdw10, c.cdw11), (0xFFFF_0007, 3));
    let c = get_log_page_cmd(0x07, NSID_ALL, 4096, 0x1_0000_2000).unwrap();
    assert_eq!((c.cdw12, c.cdw13), (0x2000, 1));
    for len in [0, 3, 510] {
        let e = get_log_page_cmd(LID_SMART, NSID_ALL, len, 0).unwrap_err().to_string();
        assert!(e.contains(&format!("{len} bytes")) && e.contains("multiple of 4"), "{e}");
    }
    assert!(get_log_page_cmd(LID_SMART, NSID_ALL, 512, 2).is_err());
}

#[test]
fn identify_controller_command_and_fields() {
    let c = identify_controller_cmd();
    assert_eq!((c.opcode, c.nsid, c.cdw10), (0x06, 0, 1));
    let mut b = [0u8; IDENTIFY_BYTES];
    b[0..2].copy_from_slice(&0x144Du16.to_le_bytes());
    b[4..24].copy_from_slice(b"S6B0NG0R123456      ");
    b[24..64].copy_from_slice(format!("{:<40}", "SAMSUNG MZQL21T9HCJR-00A07").as_bytes());
    b[64..72].copy_from_slice(b"GDC5602Q");
    b[261] = 0b0000_1110;
    b[520..522].copy_from_slice(&0x005Fu16.to_le_bytes());
    b[528..530].copy_from_slice(&7u16.to_le_bytes());
    b[96..100].copy_from_slice(&0x8000u32.to_le_bytes());
    let id = ControllerIdentity::parse(&b);
    assert_eq!(
        id,
        ControllerIdentity {
            vendor_id: 0x144D,
            serial: "S6B0NG0R123456".into(),
            model: "SAMSUNG MZQL21T9HCJR-00A07".into(),
            firmware: "GDC5602Q".into(),
            lpa: 0x0E,
            oncs: 0x5F,
            awun: 0,
            awupf: 7,
            ctratt: 0x8000,
        }
    );
    assert!(id.extended_log_data() && id.extended_lba_formats());
    // NUL padding (seen on some drives) is trimmed as well.
    b[64..72].copy_from_slice(b"1.0\0\0\0\0\0");
    assert_eq!(ControllerIdentity::parse(&b).firmware, "1.0");
}

#[test]
fn unsupported_log_pages_are_told_from_other_refusals() {
    assert!(NvmeStatus(0x4109).log_page_unsupported());
    assert!(NvmeStatus(0x4002).log_page_unsupported());
    assert!(!NvmeStatus(0x0006).log_page_unsupported(), "internal error");
    assert!(!NvmeStatus(0x0370).log_page_unsupported(), "host path error");
}

impl FakeRoot {
    fn sys(&self) -> PathBuf {
        self.0.join("sys")
    }
    /// A PCIe controller `nvmeN` at `bdf`, with its class link and char device entry.
    fn controller(&self, n: u32, bdf: &str, state: &str) -> String {
        let dir = format!("sys/devices/pci0000:00/{bdf}/nvme/nvme{n}");
        self.file(&format!("{dir}/state"), &format!("{state}\n"));
        self.link(&format!("sys/class/nvme/nvme{n}"), &dir);
        self.link(&format!("sys/dev/char/240:{n}"), &dir);
        dir
    }
}

fn dev(maj: u32, min: u32) -> u64 {
    libc::makedev(maj, min)
}

#[test]
fn single_path_namespaces_and_partitions_resolve_to_their_controller() {
    let root = FakeRoot::new("single");
    let ctrl = root.controller(0, "0000:01:00.0", "live");
    root.dir(&format!("{ctrl}/nvme0n1"));
    root.file(&format!("{ctrl}/nvme0n1/nvme0n1p2/partition"), "2\n");
    root.link("sys/dev/block/259:0", &format!("{ctrl}/nvme0n1"));
    root.link("sys/dev/block/259:2", &format!("{ctrl}/nvme0n1/nvme0n1p2"));
    assert_eq!(controller_of_block(&root.sys(), dev(259, 0)), Ok("nvme0".into()));
    assert_eq!(controller_of_block(&root.sys(), dev(259, 2)), Ok("nvme0".into()));
    assert_eq!(controller_of_char(&root.sys(), dev(240, 0)), Ok("nvme0".into()));
    // The namespace id, of the disk or of its partition's disk.
    root.file(&format!("{ctrl}/nvme0n1/nsid"), "1\n");
    assert_eq!((nsid_of_block(&root.sys(), dev(259, 0)), nsid_of_block(&root.sys(), dev(259, 2))), (Ok(1), Ok(1)));
    root.file(&format!("{ctrl}/nvme0n1/nsid"), "4294967295\n");
    let e = nsid_of_block(&root.sys(), dev(259, 0)).unwrap_err();
    assert!(e.ends_with("holds \"4294967295\", not a namespace id"), "{e}");
}

#[test]
fn multipath_namespaces_resolve_to_a_live_controller_of_their_subsystem() {
    let root = FakeRoot::new("multipath");
    let subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys1";
    root.dir(&format!("{subsys}/nvme1n1"));
    root.link("sys/class/nvme-subsystem/nvme-subsys1", subsys);
    root.link("sys/dev/block/259:5", &format!("{subsys}/nvme1n1"));
    for (n, bdf, state) in [(2, "0000:03:00.0", "live"), (1, "0000:02:00.0", "resetting"), (3, "0000:04:00.0", "live")] {
        let c = root.controller(n, bdf, state);
        root.link(&format!("{subsys}/nvme{n}"), &c);
    }
    // The hidden per-path node nvme1c2n1 sits under its controller.
    let c2 = "sys/devices/pci0000:00/0000:03:00.0/nvme/nvme2";
    root.dir(&format!("{c2}/nvme1c2n1"));
    root.link("sys/dev/block/259:6", &format!("{c2}/nvme1c2n1"));
    assert_eq!(controller_of_block(&root.sys(), dev(259, 5)), Ok("nvme2".into()));
    assert_eq!(controller_of_block(&root.sys(), dev(259, 6)), Ok("nvme2".into()));
    for n in [2, 3] {
        root.file(&format!("sys/devices/pci0000:00/0000:0{}:00.0/nvme/nvme{n}/state", n + 1), "dead\n");
    }
    match controller_of_block(&root.sys(), dev(259, 5)) {
        Err(Unresolved::NoController(why)) => {
            assert_eq!(why, "no live controller in nvme-subsys1 (nvme1: resetting, nvme2: dead, nvme3: dead)")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn devices_that_are_not_nvme_are_named_as_such() {
    let root = FakeRoot::new("notnvme");
    root.dir("sys/devices/virtual/block/loop0");
    root.link("sys/dev/block/7:0", "sys/devices/virtual/block/loop0");
    root.dir("sys/devices/virtual/mem/null");
    root.link("sys/dev/char/1:3", "sys/devices/virtual/mem/null");
    match controller_of_block(&root.sys(), dev(7, 0)) {
        Err(Unresolved::NotNvme(why)) => assert!(why.starts_with("loop0 is not an NVMe namespace"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(controller_of_char(&root.sys(), dev(1, 3)), Err(Unresolved::NotNvme(_))));
    match controller_of_block(&root.sys(), dev(8, 0)) {
        Err(Unresolved::NotNvme(why)) => assert!(why.contains("block device 8:0 has no sysfs entry"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn regular_files_and_dev_null_are_not_nvme() {
    let root = FakeRoot::new("files");
    let f = root.file("plain.img", "");
    for p in [f.as_path(), Path::new("/dev/null")] {
        match NvmeAdmin::open_for_block_device(p) {
            Err(NvmeError::NotNvme { path, why }) => assert_eq!(path, std::fs::canonicalize(p).unwrap(), "{why}"),
            other => panic!("{}: {other:?}", p.display()),
        }
    }
    let e = NvmeAdmin::open_for_block_device(&f).unwrap_err().to_string();
    assert!(e.contains("plain.img: not an NVMe device: is a regular file"), "{e}");
    let e = NvmeAdmin::open_for_block_device(&root.0.join("absent")).unwrap_err().to_string();
    assert!(e.contains("absent: stat failed"), "{e}");
}

#[test]
fn admin_commands_on_a_non_controller_fail_with_the_os_error_and_the_device() {
    let root = FakeRoot::new("ioctl");
    // A regular file stands in for /dev/nvme0: the kernel refuses the ioctl (ENOTTY), which
    // must come back as an OS error, never as "log page not supported".
    let dev = root.file("dev/nvme0", "");
    let admin = NvmeAdmin::open_controller(&dev).unwrap();
    assert_eq!(admin.controller_name(), "nvme0");
    let e = admin.smart_log().unwrap_err();
    assert!(matches!(&e, NvmeError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTTY)), "{e:?}");
    assert!(e.to_string().contains("dev/nvme0: Get Log Page 0x02 failed"), "{e}");
    assert!(matches!(admin.ocp_smart_log(), Err(NvmeError::Io { .. })));
    let e = admin.identify().unwrap_err().to_string();
    assert!(e.contains("Identify Controller failed"), "{e}");
}
