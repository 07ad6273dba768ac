//! The device under test, as the runner sees it: run a cycle's workload, verify regions, wait
//! until ready, let go of it, read its health.
//!
//! [`Dut`] says nothing of where the device is: the local implementations here drive the
//! simulated drive ([`SimDut`]) and a real block device ([`RealDut`]) in this process; a remote
//! one (another host's device, with two hosts coordinated over the network) implements the
//! same calls over the wire. So every call takes what it needs by value or by reference and
//! returns plain data: nothing hands out the device itself.

use crate::format::Format;
use crate::health::{parse_ocp_smart, parse_smart};
use crate::ledger::{Contract, Ledger};
use crate::port::PortId;
use crate::run::DeviceFacts;
use crate::verify::{Digest, Digests, Verifier, VerifyError, VerifyReport};
use crate::workload::Layout;
use crate::writer::PortSamples;
use crate::writer::{CycleOptions, CycleOutcome, WriteError};
use faultline_drivers::blockdev::DeviceIdentity;
use faultline_drivers::blockdev::{
    find_by_identity, find_namespace_paths, find_path, identify, Expectation, FindError, PathMatch, SysRoots,
};
use faultline_drivers::identity::PathId;
use faultline_drivers::nvme::NvmeAdmin;
use faultline_drivers::passthru::{controller_namespace, find_controller, generic_namespace, ControllerNamespace};
use faultline_drivers::{open_target, AlignedBuf, BlockTarget, OpenSpec};
use faultline_fixtures::TruthExtent;

mod error;
mod nbd;
mod real;
mod sim;
pub use error::{Ambiguity, Cause, DutError, Shared};
pub use nbd::NbdDut;
pub(crate) use real::read_health;
pub use real::RealDut;
pub use sim::SimDut;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a read may wait when probing whether a device still answers after a cut.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a cycle's workload is: the run's layout and sector format, the contract, the options.
pub struct Workload<'a> {
    pub layout: &'a Layout,
    pub format: &'a Format,
    pub contract: Contract,
    pub opts: &'a CycleOptions,
}

/// How long the device took to come back: to be found and opened again (a real device after a
/// fault; `None` when it stayed open), and to answer its first read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub enumerate: Option<Duration>,
    pub first_read: Duration,
}

/// The simulated drive's ground truth after a cycle: every sector extent whose content the
/// contract forbids (what the drive injected), and whether it is gone for good.
#[derive(Clone, Debug, PartialEq)]
pub struct GroundTruth {
    pub extents: Vec<TruthExtent>,
    pub dead: bool,
    /// Stalls the drive injected on a port the fault did not hit, as (port, the drive's fault
    /// count): a dual-port drive's ground truth for `port_disturbance`.
    pub disturbed: Vec<(u8, u64)>,
}

/// What a port is asked to verify: regions (sorted, disjoint) and what the ledger allows
/// there, as the verifier built from the run's layout, history and format holds it.
pub struct VerifyRequest<'a> {
    pub verifier: &'a Verifier<'a>,
    pub regions: &'a [(u64, u64)],
    /// Digest what is read too ([`Digests`]): ports are compared by their digests, so a port
    /// on another host does not send its data.
    pub digest: bool,
    /// The share read: the port that writes it, and its ledger file (a port on another host
    /// is sent the share's history from it; a port here reads the verifier's).
    pub share: (crate::port::PortId, &'a std::path::Path),
}

/// What a verify found and saw, with the digests of what it read when they were asked for.
pub struct VerifyReply {
    pub report: VerifyReport,
    pub digests: Option<Vec<Digest>>,
}

/// The hash of one sector as a port reads it (`None`: the read failed), for comparing two
/// ports sector by sector where their digests differ.
pub type SectorHash = Option<[u8; 32]>;

/// What the runner does to a device under test, or to one port of it.
pub use crate::health::{HealthLogs, HealthReadError};
pub use crate::runner::controller_error::FaultHook;

pub trait Dut: Send {
    /// The device's identity (never a `/dev` name) and geometry, to bind the run directory to
    /// (`run::open_run`).
    fn facts(&mut self) -> Result<DeviceFacts, DutError>;

    /// Runs one cycle's workload; `fault` is called by the writer at the cut placement. The
    /// state the cut left is saved (the simulated drive) before the writer records what the cut
    /// left durable, and again before it records the cycle's end.
    fn run_cycle(&mut self, w: &Workload<'_>, ledger: &mut dyn Ledger, fault: &mut FaultHook<'_>) -> Result<CycleOutcome, DutCycleError>;

    /// Writes the whole span once before cycle 1 and records it; returns the bytes written.
    fn prefill(&mut self, layout: &Layout, format: &Format, port: PortId, ledger: &mut dyn Ledger) -> Result<u64, DutCycleError>;

    /// What the device is known to have done wrong, where that is known (the simulated drive's
    /// ground truth); `None` for a real device, and for every port of a simulated drive but
    /// the one that answers for it.
    fn ground_truth(&self) -> Option<GroundTruth> {
        None
    }

    /// Verifies the request's regions and merges the reports.
    fn verify(&mut self, req: &VerifyRequest<'_>) -> Result<VerifyReply, DutVerifyError>;

    /// The hash of every sector of `ranges` (sector-aligned, in order), as this port reads it.
    fn sector_hashes(&mut self, ranges: &[(u64, u64)], sector: u64) -> Result<Vec<SectorHash>, DutError>;

    /// Reads `span` sequentially, one read in flight, for `run_for`, recording each read in
    /// `samples` (the read phase of a performance run).
    fn read_load(&mut self, span: (u64, u64), run_for: Duration, samples: &PortSamples) -> Result<(), DutError>;

    /// Whether the device still answers a read of `at` (an answer with a media error counts).
    fn answers(&mut self, at: u64) -> bool;

    /// Formats the whole namespace as write id `id` and waits for the drive, at most
    /// `timeout` (a run that formats, after a format cut short left the drive refusing reads).
    fn format(&mut self, id: u64, timeout: Duration) -> Result<(), DutError> {
        let _ = (id, timeout);
        Err(DutError::Reformat("this device under test cannot be formatted".into()))
    }

    /// Waits until the device answers a read of `at`, finding and opening it again if it went
    /// away.
    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError>;

    /// Lets go of the device before its power returns (a real one comes back as a new device).
    fn release(&mut self);

    /// Reads the health logs: `None` when the device has none (not NVMe, the simulator).
    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>>;

    /// How often the writer checkpoints inside a cycle. The simulated drive is saved at each
    /// cut, and a checkpoint must never claim more than the saved drive holds: none for it.
    fn checkpoint_every(&self) -> Duration;

    /// How much the device's files in the run directory may still grow (the simulated drive's
    /// media image), for the free-space check.
    fn growth_bytes(&self) -> u64;

    /// Lines to show the user since the last call (fallback engine, buffered I/O, no health
    /// checks, found again under another name).
    fn notes(&mut self) -> Vec<String>;

    /// The operations sent to the device's agent since the last call, a line each (a target
    /// on another host: the audit log); nothing for a device in this process.
    fn take_audit(&mut self) -> Vec<String> {
        Vec::new()
    }

    /// Binds the device to the run's target identity (the run header's): when it is found
    /// again after a fault, anything else is refused.
    fn bind(&mut self, _identity: String) {}

    /// Saves what the device holds where a harness that dies finds it again (the simulated
    /// drive); nothing for a real device.
    fn save(&mut self) -> Result<(), DutError> {
        Ok(())
    }
}

/// The calls every device in this process makes alike, on the target its `target()` method
/// hands out (`Result<&mut dyn BlockTarget, DutError>`): its facts, verify, sector hashes, the
/// read load, and the probe whether it answers. Inside an `impl Dut`.
macro_rules! local_calls {
    () => {
        fn facts(&mut self) -> Result<$crate::run::DeviceFacts, $crate::runner::dut::DutError> {
            Ok($crate::run::DeviceFacts::of(self.target()?))
        }

        fn verify(
            &mut self,
            req: &$crate::runner::dut::VerifyRequest<'_>,
        ) -> Result<$crate::runner::dut::VerifyReply, $crate::runner::dut::DutVerifyError> {
            Ok($crate::runner::dut::verify_on(self.target()?, req)?)
        }

        fn sector_hashes(
            &mut self,
            ranges: &[(u64, u64)],
            sector: u64,
        ) -> Result<Vec<$crate::runner::dut::SectorHash>, $crate::runner::dut::DutError> {
            Ok($crate::runner::dut::sector_hashes_on(self.target()?, ranges, sector))
        }

        fn read_load(
            &mut self,
            span: (u64, u64),
            run_for: std::time::Duration,
            samples: &$crate::writer::PortSamples,
        ) -> Result<(), $crate::runner::dut::DutError> {
            $crate::runner::dut::read_load_on(self.target()?, span, run_for, samples, &|| false);
            Ok(())
        }

        fn answers(&mut self, at: u64) -> bool {
            self.target().is_ok_and(|t| $crate::runner::dut::probe(t, at, $crate::runner::dut::PROBE_TIMEOUT).is_ok())
        }

        fn format(&mut self, id: u64, timeout: std::time::Duration) -> Result<(), $crate::runner::dut::DutError> {
            $crate::runner::dut::format_on(self.target()?, id, timeout).map_err(|e| $crate::runner::dut::DutError::Reformat(e.to_string()))
        }
    };
}
pub(crate) use local_calls;

/// A cycle's workload and the prefill, written as they are to the target `target()` hands
/// out: a device with nothing to save (a real one). Inside an `impl Dut`.
macro_rules! plain_writes {
    () => {
        fn run_cycle(
            &mut self,
            w: &$crate::runner::dut::Workload<'_>,
            ledger: &mut dyn $crate::ledger::Ledger,
            fault: &mut $crate::runner::dut::FaultHook<'_>,
        ) -> Result<$crate::writer::CycleOutcome, $crate::runner::dut::DutCycleError> {
            let target = self.target()?;
            Ok($crate::writer::run_cycle(target, w.layout, w.format, ledger, w.contract, w.opts, &mut || Ok(fault()?))?)
        }

        fn prefill(
            &mut self,
            layout: &$crate::workload::Layout,
            format: &$crate::format::Format,
            port: $crate::port::PortId,
            ledger: &mut dyn $crate::ledger::Ledger,
        ) -> Result<u64, $crate::runner::dut::DutCycleError> {
            Ok($crate::writer::prefill_then(self.target()?, layout, format, port, ledger, &mut || Ok(()))?)
        }
    };
}
pub(crate) use plain_writes;

/// [`Dut::verify`] on a local target.
pub(crate) fn verify_on(t: &mut dyn BlockTarget, req: &VerifyRequest<'_>) -> Result<VerifyReply, VerifyError> {
    if !req.digest {
        return Ok(VerifyReply { report: req.verifier.verify_regions(t, req.regions)?, digests: None });
    }
    let mut d = Digests::for_regions(req.regions);
    let report = req.verifier.verify_regions_digested(t, req.regions, &mut d)?;
    Ok(VerifyReply { report, digests: Some(d.finish()) })
}

/// [`Dut::sector_hashes`] on a local target: read in chunks of at most 1 MiB; every sector of
/// a chunk that fails to read hashes as `None`.
pub(crate) fn sector_hashes_on(t: &mut dyn BlockTarget, ranges: &[(u64, u64)], sector: u64) -> Vec<SectorHash> {
    let mut out = Vec::new();
    let _ = each_sector_hash(t, ranges, sector, &mut |h| {
        out.extend_from_slice(h);
        Ok::<(), std::convert::Infallible>(())
    });
    out
}

/// As [`sector_hashes_on`], handing the hashes of each chunk read (at most 1 MiB of sectors)
/// to `each` as they come, and stopping at the first error it returns: what it holds is one
/// chunk's, whatever the ranges.
pub(crate) fn each_sector_hash<E>(
    t: &mut dyn BlockTarget,
    ranges: &[(u64, u64)],
    sector: u64,
    each: &mut dyn FnMut(&[SectorHash]) -> Result<(), E>,
) -> Result<(), E> {
    const CHUNK: u64 = 1 << 20;
    let sector = sector.clamp(1, CHUNK);
    let mut hashes = Vec::with_capacity(CHUNK.div_ceil(sector) as usize);
    let mut buf = AlignedBuf::zeroed(CHUNK as usize);
    for &(s, e) in ranges {
        let mut at = s;
        while at < e {
            let len = (e - at).min(CHUNK);
            buf.resize(len as usize);
            let n = len.div_ceil(sector) as usize;
            hashes.clear();
            if t.read_at(at, &mut buf).is_ok() {
                hashes.extend(buf.chunks(sector as usize).map(|c| Some(*blake3::hash(c).as_bytes())));
            } else {
                hashes.extend(std::iter::repeat_n(None, n));
            }
            each(&hashes)?;
            at += len;
        }
    }
    Ok(())
}

/// [`Dut::read_load`] on a local target: 128 KiB reads.
pub(crate) fn read_load_on(t: &mut dyn BlockTarget, (a, b): (u64, u64), run_for: Duration, samples: &PortSamples, stop: &dyn Fn() -> bool) {
    const READ_BYTES: usize = 128 << 10;
    let stop_at = Instant::now() + run_for;
    let mut buf = AlignedBuf::zeroed(READ_BYTES);
    let mut at = a;
    while Instant::now() < stop_at && a < b && !stop() {
        let len = (b - at).min(READ_BYTES as u64) as usize;
        buf.resize(len);
        let t0 = Instant::now();
        let ok = t.read_at(at, &mut buf).is_ok();
        let now = Instant::now();
        samples.record(now, now - t0, len as u64, ok);
        at = if at + len as u64 >= b { a } else { at + len as u64 };
    }
}

/// A cycle's workload failed: the writer's error, or the device was not open.
#[derive(Debug, thiserror::Error)]
pub enum DutCycleError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Dut(#[from] DutError),
    /// A port on another host: the host was lost mid-cycle (its transport ended or stalled),
    /// and the coordinator closed its cycle from what it held (`outcome`, interrupted: at least
    /// what the host wrote). When the run's fault fired (a host power cut, which may take a host
    /// before its own writer reached the placement) this is the cut's outcome; else an error.
    #[error("{why}")]
    HostLost { outcome: Box<CycleOutcome>, why: String },
}

/// Verification failed: the verifier's error, or the device was not open.
#[derive(Debug, thiserror::Error)]
pub enum DutVerifyError {
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Dut(#[from] DutError),
}

/// Formats the whole of `t` as write id `id` (an [`faultline_drivers::Op::Zero`] of kind
/// `Format`, which only a target opened to format carries) and waits for it, at most `timeout`.
pub(crate) fn format_on(t: &mut dyn BlockTarget, id: u64, timeout: Duration) -> Result<(), faultline_drivers::IoFailure> {
    use faultline_drivers::{IoFailure, Op, Zeroing};
    // Linux's errno values (include/uapi/asm-generic/errno*.h); libc is not a dependency here.
    const EIO: i32 = 5;
    const ETIMEDOUT: i32 = 110;
    let len = t.geometry().capacity_bytes;
    t.submit(Op::Zero { token: id, offset: 0, len, kind: Zeroing::Format, write_id: id })
        .map_err(|e| IoFailure::new(EIO, e.to_string()))?;
    let t0 = std::time::Instant::now();
    let mut done = Vec::new();
    while t0.elapsed() < timeout {
        t.reap(&mut done, 1, timeout.saturating_sub(t0.elapsed())).map_err(|e| IoFailure::new(EIO, e.to_string()))?;
        if let Some(c) = done.drain(..).find(|c| c.token == id) {
            return c.result;
        }
    }
    Err(IoFailure::new(ETIMEDOUT, format!("the format did not complete within {} s", timeout.as_secs())))
}

/// Reads one sector at `at` within `timeout`.
pub(crate) fn probe(t: &mut dyn BlockTarget, at: u64, timeout: Duration) -> Result<(), faultline_drivers::IoFailure> {
    t.set_read_timeout(timeout);
    let mut buf = AlignedBuf::zeroed((t.geometry().logical_block_bytes as usize).max(512));
    t.read_at(at, &mut buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sector_hashes_name_every_sector_in_order_and_none_where_the_read_failed() {
        use faultline_drivers::PowerSwitch;
        use faultline_fixtures::SimDrive;
        let cfg = faultline_fixtures::SimConfig {
            capacity_bytes: 4 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            queue_depth: 4,
            seed: 1,
            model: faultline_fixtures::FaultModel::HonestPlp,
            contract: faultline_fixtures::TruthContract::Plp,
            dealloc_reads: Default::default(),
        };
        let mut drive = SimDrive::new(cfg);
        // Two ranges, the second longer than one read chunk (1 MiB) and not a multiple of it.
        let ranges = [(0, 1536), ((1 << 20) - 512, (2 << 20) + 512)];
        let h = sector_hashes_on(&mut drive, &ranges, 512);
        assert_eq!(h.len(), 3 + 2050);
        let zero = *blake3::hash(&[0u8; 512]).as_bytes();
        assert!(h.iter().all(|x| *x == Some(zero)), "a fresh drive reads zeros everywhere");
        drive.power().power_off().unwrap();
        let h = sector_hashes_on(&mut drive, &ranges, 512);
        assert_eq!(h.len(), 3 + 2050, "one entry per sector even where nothing could be read");
        assert!(h.iter().all(Option::is_none));
    }
}
