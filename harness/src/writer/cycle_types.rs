//! What a cycle of the writer is asked ([`CycleOptions`], where it cuts: [`CutPlacement`])
//! and what it did ([`CycleOutcome`]).

use super::{Fill, HookError, PortSamples};
use crate::ledger::EndKind;
use crate::port::PortId;
use faultline_drivers::LatencySummary;
use std::time::{Duration, Instant};

/// Called right before a cycle's end is recorded, however it ended (see
/// [`CycleOptions::before_end`]).
#[derive(Clone)]
pub struct EndHook(pub std::sync::Arc<dyn Fn() -> Result<(), HookError> + Send + Sync>);

impl std::fmt::Debug for EndHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndHook")
    }
}

/// How a cycle is driven and ended.
#[derive(Clone, Debug)]
pub struct CycleOptions {
    pub cycle: u32,
    pub first_id: u64,
    /// Wall-clock timestamp recorded with the cycle start (the harness logic has no clock).
    pub started_at: String,
    pub port: PortId,
    /// Stop gracefully after this many writes were submitted.
    pub max_writes: Option<u64>,
    /// Stop gracefully after this long.
    pub duration: Option<Duration>,
    /// When to cut (call the cut hook); `None` ends the cycle gracefully.
    pub cut: Option<CutPlacement>,
    /// Interval between checkpoints (recovery points if the harness itself dies).
    pub checkpoint_every: Duration,
    /// How long to wait for in-flight operations to come back after a cut or at the end.
    pub drain_timeout: Duration,
    /// Ends the cycle gracefully when stopped from another thread (`None`: it ends by its
    /// placement, `max_writes` or `duration` alone).
    pub stop: Option<StopToken>,
    /// Where this port's completions are sampled in the windows around a fault (dual-port
    /// runs); `None`: not sampled.
    pub samples: Option<PortSamples>,
    /// Where the tagged writes are made.
    pub fill: Fill,
    /// The instant a time placement (`CutPlacement::AfterTime`) counts from; `None`: the
    /// cycle's own start. Writers of one drive's ports share one, so that a fault that hits
    /// them all finds each at its cut, however late its thread began.
    pub clock_from: Option<Instant>,
    /// Called right before the cycle's end is recorded: the simulated dual-port drive is saved
    /// there, so that whatever the record claims durable is on the saved drive, for a harness
    /// killed just after it (the port a fault did not hit goes on writing after the fault's
    /// save). `None`: nothing.
    pub before_end: Option<EndHook>,
}

/// Ends a cycle from another thread, gracefully: the writer stops submitting, drains, flushes
/// and records, as at the end of its `duration` (a surviving port's writer is stopped this way
/// when its fault window is over).
#[derive(Clone, Debug, Default)]
pub struct StopToken(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StopToken {
    pub fn stop(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Where in the workload the cut lands. Every placement but `Idle` and `Shutdown` cuts from
/// inside the I/O loop with the queue full: never after quiescing, which would test nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CutPlacement {
    /// As soon as this many writes have completed.
    AfterCompletions { completions: u64 },
    /// This long after the workload started.
    AfterTime { after_ms: u64 },
    /// Once this many writes have completed, while a flush is outstanding (the writer
    /// submits one then if none is in flight).
    WhileFlushOutstanding { after_completions: u64 },
    /// The control case: after this many completions, stop submitting, let everything
    /// complete, then cut a quiet drive.
    Idle { after_completions: u64 },
    /// A clean shutdown: once this long after the workload started and this many writes
    /// completed, stop submitting, let everything complete, flush, record what is durable (a
    /// checkpoint, synced to the ledger), then cut. Every write acknowledged before it is then
    /// owed, whatever the contract. `controller`: a normal shutdown, no flush; the cut shuts
    /// the drive's controller down (CC.SHN) before the power goes, and once it returned done,
    /// every write completed before it is owed (the drive's shutdown made them durable).
    Shutdown {
        after_ms: u64,
        #[serde(default)]
        after_completions: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        controller: bool,
    },
    /// During a format: once this many writes completed, stop submitting, let everything
    /// complete, flush, record what is durable and the format's id (synced), send the format
    /// of the span (the whole namespace), and cut `cut_after_ms` after it was sent, or once
    /// it completed if that comes first.
    DuringFormat { after_completions: u64, cut_after_ms: u64 },
}

impl CutPlacement {
    /// The placements that stop submitting and drain before the fault: `Idle`, `Shutdown`
    /// and `DuringFormat`.
    pub fn quiesces(&self) -> bool {
        matches!(self, CutPlacement::Idle { .. } | CutPlacement::Shutdown { .. } | CutPlacement::DuringFormat { .. })
    }
}

/// What a cycle did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleOutcome {
    pub end: Option<EndKind>,
    pub submitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub flushes: u64,
    pub bytes_written: u64,
    pub in_flight_at_cut: u32,
    pub bytes_at_risk: u64,
    pub submitted_end: u64,
    pub elapsed: Duration,
    /// When the cut hook was called, from the start of the cycle, on the same monotonic clock
    /// as the completions.
    pub cut_at: Option<Duration>,
    /// When the first operation failed after the cut (the device stopped answering).
    pub device_gone_at: Option<Duration>,
    /// Completions before the cut.
    pub completed_at_cut: u64,
    /// A flush was in flight when the cut was issued.
    pub flush_outstanding_at_cut: bool,
    /// Latencies of this cycle's writes that completed successfully, from submission to the
    /// completion's timestamp (same monotonic clock); `None` when none completed.
    pub write_latency: Option<LatencySummary>,
    /// The longest the port went without a write completing, before the cut (from the start
    /// of the write phase to the first completion, then between completions, and from the
    /// last one to the cut); `None` for a cycle that ended without a cut and with no
    /// completion.
    pub max_completion_gap: Option<Duration>,
    /// The target went away before any cut (a write failed with an errno that says the
    /// device is gone, or [`GONE_AFTER_EIOS`](super::GONE_AFTER_EIOS) in a row failed with EIO): the failure, as
    /// text. The writer stopped submitting then, drained and ended the cycle.
    pub device_lost: Option<String>,
    /// The flush that closes a graceful cycle failed: what the cycle wrote is not known
    /// durable.
    pub final_flush_failed: bool,
    /// When a graceful cycle's writes had all come back, before its closing flush (from the
    /// start of the cycle); `None` for a cut cycle.
    pub drained_at: Option<Duration>,
    /// The deallocates and Write Zeroes among `completed` (their bytes are in
    /// `bytes_written` too, as fio counts trimmed bytes).
    pub zeroing: ZeroingDone,
}

/// Deallocates, Write Zeroes and formats the device acknowledged, and the bytes the first two
/// covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZeroingDone {
    pub deallocates: u64,
    pub deallocated_bytes: u64,
    pub write_zeroes: u64,
    pub zeroed_bytes: u64,
    /// Formats of the namespace completed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub formats: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ZeroingDone {
    /// No deallocate and no Write Zeroes (a workload of writes only).
    pub fn is_empty(&self) -> bool {
        *self == ZeroingDone::default()
    }

    /// Counts one acknowledged operation of `kind` over `len` bytes.
    pub fn count(&mut self, kind: faultline_drivers::Zeroing, len: u64) {
        match kind {
            faultline_drivers::Zeroing::Deallocate => {
                self.deallocates += 1;
                self.deallocated_bytes += len;
            }
            faultline_drivers::Zeroing::WriteZeroes => {
                self.write_zeroes += 1;
                self.zeroed_bytes += len;
            }
            faultline_drivers::Zeroing::Format => self.formats += 1,
        }
    }

    /// Adds another tally (another cycle, another port) to this one.
    pub fn add(&mut self, o: &ZeroingDone) {
        self.deallocates += o.deallocates;
        self.deallocated_bytes += o.deallocated_bytes;
        self.write_zeroes += o.write_zeroes;
        self.zeroed_bytes += o.zeroed_bytes;
        self.formats += o.formats;
    }
}
