use serde::{Deserialize, Serialize};

use crate::error::{checked_product, Error, Result};

/// Element type of a tensor.
///
/// Only [`DataType::F32`] has kernels today; descriptors of the other types can be made (their
/// storage types are [`half::f16`] and [`half::bf16`]) and running them gives
/// [`Error::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16 ([`half::f16`]).
    F16,
    /// bfloat16 ([`half::bf16`]).
    Bf16,
}

impl DataType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::F32 => 4,
            DataType::F16 | DataType::Bf16 => 2,
        }
    }

    /// Lower-case name (`f32`, `f16`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
        }
    }

    /// Every type, f32 first.
    pub const ALL: [DataType; 3] = [DataType::F32, DataType::Bf16, DataType::F16];

    /// The type [`DataType::name`] names (trimmed, any case); `None` for any other text.
    ///
    /// ```
    /// use autodnn::DataType;
    /// assert_eq!(DataType::parse(" BF16"), Some(DataType::Bf16));
    /// assert_eq!(DataType::parse("f64"), None);
    /// ```
    pub fn parse(s: &str) -> Option<DataType> {
        let s = s.trim().to_ascii_lowercase();
        DataType::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// Memory order of a packed 4-D activation tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Batch, channels, height, width (width fastest).
    Nchw,
    /// Batch, height, width, channels (channels fastest).
    Nhwc,
}

impl Layout {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
        }
    }
}

/// A 4-D activation tensor: dimensions in (N, C, H, W) order and a stride per dimension, in
/// elements.
///
/// Strides are derived from a [`Layout`] or given explicitly (for padded rows or views into a
/// larger buffer); explicit strides must not make two elements share memory.
///
/// # Examples
/// ```
/// use autodnn::{DataType, Layout, TensorDesc};
/// let x = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 64, 56, 56])?;
/// assert_eq!(x.strides(), [56 * 56 * 64, 1, 56 * 64, 64]);
/// assert_eq!(x.span(), 64 * 56 * 56);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TensorDesc {
    dtype: DataType,
    dims: [usize; 4],
    strides: [usize; 4],
    span: usize,
}

const DIM_NAMES: [&str; 4] = ["n", "c", "h", "w"];

impl TensorDesc {
    /// A packed tensor of the given layout; `dims` are (N, C, H, W) whatever the layout.
    ///
    /// # Errors
    /// [`Error::BadParam`] for a zero dimension, [`Error::Overflow`] when the tensor's byte
    /// size does not fit in `isize`.
    pub fn new(dtype: DataType, layout: Layout, dims: [usize; 4]) -> Result<TensorDesc> {
        check_dims("tensor", &dims)?;
        let [_, c, h, w] = dims;
        let strides = match layout {
            Layout::Nchw => [
                checked_product("tensor.stride_n", &[c, h, w])?,
                checked_product("tensor.stride_c", &[h, w])?,
                w,
                1,
            ],
            Layout::Nhwc => [
                checked_product("tensor.stride_n", &[h, w, c])?,
                1,
                checked_product("tensor.stride_h", &[w, c])?,
                c,
            ],
        };
        TensorDesc::with_strides(dtype, dims, strides)
    }

    /// A tensor with explicit strides (in elements), dims and strides both in (N, C, H, W)
    /// order.
    ///
    /// # Errors
    /// [`Error::BadParam`] for a zero dimension or stride, or for strides under which two
    /// elements would share memory; [`Error::Overflow`] when the span does not fit.
    pub fn with_strides(
        dtype: DataType,
        dims: [usize; 4],
        strides: [usize; 4],
    ) -> Result<TensorDesc> {
        check_dims("tensor", &dims)?;
        for (i, &s) in strides.iter().enumerate() {
            if s == 0 {
                return Err(Error::bad(
                    format!("tensor.stride_{}", DIM_NAMES[i]),
                    s,
                    "strides must be at least 1",
                ));
            }
        }
        // No aliasing: sorted by stride, each dimension must start past the end of the ones
        // below it. Dimensions of extent 1 never step, so they cannot alias.
        let mut order: Vec<usize> = (0..4).filter(|&i| dims[i] > 1).collect();
        order.sort_by_key(|&i| (strides[i], dims[i]));
        let mut reach = 1usize; // elements covered by the dimensions seen so far
        for &i in &order {
            if strides[i] < reach {
                return Err(Error::bad(
                    format!("tensor.stride_{}", DIM_NAMES[i]),
                    strides[i],
                    format!("overlaps the dimensions below it, which span {reach} elements"),
                ));
            }
            reach = strides[i]
                .checked_mul(dims[i])
                .ok_or_else(|| Error::overflow("tensor span", "stride times dimension"))?;
        }
        let mut span = 1usize;
        for i in 0..4 {
            let step = (dims[i] - 1)
                .checked_mul(strides[i])
                .ok_or_else(|| Error::overflow("tensor span", "dimension times stride"))?;
            span = span
                .checked_add(step)
                .ok_or_else(|| Error::overflow("tensor span", "sum of extents"))?;
        }
        check_bytes("tensor", span, dtype)?;
        Ok(TensorDesc {
            dtype,
            dims,
            strides,
            span,
        })
    }

    /// Element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }
    /// The same dimensions and strides with elements of `dtype` (strides count elements, so
    /// they stay valid).
    pub fn with_dtype(&self, dtype: DataType) -> TensorDesc {
        TensorDesc { dtype, ..*self }
    }
    /// (N, C, H, W).
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }
    /// Strides in elements, in (N, C, H, W) order.
    pub fn strides(&self) -> [usize; 4] {
        self.strides
    }
    /// Batch size.
    pub fn n(&self) -> usize {
        self.dims[0]
    }
    /// Channels.
    pub fn c(&self) -> usize {
        self.dims[1]
    }
    /// Height.
    pub fn h(&self) -> usize {
        self.dims[2]
    }
    /// Width.
    pub fn w(&self) -> usize {
        self.dims[3]
    }
    /// The packed layout these strides describe, if any.
    pub fn layout(&self) -> Option<Layout> {
        [Layout::Nchw, Layout::Nhwc].into_iter().find(|&l| {
            TensorDesc::new(self.dtype, l, self.dims)
                .map(|t| t.strides == self.strides)
                .unwrap_or(false)
        })
    }
    /// Number of elements (N·C·H·W).
    pub fn elements(&self) -> usize {
        // Cannot overflow: bounded by the span, which was checked.
        self.dims.iter().product()
    }
    /// Elements a buffer must hold: one past the offset of the last element.
    pub fn span(&self) -> usize {
        self.span
    }
    /// Offset of element (n, c, h, w), in elements. Indices must be in range.
    #[inline]
    pub fn offset(&self, n: usize, c: usize, h: usize, w: usize) -> usize {
        n * self.strides[0] + c * self.strides[1] + h * self.strides[2] + w * self.strides[3]
    }
    /// The offsets of all elements, in logical (n, c, h, w) order whatever the layout: the
    /// i-th is the offset of the i-th element of the NCHW-packed tensor.
    ///
    /// ```
    /// use autodnn::{DataType, Layout, TensorDesc};
    /// let t = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 2, 1, 3]).unwrap();
    /// assert_eq!(t.offsets().collect::<Vec<_>>(), [0, 2, 4, 1, 3, 5]);
    /// ```
    pub fn offsets(&self) -> impl Iterator<Item = usize> {
        super::offsets_of(self.dims, self.strides)
    }
    /// The same tensor with a different batch size.
    pub fn with_batch(&self, n: usize) -> Result<TensorDesc> {
        let mut dims = self.dims;
        dims[0] = n;
        match self.layout() {
            Some(l) => TensorDesc::new(self.dtype, l, dims),
            None => TensorDesc::with_strides(self.dtype, dims, self.strides),
        }
    }
}

pub(crate) fn check_dims(what: &str, dims: &[usize; 4]) -> Result<()> {
    for (i, &d) in dims.iter().enumerate() {
        if d == 0 {
            return Err(Error::bad(
                format!("{what}.{}", DIM_NAMES[i]),
                d,
                "dimensions must be at least 1",
            ));
        }
    }
    Ok(())
}

pub(crate) fn check_bytes(what: &str, elements: usize, dtype: DataType) -> Result<()> {
    match elements.checked_mul(dtype.size()) {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(Error::overflow(
            format!("{what} bytes"),
            format!("{elements} elements of {}", dtype.name()),
        )),
    }
}
