//! Scoring one cycle's findings against the simulated drive's ground truth, sector by sector.

use crate::runner::CycleCheck;
use crate::verify::FindingClass;
use faultline_fixtures::TruthClass;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Counts for one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassScore {
    pub injected: u64,
    pub detected: u64,
    pub misclassified: u64,
    pub missed: u64,
    pub false_findings: u64,
}

fn truth_class(c: TruthClass) -> FindingClass {
    match c {
        TruthClass::LostWrite => FindingClass::LostWrite,
        TruthClass::TornWrite => FindingClass::TornWrite,
        TruthClass::MisdirectedWrite => FindingClass::MisdirectedWrite,
        TruthClass::Corruption => FindingClass::Corruption,
        TruthClass::Unreadable => FindingClass::Unreadable,
        TruthClass::StaleVersion => FindingClass::StaleVersion,
        TruthClass::Resurrection => FindingClass::Resurrection,
        // A read through one port that missed a write through the other: an older version
        // than the drive holds. Scored as stale until the harness has a class of its own for
        // a port serving stale data (issue #10).
        TruthClass::StaleRead => FindingClass::StaleVersion,
    }
}

/// The scores by class name.
type Scores = BTreeMap<&'static str, ClassScore>;

/// Scores one cycle into `scores`; returns a description of the first disagreement.
pub fn score_cycle(r: &CycleCheck<'_>, sector: u64, scores: &mut BTreeMap<&'static str, ClassScore>) -> Option<String> {
    let (truth_extents, truth_dead) = r.truth.as_ref().map_or((&[][..], false), |t| (&t.extents[..], t.dead));
    let mut problem = None;
    let by_sector = BySector::new(r, truth_extents, sector);
    by_sector.score_truth(r, sector, scores, &mut problem);
    by_sector.score_false_findings(r, sector, scores, &mut problem);
    score_port_disturbances(r, scores, &mut problem);
    score_dead_device(r, truth_dead, scores, &mut problem);
    problem
}

/// Keeps `p` as the cycle's problem unless one came first.
fn note(problem: &mut Option<String>, p: String) {
    if problem.is_none() {
        *problem = Some(p);
    }
}

/// One cycle's sectors, by sector number: the class the ground truth gives each, and the
/// classes the cycle's findings give each (a dead device aside).
struct BySector {
    truth: HashMap<u64, FindingClass>,
    found: HashMap<u64, Vec<FindingClass>>,
}

impl BySector {
    /// The sectors `r`'s findings and the truth's `extents` cover, `sector` bytes each.
    fn new(r: &CycleCheck<'_>, extents: &[faultline_fixtures::TruthExtent], sector: u64) -> Self {
        let mut found: HashMap<u64, Vec<FindingClass>> = HashMap::new();
        for f in r.findings {
            if f.class == FindingClass::DeadDevice {
                continue;
            }
            for s in (f.offset / sector)..((f.offset + f.length) / sector) {
                found.entry(s).or_default().push(f.class);
            }
        }
        let mut truth: HashMap<u64, FindingClass> = HashMap::new();
        for t in extents {
            for s in (t.offset / sector)..((t.offset + t.length) / sector) {
                truth.insert(s, truth_class(t.class));
            }
        }
        BySector { truth, found }
    }

    /// Each sector the truth marks: injected, then detected, misclassified or missed.
    fn score_truth(&self, r: &CycleCheck<'_>, sector: u64, scores: &mut Scores, problem: &mut Option<String>) {
        for (&s, &class) in &self.truth {
            let e = scores.entry(class.name()).or_default();
            e.injected += 1;
            match self.found.get(&s) {
                Some(v) if v.contains(&class) => e.detected += 1,
                Some(v) => {
                    e.misclassified += 1;
                    let names: Vec<&str> = v.iter().map(|c| c.name()).collect();
                    note(
                        problem,
                        format!(
                            "cycle {}: sector at byte {} is {} in truth, found as {}",
                            r.cycle,
                            s * sector,
                            class.name(),
                            names.join(", ")
                        ),
                    );
                }
                None => {
                    e.missed += 1;
                    note(problem, format!("cycle {}: sector at byte {} is {} in truth, not found", r.cycle, s * sector, class.name()));
                }
            }
        }
    }

    /// Each sector found where the truth marks none: a false finding of each class found there.
    fn score_false_findings(&self, r: &CycleCheck<'_>, sector: u64, scores: &mut Scores, problem: &mut Option<String>) {
        for (&s, classes) in &self.found {
            if !self.truth.contains_key(&s) {
                for c in classes {
                    scores.entry(c.name()).or_default().false_findings += 1;
                }
                let f = r.findings.iter().find(|f| f.offset / sector <= s && s < (f.offset + f.length) / sector);
                let f = f.map_or_else(String::new, |f| format!("{} at byte {} (+{}): {}", f.class.name(), f.offset, f.length, f.detail));
                note(problem, format!("cycle {}: false finding at byte {}: {f}", r.cycle, s * sector));
            }
        }
    }
}

/// Port disturbances: the stalls the drive injected this cycle (one fault per cycle, so the
/// drive's fault count is the cycle) against the ports `port_disturbance` findings name.
fn score_port_disturbances(r: &CycleCheck<'_>, scores: &mut Scores, problem: &mut Option<String>) {
    let injected: Vec<String> = r
        .truth
        .as_ref()
        .map(|t| {
            t.disturbed.iter().filter(|(_, cut)| *cut == u64::from(r.cycle)).map(|(p, _)| crate::port::PortId(*p).to_string()).collect()
        })
        .unwrap_or_default();
    let named: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.class == FindingClass::PortDisturbance)
        .filter_map(|f| f.detail.strip_prefix("port ").and_then(|d| d.split(',').next()).map(str::to_string))
        .collect();
    if injected.is_empty() && named.is_empty() {
        return;
    }
    let e = scores.entry(FindingClass::PortDisturbance.name()).or_default();
    for p in &injected {
        e.injected += 1;
        if named.contains(p) {
            e.detected += 1;
        } else {
            e.missed += 1;
            note(problem, format!("cycle {}: port {p} was stalled by the drive, no port_disturbance", r.cycle));
        }
    }
    for p in named.iter().filter(|p| !injected.contains(p)).collect::<std::collections::BTreeSet<_>>() {
        e.false_findings += 1;
        note(problem, format!("cycle {}: port_disturbance on port {p}, which the drive did not stall", r.cycle));
    }
}

/// A dead device: whether the truth's (`truth_dead`) was reported, or one reported for a live device.
fn score_dead_device(r: &CycleCheck<'_>, truth_dead: bool, scores: &mut Scores, problem: &mut Option<String>) {
    let dead_found = r.findings.iter().any(|f| f.class == FindingClass::DeadDevice);
    if !truth_dead && !dead_found {
        return;
    }
    let e = scores.entry(FindingClass::DeadDevice.name()).or_default();
    match (truth_dead, dead_found) {
        (true, true) => {
            e.injected += 1;
            e.detected += 1;
        }
        (true, false) => {
            e.injected += 1;
            e.missed += 1;
            note(problem, format!("cycle {}: device dead, not reported", r.cycle));
        }
        (false, _) => {
            e.false_findings += 1;
            note(problem, format!("cycle {}: dead_device reported for a live device", r.cycle));
        }
    }
}
