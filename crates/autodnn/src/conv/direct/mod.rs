//! `direct`: the convolution by its definition, blocked for registers and vectorised.
//!
//! Computes y\[n, k, oh, ow\] = Σ over c, r, s of
//! x\[n, g·C + c, oh·sh − pt + r·dh, ow·sw − pl + s·dw\] · w\[k, c, r, s\] (r, s flipped in
//! convolution mode), for every layout, stride, dilation, padding and group count.
//!
//! - **Wins** where nothing needs transforming: small channel counts, odd geometries, strided
//!   and dilated kernels, and whenever no workspace may be used.
//! - **Workspace:** none. **Declines:** nothing; it is the last entry of the registry and the
//!   end of every fallback chain.
//! - **Deterministic:** every output element is accumulated by one thread in a fixed order
//!   (channel outer, kernel tap inner), so the bits do not depend on the thread count.
//!
//! How: for one image, the output positions (OH·OW, flattened) are cut into tiles of
//! `PV × lanes` positions and the output channels of each group into blocks of `OCB`. A tile's
//! inputs for each kernel tap are described once ([`VecLoad`]: up to [`MAX_SEGMENTS`]
//! contiguous masked runs, or a gather) and reused for every channel and every channel block;
//! the kernel keeps an `OCB × PV` block of vector accumulators in registers and does one
//! broadcast of a weight per `PV` vector FMAs. Flattening positions keeps the lanes full on
//! small images (7×7) where vectorising along a row would not.

mod bwd_bias;
mod bwd_data;
mod bwd_filter;
mod fwd;

pub use bwd_bias::DirectBwdBias;
pub use bwd_data::DirectBwdData;
pub use bwd_filter::DirectBwdFilter;
pub use fwd::Direct;

use crate::conv::{EpilogueArgs, ExecContext};
use crate::desc::{ConvMode, ConvProblem};
use crate::error::Result;
use crate::gemm::GemmInput;
use crate::op::{Tensor, TensorMut};
use crate::runtime::parallel::SharedOut;
use crate::simd::Token;
#[cfg(target_arch = "x86_64")]
use crate::simd::{Avx2, Avx512};

/// Most contiguous runs one vector of inputs is assembled from before a gather is used
/// instead.
pub(crate) const MAX_SEGMENTS: usize = 4;
/// `nseg` of a [`VecLoad`] that is a gather.
const GATHER: u8 = u8::MAX;
/// Work items per thread to aim for, so that uneven items still balance.
const ITEMS_PER_THREAD: usize = 4;

/// Register-tile shape of one kernel family: output channels per block, vectors of positions
/// per tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectTile {
    pub ocb: usize,
    pub pv: usize,
}

/// AVX-512: 6 channels × 4 vectors of 16 positions = 24 accumulators of 32 registers.
const TILE_AVX512: DirectTile = DirectTile { ocb: 6, pv: 4 };
/// Portable and AVX2 (8 lanes): 4 channels × 3 vectors = 12 accumulators of 16 registers.
const TILE_PORTABLE: DirectTile = DirectTile { ocb: 4, pv: 3 };
const PV_MAX: usize = 4;

/// How to assemble one vector of `L` inputs of one channel, relative to that channel's base.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VecLoad<const L: usize> {
    /// Number of masked runs (0: all lanes are zero padding), or [`GATHER`].
    nseg: u8,
    /// Element step between the lanes of a run: 1 (contiguous) or 2 (stride-2 windows).
    step: u8,
    /// Per run: offset of lane 0's element (lane `l` reads `off + step·l`); may point outside
    /// the tensor for lanes the mask excludes.
    off: [isize; MAX_SEGMENTS],
    /// Per run: the lanes it fills.
    mask: [u32; MAX_SEGMENTS],
    /// For a gather: each lane's offset (the AVX-512 gather takes them as i32, where every
    /// one fits: see [`describe`]).
    idx: [i64; L],
    /// For a gather: the lanes that are inside the image.
    gmask: u32,
}

/// One kernel tap (r, s): where its weight is, and how to load each vector of the tile.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tap<const L: usize> {
    w_off: usize,
    loads: [VecLoad<L>; PV_MAX],
}

/// Everything the tile kernels need, with offsets in elements. x and w hold `E` (f32, or bf16
/// and f16, widened to f32 as each element is loaded).
pub(crate) struct TileArgs<'a, const L: usize, E = f32> {
    x: &'a [E],
    x_base: usize,
    x_cstride: usize,
    w: &'a [E],
    w_base: usize,
    w_kstride: usize,
    w_cstride: usize,
    taps: &'a [Tap<L>],
    cg: usize,
    ocb: usize,
    pv: usize,
}

/// Problem geometry in the frame's terms.
struct Geometry {
    n: usize,
    groups: usize,
    cg: usize,
    kg: usize,
    oh: usize,
    ow: usize,
    h: i64,
    w: i64,
    r: usize,
    s: usize,
    stride: [i64; 2],
    dil: [i64; 2],
    pad: [i64; 2],
    xs: [usize; 4],
    ys: [usize; 4],
    ws: [usize; 4],
    flip: bool,
}

impl Geometry {
    fn new(p: &ConvProblem) -> Geometry {
        let c = p.conv();
        Geometry {
            n: p.x().n(),
            groups: p.groups(),
            cg: p.c_per_group(),
            kg: p.k_per_group(),
            oh: p.y().h(),
            ow: p.y().w(),
            h: p.x().h() as i64,
            w: p.x().w() as i64,
            r: p.w().r(),
            s: p.w().s(),
            stride: [c.stride()[0] as i64, c.stride()[1] as i64],
            dil: [c.dilation()[0] as i64, c.dilation()[1] as i64],
            pad: [c.padding().top, c.padding().left],
            xs: p.x().strides(),
            ys: p.y().strides(),
            ws: p.w().strides(),
            flip: c.mode() == ConvMode::Convolution,
        }
    }

    /// The most taps [`Geometry::build_taps`] keeps for a tile of `tile_positions` positions:
    /// those whose window reaches the image. A tile spans at most that many output rows and
    /// columns, and in one output row at most ⌈H / dilation⌉ kernel rows reach the image
    /// (likewise for columns), so a kernel far larger than the image keeps a short list.
    fn max_taps(&self, tile_positions: usize) -> usize {
        let rows = self.oh.min(tile_positions);
        let cols = self.ow.min(tile_positions);
        let reach = |extent: i64, dil: i64| (extent as usize).div_ceil(dil.max(1) as usize);
        let u = self.r.min(rows.saturating_mul(reach(self.h, self.dil[0])));
        let v = self.s.min(cols.saturating_mul(reach(self.w, self.dil[1])));
        u * v
    }

    /// Describes the loads of every tap for the tile of positions `p0 .. p0 + pv·L`. Returns
    /// false when some offset does not fit a gather index (the portable kernel then runs).
    fn build_taps<const L: usize>(&self, p0: usize, pv: usize, taps: &mut Vec<Tap<L>>) -> bool {
        let positions = self.oh * self.ow;
        let mut gather_ok = true;
        taps.clear();
        for u in 0..self.r {
            for v in 0..self.s {
                let (fu, fv) = if self.flip {
                    (self.r - 1 - u, self.s - 1 - v)
                } else {
                    (u, v)
                };
                let mut tap = Tap {
                    w_off: fu * self.ws[2] + fv * self.ws[3],
                    loads: [VecLoad {
                        nseg: 0,
                        step: 1,
                        off: [0; MAX_SEGMENTS],
                        mask: [0; MAX_SEGMENTS],
                        idx: [0; L],
                        gmask: 0,
                    }; PV_MAX],
                };
                for (j, load) in tap.loads.iter_mut().enumerate().take(pv) {
                    let mut offs = [0i64; L];
                    let mut valid = 0u32;
                    for (l, off) in offs.iter_mut().enumerate() {
                        let p = p0 + j * L + l;
                        if p >= positions {
                            continue;
                        }
                        let ih = (p / self.ow) as i64 * self.stride[0] - self.pad[0]
                            + u as i64 * self.dil[0];
                        let iw = (p % self.ow) as i64 * self.stride[1] - self.pad[1]
                            + v as i64 * self.dil[1];
                        if ih < 0 || ih >= self.h || iw < 0 || iw >= self.w {
                            continue;
                        }
                        *off = ih * self.xs[2] as i64 + iw * self.xs[3] as i64;
                        valid |= 1 << l;
                    }
                    gather_ok &= describe(&offs, valid, load);
                }
                // A tap whose every lane is in the padding adds nothing: leave it out (a
                // kernel far larger than the image, kh = 10^6 on one row, keeps a short list).
                if tap.loads[..pv].iter().any(|l| l.nseg != 0) {
                    taps.push(tap);
                }
            }
        }
        gather_ok
    }
}

/// Fills `load` for lanes `valid` at `offs`: a few runs of step 1 or 2 when they cover the
/// lanes, else a gather. Returns false when a gather is needed but an offset does not fit in
/// `i32`.
fn describe<const L: usize>(offs: &[i64; L], valid: u32, load: &mut VecLoad<L>) -> bool {
    load.gmask = valid;
    for step in [1u8, 2] {
        if let Some(nseg) = runs(offs, valid, step as i64, load) {
            load.nseg = nseg;
            load.step = step;
            return true;
        }
    }
    load.nseg = GATHER;
    let mut fits = true;
    for (l, idx) in load.idx.iter_mut().enumerate() {
        if valid >> l & 1 == 1 {
            *idx = offs[l];
            fits &= i32::try_from(offs[l]).is_ok();
        }
    }
    fits
}

/// Splits the valid lanes into runs where lane `l` reads `base + step·l`; `None` when more
/// than [`MAX_SEGMENTS`] runs would be needed.
fn runs<const L: usize>(
    offs: &[i64; L],
    valid: u32,
    step: i64,
    load: &mut VecLoad<L>,
) -> Option<u8> {
    let mut nseg = 0usize;
    for l in (0..L).filter(|l| valid >> l & 1 == 1) {
        let base = offs[l] - step * l as i64;
        if let Some(s) = (0..nseg).find(|&s| load.off[s] as i64 == base) {
            load.mask[s] |= 1 << l;
        } else if nseg < MAX_SEGMENTS {
            load.off[nseg] = base as isize;
            load.mask[nseg] = 1 << l;
            nseg += 1;
        } else {
            return None;
        }
    }
    Some(nseg as u8)
}

/// A tile kernel of the family of token `S` (its proof that the CPU runs it): computes
/// `ocb × pv·L` outputs into `out` (row `o` at `o·PV_MAX·L`). The flag says whether the tap
/// table may use gathers (false: some offset does not fit).
type TileFn<S, const L: usize, E> = fn(S, &TileArgs<'_, L, E>, &mut [f32], bool);

#[cfg(target_arch = "x86_64")]
use avx512::Lanes as IsaLanes;
/// What the vector kernels of other targets need of an element type: nothing.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) trait IsaLanes {}
#[cfg(not(target_arch = "x86_64"))]
impl IsaLanes for f32 {}
#[cfg(not(target_arch = "x86_64"))]
impl IsaLanes for half::bf16 {}
#[cfg(not(target_arch = "x86_64"))]
impl IsaLanes for half::f16 {}

/// An element type of `direct`'s tensors: f32, or bf16 and f16, read widened to f32 as each
/// element is loaded and written rounded once from the f32 result (to nearest even).
pub(crate) trait Elem: GemmInput + IsaLanes {
    /// The f32 result rounded to this type.
    fn narrow(v: f32) -> Self;
    /// The elements of `t` when it holds this type.
    fn of(t: Tensor<'_>) -> Option<&[Self]>;
    /// The elements of `t` when it holds this type.
    fn of_mut<'a>(t: &'a mut TensorMut<'_>) -> Option<&'a mut [Self]>;
    /// Writes `src`, rounded, at `start..start + src.len()` of `out`.
    ///
    /// # Safety
    /// As [`SharedOut::write_slice`]: no other thread accesses these elements meanwhile.
    #[inline]
    unsafe fn write_run(out: &SharedOut<'_, Self>, start: usize, src: &[f32]) {
        for (i, v) in src.iter().enumerate() {
            // SAFETY: the caller's contract covers start .. start + src.len().
            unsafe { out.write(start + i, Self::narrow(*v)) };
        }
    }
}

impl Elem for f32 {
    #[inline(always)]
    fn narrow(v: f32) -> f32 {
        v
    }
    fn of(t: Tensor<'_>) -> Option<&[f32]> {
        match t {
            Tensor::F32(v) => Some(v),
            _ => None,
        }
    }
    fn of_mut<'a>(t: &'a mut TensorMut<'_>) -> Option<&'a mut [f32]> {
        match t {
            TensorMut::F32(v) => Some(v),
            _ => None,
        }
    }
    #[inline]
    unsafe fn write_run(out: &SharedOut<'_, f32>, start: usize, src: &[f32]) {
        // SAFETY: the caller's contract is write_slice's.
        unsafe { out.write_slice(start, src) }
    }
}

impl Elem for half::bf16 {
    #[inline(always)]
    fn narrow(v: f32) -> half::bf16 {
        half::bf16::from_f32(v)
    }
    fn of(t: Tensor<'_>) -> Option<&[half::bf16]> {
        match t {
            Tensor::Bf16(v) => Some(v),
            _ => None,
        }
    }
    fn of_mut<'a>(t: &'a mut TensorMut<'_>) -> Option<&'a mut [half::bf16]> {
        match t {
            TensorMut::Bf16(v) => Some(v),
            _ => None,
        }
    }
}

impl Elem for half::f16 {
    #[inline(always)]
    fn narrow(v: f32) -> half::f16 {
        half::f16::from_f32(v)
    }
    fn of(t: Tensor<'_>) -> Option<&[half::f16]> {
        match t {
            Tensor::F16(v) => Some(v),
            _ => None,
        }
    }
    fn of_mut<'a>(t: &'a mut TensorMut<'_>) -> Option<&'a mut [half::f16]> {
        match t {
            TensorMut::F16(v) => Some(v),
            _ => None,
        }
    }
}

/// The portable frame: splits the work, builds tap tables, calls the tile kernel and stores.
#[allow(clippy::too_many_arguments)]
fn frame<S: Token, const L: usize, E: GemmInput, O: Elem>(
    s: S,
    ctx: &ExecContext<'_>,
    geo: &Geometry,
    x: &[E],
    w: &[E],
    out: &SharedOut<'_, O>,
    epi: &EpilogueArgs<'_>,
    tile: DirectTile,
    kernel: TileFn<S, L, E>,
) -> Result<()> {
    let positions = geo.oh * geo.ow;
    let tile_positions = tile.pv * L;
    let tiles = positions.div_ceil(tile_positions);
    let blocks = geo.kg.div_ceil(tile.ocb);
    // Jobs within one (image, tile): every (group, channel block). Chunks of them are items.
    let jobs = geo.groups * blocks;
    let base_items = geo.n * tiles;
    let chunks = if ctx.threads <= 1 {
        1
    } else {
        (ITEMS_PER_THREAD * ctx.threads)
            .div_ceil(base_items)
            .clamp(1, jobs)
    };
    let chunk_len = jobs.div_ceil(chunks);
    let items = base_items * chunks;

    let max_taps = geo.max_taps(tile_positions);
    let run_item = |taps: &mut Vec<Tap<L>>, acc: &mut Vec<f32>, item: usize| {
        let chunk = item % chunks;
        let t = (item / chunks) % tiles;
        let n = item / chunks / tiles;
        let p0 = t * tile_positions;
        let np = tile_positions.min(positions - p0);
        let pv = np.div_ceil(L);
        // Within the capacities `scratch` reserved: nothing is allocated here.
        let gather_ok = geo.build_taps::<L>(p0, pv, taps);
        debug_assert!(
            taps.len() <= max_taps,
            "{} taps over the bound {max_taps}",
            taps.len()
        );
        acc.resize(tile.ocb * PV_MAX * L, 0.0);
        for job in chunk * chunk_len..((chunk + 1) * chunk_len).min(jobs) {
            let g = job / blocks;
            let k0 = (job % blocks) * tile.ocb;
            let ocb = tile.ocb.min(geo.kg - k0);
            let k_first = g * geo.kg + k0;
            let args = TileArgs {
                x,
                x_base: n * geo.xs[0] + g * geo.cg * geo.xs[1],
                x_cstride: geo.xs[1],
                w,
                w_base: k_first * geo.ws[0],
                w_kstride: geo.ws[0],
                w_cstride: geo.ws[1],
                taps,
                cg: geo.cg,
                ocb,
                pv,
            };
            kernel(s, &args, acc, gather_ok);
            store(geo, out, epi, acc, n, k_first, ocb, p0, np, L);
        }
    };

    // Per thread: one tap table (the taps a tile can reach) and one accumulator block.
    let scratch = || -> Result<(Vec<Tap<L>>, Vec<f32>)> {
        Ok((
            crate::alloc::try_vec_with_capacity(max_taps, "direct's tap table")?,
            crate::alloc::try_vec_with_capacity(tile.ocb * PV_MAX * L, "direct's accumulators")?,
        ))
    };
    crate::runtime::parallel::for_each_with(ctx, items, scratch, |(taps, acc), item| {
        run_item(taps, acc, item)
    })
}

/// Writes a computed block to y, through the epilogue.
#[allow(clippy::too_many_arguments)]
fn store<O: Elem>(
    geo: &Geometry,
    out: &SharedOut<'_, O>,
    epi: &EpilogueArgs<'_>,
    acc: &mut [f32],
    n: usize,
    k_first: usize,
    ocb: usize,
    p0: usize,
    np: usize,
    lanes: usize,
) {
    let row = PV_MAX * lanes;
    let rows_contiguous = geo.ys[3] == 1 && geo.ys[2] == geo.ow;
    let plain = epi.is_identity();
    for o in 0..ocb {
        let k = k_first + o;
        let src = &mut acc[o * row..o * row + np];
        let base = n * geo.ys[0] + k * geo.ys[1];
        if rows_contiguous && plain {
            // SAFETY: this item is the only writer of channel k at positions p0 .. p0 + np
            // of image n; distinct coordinates are distinct elements.
            unsafe { O::write_run(out, base + p0, src) };
        } else {
            for (i, v) in src.iter_mut().enumerate() {
                let p = p0 + i;
                let off = base + (p / geo.ow) * geo.ys[2] + (p % geo.ow) * geo.ys[3];
                // SAFETY: as above, this item alone reads and writes this output element.
                let value = epi.value(*v, k, off, || unsafe { out.read(off) }.to_f32());
                // SAFETY: as above.
                unsafe { out.write(off, O::narrow(value)) };
            }
        }
    }
}

/// The portable kernel: plain Rust over fixed-size lane arrays, which the compiler vectorises
/// for whatever the target (or an enclosing `target_feature` function) offers. `FUSED` uses
/// `mul_add` (only where FMA instructions exist: elsewhere it is a slow library call).
#[inline(always)]
fn portable_tile<const L: usize, const FUSED: bool, E: GemmInput>(
    a: &TileArgs<'_, L, E>,
    out: &mut [f32],
) {
    const OCB_MAX: usize = 8;
    let mut acc = [[[0f32; L]; PV_MAX]; OCB_MAX];
    let (ocb, pv) = (a.ocb.min(OCB_MAX), a.pv.min(PV_MAX));
    for c in 0..a.cg {
        let xc = (a.x_base + c * a.x_cstride) as isize;
        let wc = a.w_base + c * a.w_cstride;
        for tap in a.taps {
            let mut xv = [[0f32; L]; PV_MAX];
            for (load, xv) in tap.loads.iter().zip(xv.iter_mut()).take(pv) {
                fill(load, a.x, xc, xv);
            }
            for (o, acc) in acc.iter_mut().enumerate().take(ocb) {
                let wv = a.w[wc + o * a.w_kstride + tap.w_off].to_f32();
                for (acc, xv) in acc.iter_mut().zip(&xv).take(pv) {
                    for l in 0..L {
                        acc[l] = if FUSED {
                            wv.mul_add(xv[l], acc[l])
                        } else {
                            acc[l] + wv * xv[l]
                        };
                    }
                }
            }
        }
    }
    for (o, acc) in acc.iter().enumerate().take(ocb) {
        for (j, acc) in acc.iter().enumerate().take(pv) {
            let at = o * PV_MAX * L + j * L;
            out[at..at + L].copy_from_slice(acc);
        }
    }
}

/// Assembles one vector of inputs as [`VecLoad`] describes it.
#[inline(always)]
fn fill<const L: usize, E: GemmInput>(load: &VecLoad<L>, x: &[E], xc: isize, xv: &mut [f32; L]) {
    if load.nseg == GATHER {
        for (l, v) in xv.iter_mut().enumerate() {
            if load.gmask >> l & 1 == 1 {
                *v = x[(xc + load.idx[l] as isize) as usize].to_f32();
            }
        }
    } else {
        let step = load.step as isize;
        for s in 0..load.nseg as usize {
            let base = xc + load.off[s];
            for (l, v) in xv.iter_mut().enumerate() {
                if load.mask[s] >> l & 1 == 1 {
                    *v = x[(base + step * l as isize) as usize].to_f32();
                }
            }
        }
    }
}

/// The portable kernel compiled for AVX2 + FMA.
#[cfg(target_arch = "x86_64")]
fn avx2_tile<E: GemmInput>(_: Avx2, a: &TileArgs<'_, 8, E>, out: &mut [f32], _gather_ok: bool) {
    #[target_feature(enable = "avx2,fma")]
    fn inner<E: GemmInput>(a: &TileArgs<'_, 8, E>, out: &mut [f32]) {
        portable_tile::<8, true, E>(a, out)
    }
    // SAFETY: an Avx2 token exists only where the CPU has AVX2 and FMA (`crate::simd`).
    unsafe { inner(a, out) }
}

/// The portable kernel compiled for AVX-512 (16 lanes): bf16 and f16 tensors, whose elements
/// are widened as the lanes are assembled (f32 runs the hand-written kernel of `avx512`).
#[cfg(target_arch = "x86_64")]
fn avx512_portable_tile<E: GemmInput>(
    _: Avx512,
    a: &TileArgs<'_, 16, E>,
    out: &mut [f32],
    _gather_ok: bool,
) {
    #[target_feature(enable = "avx512f,fma")]
    fn inner<E: GemmInput>(a: &TileArgs<'_, 16, E>, out: &mut [f32]) {
        portable_tile::<16, true, E>(a, out)
    }
    // SAFETY: an Avx512 token exists only where the CPU has AVX-512F (`crate::simd`), which
    // includes FMA.
    unsafe { inner(a, out) }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{portable_tile, Avx512, GemmInput, TileArgs, VecLoad, GATHER, PV_MAX};

    const L: usize = 16;

    /// The AVX-512 tile of f32 tensors: dispatches the runtime block shape to a
    /// monomorphised kernel.
    pub(super) fn tile(s: Avx512, a: &TileArgs<'_, L>, out: &mut [f32], gather_ok: bool) {
        if !gather_ok {
            return portable_tile::<L, false, f32>(a, out);
        }
        // The token: an Avx512 exists only where the CPU has AVX-512F (`crate::simd`).
        let _ = s;
        dispatch::<f32>(a, out, |a, out| a.run_f(out))
    }

    /// The AVX-512 tile of bf16 and f16 tensors, widened as each vector is loaded (16-bit
    /// masked loads: AVX512-BW and VL, which the caller has checked the CPU runs).
    pub(super) fn tile_reduced<E: Lanes>(
        s: Avx512,
        a: &TileArgs<'_, L, E>,
        out: &mut [f32],
        gather_ok: bool,
    ) {
        if !gather_ok {
            return portable_tile::<L, false, E>(a, out);
        }
        let _ = s;
        dispatch::<E>(a, out, |a, out| a.run_bw(out))
    }

    /// A block shape of a kernel, erased to one call.
    trait Shape<E> {
        fn run_f(&self, out: &mut [f32]);
        fn run_bw(&self, out: &mut [f32]);
    }

    struct Fixed<'a, 'b, const OCB: usize, const PV: usize, E>(&'a TileArgs<'b, L, E>);

    impl<const OCB: usize, const PV: usize, E: Lanes> Shape<E> for Fixed<'_, '_, OCB, PV, E> {
        fn run_f(&self, out: &mut [f32]) {
            // SAFETY: reached only from `tile`, whose Avx512 token proves AVX-512F.
            unsafe { kernel_f::<OCB, PV, E>(self.0, out) }
        }
        fn run_bw(&self, out: &mut [f32]) {
            // SAFETY: reached only from `tile_reduced`, whose caller checked AVX-512F, BW
            // and VL (and F16C, which AVX-512F CPUs have).
            unsafe { kernel_bw::<OCB, PV, E>(self.0, out) }
        }
    }

    /// Calls `f` with the kernel of `a`'s block shape.
    fn dispatch<E: Lanes>(
        a: &TileArgs<'_, L, E>,
        out: &mut [f32],
        f: impl Fn(&dyn Shape<E>, &mut [f32]),
    ) {
        assert!(out.len() >= a.ocb * PV_MAX * L && a.ocb <= 6 && (1..=PV_MAX).contains(&a.pv));
        macro_rules! dispatch {
            ($($o:literal)*) => {
                match (a.ocb, a.pv) {
                    $(
                        ($o, 1) => f(&Fixed::<$o, 1, E>(a), out),
                        ($o, 2) => f(&Fixed::<$o, 2, E>(a), out),
                        ($o, 3) => f(&Fixed::<$o, 3, E>(a), out),
                        ($o, 4) => f(&Fixed::<$o, 4, E>(a), out),
                    )*
                    _ => unreachable!("block shape checked above"),
                }
            };
        }
        dispatch!(1 2 3 4 5 6)
    }

    /// # Safety
    /// As [`body`], on a CPU with AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn kernel_f<const OCB: usize, const PV: usize, E: Lanes>(
        a: &TileArgs<'_, L, E>,
        out: &mut [f32],
    ) {
        // SAFETY: the caller's contract.
        unsafe { body::<OCB, PV, E>(a, out) }
    }

    /// # Safety
    /// As [`body`], on a CPU with AVX-512F, BW and VL and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    unsafe fn kernel_bw<const OCB: usize, const PV: usize, E: Lanes>(
        a: &TileArgs<'_, L, E>,
        out: &mut [f32],
    ) {
        // SAFETY: the caller's contract.
        unsafe { body::<OCB, PV, E>(a, out) }
    }

    /// An element type the AVX-512 kernel loads 16 lanes of, widened to f32.
    pub(crate) trait Lanes: GemmInput {
        /// One vector as `load` describes it.
        ///
        /// # Safety
        /// As [`load_vec`]; bf16 and f16 need AVX512-BW and VL, f16 F16C.
        unsafe fn load(load: &VecLoad<L>, xc: *const Self) -> __m512;
        /// One weight, widened.
        ///
        /// # Safety
        /// `p` is readable; f16 needs F16C.
        unsafe fn weight(p: *const Self) -> f32;
    }

    impl Lanes for f32 {
        #[inline(always)]
        unsafe fn load(load: &VecLoad<L>, xc: *const f32) -> __m512 {
            // SAFETY: the caller's contract is load_vec's.
            unsafe { load_vec(load, xc) }
        }
        #[inline(always)]
        unsafe fn weight(p: *const f32) -> f32 {
            // SAFETY: the caller's contract.
            unsafe { *p }
        }
    }

    impl Lanes for half::bf16 {
        #[inline(always)]
        unsafe fn load(load: &VecLoad<L>, xc: *const half::bf16) -> __m512 {
            // SAFETY: the caller's contract; bf16 widens by a shift into the high half.
            unsafe {
                load_vec16(load, xc.cast(), |h| {
                    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
                })
            }
        }
        #[inline(always)]
        unsafe fn weight(p: *const half::bf16) -> f32 {
            // SAFETY: the caller's contract.
            f32::from_bits((unsafe { (*p).to_bits() } as u32) << 16)
        }
    }

    impl Lanes for half::f16 {
        #[inline(always)]
        unsafe fn load(load: &VecLoad<L>, xc: *const half::f16) -> __m512 {
            // SAFETY: the caller's contract (AVX-512F converts 16 halves).
            unsafe { load_vec16(load, xc.cast(), |h| _mm512_cvtph_ps(h)) }
        }
        #[inline(always)]
        unsafe fn weight(p: *const half::f16) -> f32 {
            // SAFETY: the caller's contract (readable p, F16C).
            unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((*p).to_bits() as i32))) }
        }
    }

    /// [`load_vec`] for 16-bit elements, each run loaded with a masked 16-bit load and
    /// widened by `widen`; gathers assembled lane by lane.
    ///
    /// # Safety
    /// As [`load_vec`], with AVX512-BW and VL.
    #[inline(always)]
    unsafe fn load_vec16(
        load: &VecLoad<L>,
        xc: *const u16,
        widen: impl Fn(__m256i) -> __m512,
    ) -> __m512 {
        // SAFETY (all intrinsics below): the caller runs with AVX-512F, BW and VL enabled.
        let zero = unsafe { _mm512_setzero_ps() };
        if load.nseg == GATHER {
            let mut lanes = [0u16; L];
            for (l, v) in lanes.iter_mut().enumerate() {
                if load.gmask >> l & 1 == 1 {
                    // SAFETY: enabled lanes address elements inside x.
                    *v = unsafe { *xc.wrapping_offset(load.idx[l] as isize) };
                }
            }
            // SAFETY: 16 readable u16s.
            return widen(unsafe { _mm256_loadu_si256(lanes.as_ptr().cast()) });
        }
        let mut v = zero;
        for s in 0..load.nseg as usize {
            let m = load.mask[s];
            let base = xc.wrapping_offset(load.off[s]);
            let run = if load.step == 1 {
                // SAFETY: lane l of run s reads base + l, in bounds for enabled lanes.
                widen(unsafe { _mm256_maskz_loadu_epi16(m as __mmask16, base.cast()) })
            } else {
                let (lo_mask, hi_mask) = (spread_even(m & 0xff), spread_even(m >> 8));
                // SAFETY: element 2l (lane l enabled) lies in bounds; the masks enable
                // exactly those elements of the two vectors.
                let (lo, hi) = unsafe {
                    (
                        widen(_mm256_maskz_loadu_epi16(lo_mask, base.cast())),
                        widen(_mm256_maskz_loadu_epi16(
                            hi_mask,
                            base.wrapping_add(16).cast(),
                        )),
                    )
                };
                // SAFETY: AVX-512F.
                unsafe {
                    let evens = _mm512_setr_epi32(
                        0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                    );
                    _mm512_permutex2var_ps(lo, evens, hi)
                }
            };
            // SAFETY: AVX-512F.
            v = unsafe { _mm512_mask_mov_ps(v, m as __mmask16, run) };
        }
        v
    }

    /// # Safety
    /// The CPU must support AVX-512F (and what [`Lanes`] needs for `E`), into whose kernels
    /// this is always inlined. `a` must describe loads that stay inside `a.x` for every lane
    /// they enable, and weights inside `a.w` for `ocb` channels and `cg` input channels;
    /// `out` must hold `OCB · PV_MAX · 16` elements.
    #[inline(always)]
    unsafe fn body<const OCB: usize, const PV: usize, E: Lanes>(
        a: &TileArgs<'_, L, E>,
        out: &mut [f32],
    ) {
        let last_w = a.w_base
            + (OCB - 1) * a.w_kstride
            + (a.cg - 1) * a.w_cstride
            + a.taps.iter().map(|t| t.w_off).max().unwrap_or(0);
        assert!(last_w < a.w.len() && out.len() >= OCB * PV_MAX * L);
        // SAFETY: AVX-512F (the caller's contract).
        let mut acc = [[unsafe { _mm512_setzero_ps() }; PV]; OCB];
        let xp = a.x.as_ptr();
        let wp = a.w.as_ptr();
        for c in 0..a.cg {
            let xc = xp.wrapping_add(a.x_base + c * a.x_cstride);
            let wc = wp.wrapping_add(a.w_base + c * a.w_cstride);
            for tap in a.taps {
                // SAFETY: AVX-512F (the caller's contract).
                let mut xv = [unsafe { _mm512_setzero_ps() }; PV];
                for (v, load) in xv.iter_mut().zip(&tap.loads) {
                    // SAFETY: the tap table enables only lanes whose offsets lie inside
                    // channel c of image n of x (built from in-range coordinates).
                    *v = unsafe { E::load(load, xc) };
                }
                for (o, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: o < OCB, c < cg and the tap offset keep the read at or below
                    // last_w, asserted to be inside w; AVX-512F.
                    let wv =
                        unsafe { _mm512_set1_ps(E::weight(wc.add(o * a.w_kstride + tap.w_off))) };
                    for (acc, xv) in acc.iter_mut().zip(&xv) {
                        // SAFETY: AVX-512F.
                        *acc = unsafe { _mm512_fmadd_ps(wv, *xv, *acc) };
                    }
                }
            }
        }
        for (o, acc) in acc.iter().enumerate() {
            for (j, acc) in acc.iter().enumerate() {
                // SAFETY: o·PV_MAX·16 + j·16 + 16 <= OCB·PV_MAX·16 <= out.len() (asserted).
                unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(o * PV_MAX * L + j * L), *acc) };
            }
        }
    }

    /// Spreads the low 8 bits to the even bits of 16 (bit i to bit 2i).
    #[inline(always)]
    fn spread_even(m: u32) -> __mmask16 {
        let mut out = 0u16;
        for i in 0..8 {
            out |= ((m >> i & 1) as u16) << (2 * i);
        }
        out
    }

    /// # Safety
    /// AVX-512F; every lane `load` enables must address an element of the allocation `xc`
    /// points into. Masked-off lanes are not accessed (AVX-512 masked loads and gathers
    /// suppress them), so their addresses may lie outside it.
    /// Called only from AVX-512 kernels, into which it is always inlined.
    #[inline(always)]
    unsafe fn load_vec(load: &VecLoad<L>, xc: *const f32) -> __m512 {
        // SAFETY (all intrinsics below): the caller runs with AVX-512F enabled.
        let zero = unsafe { _mm512_setzero_ps() };
        if load.nseg == GATHER {
            // SAFETY: the index array holds 16 readable i64s; enabled lanes are in bounds.
            unsafe {
                // Every offset fits in i32 (the tile's `gather_ok`): narrowed, 8 at a time.
                let lo = _mm512_cvtepi64_epi32(_mm512_loadu_si512(load.idx.as_ptr().cast()));
                let hi = _mm512_cvtepi64_epi32(_mm512_loadu_si512(load.idx[8..].as_ptr().cast()));
                let idx = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                _mm512_mask_i32gather_ps::<4>(zero, load.gmask as __mmask16, idx, xc)
            }
        } else if load.step == 1 {
            let mut v = zero;
            for s in 0..load.nseg as usize {
                // SAFETY: lane l of run s reads xc + off + l, in bounds for enabled lanes.
                v = unsafe {
                    _mm512_mask_loadu_ps(
                        v,
                        load.mask[s] as __mmask16,
                        xc.wrapping_offset(load.off[s]),
                    )
                };
            }
            v
        } else {
            // Step 2: lane l reads element 2l of the 32 from off, i.e. the even elements of
            // two vectors, picked by one two-source permute.
            // SAFETY: AVX-512F (the caller's contract).
            let evens = unsafe {
                _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30)
            };
            let mut v = zero;
            for s in 0..load.nseg as usize {
                let m = load.mask[s];
                let (lo_mask, hi_mask) = (spread_even(m & 0xff), spread_even(m >> 8));
                let base = xc.wrapping_offset(load.off[s]);
                // SAFETY: element 2l (lane l enabled) lies in bounds; the masks enable exactly
                // those elements of the two vectors.
                let (lo, hi) = unsafe {
                    (
                        _mm512_maskz_loadu_ps(lo_mask, base),
                        _mm512_maskz_loadu_ps(hi_mask, base.wrapping_add(16)),
                    )
                };
                // SAFETY: AVX-512F (the caller's contract).
                v = unsafe {
                    _mm512_mask_mov_ps(v, m as __mmask16, _mm512_permutex2var_ps(lo, evens, hi))
                };
            }
            v
        }
    }
}
