//! The coordinator's side of the wire: [`session`] dials an agent through the transport and
//! calls its operations ([`frames`] bounds what it holds of the agent's frames); [`cycle`]
//! keeps a cycle's stream in the run's ledger and closes it from what it holds when the host
//! dies; [`verify`] syncs the history and takes back a verify, sector hashes, the prefill and
//! the health logs; `load` a performance run's read load; [`dut`] is the remote port as the
//! runner's `Dut`, and `reset` the link reset its host runs, as the cutter aims it.

pub mod cycle;
pub mod dut;
pub mod frames;
mod load;
mod reset;
pub mod session;
pub mod verify;
