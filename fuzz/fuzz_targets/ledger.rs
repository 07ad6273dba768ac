//! Parses arbitrary bytes as a ledger image. Parsing must never panic, and when it succeeds
//! the valid prefix and the torn tail must account for every byte.

#![no_main]

use faultline::ledger::parse_ledger;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok((records, valid, torn)) = parse_ledger(Path::new("fuzz.fl"), data) {
        assert_eq!(
            valid + torn,
            data.len() as u64,
            "valid length {valid} + torn tail {torn} != input length {}",
            data.len()
        );
        let mut last = None;
        for (offset, _) in &records {
            assert!(
                *offset < valid,
                "record at {offset} lies past the valid length {valid}"
            );
            assert!(
                last.map_or(true, |l| l < *offset),
                "record offsets are not increasing"
            );
            last = Some(*offset);
        }
    }
});
