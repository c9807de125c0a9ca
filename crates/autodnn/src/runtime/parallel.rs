//! Sharing one output buffer among worker threads that write disjoint elements, and
//! parallel loops whose per-thread scratch is allocated fallibly before they start.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::runtime::pool::claim;
use crate::runtime::ExecContext;

/// Runs `f(i)` for every `i` in `0..items` on the context's threads (on the calling thread
/// alone with one thread or one item). Items go to whichever thread asks next.
pub(crate) fn for_each(ctx: &ExecContext<'_>, items: usize, f: impl Fn(usize) + Sync) {
    if ctx.threads <= 1 || items <= 1 {
        (0..items).for_each(f);
        return;
    }
    let next = AtomicUsize::new(0);
    ctx.pool.run(ctx.threads.min(items), &|_| {
        claim(&next, items).for_each(&f)
    });
}

/// [`for_each`] of a fallible `f`: the first error is returned, and items not started by
/// then do not run.
///
/// # Errors
/// The first error of `f`.
pub(crate) fn try_for_each(
    ctx: &ExecContext<'_>,
    items: usize,
    f: impl Fn(usize) -> Result<()> + Sync,
) -> Result<()> {
    if ctx.threads <= 1 || items <= 1 {
        return (0..items).try_for_each(f);
    }
    let failed = FirstError::default();
    for_each(ctx, items, |i| {
        if !failed.stopped() {
            failed.set(f(i));
        }
    });
    failed.into_result()
}

/// Runs `f(i, chunk)` for the chunks of `chunk` elements of `data` (the last one shorter
/// when `chunk` does not divide its length), on the context's threads.
pub(crate) fn for_each_chunk<T: Send>(
    ctx: &ExecContext<'_>,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk = chunk.max(1);
    let items = data.len().div_ceil(chunk);
    if ctx.threads <= 1 || items <= 1 {
        data.chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
        return;
    }
    let len = data.len();
    let out = SharedOut::new(data);
    for_each(ctx, items, |i| {
        let start = i * chunk;
        // SAFETY: chunk i covers elements i·chunk .. (i+1)·chunk, which no other item
        // touches, and each item runs once.
        f(i, unsafe { out.slice_mut(start, chunk.min(len - start)) });
    });
}

/// [`for_each_chunk`] of a fallible `f`.
///
/// # Errors
/// The first error of `f`.
pub(crate) fn try_for_each_chunk<T: Send>(
    ctx: &ExecContext<'_>,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) -> Result<()> + Sync,
) -> Result<()> {
    let failed = FirstError::default();
    for_each_chunk(ctx, data, chunk, |i, c| {
        if !failed.stopped() {
            failed.set(f(i, c));
        }
    });
    failed.into_result()
}

/// The first error of a parallel loop, and whether there has been one.
#[derive(Default)]
pub(crate) struct FirstError {
    error: Mutex<Option<Error>>,
    stopped: AtomicBool,
}

impl FirstError {
    /// Keeps `r`'s error if it is the first.
    pub(crate) fn set(&self, r: Result<()>) {
        if let Err(e) = r {
            self.stopped.store(true, Ordering::Relaxed);
            let mut g = self.error.lock().unwrap_or_else(|e| e.into_inner());
            g.get_or_insert(e);
        }
    }

    /// Whether an error has been kept.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// The first error, if any.
    pub(crate) fn into_result(self) -> Result<()> {
        match self.error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Runs `f(scratch, i)` for every `i` in `0..items` on the context's threads, each thread
/// with its own scratch, made by `init` before the loop starts (on the calling thread alone
/// with one thread or one item). `init` allocates fallibly: an error of it is returned, and
/// items not started by then do not run.
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
    let tasks = ctx.threads.min(items);
    let mut slots = crate::alloc::try_vec_with_capacity(tasks, "per-thread scratch")?;
    for _ in 0..tasks {
        slots.push(Mutex::new(init()?));
    }
    let next = AtomicUsize::new(0);
    ctx.pool.run(tasks, &|t| {
        // Task t alone uses slot t: the lock is never contended.
        let mut s = slots[t].lock().unwrap_or_else(|e| e.into_inner());
        claim(&next, items).for_each(|i| f(&mut s, i));
    });
    Ok(())
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

impl<'a, T> SharedOut<'a, T> {
    pub(crate) fn new(y: &'a mut [T]) -> SharedOut<'a, T> {
        SharedOut {
            ptr: y.as_mut_ptr(),
            len: y.len(),
            _borrow: PhantomData,
        }
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

impl<T: Copy> SharedOut<'_, T> {
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
