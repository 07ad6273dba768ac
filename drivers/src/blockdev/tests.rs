//! Tests of discovery and finding devices by identity, on a fake sysfs tree.

use super::*;
use crate::fake_root::FakeRoot;

#[test]
fn stable_identity_names_hardware_not_paths() {
    let id = DeviceIdentity {
        name: "nvme0n1".into(),
        model: "ACME SSD 9000".into(),
        serial: "S123".into(),
        wwid: "eui.0025388b91b2c3d4".into(),
        capacity_bytes: 1 << 40,
        logical_block_bytes: 512,
        ..Default::default()
    };
    let s = id.stable();
    assert_eq!(s, "block:model=ACME_SSD_9000 serial=S123 wwid=eui.0025388b91b2c3d4 size=1099511627776 lbs=512");
    assert!(!s.contains("nvme0n1"));
    let e = Expectation { serial: Some("S999".into()), size_bytes: Some(1 << 40), ..Default::default() };
    let m = e.mismatches(&id);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].contains("--expect-serial"), "{m:?}");
    let e = Expectation { backing_file: Some("/var/tmp/a.img".into()), ..Default::default() };
    assert!(!e.is_empty());
    let m = e.mismatches(&id);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].contains("--expect-backing-file"), "{m:?}");
}

/// A fake sysfs and /dev under a temporary directory, removed on drop. Block devices are
/// laid out as the kernel does: real directories under `sys/devices`, symlinks to them in
/// `sys/class/block`, partitions inside their disk's directory.
struct FakeSys {
    root: FakeRoot,
}

impl FakeSys {
    fn new(name: &str) -> FakeSys {
        let root = FakeRoot::new(&format!("sys-{name}"));
        root.dir("sys/class/block");
        root.dir("dev");
        FakeSys { root }
    }

    fn roots(&self) -> SysRoots {
        SysRoots { sys: self.root.0.join("sys"), dev: self.root.0.join("dev") }
    }

    fn write(&self, rel: &str, text: &str) {
        self.root.file(&format!("sys/{rel}"), &format!("{text}\n"));
    }

    fn link(&self, rel: &str, target: &str) {
        let p = self.root.0.join("sys").join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }

    /// A block device at `sys/devices/<devpath>`, listed in class/block.
    fn block(&self, devpath: &str, sectors: u64, attrs: &[(&str, &str)]) {
        let name = devpath.rsplit('/').next().unwrap();
        let dir = format!("devices/{devpath}");
        self.write(&format!("{dir}/size"), &sectors.to_string());
        self.write(&format!("{dir}/uevent"), &format!("MAJOR=259\nMINOR=0\nDEVNAME={name}\nDEVTYPE=disk"));
        for (k, v) in attrs {
            self.write(&format!("{dir}/{k}"), v);
        }
        self.link(&format!("class/block/{name}"), self.root.0.join("sys").join(&dir).to_str().unwrap());
    }
}

const NVME0: &str = "pci0000:00/0000:00:01.0/nvme/nvme0";
const NVME1: &str = "pci0000:00/0000:00:02.0/nvme/nvme1";

/// Two NVMe namespaces of one model with different serials, a hidden multipath per-path
/// node of the first (same serial, WWID and size), a partition of the first, an attached
/// loop device and a detached one.
fn machine(name: &str) -> FakeSys {
    let f = FakeSys::new(name);
    f.write(&format!("devices/{NVME0}/model"), "ACME SSD 9000                           ");
    f.write(&format!("devices/{NVME0}/serial"), "S1AAA   ");
    f.block(&format!("{NVME0}/nvme0n1"), 2_000_000, &[("wwid", "eui.0001"), ("queue/logical_block_size", "512"), ("hidden", "0")]);
    f.link(&format!("devices/{NVME0}/nvme0n1/device"), "..");
    f.block(&format!("{NVME0}/nvme0n1/nvme0n1p1"), 1_000_000, &[("partition", "1"), ("start", "2048")]);
    f.block(&format!("{NVME0}/nvme0c0n1"), 2_000_000, &[("wwid", "eui.0001"), ("queue/logical_block_size", "512"), ("hidden", "1")]);
    f.link(&format!("devices/{NVME0}/nvme0c0n1/device"), "..");
    f.write(&format!("devices/{NVME1}/model"), "ACME SSD 9000");
    f.write(&format!("devices/{NVME1}/serial"), "S2BBB");
    f.block(&format!("{NVME1}/nvme1n1"), 4_000_000, &[("wwid", "eui.0002"), ("queue/logical_block_size", "4096")]);
    f.link(&format!("devices/{NVME1}/nvme1n1/device"), "..");
    f.block("virtual/block/loop3", 16384, &[("queue/logical_block_size", "512"), ("loop/backing_file", "/var/tmp/a.img")]);
    f.block("virtual/block/loop0", 0, &[("queue/logical_block_size", "512")]);
    f
}

fn exp(serial: Option<&str>, model: Option<&str>, size_bytes: Option<u64>) -> Expectation {
    Expectation { serial: serial.map(String::from), model: model.map(String::from), size_bytes, ..Default::default() }
}

#[test]
fn scan_reads_identities_and_skips_hidden_path_nodes() {
    let f = machine("scan");
    let all = scan_block_devices(&f.roots()).unwrap();
    let names: Vec<&str> = all.iter().map(|c| c.identity.name.as_str()).collect();
    assert_eq!(names, ["loop0", "loop3", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
    let by = |n: &str| all.iter().find(|c| c.identity.name == n).unwrap();
    let p1 = by("nvme0n1p1");
    assert_eq!(p1.path, f.root.0.join("dev/nvme0n1p1"));
    assert_eq!(p1.identity.serial, "S1AAA");
    assert_eq!(p1.identity.model, "ACME SSD 9000");
    assert_eq!(p1.identity.wwid, "eui.0001");
    assert_eq!(p1.identity.partition, Some((1, 2048 * 512)));
    assert_eq!((p1.identity.capacity_bytes, p1.identity.logical_block_bytes), (1_000_000 * 512, 512), "lbs from the disk's queue");
    let n1 = by("nvme1n1");
    assert_eq!((n1.identity.serial.as_str(), n1.identity.capacity_bytes, n1.identity.logical_block_bytes), ("S2BBB", 2_048_000_000, 4096));
    assert_eq!(by("loop3").identity.backing_file, "/var/tmp/a.img");
    // identify() reads through the same function.
    let dir = std::fs::canonicalize(f.root.0.join("sys/class/block/nvme0n1p1")).unwrap();
    assert_eq!(identify_sysfs(&dir, 1_000_000 * 512, 512), p1.identity);
    // The per-path node is recognised by name too, on kernels without `hidden`.
    assert!(is_hidden(Path::new("/sys/x/nvme12c3n45")));
    assert!(!is_hidden(Path::new("/sys/x/nvme1n1")) && !is_hidden(Path::new("/sys/x/nvme1c2n")));
    // And by the attribute alone, whatever the name.
    f.write("devices/virtual/block/loop3/hidden", "1");
    let names: Vec<String> = scan_block_devices(&f.roots()).unwrap().into_iter().map(|c| c.identity.name).collect();
    assert_eq!(names, ["loop0", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
}

#[test]
fn one_match_is_found_by_any_field() {
    let f = machine("unique");
    let r = f.roots();
    let dev = |n: &str| f.root.0.join("dev").join(n);
    assert_eq!(find_by_identity(&exp(Some("S2BBB"), None, None), &r).unwrap(), dev("nvme1n1"));
    // The hidden node shares serial and size with nvme0n1: had it been scanned, this would
    // be ambiguous.
    assert_eq!(find_by_identity(&exp(Some("S1AAA"), None, Some(1_024_000_000)), &r).unwrap(), dev("nvme0n1"));
    assert_eq!(find_by_identity(&exp(Some("S1AAA"), Some("ACME SSD 9000"), Some(512_000_000)), &r).unwrap(), dev("nvme0n1p1"));
    let wwid = Expectation { wwid: Some("eui.0002".into()), ..Default::default() };
    assert_eq!(find_by_identity(&wwid, &r).unwrap(), dev("nvme1n1"));
    let backing = Expectation { backing_file: Some("/var/tmp/a.img".into()), ..Default::default() };
    assert_eq!(find_by_identity(&backing, &r).unwrap(), dev("loop3"));
}

#[test]
fn size_alone_finds_a_device() {
    let f = machine("size");
    let r = f.roots();
    assert_eq!(find_by_identity(&exp(None, None, Some(2_048_000_000)), &r).unwrap(), f.root.0.join("dev/nvme1n1"));
    assert_eq!(find_by_identity(&exp(None, None, Some(16384 * 512)), &r).unwrap(), f.root.0.join("dev/loop3"));
    let e = find_by_identity(&exp(None, None, Some(12345)), &r).unwrap_err();
    assert!(matches!(e, FindError::NotFound { scanned: 5, .. }), "{e}");
}

#[test]
fn no_match_lists_what_was_scanned_and_the_closest() {
    let f = machine("nomatch");
    let e = find_by_identity(&exp(Some("S9ZZZ"), Some("ACME SSD 9000"), None), &f.roots()).unwrap_err();
    let FindError::NotFound { scanned, closest, omitted, .. } = &e else { panic!("{e}") };
    assert_eq!((*scanned, *omitted), (5, 0));
    let names: Vec<&str> = closest.iter().map(|c| c.identity.name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "nvme0n1p1", "nvme1n1"], "those with the model");
    let msg = e.to_string();
    for want in
        ["no block device matches", "serial=\"S9ZZZ\"", "5 scanned", "closest, matching some fields", "serial=S2BBB", "--expect-serial"]
    {
        assert!(msg.contains(want), "{want} not in:\n{msg}");
    }
    assert!(msg.contains(f.root.0.join("dev/nvme1n1").to_str().unwrap()), "{msg}");

    // Nothing matches any field: the devices present are listed (not the empty loop0).
    let e = find_by_identity(&exp(Some("S9ZZZ"), None, None), &f.roots()).unwrap_err();
    let FindError::NotFound { closest, .. } = &e else { panic!("{e}") };
    let names: Vec<&str> = closest.iter().map(|c| c.identity.name.as_str()).collect();
    assert_eq!(names, ["loop3", "nvme0n1", "nvme0n1p1", "nvme1n1"]);
    assert!(e.to_string().contains("none matches any field"), "{e}");
}

#[test]
fn several_matches_are_refused_naming_each() {
    let f = machine("ambiguous");
    let e = find_by_identity(&exp(None, Some("ACME SSD 9000"), None), &f.roots()).unwrap_err();
    let FindError::Ambiguous { matches, .. } = &e else { panic!("{e}") };
    assert_eq!(matches.len(), 3);
    let msg = e.to_string();
    assert!(msg.contains("3 block devices match") && msg.contains("never picks one"), "{msg}");
    for n in ["nvme0n1", "nvme0n1p1", "nvme1n1"] {
        assert!(msg.contains(&format!("{}:", f.root.0.join("dev").join(n).display())), "{n} not in:\n{msg}");
    }
    // A serial names the disk and each of its partitions.
    let e = find_by_identity(&exp(Some("S1AAA"), None, None), &f.roots()).unwrap_err();
    let FindError::Ambiguous { matches, .. } = &e else { panic!("{e}") };
    let names: Vec<&str> = matches.iter().map(|c| c.identity.name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "nvme0n1p1"]);
}

#[test]
fn empty_or_blank_expectations_are_refused() {
    let f = machine("empty");
    let e = find_by_identity(&Expectation::default(), &f.roots()).unwrap_err();
    assert!(matches!(e, FindError::EmptyExpectation), "{e}");
    assert!(e.to_string().contains("give at least one of serial, wwid, model, size"), "{e}");
    let e = find_by_identity(&exp(Some("  "), None, Some(1)), &f.roots()).unwrap_err();
    assert!(matches!(e, FindError::BlankField { flag: "--expect-serial" }), "{e}");
    let missing = SysRoots { sys: f.root.0.join("nosys"), dev: f.root.0.join("dev") };
    let e = find_by_identity(&exp(Some("S1AAA"), None, None), &missing).unwrap_err();
    assert!(matches!(e, FindError::Scan { .. }), "{e}");
}

const SUBSYS_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6f1d3a2e-dual";
const NGUID_1: &str = "6f1d3a2e-0000-4000-8000-000000000001";
const NGUID_2: &str = "6f1d3a2e-0000-4000-8000-000000000002";

impl FakeSys {
    /// An NVMe controller of the dual-port subsystem at PCI function `pci`.
    fn controller(&self, pci: &str, name: &str, cntlid: u16) -> String {
        let c = format!("pci0000:00/{pci}/nvme/{name}");
        for (k, v) in [
            ("model", "ACME DUAL 7000"),
            ("serial", "D1DUAL"),
            ("subsysnqn", SUBSYS_NQN),
            ("address", pci),
            ("transport", "pcie"),
            ("cntlid", &cntlid.to_string()),
        ] {
            self.write(&format!("devices/{c}/{k}"), v);
        }
        self.write(&format!("devices/{c}/state"), "live");
        self.link(&format!("class/nvme/{name}"), self.root.0.join("sys/devices").join(&c).to_str().unwrap());
        c
    }

    /// Namespace `nsid` seen through controller directory `c` (multipath=N: one block device
    /// per controller), as `<controller>n<nsid>`.
    fn namespace(&self, c: &str, nsid: u32, nguid: &str) {
        let ctrl = c.rsplit('/').next().unwrap();
        let wwid = format!("eui.{}", nguid.replace('-', ""));
        let attrs = [("wwid", wwid.as_str()), ("nguid", nguid), ("eui", "00 00 00 00 00 00 00 00"), ("queue/logical_block_size", "512")];
        self.block(&format!("{c}/{ctrl}n{nsid}"), 1_000_000, &attrs);
        self.link(&format!("devices/{c}/{ctrl}n{nsid}/device"), "..");
    }
}

/// One subsystem behind two controllers (nvme0 at 0000:00:03.0, cntlid 1; nvme1 at
/// 0000:00:04.0, cntlid 2), sharing namespace 1 (nvme0n1, nvme1n1); with `second`, a
/// namespace 2 too (nvme0n2, nvme1n2: same serial and size, another NGUID).
fn dual_port(name: &str, second: bool) -> FakeSys {
    let f = FakeSys::new(name);
    for (pci, ctrl, cntlid) in [("0000:00:03.0", "nvme0", 1), ("0000:00:04.0", "nvme1", 2)] {
        let c = f.controller(pci, ctrl, cntlid);
        f.namespace(&c, 1, NGUID_1);
        if second {
            f.namespace(&c, 2, NGUID_2);
        }
    }
    f
}

fn serial(s: &str) -> Expectation {
    Expectation { serial: Some(s.into()), ..Default::default() }
}

#[test]
fn namespace_and_path_identities_are_read_from_sysfs() {
    let f = dual_port("ids", false);
    let all = scan_paths(&f.roots()).unwrap();
    let names: Vec<&str> = all.iter().map(|m| m.identity.name.as_str()).collect();
    assert_eq!(names, ["nvme0n1", "nvme1n1"]);
    let (a, b) = (&all[0], &all[1]);
    assert_eq!(a.namespace.nguid, NGUID_1);
    assert_eq!(a.namespace.subsys_nqn, SUBSYS_NQN);
    assert_eq!((a.namespace.serial.as_str(), a.namespace.model.as_str()), ("D1DUAL", "ACME DUAL 7000"));
    assert_eq!((a.namespace.capacity_bytes, a.namespace.logical_block_bytes), (512_000_000, 512));
    assert_eq!(a.namespace.key().unwrap(), format!("nguid:{NGUID_1}"), "the all-zero EUI-64 does not count");
    assert!(a.namespace.same_namespace(&b.namespace));
    assert_eq!(
        b.path,
        PathId { device: "nvme1n1".into(), controller: Some("nvme1".into()), cntlid: Some(2), pci_address: Some("0000:00:04.0".into()) }
    );
    assert_eq!((a.path.controller.as_deref(), a.path.cntlid), (Some("nvme0"), Some(1)));
    // Not NVMe: the path is the device name alone.
    let m = machine("ids-loop");
    let lp = scan_paths(&m.roots()).unwrap().into_iter().find(|p| p.identity.name == "loop3").unwrap();
    assert_eq!(lp.path, PathId { device: "loop3".into(), ..Default::default() });
    assert_eq!(lp.namespace.key(), None);
}

#[test]
fn every_path_of_one_namespace_is_found() {
    let f = dual_port("paths", false);
    let paths = find_namespace_paths(&serial("D1DUAL"), &f.roots()).unwrap();
    let devs: Vec<PathBuf> = paths.iter().map(|m| m.dev.clone()).collect();
    assert_eq!(devs, [f.root.0.join("dev/nvme0n1"), f.root.0.join("dev/nvme1n1")]);
    // find_by_identity, as before, refuses two devices even when they are one namespace.
    let e = find_by_identity(&serial("D1DUAL"), &f.roots()).unwrap_err();
    assert!(matches!(&e, FindError::Ambiguous { matches, .. } if matches.len() == 2), "{e}");
    // A single-path device is one path; its partition is a namespace of its own.
    let m = machine("paths-single");
    let one = find_namespace_paths(&serial("S2BBB"), &m.roots()).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].dev, m.root.0.join("dev/nvme1n1"));
    let e = find_namespace_paths(&serial("S1AAA"), &m.roots()).unwrap_err();
    assert!(matches!(&e, FindError::SeveralNamespaces { namespaces, .. } if namespaces.len() == 2), "{e}");
    // Refusals shared with find_by_identity.
    assert!(matches!(find_namespace_paths(&Expectation::default(), &f.roots()), Err(FindError::EmptyExpectation)));
    let e = find_namespace_paths(&serial("NOPE"), &f.roots()).unwrap_err();
    assert!(matches!(e, FindError::NotFound { scanned: 2, .. }), "{e}");
}

#[test]
fn two_namespaces_matching_one_expectation_are_refused_naming_both() {
    let f = dual_port("two-ns", true);
    let e = find_namespace_paths(&serial("D1DUAL"), &f.roots()).unwrap_err();
    let FindError::SeveralNamespaces { namespaces, .. } = &e else { panic!("{e}") };
    let names: Vec<Vec<&str>> = namespaces.iter().map(|g| g.iter().map(|m| m.identity.name.as_str()).collect()).collect();
    assert_eq!(names, [vec!["nvme0n1", "nvme1n1"], vec!["nvme0n2", "nvme1n2"]]);
    let msg = e.to_string();
    assert!(msg.contains("2 different namespaces") && msg.contains("never picks one"), "{msg}");
    for want in [NGUID_1, NGUID_2, "nvme0n1", "nvme1n1", "nvme0n2", "nvme1n2", "cntlid=2"] {
        assert!(msg.contains(want), "{want} not in:\n{msg}");
    }
    // find_path refuses too: it never picks a namespace either.
    let e = find_path(&serial("D1DUAL"), &PathId { cntlid: Some(1), ..Default::default() }, &f.roots()).unwrap_err();
    assert!(matches!(e, FindError::SeveralNamespaces { .. }), "{e}");
    // The WWID tells them apart.
    let wwid = Expectation { wwid: Some(format!("eui.{}", NGUID_2.replace('-', ""))), ..Default::default() };
    let paths = find_namespace_paths(&wwid, &f.roots()).unwrap();
    assert_eq!(paths.iter().map(|m| m.identity.name.as_str()).collect::<Vec<_>>(), ["nvme0n2", "nvme1n2"]);
}

#[test]
fn a_given_path_is_followed_across_a_controller_rename() {
    let f = dual_port("rename", false);
    let expect = serial("D1DUAL");
    let b = find_path(&expect, &PathId { controller: Some("nvme1".into()), ..Default::default() }, &f.roots()).unwrap();
    assert_eq!(b.dev, f.root.0.join("dev/nvme1n1"));
    let recorded = b.path.clone();
    // nvme1 goes away and comes back as nvme2: same PCI function, same cntlid.
    std::fs::remove_file(f.root.0.join("sys/class/block/nvme1n1")).unwrap();
    std::fs::remove_dir_all(f.root.0.join("sys/devices/pci0000:00/0000:00:04.0/nvme/nvme1")).unwrap();
    let c = f.controller("0000:00:04.0", "nvme2", 2);
    f.namespace(&c, 1, NGUID_1);
    let again = find_path(&expect, &recorded, &f.roots()).unwrap();
    assert_eq!(again.dev, f.root.0.join("dev/nvme2n1"), "followed by cntlid");
    assert_eq!(again.path.controller.as_deref(), Some("nvme2"));
    let by_pci = PathId { pci_address: Some("0000:00:04.0".into()), ..Default::default() };
    assert_eq!(find_path(&expect, &by_pci, &f.roots()).unwrap().dev, f.root.0.join("dev/nvme2n1"));
    let a = find_path(&expect, &PathId { cntlid: Some(1), ..Default::default() }, &f.roots()).unwrap();
    assert_eq!(a.dev, f.root.0.join("dev/nvme0n1"));
    // The old controller name selects nothing now, and says what is there.
    let e = find_path(&expect, &PathId { controller: Some("nvme1".into()), ..Default::default() }, &f.roots()).unwrap_err();
    assert!(matches!(&e, FindError::Path { selected: 0, paths, .. } if paths.len() == 2), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("none of them is ? via nvme1") && msg.contains("nvme2n1 via nvme2 cntlid=2"), "{msg}");
}

/// A controller back on the bus whose initialisation hangs (seen in the QEMU lab: Identify
/// unanswered after a hot-plug) has no namespace yet: the refusal to pick a path says it is
/// there, and in which state, so "the drive never came back" and "it came back and does not
/// answer" read differently.
#[test]
fn a_controller_back_on_the_bus_without_its_namespace_is_named_with_its_state() {
    let f = dual_port("connecting", false);
    let expect = serial("D1DUAL");
    // nvme1 leaves, and its PCI function comes back as nvme2, stuck before its namespace scan.
    std::fs::remove_file(f.root.0.join("sys/class/block/nvme1n1")).unwrap();
    std::fs::remove_file(f.root.0.join("sys/class/nvme/nvme1")).unwrap();
    std::fs::remove_dir_all(f.root.0.join("sys/devices/pci0000:00/0000:00:04.0/nvme/nvme1")).unwrap();
    let c = f.controller("0000:00:04.0", "nvme2", 0);
    f.write(&format!("devices/{c}/state"), "connecting");
    let want = PathId { pci_address: Some("0000:00:04.0".into()), ..Default::default() };
    let e = find_path(&expect, &want, &f.roots()).unwrap_err();
    let FindError::Path { idle, .. } = &e else { panic!("{e}") };
    assert_eq!(idle.len(), 1, "{e}");
    assert_eq!((idle[0].name.as_str(), idle[0].state.as_str()), ("nvme2", "connecting"));
    let msg = e.to_string();
    assert!(msg.contains("controller nvme2 pci=0000:00:04.0 is present in state \"connecting\""), "{msg}");
    assert!(msg.contains("initialisation not finished"), "{msg}");
    // A controller the wanted path does not name is not listed; nor is one with a path.
    let other = PathId { pci_address: Some("0000:00:09.0".into()), ..Default::default() };
    let FindError::Path { idle, .. } = find_path(&expect, &other, &f.roots()).unwrap_err() else { panic!() };
    assert!(idle.is_empty());
    let by_name = PathId { controller: Some("nvme0".into()), cntlid: Some(7), ..Default::default() };
    let FindError::Path { idle, .. } = find_path(&expect, &by_name, &f.roots()).unwrap_err() else { panic!() };
    assert!(idle.is_empty(), "nvme0 has its path: {idle:?}");
}

/// A path the kernel is still setting up (its logical block size reads 0, as one did in the
/// lab right after a power cut) is not a match yet: the namespace's other path is its one
/// path, not a second namespace; once set up it is found beside it.
#[test]
fn a_path_with_no_logical_block_size_yet_is_not_a_second_namespace() {
    let f = dual_port("half-set-up", false);
    let lbs = walk(&f.root.0.join("sys/devices")).into_iter().find(|p| p.ends_with("nvme0n1/queue/logical_block_size")).unwrap();
    std::fs::write(&lbs, "0\n").unwrap();
    let paths = find_namespace_paths(&serial("D1DUAL"), &f.roots()).unwrap();
    assert_eq!(paths.iter().map(|m| m.identity.name.as_str()).collect::<Vec<_>>(), ["nvme1n1"]);
    assert_eq!(find_by_identity(&serial("D1DUAL"), &f.roots()).unwrap(), f.root.0.join("dev/nvme1n1"));
    std::fs::write(&lbs, "512\n").unwrap();
    assert_eq!(find_namespace_paths(&serial("D1DUAL"), &f.roots()).unwrap().len(), 2);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let (p, t) = (e.path(), e.file_type().unwrap());
        if t.is_dir() {
            out.extend(walk(&p));
        } else if t.is_file() {
            out.push(p);
        }
    }
    out
}
