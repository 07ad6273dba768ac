//! Serves arbitrary bytes as a coordinator's side of a whole agent session, with one scratch
//! file the agent may open and write: the agent answers, refuses or stops, and never panics
//! (`faultline::remote::fuzzing::session`; its corpus is replayed by the library's tests).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let target = faultline::remote::fuzzing::scratch_target().expect("the scratch target");
    let _ = faultline::remote::fuzzing::session(data, &target);
});
