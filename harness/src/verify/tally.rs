//! One sector's verdict into the scan ([`Verifier::check_chunk`]'s steps): held to its pin,
//! counted, grouped by durable write, reported as a finding, and gathered into its atomic
//! unit. Called once per sector: inlined, and nothing allocated but a finding.

use super::*;

impl Verifier<'_> {
    /// `verdict` held to the pin covering `addr`, if any (a write seen there must not be lost).
    #[inline]
    pub(super) fn pinned(&self, scan: &mut Scan, addr: u64, bytes: &[u8], d: &Durable, verdict: Verdict) -> Verdict {
        if self.pins.is_empty() {
            return verdict;
        }
        if addr >= scan.pin.1 {
            scan.pin = self.pins.at(addr);
        }
        match scan.pin.0 {
            Some(pin) => self.held(pin, d, addr, bytes, verdict),
            None => verdict,
        }
    }

    /// Records the verdict on the sector at `addr` (durable version `d`) in the scan's report
    /// and groups: the version's rank when the sector is acceptable, `None` when it is not.
    /// A ledger that lags the drive is the error.
    #[inline]
    pub(super) fn tally(&self, scan: &mut Scan, addr: u64, d: &Durable, verdict: Verdict) -> Result<Option<u64>, VerifyError> {
        let expected = || self.shown_of(d, addr);
        match verdict {
            Verdict::LedgerBehind { write_id, cycle } => {
                return Err(VerifyError::LedgerBehind {
                    addr,
                    write_id,
                    cycle,
                    submitted_end: self.history.submitted_end(),
                    last_cycle: self.history.last_cycle(),
                })
            }
            Verdict::Ok { rank, durable } => {
                self.tally_ok(scan, addr, d, rank, durable, true);
                return Ok(Some(rank));
            }
            Verdict::Zeroed { rank, durable, exact } => {
                // Zeroing ops are never pinned: what they leave names no write.
                self.tally_ok(scan, addr, d, rank, durable, false);
                return Ok(exact.then_some(rank));
            }
            Verdict::Old { found } => match d {
                Durable::Write(w) => scan.groups.entry(w.id).or_insert(Group { plan: *w, shows: 0, old: vec![] }).old.push((addr, found)),
                _ => push(
                    &mut scan.rep.findings,
                    Finding {
                        class: FindingClass::LostWrite,
                        offset: addr,
                        length: self.sector,
                        expected: expected(),
                        found,
                        cycle: self.cycle,
                        detail: "prefill version missing".into(),
                    },
                ),
            },
            Verdict::Finding { class, found, detail } => push(
                &mut scan.rep.findings,
                Finding { class, offset: addr, length: self.sector, expected: expected(), found, cycle: self.cycle, detail },
            ),
            Verdict::Stale { expected, found, detail } => push(
                &mut scan.rep.findings,
                Finding {
                    class: FindingClass::StaleVersion,
                    offset: addr,
                    length: self.sector,
                    expected,
                    found,
                    cycle: self.cycle,
                    detail,
                },
            ),
        }
        Ok(None)
    }

    /// An acceptable sector: a newer version than the durable one remembered as seen, counted
    /// by kind, and counted as showing its durable write.
    #[inline]
    fn tally_ok(&self, scan: &mut Scan, addr: u64, d: &Durable, rank: u64, durable: bool, seen: bool) {
        let rep = &mut scan.rep;
        if seen && !durable && rank > self.track_from {
            push_seen(&mut rep.seen, rank - 1, addr, self.sector);
        }
        match (durable, rank) {
            (true, 0) => rep.prior_ok += 1,
            (true, _) => rep.durable_ok += 1,
            (false, _) => rep.newer_ok += 1,
        }
        if let Durable::Write(w) = d {
            scan.groups.entry(w.id).or_insert(Group { plan: *w, shows: 0, old: vec![] }).shows += 1;
        }
    }

    /// Gathers the sector at `addr` into its atomic unit (`unit_rank`: the version it shows,
    /// `None` for a finding), and checks the unit once its last sector, or the scan's, is in.
    #[inline]
    pub(super) fn track_unit(&self, scan: &mut Scan, addr: u64, d: &Durable, unit_rank: Option<u64>) {
        scan.unit.push(UnitSector { addr, shown: unit_rank.unwrap_or(u64::MAX), durable_rank: d.rank(), ok: unit_rank.is_some() });
        if (addr + self.sector).is_multiple_of(self.atomic) || addr + self.sector == scan.end {
            self.check_unit(&scan.unit, &mut scan.rep.findings);
            scan.unit.clear();
        }
    }
}

/// The verdict on a sector that could not be read. EILSEQ is the block layer's protection
/// error (`BLK_STS_PROTECTION`): the drive (NVMe Guard, Application or Reference Tag Check
/// Error, Invalid PI) or the kernel's integrity verification found the sector's protection
/// information not matching its data or its address, which the detail says; the passthrough
/// engine, which checks each tuple itself, names the field and both values.
pub(super) fn unreadable(e: &IoFailure) -> Verdict {
    // EILSEQ on Linux (include/uapi/asm-generic/errno.h); libc is not a dependency here.
    const EILSEQ: i32 = 84;
    let detail = if e.errno == EILSEQ && e.detail.contains(": the protection information of LBA ") {
        // The engine checked the tuple itself and names the field (NVMe passthrough).
        format!("protection information mismatch: {}", e.detail)
    } else if e.errno == EILSEQ {
        format!("protection information mismatch: the guard, application or reference tag does not match the sector ({e})")
    } else {
        e.to_string()
    };
    Verdict::Finding { class: FindingClass::Unreadable, found: Shown::ReadError { errno: e.errno, detail: e.detail.clone() }, detail }
}
