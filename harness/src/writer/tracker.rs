//! Durable-state bookkeeping for one cycle, independent of any device: which ids finished,
//! which completed, and what each flush covers, captured when the flush is submitted.

use crate::ledger::Contract;
use std::collections::{BTreeSet, HashMap};

struct FlushSnap {
    prefix: u64,
    extras: Vec<u64>,
}

/// Durable-state bookkeeping for one cycle, independent of any device.
pub struct Tracker {
    contract: Contract,
    first_id: u64,
    /// Every id below this has finished (completed or failed).
    finished_prefix: u64,
    /// Finished ids at or past `finished_prefix`.
    finished_above: BTreeSet<u64>,
    /// Successfully completed ids at or past `finished_prefix`.
    completed_above: BTreeSet<u64>,
    failed: Vec<u64>,
    /// Flush contract: every id below this is durable unless failed.
    flushed_prefix: u64,
    /// Flush contract: durable ids at or past `flushed_prefix` (flushed extras, FUA).
    flushed_extras: BTreeSet<u64>,
    flushes: HashMap<u64, FlushSnap>,
}

impl Tracker {
    pub fn new(contract: Contract, first_id: u64) -> Self {
        Tracker {
            contract,
            first_id,
            finished_prefix: first_id,
            finished_above: BTreeSet::new(),
            completed_above: BTreeSet::new(),
            failed: Vec::new(),
            flushed_prefix: first_id,
            flushed_extras: BTreeSet::new(),
            flushes: HashMap::new(),
        }
    }

    pub fn finished_prefix(&self) -> u64 {
        self.finished_prefix
    }

    pub fn write_done(&mut self, id: u64, ok: bool, fua: bool) {
        debug_assert!(id >= self.first_id);
        if ok {
            if id >= self.finished_prefix {
                self.completed_above.insert(id);
            }
            if fua && id >= self.flushed_prefix {
                self.flushed_extras.insert(id);
            }
        } else {
            self.failed.push(id);
        }
        self.finished_above.insert(id);
        while self.finished_above.remove(&self.finished_prefix) {
            self.finished_prefix += 1;
        }
        self.completed_above = self.completed_above.split_off(&self.finished_prefix);
    }

    /// Captures what a flush submitted now covers.
    pub fn flush_submitted(&mut self, flush: u64) {
        let snap = FlushSnap { prefix: self.finished_prefix, extras: self.completed_above.iter().copied().collect() };
        self.flushes.insert(flush, snap);
    }

    pub fn flush_done(&mut self, flush: u64, ok: bool) {
        let Some(snap) = self.flushes.remove(&flush) else { return };
        if !ok {
            return;
        }
        if snap.prefix > self.flushed_prefix {
            self.flushed_prefix = snap.prefix;
        }
        self.flushed_extras.extend(snap.extras);
        self.flushed_extras = self.flushed_extras.split_off(&self.flushed_prefix);
    }

    /// (durable prefix, durable ids past it, failed ids) under the contract.
    pub fn durable(&self) -> (u64, Vec<u64>, Vec<u64>) {
        let mut failed = self.failed.clone();
        failed.sort_unstable();
        match self.contract {
            Contract::Plp => (self.finished_prefix, self.completed_above.iter().copied().collect(), failed),
            Contract::Flush => (self.flushed_prefix, self.flushed_extras.iter().copied().collect(), failed),
        }
    }
}
