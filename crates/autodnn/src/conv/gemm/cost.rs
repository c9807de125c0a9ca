//! The frame cost model: what one GEMM costs the engine in each [`Frame`], and the choice
//! of the frame from it (or from [`FRAME_ENV`]).

use super::geometry::Frame;

/// Register tile of the widest kernel family (AVX-512: 32 rows × 14 columns), used to weigh
/// the two frames; the frame is a property of the problem (prepared weights depend on it),
/// so it does not follow the instruction-set cap.
const FRAME_TILE: (usize, usize) = (32, 14);

/// Cost of writing one output element of a tile whose rows are not y's contiguous direction
/// (the engine transposes the tile before storing it), in multiply-adds of one lane (the
/// kernel does 16 lanes per cycle). Paid once per depth block (at most 512 deep).
const STRIDED_STORE_COST: usize = 24;

/// Cost of packing one tap of one strip of patches (a panel row of 32 or 14 positions, about
/// 20 cycles), in multiply-adds of one lane. Narrow strips (14 positions as B) cost as much
/// as wide ones (32 as A), so the channels-as-rows frame packs patches at over twice the cost.
const PACK_ROW_COST: usize = 320;

/// What one GEMM of a frame costs in the engine, in multiply-adds of one lane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameCost {
    /// The micro-kernels' work: rows rounded up to whole vectors of the tile, plus transposed
    /// tile stores.
    pub work: usize,
    /// Packing the patches in strips of the frame's panel width.
    pub pack: usize,
    /// Elements of the packed patch operand (depth × positions rounded to the width).
    pub packed: usize,
}

/// Output positions one GEMM covers: the whole image when y's positions flatten, else one
/// output row.
pub(super) fn gemm_positions(ys: [usize; 4], oh: usize, ow: usize) -> usize {
    if oh == 1 || ys[2] == ow * ys[3] {
        oh * ow
    } else {
        ow
    }
}

/// The cost of one GEMM of `positions` output positions, `kg` output channels and `depth`
/// taps in `frame`, packing patches (`patches_packed`) or reading x as the patch matrix.
pub(super) fn frame_cost(
    frame: Frame,
    positions: usize,
    kg: usize,
    depth: usize,
    patches_packed: bool,
) -> FrameCost {
    let (mr, nr) = FRAME_TILE;
    // Saturating: the costs of absurd problems (10^17 positions of 10^8 taps) only compare.
    let up = |x: usize, to: usize| x.div_ceil(to).saturating_mul(to);
    let mul = |a: usize, b: usize| a.saturating_mul(b);
    let width = match frame {
        Frame::Positions => mr,
        Frame::Channels => nr,
    };
    let pack = if patches_packed {
        mul(mul(PACK_ROW_COST, positions.div_ceil(width)), depth)
    } else {
        0
    };
    let block = depth.min(crate::gemm::blocking::KC_MAX);
    // The engine computes whole vectors of mr rows, but only the valid columns of a ragged
    // last column panel.
    let work = match frame {
        Frame::Positions => mul(mul(up(positions, mr), kg), depth),
        Frame::Channels => mul(
            mul(mul(up(kg, mr), positions), depth) / block,
            block + STRIDED_STORE_COST,
        ),
    };
    FrameCost {
        work,
        pack,
        packed: mul(up(positions, width), depth),
    }
}

/// The GEMM frame: channels as rows where y's channels are contiguous (NHWC); otherwise the
/// cheaper of the two by [`frame_cost`]: rounding positions up to the tile's 32 rows
/// (positions as rows), or channels, plus transposed tile stores (channels as rows), each
/// plus packing the patches in strips of its width. Small images (ResNet's 7x7 and 14x14
/// layers) take channels as rows.
pub(super) fn choose_frame(
    ys: [usize; 4],
    oh: usize,
    ow: usize,
    kg: usize,
    depth: usize,
    patches_packed: bool,
) -> Frame {
    if ys[1] < ys[3] {
        return Frame::Channels;
    }
    if let Some(f) = forced_frame() {
        return f;
    }
    let positions = gemm_positions(ys, oh, ow);
    let cost = |f| {
        let c = frame_cost(f, positions, kg, depth, patches_packed);
        c.work.saturating_add(c.pack)
    };
    if cost(Frame::Channels) < cost(Frame::Positions) {
        Frame::Channels
    } else {
        Frame::Positions
    }
}

/// Environment variable forcing the frame of NCHW-like outputs: `positions` or `channels`
/// (for tuning [`STRIDED_STORE_COST`]; read once per process).
pub const FRAME_ENV: &str = "AUTODNN_GEMM_CONV_FRAME";

pub(super) fn forced_frame() -> Option<Frame> {
    static FORCED: std::sync::OnceLock<Option<Frame>> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match std::env::var(FRAME_ENV).ok()?.trim() {
        "positions" => Some(Frame::Positions),
        "channels" => Some(Frame::Channels),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    use super::super::geometry::tests::geo;

    #[test]
    fn frames_follow_layout_and_image_size() {
        if forced_frame().is_some() {
            return; // AUTODNN_GEMM_CONV_FRAME set for tuning: the model is bypassed.
        }
        // NHWC: channels are y's contiguous direction.
        assert_eq!(
            geo("mb1ic64ih56oc64oh56kh1ph0", Layout::Nhwc).frame,
            Frame::Channels
        );
        // NCHW: large images by positions; 14x14 and 7x7 by channels (49 positions would be
        // computed as 64).
        for (spec, frame) in [
            ("mb1ic64ih56oc64oh56kh1ph0", Frame::Positions),
            (
                "g1mb1ic3ih224iw224oc64oh112ow112kh7kw7sh2sw2ph3pw3",
                Frame::Positions,
            ),
            ("mb1ic128ih28oc512oh28kh1ph0", Frame::Positions),
            ("mb1ic1024ih14oc256oh14kh1ph0", Frame::Channels),
            ("mb1ic512ih7oc2048oh7kh1ph0", Frame::Channels),
            ("mb1ic512ih7oc512oh7kh3ph1", Frame::Channels),
        ] {
            assert_eq!(geo(spec, Layout::Nchw).frame, frame, "{spec}");
        }
    }
}
