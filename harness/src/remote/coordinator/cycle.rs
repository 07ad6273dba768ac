//! A cycle's stream, coordinator side ([`Session::run_cycle`]): the agent's writer appends to
//! the coordinator's ledger over the session. The coordinator appends what it hears (its
//! ledger checks each record against the run's history and refuses one that contradicts it),
//! says a reservation is durable only once its ledger has synced it, runs the cut when the
//! agent's writer reaches its placement, and keeps the newest checkpoint in memory (its power
//! stays on), writing it to the ledger every `ledger_checkpoint_every`.
//!
//! When the host dies (the transport ends) or goes silent (a partition: no frame within the
//! bound), the coordinator closes the host's cycle from what it holds: the newest checkpoint
//! it heard, then the cycle's end as `interrupted`. A write it never heard complete is
//! therefore "may", never "must": no false finding, and what was lost to the coordinator is
//! at most what completed since the agent's last checkpoint, a few milliseconds of writes.

use super::session::{AgentFailed, DialError, Session};
use crate::ledger::{Ledger, LedgerError, Record};
use crate::remote::proto::{Answer, CycleRequest, CycleSummary, Expect, Frame, LinkReset, Op, TargetInfo};
use crate::run::{close_interrupted, RunError};
use crate::runner::controller_error::FaultHook;
use crate::writer::{StopToken, WireSample};

/// What takes a cycle's streamed write completions (on the agent's clock).
pub type TakeSamples<'a> = dyn FnMut(&[WireSample]) + 'a;
use std::time::{Duration, Instant};

/// How often a cycle's wait looks at its stop token.
const STOP_POLL: Duration = Duration::from_millis(5);

/// How the coordinator keeps a cycle's stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamPolicy {
    /// How often the newest checkpoint heard is written to the ledger (it is held in memory
    /// meanwhile, which covers the host's death; the file covers the coordinator's own).
    pub ledger_checkpoint_every: Duration,
    /// The longest silence of the agent taken before the cycle counts as lost (a partition);
    /// the agent streams a checkpoint every `stream_every_ms`, so silence means a stall.
    pub silence: Duration,
}

/// What the coordinator held of a cycle when it lost the host, and closed it from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub cycle: u32,
    /// Records heard from the agent.
    pub records: u64,
    /// The newest checkpoint heard: ids below the prefix are durable, and the extras.
    pub durable_prefix: u64,
    pub durable_extras: u64,
    /// The reservation's bound: ids at or above it were never used.
    pub reserved_upto: u64,
    /// How long before the loss the last frame was heard.
    pub last_heard: Duration,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} records heard, durable below id {} (+{} past it), ids reserved below {}, the last frame {:.1} ms before",
            self.records,
            self.durable_prefix,
            self.durable_extras,
            self.reserved_upto,
            self.last_heard.as_secs_f64() * 1e3
        )
    }
}

/// Why a remote cycle did not end as the agent's writer ended it.
#[derive(Debug, thiserror::Error)]
pub enum CycleError {
    /// The host went away or went silent mid-cycle; the cycle was closed as interrupted from
    /// what the coordinator held (inconclusive for the host: never a finding by itself).
    #[error("{source}; cycle {} closed as interrupted from what the coordinator held: {held}", held.cycle)]
    Lost { source: Box<DialError>, held: Held },
    /// The host was lost, and the coordinator's ledger could not record the cycle's close:
    /// what it held is named here, and the run's ledger stops at its last good record.
    #[error("{source}; cycle {} could not be closed in the coordinator's ledger ({ledger}); it held: {held}", held.cycle)]
    Unrecorded { source: Box<DialError>, held: Held, ledger: Box<RunError> },
    /// The agent could not run the cycle (its target failed, or refused an operation).
    #[error("{host}: cycle {cycle}: {why}")]
    Agent { host: String, cycle: u32, why: String },
    /// The coordinator's ledger refused a record or failed.
    #[error("cycle {cycle}: the coordinator's ledger: {source}")]
    Ledger { cycle: u32, source: RunError },
}

impl From<(u32, LedgerError)> for CycleError {
    fn from((cycle, e): (u32, LedgerError)) -> Self {
        CycleError::Ledger { cycle, source: RunError::Ledger(e) }
    }
}

impl Session {
    /// Opens `target` on the agent's host (one its command line lists), held to the run's
    /// `identity` once the run has begun.
    pub fn open(&mut self, target: &str, identity: Option<&str>, queue_depth: u32, timeout: Duration) -> Result<TargetInfo, DialError> {
        self.open_expecting(target, identity, &Expect::default(), queue_depth, &[], timeout)
    }

    /// As [`Session::open`], the device held to `expect` too (the scenario's serial, WWID,
    /// model, size).
    pub fn open_expecting(
        &mut self,
        target: &str,
        identity: Option<&str>,
        expect: &Expect,
        queue_depth: u32,
        resets: &[LinkReset],
        timeout: Duration,
    ) -> Result<TargetInfo, DialError> {
        let op = Op::Open {
            target: target.into(),
            identity: identity.map(str::to_string),
            expect: expect.clone(),
            queue_depth,
            resets: resets.to_vec(),
        };
        match self.call(op, timeout)? {
            Answer::Opened { target } => Ok(target),
            Answer::Failed { why } => Err(DialError::Protocol { host: self.host.clone(), why }),
            other => Err(self.protocol(format!("{other:?} answered an open"))),
        }
    }

    /// Whether the agent's target answers a read at `at`: `Err(why)` when it does not.
    pub fn probe(&mut self, at: u64, timeout: Duration) -> Result<Result<(), AgentFailed>, DialError> {
        match self.call(Op::Probe { at }, timeout)? {
            Answer::Probed { error } => Ok(error.map_or(Ok(()), |e| Err(AgentFailed(e)))),
            Answer::Failed { why } => Ok(Err(AgentFailed(why))),
            other => Err(self.protocol(format!("{other:?} answered a probe"))),
        }
    }

    /// Waits until the agent's target answers a read at `at`, at most `wait`: how long finding
    /// it again took (`None`: it stayed open) and its first read.
    pub fn wait_ready(&mut self, at: u64, wait: Duration, timeout: Duration) -> Result<(Option<Duration>, Duration), DialError> {
        let op = Op::WaitReady { at, timeout_ms: wait.as_millis().min(u64::MAX as u128) as u64 };
        match self.call(op, wait + timeout)? {
            Answer::Ready { enumerate_ns, first_read_ns } => {
                Ok((enumerate_ns.map(Duration::from_nanos), Duration::from_nanos(first_read_ns)))
            }
            Answer::Failed { why } => Err(DialError::Protocol { host: self.host.clone(), why }),
            other => Err(self.protocol(format!("{other:?} answered a wait until ready"))),
        }
    }

    /// Lets the agent go of its target.
    pub fn release(&mut self, timeout: Duration) -> Result<(), DialError> {
        match self.call(Op::Release {}, timeout)? {
            Answer::Released {} => Ok(()),
            other => Err(self.protocol(format!("{other:?} answered a release"))),
        }
    }

    /// Runs `req`'s cycle on the agent's open target, keeping its records in `ledger`;
    /// `fault` runs the cut when the agent's writer reaches its placement (`Err`: why the cut
    /// is not confirmed).
    /// `stop`, once stopped, ends the agent's cycle gracefully (a surviving port's writer when
    /// its window is over). `samples` takes the write completions the agent streams, on its
    /// clock, when the request asks for them (`req.samples`).
    pub fn run_cycle(
        &mut self,
        req: CycleRequest,
        ledger: &mut dyn Ledger,
        fault: &mut FaultHook<'_>,
        stop: Option<&StopToken>,
        policy: &StreamPolicy,
        mut samples: Option<&mut TakeSamples<'_>>,
    ) -> Result<CycleSummary, CycleError> {
        let cycle = req.cycle;
        // The agent is silent while it drains after a cut (up to its drain timeout).
        let silence = policy.silence + Duration::from_millis(req.drain_timeout_ms);
        self.seq += 1;
        let seq = self.seq;
        let mut s = Stream {
            cycle,
            seq,
            held: Held { cycle, ..Held::default() },
            checkpoint: None,
            written_at: Instant::now(),
            acked: 0,
            stop_sent: false,
        };
        let mut heard = Instant::now();
        if let Err(e) = self.send(&Frame::Request { run: self.run.clone(), seq, op: Op::Cycle(Box::new(req)) }) {
            return Err(s.lose(e, ledger, heard));
        }
        let what = format!("request {seq} (cycle {cycle})");
        let me = self.run.clone();
        let ours = |run: &crate::remote::proto::Nonce, q: u64| *run == me && q == seq;
        loop {
            let f = match self.next_cycle_frame(&mut s, &what, stop, silence, heard) {
                Ok(Some(f)) => f,
                Ok(None) => continue,
                Err(e) => return Err(s.lose(e, ledger, heard)),
            };
            heard = Instant::now();
            let step = match f {
                Frame::Records { run, seq: q, first, records } if ours(&run, q) => self.on_records(&mut s, ledger, policy, first, records),
                // Already said durable (the agent asked before that answer reached it): the
                // answer on its way is the answer.
                Frame::Sync { run, seq: q, upto } if ours(&run, q) && upto <= s.acked => Ok(()),
                Frame::Sync { run, seq: q, upto } if ours(&run, q) => self.on_sync(&mut s, ledger, upto),
                Frame::Samples { run, seq: q, samples: batch } if ours(&run, q) => match samples.as_mut() {
                    Some(take) => {
                        take(&batch);
                        Ok(())
                    }
                    None => {
                        Err(Ending::Lost(self.protocol(format!("completions (samples) in cycle {cycle}, whose request asked for none"))))
                    }
                },
                Frame::CutDue { run, seq: q } if ours(&run, q) => {
                    let failed = fault().err().map(|e| e.to_string());
                    self.send(&Frame::CutDone { run: self.run.clone(), seq, failed }).map_err(Ending::Lost)
                }
                Frame::Reply { run, seq: q, result } if ours(&run, q) => match result {
                    Answer::CycleDone { summary } => return Ok(*summary),
                    Answer::Failed { why } => Err(Ending::Closed(CycleError::Agent { host: self.host.clone(), cycle, why })),
                    other => Err(Ending::Lost(self.protocol(format!("{other:?} answered a cycle")))),
                },
                Frame::Refused { why, ours, theirs } => {
                    Err(Ending::Lost(DialError::Refused { host: self.host.clone(), why, ours, theirs }))
                }
                other => Err(Ending::Lost(self.protocol(format!("{other:?} while request {seq} (cycle {cycle}) runs")))),
            };
            if let Err(end) = step {
                return Err(s.end(end, ledger, heard));
            }
        }
    }

    /// The next frame of `s`'s cycle, waiting a slice of what is left of `silence` since
    /// `heard` (`Ok(None)`: nothing yet, look again), after telling the agent to stop once
    /// `stop` is stopped. Nothing heard within the silence is a timeout.
    fn next_cycle_frame(
        &mut self,
        s: &mut Stream,
        what: &str,
        stop: Option<&StopToken>,
        silence: Duration,
        heard: Instant,
    ) -> Result<Option<Frame>, DialError> {
        if !s.stop_sent && stop.is_some_and(StopToken::is_stopped) {
            s.stop_sent = true;
            self.send(&Frame::Stop { run: self.run.clone(), seq: s.seq })?;
        }
        let left = silence.saturating_sub(heard.elapsed());
        if left.is_zero() {
            return Err(DialError::Timeout { host: self.host.clone(), what: what.to_string(), timeout: silence });
        }
        // In slices, to see the stop token.
        self.poll(what, left.min(STOP_POLL))
    }

    /// A frame of records: taken in order into the ledger, synced and said durable when one
    /// needs to be.
    fn on_records(
        &mut self,
        s: &mut Stream,
        ledger: &mut dyn Ledger,
        policy: &StreamPolicy,
        first: u64,
        records: Vec<Record>,
    ) -> Result<(), Ending> {
        if first != s.held.records {
            return Err(Ending::Lost(self.protocol(format!("records numbered from {first}, where {} was next", s.held.records))));
        }
        match s.take(records, ledger, policy) {
            Ok(true) => {
                ledger.sync().map_err(|e| Ending::Failed(CycleError::from((s.cycle, e))))?;
                self.say_durable(s)
            }
            Ok(false) => Ok(()),
            Err(Bad::Ledger(e)) => Err(Ending::Closed(CycleError::from((s.cycle, e)))),
            Err(Bad::Protocol(why)) => Err(Ending::Lost(self.protocol(why))),
        }
    }

    /// The agent asks for the records up to `upto` to be durable (not yet said so): the held
    /// checkpoint written, the ledger synced, then said durable.
    fn on_sync(&mut self, s: &mut Stream, ledger: &mut dyn Ledger, upto: u64) -> Result<(), Ending> {
        if upto > s.held.records {
            return Err(Ending::Lost(self.protocol(format!("a sync of records up to {upto}, where {} were sent", s.held.records))));
        }
        let synced = s.write_checkpoint(ledger).and_then(|()| ledger.sync());
        if let Err(e) = synced {
            return Err(Ending::Closed(CycleError::from((s.cycle, e))));
        }
        self.say_durable(s)
    }

    /// Tells the agent that every record it sent is durable.
    fn say_durable(&mut self, s: &mut Stream) -> Result<(), Ending> {
        s.acked = s.held.records;
        self.send(&Frame::Durable { run: self.run.clone(), seq: s.seq, upto: s.acked }).map_err(Ending::Lost)
    }
}

enum Bad {
    Ledger(LedgerError),
    Protocol(String),
}

/// How a cycle on the agent ends before its answer, and what closes it ([`Stream::end`]).
enum Ending {
    /// The host is lost (or broke the protocol): closed from what is held.
    Lost(DialError),
    /// The cycle failed: closed from what is held, the error kept unless the ledger fails too.
    Closed(CycleError),
    /// The ledger failed to sync: the error, as it is.
    Failed(CycleError),
}

/// What the coordinator holds of one cycle's stream.
struct Stream {
    cycle: u32,
    held: Held,
    /// The newest checkpoint heard and not yet in the ledger.
    checkpoint: Option<Record>,
    written_at: Instant,
    /// The request's number.
    seq: u64,
    /// Records below this were said durable to the agent.
    acked: u64,
    /// Whether the agent was told to stop.
    stop_sent: bool,
}

impl Stream {
    /// Takes in one frame's records; `Ok(true)` when one needs to be durable before the agent
    /// goes on (all but checkpoints: a reservation above all).
    fn take(&mut self, records: Vec<Record>, ledger: &mut dyn Ledger, policy: &StreamPolicy) -> Result<bool, Bad> {
        let mut sync = false;
        for rec in records {
            self.held.records += 1;
            let of = match &rec {
                Record::CycleStart { cycle, first_id, .. } => {
                    self.held.durable_prefix = *first_id;
                    self.held.reserved_upto = *first_id;
                    *cycle
                }
                Record::Reserve { cycle, upto } => {
                    self.held.reserved_upto = self.held.reserved_upto.max(*upto);
                    *cycle
                }
                Record::Checkpoint { cycle, durable_prefix, durable_extras, .. } => {
                    self.held.durable_prefix = *durable_prefix;
                    self.held.durable_extras = durable_extras.len() as u64;
                    *cycle
                }
                Record::WriteFailed { cycle, .. } | Record::CycleEnd { cycle, .. } => *cycle,
                other => return Err(Bad::Protocol(format!("an agent's cycle sent a record it does not write: {other:?}"))),
            };
            if of != self.cycle {
                return Err(Bad::Protocol(format!("a record of cycle {of} while cycle {} runs", self.cycle)));
            }
            if matches!(rec, Record::Checkpoint { .. }) {
                self.checkpoint = Some(rec);
                if self.written_at.elapsed() >= policy.ledger_checkpoint_every {
                    self.write_checkpoint(ledger).map_err(Bad::Ledger)?;
                }
                continue;
            }
            if matches!(rec, Record::CycleEnd { .. }) {
                // The end says all a checkpoint would.
                self.checkpoint = None;
            }
            ledger.append(&rec).map_err(Bad::Ledger)?;
            sync = true;
        }
        Ok(sync)
    }

    fn write_checkpoint(&mut self, ledger: &mut dyn Ledger) -> Result<(), LedgerError> {
        if let Some(c) = self.checkpoint.take() {
            ledger.append(&c)?;
        }
        self.written_at = Instant::now();
        Ok(())
    }

    /// Closes the cycle from what is held: the newest checkpoint, then its end as
    /// interrupted (nothing, if the agent never began it or its end is recorded).
    fn close(&mut self, ledger: &mut dyn Ledger) -> Result<(), RunError> {
        self.write_checkpoint(ledger)?;
        if ledger.history().cycles.last().is_some_and(|c| c.cycle == self.cycle && c.end.is_none()) {
            close_interrupted(ledger)?;
        }
        Ok(())
    }

    /// Closes the cycle from what is held after the host was lost; a ledger that cannot
    /// record even that is the error, naming the loss too.
    fn lose(&mut self, source: DialError, ledger: &mut dyn Ledger, heard: Instant) -> CycleError {
        self.held.last_heard = heard.elapsed();
        match self.close(ledger) {
            Ok(()) => CycleError::Lost { source: Box::new(source), held: self.held.clone() },
            Err(e) => CycleError::Unrecorded { source: Box::new(source), held: self.held.clone(), ledger: Box::new(e) },
        }
    }

    /// The error a cycle ends with, closed as `end` says.
    fn end(&mut self, end: Ending, ledger: &mut dyn Ledger, heard: Instant) -> CycleError {
        match end {
            Ending::Lost(e) => self.lose(e, ledger, heard),
            Ending::Closed(e) => self.close_or(ledger, e),
            Ending::Failed(e) => e,
        }
    }

    /// Closes the cycle from what is held after the agent's own failure; `err` unless the
    /// ledger fails too.
    fn close_or(&mut self, ledger: &mut dyn Ledger, err: CycleError) -> CycleError {
        match self.close(ledger) {
            Ok(()) => err,
            Err(e) => CycleError::Ledger { cycle: self.cycle, source: e },
        }
    }
}
