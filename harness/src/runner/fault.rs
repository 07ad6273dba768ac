//! Faults: where in a cycle the cut lands, what does it (a power switch or a link controller),
//! and how it is confirmed. A fault that cannot be confirmed is never a clean pass: a switch
//! with state readback must read back `off` after the cut; otherwise the device must have
//! stopped answering (the runner checks that).

use super::shutdown::ControllerShutdown;
use crate::rng::WyRand;
use crate::scenario::{self, FaultMix, FaultPlan, SimSwitch, Switch};
use crate::writer::CutPlacement;
use faultline_drivers::control::{self, parse_spec, ControlEnv, ControllerSpec};
use faultline_drivers::{LinkController, PowerShape, PowerState, PowerSwitch, ResetKind};
use faultline_fixtures::emu::{LcusEmu, NumatoEmu, QuarchEmu, QuarchKind, QuarchModule};
use faultline_fixtures::SimPower;
use std::any::Any;
use std::time::{Duration, Instant};

pub use super::controller_error::{ControllerError, Missing};

/// The writer's placement for one cycle, and the `after_ms` drawn for `uniform_time`.
///
/// A clean shutdown cuts a drained and flushed drive: it takes the `Shutdown` placement after
/// the scenario's completion count (the plan refuses a time window for it); a normal one
/// (`Some(true)`) a drained drive whose controller shuts down at the cut.
pub fn placement(cut: &scenario::CutPlacement, shutdown: Option<bool>, rng: &mut WyRand) -> (CutPlacement, Option<u64>) {
    use scenario::CutPlacement as S;
    if let Some(controller) = shutdown {
        let after = match *cut {
            S::WhileIdle { after_completions } | S::WhileFlushOutstanding { after_completions } => after_completions,
            S::AfterCompletions { completions } => completions,
            S::UniformCompletions { min_completions, max_completions } => {
                min_completions + rng.below(max_completions.saturating_sub(min_completions) + 1)
            }
            // Refused by `Scenario::plan`; the first completion is the only sensible reading.
            S::UniformTime { .. } | S::DuringFormat { .. } => 1,
        };
        return (CutPlacement::Shutdown { after_ms: 0, after_completions: after.max(1), controller }, None);
    }
    match *cut {
        S::UniformTime { window_start_ms, window_end_ms } => {
            let ms = draw_after_ms(rng, window_start_ms, window_end_ms);
            (CutPlacement::AfterTime { after_ms: ms }, Some(ms))
        }
        S::AfterCompletions { completions } => (CutPlacement::AfterCompletions { completions }, None),
        S::UniformCompletions { min_completions, max_completions } => {
            let completions = min_completions + rng.below(max_completions.saturating_sub(min_completions) + 1);
            (CutPlacement::AfterCompletions { completions }, None)
        }
        S::WhileFlushOutstanding { after_completions } => (CutPlacement::WhileFlushOutstanding { after_completions }, None),
        S::WhileIdle { after_completions } => (CutPlacement::Idle { after_completions }, None),
        S::DuringFormat { after_completions, min_cut_ms, max_cut_ms } => {
            let cut_after_ms = draw_after_ms(rng, min_cut_ms, max_cut_ms);
            (CutPlacement::DuringFormat { after_completions, cut_after_ms }, None)
        }
    }
}

/// Uniform in `[start, end]` milliseconds (inclusive).
pub fn draw_after_ms(rng: &mut WyRand, start: u64, end: u64) -> u64 {
    let (lo, hi) = (start.min(end), start.max(end));
    lo + rng.below(hi - lo + 1)
}

/// A per-cycle random stream: the same for a cycle whether or not the harness died before it.
pub(crate) fn cycle_rng(seed: u64, salt: u64, cycle: u32) -> WyRand {
    WyRand::for_cycle(seed, salt, cycle)
}

pub(crate) const PLACE_SALT: u64 = 0x0c07_91ac_e000_0001;
pub(crate) const SAMPLE_SALT: u64 = 0x5a3b_1e00_0000_0002;

/// What the faults are done with: the run's power switch and link controller, each opened
/// once, aimed at the cycle's fault ([`Cutter::aim`]; a run of one fault stays aimed at it).
pub struct Cutter {
    power: Option<Box<dyn PowerSwitch + Send>>,
    link: Option<Box<dyn LinkController + Send>>,
    /// The power switch of each host a port is cabled to, by the port's fault name.
    hosts: Vec<(String, Box<dyn PowerSwitch + Send>)>,
    /// The link reset each host's agent runs, by the port's fault name.
    agents: Vec<(String, Box<dyn HostReset>)>,
    /// When the power switch's off command returned, until the power is on again.
    off_at: Option<Instant>,
    aim: Aim,
    /// A normal shutdown's host side: the drive's controllers shut down before the cut.
    shutdown: Option<Box<dyn ControllerShutdown>>,
    /// What the shutdowns did since the last [`Cutter::take_log`].
    said: Vec<String>,
}

/// A link reset a port's own host runs (its agent, over the wire), as the cutter sees it: aimed
/// before the cycle, run by the port's host in the cycle that cuts, reported back after.
pub trait HostReset: Send {
    /// The host's next cut is this reset, held down this long (`None`: not a reset of this
    /// host's); nothing reported yet.
    fn aim(&self, want: Option<(crate::reset::LinkReset, Duration)>);
    /// What the host reported of the reset aimed at it: `Ok` once it ran, the failure it
    /// reported, or that no report came.
    fn take_report(&self) -> Result<(), ControllerError>;
    /// What the host's resets noted since the last call, for the event log.
    fn take_log(&self) -> Vec<String>;
}

/// What the next cut does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Aim {
    /// Power off (and on again after the off time).
    Power,
    /// The drive's controllers shut down (CC.SHN), then power off (and on again after the
    /// off time, the controllers taken up again).
    NormalShutdown,
    /// A shape the power switch makes (a glitch, a sag, a ramp down): the power back by
    /// itself when it is over.
    Shape(PowerShape),
    /// Reset `port` of the link controller.
    Link { port: String, kind: ResetKind },
    /// Cut the power of the host `port` is cabled to, hold it off, restore it.
    Host { port: String },
    /// Cut every host's power, `stagger` apart (in the ports' order), hold them off, restore
    /// them (in the same order, `stagger` apart).
    AllHosts { stagger: Duration },
    /// The agent on `port`'s host resets its own link, once its writer is told the cut is
    /// done (the cut itself does nothing here; the agent's report confirms it).
    AgentLink { port: String, kind: ResetKind },
}

impl Cutter {
    /// A cutter of these switches, no agents, aimed at `aim`.
    fn of(
        power: Option<Box<dyn PowerSwitch + Send>>,
        link: Option<Box<dyn LinkController + Send>>,
        hosts: Vec<(String, Box<dyn PowerSwitch + Send>)>,
        aim: Aim,
    ) -> Cutter {
        Cutter { power, link, hosts, agents: Vec::new(), off_at: None, aim, shutdown: None, said: Vec::new() }
    }

    /// With the host side of a normal shutdown: what shuts the drive's controllers down.
    pub fn with_shutdown(mut self, s: Box<dyn ControllerShutdown>) -> Cutter {
        self.shutdown = Some(s);
        self
    }

    pub fn power(p: Box<dyn PowerSwitch + Send>) -> Cutter {
        Cutter::of(Some(p), None, Vec::new(), Aim::Power)
    }

    pub fn link(ctl: Box<dyn LinkController + Send>, port: String, kind: ResetKind) -> Cutter {
        Cutter::of(None, Some(ctl), Vec::new(), Aim::Link { port, kind })
    }

    /// The power switches of the hosts the ports are cabled to (port fault name, switch),
    /// aimed at the first.
    pub fn hosts(hosts: Vec<(String, Box<dyn PowerSwitch + Send>)>) -> Cutter {
        let port = hosts.first().map(|(p, _)| p.clone()).unwrap_or_default();
        Cutter::of(None, None, hosts, Aim::Host { port })
    }

    /// With the link resets the ports' hosts' agents run (port fault name, its reset).
    pub fn with_agents(mut self, agents: Vec<(String, Box<dyn HostReset>)>) -> Cutter {
        self.agents = agents;
        self
    }

    /// With `other`'s power switch and link controller where this one has none (aimed as
    /// this one is): a mix of power cuts and link resets.
    pub fn joined(mut self, other: Cutter) -> Cutter {
        self.power = self.power.or(other.power);
        self.link = self.link.or(other.link);
        self.hosts.extend(other.hosts);
        self.agents.extend(other.agents);
        self
    }

    /// The link controller, if the run has one.
    pub fn link_controller(&self) -> Option<&(dyn LinkController + Send)> {
        self.link.as_deref()
    }

    /// Aims the next cut at `fault`: the power switch for a power cut or a clean shutdown;
    /// for a link reset, the link controller's `port` (else the fault's own port, else the
    /// controller's only one). A host's own reset with a down phase holds it `hold` (the
    /// cycle's off time; the cutter's other cuts are given theirs when they fire).
    pub fn aim(&mut self, fault: &FaultPlan, port: Option<&str>, hold: Duration) -> Result<(), ControllerError> {
        // No agent resets unless this fault is one, and then only the faulted host's.
        for (_, a) in &self.agents {
            a.aim(None);
        }
        self.aim = match fault {
            FaultPlan::PowerCut { shape: Some(s), .. } => {
                if self.power.is_none() {
                    return Err(Missing::PowerSwitch.into());
                }
                Aim::Shape(match s {
                    // A ramp is held down for the cycle's off time.
                    PowerShape::Ramp { rail, to_mv, over, .. } => PowerShape::Ramp { rail: rail.clone(), to_mv: *to_mv, over: *over, hold },
                    s => s.clone(),
                })
            }
            FaultPlan::CleanShutdown { normal: true, .. } => {
                if self.power.is_none() {
                    return Err(Missing::PowerSwitch.into());
                }
                Aim::NormalShutdown
            }
            FaultPlan::PowerCut { .. } | FaultPlan::CleanShutdown { .. } => {
                if self.power.is_none() {
                    return Err(Missing::PowerSwitch.into());
                }
                Aim::Power
            }
            FaultPlan::LinkReset { port: own, kind, .. } => {
                let ctl = self.link.as_ref().ok_or(Missing::LinkController)?;
                let port = match port.map(str::to_string).or_else(|| own.clone()) {
                    Some(p) => p,
                    None => only_port(ctl.as_ref())?,
                };
                Aim::Link { port, kind: *kind }
            }
            FaultPlan::HostPowerCut { all: true, stagger_ms, .. } => {
                if self.hosts.is_empty() {
                    return Err(Missing::HostPower.into());
                }
                Aim::AllHosts { stagger: Duration::from_millis(*stagger_ms) }
            }
            FaultPlan::HostPowerCut { all: false, .. } => {
                let port = port.ok_or(Missing::Port { what: "a host power cut" })?;
                if !self.hosts.iter().any(|(p, _)| p == port) {
                    return Err(Missing::PortHostPower { port: port.to_string() }.into());
                }
                Aim::Host { port: port.to_string() }
            }
            FaultPlan::HostLinkReset { kind } => {
                let port = port.ok_or(Missing::Port { what: "a host's link reset" })?;
                let reset = Some(crate::reset::LinkReset::of(*kind)).filter(|r| r.on_host()).ok_or(Missing::NotAHostReset(*kind))?;
                let Some((_, a)) = self.agents.iter().find(|(p, _)| p == port) else {
                    return Err(Missing::Agent { port: port.to_string(), kind: *kind }.into());
                };
                a.aim(Some((reset, hold)));
                Aim::AgentLink { port: port.to_string(), kind: *kind }
            }
        };
        Ok(())
    }

    pub fn cut(&mut self, hold: Duration) -> Result<(), ControllerError> {
        self.off_at = None;
        match (&self.aim, &mut self.power, &mut self.link) {
            (Aim::Power, Some(p), _) => {
                p.power_off()?;
                self.off_at = Some(Instant::now());
                Ok(())
            }
            (Aim::NormalShutdown, Some(p), _) => {
                let s = self.shutdown.as_mut().ok_or(Missing::ControllerShutdown)?;
                let took = s.shutdown().map_err(|source| ControllerError::Shutdown { what: s.name(), source })?;
                self.said.push(format!("normal shutdown: {} shut down (CC.SHN, CSTS.SHST complete) in {} us", s.name(), took.as_micros()));
                p.power_off()?;
                self.off_at = Some(Instant::now());
                Ok(())
            }
            // Timed by the switch: over, and the power back, when the command returns.
            (Aim::Shape(s), Some(p), _) => Ok(p.shape(s)?),
            (Aim::Link { port, kind }, _, Some(ctl)) => Ok(ctl.reset(port, *kind, hold)?),
            (Aim::Host { port }, _, _) => {
                let Some((_, p)) = self.hosts.iter_mut().find(|(q, _)| q == port) else {
                    return Err(Missing::HostPowerNotOpen { port: port.clone() }.into());
                };
                // Off, confirmed where the switch reads back, held off, on again: the host
                // boots, and its port is back once its agent answers (the port's readiness).
                host_off(p.as_mut())?;
                std::thread::sleep(hold);
                Ok(p.power_on()?)
            }
            // The agent runs it when its writer hears the cut is done (this returns at once).
            (Aim::AgentLink { .. }, _, _) => Ok(()),
            (Aim::AllHosts { stagger }, _, _) => {
                let stagger = *stagger;
                let n = self.hosts.len();
                for (k, (_, p)) in self.hosts.iter_mut().enumerate() {
                    host_off(p.as_mut())?;
                    if k + 1 < n {
                        std::thread::sleep(stagger);
                    }
                }
                std::thread::sleep(hold);
                for (k, (_, p)) in self.hosts.iter_mut().enumerate() {
                    p.power_on()?;
                    if k + 1 < n {
                        std::thread::sleep(stagger);
                    }
                }
                Ok(())
            }
            _ => Err(Missing::NotOpen.into()),
        }
    }

    /// Power back on once it has been off for `off`, counted from the off command's return
    /// (called when the writers have ended after the cut: at once, when that took longer);
    /// a link reset has already come back up. For a power cut: how long the power was off,
    /// from the off command's return to the on command's start (`None` when the off command
    /// did not return done: then the whole `off` from now).
    pub fn restore(&mut self, off: Duration) -> Result<Option<Duration>, ControllerError> {
        match (&self.aim, &mut self.power) {
            (Aim::Power | Aim::NormalShutdown, Some(p)) => {
                std::thread::sleep(self.off_at.map_or(off, |t| off.saturating_sub(t.elapsed())));
                let held = self.off_at.take().map(|t| t.elapsed());
                p.power_on()?;
                if let (Aim::NormalShutdown, Some(s)) = (&self.aim, self.shutdown.as_mut()) {
                    s.resume().map_err(|source| ControllerError::Shutdown { what: s.name(), source })?;
                }
                Ok(held)
            }
            // The switch held the shape for its length, and put the power back.
            (Aim::Shape(PowerShape::Glitch { length, .. } | PowerShape::Sag { length, .. }), Some(_)) => Ok(Some(*length)),
            (Aim::Shape(PowerShape::Ramp { hold, .. }), Some(_)) => Ok(Some(*hold)),
            _ => Ok(None),
        }
    }

    /// Turns the power switch on if it reads back off (or cannot read back); `true` when it
    /// read back off. Nothing without a power switch.
    pub fn power_on_if_off(&mut self) -> Result<bool, ControllerError> {
        let Some(p) = &mut self.power else { return Ok(false) };
        let readback = p.capabilities().state_readback;
        let off = readback && p.state()? == PowerState::Off;
        if off || !readback {
            p.power_on()?;
        }
        Ok(off)
    }

    /// Whether the switch itself confirms the cut: `None` when it cannot read its state back
    /// (the device disappearing must confirm it) or for a link reset (the controller confirms
    /// the reset it reports done).
    pub fn confirm(&mut self) -> Option<Result<(), ControllerError>> {
        match (&self.aim, &mut self.power) {
            (Aim::Power | Aim::NormalShutdown, Some(p)) if p.capabilities().state_readback => Some(match p.state() {
                Ok(PowerState::Off) => Ok(()),
                Ok(PowerState::On) => Err(ControllerError::StillOn { switch: p.name() }),
                Err(e) => Err(ControllerError::Readback(e)),
            }),
            (Aim::AgentLink { port, .. }, _) => {
                let a = self.agents.iter().find(|(p, _)| p == port).map(|(_, a)| a)?;
                Some(a.take_report())
            }
            // The module answered OK once its shape was over: the power already back, so
            // nothing reads back off, and a drive that rode through never went away.
            (Aim::Shape(_), Some(_)) => Some(Ok(())),
            _ => None,
        }
    }

    /// Sets the pin-mate step for the next cut and power-on (power switches only).
    pub fn set_mate_step(&mut self, step_ms: u32) -> Result<(), ControllerError> {
        match (&mut self.power, &self.link) {
            (Some(p), _) => Ok(p.set_mate_step(step_ms)?),
            (None, Some(ctl)) => Err(Missing::LinkMateStep(ctl.name()).into()),
            (None, None) => Err(Missing::MateStep.into()),
        }
    }

    /// The transcript of what the controllers exchanged since the last call (an `exec:`
    /// switch's commands and their output), for the event log.
    pub fn take_log(&mut self) -> Vec<String> {
        let mut lines = std::mem::take(&mut self.said);
        lines.extend(self.power.as_mut().map(|p| p.take_log()).unwrap_or_default());
        lines.extend(self.link.as_mut().map(|l| l.take_log()).unwrap_or_default());
        for (_, h) in &mut self.hosts {
            lines.extend(h.take_log());
        }
        for (_, a) in &self.agents {
            lines.extend(a.take_log());
        }
        lines
    }

    /// Whether the next cut is a link reset.
    pub fn is_link(&self) -> bool {
        matches!(self.aim, Aim::Link { .. } | Aim::AgentLink { .. })
    }
}

/// Cuts a host's power, confirmed where its switch reads its state back.
fn host_off(p: &mut (dyn PowerSwitch + Send)) -> Result<(), ControllerError> {
    p.power_off()?;
    if p.capabilities().state_readback && p.state()? != PowerState::Off {
        return Err(ControllerError::HostStillOn { switch: p.name() });
    }
    Ok(())
}

/// The only port of a link controller (a fault that names none).
fn only_port(ctl: &dyn LinkController) -> Result<String, ControllerError> {
    match ctl.ports().as_slice() {
        [only] => Ok(only.port.clone()),
        ports => {
            let ports = ports.iter().map(|p| p.port.clone()).collect();
            Err(Missing::WhichPort { controller: ctl.name(), ports }.into())
        }
    }
}

/// How long a device may go on answering after a cut by a switch that cannot read its state
/// back, before the cut counts as not confirmed.
pub(crate) const CONFIRM_GRACE: Duration = Duration::from_secs(2);

/// Confirms a cut: a switch that reads its state back must read `off`; a link controller
/// confirms the reset it reports done; otherwise the device must have stopped answering, as
/// the writers saw it (`gone`: a write failed with the device gone, or writes in flight at
/// the cut failed) or as `answers` finds within [`CONFIRM_GRACE`] (a relay that does not
/// acknowledge may switch a few milliseconds after its command was sent).
pub(crate) fn confirm_cut(cutter: &mut Cutter, gone: bool, answers: &mut dyn FnMut() -> bool) -> Result<(), ControllerError> {
    match cutter.confirm() {
        Some(r) => r,
        None if cutter.is_link() || gone => Ok(()),
        None => {
            let t = std::time::Instant::now();
            loop {
                if !answers() {
                    return Ok(());
                }
                if t.elapsed() >= CONFIRM_GRACE {
                    return Err(ControllerError::Unconfirmed { grace_ms: CONFIRM_GRACE.as_millis() });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Whether a writer's cycle saw the device go at its cut.
pub(crate) fn saw_device_go(o: &crate::writer::CycleOutcome) -> bool {
    o.device_gone_at.is_some() || (o.in_flight_at_cut > 0 && o.failed > 0)
}

/// The switch of a simulated drive: in-process, or a protocol emulator started here (returned,
/// to be kept alive for the run) and driven by the real controller driver.
pub fn sim_switch(
    switch: SimSwitch,
    power: SimPower,
    seed: u64,
    env: &ControlEnv,
) -> Result<(Cutter, Option<Box<dyn Any>>), ControllerError> {
    let started = |e: std::io::Error| ControllerError::Emulator { switch, source: super::shared::Shared::new(e) };
    let (spec, emu): (String, Box<dyn Any>) = match switch {
        SimSwitch::Direct => return Ok((Cutter::power(Box::new(power)), None)),
        SimSwitch::QuarchSerial => {
            let e = QuarchEmu::serial(QuarchModule { kind: QuarchKind::Power, power }, seed).map_err(started)?;
            (format!("quarch+serial://{}", e.endpoint()), Box::new(e))
        }
        SimSwitch::QuarchHotplugSerial => {
            let e = QuarchEmu::serial(QuarchModule { kind: QuarchKind::HotPlug, power }, seed).map_err(started)?;
            (format!("quarch+serial://{}", e.endpoint()), Box::new(e))
        }
        SimSwitch::QuarchTcp => {
            let e = QuarchEmu::tcp(QuarchModule { kind: QuarchKind::Power, power }, seed).map_err(started)?;
            (format!("quarch+tcp://{}", e.endpoint()), Box::new(e))
        }
        SimSwitch::LcusSerial => {
            let e = LcusEmu::new(vec![(1, power)]).map_err(started)?;
            (format!("lcus+serial://{}?channel=1", e.path()), Box::new(e))
        }
        SimSwitch::NumatoSerial => {
            let e = NumatoEmu::new(vec![(1, power)], seed).map_err(started)?;
            (format!("numato+serial://{}?relay=1", e.path()), Box::new(e))
        }
    };
    let parsed = parse_spec(&spec)?;
    let c = control::open(&parsed, env)?;
    let p = c.power.ok_or(Missing::SimPower(spec))?;
    Ok((Cutter::power(p), Some(emu)))
}

/// Every shape of the run's faults is one the power switch declares it makes: refused when the
/// run opens, before any cycle, not at the first cut.
pub fn require_shapes(cutter: &Cutter, faults: &FaultMix) -> Result<(), ControllerError> {
    let Some(p) = cutter.power.as_deref() else { return Ok(()) };
    let caps = p.capabilities();
    match faults.all().filter_map(FaultPlan::shape).find(|s| !caps.makes(s)) {
        Some(s) => Err(Missing::CannotShape { switch: p.name(), shape: s.to_string() }.into()),
        None => Ok(()),
    }
}

/// Opens the controllers a real target's faults need (each spec once) and aims at the
/// first; every link reset's port must support its kind.
pub fn real_cutter(faults: &FaultMix, env: &ControlEnv) -> Result<Cutter, ControllerError> {
    let open = |spec: &ControllerSpec| control::open(spec, env).map_err(ControllerError::Open);
    let mut power = None;
    let mut link = None;
    for fault in faults.all() {
        match fault {
            FaultPlan::PowerCut { switch, .. } | FaultPlan::CleanShutdown { switch, .. } if power.is_none() => {
                let Switch::Controller(spec) = switch else {
                    return Err(Missing::RealPower.into());
                };
                let c = open(spec)?;
                power = Some(c.power.ok_or(Missing::PowerRole)?);
            }
            FaultPlan::LinkReset { controller, .. } if link.is_none() => {
                let c = open(controller)?;
                link = Some(c.link.ok_or(Missing::LinkRole)?);
            }
            _ => {}
        }
    }
    let mut cutter = Cutter::of(power, link, Vec::new(), Aim::Power);
    for fault in faults.all() {
        cutter.aim(fault, None, Duration::ZERO)?;
        if let (Aim::Link { port, kind }, Some(ctl)) = (&cutter.aim, &cutter.link) {
            ctl.require(port, *kind)?;
        }
    }
    if let Some((first, _)) = faults.entries.first() {
        cutter.aim(first, None, Duration::ZERO)?;
    }
    require_shapes(&cutter, faults)?;
    Ok(cutter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_the_power_switch_does_not_declare_is_refused_when_the_run_opens() {
        let drive = faultline_fixtures::SimDrive::new(faultline_fixtures::SimConfig {
            capacity_bytes: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 4096,
            queue_depth: 4,
            seed: 1,
            model: faultline_fixtures::FaultModel::HonestPlp,
            contract: faultline_fixtures::TruthContract::Plp,
            dealloc_reads: Default::default(),
        });
        let cutter = Cutter::power(Box::new(drive.power()));
        let sag = PowerShape::Sag { rail: "12V".into(), to_mv: 9_500, length: Duration::from_millis(5) };
        let shaped = |shape| {
            let switch = Switch::Sim(SimSwitch::Direct);
            FaultMix::single(FaultPlan::PowerCut { switch, mate_steps_ms: Vec::new(), recovery: None, shape })
        };
        let e = require_shapes(&cutter, &shaped(Some(sag))).unwrap_err().to_string();
        assert!(e.starts_with("controllers.power: sim cannot sag the 12V rail to 9500 mV for 5ms"), "{e}");
        assert!(require_shapes(&cutter, &shaped(None)).is_ok());
    }

    #[test]
    fn runner_uniform_time_draw_is_deterministic_and_inside_the_window() {
        let cut = scenario::CutPlacement::UniformTime { window_start_ms: 5, window_end_ms: 9 };
        let draws = |seed| {
            let mut rng = WyRand::new(seed);
            (0..200).map(|_| placement(&cut, None, &mut rng)).collect::<Vec<_>>()
        };
        let a = draws(11);
        assert_eq!(a, draws(11));
        assert_ne!(a, draws(12));
        let ms: std::collections::BTreeSet<u64> = a.iter().map(|(_, m)| m.unwrap()).collect();
        assert_eq!(ms, (5..=9).collect(), "every value of the inclusive window is drawn");
        assert!(a.iter().all(|(p, m)| *p == CutPlacement::AfterTime { after_ms: m.unwrap() }));
        assert_eq!(draw_after_ms(&mut WyRand::new(1), 7, 7), 7);
    }

    #[test]
    fn runner_placements_map_onto_the_writer() {
        let mut rng = WyRand::new(1);
        use scenario::CutPlacement as S;
        assert_eq!(
            placement(&S::AfterCompletions { completions: 7 }, None, &mut rng),
            (CutPlacement::AfterCompletions { completions: 7 }, None)
        );
        assert_eq!(
            placement(&S::WhileFlushOutstanding { after_completions: 3 }, None, &mut rng),
            (CutPlacement::WhileFlushOutstanding { after_completions: 3 }, None)
        );
        let drawn: std::collections::BTreeSet<u64> = (0..400)
            .map(|_| match placement(&S::UniformCompletions { min_completions: 8, max_completions: 12 }, None, &mut rng).0 {
                CutPlacement::AfterCompletions { completions } => completions,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(drawn, (8..=12).collect(), "every count of the inclusive range is drawn");
        assert_eq!(placement(&S::WhileIdle { after_completions: 4 }, None, &mut rng), (CutPlacement::Idle { after_completions: 4 }, None));
        assert_eq!(
            placement(&S::AfterCompletions { completions: 7 }, Some(false), &mut rng),
            (CutPlacement::Shutdown { after_ms: 0, after_completions: 7, controller: false }, None),
            "a clean shutdown cuts a drained, flushed drive"
        );
    }
}
