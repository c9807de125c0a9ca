//! `depthwise` backward data. With one input channel per group, the rotated filter's channel
//! transpose is again depthwise, so stride 1 runs the forward kernels on dy
//! ([`crate::conv::rotated`]).
//!
//! Stride s > 1 without dilation, on NCHW-like rows (dx and dy unit-stride along W), runs
//! per (image, channel) plane instead of as s² forward problems over the whole tensor, whose
//! packed outputs made a second pass over memory and whose 2x2, 2x1 and 1x2 sub-filters over
//! 7x7 images took the forward's generic kernels (MobileNet's stride-2 layers ran at 2 to 6
//! GFLOP/s). Per plane: dy is copied once into a zero-padded plane of width `wp`; dx's
//! outputs split by residue (ρ, σ) = (h mod sh, w mod sw) into phases, and output (i, j) of
//! phase (ρ, σ) is the sum over the taps (u, v) reaching it of
//! w\[u, v\] · dy\[i + e_u, j + e_v\], with e_u = (ρ + pt − u) / sh (and e_v likewise). In the
//! padded plane that is one flat shift per tap, so each phase is a sum of whole vectors of
//! shifted dy, computed for the column phases of one row residue into a small buffer; then
//! each dx row of that residue is written once, its column phases interleaved (stride 2:
//! two rows merged lane by lane). Everything a plane touches stays in the core's caches.
//!
//! - **Workspace:** none (a padded plane and the phase rows per thread, allocated
//!   fallibly). Problems whose padded plane would exceed four image planes (huge padding)
//!   take the residue path.
//! - **Deterministic:** every dx element is summed by one thread, taps in a fixed order.

use super::Depthwise;
use crate::conv::rotated::ViaForward;
use crate::conv::ExecContext;
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::Result;
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardData, ConvBwdDataInputs, TensorMut, COST_FEATURES,
};
use crate::runtime::parallel::{for_each_with, SharedOut};
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};

/// Lanes of one vector of the phase sums.
const LANES: usize = 16;

/// The depthwise backward-data algorithm.
pub(crate) struct DepthwiseBwdData {
    via: ViaForward,
}

pub(crate) static DEPTHWISE_BWD_DATA: DepthwiseBwdData = DepthwiseBwdData {
    via: ViaForward::new(&Depthwise),
};

/// The taps of one dimension reaching residue `rho`: (tap, dy offset e), dy index i + e.
fn taps_of(rho: usize, r: usize, s: usize, pt: i64) -> impl Iterator<Item = (usize, i64)> {
    (0..r).filter_map(move |u| {
        let t = rho as i64 + pt - u as i64;
        (t.rem_euclid(s as i64) == 0).then(|| (u, t.div_euclid(s as i64)))
    })
}

/// Outputs of residue `rho` along a dimension of `len` at stride `s`.
fn count(rho: usize, len: usize, s: usize) -> usize {
    len.saturating_sub(rho).div_ceil(s)
}

/// One dimension of the padded dy plane: the leading zeros (so that every tap's offset is
/// non-negative) and the extent every tap's reads reach.
#[derive(Debug, Clone, Copy)]
struct Span {
    lead: i64,
    extent: usize,
}

/// The padded extent along one dimension: dx length `len`, dy length `out`, kernel `r`,
/// stride `s`, leading padding `pt`. None when it would not fit in `limit` elements.
fn span(len: usize, out: usize, r: usize, s: usize, pt: i64, limit: usize) -> Option<Span> {
    let (mut lo, mut hi) = (0i64, out as i64);
    for rho in 0..s.min(len) {
        let n = count(rho, len, s) as i64;
        for (_, e) in taps_of(rho, r, s, pt) {
            lo = lo.min(e);
            hi = hi.max(n + e);
        }
    }
    let extent = usize::try_from(hi.checked_sub(lo)?).ok()?;
    (extent <= limit).then_some(Span { lead: -lo, extent })
}

/// The padded plane's rows and width, when the phased path takes the problem: stride above
/// 1, no dilation, at most 8 × 8 residues, NCHW-like dx and dy, and a plane of at most four
/// image planes (and 64 Ki elements for tiny ones).
fn phased(p: &ConvProblem) -> Option<(Span, Span)> {
    let cd = p.conv();
    let [sh, sw] = cd.stride();
    if [sh, sw] == [1, 1] || cd.dilation() != [1, 1] || sh > 8 || sw > 8 {
        return None;
    }
    if p.c_per_group() != 1 || p.x().strides()[3] != 1 || p.y().strides()[3] != 1 {
        return None;
    }
    // At most 64 taps reach one residue (the phase kernel's weights sit in an array). Checked
    // first: it bounds the kernel (at most 512 taps a side), and so the spans' loops below.
    if p.w()
        .r()
        .div_ceil(sh)
        .saturating_mul(p.w().s().div_ceil(sw))
        > MAX_PHASE_TAPS
    {
        return None;
    }
    let [_, _, h, w] = p.x().dims();
    let [_, _, oh, ow] = p.y().dims();
    let bound = (h * w + oh * ow).saturating_mul(4).saturating_add(1 << 16);
    let pad = cd.padding();
    let rows = span(h, oh, p.w().r(), sh, pad.top, bound)?;
    let cols = span(w, ow, p.w().s(), sw, pad.left, bound)?;
    let plane = plane_len(rows, cols)?;
    (plane.checked_add(scratch_phases(p, cols))? <= bound).then_some((rows, cols))
}

/// Most taps reaching one residue.
const MAX_PHASE_TAPS: usize = 64;

/// Elements of the padded dy plane, with a vector of zeros after it: a vector read that
/// starts at an element of the plane stays inside.
fn plane_len(rows: Span, cols: Span) -> Option<usize> {
    rows.extent.checked_mul(cols.extent)?.checked_add(LANES)
}

/// Elements between two column phases' buffers: a residue's rows of the padded width,
/// rounded up to whole vectors (the phase sums write whole vectors).
fn phase_stride(rows: usize, wp: usize) -> usize {
    (rows * wp).next_multiple_of(LANES)
}

/// Elements of one row residue's phase buffers: every column phase, the most rows a residue
/// has (residue 0's) of the padded width, each rounded up to whole vectors.
fn scratch_phases(p: &ConvProblem, cols: Span) -> usize {
    let [sh, sw] = p.conv().stride();
    let rows = count(0, p.x().h(), sh);
    rows.saturating_mul(cols.extent)
        .saturating_add(LANES)
        .saturating_mul(sw)
}

/// out\[f\] = Σ_t wts\[t\] · dyp\[f + offs\[t\]\] (plus out\[f\] when `add`), whole vectors;
/// reads past the plane are zeros.
#[inline(always)]
fn phase_sum(out: &mut [f32], dyp: &[f32], offs: &[usize], wts: &[f32], add: bool) {
    let (chunks, _) = out.as_chunks_mut::<LANES>();
    for (ci, o) in chunks.iter_mut().enumerate() {
        let f = ci * LANES;
        let mut a = if add { *o } else { [0.0; LANES] };
        for (&off, &wt) in offs.iter().zip(wts) {
            let v: &[f32; LANES] = dyp
                .get(f + off..)
                .and_then(|s| s.first_chunk())
                .unwrap_or(&[0.0; LANES]);
            for l in 0..LANES {
                a[l] += wt * v[l];
            }
        }
        *o = a;
    }
}

/// dx\[σ + sw·j\] = alpha · phase σ\[j\] + beta · dx (beta 0: not read), the phases' rows
/// at `bufs[σ · stride + row..]`. Stride 2 interleaves the two phases a vector at a time
/// (`IN_REGISTERS`: two AVX-512 permutes per 32 outputs).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn write_row<const IN_REGISTERS: bool>(
    dx: &mut [f32],
    bufs: &[f32],
    stride: usize,
    row: usize,
    sw: usize,
    counts: &[usize],
    alpha: f32,
    beta: f32,
) {
    if sw == 2 && counts.len() == 2 {
        let (e, o) = (
            &bufs[row..][..counts[0]],
            &bufs[stride + row..][..counts[1]],
        );
        let pairs = dx.len() / 2;
        let mut done = 0;
        if IN_REGISTERS {
            #[cfg(target_arch = "x86_64")]
            {
                done = pairs;
                // SAFETY: IN_REGISTERS is set by the AVX-512 entry alone; `interleave`
                // reads and writes only within the slices it is given.
                unsafe {
                    x86::interleave(&mut dx[..2 * done], &e[..done], &o[..done], alpha, beta)
                };
            }
        }
        for j in done..pairs {
            dx[2 * j] = scaled(e[j], dx[2 * j], alpha, beta);
            dx[2 * j + 1] = scaled(o[j], dx[2 * j + 1], alpha, beta);
        }
        if dx.len() % 2 == 1 {
            dx[2 * pairs] = scaled(e[pairs], dx[2 * pairs], alpha, beta);
        }
        return;
    }
    for (sigma, &n) in counts.iter().enumerate() {
        let src = &bufs[sigma * stride + row..][..n];
        for (j, &v) in src.iter().enumerate() {
            let d = &mut dx[sigma + sw * j];
            *d = scaled(v, *d, alpha, beta);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// dx\[2j\] = alpha · e\[j\] + beta · dx\[2j\], dx\[2j + 1\] likewise from o (beta 0: dx
    /// not read), for j < dx.len() / 2 (e and o hold at least that many); the last vector
    /// masked.
    ///
    /// # Safety
    /// The CPU runs AVX-512F.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn interleave(dx: &mut [f32], e: &[f32], o: &[f32], alpha: f32, beta: f32) {
        let n = e.len().min(o.len()).min(dx.len() / 2);
        let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        let hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        let (a, b) = (_mm512_set1_ps(alpha), _mm512_set1_ps(beta));
        let mask = |k: usize| -> __mmask16 { ((1u32 << k.min(16)) - 1) as __mmask16 };
        for j in (0..n).step_by(16) {
            let m = (n - j).min(16);
            let (m_in, m0, m1) = (mask(m), mask(2 * m), mask((2 * m).saturating_sub(16)));
            // SAFETY: the masks cover e[j..j + m], o[j..j + m] and dx[2j..2j + 2m], inside
            // the slices since j + m <= n.
            unsafe {
                let ev = _mm512_maskz_loadu_ps(m_in, e.as_ptr().add(j));
                let ov = _mm512_maskz_loadu_ps(m_in, o.as_ptr().add(j));
                let d = dx.as_mut_ptr().add(2 * j);
                let mut v0 = _mm512_mul_ps(a, _mm512_permutex2var_ps(ev, lo, ov));
                let mut v1 = _mm512_mul_ps(a, _mm512_permutex2var_ps(ev, hi, ov));
                if beta != 0.0 {
                    v0 = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m0, d), v0);
                    // d + 16 is only formed where the mask reaches it.
                    if m > 8 {
                        v1 = _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m1, d.add(16)), v1);
                    }
                }
                _mm512_mask_storeu_ps(d, m0, v0);
                if m > 8 {
                    _mm512_mask_storeu_ps(d.add(16), m1, v1);
                }
            }
        }
    }
}

/// The per-problem tables of the phased path.
struct Tables {
    rows: Span,
    cols: Span,
    /// Per residue (ρ, σ), in order: the range of its taps in `offs` and `taps`.
    ranges: Vec<(usize, usize)>,
    /// Each tap's flat offset in the padded plane.
    offs: Vec<usize>,
    /// Each tap's filter offset (flipped in convolution mode) within one channel.
    taps: Vec<usize>,
}

fn tables(p: &ConvProblem, rows: Span, cols: Span) -> Result<Tables> {
    let [sh, sw] = p.conv().stride();
    let [_, _, h, w] = p.x().dims();
    let wd = p.w();
    let (r, s) = (wd.r(), wd.s());
    let pad = p.conv().padding();
    let conv_mode = p.conv().mode() == ConvMode::Convolution;
    let (nh, nw) = (sh.min(h), sw.min(w));
    let mut ranges = crate::alloc::try_vec_with_capacity(nh * nw, "depthwise phases")?;
    let most = r.div_ceil(sh) * s.div_ceil(sw) * nh * nw;
    let mut offs = crate::alloc::try_vec_with_capacity(most, "depthwise phase taps")?;
    let mut taps = crate::alloc::try_vec_with_capacity(most, "depthwise phase taps")?;
    for rho in 0..nh {
        for sigma in 0..nw {
            let start = offs.len();
            for (u, eu) in taps_of(rho, r, sh, pad.top) {
                for (v, ev) in taps_of(sigma, s, sw, pad.left) {
                    let row = (eu + rows.lead) as usize;
                    let col = (ev + cols.lead) as usize;
                    offs.push(row * cols.extent + col);
                    let (fu, fv) = if conv_mode {
                        (r - 1 - u, s - 1 - v)
                    } else {
                        (u, v)
                    };
                    taps.push(wd.offset(0, 0, fu, fv));
                }
            }
            ranges.push((start, offs.len()));
        }
    }
    Ok(Tables {
        rows,
        cols,
        ranges,
        offs,
        taps,
    })
}

/// One (image, channel) plane of dx.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn plane<const IN_REGISTERS: bool>(
    p: &ConvProblem,
    t: &Tables,
    dy: &[f32],
    w: &[f32],
    dx: &SharedOut<'_>,
    (alpha, beta): (f32, f32),
    item: usize,
    scratch: &mut [f32],
) {
    let (xd, yd, wd) = (p.x(), p.y(), p.w());
    let [_, c, h, wi] = xd.dims();
    let [_, _, oh, ow] = yd.dims();
    let [sh, sw] = p.conv().stride();
    let mult = p.k_per_group();
    let (b, ch) = (item / c, item % c);
    let wp = t.cols.extent;
    let (dyp, bufs) = scratch.split_at_mut(t.rows.extent * wp + LANES);
    let (nh, nw) = (sh.min(h), sw.min(wi));
    let counts_w: [usize; 8] = std::array::from_fn(|s| count(s, wi, sw));
    let counts_w = &counts_w[..nw];
    let mut wts = [0.0f32; MAX_PHASE_TAPS];
    for rho in 0..nh {
        let rows = count(rho, h, sh);
        let stride = phase_stride(rows, wp);
        for m in 0..mult {
            let k = ch * mult + m;
            // One copy of dy per plane when each channel has one output channel.
            if rho == 0 || mult > 1 {
                let lead = t.rows.lead as usize;
                let left = t.cols.lead as usize;
                // Only dy's rectangle is ever written: the padding around it keeps the
                // zeros the scratch was allocated with, for every plane.
                for i in 0..oh {
                    let src = yd.offset(b, k, i, 0);
                    let at = (i + lead) * wp + left;
                    dyp[at..at + ow].copy_from_slice(&dy[src..src + ow]);
                }
            }
            for sigma in 0..nw {
                let (lo, hi) = t.ranges[rho * nw + sigma];
                let n = hi - lo;
                let base = wd.offset(k, 0, 0, 0);
                for (wt, &tap) in wts.iter_mut().zip(&t.taps[lo..hi]) {
                    *wt = w[base + tap];
                }
                let out = &mut bufs[sigma * stride..][..stride];
                phase_sum(out, dyp, &t.offs[lo..hi], &wts[..n], m > 0);
            }
        }
        for i in 0..rows {
            let ih = rho + sh * i;
            let off = xd.offset(b, ch, ih, 0);
            // SAFETY: plane (b, ch) of dx is written by this work item alone.
            let row = unsafe { dx.slice_mut(off, wi) };
            write_row::<IN_REGISTERS>(row, bufs, stride, i * wp, sw, counts_w, alpha, beta);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
fn plane_avx512(
    _: Avx512,
    p: &ConvProblem,
    t: &Tables,
    dy: &[f32],
    w: &[f32],
    dx: &SharedOut<'_>,
    ab: (f32, f32),
    item: usize,
    scratch: &mut [f32],
) {
    plane::<true>(p, t, dy, w, dx, ab, item, scratch);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn plane_avx2(
    _: Avx2,
    p: &ConvProblem,
    t: &Tables,
    dy: &[f32],
    w: &[f32],
    dx: &SharedOut<'_>,
    ab: (f32, f32),
    item: usize,
    scratch: &mut [f32],
) {
    plane::<false>(p, t, dy, w, dx, ab, item, scratch);
}

/// The phased path over every plane of dx.
fn run_phased(
    ctx: &ExecContext<'_>,
    p: &ConvProblem,
    (rows, cols): (Span, Span),
    dy: &[f32],
    w: &[f32],
    dx: &mut [f32],
    ab: (f32, f32),
) -> Result<()> {
    let t = tables(p, rows, cols)?;
    let [n, c, h, w_] = p.x().dims();
    if n * c * h * w_ == 0 {
        return Ok(());
    }
    let dx = SharedOut::new(dx);
    // The last element of dx lies in the buffer (every element below it then does).
    assert!(p.x().offset(n - 1, c - 1, h - 1, w_ - 1) < dx.len());
    let len = rows.extent * cols.extent + LANES + scratch_phases(p, cols);
    let init = || crate::alloc::try_vec(len, 0.0, "depthwise backward-data planes");
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(tok) = Avx512::new(ctx.features) {
            return for_each_with(ctx, n * c, init, |s, i| {
                // SAFETY: the token proves the CPU runs AVX-512F.
                unsafe { plane_avx512(tok, p, &t, dy, w, &dx, ab, i, s) }
            });
        }
        if let Some(tok) = Avx2::new(ctx.features) {
            return for_each_with(ctx, n * c, init, |s, i| {
                // SAFETY: the token proves the CPU runs AVX2 and FMA.
                unsafe { plane_avx2(tok, p, &t, dy, w, &dx, ab, i, s) }
            });
        }
    }
    for_each_with(ctx, n * c, init, |s, i| {
        plane::<false>(p, &t, dy, w, &dx, ab, i, s)
    })
}

impl Algorithm<ConvBackwardData> for DepthwiseBwdData {
    fn name(&self) -> &'static str {
        "depthwise"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        // The phased path takes channel multipliers too (their rotated problem is not
        // depthwise).
        if phased(p).is_some() {
            return check_problem(p, OpKind::ConvBackwardData);
        }
        self.via.check(p)
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        if phased(p).is_some() {
            0
        } else {
            self.via.workspace_bytes(p)
        }
    }
    fn deterministic(&self) -> bool {
        self.via.deterministic()
    }
    fn accuracy(&self) -> Accuracy {
        self.via.accuracy()
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        self.via.cost_features(p)
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdDataInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let Some(geo) = phased(p) else {
            return self.via.run(ctx, p, inputs, out, workspace);
        };
        let dy = inputs.dy.f32("dy")?;
        let w = inputs.w.f32("w")?;
        let dx = out.f32("dx")?;
        run_phased(ctx, p, geo, dy, w, dx, (inputs.alpha, inputs.beta))
    }
}
