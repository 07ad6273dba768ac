//! Single-core throughput of the tagging and verification paths, with peers measured in the
//! same process so the figures read as ratios rather than absolute numbers:
//!
//! - `fill_write` tagging 4 KiB and 128 KiB writes, at 4096- and 512-byte sectors;
//! - `Format::decode` verifying the same sectors, one by one and as the verifier does (a
//!   chunk's checksums together: `sums_of` + `decode_summed`);
//! - `Layout::plan` and `Layout::latest_covering` on a 30.72 TB span of random 4 KiB writes;
//! - peers: plain `blake3::hash` over the same bytes (whole write, and per sector) and a
//!   memcpy of the same bytes.
//!
//! Run with `cargo run -p faultline --release --example tagging-bench`. GB are 10^9 bytes.
//! `vs blake3` and `vs memcpy` are this row's GB/s divided by the peer's, for the same write
//! size.

use faultline::format::{Decoded, Format};
use faultline::rng::WyRand;
use faultline::workload::{FlushPolicy, Layout, Pattern, WorkloadSpec, WritePlan};
use faultline::writer::fill_write;
use std::hint::black_box;
use std::time::{Duration, Instant};

const RUN_ID: u64 = 0x7a3c_91e4_0b5d_2f68;
const TARGET: Duration = Duration::from_secs(1);

/// Calls `f` repeatedly for about `TARGET` (after a short warm-up); returns seconds per call.
fn time<F: FnMut()>(mut f: F) -> f64 {
    let warm = Instant::now();
    while warm.elapsed() < TARGET / 20 {
        f();
    }
    let mut batch = 1u64;
    let mut calls = 0u64;
    let start = Instant::now();
    loop {
        for _ in 0..batch {
            f();
        }
        calls += batch;
        let el = start.elapsed();
        if el >= TARGET {
            return el.as_secs_f64() / calls as f64;
        }
        if el < TARGET / 100 {
            batch *= 2;
        }
    }
}

#[derive(Default)]
struct Row {
    name: String,
    bytes: Option<f64>,
    sectors: Option<f64>,
    secs: f64,
    vs_blake3: Option<f64>,
    vs_memcpy: Option<f64>,
}

impl Row {
    fn gbps(&self) -> Option<f64> {
        self.bytes.map(|b| b / self.secs / 1e9)
    }
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
}

fn print_table(title: &str, rows: &[Row]) {
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(title.len());
    println!("\n{title:<w$} {:>8} {:>12} {:>10} {:>10} {:>10} {:>10}", "GB/s", "M sectors/s", "M ops/s", "ns/op", "vs blake3", "vs memcpy");
    for r in rows {
        println!(
            "{:<w$} {:>8} {:>12} {:>10.3} {:>10.1} {:>10} {:>10}",
            r.name,
            opt(r.gbps(), 2),
            opt(r.sectors.map(|s| s / r.secs / 1e6), 2),
            1.0 / r.secs / 1e6,
            r.secs * 1e9,
            opt(r.vs_blake3, 2),
            opt(r.vs_memcpy, 3),
        );
    }
}

fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l["VmHWM:".len()..].trim().to_string()))
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Tagging, verification and peers for writes of `write_bytes`.
fn tagging_rows(write_bytes: usize) -> Vec<Row> {
    let wb = write_bytes as f64;
    let kib = write_bytes / 1024;
    let mut src = vec![0u8; write_bytes];
    let mut dst = vec![0u8; write_bytes];

    // Peers over the same bytes (a tagged write, so the content is realistic).
    fill_write(
        &Format::new(RUN_ID, 4096),
        &WritePlan { id: 1, offset: 0, len: write_bytes as u64, fua: false, op: Default::default() },
        1,
        0,
        &mut src,
    );
    let blake3_secs = time(|| {
        black_box(blake3::hash(black_box(&src)));
    });
    let memcpy_secs = time(|| {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    let mut rows = vec![
        Row { name: format!("blake3::hash, {kib} KiB buffer (peer)"), bytes: Some(wb), secs: blake3_secs, ..Row::default() },
        Row { name: format!("memcpy, {kib} KiB (peer)"), bytes: Some(wb), secs: memcpy_secs, ..Row::default() },
    ];

    for sector in [4096usize, 512] {
        let format = Format::new(RUN_ID, sector);
        let n = (write_bytes / sector) as f64;
        let mut buf = vec![0u8; write_bytes];
        let mut id = 1u64;
        let fill_secs = time(|| {
            let w =
                WritePlan { id, offset: id % (1 << 30) * write_bytes as u64, len: write_bytes as u64, fua: false, op: Default::default() };
            fill_write(&format, &w, 3, 0, black_box(&mut buf));
            black_box(&mut buf);
            id += 1;
        });
        rows.push(Row {
            name: format!("fill_write, {kib} KiB write, {sector} B sectors"),
            bytes: Some(wb),
            sectors: Some(n),
            secs: fill_secs,
            ..Row::default()
        });

        // Verify a tagged write sector by sector.
        fill_write(
            &format,
            &WritePlan { id: 7, offset: 1 << 30, len: write_bytes as u64, fua: false, op: Default::default() },
            3,
            0,
            &mut buf,
        );
        let mut valid = 0u64;
        let decode_secs = time(|| {
            for s in black_box(&buf).chunks_exact(sector) {
                valid += matches!(black_box(format.decode(s)), Decoded::Valid(_)) as u64;
            }
        });
        assert!(valid > 0 && valid.is_multiple_of(n as u64), "decode saw invalid sectors");
        rows.push(Row {
            name: format!("Format::decode, {kib} KiB, {sector} B sectors"),
            bytes: Some(wb),
            sectors: Some(n),
            secs: decode_secs,
            ..Row::default()
        });

        // As the verifier does it: the chunk's checksums together, then each sector.
        let mut sums = Vec::new();
        let mut valid = 0u64;
        let batched_secs = time(|| {
            sums.clear();
            format.sums_of(black_box(&buf), &mut sums);
            for (s, sum) in black_box(&buf).chunks_exact(sector).zip(&sums) {
                valid += matches!(black_box(format.decode_summed(s, sum)), Decoded::Valid(_)) as u64;
            }
        });
        assert!(valid > 0 && valid.is_multiple_of(n as u64), "decode_summed saw invalid sectors");
        rows.push(Row {
            name: format!("sums_of + decode_summed, {kib} KiB, {sector} B sectors"),
            bytes: Some(wb),
            sectors: Some(n),
            secs: batched_secs,
            ..Row::default()
        });

        let per_sector_secs = time(|| {
            for s in black_box(&buf).chunks_exact(sector) {
                black_box(blake3::hash(s));
            }
        });
        rows.push(Row {
            name: format!("blake3::hash per {sector} B sector (peer)"),
            bytes: Some(wb),
            sectors: Some(n),
            secs: per_sector_secs,
            ..Row::default()
        });
        let key = blake3::derive_key("faultline sector v1 checksum key", &RUN_ID.to_le_bytes());
        let keyed_secs = time(|| {
            for s in black_box(&buf).chunks_exact(sector) {
                let mut h = blake3::Hasher::new_keyed(&key);
                h.update(&s[..48]);
                h.update(&s[64..]);
                black_box(h.finalize());
            }
        });
        rows.push(Row {
            name: format!("keyed blake3 of 0..48 ++ 64..{sector} per sector (peer)"),
            bytes: Some(wb),
            sectors: Some(n),
            secs: keyed_secs,
            ..Row::default()
        });
    }
    for r in &mut rows {
        let g = r.gbps().expect("byte rows");
        r.vs_blake3 = Some(g / (wb / blake3_secs / 1e9));
        r.vs_memcpy = Some(g / (wb / memcpy_secs / 1e9));
    }
    rows
}

fn mapping_rows() -> Vec<Row> {
    let span_end = 30_720_000_000_000u64 / 4096 * 4096;
    let spec = WorkloadSpec {
        seed: 42,
        pattern: Pattern::Random {},
        span_start: 0,
        span_end,
        min_write_bytes: 4096,
        max_write_bytes: 4096,
        mean_write_bytes: 4096,
        align_bytes: 4096,
        queue_depth: 32,
        flush: FlushPolicy::default(),
        ops: Default::default(),
    };
    let layout = Layout::new(spec, 4096).expect("valid workload");
    let per_pass = layout.writes_per_pass();
    let mut rows = Vec::new();

    let mut id = 1u64;
    let secs = time(|| {
        black_box(layout.plan(black_box(id)));
        id += 1;
    });
    rows.push(Row { name: "Layout::plan, ids 1, 2, 3, ...".into(), secs, ..Row::default() });

    let mut rng = WyRand::new(9);
    let secs = time(|| {
        black_box(layout.plan(black_box(1 + rng.below(3 * per_pass))));
    });
    rows.push(Row { name: "Layout::plan, random ids in passes 1-3".into(), secs, ..Row::default() });

    let units = span_end / 4096;
    for (label, bound) in [("bound mid pass 1", 1 + per_pass / 2), ("bound mid pass 2", 1 + per_pass + per_pass / 2)] {
        // Correctness spot check outside the timed loop.
        let mut r = WyRand::new(5);
        for _ in 0..1000 {
            let addr = r.below(units) * 4096;
            if let Some(w) = layout.latest_covering(addr, bound) {
                assert!(w.id < bound && w.overlaps(addr, 4096), "latest_covering({addr}, {bound}) gave {w:?}");
            }
        }
        let mut rng = WyRand::new(11);
        let secs = time(|| {
            let addr = rng.below(units) * 4096;
            black_box(layout.latest_covering(black_box(addr), bound));
        });
        rows.push(Row { name: format!("Layout::latest_covering, random addr, {label}"), secs, ..Row::default() });
    }
    println!("\nworkload: random 4 KiB writes over [0, {span_end}) = {:.2} TB, {per_pass} writes per pass", span_end as f64 / 1e12);
    rows
}

fn main() {
    println!("tagging-bench: single core, {} ({} build)", cpu_model(), if cfg!(debug_assertions) { "debug" } else { "release" });
    println!(
        "each row runs for about {:?}; GB = 10^9 bytes; vs columns = this row's GB/s / the peer's GB/s for the same write size",
        TARGET
    );
    for write_bytes in [4096usize, 128 << 10] {
        print_table(&format!("{} KiB writes", write_bytes / 1024), &tagging_rows(write_bytes));
    }
    let rows = mapping_rows();
    print_table("workload mapping (30.72 TB span, random 4 KiB writes)", &rows);
    println!("\npeak RSS (VmHWM): {}", peak_rss());
}
