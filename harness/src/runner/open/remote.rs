//! A dual-port run whose ports are on other hosts (`[[ports]] host`), with the simulated
//! dual-port drive: each port is served over NBD on this machine (one server per port, on a
//! Unix socket in the run directory, as `faultline emulate nbd --model dual-*` serves them),
//! and each host's agent reaches its port there and writes it; this machine keeps every
//! port's ledger and the drive's ground truth. A `host_power_cut` cuts one host's power
//! through its port's `host_power` while the other host writes.

use super::devices::remote_port;
use super::error::OpenPortsError;
use super::Devices;
use crate::remote::coordinator::dut::RemoteDut;
use crate::runner::dut::{Dut, DutError};
use crate::runner::fault::Cutter;
use crate::runner::options::RunnerOptions;
use crate::scenario::{HostPower, RunPlan, SimTarget};
use crate::sim_nbd::{self, Export, Listen};
use faultline_drivers::blockdev::Expectation;
use faultline_drivers::control;
use faultline_drivers::{BlockTarget, PowerSwitch};
use faultline_fixtures::DualSim;
use std::path::Path;
use std::time::Duration;

/// The longest Unix socket path (`sun_path` holds 108 bytes with its terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A host's power with what it does to the drive: a host that loses power drops its PCIe link
/// to the drive's port (refclk and PERST# go with it), which the drive sees as that port
/// pulled, and the link trains again when the host powers up. So the drive's models of a
/// port fault (`dual-freeze-on-pull` stalling the other port, ...) apply to a host cut as
/// they would to a real drive's.
struct HostAndLink {
    host: Box<dyn PowerSwitch + Send>,
    link: faultline_fixtures::SimLink,
    port: u8,
    name: String,
}

impl PowerSwitch for HostAndLink {
    fn name(&self) -> String {
        format!("{} (port {}'s link at the drive with it)", self.host.name(), self.name)
    }

    fn capabilities(&self) -> faultline_drivers::PowerCaps {
        self.host.capabilities()
    }

    fn power_off(&mut self) -> Result<(), faultline_drivers::PowerError> {
        self.host.power_off()?;
        let (switch, command) = (self.name(), format!("port {} link down", self.name));
        self.link.pull(self.port).map_err(|e| faultline_drivers::PowerError::Failed { switch, command, reason: e.to_string() })
    }

    fn power_on(&mut self) -> Result<(), faultline_drivers::PowerError> {
        let (switch, command) = (self.name(), format!("port {} link up", self.name));
        self.link.plug(self.port).map_err(|e| faultline_drivers::PowerError::Failed { switch, command, reason: e.to_string() })?;
        self.host.power_on()
    }

    fn state(&mut self) -> Result<faultline_drivers::PowerState, faultline_drivers::PowerError> {
        self.host.state()
    }

    fn take_log(&mut self) -> Vec<String> {
        self.host.take_log()
    }
}

/// Serves each port of `drive` over NBD, dials each port's host and opens its port there, and
/// opens each faulted host's power switch.
pub(super) fn open(plan: &RunPlan, t: &SimTarget, drive: DualSim, run_dir: &Path, o: &RunnerOptions) -> Result<Devices, OpenPortsError> {
    let mut servers = Vec::new();
    let mut targets = Vec::new();
    for (i, p) in plan.ports.iter().enumerate() {
        let host = p.remote.as_ref().map_or("", |r| r.host.as_str());
        let fail = |why: String| OpenPortsError::Served { port: p.name.clone(), host: host.to_string(), why };
        // A run that died during a host cut saved that host's port pulled. Every host is on
        // when a run is opened (its agent is dialled afresh), so its link is up.
        drive.link().plug(i as u8).map_err(|e| fail(format!("cannot bring the port's link up: {e}")))?;
        let sock = run_dir.join(format!("nbd-{}.sock", p.name));
        let sock_s = sock.to_str().filter(|s| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b))).ok_or_else(|| {
            fail(format!("{}: the run directory's path must be plain (letters, digits, / . _ - +) to go in an NBD URI", sock.display()))
        })?;
        if sock_s.len() > MAX_SOCKET_PATH {
            return Err(fail(format!("{sock_s}: {} bytes, longer than a Unix socket's path may be ({MAX_SOCKET_PATH})", sock_s.len())));
        }
        // A socket left by a run that died is in the way.
        let _ = std::fs::remove_file(&sock);
        let export = Export {
            name: p.name.clone(),
            // What the agent finds the port to be: the same when the run is resumed.
            description: format!("faultline simulated dual-port drive {}, port {}", drive.identity(), p.name),
            service_time: Duration::ZERO,
        };
        let served = sim_nbd::serve(drive.port(i as u8), export, Listen::Unix(&sock), None)
            .map_err(|e| fail(format!("cannot serve the port over NBD at {sock_s}: {e}")))?;
        let export = served.uri();
        servers.push(served);
        let listed = p.path.as_ref().map_or_else(|| export.clone(), |x| x.to_string_lossy().into_owned());
        targets.push(Reach { target: listed, export: Some(export) });
    }
    let expect = Expectation { size_bytes: Some(t.capacity_bytes), ..Expectation::default() };
    let (devs, cutter, notes) = dial_hosts(plan, &targets, &expect, o, Some(&drive))?;
    let atomic = drive.port(0).geometry().physical_block_bytes as u64;
    let (sector, capacity) = (t.sector_bytes as u64, t.capacity_bytes);
    Ok(Devices {
        devs,
        cutter,
        identity: drive.identity(),
        sector,
        capacity,
        atomic: atomic.max(sector),
        declared_reads: None,
        notes,
        _keep: Some(Box::new(servers)),
        saves: Some(std::sync::Arc::new(move || drive.persist())),
    })
}

/// A real dual-port drive whose ports are cabled to other hosts: each port's `path` is the
/// drive as that host's agent lists it, held to the scenario's identity there (each port's run
/// is bound to the identity seen through it, as a local port's is), and every port shows the
/// same size and sectors.
pub(super) fn open_real(plan: &RunPlan, expect: &Expectation, o: &RunnerOptions) -> Result<Devices, OpenPortsError> {
    let targets: Vec<Reach> = plan
        .ports
        .iter()
        .map(|p| Reach { target: p.path.as_ref().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default(), export: None })
        .collect();
    let (mut devs, cutter, notes) = dial_hosts(plan, &targets, expect, o, None)?;
    let mut first: Option<crate::run::DeviceFacts> = None;
    for (i, d) in devs.iter_mut().enumerate() {
        let p = &plan.ports[i];
        let f = d.facts().map_err(|source| OpenPortsError::NotOpen { port: p.name.clone(), source })?;
        match &first {
            None => first = Some(f),
            Some(f0) if f0.capacity_bytes != f.capacity_bytes || f0.logical_block_bytes != f.logical_block_bytes => {
                return Err(OpenPortsError::Served {
                    port: p.name.clone(),
                    host: p.remote.as_ref().map_or(String::new(), |r| r.host.clone()),
                    why: format!(
                        "{} there is {} bytes with {}-byte sectors, port {}'s {} bytes with {}-byte sectors: the ports of one drive show one namespace",
                        targets[i].target, f.capacity_bytes, f.logical_block_bytes, plan.ports[0].name, f0.capacity_bytes, f0.logical_block_bytes
                    ),
                })
            }
            Some(_) => {}
        }
    }
    let f = first.ok_or(OpenPortsError::NoPorts)?;
    let sector = f.sector_bytes();
    // The drive's Identify is the agent's host's to read: the scenario's unit, else a sector.
    let (atomic, _) = super::atomic_unit(plan.scenario.target.atomic_bytes, sector, None)?;
    Ok(Devices {
        devs,
        cutter,
        identity: f.identity,
        sector,
        capacity: f.capacity_bytes,
        atomic,
        notes,
        _keep: None,
        declared_reads: None,
        saves: None,
    })
}

/// How a port's host reaches it: the target its agent opens, and the export this machine
/// serves it as (the simulated drive).
struct Reach {
    target: String,
    export: Option<String>,
}

/// Every port's device, the hosts' power switches, the notes of the dialling.
type Dialled = (Vec<Box<dyn Dut>>, Cutter, Vec<String>);

/// Dials each port's host (its transport with `{target}` its entry of `targets` and
/// `{faultline}` this binary), opens the port there held to `expect`, and opens each host's
/// power switch (with the simulated `drive`, the port's link goes down with its host).
fn dial_hosts(
    plan: &RunPlan,
    targets: &[Reach],
    expect: &Expectation,
    o: &RunnerOptions,
    drive: Option<&DualSim>,
) -> Result<Dialled, OpenPortsError> {
    let mut ports = Vec::new();
    for (i, p) in plan.ports.iter().enumerate() {
        let Some(r) = &p.remote else { return Err(OpenPortsError::NoPath(p.name.clone())) };
        let fail = |why: String| OpenPortsError::Served { port: p.name.clone(), host: r.host.clone(), why };
        let Reach { target, export } = &targets[i];
        let mut argv = Vec::new();
        for a in &r.transport {
            let a = a.replace("{target}", target);
            let a = match export {
                Some(e) => a.replace("{export}", e),
                None if a.contains("{export}") => {
                    return Err(fail("{export} in the transport: this machine serves no export of the drive (a real drive)".into()))
                }
                None => a,
            };
            argv.push(if a.contains("{faultline}") {
                let exe = o
                    .faultline_exe
                    .as_ref()
                    .ok_or_else(|| fail("{faultline} in the transport: this process knows no faultline binary".into()))?;
                a.replace("{faultline}", &exe.to_string_lossy())
            } else {
                a
            });
        }
        let transport = crate::transport::Transport::new(&argv, &r.host).map_err(|e| fail(format!("transport: {e}")))?;
        let mut port = remote_port(plan, o, &r.host, transport, target, expect);
        // A host whose port no fault hits is asked for no reset.
        if !plan.fault_ports.contains(&i) {
            port.resets.clear();
        }
        ports.push(port);
    }
    // Every host dialled at once: a host may take a while to answer (a lab guest boots).
    let opened: Vec<Result<RemoteDut, DutError>> = std::thread::scope(|sc| {
        let hs: Vec<_> = ports.into_iter().map(|port| sc.spawn(move || RemoteDut::open(port))).collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(DutError::Panicked("dialling the host")))).collect()
    });
    let mut devs: Vec<Box<dyn Dut>> = Vec::new();
    let mut switches: Vec<(String, Box<dyn PowerSwitch + Send>)> = Vec::new();
    let mut agents = Vec::new();
    let mut notes = Vec::new();
    for (i, (p, opened)) in plan.ports.iter().zip(opened).enumerate() {
        let r = p.remote.as_ref().expect("checked above");
        let fail = |why: String| OpenPortsError::Served { port: p.name.clone(), host: r.host.clone(), why };
        let mut remote = opened.map_err(|e| fail(format!("its agent: {e}")))?;
        notes.extend(remote.notes().into_iter().map(|n| format!("port {}: {n}", p.name)));
        if let Some(power) = &r.power {
            let host: Box<dyn PowerSwitch + Send> = match power {
                HostPower::Kill => Box::new(remote.host_kill()),
                HostPower::Controller(spec) => {
                    let c = control::open(spec, &o.control_env).map_err(|e| fail(format!("host_power: {e}")))?;
                    c.power.ok_or_else(|| fail(format!("host_power {spec}: not a power switch")))?
                }
            };
            let switch: Box<dyn PowerSwitch + Send> = match drive {
                Some(d) => Box::new(HostAndLink { host, link: d.link(), port: i as u8, name: p.name.clone() }),
                None => host,
            };
            switches.push((p.fault_name().to_string(), switch));
        }
        agents.push((p.fault_name().to_string(), remote.agent_reset()));
        devs.push(Box::new(match drive.filter(|_| i == 0) {
            Some(d) => remote.answering_for(d.clone()),
            None => remote,
        }));
    }
    Ok((devs, Cutter::hosts(switches).with_agents(agents), notes))
}
