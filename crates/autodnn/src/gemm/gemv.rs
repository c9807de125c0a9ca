//! Matrix-vector products: the GEMMs with one row or one column of C whose matrix operand
//! runs along the depth (a classifier's `x · Wᵀ` at batch 1, `W · x`).
//!
//! The engine would compute such a product as a one-column tile of its 32 × 14 micro-kernel
//! (1/14 of its work useful) after packing the whole matrix, which it reads only once: the
//! product is bound by reading the matrix. Here each output is a dot product of a contiguous
//! row of the matrix with the contiguous vector, four rows at a time (each row its own
//! stream, the vector's loads shared), in 16 lanes of partial sums added in a fixed order.
//! Products and sums are separate roundings (no fused multiply-add), so every instruction
//! set gives the same bits, and each output is one thread's dot product whatever the split:
//! 1 and 2 threads agree too.

use std::ops::Range;

use super::epilogue::FrameEpilogue;
use super::kernels::KernelSet;
use super::loops::OutMatrix;
use crate::error::Result;
use crate::runtime::parallel::for_each_with;
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// Lanes of partial sums per row.
const LANES: usize = 16;
/// Rows whose dot products run together.
const ROWS: usize = 4;
/// Multiply-adds below which the product stays on the calling thread.
const PARALLEL_MIN_FMAS: usize = 1 << 18;

/// A product `y = alpha·M·v + beta·y` then the epilogue, where row `i` of `M` is
/// `m[i·ld .. i·ld + k]` and `y` is the column of C given by `out` (`len × 1`).
pub(crate) struct Gemv<'a> {
    pub m: &'a [f32],
    pub ld: usize,
    pub k: usize,
    pub v: &'a [f32],
    pub alpha: f32,
    pub beta: f32,
    pub epilogue: FrameEpilogue<'a>,
}

/// Runs `g` into `out` (`len × 1`, its rows the outputs) on the context's threads.
///
/// # Errors
/// Out of memory for the threads' bookkeeping (the output is then partly written).
pub(crate) fn run(
    ks: &KernelSet,
    ctx: &ExecContext<'_>,
    g: &Gemv<'_>,
    out: &OutMatrix<'_>,
) -> Result<()> {
    let len = out.rows();
    assert!(out.cols() == 1 && g.v.len() >= g.k);
    assert!(len == 0 || (len - 1) * g.ld + g.k <= g.m.len());
    let parts = if len.saturating_mul(g.k) < PARALLEL_MIN_FMAS {
        1
    } else {
        ctx.threads.clamp(1, len.div_ceil(ROWS))
    };
    // Parts of whole groups of rows.
    let per = len.div_ceil(parts).div_ceil(ROWS) * ROWS;
    let features = ctx.features;
    for_each_with(
        ctx,
        len.div_ceil(per.max(1)),
        || Ok(()),
        |_, p| {
            let rows = p * per..(p * per + per).min(len);
            // SAFETY: the parts' row ranges are disjoint, each run by one thread.
            let mut tile = unsafe { out.tile(rows.start, 0, rows.len(), 1) };
            part(features, g, rows.clone(), tile.ptr, tile.rs);
            if !g.epilogue.is_identity() {
                (ks.epilogue)(&g.epilogue, &mut tile, rows.start, 0);
            }
        },
    )
}

multiversion! {
    /// Outputs `rows` of `g`, output `i` written at `y[(i − rows.start)·ys]`; `y` points at
    /// output `rows.start` of a tile of this thread's alone (checked to be inside C).
    fn part(g: &Gemv<'_>, rows: Range<usize>, y: *mut f32, ys: usize) {
        let k = g.k;
        let v = &g.v[..k];
        let store = |i: usize, dot: f32| {
            let value = if g.beta == 0.0 {
                g.alpha * dot
            } else {
                // SAFETY: output i of the tile (see the function's contract).
                g.alpha * dot + g.beta * unsafe { *y.add((i - rows.start) * ys) }
            };
            // SAFETY: as above.
            unsafe { *y.add((i - rows.start) * ys) = value };
        };
        let mut i = rows.start;
        while i + ROWS <= rows.end {
            let row = |q: usize| &g.m[(i + q) * g.ld..][..k];
            let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
            let (mut a0, mut a1, mut a2, mut a3) = ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
            let chunks = v
                .chunks_exact(LANES)
                .zip(r0.chunks_exact(LANES))
                .zip(r1.chunks_exact(LANES))
                .zip(r2.chunks_exact(LANES))
                .zip(r3.chunks_exact(LANES));
            for ((((x, w0), w1), w2), w3) in chunks {
                for l in 0..LANES {
                    a0[l] += w0[l] * x[l];
                    a1[l] += w1[l] * x[l];
                    a2[l] += w2[l] * x[l];
                    a3[l] += w3[l] * x[l];
                }
            }
            let p = k / LANES * LANES;
            for (q, (a, r)) in [(a0, r0), (a1, r1), (a2, r2), (a3, r3)].iter().enumerate() {
                store(i + q, finish(a, &r[p..], &v[p..]));
            }
            i += ROWS;
        }
        while i < rows.end {
            let r = &g.m[i * g.ld..][..k];
            let mut a = [0.0f32; LANES];
            for (x, w) in v.chunks_exact(LANES).zip(r.chunks_exact(LANES)) {
                for l in 0..LANES {
                    a[l] += w[l] * x[l];
                }
            }
            let p = k / LANES * LANES;
            store(i, finish(&a, &r[p..], &v[p..]));
            i += 1;
        }
    }
}

/// The lanes summed pairwise (a fixed tree), then the tail's products in order.
#[inline(always)]
fn finish(acc: &[f32; LANES], r: &[f32], v: &[f32]) -> f32 {
    let mut s = *acc;
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            s[l] += s[l + w];
        }
        w /= 2;
    }
    let mut dot = s[0];
    for (a, b) in r.iter().zip(v) {
        dot += a * b;
    }
    dot
}
