//! Pooling, forward and backward (cudnnPoolingForward / Backward): max, average with the
//! padding counted, average without it, and global average, over any window, stride and
//! padding per side, output size by floor or ceil, on tensors of any layout and strides.
//! y = alpha · pool(x) + beta · y and dx = alpha · pool_bwd(dy) + beta · dx ([`Blend`];
//! beta = 0 never reads the prior output).
//!
//! # Semantics
//! - **Output size** ([`PoolDesc::output_dims`]): o = ⌊(H + top + bottom − kh) / sh⌋ + 1, or
//!   with `ceil_mode` ⌈…⌉ + 1 less the last window when it would start at or past
//!   H + top (in the bottom padding), as PyTorch's `ceil_mode`. A window larger than the
//!   padded input is an error naming `pool.kernel_h` / `pool.kernel_w`.
//! - **Padding**: each side at least 0 and less than the window in its dimension (looser than
//!   PyTorch's pad ≤ kernel / 2, which it admits), so every window overlaps at least one
//!   input element: max never sees an empty window, the excluding average never divides by 0.
//! - **Max** ([`PoolMode::Max`]): the largest input element in the window (padding never
//!   wins). NaN propagates as in PyTorch: a window holding a NaN gives NaN. Ties go to the
//!   first maximum in the window's row-major scan; a NaN is chosen over any number, the first
//!   NaN over later ones. Backward recomputes that choice from x and routes dy to exactly
//!   that element; overlapping windows accumulate into dx.
//! - **Max for training** ([`forward_with_indices`], [`backward_with_indices`]): the forward
//!   also records each window's choice as its offset in the (n, c) plane (oneDNN's
//!   forward-training workspace, PyTorch's `max_pool2d_with_indices`), and the backward
//!   routes dy by those offsets without reading x: the same y and dx as the pair above.
//!   The indices are laid out like y, as PyTorch's: one u32 per output, packed in y's
//!   dimension order ([`indices_layout`]: NHWC when y's channels are innermost, else NCHW),
//!   so that for a packed y each index lies at its output's offset; the backward reads them
//!   in dy's order.
//! - **Average including padding** ([`PoolMode::AvgIncludePad`], benchdnn's `avg_p`): the sum
//!   of the real elements divided by the window clipped to the padded input, as PyTorch's
//!   `count_include_pad=True`: rows min(start + kh, H + bottom) − start (start counted in
//!   the padded input), the same for columns. Only a ceil-mode window overhanging the bottom
//!   or right padding counts fewer than kh·kw; otherwise the divisor is kh·kw (oneDNN's).
//! - **Average excluding padding** ([`PoolMode::AvgExcludePad`], `avg_np`): divided by the
//!   number of real input elements in the window.
//! - **Global average** ([`PoolDesc::global_average`]): window H×W, stride 1, no padding.
//!
//! # Accuracy
//! Max is exact (the output is one input element's value; a NaN output is the canonical
//! NaN, and of +0 and −0 in a window either may be returned). Average sums the window in f32 (exact for integer-valued data with small
//! sums), then divides once (correctly rounded); with blending,
//! |y − y_f64| ≤ 2⁻²² · (|alpha · avg| + |beta · y|) for such data, which `tests/pool.rs`
//! asserts. Average backward adds dy / divisor of up to K overlapping windows in f32:
//! |dx − dx_f64| ≤ (K + 2) · 2⁻²⁴ · (|alpha| · Σ|dy / divisor| + |beta · dx|), asserted
//! too; max backward sums the routed dy exactly on integer data.
//!
//! # Performance and threads
//! Packed channels (NHWC, channel stride 1 in every tensor) vectorise across channels: each
//! work item is (image, output row, channel block) forward, (image, channel block) backward.
//! Every other layout (NCHW, strided) works plane by plane: each input row is loaded once,
//! split by the column stride into contiguous phases (padding filled with −∞ or 0), reduced
//! across the window's columns for all output columns at once, then rows reduce as whole
//! vectors (stride 1, 2 or any). Max backward on planes splits every input row into its
//! column-stride phases once per plane, then chooses the windows wholly inside a row for the
//! whole output row at once (running maximum and winning offset across the window's taps,
//! as vectors), adds each dy at its chosen offset into a plane accumulator and blends the
//! plane out once; only the few edge windows that overlap the padding scan one by one.
//! The indexed forward chooses plane by plane the same way (packed channels: per output
//! pixel across a block of channels, each pixel's offsets written out as one run of the
//! channels-last indices) and writes the offsets beside y; the indexed backward adds each dy
//! at its offset (packed channels: each pixel's offsets read as one run beside its dy),
//! straight into dense dx planes when the blend is (1, 0), through a plane (or
//! channel-block) accumulator otherwise.
//! Forward items are (plane, block of output rows), backward
//! items whole dx planes, so no two threads write the same dx element however windows
//! overlap. Every output element is computed by the same operations in the same order
//! whatever the split, so results are the same bits on any number of threads.

use super::{check_buffer, run_items_with, Blend};
use crate::desc::{DataType, Layout, Padding, TensorDesc};
use crate::error::{Error, Result};
use crate::runtime::parallel::SharedOut;
use crate::runtime::ExecContext;
use crate::simd::multiversion;

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolMode {
    /// The window's largest element (NaN propagates; ties to the first in row-major order).
    Max,
    /// The sum over the window divided by the window clipped to the padded input
    /// (benchdnn's `avg_p`, PyTorch's `count_include_pad=True`).
    AvgIncludePad,
    /// The sum over the window divided by its number of real input elements (`avg_np`).
    AvgExcludePad,
}

impl PoolMode {
    /// Every mode.
    pub const ALL: [PoolMode; 3] = [
        PoolMode::Max,
        PoolMode::AvgIncludePad,
        PoolMode::AvgExcludePad,
    ];

    /// benchdnn's name: `max`, `avg_p`, `avg_np`.
    pub fn name(self) -> &'static str {
        match self {
            PoolMode::Max => "max",
            PoolMode::AvgIncludePad => "avg_p",
            PoolMode::AvgExcludePad => "avg_np",
        }
    }

    /// benchdnn's names (any case): `max`, `avg_p`, `avg_np`; also `avg`, which is
    /// `avg_np` as oneDNN's `pooling_avg` alias is (note PyTorch's `AvgPool2d` defaults to
    /// counting the padding, `avg_p`).
    ///
    /// ```
    /// use autodnn::layers::pool::PoolMode;
    /// assert_eq!(PoolMode::parse("AVG_P")?, PoolMode::AvgIncludePad);
    /// assert_eq!(PoolMode::parse("avg")?, PoolMode::AvgExcludePad);
    /// assert!(PoolMode::parse("min").is_err());
    /// # Ok::<(), autodnn::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Parse`] for any other text.
    pub fn parse(s: &str) -> Result<PoolMode> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "max" => Ok(PoolMode::Max),
            "avg_p" => Ok(PoolMode::AvgIncludePad),
            "avg_np" | "avg" => Ok(PoolMode::AvgExcludePad),
            _ => Err(Error::Parse {
                input: s.to_string(),
                reason: "pooling mode must be max, avg_p, avg_np (or avg = avg_np)".into(),
            }),
        }
    }

    fn is_max(self) -> bool {
        self == PoolMode::Max
    }
}

/// A 2-D pooling: mode, window, stride, padding per side and the output rounding.
///
/// # Examples
/// ```
/// use autodnn::{layers::pool::{PoolDesc, PoolMode}, DataType, Layout, Padding, TensorDesc};
/// // ResNet-50's max pool: 3x3, stride 2, padding 1.
/// let pool = PoolDesc::new(PoolMode::Max, [3, 3], [2, 2], Padding::symmetric(1, 1))?;
/// let x = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 64, 112, 112])?;
/// assert_eq!(pool.output_dims(&x)?, [1, 64, 56, 56]);
/// assert!(PoolDesc::new(PoolMode::Max, [3, 3], [0, 2], Padding::default()).is_err());
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolDesc {
    mode: PoolMode,
    window: [usize; 2],
    stride: [usize; 2],
    /// top, bottom, left, right.
    pad: [usize; 4],
    ceil_mode: bool,
}

/// Output extent of one dimension (see the module's card).
fn out_len(
    n: usize,
    k: usize,
    s: usize,
    before: usize,
    after: usize,
    ceil: bool,
    kfield: &str,
) -> Result<usize> {
    let padded = n
        .checked_add(before)
        .and_then(|v| v.checked_add(after))
        .ok_or_else(|| Error::overflow("pool output", "input plus padding"))?;
    if padded < k {
        return Err(Error::bad(
            kfield,
            k,
            format!("the window is larger than the padded input ({padded})"),
        ));
    }
    let span = padded - k;
    let steps = if ceil { span.div_ceil(s) } else { span / s };
    // The last window must start inside the input or the leading padding (PyTorch).
    let steps = if ceil && steps > 0 && steps * s >= n + before {
        steps - 1
    } else {
        steps
    };
    Ok(steps + 1)
}

impl PoolDesc {
    /// A pooling with output size by floor. `window` and `stride` are (height, width);
    /// padding per side (top, bottom, left, right).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `pool.kernel_h`/`pool.kernel_w` (0),
    /// `pool.stride_h`/`pool.stride_w` (0), `pool.pad_top`, `pool.pad_bottom`, `pool.pad_left`,
    /// `pool.pad_right` (negative, or not less than the window in its dimension).
    pub fn new(
        mode: PoolMode,
        window: [usize; 2],
        stride: [usize; 2],
        padding: Padding,
    ) -> Result<PoolDesc> {
        for (v, f) in window.iter().zip(["pool.kernel_h", "pool.kernel_w"]) {
            if *v == 0 {
                return Err(Error::bad(f, v, "the window must be at least 1"));
            }
        }
        for (v, f) in stride.iter().zip(["pool.stride_h", "pool.stride_w"]) {
            if *v == 0 {
                return Err(Error::bad(f, v, "strides must be at least 1"));
            }
        }
        let sides = [
            (padding.top, window[0], "pool.pad_top"),
            (padding.bottom, window[0], "pool.pad_bottom"),
            (padding.left, window[1], "pool.pad_left"),
            (padding.right, window[1], "pool.pad_right"),
        ];
        let mut pad = [0usize; 4];
        for (p, (v, k, f)) in pad.iter_mut().zip(sides) {
            if v < 0 {
                return Err(Error::bad(f, v, "padding must be at least 0"));
            }
            if v as u64 >= k as u64 {
                return Err(Error::bad(
                    f,
                    v,
                    format!(
                        "padding must be less than the window ({k}) so every window sees the input"
                    ),
                ));
            }
            *p = v as usize;
        }
        Ok(PoolDesc {
            mode,
            window,
            stride,
            pad,
            ceil_mode: false,
        })
    }

    /// Global pooling over the whole plane of `x`: window H×W, stride 1, no padding (output
    /// 1×1 per channel).
    ///
    /// # Errors
    /// None for a valid descriptor; a `Result` as [`PoolDesc::new`].
    pub fn global(mode: PoolMode, x: &TensorDesc) -> Result<PoolDesc> {
        PoolDesc::new(mode, [x.h(), x.w()], [1, 1], Padding::default())
    }

    /// Global average pooling over the plane of `x` (no padding, so both averages agree).
    ///
    /// # Errors
    /// As [`PoolDesc::global`].
    pub fn global_average(x: &TensorDesc) -> Result<PoolDesc> {
        PoolDesc::global(PoolMode::AvgExcludePad, x)
    }

    /// The same pooling with output size by ceil (`true`, PyTorch's `ceil_mode`) or floor.
    pub fn with_ceil_mode(self, ceil_mode: bool) -> PoolDesc {
        PoolDesc { ceil_mode, ..self }
    }

    /// The same pooling with another mode.
    pub fn with_mode(self, mode: PoolMode) -> PoolDesc {
        PoolDesc { mode, ..self }
    }

    /// The mode.
    pub fn mode(&self) -> PoolMode {
        self.mode
    }
    /// Window (height, width).
    pub fn window(&self) -> [usize; 2] {
        self.window
    }
    /// Stride (height, width).
    pub fn stride(&self) -> [usize; 2] {
        self.stride
    }
    /// Padding per side.
    pub fn padding(&self) -> Padding {
        let p = self.pad.map(|v| v as i64);
        Padding {
            top: p[0],
            bottom: p[1],
            left: p[2],
            right: p[3],
        }
    }
    /// Whether output sizes round up (PyTorch's `ceil_mode`).
    pub fn ceil_mode(&self) -> bool {
        self.ceil_mode
    }

    /// The output's (N, C, H, W) for an input `x`.
    ///
    /// # Errors
    /// [`Error::BadParam`] naming `pool.kernel_h` or `pool.kernel_w` when the window is larger
    /// than the padded input; [`Error::Overflow`] for absurd sizes.
    pub fn output_dims(&self, x: &TensorDesc) -> Result<[usize; 4]> {
        let [n, c, h, w] = x.dims();
        let [top, bottom, left, right] = self.pad;
        let oh = out_len(
            h,
            self.window[0],
            self.stride[0],
            top,
            bottom,
            self.ceil_mode,
            "pool.kernel_h",
        )?;
        let ow = out_len(
            w,
            self.window[1],
            self.stride[1],
            left,
            right,
            self.ceil_mode,
            "pool.kernel_w",
        )?;
        Ok([n, c, oh, ow])
    }

    /// A packed output descriptor for `x` in `layout` (f32).
    ///
    /// # Errors
    /// As [`PoolDesc::output_dims`] and [`TensorDesc::new`].
    pub fn output_desc(&self, x: &TensorDesc, layout: Layout) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, layout, self.output_dims(x)?)
    }
}

/// A pooling problem as benchdnn's pool driver writes it: the input's dimensions and the
/// descriptor (mode [`PoolMode::Max`]; change it with [`PoolDesc::with_mode`]).
///
/// Fields: `mb`, `ic`, `ih`, `iw`, `oh`, `ow`, `kh`, `kw`, `sh`, `sw`, `ph`, `pw` (`_`
/// separators ignored), then an optional name: `n` and the rest (quotes stripped), or `_`
/// followed by text that is no field. Defaults: `mb` 1 (benchdnn's is 2), `sh` 1, `ph` 0;
/// missing w-fields copy the h-fields (`ow` copies `oh` only when the width's geometry is the
/// height's, else it is computed); `ic`, `ih` and `kh` are required. The 3-D fields (`id`,
/// `od`, `kd`, `sd`, `pd`) and dilation (`dd`, `dh`, `dw`, counting from 0) are accepted at
/// their trivial values only (1, 1, 1, 1, 0; 0).
///
/// Without `oh` the output is floor-rounded with the padding on both sides. With `oh`, the
/// bottom padding is inferred as benchdnn does, (oh − 1)·sh + kh − ih − ph (so an `oh` that
/// PyTorch's ceil mode would give becomes extra bottom padding, and average-with-padding
/// divides by kh·kw as oneDNN does), clamped at 0 when the windows leave trailing rows
/// unread; an `oh` no such padding (0 ≤ bottom < kh) gives is an error. Likewise `ow`.
///
/// ```
/// use autodnn::layers::pool::PoolProblem;
/// let p = PoolProblem::parse("mb8ic64ih112oh56kh3sh2ph1")?;
/// assert_eq!(p.dims, [8, 64, 112, 112]);
/// assert_eq!(p.desc.window(), [3, 3]);
/// assert_eq!(p.output_dims()?, [8, 64, 56, 56]);
/// let g = PoolProblem::parse("mb1ic2048ih7kh7n\"resnet:avgpool\"")?;
/// assert_eq!((g.output_dims()?, g.name.as_str()), ([1, 2048, 1, 1], "resnet:avgpool"));
/// # Ok::<(), autodnn::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolProblem {
    /// The input's (N, C, H, W).
    pub dims: [usize; 4],
    /// The pooling.
    pub desc: PoolDesc,
    /// The problem's name (empty if none).
    pub name: String,
}

const KEYS: [&str; 20] = [
    "mb", "ic", "id", "ih", "iw", "od", "oh", "ow", "kd", "kh", "kw", "sd", "sh", "sw", "pd", "ph",
    "pw", "dd", "dh", "dw",
];

impl PoolProblem {
    /// Parses benchdnn's pool problem string (see the type's documentation).
    ///
    /// # Errors
    /// [`Error::Parse`]: unknown or repeated fields, missing `ic`/`ih`/`kh`, zero sizes,
    /// 3-D or dilated problems, an `oh`/`ow` inconsistent with the geometry, an invalid
    /// descriptor.
    pub fn parse(s: &str) -> Result<PoolProblem> {
        let bad = |reason: String| Error::Parse {
            input: s.to_string(),
            reason,
        };
        let mut vals: [Option<usize>; 20] = [None; 20];
        let mut name = String::new();
        let mut rest = s.trim();
        let mut after_sep = false;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('_') {
                rest = r;
                after_sep = true;
                continue;
            }
            let letters = rest
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(rest.len());
            let key = &rest[..letters];
            let digits = rest[letters..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(rest.len() - letters, |d| d);
            let known = KEYS.iter().position(|k| *k == key);
            match known {
                Some(i) if digits > 0 => {
                    let text = &rest[letters..letters + digits];
                    let v = text
                        .parse::<usize>()
                        .map_err(|_| bad(format!("{key}: {text} is not a size")))?;
                    if vals[i].replace(v).is_some() {
                        return Err(bad(format!("{key} given twice")));
                    }
                    rest = &rest[letters + digits..];
                    after_sep = false;
                }
                _ if rest.starts_with('n') => {
                    name = rest[1..].trim_matches('"').to_string();
                    break;
                }
                _ if after_sep => {
                    name = rest.trim_matches('"').to_string();
                    break;
                }
                _ => return Err(bad(format!("unknown field at {rest:?}"))),
            }
        }
        let get = |k: &str| vals[KEYS.iter().position(|x| *x == k).unwrap_or(0)];
        for (k, trivial) in [
            ("id", 1),
            ("od", 1),
            ("kd", 1),
            ("sd", 1),
            ("pd", 0),
            ("dd", 0),
            ("dh", 0),
            ("dw", 0),
        ] {
            if get(k).is_some_and(|v| v != trivial) {
                return Err(bad(format!(
                    "{k} must be {trivial}: 3-D and dilated pooling are not supported"
                )));
            }
        }
        let need = |k: &str| get(k).ok_or_else(|| bad(format!("{k} is required")));
        let mb = get("mb").unwrap_or(1);
        let ic = need("ic")?;
        let ih = need("ih")?;
        let kh = need("kh")?;
        let iw = get("iw").unwrap_or(ih);
        let kw = get("kw").unwrap_or(kh);
        let sh = get("sh").unwrap_or(1);
        let sw = get("sw").unwrap_or(sh);
        let ph = get("ph").unwrap_or(0);
        let pw = get("pw").unwrap_or(ph);
        let oh = get("oh");
        let same_geometry = (iw, kw, sw, pw) == (ih, kh, sh, ph);
        let ow = get("ow").or(if same_geometry { oh } else { None });
        for (k, v) in [
            ("mb", mb),
            ("ic", ic),
            ("ih", ih),
            ("iw", iw),
            ("kh", kh),
            ("kw", kw),
            ("sh", sh),
            ("sw", sw),
        ] {
            if v == 0 {
                return Err(bad(format!("{k} must be at least 1")));
            }
        }
        // The trailing padding: symmetric, or inferred from a given output size.
        let after = |o: Option<usize>, i: usize, k: usize, st: usize, p: usize, f: &str| {
            let Some(o) = o else { return Ok(p) };
            let reach = (o as i128 - 1) * st as i128 + k as i128;
            let a = reach - i as i128 - p as i128;
            if o == 0 || a >= k as i128 {
                return Err(bad(format!(
                    "{f}{o} is inconsistent with the input, window, stride and padding"
                )));
            }
            Ok(a.max(0) as usize)
        };
        let bottom = after(oh, ih, kh, sh, ph, "oh")?;
        let right = after(ow, iw, kw, sw, pw, "ow")?;
        let to_i = |v: usize| i64::try_from(v).map_err(|_| bad(format!("{v} is too large")));
        let padding = Padding {
            top: to_i(ph)?,
            bottom: to_i(bottom)?,
            left: to_i(pw)?,
            right: to_i(right)?,
        };
        let desc = PoolDesc::new(PoolMode::Max, [kh, kw], [sh, sw], padding)
            .map_err(|e| bad(e.to_string()))?;
        let p = PoolProblem {
            dims: [mb, ic, ih, iw],
            desc,
            name,
        };
        let [_, _, gh, gw] = p.output_dims().map_err(|e| bad(e.to_string()))?;
        if oh.is_some_and(|o| o != gh) || ow.is_some_and(|o| o != gw) {
            return Err(bad(format!(
                "oh/ow inconsistent with the geometry, which gives {gh}x{gw}"
            )));
        }
        Ok(p)
    }

    /// The input's descriptor in `layout` (f32).
    ///
    /// # Errors
    /// As [`TensorDesc::new`].
    pub fn x_desc(&self, layout: Layout) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, layout, self.dims)
    }

    /// The output's (N, C, H, W).
    ///
    /// # Errors
    /// As [`PoolDesc::output_dims`].
    pub fn output_dims(&self) -> Result<[usize; 4]> {
        self.desc.output_dims(&self.x_desc(Layout::Nchw)?)
    }

    /// The output's descriptor in `layout` (f32).
    ///
    /// # Errors
    /// As [`PoolDesc::output_dims`].
    pub fn y_desc(&self, layout: Layout) -> Result<TensorDesc> {
        TensorDesc::new(DataType::F32, layout, self.output_dims()?)
    }
}

// ---------------------------------------------------------------------------------------
// Geometry

/// Everything the kernels need about the shapes, in elements.
#[derive(Debug, Clone, Copy)]
struct Geom {
    mode: PoolMode,
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    pad: [usize; 4],
}

impl Geom {
    fn new(desc: &PoolDesc, x: &TensorDesc) -> Result<Geom> {
        let [n, c, oh, ow] = desc.output_dims(x)?;
        Ok(Geom {
            mode: desc.mode,
            n,
            c,
            h: x.h(),
            w: x.w(),
            oh,
            ow,
            kh: desc.window[0],
            kw: desc.window[1],
            sh: desc.stride[0],
            sw: desc.stride[1],
            pad: desc.pad,
        })
    }

    /// Real input rows [lo, hi) of output row `i`, and the divisor's row count.
    #[inline(always)]
    fn rows(&self, i: usize) -> (usize, usize, usize) {
        span(
            self.mode,
            i * self.sh,
            self.kh,
            self.pad[0],
            self.h,
            self.pad[1],
        )
    }

    /// Real input columns [lo, hi) of output column `j`, and the divisor's column count.
    #[inline(always)]
    fn cols(&self, j: usize) -> (usize, usize, usize) {
        span(
            self.mode,
            j * self.sw,
            self.kw,
            self.pad[2],
            self.w,
            self.pad[3],
        )
    }
}

/// A window starting at `start` in the padded input: its real extent [lo, hi) and the count
/// its mode divides by (unused for max).
#[inline(always)]
fn span(
    mode: PoolMode,
    start: usize,
    k: usize,
    before: usize,
    n: usize,
    after: usize,
) -> (usize, usize, usize) {
    let lo = start.saturating_sub(before);
    let hi = (start + k).saturating_sub(before).min(n);
    let count = match mode {
        PoolMode::AvgIncludePad => (start + k).min(n + before + after) - start,
        _ => hi - lo,
    };
    (lo, hi, count)
}

/// Channels per block: all of them, at most `cap`, and fewer when `outer` items times the
/// blocks would not keep the threads busy (multiples of 16 channels).
fn channel_block(c: usize, outer: usize, threads: usize, cap: usize) -> usize {
    let mut cb = c.min(cap.max(16));
    let want = 4 * threads;
    if threads > 1 && outer.saturating_mul(c.div_ceil(cb)) < want {
        let blocks = want.div_ceil(outer.max(1));
        cb = cb.min(c.div_ceil(blocks).next_multiple_of(16));
    }
    cb.clamp(1, c.max(1))
}

/// Whether the packed-channels path applies: channel stride 1 everywhere and enough channels
/// to fill vectors.
fn channels_packed(g: &Geom, descs: &[&TensorDesc]) -> bool {
    g.c >= 8 && descs.iter().all(|d| d.strides()[1] == 1)
}

// ---------------------------------------------------------------------------------------
// Kernels (inlined into the multiversioned bodies)

/// acc = max(acc, src), NaN winning (a canonical NaN; of +0 and −0, either).
#[inline(always)]
fn max_into(acc: &mut [f32], src: &[f32]) {
    for (a, &s) in acc.iter_mut().zip(src) {
        *a = max_nan(*a, s);
    }
}

/// The larger of `t` and `s`, NaN if either is. Written so that storing it back where `t`
/// came from is a plain store: `if c { s } else { *a }` becomes a masked store, which later
/// loads of the accumulator cannot forward from.
#[inline(always)]
fn max_nan(t: f32, s: f32) -> f32 {
    #[allow(clippy::eq_op)]
    let nan = (t != t) | (s != s);
    if nan {
        f32::NAN
    } else {
        t.max(s)
    }
}

/// acc += src.
#[inline(always)]
fn add_into(acc: &mut [f32], src: &[f32]) {
    for (a, &s) in acc.iter_mut().zip(src) {
        *a += s;
    }
}

/// dst = alpha · v + beta · dst (dst unread when beta = 0).
#[inline(always)]
fn blend_into(blend: Blend, v: &[f32], dst: &mut [f32]) {
    let (a, b) = (blend.alpha, blend.beta);
    if b == 0.0 {
        for (d, &s) in dst.iter_mut().zip(v) {
            *d = a * s;
        }
    } else {
        for (d, &s) in dst.iter_mut().zip(v) {
            *d = a * s + b * *d;
        }
    }
}

/// Writes `v` (blended) at `start + k·step` of `out`, `k` over `v`.
///
/// # Safety
/// The elements written belong to the caller's work item alone.
#[inline(always)]
unsafe fn store(out: &SharedOut<'_>, blend: Blend, v: &[f32], start: usize, step: usize) {
    if step == 1 {
        // SAFETY: the caller's item owns these elements.
        let dst = unsafe { out.slice_mut(start, v.len()) };
        blend_into(blend, v, dst);
    } else {
        for (k, &s) in v.iter().enumerate() {
            let at = start + k * step;
            // SAFETY: the caller's item owns element `at`.
            unsafe {
                let prior = if blend.reads_output() {
                    out.read(at)
                } else {
                    0.0
                };
                out.write(at, blend.apply(s, prior));
            }
        }
    }
}

/// Read-only inputs of the plane path, forward.
struct PlaneFwd<'a> {
    g: Geom,
    blend: Blend,
    x: &'a [f32],
    xs: [usize; 4],
    ys: [usize; 4],
    /// Divisor column counts per output column (averages).
    cc: &'a [f32],
    /// Output rows per item.
    rows_per_item: usize,
    blocks: usize,
    /// Elements per phase.
    pl: usize,
}

/// The column phases the plane path's forward builds for stride `sw` and window `kw`: all
/// `sw` of them up to 2 (the split of stride 2 writes both), else the `min(sw, kw)` that
/// the taps read.
fn phase_count(sw: usize, kw: usize) -> usize {
    if sw <= 2 {
        sw
    } else {
        sw.min(kw)
    }
}

/// Per-thread scratch of the plane path, forward: the padded row of the window's rows
/// reduced, its phases, an accumulator.
struct PlaneScratch {
    vrow: Vec<f32>,
    phases: Vec<f32>,
    acc: Vec<f32>,
}

multiversion! {
    fn plane_forward(p: &PlaneFwd<'_>, s: &mut PlaneScratch, out: &SharedOut<'_>, item: usize) {
        let g = &p.g;
        let (plane, block) = (item / p.blocks, item % p.blocks);
        let (n, c) = (plane / g.c, plane % g.c);
        let i0 = block * p.rows_per_item;
        let i1 = (i0 + p.rows_per_item).min(g.oh);
        let is_max = g.mode.is_max();
        let fill = if is_max { f32::NEG_INFINITY } else { 0.0 };
        let xbase = n * p.xs[0] + c * p.xs[1];
        let ybase = n * p.ys[0] + c * p.ys[1];
        let (ow, pl, sw, left, w) = (g.ow, p.pl, g.sw, g.pad[2], g.w);
        let sxw = p.xs[3];
        let vrow = &mut s.vrow[..];
        vrow[..left].fill(fill);
        vrow[left + w..].fill(fill);
        let acc = &mut s.acc[..ow];
        for i in i0..i1 {
            // The window's rows reduced column by column, into the padded row.
            let (lo, hi, rc) = g.rows(i);
            let real = &mut vrow[left..left + w];
            for r in lo..hi {
                let xr = xbase + r * p.xs[2];
                if sxw == 1 {
                    let src = &p.x[xr..xr + w];
                    if r == lo {
                        real.copy_from_slice(src);
                    } else if is_max {
                        max_into(real, src);
                    } else {
                        add_into(real, src);
                    }
                } else {
                    let src = &p.x[xr..];
                    for (k, d) in real.iter_mut().enumerate() {
                        let v = src[k * sxw];
                        #[allow(clippy::eq_op)]
                        let take = r == lo || if is_max { v > *d || v != v } else { false };
                        *d = if take { v } else if is_max { *d } else { *d + v };
                    }
                }
            }
            // Its phases (padded column ph + sw·t in phase ph), then the window's columns
            // reduced for every output column at once.
            let src: &[f32] = match sw {
                1 => vrow,
                2 => {
                    let (e, o) = s.phases.split_at_mut(pl);
                    for ((a, b), c) in e.iter_mut().zip(o.iter_mut()).zip(vrow.chunks_exact(2)) {
                        *a = c[0];
                        *b = c[1];
                    }
                    &s.phases
                }
                _ => {
                    for ph in 0..phase_count(sw, g.kw) {
                        for (t, d) in s.phases[ph * pl..(ph + 1) * pl].iter_mut().enumerate() {
                            *d = vrow[ph + sw * t];
                        }
                    }
                    &s.phases
                }
            };
            let phase_len = if sw == 1 { vrow.len() } else { pl };
            for v in 0..g.kw {
                let tap = &src[(v % sw) * phase_len + v / sw..][..ow];
                if v == 0 {
                    acc.copy_from_slice(tap);
                } else if is_max {
                    max_into(acc, tap);
                } else {
                    add_into(acc, tap);
                }
            }
            if !is_max {
                let rc = rc as f32;
                for (a, &cc) in acc.iter_mut().zip(p.cc) {
                    *a /= rc * cc;
                }
            }
            // SAFETY: output row i of this plane belongs to this item alone.
            unsafe { store(out, p.blend, acc, ybase + i * p.ys[2], p.ys[3]) };
        }
    }
}

/// Fewest planes per item of the global path (more by [`super::stretch`]).
const GLOBAL_PLANES: usize = 64;

/// Reduces `v` in 16 lanes (element k into lane k mod 16), then the lanes in order: a fixed
/// order that vectorises.
#[inline(always)]
fn lane_reduce(v: &[f32], is_max: bool) -> f32 {
    const L: usize = 16;
    let mut lanes = [if is_max { f32::NEG_INFINITY } else { 0.0 }; L];
    let mut chunks = v.chunks_exact(L);
    for ch in &mut chunks {
        if is_max {
            max_into(&mut lanes, ch);
        } else {
            add_into(&mut lanes, ch);
        }
    }
    let rem = chunks.remainder();
    if is_max {
        max_into(&mut lanes[..rem.len()], rem);
    } else {
        add_into(&mut lanes[..rem.len()], rem);
    }
    let mut r = lanes[0];
    for &l in &lanes[1..] {
        if is_max {
            r = max_nan(r, l);
        } else {
            r += l;
        }
    }
    r
}

multiversion! {
    fn global_forward(p: &PlaneFwd<'_>, out: &SharedOut<'_>, planes: std::ops::Range<usize>) {
        let g = &p.g;
        let hw = g.h * g.w;
        let is_max = g.mode.is_max();
        let div = hw as f32;
        for plane in planes {
            let (n, c) = (plane / g.c, plane % g.c);
            let xb = n * p.xs[0] + c * p.xs[1];
            let r = lane_reduce(&p.x[xb..xb + hw], is_max);
            let v = if is_max { r } else { r / div };
            // SAFETY: output (n, c) belongs to this item alone.
            unsafe { store(out, p.blend, &[v], n * p.ys[0] + c * p.ys[1], 1) };
        }
    }
}

/// [`global_forward`] of an average with AVX-512: each plane summed in 16 lanes (element k
/// into lane k mod 16, the tail by a masked load), the lanes reduced by the intrinsic's
/// fixed tree (a serial sum of the lanes, 15 dependent additions, held the portable build's
/// planes of 49 elements to twice the time).
#[cfg(target_arch = "x86_64")]
fn global_average_avx512(
    _: crate::simd::Avx512,
    p: &PlaneFwd<'_>,
    out: &SharedOut<'_>,
    planes: std::ops::Range<usize>,
) {
    #[target_feature(enable = "avx512f")]
    fn plane_sum(v: &[f32]) -> f32 {
        use std::arch::x86_64::*;
        let mut acc = _mm512_setzero_ps();
        let mut chunks = v.chunks_exact(16);
        for ch in &mut chunks {
            // SAFETY: `ch` holds 16 floats.
            acc = _mm512_add_ps(acc, unsafe { _mm512_loadu_ps(ch.as_ptr()) });
        }
        let rem = chunks.remainder();
        if !rem.is_empty() {
            let mask = ((1u32 << rem.len()) - 1) as __mmask16;
            // SAFETY: the mask covers only `rem`'s elements (masked lanes are not read).
            acc = _mm512_add_ps(acc, unsafe { _mm512_maskz_loadu_ps(mask, rem.as_ptr()) });
        }
        _mm512_reduce_add_ps(acc)
    }
    // SAFETY: the token proves the CPU runs AVX-512F.
    global_average_planes(p, out, planes, |v| unsafe { plane_sum(v) })
}

/// [`global_average_avx512`] with AVX2: 8 lanes (element k into lane k mod 8, the tail by
/// a masked load), reduced by a fixed tree (the two halves, then pairs, then the last two).
#[cfg(target_arch = "x86_64")]
fn global_average_avx2(
    _: crate::simd::Avx2,
    p: &PlaneFwd<'_>,
    out: &SharedOut<'_>,
    planes: std::ops::Range<usize>,
) {
    #[target_feature(enable = "avx2")]
    fn plane_sum(v: &[f32]) -> f32 {
        use std::arch::x86_64::*;
        let mut acc = _mm256_setzero_ps();
        let mut chunks = v.chunks_exact(8);
        for ch in &mut chunks {
            // SAFETY: `ch` holds 8 floats.
            acc = _mm256_add_ps(acc, unsafe { _mm256_loadu_ps(ch.as_ptr()) });
        }
        let rem = chunks.remainder();
        if !rem.is_empty() {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rem.len() as i32), lanes);
            // SAFETY: the mask covers only `rem`'s elements (masked lanes are not read).
            acc = _mm256_add_ps(acc, unsafe { _mm256_maskload_ps(rem.as_ptr(), mask) });
        }
        let q = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
        let d = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)))
    }
    // SAFETY: the token proves the CPU runs AVX2.
    global_average_planes(p, out, planes, |v| unsafe { plane_sum(v) })
}

/// The averages of `planes` (each contiguous, `h·w` elements), each plane's sum by `sum`:
/// the loop of the vector entries above.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn global_average_planes(
    p: &PlaneFwd<'_>,
    out: &SharedOut<'_>,
    planes: std::ops::Range<usize>,
    sum: impl Fn(&[f32]) -> f32,
) {
    let g = &p.g;
    let hw = g.h * g.w;
    let div = hw as f32;
    for plane in planes {
        let (n, c) = (plane / g.c, plane % g.c);
        let xb = n * p.xs[0] + c * p.xs[1];
        let r = sum(&p.x[xb..xb + hw]);
        // SAFETY: output (n, c) belongs to this item alone.
        unsafe { store(out, p.blend, &[r / div], n * p.ys[0] + c * p.ys[1], 1) };
    }
}

/// Read-only inputs of the packed-channels path, forward.
struct ChanFwd<'a> {
    g: Geom,
    blend: Blend,
    x: &'a [f32],
    xs: [usize; 4],
    ys: [usize; 4],
    cb: usize,
    cblocks: usize,
}

multiversion! {
    fn chan_forward(p: &ChanFwd<'_>, acc: &mut [f32], out: &SharedOut<'_>, item: usize) {
        let g = &p.g;
        let cblk = item % p.cblocks;
        let row = item / p.cblocks;
        let (n, i) = (row / g.oh, row % g.oh);
        let c0 = cblk * p.cb;
        let cl = p.cb.min(g.c - c0);
        let acc = &mut acc[..cl];
        let is_max = g.mode.is_max();
        let (lo, hi, rc) = g.rows(i);
        let xbase = n * p.xs[0] + c0;
        let ybase = n * p.ys[0] + i * p.ys[2] + c0;
        let init = if is_max { f32::NEG_INFINITY } else { 0.0 };
        for j in 0..g.ow {
            let (clo, chi, cc) = g.cols(j);
            acc.fill(init);
            for r in lo..hi {
                let xr = xbase + r * p.xs[2];
                for col in clo..chi {
                    let src = &p.x[xr + col * p.xs[3]..][..cl];
                    if is_max {
                        max_into(acc, src);
                    } else {
                        add_into(acc, src);
                    }
                }
            }
            if !is_max {
                let d = (rc * cc) as f32;
                for a in acc.iter_mut() {
                    *a /= d;
                }
            }
            // SAFETY: (n, i, j, this channel block) belongs to this item alone.
            unsafe { store(out, p.blend, acc, ybase + j * p.ys[3], 1) };
        }
    }
}

/// The common checks of both directions; the geometry.
fn check_common(
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x_len: usize,
    out_field: &str,
    out_desc: &TensorDesc,
) -> Result<Geom> {
    blend.check()?;
    check_buffer("x", x_desc, x_len)?;
    check_geometry(desc, x_desc, out_field, out_desc)
}

/// The geometry of `desc` on an input like `x_desc` whose output `out_desc` (named
/// `out_field`) must have the pooling's output dimensions.
fn check_geometry(
    desc: &PoolDesc,
    x_desc: &TensorDesc,
    out_field: &str,
    out_desc: &TensorDesc,
) -> Result<Geom> {
    let g = Geom::new(desc, x_desc)?;
    let want = [g.n, g.c, g.oh, g.ow];
    if out_desc.dims() != want {
        return Err(Error::bad(
            out_field,
            format!("{:?}", out_desc.dims()),
            format!("must have the pooling's output dimensions {want:?}"),
        ));
    }
    Ok(g)
}

/// Divisor column counts per output column, as f32 (averages; empty for max).
fn column_counts(g: &Geom) -> Result<Vec<f32>> {
    if g.mode.is_max() {
        return Ok(Vec::new());
    }
    let mut cc = crate::alloc::try_vec_with_capacity(g.ow, "pooling divisors")?;
    cc.extend((0..g.ow).map(|j| g.cols(j).2 as f32));
    Ok(cc)
}

/// y = alpha · pool(x) + beta · y (cudnnPoolingForward). x and y any layout and strides; y's
/// dimensions must be [`PoolDesc::output_dims`] of x's.
///
/// # Errors
/// [`Error::BadParam`] naming `y` for other dimensions, `alpha`/`beta` when not finite,
/// `pool.kernel_h`/`pool.kernel_w` for a window larger than the padded input;
/// [`Error::BufferTooSmall`] naming `x` or `y`; [`Error::Unsupported`] for types other than
/// f32.
///
/// # Examples
/// ```
/// use autodnn::{layers::{pool::{self, PoolDesc, PoolMode}, Blend}, DataType, Handle, Layout, Padding, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let pool = PoolDesc::new(PoolMode::Max, [2, 2], [2, 2], Padding::default())?;
/// let xd = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 1, 2, 4])?;
/// let yd = pool.output_desc(&xd, Layout::Nchw)?;
/// let x = [1.0, 5.0, 2.0, 0.0,
///          3.0, 4.0, 7.0, 6.0];
/// let mut y = [0.0; 2];
/// h.pooling_forward(&pool, Blend::default(), &xd, &x, &yd, &mut y)?;
/// assert_eq!(y, [5.0, 7.0]);
/// # let _ = pool::forward;
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward(
    ctx: &ExecContext<'_>,
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
) -> Result<()> {
    let g = check_common(desc, blend, x_desc, x.len(), "y", y_desc)?;
    check_buffer("y", y_desc, y.len())?;
    let features = ctx.features();
    let work = x_desc.elements().saturating_add(y_desc.elements());
    let out = SharedOut::new(y);
    if channels_packed(&g, &[x_desc, y_desc]) {
        let outer = g.n * g.oh;
        let cb = channel_block(g.c, outer, ctx.threads, usize::MAX);
        let cblocks = g.c.div_ceil(cb);
        let p = ChanFwd {
            g,
            blend,
            x,
            xs: x_desc.strides(),
            ys: y_desc.strides(),
            cb,
            cblocks,
        };
        return run_items_with(
            ctx,
            outer * cblocks,
            work,
            || crate::alloc::try_vec(cb, 0.0f32, "pooling accumulator"),
            |acc, item| chan_forward(features, &p, acc, &out, item),
        );
    }
    let planes = g.n * g.c;
    let blocks = if ctx.threads > 1 && planes < 4 * ctx.threads {
        (4 * ctx.threads).div_ceil(planes).min(g.oh)
    } else {
        1
    };
    let rows_per_item = g.oh.div_ceil(blocks);
    let blocks = g.oh.div_ceil(rows_per_item);
    let pl = g.ow + (g.kw - 1) / g.sw;
    let cc = column_counts(&g)?;
    let xs = x_desc.strides();
    let p = PlaneFwd {
        g,
        blend,
        x,
        xs,
        ys: y_desc.strides(),
        cc: &cc,
        rows_per_item,
        blocks,
        pl,
    };
    // Global pooling of contiguous planes: each plane one reduction.
    let global = [g.oh, g.ow] == [1, 1]
        && g.pad == [0; 4]
        && [g.kh, g.kw] == [g.h, g.w]
        && xs[3] == 1
        && (xs[2] == g.w || g.h == 1);
    if global {
        // The averages' vector entries (max keeps the portable reduction).
        #[cfg(target_arch = "x86_64")]
        let (avx512, avx2) = match g.mode.is_max() {
            true => (None, None),
            false => (
                <crate::simd::Avx512 as crate::simd::Token>::new(features),
                <crate::simd::Avx2 as crate::simd::Token>::new(features),
            ),
        };
        let per = super::stretch(planes, GLOBAL_PLANES, ctx.threads);
        return run_items_with(
            ctx,
            planes.div_ceil(per),
            work,
            || Ok(()),
            |_, item| {
                let range = item * per..((item + 1) * per).min(planes);
                #[cfg(target_arch = "x86_64")]
                if let Some(t) = avx512 {
                    return global_average_avx512(t, &p, &out, range);
                }
                #[cfg(target_arch = "x86_64")]
                if let Some(t) = avx2 {
                    return global_average_avx2(t, &p, &out, range);
                }
                global_forward(features, &p, &out, range)
            },
        );
    }
    // Only the phases a window's taps reach (v mod sw for v < kw) are built: a stride far
    // beyond the window (the fuzzer's 2^40) must not size the scratch. The row then holds
    // what those phases read, and at least the padded input.
    let nph = phase_count(g.sw, g.kw);
    let row_len = ((pl - 1) * g.sw + nph).max(g.pad[2] + g.w);
    let init = || {
        Ok(PlaneScratch {
            vrow: crate::alloc::try_vec(row_len, 0.0f32, "pooling row")?,
            phases: crate::alloc::try_vec(nph * pl, 0.0f32, "pooling phases")?,
            acc: crate::alloc::try_vec(g.ow, 0.0f32, "pooling accumulator")?,
        })
    };
    run_items_with(ctx, planes * blocks, work, init, |s, item| {
        plane_forward(features, &p, s, &out, item)
    })
}

// ---------------------------------------------------------------------------------------
// Backward

/// Read-only inputs of backward (both paths).
struct Bwd<'a> {
    g: Geom,
    blend: Blend,
    x: &'a [f32],
    dy: &'a [f32],
    xs: [usize; 4],
    dys: [usize; 4],
    dxs: [usize; 4],
    cc: &'a [f32],
    /// Channels per item (packed-channels path).
    cb: usize,
    cblocks: usize,
    /// Whether the plane path's max may choose a row of interior windows at once (plane
    /// offsets fit in u32).
    fast: bool,
}

/// Per-thread scratch of backward: the dx accumulator, and per-channel maxima, choices and
/// gradients (packed-channels path).
struct BwdScratch {
    acc: Vec<f32>,
    m: Vec<f32>,
    idx: Vec<u32>,
    /// The plane's rows split by the column stride (plane path, max).
    phases: Vec<f32>,
}

/// One tap of a running first maximum: where `src` is larger than `m` (or the first NaN over
/// a number), `m` takes its value and `idx` takes `k`; the `first` tap sets both.
#[inline(always)]
fn running_max(m: &mut [f32], idx: &mut [u32], src: &[f32], k: u32, first: bool) {
    if first {
        m.copy_from_slice(src);
        idx.fill(k);
        return;
    }
    for ((mv, ix), &v) in m.iter_mut().zip(idx.iter_mut()).zip(src) {
        #[allow(clippy::eq_op)]
        let take = v > *mv || (v != v && *mv == *mv);
        *mv = if take { v } else { *mv };
        *ix = if take { k } else { *ix };
    }
}

/// One max window of the packed-channels indexed forward: x offsets `base + r·steps[0] +
/// col·steps[1]` (plus the channel) for input rows `rows[0]..rows[1]` and columns
/// `cols[0]..cols[1]` of a plane `w` wide.
#[cfg(target_arch = "x86_64")]
struct Window {
    base: usize,
    steps: [usize; 2],
    w: usize,
    rows: [usize; 2],
    cols: [usize; 2],
}

/// [`running_max`] over a whole window for channels `c .. c + 16·G` with AVX-512 (the
/// token), G vectors of maxima and offsets in registers (independent chains): `m` and `idx`
/// (16·G each) receive the window's first maximum (a NaN canonical) and its plane offset.
/// The window holds at least one tap.
#[cfg(target_arch = "x86_64")]
fn window_max16<const G: usize>(
    t: crate::simd::Avx512,
    x: &[f32],
    win: &Window,
    c: usize,
    m: &mut [f32],
    idx: &mut [u32],
) {
    // SAFETY: the token proves the CPU runs AVX-512F.
    unsafe { window_max16_avx512::<G>(t, x, win, c, m, idx) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn window_max16_avx512<const G: usize>(
    _: crate::simd::Avx512,
    x: &[f32],
    win: &Window,
    c: usize,
    m: &mut [f32],
    idx: &mut [u32],
) {
    use std::arch::x86_64::*;
    let load = |r: usize, col: usize| -> [__m512; G] {
        let at = win.base + r * win.steps[0] + col * win.steps[1] + c;
        let v = &x[at..at + 16 * G];
        // SAFETY: `v` holds 16·G floats.
        std::array::from_fn(|g| unsafe { _mm512_loadu_ps(v[16 * g..].as_ptr()) })
    };
    let [lo, hi] = win.rows;
    let [clo, chi] = win.cols;
    let mut mv = load(lo, clo);
    let first = _mm512_set1_epi32((lo * win.w + clo) as i32);
    let mut iv = [first; G];
    // The lanes whose maximum so far is a number (not NaN).
    let mut ord: [__mmask16; G] =
        std::array::from_fn(|g| _mm512_cmp_ps_mask::<_CMP_ORD_Q>(mv[g], mv[g]));
    for r in lo..hi {
        for col in clo..chi {
            if (r, col) == (lo, clo) {
                continue;
            }
            let v = load(r, col);
            // checked by the caller: plane offsets fit in u32, so in i32's bits
            let k = _mm512_set1_epi32((r * win.w + col) as i32);
            for g in 0..G {
                // Taken where the maximum so far is a number and v is larger or NaN (not
                // less or equal, unordered): the first maximum, the first NaN over a number.
                let take = _mm512_mask_cmp_ps_mask::<_CMP_NLE_UQ>(ord[g], v[g], mv[g]);
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v[g], v[g]);
                mv[g] = _mm512_mask_mov_ps(mv[g], take, v[g]);
                iv[g] = _mm512_mask_mov_epi32(iv[g], take, k);
                ord[g] = _kandn_mask16(nan, ord[g]);
            }
        }
    }
    let (m, idx) = (&mut m[..16 * G], &mut idx[..16 * G]);
    for g in 0..G {
        // A NaN maximum is the canonical NaN.
        let v = _mm512_mask_mov_ps(_mm512_set1_ps(f32::NAN), ord[g], mv[g]);
        // SAFETY: `m` and `idx` hold 16·G elements each.
        unsafe {
            _mm512_storeu_ps(m[16 * g..].as_mut_ptr(), v);
            _mm512_storeu_si512(idx[16 * g..].as_mut_ptr().cast(), iv[g]);
        }
    }
}

/// [`window_max16`] with AVX2 (the token): channels `c .. c + 8·G`, the masks as vectors
/// and the choices by blends.
#[cfg(target_arch = "x86_64")]
fn window_max8<const G: usize>(
    t: crate::simd::Avx2,
    x: &[f32],
    win: &Window,
    c: usize,
    m: &mut [f32],
    idx: &mut [u32],
) {
    // SAFETY: the token proves the CPU runs AVX2.
    unsafe { window_max8_avx2::<G>(t, x, win, c, m, idx) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn window_max8_avx2<const G: usize>(
    _: crate::simd::Avx2,
    x: &[f32],
    win: &Window,
    c: usize,
    m: &mut [f32],
    idx: &mut [u32],
) {
    use std::arch::x86_64::*;
    let load = |r: usize, col: usize| -> [__m256; G] {
        let at = win.base + r * win.steps[0] + col * win.steps[1] + c;
        let v = &x[at..at + 8 * G];
        // SAFETY: `v` holds 8·G floats.
        std::array::from_fn(|g| unsafe { _mm256_loadu_ps(v[8 * g..].as_ptr()) })
    };
    let [lo, hi] = win.rows;
    let [clo, chi] = win.cols;
    let mut mv = load(lo, clo);
    let first = _mm256_castsi256_ps(_mm256_set1_epi32((lo * win.w + clo) as i32));
    let mut iv = [first; G];
    // The lanes whose maximum so far is a number (not NaN): all ones there.
    let mut ord: [__m256; G] = std::array::from_fn(|g| _mm256_cmp_ps::<_CMP_ORD_Q>(mv[g], mv[g]));
    for r in lo..hi {
        for col in clo..chi {
            if (r, col) == (lo, clo) {
                continue;
            }
            let v = load(r, col);
            // checked by the caller: plane offsets fit in u32, so in i32's bits
            let k = _mm256_castsi256_ps(_mm256_set1_epi32((r * win.w + col) as i32));
            for g in 0..G {
                // As the AVX-512 kernel: taken where the maximum so far is a number and v
                // is larger or NaN.
                let take = _mm256_and_ps(ord[g], _mm256_cmp_ps::<_CMP_NLE_UQ>(v[g], mv[g]));
                let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v[g], v[g]);
                mv[g] = _mm256_blendv_ps(mv[g], v[g], take);
                iv[g] = _mm256_blendv_ps(iv[g], k, take);
                ord[g] = _mm256_andnot_ps(nan, ord[g]);
            }
        }
    }
    let (m, idx) = (&mut m[..8 * G], &mut idx[..8 * G]);
    for g in 0..G {
        // A NaN maximum is the canonical NaN.
        let v = _mm256_blendv_ps(_mm256_set1_ps(f32::NAN), mv[g], ord[g]);
        // SAFETY: `m` and `idx` hold 8·G elements each.
        unsafe {
            _mm256_storeu_ps(m[8 * g..].as_mut_ptr(), v);
            _mm256_storeu_ps(idx[8 * g..].as_mut_ptr().cast(), iv[g]);
        }
    }
}

/// One choice of max windows on a plane ([`choose_max_plane`]).
enum Chosen<'s> {
    /// Output columns `jlo..jlo + m.len()` of the row: maxima `m` at plane offsets `at`.
    Row {
        jlo: usize,
        m: &'s [f32],
        at: &'s [u32],
    },
    /// Output column `j`: the maximum `v` at plane offset `at`.
    One { j: usize, v: f32, at: usize },
}

/// The choices of max pooling on the plane of x at `xb`, row by row: `sink(i, choice)` for
/// every output of each output row i, in order. Each window takes its first maximum in
/// row-major order (the first NaN over any number; a chosen NaN is the canonical one).
/// With `fast`, the output columns whose windows lie wholly inside the row are chosen for a
/// row at once from the input rows split by the column stride into `phases` (row r, phase
/// ph, element t = column ph + sw·t), as vectors of running maxima `m` and offsets `idx`;
/// the rest scan one by one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn choose_max_plane(
    g: &Geom,
    x: &[f32],
    xs: [usize; 4],
    fast: bool,
    xb: usize,
    (phases, m, idx): (&mut [f32], &mut [f32], &mut [u32]),
    mut sink: impl FnMut(usize, Chosen<'_>),
) {
    let (h, w) = (g.h, g.w);
    let (sw, left, sxw) = (g.sw, g.pad[2], xs[3]);
    let pl = w.div_ceil(sw);
    let (jlo, jhi) = if fast {
        let jhi = if w + left >= g.kw {
            ((w + left - g.kw) / sw + 1).min(g.ow)
        } else {
            0
        };
        (left.div_ceil(sw).min(jhi), jhi)
    } else {
        (0, 0)
    };
    let nj = jhi - jlo;
    if nj > 0 {
        let phases = &mut phases[..h * sw * pl];
        for r in 0..h {
            let xr = xb + r * xs[2];
            let dst = &mut phases[r * sw * pl..(r + 1) * sw * pl];
            if sxw == 1 && sw == 1 {
                dst.copy_from_slice(&x[xr..xr + w]);
            } else if sxw == 1 && sw == 2 {
                let src = &x[xr..xr + w];
                let (e, o) = dst.split_at_mut(pl);
                for ((a, b), c2) in e.iter_mut().zip(o.iter_mut()).zip(src.chunks_exact(2)) {
                    *a = c2[0];
                    *b = c2[1];
                }
                if w % 2 == 1 {
                    e[pl - 1] = src[w - 1];
                }
            } else {
                for ph in 0..sw.min(w) {
                    let cnt = (w - ph).div_ceil(sw);
                    for (t, d) in dst[ph * pl..ph * pl + cnt].iter_mut().enumerate() {
                        *d = x[xr + (ph + sw * t) * sxw];
                    }
                }
            }
        }
    }
    let (m, idx) = (&mut m[..nj], &mut idx[..nj]);
    for i in 0..g.oh {
        let (lo, hi, _) = g.rows(i);
        if nj > 0 {
            // Kept as the offset in the plane less the output column's start, j·sw.
            let mut first = true;
            for r in lo..hi {
                let prow = &phases[r * sw * pl..(r + 1) * sw * pl];
                for v in 0..g.kw {
                    let off = v as isize - left as isize;
                    let ph = off.rem_euclid(sw as isize) as usize;
                    let t0 = (jlo as isize + off.div_euclid(sw as isize)) as usize;
                    let tap = &prow[ph * pl + t0..][..nj];
                    let k = (r * w) as u32;
                    let k = k.wrapping_add(off as i32 as u32);
                    running_max(m, idx, tap, k, first);
                    first = false;
                }
            }
            for (jj, (ix, mv)) in idx.iter_mut().zip(m.iter_mut()).enumerate() {
                *ix = ix.wrapping_add(((jlo + jj) * sw) as u32);
                #[allow(clippy::eq_op)]
                let nan = *mv != *mv;
                *mv = if nan { f32::NAN } else { *mv };
            }
        }
        for j in 0..jlo {
            let (v, at) = window_max(g, x, xs, xb, lo, hi, j);
            sink(i, Chosen::One { j, v, at });
        }
        if nj > 0 {
            sink(i, Chosen::Row { jlo, m, at: idx });
        }
        for j in jhi..g.ow {
            let (v, at) = window_max(g, x, xs, xb, lo, hi, j);
            sink(i, Chosen::One { j, v, at });
        }
    }
}

/// The max of window (rows lo..hi, output column j) on the plane at `xb`, scanned: its value
/// (a NaN canonical) and plane offset.
#[inline(always)]
fn window_max(
    g: &Geom,
    x: &[f32],
    xs: [usize; 4],
    xb: usize,
    lo: usize,
    hi: usize,
    j: usize,
) -> (f32, usize) {
    let (clo, chi, _) = g.cols(j);
    let mut best = x[xb + lo * xs[2] + clo * xs[3]];
    let mut at = lo * g.w + clo;
    for r in lo..hi {
        let xr = xb + r * xs[2];
        for col in clo..chi {
            let v = x[xr + col * xs[3]];
            if v > best || (v.is_nan() && !best.is_nan()) {
                best = v;
                at = r * g.w + col;
            }
        }
    }
    (if best.is_nan() { f32::NAN } else { best }, at)
}

multiversion! {
    fn plane_backward(p: &Bwd<'_>, s: &mut BwdScratch, out: &SharedOut<'_>, plane: usize) {
        let g = &p.g;
        let (n, c) = (plane / g.c, plane % g.c);
        let (h, w) = (g.h, g.w);
        let BwdScratch { acc, m, idx, phases } = s;
        let acc = &mut acc[..h * w];
        acc.fill(0.0);
        let xb = n * p.xs[0] + c * p.xs[1];
        let dyb = n * p.dys[0] + c * p.dys[1];
        if g.mode.is_max() {
            // dy routed to each window's choice.
            let (dy, dys) = (p.dy, p.dys);
            choose_max_plane(g, p.x, p.xs, p.fast, xb, (phases, m, idx), |i, ch| {
                let dyr = dyb + i * dys[2];
                match ch {
                    Chosen::Row { jlo, at, .. } => {
                        for (jj, &a) in at.iter().enumerate() {
                            acc[a as usize] += dy[dyr + (jlo + jj) * dys[3]];
                        }
                    }
                    Chosen::One { j, at, .. } => acc[at] += dy[dyr + j * dys[3]],
                }
            });
        } else {
            for i in 0..g.oh {
                let (lo, hi, rc) = g.rows(i);
                let dyr = dyb + i * p.dys[2];
                for j in 0..g.ow {
                    let d = p.dy[dyr + j * p.dys[3]];
                    let (clo, chi, _) = g.cols(j);
                    let gv = d / (rc as f32 * p.cc[j]);
                    for r in lo..hi {
                        for a in &mut acc[r * w + clo..r * w + chi] {
                            *a += gv;
                        }
                    }
                }
            }
        }
        let dxb = n * p.dxs[0] + c * p.dxs[1];
        for r in 0..h {
            // SAFETY: plane (n, c) of dx belongs to this item alone.
            unsafe { store(out, p.blend, &acc[r * w..(r + 1) * w], dxb + r * p.dxs[2], p.dxs[3]) };
        }
    }
}

multiversion! {
    fn chan_backward(p: &Bwd<'_>, s: &mut BwdScratch, out: &SharedOut<'_>, item: usize) {
        let g = &p.g;
        let (n, cblk) = (item / p.cblocks, item % p.cblocks);
        let c0 = cblk * p.cb;
        let cl = p.cb.min(g.c - c0);
        let (h, w) = (g.h, g.w);
        let acc = &mut s.acc[..h * w * cl];
        acc.fill(0.0);
        let m = &mut s.m[..cl];
        let idx = &mut s.idx[..cl];
        let xb = n * p.xs[0] + c0;
        let dyb = n * p.dys[0] + c0;
        for i in 0..g.oh {
            let (lo, hi, rc) = g.rows(i);
            for j in 0..g.ow {
                let (clo, chi, cc) = g.cols(j);
                let dyv = &p.dy[dyb + i * p.dys[2] + j * p.dys[3]..][..cl];
                if g.mode.is_max() {
                    // Per channel: the first maximum (first NaN) over the taps in row-major
                    // order, as a tap number; then each tap takes dy where it was chosen.
                    let mut t = 0u32;
                    for r in lo..hi {
                        for col in clo..chi {
                            let src = &p.x[xb + r * p.xs[2] + col * p.xs[3]..][..cl];
                            running_max(m, idx, src, t, t == 0);
                            t += 1;
                        }
                    }
                    let mut t = 0u32;
                    for r in lo..hi {
                        for col in clo..chi {
                            let a = &mut acc[(r * w + col) * cl..][..cl];
                            for ((a, &ix), &d) in a.iter_mut().zip(idx.iter()).zip(dyv) {
                                *a += if ix == t { d } else { 0.0 };
                            }
                            t += 1;
                        }
                    }
                } else {
                    let dv = (rc * cc) as f32;
                    for (mv, &d) in m.iter_mut().zip(dyv) {
                        *mv = d / dv;
                    }
                    for r in lo..hi {
                        for col in clo..chi {
                            add_into(&mut acc[(r * w + col) * cl..][..cl], m);
                        }
                    }
                }
            }
        }
        let dxb = n * p.dxs[0] + c0;
        for r in 0..h {
            for col in 0..w {
                let src = &acc[(r * w + col) * cl..][..cl];
                // SAFETY: (n, this channel block) of dx belongs to this item alone.
                unsafe { store(out, p.blend, src, dxb + r * p.dxs[2] + col * p.dxs[3], 1) };
            }
        }
    }
}

/// Scratch floats per thread beyond which the packed-channels backward splits channels.
const BWD_SCRATCH_CAP: usize = 1 << 16;

/// dx = alpha · pool_bwd(dy) + beta · dx (cudnnPoolingBackward; y is not needed: max
/// recomputes its choice from x). Max routes each dy to the element the forward chose (see
/// the module's card), averages spread dy / divisor over the window's real elements;
/// overlapping windows add up. x and dx have the same dimensions, dy the output's; any
/// layout and strides each.
///
/// # Errors
/// [`Error::BadParam`] naming `dy` or `dx` for other dimensions, `alpha`/`beta` when not
/// finite, `pool.kernel_h`/`pool.kernel_w` for a window larger than the padded input;
/// [`Error::BufferTooSmall`] naming `x`, `dy` or `dx`; [`Error::Unsupported`] for types other
/// than f32.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    ctx: &ExecContext<'_>,
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    dy_desc: &TensorDesc,
    dy: &[f32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
) -> Result<()> {
    let g = check_common(desc, blend, x_desc, x.len(), "dy", dy_desc)?;
    super::check_same_dims("dx", x_desc, dx_desc)?;
    check_buffer("dy", dy_desc, dy.len())?;
    check_buffer("dx", dx_desc, dx.len())?;
    if u32::try_from(g.kh.saturating_mul(g.kw)).is_err() {
        return Err(Error::Unsupported {
            what: "pooling backward with windows of more than 2^32 elements".into(),
        });
    }
    let features = ctx.features();
    let work = x_desc.elements().saturating_add(dy_desc.elements());
    let cc = column_counts(&g)?;
    let plane = g.h * g.w; // cannot overflow: bounded by x's checked span
    let packed = channels_packed(&g, &[x_desc, dy_desc, dx_desc]);
    let cb = if packed {
        channel_block(g.c, g.n, ctx.threads, (BWD_SCRATCH_CAP / plane) & !15)
    } else {
        1
    };
    let cblocks = g.c.div_ceil(cb);
    // The plane path's max chooses rows of windows at once when plane offsets fit in u32;
    // its scratch then holds the plane's phases (fewer than w + sw floats a row).
    let fast = !packed && g.mode.is_max() && g.sw <= g.w && u32::try_from(2 * plane).is_ok();
    let (row_choices, phase_len) = if fast {
        (g.ow, g.h * g.sw * g.w.div_ceil(g.sw))
    } else {
        (0, 0)
    };
    let p = Bwd {
        g,
        blend,
        x,
        dy,
        xs: x_desc.strides(),
        dys: dy_desc.strides(),
        dxs: dx_desc.strides(),
        cc: &cc,
        cb,
        cblocks,
        fast,
    };
    let out = SharedOut::new(dx);
    let init = || {
        let len = plane
            .checked_mul(cb)
            .ok_or_else(|| Error::overflow("pooling scratch", "plane times channels"))?;
        Ok(BwdScratch {
            acc: crate::alloc::try_vec(len, 0.0f32, "pooling dx accumulator")?,
            m: crate::alloc::try_vec(cb.max(row_choices), 0.0f32, "pooling maxima")?,
            idx: crate::alloc::try_vec(cb.max(row_choices), 0u32, "pooling choices")?,
            phases: crate::alloc::try_vec(phase_len, 0.0f32, "pooling phases")?,
        })
    };
    if packed {
        run_items_with(ctx, g.n * cblocks, work, init, |s, item| {
            chan_backward(features, &p, s, &out, item)
        })
    } else {
        run_items_with(ctx, g.n * g.c, work, init, |s, item| {
            plane_backward(features, &p, s, &out, item)
        })
    }
}

// ---------------------------------------------------------------------------------------
// Max pooling with indices (training: the forward keeps its choices for the backward)

/// The order of max pooling's indices for an output (or output gradient) described by
/// `y_desc`: [`Layout::Nhwc`] when y's channel stride is less than its column stride
/// (channels innermost, as in a packed or strided channels-last y), [`Layout::Nchw`]
/// otherwise. The indices are always dense (one u32 per output, N·C·OH·OW of them) in that
/// order, so for a packed y each index lies at the same offset as its output, as PyTorch's
/// `max_pool2d_with_indices` lays its indices out like y; for a strided y they are packed in
/// y's dimension order (see [`indices_strides`]).
///
/// ```
/// use autodnn::{layers::pool::indices_layout, DataType, Layout, TensorDesc};
/// let y = TensorDesc::new(DataType::F32, Layout::Nhwc, [8, 64, 56, 56])?;
/// assert_eq!(indices_layout(&y), Layout::Nhwc);
/// // NCHW with padded rows: the indices are packed NCHW.
/// let s = TensorDesc::with_strides(DataType::F32, [1, 2, 3, 4], [60, 30, 10, 1])?;
/// assert_eq!(indices_layout(&s), Layout::Nchw);
/// # Ok::<(), autodnn::Error>(())
/// ```
pub fn indices_layout(y_desc: &TensorDesc) -> Layout {
    let s = y_desc.strides();
    if s[1] < s[3] {
        Layout::Nhwc
    } else {
        Layout::Nchw
    }
}

/// The strides (in elements, in (N, C, H, W) order) of max pooling's indices for an output
/// described by `y_desc`: y's dimensions packed in [`indices_layout`]`(y_desc)`. Element
/// (n, c, i, j) of the indices is at n·s₀ + c·s₁ + i·s₂ + j·s₃; for a packed y these are
/// y's own strides.
///
/// ```
/// use autodnn::{layers::pool::indices_strides, DataType, Layout, TensorDesc};
/// let y = TensorDesc::new(DataType::F32, Layout::Nhwc, [2, 3, 4, 5])?;
/// assert_eq!(indices_strides(&y), y.strides());
/// // Channels-last with padded pixels: the indices are packed NHWC.
/// let s = TensorDesc::with_strides(DataType::F32, [2, 3, 4, 5], [100, 1, 20, 4])?;
/// assert_eq!(indices_strides(&s), [60, 1, 15, 3]);
/// # Ok::<(), autodnn::Error>(())
/// ```
pub fn indices_strides(y_desc: &TensorDesc) -> [usize; 4] {
    // Cannot overflow: the products are at most y's element count, which fits (its span
    // was checked and is at least the element count).
    let [_, c, h, w] = y_desc.dims();
    match indices_layout(y_desc) {
        Layout::Nchw => [c * h * w, h * w, w, 1],
        Layout::Nhwc => [h * w * c, 1, w * c, c],
    }
}

/// The checks of the indexed calls: max mode, plane offsets that fit in u32, and an
/// `indices` buffer of one element per output.
fn check_indexed(g: &Geom, len: usize) -> Result<usize> {
    if !g.mode.is_max() {
        return Err(Error::bad(
            "pool.mode",
            g.mode.name(),
            "only max pooling has indices (average pooling's backward needs none)",
        ));
    }
    if u32::try_from(g.h.saturating_mul(g.w)).is_err() {
        return Err(Error::Unsupported {
            what: "max pooling indices of planes of more than 2^32 elements".into(),
        });
    }
    let needed = g.n * g.c * g.oh * g.ow; // cannot overflow: y's span was checked
    if len < needed {
        return Err(Error::BufferTooSmall {
            field: "indices".into(),
            needed,
            got: len,
        });
    }
    Ok(needed)
}

/// Read-only inputs of the indexed forward.
struct FwdIdx<'a> {
    g: Geom,
    blend: Blend,
    x: &'a [f32],
    xs: [usize; 4],
    ys: [usize; 4],
    /// The indices' strides ([`indices_strides`]).
    is: [usize; 4],
    fast: bool,
    /// The usable features (the packed-channels path's AVX-512 window maxima).
    features: crate::cpu::Features,
}

multiversion! {
    fn plane_forward_indices(
        p: &FwdIdx<'_>,
        s: &mut BwdScratch,
        out: &SharedOut<'_>,
        out_idx: &SharedOut<'_, u32>,
        plane: usize,
    ) {
        let g = &p.g;
        let (n, c) = (plane / g.c, plane % g.c);
        let xb = n * p.xs[0] + c * p.xs[1];
        let yb = n * p.ys[0] + c * p.ys[1];
        let ib = n * p.is[0] + c * p.is[1];
        let BwdScratch { m, idx, phases, .. } = s;
        let (ys, is, blend) = (p.ys, p.is, p.blend);
        choose_max_plane(g, p.x, p.xs, p.fast, xb, (phases, m, idx), |i, ch| {
            let (yr, ir) = (yb + i * ys[2], ib + i * is[2]);
            match ch {
                Chosen::Row { jlo, m, at } => {
                    if is[3] == 1 {
                        // SAFETY: plane (n, c) of y and of the indices belongs to this item
                        // alone.
                        unsafe { out_idx.slice_mut(ir + jlo, at.len()) }.copy_from_slice(at);
                    } else {
                        for (t, &a) in at.iter().enumerate() {
                            // SAFETY: as above.
                            unsafe { out_idx.write(ir + (jlo + t) * is[3], a) };
                        }
                    }
                    // SAFETY: as above.
                    unsafe { store(out, blend, m, yr + jlo * ys[3], ys[3]) };
                }
                Chosen::One { j, v, at } => {
                    // SAFETY: as above.
                    unsafe { out_idx.write(ir + j * is[3], at as u32) };
                    // SAFETY: as above.
                    unsafe { store(out, blend, &[v], yr + j * ys[3], 1) };
                }
            }
        });
    }
}

/// Max pooling forward for training (oneDNN's forward-training workspace, PyTorch's
/// `max_pool2d_with_indices`): y as [`forward`] gives it (the same bits), and for each
/// output the offset r · W + c in its (n, c) plane of x of the element its window chose.
/// [`backward_with_indices`] then routes dy without reading x. Any layout and strides of x
/// and y.
///
/// The indices are laid out like y (as PyTorch's): N·C·OH·OW of them, packed in y's
/// dimension order, NCHW or NHWC ([`indices_layout`]); the index of output (n, c, i, j)
/// lies at n·s₀ + c·s₁ + i·s₂ + j·s₃, s = [`indices_strides`]`(y_desc)`. For a packed y
/// that is y's own offset of the output; for a strided y (padded rows or pixels, a view) the
/// indices stay packed, in y's order.
///
/// # Errors
/// As [`forward`]; [`Error::BadParam`] naming `pool.mode` for an average;
/// [`Error::BufferTooSmall`] naming `indices` when it holds fewer than N·C·OH·OW;
/// [`Error::Unsupported`] for planes of more than 2^32 elements.
///
/// # Examples
/// ```
/// use autodnn::{layers::{pool::{PoolDesc, PoolMode}, Blend}, DataType, Handle, Layout, Padding, TensorDesc};
/// let h = Handle::with_threads(1)?;
/// let pool = PoolDesc::new(PoolMode::Max, [2, 2], [2, 2], Padding::default())?;
/// let xd = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 1, 2, 4])?;
/// let yd = pool.output_desc(&xd, Layout::Nchw)?;
/// let x = [1.0, 5.0, 2.0, 0.0,
///          3.0, 4.0, 7.0, 6.0];
/// let (mut y, mut ind) = ([0.0; 2], [0u32; 2]);
/// h.pooling_forward_with_indices(&pool, Blend::default(), &xd, &x, &yd, &mut y, &mut ind)?;
/// assert_eq!((y, ind), ([5.0, 7.0], [1, 6]));
/// let mut dx = [0.0; 8];
/// h.pooling_backward_with_indices(&pool, Blend::default(), &yd, &[10.0, 20.0], &ind, &xd, &mut dx)?;
/// assert_eq!(dx, [0.0, 10.0, 0.0, 0.0, 0.0, 0.0, 20.0, 0.0]);
///
/// // NHWC, two channels (the second 10 - the first): the indices lie like y, pixel by
/// // pixel, each pixel's channels together.
/// let xd = TensorDesc::new(DataType::F32, Layout::Nhwc, [1, 2, 2, 4])?;
/// let yd = pool.output_desc(&xd, Layout::Nhwc)?;
/// let xh: Vec<f32> = x.iter().flat_map(|&v| [v, 10.0 - v]).collect();
/// let (mut y, mut ind) = ([0.0; 4], [0u32; 4]);
/// h.pooling_forward_with_indices(&pool, Blend::default(), &xd, &xh, &yd, &mut y, &mut ind)?;
/// assert_eq!((y, ind), ([5.0, 9.0, 7.0, 10.0], [1, 0, 6, 3]));
/// # Ok::<(), autodnn::Error>(())
/// ```
#[allow(clippy::too_many_arguments)]
pub fn forward_with_indices(
    ctx: &ExecContext<'_>,
    desc: &PoolDesc,
    blend: Blend,
    x_desc: &TensorDesc,
    x: &[f32],
    y_desc: &TensorDesc,
    y: &mut [f32],
    indices: &mut [u32],
) -> Result<()> {
    let g = check_common(desc, blend, x_desc, x.len(), "y", y_desc)?;
    check_buffer("y", y_desc, y.len())?;
    check_indexed(&g, indices.len())?;
    let features = ctx.features();
    let work = x_desc.elements().saturating_add(y_desc.elements());
    let plane = g.h * g.w;
    let fast = g.sw <= g.w && u32::try_from(2 * plane).is_ok();
    let (row_choices, phase_len) = if fast {
        (g.ow, g.h * g.sw * g.w.div_ceil(g.sw))
    } else {
        (0, 0)
    };
    let planes = g.n * g.c;
    let p = FwdIdx {
        g,
        blend,
        x,
        xs: x_desc.strides(),
        ys: y_desc.strides(),
        is: indices_strides(y_desc),
        fast,
        features,
    };
    let out = SharedOut::new(y);
    let out_idx = SharedOut::new(indices);
    if channels_packed(&p.g, &[x_desc, y_desc]) && p.is[1] == 1 {
        let outer = g.n * g.oh;
        let cb = channel_block(g.c, outer, ctx.threads, usize::MAX);
        let cblocks = g.c.div_ceil(cb);
        let init = || crate::alloc::try_vec(cb, 0.0f32, "pooling maxima");
        return run_items_with(ctx, outer * cblocks, work, init, |m, item| {
            let (cblk, row) = (item % cblocks, item / cblocks);
            chan_forward_indices(features, &p, m, &out, &out_idx, (row, cblk, cb))
        });
    }
    let init = || {
        Ok(BwdScratch {
            acc: Vec::new(),
            m: crate::alloc::try_vec(row_choices, 0.0f32, "pooling maxima")?,
            idx: crate::alloc::try_vec(row_choices, 0u32, "pooling choices")?,
            phases: crate::alloc::try_vec(phase_len, 0.0f32, "pooling phases")?,
        })
    };
    run_items_with(ctx, planes, work, init, |s, plane| {
        plane_forward_indices(features, &p, s, &out, &out_idx, plane)
    })
}

multiversion! {
    /// The packed-channels path of the indexed forward: output row `row` (image and row) of
    /// channel block `cblk` (of `cb` channels), each window's running maximum and its plane
    /// offset per channel, in the windows' row-major order. The indices are channels-last
    /// (`p.is[1]` = 1): each pixel's offsets are written straight out as one run.
    fn chan_forward_indices(
        p: &FwdIdx<'_>,
        m: &mut [f32],
        out: &SharedOut<'_>,
        out_idx: &SharedOut<'_, u32>,
        item: (usize, usize, usize),
    ) {
        let (row, cblk, cb) = item;
        let g = &p.g;
        let (n, i) = (row / g.oh, row % g.oh);
        let c0 = cblk * cb;
        let cl = cb.min(g.c - c0);
        let m = &mut m[..cl];
        let (lo, hi, _) = g.rows(i);
        let xbase = n * p.xs[0] + c0;
        let ybase = n * p.ys[0] + i * p.ys[2] + c0;
        let ibase = n * p.is[0] + i * p.is[2] + c0;
        #[cfg(target_arch = "x86_64")]
        let avx512 = <crate::simd::Avx512 as crate::simd::Token>::new(p.features);
        #[cfg(target_arch = "x86_64")]
        let avx2 = <crate::simd::Avx2 as crate::simd::Token>::new(p.features);
        for j in 0..g.ow {
            let (clo, chi, _) = g.cols(j);
            // SAFETY: channels c0 .. c0 + cl of pixel (n, i, j) of the indices belong to this
            // item alone (channel stride 1).
            let idx = unsafe { out_idx.slice_mut(ibase + j * p.is[3], cl) };
            // Whole vectors of channels in registers through the window where AVX-512 or
            // AVX2 runs (the portable loop below keeps the running maxima in memory, stored
            // under a mask at each tap and loaded back at the next: 9 ms for ResNet-50's 3x3
            // stride-2 pool at batch 8, where the plain forward takes 4), then the rest.
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            let win = Window {
                base: xbase,
                steps: [p.xs[2], p.xs[3]],
                w: g.w,
                rows: [lo, hi],
                cols: [clo, chi],
            };
            #[cfg(target_arch = "x86_64")]
            if let Some(t) = avx512 {
                while done + 64 <= cl {
                    let (mv, iv) = (&mut m[done..done + 64], &mut idx[done..done + 64]);
                    window_max16::<4>(t, p.x, &win, done, mv, iv);
                    done += 64;
                }
                while done + 16 <= cl {
                    let (mv, iv) = (&mut m[done..done + 16], &mut idx[done..done + 16]);
                    window_max16::<1>(t, p.x, &win, done, mv, iv);
                    done += 16;
                }
            } else if let Some(t) = avx2 {
                while done + 16 <= cl {
                    let (mv, iv) = (&mut m[done..done + 16], &mut idx[done..done + 16]);
                    window_max8::<2>(t, p.x, &win, done, mv, iv);
                    done += 16;
                }
                while done + 8 <= cl {
                    let (mv, iv) = (&mut m[done..done + 8], &mut idx[done..done + 8]);
                    window_max8::<1>(t, p.x, &win, done, mv, iv);
                    done += 8;
                }
            }
            if done < cl {
                let (mt, it) = (&mut m[done..], &mut idx[done..]);
                let mut first = true;
                for r in lo..hi {
                    for col in clo..chi {
                        let at = xbase + r * p.xs[2] + col * p.xs[3] + done;
                        let k = (r * g.w + col) as u32; // checked: the plane fits in u32
                        running_max(mt, it, &p.x[at..at + cl - done], k, first);
                        first = false;
                    }
                }
            }
            for mv in m[done..].iter_mut() {
                #[allow(clippy::eq_op)]
                let nan = *mv != *mv;
                *mv = if nan { f32::NAN } else { *mv };
            }
            // SAFETY: (n, i, j, this channel block) of y belongs to this item alone.
            unsafe { store(out, p.blend, m, ybase + j * p.ys[3], 1) };
        }
    }
}

multiversion! {
    /// The packed-channels path of the indexed backward: image `n`, channel block `cblk`,
    /// each dy added at its recorded offset into a block accumulator (offset-major, channels
    /// inner), then blended into dx. The indices are channels-last (`p.is[1]` = 1): each
    /// pixel's offsets are read as one run beside its dy.
    fn chan_backward_indices(
        p: &BwdIdx<'_>,
        acc: &mut [f32],
        out: &SharedOut<'_>,
        item: (usize, usize, usize),
    ) {
        let (n, cblk, cb) = item;
        let g = &p.g;
        let c0 = cblk * cb;
        let cl = cb.min(g.c - c0);
        let (h, w) = (g.h, g.w);
        let dyb = n * p.dys[0] + c0;
        let ib = n * p.is[0] + c0;
        let dxb = n * p.dxs[0] + c0;
        let (dys, is) = (p.dys, p.is);
        if p.direct {
            // Straight into dx (pixels dxs[3] apart, rows dense): each input row is zeroed
            // when the first offset at or past it arrives, so that the rows being added to
            // stay in cache, and the rows no offset reaches at the end.
            let ps = p.dxs[3];
            let mut zeroed = 0; // input rows of this block zeroed so far
            let zero_to = |zeroed: &mut usize, rows: usize| {
                for r in *zeroed..rows {
                    if cl == ps {
                        // SAFETY: row r of image n is this item's alone (it holds every
                        // channel: the pixels' channels are the whole stride).
                        unsafe { out.slice_mut(dxb + r * w * ps, w * ps) }.fill(0.0);
                        continue;
                    }
                    for col in 0..w {
                        // SAFETY: this channel block of pixel (n, r, col) belongs to this
                        // item alone.
                        unsafe { out.slice_mut(dxb + (r * w + col) * ps, cl) }.fill(0.0);
                    }
                }
                *zeroed = (*zeroed).max(rows);
            };
            // The last element of this block of image n: every write below is at most this.
            let end = dxb + ((h * w).max(1) - 1) * ps + cl;
            assert!(end <= out.len());
            let dx = out.as_mut_ptr();
            // Offsets below `limit` lie in rows zeroed already (the plane fits in u32).
            let mut limit = 0u32;
            for i in 0..g.oh {
                for j in 0..g.ow {
                    let dyv = &p.dy[dyb + i * dys[2] + j * dys[3]..][..cl];
                    let ats = &p.indices[ib + i * is[2] + j * is[3]..][..cl];
                    if ats.iter().fold(false, |f, &a| f | (a >= limit)) {
                        let far = ats.iter().fold(0, |m, &a| m.max(a)) as usize;
                        zero_to(&mut zeroed, far / w + 1);
                        limit = (zeroed * w) as u32;
                    }
                    for (c, (&at, &d)) in ats.iter().zip(dyv).enumerate() {
                        let k = dxb + at as usize * ps + c;
                        // SAFETY: k < end ≤ dx's length (offsets were checked to lie in the
                        // plane), and channel c0 + c of pixel (n, at) belongs to this item
                        // alone.
                        unsafe { *dx.add(k) += d };
                    }
                }
            }
            zero_to(&mut zeroed, h);
            return;
        }
        let acc = &mut acc[..h * w * cl];
        acc.fill(0.0);
        for i in 0..g.oh {
            for j in 0..g.ow {
                let dyv = &p.dy[dyb + i * dys[2] + j * dys[3]..][..cl];
                let ats = &p.indices[ib + i * is[2] + j * is[3]..][..cl];
                for (c, (&at, &d)) in ats.iter().zip(dyv).enumerate() {
                    acc[at as usize * cl + c] += d;
                }
            }
        }
        for r in 0..h {
            for col in 0..w {
                let src = &acc[(r * w + col) * cl..][..cl];
                // SAFETY: (n, this channel block) of dx belongs to this item alone.
                unsafe { store(out, p.blend, src, dxb + r * p.dxs[2] + col * p.dxs[3], 1) };
            }
        }
    }
}

multiversion! {
    /// The largest of `indices` (0 for none), vectorised.
    fn largest_in(indices: &[u32]) -> u32 {
        indices.iter().fold(0, |m, &i| m.max(i))
    }
}

/// The largest of `indices` (0 for none): the backward's check that every offset lies in its
/// plane, in chunks on the context's threads for long runs.
fn largest_index(ctx: &ExecContext<'_>, features: crate::cpu::Features, indices: &[u32]) -> u32 {
    const CHUNK: usize = 1 << 16;
    if ctx.threads <= 1 || indices.len() < 2 * CHUNK {
        return largest_in(features, indices);
    }
    let far = std::sync::atomic::AtomicU32::new(0);
    crate::runtime::parallel::for_each(ctx, indices.len().div_ceil(CHUNK), |k| {
        let chunk = &indices[k * CHUNK..indices.len().min((k + 1) * CHUNK)];
        far.fetch_max(
            largest_in(features, chunk),
            std::sync::atomic::Ordering::Relaxed,
        );
    });
    far.into_inner()
}

/// Read-only inputs of the indexed backward.
struct BwdIdx<'a> {
    g: Geom,
    blend: Blend,
    dy: &'a [f32],
    indices: &'a [u32],
    dys: [usize; 4],
    /// The indices' strides ([`indices_strides`] of dy).
    is: [usize; 4],
    dxs: [usize; 4],
    /// The blend is (1, 0) and dx is dense, by planes (the planar path) or by rows of
    /// pixels (the packed-channels path): scatter straight into dx, or on planes of a large
    /// dx (`stream`) into a cached plane streamed out to dx whole ([`stream_out`]).
    direct: bool,
    /// dx is large enough to stream ([`super::streams`]).
    stream: bool,
    /// The usable features ([`stream_out`]'s non-temporal stores).
    features: crate::cpu::Features,
}

/// Writes `src` over elements `at .. at + src.len()` of `out` with [`super::stream_copy`]
/// (a dx plane written once and not read here: its lines are not fetched first, which halves
/// the traffic of zeroing dx in place and adding into it).
///
/// # Safety
/// The calling work item alone accesses those elements.
unsafe fn stream_out(features: crate::cpu::Features, out: &SharedOut<'_>, at: usize, src: &[f32]) {
    // SAFETY: the caller's item owns these elements.
    let dst = unsafe { out.slice_mut(at, src.len()) };
    super::stream_copy(features, src, dst);
}

multiversion! {
    fn plane_backward_indices(p: &BwdIdx<'_>, acc: &mut [f32], out: &SharedOut<'_>, plane: usize) {
        let g = &p.g;
        let (n, c) = (plane / g.c, plane % g.c);
        let (hw, ow) = (g.h * g.w, g.ow);
        let is = p.is;
        let ib = n * is[0] + c * is[1];
        let dyb = n * p.dys[0] + c * p.dys[1];
        let dxb = n * p.dxs[0] + c * p.dxs[1];
        // Summed in dx itself where it may be, else in the item's cached accumulator, then
        // written out.
        let in_place = p.direct && !p.stream;
        let acc: &mut [f32] = if in_place {
            // SAFETY: plane (n, c) of dx belongs to this item alone (dense: hw elements).
            unsafe { out.slice_mut(dxb, hw) }
        } else {
            &mut acc[..hw]
        };
        acc.fill(0.0);
        for i in 0..g.oh {
            let (dyr, ir) = (dyb + i * p.dys[2], ib + i * is[2]);
            if is[3] == 1 {
                let row = &p.indices[ir..ir + ow];
                if p.dys[3] == 1 {
                    for (&at, &d) in row.iter().zip(&p.dy[dyr..dyr + ow]) {
                        acc[at as usize] += d;
                    }
                } else {
                    for (j, &at) in row.iter().enumerate() {
                        acc[at as usize] += p.dy[dyr + j * p.dys[3]];
                    }
                }
            } else {
                for j in 0..ow {
                    let at = p.indices[ir + j * is[3]] as usize;
                    acc[at] += p.dy[dyr + j * p.dys[3]];
                }
            }
        }
        if p.direct && p.stream {
            // SAFETY: plane (n, c) of dx belongs to this item alone (dense: hw elements).
            unsafe { stream_out(p.features, out, dxb, acc) };
        } else if !p.direct {
            for r in 0..g.h {
                // SAFETY: plane (n, c) of dx belongs to this item alone.
                unsafe { store(out, p.blend, &acc[r * g.w..(r + 1) * g.w], dxb + r * p.dxs[2], p.dxs[3]) };
            }
        }
    }
}

/// dx = alpha · pool_bwd(dy) + beta · dx for max pooling, each dy routed to the element its
/// window chose as [`forward_with_indices`] recorded it in `indices` (x is not read;
/// overlapping windows add up, in the outputs' order). dx's dimensions are x's; any layout
/// and strides of dy and dx.
///
/// The indices are read packed in dy's dimension order ([`indices_layout`]`(dy_desc)`), as
/// the forward wrote them for a y of that order: pass dy in y's layout (or another of the
/// same order), or reorder the indices to [`indices_strides`]`(dy_desc)` first.
///
/// # Errors
/// As [`backward`] (naming `dx` where it names `x`); [`Error::BadParam`] naming `pool.mode`
/// for an average, `indices` for an offset outside its plane (checked before anything is
/// written); [`Error::BufferTooSmall`] naming `indices`.
#[allow(clippy::too_many_arguments)]
pub fn backward_with_indices(
    ctx: &ExecContext<'_>,
    desc: &PoolDesc,
    blend: Blend,
    dy_desc: &TensorDesc,
    dy: &[f32],
    indices: &[u32],
    dx_desc: &TensorDesc,
    dx: &mut [f32],
) -> Result<()> {
    blend.check()?;
    let g = check_geometry(desc, dx_desc, "dy", dy_desc)?;
    check_buffer("dy", dy_desc, dy.len())?;
    check_buffer("dx", dx_desc, dx.len())?;
    let needed = check_indexed(&g, indices.len())?;
    let plane = g.h * g.w;
    let features = ctx.features();
    if largest_index(ctx, features, &indices[..needed]) as usize >= plane {
        let k = indices[..needed]
            .iter()
            .position(|&i| i as usize >= plane)
            .unwrap_or(0);
        return Err(Error::bad(
            "indices",
            format!("{} at output {k}", indices[k]),
            format!(
                "must be an offset in the {}x{} plane (below {plane})",
                g.h, g.w
            ),
        ));
    }
    let work = dx_desc.elements().saturating_add(dy_desc.elements());
    let dxs = dx_desc.strides();
    let direct_blend = blend.alpha == 1.0 && !blend.reads_output();
    let direct = direct_blend && dxs[3] == 1 && dxs[2] == g.w;
    let planes = g.n * g.c;
    let p = BwdIdx {
        g,
        blend,
        dy,
        indices,
        dys: dy_desc.strides(),
        is: indices_strides(dy_desc),
        dxs,
        direct,
        stream: super::streams(false, dx_desc),
        features,
    };
    let out = SharedOut::new(dx);
    if channels_packed(&p.g, &[dy_desc, dx_desc]) && p.is[1] == 1 {
        // Straight into dx where it is dense by rows and the blend only writes: no scratch,
        // so no cap on the channels per block.
        let direct = direct_blend && dxs[2] == g.w * dxs[3];
        let cap = if direct {
            g.c
        } else {
            (BWD_SCRATCH_CAP / plane) & !15
        };
        let cb = channel_block(g.c, g.n, ctx.threads, cap);
        let cblocks = g.c.div_ceil(cb);
        let len = if direct { 0 } else { plane }
            .checked_mul(cb)
            .ok_or_else(|| Error::overflow("pooling scratch", "plane times channels"))?;
        let p = BwdIdx { direct, ..p };
        let init = || crate::alloc::try_vec(len, 0.0f32, "pooling dx accumulator");
        return run_items_with(ctx, g.n * cblocks, work, init, |s, item| {
            let (n, cblk) = (item / cblocks, item % cblocks);
            chan_backward_indices(features, &p, s, &out, (n, cblk, cb))
        });
    }
    run_items_with(
        ctx,
        planes,
        work,
        || {
            let len = if p.direct && !p.stream { 0 } else { plane };
            crate::alloc::try_vec(len, 0.0f32, "pooling dx accumulator")
        },
        |acc, plane| plane_backward_indices(features, &p, acc, &out, plane),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_sizes_floor_and_ceil() {
        // PyTorch: 5 → k3 s2 p0: floor 2, ceil 2; 6 → floor 2, ceil 3.
        assert_eq!(out_len(5, 3, 2, 0, 0, false, "k").unwrap(), 2);
        assert_eq!(out_len(5, 3, 2, 0, 0, true, "k").unwrap(), 2);
        assert_eq!(out_len(6, 3, 2, 0, 0, true, "k").unwrap(), 3);
        // The last ceil window may not start in the bottom padding.
        assert_eq!(out_len(4, 2, 2, 1, 1, true, "k").unwrap(), 3);
        assert_eq!(out_len(4, 3, 3, 1, 2, true, "k").unwrap(), 2);
        assert_eq!(out_len(4, 3, 3, 1, 2, false, "k").unwrap(), 2);
        assert_eq!(out_len(112, 3, 2, 1, 1, false, "k").unwrap(), 56);
        assert!(out_len(2, 5, 1, 1, 1, false, "k").is_err());
    }

    #[test]
    fn blocks_of_channels() {
        assert_eq!(channel_block(64, 56, 1, usize::MAX), 64);
        assert_eq!(channel_block(2048, 1, 2, usize::MAX), 256);
        assert_eq!(channel_block(64, 1, 2, 16), 16);
        assert_eq!(channel_block(5, 1, 8, 0), 5);
    }
}
