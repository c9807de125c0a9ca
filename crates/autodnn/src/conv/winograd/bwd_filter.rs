//! Winograd backward filter (cuDNN's BWD_FILTER_ALGO_WINOGRAD_NONFUSED) for 3×3 stride-1
//! problems: `winograd_2x2` and `winograd_4x4` of the backward-filter registry.
//!
//! The filter gradient of a 3×3 layer, dW[k,c,r,s] = Σ_{n,p,q} dy[n,k,p,q] · x[n,c,p+r,q+s],
//! is a correlation whose "filter" is dy and whose output is 3×3. Cut dy into m×m tiles (the
//! forward's output tiles); each tile's (m+2)×(m+2) input window d and the dy tile e meet in
//! the transformed domain of F(m×m, 3×3) read backwards (the transposition principle: the
//! adjoint of y = Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A in g):
//!
//! dW_{k,c} = Gᵀ · [ Σ_{n, tiles} (A e_k Aᵀ) ⊙ (Bᵀ d_c B) ] · G
//!
//! so the sum over every tile of the batch is, at each of the (m+2)² transform positions ξ,
//! one matrix product M_ξ (K × C) = U_ξ (K × tiles) · V_ξ (tiles × C), whose depth is the
//! tile count: 4× (F(4×4)) or 2.25× (F(2×2)) fewer multiplications than the definition.
//!
//! - **Declines** what the forward tile sizes decline: kernels other than 3×3, strides other
//!   than 1, dilation. Every group count, padding, layout and mode is accepted.
//! - **How (per group, per block of tiles):** the block's input windows are transformed into
//!   V by the forward's input transform (per block of 16 input channels); the block's dy
//!   tiles into U (per chunk of [`TQ`] tiles, vectorised over 16 output channels); then one
//!   work item per transform position ξ adds U_ξ · V_ξ into M_ξ with a register-tiled
//!   micro-kernel (2 vectors of input channels × up to `NR_MAX` output channels). After the
//!   last block, each filter is transformed back (Gᵀ M G), scaled and stored.
//! - **Accuracy:** [`Accuracy::Normwise`] with the reduction's depth N·OH·OW in place of
//!   C·R·S: max|dw − ref| ≤ c · ε · N·OH·OW · max|x| · max|dy|, c measured by
//!   `tests/winograd.rs` on random data (up to 0.29 for F(2×2), 1.9 for F(4×4));
//!   documented 0.5 and 4; on integer data in [−4, 4] within 1e-5 of max|ref| (F(2×2)
//!   measured exact on ResNet-50's layers, F(4×4) 5.4e-7).
//! - **Deterministic:** every M_ξ is summed by one work item, blocks in order, whatever the
//!   thread count.
//! - **Workspace:** the forward's interleaved rows and V for one block (V padded to an even
//!   number of channel blocks), U and dy rows for one block, and M (all transform positions,
//!   K × C rounded up to 32). Blocks are sized by M (`block_budget`): 768 KiB of U and V while M
//!   fits the L2 cache, else max(4 MiB, M / 2).

use std::marker::PhantomData;

use crate::runtime::parallel::for_each_chunk;

use super::simd::{Family, Scalar, Simd, CB};
use super::{carve_floats, for_chunks2, F2x2, F4x4, InputArgs, Plan, Tile, ALIGN};
use crate::conv::{default_cost_features, ExecContext};
use crate::desc::{ConvMode, ConvProblem, OpKind};
use crate::error::{Error, Result};
use crate::op::conv_bwd::{check_problem, scaled};
use crate::op::{
    Accuracy, Algorithm, ConvBackwardFilter, ConvBwdFilterInputs, TensorMut, COST_FEATURES,
};
use crate::simd::Token;

/// Bytes of U and V a block of tiles takes while M fits a 1 MiB L2 cache (the forward's
/// block budget, three quarters of it).
pub(crate) const SMALL_BLOCK_BYTES: usize = 768 << 10;
/// Bytes of U and V a block of tiles takes at least once M is larger.
pub(crate) const LARGE_BLOCK_BYTES: usize = 4 << 20;

/// Bytes of U and V one block of tiles may take. Each block reads and writes all of M
/// ((m+2)²·K·C floats) once: while M fits the L2 cache, blocks fit it too
/// ([`SMALL_BLOCK_BYTES`]); beyond, blocks grow to [`LARGE_BLOCK_BYTES`] or half of M, so that
/// M's passes stay few. Measured on ResNet-50's 3×3 layers at batch 8 (F(4×4), one thread,
/// CPU time per call): 64 channels (M 0.6 MB) ran 20% faster in L2-sized blocks than in
/// 4 MiB ones, 128 and 256 channels (M 2.4 and 9.4 MB) 10 to 15% faster at 4 MiB than at
/// 768 KiB, 512 channels at 7×7 (M 38 MB) 20% faster in one block of all tiles than at 4 MiB.
fn block_budget(p: &ConvProblem, m: usize) -> usize {
    let a = m + 2;
    let m_bytes = (a * a)
        .saturating_mul(p.k_per_group())
        .saturating_mul(p.c_per_group().next_multiple_of(2 * CB))
        .saturating_mul(4);
    if m_bytes <= 1 << 20 {
        SMALL_BLOCK_BYTES
    } else {
        (m_bytes / 2).max(LARGE_BLOCK_BYTES)
    }
}

/// Tiles per work item of the dy transform.
pub(crate) const TQ: usize = 8;

/// Winograd backward filter with tile size `T`.
pub(crate) struct WinogradBwdFilter<T> {
    accuracy: Accuracy,
    _tile: PhantomData<T>,
}

/// F(2×2, 3×3) backward filter.
pub(crate) static WINOGRAD_2X2_BWD_FILTER: WinogradBwdFilter<F2x2> = WinogradBwdFilter {
    accuracy: Accuracy::Normwise {
        c: 0.5,
        int_rel: 1e-5,
    },
    _tile: PhantomData,
};
/// F(4×4, 3×3) backward filter.
pub(crate) static WINOGRAD_4X4_BWD_FILTER: WinogradBwdFilter<F4x4> = WinogradBwdFilter {
    accuracy: Accuracy::Normwise {
        c: 4.0,
        int_rel: 1e-5,
    },
    _tile: PhantomData,
};

/// The forward plan of the tiles, and the backward buffers' sizes (floats).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BwdPlan {
    fw: Plan,
    /// Output channels per group rounded up to 16 (U's row length).
    kp: usize,
    /// 16-channel blocks of output channels.
    kbn: usize,
    /// Input-channel blocks of V, rounded up to even, and the padded channel count.
    cbe: usize,
    cpe: usize,
    v_len: usize,
    u_len: usize,
    dyc_len: usize,
    m_len: usize,
}

impl BwdPlan {
    fn new(p: &ConvProblem, m: usize) -> Option<BwdPlan> {
        let fw = Plan::with_block_bytes(p, m, block_budget(p, m))?;
        let kbn = fw.k.div_ceil(CB);
        let kp = kbn.checked_mul(CB)?;
        let cbe = fw.cbn.div_ceil(2).checked_mul(2)?;
        let cpe = cbe.checked_mul(CB)?;
        let nbq = fw.nb.div_ceil(TQ).checked_mul(TQ)?;
        Some(BwdPlan {
            fw,
            kp,
            kbn,
            cbe,
            cpe,
            v_len: cbe.checked_mul(fw.p * fw.nb * CB)?,
            u_len: nbq.checked_mul(fw.p)?.checked_mul(kp)?,
            dyc_len: nbq.checked_mul(m * m * CB)?,
            m_len: fw.p.checked_mul(fw.k)?.checked_mul(cpe)?,
        })
    }

    fn floats(&self) -> Option<usize> {
        self.fw
            .xc_len
            .checked_add(self.v_len)?
            .checked_add(self.u_len)?
            .checked_add(self.dyc_len)?
            .checked_add(self.m_len)
    }

    fn workspace_bytes(&self) -> Option<usize> {
        self.floats()?.checked_mul(4)?.checked_add(ALIGN)
    }

    /// Of the defaults, the call and the tensors' MB; the transformed-domain products' GFLOP
    /// (channels padded as the kernel runs them); the transforms' MB (U and V over every
    /// tile); M's MB (written once per block).
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        let d = default_cost_features(p, 0);
        let fw = &self.fw;
        // In f64: the products of the plan's sizes need not fit in usize (only each size
        // does), and a cost query must not overflow.
        let tiles = fw.groups as f64 * fw.all_tiles as f64 * fw.p as f64;
        let mut f = [0.0; COST_FEATURES];
        f[0] = d[0];
        f[1] = 2.0 * tiles * self.cpe as f64 * fw.k as f64 / 1e9;
        f[2] = d[2];
        f[3] = fw.groups as f64 * fw.nblocks as f64 * self.m_len as f64 * 4.0 / 1e6;
        f[9] = tiles * (fw.cp + self.kp) as f64 * 4.0 / 1e6;
        f
    }
}

impl<T: Tile> WinogradBwdFilter<T> {
    fn plan(&self, p: &ConvProblem) -> Result<BwdPlan> {
        BwdPlan::new(p, T::M).ok_or_else(|| Error::overflow(T::NAME, "workspace size"))
    }
}

impl<T: Tile> Algorithm<ConvBackwardFilter> for WinogradBwdFilter<T> {
    fn name(&self) -> &'static str {
        T::NAME
    }
    fn check(&self, p: &ConvProblem) -> std::result::Result<(), String> {
        check_problem(p, OpKind::ConvBackwardFilter)?;
        super::check_geometry(p)?;
        match BwdPlan::new(p, T::M).and_then(|pl| pl.workspace_bytes()) {
            Some(b) if b <= isize::MAX as usize => Ok(()),
            _ => Err("the workspace size overflows".into()),
        }
    }
    fn workspace_bytes(&self, p: &ConvProblem) -> usize {
        BwdPlan::new(p, T::M)
            .and_then(|pl| pl.workspace_bytes())
            .unwrap_or(usize::MAX)
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn accuracy(&self) -> Accuracy {
        self.accuracy
    }
    fn cost_features(&self, p: &ConvProblem) -> [f64; COST_FEATURES] {
        match BwdPlan::new(p, T::M) {
            Some(plan) => plan.cost_features(p),
            None => default_cost_features(p, usize::MAX),
        }
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        inputs: &ConvBwdFilterInputs<'_>,
        out: &mut TensorMut<'_>,
        workspace: &mut [u8],
    ) -> Result<()> {
        let x = inputs.x.f32("x")?;
        let dy = inputs.dy.f32("dy")?;
        let dw = out.f32("dw")?;
        let plan = self.plan(p)?;
        let args = Frame {
            plan: &plan,
            p,
            x,
            dy,
            alpha: inputs.alpha,
            beta: inputs.beta,
        };
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(s) = super::simd::Avx512::new(ctx.features) {
                return frame::<_, T>(s, ctx, &args, dw, workspace);
            }
            if let Some(s) = super::simd::Avx2::new(ctx.features) {
                return frame::<_, T>(s, ctx, &args, dw, workspace);
            }
        }
        frame::<_, T>(Scalar::new(), ctx, &args, dw, workspace)
    }
}

/// One call's read-only arguments.
struct Frame<'a> {
    plan: &'a BwdPlan,
    p: &'a ConvProblem,
    x: &'a [f32],
    dy: &'a [f32],
    alpha: f32,
    beta: f32,
}

/// What the dy transform of one block reads.
pub(crate) struct DyArgs<'a> {
    plan: &'a BwdPlan,
    dy: &'a [f32],
    ys: [usize; 4],
    g: usize,
    /// First tile of the block (over all images) and its tile count.
    t0: usize,
    nbt: usize,
}

/// What the products of one block read.
pub(crate) struct ProductArgs<'a> {
    plan: &'a BwdPlan,
    nbt: usize,
    v: &'a [f32],
    u: &'a [f32],
    first: bool,
}

/// What the filter transform of one group reads.
pub(crate) struct FilterOutArgs<'a> {
    plan: &'a BwdPlan,
    m: &'a [f32],
    ws: [usize; 4],
    flip: bool,
    alpha: f32,
    beta: f32,
}

fn frame<S: Family, T: Tile>(
    s: S,
    ctx: &ExecContext<'_>,
    a: &Frame<'_>,
    dw: &mut [f32],
    workspace: &mut [u8],
) -> Result<()> {
    let plan = a.plan;
    let fw = &plan.fw;
    let buf = carve_floats(plan.floats(), plan.workspace_bytes(), workspace)?;
    let (xc, rest) = buf.split_at_mut(fw.xc_len);
    let (v, rest) = rest.split_at_mut(plan.v_len);
    let (u, rest) = rest.split_at_mut(plan.u_len);
    let (dyc, mbuf) = rest.split_at_mut(plan.dyc_len);
    let ws = a.p.w().strides();
    let kg = fw.k;
    for g in 0..fw.groups {
        for blk in 0..fw.nblocks {
            let t0 = blk * fw.nb;
            let nbt = fw.nb.min(fw.all_tiles - t0);
            // V: the forward's input transform, one item per channel block; the padding
            // block (an odd count rounded up) holds zeros.
            let ia = InputArgs {
                plan: fw,
                x: a.x,
                g,
                t0,
                nbt,
                pairs: false,
            };
            let v_chunk = fw.p * nbt * CB;
            let xc_chunk = fw.a * fw.xc_cols * CB;
            for_chunks2(ctx, (v, v_chunk), (xc, xc_chunk), fw.cbn, |cb, v, xc| {
                s.input_item::<T>(&ia, cb, v, xc)
            });
            v[fw.cbn * v_chunk..plan.cbe * v_chunk].fill(0.0);
            // U: the dy transform, one item per TQ tiles.
            let da = DyArgs {
                plan,
                dy: a.dy,
                ys: a.p.y().strides(),
                g,
                t0,
                nbt,
            };
            let u_chunk = TQ * fw.p * plan.kp;
            let dyc_chunk = TQ * T::M * T::M * CB;
            for_chunks2(
                ctx,
                (u, u_chunk),
                (dyc, dyc_chunk),
                nbt.div_ceil(TQ),
                |q, u, d| s.bwdw_dy_item::<T>(&da, q, u, d),
            );
            // M_ξ += U_ξ · V_ξ, one item per transform position.
            let pa = ProductArgs {
                plan,
                nbt,
                v,
                u,
                first: blk == 0,
            };
            let m_chunk = kg * plan.cpe;
            let mbuf = &mut mbuf[..fw.p * m_chunk];
            if ctx.threads > 1 {
                for_each_chunk(ctx, mbuf, m_chunk, |xi, m| s.bwdw_product_item(&pa, xi, m));
            } else {
                for (xi, m) in mbuf.chunks_mut(m_chunk).enumerate() {
                    s.bwdw_product_item(&pa, xi, m);
                }
            }
        }
        // dW = alpha · Gᵀ M G + beta · dW, one item per output channel.
        let fa = FilterOutArgs {
            plan,
            m: mbuf,
            ws,
            flip: a.p.conv().mode() == ConvMode::Convolution,
            alpha: a.alpha,
            beta: a.beta,
        };
        let dwg = &mut dw[g * kg * ws[0]..(g + 1) * kg * ws[0]];
        if ctx.threads > 1 && kg > 1 {
            for_each_chunk(ctx, dwg, ws[0], |k, d| s.bwdw_filter_item::<T>(&fa, k, d));
        } else {
            for (k, d) in dwg.chunks_mut(ws[0]).enumerate() {
                s.bwdw_filter_item::<T>(&fa, k, d);
            }
        }
    }
    Ok(())
}

/// Copies dy rows `th·m .. th·m + m`, columns `tc0·m .. (tc0 + ntc)·m` of 16 output channels
/// from `k0` (of image `n`) into `dst` (\[row\]\[column\]\[CB\]), zero past dy and past the
/// group's channels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gather_dy<S: Simd>(
    s: S,
    a: &DyArgs<'_>,
    m: usize,
    n: usize,
    k0: usize,
    th: usize,
    tc0: usize,
    ntc: usize,
    dst: &mut [f32],
) {
    let fw = &a.plan.fw;
    let cols = ntc * m;
    let lanes = CB.min(fw.k - k0);
    let kabs = a.g * fw.k + k0;
    let ys = a.ys;
    let c0 = tc0 * m;
    let valid = fw.ow.saturating_sub(c0).min(cols);
    for i in 0..m {
        let row = &mut dst[i * cols * CB..(i + 1) * cols * CB];
        let oh = th * m + i;
        if oh >= fw.oh || valid == 0 {
            row.fill(0.0);
            continue;
        }
        row[valid * CB..].fill(0.0);
        let base = n * ys[0] + kabs * ys[1] + oh * ys[2] + c0 * ys[3];
        let row = &mut row[..valid * CB];
        if ys[1] == 1 {
            for (j, d) in row.chunks_exact_mut(CB).enumerate() {
                let src = base + j * ys[3];
                d[..lanes].copy_from_slice(&a.dy[src..src + lanes]);
                d[lanes..].fill(0.0);
            }
        } else if ys[3] == 1 {
            s.interleave16(a.dy, base, ys[1], lanes, valid, row);
        } else {
            for (j, d) in row.chunks_exact_mut(CB).enumerate() {
                for (l, d) in d.iter_mut().enumerate() {
                    *d = if l < lanes {
                        a.dy[base + l * ys[1] + j * ys[3]]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// The dy transform of tiles `q·TQ ..` of one block: `u` receives, for each tile,
/// \[ξ\]\[output channel, padded to 16\] (U = A e Aᵀ, A = (Aᵀ)ᵀ); `dyc` is the item's rows
/// buffer.
#[inline(always)]
pub(crate) fn dy_item<S: Simd, T: Tile>(
    s: S,
    a: &DyArgs<'_>,
    q: usize,
    u: &mut [f32],
    dyc: &mut [f32],
) {
    let plan = a.plan;
    let fw = &plan.fw;
    let (m, al) = (T::M, T::A);
    let pos = al * al;
    let first = q * TQ;
    let count = TQ.min(a.nbt - first);
    assert!(u.len() >= count * pos * plan.kp && dyc.len() >= TQ * m * m * CB);
    let mut done = 0;
    while done < count {
        // A run of tiles along one tile row of one image.
        let t = a.t0 + first + done;
        let (n, ti) = (t / fw.tiles, t % fw.tiles);
        let (th, tc0) = (ti / fw.tw, ti % fw.tw);
        let ntc = (fw.tw - tc0).min(count - done);
        let cols = ntc * m;
        for kb in 0..plan.kbn {
            gather_dy(s, a, m, n, kb * CB, th, tc0, ntc, dyc);
            for i in 0..ntc {
                let tl = done + i;
                for h in 0..CB / S::LANES {
                    let e: [[S::V; 6]; 6] = std::array::from_fn(|r| {
                        std::array::from_fn(|j| {
                            if r < m && j < m {
                                s.load(&dyc[((r * cols) + i * m + j) * CB + h * S::LANES..])
                            } else {
                                s.zero()
                            }
                        })
                    });
                    // tmp[ξ][j] = Σ_r Aᵀ[r][ξ] e[r][j].
                    let mut tmp = [[s.zero(); 6]; 8];
                    for (xi, tmp) in tmp.iter_mut().enumerate().take(al) {
                        for (j, tmp) in tmp.iter_mut().enumerate().take(m) {
                            let mut acc = s.zero();
                            for (r, at) in T::AT.iter().enumerate() {
                                let c = at[xi];
                                if c != 0.0 {
                                    acc = s.fma(s.splat(c as f32), e[r][j], acc);
                                }
                            }
                            *tmp = acc;
                        }
                    }
                    // U[ξ][η] = Σ_j tmp[ξ][j] Aᵀ[j][η].
                    for (xi, tmp) in tmp.iter().enumerate().take(al) {
                        for eta in 0..al {
                            let mut acc = s.zero();
                            for (j, at) in T::AT.iter().enumerate() {
                                let c = at[eta];
                                if c != 0.0 {
                                    acc = s.fma(s.splat(c as f32), tmp[j], acc);
                                }
                            }
                            let at = (tl * pos + xi * al + eta) * plan.kp + kb * CB + h * S::LANES;
                            s.store(acc, &mut u[at..]);
                        }
                    }
                }
            }
        }
        done += ntc;
    }
}

/// M_ξ (K × C, padded to `cpe` columns) = U_ξ · V_ξ over one block's tiles, added to M_ξ
/// after the first block: panels of 2·LANES input channels × up to `NR_MAX` output channels.
#[inline(always)]
pub(crate) fn product_item<S: Simd>(s: S, a: &ProductArgs<'_>, xi: usize, m: &mut [f32]) {
    let plan = a.plan;
    let fw = &plan.fw;
    let (nbt, cpe, kp) = (a.nbt, plan.cpe, plan.kp);
    let v_cb = fw.p * nbt * CB;
    let b_stride = fw.p * kp;
    assert!(m.len() >= fw.k * cpe);
    assert!(a.v.len() >= plan.cbe * v_cb && a.u.len() >= nbt * b_stride);
    let panels = (fw.cbn * CB).div_ceil(2 * S::LANES);
    for cpan in 0..panels {
        let c0 = cpan * 2 * S::LANES;
        let c1 = c0 + S::LANES;
        let a0 = (c0 / CB) * v_cb + xi * nbt * CB + c0 % CB;
        let a1 = (c1 / CB) * v_cb + xi * nbt * CB + c1 % CB;
        let mut k0 = 0;
        while k0 < fw.k {
            let nr = S::NR_MAX.min(fw.k - k0);
            let b = xi * kp + k0;
            // SAFETY: vector loads at a0 + t·CB and a1 + t·CB (t < nbt) read LANES floats of
            // channel block c0/CB or c1/CB < cbe, inside v (cbe·v_cb floats, checked above);
            // B elements at b + t·b_stride + j (j < nr, k0 + nr ≤ K ≤ kp) lie in u (nbt
            // tiles of b_stride floats); outputs at (k0 + j)·cpe + c0 + 2·LANES ≤ K·cpe ≤
            // m.len(), which is this item's alone.
            unsafe {
                product_kernel_n(
                    s,
                    nr,
                    (a.v.as_ptr().add(a0), a.v.as_ptr().add(a1)),
                    a.u.as_ptr().add(b),
                    b_stride,
                    nbt,
                    m.as_mut_ptr().add(k0 * cpe + c0),
                    cpe,
                    a.first,
                )
            };
            k0 += nr;
        }
    }
}

/// `NR` output channels × 2·LANES input channels over `depth` tiles: A vectors at `a.0 + t·CB`
/// and `a.1 + t·CB`, B scalars at `b + t·b_stride + j`; stored (`first`) or added at
/// `out + j·out_stride`.
///
/// # Safety
/// The CPU supports `S`; every address above is readable (A, B) or writable and this
/// thread's (out) for t < depth, j < NR.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product_kernel<S: Simd, const NR: usize>(
    s: S,
    a: (*const f32, *const f32),
    b: *const f32,
    b_stride: usize,
    depth: usize,
    out: *mut f32,
    out_stride: usize,
    first: bool,
) {
    let mut acc = [[s.zero(); 2]; NR];
    for t in 0..depth {
        // SAFETY: t < depth (contract).
        let (v0, v1) = unsafe { (s.load_ptr(a.0.add(t * CB)), s.load_ptr(a.1.add(t * CB))) };
        let bt = b.wrapping_add(t * b_stride);
        for (j, acc) in acc.iter_mut().enumerate() {
            // SAFETY: element (t, j) of B (contract).
            let bj = s.splat(unsafe { *bt.add(j) });
            acc[0] = s.fma(v0, bj, acc[0]);
            acc[1] = s.fma(v1, bj, acc[1]);
        }
    }
    for (j, acc) in acc.iter().enumerate() {
        let o = out.wrapping_add(j * out_stride);
        // SAFETY: row j's 2·LANES outputs are writable and this thread's (contract).
        unsafe {
            if first {
                s.store_ptr(acc[0], o);
                s.store_ptr(acc[1], o.add(S::LANES));
            } else {
                s.store_ptr(s.add(acc[0], s.load_ptr(o)), o);
                let o1 = o.add(S::LANES);
                s.store_ptr(s.add(acc[1], s.load_ptr(o1)), o1);
            }
        }
    }
}

/// Dispatches a runtime `nr` (1 ..= `S::NR_MAX`, at most 12) to [`product_kernel`].
///
/// # Safety
/// As [`product_kernel`] with NR = `nr`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn product_kernel_n<S: Simd>(
    s: S,
    nr: usize,
    a: (*const f32, *const f32),
    b: *const f32,
    b_stride: usize,
    depth: usize,
    out: *mut f32,
    out_stride: usize,
    first: bool,
) {
    assert!(nr >= 1 && nr <= S::NR_MAX.min(12));
    macro_rules! go {
        ($($n:literal)*) => {
            match nr {
                // SAFETY: the caller's contract with NR = nr.
                $($n => unsafe {
                    product_kernel::<S, $n>(s, a, b, b_stride, depth, out, out_stride, first)
                },)*
                _ => unreachable!("checked above"),
            }
        };
    }
    go!(1 2 3 4 5 6 7 8 9 10 11 12)
}

/// Output channel `k` (of the group) of the filter gradient: dw_k = alpha · Gᵀ M_k G +
/// beta · dw_k, vectorised over input channels; `d` is the filter's row k.
#[inline(always)]
pub(crate) fn filter_out_item<S: Simd, T: Tile>(
    s: S,
    a: &FilterOutArgs<'_>,
    k: usize,
    d: &mut [f32],
) {
    let plan = a.plan;
    let fw = &plan.fw;
    let al = T::A;
    let (cpe, kg) = (plan.cpe, fw.k);
    assert!(a.m.len() >= al * al * kg * cpe);
    let mut lanes = [[0f32; 16]; 9];
    let mut c0 = 0;
    while c0 < fw.c {
        let w: [[S::V; 8]; 8] = std::array::from_fn(|i| {
            std::array::from_fn(|j| {
                if i < al && j < al {
                    s.load(&a.m[((i * al + j) * kg + k) * cpe + c0..])
                } else {
                    s.zero()
                }
            })
        });
        // t[r][j] = Σ_i G[i][r] w[i][j]; z[r][c] = Σ_j t[r][j] G[j][c].
        let mut t = [[s.zero(); 8]; 3];
        for (r, t) in t.iter_mut().enumerate() {
            for (j, t) in t.iter_mut().enumerate().take(al) {
                let mut acc = s.zero();
                for (i, g) in T::G.iter().enumerate() {
                    if g[r] != 0.0 {
                        acc = s.fma(s.splat(g[r] as f32), w[i][j], acc);
                    }
                }
                *t = acc;
            }
        }
        for (r, t) in t.iter().enumerate() {
            for c in 0..3 {
                let mut acc = s.zero();
                for (j, g) in T::G.iter().enumerate() {
                    if g[c] != 0.0 {
                        acc = s.fma(s.splat(g[c] as f32), t[j], acc);
                    }
                }
                s.store(acc, &mut lanes[r * 3 + c]);
            }
        }
        let n = S::LANES.min(fw.c - c0);
        for (tap, lane) in lanes.iter().enumerate() {
            let (r, c) = (tap / 3, tap % 3);
            let (r, c) = if a.flip { (2 - r, 2 - c) } else { (r, c) };
            for (l, &z) in lane.iter().enumerate().take(n) {
                let o = (c0 + l) * a.ws[1] + r * a.ws[2] + c * a.ws[3];
                d[o] = scaled(z, d[o], a.alpha, a.beta);
            }
        }
        c0 += S::LANES;
    }
}
