//! `winograd_4x4`: F(4×4, 3×3), interpolation points 0, ±1, ±2, ∞ (Lavin and Gray's choice:
//! the smallest coefficients, so the smallest rounding error, among F(4, 3) point sets). A 6×6
//! input tile gives a 4×4 output tile with 36 products instead of 144 (4× fewer
//! multiplications).

use super::winograd::Tile;
use super::winograd_simd::{axpy, scale, Simd};

/// F(4×4, 3×3).
pub(crate) struct F4x4;

impl Tile for F4x4 {
    const NAME: &'static str = "winograd_4x4";
    const M: usize = 4;
    const A: usize = 6;
    const BT: &'static [&'static [f64]] = &[
        &[4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        &[0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        &[0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        &[0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ];
    const G: &'static [[f64; 3]] = &[
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];
    const AT: &'static [&'static [f64]] = &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        &[0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        &[0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ];

    /// Rows for ±p share their even and odd parts: r(+p) = E + O, r(−p) = E − O.
    #[inline(always)]
    fn input_1d<S: Simd>(s: S, d: &[S::V; 8]) -> [S::V; 8] {
        let mut r = [s.zero(); 8];
        r[0] = axpy(s, 4.0, d[0], axpy(s, -5.0, d[2], d[4]));
        let (e, o) = (axpy(s, -4.0, d[2], d[4]), axpy(s, -4.0, d[1], d[3]));
        r[1] = s.add(e, o);
        r[2] = s.sub(e, o);
        let (e, o) = (s.sub(d[4], d[2]), scale(s, 2.0, s.sub(d[3], d[1])));
        r[3] = s.add(e, o);
        r[4] = s.sub(e, o);
        r[5] = axpy(s, 4.0, d[1], axpy(s, -5.0, d[3], d[5]));
        r
    }

    /// Columns for ±p: even output rows take M(+p) + M(−p), odd ones M(+p) − M(−p).
    #[inline(always)]
    fn output_1d<S: Simd>(s: S, m: &[S::V; 8]) -> [S::V; 6] {
        let mut y = [s.zero(); 6];
        let (s1, d1) = (s.add(m[1], m[2]), s.sub(m[1], m[2]));
        let (s2, d2) = (s.add(m[3], m[4]), s.sub(m[3], m[4]));
        y[0] = s.add(s.add(m[0], s1), s2);
        y[1] = axpy(s, 2.0, d2, d1);
        y[2] = axpy(s, 4.0, s2, s1);
        y[3] = s.add(axpy(s, 8.0, d2, d1), m[5]);
        y
    }
}
