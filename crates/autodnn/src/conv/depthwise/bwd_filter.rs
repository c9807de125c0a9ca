//! `depthwise` backward filter: dw\[k, 0, r, s\] = Σ over n, p, q of
//! dy\[n, k, p, q\] · x\[n, k / (K/g), p·sh − pt + r·dh, q·sw − pl + s·dw\] for one input
//! channel per group, on images whose rows are unit-stride (NCHW-like).
//!
//! How, on small images (at least 16 output channels, at most 784 output pixels with
//! AVX-512, 196 with AVX2, 64 without): 16 output channels per work item, one per vector
//! lane; per image, their zero-padded input window and dy are transposed channels-innermost
//! into a scratch of at most 115 KiB (in registers, 16 or 8 pixels at a time), and every
//! tap's product is a whole vector ([`block`]). Otherwise:
//! one output channel per work item; for each output row and kernel tap, the row's dy
//! and the tap's x run are multiplied in [`LANES`]-wide chunks into one accumulator vector
//! per tap (R·S ≤ [`MAX_TAPS`] vectors), summed across lanes at the end. The loops are
//! written once over fixed-width lane arrays and compiled inside a `#[target_feature]`
//! entry per instruction set (AVX-512, AVX2 + FMA, portable), where they vectorise.
//!
//! - **Workspace:** none (two small planes per thread, allocated fallibly, for stride 1). **Declines:** more than one input channel per group, channels-last
//!   rows, kernels of more than [`MAX_TAPS`] taps.
//! - **Deterministic:** each filter element is summed by one thread in a fixed order
//!   (lane by lane along the rows, lanes added in order), whatever the thread count.

use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::Result;
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardFilter, ConvBwdFilterInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::parallel::{for_each_with, SharedOut};
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};

/// Lanes of one accumulator.
const LANES: usize = 16;

/// A transposition of a run of pixels of [`LANES`] channels into channels-innermost order
/// (`transpose::run`'s contract: `dst[q·LANES + l] = src[start + off[l] + q]`).
type Transpose = unsafe fn(&[f32], usize, usize, &[usize; LANES], usize, &mut [f32]);

/// Most kernel taps (R·S).
pub(crate) const MAX_TAPS: usize = 25;

/// The depthwise backward-filter algorithm.
pub(crate) struct DepthwiseBwdFilter;

pub(crate) static DEPTHWISE_BWD_FILTER: DepthwiseBwdFilter = DepthwiseBwdFilter;

/// a\[l\] += ys\[i\] · xs\[i\] for i ≡ l (mod LANES), in order.
#[inline(always)]
fn lanes_unit(a: &mut [f32; LANES], ys: &[f32], xs: &[f32]) {
    let (yc, yr) = ys.as_chunks::<LANES>();
    let (xc, xr) = xs.as_chunks::<LANES>();
    for (yv, xv) in yc.iter().zip(xc) {
        for l in 0..LANES {
            a[l] += yv[l] * xv[l];
        }
    }
    for (l, (y, x)) in yr.iter().zip(xr).enumerate() {
        a[l] += y * x;
    }
}

/// a\[l\] += ys\[i\] · xs\[2i\] for i ≡ l (mod LANES), in order (`xs` holds 2·len − 1).
#[inline(always)]
fn lanes_two(a: &mut [f32; LANES], ys: &[f32], xs: &[f32]) {
    let (yc, yr) = ys.as_chunks::<LANES>();
    let full = yc.len();
    let (xc, _) = xs.as_chunks::<{ 2 * LANES }>();
    for (yv, xv) in yc.iter().zip(xc) {
        for l in 0..LANES {
            a[l] += yv[l] * xv[2 * l];
        }
    }
    // The last full chunk of y may lack its x chunk's final odd element: done here.
    for i in xc.len().min(full) * LANES..ys.len() {
        a[i % LANES] += ys[i] * xs[2 * i];
    }
    let _ = yr;
}

/// The planes of the flattened kernel: (rows of an x phase plane, width of every plane).
fn planes(p: &ConvProblem) -> (usize, usize) {
    let [sh, sw] = p.conv().stride();
    let [_, _, oh, ow] = p.y().dims();
    (oh + (p.w().r() - 1) / sh + 1, ow + (p.w().s() - 1) / sw)
}

/// Scratch elements of the flattened kernel (no dilation): the sh·sw phase planes of x,
/// zero-padded, and a dy plane of the same width (zero past each row); 0 for dilated
/// problems, which take the row kernel.
fn planes_len(p: &ConvProblem) -> usize {
    let c = p.conv();
    if c.dilation() != [1, 1] {
        return 0;
    }
    let [sh, sw] = c.stride();
    let (rows, wp) = planes(p);
    // Saturating: a size this large is declined ([`planes_fit`]).
    sh.saturating_mul(sw)
        .saturating_mul(rows)
        .saturating_add(p.y().h())
        .saturating_mul(wp)
}

/// Planes per thread of at most four times an image's x and dy planes (and 64 Ki elements
/// for tiny ones): large strides over small images make mostly empty phases (a stride of
/// 10^5 × 10^5 asked for 214 GB on a 2-pixel image), better served by `gemm` or `direct`.
fn planes_fit(p: &ConvProblem) -> std::result::Result<(), String> {
    let [_, _, h, w] = p.x().dims();
    let [_, _, oh, ow] = p.y().dims();
    let bound = (h * w + oh * ow).saturating_mul(4).saturating_add(1 << 16);
    let len = planes_len(p);
    if len > bound {
        return Err(format!(
            "its zero-padded stride phases would take {len} elements per thread, more than \
             four image planes"
        ));
    }
    Ok(())
}

/// No dilation: per image, x is split into its sh·sw stride phases, each copied into a
/// zero-padded plane (phase (a, b) holds x\[i·sh + a − pt, j·sw + b − pl\] at (i, j)), and dy
/// into a plane of the same width, zero past each row; tap (u, v) is then one dot product of
/// the dy plane and phase (u mod sh, v mod sw) flattened, shifted by
/// (u / sh)·width + v / sw. All taps advance together, one accumulator vector each.
#[inline(always)]
fn flattened<const FMA: bool>(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k: usize,
    scratch: &mut [f32],
) -> [f32; MAX_TAPS] {
    let (xd, yd) = (p.x(), p.y());
    let [n, _, h, wi] = xd.dims();
    let [_, _, oh, ow] = yd.dims();
    let (r, s) = (p.w().r(), p.w().s());
    let [sh, sw] = p.conv().stride();
    let c = k / p.k_per_group();
    let pad = p.conv().padding();
    let (rows, wp) = planes(p);
    let plane = rows * wp;
    let (xp, rest) = scratch.split_at_mut(sh * sw * plane);
    let dp = &mut rest[..oh * wp];
    let taps = r * s;
    let mut offs = [0usize; MAX_TAPS];
    for (t, o) in offs.iter_mut().enumerate().take(taps) {
        let (u, v) = (t / s, t % s);
        *o = ((u % sh) * sw + v % sw) * plane + (u / sh) * wp + v / sw;
    }
    let mut acc = [[0.0f32; LANES]; MAX_TAPS];
    let xs3 = xd.strides()[3];
    for b in 0..n {
        for (ph, pl_) in xp.chunks_exact_mut(plane).enumerate() {
            let (a, bb) = (ph / sw, ph % sw);
            // Columns j whose x column j·sw + bb − pl is inside.
            let shift = bb as i64 - pad.left;
            let swi = sw as i64;
            let (j_lo, j_hi) = crate::conv::inside_columns(shift, swi, wi, wp);
            for (i, row) in pl_.chunks_exact_mut(wp).enumerate() {
                let ih = (i * sh + a) as i64 - pad.top;
                if ih < 0 || ih >= h as i64 || j_lo >= j_hi {
                    row.fill(0.0);
                    continue;
                }
                // Zeros only where no column of x lands.
                row[..j_lo].fill(0.0);
                row[j_hi..].fill(0.0);
                let base = xd.offset(b, c, ih as usize, 0);
                let first = base + ((j_lo as i64 * swi + shift) as usize) * xs3;
                let step = sw.saturating_mul(xs3); // a lone column never steps
                let len = j_hi - j_lo;
                if b + 1 < n && bb == 0 {
                    // The next image's run, for its copy after this image's products (once
                    // per row: the other column phases read the same lines).
                    let next = first + xd.strides()[0];
                    crate::simd::fetch_to_l2(
                        x.get(next..next + (len - 1) * step + 1).unwrap_or(&[]),
                    );
                }
                if step == 1 {
                    row[j_lo..j_hi].copy_from_slice(&x[first..first + len]);
                } else if step == 2 {
                    every_other(&mut row[j_lo..j_hi], &x[first..first + 2 * len - 1]);
                } else {
                    for (q, d) in row[j_lo..j_hi].iter_mut().enumerate() {
                        *d = x[first + q * step];
                    }
                }
            }
        }
        for (i, row) in dp.chunks_exact_mut(wp).enumerate() {
            let src = yd.offset(b, k, i, 0);
            if b + 1 < n {
                let next = src + yd.strides()[0];
                crate::simd::fetch_to_l2(dy.get(next..next + ow).unwrap_or(&[]));
            }
            row[..ow].copy_from_slice(&dy[src..src + ow]);
            row[ow..].fill(0.0);
        }
        let len = oh * wp;
        let full = len / LANES * LANES;
        match taps {
            9 => dots::<9, FMA>(&mut acc, &dp[..full], xp, &offs),
            4 => dots::<4, FMA>(&mut acc, &dp[..full], xp, &offs),
            25 => dots::<25, FMA>(&mut acc, &dp[..full], xp, &offs),
            _ => {
                for t0 in (0..full).step_by(LANES) {
                    let dv: &[f32; LANES] = dp[t0..].first_chunk().unwrap_or(&[0.0; LANES]);
                    for (a, &o) in acc.iter_mut().zip(&offs).take(taps) {
                        let xv: &[f32; LANES] = xp[t0 + o..].first_chunk().unwrap_or(&[0.0; LANES]);
                        for l in 0..LANES {
                            a[l] += dv[l] * xv[l];
                        }
                    }
                }
            }
        }
        for t in full..len {
            for (a, &o) in acc.iter_mut().zip(&offs).take(taps) {
                a[t - full] += dp[t] * xp[t + o];
            }
        }
    }
    lane_sums(&acc)
}

/// For every tap t < T at once: acc\[t\]\[l\] += dp\[i\] · xp\[i + offs\[t\]\] for i ≡ l (mod
/// LANES) in `dp` (whole chunks), in order. The tap count a compile-time constant, so the T
/// accumulators stay in vector registers through the loop (with a run-time count they went
/// to memory and back at every chunk: 14 GFLOP/s on MobileNet's 14x14 layers).
#[inline(always)]
fn dots<const T: usize, const FMA: bool>(
    acc: &mut [[f32; LANES]; MAX_TAPS],
    dp: &[f32],
    xp: &[f32],
    offs: &[usize; MAX_TAPS],
) {
    let mut a: [[f32; LANES]; T] = std::array::from_fn(|t| acc[t]);
    let (chunks, _) = dp.as_chunks::<LANES>();
    let n = chunks.len();
    // Each tap's run of x as whole vectors, exactly as many as dy's: the loop below then
    // indexes within bounds the compiler can see, and keeps one pointer per tap in a
    // register (indexing `xp` at base + offset checked every tap of every vector and
    // spilled the offsets: a quarter of the speed).
    let runs: [&[[f32; LANES]]; T] = std::array::from_fn(|t| {
        let (c, _) = xp.get(offs[t]..).unwrap_or(&[]).as_chunks::<LANES>();
        &c[..n.min(c.len())]
    });
    if runs.iter().any(|r| r.len() < n) {
        // Not reached: the planes hold every tap's run (zeros past dy's rows).
        let offs: [usize; T] = std::array::from_fn(|t| offs[t]);
        for (c, dv) in chunks.iter().enumerate() {
            tap_products(&mut a, dv, xp, c * LANES, &offs);
        }
    } else {
        // One pointer per tap, each run indexed unchecked: with bounds checks the runs'
        // lengths and pointers did not fit the registers, and dy's vector was reloaded for
        // every tap.
        let ptrs: [*const [f32; LANES]; T] = std::array::from_fn(|t| runs[t].as_ptr());
        for (c, dv) in chunks.iter().enumerate() {
            let dv = *dv;
            for (at, &run) in a.iter_mut().zip(&ptrs) {
                // SAFETY: c < n, and every run holds at least n chunks (checked above).
                let xv = unsafe { &*run.add(c) };
                for l in 0..LANES {
                    if FMA {
                        at[l] = dv[l].mul_add(xv[l], at[l]);
                    } else {
                        at[l] += dv[l] * xv[l];
                    }
                }
            }
        }
    }
    acc[..T].copy_from_slice(&a);
}

/// a\[t\] += yv · xs\[base + offs\[t\] ..\] lane by lane, for every tap t < T.
#[inline(always)]
fn tap_products<const T: usize>(
    a: &mut [[f32; LANES]; T],
    yv: &[f32; LANES],
    xs: &[f32],
    base: usize,
    offs: &[usize; T],
) {
    for (at, &o) in a.iter_mut().zip(offs) {
        let xv: &[f32; LANES] = xs[base + o..].first_chunk().unwrap_or(&[0.0; LANES]);
        for l in 0..LANES {
            at[l] += yv[l] * xv[l];
        }
    }
}

/// dst\[q\] = src\[2q\] (`src` holds 2·len − 1), in chunks of [`LANES`] that vectorise as
/// two loads and a permute.
#[inline(always)]
fn every_other(dst: &mut [f32], src: &[f32]) {
    let (dc, _) = dst.as_chunks_mut::<LANES>();
    let (sc, _) = src.as_chunks::<{ 2 * LANES }>();
    let full = dc.len().min(sc.len());
    for (d, s) in dc.iter_mut().zip(sc) {
        for l in 0..LANES {
            d[l] = s[2 * l];
        }
    }
    for q in full * LANES..dst.len() {
        dst[q] = src[2 * q];
    }
}

/// Each accumulator's lanes added in order.
#[inline(always)]
fn lane_sums(acc: &[[f32; LANES]; MAX_TAPS]) -> [f32; MAX_TAPS] {
    let mut out = [0.0f32; MAX_TAPS];
    for (o, a) in out.iter_mut().zip(acc) {
        let mut t = 0.0;
        for v in a {
            t += v;
        }
        *o = t;
    }
    out
}

/// Sums over the whole batch for output channel `k`: acc\[tap\] per lane.
#[inline(always)]
fn channel<const FMA: bool>(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k: usize,
    scratch: &mut [f32],
) -> [f32; MAX_TAPS] {
    if planes_len(p) > 0 {
        return flattened::<FMA>(p, x, dy, k, scratch);
    }
    let (xd, yd, cd) = (p.x(), p.y(), p.conv());
    let [n, _, h, wi] = xd.dims();
    let [_, _, oh, ow] = yd.dims();
    let (r, s) = (p.w().r(), p.w().s());
    let c = k / p.k_per_group();
    let pad = cd.padding();
    let [sh, sw] = cd.stride().map(|v| v as i64);
    let [dh, dw] = cd.dilation().map(|v| v as i64);
    let swu = sw as usize;
    let mut acc = [[0.0f32; LANES]; MAX_TAPS];
    for b in 0..n {
        for i in 0..oh {
            let yrow = &dy[yd.offset(b, k, i, 0)..][..ow];
            for u in 0..r {
                let ih = i as i64 * sh - pad.top + u as i64 * dh;
                if ih < 0 || ih >= h as i64 {
                    continue;
                }
                let xrow = &x[xd.offset(b, c, ih as usize, 0)..][..wi];
                for v in 0..s {
                    let shift = v as i64 * dw - pad.left;
                    let (j_lo, j_hi) = crate::conv::inside_columns(shift, sw, wi, ow);
                    if j_lo >= j_hi {
                        continue;
                    }
                    let a = &mut acc[u * s + v];
                    let x0 = (j_lo as i64 * sw + shift) as usize;
                    let len = j_hi - j_lo;
                    let ys = &yrow[j_lo..j_hi];
                    match swu {
                        1 => lanes_unit(a, ys, &xrow[x0..x0 + len]),
                        2 => lanes_two(a, ys, &xrow[x0..x0 + 2 * (len - 1) + 1]),
                        _ => {
                            for (q, &y) in ys.iter().enumerate() {
                                a[q % LANES] += y * xrow[x0 + q * swu];
                            }
                        }
                    }
                }
            }
        }
    }
    lane_sums(&acc)
}

/// Largest zero-padded input window (rows × columns covered by the output and the kernel)
/// of the channel-blocked path.
const BLOCKED_MAX_PLANE: usize = 1024;
/// Most output pixels per image of the channel-blocked path where it transposes in registers
/// with AVX-512: 28x28, where it took 0.71 ms against the flattened kernel's 1.68
/// (MobileNet's conv_dw_5 at batch 8 on 2 threads, one Zen 5 VM; 7x7 0.29 against 0.77).
const BLOCKED_MAX_PIXELS: usize = 784;
/// The same with AVX2 (8 pixels per transposition, half-width products): 14x14. On a Zen 3
/// (batch 8, 1 thread) conv_dw_5 (28x28) took 2.46 ms blocked against 2.05 flattened,
/// conv_dw_6 (14x14 out of 28x28) 0.88 against 2.39, conv_dw_13 (7x7) 0.52 against 1.16.
const BLOCKED_MAX_PIXELS_AVX2: usize = 196;
/// The same where the transposition is portable code, lane by lane: it costs what it saves
/// at 14x14 and twice that at 28x28; at 7x7 it halved the time.
const BLOCKED_MAX_PIXELS_PORTABLE: usize = 64;

/// Whether the channel-blocked path computes the problem: at least [`LANES`] output
/// channels on small images, where the flattened kernel's per-(image, channel) copies and
/// short rows cost more than the products (MobileNet's 7x7 layers ran at a sixth of
/// PyTorch's speed). `most`: the most output pixels per image for the instruction set at
/// hand ([`BLOCKED_MAX_PIXELS`] and the constants after it).
fn takes_blocked(p: &ConvProblem, most: usize) -> bool {
    let [_, k, oh, ow] = p.y().dims();
    k >= LANES && oh * ow <= most && blocked_plane(p).is_some()
}

/// The zero-padded input window of the channel-blocked path (rows × columns covered by the
/// output and the kernel), when it is at most [`BLOCKED_MAX_PLANE`].
fn blocked_plane(p: &ConvProblem) -> Option<(usize, usize)> {
    let [_, _, oh, ow] = p.y().dims();
    let (r, s) = (p.w().r(), p.w().s());
    let [sh, sw] = p.conv().stride();
    let [dh, dw] = p.conv().dilation();
    let span = |o: usize, st: usize, k: usize, d: usize| {
        (o.checked_sub(1)?)
            .checked_mul(st)?
            .checked_add((k - 1).checked_mul(d)?)?
            .checked_add(1)
    };
    let rows = span(oh, sh, r, dh)?;
    let cols = span(ow, sw, s, dw)?;
    (rows.checked_mul(cols)? <= BLOCKED_MAX_PLANE).then_some((rows, cols))
}

/// Scratch elements of the channel-blocked path: the window and dy, [`LANES`] channels each.
fn blocked_len(p: &ConvProblem) -> usize {
    let [_, _, oh, ow] = p.y().dims();
    blocked_plane(p).map_or(0, |(rows, cols)| (rows * cols + oh * ow) * LANES)
}

/// For every tap t < T at once, over the output pixels in order: acc\[t\] += dy(pixel) ·
/// x(pixel's window origin + offs\[t\]), [`LANES`] channels per vector.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pixels<const T: usize, const FMA: bool>(
    acc: &mut [[f32; LANES]; MAX_TAPS],
    xs: &[f32],
    ys: &[f32],
    offs: &[usize; MAX_TAPS],
    (oh, ow): (usize, usize),
    cols: usize,
    (sh, sw): (usize, usize),
) {
    let mut a: [[f32; LANES]; T] = std::array::from_fn(|t| acc[t]);
    let offs: [usize; T] = std::array::from_fn(|t| offs[t]);
    // Every vector read lies in the scratch, checked once here rather than at each tap of
    // each pixel (those checks, and the offsets they kept on the stack, took half the
    // time of MobileNet's 14x14 layers).
    let reach = offs.iter().max().map_or(0, |&o| o + LANES);
    let last = (oh.saturating_sub(1) * sh * cols + ow.saturating_sub(1) * sw) * LANES;
    if oh == 0 || ow == 0 || last + reach > xs.len() || oh * ow * LANES > ys.len() {
        // Not reached (the scratch holds the window and dy): checked reads, zeros past.
        for i in 0..oh {
            for j in 0..ow {
                let yv: &[f32; LANES] = ys[(i * ow + j) * LANES..]
                    .first_chunk()
                    .unwrap_or(&[0.0; LANES]);
                tap_products(&mut a, yv, xs, (i * sh * cols + j * sw) * LANES, &offs);
            }
        }
        acc[..T].copy_from_slice(&a);
        return;
    }
    let (xp, yp) = (xs.as_ptr(), ys.as_ptr());
    for i in 0..oh {
        let row = i * sh * cols * LANES;
        for j in 0..ow {
            // SAFETY: (i · ow + j + 1) · LANES <= oh · ow · LANES <= ys.len() (checked).
            let yv = unsafe { &*yp.add((i * ow + j) * LANES).cast::<[f32; LANES]>() };
            let base = row + j * sw * LANES;
            for (at, &o) in a.iter_mut().zip(&offs) {
                // SAFETY: base + o + LANES <= last + reach <= xs.len() (checked).
                let xv = unsafe { &*xp.add(base + o).cast::<[f32; LANES]>() };
                for l in 0..LANES {
                    if FMA {
                        at[l] = yv[l].mul_add(xv[l], at[l]);
                    } else {
                        at[l] += yv[l] * xv[l];
                    }
                }
            }
        }
    }
    acc[..T].copy_from_slice(&a);
}

/// The channel-blocked path: output channels `k0 ..` (up to [`LANES`]) at once, one per
/// vector lane. Per image, their input window (zero-padded) and dy are transposed into
/// `scratch` with the channels innermost; every product is then a whole vector, and each
/// channel's sum runs over images, rows and columns in order (deterministic). Lane l of
/// tap t holds dw\[k0 + l, t\].
///
/// `in_registers` (the AVX-512 and AVX2 entries, each with its own): the transposition a
/// run of pixels at a time in registers, where the portable one writes lane by lane.
///
/// # Safety
/// The CPU runs `in_registers`' instruction set.
#[inline(always)]
unsafe fn block<const FMA: bool>(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k0: usize,
    scratch: &mut [f32],
    in_registers: Option<Transpose>,
) -> [[f32; LANES]; MAX_TAPS] {
    let (xd, yd) = (p.x(), p.y());
    let [n, _, h, wi] = xd.dims();
    let [_, k, oh, ow] = yd.dims();
    let (r, s) = (p.w().r(), p.w().s());
    let cd = p.conv();
    let [sh, sw] = cd.stride();
    let [dh, dw] = cd.dilation();
    let pad = cd.padding();
    let mult = p.k_per_group();
    let Some((rows, cols)) = blocked_plane(p) else {
        return [[0.0; LANES]; MAX_TAPS];
    };
    let lanes = LANES.min(k - k0);
    let (xs, rest) = scratch.split_at_mut(rows * cols * LANES);
    let ys = &mut rest[..oh * ow * LANES];
    let taps = r * s;
    let mut offs = [0usize; MAX_TAPS];
    for (t, o) in offs.iter_mut().enumerate().take(taps) {
        *o = ((t / s) * dh * cols + (t % s) * dw) * LANES;
    }
    // Window columns inside x: iw = column − left padding.
    let c_lo = pad.left.clamp(0, cols as i64) as usize;
    let c_hi = (wi as i64 + pad.left).clamp(c_lo as i64, cols as i64) as usize;
    // Only the window's part inside x, and dy's lanes of existing channels, are written
    // per image: the padding and the missing channels stay these zeros.
    xs.fill(0.0);
    ys.fill(0.0);
    // Element distance from lane 0 to lane l, in x and in dy.
    let (xs1, ys1) = (xd.strides()[1], yd.strides()[1]);
    let x_off: [usize; LANES] =
        std::array::from_fn(|l| ((k0 + l.min(lanes - 1)) / mult - k0 / mult) * xs1);
    let y_off: [usize; LANES] = std::array::from_fn(|l| l.min(lanes - 1) * ys1);
    let mut acc = [[0.0f32; LANES]; MAX_TAPS];
    for b in 0..n {
        if let Some(transpose) = in_registers {
            for pr in 0..rows {
                let ih = pr as i64 - pad.top;
                if ih < 0 || ih >= h as i64 || c_lo >= c_hi {
                    continue;
                }
                let iw = (c_lo as i64 - pad.left) as usize;
                let start = xd.offset(b, k0 / mult, ih as usize, iw);
                let dst = &mut xs[(pr * cols + c_lo) * LANES..(pr * cols + c_hi) * LANES];
                // SAFETY: the CPU runs the transpose's instruction set (this function's
                // contract); it checks its reads.
                unsafe { transpose(x, start, c_hi - c_lo, &x_off, lanes, dst) };
            }
            for i in 0..oh {
                let start = yd.offset(b, k0, i, 0);
                let dst = &mut ys[i * ow * LANES..(i + 1) * ow * LANES];
                // SAFETY: as above.
                unsafe { transpose(dy, start, ow, &y_off, lanes, dst) };
            }
        } else {
            for l in 0..lanes {
                let c = (k0 + l) / mult;
                for pr in 0..rows {
                    let ih = pr as i64 - pad.top;
                    if ih < 0 || ih >= h as i64 {
                        continue;
                    }
                    let src = xd.offset(b, c, ih as usize, 0) as i64 - pad.left;
                    let row = &mut xs[pr * cols * LANES..(pr + 1) * cols * LANES];
                    for pc in c_lo..c_hi {
                        row[pc * LANES + l] = x[(src + pc as i64) as usize];
                    }
                }
                for i in 0..oh {
                    let src = yd.offset(b, k0 + l, i, 0);
                    let row = &mut ys[i * ow * LANES..(i + 1) * ow * LANES];
                    for (j, &v) in dy[src..src + ow].iter().enumerate() {
                        row[j * LANES + l] = v;
                    }
                }
            }
        }
        let dims = (oh, ow);
        let st = (sh, sw);
        match taps {
            9 => pixels::<9, FMA>(&mut acc, xs, ys, &offs, dims, cols, st),
            4 => pixels::<4, FMA>(&mut acc, xs, ys, &offs, dims, cols, st),
            25 => pixels::<25, FMA>(&mut acc, xs, ys, &offs, dims, cols, st),
            1 => pixels::<1, FMA>(&mut acc, xs, ys, &offs, dims, cols, st),
            _ => {
                for i in 0..oh {
                    for j in 0..ow {
                        let y0 = (i * ow + j) * LANES;
                        let base = (i * sh * cols + j * sw) * LANES;
                        for (a, &o) in acc.iter_mut().zip(&offs).take(taps) {
                            for l in 0..LANES {
                                a[l] += ys[y0 + l] * xs[base + o + l];
                            }
                        }
                    }
                }
            }
        }
    }
    acc
}

/// Writes output channel `k`'s filter from its tap sums (`sum(t)` for tap t = u·S + v of the
/// correlation, flipped for convolution mode), blended with alpha and beta.
///
/// # Safety
/// The caller alone writes channel k's filter.
#[inline(always)]
unsafe fn store_filter(
    p: &ConvProblem,
    dw: &SharedOut<'_>,
    ab: (f32, f32),
    k: usize,
    sum: impl Fn(usize) -> f32,
) {
    let wd = p.w();
    let (r, s) = (wd.r(), wd.s());
    let conv_mode = p.conv().mode() == ConvMode::Convolution;
    for u in 0..r {
        for v in 0..s {
            let (fu, fv) = if conv_mode {
                (r - 1 - u, s - 1 - v)
            } else {
                (u, v)
            };
            let o = wd.offset(k, 0, fu, fv);
            // SAFETY: the caller's contract.
            unsafe {
                let old = if ab.1 == 0.0 { 0.0 } else { dw.read(o) };
                dw.write(o, scaled(sum(u * s + v), old, ab.0, ab.1));
            }
        }
    }
}

/// The channel-blocked path over every block of [`LANES`] output channels (one per work
/// item), storing dw.
#[inline(always)]
fn all_blocked<K>(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    dw: &SharedOut<'_>,
    ab: (f32, f32),
    kernel: &K,
) -> Result<()>
where
    K: Fn(&ConvProblem, &[f32], &[f32], usize, &mut [f32]) -> [[f32; LANES]; MAX_TAPS] + Sync,
{
    let k = p.w().k();
    let one = |scratch: &mut Vec<f32>, item: usize| {
        let k0 = item * LANES;
        let sums = kernel(p, x, dy, k0, scratch);
        for (l, kl) in (k0..k.min(k0 + LANES)).enumerate() {
            // SAFETY: output channels k0 .. k0 + LANES are written by this item alone.
            unsafe { store_filter(p, dw, ab, kl, |t| sums[t][l]) };
        }
    };
    let len = blocked_len(p);
    let init = || crate::alloc::try_vec(len, 0.0, "depthwise backward-filter blocks");
    for_each_with(ctx, k.div_ceil(LANES), init, one)
}

/// Computes every output channel (one per work item) and stores dw.
#[inline(always)]
fn all<K>(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    dw: &SharedOut<'_>,
    ab: (f32, f32),
    kernel: &K,
) -> Result<()>
where
    K: Fn(&ConvProblem, &[f32], &[f32], usize, &mut [f32]) -> [f32; MAX_TAPS] + Sync,
{
    let wd = p.w();
    let one = |scratch: &mut Vec<f32>, k: usize| {
        let sums = kernel(p, x, dy, k, scratch);
        // SAFETY: output channel k's filter is written by this work item alone.
        unsafe { store_filter(p, dw, ab, k, |t| sums[t]) };
    };
    let len = planes_len(p);
    let init = || crate::alloc::try_vec(len, 0.0, "depthwise backward-filter planes");
    for_each_with(ctx, wd.k(), init, one)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn channel_avx512(
    _: Avx512,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k: usize,
    scratch: &mut [f32],
) -> [f32; MAX_TAPS] {
    channel::<true>(p, x, dy, k, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn channel_avx2(
    _: Avx2,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k: usize,
    scratch: &mut [f32],
) -> [f32; MAX_TAPS] {
    channel::<true>(p, x, dy, k, scratch)
}

fn channel_portable(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k: usize,
    scratch: &mut [f32],
) -> [f32; MAX_TAPS] {
    channel::<false>(p, x, dy, k, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn block_avx512(
    _: Avx512,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k0: usize,
    scratch: &mut [f32],
) -> [[f32; LANES]; MAX_TAPS] {
    // SAFETY: this entry's target features are AVX-512F's, which `transpose::run` needs.
    unsafe { block::<true>(p, x, dy, k0, scratch, Some(transpose::run)) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn block_avx2(
    _: Avx2,
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k0: usize,
    scratch: &mut [f32],
) -> [[f32; LANES]; MAX_TAPS] {
    // SAFETY: this entry's target features include AVX2, which `transpose::run_avx2` needs.
    unsafe { block::<true>(p, x, dy, k0, scratch, Some(transpose::run_avx2)) }
}

fn block_portable(
    p: &ConvProblem,
    x: &[f32],
    dy: &[f32],
    k0: usize,
    scratch: &mut [f32],
) -> [[f32; LANES]; MAX_TAPS] {
    // SAFETY: no transpose in registers: nothing beyond the portable code runs.
    unsafe { block::<false>(p, x, dy, k0, scratch, None) }
}

impl Algorithm<ConvBackwardFilter> for DepthwiseBwdFilter {
    fn name(&self) -> &'static str {
        "depthwise"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)?;
        if p.c_per_group() != 1 {
            return Err(format!(
                "needs one input channel per group, got {}",
                p.c_per_group()
            ));
        }
        if p.x().strides()[3] != 1 || p.y().strides()[3] != 1 {
            return Err("needs unit-stride rows (NCHW-like x and dy)".into());
        }
        if p.w().r() * p.w().s() > MAX_TAPS {
            return Err(format!("needs at most {MAX_TAPS} kernel taps"));
        }
        planes_fit(p)
    }
    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn accuracy(&self) -> Accuracy {
        Accuracy::Exact
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        default_cost_features(p, 0)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdFilterInputs<'_>,
        out: &mut TensorMut<'_>,
        _workspace: &mut [u8],
    ) -> Result<()> {
        let x = inputs.x.f32("x")?;
        let dy = inputs.dy.f32("dy")?;
        let dw = SharedOut::new(out.f32("dw")?);
        let ab = (inputs.alpha, inputs.beta);
        // The widest kernel family the context allows, through `$all`.
        macro_rules! dispatch {
            ($all:ident, $avx512:ident, $avx2:ident, $portable:ident) => {{
                #[cfg(target_arch = "x86_64")]
                {
                    if let Some(t) = Avx512::new(ctx.features) {
                        let kernel = move |p: &ConvProblem,
                                           x: &[f32],
                                           dy: &[f32],
                                           k: usize,
                                           sc: &mut [f32]| {
                            // SAFETY: the token proves the CPU runs AVX-512F.
                            unsafe { $avx512(t, p, x, dy, k, sc) }
                        };
                        return $all(ctx, p, x, dy, &dw, ab, &kernel);
                    }
                    if let Some(t) = Avx2::new(ctx.features) {
                        let kernel = move |p: &ConvProblem,
                                           x: &[f32],
                                           dy: &[f32],
                                           k: usize,
                                           sc: &mut [f32]| {
                            // SAFETY: the token proves the CPU runs AVX2 and FMA.
                            unsafe { $avx2(t, p, x, dy, k, sc) }
                        };
                        return $all(ctx, p, x, dy, &dw, ab, &kernel);
                    }
                }
                $all(ctx, p, x, dy, &dw, ab, &$portable)
            }};
        }
        #[cfg(target_arch = "x86_64")]
        let most = if Avx512::new(ctx.features).is_some() {
            BLOCKED_MAX_PIXELS
        } else if Avx2::new(ctx.features).is_some() {
            BLOCKED_MAX_PIXELS_AVX2
        } else {
            BLOCKED_MAX_PIXELS_PORTABLE
        };
        #[cfg(not(target_arch = "x86_64"))]
        let most = BLOCKED_MAX_PIXELS_PORTABLE;
        if takes_blocked(p, most) {
            return dispatch!(all_blocked, block_avx512, block_avx2, block_portable);
        }
        dispatch!(all, channel_avx512, channel_avx2, channel_portable)
    }
}

#[cfg(target_arch = "x86_64")]
mod transpose {
    use std::arch::x86_64::*;

    use super::LANES;

    /// Whether a transposition ([`run`], [`run_avx2`]) has anything to do, after checking
    /// that its reads and writes stay inside `src` and `dst` (a panic otherwise): the
    /// offsets grow with the lane, so the last lane's last element is the largest read.
    fn reads_inside(
        src: &[f32],
        start: usize,
        count: usize,
        off: &[usize; LANES],
        lanes: usize,
        dst: &[f32],
    ) -> bool {
        if count == 0 || lanes == 0 {
            return false;
        }
        assert!(lanes <= LANES && dst.len() >= count * LANES);
        assert!(off[..lanes].windows(2).all(|w| w[0] <= w[1]));
        assert!(start + off[lanes - 1] + count - 1 < src.len());
        true
    }

    /// dst\[q·16 + l\] = src\[start + off\[l\] + q\] for q < `count` and lanes l < `lanes` (0 in
    /// the others): a run of pixels of 16 channels transposed channels-innermost, 16 pixels
    /// at a time (16 masked loads, a transpose in registers, 16 stores).
    ///
    /// # Safety
    /// AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn run(
        src: &[f32],
        start: usize,
        count: usize,
        off: &[usize; LANES],
        lanes: usize,
        dst: &mut [f32],
    ) {
        if !reads_inside(src, start, count, off, lanes, dst) {
            return;
        }
        let sp = src.as_ptr();
        let dp = dst.as_mut_ptr();
        for q0 in (0..count).step_by(LANES) {
            let n = LANES.min(count - q0);
            let mask = if n == LANES {
                u16::MAX
            } else {
                (1u16 << n) - 1
            };
            let r: [__m512; LANES] = std::array::from_fn(|l| {
                if l < lanes {
                    // SAFETY: the n enabled elements are src[start + off[l] + q0 ..][..n],
                    // inside src (asserted).
                    unsafe { _mm512_maskz_loadu_ps(mask, sp.add(start + off[l] + q0)) }
                } else {
                    _mm512_setzero_ps()
                }
            });
            let t = crate::simd::transpose16(r);
            for (j, v) in t.iter().enumerate().take(n) {
                // SAFETY: pixel q0 + j < count: its 16 lanes are inside dst (asserted).
                unsafe { _mm512_storeu_ps(dp.add((q0 + j) * LANES), *v) };
            }
        }
    }

    /// [`run`] with AVX2: 8 pixels at a time, each half of the 16 lanes 8 masked loads and
    /// an 8 × 8 transpose in registers, then 16 stores.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn run_avx2(
        src: &[f32],
        start: usize,
        count: usize,
        off: &[usize; LANES],
        lanes: usize,
        dst: &mut [f32],
    ) {
        if !reads_inside(src, start, count, off, lanes, dst) {
            return;
        }
        let sp = src.as_ptr();
        let dp = dst.as_mut_ptr();
        let order = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for q0 in (0..count).step_by(8) {
            let n = 8.min(count - q0);
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), order);
            for half in 0..2 {
                let r: [__m256; 8] = std::array::from_fn(|i| {
                    let l = 8 * half + i;
                    if l < lanes {
                        // SAFETY: the n enabled elements are src[start + off[l] + q0 ..][..n],
                        // inside src (asserted); masked-off lanes are not read.
                        unsafe { _mm256_maskload_ps(sp.add(start + off[l] + q0), mask) }
                    } else {
                        _mm256_setzero_ps()
                    }
                });
                let t = crate::simd::transpose8(r);
                for (j, v) in t.iter().enumerate().take(n) {
                    // SAFETY: pixel q0 + j < count: its 16 lanes are inside dst (asserted).
                    unsafe { _mm256_storeu_ps(dp.add((q0 + j) * LANES + 8 * half), *v) };
                }
            }
        }
    }
}
