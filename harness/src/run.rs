//! Run directories: creating a run, continuing one, and refusing the wrong target.
//!
//! A run directory (its files: [`crate::run_dir`]) is tied to one target by the identity
//! recorded in its ledger's run header; every later use checks it.

use crate::format::Format;
use crate::ledger::{replay, EndKind, History, Ledger, LedgerError, LedgerWriter, Record, RunHeader};
use crate::run_dir::LEDGER_FILE;
use crate::workload::{Layout, WorkloadError};
use faultline_drivers::BlockTarget;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("run directory {dir}: {source}")]
    Dir { dir: String, source: std::io::Error },
    #[error(
        "run directory {dir} belongs to target `{recorded}`, but the target given is `{given}`; use a new run directory for a new target (to verify a copy of that target, such as a dd image, `faultline verify --image-of-target`)"
    )]
    WrongTarget { dir: String, recorded: String, given: String },
    #[error("target `{target}` is {capacity} bytes, shorter than the run's span end {span_end}")]
    TargetTooShort { target: String, capacity: u64, span_end: u64 },
    #[error("target sector size {target} differs from the run's {recorded}")]
    SectorSize { target: u64, recorded: u64 },
    #[error("run directory {dir}: {why}")]
    Mismatch { dir: String, why: String },
}

/// An open run: its ledger writer, mapping and sector format.
pub struct OpenRun {
    pub ledger: LedgerWriter,
    pub layout: Layout,
    pub format: Format,
    /// True when this call created the run.
    pub created: bool,
    /// Set when the previous cycle was interrupted (the harness died) and has been closed.
    pub recovered_cycle: Option<u32>,
}

impl OpenRun {
    pub fn history(&self) -> &History {
        self.ledger.history()
    }

    /// (cycle number, first write id) for the next cycle.
    pub fn next_cycle(&self) -> (u32, u64) {
        let h = self.history();
        (h.last_cycle() + 1, h.submitted_end())
    }
}

/// True when `dir` already holds a ledger.
pub fn exists(dir: &Path) -> bool {
    dir.join(LEDGER_FILE).exists()
}

/// Checks that `target` can stand in for the run's target as a copy of it (a `dd` image,
/// verified read-only): big enough for the span, and its logical blocks no larger than the
/// run's sectors and dividing them. Its identity is not checked: that is what makes it a copy.
pub fn check_copy(header: &RunHeader, target: &dyn BlockTarget) -> Result<(), RunError> {
    let g = target.geometry();
    if g.capacity_bytes < header.workload.span_end {
        return Err(RunError::TargetTooShort { target: target.identity(), capacity: g.capacity_bytes, span_end: header.workload.span_end });
    }
    let block = (g.logical_block_bytes as u64).max(1);
    if block > header.sector_bytes || !header.sector_bytes.is_multiple_of(block) {
        return Err(RunError::SectorSize { target: block, recorded: header.sector_bytes });
    }
    Ok(())
}

/// What a device says of itself when a run directory is bound to it: its identity and
/// geometry. A device on another host sends these; a local one reads them off its target.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceFacts {
    pub identity: String,
    pub capacity_bytes: u64,
    pub logical_block_bytes: u64,
    pub physical_block_bytes: u64,
    /// The deallocate and Write Zeroes it carries (absent: none).
    #[serde(default, skip_serializing_if = "ZeroingFacts::none")]
    pub zeroing: ZeroingFacts,
}

/// Which zeroing operations a device carries, and what a deallocated sector reads: a
/// [`faultline_drivers::ZeroingSupport`] as plain data, so that an agent can send it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroingFacts {
    #[serde(default)]
    pub deallocate: bool,
    #[serde(default)]
    pub write_zeroes: bool,
    /// A format of the whole namespace (a simulated drive, or a real one opened to format).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub format: bool,
    #[serde(default)]
    pub dealloc_reads: crate::ledger::DeallocRead,
}

impl ZeroingFacts {
    pub fn of(s: faultline_drivers::ZeroingSupport) -> ZeroingFacts {
        ZeroingFacts { deallocate: s.deallocate, write_zeroes: s.write_zeroes, format: s.format, dealloc_reads: s.dealloc_reads.into() }
    }

    pub fn none(&self) -> bool {
        !self.deallocate && !self.write_zeroes && !self.format
    }

    /// Whether `kind` is carried.
    pub fn carries(&self, kind: faultline_drivers::Zeroing) -> bool {
        match kind {
            faultline_drivers::Zeroing::Deallocate => self.deallocate,
            faultline_drivers::Zeroing::WriteZeroes => self.write_zeroes,
            faultline_drivers::Zeroing::Format => self.format,
        }
    }
}

impl DeviceFacts {
    pub fn of(target: &dyn BlockTarget) -> DeviceFacts {
        let g = target.geometry();
        DeviceFacts {
            identity: target.identity(),
            capacity_bytes: g.capacity_bytes,
            logical_block_bytes: g.logical_block_bytes as u64,
            physical_block_bytes: g.physical_block_bytes as u64,
            zeroing: ZeroingFacts::of(target.zeroing()),
        }
    }

    /// The run's sector: the logical block, 512 bytes at least.
    pub fn sector_bytes(&self) -> u64 {
        self.logical_block_bytes.max(512)
    }
}

/// Checks that the device `facts` describes is the one `header` names and is big enough.
pub fn check_target(dir: &Path, header: &RunHeader, facts: &DeviceFacts) -> Result<(), RunError> {
    let given = facts.identity.clone();
    if given != header.target_identity {
        return Err(RunError::WrongTarget { dir: dir.display().to_string(), recorded: header.target_identity.clone(), given });
    }
    if facts.capacity_bytes < header.workload.span_end {
        return Err(RunError::TargetTooShort { target: given, capacity: facts.capacity_bytes, span_end: header.workload.span_end });
    }
    if facts.sector_bytes() != header.sector_bytes {
        return Err(RunError::SectorSize { target: facts.logical_block_bytes, recorded: header.sector_bytes });
    }
    Ok(())
}

/// Opens the run in `dir` on the device `facts` describes, creating it with `header` when
/// there is none. A cycle left open by a harness that died is closed as `interrupted` from its
/// last checkpoint.
pub fn open_run(dir: &Path, facts: &DeviceFacts, header: impl FnOnce() -> RunHeader) -> Result<OpenRun, RunError> {
    let dir_err = |source| RunError::Dir { dir: dir.display().to_string(), source };
    let (ledger, created) = if exists(dir) {
        let history = replay(dir)?;
        check_target(dir, &history.header, facts)?;
        (LedgerWriter::open(dir, &history)?, false)
    } else {
        std::fs::create_dir_all(dir).map_err(dir_err)?;
        let header = header();
        check_target(dir, &header, facts)?;
        Layout::new(header.workload.clone(), header.sector_bytes)?;
        (LedgerWriter::create(dir, header)?, true)
    };
    let h = ledger.history();
    let layout = Layout::new(h.header.workload.clone(), h.header.sector_bytes)?;
    let format = Format::new(h.header.run_id, h.header.sector_bytes as usize);
    let mut run = OpenRun { ledger, layout, format, created, recovered_cycle: None };
    run.recovered_cycle = close_interrupted(&mut run.ledger)?;
    Ok(run)
}

/// Closes the cycle a harness that died left open, as `interrupted` from its last checkpoint:
/// what `write` does before its next cycle and `verify` before it verifies, so that what the
/// verify saw of that cycle's uncertain writes is recorded, and a later regression of them
/// is a `stale_version`. Returns the cycle closed, if one was open. The caller holds the run
/// directory's lock (no live writer has the cycle open).
pub fn close_interrupted(ledger: &mut dyn Ledger) -> Result<Option<u32>, RunError> {
    let Some(c) = ledger.history().cycles.last().filter(|c| c.end.is_none()).cloned() else { return Ok(None) };
    ledger.append(&Record::CycleEnd {
        cycle: c.cycle,
        end: EndKind::Interrupted,
        submitted_end: c.submitted_end,
        durable_prefix: c.durable_prefix,
        durable_extras: c.durable_extras.to_vec(),
        failed: c.failed.to_vec(),
        in_flight_at_end: 0,
        bytes_at_risk: 0,
    })?;
    ledger.sync()?;
    Ok(Some(c.cycle))
}
