pub mod format;
pub mod ledger;
pub mod rng;
pub mod run;
pub mod soak;
pub mod verify;
pub mod workload;
pub mod writer;
