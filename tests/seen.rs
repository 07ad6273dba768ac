//! `faultline verify` remembers what the drive showed: on a run directory whose last cycle
//! was cut with writes in flight, it records which of them it saw land (a `seen` ledger
//! record, under the run-directory lock), and a later verify holds the drive to them.

use crate::common::{ok, run, s, scratch, text};
use faultline::format::{Format, SectorId};
use faultline::ledger::{replay, EndKind, LedgerWriter, Record};
use faultline::port::PortId;
use faultline::workload::Layout;
use serde_json::Value;
use std::os::unix::fs::FileExt;
use std::path::Path;

fn verify_json(t: &Path, rd: &Path) -> (i32, Value) {
    let o = run(&["verify", "--target", s(t), "--run-dir", s(rd), "--json"]);
    let code = o.status.code().unwrap();
    assert!(code == 0 || code == 1, "verify failed as a harness error:\n{}", text(&o));
    (code, serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("verify --json output is not JSON ({e}):\n{}", text(&o))))
}

#[test]
fn verify_records_what_it_saw_of_writes_in_flight_and_a_later_verify_holds_it() {
    let d = scratch("held");
    let t = d.join("target.img");
    std::fs::File::create(&t).unwrap().set_len(64 << 10).unwrap();
    let rd = d.join("run");
    // Cycle 1 through the binary: ten sequential 4 KiB writes, PLP contract, seed 3.
    ok(&[
        "write",
        "--target",
        s(&t),
        "--run-dir",
        s(&rd),
        "--seed",
        "3",
        "--block-size",
        "4096",
        "--pattern",
        "seq",
        "--writes",
        "10",
        "--contract",
        "plp",
    ]);
    // Cycle 2 as a cut would leave it: writes 11, 12 and 13 were in flight. 11 landed, 12 on
    // its first three sectors, 13 not at all.
    let h = replay(&rd).unwrap();
    let layout = Layout::new(h.header.workload.clone(), 512).unwrap();
    let format = Format::new(h.header.run_id, 512);
    let mut ledger = LedgerWriter::open(&rd, &h).unwrap();
    ledger.append(&Record::CycleStart { cycle: 2, first_id: 11, at: String::new(), port: PortId::A }).unwrap();
    let end = Record::CycleEnd {
        cycle: 2,
        end: EndKind::Cut,
        submitted_end: 14,
        durable_prefix: 11,
        durable_extras: vec![],
        failed: vec![],
        in_flight_at_end: 3,
        bytes_at_risk: 3 * 4096,
    };
    ledger.append(&end).unwrap();
    ledger.close().unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&t).unwrap();
    let put = |id: u64, i: u64| {
        let w = layout.plan(id);
        let sid = SectorId {
            run_id: h.header.run_id,
            addr: w.offset + i * 512,
            write_id: id,
            cycle: 2,
            port: 0,
            flags: 0,
            index: i as u32,
            count: 8,
        };
        let mut buf = vec![0u8; 512];
        format.encode(&sid, &mut buf);
        f.write_all_at(&buf, w.offset + i * 512).unwrap();
    };
    (0..8).for_each(|i| put(11, i));
    (0..3).for_each(|i| put(12, i));

    let records = || replay(&rd).unwrap().records;
    let before = records();
    // While another process holds the run directory, verify reads but records nothing.
    {
        let _held = faultline::run_dir::lock(&rd).unwrap();
        let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd), "--json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["seen_recorded"], Value::Null, "{v}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("verifying without recording"), "{}", text(&o));
        assert_eq!(records(), before);
    }
    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["seen_recorded"], serde_json::json!({ "cycle": 2, "writes": 3, "held": 2 }), "{v}");
    assert_eq!(records(), before + 1, "one seen record appended");
    let h = replay(&rd).unwrap();
    assert_eq!(h.pins.iter().map(|p| p.write.id).collect::<Vec<_>>(), vec![11, 12]);

    // Verified again, unchanged: clean, and nothing new to record.
    let (code, v) = verify_json(&t, &rd);
    assert_eq!((code, &v["seen_recorded"]), (0, &Value::Null), "{v}");
    assert_eq!(records(), before + 1, "a verify that sees nothing new does not grow the ledger");

    // The drive brings back the old content of one sector of write 11 (never written before
    // the run: zeros), and of one of write 12's new sectors: both stale; write 12's fourth
    // sector, seen old, may still show it (a late landing is no regression).
    let (w11, w12) = (layout.plan(11).offset, layout.plan(12).offset);
    f.write_all_at(&[0u8; 512], w11 + 5 * 512).unwrap();
    f.write_all_at(&[0u8; 512], w12 + 512).unwrap();
    put(12, 3);
    let (code, v) = verify_json(&t, &rd);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["summary"]["stale_version"], 2, "{v}");
    let found: Vec<(u64, &str)> =
        v["findings"].as_array().unwrap().iter().map(|f| (f["offset"].as_u64().unwrap(), f["class"].as_str().unwrap())).collect();
    assert_eq!(found, vec![(w11 + 2560, "stale_version"), (w12 + 512, "stale_version")], "{v}");
    let detail = v["findings"][0]["detail"].as_str().unwrap();
    assert!(detail.starts_with("write 11 was seen applied at verify of cycle 2; cycle 2 shows zeros"), "{detail}");
    // The text report says it too.
    let o = run(&["verify", "--target", s(&t), "--run-dir", s(&rd)]);
    assert!(text(&o).contains("stale_version"), "{}", text(&o));
}
