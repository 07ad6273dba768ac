//! Prints the detection matrix: `cargo run --release -p faultline --example detection-matrix [SEED] [HONEST_CYCLES] [FAULTY_CYCLES] [DUAL_HONEST_CYCLES]`.
use faultline::selftest::{run_matrix, table, MatrixOptions};

fn main() {
    let a: Vec<u64> = std::env::args().skip(1).map(|s| s.parse().expect("numbers")).collect();
    let opts = MatrixOptions {
        seed: *a.first().unwrap_or(&1),
        honest_cycles: *a.get(1).unwrap_or(&850) as u32,
        faulty_cycles: *a.get(2).unwrap_or(&60) as u32,
        span_bytes: 2 << 20,
        dual_honest_cycles: *a.get(3).unwrap_or(&100) as u32,
    };
    let dir = std::env::temp_dir().join(format!("faultline-matrix-{}", std::process::id()));
    let t = std::time::Instant::now();
    let rows = run_matrix(&opts, &dir, &mut |r| {
        if let Some(p) = &r.first_problem {
            eprintln!("PROBLEM {} {:?} {} seed {}: {p}", r.model, r.contract, r.workload, r.seed);
        }
    })
    .expect("matrix");
    print!("{}", table(&rows));
    let cycles: u32 = rows.iter().map(|r| r.cycles).sum();
    let honest: u32 = rows.iter().filter(|r| r.honest).map(|r| r.cycles).sum();
    println!(
        "{} rows, {cycles} cycles ({honest} on honest models) in {:.1} s; clean rows: {}/{}",
        rows.len(),
        t.elapsed().as_secs_f64(),
        rows.iter().filter(|r| r.clean()).count(),
        rows.len()
    );
}
