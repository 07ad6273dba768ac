//! The agent's copy of the run's history, and verify on its side. The coordinator sends its
//! ledger's records (`history`, in chunks, from where this copy ends), and the agent replays
//! them with [`History::apply`], the same code that replays a ledger file, so its copy is the
//! coordinator's history and nothing else. Then `verify` reads the regions on the agent's
//! target and streams back what it found in bounded parts (`verified` frames: findings, the
//! uncertain writes it saw, the digests), then the counts.

use crate::ledger::{History, Record};
use crate::port::PortId;
use crate::remote::parts::PART_ITEMS;
use crate::remote::proto::{Answer, DigestWire, Frame, Nonce, VerifiedPart, VerifyCounts};
use crate::verify::{Digests, Verifier, VerifyReport};
use faultline_drivers::BlockTarget;
use std::collections::BTreeMap;
use std::io::Write;

/// The agent's copy of the history of each share it verifies (its own port's, and, with
/// cross-verification, the other ports'), replayed from the coordinator's records.
#[derive(Default)]
pub(crate) struct Mirror {
    histories: BTreeMap<PortId, History>,
}

/// The most shares an agent holds a history of: a run's port table is smaller.
const MAX_SHARES: usize = 16;

impl Mirror {
    /// Applies records of `share`'s history numbered from `first` (0 is its run's header,
    /// which must name `share` in its port table).
    pub fn apply(&mut self, share: PortId, first: u64, records: Vec<Record>) -> Answer {
        let have = self.histories.get(&share).map_or(0, |h| h.records);
        if first != have {
            return Answer::Failed { why: format!("share {share}: history records from {first}, where this agent holds {have}") };
        }
        if have == 0 && self.histories.len() >= MAX_SHARES {
            return Answer::Failed { why: format!("share {share}: this agent holds the histories of {MAX_SHARES} shares already") };
        }
        for rec in records {
            match (self.histories.get_mut(&share), rec) {
                (None, Record::RunStart(h)) if h.ports.iter().any(|p| p.id == share) => {
                    self.histories.insert(share, History::new(h));
                }
                (None, Record::RunStart(_)) => {
                    return Answer::Failed { why: format!("share {share}: its run's header has no port {share} in its port table") }
                }
                (None, other) => return Answer::Failed { why: format!("a history must begin with the run's header, not {other:?}") },
                (Some(h), rec) => {
                    let n = h.records;
                    if let Err(e) = h.apply(rec) {
                        // What was applied stays: the coordinator resends from here.
                        return Answer::Failed { why: format!("history record {n}: {e}") };
                    }
                }
            }
        }
        Answer::HistoryAt { records: self.histories.get(&share).map_or(0, |h| h.records) }
    }

    /// Verifies `regions` of `share` on `target`, streaming the parts of the answer to `send`.
    pub fn verify(
        &self,
        target: &mut dyn BlockTarget,
        (share, regions): (PortId, &[[u64; 2]]),
        digest: bool,
        send: &mut dyn FnMut(VerifiedPart) -> std::io::Result<()>,
    ) -> std::io::Result<Answer> {
        let Some(h) = self.histories.get(&share) else {
            return Ok(Answer::Failed { why: format!("no history of share {share}: send its run's records first") });
        };
        let checked = super::checked::run(&h.header, &target.geometry()).and_then(|(layout, format)| {
            let span = (h.header.workload.span_start, h.header.workload.span_end);
            Ok((layout, format, super::checked::regions(regions, h.header.sector_bytes, span)?))
        });
        let (layout, format, regions) = match checked {
            Ok(x) => x,
            Err(e) => return Ok(Answer::Failed { why: format!("refused: {e}") }),
        };
        let v = Verifier::new(&layout, h, &format);
        let (report, digests) = if digest {
            let mut d = Digests::for_regions(&regions);
            match v.verify_regions_digested(target, &regions, &mut d) {
                Ok(r) => (r, Some(d.finish())),
                Err(e) => return Ok(Answer::Failed { why: e.to_string() }),
            }
        } else {
            match v.verify_regions(target, &regions) {
                Ok(r) => (r, None),
                Err(e) => return Ok(Answer::Failed { why: e.to_string() }),
            }
        };
        let VerifyReport { sectors, bytes, durable_ok, newer_ok, prior_ok, findings, seen } = report;
        let findings_n = findings.len() as u64;
        for c in findings.chunks(PART_ITEMS) {
            send(VerifiedPart::Findings(c.to_vec()))?;
        }
        let seen_n = seen.len() as u64;
        for c in seen.chunks(PART_ITEMS) {
            send(VerifiedPart::Seen(c.iter().map(|s| [s.id, s.start, s.end]).collect()))?;
        }
        let digests_n = digests.as_ref().map(|d| d.len() as u64);
        for c in digests.iter().flat_map(|d| d.chunks(PART_ITEMS)) {
            send(VerifiedPart::Digests(c.iter().map(DigestWire::from).collect()))?;
        }
        Ok(Answer::Verified {
            counts: VerifyCounts { sectors, bytes, durable_ok, newer_ok, prior_ok, findings: findings_n, seen: seen_n, digests: digests_n },
        })
    }
}

/// Sends one part of a verify's answer.
pub(crate) fn send_part(w: &mut dyn Write, run: &Nonce, seq: u64, part: VerifiedPart) -> std::io::Result<()> {
    let mut w = w;
    crate::remote::proto::write_frame(&mut w, &Frame::Verified { run: run.clone(), seq, part })
}
