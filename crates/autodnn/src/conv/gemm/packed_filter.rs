//! The filter as the engine's operand: the plain filter (a strided matrix, rows packed by
//! transposes, or a tap table) and the prepared format, each group's filter packed once into
//! the engine's panels cut into depth blocks ([`PackedFilter`], [`Geometry::prepare`]).

use crate::cpu::Features;
use crate::error::{Error, Result};
use crate::gemm::{self, PackA, PackB, PackFormat, StridedMatrix};
use crate::runtime::parallel::{try_for_each, SharedOut};
use crate::runtime::{ExecContext, MathMode};

use super::geometry::{Frame, Geometry, Tap};

/// Magic number opening prepared weights of the GEMM-based algorithms.
const PREPARED_MAGIC: f32 = 7405.0;
/// Floats before the packed panels: magic, panel width, depth block, frame, format (0: f32
/// panels, 1: bf16 pairs, 2: AMX tiles; [`PackFormat`]'s code).
const PREPARED_HEADER: usize = 5;

/// One group's filter as the engine's operand: the filter side of the frame (B, taps ×
/// channels, for [`Frame::Positions`]; A, channels × taps, for [`Frame::Channels`]).
pub(crate) enum Filter<'a> {
    /// Taps consecutive in memory: a strided matrix.
    Strided(StridedMatrix<'a, f32>),
    /// Any filter layout and mode: element (tap t, channel k) at `base + k·ks + woff[t]`.
    Table {
        w: &'a [f32],
        base: usize,
        ks: usize,
        taps: &'a [Tap],
    },
    /// Prepared: the engine's panels, cut into depth blocks (see [`prepare`]).
    Packed(PackedFilter<'a>),
}

impl Filter<'_> {
    /// Filter element (tap t, channel k).
    #[inline]
    fn at(&self, t: usize, k: usize) -> f32 {
        match self {
            Filter::Strided(_) => unreachable!("strided filters pack themselves"),
            Filter::Table { w, base, ks, taps } => w[base + k * ks + taps[t].woff],
            Filter::Packed(p) => p.at(t, k),
        }
    }

    /// Packs channels `k0 .. k0 + nk` (zero beyond) of taps `t0 .. t0 + kt` as panels of
    /// `width` channels: element (t, k) at panel `(k − k0) / width`, `(t − t0)·width +
    /// (k − k0) % width`.
    fn pack_generic(
        &self,
        t0: usize,
        kt: usize,
        k0: usize,
        nk: usize,
        width: usize,
        dst: &mut [f32],
    ) {
        for (q, panel) in dst.chunks_exact_mut(kt * width).enumerate() {
            let valid = width.min(nk - q * width);
            for (i, row) in panel.chunks_exact_mut(width).enumerate() {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = if j < valid {
                        self.at(t0 + i, k0 + q * width + j)
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

impl PackA for Filter<'_> {
    fn pack_a(
        &self,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        match self {
            Filter::Strided(m) => m.pack_a(i0, mc, p0, kc, mr, dst),
            _ => {
                self.pack_generic(p0, kc, i0, mc, mr, dst);
                Ok(())
            }
        }
    }
    fn in_place(&self) -> Option<(&[f32], usize)> {
        match self {
            Filter::Strided(m) => m.in_place(),
            _ => None,
        }
    }
    fn prepacked_a(&self, i0: usize, mc: usize, p0: usize, kc: usize, mr: usize) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) if p.format == PackFormat::F32Panels => p.panels(p0, kc, i0, mc, mr),
            _ => None,
        }
    }
    fn prepacked_pairs_a(
        &self,
        format: PackFormat,
        i0: usize,
        mc: usize,
        p0: usize,
        kc: usize,
        mr: usize,
    ) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) if format.is_bf16() && p.format == format => {
                p.panels(p0, kc, i0, mc, mr)
            }
            _ => None,
        }
    }
}

impl PackB for Filter<'_> {
    fn pack_b(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        match self {
            Filter::Strided(m) => m.pack_b(p0, kc, j0, nc, nr, dst),
            _ => {
                self.pack_generic(p0, kc, j0, nc, nr, dst);
                Ok(())
            }
        }
    }
    fn prepacked_b(&self, p0: usize, kc: usize, j0: usize, nc: usize, nr: usize) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) if p.format == PackFormat::F32Panels => p.panels(p0, kc, j0, nc, nr),
            _ => None,
        }
    }
    fn prepacked_pairs_b(
        &self,
        format: PackFormat,
        p0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
    ) -> Option<&[f32]> {
        match self {
            Filter::Packed(p) if format.is_bf16() && p.format == format => {
                p.panels(p0, kc, j0, nc, nr)
            }
            _ => None,
        }
    }
}

/// One group's prepared filter: for each depth block of `kcb` taps (the last one shorter),
/// `ceil(channels / width)` panels of `(block depth) × width`, channels past the end zero;
/// in f32, or rounded into the bf16 `format` of the kernel family that reads them (for
/// pairs, each panel's pair steps at its start), on the engine's B side (`b_side`, the
/// frame of positions) or its A side.
pub(crate) struct PackedFilter<'a> {
    data: &'a [f32],
    width: usize,
    kcb: usize,
    depth: usize,
    channels: usize,
    format: PackFormat,
    b_side: bool,
}

impl PackedFilter<'_> {
    fn padded(&self) -> usize {
        self.channels.div_ceil(self.width) * self.width
    }

    /// The panels the engine asks for, when they are cut as these were.
    fn panels(&self, t0: usize, kt: usize, k0: usize, nk: usize, width: usize) -> Option<&[f32]> {
        let fits = width == self.width
            && t0.is_multiple_of(self.kcb)
            && kt == self.kcb.min(self.depth - t0)
            && k0.is_multiple_of(width)
            && k0 + nk <= self.channels;
        fits.then(|| {
            let off = t0 * self.padded() + k0 / width * kt * width;
            &self.data[off..off + nk.div_ceil(width) * width * kt]
        })
    }

    /// Element (tap t, channel k) (for pairs, its bf16 value).
    fn at(&self, t: usize, k: usize) -> f32 {
        let (b0, d) = (t / self.kcb * self.kcb, t % self.kcb);
        let kt = self.kcb.min(self.depth - b0);
        let panel = b0 * self.padded() + k / self.width * kt * self.width;
        let j = k % self.width;
        let (slot, high) = match self.format {
            PackFormat::F32Panels => return self.data[panel + d * self.width + j],
            // Pair step d / 2 holds depth d in its low half when d is even.
            PackFormat::Bf16Pairs => (d / 2 * self.width + j, d % 2 == 1),
            PackFormat::AmxTiles => gemm::amx_slot(d, j, self.width, self.b_side),
        };
        let bits = self.data[panel + slot].to_bits();
        let half = if high { bits >> 16 } else { bits & 0xffff };
        f32::from_bits(half << 16)
    }
}

impl Geometry {
    /// Group g's plain filter as the engine operand of the frame.
    pub fn filter<'a>(&'a self, w: &'a [f32], g: usize, features: Features) -> Filter<'a> {
        let base = g * self.kg * self.ws[0];
        if self.filter_contiguous {
            let (k, ks) = (self.depth, self.ws[0]);
            let inside = "inside w: checked against the descriptor";
            match self.frame {
                Frame::Positions => Filter::Strided(
                    StridedMatrix::new(&w[base..], k, self.kg, 1, ks)
                        .expect(inside)
                        .for_features(features),
                ),
                Frame::Channels => Filter::Strided(
                    StridedMatrix::new(&w[base..], self.kg, k, ks, 1)
                        .expect(inside)
                        .for_features(features),
                ),
            }
        } else {
            Filter::Table {
                w,
                base,
                ks: self.ws[0],
                taps: &self.taps,
            }
        }
    }

    /// Group g's prepared filter, made by [`Geometry::prepare`], for a call in `ctx`.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `prepared` when the data was not made by `prepare` for a
    /// problem of this shape, or holds bf16 pairs and the call computes in strict f32.
    pub fn prepared_filter<'a>(
        &self,
        data: &'a [f32],
        g: usize,
        ctx: &ExecContext<'_>,
    ) -> Result<Filter<'a>> {
        let bad = || Error::bad("prepared", "data", "not made by this algorithm's prepare");
        if data.len() < PREPARED_HEADER || data[0] != PREPARED_MAGIC {
            return Err(bad());
        }
        let format = stored_format(data[4], ctx)?;
        let (width, kcb) = (data[1] as usize, data[2] as usize);
        let frame = if data[3] == 0.0 {
            Frame::Positions
        } else {
            Frame::Channels
        };
        if width == 0 || kcb == 0 || frame != self.frame {
            return Err(bad());
        }
        let per_group = self.depth * self.kg.div_ceil(width) * width;
        if data.len() != PREPARED_HEADER + self.groups * per_group {
            return Err(bad());
        }
        let start = PREPARED_HEADER + g * per_group;
        Ok(Filter::Packed(PackedFilter {
            data: &data[start..start + per_group],
            width,
            kcb,
            depth: self.depth,
            channels: self.kg,
            format,
            b_side: frame == Frame::Positions,
        }))
    }

    /// The filter packed once into the engine's panels for the kernel family GEMM runs f32
    /// operands on in `ctx` (in bf16 pairs where that family reads pairs): a header, then
    /// every group's panels.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the buffer cannot be allocated.
    pub fn prepare(&self, w: &[f32], ctx: &ExecContext<'_>) -> Result<Vec<f32>> {
        let (width, _) = self.panel_layout(ctx);
        let len = PREPARED_HEADER + self.groups * self.depth * self.kg.div_ceil(width) * width;
        let mut data = crate::alloc::try_vec(len, 0.0, "packed filter")?;
        self.prepare_into(w, ctx, &mut data)?;
        Ok(data)
    }

    /// Most floats [`Geometry::prepare_into`] writes, whatever the kernel family.
    pub fn prepared_len_bound(&self) -> usize {
        self.groups
            .saturating_mul(self.depth)
            .saturating_mul(self.kg.saturating_add(MAX_PANEL_WIDTH))
            .saturating_add(PREPARED_HEADER)
    }

    /// The panel width and depth block the filter is packed with for `ctx`.
    fn panel_layout(&self, ctx: &ExecContext<'_>) -> (usize, usize) {
        let (bl, _, _) = gemm::engine_format(ctx, self.depth, self.frame == Frame::Channels);
        let width = match self.frame {
            Frame::Positions => bl.nr,
            Frame::Channels => bl.mr,
        };
        (width, gemm::depth_block(self.depth, bl.kc))
    }

    /// [`Geometry::prepare`] into `data` (at least [`Geometry::prepared_len_bound`] floats,
    /// zero or not): a call packing the filter once for all its blocks (a workspace, not a
    /// user's prepared weights). Returns the floats written, which
    /// [`Geometry::prepared_filter`] reads.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] when `data` is too short; those of the packers.
    pub fn prepare_into(
        &self,
        w: &[f32],
        ctx: &ExecContext<'_>,
        data: &mut [f32],
    ) -> Result<usize> {
        let features = ctx.features;
        let b_side = self.frame == Frame::Positions;
        let (_, format, to_pairs) = gemm::engine_format(ctx, self.depth, !b_side);
        let (width, kcb) = self.panel_layout(ctx);
        let padded = self.kg.div_ceil(width) * width;
        let len = PREPARED_HEADER + self.groups * self.depth * padded;
        let Some(data) = data.get_mut(..len) else {
            return Err(Error::BufferTooSmall {
                field: "workspace (the packed filter)".into(),
                needed: len,
                got: data.len(),
            });
        };
        data[..PREPARED_HEADER].copy_from_slice(&[
            PREPARED_MAGIC,
            width as f32,
            kcb as f32,
            if self.frame == Frame::Positions {
                0.0
            } else {
                1.0
            },
            f32::from(format.code()),
        ]);
        for (g, dst) in data[PREPARED_HEADER..]
            .chunks_exact_mut(self.depth * padded)
            .enumerate()
        {
            let f = self.filter(w, g, features);
            let shape = Panels {
                depth: self.depth,
                channels: self.kg,
                width,
                kcb,
            };
            // Panels past the channels hold zeros (the packers write every element).
            shape.pack(ctx, to_pairs, dst, |k0, nk, t0, kt, out| match self.frame {
                Frame::Positions => f.pack_b(t0, kt, k0, nk, width, out),
                Frame::Channels => f.pack_a(k0, nk, t0, kt, width, out),
            })?;
        }
        Ok(len)
    }
}

/// An operand's panels: `channels` cut into panels `width` wide, the depth into blocks of
/// `kcb`; depth block t0's panels from `t0·padded`, each `kt·width` floats.
struct Panels {
    depth: usize,
    channels: usize,
    width: usize,
    kcb: usize,
}

impl Panels {
    /// Fills `data` (exactly the panels) by `pack(k0, nk, t0, kt, dst)`, which writes the
    /// panels of channels `k0 .. k0 + nk` and depths `t0 .. t0 + kt` into `dst`, then
    /// converts them by `to_pairs` where the family reads bf16 pairs. Items of a depth block
    /// and a run of panels each, disjoint parts of `data`, on the context's threads.
    fn pack(
        &self,
        ctx: &ExecContext<'_>,
        to_pairs: Option<gemm::PairsFn>,
        data: &mut [f32],
        pack: impl Fn(usize, usize, usize, usize, &mut [f32]) -> Result<()> + Sync,
    ) -> Result<()> {
        let Panels {
            depth,
            channels,
            width,
            kcb,
        } = *self;
        let padded = channels.div_ceil(width) * width;
        debug_assert_eq!(data.len(), depth * padded);
        let panels = padded / width;
        let per = panels.div_ceil(2 * ctx.threads.max(1)).max(1);
        let runs = panels.div_ceil(per);
        let blocks = depth.div_ceil(kcb);
        let out = SharedOut::new(data);
        try_for_each(ctx, blocks * runs, |item| {
            let (t0, q) = (item / runs * kcb, item % runs);
            let kt = kcb.min(depth - t0);
            let k0 = q * per * width;
            let nk = (per * width).min(channels - k0);
            let start = t0 * padded + k0 * kt;
            let n = nk.div_ceil(width) * width * kt;
            // SAFETY: item (block, run) covers depth block t0's panels of channels k0 ..
            // k0 + nk: `n` floats from `start`, inside `data` and touched by no other item.
            let dst = unsafe { out.slice_mut(start, n) };
            pack(k0, nk, t0, kt, dst)?;
            if let Some(convert) = to_pairs {
                for panel in dst.chunks_exact_mut(kt * width) {
                    // SAFETY: `engine_format` gives the conversion of a family the context's
                    // features run (`kernel_set_for` intersects them with the detected
                    // ones); the panel is `kt·width` floats.
                    unsafe { convert(panel.as_mut_ptr(), width, kt) };
                }
            }
            Ok(())
        })
    }
}

/// The widest register-tile side of any kernel family (AVX-512's and AMX's 32 rows): a
/// bound on the panel padding of operands packed once.
pub(crate) const MAX_PANEL_WIDTH: usize = 32;

/// Most output positions per image at which the GEMM algorithms pack their filter once for
/// a batch: on small images packing it for each image's GEMM weighs as much as the products
/// (MobileNet's 1024-channel 1x1 layer at 7x7: a third of its time).
pub(crate) const PACK_ONCE_POSITIONS: usize = 1024;

/// Floats [`pack_a_once`] may need for an `m × depth` A operand.
pub(crate) fn packed_a_len_bound(m: usize, depth: usize) -> Option<usize> {
    m.checked_add(MAX_PANEL_WIDTH)?.checked_mul(depth)
}

/// The engine's A operand `a` (`m × depth`) packed once into `buf` (at least
/// [`packed_a_len_bound`] floats) as the engine reads it in `ctx`, for the products that
/// share it (one per image), which then read its panels in place.
///
/// # Errors
/// [`Error::BufferTooSmall`] when `buf` is too short; those of the packer.
pub(crate) fn pack_a_once<'a>(
    ctx: &ExecContext<'_>,
    a: &dyn PackA,
    m: usize,
    depth: usize,
    buf: &'a mut [f32],
) -> Result<PackedFilter<'a>> {
    let (bl, format, to_pairs) = gemm::engine_format(ctx, depth, true);
    let (width, kcb) = (bl.mr, gemm::depth_block(depth, bl.kc));
    let len = depth * m.div_ceil(width) * width;
    if width > MAX_PANEL_WIDTH || len > buf.len() {
        return Err(Error::BufferTooSmall {
            field: "workspace (the packed operand)".into(),
            needed: len,
            got: buf.len(),
        });
    }
    let shape = Panels {
        depth,
        channels: m,
        width,
        kcb,
    };
    shape.pack(ctx, to_pairs, &mut buf[..len], |i0, rows, t0, kt, dst| {
        a.pack_a(i0, rows, t0, kt, width, dst)
    })?;
    Ok(a_side_panels(&buf[..len], (width, kcb), depth, m, format))
}

/// The A operand (`m × depth`) whose panels of `width` rows in depth blocks of `kcb` are
/// `data`.
fn a_side_panels(
    data: &[f32],
    (width, kcb): (usize, usize),
    depth: usize,
    m: usize,
    format: PackFormat,
) -> PackedFilter<'_> {
    PackedFilter {
        data,
        width,
        kcb,
        depth,
        channels: m,
        format,
        b_side: false,
    }
}

/// The panel format recorded in prepared weights as `code` ([`PackFormat`]'s code), checked
/// against the call: bf16 pairs are refused in a strict call.
///
/// # Errors
/// [`Error::BadValue`] for a code no packing wrote, and for bf16 pairs under strict math.
fn stored_format(code: f32, ctx: &ExecContext<'_>) -> Result<PackFormat> {
    let format = (code.fract() == 0.0 && (0.0..=255.0).contains(&code))
        .then(|| PackFormat::from_code(code as u8))
        .flatten()
        .ok_or_else(|| Error::bad("prepared", "data", "not made by this algorithm's prepare"))?;
    if format.is_bf16() && ctx.math == MathMode::Strict {
        return Err(Error::bad(
            "prepared",
            "bf16 pairs",
            "these weights were rounded to bf16 (prepared under allow_bf16 or for bf16 \
             tensors); this call computes in strict f32",
        ));
    }
    Ok(format)
}

/// Floats before an operand stored by [`prepare_a_panels`]: its panel width, depth block and
/// format code.
const A_PANELS_HEADER: usize = 3;

/// Floats [`prepare_a_panels`] writes for an `m × depth` operand, whatever the instruction
/// set (its header and [`packed_a_len_bound`]); `None` on overflow.
pub(crate) fn a_panels_len(m: usize, depth: usize) -> Option<usize> {
    packed_a_len_bound(m, depth)?.checked_add(A_PANELS_HEADER)
}

/// An A operand `a` (`m × depth`) stored as prepared weights: the engine's panels as
/// [`pack_a_once`] packs them in `ctx`, after a header recording their layout, into `dst`
/// (exactly [`a_panels_len`] floats; the tail past the panels is left as it is).
///
/// # Errors
/// [`Error::BufferTooSmall`] when `dst` is too short; those of the packer.
pub(crate) fn prepare_a_panels(
    ctx: &ExecContext<'_>,
    a: &dyn PackA,
    m: usize,
    depth: usize,
    dst: &mut [f32],
) -> Result<()> {
    if dst.len() < A_PANELS_HEADER {
        return Err(Error::BufferTooSmall {
            field: "prepared weights (the packed operand)".into(),
            needed: A_PANELS_HEADER,
            got: dst.len(),
        });
    }
    let (head, body) = dst.split_at_mut(A_PANELS_HEADER);
    let p = pack_a_once(ctx, a, m, depth, body)?;
    head.copy_from_slice(&[p.width as f32, p.kcb as f32, f32::from(p.format.code())]);
    Ok(())
}

/// The `m × depth` operand [`prepare_a_panels`] stored in `data`: read in place by the engine
/// where its blocking in `ctx` is the one it was packed for, repacked from the panels
/// otherwise (another instruction-set cap).
///
/// # Errors
/// [`Error::BadValue`] for a header no packing wrote or data too short for it, and for bf16
/// pairs in a strict call.
pub(crate) fn prepared_a_panels<'a>(
    data: &'a [f32],
    m: usize,
    depth: usize,
    ctx: &ExecContext<'_>,
) -> Result<Filter<'a>> {
    let bad = || Error::bad("prepared", "data", "not made by this algorithm's prepare");
    let whole = |v: f32, hi: f32| v.fract() == 0.0 && (1.0..=hi).contains(&v);
    let [w, kcb, code] = match data.get(..A_PANELS_HEADER) {
        Some(&[w, kcb, code]) => [w, kcb, code],
        _ => return Err(bad()),
    };
    if !whole(w, MAX_PANEL_WIDTH as f32) || !whole(kcb, depth.max(1) as f32) {
        return Err(bad());
    }
    let format = stored_format(code, ctx)?;
    let (width, kcb) = (w as usize, kcb as usize);
    let len = depth * m.div_ceil(width) * width;
    let panels = data
        .get(A_PANELS_HEADER..A_PANELS_HEADER + len)
        .ok_or_else(bad)?;
    Ok(Filter::Packed(a_side_panels(
        panels,
        (width, kcb),
        depth,
        m,
        format,
    )))
}
