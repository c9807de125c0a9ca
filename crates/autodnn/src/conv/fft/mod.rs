//! The spectral engine shared by `fft` and `fft_tiling`: 2-D real-to-complex transforms of
//! image tiles and filters, the per-frequency products over channels, the inverse transform
//! and the epilogue.
//!
//! A convolution with stride 1 is a circular cross-correlation on a transform grid of
//! `nh × nw` points as long as the grid holds a tile's outputs plus the kernel's (dilated)
//! extent minus one: y = IDFT(DFT(x) · conj(DFT(w))) / (nh·nw). The engine computes it for a
//! list of *tiles* (one output rectangle of one image each; `fft` uses one tile per image,
//! `fft_tiling` many of a fixed transform size), a pass of several tiles at a time:
//!
//! 1. **Forward transforms** of every (tile, input channel): rows two at a time as one complex
//!    FFT (z = a + i·b; the half spectra are separated by Hermitian symmetry), rows that are
//!    all padding skipped, then complex FFTs down the `nw/2 + 1` columns. rustfft does the
//!    1-D transforms (its AVX planner under an AVX cap, its scalar one under `scalar`).
//! 2. **Products**: for every frequency bin, Y\[t, k\] = Σ_c W\[k, c\] · X\[t, c\] over the
//!    channels of k's group: a complex (K × C)·(C × T) matrix product per bin. Bins are
//!    grouped in blocks of [`LANES`], and the spectra are laid out block-major with each
//!    channel's block contiguous (re ×16, im ×16): X as \[block\]\[tile\]\[c\] and the filter
//!    as \[group\]\[block\]\[k\]\[c\] (what one bin block's products read is contiguous), Y
//!    as \[tile\]\[k\]\[block\] (what one inverse transform reads is). A bin block's products are
//!    then 16 independent complex GEMMs done lane-wise by one vector FMA each: a register tile
//!    of `KB` output channels × `TB` tiles accumulates over the channels with 4 FMAs per
//!    complex product and no shuffles, streaming the filter spectra sequentially. (Handing
//!    each bin to the real GEMM engine as a 4M product would mean thousands of GEMMs of
//!    (2K × 2C)·(2C × T) with T as small as 1: packing and call overhead would dominate. The
//!    3M method would save a quarter of the FMAs but needs a third plane of filter spectra,
//!    half as much again to stream, and with one tile the products are bound by that stream.)
//! 3. **Inverse transforms** of every (tile, output channel): column FFTs, then rows two at a
//!    time, only the rows and columns of the tile's outputs; the epilogue is applied as each
//!    row is written.
//!
//! The filter spectra carry the conjugation (correlation), the flip (convolution mode), the
//! dilation (taps placed `d` apart) and the 1/(nh·nw) scale of the unnormalised inverse. They
//! are what prepared weights hold. The R×S taps are few on a large grid, so the filter's DFT is
//! evaluated directly and separably rather than by FFTs of a mostly-zero grid. Plain calls
//! whose tiles fit in one pass store only the filters' row transforms and compute each bin
//! block's spectra just before its products ([`PlainFilter::Fused`]); others compute the
//! spectra into the workspace, all at once or a block of output channels at a time.
//!
//! Workspace: filter spectra or row transforms, then X and Y spectra of one pass; Y comes last
//! and the products write all of it, so the reported size is the high-water mark. Each worker
//! thread also allocates a few transform-sized line buffers (kilobytes) for the 1-D FFTs and,
//! on fused plain calls, one output-channel block of a bin block's filter spectra
//! (12·C/g·128 bytes at most).

mod full_fwd;
mod tiling_fwd;

pub(crate) use full_fwd::FFT;
pub(crate) use tiling_fwd::FFT_TILING;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftDirection, FftPlannerAvx, FftPlannerScalar};

use crate::conv::{
    default_cost_features, Accuracy, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext,
    COST_FEATURES,
};
use crate::cpu::Features;
use crate::desc::{ConvMode, ConvProblem};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::Carve;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512, Token};

/// Frequency bins per block: the vector width of the products (one AVX-512 register, two
/// AVX2 ones). The data layout, and so prepared weights, do not depend on the ISA.
pub(crate) const LANES: usize = 16;
/// Floats per (block, channel): 16 real parts, then 16 imaginary parts.
const BLOCK: usize = 2 * LANES;

/// The smallest n' ≥ n whose only prime factors are 2, 3 and 5 (rustfft has fast butterflies
/// for them), or `usize::MAX` when none fits in `usize`. Enumerates the products 3^b·5^c and
/// doubles each up to n: O(log³ n) steps whatever n (counting up from n takes astronomically
/// long for the sizes of huge images, where such numbers are sparse).
pub(crate) fn good_size(n: usize) -> usize {
    let n = n.max(1);
    let mut best = usize::MAX;
    let mut p5 = 1usize;
    loop {
        let mut p35 = p5;
        loop {
            let mut v = Some(p35);
            while let Some(x) = v.filter(|&x| x < n) {
                v = x.checked_mul(2);
            }
            if let Some(v) = v {
                best = best.min(v);
            }
            match p35.checked_mul(3) {
                Some(x) if p35 < n => p35 = x,
                _ => break,
            }
        }
        match p5.checked_mul(5) {
            Some(x) if p5 < n => p5 = x,
            _ => break,
        }
    }
    best
}

/// Cost model of one call, in cycles of one core (fitted roughly on Zen 4 at one thread): per
/// complex multiply-add of the products (16 lanes, 4 FMAs), per bin and channel of a
/// transform (times log2 of the larger side), per byte of filter spectra streamed from memory.
/// `fft_tiling` chooses its transform sides with it; both algorithms hand it to the selection
/// heuristic as their cost features.
pub(crate) const CYCLES_PER_CMAC: f64 = 0.25;
pub(crate) const CYCLES_PER_BIN_LOG: f64 = 3.5;
pub(crate) const CYCLES_PER_FILTER_BYTE: f64 = 0.12;

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

/// Everything the engine needs: the problem's geometry, the transform grid and the tiling.
#[derive(Debug, Clone)]
pub(crate) struct Spectral {
    n: usize,
    groups: usize,
    cg: usize,
    kg: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    r: usize,
    s: usize,
    dil: [usize; 2],
    pad: [usize; 2],
    flip: bool,
    xs: [usize; 4],
    ys: [usize; 4],
    ws: [usize; 4],
    /// Transform grid.
    nh: usize,
    nw: usize,
    /// Columns of the half spectrum (nw/2 + 1).
    v: usize,
    /// Bin blocks (nh·v bins, rounded up to [`LANES`]).
    blocks: usize,
    /// Output rows and columns per tile.
    th: usize,
    tw: usize,
    tiles_h: usize,
    tiles_w: usize,
    /// Tiles transformed and multiplied together.
    per_pass: usize,
    plain: PlainFilter,
}

/// The kernel's dilated extent (rows, columns): (R − 1)·dh + 1, (S − 1)·dw + 1.
pub(crate) fn extent(problem: &ConvProblem) -> [usize; 2] {
    let d = problem.conv().dilation();
    [
        (problem.w().r() - 1) * d[0] + 1,
        (problem.w().s() - 1) * d[1] + 1,
    ]
}

/// An FFT convolution (`fft`, `fft_tiling`): one [`ConvAlgorithm`] given what the two differ
/// in, how they plan the transforms and the limit each puts on the problem.
pub(crate) struct SpectralConv {
    /// The algorithm's name.
    pub(crate) name: &'static str,
    /// The plan for a problem the limits accept; `None` when the spectra's sizes overflow.
    pub(crate) plan: fn(&ConvProblem) -> Option<Spectral>,
    /// The algorithm's own limit, checked after the stride and the kernel size.
    pub(crate) limit: fn(&ConvProblem) -> std::result::Result<(), String>,
    /// The normwise constant of its accuracy.
    pub(crate) normwise_c: f64,
}

impl ConvAlgorithm for SpectralConv {
    fn name(&self) -> &'static str {
        self.name
    }

    fn check(&self, problem: &ConvProblem) -> std::result::Result<(), String> {
        let st = problem.conv().stride();
        if st != [1, 1] {
            return Err(format!(
                "needs stride 1, got {}x{} (a strided output discards most of the transform)",
                st[0], st[1]
            ));
        }
        if problem.w().r() * problem.w().s() == 1 {
            return Err("a 1x1 kernel is a plain matrix product: nothing to transform".into());
        }
        (self.limit)(problem)?;
        (self.plan)(problem)
            .map(|_| ())
            .ok_or_else(|| "the spectra's sizes overflow".into())
    }

    fn workspace_bytes(&self, problem: &ConvProblem) -> usize {
        (self.plan)(problem).map_or(0, |s| s.workspace_bytes())
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn cost_features(&self, problem: &ConvProblem) -> [f64; COST_FEATURES] {
        (self.plan)(problem).map_or_else(
            || default_cost_features(problem, 0),
            |s| s.cost_features(problem),
        )
    }

    fn accuracy(&self) -> Accuracy {
        Accuracy::Normwise {
            c: self.normwise_c,
            int_rel: 1e-4,
        }
    }

    fn prepare(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        w: &[f32],
    ) -> Result<Option<Vec<f32>>> {
        let sp = (self.plan)(problem).expect("accepted by check");
        Ok(Some(sp.prepare(ctx, w)?))
    }

    fn run(
        &self,
        ctx: &ExecContext<'_>,
        problem: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epilogue: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let sp = (self.plan)(problem).expect("accepted by check");
        sp.run(self.name, ctx, x, w, y, workspace, epilogue)
    }
}

impl Spectral {
    /// The engine for `problem` on an `nh × nw` grid with tiles of `th × tw` outputs,
    /// `per_pass` tiles at a time (at most the number of tiles). `None` when a size overflows.
    pub(crate) fn new(
        problem: &ConvProblem,
        grid: [usize; 2],
        tile: [usize; 2],
        per_pass: usize,
        plain: PlainFilter,
    ) -> Option<Spectral> {
        let c = problem.conv();
        let [nh, nw] = grid;
        let [th, tw] = tile;
        let ext = extent(problem);
        assert!(th >= 1 && tw >= 1 && th + ext[0] - 1 <= nh && tw + ext[1] - 1 <= nw);
        let (oh, ow) = (problem.y().h(), problem.y().w());
        let v = nw / 2 + 1;
        let blocks = nh.checked_mul(v)?.div_ceil(LANES);
        let tiles_h = oh.div_ceil(th);
        let tiles_w = ow.div_ceil(tw);
        let tiles = problem.x().n().checked_mul(tiles_h)?.checked_mul(tiles_w)?;
        let sp = Spectral {
            n: problem.x().n(),
            groups: problem.groups(),
            cg: problem.c_per_group(),
            kg: problem.k_per_group(),
            h: problem.x().h(),
            w: problem.x().w(),
            oh,
            ow,
            r: problem.w().r(),
            s: problem.w().s(),
            dil: c.dilation(),
            pad: [c.padding().top as usize, c.padding().left as usize],
            flip: c.mode() == ConvMode::Convolution,
            xs: problem.x().strides(),
            ys: problem.y().strides(),
            ws: problem.w().strides(),
            nh,
            nw,
            v,
            blocks,
            th,
            tw,
            tiles_h,
            tiles_w,
            per_pass: per_pass.clamp(1, tiles),
            plain: if per_pass >= tiles {
                PlainFilter::Fused
            } else {
                plain
            },
        };
        // Every size below must fit, in bytes.
        sp.workspace_floats()?.checked_mul(4)?;
        sp.filter_floats()?.checked_mul(4)?;
        Some(sp)
    }

    /// Modelled cycles of one call on one core (see the constants above): the products, the
    /// transforms of inputs and outputs, streaming the filter spectra once per pass and, for
    /// a plain call, transforming the filter.
    pub(crate) fn model_cycles(&self, plain: bool) -> f64 {
        let tiles = self.tiles() as f64;
        let bins = (self.nh * self.v) as f64;
        let (c, k, kc) = (
            self.c() as f64,
            self.k() as f64,
            (self.k() * self.cg) as f64,
        );
        let passes = (tiles / self.per_pass as f64).ceil();
        let log = (self.nh.max(self.nw) as f64).log2();
        let filter_bytes = kc * (self.blocks * BLOCK * 4) as f64;
        let mut cycles = tiles * bins * (kc * CYCLES_PER_CMAC + (c + k) * CYCLES_PER_BIN_LOG * log)
            + passes * filter_bytes * CYCLES_PER_FILTER_BYTE;
        if plain {
            let per_filter =
                (self.r * self.s * self.v.div_ceil(LANES) * 2 + self.blocks * self.r * 4) as f64;
            cycles += kc * per_filter;
            cycles += match self.plain {
                // Row transforms written and read once; no spectra streamed.
                PlainFilter::Fused => {
                    (kc * (self.v * self.r * 8) as f64 - passes * filter_bytes)
                        * CYCLES_PER_FILTER_BYTE
                }
                _ => filter_bytes * CYCLES_PER_FILTER_BYTE,
            };
        }
        cycles
    }

    /// The selection heuristic's features: the defaults, with the direct definition's FLOPs
    /// replaced by the modelled cycles as FLOPs at 64 a cycle (two 16-lane FMAs), so that
    /// a fitted rate per GFLOP applies to what this algorithm really does.
    pub(crate) fn cost_features(&self, problem: &ConvProblem) -> [f64; super::COST_FEATURES] {
        let mut f = super::default_cost_features(problem, self.workspace_bytes());
        let direct = f[1];
        let equivalent = self.model_cycles(true) * 64.0 / 1e9;
        let ratio = if direct > 0.0 {
            equivalent / direct
        } else {
            1.0
        };
        f[1] = equivalent;
        for i in [4, 5, 7] {
            f[i] *= ratio;
        }
        f
    }

    fn c(&self) -> usize {
        self.groups * self.cg
    }
    fn k(&self) -> usize {
        self.groups * self.kg
    }
    fn tiles(&self) -> usize {
        self.n * self.tiles_h * self.tiles_w
    }

    /// Floats of all filter spectra: \[group\]\[block\]\[k\]\[c\]\[re, im ×16\].
    pub(crate) fn filter_floats(&self) -> Option<usize> {
        self.groups
            .checked_mul(self.blocks)?
            .checked_mul(self.kg)?
            .checked_mul(self.cg)?
            .checked_mul(BLOCK)
    }

    /// Floats of the filters' row transforms: \[f\]\[k\]\[c\]\[r\]\[re, im\] for the
    /// `nw/2 + 1` frequency columns f.
    fn row_floats(&self) -> Option<usize> {
        self.v
            .checked_mul(self.k())?
            .checked_mul(self.cg)?
            .checked_mul(self.r)?
            .checked_mul(2)
    }

    /// Output channels per block of plain filter spectra.
    fn plain_kblock(&self) -> usize {
        match self.plain {
            PlainFilter::Full | PlainFilter::Fused => self.kg,
            PlainFilter::KBlocks(b) => b.clamp(1, self.kg),
        }
    }

    /// Floats of the workspace's three parts: plain filter spectra, X, Y.
    fn parts(&self) -> Option<[usize; 3]> {
        let wf = self
            .blocks
            .checked_mul(self.plain_kblock())?
            .checked_mul(self.cg)?
            .checked_mul(BLOCK)?;
        let wf = match self.plain {
            PlainFilter::Full => wf.checked_mul(self.groups)?,
            PlainFilter::KBlocks(_) => wf,
            PlainFilter::Fused => self.row_floats()?,
        };
        let per_tile = self.blocks.checked_mul(self.per_pass)?.checked_mul(BLOCK)?;
        Some([
            wf,
            per_tile.checked_mul(self.c())?,
            per_tile.checked_mul(self.k())?,
        ])
    }

    fn workspace_floats(&self) -> Option<usize> {
        let [a, b, c] = self.parts()?;
        a.checked_add(b)?.checked_add(c)
    }

    /// Exact workspace bytes of one run.
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.workspace_floats().expect("checked when made") * 4
    }

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
    fn filter_spectra(
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
    fn filter_rows(
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
    fn filter_tables(&self) -> Result<FilterTables> {
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

    /// The 2-D forward transform of one real image on the grid, into `lines.cols` (bin
    /// v·nh + u holds frequency (u, v)). Only `count` rows are non-zero: row `row_of(p)` of
    /// the grid for p < count, whose values `fill(p, row)` writes (all `nw` of them).
    fn forward(
        &self,
        plans: &Plans,
        lines: &mut Lines,
        count: usize,
        row_of: impl Fn(usize) -> usize,
        mut fill: impl FnMut(usize, &mut [f32]),
    ) {
        let (nh, nw, v) = (self.nh, self.nw, self.v);
        lines.cols.fill(Complex32::ZERO);
        let mut p = 0;
        while p < count {
            fill(p, &mut lines.ra);
            if p + 1 < count {
                fill(p + 1, &mut lines.rb);
            } else {
                lines.rb.fill(0.0);
            }
            for ((z, &a), &b) in lines.row.iter_mut().zip(&lines.ra).zip(&lines.rb) {
                *z = Complex32::new(a, b);
            }
            plans
                .row_fwd
                .process_with_scratch(&mut lines.row, &mut lines.scratch);
            // z = a + i·b: A[f] = (Z[f] + conj Z[−f]) / 2, B[f] = (Z[f] − conj Z[−f]) / 2i.
            let (i1, i2) = (row_of(p), (p + 1 < count).then(|| row_of(p + 1)));
            for f in 0..v {
                let z = lines.row[f];
                let m = lines.row[if f == 0 { 0 } else { nw - f }].conj();
                lines.cols[f * nh + i1] = (z + m) * 0.5;
                if let Some(i2) = i2 {
                    let d = z - m;
                    lines.cols[f * nh + i2] = Complex32::new(d.im * 0.5, -d.re * 0.5);
                }
            }
            p += 2;
        }
        plans
            .col_fwd
            .process_with_scratch(&mut lines.cols, &mut lines.scratch);
    }

    /// The 2-D inverse transform of the spectrum in `lines.cols` (as [`Spectral::forward`]
    /// leaves it): `emit(row, values)` receives rows 0 .. rows of the real result, each `nw`
    /// values long.
    fn inverse(
        &self,
        plans: &Plans,
        lines: &mut Lines,
        rows: usize,
        mut emit: impl FnMut(usize, &[f32]),
    ) {
        let (nh, nw, v) = (self.nh, self.nw, self.v);
        plans
            .col_inv
            .process_with_scratch(&mut lines.cols, &mut lines.scratch);
        let mut h = 0;
        while h < rows {
            let second = h + 1 < rows;
            for f in 0..v {
                let a = lines.cols[f * nh + h];
                let b = if second {
                    lines.cols[f * nh + h + 1]
                } else {
                    Complex32::ZERO
                };
                let mirror = if f == 0 { 0 } else { nw - f };
                if mirror == f {
                    // DC and Nyquist of a real row are real: drop rounding's imaginary part.
                    lines.row[f] = Complex32::new(a.re, b.re);
                } else {
                    // z = a + i·b on the full spectrum, a and b Hermitian.
                    lines.row[f] = Complex32::new(a.re - b.im, a.im + b.re);
                    lines.row[mirror] = Complex32::new(a.re + b.im, b.re - a.im);
                }
            }
            plans
                .row_inv
                .process_with_scratch(&mut lines.row, &mut lines.scratch);
            for (j, z) in lines.row.iter().enumerate() {
                lines.ra[j] = z.re;
                lines.rb[j] = z.im;
            }
            emit(h, &lines.ra);
            if second {
                emit(h + 1, &lines.rb);
            }
            h += 2;
        }
    }

    /// Where tile `t` is: (image, first output row, first output column, rows, columns).
    fn tile(&self, t: usize) -> (usize, usize, usize, usize, usize) {
        let per_image = self.tiles_h * self.tiles_w;
        let (n, i) = (t / per_image, t % per_image);
        let (oh0, ow0) = ((i / self.tiles_w) * self.th, (i % self.tiles_w) * self.tw);
        (
            n,
            oh0,
            ow0,
            self.th.min(self.oh - oh0),
            self.tw.min(self.ow - ow0),
        )
    }

    /// Runs the convolution: y = act(alpha · conv(x, w) + bias + beta · z).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        &self,
        algo: &str,
        ctx: &ExecContext<'_>,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let need = self.workspace_bytes();
        if workspace.len() < need {
            return Err(Error::WorkspaceTooSmall {
                algo: algo.into(),
                needed: need,
                got: workspace.len(),
            });
        }
        if let AlgoWeights::Prepared(p) = w {
            let want = self.filter_floats().expect("checked when made");
            if p.len() != want {
                return Err(Error::bad(
                    "prepared",
                    format!("{} values", p.len()),
                    format!("{algo} needs {want} filter spectra values for this problem"),
                ));
            }
        }
        let ws = Carve::new(&mut workspace[..need]).take::<f32>(need / 4)?;
        let [wf, xf, _] = self.parts().expect("checked when made");
        let (wbuf, rest) = ws.split_at_mut(wf);
        let (xbuf, ybuf) = rest.split_at_mut(xf);
        let plans = Plans::get(ctx.features, self.nh, self.nw)?;
        let out = SharedOut::new(y);
        let tiles = self.tiles();
        let mut t0 = 0;
        while t0 < tiles {
            let count = self.per_pass.min(tiles - t0);
            self.transform_inputs(ctx, &plans, x, t0, count, xbuf)?;
            match (w, self.plain) {
                (AlgoWeights::Prepared(ww), _) => {
                    self.products_all(ctx, ww, xbuf, count, ybuf)?;
                }
                (AlgoWeights::Plain(ww), PlainFilter::Full) => {
                    if t0 == 0 {
                        let tables = self.filter_tables()?;
                        let per_group = self.blocks * self.kg * self.cg * BLOCK;
                        for g in 0..self.groups {
                            let dst = &mut wbuf[g * per_group..(g + 1) * per_group];
                            self.filter_spectra(ctx, &tables, ww, g, 0, self.kg, dst)?;
                        }
                    }
                    self.products_all(ctx, wbuf, xbuf, count, ybuf)?;
                }
                (AlgoWeights::Plain(ww), PlainFilter::Fused) => {
                    let tables = self.filter_tables()?;
                    self.filter_rows(ctx, &tables, ww, wbuf)?;
                    let src = WSource::Fused {
                        tables: &tables,
                        rows: wbuf,
                    };
                    for g in 0..self.groups {
                        self.products(ctx, &src, g, 0, self.kg, xbuf, count, ybuf)?;
                    }
                }
                (AlgoWeights::Plain(ww), PlainFilter::KBlocks(_)) => {
                    let kb = self.plain_kblock();
                    let tables = self.filter_tables()?;
                    for g in 0..self.groups {
                        let mut k0 = 0;
                        while k0 < self.kg {
                            let n = kb.min(self.kg - k0);
                            self.filter_spectra(ctx, &tables, ww, g, k0, n, wbuf)?;
                            let wl = WSource::View(WView {
                                data: wbuf,
                                base: 0,
                                bstride: n * self.cg * BLOCK,
                            });
                            self.products(ctx, &wl, g, k0, n, xbuf, count, ybuf)?;
                            k0 += n;
                        }
                    }
                }
            }
            self.transform_outputs(ctx, &plans, ybuf, t0, count, &out, epi)?;
            t0 += count;
        }
        Ok(())
    }

    /// Forward transforms of every input channel of tiles t0 .. t0 + count into X.
    fn transform_inputs(
        &self,
        ctx: &ExecContext<'_>,
        plans: &Plans,
        x: &[f32],
        t0: usize,
        count: usize,
        xbuf: &mut [f32],
    ) -> Result<()> {
        let c_all = self.c();
        let tstride = c_all * BLOCK;
        let bstride = self.per_pass * tstride;
        let out = SharedOut::new(xbuf);
        let (ext_h, ext_w) = (
            (self.r - 1) * self.dil[0] + 1,
            (self.s - 1) * self.dil[1] + 1,
        );
        let item = |lines: &mut Lines, i: usize| {
            let (tt, c) = (i / c_all, i % c_all);
            let (n, oh0, ow0, rows, cols) = self.tile(t0 + tt);
            // Grid row i holds input row oh0 − pad + i; only the rows the outputs reach.
            let ih0 = oh0 as i64 - self.pad[0] as i64;
            let iw0 = ow0 as i64 - self.pad[1] as i64;
            let lo = (-ih0).max(0) as usize;
            let hi = ((rows + ext_h - 1) as i64)
                .min(self.h as i64 - ih0)
                .max(lo as i64) as usize;
            // Padding wider than the grid leaves whole rows in the padding: jlo = jhi = grid.
            let grid_w = (cols + ext_w - 1) as i64;
            let jlo = (-iw0).clamp(0, grid_w) as usize;
            let jhi = grid_w.min(self.w as i64 - iw0).max(jlo as i64) as usize;
            let base = n * self.xs[0] + c * self.xs[1];
            // With dilation, some grid rows and columns inside the window meet no tap of any
            // kept output: leave them zero (they would only add rounding noise).
            let mut rowlist = std::mem::take(&mut lines.rowlist);
            rowlist.clear();
            rowlist.extend((lo..hi).filter(|&i| touched(i, rows, self.r, self.dil[0])));
            let sparse_cols = self.dil[1] > 1 && cols < self.dil[1];
            self.forward(
                plans,
                lines,
                rowlist.len(),
                |p| rowlist[p],
                |p, row| {
                    row.fill(0.0);
                    if jhi == jlo {
                        return;
                    }
                    let ih = (ih0 + rowlist[p] as i64) as usize;
                    let at = base + ih * self.xs[2];
                    let first = (iw0 + jlo as i64) as usize;
                    if self.xs[3] == 1 {
                        row[jlo..jhi].copy_from_slice(&x[at + first..at + first + jhi - jlo]);
                    } else {
                        for (j, v) in row[jlo..jhi].iter_mut().enumerate() {
                            *v = x[at + (first + j) * self.xs[3]];
                        }
                    }
                    if sparse_cols {
                        for (j, v) in row.iter_mut().enumerate() {
                            if !touched(j, cols, self.s, self.dil[1]) {
                                *v = 0.0;
                            }
                        }
                    }
                },
            );
            lines.rowlist = rowlist;
            for b in 0..self.blocks {
                let at = b * bstride + tt * tstride + c * BLOCK;
                let chunk = deinterleave(&lines.cols, b);
                // SAFETY: item (tt, c) alone writes the chunks of (tt, c) in every block.
                unsafe { out.write_slice(at, &chunk) };
            }
        };
        par_items(ctx, count * c_all, || Lines::new(plans, self), item)
    }

    /// Inverse transforms of every output channel of tiles t0 .. t0 + count from Y, written
    /// to y through the epilogue.
    #[allow(clippy::too_many_arguments)]
    fn transform_outputs(
        &self,
        ctx: &ExecContext<'_>,
        plans: &Plans,
        ybuf: &[f32],
        t0: usize,
        count: usize,
        out: &SharedOut<'_>,
        epi: &EpilogueArgs<'_>,
    ) -> Result<()> {
        let k_all = self.k();
        let bins = self.nh * self.v;
        let plain = epi.is_identity();
        let item = |lines: &mut Lines, i: usize| {
            let (tt, k) = (i / k_all, i % k_all);
            let (n, oh0, ow0, rows, cols) = self.tile(t0 + tt);
            let run = &ybuf[self.y_index(tt, k, 0)..self.y_index(tt, k, self.blocks)];
            for (z, src) in lines.cols[..bins].chunks_mut(LANES).zip(run.chunks(BLOCK)) {
                for (l, z) in z.iter_mut().enumerate() {
                    *z = Complex32::new(src[l], src[LANES + l]);
                }
            }
            let base = n * self.ys[0] + k * self.ys[1] + ow0 * self.ys[3];
            self.inverse(plans, lines, rows, |h, vals| {
                let row = base + (oh0 + h) * self.ys[2];
                if plain && self.ys[3] == 1 {
                    // SAFETY: item (tile, k) alone writes the outputs of channel k in its
                    // tile; distinct coordinates are distinct elements.
                    unsafe { out.write_slice(row, &vals[..cols]) };
                } else {
                    for (j, &acc) in vals[..cols].iter().enumerate() {
                        let off = row + j * self.ys[3];
                        // SAFETY: as above, this item alone reads and writes this element.
                        let value = epi.value(acc, k, off, || unsafe { out.read(off) });
                        // SAFETY: as above.
                        unsafe { out.write(off, value) };
                    }
                }
            });
        };
        par_items(ctx, count * k_all, || Lines::new(plans, self), item)
    }

    /// Products of every group and output channel with the full filter spectra `w`.
    fn products_all(
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
    fn products(
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
    fn y_index(&self, t: usize, k: usize, b: usize) -> usize {
        ((t * self.k() + k) * self.blocks + b) * BLOCK
    }
}

/// Tables of the direct filter transform.
struct FilterTables {
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
    fn new(t: &FilterTables, run: usize) -> Result<FilterScratch> {
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
struct WBlockArgs<'a> {
    t: &'a FilterTables,
    blk: usize,
    /// Row transforms, \[f\]\[filter\]\[r\]\[re, im\].
    rows: &'a [f32],
    f_stride: usize,
    /// First (global) output channel of the block.
    k0: usize,
    cg: usize,
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
fn pick_wblock_kernel(features: Features) -> fn(&WBlockArgs<'_>, &mut [f32]) {
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

/// Bin block `b` of a spectrum as 16 real parts then 16 imaginary parts (zeros past the end).
#[inline]
fn deinterleave(spec: &[Complex32], b: usize) -> [f32; BLOCK] {
    let mut chunk = [0f32; BLOCK];
    let from = b * LANES;
    if let Some(full) = spec.get(from..from + LANES) {
        let full: &[Complex32; LANES] = full.try_into().expect("LANES values");
        for l in 0..LANES {
            chunk[l] = full[l].re;
            chunk[LANES + l] = full[l].im;
        }
    } else {
        for (l, z) in spec[from.min(spec.len())..].iter().enumerate() {
            chunk[l] = z.re;
            chunk[LANES + l] = z.im;
        }
    }
    chunk
}

/// Whether grid position `i` meets a tap of some output `o < outs`: i = o + r·d for r < taps.
fn touched(i: usize, outs: usize, taps: usize, d: usize) -> bool {
    if d == 1 {
        return i < outs + taps - 1;
    }
    (0..taps).any(|r| i >= r * d && i - r * d < outs)
}

/// Where the products find the filter spectra.
enum WSource<'a> {
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
struct WView<'a> {
    data: &'a [f32],
    base: usize,
    bstride: usize,
}

/// Runs `f(state, i)` for i < items on the context's threads, each worker with its own
/// state from `init`, made before the loop (see [`crate::runtime::parallel::for_each_with`]).
///
/// # Errors
/// The first error of `init` (out of memory).
fn par_items<S: Send>(
    ctx: &ExecContext<'_>,
    items: usize,
    init: impl Fn() -> Result<S> + Sync,
    f: impl Fn(&mut S, usize) + Sync,
) -> Result<()> {
    crate::runtime::parallel::for_each_with(ctx, items, init, f)
}

/// One worker's buffers for 2-D transforms on the grid.
struct Lines {
    /// One grid row, complex.
    row: Vec<Complex32>,
    /// The half spectrum, column-major: \[v\]\[nh\].
    cols: Vec<Complex32>,
    ra: Vec<f32>,
    rb: Vec<f32>,
    scratch: Vec<Complex32>,
    /// The non-zero grid rows of the image being transformed.
    rowlist: Vec<usize>,
}

impl Lines {
    /// The buffers, the transforms' scratch among them (handed to rustfft's
    /// `process_with_scratch`, which then allocates nothing).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when they cannot be allocated.
    fn new(plans: &Plans, sp: &Spectral) -> Result<Lines> {
        let what = "the grid transforms' lines";
        let z = Complex32::ZERO;
        Ok(Lines {
            row: crate::alloc::try_vec(sp.nw, z, what)?,
            cols: crate::alloc::try_vec(sp.v * sp.nh, z, what)?,
            ra: crate::alloc::try_vec(sp.nw, 0.0, what)?,
            rb: crate::alloc::try_vec(sp.nw, 0.0, what)?,
            scratch: crate::alloc::try_vec(plans.scratch, z, what)?,
            rowlist: crate::alloc::try_vec_with_capacity(sp.nh, what)?,
        })
    }
}

/// The 1-D transforms of one grid.
struct Plans {
    row_fwd: Arc<dyn Fft<f32>>,
    row_inv: Arc<dyn Fft<f32>>,
    col_fwd: Arc<dyn Fft<f32>>,
    col_inv: Arc<dyn Fft<f32>>,
    scratch: usize,
}

type PlanKey = (bool, usize, bool);
type PlanCache = Mutex<HashMap<PlanKey, Arc<dyn Fft<f32>>>>;

impl Plans {
    /// Plans for an `nh × nw` grid under the ISA cap (rustfft's AVX planner from AVX2 up, its
    /// scalar planner otherwise), cached for the life of the process.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the cache cannot grow. (The plans themselves are
    /// rustfft's, allocated by its planner: see [`crate::alloc`].)
    fn get(features: Features, nh: usize, nw: usize) -> Result<Plans> {
        static CACHE: OnceLock<PlanCache> = OnceLock::new();
        #[cfg(target_arch = "x86_64")]
        let avx = Avx2::new(features).is_some();
        #[cfg(not(target_arch = "x86_64"))]
        let avx = false;
        let _ = features;
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
        crate::alloc::try_reserve_map(&mut cache, 4, "the transform plan cache")?;
        let mut plan = |len: usize, inverse: bool| -> Arc<dyn Fft<f32>> {
            let dir = if inverse {
                FftDirection::Inverse
            } else {
                FftDirection::Forward
            };
            cache
                .entry((avx, len, inverse))
                .or_insert_with(|| match FftPlannerAvx::new() {
                    Ok(mut p) if avx => p.plan_fft(len, dir),
                    _ => FftPlannerScalar::new().plan_fft(len, dir),
                })
                .clone()
        };
        let (row_fwd, row_inv) = (plan(nw, false), plan(nw, true));
        let (col_fwd, col_inv) = (plan(nh, false), plan(nh, true));
        let scratch = [&row_fwd, &row_inv, &col_fwd, &col_inv]
            .iter()
            .map(|p| p.get_inplace_scratch_len())
            .max()
            .unwrap_or(0);
        Ok(Plans {
            row_fwd,
            row_inv,
            col_fwd,
            col_inv,
            scratch,
        })
    }
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

#[cfg(test)]
mod tests {
    use super::good_size;

    fn smooth(mut n: usize) -> bool {
        for p in [2, 3, 5] {
            while n.is_multiple_of(p) {
                n /= p;
            }
        }
        n == 1
    }

    #[test]
    fn good_size_is_the_next_2_3_5_smooth_number() {
        for n in 0..5000 {
            let want = (n.max(1)..).find(|&m| smooth(m)).unwrap();
            assert_eq!(good_size(n), want, "n = {n}");
        }
        // Huge sizes (a fuzzed image 2^40 rows high) answer at once.
        let g = good_size((1 << 40) + 15);
        assert!(g >= (1 << 40) + 15 && smooth(g), "{g}");
        assert_eq!(good_size(1 << 63), 1 << 63);
        assert_eq!(good_size(usize::MAX), usize::MAX, "none fits");
    }
}
