//! The fault's own thread, for one cycle: the writers fire it at the placement, the
//! controller's commands run on it, and every writer learns when the one cut landed.

use super::fault::{ControllerError, Cutter};
use std::time::Duration;

/// The fault's own thread, for one cycle: a writer asks it to cut ([`FaultThread::fire`])
/// when the placement is reached and waits until the cut has landed; the controller's
/// commands (and a link reset's whole hold) run here, never on a writer's thread, so a writer
/// of another port is never held up by them.
///
/// A fault that hits every port (a power cut of a dual-port drive) is fired by every writer
/// it hits: the first caller cuts, and every caller (the first included) learns the one
/// result when the cut has landed. One cut per cycle: a caller after the landing gets the
/// same result again, without a second command. A cut that must find every writer drained (a
/// clean shutdown of every host) waits for all of them ([`FaultThread::gather`]).
pub struct FaultThread {
    go: std::sync::mpsc::SyncSender<()>,
    landed: std::sync::Mutex<std::sync::mpsc::Receiver<Result<Duration, ControllerError>>>,
    state: std::sync::Mutex<Gate>,
    done: std::sync::Condvar,
}

/// The cut, and the writers it waits for.
struct Gate {
    fired: Fired,
    /// Writers that called [`FaultThread::fire`].
    arrived: usize,
    /// Writers the cut waits for (1: the first caller cuts).
    wanted: usize,
}

/// Where the cycle's one cut is.
enum Fired {
    No,
    InFlight,
    Landed(Result<Duration, ControllerError>),
}

impl FaultThread {
    /// Starts the thread in `scope`; it cuts with `cutter` (holding a link reset for `hold`)
    /// once, when fired, and ends with the scope.
    pub fn spawn<'s, 'e>(scope: &'s std::thread::Scope<'s, 'e>, cutter: &'e mut Cutter, hold: Duration) -> FaultThread {
        let (go, go_rx) = std::sync::mpsc::sync_channel::<()>(1);
        let (landed_tx, landed) = std::sync::mpsc::sync_channel(1);
        scope.spawn(move || {
            if go_rx.recv().is_ok() {
                let t = std::time::Instant::now();
                let _ = landed_tx.send(cutter.cut(hold).map(|()| t.elapsed()));
            }
        });
        let gate = Gate { fired: Fired::No, arrived: 0, wanted: 1 };
        FaultThread { go, landed: std::sync::Mutex::new(landed), state: std::sync::Mutex::new(gate), done: std::sync::Condvar::new() }
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cut waits until `writers` writers fired it (each drained: a clean shutdown of every
    /// host must find every host's writes complete), or ended without ([`FaultThread::leave`]).
    pub fn gather(&self, writers: usize) {
        self.gate().wanted = writers.max(1);
    }

    /// A writer ended its cycle without firing the cut (it failed first): the cut no longer
    /// waits for it.
    pub fn leave(&self) {
        let mut g = self.gate();
        g.wanted = g.wanted.saturating_sub(1).max(1);
        drop(g);
        self.done.notify_all();
    }

    /// Cuts now (or, when another writer already did, waits for that cut); returns once the
    /// cut command has landed, with how long it took.
    pub fn fire(&self) -> Result<Duration, ControllerError> {
        let mut st = self.gate();
        st.arrived += 1;
        loop {
            match &st.fired {
                Fired::Landed(r) => return r.clone(),
                Fired::No if st.arrived >= st.wanted => break,
                Fired::InFlight | Fired::No => st = self.done.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
        st.fired = Fired::InFlight;
        drop(st);
        let gone = || ControllerError::ThreadGone;
        let r = match self.go.send(()) {
            Ok(()) => self.landed.lock().unwrap_or_else(|e| e.into_inner()).recv().unwrap_or_else(|_| Err(gone())),
            Err(_) => Err(gone()),
        };
        self.gate().fired = Fired::Landed(r.clone());
        self.done.notify_all();
        r
    }

    /// Whether a writer fired the cut (it may still be landing).
    pub fn fired(&self) -> bool {
        !matches!(self.gate().fired, Fired::No)
    }

    /// Waits while a cut another writer fired is still landing (a host cut's whole sequence:
    /// off, held off, on again); returns at once when none was fired. A port whose host the
    /// cut took must not be dialled again before its power is back: an agent started while
    /// its host is "off" would find its port's link down and give up on it.
    pub fn settled(&self) {
        let mut st = self.gate();
        while matches!(st.fired, Fired::InFlight) {
            st = self.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_drivers::{PowerState, PowerSwitch};

    /// A switch that records the thread it was cut from.
    struct ThreadSwitch(std::sync::Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>);

    impl PowerSwitch for ThreadSwitch {
        fn name(&self) -> String {
            "thread-recording switch".into()
        }
        fn capabilities(&self) -> faultline_drivers::PowerCaps {
            faultline_drivers::PowerCaps::default()
        }
        fn power_off(&mut self) -> Result<(), faultline_drivers::PowerError> {
            *self.0.lock().unwrap() = Some(std::thread::current().id());
            Ok(())
        }
        fn power_on(&mut self) -> Result<(), faultline_drivers::PowerError> {
            Ok(())
        }
        fn state(&mut self) -> Result<PowerState, faultline_drivers::PowerError> {
            Ok(PowerState::On)
        }
    }

    #[test]
    fn the_fault_runs_on_its_own_thread_and_the_writer_learns_when_it_landed() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
        let mut cutter = Cutter::power(Box::new(ThreadSwitch(seen.clone())));
        std::thread::scope(|sc| {
            let ft = FaultThread::spawn(sc, &mut cutter, Duration::ZERO);
            let first = ft.fire().unwrap();
            assert_eq!(ft.fire().ok(), Some(first), "one cut per cycle: a second call learns the first one's landing");
        });
        let cut_on = seen.lock().unwrap().expect("the switch was cut");
        assert_ne!(cut_on, std::thread::current().id(), "not on the caller's (the writer's) thread");
        // A thread never fired ends with its scope.
        std::thread::scope(|sc| drop(FaultThread::spawn(sc, &mut cutter, Duration::ZERO)));
    }

    /// A switch that counts its cuts and takes a while to cut.
    struct SlowSwitch(std::sync::Arc<std::sync::atomic::AtomicU32>);

    impl PowerSwitch for SlowSwitch {
        fn name(&self) -> String {
            "slow switch".into()
        }
        fn capabilities(&self) -> faultline_drivers::PowerCaps {
            faultline_drivers::PowerCaps::default()
        }
        fn power_off(&mut self) -> Result<(), faultline_drivers::PowerError> {
            std::thread::sleep(Duration::from_millis(30));
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        fn power_on(&mut self) -> Result<(), faultline_drivers::PowerError> {
            Ok(())
        }
        fn state(&mut self) -> Result<PowerState, faultline_drivers::PowerError> {
            Ok(PowerState::Off)
        }
    }

    #[test]
    fn writers_of_every_port_fire_one_cut_and_all_learn_when_it_landed() {
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut cutter = Cutter::power(Box::new(SlowSwitch(cuts.clone())));
        std::thread::scope(|sc| {
            let ft = FaultThread::spawn(sc, &mut cutter, Duration::ZERO);
            assert!(!ft.fired());
            let (ft, counted) = (&ft, &cuts);
            // The writers' threads end before the fault's (as in the runner: an inner scope).
            std::thread::scope(|inner| {
                let waits: Vec<_> = (0..4)
                    .map(|_| {
                        inner.spawn(move || {
                            let r = ft.fire();
                            // Whoever fired, every writer returns only once the one cut landed.
                            (r, counted.load(std::sync::atomic::Ordering::SeqCst))
                        })
                    })
                    .collect();
                for w in waits {
                    let (r, seen) = w.join().unwrap();
                    assert!(r.is_ok());
                    assert_eq!(seen, 1, "a writer returned before the cut landed");
                }
            });
            assert!(ft.fired());
        });
        assert_eq!(cuts.load(std::sync::atomic::Ordering::SeqCst), 1, "one cut, however many writers fire it");
    }

    /// A cut that gathers its writers waits for each to fire or leave: the first of three
    /// writers to fire is held until the second fires and the third leaves (it failed before
    /// its placement), then the one cut lands for both.
    #[test]
    fn a_gathered_cut_waits_for_every_writer_to_fire_or_leave() {
        let cuts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut cutter = Cutter::power(Box::new(SlowSwitch(cuts.clone())));
        std::thread::scope(|sc| {
            let ft = FaultThread::spawn(sc, &mut cutter, Duration::ZERO);
            ft.gather(3);
            let (ft, counted) = (&ft, &cuts);
            std::thread::scope(|inner| {
                let first = inner.spawn(move || ft.fire());
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(counted.load(std::sync::atomic::Ordering::SeqCst), 0, "cut before the others drained");
                let second = inner.spawn(move || ft.fire());
                std::thread::sleep(Duration::from_millis(50));
                assert_eq!(counted.load(std::sync::atomic::Ordering::SeqCst), 0, "cut before the third writer fired or left");
                ft.leave();
                assert!(first.join().unwrap().is_ok() && second.join().unwrap().is_ok());
            });
        });
        assert_eq!(cuts.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
