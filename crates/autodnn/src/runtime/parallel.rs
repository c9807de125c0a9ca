//! Sharing one output buffer among worker threads that write disjoint elements, and
//! parallel loops whose per-thread scratch is allocated fallibly before they start.

use std::marker::PhantomData;
use std::sync::Mutex;

use rayon::prelude::*;

use crate::error::Result;
use crate::runtime::ExecContext;

/// Runs `f(scratch, i)` for every `i` in `0..items` on the context's threads, each thread
/// with its own scratch, made by `init` before the loop starts (on the calling thread alone
/// with one thread or one item). `init` allocates fallibly: an error of it is returned, and
/// items not started by then do not run. A thread that finds its scratch in use (an item of this loop it
/// runs while waiting inside another, should `f` ever wait on other work) makes one more.
///
/// # Errors
/// The first error of `init`.
pub(crate) fn for_each_with<S: Send>(
    ctx: &ExecContext<'_>,
    items: usize,
    init: impl Fn() -> Result<S> + Sync,
    f: impl Fn(&mut S, usize) + Sync,
) -> Result<()> {
    if ctx.threads <= 1 || items <= 1 {
        let mut s = init()?;
        (0..items).for_each(|i| f(&mut s, i));
        return Ok(());
    }
    let mut slots = crate::alloc::try_vec_with_capacity(ctx.threads, "per-thread scratch")?;
    for _ in 0..ctx.threads {
        slots.push(Mutex::new(init()?));
    }
    ctx.pool.install(|| {
        (0..items).into_par_iter().try_for_each(|i| {
            let slot = rayon::current_thread_index().and_then(|t| slots.get(t));
            match slot.and_then(|m| m.try_lock().ok()) {
                Some(mut s) => f(&mut s, i),
                None => f(&mut init()?, i),
            }
            Ok(())
        })
    })
}

/// A mutable output that several threads write at once, each at elements no other thread
/// touches. Algorithms split their output by (image, channel, position) blocks; the tensor
/// descriptors guarantee that distinct coordinates never share memory (explicit strides that
/// alias are refused when the descriptor is made), so disjoint coordinates mean disjoint
/// elements.
pub(crate) struct SharedOut<'a, T = f32> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: SharedOut only hands out writes through `unsafe` methods whose contract requires
// that concurrent writers use disjoint indices, so sharing the pointer between threads cannot
// create a data race when that contract is kept.
unsafe impl<T: Send> Send for SharedOut<'_, T> {}
// SAFETY: as for Send.
unsafe impl<T: Send> Sync for SharedOut<'_, T> {}

impl<'a, T: Copy> SharedOut<'a, T> {
    pub(crate) fn new(y: &'a mut [T]) -> SharedOut<'a, T> {
        SharedOut {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            _borrow: PhantomData,
        }
    }

    /// Writes `src` at `start..start + src.len()`.
    ///
    /// # Safety
    /// No other thread reads or writes any of these elements while this `SharedOut` lives.
    #[inline]
    pub(crate) unsafe fn write_slice(&self, start: usize, src: &[T]) {
        assert!(start <= self.len && src.len() <= self.len - start);
        // SAFETY: the range is in bounds (asserted) of the slice borrowed for 'a, and the
        // caller guarantees no other thread accesses it concurrently.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(start), src.len()) }
    }

    /// Elements `start..start + len`, to write (or read) in place.
    ///
    /// # Safety
    /// No other thread reads or writes any of these elements while the slice lives.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start <= self.len && len <= self.len - start);
        // SAFETY: the range is in bounds (asserted) of the slice borrowed for 'a, and the
        // caller guarantees no other thread accesses it while the returned slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }

    /// Reads one element.
    ///
    /// # Safety
    /// No other thread writes element `i` while this `SharedOut` lives.
    #[inline]
    pub(crate) unsafe fn read(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: in bounds (asserted); no concurrent writer by the caller's contract.
        unsafe { self.ptr.add(i).read() }
    }

    /// Writes one element.
    ///
    /// # Safety
    /// No other thread reads or writes element `i` while this `SharedOut` lives.
    #[inline]
    pub(crate) unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: in bounds (asserted); exclusive by the caller's contract.
        unsafe { self.ptr.add(i).write(v) }
    }
}

impl<T> SharedOut<'_, T> {
    /// The first element's address, for kernels that store whole vectors at once.
    ///
    /// Writing through it is subject to the same contract as [`SharedOut::write`]: only
    /// elements of the borrowed slice, and only ones no other thread accesses meanwhile.
    #[inline]
    pub(crate) fn as_mut_ptr(&self) -> *mut T {
        self.ptr
    }

    /// Elements of the borrowed slice.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}
