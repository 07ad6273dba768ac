//! A cycle's stream, agent side: the writer's ledger is the coordinator's, reached through
//! the session ([`StreamLedger`]). Every record the writer appends goes out at once, in order
//! and numbered; a reservation is used only once the coordinator has said it is durable there
//! (`durable`); checkpoints (what is durable so far) go out every `stream_every_ms`, so a host
//! that dies leaves the coordinator at most one interval behind. The cut placement asks the
//! coordinator for the cut (`cut_due`) and waits for `cut_done`.
//!
//! The agent keeps no history of the run: the coordinator's ledger checks each record
//! against its own ([`Ledger`] implementations refuse a record that contradicts it), so
//! [`StreamLedger::history`] is the run's header alone.

use super::peer::Frames as Inbox;
use crate::ledger::{History, Ledger, LedgerError, Record, RunHeader};
use crate::remote::proto::{self, Frame, FrameError, Nonce};
use crate::writer::{HookError, StopToken, WireSamples};
use std::cell::RefCell;
use std::io::Write;
use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// The most completions one `samples` frame carries (each about 50 bytes of JSON: well inside
/// a frame's bound).
const SAMPLES_PER_FRAME: usize = 8192;

/// Why a cycle's stream ended the session.
#[derive(Debug)]
pub(crate) enum Fatal {
    /// The coordinator's side closed (it died, or the transport did).
    Closed,
    /// The coordinator broke the protocol: the agent refuses it, saying why.
    Refused(String),
    /// Writing to the coordinator failed.
    Io(std::io::Error),
}

/// The session as a cycle uses it: where frames go, where the coordinator's come from, and
/// what they said so far.
pub(crate) struct Link<'a> {
    pub w: &'a mut dyn Write,
    inbox: &'a Inbox,
    run: Nonce,
    seq: u64,
    /// The number the next record gets.
    next: u64,
    /// Records numbered below this are durable in the coordinator's ledger.
    durable_upto: u64,
    stop: StopToken,
    cut_done: Option<Option<String>>,
    /// How long an answer of the coordinator may take (a durable reservation, a cut).
    wait: Duration,
    pub fatal: Option<Fatal>,
    /// The writer's completions, when the request asked for them: sent before each record.
    samples: Option<WireSamples>,
}

impl<'a> Link<'a> {
    pub fn new(w: &'a mut dyn Write, inbox: &'a Inbox, run: Nonce, seq: u64, stop: StopToken, wait: Duration) -> Self {
        Link { w, inbox, run, seq, next: 0, durable_upto: 0, stop, cut_done: None, wait, fatal: None, samples: None }
    }

    /// Streams the writer's completions, recorded into `samples`.
    pub fn with_samples(mut self, samples: WireSamples) -> Self {
        self.samples = Some(samples);
        self
    }

    /// Sends the completions recorded since the last call, in frames of at most
    /// [`SAMPLES_PER_FRAME`].
    pub fn send_samples(&mut self) -> Result<(), LedgerError> {
        let Some(taken) = self.samples.as_ref().map(WireSamples::take) else { return Ok(()) };
        for part in taken.chunks(SAMPLES_PER_FRAME) {
            self.send(&Frame::Samples { run: self.run.clone(), seq: self.seq, samples: part.to_vec() })?;
        }
        Ok(())
    }

    fn failed(&self) -> LedgerError {
        LedgerError::WriterFailed(match &self.fatal {
            Some(Fatal::Closed) => "the coordinator went away".into(),
            Some(Fatal::Refused(why)) => format!("the coordinator broke the protocol: {why}"),
            Some(Fatal::Io(e)) => format!("cannot write to the coordinator: {e}"),
            None => "the stream failed".into(),
        })
    }

    fn send(&mut self, f: &Frame) -> Result<(), LedgerError> {
        if self.fatal.is_none() {
            if let Err(e) = proto::write_frame(&mut self.w, f) {
                self.fatal = Some(if e.kind() == std::io::ErrorKind::BrokenPipe { Fatal::Closed } else { Fatal::Io(e) });
            }
        }
        match self.fatal {
            Some(_) => Err(self.failed()),
            None => Ok(()),
        }
    }

    /// Takes in one frame of the coordinator's.
    fn take(&mut self, f: Result<Frame, FrameError>) {
        let f = match f {
            Ok(f) => f,
            Err(FrameError::Closed) => return self.fatal = Some(Fatal::Closed),
            Err(e) => return self.fatal = Some(Fatal::Refused(e.to_string())),
        };
        let ok = |run: &Nonce, seq: u64| *run == self.run && seq == self.seq;
        match f {
            Frame::Durable { run, seq, upto } if ok(&run, seq) => {
                if upto > self.next {
                    self.fatal = Some(Fatal::Refused(format!("records up to {upto} called durable, where {} were sent", self.next)));
                } else {
                    self.durable_upto = self.durable_upto.max(upto);
                }
            }
            Frame::CutDone { run, seq, failed } if ok(&run, seq) => self.cut_done = Some(failed),
            Frame::Stop { run, seq } if ok(&run, seq) => self.stop.stop(),
            other => {
                let why = match other.run() {
                    Some(r) if *r != self.run => format!("a frame of run {r}; this agent serves run {}, and no other", self.run),
                    _ => format!("a {} frame while request {} (a cycle) runs", other.kind(), self.seq),
                };
                self.fatal = Some(Fatal::Refused(why));
            }
        }
    }

    /// Takes in what the coordinator has sent, without waiting.
    fn pump(&mut self) {
        while self.fatal.is_none() {
            match self.inbox.try_recv() {
                Ok(f) => self.take(f),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => self.fatal = Some(Fatal::Closed),
            }
        }
    }

    /// Waits for the coordinator until `done` holds, at most `self.wait`.
    fn wait_for(&mut self, what: &str, done: impl Fn(&Link) -> bool) -> Result<(), LedgerError> {
        let until = Instant::now() + self.wait;
        loop {
            self.pump();
            if self.fatal.is_some() {
                return Err(self.failed());
            }
            if done(self) {
                return Ok(());
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.inbox.recv_timeout(left) {
                Ok(f) => self.take(f),
                Err(RecvTimeoutError::Disconnected) => self.fatal = Some(Fatal::Closed),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(LedgerError::WriterFailed(format!(
                        "the coordinator did not answer within {:?} ({what}): the transport stalled",
                        self.wait
                    )))
                }
            }
        }
    }

    /// Waits until the records numbered below `upto` are durable, asking the coordinator to
    /// make them so if they are not yet (a checkpoint it holds in memory is not).
    fn wait_durable(&mut self, upto: u64, what: &str) -> Result<(), LedgerError> {
        self.pump();
        if self.durable_upto >= upto {
            return Ok(());
        }
        self.send(&Frame::Sync { run: self.run.clone(), seq: self.seq, upto })?;
        self.wait_for(what, |l| l.durable_upto >= upto)
    }

    /// The cut hook: asks the coordinator for the cut and waits until it says it ran.
    pub fn cut(&mut self) -> Result<(), HookError> {
        self.cut_done = None;
        self.send(&Frame::CutDue { run: self.run.clone(), seq: self.seq })?;
        self.wait_for("the cut", |l| l.cut_done.is_some())?;
        match self.cut_done.take().flatten() {
            None => Ok(()),
            Some(why) => Err(why.into()),
        }
    }
}

/// The writer's ledger on an agent: the coordinator's, over the session.
pub(crate) struct StreamLedger<'l, 'a> {
    link: &'l RefCell<Link<'a>>,
    history: History,
}

impl<'l, 'a> StreamLedger<'l, 'a> {
    pub fn new(link: &'l RefCell<Link<'a>>, header: RunHeader) -> Self {
        StreamLedger { link, history: History::new(header) }
    }
}

impl Ledger for StreamLedger<'_, '_> {
    fn append(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        let mut l = self.link.borrow_mut();
        l.send_samples()?;
        let n = l.next;
        let f = Frame::Records { run: l.run.clone(), seq: l.seq, first: n, records: vec![rec.clone()] };
        l.send(&f)?;
        l.next += 1;
        l.pump();
        match l.fatal {
            Some(_) => Err(l.failed()),
            None => Ok(n),
        }
    }

    fn is_durable(&self, seq: u64) -> bool {
        let mut l = self.link.borrow_mut();
        l.pump();
        seq < l.durable_upto
    }

    fn wait_durable(&mut self, seq: u64) -> Result<(), LedgerError> {
        self.link.borrow_mut().wait_durable(seq + 1, "a durable record")
    }

    fn sync(&mut self) -> Result<(), LedgerError> {
        let mut l = self.link.borrow_mut();
        let upto = l.next;
        l.wait_durable(upto, "the records' durability")
    }

    fn history(&self) -> &History {
        &self.history
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn sent(out: &[u8]) -> Vec<Frame> {
        let mut r = out;
        std::iter::from_fn(|| proto::read_frame(&mut r).ok()).collect()
    }

    fn checkpoint() -> Record {
        Record::Checkpoint { cycle: 1, durable_prefix: 1, durable_extras: vec![], failed: vec![] }
    }

    /// A checkpoint the coordinator holds in memory is not durable: a writer that syncs says
    /// so (`sync`), and goes on once the coordinator answers `durable`; unanswered, it fails
    /// within its bound, naming the stall.
    #[test]
    fn a_sync_asks_the_coordinator_and_waits_for_its_answer_within_a_bound() {
        let run = Nonce::from_words(3, 3);
        let header = crate::ledger::tests::header();
        // Answered 20 ms later.
        let (tx, rx) = mpsc::channel();
        let answer = {
            let run = run.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                tx.send(Ok(Frame::Durable { run, seq: 4, upto: 1 })).unwrap();
                tx
            })
        };
        let mut out = Vec::new();
        let link = RefCell::new(Link::new(&mut out, &rx, run.clone(), 4, StopToken::default(), Duration::from_secs(5)));
        let mut l = StreamLedger::new(&link, header.clone());
        assert_eq!(l.append(&checkpoint()).unwrap(), 0);
        assert!(!l.is_durable(0));
        l.sync().unwrap();
        assert!(l.is_durable(0));
        drop(l);
        drop(link);
        let f = sent(&out);
        assert!(matches!(&f[0], Frame::Records { first: 0, records, .. } if records.len() == 1), "{f:?}");
        assert!(matches!(&f[1], Frame::Sync { seq: 4, upto: 1, .. }), "{f:?}");
        let _tx = answer.join().unwrap();
        // Never answered: a bounded wait, then an error naming it.
        let (_tx, rx) = mpsc::channel::<Result<Frame, FrameError>>();
        let mut out = Vec::new();
        let link = RefCell::new(Link::new(&mut out, &rx, run.clone(), 4, StopToken::default(), Duration::from_millis(50)));
        let mut l = StreamLedger::new(&link, header);
        l.append(&checkpoint()).unwrap();
        let t0 = std::time::Instant::now();
        let e = l.sync().unwrap_err().to_string();
        assert!(e.contains("did not answer") && e.contains("transport stalled") && t0.elapsed() < Duration::from_secs(2), "{e}");
    }

    /// Frames of another run, another request, or durability claimed for records never sent
    /// end the stream with a refusal; a coordinator that goes away ends it quietly.
    #[test]
    fn a_coordinator_that_breaks_the_protocol_is_refused_and_one_that_leaves_ends_the_stream() {
        let run = Nonce::from_words(3, 3);
        let cases: Vec<(Result<Frame, FrameError>, &str)> = vec![
            (Ok(Frame::Durable { run: Nonce::from_words(9, 9), seq: 4, upto: 1 }), "a frame of run 0000000000000009"),
            (Ok(Frame::Durable { run: run.clone(), seq: 5, upto: 1 }), "a durable frame while request 4"),
            (Ok(Frame::Durable { run: run.clone(), seq: 4, upto: 7 }), "records up to 7 called durable, where 1 were sent"),
            (Err(FrameError::Closed), "the coordinator went away"),
        ];
        for (frame, says) in cases {
            let (tx, rx) = mpsc::channel();
            tx.send(frame).unwrap();
            let mut out = Vec::new();
            let link = RefCell::new(Link::new(&mut out, &rx, run.clone(), 4, StopToken::default(), Duration::from_secs(5)));
            let mut l = StreamLedger::new(&link, crate::ledger::tests::header());
            let e = match l.append(&checkpoint()) {
                Err(e) => e.to_string(),
                Ok(_) => l.sync().unwrap_err().to_string(),
            };
            assert!(e.contains(says), "{e}");
        }
    }
}
