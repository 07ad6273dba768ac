//! The run's reports end to end: `faultline run` writes the event log and the three file
//! reports; `faultline report RUN_DIR` rebuilds them byte for byte from the log alone; the
//! JUnit file is well-formed XML with one test case per cycle; the HTML page fetches
//! nothing; exit codes are 0 clean, 1 findings, 2 harness error. Seeds are fixed and named.

use crate::common::{run, scratch, text};
use quick_xml::events::Event as Xml;
use quick_xml::Reader;
use std::path::Path;
use std::process::Output;

fn demo(dir: &Path, model: &str, seed: &str) -> Output {
    eprintln!("faultline run --cycles 30 --seed {seed} --model {model}");
    run(&["run", "--run-dir", dir.to_str().unwrap(), "--cycles", "30", "--seed", seed, "--model", model])
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Test cases of a JUnit file, as (name, has failure, has error); panics on malformed XML
/// (quick-xml checks that every end tag matches its start tag).
fn junit_cases(xml: &[u8]) -> Vec<(String, bool, bool)> {
    let mut r = Reader::from_reader(xml);
    let (mut cases, mut buf, mut open) = (Vec::new(), Vec::new(), 0i64);
    loop {
        let ev = r.read_event_into(&mut buf).expect("well-formed XML");
        match &ev {
            Xml::Start(e) | Xml::Empty(e) if e.name().as_ref() == b"testcase" => {
                let name = e
                    .try_get_attribute("name")
                    .unwrap()
                    .expect("a name")
                    .normalized_value(quick_xml::XmlVersion::Explicit1_0)
                    .unwrap()
                    .to_string();
                cases.push((name, false, false));
            }
            Xml::Start(e) | Xml::Empty(e) if e.name().as_ref() == b"failure" => cases.last_mut().expect("inside a testcase").1 = true,
            Xml::Start(e) | Xml::Empty(e) if e.name().as_ref() == b"error" => cases.last_mut().expect("inside a testcase").2 = true,
            Xml::Text(t) => {
                t.decode().expect("text decodes");
            }
            _ => {}
        }
        match ev {
            Xml::Start(_) => open += 1,
            Xml::End(_) => open -= 1,
            Xml::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    assert_eq!(open, 0, "every element closed");
    cases
}

#[test]
fn the_demo_writes_every_report_and_report_rebuilds_them_identically() {
    let d = scratch("rebuild");
    let rd = d.join("run");
    let o = demo(&rd, "lies-about-flush", "4");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let files = ["summary.json", "junit.xml", "report.html"];
    let live: Vec<Vec<u8>> = files.iter().map(|f| read(&rd.join(f))).collect();
    for f in files {
        std::fs::remove_file(rd.join(f)).unwrap();
    }
    let o = run(&["report", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for (f, before) in files.iter().zip(&live) {
        assert!(read(&rd.join(f)) == *before, "{f} differs when rebuilt from events.jsonl");
    }

    let summary: serde_json::Value = serde_json::from_slice(&live[0]).unwrap();
    assert_eq!((summary["verdict"].as_str(), summary["exit_code"].as_u64()), (Some("findings"), Some(1)), "{summary}");
    assert_eq!((summary["cycles_done"].as_u64(), summary["complete"].as_bool()), (Some(30), Some(true)));
    assert!(summary["findings_per_class"]["lost_write"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["seed"].as_u64(), Some(4));

    // One test case per cycle; a failure exactly where a cycle brought findings.
    let cases = junit_cases(&live[1]);
    assert_eq!(cases.len(), 30);
    assert_eq!(cases[0].0, "cycle 1");
    let with_findings = summary["cycles_with_findings"].as_u64().unwrap() as usize;
    assert_eq!(cases.iter().filter(|c| c.1).count(), with_findings);
    assert!(cases.iter().all(|c| !c.2), "no harness errors");

    let html = String::from_utf8(live[2].clone()).unwrap();
    for bad in ["http://", "https://", "src=", "href=", "<script", "url("] {
        assert!(!html.contains(bad), "report.html holds {bad:?}");
    }
    assert!(html.contains("<svg ") && html.contains("Cut point against workload phase") && html.contains("lost_write"));

    // Every event parses, and the stream has the expected shape.
    let log = std::fs::read_to_string(rd.join("events.jsonl")).unwrap();
    let kinds: Vec<String> =
        log.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].as_str().unwrap().to_string()).collect();
    assert_eq!((kinds.first().map(String::as_str), kinds.last().map(String::as_str)), (Some("run_started"), Some("run_ended")));
    for k in ["cycle_started", "cut_issued", "power_restored", "verified", "cycle_ended"] {
        assert_eq!(kinds.iter().filter(|x| *x == k).count(), 30, "{k}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_clean_run_exits_0_and_its_junit_has_no_failures() {
    let d = scratch("clean");
    let rd = d.join("run");
    let o = demo(&rd, "honest-plp", "4");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("verdict: clean"), "{}", text(&o));
    let cases = junit_cases(&read(&rd.join("junit.xml")));
    assert_eq!((cases.len(), cases.iter().filter(|c| c.1 || c.2).count()), (30, 0));
    let o = run(&["report", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_torn_log_still_rebuilds_and_a_missing_one_is_a_harness_error() {
    let d = scratch("torn");
    let rd = d.join("run");
    assert_eq!(demo(&rd, "honest-plp", "7").status.code(), Some(0));
    // The harness died while writing `run_ended`: the run never ended, found nothing, so it
    // cannot be called clean.
    let log = read(&rd.join("events.jsonl"));
    let last_start = log[..log.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    std::fs::write(rd.join("events.jsonl"), &log[..last_start + 10]).unwrap();
    let o = run(&["report", rd.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("torn line") && text(&o).contains("the run did not end"), "{}", text(&o));
    let summary: serde_json::Value = serde_json::from_slice(&read(&rd.join("summary.json"))).unwrap();
    assert_eq!(
        (summary["complete"].as_bool(), summary["verdict"].as_str(), summary["cycles_done"].as_u64()),
        (Some(false), Some("error"), Some(30))
    );

    let o = run(&["report", d.join("nothing-here").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("events.jsonl"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}
