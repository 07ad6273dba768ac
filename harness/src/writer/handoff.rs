//! The hand-over of filled writes from the buffer-making thread to the I/O loop: a bounded
//! queue of batches that wakes the maker only once the loop has drained it to half, not on
//! every batch taken.
//!
//! With a channel that wakes a blocked sender on every receive, the maker (faster than the
//! device) sleeps on a full queue and is woken once per batch: a futex call and a
//! cross-core wake-up for every eight writes on the I/O thread, measured by strace as
//! one futex call per batch next to the ring's own calls. Here it is woken when half the
//! queue is free, and then refills all of it.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

struct State<T> {
    queue: VecDeque<T>,
    /// The maker sleeps on a full queue.
    maker_waiting: bool,
    /// The taker sleeps on an empty queue.
    taker_waiting: bool,
    /// The taker is gone: the maker stops.
    closed: bool,
    /// The maker is gone: the taker takes what is left, then hears so.
    maker_gone: bool,
}

/// A bounded queue between one maker and one taker thread.
pub(super) struct Handoff<T> {
    cap: usize,
    state: Mutex<State<T>>,
    /// The maker waits here for room.
    room: Condvar,
    /// The taker waits here for an item.
    ready: Condvar,
}

impl<T> Handoff<T> {
    /// A queue of at most `cap` (at least 2) items.
    pub(super) fn new(cap: usize) -> Self {
        Handoff {
            cap: cap.max(2),
            state: Mutex::new(State {
                queue: VecDeque::with_capacity(cap.max(2)),
                maker_waiting: false,
                taker_waiting: false,
                closed: false,
                maker_gone: false,
            }),
            room: Condvar::new(),
            ready: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item`, waiting while the queue is full. `Err(item)`: the taker is gone.
    pub(super) fn put(&self, item: T) -> Result<(), T> {
        let mut s = self.lock();
        while s.queue.len() >= self.cap && !s.closed {
            s.maker_waiting = true;
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.maker_waiting = false;
        if s.closed {
            return Err(item);
        }
        s.queue.push_back(item);
        if s.taker_waiting {
            self.ready.notify_one();
        }
        Ok(())
    }

    /// The next item and whether the call had to wait for it; `None` once the maker is gone
    /// and the queue empty.
    pub(super) fn take(&self) -> Option<(T, bool)> {
        let mut s = self.lock();
        let mut waited = false;
        loop {
            if let Some(item) = s.queue.pop_front() {
                s.taker_waiting = false;
                // Wake the maker once half the queue is free (or the queue ran dry).
                if s.maker_waiting && s.queue.len() <= self.cap / 2 {
                    s.maker_waiting = false;
                    self.room.notify_one();
                }
                return Some((item, waited));
            }
            if s.maker_gone {
                return None;
            }
            if s.maker_waiting {
                s.maker_waiting = false;
                self.room.notify_one();
            }
            waited = true;
            s.taker_waiting = true;
            s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The taker is done: a waiting maker wakes and stops.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_all();
    }

    /// The maker is done (or died): a waiting taker wakes.
    pub(super) fn maker_done(&self) {
        self.lock().maker_gone = true;
        self.ready.notify_all();
    }
}

/// Marks the maker gone when dropped, so a maker that panics does not leave the taker waiting.
pub(super) struct MakerGuard<'a, T>(pub(super) &'a Handoff<T>);

impl<T> Drop for MakerGuard<'_, T> {
    fn drop(&mut self) {
        self.0.maker_done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item arrives once, in order, whatever the two threads' speeds; the maker stops
    /// when the taker closes, and the taker hears when the maker is gone.
    #[test]
    fn items_arrive_in_order_and_either_side_can_end_it() {
        const SEED: u64 = 0x04a4_d0ff;
        for cap in [2, 3, 8] {
            let h = Handoff::new(cap);
            let mut rng = crate::rng::WyRand::new(SEED ^ cap as u64);
            let delays: Vec<u64> = (0..2000).map(|_| rng.below(4)).collect();
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    let _g = MakerGuard(&h);
                    for i in 0..2000u64 {
                        if delays[i as usize] == 0 {
                            std::thread::yield_now();
                        }
                        h.put(i).expect("the taker is there");
                    }
                });
                for want in 0..2000u64 {
                    if delays[(want as usize * 7) % 2000] == 1 {
                        std::thread::yield_now();
                    }
                    let (got, _) = h.take().expect("the maker made it");
                    assert_eq!(got, want, "seed {SEED:#x}, cap {cap}");
                }
                assert!(h.take().is_none(), "seed {SEED:#x}: the maker is gone and the queue empty");
            });
        }
        // The taker closes: a maker blocked on a full queue gets its item back.
        let h = Handoff::new(2);
        std::thread::scope(|sc| {
            let maker = sc.spawn(|| {
                let mut n = 0u64;
                while h.put(n).is_ok() {
                    n += 1;
                }
                n
            });
            // Let the maker fill the queue and block on it, then close.
            while h.lock().queue.len() < 2 {
                std::thread::yield_now();
            }
            h.close();
            let made = maker.join().unwrap();
            assert_eq!(made, 2, "seed {SEED:#x}: the maker queued two and was refused the third");
        });
    }
}
