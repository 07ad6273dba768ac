//! Watching the peer (docs/PROTOCOL.md, "Limits"): the frames a peer sends wait in a bounded
//! queue, and whether the peer is still there is known at once, whatever the operation in
//! hand is doing.
//!
//! A reader thread reads the peer's frames into a queue of at most [`INBOX_FRAMES`] frames.
//! When the queue is full the peer has sent more than any operation of the protocol lets it
//! send ahead of the answers (a well-behaved coordinator waits for each reply, and during a
//! cycle sends one `durable` per `sync`, one `cut_done` and one `stop`): the reader marks the
//! peer [`Gone::Flooded`] and stops reading. When the stream ends or a frame is bad, the peer
//! is [`Gone::Closed`] or [`Gone::Bad`]. Either way [`Peer::gone`] says so from that instant,
//! and a long operation's target, wrapped in [`Watched`], refuses every new I/O from then on,
//! so nothing is written for a coordinator that is not there to record it.

use crate::remote::proto::{self, Frame, FrameError};
use faultline_drivers::{
    AlignedBuf, BlockTarget, Completion, Geometry, IoFailure, LatencyHistogram, Op, ReadTicket, TargetError, ZeroingSupport,
};
use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// The most frames a peer's side holds unread. With [`proto::MAX_FRAME`] that bounds the
/// inbound queue at 8 MiB of frames (plus the one the reader is reading).
pub const INBOX_FRAMES: usize = 8;

/// Why the peer is no longer served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// Its side of the stream ended (it died, or the transport did).
    Closed,
    /// It sent a frame that could not be read.
    Bad,
    /// It sent more than [`INBOX_FRAMES`] frames ahead of the answers.
    Flooded,
}

/// Whether the peer is still there, shared by the reader thread and the operations.
#[derive(Clone, Default)]
pub struct Peer(Arc<PeerState>);

#[derive(Default)]
struct PeerState {
    /// 0 while the peer is there, else `Gone` as 1 + its index.
    gone: AtomicU8,
    /// When it went, on the monotonic clock (ns).
    at_ns: AtomicU64,
}

impl Peer {
    /// Why the peer is gone, if it is.
    pub fn gone(&self) -> Option<Gone> {
        match self.0.gone.load(Ordering::Acquire) {
            0 => None,
            1 => Some(Gone::Closed),
            2 => Some(Gone::Bad),
            _ => Some(Gone::Flooded),
        }
    }

    /// When it went (monotonic ns), if it did.
    pub fn gone_at_ns(&self) -> Option<u64> {
        self.gone().map(|_| self.0.at_ns.load(Ordering::Acquire))
    }

    /// Marks the peer gone (the first reason stays).
    pub fn mark(&self, why: Gone) {
        let code = match why {
            Gone::Closed => 1,
            Gone::Bad => 2,
            Gone::Flooded => 3,
        };
        self.0.at_ns.store(faultline_drivers::monotonic_ns(), Ordering::Release);
        let _ = self.0.gone.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The queue of a peer's frames.
pub type Frames = Receiver<Result<Frame, FrameError>>;

/// Frames as the reader thread hands them over, and the peer they came from.
pub struct Inbox {
    pub frames: Frames,
    pub peer: Peer,
}

/// Reads frames from `r` on a thread of its own into a queue of at most [`INBOX_FRAMES`],
/// until the stream ends, a frame is bad (the last item is that error) or the queue overflows
/// (the peer is marked [`Gone::Flooded`], and nothing more is read).
pub fn inbox(mut r: impl Read + Send + 'static) -> Inbox {
    let (tx, frames) = mpsc::sync_channel(INBOX_FRAMES);
    let peer = Peer::default();
    let mark = peer.clone();
    std::thread::spawn(move || loop {
        let f = proto::read_frame(&mut r);
        let end = match &f {
            // A request whose operation does not read is answered `failed`; reading goes on.
            Ok(_) | Err(FrameError::BadOp { .. }) => None,
            Err(FrameError::Closed) => Some(Gone::Closed),
            Err(_) => Some(Gone::Bad),
        };
        if let Some(why) = end {
            mark.mark(why);
        }
        match tx.try_send(f) {
            Ok(()) if end.is_none() => {}
            Ok(()) => return,
            Err(TrySendError::Full(_)) => return mark.mark(Gone::Flooded),
            Err(TrySendError::Disconnected(_)) => return,
        }
    });
    Inbox { frames, peer }
}

/// A target that refuses new I/O once its peer is gone: a long operation's (the prefill, a
/// verify, sector hashes, a probe) stops at its next submit (a write, flush, deallocate or
/// write zeroes) or read, with `ESHUTDOWN` (which
/// the writer and the verifier take as the device gone: they stop, they do not go on to the
/// next block). What was in flight before is reaped and finished as usual.
pub struct Watched<'a> {
    inner: &'a mut dyn BlockTarget,
    peer: &'a Peer,
    /// When the last write, flush or zeroing was handed on (monotonic ns; 0: none was).
    last_submit_ns: u64,
}

impl<'a> Watched<'a> {
    pub fn new(inner: &'a mut dyn BlockTarget, peer: &'a Peer) -> Self {
        Watched { inner, peer, last_submit_ns: 0 }
    }

    /// How long after its peer went this target still handed an operation on (`None`: the
    /// peer is there, or nothing was handed on after it went). At most one submit's race:
    /// the peer can go between the check and the submit.
    pub fn submitted_after_gone(&self) -> Option<Duration> {
        let gone = self.peer.gone_at_ns()?;
        (self.last_submit_ns >= gone).then(|| Duration::from_nanos(self.last_submit_ns - gone))
    }

    fn refusal(&self) -> Option<IoFailure> {
        self.peer.gone().map(|why| IoFailure::stopped(format!("the coordinator is gone ({why:?}): no more I/O for it")))
    }
}

impl BlockTarget for Watched<'_> {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn identity(&self) -> String {
        self.inner.identity()
    }

    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    fn submit(&mut self, op: Op) -> Result<(), TargetError> {
        if let Some(e) = self.refusal() {
            let source = std::io::Error::from_raw_os_error(e.errno);
            return Err(TargetError::Io { path: self.inner.identity(), what: e.detail, source });
        }
        self.inner.submit(op)?;
        self.last_submit_ns = faultline_drivers::monotonic_ns();
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, min: usize, timeout: Duration) -> Result<usize, TargetError> {
        self.inner.reap(out, min, timeout)
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    fn zeroing(&self) -> ZeroingSupport {
        self.inner.zeroing()
    }

    fn submit_queued(&mut self) -> Result<(), TargetError> {
        self.inner.submit_queued()
    }

    fn buffers(&mut self, count: usize, len: usize) -> Vec<AlignedBuf> {
        self.inner.buffers(count, len)
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        match self.refusal() {
            Some(e) => Err(e),
            None => self.inner.read_at(offset, buf),
        }
    }

    fn read_owned(&mut self, offset: u64, buf: AlignedBuf) -> (AlignedBuf, Result<(), IoFailure>) {
        match self.refusal() {
            Some(e) => (buf, Err(e)),
            None => self.inner.read_owned(offset, buf),
        }
    }

    fn read_start(&mut self, offset: u64, buf: AlignedBuf) -> ReadTicket {
        match self.refusal() {
            Some(e) => ReadTicket::done(buf, Err(e)),
            None => self.inner.read_start(offset, buf),
        }
    }

    fn read_finish(&mut self, ticket: ReadTicket) -> (AlignedBuf, Result<(), IoFailure>) {
        self.inner.read_finish(ticket)
    }

    fn set_read_timeout(&mut self, timeout: Duration) {
        self.inner.set_read_timeout(timeout)
    }

    fn wait_mode(&self) -> Option<String> {
        self.inner.wait_mode()
    }

    fn latencies(&self) -> Vec<(&'static str, LatencyHistogram)> {
        self.inner.latencies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_bytes(n: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for seq in 1..=n as u64 {
            let f = Frame::Request { run: proto::Nonce::from_words(1, 1), seq, op: proto::Op::Clock {} };
            proto::write_frame(&mut b, &f).unwrap();
        }
        b
    }

    #[test]
    fn a_peer_that_sends_more_than_the_queue_holds_is_flooded_and_no_more_is_read() {
        let ib = inbox(std::io::Cursor::new(frame_bytes(INBOX_FRAMES + 5)));
        // The reader fills the queue, then finds it full.
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while ib.peer.gone().is_none() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ib.peer.gone(), Some(Gone::Flooded));
        let held: Vec<_> = ib.frames.iter().collect();
        assert_eq!(held.len(), INBOX_FRAMES, "the queue held what it could and no more");
    }

    #[test]
    fn a_peer_that_closes_is_gone_at_once() {
        let ib = inbox(std::io::Cursor::new(frame_bytes(2)));
        let all: Vec<_> = ib.frames.iter().collect();
        assert_eq!(all.len(), 3);
        assert!(matches!(all[2], Err(FrameError::Closed)));
        assert_eq!(ib.peer.gone(), Some(Gone::Closed));
        assert!(ib.peer.gone_at_ns().is_some());
    }

    #[test]
    fn a_watched_target_refuses_io_once_its_peer_is_gone() {
        let d = crate::ledger::tests::tempdir();
        let p = d.join("t.img");
        std::fs::write(&p, vec![0u8; 1 << 16]).unwrap();
        let spec = faultline_drivers::OpenSpec {
            writable: true,
            queue_depth: 4,
            expect: Default::default(),
            allow_overwrite_signature: true,
            io_threads: 1,
        };
        let mut t = faultline_drivers::open_target(&p, &spec).unwrap().target;
        let peer = Peer::default();
        let mut w = Watched::new(t.as_mut(), &peer);
        let mut buf = vec![0u8; 4096];
        w.read_at(0, &mut buf).unwrap();
        // While the peer is there a zeroing goes through, as a write does.
        assert!(w.zeroing().deallocate, "forwarded: a file's filesystem punches holes");
        let zero = Op::Zero { token: 0, offset: 0, len: 4096, kind: faultline_drivers::Zeroing::Deallocate, write_id: 0 };
        w.submit(zero).unwrap();
        let mut done = Vec::new();
        w.reap(&mut done, 1, Duration::from_secs(5)).unwrap();
        assert!(done[0].result.is_ok(), "{:?}", done[0].result);
        peer.mark(Gone::Closed);
        let e = w.read_at(0, &mut buf).unwrap_err();
        assert!(e.device_gone() && e.detail.contains("coordinator is gone"), "{e}");
        let write = Op::Write { token: 1, offset: 0, buf: AlignedBuf::zeroed(4096), fua: false, write_id: 1 };
        assert!(w.submit(write).is_err());
        let zero = Op::Zero { token: 2, offset: 0, len: 4096, kind: faultline_drivers::Zeroing::WriteZeroes, write_id: 2 };
        let e = w.submit(zero).unwrap_err().to_string();
        assert!(e.contains("coordinator is gone"), "{e}");
        assert_eq!(w.in_flight(), 0);
    }
}
