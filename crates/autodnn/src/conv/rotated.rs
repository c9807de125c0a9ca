//! Backward data as forward convolutions of dy, so that every forward family serves it.
//!
//! dx\[h\] = Σ over taps r with h + pt − r·d ≡ 0 (mod s) of dy\[(h + pt − r·d) / s\] · w\[r\]
//! (per dimension; channels summed over k). For stride 1 that is a forward convolution of dy
//! with the filter rotated by 180° and its channels transposed (per group: C/g outputs from
//! K/g inputs), padded by d·(R − 1) − pt. For stride s > 1 the outputs split by residue
//! (h mod s, w mod s) into s² stride-1 forward problems, each over the taps that reach it
//! (a sub-filter of every (s / gcd(s, d))-th tap, dilation d / gcd(s, d)), each computed
//! into a packed buffer of its own (no zero insertion); then one pass writes every dx row
//! once, its residues' columns interleaved while the row is in cache, one (image, channel)
//! plane per item on the context's threads. Residues no tap reaches get beta · dx. Leading
//! padding the forward would need negative is a view of dy that starts later.
//!
//! [`ViaForward`] wraps one forward algorithm this way; it accepts a problem when that
//! algorithm accepts every sub-problem. The workspace is the largest sub-filter (transposed
//! and rotated into it before each sub-problem runs), for stride s > 1 the sum of the
//! residues' outputs, and the largest workspace the forward algorithm needs for a
//! sub-problem.

use crate::conv::{AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, COST_FEATURES};
use crate::desc::{
    ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, OpKind, Padding,
    TensorDesc,
};
use crate::error::{Error, Result};
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{Accuracy, Algorithm, ConvBackwardData, ConvBwdDataInputs, TensorMut};
use crate::runtime::parallel::SharedOut;
use crate::runtime::parallel::{for_each, for_each_chunk};
use crate::runtime::workspace::Carve;

/// Backward data through a forward algorithm.
pub(crate) struct ViaForward {
    inner: &'static dyn ConvAlgorithm,
}

impl ViaForward {
    pub(crate) const fn new(inner: &'static dyn ConvAlgorithm) -> ViaForward {
        ViaForward { inner }
    }
}

/// One dimension's residue: which taps reach it and how the forward sees it.
#[derive(Debug, Clone, Copy)]
struct Axis {
    /// Outputs of dx in this residue class (positions ρ, ρ + s, ...).
    count: usize,
    /// First tap, step between taps, number of taps (0: no tap reaches the residue).
    r0: usize,
    step: usize,
    taps: usize,
    /// The forward's dilation, dy rows skipped at the start, leading and trailing padding.
    dil: usize,
    skip: usize,
    pad_lo: i64,
    pad_hi: i64,
}

/// The greatest common divisor.
pub(crate) fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Residue `rho` of one dimension: dx length `h`, dy length `p`, kernel `r`, stride `s`,
/// dilation `d`, leading padding `pt`.
fn axis(rho: usize, h: usize, p: usize, r: usize, s: usize, d: usize, pt: i64) -> Axis {
    let count = (h - rho).div_ceil(s);
    let none = Axis {
        count,
        r0: 0,
        step: 1,
        taps: 0,
        dil: 1,
        skip: 0,
        pad_lo: 0,
        pad_hi: 0,
    };
    let base = rho as i64 + pt;
    let Some(r0) = (0..r.min(s)).find(|&t| (base - (t * d) as i64).rem_euclid(s as i64) == 0)
    else {
        return none;
    };
    let g = gcd(s, d);
    let step = s / g;
    let taps = (r - r0).div_ceil(step);
    let dil = d / g;
    // Output i, tap j reads dy[i + e − j·dil]; rotated (j' = taps − 1 − j) that is a forward
    // window starting at i + e − (taps − 1)·dil.
    let e = (base - (r0 * d) as i64).div_euclid(s as i64);
    let span = ((taps - 1) * dil) as i64;
    let mut pad_lo = span - e;
    let mut skip = 0;
    if pad_lo < 0 {
        skip = (-pad_lo) as usize;
        pad_lo = 0;
    }
    if skip >= p {
        return none;
    }
    let pv = (p - skip) as i64;
    let pad_hi = count as i64 - pv - pad_lo + span;
    Axis {
        count,
        r0,
        step,
        taps,
        dil,
        skip,
        pad_lo,
        pad_hi,
    }
}

/// One residue (ρ, σ): the forward problem (None when no tap reaches it), and where its dy
/// view and dx view start.
struct Sub {
    fwd: Option<ConvProblem>,
    ah: Axis,
    aw: Axis,
    dy_off: usize,
    dx_off: usize,
}

/// At most this many residues (stride 8 × 8): larger strides are left to `gemm` and
/// `direct`, so that checks and workspace queries stay O(1) in memory.
const MAX_RESIDUES: usize = 64;

/// The residues of `p` in order. A short list of bookkeeping ([`MAX_RESIDUES`] at most),
/// made by checks and queries too, so it is not counted as a problem-sized allocation.
fn subs(p: &ConvProblem) -> Result<Vec<Sub>> {
    let (xd, wd, yd, cd) = (p.x(), p.w(), p.y(), p.conv());
    let [n, c, h, w] = xd.dims();
    let [_, k, oh, ow] = yd.dims();
    let [sh, sw] = cd.stride();
    let [dh, dw] = cd.dilation();
    let pad = cd.padding();
    let xs = xd.strides();
    let ys = yd.strides();
    let nh = sh.min(h);
    let nw = sw.min(w);
    let residues = nh.saturating_mul(nw);
    if residues > MAX_RESIDUES {
        return Err(Error::Unsupported {
            what: format!("a stride of {sh}x{sw} ({residues} residues, more than {MAX_RESIDUES})"),
        });
    }
    let mut out = Vec::with_capacity(residues);
    let filter_layout = if xs[1] < xs[3] {
        FilterLayout::Krsc
    } else {
        FilterLayout::Kcrs
    };
    for rho in 0..nh {
        let ah = axis(rho, h, oh, wd.r(), sh, dh, pad.top);
        for sigma in 0..nw {
            let aw = axis(sigma, w, ow, wd.s(), sw, dw, pad.left);
            let dx_off = rho * xs[2] + sigma * xs[3];
            let dy_off = ah.skip * ys[2] + aw.skip * ys[3];
            let fwd = if ah.taps == 0 || aw.taps == 0 {
                None
            } else {
                let x = TensorDesc::with_strides(
                    DataType::F32,
                    [n, k, oh - ah.skip, ow - aw.skip],
                    ys,
                )?;
                // Stride 1: dx itself. Otherwise a packed buffer, scattered into dx's residue
                // after (the residue's view is not flat, and forward GEMMs would then
                // cover one output row each).
                let y = if sh * sw == 1 {
                    TensorDesc::with_strides(DataType::F32, [n, c, ah.count, aw.count], xs)?
                } else {
                    let layout = if xs[1] < xs[3] {
                        Layout::Nhwc
                    } else {
                        Layout::Nchw
                    };
                    TensorDesc::new(DataType::F32, layout, [n, c, ah.count, aw.count])?
                };
                let f = FilterDesc::new(
                    DataType::F32,
                    filter_layout,
                    [c, p.k_per_group(), ah.taps, aw.taps],
                )?;
                let conv = ConvDesc::new(
                    Padding {
                        top: ah.pad_lo,
                        bottom: ah.pad_hi,
                        left: aw.pad_lo,
                        right: aw.pad_hi,
                    },
                    [1, 1],
                    [ah.dil, aw.dil],
                    p.groups(),
                    ConvMode::CrossCorrelation,
                )?;
                Some(ConvProblem::forward(x, f, conv, y)?)
            };
            out.push(Sub {
                fwd,
                ah,
                aw,
                dy_off,
                dx_off,
            });
        }
    }
    Ok(out)
}

/// The copy of one (k, c) pair's taps, `out[d] = src[s]` for each tap `(d, s)` (destination
/// and source offsets), repeated over pairs: on AVX-512, blocks of at most 16 floats on both
/// sides take one masked load, one lane permutation and one masked store per pair (the scalar
/// copy of 3x3 taps took a fifth of a 7x7 layer's Winograd backward data).
struct TapCopy<'t> {
    taps: &'t [(usize, usize)],
    span_d: usize,
    span_s: usize,
    /// Where the CPU runs AVX-512 and both spans fit one vector: the token, the source lane
    /// of each destination lane, and the masks of the lanes read and written.
    #[cfg(target_arch = "x86_64")]
    lanes: Option<(crate::simd::Avx512, [i32; 16], u16, u16)>,
}

impl<'t> TapCopy<'t> {
    fn new(
        features: crate::cpu::Features,
        taps: &'t [(usize, usize)],
        span_d: usize,
        span_s: usize,
    ) -> TapCopy<'t> {
        #[cfg(target_arch = "x86_64")]
        let lanes = <crate::simd::Avx512 as crate::simd::Token>::new(features)
            .filter(|_| span_d <= 16 && span_s <= 16)
            .map(|t| {
                let mut idx = [0i32; 16];
                let mut written = 0u16;
                for &(d, s) in taps {
                    idx[d] = s as i32;
                    written |= 1 << d;
                }
                let read = ((1u32 << span_s) - 1) as u16;
                (t, idx, read, written)
            });
        #[cfg(not(target_arch = "x86_64"))]
        let _ = features;
        TapCopy {
            taps,
            span_d,
            span_s,
            #[cfg(target_arch = "x86_64")]
            lanes,
        }
    }

    /// Copies the taps of `count` pairs, pair i from `src[i·ss..]` to `out[i·ds..]`.
    fn run(&self, src: &[f32], ss: usize, out: &mut [f32], ds: usize, count: usize) {
        if count == 0 || self.taps.is_empty() {
            return;
        }
        // Both operands hold every pair's span (a short slice panics here, before any
        // access, as the scalar copy's indexing would).
        let src = &src[..(count - 1) * ss + self.span_s];
        let out = &mut out[..(count - 1) * ds + self.span_d];
        #[cfg(target_arch = "x86_64")]
        if let Some((t, idx, read, written)) = self.lanes {
            // SAFETY: the token proves the CPU runs AVX-512F.
            return unsafe { copy_taps_avx512(t, &(idx, read, written), src, ss, out, ds, count) };
        }
        for i in 0..count {
            let s = &src[i * ss..][..self.span_s];
            let o = &mut out[i * ds..][..self.span_d];
            for &(d, t) in self.taps {
                o[d] = s[t];
            }
        }
    }
}

/// [`TapCopy::run`] on AVX-512: `src` holds `(count − 1)·ss + span_s` floats and `out`
/// `(count − 1)·ds + span_d`, where `read` enables the lanes below `span_s` and `written`
/// only lanes below `span_d`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn copy_taps_avx512(
    _: crate::simd::Avx512,
    &(idx, read, written): &([i32; 16], u16, u16),
    src: &[f32],
    ss: usize,
    out: &mut [f32],
    ds: usize,
    count: usize,
) {
    use std::arch::x86_64::*;
    let lanes = _mm512_setr_epi32(
        idx[0], idx[1], idx[2], idx[3], idx[4], idx[5], idx[6], idx[7], idx[8], idx[9], idx[10],
        idx[11], idx[12], idx[13], idx[14], idx[15],
    );
    for i in 0..count {
        // SAFETY: pair i's enabled lanes read src[i·ss .. i·ss + span_s] and write at most
        // out[i·ds .. i·ds + span_d], inside both slices (their lengths, set by the caller,
        // cover the last pair's spans); masked-off lanes are not accessed and cannot fault.
        unsafe {
            let v = _mm512_maskz_loadu_ps(read, src.as_ptr().add(i * ss));
            let v = _mm512_permutexvar_ps(lanes, v);
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i * ds), written, v);
        }
    }
}

/// Writes the sub-filter of `sub` (rotated, channels transposed) into `dst`, laid out as
/// the sub-problem's filter descriptor.
fn sub_filter(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    sub: &Sub,
    f: &ConvProblem,
    w: &[f32],
    dst: &mut [f32],
) -> Result<()> {
    let (wd, fd) = (p.w(), f.w());
    let (ws, fs) = (wd.strides(), fd.strides());
    let [r, s] = [wd.r(), wd.s()];
    let (cg, kg) = (p.c_per_group(), p.k_per_group());
    let conv_mode = p.conv().mode() == ConvMode::Convolution;
    let [_, _, th, tw] = fd.dims();
    // Source offset of each sub-filter tap (j, l) within one (k, c) block.
    let mut taps = crate::alloc::try_vec_with_capacity(th * tw, "sub-filter taps")?;
    for j in 0..th {
        let u = sub.ah.r0 + (th - 1 - j) * sub.ah.step;
        for l in 0..tw {
            let v = sub.aw.r0 + (tw - 1 - l) * sub.aw.step;
            let (fu, fv) = if conv_mode {
                (r - 1 - u, s - 1 - v)
            } else {
                (u, v)
            };
            taps.push((j * fs[2] + l * fs[3], fu * ws[2] + fv * ws[3]));
        }
    }
    // Channels unit-stride on both sides (a 1x1 KCRS filter, every KRSC one): each tap's
    // block of a band of channels c is one matrix transpose, in vector tiles (a scalar copy
    // of ResNet-50's 2048 × 1024 stride-2 projection, its rows 4 KiB apart in one cache set,
    // took a quarter of the layer's backward data). Otherwise (KCRS filters of more than one
    // tap) each (k, c) pair's taps form a short block on both sides, copied one destination
    // row (channel c) at a time: the reads of the next c fall on the lines this c read, and
    // the writes stream. Bands of destination rows go to the threads.
    let unit = ws[1] == 1 && fs[1] == 1;
    let span_s = taps.iter().map(|t| t.1 + 1).max().unwrap_or(0);
    let span_d = taps.iter().map(|t| t.0 + 1).max().unwrap_or(0);
    let copy = TapCopy::new(ctx.features, &taps, span_d, span_s);
    let band = |g: usize, c0: usize, out: &mut [f32]| {
        let nb = out.len() / fs[0];
        if unit {
            for &(d, s) in &taps {
                let src = &w[g * kg * ws[0] + c0 + s..];
                crate::gemm::transpose_into(
                    ctx.features,
                    (src, ws[0]),
                    (&mut out[d..], fs[0]),
                    kg,
                    nb,
                );
            }
            return;
        }
        for cl in 0..nb {
            let src = &w[g * kg * ws[0] + (c0 + cl) * ws[1]..];
            copy.run(src, ws[0], &mut out[cl * fs[0]..], fs[1], kg);
        }
    };
    const BAND: usize = 16;
    let dst = &mut dst[..p.groups() * cg * fs[0]];
    let parallel = ctx.threads > 1 && kg * cg * taps.len() >= 1 << 15;
    for (g, dg) in dst.chunks_mut(cg * fs[0]).enumerate() {
        if parallel {
            for_each_chunk(ctx, dg, BAND * fs[0], |i, out| band(g, i * BAND, out));
        } else {
            for (i, out) in dg.chunks_mut(BAND * fs[0]).enumerate() {
                band(g, i * BAND, out);
            }
        }
    }
    Ok(())
}

/// dx = alpha · g + beta · dx for every residue at once, g of residue i read from
/// `tmp[offs[i]..]` (laid out as its forward output), or 0 where no tap reaches the residue:
/// one item per (image, channel) plane, each dx row written once, its residues' columns
/// interleaved while the row is in cache.
#[allow(clippy::too_many_arguments)]
fn scatter(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    subs: &[Sub],
    offs: &[usize],
    tmp: &[f32],
    dx: &mut [f32],
    alpha: f32,
    beta: f32,
) {
    let xs = p.x().strides();
    let [sh, sw] = p.conv().stride();
    let [n, c, h, w] = p.x().dims();
    let nw = sw.min(w);
    if n * c * h * w == 0 {
        return;
    }
    let out = SharedOut::new(dx);
    // The last element of dx lies in the buffer (every element below it then does).
    assert!(p.x().offset(n - 1, c - 1, h - 1, w - 1) < out.len());
    // Stride 2 along rows that are unit-stride in dx and in both residues' outputs (NCHW-like
    // dx): each row is its two residues' rows interleaved, in one pass over whole pairs.
    let pairs = sw == 2
        && nw == 2
        && xs[3] == 1
        && subs
            .iter()
            .all(|s| s.fwd.as_ref().is_none_or(|f| f.y().strides()[3] == 1));
    let plane = |q: usize| {
        let (b, ch) = (q / c, q % c);
        for ih in 0..h {
            let (rho, i) = (ih % sh, ih / sh);
            if pairs {
                let src = |sigma: usize| {
                    let sub = &subs[rho * 2 + sigma];
                    sub.fwd.as_ref().map(|f| {
                        let t0 = offs[rho * 2 + sigma] + f.y().offset(b, ch, i, 0);
                        &tmp[t0..t0 + sub.aw.count]
                    })
                };
                // SAFETY: row ih of plane (b, ch), w unit-stride elements from its start, lies
                // inside dx (its last element does, asserted above) and belongs to this item
                // alone (distinct coordinates of a valid descriptor never share memory).
                let row = unsafe { out.slice_mut(b * xs[0] + ch * xs[1] + ih * xs[2], w) };
                interleave_pairs(row, src(0), src(1), alpha, beta);
                continue;
            }
            for sigma in 0..nw {
                let sub = &subs[rho * nw + sigma];
                let cols = sub.aw.count;
                let row = out
                    .as_mut_ptr()
                    .wrapping_add(b * xs[0] + ch * xs[1] + ih * xs[2] + sigma * xs[3]);
                // A residue of one column never steps: its step may not fit.
                let ws = sw.saturating_mul(xs[3]);
                let src = sub.fwd.as_ref().map(|f| {
                    let td = f.y();
                    let t0 = offs[rho * nw + sigma] + td.offset(b, ch, i, 0);
                    (t0, td.strides()[3])
                });
                for j in 0..cols {
                    let v = src.map_or(0.0, |(t0, ts)| tmp[t0 + j * ts]);
                    // SAFETY: element (b, ch, ih, sigma + j·sw) of dx (j < cols, the
                    // residue's column count) is inside dx (its last element is, asserted
                    // above) and belongs to plane (b, ch) alone: distinct coordinates of a
                    // valid descriptor never share memory, and each plane is one item.
                    unsafe {
                        let d = row.add(j * ws);
                        *d = if beta == 0.0 {
                            alpha * v
                        } else {
                            scaled(v, *d, alpha, beta)
                        };
                    }
                }
            }
        }
    };
    if ctx.threads > 1 && n * c > 1 && n * c * h * w >= 1 << 14 {
        for_each(ctx, n * c, plane);
    } else {
        (0..n * c).for_each(plane);
    }
}

/// `row` = alpha · g + beta · row, g's even elements from `even` and odd ones from `odd`
/// (zeros where a residue has no tap). Whole pairs in one loop the compiler vectorises.
fn interleave_pairs(
    row: &mut [f32],
    even: Option<&[f32]>,
    odd: Option<&[f32]>,
    alpha: f32,
    beta: f32,
) {
    let half = row.len() / 2;
    let zeros = [0.0f32; 64];
    // A residue without taps reads zeros, 64 at a time.
    fn part<'a>(r: Option<&'a [f32]>, zeros: &'a [f32], j0: usize, len: usize) -> &'a [f32] {
        r.map_or(&zeros[..len], |r| &r[j0..j0 + len])
    }
    for j0 in (0..half).step_by(64) {
        let len = 64.min(half - j0);
        let (e, o) = (part(even, &zeros, j0, len), part(odd, &zeros, j0, len));
        let dst = &mut row[2 * j0..2 * (j0 + len)];
        if beta == 0.0 {
            for ((d, &u), &v) in dst.chunks_exact_mut(2).zip(e).zip(o) {
                d[0] = alpha * u;
                d[1] = alpha * v;
            }
        } else {
            for ((d, &u), &v) in dst.chunks_exact_mut(2).zip(e).zip(o) {
                d[0] = alpha * u + beta * d[0];
                d[1] = alpha * v + beta * d[1];
            }
        }
    }
    if row.len() % 2 == 1 {
        let v = even.map_or(0.0, |r| r[half]);
        let d = &mut row[2 * half];
        *d = scaled(v, *d, alpha, beta);
    }
}

/// Buffers of one run: the largest sub-filter and sub-output (0 for stride 1: dx itself)
/// in elements, and the largest forward workspace in bytes.
struct Sizes {
    filter: usize,
    output: usize,
    inner: usize,
}

/// The run's buffer sizes over the residues `subs` of `p`, or why the forward algorithm
/// cannot serve one of them.
fn sizes_of(
    inner: &dyn ConvAlgorithm,
    p: &ConvProblem,
    subs: &[Sub],
) -> std::result::Result<Sizes, String> {
    let strided = p.conv().stride() != [1, 1];
    let mut z = Sizes {
        filter: 0,
        output: 0,
        inner: 0,
    };
    for f in subs.iter().filter_map(|s| s.fwd.as_ref()) {
        inner
            .check(f)
            .map_err(|e| format!("the forward {} declines a residue: {e}", inner.name()))?;
        z.filter = z.filter.max(f.w().elements());
        if strided {
            z.output = z.output.saturating_add(f.y().span());
        }
        z.inner = z.inner.max(inner.workspace_bytes(f));
    }
    Ok(z)
}

/// The residues of `p` and the run's buffer sizes, or why not.
fn plan(via: &ViaForward, p: &ConvProblem) -> std::result::Result<(Vec<Sub>, Sizes), String> {
    let subs = subs(p).map_err(|e| format!("no residue problems: {e}"))?;
    let z = sizes_of(via.inner, p, &subs)?;
    Ok((subs, z))
}

/// Alignment of the forward algorithm's workspace after the sub-filter.
const ALIGN: usize = 64;

impl Algorithm<ConvBackwardData> for ViaForward {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardData)?;
        plan(self, p).map(|_| ())
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        let Ok((_, z)) = plan(self, p) else {
            return 0;
        };
        // Each of the three buffers may start up to ALIGN − 1 bytes in. Saturating: the
        // inner algorithm's size of a huge residue may itself be saturated.
        (3 * ALIGN)
            .saturating_add(z.filter.saturating_add(z.output).saturating_mul(4))
            .saturating_add(z.inner)
    }
    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }
    fn accuracy(&self) -> Accuracy {
        self.inner.accuracy()
    }
    fn accuracy_under(&self, _p: &ConvProblem, math: crate::MathMode) -> Accuracy {
        self.inner.accuracy_under(math)
    }
    /// The sum of the forward algorithm's features over the residues.
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let mut f = [0.0; COST_FEATURES];
        for s in subs(p).unwrap_or_default() {
            if let Some(q) = &s.fwd {
                for (a, b) in f.iter_mut().zip(self.inner.cost_features(q)) {
                    *a += b;
                }
            }
        }
        f[0] = 1.0;
        f
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdDataInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let dy = inputs.dy.f32("dy")?;
        let w = inputs.w.f32("w")?;
        let dx = out.f32("dx")?;
        let (subs, z) = plan(self, p).map_err(|reason| Error::Declined {
            algo: self.name().into(),
            reason,
        })?;
        let mut carve = Carve::new(workspace);
        let wt = carve.take_aligned::<f32>(z.filter, ALIGN)?;
        let tmp = carve.take_aligned::<f32>(z.output, ALIGN)?;
        let ws = carve.take_aligned::<u8>(z.inner, ALIGN)?;
        let (alpha, beta) = (inputs.alpha, inputs.beta);
        let strided = p.conv().stride() != [1, 1];
        // Stride s > 1: residue i's output at tmp[offs[i]..], all combined at the end.
        let mut offs = crate::alloc::try_vec(subs.len(), 0usize, "backward-data residues")?;
        let mut at = 0;
        for (o, sub) in offs.iter_mut().zip(&subs) {
            *o = at;
            at += sub.fwd.as_ref().map_or(0, |f| f.y().span());
        }
        for (sub, &off) in subs.iter().zip(&offs) {
            let Some(f) = &sub.fwd else { continue };
            let wt = &mut wt[..f.w().elements()];
            sub_filter(ctx, p, sub, f, w, wt)?;
            let dy = &dy[sub.dy_off..];
            let wts = AlgoWeights::Plain(wt);
            if strided {
                let epi = EpilogueArgs::default();
                let t = &mut tmp[off..off + f.y().span()];
                self.inner.run(ctx, f, dy, wts, t, ws, &epi)?;
            } else {
                let epi = EpilogueArgs::new(alpha, beta);
                self.inner
                    .run(ctx, f, dy, wts, &mut dx[sub.dx_off..], ws, &epi)?;
            }
        }
        if strided {
            scatter(ctx, p, &subs, &offs, tmp, dx, alpha, beta);
        } else if subs.iter().any(|s| s.fwd.is_none()) {
            // Stride 1 with no tap reaching dx (a kernel wholly in the padding): beta · dx.
            scatter(ctx, p, &subs, &offs, tmp, dx, alpha, beta);
        }
        Ok(())
    }
}
