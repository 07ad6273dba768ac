//! Reads arbitrary bytes as the agent protocol's frames (docs/PROTOCOL.md): reading never
//! panics, and a frame read writes and reads back as itself.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| faultline::remote::fuzzing::frames(data));
