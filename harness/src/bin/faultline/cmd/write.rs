//! `faultline write`: one cycle of tagged writes over a target (no cut).

use crate::args::{DeviceArgs, PatternArg};
use crate::exit::Exit;
use anyhow::{anyhow, bail, Result};
use clap::Parser;
use faultline::ledger::{replay, Contract, RunHeader, TargetFacts};
use faultline::run::{exists, open_run};
use faultline::workload::{FlushPolicy, Pattern, WorkloadSpec};
use faultline::writer::{prefill, run_cycle, CycleOptions, CycleOutcome};
use faultline_drivers::{open_target, BlockTarget, Geometry, OpenSpec, Opened};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
pub struct WriteArgs {
    /// Target: a regular file or a block device (refused when mounted, swapped on, held by
    /// dm/md/LVM, or carrying a partition table or filesystem, see --allow-overwrite-signature),
    /// or an NBD export: nbd+unix:///EXPORT?socket=PATH, nbd://HOST[:PORT]/EXPORT (docs/NBD.md).
    #[arg(long)]
    target: PathBuf,
    #[command(flatten)]
    device: DeviceArgs,
    /// Write over a device that carries a partition table or filesystem signature,
    /// destroying it.
    #[arg(long)]
    allow_overwrite_signature: bool,
    /// Refused: a copy of a run's target can be verified (`faultline verify
    /// --image-of-target`), never written as the run's target.
    #[arg(long, hide = true)]
    image_of_target: bool,
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

pub fn cmd_write(a: WriteArgs) -> Result<Exit> {
    if a.image_of_target {
        anyhow::bail!(
            "--image-of-target is for a read-only `faultline verify` of a copy; `write` writes only to the target its run directory is bound to"
        );
    }
    let qd = a.queue_depth.unwrap_or(64);
    let continuing = exists(&a.run_dir);
    // A run that has begun wrote its own data over the device: its signature check was done
    // when the run was created.
    let mut target =
        open_cli_target(&a.target, true, qd as usize, &a.device, a.allow_overwrite_signature || continuing, a.io_threads as usize)?;
    let geo = target.geometry();
    let spec = workload_spec(&a, &geo, qd)?;
    let sector = (geo.logical_block_bytes as u64).max(512);
    let contract: Contract = a.contract.as_deref().unwrap_or("plp").parse().map_err(|e: faultline::ledger::UnknownContract| anyhow!(e))?;

    if continuing {
        check_continued_run(&a)?;
    }
    let header = || {
        let facts = TargetFacts { atomic_bytes: a.atomic_bytes.unwrap_or(sector), ..TargetFacts::of(target.as_ref()) };
        RunHeader::new(crate::random_u64(), crate::now(), facts, contract, faultline::port::PortEntry::single(), spec.clone())
    };
    let mut run = open_run(&a.run_dir, &faultline::run::DeviceFacts::of(target.as_ref()), header)?;
    if let Some(c) = run.recovered_cycle {
        eprintln!("faultline: cycle {c} was interrupted (harness killed); closed it from its last checkpoint");
    }
    let h = run.history().header.clone();
    if run.created {
        eprintln!(
            "faultline: new run {:016x} on {} (seed {}, contract {}, span [{}, {}))",
            h.run_id, h.target_identity, h.workload.seed, h.contract, h.workload.span_start, h.workload.span_end
        );
        if run.layout.uncovered_tail() > 0 {
            eprintln!("faultline: note: the last {} bytes of the span are smaller than one max-size write and are not written (prefill covers them)", run.layout.uncovered_tail());
        }
        if a.prefill {
            let t = Instant::now();
            let n = prefill(target.as_mut(), &run.layout, &run.format, faultline::port::PortId::A, &mut run.ledger)?;
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
        started_at: crate::now(),
        port: faultline::port::PortId::A,
        max_writes,
        duration: a.duration_s.map(Duration::from_secs_f64),
        cut: None,
        checkpoint_every: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(60),
        stop: None,
        samples: None,
        fill: faultline::writer::Fill::Auto,
        clock_from: None,
        before_end: None,
    };
    let contract = h.contract;
    let out = run_cycle(target.as_mut(), &run.layout, &run.format, &mut run.ledger, contract, &opts, &mut || {
        Err("no cut in a write-only cycle".into())
    })?;
    run.ledger.close()?;
    print_cycle(cycle, first_id, &out, target.as_ref());
    if let Some(why) = &out.device_lost {
        eprintln!(
            "faultline: error: the target went away during cycle {cycle}: {why}; stopped after {} writes ({} failed), the ledger holds what completed",
            out.submitted, out.failed
        );
        return Ok(Exit::HarnessError);
    }
    if out.final_flush_failed {
        eprintln!("faultline: error: the flush that closes cycle {cycle} failed: what it wrote is not known durable");
        return Ok(Exit::HarnessError);
    }
    Ok(Exit::Clean)
}

/// The workload of a new run, from the flags and the target's geometry.
fn workload_spec(a: &WriteArgs, geo: &Geometry, qd: u32) -> Result<WorkloadSpec> {
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
        seed: a.seed.unwrap_or_else(crate::random_u64),
        pattern: match a.pattern.unwrap_or(PatternArg::Random) {
            PatternArg::Seq => Pattern::Sequential {},
            PatternArg::Random => Pattern::Random {},
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
        ops: Default::default(),
    };
    spec.mean_write_bytes = a.mean_write.unwrap_or((spec.min_write_bytes + spec.max_write_bytes) / 2);
    spec.align_bytes = a.align.unwrap_or_else(|| if spec.min_write_bytes.is_multiple_of(4096) && !a.misaligned { 4096 } else { sector });
    if a.misaligned && spec.span_start.is_multiple_of(4096) {
        bail!("--misaligned with --span-start {} (4 KiB-aligned) would write aligned data; use a start that is a multiple of 512 but not of 4096", spec.span_start);
    }
    spec.mean_write_bytes -= spec.mean_write_bytes % spec.align_bytes;
    spec.span_end = a.span_end.unwrap_or(geo.capacity_bytes / spec.max_write_bytes.max(1) * spec.max_write_bytes);
    Ok(spec)
}

/// Refuses flags that contradict the settings of the run being continued.
fn check_continued_run(a: &WriteArgs) -> Result<()> {
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
    cmp("contract", a.contract.clone(), h.header.contract.to_string());
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
    Ok(())
}

/// The cycle's summary line and the target's latency percentiles.
fn print_cycle(cycle: u32, first_id: u64, out: &CycleOutcome, target: &dyn BlockTarget) {
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
}

/// Opens a write or verify target through the engine and its guards, printing the engine's
/// notes (fallback engine, buffered I/O) one line each.
pub(crate) fn open_cli_target(
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
