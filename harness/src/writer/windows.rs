//! Per-port samples in time windows around a fault, on one monotonic clock shared by every
//! port's writer: completions, bytes, I/O errors, write latency (hdrhistogram) and the longest
//! gap between completions, per window; and a coarse series for the report.
//!
//! The windows are phases set from outside (the runner's thread): `warmup` until the baseline
//! starts, `baseline` until the fault, `fault` from the fault until the faulted port is back
//! and ready plus a settle time, `after` from then on. A completion is counted in the phase its
//! timestamp falls in (the bounds are instants, so a completion reaped late is still put where
//! it happened). Each port's writer records only into its own slot, so the locks are never
//! contended on the I/O path; the runner reads them once the writers are done.

use faultline_drivers::latency::LatencyHistogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The phases of a cycle, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Warmup = 0,
    Baseline = 1,
    Fault = 2,
    After = 3,
}

const PHASES: usize = 4;
/// Width of one bucket of the series, for the report's per-port charts.
pub const BUCKET: Duration = Duration::from_millis(25);
/// Late wake-ups kept per cycle (at one per 2 ms, over a minute); later ones only count in
/// the per-phase maximum.
const MAX_LATE_LOG: usize = 1 << 15;
/// Buckets kept per port and cycle (25 s at 25 ms); later completions are not charted.
const MAX_BUCKETS: usize = 1000;
/// Not set yet.
const UNSET: u64 = u64::MAX;

/// What one port did in one window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowFigures {
    /// Length of the window in µs.
    pub duration_us: u64,
    pub completions: u64,
    pub bytes: u64,
    pub io_errors: u64,
    /// Bytes per second over the window.
    pub throughput_bps: f64,
    /// The longest the port went without a write completing, in µs: from the start of the
    /// window to its first completion, between completions, and from the last completion to
    /// the end of the window; in the fault window, to the next completion even if it came
    /// after the window (a stall the fault began lasts until the port completes again).
    pub max_gap_us: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// Write latency over a window, in µs (hdrhistogram, 3 significant figures; `max` exact).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    fn of(h: &LatencyHistogram) -> Option<Latency> {
        let s = h.summary()?;
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Latency { p50_us: us(s.p50_ns), p99_us: us(s.p99_ns), p999_us: us(h.percentile_ns(99.9)), max_us: us(s.max_ns) })
    }
}

/// One bucket of a port's series: completions and bytes, and the longest latency (µs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub completions: u32,
    pub bytes: u64,
    pub max_latency_us: u32,
}

#[derive(Default)]
struct Acc {
    completions: u64,
    bytes: u64,
    errors: u64,
    hist: Option<LatencyHistogram>,
    first: Option<Instant>,
    last: Option<Instant>,
    max_gap: Duration,
}

#[derive(Default)]
struct Slot {
    acc: [Acc; PHASES],
    series: Vec<Bucket>,
}

/// The shared clock, the phase bounds and one slot per port.
pub struct Windows {
    epoch: Instant,
    /// When each phase started, ns since `epoch` (`UNSET` until then).
    bounds: [AtomicU64; PHASES],
    slots: Vec<Mutex<Slot>>,
    /// Per phase, the longest a thread of the harness that only sleeps was late waking up,
    /// in µs: how long the machine kept the harness from running.
    late_us: [AtomicU64; PHASES],
    /// Every late wake-up of that thread: (ns since `epoch` it woke at, µs late), in order.
    late_log: Mutex<Vec<(u64, u64)>>,
    /// Per port, the late wake-ups of the agent that runs it on another host (its own
    /// measure, placed on this clock), in order.
    port_late: Vec<Mutex<Vec<(u64, u64)>>>,
}

impl std::fmt::Debug for Windows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Windows").field("ports", &self.slots.len()).finish()
    }
}

impl Windows {
    /// Windows for `ports` ports; the warm-up starts now.
    pub fn new(ports: usize) -> Windows {
        let w = Windows {
            epoch: Instant::now(),
            bounds: std::array::from_fn(|_| AtomicU64::new(UNSET)),
            slots: (0..ports).map(|_| Mutex::new(Slot::default())).collect(),
            late_us: std::array::from_fn(|_| AtomicU64::new(0)),
            late_log: Mutex::new(Vec::new()),
            port_late: (0..ports).map(|_| Mutex::new(Vec::new())).collect(),
        };
        w.bounds[0].store(0, Ordering::Release);
        w
    }

    /// The instant every port's timeline counts from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Starts `phase` now (and ends the one before).
    pub fn enter(&self, phase: Phase) {
        self.enter_at(phase, Instant::now());
    }

    /// Starts `phase` at `at`.
    pub fn enter_at(&self, phase: Phase, at: Instant) {
        let _ = self.bounds[phase as usize].compare_exchange(UNSET, self.ns(at), Ordering::AcqRel, Ordering::Acquire);
    }

    /// When `phase` started, from the epoch.
    pub fn started(&self, phase: Phase) -> Option<Duration> {
        let v = self.bounds[phase as usize].load(Ordering::Acquire);
        (v != UNSET).then(|| Duration::from_nanos(v))
    }

    fn phase_of(&self, ns: u64) -> usize {
        (0..PHASES).rev().find(|&p| self.bounds[p].load(Ordering::Acquire) <= ns).unwrap_or(0)
    }

    fn phase_start(&self, p: usize) -> Instant {
        self.epoch + Duration::from_nanos(self.bounds[p].load(Ordering::Acquire).min(u64::MAX - 1))
    }

    /// Records one write completion of `port` (successful or not), completed at `at` after
    /// `latency`.
    pub fn record(&self, port: usize, at: Instant, latency: Duration, bytes: u64, ok: bool) {
        let Some(slot) = self.slots.get(port) else { return };
        let ns = self.ns(at);
        let p = self.phase_of(ns);
        let start = self.phase_start(p);
        let mut s = slot.lock().unwrap_or_else(|e| e.into_inner());
        let a = &mut s.acc[p];
        if ok {
            let gap = at.saturating_duration_since(a.last.unwrap_or(start).max(start));
            a.max_gap = a.max_gap.max(gap);
            a.last = Some(a.last.map_or(at, |l| l.max(at)));
            a.first = Some(a.first.map_or(at, |f| f.min(at)));
            a.completions += 1;
            a.bytes += bytes;
            a.hist.get_or_insert_with(LatencyHistogram::new).record(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
            let b = (ns / BUCKET.as_nanos() as u64) as usize;
            if b < MAX_BUCKETS {
                if s.series.len() <= b {
                    s.series.resize(b + 1, Bucket::default());
                }
                let k = &mut s.series[b];
                k.completions += 1;
                k.bytes += bytes;
                k.max_latency_us = k.max_latency_us.max(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX));
            }
        } else {
            a.errors += 1;
        }
    }

    /// What `port` did in `phase`, the window ending where the next phase started (or at
    /// `end` for the last one started).
    pub fn figures(&self, port: usize, phase: Phase, end: Instant) -> Option<WindowFigures> {
        let p = phase as usize;
        let start_ns = self.bounds[p].load(Ordering::Acquire);
        if start_ns == UNSET {
            return None;
        }
        let start = self.phase_start(p);
        let stop = ((p + 1)..PHASES)
            .map(|q| self.bounds[q].load(Ordering::Acquire))
            .find(|&v| v != UNSET)
            .map_or(end, |v| self.epoch + Duration::from_nanos(v));
        let s = self.slots.get(port)?.lock().unwrap_or_else(|e| e.into_inner());
        let a = &s.acc[p];
        let duration = stop.saturating_duration_since(start);
        // In the fault window (the one judged), a stall that began there lasts until the port's
        // next completion, in whichever later window that came (else until the end of this
        // one); the other windows end where they end.
        let resumed = if phase == Phase::Fault { s.acc[p + 1..].iter().find_map(|n| n.first).unwrap_or(stop).max(stop) } else { stop };
        let tail = resumed.saturating_duration_since(a.last.unwrap_or(start));
        let secs = duration.as_secs_f64();
        Some(WindowFigures {
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            completions: a.completions,
            bytes: a.bytes,
            io_errors: a.errors,
            throughput_bps: if secs > 0.0 { a.bytes as f64 / secs } else { 0.0 },
            max_gap_us: u64::try_from(a.max_gap.max(tail).as_micros()).unwrap_or(u64::MAX),
            latency: a.hist.as_ref().and_then(Latency::of),
        })
    }

    /// A thread that asked to sleep until `wanted` woke up at `woke`: the harness was kept
    /// from running for the difference (counted in the phase it woke up in).
    pub fn record_lateness(&self, wanted: Instant, woke: Instant) {
        let ns = self.ns(woke);
        let p = self.phase_of(ns);
        let us = u64::try_from(woke.saturating_duration_since(wanted).as_micros()).unwrap_or(u64::MAX);
        self.late_us[p].fetch_max(us, Ordering::AcqRel);
        let mut log = self.late_log.lock().unwrap_or_else(|e| e.into_inner());
        if us > 0 && log.len() < MAX_LATE_LOG {
            log.push((ns, us));
        }
    }

    /// A late wake-up of the agent that runs `port` on another host, on this host's clock.
    pub fn record_port_lateness(&self, port: usize, wanted: Instant, woke: Instant) {
        let Some(log) = self.port_late.get(port) else { return };
        let us = u64::try_from(woke.saturating_duration_since(wanted).as_micros()).unwrap_or(u64::MAX);
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        if us > 0 && log.len() < MAX_LATE_LOG {
            let at = (self.ns(woke), us);
            // In order: an agent's batch may reach here after some of its samples.
            let i = log.partition_point(|&(t, _)| t <= at.0);
            log.insert(i, at);
        }
    }

    /// The longest the agent that runs `port` on another host was late in `phase` (zero for
    /// a port on this host).
    pub fn port_lateness(&self, port: usize, phase: Phase) -> Duration {
        let Some(log) = self.port_late.get(port) else { return Duration::ZERO };
        let log = log.lock().unwrap_or_else(|e| e.into_inner());
        Duration::from_micros(log.iter().filter(|&&(ns, _)| self.phase_of(ns) == phase as usize).map(|&(_, us)| us).max().unwrap_or(0))
    }

    /// The most the harness was kept from running, summed over the late wake-ups within any
    /// stretch of `span` in `phase`: how much of a write of that latency, or of a stall that
    /// long, the machine rather than the drive may explain. Several short delays in one write's
    /// life add up, so this is at least [`Windows::lateness`] of the phase (for a span past
    /// one wake-up). With `port`, the larger of this host's and that port's agent's (on its
    /// own host, where its writes are timed).
    pub fn starved_within(&self, phase: Phase, span: Duration, port: Option<usize>) -> Duration {
        let here = self.late_log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let there = port.and_then(|i| self.port_late.get(i)).map(|l| l.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let most = self.most_within(&here, phase, span).max(there.map_or(0, |l| self.most_within(&l, phase, span)));
        Duration::from_micros(most)
    }

    /// The largest sum of late µs in `log` within any stretch of `span` in `phase`.
    ///
    /// Each wake-up counts by what it was late past the log's usual lateness in the baseline
    /// (its median there): a host whose timers always fire a millisecond late (a slow virtual
    /// machine) is not starved by that millisecond, each time, for the length of a stall.
    fn most_within(&self, log: &[(u64, u64)], phase: Phase, span: Duration) -> u64 {
        let p = phase as usize;
        let span_ns = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        let mut usual: Vec<u64> = log.iter().filter(|&&(ns, _)| self.phase_of(ns) == Phase::Baseline as usize).map(|&(_, us)| us).collect();
        usual.sort_unstable();
        let floor = usual.get(usual.len() / 2).copied().unwrap_or(0);
        let (mut from, mut sum, mut most) = (0usize, 0u64, 0u64);
        let inside: Vec<(u64, u64)> =
            log.iter().filter(|&&(ns, _)| self.phase_of(ns) == p).map(|&(ns, us)| (ns, us.saturating_sub(floor))).collect();
        for (to, &(ns, us)) in inside.iter().enumerate() {
            sum += us;
            // A wake-up `us` late covers the `us` before it: it counts while that overlaps the
            // stretch ending here.
            while from < to && inside[from].0 + span_ns < ns {
                sum -= inside[from].1;
                from += 1;
            }
            most = most.max(sum);
        }
        most
    }

    /// The longest the harness was kept from running in `phase`.
    pub fn lateness(&self, phase: Phase) -> Duration {
        Duration::from_micros(self.late_us[phase as usize].load(Ordering::Acquire))
    }

    /// `port`'s series: one bucket per [`BUCKET`] from the epoch.
    pub fn series(&self, port: usize) -> Vec<Bucket> {
        self.slots.get(port).map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).series.clone()).unwrap_or_default()
    }
}

/// Where a writer's completions go: its port's slot of the windows in this process, or (an
/// agent's writer) a list the session streams to the coordinator, whose windows they join.
#[derive(Clone, Debug)]
pub enum PortSamples {
    Windows { windows: std::sync::Arc<Windows>, slot: usize },
    Wire(WireSamples),
}

impl PortSamples {
    pub fn slot(windows: &std::sync::Arc<Windows>, slot: usize) -> PortSamples {
        PortSamples::Windows { windows: std::sync::Arc::clone(windows), slot }
    }

    /// Records one write completion, completed at `at` after `latency`.
    pub fn record(&self, at: Instant, latency: Duration, bytes: u64, ok: bool) {
        match self {
            PortSamples::Windows { windows, slot } => windows.record(*slot, at, latency, bytes, ok),
            PortSamples::Wire(w) => w.record(at, latency, bytes, ok),
        }
    }
}

/// One completion as it crosses the wire: `[t_ns, latency_ns, bytes, ok]`, `t_ns` on the
/// sender's monotonic clock (`CLOCK_MONOTONIC`, which `Instant` reads on Linux).
pub type WireSample = [u64; 4];

/// Completions kept for the wire until the session takes them (every stream interval), at
/// most [`WIRE_KEPT`]: a session that stops taking them has lost its cycle anyway.
#[derive(Clone, Debug)]
pub struct WireSamples {
    kept: std::sync::Arc<Mutex<Vec<WireSample>>>,
    /// `Instant` and monotonic ns read together, to put an `Instant` on the clock's axis.
    anchor: (Instant, u64),
}

/// The most completions kept between two takes.
pub const WIRE_KEPT: usize = 1 << 20;

/// An `Instant` and the monotonic clock's nanoseconds read together: the two reads of the
/// clock around the `Instant` at most 20 us apart, and their midpoint taken. A thread
/// preempted between two bare reads would skew every time put on the clock's axis by as long
/// as it waited (seen once: a completion stamped before the cycle that made it began).
pub fn clock_anchor() -> (Instant, u64) {
    let read = || {
        let a = faultline_drivers::monotonic_ns();
        let i = Instant::now();
        let gap = faultline_drivers::monotonic_ns().saturating_sub(a);
        (gap, (i, a + gap / 2))
    };
    let mut best = read();
    for _ in 0..16 {
        if best.0 <= 20_000 {
            break;
        }
        let again = read();
        if again.0 < best.0 {
            best = again;
        }
    }
    best.1
}

impl WireSamples {
    /// Samples put on the monotonic clock's axis by `anchor` ([`clock_anchor`]).
    pub fn new(anchor: (Instant, u64)) -> WireSamples {
        WireSamples { kept: Default::default(), anchor }
    }

    fn record(&self, at: Instant, latency: Duration, bytes: u64, ok: bool) {
        let (i0, n0) = self.anchor;
        let t = match at.checked_duration_since(i0) {
            Some(d) => n0.saturating_add(d.as_nanos() as u64),
            None => n0.saturating_sub(i0.duration_since(at).as_nanos() as u64),
        };
        let mut k = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if k.len() < WIRE_KEPT {
            k.push([t, u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX), bytes, u64::from(ok)]);
        }
    }

    /// Everything recorded since the last take.
    pub fn take(&self) -> Vec<WireSample> {
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// How often a thread that only sleeps checks that the harness is being scheduled.
pub const TICK: Duration = Duration::from_millis(2);

/// The most late wake-ups an agent sends with one cycle (about 28 bytes each on the wire: a
/// quarter of a frame's bound at most, however long the cycle).
pub const WIRE_LATE: usize = 8192;

/// Sleeps [`TICK`] at a time while `ticking`, and gives back each late wake-up as `[t_ns,
/// late_us]` (`t_ns` on this host's `CLOCK_MONOTONIC`), in time order: an agent's measure of
/// how long its host kept it from running. Past [`WIRE_LATE`] of them, the most late are
/// kept: dropping the others can only excuse less of a breach, never more.
pub fn tick_until_stopped(ticking: &std::sync::atomic::AtomicBool) -> Vec<[u64; 2]> {
    let mut late = Vec::new();
    while ticking.load(Ordering::Acquire) {
        let wanted = Instant::now() + TICK;
        std::thread::sleep(TICK);
        let us = u64::try_from(Instant::now().saturating_duration_since(wanted).as_micros()).unwrap_or(u64::MAX);
        if us > 0 {
            late.push([faultline_drivers::monotonic_ns(), us]);
            if late.len() >= 2 * WIRE_LATE {
                keep_most_late(&mut late, WIRE_LATE);
            }
        }
    }
    keep_most_late(&mut late, WIRE_LATE);
    late
}

/// Keeps the `n` wake-ups of `late` that were the most late, in time order.
fn keep_most_late(late: &mut Vec<[u64; 2]>, n: usize) {
    if late.len() <= n {
        return;
    }
    late.sort_unstable_by_key(|x| std::cmp::Reverse(x[1]));
    late.truncate(n);
    late.sort_unstable_by_key(|x| x[0]);
}

/// Puts the late wake-ups of another host's agent (`[t_ns, late_us]`, its clock this one's
/// plus `offset_ns`) into `slot` of `windows`, each at its own instant on this host's clock.
pub fn record_remote_lateness(windows: &Windows, slot: usize, late: &[[u64; 2]], offset_ns: i64, anchor: (Instant, u64)) {
    for &[t, us] in late {
        let woke = remote_instant(t, offset_ns, anchor);
        windows.record_port_lateness(slot, woke.checked_sub(Duration::from_micros(us)).unwrap_or(woke), woke);
    }
}

/// An instant `t` of another host's clock (this one's plus `offset_ns`) on this host's, by the
/// `anchor`: this host's instant and its `CLOCK_MONOTONIC` read together.
fn remote_instant(t: u64, offset_ns: i64, (i0, n0): (Instant, u64)) -> Instant {
    let here = i128::from(t) - i128::from(offset_ns) - i128::from(n0);
    if here >= 0 {
        i0 + Duration::from_nanos(u64::try_from(here).unwrap_or(u64::MAX))
    } else {
        i0.checked_sub(Duration::from_nanos(u64::try_from(-here).unwrap_or(u64::MAX))).unwrap_or(i0)
    }
}

/// Puts completions another host streamed (its clock is this one's plus `offset_ns`) into
/// `slot` of `windows`: each at its own instant, mapped onto this host's clock.
pub fn record_remote(windows: &Windows, slot: usize, samples: &[WireSample], offset_ns: i64, anchor: (Instant, u64)) {
    for &[t, lat, bytes, ok] in samples {
        let at = remote_instant(t, offset_ns, anchor);
        windows.record(slot, at, Duration::from_nanos(lat), bytes, ok != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_fall_in_the_window_of_their_timestamp_and_gaps_span_window_ends() {
        let w = Windows::new(2);
        let t0 = w.epoch();
        let ms = Duration::from_millis;
        w.enter_at(Phase::Baseline, t0 + ms(10));
        w.enter_at(Phase::Fault, t0 + ms(110));
        w.enter_at(Phase::After, t0 + ms(310));
        for i in 0..10 {
            w.record(1, t0 + ms(10 + 10 * i), ms(1), 4096, true);
        }
        // A stall: nothing from 110 to 250 ms, then completions again.
        w.record(1, t0 + ms(250), ms(140), 4096, true);
        w.record(1, t0 + ms(260), ms(1), 4096, false);
        let base = w.figures(1, Phase::Baseline, t0 + ms(400)).unwrap();
        assert_eq!(base.completions, 10);
        assert_eq!(base.duration_us, 100_000);
        assert_eq!(base.max_gap_us, 10_000, "{base:?}");
        assert!((base.throughput_bps - 409_600.0).abs() < 1.0, "{base:?}");
        let fault = w.figures(1, Phase::Fault, t0 + ms(400)).unwrap();
        assert_eq!((fault.completions, fault.io_errors), (1, 1));
        assert_eq!(fault.max_gap_us, 140_000, "from the window start to its first completion: {fault:?}");
        let after = w.figures(1, Phase::After, t0 + ms(400)).unwrap();
        assert_eq!(after.max_gap_us, 90_000, "a window with no completion is one gap: {after:?}");
        // A stall that outlasts its window: from the last completion in it to the next one.
        w.record(0, t0 + ms(120), ms(1), 512, true);
        w.record(0, t0 + ms(390), ms(1), 512, true);
        let f0 = w.figures(0, Phase::Fault, t0 + ms(400)).unwrap();
        assert_eq!(f0.max_gap_us, 270_000, "{f0:?}");
        assert_eq!(w.figures(0, Phase::Baseline, t0 + ms(400)).unwrap().completions, 0);
        assert_eq!(w.series(1).iter().map(|b| b.completions).sum::<u32>(), 11);
    }

    /// Late wake-ups add up within a stretch of the span asked, only in the phase asked.
    #[test]
    fn the_harness_starved_within_a_span_sums_the_late_wake_ups_in_it() {
        let w = Windows::new(1);
        let t0 = w.epoch();
        let ms = Duration::from_millis;
        w.enter_at(Phase::Baseline, t0);
        w.enter_at(Phase::Fault, t0 + ms(100));
        // In the baseline 1, 1 and 5 ms late: usually 1 ms (counted past that). In the fault
        // window 2 ms at 110, 3 ms at 113, 4 ms at 118, 2 ms at 150: 1, 2, 3 and 1 past it.
        let late = |at: u64, by: u64| w.record_lateness(t0 + ms(at) - ms(by), t0 + ms(at));
        for (at, by) in [(30, 1), (50, 1), (70, 5), (110, 2), (113, 3), (118, 4), (150, 2)] {
            late(at, by);
        }
        assert_eq!(w.lateness(Phase::Fault), ms(4));
        assert_eq!(w.starved_within(Phase::Fault, ms(1), None), ms(3), "no two within 1 ms");
        assert_eq!(w.starved_within(Phase::Fault, ms(5), None), ms(5), "113 and 118");
        assert_eq!(w.starved_within(Phase::Fault, ms(8), None), ms(6), "110, 113 and 118");
        assert_eq!(w.starved_within(Phase::Fault, ms(100), None), ms(7), "all of the fault window's");
        assert_eq!(w.starved_within(Phase::Baseline, ms(100), None), ms(4), "5 ms, 1 past the usual");
        assert_eq!(w.starved_within(Phase::After, ms(100), None), Duration::ZERO);
        // A port's agent on another host: its own lateness (no baseline: all of it counts), the
        // larger of the two.
        w.record_port_lateness(0, t0 + ms(130) - ms(20), t0 + ms(130));
        assert_eq!(w.starved_within(Phase::Fault, ms(100), Some(0)), ms(20));
        assert_eq!(w.starved_within(Phase::Fault, ms(100), Some(1)), ms(7), "port 1's agent was never late");
        assert_eq!(w.starved_within(Phase::Fault, ms(100), None), ms(7));
        assert_eq!((w.port_lateness(0, Phase::Fault), w.port_lateness(0, Phase::Baseline)), (ms(20), Duration::ZERO));
    }

    /// An agent's late wake-ups past the wire's bound: the most late are kept, in time order.
    #[test]
    fn an_agents_late_wake_ups_keep_the_most_late_in_time_order() {
        let mut late: Vec<[u64; 2]> = (0..10u64).map(|t| [t, [5, 1, 9, 1, 7, 2, 1, 8, 1, 3][t as usize]]).collect();
        keep_most_late(&mut late, 4);
        assert_eq!(late, [[0, 5], [2, 9], [4, 7], [7, 8]]);
        let mut few = vec![[1, 2], [3, 4]];
        keep_most_late(&mut few, 4);
        assert_eq!(few, [[1, 2], [3, 4]]);
    }

    #[test]
    fn the_tail_of_a_window_counts_as_a_gap() {
        let w = Windows::new(1);
        let t0 = w.epoch();
        let ms = Duration::from_millis;
        w.enter_at(Phase::Baseline, t0);
        w.enter_at(Phase::Fault, t0 + ms(100));
        w.record(0, t0 + ms(101), ms(1), 512, true);
        let f = w.figures(0, Phase::Fault, t0 + ms(700)).unwrap();
        assert_eq!(f.max_gap_us, 599_000, "a port that stops answering after one completion: {f:?}");
    }

    /// Completions another host streamed land at their instant on this host's clock: its
    /// clock is this one's plus the offset, so a completion it stamped at `n0 + offset + 150
    /// ms` happened 150 ms after this host read `n0`.
    #[test]
    fn completions_from_another_host_are_placed_by_the_clock_offset() {
        let w = Windows::new(1);
        let ms = Duration::from_millis;
        let t0 = w.epoch();
        w.enter_at(Phase::Baseline, t0 + ms(100));
        w.enter_at(Phase::Fault, t0 + ms(200));
        let (n0, offset) = (5_000_000_000u64, -2_000_000_000i64);
        let at = |after: u64| (n0 as i64 + offset) as u64 + after * 1_000_000;
        // One in the warm-up, two in the baseline, one in the fault window.
        let batch = [[at(50), 1_000, 4096, 1], [at(150), 1_000, 4096, 1], [at(160), 1_000, 4096, 1], [at(250), 1_000, 4096, 0]];
        record_remote(&w, 0, &batch, offset, (t0, n0));
        let end = t0 + ms(300);
        assert_eq!(w.figures(0, Phase::Warmup, end).unwrap().completions, 1);
        assert_eq!(w.figures(0, Phase::Baseline, end).unwrap().completions, 2);
        let f = w.figures(0, Phase::Fault, end).unwrap();
        assert_eq!((f.completions, f.io_errors), (0, 1), "{f:?}");
        // The wire form of a local completion carries the instant back.
        let ws = WireSamples::new((t0, n0));
        PortSamples::Wire(ws.clone()).record(t0 + ms(7), ms(1), 512, true);
        assert_eq!(ws.take(), vec![[n0 + 7_000_000, 1_000_000, 512, 1]]);
        assert!(ws.take().is_empty());
    }
}
