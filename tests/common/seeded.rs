//! Property runs that are the same on every machine: a fixed ChaCha seed per property (or the
//! one in `FAULTLINE_PROPTEST_SEED`, 16 hex digits, to replay or widen a search), no failure
//! files, and the seed printed with any failure.
//!
//! Also the mutations that the parser properties apply to valid documents: bit flips,
//! truncation, splices of random bytes, and copies of a range of the document onto another
//! place in it (which makes well-formed but misplaced structure, the hard case for a parser).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// The base seed; each property mixes its name in, so properties do not share a stream.
pub const BASE_SEED: u64 = 0xFA17_11E5_2026_1201;

/// Longest one case may take. Inputs are a few KiB at most, so a case that takes longer is a
/// parser going quadratic or looping, not a slow machine.
pub const CASE_LIMIT: Duration = Duration::from_secs(5);

fn base_seed() -> u64 {
    match std::env::var("FAULTLINE_PROPTEST_SEED") {
        Ok(s) => u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("FAULTLINE_PROPTEST_SEED={s:?}: expected 16 hex digits")),
        Err(_) => BASE_SEED,
    }
}

fn seed_bytes(base: u64, name: &str) -> [u8; 32] {
    // FNV-1a of the name, then SplitMix64 to fill 32 bytes: stable across Rust versions.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ base;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out
}

/// Runs `test` on `cases` values of `strategy` from the property's fixed seed. A failure (an
/// assertion, a panic inside the parser, a case slower than [`CASE_LIMIT`]) panics with the
/// shrunk input and the seed to replay it.
pub fn check<S>(name: &str, cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    let base = base_seed();
    let config = Config { cases, rng_algorithm: RngAlgorithm::ChaCha, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(base, name)));
    let result = runner.run(&strategy, |v| {
        let t = Instant::now();
        test(v)?;
        let took = t.elapsed();
        prop_assert!(took < CASE_LIMIT, "one case took {:?} (limit {:?})", took, CASE_LIMIT);
        Ok(())
    });
    if let Err(e) = result {
        panic!("property {name} failed with FAULTLINE_PROPTEST_SEED={base:016x}: {e}");
    }
}

/// One edit to a document.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// Flip bit `bit` of the byte at `at` (positions are taken modulo the length).
    Flip { at: usize, bit: u8 },
    /// Keep only the first `keep` bytes (modulo length + 1).
    Truncate { keep: usize },
    /// Replace `len` bytes at `at` with `with`.
    Splice { at: usize, len: usize, with: Vec<u8> },
    /// Copy `len` bytes from `from` over the bytes at `to`, inserting them.
    Copy { from: usize, len: usize, to: usize },
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        1 => any::<usize>().prop_map(|keep| Mutation::Truncate { keep }),
        2 => (any::<usize>(), 0usize..16, proptest::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(at, len, with)| Mutation::Splice { at, len, with }),
        1 => (any::<usize>(), 1usize..64, any::<usize>()).prop_map(|(from, len, to)| Mutation::Copy { from, len, to }),
    ]
}

/// Up to `n` mutations.
pub fn mutations(n: usize) -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec(mutation(), 1..=n)
}

/// `doc` with `muts` applied in order.
pub fn mutate(doc: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut d = doc.to_vec();
    for m in muts {
        match m {
            Mutation::Flip { at, bit } => {
                if !d.is_empty() {
                    let i = at % d.len();
                    d[i] ^= 1 << bit;
                }
            }
            Mutation::Truncate { keep } => d.truncate(keep % (d.len() + 1)),
            Mutation::Splice { at, len, with } => {
                let at = at % (d.len() + 1);
                let end = (at + len).min(d.len());
                d.splice(at..end, with.iter().copied());
            }
            Mutation::Copy { from, len, to } => {
                if !d.is_empty() {
                    let from = from % d.len();
                    let end = (from + len).min(d.len());
                    let piece: Vec<u8> = d[from..end].to_vec();
                    let to = to % (d.len() + 1);
                    d.splice(to..to, piece);
                }
            }
        }
    }
    d
}
