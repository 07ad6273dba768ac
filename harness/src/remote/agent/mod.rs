//! The agent's side (`faultline agent --stdio`): [`serve`] answers one coordinator per
//! process; [`port`] is the one target it opened, [`stream`] a cycle's ledger records sent as
//! they happen, [`mirror`] the coordinator's history replayed to verify, `load` a performance
//! run's read load, [`reset`] its own host's link resets, `checked` what a request carries
//! held to the agent's facts, and [`peer`] whether the coordinator is still there.

mod checked;
mod load;
pub mod mirror;
pub mod peer;
mod port;
pub mod reset;
pub mod serve;
mod stream;
