//! `faultline bench` on a loop device over a file on the test's filesystem, against fio: a
//! printed benchmark, not a timed test. The table (medians, CPU per GB, how faultline's waits
//! settled) goes to the test's output uncaptured; the test checks only that every row and
//! every faultline wait mode was printed, and that the trim-mix row, which a loop device takes
//! on both sides, has its ratios.

use super::{loop_or_skip, Loop};
use crate::common::{scratch, skip, text, BIN};
use std::io::Write;
use std::process::Command;

#[test]
fn bench_on_a_loop_device_prints_its_rows() {
    let _alone = crate::common::alone(); // a benchmark's figures
    let test = "bench_on_a_loop_device_prints_its_rows";
    if Command::new("fio").arg("--version").output().is_err() {
        return skip(test, "no fio to bench against (apt-get install fio)");
    }
    let d = scratch("bench-loop");
    let Some(l): Option<Loop> = loop_or_skip(test, &d, 256 << 20, 512) else { return };
    let o = Command::new(BIN)
        .args(["bench", "--target", &l.dev, "--allow-overwrite-signature", "--seconds", "1", "--rounds", "1"])
        .current_dir(&d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // Past libtest's capture: the figures are for whoever reads the CI log.
    let _ = writeln!(std::io::stderr().lock(), "faultline bench on a loop device ({test}):\n{out}");
    let trim = "4k randwrite + 10% trim qd32";
    for row in ["4k randwrite qd32", "128k seqwrite qd32", "4k randread+verify qd1", "full-span seq verify", trim] {
        assert!(out.contains(row) && out.contains(&format!("faultline waits, {row}")), "{row}\n{}", text(&o));
    }
    // A loop device takes discards: both sides trim, and the row has both ratios.
    let row = out.lines().find(|l| l.starts_with(trim)).unwrap_or_else(|| panic!("no {trim} row\n{}", text(&o)));
    let ratios: Vec<f64> = row.split_whitespace().filter_map(|w| w.strip_suffix('x')?.parse().ok()).collect();
    assert!(ratios.len() == 2 && ratios.iter().all(|r| *r > 0.0), "{row}\n{}", text(&o));
}
