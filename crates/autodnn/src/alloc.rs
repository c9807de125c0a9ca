//! Fallible allocation of every buffer the library sizes from a problem, with a fault
//! injector that fails the N-th allocation (as SQLite's malloc tests do).
//!
//! Workspaces come from the handle's budgeted pool (`runtime::workspace`); everything else an
//! algorithm or the GEMM engine allocates (packing buffers, prepared weights, transform
//! plans, tap tables, per-thread scratch) goes through the functions here, so that a request
//! the system cannot satisfy is [`Error::OutOfMemory`], never an abort, and so that a test can
//! fail any one allocation of a call ([`FailNth`]) and check that the call still ends in a
//! correct output (through the fallback chain) or in a typed out-of-memory error.
//!
//! **Routed here** (each a counted request the injector can fail): the workspace pool's
//! buffer; the GEMM engine's per-thread packing buffers and a batch's list of products; the
//! packing scratch of implicit GEMM (strip tables, NHWC panels) and of the filter packer;
//! every algorithm's prepared weights and the plain copy of the filter; tap tables and block
//! lists (im2col, direct), depthwise's column tables and weight scratch; the spectral
//! engine's filter tables, line buffers, transform scratch (handed to rustfft's
//! `process_with_scratch`) and product scratch, and the growth of its plan cache; the
//! fallback chain's copy of y and the scratch output of timed selection; the other
//! operators' (`crate::layers`) statistics, coefficients, partial sums and reductions,
//! pooling scratch and divisors, softmax's per-group values. Per-thread scratch
//! of parallel loops is made before the loop starts (`parallel::for_each_with`), so that no
//! worker allocates inside it.
//!
//! **Deliberately not routed:**
//! - rustfft's planners and plans (twiddle tables of O(nh + nw) values per grid size, made
//!   once per size and cached for the process): rustfft has no fallible planning API;
//! - the worker threads' stacks and names; starting the threads is reported as
//!   [`Error::OutOfMemory`] by [`crate::Handle::with_threads`];
//! - the batch split's list of at most four parts;
//! - error messages, log lines and names;
//! - lists of at most four dimensions (the layers' walk orders) and the pieces of a parsed
//!   dimension string;
//! - selection bookkeeping sized by the number of registered algorithms or threads
//!   (rankings, chains, timing records, fallback events, the GEMM split's counters), and
//!   the backward-data residue list (at most 64 entries, made by checks too);
//! - the tuning cache's entries (one per distinct problem) and the cost model (read once);
//! - `PreparedWeights::clone` (the `Clone` trait cannot fail; the caller asks for it);
//! - the f64 [`crate::reference`] (a test oracle) and the command-line tool.

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
/// Set by the first [`FailNth::count`] or [`FailNth::arm`]: until then a request costs one
/// load of this flag, and the shared counter is not touched.
static ACTIVE: AtomicBool = AtomicBool::new(false);

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
        ACTIVE.store(true, Ordering::SeqCst);
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
        ACTIVE.store(true, Ordering::SeqCst);
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
    #[inline]
    fn should_fail() -> bool {
        if !ACTIVE.load(Ordering::Relaxed) {
            return false;
        }
        FailNth::count_and_check()
    }

    #[cold]
    fn count_and_check() -> bool {
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
    if n == 0 {
        return Ok(Vec::new());
    }
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
pub(crate) fn try_vec<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(n, what)?;
    v.resize(n, value);
    Ok(v)
}

/// Makes room in `v` for `n` elements in all (never shrinks it), or [`Error::OutOfMemory`]
/// naming `what`; a call that needs no new memory allocates nothing.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
pub(crate) fn try_reserve<T>(v: &mut Vec<T>, n: usize, what: &str) -> Result<()> {
    // Every request counts, also one the capacity already covers: a call's count then does
    // not depend on what earlier calls left in cached buffers, and the injector reaches
    // every site.
    if n > 0 && FailNth::should_fail() {
        return Err(oom::<T>(n, what, "injected failure"));
    }
    if n > v.capacity() {
        v.try_reserve_exact(n - v.len())
            .map_err(|e| oom::<T>(n, what, e))?;
    }
    Ok(())
}

/// Makes room in `map` for `additional` more entries, or [`Error::OutOfMemory`] naming
/// `what` (every request counts, as for [`try_reserve`]).
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
pub(crate) fn try_reserve_map<K: Eq + std::hash::Hash, V>(
    map: &mut std::collections::HashMap<K, V>,
    additional: usize,
    what: &str,
) -> Result<()> {
    if additional > 0 && FailNth::should_fail() {
        return Err(oom::<(K, V)>(additional, what, "injected failure"));
    }
    map.try_reserve(additional)
        .map_err(|e| oom::<(K, V)>(additional, what, e))
}

/// The items of `iter` in a vector (`collect`), or [`Error::OutOfMemory`] naming `what`.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
pub(crate) fn try_collect<T>(iter: impl ExactSizeIterator<Item = T>, what: &str) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(iter.len(), what)?;
    v.extend(iter);
    Ok(v)
}

/// A copy of `src`, or [`Error::OutOfMemory`] naming `what`.
///
/// # Errors
/// [`Error::OutOfMemory`] when the system (or the injector) refuses.
pub(crate) fn try_copy<T: Clone>(src: &[T], what: &str) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(src.len(), what)?;
    v.extend_from_slice(src);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_requests_are_errors() {
        let e = try_vec_with_capacity::<u64>(usize::MAX / 4, "x").unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        let mut v: Vec<u8> = Vec::new();
        assert!(try_reserve(&mut v, usize::MAX / 2, "y").is_err());
        assert_eq!(try_vec(3, 1u8, "z").unwrap(), vec![1, 1, 1]);
    }
}
