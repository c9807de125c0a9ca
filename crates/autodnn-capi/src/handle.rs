//! The handle (cuDNN's `cudnnHandle_t`): the library's worker threads and settings.

use std::ffi::c_int;
use std::sync::{Arc, RwLock};

use dnn::Handle;

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
/// `h` is null or a handle from `autodnnCreate` not yet destroyed.
pub(crate) unsafe fn live_handle(h: autodnnHandle_t) -> R<Arc<Handle>> {
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

/// Restarts the handle's worker pool with `threads` threads (at least 1). The workspace limit
/// and the determinism setting are kept; tuning results measured so far are dropped. Calls
/// already running finish on the old threads.
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
