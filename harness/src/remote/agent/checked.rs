//! What arrives in a coordinator's request, held to the agent's own facts before anything is
//! read, written or allocated by it (docs/PROTOCOL.md, "Limits"): a run's geometry against the
//! open target, byte ranges against its capacity and sector, times and counts against fixed
//! bounds. A value that fails is refused with `failed`, naming the field and why; the session
//! goes on. Nothing from the wire reaches an assert, a panic or an allocation it sizes.

use crate::format::{bad_sector_size, Format};
use crate::ledger::RunHeader;
use crate::workload::Layout;
use faultline_drivers::Geometry;
use std::time::Duration;

/// The longest a `wait_ready` may be asked to wait, and a cycle's drain.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// The longest a cycle may be asked to run (a soak's cycle is minutes; a week is no cycle).
pub const MAX_CYCLE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The longest stream interval: a host that dies costs the coordinator at most one.
pub const MAX_STREAM_EVERY: Duration = Duration::from_secs(10);
/// The longest a link reset's down phase may be held.
pub const MAX_HOLD: Duration = Duration::from_secs(600);
/// The deepest queue an `open` may ask for (the workload's own bound).
pub const MAX_QUEUE_DEPTH: u32 = 4096;

/// A refused field: what it is and why, for the `failed` answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct Bad {
    pub field: String,
    pub why: String,
}

fn bad(field: impl Into<String>, why: impl Into<String>) -> Bad {
    Bad { field: field.into(), why: why.into() }
}

/// A time in ms from the wire, at most `max`.
pub fn millis(field: &str, ms: u64, max: Duration) -> Result<Duration, Bad> {
    let d = Duration::from_millis(ms);
    if d > max {
        return Err(bad(field, format!("{ms} ms is more than the {} s this agent waits", max.as_secs())));
    }
    Ok(d)
}

/// A cycle request's times, each held to its bound.
pub struct CycleTimes {
    pub duration: Option<Duration>,
    pub stream_every: Duration,
    pub drain: Duration,
    /// The reset's hold (zero without a reset).
    pub hold: Duration,
}

/// The times of cycle request `req`, each at most its bound.
pub fn cycle_times(req: &crate::remote::proto::CycleRequest) -> Result<CycleTimes, Bad> {
    Ok(CycleTimes {
        duration: req.duration_ms.map(|v| millis("duration_ms", v, MAX_CYCLE)).transpose()?,
        stream_every: millis("stream_every_ms", req.stream_every_ms, MAX_STREAM_EVERY)?,
        drain: millis("drain_timeout_ms", req.drain_timeout_ms, MAX_WAIT)?,
        hold: req.reset.map(|r| millis("reset.hold_ms", r.hold_ms, MAX_HOLD)).transpose()?.unwrap_or_default(),
    })
}

/// A queue depth from the wire: 1 to [`MAX_QUEUE_DEPTH`].
pub fn queue_depth(qd: u32) -> Result<u32, Bad> {
    if qd == 0 || qd > MAX_QUEUE_DEPTH {
        return Err(bad("queue_depth", format!("{qd}: a queue depth is 1 to {MAX_QUEUE_DEPTH}")));
    }
    Ok(qd)
}

/// A run, as a request's header describes it, on the target `g` describes: its layout and
/// sector format. The header's sector size is the format's (the header could not be read
/// otherwise), a whole number of the target's logical blocks; its span lies inside the target.
pub fn run(h: &RunHeader, g: &Geometry) -> Result<(Layout, Format), Bad> {
    let logical = (g.logical_block_bytes as u64).max(1);
    if let Some(why) = bad_sector_size(h.sector_bytes) {
        return Err(bad("header.sector_bytes", why));
    }
    if !h.sector_bytes.is_multiple_of(logical) {
        return Err(bad("header.sector_bytes", format!("{} is not a whole number of this target's {logical}-byte blocks", h.sector_bytes)));
    }
    if h.workload.span_end > g.capacity_bytes {
        return Err(bad(
            "header.workload.span_end",
            format!("{} is past the end of this target ({} bytes): refusing to write outside it", h.workload.span_end, g.capacity_bytes),
        ));
    }
    let layout = Layout::new(h.workload.clone(), h.sector_bytes).map_err(|e| bad("header.workload", e.to_string()))?;
    Ok((layout, Format::new(h.run_id, h.sector_bytes as usize)))
}

/// A byte offset of one sector's read on the target (`probe`, `wait_ready`).
pub fn offset(field: &str, at: u64, g: &Geometry) -> Result<u64, Bad> {
    let block = (g.logical_block_bytes as u64).max(512);
    if !at.is_multiple_of(block) || at.checked_add(block).is_none_or(|end| end > g.capacity_bytes) {
        return Err(bad(field, format!("byte {at} is not the start of one of this target's {block}-byte blocks")));
    }
    Ok(at)
}

/// A sector size and ranges to hash on the target: the size a power of two the format takes
/// and a whole number of the target's blocks; each range `[start, end)` aligned to it, inside
/// the target, and after the one before. The hashes they ask for are sent as they are read,
/// so their number bounds nothing the agent holds.
pub fn hash_ranges(ranges: &[[u64; 2]], sector: u64, g: &Geometry) -> Result<Vec<(u64, u64)>, Bad> {
    let logical = (g.logical_block_bytes as u64).max(1);
    if let Some(why) = bad_sector_size(sector) {
        return Err(bad("sector", why));
    }
    if !sector.is_multiple_of(logical) {
        return Err(bad("sector", format!("{sector} is not a whole number of this target's {logical}-byte blocks")));
    }
    sorted_ranges("ranges", ranges, sector, (0, g.capacity_bytes))
}

/// Regions `[start, end)` to verify: aligned to `sector`, inside `within`, disjoint (in any
/// order, as the verifier takes them), so that together they are no larger than `within`.
pub fn regions(regions: &[[u64; 2]], sector: u64, within: (u64, u64)) -> Result<Vec<(u64, u64)>, Bad> {
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_by_key(|&i| regions[i][0]);
    let sorted: Vec<[u64; 2]> = order.iter().map(|&i| regions[i]).collect();
    sorted_ranges("regions", &sorted, sector, within).map_err(|mut e| {
        // Name the region as the request gave it.
        if let Some(k) = e.field.strip_prefix("regions[").and_then(|r| r.strip_suffix(']')).and_then(|k| k.parse::<usize>().ok()) {
            e.field = format!("regions[{}]", order[k]);
        }
        e
    })?;
    Ok(regions.iter().map(|r| (r[0], r[1])).collect())
}

fn sorted_ranges(field: &str, ranges: &[[u64; 2]], sector: u64, within: (u64, u64)) -> Result<Vec<(u64, u64)>, Bad> {
    let mut after = within.0;
    let mut out = Vec::with_capacity(ranges.len());
    for (i, &[a, b]) in ranges.iter().enumerate() {
        let why = if a >= b {
            Some("empty or reversed".to_string())
        } else if !a.is_multiple_of(sector) || !b.is_multiple_of(sector) {
            Some(format!("not aligned to {sector}-byte sectors"))
        } else if a < after || b > within.1 {
            Some(format!("not inside [{after}, {}) (ranges are sorted, disjoint, within the target's span)", within.1))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(bad(format!("{field}[{i}]"), format!("[{a}, {b}): {why}")));
        }
        after = b;
        out.push((a, b));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry { capacity_bytes: 8 << 20, logical_block_bytes: 512, physical_block_bytes: 4096 }
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_field() {
        let g = geometry();
        let mut h = crate::ledger::tests::header();
        h.workload.span_end = 16 << 20;
        assert_eq!(run(&h, &g).err().map(|e| e.field).as_deref(), Some("header.workload.span_end"));
        assert_eq!(hash_ranges(&[[0, 512]], 256, &g).unwrap_err().field, "sector");
        assert_eq!(hash_ranges(&[[0, 512]], 0, &g).unwrap_err().field, "sector");
        assert_eq!(hash_ranges(&[[0, 1 << 36]], 512, &g).unwrap_err().field, "ranges[0]");
        assert_eq!(hash_ranges(&[[0, 1024], [512, 2048]], 512, &g).unwrap_err().field, "ranges[1]");
        assert_eq!(hash_ranges(&[[0, 1000]], 512, &g).unwrap_err().field, "ranges[0]");
        assert_eq!(hash_ranges(&[[0, 1024], [4096, 8192]], 512, &g).unwrap(), vec![(0, 1024), (4096, 8192)]);
        assert_eq!(offset("at", 8 << 20, &g).unwrap_err().field, "at");
        assert_eq!(offset("at", 100, &g).unwrap_err().field, "at");
        assert_eq!(offset("at", u64::MAX - 100, &g).unwrap_err().field, "at");
        assert!(offset("at", 0, &g).is_ok());
        assert_eq!(millis("timeout_ms", u64::MAX, MAX_WAIT).unwrap_err().field, "timeout_ms");
        assert_eq!(queue_depth(0).unwrap_err().field, "queue_depth");
        assert_eq!(queue_depth(u32::MAX).unwrap_err().field, "queue_depth");
        assert_eq!(regions(&[[0, 512]], 512, (4096, 8192)).unwrap_err().field, "regions[0]");
    }

    #[test]
    fn a_header_with_a_sector_size_the_format_cannot_take_is_not_read() {
        for bad in [0u64, 256, 1000, 1 << 20] {
            let mut h = serde_json::to_value(crate::ledger::tests::header()).unwrap();
            h["sector_bytes"] = bad.into();
            let e = serde_json::from_value::<RunHeader>(h).unwrap_err().to_string();
            assert!(e.contains(&format!("sector_bytes {bad}")), "{e}");
        }
    }
}
