//! Agents and their coordinator (docs/PROTOCOL.md): `faultline agent --stdio` on a host that
//! writes over a port of the drive, and the coordinator that reaches it through a transport
//! command (ssh by default). [`proto`] is the wire (length-prefixed JSON frames, versioned,
//! bounded, a per-run nonce, typed operations), [`serve`] the agent's side, [`dial`] the
//! coordinator's. Synchronous: a session is a child process's pipes and a reader thread.
//!
//! What is here today: the handshake, its refusals, the clock offset of an agent's host, and
//! goodbye (`faultline agent --check HOST`). The operations of a port (open, write a cycle,
//! verify, wait until ready, health, the host's own faults) come next (issue #24).

pub mod dial;
pub mod proto;
pub mod serve;
