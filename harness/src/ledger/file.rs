//! The ledger file's writer: records are checked against the history, framed and handed to a
//! background thread that group-commits them (one write and one fdatasync per batch), so
//! appending never waits on the disk; durability is asked for by sequence number.

use super::frame::frame;
use super::history::History;
use super::{Ledger, LedgerError, Record, RunHeader, LEDGER_FILE};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

struct Shared {
    durable_seq: Mutex<(u64, Option<String>)>,
    cond: Condvar,
}

enum Msg {
    Frame(Vec<u8>, u64),
    Stop,
}

/// Appends records from a background thread with group commit.
pub struct LedgerWriter {
    path: PathBuf,
    tx: Sender<Msg>,
    next_seq: u64,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// What replaying the ledger would give, kept current on every append.
    history: History,
    /// Run before a record that promises something of the drive is appended.
    before_promise: Option<BeforePromise>,
}

/// Saves what a record is about to promise (a drive this process serves, and keeps in
/// memory, saved to the run directory), so that a harness killed after the record resumes
/// on a drive that holds it.
pub type BeforePromise = Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>;

impl LedgerWriter {
    /// Creates a new ledger with its run header. Fails if one exists.
    pub fn create(run_dir: &Path, header: RunHeader) -> Result<Self, LedgerError> {
        let path = run_dir.join(LEDGER_FILE);
        let io = |source| LedgerError::Io { path: path.clone(), source };
        let file = OpenOptions::new().write(true).create_new(true).open(&path).map_err(io)?;
        // Make the new file's directory entry durable too.
        File::open(run_dir).and_then(|d| d.sync_all()).map_err(io)?;
        let mut w = Self::start(path, file, 0, History::new(header.clone()));
        w.send(&Record::RunStart(header))?;
        w.sync()?;
        Ok(w)
    }

    /// Opens an existing ledger for appending after `history` (from [`replay`](super::replay)), cutting off
    /// a torn tail first.
    pub fn open(run_dir: &Path, history: &History) -> Result<Self, LedgerError> {
        let path = run_dir.join(LEDGER_FILE);
        let io = |source| LedgerError::Io { path: path.clone(), source };
        let file = OpenOptions::new().write(true).open(&path).map_err(io)?;
        file.set_len(history.valid_bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        let mut file = file;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::End(0)).map_err(io)?;
        Ok(Self::start(path, file, history.records, history.clone()))
    }

    fn start(path: PathBuf, file: File, next_seq: u64, history: History) -> Self {
        let (tx, rx) = channel();
        let shared = Arc::new(Shared { durable_seq: Mutex::new((next_seq, None)), cond: Condvar::new() });
        let s2 = shared.clone();
        let p2 = path.clone();
        let thread =
            std::thread::Builder::new().name("ledger".into()).spawn(move || writer_thread(p2, file, rx, s2)).expect("spawn ledger thread");
        LedgerWriter { path, tx, next_seq, shared, thread: Some(thread), history, before_promise: None }
    }

    /// Runs `hook` before every record that promises something of the drive (all but the
    /// run's start, a cycle's start and a reservation of ids) is appended; a failed hook
    /// fails the append, and nothing is recorded.
    pub fn before_promises(&mut self, hook: BeforePromise) {
        self.before_promise = Some(hook);
    }

    /// The run as the ledger records it so far (appended records included).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Queues a record; returns its sequence number. Never waits for the disk. A record that
    /// contradicts the ledger (a harness bug) is refused before it is written.
    pub fn append(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        let index = self.next_seq;
        if let Some(hook) = self.before_promise.as_ref().filter(|_| rec.promises()) {
            hook().map_err(|source| LedgerError::NotSaved { path: self.path.clone(), index, source })?;
        }
        self.history.apply(rec.clone()).map_err(|why| LedgerError::Invalid {
            path: self.path.clone(),
            index,
            offset: 0,
            why: format!("refusing to append: {why}"),
        })?;
        self.send(rec)
    }

    fn send(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        self.check()?;
        let seq = self.next_seq;
        let payload = serde_json::to_vec(rec).expect("records serialise");
        self.next_seq += 1;
        if self.tx.send(Msg::Frame(frame(seq, &payload), seq)).is_err() {
            return Err(self.failure());
        }
        Ok(seq)
    }

    /// True when record `seq` is on stable storage.
    pub fn is_durable(&self, seq: u64) -> bool {
        self.shared.durable_seq.lock().expect("ledger lock").0 > seq
    }

    /// Waits until record `seq` is on stable storage.
    pub fn wait_durable(&self, seq: u64) -> Result<(), LedgerError> {
        let mut g = self.shared.durable_seq.lock().expect("ledger lock");
        while g.0 <= seq {
            if let Some(e) = &g.1 {
                return Err(LedgerError::WriterFailed(e.clone()));
            }
            g = self.shared.cond.wait(g).expect("ledger lock");
        }
        Ok(())
    }

    /// Waits until everything appended so far is on stable storage.
    pub fn sync(&mut self) -> Result<(), LedgerError> {
        match self.next_seq.checked_sub(1) {
            Some(last) => self.wait_durable(last),
            None => Ok(()),
        }
    }

    fn check(&self) -> Result<(), LedgerError> {
        match &self.shared.durable_seq.lock().expect("ledger lock").1 {
            Some(e) => Err(LedgerError::WriterFailed(e.clone())),
            None => Ok(()),
        }
    }

    fn failure(&self) -> LedgerError {
        let g = self.shared.durable_seq.lock().expect("ledger lock");
        LedgerError::WriterFailed(g.1.clone().unwrap_or_else(|| format!("{}: writer thread gone", self.path.display())))
    }

    /// Flushes and stops the writer thread.
    pub fn close(mut self) -> Result<(), LedgerError> {
        self.sync()?;
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        Ok(())
    }
}

/// The trait's methods are the inherent ones above, which callers holding a `LedgerWriter`
/// use without importing [`Ledger`].
impl Ledger for LedgerWriter {
    fn append(&mut self, rec: &Record) -> Result<u64, LedgerError> {
        LedgerWriter::append(self, rec)
    }

    fn is_durable(&self, seq: u64) -> bool {
        LedgerWriter::is_durable(self, seq)
    }

    fn wait_durable(&mut self, seq: u64) -> Result<(), LedgerError> {
        LedgerWriter::wait_durable(self, seq)
    }

    fn sync(&mut self) -> Result<(), LedgerError> {
        LedgerWriter::sync(self)
    }

    fn history(&self) -> &History {
        LedgerWriter::history(self)
    }
}

impl Drop for LedgerWriter {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn writer_thread(path: PathBuf, mut file: File, rx: Receiver<Msg>, shared: Arc<Shared>) {
    let mut batch = Vec::new();
    loop {
        let mut last = None;
        let mut stop = false;
        match rx.recv() {
            Ok(Msg::Frame(f, seq)) => {
                batch.extend_from_slice(&f);
                last = Some(seq);
            }
            Ok(Msg::Stop) | Err(_) => stop = true,
        }
        // Group commit: take everything already queued into the same write and fdatasync.
        while let Ok(m) = rx.try_recv() {
            match m {
                Msg::Frame(f, seq) => {
                    batch.extend_from_slice(&f);
                    last = Some(seq);
                }
                Msg::Stop => stop = true,
            }
        }
        if let Some(seq) = last {
            let r = file.write_all(&batch).and_then(|_| file.sync_data());
            batch.clear();
            let mut g = shared.durable_seq.lock().expect("ledger lock");
            match r {
                Ok(()) => g.0 = seq + 1,
                Err(e) => {
                    g.1 = Some(format!("{}: appending failed: {e} (records up to sequence {} are safe)", path.display(), g.0));
                    shared.cond.notify_all();
                    return;
                }
            }
            shared.cond.notify_all();
        }
        if stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::history::replay;
    use crate::ledger::tests::{header, tempdir};
    use crate::ledger::Record;

    #[test]
    fn writer_appends_and_reopens_after_torn_tail() {
        let dir = tempdir();
        let mut w = LedgerWriter::create(&dir, header()).unwrap();
        w.append(&Record::CycleStart { cycle: 1, first_id: 1, at: "t".into(), port: crate::port::PortId::A }).unwrap();
        let s = w.append(&Record::Reserve { cycle: 1, upto: 64 }).unwrap();
        w.wait_durable(s).unwrap();
        w.close().unwrap();
        let mut f = OpenOptions::new().append(true).open(dir.join(LEDGER_FILE)).unwrap();
        f.write_all(b"FLR1\x10\x00\x00").unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!((h.records, h.torn_tail_bytes), (3, 7));
        let mut w = LedgerWriter::open(&dir, &h).unwrap();
        w.append(&Record::Checkpoint { cycle: 1, durable_prefix: 9, durable_extras: vec![], failed: vec![] }).unwrap();
        w.close().unwrap();
        let h = replay(&dir).unwrap();
        assert_eq!((h.records, h.torn_tail_bytes, h.cycles[0].durable_prefix), (4, 0, 9));
    }

    #[test]
    fn the_trait_appends_in_order_and_refuses_a_contradiction() {
        let dir = tempdir();
        let mut w = LedgerWriter::create(&dir, header()).unwrap();
        let l: &mut dyn Ledger = &mut w;
        let a = l.append(&Record::CycleStart { cycle: 1, first_id: 1, at: "t".into(), port: crate::port::PortId::A }).unwrap();
        let b = l.append(&Record::Reserve { cycle: 1, upto: 64 }).unwrap();
        assert_eq!((a, b), (1, 2), "the run header is record 0");
        l.wait_durable(b).unwrap();
        assert!(l.is_durable(a) && l.is_durable(b) && !l.is_durable(b + 1));
        let e = l.append(&Record::Reserve { cycle: 2, upto: 64 }).unwrap_err();
        assert!(matches!(e, LedgerError::Invalid { .. }), "{e}");
        l.sync().unwrap();
        assert_eq!((l.history().records, l.history().submitted_end()), (3, 64));
        w.close().unwrap();
        assert_eq!(replay(&dir).unwrap().records, 3, "the refused record was never written");
    }
}
