//! `junit.xml`: one test case per cycle, for the lab's CI, written by `quick-junit`. A cycle
//! with findings or health anomalies has a `<failure>` listing them with decoded identities; a
//! cycle the harness could not finish has an `<error>`; harness errors outside any cycle add a
//! test case named `run` with an `<error>`. quick-junit escapes every text and attribute, and
//! drops the characters XML 1.0 cannot carry (most C0 controls, ANSI escapes).

use super::model::{describe, CycleRecord, RunModel};
use crate::events::Verdict;
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::fmt::Write;
use std::time::Duration;

/// Findings listed in one cycle's failure text; the rest are counted (CI tools choke on
/// megabytes per test case, and the event log has them all).
pub const MAX_FINDING_LINES: usize = 200;

/// The failure text of a cycle: one line per finding, then one per health anomaly.
fn failure_text(c: &CycleRecord) -> String {
    let mut t = String::new();
    for f in c.findings.iter().take(MAX_FINDING_LINES) {
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
    if c.findings.len() > MAX_FINDING_LINES {
        let _ = writeln!(t, "... {} more findings in events.jsonl", c.findings.len() - MAX_FINDING_LINES);
    }
    for a in &c.anomalies {
        let _ = writeln!(t, "health anomaly {}: {}", a.kind, a.detail);
    }
    t
}

/// The text of `junit.xml`.
pub fn render(m: &RunModel) -> String {
    let scenario = m.start.as_ref().map_or("faultline", |s| s.scenario.as_str());
    let class = format!("faultline.{scenario}");
    let mut suite = TestSuite::new(scenario);
    suite.set_time(Duration::from_nanos(m.last_t_ns));
    if let Some(s) = &m.start {
        // JUnit's timestamp is ISO 8601 to the millisecond; the property keeps the run's own
        // text (and is the only record of it when it does not parse).
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
    for c in m.cycles.values() {
        let status = match c.verdict() {
            Verdict::Clean => TestCaseStatus::success(),
            Verdict::Findings => {
                let msg = match (c.findings.len(), c.anomalies.len()) {
                    (n, 0) => format!("{n} new findings"),
                    (0, a) => format!("{a} health anomalies"),
                    (n, a) => format!("{n} new findings, {a} health anomalies"),
                };
                let kind = c.findings.first().map_or("health_anomaly", |f| f.class.name());
                non_success(NonSuccessKind::Failure, msg, kind, failure_text(c))
            }
            Verdict::Error => {
                let msg = if c.errors.is_empty() { "the cycle did not end".to_string() } else { c.errors.join("; ") };
                non_success(NonSuccessKind::Error, msg, "harness_error", failure_text(c))
            }
        };
        let mut case = TestCase::new(format!("cycle {}", c.cycle), status);
        case.set_classname(&class);
        case.set_time(match (c.started_ns, c.end.as_ref()) {
            (Some(s), Some(e)) => Duration::from_nanos(e.t_ns.saturating_sub(s)),
            _ => Duration::ZERO,
        });
        suite.add_test_case(case);
    }
    if !m.run_errors.is_empty() {
        let msg = m.run_errors.join("; ");
        let mut case = TestCase::new("run", non_success(NonSuccessKind::Error, msg.clone(), "harness_error", msg));
        case.set_classname(&class).set_time(Duration::ZERO);
        suite.add_test_case(case);
    }
    let mut report = Report::new("faultline");
    report.set_time(Duration::from_nanos(m.last_t_ns));
    report.add_test_suite(suite);
    report.to_string().expect("serializing to a String cannot fail: no I/O, and every text is UTF-8")
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
        let x = render(&RunModel::from_events(&testdata::run()));
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
    fn errors_get_error_cases_and_unwritable_characters_are_dropped() {
        let mut ev = testdata::run();
        ev.insert(1, crate::events::Event::HarnessError { t_ns: 1, cycle: None, message: "lost \u{1}the\u{1b}[31m controller".into() });
        let x = render(&RunModel::from_events(&ev));
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
