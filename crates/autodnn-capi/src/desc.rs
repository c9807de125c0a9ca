//! Tensor, filter, convolution and activation descriptors: opaque, heap-allocated, set after
//! creation as in cuDNN.

use std::ffi::c_int;

use dnn::{
    Activation, ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout,
    Padding, TensorDesc,
};

use crate::handle::{autodnnMathType_t, math_mode, AUTODNN_DEFAULT_MATH};
use crate::ptr::{is_live, out, register, unregister};
use crate::status::{autodnnStatus_t, bad, guard, not_set, Failure, R};

/// Element type of a tensor (cuDNN's `cudnnDataType_t`; the values are cuDNN's).
pub type autodnnDataType_t = c_int;
/// 32-bit IEEE float: every call computes it.
pub const AUTODNN_DATA_FLOAT: autodnnDataType_t = 0;
/// 16-bit IEEE float (`uint16_t` bits): the forward convolution takes x and w of this type
/// with y of the same type or float (f32 sums, y rounded once to nearest even); the other
/// calls answer `AUTODNN_STATUS_NOT_SUPPORTED`.
pub const AUTODNN_DATA_HALF: autodnnDataType_t = 2;
/// bfloat16 (`uint16_t` bits): as `AUTODNN_DATA_HALF`.
pub const AUTODNN_DATA_BFLOAT16: autodnnDataType_t = 9;

/// Memory order of a packed 4-D tensor or filter (cuDNN's `cudnnTensorFormat_t`).
pub type autodnnTensorFormat_t = c_int;
/// Tensors N, C, H, W (width fastest); filters K, C, R, S.
pub const AUTODNN_TENSOR_NCHW: autodnnTensorFormat_t = 0;
/// Tensors N, H, W, C (channels fastest); filters K, R, S, C.
pub const AUTODNN_TENSOR_NHWC: autodnnTensorFormat_t = 1;

/// Whether the filter is flipped (cuDNN's `cudnnConvolutionMode_t`).
pub type autodnnConvolutionMode_t = c_int;
/// The mathematical convolution: the filter flipped in both spatial dimensions.
pub const AUTODNN_CONVOLUTION: autodnnConvolutionMode_t = 0;
/// The filter as is: what deep-learning frameworks compute.
pub const AUTODNN_CROSS_CORRELATION: autodnnConvolutionMode_t = 1;

/// The activation of `autodnnConvolutionBiasActivationForward` (cuDNN's
/// `cudnnActivationMode_t`; the values shared with cuDNN are cuDNN's).
pub type autodnnActivationMode_t = c_int;
/// 1 / (1 + e^-v).
pub const AUTODNN_ACTIVATION_SIGMOID: autodnnActivationMode_t = 0;
/// max(v, 0).
pub const AUTODNN_ACTIVATION_RELU: autodnnActivationMode_t = 1;
/// tanh(v).
pub const AUTODNN_ACTIVATION_TANH: autodnnActivationMode_t = 2;
/// min(max(v, 0), coef): relu6 with coef = 6.
pub const AUTODNN_ACTIVATION_CLIPPED_RELU: autodnnActivationMode_t = 3;
/// v.
pub const AUTODNN_ACTIVATION_IDENTITY: autodnnActivationMode_t = 5;
/// v · sigmoid(v) (SiLU); coef is not used.
pub const AUTODNN_ACTIVATION_SWISH: autodnnActivationMode_t = 6;
/// v · Φ(v), the erf form (not in cuDNN).
pub const AUTODNN_ACTIVATION_GELU: autodnnActivationMode_t = 7;
/// v for v ≥ 0, coef · v below (not in cuDNN).
pub const AUTODNN_ACTIVATION_LEAKY_RELU: autodnnActivationMode_t = 8;

/// A 4-D tensor's element type, dimensions (N, C, H, W) and strides.
pub struct autodnnTensorStruct {
    desc: Option<TensorDesc>,
}
/// A pointer to a tensor descriptor, made by `autodnnCreateTensorDescriptor`.
pub type autodnnTensorDescriptor_t = *mut autodnnTensorStruct;

/// A filter's element type, layout and dimensions (K, C per group, R, S).
pub struct autodnnFilterStruct {
    desc: Option<FilterDesc>,
}
/// A pointer to a filter descriptor, made by `autodnnCreateFilterDescriptor`.
pub type autodnnFilterDescriptor_t = *mut autodnnFilterStruct;

/// A 2-D convolution's padding, strides, dilations, mode and group count.
pub struct autodnnConvolutionStruct {
    /// (padding, stride, dilation, mode) once set.
    geometry: Option<(Padding, [usize; 2], [usize; 2], ConvMode)>,
    groups: usize,
    /// `AUTODNN_DEFAULT_MATH` (the handle's) unless set.
    math: autodnnMathType_t,
}
/// A pointer to a convolution descriptor, made by `autodnnCreateConvolutionDescriptor`.
pub type autodnnConvolutionDescriptor_t = *mut autodnnConvolutionStruct;

/// An activation applied last by `autodnnConvolutionBiasActivationForward`.
pub struct autodnnActivationStruct {
    act: Option<Activation>,
}
/// A pointer to an activation descriptor, made by `autodnnCreateActivationDescriptor`.
pub type autodnnActivationDescriptor_t = *mut autodnnActivationStruct;

/// What the shared create, check and destroy code needs of a descriptor kind.
trait Descriptor: Sized {
    const KIND: &'static str;
    fn fresh() -> Self;
}

impl Descriptor for autodnnTensorStruct {
    const KIND: &'static str = "tensor descriptor";
    fn fresh() -> Self {
        autodnnTensorStruct { desc: None }
    }
}
impl Descriptor for autodnnFilterStruct {
    const KIND: &'static str = "filter descriptor";
    fn fresh() -> Self {
        autodnnFilterStruct { desc: None }
    }
}
impl Descriptor for autodnnConvolutionStruct {
    const KIND: &'static str = "convolution descriptor";
    fn fresh() -> Self {
        autodnnConvolutionStruct {
            geometry: None,
            groups: 1,
            math: AUTODNN_DEFAULT_MATH,
        }
    }
}
impl Descriptor for autodnnActivationStruct {
    const KIND: &'static str = "activation descriptor";
    fn fresh() -> Self {
        autodnnActivationStruct { act: None }
    }
}

/// # Safety
/// `slot` is null or writable.
unsafe fn create<D: Descriptor>(slot: *mut *mut D, field: &str) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let slot = unsafe { out(slot, field) }?;
        let p = Box::into_raw(Box::new(D::fresh()));
        register(p, D::KIND);
        *slot = p;
        Ok(())
    })
}

/// # Safety
/// `d` is null or a live descriptor from `create`.
unsafe fn destroy<D: Descriptor>(d: *mut D, field: &str) -> autodnnStatus_t {
    guard(|| {
        if d.is_null() {
            return Ok(());
        }
        if !unregister(d, D::KIND) {
            return Err(not_live::<D>(d, field));
        }
        // SAFETY: made by Box::into_raw in `create` and live until the line above.
        drop(unsafe { Box::from_raw(d) });
        Ok(())
    })
}

fn not_live<D: Descriptor>(d: *mut D, field: &str) -> Failure {
    if d.is_null() {
        bad(field, "NULL", &format!("must be a {}", D::KIND))
    } else {
        bad(
            field,
            format!("{d:p}"),
            &format!("is not a live {} (destroyed, or of another kind)", D::KIND),
        )
    }
}

/// The descriptor behind `d`, checked to be a live one of its kind, to be set.
///
/// # Safety
/// No other thread uses the descriptor while it is set (as in cuDNN).
unsafe fn live_mut<'a, D: Descriptor>(d: *mut D, field: &str) -> R<&'a mut D> {
    if !is_live(d, D::KIND) {
        return Err(not_live::<D>(d, field));
    }
    // SAFETY: `d` was made by Box::into_raw in `create` and is not destroyed (registered);
    // the caller guarantees that no other thread uses it meanwhile.
    Ok(unsafe { &mut *d })
}

/// The descriptor behind `d`, checked to be a live one of its kind, to be read (several
/// threads may read one descriptor at once).
///
/// # Safety
/// No other thread sets or destroys the descriptor meanwhile.
unsafe fn live<'a, D: Descriptor>(d: *mut D, field: &str) -> R<&'a D> {
    if !is_live(d, D::KIND) {
        return Err(not_live::<D>(d, field));
    }
    // SAFETY: `d` was made by Box::into_raw in `create` and is not destroyed (registered);
    // the caller guarantees that no thread writes it meanwhile.
    Ok(unsafe { &*d })
}

/// The tensor descriptor `d`, set.
///
/// # Safety
/// As [`live`].
pub(crate) unsafe fn tensor(d: autodnnTensorDescriptor_t, field: &str) -> R<TensorDesc> {
    // SAFETY: forwarded.
    let t = unsafe { live(d, field) }?;
    t.desc
        .ok_or_else(|| not_set(field, "autodnnSetTensor4dDescriptor"))
}

/// The filter descriptor `d`, set.
///
/// # Safety
/// As [`live`].
pub(crate) unsafe fn filter(d: autodnnFilterDescriptor_t, field: &str) -> R<FilterDesc> {
    // SAFETY: forwarded.
    let f = unsafe { live(d, field) }?;
    f.desc
        .ok_or_else(|| not_set(field, "autodnnSetFilter4dDescriptor"))
}

/// The convolution descriptor `d`, set.
///
/// # Safety
/// As [`live`].
pub(crate) unsafe fn convolution(d: autodnnConvolutionDescriptor_t, field: &str) -> R<ConvDesc> {
    // SAFETY: forwarded.
    let c = unsafe { live(d, field) }?;
    let (pad, stride, dilation, mode) = c
        .geometry
        .ok_or_else(|| not_set(field, "autodnnSetConvolution2dDescriptor"))?;
    Ok(ConvDesc::new(pad, stride, dilation, c.groups, mode)?)
}

/// The math type the convolution descriptor `d` asks for; `None` for the handle's.
///
/// # Safety
/// As [`live`].
pub(crate) unsafe fn convolution_math(
    d: autodnnConvolutionDescriptor_t,
    field: &str,
) -> R<Option<dnn::MathMode>> {
    // SAFETY: forwarded.
    let c = unsafe { live(d, field) }?;
    math_mode(field, c.math)
}

/// The activation of descriptor `d`; identity when `d` is NULL.
///
/// # Safety
/// As [`live`].
pub(crate) unsafe fn activation(d: autodnnActivationDescriptor_t, field: &str) -> R<Activation> {
    if d.is_null() {
        return Ok(Activation::None);
    }
    // SAFETY: forwarded.
    let a = unsafe { live(d, field) }?;
    a.act
        .ok_or_else(|| not_set(field, "autodnnSetActivationDescriptor"))
}

fn data_type(t: autodnnDataType_t) -> R<DataType> {
    match t {
        AUTODNN_DATA_FLOAT => Ok(DataType::F32),
        AUTODNN_DATA_HALF => Ok(DataType::F16),
        AUTODNN_DATA_BFLOAT16 => Ok(DataType::Bf16),
        _ => Err(bad(
            "dataType",
            t,
            "must be AUTODNN_DATA_FLOAT, AUTODNN_DATA_HALF or AUTODNN_DATA_BFLOAT16",
        )),
    }
}

fn format(f: autodnnTensorFormat_t) -> R<Layout> {
    match f {
        AUTODNN_TENSOR_NCHW => Ok(Layout::Nchw),
        AUTODNN_TENSOR_NHWC => Ok(Layout::Nhwc),
        _ => Err(bad(
            "format",
            f,
            "must be AUTODNN_TENSOR_NCHW or AUTODNN_TENSOR_NHWC",
        )),
    }
}

/// A dimension or stride from C: at least 1 (0 is left to the library's checks, which name
/// the field).
fn size(field: &str, v: c_int) -> R<usize> {
    usize::try_from(v).map_err(|_| bad(field, v, "must not be negative"))
}

fn sizes<const N: usize>(names: [&str; N], values: [c_int; N]) -> R<[usize; N]> {
    let mut out = [0usize; N];
    for i in 0..N {
        out[i] = size(names[i], values[i])?;
    }
    Ok(out)
}

/// Makes an unset tensor descriptor and stores it in `*tensorDesc`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreateTensorDescriptor(
    tensorDesc: *mut autodnnTensorDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { create(tensorDesc, "tensorDesc") }
}

/// Sets a packed 4-D tensor: dimensions (n, c, h, w) whatever the format.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetTensor4dDescriptor(
    tensorDesc: autodnnTensorDescriptor_t,
    format: autodnnTensorFormat_t,
    dataType: autodnnDataType_t,
    n: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let t = unsafe { live_mut(tensorDesc, "tensorDesc") }?;
        let dims = sizes(
            ["tensor.n", "tensor.c", "tensor.h", "tensor.w"],
            [n, c, h, w],
        )?;
        t.desc = Some(TensorDesc::new(
            data_type(dataType)?,
            self::format(format)?,
            dims,
        )?);
        Ok(())
    })
}

/// Sets a 4-D tensor with explicit strides, in elements (cuDNN's
/// `cudnnSetTensor4dDescriptorEx`); strides must not make two elements share memory.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnSetTensor4dDescriptorEx(
    tensorDesc: autodnnTensorDescriptor_t,
    dataType: autodnnDataType_t,
    n: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
    nStride: c_int,
    cStride: c_int,
    hStride: c_int,
    wStride: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let t = unsafe { live_mut(tensorDesc, "tensorDesc") }?;
        let dims = sizes(
            ["tensor.n", "tensor.c", "tensor.h", "tensor.w"],
            [n, c, h, w],
        )?;
        let strides = sizes(
            [
                "tensor.stride_n",
                "tensor.stride_c",
                "tensor.stride_h",
                "tensor.stride_w",
            ],
            [nStride, cStride, hStride, wStride],
        )?;
        t.desc = Some(TensorDesc::with_strides(
            data_type(dataType)?,
            dims,
            strides,
        )?);
        Ok(())
    })
}

/// Reads a set tensor descriptor back: element type, dimensions and strides (any output
/// pointer may be NULL).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetTensor4dDescriptor(
    tensorDesc: autodnnTensorDescriptor_t,
    dataType: *mut autodnnDataType_t,
    n: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    w: *mut c_int,
    nStride: *mut c_int,
    cStride: *mut c_int,
    hStride: *mut c_int,
    wStride: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let t = unsafe { tensor(tensorDesc, "tensorDesc") }?;
        let dt = match t.dtype() {
            DataType::F32 => AUTODNN_DATA_FLOAT,
            DataType::F16 => AUTODNN_DATA_HALF,
            DataType::Bf16 => AUTODNN_DATA_BFLOAT16,
        };
        if !dataType.is_null() {
            // SAFETY: non-null: the caller gives a writable int.
            *unsafe { out(dataType, "dataType") }? = dt;
        }
        let [dn, dc, dh, dw] = t.dims();
        let [sn, sc, sh, sw] = t.strides();
        for (p, v, name) in [
            (n, dn, "n"),
            (c, dc, "c"),
            (h, dh, "h"),
            (w, dw, "w"),
            (nStride, sn, "nStride"),
            (cStride, sc, "cStride"),
            (hStride, sh, "hStride"),
            (wStride, sw, "wStride"),
        ] {
            if !p.is_null() {
                // SAFETY: non-null: the caller gives a writable int.
                *unsafe { out(p, name) }? = to_int(name, v)?;
            }
        }
        Ok(())
    })
}

pub(crate) fn to_int(field: &str, v: usize) -> R<c_int> {
    c_int::try_from(v).map_err(|_| {
        Failure::from(dnn::Error::Overflow {
            field: field.into(),
            detail: format!("{v} does not fit in an int"),
        })
    })
}

/// Frees a tensor descriptor (NULL is accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn autodnnDestroyTensorDescriptor(
    tensorDesc: autodnnTensorDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { destroy(tensorDesc, "tensorDesc") }
}

/// Makes an unset filter descriptor and stores it in `*filterDesc`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreateFilterDescriptor(
    filterDesc: *mut autodnnFilterDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { create(filterDesc, "filterDesc") }
}

/// Sets a packed filter of k output channels, c input channels per group, h rows and w
/// columns; `AUTODNN_TENSOR_NCHW` is the K, C, R, S order, `AUTODNN_TENSOR_NHWC` K, R, S, C.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetFilter4dDescriptor(
    filterDesc: autodnnFilterDescriptor_t,
    dataType: autodnnDataType_t,
    format: autodnnTensorFormat_t,
    k: c_int,
    c: c_int,
    h: c_int,
    w: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let f = unsafe { live_mut(filterDesc, "filterDesc") }?;
        let dims = sizes(["w.k", "w.c", "w.r", "w.s"], [k, c, h, w])?;
        let layout = match self::format(format)? {
            Layout::Nchw => FilterLayout::Kcrs,
            Layout::Nhwc => FilterLayout::Krsc,
        };
        f.desc = Some(FilterDesc::new(data_type(dataType)?, layout, dims)?);
        Ok(())
    })
}

/// Frees a filter descriptor (NULL is accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn autodnnDestroyFilterDescriptor(
    filterDesc: autodnnFilterDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { destroy(filterDesc, "filterDesc") }
}

/// Makes an unset convolution descriptor (one group) and stores it in `*convDesc`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreateConvolutionDescriptor(
    convDesc: *mut autodnnConvolutionDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { create(convDesc, "convDesc") }
}

/// Sets a 2-D convolution: zero padding on both sides of each dimension, strides (u, v) and
/// dilations (1: dense). `computeType` must be `AUTODNN_DATA_FLOAT`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnSetConvolution2dDescriptor(
    convDesc: autodnnConvolutionDescriptor_t,
    pad_h: c_int,
    pad_w: c_int,
    u: c_int,
    v: c_int,
    dilation_h: c_int,
    dilation_w: c_int,
    mode: autodnnConvolutionMode_t,
    computeType: autodnnDataType_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { live_mut(convDesc, "convDesc") }?;
        let mode = match mode {
            AUTODNN_CONVOLUTION => ConvMode::Convolution,
            AUTODNN_CROSS_CORRELATION => ConvMode::CrossCorrelation,
            _ => {
                return Err(bad(
                    "mode",
                    mode,
                    "must be AUTODNN_CONVOLUTION or AUTODNN_CROSS_CORRELATION",
                ))
            }
        };
        if computeType != AUTODNN_DATA_FLOAT {
            return Err(bad(
                "computeType",
                computeType,
                "must be AUTODNN_DATA_FLOAT",
            ));
        }
        let pad = Padding::symmetric(pad_h.into(), pad_w.into());
        let [u, v, dh, dw] = sizes(
            [
                "conv.stride_h",
                "conv.stride_w",
                "conv.dilation_h",
                "conv.dilation_w",
            ],
            [u, v, dilation_h, dilation_w],
        )?;
        // Checked now, so that a bad value is refused where it is given.
        ConvDesc::new(pad, [u, v], [dh, dw], c.groups, mode)?;
        c.geometry = Some((pad, [u, v], [dh, dw], mode));
        Ok(())
    })
}

/// Sets the number of groups (cuDNN's `cudnnSetConvolutionGroupCount`): input and output
/// channels split into this many independent parts; the filter's c is the input channels per
/// group. May be called before or after `autodnnSetConvolution2dDescriptor`.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetConvolutionGroupCount(
    convDesc: autodnnConvolutionDescriptor_t,
    groupCount: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { live_mut(convDesc, "convDesc") }?;
        let g = size("conv.groups", groupCount)?;
        ConvDesc::new(
            Padding::default(),
            [1, 1],
            [1, 1],
            g,
            ConvMode::CrossCorrelation,
        )?;
        c.groups = g;
        Ok(())
    })
}

/// Sets the math type of the calls given this descriptor (cuDNN's
/// `cudnnSetConvolutionMathType`): `AUTODNN_DEFAULT_MATH` (the handle's, the initial value),
/// `AUTODNN_STRICT_MATH` or `AUTODNN_ALLOW_BF16_MATH`. Selection, tuning results and the
/// workspace queries follow it.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetConvolutionMathType(
    convDesc: autodnnConvolutionDescriptor_t,
    mathType: autodnnMathType_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { live_mut(convDesc, "convDesc") }?;
        math_mode("mathType", mathType)?;
        c.math = mathType;
        Ok(())
    })
}

/// Stores the descriptor's math type, as set (`AUTODNN_DEFAULT_MATH` unless set), in
/// `*mathType`.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetConvolutionMathType(
    convDesc: autodnnConvolutionDescriptor_t,
    mathType: *mut autodnnMathType_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { live(convDesc, "convDesc") }?;
        // SAFETY: the caller gives a writable int.
        let t = unsafe { out(mathType, "mathType") }?;
        *t = c.math;
        Ok(())
    })
}

/// Frees a convolution descriptor (NULL is accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn autodnnDestroyConvolutionDescriptor(
    convDesc: autodnnConvolutionDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { destroy(convDesc, "convDesc") }
}

/// The dimensions (n, c, h, w) of the forward convolution's output.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolution2dForwardOutputDim(
    convDesc: autodnnConvolutionDescriptor_t,
    inputTensorDesc: autodnnTensorDescriptor_t,
    filterDesc: autodnnFilterDescriptor_t,
    n: *mut c_int,
    c: *mut c_int,
    h: *mut c_int,
    w: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each descriptor and output.
        let (conv, x, f) = unsafe {
            (
                convolution(convDesc, "convDesc")?,
                tensor(inputTensorDesc, "inputTensorDesc")?,
                filter(filterDesc, "filterDesc")?,
            )
        };
        let dims = ConvProblem::output_dims(&x, &f, &conv)?;
        let ints = [
            to_int("y.n", dims[0])?,
            to_int("y.c", dims[1])?,
            to_int("y.h", dims[2])?,
            to_int("y.w", dims[3])?,
        ];
        for (p, v, name) in [
            (n, ints[0], "n"),
            (c, ints[1], "c"),
            (h, ints[2], "h"),
            (w, ints[3], "w"),
        ] {
            // SAFETY: the caller gives writable ints.
            *unsafe { out(p, name) }? = v;
        }
        Ok(())
    })
}

/// Makes an unset activation descriptor and stores it in `*activationDesc`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreateActivationDescriptor(
    activationDesc: *mut autodnnActivationDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { create(activationDesc, "activationDesc") }
}

/// Sets the activation: `coef` is the upper bound of `AUTODNN_ACTIVATION_CLIPPED_RELU` and the
/// slope of `AUTODNN_ACTIVATION_LEAKY_RELU`, unused otherwise.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetActivationDescriptor(
    activationDesc: autodnnActivationDescriptor_t,
    mode: autodnnActivationMode_t,
    coef: f64,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let a = unsafe { live_mut(activationDesc, "activationDesc") }?;
        let act = match mode {
            AUTODNN_ACTIVATION_SIGMOID => Activation::Sigmoid,
            AUTODNN_ACTIVATION_RELU => Activation::Relu,
            AUTODNN_ACTIVATION_TANH => Activation::Tanh,
            AUTODNN_ACTIVATION_CLIPPED_RELU => {
                if !(coef.is_finite() && coef >= 0.0) {
                    return Err(bad("coef", coef, "the clip bound must be finite and >= 0"));
                }
                Activation::clip(0.0, coef as f32)?
            }
            AUTODNN_ACTIVATION_IDENTITY => Activation::None,
            AUTODNN_ACTIVATION_SWISH => Activation::Silu,
            AUTODNN_ACTIVATION_GELU => Activation::Gelu,
            AUTODNN_ACTIVATION_LEAKY_RELU => {
                if !coef.is_finite() {
                    return Err(bad("coef", coef, "the slope must be finite"));
                }
                Activation::LeakyRelu { slope: coef as f32 }
            }
            _ => {
                return Err(bad(
                    "mode",
                    mode,
                    "is not an activation this library computes (see autodnnActivationMode_t)",
                ))
            }
        };
        a.act = Some(act);
        Ok(())
    })
}

/// Frees an activation descriptor (NULL is accepted and ignored).
#[no_mangle]
pub unsafe extern "C" fn autodnnDestroyActivationDescriptor(
    activationDesc: autodnnActivationDescriptor_t,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { destroy(activationDesc, "activationDesc") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{
        AUTODNN_STATUS_BAD_PARAM, AUTODNN_STATUS_NOT_INITIALIZED, AUTODNN_STATUS_SUCCESS,
    };
    use std::ptr::null_mut;

    #[test]
    fn descriptors_are_checked_for_null_kind_and_being_set() {
        // SAFETY: every pointer is a live descriptor of this test, a null, or a descriptor of
        // another kind passed through a cast (which the live-object check refuses).
        unsafe {
            let mut t: autodnnTensorDescriptor_t = null_mut();
            let mut f: autodnnFilterDescriptor_t = null_mut();
            let mut c: autodnnConvolutionDescriptor_t = null_mut();
            assert_eq!(
                autodnnCreateTensorDescriptor(&mut t),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                autodnnCreateFilterDescriptor(&mut f),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                autodnnCreateConvolutionDescriptor(&mut c),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                autodnnCreateTensorDescriptor(null_mut()),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                tensor(t, "xDesc").unwrap_err().status,
                AUTODNN_STATUS_NOT_INITIALIZED
            );
            assert_eq!(
                tensor(null_mut(), "xDesc").unwrap_err().status,
                AUTODNN_STATUS_BAD_PARAM
            );
            // A filter descriptor where a tensor one belongs.
            let e = tensor(f.cast(), "xDesc").unwrap_err();
            assert_eq!(e.status, AUTODNN_STATUS_BAD_PARAM);
            assert!(
                e.message.contains("not a live tensor descriptor"),
                "{}",
                e.message
            );

            let set = |fmt, n| autodnnSetTensor4dDescriptor(t, fmt, AUTODNN_DATA_FLOAT, n, 3, 4, 5);
            assert_eq!(set(AUTODNN_TENSOR_NHWC, 2), AUTODNN_STATUS_SUCCESS);
            assert_eq!(tensor(t, "x").unwrap().strides(), [60, 1, 15, 3]);
            assert_eq!(set(7, 2), AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(set(AUTODNN_TENSOR_NCHW, -1), AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(set(AUTODNN_TENSOR_NCHW, 0), AUTODNN_STATUS_BAD_PARAM);
            // Strides under which elements would share memory.
            assert_eq!(
                autodnnSetTensor4dDescriptorEx(t, AUTODNN_DATA_FLOAT, 1, 2, 3, 4, 24, 1, 4, 1),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetTensor4dDescriptorEx(t, AUTODNN_DATA_FLOAT, 1, 2, 3, 4, 40, 20, 5, 1),
                AUTODNN_STATUS_SUCCESS
            );
            let (mut n, mut hs) = (0, 0);
            assert_eq!(
                autodnnGetTensor4dDescriptor(
                    t,
                    null_mut(),
                    &mut n,
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    null_mut(),
                    &mut hs,
                    null_mut()
                ),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!((n, hs), (1, 5));

            assert_eq!(
                autodnnSetFilter4dDescriptor(
                    f,
                    AUTODNN_DATA_FLOAT,
                    AUTODNN_TENSOR_NCHW,
                    8,
                    3,
                    3,
                    3
                ),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                convolution(c, "convDesc").unwrap_err().status,
                AUTODNN_STATUS_NOT_INITIALIZED
            );
            assert_eq!(
                autodnnSetConvolutionGroupCount(c, 0),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetConvolution2dDescriptor(
                    c,
                    -1,
                    0,
                    1,
                    1,
                    1,
                    1,
                    AUTODNN_CROSS_CORRELATION,
                    AUTODNN_DATA_FLOAT
                ),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetConvolution2dDescriptor(
                    c,
                    1,
                    1,
                    0,
                    1,
                    1,
                    1,
                    AUTODNN_CROSS_CORRELATION,
                    AUTODNN_DATA_FLOAT
                ),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetConvolution2dDescriptor(c, 1, 1, 1, 1, 1, 1, 5, AUTODNN_DATA_FLOAT),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetConvolution2dDescriptor(
                    c,
                    1,
                    1,
                    2,
                    2,
                    1,
                    1,
                    AUTODNN_CROSS_CORRELATION,
                    AUTODNN_DATA_FLOAT
                ),
                AUTODNN_STATUS_SUCCESS
            );
            autodnnSetTensor4dDescriptor(t, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 2, 3, 9, 10);
            let (mut on, mut oc, mut oh, mut ow) = (0, 0, 0, 0);
            assert_eq!(
                autodnnGetConvolution2dForwardOutputDim(
                    c, t, f, &mut on, &mut oc, &mut oh, &mut ow
                ),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!((on, oc, oh, ow), (2, 8, 5, 5));
            // Three groups need 3 input channels per group: the filter has 3, x has 3.
            assert_eq!(
                autodnnSetConvolutionGroupCount(c, 3),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                autodnnGetConvolution2dForwardOutputDim(
                    c, t, f, &mut on, &mut oc, &mut oh, &mut ow
                ),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnGetConvolution2dForwardOutputDim(
                    c,
                    t,
                    f,
                    null_mut(),
                    &mut oc,
                    &mut oh,
                    &mut ow
                ),
                AUTODNN_STATUS_BAD_PARAM
            );

            let mut a: autodnnActivationDescriptor_t = null_mut();
            assert_eq!(
                autodnnCreateActivationDescriptor(&mut a),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                activation(a, "act").unwrap_err().status,
                AUTODNN_STATUS_NOT_INITIALIZED
            );
            assert_eq!(activation(null_mut(), "act").unwrap(), Activation::None);
            assert_eq!(
                autodnnSetActivationDescriptor(a, 4, 0.0),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetActivationDescriptor(a, AUTODNN_ACTIVATION_CLIPPED_RELU, f64::NAN),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnSetActivationDescriptor(a, AUTODNN_ACTIVATION_CLIPPED_RELU, 6.0),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(
                activation(a, "act").unwrap(),
                Activation::Clip { lo: 0.0, hi: 6.0 }
            );

            for s in [
                autodnnDestroyTensorDescriptor(t),
                autodnnDestroyFilterDescriptor(f),
                autodnnDestroyConvolutionDescriptor(c),
                autodnnDestroyActivationDescriptor(a),
                autodnnDestroyTensorDescriptor(null_mut()),
            ] {
                assert_eq!(s, AUTODNN_STATUS_SUCCESS);
            }
        }
    }
}
