//! The handle's workspace allocator: a byte budget, fallible allocation, one cached buffer
//! reused across calls, and fault injection for rehearsing low-memory deployments.
//!
//! Every workspace an algorithm receives from the handle comes from [`WorkspacePool::reserve`]:
//! a request past the budget, an injected failure and a failing system allocation are all
//! [`Error::OutOfMemory`], never an abort. The slice handed out is exactly the bytes asked
//! for, so no algorithm ever sees more than the budget allows.
//!
//! Algorithms split the bytes they receive into typed buffers with [`Carve`]:
//! `Carve::new(ws).take::<f32>(n)?`, one helper for every element type and alignment.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// Environment variable read when a handle is made: `algo[,algo...]` makes those algorithms'
/// workspace reservations fail, `>BYTES` makes every reservation of more than BYTES fail.
pub const FAIL_ALLOC_ENV: &str = "AUTODNN_FAIL_ALLOC";

/// Which workspace reservations fail on purpose (see [`FAIL_ALLOC_ENV`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FailAlloc {
    /// None: only the budget and the system can refuse.
    #[default]
    Never,
    /// Every reservation for these algorithms fails, whatever its size (zero bytes included,
    /// so that the fallback past any algorithm can be rehearsed).
    Algorithms(Vec<String>),
    /// Every reservation of more than this many bytes fails.
    Above(usize),
}

impl FailAlloc {
    /// Parses `algo[,algo...]`, `>BYTES`, or an empty string (no injection).
    ///
    /// # Errors
    /// [`Error::BadParam`] naming [`FAIL_ALLOC_ENV`] for a bad byte count or an empty name.
    pub fn parse(s: &str) -> Result<FailAlloc> {
        let t = s.trim();
        if t.is_empty() {
            return Ok(FailAlloc::Never);
        }
        if let Some(n) = t.strip_prefix('>') {
            let bytes = n.trim().parse::<usize>().map_err(|_| {
                Error::bad(
                    FAIL_ALLOC_ENV,
                    s,
                    "expected >BYTES with a whole number of bytes",
                )
            })?;
            return Ok(FailAlloc::Above(bytes));
        }
        let names: Vec<String> = t.split(',').map(|n| n.trim().to_string()).collect();
        if names.iter().any(String::is_empty) {
            return Err(Error::bad(
                FAIL_ALLOC_ENV,
                s,
                "expected algorithm names separated by commas, or >BYTES",
            ));
        }
        Ok(FailAlloc::Algorithms(names))
    }

    /// The setting in [`FAIL_ALLOC_ENV`] (none when unset).
    ///
    /// # Errors
    /// As [`FailAlloc::parse`].
    pub fn from_env() -> Result<FailAlloc> {
        match std::env::var(FAIL_ALLOC_ENV) {
            Ok(v) => FailAlloc::parse(&v),
            Err(_) => Ok(FailAlloc::Never),
        }
    }

    /// True when a reservation of `bytes` for `algo` is to fail.
    pub fn fails(&self, algo: &str, bytes: usize) -> bool {
        match self {
            FailAlloc::Never => false,
            FailAlloc::Algorithms(names) => names.iter().any(|n| n == algo),
            FailAlloc::Above(limit) => bytes > *limit,
        }
    }
}

/// One cached buffer, lent out for one call at a time and given back when the call ends; a
/// call that finds it lent out (another thread's call) allocates its own.
#[derive(Debug, Default)]
pub(crate) struct WorkspacePool {
    cached: Mutex<Vec<u8>>,
}

/// A workspace of exactly the requested size, on loan from the pool.
#[derive(Debug)]
pub(crate) struct Workspace<'p> {
    buf: Vec<u8>,
    len: usize,
    pool: &'p WorkspacePool,
}

impl Workspace<'_> {
    /// The bytes an algorithm may use: exactly the reservation's size.
    pub(crate) fn slice(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Workspace<'_> {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() == 0 {
            return;
        }
        let mut cached = self.pool.lock();
        if buf.capacity() > cached.capacity() {
            *cached = buf;
        }
    }
}

impl WorkspacePool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // The buffer holds no invariant a panicking thread could break.
        self.cached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A workspace of `bytes` for `algo`, within `limit`, unless `fail` injects a failure.
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] saying whether the budget, the injection or the system refused.
    pub(crate) fn reserve(
        &self,
        bytes: usize,
        algo: &str,
        limit: Option<usize>,
        fail: &FailAlloc,
    ) -> Result<Workspace<'_>> {
        if let Some(limit) = limit {
            if bytes > limit {
                return Err(Error::OutOfMemory {
                    bytes,
                    what: format!("{algo}'s workspace: over the handle's budget of {limit} bytes"),
                });
            }
        }
        if fail.fails(algo, bytes) {
            return Err(Error::OutOfMemory {
                bytes,
                what: format!("{algo}'s workspace: injected failure ({FAIL_ALLOC_ENV})"),
            });
        }
        let mut buf = std::mem::take(&mut *self.lock());
        if buf.capacity() < bytes {
            // Free the cached buffer before asking for a bigger one.
            buf = Vec::new();
        }
        // Through the library's allocator, so that its fault injector reaches workspaces
        // too (a request the cached buffer covers counts as well, and allocates nothing).
        let what = format!("{algo}'s workspace");
        if let Err(e) = crate::alloc::try_reserve(&mut buf, bytes, &what) {
            // Keep the cached buffer for the next call.
            let mut cached = self.lock();
            if buf.capacity() > cached.capacity() {
                *cached = buf;
            }
            return Err(e);
        }
        if buf.len() < bytes {
            // Bytes are initialised once, when the buffer first grows past them; later calls
            // reuse them as they are (algorithms must not assume a zeroed workspace).
            buf.resize(bytes, 0);
        }
        Ok(Workspace {
            buf,
            len: bytes,
            pool: self,
        })
    }

    /// Frees the cached buffer (after an allocation failure, or when the budget shrinks).
    pub(crate) fn release(&self) {
        *self.lock() = Vec::new();
    }

    /// Bytes held by the cached buffer.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.lock().capacity()
    }
}

/// Element types a workspace can be carved into: plain numbers for which every bit pattern is
/// a valid value.
pub trait WorkspaceElement: Copy + sealed::Sealed {}
mod sealed {
    pub trait Sealed {}
}
macro_rules! workspace_element {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl WorkspaceElement for $t {}
    )*};
}
workspace_element!(u8, u16, u32, i32, f32, f64, half::bf16, half::f16);

/// Typed buffers cut one after another from a workspace's bytes.
#[derive(Debug)]
pub struct Carve<'w> {
    rest: &'w mut [u8],
}

impl<'w> Carve<'w> {
    /// Starts carving `ws`.
    pub fn new(ws: &'w mut [u8]) -> Carve<'w> {
        Carve { rest: ws }
    }

    /// The next `n` elements of type `T`, at their natural alignment.
    ///
    /// # Errors
    /// As [`Carve::take_aligned`].
    pub fn take<T: WorkspaceElement>(&mut self, n: usize) -> Result<&'w mut [T]> {
        self.take_aligned(n, std::mem::align_of::<T>())
    }

    /// The next `n` elements of type `T`, starting at a multiple of `align` bytes (a power of
    /// two; the natural alignment at least); the bytes skipped to reach it are lost.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] naming `workspace` when what is left is too short;
    /// [`Error::BadParam`] naming `workspace` when it would fit but for the alignment;
    /// [`Error::Overflow`] when the size overflows.
    pub fn take_aligned<T: WorkspaceElement>(
        &mut self,
        n: usize,
        align: usize,
    ) -> Result<&'w mut [T]> {
        let align = align.max(std::mem::align_of::<T>()).next_power_of_two();
        let skip = self.rest.as_ptr().align_offset(align);
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::overflow("workspace", "size"))?;
        let need = skip
            .checked_add(bytes)
            .ok_or_else(|| Error::overflow("workspace", "size"))?;
        if need > self.rest.len() && skip > 0 && bytes <= self.rest.len() {
            return Err(Error::bad(
                "workspace",
                format!("{:p}", self.rest.as_ptr()),
                format!("must be aligned to {align} bytes"),
            ));
        }
        if need > self.rest.len() {
            return Err(Error::BufferTooSmall {
                field: "workspace".into(),
                needed: need,
                got: self.rest.len(),
            });
        }
        let rest = std::mem::take(&mut self.rest);
        let (head, tail) = rest.split_at_mut(need);
        self.rest = tail;
        let buf = &mut head[skip..];
        // SAFETY: `T` is a plain number type (sealed `WorkspaceElement`) for which every bit
        // pattern is valid; `buf` starts at a multiple of `align` ≥ align_of::<T>() and holds
        // exactly n·size_of::<T>() bytes, so the middle part is the whole slice.
        let (pre, mid, post) = unsafe { buf.align_to_mut::<T>() };
        debug_assert!(pre.is_empty() && post.is_empty());
        if !pre.is_empty() || !post.is_empty() || mid.len() != n {
            return Err(Error::bad("workspace", "a byte slice", "cannot be aligned"));
        }
        Ok(mid)
    }

    /// Bytes not carved yet.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carving_types_and_alignment() {
        let mut bytes = [0u8; 200];
        let mut c = Carve::new(&mut bytes[1..]);
        let a = c.take::<f32>(3).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.as_ptr() as usize % 4, 0);
        a[2] = 1.5;
        let b = c.take_aligned::<half::bf16>(5, 64).unwrap();
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(b.len(), 5);
        let left = c.remaining();
        // Room for the elements but not for the padding: misaligned, named as such.
        let mut odd = [0u8; 16];
        let at = odd.as_ptr().align_offset(4) + 1;
        let e = Carve::new(&mut odd[at..at + 8]).take::<f32>(2).unwrap_err();
        assert!(
            matches!(&e, Error::BadParam { field, .. } if field == "workspace"),
            "{e:?}"
        );
        assert!(matches!(
            c.take::<f64>(left),
            Err(Error::BufferTooSmall { .. })
        ));
        assert!(matches!(
            c.take::<f32>(usize::MAX),
            Err(Error::Overflow { .. })
        ));
        assert_eq!(c.take::<u8>(0).unwrap().len(), 0);
    }

    #[test]
    fn parse_forms() {
        assert_eq!(FailAlloc::parse("").unwrap(), FailAlloc::Never);
        assert_eq!(FailAlloc::parse(" >1024 ").unwrap(), FailAlloc::Above(1024));
        assert_eq!(
            FailAlloc::parse("a, b").unwrap(),
            FailAlloc::Algorithms(vec!["a".into(), "b".into()])
        );
        assert!(FailAlloc::parse(">x").is_err());
        assert!(FailAlloc::parse("a,,b").is_err());
        let f = FailAlloc::parse(">10").unwrap();
        assert!(!f.fails("any", 10) && f.fails("any", 11));
        let f = FailAlloc::parse("a").unwrap();
        assert!(f.fails("a", 0) && !f.fails("b", 1 << 40));
    }

    #[test]
    fn budget_injection_reuse_and_release() {
        let pool = WorkspacePool::default();
        let never = FailAlloc::Never;
        assert!(matches!(
            pool.reserve(101, "a", Some(100), &never),
            Err(Error::OutOfMemory { bytes: 101, .. })
        ));
        {
            let mut ws = pool.reserve(100, "a", Some(100), &never).unwrap();
            assert_eq!(ws.slice().len(), 100);
        }
        assert_eq!(pool.cached_bytes(), 100);
        {
            let mut ws = pool.reserve(10, "a", None, &never).unwrap();
            assert_eq!(ws.slice().len(), 10);
        }
        assert_eq!(pool.cached_bytes(), 100, "the bigger buffer stays cached");
        let inject = FailAlloc::Algorithms(vec!["b".into()]);
        assert!(pool.reserve(0, "b", None, &inject).is_err());
        assert!(pool.reserve(0, "a", None, &inject).is_ok());
        // A request the system cannot satisfy is an error, not an abort.
        let e = pool.reserve(usize::MAX / 2, "a", None, &never).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
        pool.release();
        assert_eq!(pool.cached_bytes(), 0);
    }
}
