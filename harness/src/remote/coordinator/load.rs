//! A performance run's read load, the coordinator's side (`read_load`, version 6): the
//! agent's completions come back in bounded parts, on the agent's clock; the caller puts them
//! on its own (the session's measured offset) into the port's slot of the phase's windows, as
//! it does a cycle's streamed completions.

use super::session::{DialError, Session};
use super::verify::{over, BadPart};
use crate::remote::proto::{Answer, Op, VerifiedPart};
use crate::writer::windows::WIRE_KEPT;
use crate::writer::WireSample;
use std::time::Duration;

impl Session {
    /// Has the agent run the read load over `span` for `run_for`; returns its completions, on
    /// the agent's clock. `timeout` bounds each frame's wait after the load.
    pub fn read_load(&mut self, span: (u64, u64), run_for: Duration, timeout: Duration) -> Result<Vec<WireSample>, DialError> {
        let run_ms = run_for.as_millis().min(u64::MAX as u128) as u64;
        let op = Op::ReadLoad { span: [span.0, span.1], run_ms };
        let mut out: Vec<WireSample> = Vec::new();
        let answer = self.parted(op, "read load", timeout + run_for, |part| {
            let VerifiedPart::Samples(s) = part else {
                return Err(BadPart("something other than read samples in the answer to a read load".into()));
            };
            if over(out.len(), s.len(), WIRE_KEPT as u64) {
                return Err(BadPart(format!("more read samples than the {WIRE_KEPT} an agent keeps")));
            }
            out.extend(s);
            Ok(())
        })?;
        match answer {
            Answer::ReadLoaded { count } if count == out.len() as u64 => Ok(out),
            Answer::ReadLoaded { count } => Err(self.protocol(format!("{count} read samples counted, {} sent", out.len()))),
            Answer::Failed { why } => Err(DialError::Protocol { host: self.host.clone(), why }),
            other => Err(self.protocol(format!("{other:?} answered a read load"))),
        }
    }
}
