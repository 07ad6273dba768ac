//! Quarch's own Python client, quarchpy (from PyPI, pinned in `.ci/run`), against
//! `faultline emulate quarch`, over a pseudo-terminal and over TCP: identify, power down,
//! query, power up, a port pulled and restored, timed-source delays set and read back. The
//! script (`tests/quarchpy/drive_quarch.py`) only reports what quarchpy returned; this test
//! asserts on it, and on the emulator's own log of what reached it.
//!
//! quarchpy dials port 9760 and nothing else, so over TCP the emulator listens on port 9760 of
//! a loopback address of its own (Linux routes all of 127.0.0.0/8 to `lo`; no setup, no root),
//! chosen from the process id so that parallel runs do not collide, and another one tried if
//! it is taken.

use crate::common::{skip, BIN};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SEED: u64 = 0x0A11_CE13;
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/quarchpy/drive_quarch.py");

fn quarchpy_version() -> Option<String> {
    let o = Command::new("python3").args(["-c", "import importlib.metadata as m; print(m.version('quarchpy'))"]).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A running `faultline emulate`, stopped with SIGTERM (through `kill`) on drop.
struct Emulator {
    child: Child,
    endpoint: String,
    banner: Vec<String>,
}

impl Emulator {
    fn start(args: &[&str]) -> Result<Emulator, String> {
        let mut child = Command::new(BIN)
            .args(["emulate", "quarch", "--seed", &SEED.to_string()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start faultline emulate");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = Vec::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                let _ = child.wait();
                return Err(format!("faultline emulate {args:?} ended before listening: {err}"));
            }
            banner.push(line.trim_end().to_string());
            if line.starts_with("stop with") {
                break;
            }
        }
        let endpoint = banner[0].strip_prefix("listening on ").expect("first line says where").to_string();
        Ok(Emulator { child, endpoint, banner })
    }

    /// Stops it (SIGTERM) and returns its exit code and its stderr log.
    fn stop(mut self) -> (Option<i32>, String) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "faultline emulate did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        (self.child.wait().unwrap().code(), err)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the script against `conn`; the (command, reply) pairs quarchpy returned. quarchpy
/// waits for a reply ending `\r\n>` forever, so a framing it cannot read is a hang: the script
/// gets 120 s (it needs about one), then is killed and the test fails saying so.
fn drive(conn: &str) -> Vec<(String, String)> {
    let mut child =
        Command::new("python3").args([SCRIPT, conn]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run python3");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    let mut err = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut out);
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    let Some(status) = status else {
        panic!("seed {SEED:#x}: quarchpy against {conn} hung (a reply it cannot read never ends in \\r\\n> for it); replies so far:\n{out}\nstderr:\n{err}");
    };
    assert!(status.success(), "seed {SEED:#x}: quarchpy against {conn} failed\nstdout:\n{out}\nstderr:\n{err}");
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}"));
            (v["command"].as_str().unwrap().to_string(), v["reply"].as_str().unwrap().to_string())
        })
        .collect()
}

/// What quarchpy must have returned, command by command (the same over both transports).
fn check_replies(how: &str, got: &[(String, String)]) {
    let want: &[(&str, &str)] = &[
        ("*IDN?", "IDN"),
        ("hello?", "Quarch emulator"),
        ("RUN:POWer DOWN", "OK"),
        ("RUN:POWer?", "PULLED"),
        ("RUN:POWer UP", "OK"),
        ("RUN:POWer?", "PLUGGED"),
        ("SIGnal:PORT_A:SOURce 0", "OK"),
        ("run pow up", "OK"),
        ("SIGnal:PORT_A:SOURce?", "0"),
        ("SIGnal:PORT_A:SOURce 1", "OK"),
        ("RUN:POWer UP", "OK"),
        ("sig:port_a:sour?", "1"),
        ("source:1:delay 0", "OK"),
        ("source:2:delay 25", "OK"),
        ("source:3:delay 500", "OK"),
        ("source:1:delay?", "0mS"),
        ("source:2:delay?", "25mS"),
        ("source:3:delay?", "500mS"),
        ("source:3:delay 2000", "FAIL"),
        ("source:3:delay?", "500mS"),
        ("conf:def:state", "OK"),
        ("RUN:POWer?", "PLUGGED"),
    ];
    assert_eq!(got.len(), want.len(), "seed {SEED:#x}, {how}: {got:#?}");
    for ((cmd, reply), (wcmd, wreply)) in got.iter().zip(want) {
        assert_eq!(cmd, wcmd);
        match *wreply {
            "IDN" => {
                let lines: Vec<&str> = reply.lines().map(str::trim).collect();
                assert!(lines.contains(&"Name: Drive Control Module"), "seed {SEED:#x}, {how}: *IDN? gave {reply:?}");
                assert!(lines.contains(&"Part#: QTL1743-01"), "seed {SEED:#x}, {how}: *IDN? gave {reply:?}");
            }
            "FAIL" => assert!(reply.starts_with("FAIL") && reply.contains("1270"), "seed {SEED:#x}, {how}: {cmd} gave {reply:?}"),
            w => assert_eq!(reply, w, "seed {SEED:#x}, {how}: {cmd:?} gave {reply:?}"),
        }
    }
}

/// The emulator's log: each command arrived once, and the drive's power followed.
fn check_log(how: &str, code: Option<i32>, log: &str) {
    assert_eq!(code, Some(0), "seed {SEED:#x}, {how}: faultline emulate exit\n{log}");
    assert!(log.contains("> *tst?\n"), "seed {SEED:#x}, {how}: quarchpy's connect-time self test is not in the log\n{log}");
    let down = log.find("> RUN:POWer DOWN\n").unwrap_or_else(|| panic!("{how}: no power down in\n{log}"));
    let after_down = &log[down..];
    let first_state = after_down.lines().find_map(|l| l.trim().strip_prefix("drive power: "));
    assert_eq!(first_state, Some("off"), "seed {SEED:#x}, {how}: the simulated drive must lose power with RUN:POWer DOWN\n{log}");
    assert!(log.contains("stopped after 23 commands, the drive powered on"), "seed {SEED:#x}, {how}:\n{log}");
}

#[test]
fn quarchpy_drives_the_quarch_emulator_over_a_pty() {
    let Some(v) = quarchpy_version() else {
        return skip("quarchpy_drives_the_quarch_emulator_over_a_pty", "quarchpy is not installed (.ci/run installs it)");
    };
    println!("quarchpy {v}, seed {SEED:#x}");
    let emu = Emulator::start(&["--pty"]).unwrap();
    assert!(emu.endpoint.starts_with("/dev/"), "{:?}", emu.banner);
    assert!(emu.banner.iter().any(|l| l == &format!("quarchpy: quarchDevice(\"SERIAL:{}\")", emu.endpoint)), "{:?}", emu.banner);
    let got = drive(&format!("SERIAL:{}", emu.endpoint));
    check_replies("pty", &got);
    let (code, log) = emu.stop();
    check_log("pty", code, &log);
}

#[test]
fn quarchpy_drives_the_quarch_emulator_over_tcp_on_port_9760() {
    let Some(v) = quarchpy_version() else {
        return skip("quarchpy_drives_the_quarch_emulator_over_tcp_on_port_9760", "quarchpy is not installed (.ci/run installs it)");
    };
    let pid = std::process::id();
    let mut errors = Vec::new();
    let emu = (0..8u32)
        .find_map(|i| {
            let n = pid.wrapping_add(i * 7919);
            let ip = format!("127.{}.{}.{}", 1 + (n >> 16) % 254, (n >> 8) % 256, 1 + n % 254);
            match Emulator::start(&["--tcp", &format!("{ip}:9760")]) {
                Ok(e) => Some((ip, e)),
                Err(e) => {
                    errors.push(e);
                    None
                }
            }
        })
        .unwrap_or_else(|| panic!("no loopback address took port 9760: {errors:#?}"));
    let (ip, emu) = emu;
    println!("quarchpy {v}, seed {SEED:#x}, emulator on {ip}:9760");
    assert_eq!(emu.endpoint, format!("{ip}:9760"));
    let got = drive(&format!("TCP:{ip}"));
    check_replies("tcp", &got);
    let (code, log) = emu.stop();
    check_log("tcp", code, &log);
}
