//! An NBD export as the device under test ([`NbdDut`]): opened by its URI, found again after a
//! fault by connecting again, and held to the run's identity (export, URI, description, size).
//! An export has no health logs.

use super::*;

/// An NBD export, and how to reach it again after a fault.
pub struct NbdDut {
    uri: String,
    spec: OpenSpec,
    target: Option<Box<dyn BlockTarget>>,
    /// The run's target identity (the ledger header's): anything else is refused.
    identity: Option<String>,
    notes: Vec<String>,
}

impl NbdDut {
    /// Connects to the export at `uri`. `begun`: the export carries this run's data already
    /// (its signature was probed when the run began).
    pub fn open(uri: &str, expect: &Expectation, queue_depth: usize, begun: bool) -> Result<NbdDut, DutError> {
        let mut spec = OpenSpec { writable: true, queue_depth, expect: expect.clone(), allow_overwrite_signature: begun, io_threads: 1 };
        let opened = open_target(Path::new(uri), &spec).map_err(|e| DutError::Open(super::Shared::new(e)))?;
        // From here on the export carries this run's data: connecting again after a fault must
        // not refuse it for what a signature probe might see in that data.
        spec.allow_overwrite_signature = true;
        let mut notes = opened.notes;
        notes.push(format!("no SMART/health checks: {uri} is an NBD export, which has no health logs"));
        Ok(NbdDut { uri: uri.to_string(), spec, target: Some(opened.target), identity: None, notes })
    }

    fn target(&mut self) -> Result<&mut dyn BlockTarget, DutError> {
        match &mut self.target {
            Some(t) => Ok(t.as_mut()),
            None => Err(DutError::NotOpen(self.uri.clone().into())),
        }
    }
}

impl real::Reopen for NbdDut {
    fn slot(&mut self) -> &mut Option<Box<dyn BlockTarget>> {
        &mut self.target
    }

    /// Connects again, refusing an export that is not the run's target.
    fn reopen(&mut self) -> Result<(), real::Refind> {
        let o = open_target(Path::new(&self.uri), &self.spec).map_err(|e| real::Refind::NotYet(super::Cause::of(e)))?;
        let found = o.target.identity();
        if let Some(want) = self.identity.as_ref().filter(|want| **want != found) {
            return Err(real::Refind::NotYet(super::Cause::text(format!("{} is now {found}, not the run's target {want}", self.uri))));
        }
        self.target = Some(o.target);
        Ok(())
    }
}

impl Dut for NbdDut {
    local_calls!();
    plain_writes!();

    fn wait_ready(&mut self, at: u64, timeout: Duration) -> Result<Readiness, DutError> {
        real::wait_reopening(self, at, timeout)
    }

    fn release(&mut self) {
        self.target = None;
    }

    fn health(&mut self) -> Option<Result<HealthLogs, HealthReadError>> {
        None
    }

    fn checkpoint_every(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn growth_bytes(&self) -> u64 {
        0
    }

    fn notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn bind(&mut self, identity: String) {
        self.identity = Some(identity);
    }
}
