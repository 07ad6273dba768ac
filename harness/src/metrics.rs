//! Live metrics of a run in the Prometheus text exposition format (0.0.4), folded from the
//! event stream like every report, so they never disagree with the event log.
//!
//! [`RunMetrics`] is an [`EventSink`]: feed it every event of the run (for `faultline
//! resume`, the earlier events first) and [`RunMetrics::render`] gives the exposition text.
//! The encoding is `prometheus-client`'s (the Prometheus project's Rust client); the binary
//! writes it to a file for node_exporter's textfile collector or serves it over HTTP. Metric
//! names and meanings: `docs/METRICS.md`.
//!
//! Every sample carries the run's labels (`run_id`, `scenario`, `target`, and `model` and
//! `serial` where the target identity names them); the per-port ones also `port` (one port,
//! `A`, today: events carry no port yet). State is O(1) in cycles: counters, gauges and
//! histograms with fixed buckets, plus the current cycle's flags.

use crate::events::{Event, EventKind, EventSink, SinkError, SmartFigures, Verdict};
use crate::port::PortId;
use crate::verify::FindingClass;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

/// The content type of [`RunMetrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// The states `faultline_run_state` reports, one sample each (1 for the current one).
pub const STATES: [&str; 4] = ["starting", "running", "suspended", "ended"];

type Labels = Vec<(&'static str, String)>;

/// The metrics of one run, folded from its events.
pub struct RunMetrics {
    build: Registry,
    run: Option<Families>,
}

/// The run's families, made when `run_started` gives the run's labels.
struct Families {
    registry: Registry,
    state: Family<Labels, Gauge>,
    cycles_planned: Gauge,
    last_cycle: Gauge,
    elapsed: Gauge<f64, AtomicU64>,
    cycles: Family<Labels, Counter>,
    findings: Family<Labels, Counter>,
    anomalies: Family<Labels, Counter>,
    harness_errors: Counter,
    resumes: Counter,
    cycle_duration: Histogram,
    ready: Family<Labels, Histogram>,
    stall: Family<Labels, Histogram>,
    written: Family<Labels, Counter>,
    writes: Family<Labels, Counter>,
    zeroing: Family<Labels, Counter>,
    verified: Counter,
    smart: Smart,
    /// The cycle under way: its start on the run clock, and whether it has brought findings,
    /// health anomalies or harness errors (its verdict, as `CycleRecord::verdict` tells it).
    cycle_start_ns: Option<u64>,
    cycle_found: bool,
    cycle_errors: bool,
}

/// The last health reading, per port (`port`: the port's id letter, A for a one-port run):
/// the two controllers of a dual-port drive each answer for themselves.
#[derive(Default)]
struct Smart {
    critical_warning: Family<Labels, Gauge>,
    temperature: Family<Labels, Gauge>,
    available_spare: Family<Labels, Gauge<f64, AtomicU64>>,
    percentage_used: Family<Labels, Gauge<f64, AtomicU64>>,
    power_cycles: Family<Labels, Gauge>,
    unsafe_shutdowns: Family<Labels, Gauge>,
    media_errors: Family<Labels, Gauge>,
    error_log_entries: Family<Labels, Gauge>,
    data_written: Family<Labels, Gauge>,
}

impl Smart {
    fn register(&self, r: &mut Registry) {
        let s = self;
        r.register(
            "faultline_smart_critical_warning",
            "SMART critical-warning bits at the last health reading",
            s.critical_warning.clone(),
        );
        r.register_with_unit("faultline_smart_temperature", "SMART composite temperature", Unit::Celsius, s.temperature.clone());
        r.register_with_unit(
            "faultline_smart_available_spare",
            "SMART available spare, 0 to 1",
            Unit::Other("ratio".into()),
            s.available_spare.clone(),
        );
        r.register_with_unit(
            "faultline_smart_percentage_used",
            "SMART endurance used, 0 to 1 (may pass 1)",
            Unit::Other("ratio".into()),
            s.percentage_used.clone(),
        );
        r.register("faultline_smart_power_cycles", "SMART power cycles (the device's counter)", s.power_cycles.clone());
        r.register("faultline_smart_unsafe_shutdowns", "SMART unsafe shutdowns (the device's counter)", s.unsafe_shutdowns.clone());
        r.register("faultline_smart_media_errors", "SMART media and data integrity errors (the device's counter)", s.media_errors.clone());
        r.register("faultline_smart_error_log_entries", "SMART error-log entries (the device's counter)", s.error_log_entries.clone());
        r.register_with_unit(
            "faultline_smart_data_written",
            "SMART data units written, in bytes (1 unit = 512,000 bytes)",
            Unit::Bytes,
            s.data_written.clone(),
        );
    }
}

impl Default for RunMetrics {
    fn default() -> Self {
        RunMetrics::new()
    }
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `model` and `serial` where a target identity names them (`block:model=X serial=Y ...`).
fn identity_labels(target: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for word in target.split_whitespace() {
        let word = word.strip_prefix("block:").unwrap_or(word);
        for key in ["model", "serial"] {
            if let Some(v) = word.strip_prefix(key).and_then(|w| w.strip_prefix('=')) {
                out.push((key, v.to_string()));
            }
        }
    }
    out
}

fn port_labels() -> Labels {
    vec![("port", PortId::A.default_name())]
}

impl RunMetrics {
    pub fn new() -> Self {
        let mut build = Registry::default();
        let info = Family::<Labels, Gauge>::default();
        build.register("faultline_build_info", "The faultline build that runs the run (always 1)", info.clone());
        info.get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_string())]).set(1);
        RunMetrics { build, run: None }
    }

    /// The exposition text: the build's gauge, and the run's families once it has started.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_text::encode(&mut out, &self.build).expect("writing to a String cannot fail");
        if let Some(f) = &self.run {
            prometheus_text::encode(&mut out, &f.registry).expect("writing to a String cannot fail");
        }
        out
    }

    /// The state the events so far put the run in (`starting` before `run_started`).
    pub fn state(&self) -> &'static str {
        let Some(f) = &self.run else { return STATES[0] };
        STATES.iter().find(|s| f.state.get_or_create(&vec![("state", s.to_string())]).get() == 1).copied().unwrap_or(STATES[1])
    }

    pub fn apply(&mut self, e: &Event) {
        if let EventKind::RunStarted { run_id, scenario, target, cycles_planned, .. } = &e.kind {
            let mut labels: Vec<(Cow<'static, str>, Cow<'static, str>)> = vec![
                ("run_id".into(), run_id.clone().into()),
                ("scenario".into(), scenario.clone().into()),
                ("target".into(), target.clone().into()),
            ];
            labels.extend(identity_labels(target).into_iter().map(|(k, v)| (k.into(), v.into())));
            let f = Families::new(Registry::with_labels(labels.into_iter()));
            f.cycles_planned.set(i64::from(*cycles_planned));
            f.set_state("running");
            self.run = Some(f);
            return;
        }
        let Some(f) = &mut self.run else { return };
        f.elapsed.set(secs(e.t_ns).max(f.elapsed.get()));
        f.apply(e);
    }
}

impl EventSink for RunMetrics {
    fn event(&mut self, e: &Event) -> Result<(), SinkError> {
        self.apply(e);
        Ok(())
    }
}

impl Families {
    fn new(mut r: Registry) -> Self {
        let seconds_buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 20));
        let f = Families {
            state: Family::default(),
            cycles_planned: Gauge::default(),
            last_cycle: Gauge::default(),
            elapsed: Gauge::default(),
            cycles: Family::default(),
            findings: Family::default(),
            anomalies: Family::default(),
            harness_errors: Counter::default(),
            resumes: Counter::default(),
            cycle_duration: seconds_buckets(),
            ready: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 20))),
            stall: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.00001, 2.0, 24))),
            written: Family::default(),
            writes: Family::default(),
            zeroing: Family::default(),
            verified: Counter::default(),
            smart: Smart::default(),
            cycle_start_ns: None,
            cycle_found: false,
            cycle_errors: false,
            registry: Registry::default(),
        };
        f.register(&mut r);
        f.smart.register(&mut r);
        f.seed();
        Families { registry: r, ..f }
    }

    /// Registers the run's families in `r` (the health readings' are [`Smart::register`]).
    fn register(&self, r: &mut Registry) {
        let f = self;
        r.register("faultline_run_state", "The run's state: 1 for the current one (starting, running, suspended, ended)", f.state.clone());
        r.register("faultline_cycles_planned", "Cycles the scenario plans", f.cycles_planned.clone());
        r.register("faultline_last_cycle", "The number of the last cycle that ended", f.last_cycle.clone());
        r.register_with_unit(
            "faultline_run_elapsed",
            "Run clock at the last event (continues across a resume)",
            Unit::Seconds,
            f.elapsed.clone(),
        );
        r.register("faultline_cycles", "Cycles ended, by verdict (clean, findings, error)", f.cycles.clone());
        r.register(
            "faultline_findings",
            "Distinct findings, by class (each counted in the cycle where it first appeared)",
            f.findings.clone(),
        );
        r.register("faultline_health_anomalies", "Health anomalies, by kind", f.anomalies.clone());
        r.register("faultline_harness_errors", "Harness errors (the harness could not do its job)", f.harness_errors.clone());
        r.register("faultline_resumes", "Times `faultline resume` took the run up again", f.resumes.clone());
        r.register_with_unit(
            "faultline_cycle_duration",
            "Cycle start to cycle end on the run clock",
            Unit::Seconds,
            f.cycle_duration.clone(),
        );
        r.register_with_unit(
            "faultline_time_to_ready",
            "Power-on to the device being back, by stage (enumerate, first_read)",
            Unit::Seconds,
            f.ready.clone(),
        );
        r.register_with_unit(
            "faultline_port_stall",
            "Per cycle, the slowest write completion on the port (the longest the port kept a write waiting)",
            Unit::Seconds,
            f.stall.clone(),
        );
        r.register_with_unit("faultline_written", "Bytes of writes the device acknowledged, by port", Unit::Bytes, f.written.clone());
        r.register("faultline_writes_completed", "Writes the device acknowledged, by port", f.writes.clone());
        r.register(
            "faultline_zeroing_ops",
            "Deallocates and Write Zeroes the device acknowledged (among the writes), by port and op",
            f.zeroing.clone(),
        );
        r.register_with_unit("faultline_verified", "Bytes read back and verified", Unit::Bytes, f.verified.clone());
    }

    /// Creates the series that read 0 until something happens (every verdict, finding class
    /// and state; port A's writes), so they are exposed from the start.
    fn seed(&self) {
        let f = self;
        for v in [Verdict::Clean, Verdict::Findings, Verdict::Error] {
            let _ = f.cycles.get_or_create(&vec![("verdict", v.name().to_string())]);
        }
        for c in FindingClass::ALL {
            let _ = f.findings.get_or_create(&vec![("class", c.name().to_string())]);
        }
        let _ = f.written.get_or_create(&port_labels());
        let _ = f.writes.get_or_create(&port_labels());
        for s in STATES {
            let _ = f.state.get_or_create(&vec![("state", s.to_string())]);
        }
    }

    fn set_state(&self, state: &str) {
        for s in STATES {
            self.state.get_or_create(&vec![("state", s.to_string())]).set(i64::from(s == state));
        }
    }

    fn apply(&mut self, e: &Event) {
        match &e.kind {
            EventKind::RunStarted { .. } => {}
            EventKind::CycleStarted { .. } => {
                self.cycle_start_ns = Some(e.t_ns);
                self.cycle_found = false;
                self.cycle_errors = false;
            }
            EventKind::Ready { enumerate_us, first_read_us } => {
                for (stage, us) in [("enumerate", enumerate_us), ("first_read", first_read_us)] {
                    if let Some(us) = us {
                        self.ready.get_or_create(&vec![("stage", stage.to_string())]).observe(*us as f64 / 1e6);
                    }
                }
            }
            EventKind::Health { smart, anomalies, .. } => {
                self.smart.set(smart, e.port.unwrap_or(PortId::A));
                for a in anomalies {
                    self.anomalies.get_or_create(&vec![("kind", a.kind.clone())]).inc();
                }
                self.cycle_found |= !anomalies.is_empty();
            }
            EventKind::Verified { bytes, .. } => {
                self.verified.inc_by(*bytes);
            }
            EventKind::Finding { finding } => {
                self.findings.get_or_create(&vec![("class", finding.class.name().to_string())]).inc();
                self.cycle_found = true;
            }
            EventKind::CycleEnded { .. } => self.cycle_ended(e),
            EventKind::HarnessError { .. } => {
                self.harness_errors.inc();
                self.cycle_errors |= e.cycle.is_some();
            }
            EventKind::RunResumed { .. } => {
                self.resumes.inc();
                self.set_state("running");
            }
            EventKind::RunSuspended { .. } => self.set_state("suspended"),
            EventKind::RunEnded { .. } => self.set_state("ended"),
            EventKind::CutIssued { .. }
            | EventKind::DeviceGone {}
            | EventKind::PowerRestored { .. }
            | EventKind::LinkRestored {}
            | EventKind::RecoveryCut { .. }
            | EventKind::RunStopped { .. }
            | EventKind::Note { .. }
            | EventKind::ControllerLog { .. }
            | EventKind::AgentLog { .. } => {}
            EventKind::PortWindow { name, faulted: false, fault: Some(f), .. } => {
                self.stall.get_or_create(&vec![("port", name.clone())]).observe(f.max_gap_us as f64 / 1e6);
            }
            EventKind::PortWindow { .. } | EventKind::PortPerf { .. } => {}
        }
    }

    fn cycle_ended(&mut self, e: &Event) {
        let EventKind::CycleEnded { verdict, writes_completed, bytes_written, latency_max_ns, max_gap_ns, zeroing, .. } = &e.kind else {
            return;
        };
        // The cycle's verdict as the reports tell it (`CycleRecord::verdict`).
        let verdict = match verdict {
            _ if self.cycle_errors => Verdict::Error,
            Verdict::Clean if self.cycle_found => Verdict::Findings,
            v => *v,
        };
        self.cycles.get_or_create(&vec![("verdict", verdict.name().to_string())]).inc();
        if let Some(start) = self.cycle_start_ns.take() {
            self.cycle_duration.observe(secs(e.t_ns.saturating_sub(start)));
        }
        // The longest gap between completions; logs from before it was kept give the
        // slowest completion instead (a lower bound on the gap).
        if let Some(max) = max_gap_ns.or(*latency_max_ns) {
            self.stall.get_or_create(&port_labels()).observe(secs(max));
        }
        self.written.get_or_create(&port_labels()).inc_by(*bytes_written);
        self.writes.get_or_create(&port_labels()).inc_by(*writes_completed);
        for (op, n) in [("deallocate", zeroing.deallocates), ("write_zeroes", zeroing.write_zeroes)] {
            if n > 0 {
                let mut labels = port_labels();
                labels.push(("op", op.to_string()));
                self.zeroing.get_or_create(&labels).inc_by(n);
            }
        }
        if let Some(cycle) = e.cycle {
            self.last_cycle.set(i64::from(cycle));
        }
    }
}

impl Smart {
    /// The last health reading of `port`'s controller.
    fn set(&self, smart: &SmartFigures, port: PortId) {
        let (s, p) = (self, &vec![("port", port.default_name())]);
        s.critical_warning.get_or_create(p).set(i64::from(smart.critical_warning));
        s.temperature.get_or_create(p).set(i64::from(smart.temperature_k) - 273);
        s.available_spare.get_or_create(p).set(f64::from(smart.available_spare_pct) / 100.0);
        s.percentage_used.get_or_create(p).set(f64::from(smart.percentage_used) / 100.0);
        s.power_cycles.get_or_create(p).set(int(smart.power_cycles));
        s.unsafe_shutdowns.get_or_create(p).set(int(smart.unsafe_shutdowns));
        s.media_errors.get_or_create(p).set(int(smart.media_errors));
        s.error_log_entries.get_or_create(p).set(int(smart.error_log_entries));
        s.data_written.get_or_create(p).set(int(smart.data_units_written.saturating_mul(512_000)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::HealthNote;
    use crate::ledger::Contract;
    use crate::verify::{Finding, Shown};

    /// Three cycles: the second finds a lost write, the third a health anomaly.
    fn run() -> Vec<Event> {
        let mut ev = vec![Event::new(
            0,
            EventKind::RunStarted {
                run_id: "00000000000000ab".into(),
                scenario: "demo \"q\"".into(),
                target: "block:model=M1 serial=S1 size=1".into(),
                contract: Contract::Plp,
                cycles_planned: 3,
                seed: 1,
                started_at: "x".into(),
            },
        )];
        for c in 1..=3u32 {
            let t = u64::from(c) * 1_000_000_000;
            ev.push(Event::in_cycle(t, c, EventKind::CycleStarted { fault: None, off_time_ms: None }));
            ev.push(Event::in_cycle(t + 10, c, EventKind::Ready { enumerate_us: Some(1500), first_read_us: Some(3000) }));
            let anomalies = if c == 3 { vec![HealthNote { kind: "media_errors_grew".into(), detail: "1 -> 2".into() }] } else { vec![] };
            let smart = crate::events::SmartFigures { temperature_k: 310, unsafe_shutdowns: u64::from(c), ..Default::default() };
            ev.push(Event::in_cycle(t + 20, c, EventKind::Health { smart, anomalies, pcie: None }));
            if c == 2 {
                let finding = Finding {
                    class: FindingClass::LostWrite,
                    offset: 4096,
                    length: 4096,
                    expected: Shown::Prefill {},
                    found: Shown::Zeros {},
                    cycle: c,
                    detail: "gone".into(),
                };
                ev.push(Event::in_cycle(t + 30, c, EventKind::Finding { finding }));
            }
            ev.push(Event::in_cycle(
                t + 500_000_000,
                c,
                EventKind::CycleEnded {
                    verdict: if c == 2 { Verdict::Findings } else { Verdict::Clean },
                    writes_completed: 10,
                    bytes_written: 40960,
                    write_ns: 1000,
                    latency_p50_ns: Some(100),
                    latency_p99_ns: Some(200),
                    latency_max_ns: Some(300),
                    max_gap_ns: None,
                    harness_ns: None,
                    zeroing: crate::writer::ZeroingDone {
                        deallocates: u64::from(c),
                        deallocated_bytes: 4096 * u64::from(c),
                        write_zeroes: u64::from(c == 3),
                        zeroed_bytes: 8192 * u64::from(c == 3),
                        formats: 0,
                    },
                },
            ));
        }
        ev.push(Event::new(4_000_000_000, EventKind::RunEnded { verdict: Verdict::Findings, exit_code: 1 }));
        ev
    }

    fn sample<'a>(text: &'a str, name_and_labels: &str) -> Option<&'a str> {
        text.lines().find_map(|l| l.strip_prefix(name_and_labels).and_then(|r| r.strip_prefix(' ')))
    }

    #[test]
    fn the_run_folds_into_counters_gauges_and_histograms() {
        let mut m = RunMetrics::new();
        assert!(m.render().contains("faultline_build_info{version=\""), "{}", m.render());
        assert_eq!(m.state(), "starting");
        for e in run() {
            m.apply(&e);
        }
        let t = m.render();
        let run = r#"run_id="00000000000000ab",scenario="demo \"q\"",target="block:model=M1 serial=S1 size=1",model="M1",serial="S1""#;
        assert!(t.contains(&format!("faultline_cycles_total{{{run},verdict=\"findings\"}} 2")), "{t}");
        assert!(t.contains(&format!("faultline_cycles_total{{{run},verdict=\"clean\"}} 1")), "{t}");
        assert!(t.contains(&format!("faultline_findings_total{{{run},class=\"lost_write\"}} 1")), "{t}");
        assert!(t.contains(&format!("faultline_findings_total{{{run},class=\"torn_write\"}} 0")), "every class: {t}");
        assert!(t.contains(&format!("faultline_run_state{{{run},state=\"ended\"}} 1")), "{t}");
        assert!(t.contains(&format!("faultline_run_state{{{run},state=\"running\"}} 0")), "{t}");
        assert!(t.contains("# TYPE faultline_cycle_duration_seconds histogram"), "{t}");
        assert_eq!(sample(&t, &format!("faultline_cycle_duration_seconds_count{{{run}}}")), Some("3"), "{t}");
        assert!(t.contains(&format!("faultline_port_stall_seconds_count{{{run},port=\"A\"}}")), "{t}");
        assert_eq!(sample(&t, &format!("faultline_smart_unsafe_shutdowns{{{run},port=\"A\"}}")), Some("3"), "{t}");
        assert_eq!(sample(&t, &format!("faultline_zeroing_ops_total{{{run},port=\"A\",op=\"deallocate\"}}")), Some("6"), "{t}");
        assert_eq!(sample(&t, &format!("faultline_zeroing_ops_total{{{run},port=\"A\",op=\"write_zeroes\"}}")), Some("1"), "{t}");
        assert_eq!(m.state(), "ended");
    }

    #[test]
    fn each_port_s_health_reading_is_its_own_gauge() {
        let mut m = RunMetrics::new();
        let mut events = run();
        events.truncate(events.len() - 1);
        for (port, unsafe_shutdowns) in [(PortId(0), 8), (PortId(1), 9)] {
            let smart = crate::events::SmartFigures { unsafe_shutdowns, ..Default::default() };
            events
                .push(Event::in_cycle(5_000_000_000, 3, EventKind::Health { smart, anomalies: vec![], pcie: None }).with_port(Some(port)));
        }
        for e in &events {
            m.apply(e);
        }
        let t = m.render();
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with("faultline_smart_unsafe_shutdowns{")).collect();
        assert_eq!(lines.len(), 2, "{t}");
        assert!(lines.iter().any(|l| l.ends_with(",port=\"A\"} 8")) && lines.iter().any(|l| l.ends_with(",port=\"B\"} 9")), "{t}");
    }

    #[test]
    fn model_and_serial_come_from_the_target_identity() {
        let l = identity_labels("block:model=ACME_SSD serial=S123 wwid=eui.1 size=1");
        assert_eq!(l, [("model", "ACME_SSD".to_string()), ("serial", "S123".to_string())]);
        assert!(identity_labels("sim:7 size=1").is_empty());
    }

    #[test]
    fn a_suspended_run_says_so_and_a_resume_runs_again() {
        let mut m = RunMetrics::new();
        let ev = run();
        m.apply(&ev[0]);
        m.apply(&Event::new(5, EventKind::RunSuspended { reason: "short of space".into() }));
        assert_eq!(m.state(), "suspended");
        m.apply(&Event::new(
            6,
            EventKind::RunResumed { resumed_at: "x".into(), cycles_ended: 0, interrupted_cycle: None, last_event: "x".into() },
        ));
        assert_eq!(m.state(), "running");
        assert!(m.render().contains("faultline_resumes_total{"), "{}", m.render());
    }
}
