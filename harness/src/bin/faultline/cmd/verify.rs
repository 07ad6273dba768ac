//! `faultline verify`: every sector of a span against the ledger.

use super::write::open_cli_target;
use crate::args::DeviceArgs;
use crate::exit::Exit;
use anyhow::Result;
use clap::Parser;
use faultline::events::Verdict;
use faultline::format::Format;
use faultline::ledger::{replay, Applied, LedgerWriter, Record};
use faultline::report::console::verdict_line;
use faultline::run::{check_copy, check_target, close_interrupted, DeviceFacts};
use faultline::run_dir;
use faultline::verify::{offline_seen_record, Verifier, VerifyReport};
use faultline::workload::Layout;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
pub struct VerifyArgs {
    /// Target: the run's file, block device or NBD export (nbd+unix:///EXPORT?socket=PATH,
    /// nbd://HOST[:PORT]/EXPORT), or a copy of it with --image-of-target.
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
    /// The target is a copy (a `dd` image) of the drive the run directory is bound to: verify
    /// it although its identity differs. Read-only; the output names both identities.
    #[arg(long)]
    image_of_target: bool,
}

pub fn cmd_verify(a: VerifyArgs) -> Result<Exit> {
    // Held while reading the ledger and appending what this verify saw. Without it (a run in
    // progress holds it, or the run directory is read-only) the verify still runs and records
    // nothing. A copy (--image-of-target) records nothing either: what a copy shows is no
    // evidence of what the drive showed.
    let lock = match (faultline::run::exists(&a.run_dir) && !a.image_of_target).then(|| run_dir::lock(&a.run_dir)) {
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => {
            eprintln!("faultline: note: {e}: verifying without recording what the drive showed");
            None
        }
        None => None,
    };
    let mut history = replay(&a.run_dir)?;
    if history.torn_tail_bytes > 0 {
        eprintln!("faultline: note: the ledger ends in a torn record ({} bytes), ignored", history.torn_tail_bytes);
    }
    let mut target = open_cli_target(&a.target, false, 1, &a.device, false, 1)?;
    target.set_read_timeout(Duration::from_secs_f64(a.read_timeout_s.max(0.001)));
    let h = &history.header;
    let given = target.identity();
    if a.image_of_target {
        check_copy(h, target.as_ref())?;
        eprintln!(
            "faultline: note: verifying `{given}` as a copy of `{}`, the run's target (--image-of-target): findings are about the copy as read",
            h.target_identity
        );
    } else {
        check_target(&a.run_dir, h, &DeviceFacts::of(target.as_ref()))?;
    }
    // A cycle a killed `write` left open is closed first, as the next write would close it,
    // so that what this verify sees of its uncertain writes is recorded (below).
    if lock.is_some() && history.cycles.last().is_some_and(|c| c.end.is_none()) {
        let mut ledger = LedgerWriter::open(&a.run_dir, &history)?;
        let closed = close_interrupted(&mut ledger)?;
        ledger.close()?;
        // Read back, not taken from the writer: a second writer opened on the first one's
        // in-memory history numbered its record wrongly (replay: "sequence number 12,
        // expected 11").
        history = replay(&a.run_dir)?;
        if let Some(c) = closed {
            eprintln!("faultline: cycle {c} was interrupted (harness killed); closed it from its last checkpoint, as the next write would");
        }
    }
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
    let seen = match (&lock, offline_seen_record(&history, &layout, &[(start, end)], &rep.seen)) {
        (Some(_), Some(ref rec @ Record::Seen { cycle, ref writes })) => {
            let held = writes.iter().filter(|w| w.applied != Applied::NotAtAll).count();
            let mut ledger = LedgerWriter::open(&a.run_dir, &history)?;
            ledger.append(rec)?;
            ledger.close()?;
            Some(serde_json::json!({ "cycle": cycle, "writes": writes.len(), "held": held }))
        }
        _ => None,
    };
    drop(lock);
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
            "target": {
                "identity": given,
                "image_of": a.image_of_target.then(|| h.target_identity.clone()),
            },
            "seen_recorded": seen,
        });
        println!("{}", serde_json::to_string(&v)?);
    } else {
        if a.image_of_target {
            println!("target `{given}`, verified as a copy of `{}` (--image-of-target)", h.target_identity);
        }
        print_report(&rep, secs);
        if let Some(s) = &seen {
            println!(
                "recorded in the ledger: {} of cycle {}'s uncertain writes seen applied (a later verify holds them)",
                s["held"], s["cycle"]
            );
        }
    }
    Ok(if rep.findings.is_empty() { Exit::Clean } else { Exit::Findings })
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
    let verdict = if rep.findings.is_empty() { Verdict::Clean } else { Verdict::Findings };
    println!("{}", verdict_line(verdict, rep.findings.len() as u64, 0, None, ""));
}
