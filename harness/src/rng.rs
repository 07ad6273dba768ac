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

/// wyrand's increment, and the constant its state is xored with before the multiply.
const WY_INC: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;
/// Outputs [`WyRand::fill_le`] computes side by side.
const FILL_LANES: usize = 8;

impl WyRand {
    /// A per-cycle stream of `seed` (one per `salt`): the same for a cycle whether or not the
    /// harness died before it.
    pub fn for_cycle(seed: u64, salt: u64, cycle: u32) -> Self {
        let mut r = WyRand::new(seed ^ salt);
        WyRand::new(r.next_u64() ^ u64::from(cycle).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub fn new(seed: u64) -> Self {
        WyRand(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(WY_INC);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ WY_XOR) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Writes the next `out.len() / 8` outputs into `out`, little-endian, 8 bytes each:
    /// exactly what as many [`WyRand::next_u64`] calls give (a test compares the two), and
    /// the generator ends where they would leave it. `out.len()` is a multiple of 8.
    ///
    /// The payload of every sector is made this way, so it is the writer's and the
    /// verifier's main cost after the checksum. wyrand's state only counts up, so output k
    /// depends on k alone and [`FILL_LANES`] outputs are computed side by side: the 64×64 to
    /// 128-bit product is built from four 32×32-bit products, which vectorise (AVX-512 or
    /// AVX2, picked at run time by `multiversion`; no `unsafe`). Measured in isolation on
    /// the project's 2-core AMD EPYC machine: 448-byte payloads in 11.5 ns instead of 32 to
    /// 44 ns one output at a time.
    pub fn fill_le(&mut self, out: &mut [u8]) {
        assert!(out.len().is_multiple_of(8), "wyrand fills whole 8-byte words, not {} bytes", out.len());
        fill_lanes(self.0, out);
        self.0 = self.0.wrapping_add(WY_INC.wrapping_mul((out.len() / 8) as u64));
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift (bias below 2^-32 for the sizes used).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// wyrand's output for the state `s` (after its increment), from 32-bit halves: the same
/// value as the `u128` product in [`WyRand::next_u64`], written so that it vectorises.
#[inline(always)]
fn wy_mix(s: u64) -> u64 {
    const LO: u64 = 0xffff_ffff;
    let (a, b) = (s, s ^ WY_XOR);
    let (al, ah, bl, bh) = (a & LO, a >> 32, b & LO, b >> 32);
    let (ll, lh, hl, hh) = (al * bl, al * bh, ah * bl, ah * bh);
    // Neither sum overflows: `mid` is below 3 * 2^32, and `hi` is the product's high half,
    // which is below 2^64.
    let mid = (ll >> 32) + (lh & LO) + (hl & LO);
    let hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    let lo = (mid << 32) | (ll & LO);
    hi ^ lo
}

/// [`WyRand::fill_le`] from state `state`, [`FILL_LANES`] outputs at a time.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl", "x86_64+avx2"))]
fn fill_lanes(state: u64, out: &mut [u8]) {
    let mut s = [0u64; FILL_LANES];
    for (l, s) in s.iter_mut().enumerate() {
        *s = state.wrapping_add(WY_INC.wrapping_mul(l as u64 + 1));
    }
    let step = WY_INC.wrapping_mul(FILL_LANES as u64);
    let mut chunks = out.chunks_exact_mut(8 * FILL_LANES);
    for chunk in &mut chunks {
        let mut v = [0u64; FILL_LANES];
        for l in 0..FILL_LANES {
            v[l] = wy_mix(s[l]);
            s[l] = s[l].wrapping_add(step);
        }
        for (w, v) in chunk.chunks_exact_mut(8).zip(v) {
            w.copy_from_slice(&v.to_le_bytes());
        }
    }
    for (w, s) in chunks.into_remainder().chunks_exact_mut(8).zip(s) {
        w.copy_from_slice(&wy_mix(s).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `fill_le` is `next_u64` over and over, whatever the length and the state, and
        /// leaves the generator where `next_u64` would.
        #[test]
        fn fill_le_is_next_u64_in_order(seed in any::<u64>(), words in 0usize..200, then in 0usize..3) {
            let (mut one, mut many) = (WyRand::new(seed), WyRand::new(seed));
            let want: Vec<u8> = (0..words).flat_map(|_| one.next_u64().to_le_bytes()).collect();
            let mut got = vec![0u8; 8 * words];
            many.fill_le(&mut got);
            prop_assert_eq!(&got, &want, "seed {:#x}, {} words", seed, words);
            for _ in 0..then {
                prop_assert_eq!(many.next_u64(), one.next_u64(), "seed {:#x}: the state after the fill", seed);
            }
        }
    }

    /// The state's wrap-around and the carries of the 32-bit halves, at their edges.
    #[test]
    fn wy_mix_equals_the_128_bit_product_at_the_edges() {
        for s in [0, 1, u64::MAX, u64::MAX - 1, 0xffff_ffff, 1 << 32, WY_XOR, !WY_XOR, WY_XOR ^ 0xffff_ffff, 0x8000_0000_0000_0000] {
            let t = (s as u128).wrapping_mul((s ^ WY_XOR) as u128);
            assert_eq!(wy_mix(s), ((t >> 64) ^ t) as u64, "state {s:#x}");
        }
    }
}
