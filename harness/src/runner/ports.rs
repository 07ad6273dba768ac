//! The ports of the device under test, as a cycle reaches them around a fault: one
//! [`Dut`] per port (one for a single-port run), with each port's health logs as last read.
//! Whatever a one-port run does after a fault, a dual-port run does for every port through
//! these: wait until each answers (a `ready` event, or a `dead_device` finding), read and judge
//! each controller's health, power-cycle a dead device, gather the ports' notes.

use super::dut::{Dut, DutError, GroundTruth, HealthLogs, Readiness};
use super::emit::{micros, Emitter};
use super::fault::Cutter;
use super::stop::CycleEnd;
use crate::events::{Event, EventKind, HealthNote, SmartFigures};
use crate::health::{judge, judge_ocp, HealthAnomaly, HealthCheck, HealthPolicy, Shutdown};
use crate::port::PortId;
use crate::scenario::RunPlan;
use crate::verify::{Finding, FindingClass, Shown};
use std::time::Duration;

/// Every port of the device under test, in the run's port table's order.
pub(crate) struct PortSet {
    pub duts: Vec<Box<dyn Dut>>,
    /// Each port's health logs as last read (`None`: it has none to read, or none yet).
    health: Vec<Option<HealthLogs>>,
    /// Each port's id and name (the run plan's port table).
    names: Vec<(PortId, String)>,
    /// The run's faults cut hosts' power (`host_power_cut`): a host not back is a `dead_host`
    /// finding, not a harness error.
    host_cut: bool,
    /// Each port's anomalies seen while it came back (answering past its CAP.TO), judged with
    /// its health logs after the cycle.
    late: Vec<Vec<HealthAnomaly>>,
}

impl PortSet {
    /// The ports of `plan`'s port table, one `Dut` each, in its order.
    pub fn new(plan: &RunPlan, duts: Vec<Box<dyn Dut>>) -> PortSet {
        debug_assert_eq!(plan.ports.len(), duts.len());
        let names = plan.ports.iter().map(|p| (p.id, p.name.clone())).collect();
        let host_cut = plan.faults.all().any(crate::scenario::FaultPlan::is_host_cut);
        PortSet { health: duts.iter().map(|_| None).collect(), late: duts.iter().map(|_| Vec::new()).collect(), duts, names, host_cut }
    }

    pub fn len(&self) -> usize {
        self.duts.len()
    }

    /// How a line about port `i` begins: nothing when the device has one port.
    pub fn prefix(&self, i: usize) -> String {
        match (self.duts.len(), self.names.get(i)) {
            (2.., Some((_, name))) => format!("port {name}: "),
            _ => String::new(),
        }
    }

    /// Port `i`'s id in the run's port table.
    pub fn id(&self, i: usize) -> PortId {
        self.names.get(i).map_or(PortId(i as u8), |(id, _)| *id)
    }

    /// Reads every port's health logs before cycle 1 (or again when a run is resumed), to
    /// compare the first cycle's with.
    pub fn read_health(&mut self, em: &mut Emitter<'_>) {
        for i in 0..self.duts.len() {
            self.health[i] = match self.duts[i].health() {
                Some(Ok(logs)) => Some(logs),
                Some(Err(why)) => {
                    em.error(None, format!("{}SMART/health log: {why}", self.prefix(i)));
                    None
                }
                None => None,
            };
        }
    }

    /// Reads every port's health logs after the cycle and compares each with its last
    /// reading; emits a `health` event per port that has them; returns the anomalies.
    /// `faulted` is false for a cycle the harness died in, where nobody knows whether the
    /// fault happened.
    pub fn health_after(&mut self, plan: &RunPlan, cycle: u32, faulted: bool, em: &mut Emitter<'_>) -> usize {
        let mut n = 0;
        for i in 0..self.duts.len() {
            let Some(before) = self.health[i].take() else { continue };
            let after = match self.duts[i].health() {
                Some(Ok(a)) => a,
                Some(Err(why)) => {
                    em.error(Some(cycle), format!("{}SMART/health log: {why}", self.prefix(i)));
                    self.health[i] = Some(before);
                    continue;
                }
                None => continue,
            };
            let mut anomalies = judged_health(plan, cycle, &before, &after, faulted);
            anomalies.extend(std::mem::take(&mut self.late[i]));
            anomalies.retain(|a| !plan.scenario.health.off.contains(&HealthCheck::of(a)));
            n += anomalies.len();
            let prefix = self.prefix(i);
            let t_ns = em.now();
            let kind = EventKind::Health {
                smart: SmartFigures::from(&after.smart),
                anomalies: anomalies
                    .iter()
                    .map(|a| {
                        let mut note = HealthNote::from(a);
                        note.detail = format!("{prefix}{}", note.detail);
                        note
                    })
                    .collect(),
                pcie: after.pcie.clone(),
            };
            em.emit(Event::in_cycle(t_ns, cycle, kind).on_port(self.id(i)));
            self.health[i] = Some(after);
        }
        n
    }

    /// Port `i` answered again after the fault (a `ready` event), or did not (a
    /// `dead_device` finding, and the cycle's end says so). `Err` when the port's identity
    /// matches more than one device: which one the run is about is unknown, so nothing the
    /// harness reads of it can be judged.
    pub fn ready(
        &mut self,
        i: usize,
        cycle: u32,
        r: Result<Readiness, DutError>,
        em: &mut Emitter<'_>,
        end: &mut CycleEnd,
        findings: &mut Vec<Finding>,
    ) -> Result<(), DutError> {
        match r {
            Ok(r) => {
                // Within the controller's CAP.TO, where its last health reading knows it.
                let pcie = self.health[i].as_ref().and_then(|h| h.pcie.as_ref());
                self.late[i].extend(pcie.and_then(|p| crate::pcie::judge_ready(p, r.first_read)));
                let t_ns = em.now();
                let (enumerate_us, first_read_us) = (r.enumerate.map(micros), Some(micros(r.first_read)));
                em.emit(Event::in_cycle(t_ns, cycle, EventKind::Ready { enumerate_us, first_read_us }).on_port(self.id(i)));
            }
            // A host whose power the fault cut, not back: the drive must let it boot and load
            // it (the dual-port test plan's "after the boot, the drive loads normally").
            Err(why @ DutError::HostGone { .. }) if self.host_cut => {
                findings.push(Finding {
                    class: FindingClass::DeadHost,
                    offset: 0,
                    length: 0,
                    expected: Shown::Prior {},
                    found: Shown::Prior {},
                    cycle,
                    detail: format!("{}{why}", self.prefix(i)),
                });
                end.dead_host = true;
            }
            // Which device, or whether the drive answers at all, is unknown; a host lost
            // without a fault of its own is the lab's, not the drive's: not a finding.
            Err(e @ (DutError::Ambiguous(_) | DutError::HostGone { .. })) => return Err(e),
            Err(why) => {
                findings.push(Finding::dead_device(cycle, &format!("{}{why}", self.prefix(i))));
                end.dead_device = true;
            }
        }
        Ok(())
    }

    /// Waits for the ports in `which` to answer a read of `at`, one after the other, each
    /// within `timeout` ([`PortSet::ready`] for each); `Err` names the port found ambiguous.
    #[expect(clippy::too_many_arguments, reason = "a cycle's record, lent to the wait")]
    pub fn wait_for(
        &mut self,
        which: &[usize],
        at: u64,
        timeout: Duration,
        cycle: u32,
        em: &mut Emitter<'_>,
        end: &mut CycleEnd,
        findings: &mut Vec<Finding>,
    ) -> Result<(), (usize, DutError)> {
        for &i in which {
            let r = self.duts[i].wait_ready(at, timeout);
            self.ready(i, cycle, r, em, end, findings).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// Lets go of the ports in `which` before their power (or link) returns.
    pub fn release(&mut self, which: &[usize]) {
        for &i in which {
            self.duts[i].release();
        }
    }

    /// Lets go of every port before the power returns.
    pub fn release_all(&mut self) {
        let all: Vec<usize> = (0..self.duts.len()).collect();
        self.release(&all);
    }

    /// `stop.on_dead_device = "continue"`: cut power once more and wait once more for every
    /// port; `Some(why)` ends the run.
    pub fn power_cycle_dead_device(
        &mut self,
        cutter: &mut Cutter,
        plan: &RunPlan,
        em: &mut Emitter<'_>,
        cycle: u32,
        at: u64,
    ) -> Option<String> {
        self.release_all();
        let hold = plan.off_time(cycle);
        if let Err(e) = cutter.cut(hold).and_then(|()| cutter.restore(hold)).map(|_| ()) {
            em.error(Some(cycle), format!("power cycle of a dead device: {e}"));
            return Some(format!("cycle {cycle}: the device did not come back and could not be power-cycled"));
        }
        for i in 0..self.duts.len() {
            if let Err(why) = self.duts[i].wait_ready(at, plan.readiness_timeout) {
                let prefix = self.prefix(i);
                return Some(format!("cycle {cycle}: {prefix}the device did not come back after a second power cycle: {why}"));
            }
        }
        None
    }

    /// Whether any port answers a read of `at` now: a cut is confirmed by every port going
    /// quiet.
    pub fn any_answers(&mut self, at: u64) -> bool {
        self.duts.iter_mut().any(|d| d.answers(at))
    }

    /// How much the ports' files in the run directory may still grow.
    pub fn growth_bytes(&self) -> u64 {
        self.duts.iter().map(|d| d.growth_bytes()).sum()
    }

    /// The simulated drive's ground truth (one port answers for the drive).
    pub fn ground_truth(&self) -> Option<GroundTruth> {
        self.duts.iter().find_map(|d| d.ground_truth())
    }

    /// What the ports noted since the last call, each line naming its port on a device with
    /// several.
    pub fn notes(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for i in 0..self.duts.len() {
            let prefix = self.prefix(i);
            out.extend(self.duts[i].notes().into_iter().map(|n| format!("{prefix}{n}")));
        }
        out
    }
}

impl PortSet {
    /// The audit lines of every port's agent since the last call.
    pub fn take_audit(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for i in 0..self.duts.len() {
            let prefix = self.prefix(i);
            out.extend(self.duts[i].take_audit().into_iter().map(|n| format!("{prefix}{n}")));
        }
        out
    }
}

/// Records what the controller exchanged since the last call, if anything.
pub(crate) fn controller_log(cutter: &mut Cutter, em: &mut Emitter<'_>, cycle: Option<u32>) {
    let lines = cutter.take_log();
    if !lines.is_empty() {
        let t_ns = em.now();
        em.emit(Event::new(t_ns, EventKind::ControllerLog { lines }).with_cycle(cycle));
    }
}

/// The health anomalies from `before` to `after` a cycle's fault, as the plan's fault and
/// health checks judge them. `faulted` is false for a cycle the harness died in, where nobody
/// knows whether the fault happened.
fn judged_health(plan: &RunPlan, cycle: u32, before: &HealthLogs, after: &HealthLogs, faulted: bool) -> Vec<HealthAnomaly> {
    let how = plan.fault(cycle).shutdown().filter(|_| faulted);
    let policy = HealthPolicy { allow_clean_bump: false, report_error_log_growth: true };
    let mut anomalies = judge(&before.smart, &after.smart, how.unwrap_or(Shutdown::Dirty), policy);
    if how.is_none() {
        // A link reset, or an unknown fault: no unsafe shutdown is expected either way.
        anomalies.retain(|a| !matches!(a, HealthAnomaly::UnsafeShutdownsAfterDirtyCut { .. }));
    }
    if let (Some(b), Some(a), Some(how)) = (&before.ocp, &after.ocp, how) {
        anomalies.extend(judge_ocp(b, a, how));
    }
    // Every power cut, a clean shutdown's too, is a power cycle the drive's own log records.
    if let (Some(b), Some(a), Some(how)) = (&before.pel, &after.pel, how) {
        let cuts = match how {
            Shutdown::Repeated(n) => n,
            Shutdown::Dirty | Shutdown::Clean => 1,
        };
        anomalies.extend(crate::pel::judge_pel(b, a, cuts));
    }
    // After every fault, a power cut's or a link fault's: the link as it was, no AER error.
    if let (Some(b), Some(a), true) = (&before.pcie, &after.pcie, faulted) {
        anomalies.extend(crate::pcie::judge_link(b, a));
    }
    // The checks the scenario switched off (named once, in the run's notes).
    anomalies.retain(|a| !plan.scenario.health.off.contains(&HealthCheck::of(a)));
    anomalies
}
