//! The agent protocol's frames (docs/PROTOCOL.md): a 4-byte big-endian length, then that many
//! bytes of one JSON object, a [`Frame`]. Lengths are bounded ([`MAX_FRAME`]) before anything
//! is read into memory; every frame after the handshake carries the run's nonce and a sequence
//! number; operations are typed ([`Op`]): no shell string and no file path from the wire is
//! run or read.

use crate::ledger::{Record, RunHeader};
use crate::port::PortId;
pub use crate::reset::LinkReset;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The protocol versions this build speaks, newest last. Version 2 added a port's
/// operations (open, cycle) and the frames a cycle streams; version 3 a cycle's write
/// completions (`samples`), which a dual-port run's windows need; version 4 the link resets
/// an agent runs on its own host (`resets` in an open, `reset` in a cycle and its report);
/// version 5 a host's clean shutdown (the `shutdown` cut placement) and the prefill; version 6
/// the share a `history` and a `verify` are of (another host's share, verified through this
/// host's port) and a performance run's read load (`read_load`).
/// Older versions are no longer spoken: a peer offering only those is refused, naming both
/// sides' versions.
#[path = "proto_cycle.rs"]
mod cycle;
pub use cycle::{CycleRequest, CycleSummary, ResetReport, ResetRequest};

pub const VERSIONS: &[u32] = &[6];

/// The largest frame either side accepts, in bytes (the length prefix excluded).
pub const MAX_FRAME: u32 = 1 << 20;

/// A run's nonce: 128 bits the coordinator draws for the run, in hex; an agent refuses every
/// frame that carries another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Nonce(pub String);

impl Nonce {
    /// From two random words (the binary draws them: the library reads no OS randomness).
    pub fn from_words(a: u64, b: u64) -> Nonce {
        Nonce(format!("{a:016x}{b:016x}"))
    }
}

impl std::fmt::Display for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "frame", rename_all = "snake_case", deny_unknown_fields)]
pub enum Frame {
    /// Coordinator to agent, first: the versions it speaks, the run, who it is.
    Hello { versions: Vec<u32>, run: Nonce, coordinator: String },
    /// Agent to coordinator: the version chosen, and what the agent is.
    Welcome { version: u32, agent: AgentInfo },
    /// Either side, last: why it will not go on. A refused version names both sides'.
    Refused { why: String, ours: Vec<u32>, theirs: Vec<u32> },
    /// Coordinator to agent: one operation.
    Request { run: Nonce, seq: u64, op: Op },
    /// Agent to coordinator: the answer to request `seq`.
    Reply { run: Nonce, seq: u64, result: Answer },
    /// Agent to coordinator, while request `seq` (a cycle) runs: ledger records in the order
    /// the agent's writer appended them, numbered from `first` up, with no gap across frames.
    Records { run: Nonce, seq: u64, first: u64, records: Vec<Record> },
    /// Agent to coordinator, while a cycle runs: its writer reached the cut placement, with
    /// the queue full, and waits for `cut_done`.
    CutDue { run: Nonce, seq: u64 },
    /// Agent to coordinator, while a cycle runs: its writer waits until the records numbered
    /// below `upto` are durable (the coordinator writes what it holds, syncs, and says so).
    Sync { run: Nonce, seq: u64, upto: u64 },
    /// Coordinator to agent, while a cycle runs: the records numbered below `upto` are durable
    /// in the coordinator's ledger (the agent submits no id a reservation below it does not
    /// cover).
    Durable { run: Nonce, seq: u64, upto: u64 },
    /// Coordinator to agent, while a cycle runs: the cut ran; `failed` says why it is not
    /// confirmed.
    CutDone { run: Nonce, seq: u64, failed: Option<String> },
    /// Coordinator to agent, while a cycle runs: end it gracefully now (drain, flush, record).
    Stop { run: Nonce, seq: u64 },
    /// Agent to coordinator, while a cycle whose request asked for them runs: the write
    /// completions since the last such frame, each `[t_ns, latency_ns, bytes, ok]` with `t_ns`
    /// on the agent's monotonic clock (the coordinator maps it onto its own with the clock
    /// offset), sent before each record frame, so at least every stream interval.
    Samples { run: Nonce, seq: u64, samples: Vec<crate::writer::WireSample> },
    /// Agent to coordinator, while a verify runs: one bounded part of what it found.
    Verified { run: Nonce, seq: u64, part: VerifiedPart },
}

/// One part of a verify's answer (at most [`PART_ITEMS`](super::parts::PART_ITEMS) items).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "part", content = "items", rename_all = "snake_case", deny_unknown_fields)]
pub enum VerifiedPart {
    Findings(Vec<crate::verify::Finding>),
    /// Sectors `[start, end)` showing an uncertain write of the last cycle: `[id, start, end]`.
    Seen(Vec<[u64; 3]>),
    Digests(Vec<DigestWire>),
    /// Sector hashes in hex, in order (`null`: the sector did not read).
    Hashes(Vec<Option<String>>),
    /// A read load's completions: `[monotonic ns at completion, latency ns, bytes, ok]`.
    Samples(Vec<[u64; 4]>),
}

/// A digest of what a verify read (`crate::verify::Digest`), its hash in hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestWire {
    pub start: u64,
    pub end: u64,
    pub hash: String,
    pub unreadable: bool,
}

/// A verify's counts, and how many items of each kind its parts carried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyCounts {
    pub sectors: u64,
    pub bytes: u64,
    pub durable_ok: u64,
    pub newer_ok: u64,
    pub prior_ok: u64,
    pub findings: u64,
    pub seen: u64,
    /// `None`: no digests were asked for.
    pub digests: Option<u64>,
}

/// What an agent says of itself in its welcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInfo {
    /// `faultline X.Y.Z`.
    pub software: String,
    pub host: String,
    pub pid: u32,
    /// Whether the agent was started with `--allow-exec` (an `exec:` fault on its host runs
    /// only then).
    pub allow_exec: bool,
}

/// The operations an agent serves. Typed: nothing here is a command line or a path to read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// The agent's monotonic clock now, for the clock offset.
    Clock {},
    /// Ends the session: the agent answers, then exits.
    Bye {},
    /// Opens one of the targets the agent was started with (`--target`, on its own command
    /// line): `target` must be one of them, character for character; the wire never names a
    /// device the agent's host did not list. The same guards as `faultline write`: refused
    /// when mounted, in use or carrying a signature (unless the run has begun), or when its
    /// identity is not `identity`.
    Open {
        target: String,
        /// The identity the run is bound to (its header's), once the run has begun.
        identity: Option<String>,
        /// What the scenario pins the device to (serial, WWID, model, size): every field given
        /// must match what the agent's host reports.
        #[serde(default)]
        expect: Expect,
        queue_depth: u32,
        /// The link resets the run will ask of this host (its `host_link_reset` faults): the
        /// agent finds the NVMe controller or PCI function behind the target and refuses the
        /// open when it cannot do one of them there.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        resets: Vec<LinkReset>,
    },
    /// Runs one cycle's workload on the open target, streaming its ledger records.
    Cycle(Box<CycleRequest>),
    /// The coordinator's ledger records numbered from `first` (0: the run's header), for the
    /// agent's copy of the history of `share` (the share port `share` writes: this host's own,
    /// or another host's, verified through this host's port), which it verifies against.
    History {
        first: u64,
        records: Vec<Record>,
        #[serde(default)]
        share: PortId,
    },
    /// Verifies `regions` (`[start, end)`, sorted, disjoint) of `share` on the open target
    /// against the agent's copy of that share's history; digests of what it read when
    /// `digest`.
    Verify {
        regions: Vec<[u64; 2]>,
        digest: bool,
        #[serde(default)]
        share: PortId,
    },
    /// Whether the open target answers a read of one sector at byte `at` (within 2 s).
    Probe { at: u64 },
    /// Waits, at most `timeout_ms`, until the target answers a read at `at`, opening it again
    /// (held to the identity it was opened with) if it went away or was released.
    WaitReady { at: u64, timeout_ms: u64 },
    /// Lets go of the target (before its power returns: a real device comes back as a new one).
    Release {},
    /// The BLAKE3 hash of every `sector`-byte sector of `ranges` (sector-aligned, in order) as
    /// the target reads it, streamed in `hashes` parts (a sector that fails to read: `null`).
    SectorHashes { ranges: Vec<[u64; 2]>, sector: u64 },
    /// The target's health logs (NVMe SMART / health, and OCP's extended log where the drive
    /// has it), as raw pages in hex, which the coordinator parses.
    Health {},
    /// A performance run's read load: sequential reads of at most 128 KiB, one in flight, over
    /// `span` (`[start, end)`, block-aligned) of the open target for `run_ms`, each read's
    /// completion sent back in `samples` parts once the load ends, then how many.
    ReadLoad { span: [u64; 2], run_ms: u64 },
    /// Writes port `port`'s share of the run (`header`'s workload span) with its prefill
    /// pattern on the open target and flushes (version 5). Nothing is streamed: the
    /// coordinator records the prefill once the answer says it is on the drive.
    Prefill { header: Box<RunHeader>, port: PortId },
}

/// The identity a scenario pins a device to (`faultline_drivers::blockdev::Expectation`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
}

impl From<&faultline_drivers::blockdev::Expectation> for Expect {
    fn from(e: &faultline_drivers::blockdev::Expectation) -> Self {
        Expect { serial: e.serial.clone(), wwid: e.wwid.clone(), model: e.model.clone(), size_bytes: e.size_bytes }
    }
}

impl From<&Expect> for faultline_drivers::blockdev::Expectation {
    fn from(e: &Expect) -> Self {
        faultline_drivers::blockdev::Expectation {
            serial: e.serial.clone(),
            wwid: e.wwid.clone(),
            model: e.model.clone(),
            size_bytes: e.size_bytes,
            backing_file: None,
        }
    }
}

impl TargetInfo {
    /// The device's facts, as a local device gives them (`crate::run::DeviceFacts::of`).
    pub fn facts(&self) -> crate::run::DeviceFacts {
        crate::run::DeviceFacts {
            identity: self.identity.clone(),
            capacity_bytes: self.capacity_bytes,
            logical_block_bytes: self.logical_block_bytes,
            physical_block_bytes: self.physical_block_bytes,
            zeroing: self.zeroing,
        }
    }
}

/// A target as an agent opened it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetInfo {
    pub identity: String,
    pub capacity_bytes: u64,
    pub logical_block_bytes: u64,
    pub physical_block_bytes: u64,
    pub engine: String,
    /// The deallocate and Write Zeroes the target carries (absent: none).
    #[serde(default, skip_serializing_if = "crate::run::ZeroingFacts::none")]
    pub zeroing: crate::run::ZeroingFacts,
}

/// An operation's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    /// `CLOCK_MONOTONIC` on the agent's host, in ns.
    Clock {
        monotonic_ns: u64,
    },
    Bye {},
    Opened {
        target: TargetInfo,
    },
    /// The cycle ended (its records were all streamed before this answer).
    CycleDone {
        summary: Box<CycleSummary>,
    },
    /// The agent's copy of the history holds this many records.
    HistoryAt {
        records: u64,
    },
    /// The verify ended (its parts were all sent before this answer).
    Verified {
        counts: VerifyCounts,
    },
    /// A probe's outcome: `error` names why the read failed.
    Probed {
        error: Option<String>,
    },
    /// The target answers: how long finding and opening it again took (`None`: it stayed
    /// open), and its first read.
    Ready {
        enumerate_ns: Option<u64>,
        first_read_ns: u64,
    },
    Released {},
    /// How many hashes the `hashes` parts carried.
    Hashed {
        count: u64,
    },
    /// How many completions the `samples` parts of a read load carried.
    ReadLoaded {
        count: u64,
    },
    /// The health pages, hex; `none`: why the target has none (not NVMe, an NBD export).
    Health {
        smart: Option<String>,
        ocp: Option<String>,
        none: Option<String>,
    },
    /// The prefill of this span is written and flushed.
    Prefilled {
        span_start: u64,
        span_end: u64,
    },
    /// The operation failed; the session goes on.
    Failed {
        why: String,
    },
}

impl Frame {
    /// The frame's name on the wire, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "hello",
            Frame::Welcome { .. } => "welcome",
            Frame::Refused { .. } => "refused",
            Frame::Request { .. } => "request",
            Frame::Reply { .. } => "reply",
            Frame::Records { .. } => "records",
            Frame::CutDue { .. } => "cut_due",
            Frame::Sync { .. } => "sync",
            Frame::Durable { .. } => "durable",
            Frame::CutDone { .. } => "cut_done",
            Frame::Stop { .. } => "stop",
            Frame::Verified { .. } => "verified",
            Frame::Samples { .. } => "samples",
        }
    }

    /// The nonce a frame carries, for a peer's log.
    pub fn run(&self) -> Option<&Nonce> {
        match self {
            Frame::Hello { run, .. }
            | Frame::Request { run, .. }
            | Frame::Reply { run, .. }
            | Frame::Records { run, .. }
            | Frame::CutDue { run, .. }
            | Frame::Sync { run, .. }
            | Frame::Durable { run, .. }
            | Frame::CutDone { run, .. }
            | Frame::Stop { run, .. }
            | Frame::Verified { run, .. }
            | Frame::Samples { run, .. } => Some(run),
            _ => None,
        }
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream ended between frames.
    #[error("the peer closed the connection")]
    Closed,
    #[error("reading a frame: {0}")]
    Io(#[from] io::Error),
    #[error("a frame of {len} bytes: at most {MAX_FRAME} are taken")]
    TooBig { len: u32 },
    #[error("an empty frame")]
    Empty,
    #[error("a frame that is not one the protocol knows ({why}): {head}")]
    Malformed { why: String, head: String },
    /// A request whose envelope (run, number) reads, but whose operation does not: an
    /// unknown operation or field, a value out of its type's range, a run header the format
    /// cannot use. The agent answers it `failed`, saying why, and the session goes on.
    #[error("request {seq}: the operation is not one this agent runs: {why}")]
    BadOp { run: Nonce, seq: u64, why: String },
}

/// A request's envelope, read when the whole frame does not read.
#[derive(Deserialize)]
struct RequestEnvelope {
    frame: String,
    run: Nonce,
    seq: u64,
    #[expect(dead_code, reason = "required, never read: an envelope without an op is not a request")]
    op: serde::de::IgnoredAny,
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, f: &Frame) -> io::Result<()> {
    let body = serde_json::to_vec(f).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).ok().filter(|l| *l <= MAX_FRAME).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("a frame of {} bytes: at most {MAX_FRAME} are sent", body.len()))
    })?;
    let mut b = Vec::with_capacity(4 + body.len());
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(&body);
    w.write_all(&b)?;
    w.flush()
}

/// Reads one frame, refusing one longer than [`MAX_FRAME`] before reading its body.
pub fn read_frame(r: &mut impl Read) -> Result<Frame, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Err(FrameError::Closed),
            Ok(0) => return Err(FrameError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "the stream ended inside a frame's length"))),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(FrameError::TooBig { len });
    }
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    parse(&body)
}

/// Parses a frame's body.
pub fn parse(body: &[u8]) -> Result<Frame, FrameError> {
    serde_json::from_slice(body).map_err(|e| {
        if let Ok(env) = serde_json::from_slice::<RequestEnvelope>(body) {
            if env.frame == "request" {
                return FrameError::BadOp { run: env.run, seq: env.seq, why: e.to_string() };
            }
        }
        let head = String::from_utf8_lossy(&body[..body.len().min(120)]).escape_debug().to_string();
        FrameError::Malformed { why: e.to_string(), head }
    })
}

/// The version both sides speak, if any: the newest of `theirs` that is one of ours.
pub fn choose(theirs: &[u32]) -> Option<u32> {
    VERSIONS.iter().rev().find(|v| theirs.contains(v)).copied()
}

#[cfg(test)]
#[path = "proto_tests.rs"]
pub(crate) mod tests;
