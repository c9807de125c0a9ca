//! The campaigns' limit on one allocation, for builds without a sanitizer.
//!
//! libFuzzer's `-malloc_limit_mb` needs a sanitizer's malloc hooks: in a build without one
//! (`cargo fuzz build -s none`, several times faster than AddressSanitizer) it is not enforced.
//! The fuzz targets install [`CappedAlloc`] as their global allocator instead: the system's
//! allocator, with any single request over [`MAX_ALLOCATION`] bytes reported and aborted, so
//! that libFuzzer records the input as a finding, as `-malloc_limit_mb=1024` would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// The largest single allocation a harness input may cause: 1 GiB.
pub const MAX_ALLOCATION: usize = 1 << 30;

/// The system's allocator, aborting on any single request over [`MAX_ALLOCATION`] bytes.
pub struct CappedAlloc;

fn refuse(size: usize) -> ! {
    // No allocation here: the message is written from the stack.
    let mut buf = [0u8; 96];
    let mut w = &mut buf[..];
    let _ = writeln!(
        w,
        "==autodnn-fuzz== allocation of {size} bytes, over the 1 GiB limit"
    );
    let left = w.len();
    let _ = std::io::stderr().write_all(&buf[..buf.len() - left]);
    std::process::abort()
}

// SAFETY: every method forwards to `System` with the caller's own arguments, which meet
// `GlobalAlloc`'s contracts as the caller guarantees; requests over the cap never reach it.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            refuse(layout.size());
        }
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires of it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            refuse(layout.size());
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, hence from `System`, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            refuse(new_size);
        }
        // SAFETY: `ptr` and `layout` as the caller got them from this allocator (`System`).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
