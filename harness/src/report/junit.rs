//! `junit.xml`: one test case per cycle, for the lab's CI. A cycle with findings or health
//! anomalies has a `<failure>` listing them with decoded identities; a cycle the harness
//! could not finish has an `<error>`; harness errors outside any cycle add a test case
//! named `run` with an `<error>`. Every text is XML-escaped.

use super::{describe, CycleRecord, RunModel};
use crate::events::Verdict;
use std::fmt::Write;

/// Escapes text for XML 1.0 content and attribute values. Characters XML 1.0 cannot carry
/// at all (most C0 controls) become U+FFFD.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

fn secs(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

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
    let class = xml_escape(&format!("faultline.{scenario}"));
    let mut cases = String::new();
    let (mut failures, mut errors, mut tests) = (0, 0, 0);
    for c in m.cycles.values() {
        tests += 1;
        let time = match (c.started_ns, c.end.as_ref()) {
            (Some(s), Some(e)) => secs(e.t_ns.saturating_sub(s)),
            _ => secs(0),
        };
        let _ = write!(cases, "    <testcase classname=\"{class}\" name=\"cycle {}\" time=\"{time}\"", c.cycle);
        match c.verdict() {
            Verdict::Clean => cases.push_str("/>\n"),
            Verdict::Findings => {
                failures += 1;
                let n = c.findings.len();
                let msg = match (n, c.anomalies.len()) {
                    (n, 0) => format!("{n} new findings"),
                    (0, a) => format!("{a} health anomalies"),
                    (n, a) => format!("{n} new findings, {a} health anomalies"),
                };
                let kind = c.findings.first().map_or("health_anomaly", |f| f.class.name());
                let _ = write!(
                    cases,
                    ">\n      <failure message=\"{}\" type=\"{kind}\">{}</failure>\n    </testcase>\n",
                    xml_escape(&msg),
                    xml_escape(&failure_text(c))
                );
            }
            Verdict::Error => {
                errors += 1;
                let msg = if c.errors.is_empty() { "the cycle did not end".to_string() } else { c.errors.join("; ") };
                let _ = write!(
                    cases,
                    ">\n      <error message=\"{}\" type=\"harness_error\">{}</error>\n    </testcase>\n",
                    xml_escape(&msg),
                    xml_escape(&failure_text(c))
                );
            }
        }
    }
    if !m.run_errors.is_empty() {
        tests += 1;
        errors += 1;
        let msg = xml_escape(&m.run_errors.join("; "));
        let _ = write!(
            cases,
            "    <testcase classname=\"{class}\" name=\"run\" time=\"0.000\">\n      <error message=\"{msg}\" type=\"harness_error\">{msg}</error>\n    </testcase>\n"
        );
    }
    let time = secs(m.last_t_ns);
    let name = xml_escape(scenario);
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(x, "<testsuites name=\"faultline\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time}\">");
    let _ = write!(
        x,
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{time}\""
    );
    if let Some(s) = &m.start {
        let _ = write!(x, " timestamp=\"{}\"", xml_escape(&s.started_at));
    }
    x.push_str(">\n");
    if let Some(s) = &m.start {
        x.push_str("    <properties>\n");
        for (k, v) in [
            ("run_id", s.run_id.clone()),
            ("target", s.target.clone()),
            ("contract", format!("{:?}", s.contract).to_lowercase()),
            ("seed", s.seed.to_string()),
        ] {
            let _ = writeln!(x, "      <property name=\"{k}\" value=\"{}\"/>", xml_escape(&v));
        }
        x.push_str("    </properties>\n");
    }
    x.push_str(&cases);
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata;

    #[test]
    fn escaping_covers_markup_quotes_and_controls() {
        assert_eq!(xml_escape("a<b>&\"c\"'d'\u{1}\n"), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;\u{FFFD}\n");
    }

    #[test]
    fn one_case_per_cycle_with_failures_where_cycles_found_something() {
        let x = render(&RunModel::from_events(&testdata::run()));
        assert_eq!(x.matches("<testcase ").count(), 3, "{x}");
        assert_eq!(x.matches("<failure ").count(), 2, "{x}");
        assert!(x.contains("tests=\"3\" failures=\"2\" errors=\"0\""), "{x}");
        assert!(x.contains("&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt; &amp; gone"), "{x}");
        assert!(!x.contains("<script>"), "{x}");
        assert!(x.contains("expected write 42 (cycle 2, port 0), sector 1 of 8"), "{x}");
        assert!(x.contains("name=\"demo &lt;sim&gt; &amp; &quot;quotes&quot;\""), "{x}");
    }
}
