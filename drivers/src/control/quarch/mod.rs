//! Quarch power modules, hot-plug (drive control) modules and Torridon array controllers.
//!
//! Protocol (`docs/DOMAIN.md` section 5, checked against Quarch's public Python
//! client quarchpy, `connection_TCP.py` and `connection_USB.py`):
//! - Text commands, case-insensitive SCPI style; replies `OK`, `FAIL...`, or a value.
//! - Serial: 19200 8N1, no flow control. `CMD\r\n`; the module echoes the line, then the reply,
//!   then the prompt `>` at the start of a line.
//! - TCP (port 9760): a command goes out as `[len][0x00]CMD\r\n`, the 16-bit little-endian
//!   count of `CMD\r\n`; a reply is a packet with the same 2-byte length and the text ending
//!   `\r\n>`. No echo. A module sends one packet per reply (quarchpy strips two bytes per
//!   `recv`, so it could not read more); we reassemble any number, honouring each length.
//!   docs/CONTROLLERS.md has the sources.
//! - USB (vendor 0x16D0, product 0x0449): interface 0, the command endpoint is the highest
//!   OUT endpoint; commands NUL-padded to 64 bytes; reply packets until one that starts with
//!   `>`. Modules with 64-byte endpoints are first locked into USB mode (`02 00 00 01 04 01`,
//!   reply byte 2 = 1) and unlocked on close (`02 00 00 01 03 00`). See `usb.rs` in this folder.
//! - Torridon: ` <N>` appended addresses the module on port N; replies may come back prefixed
//!   by `<N>`, which is stripped.
//!
//! Recovery: a reply whose echo does not match, that holds non-text bytes, that never reaches
//! the prompt, or a dropped connection is a link fault: the driver resynchronises (drains,
//! sends an empty line and waits for a prompt; reconnects on TCP) and resends, at most
//! `ControlEnv::attempts` times in all. Only idempotent commands are sent (set power state,
//! set a source), so a resend is safe. A reply `FAIL...` is the module's answer and is never
//! retried. `power_off` and `power_on` confirm the new state by `RUN:POWer?`, and power
//! modules also by measuring the 12 V rail.
//!
//! The hot-plug signal commands (port pull, PERST#, pin-mate source delays, glitch) follow the
//! signal/source model of docs/DOMAIN.md section 5; check the exact signal names against the
//! module's technical manual before relying on them.

//!
//! Files: `mod.rs` (this: the module driver, power switch and link controller), `shape.rs`
//! (glitches, sags and ramps), `wire.rs` (the
//! wire trait, its faults, serial and TCP framing), `usb.rs` (the USB framing over
//! `control::usb::BulkPipe`).

mod shape;
pub mod usb;
pub mod wire;

pub use shape::{glitch_setup, rail_limit_mv, ramp_steps};

pub use usb::QuarchUsbWire;
pub use wire::{QuarchWire, SerialWire, TcpWire, WireError, WireFault};

use crate::control::{ControlEnv, ControllerSpec, QuarchTransport};
use crate::link::{LinkController, LinkError, PortCaps, ResetKind};
use crate::power::{PowerCaps, PowerError, PowerShape, PowerState, PowerSwitch};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A power module's 12 V rail below this counts as off.
pub const OFF_MILLIVOLTS: u32 = 500;
/// A power module's 12 V rail above this counts as on.
pub const ON_MILLIVOLTS: u32 = 10_000;

// --- the module ------------------------------------------------------------------------------

/// What kind of module answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleKind {
    /// Hot-plug / drive control module: `RUN:POWer?` answers `PLUGGED`/`PULLED`, signals are
    /// assigned to timed sources.
    HotPlug,
    /// Power module: `RUN:POWer?` answers `ON`/`OFF`; rails can be measured.
    Power,
}

/// One port of a dual-port drive, as a hot-plug module's signal groups name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrivePort {
    A,
    B,
}

impl DrivePort {
    fn signal(self) -> &'static str {
        match self {
            DrivePort::A => "PORT_A",
            DrivePort::B => "PORT_B",
        }
    }
}

/// Pin-mate sequencing speeds (UNH-IOL plugfest): the step between timed sources, in ms.
pub const MATE_SPEEDS_MS: [(&str, u32); 4] = [("fast", 10), ("standard", 25), ("slow", 100), ("very-slow", 500)];

struct Conn {
    wire: Box<dyn QuarchWire>,
    name: String,
    module: Option<u8>,
    kind: ModuleKind,
    idn: String,
    timeout: Duration,
    attempts: u32,
}

/// A Quarch module. Clones share one connection, so one handle can serve as the power switch
/// and another as the link controller (port pulls, PERST#).
#[derive(Clone)]
pub struct Quarch {
    conn: Arc<Mutex<Conn>>,
}

impl Quarch {
    /// Opens the transport a spec names and identifies the module.
    pub fn open(t: &QuarchTransport, module: Option<u8>, env: &ControlEnv) -> Result<Quarch, PowerError> {
        let name = ControllerSpec::Quarch { transport: t.clone(), module }.to_string();
        let fail = |e: WireError| PowerError::Failed { switch: name.clone(), command: "open".into(), reason: e.to_string() };
        let wire: Box<dyn QuarchWire> = match t {
            QuarchTransport::Serial(p) => Box::new(SerialWire::open(p, env.timeout).map_err(fail)?),
            QuarchTransport::Tcp { host, port } => Box::new(TcpWire::connect(host, *port, env.timeout).map_err(fail)?),
            QuarchTransport::Usb { serial } => Box::new(QuarchUsbWire::open(serial, env.timeout).map_err(fail)?),
        };
        Quarch::with_wire(wire, name, module, env)
    }

    /// Identifies the module behind an open wire (`*IDN?`) and decides its kind from the name
    /// it gives: one with "power" in it is a power module, anything else a hot-plug module.
    pub fn with_wire(wire: Box<dyn QuarchWire>, name: String, module: Option<u8>, env: &ControlEnv) -> Result<Quarch, PowerError> {
        let mut conn =
            Conn { wire, name, module, kind: ModuleKind::HotPlug, idn: String::new(), timeout: env.timeout, attempts: env.attempts.max(1) };
        let idn = conn.command("*IDN?")?;
        let module_name = idn.lines().find_map(|l| l.trim().strip_prefix("Name:").map(|v| v.trim().to_string())).ok_or_else(|| {
            PowerError::Failed { switch: conn.name.clone(), command: "*IDN?".into(), reason: format!("no `Name:` line in {idn:?}") }
        })?;
        conn.kind = if module_name.to_ascii_lowercase().contains("power") { ModuleKind::Power } else { ModuleKind::HotPlug };
        conn.idn = idn;
        Ok(Quarch { conn: Arc::new(Mutex::new(conn)) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn kind(&self) -> ModuleKind {
        self.lock().kind
    }

    /// Sends one command and returns the module's value reply; `FAIL...` is an error.
    pub fn command(&self, cmd: &str) -> Result<String, PowerError> {
        self.lock().command(cmd)
    }

    /// Sends a command that must be answered `OK`.
    pub fn command_ok(&self, cmd: &str) -> Result<(), PowerError> {
        self.lock().command_ok(cmd)
    }

    /// Hot-plug modules: disconnects one port's signals of a dual-port drive, keeping power and
    /// the other port.
    pub fn pull_port(&self, port: DrivePort) -> Result<(), PowerError> {
        let mut c = self.lock();
        c.require_hotplug("pull one port")?;
        c.command_ok(&format!("SIGnal:{}:SOURce 0", port.signal()))?;
        c.command_ok("RUN:POWer UP")
    }

    /// Hot-plug modules: reconnects a pulled port (back to the first timed source).
    pub fn restore_port(&self, port: DrivePort) -> Result<(), PowerError> {
        let mut c = self.lock();
        c.require_hotplug("restore one port")?;
        c.command_ok(&format!("SIGnal:{}:SOURce 1", port.signal()))?;
        c.command_ok("RUN:POWer UP")
    }

    /// Hot-plug modules: pin-mate sequencing speed. The signals of a drive's connector sit on
    /// timed sources 1..=3 by default (Quarch AN-003): source N switches `(N-1) * step_ms`
    /// after the first, and sources 4..=6 with source 3, as AN-003 sets them. A source takes
    /// 0..=127 ms, or up to 1270 ms in 10 ms steps (the module config files): a step whose last
    /// delay is outside that is refused before anything is sent. [`MATE_SPEEDS_MS`] lists the
    /// usual steps, all within it.
    pub fn set_mate_step(&self, step_ms: u32) -> Result<(), PowerError> {
        let mut c = self.lock();
        c.require_hotplug("set pin-mate sequencing")?;
        let last = 2 * step_ms;
        if !(last <= 127 || (last <= 1270 && last.is_multiple_of(10))) {
            return Err(c.err(
                "SOURce:3:DELay",
                format!("a {step_ms} ms step puts source 3 at {last} ms; a source takes 0-127 ms, or up to 1270 ms in 10 ms steps"),
            ));
        }
        for n in 1..=6u32 {
            c.command_ok(&format!("SOURce:{n}:DELay {}", (n.min(3) - 1) * step_ms))?;
        }
        Ok(())
    }

    /// Hot-plug modules: drives PERST# low (asserted) or releases it to its timed source.
    pub fn perst(&self, assert: bool) -> Result<(), PowerError> {
        let mut c = self.lock();
        c.require_hotplug("drive PERST#")?;
        if assert {
            c.command_ok("SIGnal:PERST:DRIve:OPEn LOW")?;
            c.command_ok("SIGnal:PERST:SOURce 0")?;
        } else {
            c.command_ok("SIGnal:PERST:SOURce 1")?;
        }
        c.command_ok("RUN:POWer UP")
    }

    /// Power modules: the 12 V rail in millivolts.
    pub fn millivolts_12v(&self) -> Result<u32, PowerError> {
        self.lock().millivolts("12V")
    }
}

impl Conn {
    fn err(&self, command: &str, reason: String) -> PowerError {
        PowerError::Failed { switch: self.name.clone(), command: command.to_string(), reason }
    }

    fn require_hotplug(&self, what: &str) -> Result<(), PowerError> {
        if self.kind == ModuleKind::HotPlug {
            Ok(())
        } else {
            Err(PowerError::Unsupported {
                switch: self.name.clone(),
                what: format!("{what} (it is a power module, not a hot-plug module)"),
            })
        }
    }

    fn command(&mut self, cmd: &str) -> Result<String, PowerError> {
        let addressed = match self.module {
            Some(m) => format!("{cmd} <{m}>"),
            None => cmd.to_string(),
        };
        let mut faults = Vec::new();
        for attempt in 0..self.attempts {
            if attempt > 0 {
                if let Err(f) = self.wire.resync(self.timeout) {
                    faults.push(format!("resync: {f}"));
                    continue;
                }
            }
            match self.wire.exchange(&addressed, self.timeout) {
                Ok(reply) => {
                    let reply = self.strip_address(&reply);
                    if reply.to_ascii_uppercase().starts_with("FAIL") {
                        return Err(self.err(&addressed, format!("module answered {reply:?}")));
                    }
                    return Ok(reply);
                }
                // A module that left the bus is not there to retry: say so at once.
                Err(f @ WireFault::Gone { .. }) => return Err(self.err(&addressed, f.to_string())),
                Err(f) => faults.push(f.to_string()),
            }
        }
        Err(self.err(&addressed, format!("gave up after {} attempts: {}", self.attempts, faults.join("; "))))
    }

    fn strip_address(&self, reply: &str) -> String {
        if let Some(m) = self.module {
            if let Some(rest) = reply.strip_prefix(&format!("<{m}>")) {
                return rest.trim().to_string();
            }
        }
        reply.to_string()
    }

    fn command_ok(&mut self, cmd: &str) -> Result<(), PowerError> {
        let r = self.command(cmd)?;
        if r.eq_ignore_ascii_case("OK") {
            Ok(())
        } else {
            Err(self.err(cmd, format!("expected OK, module answered {r:?}")))
        }
    }

    fn state(&mut self) -> Result<PowerState, PowerError> {
        let r = self.command("RUN:POWer?")?;
        match r.to_ascii_uppercase().as_str() {
            "ON" | "PLUGGED" => Ok(PowerState::On),
            "OFF" | "PULLED" => Ok(PowerState::Off),
            _ => Err(self.err("RUN:POWer?", format!("expected ON, OFF, PLUGGED or PULLED, module answered {r:?}"))),
        }
    }

    fn millivolts(&mut self, rail: &str) -> Result<u32, PowerError> {
        if self.kind != ModuleKind::Power {
            return Err(PowerError::Unsupported { switch: self.name.clone(), what: "measure voltage (not a power module)".into() });
        }
        let cmd = format!("Measure:Voltage {rail}?");
        let r = self.command(&cmd)?;
        // A measurement a hair below zero (an idle rail's noise, at most a volt) reads as 0.
        let t = r.trim();
        let measured = match t.strip_prefix('-') {
            Some(neg) => shape::parse_millivolts(neg).filter(|mv| *mv <= 1000).map(|_| 0),
            None => shape::parse_millivolts(t),
        };
        measured.ok_or_else(|| self.err(&cmd, format!("expected a voltage such as 12000mV, module answered {r:?}")))
    }

    fn set_power(&mut self, want: PowerState) -> Result<(), PowerError> {
        let cmd = if want == PowerState::Off { "RUN:POWer DOWN" } else { "RUN:POWer UP" };
        self.command_ok(cmd)?;
        let got = self.state()?;
        if got != want {
            return Err(self.err(cmd, format!("module answered OK but RUN:POWer? then said {got}")));
        }
        if self.kind == ModuleKind::Power {
            let mv = self.millivolts("12V")?;
            let ok = if want == PowerState::Off { mv < OFF_MILLIVOLTS } else { mv > ON_MILLIVOLTS };
            if !ok {
                return Err(self.err(cmd, format!("the 12V rail reads {mv} mV after power {want}")));
            }
        }
        Ok(())
    }
}

impl PowerSwitch for Quarch {
    fn name(&self) -> String {
        self.lock().name.clone()
    }

    fn capabilities(&self) -> PowerCaps {
        let (power, hot) = (self.kind() == ModuleKind::Power, self.kind() == ModuleKind::HotPlug);
        PowerCaps { state_readback: true, voltage_readback: power, acknowledges: true, glitch_engine: hot, programmable_rails: power }
    }

    fn power_off(&mut self) -> Result<(), PowerError> {
        self.lock().set_power(PowerState::Off)
    }

    fn power_on(&mut self) -> Result<(), PowerError> {
        self.lock().set_power(PowerState::On)
    }

    fn state(&mut self) -> Result<PowerState, PowerError> {
        self.lock().state()
    }

    fn identify(&mut self) -> Result<String, PowerError> {
        let c = self.lock();
        // The module's line ends (`\r\n`) as the terminal's.
        let idn: Vec<&str> = c.idn.lines().map(str::trim_end).collect();
        Ok(format!("{} ({:?} module)\n{}", c.name, c.kind, idn.join("\n")))
    }

    fn shape(&mut self, shape: &PowerShape) -> Result<(), PowerError> {
        Quarch::shape(self, shape)
    }

    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), PowerError> {
        Quarch::set_mate_step(self, step_ms)
    }
}

impl LinkController for Quarch {
    fn name(&self) -> String {
        self.lock().name.clone()
    }

    fn ports(&self) -> Vec<PortCaps> {
        if self.kind() != ModuleKind::HotPlug {
            return Vec::new();
        }
        vec![
            PortCaps { port: "A".into(), kinds: vec![ResetKind::PortPull, ResetKind::Perst] },
            PortCaps { port: "B".into(), kinds: vec![ResetKind::PortPull] },
        ]
    }

    fn reset(&mut self, port: &str, kind: ResetKind, hold: Duration) -> Result<(), LinkError> {
        self.require(port, kind)?;
        let to_link = |e: PowerError| match e {
            PowerError::Failed { switch, command, reason } => LinkError::Failed { controller: switch, command, reason },
            PowerError::Unsupported { switch, what } => LinkError::Failed { controller: switch, command: kind.to_string(), reason: what },
        };
        let p = if port == "A" { DrivePort::A } else { DrivePort::B };
        if kind == ResetKind::PortPull {
            self.pull_port(p).map_err(to_link)?;
            std::thread::sleep(hold);
            self.restore_port(p).map_err(to_link)
        } else {
            self.perst(true).map_err(to_link)?;
            std::thread::sleep(hold);
            self.perst(false).map_err(to_link)
        }
    }
}
