//! Controller specs: the one string a user writes to name a power or link controller, in
//! scenario files and on the command line. Other tools script this form, so it is stable:
//! [`ControllerSpec`] displays back to the exact form it was parsed from (canonicalised: a
//! default TCP port is written out, query keys in a fixed order).

use crate::link::PciResetMethod;
use std::fmt;
use std::path::PathBuf;

/// Every accepted form, shown in every spec error.
pub const SPEC_FORMS: &str = "  quarch+serial:///dev/ttyUSB0[?module=N]
  quarch+tcp://HOST[:9760][?module=N]
  quarch+usb://SERIAL[?module=N]
  hidrelay+usb://SERIAL?relay=N          (N = 1..8)
  lcus+serial:///dev/ttyUSB0?channel=N   (N = 1..255)
  numato+serial:///dev/ttyACM0?relay=N   (N = 0..63)
  numato+usb://SERIAL?relay=N            (its tty found by USB serial number, again after a replug)
  nvme-reset://nvme0
  nvme-subsys-reset://nvme0
  pci-reset://0000:3b:00.0[?method=flr|bus|pm]
  pci-remove-rescan://0000:3b:00.0
  pci-slot-power://SLOT
  exec:?off=CMD&on=CMD[&state=CMD][&timeout_ms=N]   (& and % inside CMD as %26 and %25)
  exec:?pull=CMD&plug=CMD&ports=A,B[&timeout_ms=N]  (a link controller; {port} in CMD: the port)
  manual
  sim";

/// Default TCP port of Quarch modules.
pub const QUARCH_TCP_PORT: u16 = 9760;
/// Default time an `exec:` hook may run.
pub const EXEC_DEFAULT_TIMEOUT_MS: u64 = 30_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuarchTransport {
    Serial(PathBuf),
    Tcp { host: String, port: u16 },
    Usb { serial: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControllerSpec {
    /// A Quarch module; `module` addresses a module behind a Torridon array controller.
    Quarch {
        transport: QuarchTransport,
        module: Option<u8>,
    },
    HidRelay {
        serial: String,
        relay: u8,
    },
    Lcus {
        path: PathBuf,
        channel: u8,
    },
    Numato {
        path: PathBuf,
        relay: u8,
    },
    /// A Numato board named by its USB serial number: its CDC-ACM tty is looked up at each
    /// open (and after a hang-up), whatever name the kernel gave it.
    NumatoUsb {
        serial: String,
        relay: u8,
    },
    NvmeReset {
        ctrl: String,
    },
    NvmeSubsysReset {
        ctrl: String,
    },
    PciReset {
        bdf: String,
        method: Option<PciResetMethod>,
    },
    PciRemoveRescan {
        bdf: String,
    },
    PciSlotPower {
        slot: String,
    },
    Exec {
        off: String,
        on: String,
        state: Option<String>,
        timeout_ms: u64,
    },
    /// A link controller as the user's shell commands: `pull` disconnects one port, `plug`
    /// connects it again (`{port}` in each is replaced by the port's name).
    ExecLink {
        pull: String,
        plug: String,
        ports: Vec<String>,
        timeout_ms: u64,
    },
    Manual,
    /// The simulated drive's switch; the binary maps it to a `SimDrive`'s `SimPower`.
    Sim,
}

/// A spec that does not parse: the exact text given, and what is wrong with it.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad controller spec {spec:?}: {reason}\naccepted forms:\n{SPEC_FORMS}")]
pub struct SpecError {
    pub spec: String,
    pub reason: SpecProblem,
}

/// What is wrong with a controller spec (the part of [`SpecError`] after the quoted spec).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecProblem {
    #[error("leading or trailing whitespace")]
    Whitespace,
    #[error("empty")]
    Empty,
    #[error("no scheme (expected SCHEME://..., `exec:`, `manual` or `sim`)")]
    NoScheme,
    #[error("unknown scheme {scheme:?}")]
    UnknownScheme { scheme: String },
    #[error("method={method}: expected flr, bus or pm")]
    PciMethod { method: String },
    #[error("slot {slot:?}: a name under /sys/bus/pci/slots, not a path")]
    SlotIsPath { slot: String },
    /// `exec:` without the `?` that starts its query.
    #[error("exec: expects `exec:?off=CMD&on=CMD`")]
    ExecNoQuery,
    /// A power `exec:` without `off=` or `on=`.
    #[error("exec: missing {key}=CMD")]
    ExecMissing { key: &'static str },
    /// A link `exec:` without `pull=` or `plug=`.
    #[error("exec: missing {key}=CMD (a link controller needs pull and plug)")]
    ExecLinkMissing { key: &'static str },
    #[error("exec: missing ports=A,B (the ports pull and plug act on)")]
    ExecMissingPorts,
    /// One of the two commands (`off`/`on`, or `pull`/`plug`) is blank.
    #[error("exec: {first} and {second} commands must not be empty")]
    ExecEmptyCommand { first: &'static str, second: &'static str },
    /// `ports=` as given (its names joined by commas).
    #[error("exec: ports={ports:?}: expected names separated by commas, none empty")]
    ExecPorts { ports: String },
    #[error("query part {part:?} is not KEY=VALUE")]
    NotKeyValue { part: String },
    #[error("query key {key:?} given twice")]
    KeyTwice { key: String },
    #[error("{key}={value}: expected a number in {min}..={max}")]
    Number { key: String, value: String, min: u64, max: u64 },
    #[error("missing ?{key}=N ({min}..={max})")]
    MissingNumber { key: String, min: u64, max: u64 },
    /// A key this kind does not take; `allowed` are the ones it does.
    #[error("unknown query key {key:?} (this kind takes {})", takes(.allowed))]
    UnknownKey { key: String, allowed: Vec<String> },
    #[error("truncated %-escape in {value:?}")]
    TruncatedEscape { value: String },
    #[error("bad %-escape %{escape} in {value:?}")]
    BadEscape { escape: String, value: String },
    #[error("%-escapes in {value:?} are not UTF-8")]
    EscapeNotUtf8 { value: String },
    /// An empty target (`what`: "USB serial number", "slot name").
    #[error("missing {what}")]
    Missing { what: &'static str },
    #[error("device {device:?}: expected an absolute path such as /dev/ttyUSB0 (three slashes after the scheme)")]
    NotAbsolute { device: String },
    #[error("host {host:?}: no ] after the IPv6 address")]
    Ipv6Unclosed { host: String },
    #[error("host {host:?}: expected an IPv6 address inside [ ]")]
    Ipv6Expected { host: String },
    #[error("host {host:?}: write an IPv6 address in brackets, e.g. [::1]:{QUARCH_TCP_PORT}")]
    Ipv6Unbracketed { host: String },
    #[error("port {port:?}: expected 1..65535")]
    Port { port: String },
    #[error("host {host:?}: expected a host name or address")]
    Host { host: String },
    #[error("{name:?}: expected an NVMe controller name such as nvme0")]
    NvmeCtrl { name: String },
    #[error("{addr:?}: expected a PCI address DDDD:BB:DD.F such as 0000:3b:00.0")]
    Bdf { addr: String },
}

/// The keys a kind takes, as [`SpecProblem::UnknownKey`] lists them.
fn takes(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "none".to_string()
    } else {
        allowed.join(", ")
    }
}

impl ControllerSpec {
    /// True for the kinds that are power switches.
    pub fn is_power(&self) -> bool {
        !matches!(
            self,
            ControllerSpec::NvmeReset { .. }
                | ControllerSpec::NvmeSubsysReset { .. }
                | ControllerSpec::PciReset { .. }
                | ControllerSpec::PciRemoveRescan { .. }
                | ControllerSpec::ExecLink { .. }
        )
    }

    /// True for the kinds that are (or may be, for Quarch hot-plug modules and `exec:`
    /// commands) link controllers.
    pub fn is_link(&self) -> bool {
        matches!(
            self,
            ControllerSpec::Exec { .. }
                | ControllerSpec::NvmeReset { .. }
                | ControllerSpec::NvmeSubsysReset { .. }
                | ControllerSpec::PciReset { .. }
                | ControllerSpec::PciRemoveRescan { .. }
                | ControllerSpec::PciSlotPower { .. }
                | ControllerSpec::Quarch { .. }
                | ControllerSpec::ExecLink { .. }
        )
    }
}

impl std::str::FromStr for ControllerSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        parse(s)
    }
}

/// Parses a controller spec.
pub fn parse(spec: &str) -> Result<ControllerSpec, SpecError> {
    let err = |reason: SpecProblem| SpecError { spec: spec.to_string(), reason };
    let s = spec.trim();
    if s != spec {
        return Err(err(SpecProblem::Whitespace));
    }
    match s {
        "manual" => return Ok(ControllerSpec::Manual),
        "sim" => return Ok(ControllerSpec::Sim),
        "" => return Err(err(SpecProblem::Empty)),
        _ => {}
    }
    if let Some(rest) = s.strip_prefix("exec:") {
        return parse_exec(rest).map_err(err);
    }
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(err(SpecProblem::NoScheme));
    };
    let (target, query) = match rest.split_once('?') {
        Some((t, q)) => (t, Some(q)),
        None => (rest, None),
    };
    let q = Query::parse(query).map_err(err)?;
    parse_scheme(scheme, target, &q).map_err(err)
}

/// A `scheme://target?query` spec, by its scheme.
fn parse_scheme(scheme: &str, target: &str, q: &Query) -> Result<ControllerSpec, SpecProblem> {
    Ok(match scheme {
        "quarch+serial" | "quarch+tcp" | "quarch+usb" => parse_quarch(scheme, target, q)?,
        "hidrelay+usb" => {
            let relay = q.num("relay", 1, 8)? as u8;
            q.done(&["relay"])?;
            ControllerSpec::HidRelay { serial: nonempty("USB serial number", target)?, relay }
        }
        "lcus+serial" => {
            let channel = q.num("channel", 1, 255)? as u8;
            q.done(&["channel"])?;
            ControllerSpec::Lcus { path: device_path(target)?, channel }
        }
        "numato+serial" => {
            let relay = q.num("relay", 0, 63)? as u8;
            q.done(&["relay"])?;
            ControllerSpec::Numato { path: device_path(target)?, relay }
        }
        "numato+usb" => {
            let relay = q.num("relay", 0, 63)? as u8;
            q.done(&["relay"])?;
            ControllerSpec::NumatoUsb { serial: nonempty("USB serial number", target)?, relay }
        }
        "nvme-reset" | "nvme-subsys-reset" => {
            q.done(&[])?;
            let ctrl = nvme_ctrl(target)?;
            if scheme == "nvme-reset" {
                ControllerSpec::NvmeReset { ctrl }
            } else {
                ControllerSpec::NvmeSubsysReset { ctrl }
            }
        }
        "pci-reset" => parse_pci_reset(target, q)?,
        "pci-remove-rescan" => {
            q.done(&[])?;
            ControllerSpec::PciRemoveRescan { bdf: bdf(target)? }
        }
        "pci-slot-power" => parse_slot_power(target, q)?,
        other => return Err(SpecProblem::UnknownScheme { scheme: other.to_string() }),
    })
}

/// `quarch+serial://PATH`, `quarch+tcp://HOST[:PORT]` or `quarch+usb://SERIAL`, with an
/// optional `module`.
fn parse_quarch(scheme: &str, target: &str, q: &Query) -> Result<ControllerSpec, SpecProblem> {
    let module = q.opt_num("module", 1, 255)?.map(|n| n as u8);
    let transport = match scheme {
        "quarch+serial" => QuarchTransport::Serial(device_path(target)?),
        "quarch+tcp" => {
            let (host, port) = host_port(target)?;
            QuarchTransport::Tcp { host, port }
        }
        _ => QuarchTransport::Usb { serial: nonempty("USB serial number", target)? },
    };
    q.done(&["module"])?;
    Ok(ControllerSpec::Quarch { transport, module })
}

/// `pci-reset://BDF`, with an optional reset `method`.
fn parse_pci_reset(target: &str, q: &Query) -> Result<ControllerSpec, SpecProblem> {
    let method = match q.get("method") {
        None => None,
        Some(m) => Some(PciResetMethod::parse(m).ok_or_else(|| SpecProblem::PciMethod { method: m.to_string() })?),
    };
    q.done(&["method"])?;
    Ok(ControllerSpec::PciReset { bdf: bdf(target)?, method })
}

/// `pci-slot-power://SLOT`: a slot's name, never a path.
fn parse_slot_power(target: &str, q: &Query) -> Result<ControllerSpec, SpecProblem> {
    q.done(&[])?;
    let slot = nonempty("slot name", target)?;
    if slot.contains('/') || slot == "." || slot == ".." {
        return Err(SpecProblem::SlotIsPath { slot });
    }
    Ok(ControllerSpec::PciSlotPower { slot })
}

fn parse_exec(rest: &str) -> Result<ControllerSpec, SpecProblem> {
    let Some(query) = rest.strip_prefix('?') else {
        return Err(SpecProblem::ExecNoQuery);
    };
    let q = Query::parse(Some(query))?;
    if q.get("pull").is_some() || q.get("plug").is_some() {
        return parse_exec_link(q);
    }
    let off = q.get("off").ok_or(SpecProblem::ExecMissing { key: "off" })?.to_string();
    let on = q.get("on").ok_or(SpecProblem::ExecMissing { key: "on" })?.to_string();
    if off.trim().is_empty() || on.trim().is_empty() {
        return Err(SpecProblem::ExecEmptyCommand { first: "off", second: "on" });
    }
    let state = q.get("state").map(str::to_string);
    let timeout_ms = q.opt_num("timeout_ms", 1, 24 * 3600 * 1000)?.unwrap_or(EXEC_DEFAULT_TIMEOUT_MS);
    q.done(&["off", "on", "state", "timeout_ms"])?;
    Ok(ControllerSpec::Exec { off, on, state, timeout_ms })
}

fn parse_exec_link(q: Query) -> Result<ControllerSpec, SpecProblem> {
    let pull = q.get("pull").ok_or(SpecProblem::ExecLinkMissing { key: "pull" })?.to_string();
    let plug = q.get("plug").ok_or(SpecProblem::ExecLinkMissing { key: "plug" })?.to_string();
    if pull.trim().is_empty() || plug.trim().is_empty() {
        return Err(SpecProblem::ExecEmptyCommand { first: "pull", second: "plug" });
    }
    let ports: Vec<String> = q.get("ports").ok_or(SpecProblem::ExecMissingPorts)?.split(',').map(str::to_string).collect();
    if ports.iter().any(|p| p.trim().is_empty() || p.trim() != p) {
        return Err(SpecProblem::ExecPorts { ports: ports.join(",") });
    }
    let timeout_ms = q.opt_num("timeout_ms", 1, 24 * 3600 * 1000)?.unwrap_or(EXEC_DEFAULT_TIMEOUT_MS);
    q.done(&["pull", "plug", "ports", "timeout_ms"])?;
    Ok(ControllerSpec::ExecLink { pull, plug, ports, timeout_ms })
}

struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    fn parse(q: Option<&str>) -> Result<Query, SpecProblem> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let Some(q) = q else { return Ok(Query { pairs }) };
        for part in q.split('&') {
            let Some((k, v)) = part.split_once('=') else {
                return Err(SpecProblem::NotKeyValue { part: part.to_string() });
            };
            if pairs.iter().any(|(pk, _)| pk == k) {
                return Err(SpecProblem::KeyTwice { key: k.to_string() });
            }
            pairs.push((k.to_string(), percent_decode(v)?));
        }
        Ok(Query { pairs })
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.pairs.iter().find(|(pk, _)| pk == k).map(|(_, v)| v.as_str())
    }

    fn opt_num(&self, k: &str, min: u64, max: u64) -> Result<Option<u64>, SpecProblem> {
        let Some(v) = self.get(k) else { return Ok(None) };
        match v.parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(SpecProblem::Number { key: k.to_string(), value: v.to_string(), min, max }),
        }
    }

    fn num(&self, k: &str, min: u64, max: u64) -> Result<u64, SpecProblem> {
        self.opt_num(k, min, max)?.ok_or_else(|| SpecProblem::MissingNumber { key: k.to_string(), min, max })
    }

    fn done(&self, allowed: &[&str]) -> Result<(), SpecProblem> {
        match self.pairs.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            None => Ok(()),
            Some((k, _)) => Err(SpecProblem::UnknownKey { key: k.clone(), allowed: allowed.iter().map(|a| a.to_string()).collect() }),
        }
    }
}

fn percent_decode(v: &str) -> Result<String, SpecProblem> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = v.get(i + 1..i + 3).ok_or_else(|| SpecProblem::TruncatedEscape { value: v.to_string() })?;
            let byte = u8::from_str_radix(hex, 16).map_err(|_| SpecProblem::BadEscape { escape: hex.to_string(), value: v.to_string() })?;
            out.push(byte);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| SpecProblem::EscapeNotUtf8 { value: v.to_string() })
}

fn percent_encode(v: &str) -> String {
    v.replace('%', "%25").replace('&', "%26")
}

fn nonempty(what: &'static str, s: &str) -> Result<String, SpecProblem> {
    if s.is_empty() {
        Err(SpecProblem::Missing { what })
    } else {
        Ok(s.to_string())
    }
}

fn device_path(s: &str) -> Result<PathBuf, SpecProblem> {
    if !s.starts_with('/') {
        return Err(SpecProblem::NotAbsolute { device: s.to_string() });
    }
    Ok(PathBuf::from(s))
}

/// `HOST[:PORT]` or `[IPV6][:PORT]`; the host is kept without brackets (as a socket address
/// lookup wants it) and displayed with them, so that the form round-trips.
fn host_port(s: &str) -> Result<(String, u16), SpecProblem> {
    let (host, port) = match s.strip_prefix('[') {
        Some(v6) => {
            let (addr, rest) = v6.split_once(']').ok_or_else(|| SpecProblem::Ipv6Unclosed { host: s.to_string() })?;
            if !addr.contains(':') || addr.contains('[') {
                return Err(SpecProblem::Ipv6Expected { host: s.to_string() });
            }
            (addr, rest)
        }
        None if s.matches(':').count() > 1 => return Err(SpecProblem::Ipv6Unbracketed { host: s.to_string() }),
        None => s.find(':').map_or((s, ""), |i| (&s[..i], &s[i..])),
    };
    let port = match port {
        "" => QUARCH_TCP_PORT,
        p => p
            .strip_prefix(':')
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|&p| p != 0)
            .ok_or_else(|| SpecProblem::Port { port: p.trim_start_matches(':').to_string() })?,
    };
    if host.is_empty() || host.contains(['/', '[', ']']) {
        return Err(SpecProblem::Host { host: host.to_string() });
    }
    Ok((host.to_string(), port))
}

fn nvme_ctrl(s: &str) -> Result<String, SpecProblem> {
    let ok = s.strip_prefix("nvme").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if ok {
        Ok(s.to_string())
    } else {
        Err(SpecProblem::NvmeCtrl { name: s.to_string() })
    }
}

/// Checks `DDDD:BB:DD.F` (domain, bus, device, function in hex).
fn bdf(s: &str) -> Result<String, SpecProblem> {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_hexdigit());
    let ok = b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.' && hex(0..4) && hex(5..7) && hex(8..10) && hex(11..12);
    if ok {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(SpecProblem::Bdf { addr: s.to_string() })
    }
}

impl fmt::Display for ControllerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControllerSpec::Quarch { transport, module } => {
                match transport {
                    QuarchTransport::Serial(p) => write!(f, "quarch+serial://{}", p.display())?,
                    QuarchTransport::Tcp { host, port } if host.contains(':') => write!(f, "quarch+tcp://[{host}]:{port}")?,
                    QuarchTransport::Tcp { host, port } => write!(f, "quarch+tcp://{host}:{port}")?,
                    QuarchTransport::Usb { serial } => write!(f, "quarch+usb://{serial}")?,
                }
                if let Some(m) = module {
                    write!(f, "?module={m}")?;
                }
                Ok(())
            }
            ControllerSpec::HidRelay { serial, relay } => write!(f, "hidrelay+usb://{serial}?relay={relay}"),
            ControllerSpec::Lcus { path, channel } => write!(f, "lcus+serial://{}?channel={channel}", path.display()),
            ControllerSpec::Numato { path, relay } => write!(f, "numato+serial://{}?relay={relay}", path.display()),
            ControllerSpec::NumatoUsb { serial, relay } => write!(f, "numato+usb://{serial}?relay={relay}"),
            ControllerSpec::NvmeReset { ctrl } => write!(f, "nvme-reset://{ctrl}"),
            ControllerSpec::NvmeSubsysReset { ctrl } => write!(f, "nvme-subsys-reset://{ctrl}"),
            ControllerSpec::PciReset { bdf, method } => {
                write!(f, "pci-reset://{bdf}")?;
                if let Some(m) = method {
                    write!(f, "?method={}", m.as_str())?;
                }
                Ok(())
            }
            ControllerSpec::PciRemoveRescan { bdf } => write!(f, "pci-remove-rescan://{bdf}"),
            ControllerSpec::PciSlotPower { slot } => write!(f, "pci-slot-power://{slot}"),
            ControllerSpec::Exec { off, on, state, timeout_ms } => {
                write!(f, "exec:?off={}&on={}", percent_encode(off), percent_encode(on))?;
                if let Some(s) = state {
                    write!(f, "&state={}", percent_encode(s))?;
                }
                write!(f, "&timeout_ms={timeout_ms}")
            }
            ControllerSpec::ExecLink { pull, plug, ports, timeout_ms } => {
                write!(
                    f,
                    "exec:?pull={}&plug={}&ports={}&timeout_ms={timeout_ms}",
                    percent_encode(pull),
                    percent_encode(plug),
                    ports.join(",")
                )
            }
            ControllerSpec::Manual => f.write_str("manual"),
            ControllerSpec::Sim => f.write_str("sim"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_form_parses_and_round_trips() {
        let cases = [
            "quarch+serial:///dev/ttyUSB0",
            "quarch+serial:///dev/ttyUSB0?module=3",
            "quarch+tcp://qtl1999-01-001:9760",
            "quarch+tcp://192.168.1.20:9761?module=12",
            "quarch+usb://QTL1999-01-001",
            "hidrelay+usb://HURTM?relay=2",
            "lcus+serial:///dev/ttyUSB1?channel=1",
            "numato+serial:///dev/ttyACM0?relay=0",
            "numato+usb://FLNUMATO0001?relay=3",
            "nvme-reset://nvme0",
            "nvme-subsys-reset://nvme12",
            "pci-reset://0000:3b:00.0",
            "pci-reset://0000:3b:00.0?method=bus",
            "pci-remove-rescan://0000:3b:00.0",
            "pci-slot-power://12",
            "exec:?off=ipmitool -H bmc chassis power off&on=ipmitool -H bmc chassis power on&timeout_ms=30000",
            "exec:?off=a %26%26 b&on=c %25 d&state=s&timeout_ms=5",
            "exec:?pull=lab_port del {port}&plug=lab_port add {port}&ports=A,B&timeout_ms=60000",
            "manual",
            "sim",
        ];
        for c in cases {
            let s = parse(c).unwrap_or_else(|e| panic!("{c}: {e}"));
            assert_eq!(s.to_string(), c, "round trip of {c}");
            assert_eq!(parse(&s.to_string()).unwrap(), s);
        }
    }

    #[test]
    fn defaults_are_filled_in() {
        assert_eq!(
            parse("quarch+tcp://host").unwrap(),
            ControllerSpec::Quarch { transport: QuarchTransport::Tcp { host: "host".into(), port: 9760 }, module: None }
        );
        let ControllerSpec::Exec { off, on, state, timeout_ms } = parse("exec:?off=x&on=y").unwrap() else { panic!() };
        assert_eq!((off.as_str(), on.as_str(), state, timeout_ms), ("x", "y", None, EXEC_DEFAULT_TIMEOUT_MS));
        assert_eq!(parse("pci-reset://0000:3B:00.0").unwrap().to_string(), "pci-reset://0000:3b:00.0");
    }

    #[test]
    fn malformed_specs_name_the_problem_and_list_the_forms() {
        let cases = [
            ("", "empty"),
            ("quarch", "no scheme"),
            ("quarch+ftp://x", "unknown scheme"),
            ("quarch+serial://dev/ttyUSB0", "absolute path"),
            ("quarch+tcp://host:0", "port"),
            ("quarch+tcp://host:99999", "port"),
            ("quarch+tcp://host?module=0", "module=0"),
            ("quarch+usb://", "missing USB serial"),
            ("hidrelay+usb://ABC", "missing ?relay"),
            ("hidrelay+usb://ABC?relay=9", "relay=9"),
            ("hidrelay+usb://ABC?relay=1&relay=2", "twice"),
            ("lcus+serial:///dev/ttyUSB0?channel=1&speed=3", "unknown query key \"speed\""),
            ("numato+serial:///dev/ttyACM0?relay", "KEY=VALUE"),
            ("nvme-reset://sda", "NVMe controller"),
            ("nvme-reset://nvme0?x=1", "takes none"),
            ("pci-reset://3b:00.0", "DDDD:BB:DD.F"),
            ("pci-reset://0000:3b:00.0?method=warm", "flr, bus or pm"),
            ("pci-slot-power://../x", "not a path"),
            ("exec:ipmitool", "exec:?off=CMD"),
            ("exec:?off=x", "missing on=CMD"),
            ("exec:?pull=x&plug=y", "missing ports=A,B"),
            ("exec:?pull=x&ports=A", "missing plug=CMD"),
            ("exec:?pull=x&plug=y&ports=A,", "none empty"),
            ("exec:?pull=x&plug=y&ports=A&off=z", "off"),
            ("exec:?off=x&on=y&timeout_ms=0", "timeout_ms=0"),
            ("exec:?off=%zz&on=y", "bad %-escape"),
            (" sim", "whitespace"),
        ];
        for (c, want) in cases {
            let e = parse(c).expect_err(c);
            let msg = e.to_string();
            assert!(msg.contains(want), "{c}: {msg}");
            assert!(msg.contains("accepted forms:") && msg.contains("quarch+tcp://HOST"), "{c}: {msg}");
        }
    }

    /// Found by `drivers/tests/parsers.rs` (spec_mutated_documented_forms): `quarch+tcp://[::`
    /// parsed as host `[::` and displayed as `quarch+tcp://[:::9760`, which parsed as another
    /// host; and a bracketed host was kept with its brackets, which no address lookup accepts.
    #[test]
    fn tcp_hosts_take_ipv6_in_brackets_and_round_trip() {
        let tcp = |host: &str, port| ControllerSpec::Quarch { transport: QuarchTransport::Tcp { host: host.into(), port }, module: None };
        assert_eq!(parse("quarch+tcp://[::1]:9761").unwrap(), tcp("::1", 9761));
        assert_eq!(parse("quarch+tcp://[fe80::1]").unwrap().to_string(), "quarch+tcp://[fe80::1]:9760");
        for (bad, why) in [
            ("quarch+tcp://[::", "no ]"),
            ("quarch+tcp://::1", "in brackets"),
            ("quarch+tcp://a::", "in brackets"),
            ("quarch+tcp://[host]", "IPv6 address inside"),
            ("quarch+tcp://[::1]x", "port \"x\""),
            ("quarch+tcp://host:", "port \"\""),
            ("quarch+tcp://:9760", "host \"\""),
        ] {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn power_and_link_roles() {
        assert!(parse("sim").unwrap().is_power());
        assert!(!parse("nvme-reset://nvme0").unwrap().is_power());
        assert!(parse("pci-slot-power://3").unwrap().is_power() && parse("pci-slot-power://3").unwrap().is_link());
        let exec = parse("exec:?off=x&on=y").unwrap();
        assert!(exec.is_power() && exec.is_link(), "exec: serves both roles");
    }
}
