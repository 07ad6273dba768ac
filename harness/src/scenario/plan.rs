//! A scenario validated once into the plan the runner executes.
//!
//! [`Scenario::plan`] checks the file (as [`Scenario::validate`] does), parses every controller
//! spec, resolves the ports and types the fault and the stop policy, so that the runner never
//! looks at a string it could have refused before cycle 1.

use super::{CutPlacement, Fault, FaultPick, RecoveryCuts, Scenario, ScenarioError, SimSwitch, SimTarget, StopPolicy, VerifyPolicy};
use crate::health::Shutdown;
use crate::ledger::Contract;
use crate::port::{PortEntry, PortId};
use crate::workload::Layout;
use faultline_drivers::blockdev::Expectation;
use faultline_drivers::control::ControllerSpec;
use faultline_drivers::identity::PathId;
use faultline_drivers::{PowerShape, ResetKind};
use std::path::PathBuf;
use std::time::Duration;

/// Everything a run does, validated.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// The scenario as validated, with the run's seed filled in (the run directory keeps it).
    pub scenario: Scenario,
    pub seed: u64,
    pub contract: Contract,
    pub target: TargetPlan,
    /// The port table: every port of the device under test, in order (a one-port run: port A
    /// over the whole span).
    pub ports: Vec<super::PortPlan>,
    /// The port each cycle's fault hits, in turn (indices into `ports`; a fault that hits
    /// every port hits them all).
    pub fault_ports: Vec<usize>,
    /// The faults, and which one each cycle injects ([`RunPlan::fault`]).
    pub faults: FaultMix,
    pub cut: CutPlacement,
    pub cycles: u32,
    /// Each cycle's off time ([`RunPlan::off_time`]).
    pub off_times: super::OffTime,
    pub readiness_timeout: Duration,
    pub verify: VerifyPolicy,
    pub stop: StopPolicy,
    /// What a dual-port run adds: the windows around each fault (warm-up, baseline, budgets),
    /// how shares are read (cross-verify, compare), its mode; `None`: one port, no windows.
    pub dual: Option<DualPlan>,
}

/// What a dual-port run adds to the port table, as executed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DualPlan {
    pub spec: super::DualSpec,
}

/// The faults of a run and how each cycle's is picked: one fault (every cycle the same), or a
/// mix drawn per cycle from (seed, cycle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultMix {
    /// `None`: one fault.
    pub pick: Option<FaultPick>,
    /// Each fault with its weight.
    pub entries: Vec<(FaultPlan, u32)>,
}

const FAULT_SALT: u64 = 0xfa17_0000_0000_0003;

impl FaultMix {
    pub fn single(f: FaultPlan) -> FaultMix {
        FaultMix { pick: None, entries: vec![(f, 1)] }
    }

    /// Which entry cycle `cycle` (from 1) injects.
    pub fn index(&self, seed: u64, cycle: u32) -> usize {
        let total: u64 = self.entries.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut k = match self.pick {
            None => return 0,
            Some(FaultPick::Sequence) => u64::from(cycle.saturating_sub(1)) % total.max(1),
            Some(FaultPick::Weighted) => crate::rng::WyRand::for_cycle(seed, FAULT_SALT, cycle).below(total.max(1)),
        };
        for (i, (_, w)) in self.entries.iter().enumerate() {
            if k < u64::from(*w) {
                return i;
            }
            k -= u64::from(*w);
        }
        0
    }

    /// Every fault the run may inject.
    pub fn all(&self) -> impl Iterator<Item = &FaultPlan> {
        self.entries.iter().map(|(f, _)| f)
    }

    /// Whether the run injects more than one kind of fault (a mix).
    pub fn is_mixed(&self) -> bool {
        self.pick.is_some()
    }
}

/// The device under test.
#[derive(Clone, Debug)]
pub enum TargetPlan {
    /// The simulated drive, kept in the run directory.
    Sim(SimTarget),
    /// A real device: at `path` (checked against `expect`), or found by `expect` alone, through
    /// the path `via` selects when its namespace has several.
    Device { path: Option<PathBuf>, expect: Expectation, via: Option<PathId> },
    /// A target on another host, written by its agent: `target` as the agent lists it, the
    /// transport command (`{host}` not yet replaced).
    Remote { host: String, transport: Vec<String>, target: String, expect: Expectation },
}

/// What switches the power.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switch {
    /// The simulated drive's switch, reached as the scenario says (in-process or through an
    /// emulator started for the run).
    Sim(SimSwitch),
    /// A real controller.
    Controller(ControllerSpec),
}

/// The fault each cycle injects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultPlan {
    /// Power cut with the queue full; `mate_steps_ms` sweeps pin-mate steps, one per cycle;
    /// `recovery`: more cuts while the drive recovers, before the one verify; `shape`: the cut
    /// is a shape the switch makes (a glitch, a sag, a ramp down; the power back by itself),
    /// not an off and an on (a ramp's hold is the cycle's off time, set when aimed).
    PowerCut { switch: Switch, mate_steps_ms: Vec<u32>, recovery: Option<RecoveryCuts>, shape: Option<PowerShape> },
    /// The control case: the writer drains (and flushes), then power is cut; `normal`: no
    /// flush, the drive's controllers shut down (CC.SHN) before the cut.
    CleanShutdown { switch: Switch, normal: bool },
    /// A link reset through a link controller, on `port` (`None`: its only port).
    LinkReset { controller: ControllerSpec, port: Option<String>, kind: ResetKind },
    /// The power of the faulted port's host (`all`: of every host, `stagger_ms` apart), through
    /// each port's `host_power` (the drive keeps power). `clean`: the host's clean shutdown
    /// (its writer drains and flushes first: the `Shutdown` placement).
    HostPowerCut { all: bool, stagger_ms: u64, clean: bool },
    /// A link reset the faulted port's host runs on itself, through its agent.
    HostLinkReset { kind: ResetKind },
}

impl FaultPlan {
    /// How the drive is shut down by the fault, for the health checks (`None`: a link reset,
    /// after which no shutdown count should move).
    pub fn shutdown(&self) -> Option<Shutdown> {
        match self {
            // A glitch or a sag the drive rides through is no shutdown at all, one it does not
            // is: nothing is expected.
            FaultPlan::PowerCut { shape: Some(_), .. } => None,
            FaultPlan::PowerCut { recovery: Some(r), .. } => Some(Shutdown::Repeated(r.cuts.saturating_add(1))),
            FaultPlan::PowerCut { .. } => Some(Shutdown::Dirty),
            FaultPlan::CleanShutdown { .. } => Some(Shutdown::Clean),
            FaultPlan::LinkReset { .. } | FaultPlan::HostPowerCut { .. } | FaultPlan::HostLinkReset { .. } => None,
        }
    }

    pub fn is_clean_shutdown(&self) -> bool {
        matches!(self, FaultPlan::CleanShutdown { .. })
    }

    /// A normal shutdown: the controllers shut down (CC.SHN) before the cut, no flush.
    pub fn is_normal_shutdown(&self) -> bool {
        matches!(self, FaultPlan::CleanShutdown { normal: true, .. })
    }

    /// A host power cut, of one host or of every host, or a host's clean shutdown.
    pub fn is_host_cut(&self) -> bool {
        matches!(self, FaultPlan::HostPowerCut { .. })
    }

    /// A host's clean shutdown.
    pub fn is_host_shutdown(&self) -> bool {
        matches!(self, FaultPlan::HostPowerCut { clean: true, .. })
    }

    /// The reset a host's agent runs for this fault, if it is one.
    pub fn host_reset(&self) -> Option<crate::reset::LinkReset> {
        match self {
            FaultPlan::HostLinkReset { kind } => Some(crate::reset::LinkReset::of(*kind)).filter(|r| r.on_host()),
            _ => None,
        }
    }

    /// A power cut, or a glitch (both the power switch's).
    pub fn is_power_cut(&self) -> bool {
        matches!(self, FaultPlan::PowerCut { .. })
    }

    /// A shape the switch makes (a glitch, a sag, a ramp): the drive may ride through it, its
    /// volatile cache kept.
    pub fn shape(&self) -> Option<&PowerShape> {
        match self {
            FaultPlan::PowerCut { shape, .. } => shape.as_ref(),
            _ => None,
        }
    }

    /// Whether the fault hits every port of the drive: a power cut, or an NVM subsystem reset.
    /// In a dual-port run no port is then judged against its baseline, and every writer's
    /// cycle ends at the cut.
    pub fn hits_every_port(&self) -> bool {
        matches!(
            self,
            FaultPlan::PowerCut { .. }
                | FaultPlan::LinkReset { kind: ResetKind::NvmeSubsystem, .. }
                | FaultPlan::HostLinkReset { kind: ResetKind::NvmeSubsystem }
                | FaultPlan::HostPowerCut { all: true, .. }
        )
    }

    /// The fault as the events and reports name it: `power-cut`, `clean-shutdown`, or the
    /// link reset's kind (`port-pull`, `nvme-controller-reset`, `pci-remove-rescan`, ...).
    pub fn label(&self) -> String {
        match self {
            FaultPlan::PowerCut { shape: Some(s), .. } => shape_label(s),
            FaultPlan::PowerCut { recovery: Some(r), .. } => r.label(),
            FaultPlan::PowerCut { .. } => "power-cut".into(),
            FaultPlan::CleanShutdown { normal: false, .. } => "clean-shutdown".into(),
            FaultPlan::CleanShutdown { normal: true, .. } => "normal-shutdown".into(),
            FaultPlan::LinkReset { kind, .. } => kind.to_string(),
            FaultPlan::HostPowerCut { clean: true, all: false, .. } => "host-shutdown".into(),
            FaultPlan::HostPowerCut { clean: true, all: true, .. } => "all-hosts-shutdown".into(),
            FaultPlan::HostPowerCut { all: false, .. } => "host-power-cut".into(),
            FaultPlan::HostPowerCut { all: true, stagger_ms: 0, .. } => "all-hosts-power-cut".into(),
            FaultPlan::HostPowerCut { all: true, .. } => "staggered-hosts-power-cut".into(),
            FaultPlan::HostLinkReset { kind } => format!("host-{kind}"),
        }
    }

    /// The cuts while the drive recovers that follow this fault's, if any.
    pub fn recovery(&self) -> Option<&RecoveryCuts> {
        match self {
            FaultPlan::PowerCut { recovery, .. } => recovery.as_ref(),
            _ => None,
        }
    }

    /// The pin-mate step of `cycle` (1-based), when the scenario sweeps them.
    pub fn mate_step_ms(&self, cycle: u32) -> Option<u32> {
        match self {
            FaultPlan::PowerCut { mate_steps_ms, .. } if !mate_steps_ms.is_empty() => {
                Some(mate_steps_ms[(cycle.max(1) as usize - 1) % mate_steps_ms.len()])
            }
            _ => None,
        }
    }
}

impl RunPlan {
    /// The workload validated against the real target's geometry.
    pub fn layout(&self, sector_bytes: u64, capacity_bytes: u64) -> Result<Layout, ScenarioError> {
        self.scenario.layout(sector_bytes, capacity_bytes, self.seed)
    }

    /// The port the run writes through (a single-port run's only one).
    /// The fault cycle `cycle` (from 1) injects.
    pub fn fault(&self, cycle: u32) -> &FaultPlan {
        &self.faults.entries[self.faults.index(self.seed, cycle)].0
    }

    /// How long cycle `cycle`'s (from 1) fault holds the power off, or the link down.
    pub fn off_time(&self, cycle: u32) -> Duration {
        self.off_times.at(self.seed, cycle)
    }

    /// Cycle `cycle`'s off time in ms, as its `cycle_started` records it: only in a run whose
    /// off time changes from cycle to cycle.
    pub fn recorded_off_time_ms(&self, cycle: u32) -> Option<u64> {
        self.off_times.varies().then(|| u64::try_from(self.off_time(cycle).as_millis()).unwrap_or(u64::MAX))
    }

    pub fn first_port(&self) -> PortId {
        self.ports.first().map_or(PortId::A, |p| p.id)
    }

    /// The port table as the run's ledger header keeps it.
    pub fn port_entries(&self) -> Vec<PortEntry> {
        self.ports.iter().map(|p| PortEntry { id: p.id, name: p.name.clone() }).collect()
    }

    /// The port cycle `cycle` (from 1) faults, when its fault hits one port: the faulted
    /// ports in turn, counting only the cycles whose fault hit one port (in a run of one
    /// fault, every cycle).
    pub fn faulted(&self, cycle: u32) -> usize {
        let earlier = if self.faults.is_mixed() {
            (1..cycle).filter(|&c| !self.fault(c).hits_every_port()).count()
        } else {
            cycle.saturating_sub(1) as usize
        };
        self.fault_ports.get(earlier % self.fault_ports.len().max(1)).copied().unwrap_or(0)
    }

    pub fn name(&self) -> &str {
        &self.scenario.name
    }
}

impl Scenario {
    /// Validates the scenario (errors prefixed by `origin`) and makes it a plan; the run's seed
    /// is the scenario's own, else `seed`.
    pub fn plan(&self, origin: &str, seed: u64) -> Result<RunPlan, ScenarioError> {
        self.validate(origin)?;
        let seed = self.seed.unwrap_or(seed);
        let mut scenario = self.clone();
        scenario.seed = Some(seed);
        let faults = self.plan_faults(origin)?;
        self.check_faults(origin, &faults)?;
        let target = self.plan_target();
        let (ports, fault_ports, dual) = self.plan_port_table(origin, &faults)?;
        Ok(RunPlan {
            dual,
            seed,
            contract: self.contract,
            target,
            ports,
            fault_ports,
            faults,
            cut: self.cut,
            cycles: self.cycles.count,
            off_times: self.cycles.off_time_ms.clone(),
            readiness_timeout: Duration::from_secs(self.cycles.readiness_timeout_s),
            verify: self.verify,
            stop: self.stop,
            scenario,
        })
    }

    /// The run's faults: the one fault, or each fault of the mix with its weight.
    fn plan_faults(&self, origin: &str) -> Result<FaultMix, ScenarioError> {
        Ok(match &self.fault {
            Fault::Mixed { pick, faults } => FaultMix {
                pick: Some(*pick),
                entries: faults.iter().map(|m| Ok((self.plan_fault(origin, &m.fault)?, m.weight))).collect::<Result<_, ScenarioError>>()?,
            },
            f => FaultMix::single(self.plan_fault(origin, f)?),
        })
    }

    /// A power cut the switch makes as `shape`.
    fn shaped(&self, origin: &str, shape: PowerShape) -> Result<FaultPlan, ScenarioError> {
        Ok(FaultPlan::PowerCut { switch: self.power_switch(origin)?, mate_steps_ms: Vec::new(), recovery: None, shape: Some(shape) })
    }

    /// One fault, with the controller that runs it.
    fn plan_fault(&self, origin: &str, f: &Fault) -> Result<FaultPlan, ScenarioError> {
        Ok(match f {
            Fault::PowerCut { mate_steps_ms, recovery } => FaultPlan::PowerCut {
                switch: self.power_switch(origin)?,
                mate_steps_ms: mate_steps_ms.clone(),
                recovery: *recovery,
                shape: None,
            },
            Fault::PowerGlitch { length_us, signals } => {
                self.shaped(origin, PowerShape::Glitch { length: Duration::from_micros(*length_us), signals: signals.clone() })?
            }
            Fault::PowerSag { rail, to_mv, length_ms } => self.shaped(
                origin,
                PowerShape::Sag { rail: rail.clone(), to_mv: *to_mv, length: Duration::from_millis((*length_ms).into()) },
            )?,
            Fault::PowerRamp { rail, to_mv, over_ms } => self.shaped(
                origin,
                PowerShape::Ramp {
                    rail: rail.clone(),
                    to_mv: *to_mv,
                    over: Duration::from_millis((*over_ms).into()),
                    hold: Duration::ZERO,
                },
            )?,
            Fault::CleanShutdown => FaultPlan::CleanShutdown { switch: self.power_switch(origin)?, normal: false },
            Fault::NormalShutdown => FaultPlan::CleanShutdown { switch: self.power_switch(origin)?, normal: true },
            Fault::LinkReset { reset, port } => {
                let controller = super::validate::parse_controller(origin, "controllers.link", self.controllers.link.as_deref())?
                    .ok_or_else(|| invalid(origin, "controllers.link", "a link_reset fault needs a link controller"))?;
                FaultPlan::LinkReset { controller, port: port.clone(), kind: reset.reset_kind() }
            }
            Fault::HostPowerCut { all_hosts, stagger_ms } => {
                FaultPlan::HostPowerCut { all: *all_hosts, stagger_ms: *stagger_ms, clean: false }
            }
            Fault::HostShutdown { all_hosts } => FaultPlan::HostPowerCut { all: *all_hosts, stagger_ms: 0, clean: true },
            Fault::HostLinkReset { reset } => FaultPlan::HostLinkReset { kind: reset.reset_kind() },
            Fault::Mixed { .. } => return Err(invalid(origin, "fault", "a mix inside a mix is not supported")),
        })
    }

    /// What cuts the drive's power: the simulated drive's switch, else `controllers.power`.
    fn power_switch(&self, origin: &str) -> Result<Switch, ScenarioError> {
        let power = super::validate::parse_controller(origin, "controllers.power", self.controllers.power.as_deref())?;
        match (&self.target.sim, power) {
            (Some(sim), _) => Ok(Switch::Sim(sim.switch)),
            (None, Some(spec)) => Ok(Switch::Controller(spec)),
            (None, None) => Err(invalid(origin, "controllers.power", "the fault needs a power switch")),
        }
    }

    /// The faults against the run's shape: a clean shutdown needs a cut placement other than a
    /// time window; a host's power cut, shutdown or link reset needs a dual-port run.
    fn check_faults(&self, origin: &str, faults: &FaultMix) -> Result<(), ScenarioError> {
        if matches!(self.cut, CutPlacement::DuringFormat { .. }) {
            if faults.all().any(FaultPlan::is_clean_shutdown) {
                return Err(invalid(
                    origin,
                    "cut.kind",
                    "during_format cuts while a format runs; a clean_shutdown drains an idle drive: pick one",
                ));
            }
            if self.dual.is_some() {
                return Err(invalid(
                    origin,
                    "cut.kind",
                    "during_format formats the whole namespace from one port: a dual-port run's windows have no place for it",
                ));
            }
        }
        if faults.all().any(FaultPlan::is_clean_shutdown) && matches!(self.cut, CutPlacement::UniformTime { .. }) {
            return Err(invalid(
                origin,
                "cut.kind",
                "a clean_shutdown fault cuts a drained drive: give cut.kind = \"while_idle\" (or \"after_completions\"), not a time window",
            ));
        }
        if let Some(f) = faults.all().find(|f| f.is_host_cut()).filter(|_| self.dual.is_none()) {
            let what = if f.is_host_shutdown() { "host_shutdown shuts down" } else { "host_power_cut cuts" };
            return Err(invalid(
                origin,
                "fault.kind",
                &format!("{what} the host of one port of a dual-port run: give [dual] and [[ports]] with host"),
            ));
        }
        if self.dual.is_none() && faults.all().any(|f| matches!(f, FaultPlan::HostLinkReset { .. })) {
            return Err(invalid(
                origin,
                "fault.kind",
                "host_link_reset is run by the agent of a dual-port run's port on its own host: give [dual] and [[ports]] with host",
            ));
        }
        Ok(())
    }

    /// The target: the simulated drive, a target on another host, or a device on this one.
    fn plan_target(&self) -> TargetPlan {
        match (&self.target.sim, &self.target.host) {
            (Some(sim), _) => TargetPlan::Sim(sim.clone()),
            (None, Some(host)) => TargetPlan::Remote {
                host: host.clone(),
                transport: self.target.transport.clone().unwrap_or_else(|| crate::transport::SSH.iter().map(|s| s.to_string()).collect()),
                target: self.target.path.as_ref().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
                expect: self.expectation(),
            },
            (None, None) => TargetPlan::Device { path: self.target.path.clone(), expect: self.expectation(), via: self.path_selector() },
        }
    }

    /// The port table, the ports each cycle's fault hits, and what a dual-port run's windows
    /// need: port A over the whole span for a one-port run.
    fn plan_port_table(&self, origin: &str, faults: &FaultMix) -> Result<PortTable, ScenarioError> {
        Ok(match &self.dual {
            None => (super::ports::single_port(self.target.path.clone()), vec![0], None),
            Some(spec) => {
                let mut ports = super::ports::plan_ports(origin, &self.ports, self.target.sim.is_some())?;
                if ports.is_empty() {
                    ports = super::ports::default_sim_ports();
                }
                let fault_ports = super::ports::plan_fault_ports(origin, spec, &ports)?;
                self.check_hosts(origin, &ports, &fault_ports, faults)?;
                (ports, fault_ports, Some(DualPlan { spec: spec.clone() }))
            }
        })
    }
}

/// The port table, the ports each cycle's fault hits (indices into it), and the dual-port plan.
type PortTable = (Vec<super::PortPlan>, Vec<usize>, Option<DualPlan>);

/// A scenario error naming `field` of the scenario `origin`.
fn invalid(origin: &str, field: &str, message: &str) -> ScenarioError {
    ScenarioError::Invalid { origin: origin.into(), field: field.into(), message: message.into() }
}

impl Scenario {
    /// What a dual-port run with ports on other hosts can do yet, and what a host power cut
    /// needs: every faulted port on a host with a `host_power`.
    fn check_hosts(&self, origin: &str, ports: &[super::PortPlan], fault_ports: &[usize], faults: &FaultMix) -> Result<(), ScenarioError> {
        let bad = |field: String, message: String| Err(ScenarioError::Invalid { origin: origin.into(), field, message });
        let remote: Vec<usize> = (0..ports.len()).filter(|&i| ports[i].remote.is_some()).collect();
        let host_cut = faults.all().any(FaultPlan::is_host_cut);
        let all_hosts = faults.all().any(|f| matches!(f, FaultPlan::HostPowerCut { all: true, .. }));
        if host_cut {
            let what = if faults.all().any(|f| f.is_host_cut() && !f.is_host_shutdown()) { "host_power_cut" } else { "host_shutdown" };
            // Every port's host when every host is cut, else the faulted ports'.
            let hit: Vec<usize> = if all_hosts { (0..ports.len()).collect() } else { fault_ports.to_vec() };
            for &i in &hit {
                let p = &ports[i];
                match &p.remote {
                    None => return bad(format!("ports[{i}].host"), format!("{what} hits port {}: it needs the host it is cabled to", p.name)),
                    Some(r) if r.power.is_none() => {
                        return bad(
                            format!("ports[{i}].host_power"),
                            format!("{what} hits port {} on {}: say what cuts that host's power (an exec: IPMI command, a relay, or kill for an agent on this machine)", p.name, r.host),
                        )
                    }
                    Some(_) => {}
                }
            }
        }
        for f in faults.all() {
            let FaultPlan::HostLinkReset { kind } = f else { continue };
            if !crate::reset::LinkReset::of(*kind).on_host() {
                return bad(
                    "fault.reset".into(),
                    format!("{kind}: not a reset a host runs on itself (host_link_reset runs nvme_controller, nvme_subsystem, pci_function*, pci_remove_rescan)"),
                );
            }
            if let Some(&i) = fault_ports.iter().find(|&&i| ports[i].remote.is_none()) {
                return bad(
                    format!("ports[{i}].host"),
                    format!(
                        "host_link_reset hits port {}: its host's agent runs the reset, so the port needs the host it is cabled to",
                        ports[i].name
                    ),
                );
            }
        }
        if remote.is_empty() {
            return Ok(());
        }
        let not_yet = |what: &str| format!("{what} with ports on other hosts is not carried by the agent protocol yet");
        if let Some(f) = faults.all().find(|f| !f.is_host_cut() && !matches!(f, FaultPlan::HostLinkReset { .. })) {
            return bad(
                "fault.kind".into(),
                format!("{}: {}", f.label(), not_yet("a fault other than host_power_cut, host_shutdown and host_link_reset")),
            );
        }
        if let Some(i) = (0..ports.len()).find(|&i| ports[i].remote.is_none() || ports[i].role == super::PortRole::Reader) {
            return bad(format!("ports[{i}]"), "every port of a run with ports on other hosts is on a host of its own, and writes (a reader verifies the other hosts' shares: not carried yet)".into());
        }
        Ok(())
    }
}

/// How the events and reports name a power shape: `power-glitch-500us`,
/// `power-sag-9500mv-20ms`, `power-ramp-50ms-to-0mv`.
fn shape_label(s: &PowerShape) -> String {
    match s {
        PowerShape::Glitch { length, .. } => format!("power-glitch-{}us", length.as_micros()),
        PowerShape::Sag { to_mv, length, .. } => format!("power-sag-{to_mv}mv-{}ms", length.as_millis()),
        PowerShape::Ramp { to_mv, over, .. } => format!("power-ramp-{}ms-to-{to_mv}mv", over.as_millis()),
    }
}
