//! autodnn's parallel work on the process's OpenMP team (`Handle(threading="openmp")`):
//! PyTorch runs its own operators on libgomp's threads, which spin for a while after each
//! operator; autodnn's own workers beside them would share the cores with the spinning
//! threads. Run through `GOMP_parallel`, autodnn's regions use that very team.
//!
//! The runtime is the one already loaded in the process (found in /proc/self/maps and
//! opened with RTLD_NOLOAD, so nothing new is loaded): libgomp, or an LLVM or Intel runtime
//! (libomp, libiomp5), which export the same `GOMP_parallel` entry.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::Arc;

use autodnn::runtime::ParallelRunner;

type GompParallel = unsafe extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint);
type OmpInt = unsafe extern "C" fn() -> c_int;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

/// The entries autodnn calls in a loaded OpenMP runtime.
#[derive(Clone, Copy)]
pub(crate) struct OpenMp {
    parallel: GompParallel,
    thread_num: OmpInt,
    max_threads: OmpInt,
}

fn is_runtime(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or("");
    ["libgomp", "libomp", "libiomp5"]
        .iter()
        .any(|p| name.starts_with(p) && name.contains(".so"))
}

impl OpenMp {
    /// The OpenMP runtime loaded in this process, or why there is none.
    pub(crate) fn find() -> Result<OpenMp, String> {
        let maps = std::fs::read_to_string("/proc/self/maps")
            .map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
        let mut seen: Vec<&str> = Vec::new();
        for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
            if !is_runtime(path) || seen.contains(&path) {
                continue;
            }
            seen.push(path);
            let Ok(cpath) = CString::new(path) else {
                continue;
            };
            // SAFETY: FFI shim. RTLD_NOLOAD only returns a library already loaded (its
            // reference count raised, so it stays loaded), or null.
            let lib = unsafe { dlopen(cpath.as_ptr(), RTLD_NOW | RTLD_NOLOAD) };
            if lib.is_null() {
                continue;
            }
            let sym = |name: &str| {
                let c = CString::new(name).unwrap_or_default();
                // SAFETY: FFI shim; `lib` is a live handle from dlopen.
                unsafe { dlsym(lib, c.as_ptr()) }
            };
            let (p, t, m) = (
                sym("GOMP_parallel"),
                sym("omp_get_thread_num"),
                sym("omp_get_max_threads"),
            );
            if p.is_null() || t.is_null() || m.is_null() {
                continue;
            }
            // SAFETY: FFI shim: these symbols have these C signatures in every runtime
            // that exports them (libgomp's ABI, kept by libomp and libiomp5).
            return Ok(unsafe {
                OpenMp {
                    parallel: std::mem::transmute::<*mut c_void, GompParallel>(p),
                    thread_num: std::mem::transmute::<*mut c_void, OmpInt>(t),
                    max_threads: std::mem::transmute::<*mut c_void, OmpInt>(m),
                }
            });
        }
        Err(
            "no OpenMP runtime (libgomp, libomp, libiomp5) is loaded in this process \
             (import torch first)"
                .into(),
        )
    }

    /// The runtime's thread count for a region (PyTorch's `torch.get_num_threads()`).
    pub(crate) fn max_threads(&self) -> usize {
        // SAFETY: FFI shim; a plain query of the runtime.
        let n = unsafe { (self.max_threads)() };
        usize::try_from(n).unwrap_or(1).max(1)
    }

    /// A runner that starts a parallel region of the runtime for each of autodnn's.
    pub(crate) fn runner(self) -> Arc<ParallelRunner> {
        Arc::new(move |n, body| {
            let region = Region {
                body,
                thread_num: self.thread_num,
            };
            let threads = c_uint::try_from(n).unwrap_or(c_uint::MAX);
            // SAFETY: FFI shim. `region` outlives the call, which returns only after every
            // thread of the team has returned from `trampoline`; `body` never unwinds
            // (autodnn catches a panic inside it and resumes it after the region).
            unsafe {
                (self.parallel)(
                    trampoline,
                    &region as *const Region<'_> as *mut c_void,
                    threads,
                    0,
                )
            }
        })
    }
}

struct Region<'a> {
    body: &'a (dyn Fn(usize) + Sync),
    thread_num: OmpInt,
}

extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: FFI shim: `data` is the `Region` that `runner` passed, alive for the whole
    // parallel region; every thread only reads it.
    let region = unsafe { &*(data as *const Region<'_>) };
    // SAFETY: FFI shim; a plain query of the runtime, inside its region.
    let i = unsafe { (region.thread_num)() };
    (region.body)(usize::try_from(i).unwrap_or(0));
}
