//! Plans and sizes: the spectral layout's block of bins, the transform sizes ([`good_size`]),
//! the cost model, the engine's [`Spectral`] geometry and workspace, the 1-D transform plans
//! and the 2-D forward and inverse transforms on the grid.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rustfft::num_complex::Complex32;
use rustfft::{Fft, FftDirection, FftPlannerAvx, FftPlannerScalar};

use crate::conv::ExecContext;
use crate::cpu::Features;
use crate::desc::{ConvMode, ConvProblem};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Token};

use super::filter::PlainFilter;

/// Frequency bins per block: the vector width of the products (one AVX-512 register, two
/// AVX2 ones). The data layout, and so prepared weights, do not depend on the ISA.
pub(crate) const LANES: usize = 16;
/// Floats per (block, channel): 16 real parts, then 16 imaginary parts.
pub(super) const BLOCK: usize = 2 * LANES;

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

/// Everything the engine needs: the problem's geometry, the transform grid and the tiling.
#[derive(Debug, Clone)]
pub(crate) struct Spectral {
    n: usize,
    pub(super) groups: usize,
    pub(super) cg: usize,
    pub(super) kg: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) r: usize,
    pub(super) s: usize,
    pub(super) dil: [usize; 2],
    pub(super) pad: [usize; 2],
    pub(super) flip: bool,
    pub(super) xs: [usize; 4],
    pub(super) ys: [usize; 4],
    pub(super) ws: [usize; 4],
    /// Transform grid.
    pub(super) nh: usize,
    pub(super) nw: usize,
    /// Columns of the half spectrum (nw/2 + 1).
    pub(super) v: usize,
    /// Bin blocks (nh·v bins, rounded up to [`LANES`]).
    pub(super) blocks: usize,
    /// Output rows and columns per tile.
    pub(super) th: usize,
    pub(super) tw: usize,
    pub(super) tiles_h: usize,
    pub(super) tiles_w: usize,
    /// Tiles transformed and multiplied together.
    pub(super) per_pass: usize,
    pub(super) plain: PlainFilter,
}

/// The kernel's dilated extent (rows, columns): (R − 1)·dh + 1, (S − 1)·dw + 1.
pub(crate) fn extent(problem: &ConvProblem) -> [usize; 2] {
    let d = problem.conv().dilation();
    [
        (problem.w().r() - 1) * d[0] + 1,
        (problem.w().s() - 1) * d[1] + 1,
    ]
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
        let bins = self.nh as f64 * self.v as f64;
        let (c, k, kc) = (
            self.c() as f64,
            self.k() as f64,
            self.k() as f64 * self.cg as f64,
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

    pub(super) fn c(&self) -> usize {
        self.groups * self.cg
    }
    pub(super) fn k(&self) -> usize {
        self.groups * self.kg
    }
    pub(super) fn tiles(&self) -> usize {
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
    pub(super) fn plain_kblock(&self) -> usize {
        match self.plain {
            PlainFilter::Full | PlainFilter::Fused => self.kg,
            PlainFilter::KBlocks(b) => b.clamp(1, self.kg),
        }
    }

    /// Floats of the workspace's three parts: plain filter spectra, X, Y.
    pub(super) fn parts(&self) -> Option<[usize; 3]> {
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
}

impl Spectral {
    /// The 2-D forward transform of one real image on the grid, into `lines.cols` (bin
    /// v·nh + u holds frequency (u, v)). Only `count` rows are non-zero: row `row_of(p)` of
    /// the grid for p < count, whose values `fill(p, row)` writes (all `nw` of them).
    pub(super) fn forward(
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
    pub(super) fn inverse(
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
}

/// Runs `f(state, i)` for i < items on the context's threads, each worker with its own
/// state from `init`, made before the loop (see [`crate::runtime::parallel::for_each_with`]).
///
/// # Errors
/// The first error of `init` (out of memory).
pub(super) fn par_items<S: Send>(
    ctx: &ExecContext<'_>,
    items: usize,
    init: impl Fn() -> Result<S> + Sync,
    f: impl Fn(&mut S, usize) + Sync,
) -> Result<()> {
    crate::runtime::parallel::for_each_with(ctx, items, init, f)
}

/// One worker's buffers for 2-D transforms on the grid.
pub(super) struct Lines {
    /// One grid row, complex.
    row: Vec<Complex32>,
    /// The half spectrum, column-major: \[v\]\[nh\].
    pub(super) cols: Vec<Complex32>,
    ra: Vec<f32>,
    rb: Vec<f32>,
    scratch: Vec<Complex32>,
    /// The non-zero grid rows of the image being transformed.
    pub(super) rowlist: Vec<usize>,
}

impl Lines {
    /// The buffers, the transforms' scratch among them (handed to rustfft's
    /// `process_with_scratch`, which then allocates nothing).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when they cannot be allocated.
    pub(super) fn new(plans: &Plans, sp: &Spectral) -> Result<Lines> {
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
pub(super) struct Plans {
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
    pub(super) fn get(features: Features, nh: usize, nw: usize) -> Result<Plans> {
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
