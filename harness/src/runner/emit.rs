//! The runner's end of the event stream: the run clock (continued across a resume) and the
//! findings seen so far, so that a finding seen again in a later cycle is recorded once.

use crate::events::{Event, EventKind, Verdict};
use crate::report::Recorder;
use crate::verify::{Finding, FindingClass, Shown};
use crate::writer::CycleOutcome;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What makes a finding the same one seen again.
pub(crate) type FindingKey = (FindingClass, u64, String);

pub(crate) struct Emitter<'a> {
    pub rec: Recorder<'a>,
    t0: Instant,
    /// The run clock at `t0`: 0 for a new run, just past the last event recorded for a resumed one.
    base_ns: u64,
    seen: HashSet<FindingKey>,
    pub errors: Vec<String>,
    /// Events emitted by this process.
    pub emitted: u64,
}

impl<'a> Emitter<'a> {
    /// An emitter that goes on from what the events before recorded (nothing for a new run):
    /// the run clock, the findings already reported, the harness errors.
    pub fn new(rec: Recorder<'a>, base_ns: Option<u64>, seen: HashSet<FindingKey>, errors: Vec<String>) -> Self {
        Emitter { rec, t0: Instant::now(), base_ns: base_ns.map_or(0, |t| t + 1), seen, errors, emitted: 0 }
    }

    /// `at` on the run clock.
    pub fn ns(&self, at: Instant) -> u64 {
        self.base_ns + nanos(at.saturating_duration_since(self.t0))
    }

    pub fn now(&self) -> u64 {
        self.ns(Instant::now())
    }

    pub fn emit(&mut self, e: Event) {
        self.emitted += 1;
        self.rec.emit(&e);
    }

    pub fn error(&mut self, cycle: Option<u32>, message: String) {
        let t_ns = self.now();
        self.errors.push(message.clone());
        self.emit(Event::new(t_ns, EventKind::HarnessError { message }).with_cycle(cycle));
    }

    pub fn is_new(&self, f: &Finding) -> bool {
        !self.seen.contains(&key(f))
    }

    /// Emits each finding not seen before, once; returns how many were new.
    pub fn findings(&mut self, cycle: u32, findings: &[Finding]) -> usize {
        let t_ns = self.now();
        let mut new = 0;
        for f in findings {
            if self.seen.insert(key(f)) {
                new += 1;
                self.emit(Event::in_cycle(t_ns, cycle, EventKind::Finding { finding: f.clone() }));
            }
        }
        new
    }

    /// `cut_issued` and `device_gone` of a cycle, on the run clock (the outcome's times count
    /// from the start of the cycle's workload, within microseconds of `started`).
    /// `command` is how long the cut command took, when it returned done.
    pub fn cut(
        &mut self,
        cycle: u32,
        started: Instant,
        o: &CycleOutcome,
        planned_after_ms: Option<u64>,
        mate: Option<u32>,
        command: Option<Duration>,
    ) {
        let start = self.ns(started);
        for mut e in crate::events::cut_events(start, cycle, o, planned_after_ms) {
            if let EventKind::CutIssued { mate_step_ms, command_us, .. } = &mut e.kind {
                *mate_step_ms = mate;
                *command_us = command.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
            }
            self.emit(e);
        }
    }

    /// Ends a cycle; `harness` is the time the harness itself spent on it (`None` when unknown).
    pub fn end_cycle(&mut self, cycle: u32, verdict: Verdict, o: Option<&CycleOutcome>, harness: Option<Duration>) {
        self.end_cycle_written(cycle, verdict, o, o.map(|o| o.elapsed), harness);
    }

    /// [`Self::end_cycle`], with the write phase's duration given: a cycle whose workload
    /// failed has no outcome, but its write phase lasted.
    pub fn end_cycle_written(
        &mut self,
        cycle: u32,
        verdict: Verdict,
        o: Option<&CycleOutcome>,
        write: Option<Duration>,
        harness: Option<Duration>,
    ) {
        let t_ns = self.now();
        self.emit(Event::in_cycle(
            t_ns,
            cycle,
            EventKind::CycleEnded {
                verdict,
                writes_completed: o.map_or(0, |o| o.completed),
                bytes_written: o.map_or(0, |o| o.bytes_written),
                write_ns: write.map_or(0, nanos),
                latency_p50_ns: o.and_then(|o| o.write_latency).map(|l| l.p50_ns),
                latency_p99_ns: o.and_then(|o| o.write_latency).map(|l| l.p99_ns),
                latency_max_ns: o.and_then(|o| o.write_latency).map(|l| l.max_ns),
                max_gap_ns: o.and_then(|o| o.max_completion_gap).map(nanos),
                harness_ns: harness.map(nanos),
                zeroing: o.map(|o| o.zeroing).unwrap_or_default(),
            },
        ));
    }
}

/// What makes a finding the same one seen again: a lost or torn write is one finding however
/// many of its sectors later writes have covered since; other damage is one per place and
/// expected content.
pub(crate) fn key(f: &Finding) -> FindingKey {
    match (f.class, &f.expected) {
        (FindingClass::LostWrite | FindingClass::TornWrite, Shown::Write { write_id, .. }) => (f.class, *write_id, String::new()),
        // One per cycle and breach: the detail names the port, the metric and the figure.
        (FindingClass::PortDisturbance, _) => (f.class, u64::from(f.cycle), f.detail.clone()),
        _ => (f.class, f.offset, serde_json::to_string(&f.expected).unwrap_or_default()),
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A duration in whole µs, as the events record it.
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
