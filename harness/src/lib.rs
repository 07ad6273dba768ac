pub mod format;
pub mod rng;
pub mod workload;
