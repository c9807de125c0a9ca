//! `winograd_2x2`, `winograd_4x4`, `winograd_6x6`: Winograd's minimal filtering algorithms
//! F(m×m, 3×3) for 3×3 kernels at stride 1 (Lavin and Gray, 2016).
//!
//! Computes the same y as `direct`. The output is cut into m×m tiles; each tile's
//! (m+2)×(m+2) input window d and each filter g are transformed, multiplied elementwise in the
//! transformed domain and summed over input channels, then transformed back:
//!
//! y_tile = Aᵀ · [ Σ_c (G g_{k,c} Gᵀ) ⊙ (Bᵀ d_c B) ] · A
//!
//! The sum over channels at each of the (m+2)² transform positions ξ is a matrix product,
//! M_ξ (K × tiles) = U_ξ (K × C) · V_ξ (C × tiles), computed by a register-blocked
//! micro-kernel. The matrices Bᵀ, G, Aᵀ of each tile size are data ([`Tile`], in
//! `f2x2.rs`, `f4x4.rs`, `f6x6.rs`), with the input and output
//! transforms written out as butterflies that tests check against them.
//!
//! - **Wins** on 3×3 stride-1 layers with many channels: F(4×4) does 4× and F(6×6) 5.06×
//!   fewer multiplications than the definition; transforms cost O(C + K) per tile against
//!   O(C·K) for the products.
//! - **Declines** kernels other than 3×3 ("needs a 3x3 kernel, got 5x5"), strides other than 1
//!   and dilated kernels: the transforms assume unit-step, dense windows. Every group count,
//!   padding, layout and stride pattern of x and y is accepted.
//! - **Accuracy:** [`Accuracy::Normwise`], the constant measured in `tests/winograd.rs`.
//! - **bf16 pairs under `allow_bf16`:** where the caller's math mode is `allow_bf16` (or the
//!   tensors are bf16, in any mode) and the units choice takes the bf16 units, `winograd_2x2`
//!   rounds V and U to bf16 pairs (two
//!   channels per 32-bit slot) and sums their products in f32 on `vdpbf16ps` (in f32
//!   arithmetic on the same pairs where the CPU lacks it): twice the products per cycle and
//!   half the bytes of V and of a prepared filter, within the bound of products rounded to
//!   bf16's precision ([`ConvAlgorithm::accuracy_under`]). F(4×4) and F(6×6) on bf16 pairs
//!   measured about 10 and 45 times the error of rounding x and w to bf16 (their transforms'
//!   larger constants; a model of the same roundings on random data, C = 16 to 512): they
//!   stay in f32 in every mode.
//! - **Deterministic:** every output is computed by one work item in a fixed order; the
//!   split of items among threads does not change any result.
//!
//! **How (per group, per block of tiles).** The tiles (row-major over each output image, the
//! images of a batch one after the other) are processed in blocks of about [`BLOCK_BYTES`]
//! of transformed input and products (`AUTODNN_WINOGRAD_BLOCK_BYTES`):
//! 1. *Input transform*, one work item per block of [`CB`] = 16 input channels: the block's
//!    input windows are copied, zero-padded, into a channel-interleaved buffer (one tile row
//!    at a time: the copy also transposes NCHW to 16-channel vectors), then transformed,
//!    16 channels per vector, into V (per channel block: \[ξ\]\[tile\]\[16\]).
//! 2. *Products and output transform*, one work item per panel of [`KP`] = 32 output
//!    channels: for each ξ the micro-kernel multiplies the panel's transformed filter
//!    (\[c\]\[32\], pre-packed) by V for up to `NR_MAX` tiles at once, keeping a 32 × NR block
//!    of sums in registers; then every tile of the block is transformed back while its products
//!    are in cache, and the epilogue (alpha, bias, residual, activation) is applied on the way
//!    to y.
//!
//! **Why not the GEMM engine's calls.** Per block the products are (m+2)² small matrix
//! products (32-channel panels × ≤ 12 tiles × C) whose A operand is already packed (prepared)
//! and whose B operand the input transform writes directly in the micro-kernel's layout; the
//! engine's batched calls would pack both again and reach about half the FMA peak at these
//! shapes (`autodnn gemm --m 128 --n 49 --k 128 --batch 36`: 55 GFLOP/s on a 116 GFLOP/s
//! core), while this micro-kernel (the engine's register-tiling scheme, 32 × NR with NR ≤ 12)
//! runs near peak.
//!
//! **Prepared weights:** U = G g Gᵀ for every filter, computed in f64 and rounded once, laid
//! out as the micro-kernel reads it: \[group\]\[panel of 32 output channels\]\[ξ\]\[input
//! channel, padded to 16\]\[32\] ((m+2)²/9 times the filter, more when K or C are not
//! multiples of 32 and 16), after a 16-float header that records where it starts (on a cache
//! line of the allocation). Plain calls transform each panel of the filter (in f32, vectorised
//! over output channels) into the workspace just before its first use, inside step 2.
//!
//! **Workspace:** the interleaved input rows (C × (m+2) × block width), V and the products
//! for one block, plus the transformed filter for plain calls (a call with prepared weights
//! leaves that part untouched, so it uses less than the reported size), plus 64 bytes to align
//! everything to cache lines. None of it depends on the batch or the image size beyond one
//! block, nor on the thread count.
//!
//! **Tile sizes:** F(6×6) does the fewest products but transforms 8×8 windows and reads the
//! largest transformed filter (64/9 of the filter); on small images its tiles overhang the
//! output most. F(4×4) and F(2×2) trade products for smaller filters and less overhang:
//! measured on one Zen 4 core with prepared weights, F(6×6) is fastest on ResNet-50's 56×56 and
//! 28×28 layers, F(4×4) on 14×14 and F(2×2) on 7×7 with 512 channels.

mod bwd_data;
mod bwd_filter;
mod f2x2;
mod f4x4;
mod f6x6;
mod simd;

use std::marker::PhantomData;

use crate::runtime::parallel::for_each;

use crate::activation::Activation;
use crate::conv::{
    default_cost_features, Accuracy, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext,
    COST_FEATURES,
};
use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::{Bf16Units, Carve, MathMode};
use crate::simd::Token;
use simd::{micro_kernel_n, Family, Scalar, Simd, CB, KP};

pub(crate) use bwd_data::{WINOGRAD_2X2_BWD_DATA, WINOGRAD_4X4_BWD_DATA, WINOGRAD_6X6_BWD_DATA};
pub(crate) use bwd_filter::{WINOGRAD_2X2_BWD_FILTER, WINOGRAD_4X4_BWD_FILTER};
pub(crate) use f2x2::F2x2;
pub(crate) use f4x4::F4x4;
pub(crate) use f6x6::F6x6;

/// Bytes of transformed input and products one block of tiles may take. Every block reads
/// the whole transformed filter again, so blocks larger than the L2 cache pay once the filter
/// is: measured on ResNet-50's 3x3 layers at batch 8 (Zen 5 class, 1 MiB L2), 4 MiB took 24%
/// off the four layer shapes' total on 2 threads and 6% on 1 against 768 KiB (three quarters
/// of the L2, this constant's earlier value); at batch 1 with prepared weights it was level on
/// 1 thread and faster on 2 (fewer blocks, so fewer fork-joins).
pub const BLOCK_BYTES: usize = 4 << 20;
/// Transformed filters up to this size stay in the caches between the filter transform and
/// the products of a plain call; beyond it they go through memory (a cost-model feature).
/// Chosen by measurement: a quarter of the 32 MiB L3 of the machine the shipped cost model
/// was fitted on predicted the Winograd tile sizes better than half.
pub const FILTER_CACHED_BYTES: usize = 8 << 20;

/// Environment variable overriding [`BLOCK_BYTES`] (bytes; read once per process). The
/// workspace size follows it.
pub const BLOCK_BYTES_ENV: &str = "AUTODNN_WINOGRAD_BLOCK_BYTES";

/// [`BLOCK_BYTES`], or its override from [`BLOCK_BYTES_ENV`].
fn block_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var(BLOCK_BYTES_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&b: &usize| b > 0)
            .unwrap_or(BLOCK_BYTES)
    })
}

/// Fewest tiles per block (when the channel counts are so large that fewer would fit the
/// budget), so that each transformed filter panel loaded serves at least this many tiles.
pub const MIN_BLOCK_TILES: usize = 12;
/// Alignment of the workspace's buffers (a cache line); the workspace reports this many bytes
/// of slack.
const ALIGN: usize = 64;

/// One tile size: its transform matrices as data and its 1-D transforms as butterflies.
///
/// The 2-D transforms apply the 1-D ones to columns, then rows: V = Bᵀ d B,
/// U = G g Gᵀ, y = Aᵀ M A, with ξ = i·A + j indexing an A×A transformed tile.
pub(crate) trait Tile: Send + Sync + 'static {
    /// The algorithm's name.
    const NAME: &'static str;
    /// Output tile size m.
    const M: usize;
    /// Input tile size m + 2.
    const A: usize;
    /// Bᵀ, A × A (the butterflies of `input_1d` compute it; tests check they agree).
    #[cfg_attr(not(test), allow(dead_code))]
    const BT: &'static [&'static [f64]];
    /// G, A × 3.
    const G: &'static [[f64; 3]];
    /// Aᵀ, M × A (the butterflies of `output_1d` compute it; tests check they agree; the
    /// backward filter's dy transform applies its transpose from the data).
    const AT: &'static [&'static [f64]];
    /// Bᵀ·d for the first A entries of `d` (the rest are ignored and returned as anything).
    fn input_1d<S: Simd>(s: S, d: &[S::V; 8]) -> [S::V; 8];
    /// Aᵀ·m for the first A entries of `m`; the first M entries of the result are valid.
    fn output_1d<S: Simd>(s: S, m: &[S::V; 8]) -> [S::V; 6];
}

/// One Winograd algorithm: F(T::M × T::M, 3×3).
pub(crate) struct Winograd<T> {
    accuracy: Accuracy,
    /// The bound under `allow_bf16` where the tile size then computes its transformed-domain
    /// products on bf16 pairs (`None`: it stays in f32 in every mode; see
    /// [`Winograd::pairs_under`]).
    bf16_accuracy: Option<Accuracy>,
    _tile: PhantomData<T>,
}

/// F(2×2, 3×3).
pub(crate) static WINOGRAD_2X2: Winograd<F2x2> = Winograd {
    accuracy: Accuracy::Normwise {
        c: 2.0,
        int_rel: 1e-4,
    },
    // bf16 pairs: each of U and V rounded once (2^-9 relative at most), the sums in f32: the
    // bound of products rounded to bf16's precision, 2^-8·C·R·S·max|x|·max|w| (c = 2^15).
    // Measured by `tests/winograd.rs` (random data in [-1, 1]): c up to 0.66·2^15 with one
    // input channel, 3 600 to 590 on 16 to 512; 1.8 to 2.1 times the constant of rounding x
    // and w to bf16 before an exact convolution (3.1 with one channel). On integer data in
    // [-4, 4] U and V are exact in bf16 (V integers below 17, U quarters below 10): the
    // products are the f32 ones.
    bf16_accuracy: Some(Accuracy::Normwise {
        c: 32768.0,
        int_rel: 1e-4,
    }),
    _tile: PhantomData,
};
/// F(4×4, 3×3).
pub(crate) static WINOGRAD_4X4: Winograd<F4x4> = Winograd {
    accuracy: Accuracy::Normwise {
        c: 10.0,
        int_rel: 1e-4,
    },
    // With bf16 pairs the error measured about 10 times that of rounding x and w to bf16
    // before a direct convolution (random data in [-1, 1], C = 16 to 512): it stays in f32.
    bf16_accuracy: None,
    _tile: PhantomData,
};
/// F(6×6, 3×3).
pub(crate) static WINOGRAD_6X6: Winograd<F6x6> = Winograd {
    accuracy: Accuracy::Normwise {
        c: 48.0,
        int_rel: 1e-3,
    },
    // With bf16 pairs about 40 to 50 times the error of rounding x and w: it stays in f32.
    bf16_accuracy: None,
    _tile: PhantomData,
};

/// Everything about one problem the frame needs: geometry, tiling, block sizes and the
/// workspace layout (lengths in floats).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    groups: usize,
    /// Input and output channels per group.
    c: usize,
    k: usize,
    /// Input rows and columns read: the image, less those only outputs past y would read.
    h: i64,
    w: i64,
    oh: usize,
    ow: usize,
    pt: i64,
    pl: i64,
    xs: [usize; 4],
    ys: [usize; 4],
    ws: [usize; 4],
    flip: bool,
    /// Output tile size, input tile size, transform positions.
    m: usize,
    a: usize,
    p: usize,
    /// Tile columns, tiles per image, tiles of all images.
    tw: usize,
    tiles: usize,
    all_tiles: usize,
    /// Input channel blocks of CB (per group) and the padded count.
    cbn: usize,
    cp: usize,
    /// Output channel panels of KP (per group).
    kpn: usize,
    /// Tiles per block, blocks (over all images).
    nb: usize,
    nblocks: usize,
    /// Columns of the interleaved input rows.
    xc_cols: usize,
    xc_len: usize,
    v_len: usize,
    m_len: usize,
    u_len: usize,
}

impl Plan {
    /// The plan for a problem `check` accepts; `None` when a size overflows.
    fn new(p: &ConvProblem, m: usize) -> Option<Plan> {
        Plan::with_block_bytes(p, m, block_bytes())
    }

    /// As [`Plan::new`], with blocks of tiles whose transformed input and products take about
    /// `budget` bytes.
    fn with_block_bytes(p: &ConvProblem, m: usize, budget: usize) -> Option<Plan> {
        let a = m + 2;
        let pos = a * a;
        let (c, k) = (p.c_per_group(), p.k_per_group());
        let (oh, ow) = (p.y().h(), p.y().w());
        let (th, tw) = (oh.div_ceil(m), ow.div_ceil(m));
        let tiles = th.checked_mul(tw)?;
        // Blocks run over the tiles of every image, so that a batch shares each pass over
        // the transformed filter.
        let all_tiles = tiles.checked_mul(p.x().n())?;
        let cbn = c.div_ceil(CB);
        let cp = cbn.checked_mul(CB)?;
        let kpn = k.div_ceil(KP);
        let kpp = kpn.checked_mul(KP)?;
        let per_tile = pos.checked_mul(cp.checked_add(kpp)?)?.checked_mul(4)?;
        let nb = (budget / per_tile).max(MIN_BLOCK_TILES).min(all_tiles);
        let nblocks = all_tiles.div_ceil(nb);
        let nb = all_tiles.div_ceil(nblocks);
        let xc_cols = nb.min(tw) * m + a - m;
        let conv = p.conv();
        Some(Plan {
            groups: p.groups(),
            c,
            k,
            // Input rows and columns that some output reads: tiles reaching past the output
            // see zeros there, so that they compute exact zeros where y reads only padding.
            h: (p.x().h() as i64).min(oh as i64 + 2 - conv.padding().top),
            w: (p.x().w() as i64).min(ow as i64 + 2 - conv.padding().left),
            oh,
            ow,
            pt: conv.padding().top,
            pl: conv.padding().left,
            xs: p.x().strides(),
            ys: p.y().strides(),
            ws: p.w().strides(),
            flip: conv.mode() == ConvMode::Convolution,
            m,
            a,
            p: pos,
            tw,
            tiles,
            all_tiles,
            cbn,
            cp,
            kpn,
            nb,
            nblocks,
            xc_cols,
            xc_len: cbn.checked_mul(a * xc_cols * CB)?,
            v_len: cbn.checked_mul(pos * nb * CB)?,
            m_len: kpn.checked_mul(pos * nb * KP)?,
            u_len: p
                .groups()
                .checked_mul(kpn)?
                .checked_mul(pos)?
                .checked_mul(cp)?
                .checked_mul(KP)?,
        })
    }

    /// Floats of the transformed filter of one group.
    fn u_group(&self) -> usize {
        self.kpn * self.p * self.cp * KP
    }

    /// Floats of the workspace (without the alignment slack).
    fn floats(&self) -> Option<usize> {
        self.xc_len
            .checked_add(self.v_len)?
            .checked_add(self.m_len)?
            .checked_add(self.u_len)
    }

    /// Bytes of the workspace, alignment slack included.
    fn workspace_bytes(&self) -> Option<usize> {
        self.floats()?.checked_mul(4)?.checked_add(ALIGN)
    }

    /// The selection heuristic's features. Of the defaults, the call, and x, w and y's MB;
    /// then the FLOPs of the transformed-domain products (channels padded to the register
    /// tile, so that short reductions and narrow outputs cost what they really do), the
    /// transformed filter's MB (what a plain call writes) and the transformed tiles' MB
    /// (input and output transforms), and in place of the workspace's MB the transformed
    /// filter's MB beyond [`FILTER_CACHED_BYTES`] (written and read back from memory rather
    /// than from the caches). The other features stay 0: fewer terms fit more reliably from
    /// the calibration set's 3x3 problems.
    fn cost_features(&self, p: &ConvProblem, pairs: bool) -> [f64; COST_FEATURES] {
        let d = default_cost_features(p, 0);
        // In f64: the products of the plan's sizes need not fit in usize (only each size
        // does), and a cost query must not overflow.
        let kpp = self.kpn as f64 * KP as f64;
        let tiles = self.groups as f64 * self.all_tiles as f64 * self.p as f64;
        // bf16 pairs: two multiply-adds in an f32 FMA's time on the bf16 units, half the
        // bytes of the transformed filter and input.
        let half = if pairs { 0.5 } else { 1.0 };
        let mut f = [0.0; COST_FEATURES];
        f[0] = d[0];
        f[1] = half * 2.0 * tiles * self.cp as f64 * kpp / 1e9;
        f[2] = d[2];
        let u_bytes = half * self.u_len as f64 * 4.0;
        f[3] = (u_bytes - FILTER_CACHED_BYTES as f64).max(0.0) / 1e6;
        f[8] = u_bytes / 1e6;
        f[9] = tiles * (half * self.cp as f64 + kpp) * 4.0 / 1e6;
        f
    }
}

/// The geometry every tile size takes: a 3×3 kernel at stride 1 without dilation.
fn check_geometry(p: &ConvProblem) -> std::result::Result<(), String> {
    let (r, s) = (p.w().r(), p.w().s());
    if (r, s) != (3, 3) {
        return Err(format!("needs a 3x3 kernel, got {r}x{s}"));
    }
    let [sh, sw] = p.conv().stride();
    if (sh, sw) != (1, 1) {
        return Err(format!(
            "needs stride 1 (the transforms take unit-step windows), got {sh}x{sw}"
        ));
    }
    let [dh, dw] = p.conv().dilation();
    if (dh, dw) != (1, 1) {
        return Err(format!(
            "needs a dense kernel (dilation 1), got dilation {dh}x{dw}"
        ));
    }
    // One channel per group leaves the transformed products nothing to sum over: the
    // transforms are the whole cost, several times the direct definition's (`depthwise`).
    if p.groups() > 1 && p.c_per_group() == 1 && p.k_per_group() == 1 {
        return Err("a depthwise convolution (one channel per group): depthwise's".into());
    }
    // One channel per group on one side only: the transforms of the wider side cost as
    // much as the products they save (a grouped backward-data sub-problem of 2 input and 1
    // output channel per group in 16 groups ran 50 ms here where direct takes 1).
    if p.groups() > 1 && (p.c_per_group() == 1 || p.k_per_group() == 1) {
        return Err(
            "grouped with one channel per group on one side: the transforms outweigh \
                    the products they save"
                .into(),
        );
    }
    Ok(())
}

impl<T: Tile> Winograd<T> {
    fn plan(&self, p: &ConvProblem) -> Result<Plan> {
        Plan::new(p, T::M).ok_or_else(|| Error::overflow(T::NAME, "workspace size"))
    }

    /// Whether a call under `ctx` computes its transformed-domain products on bf16 pairs:
    /// the tile size's error allows it, the call's math mode is `allow_bf16` (the caller's,
    /// or any mode on bf16 tensors: [`crate::op::conv_fwd::math_for`]), and the units
    /// choice takes the bf16 units (`auto`: where the GEMM engine takes them, measured faster
    /// than f32; `always`: everywhere, in f32 arithmetic where the CPU lacks them).
    fn pairs_under(&self, ctx: &ExecContext<'_>) -> bool {
        self.bf16_accuracy.is_some()
            && ctx.math == MathMode::AllowBf16
            && match ctx.bf16_units {
                Bf16Units::Never => false,
                Bf16Units::Always => true,
                Bf16Units::Auto => crate::gemm::bf16_units_chosen(ctx.features, Bf16Units::Auto),
            }
    }
}

impl<T: Tile> ConvAlgorithm for Winograd<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }

    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_geometry(p)?;
        match Plan::new(p, T::M).and_then(|pl| pl.workspace_bytes()) {
            Some(b) if b <= isize::MAX as usize => Ok(()),
            _ => Err("the workspace size overflows".into()),
        }
    }

    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        Plan::new(p, T::M)
            .and_then(|pl| pl.workspace_bytes())
            .unwrap_or(usize::MAX)
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn accuracy(&self) -> Accuracy {
        self.accuracy
    }

    fn accuracy_under(&self, math: MathMode) -> Accuracy {
        match (math, self.bf16_accuracy) {
            (MathMode::AllowBf16, Some(a)) => a,
            _ => self.accuracy,
        }
    }

    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        match Plan::new(p, T::M) {
            Some(plan) => plan.cost_features(p, false),
            None => default_cost_features(p, usize::MAX),
        }
    }

    fn cost_features_under(&self, p: &ConvProblem, ctx: &ExecContext<'_>) -> [f64; COST_FEATURES] {
        match Plan::new(p, T::M) {
            Some(plan) => plan.cost_features(p, self.pairs_under(ctx)),
            None => default_cost_features(p, usize::MAX),
        }
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let plan = self.plan(problem)?;
        let pairs = self.pairs_under(ctx);
        let u_len = if pairs { plan.u_len / 2 } else { plan.u_len };
        let what = format!("{}'s transformed filter", T::NAME);
        let mut data = crate::alloc::try_vec(u_len + PREPARED_HEADER, 0.0, &what)?;
        // The transformed filter starts at the first cache line after data[0], which records
        // where, and in which form (the micro-kernel's loads then never straddle lines while
        // this allocation lives; a copy elsewhere stays correct, if slower).
        let off = 1 + data[1..].as_ptr().align_offset(64).min(PREPARED_HEADER - 1);
        data[0] = (off + if pairs { PAIRS_MARK } else { 0 }) as f32;
        if pairs {
            let mut u = crate::alloc::try_vec(plan.u_len, 0.0, &what)?;
            filter_transform_f64::<T>(&plan, w, &mut u);
            // Each transform position's cp × KP block becomes cp/2 pair rows of KP slots.
            let block = plan.cp * KP;
            for (src, dst) in u
                .chunks_exact(block)
                .zip(data[off..off + u_len].chunks_exact_mut(block / 2))
            {
                for (q, d) in dst.chunks_exact_mut(KP).enumerate() {
                    for (i, d) in d.iter_mut().enumerate() {
                        *d = simd::pair_bits(src[2 * q * KP + i], src[(2 * q + 1) * KP + i]);
                    }
                }
            }
        } else {
            filter_transform_f64::<T>(&plan, w, &mut data[off..off + u_len]);
        }
        Ok(Some(data))
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
        let plan = self.plan(problem)?;
        let pairs = self.pairs_under(ctx);
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = simd::Avx512::new(ctx.features) {
                return frame::<_, T>(s, ctx, &plan, pairs, x, w, y, workspace, epi);
            }
            if let Some(s) = simd::Avx2::new(ctx.features) {
                return frame::<_, T>(s, ctx, &plan, pairs, x, w, y, workspace, epi);
            }
        }
        frame::<_, T>(Scalar::new(), ctx, &plan, pairs, x, w, y, workspace, epi)
    }
}

/// Floats before the transformed filter in prepared weights: its offset (plus [`PAIRS_MARK`]
/// for a filter of bf16 pairs), then padding up to a cache line.
const PREPARED_HEADER: usize = 16;
/// Added to the offset in the header of prepared weights whose transformed filter holds bf16
/// pairs (half the slots of an f32 one).
const PAIRS_MARK: usize = 32;

/// The transformed filter inside prepared weights (see `prepare`), and whether it holds
/// bf16 pairs.
fn prepared_filter<'d>(plan: &Plan, data: &'d [f32]) -> Result<(&'d [f32], bool)> {
    let mark = data.first().map_or(0, |&o| o as usize);
    let (off, pairs) = match mark {
        m if m > PAIRS_MARK => (m - PAIRS_MARK, true),
        m => (m, false),
    };
    let u_len = if pairs { plan.u_len / 2 } else { plan.u_len };
    if data.len() != u_len + PREPARED_HEADER || !(1..=PREPARED_HEADER).contains(&off) {
        return Err(Error::bad(
            "prepared",
            format!("{} floats", data.len()),
            "not a transformed filter for this problem",
        ));
    }
    Ok((&data[off..off + u_len], pairs))
}

/// Splits the workspace into its buffers, aligned to [`ALIGN`] bytes. Marks the last byte
/// of the reported size as used, so that the high-water mark is the reported size whatever
/// the alignment of `ws`.
fn carve<'w>(plan: &Plan, ws: &'w mut [u8]) -> Result<&'w mut [f32]> {
    carve_floats(plan.floats(), plan.workspace_bytes(), ws)
}

/// [`carve`] for any frame: `floats` aligned floats out of a workspace of `need` bytes
/// (`None`: a size overflowed).
fn carve_floats(floats: Option<usize>, need: Option<usize>, ws: &mut [u8]) -> Result<&mut [f32]> {
    let floats = floats.ok_or_else(|| Error::overflow("workspace", "size"))?;
    let need = need.ok_or_else(|| Error::overflow("workspace", "size"))?;
    if ws.len() < need {
        return Err(Error::BufferTooSmall {
            field: "workspace".into(),
            needed: need,
            got: ws.len(),
        });
    }
    ws[need - 1] = 0;
    // The aligned buffers end before that byte: ALIGN − 1 bytes of slack precede them at most.
    Carve::new(&mut ws[..need - 1]).take_aligned::<f32>(floats, ALIGN)
}

/// Runs `f(i, a_i, b_i)` for the first `count` chunks of `alen` floats of `a` and `blen`
/// floats of `b`, on the context's threads when there are several.
fn for_chunks2(
    ctx: &ExecContext<'_>,
    (a, alen): (&mut [f32], usize),
    (b, blen): (&mut [f32], usize),
    count: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let (a, b) = (&mut a[..alen * count], &mut b[..blen * count]);
    if ctx.threads > 1 && count > 1 {
        let (a, b) = (SharedOut::new(a), SharedOut::new(b));
        for_each(ctx, count, |i| {
            // SAFETY: item i alone takes chunk i of each buffer.
            let (ai, bi) = unsafe { (a.slice_mut(i * alen, alen), b.slice_mut(i * blen, blen)) };
            f(i, ai, bi)
        });
    } else {
        for (i, (a, b)) in a.chunks_mut(alen).zip(b.chunks_mut(blen)).enumerate() {
            f(i, a, b);
        }
    }
}

/// What the input transform of one block reads.
pub(crate) struct InputArgs<'a> {
    plan: &'a Plan,
    x: &'a [f32],
    g: usize,
    /// First tile of the block (numbered over all images) and its tile count.
    t0: usize,
    nbt: usize,
    /// V as bf16 pairs (\[ξ\]\[tile\]\[CB/2 slots\] per channel block) instead of f32.
    pairs: bool,
}

/// What the products and output transform of one block read and write.
pub(crate) struct OutputArgs<'a> {
    plan: &'a Plan,
    g: usize,
    t0: usize,
    nbt: usize,
    /// The block's transformed input (all channel blocks).
    v: &'a [f32],
    out: &'a SharedOut<'a>,
    epi: &'a EpilogueArgs<'a>,
    /// Products on bf16 pairs (V and the transformed filter in pairs), on the bf16 units
    /// where `dp` is given.
    pairs: bool,
    dp: Option<simd::DotPairs>,
    /// Slots from one transform position's filter block to the next.
    u_xi_stride: usize,
}

#[allow(clippy::too_many_arguments)]
fn frame<S: Family, T: Tile>(
    s: S,
    ctx: &ExecContext<'_>,
    plan: &Plan,
    pairs_ctx: bool,
    x: &[f32],
    w: AlgoWeights<'_>,
    y: &mut [f32],
    workspace: &mut [u8],
    epi: &EpilogueArgs<'_>,
) -> Result<()> {
    let buf = carve(plan, workspace)?;
    let (xc, rest) = buf.split_at_mut(plan.xc_len);
    let (v, rest) = rest.split_at_mut(plan.v_len);
    let (mbuf, u_ws) = rest.split_at_mut(plan.m_len);
    // Prepared weights carry their form; plain calls follow the context.
    let (prepared, pairs) = match w {
        AlgoWeights::Prepared(data) => {
            let (u, pairs) = prepared_filter(plan, data)?;
            (Some(u), pairs)
        }
        AlgoWeights::Plain(_) => (None, pairs_ctx),
    };
    #[cfg(target_arch = "x86_64")]
    let dp = if pairs && S::LANES == 16 {
        simd::DotPairs::new(ctx.features)
    } else {
        None
    };
    #[cfg(not(target_arch = "x86_64"))]
    let dp = None;
    let out = SharedOut::new(y);
    // A panel's transformed filter: [ξ][cp][KP] floats, or in pairs [ξ][cp/2][KP] slots
    // (prepared), or pairs written over the first half of each ξ's f32 block (plain).
    let up = plan.p * plan.cp * KP;
    let (up_pre, u_xi_stride) = match (prepared.is_some(), pairs) {
        (true, true) => (up / 2, plan.cp * KP / 2),
        _ => (up, plan.cp * KP),
    };
    for g in 0..plan.groups {
        let ug = g * plan.u_group()..(g + 1) * plan.u_group();
        let ug_pre = g * plan.kpn * up_pre;
        for blk in 0..plan.nblocks {
            let t0 = blk * plan.nb;
            let nbt = plan.nb.min(plan.all_tiles - t0);
            let ia = InputArgs {
                plan,
                x,
                g,
                t0,
                nbt,
                pairs,
            };
            // Input transform: one item per channel block, each with its own rows buffer.
            let v_chunk = plan.p * nbt * CB;
            let xc_chunk = plan.a * plan.xc_cols * CB;
            for_chunks2(ctx, (v, v_chunk), (xc, xc_chunk), plan.cbn, |cb, v, xc| {
                s.input_item::<T>(&ia, cb, v, xc)
            });
            let oa = OutputArgs {
                plan,
                g,
                t0,
                nbt,
                v,
                out: &out,
                epi,
                pairs,
                dp,
                u_xi_stride,
            };
            // Products and output transform: one item per panel of output channels. Plain
            // calls transform each panel of the filter just before its first use (while it
            // is in cache), into the workspace, for this and the later blocks.
            let m_chunk = plan.p * nbt * KP;
            let u_group = &mut u_ws[ug.clone()];
            for_chunks2(ctx, (mbuf, m_chunk), (u_group, up), plan.kpn, |kp, m, u| {
                let u: &[f32] = match (prepared, w) {
                    (Some(pre), _) => &pre[ug_pre + kp * up_pre..ug_pre + (kp + 1) * up_pre],
                    (None, AlgoWeights::Plain(w)) => {
                        if blk == 0 {
                            let fa = FilterArgs {
                                plan,
                                w,
                                k_first: g * plan.k + kp * KP,
                                kvalid: KP.min(plan.k - kp * KP),
                            };
                            s.filter_item::<T>(&fa, u);
                            if pairs {
                                for block in u[..up].chunks_exact_mut(plan.cp * KP) {
                                    pairs_in_place(block, plan.cp);
                                }
                            }
                        }
                        u
                    }
                    (None, AlgoWeights::Prepared(_)) => unreachable!("prepared is Some"),
                };
                s.output_item::<T>(&oa, u, kp, m)
            });
        }
    }
    Ok(())
}

/// What the transform of one panel of the filter reads.
pub(crate) struct FilterArgs<'a> {
    plan: &'a Plan,
    w: &'a [f32],
    /// The panel's first output channel (over all groups) and how many are real.
    k_first: usize,
    kvalid: usize,
}

/// Filter tap (r, s) of the kernel as the correlation applies it (flipped in convolution
/// mode): its offset in w relative to (k, c).
#[inline(always)]
fn tap(plan: &Plan, r: usize, s: usize) -> usize {
    let (r, s) = if plan.flip { (2 - r, 2 - s) } else { (r, s) };
    r * plan.ws[2] + s * plan.ws[3]
}

/// Transforms one panel of [`KP`] output channels of the filter into `u` (\[ξ\]\[c\]\[KP\]),
/// vectorised over output channels, in f32 (plain calls). The taps of [`CB`] input channels
/// are first copied into lanes (each filter's taps for those channels are one contiguous
/// run in either filter layout), so that w is read in order.
#[inline(always)]
pub(crate) fn filter_item<S: Simd, T: Tile>(s: S, fa: &FilterArgs<'_>, u: &mut [f32]) {
    let plan = fa.plan;
    let (a, cp) = (T::A, plan.cp);
    assert!(u.len() >= a * a * cp * KP);
    let taps: [usize; 9] = std::array::from_fn(|t| tap(plan, t / 3, t % 3));
    // KCRS without gaps: a filter's taps for consecutive input channels are contiguous.
    let packed_kcrs = plan.ws[1] == 9 && plan.ws[2] == 3 && plan.ws[3] == 1;
    for c0 in (0..cp).step_by(CB) {
        let cn = CB.min(plan.c.saturating_sub(c0));
        for h in 0..KP / S::LANES {
            // gv[ci][j][l]: tap slot j of input channel c0 + ci of filter h·LANES + l, where
            // tap t sits in slot order[t].
            let mut gv = [[[0f32; 16]; 9]; CB];
            let lanes = S::LANES.min(fa.kvalid.saturating_sub(h * S::LANES));
            let base = (fa.k_first + h * S::LANES) * plan.ws[0] + c0 * plan.ws[1];
            let order = if packed_kcrs && cn == CB {
                // The 16 channels' taps of each filter are one run of 144 floats in memory
                // order: interleave the runs in registers, keep the memory order of taps.
                if lanes > 0 {
                    let flat = gv.as_flattened_mut().as_flattened_mut();
                    s.interleave16(fa.w, base, plan.ws[0], lanes, CB * 9, flat);
                }
                taps
            } else {
                for l in 0..lanes {
                    let base = base + l * plan.ws[0];
                    for (ci, gv) in gv.iter_mut().enumerate().take(cn) {
                        for (gv, off) in gv.iter_mut().zip(&taps) {
                            gv[l] = fa.w[base + ci * plan.ws[1] + off];
                        }
                    }
                }
                std::array::from_fn(|t| t)
            };
            for (ci, gv) in gv.iter().enumerate() {
                let c = c0 + ci;
                let g: [S::V; 9] = std::array::from_fn(|t| s.load(&gv[order[t]]));
                // t1 = G·g (A × 3), then U = t1·Gᵀ (A × A).
                let mut t1 = [[s.zero(); 3]; 8];
                for (i, row) in T::G.iter().enumerate() {
                    for (col, t1) in t1[i].iter_mut().enumerate() {
                        let mut acc = s.zero();
                        for (r, &gc) in row.iter().enumerate() {
                            if gc != 0.0 {
                                acc = s.fma(s.splat(gc as f32), g[r * 3 + col], acc);
                            }
                        }
                        *t1 = acc;
                    }
                }
                for (i, t1) in t1.iter().enumerate().take(a) {
                    for (j, grow) in T::G.iter().enumerate() {
                        let mut acc = s.zero();
                        for (col, &gc) in grow.iter().enumerate() {
                            if gc != 0.0 {
                                acc = s.fma(s.splat(gc as f32), t1[col], acc);
                            }
                        }
                        let xi = i * a + j;
                        s.store(acc, &mut u[(xi * cp + c) * KP + h * S::LANES..]);
                    }
                }
            }
        }
    }
}

/// The transformed filter of every group, in f64 rounded once (prepared weights), laid out
/// as [`filter_item`] lays it out.
fn filter_transform_f64<T: Tile>(plan: &Plan, w: &[f32], u: &mut [f32]) {
    let (a, cp) = (T::A, plan.cp);
    let taps: [usize; 9] = std::array::from_fn(|t| tap(plan, t / 3, t % 3));
    for g in 0..plan.groups {
        for kk in 0..plan.k {
            let (kp, lane) = (kk / KP, kk % KP);
            let k = g * plan.k + kk;
            let panel = (g * plan.kpn + kp) * a * a * cp * KP;
            for c in 0..plan.c {
                let base = k * plan.ws[0] + c * plan.ws[1];
                let gm: [f64; 9] = std::array::from_fn(|t| w[base + taps[t]] as f64);
                // t1 = G·g (A × 3).
                let mut t1 = [[0f64; 3]; 8];
                for (i, row) in T::G.iter().enumerate() {
                    for (col, t1) in t1[i].iter_mut().enumerate() {
                        *t1 = (0..3).map(|r| row[r] * gm[r * 3 + col]).sum();
                    }
                }
                for i in 0..a {
                    for (j, grow) in T::G.iter().enumerate() {
                        let v: f64 = (0..3).map(|col| t1[i][col] * grow[col]).sum();
                        u[panel + ((i * a + j) * cp + c) * KP + lane] = v as f32;
                    }
                }
            }
        }
    }
}

/// Rounds one transform position's filter block, `cp` rows of [`KP`] floats, into `cp/2`
/// pair rows of bf16 pairs (row 2q in the low halves, 2q + 1 in the high) over its first
/// half. Front to back: pair row q is written after its sources, rows 2q and 2q + 1 ≥ q,
/// are read.
fn pairs_in_place(block: &mut [f32], cp: usize) {
    for q in 0..cp / 2 {
        let mut lo = [0f32; KP];
        let mut hi = [0f32; KP];
        lo.copy_from_slice(&block[2 * q * KP..(2 * q + 1) * KP]);
        hi.copy_from_slice(&block[(2 * q + 1) * KP..(2 * q + 2) * KP]);
        for (i, d) in block[q * KP..(q + 1) * KP].iter_mut().enumerate() {
            *d = simd::pair_bits(lo[i], hi[i]);
        }
    }
}

/// Copies the input windows of tile row `th`, tile columns `tc0 .. tc0 + ntc`, of channel
/// block `cb` into `xc` (\[row\]\[column\]\[CB\], `plan.xc_cols` columns), zero outside the
/// image and past the group's channels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gather_rows<S: Simd>(
    s: S,
    a: &InputArgs<'_>,
    n: usize,
    cb: usize,
    th: usize,
    tc0: usize,
    ntc: usize,
    xc: &mut [f32],
) {
    let pl = a.plan;
    let cols = ntc * pl.m + pl.a - pl.m;
    let ch0 = cb * CB;
    let lanes = CB.min(pl.c - ch0);
    let xbase = n * pl.xs[0] + (a.g * pl.c + ch0) * pl.xs[1];
    let ih0 = (th * pl.m) as i64 - pl.pt;
    let iw0 = (tc0 * pl.m) as i64 - pl.pl;
    for r in 0..pl.a {
        let row = &mut xc[r * pl.xc_cols * CB..(r * pl.xc_cols + cols) * CB];
        let ih = ih0 + r as i64;
        if ih < 0 || ih >= pl.h {
            row.fill(0.0);
            continue;
        }
        let xrow = xbase + ih as usize * pl.xs[2];
        // Columns inside the image: lo .. hi.
        let lo = (-iw0).clamp(0, cols as i64) as usize;
        let hi = (pl.w - iw0).clamp(lo as i64, cols as i64) as usize;
        row[..lo * CB].fill(0.0);
        row[hi * CB..].fill(0.0);
        if lo == hi {
            continue;
        }
        let col0 = (iw0 + lo as i64) as usize;
        if pl.xs[1] == 1 {
            // Channels contiguous (NHWC): a run of `lanes` floats per pixel.
            for (j, dst) in row[lo * CB..hi * CB].chunks_exact_mut(CB).enumerate() {
                let src = xrow + (col0 + j) * pl.xs[3];
                if lanes == CB {
                    dst.copy_from_slice(&a.x[src..src + CB]);
                } else {
                    dst[..lanes].copy_from_slice(&a.x[src..src + lanes]);
                    dst[lanes..].fill(0.0);
                }
            }
        } else {
            // Pixels contiguous or strided (NCHW): one row per channel, scattered across lanes.
            let row = &mut row[lo * CB..hi * CB];
            if lanes < CB && pl.xs[3] != 1 {
                row.fill(0.0);
            }
            if pl.xs[3] == 1 {
                s.interleave16(a.x, xrow + col0, pl.xs[1], lanes, hi - lo, row);
            } else {
                for l in 0..lanes {
                    let src = xrow + l * pl.xs[1] + col0 * pl.xs[3];
                    for (j, dst) in row.chunks_exact_mut(CB).enumerate() {
                        dst[l] = a.x[src + j * pl.xs[3]];
                    }
                }
            }
        }
    }
}

/// The input transform of channel block `cb` of one block of tiles: `v` receives
/// \[ξ\]\[tile\]\[CB\] for the block's tiles; `xc` is this item's rows buffer.
#[inline(always)]
pub(crate) fn input_item<S: Simd, T: Tile>(
    s: S,
    a: &InputArgs<'_>,
    cb: usize,
    v: &mut [f32],
    xc: &mut [f32],
) {
    let pl = a.plan;
    let (m, al) = (T::M, T::A);
    assert!(v.len() >= al * al * a.nbt * CB && xc.len() >= al * pl.xc_cols * CB);
    let end = a.t0 + a.nbt;
    let mut t = a.t0;
    while t < end {
        // A run of tiles along one tile row of one image.
        let (n, ti) = (t / pl.tiles, t % pl.tiles);
        let (th, tc0) = (ti / pl.tw, ti % pl.tw);
        let ntc = (pl.tw - tc0).min(end - t);
        gather_rows(s, a, n, cb, th, tc0, ntc, xc);
        for i in 0..ntc {
            let tl = t - a.t0 + i;
            for h in 0..CB / S::LANES {
                // Column transforms: tmp[r][j] = (Bᵀ d)[r][j].
                let mut tmp = [[s.zero(); 8]; 8];
                for j in 0..al {
                    let mut col = [s.zero(); 8];
                    for (r, col) in col.iter_mut().enumerate().take(al) {
                        let at = ((r * pl.xc_cols) + i * m + j) * CB + h * S::LANES;
                        *col = s.load(&xc[at..]);
                    }
                    let col = T::input_1d(s, &col);
                    for (t, c) in tmp.iter_mut().zip(&col).take(al) {
                        t[j] = *c;
                    }
                }
                // Row transforms: V[r][j] = (Bᵀ d B)[r][j].
                for (r, row) in tmp.iter().enumerate().take(al) {
                    let row = T::input_1d(s, row);
                    for (j, &val) in row.iter().enumerate().take(al) {
                        let xi = r * al + j;
                        if a.pairs {
                            // Channels 2q and 2q + 1 of the vector make pair slot q.
                            let mut lanes = [0f32; 16];
                            s.store(val, &mut lanes);
                            let at = (xi * a.nbt + tl) * CB / 2 + h * S::LANES / 2;
                            for (q, d) in v[at..at + S::LANES / 2].iter_mut().enumerate() {
                                *d = simd::pair_bits(lanes[2 * q], lanes[2 * q + 1]);
                            }
                        } else {
                            s.store(val, &mut v[(xi * a.nbt + tl) * CB + h * S::LANES..]);
                        }
                    }
                }
            }
        }
        t += ntc;
    }
}

/// Products and output transform of output-channel panel `kp` of one block, whose
/// transformed filter is `u` (\[ξ\]\[c\]\[KP\]): `m` receives the products
/// (\[tile\]\[ξ\]\[KP\]), then each tile is transformed back and stored.
#[inline(always)]
pub(crate) fn output_item<S: Simd, T: Tile>(
    s: S,
    a: &OutputArgs<'_>,
    u: &[f32],
    kp: usize,
    m: &mut [f32],
) {
    let pl = a.plan;
    let (al, mo) = (T::A, T::M);
    let pos = al * al;
    let (cp, nbt) = (pl.cp, a.nbt);
    // The last position's block: cp·KP floats or cp/2·KP pair slots.
    let u = &u[..(pos - 1) * a.u_xi_stride + if a.pairs { cp / 2 } else { cp } * KP];
    let b_cb_stride = pos * nbt * CB;
    assert!(a.v.len() >= pl.cbn * b_cb_stride && m.len() >= nbt * pos * KP);
    // Panels of at most NR_MAX tiles, as even as possible.
    let npan = nbt.div_ceil(S::NR_MAX);
    let (base, rem) = (nbt / npan, nbt % npan);
    for xi in 0..pos {
        let a_xi = u[xi * a.u_xi_stride..].as_ptr();
        let mut s0 = 0;
        for q in 0..npan {
            let nr = base + usize::from(q < rem);
            for half in 0..KP / (2 * S::LANES) {
                let (a_h, m_h) = (
                    a_xi.wrapping_add(half * 2 * S::LANES),
                    m.as_mut_ptr()
                        .wrapping_add((s0 * pos + xi) * KP + half * 2 * S::LANES),
                );
                // SAFETY: the transformed filter of ξ holds cp·KP floats (cp/2·KP pair slots)
                // from a_xi (u is sliced to the last position's block above); B elements
                // (c, j) lie at (c/CB)·b_cb_stride + (ξ·nbt + s0 + j)·CB + c%CB (pair q at
                // (q/(CB/2))·b_cb_stride + (ξ·nbt + s0 + j)·CB/2 + q%(CB/2), in the first
                // half of its block) < cbn·b_cb_stride ≤ v.len() since ξ·nbt + s0 + j <
                // pos·nbt; outputs of tile s0 + j lie at ((s0 + j)·pos + ξ)·KP + half·2·LANES
                // + 2·LANES ≤ nbt·pos·KP ≤ m.len(), and m is this item's alone.
                unsafe {
                    if a.pairs {
                        let b = a.v.as_ptr().add((xi * nbt + s0) * CB / 2);
                        let (cbn, ps) = (pl.cbn, pos * KP);
                        simd::pair_kernel_n(s, a.dp, nr, a_h, b, b_cb_stride, cbn, m_h, ps)
                    } else {
                        let b = a.v.as_ptr().add((xi * nbt + s0) * CB);
                        micro_kernel_n(s, nr, a_h, b, b_cb_stride, pl.cbn, m_h, pos * KP)
                    }
                };
            }
            s0 += nr;
        }
    }
    // Output transforms, 16 output channels at a time. The common epilogue (alpha, a bias,
    // ReLU; y not read) is applied to the transformed vectors in registers where store_tile
    // then stores whole 16-channel vectors: applied to the stored tile instead, its loads
    // waited on the stores just made (a 56x56 64-channel layer took 12 % longer with a
    // bias and ReLU than without).
    let epi = a.epi;
    let ys = pl.ys;
    let in_registers = !epi.is_identity()
        && epi.beta == 0.0
        && matches!(epi.act, Activation::None | Activation::Relu)
        && (ys[1] == 1 || ys[3] == 1);
    let relu = epi.act == Activation::Relu;
    let (alpha, zero) = (s.splat(epi.alpha), s.zero());
    let mut vals = [[0f32; 16]; 36];
    for tl in 0..nbt {
        for h16 in 0..KP / CB {
            let k0 = kp * KP + h16 * CB;
            if k0 >= pl.k {
                break;
            }
            let whole = in_registers && pl.k - k0 >= CB;
            let kg = a.g * pl.k + k0;
            for hh in 0..CB / S::LANES {
                let lane0 = h16 * CB + hh * S::LANES;
                // The epilogue's operands for these lanes (output channels kg + hh·LANES..).
                let bias = epi
                    .bias
                    .filter(|_| whole)
                    .map(|b| s.load(&b[kg + hh * S::LANES..]));
                // Column transforms: tmp[i][j] = (Aᵀ M)[i][j].
                let mut tmp = [[s.zero(); 8]; 6];
                for j in 0..al {
                    let mut col = [s.zero(); 8];
                    for (r, col) in col.iter_mut().enumerate().take(al) {
                        *col = s.load(&m[(tl * pos + r * al + j) * KP + lane0..]);
                    }
                    let col = T::output_1d(s, &col);
                    for i in 0..mo {
                        tmp[i][j] = col[i];
                    }
                }
                for (i, row) in tmp.iter().enumerate().take(mo) {
                    let yrow = T::output_1d(s, row);
                    for (j, &val) in yrow.iter().enumerate().take(mo) {
                        // In EpilogueArgs::value's order: alpha, the bias, the activation.
                        let val = if whole {
                            let v = s.mul(val, alpha);
                            let v = bias.map_or(v, |b| s.add(v, b));
                            if relu {
                                s.max(v, zero)
                            } else {
                                v
                            }
                        } else {
                            val
                        };
                        s.store(val, &mut vals[i * mo + j][hh * S::LANES..]);
                    }
                }
            }
            match mo {
                2 => store_tile::<2>(a, a.t0 + tl, k0, &mut vals, whole),
                4 => store_tile::<4>(a, a.t0 + tl, k0, &mut vals, whole),
                _ => store_tile::<6>(a, a.t0 + tl, k0, &mut vals, whole),
            }
        }
    }
}

/// Writes one transformed-back tile (`vals[i·m + j]`: 16 output channels from `k0`, within
/// the group) to y through the epilogue, clipped to the image and the group's channels.
/// `vals` is the caller's scratch for this tile: the epilogue may run on it in place.
/// `applied`: the caller applied the epilogue already (16 channels, y not read, and y's
/// channels or pixels contiguous: one of the two vector paths below).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `l` picks a lane inside each vector: a transpose
fn store_tile<const M: usize>(
    a: &OutputArgs<'_>,
    t: usize,
    k0: usize,
    vals: &mut [[f32; 16]; 36],
    applied: bool,
) {
    let m = M;
    let pl = a.plan;
    let (n, ti) = (t / pl.tiles, t % pl.tiles);
    let (th, tc) = (ti / pl.tw, ti % pl.tw);
    let (oh0, ow0) = (th * m, tc * m);
    let rows = m.min(pl.oh - oh0);
    let cols = m.min(pl.ow - ow0);
    let lanes = CB.min(pl.k - k0);
    let kg = a.g * pl.k + k0;
    let ys = pl.ys;
    let base = n * ys[0] + kg * ys[1] + oh0 * ys[2] + ow0 * ys[3];
    let epi = a.epi;
    let identity = applied || epi.is_identity();
    let out = a.out;
    if ys[1] == 1 && lanes == CB {
        // Channels contiguous (NHWC): 16 channels per store.
        for i in 0..rows {
            for j in 0..cols {
                let off = base + i * ys[2] + j * ys[3];
                let mut v = vals[i * m + j];
                if !identity {
                    epilogue_lanes(epi, &mut v, kg, off, out);
                }
                // SAFETY: this item alone writes output channels kg .. kg + 16 of tile t
                // of image n; distinct coordinates are distinct elements.
                unsafe { out.write_slice(off, &v) };
            }
        }
    } else if ys[3] == 1 && (identity || (epi.beta == 0.0 && lanes == CB)) {
        // Pixels contiguous (NCHW): one run of `cols` per channel and row. An epilogue that
        // reads nothing of y (beta = 0) runs first on the tile's 16-channel vectors.
        if !identity {
            for v in vals.iter_mut().take(rows * m) {
                epilogue_lanes(epi, v, kg, 0, out);
            }
        }
        for l in 0..lanes {
            for i in 0..rows {
                let off = base + l * ys[1] + i * ys[2];
                if cols == M {
                    // A full row: a copy of compile-time length, inlined.
                    let row: [f32; M] = std::array::from_fn(|j| vals[i * M + j][l]);
                    // SAFETY: as above.
                    unsafe { out.write_slice(off, &row) };
                } else {
                    for j in 0..cols {
                        // SAFETY: as above. (Element by element: a copy of a runtime length
                        // this short would be a library call.)
                        unsafe { out.write(off + j, vals[i * M + j][l]) };
                    }
                }
            }
        }
    } else if ys[3] == 1 {
        // Pixels contiguous (NCHW) through the epilogue: a row of `cols` per channel at once,
        // so that its steps vectorise (element by element, a ReLU took half as long as the
        // rest of the convolution).
        for l in 0..lanes {
            for i in 0..rows {
                let off = base + l * ys[1] + i * ys[2];
                let mut row: [f32; M] = std::array::from_fn(|j| vals[i * M + j][l]);
                if cols == M {
                    epilogue_run(epi, &mut row, kg + l, off, out);
                    // SAFETY: as above: this item alone reads and writes these elements.
                    unsafe { out.write_slice(off, &row) };
                } else {
                    let row = &mut row[..cols];
                    epilogue_run(epi, row, kg + l, off, out);
                    for (j, &v) in row.iter().enumerate() {
                        // SAFETY: as above. (Element by element: see the plain output.)
                        unsafe { out.write(off + j, v) };
                    }
                }
            }
        }
    } else {
        for l in 0..lanes {
            for i in 0..rows {
                for j in 0..cols {
                    let off = base + l * ys[1] + i * ys[2] + j * ys[3];
                    let acc = vals[i * m + j][l];
                    // SAFETY: as above: this item alone reads and writes this element.
                    let v = epi.value(acc, kg + l, off, || unsafe { out.read(off) });
                    // SAFETY: as above.
                    unsafe { out.write(off, v) };
                }
            }
        }
    }
}

/// The epilogue on 16 consecutive output channels from `kg` at offset `off` of y (channels
/// contiguous), in the order of [`EpilogueArgs::value`].
#[inline(always)]
fn epilogue_lanes(
    epi: &EpilogueArgs<'_>,
    v: &mut [f32; 16],
    kg: usize,
    off: usize,
    out: &SharedOut<'_>,
) {
    let bias = epi.bias.map(|b| RunBias::PerElement(&b[kg..kg + 16]));
    epilogue_slice(epi, v, bias, off, out);
}

/// The epilogue on a run of outputs of channel `kg` at offset `off` of y (pixels
/// contiguous), in the order of [`EpilogueArgs::value`].
#[inline(always)]
fn epilogue_run(epi: &EpilogueArgs<'_>, v: &mut [f32], kg: usize, off: usize, out: &SharedOut<'_>) {
    let bias = epi.bias.map(|b| RunBias::One(b[kg]));
    epilogue_slice(epi, v, bias, off, out);
}

/// The bias of a run of outputs: one value per element, or one for all.
#[derive(Clone, Copy)]
enum RunBias<'a> {
    PerElement(&'a [f32]),
    One(f32),
}

/// The epilogue on the outputs `v` at consecutive offsets of y from `off`, in the order of
/// [`EpilogueArgs::value`].
#[inline(always)]
fn epilogue_slice(
    epi: &EpilogueArgs<'_>,
    v: &mut [f32],
    bias: Option<RunBias<'_>>,
    off: usize,
    out: &SharedOut<'_>,
) {
    for x in v.iter_mut() {
        *x *= epi.alpha;
    }
    match bias {
        Some(RunBias::PerElement(b)) => {
            for (x, b) in v.iter_mut().zip(b) {
                *x += b;
            }
        }
        Some(RunBias::One(b)) => {
            for x in v.iter_mut() {
                *x += b;
            }
        }
        None => {}
    }
    if epi.beta != 0.0 {
        match epi.residual {
            Some(z) => {
                let n = v.len();
                for (x, z) in v.iter_mut().zip(&z[off..off + n]) {
                    *x += epi.beta * z;
                }
            }
            None => {
                for (j, x) in v.iter_mut().enumerate() {
                    // SAFETY: this item alone reads and writes these elements (store_tile).
                    *x += epi.beta * unsafe { out.read(off + j) };
                }
            }
        }
    }
    match epi.act {
        Activation::None => {}
        Activation::Relu => {
            for x in v.iter_mut() {
                *x = x.max(0.0);
            }
        }
        act => {
            for x in v.iter_mut() {
                *x = act.apply(*x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Σ_j Aᵀ[i][j]·G[j][k]·Bᵀ[j][l] = [l = i + k]: the matrices compute the correlation.
    fn identity_holds<T: Tile>() {
        let a = T::A;
        assert_eq!((T::BT.len(), T::G.len(), T::AT.len()), (a, a, T::M));
        for i in 0..T::M {
            for k in 0..3 {
                for l in 0..a {
                    let v: f64 = (0..a).map(|j| T::AT[i][j] * T::G[j][k] * T::BT[j][l]).sum();
                    let want = if l == i + k { 1.0 } else { 0.0 };
                    assert!(
                        (v - want).abs() < 1e-12,
                        "{} i {i} k {k} l {l}: {v}",
                        T::NAME
                    );
                }
            }
        }
    }

    /// The butterflies compute Bᵀ·d and Aᵀ·m exactly as the matrices say.
    #[allow(clippy::needless_range_loop)] // rows of the matrices and of the results together
    fn butterflies_match<T: Tile>() {
        let s = Scalar::new();
        let a = T::A;
        for trial in 0..=a {
            // Unit vectors pick out columns; a dense vector checks the sums.
            let d: [[f32; 8]; 8] = std::array::from_fn(|j| {
                let v = if trial < a {
                    f32::from(j == trial)
                } else {
                    j as f32
                };
                [v; 8]
            });
            let r = T::input_1d(s, &d);
            for i in 0..a {
                let want: f64 = (0..a).map(|j| T::BT[i][j] * d[j][0] as f64).sum();
                assert_eq!(
                    r[i][0] as f64,
                    want,
                    "{} Bᵀ row {i}, input {trial}",
                    T::NAME
                );
            }
            let y = T::output_1d(s, &d);
            for i in 0..T::M {
                let want: f64 = (0..a).map(|j| T::AT[i][j] * d[j][0] as f64).sum();
                assert_eq!(
                    y[i][0] as f64,
                    want,
                    "{} Aᵀ row {i}, input {trial}",
                    T::NAME
                );
            }
        }
    }

    #[test]
    fn prepared_filter_header_is_checked() {
        let p = crate::ProblemSpec::parse("mb1ic8ih6oc8kh3ph1")
            .unwrap()
            .to_problem(crate::Layout::Nchw)
            .unwrap();
        let plan = Plan::new(&p, 4).unwrap();
        let mut data = vec![0.0f32; plan.u_len + PREPARED_HEADER];
        // Every offset a prepare may pick (1 ..= 16, whatever the allocation's alignment).
        for off in 1..=PREPARED_HEADER {
            data[0] = off as f32;
            data[off] = 7.0;
            assert_eq!(
                prepared_filter(&plan, &data).unwrap(),
                (&data[off..][..plan.u_len], false)
            );
            data[off] = 0.0;
        }
        // bf16 pairs: the offset marked, half the slots; an unmarked header on them refused.
        let mut pairs = vec![0.0f32; plan.u_len / 2 + PREPARED_HEADER];
        for off in 1..=PREPARED_HEADER {
            pairs[0] = (off + PAIRS_MARK) as f32;
            let (u, is_pairs) = prepared_filter(&plan, &pairs).unwrap();
            assert!(is_pairs && u.len() == plan.u_len / 2);
            pairs[0] = off as f32;
            assert!(prepared_filter(&plan, &pairs).is_err());
        }
        data[0] = (1 + PAIRS_MARK) as f32;
        assert!(prepared_filter(&plan, &data).is_err());
        for off in [0.0, 17.0, -1.0, f32::NAN] {
            data[0] = off;
            assert!(prepared_filter(&plan, &data).is_err(), "{off}");
        }
        data[0] = 1.0;
        assert!(prepared_filter(&plan, &data[1..]).is_err());
    }

    #[test]
    fn transforms_are_winograd_identities() {
        identity_holds::<F2x2>();
        identity_holds::<F4x4>();
        identity_holds::<F6x6>();
    }

    #[test]
    fn butterflies_compute_the_matrices() {
        butterflies_match::<F2x2>();
        butterflies_match::<F4x4>();
        butterflies_match::<F6x6>();
    }
}
