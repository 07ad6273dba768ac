//! A performance run's read load, the agent's side (`read_load`, version 6): it reads its
//! port's share sequentially, one read in flight, for the time asked, then sends each read's
//! completion (its instant on the agent's monotonic clock, latency, bytes, success) in bounded
//! parts.

use super::checked::{self, Bad};
use super::peer::Peer;
use super::port::refused;
use crate::remote::parts::PART_ITEMS;
use crate::remote::proto::{Answer, VerifiedPart};
use crate::writer::{PortSamples, WireSamples};
use faultline_drivers::BlockTarget;
use std::time::Duration;

/// The longest read load an agent runs: a performance phase is seconds to minutes.
pub const MAX_LOAD: Duration = Duration::from_secs(600);

/// Runs the read load on `target` over `span` for `run_ms` (stopping early once `peer` is
/// gone), then sends its completions to `send` in parts of at most [`PART_ITEMS`]; the
/// answer counts them. At most [`WIRE_KEPT`](crate::writer::windows::WIRE_KEPT) completions are kept.
pub(crate) fn read_load(
    target: &mut dyn BlockTarget,
    peer: &Peer,
    (span, run_ms): ([u64; 2], u64),
    send: &mut dyn FnMut(VerifiedPart) -> std::io::Result<()>,
) -> std::io::Result<Answer> {
    let checked = checked::millis("run_ms", run_ms, MAX_LOAD).and_then(|run_for| {
        let g = target.geometry();
        let block = u64::from(g.logical_block_bytes).max(512);
        let ranges = checked::hash_ranges(&[span], block, &g).map_err(|e| Bad { field: "span".into(), why: e.why })?;
        match ranges.as_slice() {
            [(a, b)] if a < b => Ok((run_for, (*a, *b))),
            _ => Err(Bad { field: "span".into(), why: format!("[{}, {}) is empty", span[0], span[1]) }),
        }
    });
    let (run_for, span) = match checked {
        Ok(x) => x,
        Err(e) => return Ok(refused(e)),
    };
    let kept = WireSamples::new(crate::writer::windows::clock_anchor());
    crate::runner::dut::read_load_on(target, span, run_for, &PortSamples::Wire(kept.clone()), &|| peer.gone().is_some());
    let samples = kept.take();
    for c in samples.chunks(PART_ITEMS) {
        send(VerifiedPart::Samples(c.to_vec()))?;
    }
    Ok(Answer::ReadLoaded { count: samples.len() as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::WireSample;
    use faultline_fixtures::{FaultModel, SimConfig, SimDrive, TruthContract};

    fn drive() -> SimDrive {
        SimDrive::new(SimConfig {
            capacity_bytes: 4 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            queue_depth: 4,
            seed: 3,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
            dealloc_reads: Default::default(),
        })
    }

    /// Reads for the time asked, then sends every completion in parts, each a read of at
    /// most 128 KiB inside the span; the answer counts what the parts carried.
    #[test]
    fn a_read_load_sends_every_completion_then_counts_them() {
        let mut d = drive();
        let mut got: Vec<WireSample> = Vec::new();
        let t0 = std::time::Instant::now();
        let a = read_load(&mut d, &Peer::default(), ([1 << 20, 3 << 20], 50), &mut |p| {
            let VerifiedPart::Samples(s) = p else { panic!("{p:?}") };
            assert!(s.len() <= PART_ITEMS);
            got.extend(s);
            Ok(())
        })
        .unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(50));
        assert!(matches!(a, Answer::ReadLoaded { count } if count == got.len() as u64 && count > 0), "{a:?}");
        assert!(got.iter().all(|&[_, _, bytes, ok]| ok == 1 && bytes > 0 && bytes <= 128 << 10), "{:?}", &got[..3]);
    }

    /// What the wire asks is held to the target: a span outside it, an empty one, and a load
    /// longer than [`MAX_LOAD`] are refused, naming the field; a coordinator that went stops
    /// the load at once.
    #[test]
    fn a_read_load_outside_the_target_too_long_or_for_a_gone_peer_is_refused_or_stopped() {
        let mut d = drive();
        let mut none = |p: VerifiedPart| panic!("no part expected: {p:?}");
        for (span, ms, field) in [([0, 8 << 20], 10, "span"), ([4096, 4096], 10, "span"), ([0, 4096], 700_000, "run_ms")] {
            match read_load(&mut d, &Peer::default(), (span, ms), &mut none).unwrap() {
                Answer::Failed { why } => assert!(why.contains("refused") && why.contains(field), "{span:?} {ms}: {why}"),
                other => panic!("{span:?} {ms}: {other:?}"),
            }
        }
        let gone = Peer::default();
        gone.mark(crate::remote::agent::peer::Gone::Closed);
        let t0 = std::time::Instant::now();
        let a = read_load(&mut d, &gone, ([0, 1 << 20], 10_000), &mut |_| Ok(())).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1) && matches!(a, Answer::ReadLoaded { count: 0 }), "{a:?}");
    }
}
