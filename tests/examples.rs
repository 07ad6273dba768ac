//! The examples under docs/examples/ (systemd unit, GitLab CI job, Jenkinsfile, Kubernetes
//! Job), each read with a real parser (rust-ini for the unit, serde_norway for YAML; the
//! Jenkinsfile structurally: balanced blocks outside strings and comments), checked for the
//! fields that matter, and every faultline command line in them given to the real binary's
//! argument parser (`faultline ARGS --help` parses ARGS and exits 0, or fails on the first
//! argument it does not take), so the examples cannot rot.

use crate::common::{text, BIN};
use serde_norway::Value;
use std::path::PathBuf;
use std::process::Command;

fn example(rel: &str) -> (PathBuf, String) {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples").join(rel);
    let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p, t)
}

/// The faultline invocations in a shell script: for each command (split at `;`, newlines,
/// `then`/`else`), the words after a `faultline` program word.
fn invocations(script: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for part in script.split([';', '\n']) {
        let words = shell_words::split(part).unwrap_or_else(|e| panic!("not shell words: {part:?}: {e}"));
        if let Some(i) = words.iter().position(|w| w == "faultline" || w.ends_with("/faultline")) {
            out.push(words[i + 1..].to_vec());
        }
    }
    out
}

/// Runs `faultline ARGS --help`: the real parser takes every argument or says which it does not.
fn parses(origin: &str, args: &[String]) {
    let o = Command::new(BIN).args(args).arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{origin}: `faultline {}` is not accepted:\n{}", args.join(" "), text(&o));
}

/// The directory a `run ... --run-dir D` or `resume D` works on.
fn run_dir_of(args: &[String]) -> String {
    match args.first().map(String::as_str) {
        Some("resume") => args[1].clone(),
        Some("run") => args[args.iter().position(|a| a == "--run-dir").expect("a run names its run directory") + 1].clone(),
        other => panic!("expected run or resume, got {other:?}"),
    }
}

/// A "run, or resume after a reboot" script: one resume and one run, on the one directory
/// whose scenario.toml the script tests for.
fn check_run_or_resume(origin: &str, script: &str) {
    let inv = invocations(script);
    assert_eq!(inv.len(), 2, "{origin}: expected a resume and a run in {script:?}");
    let subs: Vec<&str> = inv.iter().map(|a| a[0].as_str()).collect();
    assert_eq!(subs, ["resume", "run"], "{origin}");
    let dirs: Vec<String> = inv.iter().map(|a| run_dir_of(a)).collect();
    assert_eq!(dirs[0], dirs[1], "{origin}: resume and run must work on the same run directory");
    assert!(
        script.contains(&format!("[ -e {}/scenario.toml ]", dirs[0])),
        "{origin}: the script must resume exactly when {}/scenario.toml exists",
        dirs[0]
    );
    for a in &inv {
        parses(origin, a);
    }
}

#[test]
fn the_systemd_unit_resumes_after_a_reboot_and_never_restarts_a_finding_away() {
    let (p, t) = example("systemd/faultline-soak@.service");
    let origin = p.display().to_string();
    let opt = ini::ParseOption { enabled_quote: false, enabled_escape: false, ..ini::ParseOption::default() };
    let unit = ini::Ini::load_from_str_opt(&t, opt).unwrap_or_else(|e| panic!("{origin}: {e}"));
    let svc = unit.section(Some("Service")).expect("[Service]");
    let exec = svc.get("ExecStart").expect("ExecStart");
    let words = shell_words::split(&exec.replace("%i", "nightly")).unwrap();
    assert_eq!(&words[..2], ["/bin/sh", "-c"], "{origin}: ExecStart runs the run-or-resume script");
    check_run_or_resume(&origin, &words[2]);
    assert_eq!(svc.get("Restart"), Some("on-failure"), "{origin}: a crashed harness or a reboot is taken up again");
    let prevent: Vec<&str> = svc.get("RestartPreventExitStatus").unwrap_or_default().split_whitespace().collect();
    assert!(prevent.contains(&"1"), "{origin}: exit 1 (findings) must never be restarted away");
    assert!(!prevent.contains(&"2"), "{origin}: exit 2 (harness error) is worth a retry");
    assert!(
        svc.get("SuccessExitStatus").is_none_or(|s| !s.split_whitespace().any(|c| c == "1")),
        "{origin}: findings must leave the unit failed"
    );
    let unit_sec = unit.section(Some("Unit")).expect("[Unit]");
    assert!(unit_sec.get("StartLimitBurst").is_some(), "{origin}: retries are bounded");
    assert_eq!(unit.section(Some("Install")).and_then(|s| s.get("WantedBy")), Some("multi-user.target"), "{origin}: started at boot");
}

fn yaml(rel: &str) -> (String, Value) {
    let (p, t) = example(rel);
    let v: Value = serde_norway::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p.display().to_string(), v)
}

#[test]
fn the_gitlab_job_publishes_the_reports_and_fails_on_findings() {
    let (origin, v) = yaml("gitlab/.gitlab-ci.yml");
    let job = &v["faultline-soak"];
    let run_dir = job["variables"]["RUN_DIR"].as_str().expect("RUN_DIR");
    let script: Vec<&str> = job["script"].as_sequence().expect("script").iter().map(|s| s.as_str().unwrap()).collect();
    let inv: Vec<Vec<String>> = script.iter().flat_map(|l| invocations(&l.replace("$RUN_DIR", run_dir))).collect();
    assert_eq!(inv.len(), 1, "{origin}: one faultline run");
    assert_eq!(inv[0][0], "run");
    let dir = run_dir_of(&inv[0]);
    parses(&origin, &inv[0]);
    // A non-zero exit fails a GitLab job: it must not be allowed to fail, nor the exit swallowed.
    assert_ne!(job["allow_failure"], Value::Bool(true), "{origin}");
    assert!(script.iter().all(|l| !l.contains("|| true") && !l.contains("; true")), "{origin}: the exit code must reach GitLab");
    let art = &job["artifacts"];
    assert_eq!(art["when"], "always", "{origin}: a failed job (findings) must still publish its reports");
    assert_eq!(art["reports"]["junit"], format!("{dir}/junit.xml").as_str(), "{origin}");
    let paths: Vec<&str> = art["paths"].as_sequence().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(paths.contains(&format!("{dir}/report.html").as_str()), "{origin}: {paths:?}");
}

/// `src` with strings and comments blanked (same length), so braces can be counted.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out[i] = b' ';
                i += 1;
            }
        } else if b[i] == b'\'' || b[i] == b'"' {
            let q = b[i];
            i += 1;
            while i < b.len() && b[i] != q {
                if b[i] == b'\\' {
                    out[i] = b' ';
                    i += 1;
                }
                out[i] = b' ';
                i += 1;
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The text inside `name { ... }` (first one at or after `from`), found in the code outside
/// strings and comments.
fn block<'a>(src: &'a str, code: &str, name: &str) -> Option<&'a str> {
    let mut at = 0;
    while let Some(pos) = code[at..].find(name) {
        let start = at + pos + name.len();
        let rest = code[start..].trim_start();
        if rest.starts_with('{') {
            let open = code.len() - rest.len();
            let mut depth = 0;
            for (i, c) in code[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(&src[open + 1..open + i]);
                        }
                    }
                    _ => {}
                }
            }
            return None;
        }
        at = start;
    }
    None
}

#[test]
fn the_jenkinsfile_publishes_the_reports_and_fails_on_findings() {
    let (p, t) = example("jenkins/Jenkinsfile");
    let origin = p.display().to_string();
    let code = code_only(&t);
    for (o, c) in [('{', '}'), ('(', ')'), ('[', ']')] {
        assert_eq!(code.matches(o).count(), code.matches(c).count(), "{origin}: unbalanced {o}{c}");
    }
    let pipeline = block(&t, &code, "pipeline").expect("a declarative pipeline { }");
    let pcode = code_only(pipeline);
    let post = block(pipeline, &pcode, "post").expect("post { }");
    let always = block(post, &code_only(post), "always").expect("post { always { } }: reports are published whatever the exit");
    assert!(always.contains("junit") && always.contains("'run/junit.xml'"), "{origin}: {always}");
    assert!(always.contains("archiveArtifacts") && always.contains("run/report.html"), "{origin}: {always}");
    let steps = block(pipeline, &pcode, "steps").expect("steps { }");
    assert!(steps.contains("returnStatus: true"), "{origin}: the step reads faultline's exit code");
    assert!(steps.contains("if (rc == 1)") && steps.contains("error("), "{origin}: exit 1 (findings) fails the build");
    let script_at = steps.find("script: '").expect("sh(script: '...')") + "script: '".len();
    let script = &steps[script_at..script_at + steps[script_at..].find('\'').unwrap()];
    let inv = invocations(script);
    assert_eq!(inv.len(), 1, "{origin}: {script}");
    assert_eq!(run_dir_of(&inv[0]), "run", "{origin}: the reports published are the ones this run writes");
    parses(&origin, &inv[0]);
}

#[test]
fn the_kubernetes_job_is_pinned_to_the_drives_node_privileged_and_keeps_its_run_directory() {
    let (origin, v) = yaml("kubernetes/faultline-soak-job.yaml");
    assert_eq!((v["apiVersion"].as_str(), v["kind"].as_str()), (Some("batch/v1"), Some("Job")), "{origin}");
    let pod = &v["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never", "{origin}: the Job, not the kubelet, decides retries");
    let selector = pod["nodeSelector"].as_mapping().expect("nodeSelector");
    let (label, serial) = selector.iter().next().map(|(k, v)| (k.as_str().unwrap(), v.as_str().unwrap())).unwrap();
    assert!(label.contains("serial"), "{origin}: the node is chosen by a label carrying the drive's serial: {label}");
    assert!(v["metadata"]["name"].as_str().unwrap().contains(&serial.to_ascii_lowercase()), "{origin}: one Job per drive");
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["privileged"], true, "{origin}: the device needs a privileged pod");
    let rules = v["spec"]["podFailurePolicy"]["rules"].as_sequence().expect("podFailurePolicy");
    assert!(
        rules.iter().any(|r| r["action"] == "FailJob"
            && r["onExitCodes"]["operator"] == "In"
            && r["onExitCodes"]["values"].as_sequence().unwrap().contains(&Value::from(1))),
        "{origin}: exit 1 (findings) fails the Job, never retried"
    );
    let command: Vec<&str> = c["command"].as_sequence().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(command, ["/bin/sh", "-c"], "{origin}");
    let script = c["args"][0].as_str().unwrap();
    check_run_or_resume(&origin, script);
    let dir = run_dir_of(&invocations(script)[1]);
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    let m = mounts
        .iter()
        .find(|m| dir.starts_with(&format!("{}/", m["mountPath"].as_str().unwrap())))
        .unwrap_or_else(|| panic!("{origin}: the run directory {dir} is on no volume"));
    let vol = pod["volumes"].as_sequence().unwrap().iter().find(|v| v["name"] == m["name"]).expect("the mounted volume");
    assert!(vol.get("hostPath").is_some() || vol.get("persistentVolumeClaim").is_some(), "{origin}: the run directory outlives the pod");
    assert_ne!(m["readOnly"], true, "{origin}");
}
