//! `implicit_gemm` backward filter: per group, dW = Σ over every output position of the batch
//! of patches(x) · dYᵀ as one GEMM whose depth is the batch's output positions, both operands
//! packed straight into the engine's panels. Nothing is materialised: no workspace (cuDNN's
//! zero-workspace BWD_FILTER_ALGO_0 and ALGO_3 serve the same place in a fallback chain).
//!
//! Depth step p is output position q = p mod OH·OW of image n = p div OH·OW. A panel holds, per
//! depth step, a vector's worth of rows (taps or output channels) side by side, so both
//! operands are packed position-major:
//! - dy (the group's output channels) and, for a 1x1 stride-1 problem, x (the image is the
//!   patch matrix) are strided matrices per image: each run of positions inside one image
//!   (and one output row, unless the positions flatten) is packed by the engine's own panel
//!   packer (the vectorised transpose where positions are unit-stride, channels-last
//!   tensors as contiguous rows);
//! - a 1x1 window with a stride, unpadded: x subsampled is the patch matrix, packed the same
//!   way one output row at a time ([`subsampled_x`]);
//! - otherwise x's patches come from the forward's strip packer (tap-major strips of
//!   positions, zero in the padding) and are transposed into the panel in registers.
//!
//! Operands the engine can read in place are not packed at all: dy one stride along the
//! depth (NHWC-like dy over the whole batch, or one image) and, 1x1 stride 1, x likewise.
//! NCHW-like dy, whose images are not one stride apart, takes one product per image (beta 1
//! after the first) where an image has at least [`IN_PLACE_MIN_POSITIONS`] positions, so
//! that it is read in place; smaller images take one product over the batch, packed.
//!
//! The frame: taps as the engine's rows (its vector side) and the output channels as its
//! columns, or the other way round where the output channels are fewer or fill the register
//! tiles better (unless only the first reads dy in place); dw is written in either frame
//! through C's strides, no buffer.
//!
//! - **Declines:** a filter whose taps are not in x's tap order (a KRSC filter with NCHW-like
//!   x, KCRS with NHWC-like x) and convolution mode (flipped taps): dw is then not one strided
//!   matrix of the product.
//! - **Deterministic:** every dw element is computed by one thread, its depth in the engine's
//!   fixed blocks and order, whatever the thread count.

use crate::conv::{default_cost_features, ExecContext};
use crate::cpu::Features;
use crate::desc::{ConvProblem, OpKind};
use crate::error::{Error, Result};
use crate::gemm::{gemm_engine, transposer_for, Epilogue, PackA, PackB, StridedMatrix, Transposer};
use crate::op::conv_bwd::check_problem;
use crate::op::{
    Accuracy, Algorithm, ConvBackwardFilter, ConvBwdFilterInputs, TensorMut, COST_FEATURES,
};

use super::explicit_bwd_filter::{channels_as_rows, IN_PLACE_MIN_POSITIONS};
use super::geometry::{Block, Geometry};
use super::patches::StripScratch;

/// The `implicit_gemm` backward-filter algorithm.
pub(crate) struct ImplicitGemmBwdFilter;

pub(crate) static IMPLICIT_GEMM_BWD_FILTER: ImplicitGemmBwdFilter = ImplicitGemmBwdFilter;

/// Positions per strip of the patch packer (its widest vectorised strip).
const CHUNK: usize = super::patches::STRIP;

/// Where one operand's rows come from.
enum Source<'a> {
    /// A strided matrix per image: row r, position q = (i, j) of image n at
    /// `base + n·ns + r·rs + i·hs + j·cs`.
    Strided {
        /// The tensor's name, for errors.
        name: &'static str,
        data: &'a [f32],
        base: usize,
        ns: usize,
        rs: usize,
        hs: usize,
        cs: usize,
    },
    /// x's patches of group g, one row per tap of the geometry.
    Patches {
        geo: &'a Geometry,
        x: &'a [f32],
        g: usize,
    },
}

/// One operand of the product: `rows` rows by the batch's output positions, packed
/// position-major (element (row i, depth p) of a micro-panel at `p·w + i`).
struct Rows<'a> {
    src: Source<'a>,
    rows: usize,
    /// The first image (depth step 0 is its first output position) and the depth.
    n0: usize,
    depth: usize,
    /// Output positions per image and per output row.
    positions: usize,
    ow: usize,
    /// Whether an image's positions are one stride apart (else runs stop at each row).
    flat: bool,
    features: Features,
    tr: Option<&'static Transposer>,
}

impl<'a> Rows<'a> {
    /// When the operand is a strided matrix whose depth is one stride throughout (one image,
    /// or images one image's positions apart): its data from the first element, the row
    /// stride and the depth stride, checked to lie inside the data.
    fn affine(&self) -> Option<(&'a [f32], usize, usize)> {
        let Source::Strided {
            data,
            base,
            ns,
            rs,
            cs,
            ..
        } = self.src
        else {
            return None;
        };
        let one_image = self.depth <= self.positions;
        if !self.flat || !(one_image || ns == self.positions.checked_mul(cs)?) {
            return None;
        }
        let start = self.n0.checked_mul(ns)?.checked_add(base)?;
        let d = data.get(start..)?;
        // Every element of the operand lies inside the data.
        StridedMatrix::new(d, self.rows, self.depth, rs, cs)?;
        Some((d, rs, cs))
    }

    /// Rows `r0 .. r0 + count` at depths `p0 .. p0 + kc` as micro-panels of `w` rows.
    fn pack(
        &self,
        r0: usize,
        count: usize,
        p0: usize,
        kc: usize,
        w: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        if kc == 0 {
            return Ok(());
        }
        let chunk = CHUNK;
        // The patch packer's scratch, made at its first use.
        let mut strips: Option<(StripScratch, Vec<f32>)> = None;
        for (qi, panel) in dst.chunks_exact_mut(kc * w).enumerate() {
            let pr0 = r0 + qi * w;
            let rv = w.min(r0 + count - pr0);
            if let Some((_, strip)) = strips.as_mut() {
                // Rows past the operand's stay zero through every strip of the panel.
                strip[rv * chunk..].fill(0.0);
            }
            let mut p = p0;
            while p < p0 + kc {
                let (n, q) = (self.n0 + p / self.positions, p % self.positions);
                let mut len = (p0 + kc - p).min(self.positions - q);
                if !self.flat {
                    len = len.min(self.ow - q % self.ow);
                }
                let out = &mut panel[(p - p0) * w..(p - p0 + len) * w];
                match &self.src {
                    Source::Strided {
                        name,
                        data,
                        base,
                        ns,
                        rs,
                        hs,
                        cs,
                    } => {
                        let off = base + n * ns + (q / self.ow) * hs + (q % self.ow) * cs;
                        let m = data
                            .get(off..)
                            .and_then(|d| StridedMatrix::new(d, self.rows, len, *rs, *cs))
                            .ok_or_else(|| {
                                Error::bad(*name, off, "the descriptors were checked against it")
                            })?
                            .with_transposer(self.tr);
                        m.pack_panel(pr0, rv, 0, len, w, out);
                    }
                    Source::Patches { geo, x, g } => {
                        let (sc, strip) = match strips {
                            Some(ref mut s) => s,
                            None => strips.insert((
                                StripScratch::new(geo, chunk, w)?,
                                crate::alloc::try_vec(w * chunk, 0f32, "the patch strips")?,
                            )),
                        };
                        let block = Block {
                            n,
                            g: *g,
                            p0: 0,
                            np: 0,
                        };
                        let xbase = geo.x_base(&block);
                        let taps = &geo.taps[pr0..pr0 + rv];
                        for c in (0..len).step_by(chunk) {
                            let l = chunk.min(len - c);
                            geo.pack_strip(
                                self.features,
                                x,
                                xbase,
                                q + c,
                                l,
                                chunk,
                                taps,
                                strip,
                                chunk,
                                sc,
                            );
                            let o = &mut out[c * w..(c + l) * w];
                            // Whole strips of the transpose, then the rest element-wise.
                            let mut j = 0;
                            if let Some(tr) = self.tr {
                                while j + tr.strip <= l {
                                    // SAFETY: the family's features are this CPU's (the
                                    // context's); rows i < w of `strip` hold `chunk` floats
                                    // from column j on, j + tr.strip ≤ l ≤ chunk; `o` holds
                                    // rows j .. j + tr.strip of w floats.
                                    unsafe {
                                        tr.strip_rows(
                                            strip.as_ptr().add(j),
                                            chunk,
                                            w,
                                            o.as_mut_ptr().add(j * w),
                                            w,
                                        )
                                    };
                                    j += tr.strip;
                                }
                            }
                            for (jj, row) in o.chunks_exact_mut(w).enumerate().skip(j) {
                                for (i, v) in row.iter_mut().enumerate() {
                                    *v = strip[i * chunk + jj];
                                }
                            }
                        }
                    }
                }
                p += len;
            }
        }
        Ok(())
    }
}

impl PackA for Rows<'_> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        self.pack(i0, mc, p0, kc, mr, dst)
    }
    fn in_place(&self) -> Option<(&[f32], usize)> {
        match self.affine()? {
            (d, 1, cs) => Some((d, cs)),
            _ => None,
        }
    }
}

impl PackB for Rows<'_> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        self.pack(j0, nc, p0, kc, nr, dst)
    }
    fn in_place_b(&self) -> Option<(&[f32], usize)> {
        match self.affine()? {
            (d, rs, 1) => Some((d, rs)),
            _ => None,
        }
    }
    fn in_place_b_rows(&self) -> Option<(&[f32], usize)> {
        match self.affine()? {
            (d, 1, cs) => Some((d, cs)),
            _ => None,
        }
    }
}

/// Why the algorithm declines `p`, if it does.
fn declines(p: &ConvProblem) -> Option<String> {
    let geo = Geometry::shape(p);
    if !geo.filter_contiguous {
        return Some(
            "the filter's taps are not in x's order (a KRSC filter with NCHW-like x, KCRS with \
             NHWC-like x, or convolution mode)"
                .into(),
        );
    }
    None
}

impl Algorithm<ConvBackwardFilter> for ImplicitGemmBwdFilter {
    fn name(&self) -> &'static str {
        "implicit_gemm"
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)?;
        match declines(p) {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
    fn workspace_bytes(&self, _p: &ConvProblem) -> usize {
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
        let dw = out.f32("dw")?;
        let geo = Geometry::new(p)?;
        let [n, _, oh, ow] = p.y().dims();
        let (cg, kg, taps) = (geo.cg, geo.kg, geo.depth);
        let (xs, ys) = (geo.xs, geo.ys);
        let ks = p.w().strides()[0];
        let positions = oh * ow;
        let plan = plan(&geo);
        let (images, depth) = if plan.per_image {
            (n, positions)
        } else {
            (1, n * positions)
        };
        let tr = transposer_for(ctx.features);
        let rows = |src, rows, n0| Rows {
            src,
            rows,
            n0,
            depth,
            positions,
            ow,
            flat: geo.y_flat,
            features: ctx.features,
            tr,
        };
        // x read as the patch matrix, at these steps along its rows and columns.
        let x_steps = if geo.x_is_matrix {
            Some([1, 1])
        } else {
            subsampled_x(p)
        };
        let epi = Epilogue::new();
        for g in 0..p.groups() {
            let c = &mut dw[g * kg * ks..];
            for n0 in 0..images {
                let grads = rows(
                    Source::Strided {
                        name: "dy",
                        data: dy,
                        base: g * kg * ys[1],
                        ns: ys[0],
                        rs: ys[1],
                        hs: ys[2],
                        cs: ys[3],
                    },
                    kg,
                    n0,
                );
                let patches = if let Some([sh, sw]) = x_steps {
                    let src = Source::Strided {
                        name: "x",
                        data: x,
                        base: g * cg * xs[1],
                        ns: xs[0],
                        rs: xs[1],
                        hs: sh * xs[2],
                        cs: sw * xs[3],
                    };
                    // Subsampled, output rows are not one stride apart in x (unless there
                    // is one).
                    let flat = if geo.x_is_matrix { geo.y_flat } else { oh == 1 };
                    Rows {
                        flat,
                        ..rows(src, cg, n0)
                    }
                } else {
                    rows(Source::Patches { geo: &geo, x, g }, taps, n0)
                };
                // Images after the first add to the first one's product.
                let beta = if n0 == 0 { inputs.beta } else { 1.0 };
                let alpha = inputs.alpha;
                // dw (taps × K/g): element (t, k) at k·ks + t.
                if plan.swapped {
                    gemm_engine(
                        ctx,
                        kg,
                        taps,
                        depth,
                        alpha,
                        &grads,
                        &patches,
                        beta,
                        c,
                        [ks, 1],
                        &epi,
                    )?;
                } else {
                    gemm_engine(
                        ctx,
                        taps,
                        kg,
                        depth,
                        alpha,
                        &patches,
                        &grads,
                        beta,
                        c,
                        [1, ks],
                        &epi,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// The strides (sh, sw) where x subsampled is the patch matrix: a 1x1 filter with a stride
/// other than 1, no top or left padding and every output position on a pixel of x (ResNet's
/// strided 1x1 layers). Its rows are then read straight from x at those steps, as a strided
/// matrix per output row, rather than through the patch strips (whose per-tap windows were
/// half the time of ResNet-50's at batch 8).
fn subsampled_x(p: &ConvProblem) -> Option<[usize; 2]> {
    let (x, y, c) = (p.x(), p.y(), p.conv());
    let pad = c.padding();
    let [sh, sw] = c.stride();
    let fits =
        |o: usize, st: usize, n: usize| o == 0 || (o - 1).checked_mul(st).is_some_and(|v| v < n);
    (p.w().r() == 1
        && p.w().s() == 1
        && [sh, sw] != [1, 1]
        && pad.top == 0
        && pad.left == 0
        && fits(y.h(), sh, x.h())
        && fits(y.w(), sw, x.w()))
    .then_some([sh, sw])
}

/// How a problem is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    /// The output channels as the engine's rows (else the taps).
    swapped: bool,
    /// One product per image, so that dy (or x, 1x1) is read in place, rather than one
    /// over the whole batch.
    per_image: bool,
}

fn plan(geo: &Geometry) -> Plan {
    let ys = geo.ys;
    let xs = geo.xs;
    // dy read in place: as B where its positions are unit-stride, as A (or B by rows) where
    // its channels are; x likewise, 1x1 stride 1 only, as B where its positions are
    // unit-stride.
    let dy_as_b_only = ys[3] == 1 && ys[1] != 1;
    let x_as_b = geo.x_is_matrix && xs[3] == 1;
    let swapped = if dy_as_b_only && !x_as_b {
        false
    } else {
        channels_as_rows(geo.kg, geo.depth)
    };
    // The whole batch is one stride along the depth for dy: one product.
    let batch_affine = geo.y_flat && ys[0] == geo.positions * ys[3];
    let per_image = !batch_affine && geo.y_flat && geo.positions >= IN_PLACE_MIN_POSITIONS;
    Plan { swapped, per_image }
}
