//! A link reset an agent runs on its own host, as the run's cutter aims it and the remote port
//! asks for it and takes its report back.

use crate::remote::proto::{LinkReset, ResetReport, ResetRequest};
use crate::runner::fault::{ControllerError, HostReset};
use std::sync::Arc;
use std::time::Duration;

/// A link reset the agent runs on its own host, shared by the run's cutter (which aims it:
/// [`HostReset::aim`]) and the port (which asks the agent for it in the cycle that cuts, and
/// keeps what the agent reported: [`HostReset::take_report`]).
#[derive(Clone, Default)]
pub(super) struct AgentReset(Arc<std::sync::Mutex<ResetState>>);

#[derive(Default)]
struct ResetState {
    host: String,
    want: Option<ResetRequest>,
    ran: Option<ResetReport>,
    log: Vec<String>,
}

impl AgentReset {
    /// The reset of `host`'s link, not aimed yet.
    pub(super) fn for_host(host: &str) -> AgentReset {
        let r = AgentReset::default();
        r.state().host = host.to_string();
        r
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ResetState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn want(&self) -> Option<ResetRequest> {
        self.state().want
    }

    pub(super) fn reported(&self, r: ResetReport) {
        let mut s = self.state();
        let line = format!(
            "{}: {} of {} {} in {:.1} ms",
            s.host,
            s.want.map(|w| w.reset.reset_kind().to_string()).unwrap_or_else(|| "reset".into()),
            r.controller,
            if r.error.is_some() { "failed" } else { "done" },
            r.took_ns as f64 / 1e6
        );
        s.log.push(line);
        let host = s.host.clone();
        s.log.extend(r.log.iter().map(|l| format!("{host}: {l}")));
        s.ran = Some(r);
    }
}

impl HostReset for AgentReset {
    fn aim(&self, want: Option<(LinkReset, Duration)>) {
        let mut s = self.state();
        s.want = want.map(|(reset, hold)| ResetRequest { reset, hold_ms: hold.as_millis().min(u64::MAX as u128) as u64 });
        s.ran = None;
    }

    /// What the agent reported of the reset aimed at it: `Ok` once it ran, the failure it
    /// reported, or that no report came (its cycle never reached the cut, or the host was
    /// lost).
    fn take_report(&self) -> Result<(), ControllerError> {
        let mut s = self.state();
        let reset = s.want.map(|w| w.reset.reset_kind());
        match s.ran.take() {
            Some(ResetReport { error: None, .. }) => Ok(()),
            Some(ResetReport { error: Some(message), controller, .. }) => {
                Err(ControllerError::Remote { host: s.host.clone(), reset, controller, message })
            }
            None => Err(ControllerError::NoReport { host: s.host.clone(), reset }),
        }
    }

    /// What the agents' resets noted since the last call, for the event log.
    fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut self.state().log)
    }
}
