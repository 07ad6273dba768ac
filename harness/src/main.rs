//! The `faultline` binary: argument parsing, output and exit codes. All logic lives in the
//! library; this file only wires it to the command line. Exit codes: 0 clean, 1 findings,
//! 2 harness error (bad arguments, unreadable ledger, wrong target).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use faultline::format::{read_header, Decoded, Format, MAGIC};
use faultline::ledger::{replay, Contract, RunHeader, LEDGER_FORMAT};
use faultline::matrix::{run_matrix, table, MatrixOptions};
use faultline::run::{check_target, exists, open_run};
use faultline::scenario::{Scenario, SimModel};
use faultline::verify::{Verifier, VerifyReport};
use faultline::workload::{FlushPolicy, Layout, Pattern, WorkloadSpec};
use faultline::writer::{prefill, run_cycle, CycleOptions};
use faultline_drivers::blockdev::Expectation;
use faultline_drivers::{open_target, BlockTarget, OpenSpec, Opened};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod cmd_bench;
mod cmd_controller;
mod cmd_report;
mod cmd_run_scenario;

#[derive(Parser)]
#[command(name = "faultline", version, about = "Proves or breaks an SSD's durability promises under power loss.")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the cycles a scenario file describes (`faultline run SCENARIO.toml`); without one,
    /// the embedded demo (scenarios/demo.toml): a simulated drive behind the Quarch emulator on
    /// a pseudo-terminal, no hardware needed.
    Run(RunArgs),
    /// Take up a run of `faultline run` after the harness died (killed, or its host rebooted):
    /// finishes the cycle it died in and runs the rest.
    Resume(ResumeArgs),
    /// Write tagged data over a target, recording the ledger in a run directory. Running it
    /// again on the same run directory continues the run as a new cycle; killing it is the
    /// manual power-loss mode.
    Write(WriteArgs),
    /// Verify every sector of the span against the ledger.
    Verify(VerifyArgs),
    /// Print the identity of the sectors in a byte range of a target or dump file.
    Decode(DecodeArgs),
    /// Run the detection matrix: every fault model against the verifier, with ground truth.
    Selftest(SelftestArgs),
    /// Benchmark faultline against fio on the same target, alternating (overwrites it).
    Bench(cmd_bench::BenchArgs),
    /// Bring-up of power and link controllers: `controller list`, or
    /// `controller SPEC identify|status|on|off|cycle [--off-ms N]`.
    Controller(cmd_controller::ControllerArgs),
    /// Rebuild summary.json, junit.xml and report.html of a run directory from its event
    /// log (events.jsonl); exits with the run's verdict.
    Report(cmd_report::ReportArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum PatternArg {
    Seq,
    Random,
    Hotcold,
}

/// Which device a block target must be, and what may be destroyed on it.
#[derive(clap::Args, Clone, Default)]
struct DeviceArgs {
    /// Refuse the device unless its serial number (sysfs device/serial) is exactly this.
    #[arg(long)]
    expect_serial: Option<String>,
    /// Refuse the device unless its WWID/EUI/NGUID (sysfs wwid) is exactly this.
    #[arg(long)]
    expect_wwid: Option<String>,
    /// Refuse the device unless its model (sysfs device/model) is exactly this.
    #[arg(long)]
    expect_model: Option<String>,
    /// Refuse the target unless its capacity is exactly this many bytes.
    #[arg(long)]
    expect_size: Option<u64>,
}

impl DeviceArgs {
    fn expectation(&self) -> Expectation {
        Expectation {
            serial: self.expect_serial.clone(),
            wwid: self.expect_wwid.clone(),
            model: self.expect_model.clone(),
            size_bytes: self.expect_size,
            backing_file: None,
        }
    }
}

#[derive(Parser)]
struct WriteArgs {
    /// Target: a regular file or a block device (refused when mounted, swapped on, held by
    /// dm/md/LVM, or carrying a partition table or filesystem, see --allow-overwrite-signature).
    #[arg(long)]
    target: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// Write over a device that carries a partition table or filesystem signature,
    /// destroying it.
    #[arg(long)]
    allow_overwrite_signature: bool,
    /// Issue 512 B-aligned writes that are not 4 KiB-aligned, as operating systems with
    /// misaligned partitions do: the span starts at byte 32256 (sector 63) unless
    /// --span-start says otherwise. Needs 512-byte logical sectors (refused on 4Kn).
    #[arg(long, conflicts_with = "align")]
    misaligned: bool,
    /// Run directory holding the ledger (never on the target).
    #[arg(long)]
    run_dir: PathBuf,
    /// Workload seed (default: random, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Number of writes in this cycle (default: one full pass over the span).
    #[arg(long, conflicts_with = "duration_s")]
    writes: Option<u64>,
    /// Write for this many seconds.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Fixed write size in bytes (sets min, max and mean). Default 4096.
    #[arg(long, conflicts_with_all = ["min_write", "max_write"])]
    block_size: Option<u64>,
    /// Smallest write, bytes.
    #[arg(long, requires = "max_write")]
    min_write: Option<u64>,
    /// Largest write, bytes.
    #[arg(long, requires = "min_write")]
    max_write: Option<u64>,
    /// Mean write size, bytes (default: halfway between min and max).
    #[arg(long)]
    mean_write: Option<u64>,
    /// Offsets and sizes are multiples of this (512 makes writes straddle 4 KiB boundaries).
    #[arg(long)]
    align: Option<u64>,
    /// Durability contract the drive claims.
    #[arg(long, value_parser = ["plp", "flush"])]
    contract: Option<String>,
    /// Submit a flush every N writes.
    #[arg(long)]
    flush_every: Option<u64>,
    /// Submit a flush every T milliseconds.
    #[arg(long)]
    flush_every_ms: Option<u64>,
    /// Percentage of writes issued with FUA.
    #[arg(long)]
    fua_percent: Option<u8>,
    /// Address pattern.
    #[arg(long, value_enum)]
    pattern: Option<PatternArg>,
    /// Operations in flight (default 64).
    #[arg(long)]
    queue_depth: Option<u32>,
    /// io_uring worker threads, each with its own ring, sharing the queue depth (1: one ring
    /// on the main thread). More help on drives faster than one core can feed.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    io_threads: u16,
    /// First byte of the span (default 0).
    #[arg(long)]
    span_start: Option<u64>,
    /// End of the span, exclusive (default: the target's size).
    #[arg(long)]
    span_end: Option<u64>,
    /// Atomic write unit the drive claims, bytes (default: the sector size, i.e. none).
    #[arg(long)]
    atomic_bytes: Option<u64>,
    /// Write the whole span once before the first cycle, so data at rest is checkable too.
    #[arg(long)]
    prefill: bool,
}

#[derive(Parser)]
struct VerifyArgs {
    #[arg(long)]
    target: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// A read that takes longer than this counts as unreadable (seconds).
    #[arg(long, default_value_t = 30.0)]
    read_timeout_s: f64,
    #[arg(long)]
    run_dir: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Verify from this byte (default: span start).
    #[arg(long)]
    offset: Option<u64>,
    /// Verify this many bytes (default: to the span end).
    #[arg(long)]
    length: Option<u64>,
}

#[derive(Parser)]
struct DecodeArgs {
    /// A target or a dump file.
    #[arg(long)]
    target: PathBuf,
    #[arg(long, default_value_t = 0)]
    offset: u64,
    #[arg(long, default_value_t = 4096)]
    length: u64,
    /// Sector size of the dump.
    #[arg(long, default_value_t = 512)]
    sector_bytes: u64,
    /// One line per sector instead of one per run of sectors from the same write.
    #[arg(long)]
    each: bool,
}

#[derive(Parser)]
struct SelftestArgs {
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cycles per row on honest models.
    #[arg(long, default_value_t = 850)]
    honest_cycles: u32,
    /// Cycles per row on faulty models.
    #[arg(long, default_value_t = 40)]
    faulty_cycles: u32,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModelArg {
    HonestPlp,
    HonestVolatile,
    LiesAboutFlush,
    TornWrites,
    Misdirects,
    BitRot,
    Rollback,
    ReadErrors,
    ReadHangs,
    DiesAfterCuts,
}

#[derive(Parser)]
struct RunArgs {
    /// Scenario file (see scenarios/). Without it: the embedded demo (scenarios/demo.toml),
    /// which the options below adjust.
    scenario: Option<PathBuf>,
    /// Run directory (default: faultline-runs/<timestamp>-<name>). Must not hold a run yet.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Seed for the workload, the drive's faults and the cut points. With a scenario file,
    /// used only when the scenario gives none; for the demo it replaces the demo's own.
    /// Default: random.
    #[arg(long)]
    seed: Option<u64>,
    /// Demo only: number of cycles (default: the demo's 300).
    #[arg(long, conflicts_with = "scenario")]
    cycles: Option<u32>,
    /// Demo only: the simulated drive's fault model (default: the demo's, which loses the
    /// newest acknowledged write at each cut).
    #[arg(long, value_enum, conflicts_with = "scenario")]
    model: Option<ModelArg>,
    /// Demo only: the contract the drive is held to (default: the demo's, plp).
    #[arg(long, value_parser = ["plp", "flush"], conflicts_with = "scenario")]
    contract: Option<String>,
}

#[derive(Parser)]
struct ResumeArgs {
    /// The run directory of the run to take up.
    run_dir: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Write(a) => cmd_write(a),
        Cmd::Verify(a) => cmd_verify(a),
        Cmd::Decode(a) => cmd_decode(a),
        Cmd::Selftest(a) => cmd_selftest(a),
        Cmd::Run(a) => cmd_run(a),
        Cmd::Resume(a) => cmd_run_scenario::cmd_resume(&a.run_dir),
        Cmd::Bench(a) => cmd_bench::cmd_bench(a),
        Cmd::Controller(a) => cmd_controller::cmd_controller(a),
        Cmd::Report(a) => cmd_report::cmd_report(a),
    };
    match r {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("faultline: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// OS randomness for ids and default seeds, without a dependency: std's hasher keys come
/// from the OS.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

fn now() -> String {
    chrono::Local::now().to_rfc3339()
}

fn cmd_write(a: WriteArgs) -> Result<u8> {
    let qd = a.queue_depth.unwrap_or(64);
    let continuing = exists(&a.run_dir);
    // A run that has begun wrote its own data over the device: its signature check was done
    // when the run was created.
    let mut target =
        open_cli_target(&a.target, true, qd as usize, &a.device, a.allow_overwrite_signature || continuing, a.io_threads as usize)?;
    let geo = target.geometry();
    if a.misaligned && geo.logical_block_bytes != 512 {
        bail!(
            "--misaligned needs 512-byte logical sectors, but {} has {}-byte logical sectors (4Kn): it cannot address a \
             512-byte offset; misaligned writes are only meaningful on 512n/512e devices",
            a.target.display(),
            geo.logical_block_bytes
        );
    }
    let misaligned_start = 63 * 512;
    let sector = (geo.logical_block_bytes as u64).max(512);
    let mut spec = WorkloadSpec {
        seed: a.seed.unwrap_or_else(random_u64),
        pattern: match a.pattern.unwrap_or(PatternArg::Random) {
            PatternArg::Seq => Pattern::Sequential,
            PatternArg::Random => Pattern::Random,
            PatternArg::Hotcold => Pattern::HotCold { hot_span_percent: 10, hot_write_percent: 90 },
        },
        span_start: a.span_start.unwrap_or(if a.misaligned { misaligned_start } else { 0 }),
        span_end: 0,
        min_write_bytes: a.block_size.or(a.min_write).unwrap_or(4096),
        max_write_bytes: a.block_size.or(a.max_write).unwrap_or(4096),
        mean_write_bytes: 0,
        align_bytes: 0,
        queue_depth: qd,
        flush: FlushPolicy { every_writes: a.flush_every, every_ms: a.flush_every_ms, fua_percent: a.fua_percent.unwrap_or(0) },
    };
    spec.mean_write_bytes = a.mean_write.unwrap_or((spec.min_write_bytes + spec.max_write_bytes) / 2);
    spec.align_bytes = a.align.unwrap_or_else(|| if spec.min_write_bytes.is_multiple_of(4096) && !a.misaligned { 4096 } else { sector });
    if a.misaligned && spec.span_start.is_multiple_of(4096) {
        bail!("--misaligned with --span-start {} (4 KiB-aligned) would write aligned data; use a start that is a multiple of 512 but not of 4096", spec.span_start);
    }
    spec.mean_write_bytes -= spec.mean_write_bytes % spec.align_bytes;
    spec.span_end = a.span_end.unwrap_or(geo.capacity_bytes / spec.max_write_bytes.max(1) * spec.max_write_bytes);
    let contract: Contract = a.contract.as_deref().unwrap_or("plp").parse().map_err(|e: String| anyhow!(e))?;

    if continuing {
        let h = replay(&a.run_dir)?;
        let w = &h.header.workload;
        let mut diffs = Vec::new();
        let mut cmp = |name: &str, given: Option<String>, recorded: String| {
            if let Some(g) = given {
                if g != recorded {
                    diffs.push(format!("--{name} {g} (the run has {recorded})"));
                }
            }
        };
        cmp("seed", a.seed.map(|v| v.to_string()), w.seed.to_string());
        cmp("contract", a.contract.clone(), format!("{:?}", h.header.contract).to_lowercase());
        cmp(
            "block-size",
            a.block_size.map(|v| v.to_string()),
            if w.min_write_bytes == w.max_write_bytes {
                w.min_write_bytes.to_string()
            } else {
                format!("{}..{}", w.min_write_bytes, w.max_write_bytes)
            },
        );
        cmp("queue-depth", a.queue_depth.map(|v| v.to_string()), w.queue_depth.to_string());
        cmp("flush-every", a.flush_every.map(|v| v.to_string()), w.flush.every_writes.map_or("none".into(), |v| v.to_string()));
        cmp("span-end", a.span_end.map(|v| v.to_string()), w.span_end.to_string());
        if !diffs.is_empty() {
            bail!(
                "run directory {} already holds a run with other settings: {}; omit them to continue the run, or use a new run directory",
                a.run_dir.display(),
                diffs.join(", ")
            );
        }
        if a.prefill {
            bail!("--prefill applies only to a new run (the run in {} has begun)", a.run_dir.display());
        }
    }
    let header = || RunHeader {
        ledger_format: LEDGER_FORMAT,
        run_id: random_u64(),
        created_at: now(),
        target_identity: target.identity(),
        target_capacity: geo.capacity_bytes,
        sector_bytes: sector,
        atomic_bytes: a.atomic_bytes.unwrap_or(sector),
        contract,
        port: 0,
        workload: spec.clone(),
    };
    let mut run = open_run(&a.run_dir, target.as_ref(), header)?;
    if let Some(c) = run.recovered_cycle {
        eprintln!("faultline: cycle {c} was interrupted (harness killed); closed it from its last checkpoint");
    }
    let h = run.history().header.clone();
    if run.created {
        eprintln!(
            "faultline: new run {:016x} on {} (seed {}, contract {:?}, span [{}, {}))",
            h.run_id, h.target_identity, h.workload.seed, h.contract, h.workload.span_start, h.workload.span_end
        );
        if run.layout.uncovered_tail() > 0 {
            eprintln!("faultline: note: the last {} bytes of the span are smaller than one max-size write and are not written (prefill covers them)", run.layout.uncovered_tail());
        }
        if a.prefill {
            let t = Instant::now();
            let n = prefill(target.as_mut(), &run.layout, &run.format, 0, &mut run.ledger)?;
            eprintln!("faultline: prefilled {} MiB in {:.1} s", n >> 20, t.elapsed().as_secs_f64());
        }
    }
    let (cycle, first_id) = run.next_cycle();
    let max_writes = match (a.writes, a.duration_s) {
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(run.layout.writes_per_pass()),
    };
    let opts = CycleOptions {
        cycle,
        first_id,
        started_at: now(),
        port: 0,
        max_writes,
        duration: a.duration_s.map(Duration::from_secs_f64),
        cut: None,
        checkpoint_every: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(60),
    };
    let contract = h.contract;
    let out = run_cycle(target.as_mut(), &run.layout, &run.format, &mut run.ledger, contract, &opts, &mut || {
        Err("no cut in a write-only cycle".into())
    })?;
    run.ledger.close()?;
    let secs = out.elapsed.as_secs_f64().max(1e-9);
    println!(
        "cycle {cycle}: {} writes ({} failed), {} flushes, {:.1} MiB in {:.2} s ({:.1} MiB/s, {:.0} writes/s); ids {}..{}",
        out.submitted,
        out.failed,
        out.flushes,
        out.bytes_written as f64 / 1048576.0,
        secs,
        out.bytes_written as f64 / 1048576.0 / secs,
        out.completed as f64 / secs,
        first_id,
        out.submitted_end
    );
    let lat: Vec<String> = target
        .latencies()
        .iter()
        .map(|(name, h)| {
            format!(
                "{name} p50 {:.0} us p99 {:.0} us max {:.0} us",
                h.percentile_ns(50.0) as f64 / 1e3,
                h.percentile_ns(99.0) as f64 / 1e3,
                h.max_ns as f64 / 1e3
            )
        })
        .collect();
    if !lat.is_empty() {
        println!("latency: {}", lat.join("; "));
    }
    Ok(0)
}

/// Opens a write or verify target through the engine and its guards, printing the engine's
/// notes (fallback engine, buffered I/O) one line each.
fn open_cli_target(
    path: &std::path::Path,
    writable: bool,
    qd: usize,
    dev: &DeviceArgs,
    allow_signature: bool,
    io_threads: usize,
) -> Result<Box<dyn BlockTarget>> {
    let spec = OpenSpec { writable, queue_depth: qd, expect: dev.expectation(), allow_overwrite_signature: allow_signature, io_threads };
    let Opened { target, notes, .. } = open_target(path, &spec)?;
    for n in notes {
        eprintln!("faultline: note: {n}");
    }
    Ok(target)
}

fn cmd_verify(a: VerifyArgs) -> Result<u8> {
    let history = replay(&a.run_dir)?;
    if history.torn_tail_bytes > 0 {
        eprintln!("faultline: note: the ledger ends in a torn record ({} bytes), ignored", history.torn_tail_bytes);
    }
    let mut target = open_cli_target(&a.target, false, 1, &a.device, false, 1)?;
    target.set_read_timeout(Duration::from_secs_f64(a.read_timeout_s.max(0.001)));
    check_target(&a.run_dir, &history.header, target.as_ref())?;
    let h = &history.header;
    let layout = Layout::new(h.workload.clone(), h.sector_bytes)?;
    let format = Format::new(h.run_id, h.sector_bytes as usize);
    let start = a.offset.unwrap_or(h.workload.span_start);
    let end = a.length.map_or(h.workload.span_end, |l| start + l);
    let t = Instant::now();
    let mut last = Instant::now();
    let total = end.saturating_sub(start);
    let rep = Verifier::new(&layout, &history, &format).verify_with_progress(target.as_mut(), start, end, &mut |done, findings| {
        if last.elapsed() >= Duration::from_secs(5) {
            let secs = t.elapsed().as_secs_f64();
            let rate = done as f64 / secs;
            eprintln!(
                "faultline: verified {:.1} of {:.1} GiB ({:.0}%), {findings} findings, {:.0} MiB/s, about {:.0} s left",
                done as f64 / 1073741824.0,
                total as f64 / 1073741824.0,
                100.0 * done as f64 / total as f64,
                rate / 1048576.0,
                (total - done) as f64 / rate.max(1.0)
            );
            last = Instant::now();
        }
    })?;
    let secs = t.elapsed().as_secs_f64();
    if a.json {
        let v = serde_json::json!({
            "summary": rep.summary(),
            "findings": rep.findings,
            "sectors": rep.sectors,
            "bytes": rep.bytes,
            "durable_ok": rep.durable_ok,
            "newer_ok": rep.newer_ok,
            "prior_ok": rep.prior_ok,
            "cycle": history.last_cycle(),
            "run_id": format!("{:016x}", h.run_id),
        });
        println!("{}", serde_json::to_string(&v)?);
    } else {
        print_report(&rep, secs);
    }
    Ok(if rep.findings.is_empty() { 0 } else { 1 })
}

fn print_report(rep: &VerifyReport, secs: f64) {
    println!(
        "verified {} sectors ({:.1} MiB) in {:.2} s: {} durable, {} newer (in flight or unflushed), {} never written",
        rep.sectors,
        rep.bytes as f64 / 1048576.0,
        secs,
        rep.durable_ok,
        rep.newer_ok,
        rep.prior_ok
    );
    for (class, n) in rep.summary() {
        if n > 0 {
            println!("  {class:<20} {n}");
        }
    }
    for f in rep.findings.iter().take(20) {
        println!(
            "  {} at byte {} (+{}): expected {} found {}: {}",
            f.class.name(),
            f.offset,
            f.length,
            serde_json::to_string(&f.expected).unwrap_or_default(),
            serde_json::to_string(&f.found).unwrap_or_default(),
            f.detail
        );
    }
    if rep.findings.len() > 20 {
        println!("  ... {} more (use --json for all)", rep.findings.len() - 20);
    }
    if rep.findings.is_empty() {
        println!("verdict: clean");
    } else {
        println!("verdict: {} findings", rep.findings.len());
    }
}

fn cmd_decode(a: DecodeArgs) -> Result<u8> {
    let s = a.sector_bytes;
    if s < 512 || !s.is_power_of_two() || !a.offset.is_multiple_of(s) || !a.length.is_multiple_of(s) {
        bail!("--offset {} and --length {} must be multiples of --sector-bytes {s} (a power of two, at least 512)", a.offset, a.length);
    }
    let file = std::fs::File::open(&a.target).with_context(|| format!("cannot open {}", a.target.display()))?;
    let mut buf = vec![0u8; a.length as usize];
    let n = read_up_to(&file, &mut buf, a.offset)?;
    if n < buf.len() {
        eprintln!("faultline: note: {} ends at byte {}; decoding {} bytes", a.target.display(), a.offset + n as u64, n - n % s as usize);
    }
    let mut last: Option<(String, u64, u64)> = None; // (key, first offset, sectors)
    let flush = |l: &Option<(String, u64, u64)>| {
        if let Some((k, off, n)) = l {
            println!("{off:>14} +{:<8} {k}", n * s);
        }
    };
    for (i, sec) in buf[..n - n % s as usize].chunks(s as usize).enumerate() {
        let off = a.offset + i as u64 * s;
        let id = read_header(sec);
        let text = if sec[..8] == MAGIC {
            let valid = matches!(Format::new(id.run_id, s as usize).decode(sec), Decoded::Valid(_));
            let addr_note = if id.addr == off { String::new() } else { format!(" MISPLACED(own address {})", id.addr) };
            let what = if id.write_id == 0 { "prefill".to_string() } else { format!("write {}", id.write_id) };
            (
                format!(
                    "run {:016x} {what} cycle {} port {} sectors of {}{}{}",
                    id.run_id,
                    id.cycle,
                    id.port,
                    id.count,
                    if valid { "" } else { " CHECKSUM-FAIL" },
                    addr_note
                ),
                Some(id.index),
            )
        } else if sec.iter().all(|&b| b == 0) {
            ("zeros".to_string(), None)
        } else {
            ("not a faultline sector".to_string(), None)
        };
        let key = text.0.clone();
        if a.each {
            println!("{off:>14} +{s:<8} {}{}", key, text.1.map_or(String::new(), |i| format!(" (sector {i})")));
            continue;
        }
        match &mut last {
            Some((k, _, cnt)) if *k == key => *cnt += 1,
            _ => {
                flush(&last);
                last = Some((key, off, 1));
            }
        }
    }
    flush(&last);
    Ok(0)
}

fn read_up_to(f: &std::fs::File, buf: &mut [u8], offset: u64) -> Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

fn cmd_selftest(a: SelftestArgs) -> Result<u8> {
    let opts = MatrixOptions { seed: a.seed, honest_cycles: a.honest_cycles, faulty_cycles: a.faulty_cycles, span_bytes: 2 << 20 };
    let scratch = std::env::temp_dir().join(format!("faultline-selftest-{}", std::process::id()));
    let t = Instant::now();
    let rows = run_matrix(&opts, &scratch, &mut |r| {
        if !a.json {
            eprintln!(
                "  {} {:?} {}: {} cycles{}",
                r.model,
                r.contract,
                r.workload,
                r.cycles,
                if r.clean() {
                    String::new()
                } else {
                    format!(" MISMATCH (seed {}): {}", r.seed, r.first_problem.clone().unwrap_or_default())
                }
            );
        }
    })?;
    let _ = std::fs::remove_dir_all(&scratch);
    let bad = rows.iter().filter(|r| !r.clean()).count();
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print!("{}", table(&rows));
        let cycles: u32 = rows.iter().map(|r| r.cycles).sum();
        let honest: u32 = rows.iter().filter(|r| r.honest).map(|r| r.cycles).sum();
        println!(
            "{} rows, {cycles} cut cycles ({honest} on honest models) in {:.1} s, seed {}: {}",
            rows.len(),
            t.elapsed().as_secs_f64(),
            a.seed,
            if bad == 0 {
                "every injected violation detected and classified, no false findings".to_string()
            } else {
                format!("{bad} rows disagree with ground truth")
            }
        );
    }
    Ok(if bad == 0 { 0 } else { 1 })
}

fn cmd_run(a: RunArgs) -> Result<u8> {
    if let Some(path) = &a.scenario {
        let s = Scenario::load(path)?;
        return cmd_run_scenario::cmd_run_scenario(s, &path.display().to_string(), a.run_dir.clone(), a.seed);
    }
    let origin = "the embedded demo, scenarios/demo.toml";
    let mut s = Scenario::from_toml(cmd_run_scenario::DEMO, origin)?;
    if let Some(n) = a.cycles {
        s.cycles.count = n;
    }
    if let Some(m) = a.model {
        let sim = s.target.sim.as_mut().ok_or_else(|| anyhow!("the demo scenario has no simulated drive"))?;
        sim.model = match m {
            ModelArg::HonestPlp => SimModel::HonestPlp,
            ModelArg::HonestVolatile => SimModel::HonestVolatile,
            ModelArg::LiesAboutFlush => SimModel::LiesAboutFlush,
            ModelArg::TornWrites => SimModel::TornWrites,
            ModelArg::Misdirects => SimModel::Misdirects { per_mille: 2 },
            ModelArg::BitRot => SimModel::BitRot { flips_per_cut: 1 },
            ModelArg::Rollback => SimModel::Rollback { writes_per_cut: 1 },
            ModelArg::ReadErrors => SimModel::ReadErrors { sectors_per_cut: 1 },
            ModelArg::ReadHangs => SimModel::ReadHangs { sectors_per_cut: 1 },
            ModelArg::DiesAfterCuts => SimModel::DiesAfterCuts { cuts: 50 },
        };
    }
    if let Some(c) = &a.contract {
        s.contract = c.parse().map_err(|e: String| anyhow!(e))?;
    }
    if a.seed.is_some() {
        s.seed = a.seed;
    }
    s.validate(origin)?;
    cmd_run_scenario::cmd_run_scenario(s, origin, a.run_dir, None)
}
