//! The tiling (overlap-save) driver: tiles in passes, the forward transforms of the inputs,
//! the products, the inverse transforms of the outputs with the epilogue.

use rustfft::num_complex::Complex32;

use crate::conv::{AlgoWeights, EpilogueArgs, ExecContext};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::Carve;

use super::filter::PlainFilter;
use super::plan::{par_items, Lines, Plans, Spectral, BLOCK, LANES};
use super::products::{WSource, WView};

impl Spectral {
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
