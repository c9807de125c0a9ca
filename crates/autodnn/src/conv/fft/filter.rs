//! Filter spectra: how a plain call gets them, the prepared spectra, and the direct filter
//! transform (row and column stages, sixteen filters per vector) compiled per ISA.

use crate::conv::ExecContext;
use crate::cpu::Features;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::runtime::parallel::SharedOut;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};

use super::plan::{par_items, Spectral, BLOCK, LANES};

/// How a plain (unprepared) call gets its filter spectra.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlainFilter {
    /// All of them once per call, into the workspace (what prepared weights hold).
    Full,
    /// Up to this many output channels of one group at a time, each block consumed by the
    /// products of every tile of the pass before the next is computed (passes after the
    /// first transform the filter again).
    KBlocks(usize),
    /// Chosen automatically when every tile fits in one pass: the filter's row transforms
    /// (R·(nw/2 + 1) values per filter, laid out by frequency column) into the workspace,
    /// and the column transforms of each bin block's filter spectra computed right before
    /// the products that consume them, a few output channels at a time, never stored whole.
    Fused,
}

impl Spectral {
    /// The filter spectra of `w` (what prepared weights hold).
    pub(crate) fn prepare(&self, ctx: &ExecContext<'_>, w: &[f32]) -> Result<Vec<f32>> {
        let len = self.filter_floats().expect("checked when made");
        let mut out = crate::alloc::try_vec(len, 0.0, "filter spectra")?;
        let tables = self.filter_tables()?;
        for g in 0..self.groups {
            let at = g * self.blocks * self.kg * self.cg * BLOCK;
            let dst = &mut out[at..at + self.blocks * self.kg * self.cg * BLOCK];
            self.filter_spectra(ctx, &tables, w, g, 0, self.kg, dst)?;
        }
        Ok(out)
    }

    /// Computes the spectra of output channels `k0 .. k0 + kb` of group `g` into `dst`, laid
    /// out \[block\]\[kb\]\[c\]\[re, im ×16\]: conjugated (correlation) and scaled by
    /// 1/(nh·nw) (the unnormalised inverse). The R×S taps are few on a large grid, so the DFT
    /// is evaluated directly and separably (rows: S taps to nw/2 + 1 frequencies, vectorised
    /// over frequencies; columns: R rows to the bins of each block, vectorised over the
    /// block's lanes) instead of transforming a mostly-zero grid.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn filter_spectra(
        &self,
        ctx: &ExecContext<'_>,
        tables: &FilterTables,
        w: &[f32],
        g: usize,
        k0: usize,
        kb: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        assert!(dst.len() >= self.blocks * kb * self.cg * BLOCK);
        let out = SharedOut::new(dst);
        let one = pick_filter_kernel(ctx.features);
        let item = |buf: &mut FilterScratch, i: usize| {
            let (kk, c) = (i / self.cg, i % self.cg);
            let kf = g * self.kg + k0 + kk;
            let base = kf * self.ws[0] + c * self.ws[1];
            buf.taps.clear();
            for r in 0..self.r {
                let fr = if self.flip { self.r - 1 - r } else { r };
                for s in 0..self.s {
                    let fs = if self.flip { self.s - 1 - s } else { s };
                    buf.taps.push(w[base + fr * self.ws[2] + fs * self.ws[3]]);
                }
            }
            one(tables, buf);
            for (b, chunk) in buf.chunks.chunks(BLOCK).enumerate() {
                let at = (b * kb + kk) * self.cg * BLOCK + c * BLOCK;
                // SAFETY: item (kk, c) alone writes the chunks of (kk, c) in every block.
                unsafe { out.write_slice(at, chunk) };
            }
        };
        par_items(ctx, kb * self.cg, || FilterScratch::new(tables, 0), item)
    }

    /// The filters' row transforms (the first stage of [`Spectral::filter_spectra`]) into
    /// `dst`, laid out \[f\]\[filter\]\[r\]\[re, im\] (filter = k·C/g + c), so that a bin
    /// block's column transforms read each filter's rows as one short run (a layout with the
    /// filters innermost puts the rows 4 KiB-multiples apart, and they evict each other from
    /// L1). Sixteen filters at a time, one per vector lane.
    pub(super) fn filter_rows(
        &self,
        ctx: &ExecContext<'_>,
        tables: &FilterTables,
        w: &[f32],
        dst: &mut [f32],
    ) -> Result<()> {
        let filters = self.k() * self.cg;
        let f_stride = self.r * 2 * filters;
        assert!(dst.len() >= self.v * f_stride);
        let out = SharedOut::new(dst);
        let rows_of = pick_rows_kernel(ctx.features);
        let taps = self.r * self.s;
        let item = |buf: &mut FilterScratch, it: usize| {
            let i0 = it * LANES;
            let n = LANES.min(filters - i0);
            // Every buffer below stays within what FilterScratch::new reserved.
            buf.taps.clear();
            buf.taps.resize(taps * LANES, 0.0);
            for j in 0..n {
                let (k, c) = ((i0 + j) / self.cg, (i0 + j) % self.cg);
                let base = k * self.ws[0] + c * self.ws[1];
                for r in 0..self.r {
                    let fr = if self.flip { self.r - 1 - r } else { r };
                    for s in 0..self.s {
                        let fs = if self.flip { self.s - 1 - s } else { s };
                        buf.taps[(r * self.s + s) * LANES + j] =
                            w[base + fr * self.ws[2] + fs * self.ws[3]];
                    }
                }
            }
            buf.run.resize(self.v * self.r * BLOCK, 0.0);
            rows_of(tables, self.v, buf);
            let r2 = self.r * 2;
            let mut line = std::mem::take(&mut buf.chunks);
            line.resize(LANES * r2, 0.0);
            for f in 0..self.v {
                for r in 0..self.r {
                    let src = &buf.run[(f * self.r + r) * BLOCK..][..BLOCK];
                    for j in 0..n {
                        line[j * r2 + 2 * r] = src[j];
                        line[j * r2 + 2 * r + 1] = src[LANES + j];
                    }
                }
                // SAFETY: this item alone writes filters i0 .. i0 + n of every column f.
                unsafe { out.write_slice(f * f_stride + i0 * r2, &line[..n * r2]) };
            }
            buf.chunks = line;
        };
        let run = self.v * self.r * BLOCK;
        par_items(
            ctx,
            filters.div_ceil(LANES),
            || FilterScratch::new(tables, run),
            item,
        )
    }

    /// The tables of [`Spectral::filter_spectra`] for this grid.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when they cannot be allocated.
    pub(super) fn filter_tables(&self) -> Result<FilterTables> {
        use std::f64::consts::TAU;
        let what = "the filter transform's tables";
        let (nh, nw, v) = (self.nh, self.nw, self.v);
        let vp = v.next_multiple_of(LANES);
        let mut ev = crate::alloc::try_vec(self.s * 2 * vp, 0f32, what)?;
        for s in 0..self.s {
            for f in 0..v {
                let a = TAU * ((f * s * self.dil[1]) % nw) as f64 / nw as f64;
                ev[2 * s * vp + f] = a.cos() as f32;
                ev[(2 * s + 1) * vp + f] = a.sin() as f32;
            }
        }
        let scale = 1.0 / (nh * nw) as f64;
        let mut roots = crate::alloc::try_vec_with_capacity(nh, what)?;
        roots.extend((0..nh).map(|j| {
            let a = TAU * j as f64 / nh as f64;
            ((a.cos() * scale) as f32, (a.sin() * scale) as f32)
        }));
        let bins = nh * v;
        // The runs of one frequency column in each block, counted first (the loop below).
        let mut runs = 0;
        for b in 0..self.blocks {
            let mut l = 0;
            while l < LANES && b * LANES + l < bins {
                let f = (b * LANES + l) / nh;
                l = ((f + 1) * nh - b * LANES).min(LANES);
                runs += 1;
            }
        }
        let mut t = FilterTables {
            r: self.r,
            s: self.s,
            vp,
            ev,
            seg_v: crate::alloc::try_vec_with_capacity(runs, what)?,
            seg_start: crate::alloc::try_vec_with_capacity(self.blocks + 1, what)?,
            fu: crate::alloc::try_vec_with_capacity(runs * self.r * BLOCK, what)?,
            blocks: self.blocks,
        };
        for b in 0..self.blocks {
            t.seg_start.push(t.seg_v.len());
            let mut l = 0;
            while l < LANES && b * LANES + l < bins {
                let f = (b * LANES + l) / nh;
                let end = ((f + 1) * nh - b * LANES).min(LANES);
                let at = t.fu.len();
                t.fu.resize(at + self.r * BLOCK, 0.0);
                for lane in l..end.min(bins - b * LANES) {
                    let u = b * LANES + lane - f * nh;
                    for r in 0..self.r {
                        let (c, s) = roots[(u * r * self.dil[0]) % nh];
                        t.fu[at + r * BLOCK + lane] = c;
                        t.fu[at + r * BLOCK + LANES + lane] = s;
                    }
                }
                t.seg_v.push(f);
                l = end;
            }
        }
        t.seg_start.push(t.seg_v.len());
        debug_assert_eq!(t.seg_v.len(), runs);
        Ok(t)
    }
}

/// Tables of the direct filter transform.
pub(super) struct FilterTables {
    r: usize,
    s: usize,
    blocks: usize,
    /// Row stage, \[s\]\[cos, sin\]\[vp\]: the angle 2π·f·s·dw/nw for frequency column f
    /// (0 past the last column).
    vp: usize,
    ev: Vec<f32>,
    /// Column stage: each block's lanes in runs of one frequency column (`seg_v`); block b's
    /// runs are `seg_start[b] .. seg_start[b + 1]`; run i's factors, \[r\]\[cos, sin ×16\], are
    /// at `fu[i·r·32 ..]` (angle 2π·u·r·dh/nh of each lane's row frequency u, times
    /// 1/(nh·nw); 0 on lanes outside the run).
    seg_v: Vec<usize>,
    seg_start: Vec<usize>,
    fu: Vec<f32>,
}

/// One worker's buffers for filter transforms.
struct FilterScratch {
    /// The filter's taps, \[r\]\[s\], flipped in convolution mode.
    taps: Vec<f32>,
    /// Row stage result, \[r\]\[re, im\]\[vp\].
    rows: Vec<f32>,
    /// The result, \[block\]\[re, im ×16\].
    chunks: Vec<f32>,
    /// Row transforms of several filters by frequency column (fused plain calls).
    run: Vec<f32>,
}

impl FilterScratch {
    /// Buffers for `t`, with room for `run` floats of row transforms (0 when unused), each
    /// as large as any use of it: nothing grows afterwards.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when they cannot be allocated.
    pub(super) fn new(t: &FilterTables, run: usize) -> Result<FilterScratch> {
        let what = "the filter transform's scratch";
        let mut chunks =
            crate::alloc::try_vec_with_capacity((t.blocks * BLOCK).max(LANES * 2 * t.r), what)?;
        chunks.resize(t.blocks * BLOCK, 0.0);
        Ok(FilterScratch {
            taps: crate::alloc::try_vec_with_capacity(t.r * t.s * LANES, what)?,
            rows: crate::alloc::try_vec(t.r * 2 * t.vp, 0.0, what)?,
            chunks,
            run: crate::alloc::try_vec_with_capacity(run, what)?,
        })
    }
}

/// a·x + acc: one fused multiply-add when `FUSED` (only where FMA instructions exist:
/// elsewhere `mul_add` is a slow library call), else a multiply and an add.
#[inline(always)]
fn mul_add<const FUSED: bool>(a: f32, x: f32, acc: f32) -> f32 {
    if FUSED {
        a.mul_add(x, acc)
    } else {
        acc + a * x
    }
}

/// One output-channel block of one bin block's filter spectra, from the row transforms.
pub(super) struct WBlockArgs<'a> {
    pub(super) t: &'a FilterTables,
    pub(super) blk: usize,
    /// Row transforms, \[f\]\[filter\]\[r\]\[re, im\].
    pub(super) rows: &'a [f32],
    pub(super) f_stride: usize,
    /// First (global) output channel of the block.
    pub(super) k0: usize,
    pub(super) cg: usize,
}

/// The column stage of [`wblock_one`] for the filters from `$filter` on, whose row transforms
/// take `$span` floats of each frequency's: per filter, its row transform `$off` floats on,
/// four independent FMA chains (re = Σ tr·c − Σ ti·s, im = Σ tr·s + Σ ti·c) sharing each
/// factor load, and the result `$at` floats into `$out`.
macro_rules! wblock_filters {
    (
        $a:ident, $t:ident, $r2:ident, $z:ident, $fma:ident, $filter:expr, $span:expr;
        $([$($off:tt)*] => $out:ident[$($at:tt)*], $tr:ident $ti:ident $rc:ident $rs:ident $is:ident $ic:ident);+
    ) => {{
        $(let (mut $rc, mut $rs, mut $is, mut $ic) = ($z, $z, $z, $z);)+
        for seg in $t.seg_start[$a.blk]..$t.seg_start[$a.blk + 1] {
            let f = $t.seg_v[seg];
            let tt = &$a.rows[f * $a.f_stride + $filter * $r2..][..$span];
            for r in 0..$t.r {
                $(let ($tr, $ti) = (tt[$($off)* 2 * r], tt[$($off)* 2 * r + 1]);)+
                let fu: &[f32; BLOCK] = $t.fu[(seg * $t.r + r) * BLOCK..][..BLOCK]
                    .try_into()
                    .expect("BLOCK floats");
                for l in 0..LANES {
                    let (c, s) = (fu[l], fu[LANES + l]);
                    $(
                        $rc[l] = $fma($tr, c, $rc[l]);
                        $rs[l] = $fma($ti, s, $rs[l]);
                        $is[l] = $fma($tr, s, $is[l]);
                        $ic[l] = $fma($ti, c, $ic[l]);
                    )+
                }
            }
        }
        for l in 0..LANES {
            $(
                $out[$($at)* l] = $rc[l] - $rs[l];
                $out[$($at)* LANES + l] = $is[l] + $ic[l];
            )+
        }
    }};
}

/// The column stage of the filter transform for one bin block and `out.len() / (cg·32)`
/// output channels, into `out` (\[k\]\[c\]\[re, im ×16\]).
#[inline(always)]
fn wblock_one<const FUSED: bool>(a: &WBlockArgs<'_>, out: &mut [f32]) {
    let fma = mul_add::<FUSED>;
    let t = a.t;
    let r2 = t.r * 2;
    let z = [0f32; LANES];
    let done = out.len() / (2 * BLOCK) * 2;
    // Two filters at a time: eight independent FMA chains sharing each factor load.
    let mut pairs = out.chunks_exact_mut(2 * BLOCK);
    for (p, pair) in pairs.by_ref().enumerate() {
        let pair: &mut [f32; 2 * BLOCK] = pair.try_into().expect("2 BLOCK floats");
        wblock_filters!(a, t, r2, z, fma, a.k0 * a.cg + 2 * p, 2 * r2;
            [] => pair[], tr ti rc rs is ic;
            [r2 +] => pair[BLOCK +], tr2 ti2 rc2 rs2 is2 ic2);
    }
    if let Ok(chunk) = <&mut [f32; BLOCK]>::try_from(pairs.into_remainder()) {
        wblock_filters!(a, t, r2, z, fma, a.k0 * a.cg + done, r2; [] => chunk[], tr ti rc rs is ic);
    }
}

/// `$one::<true>` compiled for the widest ISA the cap allows (its body vectorised by the
/// compiler for those target features), `$one::<false>` where FMA instructions do not exist.
macro_rules! pick_kernel {
    ($features:expr, $one:ident, |$($arg:ident: $ty:ty),*|) => {{
        let features: Features = $features;
        #[cfg(target_arch = "x86_64")]
        {
            if Avx512::new(features).is_some() {
                return |$($arg),*| {
                    #[target_feature(enable = "avx512f")]
                    fn inner($($arg: $ty),*) {
                        $one::<true>($($arg),*)
                    }
                    // SAFETY: chosen only where an Avx512 token was made (above): the CPU has
                    // AVX-512F.
                    unsafe { inner($($arg),*) }
                };
            }
            if Avx2::new(features).is_some() {
                return |$($arg),*| {
                    #[target_feature(enable = "avx2,fma")]
                    fn inner($($arg: $ty),*) {
                        $one::<true>($($arg),*)
                    }
                    // SAFETY: chosen only where an Avx2 token was made (above): the CPU has
                    // AVX2 and FMA.
                    unsafe { inner($($arg),*) }
                };
            }
        }
        let _ = features;
        $one::<false>
    }};
}

/// [`wblock_one`] compiled for the widest ISA the cap allows.
pub(super) fn pick_wblock_kernel(features: Features) -> fn(&WBlockArgs<'_>, &mut [f32]) {
    pick_kernel!(features, wblock_one, |a: &WBlockArgs<'_>, o: &mut [f32]|)
}

/// [`rows16_one`] compiled for the widest ISA the cap allows.
fn pick_rows_kernel(features: Features) -> fn(&FilterTables, usize, &mut FilterScratch) {
    pick_kernel!(features, rows16_one, |t: &FilterTables, v: usize, b: &mut FilterScratch|)
}

/// The row stage for sixteen filters, one per lane: `b.taps` (\[r\]\[s\]\[16\]) into `b.run`
/// (\[f\]\[r\]\[re ×16, im ×16\]) for the first `v` frequency columns. The same operations
/// in the same order as [`filter_one`]'s row stage, so the spectra are bit-identical.
#[inline(always)]
fn rows16_one<const FUSED: bool>(t: &FilterTables, v: usize, b: &mut FilterScratch) {
    let fma = mul_add::<FUSED>;
    let vp = t.vp;
    for (f, out) in b.run.chunks_exact_mut(t.r * BLOCK).take(v).enumerate() {
        for (r, chunk) in out.chunks_exact_mut(BLOCK).enumerate() {
            let (mut re, mut im) = ([0f32; LANES], [0f32; LANES]);
            for s in 0..t.s {
                let (c, sn) = (t.ev[2 * s * vp + f], t.ev[(2 * s + 1) * vp + f]);
                let tp: &[f32; LANES] = b.taps[(r * t.s + s) * LANES..][..LANES]
                    .try_into()
                    .expect("LANES floats");
                for l in 0..LANES {
                    re[l] = fma(tp[l], c, re[l]);
                    im[l] = fma(tp[l], sn, im[l]);
                }
            }
            chunk[..LANES].copy_from_slice(&re);
            chunk[LANES..].copy_from_slice(&im);
        }
    }
}

/// The filter transform compiled for the widest ISA the cap allows.
fn pick_filter_kernel(features: Features) -> fn(&FilterTables, &mut FilterScratch) {
    pick_kernel!(features, filter_one, |t: &FilterTables, b: &mut FilterScratch|)
}

/// The separable DFT of one filter (`b.taps`) into `b.chunks`; plain Rust on fixed-size
/// lane arrays, vectorised by the compiler for the enclosing target features. `FUSED` uses
/// `mul_add` (only where FMA instructions exist: elsewhere it is a slow library call).
#[inline(always)]
fn filter_one<const FUSED: bool>(t: &FilterTables, b: &mut FilterScratch) {
    let fma = mul_add::<FUSED>;
    let vp = t.vp;
    filter_rows_one::<FUSED>(t, b);
    // Columns: W[u][f] = Σ_r T1[r][f] · e^{+2πi·u·r·dh/nh} / (nh·nw), per block of bins.
    for (blk, chunk) in b.chunks.chunks_exact_mut(BLOCK).enumerate() {
        let chunk: &mut [f32; BLOCK] = chunk.try_into().expect("BLOCK floats");
        // Four independent sums (re = Σ tr·c − Σ ti·s, im = Σ tr·s + Σ ti·c) keep the FMA
        // chains short.
        let z = [0f32; LANES];
        let (mut rc, mut rs, mut is, mut ic) = (z, z, z, z);
        for seg in t.seg_start[blk]..t.seg_start[blk + 1] {
            let f = t.seg_v[seg];
            for r in 0..t.r {
                let (tr, ti) = (b.rows[r * 2 * vp + f], b.rows[r * 2 * vp + vp + f]);
                let fu: &[f32; BLOCK] = t.fu[(seg * t.r + r) * BLOCK..][..BLOCK]
                    .try_into()
                    .expect("BLOCK floats");
                for l in 0..LANES {
                    let (c, s) = (fu[l], fu[LANES + l]);
                    rc[l] = fma(tr, c, rc[l]);
                    rs[l] = fma(ti, s, rs[l]);
                    is[l] = fma(tr, s, is[l]);
                    ic[l] = fma(ti, c, ic[l]);
                }
            }
        }
        for l in 0..LANES {
            chunk[l] = rc[l] - rs[l];
            chunk[LANES + l] = is[l] + ic[l];
        }
    }
}

/// The row stage of the filter transform: `b.taps` into `b.rows`.
#[inline(always)]
fn filter_rows_one<const FUSED: bool>(t: &FilterTables, b: &mut FilterScratch) {
    let fma = mul_add::<FUSED>;
    let vp = t.vp;
    // Rows: T1[r][f] = Σ_s w[r][s] · e^{+2πi·f·s·dw/nw}, 16 frequencies at a time.
    for r in 0..t.r {
        let taps = &b.taps[r * t.s..(r + 1) * t.s];
        for f0 in (0..vp).step_by(LANES) {
            let (mut re, mut im) = ([0f32; LANES], [0f32; LANES]);
            for (s, &wv) in taps.iter().enumerate() {
                let cs: &[f32; LANES] = t.ev[2 * s * vp + f0..][..LANES].try_into().expect("16");
                let sn: &[f32; LANES] = t.ev[(2 * s + 1) * vp + f0..][..LANES]
                    .try_into()
                    .expect("16");
                for l in 0..LANES {
                    re[l] = fma(wv, cs[l], re[l]);
                    im[l] = fma(wv, sn[l], im[l]);
                }
            }
            b.rows[r * 2 * vp + f0..][..LANES].copy_from_slice(&re);
            b.rows[r * 2 * vp + vp + f0..][..LANES].copy_from_slice(&im);
        }
    }
}
