//! The C API (`autodnn-capi`, `libautodnn`) driven from bytes: a short sequence of calls with
//! arbitrary integer arguments and NULL pointers, each checked against the Rust library.
//!
//! Every call must return one of the statuses of the header (never
//! `AUTODNN_STATUS_INTERNAL_ERROR`, a caught panic), leave `autodnnGetLastErrorString`
//! empty on success and non-empty on failure, and agree with the Rust API on the same
//! integers: a descriptor is set exactly when the Rust constructors accept its values, read
//! back as set, the output dimensions, algorithm lists, names and workspace sizes are the
//! library's. Small valid problems run forward, backward-data, backward-filter and
//! backward-bias with an arbitrary algorithm index, a workspace of exactly the reported size
//! (and one byte less, which must be refused without writing), alpha and beta in {1, 0} and
//! {2, 1}, against the Rust library's `direct` (exact, or within the algorithm's integer-data
//! bound). Sgemm and SgemmStridedBatched run small shapes against a naive loop (exact); bad
//! shapes and leading dimensions must be refused.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;

use autodnn::conv::{Accuracy, EpilogueArgs, Weights};
use autodnn::op::{Algorithm, ConvBackwardData, ConvBackwardFilter, ConvForward, Registered};
use autodnn::{
    ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Layout, OpKind, Padding,
    TensorDesc,
};
use autodnn_capi as c;
use c::{
    autodnnConvolutionAlgoPerf_t as Perf, autodnnConvolutionDescriptor_t as ConvD,
    autodnnFilterDescriptor_t as FilterD, autodnnHandle_t as HandleT,
    autodnnTensorDescriptor_t as TensorD,
};

use crate::conv_checks::{dense_flops, handle as rust_handle, is_small, FULL_RUN_MAX_FLOPS};
use crate::input::{int_data, Bytes};

/// The statuses of the header.
const STATUSES: [c_int; 7] = [
    c::AUTODNN_STATUS_SUCCESS,
    c::AUTODNN_STATUS_NOT_INITIALIZED,
    c::AUTODNN_STATUS_ALLOC_FAILED,
    c::AUTODNN_STATUS_BAD_PARAM,
    c::AUTODNN_STATUS_INTERNAL_ERROR,
    c::AUTODNN_STATUS_EXECUTION_FAILED,
    c::AUTODNN_STATUS_NOT_SUPPORTED,
];
const OK: c_int = c::AUTODNN_STATUS_SUCCESS;
const BAD: c_int = c::AUTODNN_STATUS_BAD_PARAM;
const UNSET: c_int = c::AUTODNN_STATUS_NOT_INITIALIZED;
const UNSUPPORTED: c_int = c::AUTODNN_STATUS_NOT_SUPPORTED;
/// GEMM buffers up to this many elements (each operand, whole batch) are allocated.
const GEMM_MAX_SPAN: usize = 1 << 14;
/// ... and products up to this many multiply-adds run.
const GEMM_MAX_FMAS: usize = 1 << 18;

/// This thread's last error message, through a buffer larger than any message.
fn last_error() -> String {
    let mut buf = vec![0x55 as c_char; 4096];
    // SAFETY: 4096 writable bytes.
    unsafe { c::autodnnGetLastErrorString(buf.as_mut_ptr(), buf.len()) };
    let end = buf
        .iter()
        .position(|&ch| ch == 0)
        .expect("the last error is NUL-terminated within the buffer");
    let bytes: Vec<u8> = buf[..end].iter().map(|&ch| ch as u8).collect();
    String::from_utf8(bytes).expect("the last error is UTF-8")
}

/// Checks a status: one of the header's, not a caught panic, and the message agrees.
fn st(s: c_int, what: &str) -> c_int {
    assert!(STATUSES.contains(&s), "{what}: {s} is not a status");
    let msg = last_error();
    assert!(
        s != c::AUTODNN_STATUS_INTERNAL_ERROR,
        "{what}: internal error: {msg}"
    );
    if s == OK {
        assert!(msg.is_empty(), "{what}: success with the message {msg:?}");
    } else {
        assert!(!msg.is_empty(), "{what}: status {s} without a message");
    }
    s
}

/// Checks a status against the expected one.
fn expect(s: c_int, want: c_int, what: &str) {
    let s = st(s, what);
    assert_eq!(
        s,
        want,
        "{what}: status {s}, want {want} ({})",
        last_error()
    );
}

/// Checks that a call failed (with any status but success).
fn fails(s: c_int, what: &str) {
    let s = st(s, what);
    assert_ne!(s, OK, "{what}: succeeded where it must fail");
}

/// An int: mostly `0..=small`, sometimes negative, an edge or anything.
fn int(b: &mut Bytes<'_>, small: usize) -> c_int {
    match b.below(32) {
        0 => b.pick(&[
            c_int::MIN,
            -1,
            0,
            1,
            c_int::MAX,
            1 << 16,
            46_341,
            c_int::MIN + 1,
        ]),
        1 | 2 => {
            let v = b.signed(small);
            v.clamp(c_int::MIN.into(), c_int::MAX.into()) as c_int
        }
        _ => c_int::try_from(b.size(small)).unwrap_or(c_int::MAX),
    }
}

/// The value as a size, when not negative.
fn uz(v: c_int) -> Option<usize> {
    usize::try_from(v).ok()
}

/// The C handles the calls share, made once (1 and 2 worker threads), with the heuristic
/// policy: selection never times or fills the tuning results.
fn shared_handles() -> [usize; 2] {
    static HANDLES: OnceLock<[usize; 2]> = OnceLock::new();
    *HANDLES.get_or_init(|| {
        let mut out = [0usize; 2];
        for (i, threads) in [1, 2].into_iter().enumerate() {
            let mut h: HandleT = null_mut();
            // SAFETY: a writable slot; the handle is never destroyed.
            unsafe {
                expect(
                    c::autodnnCreateWithThreads(&mut h, threads),
                    OK,
                    "create a shared handle",
                );
                expect(
                    c::autodnnSetSelectionPolicy(h, c::AUTODNN_POLICY_HEURISTIC),
                    OK,
                    "policy",
                );
            }
            out[i] = h as usize;
        }
        out
    })
}

/// The handle of one step: a shared one (its settings restored at the end) or one made for
/// the step (any policy, the `Find` calls), destroyed at the end.
struct StepHandle {
    h: HandleT,
    fresh: bool,
    /// Whether the policy times the candidates of an AUTO run (benchmark or exhaustive).
    timing: std::cell::Cell<bool>,
}

thread_local! {
    /// Timed selections (Find, AUTO runs under a timing policy) of this input so far: each
    /// times every candidate several times (an exhaustive one for at least 15 ms each; a
    /// backward-data Find of a 2-thread handle ran 1.6 s in a fuzz build), so one input makes
    /// at most one, and a 1 s timeout then flags only real hangs.
    static TIMED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

impl StepHandle {
    fn new(b: &mut Bytes<'_>) -> StepHandle {
        if b.below(8) == 0 {
            let threads = b.pick(&[1, 2, 0, -1, 4097, c_int::MIN, c_int::MAX]);
            let mut h: HandleT = null_mut();
            // SAFETY: a writable slot.
            let s = st(
                unsafe { c::autodnnCreateWithThreads(&mut h, threads) },
                "autodnnCreateWithThreads",
            );
            if (1..=2).contains(&threads) {
                assert_eq!(s, OK, "a handle of {threads} threads");
                let mut n = 0;
                // SAFETY: a live handle and a writable int.
                expect(unsafe { c::autodnnGetThreads(h, &mut n) }, OK, "threads");
                assert_eq!(n, threads);
                return StepHandle {
                    h,
                    fresh: true,
                    timing: false.into(),
                };
            }
            assert_eq!(s, BAD, "a handle of {threads} threads");
            assert!(h.is_null(), "a refused handle was stored");
        }
        StepHandle {
            h: shared_handles()[b.below(2)] as HandleT,
            fresh: false,
            timing: false.into(),
        }
    }

    /// Arbitrary settings: workspace limit, determinism, policy (fresh handles only).
    fn configure(&self, b: &mut Bytes<'_>) {
        let h = self.h;
        // SAFETY: a live handle.
        unsafe {
            if b.below(4) == 0 {
                let limit = b.size(1 << 16);
                expect(c::autodnnSetWorkspaceLimit(h, limit), OK, "workspace limit");
            }
            if b.below(4) == 0 {
                let d = int(b, 2);
                expect(c::autodnnSetDeterministic(h, d), OK, "deterministic");
            }
            if self.fresh && b.below(2) == 0 {
                let p = int(b, 4);
                let want = if (0..=3).contains(&p) { OK } else { BAD };
                expect(c::autodnnSetSelectionPolicy(h, p), want, "policy");
                if want == OK {
                    self.timing
                        .set(p == c::AUTODNN_POLICY_EXHAUSTIVE || p == c::AUTODNN_POLICY_BENCHMARK);
                }
            }
            // The math type and the bf16 units: the data are integers exact in bf16, so
            // results stay exact under either.
            if self.fresh && b.below(4) == 0 {
                let t = int(b, 3);
                let want = if (0..=2).contains(&t) { OK } else { BAD };
                expect(c::autodnnSetMathType(h, t), want, "math type");
                let mut got = -1;
                expect(c::autodnnGetMathType(h, &mut got), OK, "get math type");
                assert_eq!(got == c::AUTODNN_ALLOW_BF16_MATH, want == OK && t == 2);
            }
            if self.fresh && b.below(4) == 0 {
                let u = int(b, 3);
                let want = if (0..=2).contains(&u) { OK } else { BAD };
                expect(c::autodnnSetBf16Units(h, u), want, "bf16 units");
                let mut got = -1;
                expect(c::autodnnGetBf16Units(h, &mut got), OK, "get bf16 units");
                if want == OK {
                    assert_eq!(got, u);
                }
            }
        }
    }
}

impl StepHandle {
    /// Whether a timed selection of `p` is within the input's budget: the first of the
    /// input, of a problem of at most [`FULL_RUN_MAX_FLOPS`] dense FLOPs in any direction. A
    /// timed selection runs every candidate ten times or more, and in a fuzz build (coverage
    /// counters, debug assertions) im2col alone ran 1.5 s for a forward Find, 1.6 s for a
    /// backward-data one, on problems within the bound of single runs ([`is_small`]).
    fn may_time(&self, p: &ConvProblem) -> bool {
        if !is_small(p) || dense_flops(p) > FULL_RUN_MAX_FLOPS {
            return false;
        }
        TIMED.with(|t| {
            t.set(t.get() + 1);
            t.get() <= 1
        })
    }
}

impl Drop for StepHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is live; nothing else runs on it.
        unsafe {
            if self.fresh {
                expect(c::autodnnDestroy(self.h), OK, "destroy the handle");
                // A destroyed handle is refused, not used.
                let mut n = 0;
                expect(
                    c::autodnnGetThreads(self.h, &mut n),
                    BAD,
                    "destroyed handle",
                );
            } else {
                expect(c::autodnnSetWorkspaceLimit(self.h, usize::MAX), OK, "limit");
                expect(c::autodnnSetDeterministic(self.h, 0), OK, "deterministic");
            }
        }
    }
}

/// Fuzzes the C API with the calls `data` decodes.
pub fn capi(data: &[u8]) {
    let mut b = Bytes::new(data);
    TIMED.with(|t| t.set(0));
    let steps = 1 + b.below(3);
    for _ in 0..steps {
        match b.below(8) {
            0 => names(&mut b),
            1 => nulls(&mut b),
            2 => gemm(&mut b),
            _ => conv(&mut b),
        }
    }
}

/// Algorithm counts, names and indices with arbitrary directions and indices; error strings
/// of arbitrary statuses; the last error into small buffers.
fn names(b: &mut Bytes<'_>) {
    let regs = [
        registry_names::<ConvForward>(),
        registry_names::<ConvBackwardData>(),
        registry_names::<ConvBackwardFilter>(),
    ];
    for _ in 0..1 + b.below(4) {
        let dir = int(b, 3);
        let known = uz(dir).and_then(|d| regs.get(d));
        let mut count = -7;
        // SAFETY: a writable int.
        let s = unsafe { c::autodnnGetAlgorithmCount(dir, &mut count) };
        match known {
            Some(names) => {
                expect(s, OK, "count");
                assert_eq!(uz(count), Some(names.len()));
            }
            None => {
                expect(s, BAD, "count of a bad direction");
                assert_eq!(count, -7, "a failed call wrote its output");
            }
        }
        let algo = match b.below(4) {
            0 => int(b, 40),
            _ => int(b, 12),
        };
        let mut name: *const c_char = null();
        // SAFETY: a writable pointer.
        let s = unsafe { c::autodnnGetAlgorithmName(dir, algo, &mut name) };
        match known.and_then(|n| uz(algo).and_then(|i| n.get(i))) {
            Some(want) => {
                expect(s, OK, "name");
                // SAFETY: a static NUL-terminated string.
                let got = unsafe { CStr::from_ptr(name) };
                assert_eq!(got.to_str(), Ok(*want));
                // And back to its index.
                let mut idx = -7;
                // SAFETY: a NUL-terminated string and a writable int.
                let s = unsafe { c::autodnnGetAlgorithmIndex(dir, name, &mut idx) };
                expect(s, OK, "index");
                assert_eq!(idx, algo);
            }
            None => {
                expect(s, BAD, "name of a bad index");
                assert!(name.is_null());
            }
        }
        // An index by arbitrary name: a registered one, or bytes.
        let mut text: Vec<u8> = (0..b.below(12))
            .map(|_| b.pick(b"directgemmwinogradfft_x0"))
            .collect();
        text.retain(|&ch| ch != 0);
        text.push(0);
        let mut idx = -7;
        // SAFETY: NUL-terminated, a writable int.
        let s = unsafe { c::autodnnGetAlgorithmIndex(dir, text.as_ptr().cast(), &mut idx) };
        let wanted = std::str::from_utf8(&text[..text.len() - 1]).unwrap_or("");
        match known.and_then(|n| n.iter().position(|x| *x == wanted)) {
            Some(i) => {
                expect(s, OK, "index by name");
                assert_eq!(uz(idx), Some(i));
            }
            None => expect(s, BAD, "index of an unknown name"),
        }
        // SAFETY: NULL name and NULL outputs are refused.
        unsafe {
            expect(
                c::autodnnGetAlgorithmIndex(dir, null(), &mut idx),
                BAD,
                "NULL name",
            );
            expect(
                c::autodnnGetAlgorithmCount(dir, null_mut()),
                BAD,
                "NULL count",
            );
            expect(
                c::autodnnGetAlgorithmName(dir, algo, null_mut()),
                BAD,
                "NULL name slot",
            );
        }
    }
    // Error strings of any value: static, NUL-terminated names.
    let s = int(b, 12);
    // SAFETY: a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr(c::autodnnGetErrorString(s)) };
    let name = name.to_str().expect("ASCII");
    if STATUSES.contains(&s) {
        assert!(name.starts_with("AUTODNN_STATUS_") && name != "AUTODNN_STATUS_UNKNOWN");
    } else {
        assert_eq!(name, "AUTODNN_STATUS_UNKNOWN");
    }
    // The last error (a failed call's) into a small buffer: truncated, NUL-terminated, and
    // nothing written past it.
    // SAFETY: a writable int; the direction is bad.
    let s = unsafe { c::autodnnGetAlgorithmCount(-5, &mut 0) };
    expect(s, BAD, "bad direction");
    let full = last_error();
    let size = b.below(12);
    let mut buf = vec![0x55 as c_char; size + 8];
    // SAFETY: `size` writable bytes (more follow, which must stay untouched).
    unsafe { c::autodnnGetLastErrorString(buf.as_mut_ptr(), size) };
    if size == 0 {
        assert!(
            buf.iter().all(|&ch| ch == 0x55),
            "a 0-byte buffer was written"
        );
    } else {
        let n = full.len().min(size - 1);
        let got: Vec<u8> = buf[..n].iter().map(|&ch| ch as u8).collect();
        assert_eq!(&got[..], &full.as_bytes()[..n]);
        assert_eq!(buf[n], 0, "not NUL-terminated at {n}");
        assert!(
            buf[size..].iter().all(|&ch| ch == 0x55),
            "written past the buffer"
        );
    }
    // SAFETY: a NULL buffer is ignored.
    unsafe { c::autodnnGetLastErrorString(null_mut(), b.size(64)) };
    assert_eq!(last_error(), full, "reading the message changed it");
    assert!(c::autodnnGetVersion() > 0);
}

fn registry_names<O: Registered>() -> Vec<&'static str> {
    O::algorithms().iter().map(|a| a.name()).collect()
}

/// One call picked by the bytes with a NULL, destroyed or wrong-kind handle, descriptor or
/// output pointer: a status, never a crash.
fn nulls(b: &mut Bytes<'_>) {
    let sh = StepHandle::new(b);
    let h = sh.h;
    let mut descs = Descs::create();
    // Set them to a valid problem, so that the one NULL is the only fault.
    descs.set_valid();
    let (xd, wd, cd, yd) = (descs.x, descs.w, descs.c, descs.y);
    let mut n = 0;
    let mut size = 0usize;
    let mut rec = [blank(); 4];
    let one = 1.0f32;
    let buf = vec![0.0f32; 64];
    let mut out = vec![0.0f32; 64];
    let (x, o) = (
        buf.as_ptr().cast::<c_void>(),
        out.as_mut_ptr().cast::<c_void>(),
    );
    let nh: HandleT = null_mut();
    let nt: TensorD = null_mut();
    let nf: FilterD = null_mut();
    let nc: ConvD = null_mut();
    let np: *mut c_int = &mut n;
    // Descriptors of another kind behind the pointer type.
    let wrong_t: TensorD = wd.cast();
    let wrong_f: FilterD = cd.cast();
    let wrong_h: HandleT = xd.cast();
    let case = b.below(40);
    // SAFETY: every pointer is NULL, live, or refused by the live-object checks; buffers
    // cover the valid problem's spans.
    let s = unsafe {
        match case {
            0 => c::autodnnCreate(null_mut()),
            1 => c::autodnnCreateWithThreads(null_mut(), 1),
            2 => c::autodnnCreateTensorDescriptor(null_mut()),
            3 => c::autodnnCreateFilterDescriptor(null_mut()),
            4 => c::autodnnCreateConvolutionDescriptor(null_mut()),
            5 => c::autodnnCreateActivationDescriptor(null_mut()),
            6 => c::autodnnSetTensor4dDescriptor(nt, 0, 0, 1, 1, 1, 1),
            7 => c::autodnnSetTensor4dDescriptorEx(wrong_t, 0, 1, 1, 1, 1, 1, 1, 1, 1),
            8 => c::autodnnGetTensor4dDescriptor(nt, np, np, np, np, np, np, np, np, np),
            9 => c::autodnnSetFilter4dDescriptor(wrong_f, 0, 0, 1, 1, 1, 1),
            10 => c::autodnnSetConvolution2dDescriptor(nc, 0, 0, 1, 1, 1, 1, 1, 0),
            11 => c::autodnnSetConvolutionGroupCount(nc, 1),
            12 => c::autodnnGetConvolution2dForwardOutputDim(cd, xd, wd, np, null_mut(), np, np),
            13 => c::autodnnGetConvolution2dForwardOutputDim(cd, nt, wd, np, np, np, np),
            14 => c::autodnnSetActivationDescriptor(null_mut(), 1, 0.0),
            15 => c::autodnnGetConvolutionForwardAlgorithmMaxCount(nh, np),
            16 => c::autodnnGetConvolutionBackwardDataAlgorithmMaxCount(h, null_mut()),
            17 => c::autodnnGetConvolutionBackwardFilterAlgorithmMaxCount(wrong_h, np),
            18 => c::autodnnGetConvolutionForwardAlgorithm_v7(
                h,
                xd,
                wd,
                cd,
                yd,
                4,
                null_mut(),
                rec.as_mut_ptr(),
            ),
            19 => c::autodnnGetConvolutionBackwardDataAlgorithm_v7(
                h,
                wd,
                yd,
                cd,
                xd,
                4,
                np,
                null_mut(),
            ),
            20 => c::autodnnGetConvolutionBackwardFilterAlgorithm_v7(
                nh,
                xd,
                yd,
                cd,
                wd,
                4,
                np,
                rec.as_mut_ptr(),
            ),
            21 => c::autodnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, 0, null_mut()),
            22 => {
                c::autodnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, nc, xd, 0, &mut size)
            }
            23 => {
                c::autodnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, nf, 0, &mut size)
            }
            24 => c::autodnnConvolutionForward(
                h,
                null(),
                xd,
                x,
                wd,
                x,
                cd,
                0,
                null_mut(),
                0,
                &one,
                yd,
                o,
            ),
            25 => c::autodnnConvolutionForward(
                h,
                &one,
                xd,
                x,
                wd,
                x,
                cd,
                0,
                null_mut(),
                0,
                &one,
                yd,
                null_mut(),
            ),
            26 => c::autodnnConvolutionBackwardData(
                h,
                &one,
                wd,
                null(),
                yd,
                x,
                cd,
                0,
                null_mut(),
                0,
                &one,
                xd,
                o,
            ),
            27 => c::autodnnConvolutionBackwardFilter(
                h,
                &one,
                xd,
                x,
                yd,
                x,
                cd,
                0,
                null_mut(),
                0,
                null(),
                wd,
                o,
            ),
            28 => c::autodnnConvolutionBackwardBias(h, &one, yd, null(), &one, xd, o),
            29 => c::autodnnConvolutionBiasActivationForward(
                h,
                &one,
                xd,
                x,
                wd,
                x,
                cd,
                0,
                null_mut(),
                0,
                &one,
                nt,
                null(),
                nt,
                null(),
                null_mut(),
                yd,
                o,
            ),
            30 => c::autodnnSgemm(
                h,
                0,
                0,
                2,
                2,
                2,
                &one,
                null(),
                2,
                buf.as_ptr(),
                2,
                &one,
                out.as_mut_ptr(),
                2,
            ),
            31 => c::autodnnSgemmStridedBatched(
                nh,
                0,
                0,
                2,
                2,
                2,
                &one,
                buf.as_ptr(),
                2,
                4,
                buf.as_ptr(),
                2,
                4,
                &one,
                out.as_mut_ptr(),
                2,
                4,
                2,
            ),
            32 => c::autodnnSetThreads(nh, 1),
            33 => c::autodnnGetThreads(h, null_mut()),
            34 => c::autodnnSetWorkspaceLimit(nh, 0),
            35 => c::autodnnSetDeterministic(wrong_h, 1),
            36 => c::autodnnSetSelectionPolicy(nh, 0),
            37 => c::autodnnLoadTuningCache(nh, null()),
            38 => c::autodnnSaveTuningCache(nh),
            _ => c::autodnnDestroyTensorDescriptor(wrong_t),
        }
    };
    expect(s, BAD, &format!("NULL or wrong-kind case {case}"));
    // A destroyed descriptor is refused; so is destroying it twice.
    let victim = descs.x;
    // SAFETY: live until destroyed here; afterwards only compared against the live set.
    unsafe {
        expect(
            c::autodnnDestroyTensorDescriptor(victim),
            OK,
            "destroy a tensor",
        );
        descs.x = null_mut();
        expect(
            c::autodnnDestroyTensorDescriptor(victim),
            BAD,
            "destroy twice",
        );
        let mut dims = [0; 4];
        let [d0, d1, d2, d3] = &mut dims;
        expect(
            c::autodnnGetConvolution2dForwardOutputDim(cd, victim, wd, d0, d1, d2, d3),
            BAD,
            "a destroyed tensor",
        );
        // NULL is accepted by every destroy.
        expect(c::autodnnDestroy(nh), OK, "destroy NULL handle");
        expect(c::autodnnDestroyTensorDescriptor(nt), OK, "destroy NULL");
        expect(c::autodnnDestroyFilterDescriptor(nf), OK, "destroy NULL");
        expect(
            c::autodnnDestroyConvolutionDescriptor(nc),
            OK,
            "destroy NULL",
        );
        expect(
            c::autodnnDestroyActivationDescriptor(null_mut()),
            OK,
            "destroy NULL",
        );
    }
    drop(descs);
}

fn blank() -> Perf {
    Perf {
        algo: -99,
        status: -99,
        time: -99.0,
        memory: 0xdead,
        determinism: -99,
        tolerance: -99.0,
    }
}

/// The four descriptors of a convolution, destroyed on drop.
struct Descs {
    x: TensorD,
    w: FilterD,
    c: ConvD,
    y: TensorD,
    db: TensorD,
}

impl Descs {
    fn create() -> Descs {
        let mut d = Descs {
            x: null_mut(),
            w: null_mut(),
            c: null_mut(),
            y: null_mut(),
            db: null_mut(),
        };
        // SAFETY: writable slots.
        unsafe {
            expect(c::autodnnCreateTensorDescriptor(&mut d.x), OK, "create x");
            expect(c::autodnnCreateFilterDescriptor(&mut d.w), OK, "create w");
            expect(
                c::autodnnCreateConvolutionDescriptor(&mut d.c),
                OK,
                "create",
            );
            expect(c::autodnnCreateTensorDescriptor(&mut d.y), OK, "create y");
            expect(c::autodnnCreateTensorDescriptor(&mut d.db), OK, "create db");
        }
        assert!(!d.x.is_null() && !d.w.is_null() && !d.c.is_null() && !d.y.is_null());
        d
    }

    /// A valid 1 x 2 x 4 x 4 input, 3 x 2 x 3 x 3 filter, padding 1, 1 x 3 x 4 x 4 output.
    fn set_valid(&mut self) {
        // SAFETY: live descriptors.
        unsafe {
            expect(
                c::autodnnSetTensor4dDescriptor(self.x, 0, 0, 1, 2, 4, 4),
                OK,
                "x",
            );
            expect(
                c::autodnnSetFilter4dDescriptor(self.w, 0, 0, 3, 2, 3, 3),
                OK,
                "w",
            );
            expect(
                c::autodnnSetConvolution2dDescriptor(self.c, 1, 1, 1, 1, 1, 1, 1, 0),
                OK,
                "conv",
            );
            expect(
                c::autodnnSetTensor4dDescriptor(self.y, 0, 0, 1, 3, 4, 4),
                OK,
                "y",
            );
            expect(
                c::autodnnSetTensor4dDescriptor(self.db, 0, 0, 1, 3, 1, 1),
                OK,
                "db",
            );
        }
    }
}

impl Drop for Descs {
    fn drop(&mut self) {
        // SAFETY: live descriptors (or NULL, accepted).
        unsafe {
            expect(c::autodnnDestroyTensorDescriptor(self.x), OK, "destroy x");
            expect(c::autodnnDestroyFilterDescriptor(self.w), OK, "destroy w");
            expect(
                c::autodnnDestroyConvolutionDescriptor(self.c),
                OK,
                "destroy",
            );
            expect(c::autodnnDestroyTensorDescriptor(self.y), OK, "destroy y");
            expect(c::autodnnDestroyTensorDescriptor(self.db), OK, "destroy db");
        }
    }
}

/// A data type: mostly float, sometimes the other types or any int.
fn dtype(b: &mut Bytes<'_>) -> c_int {
    match b.below(16) {
        0 => c::AUTODNN_DATA_HALF,
        1 => c::AUTODNN_DATA_BFLOAT16,
        2 => int(b, 12),
        _ => c::AUTODNN_DATA_FLOAT,
    }
}

fn rust_dtype(t: c_int) -> Option<DataType> {
    match t {
        c::AUTODNN_DATA_FLOAT => Some(DataType::F32),
        c::AUTODNN_DATA_HALF => Some(DataType::F16),
        c::AUTODNN_DATA_BFLOAT16 => Some(DataType::Bf16),
        _ => None,
    }
}

fn format(b: &mut Bytes<'_>) -> c_int {
    match b.below(16) {
        0 => int(b, 4),
        v => (v & 1) as c_int,
    }
}

fn rust_layout(f: c_int) -> Option<Layout> {
    match f {
        c::AUTODNN_TENSOR_NCHW => Some(Layout::Nchw),
        c::AUTODNN_TENSOR_NHWC => Some(Layout::Nhwc),
        _ => None,
    }
}

fn sat(v: usize) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// Sets tensor `d` to `dims` (packed in a format, packed with gaps, or raw strides) through
/// the C call, and returns what the Rust constructors make of the same values.
fn set_tensor(b: &mut Bytes<'_>, d: TensorD, dt: c_int, dims: [c_int; 4]) -> Option<TensorDesc> {
    let [n, ch, h, w] = dims;
    let udims = [uz(n), uz(ch), uz(h), uz(w)];
    match b.below(4) {
        0 | 1 => {
            let f = format(b);
            // SAFETY: a live descriptor.
            let s = st(
                unsafe { c::autodnnSetTensor4dDescriptor(d, f, dt, n, ch, h, w) },
                "set tensor",
            );
            let want = match (rust_dtype(dt), rust_layout(f), udims) {
                (Some(t), Some(l), [Some(a), Some(bb), Some(cc), Some(dd)]) => {
                    TensorDesc::new(t, l, [a, bb, cc, dd]).ok()
                }
                _ => None,
            };
            assert_eq!(s == OK, want.is_some(), "set tensor {dims:?} {f} {dt}");
            want
        }
        _ => {
            let strides = if b.below(2) == 0 {
                let gap = b.below(4) as i64;
                let (ch, h, w) = (i64::from(ch), i64::from(h), i64::from(w));
                let s = if b.bool() {
                    let sh = w.saturating_add(gap);
                    let sc = sh.saturating_mul(h).saturating_add(gap);
                    [sc.saturating_mul(ch), sc, sh, 1]
                } else {
                    let sw = ch.saturating_add(gap);
                    let sh = sw.saturating_mul(w).saturating_add(gap);
                    [sh.saturating_mul(h), 1, sh, sw]
                };
                s.map(|v| v.clamp(c_int::MIN.into(), c_int::MAX.into()) as c_int)
            } else {
                [int(b, 64), int(b, 64), int(b, 64), int(b, 64)]
            };
            let [sn, sc, sh, sw] = strides;
            // SAFETY: a live descriptor.
            let s = st(
                unsafe { c::autodnnSetTensor4dDescriptorEx(d, dt, n, ch, h, w, sn, sc, sh, sw) },
                "set tensor ex",
            );
            let us = [uz(sn), uz(sc), uz(sh), uz(sw)];
            let want = match (rust_dtype(dt), udims, us) {
                (
                    Some(t),
                    [Some(a), Some(bb), Some(cc), Some(dd)],
                    [Some(e), Some(f), Some(g), Some(hh)],
                ) => TensorDesc::with_strides(t, [a, bb, cc, dd], [e, f, g, hh]).ok(),
                _ => None,
            };
            assert_eq!(
                s == OK,
                want.is_some(),
                "set tensor {dims:?} strides {strides:?} {dt}"
            );
            want
        }
    }
}

/// Reads tensor `d` back: as set (or refused as too large for an int).
fn check_tensor(d: TensorD, want: &TensorDesc) {
    let mut v = [-1; 9];
    let [t, n, c_, h, w, sn, sc, sh, sw] = &mut v;
    // SAFETY: a live descriptor and writable ints.
    let s = st(
        unsafe { c::autodnnGetTensor4dDescriptor(d, t, n, c_, h, w, sn, sc, sh, sw) },
        "get tensor",
    );
    let strides_fit = want.strides().iter().all(|&s| c_int::try_from(s).is_ok());
    if !strides_fit {
        assert_eq!(s, BAD, "strides over an int");
        return;
    }
    assert_eq!(s, OK);
    let dt = match want.dtype() {
        DataType::F32 => c::AUTODNN_DATA_FLOAT,
        DataType::F16 => c::AUTODNN_DATA_HALF,
        DataType::Bf16 => c::AUTODNN_DATA_BFLOAT16,
    };
    assert_eq!(v[0], dt);
    let got: Vec<usize> = v[1..].iter().map(|&x| x as usize).collect();
    assert_eq!(&got[..4], &want.dims()[..]);
    assert_eq!(&got[4..], &want.strides()[..]);
    // NULL outputs are skipped.
    let mut n = -1;
    // SAFETY: as above, with NULLs.
    let s = unsafe {
        c::autodnnGetTensor4dDescriptor(
            d,
            null_mut(),
            &mut n,
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
        )
    };
    expect(s, OK, "get tensor with NULLs");
    assert_eq!(uz(n), Some(want.dims()[0]));
}

/// The direction of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dir {
    Fwd,
    BwdData,
    BwdFilter,
}

impl Dir {
    fn op(self) -> OpKind {
        match self {
            Dir::Fwd => OpKind::ConvForward,
            Dir::BwdData => OpKind::ConvBackwardData,
            Dir::BwdFilter => OpKind::ConvBackwardFilter,
        }
    }

    fn names(self) -> Vec<&'static str> {
        match self {
            Dir::Fwd => registry_names::<ConvForward>(),
            Dir::BwdData => registry_names::<ConvBackwardData>(),
            Dir::BwdFilter => registry_names::<ConvBackwardFilter>(),
        }
    }

    fn accuracy(self, i: usize) -> Accuracy {
        match self {
            Dir::Fwd => ConvForward::algorithms()[i].accuracy(),
            Dir::BwdData => ConvBackwardData::algorithms()[i].accuracy(),
            Dir::BwdFilter => ConvBackwardFilter::algorithms()[i].accuracy(),
        }
    }

    /// The Rust library's workspace size of algorithm `name` (its error when it declines).
    fn rust_workspace(self, p: &ConvProblem, name: &str) -> autodnn::Result<usize> {
        let h = rust_handle(0);
        match self {
            Dir::Fwd => h.workspace_size::<ConvForward>(p, name),
            Dir::BwdData => h.workspace_size::<ConvBackwardData>(p, name),
            Dir::BwdFilter => h.workspace_size::<ConvBackwardFilter>(p, name),
        }
    }

    fn rust_ranked(self, p: &ConvProblem) -> usize {
        let h = rust_handle(0);
        match self {
            Dir::Fwd => h.get::<ConvForward>(p),
            Dir::BwdData => h.get::<ConvBackwardData>(p),
            Dir::BwdFilter => h.get::<ConvBackwardFilter>(p),
        }
        .expect("the heuristic ranks")
        .len()
    }

    fn max_count(self, h: HandleT, count: *mut c_int) -> c_int {
        // SAFETY: a live handle (or one refused); count NULL or writable.
        unsafe {
            match self {
                Dir::Fwd => c::autodnnGetConvolutionForwardAlgorithmMaxCount(h, count),
                Dir::BwdData => c::autodnnGetConvolutionBackwardDataAlgorithmMaxCount(h, count),
                Dir::BwdFilter => c::autodnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, count),
            }
        }
    }

    /// `_v7` (or `Find`) with the direction's descriptor order.
    fn list(
        self,
        find: bool,
        h: HandleT,
        d: &Descs,
        req: c_int,
        ret: *mut c_int,
        perf: *mut Perf,
    ) -> c_int {
        let (x, w, cv, y) = (d.x, d.w, d.c, d.y);
        // SAFETY: live handle and descriptors; `perf` has room for the records asked for.
        unsafe {
            match (self, find) {
                (Dir::Fwd, false) => {
                    c::autodnnGetConvolutionForwardAlgorithm_v7(h, x, w, cv, y, req, ret, perf)
                }
                (Dir::Fwd, true) => {
                    c::autodnnFindConvolutionForwardAlgorithm(h, x, w, cv, y, req, ret, perf)
                }
                (Dir::BwdData, false) => {
                    c::autodnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, cv, x, req, ret, perf)
                }
                (Dir::BwdData, true) => {
                    c::autodnnFindConvolutionBackwardDataAlgorithm(h, w, y, cv, x, req, ret, perf)
                }
                (Dir::BwdFilter, false) => c::autodnnGetConvolutionBackwardFilterAlgorithm_v7(
                    h, x, y, cv, w, req, ret, perf,
                ),
                (Dir::BwdFilter, true) => {
                    c::autodnnFindConvolutionBackwardFilterAlgorithm(h, x, y, cv, w, req, ret, perf)
                }
            }
        }
    }

    fn workspace(self, h: HandleT, d: &Descs, algo: c_int, size: *mut usize) -> c_int {
        let (x, w, cv, y) = (d.x, d.w, d.c, d.y);
        // SAFETY: live handle and descriptors; size NULL or writable.
        unsafe {
            match self {
                Dir::Fwd => {
                    c::autodnnGetConvolutionForwardWorkspaceSize(h, x, w, cv, y, algo, size)
                }
                Dir::BwdData => {
                    c::autodnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, cv, x, algo, size)
                }
                Dir::BwdFilter => {
                    c::autodnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, cv, w, algo, size)
                }
            }
        }
    }

    /// Runs the direction: `a` and `bb` are its two inputs (x and w, dy and w, x and dy),
    /// `out` its output.
    #[allow(clippy::too_many_arguments)]
    fn run(
        self,
        h: HandleT,
        d: &Descs,
        algo: c_int,
        scales: (*const f32, *const f32),
        a: *const c_void,
        bb: *const c_void,
        ws: (*mut c_void, usize),
        out: *mut c_void,
    ) -> c_int {
        let (x, w, cv, y) = (d.x, d.w, d.c, d.y);
        let (alpha, beta) = scales;
        // SAFETY: the buffers cover their descriptors' spans (or are NULL, refused).
        unsafe {
            match self {
                Dir::Fwd => c::autodnnConvolutionForward(
                    h, alpha, x, a, w, bb, cv, algo, ws.0, ws.1, beta, y, out,
                ),
                Dir::BwdData => c::autodnnConvolutionBackwardData(
                    h, alpha, w, bb, y, a, cv, algo, ws.0, ws.1, beta, x, out,
                ),
                Dir::BwdFilter => c::autodnnConvolutionBackwardFilter(
                    h, alpha, x, a, y, bb, cv, algo, ws.0, ws.1, beta, w, out,
                ),
            }
        }
    }
}

/// A convolution: descriptors from arbitrary integers, set through the C calls and checked
/// against the Rust constructors; then queries, and runs of small problems.
fn conv(b: &mut Bytes<'_>) {
    let seed = b.u64();
    let sh = StepHandle::new(b);
    sh.configure(b);
    let mut d = Descs::create();
    let dt = dtype(b);
    let g = int(b, 4);
    let cg = int(b, 6);
    let kg = int(b, 6);
    let n = int(b, 3);
    let ih = int(b, 24);
    let iw = int(b, 24);
    let r = int(b, 5);
    let s = int(b, 5);
    let mul = |a: c_int, bb: c_int| {
        (i64::from(a) * i64::from(bb)).clamp(c_int::MIN.into(), c_int::MAX.into()) as c_int
    };
    // Sometimes a descriptor is left unset: every call using it answers NOT_INITIALIZED.
    let unset = b.below(24);
    let x = if unset == 0 {
        None
    } else {
        set_tensor(b, d.x, dt, [n, mul(g, cg), ih, iw])
    };
    if let Some(x) = &x {
        check_tensor(d.x, x);
    }
    // The filter: mostly fitting the tensor.
    let wdt = if b.below(16) == 0 { dtype(b) } else { dt };
    let wf = format(b);
    let wc = if b.below(16) == 0 { int(b, 8) } else { cg };
    let wk = mul(g, kg);
    let w = if unset == 1 {
        None
    } else {
        // SAFETY: a live descriptor.
        let st_ = st(
            unsafe { c::autodnnSetFilter4dDescriptor(d.w, wdt, wf, wk, wc, r, s) },
            "set filter",
        );
        let want = match (
            rust_dtype(wdt),
            rust_layout(wf),
            [uz(wk), uz(wc), uz(r), uz(s)],
        ) {
            (Some(t), Some(l), [Some(a), Some(bb), Some(cc), Some(dd)]) => {
                let fl = match l {
                    Layout::Nchw => FilterLayout::Kcrs,
                    Layout::Nhwc => FilterLayout::Krsc,
                };
                FilterDesc::new(t, fl, [a, bb, cc, dd]).ok()
            }
            _ => None,
        };
        assert_eq!(st_ == OK, want.is_some(), "set filter");
        want
    };
    // The convolution: group count before or after the geometry.
    let pad = match b.below(8) {
        0 => [int(b, 6), int(b, 6)],
        _ => [b.below(3) as c_int, b.below(3) as c_int],
    };
    let stride = [int(b, 3), int(b, 3)];
    let dil = [int(b, 3), int(b, 3)];
    let mode = match b.below(16) {
        0 => int(b, 4),
        v => (v & 1) as c_int,
    };
    let compute = if b.below(16) == 0 { dtype(b) } else { 0 };
    let groups = if b.below(16) == 0 { int(b, 8) } else { g };
    let groups_first = b.bool();
    let mut groups_now = 1usize;
    let set_groups = |groups_now: &mut usize| {
        // SAFETY: a live descriptor.
        let s = st(
            unsafe { c::autodnnSetConvolutionGroupCount(d.c, groups) },
            "groups",
        );
        let ok = uz(groups).is_some_and(|v| {
            ConvDesc::new(
                Padding::default(),
                [1, 1],
                [1, 1],
                v,
                ConvMode::CrossCorrelation,
            )
            .is_ok()
        });
        assert_eq!(s == OK, ok, "groups {groups}");
        if ok {
            *groups_now = groups as usize;
        }
    };
    if groups_first {
        set_groups(&mut groups_now);
    }
    let rust_mode = match mode {
        c::AUTODNN_CONVOLUTION => Some(ConvMode::Convolution),
        c::AUTODNN_CROSS_CORRELATION => Some(ConvMode::CrossCorrelation),
        _ => None,
    };
    let padding = Padding::symmetric(pad[0].into(), pad[1].into());
    let geometry = if unset == 2 {
        None
    } else {
        // SAFETY: a live descriptor.
        let st_ = st(
            unsafe {
                c::autodnnSetConvolution2dDescriptor(
                    d.c, pad[0], pad[1], stride[0], stride[1], dil[0], dil[1], mode, compute,
                )
            },
            "set conv",
        );
        let want = match (
            rust_mode,
            compute == 0,
            [uz(stride[0]), uz(stride[1]), uz(dil[0]), uz(dil[1])],
        ) {
            (Some(m), true, [Some(u), Some(v), Some(dh), Some(dw)]) => {
                ConvDesc::new(padding, [u, v], [dh, dw], groups_now, m)
                    .ok()
                    .map(|_| (m, [u, v], [dh, dw]))
            }
            _ => None,
        };
        assert_eq!(st_ == OK, want.is_some(), "set conv");
        want
    };
    if !groups_first {
        set_groups(&mut groups_now);
    }
    // The descriptor's math type, for the calls given it.
    if b.below(8) == 0 {
        let t = int(b, 3);
        // SAFETY: a live descriptor, a writable int.
        let (s_set, s_get, got) = unsafe {
            let s_set = st(c::autodnnSetConvolutionMathType(d.c, t), "math type");
            let mut got = -1;
            (s_set, c::autodnnGetConvolutionMathType(d.c, &mut got), got)
        };
        assert_eq!(s_set == OK, (0..=2).contains(&t), "math type {t}");
        assert_eq!(s_get, OK, "get math type");
        if s_set == OK {
            assert_eq!(got, t);
        }
    }
    // What the C layer builds at use: the geometry with the groups of now.
    let cd = geometry.map(|(m, st_, dl)| ConvDesc::new(padding, st_, dl, groups_now, m));
    // Output dimensions.
    let mut od = [-1; 4];
    let [o0, o1, o2, o3] = &mut od;
    // SAFETY: live descriptors, writable ints.
    let s_od = st(
        unsafe { c::autodnnGetConvolution2dForwardOutputDim(d.c, d.x, d.w, o0, o1, o2, o3) },
        "output dims",
    );
    let rust_dims = match (&x, &w, &cd) {
        (Some(x), Some(w), Some(Ok(cd))) => Some(
            ConvProblem::output_dims(x, w, cd)
                .ok()
                .filter(|d| d.iter().all(|&v| c_int::try_from(v).is_ok())),
        ),
        (Some(_), Some(_), Some(Err(_))) => Some(None),
        _ => None,
    };
    match &rust_dims {
        None => assert_ne!(s_od, OK, "output dims of an unset descriptor"),
        Some(None) => assert_ne!(s_od, OK, "output dims of an invalid problem"),
        Some(Some(want)) => {
            assert_eq!(s_od, OK, "output dims: {}", last_error());
            assert_eq!(od.map(|v| v as usize), *want);
        }
    }
    if x.is_none() {
        // x is checked first: an unset one is named.
        let mut n = 0;
        let mut rec = [blank(); 2];
        let s = Dir::Fwd.list(false, sh.h, &d, 2, &mut n, rec.as_mut_ptr());
        expect(s, UNSET, "a list with x unset");
    }
    // y: the output's dimensions (or, rarely, others), in any layout.
    let ydims = match (b.below(16), s_od) {
        (0, _) | (_, 1..) => [int(b, 8), int(b, 8), int(b, 8), int(b, 8)],
        _ => od,
    };
    let ydt = if b.below(16) == 0 { dtype(b) } else { dt };
    let y = if unset == 3 {
        None
    } else {
        set_tensor(b, d.y, ydt, ydims)
    };
    if let Some(y) = &y {
        check_tensor(d.y, y);
    }
    // The problem, as the Rust library sees it.
    let fwd = match (&x, &w, &cd, &y) {
        (Some(x), Some(w), Some(Ok(cd)), Some(y)) => ConvProblem::forward(*x, *w, *cd, *y).ok(),
        _ => None,
    };
    let all_set = x.is_some() && w.is_some() && geometry.is_some() && y.is_some();
    let dir = b.pick(&[Dir::Fwd, Dir::BwdData, Dir::BwdFilter, Dir::Fwd]);
    let p = fwd.and_then(|p| p.for_op(dir.op()).ok());
    queries(b, &sh, &d, dir, p.as_ref(), all_set);
    if b.below(4) == 0 {
        bias(b, &sh, &mut d, y.as_ref(), seed);
    }
    if let Some(p) = &p {
        run(b, &sh, &d, dir, p, seed);
    }
}

/// Max counts, the heuristic list with arbitrary requested counts, and workspace sizes of
/// arbitrary algorithm indices.
fn queries(
    b: &mut Bytes<'_>,
    sh: &StepHandle,
    d: &Descs,
    dir: Dir,
    p: Option<&ConvProblem>,
    all_set: bool,
) {
    let names = dir.names();
    let mut max = -1;
    expect(dir.max_count(sh.h, &mut max), OK, "max count");
    assert_eq!(uz(max), Some(names.len()));
    expect(
        dir.max_count(null_mut(), &mut max),
        BAD,
        "max count, NULL handle",
    );
    expect(
        dir.max_count(sh.h, null_mut()),
        BAD,
        "max count, NULL count",
    );
    let req = match b.below(8) {
        0 => 0,
        1 => -1,
        2 => c_int::MIN,
        3 => max + 1 + b.below(8) as c_int,
        4 => c_int::MAX,
        _ => b.below(names.len() + 1) as c_int,
    };
    let room = uz(req).unwrap_or(0).min(names.len() + 2);
    let mut recs = vec![blank(); room + 2];
    let null_perf = b.below(16) == 0;
    let perf = if null_perf {
        null_mut()
    } else {
        recs.as_mut_ptr()
    };
    let find = sh.fresh && b.below(2) == 0 && p.is_some_and(|p| sh.may_time(p));
    let mut ret = -7;
    let s = st(dir.list(find, sh.h, d, req, &mut ret, perf), "list");
    let listed = p.map(|p| dir.rust_ranked(p));
    match (p, listed) {
        (Some(_), Some(listed)) => {
            let want_n = uz(req).map(|r| r.min(listed));
            // The forward's Find times bf16 and f16 problems; the backward ones compute f32.
            let wants_f32 =
                find && dir != Dir::Fwd && p.is_some_and(|p| p.x().dtype() != DataType::F32);
            if wants_f32 {
                assert_eq!(s, UNSUPPORTED, "Find on non-float data");
            } else if want_n.is_none() {
                assert_eq!(s, BAD, "a negative requested count: {}", last_error());
            } else if null_perf && want_n != Some(0) {
                assert_eq!(s, BAD, "NULL records");
            } else if s == OK {
                let got = uz(ret).expect("a count");
                assert!(got <= uz(req).unwrap_or(0), "{got} records for {req} asked");
                if !find {
                    assert_eq!(Some(got), want_n, "records of the heuristic");
                }
                check_records(dir, sh, d, &recs[..got], find);
                assert!(
                    recs[got..]
                        .iter()
                        .all(|r| r.algo == -99 && r.memory == 0xdead),
                    "records past the returned count were written"
                );
            } else {
                // Only Find may fail on a valid problem (every timed algorithm failing).
                assert!(
                    find,
                    "the heuristic failed on a valid problem: {}",
                    last_error()
                );
            }
        }
        _ => {
            assert_ne!(s, OK, "a list of an invalid problem (all set: {all_set})");
            assert_eq!(ret, -7, "a failed list wrote its count");
        }
    }
    // Workspace sizes of arbitrary indices.
    for _ in 0..1 + b.below(3) {
        let algo = algo_index(b, names.len());
        let mut size = 0xdead_usize;
        let s = st(dir.workspace(sh.h, d, algo, &mut size), "workspace size");
        match p {
            None => assert_ne!(s, OK, "workspace of an invalid problem"),
            Some(p) => {
                if algo == c::AUTODNN_ALGO_AUTO {
                    assert_eq!((s, size), (OK, 0), "workspace of AUTO");
                } else if let Some(name) = uz(algo).and_then(|i| names.get(i)) {
                    match dir.rust_workspace(p, name) {
                        Ok(n) => assert_eq!((s, size), (OK, n), "workspace of {name}"),
                        Err(_) => assert_eq!(s, UNSUPPORTED, "workspace of {name} declining"),
                    }
                } else {
                    assert_eq!(s, BAD, "workspace of algorithm {algo}");
                }
            }
        }
        if s != OK {
            assert_eq!(size, 0xdead, "a failed query wrote its output");
        }
    }
}

/// An algorithm index: mostly a registered one, sometimes AUTO or out of range.
fn algo_index(b: &mut Bytes<'_>, count: usize) -> c_int {
    match b.below(16) {
        0 => c::AUTODNN_ALGO_AUTO,
        1 => int(b, 64),
        2 => b.pick(&[c_int::MIN, -2, c_int::MAX, count as c_int]),
        _ => b.below(count) as c_int,
    }
}

fn check_records(dir: Dir, sh: &StepHandle, d: &Descs, recs: &[Perf], find: bool) {
    let names = dir.names();
    let mut seen = vec![false; names.len()];
    for r in recs {
        let i = uz(r.algo).filter(|&i| i < names.len());
        let i = i.unwrap_or_else(|| panic!("record of algorithm {}", r.algo));
        assert!(!seen[i], "{} listed twice", names[i]);
        seen[i] = true;
        if find {
            assert!(
                [OK, c::AUTODNN_STATUS_EXECUTION_FAILED].contains(&r.status),
                "{r:?}"
            );
            assert!(
                r.time == -1.0 || (r.time.is_finite() && r.time >= 0.0),
                "{r:?}"
            );
        } else {
            assert!([OK, UNSUPPORTED].contains(&r.status), "{r:?}");
            assert_eq!(r.time, -1.0, "{r:?}");
        }
        assert!(
            [c::AUTODNN_DETERMINISTIC, c::AUTODNN_NON_DETERMINISTIC].contains(&r.determinism),
            "{r:?}"
        );
        assert_eq!(
            f64::from(r.tolerance),
            dir.accuracy(i).integer_tolerance() as f32 as f64,
            "{r:?}"
        );
        let mut size = 0;
        expect(
            dir.workspace(sh.h, d, r.algo, &mut size),
            OK,
            "workspace of a listed algorithm",
        );
        assert_eq!(size, r.memory, "{}: record and query differ", names[i]);
    }
}

fn scales(b: &mut Bytes<'_>) -> (f32, f32) {
    b.pick(&[(1.0, 0.0), (2.0, 1.0)])
}

/// The offsets the elements of a tensor occupy, marked in a mask of its span.
fn tensor_mask(t: &TensorDesc) -> Vec<bool> {
    let mut m = vec![false; t.span()];
    let [n, c_, h, w] = t.dims();
    for a in 0..n {
        for bb in 0..c_ {
            for i in 0..h {
                for j in 0..w {
                    m[t.offset(a, bb, i, j)] = true;
                }
            }
        }
    }
    m
}

/// Compares the C output with the expected one: over the elements, exact or within the
/// bound; the gaps between elements untouched.
fn compare(got: &[f32], want: &[f32], before: &[f32], mask: &[bool], bound: Bound<'_>, what: &str) {
    let (mut diff, mut max) = (0.0f64, 0.0f64);
    for i in 0..got.len() {
        if !mask[i] {
            assert_eq!(
                got[i].to_bits(),
                before[i].to_bits(),
                "{what}: the gap at {i} was written"
            );
            continue;
        }
        let (g, e) = (f64::from(got[i]), f64::from(want[i]));
        if bound.is_none() {
            assert!(g == e, "{what}: element {i} is {g}, direct gives {e}");
        } else {
            assert!(!g.is_nan(), "{what}: element {i} is NaN");
            diff = diff.max((g - e).abs());
            max = max.max(e.abs());
        }
    }
    if let Some(bound) = bound {
        let bound = bound(max);
        assert!(diff <= bound, "{what}: max|y - direct| = {diff} > {bound}");
    }
}

/// How far an output may be from `direct`'s, given max|direct|: `None` for exactly equal.
type Bound<'a> = Option<&'a dyn Fn(f64) -> f64>;

/// The products summed into one output element of `dir` on `p`: C/g·R·S forward, K/g·R·S
/// for dx, N·OH·OW for dw.
fn depth(dir: Dir, p: &ConvProblem) -> usize {
    let [n, _, oh, ow] = p.y().dims();
    let (r, s) = (p.w().r(), p.w().s());
    match dir {
        Dir::Fwd => p.c_per_group() * r * s,
        Dir::BwdData => (p.w().k() / p.groups()) * r * s,
        Dir::BwdFilter => n * oh * ow,
    }
}

/// The widest of `accs`' documented bounds ([`Accuracy::tolerance`]) for `dir` on `p` with
/// integer data in [-4, 4] scaled by `alpha`; `None` when every one is exact.
fn bound_of(
    dir: Dir,
    p: &ConvProblem,
    accs: &[Accuracy],
    alpha: f32,
) -> Option<impl Fn(f64) -> f64> {
    if accs.iter().all(|a| *a == Accuracy::Exact) {
        return None;
    }
    let (depth, accs, x_max) = (depth(dir, p), accs.to_vec(), 4.0 * f64::from(alpha.abs()));
    Some(move |max: f64| {
        accs.iter()
            .map(|a| a.tolerance(depth, x_max, 4.0, max))
            .fold(0.0, f64::max)
    })
}

/// The output the Rust library's `direct` gives.
fn direct(dir: Dir, p: &ConvProblem, a: &[f32], bb: &[f32], out: &mut [f32], ab: (f32, f32)) {
    let h = rust_handle(0);
    let (alpha, beta) = ab;
    match dir {
        Dir::Fwd => h.conv_forward_ex(
            p,
            "direct",
            a,
            Weights::Plain(bb),
            out,
            &EpilogueArgs::new(alpha, beta),
            None,
        ),
        Dir::BwdData => h.conv_backward_data(p, "direct", a, bb, out, alpha, beta),
        Dir::BwdFilter => h.conv_backward_filter(p, "direct", a, bb, out, alpha, beta),
    }
    .unwrap_or_else(|e| panic!("direct {dir:?}: {e} ({p:?})"));
}

/// Runs a valid problem through the C call: small float problems with data, compared with
/// `direct`; the others with NULL buffers, refused.
fn run(b: &mut Bytes<'_>, sh: &StepHandle, d: &Descs, dir: Dir, p: &ConvProblem, seed: u64) {
    let names = dir.names();
    let mut algo = algo_index(b, names.len());
    if algo == c::AUTODNN_ALGO_AUTO && sh.timing.get() && !sh.may_time(p) {
        // Past the input's timed selection, or too large a problem to time: `direct`, the
        // registry's last, instead.
        algo = (names.len() - 1) as c_int;
    }
    let (alpha, beta) = scales(b);
    let ab = (&alpha as *const f32, &beta as *const f32);
    let known = uz(algo).and_then(|i| names.get(i).copied());
    let in_range = algo == c::AUTODNN_ALGO_AUTO || known.is_some();
    let f32_data = p.x().dtype() == DataType::F32
        && p.w().dtype() == DataType::F32
        && p.y().dtype() == DataType::F32;
    if !f32_data {
        let s = dir.run(
            sh.h,
            d,
            algo,
            ab,
            null(),
            null(),
            (null_mut(), 0),
            null_mut(),
        );
        if in_range && dir != Dir::Fwd {
            expect(s, UNSUPPORTED, "a backward run of non-float data");
        } else {
            // The forward computes bf16 and f16 tensors: NULL buffers are refused (as are
            // a separate residual with a reduced y, and a bad algorithm).
            fails(s, "a run of non-float data with NULL buffers");
        }
        return;
    }
    if !is_small(p) {
        let s = dir.run(
            sh.h,
            d,
            algo,
            ab,
            null(),
            null(),
            (null_mut(), 0),
            null_mut(),
        );
        expect(s, BAD, "a run with NULL buffers");
        return;
    }
    // Inputs and output of the direction.
    let (xs, ws_, ys) = (p.x().span(), p.w().elements(), p.y().span());
    let (la, lb, lo) = match dir {
        Dir::Fwd => (xs, ws_, ys),
        Dir::BwdData => (ys, ws_, xs),
        Dir::BwdFilter => (xs, ys, ws_),
    };
    let a = int_data(la, seed);
    let bb = int_data(lb, seed ^ 0x5555);
    let before = if beta == 0.0 {
        vec![f32::NAN; lo]
    } else {
        int_data(lo, seed ^ 0xaaaa)
    };
    let mask = match dir {
        Dir::Fwd => tensor_mask(p.y()),
        Dir::BwdData => tensor_mask(p.x()),
        Dir::BwdFilter => vec![true; lo],
    };
    let mut want = before.clone();
    direct(dir, p, &a, &bb, &mut want, (alpha, beta));
    // Faults: a NULL or misaligned input, a NULL output or scale, an output over an input.
    let fault = if b.below(8) == 0 { 1 + b.below(6) } else { 0 };
    let mut out = before.clone();
    let (pa, pb, po) = (
        a.as_ptr().cast::<c_void>(),
        bb.as_ptr().cast::<c_void>(),
        out.as_mut_ptr().cast::<c_void>(),
    );
    if fault != 0 {
        let (fa, fo, fab) = match fault {
            1 => (null(), po, ab),
            // SAFETY: one byte into the allocation; refused before any access.
            2 => (unsafe { pa.cast::<u8>().add(1).cast() }, po, ab),
            3 => (pa, null_mut(), ab),
            4 => (pa, po, (null(), ab.1)),
            5 => (pa, po, (ab.0, null())),
            _ => (pa, pa.cast_mut(), ab),
        };
        let s = dir.run(sh.h, d, algo, fab, fa, pb, (null_mut(), 0), fo);
        expect(s, BAD, &format!("a run with fault {fault}"));
        assert!(
            out.iter()
                .zip(&before)
                .all(|(o, e)| o.to_bits() == e.to_bits()),
            "a refused run wrote its output"
        );
        return;
    }
    if !in_range {
        let s = dir.run(sh.h, d, algo, ab, pa, pb, (null_mut(), 0), po);
        expect(s, BAD, "a run of a bad algorithm");
        return;
    }
    let Some(name) = known else {
        // AUTO: the handle's selection, its own workspace; within the widest bound.
        let s = dir.run(sh.h, d, algo, ab, pa, pb, (null_mut(), 0), po);
        expect(s, OK, "an AUTO run");
        let accs: Vec<Accuracy> = (0..names.len()).map(|i| dir.accuracy(i)).collect();
        let bound = bound_of(dir, p, &accs, alpha);
        let bound = bound.as_ref().map(|f| f as &dyn Fn(f64) -> f64);
        compare(&out, &want, &before, &mask, bound, &format!("{dir:?} AUTO"));
        return;
    };
    let i = algo as usize;
    let mut need = 0xdead_usize;
    let s = st(dir.workspace(sh.h, d, algo, &mut need), "workspace size");
    if s != OK {
        assert_eq!(s, UNSUPPORTED);
        let s = dir.run(sh.h, d, algo, ab, pa, pb, (null_mut(), 0), po);
        expect(s, UNSUPPORTED, &format!("a run of {name}, declining"));
        assert!(
            out.iter()
                .zip(&before)
                .all(|(o, e)| o.to_bits() == e.to_bits()),
            "a declined run wrote its output"
        );
        return;
    }
    let mut ws = vec![0u8; need];
    // A NULL workspace of 0 bytes has the handle supply one; else exactly the size.
    let wsp = if need == 0 && b.bool() {
        (null_mut(), 0)
    } else {
        (ws.as_mut_ptr().cast::<c_void>(), need)
    };
    let s = dir.run(sh.h, d, algo, ab, pa, pb, wsp, po);
    expect(s, OK, &format!("{dir:?} {name}"));
    let bound = bound_of(dir, p, &[dir.accuracy(i)], alpha);
    let bound = bound.as_ref().map(|f| f as &dyn Fn(f64) -> f64);
    compare(
        &out,
        &want,
        &before,
        &mask,
        bound,
        &format!("{dir:?} {name}"),
    );
    if need > 0 {
        let mut out2 = before.clone();
        let s = dir.run(
            sh.h,
            d,
            algo,
            ab,
            pa,
            pb,
            (ws.as_mut_ptr().cast(), need - 1),
            out2.as_mut_ptr().cast(),
        );
        expect(s, BAD, &format!("{name} with one byte less of workspace"));
        assert!(
            out2.iter()
                .zip(&before)
                .all(|(o, e)| o.to_bits() == e.to_bits()),
            "a run refused for its workspace wrote its output"
        );
        // A NULL workspace with a size is refused.
        let s = dir.run(sh.h, d, algo, ab, pa, pb, (null_mut(), need), po);
        expect(s, BAD, "a NULL workspace with a size");
    }
}

/// The bias gradient: db (mostly 1 x K x 1 x 1) from dy, against the Rust library's.
fn bias(b: &mut Bytes<'_>, sh: &StepHandle, d: &mut Descs, y: Option<&TensorDesc>, seed: u64) {
    let k = y.map_or(1, |y| y.c());
    let dims = if b.below(8) == 0 {
        [int(b, 3), int(b, 8), int(b, 3), int(b, 3)]
    } else {
        [1, sat(k), 1, 1]
    };
    let dbdt = if b.below(16) == 0 {
        dtype(b)
    } else {
        y.map_or(0, |y| match y.dtype() {
            DataType::F32 => c::AUTODNN_DATA_FLOAT,
            DataType::F16 => c::AUTODNN_DATA_HALF,
            DataType::Bf16 => c::AUTODNN_DATA_BFLOAT16,
        })
    };
    let db = set_tensor(b, d.db, dbdt, dims);
    let (alpha, beta) = scales(b);
    let fits = match (y, &db) {
        (Some(y), Some(db)) => {
            db.dims() == [1, k, 1, 1] && (k == 1 || db.strides()[1] == 1) && db.dtype() == y.dtype()
        }
        _ => false,
    };
    let (Some(y), true) = (y, fits) else {
        // SAFETY: live (or unset) descriptors; NULL buffers are refused.
        let s = unsafe {
            c::autodnnConvolutionBackwardBias(sh.h, &alpha, d.y, null(), &beta, d.db, null_mut())
        };
        fails(s, "a bias gradient of mismatched descriptors");
        return;
    };
    // The problem the C call builds: dy through a 1 x 1 convolution that keeps it.
    let p = FilterDesc::new(y.dtype(), FilterLayout::Kcrs, [k, k, 1, 1])
        .and_then(|w| ConvProblem::forward(*y, w, ConvDesc::default(), *y));
    if y.dtype() != DataType::F32 || y.span() > crate::conv_checks::RUN_MAX_ELEMENTS || p.is_err() {
        // SAFETY: as above.
        let s = unsafe {
            c::autodnnConvolutionBackwardBias(sh.h, &alpha, d.y, null(), &beta, d.db, null_mut())
        };
        let want = if p.is_ok() && y.dtype() != DataType::F32 {
            UNSUPPORTED
        } else {
            BAD
        };
        expect(s, want, "a bias gradient without data");
        return;
    }
    let dy = int_data(y.span(), seed ^ 0x1234);
    let before = if beta == 0.0 {
        vec![f32::NAN; k]
    } else {
        int_data(k, seed ^ 0x4321)
    };
    let mut want = before.clone();
    let p = p.expect("checked above");
    rust_handle(0)
        .conv_backward_bias(&p, "direct", &dy, &mut want, alpha, beta)
        .expect("direct bias gradient");
    let mut got = before.clone();
    // SAFETY: dy covers its span, db its k elements.
    let s = unsafe {
        c::autodnnConvolutionBackwardBias(
            sh.h,
            &alpha,
            d.y,
            dy.as_ptr().cast(),
            &beta,
            d.db,
            got.as_mut_ptr().cast(),
        )
    };
    expect(s, OK, "bias gradient");
    compare(&got, &want, &before, &vec![true; k], None, "bias gradient");
}

/// Sgemm and SgemmStridedBatched with arbitrary shapes, transposes and leading dimensions;
/// small valid ones against a naive loop.
fn gemm(b: &mut Bytes<'_>) {
    let sh = StepHandle::new(b);
    let op = |b: &mut Bytes<'_>| match b.below(16) {
        0 => int(b, 4),
        v => (v % 3) as c_int,
    };
    let (ta, tb) = (op(b), op(b));
    let (m, n, k) = (int(b, 12), int(b, 12), int(b, 12));
    let trans = |o: c_int| match o {
        0 => Some(false),
        1 | 2 => Some(true),
        _ => None,
    };
    let (tra, trb) = (trans(ta), trans(tb));
    let rows_a = if tra == Some(true) { k } else { m };
    let rows_b = if trb == Some(true) { n } else { k };
    let ld = |b: &mut Bytes<'_>, rows: c_int| match b.below(8) {
        0 => int(b, 16),
        _ => rows.max(1).saturating_add(b.below(3) as c_int),
    };
    let (lda, ldb, ldc) = (ld(b, rows_a), ld(b, rows_b), ld(b, m));
    let (alpha, beta) = b.pick(&[(1.0f32, 0.0f32), (2.0, 1.0), (0.0, 1.0), (-1.0, 2.0)]);
    let valid = tra.is_some()
        && trb.is_some()
        && m >= 0
        && n >= 0
        && k >= 0
        && lda >= rows_a.max(1)
        && ldb >= rows_b.max(1)
        && ldc >= m.max(1);
    let batched = b.below(3) == 0;
    let cols_a = if tra == Some(true) { m } else { k };
    let cols_b = if trb == Some(true) { k } else { n };
    let span = |ld: c_int, cols: c_int| -> Option<usize> {
        let (ld, cols) = (uz(ld)?, uz(cols)?);
        if cols == 0 {
            Some(0)
        } else {
            (cols - 1).checked_mul(ld)?.checked_add(ld)
        }
    };
    // The last column needs only its rows; ld·cols bounds it.
    let (sa, sb, sc) = (span(lda, cols_a), span(ldb, cols_b), span(ldc, n));
    let batch = if batched { int(b, 3) } else { 1 };
    let stride = |b: &mut Bytes<'_>, span: Option<usize>, shared: bool| -> i64 {
        match b.below(8) {
            0 => i64::from(int(b, 64)),
            1 if shared => 0,
            _ => span.map_or(0, |s| s as i64 + b.below(3) as i64),
        }
    };
    let (ra, rb, rc) = (
        stride(b, sa, true),
        stride(b, sb, true),
        stride(b, sc, false),
    );
    let total = |span: Option<usize>, stride: i64| -> Option<usize> {
        let (span, stride, batch) = (span?, usize::try_from(stride).ok()?, uz(batch)?);
        if span == 0 || batch == 0 {
            return Some(0);
        }
        (batch - 1).checked_mul(stride)?.checked_add(span)
    };
    let (na, nb, nc) = if batched {
        (total(sa, ra), total(sb, rb), total(sc, rc))
    } else {
        (sa, sb, sc)
    };
    let fmas = [m, n, k, batch]
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(uz(v)?));
    let c_apart = rc >= sc.map_or(0, |s| s as i64) || batch <= 1;
    let small = valid
        && batch >= 0
        && [na, nb, nc]
            .iter()
            .all(|s| s.is_some_and(|s| s <= GEMM_MAX_SPAN))
        && fmas.is_some_and(|f| f <= GEMM_MAX_FMAS)
        && uz(batch).is_some_and(|t| t <= 64)
        && c_apart;
    let call = |a: *const f32, bm: *const f32, cm: *mut f32| -> c_int {
        // SAFETY: the buffers cover the spans computed above (or are NULL, refused).
        unsafe {
            if batched {
                c::autodnnSgemmStridedBatched(
                    sh.h, ta, tb, m, n, k, &alpha, a, lda, ra, bm, ldb, rb, &beta, cm, ldc, rc,
                    batch,
                )
            } else {
                c::autodnnSgemm(
                    sh.h, ta, tb, m, n, k, &alpha, a, lda, bm, ldb, &beta, cm, ldc,
                )
            }
        }
    };
    if !valid {
        // Small buffers: every check fails before any access.
        let buf = [0.0f32; 4];
        let mut out = [7.0f32; 4];
        expect(
            call(buf.as_ptr(), buf.as_ptr(), out.as_mut_ptr()),
            BAD,
            &format!("gemm {ta} {tb} {m} {n} {k} ld {lda} {ldb} {ldc}"),
        );
        assert_eq!(out, [7.0; 4]);
        return;
    }
    if !small {
        // Refused, or nothing to compute (empty operands need no buffers).
        st(call(null(), null(), null_mut()), "gemm with NULL buffers");
        return;
    }
    let (na, nb, nc) = (na.unwrap_or(0), nb.unwrap_or(0), nc.unwrap_or(0));
    let seed = b.u64();
    let a = int_data(na, seed);
    let bm = int_data(nb, seed ^ 1);
    let before = int_data(nc, seed ^ 2);
    let mut cm = before.clone();
    let s = call(a.as_ptr(), bm.as_ptr(), cm.as_mut_ptr());
    expect(
        s,
        OK,
        &format!("gemm {ta} {tb} {m} {n} {k} ld {lda} {ldb} {ldc}"),
    );
    // The naive loop, column-major, exact on these integers.
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let (lda, ldb, ldc) = (lda as usize, ldb as usize, ldc as usize);
    let mut want = before.clone();
    let mut written = vec![false; nc];
    for t in 0..uz(batch).unwrap_or(0) {
        let (oa, ob, oc) = (t * ra as usize, t * rb as usize, t * rc as usize);
        for j in 0..n {
            for i in 0..m {
                let mut s = 0.0f64;
                for l in 0..k {
                    let av = if tra == Some(true) {
                        a[oa + l + i * lda]
                    } else {
                        a[oa + i + l * lda]
                    };
                    let bv = if trb == Some(true) {
                        bm[ob + j + l * ldb]
                    } else {
                        bm[ob + l + j * ldb]
                    };
                    s += f64::from(av) * f64::from(bv);
                }
                let o = oc + i + j * ldc;
                let c0 = if beta == 0.0 {
                    0.0
                } else {
                    f64::from(beta) * f64::from(before[o])
                };
                want[o] = (f64::from(alpha) * s + c0) as f32;
                written[o] = true;
            }
        }
    }
    compare(&cm, &want, &before, &written, None, "gemm");
}
