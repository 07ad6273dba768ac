//! `junit.xml`: one test case per cycle, for the lab's CI, written by `quick-junit`. A cycle
//! with findings or health anomalies has a `<failure>` listing them with decoded identities; a
//! cycle the harness could not finish has an `<error>`; harness errors outside any cycle add a
//! test case named `run` with an `<error>`. quick-junit escapes every text and attribute, and
//! drops the characters XML 1.0 cannot carry (most C0 controls, ANSI escapes).
//!
//! The file grows with the cycles (one case each), but writing it does not: each cycle's
//! case is serialised as the cycle closes and spooled (to a file beside the report, or any
//! `Read + Write + Seek`); at the end the suite's head, with its totals, is written, then
//! the spooled cases are copied in, then the last case and the tail. The spooled text is
//! what quick-junit writes for the case inside a suite, cut out of a one-case report.

use super::model::{describe, CycleRecord, RunModel};
use crate::events::{Event, Verdict};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::fmt::Write;
use std::io::{self, Read, Seek, SeekFrom};
use std::time::Duration;

/// Findings listed in one cycle's failure text; the rest are counted (CI tools choke on
/// megabytes per test case, and the event log has them all).
pub const MAX_FINDING_LINES: usize = super::model::MAX_CYCLE_FINDINGS;

/// The failure text of a cycle: one line per finding, then one per health anomaly.
fn failure_text(c: &CycleRecord) -> String {
    let mut t = String::new();
    for f in c.findings.kept.iter().take(MAX_FINDING_LINES) {
        let _ = writeln!(
            t,
            "{} at byte {} (+{}): expected {}; found {}: {}",
            f.class.name(),
            f.offset,
            f.length,
            describe(&f.expected),
            describe(&f.found),
            f.detail
        );
    }
    if c.findings.dropped() > 0 {
        let _ = writeln!(t, "... {} more findings in events.jsonl", c.findings.dropped());
    }
    for a in &c.anomalies.kept {
        let _ = writeln!(t, "health anomaly {}: {}", a.kind, a.detail);
    }
    if c.anomalies.dropped() > 0 {
        let _ = writeln!(t, "... {} more health anomalies in events.jsonl", c.anomalies.dropped());
    }
    t
}

fn class_name(m: &RunModel) -> String {
    format!("faultline.{}", m.start.as_ref().map_or("faultline", |s| s.scenario.as_str()))
}

/// A cycle's test case.
fn case(c: &CycleRecord, class: &str) -> TestCase {
    let status = match c.verdict() {
        Verdict::Clean => TestCaseStatus::success(),
        Verdict::Findings => {
            let msg = match (c.findings.total, c.anomalies.total) {
                (n, 0) => format!("{n} new findings"),
                (0, a) => format!("{a} health anomalies"),
                (n, a) => format!("{n} new findings, {a} health anomalies"),
            };
            let kind = c.findings.kept.first().map_or("health_anomaly", |f| f.class.name());
            non_success(NonSuccessKind::Failure, msg, kind, failure_text(c))
        }
        Verdict::Error => {
            let msg = if c.errors.is_empty() { "the cycle did not end".to_string() } else { c.errors.kept.join("; ") };
            non_success(NonSuccessKind::Error, msg, "harness_error", failure_text(c))
        }
    };
    let name = match &c.fault {
        Some(fault) => format!("cycle {} ({fault})", c.cycle),
        None => format!("cycle {}", c.cycle),
    };
    let mut case = TestCase::new(name, status);
    case.set_classname(class);
    case.set_time(match (c.started_ns, c.end.as_ref()) {
        (Some(s), Some(e)) => Duration::from_nanos(e.t_ns.saturating_sub(s)),
        _ => Duration::ZERO,
    });
    case
}

/// Builds `junit.xml` from the events, spooling cases to `S` as cycles close.
pub struct Junit<S> {
    model: RunModel,
    spool: S,
    /// Cases spooled, and of them failures and errors.
    spooled: (usize, usize, usize),
    /// The latest closed cycle's case, not spooled yet (the file's head is cut at it).
    last: Option<TestCase>,
    /// The first spool write that failed (reported at the end).
    failed: Option<io::Error>,
}

impl<S: io::Write + Read + Seek> Junit<S> {
    /// A report spooling to `spool`, which must be empty.
    pub fn new(spool: S) -> Self {
        Junit { model: RunModel::default(), spool, spooled: (0, 0, 0), last: None, failed: None }
    }

    pub fn event(&mut self, e: &Event) {
        let class = class_name(&self.model);
        let mut closed = Vec::new();
        self.model.fold(e, &mut |c| closed.push(case(c, &class)));
        for c in closed {
            if let Some(prev) = self.last.replace(c) {
                if let Err(err) = self.spool_case(&prev) {
                    self.failed.get_or_insert(err);
                }
            }
        }
    }

    pub fn spool(&self) -> &S {
        &self.spool
    }

    fn spool_case(&mut self, c: &TestCase) -> io::Result<()> {
        let mut suite = TestSuite::new("");
        suite.add_test_case(c.clone());
        let mut report = Report::new("");
        report.add_test_suite(suite);
        let text = report.to_string().map_err(io::Error::other)?;
        let (from, to) = cases_span(&text);
        self.spool.write_all(&text.as_bytes()[from..to])?;
        self.spooled.0 += 1;
        match &c.status {
            TestCaseStatus::NonSuccess { kind: NonSuccessKind::Failure, .. } => self.spooled.1 += 1,
            TestCaseStatus::NonSuccess { kind: NonSuccessKind::Error, .. } => self.spooled.2 += 1,
            _ => {}
        }
        Ok(())
    }

    /// Writes the whole file to `out`: open cycles count as they stand.
    pub fn finish(mut self, out: &mut dyn io::Write) -> io::Result<()> {
        if let Some(err) = self.failed.take() {
            return Err(err);
        }
        // What is still open (the run did not end) closes as it stands, in cycle order.
        let class = class_name(&self.model);
        let mut closed = Vec::new();
        self.model.close_open(&mut |c| closed.push(case(c, &class)));
        for c in closed {
            if let Some(prev) = self.last.replace(c) {
                self.spool_case(&prev)?;
            }
        }
        let m = &self.model;
        let scenario = m.start.as_ref().map_or("faultline", |s| s.scenario.as_str());
        let mut suite = TestSuite::new(scenario);
        suite.set_time(Duration::from_nanos(m.last_t_ns));
        if let Some(s) = &m.start {
            // JUnit's timestamp is ISO 8601 to the millisecond; the property keeps the run's
            // own text (and is the only record of it when it does not parse).
            if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&s.started_at) {
                suite.set_timestamp(t);
            }
            suite.add_properties([
                Property::new("run_id", &s.run_id),
                Property::new("target", &s.target),
                Property::new("contract", s.contract.to_string()),
                Property::new("seed", s.seed.to_string()),
                Property::new("started_at", &s.started_at),
            ]);
        }
        suite.add_test_cases(self.last.take());
        if !m.run_errors.is_empty() {
            let mut msg = m.run_errors.kept.join("; ");
            if m.run_errors.dropped() > 0 {
                let _ = write!(msg, "; and {} more in events.jsonl", m.run_errors.dropped());
            }
            let mut case = TestCase::new("run", non_success(NonSuccessKind::Error, msg.clone(), "harness_error", msg));
            case.set_classname(class_name(m)).set_time(Duration::ZERO);
            suite.add_test_case(case);
        }
        let (n, failures, errors) = self.spooled;
        suite.tests += n;
        suite.failures += failures;
        suite.errors += errors;
        let mut report = Report::new("faultline");
        report.set_time(Duration::from_nanos(m.last_t_ns));
        report.add_test_suite(suite);
        let text = report.to_string().map_err(io::Error::other)?;
        // The spooled cases go before the first case of this report (there is one whenever
        // a case was spooled: the last cycle's).
        let at = if n > 0 { cases_span(&text).0 } else { text.len() };
        out.write_all(&text.as_bytes()[..at])?;
        self.spool.flush()?;
        self.spool.seek(SeekFrom::Start(0))?;
        io::copy(&mut self.spool, out)?;
        out.write_all(&text.as_bytes()[at..])
    }
}

/// Where the test cases of a serialised report begin (the start of the line of the first
/// `<testcase`) and end (the start of the line that closes the suite). Neither tag can occur
/// inside a text or an attribute, where `<` is escaped.
fn cases_span(text: &str) -> (usize, usize) {
    let first = text.find("<testcase").expect("a report with a case");
    let close = text.rfind("</testsuite>").expect("a report with a suite");
    let line = |i: usize| text[..i].rfind('\n').map_or(0, |n| n + 1);
    (line(first), line(close))
}

/// The text of `junit.xml` for `events`, spooled in memory (tests and small runs).
pub fn render<'a>(events: impl IntoIterator<Item = &'a Event>) -> String {
    let mut j = Junit::new(io::Cursor::new(Vec::new()));
    for e in events {
        j.event(e);
    }
    let mut out = Vec::new();
    j.finish(&mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("quick-junit writes UTF-8")
}

/// A `<failure>` or `<error>` with its message, type and text.
fn non_success(kind: NonSuccessKind, message: String, ty: &str, text: String) -> TestCaseStatus {
    let mut s = TestCaseStatus::non_success(kind);
    s.set_message(message).set_type(ty).set_description(text);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;
    use crate::report::testdata;
    use quick_xml::events::Event as Xml;

    /// Every element of `x` as (name, attributes), each run of text (entity references
    /// resolved) as ("#text", [("", text)]); panics on malformed XML.
    fn elements(x: &str) -> Vec<(String, Vec<(String, String)>)> {
        let mut r = quick_xml::Reader::from_str(x);
        let (mut out, mut text) = (Vec::new(), String::new());
        loop {
            let ev = r.read_event().expect("well-formed XML");
            match &ev {
                Xml::Text(t) => text.push_str(&t.decode().unwrap()),
                Xml::GeneralRef(g) => {
                    let entity = format!("&{};", g.decode().unwrap());
                    text.push_str(&quick_xml::escape::unescape(&entity).unwrap());
                }
                _ if !text.is_empty() => out.push(("#text".into(), vec![(String::new(), std::mem::take(&mut text))])),
                _ => {}
            }
            match ev {
                Xml::Start(e) | Xml::Empty(e) => {
                    let attrs = e
                        .attributes()
                        .map(|a| {
                            let a = a.unwrap();
                            (
                                String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                                a.normalized_value(quick_xml::XmlVersion::Explicit1_0).unwrap().into_owned(),
                            )
                        })
                        .collect();
                    out.push((String::from_utf8(e.name().as_ref().to_vec()).unwrap(), attrs));
                }
                Xml::Eof => return out,
                _ => {}
            }
        }
    }

    fn attr<'a>(e: &'a (String, Vec<(String, String)>), k: &str) -> &'a str {
        e.1.iter().find(|(n, _)| n == k).map_or_else(|| panic!("{} has no {k}: {e:?}", e.0), |(_, v)| v.as_str())
    }

    #[test]
    fn one_case_per_cycle_with_failures_where_cycles_found_something() {
        let x = render(&testdata::run());
        let el = elements(&x);
        let named = |n: &str| el.iter().filter(|e| e.0 == n).collect::<Vec<_>>();
        let (suites, suite) = (named("testsuites"), named("testsuite"));
        for s in [suites[0], suite[0]] {
            assert_eq!([attr(s, "tests"), attr(s, "failures"), attr(s, "errors"), attr(s, "skipped")], ["3", "2", "0", "0"], "{x}");
            assert_eq!(attr(s, "time"), "4.000");
        }
        assert_eq!(attr(suite[0], "name"), "demo <sim> & \"quotes\"");
        assert_eq!(attr(suite[0], "timestamp"), "2026-01-01T00:00:00.000+00:00");
        let props: Vec<(&str, &str)> = named("property").iter().map(|p| (attr(p, "name"), attr(p, "value"))).collect();
        assert_eq!(
            props,
            [
                ("run_id", "00000000000000ab"),
                ("target", "sim:8MiB"),
                ("contract", "flush"),
                ("seed", "4"),
                ("started_at", "2026-01-01T00:00:00+00:00")
            ]
        );
        let cases = named("testcase");
        assert_eq!(cases.iter().map(|c| attr(c, "name")).collect::<Vec<_>>(), ["cycle 1", "cycle 2", "cycle 3"]);
        assert!(cases.iter().all(|c| attr(c, "classname") == "faultline.demo <sim> & \"quotes\"" && attr(c, "time") == "0.000"));
        let failures = named("failure");
        assert_eq!(
            failures.iter().map(|f| (attr(f, "message"), attr(f, "type"))).collect::<Vec<_>>(),
            [("1 new findings", "lost_write"), ("1 health anomalies", "health_anomaly")]
        );
        let texts: Vec<&str> = named("#text").iter().map(|t| t.1[0].1.as_str()).collect();
        assert!(
            texts
                .iter()
                .any(|t| t.contains("expected write 42 (cycle 2, port 0), sector 1 of 8")
                    && t.contains("<script>alert('x')</script> & gone")),
            "{texts:?}"
        );
        assert!(texts.contains(&"health anomaly media_errors_grew: media errors 0 -> 1\n"), "{texts:?}");
        // The markup arrives escaped, never as markup.
        assert!(x.contains("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; gone") && !x.contains("<script>"), "{x}");
    }

    #[test]
    fn spooled_cases_are_spliced_in_order_with_the_totals_in_the_head() {
        let ev = testdata::run();
        let mut all = vec![ev[0].clone()];
        for k in 0..400u32 {
            for e in &ev[1..ev.len() - 1] {
                let mut e = e.clone();
                crate::report::model::tests::renumber(&mut e, 3 * k);
                all.push(e);
            }
        }
        // The run died in cycle 1201: its case is an error, last.
        all.push(crate::events::Event::in_cycle(5_000_000_000, 1201, EventKind::CycleStarted { fault: None, off_time_ms: None }));
        let x = render(&all);
        let el = elements(&x);
        let cases: Vec<&str> = el.iter().filter(|e| e.0 == "testcase").map(|e| attr(e, "name")).collect();
        assert_eq!(cases.len(), 1201);
        assert!(cases.iter().enumerate().all(|(i, c)| *c == format!("cycle {}", i + 1)), "in cycle order");
        let suite = el.iter().find(|e| e.0 == "testsuite").unwrap();
        let failures = el.iter().filter(|e| e.0 == "failure").count();
        assert_eq!([attr(suite, "tests"), attr(suite, "failures"), attr(suite, "errors")], ["1201", "800", "1"]);
        assert_eq!(failures, 800);
        // No cycle at all: a suite with its properties only.
        let x = render(&ev[..1]);
        assert!(elements(&x).iter().all(|e| e.0 != "testcase") && x.contains("<property name=\"seed\" value=\"4\"/>"), "{x}");
    }

    #[test]
    fn errors_get_error_cases_and_unwritable_characters_are_dropped() {
        let mut ev = testdata::run();
        ev.insert(1, crate::events::Event::new(1, EventKind::HarnessError { message: "lost \u{1}the\u{1b}[31m controller".into() }));
        let x = render(&ev);
        let el = elements(&x);
        let errors: Vec<_> = el.iter().filter(|e| e.0 == "error").collect();
        assert_eq!(errors.len(), 1, "{x}");
        assert_eq!((attr(errors[0], "message"), attr(errors[0], "type")), ("lost the controller", "harness_error"));
        let run = el.iter().find(|e| e.0 == "testcase" && attr(e, "name") == "run").expect("a test case for the run");
        assert_eq!(attr(run, "time"), "0.000");
        let suite = el.iter().find(|e| e.0 == "testsuite").unwrap();
        assert_eq!([attr(suite, "tests"), attr(suite, "failures"), attr(suite, "errors")], ["4", "2", "1"]);
    }
}
