use super::*;
use faultline_drivers::blockdev::{Candidate, DeviceIdentity};

fn expect() -> Expectation {
    Expectation { serial: Some("S1".into()), ..Expectation::default() }
}

/// A fake sysfs and /dev: one subsystem (serial D1DUAL) behind controllers named by
/// `(pci, name, cntlid)`, each showing namespace 1 (multipath=N: one block device per
/// controller, here a regular file in the fake /dev standing for it).
struct DualPort(PathBuf);

impl DualPort {
    fn new(tag: &str) -> DualPort {
        let d = std::env::temp_dir().join(format!("faultline-dut-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sys/class/block")).unwrap();
        std::fs::create_dir_all(d.join("dev")).unwrap();
        DualPort(d)
    }

    fn roots(&self) -> SysRoots {
        SysRoots { sys: self.0.join("sys"), dev: self.0.join("dev") }
    }

    fn write(&self, rel: &str, v: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("{v}\n")).unwrap();
    }

    fn controller(&self, pci: &str, name: &str, cntlid: u16, nguid: &str) {
        let c = format!("sys/devices/pci0000:00/{pci}/nvme/{name}");
        for (k, v) in
            [("serial", "D1DUAL"), ("model", "ACME DUAL"), ("address", pci), ("transport", "pcie"), ("cntlid", &cntlid.to_string())]
        {
            self.write(&format!("{c}/{k}"), v);
        }
        let ns = format!("{c}/{name}n1");
        for (k, v) in [("size", "2048"), ("queue/logical_block_size", "512"), ("nguid", nguid), ("wwid", "eui.1")] {
            self.write(&format!("{ns}/{k}"), v);
        }
        std::os::unix::fs::symlink(self.0.join(&c), self.0.join(&ns).join("device")).unwrap();
        std::os::unix::fs::symlink(self.0.join(&ns), self.0.join(format!("sys/class/block/{name}n1"))).unwrap();
        std::fs::File::create(self.0.join(format!("dev/{name}n1"))).unwrap().set_len(2048 * 512).unwrap();
        // Partition 1, the second half of the disk.
        let p = format!("{ns}/{name}n1p1");
        for (k, v) in [("size", "1024"), ("partition", "1"), ("start", "1024")] {
            self.write(&format!("{p}/{k}"), v);
        }
        std::os::unix::fs::symlink(self.0.join(&p), self.0.join(format!("sys/class/block/{name}n1p1"))).unwrap();
        std::fs::File::create(self.0.join(format!("dev/{name}n1p1"))).unwrap().set_len(1024 * 512).unwrap();
    }

    fn unplug(&self, pci: &str, name: &str) {
        for dev in [format!("{name}n1"), format!("{name}n1p1")] {
            std::fs::remove_file(self.0.join(format!("sys/class/block/{dev}"))).unwrap();
            std::fs::remove_file(self.0.join(format!("dev/{dev}"))).unwrap();
        }
        std::fs::remove_dir_all(self.0.join(format!("sys/devices/pci0000:00/{pci}/nvme/{name}"))).unwrap();
    }
}

impl Drop for DualPort {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NGUID: &str = "6f1d3a2e-0000-4000-8000-000000000001";

fn dual(tag: &str) -> DualPort {
    let f = DualPort::new(tag);
    f.controller("0000:00:03.0", "nvme0", 1, NGUID);
    f.controller("0000:00:04.0", "nvme1", 2, NGUID);
    f
}

fn serial() -> Expectation {
    Expectation { serial: Some("D1DUAL".into()), ..Expectation::default() }
}

#[test]
fn a_path_given_with_the_serial_is_followed_by_its_controller_across_a_rename() {
    // multipath=N, target.path = nvme1n1 plus the serial: after the fault nvme1 is back
    // as nvme2 (same cntlid and PCI function) while nvme0n1 (the other path, same
    // serial) stays. The runner follows cntlid 2: no ambiguity, no waiting, no finding.
    let f = dual("follow");
    let mut dut = RealDut::open(Some(&f.0.join("dev/nvme1n1")), &serial(), None, 4, false, f.roots()).unwrap();
    assert_eq!(dut.via.as_ref().and_then(|v| v.cntlid), Some(2));
    dut.release();
    f.unplug("0000:00:04.0", "nvme1");
    f.controller("0000:00:04.0", "nvme2", 2, NGUID);
    let r = dut.wait_ready(0, Duration::from_secs(5)).unwrap();
    assert!(r.enumerate.is_some() && r.first_read < Duration::from_secs(1), "{r:?}");
    assert_eq!(dut.path, f.0.join("dev/nvme2n1"));
}

#[test]
fn a_partition_given_with_the_serial_is_followed_across_a_rename() {
    // The serial alone matches both disks and both partitions: the partition's size
    // (taken when it was opened) keeps it one namespace's partition, followed by cntlid.
    let f = dual("part");
    let mut dut = RealDut::open(Some(&f.0.join("dev/nvme1n1p1")), &serial(), None, 4, false, f.roots()).unwrap();
    assert_eq!(dut.via.as_ref().and_then(|v| v.cntlid), Some(2));
    dut.release();
    f.unplug("0000:00:04.0", "nvme1");
    f.controller("0000:00:04.0", "nvme2", 2, NGUID);
    dut.wait_ready(0, Duration::from_secs(5)).unwrap();
    assert_eq!(dut.path, f.0.join("dev/nvme2n1p1"));
}

#[test]
fn a_path_picked_by_cntlid_is_followed_and_the_serial_alone_is_refused_naming_how_to_pick() {
    let f = dual("pick");
    let refusal = |expect: &Expectation| match RealDut::open(None, expect, None, 4, false, f.roots()) {
        Err(e @ (DutError::Find(_) | DutError::Paths { .. })) => e.to_string(),
        other => panic!("expected a refusal, got {:?}", other.map(|d| d.path)),
    };
    // The serial alone: both disks and both partitions.
    let e = refusal(&serial());
    assert!(e.contains("2 different namespaces") && e.contains("target.size_bytes"), "{e}");
    assert!(!e.contains("--expect"), "the scenario's own fields, not CLI flags: {e}");
    // The disk's size too: one namespace, two paths.
    let disk = Expectation { size_bytes: Some(2048 * 512), ..serial() };
    let e = refusal(&disk);
    assert!(e.contains("2 paths of one namespace") && e.contains("target.path") && e.contains("target.cntlid"), "{e}");
    assert!(!e.contains("--expect"), "the scenario's own fields, not CLI flags: {e}");
    let want = PathId { cntlid: Some(1), ..PathId::default() };
    let mut dut = RealDut::open(None, &disk, Some(&want), 4, false, f.roots()).unwrap();
    assert_eq!(dut.path, f.0.join("dev/nvme0n1"));
    dut.release();
    assert!(dut.wait_ready(0, Duration::from_secs(5)).is_ok());
    assert_eq!(dut.path, f.0.join("dev/nvme0n1"));
}

#[test]
fn a_target_that_became_ambiguous_is_a_harness_error_at_once_not_a_wait() {
    // After the fault a second namespace with the same serial shows up through another
    // controller with cntlid 2 (another drive with the same serial): which one the run is
    // about cannot be told; that is said at once, not after the readiness timeout.
    let f = dual("ambig");
    let mut dut = RealDut::open(Some(&f.0.join("dev/nvme1n1")), &serial(), None, 4, false, f.roots()).unwrap();
    dut.release();
    f.unplug("0000:00:04.0", "nvme1");
    f.controller("0000:00:04.0", "nvme1", 2, NGUID);
    f.controller("0000:00:05.0", "nvme7", 2, "6f1d3a2e-0000-4000-8000-000000000002");
    let t0 = Instant::now();
    let e = dut.wait_ready(0, Duration::from_secs(30)).unwrap_err();
    assert!(matches!(&e, DutError::Ambiguous(Ambiguity::Identity(_))) && e.to_string().contains("2 different namespaces"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5), "at once: {:?}", t0.elapsed());
}

#[test]
fn two_paths_or_two_namespaces_are_ambiguous_and_a_missing_device_is_not_yet() {
    let roots = SysRoots { sys: "/nonexistent/sys".into(), dev: "/nonexistent/dev".into() };
    // Nothing to scan: the device is not (yet) there, and waiting may help.
    assert!(matches!(refind(&expect(), None, &roots), Err(Refind::NotYet(_))));
    let c = |n: &str| Candidate { path: PathBuf::from(format!("/dev/{n}")), identity: DeviceIdentity::default() };
    let two = FindError::Ambiguous { expect: Box::new(expect()), matches: vec![c("nvme0n1"), c("nvme1n1")] };
    assert!(matches!(classify(two), Refind::Ambiguous(m) if m.to_string().contains("nvme0n1") && m.to_string().contains("nvme1n1")));
    let none = FindError::Path { expect: Box::new(expect()), want: Box::default(), paths: Vec::new(), selected: 0, idle: Vec::new() };
    assert!(matches!(classify(none), Refind::NotYet(_)), "the path is not back yet");
}

/// A namespace's generic device maps to its block device and back, by name, where sysfs has
/// the generic device; anything else maps to nothing.
#[test]
fn a_generic_device_and_its_block_device_map_to_each_other() {
    let f = dual("generic");
    let r = f.roots();
    // nvme0n1 has a generic device; nvme1n1 does not (yet).
    f.write("sys/class/nvme-generic/ng0n1/dev", "240:0");
    std::fs::File::create(f.0.join("dev/ng0n1")).unwrap();
    assert_eq!(generic_node(&f.0.join("dev/nvme0n1"), &r), Some(f.0.join("dev/ng0n1")));
    assert_eq!(generic_node(&f.0.join("dev/nvme1n1"), &r), None, "not back with its generic device yet");
    assert_eq!(generic_node(&f.0.join("dev/sda"), &r), None);
    assert_eq!(generic_block(&f.0.join("dev/ng0n1"), &r), Some(f.0.join("dev/nvme0n1")));
    assert_eq!(generic_block(&f.0.join("dev/nvme0n1"), &r), None, "a block device is no generic device");
    // Its namespace, found through the block device of its name: the identity to follow.
    let ns = namespace_of_char(&f.0.join("dev/ng0n1"), &r).expect("the namespace of ng0n1");
    assert_eq!((ns.nsid, ns.identity.serial.as_str(), ns.path.controller.as_deref()), (1, "D1DUAL", None));
}
