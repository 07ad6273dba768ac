//! `faultline bench`: faultline and fio on the same target in the same run, alternating,
//! with ratios. Not a test: figures for humans.
//!
//! Workloads (docs/DOMAIN.md section 7): 4 KiB random write at QD32, 128 KiB sequential write at
//! QD32, 4 KiB random write at QD32 of which a tenth of the operations trim (deallocate) their
//! extent instead (`trim.rs`: faultline's seeded `OpMix`, fio's randwrite and randtrim jobs
//! weighted 9:1 in one flow group; n/a with a note where a side cannot trim the target, as fio
//! cannot a regular file), 4 KiB random read with verification (QD1: one read in flight at a
//! time; faultline verifies a list of random blocks, starting the next block's read before it
//! checks the one just read, as a cycle's sampled verification does; fio checks a block before
//! it reads the next), full-span sequential verify (QD1; fio reads 1 MiB and verifies it before
//! it reads the next, faultline reads its verifier's chunks, 4 MiB, and starts the next read
//! before it checks the current one) against fio's sequential read. fio runs with `--verify=crc32c` (its fastest checksum) and without verification.
//! faultline runs in this process (so its CPU time and peak memory are measured exactly);
//! fio runs as a child (CPU from the children's times in /proc/self/stat).
//!
//! Timing: a faultline write run counts until its last write came back, without the closing
//! flush of its cycle, since fio does not flush (`end_fsync=0`). Before every run, of either
//! side, the target is synced outside the timing, so that no run writes back what the one
//! before it left dirty. (Before both rules, on a loop device over a disk file, faultline's
//! closing flush took 0.6 to 0.9 s of a 3 s run and was charged to faultline alone, and the
//! dirty pages fio left were written back during faultline's runs.)

use crate::exit::Exit;
use anyhow::{bail, Context, Result};
use faultline::format::Format;
use faultline::ledger::{Contract, LedgerWriter, RunHeader, TargetFacts};
use faultline::rng::WyRand;
use faultline::verify::Verifier;
use faultline::workload::{FlushPolicy, Layout, Pattern, WorkloadSpec};
use faultline::writer::{prefill, run_cycle, CycleOptions};
use faultline_drivers::{open_target, BlockTarget, OpenSpec, Opened};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod trim;

#[derive(clap::Parser)]
pub struct BenchArgs {
    /// Target: a regular file (created at --size if missing) or a block device. Everything
    /// on it is overwritten.
    #[arg(long)]
    target: PathBuf,
    /// Size of a file target to create, bytes.
    #[arg(long, default_value_t = 1 << 30)]
    size: u64,
    /// Seconds per timed run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Rounds; each round runs faultline and fio once per workload, alternating.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// The fio binary.
    #[arg(long, default_value = "fio")]
    fio: String,
    /// Write over a device carrying a partition table or filesystem.
    #[arg(long)]
    allow_overwrite_signature: bool,
    /// Run only this side (for profiling one side alone; ratios then show n/a).
    #[arg(long, value_enum)]
    only_side: Option<Side>,
    /// Run only these workloads, comma-separated (default: all five).
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Vec<Workload>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Faultline,
    Fio,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    Randwrite,
    Seqwrite,
    Randread,
    Fullspan,
    /// 4 KiB random writes at QD32, a tenth of them trims.
    Trimwrite,
}

/// The workloads in the order of the printed table: the value that selects one, its row's
/// name, and whether its row shows IOPS.
const ROWS: [(Workload, &str, bool); 5] = [
    (Workload::Randwrite, "4k randwrite qd32", true),
    (Workload::Seqwrite, "128k seqwrite qd32", false),
    (Workload::Randread, "4k randread+verify qd1", true),
    (Workload::Fullspan, "full-span seq verify", false),
    (Workload::Trimwrite, trim::ROW, true),
];

/// One measured run.
#[derive(Clone, Copy, Default)]
struct Fig {
    bytes: f64,
    ops: f64,
    secs: f64,
    cpu_s: f64,
}

impl Fig {
    fn mbps(&self) -> f64 {
        self.bytes / self.secs / 1e6
    }
    fn iops(&self) -> f64 {
        self.ops / self.secs
    }
    fn cpu_per_gb(&self) -> f64 {
        self.cpu_s / (self.bytes / 1e9)
    }
}

/// One side's runs of one workload, one per round: reported by their medians.
#[derive(Clone, Default)]
struct Runs(Vec<Fig>);

impl Runs {
    fn add(&mut self, f: Fig) {
        self.0.push(f);
    }

    fn median_of(&self, key: impl Fn(&Fig) -> f64) -> Option<f64> {
        let mut v: Vec<f64> = self.0.iter().filter(|f| f.secs > 0.0 && f.bytes > 0.0).map(key).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }
}

/// (utime+stime of this process, cutime+cstime of waited-for children), seconds.
fn cpu_times() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    // Fields after the command: state is index 0, utime 11, stime 12, cutime 13, cstime 14.
    let tick = 100.0; // USER_HZ on Linux
    let g = |i: usize| f.get(i).copied().unwrap_or(0.0) / tick;
    (g(11) + g(12), g(13) + g(14))
}

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

struct Ctx<'a> {
    a: &'a BenchArgs,
    capacity: u64,
    direct: bool,
    scratch: PathBuf,
    runs: u32,
    /// How the last faultline run's target waited for completions (`BlockTarget::wait_mode`).
    wait: Option<String>,
    /// The target is a block device (fio trims nothing else).
    block_device: bool,
    /// Why the target cannot deallocate, if it cannot (`trim::no_deallocate`).
    no_deallocate: Option<String>,
    /// Why a figure is n/a, one line each, printed under the table.
    notes: Vec<String>,
}

impl Ctx<'_> {
    fn note(&mut self, line: String) {
        if !self.notes.contains(&line) {
            self.notes.push(line);
        }
    }
}

fn open(a: &BenchArgs, writable: bool, qd: usize) -> Result<Opened> {
    let spec = OpenSpec { writable, queue_depth: qd, allow_overwrite_signature: a.allow_overwrite_signature, ..Default::default() };
    Ok(open_target(&a.target, &spec)?)
}

fn spec(seed: u64, capacity: u64, bs: u64, pattern: Pattern, qd: u32) -> WorkloadSpec {
    WorkloadSpec {
        seed,
        pattern,
        span_start: 0,
        span_end: capacity / bs * bs,
        min_write_bytes: bs,
        max_write_bytes: bs,
        mean_write_bytes: bs,
        align_bytes: 4096.min(bs),
        queue_depth: qd,
        flush: FlushPolicy::default(),
        ops: Default::default(),
    }
}

/// A fresh run on the target: (ledger, layout, format).
fn new_run(c: &mut Ctx, t: &dyn BlockTarget, w: WorkloadSpec) -> Result<(LedgerWriter, Layout, Format)> {
    c.runs += 1;
    let dir = c.scratch.join(format!("run{}", c.runs));
    let run_id = 0xbe_0000 + c.runs as u64;
    let facts = TargetFacts {
        identity: t.identity(),
        capacity: c.capacity,
        sector_bytes: 512,
        atomic_bytes: 512,
        dealloc_reads: t.zeroing().dealloc_reads.into(),
    };
    let header = RunHeader::new(run_id, String::new(), facts, Contract::Plp, faultline::port::PortEntry::single(), w.clone());
    std::fs::create_dir_all(&dir)?;
    let ledger = LedgerWriter::create(&dir, header)?;
    Ok((ledger, Layout::new(w, 512)?, Format::new(run_id, 512)))
}

fn fl_write(c: &mut Ctx, bs: u64, pattern: Pattern) -> Result<Fig> {
    settle(c)?;
    let mut t = open(c.a, true, 32)?.target;
    let w = spec(c.runs as u64 + 1, c.capacity, bs, pattern, 32);
    fl_cycle(c, t.as_mut(), w)
}

/// One timed cycle of `w` on `t`, a fresh run.
fn fl_cycle(c: &mut Ctx, t: &mut dyn BlockTarget, w: WorkloadSpec) -> Result<Fig> {
    let (mut ledger, layout, format) = new_run(c, t, w)?;
    let opts = CycleOptions {
        cycle: 1,
        first_id: 1,
        started_at: String::new(),
        port: faultline::port::PortId::A,
        max_writes: None,
        duration: Some(Duration::from_secs_f64(c.a.seconds)),
        cut: None,
        checkpoint_every: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(60),
        stop: None,
        samples: None,
        fill: faultline::writer::Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    let cpu0 = cpu_times().0;
    let out = run_cycle(t, &layout, &format, &mut ledger, Contract::Plp, &opts, &mut || Ok(()))?;
    let cpu = cpu_times().0 - cpu0;
    c.wait = t.wait_mode();
    ledger.close()?;
    // Timed until the last write came back: the cycle's closing flush is left out, as fio
    // (end_fsync=0) does not flush at all.
    let secs = out.drained_at.unwrap_or(out.elapsed).as_secs_f64();
    Ok(Fig { bytes: out.bytes_written as f64, ops: out.completed as f64, secs, cpu_s: cpu })
}

/// Prefills the target with a faultline run and returns the pieces to verify it.
fn fl_prepare(c: &mut Ctx) -> Result<(Box<dyn BlockTarget>, LedgerWriter, Layout, Format)> {
    let mut t = open(c.a, true, 32)?.target;
    let (mut ledger, layout, format) = new_run(c, t.as_ref(), spec(77, c.capacity, 4096, Pattern::Random {}, 32))?;
    prefill(t.as_mut(), &layout, &format, faultline::port::PortId::A, &mut ledger)?;
    Ok((t, ledger, layout, format))
}

fn fl_rand_verify(c: &mut Ctx, prep: &mut (Box<dyn BlockTarget>, LedgerWriter, Layout, Format)) -> Result<Fig> {
    let (t, ledger, layout, format) = prep;
    let v = Verifier::new(layout, ledger.history(), format);
    let blocks = c.capacity / 4096;
    let mut rng = WyRand::new(c.runs as u64);
    let cpu0 = cpu_times().0;
    let start = Instant::now();
    let mut n = 0u64;
    let mut findings = 0;
    let mut regions = Vec::with_capacity(256);
    while start.elapsed().as_secs_f64() < c.a.seconds {
        regions.clear();
        regions.extend((0..256).map(|_| rng.below(blocks) * 4096).map(|off| (off, off + 4096)));
        findings += v.verify_regions(t.as_mut(), &regions)?.findings.len();
        n += regions.len() as u64;
    }
    if findings > 0 {
        bail!("faultline random verify found {findings} findings on its own prefilled data");
    }
    c.wait = t.wait_mode();
    Ok(Fig { bytes: n as f64 * 4096.0, ops: n as f64, secs: start.elapsed().as_secs_f64(), cpu_s: cpu_times().0 - cpu0 })
}

fn fl_seq_verify(c: &mut Ctx, prep: &mut (Box<dyn BlockTarget>, LedgerWriter, Layout, Format)) -> Result<Fig> {
    let (t, ledger, layout, format) = prep;
    let v = Verifier::new(layout, ledger.history(), format);
    let span = layout.spec().span_end;
    let cpu0 = cpu_times().0;
    let start = Instant::now();
    let rep = v.verify(t.as_mut(), 0, span)?;
    let secs = start.elapsed().as_secs_f64();
    c.wait = t.wait_mode();
    if !rep.findings.is_empty() {
        bail!("faultline sequential verify found {} findings on its own prefilled data", rep.findings.len());
    }
    Ok(Fig { bytes: rep.bytes as f64, ops: (rep.bytes / (4 << 20)) as f64, secs, cpu_s: cpu_times().0 - cpu0 })
}

/// Writes back whatever the previous run left dirty below the target (a loop device's
/// backing file), outside any timing, so that no run pays for the one before it.
fn settle(c: &Ctx) -> Result<()> {
    let f = std::fs::File::open(&c.a.target).with_context(|| format!("cannot open {} to sync it", c.a.target.display()))?;
    f.sync_all().with_context(|| format!("cannot sync {}", c.a.target.display()))
}

/// One fio job's options on the target (fio takes the options after a `--name=` as that
/// job's own, so a second job repeats them).
fn fio_job(c: &Ctx, name: &str, time_based: bool) -> Vec<String> {
    let mut v = vec![
        format!("--name={name}"),
        format!("--filename={}", c.a.target.display()),
        format!("--size={}", c.capacity / (1 << 20) * (1 << 20)),
        "--ioengine=io_uring".into(),
        // fio would leave verify state files (`local-w-0-verify.state`) in its working
        // directory, which is the bench's scratch directory below, never the user's.
        "--verify_state_save=0".into(),
        format!("--direct={}", u8::from(c.direct)),
        "--group_reporting".into(),
    ];
    if time_based {
        v.extend([format!("--runtime={}", c.a.seconds), "--time_based".into()]);
    }
    v
}

fn fio(c: &Ctx, name: &str, extra: &[String], time_based: bool) -> Result<Fig> {
    fio_run(c, name, &[fio_job(c, name, time_based), extra.to_vec()].concat())
}

/// Runs fio with `jobs` (each job's options, all in one reporting group) and sums what the
/// group read, wrote and trimmed.
fn fio_run(c: &Ctx, name: &str, jobs: &[String]) -> Result<Fig> {
    settle(c)?;
    let mut cmd = Command::new(&c.a.fio);
    cmd.arg("--output-format=json").args(jobs);
    cmd.current_dir(&c.scratch);
    let cpu0 = cpu_times().1;
    let out = cmd.output().with_context(|| format!("cannot run {} (apt-get install fio)", c.a.fio))?;
    let cpu = cpu_times().1 - cpu0;
    if !out.status.success() {
        bail!("fio {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json = &text[text.find('{').unwrap_or(0)..];
    let v: serde_json::Value = serde_json::from_str(json).with_context(|| format!("fio {name}: output is not JSON"))?;
    let job = &v["jobs"][0];
    let errors = job["error"].as_i64().unwrap_or(0);
    if errors != 0 {
        bail!("fio {name}: error {errors}");
    }
    let mut fig = Fig { cpu_s: cpu, ..Default::default() };
    for dir in ["read", "write", "trim"] {
        let d = &job[dir];
        fig.bytes += d["io_bytes"].as_f64().unwrap_or(0.0);
        fig.ops += d["total_ios"].as_f64().unwrap_or(0.0);
        fig.secs = fig.secs.max(d["runtime"].as_f64().unwrap_or(0.0) / 1000.0);
    }
    Ok(fig)
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub fn cmd_bench(mut a: BenchArgs) -> Result<Exit> {
    if !a.target.exists() {
        std::fs::File::create(&a.target)
            .and_then(|f| f.set_len(a.size))
            .with_context(|| format!("cannot create {}", a.target.display()))?;
    }
    // fio runs in the scratch directory: a relative target must still name the same file.
    a.target = std::fs::canonicalize(&a.target).with_context(|| format!("cannot resolve {}", a.target.display()))?;
    let probe = open(&a, true, 32)?;
    for n in &probe.notes {
        eprintln!("faultline: note: {n}");
    }
    let capacity = probe.target.geometry().capacity_bytes;
    let (direct, engine, block_device) = (probe.direct, probe.engine, probe.block_device);
    let no_deallocate = trim::no_deallocate(&probe, &a.target);
    drop(probe);
    let scratch = std::env::temp_dir().join(format!("faultline-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let mut c =
        Ctx { a: &a, capacity, direct, scratch: scratch.clone(), runs: 0, wait: None, block_device, no_deallocate, notes: Vec::new() };
    println!(
        "bench on {} ({} MiB, {} engine, {}), {} s per run, {} rounds, alternating faultline and fio",
        a.target.display(),
        capacity >> 20,
        engine,
        if direct { "O_DIRECT" } else { "buffered" },
        a.seconds,
        a.rounds
    );
    if cfg!(debug_assertions) {
        println!("note: this faultline is a debug build: its figures are not a release build's (cargo build --release)");
    }
    // Per row of ROWS: [faultline, fio crc32c, fio plain].
    let mut figs: Vec<[Runs; 3]> = vec![Default::default(); ROWS.len()];
    let mut waits: Vec<Option<String>> = vec![None; ROWS.len()];
    for round in 0..a.rounds {
        run_round(&mut c, round, &mut figs, &mut waits)?;
        eprintln!("faultline bench: round {} of {} done", round + 1, a.rounds);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    print_table(&figs);
    for n in &c.notes {
        println!("note: {n}");
    }
    for ((_, n, _), w) in ROWS.iter().zip(&waits) {
        if let Some(w) = w {
            println!("faultline waits, {n} (last round): {w}");
        }
    }
    println!(
        "faultline memory: peak RSS {} MiB (VmHWM of this process, which ran every faultline workload), RSS now {} MiB",
        status_kib("VmHWM:") / 1024,
        status_kib("VmRSS:") / 1024
    );
    Ok(Exit::Clean)
}

/// One round of the selected workloads, faultline and fio alternating (faultline first in an
/// even round).
fn run_round(c: &mut Ctx, round: u32, figs: &mut [[Runs; 3]], waits: &mut [Option<String>]) -> Result<()> {
    let a = c.a;
    let order_fl_first = round.is_multiple_of(2);
    let (want_fl, want_fio) = (a.only_side != Some(Side::Fio), a.only_side != Some(Side::Faultline));
    let wants = |w: Workload| a.workloads.is_empty() || a.workloads.contains(&w);
    let crc = s(&["--verify=crc32c", "--do_verify=0"]);
    let w4 = s(&["--rw=randwrite", "--bs=4k", "--iodepth=32", "--randrepeat=0"]);
    let w128 = s(&["--rw=write", "--bs=128k", "--iodepth=32"]);
    let cat = |a: &[String], b: &[String]| [a, b].concat();
    type RunFn<'r> = &'r mut dyn FnMut(&mut Ctx) -> Result<Fig>;
    let mut step = |i: usize, fl: RunFn, fio_crc: RunFn, fio_plain: RunFn, c: &mut Ctx| -> Result<()> {
        let (w, name, _) = ROWS[i];
        if !wants(w) {
            return Ok(());
        }
        let mut fl = |c: &mut Ctx| -> Result<Fig> {
            let f = fl(c)?;
            eprintln!("faultline bench: {name} round {}: waits: {}", round + 1, c.wait.as_deref().unwrap_or("n/a"));
            waits[i] = c.wait.take();
            Ok(f)
        };
        let fig = &mut figs[i];
        if want_fl && (!want_fio || order_fl_first) {
            fig[0].add(fl(c)?);
        }
        if want_fio {
            fig[1].add(fio_crc(c)?);
            fig[2].add(fio_plain(c)?);
        }
        if want_fl && want_fio && !order_fl_first {
            fig[0].add(fl(c)?);
        }
        Ok(())
    };
    step(
        0,
        &mut |c| fl_write(c, 4096, Pattern::Random {}),
        &mut |c| fio(c, "w4crc", &cat(&w4, &crc), true),
        &mut |c| fio(c, "w4", &w4, true),
        c,
    )?;
    step(
        1,
        &mut |c| fl_write(c, 131072, Pattern::Sequential {}),
        &mut |c| fio(c, "w128crc", &cat(&w128, &crc), true),
        &mut |c| fio(c, "w128", &w128, true),
        c,
    )?;
    step(4, &mut trim::fl_trimwrite, &mut |c| trim::fio_trimwrite(c, true), &mut |c| trim::fio_trimwrite(c, false), c)?;
    if wants(Workload::Randread) || wants(Workload::Fullspan) {
        read_round(c, figs, waits, (want_fl, want_fio), (wants(Workload::Randread), wants(Workload::Fullspan)))?;
    }
    Ok(())
}

/// The read workloads of one round: each side prepares its own data (untimed), then reads
/// it back.
fn read_round(
    c: &mut Ctx,
    figs: &mut [[Runs; 3]],
    waits: &mut [Option<String>],
    (fl, fio_too): (bool, bool),
    (rand, seq): (bool, bool),
) -> Result<()> {
    if fl {
        let mut prep = fl_prepare(c)?;
        if rand {
            figs[2][0].add(fl_rand_verify(c, &mut prep)?);
            waits[2] = c.wait.take();
        }
        if seq {
            figs[3][0].add(fl_seq_verify(c, &mut prep)?);
            waits[3] = c.wait.take();
        }
    }
    if fio_too {
        fio(c, "fill", &s(&["--rw=write", "--bs=4k", "--iodepth=32", "--verify=crc32c", "--do_verify=0"]), false)?;
        if rand {
            figs[2][1].add(fio(c, "r4crc", &s(&["--rw=randread", "--bs=4k", "--iodepth=1", "--verify=crc32c"]), true)?);
            figs[2][2].add(fio(c, "r4", &s(&["--rw=randread", "--bs=4k", "--iodepth=1"]), true)?);
        }
        if seq {
            let crc = fio(c, "seqcrc", &s(&["--rw=read", "--bs=1m", "--iodepth=1", "--verify=crc32c", "--verify_interval=4096"]), false);
            figs[3][1].add(crc.unwrap_or_default());
            figs[3][2].add(fio(c, "seq", &s(&["--rw=read", "--bs=1m", "--iodepth=1"]), false)?);
        }
    }
    Ok(())
}

/// One row per workload: each side's median figures over the rounds, faultline's ratio of
/// medians to fio's, and the median CPU per GB.
fn print_table(figs: &[[Runs; 3]]) {
    println!(
        "{:<28} {:>22} {:>22} {:>22} {:>9} {:>9}   cpu s/GB (fl / fio-crc / fio), medians of {} rounds",
        "workload",
        "faultline",
        "fio crc32c",
        "fio plain",
        "fl/crc",
        "fl/plain",
        figs.iter().map(|r| r[0].0.len().max(r[2].0.len())).max().unwrap_or(0)
    );
    for (&(_, n, iops_row), [f, fc, fp]) in ROWS.iter().zip(figs) {
        let cell = |x: &Runs| match (x.median_of(Fig::iops), x.median_of(Fig::mbps)) {
            (Some(iops), Some(mbps)) if iops_row => format!("{iops:.0} IOPS {mbps:.0} MB/s"),
            (_, Some(mbps)) => format!("{mbps:.0} MB/s"),
            _ => "n/a".to_string(),
        };
        let ratio = |x: &Runs| match (f.median_of(Fig::mbps), x.median_of(Fig::mbps)) {
            (Some(a), Some(b)) => format!("{:.2}x", a / b),
            _ => "n/a".to_string(),
        };
        let cpg = |x: &Runs| x.median_of(Fig::cpu_per_gb).map_or("n/a".to_string(), |c| format!("{c:.2}"));
        println!(
            "{n:<28} {:>22} {:>22} {:>22} {:>9} {:>9}   {} / {} / {}",
            cell(f),
            cell(fc),
            cell(fp),
            ratio(fc),
            ratio(fp),
            cpg(f),
            cpg(fc),
            cpg(fp)
        );
    }
}
