//! The ledger: an append-only, checksummed record of what happened in a run.
//!
//! It lives in the run directory, never on the target. Records are JSON payloads in frames
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `FLR1` |
//! | 4..8 | payload length, u32 LE |
//! | 8..16 | sequence number, u64 LE, from 0, no gaps |
//! | 16..24 | first 8 bytes of BLAKE3(sequence LE ++ payload) |
//! | 24.. | payload (one JSON object) |
//!
//! A frame that does not check out at the end of the file is a torn tail (the harness host
//! lost power mid-append): it is dropped and reported. A bad frame followed by any good one
//! is corruption in the middle, and replay refuses with the byte offset.
//!
//! Growth per cycle is bounded by queue depth and failures, not by writes: the workload is a
//! pure function of the write id, so the ledger records only watermarks (the durable prefix
//! of ids), the exceptions above them (durable ids past the prefix, failed ids) and the bound
//! of ids that may have been submitted. Flushes leave no record of their own: their effect
//! is in the next checkpoint and the cycle end. Reservations grow geometrically, so a cycle
//! of N writes appends O(log N) of them. A writer thread group-commits appended records with
//! one write and one fdatasync per batch, so appending never waits on the disk.
//!
//! Modules, each depending only on those before it and on this one: [`frame`] (the framing
//! above: torn tail dropped, damage in the middle refused), [`history`] (what the records
//! say: per-cycle watermarks, the one `apply` that replay and the writer share), [`file`](mod@file)
//! (the writer thread: group commit and sync).

mod dealloc;
pub mod file;
pub mod frame;
pub mod history;
pub mod pins;

pub use dealloc::DeallocRead;
pub use file::LedgerWriter;
pub use frame::FrameError;
pub use frame::{parse_ledger, stream_ledger, ParsedLedger};
pub use history::{replay, CycleState, History, HistoryError, IdRuns};
pub use pins::{Pin, PinAt, PinIndex};

use crate::port::{PortEntry, PortId};
use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub use crate::run_dir::LEDGER_FILE;
pub const LEDGER_FORMAT: u32 = 1;

/// The durability promise under test (docs/DOMAIN.md section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Contract {
    /// A write survives once it completed.
    Plp,
    /// A write survives once a flush submitted after its completion completed, or it was FUA.
    Flush,
}

/// A contract name that is neither `plp` nor `flush`.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown contract {name:?}: expected plp or flush")]
pub struct UnknownContract {
    pub name: String,
}

impl std::str::FromStr for Contract {
    type Err = UnknownContract;
    fn from_str(s: &str) -> Result<Self, UnknownContract> {
        match s {
            "plp" => Ok(Contract::Plp),
            "flush" => Ok(Contract::Flush),
            other => Err(UnknownContract { name: other.to_string() }),
        }
    }
}

/// The contract's name as scenarios, flags and reports spell it (`plp`, `flush`); the inverse
/// of its `FromStr`. Width and alignment apply (`{:<8}`).
impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Contract::Plp => "plp",
            Contract::Flush => "flush",
        })
    }
}

/// The first record of every ledger: what the run is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawHeader")]
pub struct RunHeader {
    pub ledger_format: u32,
    pub run_id: u64,
    pub created_at: String,
    pub target_identity: String,
    pub target_capacity: u64,
    pub sector_bytes: u64,
    /// Atomic write unit the drive claims (writes are all-or-nothing inside each aligned unit).
    pub atomic_bytes: u64,
    /// What a deallocated sector must read (absent: unreported).
    #[serde(default, skip_serializing_if = "DeallocRead::is_unreported")]
    pub dealloc_reads: DeallocRead,
    pub contract: Contract,
    /// The ports of the device under test, each with the id its sectors carry (one, `A`,
    /// until dual-port runs).
    pub ports: Vec<PortEntry>,
    pub workload: WorkloadSpec,
}

/// The target a run is bound to, as its header records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFacts {
    pub identity: String,
    pub capacity: u64,
    pub sector_bytes: u64,
    /// The atomic write unit the drive is held to (one sector unless declared).
    pub atomic_bytes: u64,
    /// What a deallocated sector must read.
    pub dealloc_reads: DeallocRead,
}

impl TargetFacts {
    /// What a target says of itself: its identity, capacity and logical sector (512 bytes at
    /// least); its atomic unit one sector.
    pub fn of(target: &dyn faultline_drivers::BlockTarget) -> TargetFacts {
        let g = target.geometry();
        let sector = (g.logical_block_bytes as u64).max(512);
        TargetFacts {
            identity: target.identity(),
            capacity: g.capacity_bytes,
            sector_bytes: sector,
            atomic_bytes: sector,
            dealloc_reads: target.zeroing().dealloc_reads.into(),
        }
    }
}

impl RunHeader {
    /// The header of a new run in the current ledger format.
    pub fn new(
        run_id: u64,
        created_at: String,
        target: TargetFacts,
        contract: Contract,
        ports: Vec<PortEntry>,
        workload: WorkloadSpec,
    ) -> RunHeader {
        let TargetFacts { identity, capacity, sector_bytes, atomic_bytes, dealloc_reads } = target;
        RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id,
            created_at,
            target_identity: identity,
            target_capacity: capacity,
            sector_bytes,
            atomic_bytes,
            dealloc_reads,
            contract,
            ports,
            workload,
        }
    }

    /// The port that writes the prefill and, in a single-port run, everything.
    pub fn first_port(&self) -> PortId {
        self.ports.first().map_or(PortId::A, |p| p.id)
    }
}

/// A run header as read: ledgers written before the port table carry one `port` number.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    ledger_format: u32,
    run_id: u64,
    created_at: String,
    target_identity: String,
    target_capacity: u64,
    sector_bytes: u64,
    atomic_bytes: u64,
    #[serde(default)]
    dealloc_reads: DeallocRead,
    contract: Contract,
    #[serde(default)]
    ports: Option<Vec<PortEntry>>,
    #[serde(default)]
    port: Option<u8>,
    workload: WorkloadSpec,
}

/// A run header that cannot be read: why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the run header's {0}")]
pub struct BadHeader(pub String);

/// A header is read only with a sector size the format can use (a ledger's or a peer's header
/// with another is refused where it is read, naming the field).
impl TryFrom<RawHeader> for RunHeader {
    type Error = BadHeader;
    fn try_from(r: RawHeader) -> Result<RunHeader, BadHeader> {
        if let Some(why) = crate::format::bad_sector_size(r.sector_bytes) {
            return Err(BadHeader(why));
        }
        let ports = r.ports.unwrap_or_else(|| {
            let id = PortId(r.port.unwrap_or(0));
            vec![PortEntry { id, name: id.default_name() }]
        });
        Ok(RunHeader {
            ledger_format: r.ledger_format,
            run_id: r.run_id,
            created_at: r.created_at,
            target_identity: r.target_identity,
            target_capacity: r.target_capacity,
            sector_bytes: r.sector_bytes,
            atomic_bytes: r.atomic_bytes,
            dealloc_reads: r.dealloc_reads,
            contract: r.contract,
            ports,
            workload: r.workload,
        })
    }
}

/// How a cycle ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndKind {
    /// The writer stopped, drained and flushed: everything it wrote is durable.
    Graceful,
    /// Power was cut (or the link reset) with I/O in flight.
    Cut,
    /// The harness died mid-cycle; the state is the last checkpoint, the bound the last
    /// reservation. Recorded by the next writer that opens the run.
    Interrupted,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Record {
    RunStart(RunHeader),
    /// The whole span was written once with prefill sectors and flushed.
    PrefillDone {
        span_start: u64,
        span_end: u64,
    },
    CycleStart {
        cycle: u32,
        first_id: u64,
        at: String,
        /// The port the cycle's writes go through (absent before ports were recorded: `A`).
        #[serde(default)]
        port: PortId,
    },
    /// Ids below `upto` may be submitted from now on (appended before they are).
    Reserve {
        cycle: u32,
        upto: u64,
    },
    /// Durable state so far in the cycle (for recovery after the harness dies).
    Checkpoint {
        cycle: u32,
        durable_prefix: u64,
        durable_extras: Vec<u64>,
        failed: Vec<u64>,
    },
    WriteFailed {
        cycle: u32,
        id: u64,
        errno: i32,
        detail: String,
    },
    CycleEnd {
        cycle: u32,
        end: EndKind,
        /// Ids in [first_id, submitted_end) were (or may have been) submitted.
        submitted_end: u64,
        /// Ids in [first_id, durable_prefix) are durable, except `failed`.
        durable_prefix: u64,
        /// Durable ids at or above the prefix.
        durable_extras: Vec<u64>,
        failed: Vec<u64>,
        in_flight_at_end: u32,
        bytes_at_risk: u64,
    },
    /// Id `id` of the cycle is a Format NVM of the namespace (the span is all of it), not the
    /// workload's write of that id: appended, and durable, before the command is sent. It is
    /// durable by the ledger's watermarks as a FUA write is (complete means formatted), and
    /// every id below it was submitted before it (docs/DOMAIN.md, "Format NVM under a cut").
    Format {
        cycle: u32,
        id: u64,
    },
    /// A format sent after `cycle` ended, before its verify, because the drive refused reads
    /// after the cycle's format was cut short: id `id` (the cycle's submitted end), appended
    /// before it is sent (`done` false), then again once the drive completed it (`done`).
    Reformat {
        cycle: u32,
        id: u64,
        done: bool,
    },
    /// What the verify after `cycle`'s cut saw of the cycle's writes that the contract left
    /// uncertain (in flight, failed, or completed and unflushed): from now on the drive must
    /// keep showing what it showed (see `crate::verify`). Absent from ledgers written before it.
    Seen {
        cycle: u32,
        writes: SeenWrites,
    },
}

impl Record {
    /// Whether the record promises something of the drive's contents (what is durable, what
    /// a write left, what a verify saw): every record but the run's start, a cycle's start and
    /// a reservation of ids.
    pub fn promises(&self) -> bool {
        !matches!(self, Record::RunStart(_) | Record::CycleStart { .. } | Record::Reserve { .. })
    }
}

/// At most this many writes in one `seen` record: the verifier resolves the newest this many
/// uncertain writes of a cycle (a cycle under the flush contract with no flush before its cut
/// leaves every write uncertain, and the record must stay bounded).
pub const MAX_SEEN_WRITES: u64 = 1 << 16;

/// The writes of a [`Record::Seen`], in id order. Stored packed: ids seen fully or not at all
/// as `[first, end)` ranges (uncertain writes come in runs of consecutive ids), those seen
/// partly one by one with their sectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "PackedSeen", try_from = "PackedSeen")]
pub struct SeenWrites(pub Vec<SeenWrite>);

impl std::ops::Deref for SeenWrites {
    type Target = Vec<SeenWrite>;
    fn deref(&self) -> &Vec<SeenWrite> {
        &self.0
    }
}

impl From<Vec<SeenWrite>> for SeenWrites {
    fn from(v: Vec<SeenWrite>) -> Self {
        SeenWrites(v)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PackedSeen {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fully: Vec<[u64; 2]>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    partly: Vec<PartlySeen>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    not_at_all: Vec<[u64; 2]>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartlySeen {
    id: u64,
    sectors: Vec<[u32; 2]>,
}

impl From<SeenWrites> for PackedSeen {
    fn from(w: SeenWrites) -> PackedSeen {
        let ranges = |applied: Applied| {
            let mut ids: Vec<u64> = w.iter().filter(|x| x.applied == applied).map(|x| x.id).collect();
            ids.sort_unstable();
            let mut out: Vec<[u64; 2]> = Vec::new();
            for id in ids {
                match out.last_mut() {
                    Some(r) if r[1] == id => r[1] += 1,
                    _ => out.push([id, id + 1]),
                }
            }
            out
        };
        let partly =
            w.iter().filter(|x| x.applied == Applied::Partly).map(|x| PartlySeen { id: x.id, sectors: x.sectors.clone() }).collect();
        PackedSeen { fully: ranges(Applied::Fully), partly, not_at_all: ranges(Applied::NotAtAll) }
    }
}

/// Why a `seen` record's packed writes do not unpack.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SeenWritesError {
    #[error("seen: empty id range {range:?}")]
    EmptyRange { range: [u64; 2] },
    #[error("seen: {count} writes, more than the {MAX_SEEN_WRITES} a record may hold")]
    TooMany { count: u64 },
}

impl TryFrom<PackedSeen> for SeenWrites {
    type Error = SeenWritesError;
    fn try_from(p: PackedSeen) -> Result<SeenWrites, SeenWritesError> {
        let mut n = p.partly.len() as u64;
        for r in p.fully.iter().chain(&p.not_at_all) {
            if r[0] >= r[1] {
                return Err(SeenWritesError::EmptyRange { range: *r });
            }
            n = n.saturating_add(r[1] - r[0]);
        }
        if n > MAX_SEEN_WRITES {
            return Err(SeenWritesError::TooMany { count: n });
        }
        let expand = |v: &[[u64; 2]], applied: Applied| -> Vec<SeenWrite> {
            v.iter().flat_map(|r| (r[0]..r[1]).map(move |id| SeenWrite { id, applied, sectors: vec![] })).collect()
        };
        let mut all = expand(&p.fully, Applied::Fully);
        all.extend(p.partly.into_iter().map(|x| SeenWrite { id: x.id, applied: Applied::Partly, sectors: x.sectors }));
        all.extend(expand(&p.not_at_all, Applied::NotAtAll));
        all.sort_by_key(|x| x.id);
        Ok(SeenWrites(all))
    }
}

/// How much of one uncertain write a verify saw applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applied {
    /// Every sector of the write was read and showed it.
    Fully,
    /// Some sectors showed it (`sectors`), others were older, newer or not read.
    Partly,
    /// Every sector read showed an older version; none showed it.
    NotAtAll,
}

/// One write of a [`Record::Seen`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeenWrite {
    pub id: u64,
    pub applied: Applied,
    /// `partly`: the sectors seen holding the write, as sorted, disjoint `[first, end)` runs of
    /// sector indices inside the write (0 is its first sector). Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sectors: Vec<[u32; 2]>,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("ledger {path}: record {index} at byte {offset} is damaged ({why}), and a valid record follows at byte {next}: the ledger is corrupted in the middle, not torn at the end; refusing to guess")]
    CorruptMiddle { path: PathBuf, index: u64, offset: u64, why: String, next: u64 },
    #[error("ledger {path}: record {index} at byte {offset}: {why}")]
    Invalid { path: PathBuf, index: u64, offset: u64, why: String },
    #[error("ledger {path} is empty: no run was started in this run directory")]
    Empty { path: PathBuf },
    #[error("ledger writer failed earlier: {0}")]
    WriterFailed(String),
    #[error("ledger {path}: record {index} not appended: what it promises could not be saved first: {source}")]
    NotSaved { path: PathBuf, index: u64, source: std::io::Error },
}

/// Where a run's records go: the file in the run directory today ([`LedgerWriter`]), a ledger
/// kept on another machine later. The writer (`crate::writer`) sees only this.
///
/// Records get sequence numbers from 0 with no gaps, in append order; a record is durable
/// once the implementation has it on stable storage, and durability is a watermark: once
/// `seq` is durable, every record before it is too. Every implementation checks a record
/// against its [`History`] (with [`History::apply`]) and refuses one that contradicts it,
/// before it is stored.
pub trait Ledger {
    /// Queues `rec` and returns its sequence number, without waiting for it to be durable.
    fn append(&mut self, rec: &Record) -> Result<u64, LedgerError>;

    /// True when record `seq` is durable. A query of the watermark known now, which never
    /// waits; a failure of the store shows in the other methods.
    fn is_durable(&self, seq: u64) -> bool;

    /// Waits until record `seq` is durable.
    fn wait_durable(&mut self, seq: u64) -> Result<(), LedgerError>;

    /// Waits until every record appended so far is durable.
    fn sync(&mut self) -> Result<(), LedgerError>;

    /// The run as the ledger records it so far, appended records included (what replaying it
    /// would give once they are durable).
    fn history(&self) -> &History;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn headers_written_before_the_port_table_read_as_one_port() {
        let mut v = serde_json::to_value(header()).unwrap();
        assert_eq!(v["ports"], serde_json::json!([{ "id": 0, "name": "A" }]));
        let o = v.as_object_mut().unwrap();
        o.remove("ports");
        o.insert("port".into(), 0.into());
        let old: RunHeader = serde_json::from_value(v).unwrap();
        assert_eq!(old, header(), "a format-1 header (`port: 0`) is the same run as one with the table");
        let both = serde_json::json!({ "port": 3 });
        let mut v = serde_json::to_value(header()).unwrap();
        v.as_object_mut().unwrap().insert("bogus".into(), both);
        assert!(serde_json::from_value::<RunHeader>(v).is_err(), "unknown keys are still refused");
    }

    #[test]
    fn contracts_display_as_scenario_files_and_serde_name_them() {
        for c in [Contract::Plp, Contract::Flush] {
            let shown = c.to_string();
            assert_eq!(shown.parse::<Contract>(), Ok(c));
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::Value::String(shown));
        }
        assert_eq!(format!("the drive broke its {} promise", Contract::Flush), "the drive broke its flush promise");
        assert_eq!(format!("[{:<6}]", Contract::Plp), "[plp   ]");
    }

    pub(crate) fn header() -> RunHeader {
        RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: 7,
            created_at: "now".into(),
            target_identity: "file:/x size=1".into(),
            target_capacity: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            dealloc_reads: Default::default(),
            contract: Contract::Plp,
            ports: crate::port::PortEntry::single(),
            workload: crate::workload::WorkloadSpec {
                seed: 1,
                pattern: crate::workload::Pattern::Random {},
                span_start: 0,
                span_end: 1 << 20,
                min_write_bytes: 4096,
                max_write_bytes: 4096,
                mean_write_bytes: 4096,
                align_bytes: 4096,
                queue_depth: 4,
                flush: Default::default(),
                ops: Default::default(),
            },
        }
    }

    pub(crate) fn sample_records() -> Vec<Record> {
        vec![
            Record::RunStart(header()),
            Record::CycleStart { cycle: 1, first_id: 1, at: "t".into(), port: crate::port::PortId::A },
            Record::Reserve { cycle: 1, upto: 100 },
            Record::Checkpoint { cycle: 1, durable_prefix: 40, durable_extras: vec![45, 42], failed: vec![3] },
            Record::CycleEnd {
                cycle: 1,
                end: EndKind::Cut,
                submitted_end: 60,
                durable_prefix: 50,
                durable_extras: vec![55],
                failed: vec![3, 51],
                in_flight_at_end: 4,
                bytes_at_risk: 16384,
            },
            Record::CycleStart { cycle: 2, first_id: 100, at: "t".into(), port: crate::port::PortId::A },
            Record::Reserve { cycle: 2, upto: 200 },
        ]
    }

    pub(crate) fn image(recs: &[Record]) -> Vec<u8> {
        recs.iter().enumerate().flat_map(|(i, r)| super::frame::frame(i as u64, &serde_json::to_vec(r).unwrap())).collect()
    }

    pub(crate) fn tempdir() -> PathBuf {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let d = std::env::temp_dir().join(format!(
            "faultline-ut-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn contract_displays_as_it_parses() {
        for c in [Contract::Plp, Contract::Flush] {
            assert_eq!(c.to_string().parse::<Contract>(), Ok(c));
            assert_eq!(c.to_string(), format!("{c:?}").to_lowercase());
        }
        assert_eq!((Contract::Plp.to_string(), Contract::Flush.to_string()), ("plp".into(), "flush".into()));
        assert_eq!(format!("[{:<6}]", Contract::Plp), "[plp   ]");
    }
}
