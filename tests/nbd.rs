//! The NBD server in front of the simulated drive (`faultline_fixtures::nbd`) against QEMU's
//! own NBD clients, `qemu-io` and `qemu-img` (Debian's `qemu-utils`), over a Unix socket and
//! loopback TCP: data round trips, flush and FUA reaching the drive (checked on the drive's
//! state after a cut), a cut seen by a live client as I/O errors, two connections on one
//! medium, harness sectors known to the drive by their write ids, bad handshakes refused, and
//! `faultline emulate nbd` end to end (its Quarch pty cutting the drive's power). The drive's
//! seed is fixed and named in failure messages. Without `qemu-io` the tests print SKIP.

use crate::common::{scratch, skip, BIN};
use faultline::format::{Format, SectorId};
use faultline_drivers::PowerSwitch;
use faultline_fixtures::nbd::{NbdConfig, NbdEvent, NbdServer, FOREIGN_WRITE_IDS};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthClass, TruthContract};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SEED: u64 = 0x0004_EBD0_5EED;
const CAPACITY: u64 = 64 << 20;

fn have_qemu(test: &str) -> bool {
    let found = ["qemu-io", "qemu-img"].iter().all(|t| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success()));
    if !found {
        skip(test, "qemu-io / qemu-img (Debian package qemu-utils) not installed");
    }
    found
}

fn drive(model: FaultModel, contract: TruthContract) -> SimDrive {
    SimDrive::new(SimConfig {
        capacity_bytes: CAPACITY,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 32,
        seed: SEED,
        model,
        contract,
        dealloc_reads: Default::default(),
    })
}

/// A server on a Unix socket and a loopback TCP port, with its log.
struct Served {
    server: NbdServer,
    unix: String,
    tcp: String,
    log: Arc<Mutex<Vec<NbdEvent>>>,
    _dir: PathBuf,
}

fn serve(name: &str, d: &SimDrive) -> Served {
    let dir = scratch(&format!("nbd-{name}"));
    let sock = dir.join("nbd.sock");
    let mut server = NbdServer::start(d.clone(), Box::new(faultline::format::claimed_write_id), NbdConfig::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = Arc::clone(&log);
    server.on_event(move |e| l.lock().unwrap().push(e.clone()));
    server.listen_unix(&sock).unwrap();
    let addr: SocketAddr = server.listen_tcp("127.0.0.1:0".parse().unwrap()).unwrap();
    Served { server, unix: format!("nbd+unix:///?socket={}", sock.display()), tcp: format!("nbd://{addr}"), log, _dir: dir }
}

/// `qemu-io` with `-c` commands, stdout and stderr together.
fn qemu_io(uri: &str, cmds: &[&str]) -> (bool, String) {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", "-t", "writeback", uri]);
    for k in cmds {
        c.args(["-c", k]);
    }
    let o = c.output().expect("run qemu-io");
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// An interactive `qemu-io` holding one connection open, fed one command at a time on stdin
/// (it reads one line per wake-up, so the next is sent only once the prompt is back).
struct Session {
    child: Child,
    stdin: ChildStdin,
    chunks: Receiver<Vec<u8>>,
}

const PROMPT: &str = "qemu-io> ";

impl Session {
    fn open(uri: &str) -> Session {
        let mut child = Command::new("sh")
            .args(["-c", &format!("exec qemu-io -f raw -t writeback '{uri}' 2>&1")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start qemu-io");
        let stdin = child.stdin.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let (tx, chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut b = [0u8; 4096];
            while let Ok(n) = out.read(&mut b) {
                if n == 0 || tx.send(b[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        let mut s = Session { child, stdin, chunks };
        s.until_prompt("(start)");
        s
    }

    fn until_prompt(&mut self, cmd: &str) -> String {
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(30);
        while !String::from_utf8_lossy(&got).ends_with(PROMPT) {
            let left = end.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(c) => got.extend(c),
                Err(_) => panic!("seed {SEED:#x}: qemu-io `{cmd}`: no prompt after it; got {:?}", String::from_utf8_lossy(&got)),
            }
        }
        let text = String::from_utf8_lossy(&got).into_owned();
        text[..text.len() - PROMPT.len()].to_string()
    }

    /// Runs one command and returns what it printed.
    fn run(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        self.until_prompt(cmd)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

#[test]
fn qemu_io_and_qemu_img_round_trip_over_unix_and_tcp() {
    if !have_qemu("qemu_io_and_qemu_img_round_trip_over_unix_and_tcp") {
        return;
    }
    let d = drive(FaultModel::HonestPlp, TruthContract::Plp);
    let s = serve("roundtrip", &d);
    let (ok, out) = qemu_io(&s.unix, &["write -P 0xab 0 64k", "flush", "read -P 0xab 0 64k"]);
    assert!(ok && out.contains("read 65536/65536 bytes at offset 0"), "unix: {out}");
    let (ok, out) = qemu_io(&s.tcp, &["read -P 0xab 0 64k", "write -P 0xcd 1M 128k", "read -P 0xcd 1M 128k"]);
    assert!(ok && out.contains("read 131072/131072 bytes at offset 1048576"), "tcp: {out}");
    let (ok, out) = qemu_io(&s.unix, &["read -P 0xcd 1M 128k", "read -P 0xab 0 64k"]);
    assert!(ok && !out.contains("failed"), "what TCP wrote, read over unix: {out}");

    // qemu-img: a file of seeded noise copied in, compared back, and a changed copy told apart.
    let fresh = drive(FaultModel::HonestPlp, TruthContract::Plp);
    let s2 = serve("img", &fresh);
    let file = s2._dir.join("image.raw");
    let mut noise = vec![0u8; 8 << 20];
    let mut x = SEED;
    for b in noise.chunks_exact_mut(8) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        b.copy_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&file, &noise).unwrap();
    for uri in [&s2.unix, &s2.tcp] {
        let o = Command::new("qemu-img")
            .args(["convert", "-n", "-t", "writeback", "-f", "raw", "-O", "raw"])
            .arg(&file)
            .arg(uri)
            .output()
            .unwrap();
        assert!(o.status.success(), "convert to {uri}: {}", String::from_utf8_lossy(&o.stderr));
        let o = Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw"]).arg(&file).arg(uri).output().unwrap();
        assert!(o.status.success(), "compare with {uri}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    noise[5 << 20] ^= 1;
    std::fs::write(&file, &noise).unwrap();
    let o = Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw"]).arg(&file).arg(&s2.unix).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "a flipped bit is a difference: {}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("5242880"), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(d.truth(), vec![]);
}

#[test]
fn flush_and_fua_reach_the_drive_and_a_cut_is_an_io_error_on_the_live_connection() {
    if !have_qemu("flush_and_fua_reach_the_drive_and_a_cut_is_an_io_error_on_the_live_connection") {
        return;
    }
    let d = drive(FaultModel::HonestVolatile, TruthContract::Plp);
    let mut power = d.power();
    let s = serve("flush", &d);
    let mut q = Session::open(&s.unix);
    assert!(q.run("write -P 0x11 0 64k").contains("wrote 65536/65536"));
    assert_eq!(q.run("flush").trim(), "");
    assert!(q.run("write -P 0x22 1M 64k").contains("wrote"));
    assert!(q.run("write -f -P 0x33 2M 64k").contains("wrote"), "FUA write");
    power.power_off().unwrap();
    let out = q.run("read -P 0x11 0 4k");
    assert!(out.contains("Input/output error"), "seed {SEED:#x}: a read with the power off: {out}");
    let out = q.run("write -P 0x44 3M 4k");
    assert!(out.contains("Input/output error"), "a write with the power off: {out}");
    power.power_on().unwrap();
    // The same connection works again, and the drive kept what flush and FUA made durable.
    let out = q.run("read -P 0x11 0 64k");
    assert!(out.contains("read 65536/65536"), "seed {SEED:#x}: the flushed write survives the cut: {out}");
    let out = q.run("read -P 0x33 2M 64k");
    assert!(out.contains("read 65536/65536"), "seed {SEED:#x}: the FUA write survives the cut: {out}");
    let out = q.run("read -P 0x22 1M 64k");
    assert!(out.contains("Pattern verification failed"), "seed {SEED:#x}: the cut dropped part of the write never flushed: {out}");
    assert!(q.run("write -P 0x55 3M 4k").contains("wrote"));
    drop(q);
    let st = s.server.stats();
    assert!(st.flushes >= 1 && st.fua_writes == 1 && st.drive_errors >= 2, "{st:?}");
    // Ground truth (PLP contract: every completed write promised): what the cut dropped is
    // foreign data (qemu-io's patterns), in the unflushed write's range only.
    let truth = d.truth();
    assert!(!truth.is_empty(), "seed {SEED:#x}");
    for t in &truth {
        assert!(t.offset >= 1 << 20 && t.offset + t.length <= (1 << 20) + (64 << 10), "seed {SEED:#x}: {t:?}");
        assert!(t.write_id.is_some_and(|w| w >= FOREIGN_WRITE_IDS), "{t:?}");
    }
}

#[test]
fn two_connections_are_two_ports_of_one_medium_and_cache() {
    if !have_qemu("two_connections_are_two_ports_of_one_medium_and_cache") {
        return;
    }
    let d = drive(FaultModel::HonestVolatile, TruthContract::Flush);
    let s = serve("ports", &d);
    let mut a = Session::open(&s.unix);
    let mut b = Session::open(&s.tcp);
    assert!(a.run("write -P 0x66 0 64k").contains("wrote"));
    assert_eq!(s.server.open_connections(), 2);
    let out = b.run("read -P 0x66 0 64k");
    assert!(out.contains("read 65536/65536"), "B sees what A wrote (one cache): {out}");
    // A flush through B covers the write completed through A.
    assert_eq!(b.run("flush").trim(), "");
    d.power().power_off().unwrap();
    d.power().power_on().unwrap();
    let out = a.run("read -P 0x66 0 64k");
    assert!(out.contains("read 65536/65536"), "seed {SEED:#x}: flushed through B, survives the cut: {out}");
    assert_eq!(d.truth(), vec![], "seed {SEED:#x}: an honest volatile drive under the flush contract");
}

#[test]
fn harness_sectors_reach_the_drive_under_their_own_write_ids_through_qemu_img() {
    if !have_qemu("harness_sectors_reach_the_drive_under_their_own_write_ids_through_qemu_img") {
        return;
    }
    // 64 writes of 8 sectors, ids 1..=64, side by side: qemu-img merges them into a few large
    // requests, which the server splits again by the ids the sectors carry.
    let f = Format::new(SEED, 512);
    let mut image = vec![0u8; 64 * 4096];
    for (w, chunk) in image.chunks_exact_mut(4096).enumerate() {
        for (i, s) in chunk.chunks_exact_mut(512).enumerate() {
            let id = SectorId {
                run_id: SEED,
                addr: (w * 4096 + i * 512) as u64,
                write_id: w as u64 + 1,
                cycle: 1,
                port: 0,
                flags: 0,
                index: i as u32,
                count: 8,
            };
            f.encode(&id, s);
        }
    }
    // Drops its whole cache at a cut; ground truth holds it to PLP: every write is lost.
    let d = drive(FaultModel::LiesAboutFlush, TruthContract::Plp);
    let s = serve("ids", &d);
    let file = s._dir.join("sectors.raw");
    std::fs::write(&file, &image).unwrap();
    let o = Command::new("qemu-img")
        .args(["convert", "-n", "-t", "writeback", "-f", "raw", "-O", "raw"])
        .arg(&file)
        .arg(&s.unix)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = s.server.stats();
    assert!(st.writes < 64 && st.drive_writes == 64, "qemu-img merged the writes, the server split them again: {st:?}");
    d.power().power_off().unwrap();
    d.power().power_on().unwrap();
    let got: Vec<(u64, u64, TruthClass, Option<u64>)> = d.truth().iter().map(|t| (t.offset, t.length, t.class, t.write_id)).collect();
    let want: Vec<_> = (0..64u64).map(|w| (w * 4096, 4096, TruthClass::LostWrite, Some(w + 1))).collect();
    assert_eq!(got, want, "seed {SEED:#x}");
}

#[test]
fn bad_handshakes_are_refused_with_the_reason() {
    if !have_qemu("bad_handshakes_are_refused_with_the_reason") {
        return;
    }
    let d = drive(FaultModel::HonestPlp, TruthContract::Plp);
    let s = serve("refuse", &d);
    let uri = s.unix.replace(":///?", ":///nope?");
    let (ok, out) = qemu_io(&uri, &["read 0 4k"]);
    assert!(!ok, "an unknown export is refused: {out}");
    let sock = s.unix.trim_start_matches("nbd+unix:///?socket=").to_string();
    // Raw bytes: a client that sets flags nobody defined.
    let mut c = std::os::unix::net::UnixStream::connect(Path::new(&sock)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut hello = [0u8; 18];
    c.read_exact(&mut hello).unwrap();
    c.write_all(&0x8000_0001u32.to_be_bytes()).unwrap();
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    assert!(rest.is_empty(), "nothing more after refused flags");
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let log = s.log.lock().unwrap().clone();
        let unknown = log.iter().any(|e| matches!(e, NbdEvent::OptionRefused { why, .. } if why.contains("no export named \"nope\"")));
        let flags = log.iter().any(|e| matches!(e, NbdEvent::Closed { why, .. } if why.contains("client flags 0x80000001")));
        if unknown && flags {
            break;
        }
        assert!(Instant::now() < end, "the refusals are logged with their reasons: {log:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The server still serves.
    let (ok, out) = qemu_io(&s.unix, &["read 0 4k"]);
    assert!(ok, "{out}");
}

#[test]
fn emulate_nbd_serves_the_drive_and_its_quarch_pty_cuts_the_power() {
    if !have_qemu("emulate_nbd_serves_the_drive_and_its_quarch_pty_cuts_the_power") {
        return;
    }
    let dir = scratch("nbd-emulate");
    let truth = dir.join("truth.json");
    let (mut child, uri, power) = emulated("lies-about-flush", SEED, &truth);
    let pty = power.strip_prefix("quarch+serial://").unwrap().to_string();
    let (ok, o) = qemu_io(&uri, &["write -P 0x77 0 64k", "flush", "read -P 0x77 0 64k"]);
    assert!(ok, "{o}");
    // Power down through the Quarch emulator, as a test script would.
    let mut tty = std::fs::OpenOptions::new().read(true).write(true).open(&pty).unwrap();
    tty.write_all(b"RUN:POWer DOWN\n").unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (ok, o) = qemu_io(&uri, &["read 0 4k"]);
        if !ok || o.contains("Input/output error") {
            break;
        }
        assert!(Instant::now() < end, "the cut never reached the drive: {o}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("the drive powered off"), "{err}");
    // The drive lied about the flush: the whole write is lost, foreign data (qemu-io's pattern).
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    let t = t.as_array().unwrap();
    assert!(!t.is_empty(), "seed {SEED:#x}: {t:?}");
    let lost: u64 = t.iter().map(|e| e["length"].as_u64().unwrap()).sum();
    assert_eq!(lost, 64 << 10, "seed {SEED:#x}: {t:?}");
    assert!(t.iter().all(|e| e["class"] == "lost_write" && e["write_id"].as_u64().unwrap() >= FOREIGN_WRITE_IDS), "{t:?}");
}

#[test]
fn emulate_refuses_options_that_do_not_fit_the_device_and_says_which() {
    for (args, says) in [
        (&["emulate", "nbd"][..], "--unix PATH or --tcp ADDR"),
        (&["emulate", "nbd", "--pty"][..], "not on a pty"),
        (&["emulate", "nbd", "--unix", "/nonexistent-dir/s.sock", "--sector-bytes", "1000"][..], "--sector-bytes 1000"),
        (&["emulate", "nbd", "--unix", "/nonexistent-dir/s.sock", "--atomic-bytes", "1000"][..], "--atomic-bytes 1000"),
        (&["emulate", "nbd", "--unix", "/nonexistent-dir/s.sock"][..], "/nonexistent-dir/s.sock"),
        (&["emulate", "quarch", "--pty", "--sim-dir", "/tmp/x"][..], "--sim-dir: only `emulate nbd`"),
        (&["emulate", "numato", "--unix", "/tmp/x"][..], "--unix: only `emulate nbd`"),
        (&["emulate", "quarch"][..], "--pty"),
    ] {
        let o = crate::common::run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} should say {says:?}: {err}");
    }
}

#[test]
fn writes_in_flight_at_a_cut_fail_in_qemu_and_the_torn_write_model_tears_them() {
    if !have_qemu("writes_in_flight_at_a_cut_fail_in_qemu_and_the_torn_write_model_tears_them") {
        return;
    }
    let d = drive(FaultModel::TornWrites, TruthContract::Plp);
    let dir = scratch("nbd-torn");
    let sock = dir.join("nbd.sock");
    // One completion an hour: the writes stay in flight until the cut.
    let cfg = NbdConfig { service_time: Duration::from_secs(3600), ..NbdConfig::default() };
    let mut server = NbdServer::start(d.clone(), Box::new(faultline::format::claimed_write_id), cfg);
    server.listen_unix(&sock).unwrap();
    let mut q = Session::open(&format!("nbd+unix:///?socket={}", sock.display()));
    for i in 0..3u64 {
        assert_eq!(q.run(&format!("aio_write -P 0x{:02x} {}k 64k", 0x11 + i, i * 64)).trim(), "");
    }
    let t0 = Instant::now();
    while faultline_drivers::BlockTarget::in_flight(&d) < 3 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the writes never reached the drive");
        std::thread::sleep(Duration::from_millis(5));
    }
    d.power().power_off().unwrap();
    let out = q.run("aio_flush");
    assert_eq!(out.matches("aio_write failed: Input/output error").count(), 3, "seed {SEED:#x}: {out}");
    drop(q);
    d.power().power_on().unwrap();
    // Each write landed on a random subset of its sectors (seeded); units left half-written
    // are torn writes of that write, and nothing else is a violation.
    let truth = d.truth();
    assert!(!truth.is_empty(), "seed {SEED:#x}");
    for t in &truth {
        assert!(t.class == TruthClass::TornWrite && t.offset + t.length <= 192 << 10, "seed {SEED:#x}: {t:?}");
        assert!(t.write_id.is_some_and(|w| (FOREIGN_WRITE_IDS..FOREIGN_WRITE_IDS + 3).contains(&w)), "{t:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// faultline's NBD client: `--target nbd+unix:///NAME?socket=PATH` and `nbd://HOST:PORT/NAME`
// ---------------------------------------------------------------------------------------------

fn have_qemu_nbd(test: &str) -> bool {
    let found = Command::new("qemu-nbd").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        skip(test, "qemu-nbd (Debian package qemu-utils) not installed");
    }
    found
}

/// `qemu-nbd` serving `img` (raw) until dropped, on a Unix socket or a loopback port.
struct QemuNbd(Child);

impl QemuNbd {
    fn start(img: &Path, export: &str, listen: &[&str], extra: &[&str]) -> QemuNbd {
        let child = Command::new("qemu-nbd")
            .args(["-f", "raw", "-t", "-x", export])
            .args(listen)
            .args(extra)
            .arg(img)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start qemu-nbd");
        QemuNbd(child)
    }
}

impl Drop for QemuNbd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `uri` answers a handshake (qemu-nbd listens a moment after it starts).
fn wait_for_export(uri: &str) {
    let parsed = faultline_drivers::nbd::NbdUri::parse(uri).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match faultline_drivers::nbd::NbdTarget::open(&parsed, false, 1) {
            Ok(_) => return,
            Err(e) => assert!(Instant::now() < end, "{uri} never answered: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// faultline writes an export of QEMU's own NBD server (qemu-nbd, a raw image behind it) with
/// FUA writes and flushes, verifies it through the export, and the image file itself, read
/// directly as a copy of the target, verifies clean too: every write landed where faultline
/// says, as qemu-nbd says it did. Over a Unix socket and loopback TCP. Refusals name what was
/// wrong: an export the server does not have, a read-only export, one carrying a partition
/// table, a scenario's bad URI.
#[test]
fn an_export_of_qemu_nbd_is_written_and_verified_and_its_image_holds_what_faultline_wrote() {
    let test = "an_export_of_qemu_nbd_is_written_and_verified_and_its_image_holds_what_faultline_wrote";
    if !have_qemu_nbd(test) {
        return;
    }
    let dir = scratch("client-qemu");
    let img = dir.join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let sock = dir.join("q.sock");
    let port = free_port();
    let _unix = QemuNbd::start(&img, "disk", &["-k", sock.to_str().unwrap()], &[]);
    let unix = format!("nbd+unix:///disk?socket={}", sock.display());
    wait_for_export(&unix);
    let run = |args: &[&str]| Command::new(BIN).args(args).output().unwrap();
    let rd = dir.join("run");
    let o = run(&[
        "write",
        "--target",
        &unix,
        "--run-dir",
        rd.to_str().unwrap(),
        "--seed",
        "11",
        "--fua-percent",
        "20",
        "--flush-every",
        "100",
    ]);
    assert_eq!(o.status.code(), Some(0), "seed 11: {}", crate::common::text(&o));
    let out = crate::common::text(&o);
    assert!(out.contains("NBD export \"disk\" at nbd+unix:///disk?socket=") && out.contains("write_fua p50"), "{out}");
    let o = run(&["verify", "--target", &unix, "--run-dir", rd.to_str().unwrap()]);
    assert!(o.status.success() && crate::common::text(&o).contains("verdict: clean"), "{}", crate::common::text(&o));
    drop(_unix);
    let o = run(&["verify", "--target", img.to_str().unwrap(), "--image-of-target", "--run-dir", rd.to_str().unwrap()]);
    assert!(
        o.status.success() && crate::common::text(&o).contains("verdict: clean"),
        "the image holds what was written: {}",
        crate::common::text(&o)
    );

    // Loopback TCP, a fresh image; the same round trip.
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let _tcp = QemuNbd::start(&img, "disk", &["-b", "127.0.0.1", "-p", &port.to_string()], &[]);
    let tcp = format!("nbd://127.0.0.1:{port}/disk");
    wait_for_export(&tcp);
    let rd = dir.join("run-tcp");
    let o = run(&["write", "--target", &tcp, "--run-dir", rd.to_str().unwrap(), "--seed", "12", "--fua-percent", "20"]);
    assert_eq!(o.status.code(), Some(0), "seed 12: {}", crate::common::text(&o));
    let o = run(&["verify", "--target", &tcp, "--run-dir", rd.to_str().unwrap()]);
    assert!(o.status.success() && crate::common::text(&o).contains("verdict: clean"), "{}", crate::common::text(&o));
    // An export the server does not have: its own refusal, named.
    let o = run(&["write", "--target", &format!("nbd://127.0.0.1:{port}/nope"), "--run-dir", dir.join("r1").to_str().unwrap()]);
    assert!(
        !o.status.success() && crate::common::text(&o).contains("refused export \"nope\": NBD_REP_ERR_UNKNOWN"),
        "{}",
        crate::common::text(&o)
    );
    drop(_tcp);

    // A read-only export, and one carrying an MBR: refused before anything is written.
    let ro_sock = dir.join("ro.sock");
    let _ro = QemuNbd::start(&img, "disk", &["-k", ro_sock.to_str().unwrap()], &["-r"]);
    let ro = format!("nbd+unix:///disk?socket={}", ro_sock.display());
    wait_for_export(&ro);
    let o = run(&["write", "--target", &ro, "--run-dir", dir.join("r2").to_str().unwrap()]);
    assert!(!o.status.success() && crate::common::text(&o).contains("the export is read-only"), "{}", crate::common::text(&o));
    drop(_ro);
    let mut mbr = vec![0u8; 512];
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    // One partition entry: type 0x83 (Linux), 2048 sectors long.
    mbr[446 + 4] = 0x83;
    mbr[446 + 12..446 + 16].copy_from_slice(&2048u32.to_le_bytes());
    std::fs::write(&img, [mbr, vec![0u8; (32 << 20) - 512]].concat()).unwrap();
    let _mbr = QemuNbd::start(&img, "disk", &["-k", sock.to_str().unwrap()], &[]);
    wait_for_export(&unix);
    let o = run(&["write", "--target", &unix, "--run-dir", dir.join("r3").to_str().unwrap()]);
    assert!(!o.status.success() && crate::common::text(&o).contains("an MBR partition table"), "{}", crate::common::text(&o));
    let o = run(&["write", "--target", &unix, "--expect-serial", "X", "--run-dir", dir.join("r4").to_str().unwrap()]);
    assert!(!o.status.success() && crate::common::text(&o).contains("an NBD export reports no serial"), "{}", crate::common::text(&o));
    // A scenario's URI is checked as the file is read.
    let sc = nbd_scenario(&dir, "nbd+unix:///disk", "quarch+serial:///dev/null", 1);
    let o = run(&["run", sc.to_str().unwrap(), "--run-dir", dir.join("r5").to_str().unwrap()]);
    assert!(
        !o.status.success() && crate::common::text(&o).contains("target.path") && crate::common::text(&o).contains("needs socket=PATH"),
        "{}",
        crate::common::text(&o)
    );
}

/// `faultline emulate nbd` in front of `model`, with its Quarch pty: the NBD URI and the
/// power controller a scenario names, and the emulator (stopped with SIGTERM to write the
/// drive's ground truth to `truth`).
fn emulated(model: &str, seed: u64, truth: &Path) -> (Child, String, String) {
    let mut child = Command::new(BIN)
        .args(["emulate", "nbd", "--tcp", "127.0.0.1:0", "--model", model, "--seed", &seed.to_string(), "--quarch-pty", "--quiet"])
        .arg("--truth-out")
        .arg(truth)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "emulate ended early: {banner:?}");
        if line.starts_with("stop with") {
            break;
        }
        banner.push(line.trim_end().to_string());
    }
    let field = |p: &str| banner.iter().find_map(|l| l.strip_prefix(p)).unwrap_or_else(|| panic!("no {p} in {banner:?}")).to_string();
    (child, field("nbd uri: "), format!("quarch+serial://{}", field("power: quarch+serial://")))
}

/// A power-cut scenario against an NBD export switched by a Quarch module.
fn nbd_scenario(dir: &Path, uri: &str, power: &str, cycles: u32) -> PathBuf {
    nbd_scenario_on(dir, uri, power, cycles, "")
}

/// As [`nbd_scenario`], with `on_host` added to the `[target]` table (a host and its
/// transport).
fn nbd_scenario_on(dir: &Path, uri: &str, power: &str, cycles: u32, on_host: &str) -> PathBuf {
    let p = dir.join("nbd-power-cut.toml");
    std::fs::write(
        &p,
        format!(
            r#"format_version = 1
name = "nbd-power-cut"
contract = "plp"
seed = 5
[target]
path = "{uri}"
atomic_bytes = 4096
{on_host}
[workload]
pattern = {{ kind = "random" }}
span_end_bytes = 16777216
min_write_bytes = 4096
max_write_bytes = 65536
mean_write_bytes = 16384
queue_depth = 32
[controllers]
power = "{power}"
[fault]
kind = "power_cut"
[cut]
kind = "uniform_time"
window_start_ms = 50
window_end_ms = 250
[cycles]
count = {cycles}
off_time_ms = 50
readiness_timeout_s = 10
[stop]
on_finding = "continue"
"#
        ),
    )
    .unwrap();
    p
}

/// Power cuts of the simulated drive behind faultline's NBD server, through faultline's NBD
/// client, switched by the emulated Quarch module on a pty: an honest drive is clean in every
/// cycle (each cut confirmed, the export connected again after power-on), and a drive that
/// rolls back a write at each cut is found out: every write the drive's ground truth holds
/// lost (or torn: a newer write in flight at the cut still showing on part of the reverted
/// one) at the end, that the host could prove durable, was found.
///
/// The rollback model reverts one of the writes applied since power-on. Over this small span
/// that write has often been written over since (the revert changes nothing), or was still
/// in flight (nothing lost): 3 cuts of 6 lost nothing in a CI run, so the rolling-back drive runs
/// 12 cycles. A write the drive completed whose reply had not reached faultline when the power
/// went is durable by the drive's order only (docs/LAB.md): not one faultline must find.
#[test]
fn power_cuts_through_the_nbd_client_are_clean_on_an_honest_drive_and_find_what_a_rolling_back_one_lost() {
    power_cuts_agree_with_the_drive("client-power", false);
}

/// The same power cuts with the target on "another host": `faultline run` with `target.host`
/// and a transport that starts `faultline agent --stdio --target URI` as a local child. The
/// agent writes; this process keeps the ledger, cuts the power, and verifies through the
/// agent. The verdicts are the same as with the target on this host.
#[test]
fn power_cuts_of_a_target_on_another_host_through_its_agent_agree_with_the_drive() {
    power_cuts_agree_with_the_drive("agent-power", true);
}

fn power_cuts_agree_with_the_drive(name: &str, through_agent: bool) {
    let dir = scratch(name);
    for (model, code, cycles) in [("honest-plp", 0, 6), ("rollback", 1, 12)] {
        let truth = dir.join(format!("truth-{model}.json"));
        let (mut child, uri, power) = emulated(model, SEED, &truth);
        let on_host = if through_agent {
            format!("host = \"lab-b\"\ntransport = [\"{BIN}\", \"agent\", \"--stdio\", \"--target\", \"{uri}\"]")
        } else {
            String::new()
        };
        let sc = nbd_scenario_on(&dir, &uri, &power, cycles, &on_host);
        let rd = dir.join(format!("run-{model}"));
        let o = Command::new(BIN).args(["run", sc.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]).output().unwrap();
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        assert!(child.wait().unwrap().success());
        let ctx = format!("{model}, drive seed {SEED:#x}, scenario seed 5: {}", crate::common::text(&o));
        assert_eq!(o.status.code(), Some(code), "{ctx}");
        let events = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
        let of = |kind: &str| events.lines().filter(|l| l.contains(&format!("\"event\":\"{kind}\""))).count();
        let n = cycles as usize;
        assert_eq!((of("cut_issued"), of("power_restored"), of("ready"), of("cycle_ended")), (n, n, n, n), "{ctx}");
        assert_eq!(of("harness_error"), 0, "{ctx}");
        if through_agent {
            // The audit log: every operation sent to the agent, as events.
            let sent: Vec<&str> = events.lines().filter(|l| l.contains("\"event\":\"agent_log\"")).collect();
            let all = sent.join("\n");
            for want in [
                "lab-b request 1: open nbd://",
                "cycle 1 first id",
                "durable up to record",
                "cut done",
                "history",
                "verify 1 regions",
                "wait ready at",
            ] {
                assert!(all.contains(want), "{want:?} not in the audit log: {all}\n{ctx}");
            }
        }
        let found: Vec<u64> = events
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e["event"] == "finding")
            .map(|e| {
                // Lost whole, or torn: a newer write (in flight at the cut) still shows on part
                // of the reverted one, which the drive's truth calls torn as well.
                assert!(["lost_write", "torn_write"].contains(&e["finding"]["class"].as_str().unwrap_or("")), "{e}\n{ctx}");
                e["finding"]["expected"]["write_id"].as_u64().unwrap_or_else(|| panic!("{e}"))
            })
            .collect();
        let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
        let history = faultline::ledger::replay(&rd).unwrap();
        let lost: std::collections::BTreeSet<u64> = t
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["class"] == "lost_write" || x["class"] == "torn_write")
            .filter_map(|x| x["write_id"].as_u64())
            .filter(|&w| history.is_durable(w))
            .collect();
        if model == "honest-plp" {
            assert!(found.is_empty() && lost.is_empty(), "{found:?} {lost:?}: {ctx}");
        } else {
            // The drive's ground truth when it stopped: what it still holds lost (a write
            // rolled back at an earlier cut may since have been written over). Each of those
            // was found; the cuts before were found as they happened.
            assert!(!found.is_empty(), "no cut of the rolling-back drive lost a durable write: {ctx}");
            assert!(lost.iter().all(|w| found.contains(w)), "the drive lost {lost:?}, faultline found {found:?}: {ctx}");
        }
    }
}

/// Deallocates and Write Zeroes through faultline's NBD client (`NBD_CMD_TRIM`,
/// `NBD_CMD_WRITE_ZEROES`) to the simulated drive behind faultline's NBD server, under power
/// cuts: the export offers both, the run carries them (a run whose target did not would be
/// refused when it opens), and an honest drive verifies clean in every cycle, NBD's trim held
/// to nothing more than "zeros or the data last written".
#[test]
fn deallocates_and_write_zeroes_through_the_nbd_client_verify_clean_under_cuts() {
    let dir = scratch("nbd-zeroing");
    let truth = dir.join("truth.json");
    let (mut child, uri, power) = emulated("honest-plp", SEED, &truth);
    let sc = nbd_scenario(&dir, &uri, &power, 4);
    let text = std::fs::read_to_string(&sc).unwrap();
    let with_ops = text.replace("queue_depth = 32\n", "queue_depth = 32\nops = { write = 0.8, deallocate = 0.1, write_zeroes = 0.1 }\n");
    assert_ne!(with_ops, text);
    std::fs::write(&sc, with_ops).unwrap();
    let rd = dir.join("run");
    let o = Command::new(BIN).args(["run", sc.to_str().unwrap(), "--run-dir", rd.to_str().unwrap()]).output().unwrap();
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
    let ctx = format!("drive seed {SEED:#x}, scenario seed 5: {}", crate::common::text(&o));
    assert_eq!(o.status.code(), Some(0), "{ctx}");
    let events = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    assert_eq!(events.lines().filter(|l| l.contains("\"event\":\"cycle_ended\"")).count(), 4, "{ctx}");
    let ledger = String::from_utf8_lossy(&std::fs::read(rd.join("ledger.fl")).unwrap()).into_owned();
    assert!(ledger.contains("\"deallocate_ppm\":100000") && !ledger.contains("\"dealloc_reads\""), "held as unreported: {ctx}");
}
