//! Verify over the wire, the coordinator's side. The verifier needs the run's history (what
//! each id's cycle made durable, the pins of what earlier verifies saw), which lives in the
//! coordinator's ledger: [`Session::sync_history`] sends the agent its ledger's records (in
//! chunks, from where the agent's copy ends), which the agent replays
//! ([`Mirror`](crate::remote::agent::mirror::Mirror)). Then [`Session::verify`] has it read the
//! regions and takes back what it found in bounded parts, each held to what the regions can
//! give; sector hashes, the prefill and the health logs travel the same way.

use super::session::{DialError, Session};
use crate::health::{HealthLogs, HealthReadError};
use crate::ledger::LedgerError;
use crate::port::PortId;
use crate::remote::parts::unhex;
use crate::remote::proto::{Answer, Frame, Op, VerifiedPart};
use crate::verify::{Digest, SeenRun, VerifyReport};
use std::path::Path;
use std::time::Duration;

/// The most ledger bytes one `history` request carries.
const HISTORY_BYTES: usize = 256 << 10;

impl Session {
    /// Brings the agent's copy of `share`'s history up to the ledger file at `ledger_file`
    /// (the coordinator's, synced), sending only the records the agent lacks. Returns the
    /// records the agent holds.
    pub fn sync_history(&mut self, (share, ledger_file): (PortId, &Path), timeout: Duration) -> Result<u64, DialError> {
        let host = self.host.clone();
        let mut records = Vec::new();
        crate::ledger::stream_ledger(ledger_file, &mut |_, _, rec| {
            records.push(rec);
            Ok::<(), LedgerError>(())
        })
        .map_err(|e| DialError::Protocol { host: host.clone(), why: format!("the coordinator's ledger: {e}") })?;
        let mut at = self.history_sent.get(&share).copied().unwrap_or(0).min(records.len() as u64);
        while at < records.len() as u64 || at == 0 {
            let mut batch = Vec::new();
            let mut bytes = 0usize;
            for rec in &records[at as usize..] {
                bytes += serde_json::to_vec(rec).map_or(0, |v| v.len());
                if !batch.is_empty() && bytes > HISTORY_BYTES {
                    break;
                }
                batch.push(rec.clone());
            }
            let n = batch.len() as u64;
            match self.call(Op::History { first: at, records: batch, share }, timeout)? {
                Answer::HistoryAt { records } if records == at + n => at = records,
                Answer::HistoryAt { records } => {
                    return Err(self.protocol(format!("the agent holds {records} history records after {n} from {at}")))
                }
                Answer::Failed { why } => return Err(DialError::Protocol { host, why }),
                other => return Err(self.protocol(format!("{other:?} answered a history"))),
            }
            self.history_sent.insert(share, at);
            if n == 0 {
                break;
            }
        }
        Ok(at)
    }

    /// Sends `op` and hands each part of its answer to `part` (an `Err` is a protocol error,
    /// why), until the reply, which it returns.
    pub(crate) fn parted(
        &mut self,
        op: Op,
        name: &str,
        timeout: Duration,
        mut part: impl FnMut(VerifiedPart) -> Result<(), BadPart>,
    ) -> Result<Answer, DialError> {
        self.seq += 1;
        let seq = self.seq;
        self.send(&Frame::Request { run: self.run.clone(), seq, op })?;
        let what = format!("request {seq} ({name})");
        loop {
            match self.next(&what, timeout)? {
                Frame::Verified { run, seq: q, part: p } if run == self.run && q == seq => part(p).map_err(|why| self.protocol(why.0))?,
                Frame::Reply { run, seq: q, result } if run == self.run && q == seq => return Ok(result),
                Frame::Refused { why, ours, theirs } => return Err(DialError::Refused { host: self.host.clone(), why, ours, theirs }),
                other => return Err(self.protocol(format!("{other:?} where the answer to {what} was due"))),
            }
        }
    }

    /// Verifies `regions` of `share` on the agent's target against its copy of that share's
    /// history (see [`Session::sync_history`]); the digests of what it read when `digest`.
    pub fn verify(
        &mut self,
        (share, regions): (PortId, &[(u64, u64)]),
        digest: bool,
        timeout: Duration,
    ) -> Result<(VerifyReport, Option<Vec<Digest>>), DialError> {
        let op = Op::Verify { regions: regions.iter().map(|&(a, b)| [a, b]).collect(), digest, share };
        let (mut findings, mut seen, mut digests) = (Vec::new(), Vec::new(), Vec::new());
        // What a lying agent can make this side hold: no more findings or seen runs than the
        // regions have sectors, no more digests than a verify makes.
        let most = sectors_in(regions, crate::format::MIN_SECTOR_BYTES as u64);
        let most_digests = crate::verify::MAX_DIGESTS.saturating_add(regions.len() as u64);
        let answer = self.parted(op, "verify", timeout, |part| {
            let over = match &part {
                VerifiedPart::Findings(f) => over(findings.len(), f.len(), most),
                VerifiedPart::Seen(s) => over(seen.len(), s.len(), most),
                VerifiedPart::Digests(d) => over(digests.len(), d.len(), most_digests),
                VerifiedPart::Hashes(_) | VerifiedPart::Samples(_) => false,
            };
            if over {
                return Err(BadPart(format!("more items in a verify's answer than its {} bytes of regions can give", most * 512)));
            }
            match part {
                VerifiedPart::Findings(f) => findings.extend(f),
                VerifiedPart::Seen(s) => seen.extend(s.into_iter().map(|[id, start, end]| SeenRun { id, start, end })),
                VerifiedPart::Hashes(_) | VerifiedPart::Samples(_) => {
                    return Err(BadPart("sector hashes or read samples in a verify's answer".into()))
                }
                VerifiedPart::Digests(d) => {
                    for x in d {
                        let Some(hash) = unhex::<32>(&x.hash) else {
                            return Err(BadPart(format!("a digest whose hash is not 32 hex bytes: {}", x.hash)));
                        };
                        digests.push(Digest { start: x.start, end: x.end, hash, unreadable: x.unreadable });
                    }
                }
            }
            Ok(())
        })?;
        let c = match answer {
            Answer::Verified { counts } => counts,
            Answer::Failed { why } => return Err(DialError::Protocol { host: self.host.clone(), why }),
            other => return Err(self.protocol(format!("{other:?} answered a verify"))),
        };
        if c.findings != findings.len() as u64 || c.seen != seen.len() as u64 || c.digests.unwrap_or(0) != digests.len() as u64 {
            return Err(self.protocol(format!(
                "the verify's counts ({} findings, {} seen, {:?} digests) are not what it sent ({}, {}, {})",
                c.findings,
                c.seen,
                c.digests,
                findings.len(),
                seen.len(),
                digests.len()
            )));
        }
        let report = VerifyReport {
            sectors: c.sectors,
            bytes: c.bytes,
            durable_ok: c.durable_ok,
            newer_ok: c.newer_ok,
            prior_ok: c.prior_ok,
            findings,
            seen,
        };
        Ok((report, c.digests.map(|_| digests)))
    }
}

/// How many `sector`-byte sectors `ranges` hold (saturating).
fn sectors_in(ranges: &[(u64, u64)], sector: u64) -> u64 {
    ranges.iter().fold(0u64, |n, &(a, b)| n.saturating_add(b.saturating_sub(a).div_ceil(sector.max(1))))
}

/// Whether `more` items on top of `held` pass `most`.
pub(crate) fn over(held: usize, more: usize, most: u64) -> bool {
    (held as u64).saturating_add(more as u64) > most
}

/// A part of an answer that the operation does not give (a protocol error: why).
#[derive(Debug)]
pub(crate) struct BadPart(pub(crate) String);

impl Session {
    /// The hash of every sector of `ranges` as the agent's target reads it (`None`: the read
    /// failed), to compare two ports sector by sector where their digests differ.
    pub fn sector_hashes(&mut self, ranges: &[(u64, u64)], sector: u64, timeout: Duration) -> Result<Vec<Option<[u8; 32]>>, DialError> {
        let op = Op::SectorHashes { ranges: ranges.iter().map(|&(a, b)| [a, b]).collect(), sector };
        let mut out = Vec::new();
        let most = sectors_in(ranges, sector);
        let answer = self.parted(op, "sector hashes", timeout, |part| {
            let VerifiedPart::Hashes(h) = part else {
                return Err(BadPart(format!("{part:?} in the answer to sector hashes")));
            };
            if over(out.len(), h.len(), most) {
                return Err(BadPart(format!("more sector hashes than the {most} sectors asked")));
            }
            for x in h {
                match x.as_deref().map(unhex::<32>) {
                    None => out.push(None),
                    Some(Some(b)) => out.push(Some(b)),
                    Some(None) => return Err(BadPart(format!("a sector hash that is not 32 hex bytes: {x:?}"))),
                }
            }
            Ok(())
        })?;
        match answer {
            Answer::Hashed { count } if count == out.len() as u64 => Ok(out),
            Answer::Hashed { count } => Err(self.protocol(format!("{count} sector hashes counted, {} sent", out.len()))),
            Answer::Failed { why } => Err(DialError::Protocol { host: self.host.clone(), why }),
            other => Err(self.protocol(format!("{other:?} answered sector hashes"))),
        }
    }

    /// Has the agent write port `port`'s share of the run described by `header` with its
    /// prefill pattern and flush it: `Ok(Err(_))` when the agent could not (the session goes
    /// on). An answer for another span than the one asked is the agent's protocol error.
    pub fn prefill(
        &mut self,
        header: &crate::ledger::RunHeader,
        port: crate::port::PortId,
        timeout: Duration,
    ) -> Result<Result<(), PrefillFailed>, DialError> {
        let want = (header.workload.span_start, header.workload.span_end);
        match self.call(Op::Prefill { header: Box::new(header.clone()), port }, timeout)? {
            Answer::Prefilled { span_start, span_end } if (span_start, span_end) == want => Ok(Ok(())),
            Answer::Prefilled { span_start, span_end } => {
                Err(self.protocol(format!("the prefill of bytes {span_start}..{span_end} answered, {}..{} asked", want.0, want.1)))
            }
            Answer::Failed { why } => Ok(Err(PrefillFailed(why))),
            other => Err(self.protocol(format!("{other:?} answered a prefill"))),
        }
    }

    /// The agent's target's health logs, parsed here: `None` when it has none (not NVMe, an
    /// NBD export), with the agent's reason in the error of `Some(Err)` when reading failed.
    pub fn health(&mut self, timeout: Duration) -> Result<Option<Result<HealthLogs, HealthReadError>>, DialError> {
        match self.call(Op::Health {}, timeout)? {
            Answer::Health { none: Some(_), .. } => Ok(None),
            Answer::Health { smart: Some(s), ocp, none: None } => {
                let parse = || -> Result<HealthLogs, HealthReadError> {
                    let smart = crate::health::parse_smart(&health_page(&s)?)?;
                    let ocp = match ocp {
                        Some(o) => Some(crate::health::parse_ocp_smart(&health_page(&o)?)?),
                        None => None,
                    };
                    // An agent sends the SMART and OCP pages only: no persistent event log, no link.
                    Ok(HealthLogs { smart, ocp, pel: None, pel_unread: None, pcie: None })
                };
                Ok(Some(parse()))
            }
            Answer::Failed { why } => Ok(Some(Err(HealthReadError::Remote(why)))),
            other => Err(self.protocol(format!("{other:?} answered a health request"))),
        }
    }
}

/// The agent could not write the prefill on its host (its reason); the session goes on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the agent could not write the prefill: {0}")]
pub struct PrefillFailed(pub String);

/// A health page as the agent sends it, in hex.
fn health_page(h: &str) -> Result<Vec<u8>, HealthReadError> {
    if !h.len().is_multiple_of(2) || !h.is_ascii() {
        return Err(HealthReadError::NotHex);
    }
    (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).map_err(|_| HealthReadError::NotHex)).collect()
}
