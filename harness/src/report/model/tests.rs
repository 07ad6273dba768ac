//! The model's tests (and [`renumber`], which other reports' tests share).

use super::*;
use crate::events::{Event, EventKind};
use crate::report::testdata;

#[test]
fn the_model_folds_cycles_findings_and_verdicts() {
    let mut closed = Vec::new();
    let mut m = RunModel::default();
    for e in testdata::run() {
        m.fold(&e, &mut |c| closed.push((c.cycle, c.verdict(), c.throughput_mib_s())));
    }
    assert_eq!(
        closed,
        [(1, Verdict::Clean, Some(200.0)), (2, Verdict::Findings, Some(200.0)), (3, Verdict::Findings, Some(200.0))],
        "cycle 3 has a health anomaly"
    );
    assert!(m.open.is_empty());
    assert_eq!((m.verdict(), m.implied_verdict(), m.findings_total()), (Verdict::Findings, Verdict::Findings, 1));
    assert_eq!((m.totals.cycles_ended, m.totals.cycles_with_findings, m.class(FindingClass::LostWrite).cycles), (3, 1, 1));
    assert_eq!(m.sector_bytes, Some(512));

    // A run that died mid-cycle: findings stay findings, and nothing else is clean.
    let mut ev = testdata::run();
    ev.truncate(ev.len() - 2);
    let m = RunModel::from_events(&ev);
    assert_eq!((m.open[&3].verdict(), m.verdict()), (Verdict::Error, Verdict::Findings));
    let m = RunModel::from_events(&ev[..3]);
    assert_eq!(m.verdict(), Verdict::Error, "an unfinished run without findings is not clean");
}

#[test]
fn the_model_stays_bounded_however_many_cycles_and_findings() {
    let ev = testdata::run();
    let (start, cycle) = (&ev[0], &ev[1..ev.len() - 1]);
    let mut m = RunModel::default();
    m.apply(start);
    let mut closed = 0u32;
    for k in 0..5_000u32 {
        for e in cycle {
            let mut e = e.clone();
            // Renumber the template's cycles 1..=3 into 3k+1..=3k+3.
            renumber(&mut e, 3 * k);
            m.fold(&e, &mut |_| closed += 1);
        }
    }
    assert_eq!((closed, m.totals.cycles, m.open.len()), (15_000, 15_000, 0));
    let lost = m.class(FindingClass::LostWrite);
    assert_eq!((lost.findings.total, lost.findings.kept.len(), lost.cycles), (5_000, MAX_LISTED_PER_CLASS, 5_000));
    assert_eq!((m.anomalies.total, m.anomalies.kept.len()), (5_000, MAX_MESSAGES));
    assert!(m.charts.throughput_mib_s.buckets().len() <= 2 * SERIES_BUCKETS);
    assert!(m.charts.cuts_clean.points().len() <= SCATTER_POINTS && m.charts.cuts_bad.points().len() <= SCATTER_POINTS);
    assert_eq!(m.figures.enumerate_us.n(), 15_000);
}

/// Moves a template event's cycle numbers up by `by`.
pub(crate) fn renumber(e: &mut Event, by: u32) {
    if let Some(c) = &mut e.cycle {
        *c += by;
    }
    if let EventKind::Finding { finding } = &mut e.kind {
        finding.cycle += by;
    }
}

#[test]
fn late_events_of_a_closed_cycle_count_but_do_not_reopen_it() {
    let mut m = RunModel::from_events(&testdata::run());
    m.apply(&Event::in_cycle(9, 1, EventKind::Finding { finding: testdata::finding(1, FindingClass::TornWrite, "late") }));
    assert_eq!((m.open.len(), m.findings_total(), m.totals.cycles), (0, 2, 3));
}

#[test]
fn too_many_open_cycles_close_the_oldest_as_unfinished() {
    let mut m = RunModel::default();
    let mut closed = Vec::new();
    for c in 1..=(MAX_OPEN_CYCLES as u32 + 2) {
        m.fold(&Event::in_cycle(u64::from(c), c, EventKind::CycleStarted { fault: None, off_time_ms: None }), &mut |r| {
            closed.push((r.cycle, r.verdict()))
        });
    }
    assert_eq!(closed, [(1, Verdict::Error), (2, Verdict::Error)]);
    assert_eq!((m.open.len(), m.totals.cycles_error), (MAX_OPEN_CYCLES, 2));
}

#[test]
fn identities_are_decoded_in_words() {
    let w = Shown::Write { write_id: 7, cycle: 2, port: 1, addr: 4096, index: 0, count: 8 };
    assert_eq!(describe(&w), "write 7 (cycle 2, port 1), sector 1 of 8, for byte 4096");
    assert!(describe(&Shown::ForeignRun { run_id: 0xab, write_id: 3 }).contains("00000000000000ab"));
    assert!(describe(&Shown::ReadError { errno: 5, detail: "EIO".into() }).contains("errno 5"));
}
