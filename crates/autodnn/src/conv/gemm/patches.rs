//! The patch packers: strips of positions packed per tap (portable, and the inline AVX-512
//! kernel of masked loads and gathers), shared by the explicit im2col and the engine's
//! packing; [`Patches`], the block's patches packed straight from x as the engine's A or B
//! (`implicit_gemm`), NHWC-like B panels through the transposer.

use crate::cpu::Features;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::gemm::{PackA, PackB};

use super::geometry::{Block, Geometry, Seg, Tap};

impl Geometry {
    /// Writes `dst[l]` = the input tap `tap` sees at output row `oh` (window origin row
    /// `ih0`), columns starting at window origin column `iw0`, for `l < dst.len()` (all in
    /// one output row); zero where the window is in the padding.
    #[inline]
    fn fill_seg(&self, x: &[f32], xbase: usize, tap: &Tap, ih0: i64, iw0: i64, dst: &mut [f32]) {
        let len = dst.len() as i64;
        let ih = ih0 + tap.dh;
        if ih < 0 || ih >= self.h {
            dst.fill(0.0);
            return;
        }
        let sw = self.stride[1];
        let first = iw0 + tap.dw; // column of lane l: first + l·sw
        let lo = if first >= 0 {
            0
        } else {
            ((-first + sw - 1) / sw).min(len)
        };
        let hi = if first >= self.w {
            lo
        } else {
            ((self.w - first + sw - 1) / sw).clamp(lo, len)
        };
        let (lo, hi) = (lo as usize, hi as usize);
        dst[..lo].fill(0.0);
        dst[hi..].fill(0.0);
        if hi > lo {
            let start = xbase
                + tap.xoff
                + ih as usize * self.xs[2]
                + (first + lo as i64 * sw) as usize * self.xs[3];
            // A lone column's stride may be anything: the step is used only between
            // columns inside x, so saturating is exact where it matters.
            let step = (sw as usize).saturating_mul(self.xs[3]);
            let out = &mut dst[lo..hi];
            if step == 1 {
                out.copy_from_slice(&x[start..start + out.len()]);
            } else if step == 2 {
                let len = out.len();
                crate::conv::copy_every_other(&x[start..start + 2 * len - 1], out);
            } else {
                for (o, v) in out.iter_mut().zip(x[start..].iter().step_by(step)) {
                    *o = *v;
                }
            }
        }
    }

    /// Packs a strip of `n` consecutive output positions from `start` (row order) for each
    /// tap of `taps`: row i (tap i) at `dst[i·ld ..]` gets `width ≥ n` lanes, the positions'
    /// inputs then zeros. `sc` is scratch reused across calls, made for at least `width`
    /// positions (it then never grows here).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack_strip(
        &self,
        features: Features,
        x: &[f32],
        xbase: usize,
        start: usize,
        n: usize,
        width: usize,
        taps: &[Tap],
        dst: &mut [f32],
        ld: usize,
        sc: &mut StripScratch,
    ) {
        if taps.is_empty() {
            return;
        }
        assert!(n <= width && dst.len() >= (taps.len() - 1) * ld + width);
        let mut segs = std::mem::take(&mut sc.segs);
        self.segments(start, n, usize::MAX, &mut segs);
        self.pack_strip_segs(features, x, xbase, n, width, taps, dst, ld, &segs, sc);
        sc.segs = segs;
    }

    /// [`Geometry::pack_strip`] once the strip's segments are known.
    #[allow(clippy::too_many_arguments)]
    fn pack_strip_segs(
        &self,
        features: Features,
        x: &[f32],
        xbase: usize,
        n: usize,
        width: usize,
        taps: &[Tap],
        dst: &mut [f32],
        ld: usize,
        segs: &[Seg],
        sc: &mut StripScratch,
    ) {
        #[cfg(target_arch = "x86_64")]
        if features.contains_all(Features::AVX512F) && width <= STRIP {
            // Only the windows these taps use are described; taps whose windows would be far
            // more than the taps (a kernel of 10^6 windows, a depth block across a channel
            // or kernel-row boundary) are packed in pieces.
            if let Some(k) = self.window_split(taps) {
                let (a, b) = taps.split_at(k);
                self.pack_strip_segs(features, x, xbase, n, width, a, dst, ld, segs, sc);
                let rest = &mut dst[k * ld..];
                return self.pack_strip_segs(features, x, xbase, n, width, b, rest, ld, segs, sc);
            }
            let win0 = taps.iter().map(|t| t.win).min().unwrap_or(0);
            let win1 = taps.iter().map(|t| t.win).max().unwrap_or(0);
            if self.row_loads(segs, sc, win0, win1) {
                let loads = &sc.loads;
                let step = self.stride[1] as usize * self.xs[3];
                // Every enabled lane reads an in-range (c, ih, iw) of this image and group:
                // the largest such offset is inside x (checked by the caller against the
                // descriptor; asserted here because the kernel reads through raw pointers).
                let last_c = taps.iter().map(|t| t.xoff).max().unwrap_or(0);
                let last_w = loads.iter().map(|l| l.last).max().unwrap_or(0);
                assert!(xbase + last_c + last_w < x.len());
                return avx512::fill_rows(x, xbase, taps, loads, win0, step, dst, ld, width);
            }
        }
        let _ = (features, &sc);
        for (i, tap) in taps.iter().enumerate() {
            let row = &mut dst[i * ld..i * ld + width];
            for sg in segs {
                self.fill_seg(
                    x,
                    xbase,
                    tap,
                    sg.ih0,
                    sg.iw0,
                    &mut row[sg.at..sg.at + sg.len],
                );
            }
            row[n..].fill(0.0);
        }
    }

    /// Describes, for every window offset (r, s), how the strip of segments `segs` loads its
    /// lanes (relative to a channel's base), into `sc.loads`. False when a strip needs more
    /// than [`MAX_SEGMENTS`] runs or offsets the kernels cannot index. The column arithmetic
    /// (the only divisions) is done once per (segment, s), not per window.
    fn row_loads(&self, segs: &[Seg], sc: &mut StripScratch, win0: usize, win1: usize) -> bool {
        if segs.len() > MAX_SEGMENTS
            || (self.stride[1] as usize).saturating_mul(self.xs[3]) > 1 << 24
        {
            return false;
        }
        let sw = self.stride[1];
        let (xs2, xs3) = (self.xs[2] as i64, self.xs[3] as i64);
        let step = sw * xs3;
        let nseg = segs.len();
        // Per (s, segment): lanes inside the image, and the column part of the offset.
        // Window w = r·S + s for w in win0 ..= win1; within one kernel row, only its columns.
        let kw = self.win_cols.len();
        let (r0, r1) = (win0 / kw, win1 / kw);
        let (s0, s1) = if r0 == r1 {
            (win0 % kw, win1 % kw)
        } else {
            (0, kw - 1)
        };
        sc.cols.clear();
        for &dw in &self.win_cols[s0..=s1] {
            for sg in segs {
                let first = sg.iw0 + dw;
                let len = sg.len as i64;
                let ceil_div = |a: i64| match sw {
                    1 => a,
                    2 => (a + 1) >> 1,
                    _ => (a + sw - 1) / sw,
                };
                let lo = if first >= 0 {
                    0
                } else {
                    ceil_div(-first).min(len)
                };
                let hi = if first >= self.w {
                    lo
                } else {
                    ceil_div(self.w - first).clamp(lo, len)
                };
                sc.cols.push(if hi > lo {
                    let at = sg.at as i64;
                    let mask = lanes(sg.at + lo as usize, sg.at + hi as usize);
                    ColRun {
                        mask,
                        even: if step == 2 { even_masks(mask) } else { [0; 4] },
                        off: first * xs3 - at * step,
                        last: (first + (hi - 1) * sw) * xs3,
                    }
                } else {
                    ColRun::default()
                });
            }
        }
        // Entries past each load's `nseg` are never read: only the counts are reset.
        sc.loads.resize(win1 + 1 - win0, RowLoad::EMPTY);
        let mut loads = sc.loads.iter_mut();
        for win in win0..=win1 {
            let (dh, s) = (self.win_rows[win / kw], win % kw - s0);
            {
                let load = loads.next().expect("one load per window");
                load.nseg = 0;
                load.last = 0;
                for (sg, col) in segs.iter().zip(&sc.cols[s * nseg..(s + 1) * nseg]) {
                    let ih = sg.ih0 + dh;
                    if col.mask == 0 || ih < 0 || ih >= self.h {
                        continue;
                    }
                    let row = ih * xs2;
                    let i = load.nseg;
                    load.off[i] = (row + col.off) as isize;
                    load.mask[i] = col.mask;
                    load.even[i] = col.even;
                    load.last = load.last.max((row + col.last) as usize);
                    load.nseg += 1;
                }
            }
        }
        true
    }
}

/// Scratch of the strip packer, reused across strips.
#[derive(Debug, Default)]
pub(crate) struct StripScratch {
    loads: Vec<RowLoad>,
    cols: Vec<ColRun>,
    segs: Vec<Seg>,
}

impl StripScratch {
    /// Scratch for strips of at most `width` positions of `geo` and calls of at most `taps`
    /// taps, allocated at once: packing then never grows it (one load per window described,
    /// one column run per (window column, segment) of at most [`MAX_SEGMENTS`], at most
    /// `width + 2` segments).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when it cannot be allocated.
    pub(super) fn new(geo: &Geometry, width: usize, taps: usize) -> Result<StripScratch> {
        let what = "the strip packer's scratch";
        // A call describes at most as many windows, and kernel columns, as it packs taps
        // (`Geometry::window_split`).
        let windows = (geo.win_rows.len() * geo.win_cols.len()).min(taps);
        let columns = geo.win_cols.len().min(taps);
        Ok(StripScratch {
            loads: crate::alloc::try_vec_with_capacity(windows, what)?,
            cols: crate::alloc::try_vec_with_capacity(columns * MAX_SEGMENTS, what)?,
            segs: crate::alloc::try_vec_with_capacity(width + 2, what)?,
        })
    }
}

/// The lanes of one run that a window column offset keeps inside the image, and the
/// column part of their offsets (see [`Geometry::row_loads`]).
#[derive(Debug, Clone, Copy, Default)]
struct ColRun {
    mask: u32,
    even: [u16; 4],
    off: i64,
    last: i64,
}

/// Lanes of one packed strip the AVX-512 packer fills at once (two vectors).
pub(super) const STRIP: usize = 32;
/// Most runs (one per output row crossed) one strip is assembled from.
const MAX_SEGMENTS: usize = 8;

/// How one strip's lanes are loaded for one window offset (r, s): lane l of run i reads
/// `channel base + off[i] + l·step` where `mask[i]` has bit l.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowLoad {
    nseg: usize,
    off: [isize; MAX_SEGMENTS],
    mask: [u32; MAX_SEGMENTS],
    /// For step 2: per run, the element masks of the two source vectors of each half of the
    /// lanes (see [`even_masks`]).
    even: [[u16; 4]; MAX_SEGMENTS],
    /// The largest offset an enabled lane reads (relative to the channel base).
    last: usize,
}

/// For lanes `mask` read at every other element: the masks of the elements to load, per
/// half of the lanes, from the half's first and second 16 elements.
fn even_masks(mask: u32) -> [u16; 4] {
    // Bit i of the low 8 bits to bit 2i.
    let spread = |m: u32| (0..8).fold(0u16, |out, i| out | (((m >> i & 1) as u16) << (2 * i)));
    let (h0, h1) = (mask & 0xffff, mask >> 16);
    [
        spread(h0 & 0xff),
        spread(h0 >> 8),
        spread(h1 & 0xff),
        spread(h1 >> 8),
    ]
}

impl RowLoad {
    const EMPTY: RowLoad = RowLoad {
        nseg: 0,
        off: [0; MAX_SEGMENTS],
        mask: [0; MAX_SEGMENTS],
        even: [[0; 4]; MAX_SEGMENTS],
        last: 0,
    };
}

/// Bits lo .. hi.
fn lanes(lo: usize, hi: usize) -> u32 {
    let upto = |n: usize| if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
    upto(hi) & !upto(lo)
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{RowLoad, Tap, STRIP};

    /// Fills `width ≤ 32` lanes of row i (at `dst[i·ld ..]`) for each tap i from the load
    /// descriptors of its window offset; `step` is the element distance between lanes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fill_rows(
        x: &[f32],
        xbase: usize,
        taps: &[Tap],
        loads: &[RowLoad],
        win0: usize,
        step: usize,
        dst: &mut [f32],
        ld: usize,
        width: usize,
    ) {
        assert!(width <= STRIP && !taps.is_empty() && dst.len() >= (taps.len() - 1) * ld + width);
        assert!(taps
            .iter()
            .all(|t| t.win >= win0 && t.win - win0 < loads.len()));
        // SAFETY: the AVX-512 packer is chosen only when the usable features (always within
        // the detected ones) include AVX-512F; the caller asserted that every enabled lane's
        // element lies inside x (largest channel base + largest load offset < x.len()), and
        // rows are inside dst (asserted above).
        unsafe {
            match step {
                1 => rows::<1>(x, xbase, taps, loads, win0, step, dst, ld, width),
                2 => rows::<2>(x, xbase, taps, loads, win0, step, dst, ld, width),
                4 => rows::<4>(x, xbase, taps, loads, win0, step, dst, ld, width),
                _ => rows::<0>(x, xbase, taps, loads, win0, step, dst, ld, width),
            }
        }
    }

    /// Bit j of a nibble to bit 4j: the elements a vector of step-4 lanes loads.
    const SPREAD4: [u16; 16] = {
        let mut t = [0u16; 16];
        let mut n = 0;
        while n < 16 {
            let mut j = 0;
            while j < 4 {
                if n >> j & 1 == 1 {
                    t[n] |= 1 << (4 * j);
                }
                j += 1;
            }
            n += 1;
        }
        t
    };

    /// `STEP` 1 (contiguous), 2 (every other element), 4 (every fourth: four masked loads
    /// and three permutes in place of a gather; AlexNet's conv1 at batch 1 on one Zen 5 core
    /// 1.40 -> 1.20 ms) or 0 (any step: gathers).
    ///
    /// # Safety
    /// AVX-512F. Every lane a load enables addresses an element of x at
    /// `xbase + tap.xoff + off + l·step`; rows `i·ld .. i·ld + width` are inside dst.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn rows<const STEP: usize>(
        x: &[f32],
        xbase: usize,
        taps: &[Tap],
        loads: &[RowLoad],
        win0: usize,
        step: usize,
        dst: &mut [f32],
        ld: usize,
        width: usize,
    ) {
        let xp = x.as_ptr();
        let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        // Step 4: elements 0, 4, .., 28 of a pair of vectors to lanes 0..8; then the low
        // halves of two such results to lanes 0..8 and 8..16.
        let fourths = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        let halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        let idx = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(step as i32),
        );
        let store = super::lanes(0, width);
        let (s0, s1) = (store as u16, (store >> 16) as u16);
        let op = dst.as_mut_ptr();
        for (i, tap) in taps.iter().enumerate() {
            let base = xp.wrapping_add(xbase + tap.xoff);
            let load = &loads[tap.win - win0];
            let mut v = [_mm512_setzero_ps(); 2];
            for s in 0..load.nseg {
                let p = base.wrapping_offset(load.off[s]);
                for (h, v) in v.iter_mut().enumerate() {
                    let m = (load.mask[s] >> (16 * h)) as u16;
                    if m == 0 {
                        continue;
                    }
                    let ph = p.wrapping_add(16 * h * step);
                    // SAFETY: the enabled lanes address elements of x (contract); masked-off
                    // lanes are not accessed and cannot fault.
                    *v = unsafe {
                        match STEP {
                            1 => _mm512_mask_loadu_ps(*v, m, ph),
                            2 => {
                                let e = &load.even[s][2 * h..2 * h + 2];
                                let lo = _mm512_maskz_loadu_ps(e[0], ph);
                                let hi = _mm512_maskz_loadu_ps(e[1], ph.wrapping_add(16));
                                _mm512_mask_mov_ps(*v, m, _mm512_permutex2var_ps(lo, evens, hi))
                            }
                            4 => {
                                // Lane l reads element 4l: vector q holds lanes 4q .. 4q + 4,
                                // at its elements 0, 4, 8, 12.
                                let part = |q: usize| {
                                    let em = SPREAD4[usize::from(m >> (4 * q) & 0xf)];
                                    _mm512_maskz_loadu_ps(em, ph.wrapping_add(16 * q))
                                };
                                let (a, b) = (part(0), part(1));
                                let (c, d) = (part(2), part(3));
                                let ab = _mm512_permutex2var_ps(a, fourths, b);
                                let cd = _mm512_permutex2var_ps(c, fourths, d);
                                _mm512_mask_mov_ps(*v, m, _mm512_permutex2var_ps(ab, halves, cd))
                            }
                            _ => _mm512_mask_i32gather_ps::<4>(*v, m, idx, ph),
                        }
                    };
                }
            }
            let out = op.wrapping_add(i * ld);
            // SAFETY: row i's first `width` elements are inside dst (contract); masked-off
            // lanes are not accessed.
            unsafe {
                if width == STRIP {
                    _mm512_storeu_ps(out, v[0]);
                    _mm512_storeu_ps(out.add(16), v[1]);
                } else {
                    _mm512_mask_storeu_ps(out, s0, v[0]);
                    _mm512_mask_storeu_ps(out.wrapping_add(16), s1, v[1]);
                }
            }
        }
    }
}

/// The patches of one block packed straight from x, as the engine's A (positions × taps) or
/// as its B (taps × positions).
pub(crate) struct Patches<'a> {
    pub geo: &'a Geometry,
    pub x: &'a [f32],
    pub block: Block,
    /// The kernel family packing may use.
    pub features: Features,
}

impl PackA for Patches<'_> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        let geo = self.geo;
        let xbase = geo.x_base(&self.block);
        let taps = &geo.taps[p0..p0 + kc];
        let mut sc = StripScratch::new(geo, mr, kc)?;
        for (q, panel) in dst.chunks_exact_mut(kc * mr).enumerate() {
            let start = self.block.p0 + i0 + q * mr;
            let n = mr.min(mc - q * mr);
            geo.pack_strip(
                self.features,
                self.x,
                xbase,
                start,
                n,
                mr,
                taps,
                panel,
                mr,
                &mut sc,
            );
        }
        Ok(())
    }
}

impl PackB for Patches<'_> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        let geo = self.geo;
        let xbase = geo.x_base(&self.block);
        let taps = &geo.taps[p0..p0 + kc];
        let tr = crate::gemm::transposer_for(self.features).filter(|t| t.max_w >= nr);
        let chunk = tr.map_or(16, |t| t.strip);
        let what = "the patch packer's scratch";
        let (mut sc, mut tmp, mut origins) = if geo.channels_inner {
            (
                StripScratch::default(),
                crate::alloc::try_vec(nr * chunk, 0f32, what)?,
                crate::alloc::try_vec_with_capacity(nr, what)?,
            )
        } else {
            (StripScratch::new(geo, nr, kc)?, Vec::new(), Vec::new())
        };
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            let start = self.block.p0 + j0 + q * nr;
            let valid = nr.min(nc - q * nr);
            if !geo.channels_inner {
                // A panel row is one tap of nr positions: the strip packer's format.
                geo.pack_strip(
                    self.features,
                    self.x,
                    xbase,
                    start,
                    valid,
                    nr,
                    taps,
                    panel,
                    nr,
                    &mut sc,
                );
                continue;
            }
            geo.pack_panel_nhwc(
                self.x,
                xbase,
                (start, valid),
                p0,
                kc,
                panel,
                tr,
                (&mut tmp, &mut origins),
            );
        }
        Ok(())
    }
}

impl Geometry {
    /// One B panel of NHWC-like patches: `nr` positions from `start` (`valid` of them real),
    /// taps `t0 .. t0 + kc`, row k of the panel holding tap t0 + k of the nr positions. Taps
    /// go in chunks of the transposer's strip: when a chunk is contiguous in x and inside the
    /// image for every position of a panel lying in one output row, it is transposed straight
    /// from x (the positions are evenly spaced there); otherwise each position's taps are
    /// copied into `tmp` first. `origins` holds room for `nr` window origins.
    #[allow(clippy::too_many_arguments)]
    fn pack_panel_nhwc(
        &self,
        x: &[f32],
        xbase: usize,
        (start, valid): (usize, usize),
        t0: usize,
        kc: usize,
        panel: &mut [f32],
        tr: Option<&crate::gemm::Transposer>,
        (tmp, origins): (&mut [f32], &mut Vec<(i64, i64)>),
    ) {
        let nr = panel.len() / kc;
        let chunk = tmp.len() / nr;
        origins.clear();
        origins.extend((start..start + valid).map(|p| self.origin(p)));
        let origins = &origins[..];
        let one_row = valid == nr && start / self.ow == (start + nr - 1) / self.ow;
        let row_len = self.win_cols.len() * self.cg;
        tmp[valid * chunk..].fill(0.0);
        let mut t = 0;
        while t < kc {
            let n = chunk.min(kc - t);
            let out = &mut panel[t * nr..(t + n) * nr];
            if let Some(tr) = tr.filter(|_| n == chunk && one_row && self.rows_contiguous) {
                let tt = t0 + t;
                let (r, rem) = (tt / row_len, tt % row_len);
                let (ih, first, last) = (
                    origins[0].0 + self.win_rows[r],
                    origins[0].1,
                    origins[nr - 1].1,
                );
                let kw = self.win_cols.len() as i64;
                let lo = (-first).clamp(0, kw) as usize * self.cg;
                let hi = (self.w - last).clamp(0, kw) as usize * self.cg;
                if ih >= 0 && ih < self.h && rem >= lo && rem + n <= hi.min(row_len) {
                    // The first position's tap `rem` (its column inside the image: rem ≥ lo).
                    let src = (xbase as i64
                        + ih * self.xs[2] as i64
                        + first * self.xs[3] as i64
                        + rem as i64) as usize;
                    let ld = self.stride[1] as usize * self.xs[3];
                    let src = &x[src..src + (nr - 1) * ld + n];
                    // SAFETY: the family's features are this CPU's (transposer_for caps them); nr ≤
                    // max_w rows of `strip` = n floats, ld apart, all inside `src` (a checked
                    // slice); `out` holds strip · nr floats.
                    unsafe { (tr.run)(src.as_ptr(), ld, nr, out.as_mut_ptr(), nr) };
                    t += n;
                    continue;
                }
            }
            for (j, &(ih0, iw0)) in origins.iter().enumerate() {
                self.fill_patch_at(
                    x,
                    xbase,
                    ih0,
                    iw0,
                    t0 + t,
                    &mut tmp[j * chunk..j * chunk + n],
                );
            }
            match tr {
                Some(tr) if n == chunk => {
                    // SAFETY: as above, the source being tmp: nr rows of chunk floats.
                    unsafe { (tr.run)(tmp.as_ptr(), chunk, nr, out.as_mut_ptr(), nr) }
                }
                _ => {
                    for (k, row) in out.chunks_exact_mut(nr).enumerate() {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = tmp[j * chunk + k];
                        }
                    }
                }
            }
            t += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Layout;

    use super::super::geometry::tests::geo;

    #[test]
    fn strip_runs_and_lanes() {
        assert_eq!(lanes(0, 32), u32::MAX);
        assert_eq!(lanes(3, 5), 0b11000);
        assert_eq!(lanes(4, 4), 0);
        // 7-wide rows: a 32-position strip from position 5 crosses 6 rows.
        let g = geo("mb1ic4ih7oc4oh7kh3ph1", Layout::Nchw);
        let mut segs = Vec::new();
        g.segments(5, 32, usize::MAX, &mut segs);
        assert_eq!(
            segs.iter().map(|s| s.len).collect::<Vec<_>>(),
            [2, 7, 7, 7, 7, 2]
        );
        assert_eq!((segs[1].at, segs[1].ih0, segs[1].iw0), (2, 0, -1));
        // Panel boundaries (unit 8) split runs too.
        g.segments(0, 16, 8, &mut segs);
        assert_eq!(segs.iter().map(|s| s.len).collect::<Vec<_>>(), [7, 1, 6, 2]);
    }
}
