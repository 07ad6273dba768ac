//! Whether a wait for a completion spins before it sleeps, learned from what spinning found.
//!
//! A completion the kernel makes on another thread (an io-wq worker for a file on tmpfs)
//! comes microseconds after the wait starts, and spinning for it costs less than sleeping and
//! being woken (4 KiB reads at QD1 on tmpfs: 0.8x fio's rate when sleeping, 3.8x when
//! spinning up to [`POLL_WINDOW`]). On a loop device, NBD or a VM's virtual disk the
//! completion comes from a worker that needs the very CPU the spin takes, tens of µs later:
//! there the spin only burns CPU and delays its own completion (issue #45: 1.8x fio's CPU per
//! GB for writes, 3.3x for QD1 reads, on a loop device over ext4).
//!
//! So each kind of wait (a reap of writes, a read) keeps a credit. A spin that finds its
//! completion within [`POLL_PAYS`] earns one; a spin that finds it later, or not at all,
//! costs [`MISS_COST`]. While the credit is positive the wait spins first; otherwise it
//! sleeps at once, and every [`PROBE_EVERY`]th wait spins all the same, to see whether
//! spinning pays again: a probe that pays starts a new run of spins. (A sleeping wait cannot
//! tell by itself: it measures its own wake-up too, which on a VM takes longer than the
//! completion it waited for: 4 KiB reads on tmpfs complete within a few µs, a sleeping
//! reader is woken tens of µs later.)
//!
//! The entry into the kernel that submits and sleeps ([`UringTarget::enter`]) and the spin
//! ([`UringTarget::poll_until`]) that the reap and the reads try before they sleep are here too.

use super::{UringTarget, IORING_ENTER_GETEVENTS};
use crate::block::TargetError;
use io_uring::types;
use std::time::{Duration, Instant};

/// The longest one spin lasts before the wait sleeps.
pub(super) const POLL_WINDOW: Duration = Duration::from_micros(50);
/// A completion found within this long of the wait's start paid for its spin.
pub(super) const POLL_PAYS: Duration = Duration::from_micros(20);
/// What a spin that did not pay costs the credit (a paying one earns 1): spinning goes on
/// only while more than 3 spins in 4 pay.
const MISS_COST: i32 = 3;
/// The credit's bounds: at most this many paying spins are remembered, and at most this many
/// fast sleeps bring spinning back.
const MAX_CREDIT: i32 = 16;
/// While sleeping, one wait in this many spins all the same (a probe): at most a 50 µs spin
/// per 64 waits, under a µs a wait, where spinning does not pay.
const PROBE_EVERY: u32 = 64;
/// The credit a paying probe starts a new run of spins with.
const PROBE_CREDIT: i32 = 2;

/// One kind of wait's learned mode, and what it did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Learned {
    credit: i32,
    /// Waits since the last spin, while sleeping.
    since_spin: u32,
    spins: u64,
    paid: u64,
    sleeps: u64,
}

impl Default for Learned {
    /// A new target is spun for until spinning shows it does not pay.
    fn default() -> Self {
        Learned { credit: MAX_CREDIT / 2, since_spin: 0, spins: 0, paid: 0, sleeps: 0 }
    }
}

impl Learned {
    /// Whether the kind's mode is to spin.
    pub(super) fn spinning(&self) -> bool {
        self.credit > 0
    }

    /// Whether this wait spins first: while spinning pays, and as a probe every
    /// [`PROBE_EVERY`]th wait while it does not.
    pub(super) fn spins(&mut self) -> bool {
        if self.spinning() {
            return true;
        }
        self.since_spin += 1;
        if self.since_spin >= PROBE_EVERY {
            self.since_spin = 0;
            return true;
        }
        false
    }

    /// A spin ended: its completion came after `found` (`None`: not within the window).
    pub(super) fn spun(&mut self, found: Option<Duration>) {
        self.spins += 1;
        if found.is_some_and(|d| d <= POLL_PAYS) {
            self.paid += 1;
            self.credit = if self.credit <= 0 { PROBE_CREDIT } else { (self.credit + 1).min(MAX_CREDIT) };
        } else {
            self.credit = (self.credit - MISS_COST).max(-MAX_CREDIT);
        }
    }

    /// A wait slept without spinning and its completion came after `woke`.
    pub(super) fn slept(&mut self, woke: Duration) {
        self.sleeps += 1;
        if woke <= POLL_PAYS {
            self.credit = (self.credit + 1).min(MAX_CREDIT);
        }
    }

    /// What the waits did, in a phrase: `spin (97% of 5120 spins paid)`, `sleep (...)`.
    pub(super) fn describe(&self) -> String {
        let waits = self.spins + self.sleeps;
        if waits == 0 {
            return "no waits".into();
        }
        let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
        format!(
            "{} now; {:.0}% of {waits} waits spun, {:.0}% of those paid",
            if self.spinning() { "spins" } else { "sleeps" },
            pct(self.spins, waits),
            pct(self.paid, self.spins)
        )
    }
}

/// Which kind of wait, for its learned mode.
#[derive(Clone, Copy)]
pub(super) enum WaitKind {
    Reap = 0,
    Read = 1,
}

/// What a wait's spin came to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Spin {
    /// The completion came while it spun.
    Found,
    /// It spun its window and the completion did not come.
    Missed,
    /// It did not spin (the kind's learned mode is to sleep).
    Skipped,
}

impl UringTarget {
    /// Submits queued entries and waits for `want` completions (or `timeout`).
    /// Returns false when the wait timed out.
    pub(super) fn enter(&mut self, want: usize, timeout: Option<Duration>) -> Result<bool, TargetError> {
        if !self.unstamped.is_empty() {
            // The queued entries reach the kernel now: their latency counts from here.
            let now = Instant::now();
            for i in self.unstamped.drain(..) {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    s.at = now;
                }
            }
        }
        let r = match timeout {
            Some(t) if want > 0 => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
            _ if want > 0 => self.ring.submitter().submit_and_wait(want),
            // Submitting without waiting still asks for events: with deferred task work the
            // completions the kernel has made since the last entry reach the queue only when
            // this task enters with GETEVENTS, so submitting and collecting take one system
            // call instead of two (4 KiB random writes on tmpfs: 1.2 entries per write instead
            // of 1.9, counted with `perf stat`; the rate did not change measurably).
            _ => {
                let len = self.ring.submission().len() as u32;
                // SAFETY: the entries handed over are the ones `push` queued (see its SAFETY
                // comment); no argument is passed, so the kernel is given no memory of ours.
                unsafe { self.ring.submitter().enter::<libc::sigset_t>(len, 0, IORING_ENTER_GETEVENTS, None) }
            }
        };
        match r {
            Ok(_) => {
                self.queued = self.ring.submission().len();
                if self.queued == 0 {
                    self.queued_bytes = 0;
                }
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                self.queued = self.ring.submission().len();
                Ok(false)
            }
            // Interrupted, or the completion queue is backed up: harvest and come back.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN)) => Ok(true),
            Err(e) => Err(TargetError::Io { path: self.path(), what: "io_uring_enter".into(), source: e }),
        }
    }

    /// Spins on the ring until `done`, for up to [`POLL_WINDOW`] and at most `left`,
    /// when the wait's learned mode is to spin (above: only where spinning has paid). With
    /// deferred task work a completion reaches the queue only when this task enters the kernel
    /// to get events, so each spin is an `io_uring_enter` that waits for none.
    ///
    /// A spin submits nothing, so what is still queued goes to the kernel first, spinning or
    /// not: a read left queued by `read_submit` would otherwise wait out the whole spin before
    /// it even started (`read_at` of 4 KiB ran at about 8,000 reads/s on tmpfs and on a loop
    /// device alike, and at 37,000 to 60,000 once submitted first).
    pub(super) fn poll_until(&mut self, kind: WaitKind, left: Duration, done: impl Fn(&Self) -> bool) -> Spin {
        // Should entering fail, the entries stay queued and the sleeping entry after the poll
        // submits them and reports what the kernel answers.
        if self.queued > 0 && self.enter(0, None).is_err() {
            return Spin::Skipped;
        }
        if !self.learned[kind as usize].spins() {
            return Spin::Skipped;
        }
        let (t, limit) = (Instant::now(), left.min(POLL_WINDOW));
        while t.elapsed() < limit {
            // SAFETY: entering with nothing to submit and no argument hands the kernel no
            // memory of ours; it only runs completions into the rings it already maps.
            let r = unsafe { self.ring.submitter().enter::<libc::sigset_t>(0, 0, IORING_ENTER_GETEVENTS, None) };
            if r.is_err() {
                return Spin::Skipped;
            }
            self.harvest();
            if done(self) {
                self.learned[kind as usize].spun(Some(t.elapsed()));
                return Spin::Found;
            }
            std::hint::spin_loop();
        }
        self.learned[kind as usize].spun(None);
        Spin::Missed
    }

    /// What each kind of wait settled on, for a bench's report.
    pub fn wait_modes(&self) -> String {
        format!("reaps {}; reads {}", self.learned[0].describe(), self.learned[1].describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Option<Duration> = Some(Duration::from_micros(3));
    const LATE: Option<Duration> = Some(Duration::from_micros(40));

    #[test]
    fn fast_completions_keep_it_spinning_and_slow_ones_put_it_to_sleep() {
        let mut l = Learned::default();
        for _ in 0..1000 {
            assert!(l.spins());
            l.spun(FAST);
        }
        // Late hits and misses cost it the credit within a few waits.
        let mut waits = 0;
        while l.spinning() {
            assert!(l.spins());
            l.spun(if waits % 2 == 0 { LATE } else { None });
            waits += 1;
        }
        assert!(waits <= 6, "{waits} waits");
        // Asleep, it spins only to probe, one wait in PROBE_EVERY, while probes miss.
        let mut spun = 0;
        for _ in 0..PROBE_EVERY * 10 {
            if l.spins() {
                spun += 1;
                l.spun(None);
            } else {
                l.slept(Duration::from_micros(80));
            }
        }
        assert_eq!(spun, 10);
        assert!(!l.spinning());
        // A probe that pays starts a run of spins, which goes on while they pay.
        while !l.spins() {
            l.slept(Duration::from_micros(80));
        }
        l.spun(FAST);
        assert!(l.spinning());
        for _ in 0..100 {
            assert!(l.spins());
            l.spun(FAST);
        }
        assert!(l.describe().starts_with("spins now"), "{}", l.describe());
    }

    #[test]
    fn a_sleep_woken_fast_earns_spinning_back() {
        let mut l = Learned::default();
        while l.spinning() {
            l.spun(None);
        }
        let mut fast = 0;
        while !l.spinning() {
            l.slept(Duration::from_micros(5));
            fast += 1;
        }
        assert!(fast <= MAX_CREDIT as usize + 1, "{fast}");
    }

    #[test]
    fn spinning_goes_on_only_while_most_spins_pay() {
        // One spin in four late: the credit holds (3 paid earn 3, 1 late costs 3).
        let mut l = Learned::default();
        for i in 0..400 {
            l.spun(if i % 4 == 3 { LATE } else { FAST });
        }
        assert!(l.spinning());
        // One in three: it goes to sleep.
        let mut l = Learned::default();
        for i in 0..400 {
            if !l.spinning() {
                break;
            }
            l.spun(if i % 3 == 2 { LATE } else { FAST });
        }
        assert!(!l.spinning());
    }
}
