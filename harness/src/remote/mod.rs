//! Agents and their coordinator (docs/PROTOCOL.md): `faultline agent --stdio` on a host that
//! writes over a port of the drive, and the coordinator that reaches it through a transport
//! command (ssh by default). Synchronous: a session is a child process's pipes and a reader
//! thread. Three parts, and neither side imports the other:
//!
//! - [`proto`] is the wire both sides speak (length-prefixed JSON frames, versioned, bounded,
//!   a per-run nonce, typed operations), and [`parts`] what they agree on about an answer
//!   sent in parts.
//! - [`agent`] is the agent's side: it answers the handshake and the typed operations on the
//!   one target its own command line lists, streams a cycle's ledger records as they happen,
//!   replays the coordinator's history to verify, runs its own host's link resets, holds
//!   everything a request carries to its own facts first, and stops every long operation at
//!   its next I/O once the coordinator is gone.
//! - [`coordinator`] is the other end: the session (dialled through the transport, its frames
//!   in a queue bounded in bytes), a cycle's stream kept in the run's ledger, verify, and the
//!   remote port as a [`Dut`](crate::runner::dut::Dut), which only the runner's opener names.

pub mod agent;
pub mod coordinator;
#[doc(hidden)]
pub mod fuzzing;
pub mod parts;
pub mod proto;
