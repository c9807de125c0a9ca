//! `autodnn._autodnn`: the Python extension module. It converts arguments (NumPy arrays,
//! shapes, names) to autodnn's descriptors and slices and calls the Rust API; everything a
//! caller sees as a convenience (padding forms, records, the default handle) lives in the pure
//! Python package around it.
//!
//! Arrays are read in place when they are float32 and their strides fit a layout autodnn takes
//! (any positive element strides for activations; packed KCRS or KRSC for filters); anything
//! else is copied first. Outputs are written in place when they are float32 and packed (NCHW
//! or NHWC order); otherwise the result is computed into a packed buffer and copied into them.

mod openmp;

use std::sync::{Arc, RwLock};

use autodnn::conv::{Epilogue, EpilogueArgs, PreparedWeights, Weights};
use autodnn::gemm::GemmDesc;
use autodnn::layers::norm::{BatchNorm, ParamGrads, RunningStats, SavedStats, SavedStatsMut};
use autodnn::layers::pool::{self, PoolDesc, PoolMode};
use autodnn::layers::Blend;
use autodnn::op::{ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvForward};
use autodnn::select::{AlgoPerf, PerfStatus, Policy, Ranked};
use autodnn::{
    Activation, Bf16Units, ConvDesc, ConvMode, ConvProblem, DataType, Error, FilterDesc,
    FilterLayout, Handle, Layout, MathMode, OpKind, Padding, TensorDesc,
};
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use numpy::{PyReadonlyArrayDyn, PyReadwriteArrayDyn};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

// ---------------------------------------------------------------------------------------------
// Errors

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(ERRORS
        .get_or_try_init(py, || py.import("autodnn._errors").map(Bound::unbind))?
        .bind(py))
}

fn numpy_mod(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?
        .bind(py))
}

/// An exception of class `class` (of `autodnn._errors`) naming `argument`.
fn raise(py: Python<'_>, class: &str, argument: Option<&str>, message: String) -> PyErr {
    match errors(py).and_then(|m| m.getattr(class)) {
        Ok(cls) => match cls.call1((message.clone(), argument)) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// A bad argument (a `ValueError`), the message prefixed by the argument's name.
fn bad_arg(py: Python<'_>, argument: &str, message: impl std::fmt::Display) -> PyErr {
    raise(
        py,
        "InvalidArgumentError",
        Some(argument),
        format!("{argument}: {message}"),
    )
}

/// The Python argument a library error's field belongs to.
fn argument_of(field: &str) -> &'static str {
    let head = field.split(['.', '[']).next().unwrap_or("");
    match head {
        "x" => "x",
        "w" | "prepared" => "w",
        // An empty output comes from the input's size (with padding and the kernel).
        "y" if field == "y.h" || field == "y.w" => "x",
        "y" => "out",
        "dy" => "dy",
        "dx" => "out",
        "dw" => "out",
        "db" => "out",
        "a" => "a",
        "b" => "b",
        "c" => "c",
        "act" => "activation",
        "policy" => "policy",
        "threads" => "threads",
        "cache" => "cache",
        "alpha" => "alpha",
        "beta" => "beta",
        "stride_a" | "stride_b" | "stride_c" | "batch" => "batch",
        "epilogue" | "z" => {
            if field.contains("bias") {
                "bias"
            } else {
                "residual"
            }
        }
        "bias" => "bias",
        "residual" => "residual",
        "indices" => "indices",
        "epsilon" => "eps",
        "exponential_average_factor" => "momentum",
        "gamma" => "gamma",
        "running" => {
            if field.contains("var") {
                "running_var"
            } else {
                "running_mean"
            }
        }
        "saved" => {
            if field.contains("inv_std") {
                "inv_std"
            } else {
                "mean"
            }
        }
        // The geometry of a convolution or a pooling (whose window is `kernel_size`).
        "conv" | "pool" => {
            if field.contains("pad") {
                "padding"
            } else if field.contains("stride") {
                "stride"
            } else if field.contains("dilation") {
                "dilation"
            } else if field.contains("groups") {
                "groups"
            } else if head == "pool" {
                "kernel_size"
            } else {
                "conv"
            }
        }
        _ => "arguments",
    }
}

/// The call a library error comes from: the problem's tensors are different Python arguments
/// in each (backward data's x is `x_shape` and its y is `dy`, ...).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Forward,
    BackwardData,
    BackwardFilter,
    BackwardBias,
    Gemm,
    PoolBackward,
}

/// The Python argument of `call` a library error's field belongs to.
fn argument_in(field: &str, call: Call) -> &'static str {
    let head = field.split(['.', '[', ' ']).next().unwrap_or("");
    let arg = match (call, head) {
        // An empty output comes from the input's size (as for the forward call).
        (Call::BackwardData, "x") => "x_shape",
        (Call::BackwardData, "y") if field == "y.h" || field == "y.w" => "x_shape",
        (Call::BackwardData, "y") => "dy",
        (Call::BackwardFilter, "w" | "prepared") => "w_shape",
        (Call::BackwardFilter, "y") if field == "y.h" || field == "y.w" => "x",
        (Call::BackwardFilter, "y") => "dy",
        (Call::BackwardBias, "x" | "y" | "w" | "prepared" | "conv") => "dy",
        (Call::Gemm, "stride_a") => "a",
        (Call::Gemm, "stride_b") => "b",
        (Call::Gemm, "stride_c") => "c",
        (Call::Gemm, "batch" | "m" | "k") => "a",
        (Call::Gemm, "n") => "b",
        (Call::PoolBackward, "x" | "dx") => "x_shape",
        (Call::PoolBackward, "y") => "dy",
        _ => argument_of(field),
    };
    if arg != "arguments" {
        return arg;
    }
    // A field of no argument of its own (a tensor span, a workspace size): the sizes come
    // from the call's first array.
    match call {
        Call::Forward | Call::BackwardFilter => "x",
        Call::BackwardData | Call::BackwardBias | Call::PoolBackward => "dy",
        Call::Gemm => "a",
    }
}

/// Maps every library error to a Python exception of `autodnn._errors`.
fn lib_err(py: Python<'_>, e: Error) -> PyErr {
    lib_err_in(py, e, Call::Forward)
}

/// As `lib_err`, naming the arguments of `call`.
fn lib_err_in(py: Python<'_>, e: Error, call: Call) -> PyErr {
    let msg = e.to_string();
    match &e {
        Error::BadParam { field, .. }
        | Error::Overflow { field, .. }
        | Error::BufferTooSmall { field, .. } => {
            let arg = argument_in(field, call);
            raise(
                py,
                "InvalidArgumentError",
                Some(arg),
                format!("{arg}: {msg}"),
            )
        }
        Error::Parse { .. } => raise(py, "InvalidArgumentError", None, msg),
        Error::UnknownAlgorithm { .. } | Error::Declined { .. } => raise(
            py,
            "InvalidArgumentError",
            Some("algo"),
            format!("algo: {msg}"),
        ),
        Error::Unsupported { .. } => raise(py, "NotSupportedError", None, msg),
        Error::OutOfMemory { .. } => raise(py, "OutOfMemoryError", None, msg),
        Error::WorkspaceTooSmall { .. } => raise(py, "OutOfMemoryError", None, msg),
        Error::AllFailed { last, .. } => {
            if matches!(**last, Error::OutOfMemory { .. }) {
                raise(py, "OutOfMemoryError", None, msg)
            } else {
                raise(py, "ExecutionError", None, msg)
            }
        }
        Error::Io { .. } => raise(py, "CacheError", Some("cache"), msg),
        _ => raise(py, "Error", None, msg),
    }
}

trait OrPy<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
    fn py_in(self, py: Python<'_>, call: Call) -> PyResult<T>;
}
impl<T> OrPy<T> for autodnn::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| lib_err(py, e))
    }
    fn py_in(self, py: Python<'_>, call: Call) -> PyResult<T> {
        self.map_err(|e| lib_err_in(py, e, call))
    }
}

// ---------------------------------------------------------------------------------------------
// Arrays

/// A float32 array borrowed for reading, with its shape and element strides.
struct Input<'py> {
    arr: PyReadonlyArrayDyn<'py, f32>,
    dims: Vec<usize>,
    strides: Vec<usize>,
    copied: bool,
}

fn span_of(dims: &[usize], strides: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d - 1) * s)
        .sum::<usize>()
}

impl Input<'_> {
    fn slice(&self) -> &[f32] {
        let span = span_of(&self.dims, &self.strides);
        if span == 0 {
            return &[];
        }
        // SAFETY: the array is float32 (checked by the cast), its data pointer is aligned for
        // f32 and every stride is a positive multiple of 4 bytes (checked in `usable_strides`),
        // so the elements it addresses lie in [ptr, ptr + span) inside the allocation NumPy
        // keeps alive for the array; `arr` holds a shared borrow (rust-numpy's borrow flags
        // refuse a writer through another Rust view) for as long as the slice lives.
        unsafe { std::slice::from_raw_parts(self.arr.data(), span) }
    }
}

/// Element strides when every dimension of extent over 1 has a positive stride that is a
/// multiple of 4 bytes and the data pointer is aligned; extent-1 dimensions get stride 1 (they
/// never step).
fn usable_strides(arr: &Bound<'_, PyArrayDyn<f32>>) -> Option<Vec<usize>> {
    let ptr = arr.data() as usize;
    if !ptr.is_multiple_of(std::mem::align_of::<f32>()) {
        return None;
    }
    let mut out = Vec::with_capacity(arr.ndim());
    for (&d, &s) in arr.shape().iter().zip(arr.strides()) {
        if d <= 1 {
            out.push(1);
        } else if s > 0 && s % 4 == 0 {
            out.push(s as usize / 4);
        } else {
            return None;
        }
    }
    Some(out)
}

/// `obj` as a float32 ndarray: itself when it is one, else a C-ordered float32 copy (of real
/// numbers only: booleans, complex numbers and objects are refused).
fn as_f32<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<(Bound<'py, PyArrayDyn<f32>>, bool)> {
    if let Ok(a) = obj.cast::<PyArrayDyn<f32>>() {
        return Ok((a.clone(), false));
    }
    let np = numpy_mod(py)?;
    let a = np
        .call_method1("asarray", (obj,))
        .map_err(|e| bad_arg(py, name, format!("not an array: {e}")))?;
    let dtype = a.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    if !matches!(kind.as_str(), "f" | "i" | "u") {
        return Err(bad_arg(
            py,
            name,
            format!("dtype {} is not a real number type", dtype.str()?),
        ));
    }
    let kw = PyDict::new(py);
    kw.set_item("dtype", np.getattr("float32")?)?;
    let c = np.call_method("ascontiguousarray", (a,), Some(&kw))?;
    Ok((c.cast_into::<PyArrayDyn<f32>>()?, true))
}

/// A new C-contiguous copy of `arr`, in memory NumPy allocates (so aligned, even when `arr` is
/// a misaligned view, which `ascontiguousarray` would return as it is).
fn contiguous_copy<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyArrayDyn<f32>>,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let kw = PyDict::new(py);
    kw.set_item("order", "C")?;
    kw.set_item("copy", true)?;
    match numpy_mod(py)?.call_method("array", (arr,), Some(&kw)) {
        Ok(a) => Ok(a.cast_into::<PyArrayDyn<f32>>()?),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) => Err(raise(
            py,
            "OutOfMemoryError",
            None,
            format!("out of memory: a copy of shape {:?} ({e})", arr.shape()),
        )),
        Err(e) => Err(e),
    }
}

fn borrow_ro<'py>(
    py: Python<'py>,
    arr: &Bound<'py, PyArrayDyn<f32>>,
    name: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, f32>> {
    arr.try_readonly()
        .map_err(|e| bad_arg(py, name, format!("cannot be read: {e}")))
}

/// An input array of `ndim` dimensions, in place when its strides are usable, else copied.
fn input<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    ndim: usize,
) -> PyResult<Input<'py>> {
    let (mut arr, mut copied) = as_f32(py, obj, name)?;
    if arr.ndim() != ndim {
        return Err(bad_arg(
            py,
            name,
            format!(
                "expected a {ndim}-D array, got one of shape {:?}",
                arr.shape()
            ),
        ));
    }
    let strides = match usable_strides(&arr) {
        Some(s) => s,
        None => {
            arr = contiguous_copy(py, &arr)?;
            copied = true;
            usable_strides(&arr).ok_or_else(|| bad_arg(py, name, "unusable strides"))?
        }
    };
    let dims = arr.shape().to_vec();
    Ok(Input {
        arr: borrow_ro(py, &arr, name)?,
        dims,
        strides,
        copied,
    })
}

fn dims4(v: &[usize]) -> [usize; 4] {
    [v[0], v[1], v[2], v[3]]
}

/// Logical (N, C, H, W) dims and strides of a 4-D array given in `nhwc` order or not.
fn nchw_view(dims: &[usize], strides: &[usize], nhwc: bool) -> ([usize; 4], [usize; 4]) {
    if nhwc {
        (
            [dims[0], dims[3], dims[1], dims[2]],
            [strides[0], strides[3], strides[1], strides[2]],
        )
    } else {
        (dims4(dims), dims4(strides))
    }
}

fn packed(dims: [usize; 4], layout: Layout) -> [usize; 4] {
    let [_, c, h, w] = dims;
    match layout {
        Layout::Nchw => [c * h * w, h * w, w, 1],
        Layout::Nhwc => [h * w * c, 1, w * c, c],
    }
}

/// True when `strides` equal `want` on every dimension that steps.
fn same_steps(dims: [usize; 4], strides: [usize; 4], want: [usize; 4]) -> bool {
    (0..4).all(|i| dims[i] <= 1 || strides[i] == want[i])
}

/// The tensor descriptor of logical dims and strides; a packed layout's own strides where the
/// stepping dimensions match one (so that extent-1 dimensions do not hide the layout). Where
/// both match (C or H and W of extent 1), the call's layout wins, as for a shape (so that
/// weights prepared on a shape serve the array of that shape).
fn tensor_desc(dims: [usize; 4], strides: [usize; 4], nhwc: bool) -> autodnn::Result<TensorDesc> {
    let order = if nhwc {
        [Layout::Nhwc, Layout::Nchw]
    } else {
        [Layout::Nchw, Layout::Nhwc]
    };
    for l in order {
        if same_steps(dims, strides, packed(dims, l)) {
            return TensorDesc::new(DataType::F32, l, dims);
        }
    }
    TensorDesc::with_strides(DataType::F32, dims, strides)
}

/// A 4-D activation input and its descriptor (copied to packed order when its strides alias).
fn tensor_input<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    nhwc: bool,
) -> PyResult<(Input<'py>, TensorDesc)> {
    let inp = input(py, obj, name, 4)?;
    let (d, s) = nchw_view(&inp.dims, &inp.strides, nhwc);
    match tensor_desc(d, s, nhwc) {
        Ok(t) => Ok((inp, t)),
        Err(e) => {
            if d.contains(&0) {
                return Err(bad_arg(py, name, e));
            }
            let arr = contiguous_copy(py, &inp.arr)?;
            drop(inp);
            let inp = input(py, arr.as_any(), name, 4)?;
            let (d, s) = nchw_view(&inp.dims, &inp.strides, nhwc);
            let t = tensor_desc(d, s, nhwc).map_err(|e| bad_arg(py, name, e))?;
            Ok((
                Input {
                    copied: true,
                    ..inp
                },
                t,
            ))
        }
    }
}

/// A filter input (K, C per group, R, S): in place when packed KCRS or KRSC, else copied.
fn filter_input<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<(Input<'py>, FilterDesc)> {
    let inp = input(py, obj, name, 4)?;
    let d = dims4(&inp.dims);
    let s = dims4(&inp.strides);
    let [_, c, r, ss] = d;
    let layout = if same_steps(d, s, [c * r * ss, r * ss, ss, 1]) {
        Some(FilterLayout::Kcrs)
    } else if same_steps(d, s, [r * ss * c, 1, ss * c, c]) {
        Some(FilterLayout::Krsc)
    } else {
        None
    };
    let (inp, layout) = match layout {
        Some(l) => (inp, l),
        None => {
            let arr = contiguous_copy(py, &inp.arr)?;
            drop(inp);
            let i = input(py, arr.as_any(), name, 4)?;
            (Input { copied: true, ..i }, FilterLayout::Kcrs)
        }
    };
    let f = FilterDesc::new(DataType::F32, layout, d).map_err(|e| bad_arg(py, name, e))?;
    Ok((inp, f))
}

/// A 1-D input of `len` elements.
fn vector_input<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    len: usize,
) -> PyResult<Input<'py>> {
    let inp = input(py, obj, name, 1)?;
    if inp.dims[0] != len {
        return Err(bad_arg(
            py,
            name,
            format!("expected {len} elements, got {}", inp.dims[0]),
        ));
    }
    if inp.strides[0] == 1 {
        return Ok(inp);
    }
    // The library reads a vector packed: copy a strided view.
    let arr = contiguous_copy(py, &inp.arr)?;
    drop(inp);
    let i = input(py, arr.as_any(), name, 1)?;
    Ok(Input { copied: true, ..i })
}

/// Where an output goes: a packed float32 array written in place (the caller's or a new
/// one), and the caller's array to copy it into when that could not be written in place.
struct Output<'py> {
    target: PyReadwriteArrayDyn<'py, f32>,
    target_obj: Bound<'py, PyArrayDyn<f32>>,
    len: usize,
    copy_into: Option<Bound<'py, PyAny>>,
    /// What to return: the caller's array, or the new one (a transposed view of it for
    /// channels-last results in NCHW order).
    result: Bound<'py, PyAny>,
}

impl Output<'_> {
    fn slice(&mut self) -> &mut [f32] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `target` is a float32 array whose `len` elements are packed (no gaps:
        // checked where it was made), aligned (checked by `usable_strides` or made by NumPy),
        // and exclusively borrowed by `target` (rust-numpy's borrow flags refuse any other
        // Rust view of the same memory, inputs included) while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.target.data(), self.len) }
    }

    fn finish(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Output {
            target,
            target_obj,
            copy_into,
            result,
            ..
        } = self;
        drop(target);
        if let Some(dst) = copy_into {
            numpy_mod(py)?.call_method1("copyto", (&dst, &target_obj))?;
        }
        Ok(result.unbind())
    }
}

fn writeable(arr: &Bound<'_, PyArrayDyn<f32>>) -> PyResult<bool> {
    arr.getattr("flags")?.getattr("writeable")?.extract()
}

/// A new float32 array of `shape` (C order), zeroed when `zeroed` (an output whose prior
/// contents a nonzero beta reads), else uninitialised (numpy's `empty`: the call writes every
/// element; inside a ResNet-50 training step, the forward convolutions took 5-8 % less time
/// with outputs given than with zeroed new ones); an
/// allocation failure is an `OutOfMemoryError`.
fn new_array<'py>(
    py: Python<'py>,
    shape: &[usize],
    zeroed: bool,
) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
    let np = numpy_mod(py)?;
    let kw = PyDict::new(py);
    kw.set_item("dtype", np.getattr("float32")?)?;
    let make = if zeroed { "zeros" } else { "empty" };
    match np.call_method(make, (shape.to_vec(),), Some(&kw)) {
        Ok(a) => Ok(a.cast_into::<PyArrayDyn<f32>>()?),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) => Err(raise(
            py,
            "OutOfMemoryError",
            None,
            format!("out of memory: an output of shape {shape:?} ({e})"),
        )),
        Err(e) => Err(e),
    }
}

/// The output of logical (N, C, H, W) `dims`, in `mem` order, shown in NHWC order when `nhwc`.
/// With `out` given it must be float32 of the right shape and writable; `keep` asks for its
/// prior contents (beta ≠ 0).
fn tensor_output<'py>(
    py: Python<'py>,
    out: Option<&Bound<'py, PyAny>>,
    name: &str,
    dims: [usize; 4],
    mem: Layout,
    nhwc: bool,
    keep: bool,
) -> PyResult<(Output<'py>, TensorDesc)> {
    let [n, c, h, w] = dims;
    let shown: Vec<usize> = if nhwc {
        vec![n, h, w, c]
    } else {
        vec![n, c, h, w]
    };
    match out {
        None => {
            let (arr, result) = if nhwc || mem == Layout::Nchw {
                let a = new_array(py, &shown, keep)?;
                (a.clone(), a.into_any())
            } else {
                let a = new_array(py, &[n, h, w, c], keep)?;
                let t = a.call_method1("transpose", ((0, 3, 1, 2),))?;
                (a, t)
            };
            let layout = if nhwc { Layout::Nhwc } else { mem };
            let desc = TensorDesc::new(DataType::F32, layout, dims).py(py)?;
            let len = desc.span();
            Ok((
                Output {
                    target: arr
                        .try_readwrite()
                        .map_err(|e| bad_arg(py, name, e.to_string()))?,
                    target_obj: arr,
                    len,
                    copy_into: None,
                    result,
                },
                desc,
            ))
        }
        Some(o) => {
            let arr = o
                .cast::<PyArrayDyn<f32>>()
                .map_err(|_| bad_arg(py, name, "must be a float32 numpy array"))?;
            if arr.shape() != shown.as_slice() {
                return Err(bad_arg(
                    py,
                    name,
                    format!("expected shape {shown:?}, got {:?}", arr.shape()),
                ));
            }
            if let Some(s) = usable_strides(arr) {
                let (d, s) = nchw_view(arr.shape(), &s, nhwc);
                // Where both layouts fit (extent-1 dimensions), the one a new output would
                // have (as prepared weights expect).
                let first = if nhwc { Layout::Nhwc } else { mem };
                let second = if first == Layout::Nhwc {
                    Layout::Nchw
                } else {
                    Layout::Nhwc
                };
                for l in [first, second] {
                    if same_steps(d, s, packed(d, l)) {
                        let desc = TensorDesc::new(DataType::F32, l, d).py(py)?;
                        let target = arr.try_readwrite().map_err(|e| {
                            bad_arg(
                                py,
                                name,
                                format!("cannot be written ({e}; does it overlap an input?)"),
                            )
                        })?;
                        return Ok((
                            Output {
                                target,
                                target_obj: arr.clone(),
                                len: desc.span(),
                                copy_into: None,
                                result: o.clone(),
                            },
                            desc,
                        ));
                    }
                }
            }
            if !writeable(arr)? {
                return Err(bad_arg(py, name, "is not writeable"));
            }
            // Not packed: compute into a packed copy, then copy into it.
            let tmp = if keep {
                contiguous_copy(py, arr)?
            } else {
                new_array(py, &shown, false)?
            };
            let layout = if nhwc { Layout::Nhwc } else { Layout::Nchw };
            let desc = TensorDesc::new(DataType::F32, layout, dims).py(py)?;
            Ok((
                Output {
                    target: tmp.try_readwrite().map_err(|e| bad_arg(py, name, e))?,
                    target_obj: tmp,
                    len: desc.span(),
                    copy_into: Some(o.clone()),
                    result: o.clone(),
                },
                desc,
            ))
        }
    }
}

/// A plain output array of `shape` (filters, vectors, matrices): the caller's when float32,
/// C-contiguous and writable, else a new one (copied into the caller's at the end).
fn plain_output<'py>(
    py: Python<'py>,
    out: Option<&Bound<'py, PyAny>>,
    name: &str,
    shape: &[usize],
    keep: bool,
) -> PyResult<Output<'py>> {
    let len: usize = shape.iter().product();
    match out {
        None => {
            let a = new_array(py, shape, keep)?;
            Ok(Output {
                target: a.try_readwrite().map_err(|e| bad_arg(py, name, e))?,
                target_obj: a.clone(),
                len,
                copy_into: None,
                result: a.into_any(),
            })
        }
        Some(o) => {
            let arr = o
                .cast::<PyArrayDyn<f32>>()
                .map_err(|_| bad_arg(py, name, "must be a float32 numpy array"))?;
            if arr.shape() != shape {
                return Err(bad_arg(
                    py,
                    name,
                    format!("expected shape {shape:?}, got {:?}", arr.shape()),
                ));
            }
            if arr.is_c_contiguous() && usable_strides(arr).is_some() {
                let target = arr.try_readwrite().map_err(|e| {
                    bad_arg(
                        py,
                        name,
                        format!("cannot be written ({e}; does it overlap an input?)"),
                    )
                })?;
                return Ok(Output {
                    target,
                    target_obj: arr.clone(),
                    len,
                    copy_into: None,
                    result: o.clone(),
                });
            }
            if !writeable(arr)? {
                return Err(bad_arg(py, name, "is not writeable"));
            }
            let tmp = if keep {
                contiguous_copy(py, arr)?
            } else {
                new_array(py, shape, false)?
            };
            Ok(Output {
                target: tmp.try_readwrite().map_err(|e| bad_arg(py, name, e))?,
                target_obj: tmp,
                len,
                copy_into: Some(o.clone()),
                result: o.clone(),
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The handle

/// A library context: worker threads, selection policy, workspace budget, tuning cache, and
/// the math mode: `Handle(threads=None, policy="benchmark", workspace_limit=None, cache=None,
/// deterministic=False, math="strict", bf16_units="auto", threading="own")`.
///
/// `threading="own"` computes on the calling thread and `threads − 1` workers of the
/// handle's own; `threading="openmp"` runs the parallel work on the OpenMP team already
/// loaded in the process (PyTorch's; `threads=None` then takes the team's size,
/// `torch.get_num_threads()`), so that no thread of autodnn's competes with PyTorch's
/// spinning workers for the cores. `ValueError` when no OpenMP runtime is loaded.
#[pyclass(name = "Handle", module = "autodnn._autodnn", frozen, weakref)]
struct PyHandle {
    inner: RwLock<Option<Arc<Handle>>>,
}

/// The live handles that have a tuning-cache file, saved at exit.
static CACHED: std::sync::Mutex<Vec<std::sync::Weak<Handle>>> = std::sync::Mutex::new(Vec::new());

/// Saves the tuning cache of every live handle that has a cache file (run at exit).
#[pyfunction]
fn save_caches(py: Python<'_>) -> PyResult<()> {
    let live: Vec<Arc<Handle>> = CACHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    for h in live {
        let r = py.detach(|| h.save_tuning_cache());
        r.py(py)?;
    }
    Ok(())
}

impl Drop for PyHandle {
    fn drop(&mut self) {
        let h = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = h {
            if h.tuning_cache_path().is_some() {
                // Best effort: a destructor has no caller to report to (save_cache() and
                // close() report failures).
                let _ = h.save_tuning_cache();
            }
        }
    }
}

/// An optional int argument (None: absent); an int beyond i64 saturates (range checks follow).
fn opt_int(py: Python<'_>, v: Option<&Bound<'_, PyAny>>, name: &str) -> PyResult<Option<i64>> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(bad_arg(py, name, "expected an int, got a bool"));
    }
    let i = v
        .call_method0("__index__")
        .map_err(|_| bad_arg(py, name, "expected an int"))?;
    match i.extract::<i64>() {
        Ok(i) => Ok(Some(i)),
        Err(_) => {
            let negative = i.lt(0).unwrap_or(false);
            Ok(Some(if negative { i64::MIN } else { i64::MAX }))
        }
    }
}

/// A path argument (str, bytes or os.PathLike). Not PyO3's PathBuf extraction: that panics on
/// a str the file system encoding cannot encode (a lone surrogate).
fn path_arg(py: Python<'_>, v: &Bound<'_, PyAny>, name: &str) -> PyResult<std::path::PathBuf> {
    let bad = || bad_arg(py, name, "expected a path, True (the default file) or None");
    let p = py
        .import("os")?
        .call_method1("fspath", (v,))
        .map_err(|_| bad())?;
    if let Ok(s) = p.cast::<pyo3::types::PyString>() {
        let s: String = s
            .extract()
            .map_err(|_| bad_arg(py, name, "is not valid text"))?;
        return Ok(s.into());
    }
    let b = p.cast::<pyo3::types::PyBytes>().map_err(|_| bad())?;
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(std::ffi::OsStr::from_bytes(b.as_bytes()).into())
    }
    #[cfg(not(unix))]
    {
        let s = String::from_utf8(b.as_bytes().to_vec())
            .map_err(|_| bad_arg(py, name, "is not valid UTF-8"))?;
        Ok(s.into())
    }
}

/// A str argument (valid Unicode).
fn text(py: Python<'_>, v: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    v.extract::<String>()
        .map_err(|_| bad_arg(py, name, "expected a str"))
}

/// A bool argument (True, False or a NumPy bool).
fn flag(py: Python<'_>, v: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    v.extract::<bool>()
        .map_err(|_| bad_arg(py, name, "expected a bool"))
}

fn math_arg(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<MathMode> {
    MathMode::parse("math", &text(py, v, "math")?).map_err(|e| bad_arg(py, "math", e))
}

fn units_arg(py: Python<'_>, v: &Bound<'_, PyAny>) -> PyResult<Bf16Units> {
    Bf16Units::parse("bf16_units", &text(py, v, "bf16_units")?)
        .map_err(|e| bad_arg(py, "bf16_units", e))
}

impl PyHandle {
    fn get(&self, py: Python<'_>) -> PyResult<Arc<Handle>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| bad_arg(py, "handle", "is closed"))
    }
}

#[pymethods]
impl PyHandle {
    #[new]
    #[pyo3(signature = (threads=None, policy=None, workspace_limit=None, cache=None, deterministic=None, math=None, bf16_units=None, threading=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        threads: Option<&Bound<'_, PyAny>>,
        policy: Option<&Bound<'_, PyAny>>,
        workspace_limit: Option<&Bound<'_, PyAny>>,
        cache: Option<&Bound<'_, PyAny>>,
        deterministic: Option<&Bound<'_, PyAny>>,
        math: Option<&Bound<'_, PyAny>>,
        bf16_units: Option<&Bound<'_, PyAny>>,
        threading: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyHandle> {
        let openmp = match threading {
            None => None,
            Some(t) => match text(py, t, "threading")?.as_str() {
                "own" => None,
                "openmp" => Some(openmp::OpenMp::find().map_err(|e| bad_arg(py, "threading", e))?),
                other => {
                    return Err(bad_arg(
                        py,
                        "threading",
                        format!("{other:?}: expected \"own\" or \"openmp\""),
                    ))
                }
            },
        };
        let math = match math {
            None => MathMode::Strict,
            Some(m) => math_arg(py, m)?,
        };
        let units = match bf16_units {
            None => Bf16Units::Auto,
            Some(u) => units_arg(py, u)?,
        };
        let threads = opt_int(py, threads, "threads")?;
        let policy = match policy {
            None => "benchmark".to_string(),
            Some(p) => text(py, p, "policy")?,
        };
        let policy = policy.as_str();
        let workspace_limit = opt_int(py, workspace_limit, "workspace_limit")?;
        let deterministic = match deterministic {
            None => false,
            Some(d) => flag(py, d, "deterministic")?,
        };
        let cache: Option<std::path::PathBuf> = match cache {
            None => None,
            Some(c) => match c.extract::<bool>() {
                Ok(true) => Some(autodnn::default_cache_path()),
                Ok(false) => None,
                Err(_) => Some(path_arg(py, c, "cache")?),
            },
        };
        let policy = Policy::parse(policy).map_err(|e| bad_arg(py, "policy", e))?;
        let limit = match workspace_limit {
            None => None,
            Some(b) if b < 0 => return Err(bad_arg(py, "workspace_limit", "must be at least 0")),
            Some(b) => Some(b as usize),
        };
        let h = match (threads, openmp) {
            (Some(t), _) if t < 1 => return Err(bad_arg(py, "threads", "must be at least 1")),
            (None, None) => Handle::new(),
            (Some(t), None) => Handle::with_threads(usize::try_from(t).unwrap_or(usize::MAX)),
            (t, Some(omp)) => {
                let n = t.map_or(omp.max_threads(), |t| {
                    usize::try_from(t).unwrap_or(usize::MAX)
                });
                Handle::with_runner(n, omp.runner())
            }
        }
        .py(py)?;
        h.set_policy(policy);
        h.set_workspace_limit(limit);
        h.set_deterministic(deterministic);
        h.set_math_mode(math);
        h.set_bf16_units(units);
        let h = Arc::new(h);
        if let Some(p) = cache {
            h.load_tuning_cache(&p).py(py)?;
            let mut live = CACHED.lock().unwrap_or_else(|e| e.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&h));
        }
        Ok(PyHandle {
            inner: RwLock::new(Some(h)),
        })
    }

    /// Threads a call computes on (the calling thread among them).
    #[getter]
    fn threads(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.get(py)?.threads())
    }
    /// The selection policy's name.
    #[getter]
    fn policy(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.get(py)?.policy().name())
    }
    #[setter]
    fn set_policy(&self, py: Python<'_>, policy: &Bound<'_, PyAny>) -> PyResult<()> {
        let p =
            Policy::parse(&text(py, policy, "policy")?).map_err(|e| bad_arg(py, "policy", e))?;
        self.get(py)?.set_policy(p);
        Ok(())
    }
    /// True when only deterministic algorithms are selected.
    #[getter]
    fn deterministic(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.deterministic())
    }
    #[setter]
    fn set_deterministic(&self, py: Python<'_>, on: &Bound<'_, PyAny>) -> PyResult<()> {
        let on = flag(py, on, "deterministic")?;
        self.get(py)?.set_deterministic(on);
        Ok(())
    }
    /// The precision f32 operands may be computed in: "strict" (f32, the default) or
    /// "allow_bf16" (operands rounded to bf16 with f32 sums, on bf16 units where they are
    /// faster; PyTorch's float32 matmul precision "medium").
    #[getter]
    fn math(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.get(py)?.math_mode().name())
    }
    #[setter]
    fn set_math(&self, py: Python<'_>, math: &Bound<'_, PyAny>) -> PyResult<()> {
        let m = math_arg(py, math)?;
        self.get(py)?.set_math_mode(m);
        Ok(())
    }
    /// Which units compute products of bf16 values: "auto" (where measured faster than the
    /// f32 ones, the default), "always" or "never".
    #[getter]
    fn bf16_units(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.get(py)?.bf16_units().name())
    }
    #[setter]
    fn set_bf16_units(&self, py: Python<'_>, units: &Bound<'_, PyAny>) -> PyResult<()> {
        let u = units_arg(py, units)?;
        self.get(py)?.set_bf16_units(u);
        Ok(())
    }
    /// Most workspace bytes one call may use (None: no limit).
    #[getter]
    fn workspace_limit(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        Ok(self.get(py)?.workspace_limit())
    }
    #[setter]
    fn set_workspace_limit(
        &self,
        py: Python<'_>,
        bytes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let bytes = match bytes {
            Some(b) if b.is_none() => None,
            b => opt_int(py, b, "workspace_limit")?,
        };
        let b = match bytes {
            Some(b) if b < 0 => return Err(bad_arg(py, "workspace_limit", "must be at least 0")),
            b => b.map(|b| b as usize),
        };
        self.get(py)?.set_workspace_limit(b);
        Ok(())
    }
    /// The instruction set kernels use.
    #[getter]
    fn isa(&self, py: Python<'_>) -> PyResult<&'static str> {
        Ok(self.get(py)?.isa().name())
    }
    /// The tuning cache's file (None when the cache lives in memory only).
    #[getter]
    fn cache_path(&self, py: Python<'_>) -> PyResult<Option<std::path::PathBuf>> {
        Ok(self.get(py)?.tuning_cache_path())
    }
    /// Entries of the in-memory tuning cache.
    #[getter]
    fn cache_entries(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.get(py)?.tuning_cache().len())
    }
    /// Writes the tuning cache to its file (merged with what other processes wrote); returns
    /// the path, or None when the handle has no cache file.
    fn save_cache(&self, py: Python<'_>) -> PyResult<Option<std::path::PathBuf>> {
        let h = self.get(py)?;
        if h.tuning_cache_path().is_none() {
            return Ok(None);
        }
        let r = py.detach(|| h.save_tuning_cache());
        r.py(py).map(Some)
    }
    /// Releases the worker threads; later calls on this handle raise. Saves the tuning cache
    /// first when it has a file.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let h = self.inner.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            if h.tuning_cache_path().is_some() {
                let r = py.detach(|| h.save_tuning_cache());
                r.py(py)?;
            }
        }
        Ok(())
    }
    /// A handle is a shared context: copies (`copy.copy`, `copy.deepcopy`, as of a model
    /// holding one) are the same handle.
    fn __copy__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __deepcopy__(slf: Py<Self>, _memo: &Bound<'_, PyAny>) -> Py<Self> {
        slf
    }
    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }
    fn __repr__(&self) -> String {
        match self
            .inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            Some(h) => format!(
                "Handle(threads={}, policy={:?}, workspace_limit={:?}, deterministic={}, math={:?}, bf16_units={:?})",
                h.threads(),
                h.policy().name(),
                h.workspace_limit(),
                h.deterministic(),
                h.math_mode().name(),
                h.bf16_units().name()
            ),
            None => "Handle(closed)".into(),
        }
    }
}

/// Filter weights prepared once for an algorithm and problem (see `prepare_weights`).
#[pyclass(name = "PreparedWeights", module = "autodnn._autodnn", frozen)]
struct PyPrepared {
    inner: Arc<PreparedWeights>,
}

#[pymethods]
impl PyPrepared {
    /// The algorithm the weights were prepared for.
    #[getter]
    fn algo(&self) -> &'static str {
        self.inner.algo()
    }
    /// Bytes held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.inner.bytes()
    }
    /// True when the filter was transformed (else a plain copy is held).
    #[getter]
    fn transformed(&self) -> bool {
        self.inner.is_transformed()
    }
    /// The filter's shape (K, C per group, R, S).
    #[getter]
    fn shape(&self) -> (usize, usize, usize, usize) {
        let [k, c, r, s] = self.inner.problem().w().dims();
        (k, c, r, s)
    }
    /// The logical (N, C, H, W) input shape the weights were prepared for.
    #[getter]
    fn x_shape(&self) -> (usize, usize, usize, usize) {
        let [n, c, h, w] = self.inner.problem().x().dims();
        (n, c, h, w)
    }
    fn __repr__(&self) -> String {
        format!(
            "PreparedWeights(algo={:?}, shape={:?}, x_shape={:?}, nbytes={})",
            self.algo(),
            self.shape(),
            self.x_shape(),
            self.nbytes()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Convolution

/// Geometry as the Python front end normalised it.
type Geometry = ((usize, usize), (i64, i64, i64, i64), (usize, usize), usize);

fn conv_desc(py: Python<'_>, g: Geometry) -> PyResult<ConvDesc> {
    let ((sh, sw), (top, bottom, left, right), (dh, dw), groups) = g;
    ConvDesc::new(
        Padding {
            top,
            bottom,
            left,
            right,
        },
        [sh, sw],
        [dh, dw],
        groups,
        ConvMode::CrossCorrelation,
    )
    .py(py)
}

fn activation(py: Python<'_>, act: Option<&str>) -> PyResult<Activation> {
    match act {
        None => Ok(Activation::None),
        Some(a) => Activation::parse(a).map_err(|e| bad_arg(py, "activation", e)),
    }
}

/// The memory layout of a tensor descriptor (NHWC when packed so, else NCHW).
fn mem_layout(t: &TensorDesc) -> Layout {
    if t.layout() == Some(Layout::Nhwc) && t.layout() != Some(Layout::Nchw) {
        Layout::Nhwc
    } else {
        Layout::Nchw
    }
}

/// A shape given as a tuple of 4 ints (logical order per `nhwc`), as a packed descriptor.
fn shape_desc(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    name: &str,
    nhwc: bool,
) -> PyResult<TensorDesc> {
    let v: Vec<i64> = obj
        .extract()
        .map_err(|_| bad_arg(py, name, "expected an array or a shape of 4 ints"))?;
    if v.len() != 4 || v.iter().any(|&d| d < 1) {
        return Err(bad_arg(
            py,
            name,
            format!("expected 4 positive ints, got {v:?}"),
        ));
    }
    let d: Vec<usize> = v.iter().map(|&d| d as usize).collect();
    let dims = if nhwc {
        [d[0], d[3], d[1], d[2]]
    } else {
        dims4(&d)
    };
    let layout = if nhwc { Layout::Nhwc } else { Layout::Nchw };
    TensorDesc::new(DataType::F32, layout, dims).map_err(|e| bad_arg(py, name, e))
}

/// A shape is a flat tuple or list of ints; a nested list is an array.
fn is_shape(obj: &Bound<'_, PyAny>) -> bool {
    let items = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect::<Vec<_>>()
    } else if let Ok(l) = obj.cast::<pyo3::types::PyList>() {
        l.iter().collect::<Vec<_>>()
    } else {
        return false;
    };
    items
        .iter()
        .all(|i| i.is_instance_of::<pyo3::types::PyInt>() || i.extract::<i64>().is_ok())
}

/// y = act(alpha · conv(x, w) + bias + beta · z).
#[pyfunction]
#[pyo3(signature = (handle, x, w, bias, geometry, algo, act, residual, alpha, beta, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn conv2d<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    bias: Option<&Bound<'py, PyAny>>,
    geometry: Geometry,
    algo: Option<&str>,
    act: Option<&str>,
    residual: Option<&Bound<'py, PyAny>>,
    alpha: f32,
    beta: f32,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let conv = conv_desc(py, geometry)?;
    let act = activation(py, act)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let prepared = w.cast::<PyPrepared>().ok().map(|p| p.get().inner.clone());
    let (wi, wd) = match &prepared {
        Some(p) => (None, *p.problem().w()),
        None => {
            let (i, d) = filter_input(py, w, "w")?;
            (Some(i), d)
        }
    };
    let dims = ConvProblem::output_dims(&xd, &wd, &conv).py(py)?;
    if beta != 0.0 && residual.is_none() && out.is_none() {
        return Err(bad_arg(
            py,
            "beta",
            "a nonzero beta scales the output's prior contents: give out= (or residual=)",
        ));
    }
    let (mut yo, yd) = tensor_output(
        py,
        out,
        "out",
        dims,
        mem_layout(&xd),
        nhwc,
        beta != 0.0 && residual.is_none(),
    )?;
    let bi = match bias {
        Some(b) => Some(vector_input(py, b, "bias", wd.k())?),
        None => None,
    };
    // The residual must be laid out like the output.
    let zi = match residual {
        Some(z) => {
            let (zi, zd) = tensor_input(py, z, "residual", nhwc)?;
            if zd.dims() != yd.dims() {
                return Err(bad_arg(
                    py,
                    "residual",
                    format!(
                        "expected the output's dims {:?} (N, C, H, W), got {:?}",
                        yd.dims(),
                        zd.dims()
                    ),
                ));
            }
            if zd.strides() == yd.strides() {
                Some(zi)
            } else {
                // A packed copy in the output's memory layout (which, with out=, need not be
                // the call's layout), viewed in the call's dimension order.
                let [n, c, hh, ww] = yd.dims();
                let y_nhwc = mem_layout(&yd) == Layout::Nhwc;
                let base = if y_nhwc {
                    new_array(py, &[n, hh, ww, c], false)?
                } else {
                    new_array(py, &[n, c, hh, ww], false)?
                };
                let view = match (y_nhwc, nhwc) {
                    (true, false) => base.call_method1("transpose", ((0, 3, 1, 2),))?,
                    (false, true) => base.call_method1("transpose", ((0, 2, 3, 1),))?,
                    _ => base.clone().into_any(),
                };
                let src = zi.arr.as_any().clone();
                drop(zi);
                numpy_mod(py)?.call_method1("copyto", (&view, &src))?;
                // Read as the whole packed buffer: its layout is the output's by construction.
                Some(input(py, base.as_any(), "residual", 4)?)
            }
        }
        None => None,
    };
    let p = ConvProblem::forward(xd, wd, conv, yd)
        .py(py)?
        .with_epilogue(Epilogue {
            bias: bias.is_some(),
            residual: residual.is_some(),
            act,
        });
    let xs = xi.slice();
    let ws = wi.as_ref().map(|i| i.slice());
    let bs = bi.as_ref().map(|i| i.slice());
    let zs = zi.as_ref().map(|i| i.slice());
    let ys = yo.slice();
    let r = py.detach(|| {
        let weights = match (&prepared, ws) {
            (Some(p), _) => Weights::Prepared(p),
            (None, Some(w)) => Weights::Plain(w),
            (None, None) => Weights::Plain(&[]),
        };
        let mut epi = EpilogueArgs::new(alpha, beta);
        if let Some(b) = bs {
            epi = epi.with_bias(b);
        }
        if let Some(z) = zs {
            epi = epi.with_residual(z);
        }
        match algo {
            Some(a) => h.conv_forward_ex(&p, a, xs, weights, ys, &epi, None),
            None => h.conv_forward_auto(&p, xs, weights, ys, &epi).map(|_| ()),
        }
    });
    r.py(py)?;
    drop((xi, wi, bi, zi));
    yo.finish(py)
}

/// The forward problem of the given arrays or shapes (for the selection queries).
#[allow(clippy::too_many_arguments)]
fn query_problem(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    geometry: Geometry,
    bias: bool,
    residual: bool,
    act: Option<&str>,
    nhwc: bool,
) -> PyResult<ConvProblem> {
    let conv = conv_desc(py, geometry)?;
    let act = activation(py, act)?;
    let xd = if is_shape(x) {
        shape_desc(py, x, "x", nhwc)?
    } else {
        tensor_input(py, x, "x", nhwc)?.1
    };
    let wd = if is_shape(w) {
        let v: Vec<i64> = w
            .extract()
            .map_err(|_| bad_arg(py, "w", "expected an array or a shape of 4 ints"))?;
        if v.len() != 4 || v.iter().any(|&d| d < 1) {
            return Err(bad_arg(
                py,
                "w",
                format!("expected 4 positive ints, got {v:?}"),
            ));
        }
        let d: Vec<usize> = v.iter().map(|&d| d as usize).collect();
        FilterDesc::new(DataType::F32, FilterLayout::Kcrs, dims4(&d))
            .map_err(|e| bad_arg(py, "w", e))?
    } else if let Ok(p) = w.cast::<PyPrepared>() {
        *p.get().inner.problem().w()
    } else {
        filter_input(py, w, "w")?.1
    };
    let layout = if nhwc { Layout::Nhwc } else { mem_layout(&xd) };
    Ok(ConvProblem::forward_packed(xd, wd, conv, layout)
        .py(py)?
        .with_epilogue(Epilogue {
            bias,
            residual,
            act,
        }))
}

type Record = (String, Option<f64>, usize, bool, &'static str);

fn ranked(v: Vec<Ranked>) -> Vec<Record> {
    v.into_iter()
        .map(|r| {
            (
                r.algo.to_string(),
                Some(r.predicted_ms),
                r.workspace_bytes,
                r.deterministic,
                if r.eligible {
                    "predicted"
                } else {
                    "ineligible"
                },
            )
        })
        .collect()
}

fn status_name(s: PerfStatus) -> &'static str {
    match s {
        PerfStatus::Ok => "ok",
        PerfStatus::Eliminated => "eliminated",
        PerfStatus::Failed => "failed",
        PerfStatus::NotTimed => "not_timed",
    }
}

fn measured(v: Vec<AlgoPerf>) -> Vec<Record> {
    v.into_iter()
        .map(|r| {
            (
                r.algo,
                r.ms,
                r.workspace_bytes,
                r.deterministic,
                status_name(r.status),
            )
        })
        .collect()
}

/// The heuristic ranking (cuDNN's Get) of a problem of operation `op`.
#[pyfunction]
#[pyo3(signature = (handle, x, w, geometry, bias, residual, act, nhwc, op))]
#[allow(clippy::too_many_arguments)]
fn get_algorithms(
    py: Python<'_>,
    handle: &Bound<'_, PyHandle>,
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    geometry: Geometry,
    bias: bool,
    residual: bool,
    act: Option<&str>,
    nhwc: bool,
    op: &str,
) -> PyResult<Vec<Record>> {
    let h = handle.get().get(py)?;
    let p = query_problem(py, x, w, geometry, bias, residual, act, nhwc)?;
    let r = match op {
        "forward" => h.get::<ConvForward>(&p),
        "backward_data" => p
            .with_epilogue(Epilogue::default())
            .for_op(OpKind::ConvBackwardData)
            .and_then(|q| h.get::<ConvBackwardData>(&q)),
        "backward_weight" => p
            .with_epilogue(Epilogue::default())
            .for_op(OpKind::ConvBackwardFilter)
            .and_then(|q| h.get::<ConvBackwardFilter>(&q)),
        "backward_bias" => p
            .with_epilogue(Epilogue::default())
            .for_op(OpKind::ConvBackwardBias)
            .and_then(|q| h.get::<ConvBackwardBias>(&q)),
        _ => {
            return Err(bad_arg(
                py,
                "op",
                format!(
                    "{op:?}: expected forward, backward_data, backward_weight or backward_bias"
                ),
            ))
        }
    };
    Ok(ranked(r.py(py)?))
}

/// Measured selection (cuDNN's Find) of a forward problem on the given arrays.
#[pyfunction]
#[pyo3(signature = (handle, x, w, bias, geometry, act, residual, alpha, beta, nhwc))]
#[allow(clippy::too_many_arguments)]
fn find_algorithms<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    bias: Option<&Bound<'py, PyAny>>,
    geometry: Geometry,
    act: Option<&str>,
    residual: Option<&Bound<'py, PyAny>>,
    alpha: f32,
    beta: f32,
    nhwc: bool,
) -> PyResult<Vec<Record>> {
    let h = handle.get().get(py)?;
    let conv = conv_desc(py, geometry)?;
    let act = activation(py, act)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let (wi, wd) = filter_input(py, w, "w")?;
    let layout = if nhwc { Layout::Nhwc } else { mem_layout(&xd) };
    let p = ConvProblem::forward_packed(xd, wd, conv, layout)
        .py(py)?
        .with_epilogue(Epilogue {
            bias: bias.is_some(),
            residual: residual.is_some(),
            act,
        });
    let bi = match bias {
        Some(b) => Some(vector_input(py, b, "bias", wd.k())?),
        None => None,
    };
    let zi = match residual {
        Some(z) => {
            let (zi, zd) = tensor_input(py, z, "residual", nhwc)?;
            if zd.strides() != p.y().strides() || zd.dims() != p.y().dims() {
                return Err(bad_arg(
                    py,
                    "residual",
                    "must have the output's shape and layout",
                ));
            }
            Some(zi)
        }
        None => None,
    };
    let (xs, ws) = (xi.slice(), wi.slice());
    let bs = bi.as_ref().map(|i| i.slice());
    let zs = zi.as_ref().map(|i| i.slice());
    let r = py.detach(|| {
        let mut epi = EpilogueArgs::new(alpha, beta);
        if let Some(b) = bs {
            epi = epi.with_bias(b);
        }
        if let Some(z) = zs {
            epi = epi.with_residual(z);
        }
        h.find_conv_algorithms(&p, xs, ws, &epi)
    });
    Ok(measured(r.py(py)?))
}

/// Transforms the filter once for an algorithm (the given one, or the handle's choice for the
/// problem) and a problem.
#[pyfunction]
#[pyo3(signature = (handle, w, x, geometry, algo, nhwc))]
fn prepare_weights<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    w: &Bound<'py, PyAny>,
    x: &Bound<'py, PyAny>,
    geometry: Geometry,
    algo: Option<&str>,
    nhwc: bool,
) -> PyResult<PyPrepared> {
    let h = handle.get().get(py)?;
    let conv = conv_desc(py, geometry)?;
    let (wi, wd) = filter_input(py, w, "w")?;
    let (xi, xd) = if is_shape(x) {
        (None, shape_desc(py, x, "x", nhwc)?)
    } else {
        let (i, d) = tensor_input(py, x, "x", nhwc)?;
        (Some(i), d)
    };
    let layout = if nhwc { Layout::Nhwc } else { mem_layout(&xd) };
    let p = ConvProblem::forward_packed(xd, wd, conv, layout).py(py)?;
    let ws = wi.slice();
    let xs = xi.as_ref().map(|i| i.slice());
    let r = py.detach(|| -> autodnn::Result<PreparedWeights> {
        let name: String = match algo {
            Some(a) => a.to_string(),
            None => {
                let zeros;
                let xs = match xs {
                    Some(s) => s,
                    None => {
                        zeros = zeroed(p.x().span())?;
                        &zeros[..]
                    }
                };
                h.plan_conv(&p, xs, ws, &EpilogueArgs::default())?
                    .algo()
                    .to_string()
            }
        };
        h.prepare_weights(&p, &name, ws)
    });
    Ok(PyPrepared {
        inner: Arc::new(r.py(py)?),
    })
}

/// A zeroed vector of `n` floats, or an out-of-memory error.
fn zeroed(n: usize) -> autodnn::Result<Vec<f32>> {
    new_vector(n, 0.0, "an input of zeros to time on")
}

/// Max pooling's geometry: ((kernel_h, kernel_w), (stride_h, stride_w), (top, bottom, left,
/// right), ceil_mode).
type PoolGeometry = ((usize, usize), (usize, usize), (i64, i64, i64, i64), bool);

fn max_pool_desc(py: Python<'_>, g: PoolGeometry) -> PyResult<PoolDesc> {
    let ((kh, kw), (sh, sw), (top, bottom, left, right), ceil) = g;
    let padding = Padding {
        top,
        bottom,
        left,
        right,
    };
    let d = PoolDesc::new(PoolMode::Max, [kh, kw], [sh, sw], padding).py(py)?;
    Ok(d.with_ceil_mode(ceil))
}

/// The axes of a 4-D array shown in `nhwc` order or not, taken in the memory order of packed
/// `layout` (N, then the rest outermost first).
fn axes_in(layout: Layout, nhwc: bool) -> (usize, usize, usize, usize) {
    match (layout, nhwc) {
        (Layout::Nchw, false) | (Layout::Nhwc, true) => (0, 1, 2, 3),
        (Layout::Nhwc, false) => (0, 2, 3, 1),
        (Layout::Nchw, true) => (0, 3, 1, 2),
    }
}

/// y = max_pool2d(x); with `with_indices`, (y, indices): each window's maximum as its offset
/// in the input plane (uint32, y's shape, laid out in y's order: channels-last memory for a
/// channels-last or NHWC y, as PyTorch's).
#[pyfunction]
#[pyo3(signature = (handle, x, geometry, out, with_indices, nhwc))]
fn max_pool2d<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    geometry: PoolGeometry,
    out: Option<&Bound<'py, PyAny>>,
    with_indices: bool,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let pd = max_pool_desc(py, geometry)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let dims = pd.output_dims(&xd).py(py)?;
    let (mut yo, yd) = tensor_output(py, out, "out", dims, mem_layout(&xd), nhwc, false)?;
    let (xs, ys) = (xi.slice(), yo.slice());
    if !with_indices {
        let r = py.detach(|| h.pooling_forward(&pd, Blend::default(), &xd, xs, &yd, ys));
        r.py(py)?;
        drop(xi);
        return yo.finish(py);
    }
    let count = dims.iter().product::<usize>();
    let mut ind = new_vector(count, 0u32, "max pooling's indices").py(py)?;
    let r = py.detach(|| {
        h.pooling_forward_with_indices(&pd, Blend::default(), &xd, xs, &yd, ys, &mut ind)
    });
    r.py(py)?;
    drop(xi);
    let y = yo.finish(py)?;
    // Packed in y's order (pool::indices_layout), shown in y's shape.
    let [n, c, oh, ow] = dims;
    let layout = pool::indices_layout(&yd);
    let packed = match layout {
        Layout::Nchw => [n, c, oh, ow],
        Layout::Nhwc => [n, oh, ow, c],
    };
    let ind = PyArray1::from_vec(py, ind).reshape(packed)?.into_any();
    // The inverse of the permutation that takes the shown axes to memory order.
    let show = match axes_in(layout, nhwc) {
        (0, 2, 3, 1) => Some((0, 3, 1, 2)),
        (0, 3, 1, 2) => Some((0, 2, 3, 1)),
        _ => None,
    };
    let ind = match show {
        Some(axes) => ind.call_method1("transpose", (axes,))?,
        None => ind,
    };
    Ok(PyTuple::new(py, [y, ind.unbind()])?.into_any().unbind())
}

/// dx = max_pool2d_backward(dy): each dy added at the offset `indices` recorded for it (as
/// max_pool2d returns them: dy's shape, any strides; copied into dy's order when not in it),
/// into the gradient of an input of shape `x_shape`.
#[pyfunction]
#[pyo3(signature = (handle, dy, indices, x_shape, geometry, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn max_pool2d_backward<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    dy: &Bound<'py, PyAny>,
    indices: &Bound<'py, PyAny>,
    x_shape: &Bound<'py, PyAny>,
    geometry: PoolGeometry,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let pd = max_pool_desc(py, geometry)?;
    let (dyi, dyd) = tensor_input(py, dy, "dy", nhwc)?;
    let xs = shape_desc(py, x_shape, "x_shape", nhwc)?;
    let ind = indices.cast::<PyArrayDyn<u32>>().map_err(|_| {
        bad_arg(
            py,
            "indices",
            "must be a uint32 numpy array (as max_pool2d returns them)",
        )
    })?;
    if ind.shape() != dyi.dims.as_slice() {
        return Err(bad_arg(
            py,
            "indices",
            format!(
                "expected dy's shape {:?}, got shape {:?}",
                dyi.dims,
                ind.shape()
            ),
        ));
    }
    // The kernel reads the indices packed in dy's order (pool::indices_layout): a view in
    // that order, copied where it is not packed.
    let axes = axes_in(pool::indices_layout(&dyd), nhwc);
    let view = ind.call_method1("transpose", (axes,))?;
    let ind = numpy_mod(py)?
        .call_method1("ascontiguousarray", (view,))?
        .cast_into::<PyArrayDyn<u32>>()?;
    let ind = ind
        .try_readonly()
        .map_err(|e| bad_arg(py, "indices", format!("cannot be read: {e}")))?;
    let ind_s = ind
        .as_slice()
        .map_err(|_| bad_arg(py, "indices", "must be C-contiguous"))?;
    let (mut dxo, dxd) = tensor_output(py, out, "out", xs.dims(), mem_layout(&dyd), nhwc, false)?;
    let (dys, dxs) = (dyi.slice(), dxo.slice());
    let r = py.detach(|| {
        h.pooling_backward_with_indices(&pd, Blend::default(), &dyd, dys, ind_s, &dxd, dxs)
    });
    r.py_in(py, Call::PoolBackward)?;
    drop((dyi, ind));
    dxo.finish(py)
}

/// A float32 vector of `len` values written in place (a running statistic).
fn vector_in_place<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    len: usize,
) -> PyResult<PyReadwriteArrayDyn<'py, f32>> {
    let want = || format!("expected a writeable C-contiguous float32 vector of {len} values");
    let arr = obj
        .cast::<PyArrayDyn<f32>>()
        .map_err(|_| bad_arg(py, name, want()))?;
    if arr.ndim() != 1 || arr.len() != len || !arr.is_c_contiguous() {
        return Err(bad_arg(py, name, want()));
    }
    arr.try_readwrite()
        .map_err(|e| bad_arg(py, name, format!("cannot be written: {e}")))
}

/// A vector of `len` copies of `fill`, or an out-of-memory error naming `what`.
fn new_vector<T: Clone>(len: usize, fill: T, what: &str) -> autodnn::Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|e| Error::OutOfMemory {
        bytes: len.saturating_mul(std::mem::size_of::<T>()),
        what: format!("{what}: {e}"),
    })?;
    v.resize(len, fill);
    Ok(v)
}

/// Batch norm's training forward: (y, mean, inv_std) with the batch's statistics per channel
/// (inv_std = 1/√(biased var + eps)); `running_mean` and `running_var` (unbiased), when
/// given, move toward the batch's by `momentum` in place.
#[pyfunction]
#[pyo3(signature = (handle, x, gamma, beta, running_mean, running_var, momentum, eps, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn batch_norm_training<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    gamma: &Bound<'py, PyAny>,
    beta: &Bound<'py, PyAny>,
    running_mean: Option<&Bound<'py, PyAny>>,
    running_var: Option<&Bound<'py, PyAny>>,
    momentum: f64,
    eps: f64,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let bn = BatchNorm::new(eps).py(py)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let c = xd.dims()[1];
    let gi = vector_input(py, gamma, "gamma", c)?;
    let bi = vector_input(py, beta, "beta", c)?;
    let mut running = match (running_mean, running_var) {
        (Some(m), Some(v)) => Some((
            vector_in_place(py, m, "running_mean", c)?,
            vector_in_place(py, v, "running_var", c)?,
        )),
        (None, None) => None,
        _ => {
            return Err(bad_arg(
                py,
                "running_var",
                "give both running statistics or neither",
            ))
        }
    };
    let (mut yo, yd) = tensor_output(py, out, "out", xd.dims(), mem_layout(&xd), nhwc, false)?;
    let mut mean = new_vector(c, 0.0f32, "batch norm's saved mean").py(py)?;
    let mut inv_std = new_vector(c, 0.0f32, "batch norm's saved 1/std").py(py)?;
    let run = match &mut running {
        Some((m, v)) => Some(RunningStats {
            mean: m
                .as_slice_mut()
                .map_err(|e| bad_arg(py, "running_mean", e))?,
            var: v
                .as_slice_mut()
                .map_err(|e| bad_arg(py, "running_var", e))?,
            factor: momentum,
        }),
        None => None,
    };
    let (xs, ys, gs, bs) = (xi.slice(), yo.slice(), gi.slice(), bi.slice());
    let saved = SavedStatsMut {
        mean: &mut mean,
        inv_std: &mut inv_std,
    };
    let r = py.detach(|| {
        h.batch_norm_forward_training(
            &bn,
            Blend::default(),
            &xd,
            xs,
            &yd,
            ys,
            gs,
            bs,
            run,
            Some(saved),
        )
    });
    r.py(py)?;
    drop((xi, gi, bi, running));
    let y = yo.finish(py)?;
    let mean = PyArray1::from_vec(py, mean).into_any().unbind();
    let inv_std = PyArray1::from_vec(py, inv_std).into_any().unbind();
    Ok(PyTuple::new(py, [y, mean, inv_std])?.into_any().unbind())
}

/// Batch norm's backward from the forward's saved statistics: (dx, dgamma, dbeta).
#[pyfunction]
#[pyo3(signature = (handle, x, dy, gamma, mean, inv_std, eps, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn batch_norm_backward<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    dy: &Bound<'py, PyAny>,
    gamma: &Bound<'py, PyAny>,
    mean: &Bound<'py, PyAny>,
    inv_std: &Bound<'py, PyAny>,
    eps: f64,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let bn = BatchNorm::new(eps).py(py)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let (dyi, dyd) = tensor_input(py, dy, "dy", nhwc)?;
    let c = xd.dims()[1];
    let gi = vector_input(py, gamma, "gamma", c)?;
    let mi = vector_input(py, mean, "mean", c)?;
    let si = vector_input(py, inv_std, "inv_std", c)?;
    let (mut dxo, dxd) = tensor_output(py, out, "out", xd.dims(), mem_layout(&dyd), nhwc, false)?;
    let mut dgamma = new_vector(c, 0.0f32, "batch norm's dgamma").py(py)?;
    let mut dbeta = new_vector(c, 0.0f32, "batch norm's dbeta").py(py)?;
    let (xs, dys, dxs, gs) = (xi.slice(), dyi.slice(), dxo.slice(), gi.slice());
    let saved = SavedStats {
        mean: mi.slice(),
        inv_std: si.slice(),
    };
    let grads = ParamGrads {
        dgamma: &mut dgamma,
        dbeta: &mut dbeta,
    };
    let r = py.detach(|| {
        h.batch_norm_backward(
            &bn,
            Blend::default(),
            Blend::default(),
            &xd,
            xs,
            &dyd,
            dys,
            &dxd,
            dxs,
            gs,
            Some(saved),
            grads,
        )
    });
    r.py(py)?;
    drop((xi, dyi, gi, mi, si));
    let dx = dxo.finish(py)?;
    let dgamma = PyArray1::from_vec(py, dgamma).into_any().unbind();
    let dbeta = PyArray1::from_vec(py, dbeta).into_any().unbind();
    Ok(PyTuple::new(py, [dx, dgamma, dbeta])?.into_any().unbind())
}

/// dx = alpha · conv_bwd_data(dy, w) + beta · dx.
#[pyfunction]
#[pyo3(signature = (handle, dy, w, x_shape, geometry, algo, alpha, beta, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn conv2d_backward_data<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    dy: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    x_shape: &Bound<'py, PyAny>,
    geometry: Geometry,
    algo: Option<&str>,
    alpha: f32,
    beta: f32,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let conv = conv_desc(py, geometry)?;
    let (dyi, dyd) = tensor_input(py, dy, "dy", nhwc)?;
    let (wi, wd) = filter_input(py, w, "w")?;
    let xs = shape_desc(py, x_shape, "x_shape", nhwc)?;
    if beta != 0.0 && out.is_none() {
        return Err(bad_arg(
            py,
            "beta",
            "a nonzero beta scales out's prior contents: give out=",
        ));
    }
    let (mut dxo, dxd) = tensor_output(
        py,
        out,
        "out",
        xs.dims(),
        mem_layout(&dyd),
        nhwc,
        beta != 0.0,
    )?;
    let p = ConvProblem::forward(dxd, wd, conv, dyd).py_in(py, Call::BackwardData)?;
    let (dys, ws, dxs) = (dyi.slice(), wi.slice(), dxo.slice());
    let r = py.detach(|| match algo {
        Some(a) => h.conv_backward_data(&p, a, dys, ws, dxs, alpha, beta),
        None => h
            .conv_backward_data_auto(&p, dys, ws, dxs, alpha, beta)
            .map(|_| ()),
    });
    r.py_in(py, Call::BackwardData)?;
    drop((dyi, wi));
    dxo.finish(py)
}

/// dw = alpha · conv_bwd_filter(x, dy) + beta · dw.
#[pyfunction]
#[pyo3(signature = (handle, x, dy, w_shape, geometry, algo, alpha, beta, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn conv2d_backward_weight<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    dy: &Bound<'py, PyAny>,
    w_shape: (usize, usize, usize, usize),
    geometry: Geometry,
    algo: Option<&str>,
    alpha: f32,
    beta: f32,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let conv = conv_desc(py, geometry)?;
    let (xi, xd) = tensor_input(py, x, "x", nhwc)?;
    let (dyi, dyd) = tensor_input(py, dy, "dy", nhwc)?;
    let (k, c, r, s) = w_shape;
    let wd = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [k, c, r, s])
        .map_err(|e| bad_arg(py, "w_shape", e))?;
    if beta != 0.0 && out.is_none() {
        return Err(bad_arg(
            py,
            "beta",
            "a nonzero beta scales out's prior contents: give out=",
        ));
    }
    let mut dwo = plain_output(py, out, "out", &[k, c, r, s], beta != 0.0)?;
    let p = ConvProblem::forward(xd, wd, conv, dyd).py_in(py, Call::BackwardFilter)?;
    let (xs, dys, dws) = (xi.slice(), dyi.slice(), dwo.slice());
    let res = py.detach(|| match algo {
        Some(a) => h.conv_backward_filter(&p, a, xs, dys, dws, alpha, beta),
        None => h
            .conv_backward_filter_auto(&p, xs, dys, dws, alpha, beta)
            .map(|_| ()),
    });
    res.py_in(py, Call::BackwardFilter)?;
    drop((xi, dyi));
    dwo.finish(py)
}

/// db[k] = alpha · Σ dy[n, k, ·, ·] + beta · db[k].
#[pyfunction]
#[pyo3(signature = (handle, dy, algo, alpha, beta, out, nhwc))]
#[allow(clippy::too_many_arguments)]
fn conv2d_backward_bias<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    dy: &Bound<'py, PyAny>,
    algo: Option<&str>,
    alpha: f32,
    beta: f32,
    out: Option<&Bound<'py, PyAny>>,
    nhwc: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let (dyi, dyd) = tensor_input(py, dy, "dy", nhwc)?;
    let k = dyd.c();
    // The bias gradient depends on dy alone: describe it as the depthwise 1x1 convolution
    // whose output dy is.
    let wd = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [k, 1, 1, 1])
        .py_in(py, Call::BackwardBias)?;
    let conv = ConvDesc::new(
        Padding::default(),
        [1, 1],
        [1, 1],
        k,
        ConvMode::CrossCorrelation,
    )
    .py_in(py, Call::BackwardBias)?;
    let p = ConvProblem::forward(dyd, wd, conv, dyd).py_in(py, Call::BackwardBias)?;
    if beta != 0.0 && out.is_none() {
        return Err(bad_arg(
            py,
            "beta",
            "a nonzero beta scales out's prior contents: give out=",
        ));
    }
    let mut dbo = plain_output(py, out, "out", &[k], beta != 0.0)?;
    let (dys, dbs) = (dyi.slice(), dbo.slice());
    let r = py.detach(|| match algo {
        Some(a) => h.conv_backward_bias(&p, a, dys, dbs, alpha, beta),
        None => h
            .conv_backward_bias_auto(&p, dys, dbs, alpha, beta)
            .map(|_| ()),
    });
    r.py_in(py, Call::BackwardBias)?;
    drop(dyi);
    dbo.finish(py)
}

// ---------------------------------------------------------------------------------------------
// GEMM

/// A matrix operand: an input of `ndim` dims whose last two strides are usable.
fn matrix_input<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    ndim: usize,
) -> PyResult<Input<'py>> {
    input(py, obj, name, ndim)
}

/// C = alpha · op(A) · op(B) + beta · C.
#[pyfunction]
#[pyo3(signature = (handle, a, b, c, alpha, beta, trans_a, trans_b))]
#[allow(clippy::too_many_arguments)]
fn gemm<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    c: Option<&Bound<'py, PyAny>>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    let ai = matrix_input(py, a, "a", 2)?;
    let bi = matrix_input(py, b, "b", 2)?;
    let (m, ka) = if trans_a {
        (ai.dims[1], ai.dims[0])
    } else {
        (ai.dims[0], ai.dims[1])
    };
    let (kb, n) = if trans_b {
        (bi.dims[1], bi.dims[0])
    } else {
        (bi.dims[0], bi.dims[1])
    };
    if ka != kb {
        return Err(bad_arg(
            py,
            "b",
            format!("op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ"),
        ));
    }
    let desc = GemmDesc::new(m, n, ka)
        .with_transa(trans_a)
        .with_transb(trans_b)
        .with_a_strides(ai.strides[0], ai.strides[1])
        .with_b_strides(bi.strides[0], bi.strides[1])
        .with_c_strides(n.max(1), 1);
    let mut co = plain_output(py, c, "c", &[m, n], beta != 0.0)?;
    let (as_, bs, cs) = (ai.slice(), bi.slice(), co.slice());
    let r = py.detach(|| h.gemm(&desc, alpha, as_, bs, beta, cs));
    r.py_in(py, Call::Gemm)?;
    drop((ai, bi));
    co.finish(py)
}

/// C[i] = alpha · op(A[i]) · op(B[i]) + beta · C[i] for every i of the batch; a 2-D A or B is
/// shared by every product.
#[pyfunction]
#[pyo3(signature = (handle, a, b, c, alpha, beta, trans_a, trans_b))]
#[allow(clippy::too_many_arguments)]
fn gemm_strided_batched<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    c: Option<&Bound<'py, PyAny>>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> PyResult<Py<PyAny>> {
    let h = handle.get().get(py)?;
    // Dimensions of arrays and array-likes (nested lists) alike.
    let np = numpy_mod(py)?;
    let ndim = |o: &Bound<'py, PyAny>| -> usize {
        np.call_method1("ndim", (o,))
            .and_then(|d| d.extract())
            .unwrap_or(3)
    };
    let (a_nd, b_nd) = (ndim(a), ndim(b));
    let ai = matrix_input(py, a, "a", if a_nd == 2 { 2 } else { 3 })?;
    let bi = matrix_input(py, b, "b", if b_nd == 2 { 2 } else { 3 })?;
    // (batch, batch stride, rows, cols, row stride, col stride)
    let split = |i: &Input<'_>| -> (Option<usize>, usize, [usize; 2], [usize; 2]) {
        if i.dims.len() == 2 {
            (
                None,
                0,
                [i.dims[0], i.dims[1]],
                [i.strides[0], i.strides[1]],
            )
        } else {
            (
                Some(i.dims[0]),
                if i.dims[0] > 1 { i.strides[0] } else { 0 },
                [i.dims[1], i.dims[2]],
                [i.strides[1], i.strides[2]],
            )
        }
    };
    let (ba, sa, ad, ast) = split(&ai);
    let (bb, sb, bd, bst) = split(&bi);
    let batch = match (ba, bb) {
        (Some(x), Some(y)) if x != y => {
            return Err(bad_arg(
                py,
                "b",
                format!("batch of {y} products, but a has {x}"),
            ))
        }
        (Some(x), _) | (None, Some(x)) => x,
        (None, None) => {
            return Err(bad_arg(
                py,
                "a",
                "a or b must be 3-D (batch, rows, columns)",
            ));
        }
    };
    let (m, ka) = if trans_a {
        (ad[1], ad[0])
    } else {
        (ad[0], ad[1])
    };
    let (kb, n) = if trans_b {
        (bd[1], bd[0])
    } else {
        (bd[0], bd[1])
    };
    if ka != kb {
        return Err(bad_arg(
            py,
            "b",
            format!("op(a) is {m}x{ka} but op(b) is {kb}x{n}: inner dimensions differ"),
        ));
    }
    let desc = GemmDesc::new(m, n, ka)
        .with_transa(trans_a)
        .with_transb(trans_b)
        .with_a_strides(ast[0], ast[1])
        .with_b_strides(bst[0], bst[1])
        .with_c_strides(n.max(1), 1);
    let mut co = plain_output(py, c, "c", &[batch, m, n], beta != 0.0)?;
    let (as_, bs, cs) = (ai.slice(), bi.slice(), co.slice());
    let r =
        py.detach(|| h.gemm_strided_batched(&desc, alpha, as_, sa, bs, sb, beta, cs, m * n, batch));
    r.py_in(py, Call::Gemm)?;
    drop((ai, bi));
    co.finish(py)
}

// ---------------------------------------------------------------------------------------------
// Information

/// What `autodnn info` shows, as a dict.
#[pyfunction]
fn info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", autodnn::VERSION)?;
    d.set_item(
        "threads",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    )?;
    d.set_item("cpu_features", autodnn::cpu::features())?;
    d.set_item("isa", autodnn::cpu::Isa::from_env().py(py)?.name())?;
    d.set_item("cpu_model", autodnn::select::cache::cpu_model())?;
    d.set_item(
        "cache_path",
        autodnn::default_cache_path().display().to_string(),
    )?;
    let cm = autodnn::select::heuristic::default_cost_model_path();
    d.set_item("cost_model_path", cm.display().to_string())?;
    d.set_item("calibrated", cm.exists())?;
    d.set_item("algorithms", autodnn::conv::names())?;
    // The reduced-precision units within AUTODNN_ISA's cap, as `autodnn info` reports them.
    let rp = PyDict::new(py);
    {
        use autodnn::cpu::{AmxState, Feature, Isa};
        let usable = Isa::cap_from_env().py(py)?.usable();
        let isa = Isa::from_env().py(py)?;
        rp.set_item("avx512_bf16", usable.contains(Feature::Avx512Bf16))?;
        rp.set_item("avx512_fp16", usable.contains(Feature::Avx512Fp16))?;
        rp.set_item("amx", AmxState::detected().name())?;
        rp.set_item(
            "bf16_gemm_kernel",
            autodnn::gemm::kernel_name_for(isa, DataType::Bf16, MathMode::Strict, Bf16Units::Auto),
        )?;
        rp.set_item(
            "bf16_unit_speedup",
            autodnn::gemm::bf16_unit_speedup_under(isa),
        )?;
    }
    d.set_item("reduced_precision", rp)?;
    Ok(d)
}

/// Seconds per call of the Rust call alone that `conv2d(x, w, out=out, handle=handle)` (plain
/// NCHW arrays, no epilogue, the handle's selection) makes, over `reps` calls: the yardstick
/// of the Python call's overhead (bench/torch_e2e.py).
#[pyfunction]
fn rust_conv_seconds<'py>(
    py: Python<'py>,
    handle: &Bound<'py, PyHandle>,
    x: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    reps: usize,
) -> PyResult<f64> {
    let h = handle.get().get(py)?;
    let (xi, xd) = tensor_input(py, x, "x", false)?;
    let (wi, wd) = filter_input(py, w, "w")?;
    let dims = ConvProblem::output_dims(&xd, &wd, &ConvDesc::default()).py(py)?;
    let (mut yo, yd) = tensor_output(py, Some(out), "out", dims, mem_layout(&xd), false, false)?;
    let p = ConvProblem::forward(xd, wd, ConvDesc::default(), yd).py(py)?;
    let (xs, ws, ys) = (xi.slice(), wi.slice(), yo.slice());
    let epi = EpilogueArgs::default();
    let r = py.detach(|| -> autodnn::Result<f64> {
        let t = std::time::Instant::now();
        for _ in 0..reps.max(1) {
            h.conv_forward_auto(&p, xs, Weights::Plain(ws), ys, &epi)?;
        }
        Ok(t.elapsed().as_secs_f64() / reps.max(1) as f64)
    });
    r.py(py)
}

/// Whether an array would be read in place by a call, rather than copied (for tests of the
/// in-place rule).
#[pyfunction]
#[pyo3(signature = (x, nhwc=false, filter=false))]
fn reads_in_place(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    nhwc: bool,
    filter: bool,
) -> PyResult<bool> {
    let copied = if filter {
        filter_input(py, x, "x")?.0.copied
    } else {
        tensor_input(py, x, "x", nhwc)?.0.copied
    };
    Ok(!copied)
}

#[pymodule]
fn _autodnn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyHandle>()?;
    m.add_class::<PyPrepared>()?;
    m.add_function(wrap_pyfunction!(conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(get_algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(find_algorithms, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_weights, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d_backward_data, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d_backward_weight, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d_backward_bias, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool2d, m)?)?;
    m.add_function(wrap_pyfunction!(max_pool2d_backward, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_training, m)?)?;
    m.add_function(wrap_pyfunction!(batch_norm_backward, m)?)?;
    m.add_function(wrap_pyfunction!(gemm, m)?)?;
    m.add_function(wrap_pyfunction!(gemm_strided_batched, m)?)?;
    m.add_function(wrap_pyfunction!(info, m)?)?;
    m.add_function(wrap_pyfunction!(save_caches, m)?)?;
    m.add_function(wrap_pyfunction!(reads_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(rust_conv_seconds, m)?)?;
    m.add("VERSION", autodnn::VERSION)?;
    Ok(())
}
