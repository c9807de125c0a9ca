//! Deterministic pseudo-random integer-valued test data, benchdnn style: small integers keep
//! every sum of products exact in f32, so a correct algorithm matches the f64 reference
//! exactly.

use crate::error::{CliError, CliResult};

/// Seed of the input tensor's data.
pub const X_SEED: u64 = 0x5eed_0001;
/// Seed of the filter's data.
pub const W_SEED: u64 = 0x5eed_0002;
/// Seed of generated residual tensors.
pub const Z_SEED: u64 = 0x5eed_0003;
/// Seed of the output gradient dy of the backward directions.
pub const DY_SEED: u64 = 0x5eed_0004;
/// Seed of the prior contents of a backward output (what beta scales).
pub const PRIOR_SEED: u64 = 0x5eed_0005;

/// SplitMix64 (Steele, Lea and Flood): tiny, fast, and good enough for test data.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An integer in -4..=4, as f32.
    pub fn small_int(&mut self) -> f32 {
        ((self.next_u64() >> 32) % 9) as f32 - 4.0
    }
}

/// `len` values from [`SplitMix64::small_int`] seeded with `seed`.
///
/// # Errors
/// A failure naming `what` when the buffer cannot be allocated.
pub fn small_ints(len: usize, seed: u64, what: &str) -> CliResult<Vec<f32>> {
    let mut v = alloc(len, what)?;
    let mut g = SplitMix64::new(seed);
    v.extend((0..len).map(|_| g.small_int()));
    Ok(v)
}

/// `len` copies of `value`.
///
/// # Errors
/// A failure naming `what` when the buffer cannot be allocated.
pub fn filled(len: usize, value: f32, what: &str) -> CliResult<Vec<f32>> {
    let mut v = alloc(len, what)?;
    v.resize(len, value);
    Ok(v)
}

fn alloc(len: usize, what: &str) -> CliResult<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| {
        CliError::fail(format!(
            "out of memory: {} bytes for {what}: {e}",
            len.saturating_mul(4)
        ))
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let a = small_ints(1000, 7, "a").unwrap();
        let b = small_ints(1000, 7, "b").unwrap();
        assert_eq!(a, b);
        assert!(a
            .iter()
            .all(|v| (-4.0..=4.0).contains(v) && v.fract() == 0.0));
        // Every value of the range occurs.
        for i in -4..=4 {
            assert!(a.contains(&(i as f32)), "{i} missing");
        }
        assert_ne!(a, small_ints(1000, 8, "c").unwrap());
    }
}
