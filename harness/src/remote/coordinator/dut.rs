//! A port on another host as the device under test ([`RemoteDut`]): every call is an
//! operation of the agent protocol (docs/PROTOCOL.md) on a session with `faultline agent
//! --stdio` there, dialled through the transport (ssh by default). The writer runs on the
//! agent; its ledger is the caller's, streamed ([`super::cycle`]). A host that dies
//! mid-cycle leaves the cycle closed from what the coordinator held, and the session is
//! dropped: the next `wait_ready` dials again (the host has booted) and opens the target
//! held to the run's identity. Only the runner's opener names this type: the cycle and the
//! loop see a `Dut`, the cutter a [`HostReset`](crate::runner::fault::HostReset).

use super::cycle::{CycleError, Held, StreamPolicy};
use super::reset::AgentReset;
use super::session::{self, Session, Transport};
use crate::format::Format;
use crate::health::{HealthLogs, HealthReadError};
use crate::ledger::Ledger;
use crate::port::PortId;
use crate::remote::proto::{CycleRequest, LinkReset, Nonce};
use crate::run::DeviceFacts;
use crate::runner::dut::*;
use crate::runner::fault::HostReset;
use crate::workload::Layout;
use crate::writer::{CycleOutcome, PortSamples};
use faultline_drivers::blockdev::Expectation;
use faultline_drivers::{PowerCaps, PowerError, PowerState, PowerSwitch};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a verify waits for the ledger file to hold every record of the run's history.
const LEDGER_LAG: Duration = Duration::from_secs(5);

/// How to reach a port on another host.
#[derive(Clone, Debug)]
pub struct RemotePort {
    pub host: String,
    pub transport: Transport,
    /// The run's nonce, and who the coordinator is (host:pid), for the agent's log.
    pub run: Nonce,
    pub coordinator: String,
    /// The target as the agent's command line lists it (a path or an NBD URI on that host).
    pub target: String,
    /// What the scenario pins the device to (serial, WWID, model, size).
    pub expect: Expectation,
    pub queue_depth: u32,
    /// The handshake's and each answer's bound.
    pub timeout: Duration,
    /// How often the agent streams what is durable.
    pub stream_every: Duration,
    pub policy: StreamPolicy,
    /// The link resets the run will ask of this host (its agent checks, when it opens the
    /// target, that it can run each there).
    pub resets: Vec<LinkReset>,
}

/// A port on another host, through its agent.
pub struct RemoteDut {
    port: RemotePort,
    /// Every frame sent to the agent, kept for the run's audit log (`take_audit`).
    audit: std::sync::Arc<std::sync::Mutex<Vec<session::Sent>>>,
    session: Option<Session>,
    facts: Option<DeviceFacts>,
    /// The run's target identity (the ledger header's): anything else is refused.
    identity: Option<String>,
    notes: Vec<String>,
    /// The agent's clock minus this host's, as measured when the session was dialled.
    offset_ns: i64,
    /// The transport's process (its group's leader) while a session is up, else 0: what a
    /// `kill` host power switch ([`HostKill`]) cuts.
    pid: Arc<AtomicU32>,
    /// The reset the cutter aims at this host's next cut, and what the agent reported of it.
    reset: AgentReset,
    /// The simulated drive this process serves to the agent, when this port answers for it
    /// (port A of a run across hosts on the simulated drive): its ground truth, its growth,
    /// its save.
    served: Option<faultline_fixtures::DualSim>,
}

impl RemoteDut {
    /// Dials the agent and opens its target.
    pub fn open(port: RemotePort) -> Result<RemoteDut, DutError> {
        let mut d = RemoteDut {
            reset: AgentReset::for_host(&port.host),
            port,
            audit: Default::default(),
            session: None,
            facts: None,
            identity: None,
            notes: Vec::new(),
            offset_ns: 0,
            pid: Default::default(),
            served: None,
        };
        d.session()?;
        Ok(d)
    }

    /// The session, dialled and with the target open if it was not.
    fn session(&mut self) -> Result<&mut Session, DutError> {
        if self.session.is_none() {
            let p = &self.port;
            let mut s =
                session::dial(&p.transport, &p.host, &p.run, &p.coordinator, p.timeout).map_err(|e| DutError::Dial(Shared::new(e)))?;
            let kept = std::sync::Arc::clone(&self.audit);
            s.set_audit(Box::new(move |e| {
                // Bounded: a run drains it at every cycle's steps.
                let mut v = kept.lock().unwrap_or_else(|p| p.into_inner());
                if v.len() < AUDIT_KEPT {
                    v.push(e.clone());
                }
            }));
            let t = s
                .open_expecting(&p.target, self.identity.as_deref(), &(&p.expect).into(), p.queue_depth, &p.resets, p.timeout)
                .map_err(|e| DutError::Dial(Shared::new(e)))?;
            match s.clock(8, p.timeout) {
                Ok(c) => {
                    self.offset_ns = c.offset_ns;
                    self.notes.push(format!(
                        "{}: agent {} (pid {}), clock offset {:+.1} us within {:.1} us",
                        p.host,
                        s.agent.software,
                        s.agent.pid,
                        c.offset_ns as f64 / 1e3,
                        c.uncertainty_ns as f64 / 1e3
                    ));
                }
                Err(e) => return Err(DutError::Dial(Shared::new(e))),
            }
            self.facts = Some(t.facts());
            self.pid.store(s.pid(), Ordering::Release);
            self.session = Some(s);
        }
        Ok(self.session.as_mut().expect("dialled above"))
    }

    /// The transport's process while a session is up (the agent itself with a local
    /// transport): what a test kills to take the host down.
    pub fn transport_pid(&self) -> Option<u32> {
        self.session.as_ref().map(Session::pid)
    }

    /// The host's power as a switch that kills the transport's process group: the whole host
    /// when the agent runs on this machine (the demo, tests), as `host_power = "kill"` says.
    pub fn host_kill(&self) -> HostKill {
        HostKill { host: self.port.host.clone(), pid: Arc::clone(&self.pid), log: Vec::new() }
    }

    /// This port answers for `drive`, which this process serves to the agent: the run's
    /// ground truth, growth and save are the drive's.
    pub fn answering_for(mut self, drive: faultline_fixtures::DualSim) -> RemoteDut {
        self.served = Some(drive);
        self
    }

    /// The link reset its agent runs on this host, for the run's cutter to aim.
    pub fn agent_reset(&self) -> Box<dyn HostReset> {
        Box::new(self.reset.clone())
    }

    fn lost(&mut self, why: impl Into<Cause>) -> DutError {
        self.session = None;
        self.pid.store(0, Ordering::Release);
        DutError::Lost { target: self.port.target.clone(), host: self.port.host.clone(), source: why.into() }
    }
}

/// An agent's answer that breaks the protocol, after the host was lost before.
#[derive(Debug, thiserror::Error)]
#[error("{error} (before: {before})")]
struct After {
    #[source]
    error: session::DialError,
    before: DutError,
}

impl Dut for RemoteDut {
    /// The facts found when the target was first opened (they do not change; a target found
    /// again is held to the run's identity): no dialling once they are known.
    fn facts(&mut self) -> Result<DeviceFacts, DutError> {
        if self.facts.is_none() {
            self.session()?;
        }
        Ok(self.facts.clone().expect("set when the session was dialled"))
    }

    fn run_cycle(&mut self, w: &Workload<'_>, ledger: &mut dyn Ledger, fault: &mut FaultHook<'_>) -> Result<CycleOutcome, DutCycleError> {
        let o = w.opts;
        let ms = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
        let req = CycleRequest {
            header: ledger.history().header.clone(),
            cycle: o.cycle,
            first_id: o.first_id,
            started_at: o.started_at.clone(),
            port: o.port,
            max_writes: o.max_writes,
            duration_ms: o.duration.map(ms),
            cut: o.cut,
            stream_every_ms: ms(self.port.stream_every).max(1),
            drain_timeout_ms: ms(o.drain_timeout),
            samples: false,
            // Only the cycle that cuts runs the host's reset (the hit port's).
            reset: o.cut.and(self.reset.want()),
        };
        let policy = self.port.policy;
        self.session()?;
        // The agent's completions join this port's slot of the windows, each at its instant
        // on this host's clock (the offset measured when the session was dialled).
        let offset = self.offset_ns;
        let anchor = crate::writer::windows::clock_anchor();
        let slot = match &o.samples {
            Some(PortSamples::Windows { windows, slot }) => Some((Arc::clone(windows), *slot)),
            // A coordinator's writer never streams its own completions.
            Some(PortSamples::Wire(_)) | None => None,
        };
        let mut req = req;
        req.samples = slot.is_some();
        let mut into_windows = |batch: &[crate::writer::WireSample]| {
            if let Some((w, slot)) = &slot {
                crate::writer::record_remote(w, *slot, batch, offset, anchor);
            }
        };
        let samples = req.samples.then_some(&mut into_windows as &mut dyn FnMut(&[crate::writer::WireSample]));
        let s = self.session.as_mut().expect("dialled above");
        // When the cut ran, on this host's clock: a host lost after it was lost to it.
        let t0 = Instant::now();
        let mut cut_at = None;
        let mut cut = || {
            let at = t0.elapsed();
            let r = fault();
            cut_at = Some(at);
            r
        };
        let first_id = o.first_id;
        match s.run_cycle(req, ledger, &mut cut, o.stop.as_ref(), &policy, samples) {
            Ok(mut sum) => {
                if let Some(r) = sum.reset.take() {
                    self.reset.reported(r);
                }
                // How late the agent's host let it run: not the drive's.
                if let Some((w, slot)) = &slot {
                    crate::writer::windows::record_remote_lateness(w, *slot, &std::mem::take(&mut sum.late), offset, anchor);
                }
                Ok(sum.into())
            }
            // The host went down (its power cut, or lost): the coordinator closed the cycle from
            // what it held, with the writes never heard complete "may". The counts are what the
            // coordinator heard durable (the newest checkpoint's prefix and extras; the bytes,
            // the prefix's): at least what the host wrote. Whether that was the run's fault is
            // the runner's to say (it knows whether the fault fired).
            Err(CycleError::Lost { source, held }) => {
                let why = format!(
                    "{} lost {} the cut ({source}); {held}",
                    self.port.host,
                    if cut_at.is_some() { "at" } else { "before its writer reached" }
                );
                self.lost(Cause::text(why.clone()));
                let outcome = held_outcome(&held, first_id, w.layout, (t0.elapsed(), cut_at), &why);
                Err(DutCycleError::HostLost { outcome: Box::new(outcome), why })
            }
            Err(e @ CycleError::Unrecorded { .. }) => Err(self.lost(e).into()),
            Err(e) => Err(DutError::Cycle(Shared::new(e)).into()),
        }
    }

    /// The agent writes the share's prefill pattern and flushes; once it says so, the prefill
    /// is recorded here (a host lost before that leaves it unrecorded: not done).
    fn prefill(&mut self, layout: &Layout, _: &Format, port: PortId, ledger: &mut dyn Ledger) -> Result<u64, DutCycleError> {
        let header = ledger.history().header.clone();
        let spec = layout.spec();
        if (header.workload.span_start, header.workload.span_end) != (spec.span_start, spec.span_end) {
            return Err(DutError::PrefillSpan {
                start: spec.span_start,
                end: spec.span_end,
                header_start: header.workload.span_start,
                header_end: header.workload.span_end,
            }
            .into());
        }
        // The agent is silent while it writes: at least 20 MB/s, and a minute more.
        let timeout = self.port.timeout + Duration::from_secs(60 + (spec.span_end - spec.span_start) / 20_000_000);
        let r = self.session()?.prefill(&header, port, timeout);
        match r {
            Ok(Ok(())) => {
                let done = crate::ledger::Record::PrefillDone { span_start: spec.span_start, span_end: spec.span_end };
                ledger.append(&done).and_then(|_| ledger.sync()).map_err(crate::writer::WriteError::from)?;
                Ok(spec.span_end - spec.span_start)
            }
            Ok(Err(source)) => Err(DutError::Prefill { target: self.port.target.clone(), host: self.port.host.clone(), source }.into()),
            Err(e) => Err(self.lost(e).into()),
        }
    }

    /// Brings the agent's copy of the history up to the run's (the ledger file, which its
    /// writer thread may still be writing: waited for, at most [`LEDGER_LAG`]), then verifies.
    fn verify(&mut self, req: &VerifyRequest<'_>) -> Result<VerifyReply, DutVerifyError> {
        let (share, file, timeout) = (req.share.0, req.share.1.to_path_buf(), self.port.timeout);
        let want = req.verifier.history().records;
        let until = Instant::now() + LEDGER_LAG;
        let s = self.session()?;
        loop {
            let held = match s.sync_history((share, &file), timeout) {
                Ok(n) => n,
                Err(e) => return Err(self.lost(e).into()),
            };
            if held == want {
                break;
            }
            if held > want || Instant::now() >= until {
                return Err(DutError::History { file, held, want }.into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match s.verify((share, req.regions), req.digest, timeout) {
            Ok((report, digests)) => Ok(VerifyReply { report, digests }),
            Err(e) => Err(self.lost(e).into()),
        }
    }

    fn sector_hashes(&mut self, ranges: &[(u64, u64)], sector: u64) -> Result<Vec<SectorHash>, DutError> {
        let timeout = self.port.timeout;
        let r = self.session()?.sector_hashes(ranges, sector, timeout);
        r.map_err(|e| self.lost(e))
    }

    /// The agent runs the load and sends its completions when it ends; they join this port's
    /// slot of the windows at their instants on this host's clock.
    fn read_load(&mut self, span: (u64, u64), run_for: Duration, samples: &PortSamples) -> Result<(), DutError> {
        let (offset, anchor, timeout) = (self.offset_ns, crate::writer::windows::clock_anchor(), self.port.timeout);
        let got = self.session()?.read_load(span, run_for, timeout);
        let batch = got.map_err(|e| self.lost(e))?;
        match samples {
            PortSamples::Windows { windows, slot } => crate::writer::record_remote(windows, *slot, &batch, offset, anchor),
            // Only an agent's writer streams its completions; a coordinator's never does.
            PortSamples::Wire(_) => {}
        }
        Ok(())
    }

    fn answers(&mut self, at: u64) -> bool {
        let timeout = self.port.timeout;
        match self.session.as_mut().map(|s| s.probe(at, timeout)) {
            Some(Ok(r)) => r.is_ok(),
            Some(Err(e)) => {
                self.lost(e);
                false
            }
            None => false,
        }
    }

    /// Dials again until the host answers (it has booted), then waits for its target.
    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        let t0 = Instant::now();
        let until = t0 + timeout;
        let mut redialled = false;
        let mut last = None;
        loop {
            if self.session.is_none() {
                redialled = true;
                if let Err(e) = self.session() {
                    if Instant::now() >= until {
                        return Err(DutError::HostGone {
                            host: self.port.host.clone(),
                            timeout_s: timeout.as_secs(),
                            source: Shared::new(e),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            let t = self.port.timeout;
            let s = self.session.as_mut().expect("dialled above");
            match s.wait_ready(at, left, t) {
                Ok((enumerate, first_read)) => {
                    let enumerate = if redialled { Some(t0.elapsed().saturating_sub(first_read)) } else { enumerate };
                    return Ok(Readiness { enumerate, first_read });
                }
                Err(e @ session::DialError::Protocol { .. }) => {
                    let last = match last.take() {
                        None => Cause::of(e),
                        Some(before) => Cause::of(After { error: e, before }),
                    };
                    return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last });
                }
                Err(e) => {
                    let lost = self.lost(e);
                    if Instant::now() >= until {
                        return Err(DutError::NotReady { timeout_s: timeout.as_secs(), last: Cause::of(lost) });
                    }
                    last = Some(lost);
                }
            }
        }
    }

    fn release(&mut self) {
        let timeout = self.port.timeout;
        if let Some(Err(e)) = self.session.as_mut().map(|s| s.release(timeout)) {
            self.lost(e);
        }
    }

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        let timeout = self.port.timeout;
        let s = match self.session() {
            Ok(s) => s,
            Err(e) => return Some(Err(HealthReadError::Remote(e.to_string()))),
        };
        match s.health(timeout) {
            Ok(None) => None,
            Ok(Some(r)) => Some(r),
            Err(e) => Some(Err(HealthReadError::Remote(self.lost(e).to_string()))),
        }
    }

    fn checkpoint_every(&self) -> Duration {
        self.port.stream_every
    }

    fn ground_truth(&self) -> Option<GroundTruth> {
        let d = self.served.as_ref()?;
        Some(GroundTruth { extents: d.truth(), dead: false, disturbed: d.disturbances().iter().map(|x| (x.port, x.cut)).collect() })
    }

    fn growth_bytes(&self) -> u64 {
        self.served.as_ref().map_or(0, faultline_fixtures::DualSim::media_growth_bytes)
    }

    fn save(&mut self) -> Result<(), DutError> {
        match &self.served {
            Some(d) => d.persist().map_err(|e| DutError::Persist(Shared::new(e))),
            None => Ok(()),
        }
    }

    fn notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn bind(&mut self, identity: String) {
        self.identity = Some(identity);
    }

    fn take_audit(&mut self) -> Vec<String> {
        let now = faultline_drivers::monotonic_ns();
        let sent = std::mem::take(&mut *self.audit.lock().unwrap_or_else(|p| p.into_inner()));
        sent.iter()
            .map(|e| format!("{} request {}: {} ({:.1} ms before)", e.host, e.seq, e.what, now.saturating_sub(e.t_ns) as f64 / 1e6))
            .collect()
    }
}

/// The most audit lines kept between two drains (a cycle sends a few dozen frames).
const AUDIT_KEPT: usize = 100_000;

/// `host_power = "kill"`: a host whose agent runs on this machine, its power cut by SIGKILL of
/// the transport's process group (the agent dies with everything it held, as a host does),
/// and "restored" by nothing: the host is back when the coordinator dials its agent again.
/// Reads its state back: off once the process is gone (or a zombie).
pub struct HostKill {
    host: String,
    pid: Arc<AtomicU32>,
    log: Vec<String>,
}

impl HostKill {
    fn alive(pid: u32) -> bool {
        // The state field follows the command's closing parenthesis.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next()))
            .is_some_and(|state| state.is_some_and(|c| c != 'Z' && c != 'X'))
    }
}

impl PowerSwitch for HostKill {
    fn name(&self) -> String {
        format!("kill (the agent of {} on this machine)", self.host)
    }

    fn capabilities(&self) -> PowerCaps {
        PowerCaps { state_readback: true, voltage_readback: false, acknowledges: true, ..PowerCaps::default() }
    }

    fn power_off(&mut self) -> Result<(), PowerError> {
        let name = self.name();
        let fail = |reason: String| PowerError::Failed { switch: name.clone(), command: "off".into(), reason };
        let pid = self.pid.load(Ordering::Acquire);
        if pid == 0 {
            // No session is up (a host that did not come back): nothing of it runs here, so
            // it is off already; a power cycle of a dead host goes on to dial it again.
            self.log.push(format!("{}: off already (no agent of it was running)", self.host));
            return Ok(());
        }
        faultline_drivers::kill_process_group(pid).map_err(|e| fail(format!("kill -KILL -{pid}: {e}")))?;
        self.log.push(format!("{}: SIGKILL to process group {pid}", self.host));
        let until = Instant::now() + Duration::from_secs(5);
        while HostKill::alive(pid) {
            if Instant::now() >= until {
                return Err(fail(format!("process {pid} still runs 5 s after SIGKILL")));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    fn power_on(&mut self) -> Result<(), PowerError> {
        self.log.push(format!("{}: on (its agent starts when the coordinator dials it again)", self.host));
        Ok(())
    }

    fn state(&mut self) -> Result<PowerState, PowerError> {
        let pid = self.pid.load(Ordering::Acquire);
        Ok(if pid != 0 && HostKill::alive(pid) { PowerState::On } else { PowerState::Off })
    }

    fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }
}

/// The cycle of a host lost mid-cycle, closed from what the coordinator held: the writes never
/// heard complete "may", the counts are what it heard durable (the newest checkpoint's prefix
/// and extras; the bytes, the prefix's), and the host was gone from when it was last heard.
/// `at`: how long the cycle ran here, and when its cut ran, if it did.
fn held_outcome(held: &Held, first_id: u64, layout: &Layout, (elapsed, cut_at): (Duration, Option<Duration>), why: &str) -> CycleOutcome {
    let durable = held.durable_prefix.saturating_sub(first_id) + held.durable_extras;
    let bytes: u64 = (first_id.max(1)..held.durable_prefix).map(|id| layout.plan(id).len).sum();
    CycleOutcome {
        end: Some(crate::ledger::EndKind::Interrupted),
        submitted: durable,
        completed: durable,
        completed_at_cut: durable,
        bytes_written: bytes,
        submitted_end: held.reserved_upto,
        elapsed,
        cut_at: cut_at.or(Some(elapsed.saturating_sub(held.last_heard))),
        device_lost: Some(why.to_string()),
        device_gone_at: Some(elapsed.saturating_sub(held.last_heard)),
        ..CycleOutcome::default()
    }
}
