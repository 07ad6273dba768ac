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

use crate::workload::WorkloadSpec;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub const LEDGER_FILE: &str = "ledger.fl";
const FRAME_MAGIC: [u8; 4] = *b"FLR1";
const FRAME_HEADER: usize = 24;
/// Largest payload accepted on replay; a length past it marks a damaged frame.
const MAX_PAYLOAD: usize = 64 << 20;
pub const LEDGER_FORMAT: u32 = 1;

/// The durability promise under test (DOMAIN.md section 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Contract {
    /// A write survives once it completed.
    Plp,
    /// A write survives once a flush submitted after its completion completed, or it was FUA.
    Flush,
}

impl std::str::FromStr for Contract {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "plp" => Ok(Contract::Plp),
            "flush" => Ok(Contract::Flush),
            other => Err(format!("unknown contract {other:?}: expected plp or flush")),
        }
    }
}

/// The first record of every ledger: what the run is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunHeader {
    pub ledger_format: u32,
    pub run_id: u64,
    pub created_at: String,
    pub target_identity: String,
    pub target_capacity: u64,
    pub sector_bytes: u64,
    /// Atomic write unit the drive claims (writes are all-or-nothing inside each aligned unit).
    pub atomic_bytes: u64,
    pub contract: Contract,
    pub port: u8,
    pub workload: WorkloadSpec,
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
}

/// A cycle's durable state as replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleState {
    pub cycle: u32,
    pub first_id: u64,
    pub submitted_end: u64,
    pub durable_prefix: u64,
    pub durable_extras: Vec<u64>,
    pub failed: Vec<u64>,
    pub end: Option<EndKind>,
    pub in_flight_at_end: u32,
    pub bytes_at_risk: u64,
}

/// Everything the ledger says, replayed.
#[derive(Clone, Debug)]
pub struct History {
    pub header: RunHeader,
    pub prefill: Option<(u64, u64)>,
    pub cycles: Vec<CycleState>,
    pub records: u64,
    /// Bytes of a torn final frame that replay ignored.
    pub torn_tail_bytes: u64,
    /// Length of the valid part of the file.
    pub valid_bytes: u64,
}

impl History {
    /// The cycle whose submitted ids include `id`.
    pub fn cycle_of(&self, id: u64) -> Option<&CycleState> {
        let i = self.cycles.partition_point(|c| c.first_id <= id);
        let c = self.cycles.get(i.checked_sub(1)?)?;
        (id < c.submitted_end).then_some(c)
    }

    /// True when the contract made write `id` durable.
    pub fn is_durable(&self, id: u64) -> bool {
        match self.cycle_of(id) {
            Some(c) => (id < c.durable_prefix && c.failed.binary_search(&id).is_err()) || c.durable_extras.binary_search(&id).is_ok(),
            None => false,
        }
    }

    /// One past the highest id that may have been submitted.
    pub fn submitted_end(&self) -> u64 {
        self.cycles.last().map_or(1, |c| c.submitted_end)
    }

    /// The last cycle number (0 before the first cycle).
    pub fn last_cycle(&self) -> u32 {
        self.cycles.last().map_or(0, |c| c.cycle)
    }
}

fn frame(seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(FRAME_HEADER + payload.len());
    f.extend_from_slice(&FRAME_MAGIC);
    f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend_from_slice(&frame_check(seq, payload));
    f.extend_from_slice(payload);
    f
}

fn frame_check(seq: u64, payload: &[u8]) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    h.finalize().as_bytes()[..8].try_into().expect("8 bytes")
}

/// Parses the frame at `at`; `Err(why)` when it does not check out.
fn parse_frame(bytes: &[u8], at: usize) -> Result<(u64, &[u8]), String> {
    let rest = &bytes[at..];
    if rest.len() < FRAME_HEADER {
        return Err(format!("only {} bytes left, a frame header needs {FRAME_HEADER}", rest.len()));
    }
    if rest[..4] != FRAME_MAGIC {
        return Err("bad frame magic".into());
    }
    let len = u32::from_le_bytes(rest[4..8].try_into().expect("4")) as usize;
    if len > MAX_PAYLOAD {
        return Err(format!("payload length {len} is implausible"));
    }
    if rest.len() < FRAME_HEADER + len {
        return Err(format!("payload of {len} bytes runs past the end of the file"));
    }
    let seq = u64::from_le_bytes(rest[8..16].try_into().expect("8"));
    let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
    if rest[16..24] != frame_check(seq, payload) {
        return Err("checksum mismatch".into());
    }
    Ok((seq, payload))
}

/// A parsed ledger image: (records with their byte offsets, valid length, torn tail bytes).
pub type ParsedLedger = (Vec<(u64, Record)>, u64, u64);

/// Splits a ledger image into records.
pub fn parse_ledger(path: &Path, bytes: &[u8]) -> Result<ParsedLedger, LedgerError> {
    let mut at = 0usize;
    let mut out = Vec::new();
    while at < bytes.len() {
        let index = out.len() as u64;
        match parse_frame(bytes, at) {
            Ok((seq, payload)) => {
                let invalid = |why: String| LedgerError::Invalid { path: path.into(), index, offset: at as u64, why };
                if seq != index {
                    return Err(invalid(format!("sequence number {seq}, expected {index}")));
                }
                let rec: Record = serde_json::from_slice(payload).map_err(|e| invalid(format!("undecodable record: {e}")))?;
                out.push((at as u64, rec));
                at += FRAME_HEADER + payload.len();
            }
            Err(why) => {
                // Torn tail or damage in the middle? Any valid frame after this point says
                // the damage is not at the end.
                let next = (at + 1..bytes.len().saturating_sub(FRAME_HEADER - 1))
                    .find(|&p| bytes[p..p + 4] == FRAME_MAGIC && parse_frame(bytes, p).is_ok());
                if let Some(next) = next {
                    return Err(LedgerError::CorruptMiddle { path: path.into(), index, offset: at as u64, why, next: next as u64 });
                }
                return Ok((out, at as u64, (bytes.len() - at) as u64));
            }
        }
    }
    Ok((out, at as u64, 0))
}

/// Reads and replays the ledger of `run_dir`.
pub fn replay(run_dir: &Path) -> Result<History, LedgerError> {
    let path = run_dir.join(LEDGER_FILE);
    let bytes = std::fs::read(&path).map_err(|source| LedgerError::Io { path: path.clone(), source })?;
    let (records, valid_bytes, torn_tail_bytes) = parse_ledger(&path, &bytes)?;
    let mut h = build_history(&path, records)?;
    h.valid_bytes = valid_bytes;
    h.torn_tail_bytes = torn_tail_bytes;
    Ok(h)
}

fn build_history(path: &Path, records: Vec<(u64, Record)>) -> Result<History, LedgerError> {
    let n = records.len() as u64;
    let mut it = records.into_iter().enumerate();
    let header = match it.next() {
        Some((_, (_, Record::RunStart(h)))) => h,
        Some(_) => {
            return Err(LedgerError::Invalid { path: path.into(), index: 0, offset: 0, why: "first record is not run_start".into() })
        }
        None => return Err(LedgerError::Empty { path: path.into() }),
    };
    if header.ledger_format != LEDGER_FORMAT {
        return Err(LedgerError::Invalid {
            path: path.into(),
            index: 0,
            offset: 0,
            why: format!("ledger format {} (this build reads {LEDGER_FORMAT})", header.ledger_format),
        });
    }
    let mut h = History::new(header);
    for (i, (offset, rec)) in it {
        h.apply(rec).map_err(|why| LedgerError::Invalid { path: path.into(), index: i as u64, offset, why })?;
    }
    debug_assert_eq!(h.records, n);
    Ok(h)
}

impl History {
    /// The history of a run with no records but its header.
    pub fn new(header: RunHeader) -> Self {
        History { header, prefill: None, cycles: Vec::new(), records: 1, torn_tail_bytes: 0, valid_bytes: 0 }
    }

    /// Applies one record after the header; `Err` names what is inconsistent.
    pub fn apply(&mut self, rec: Record) -> Result<(), String> {
        let h = self;
        let open_cycle = |h: &mut History, cycle: u32| -> Result<usize, String> {
            match h.cycles.last() {
                Some(c) if c.cycle == cycle && c.end.is_none() => Ok(h.cycles.len() - 1),
                _ => Err(format!("record for cycle {cycle}, which is not open")),
            }
        };
        match rec {
            Record::RunStart(_) => return Err("a second run_start".into()),
            Record::PrefillDone { span_start, span_end } => {
                if !h.cycles.is_empty() {
                    return Err("prefill after writes began".into());
                }
                h.prefill = Some((span_start, span_end));
            }
            Record::CycleStart { cycle, first_id, .. } => {
                if let Some(prev) = h.cycles.last() {
                    if prev.end.is_none() || cycle != prev.cycle + 1 || first_id < prev.submitted_end {
                        return Err(format!(
                            "cycle {cycle} starting at id {first_id} does not follow cycle {} (ended: {}, ids below {})",
                            prev.cycle,
                            prev.end.is_some(),
                            prev.submitted_end
                        ));
                    }
                } else if cycle != 1 || first_id == 0 {
                    return Err(format!("first cycle is {cycle} starting at id {first_id}"));
                }
                h.cycles.push(CycleState {
                    cycle,
                    first_id,
                    submitted_end: first_id,
                    durable_prefix: first_id,
                    durable_extras: vec![],
                    failed: vec![],
                    end: None,
                    in_flight_at_end: 0,
                    bytes_at_risk: 0,
                });
            }
            Record::Reserve { cycle, upto } => {
                let c = open_cycle(h, cycle)?;
                let c = &mut h.cycles[c];
                c.submitted_end = c.submitted_end.max(upto);
            }
            Record::Checkpoint { cycle, durable_prefix, durable_extras, failed } => {
                let c = open_cycle(h, cycle)?;
                let c = &mut h.cycles[c];
                c.durable_prefix = durable_prefix.max(c.first_id);
                c.durable_extras = sorted(durable_extras);
                c.failed = sorted(failed);
            }
            Record::WriteFailed { cycle, .. } => {
                open_cycle(h, cycle)?;
            }
            Record::CycleEnd { cycle, end, submitted_end, durable_prefix, durable_extras, failed, in_flight_at_end, bytes_at_risk } => {
                let c = open_cycle(h, cycle)?;
                let c = &mut h.cycles[c];
                if submitted_end < c.first_id || durable_prefix > submitted_end {
                    return Err(format!(
                        "cycle {cycle} ends with durable prefix {durable_prefix} and submitted end {submitted_end}, first id {}",
                        c.first_id
                    ));
                }
                c.submitted_end = submitted_end;
                c.durable_prefix = durable_prefix.max(c.first_id);
                c.durable_extras = sorted(durable_extras);
                c.failed = sorted(failed);
                c.end = Some(end);
                c.in_flight_at_end = in_flight_at_end;
                c.bytes_at_risk = bytes_at_risk;
            }
        }
        h.records += 1;
        Ok(())
    }
}

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v.dedup();
    v
}

struct Shared {
    durable_seq: Mutex<(u64, Option<String>)>,
    cond: Condvar,
}

enum Msg {
    Frame(Vec<u8>, u64),
    Stop,
}

/// Appends records from a background thread with group commit.
pub struct LedgerWriter {
    path: PathBuf,
    tx: Sender<Msg>,
    next_seq: u64,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// What replaying the ledger would give, kept current on every append.
    history: History,
}

impl LedgerWriter {
    /// Creates a new ledger with its run header. Fails if one exists.
    pub fn create(run_dir: &Path, header: RunHeader) -> Result<Self, LedgerError> {
        let path = run_dir.join(LEDGER_FILE);
        let io = |source| LedgerError::Io { path: path.clone(), source };
        let file = OpenOptions::new().write(true).create_new(true).open(&path).map_err(io)?;
        // Make the new file's directory entry durable too.
        File::open(run_dir).and_then(|d| d.sync_all()).map_err(io)?;
        let mut w = Self::start(path, file, 0, History::new(header.clone()));
        w.send(&Record::RunStart(header))?;
        w.sync()?;
        Ok(w)
    }

    /// Opens an existing ledger for appending after `history` (from [`replay`]), cutting off
    /// a torn tail first.
    pub fn open(run_dir: &Path, history: &History) -> Result<Self, LedgerError> {
        let path = run_dir.join(LEDGER_FILE);
        let io = |source| LedgerError::Io { path: path.clone(), source };
        let file = OpenOptions::new().write(true).open(&path).map_err(io)?;
        file.set_len(history.valid_bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        let mut file = file;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0)).map_err(io)?;
        Ok(Self::start(path, file, history.records, history.clone()))
    }

    fn start(path: PathBuf, file: File, next_seq: u64, history: History) -> Self {
        let (tx, rx) = channel();
        let shared = Arc::new(Shared { durable_seq: Mutex::new((next_seq, None)), cond: Condvar::new() });
        let s2 = shared.clone();
        let p2 = path.clone();
        let thread =
            std::thread::Builder::new().name("ledger".into()).spawn(move || writer_thread(p2, file, rx, s2)).expect("spawn ledger thread");
        LedgerWriter { path, tx, next_seq, shared, thread: Some(thread), history }
    }

    /// The run as the ledger records it so far (appended records included).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Queues a record; returns its sequence number. Never waits for the disk. A record that
    /// contradicts the ledger (a harness bug) is refused before it is written.
    pub fn append(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        let index = self.next_seq;
        self.history.apply(rec.clone()).map_err(|why| LedgerError::Invalid {
            path: self.path.clone(),
            index,
            offset: 0,
            why: format!("refusing to append: {why}"),
        })?;
        self.send(rec)
    }

    fn send(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        self.check()?;
        let seq = self.next_seq;
        let payload = serde_json::to_vec(rec).expect("records serialise");
        self.next_seq += 1;
        if self.tx.send(Msg::Frame(frame(seq, &payload), seq)).is_err() {
            return Err(self.failure());
        }
        Ok(seq)
    }

    /// True when record `seq` is on stable storage.
    pub fn is_durable(&self, seq: u64) -> bool {
        self.shared.durable_seq.lock().expect("ledger lock").0 > seq
    }

    /// Waits until record `seq` is on stable storage.
    pub fn wait_durable(&self, seq: u64) -> Result<(), LedgerError> {
        let mut g = self.shared.durable_seq.lock().expect("ledger lock");
        while g.0 <= seq {
            if let Some(e) = &g.1 {
                return Err(LedgerError::WriterFailed(e.clone()));
            }
            g = self.shared.cond.wait(g).expect("ledger lock");
        }
        Ok(())
    }

    /// Waits until everything appended so far is on stable storage.
    pub fn sync(&mut self) -> Result<(), LedgerError> {
        match self.next_seq.checked_sub(1) {
            Some(last) => self.wait_durable(last),
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<(), LedgerError> {
        match &self.shared.durable_seq.lock().expect("ledger lock").1 {
            Some(e) => Err(LedgerError::WriterFailed(e.clone())),
            None => Ok(()),
        }
    }

    fn failure(&self) -> LedgerError {
        let g = self.shared.durable_seq.lock().expect("ledger lock");
        LedgerError::WriterFailed(g.1.clone().unwrap_or_else(|| format!("{}: writer thread gone", self.path.display())))
    }

    /// Flushes and stops the writer thread.
    pub fn close(mut self) -> Result<(), LedgerError> {
        self.sync()?;
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Ok(())
    }
}

impl Drop for LedgerWriter {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn writer_thread(path: PathBuf, mut file: File, rx: Receiver<Msg>, shared: Arc<Shared>) {
    let mut batch = Vec::new();
    loop {
        let mut last = None;
        let mut stop = false;
        match rx.recv() {
            Ok(Msg::Frame(f, seq)) => {
                batch.extend_from_slice(&f);
                last = Some(seq);
            }
            Ok(Msg::Stop) | Err(_) => stop = true,
        }
        // Group commit: take everything already queued into the same write and fdatasync.
        while let Ok(m) = rx.try_recv() {
            match m {
                Msg::Frame(f, seq) => {
                    batch.extend_from_slice(&f);
                    last = Some(seq);
                }
                Msg::Stop => stop = true,
            }
        }
        if let Some(seq) = last {
            let r = file.write_all(&batch).and_then(|_| file.sync_data());
            batch.clear();
            let mut g = shared.durable_seq.lock().expect("ledger lock");
            match r {
                Ok(()) => g.0 = seq + 1,
                Err(e) => {
                    g.1 = Some(format!("{}: appending failed: {e} (records up to sequence {} are safe)", path.display(), g.0));
                    shared.cond.notify_all();
                    return;
                }
            }
            shared.cond.notify_all();
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn header() -> RunHeader {
        RunHeader {
            ledger_format: LEDGER_FORMAT,
            run_id: 7,
            created_at: "now".into(),
            target_identity: "file:/x size=1".into(),
            target_capacity: 1 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            contract: Contract::Plp,
            port: 0,
            workload: crate::workload::WorkloadSpec {
                seed: 1,
                pattern: crate::workload::Pattern::Random,
                span_start: 0,
                span_end: 1 << 20,
                min_write_bytes: 4096,
                max_write_bytes: 4096,
                mean_write_bytes: 4096,
                align_bytes: 4096,
                queue_depth: 4,
                flush: Default::default(),
            },
        }
    }

    fn sample_records() -> Vec<Record> {
        vec![
            Record::RunStart(header()),
            Record::CycleStart { cycle: 1, first_id: 1, at: "t".into() },
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
            Record::CycleStart { cycle: 2, first_id: 100, at: "t".into() },
            Record::Reserve { cycle: 2, upto: 200 },
        ]
    }

    fn image(recs: &[Record]) -> Vec<u8> {
        recs.iter().enumerate().flat_map(|(i, r)| frame(i as u64, &serde_json::to_vec(r).unwrap())).collect()
    }

    #[test]
    fn replay_builds_durable_state() {
        let dir = tempdir();
        std::fs::write(dir.join(LEDGER_FILE), image(&sample_records())).unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!(h.cycles.len(), 2);
        assert!(h.is_durable(1) && h.is_durable(49) && !h.is_durable(3) && !h.is_durable(51) && h.is_durable(55) && !h.is_durable(56));
        assert!(h.cycle_of(60).is_none() && h.cycle_of(99).is_none());
        assert_eq!(h.cycle_of(150).unwrap().cycle, 2);
        assert_eq!(h.submitted_end(), 200);
        assert!(!h.is_durable(150), "an interrupted cycle has nothing durable past its first checkpoint");
    }

    #[test]
    fn torn_tail_is_dropped_at_every_cut_point() {
        let full = image(&sample_records());
        let first_frame = image(&sample_records()[..1]).len();
        let dir = tempdir();
        let whole = {
            std::fs::write(dir.join(LEDGER_FILE), &full).unwrap();
            replay(&dir).unwrap().records
        };
        for cut in 1..full.len() {
            std::fs::write(dir.join(LEDGER_FILE), &full[..cut]).unwrap();
            match replay(&dir) {
                Ok(h) => {
                    assert!(h.records < whole || cut == full.len());
                    assert_eq!(h.valid_bytes + h.torn_tail_bytes, cut as u64);
                }
                Err(LedgerError::Empty { .. }) => assert!(cut < first_frame),
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
    }

    #[test]
    fn damage_in_the_middle_is_refused_with_its_offset() {
        let mut img = image(&sample_records());
        img[200] ^= 0x40;
        let dir = tempdir();
        std::fs::write(dir.join(LEDGER_FILE), &img).unwrap();
        let e = replay(&dir).unwrap_err().to_string();
        assert!(e.contains("corrupted in the middle") && e.contains("record 0"), "{e}");
    }

    #[test]
    fn writer_appends_and_reopens_after_torn_tail() {
        let dir = tempdir();
        let mut w = LedgerWriter::create(&dir, header()).unwrap();
        w.append(&Record::CycleStart { cycle: 1, first_id: 1, at: "t".into() }).unwrap();
        let s = w.append(&Record::Reserve { cycle: 1, upto: 64 }).unwrap();
        w.wait_durable(s).unwrap();
        w.close().unwrap();
        let mut f = OpenOptions::new().append(true).open(dir.join(LEDGER_FILE)).unwrap();
        f.write_all(b"FLR1\x10\x00\x00").unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!((h.records, h.torn_tail_bytes), (3, 7));
        let mut w = LedgerWriter::open(&dir, &h).unwrap();
        w.append(&Record::Checkpoint { cycle: 1, durable_prefix: 9, durable_extras: vec![], failed: vec![] }).unwrap();
        w.close().unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!((h.records, h.torn_tail_bytes, h.cycles[0].durable_prefix), (4, 0, 9));
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

    proptest! {
        #[test]
        fn record_frames_round_trip(prefix in any::<u64>(), extras in proptest::collection::vec(any::<u64>(), 0..20), cycle in any::<u32>()) {
            let rec = Record::Checkpoint { cycle, durable_prefix: prefix, durable_extras: extras, failed: vec![1, 2] };
            let img = frame(0, &serde_json::to_vec(&rec).unwrap());
            let (recs, valid, torn) = parse_ledger(Path::new("x"), &img).unwrap();
            prop_assert_eq!(recs, vec![(0, rec)]);
            prop_assert_eq!((valid as usize, torn), (img.len(), 0));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_ledger(Path::new("x"), &bytes);
        }
    }
}
