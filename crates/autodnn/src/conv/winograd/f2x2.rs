//! `winograd_2x2`: F(2×2, 3×3), interpolation points 0, 1, −1, ∞. A 4×4 input tile gives a
//! 2×2 output tile with 16 products instead of 36 (2.25× fewer multiplications). Every
//! transform coefficient is 0, ±1 or ±½, so on small integer data the result is exact; the
//! rounding error on real data is about that of the direct definition.

use super::simd::Simd;
use super::Tile;

/// F(2×2, 3×3).
pub(crate) struct F2x2;

impl Tile for F2x2 {
    const NAME: &'static str = "winograd_2x2";
    const M: usize = 2;
    const A: usize = 4;
    const BT: &'static [&'static [f64]] = &[
        &[-1.0, 0.0, 1.0, 0.0],
        &[0.0, 1.0, 1.0, 0.0],
        &[0.0, -1.0, 1.0, 0.0],
        &[0.0, -1.0, 0.0, 1.0],
    ];
    const G: &'static [[f64; 3]] = &[
        [-1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];
    const AT: &'static [&'static [f64]] = &[&[1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, 1.0]];

    #[inline(always)]
    fn input_1d<S: Simd>(s: S, d: &[S::V; 8]) -> [S::V; 8] {
        let mut r = [s.zero(); 8];
        r[0] = s.sub(d[2], d[0]);
        r[1] = s.add(d[1], d[2]);
        r[2] = s.sub(d[2], d[1]);
        r[3] = s.sub(d[3], d[1]);
        r
    }

    #[inline(always)]
    fn output_1d<S: Simd>(s: S, m: &[S::V; 8]) -> [S::V; 6] {
        let mut y = [s.zero(); 6];
        y[0] = s.add(s.add(m[0], m[1]), m[2]);
        y[1] = s.add(s.sub(m[1], m[2]), m[3]);
        y
    }
}
