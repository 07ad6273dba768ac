//! `faultline emulate quarch|lcus|numato --pty | --tcp ADDR`: one of the controller emulators
//! (`faultline_fixtures::emu`) on its own, with a simulated drive behind it, for bringing up
//! lab scripts (quarchpy, a relay board's own tool) without hardware (`serial.rs`). Prints
//! where it listens, then logs each command and reply on stderr until SIGINT or SIGTERM.
//! `emulate nbd` serves the simulated drive itself over NBD (`nbd.rs`). Both take their
//! arguments from `args.rs` and their stop and log from `live.rs`; neither imports the other or
//! this dispatcher.

mod args;
mod live;
mod nbd;
mod serial;

use crate::exit::Exit;
use anyhow::Result;
pub use args::EmulateArgs;

pub fn cmd_emulate(a: EmulateArgs) -> Result<Exit> {
    if matches!(a.device, args::Device::Nbd) {
        return nbd::cmd_emulate_nbd(a);
    }
    serial::cmd_emulate_serial(a)
}
