//! Several io_uring workers, each a thread with its own ring, behind one `BlockTarget`.
//!
//! A fast drive needs more submission and completion work than one core does: each worker
//! owns a [`UringTarget`] (created on its own thread, as the single-issuer ring requires) on a
//! duplicate of the target's descriptor. `submit` hands an operation to a worker (round
//! robin); workers pass completions back on one channel, which `reap` drains. Verification
//! reads use a separate ring on the caller's thread, so they never queue behind writes.
//!
//! Ownership is the workers' engines' rule: a buffer stays with the worker's engine until
//! its completion has been seen, and a worker that is shut down with operations still in
//! the kernel leaks their buffers (see `uring/`). A flush may travel on any ring:
//! fdatasync acts on the file (or the device's cache), whichever ring carries it. A
//! deallocate or write zeroes goes to a worker as a write does; every ring is on the same
//! target, so each carries what the read ring says it carries ([`BlockTarget::zeroing`]).

use crate::block::{AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, Op, ReadTicket, TargetError, ZeroingSupport};
use crate::blockdev::Discovered;
use crate::latency::LatencyHistogram;
use crate::uring::UringTarget;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle-but-busy worker waits for completions before looking for new work.
const WORKER_POLL: Duration = Duration::from_micros(200);

enum ToWorker {
    Op(Op),
    /// Send back the latency histograms.
    Latencies(Sender<Vec<(&'static str, LatencyHistogram)>>),
}

struct Worker {
    tx: Sender<ToWorker>,
    thread: Option<JoinHandle<()>>,
}

pub struct ShardedTarget {
    workers: Vec<Worker>,
    done: Receiver<Completion>,
    /// Ring for verification reads, on the caller's thread.
    reader: UringTarget,
    depth: usize,
    in_flight: usize,
    next: usize,
    geometry: Geometry,
    identity: String,
    path: String,
}

impl ShardedTarget {
    /// Starts `workers` workers (at least 2) sharing a queue depth of `depth`.
    pub fn new(d: Discovered, depth: usize, workers: usize) -> Result<Self, TargetError> {
        let path = d.path.display().to_string();
        let io = |what: &str, source: std::io::Error| TargetError::Io { path: path.clone(), what: what.into(), source };
        // Each worker's ring takes the full depth: round robin does not keep the workers'
        // shares equal (completions return unevenly), and the front end bounds the total.
        let per_worker = depth.max(1);
        let (done_tx, done) = channel();
        let mut ws = Vec::new();
        for k in 0..workers {
            let dk = d.try_clone().map_err(|e| io("duplicating the descriptor for a worker", e))?;
            let (tx, rx) = channel::<ToWorker>();
            let (ready_tx, ready_rx) = channel();
            let done_tx = done_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("io-worker-{k}"))
                .spawn(move || match UringTarget::new(dk, per_worker) {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        worker_loop(t, rx, done_tx);
                    }
                    Err(failed) => {
                        let _ = ready_tx.send(Err(failed.1));
                    }
                })
                .map_err(|e| io("starting an io worker thread", e))?;
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(io("setting up a worker's io_uring", e)),
                Err(_) => return Err(io("starting an io worker", std::io::Error::other("the worker thread died"))),
            }
            ws.push(Worker { tx, thread: Some(thread) });
        }
        let geometry = d.geometry;
        let identity = d.identity();
        let reader = UringTarget::new(d, 4).map_err(|failed| io("setting up the read ring", failed.1))?;
        Ok(ShardedTarget { workers: ws, done, reader, depth, in_flight: 0, next: 0, geometry, identity, path })
    }

    /// Number of worker rings.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

fn worker_loop(mut t: UringTarget, rx: Receiver<ToWorker>, done: Sender<Completion>) {
    let mut out = Vec::new();
    let mut open = true;
    loop {
        // Take every queued operation; block for one only when nothing is in flight.
        let take = |m: ToWorker, t: &mut UringTarget| match m {
            ToWorker::Op(op) => {
                let token = op.token();
                if let Err(e) = t.submit(op) {
                    // The engine refused it outright (queue full cannot happen: each ring
                    // takes the whole depth, which bounds the total): report it as failed.
                    let _ = done.send(Completion::new(token, Err(IoFailure::new(libc::EIO, e.to_string())), None));
                }
            }
            ToWorker::Latencies(reply) => {
                let _ = reply.send(t.latencies());
            }
        };
        if t.in_flight() == 0 {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(m) => take(m, &mut t),
                Err(_) => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(m) => take(m, &mut t),
                Err(std::sync::mpsc::TryRecvError::Empty) => break,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        out.clear();
        match t.reap(&mut out, 1, WORKER_POLL) {
            Ok(_) => {
                for c in out.drain(..) {
                    if done.send(c).is_err() {
                        return; // the front end is gone; the engine's drop keeps hung buffers safe
                    }
                }
            }
            Err(e) => {
                // The ring itself failed: nothing more will complete through it.
                eprintln!("faultline: io worker: {e}");
                return;
            }
        }
    }
}

impl BlockTarget for ShardedTarget {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn queue_depth(&self) -> usize {
        self.depth
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if self.in_flight >= self.depth {
            return Err(TargetError::QueueFull { path: self.path.clone(), depth: self.depth });
        }
        let k = self.next % self.workers.len();
        self.next = self.next.wrapping_add(1);
        self.workers[k].tx.send(ToWorker::Op(op)).map_err(|_| TargetError::Io {
            path: self.path.clone(),
            what: format!("io worker {k}"),
            source: std::io::Error::other("the worker thread stopped"),
        })?;
        self.in_flight += 1;
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        let start = Instant::now();
        let mut got = 0;
        while self.in_flight > 0 {
            let c = if got >= min {
                match self.done.try_recv() {
                    Ok(c) => c,
                    Err(_) => break,
                }
            } else {
                match self.done.recv_timeout(timeout.saturating_sub(start.elapsed())) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            out.push(c);
            got += 1;
            self.in_flight -= 1;
        }
        Ok(got)
    }

    fn in_flight(&self) -> usize {
        self.in_flight
    }

    fn zeroing(&self) -> ZeroingSupport {
        self.reader.zeroing()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        self.reader.read_at(offset, buf)
    }

    fn read_owned(&mut self, offset: u64, buf: AlignedBuf) -> (AlignedBuf, Result<(), IoFailure>) {
        self.reader.read_owned(offset, buf)
    }

    fn read_start(&mut self, offset: u64, buf: AlignedBuf) -> ReadTicket {
        self.reader.read_start(offset, buf)
    }

    fn read_finish(&mut self, ticket: ReadTicket) -> (AlignedBuf, Result<(), IoFailure>) {
        self.reader.read_finish(ticket)
    }

    fn set_read_timeout(&mut self, timeout: Duration) {
        self.reader.set_read_timeout(timeout);
    }

    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        let mut merged: Vec<(&'static str, LatencyHistogram)> = Vec::new();
        for w in &self.workers {
            let (tx, rx) = channel();
            if w.tx.send(ToWorker::Latencies(tx)).is_err() {
                continue;
            }
            // A worker answers between two polls; one blocked on a hung device may not.
            if let Ok(ls) = rx.recv_timeout(Duration::from_secs(1)) {
                for (name, h) in ls {
                    match merged.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, m)) => m.add(&h),
                        None => merged.push((name, h)),
                    }
                }
            }
        }
        for (name, h) in self.reader.latencies() {
            match merged.iter_mut().find(|(n, _)| *n == name) {
                Some((_, m)) => m.add(&h),
                None => merged.push((name, h)),
            }
        }
        merged
    }
}

impl Drop for ShardedTarget {
    fn drop(&mut self) {
        // Closing the channels lets each worker finish what is in flight (its engine's drop
        // then waits, or leaks buffers of operations that never complete) and exit.
        let threads: Vec<JoinHandle<()>> = self.workers.iter_mut().filter_map(|w| w.thread.take()).collect();
        self.workers.clear();
        for t in threads {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zero_check::{bad_zero_ranges_are_refused, three_blocks_zeroed};

    /// A deallocate and a write zeroes go to the workers as writes do, and the target says
    /// what its rings carry.
    #[test]
    fn zeroing_goes_to_the_workers_and_what_they_carry_is_the_targets() {
        let path = std::env::temp_dir().join(format!("faultline-sharded-zero-{}", std::process::id()));
        std::fs::File::create(&path).and_then(|f| f.set_len(1 << 20)).unwrap();
        let d = crate::blockdev::discover(&path, true).unwrap();
        let carried = d.zeroing;
        let mut t = ShardedTarget::new(d, 8, 2).unwrap();
        assert_eq!((t.workers(), t.zeroing()), (2, carried));
        three_blocks_zeroed(&mut t, 16 * 4096, 4096, 0x5eed_54a2);
        bad_zero_ranges_are_refused(&mut t, 512);
        drop(t);
        let _ = std::fs::remove_file(path);
    }
}
