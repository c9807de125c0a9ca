use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Whether the filter is applied as is (deep learning's "convolution") or flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConvMode {
    /// y\[oh, ow\] = Σ x\[oh·s + r·d - p\] · w\[r\]: what PyTorch, ONNX and cuDNN's default
    /// compute.
    #[default]
    CrossCorrelation,
    /// The mathematical convolution: the filter flipped in both spatial dimensions.
    Convolution,
}

/// Zero padding on each side of the image.
///
/// Top and left are at least 0. Bottom and right may be negative: trailing rows or columns of
/// the input that no window reaches, as benchdnn's problems and floor-rounded output sizes
/// produce. Padding may exceed the kernel (windows that see only zeros).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Padding {
    /// Rows of zeros above the image.
    pub top: i64,
    /// Rows below (negative: rows dropped).
    pub bottom: i64,
    /// Columns left of the image.
    pub left: i64,
    /// Columns right (negative: columns dropped).
    pub right: i64,
}

impl Padding {
    /// The same padding on both sides of each dimension.
    pub fn symmetric(h: i64, w: i64) -> Padding {
        Padding {
            top: h,
            bottom: h,
            left: w,
            right: w,
        }
    }
}

/// A 2-D convolution: padding, stride, dilation, groups and mode.
///
/// Dilation counts as in cuDNN and PyTorch: 1 is a dense kernel (benchdnn's problem strings
/// count from 0; [`crate::ProblemSpec`] converts).
///
/// # Examples
/// ```
/// use autodnn::{ConvDesc, ConvMode, Padding};
/// let conv = ConvDesc::new(Padding::symmetric(1, 1), [2, 2], [1, 1], 1, ConvMode::CrossCorrelation)?;
/// assert_eq!(conv.stride(), [2, 2]);
/// assert!(ConvDesc::new(Padding::default(), [0, 1], [1, 1], 1, ConvMode::CrossCorrelation).is_err());
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvDesc {
    padding: Padding,
    stride: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    mode: ConvMode,
}

impl Default for ConvDesc {
    /// No padding, stride 1, dense, one group, cross-correlation.
    fn default() -> Self {
        ConvDesc {
            padding: Padding::default(),
            stride: [1, 1],
            dilation: [1, 1],
            groups: 1,
            mode: ConvMode::CrossCorrelation,
        }
    }
}

/// Padding, strides and dilations beyond this are refused: they would only make the index
/// arithmetic of every algorithm harder to prove overflow-free.
const MAX_GEOMETRY: i64 = 1 << 31;

impl ConvDesc {
    /// A convolution descriptor; `stride` and `dilation` are (h, w).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming the field for a stride, dilation or group count of 0,
    /// negative top or left padding, or values of 2^31 and beyond.
    pub fn new(
        padding: Padding,
        stride: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        mode: ConvMode,
    ) -> Result<ConvDesc> {
        for (name, v) in [
            ("conv.pad_top", padding.top),
            ("conv.pad_left", padding.left),
        ] {
            if v < 0 {
                return Err(Error::bad(
                    name,
                    v,
                    "top and left padding must be at least 0",
                ));
            }
        }
        for (name, v) in [
            ("conv.pad_top", padding.top),
            ("conv.pad_bottom", padding.bottom),
            ("conv.pad_left", padding.left),
            ("conv.pad_right", padding.right),
        ] {
            if v.unsigned_abs() >= MAX_GEOMETRY as u64 {
                return Err(Error::bad(name, v, "padding must be below 2^31"));
            }
        }
        for (name, v) in [
            ("conv.stride_h", stride[0]),
            ("conv.stride_w", stride[1]),
            ("conv.dilation_h", dilation[0]),
            ("conv.dilation_w", dilation[1]),
            ("conv.groups", groups),
        ] {
            if v == 0 {
                return Err(Error::bad(name, v, "must be at least 1"));
            }
            if v as u64 >= MAX_GEOMETRY as u64 {
                return Err(Error::bad(name, v, "must be below 2^31"));
            }
        }
        Ok(ConvDesc {
            padding,
            stride,
            dilation,
            groups,
            mode,
        })
    }
    /// Padding per side.
    pub fn padding(&self) -> Padding {
        self.padding
    }
    /// (stride_h, stride_w).
    pub fn stride(&self) -> [usize; 2] {
        self.stride
    }
    /// (dilation_h, dilation_w); 1 is dense.
    pub fn dilation(&self) -> [usize; 2] {
        self.dilation
    }
    /// Number of groups; input and output channels are split into this many independent parts.
    pub fn groups(&self) -> usize {
        self.groups
    }
    /// Cross-correlation or convolution.
    pub fn mode(&self) -> ConvMode {
        self.mode
    }
    /// The same descriptor with another mode.
    pub fn with_mode(mut self, mode: ConvMode) -> ConvDesc {
        self.mode = mode;
        self
    }
}
