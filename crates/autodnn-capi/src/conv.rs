//! The convolutions: algorithm lists (heuristic and measured), workspace sizes, and the
//! forward, fused forward and backward calls.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use dnn::op::epilogue::{Epilogue, EpilogueArgs};
use dnn::op::prepared::Weights;
use dnn::op::{
    Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, ConvForward, ConvFwdInputs, Registered, Tensor,
    TensorBuf, TensorMut,
};
use dnn::select::{AlgoPerf, PerfStatus, Ranked};
use dnn::{ConvDesc, ConvProblem, DataType, Error, FilterDesc, FilterLayout, Handle, OpKind};

use crate::desc::{
    activation, autodnnActivationDescriptor_t, autodnnConvolutionDescriptor_t,
    autodnnFilterDescriptor_t, autodnnTensorDescriptor_t, convolution, filter, tensor,
};
use crate::handle::{autodnnHandle_t, conv_handle, live_handle};
use crate::ptr::{
    check_disjoint, floats, floats_mut, out, tensor_in, tensor_out, value, workspace, Extent,
};
use crate::status::{
    autodnnStatus_t, bad, guard, Failure, AUTODNN_STATUS_EXECUTION_FAILED,
    AUTODNN_STATUS_INTERNAL_ERROR, AUTODNN_STATUS_NOT_SUPPORTED, AUTODNN_STATUS_SUCCESS, R,
};

/// A forward algorithm: an index into the forward registry (see `autodnnGetAlgorithmName`),
/// or `AUTODNN_ALGO_AUTO`. Indices belong to one build of the library: store names, not
/// indices.
pub type autodnnConvolutionFwdAlgo_t = c_int;
/// A backward-data algorithm: an index into the backward-data registry, or
/// `AUTODNN_ALGO_AUTO`.
pub type autodnnConvolutionBwdDataAlgo_t = c_int;
/// A backward-filter algorithm: an index into the backward-filter registry, or
/// `AUTODNN_ALGO_AUTO`.
pub type autodnnConvolutionBwdFilterAlgo_t = c_int;
/// Let the handle select: by its policy (timing the candidates on the first call of a shape
/// by default, then from its tuning results), running with its fallback chain and its own
/// workspace (within `autodnnSetWorkspaceLimit`). The caller's workspace is then not used.
pub const AUTODNN_ALGO_AUTO: c_int = -1;

/// Which operation's registry an algorithm index refers to.
pub type autodnnConvolutionDirection_t = c_int;
/// The forward convolution (`autodnnConvolutionFwdAlgo_t`).
pub const AUTODNN_CONVOLUTION_FWD: autodnnConvolutionDirection_t = 0;
/// The gradient of the input (`autodnnConvolutionBwdDataAlgo_t`).
pub const AUTODNN_CONVOLUTION_BWD_DATA: autodnnConvolutionDirection_t = 1;
/// The gradient of the filter (`autodnnConvolutionBwdFilterAlgo_t`).
pub const AUTODNN_CONVOLUTION_BWD_FILTER: autodnnConvolutionDirection_t = 2;

/// Whether an algorithm's output bits depend on thread scheduling (cuDNN's
/// `cudnnDeterminism_t`).
pub type autodnnDeterminism_t = c_int;
/// The bits may vary between runs.
pub const AUTODNN_NON_DETERMINISTIC: autodnnDeterminism_t = 0;
/// The bits are the same on every run.
pub const AUTODNN_DETERMINISTIC: autodnnDeterminism_t = 1;

/// One algorithm of a ranked list (cuDNN's `cudnnConvolutionFwdAlgoPerf_t`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct autodnnConvolutionAlgoPerf_t {
    /// Index into the direction's registry (see `autodnnGetAlgorithmName`).
    pub algo: c_int,
    /// `AUTODNN_STATUS_SUCCESS` when it can run; from the heuristic,
    /// `AUTODNN_STATUS_NOT_SUPPORTED` when the handle would not select it (over the workspace
    /// limit, or not deterministic when determinism is asked for); from a measurement,
    /// `AUTODNN_STATUS_EXECUTION_FAILED` when it failed or its workspace could not be had.
    pub status: autodnnStatus_t,
    /// Median milliseconds measured (for one stopped early as clearly slower than the best,
    /// over the runs it got); -1 when not timed (always from the heuristic).
    pub time: f32,
    /// Workspace bytes it needs.
    pub memory: usize,
    /// `AUTODNN_DETERMINISTIC` or `AUTODNN_NON_DETERMINISTIC`.
    pub determinism: autodnnDeterminism_t,
    /// Its documented error bound on integer-valued data in [-4, 4]: the largest
    /// max|y - ref| / max|ref| (0: it sums products in f32 like the definition, exact on
    /// integer data whose partial sums stay below 2^24; Winograd and FFT are not 0).
    pub tolerance: f32,
}
/// A record of the forward algorithms.
pub type autodnnConvolutionFwdAlgoPerf_t = autodnnConvolutionAlgoPerf_t;
/// A record of the backward-data algorithms.
pub type autodnnConvolutionBwdDataAlgoPerf_t = autodnnConvolutionAlgoPerf_t;
/// A record of the backward-filter algorithms.
pub type autodnnConvolutionBwdFilterAlgoPerf_t = autodnnConvolutionAlgoPerf_t;

/// What the C layer needs of an operation's registry.
trait Registry: Registered<Problem = ConvProblem> {
    fn c_names() -> &'static [CString];
}

macro_rules! registry {
    ($op:ty) => {
        impl Registry for $op {
            fn c_names() -> &'static [CString] {
                static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
                NAMES.get_or_init(|| {
                    <$op>::algorithms()
                        .iter()
                        // Registry names are identifiers: no NUL inside.
                        .map(|a| CString::new(a.name()).unwrap_or_default())
                        .collect()
                })
            }
        }
    };
}
registry!(ConvForward);
registry!(ConvBackwardData);
registry!(ConvBackwardFilter);

/// The registered name of algorithm `algo` of `O`; `None` for AUTO.
fn algo_name<O: Registry>(algo: c_int) -> R<Option<&'static str>> {
    if algo == AUTODNN_ALGO_AUTO {
        return Ok(None);
    }
    let list = O::algorithms();
    usize::try_from(algo)
        .ok()
        .and_then(|i| list.get(i))
        .map(|a| Some(a.name()))
        .ok_or_else(|| {
            bad(
                "algo",
                algo,
                &format!(
                    "is not a {} algorithm: 0 to {} or AUTODNN_ALGO_AUTO",
                    O::NAME,
                    list.len().saturating_sub(1)
                ),
            )
        })
}

fn algo_index<O: Registry>(name: &str) -> Option<usize> {
    O::algorithms().iter().position(|a| a.name() == name)
}

fn record_of_ranked<O: Registry>(r: &Ranked) -> autodnnConvolutionAlgoPerf_t {
    autodnnConvolutionAlgoPerf_t {
        algo: index_int::<O>(r.algo),
        status: if r.eligible {
            AUTODNN_STATUS_SUCCESS
        } else {
            AUTODNN_STATUS_NOT_SUPPORTED
        },
        time: -1.0,
        memory: r.workspace_bytes,
        determinism: determinism(r.deterministic),
        tolerance: r.accuracy.integer_tolerance() as f32,
    }
}

fn record_of_perf<O: Registry>(r: &AlgoPerf) -> autodnnConvolutionAlgoPerf_t {
    let status = match r.status {
        PerfStatus::Ok | PerfStatus::Eliminated | PerfStatus::NotTimed => AUTODNN_STATUS_SUCCESS,
        PerfStatus::Failed => AUTODNN_STATUS_EXECUTION_FAILED,
    };
    let tolerance =
        algo_index::<O>(&r.algo).map_or(0.0, |i| O::algorithms()[i].accuracy().integer_tolerance());
    autodnnConvolutionAlgoPerf_t {
        algo: index_int::<O>(&r.algo),
        status,
        time: r.ms.map_or(-1.0, |ms| ms as f32),
        memory: r.workspace_bytes,
        determinism: determinism(r.deterministic),
        tolerance: tolerance as f32,
    }
}

fn index_int<O: Registry>(name: &str) -> c_int {
    // Registries hold a few dozen algorithms; a name always comes from the registry.
    algo_index::<O>(name)
        .and_then(|i| c_int::try_from(i).ok())
        .unwrap_or(AUTODNN_ALGO_AUTO)
}

fn determinism(d: bool) -> autodnnDeterminism_t {
    if d {
        AUTODNN_DETERMINISTIC
    } else {
        AUTODNN_NON_DETERMINISTIC
    }
}

/// The requested count, and where the returned count goes.
///
/// # Safety
/// `returned` is null or writable.
unsafe fn request<'a>(requested: c_int, returned: *mut c_int) -> R<(usize, &'a mut c_int)> {
    let req = usize::try_from(requested)
        .map_err(|_| bad("requestedAlgoCount", requested, "must not be negative"))?;
    // SAFETY: the caller gives a writable int.
    Ok((req, unsafe { out(returned, "returnedAlgoCount") }?))
}

/// The checks of a Find call's output arguments that need no records, made before timing:
/// a bad call is refused as such whatever the timing would have found.
///
/// # Safety
/// As [`fill`].
unsafe fn check_request(
    requested: c_int,
    returned: *mut c_int,
    perf: *mut autodnnConvolutionAlgoPerf_t,
) -> R<()> {
    // SAFETY: forwarded.
    let (req, _) = unsafe { request(requested, returned) }?;
    if req > 0 && perf.is_null() {
        return Err(bad(
            "perfResults",
            "NULL",
            "must point to requestedAlgoCount records",
        ));
    }
    Ok(())
}

/// Writes the first `requestedAlgoCount` records.
///
/// # Safety
/// `returned` is null or writable; `perf` is null or writable for `requested` records.
unsafe fn fill(
    records: &[autodnnConvolutionAlgoPerf_t],
    requested: c_int,
    returned: *mut c_int,
    perf: *mut autodnnConvolutionAlgoPerf_t,
) -> R<()> {
    // SAFETY: forwarded.
    let (req, returned) = unsafe { request(requested, returned) }?;
    let n = req.min(records.len());
    if n > 0 {
        if perf.is_null() {
            return Err(bad(
                "perfResults",
                "NULL",
                "must point to requestedAlgoCount records",
            ));
        }
        if !perf.is_aligned() {
            return Err(bad(
                "perfResults",
                format!("{perf:p}"),
                "is not aligned for its type",
            ));
        }
        // SAFETY: non-null, aligned, and the caller gives room for `requested` >= n records;
        // n is at most a registry's length, so the byte size fits.
        let dst = unsafe { std::slice::from_raw_parts_mut(perf, n) };
        dst.copy_from_slice(&records[..n]);
    }
    // n is at most `requested`, an int.
    *returned = c_int::try_from(n).unwrap_or(c_int::MAX);
    Ok(())
}

fn require_f32(p: &ConvProblem) -> R<()> {
    let dt = p.x().dtype();
    if dt != DataType::F32 {
        return Err(Error::Unsupported {
            what: format!(
                "{} tensors: this build computes AUTODNN_DATA_FLOAT only",
                dt.name()
            ),
        }
        .into());
    }
    Ok(())
}

fn zeros(n: usize, what: &str) -> R<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        bytes: n.saturating_mul(4),
        what: format!("{what} to time the algorithms on"),
    })?;
    v.resize(n, 0.0);
    Ok(v)
}

/// # Safety
/// Each descriptor is null or live.
unsafe fn forward_problem(
    xDesc: autodnnTensorDescriptor_t,
    wDesc: autodnnFilterDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    yDesc: autodnnTensorDescriptor_t,
) -> R<ConvProblem> {
    // SAFETY: forwarded.
    let (x, w, conv, y) = unsafe {
        (
            tensor(xDesc, "xDesc")?,
            filter(wDesc, "wDesc")?,
            convolution(convDesc, "convDesc")?,
            tensor(yDesc, "yDesc")?,
        )
    };
    Ok(ConvProblem::forward(x, w, conv, y)?)
}

/// # Safety
/// Each descriptor is null or live.
unsafe fn backward_data_problem(
    wDesc: autodnnFilterDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dxDesc: autodnnTensorDescriptor_t,
) -> R<ConvProblem> {
    // SAFETY: forwarded.
    let (w, dy, conv, dx) = unsafe {
        (
            filter(wDesc, "wDesc")?,
            tensor(dyDesc, "dyDesc")?,
            convolution(convDesc, "convDesc")?,
            tensor(dxDesc, "dxDesc")?,
        )
    };
    ConvProblem::forward(dx, w, conv, dy)
        .and_then(|p| p.for_op(OpKind::ConvBackwardData))
        .map_err(|e| renamed(e, &[("x", "dx"), ("y", "dy")]).into())
}

/// The error with the problem's field names as the backward call names its tensors
/// (`y.h` → `dy.h`).
fn renamed(e: Error, names: &[(&str, &str)]) -> Error {
    let rename = |field: String| {
        for (from, to) in names {
            if let Some(rest) = field.strip_prefix(from) {
                if rest.is_empty() || rest.starts_with('.') {
                    return format!("{to}{rest}");
                }
            }
        }
        field
    };
    match e {
        Error::BadParam {
            field,
            value,
            reason,
        } => Error::BadParam {
            field: rename(field),
            value,
            reason,
        },
        e => e,
    }
}

/// # Safety
/// Each descriptor is null or live.
unsafe fn backward_filter_problem(
    xDesc: autodnnTensorDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dwDesc: autodnnFilterDescriptor_t,
) -> R<ConvProblem> {
    // SAFETY: forwarded.
    let (x, dy, conv, dw) = unsafe {
        (
            tensor(xDesc, "xDesc")?,
            tensor(dyDesc, "dyDesc")?,
            convolution(convDesc, "convDesc")?,
            filter(dwDesc, "dwDesc")?,
        )
    };
    ConvProblem::forward(x, dw, conv, dy)
        .and_then(|p| p.for_op(OpKind::ConvBackwardFilter))
        .map_err(|e| renamed(e, &[("w", "dw"), ("y", "dy")]).into())
}

fn heuristic<O: Registry>(h: &Handle, p: &ConvProblem) -> R<Vec<autodnnConvolutionAlgoPerf_t>> {
    Ok(h.get::<O>(p)?.iter().map(record_of_ranked::<O>).collect())
}

/// Runs `O` with the chosen algorithm on the caller's workspace, or (`None`: AUTO) with the
/// handle's selection and its own workspace.
///
/// # Safety
/// `ws` is valid for `bytes` bytes, or null with `bytes` 0 (the caller's contract).
unsafe fn run_chosen<O: Registry>(
    h: &Handle,
    p: &ConvProblem,
    algo: Option<&str>,
    inputs: &O::Inputs<'_>,
    out: &mut O::Output<'_>,
    ws: *mut c_void,
    bytes: usize,
) -> R<()> {
    match algo {
        None => {
            h.run::<O>(p, inputs, out)?;
        }
        Some(name) => {
            // SAFETY: the caller's contract for ws and bytes.
            let ws = unsafe { workspace(ws, bytes)? };
            h.run_algorithm::<O>(p, name, inputs, out, ws)?;
        }
    }
    Ok(())
}

fn workspace_size<O: Registry>(h: &Handle, p: &ConvProblem, algo: c_int) -> R<usize> {
    match algo_name::<O>(algo)? {
        None => Ok(0),
        Some(name) => Ok(h.workspace_size::<O>(p, name)?),
    }
}

/// The number of algorithms registered for `direction` (their indices are 0 to count - 1).
#[no_mangle]
pub unsafe extern "C" fn autodnnGetAlgorithmCount(
    direction: autodnnConvolutionDirection_t,
    count: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        let n = direction_names(direction)?.len();
        // SAFETY: the caller gives a writable int.
        *unsafe { out(count, "count") }? = c_int::try_from(n).unwrap_or(c_int::MAX);
        Ok(())
    })
}

fn direction_names(direction: autodnnConvolutionDirection_t) -> R<&'static [CString]> {
    match direction {
        AUTODNN_CONVOLUTION_FWD => Ok(ConvForward::c_names()),
        AUTODNN_CONVOLUTION_BWD_DATA => Ok(ConvBackwardData::c_names()),
        AUTODNN_CONVOLUTION_BWD_FILTER => Ok(ConvBackwardFilter::c_names()),
        _ => Err(bad(
            "direction",
            direction,
            "must be AUTODNN_CONVOLUTION_FWD, AUTODNN_CONVOLUTION_BWD_DATA or \
             AUTODNN_CONVOLUTION_BWD_FILTER",
        )),
    }
}

/// Stores in `*name` the registered name of algorithm `algo` of `direction` (a static
/// string, such as "winograd_4x4" or "direct").
#[no_mangle]
pub unsafe extern "C" fn autodnnGetAlgorithmName(
    direction: autodnnConvolutionDirection_t,
    algo: c_int,
    name: *mut *const c_char,
) -> autodnnStatus_t {
    guard(|| {
        let names = direction_names(direction)?;
        let s = usize::try_from(algo)
            .ok()
            .and_then(|i| names.get(i))
            .ok_or_else(|| {
                bad(
                    "algo",
                    algo,
                    &format!(
                        "is not an algorithm index: 0 to {}",
                        names.len().saturating_sub(1)
                    ),
                )
            })?;
        // SAFETY: the caller gives a writable pointer.
        *unsafe { out(name, "name") }? = s.as_ptr();
        Ok(())
    })
}

/// Stores in `*algo` the index of the algorithm of `direction` named `name` (a
/// NUL-terminated string); `AUTODNN_STATUS_BAD_PARAM` when none has that name.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetAlgorithmIndex(
    direction: autodnnConvolutionDirection_t,
    name: *const c_char,
    algo: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        let names = direction_names(direction)?;
        if name.is_null() {
            return Err(bad("name", "NULL", "must be an algorithm name"));
        }
        // SAFETY: non-null; the caller gives a NUL-terminated string.
        let wanted = unsafe { CStr::from_ptr(name) };
        let i = names
            .iter()
            .position(|n| n.as_c_str() == wanted)
            .ok_or_else(|| {
                let known: Vec<_> = names.iter().map(|n| n.to_string_lossy()).collect();
                Failure::from(Error::UnknownAlgorithm {
                    name: wanted.to_string_lossy().into_owned(),
                    known: known.join(", "),
                })
            })?;
        // SAFETY: the caller gives a writable int.
        *unsafe { out(algo, "algo") }? = c_int::try_from(i).unwrap_or(c_int::MAX);
        Ok(())
    })
}

/// # Safety
/// `handle` is null or live; `count` is null or writable.
unsafe fn max_count(
    handle: autodnnHandle_t,
    direction: autodnnConvolutionDirection_t,
    count: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { live_handle(handle) }?;
        let n = direction_names(direction)?.len();
        // SAFETY: the caller gives a writable int.
        *unsafe { out(count, "count") }? = c_int::try_from(n).unwrap_or(c_int::MAX);
        Ok(())
    })
}

/// The number of forward algorithms: room enough for every record of
/// `autodnnGetConvolutionForwardAlgorithm_v7` (cuDNN's
/// `cudnnGetConvolutionForwardAlgorithmMaxCount`).
#[no_mangle]
pub unsafe extern "C" fn autodnnGetConvolutionForwardAlgorithmMaxCount(
    handle: autodnnHandle_t,
    count: *mut c_int,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { max_count(handle, AUTODNN_CONVOLUTION_FWD, count) }
}

/// The number of backward-data algorithms (cuDNN's
/// `cudnnGetConvolutionBackwardDataAlgorithmMaxCount`).
#[no_mangle]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardDataAlgorithmMaxCount(
    handle: autodnnHandle_t,
    count: *mut c_int,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { max_count(handle, AUTODNN_CONVOLUTION_BWD_DATA, count) }
}

/// The number of backward-filter algorithms (cuDNN's
/// `cudnnGetConvolutionBackwardFilterAlgorithmMaxCount`).
#[no_mangle]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardFilterAlgorithmMaxCount(
    handle: autodnnHandle_t,
    count: *mut c_int,
) -> autodnnStatus_t {
    // SAFETY: the caller's contract.
    unsafe { max_count(handle, AUTODNN_CONVOLUTION_BWD_FILTER, count) }
}

/// The forward algorithms that accept the problem, fastest predicted first, without running
/// anything (cuDNN's `cudnnGetConvolutionForwardAlgorithm_v7`): at most `requestedAlgoCount`
/// records in `perfResults`, their number in `*returnedAlgoCount`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionForwardAlgorithm_v7(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    wDesc: autodnnFilterDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    yDesc: autodnnTensorDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionFwdAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = forward_problem(xDesc, wDesc, convDesc, yDesc)?;
            let recs = heuristic::<ConvForward>(&h, &p)?;
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Times the eligible forward algorithms on the problem (cuDNN's
/// `cudnnFindConvolutionForwardAlgorithm`), on zero-filled buffers the library allocates,
/// and keeps the result in the handle's tuning results for `AUTODNN_ALGO_AUTO`: records
/// fastest first, as `autodnnGetConvolutionForwardAlgorithm_v7`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnFindConvolutionForwardAlgorithm(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    wDesc: autodnnFilterDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    yDesc: autodnnTensorDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionFwdAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = forward_problem(xDesc, wDesc, convDesc, yDesc)?;
            check_request(requestedAlgoCount, returnedAlgoCount, perfResults)?;
            let x = TensorBuf::zeros(p.x().dtype(), p.x().span(), "x to time the algorithms on")?;
            let w = TensorBuf::zeros(p.w().dtype(), p.w().elements(), "w to time on")?;
            let inputs = ConvFwdInputs {
                x: x.view(),
                w: Weights::Tensor(w.view()),
                epilogue: EpilogueArgs::default(),
            };
            let perf = h.find::<ConvForward>(&p, &inputs)?;
            let recs: Vec<_> = perf.iter().map(record_of_perf::<ConvForward>).collect();
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Workspace bytes forward algorithm `algo` needs on the problem (0 for
/// `AUTODNN_ALGO_AUTO`: the handle then supplies its own); `AUTODNN_STATUS_NOT_SUPPORTED`
/// when the algorithm does not accept the problem.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionForwardWorkspaceSize(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    wDesc: autodnnFilterDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    yDesc: autodnnTensorDescriptor_t,
    algo: autodnnConvolutionFwdAlgo_t,
    sizeInBytes: *mut usize,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            // A NULL output is refused whatever the algorithm makes of the problem.
            let size = out(sizeInBytes, "sizeInBytes")?;
            let p = forward_problem(xDesc, wDesc, convDesc, yDesc)?;
            let n = workspace_size::<ConvForward>(&h, &p, algo)?;
            *size = n;
            Ok(())
        }
    })
}

/// The forward call's buffers and settings, checked.
struct Forward<'a> {
    h: std::sync::Arc<Handle>,
    p: ConvProblem,
    algo: Option<&'static str>,
    x: Tensor<'a>,
    w: Tensor<'a>,
    y: TensorMut<'a>,
    ws: Option<&'a mut [u8]>,
}

impl Forward<'_> {
    fn run(self, epi: EpilogueArgs<'_>) -> R<()> {
        let inputs = ConvFwdInputs {
            x: self.x,
            w: Weights::Tensor(self.w),
            epilogue: epi,
        };
        let mut y = self.y;
        match self.algo {
            None => {
                self.h.run::<ConvForward>(&self.p, &inputs, &mut y)?;
            }
            Some(name) => self
                .h
                .run_algorithm::<ConvForward>(&self.p, name, &inputs, &mut y, self.ws)?,
        }
        Ok(())
    }
}

/// Checks and builds the forward call's buffers; `extra` are the other inputs the output must
/// not overlap.
///
/// # Safety
/// The caller's contract of the C call.
#[allow(clippy::too_many_arguments)]
unsafe fn forward_call<'a>(
    handle: autodnnHandle_t,
    convDesc: autodnnConvolutionDescriptor_t,
    p: ConvProblem,
    x: *const c_void,
    w: *const c_void,
    algo: c_int,
    workSpace: *mut c_void,
    workSpaceSizeInBytes: usize,
    y: *mut c_void,
    extra: &[Extent],
) -> R<Forward<'a>> {
    // SAFETY: the caller's contract, for each argument.
    unsafe {
        let h = conv_handle(handle, convDesc)?;
        let algo = algo_name::<ConvForward>(algo)?;
        let (xs, ws_, ys) = (p.x().span(), p.w().elements(), p.y().span());
        let (xt, wt, yt) = (p.x().dtype(), p.w().dtype(), p.y().dtype());
        let mut inputs = vec![
            Extent::of_type("x", x, xs, xt),
            Extent::of_type("w", w, ws_, wt),
        ];
        inputs.extend_from_slice(extra);
        check_disjoint(Extent::of_type("y", y, ys, yt), &inputs)?;
        let x = tensor_in(x, xs, xt, "x")?;
        let w = tensor_in(w, ws_, wt, "w")?;
        let y = tensor_out(y, ys, yt, "y")?;
        let ws = match algo {
            None => None,
            Some(_) => workspace(workSpace, workSpaceSizeInBytes)?,
        };
        Ok(Forward {
            h,
            p,
            algo,
            x,
            w,
            y,
            ws,
        })
    }
}

/// y = alpha · conv(x, w) + beta · y (cuDNN's `cudnnConvolutionForward`); y is not read when
/// beta is 0. `algo` is an index from the forward registry or `AUTODNN_ALGO_AUTO`. A NULL
/// workspace of 0 bytes has the handle supply one (within its workspace limit); otherwise it
/// must hold `autodnnGetConvolutionForwardWorkspaceSize` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnConvolutionForward(
    handle: autodnnHandle_t,
    alpha: *const f32,
    xDesc: autodnnTensorDescriptor_t,
    x: *const c_void,
    wDesc: autodnnFilterDescriptor_t,
    w: *const c_void,
    convDesc: autodnnConvolutionDescriptor_t,
    algo: autodnnConvolutionFwdAlgo_t,
    workSpace: *mut c_void,
    workSpaceSizeInBytes: usize,
    beta: *const f32,
    yDesc: autodnnTensorDescriptor_t,
    y: *mut c_void,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let p = forward_problem(xDesc, wDesc, convDesc, yDesc)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let call = forward_call(
                handle,
                convDesc,
                p,
                x,
                w,
                algo,
                workSpace,
                workSpaceSizeInBytes,
                y,
                &[],
            )?;
            call.run(EpilogueArgs::new(alpha, beta))
        }
    })
}

/// y = act(alpha1 · conv(x, w) + alpha2 · z + bias) (cuDNN's
/// `cudnnConvolutionBiasActivationForward`), in one pass over y. z is laid out like y
/// (`zDesc` equal to `yDesc`) and may be y itself; it is not read when alpha2 is 0 (z and
/// zDesc may then be NULL). bias holds one value per output channel (`biasDesc` 1 × K × 1 × 1);
/// a NULL bias adds none. A NULL `activationDesc` is the identity. The algorithm and
/// workspace are as in `autodnnConvolutionForward`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnConvolutionBiasActivationForward(
    handle: autodnnHandle_t,
    alpha1: *const f32,
    xDesc: autodnnTensorDescriptor_t,
    x: *const c_void,
    wDesc: autodnnFilterDescriptor_t,
    w: *const c_void,
    convDesc: autodnnConvolutionDescriptor_t,
    algo: autodnnConvolutionFwdAlgo_t,
    workSpace: *mut c_void,
    workSpaceSizeInBytes: usize,
    alpha2: *const f32,
    zDesc: autodnnTensorDescriptor_t,
    z: *const c_void,
    biasDesc: autodnnTensorDescriptor_t,
    bias: *const c_void,
    activationDesc: autodnnActivationDescriptor_t,
    yDesc: autodnnTensorDescriptor_t,
    y: *mut c_void,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let p = forward_problem(xDesc, wDesc, convDesc, yDesc)?;
            let alpha1 = value(alpha1, "alpha1")?;
            let alpha2 = value(alpha2, "alpha2")?;
            let act = activation(activationDesc, "activationDesc")?;
            let k = p.w().k();
            let ys = p.y().span();
            // z: none, y's own contents, or a separate tensor laid out like y.
            let residual = alpha2 != 0.0 && !z.is_null() && z != y.cast_const();
            if alpha2 != 0.0 && z.is_null() {
                return Err(bad(
                    "z",
                    "NULL",
                    "alpha2 is not 0: z must be given (it may be y)",
                ));
            }
            if alpha2 != 0.0 {
                let zd = tensor(zDesc, "zDesc")?;
                if zd != *p.y() {
                    return Err(bad(
                        "zDesc",
                        format!("{:?} strides {:?}", zd.dims(), zd.strides()),
                        "must describe z laid out exactly as y (yDesc)",
                    ));
                }
            }
            if residual && p.y().dtype() != DataType::F32 {
                return Err(Error::Unsupported {
                    what: format!(
                        "a separate residual z with a {} y (z = y, and an f32 y with any z, are \
                         computed)",
                        p.y().dtype().name()
                    ),
                }
                .into());
            }
            let has_bias = !bias.is_null();
            if has_bias {
                let bd = tensor(biasDesc, "biasDesc")?;
                if bd.dtype() != DataType::F32 {
                    return Err(bad(
                        "biasDesc.dataType",
                        bd.dtype().name(),
                        "must be AUTODNN_DATA_FLOAT (the epilogue computes in f32)",
                    ));
                }
                if bd.dims() != [1, k, 1, 1] || (k > 1 && bd.strides()[1] != 1) {
                    return Err(bad(
                        "biasDesc",
                        format!("{:?} strides {:?}", bd.dims(), bd.strides()),
                        &format!("must be a packed 1 x {k} x 1 x 1 tensor (one value per output channel)"),
                    ));
                }
            }
            let mut extra = Vec::new();
            if residual {
                extra.push(Extent::of("z", z, ys));
            }
            if has_bias {
                extra.push(Extent::of("bias", bias, k));
            }
            let p = p.with_epilogue(Epilogue {
                bias: has_bias,
                residual,
                act,
            });
            let call = forward_call(
                handle,
                convDesc,
                p,
                x,
                w,
                algo,
                workSpace,
                workSpaceSizeInBytes,
                y,
                &extra,
            )?;
            let mut epi = EpilogueArgs::new(alpha1, alpha2);
            if residual {
                epi = epi.with_residual(floats(z, ys, "z")?);
            }
            if has_bias {
                epi = epi.with_bias(floats(bias, k, "bias")?);
            }
            call.run(epi)
        }
    })
}

/// The backward-data algorithms that accept the problem, fastest predicted first (cuDNN's
/// `cudnnGetConvolutionBackwardDataAlgorithm_v7`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardDataAlgorithm_v7(
    handle: autodnnHandle_t,
    wDesc: autodnnFilterDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dxDesc: autodnnTensorDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionBwdDataAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_data_problem(wDesc, dyDesc, convDesc, dxDesc)?;
            let recs = heuristic::<ConvBackwardData>(&h, &p)?;
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Times the eligible backward-data algorithms on zero-filled buffers (cuDNN's
/// `cudnnFindConvolutionBackwardDataAlgorithm`), keeping the result for
/// `AUTODNN_ALGO_AUTO`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnFindConvolutionBackwardDataAlgorithm(
    handle: autodnnHandle_t,
    wDesc: autodnnFilterDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dxDesc: autodnnTensorDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionBwdDataAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_data_problem(wDesc, dyDesc, convDesc, dxDesc)?;
            require_f32(&p)?;
            check_request(requestedAlgoCount, returnedAlgoCount, perfResults)?;
            let dy = zeros(p.y().span(), "dy")?;
            let w = zeros(p.w().elements(), "w")?;
            let perf = h.find::<ConvBackwardData>(&p, &ConvBwdDataInputs::new(&dy, &w))?;
            let recs: Vec<_> = perf
                .iter()
                .map(record_of_perf::<ConvBackwardData>)
                .collect();
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Workspace bytes backward-data algorithm `algo` needs (0 for `AUTODNN_ALGO_AUTO`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardDataWorkspaceSize(
    handle: autodnnHandle_t,
    wDesc: autodnnFilterDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dxDesc: autodnnTensorDescriptor_t,
    algo: autodnnConvolutionBwdDataAlgo_t,
    sizeInBytes: *mut usize,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            // A NULL output is refused whatever the algorithm makes of the problem.
            let size = out(sizeInBytes, "sizeInBytes")?;
            let p = backward_data_problem(wDesc, dyDesc, convDesc, dxDesc)?;
            let n = workspace_size::<ConvBackwardData>(&h, &p, algo)?;
            *size = n;
            Ok(())
        }
    })
}

/// dx = alpha · conv_bwd_data(dy, w) + beta · dx (cuDNN's `cudnnConvolutionBackwardData`);
/// dx is not read when beta is 0. Algorithm and workspace as in `autodnnConvolutionForward`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnConvolutionBackwardData(
    handle: autodnnHandle_t,
    alpha: *const f32,
    wDesc: autodnnFilterDescriptor_t,
    w: *const c_void,
    dyDesc: autodnnTensorDescriptor_t,
    dy: *const c_void,
    convDesc: autodnnConvolutionDescriptor_t,
    algo: autodnnConvolutionBwdDataAlgo_t,
    workSpace: *mut c_void,
    workSpaceSizeInBytes: usize,
    beta: *const f32,
    dxDesc: autodnnTensorDescriptor_t,
    dx: *mut c_void,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_data_problem(wDesc, dyDesc, convDesc, dxDesc)?;
            require_f32(&p)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let algo = algo_name::<ConvBackwardData>(algo)?;
            let (ws_, dys, dxs) = (p.w().elements(), p.y().span(), p.x().span());
            check_disjoint(
                Extent::of("dx", dx, dxs),
                &[Extent::of("w", w, ws_), Extent::of("dy", dy, dys)],
            )?;
            let inputs = ConvBwdDataInputs::new(floats(dy, dys, "dy")?, floats(w, ws_, "w")?)
                .scaled(alpha, beta);
            let mut dx = TensorMut::F32(floats_mut(dx, dxs, "dx")?);
            run_chosen::<ConvBackwardData>(
                &h,
                &p,
                algo,
                &inputs,
                &mut dx,
                workSpace,
                workSpaceSizeInBytes,
            )
        }
    })
}

/// The backward-filter algorithms that accept the problem, fastest predicted first (cuDNN's
/// `cudnnGetConvolutionBackwardFilterAlgorithm_v7`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardFilterAlgorithm_v7(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dwDesc: autodnnFilterDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionBwdFilterAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_filter_problem(xDesc, dyDesc, convDesc, dwDesc)?;
            let recs = heuristic::<ConvBackwardFilter>(&h, &p)?;
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Times the eligible backward-filter algorithms on zero-filled buffers (cuDNN's
/// `cudnnFindConvolutionBackwardFilterAlgorithm`), keeping the result for
/// `AUTODNN_ALGO_AUTO`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnFindConvolutionBackwardFilterAlgorithm(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    dwDesc: autodnnFilterDescriptor_t,
    requestedAlgoCount: c_int,
    returnedAlgoCount: *mut c_int,
    perfResults: *mut autodnnConvolutionBwdFilterAlgoPerf_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_filter_problem(xDesc, dyDesc, convDesc, dwDesc)?;
            require_f32(&p)?;
            check_request(requestedAlgoCount, returnedAlgoCount, perfResults)?;
            let x = zeros(p.x().span(), "x")?;
            let dy = zeros(p.y().span(), "dy")?;
            let perf = h.find::<ConvBackwardFilter>(&p, &ConvBwdFilterInputs::new(&x, &dy))?;
            let recs: Vec<_> = perf
                .iter()
                .map(record_of_perf::<ConvBackwardFilter>)
                .collect();
            fill(&recs, requestedAlgoCount, returnedAlgoCount, perfResults)
        }
    })
}

/// Workspace bytes backward-filter algorithm `algo` needs (0 for `AUTODNN_ALGO_AUTO`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnGetConvolutionBackwardFilterWorkspaceSize(
    handle: autodnnHandle_t,
    xDesc: autodnnTensorDescriptor_t,
    dyDesc: autodnnTensorDescriptor_t,
    convDesc: autodnnConvolutionDescriptor_t,
    gradDesc: autodnnFilterDescriptor_t,
    algo: autodnnConvolutionBwdFilterAlgo_t,
    sizeInBytes: *mut usize,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            // A NULL output is refused whatever the algorithm makes of the problem.
            let size = out(sizeInBytes, "sizeInBytes")?;
            let p = backward_filter_problem(xDesc, dyDesc, convDesc, gradDesc)?;
            let n = workspace_size::<ConvBackwardFilter>(&h, &p, algo)?;
            *size = n;
            Ok(())
        }
    })
}

/// dw = alpha · conv_bwd_filter(x, dy) + beta · dw (cuDNN's
/// `cudnnConvolutionBackwardFilter`); dw is not read when beta is 0. Algorithm and workspace
/// as in `autodnnConvolutionForward`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnConvolutionBackwardFilter(
    handle: autodnnHandle_t,
    alpha: *const f32,
    xDesc: autodnnTensorDescriptor_t,
    x: *const c_void,
    dyDesc: autodnnTensorDescriptor_t,
    dy: *const c_void,
    convDesc: autodnnConvolutionDescriptor_t,
    algo: autodnnConvolutionBwdFilterAlgo_t,
    workSpace: *mut c_void,
    workSpaceSizeInBytes: usize,
    beta: *const f32,
    dwDesc: autodnnFilterDescriptor_t,
    dw: *mut c_void,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = conv_handle(handle, convDesc)?;
            let p = backward_filter_problem(xDesc, dyDesc, convDesc, dwDesc)?;
            require_f32(&p)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let algo = algo_name::<ConvBackwardFilter>(algo)?;
            let (xs, dys, dws) = (p.x().span(), p.y().span(), p.w().elements());
            check_disjoint(
                Extent::of("dw", dw, dws),
                &[Extent::of("x", x, xs), Extent::of("dy", dy, dys)],
            )?;
            let inputs = ConvBwdFilterInputs::new(floats(x, xs, "x")?, floats(dy, dys, "dy")?)
                .scaled(alpha, beta);
            let mut dw = TensorMut::F32(floats_mut(dw, dws, "dw")?);
            run_chosen::<ConvBackwardFilter>(
                &h,
                &p,
                algo,
                &inputs,
                &mut dw,
                workSpace,
                workSpaceSizeInBytes,
            )
        }
    })
}

/// db\[k\] = alpha · Σ over n, h, w of dy\[n, k, h, w\] + beta · db\[k\] (cuDNN's
/// `cudnnConvolutionBackwardBias`); `dbDesc` is a packed 1 × K × 1 × 1 tensor, db is not read
/// when beta is 0.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn autodnnConvolutionBackwardBias(
    handle: autodnnHandle_t,
    alpha: *const f32,
    dyDesc: autodnnTensorDescriptor_t,
    dy: *const c_void,
    beta: *const f32,
    dbDesc: autodnnTensorDescriptor_t,
    db: *mut c_void,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        unsafe {
            let h = live_handle(handle)?;
            let dyd = tensor(dyDesc, "dyDesc")?;
            let dbd = tensor(dbDesc, "dbDesc")?;
            let k = dyd.c();
            if dbd.dims() != [1, k, 1, 1] || (k > 1 && dbd.strides()[1] != 1) {
                return Err(bad(
                    "dbDesc",
                    format!("{:?} strides {:?}", dbd.dims(), dbd.strides()),
                    &format!("must be a packed 1 x {k} x 1 x 1 tensor (dy has {k} channels)"),
                ));
            }
            if dbd.dtype() != dyd.dtype() {
                return Err(bad(
                    "dbDesc.dataType",
                    dbd.dtype().name(),
                    "must equal dy's",
                ));
            }
            // The bias gradient reads dy only: the problem is dy's shape through a 1 x 1
            // convolution that keeps it.
            let w = FilterDesc::new(dyd.dtype(), FilterLayout::Kcrs, [k, k, 1, 1])?;
            let p = ConvProblem::forward(dyd, w, ConvDesc::default(), dyd)?
                .for_op(OpKind::ConvBackwardBias)?;
            require_f32(&p)?;
            let alpha = value(alpha, "alpha")?;
            let beta = value(beta, "beta")?;
            let dys = dyd.span();
            check_disjoint(Extent::of("db", db, k), &[Extent::of("dy", dy, dys)])?;
            let inputs = ConvBwdBiasInputs::new(floats(dy, dys, "dy")?).scaled(alpha, beta);
            let mut dbt = TensorMut::F32(floats_mut(db, k, "db")?);
            // The last algorithm of a registry accepts every valid problem.
            let name = ConvBackwardBias::algorithms()
                .last()
                .map(|a| a.name())
                .ok_or_else(|| Failure {
                    status: AUTODNN_STATUS_INTERNAL_ERROR,
                    message: "no backward-bias algorithm is registered".into(),
                })?;
            h.run_algorithm::<ConvBackwardBias>(&p, name, &inputs, &mut dbt, None)?;
            Ok(())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::*;
    use crate::handle::{autodnnCreateWithThreads, autodnnDestroy};
    use crate::status::{AUTODNN_STATUS_BAD_PARAM, AUTODNN_STATUS_NOT_INITIALIZED};
    use std::ptr::{null, null_mut};

    #[test]
    fn forward_through_the_c_calls_matches_the_reference() {
        // SAFETY: every handle and descriptor is live while used; buffers have their
        // descriptors' spans.
        unsafe {
            let mut h = null_mut();
            assert_eq!(autodnnCreateWithThreads(&mut h, 1), AUTODNN_STATUS_SUCCESS);
            let (mut xd, mut yd, mut wd, mut cd) = (null_mut(), null_mut(), null_mut(), null_mut());
            autodnnCreateTensorDescriptor(&mut xd);
            autodnnCreateTensorDescriptor(&mut yd);
            autodnnCreateFilterDescriptor(&mut wd);
            autodnnCreateConvolutionDescriptor(&mut cd);
            // Descriptors not set yet.
            let mut bytes = 0usize;
            assert_eq!(
                autodnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, 0, &mut bytes),
                AUTODNN_STATUS_NOT_INITIALIZED
            );
            autodnnSetTensor4dDescriptor(xd, AUTODNN_TENSOR_NCHW, AUTODNN_DATA_FLOAT, 2, 4, 7, 6);
            autodnnSetFilter4dDescriptor(wd, AUTODNN_DATA_FLOAT, AUTODNN_TENSOR_NCHW, 6, 2, 3, 3);
            autodnnSetConvolution2dDescriptor(
                cd,
                1,
                0,
                2,
                1,
                1,
                2,
                AUTODNN_CROSS_CORRELATION,
                AUTODNN_DATA_FLOAT,
            );
            autodnnSetConvolutionGroupCount(cd, 2);
            let (mut n, mut c, mut oh, mut ow) = (0, 0, 0, 0);
            assert_eq!(
                autodnnGetConvolution2dForwardOutputDim(
                    cd, xd, wd, &mut n, &mut c, &mut oh, &mut ow
                ),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!((n, c, oh, ow), (2, 6, 4, 2));
            autodnnSetTensor4dDescriptor(yd, AUTODNN_TENSOR_NHWC, AUTODNN_DATA_FLOAT, n, c, oh, ow);
            let p = forward_problem(xd, wd, cd, yd).unwrap();
            let x: Vec<f32> = (0..p.x().span()).map(|i| (i % 5) as f32 - 2.0).collect();
            let w: Vec<f32> = (0..p.w().elements())
                .map(|i| (i % 3) as f32 - 1.0)
                .collect();
            let want = dnn::reference::conv_forward(&p, &x, &w).unwrap();
            let direct = ConvForward::algorithms()
                .iter()
                .position(|a| a.name() == "direct")
                .unwrap() as c_int;
            let mut y = vec![f32::NAN; p.y().span()];
            let (one, zero) = (1.0f32, 0.0f32);
            let fwd = |algo, y: *mut f32, alpha: *const f32| {
                autodnnConvolutionForward(
                    h,
                    alpha,
                    xd,
                    x.as_ptr().cast(),
                    wd,
                    w.as_ptr().cast(),
                    cd,
                    algo,
                    null_mut(),
                    0,
                    &zero,
                    yd,
                    y.cast(),
                )
            };
            assert_eq!(fwd(direct, y.as_mut_ptr(), &one), AUTODNN_STATUS_SUCCESS);
            assert!(y.iter().zip(&want).all(|(a, b)| *a as f64 == *b));
            y.fill(f32::NAN);
            assert_eq!(
                fwd(AUTODNN_ALGO_AUTO, y.as_mut_ptr(), &one),
                AUTODNN_STATUS_SUCCESS
            );
            assert!(y
                .iter()
                .zip(&want)
                .all(|(a, b)| (*a as f64 - b).abs() < 1e-3));
            assert_eq!(fwd(direct, null_mut(), &one), AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(
                fwd(direct, y.as_mut_ptr(), null()),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(fwd(1 << 20, y.as_mut_ptr(), &one), AUTODNN_STATUS_BAD_PARAM);

            let mut returned = 0;
            let mut perf = [autodnnConvolutionAlgoPerf_t {
                algo: 0,
                status: 0,
                time: 0.0,
                memory: 0,
                determinism: 0,
                tolerance: 0.0,
            }; 32];
            assert_eq!(
                autodnnGetConvolutionForwardAlgorithm_v7(
                    h,
                    xd,
                    wd,
                    cd,
                    yd,
                    32,
                    &mut returned,
                    perf.as_mut_ptr()
                ),
                AUTODNN_STATUS_SUCCESS
            );
            assert!(returned >= 1);
            let names: Vec<_> = (0..returned as usize)
                .map(|i| algo_name::<ConvForward>(perf[i].algo).unwrap().unwrap())
                .collect();
            assert!(names.contains(&"direct"), "{names:?}");
            assert!(perf[..returned as usize].iter().all(|r| r.time == -1.0));

            // One handle and one set of descriptors used by four threads at once, each
            // with every listed algorithm and its own output and workspace.
            let addr = |p: *mut c_void| p as usize;
            let (hv, xv, wv, cv, yv) = (
                addr(h.cast()),
                addr(xd.cast()),
                addr(wd.cast()),
                addr(cd.cast()),
                addr(yd.cast()),
            );
            let algos: Vec<(c_int, f32)> = perf[..returned as usize]
                .iter()
                .filter(|r| r.status == AUTODNN_STATUS_SUCCESS)
                .map(|r| (r.algo, r.tolerance))
                .collect();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for &(algo, tol) in &algos {
                            let mut y = vec![f32::NAN; want.len()];
                            let mut bytes = 0usize;
                            // SAFETY: the handle and descriptors outlive the scope and no
                            // thread sets or destroys them meanwhile.
                            let st = autodnnGetConvolutionForwardWorkspaceSize(
                                hv as _, xv as _, wv as _, cv as _, yv as _, algo, &mut bytes,
                            );
                            assert_eq!(st, AUTODNN_STATUS_SUCCESS);
                            let mut ws = vec![0u8; bytes];
                            // SAFETY: as above; the buffers have their descriptors' spans.
                            let st = autodnnConvolutionForward(
                                hv as _,
                                &1.0,
                                xv as _,
                                x.as_ptr().cast(),
                                wv as _,
                                w.as_ptr().cast(),
                                cv as _,
                                algo,
                                ws.as_mut_ptr().cast(),
                                bytes,
                                &0.0,
                                yv as _,
                                y.as_mut_ptr().cast(),
                            );
                            assert_eq!(st, AUTODNN_STATUS_SUCCESS);
                            let max_ref = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                            let err = y.iter().zip(&want).fold(0.0f64, |m, (a, b)| {
                                let d = (*a as f64 - b).abs();
                                // A NaN (an element not written) is kept as the error.
                                if d.is_nan() || d > m {
                                    d
                                } else {
                                    m
                                }
                            });
                            assert!(err <= tol as f64 * max_ref, "algo {algo}: error {err}");
                        }
                    });
                }
            });

            autodnnDestroyTensorDescriptor(xd);
            autodnnDestroyTensorDescriptor(yd);
            autodnnDestroyFilterDescriptor(wd);
            autodnnDestroyConvolutionDescriptor(cd);
            assert_eq!(autodnnDestroy(h), AUTODNN_STATUS_SUCCESS);
        }
    }
}
