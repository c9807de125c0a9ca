//! Fallible allocation of every buffer the library sizes from a problem, with a fault
//! injector that fails the N-th allocation (as SQLite's malloc tests do).
//!
//! Workspaces come from the handle's budgeted pool (`select::workspace`); everything else an
//! algorithm or the GEMM engine allocates (packing buffers, prepared weights, transform
//! plans, tap tables, per-thread scratch) goes through the functions here, so that a request
//! the system cannot satisfy is [`Error::OutOfMemory`], never an abort, and so that a test can
//! fail any one allocation of a call ([`FailNth`]) and check that the call still ends in a
//! correct output (through the fallback chain) or in a typed out-of-memory error.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error::{Error, Result};

/// Counts down to the failing allocation; 0 = disarmed.
static COUNTDOWN: AtomicUsize = AtomicUsize::new(0);
/// Whether every allocation after the N-th fails too (else only the N-th).
static PERSIST: AtomicBool = AtomicBool::new(false);
/// Allocations made through this module since the last [`FailNth::arm`] or
/// [`FailNth::count`].
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Set once the armed allocation has failed, so that persistent mode fails the rest.
static TRIPPED: AtomicBool = AtomicBool::new(false);

/// The process-wide fault injector for the library's own allocations. It is for tests: one
/// test at a time may use it (the state is global, shared by every handle and thread).
///
/// ```
/// use autodnn::alloc::FailNth;
/// FailNth::count(); // reset the counter
/// let n = FailNth::allocations(); // allocations made since
/// assert_eq!(n, 0);
/// FailNth::arm(3, false); // the third allocation from now fails, the others succeed
/// FailNth::disarm();
/// ```
pub struct FailNth;

/// Environment variable read when a handle is made: `N` fails the N-th allocation of the
/// library's own buffers from then on, `N+` that one and every one after it (a rehearsal of
/// memory exhaustion; `AUTODNN_FAIL_ALLOC` covers workspaces alone).
pub const FAIL_NTH_ENV: &str = "AUTODNN_FAIL_NTH";

impl FailNth {
    /// Arms the injector from [`FAIL_NTH_ENV`] when it is set (and leaves it alone otherwise).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming [`FAIL_NTH_ENV`] for anything but `N` or `N+` with N ≥ 1.
    pub fn arm_from_env() -> Result<()> {
        let Ok(v) = std::env::var(FAIL_NTH_ENV) else {
            return Ok(());
        };
        let t = v.trim();
        let (n, persist) = match t.strip_suffix('+') {
            Some(n) => (n, true),
            None => (t, false),
        };
        match n.trim().parse::<usize>() {
            Ok(n) if n >= 1 => {
                FailNth::arm(n, persist);
                Ok(())
            }
            _ => Err(Error::bad(
                FAIL_NTH_ENV,
                &v,
                "expected N or N+ with a whole number N >= 1",
            )),
        }
    }

    /// Fails the `n`-th allocation from now (`n` ≥ 1), and with `persist` every one after it.
    pub fn arm(n: usize, persist: bool) {
        COUNT.store(0, Ordering::SeqCst);
        TRIPPED.store(false, Ordering::SeqCst);
        PERSIST.store(persist, Ordering::SeqCst);
        COUNTDOWN.store(n.max(1), Ordering::SeqCst);
    }

    /// Stops injecting failures.
    pub fn disarm() {
        COUNTDOWN.store(0, Ordering::SeqCst);
        TRIPPED.store(false, Ordering::SeqCst);
        PERSIST.store(false, Ordering::SeqCst);
    }

    /// Resets the allocation counter (and disarms).
    pub fn count() {
        FailNth::disarm();
        COUNT.store(0, Ordering::SeqCst);
    }

    /// Allocations made through the library's fallible allocator since the last
    /// [`FailNth::arm`] or [`FailNth::count`].
    pub fn allocations() -> usize {
        COUNT.load(Ordering::SeqCst)
    }

    /// True when an armed failure has been injected.
    pub fn tripped() -> bool {
        TRIPPED.load(Ordering::SeqCst)
    }

    /// Whether this allocation is to fail.
    fn should_fail() -> bool {
        COUNT.fetch_add(1, Ordering::Relaxed);
        if TRIPPED.load(Ordering::Relaxed) {
            return PERSIST.load(Ordering::Relaxed);
        }
        let mut cur = COUNTDOWN.load(Ordering::Relaxed);
        while cur != 0 {
            match COUNTDOWN.compare_exchange_weak(cur, cur - 1, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) if cur == 1 => {
                    TRIPPED.store(true, Ordering::SeqCst);
                    return true;
                }
                Ok(_) => return false,
                Err(now) => cur = now,
            }
        }
        false
    }
}

fn oom<T>(n: usize, what: &str, reason: impl std::fmt::Display) -> Error {
    Error::OutOfMemory {
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
        what: format!("{what}: {reason}"),
    }
}

/// An empty vector with room for `n` elements, or [`Error::OutOfMemory`] naming `what`.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
pub(crate) fn try_vec_with_capacity<T>(n: usize, what: &str) -> Result<Vec<T>> {
    if FailNth::should_fail() {
        return Err(oom::<T>(n, what, "injected failure"));
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|e| oom::<T>(n, what, e))?;
    Ok(v)
}

/// `n` copies of `value` (`vec![value; n]`), or [`Error::OutOfMemory`] naming `what`.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
#[allow(dead_code)] // used as the allocation sites move over
pub(crate) fn try_vec<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(n, what)?;
    v.resize(n, value);
    Ok(v)
}

/// Grows `v` to at least `n` elements filled with `value` (never shrinks its capacity), or
/// [`Error::OutOfMemory`] naming `what`; a call that needs no new memory allocates nothing.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
#[allow(dead_code)] // used as the allocation sites move over
pub(crate) fn try_resize<T: Clone>(v: &mut Vec<T>, n: usize, value: T, what: &str) -> Result<()> {
    if n > v.capacity() {
        if FailNth::should_fail() {
            return Err(oom::<T>(n, what, "injected failure"));
        }
        v.try_reserve_exact(n - v.len())
            .map_err(|e| oom::<T>(n, what, e))?;
    }
    v.resize(n, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_requests_are_errors() {
        let e = try_vec_with_capacity::<u64>(usize::MAX / 4, "x").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        let mut v: Vec<u8> = Vec::new();
        assert!(try_resize(&mut v, usize::MAX / 2, 0, "y").is_err());
        assert_eq!(try_vec(3, 1u8, "z").unwrap(), vec![1, 1, 1]);
    }
}
