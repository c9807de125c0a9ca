//! The complex products of the filter spectra with the input spectra: the driver over groups
//! and output channels, and the product kernels (portable, and the AVX-512 and AVX2 families).

use crate::conv::ExecContext;
use crate::cpu::Features;
use crate::error::Result;
use crate::runtime::parallel::SharedOut;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};

use super::filter::{pick_wblock_kernel, FilterTables, WBlockArgs};
use super::plan::{par_items, Spectral, BLOCK, LANES};

impl Spectral {
    /// Products of every group and output channel with the full filter spectra `w`.
    pub(super) fn products_all(
        &self,
        ctx: &ExecContext<'_>,
        w: &[f32],
        xbuf: &[f32],
        count: usize,
        ybuf: &mut [f32],
    ) -> Result<()> {
        for g in 0..self.groups {
            let wl = WSource::View(WView {
                data: w,
                base: g * self.blocks * self.kg * self.cg * BLOCK,
                bstride: self.kg * self.cg * BLOCK,
            });
            self.products(ctx, &wl, g, 0, self.kg, xbuf, count, ybuf)?;
        }
        Ok(())
    }

    /// Y\[b\]\[t\]\[g·kg + k0 + kk\] = Σ_c W\[b\]\[kk\]\[c\] ⊙ X\[b\]\[t\]\[g·cg + c\] for kk < kb,
    /// t < count, every bin block b.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn products(
        &self,
        ctx: &ExecContext<'_>,
        src: &WSource<'_>,
        g: usize,
        k0: usize,
        kb: usize,
        xbuf: &[f32],
        count: usize,
        ybuf: &mut [f32],
    ) -> Result<()> {
        let (c_all, k_all) = (self.c(), self.k());
        let xb = self.per_pass * c_all * BLOCK;
        let kernels = Kernels::for_features(ctx.features);
        let out = SharedOut::new(&mut ybuf[..count * k_all * self.blocks * BLOCK]);
        let fill = pick_wblock_kernel(ctx.features);
        // Both within what `scratch` reserved: nothing is allocated per block.
        let per_block = |(tmp, wblk): &mut (Vec<f32>, Vec<f32>), b: usize| {
            tmp.resize(KB_MAX * TB_MAX * BLOCK, 0.0);
            let mut kk = 0;
            while kk < kb {
                let kn = kernels.kb(count).min(kb - kk);
                let (wdata, w_off) = match src {
                    WSource::View(wl) => (wl.data, wl.base + b * wl.bstride + kk * self.cg * BLOCK),
                    WSource::Fused { tables, rows } => {
                        wblk.resize(kn * self.cg * BLOCK, 0.0);
                        let args = WBlockArgs {
                            t: tables,
                            blk: b,
                            rows,
                            f_stride: self.k() * self.cg * self.r * 2,
                            k0: g * self.kg + k0 + kk,
                            cg: self.cg,
                        };
                        fill(&args, &mut wblk[..kn * self.cg * BLOCK]);
                        (&wblk[..], 0)
                    }
                };
                let mut t = 0;
                while t < count {
                    let tn = kernels.tb.min(count - t);
                    let args = ProdArgs {
                        w: wdata,
                        w_off,
                        w_kstride: self.cg * BLOCK,
                        x: xbuf,
                        x_off: b * xb + t * c_all * BLOCK + g * self.cg * BLOCK,
                        x_tstride: c_all * BLOCK,
                        cg: self.cg,
                        kb: kn,
                        tb: tn,
                    };
                    (kernels.run)(&args, tmp);
                    for i in 0..kn {
                        let k = g * self.kg + k0 + kk + i;
                        for j in 0..tn {
                            let at = self.y_index(t + j, k, b);
                            let src = &tmp[(i * tn + j) * BLOCK..][..BLOCK];
                            // SAFETY: bin block b of (tile, k) is written by this block's
                            // item alone.
                            unsafe { out.write_slice(at, src) };
                        }
                    }
                    t += tn;
                }
                kk += kn;
            }
        };
        let fused = matches!(src, WSource::Fused { .. });
        let scratch = || -> Result<(Vec<f32>, Vec<f32>)> {
            let what = "the spectral products' scratch";
            let wblk = if fused { KB_MAX * self.cg * BLOCK } else { 0 };
            Ok((
                crate::alloc::try_vec_with_capacity(KB_MAX * TB_MAX * BLOCK, what)?,
                crate::alloc::try_vec_with_capacity(wblk, what)?,
            ))
        };
        par_items(ctx, self.blocks, scratch, per_block)
    }

    /// Where bin block `b` of output channel `k` of pass tile `t` sits in Y:
    /// \[tile\]\[k\]\[block\]\[re, im ×16\], so that each inverse transform reads one run.
    pub(super) fn y_index(&self, t: usize, k: usize, b: usize) -> usize {
        ((t * self.k() + k) * self.blocks + b) * BLOCK
    }
}

/// Where the products find the filter spectra.
pub(super) enum WSource<'a> {
    /// Stored (prepared, or computed for the call).
    View(WView<'a>),
    /// Computed per bin block and output-channel block from the filters' row transforms.
    Fused {
        tables: &'a FilterTables,
        rows: &'a [f32],
    },
}

/// Filter spectra as the products read them: block b's channel block starts at
/// `base + b·bstride`, then \[k\]\[c\]\[re, im ×16\].
pub(super) struct WView<'a> {
    pub(super) data: &'a [f32],
    pub(super) base: usize,
    pub(super) bstride: usize,
}

/// One call of the product kernel: for kk < kb, t < tb,
/// out\[(kk·tb + t)·32 ..\] = Σ_{c < cg} w\[w_off + kk·w_kstride + c·32 ..\] ⊙
/// x\[x_off + t·x_tstride + c·32 ..\], lane-wise complex (16 re, then 16 im).
struct ProdArgs<'a> {
    w: &'a [f32],
    w_off: usize,
    w_kstride: usize,
    x: &'a [f32],
    x_off: usize,
    x_tstride: usize,
    cg: usize,
    kb: usize,
    tb: usize,
}

impl ProdArgs<'_> {
    /// Panics unless every access of the call lies inside w, x and y.
    fn check(&self, y: &[f32]) {
        assert!(self.kb >= 1 && self.tb >= 1 && self.cg >= 1);
        let last = |off: usize, a: usize, sa: usize, b: usize, sb: usize| {
            off + (a - 1) * sa + (b - 1) * sb + BLOCK
        };
        assert!(last(self.w_off, self.kb, self.w_kstride, self.cg, BLOCK) <= self.w.len());
        assert!(last(self.x_off, self.tb, self.x_tstride, self.cg, BLOCK) <= self.x.len());
        assert!(self.kb * self.tb * BLOCK <= y.len());
    }
}

/// Largest register tile of any family: output channels, tiles.
const KB_MAX: usize = 12;
const TB_MAX: usize = 3;

/// A product kernel family: its register tile and entry point.
struct Kernels {
    /// Output channels per call when there is one tile, and when there are more.
    kb1: usize,
    kbn: usize,
    /// Tiles per call.
    tb: usize,
    run: fn(&ProdArgs<'_>, &mut [f32]),
}

impl Kernels {
    /// The widest family whose token the usable `features` make.
    fn for_features(features: Features) -> Kernels {
        #[cfg(target_arch = "x86_64")]
        {
            if Avx512::new(features).is_some() {
                return Kernels {
                    kb1: 12,
                    kbn: 4,
                    tb: 3,
                    run: avx512::run,
                };
            }
            if Avx2::new(features).is_some() {
                return Kernels {
                    kb1: 6,
                    kbn: 3,
                    tb: 2,
                    run: avx2::run,
                };
            }
        }
        let _ = features;
        Kernels {
            kb1: 4,
            kbn: 4,
            tb: 2,
            run: portable,
        }
    }
    fn kb(&self, tiles: usize) -> usize {
        if tiles <= 1 {
            self.kb1
        } else {
            self.kbn
        }
    }
}

/// The portable kernel: one (k, t) pair at a time.
fn portable(a: &ProdArgs<'_>, y: &mut [f32]) {
    a.check(y);
    for kk in 0..a.kb {
        for t in 0..a.tb {
            let mut acc = [0f32; BLOCK];
            for c in 0..a.cg {
                let w = &a.w[a.w_off + kk * a.w_kstride + c * BLOCK..][..BLOCK];
                let x = &a.x[a.x_off + t * a.x_tstride + c * BLOCK..][..BLOCK];
                for l in 0..LANES {
                    let (wr, wi, xr, xi) = (w[l], w[LANES + l], x[l], x[LANES + l]);
                    acc[l] += wr * xr - wi * xi;
                    acc[LANES + l] += wr * xi + wi * xr;
                }
            }
            let at = (kk * a.tb + t) * BLOCK;
            y[at..at + BLOCK].copy_from_slice(&acc);
        }
    }
}

/// An x86 product kernel family: `run` dispatches the call's block shape to a monomorphised
/// `kernel`, which keeps a register tile of `KB` output channels × `TB` tiles of `vector`
/// lanes. A 16-lane vector covers a bin block; a family of 8-lane vectors names its `halves`
/// (the lane offsets 0 and 8), and its kernel takes the half and is called once per half.
#[cfg(target_arch = "x86_64")]
macro_rules! product_family {
    (
        feature: $feature:literal,
        vector: $vector:ident,
        zero: $zero:ident,
        load: $load:ident,
        store: $store:ident,
        fmadd: $fmadd:ident,
        fnmadd: $fnmadd:ident,
        $(halves: $half:ident in $halves:expr,)?
        shapes: [$(($k:literal, $t:literal))*]
    ) => {
        use std::arch::x86_64::*;

        use super::{ProdArgs, BLOCK, LANES};

        /// Dispatches the call's block shape to a monomorphised kernel.
        pub(super) fn run(a: &ProdArgs<'_>, y: &mut [f32]) {
            a.check(y);
            match (a.kb, a.tb) {
                $(($k, $t) => {
                    // SAFETY: this family is only chosen where a token of its target features
                    // was made (`Kernels::for_features`), and the accesses were bounds-checked
                    // above.
                    unsafe { call::<$k, $t>(a, y) }
                })*
                _ => unreachable!("block shape {}x{} outside the family", a.kb, a.tb),
            }
        }

        /// The kernel for the block shape, once per half block where the family has halves.
        ///
        /// # Safety
        /// The family's target features; `a.check(y)` holds.
        #[inline(always)]
        unsafe fn call<const KB: usize, const TB: usize>(a: &ProdArgs<'_>, y: &mut [f32]) {
            $(for $half in $halves)? {
                // SAFETY: as for this function.
                unsafe { kernel::<KB, TB>(a, y $(, $half)?) }
            }
        }

        /// # Safety
        /// The family's target features; `a.check(y)` holds; the half, where the family has
        /// halves, is one of them.
        #[target_feature(enable = $feature)]
        unsafe fn kernel<const KB: usize, const TB: usize>(
            a: &ProdArgs<'_>,
            y: &mut [f32],
            $($half: usize,)?
        ) {
            let zero: $vector = $zero();
            let mut re = [[zero; TB]; KB];
            let mut im = [[zero; TB]; KB];
            let wp = a.w.as_ptr().wrapping_add(a.w_off $(+ $half)?);
            let xp = a.x.as_ptr().wrapping_add(a.x_off $(+ $half)?);
            for c in 0..a.cg {
                let mut xr = [zero; TB];
                let mut xi = [zero; TB];
                for t in 0..TB {
                    let p = xp.wrapping_add(t * a.x_tstride + c * BLOCK);
                    // SAFETY: inside x (checked by the caller; half + vector lanes <= 16).
                    unsafe {
                        xr[t] = $load(p);
                        xi[t] = $load(p.add(LANES));
                    }
                }
                for k in 0..KB {
                    let p = wp.wrapping_add(k * a.w_kstride + c * BLOCK);
                    // SAFETY: inside w (checked by the caller).
                    let (wr, wi) = unsafe { ($load(p), $load(p.add(LANES))) };
                    for t in 0..TB {
                        re[k][t] = $fmadd(wr, xr[t], re[k][t]);
                        re[k][t] = $fnmadd(wi, xi[t], re[k][t]);
                        im[k][t] = $fmadd(wr, xi[t], im[k][t]);
                        im[k][t] = $fmadd(wi, xr[t], im[k][t]);
                    }
                }
            }
            let yp = y.as_mut_ptr() $(.wrapping_add($half))?;
            for k in 0..KB {
                for t in 0..TB {
                    let p = yp.wrapping_add((k * TB + t) * BLOCK);
                    // SAFETY: inside y (checked by the caller).
                    unsafe {
                        $store(p, re[k][t]);
                        $store(p.add(LANES), im[k][t]);
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    product_family! {
        feature: "avx512f",
        vector: __m512,
        zero: _mm512_setzero_ps,
        load: _mm512_loadu_ps,
        store: _mm512_storeu_ps,
        fmadd: _mm512_fmadd_ps,
        fnmadd: _mm512_fnmadd_ps,
        shapes: [
            (1, 1)(2, 1)(3, 1)(4, 1)(5, 1)(6, 1)(7, 1)(8, 1)(9, 1)(10, 1)(11, 1)(12, 1)
            (1, 2)(2, 2)(3, 2)(4, 2)(1, 3)(2, 3)(3, 3)(4, 3)
        ]
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    product_family! {
        feature: "avx2,fma",
        vector: __m256,
        zero: _mm256_setzero_ps,
        load: _mm256_loadu_ps,
        store: _mm256_storeu_ps,
        fmadd: _mm256_fmadd_ps,
        fnmadd: _mm256_fnmadd_ps,
        halves: half in [0, 8],
        shapes: [(1, 1)(2, 1)(3, 1)(4, 1)(5, 1)(6, 1)(1, 2)(2, 2)(3, 2)]
    }
}
