//! The handle (cuDNN's `cudnnHandle_t`): the library's worker threads and settings.

use std::ffi::{c_char, c_int, CStr};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use dnn::select::Policy;
use dnn::{Bf16Units, Handle, MathMode};

use crate::ptr::{is_live, out, register, unregister};
use crate::status::{autodnnStatus_t, bad, guard, Failure, R};

/// Major version of the library this header belongs to.
pub const AUTODNN_MAJOR: c_int = 0;
/// Minor version.
pub const AUTODNN_MINOR: c_int = 1;
/// Patch level.
pub const AUTODNN_PATCHLEVEL: c_int = 0;

/// A library context: worker threads, the instruction set, the workspace budget, selection
/// settings and the in-memory tuning results. Calls on one handle from several threads at
/// once are safe (they share its threads).
pub struct autodnnContext {
    /// Replaced whole by `autodnnSetThreads`; a call works with the handle it started with.
    inner: RwLock<Arc<Handle>>,
}

/// A pointer to a library context, made by `autodnnCreate`.
pub type autodnnHandle_t = *mut autodnnContext;

/// The library handle behind `h`.
///
/// # Safety
/// `h` is not destroyed by another thread meanwhile (NULL, destroyed handles and other
/// pointers are refused).
pub(crate) unsafe fn live_handle(h: autodnnHandle_t) -> R<Arc<Handle>> {
    // SAFETY: forwarded.
    Ok(unsafe { context(h) }?
        .inner
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone())
}

/// # Safety
/// As [`live_handle`].
unsafe fn context<'a>(h: autodnnHandle_t) -> R<&'a autodnnContext> {
    if !is_live(h, KIND) {
        return Err(not_live(h));
    }
    // SAFETY: made by Box::into_raw in `create` and not destroyed (registered).
    Ok(unsafe { &*h })
}

const KIND: &str = "handle";

fn not_live(h: autodnnHandle_t) -> Failure {
    if h.is_null() {
        bad("handle", "NULL", "must be a handle from autodnnCreate")
    } else {
        bad(
            "handle",
            format!("{h:p}"),
            "is not a live handle (destroyed, or another object)",
        )
    }
}

fn threads(n: c_int) -> R<usize> {
    usize::try_from(n).map_err(|_| bad("threads", n, "must be at least 1"))
}

unsafe fn create(out_handle: *mut autodnnHandle_t, n: Option<c_int>) -> R<()> {
    // SAFETY: the caller gives a writable handle slot.
    let slot = unsafe { out(out_handle, "handle") }?;
    let h = match n {
        Some(n) => Handle::with_threads(threads(n)?)?,
        None => Handle::new()?,
    };
    let p = Box::into_raw(Box::new(autodnnContext {
        inner: RwLock::new(Arc::new(h)),
    }));
    register(p, KIND);
    *slot = p;
    Ok(())
}

/// Makes a handle using every core of the machine and stores it in `*handle`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreate(handle: *mut autodnnHandle_t) -> autodnnStatus_t {
    // SAFETY: as the caller's contract.
    guard(|| unsafe { create(handle, None) })
}

/// Makes a handle with `threads` worker threads (at least 1) and stores it in `*handle`.
#[no_mangle]
pub unsafe extern "C" fn autodnnCreateWithThreads(
    handle: *mut autodnnHandle_t,
    threads: c_int,
) -> autodnnStatus_t {
    // SAFETY: as the caller's contract.
    guard(|| unsafe { create(handle, Some(threads)) })
}

/// Frees a handle (NULL is accepted and ignored). No call may be running on it.
#[no_mangle]
pub unsafe extern "C" fn autodnnDestroy(handle: autodnnHandle_t) -> autodnnStatus_t {
    guard(|| {
        if handle.is_null() {
            return Ok(());
        }
        if !unregister(handle, KIND) {
            return Err(not_live(handle));
        }
        // SAFETY: made by Box::into_raw in `create`, live until the line above, and no call
        // runs on it (the caller's contract).
        drop(unsafe { Box::from_raw(handle) });
        Ok(())
    })
}

/// Restarts the handle's worker pool with `threads` threads (at least 1). The settings and
/// the tuning results (and the file they were loaded from) are kept. Calls already running
/// finish on the old threads.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetThreads(
    handle: autodnnHandle_t,
    threads: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { context(handle) }?;
        let n = self::threads(threads)?;
        let new = Handle::with_threads(n)?;
        let mut slot = c.inner.write().unwrap_or_else(|e| e.into_inner());
        new.set_workspace_limit(slot.workspace_limit());
        new.set_deterministic(slot.deterministic());
        new.set_policy(slot.policy());
        new.set_math_mode(slot.math_mode());
        new.set_bf16_units(slot.bf16_units());
        if let Some(path) = slot.tuning_cache_path() {
            new.load_tuning_cache(&path)?;
        }
        new.set_tuning_cache(slot.tuning_cache());
        *slot = Arc::new(new);
        Ok(())
    })
}

/// Stores the handle's worker-thread count in `*threads`.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetThreads(
    handle: autodnnHandle_t,
    threads: *mut c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        // SAFETY: the caller gives a writable int.
        let t = unsafe { out(threads, "threads") }?;
        *t = c_int::try_from(h.threads()).unwrap_or(c_int::MAX);
        Ok(())
    })
}

/// Most workspace bytes one call may have the handle allocate (`SIZE_MAX`: no limit, the
/// default). Algorithms needing more are passed over by selection. A workspace the caller
/// passes to a call is not bound by it.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetWorkspaceLimit(
    handle: autodnnHandle_t,
    bytes: usize,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        h.set_workspace_limit((bytes != usize::MAX).then_some(bytes));
        Ok(())
    })
}

/// Non-zero: selection (`AUTODNN_ALGO_AUTO`, `autodnnFind*`) considers only deterministic
/// algorithms (output bits independent of thread scheduling). 0, the default: all of them.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetDeterministic(
    handle: autodnnHandle_t,
    deterministic: c_int,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        h.set_deterministic(deterministic != 0);
        Ok(())
    })
}

/// How the handle selects an algorithm for `AUTODNN_ALGO_AUTO`.
pub type autodnnSelectionPolicy_t = c_int;
/// The cost model's ranking: never times, never reads the tuning results.
pub const AUTODNN_POLICY_HEURISTIC: autodnnSelectionPolicy_t = 0;
/// The tuning results; on a miss, a race among the candidates, whose result is kept (the
/// default).
pub const AUTODNN_POLICY_BENCHMARK: autodnnSelectionPolicy_t = 1;
/// The tuning results; on a miss, the heuristic (never times).
pub const AUTODNN_POLICY_CACHED_ONLY: autodnnSelectionPolicy_t = 2;
/// Every candidate timed to the end, every time; the result is kept.
pub const AUTODNN_POLICY_EXHAUSTIVE: autodnnSelectionPolicy_t = 3;

/// Sets the selection policy of `AUTODNN_ALGO_AUTO`.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetSelectionPolicy(
    handle: autodnnHandle_t,
    policy: autodnnSelectionPolicy_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        let p = match policy {
            AUTODNN_POLICY_HEURISTIC => Policy::Heuristic,
            AUTODNN_POLICY_BENCHMARK => Policy::Benchmark,
            AUTODNN_POLICY_CACHED_ONLY => Policy::CachedOnly,
            AUTODNN_POLICY_EXHAUSTIVE => Policy::Exhaustive,
            _ => {
                return Err(bad(
                    "policy",
                    policy,
                    "must be one of the AUTODNN_POLICY_* values",
                ))
            }
        };
        h.set_policy(p);
        Ok(())
    })
}

/// Loads the handle's tuning results from the file `path` (NULL: the library's default
/// path, as the `autodnn` command uses), so that shapes measured by an earlier process are
/// not timed again; a missing file is an empty cache. The path is remembered for
/// `autodnnSaveTuningCache`.
#[no_mangle]
pub unsafe extern "C" fn autodnnLoadTuningCache(
    handle: autodnnHandle_t,
    path: *const c_char,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        let path = if path.is_null() {
            dnn::default_cache_path()
        } else {
            // SAFETY: non-null; the caller gives a NUL-terminated string.
            let s = unsafe { CStr::from_ptr(path) };
            PathBuf::from(
                s.to_str()
                    .map_err(|_| bad("path", s.to_string_lossy(), "must be UTF-8"))?,
            )
        };
        h.load_tuning_cache(&path)?;
        Ok(())
    })
}

/// Writes the handle's tuning results to the file they were loaded from (else the default
/// path), merged with what other processes wrote there meanwhile.
#[no_mangle]
pub unsafe extern "C" fn autodnnSaveTuningCache(handle: autodnnHandle_t) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        h.save_tuning_cache()?;
        Ok(())
    })
}

/// The precision f32 operands may be computed in (cuDNN's `cudnnMathType_t`, oneDNN's
/// fpmath mode). The handle's mode (`autodnnSetMathType`) serves `autodnnSgemm` and every
/// convolution whose descriptor leaves it at `AUTODNN_DEFAULT_MATH`; a convolution
/// descriptor's own (`autodnnSetConvolutionMathType`) serves the calls given that descriptor.
pub type autodnnMathType_t = c_int;
/// On a convolution descriptor: the handle's mode (the default). On a handle: strict.
pub const AUTODNN_DEFAULT_MATH: autodnnMathType_t = 0;
/// f32 problems compute in f32.
pub const AUTODNN_STRICT_MATH: autodnnMathType_t = 1;
/// f32 problems may run with their operands rounded to bf16 (round to nearest even) and f32
/// sums, on bf16 dot-product units where the CPU has them and they are faster
/// (`autodnnSetBf16Units`); cuDNN's `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`. The algorithms
/// that run in bf16 are the GEMM-based ones; results stay within their documented bound for
/// the rounded operands.
pub const AUTODNN_ALLOW_BF16_MATH: autodnnMathType_t = 2;

/// The mode a math type names; `None` for `AUTODNN_DEFAULT_MATH` (whoever holds it decides).
pub(crate) fn math_mode(field: &str, t: autodnnMathType_t) -> R<Option<MathMode>> {
    match t {
        AUTODNN_DEFAULT_MATH => Ok(None),
        AUTODNN_STRICT_MATH => Ok(Some(MathMode::Strict)),
        AUTODNN_ALLOW_BF16_MATH => Ok(Some(MathMode::AllowBf16)),
        _ => Err(bad(
            field,
            t,
            "must be AUTODNN_DEFAULT_MATH, AUTODNN_STRICT_MATH or AUTODNN_ALLOW_BF16_MATH",
        )),
    }
}

/// The math type of a mode.
pub(crate) fn math_type(m: MathMode) -> autodnnMathType_t {
    match m {
        MathMode::Strict => AUTODNN_STRICT_MATH,
        MathMode::AllowBf16 => AUTODNN_ALLOW_BF16_MATH,
    }
}

/// Sets the handle's math type (`AUTODNN_DEFAULT_MATH` is strict).
#[no_mangle]
pub unsafe extern "C" fn autodnnSetMathType(
    handle: autodnnHandle_t,
    mathType: autodnnMathType_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        h.set_math_mode(math_mode("mathType", mathType)?.unwrap_or_default());
        Ok(())
    })
}

/// Stores the handle's math type (`AUTODNN_STRICT_MATH` or `AUTODNN_ALLOW_BF16_MATH`) in
/// `*mathType`.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetMathType(
    handle: autodnnHandle_t,
    mathType: *mut autodnnMathType_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        // SAFETY: the caller gives a writable int.
        let t = unsafe { out(mathType, "mathType") }?;
        *t = math_type(h.math_mode());
        Ok(())
    })
}

/// Which units compute products of bf16 values (f32 operands under
/// `AUTODNN_ALLOW_BF16_MATH`): on some CPUs the bf16 dot-product units run at half the f32
/// rate.
pub type autodnnBf16Units_t = c_int;
/// The bf16 units where they are measured faster than the f32 ones (the default; the
/// measurement takes about a millisecond, once per process).
pub const AUTODNN_BF16_UNITS_AUTO: autodnnBf16Units_t = 0;
/// The bf16 units wherever the CPU has them.
pub const AUTODNN_BF16_UNITS_ALWAYS: autodnnBf16Units_t = 1;
/// Never: f32 operands stay f32 whatever the math type.
pub const AUTODNN_BF16_UNITS_NEVER: autodnnBf16Units_t = 2;

/// Chooses the units that compute products of bf16 values.
#[no_mangle]
pub unsafe extern "C" fn autodnnSetBf16Units(
    handle: autodnnHandle_t,
    units: autodnnBf16Units_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        let u = match units {
            AUTODNN_BF16_UNITS_AUTO => Bf16Units::Auto,
            AUTODNN_BF16_UNITS_ALWAYS => Bf16Units::Always,
            AUTODNN_BF16_UNITS_NEVER => Bf16Units::Never,
            _ => {
                return Err(bad(
                    "units",
                    units,
                    "must be one of the AUTODNN_BF16_UNITS_* values",
                ))
            }
        };
        h.set_bf16_units(u);
        Ok(())
    })
}

/// Stores the handle's bf16 units choice in `*units`.
#[no_mangle]
pub unsafe extern "C" fn autodnnGetBf16Units(
    handle: autodnnHandle_t,
    units: *mut autodnnBf16Units_t,
) -> autodnnStatus_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { live_handle(handle) }?;
        // SAFETY: the caller gives a writable int.
        let u = unsafe { out(units, "units") }?;
        *u = match h.bf16_units() {
            Bf16Units::Auto => AUTODNN_BF16_UNITS_AUTO,
            Bf16Units::Always => AUTODNN_BF16_UNITS_ALWAYS,
            Bf16Units::Never => AUTODNN_BF16_UNITS_NEVER,
        };
        Ok(())
    })
}

/// The handle a convolution call given `convDesc` runs on: `handle`'s, or (when the
/// descriptor names a math type that differs from the handle's) a copy of it with that
/// type, sharing its threads and tuning results.
///
/// # Safety
/// As [`live_handle`]; `convDesc` is null or live.
pub(crate) unsafe fn conv_handle(
    handle: autodnnHandle_t,
    convDesc: crate::desc::autodnnConvolutionDescriptor_t,
) -> R<Arc<Handle>> {
    // SAFETY: forwarded.
    let (h, mode) = unsafe {
        (
            live_handle(handle)?,
            crate::desc::convolution_math(convDesc, "convDesc")?,
        )
    };
    match mode {
        Some(m) if m != h.math_mode() => {
            let copy = Handle::clone(&h);
            copy.set_math_mode(m);
            Ok(Arc::new(copy))
        }
        _ => Ok(h),
    }
}

/// The library's version as `MAJOR * 10000 + MINOR * 100 + PATCHLEVEL` (cuDNN's encoding).
#[no_mangle]
pub extern "C" fn autodnnGetVersion() -> usize {
    version_number(dnn::VERSION)
}

fn version_number(v: &str) -> usize {
    let mut parts = v.split('.').map(|p| p.parse::<usize>().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    let (major, minor, patch) = (next(), next(), next());
    major * 10000 + minor * 100 + patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{AUTODNN_STATUS_BAD_PARAM, AUTODNN_STATUS_SUCCESS};

    #[test]
    fn version_matches_the_header_constants() {
        let want = AUTODNN_MAJOR as usize * 10000
            + AUTODNN_MINOR as usize * 100
            + AUTODNN_PATCHLEVEL as usize;
        assert_eq!(autodnnGetVersion(), want);
        assert_eq!(version_number("1.2.3"), 10203);
    }

    #[test]
    fn convolutions_run_with_the_descriptors_math_type_else_the_handles() {
        use crate::desc::{
            autodnnConvolutionDescriptor_t, autodnnCreateConvolutionDescriptor,
            autodnnDestroyConvolutionDescriptor, autodnnSetConvolutionMathType,
        };
        let mut h: autodnnHandle_t = std::ptr::null_mut();
        let mut cd: autodnnConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: valid slots; both objects are used only while live.
        unsafe {
            assert_eq!(autodnnCreateWithThreads(&mut h, 1), AUTODNN_STATUS_SUCCESS);
            assert_eq!(
                autodnnCreateConvolutionDescriptor(&mut cd),
                AUTODNN_STATUS_SUCCESS
            );
            let mode = |h, cd| conv_handle(h, cd).unwrap().math_mode();
            assert_eq!(mode(h, cd), MathMode::Strict);
            let set = |cd, t| autodnnSetConvolutionMathType(cd, t);
            assert_eq!(set(cd, AUTODNN_ALLOW_BF16_MATH), AUTODNN_STATUS_SUCCESS);
            assert_eq!(mode(h, cd), MathMode::AllowBf16);
            // The descriptor's mode is the call's only: the handle keeps its own.
            assert_eq!(live_handle(h).unwrap().math_mode(), MathMode::Strict);
            assert_eq!(
                autodnnSetMathType(h, AUTODNN_ALLOW_BF16_MATH),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(set(cd, AUTODNN_DEFAULT_MATH), AUTODNN_STATUS_SUCCESS);
            assert_eq!(mode(h, cd), MathMode::AllowBf16);
            assert_eq!(set(cd, AUTODNN_STRICT_MATH), AUTODNN_STATUS_SUCCESS);
            assert_eq!(mode(h, cd), MathMode::Strict);
            // A copy keeps the handle's other settings and shares its tuning results.
            assert_eq!(
                autodnnSetBf16Units(h, AUTODNN_BF16_UNITS_NEVER),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(autodnnSetDeterministic(h, 1), AUTODNN_STATUS_SUCCESS);
            let copy = conv_handle(h, cd).unwrap();
            assert_eq!(copy.bf16_units(), Bf16Units::Never);
            assert!(copy.deterministic());
            // Mode and units survive a change of threads.
            assert_eq!(autodnnSetThreads(h, 2), AUTODNN_STATUS_SUCCESS);
            let inner = live_handle(h).unwrap();
            assert_eq!(inner.math_mode(), MathMode::AllowBf16);
            assert_eq!(inner.bf16_units(), Bf16Units::Never);
            assert_eq!(
                autodnnDestroyConvolutionDescriptor(cd),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(autodnnDestroy(h), AUTODNN_STATUS_SUCCESS);
        }
    }

    #[test]
    fn handles_are_made_checked_and_freed() {
        let mut h: autodnnHandle_t = std::ptr::null_mut();
        // SAFETY: a valid slot; the handle is used only while live.
        unsafe {
            assert_eq!(
                autodnnCreate(std::ptr::null_mut()),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnCreateWithThreads(&mut h, 0),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnCreateWithThreads(&mut h, -3),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert!(h.is_null());
            assert_eq!(autodnnCreateWithThreads(&mut h, 1), AUTODNN_STATUS_SUCCESS);
            let mut n = 0;
            assert_eq!(autodnnGetThreads(h, &mut n), AUTODNN_STATUS_SUCCESS);
            assert_eq!(n, 1);
            assert_eq!(autodnnSetWorkspaceLimit(h, 1024), AUTODNN_STATUS_SUCCESS);
            assert_eq!(autodnnSetDeterministic(h, 1), AUTODNN_STATUS_SUCCESS);
            assert_eq!(autodnnSetThreads(h, 2), AUTODNN_STATUS_SUCCESS);
            assert_eq!(autodnnGetThreads(h, &mut n), AUTODNN_STATUS_SUCCESS);
            assert_eq!(n, 2);
            let inner = live_handle(h).unwrap();
            assert_eq!(inner.workspace_limit(), Some(1024));
            assert!(inner.deterministic());
            assert_eq!(autodnnSetThreads(h, 0), AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(autodnnSetSelectionPolicy(h, 9), AUTODNN_STATUS_BAD_PARAM);
            assert_eq!(
                autodnnSetSelectionPolicy(h, AUTODNN_POLICY_HEURISTIC),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(live_handle(h).unwrap().policy(), Policy::Heuristic);
            // The tuning file is remembered across a change of threads.
            let dir = std::env::temp_dir().join(format!("autodnn-capi-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("cache.json");
            let c_path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
            assert_eq!(
                autodnnLoadTuningCache(h, c_path.as_ptr()),
                AUTODNN_STATUS_SUCCESS
            );
            assert_eq!(autodnnSetThreads(h, 1), AUTODNN_STATUS_SUCCESS);
            assert_eq!(
                live_handle(h).unwrap().tuning_cache_path(),
                Some(file.clone())
            );
            assert_eq!(live_handle(h).unwrap().policy(), Policy::Heuristic);
            assert_eq!(autodnnSaveTuningCache(h), AUTODNN_STATUS_SUCCESS);
            assert!(file.is_file());
            let missing = std::ffi::CString::new("/no/such/folder/cache.json").unwrap();
            assert_eq!(
                autodnnLoadTuningCache(h, missing.as_ptr()),
                AUTODNN_STATUS_BAD_PARAM
            );
            std::fs::remove_dir_all(&dir).unwrap();
            assert_eq!(
                autodnnGetThreads(h, std::ptr::null_mut()),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(
                autodnnGetThreads(std::ptr::null_mut(), &mut n),
                AUTODNN_STATUS_BAD_PARAM
            );
            assert_eq!(autodnnDestroy(h), AUTODNN_STATUS_SUCCESS);
            assert_eq!(autodnnDestroy(std::ptr::null_mut()), AUTODNN_STATUS_SUCCESS);
        }
    }
}
