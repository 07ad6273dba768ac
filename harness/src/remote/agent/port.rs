//! The agent's one port: the target it opened for its coordinator (one of those its own
//! command line lists), opened again when it comes back, its health pages, and the prefill.
//! Every value a request gives is held to the target first ([`checked`](super::checked)), and
//! every long operation runs on the target through [`Watched`], so it stops at its next I/O
//! once the coordinator is gone.

use super::checked::{self, Bad};
use super::peer::{Peer, Watched};
use crate::remote::proto::{self, Answer, TargetInfo};
use faultline_drivers::{open_target, BlockTarget, OpenSpec};
use std::time::Duration;

/// What the agent says of itself, and what it may open.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub software: String,
    pub host: String,
    pub pid: u32,
    pub allow_exec: bool,
    /// The targets this agent may open (its own command line's `--target`s): a path or an
    /// NBD URI each. An `open` naming anything else is refused.
    pub targets: Vec<String>,
}

/// Writes the port's share with its prefill pattern and flushes; the coordinator records it.
pub(crate) fn prefill(target: &mut Watched<'_>, h: &crate::ledger::RunHeader, port: crate::port::PortId) -> Answer {
    let (layout, format) = match checked::run(h, &target.geometry()) {
        Ok(x) => x,
        Err(e) => return refused(e),
    };
    match crate::writer::prefill_data(target, &layout, &format, port) {
        Ok(()) => Answer::Prefilled { span_start: h.workload.span_start, span_end: h.workload.span_end },
        Err(e) => failed(format!("the prefill: {e}")),
    }
}

pub(crate) fn failed(why: impl Into<String>) -> Answer {
    Answer::Failed { why: why.into() }
}

/// The answer to a request with a bad field.
pub(crate) fn refused(b: Bad) -> Answer {
    failed(format!("refused: {b}"))
}

/// How long a probe's read may take.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The agent's one port: its open target, and how it was opened (to open it again).
#[derive(Default)]
pub(crate) struct Port {
    pub target: Option<Box<dyn BlockTarget>>,
    /// The listed target, the identity it was found with, the queue depth.
    pub opened: Option<(String, String, u32)>,
}

impl Port {
    /// The health pages of the listed target (a block device on an NVMe controller), raw.
    pub fn health(&self) -> Answer {
        let Some((listed, _, _)) = &self.opened else { return failed("no target was opened") };
        let path = std::path::Path::new(listed);
        if faultline_drivers::nbd::looks_like_nbd(listed) {
            return Answer::Health { smart: None, ocp: None, none: Some(format!("{listed} is an NBD export, which has no health logs")) };
        }
        let admin =
            match faultline_drivers::nvme::NvmeAdmin::open_for_block_device_in(path, &faultline_drivers::blockdev::SysRoots::system()) {
                Ok(a) => a,
                Err(e) => return Answer::Health { smart: None, ocp: None, none: Some(format!("{listed}: {e}")) },
            };
        let smart = match admin.smart_log() {
            Ok(b) => crate::remote::parts::hex(&b),
            Err(e) => return failed(format!("{listed}: SMART / health log: {e}")),
        };
        match admin.ocp_smart_log() {
            Ok(ocp) => Answer::Health { smart: Some(smart), ocp: ocp.map(|b| crate::remote::parts::hex(&b)), none: None },
            Err(e) => failed(format!("{listed}: OCP SMART log: {e}")),
        }
    }

    /// Waits until the target answers a read at `at`, opening it again (the same listed
    /// target, held to the identity it had) whenever it is not open; stops when `peer` goes.
    /// A target whose read failed is closed and opened again at the next poll: a handle may
    /// have given the device up for good (a block device's file after the controller went, an
    /// NBD connection after 8 EIO replies in a row), so keeping it would wait out the timeout
    /// on a device that came back.
    pub fn wait_ready(&mut self, at: u64, timeout_ms: u64, peer: &Peer) -> Answer {
        let Some((listed, identity, qd)) = self.opened.clone() else { return failed("no target was opened") };
        let timeout = match checked::millis("timeout_ms", timeout_ms, checked::MAX_WAIT) {
            Ok(t) => t,
            Err(e) => return refused(e),
        };
        let t0 = std::time::Instant::now();
        let until = t0 + timeout;
        let mut enumerate = None;
        let mut last = String::from("not tried");
        loop {
            if self.target.is_none() {
                let spec = OpenSpec {
                    writable: true,
                    queue_depth: qd as usize,
                    expect: Default::default(),
                    allow_overwrite_signature: true,
                    io_threads: 1,
                };
                match open_target(std::path::Path::new(&listed), &spec) {
                    Ok(o) if o.target.identity() == identity => {
                        self.target = Some(o.target);
                        enumerate.get_or_insert(t0.elapsed());
                    }
                    Ok(o) => last = format!("{listed} is now {}, not {identity}", o.target.identity()),
                    Err(e) => last = format!("{listed}: {e}"),
                }
            }
            if let Some(t) = self.target.as_mut() {
                if let Err(e) = checked::offset("at", at, &t.geometry()) {
                    return refused(e);
                }
                let r0 = std::time::Instant::now();
                match crate::runner::dut::probe(&mut Watched::new(t.as_mut(), peer), at, PROBE_TIMEOUT) {
                    Ok(()) => {
                        let ns = |d: Duration| d.as_nanos().min(u64::MAX as u128) as u64;
                        return Answer::Ready { enumerate_ns: enumerate.map(ns), first_read_ns: ns(r0.elapsed()) };
                    }
                    Err(e) => {
                        last = e.to_string();
                        self.target = None;
                    }
                }
            }
            if let Some(why) = peer.gone() {
                return failed(format!("stopped waiting for {listed}: the coordinator is gone ({why:?})"));
            }
            if std::time::Instant::now() >= until {
                return failed(format!("{listed} did not answer a read at byte {at} within {timeout:?}: {last}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn open(
        &mut self,
        o: &ServeOptions,
        target: &str,
        identity: Option<&str>,
        expect: &proto::Expect,
        queue_depth: u32,
        resets: &[proto::LinkReset],
    ) -> Answer {
        if let Err(e) = checked::queue_depth(queue_depth) {
            return refused(e);
        }
        if !o.targets.iter().any(|t| t == target) {
            return failed(format!(
                "{target} is not a target this agent may open: it was started with {}",
                if o.targets.is_empty() { "no --target".to_string() } else { format!("--target {}", o.targets.join(", --target ")) }
            ));
        }
        // Every reset the run will ask of this host is found and checked before anything is
        // written (and found again at each cycle: a rescan may rename the controller).
        for r in resets {
            if let Err(why) = super::reset::Reset::open(target, *r) {
                return failed(format!(
                    "{target}: this host cannot run the run's link reset: {why} (host_link_reset needs the port's path to be an \
                     NVMe namespace on that host; for another target, cut the host's power instead: host_power_cut)"
                ));
            }
        }
        // A run that has begun wrote its own data there: its signature check was done when
        // the run was created, as `faultline write` does.
        let spec = OpenSpec {
            writable: true,
            queue_depth: queue_depth.max(1) as usize,
            expect: expect.into(),
            allow_overwrite_signature: identity.is_some(),
            io_threads: 1,
        };
        self.target = None;
        let opened = match open_target(std::path::Path::new(target), &spec) {
            Ok(o) => o,
            Err(e) => return failed(format!("{target}: {e}")),
        };
        let found = opened.target.identity();
        if let Some(want) = identity.filter(|want| *want != found) {
            return failed(format!("{target} is {found}, not the run's target {want}: refusing to write to it"));
        }
        let g = opened.target.geometry();
        let zeroing = crate::run::ZeroingFacts::of(opened.target.zeroing());
        self.target = Some(opened.target);
        self.opened = Some((target.to_string(), found.clone(), queue_depth));
        Answer::Opened {
            target: TargetInfo {
                identity: found,
                capacity_bytes: g.capacity_bytes,
                logical_block_bytes: g.logical_block_bytes as u64,
                physical_block_bytes: g.physical_block_bytes as u64,
                engine: opened.engine.to_string(),
                zeroing,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_fixtures::{DualConfig, DualModel, DualSim, FaultModel, SimConfig, TruthContract};

    /// A port whose link stays down until the agent's NBD connection has given the export up
    /// (8 EIO replies in a row) is still found once its link comes back: the
    /// failed handle is closed and the export opened again. Before, the agent kept the dead
    /// connection and waited out the whole timeout (found as a `dead_device` for a live drive
    /// in `two_hosts::every_host_cut_at_once_staggered_comes_back_and_verifies_clean`).
    #[test]
    fn a_port_back_after_its_handle_gave_up_is_opened_again_and_found_ready() {
        let cfg = SimConfig {
            capacity_bytes: 4 << 20,
            sector_bytes: 512,
            atomic_bytes: 512,
            queue_depth: 4,
            seed: 7,
            model: FaultModel::HonestPlp,
            contract: TruthContract::Plp,
            dealloc_reads: Default::default(),
        };
        let drive = DualSim::new(cfg, DualConfig { model: DualModel::Honest, ports: 2, port_mbps: None });
        let dir = crate::ledger::tests::tempdir();
        let sock = dir.join("a.sock");
        let export = crate::sim_nbd::Export { name: "A".into(), description: "port A".into(), service_time: Duration::ZERO };
        let served = crate::sim_nbd::serve(drive.port(0), export, crate::sim_nbd::Listen::Unix(&sock), None).unwrap();
        let uri = served.uri();
        let o = ServeOptions { software: "t".into(), host: "h".into(), pid: 1, allow_exec: false, targets: vec![uri.clone()] };
        let mut port = Port::default();
        let opened = port.open(&o, &uri, None, &proto::Expect::default(), 4, &[]);
        assert!(matches!(opened, Answer::Opened { .. }), "{opened:?}");
        let link = drive.link();
        link.pull(0).unwrap();
        // Down until the server has failed 8 reads of the agent's polls (every 50 ms): the
        // NBD client has given the export up by then. Then up again.
        let t0 = std::time::Instant::now();
        let answer = std::thread::scope(|sc| {
            let server = &served.server;
            sc.spawn(move || {
                while server.stats().drive_errors < 8 && t0.elapsed() < Duration::from_secs(8) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                link.plug(0).unwrap();
            });
            port.wait_ready(0, 10_000, &Peer::default())
        });
        assert!(served.server.stats().drive_errors >= 8, "the link came up before the client gave the export up");
        assert!(matches!(answer, Answer::Ready { enumerate_ns: Some(_), .. }), "{answer:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "ready {:?} after the plug, not at once", t0.elapsed());
    }
}
