//! Prefill: the whole span written once with prefill sectors, flushed, and recorded.

use super::{WriteError, FLUSH_TOKEN};
use crate::format::Format;
use crate::ledger::{Ledger, Record};
use crate::port::PortId;
use crate::verify::prefill_id;
use crate::workload::Layout;
use faultline_drivers::{AlignedBuf, BlockTarget, Op};
use std::time::Duration;

/// Writes the prefill version of every sector in the span, flushes, and records it.
pub fn prefill(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    port: PortId,
    ledger: &mut dyn Ledger,
) -> Result<u64, WriteError> {
    prefill_then(target, layout, format, port, ledger, &mut || Ok(()))
}

/// As [`prefill`], calling `before_record` once the data is written and flushed and before the
/// ledger records it (a simulated drive saves itself there, so that the ledger never claims
/// more than the saved drive holds).
pub fn prefill_then(
    target: &mut dyn BlockTarget,
    layout: &Layout,
    format: &Format,
    port: PortId,
    ledger: &mut dyn Ledger,
    before_record: &mut dyn FnMut() -> Result<(), super::HookError>,
) -> Result<u64, WriteError> {
    prefill_data(target, layout, format, port)?;
    let spec = layout.spec();
    before_record().map_err(WriteError::BeforeRecord)?;
    ledger.append(&Record::PrefillDone { span_start: spec.span_start, span_end: spec.span_end })?;
    ledger.sync()?;
    Ok(spec.span_end - spec.span_start)
}

/// The prefill's data alone: port `port`'s span written with its prefill pattern and flushed,
/// nothing recorded (an agent writes it on its host; the coordinator records it).
pub fn prefill_data(target: &mut dyn BlockTarget, layout: &Layout, format: &Format, port: PortId) -> Result<(), WriteError> {
    let spec = layout.spec();
    let sector = format.sector_bytes();
    let chunk = 1u64 << 20;
    let qd = target.queue_depth().clamp(1, 32);
    let mut pos = spec.span_start;
    let mut pool: Vec<AlignedBuf> = Vec::new();
    let mut sums = Vec::new();
    let mut done = Vec::new();
    let mut inflight = 0usize;
    let mut failures = Vec::new();
    while pos < spec.span_end || inflight > 0 {
        while pos < spec.span_end && inflight < qd {
            let n = (spec.span_end - pos).min(chunk);
            let mut buf = pool.pop().unwrap_or_else(|| AlignedBuf::zeroed(chunk as usize));
            buf.resize(n as usize);
            format.encode_sectors(&mut buf, |i| prefill_id(format.run_id(), pos + (i * sector) as u64, port.0), &mut sums);
            target.submit(Op::Write { token: pos, offset: pos, buf, fua: false, write_id: 0 })?;
            inflight += 1;
            pos += n;
        }
        done.clear();
        if target.reap(&mut done, 1, Duration::from_secs(60))? == 0 {
            return Err(WriteError::Stalled("prefill: no completion within 60 s".into()));
        }
        for c in done.drain(..) {
            inflight -= 1;
            if let Err(e) = c.result {
                failures.push(e.to_string());
            }
            pool.extend(c.buf);
        }
    }
    target.submit(Op::Flush { token: FLUSH_TOKEN })?;
    done.clear();
    target.reap(&mut done, 1, Duration::from_secs(60))?;
    if let Some(e) = failures.first().cloned().or_else(|| done.first().and_then(|c| c.result.as_ref().err().map(|e| e.to_string()))) {
        return Err(WriteError::Stalled(format!("prefill failed ({} errors), first: {e}", failures.len().max(1))));
    }
    Ok(())
}
