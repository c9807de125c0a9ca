//! [`GemmConv`], the convolution as GEMMs given how the patches reach the engine, with its
//! [`ConvAlgorithm`] implementation, and one block's GEMM with the epilogue mapped onto the
//! engine's ([`Geometry::gemm`]).

use crate::conv::{
    default_cost_features, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, ReducedWeights,
    COST_FEATURES,
};
use crate::desc::{ConvProblem, DataType};
use crate::error::Result;
use crate::gemm::{self, PackA, PackB};
use crate::op::tensor::{narrow_at_par, tail, widen_at_par, widen_with};
use crate::op::{Tensor, TensorMut};
use crate::runtime::Carve;

use super::cost::{frame_cost, gemm_positions};
use super::geometry::{Block, Frame, Geometry};
use super::packed_filter::{Filter, PACK_ONCE_POSITIONS};
use super::patches::Patches;

impl Geometry {
    /// Runs one block's GEMM: C (the block of y) = epilogue(alpha · patches · filter), with
    /// the patches and the filter as the frame's operands.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        ctx: &ExecContext<'_>,
        b: &Block,
        patches: Operand<'_>,
        filter: &Filter<'_>,
        y: &mut [f32],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let (base, m, n, [rs, cs]) = self.c_view(b);
        let bias = epi.bias.map(|v| &v[b.g * self.kg..(b.g + 1) * self.kg]);
        let mut ge = gemm::Epilogue::new().with_activation(epi.act);
        ge = match (bias, self.frame) {
            (Some(v), Frame::Positions) => ge.with_bias_per_col(v),
            (Some(v), Frame::Channels) => ge.with_bias_per_row(v),
            (None, _) => ge,
        };
        let mut beta = epi.beta;
        if beta != 0.0 {
            if let Some(z) = epi.residual {
                if beta == 1.0 {
                    ge = ge.with_residual(&z[base..], rs, cs);
                    beta = 0.0;
                } else {
                    // beta·z through the engine's beta·C: z copied into the block first.
                    for i in 0..m {
                        for j in 0..n {
                            let o = base + i * rs + j * cs;
                            y[o] = z[o];
                        }
                    }
                }
            }
        }
        let k = self.depth;
        let c = &mut y[base..];
        match (patches, self.frame) {
            (Operand::A(a), Frame::Positions) => {
                gemm::gemm_engine(ctx, m, n, k, epi.alpha, a, filter, beta, c, [rs, cs], &ge)
            }
            (Operand::B(p), Frame::Channels) => {
                gemm::gemm_engine(ctx, m, n, k, epi.alpha, filter, p, beta, c, [rs, cs], &ge)
            }
            _ => unreachable!("the patches operand follows the frame"),
        }
    }
}

/// An operand the engine may take as A or as B.
trait Both {
    fn as_a(&self) -> &dyn PackA;
    fn as_b(&self) -> &dyn PackB;
}

impl<T: PackA + PackB> Both for T {
    fn as_a(&self) -> &dyn PackA {
        self
    }
    fn as_b(&self) -> &dyn PackB {
        self
    }
}

/// `m` as the engine operand of the frame's patches.
fn operand(frame: Frame, m: &dyn Both) -> Operand<'_> {
    match frame {
        Frame::Positions => Operand::A(m.as_a()),
        Frame::Channels => Operand::B(m.as_b()),
    }
}

/// The patches of a block as the engine operand of the frame.
pub(crate) enum Operand<'a> {
    /// [`Frame::Positions`]: A.
    A(&'a dyn PackA),
    /// [`Frame::Channels`]: B.
    B(&'a dyn PackB),
}

/// How a [`GemmConv`]'s patches reach the engine (x itself when it already is the patch
/// matrix, 1x1 stride-1 convolutions, either way).
#[derive(Clone, Copy)]
pub(crate) enum PatchSource {
    /// Copied into the workspace a block of output positions at a time (`gemm`); the function
    /// gives the positions per block.
    Copied(fn(&Geometry) -> usize),
    /// Packed by the engine straight from x ([`Patches`]: `implicit_gemm`).
    Packed,
}

/// The convolution as GEMMs (`gemm`, `implicit_gemm`): one [`ConvAlgorithm`] given how the
/// patches reach the engine.
pub(crate) struct GemmConv {
    /// The algorithm's name.
    pub(crate) name: &'static str,
    /// How the patches reach the engine.
    pub(crate) patches: PatchSource,
}

impl GemmConv {
    /// Workspace bytes of a problem of geometry `geo`: one copied block of patches.
    fn workspace_for(&self, geo: &Geometry) -> usize {
        self.copied_positions(geo)
            .map_or(0, |bp| geo.depth * bp * std::mem::size_of::<f32>())
    }

    /// Output positions per block copied into the workspace; `None` when nothing is copied.
    fn copied_positions(&self, geo: &Geometry) -> Option<usize> {
        match self.patches {
            PatchSource::Copied(positions) if !geo.x_is_matrix => Some(positions(geo)),
            _ => None,
        }
    }
}

impl ConvAlgorithm for GemmConv {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, _: &ConvProblem) -> std::result::Result<(), String> {
        Ok(())
    }

    fn workspace_bytes(&self, problem: &ConvProblem) -> usize {
        let problem = &engine_problem(problem);
        let geo = Geometry::shape(problem);
        let own = self.workspace_for(&geo);
        if problem.is_f32() {
            if packs_once(&geo) {
                return own.saturating_add(packed_filter_bytes(&geo));
            }
            return own;
        }
        let own = own.saturating_add(Chunks::bytes(problem));
        if packs_once(&geo) {
            return own.saturating_add(packed_filter_bytes(&geo));
        }
        own
    }

    fn deterministic(&self) -> bool {
        true
    }

    /// The selection heuristic's features: the defaults, except three that follow the engine
    /// ([`frame_cost`] in the frame the problem takes):
    ///
    /// 1. the micro-kernels' work as GFLOP: the GEMM's rows rounded up to whole vectors of the
    ///    register tile and the transposed tile stores (narrow outputs pay for whole vectors);
    /// 6. the engine calls, in thousands (one per image and group, or per output row): each
    ///    sets up its loops, buffers and threads (grouped and depthwise problems make many
    ///    small ones);
    /// 7. MB of the packed patch operand, which every call packs (from x itself for a 1x1
    ///    convolution): with few output channels, each packed element serves few
    ///    multiply-adds and the packing weighs as much as the products.
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let p = &engine_problem(p);
        let geo = Geometry::shape(p);
        let mut f = default_cost_features(p, self.workspace_for(&geo));
        let oh = geo.positions / geo.ow.max(1);
        let per = gemm_positions(geo.ys, oh, geo.ow).max(1);
        let gemms = (geo.n * geo.groups * (geo.positions / per)) as f64;
        let c = frame_cost(geo.frame, per, geo.kg, geo.depth, !geo.x_is_matrix);
        f[1] = 2.0 * c.work as f64 * gemms / 1e9;
        f[6] = gemms / 1e3;
        f[7] = c.packed as f64 * 4.0 * gemms / 1e6;
        f
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        Geometry::new(&engine_problem(problem))?
            .prepare(w, ctx)
            .map(Some)
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let geo = Geometry::new(&engine_problem(problem))?;
        let copied = self.copied_positions(&geo);
        let mut carve = Carve::new(workspace);
        let col = match copied {
            Some(bp) => carve.take::<f32>(geo.depth * bp)?,
            None => &mut [][..],
        };
        // Plain weights of a batch of small images: packed once for every image's GEMMs.
        let w = pack_once(ctx, &geo, &engine_problem(problem), w, &mut carve)?;
        for block in geo.blocks(copied.unwrap_or(usize::MAX))? {
            self.block(ctx, &geo, &block, Tensor::F32(x), w, y, col, epi)?;
        }
        Ok(())
    }

    fn reads_reduced(&self) -> bool {
        true
    }

    /// bf16 and f16 tensors a chunk at a time: one image when x's images lie one batch
    /// stride apart (else the whole batch), x widened into an f32 copy of the chunk (unless
    /// x is the patch matrix: the engine then packs it in its own type), each block's output
    /// computed in an f32 copy of the chunk (when y is reduced) and rounded into y right
    /// after; the copies are an image's, not the batch's (copies of the whole batch took two
    /// more passes over memory than the products: 20% of ResNet-50's time at batch 8).
    fn run_reduced(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: Tensor<'_>,
        w: ReducedWeights<'_>,
        y: &mut TensorMut<'_>,
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let problem = &engine_problem(problem);
        let p32 = problem.as_f32();
        // The operation runs bf16 x and w under allow_bf16 (exact for bf16 values).
        let geo = Geometry::new(&p32)?;
        let features = ctx.features;
        let copied = self.copied_positions(&geo);
        let chunk = Chunks::of(problem);
        let mut carve = Carve::new(workspace);
        let col = match copied {
            Some(bp) => carve.take::<f32>(geo.depth * bp)?,
            None => &mut [][..],
        };
        let wide_w;
        let w = match w {
            ReducedWeights::Prepared(d) => AlgoWeights::Prepared(d),
            ReducedWeights::Plain(Tensor::F32(w)) => AlgoWeights::Plain(w),
            ReducedWeights::Plain(t) => {
                wide_w = carve.take_aligned::<f32>(problem.w().elements(), CHUNK_ALIGN)?;
                widen_with(t, wide_w, features);
                AlgoWeights::Plain(wide_w)
            }
        };
        // Plain weights of a batch of small images packed once, as in the f32 call.
        let w = pack_once(ctx, &geo, &p32, w, &mut carve)?;
        // x read in place when it is the patch matrix (the engine packs bf16 straight into
        // its pairs), else widened a chunk at a time.
        let mut xb = if geo.x_is_matrix {
            None
        } else {
            Some(carve.take_aligned::<f32>(chunk.x_span, CHUNK_ALIGN)?)
        };
        let mut yb = match y {
            TensorMut::F32(_) => None,
            _ => Some(carve.take_aligned::<f32>(chunk.y_span, CHUNK_ALIGN)?),
        };
        // Blocks as in the f32 call: capping a reduced y's blocks at 512 KB of output (for
        // L2) made many small GEMMs, level on one thread and slower on two.
        let blocks = geo.blocks(copied.unwrap_or(usize::MAX))?;
        let per = blocks.len() / chunk.count;
        let reads_y = epi.beta != 0.0 && epi.residual.is_none();
        for (i, chunk_blocks) in blocks.chunks(per.max(1)).enumerate() {
            let (x0, y0) = (i * chunk.x_stride, i * chunk.y_stride);
            let xc = match xb.as_deref_mut() {
                Some(xb) => {
                    widen_at_par(ctx, x, x0, xb)?;
                    Tensor::F32(xb)
                }
                None => tail(x, x0),
            };
            let mut e = *epi;
            e.residual = epi.residual.map(|z| &z[y0..]);
            for b in chunk_blocks {
                let b = Block {
                    n: b.n - i * chunk.images,
                    ..*b
                };
                match (&mut *y, yb.as_deref_mut()) {
                    (TensorMut::F32(y), _) => {
                        self.block(ctx, &geo, &b, xc, w, &mut y[y0..], col, &e)?;
                    }
                    (reduced, Some(yb)) => {
                        // The block's f32 output is rounded into y right after its GEMM.
                        let (base, m, n, st) = geo.c_view(&b);
                        let mut done = Ok(());
                        if reads_y {
                            runs_of(base, m, n, st, |o, len| {
                                let r = widen_at_par(
                                    ctx,
                                    reduced.as_tensor(),
                                    y0 + o,
                                    &mut yb[o..o + len],
                                );
                                if done.is_ok() {
                                    done = r;
                                }
                            });
                        }
                        done?;
                        self.block(ctx, &geo, &b, xc, w, yb, col, &e)?;
                        let mut done = Ok(());
                        runs_of(base, m, n, st, |o, len| {
                            let r = narrow_at_par(ctx, &yb[o..o + len], reduced, y0 + o);
                            if done.is_ok() {
                                done = r;
                            }
                        });
                        done?;
                    }
                    (_, None) => unreachable!("a reduced y has its f32 copy"),
                }
            }
        }
        Ok(())
    }
}

/// The problem the engine computes: with the batch folded into the positions where every
/// image is a single pixel of a 1x1 convolution ([`ConvProblem::batch_folded`]: a fully
/// connected layer then runs one product rather than one matrix-vector product per image).
fn engine_problem(p: &ConvProblem) -> ConvProblem {
    p.batch_folded().unwrap_or(*p)
}

/// Whether plain weights are packed once into the workspace: a batch of small images.
fn packs_once(geo: &Geometry) -> bool {
    geo.n >= 2 && geo.positions <= PACK_ONCE_POSITIONS
}

/// `w` packed once into the workspace where [`packs_once`] (plain weights of a batch of
/// small images), else as it is. `geo` is the geometry of `problem` (the engine's f32 one).
fn pack_once<'w>(
    ctx: &ExecContext<'_>,
    geo: &Geometry,
    problem: &ConvProblem,
    w: AlgoWeights<'w>,
    carve: &mut Carve<'w>,
) -> Result<AlgoWeights<'w>> {
    let AlgoWeights::Plain(plain) = w else {
        return Ok(w);
    };
    if !packs_once(geo) {
        return Ok(w);
    }
    // As reported (the shape's taps: a dilated problem's geometry may drop taps that never
    // see the image).
    let buf = carve.take::<f32>(Geometry::shape(problem).prepared_len_bound())?;
    let len = geo.prepare_into(plain, ctx, buf)?;
    // The reservation holds the panels of the widest family; the part this one leaves is
    // zeroed, so that the workspace reported is the workspace used.
    buf[len..].fill(0.0);
    Ok(AlgoWeights::Prepared(&buf[..len]))
}

/// Workspace bytes of the filter packed once.
fn packed_filter_bytes(geo: &Geometry) -> usize {
    geo.prepared_len_bound().saturating_mul(4)
}

/// Calls `f(offset, len)` for each contiguous run of elements of the `m × n` view at `base`
/// with strides `[rs, cs]` (once when the whole view is contiguous).
fn runs_of(base: usize, m: usize, n: usize, [rs, cs]: [usize; 2], mut f: impl FnMut(usize, usize)) {
    if (cs == 1 && (rs == n || m == 1)) || (rs == 1 && (cs == m || n == 1)) {
        f(base, m * n); // one run: the view is contiguous
    } else if cs == 1 {
        (0..m).for_each(|i| f(base + i * rs, n));
    } else if rs == 1 {
        (0..n).for_each(|j| f(base + j * cs, m));
    } else {
        for i in 0..m {
            (0..n).for_each(|j| f(base + i * rs + j * cs, 1));
        }
    }
}

/// Alignment of [`GemmConv::run_reduced`]'s f32 copies in the workspace.
const CHUNK_ALIGN: usize = 64;

/// How [`GemmConv::run_reduced`] cuts a problem's batch: `count` chunks of `images` images,
/// chunk i's elements inside `i·x_stride .. i·x_stride + x_span` of x (likewise y).
struct Chunks {
    count: usize,
    images: usize,
    x_span: usize,
    y_span: usize,
    x_stride: usize,
    y_stride: usize,
}

impl Chunks {
    fn of(p: &ConvProblem) -> Chunks {
        // The span of one image: its last element's offset within the image, plus one.
        let image = |d: &crate::desc::TensorDesc| {
            let (dims, s) = (d.dims(), d.strides());
            1 + (1..4).map(|i| (dims[i] - 1) * s[i]).sum::<usize>()
        };
        let (x1, y1) = (image(p.x()), image(p.y()));
        let (xs0, ys0) = (p.x().strides()[0], p.y().strides()[0]);
        let n = p.x().n();
        // Only the blocks' own elements are widened and rounded, so any strides allow a
        // chunk per image; but where x's images interleave, one image's copy would span
        // about the whole tensor: the batch is then one chunk.
        if n > 1 && xs0 >= x1 {
            Chunks {
                count: n,
                images: 1,
                x_span: x1,
                y_span: y1,
                x_stride: xs0,
                y_stride: ys0,
            }
        } else {
            Chunks {
                count: 1,
                images: n,
                x_span: p.x().span(),
                y_span: p.y().span(),
                x_stride: 0,
                y_stride: 0,
            }
        }
    }

    /// Workspace bytes of the f32 copies of a reduced problem's filter, x chunk and (when y
    /// is reduced) y chunk, each with room to align it.
    fn bytes(p: &ConvProblem) -> usize {
        let c = Chunks::of(p);
        let piece = |n: usize| n.saturating_mul(4).saturating_add(CHUNK_ALIGN);
        let y = if p.y().dtype() == DataType::F32 {
            0
        } else {
            piece(c.y_span)
        };
        let x = if Geometry::shape(p).x_is_matrix {
            0
        } else {
            piece(c.x_span)
        };
        piece(p.w().elements()).saturating_add(x).saturating_add(y)
    }
}

impl GemmConv {
    /// One block's GEMM, its patches copied into `col`, read in place or packed straight
    /// from `x`.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        ctx: &ExecContext<'_>,
        geo: &Geometry,
        block: &Block,
        x: Tensor<'_>,
        w: AlgoWeights<'_>,
        y: &mut [f32],
        col: &mut [f32],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let features = ctx.features;
        let filter = match w {
            AlgoWeights::Plain(w) => geo.filter(w, block.g, features),
            AlgoWeights::Prepared(d) => geo.prepared_filter(d, block.g, ctx)?,
        };
        let operand = |m| operand(geo.frame, m);
        if geo.x_is_matrix {
            // x itself, in its own type: the engine packs bf16 straight into its pairs.
            return match x {
                Tensor::F32(x) => {
                    let m = geo.x_matrix(x, block, features);
                    geo.gemm(ctx, block, operand(&m), &filter, y, epi)
                }
                Tensor::Bf16(x) => {
                    let m = geo.x_matrix(x, block, features);
                    geo.gemm(ctx, block, operand(&m), &filter, y, epi)
                }
                Tensor::F16(x) => {
                    let m = geo.x_matrix(x, block, features);
                    geo.gemm(ctx, block, operand(&m), &filter, y, epi)
                }
            };
        }
        let x = x.f32("x")?;
        if self.copied_positions(geo).is_some() {
            geo.im2col(ctx, x, block, col)?;
            let m = geo.col_matrix(col, block.np, features);
            geo.gemm(ctx, block, operand(&m), &filter, y, epi)
        } else {
            let patches = Patches {
                geo,
                x,
                block: *block,
                features,
            };
            geo.gemm(ctx, block, operand(&patches), &filter, y, epi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::cost::forced_frame;
    use super::*;
    use crate::{Layout, ProblemSpec};

    #[test]
    fn cost_features_follow_the_engine() {
        if forced_frame().is_some() {
            return; // AUTODNN_GEMM_CONV_FRAME set for tuning: the model is bypassed.
        }
        let algo = GemmConv {
            name: "implicit_gemm",
            patches: PatchSource::Packed,
        };
        let features = |spec: &str| {
            let p = ProblemSpec::parse(spec)
                .unwrap()
                .to_problem(Layout::Nchw)
                .unwrap();
            (p.flops() / 1e9, algo.cost_features(&p))
        };
        // 16 output channels: as rows they would fill half of each 32-row vector, so the
        // frame takes the 196 positions as rows, rounded up to 224 (one engine call; its
        // packed patches are x, positions rounded up the same way).
        let (gflop, f) = features("mb1ic512ih14oc16oh14kh1ph0");
        assert_eq!(f[1], 2.0 * (224 * 16 * 512) as f64 / 1e9);
        assert!(f[1] > gflop * 224.0 / 196.0 * 0.999);
        assert_eq!(f[6], 1e-3);
        assert_eq!(f[7], (224 * 512 * 4) as f64 / 1e6);
        // 49 positions by positions as rows would round to 64: this frame takes channels,
        // and 256 channels fill their vectors (only the transposed stores remain).
        let (gflop, f) = features("mb2ic1024ih7oc256oh7kh1ph0");
        assert!(f[1] >= gflop && f[1] < 1.1 * gflop, "{} vs {gflop}", f[1]);
        assert_eq!(f[6], 2e-3, "one engine call per image");
        // Grouped: one call per image and group.
        let (_, f) = features("mb1g8ic64ih14oc64oh14kh3ph1");
        assert_eq!(f[6], 8e-3);
    }
}
