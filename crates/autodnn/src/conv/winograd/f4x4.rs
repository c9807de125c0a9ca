//! `winograd_4x4`: F(4×4, 3×3), interpolation points 0, 1, −1, ½, −2, ∞. A 6×6 input tile
//! gives a 4×4 output tile with 36 products instead of 144 (4× fewer multiplications).
//!
//! The points: the usual 0, ±1, ±2, ∞ (Lavin and Gray) pair up into cheaper butterflies, but
//! replacing 2 by ½ (the reciprocal pair ½, −2, as Barabasz et al. recommend) cuts the rounding
//! error two to four times for a few more additions per transform. The constant c of the
//! normwise bound measured by `tests/winograd.rs` (random data in [−1, 1], C = 1 … 512):
//! 0, ±1, ±2: up to 8.2 (C ≤ 4), 1.5 … 3.7 for C ≥ 16; 0, ±1, ½, −2: up to 4.3, 0.7 … 1.0.

use super::simd::{axpy, Simd};
use super::Tile;

/// F(4×4, 3×3).
pub(crate) struct F4x4;

impl Tile for F4x4 {
    const NAME: &'static str = "winograd_4x4";
    const M: usize = 4;
    const A: usize = 6;
    const BT: &'static [&'static [f64]] = &[
        &[1.0, -1.5, -2.0, 1.5, 1.0, 0.0],
        &[0.0, -1.0, 0.5, 2.5, 1.0, 0.0],
        &[0.0, 1.0, -2.5, 0.5, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 0.5, -1.0, -0.5, 1.0, 0.0],
        &[0.0, 1.0, -1.5, -2.0, 1.5, 1.0],
    ];
    const G: &'static [[f64; 3]] = &[
        [1.0, 0.0, 0.0],
        [1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0],
        [-1.0 / 3.0, 1.0 / 3.0, -1.0 / 3.0],
        [-16.0 / 15.0, -8.0 / 15.0, -4.0 / 15.0],
        [1.0 / 15.0, -2.0 / 15.0, 4.0 / 15.0],
        [0.0, 0.0, 1.0],
    ];
    const AT: &'static [&'static [f64]] = &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 0.5, -2.0, 0.0],
        &[0.0, 1.0, 1.0, 0.25, 4.0, 0.0],
        &[0.0, 1.0, -1.0, 0.125, -8.0, 1.0],
    ];

    /// With a = d3 − d1 and b = d4 − d2 shared among rows.
    #[inline(always)]
    fn input_1d<S: Simd>(s: S, d: &[S::V; 8]) -> [S::V; 8] {
        let mut r = [s.zero(); 8];
        let (a, b) = (s.sub(d[3], d[1]), s.sub(d[4], d[2]));
        r[0] = axpy(s, 1.5, a, axpy(s, -2.0, d[2], s.add(d[0], d[4])));
        r[1] = axpy(s, 2.5, d[3], axpy(s, 0.5, d[2], s.sub(d[4], d[1])));
        r[2] = axpy(s, 0.5, d[3], axpy(s, -2.5, d[2], s.add(d[4], d[1])));
        r[3] = axpy(s, 2.0, a, b);
        r[4] = axpy(s, -0.5, a, b);
        r[5] = axpy(s, 1.5, b, axpy(s, -2.0, d[3], s.add(d[1], d[5])));
        r
    }

    /// Columns for ±1 pair up: even output rows take M(1) + M(−1), odd ones M(1) − M(−1).
    #[inline(always)]
    fn output_1d<S: Simd>(s: S, m: &[S::V; 8]) -> [S::V; 6] {
        let mut y = [s.zero(); 6];
        let (s1, d1) = (s.add(m[1], m[2]), s.sub(m[1], m[2]));
        y[0] = s.add(s.add(m[0], s1), s.add(m[3], m[4]));
        y[1] = axpy(s, -2.0, m[4], axpy(s, 0.5, m[3], d1));
        y[2] = axpy(s, 4.0, m[4], axpy(s, 0.25, m[3], s1));
        y[3] = s.add(axpy(s, -8.0, m[4], axpy(s, 0.125, m[3], d1)), m[5]);
        y
    }
}
