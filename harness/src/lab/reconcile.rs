//! The guest's findings (`lab/share/lab/checks.jsonl`, one line per cycle) scored against the
//! lab drive's ground truth taken after each cycle, as the detection matrix scores a row
//! ([`score_cycle`]).
//!
//! The drive and the host do not hold a sector to the same write. The drive counts a write
//! durable by its own order (NVMe: a flush covers the commands it completed before the flush
//! was submitted to it); the host can hold it only to what it can prove: a flush it submitted
//! after it saw the write complete. A write the drive completed just before a flush arrived,
//! whose completion reached the guest after it had sent that flush, is durable at the drive and
//! not provably so at the host. Where the drive lost such a write, the host holds the sector to
//! the newest write it *could* prove there (or to nothing newer than the prefill):
//! - a sector no finding covers holds what the host can demand (or newer): no finding a host
//!   can make, counted apart (`drive_only_lost_sectors`), not scored;
//! - a sector a finding covers whose expected write is an older write the host proved durable,
//!   and which the finding says lost (`lost_write`, `torn_write`, `stale_version`), is damage
//!   both sides see: scored against that older write, as the finding's class
//!   (`rescored_sectors`, said in the table);
//! - any other finding over it stays, and scores against the drive's own class.

use crate::runner::dut::GroundTruth;
use crate::runner::CycleCheck;
use crate::selftest::{score_cycle, ClassScore};
use crate::verify::{Finding, FindingClass, Shown};
use crate::workload::Layout;
use faultline_fixtures::{TruthClass, TruthExtent};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The drive's ground truth after one cycle, as the lab took it.
#[derive(Clone, Debug)]
pub struct CycleTruth {
    pub cycle: u32,
    pub truth: GroundTruth,
    /// The writes (port, id) the truth names torn that the drive's own order had made
    /// durable (partly lost since), as against units torn in flight at a cut
    /// (`SimDrive::durable_write_at`). A `lost_write` is always of a durable write.
    pub durable_torn: BTreeSet<(Option<u8>, u64)>,
}

/// Why the guest's record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{at}: not a JSON line: {why}")]
    NotJson { at: String, why: String },
    #[error("{at}: the line names no cycle")]
    NoCycle { at: String },
    #[error("{at}: its findings are unreadable: {why}")]
    Findings { at: String, why: String },
}

/// What the host knows of its own writes: which it could prove durable, and which it sent
/// with FUA.
pub struct HostRecord<'a> {
    /// True when the guest's ledger made write `id` durable (`History::is_durable`).
    pub durable: &'a dyn Fn(u64) -> bool,
    /// The guest's workload, to tell its FUA writes; `None` without a readable run.
    pub layout: Option<Layout>,
}

/// The guest's findings scored against the drive's ground truth, per class in sectors.
#[derive(Debug, Default, Serialize)]
pub struct Reconciled {
    pub model: String,
    /// Cycles scored.
    pub cycles: u32,
    /// Findings the guest recorded over those cycles (each cycle's, seen before or not).
    pub findings: u64,
    /// Ground-truth extents over those cycles.
    pub truth_extents: u64,
    pub scores: BTreeMap<&'static str, ClassScore>,
    /// Sectors the drive lost of writes it had made durable by its own order, which the host
    /// could not prove durable, and which no finding covers (not scored: the module doc).
    pub drive_only_lost_sectors: u64,
    /// Sectors of such writes a finding covers, found older than an older write the host did
    /// prove: scored against that write, as the finding's class (the module doc).
    pub rescored_sectors: u64,
    /// Cycles the lab itself failed (an emulated controller that did not come back), which
    /// say nothing of the drive: the run fails as the lab's failure (exit 2).
    pub lab_faults: Vec<String>,
    /// Each cycle's first disagreement that nothing explains (a sector found as another class,
    /// missed, or a false finding), and anything that kept a cycle from being scored.
    pub disagreements: Vec<String>,
    /// Cycles whose false findings are all explained by a layer between faultline and the
    /// drive (QEMU's emulated controller dropping FUA), with the evidence.
    pub explained: Vec<String>,
}

/// Scores `checks` (the text of `checks.jsonl`, `name` its path for messages) against the
/// ground truth of each cycle. `fua_received` is how many FUA writes reached the drive.
pub fn reconcile(
    model: &str,
    name: &str,
    checks: &str,
    truth: &[CycleTruth],
    host: Option<&HostRecord<'_>>,
    fua_received: u64,
    sector: u64,
) -> Result<Reconciled, ReconcileError> {
    let mut r = Reconciled { model: model.to_string(), ..Reconciled::default() };
    let fua = FuaCheck::new(host.and_then(|h| h.layout.clone()), fua_received);
    for (i, line) in checks.lines().enumerate() {
        let at = || format!("{name}:{}", i + 1);
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| ReconcileError::NotJson { at: at(), why: e.to_string() })?;
        let cycle = v["cycle"].as_u64().and_then(|c| u32::try_from(c).ok()).ok_or_else(|| ReconcileError::NoCycle { at: at() })?;
        if let Some(e) = v["error"].as_str() {
            r.disagreements.push(format!("cycle {cycle}: not checked: {e}"));
            continue;
        }
        let findings: Vec<Finding> =
            serde_json::from_value(v["findings"].clone()).map_err(|e| ReconcileError::Findings { at: at(), why: e.to_string() })?;
        let Some(ct) = truth.iter().find(|t| t.cycle == cycle) else {
            r.disagreements.push(format!("cycle {cycle}: the guest recorded findings, the host took no ground truth"));
            continue;
        };
        let gt = &ct.truth;
        r.cycles += 1;
        r.findings += findings.len() as u64;
        r.truth_extents += gt.extents.len() as u64;
        let gt = match host {
            Some(h) => {
                let held = held_by_the_host(ct, &findings, h.durable, sector);
                r.drive_only_lost_sectors += held.apart;
                r.rescored_sectors += held.rescored;
                held.truth
            }
            None => gt.clone(),
        };
        let check = CycleCheck { cycle, findings: &findings, truth: Some(gt.clone()) };
        let mut mine = BTreeMap::new();
        let problem = score_cycle(&check, sector, &mut mine);
        // A sector missed or found as another class: nothing explains that.
        let mut missed = false;
        for (class, c) in mine {
            let e = r.scores.entry(class).or_default();
            e.injected += c.injected;
            e.detected += c.detected;
            e.misclassified += c.misclassified;
            e.missed += c.missed;
            e.false_findings += c.false_findings;
            missed |= c.missed + c.misclassified > 0;
        }
        let Some(problem) = problem else { continue };
        // A dead device the drive's ground truth says was live, where the guest saw the
        // controller back on the bus but not initialised: the lab's QEMU failed.
        if let Some(why) = stuck_controller(&findings, &gt).filter(|_| !missed) {
            r.lab_faults.push(format!("cycle {cycle}: {why}"));
            continue;
        }
        // If only false findings are left: are they all writes the guest sent with FUA
        // that reached the drive without it?
        match fua.explain(&findings, &gt) {
            Some(why) if !missed => r.explained.push(format!("cycle {cycle}: {why}")),
            _ => r.disagreements.push(problem),
        }
    }
    if r.cycles < truth.len() as u32 {
        r.disagreements.push(format!(
            "the host took the ground truth of {} cycles, the guest recorded the findings of {}",
            truth.len(),
            r.cycles
        ));
    }
    Ok(r)
}

/// The ground truth held to what the host could prove (the module doc).
struct Held {
    truth: GroundTruth,
    /// Lost sectors of unprovable writes that no finding covers.
    apart: u64,
    /// Lost sectors of unprovable writes scored against an older write the host proved.
    rescored: u64,
}

/// The classes that say a sector holds something older than the write expected there.
fn says_older(c: FindingClass) -> Option<TruthClass> {
    match c {
        FindingClass::LostWrite => Some(TruthClass::LostWrite),
        FindingClass::TornWrite => Some(TruthClass::TornWrite),
        FindingClass::StaleVersion => Some(TruthClass::StaleVersion),
        _ => None,
    }
}

fn held_by_the_host(ct: &CycleTruth, findings: &[Finding], durable: &dyn Fn(u64) -> bool, sector: u64) -> Held {
    let gt = &ct.truth;
    let mut covering: HashMap<u64, &Finding> = HashMap::new();
    for f in findings.iter().filter(|f| f.class != FindingClass::DeadDevice) {
        for s in f.offset / sector..(f.offset + f.length) / sector {
            covering.entry(s).or_insert(f);
        }
    }
    let mut held =
        Held { truth: GroundTruth { extents: Vec::new(), dead: gt.dead, disturbed: gt.disturbed.clone() }, apart: 0, rescored: 0 };
    for t in &gt.extents {
        // A write the drive made durable by its own order (lost whole, or partly), which the
        // host could not prove durable.
        let of_the_drives_order = |w: u64| match t.class {
            TruthClass::LostWrite => true,
            TruthClass::TornWrite => ct.durable_torn.contains(&(t.port, w)),
            _ => false,
        };
        let unprovable = match t.write_id {
            Some(w) if of_the_drives_order(w) && !durable(w) => w,
            _ => {
                held.truth.extents.push(t.clone());
                continue;
            }
        };
        // Sector by sector, as the host holds it; runs of one holding are merged again.
        let mut out: Vec<TruthExtent> = Vec::new();
        for s in t.offset / sector..(t.offset + t.length) / sector {
            let one = match covering.get(&s) {
                None => {
                    held.apart += 1;
                    continue;
                }
                Some(f) => match (&f.expected, says_older(f.class)) {
                    (Shown::Write { write_id: p, port, .. }, Some(class))
                        if *p < unprovable && durable(*p) && t.port.is_none_or(|tp| tp == *port) =>
                    {
                        held.rescored += 1;
                        TruthExtent { offset: s * sector, length: sector, class, write_id: Some(*p), port: t.port }
                    }
                    _ => TruthExtent { offset: s * sector, length: sector, ..t.clone() },
                },
            };
            match out.last_mut() {
                Some(l) if l.offset + l.length == one.offset && l.class == one.class && l.write_id == one.write_id => l.length += sector,
                _ => out.push(one),
            }
        }
        held.truth.extents.extend(out);
    }
    held
}

/// When the cycle's only finding is a dead device, the drive was live, and the guest saw a
/// controller of the drive present but not initialised (QEMU 7.2's emulated controller, after
/// a hot-plug, left its first admin command unanswered: docs/LAB.md), says so.
fn stuck_controller(findings: &[Finding], gt: &GroundTruth) -> Option<String> {
    let [f] = findings else { return None };
    if gt.dead || f.class != FindingClass::DeadDevice {
        return None;
    }
    let seen = f.detail.lines().map(str::trim).find(|l| l.starts_with("controller ") && l.contains("initialisation not finished"))?;
    Some(format!(
        "the guest reported a dead device while the drive was live: {seen}. QEMU's emulated NVMe controller came back on the bus \
         after the plug and did not finish initialising; the lab failed, not the drive (docs/LAB.md)"
    ))
}

impl Reconciled {
    /// A table for the console.
    pub fn table(&self) -> String {
        let mut s = format!(
            "lab: ground truth ({}): {} cycles scored, {} findings, {} truth extents\n",
            self.model, self.cycles, self.findings, self.truth_extents
        );
        s += "lab:   class (sectors)     injected  detected  misclassified  missed  false\n";
        for (class, c) in &self.scores {
            s += &format!(
                "lab:   {class:<19} {:>8}  {:>8}  {:>13}  {:>6}  {:>5}\n",
                c.injected, c.detected, c.misclassified, c.missed, c.false_findings
            );
        }
        if self.scores.is_empty() {
            s += "lab:   (nothing injected, nothing found)\n";
        }
        if self.drive_only_lost_sectors > 0 {
            s += &format!(
                "lab:   not scored: {} lost sectors of writes durable by the drive's order only (it completed them before a flush arrived; the guest saw them complete after sending it), which no host can prove, and which hold what the host can demand\n",
                self.drive_only_lost_sectors
            );
        }
        if self.rescored_sectors > 0 {
            s += &format!(
                "lab:   scored against the host's proof: {} lost sectors of writes durable by the drive's order only, which hold less than an older write the host proved durable there: scored as the guest classed them against that write\n",
                self.rescored_sectors
            );
        }
        s
    }
}

/// Whether false findings are writes the guest sent with FUA that the drive got without it:
/// the drive, having received a plain write, kept its promise by losing it; the layer between
/// (QEMU 7.2's emulated NVMe controller ignores the FUA bit, docs/LAB.md) broke the guest's.
struct FuaCheck {
    /// The guest's workload, to tell its FUA writes (`None`: no readable run, or the drive did
    /// receive FUA writes, so dropping is not what happened).
    layout: Option<Layout>,
}

impl FuaCheck {
    fn new(layout: Option<Layout>, fua_received: u64) -> FuaCheck {
        FuaCheck { layout: layout.filter(|l| fua_received == 0 && l.spec().flush.fua_percent > 0) }
    }

    /// The explanation when every false finding of a cycle is a FUA write.
    fn explain(&self, findings: &[Finding], gt: &GroundTruth) -> Option<String> {
        let layout = self.layout.as_ref()?;
        let in_truth = |f: &Finding| gt.extents.iter().any(|t| t.offset < f.offset + f.length && f.offset < t.offset + t.length);
        let mut ids = Vec::new();
        for f in findings.iter().filter(|f| !in_truth(f)) {
            match f.expected {
                Shown::Write { write_id, .. } if layout.plan(write_id).fua => ids.push(write_id),
                _ => return None,
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let shown: Vec<String> = ids.iter().take(5).map(|i| i.to_string()).collect();
        Some(format!(
            "{} false findings, all on writes the guest sent with FUA (write {}{}) and the drive received without it (it received no FUA write at all): the emulated NVMe controller dropped the FUA bit",
            findings.iter().filter(|f| !in_truth(f)).count(),
            shown.join(", "),
            if ids.len() > 5 { ", ..." } else { "" }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_drivers::blockdev::IdleController;

    const SECTOR: u64 = 512;

    fn write(id: u64, index: u32) -> Shown {
        Shown::Write { write_id: id, cycle: 2, port: 0, addr: 0, index, count: 32 }
    }

    fn finding(class: FindingClass, offset: u64, end: u64, expected: Shown) -> Finding {
        Finding { class, offset, length: end - offset, expected, found: Shown::Zeros {}, cycle: 4, detail: String::new() }
    }

    fn extent(class: TruthClass, offset: u64, end: u64, id: u64) -> TruthExtent {
        TruthExtent { offset, length: end - offset, class, write_id: Some(id), port: None }
    }

    /// Issue #25's run (`lab run lab-power-cut-flush.toml --sim lies-about-flush --multipath
    /// off`, cycle 4): write 2104, durable since cycle 2 over [8654848, 8671232), torn at two
    /// places; a newer write 5778 over [8667136, 8716288), which the drive completed before a
    /// flush the guest had sent already (durable by the drive's order only), lost. The guest
    /// held the overlap to 2104, found zeros, and reported 2104 torn there.
    fn issue_25() -> (GroundTruth, Vec<Finding>) {
        let gt = GroundTruth {
            extents: vec![
                extent(TruthClass::TornWrite, 8654848, 8658944, 2104),
                extent(TruthClass::TornWrite, 8663040, 8667136, 2104),
                extent(TruthClass::LostWrite, 8667136, 8716288, 5778),
            ],
            dead: false,
            disturbed: Vec::new(),
        };
        let findings = vec![
            finding(FindingClass::TornWrite, 8654848, 8658944, write(2104, 0)),
            finding(FindingClass::TornWrite, 8663040, 8671232, write(2104, 16)),
        ];
        (gt, findings)
    }

    fn at(cycle: u32, truth: GroundTruth) -> CycleTruth {
        CycleTruth { cycle, truth, durable_torn: BTreeSet::new() }
    }

    fn checks(findings: &[Finding]) -> String {
        serde_json::json!({ "cycle": 4, "findings": findings }).to_string() + "\n"
    }

    fn run(gt: GroundTruth, findings: &[Finding], durable: &dyn Fn(u64) -> bool) -> Reconciled {
        let host = HostRecord { durable, layout: None };
        reconcile("lies-about-flush", "checks.jsonl", &checks(findings), &[at(4, gt)], Some(&host), 0, SECTOR).unwrap()
    }

    #[test]
    fn a_sector_lost_of_a_write_durable_by_the_drives_order_only_scores_against_the_write_the_host_proved() {
        let (gt, findings) = issue_25();
        let r = run(gt, &findings, &|id| id == 2104);
        assert_eq!(r.disagreements, Vec::<String>::new(), "{}", r.table());
        let torn = &r.scores["torn_write"];
        // 8 + 8 sectors torn in truth, and the 8 of the overlap held to 2104.
        assert_eq!((torn.injected, torn.detected, torn.misclassified, torn.false_findings), (24, 24, 0, 0), "{}", r.table());
        assert_eq!(r.rescored_sectors, 8);
        // The rest of 5778's extent holds what the host can demand: not scored.
        assert_eq!(r.drive_only_lost_sectors, (8716288 - 8671232) / SECTOR);
        assert!(!r.scores.contains_key("lost_write"), "{}", r.table());
        assert!(r.table().contains("scored against the host's proof: 8 lost sectors"), "{}", r.table());
    }

    /// Without the rescoring (the overlap kept as the drive's `lost_write` of 5778, the rest of
    /// 5778 apart, as before), the same cycle disagrees as the issue reported.
    #[test]
    fn the_same_sectors_held_to_the_drives_class_disagree_as_the_issue_reported() {
        let (mut gt, findings) = issue_25();
        gt.extents[2] = extent(TruthClass::LostWrite, 8667136, 8671232, 5778);
        let check = CycleCheck { cycle: 4, findings: &findings, truth: Some(gt) };
        let problem = score_cycle(&check, SECTOR, &mut BTreeMap::new()).expect("a disagreement");
        assert!(
            problem.starts_with("cycle 4: sector at byte 86") && problem.ends_with("is lost_write in truth, found as torn_write"),
            "{problem}"
        );
    }

    #[test]
    fn only_an_older_write_the_host_proved_and_a_class_that_says_older_content_rescore() {
        let (gt, mut findings) = issue_25();
        // 2104 not provable either: nothing the host could demand there; the finding stays
        // against the drive's class (and the drive's truth of 2104's sectors is kept).
        let r = run(gt.clone(), &findings, &|_| false);
        assert_eq!(r.rescored_sectors, 0);
        assert_eq!(r.disagreements.len(), 1, "{:?}", r.disagreements);
        // A write newer than the one lost cannot be the one the host held the sector to.
        findings[1].expected = write(6000, 0);
        let r = run(gt.clone(), &findings, &|id| id == 2104 || id == 6000);
        assert_eq!(r.rescored_sectors, 0);
        assert!(r.disagreements[0].contains("found as torn_write"), "{:?}", r.disagreements);
        // Corruption is no claim about which write should be there.
        findings[1] = finding(FindingClass::Corruption, 8663040, 8671232, write(2104, 16));
        let r = run(gt, &findings, &|id| id == 2104);
        assert_eq!(r.rescored_sectors, 0);
        assert!(!r.disagreements.is_empty());
    }

    /// The same run, cycle 3: write 742 (cycle 1) was durable by the drive's order only and
    /// lost at cut 1; in cycle 3 a newer write (2489) covered part of it, so the truth names
    /// the rest of 742 torn (a durable write partly behind). The guest held those sectors to
    /// nothing newer than before the run, found zeros there, and rightly reported nothing.
    /// A unit torn in flight at the cut is another matter: a write never completed, which the
    /// guest holds to all or nothing, and must report.
    #[test]
    fn a_torn_write_durable_by_the_drives_order_only_is_apart_and_a_unit_torn_in_flight_is_not() {
        let gt = GroundTruth {
            extents: vec![extent(TruthClass::TornWrite, 23924736, 23953408, 742), extent(TruthClass::TornWrite, 23961600, 23965696, 742)],
            dead: false,
            disturbed: Vec::new(),
        };
        let host = HostRecord { durable: &|_| false, layout: None };
        let durable_torn = BTreeSet::from([(None, 742)]);
        let ct = CycleTruth { cycle: 3, truth: gt.clone(), durable_torn };
        let r = reconcile("m", "c", &checks(&[]).replace("\"cycle\":4", "\"cycle\":3"), &[ct], Some(&host), 0, SECTOR).unwrap();
        assert_eq!((r.disagreements.len(), r.drive_only_lost_sectors), (0, 64), "{r:?}");
        // Torn in flight (not durable at the drive): missed, and said so.
        let r = reconcile("m", "c", &checks(&[]).replace("\"cycle\":4", "\"cycle\":3"), &[at(3, gt)], Some(&host), 0, SECTOR).unwrap();
        assert_eq!(r.drive_only_lost_sectors, 0);
        assert_eq!(r.scores["torn_write"].missed, 64);
        assert!(r.disagreements[0].ends_with("is torn_write in truth, not found"), "{:?}", r.disagreements);
    }

    #[test]
    fn a_line_that_cannot_be_read_names_its_place() {
        let e = reconcile("m", "lab/checks.jsonl", "{\"cycle\": 1, \"findings\": []}\nnot json\n", &[], None, 0, SECTOR).unwrap_err();
        assert!(e.to_string().starts_with("lab/checks.jsonl:2: not a JSON line"), "{e}");
        let e = reconcile("m", "c", "{\"findings\": []}\n", &[], None, 0, SECTOR).unwrap_err();
        assert_eq!(e.to_string(), "c:1: the line names no cycle");
        let e = reconcile("m", "c", "{\"cycle\": 3, \"findings\": 7}\n", &[], None, 0, SECTOR).unwrap_err();
        assert!(e.to_string().starts_with("c:1: its findings are unreadable"), "{e}");
        // Findings with no ground truth taken, and a truth the guest never recorded against.
        let gt = GroundTruth { extents: Vec::new(), dead: false, disturbed: Vec::new() };
        let r = reconcile("m", "c", "{\"cycle\": 3, \"findings\": []}\n", &[at(1, gt.clone()), at(2, gt)], None, 0, SECTOR).unwrap();
        assert_eq!(
            r.disagreements,
            vec![
                "cycle 3: the guest recorded findings, the host took no ground truth".to_string(),
                "the host took the ground truth of 2 cycles, the guest recorded the findings of 0".to_string()
            ]
        );
    }

    fn dead(detail: String) -> Finding {
        Finding::dead_device(5, &detail)
    }

    /// The dead device's detail is the drivers' own text for a path not found: the marker
    /// read here is the one `IdleController` writes.
    #[test]
    fn a_dead_device_with_a_controller_stuck_initialising_on_a_live_drive_is_the_labs_failure() {
        let stuck = IdleController { name: "nvme0".into(), pci_address: Some("0000:01:00.0".into()), state: "connecting".into() };
        let detail =
            format!("the device did not answer a read within 30 s after the fault: the namespace ...:\n  /dev/nvme1n1: ...\n  {stuck}");
        let live = GroundTruth { extents: Vec::new(), dead: false, disturbed: Vec::new() };
        let why = stuck_controller(&[dead(detail.clone())], &live).expect("named");
        assert!(
            why.contains("controller nvme0 pci=0000:01:00.0 is present in state \"connecting\"") && why.contains("the lab failed"),
            "{why}"
        );
        // The drive dark: a dead device is the drive's.
        assert!(stuck_controller(&[dead(detail.clone())], &GroundTruth { dead: true, ..live.clone() }).is_none());
        // No controller seen at all: nothing says the lab failed.
        assert!(stuck_controller(&[dead("no block device matches serial=X".into())], &live).is_none());
        // A controller the kernel gave up on is not "stuck initialising".
        let gone = IdleController { state: "dead".into(), ..stuck };
        assert!(stuck_controller(&[dead(format!("...\n  {gone}"))], &live).is_none());
        // And through the whole reconciliation: a lab fault, not a disagreement.
        let r =
            reconcile("m", "c", &checks(&[dead(detail)]).replace("\"cycle\":4", "\"cycle\":5"), &[at(5, live)], None, 0, SECTOR).unwrap();
        assert_eq!((r.lab_faults.len(), r.disagreements.len()), (1, 0), "{r:?}");
    }
}
