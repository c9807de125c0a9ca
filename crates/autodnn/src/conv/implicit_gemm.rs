//! `implicit_gemm`: the GEMM engine with the image patches packed straight from x.
//!
//! Computes the convolution as one GEMM per (image, group) (per output row when y's rows are
//! padded): the engine's pluggable packing ([`PackA`](crate::gemm::PackA) or
//! [`PackB`](crate::gemm::PackB)) is given the patches, so each micro-panel it packs is
//! gathered from the image directly, nothing is materialised. The GEMM frame, the tap order
//! and the epilogue mapping are described in `im2col.rs`. For 1x1 stride-1 convolutions the
//! image already is the patch matrix and the engine reads it as an ordinary operand.
//!
//! - **Wins** where `gemm` does, without its workspace: 1x1 convolutions at the engine's
//!   speed, strided 1x1 and large-kernel layers (ResNet's conv1) without an im2col copy.
//! - **Workspace:** none. The GEMM engine's own packing buffers (per thread, at most
//!   `(MC + NC)·KC` floats, independent of the image, reused across calls) are the only
//!   memory it uses beyond x, w and y.
//! - **Declines:** nothing (f32 only, as every algorithm): any layout, stride, dilation,
//!   padding, group count and mode.
//! - **Prepared weights:** each group's filter packed once into the engine's panels.
//! - **Deterministic:** yes; the engine's results do not depend on the thread count.

use super::im2col::{Frame, Geometry, Operand, PatchesA, PatchesB};
use super::{AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext};
use crate::desc::ConvProblem;
use crate::error::Result;

/// Implicit GEMM.
pub struct ImplicitGemm;

impl ConvAlgorithm for ImplicitGemm {
    fn name(&self) -> &'static str {
        "implicit_gemm"
    }

    fn check(&self, _: &ConvProblem) -> std::result::Result<(), String> {
        Ok(())
    }

    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        Geometry::new(problem).prepare(w, ctx.isa).map(Some)
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        _workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let geo = Geometry::new(problem);
        let isa = ctx.isa;
        for block in geo.blocks(usize::MAX) {
            let filter = match w {
                AlgoWeights::Plain(w) => geo.filter(w, block.g, isa),
                AlgoWeights::Prepared(d) => geo.prepared_filter(d, block.g)?,
            };
            if geo.x_is_matrix {
                let m = geo.x_matrix(x, &block, isa);
                let patches = match geo.frame {
                    Frame::Positions => Operand::A(&m),
                    Frame::Channels => Operand::B(&m),
                };
                geo.gemm(ctx, &block, patches, &filter, y, epi)?;
            } else {
                let geo = &geo;
                match geo.frame {
                    Frame::Positions => {
                        let a = PatchesA { geo, x, block, isa };
                        geo.gemm(ctx, &block, Operand::A(&a), &filter, y, epi)?;
                    }
                    Frame::Channels => {
                        let b = PatchesB { geo, x, block, isa };
                        geo.gemm(ctx, &block, Operand::B(&b), &filter, y, epi)?;
                    }
                }
            }
        }
        Ok(())
    }
}
