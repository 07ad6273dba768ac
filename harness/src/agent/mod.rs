//! Agents and their coordinator (docs/PROTOCOL.md): `faultline agent --stdio` on a host that
//! writes over a port of the drive, and the coordinator that reaches it through a transport
//! command (ssh by default). [`proto`] is the wire (length-prefixed JSON frames, versioned,
//! bounded, a per-run nonce, typed operations), [`serve`] the agent's side, [`dial`] the
//! coordinator's. Synchronous: a session is a child process's pipes and a reader thread.
//!
//! The handshake, its refusals, the clock offset of an agent's host, goodbye (`faultline
//! agent --check HOST`), and a port's operations: the agent opens one of the targets its own
//! command line lists (`port`) and runs a cycle's workload there, streaming the writer's
//! ledger records to the coordinator as they happen (`stream`), while the coordinator
//! ([`cycle`]) keeps them in the run's ledger, answers reservations once they are durable,
//! runs the cut when the agent's writer reaches its placement, and closes the cycle from what
//! it holds when the host dies; verify, readiness, health, the prefill and the host's own link
//! resets go over the same wire ([`verify`], `reset`). Everything a request carries is held
//! to the agent's own facts first (`checked`); the coordinator's frames wait in a bounded
//! inbox, and every long operation stops at its next I/O once the coordinator is gone
//! ([`peer`]; docs/PROTOCOL.md, "Limits").

mod checked;
pub mod cycle;
pub mod dial;
#[doc(hidden)]
pub mod fuzzing;
mod load;
pub mod peer;
mod port;
pub mod proto;
mod reset;
pub mod serve;
mod stream;
pub mod verify;
