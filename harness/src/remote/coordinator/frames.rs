//! The coordinator's queue of an agent's frames (docs/PROTOCOL.md, "Limits"): a reader thread
//! reads them into a queue bounded in bytes, so a lying agent costs the coordinator a bounded
//! amount of memory, and an honest one is never stalled behind a few small frames.

use crate::remote::proto::{self, Frame, FrameError};
use std::io::Read;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Duration;

/// The most bytes of an agent's frames the coordinator's side holds unread (16 frames of the
/// largest size; many more of the small ones a cycle streams).
pub const COORDINATOR_QUEUE_BYTES: usize = 16 << 20;

/// The coordinator's side of a session reads an agent's frames into this queue: at most
/// [`COORDINATOR_QUEUE_BYTES`] of frames wait; past that the reader stops reading until the
/// session takes some (the agent's pipe fills and its writes block), so a lying agent costs
/// the coordinator a bounded queue. Counted in bytes, not frames: a cycle streams many small
/// frames, and a bound of a few frames would stall an honest agent's writer behind a
/// coordinator's fsync.
pub struct AgentFrames {
    rx: Receiver<(Result<Frame, FrameError>, usize)>,
    /// Bytes queued, and whether the session let go of the queue (the reader then stops,
    /// rather than wait for room that will never come).
    held: Arc<(std::sync::Mutex<(usize, bool)>, std::sync::Condvar)>,
}

impl Drop for AgentFrames {
    fn drop(&mut self) {
        let (lock, cv) = &*self.held;
        lock.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        cv.notify_all();
    }
}

impl AgentFrames {
    /// Reads `r`'s frames on a thread of its own until the stream ends or a frame is bad.
    pub fn read(r: impl Read + Send + 'static) -> AgentFrames {
        let (tx, rx) = mpsc::channel();
        let held = Arc::new((std::sync::Mutex::new((0usize, false)), std::sync::Condvar::new()));
        let gate = Arc::clone(&held);
        std::thread::spawn(move || {
            let mut r = Counting { inner: r, n: 0 };
            loop {
                r.n = 0;
                let f = proto::read_frame(&mut r);
                let (n, end) = (r.n, f.is_err());
                {
                    let (lock, cv) = &*gate;
                    let mut held = lock.lock().unwrap_or_else(|p| p.into_inner());
                    while held.0 > 0 && held.0 + n > COORDINATOR_QUEUE_BYTES && !held.1 {
                        held = cv.wait(held).unwrap_or_else(|p| p.into_inner());
                    }
                    if held.1 {
                        return;
                    }
                    held.0 += n;
                }
                if tx.send((f, n)).is_err() || end {
                    return;
                }
            }
        });
        AgentFrames { rx, held }
    }

    /// The next frame, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Result<Frame, FrameError>, mpsc::RecvTimeoutError> {
        let (f, n) = self.rx.recv_timeout(timeout)?;
        let (lock, cv) = &*self.held;
        lock.lock().unwrap_or_else(|p| p.into_inner()).0 -= n;
        cv.notify_all();
        Ok(f)
    }
}

/// A reader that counts the bytes read through it.
struct Counting<R> {
    inner: R,
    n: usize,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coordinator_holds_at_most_its_bound_of_an_agents_frames_and_loses_none() {
        // 40 frames of about 1 MiB: more than the bound holds.
        let mut b = Vec::new();
        for seq in 1..=40u64 {
            let part = proto::VerifiedPart::Seen(vec![[seq, 0, 512]; 90_000]);
            proto::write_frame(&mut b, &Frame::Verified { run: proto::Nonce::from_words(1, 1), seq, part }).unwrap();
        }
        assert!(b.len() > 2 * COORDINATOR_QUEUE_BYTES);
        let q = AgentFrames::read(std::io::Cursor::new(b));
        std::thread::sleep(Duration::from_millis(300));
        let held = q.held.0.lock().unwrap().0;
        assert!(held > 0 && held <= COORDINATOR_QUEUE_BYTES, "{held} bytes held");
        for seq in 1..=40u64 {
            match q.recv_timeout(Duration::from_secs(10)).unwrap() {
                Ok(Frame::Verified { seq: s, .. }) => assert_eq!(s, seq),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(q.recv_timeout(Duration::from_secs(10)).unwrap(), Err(FrameError::Closed)));
        // A session that lets go of a full queue lets its reader go too.
        let mut b = Vec::new();
        for seq in 1..=40u64 {
            let part = proto::VerifiedPart::Seen(vec![[seq, 0, 512]; 90_000]);
            proto::write_frame(&mut b, &Frame::Verified { run: proto::Nonce::from_words(1, 1), seq, part }).unwrap();
        }
        let q = AgentFrames::read(std::io::Cursor::new(b));
        std::thread::sleep(Duration::from_millis(300));
        let shared = Arc::clone(&q.held);
        drop(q);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&shared) > 1 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(Arc::strong_count(&shared), 1, "the reader still waits for room");
    }
}
