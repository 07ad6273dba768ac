//! Every power-controller driver end to end against its protocol emulator: the real
//! serialport code on a pseudo-terminal, the real TCP code on a loopback socket, and the
//! emulator driving a simulated drive's power, so "the drive is off" is checked on the drive.
//! Each scripted misbehaviour must end in recovery or a clear error, and never in success for
//! a command that failed. (USB transports are tested below the rusb layer, in the drivers
//! crate: USB cannot be emulated here.)
//!
//! Garbage bytes are seeded; the seed is printed at the start of each test.

use faultline_drivers::control::quarch::{DrivePort, ModuleKind, Quarch};
use faultline_drivers::control::{self, parse_spec, ControlEnv, ControllerSpec, QuarchTransport};
use faultline_drivers::{LinkController, PowerError, PowerShape, PowerState, PowerSwitch, ResetKind};
use faultline_fixtures::emu::{LcusEmu, Misbehaviour, NumatoEmu, QuarchEmu, QuarchKind, QuarchModule};
use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};
use std::time::Duration;

const SEED: u64 = 0x00C0_FFEE;
/// Longer than the drivers' timeout in `env()`.
const SLOWER_THAN_TIMEOUT: Duration = Duration::from_millis(1000);

fn drive(seed: u64) -> SimDrive {
    SimDrive::new(SimConfig {
        capacity_bytes: 1 << 20,
        sector_bytes: 512,
        atomic_bytes: 4096,
        queue_depth: 4,
        seed,
        model: FaultModel::HonestPlp,
        contract: TruthContract::Plp,
        dealloc_reads: Default::default(),
    })
}

fn env() -> ControlEnv {
    // Generous against a loaded CI machine: a spurious timeout would turn into a resend.
    ControlEnv { timeout: Duration::from_millis(800), attempts: 3, ..ControlEnv::default() }
}

#[derive(Clone, Copy, Debug)]
enum Link {
    Serial,
    Tcp,
}

fn quarch_emu(link: Link, kind: QuarchKind, d: &SimDrive) -> (QuarchEmu, String) {
    eprintln!("emulator seed {SEED:#x}, {link:?}, {kind:?}");
    let m = QuarchModule { kind, power: d.power() };
    match link {
        Link::Serial => {
            let e = QuarchEmu::serial(m, SEED).unwrap();
            let spec = format!("quarch+serial://{}", e.endpoint());
            (e, spec)
        }
        Link::Tcp => {
            let e = QuarchEmu::tcp(m, SEED).unwrap();
            let spec = format!("quarch+tcp://{}", e.endpoint());
            (e, spec)
        }
    }
}

fn open_quarch(spec: &str) -> Quarch {
    let ControllerSpec::Quarch { transport, module } = parse_spec(spec).unwrap() else { panic!("{spec}") };
    Quarch::open(&transport, module, &env()).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

fn count(emu: &QuarchEmu, cmd: &str) -> usize {
    emu.commands().iter().filter(|c| c.eq_ignore_ascii_case(cmd)).count()
}

const LINKS: [Link; 2] = [Link::Serial, Link::Tcp];

#[test]
fn quarch_cuts_and_restores_the_simulated_drive() {
    for link in LINKS {
        for kind in [QuarchKind::HotPlug, QuarchKind::Power] {
            let d = drive(1);
            let (_emu, spec) = quarch_emu(link, kind, &d);
            let c = control::open(&parse_spec(&spec).unwrap(), &env()).unwrap();
            let mut p = c.power.expect("a Quarch module is a power switch");
            let caps = p.capabilities();
            assert!(caps.state_readback && caps.acknowledges);
            assert_eq!(caps.voltage_readback, kind == QuarchKind::Power, "{link:?} {kind:?}");
            assert!(p.identify().unwrap().contains("Name:"));
            p.power_off().unwrap();
            assert!(!d.present(), "{link:?} {kind:?}: the drive must be off");
            assert_eq!(p.state().unwrap(), PowerState::Off);
            p.power_on().unwrap();
            assert!(d.present());
            assert_eq!(p.state().unwrap(), PowerState::On);
            assert_eq!(d.cuts(), 1);
        }
    }
}

#[test]
fn quarch_fail_reply_is_an_error_and_not_retried() {
    for link in LINKS {
        let d = drive(2);
        let (emu, spec) = quarch_emu(link, QuarchKind::HotPlug, &d);
        let mut q = open_quarch(&spec);
        emu.faults().inject("RUN:POWER DOWN", Misbehaviour::Fail, 1);
        let e = q.power_off().unwrap_err().to_string();
        assert!(e.contains(&spec) && e.contains("RUN:POWer DOWN") && e.contains("FAIL: 0x41"), "{link:?}: {e}");
        assert!(d.present(), "{link:?}: a failed cut must not have happened");
        assert_eq!(count(&emu, "RUN:POWer DOWN"), 1, "{link:?}: FAIL is the module's answer, never retried");
        // The link is still in step: the next command works.
        q.power_off().unwrap();
        assert!(!d.present());
    }
}

#[test]
fn quarch_recovers_from_garbage_a_missing_prompt_and_a_slow_reply() {
    for link in LINKS {
        for (what, m) in [
            ("garbage", Misbehaviour::Garbage),
            ("no prompt", Misbehaviour::NoPrompt),
            ("slow beyond the timeout", Misbehaviour::Slow(SLOWER_THAN_TIMEOUT)),
            ("slow within the timeout", Misbehaviour::Slow(Duration::from_millis(50))),
        ] {
            let d = drive(3);
            let (emu, spec) = quarch_emu(link, QuarchKind::Power, &d);
            let mut q = open_quarch(&spec);
            emu.faults().inject("RUN:POWER DOWN", m, 1);
            emu.faults().inject("RUN:POWER?", m, 1);
            q.power_off().unwrap_or_else(|e| panic!("{link:?} {what}: {e}"));
            assert!(!d.present(), "{link:?} {what}");
            assert_eq!(emu.faults().pending(), 0, "{link:?} {what}: every scripted fault was met");
            q.power_on().unwrap_or_else(|e| panic!("{link:?} {what}: after recovery: {e}"));
            assert!(d.present());
        }
    }
}

#[test]
fn quarch_gives_up_clearly_when_every_attempt_fails() {
    for link in LINKS {
        let d = drive(4);
        let (emu, spec) = quarch_emu(link, QuarchKind::HotPlug, &d);
        let mut q = open_quarch(&spec);
        emu.faults().inject("RUN:POWER?", Misbehaviour::Garbage, 10);
        let e = q.power_off().unwrap_err().to_string();
        assert!(
            e.contains(&spec) && e.contains("RUN:POWer?") && e.contains("gave up after 3 attempts") && e.contains("garbled"),
            "{link:?}: {e}"
        );
    }
}

#[test]
fn quarch_disconnect_mid_command() {
    // TCP: the driver reconnects and resends; the command ran once.
    let d = drive(5);
    let (emu, spec) = quarch_emu(Link::Tcp, QuarchKind::HotPlug, &d);
    let mut q = open_quarch(&spec);
    emu.faults().inject("RUN:POWER DOWN", Misbehaviour::Disconnect, 1);
    q.power_off().unwrap();
    assert!(!d.present());
    assert_eq!(count(&emu, "RUN:POWer DOWN"), 2);

    // Serial: the module is gone for good; the driver fails, naming the command, and the cut
    // did not happen.
    let d = drive(6);
    let (emu, spec) = quarch_emu(Link::Serial, QuarchKind::HotPlug, &d);
    let mut q = open_quarch(&spec);
    emu.faults().inject("RUN:POWER DOWN", Misbehaviour::Disconnect, 1);
    let e = q.power_off().unwrap_err().to_string();
    assert!(e.contains(&spec) && e.contains("RUN:POWer DOWN") && e.contains("gave up"), "{e}");
    assert!(d.present());
}

#[test]
fn quarch_torridon_addresses_one_module() {
    for link in LINKS {
        eprintln!("emulator seed {SEED:#x}, {link:?}");
        let (d2, d5) = (drive(7), drive(8));
        let modules = vec![
            (2, QuarchModule { kind: QuarchKind::HotPlug, power: d2.power() }),
            (5, QuarchModule { kind: QuarchKind::Power, power: d5.power() }),
        ];
        let (emu, base) = match link {
            Link::Serial => {
                let e = QuarchEmu::serial_torridon(modules, SEED).unwrap();
                let s = format!("quarch+serial://{}", e.endpoint());
                (e, s)
            }
            Link::Tcp => {
                let e = QuarchEmu::tcp_torridon(modules, SEED).unwrap();
                let s = format!("quarch+tcp://{}", e.endpoint());
                (e, s)
            }
        };
        let mut q = open_quarch(&format!("{base}?module=5"));
        assert_eq!(q.kind(), ModuleKind::Power);
        q.power_off().unwrap();
        assert!(!d5.present() && d2.present(), "{link:?}: only module 5's drive is cut");
        assert!(emu.commands().iter().any(|c| c == "RUN:POWer DOWN <5>"));
        q.power_on().unwrap();
        assert!(d5.present());
        // A port with no module: the controller's FAIL comes back as an error. (The serial port
        // is opened exclusively, so the first handle goes first.)
        drop(q);
        let ControllerSpec::Quarch { transport, .. } = parse_spec(&base).unwrap() else { panic!() };
        let e = Quarch::open(&transport, Some(7), &env()).err().expect("no module on port 7").to_string();
        assert!(e.contains("No module on port 7"), "{e}");
    }
}

#[test]
fn quarch_hotplug_port_pull_perst_mate_speed_and_glitch() {
    let d = drive(9);
    let (emu, spec) = quarch_emu(Link::Serial, QuarchKind::HotPlug, &d);
    let q = open_quarch(&spec);
    q.pull_port(DrivePort::A).unwrap();
    assert!(emu.port_pulled(1, "PORT_A") && !emu.port_pulled(1, "PORT_B"));
    assert!(d.present(), "pulling one port keeps the drive powered");
    q.restore_port(DrivePort::A).unwrap();
    assert!(!emu.port_pulled(1, "PORT_A"));

    let mut link: Box<dyn LinkController> = Box::new(q.clone());
    link.require("B", ResetKind::PortPull).unwrap();
    assert!(link.require("B", ResetKind::Perst).is_err());
    link.reset("B", ResetKind::PortPull, Duration::from_millis(5)).unwrap();
    assert!(!emu.port_pulled(1, "PORT_B"));
    assert_eq!(count(&emu, "SIGnal:PORT_B:SOURce 0"), 1);

    q.set_mate_step(25).unwrap();
    assert_eq!(emu.source_delays(1).into_iter().collect::<Vec<_>>(), vec![(1, 0), (2, 25), (3, 50), (4, 50), (5, 50), (6, 50)]);
    // The same through the power-switch trait, as the cycle runner sets it before each cut.
    let mut p: Box<dyn PowerSwitch> = Box::new(q.clone());
    p.set_mate_step(10).unwrap();
    assert_eq!(emu.source_delays(1).values().copied().collect::<Vec<_>>(), vec![0, 10, 20, 20, 20, 20]);
    // Very slow (500 ms) fits a module's limits only on three sources: 1000 ms is the last.
    p.set_mate_step(500).unwrap();
    assert_eq!(emu.source_delays(1).values().copied().collect::<Vec<_>>(), vec![0, 500, 1000, 1000, 1000, 1000]);
    let sent = emu.commands().len();
    let e = p.set_mate_step(700).unwrap_err().to_string();
    assert!(e.contains("1400 ms") && e.contains("1270"), "{e}");
    assert_eq!(emu.commands().len(), sent, "a step out of range is refused before anything is sent");
    q.perst(true).unwrap();
    assert_eq!(emu.perst(1), (Some(0), true));
    q.perst(false).unwrap();
    assert_eq!(emu.perst(1), (Some(1), true));
    let sent = emu.commands().len();
    q.glitch(&["12V_POWER".to_string(), "12V_CHARGE".to_string()], std::time::Duration::from_millis(10)).unwrap();
    assert_eq!(emu.glitches(1), 1);
    // 10 ms is past the simulated drive's hold-up: it went, and came back.
    assert_eq!((d.cuts(), d.present()), (1, true));
    let said: Vec<String> = emu.commands()[sent..].to_vec();
    assert_eq!(
        said.iter().map(|c| c.to_ascii_uppercase()).collect::<Vec<_>>(),
        ["SIGNAL:12V_POWER:GLITCH:ENABLE ON", "SIGNAL:12V_CHARGE:GLITCH:ENABLE ON", "GLITCH:SETUP 50US 200", "RUN:GLITCH ONCE"],
        "{said:?}"
    );
    // Past what the engine can time: refused before anything is sent.
    let sent = emu.commands().len();
    let e = q.glitch(&["12V_POWER".to_string()], std::time::Duration::from_secs(200)).unwrap_err().to_string();
    assert!(e.contains("50 ns to 127.5 s"), "{e}");
    assert_eq!(emu.commands().len(), sent);
    let e = q.millivolts_12v().unwrap_err();
    assert!(matches!(e, PowerError::Unsupported { .. }), "{e}");
}

#[test]
fn quarch_power_module_refuses_hotplug_functions_up_front() {
    let d = drive(10);
    let (_emu, spec) = quarch_emu(Link::Tcp, QuarchKind::Power, &d);
    let q = open_quarch(&spec);
    assert!(matches!(q.pull_port(DrivePort::A), Err(PowerError::Unsupported { .. })));
    assert!(q.ports().is_empty());
    let e = q.require("A", ResetKind::PortPull).unwrap_err().to_string();
    assert!(e.contains("cannot do port-pull") && e.contains("it can: nothing"), "{e}");
    assert!(q.millivolts_12v().unwrap() > 11_000);
    let mut p: Box<dyn PowerSwitch> = Box::new(q.clone());
    let e = p.set_mate_step(25).unwrap_err().to_string();
    assert!(e.contains("hot-plug"), "{e}");
}

/// A power module's sag and ramp, through the emulator on a pty: the commands quarchpy's
/// margining test sends (`SIGnal:12V:VOLTage <mV>`), the rail read back first and put back
/// after, and the simulated drive feeling each step (an honest drive cut below its detector,
/// back with the rail). A hot-plug module and a relay refuse them, before anything is sent.
#[test]
fn quarch_power_module_sags_and_ramps_its_rail_and_the_drive_feels_each_step() {
    let d = drive(13);
    let (emu, spec) = quarch_emu(Link::Serial, QuarchKind::Power, &d);
    let mut p: Box<dyn PowerSwitch> = Box::new(open_quarch(&spec));
    let sent = emu.commands().len();
    let sag = PowerShape::Sag { rail: "12V".into(), to_mv: 11_000, length: Duration::from_millis(2) };
    let glitch = PowerShape::Glitch { signals: vec!["12V_POWER".into()], length: Duration::from_millis(1) };
    // Declared up front: a power module sets its rails and has no glitch engine.
    assert!(p.capabilities().makes(&sag) && !p.capabilities().makes(&glitch));
    p.shape(&sag).unwrap();
    let said: Vec<String> = emu.commands()[sent..].iter().map(|c| c.to_ascii_uppercase()).collect();
    assert_eq!(said, ["SIGNAL:12V:VOLTAGE?", "SIGNAL:12V:VOLTAGE 11000", "SIGNAL:12V:VOLTAGE 12000"], "{said:?}");
    assert_eq!(d.cuts(), 0, "11 V is above an honest drive's detector");
    // Deeper: the drive's detector trips, and it is back with the rail.
    p.shape(&PowerShape::Sag { rail: "12V".into(), to_mv: 9_000, length: Duration::from_millis(2) }).unwrap();
    assert_eq!((d.cuts(), d.present()), (1, true));
    assert_eq!(p.state().unwrap(), PowerState::On);
    // A ramp to nothing over 50 ms: five steps down, held, and back.
    let sent = emu.commands().len();
    let ramp = PowerShape::Ramp { rail: "12V".into(), to_mv: 0, over: Duration::from_millis(50), hold: Duration::from_millis(5) };
    p.shape(&ramp).unwrap();
    let said: Vec<String> = emu.commands()[sent..].iter().map(|c| c.to_ascii_uppercase().replace("SIGNAL:12V:VOLTAGE", "")).collect();
    assert_eq!(said, ["?", " 9600", " 7200", " 4800", " 2400", " 0", " 12000"], "{said:?}");
    assert_eq!((d.cuts(), d.present()), (2, true));
    // A step the module fails: the shape fails, and the rail is put back all the same.
    emu.faults().inject("SIGnal:12V:VOLTage 7200", Misbehaviour::Fail, 1);
    let e = p.shape(&ramp).unwrap_err().to_string();
    assert!(e.contains("SIGnal:12V:VOLTage 7200") && e.contains("Emulated failure"), "{e}");
    assert_eq!(emu.commands().last().map(|c| c.to_ascii_uppercase()), Some("SIGNAL:12V:VOLTAGE 12000".into()));
    assert_eq!((d.cuts(), d.present()), (3, true), "9.6 V cut the drive; back with the rail");
    // Past the rail's limit, or a rail the module does not have: refused, nothing set.
    let sent = emu.commands().len();
    let e = p.shape(&PowerShape::Sag { rail: "12V".into(), to_mv: 15_000, length: Duration::from_millis(1) }).unwrap_err().to_string();
    assert!(e.contains("0 to 14400 mV"), "{e}");
    let e = p.shape(&PowerShape::Sag { rail: "24V".into(), to_mv: 1_000, length: Duration::from_millis(1) }).unwrap_err().to_string();
    assert!(e.contains("12V, 5V and 3V3"), "{e}");
    assert_eq!(emu.commands().len(), sent, "refused before anything is sent");
    // A hot-plug module cannot set a voltage; a relay cannot shape the power at all.
    let d2 = drive(14);
    let (emu2, spec2) = quarch_emu(Link::Serial, QuarchKind::HotPlug, &d2);
    let mut hot: Box<dyn PowerSwitch> = Box::new(open_quarch(&spec2));
    assert!(hot.capabilities().makes(&glitch) && !hot.capabilities().makes(&sag));
    let sent = emu2.commands().len();
    let e = hot.shape(&sag).unwrap_err();
    assert!(matches!(e, PowerError::Unsupported { .. }) && e.to_string().contains("only a power module"), "{e}");
    assert_eq!(emu2.commands().len(), sent);
    let lcus = LcusEmu::new(vec![(1, drive(15).power())]).unwrap();
    let mut relay =
        control::open(&parse_spec(&format!("lcus+serial://{}?channel=1", lcus.path())).unwrap(), &env()).unwrap().power.unwrap();
    assert!(!relay.capabilities().makes(&sag) && !relay.capabilities().makes(&glitch));
    let e = relay.shape(&sag).unwrap_err().to_string();
    assert!(e.contains("cannot sag the 12V rail") && e.contains("not shape it"), "{e}");
}

#[test]
fn lcus_cuts_without_acknowledgement_and_says_so() {
    let (d1, d2) = (drive(11), drive(12));
    let emu = LcusEmu::new(vec![(1, d1.power()), (2, d2.power())]).unwrap();
    let spec = format!("lcus+serial://{}?channel=2", emu.path());
    let mut p = control::open(&parse_spec(&spec).unwrap(), &env()).unwrap().power.unwrap();
    let caps = p.capabilities();
    assert!(!caps.acknowledges && !caps.confirms_cut(), "an LCUS cut must be confirmed by the device disappearing");
    assert!(matches!(p.state(), Err(PowerError::Unsupported { .. })));
    assert!(matches!(p.set_mate_step(25), Err(PowerError::Unsupported { .. })), "a relay has no pin-mate sequencing");
    p.power_off().unwrap();
    wait_until(|| !d2.present());
    assert!(d1.present());
    p.power_on().unwrap();
    wait_until(|| d2.present());
    assert_eq!(emu.frames(), vec![[0xA0, 2, 0, 0xA2], [0xA0, 2, 1, 0xA3]]);
    // A frame the board drops is indistinguishable from success at the switch: exactly why the
    // capabilities say the cut needs confirming elsewhere.
    emu.faults().inject("02", Misbehaviour::Ignore, 1);
    p.power_off().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(d2.present());
}

#[test]
fn numato_switches_confirms_and_recovers() {
    eprintln!("emulator seed {SEED:#x}");
    let d = drive(13);
    let emu = NumatoEmu::new(vec![(3, d.power())], SEED).unwrap();
    let spec = format!("numato+serial://{}?relay=3", emu.path());
    let mut p = control::open(&parse_spec(&spec).unwrap(), &env()).unwrap().power.unwrap();
    // A process started meanwhile (as another test's, or a transport) inherits no fd of the
    // pty: one that held the master kept it alive after the disconnect below, which then
    // read as silence, not as a board that hung up (seen with 4 tests at a time).
    let mut child = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    assert!(p.capabilities().confirms_cut());
    assert!(p.identify().unwrap().contains("00000008"));
    p.power_off().unwrap();
    assert!(!d.present());
    assert_eq!(p.state().unwrap(), PowerState::Off);
    p.power_on().unwrap();
    assert!(d.present());

    // The board says nothing wrong but did not switch: the readback catches it.
    emu.faults().inject("relay off", Misbehaviour::Fail, 1);
    let e = p.power_off().unwrap_err().to_string();
    assert!(e.contains(&spec) && e.contains("relay off 3") && e.contains("reads on afterwards"), "{e}");
    assert!(d.present());

    for m in [Misbehaviour::Garbage, Misbehaviour::NoPrompt, Misbehaviour::Slow(SLOWER_THAN_TIMEOUT)] {
        emu.faults().inject("relay off", m, 1);
        p.power_off().unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert!(!d.present(), "{m:?}");
        p.power_on().unwrap();
    }
    emu.faults().inject("relay read", Misbehaviour::Garbage, 10);
    let e = p.state().unwrap_err().to_string();
    assert!(e.contains("gave up after 3 attempts") && e.contains("relay read 3"), "{e}");

    // The board unplugged mid-command (the pty closed for good, as a USB tty hangs up): no
    // retry on a dead tty, and a message that says the board is gone; the relay never switched.
    emu.faults().inject("relay off", Misbehaviour::Disconnect, 1);
    let e = p.power_off().unwrap_err().to_string();
    assert!(e.contains(&spec) && e.contains("relay off 3") && e.contains("the board is gone: its tty hung up"), "{e}");
    assert!(!e.contains("gave up after"), "no resend to a tty that hung up: {e}");
    assert!(d.present());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn sim_spec_is_left_to_the_binary_and_bad_specs_list_the_forms() {
    assert!(matches!(control::open(&ControllerSpec::Sim, &env()), Err(control::OpenError::Power(PowerError::Unsupported { .. }))));
    let e = parse_spec("quarch+serial://ttyUSB0").unwrap_err().to_string();
    assert!(e.contains("absolute path") && e.contains("hidrelay+usb://SERIAL?relay=N"), "{e}");
    // A controller that is not there fails at open, naming it.
    let ControllerSpec::Quarch { transport, module } = parse_spec("quarch+serial:///dev/faultline-no-such-tty").unwrap() else { panic!() };
    assert!(matches!(transport, QuarchTransport::Serial(_)));
    let e = Quarch::open(&transport, module, &env()).err().unwrap().to_string();
    assert!(e.contains("quarch+serial:///dev/faultline-no-such-tty") && e.contains("cannot open serial port"), "{e}");
}

/// LCUS frames are not acknowledged, so the emulator may act a moment after the write returns.
fn wait_until(ok: impl Fn() -> bool) {
    for _ in 0..200 {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("condition not met within 1 s");
}

#[test]
fn cli_brings_up_a_controller_through_its_emulator() {
    let d = drive(14);
    let (emu, spec) = quarch_emu(Link::Tcp, QuarchKind::Power, &d);
    let bin = env!("CARGO_BIN_EXE_faultline");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, out, err) = run(&["controller", &spec, "identify"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("Programmable Power Module"), "{out}");
    let (code, out, err) = run(&["controller", &spec, "cycle", "--off-ms", "10"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("state: off") && out.contains("state: on"), "{out}");
    assert_eq!(d.cuts(), 1);
    assert!(d.present());
    emu.faults().inject("RUN:POWER DOWN", Misbehaviour::Fail, 1);
    let (code, out, err) = run(&["controller", &spec, "off"]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(err.contains("FAIL: 0x41") && d.present(), "{err}");
    let (code, _, err) = run(&["controller", "quarch+tcp://", "status"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("accepted forms:"), "{err}");
    let (code, out, _) = run(&["controller", "sim", "cycle", "--off-ms", "1"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("does not persist"), "{out}");
}
