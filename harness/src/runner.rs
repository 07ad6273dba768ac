//! The scenario-driven cycle runner behind `faultline run SCENARIO.toml`.
//!
//! One cycle: write with the queue full, fault at the scenario's placement (power cut through
//! the power switch, link reset through the link controller, or a clean shutdown: the writer
//! drains, then power is cut), confirm that the fault happened, hold power off for
//! `cycles.off_time_ms`, restore it, wait for the device to answer a read, verify, emit the
//! events, and let the stop policy decide whether the run goes on.
//!
//! Targets: the simulated drive, its power switched in-process (`direct`) or through a
//! protocol emulator started here and driven by the real controller driver (so the whole path
//! from controller spec to verification runs without hardware); or a real device at
//! `target.path`, opened with the scenario's identity expectation and re-opened by it after
//! every fault, with the controllers the scenario names.
//!
//! Verification after every fault covers every byte written or in flight since the previous
//! check (computed from the write ids, coalesced), plus `verify.sample_bytes` of seeded random
//! chunks of the span; the whole span every `verify.full_every_cycles` and at the end.
//!
//! A fault that cannot be confirmed is never a clean pass: a switch with state readback must
//! read back `off` after the cut; otherwise the device must have stopped answering.

use crate::events::{class_counts, Event, Sinks, Verdict};
use crate::events::{HealthNote, SmartFigures};
use crate::health::{judge, judge_ocp, parse_ocp_smart, parse_smart, HealthAnomaly, HealthPolicy, OcpSmartLog, Shutdown, SmartLog};
use crate::ledger::{Contract, RunHeader, LEDGER_FORMAT};
use crate::report::{Recorder, RunModel};
use crate::rng::WyRand;
use crate::run::{exists, open_run, OpenRun};
use crate::scenario::{self, Fault, OnEvent, Scenario, SimSwitch};
use crate::soak::dead_device;
use crate::verify::{Finding, FindingClass, Shown, Verifier, VerifyError, VerifyReport};
use crate::workload::Layout;
use crate::writer::{run_cycle, CutPlacement, CycleOptions, CycleOutcome, WriteError};
use faultline_drivers::blockdev::{find_by_identity, identify, Expectation, SysRoots};
use faultline_drivers::control::{self, parse_spec, ControlEnv};
use faultline_drivers::nvme::NvmeAdmin;
use faultline_drivers::{open_target, AlignedBuf, BlockTarget, LinkController, OpenSpec, PowerState, PowerSwitch, ResetKind};
use faultline_fixtures::emu::{LcusEmu, NumatoEmu, QuarchEmu, QuarchKind, QuarchModule};
use faultline_fixtures::{SimConfig, SimDrive, SimPower, TruthContract};
use std::any::Any;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Size of one random verification chunk.
const SAMPLE_CHUNK_BYTES: u64 = 1 << 20;
/// Written regions collected before they are coalesced in place (bounds memory on long cycles).
const COALESCE_EVERY: usize = 1 << 16;
/// How long a read may wait when probing whether a device still answers after a cut.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the binary supplies: the run id, the seed and the wall clock (the harness has none).
pub struct RunnerOptions {
    pub run_id: u64,
    /// The run's seed: the scenario's own, or one the binary drew.
    pub seed: u64,
    /// Wall-clock start of the run, RFC 3339.
    pub started_at: String,
    /// Wall-clock timestamps for the ledger's cycle records.
    pub clock: fn() -> String,
    /// Where controllers find the machine, and their timeouts.
    pub control_env: ControlEnv,
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub verdict: Verdict,
    pub cycles_run: u32,
    /// Why the run ended before `cycles.count`, if it did.
    pub stopped: Option<String>,
    /// Every harness error, as the events carry them.
    pub errors: Vec<String>,
    /// Lines the opener of a real target asks to show (fallback engine, buffered I/O).
    pub notes: Vec<String>,
    /// The run stopped without ending (the run directory ran short of space): `stopped` says
    /// why, and `faultline resume` takes it up again.
    pub suspended: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// A consumer of the event stream failed: the run's outputs are incomplete.
    #[error("the run's reports are incomplete: {0}")]
    Reports(crate::events::SinkError),
    /// A run could not be taken up again; nothing was recorded.
    #[error("cannot resume the run: {0}")]
    Resume(String),
}

impl From<crate::events::SinkError> for RunnerError {
    fn from(e: crate::events::SinkError) -> Self {
        RunnerError::Reports(e)
    }
}

/// Free space the run directory's filesystem must keep before a cycle starts (besides what a
/// simulated drive's media image may still grow by): the ledger, the event log and the
/// reports of thousands of cycles fit in far less.
pub const MIN_FREE_BYTES: u64 = 64 << 20;

/// Why the run directory cannot take another cycle: too little free space (`None`: enough).
fn short_of_space(run_dir: &Path, device: &Device) -> Option<String> {
    let free = faultline_drivers::available_bytes(run_dir).ok()?;
    let growth = match device {
        Device::Sim(d) => d.media_growth_bytes(),
        Device::Real(_) => 0,
    };
    let need = MIN_FREE_BYTES + growth;
    (free < need).then(|| {
        format!(
            "the run directory {} has {} MiB free, and a cycle needs {} MiB there (the ledger, event log and reports{}): \
             the run is suspended; free some space and `faultline resume {}` takes it up again",
            run_dir.display(),
            free >> 20,
            need.div_ceil(1 << 20),
            if growth > 0 { ", and what the simulated drive's media image may still grow by" } else { "" },
            run_dir.display()
        )
    })
}

/// The writer's placement for one cycle, and the `after_ms` drawn for `uniform_time`.
///
/// A clean shutdown cuts a drained drive: it takes the `Idle` placement after the scenario's
/// completion count (a time window has no completion count and is refused).
pub fn placement(cut: &scenario::CutPlacement, fault: &Fault, rng: &mut WyRand) -> Result<(CutPlacement, Option<u64>), String> {
    use scenario::CutPlacement as S;
    if matches!(fault, Fault::CleanShutdown) {
        let after = match *cut {
            S::WhileIdle { after_completions } | S::WhileFlushOutstanding { after_completions } => after_completions,
            S::AfterCompletions { completions } => completions,
            S::UniformTime { .. } => return Err(
                "a clean_shutdown fault cuts a drained drive: give cut.kind = \"while_idle\" (or \"after_completions\"), not a time window"
                    .into(),
            ),
        };
        return Ok((CutPlacement::Idle { after_completions: after.max(1) }, None));
    }
    Ok(match *cut {
        S::UniformTime { window_start_ms, window_end_ms } => {
            let ms = draw_after_ms(rng, window_start_ms, window_end_ms);
            (CutPlacement::AfterTime { after_ms: ms }, Some(ms))
        }
        S::AfterCompletions { completions } => (CutPlacement::AfterCompletions { completions }, None),
        S::WhileFlushOutstanding { after_completions } => (CutPlacement::WhileFlushOutstanding { after_completions }, None),
        S::WhileIdle { after_completions } => (CutPlacement::Idle { after_completions }, None),
    })
}

/// Uniform in `[start, end]` milliseconds (inclusive).
pub fn draw_after_ms(rng: &mut WyRand, start: u64, end: u64) -> u64 {
    let (lo, hi) = (start.min(end), start.max(end));
    lo + rng.below(hi - lo + 1)
}

/// Sorts byte ranges `[start, end)` and merges the ones that overlap or touch.
pub fn coalesce(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|&(s, e)| e > s);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The sorted, coalesced byte ranges of writes `[from, to)`: everything those writes may
/// have changed. Memory is bounded by the number of writes (less once they overlap).
pub fn written_regions(layout: &Layout, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut coalesced_len = 0;
    for id in from..to {
        let w = layout.plan(id);
        v.push((w.offset, w.end()));
        if v.len() >= coalesced_len + COALESCE_EVERY {
            v = coalesce(v);
            coalesced_len = v.len();
        }
    }
    coalesce(v)
}

/// About `bytes` of random chunks of `[span_start, span_end)`, sector-aligned, sorted and
/// coalesced; the whole span when `bytes` reaches its length. Chunks are `SAMPLE_CHUNK_BYTES`
/// (smaller for small samples) at chunk-aligned offsets from the span start.
pub fn sample_regions(rng: &mut WyRand, span_start: u64, span_end: u64, sector: u64, bytes: u64) -> Vec<(u64, u64)> {
    let len = span_end.saturating_sub(span_start);
    if bytes == 0 || len == 0 {
        return Vec::new();
    }
    if bytes >= len {
        return vec![(span_start, span_end)];
    }
    let sector = sector.max(1);
    let chunk = SAMPLE_CHUNK_BYTES.min(bytes.div_ceil(sector) * sector).max(sector);
    let slots = len.div_ceil(chunk);
    let count = bytes.div_ceil(chunk);
    let v = (0..count)
        .map(|_| {
            let s = span_start + rng.below(slots) * chunk;
            (s, (s + chunk).min(span_end))
        })
        .collect();
    coalesce(v)
}

/// Merges two sorted, coalesced region lists.
fn union(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    coalesce(a.iter().chain(b).copied().collect())
}

/// The device under test.
enum Device {
    Sim(SimDrive),
    Real(Box<RealDevice>),
}

/// A real device, and how to find it again after a fault.
struct RealDevice {
    /// Where it was last found.
    path: PathBuf,
    spec: OpenSpec,
    target: Option<Box<dyn BlockTarget>>,
    /// Its identity, to find it again by when it comes back under another name (`nvme0n1` as
    /// `nvme1n1`); `None` when sysfs names nothing stable (a regular file): found by path.
    find: Option<Expectation>,
    roots: SysRoots,
    /// The run's target identity (the ledger header's): anything else is refused.
    identity: String,
    /// Reads SMART/health through the NVMe admin passthrough (`None`: not an NVMe device).
    health: Option<SmartBaseline>,
}

/// The health logs as last read, to compare the next cycle's with.
struct SmartBaseline {
    smart: SmartLog,
    ocp: Option<OcpSmartLog>,
}

/// Reads the SMART/health log and, where the drive has it, the OCP extended log.
fn read_health(path: &Path, roots: &SysRoots) -> Result<SmartBaseline, String> {
    let admin = NvmeAdmin::open_for_block_device_in(path, roots).map_err(|e| e.to_string())?;
    let smart = parse_smart(&admin.smart_log().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let ocp = match admin.ocp_smart_log().map_err(|e| e.to_string())? {
        Some(b) => Some(parse_ocp_smart(&b).map_err(|e| e.to_string())?),
        None => None,
    };
    Ok(SmartBaseline { smart, ocp })
}

/// The identity sysfs gives the block device at `path`, as an expectation to find it again by;
/// `None` when it names nothing stable (a regular file, a device without serial or WWID).
fn derived_expectation(path: &Path, capacity: u64, lbs: u32) -> Option<Expectation> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok().filter(|m| m.file_type().is_block_device())?;
    let id = identify(meta.rdev(), capacity, lbs);
    let some = |v: &str| (!v.trim().is_empty()).then(|| v.to_string());
    let e = Expectation {
        serial: some(&id.serial),
        wwid: some(&id.wwid),
        model: some(&id.model),
        backing_file: some(&id.backing_file),
        size_bytes: Some(capacity),
    };
    (e.serial.is_some() || e.wwid.is_some() || e.backing_file.is_some()).then_some(e)
}

impl Device {
    fn target(&mut self) -> Result<&mut dyn BlockTarget, String> {
        match self {
            Device::Sim(d) => Ok(d),
            Device::Real(r) => match &mut r.target {
                Some(t) => Ok(t.as_mut()),
                None => Err(format!("{} is not open (it did not come back)", r.path.display())),
            },
        }
    }

    /// Lets go of a real device before its power returns (it comes back as a new device).
    fn release(&mut self) {
        if let Device::Real(r) = self {
            r.target = None;
        }
    }

    /// Whether the device still answers a read of `at` (an answer with a media error counts).
    fn answers(&mut self, at: u64, sector: usize) -> bool {
        let Ok(t) = self.target() else { return false };
        t.set_read_timeout(PROBE_TIMEOUT);
        let mut buf = AlignedBuf::zeroed(sector);
        t.read_at(at, &mut buf).is_ok()
    }

    /// Waits until the device answers a read of `at`: the simulated drive in place; a real
    /// device re-opened by its identity. Returns (time to open, time to the first answer).
    fn wait_ready(&mut self, at: u64, sector: usize, timeout: Duration) -> Result<(Option<Duration>, Duration), String> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut last = String::from("no attempt");
        let mut opened_at = None;
        loop {
            if let Device::Real(r) = self {
                if r.target.is_none() {
                    match r.reopen() {
                        Ok(()) => opened_at = Some(start.elapsed()),
                        Err(e) => last = e,
                    }
                }
            }
            if let Ok(t) = self.target() {
                t.set_read_timeout(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100)));
                let mut buf = AlignedBuf::zeroed(sector);
                match t.read_at(at, &mut buf) {
                    // A read that fails for one bad block still shows a device that answers;
                    // the verifier reports the block.
                    Ok(()) => return Ok((opened_at, start.elapsed())),
                    Err(e) if !e.device_gone() => return Ok((opened_at, start.elapsed())),
                    Err(e) => {
                        last = e.to_string();
                        self.release();
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("the device did not answer a read within {} s after the fault: {last}", timeout.as_secs()));
            }
            std::thread::sleep(Duration::from_millis(if matches!(self, Device::Sim(_)) { 10 } else { 100 }));
        }
    }
}

impl RealDevice {
    /// Finds the device again (by identity when it has one) and opens it, refusing anything
    /// that is not the run's target.
    fn reopen(&mut self) -> Result<(), String> {
        if let Some(e) = &self.find {
            self.path = find_by_identity(e, &self.roots).map_err(|e| e.to_string())?;
        }
        let o = open_target(&self.path, &self.spec).map_err(|e| e.to_string())?;
        let found = o.target.identity();
        if found != self.identity {
            return Err(format!("{} is now {found}, not the run's target {}", self.path.display(), self.identity));
        }
        self.target = Some(o.target);
        Ok(())
    }
}

/// What the fault is done with.
enum Cutter {
    Power(Box<dyn PowerSwitch + Send>),
    Link { ctl: Box<dyn LinkController + Send>, port: String, kind: ResetKind },
}

impl Cutter {
    fn cut(&mut self, hold: Duration) -> Result<(), String> {
        match self {
            Cutter::Power(p) => p.power_off().map_err(|e| e.to_string()),
            Cutter::Link { ctl, port, kind } => ctl.reset(port, *kind, hold).map_err(|e| e.to_string()),
        }
    }

    /// Power back on after the off time; a link reset has already come back up.
    fn restore(&mut self, off: Duration) -> Result<(), String> {
        match self {
            Cutter::Power(p) => {
                std::thread::sleep(off);
                p.power_on().map_err(|e| e.to_string())
            }
            Cutter::Link { .. } => Ok(()),
        }
    }

    /// Whether the switch itself confirms the cut: `None` when it cannot read its state back
    /// (the device disappearing must confirm it) or for a link reset (the controller confirms
    /// the reset it reports done).
    fn confirm(&mut self) -> Option<Result<(), String>> {
        match self {
            Cutter::Power(p) if p.capabilities().state_readback => Some(match p.state() {
                Ok(PowerState::Off) => Ok(()),
                Ok(PowerState::On) => {
                    Err(format!("power switch {} still reports power on after the cut: the cut did not happen", p.name()))
                }
                Err(e) => Err(format!("cannot read the switch state back after the cut: {e}")),
            }),
            _ => None,
        }
    }

    /// Sets the pin-mate step for the next cut and power-on (power switches only).
    fn set_mate_step(&mut self, step_ms: u32) -> Result<(), String> {
        match self {
            Cutter::Power(p) => p.set_mate_step(step_ms).map_err(|e| e.to_string()),
            Cutter::Link { ctl, .. } => Err(format!("{} is a link controller: no pin-mate sequencing", ctl.name())),
        }
    }

    fn is_link(&self) -> bool {
        matches!(self, Cutter::Link { .. })
    }
}

/// Everything a run holds open.
struct Setup {
    device: Device,
    cutter: Cutter,
    /// `None` only while the run is being reopened after a failed cycle.
    run: Option<OpenRun>,
    header: RunHeader,
    identity: String,
    sector: u64,
    notes: Vec<String>,
    /// The emulator serving the simulated drive's switch (kept alive for the run).
    _emulator: Option<Box<dyn Any>>,
}

fn sim_switch(switch: SimSwitch, power: SimPower, seed: u64, env: &ControlEnv) -> Result<(Cutter, Option<Box<dyn Any>>), String> {
    let started = |e: std::io::Error| format!("cannot start the {switch:?} emulator: {e}");
    let (spec, emu): (String, Box<dyn Any>) = match switch {
        SimSwitch::Direct => return Ok((Cutter::Power(Box::new(power)), None)),
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
    let parsed = parse_spec(&spec).map_err(|e| e.to_string())?;
    let c = control::open(&parsed, env).map_err(|e| e.to_string())?;
    let p = c.power.ok_or_else(|| format!("{spec} opened without a power switch"))?;
    Ok((Cutter::Power(p), Some(emu)))
}

fn real_cutter(s: &Scenario, env: &ControlEnv) -> Result<Cutter, String> {
    let open = |spec: Option<faultline_drivers::control::ControllerSpec>, field: &str| {
        let spec = spec.ok_or_else(|| format!("{field}: the fault needs a controller"))?;
        control::open(&spec, env).map_err(|e| e.to_string())
    };
    match &s.fault {
        Fault::PowerCut { .. } | Fault::CleanShutdown => {
            let c = open(s.power_controller().map_err(|e| e.to_string())?, "controllers.power")?;
            Ok(Cutter::Power(c.power.ok_or("controllers.power: the controller has no power switch")?))
        }
        Fault::LinkReset { reset, port } => {
            let c = open(s.link_controller().map_err(|e| e.to_string())?, "controllers.link")?;
            let ctl = c.link.ok_or("controllers.link: the controller cannot reset links")?;
            let port = match port {
                Some(p) => p.clone(),
                None => match ctl.ports().as_slice() {
                    [only] => only.port.clone(),
                    ports => {
                        let names: Vec<&str> = ports.iter().map(|p| p.port.as_str()).collect();
                        return Err(format!("fault.port: {} has ports [{}]: name one", ctl.name(), names.join(", ")));
                    }
                },
            };
            let kind = reset.reset_kind();
            ctl.require(&port, kind).map_err(|e| e.to_string())?;
            Ok(Cutter::Link { ctl, port, kind })
        }
    }
}

fn setup(s: &Scenario, run_dir: &Path, o: &RunnerOptions, resuming: bool) -> Result<Setup, String> {
    let begun = exists(run_dir);
    if begun && !resuming {
        return Err(format!("{} already holds a run: `faultline resume {}` continues it", run_dir.display(), run_dir.display()));
    }
    placement(&s.cut, &s.fault, &mut WyRand::new(0))?;
    let (device, cutter, emulator, sector, atomic, capacity, notes) = match &s.target.sim {
        Some(t) => {
            let cfg = SimConfig {
                capacity_bytes: t.capacity_bytes,
                sector_bytes: t.sector_bytes,
                atomic_bytes: t.atomic_bytes,
                queue_depth: t.queue_depth as usize,
                seed: o.seed,
                model: t.model.fault_model(),
                contract: match s.contract {
                    Contract::Plp => TruthContract::Plp,
                    Contract::Flush => TruthContract::Flush,
                },
            };
            // The drive keeps itself in the run directory, so that it outlives a harness that
            // is killed, as a real drive does.
            let sim = SimDrive::persistent(cfg, run_dir).map_err(|e| format!("the simulated drive: {e}"))?;
            let (cutter, emu) = sim_switch(t.switch, sim.power(), o.seed, &o.control_env)?;
            (Device::Sim(sim), cutter, emu, t.sector_bytes as u64, t.atomic_bytes as u64, t.capacity_bytes, Vec::new())
        }
        None => {
            let roots = SysRoots { sys: o.control_env.sysfs_root.join("sys"), dev: o.control_env.dev_root.join("dev") };
            let expect = s.expectation();
            let path = match &s.target.path {
                Some(p) => p.clone(),
                None => find_by_identity(&expect, &roots).map_err(|e| format!("target: {e}"))?,
            };
            let mut spec = OpenSpec {
                writable: true,
                queue_depth: s.workload.queue_depth as usize,
                expect: expect.clone(),
                // A device that carries this run's data already was probed when the run began.
                allow_overwrite_signature: begun,
                io_threads: 1,
            };
            let opened = open_target(&path, &spec).map_err(|e| e.to_string())?;
            // From here on the device carries this run's data: re-opening it after a fault
            // must not refuse it for what a signature probe might see in that data.
            spec.allow_overwrite_signature = true;
            let g = opened.target.geometry();
            let sector = (g.logical_block_bytes as u64).max(512);
            let cutter = real_cutter(s, &o.control_env)?;
            let mut notes = opened.notes;
            // After a fault the device may come back under another name: it is found again by
            // the scenario's identity or, when the scenario gives only a path, by what sysfs
            // says of the device there now.
            let find = if expect.is_empty() { derived_expectation(&path, g.capacity_bytes, g.logical_block_bytes) } else { Some(expect) };
            let health = match read_health(&path, &roots) {
                Ok(b) => Some(b),
                Err(why) => {
                    notes.push(format!("no SMART/health checks: {why}"));
                    None
                }
            };
            let real = RealDevice { path, spec, target: Some(opened.target), find, roots, identity: String::new(), health };
            (Device::Real(Box::new(real)), cutter, None, sector, sector, g.capacity_bytes, notes)
        }
    };
    let mut device = device;
    let layout = s.layout(sector, capacity, o.seed).map_err(|e| e.to_string())?;
    let target = device.target()?;
    let identity = target.identity();
    let header = RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: o.run_id,
        created_at: o.started_at.clone(),
        target_identity: identity.clone(),
        target_capacity: capacity,
        sector_bytes: sector,
        atomic_bytes: atomic,
        contract: s.contract,
        port: 0,
        workload: layout.spec().clone(),
    };
    let run = open_run(run_dir, target, move || header).map_err(|e| e.to_string())?;
    if begun && run.layout.spec() != layout.spec() {
        return Err(format!(
            "{}: the run's workload differs from the scenario's ({:?} in the ledger): the scenario file was changed",
            run_dir.display(),
            run.layout.spec()
        ));
    }
    let header = run.history().header.clone();
    if let Device::Real(r) = &mut device {
        r.identity = header.target_identity.clone();
    }
    Ok(Setup { device, cutter, run: Some(run), header, identity, sector, notes, _emulator: emulator })
}

/// The runner's end of the event stream, with the run clock and the findings seen so far.
struct Emitter<'a> {
    rec: Recorder<'a>,
    t0: Instant,
    /// The run clock at `t0`: 0 for a new run, just past the last event recorded for a resumed one.
    base_ns: u64,
    seen: HashSet<(FindingClass, u64, String)>,
    errors: Vec<String>,
}

impl Emitter<'_> {
    fn ns(&self, at: Instant) -> u64 {
        self.base_ns + nanos(at.saturating_duration_since(self.t0))
    }

    fn now(&self) -> u64 {
        self.ns(Instant::now())
    }

    fn emit(&mut self, e: Event) {
        self.rec.emit(&e);
    }

    fn error(&mut self, cycle: Option<u32>, message: String) {
        let t_ns = self.now();
        self.errors.push(message.clone());
        self.emit(Event::HarnessError { t_ns, cycle, message });
    }

    /// What makes a finding the same one seen again: a lost or torn write is one finding
    /// however many of its sectors later writes have covered since; other damage is one per
    /// place and expected content.
    fn key(f: &Finding) -> (FindingClass, u64, String) {
        match (f.class, &f.expected) {
            (FindingClass::LostWrite | FindingClass::TornWrite, Shown::Write { write_id, .. }) => (f.class, *write_id, String::new()),
            _ => (f.class, f.offset, format!("{:?}", f.expected)),
        }
    }

    fn is_new(&self, f: &Finding) -> bool {
        !self.seen.contains(&Self::key(f))
    }

    /// Emits each finding not seen before, once; returns how many were new.
    fn findings(&mut self, cycle: u32, findings: &[Finding]) -> usize {
        let t_ns = self.now();
        let mut new = 0;
        for f in findings {
            if self.seen.insert(Self::key(f)) {
                new += 1;
                self.emit(Event::Finding { t_ns, cycle, finding: f.clone() });
            }
        }
        new
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Runs a scenario in `run_dir`, sending every event to `sinks`.
///
/// `prior` is `None` for a new run (`run_dir` must not hold one). For `faultline resume` it
/// holds the events the run had recorded before the harness died (their consumers in `sinks`
/// other than the log have seen them): the run goes on from the ledger and the saved drive,
/// finishing the cycle the harness died in, until `cycles.count` cycles have ended.
///
/// Harness errors end up as `harness_error` events and an `error` verdict; `Err` when a
/// consumer of the events failed, or when a resumed run could not be set up again (then
/// nothing is recorded, and the run can be resumed once the cause is fixed).
pub fn run_scenario(
    s: &Scenario,
    run_dir: &Path,
    sinks: Sinks<'_>,
    o: &RunnerOptions,
    prior: Option<&[Event]>,
) -> Result<RunSummary, RunnerError> {
    let resuming = prior.is_some();
    let prior = prior.unwrap_or_default();
    let mut em = Emitter {
        rec: Recorder::resumed(sinks, RunModel::from_events(prior)),
        t0: Instant::now(),
        base_ns: prior.iter().map(Event::t_ns).max().map_or(0, |t| t + 1),
        seen: prior
            .iter()
            .filter_map(|e| if let Event::Finding { finding, .. } = e { Some(Emitter::key(finding)) } else { None })
            .collect(),
        errors: prior
            .iter()
            .filter_map(|e| if let Event::HarnessError { message, .. } = e { Some(message.clone()) } else { None })
            .collect(),
    };
    let started = prior.iter().any(|e| matches!(e, Event::RunStarted { .. }));
    let run_started = |run_id: u64, target: String| Event::RunStarted {
        t_ns: 0,
        run_id: format!("{run_id:016x}"),
        scenario: s.name.clone(),
        target,
        contract: s.contract,
        cycles_planned: s.cycles.count,
        seed: o.seed,
        started_at: o.started_at.clone(),
    };
    let mut cycles_run = 0;
    let mut notes = Vec::new();
    let stopped = match setup(s, run_dir, o, resuming) {
        Ok(mut st) => {
            if !started {
                em.emit(run_started(st.header.run_id, st.identity.clone()));
            }
            notes = std::mem::take(&mut st.notes);
            match cycles(s, o, run_dir, &mut st, &mut em, &mut cycles_run, resuming.then_some(prior)) {
                Ok(Ending::Done) => None,
                Ok(Ending::Stopped(why)) => Some(why),
                Ok(Ending::Suspended(why)) => {
                    let Emitter { errors, .. } = em;
                    return Ok(RunSummary { verdict: Verdict::Error, cycles_run, stopped: Some(why), errors, notes, suspended: true });
                }
                Err(e) => {
                    // Short of space: the error is most likely that; suspend rather than end.
                    if let Some(why) = short_of_space(run_dir, &st.device) {
                        let Emitter { errors, .. } = em;
                        let why = format!("{e}; {why}");
                        return Ok(RunSummary { verdict: Verdict::Error, cycles_run, stopped: Some(why), errors, notes, suspended: true });
                    }
                    em.error(None, e.clone());
                    Some(e)
                }
            }
        }
        Err(e) if resuming => return Err(RunnerError::Resume(e)),
        Err(e) => {
            em.emit(run_started(o.run_id, "unknown (the target was not opened)".into()));
            em.error(None, e.clone());
            Some(e)
        }
    };
    let t = em.now();
    let Emitter { rec, errors, .. } = em;
    let verdict = rec.end(t)?;
    Ok(RunSummary { verdict, cycles_run, stopped, errors, notes, suspended: false })
}

/// Verifies `regions` (sorted, disjoint) and merges the reports.
fn verify_regions(run: &OpenRun, target: &mut dyn BlockTarget, regions: &[(u64, u64)]) -> Result<VerifyReport, VerifyError> {
    let v = Verifier::new(&run.layout, run.ledger.history(), &run.format);
    let mut total: Option<VerifyReport> = None;
    for &(a, b) in regions {
        let r = v.verify(target, a, b)?;
        match &mut total {
            None => total = Some(r),
            Some(t) => {
                t.sectors += r.sectors;
                t.bytes += r.bytes;
                t.durable_ok += r.durable_ok;
                t.newer_ok += r.newer_ok;
                t.prior_ok += r.prior_ok;
                t.findings.extend(r.findings);
            }
        }
    }
    Ok(total.unwrap_or_default())
}

/// Closes the ledger and opens the run again, which closes a cycle a failed writer left open
/// (as `interrupted`, from its last checkpoint).
fn reopen(slot: &mut Option<OpenRun>, run_dir: &Path, target: &mut dyn BlockTarget, header: &RunHeader) -> Result<(), String> {
    drop(slot.take());
    let h = header.clone();
    *slot = Some(open_run(run_dir, target, move || h).map_err(|e| format!("cannot reopen the run after a failed cycle: {e}"))?);
    Ok(())
}

/// A per-cycle random stream: the same for a cycle whether or not the harness died before it.
fn cycle_rng(seed: u64, salt: u64, cycle: u32) -> WyRand {
    let mut r = WyRand::new(seed ^ salt);
    WyRand::new(r.next_u64() ^ u64::from(cycle).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

const PLACE_SALT: u64 = 0x0c07_91ac_e000_0001;
const SAMPLE_SALT: u64 = 0x5a3b_1e00_0000_0002;

/// What the cycles share.
struct Cycles<'r, 'e> {
    s: &'r Scenario,
    o: &'r RunnerOptions,
    run_dir: &'r Path,
    device: &'r mut Device,
    cutter: &'r mut Cutter,
    slot: &'r mut Option<OpenRun>,
    header: &'r RunHeader,
    em: &'r mut Emitter<'e>,
    sector_bytes: u64,
    span: (u64, u64),
    /// Writes below this id have been verified since they were written.
    checked_upto: u64,
    consecutive_errors: u32,
    /// The pin-mate step set for the next cut, if the scenario sweeps them.
    mate_step_ms: Option<u32>,
    /// When the cycle in progress started, and how long of it was spent waiting on the
    /// workload, the controller, the off time and the device (so the rest is the harness's).
    cycle_t0: Instant,
    waits: Duration,
}

/// How the cycles ended.
enum Ending {
    /// Every cycle ran.
    Done,
    /// The stop policy ended the run early, for this reason.
    Stopped(String),
    /// The run stopped without ending, to be resumed (the run directory ran short of space).
    Suspended(String),
}

/// The cycles; `Err` ends the run with a harness error.
fn cycles(
    s: &Scenario,
    o: &RunnerOptions,
    run_dir: &Path,
    st: &mut Setup,
    em: &mut Emitter,
    cycles_run: &mut u32,
    resumed: Option<&[Event]>,
) -> Result<Ending, String> {
    let prior = resumed.unwrap_or_default();
    let Setup { device, cutter, run: slot, header, sector, .. } = st;
    let not_open = || "the run is not open".to_string();
    let spec = slot.as_ref().ok_or_else(not_open)?.layout.spec().clone();
    let history = slot.as_ref().ok_or_else(not_open)?.history().clone();
    let ended: HashSet<u32> =
        prior.iter().filter_map(|e| if let Event::CycleEnded { cycle, .. } = e { Some(*cycle) } else { None }).collect();
    // Verified up to the writes of the last cycle whose verification was recorded.
    let last_verified = prior.iter().filter_map(|e| if let Event::Verified { cycle, .. } = e { Some(*cycle) } else { None }).max();
    let checked_upto = match last_verified {
        Some(v) => history.cycles.iter().find(|c| c.cycle == v).map_or(1, |c| c.submitted_end),
        None if resumed.is_none() => history.submitted_end(),
        None => history.cycles.first().map_or(1, |c| c.first_id),
    };
    let mut c = Cycles {
        s,
        o,
        run_dir,
        device,
        cutter,
        slot,
        header,
        em,
        sector_bytes: *sector,
        span: (spec.span_start, spec.span_end),
        checked_upto,
        consecutive_errors: 0,
        mate_step_ms: None,
        cycle_t0: Instant::now(),
        waits: Duration::ZERO,
    };
    let mut done = ended.len() as u32;
    // A stop the stop policy made while the run directory is short of space was most likely
    // caused by that: the run is suspended, not ended.
    let stopped = |c: &Cycles, why: String| match short_of_space(c.run_dir, c.device) {
        Some(space) => Ending::Suspended(format!("{why}; {space}")),
        None => Ending::Stopped(why),
    };
    if resumed.is_some() {
        let last = history.last_cycle();
        let interrupted = (last > 0 && !ended.contains(&last)).then_some(last);
        let last_event = prior.last().map(Event::kind).unwrap_or_default();
        if let Some(why) = short_of_space(c.run_dir, c.device) {
            return Ok(Ending::Suspended(why));
        }
        let t_ns = c.em.now();
        c.em.emit(Event::RunResumed { t_ns, resumed_at: (o.clock)(), cycles_ended: done, interrupted_cycle: interrupted, last_event });
        if let Some(cycle) = interrupted {
            // The harness died inside this cycle: whatever it was doing, power the drive (back)
            // on and check every write of the cycle; the ledger has closed it as interrupted, so
            // none of them counts as durable beyond what had been recorded.
            *cycles_run += 1;
            done += 1;
            (c.cycle_t0, c.waits) = (Instant::now(), Duration::ZERO);
            if let Some(why) = c.settle(cycle, None, done == s.cycles.count, 0, None, Duration::ZERO)? {
                return Ok(stopped(&c, why));
            }
        }
    }
    while done < s.cycles.count {
        if let Some(why) = short_of_space(c.run_dir, c.device) {
            return Ok(Ending::Suspended(why));
        }
        // Pin-mate sequencing sweeps its steps, one per cycle; a failure to set it up starts
        // no cycle.
        if let Fault::PowerCut { mate_steps_ms } = &s.fault {
            if !mate_steps_ms.is_empty() {
                let cycle = c.run()?.next_cycle().0;
                let step = mate_steps_ms[(cycle as usize - 1) % mate_steps_ms.len()];
                if let Err(e) = c.cutter.set_mate_step(step) {
                    c.em.error(None, format!("cycle {cycle}: setting the pin-mate step to {step} ms: {e}"));
                    c.consecutive_errors += 1;
                    if s.stop.on_controller_failure == OnEvent::Stop {
                        return Ok(Ending::Stopped(format!("cycle {cycle}: controller failure (stop.on_controller_failure = \"stop\")")));
                    }
                    if let Some(why) = c.too_many_errors() {
                        return Ok(Ending::Stopped(why));
                    }
                    continue;
                }
                c.mate_step_ms = Some(step);
            }
        }
        done += 1;
        *cycles_run += 1;
        if let Some(why) = c.cycle(done == s.cycles.count)? {
            return Ok(stopped(&c, why));
        }
    }
    c.slot.as_mut().ok_or_else(not_open)?.ledger.sync().map_err(|e| e.to_string())?;
    Ok(Ending::Done)
}

impl Cycles<'_, '_> {
    /// Reads an NVMe target's health logs after the cycle and compares them with the last
    /// reading: emits a `health` event; returns the number of anomalies. `faulted` is false for
    /// a cycle the harness died in, where nobody knows whether the fault happened.
    fn health(&mut self, cycle: u32, faulted: bool) -> usize {
        let Device::Real(r) = &mut *self.device else { return 0 };
        let Some(before) = &r.health else { return 0 };
        let after = match read_health(&r.path, &r.roots) {
            Ok(a) => a,
            Err(why) => {
                self.em.error(Some(cycle), format!("SMART/health log: {why}"));
                return 0;
            }
        };
        let how = match self.s.fault {
            Fault::PowerCut { .. } if faulted => Some(Shutdown::Dirty),
            Fault::CleanShutdown if faulted => Some(Shutdown::Clean),
            _ => None,
        };
        let policy = HealthPolicy { allow_clean_bump: false, report_error_log_growth: true };
        let mut anomalies = judge(&before.smart, &after.smart, how.unwrap_or(Shutdown::Dirty), policy);
        if how.is_none() {
            // A link reset, or an unknown fault: no unsafe shutdown is expected either way.
            anomalies.retain(|a| !matches!(a, HealthAnomaly::UnsafeShutdownsAfterDirtyCut { .. }));
        }
        if let (Some(b), Some(a), Some(how)) = (&before.ocp, &after.ocp, how) {
            anomalies.extend(judge_ocp(b, a, how));
        }
        let t_ns = self.em.now();
        self.em.emit(Event::Health {
            t_ns,
            cycle,
            smart: SmartFigures::from(&after.smart),
            anomalies: anomalies.iter().map(HealthNote::from).collect(),
        });
        r.health = Some(after);
        anomalies.len()
    }

    fn run(&mut self) -> Result<&mut OpenRun, String> {
        self.slot.as_mut().ok_or_else(|| "the run is not open".to_string())
    }

    fn too_many_errors(&self) -> Option<String> {
        (self.consecutive_errors >= self.s.stop.max_consecutive_harness_errors)
            .then(|| format!("{} cycles in a row ended by a harness error", self.consecutive_errors))
    }

    /// One cycle: write with the queue full, fault at the placement, confirm, then settle.
    fn cycle(&mut self, last: bool) -> Result<Option<String>, String> {
        let s = self.s;
        let off = Duration::from_millis(s.cycles.off_time_ms);
        let (cycle, first_id) = self.run()?.next_cycle();
        let t_start = self.em.now();
        self.em.emit(Event::CycleStarted { t_ns: t_start, cycle });
        let (place, planned) = placement(&s.cut, &s.fault, &mut cycle_rng(self.o.seed, PLACE_SALT, cycle))?;
        let sim = match &*self.device {
            Device::Sim(d) => Some(d.clone()),
            Device::Real { .. } => None,
        };
        let copts = CycleOptions {
            cycle,
            first_id,
            started_at: (self.o.clock)(),
            port: 0,
            max_writes: None,
            duration: None,
            cut: Some(place),
            // The simulated drive is saved at each cut, and a checkpoint must never claim more
            // than the saved drive holds: no checkpoints inside its (short) cycles.
            checkpoint_every: if sim.is_some() { Duration::MAX } else { Duration::from_secs(10) },
            drain_timeout: Duration::from_secs(s.cycles.readiness_timeout_s.clamp(1, 30)),
        };
        let started = Instant::now();
        (self.cycle_t0, self.waits) = (started, Duration::ZERO);
        let mut cut_cmd = Duration::ZERO;
        let res = {
            let cutter = &mut *self.cutter;
            let cut_cmd = &mut cut_cmd;
            let mut hook = || {
                let t = Instant::now();
                cutter.cut(off)?;
                *cut_cmd = t.elapsed();
                // Saved before the writer records what the cut left durable.
                match &sim {
                    Some(d) => d.persist().map_err(|e| format!("cannot save the simulated drive after the cut: {e}")),
                    None => Ok(()),
                }
            };
            let run = self.slot.as_mut().ok_or("the run is not open")?;
            let target = self.device.target()?;
            run_cycle(target, &run.layout, &run.format, &mut run.ledger, s.contract, &copts, &mut hook)
        };
        let outcome = match res {
            Ok(out) => out,
            Err(e) => {
                let controller = matches!(e, WriteError::Cut(_));
                self.em.error(Some(cycle), e.to_string());
                // Power back on (a partial cut) and close the cycle the writer left open.
                if let Err(e2) = self.cutter.restore(off) {
                    self.em.error(Some(cycle), format!("power on after the failed cycle: {e2}"));
                }
                let target = self.device.target()?;
                reopen(self.slot, self.run_dir, target, self.header)?;
                let t_ns = self.em.now();
                self.em.emit(Event::CycleEnded {
                    t_ns,
                    cycle,
                    verdict: Verdict::Error,
                    writes_completed: 0,
                    bytes_written: 0,
                    write_ns: nanos(started.elapsed()),
                    latency_p50_ns: None,
                    latency_p99_ns: None,
                    harness_ns: None,
                });
                self.consecutive_errors += 1;
                if controller && s.stop.on_controller_failure == OnEvent::Stop {
                    return Ok(Some(format!("cycle {cycle}: controller failure (stop.on_controller_failure = \"stop\")")));
                }
                return Ok(self.too_many_errors());
            }
        };
        emit_cut(self.em, cycle, started, &outcome, planned, self.mate_step_ms);
        // Writing until the cut, and the cut command itself.
        self.waits += outcome.cut_at.unwrap_or(outcome.elapsed) + cut_cmd;
        let t_confirm = Instant::now();

        // A fault that cannot be confirmed is never a clean pass.
        let (span_start, sector) = (self.span.0, self.sector_bytes as usize);
        let confirmed = match self.cutter.confirm() {
            Some(r) => r,
            None if self.cutter.is_link() => Ok(()),
            None if outcome.device_gone_at.is_some() || (outcome.in_flight_at_cut > 0 && outcome.failed > 0) => Ok(()),
            None if !self.device.answers(span_start, sector) => Ok(()),
            None => {
                Err("the switch cannot read its state back and the device kept answering after the cut: the cut is not confirmed".into())
            }
        };
        self.waits += t_confirm.elapsed();
        let mut stop = None;
        let mut cycle_errors = 0;
        if let Err(why) = confirmed {
            self.em.error(Some(cycle), why);
            cycle_errors += 1;
            if s.stop.on_controller_failure == OnEvent::Stop {
                stop = Some(format!("cycle {cycle}: the cut was not confirmed (stop.on_controller_failure = \"stop\")"));
            }
        }
        self.settle(cycle, Some(&outcome), last, cycle_errors, stop, off)
    }

    /// The rest of a cycle whose fault is done (or whose harness died): power on after `off`,
    /// wait until the device answers, verify what the cycle wrote, record, apply the stop
    /// policy. `outcome` is `None` for a cycle finished by `faultline resume`.
    fn settle(
        &mut self,
        cycle: u32,
        outcome: Option<&CycleOutcome>,
        last: bool,
        mut cycle_errors: u32,
        stop: Option<String>,
        off: Duration,
    ) -> Result<Option<String>, String> {
        let s = self.s;
        let (span_start, span_end) = self.span;
        let sector = self.sector_bytes as usize;
        let readiness = Duration::from_secs(s.cycles.readiness_timeout_s);
        self.device.release();
        let t_restore = Instant::now();
        let restored = self.cutter.restore(off);
        self.waits += t_restore.elapsed();
        if let Err(e) = restored {
            self.em.error(Some(cycle), format!("power on: {e}"));
            end_cycle(self.em, cycle, Verdict::Error, outcome, None);
            if s.stop.on_controller_failure == OnEvent::Stop || self.consecutive_errors + 1 >= s.stop.max_consecutive_harness_errors {
                return Ok(Some(format!("cycle {cycle}: power could not be restored")));
            }
            self.consecutive_errors += 1;
            return Ok(None);
        }
        let t_ns = self.em.now();
        self.em.emit(Event::PowerRestored { t_ns, cycle });

        let mut findings: Vec<Finding> = Vec::new();
        let mut dead = false;
        let t_ready = Instant::now();
        let ready = self.device.wait_ready(span_start, sector, readiness);
        self.waits += t_ready.elapsed();
        match ready {
            Ok((enumerate, first_read)) => {
                let t_ns = self.em.now();
                self.em.emit(Event::Ready {
                    t_ns,
                    cycle,
                    enumerate_us: enumerate.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
                    first_read_us: Some(u64::try_from(first_read.as_micros()).unwrap_or(u64::MAX)),
                });
            }
            Err(why) => {
                findings.push(dead_device(cycle, &why));
                dead = true;
            }
        }

        let mut anomalies = 0;
        if !dead {
            let t_health = Instant::now();
            anomalies = self.health(cycle, outcome.is_some());
            self.waits += t_health.elapsed();
        }
        if !dead {
            let submitted_end = outcome.map_or_else(|| self.slot.as_ref().map_or(0, |r| r.history().submitted_end()), |o| o.submitted_end);
            // What to read: everything written since the last check, a seeded sample, or the
            // whole span when the policy says so.
            let every = s.verify.full_every_cycles;
            let full = (every > 0 && cycle.is_multiple_of(every)) || (last && s.verify.full_at_end);
            let whole = vec![(span_start, span_end)];
            let regions = if full {
                whole.clone()
            } else {
                let layout = &self.slot.as_ref().ok_or("the run is not open")?.layout;
                let written = written_regions(layout, self.checked_upto, submitted_end);
                let mut rng = cycle_rng(self.o.seed, SAMPLE_SALT, cycle);
                let sample = sample_regions(&mut rng, span_start, span_end, self.sector_bytes, s.verify.sample_bytes);
                union(&written, &sample)
            };
            let v0 = Instant::now();
            let run = self.slot.as_ref().ok_or("the run is not open")?;
            let target = self.device.target()?;
            let mut result = verify_regions(run, target, &regions);
            let mut extra = (0u64, 0u64);
            // Stopping on a finding: the whole span is read once before the run ends.
            if let Ok(rep) = &result {
                let stops = s.stop.on_finding == OnEvent::Stop && rep.findings.iter().any(|f| self.em.is_new(f));
                if stops && !full && s.verify.full_at_end {
                    extra = (rep.sectors, rep.bytes);
                    result = verify_regions(run, target, &whole);
                }
            }
            let verify_ns = nanos(v0.elapsed());
            self.waits += v0.elapsed();
            match result {
                Ok(rep) => {
                    self.checked_upto = submitted_end;
                    let t_ns = self.em.now();
                    self.em.emit(Event::Verified {
                        t_ns,
                        cycle,
                        sectors: rep.sectors + extra.0,
                        bytes: rep.bytes + extra.1,
                        verify_ns,
                        counts: class_counts(&rep.findings),
                    });
                    findings.extend(rep.findings);
                }
                Err(VerifyError::DeviceGone(why)) => {
                    findings.push(dead_device(cycle, &why));
                    dead = true;
                }
                Err(e) => {
                    self.em.error(Some(cycle), e.to_string());
                    cycle_errors += 1;
                }
            }
        }

        let new = self.em.findings(cycle, &findings);
        let harness = self.cycle_t0.elapsed().saturating_sub(self.waits);
        end_cycle(self.em, cycle, if new > 0 || anomalies > 0 { Verdict::Findings } else { Verdict::Clean }, outcome, Some(harness));
        self.consecutive_errors = if cycle_errors > 0 { self.consecutive_errors + 1 } else { 0 };

        if stop.is_some() {
            return Ok(stop);
        }
        if let Some(why) = self.too_many_errors() {
            return Ok(Some(why));
        }
        if dead {
            if s.stop.on_dead_device == OnEvent::Stop {
                return Ok(Some(format!("cycle {cycle}: the device did not come back (stop.on_dead_device = \"stop\")")));
            }
            // `continue`: cut once more and wait once more.
            self.device.release();
            let hold = Duration::from_millis(s.cycles.off_time_ms);
            let again = self.cutter.cut(hold).and_then(|()| self.cutter.restore(hold));
            if let Err(e) = again {
                self.em.error(Some(cycle), format!("power cycle of a dead device: {e}"));
                return Ok(Some(format!("cycle {cycle}: the device did not come back and could not be power-cycled")));
            }
            if let Err(why) = self.device.wait_ready(span_start, sector, readiness) {
                return Ok(Some(format!("cycle {cycle}: the device did not come back after a second power cycle: {why}")));
            }
        } else if new > 0 && s.stop.on_finding == OnEvent::Stop {
            return Ok(Some(format!("cycle {cycle}: findings (stop.on_finding = \"stop\")")));
        }
        Ok(None)
    }
}

/// `cut_issued` and `device_gone` of a cycle, on the run clock (the outcome's times count from
/// the start of the cycle's workload, within microseconds of `started`).
fn emit_cut(em: &mut Emitter, cycle: u32, started: Instant, o: &CycleOutcome, planned_after_ms: Option<u64>, mate: Option<u32>) {
    let start = em.ns(started);
    for mut e in crate::events::cut_events(start, cycle, o, planned_after_ms) {
        if let Event::CutIssued { mate_step_ms, .. } = &mut e {
            *mate_step_ms = mate;
        }
        em.emit(e);
    }
}

/// Ends a cycle; `harness` is the time the harness itself spent on it (`None` when unknown).
fn end_cycle(em: &mut Emitter, cycle: u32, verdict: Verdict, o: Option<&CycleOutcome>, harness: Option<Duration>) {
    let t_ns = em.now();
    em.emit(Event::CycleEnded {
        t_ns,
        cycle,
        verdict,
        writes_completed: o.map_or(0, |o| o.completed),
        bytes_written: o.map_or(0, |o| o.bytes_written),
        write_ns: o.map_or(0, |o| nanos(o.elapsed)),
        latency_p50_ns: None,
        latency_p99_ns: None,
        harness_ns: harness.map(nanos),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{FlushPolicy, Pattern, WorkloadSpec};

    fn layout() -> Layout {
        let spec = WorkloadSpec {
            seed: 9,
            pattern: Pattern::Random,
            span_start: 4096,
            span_end: 4 << 20,
            min_write_bytes: 512,
            max_write_bytes: 65536,
            mean_write_bytes: 8192,
            align_bytes: 512,
            queue_depth: 32,
            flush: FlushPolicy { every_writes: None, every_ms: None, fua_percent: 0 },
        };
        Layout::new(spec, 512).unwrap()
    }

    fn sorted_disjoint(v: &[(u64, u64)]) -> bool {
        v.iter().all(|&(s, e)| s < e) && v.windows(2).all(|w| w[0].1 < w[1].0)
    }

    #[test]
    fn runner_coalesce_merges_overlapping_and_touching_ranges() {
        let v = vec![(50, 60), (0, 10), (10, 20), (5, 8), (30, 40), (35, 45), (70, 70), (60, 61)];
        assert_eq!(coalesce(v), vec![(0, 20), (30, 45), (50, 61)]);
        assert_eq!(coalesce(Vec::new()), Vec::new());
        assert_eq!(union(&[(0, 4)], &[(4, 8), (16, 20)]), vec![(0, 8), (16, 20)]);
    }

    #[test]
    fn runner_written_regions_cover_exactly_the_writes() {
        let l = layout();
        for (from, to) in [(1u64, 1u64), (1, 2), (100, 2000), (5000, 5000 + 3 * COALESCE_EVERY as u64)] {
            let r = written_regions(&l, from, to);
            assert!(sorted_disjoint(&r), "{r:?}");
            // Every sector of every write is covered, and every covered sector was written.
            let mut sectors = std::collections::BTreeSet::new();
            for id in from..to {
                let w = l.plan(id);
                sectors.extend((w.offset / 512)..(w.end() / 512));
            }
            let covered: std::collections::BTreeSet<u64> = r.iter().flat_map(|&(s, e)| (s / 512)..(e / 512)).collect();
            assert_eq!(covered, sectors, "writes [{from}, {to})");
            assert!(r.len() as u64 <= to - from);
        }
    }

    #[test]
    fn runner_sample_is_seeded_aligned_and_inside_the_span() {
        let (start, end) = (4096u64, 64u64 << 20);
        let a = sample_regions(&mut WyRand::new(3), start, end, 4096, 8 << 20);
        assert_eq!(a, sample_regions(&mut WyRand::new(3), start, end, 4096, 8 << 20), "same seed, same chunks");
        assert_ne!(a, sample_regions(&mut WyRand::new(4), start, end, 4096, 8 << 20));
        assert!(sorted_disjoint(&a));
        assert!(a.iter().all(|&(s, e)| s >= start && e <= end && (s - start) % 4096 == 0 && (e == end || (e - start) % 4096 == 0)));
        let total: u64 = a.iter().map(|&(s, e)| e - s).sum();
        assert!(total > 0 && total <= 8 << 20, "{total}");
        assert_eq!(sample_regions(&mut WyRand::new(3), start, end, 512, end), vec![(start, end)]);
        assert_eq!(sample_regions(&mut WyRand::new(3), start, end, 512, 0), vec![]);
        let small = sample_regions(&mut WyRand::new(3), start, end, 4096, 512);
        assert_eq!(small.len(), 1);
        assert_eq!(small[0].1 - small[0].0, 4096, "a sample smaller than a sector reads one sector");
    }

    #[test]
    fn runner_uniform_time_draw_is_deterministic_and_inside_the_window() {
        let cut = scenario::CutPlacement::UniformTime { window_start_ms: 5, window_end_ms: 9 };
        let fault = Fault::PowerCut { mate_steps_ms: Vec::new() };
        let draws = |seed| {
            let mut rng = WyRand::new(seed);
            (0..200).map(|_| placement(&cut, &fault, &mut rng).unwrap()).collect::<Vec<_>>()
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
        let power = Fault::PowerCut { mate_steps_ms: Vec::new() };
        let p = |c, f: &Fault, rng: &mut WyRand| placement(&c, f, rng);
        use scenario::CutPlacement as S;
        assert_eq!(
            p(S::AfterCompletions { completions: 7 }, &power, &mut rng).unwrap(),
            (CutPlacement::AfterCompletions { completions: 7 }, None)
        );
        assert_eq!(
            p(S::WhileFlushOutstanding { after_completions: 3 }, &power, &mut rng).unwrap(),
            (CutPlacement::WhileFlushOutstanding { after_completions: 3 }, None)
        );
        assert_eq!(
            p(S::WhileIdle { after_completions: 4 }, &power, &mut rng).unwrap(),
            (CutPlacement::Idle { after_completions: 4 }, None)
        );
        let clean = Fault::CleanShutdown;
        assert_eq!(
            p(S::AfterCompletions { completions: 7 }, &clean, &mut rng).unwrap(),
            (CutPlacement::Idle { after_completions: 7 }, None),
            "a clean shutdown cuts a drained drive"
        );
        assert!(p(S::UniformTime { window_start_ms: 1, window_end_ms: 2 }, &clean, &mut rng).unwrap_err().contains("while_idle"));
    }
}
