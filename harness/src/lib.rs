pub mod format;
pub mod ledger;
pub mod rng;
pub mod verify;
pub mod workload;
pub mod writer;
