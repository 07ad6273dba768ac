//! What the ledger says: the run header, the prefill and each cycle's durable watermarks,
//! built by applying records one by one. [`History::apply`] serves replay and the writer
//! alike, so a record that contradicts the ledger is refused before it is written.

use super::frame::stream_ledger;
use super::pins::{Pin, PinIndex};
use super::{Applied, EndKind, LedgerError, Record, RunHeader, SeenWrite, SeenWrites, LEDGER_FILE, LEDGER_FORMAT};
use crate::port::PortId;
use crate::workload::Layout;
use std::path::Path;

/// A cycle's durable state as replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleState {
    pub cycle: u32,
    pub first_id: u64,
    pub submitted_end: u64,
    pub durable_prefix: u64,
    pub durable_extras: IdRuns,
    pub failed: IdRuns,
    pub end: Option<EndKind>,
    pub in_flight_at_end: u32,
    pub bytes_at_risk: u64,
    /// The port the cycle's writes went through (their sectors carry it).
    pub port: PortId,
}

impl CycleState {
    /// What a checkpoint or the cycle's end says is durable (never below the cycle's first id),
    /// and what failed.
    fn set_durable(&mut self, durable_prefix: u64, durable_extras: Vec<u64>, failed: Vec<u64>) {
        self.durable_prefix = durable_prefix.max(self.first_id);
        self.durable_extras = IdRuns::from_ids(durable_extras);
        self.failed = IdRuns::from_ids(failed);
    }
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
    /// The pins of the last cycle with a `seen` record (uncertain writes a verify saw applied,
    /// fully or partly, in ledger order): what a later verify of that cycle compares against.
    /// Earlier cycles' pins live only in `pin_index`, so this stays O(queue depth) whatever
    /// the number of cycles.
    pub pins: Vec<Pin>,
    /// Every pin, by address: the sectors the drive must keep showing a seen write on, or
    /// newer versions.
    pub pin_index: PinIndex,
    /// Cycles with a `seen` record, ascending.
    pub seen_cycles: Vec<u32>,
    /// The ids that are formats of the namespace ([`Record::Format`]), ascending.
    pub formats: Vec<u64>,
    /// The workload's mapping, to place pins (`None` when the header's workload is invalid,
    /// which opening the run refuses anyway).
    layout: Option<Layout>,
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
            Some(c) => (id < c.durable_prefix && !c.failed.contains(id)) || c.durable_extras.contains(id),
            None => false,
        }
    }

    /// Whether id `id` is a format of the namespace rather than a workload operation.
    pub fn is_format(&self, id: u64) -> bool {
        self.formats.binary_search(&id).is_ok()
    }

    /// The newest format below id `bound`.
    pub fn format_below(&self, bound: u64) -> Option<u64> {
        let i = self.formats.partition_point(|&f| f < bound);
        i.checked_sub(1).map(|i| self.formats[i])
    }

    /// What id `id` does: the workload's operation, or a format of the span.
    pub fn plan(&self, layout: &Layout, id: u64) -> crate::workload::WritePlan {
        if self.is_format(id) {
            crate::workload::WritePlan::format(layout.spec(), id)
        } else {
            layout.plan(id)
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

/// Reads and replays the ledger of `run_dir`, streamed: memory holds the history, never the
/// file or its records.
pub fn replay(run_dir: &Path) -> Result<History, LedgerError> {
    let path = run_dir.join(LEDGER_FILE);
    let mut h: Option<History> = None;
    let (valid_bytes, torn_tail_bytes) = stream_ledger(&path, &mut |i, offset, rec| {
        match (&mut h, rec) {
            (None, Record::RunStart(header)) => {
                if header.ledger_format != LEDGER_FORMAT {
                    return Err(LedgerError::Invalid {
                        path: path.clone(),
                        index: 0,
                        offset: 0,
                        why: format!("ledger format {} (this build reads {LEDGER_FORMAT})", header.ledger_format),
                    });
                }
                h = Some(History::new(header));
            }
            (None, _) => {
                return Err(LedgerError::Invalid { path: path.clone(), index: 0, offset: 0, why: "first record is not run_start".into() })
            }
            (Some(h), rec) => {
                h.apply(rec).map_err(|e| LedgerError::Invalid { path: path.clone(), index: i, offset, why: e.to_string() })?
            }
        }
        Ok(())
    })?;
    let mut h = h.ok_or_else(|| LedgerError::Empty { path: path.clone() })?;
    h.valid_bytes = valid_bytes;
    h.torn_tail_bytes = torn_tail_bytes;
    Ok(h)
}

impl History {
    /// The history of a run with no records but its header.
    pub fn new(header: RunHeader) -> Self {
        let layout = Layout::new(header.workload.clone(), header.sector_bytes).ok();
        History {
            header,
            layout,
            pin_index: PinIndex::default(),
            prefill: None,
            cycles: Vec::new(),
            records: 1,
            torn_tail_bytes: 0,
            valid_bytes: 0,
            pins: Vec::new(),
            seen_cycles: Vec::new(),
            formats: Vec::new(),
        }
    }

    /// Applies one record after the header; `Err` names what is inconsistent.
    pub fn apply(&mut self, rec: Record) -> Result<(), HistoryError> {
        match rec {
            Record::RunStart(_) => return Err(HistoryError::SecondRunStart),
            Record::PrefillDone { span_start, span_end } => {
                if !self.cycles.is_empty() {
                    return Err(HistoryError::LatePrefill);
                }
                self.prefill = Some((span_start, span_end));
            }
            Record::CycleStart { cycle, first_id, port, .. } => self.start_cycle(cycle, first_id, port)?,
            Record::Reserve { cycle, upto } => {
                let c = self.open_cycle(cycle)?;
                c.submitted_end = c.submitted_end.max(upto);
            }
            Record::Checkpoint { cycle, durable_prefix, durable_extras, failed } => {
                self.open_cycle(cycle)?.set_durable(durable_prefix, durable_extras, failed);
            }
            Record::WriteFailed { cycle, .. } => {
                self.open_cycle(cycle)?;
            }
            Record::CycleEnd { cycle, end, submitted_end, durable_prefix, durable_extras, failed, in_flight_at_end, bytes_at_risk } => {
                let c = self.open_cycle(cycle)?;
                if submitted_end < c.first_id || durable_prefix > submitted_end {
                    return Err(HistoryError::CycleEnd { cycle, durable_prefix, submitted_end, first_id: c.first_id });
                }
                c.submitted_end = submitted_end;
                c.set_durable(durable_prefix, durable_extras, failed);
                c.end = Some(end);
                c.in_flight_at_end = in_flight_at_end;
                c.bytes_at_risk = bytes_at_risk;
            }
            Record::Format { cycle, id } => {
                let after_last = self.formats.last().is_none_or(|&f| f < id);
                let c = self.open_cycle(cycle)?;
                if id < c.first_id || id >= c.submitted_end || !after_last {
                    return Err(HistoryError::Format { cycle, id, first_id: c.first_id, submitted_end: c.submitted_end });
                }
                self.formats.push(id);
            }
            Record::Reformat { cycle, id, done } => self.apply_reformat(cycle, id, done)?,
            Record::Seen { cycle, writes } => self.apply_seen(cycle, writes)?,
        }
        self.records += 1;
        Ok(())
    }

    /// The last cycle, when it is `cycle` and has not ended.
    fn open_cycle(&mut self, cycle: u32) -> Result<&mut CycleState, HistoryError> {
        match self.cycles.last_mut() {
            Some(c) if c.cycle == cycle && c.end.is_none() => Ok(c),
            _ => Err(HistoryError::CycleNotOpen { cycle }),
        }
    }

    /// Opens cycle `cycle`, its ids from `first_id`: the first cycle is 1, each next one follows
    /// an ended cycle, its ids above all the previous one submitted.
    fn start_cycle(&mut self, cycle: u32, first_id: u64, port: PortId) -> Result<(), HistoryError> {
        if let Some(prev) = self.cycles.last() {
            if prev.end.is_none() || cycle != prev.cycle + 1 || first_id < prev.submitted_end {
                return Err(HistoryError::CycleOutOfOrder {
                    cycle,
                    first_id,
                    prev: prev.cycle,
                    prev_ended: prev.end.is_some(),
                    prev_submitted_end: prev.submitted_end,
                });
            }
        } else if cycle != 1 || first_id == 0 {
            return Err(HistoryError::FirstCycle { cycle, first_id });
        }
        self.cycles.push(CycleState {
            cycle,
            first_id,
            submitted_end: first_id,
            durable_prefix: first_id,
            durable_extras: IdRuns::default(),
            failed: IdRuns::default(),
            end: None,
            in_flight_at_end: 0,
            bytes_at_risk: 0,
            port,
        });
        Ok(())
    }

    /// A format after `cycle` ended: sent (its id the cycle's next, now submitted), then done
    /// (durable).
    fn apply_reformat(&mut self, cycle: u32, id: u64, done: bool) -> Result<(), HistoryError> {
        let last_format = self.formats.last().copied();
        let c = match self.cycles.last_mut() {
            Some(c) if c.cycle == cycle && c.end.is_some() => c,
            _ => return Err(HistoryError::ReformatNotLastEnded { cycle }),
        };
        let fits = match done {
            false => id == c.submitted_end && last_format.is_none_or(|f| f < id),
            true => last_format == Some(id) && id + 1 == c.submitted_end,
        };
        if !fits {
            return Err(HistoryError::Format { cycle, id, first_id: c.first_id, submitted_end: c.submitted_end });
        }
        if done {
            let mut ids: Vec<u64> = c.durable_extras.iter().collect();
            ids.push(id);
            c.durable_extras = IdRuns::from_ids(ids);
        } else {
            c.submitted_end = id + 1;
            self.formats.push(id);
        }
        Ok(())
    }

    /// The writes seen on the drive after `cycle`: they replace the pins of an earlier cycle's
    /// (a write not applied at all pins nothing).
    fn apply_seen(&mut self, cycle: u32, writes: SeenWrites) -> Result<(), HistoryError> {
        check_seen(self, cycle, &writes)?;
        if self.seen_cycles.last() != Some(&cycle) {
            self.seen_cycles.push(cycle);
            self.pins.clear();
        }
        for write in writes.0.into_iter().filter(|w| w.applied != Applied::NotAtAll) {
            let pin = Pin { cycle, write };
            if let Some(l) = &self.layout {
                self.pin_index.add(l, self.header.sector_bytes, &pin);
            }
            self.pins.push(pin);
        }
        Ok(())
    }
}

/// Why a record contradicts the history it is applied to (a harness bug, or a ledger that
/// was not written by one run).
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum HistoryError {
    #[error("a second run_start")]
    SecondRunStart,
    #[error("prefill after writes began")]
    LatePrefill,
    #[error("record for cycle {cycle}, which is not open")]
    CycleNotOpen { cycle: u32 },
    /// A cycle that does not follow the previous one: its number, its first id below the
    /// previous one's ids, or the previous one not ended.
    #[error("cycle {cycle} starting at id {first_id} does not follow cycle {prev} (ended: {prev_ended}, ids below {prev_submitted_end})")]
    CycleOutOfOrder { cycle: u32, first_id: u64, prev: u32, prev_ended: bool, prev_submitted_end: u64 },
    #[error("first cycle is {cycle} starting at id {first_id}")]
    FirstCycle { cycle: u32, first_id: u64 },
    #[error("cycle {cycle} ends with durable prefix {durable_prefix} and submitted end {submitted_end}, first id {first_id}")]
    CycleEnd { cycle: u32, durable_prefix: u64, submitted_end: u64, first_id: u64 },
    #[error(
        "format id {id} in cycle {cycle}: not among the cycle's reserved ids [{first_id}, {submitted_end}), or not above the last format"
    )]
    Format { cycle: u32, id: u64, first_id: u64, submitted_end: u64 },
    #[error("reformat record for cycle {cycle}, which is not the last cycle ended")]
    ReformatNotLastEnded { cycle: u32 },
    #[error("seen record for cycle {cycle}, which is not the last cycle ended")]
    SeenNotLastEnded { cycle: u32 },
    #[error("seen record for cycle {cycle} names write {id} twice")]
    SeenTwice { cycle: u32, id: u64 },
    #[error("seen record for cycle {cycle} names write {id}, outside the cycle's ids [{first_id}, {submitted_end})")]
    SeenOutside { cycle: u32, id: u64, first_id: u64, submitted_end: u64 },
    #[error("seen record for cycle {cycle} names write {id}, which the contract made durable")]
    SeenDurable { cycle: u32, id: u64 },
    #[error(
        "seen record for cycle {cycle}: write {id} is {applied:?} with sector runs {sectors:?} (partly needs sorted, disjoint, non-empty runs; the others none)"
    )]
    SeenShape { cycle: u32, id: u64, applied: Applied, sectors: Vec<[u32; 2]> },
}

/// A `seen` record is about the last cycle, once it ended, and names only its writes that the
/// contract left uncertain, each once, with sector runs exactly when it was partly applied.
fn check_seen(h: &History, cycle: u32, writes: &[SeenWrite]) -> Result<(), HistoryError> {
    let c = match h.cycles.last() {
        Some(c) if c.cycle == cycle && c.end.is_some() => c,
        _ => return Err(HistoryError::SeenNotLastEnded { cycle }),
    };
    let mut ids: Vec<u64> = writes.iter().map(|w| w.id).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(HistoryError::SeenTwice { cycle, id: w[0] });
    }
    for w in writes {
        if w.id < c.first_id || w.id >= c.submitted_end {
            return Err(HistoryError::SeenOutside { cycle, id: w.id, first_id: c.first_id, submitted_end: c.submitted_end });
        }
        if h.is_durable(w.id) {
            return Err(HistoryError::SeenDurable { cycle, id: w.id });
        }
        let runs_ok = w.sectors.iter().all(|r| r[0] < r[1]) && w.sectors.windows(2).all(|p| p[0][1] < p[1][0]);
        let shape_ok = match w.applied {
            Applied::Partly => !w.sectors.is_empty() && runs_ok,
            Applied::Fully | Applied::NotAtAll => w.sectors.is_empty(),
        };
        if !shape_ok {
            return Err(HistoryError::SeenShape { cycle, id: w.id, applied: w.applied, sectors: w.sectors.clone() });
        }
    }
    Ok(())
}

/// A set of write ids as sorted, disjoint, half-open runs `[first, end)`. A cycle's cut
/// fails the writes in flight, mostly consecutive ids: kept as runs, the ledger's cycle index
/// costs a few words per cycle instead of a word per failed write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdRuns(Box<[(u64, u64)]>);

impl IdRuns {
    /// The set of `ids`, in any order, repeats allowed.
    pub fn from_ids(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for id in ids {
            match runs.last_mut() {
                Some(r) if r.1 == id => r.1 = id + 1,
                _ => runs.push((id, id + 1)),
            }
        }
        IdRuns(runs.into_boxed_slice())
    }

    pub fn contains(&self, id: u64) -> bool {
        let i = self.0.partition_point(|r| r.1 <= id);
        self.0.get(i).is_some_and(|r| r.0 <= id)
    }

    /// How many ids.
    pub fn len(&self) -> u64 {
        self.0.iter().map(|r| r.1 - r.0).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|r| r.0..r.1)
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::tests::{image, sample_records, tempdir};

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
    fn ledgers_written_before_the_seen_record_still_read() {
        // Records as a build without `seen` wrote them, byte for byte (no `seen` anywhere).
        let header = serde_json::to_string(&crate::ledger::tests::header()).unwrap();
        let old = [
            header.as_str(),
            r#"{"type":"cycle_start","cycle":1,"first_id":1,"at":"t","port":0}"#,
            r#"{"type":"reserve","cycle":1,"upto":64}"#,
            r#"{"type":"cycle_end","cycle":1,"end":"cut","submitted_end":40,"durable_prefix":30,"durable_extras":[33],"failed":[],"in_flight_at_end":4,"bytes_at_risk":16384}"#,
        ];
        let header_rec = format!(r#"{{"type":"run_start",{}"#, &old[0][1..]);
        let frames: Vec<u8> = std::iter::once(header_rec.as_str())
            .chain(old[1..].iter().copied())
            .enumerate()
            .flat_map(|(i, p)| crate::ledger::frame::frame(i as u64, p.as_bytes()))
            .collect();
        let dir = tempdir();
        std::fs::write(dir.join(LEDGER_FILE), frames).unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!((h.cycles.len(), h.records), (1, 4));
        assert!(h.pins.is_empty() && h.seen_cycles.is_empty(), "an old ledger holds nothing seen");
        assert!(h.is_durable(33) && !h.is_durable(35));
    }

    #[test]
    fn seen_records_replay_as_pins_and_contradictions_are_refused() {
        use crate::ledger::{Applied, SeenWrite};
        let w = |id, applied, sectors: &[[u32; 2]]| SeenWrite { id, applied, sectors: sectors.to_vec() };
        let good = Record::Seen {
            cycle: 1,
            writes: vec![w(51, Applied::Partly, &[[0, 2], [5, 8]]), w(52, Applied::Fully, &[]), w(53, Applied::NotAtAll, &[])].into(),
        };
        let json = serde_json::to_string(&good).unwrap();
        assert_eq!(
            json,
            r#"{"type":"seen","cycle":1,"writes":{"fully":[[52,53]],"partly":[{"id":51,"sectors":[[0,2],[5,8]]}],"not_at_all":[[53,54]]}}"#
        );
        let mut recs = sample_records();
        recs.insert(5, good.clone());
        let dir = tempdir();
        std::fs::write(dir.join(LEDGER_FILE), image(&recs)).unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!(h.seen_cycles, vec![1]);
        assert_eq!(h.pins.iter().map(|p| (p.cycle, p.write.id)).collect::<Vec<_>>(), vec![(1, 51), (1, 52)]);

        // Each contradiction is refused, naming it.
        let base: Vec<Record> = sample_records()[..5].to_vec();
        let refused = |rec: Record, why: &str| {
            let mut h = History::new(crate::ledger::tests::header());
            for r in &base[1..] {
                h.apply(r.clone()).unwrap();
            }
            let e = h.apply(rec).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        };
        refused(Record::Seen { cycle: 2, writes: vec![].into() }, "not the last cycle ended");
        refused(Record::Seen { cycle: 1, writes: vec![w(60, Applied::Fully, &[])].into() }, "outside the cycle's ids [1, 60)");
        refused(Record::Seen { cycle: 1, writes: vec![w(45, Applied::Fully, &[])].into() }, "made durable");
        refused(Record::Seen { cycle: 1, writes: vec![w(52, Applied::Fully, &[]), w(52, Applied::NotAtAll, &[])].into() }, "twice");
        refused(Record::Seen { cycle: 1, writes: vec![w(52, Applied::Partly, &[])].into() }, "partly needs");
        refused(Record::Seen { cycle: 1, writes: vec![w(52, Applied::Partly, &[[2, 4], [4, 5]])].into() }, "partly needs");
        refused(Record::Seen { cycle: 1, writes: vec![w(52, Applied::Fully, &[[0, 1]])].into() }, "the others none");
        // An open cycle is not resolved.
        let mut h = History::new(crate::ledger::tests::header());
        for r in &sample_records()[1..] {
            h.apply(r.clone()).unwrap();
        }
        assert!(h.apply(Record::Seen { cycle: 2, writes: vec![].into() }).is_err());
        // Unknown fields in a write are refused.
        for bad in [
            r#"{"type":"seen","cycle":1,"writes":{"fully":[[51,52]],"extra":1}}"#,
            r#"{"type":"seen","cycle":1,"writes":{"partly":[{"id":51,"sectors":[[0,1]],"x":0}]}}"#,
            r#"{"type":"seen","cycle":1,"writes":{"fully":[[52,52]]}}"#,
            r#"{"type":"seen","cycle":1,"writes":{"not_at_all":[[0,18446744073709551615]]}}"#,
        ] {
            assert!(serde_json::from_str::<Record>(bad).is_err(), "{bad}");
        }
        // Consecutive ids pack into one range, and unpack in id order.
        let many: Vec<SeenWrite> = (100..140).map(|id| w(id, if id % 10 == 7 { Applied::NotAtAll } else { Applied::Fully }, &[])).collect();
        let rec = Record::Seen { cycle: 1, writes: many.clone().into() };
        let json = serde_json::to_string(&rec).unwrap();
        assert!(json.contains(r#""fully":[[100,107],[108,117],[118,127],[128,137],[138,140]]"#), "{json}");
        assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), rec);
    }
}

#[cfg(test)]
mod id_runs_tests {
    use super::IdRuns;
    use proptest::prelude::*;

    proptest! {
        /// The runs hold exactly the ids given, whatever their order and repeats.
        #[test]
        fn runs_hold_exactly_the_ids(ids in proptest::collection::vec(0u64..200, 0..80), probe in 0u64..210) {
            let r = IdRuns::from_ids(ids.clone());
            let mut want = ids;
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(r.to_vec(), want.clone());
            prop_assert_eq!(r.len(), want.len() as u64);
            prop_assert_eq!(r.contains(probe), want.binary_search(&probe).is_ok());
        }
    }

    #[test]
    fn consecutive_ids_make_one_run() {
        let r = IdRuns::from_ids((100..132).rev().chain([7, 140]).collect());
        assert_eq!(r.0.len(), 3);
        assert!(r.contains(100) && r.contains(131) && !r.contains(132) && r.contains(7) && !r.contains(8));
    }
}
