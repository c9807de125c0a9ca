//! [`GemmConv`], the convolution as GEMMs given how the patches reach the engine, with its
//! [`ConvAlgorithm`] implementation, and one block's GEMM with the epilogue mapped onto the
//! engine's ([`Geometry::gemm`]).

use crate::conv::{
    default_cost_features, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, COST_FEATURES,
};
use crate::desc::ConvProblem;
use crate::error::Result;
use crate::gemm::{self, PackA, PackB};
use crate::runtime::Carve;

use super::cost::{frame_cost, gemm_positions};
use super::geometry::{Block, Frame, Geometry};
use super::packed_filter::Filter;
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
        self.workspace_for(&Geometry::shape(problem))
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
        Geometry::new(problem)?.prepare(w, ctx).map(Some)
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
        let geo = Geometry::new(problem)?;
        let features = ctx.features;
        let copied = self.copied_positions(&geo);
        let (bp, col) = match copied {
            Some(bp) => (bp, Carve::new(workspace).take::<f32>(geo.depth * bp)?),
            None => (usize::MAX, &mut [][..]),
        };
        for block in geo.blocks(bp)? {
            let filter = match w {
                AlgoWeights::Plain(w) => geo.filter(w, block.g, features),
                AlgoWeights::Prepared(d) => geo.prepared_filter(d, block.g, ctx)?,
            };
            if geo.x_is_matrix || copied.is_some() {
                let m = if geo.x_is_matrix {
                    geo.x_matrix(x, &block, features)
                } else {
                    geo.im2col(ctx, x, &block, col)?;
                    geo.col_matrix(col, block.np, features)
                };
                let patches = match geo.frame {
                    Frame::Positions => Operand::A(&m),
                    Frame::Channels => Operand::B(&m),
                };
                geo.gemm(ctx, &block, patches, &filter, y, epi)?;
            } else {
                let patches = Patches {
                    geo: &geo,
                    x,
                    block,
                    features,
                };
                let operand = match geo.frame {
                    Frame::Positions => Operand::A(&patches),
                    Frame::Channels => Operand::B(&patches),
                };
                geo.gemm(ctx, &block, operand, &filter, y, epi)?;
            }
        }
        Ok(())
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
