//! Stable pseudo-random functions.
//!
//! Hand-written on purpose: the workload's address mapping and the payload bytes are part of
//! the on-disk contract (a run written by one build is verified by another), so they must
//! never change with a dependency's version. `rand` documents that its generators' streams
//! may change between releases; SplitMix64 and wyrand below are fixed, public algorithms.

/// SplitMix64 finaliser: a bijective 64-bit mixer.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hashes a tuple of words into one (order-sensitive).
#[inline]
pub fn hash_words(words: &[u64]) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for &w in words {
        h = mix64(h ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15));
    }
    h
}

/// wyrand: a fast generator for payload bytes and simulation choices.
#[derive(Clone, Debug)]
pub struct WyRand(u64);

impl WyRand {
    pub fn new(seed: u64) -> Self {
        WyRand(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (bias below 2^-32 for the sizes used).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}
