//! One module per subcommand.

pub mod agent;
pub mod bench;
pub mod controller;
pub mod decode;
pub mod emulate;
pub mod extras;
pub mod lab;
pub mod report;
pub mod run;
pub mod selftest;
pub mod verify;
pub mod watch;
pub mod write;
