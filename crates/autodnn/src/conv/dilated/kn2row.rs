//! `kn2row`: a dilated convolution as one GEMM per kernel tap over the outputs the tap
//! reaches inside the image.
//!
//! Tap (r, s) adds w\[·, ·, r, s\] · x shifted by (r·dh − top, s·dw − left) to every output
//! whose shifted input lies inside the image: a rectangle of output rows and columns
//! ([`crate::conv::inside_columns`] per dimension). Per image, group and block of the
//! rectangle's rows, the tap's filter (output channels × input channels, the engine's A:
//! its vector side, whose register tiles the output channels fill where the rectangles'
//! positions would leave a partial tile) multiplies the block's inputs (input channels ×
//! positions, B: x's own rows where the block is whole rows of x, else copied channel-major
//! into the workspace), added into an f32 accumulator of the image's outputs: straight into
//! it when the rectangle spans whole output rows (its positions are then consecutive),
//! through a scratch block otherwise. A tap whose rectangle is empty (wholly
//! in the padding) costs nothing, so atrous layers on small images (dilation 12 on 33x33:
//! 43% of the products are with padding) compute only their real products. The epilogue
//! is applied when the accumulator is written into y.
//!
//! - **Wins** on dilated layers with many channels, where the other GEMM algorithms compute
//!   the padding's products and Winograd declines.
//! - **Workspace:** the accumulator (K·OH·OW floats), one copied block (C/g channels × up to
//!   [`BLOCK_BYTES`] / 4 / (C/g) positions, whole output rows, at least one row) and its
//!   scratch output (K/g × the same positions).
//! - **Declines:** dense kernels, and kernels of more than [`MAX_KERNEL_SIDE`] rows or
//!   columns.
//! - **Prepared weights:** each tap's filter packed once into the engine's A panels
//!   ([`crate::conv::gemm::prepare_a_panels`]), read in place by the calls under the same
//!   instruction-set cap (repacked from the panels under another), after a header the run
//!   checks. On d8_17 (1024 channels at 17x17, dilation 8) this and the frame took the call
//!   from 29 to 25.6 ms: the filter had been transposed into panels at every call, and the
//!   positions (289, 153 and 81 per tap) had left a tenth of the 32-row tiles empty.
//! - **Deterministic:** yes (the engine's results do not depend on the thread count; taps
//!   are added in a fixed order).

use crate::conv::gemm::{a_panels_len, prepare_a_panels, prepared_a_panels};
use crate::conv::{
    default_cost_features, inside_columns, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext,
    COST_FEATURES,
};
use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::gemm::{self, PackA, StridedMatrix};
use crate::runtime::Carve;

use super::check_dilated;

/// `kn2row`.
pub(crate) const KN2ROW: Kn2Row = Kn2Row;

/// The algorithm (see the module's documentation).
pub(crate) struct Kn2Row;

/// Target bytes of one copied block of inputs.
pub const BLOCK_BYTES: usize = 8 << 20;

/// Most kernel rows or columns accepted: each tap is a GEMM of its own, and the size queries
/// walk the kernel's rows and columns.
pub const MAX_KERNEL_SIDE: usize = 1024;

/// Magic number opening `kn2row`'s prepared weights (7406 was the transposed filters before
/// they were stored as the engine's panels).
const PREPARED_MAGIC: f32 = 7408.0;
/// Floats before the taps' filters: magic, K/g, C/g, taps, groups.
const PREPARED_HEADER: usize = 5;

/// One tap of the kernel and the outputs it reaches inside the image.
#[derive(Clone, Copy)]
struct TapRegion {
    /// Input offsets of the tap's window origin: r·dh − top, s·dw − left.
    shift: [i64; 2],
    /// The filter element (r, s) the tap multiplies by (flipped in convolution mode).
    fr: usize,
    fs: usize,
    /// Output rows `rows.0 .. rows.1` and columns `cols.0 .. cols.1`.
    rows: (usize, usize),
    cols: (usize, usize),
}

/// The problem's sizes, as the run and the workspace query use them.
struct Shape {
    cg: usize,
    kg: usize,
    oh: usize,
    ow: usize,
    /// Output rows per copied block.
    rows_per_block: usize,
}

impl Shape {
    fn of(p: &ConvProblem) -> Shape {
        let [_, k, oh, ow] = p.y().dims();
        let g = p.groups();
        let cg = p.c_per_group();
        let per_position = cg.saturating_mul(4).max(1);
        let positions = (BLOCK_BYTES / per_position).max(1);
        let rows_per_block = (positions / ow.max(1)).clamp(1, oh.max(1));
        Shape {
            cg,
            kg: k / g.max(1),
            oh,
            ow,
            rows_per_block,
        }
    }

    /// Floats of the accumulator, of the copied blocks and of the blocks' scratch outputs:
    /// the most any tap's first (largest) block uses, so that the sum is the run's exact
    /// high-water mark. O(R + S): a tap's rectangle is its row range times its column range.
    fn workspace_floats(&self, p: &ConvProblem) -> [usize; 3] {
        if p.w().r().max(p.w().s()) > MAX_KERNEL_SIDE {
            return [0; 3]; // declined
        }
        let acc = p.y().c().saturating_mul(self.oh).saturating_mul(self.ow);
        let [sh, _] = p.conv().stride();
        // The largest first block of any row range, and of those of more than one row.
        let first = |r: &(usize, usize)| (r.1 - r.0).min(self.rows_per_block);
        let rb_all = row_ranges(p).map(|r| first(&r)).max().unwrap_or(0);
        let rb_multi = row_ranges(p)
            .map(|r| first(&r))
            .filter(|&b| b > 1)
            .max()
            .unwrap_or(0);
        let (mut blk, mut scratch) = (0usize, 0usize);
        for (si, c) in col_ranges(p).enumerate() {
            let n = c.1 - c.0;
            if n == 0 || rb_all == 0 {
                continue;
            }
            let gathered_rows = if self.in_place(p, si, n) {
                if sh == 1 {
                    0
                } else {
                    rb_multi
                }
            } else {
                rb_all
            };
            blk = blk.max(self.cg.saturating_mul(gathered_rows).saturating_mul(n));
            if n != self.ow {
                scratch = scratch.max(self.kg.saturating_mul(rb_all).saturating_mul(n));
            }
        }
        [acc, blk, scratch]
    }

    /// Whether the blocks of kernel column `si` (reaching `cols` output columns) are x's own
    /// rows, read in place: whole output rows of a row-major image, unshifted in w, one
    /// output row per input row (stride 1 in w) and x's rows as long as y's.
    fn in_place(&self, p: &ConvProblem, si: usize, cols: usize) -> bool {
        let xs = p.x().strides();
        let [_, sw] = p.conv().stride();
        let [_, dw] = p.conv().dilation();
        cols == self.ow
            && si.checked_mul(dw).and_then(|v| i64::try_from(v).ok())
                == Some(p.conv().padding().left)
            && sw == 1
            && xs[3] == 1
            && xs[2] == self.ow
    }
}

/// The output rows kernel row `r` reaches inside the image (`dim` 0), or the output columns
/// kernel column `r` does (`dim` 1).
fn tap_range(p: &ConvProblem, dim: usize, r: usize) -> (usize, usize) {
    let pad = p.conv().padding();
    let lead = [pad.top, pad.left][dim];
    let st = p.conv().stride()[dim];
    let d = p.conv().dilation()[dim];
    let size = p.x().dims()[2 + dim];
    let out = p.y().dims()[2 + dim];
    inside_columns(r as i64 * d as i64 - lead, st as i64, size, out)
}

/// Each kernel row's output rows ([`tap_range`] of dimension 0), without allocating.
fn row_ranges(p: &ConvProblem) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..p.w().r()).map(move |r| tap_range(p, 0, r))
}

/// Each kernel column's output columns.
fn col_ranges(p: &ConvProblem) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..p.w().s()).map(move |s| tap_range(p, 1, s))
}

/// The taps of `p` with their output rectangles (empty ones included), row by row.
fn tap_regions(p: &ConvProblem) -> impl Iterator<Item = TapRegion> + '_ {
    let (r_, s_) = (p.w().r(), p.w().s());
    let pad = p.conv().padding();
    let [dh, dw] = p.conv().dilation();
    let flip = p.conv().mode() == ConvMode::Convolution;
    (0..r_).flat_map(move |r| {
        (0..s_).map(move |s| {
            let (fr, fs) = if flip {
                (r_ - 1 - r, s_ - 1 - s)
            } else {
                (r, s)
            };
            TapRegion {
                shift: [
                    r as i64 * dh as i64 - pad.top,
                    s as i64 * dw as i64 - pad.left,
                ],
                fr,
                fs,
                rows: tap_range(p, 0, r),
                cols: tap_range(p, 1, s),
            }
        })
    })
}

/// Copies the inputs of output rows `r0 .. r0 + rows` of tap `t` (one image and group from
/// `xbase`), channel-major: `dst[c·m + i·cols + j]`, m = rows · cols, for the `dst.len() / m`
/// channels of the group.
fn gather(
    x: &[f32],
    xbase: usize,
    xs: [usize; 4],
    (r0, rows): (usize, usize),
    t: &TapRegion,
    [sh, sw]: [usize; 2],
    dst: &mut [f32],
) {
    let cols = t.cols.1 - t.cols.0;
    let m = rows * cols;
    let cg = dst.len() / m;
    // A rectangle one column wide never steps (its stride times x's column stride may
    // overflow).
    let step = if cols > 1 { sw * xs[3] } else { 0 };
    // Inside the image: the rectangle's rows and columns are.
    let iw0 = ((t.cols.0 * sw) as i64 + t.shift[1]) as usize;
    for c in 0..cg {
        let dst = &mut dst[c * m..(c + 1) * m];
        for i in 0..rows {
            let ih = (((r0 + i) * sh) as i64 + t.shift[0]) as usize;
            let first = xbase + c * xs[1] + ih * xs[2] + iw0 * xs[3];
            let row = &mut dst[i * cols..(i + 1) * cols];
            if step == 1 {
                row.copy_from_slice(&x[first..first + cols]);
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = x[first + j * step];
                }
            }
        }
    }
}

/// Tap `t`'s filter of group `gi` in the plain weights, output channels × input channels.
fn tap_filter<'a>(
    p: &ConvProblem,
    sh: &Shape,
    w: &'a [f32],
    gi: usize,
    t: &TapRegion,
    ctx: &ExecContext<'_>,
) -> Result<StridedMatrix<'a, f32>> {
    let ws = p.w().strides();
    let at = p.w().offset(gi * sh.kg, 0, t.fr, t.fs);
    w.get(at..)
        .and_then(|w| StridedMatrix::new(w, sh.kg, sh.cg, ws[0], ws[1]))
        .map(|m| m.for_features(ctx.features))
        .ok_or_else(|| Error::bad("w", "its length", "too short for the filter"))
}

/// The share of the definition's products that are with inputs inside the image.
fn real_share(p: &ConvProblem) -> f64 {
    let [_, _, oh, ow] = p.y().dims();
    let all = (p.w().r() * p.w().s()) as f64 * (oh * ow) as f64;
    if all == 0.0 || p.w().r().max(p.w().s()) > MAX_KERNEL_SIDE {
        return 1.0; // nothing to skip, or declined
    }
    let rows: f64 = row_ranges(p).map(|r| (r.1 - r.0) as f64).sum();
    let cols: f64 = col_ranges(p).map(|c| (c.1 - c.0) as f64).sum();
    rows * cols / all
}

/// Floats of one tap's prepared filter ([`crate::conv::gemm::a_panels_len`]).
fn tap_len(sh: &Shape) -> usize {
    a_panels_len(sh.kg, sh.cg).unwrap_or(usize::MAX)
}

fn prepared_len(p: &ConvProblem) -> usize {
    let sh = Shape::of(p);
    let taps = p.w().r() * p.w().s();
    p.groups()
        .saturating_mul(taps)
        .saturating_mul(tap_len(&sh))
        .saturating_add(PREPARED_HEADER)
}

fn bad_prepared(what: &str) -> Error {
    Error::bad(
        "w",
        what,
        "prepared weights that kn2row did not make for this problem",
    )
}

impl ConvAlgorithm for Kn2Row {
    fn name(&self) -> &'static str {
        "kn2row"
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_dilated(p)?;
        let (r, s) = (p.w().r(), p.w().s());
        if r.max(s) > MAX_KERNEL_SIDE {
            return Err(format!(
                "needs a kernel of at most {MAX_KERNEL_SIDE} rows and columns, got {r}x{s}"
            ));
        }
        Ok(())
    }

    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        let [a, b, c] = Shape::of(p).workspace_floats(p);
        a.saturating_add(b)
            .saturating_add(c)
            .saturating_mul(std::mem::size_of::<f32>())
    }

    fn deterministic(&self) -> bool {
        true
    }

    /// The default features with the products' terms scaled to the products inside the
    /// image (the ones this algorithm computes).
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let mut f = default_cost_features(p, self.workspace_bytes(p));
        let share = real_share(p);
        for i in [1, 4, 5, 7] {
            f[i] *= share;
        }
        f
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let sh = Shape::of(p);
        let g = p.groups();
        let fd = p.w();
        let taps = fd.r() * fd.s();
        let mut out = crate::alloc::try_vec(prepared_len(p), 0.0, "kn2row's filter")?;
        out[..PREPARED_HEADER].copy_from_slice(&[
            PREPARED_MAGIC,
            sh.kg as f32,
            sh.cg as f32,
            taps as f32,
            g as f32,
        ]);
        let slots = out[PREPARED_HEADER..].chunks_exact_mut(tap_len(&sh));
        let filters = (0..g).flat_map(|gi| tap_regions(p).map(move |t| (gi, t)));
        for (slot, (gi, t)) in slots.zip(filters) {
            prepare_a_panels(
                ctx,
                &tap_filter(p, &sh, w, gi, &t, ctx)?,
                sh.kg,
                sh.cg,
                slot,
            )?;
        }
        Ok(Some(out))
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let sh = Shape::of(p);
        let (g, k) = (p.groups(), p.y().c());
        let taps = p.w().r() * p.w().s();
        if let AlgoWeights::Prepared(d) = w {
            let header = [
                PREPARED_MAGIC,
                sh.kg as f32,
                sh.cg as f32,
                taps as f32,
                g as f32,
            ];
            if d.len() != prepared_len(p) || d[..PREPARED_HEADER] != header {
                return Err(bad_prepared("its header or length"));
            }
        }
        let [acc_n, blk_n, out_n] = sh.workspace_floats(p);
        let mut carve = Carve::new(workspace);
        let acc = carve.take::<f32>(acc_n)?;
        let blk = carve.take::<f32>(blk_n)?;
        let scratch = carve.take::<f32>(out_n)?;
        let (xs, ys) = (p.x().strides(), p.y().strides());
        let [sh_, sw_] = p.conv().stride();
        let npos = sh.oh * sh.ow;
        for n in 0..p.x().n() {
            acc.fill(0.0);
            for gi in 0..g {
                let acc_g = &mut acc[gi * sh.kg * npos..(gi + 1) * sh.kg * npos];
                for (ti, t) in tap_regions(p).enumerate() {
                    let cols = t.cols.1 - t.cols.0;
                    // The tap's filter, output channels × input channels: the engine's A.
                    let (strided, panels);
                    let filter: &dyn PackA = match w {
                        AlgoWeights::Prepared(d) => {
                            let at = PREPARED_HEADER + (gi * taps + ti) * tap_len(&sh);
                            panels = prepared_a_panels(&d[at..], sh.kg, sh.cg, ctx)?;
                            &panels
                        }
                        AlgoWeights::Plain(wp) => {
                            strided = tap_filter(p, &sh, wp, gi, &t, ctx)?;
                            &strided
                        }
                    };
                    let mut r0 = t.rows.0;
                    while r0 < t.rows.1 && cols > 0 {
                        let rows = sh.rows_per_block.min(t.rows.1 - r0);
                        let m = rows * cols;
                        let xbase = n * xs[0] + gi * sh.cg * xs[1];
                        let ih0 = (r0 * sh_) as i64 + t.shift[0];
                        // The block's inputs, input channels × positions: the engine's B.
                        let inputs =
                            if sh.in_place(p, ti % p.w().s(), cols) && (sh_ == 1 || rows == 1) {
                                let at = xbase + ih0 as usize * xs[2];
                                StridedMatrix::new(&x[at..], sh.cg, m, xs[1], 1)
                            } else {
                                gather(
                                    x,
                                    xbase,
                                    xs,
                                    (r0, rows),
                                    &t,
                                    [sh_, sw_],
                                    &mut blk[..sh.cg * m],
                                );
                                StridedMatrix::new(&blk[..sh.cg * m], sh.cg, m, m, 1)
                            }
                            .ok_or_else(|| Error::bad("workspace", m, "block out of range"))?;
                        // Whole output rows are consecutive positions of the accumulator,
                        // added into in place; other blocks go through the scratch output.
                        let whole = cols == sh.ow;
                        let (c, beta, ld) = if whole {
                            (&mut acc_g[r0 * sh.ow..], 1.0, npos)
                        } else {
                            (&mut scratch[..sh.kg * m], 0.0, m)
                        };
                        let plain = gemm::Epilogue::new();
                        gemm::gemm_engine(
                            ctx,
                            sh.kg,
                            m,
                            sh.cg,
                            1.0,
                            filter,
                            &inputs,
                            beta,
                            c,
                            [ld, 1],
                            &plain,
                        )?;
                        if !whole {
                            for kk in 0..sh.kg {
                                for i in 0..rows {
                                    let src = &scratch[kk * m + i * cols..][..cols];
                                    let at = kk * npos + (r0 + i) * sh.ow + t.cols.0;
                                    for (o, v) in acc_g[at..at + cols].iter_mut().zip(src) {
                                        *o += *v;
                                    }
                                }
                            }
                        }
                        r0 += rows;
                    }
                }
            }
            // The epilogue, into y.
            for kk in 0..k {
                for i in 0..sh.oh {
                    for j in 0..sh.ow {
                        let off = n * ys[0] + kk * ys[1] + i * ys[2] + j * ys[3];
                        let v = acc[kk * npos + i * sh.ow + j];
                        y[off] = epi.value(v, kk, off, || y[off]);
                    }
                }
            }
        }
        Ok(())
    }
}
