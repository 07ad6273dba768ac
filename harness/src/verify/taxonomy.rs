//! The failure taxonomy: finding classes, what a sector showed, findings and the report.

use crate::format::{SectorId, FLAG_PREFILL, PREFILL_WRITE_ID};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Classes of finding (docs/DOMAIN.md section 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingClass {
    LostWrite,
    TornWrite,
    MisdirectedWrite,
    Corruption,
    UnexpectedVersion,
    Unreadable,
    DeadDevice,
    /// A sector shows an older version than one a verify of an earlier cycle saw there.
    StaleVersion,
    /// A port the fault did not hit was disturbed by it beyond a budget of the scenario (I/O
    /// errors, the longest completion gap, throughput or latency against the baseline before
    /// the fault): the detail names the port, the metric, the figure and the budget.
    PortDisturbance,
    /// A host whose power a `host_power_cut` cut did not answer again (its agent could not be
    /// dialled) within the readiness timeout: the drive must let both hosts boot and load it.
    /// The detail names the host, the port and what the last attempt said.
    DeadHost,
    /// Older data back where a deallocate was durable: the drive's mapping forgot the
    /// deallocate (or applied it elsewhere). Under an unreported DLFEAT the data last written
    /// before the deallocate is allowed; anything older is this.
    Resurrection,
}

impl FindingClass {
    pub const ALL: [FindingClass; 11] = [
        FindingClass::LostWrite,
        FindingClass::TornWrite,
        FindingClass::MisdirectedWrite,
        FindingClass::Corruption,
        FindingClass::UnexpectedVersion,
        FindingClass::Unreadable,
        FindingClass::DeadDevice,
        FindingClass::StaleVersion,
        FindingClass::PortDisturbance,
        FindingClass::DeadHost,
        FindingClass::Resurrection,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FindingClass::LostWrite => "lost_write",
            FindingClass::TornWrite => "torn_write",
            FindingClass::MisdirectedWrite => "misdirected_write",
            FindingClass::Corruption => "corruption",
            FindingClass::UnexpectedVersion => "unexpected_version",
            FindingClass::Unreadable => "unreadable",
            FindingClass::DeadDevice => "dead_device",
            FindingClass::StaleVersion => "stale_version",
            FindingClass::PortDisturbance => "port_disturbance",
            FindingClass::DeadHost => "dead_host",
            FindingClass::Resurrection => "resurrection",
        }
    }
}

/// The identity a sector should have had, or the one it had.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Shown {
    /// No write of this run; content from before the run.
    Prior {},
    /// The prefill pass's version of this sector.
    Prefill {},
    /// Sector `index` of write `write_id` (cycle `cycle`, port `port`).
    Write {
        write_id: u64,
        cycle: u32,
        port: u8,
        addr: u64,
        index: u32,
        count: u32,
    },
    /// Our format, but the checksum fails; fields as read.
    Damaged {
        write_id: u64,
        cycle: u32,
        addr: u64,
        run_id: u64,
    },
    /// A faultline sector of another run.
    ForeignRun {
        run_id: u64,
        write_id: u64,
    },
    Zeros {},
    /// All bytes FFh (what some drives read from a deallocated sector).
    Ones {},
    /// What deallocate or Write Zeroes `write_id` leaves (`op` names which): zeros, or for a
    /// deallocate what the run holds the drive to (`DeallocRead`).
    Zeroed {
        write_id: u64,
        op: String,
    },
    Unrecognized {},
    ReadError {
        errno: i32,
        detail: String,
    },
}

/// One finding: data, never an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub class: FindingClass,
    /// Byte offset on the target.
    pub offset: u64,
    /// Bytes affected.
    pub length: u64,
    /// What the contract required at `offset` (first sector of the range).
    pub expected: Shown,
    /// What was there (first sector of the range).
    pub found: Shown,
    /// Cycle in which the verification ran.
    pub cycle: u32,
    pub detail: String,
}

impl Finding {
    /// The finding for a device that did not come back (or went away while it was read).
    pub fn dead_device(cycle: u32, why: &str) -> Finding {
        Finding {
            class: FindingClass::DeadDevice,
            offset: 0,
            length: 0,
            expected: Shown::Prior {},
            found: Shown::Prior {},
            cycle,
            detail: why.to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("verify: region [{start}, {end}) is not inside the span [{span_start}, {span_end}) or not sector-aligned")]
    BadRegion { start: u64, end: u64, span_start: u64, span_end: u64 },
    #[error("verify: the target is gone: {0}")]
    DeviceGone(String),
    #[error("verify: {0}")]
    Inconsistent(String),
    #[error(
        "verify: the ledger lost records: the sector at byte {addr} is write {write_id} of cycle {cycle}, \
         a valid sector of this run (its keyed checksum proves faultline wrote it), but the ledger \
         reserved ids only below {submitted_end} (its last cycle is {last_cycle}). Ids are recorded \
         before they are written, so the ledger is behind what was written: was the run directory \
         restored from an older copy, or does its filesystem not honour fsync? This is the harness's \
         failure, not the drive's; nothing was concluded about the drive"
    )]
    LedgerBehind { addr: u64, write_id: u64, cycle: u32, submitted_end: u64, last_cycle: u32 },
}

/// Counts and findings of one verification pass.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VerifyReport {
    pub sectors: u64,
    pub bytes: u64,
    /// Sectors holding their durable version.
    pub durable_ok: u64,
    /// Sectors holding a newer, legitimately uncertain version.
    pub newer_ok: u64,
    /// Sectors with no durable expectation holding prior content.
    pub prior_ok: u64,
    pub findings: Vec<Finding>,
    /// Runs of sectors showing an uncertain write of the last cycle (in address order), for
    /// the `seen` record ([`super::seen_record`]); not part of any output.
    #[serde(skip)]
    pub seen: Vec<super::SeenRun>,
}

impl VerifyReport {
    /// Adds `other` (a report of another region) to this one.
    pub fn merge(&mut self, other: VerifyReport) {
        self.sectors += other.sectors;
        self.bytes += other.bytes;
        self.durable_ok += other.durable_ok;
        self.newer_ok += other.newer_ok;
        self.prior_ok += other.prior_ok;
        self.findings.extend(other.findings);
        self.seen.extend(other.seen);
    }

    /// Findings per class, every class present.
    pub fn summary(&self) -> BTreeMap<&'static str, u64> {
        let mut m: BTreeMap<&'static str, u64> = FindingClass::ALL.iter().map(|c| (c.name(), 0)).collect();
        for f in &self.findings {
            *m.get_mut(f.class.name()).expect("all classes") += 1;
        }
        m
    }
}

/// The identity of the prefill sector at `addr`.
pub fn prefill_id(run_id: u64, addr: u64, port: u8) -> SectorId {
    SectorId { run_id, addr, write_id: PREFILL_WRITE_ID, cycle: 0, port, flags: FLAG_PREFILL, index: 0, count: 1 }
}

pub(super) fn shown_valid(id: &SectorId) -> Shown {
    if id.write_id == PREFILL_WRITE_ID {
        return Shown::Prefill {};
    }
    Shown::Write { write_id: id.write_id, cycle: id.cycle, port: id.port, addr: id.addr, index: id.index, count: id.count }
}

/// Appends, merging with the previous finding when it is the same class, adjacent, and
/// about the same expected write.
pub(super) fn push(out: &mut Vec<Finding>, f: Finding) {
    if let Some(last) = out.last_mut() {
        let same_write = match (&last.expected, &f.expected) {
            (Shown::Write { write_id: a, .. }, Shown::Write { write_id: b, .. })
            | (Shown::Zeroed { write_id: a, .. }, Shown::Zeroed { write_id: b, .. }) => a == b,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        if last.class == f.class
            && last.offset + last.length == f.offset
            && same_write
            && std::mem::discriminant(&last.found) == std::mem::discriminant(&f.found)
        {
            last.length += f.length;
            return;
        }
    }
    out.push(f);
}
