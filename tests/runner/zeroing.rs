//! Runs whose workload deallocates and writes zeroes beside its writes
//! (`scenarios/trim-power-cut.toml`).

use super::*;

#[test]
fn deallocates_and_write_zeroes_under_cuts_verify_clean_and_each_zeroing_fault_is_found() {
    let d = scratch("trim");
    let trim = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/trim-power-cut.toml")).unwrap();
    let short = trim.replace("count = 20", "count = 4");
    assert_ne!(short, trim);
    let (o, rd) = run(&d, "honest", &short);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ledger = String::from_utf8_lossy(&std::fs::read(rd.join("ledger.fl")).unwrap()).into_owned();
    assert!(ledger.contains("\"deallocate_ppm\":100000"), "the run's header records its mix");
    // The operations are counted by kind: about a tenth of the acknowledged ids each.
    let summary: Value = serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap();
    let (all, z) = (summary["figures"]["writes_completed"].as_u64().unwrap(), &summary["figures"]["zeroing"]);
    for (op, bytes) in [("deallocates", "deallocated_bytes"), ("write_zeroes", "zeroed_bytes")] {
        let n = z[op].as_u64().unwrap_or(0);
        assert!(n * 20 > all && n * 5 < all, "{op}: {n} of {all} acknowledged ({z})");
        assert!(z[bytes].as_u64().unwrap_or(0) >= n * 4096, "{bytes}: {z}");
    }
    let html = std::fs::read_to_string(rd.join("report.html")).unwrap();
    assert!(html.contains(&format!("{all} acknowledged: ")) && html.contains(" deallocates ("), "report.html counts them");
    for (model, class) in [
        ("loses_deallocate\", per_cut = 2 ", "resurrection"),
        ("deallocates_wrong_range\", shift_sectors = 8 ", "lost_write"),
        ("tears_write_zeroes\" ", "torn_write"),
    ] {
        let faulty = short.replace("honest_plp\" ", model);
        assert_ne!(faulty, short);
        let (o, rd) = run(&d, class, &faulty);
        assert_eq!(o.status.code(), Some(1), "{model}: {}", text(&o));
        let ev = events(&rd);
        let found: Vec<&Value> = of(&ev, "finding").map(|f| &f["finding"]["class"]).collect();
        assert!(found.iter().any(|c| *c == class), "{model}: {found:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn formats_cut_while_running_or_once_complete_verify_clean_and_a_format_the_cache_loses_is_found() {
    let d = scratch("format");
    let scenario = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/format-power-cut.toml")).unwrap();
    let (o, rd) = run(&d, "honest", &scenario);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // Every cycle sent a format; some completed before their cut, some were cut short.
    let ledger = String::from_utf8_lossy(&std::fs::read(rd.join("ledger.fl")).unwrap()).into_owned();
    assert_eq!(ledger.matches("\"type\":\"format\"").count(), 12, "one format per cycle");
    let summary: Value = serde_json::from_slice(&std::fs::read(rd.join("summary.json")).unwrap()).unwrap();
    let done = summary["figures"]["zeroing"]["formats"].as_u64().unwrap_or(0);
    assert!(done > 0 && done < 12, "formats completed before their cut: {done} of 12 ({})", summary["figures"]);
    // Every cycle verified the whole span after its format.
    let ev = events(&rd);
    assert!(of(&ev, "verified").all(|v| v["bytes"] == 33554432), "{}", text(&o));
    // A volatile drive that completes a format with its zeros in the cache: old data back.
    let faulty = scenario.replace("honest_volatile\" ", "caches_format\" ");
    assert_ne!(faulty, scenario);
    let (o, rd) = run(&d, "caches", &faulty);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let ev = events(&rd);
    let f = of(&ev, "finding").find(|f| f["finding"]["class"] == "resurrection").unwrap_or_else(|| panic!("{}", text(&o)));
    assert!(f["finding"]["detail"].as_str().unwrap().contains("durable format "), "{f}");
    // A drive that fails every read and write after a format cut short, until formatted again
    // (QEMU's Format In Progress): formatted again before each such verify, recorded, said.
    let stuck = scenario.replace("honest_volatile\" ", "format_stays_in_progress\" ");
    let (o, rd) = run(&d, "stuck", &stuck);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ledger = String::from_utf8_lossy(&std::fs::read(rd.join("ledger.fl")).unwrap()).into_owned();
    let reformats = ledger.matches("\"type\":\"reformat\"").count();
    let ev = events(&rd);
    let notes = of(&ev, "note").filter(|n| n["message"].as_str().unwrap_or("").contains("formatted again in")).count();
    assert!(reformats > 0 && reformats == 2 * notes, "{reformats} reformat records, {notes} notes: {}", text(&o));
    assert!(of(&ev, "verified").all(|v| v["bytes"] == 33554432), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_format_run_refuses_a_span_short_of_the_namespace_and_a_target_that_is_no_nvme_namespace() {
    let d = scratch("format-refused");
    let scenario = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/format-power-cut.toml")).unwrap();
    // The format erases the whole drive: a span that is half of it is refused before a write.
    let half = scenario.replace("prefill = true", "prefill = true\nspan_end_bytes = 16777216");
    assert_ne!(half, scenario);
    let (o, rd) = run(&d, "half", &half);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("the span [0, 16777216) is not the whole target (its 33554432 bytes)"), "{}", text(&o));
    assert!(!rd.join("ledger.fl").exists() || events(&rd).iter().all(|e| e["event"] != "cycle_started"), "nothing written");
    // A regular file is no NVMe namespace: nothing to send Format NVM to.
    let file = d.join("image");
    std::fs::write(&file, vec![0u8; 8 << 20]).unwrap();
    let on_file = scenario
        .replace("sim = { capacity_bytes = 33554432, model = { kind = \"honest_volatile\" } }", &format!("path = \"{}\"", file.display()));
    let on_file = on_file.replace("power = \"sim\"", "power = \"quarch+tcp://127.0.0.1:1\"");
    let (o, _) = run(&d, "file", &on_file);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("during_format") && text(&o).contains("not an NVMe device"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&d);
}
