//! The ports of a dual-port drive in a scenario (`[[ports]]`), the dual-port run (`[dual]`)
//! with the budgets that judge a port the fault did not hit, and the simulated dual-port drive.
//!
//! Ports write disjoint shares of the span: NVMe gives no ordering between commands to the same
//! LBA through two controllers, so overlapping writes are never in flight on two ports.

use super::ScenarioError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a port does in each cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PortRole {
    /// Writes its share of the span, and is judged when a fault hits another port.
    #[default]
    Writer,
    /// Writes nothing; reads through it verify the other ports' shares.
    Reader,
    /// Neither writes nor reads.
    Idle,
}

/// One port of the device under test.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// The port's name: `A`, `B` (one capital letter; the first port is `A`, then `B`...).
    pub name: String,
    /// What the port does. Default: `writer`.
    #[serde(default)]
    pub role: PortRole,
    /// The block device through this port: a per-path node (`/dev/nvme0n1` with
    /// `nvme_core.multipath=N`, a loop device of a rig), or the multipath head for link
    /// redundancy; or the NBD export through it (`nbd+unix:///A?socket=PATH`, as `faultline
    /// emulate nbd --model dual-*` serves each port). Must be given for a real device; for the
    /// simulated drive only on another host (the drive as that host sees the port served to
    /// it, e.g. a lab guest's `/dev/nvme0n1`; default: the export's URI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The share of the span the port writes, as `[start, end)` percent. Default: the span
    /// split evenly between the writer ports, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_percent: Option<[u8; 2]>,
    /// The port as the link controller names it (`--port A` on a Quarch hot-plug module,
    /// `nvme0`, a PCI address). Default: the port's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_port: Option<String>,
    /// The host this port is cabled to, when it is not this one: the port is written and read
    /// there by `faultline agent --stdio`, over `transport`, and this machine (whose power the
    /// run never cuts) keeps every port's ledger. With the simulated drive, each port is served
    /// over NBD on this machine (a Unix socket in the run directory) and the agent reaches it
    /// as `{target}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// With `host`: the command whose stdin and stdout carry the protocol, run as given (no
    /// shell): `{host}` is the host, `{target}` the port's target as the agent lists it (its
    /// `path`, else the simulated port's NBD URI), `{export}` the simulated port's NBD URI (for
    /// a host that attaches it itself: `faultline lab host --export {export}`), `{faultline}`
    /// this faultline binary (for agents on this machine: the demo, the lab). Default: `["ssh", "-o", "BatchMode=yes", "{host}",
    /// "faultline", "agent", "--stdio"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Vec<String>>,
    /// With `host`: what cuts and restores the host's power for a `host_power_cut` fault. A
    /// controller spec (`exec:...` running the BMC's IPMI command, a relay, a Quarch module on
    /// its supply), or `kill`: SIGKILL of the transport's process group, which is the whole
    /// host only when the agent runs on this machine (the demo, tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_power: Option<String>,
}

/// Limits a port the fault did not hit must stay within, from the fault until the faulted
/// port is back and ready plus `settle_ms`, against its baseline before the fault.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Write errors allowed in the fault window. Default: 0.
    #[serde(default)]
    pub io_errors: u64,
    /// The longest the port may go without a write completing, in ms. Default: 500.
    #[serde(default = "default_max_stall_ms")]
    pub max_stall_ms: u64,
    /// Throughput in the fault window over the baseline's, at least. Default: 0.5.
    #[serde(default = "default_min_throughput_ratio")]
    pub min_throughput_ratio: f64,
    /// p99 write latency in the fault window over the baseline's, at most. Default: 4.
    #[serde(default = "default_max_p99_ratio")]
    pub max_p99_ratio: f64,
    /// The longest single write in the fault window, in ms, at most. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_latency_ms: Option<u64>,
}

impl Eq for Budget {}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            io_errors: 0,
            max_stall_ms: default_max_stall_ms(),
            min_throughput_ratio: default_min_throughput_ratio(),
            max_p99_ratio: default_max_p99_ratio(),
            max_latency_ms: None,
        }
    }
}

fn default_max_stall_ms() -> u64 {
    500
}
fn default_min_throughput_ratio() -> f64 {
    0.5
}
fn default_max_p99_ratio() -> f64 {
    4.0
}
fn default_warmup_ms() -> u64 {
    100
}
fn default_baseline_ms() -> u64 {
    500
}
fn default_settle_ms() -> u64 {
    200
}
fn default_true() -> bool {
    true
}

/// How a dual-port run spends its cycles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DualMode {
    /// Each cycle faults one port under load while the others write, and judges the others.
    #[default]
    Failover,
    /// No fault: the same workload A only, B only, then A+B; each port's throughput, their
    /// fairness and the sum against single-port (the dual-port test plan's figures).
    Performance,
}

/// A dual-port run: the fault hits one port per cycle, the others are judged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DualSpec {
    /// Default: `failover`.
    #[serde(default)]
    pub mode: DualMode,
    /// The port each cycle's fault hits, used in turn (`["A", "B"]` alternates). Default:
    /// every writer port in turn. A power cut or an NVM subsystem reset hits every port
    /// whatever this says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_ports: Vec<String>,
    /// Writing before the baseline starts, in ms (queues fill, caches warm). Default: 100.
    #[serde(default = "default_warmup_ms")]
    pub warmup_ms: u64,
    /// The baseline window right before the fault, in ms. Default: 500.
    #[serde(default = "default_baseline_ms")]
    pub baseline_ms: u64,
    /// After the faulted port is back and answers, the fault window goes on this long, in ms.
    /// Default: 200.
    #[serde(default = "default_settle_ms")]
    pub settle_ms: u64,
    #[serde(default)]
    pub budget: Budget,
    /// Verify each port's share through every other port too (write through A, fault A,
    /// verify through B). Default: true.
    #[serde(default = "default_true")]
    pub cross_verify: bool,
    /// Read what each cycle wrote through every port and compare: a port serving other data
    /// than its peer is a finding. Default: true.
    #[serde(default = "default_true")]
    pub compare_ports: bool,
    /// `performance` mode: how long each of A only, B only and A+B writes, in ms. Default:
    /// 2000.
    #[serde(default = "default_perf_ms")]
    pub perf_ms: u64,
}

fn default_perf_ms() -> u64 {
    2000
}

/// The simulated dual-port drive's fault model (`faultline_fixtures::DualModel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DualSimModel {
    /// Both ports honest: a fault of one costs the other nothing.
    DualHonest,
    /// Pulling or resetting one port stalls the other for `stall_ms`.
    DualFreezeOnPull { stall_ms: u32 },
    /// A pulled port's in-flight writes land `after_writes` writes later, over newer data.
    DualGhostWrites { after_writes: u32 },
    /// After a fault, the port that was not faulted serves stale copies for `for_ms`.
    DualStalePort { for_ms: u32 },
    /// Resetting or pulling one port drops the shared volatile cache.
    DualDropCacheOnReset,
    /// A power cut loses the shared volatile cache (acknowledged writes of both ports), which
    /// the drive claims is power-loss protected.
    DualLoseCacheAtCut,
}

/// The simulated drive as a dual-port drive: two ports on one media and one cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimDual {
    pub model: DualSimModel,
    /// Each port's link ceiling in MB/s (a dual-port U.2 drive splits its x4 link into two
    /// x2 ports). Default: 200.
    #[serde(default = "default_port_mbps")]
    pub port_mbps: u32,
}

fn default_port_mbps() -> u32 {
    200
}

/// A port as the run executes it: its name, its share of the span in bytes, its role, how it
/// is reached and which controller port faults it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPlan {
    pub id: crate::port::PortId,
    pub name: String,
    pub role: PortRole,
    pub path: Option<PathBuf>,
    /// `[start, end)` percent of the span.
    pub share_percent: [u8; 2],
    /// The port's name as the fault's controller knows it; `None`: as each fault names it (a
    /// one-port run's port A).
    pub fault_port: Option<String>,
    /// The host the port is cabled to, when it is not this one.
    pub remote: Option<RemotePortPlan>,
}

impl PortPlan {
    /// The port's name as the fault's controller knows it (its own name unless it says).
    pub fn fault_name(&self) -> &str {
        self.fault_port.as_deref().unwrap_or(&self.name)
    }
}

/// A port on another host: reached through its agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemotePortPlan {
    pub host: String,
    /// The transport command, its placeholders not yet replaced.
    pub transport: Vec<String>,
    pub power: Option<HostPower>,
}

/// What cuts a host's power.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPower {
    /// SIGKILL of the transport's process group (an agent on this machine).
    Kill,
    Controller(faultline_drivers::control::ControllerSpec),
}

/// Resolves `[[ports]]`: names, shares (disjoint, inside 0..=100), paths and fault ports.
pub(super) fn plan_ports(origin: &str, ports: &[PortSpec], sim: bool) -> Result<Vec<PortPlan>, ScenarioError> {
    let bad = |field: String, message: String| ScenarioError::Invalid { origin: origin.to_string(), field, message };
    if ports.len() > 8 {
        return Err(bad("ports".into(), format!("{} ports: at most 8", ports.len())));
    }
    let writers = ports.iter().filter(|p| p.role == PortRole::Writer).count() as u32;
    if !ports.is_empty() && writers == 0 {
        return Err(bad("ports".into(), "no port has role = \"writer\": nothing would be written".into()));
    }
    let mut out: Vec<PortPlan> = Vec::new();
    let mut next_even = 0u32;
    for (i, p) in ports.iter().enumerate() {
        let expected = crate::port::PortId(i as u8).default_name();
        if p.name != expected {
            return Err(port_error(
                origin,
                i,
                "name",
                format!("{:?}: port {} must be named {expected:?} (ports are named A, B, ... in order)", p.name, i + 1),
            ));
        }
        check_port_path(origin, i, p, sim)?;
        let share = port_share(origin, i, p, writers, &mut next_even)?;
        check_share_overlap(origin, i, share, &out)?;
        if p.fault_port.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(port_error(origin, i, "fault_port", "must not be empty (leave it out to use the port's name)".into()));
        }
        let remote = remote_port(origin, i, p)?;
        out.push(PortPlan {
            id: crate::port::PortId(i as u8),
            name: p.name.clone(),
            role: p.role,
            path: p.path.clone(),
            share_percent: share,
            fault_port: Some(p.fault_port.clone().unwrap_or_else(|| p.name.clone())),
            remote,
        });
    }
    Ok(out)
}

/// A scenario error naming the field `key` of port `i` (`ports[i].key`).
fn port_error(origin: &str, i: usize, key: &str, message: String) -> ScenarioError {
    ScenarioError::Invalid { origin: origin.to_string(), field: format!("ports[{i}].{key}"), message }
}

/// Port `i`'s path: none for a simulated port in-process, the drive as its agent lists it for
/// one served to another host, an absolute path or an NBD URI for a real device's.
fn check_port_path(origin: &str, i: usize, p: &PortSpec, sim: bool) -> Result<(), ScenarioError> {
    let bad = |message: String| port_error(origin, i, "path", message);
    match (&p.path, sim) {
        // A simulated port served to another host: the path is the drive as that host's
        // agent lists it (a lab guest's /dev/nvme0n1), checked there.
        (Some(_), true) if p.host.is_some() => {}
        (Some(path), true) => {
            return Err(bad(format!("{}: the simulated drive's ports are reached in-process, not by a path", path.display())))
        }
        (None, false) => return Err(bad("a real device's port needs the block device through it".into())),
        (Some(path), false) => match path.to_str().filter(|s| faultline_drivers::nbd::looks_like_nbd(s)) {
            Some(uri) => faultline_drivers::nbd::NbdUri::parse(uri).map(|_| ()).map_err(|e| bad(e.to_string()))?,
            None if !path.is_absolute() => return Err(bad(format!("{}: must be absolute (or an NBD URI)", path.display()))),
            None => {}
        },
        _ => {}
    }
    Ok(())
}

/// Port `i`'s share of the span, in percent: as given for a writer, else an even split among
/// the `writers` (`next_even`: the writers given one so far); none for a port that only reads.
fn port_share(origin: &str, i: usize, p: &PortSpec, writers: u32, next_even: &mut u32) -> Result<[u8; 2], ScenarioError> {
    match (p.share_percent, p.role) {
        (Some([a, b]), PortRole::Writer) => {
            if a >= b || b > 100 {
                return Err(port_error(origin, i, "share_percent", format!("[{a}, {b}]: expected [start, end) with start < end <= 100")));
            }
            Ok([a, b])
        }
        (Some(s), _) => Err(port_error(origin, i, "share_percent", format!("{s:?}: only a writer port has a share of the span"))),
        (None, PortRole::Writer) => {
            let (a, b) = (*next_even * 100 / writers, (*next_even + 1) * 100 / writers);
            *next_even += 1;
            Ok([a as u8, b as u8])
        }
        (None, _) => Ok([0, 0]),
    }
}

/// Refuses port `i`'s `share` where it overlaps a writer's among the ports planned before it.
fn check_share_overlap(origin: &str, i: usize, share: [u8; 2], planned: &[PortPlan]) -> Result<(), ScenarioError> {
    match planned.iter().find(|o| o.role == PortRole::Writer && share[0] < o.share_percent[1] && o.share_percent[0] < share[1]) {
        Some(other) => Err(port_error(
            origin,
            i,
            "share_percent",
            format!(
                "{share:?} overlaps port {}'s {:?}: two ports never write the same sectors (NVMe orders nothing across controllers)",
                other.name, other.share_percent
            ),
        )),
        None => Ok(()),
    }
}

/// Port `i` on another host, when it names one: its host, the transport to its agent (checked,
/// ssh by default) and what cuts its power.
fn remote_port(origin: &str, i: usize, p: &PortSpec) -> Result<Option<RemotePortPlan>, ScenarioError> {
    let bad = |key: &str, message: String| port_error(origin, i, key, message);
    match (&p.host, &p.transport, &p.host_power) {
        (None, None, None) => Ok(None),
        (None, _, _) => Err(bad("host", "transport and host_power are a port on another host's: give its host too".into())),
        (Some(h), _, _) if h.trim().is_empty() => Err(bad("host", "must not be empty (leave it out for a port on this host)".into())),
        (Some(host), transport, power) => {
            let transport = transport.clone().unwrap_or_else(|| crate::transport::SSH.iter().map(|s| s.to_string()).collect());
            crate::transport::Transport::new(&transport, host).map_err(|e| bad("transport", e.to_string()))?;
            let power = match power.as_deref() {
                None => None,
                Some("kill") => Some(HostPower::Kill),
                Some(spec) => Some(HostPower::Controller(
                    faultline_drivers::control::parse_spec(spec).map_err(|e| bad("host_power", format!("{spec:?}: {e}")))?,
                )),
            };
            Ok(Some(RemotePortPlan { host: host.clone(), transport, power }))
        }
    }
}

/// The ports each cycle's fault hits, in turn, as indices into `ports`.
pub(super) fn plan_fault_ports(origin: &str, dual: &DualSpec, ports: &[PortPlan]) -> Result<Vec<usize>, ScenarioError> {
    let bad = |field: String, message: String| ScenarioError::Invalid { origin: origin.to_string(), field, message };
    if dual.fault_ports.is_empty() {
        return Ok(ports.iter().enumerate().filter(|(_, p)| p.role == PortRole::Writer).map(|(i, _)| i).collect());
    }
    dual.fault_ports
        .iter()
        .enumerate()
        .map(|(i, name)| {
            ports.iter().position(|p| &p.name == name).ok_or_else(|| {
                let names: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
                bad(format!("dual.fault_ports[{i}]"), format!("{name:?} is not a port (the ports are {names:?})"))
            })
        })
        .collect()
}

/// The budget's numbers are usable.
pub(super) fn validate_dual(origin: &str, d: &DualSpec) -> Result<(), ScenarioError> {
    let bad = |field: &str, message: String| Err(ScenarioError::Invalid { origin: origin.to_string(), field: field.to_string(), message });
    let b = &d.budget;
    if !(b.min_throughput_ratio.is_finite() && (0.0..=1.0).contains(&b.min_throughput_ratio)) {
        return bad("dual.budget.min_throughput_ratio", format!("{}: expected 0 to 1", b.min_throughput_ratio));
    }
    if !(b.max_p99_ratio.is_finite() && b.max_p99_ratio >= 1.0) {
        return bad("dual.budget.max_p99_ratio", format!("{}: expected at least 1", b.max_p99_ratio));
    }
    if b.max_stall_ms == 0 {
        return bad("dual.budget.max_stall_ms", "0: every port pauses between two completions".into());
    }
    if d.baseline_ms < 50 {
        return bad("dual.baseline_ms", format!("{}: a baseline under 50 ms says nothing (expected at least 50)", d.baseline_ms));
    }
    if d.mode == DualMode::Performance && d.perf_ms < 100 {
        return bad("dual.perf_ms", format!("{}: expected at least 100", d.perf_ms));
    }
    Ok(())
}

/// The port table of a one-port run: port A, writing over the whole span through the target.
pub(super) fn single_port(path: Option<PathBuf>) -> Vec<PortPlan> {
    let a = crate::port::PortId::A;
    vec![PortPlan { id: a, name: a.default_name(), role: PortRole::Writer, path, share_percent: [0, 100], fault_port: None, remote: None }]
}

/// The ports of the simulated dual-port drive when `[[ports]]` is left out: A and B, writers,
/// half the span each.
pub(super) fn default_sim_ports() -> Vec<PortPlan> {
    (0..2u8)
        .map(|i| PortPlan {
            id: crate::port::PortId(i),
            name: crate::port::PortId(i).default_name(),
            role: PortRole::Writer,
            path: None,
            share_percent: [i * 50, i * 50 + 50],
            fault_port: Some(crate::port::PortId(i).default_name()),
            remote: None,
        })
        .collect()
}
