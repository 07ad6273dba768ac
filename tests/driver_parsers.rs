//! The drivers' parsers of untrusted input, against arbitrary and mutated bytes: controller
//! specs (what users type), and everything read back from a controller (Quarch serial, TCP and
//! USB replies, Numato replies, HID relay feature reports, the Quarch USB-mode lock reply, the
//! NVMe Identify page). No panic, bounded time, errors that name the controller and say what
//! came back; and a controller never reports a switch done that the device did not confirm.
//!
//! The harness's parsers are in the workspace's `tests/parsers.rs`. Seeds are fixed (see
//! `tests/common/seeded.rs`); a failure prints the one to replay it with.

use crate::common::seeded::{check, mutate, mutations};
use faultline_drivers::control::quarch::usb::{lock_usb_mode, QuarchUsbWire};
use faultline_drivers::control::quarch::{ModuleKind, Quarch, QuarchWire, SerialWire, TcpWire, WireFault};
use faultline_drivers::control::relay::{HidRelay, Numato};
use faultline_drivers::control::usb::{BulkPipe, HidReports, UsbError};
use faultline_drivers::control::{parse_spec, ControlEnv};
use faultline_drivers::nvme::{ControllerIdentity, IDENTIFY_BYTES};
use faultline_drivers::{PowerError, PowerState, PowerSwitch};
use proptest::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CASES: u32 = 256;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn printable(s: &str) -> bool {
    s.bytes().all(|c| c == b'\r' || c == b'\n' || c == b'\t' || (0x20..0x7f).contains(&c))
}

// --- controller specs ----------------------------------------------------------------------

const FORMS: [&str; 18] = [
    "quarch+serial:///dev/ttyUSB0",
    "quarch+serial:///dev/ttyUSB0?module=3",
    "quarch+tcp://qtl1999-01-001:9760",
    "quarch+tcp://192.168.1.20:9761?module=12",
    "quarch+tcp://[::1]:9760",
    "quarch+usb://QTL1999-01-001",
    "hidrelay+usb://HURTM?relay=2",
    "lcus+serial:///dev/ttyUSB1?channel=1",
    "numato+serial:///dev/ttyACM0?relay=0",
    "nvme-reset://nvme0",
    "nvme-subsys-reset://nvme12",
    "pci-reset://0000:3b:00.0?method=bus",
    "pci-remove-rescan://0000:3b:00.0",
    "pci-slot-power://12",
    "exec:?off=ipmitool -H bmc chassis power off&on=ipmitool -H bmc chassis power on&timeout_ms=30000",
    "exec:?off=a %26%26 b&on=c %25 d&state=s&timeout_ms=5",
    "manual",
    "sim",
];

/// Ok(true) when the spec parsed. A parsed spec displays in its canonical form, which parses
/// back to the same spec and displays the same again; an error quotes the spec, says why and
/// lists the accepted forms.
fn spec_case(s: &str) -> Result<bool, TestCaseError> {
    match parse_spec(s) {
        Ok(spec) => {
            let shown = spec.to_string();
            let again =
                parse_spec(&shown).map_err(|e| TestCaseError::fail(format!("{s:?} displays as {shown:?}, which is refused: {e}")))?;
            prop_assert_eq!(&again, &spec, "{:?} displays as {:?}, which parses to something else", s, shown);
            prop_assert_eq!(again.to_string(), shown);
            Ok(true)
        }
        Err(e) => {
            prop_assert_eq!(&e.spec, s);
            prop_assert!(!e.reason.to_string().trim().is_empty());
            let msg = e.to_string();
            prop_assert!(msg.starts_with(&format!("bad controller spec {s:?}: ")) && msg.contains("accepted forms:"), "{}", msg);
            Ok(false)
        }
    }
}

#[test]
fn spec_arbitrary_text() {
    let text = prop_oneof![
        bytes(256).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        proptest::string::string_regex(r"([a-z+:/?&=%.\[\]0-9 -]|quarch\+tcp://|exec:\?|numato\+serial:///|%2[56]){0,40}").unwrap(),
    ];
    check("spec_arbitrary_text", CASES, text, |t| spec_case(&t).map(drop));
}

#[test]
fn spec_mutated_documented_forms() {
    let accepted = AtomicU32::new(0);
    check("spec_mutated_documented_forms", CASES * 2, (0..FORMS.len(), mutations(3)), |(i, m)| {
        let s = String::from_utf8_lossy(&mutate(FORMS[i].as_bytes(), &m)).into_owned();
        if spec_case(&s)? {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    assert!(accepted.into_inner() > 0, "no mutated spec was accepted: the round trip was never exercised");
}

// --- Quarch replies on the wire ------------------------------------------------------------

fn wire_fault_is_clear(f: &WireFault) -> Result<(), TestCaseError> {
    let msg = f.to_string();
    prop_assert!(!msg.trim().is_empty() && msg.contains("got "), "{}", msg);
    Ok(())
}

fn serial_case(cmd: &str, buf: &[u8]) -> Result<(), TestCaseError> {
    match SerialWire::parse_reply(cmd, buf) {
        Ok(text) => prop_assert!(printable(&text) && text.trim() == text, "reply {:?}", text),
        Err(f) => wire_fault_is_clear(&f)?,
    }
    Ok(())
}

const QUARCH_COMMANDS: [&str; 4] = ["RUN:POWer?", "*IDN?", "run:power down <3>", "Measure:Voltage 12V?"];

#[test]
fn quarch_serial_arbitrary_replies() {
    check("quarch_serial_arbitrary_replies", CASES, (0..QUARCH_COMMANDS.len(), bytes(512)), |(i, b)| serial_case(QUARCH_COMMANDS[i], &b));
}

#[test]
fn quarch_serial_mutated_replies() {
    let valid = |cmd: &str, reply: &str| format!("{cmd}\r\n{reply}\r\n>").into_bytes();
    check("quarch_serial_mutated_replies", CASES * 2, (0..QUARCH_COMMANDS.len(), mutations(3)), |(i, m)| {
        let cmd = QUARCH_COMMANDS[i];
        serial_case(cmd, &mutate(&valid(cmd, "OK"), &m))
    });
}

#[test]
fn quarch_tcp_packets_reassemble_or_wait() {
    let packets = proptest::collection::vec(bytes(80), 0..6);
    check("quarch_tcp_packets_reassemble_or_wait", CASES, (packets, bytes(64), any::<usize>()), |(packets, junk, cut)| {
        // Arbitrary bytes: no panic, and what comes out is never more than went in.
        if let Some(out) = TcpWire::unpack(&junk) {
            prop_assert!(out.len() <= junk.len());
        }
        // Well-formed packets: their payloads in order; any strict prefix that ends inside a
        // packet is incomplete.
        let mut raw = Vec::new();
        let mut ends = vec![0];
        for p in &packets {
            raw.extend((p.len() as u16).to_le_bytes());
            raw.extend(p);
            ends.push(raw.len());
        }
        prop_assert_eq!(TcpWire::unpack(&raw), Some(packets.concat()));
        let cut = cut % (raw.len() + 1);
        prop_assert_eq!(TcpWire::unpack(&raw[..cut]).is_some(), ends.contains(&cut));
        Ok(())
    });
}

// --- Numato replies ------------------------------------------------------------------------

const NUMATO_COMMANDS: [&str; 3] = ["relay read 0", "relay on A", "ver"];

fn numato_case(cmd: &str, buf: &[u8]) -> Result<(), TestCaseError> {
    match Numato::parse_reply(cmd, buf) {
        Ok(answer) => prop_assert!(printable(&answer) && answer.trim() == answer && buf.ends_with(b">")),
        Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
    }
    Ok(())
}

#[test]
fn numato_arbitrary_replies() {
    check("numato_arbitrary_replies", CASES, (0..NUMATO_COMMANDS.len(), bytes(512)), |(i, b)| numato_case(NUMATO_COMMANDS[i], &b));
}

#[test]
fn numato_mutated_replies() {
    check("numato_mutated_replies", CASES * 2, (0..NUMATO_COMMANDS.len(), mutations(3)), |(i, m)| {
        let cmd = NUMATO_COMMANDS[i];
        numato_case(cmd, &mutate(format!("{cmd}\n\ron\n\r>").as_bytes(), &m))
    });
}

// --- a Quarch module that answers anything -------------------------------------------------

/// What a scripted module does with one command.
#[derive(Clone, Debug)]
enum Answer {
    Text(String),
    Timeout,
    Garbage,
    Closed,
}

fn answer() -> impl Strategy<Value = Answer> {
    let text = prop_oneof![
        Just("OK".to_string()),
        Just("ok".to_string()),
        Just("FAIL: 0x41 -Command not recognised".to_string()),
        Just("ON".to_string()),
        Just("OFF".to_string()),
        Just("PLUGGED".to_string()),
        Just("PULLED".to_string()),
        Just("<3> OFF".to_string()),
        Just("<3> OK".to_string()),
        Just("12000mV".to_string()),
        Just("12.1V".to_string()),
        Just("3mV".to_string()),
        Just("0".to_string()),
        Just("NaN".to_string()),
        Just("1e400V".to_string()),
        Just("-5mV".to_string()),
        Just("Family: Torridon\r\nName: Power Module\r\nSerial: QTL1995".to_string()),
        Just("Name: Drive Control Module".to_string()),
        "[ -~]{0,40}",
    ];
    prop_oneof![
        8 => text.prop_map(Answer::Text),
        1 => Just(Answer::Timeout),
        1 => Just(Answer::Garbage),
        1 => Just(Answer::Closed),
    ]
}

/// A wire that answers from a script (and times out once it runs dry), logging each exchange.
struct ScriptedWire {
    answers: VecDeque<Answer>,
    log: Arc<Mutex<Vec<(String, Answer)>>>,
}

impl QuarchWire for ScriptedWire {
    fn exchange(&mut self, cmd: &str, _timeout: Duration) -> Result<String, WireFault> {
        let a = self.answers.pop_front().unwrap_or(Answer::Timeout);
        self.log.lock().unwrap().push((cmd.to_string(), a.clone()));
        match a {
            Answer::Text(t) => Ok(t),
            Answer::Timeout => Err(WireFault::Timeout { got: b"partial".to_vec() }),
            Answer::Garbage => Err(WireFault::Garbage { got: b"\x00\xff".to_vec(), why: "non-text bytes in the reply".into() }),
            Answer::Closed => Err(WireFault::Closed { got: Vec::new(), why: "end of file".into() }),
        }
    }

    fn resync(&mut self, _timeout: Duration) -> Result<(), WireFault> {
        Ok(())
    }
}

fn env() -> ControlEnv {
    ControlEnv { timeout: Duration::from_millis(50), attempts: 2, ..ControlEnv::default() }
}

/// The last text the module answered to a command starting with `prefix`, address stripped.
fn last_answer(log: &[(String, Answer)], prefix: &str, module: Option<u8>) -> Option<String> {
    log.iter().rev().find(|(c, _)| c.starts_with(prefix)).and_then(|(_, a)| match a {
        Answer::Text(t) => {
            let t = module.and_then(|m| t.strip_prefix(&format!("<{m}>"))).unwrap_or(t);
            Some(t.trim().to_ascii_uppercase())
        }
        _ => None,
    })
}

fn power_error_is_clear(e: &PowerError, name: &str) -> Result<(), TestCaseError> {
    let msg = e.to_string();
    prop_assert!(msg.contains(name), "error does not name the switch: {}", msg);
    if let PowerError::Failed { command, reason, .. } = e {
        prop_assert!(!command.is_empty() && !reason.trim().is_empty(), "{}", msg);
    }
    Ok(())
}

/// Whatever the module answers, the driver does not panic, every error names the switch and
/// the command, and a power-off or power-on it reports done was confirmed: the module said OK
/// to the switch and then reported the new state.
#[test]
fn quarch_module_answering_anything() {
    let idn =
        prop_oneof![Just(Answer::Text("Name: Power Module".into())), Just(Answer::Text("Name: Drive Control Module".into())), answer()];
    let strategy = (idn, proptest::collection::vec(answer(), 0..24), any::<bool>(), 0u8..6);
    let confirmed = AtomicU32::new(0);
    check("quarch_module_answering_anything", CASES * 2, strategy, |(idn, answers, torridon, op)| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let module = torridon.then_some(3u8);
        let name = "quarch+tcp://fake:9760".to_string();
        let wire = ScriptedWire { answers: std::iter::once(idn).chain(answers).collect(), log: log.clone() };
        let mut q = match Quarch::with_wire(Box::new(wire), name.clone(), module, &env()) {
            Ok(q) => q,
            Err(e) => return power_error_is_clear(&e, &name),
        };
        let kind = q.kind();
        let result: Result<(), PowerError> = match op {
            0 => PowerSwitch::power_off(&mut q),
            1 => PowerSwitch::power_on(&mut q),
            2 => PowerSwitch::state(&mut q).map(drop),
            3 => q.millivolts_12v().map(drop),
            4 => q.set_mate_step(25),
            _ => PowerSwitch::identify(&mut q).map(drop),
        };
        let log = log.lock().unwrap().clone();
        match result {
            Ok(()) if op < 2 => {
                let (switch, want) = if op == 0 { ("RUN:POWer DOWN", ["OFF", "PULLED"]) } else { ("RUN:POWer UP", ["ON", "PLUGGED"]) };
                let switched = last_answer(&log, switch, module);
                prop_assert_eq!(switched.as_deref(), Some("OK"), "reported done without an OK: {:?}", log);
                let state = last_answer(&log, "RUN:POWer?", module);
                prop_assert!(state.as_deref().is_some_and(|s| want.contains(&s)), "reported done, state read {:?}: {:?}", state, log);
                if kind == ModuleKind::Power {
                    prop_assert!(
                        last_answer(&log, "Measure:Voltage 12V?", module).is_some(),
                        "power module switched without a rail reading"
                    );
                }
                confirmed.fetch_add(1, Ordering::Relaxed);
            }
            Ok(()) => {}
            Err(e) => power_error_is_clear(&e, &name)?,
        }
        Ok(())
    });
    assert!(confirmed.into_inner() > 0, "no scripted module ever confirmed a switch: the confirmation check was never exercised");
}

// --- HID relay feature reports -------------------------------------------------------------

/// A HID relay that returns whatever feature report the script says.
struct ScriptedBoard {
    reports: VecDeque<Result<Vec<u8>, rusb::Error>>,
}

impl HidReports for ScriptedBoard {
    fn write_output(&mut self, _report: &[u8]) -> Result<(), UsbError> {
        Ok(())
    }
    fn read_feature(&mut self, _id: u8, buf: &mut [u8]) -> Result<usize, UsbError> {
        let r = self
            .reports
            .pop_front()
            .unwrap_or(Err(rusb::Error::Timeout))
            .map_err(|source| UsbError::Report { request: "GET_REPORT", source })?;
        let n = r.len().min(buf.len());
        buf[..n].copy_from_slice(&r[..n]);
        Ok(n)
    }
}

#[test]
fn hid_relay_feature_reports_of_any_content() {
    let report = prop_oneof![8 => bytes(10).prop_map(Ok), 1 => Just(Err(rusb::Error::Pipe))];
    let strategy = (1u8..=8, proptest::collection::vec(report, 0..3), 0u8..4);
    check("hid_relay_feature_reports_of_any_content", CASES, strategy, |(relay, reports, op)| {
        let first = reports.first().cloned();
        let name = format!("hidrelay+usb://HURTM?relay={relay}");
        let mut r = HidRelay::new(ScriptedBoard { reports: reports.into() }, relay, name.clone()).expect("relay in range");
        let bit = |rep: &Option<Result<Vec<u8>, rusb::Error>>| match rep {
            Some(Ok(b)) if b.len() >= 8 => Some((b[7] >> (relay - 1)) & 1 == 1),
            _ => None,
        };
        match op {
            0 | 1 => match if op == 0 { r.power_off() } else { r.power_on() } {
                // Done only when the board's bitmask shows the relay switched.
                Ok(()) => prop_assert_eq!(bit(&first), Some(op == 1)),
                Err(e) => power_error_is_clear(&e, &name)?,
            },
            2 => match r.state() {
                Ok(s) => prop_assert_eq!(Some(s == PowerState::On), bit(&first)),
                Err(e) => {
                    prop_assert_eq!(bit(&first), None);
                    power_error_is_clear(&e, &name)?;
                }
            },
            _ => match r.bitmask() {
                Ok(m) => prop_assert_eq!(Some(m), first.and_then(|f| f.ok()).filter(|b| b.len() >= 8).map(|b| b[7])),
                Err(e) => power_error_is_clear(&e, &name)?,
            },
        }
        Ok(())
    });
}

// --- Quarch USB packets --------------------------------------------------------------------

/// A bulk pipe that reads back scripted packets (at most 64 bytes each).
struct ScriptedPipe {
    packets: VecDeque<Result<Vec<u8>, rusb::Error>>,
}

impl BulkPipe for ScriptedPipe {
    fn write(&mut self, packet: &[u8], _timeout: Duration) -> Result<usize, UsbError> {
        Ok(packet.len())
    }
    fn read(&mut self, buf: &mut [u8], _timeout: Duration) -> Result<usize, UsbError> {
        let p =
            self.packets.pop_front().unwrap_or(Err(rusb::Error::Timeout)).map_err(|source| UsbError::Bulk { op: "bulk read", source })?;
        let n = p.len().min(buf.len());
        buf[..n].copy_from_slice(&p[..n]);
        Ok(n)
    }
}

fn packet() -> impl Strategy<Value = Result<Vec<u8>, rusb::Error>> {
    let text = prop_oneof![
        Just(b"OK\r\n".to_vec()),
        Just(b">".to_vec()),
        Just(b"ON\x00\x00".to_vec()),
        "[ -~]{0,64}".prop_map(String::into_bytes)
    ];
    prop_oneof![
        4 => text.prop_map(Ok),
        2 => bytes(65).prop_map(Ok),
        1 => Just(Err(rusb::Error::Timeout)),
        1 => Just(Err(rusb::Error::Pipe)),
    ]
}

#[test]
fn quarch_usb_packets_of_any_content() {
    check("quarch_usb_packets_of_any_content", CASES, proptest::collection::vec(packet(), 0..8), |packets| {
        let mut w = QuarchUsbWire::new(ScriptedPipe { packets: packets.clone().into() });
        match w.exchange("RUN:POWer?", Duration::from_millis(200)) {
            Ok(text) => {
                prop_assert!(printable(&text) && text.trim() == text, "reply {:?}", text);
                prop_assert!(
                    packets.iter().any(|p| p.as_ref().is_ok_and(|b| b.trim_ascii_start().starts_with(b">"))),
                    "a reply without a prompt"
                );
            }
            Err(f) => wire_fault_is_clear(&f)?,
        }
        // The USB-mode lock reads the first packet after the unlock (the second one).
        let mut pipe = ScriptedPipe { packets: packets.clone().into() };
        let second = packets.get(1).cloned();
        match lock_usb_mode(&mut pipe, Duration::from_millis(50)) {
            Ok(()) => prop_assert!(second.is_some_and(|p| p.is_ok_and(|b| b.len() >= 3 && b[2] == 1))),
            Err(e) => prop_assert!(!e.to_string().trim().is_empty()),
        }
        Ok(())
    });
}

// --- NVMe Identify Controller --------------------------------------------------------------

#[test]
fn identify_controller_of_any_content() {
    check("identify_controller_of_any_content", 64, proptest::collection::vec(any::<u8>(), IDENTIFY_BYTES), |b| {
        let page: &[u8; IDENTIFY_BYTES] = b.as_slice().try_into().expect("4096 bytes");
        let id = ControllerIdentity::parse(page);
        prop_assert_eq!(id.vendor_id, u16::from_le_bytes([b[0], b[1]]));
        prop_assert_eq!(id.lpa, b[261]);
        for s in [&id.serial, &id.model, &id.firmware] {
            prop_assert!(!s.starts_with([' ', '\0']) && !s.ends_with([' ', '\0']), "{:?} not trimmed", s);
        }
        prop_assert!(id.serial.chars().count() <= 20 && id.model.chars().count() <= 40 && id.firmware.chars().count() <= 8);
        Ok(())
    });
}
