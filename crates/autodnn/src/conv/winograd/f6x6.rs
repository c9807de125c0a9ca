//! `winograd_6x6`: F(6×6, 3×3), interpolation points 0, ±1, ±2, ±½, ∞ (the set NNPACK and
//! ncnn use; with reciprocal pairs the coefficients stay within [1/32, 32]). An 8×8 input
//! tile gives a 6×6 output tile with 64 products instead of 324 (5.06× fewer
//! multiplications), at the price of a rounding error about ten times that of F(4×4, 3×3).

use super::simd::{axpy, scale, Simd};
use super::Tile;

/// F(6×6, 3×3).
pub(crate) struct F6x6;

impl Tile for F6x6 {
    const NAME: &'static str = "winograd_6x6";
    const M: usize = 6;
    const A: usize = 8;
    const BT: &'static [&'static [f64]] = &[
        &[-1.0, 0.0, 5.25, 0.0, -5.25, 0.0, 1.0, 0.0],
        &[0.0, 1.0, 1.0, -4.25, -4.25, 1.0, 1.0, 0.0],
        &[0.0, -1.0, 1.0, 4.25, -4.25, -1.0, 1.0, 0.0],
        &[0.0, 0.5, 0.25, -2.5, -1.25, 2.0, 1.0, 0.0],
        &[0.0, -0.5, 0.25, 2.5, -1.25, -2.0, 1.0, 0.0],
        &[0.0, 2.0, 4.0, -2.5, -5.0, 0.5, 1.0, 0.0],
        &[0.0, -2.0, 4.0, 2.5, -5.0, -0.5, 1.0, 0.0],
        &[0.0, -1.0, 0.0, 5.25, 0.0, -5.25, 0.0, 1.0],
    ];
    const G: &'static [[f64; 3]] = &[
        [-1.0, 0.0, 0.0],
        [-2.0 / 9.0, -2.0 / 9.0, -2.0 / 9.0],
        [-2.0 / 9.0, 2.0 / 9.0, -2.0 / 9.0],
        [1.0 / 90.0, 1.0 / 45.0, 2.0 / 45.0],
        [1.0 / 90.0, -1.0 / 45.0, 2.0 / 45.0],
        [32.0 / 45.0, 16.0 / 45.0, 8.0 / 45.0],
        [32.0 / 45.0, -16.0 / 45.0, 8.0 / 45.0],
        [0.0, 0.0, 1.0],
    ];
    const AT: &'static [&'static [f64]] = &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 0.0],
        &[0.0, 1.0, 1.0, 4.0, 4.0, 0.25, 0.25, 0.0],
        &[0.0, 1.0, -1.0, 8.0, -8.0, 0.125, -0.125, 0.0],
        &[0.0, 1.0, 1.0, 16.0, 16.0, 0.0625, 0.0625, 0.0],
        &[0.0, 1.0, -1.0, 32.0, -32.0, 0.03125, -0.03125, 1.0],
    ];

    /// Rows for ±p share their even and odd parts: r(+p) = E + O, r(−p) = E − O.
    #[inline(always)]
    fn input_1d<S: Simd>(s: S, d: &[S::V; 8]) -> [S::V; 8] {
        let mut r = [s.zero(); 8];
        r[0] = axpy(s, 5.25, s.sub(d[2], d[4]), s.sub(d[6], d[0]));
        let e = axpy(s, -4.25, d[4], s.add(d[2], d[6]));
        let o = axpy(s, -4.25, d[3], s.add(d[1], d[5]));
        r[1] = s.add(e, o);
        r[2] = s.sub(e, o);
        let e = axpy(s, 0.25, d[2], axpy(s, -1.25, d[4], d[6]));
        let o = axpy(s, 0.5, d[1], axpy(s, -2.5, d[3], s.add(d[5], d[5])));
        r[3] = s.add(e, o);
        r[4] = s.sub(e, o);
        let e = axpy(s, 4.0, d[2], axpy(s, -5.0, d[4], d[6]));
        let o = axpy(s, 2.0, d[1], axpy(s, -2.5, d[3], scale(s, 0.5, d[5])));
        r[5] = s.add(e, o);
        r[6] = s.sub(e, o);
        r[7] = axpy(s, 5.25, s.sub(d[3], d[5]), s.sub(d[7], d[1]));
        r
    }

    /// Columns for ±p: even output rows take M(+p) + M(−p), odd ones M(+p) − M(−p).
    #[inline(always)]
    fn output_1d<S: Simd>(s: S, m: &[S::V; 8]) -> [S::V; 6] {
        let (s1, d1) = (s.add(m[1], m[2]), s.sub(m[1], m[2]));
        let (s2, d2) = (s.add(m[3], m[4]), s.sub(m[3], m[4]));
        let (s3, d3) = (s.add(m[5], m[6]), s.sub(m[5], m[6]));
        [
            s.add(s.add(m[0], s1), s.add(s2, s3)),
            axpy(s, 0.5, d3, axpy(s, 2.0, d2, d1)),
            axpy(s, 0.25, s3, axpy(s, 4.0, s2, s1)),
            axpy(s, 0.125, d3, axpy(s, 8.0, d2, d1)),
            axpy(s, 0.0625, s3, axpy(s, 16.0, s2, s1)),
            s.add(axpy(s, 0.03125, d3, axpy(s, 32.0, d2, d1)), m[7]),
        ]
    }
}
