//! Epilogues: work applied to each output tile right after its last micro-kernel call, while
//! the tile is still in L1, so that GEMM (or convolution) + bias + residual + activation
//! costs one pass over the output instead of one per operation.
//!
//! The order is fixed: `C = act(alpha·op(A)·op(B) + beta·C + bias + residual)`, which is
//! what a convolution layer with a folded batch norm, a skip connection and a ReLU computes.

use super::kernels::TilePost;
use crate::error::{Error, Result};

pub use crate::activation::Activation;

/// A bias vector added to every row or every column of C.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bias<'a> {
    /// `bias[i]` added to row i (length at least m): a per-output-channel bias when C's rows
    /// are channels.
    PerRow(&'a [f32]),
    /// `bias[j]` added to column j (length at least n).
    PerCol(&'a [f32]),
}

/// A matrix added to the result (a skip connection), m × n with its own strides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Residual<'a> {
    /// The values.
    pub data: &'a [f32],
    /// Row stride in elements.
    pub row_stride: usize,
    /// Column stride in elements.
    pub col_stride: usize,
}

/// What to apply to the output after the product: bias, residual, activation.
///
/// # Examples
/// ```
/// use autodnn::gemm::{Activation, Epilogue, GemmDesc};
/// let handle = autodnn::Handle::with_threads(1)?;
/// let d = GemmDesc::new(2, 2, 1);
/// let (a, b) = ([1.0f32, -1.0], [1.0f32, 2.0]);
/// let bias = [0.5f32, 0.5];
/// let epi = Epilogue::new().with_bias_per_row(&bias).with_activation(Activation::Relu);
/// let mut c = [0.0f32; 4];
/// handle.gemm_with_epilogue(&d, 1.0, &a, &b, 0.0, &mut c, &epi)?;
/// assert_eq!(c, [1.5, 2.5, 0.0, 0.0]);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Epilogue<'a> {
    /// Bias added before the residual and the activation.
    pub bias: Option<Bias<'a>>,
    /// Matrix added after the bias.
    pub residual: Option<Residual<'a>>,
    /// Applied last.
    pub activation: Activation,
}

impl<'a> Epilogue<'a> {
    /// No bias, no residual, identity activation.
    pub fn new() -> Epilogue<'a> {
        Epilogue::default()
    }
    /// Adds `bias[i]` to row i.
    pub fn with_bias_per_row(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(Bias::PerRow(bias));
        self
    }
    /// Adds `bias[j]` to column j.
    pub fn with_bias_per_col(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(Bias::PerCol(bias));
        self
    }
    /// Adds the m × n matrix `data` (element (i, j) at `i·row_stride + j·col_stride`).
    pub fn with_residual(mut self, data: &'a [f32], row_stride: usize, col_stride: usize) -> Self {
        self.residual = Some(Residual {
            data,
            row_stride,
            col_stride,
        });
        self
    }
    /// Sets the activation.
    pub fn with_activation(mut self, act: Activation) -> Self {
        self.activation = act;
        self
    }
    /// True when applying it changes nothing.
    pub fn is_identity(&self) -> bool {
        self.bias.is_none() && self.residual.is_none() && self.activation == Activation::None
    }

    /// Checks lengths against an m × n output and turns it into the engine's form.
    pub(crate) fn for_output(&self, m: usize, n: usize) -> Result<FrameEpilogue<'a>> {
        let mut f = FrameEpilogue {
            row_bias: None,
            col_bias: None,
            residual: None,
            act: self.activation,
        };
        match self.bias {
            Some(Bias::PerRow(b)) => {
                need("epilogue.bias", m, b.len())?;
                f.row_bias = Some(&b[..m]);
            }
            Some(Bias::PerCol(b)) => {
                need("epilogue.bias", n, b.len())?;
                f.col_bias = Some(&b[..n]);
            }
            None => {}
        }
        if let Some(r) = self.residual {
            let needed = super::desc::span(m, n, r.row_stride, r.col_stride).ok_or_else(|| {
                Error::overflow("epilogue.residual", "residual span exceeds usize")
            })?;
            need("epilogue.residual", needed, r.data.len())?;
            f.residual = Some((r.data, r.row_stride, r.col_stride));
        }
        Ok(f)
    }
}

fn need(field: &str, needed: usize, got: usize) -> Result<()> {
    if got < needed {
        return Err(Error::BufferTooSmall {
            field: field.into(),
            needed,
            got,
        });
    }
    Ok(())
}

/// An epilogue in the engine's frame (rows and columns as the loops see them), with every
/// slice checked to cover the output.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FrameEpilogue<'a> {
    /// One value per engine row.
    pub row_bias: Option<&'a [f32]>,
    /// One value per engine column.
    pub col_bias: Option<&'a [f32]>,
    /// Data, row stride, column stride (engine frame).
    pub residual: Option<(&'a [f32], usize, usize)>,
    /// Applied last.
    pub act: Activation,
}

impl FrameEpilogue<'_> {
    /// The same epilogue for the transposed output.
    pub fn transposed(self) -> Self {
        FrameEpilogue {
            row_bias: self.col_bias,
            col_bias: self.row_bias,
            residual: self.residual.map(|(d, rs, cs)| (d, cs, rs)),
            act: self.act,
        }
    }

    /// Whether a kernel family that [`KernelSet::fuses_epilogue`] can apply this epilogue in
    /// its store for an output of strides `rs_c`, `cs_c`: its activation is one the stores
    /// vectorise, and the residual is contiguous along the stores' vectors where they are
    /// vector stores.
    ///
    /// [`KernelSet::fuses_epilogue`]: super::kernels::KernelSet::fuses_epilogue
    pub fn fuses_in_store(&self, rs_c: usize, cs_c: usize) -> bool {
        let residual_fits = match self.residual {
            None => true,
            Some((_, rs, cs)) => {
                if rs_c == 1 {
                    rs == 1
                } else if cs_c == 1 {
                    cs == 1
                } else {
                    true
                }
            }
        };
        TilePost::vectorised(self.act) && residual_fits
    }

    /// The store's epilogue ([`TilePost`]) for the tile whose first element is (i0, j0).
    /// The slices were checked to cover the output, so the pointers stay inside them for
    /// every element of a tile of it.
    pub fn tile_post(&self, i0: usize, j0: usize) -> TilePost {
        let at = |d: &[f32], off: usize| d.as_ptr().wrapping_add(off);
        let (res, res_rs, res_cs) = match self.residual {
            Some((d, rs, cs)) => (at(d, i0 * rs + j0 * cs), rs, cs),
            None => (std::ptr::null(), 0, 0),
        };
        TilePost {
            row_bias: self.row_bias.map_or(std::ptr::null(), |b| at(b, i0)),
            col_bias: self.col_bias.map_or(std::ptr::null(), |b| at(b, j0)),
            res,
            res_rs,
            res_cs,
            act: Some(self.act),
        }
    }

    pub fn is_identity(&self) -> bool {
        self.row_bias.is_none()
            && self.col_bias.is_none()
            && self.residual.is_none()
            && self.act == Activation::None
    }

    /// Applies the epilogue to the `m × n` tile whose element (i, j) is output element
    /// (i0 + i, j0 + j); `col(j)` returns column j of the tile as a mutable strided view.
    /// Compiled inside each kernel family's `target_feature` wrapper, so the column loops
    /// vectorise for that family.
    ///
    /// The activation is matched once per tile, outside the loops: each common one (none,
    /// relu, clip) gets loops of its own in which `Activation::apply` folds to a constant
    /// variant, so that they vectorise (with the match inside, they ran element by element:
    /// the epilogue took more time than the products on MobileNet v2's 1x1 layers).
    #[inline(always)]
    pub fn apply_tile(&self, tile: &mut TileView<'_>, i0: usize, j0: usize) {
        match self.act {
            Activation::None => self.apply_tile_with(tile, i0, j0, |v| Activation::None.apply(v)),
            Activation::Relu => self.apply_tile_with(tile, i0, j0, |v| Activation::Relu.apply(v)),
            Activation::Clip { lo, hi } => {
                self.apply_tile_with(tile, i0, j0, move |v| Activation::Clip { lo, hi }.apply(v))
            }
            a => self.apply_tile_with(tile, i0, j0, move |v| a.apply(v)),
        }
    }

    /// [`FrameEpilogue::apply_tile`] with the activation `act`.
    #[inline(always)]
    fn apply_tile_with(
        &self,
        tile: &mut TileView<'_>,
        i0: usize,
        j0: usize,
        act: impl Fn(f32) -> f32 + Copy,
    ) {
        let (m, n) = (tile.m, tile.n);
        if tile.rs != 1 && tile.cs == 1 {
            // Rows contiguous (a tile the engine transposed into NCHW-like y): row by row,
            // so that the loops run along memory and vectorise.
            for i in 0..m {
                let rb = self.row_bias.map_or(0.0, |b| b[i0 + i]);
                let cb = self.col_bias.map(|b| &b[j0..j0 + n]);
                let res = self
                    .residual
                    .map(|(d, rs, cs)| (d, (i0 + i) * rs + j0 * cs, cs));
                apply_line::<false>(tile.row_mut(i), cb, rb, res, act);
            }
            return;
        }
        for j in 0..n {
            let cb = self.col_bias.map_or(0.0, |b| b[j0 + j]);
            let rb = self.row_bias.map(|b| &b[i0..i0 + m]);
            let res = self
                .residual
                .map(|(d, rs, cs)| (d, (i0 * rs + (j0 + j) * cs), rs));
            if tile.rs == 1 {
                apply_line::<true>(tile.col_mut(j), rb, cb, res, act);
            } else {
                for i in 0..m {
                    let b = rb.map_or(0.0, |rb| rb[i]);
                    let r = res.map_or(0.0, |(d, base, rs)| d[base + i * rs]);
                    let c = tile.get_mut(i, j);
                    *c = act(*c + b + cb + r);
                }
            }
        }
    }
}

/// The epilogue on one contiguous line of a tile (a column, or a row of a transposed tile):
/// `c = act(c + bias + residual)` where the bias is the line's own `scalar` and one value per
/// element from `per_elem`, added in the order the engine's frame gives them (row bias first:
/// `PER_ELEM_FIRST` for a column), so that either walk gives the same bits. `res` is the
/// residual's data, the line's first offset in it and its step along the line. One loop per
/// combination, so that each vectorises.
#[inline(always)]
fn apply_line<const PER_ELEM_FIRST: bool>(
    line: &mut [f32],
    per_elem: Option<&[f32]>,
    scalar: f32,
    res: Option<(&[f32], usize, usize)>,
    act: impl Fn(f32) -> f32 + Copy,
) {
    let add = |c: f32, b: f32| {
        if PER_ELEM_FIRST {
            c + b + scalar
        } else {
            c + scalar + b
        }
    };
    let n = line.len();
    match (per_elem, res) {
        (Some(pb), Some((d, base, 1))) => {
            for ((c, b), r) in line.iter_mut().zip(pb).zip(&d[base..base + n]) {
                *c = act(add(*c, *b) + *r);
            }
        }
        (None, Some((d, base, 1))) => {
            for (c, r) in line.iter_mut().zip(&d[base..base + n]) {
                *c = act(*c + scalar + *r);
            }
        }
        (Some(pb), None) => {
            for (c, b) in line.iter_mut().zip(pb) {
                *c = act(add(*c, *b));
            }
        }
        (None, None) => {
            for c in line.iter_mut() {
                *c = act(*c + scalar);
            }
        }
        (pb, Some((d, base, step))) => {
            for (k, c) in line.iter_mut().enumerate() {
                let b = pb.map_or(0.0, |pb| pb[k]);
                *c = act(add(*c, b) + d[base + k * step]);
            }
        }
    }
}

/// A mutable view of one output tile, handed out by the frame to one thread at a time.
pub(crate) struct TileView<'t> {
    pub(crate) ptr: *mut f32,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
    pub(crate) _tile: std::marker::PhantomData<&'t mut f32>,
}

impl TileView<'_> {
    /// Column j (requires rs == 1).
    #[inline(always)]
    fn col_mut(&mut self, j: usize) -> &mut [f32] {
        assert!(j < self.n && self.rs == 1);
        // SAFETY: a TileView is only made (in loops.rs) for a tile of a validated output
        // whose elements (i, j), i < m, j < n, lie inside the output buffer and belong to
        // this thread alone; with rs == 1 column j is the m contiguous elements at j·cs.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(j * self.cs), self.m) }
    }

    /// Row i (requires cs == 1).
    #[inline(always)]
    fn row_mut(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.m && self.cs == 1);
        // SAFETY: as for col_mut, with the roles of rows and columns exchanged: with cs == 1
        // row i is the n contiguous elements at i·rs, inside the tile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i * self.rs), self.n) }
    }

    #[inline(always)]
    fn get_mut(&mut self, i: usize, j: usize) -> &mut f32 {
        assert!(i < self.m && j < self.n);
        // SAFETY: as for col_mut: (i, j) is inside the tile, which is in bounds and exclusive.
        unsafe { &mut *self.ptr.add(i * self.rs + j * self.cs) }
    }
}
