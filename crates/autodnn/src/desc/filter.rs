use serde::{Deserialize, Serialize};

use super::tensor::{check_bytes, DataType};
use crate::error::{checked_product, Error, Result};

/// Memory order of a packed filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterLayout {
    /// Output channels, input channels per group, rows, columns (PyTorch's and ONNX's OIHW).
    Kcrs,
    /// Output channels, rows, columns, input channels per group (pairs with NHWC).
    Krsc,
}

impl FilterLayout {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            FilterLayout::Kcrs => "kcrs",
            FilterLayout::Krsc => "krsc",
        }
    }
}

/// A convolution filter: K output channels, C input channels *per group*, R rows, S columns.
///
/// # Examples
/// ```
/// use autodnn::{DataType, FilterDesc, FilterLayout};
/// let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [64, 3, 7, 7])?;
/// assert_eq!(w.strides(), [3 * 49, 49, 7, 1]);
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FilterDesc {
    dtype: DataType,
    layout: FilterLayout,
    dims: [usize; 4],
}

impl FilterDesc {
    /// A packed filter; `dims` are (K, C per group, R, S) whatever the layout.
    ///
    /// # Errors
    /// [`Error::BadParam`] for a zero dimension, [`Error::Overflow`] when its byte size does
    /// not fit in `isize`.
    pub fn new(dtype: DataType, layout: FilterLayout, dims: [usize; 4]) -> Result<FilterDesc> {
        const NAMES: [&str; 4] = ["k", "c", "r", "s"];
        for (i, &d) in dims.iter().enumerate() {
            if d == 0 {
                return Err(Error::bad(
                    format!("w.{}", NAMES[i]),
                    d,
                    "dimensions must be at least 1",
                ));
            }
        }
        let elements = checked_product("w elements", &dims)?;
        check_bytes("w", elements, dtype)?;
        Ok(FilterDesc {
            dtype,
            layout,
            dims,
        })
    }
    /// Element type.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }
    /// The same layout and dimensions with elements of `dtype`.
    pub fn with_dtype(&self, dtype: DataType) -> FilterDesc {
        FilterDesc { dtype, ..*self }
    }
    /// Memory order.
    pub fn layout(&self) -> FilterLayout {
        self.layout
    }
    /// (K, C per group, R, S).
    pub fn dims(&self) -> [usize; 4] {
        self.dims
    }
    /// Output channels.
    pub fn k(&self) -> usize {
        self.dims[0]
    }
    /// Input channels per group.
    pub fn c(&self) -> usize {
        self.dims[1]
    }
    /// Kernel rows.
    pub fn r(&self) -> usize {
        self.dims[2]
    }
    /// Kernel columns.
    pub fn s(&self) -> usize {
        self.dims[3]
    }
    /// Strides in elements, in (K, C, R, S) order.
    pub fn strides(&self) -> [usize; 4] {
        let [_, c, r, s] = self.dims;
        match self.layout {
            FilterLayout::Kcrs => [c * r * s, r * s, s, 1],
            FilterLayout::Krsc => [r * s * c, 1, s * c, c],
        }
    }
    /// Number of elements (= the span: filters are always packed).
    pub fn elements(&self) -> usize {
        self.dims.iter().product()
    }
    /// Offset of element (k, c, r, s).
    #[inline]
    pub fn offset(&self, k: usize, c: usize, r: usize, s: usize) -> usize {
        let st = self.strides();
        k * st[0] + c * st[1] + r * st[2] + s * st[3]
    }
    /// The offsets of all elements, in logical (k, c, r, s) order whatever the layout.
    ///
    /// ```
    /// use autodnn::{DataType, FilterDesc, FilterLayout};
    /// let f = FilterDesc::new(DataType::F32, FilterLayout::Krsc, [1, 2, 1, 2]).unwrap();
    /// assert_eq!(f.offsets().collect::<Vec<_>>(), [0, 2, 1, 3]);
    /// ```
    pub fn offsets(&self) -> impl Iterator<Item = usize> {
        super::offsets_of(self.dims, self.strides())
    }
}
