//! One sector against its envelope: the newest durable version, what the sector's bytes are,
//! and the verdict.

use super::taxonomy::shown_valid;
use super::zeroed::{Fill, Zeroings};
use super::*;

impl<'a> Verifier<'a> {
    /// D for `addr`, the zeroing ops newer than D covering it, and the end of the run of
    /// addresses from `addr` that share both.
    pub(super) fn durable(&self, addr: u64) -> Result<(Durable, Zeroings, u64), VerifyError> {
        let mut bound = self.history.submitted_end();
        let mut end = u64::MAX;
        let mut steps = 0u32;
        let mut z = Zeroings::default();
        loop {
            let (w, e) = self.layout.latest_covering_span(addr, bound);
            end = end.min(e);
            // A format below `bound` newer than the latest write covering `addr` is what
            // covers it (the format's id never names the workload's write of that id).
            let w = match (w, self.history.format_below(bound)) {
                (Some(w), Some(f)) if w.id > f => Some(w),
                (_, Some(f)) => Some(WritePlan::format(self.layout.spec(), f)),
                (w, None) => w,
            };
            match w {
                None => break,
                Some(w) if self.history.is_durable(w.id) => return Ok((Durable::Write(w), z, end)),
                Some(w) => {
                    self.note_uncertain(&mut z, &w);
                    bound = w.id;
                }
            }
            steps += 1;
            if steps >= MAX_STEPS_BACK {
                return Err(VerifyError::Inconsistent(format!("more than {MAX_STEPS_BACK} non-durable writes cover byte {addr}")));
            }
        }
        Ok(match self.history.prefill {
            Some((s, e)) if addr >= s && addr < e => (Durable::Prefill, z, end.min(e)),
            Some((s, _)) if addr < s => (Durable::Prior, z, end.min(s)),
            _ => (Durable::Prior, z, end),
        })
    }

    /// The sector identity a durable version has at `addr`.
    fn expected_id(&self, d: &Durable, addr: u64) -> Option<SectorId> {
        let h = &self.history.header;
        match d {
            Durable::Prior => None,
            Durable::Prefill => Some(prefill_id(h.run_id, addr, h.first_port().0)),
            Durable::Write(w) if w.zeroing().is_some() => None,
            Durable::Write(w) => Some(SectorId {
                run_id: h.run_id,
                addr,
                write_id: w.id,
                cycle: self.history.cycle_of(w.id).map_or(0, |c| c.cycle),
                port: self.history.cycle_of(w.id).map_or(h.first_port(), |c| c.port).0,
                flags: 0,
                index: ((addr - w.offset) / self.sector) as u32,
                count: (w.len / self.sector) as u32,
            }),
        }
    }

    pub(super) fn shown_of(&self, d: &Durable, addr: u64) -> Shown {
        if let Some(z) = match d {
            Durable::Write(w) => self.shown_zeroed(w),
            _ => None,
        } {
            return z;
        }
        match (d, self.expected_id(d, addr)) {
            (Durable::Prior, _) | (_, None) => Shown::Prior {},
            (Durable::Prefill, _) => Shown::Prefill {},
            (Durable::Write(_), Some(id)) => shown_valid(&id),
        }
    }

    /// Whether everything the sector at `addr` held before its durable version `d` is known to
    /// be this run's: the prefill covered it, or an earlier write of the run did (before that,
    /// it held whatever the drive had, which a lost write may bring back).
    fn only_own_versions_before(&self, d: &Durable, addr: u64) -> bool {
        let prefilled = self.history.prefill.is_some_and(|(s, e)| addr >= s && addr < e);
        match d {
            Durable::Prior => false,
            Durable::Prefill => true,
            Durable::Write(w) => prefilled || self.layout.latest_covering(addr, w.id).is_some(),
        }
    }

    /// `last_plan` caches the previous sector's write (sectors of one write come in runs).
    /// `sum` is the checksum the sector's identity bytes call for (`Format::sums_of`).
    pub(super) fn classify(
        &self,
        addr: u64,
        bytes: &[u8],
        sum: &[u8; 16],
        (d, z): (&Durable, &Zeroings),
        last_plan: &mut Option<WritePlan>,
    ) -> Verdict {
        let id = match self.format.decode_summed(bytes, sum) {
            Decoded::Valid(id) => id,
            Decoded::Damaged { id, magic_ok, version } => return damaged(&id, magic_ok, version),
            other => return self.classify_no_version(addr, bytes, (d, z), other),
        };
        let found = shown_valid(&id);
        if id.addr != addr {
            return Verdict::Finding {
                class: FindingClass::MisdirectedWrite,
                found,
                detail: format!("sector written for byte {} found at byte {addr}", id.addr),
            };
        }
        if id.write_id == PREFILL_WRITE_ID {
            return self.classify_prefill(addr, &id, d, found);
        }
        self.classify_write(addr, &id, d, found, last_plan)
    }

    /// A sector that holds no version of this run (zeros, another run's sector, or bytes of
    /// no format): damaged in place when it is within 1/32 of the bits of the durable version,
    /// corrupt when nothing older can explain it, else an old version.
    fn classify_no_version(&self, addr: u64, bytes: &[u8], (d, z): (&Durable, &Zeroings), decoded: Decoded) -> Verdict {
        let fill = Fill::of(bytes);
        if let Some(v) = fill.and_then(|f| self.classify_fill(f, d, z)) {
            return v;
        }
        let found = match decoded {
            Decoded::Zeros => Shown::Zeros {},
            Decoded::ForeignRun(f) => Shown::ForeignRun { run_id: f.run_id, write_id: f.write_id },
            _ if fill == Some(Fill::Ones) => Shown::Ones {},
            _ => Shown::Unrecognized {},
        };
        match d {
            Durable::Write(w) if w.zeroing().is_some() => {
                // What the sector held before the run, kept by a deallocate over it.
                if self.kept_by_deallocate(d, addr, 0) {
                    return Verdict::Ok { rank: d.rank(), durable: true };
                }
                if let v @ Verdict::Finding { .. } = self.classify_near_fill(w, bytes, found.clone()) {
                    return v;
                }
            }
            _ => {
                let Some(exp) = self.expected_id(d, addr) else {
                    return Verdict::Ok { rank: 0, durable: true };
                };
                // Within 1/32 of the bits of what should be here: damaged in place, not lost.
                let mut want = vec![0u8; bytes.len()];
                self.format.encode(&exp, &mut want);
                let dist = bit_distance(&want, bytes);
                if dist <= (bytes.len() as u64 * 8) / 32 {
                    return Verdict::Finding {
                        class: FindingClass::Corruption,
                        found,
                        detail: format!("{dist} bits differ from the durable version"),
                    };
                }
            }
        }
        // Bytes that are no version at all, where every version the sector ever held is
        // known to be this run's: nothing older can explain them.
        if matches!(found, Shown::Unrecognized {} | Shown::Ones {}) && self.only_own_versions_before(d, addr) {
            return Verdict::Finding {
                class: FindingClass::Corruption,
                found,
                detail: "matches no version of this run: neither the durable one nor any older one".into(),
            };
        }
        Verdict::Old { found }
    }

    /// A prefill sector (write id 0) at its own address: unexpected without the prefill's
    /// identity or where the ledger records no prefill; old when a write is durable there.
    fn classify_prefill(&self, addr: u64, id: &SectorId, d: &Durable, found: Shown) -> Verdict {
        if id.flags & FLAG_PREFILL == 0 || id.cycle != 0 || id.index != 0 || id.count != 1 {
            return unexpected(found, "write id 0 without the prefill identity".into());
        }
        if !self.history.prefill.is_some_and(|(s, e)| addr >= s && addr < e) {
            return unexpected(found, "prefill sector, but the ledger records no prefill here".into());
        }
        match d {
            Durable::Write(_) if self.kept_by_deallocate(d, addr, 1) => Verdict::Ok { rank: d.rank(), durable: true },
            Durable::Write(_) => Verdict::Old { found: Shown::Prefill {} },
            Durable::Prefill | Durable::Prior => Verdict::Ok { rank: 1, durable: true },
        }
    }

    /// A sector of one of the run's writes at its own address: its write checked against the
    /// ledger (submitted, covering this sector, the same identity), then ranked against the
    /// durable version. The common case: inlined, the write's plan cached in `last_plan`.
    #[inline]
    fn classify_write(&self, addr: u64, id: &SectorId, d: &Durable, found: Shown, last_plan: &mut Option<WritePlan>) -> Verdict {
        let Some(c) = self.history.cycle_of(id.write_id) else {
            if id.write_id >= self.history.submitted_end() {
                // Our keyed checksum proves faultline wrote this sector, and every id is
                // reserved in the ledger before it is submitted: the ledger lost records.
                return Verdict::LedgerBehind { write_id: id.write_id, cycle: id.cycle };
            }
            return unexpected(
                found,
                format!("write {} was never submitted (ids submitted end below {})", id.write_id, self.history.submitted_end()),
            );
        };
        let plan = match *last_plan {
            Some(p) if p.id == id.write_id => p,
            _ => {
                let p = self.history.plan(self.layout, id.write_id);
                *last_plan = Some(p);
                p
            }
        };
        if !plan.overlaps(addr, 1) {
            return unexpected(found, format!("write {} covers [{}, {}), not this sector", id.write_id, plan.offset, plan.end()));
        }
        if let Some(z) = plan.zeroing() {
            return unexpected(found, format!("id {} is a {}, which writes no data", id.write_id, z.name()));
        }
        let (index, count) = (((addr - plan.offset) / self.sector) as u32, (plan.len / self.sector) as u32);
        if id.index != index || id.count != count || id.cycle != c.cycle || id.port != c.port.0 || id.flags != 0 {
            return unexpected(
                found,
                format!(
                    "identity disagrees with write {}: sector {}/{} cycle {} port {} flags {:#x}, expected {index}/{count} cycle {} port {} flags 0",
                    id.write_id,
                    id.index,
                    id.count,
                    id.cycle,
                    crate::port::PortId(id.port),
                    id.flags,
                    c.cycle,
                    c.port
                ),
            );
        }
        let rank = id.write_id + 1;
        match d.rank().cmp(&rank) {
            std::cmp::Ordering::Equal => Verdict::Ok { rank, durable: true },
            std::cmp::Ordering::Less => Verdict::Ok { rank, durable: false },
            std::cmp::Ordering::Greater if self.kept_by_deallocate(d, addr, rank) => Verdict::Ok { rank: d.rank(), durable: true },
            std::cmp::Ordering::Greater => Verdict::Old { found },
        }
    }
}

/// A sector whose identity is ours but whose checksum fails: corrupted in place.
fn damaged(id: &SectorId, magic_ok: bool, version: u16) -> Verdict {
    Verdict::Finding {
        class: FindingClass::Corruption,
        found: Shown::Damaged { write_id: id.write_id, cycle: id.cycle, addr: id.addr, run_id: id.run_id },
        detail: format!("checksum mismatch (magic {}, version {version})", if magic_ok { "intact" } else { "damaged" }),
    }
}

/// A well-formed sector of this run that the ledger does not explain here.
fn unexpected(found: Shown, detail: String) -> Verdict {
    Verdict::Finding { class: FindingClass::UnexpectedVersion, found, detail }
}
