//! Pinned problems that once crashed or misbehaved, each named after what it caught. Every
//! accepting algorithm runs each of them (both layouts, plain and prepared weights, every ISA
//! path this machine has) against the f64 reference.

mod common;

use autodnn::conv::{self, Accuracy};
use autodnn::cpu::Isa;
use autodnn::op::{Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, Registered};
use autodnn::{reference, ConvProblem, Handle, Layout, OpKind};
use common::{assert_exact, assert_within, int_data, problem, run_plain, run_prepared};
use std::alloc::{GlobalAlloc, Layout as StdLayout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

fn every_algorithm_matches_the_reference(spec: &str) {
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let p = problem(spec, layout);
        let x = int_data(p.x().span(), 1);
        let w = int_data(p.w().elements(), 2);
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
            let h = Handle::with_threads(2).unwrap();
            h.set_isa_cap(isa);
            let mut ran = 0;
            for a in conv::algorithms() {
                if a.check(&p).is_err() {
                    continue;
                }
                ran += 1;
                let prepared = h.prepare_weights(&p, a.name(), &w).unwrap();
                let outputs = [
                    ("plain", run_plain(&h, a.name(), &p, &x, &w)),
                    ("prepared", run_prepared(&h, a.name(), &p, &x, &prepared)),
                ];
                for (how, y) in outputs {
                    let what = format!("{spec} {layout:?} {isa:?} {} {how}", a.name());
                    assert_within(a.accuracy(), &p, &y, &r, &what);
                }
            }
            assert!(ran >= 2, "{spec}: only {ran} algorithms accepted it");
        }
    }
}

/// A 1x1 kernel whose output size implies a bottom padding of 8: the GEMM algorithms read x
/// as the patch matrix and ran past its one row.
#[test]
fn one_by_one_kernel_with_bottom_padding_past_the_image() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    every_algorithm_matches_the_reference("ic4oc5ih1oh9kh1ph0pw0");
    every_algorithm_matches_the_reference("ic3oc2ih4iw2oh4ow5kh1ph0pw0");
}

/// Padding wider than the kernel and unequal top and bottom: `fft_tiling` sliced past its
/// transform grid for tiles that lie wholly in the padding.
#[test]
fn padding_wider_than_the_transform_tile() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    every_algorithm_matches_the_reference("ic26oc6_ih6oh12kh3ph10_");
    every_algorithm_matches_the_reference("ic27oc9_ih16oh24kh3ph0_");
}

/// The largest single allocation of this test binary since the last reset.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Held by the tests that read [`LARGEST`] and by the others that allocate (tests of one binary
/// run on parallel threads, and any thread's allocation counts).
static MEASURING: Mutex<()> = Mutex::new(());

// SAFETY: forwards to the system allocator unchanged, only recording the request size.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: StdLayout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: StdLayout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: StdLayout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

/// A kernel of 10^8 rows on a 1x1 image: a workspace-size query built a tap table of
/// C·R·S entries (4 GB). Checks, queries, cost features and the heuristic's ranking are O(1)
/// in memory.
#[test]
fn workspace_queries_of_a_huge_kernel_allocate_nothing_large() {
    let p = problem("mb1ic1oc1ih1iw1kh100000000kw1oh1ow1", Layout::Nchw);
    let h = Handle::with_threads(1).unwrap();
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    LARGEST.store(0, Ordering::SeqCst);
    for a in conv::algorithms() {
        if a.check(&p).is_err() {
            continue;
        }
        let _ = h.conv_workspace_size(&p, a.name()).unwrap();
        let _ = a.cost_features(&p);
    }
    let _ = h.get_conv_algorithms(&p).unwrap();
    let largest = LARGEST.load(Ordering::SeqCst);
    assert!(
        largest < 1 << 20,
        "a query allocated {largest} bytes at once"
    );
}

/// The largest single allocation of the checks, workspace queries, cost features and the
/// ranking of every algorithm of operation `O` on `p`.
fn largest_query_allocation<O>(h: &Handle, p: &ConvProblem) -> usize
where
    O: Registered<Problem = ConvProblem>,
{
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    LARGEST.store(0, Ordering::SeqCst);
    for a in O::algorithms() {
        if a.check(p).is_err() {
            continue;
        }
        let _ = h.workspace_size::<O>(p, a.name()).unwrap();
        let _ = a.cost_features(p);
    }
    let _ = h.get::<O>(p).unwrap();
    LARGEST.load(Ordering::SeqCst)
}

/// The backward operations' queries of a kernel of 10^8 rows, of a stride of 1000 × 1000 on
/// a 1000 × 1000 image, and of 50000 × 50000 on 10^5 × 10^5 (fuzzing, the C API's
/// backward-data list): backward data via forward built one residue problem per stride
/// phase in every check, 10^6 of them (448 MB) and 2.5·10^9 (60 GB). It declines past 64
/// residues now. And gemm's workspace of 2^60 taps by 2^22 columns (descriptors fuzzing):
/// its size overflowed; it declines such problems now.
#[test]
fn backward_queries_of_huge_kernels_and_strides_allocate_nothing_large() {
    let h = Handle::with_threads(1).unwrap();
    for spec in [
        "mb1ic1oc1ih1iw1kh100000000kw1oh1ow1",
        "mb1ic1oc1ih1000iw1000kh1kw1sh1000sw1000oh1ow1ph0pw0",
        "mb1ic1oc1ih100000iw100000kh1kw1sh50000sw50000ph0pw0",
        // 2^60 taps by rows of 2^22 columns: gemm's column-block size overflowed.
        "mb1ic256oc1ih1iw4194304kh2147483648kw2097152oh1ow4194304ph1073741824pw1048576",
    ] {
        let fwd = problem(spec, Layout::Nchw);
        let largest = [
            largest_query_allocation::<ConvBackwardData>(
                &h,
                &fwd.for_op(OpKind::ConvBackwardData).unwrap(),
            ),
            largest_query_allocation::<ConvBackwardFilter>(
                &h,
                &fwd.for_op(OpKind::ConvBackwardFilter).unwrap(),
            ),
            largest_query_allocation::<ConvBackwardBias>(
                &h,
                &fwd.for_op(OpKind::ConvBackwardBias).unwrap(),
            ),
        ];
        for (dir, l) in ["bwd_d", "bwd_w", "bwd_b"].iter().zip(largest) {
            assert!(
                l < 1 << 20,
                "{spec} {dir}: a query allocated {l} bytes at once"
            );
        }
    }
}

/// Checks, workspace queries, cost features and the ranking of `spec` in both layouts: none
/// may panic, every algorithm that accepts it reports a workspace, `direct` accepts it.
fn queries_hold(spec: &str) {
    let h = Handle::with_threads(1).unwrap();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let p = problem(spec, layout);
        let mut accepted = Vec::new();
        for a in conv::algorithms() {
            if a.check(&p).is_err() {
                continue;
            }
            assert_eq!(
                h.conv_workspace_size(&p, a.name()),
                Ok(a.workspace_bytes(&p))
            );
            assert!(a
                .cost_features(&p)
                .iter()
                .all(|f| f.is_finite() && *f >= 0.0));
            accepted.push(a.name());
        }
        assert!(accepted.contains(&"direct"), "{spec}: {accepted:?}");
        let ranked = h.get_conv_algorithms(&p).unwrap();
        assert_eq!(ranked.len(), accepted.len(), "{spec}");
    }
}

/// A 10^9-row image and a 10^8-column kernel (fuzzing, problem strings): the GEMM
/// algorithms' frame costs multiplied 10^17 positions by 10^8 taps and overflowed.
#[test]
fn gemm_frame_cost_of_a_huge_image_and_kernel_saturates() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    queries_hold("ic1oc1ih999999999kw99999999kh1");
}

/// An image 2^40 rows high under a 3x3 kernel (fuzzing, descriptors): the FFT algorithms'
/// checks looked for the next 2-3-5-smooth transform size by counting up from 2^40, which
/// never ends in practice.
#[test]
fn fft_transform_size_of_a_huge_image_is_found_at_once() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let t = std::time::Instant::now();
    queries_hold("mb1ic1oc1ih1099511627791iw1kh3kw3ph1pw1");
    assert!(t.elapsed().as_secs() < 30, "took {:?}", t.elapsed());
}

/// A depthwise kernel 2^31 rows high at stride 8 (fuzzing, the C API's backward-data
/// algorithm query, 91 s in a fuzz build): depthwise's backward data sized its padded dy
/// plane by walking every tap of the kernel for each of the 8 row residues, 1.7·10^10 steps
/// in a workspace query, before seeing that a residue met more taps than its phase kernel
/// holds. It bounds the taps per residue first now; every backward query of the problem is
/// answered at once.
#[test]
fn depthwise_backward_data_query_of_a_huge_kernel_at_stride_8_is_found_at_once() {
    let t = std::time::Instant::now();
    let h = Handle::with_threads(1).unwrap();
    let fwd = problem(
        "mb1g1ic1oc1ih2147483648iw1kh2147483648kw1sh8sw1oh1ow1ph0pw0",
        Layout::Nchw,
    );
    let p = fwd.for_op(OpKind::ConvBackwardData).unwrap();
    let mut accepted = Vec::new();
    for a in ConvBackwardData::algorithms() {
        if a.check(&p).is_err() {
            continue;
        }
        assert_eq!(
            h.workspace_size::<ConvBackwardData>(&p, a.name()),
            Ok(a.workspace_bytes(&p))
        );
        assert!(a.cost_features(&p).iter().all(|f| f.is_finite()));
        accepted.push(a.name());
    }
    assert!(accepted.contains(&"direct"), "{accepted:?}");
    assert_eq!(h.get::<ConvBackwardData>(&p).unwrap().len(), accepted.len());
    let pw = fwd.for_op(OpKind::ConvBackwardFilter).unwrap();
    assert!(!h.get::<ConvBackwardFilter>(&pw).unwrap().is_empty());
    assert!(t.elapsed().as_secs() < 30, "took {:?}", t.elapsed());
}

/// A strided batch of products with k = 0 (A and B empty, so their strides are free) and a
/// stride of A near usize::MAX (fuzzing, gemm): the offset of each item's A was formed
/// before looking at its span and overflowed. C becomes beta·C.
#[test]
fn strided_batch_with_empty_operands_and_huge_strides() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let h = Handle::with_threads(1).unwrap();
    let d = autodnn::gemm::GemmDesc::new(2, 3, 0);
    let mut c = vec![1.0f32; 18];
    let empty: [f32; 0] = [];
    h.gemm_strided_batched(
        &d,
        1.0,
        &empty,
        usize::MAX,
        &empty,
        usize::MAX / 2,
        2.0,
        &mut c,
        6,
        3,
    )
    .unwrap();
    assert_eq!(c, vec![2.0f32; 18]);
}

/// A matrix-vector product with no rows (m = 0, n = 1; fuzzing, gemm, on the day the dot
/// product path landed): its bounds check computed (rows − 1)·ld before asking whether
/// there were any rows, an overflow panic with overflow checks on. Empty products of either
/// orientation change nothing.
#[test]
fn a_matrix_vector_product_with_no_rows() {
    let h = Handle::with_threads(1).unwrap();
    for (m, n) in [(0, 1), (1, 0)] {
        let d = autodnn::gemm::GemmDesc::new(m, n, 3).with_transb(true);
        let (a, b) = (vec![1.0f32; m * 3], vec![1.0f32; n * 3]);
        let mut c = vec![7.0f32; 2];
        h.gemm(&d, 1.0, &a, &b, 0.0, &mut c).unwrap();
        assert_eq!(c, [7.0, 7.0], "{m}x{n}");
    }
}

/// A product of depth 1 whose A is read in place with a depth stride near 2^61 (fuzzing,
/// gemm): the AVX-512 kernel that packs A as it first reads it prefetched 16 steps ahead
/// at 16·lda, an overflow panic with overflow checks on, though the stride never steps.
#[test]
fn a_depth_stride_that_never_steps_near_the_top_of_usize() {
    let h = Handle::with_threads(1).unwrap();
    for n in [1usize, 2, 31] {
        let d = autodnn::gemm::GemmDesc::new(289, n, 1)
            .with_a_strides(1, 2_242_546_323_825_885_183)
            .with_b_strides(1, 1)
            .with_c_strides(1, 289);
        let a: Vec<f32> = (0..289).map(|i| (i % 7) as f32).collect();
        let b: Vec<f32> = (0..n).map(|j| (j + 1) as f32).collect();
        let mut c = vec![0.0f32; 289 * n];
        h.gemm(&d, 1.0, &a, &b, 0.0, &mut c).unwrap();
        for j in 0..n {
            for i in 0..289 {
                assert_eq!(c[i + 289 * j], a[i] * b[j], "C[{i},{j}] with n = {n}");
            }
        }
    }
}

/// A kernel of 2·10^5 rows on a one-pixel image (all but one tap in the padding): `direct`
/// kept a load description of every tap for every tile (480 bytes each), and
/// `implicit_gemm` described every window for every strip it packed (quadratic in the
/// kernel: 148 s at 10^6 rows). Now both keep only what the image reaches or the strip uses.
#[test]
fn a_kernel_far_larger_than_the_image_runs_in_bounded_memory() {
    let p = problem("mb1ic1oc2ih1iw1kh200000kw1oh1ow1", Layout::Nchw);
    let x = int_data(p.x().span(), 1);
    let w = int_data(p.w().elements(), 2);
    let r = reference::conv_forward(&p, &x, &w).unwrap();
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let h = Handle::with_threads(1).unwrap();
        h.set_isa_cap(isa);
        for name in ["direct", "implicit_gemm", "gemm"] {
            LARGEST.store(0, Ordering::SeqCst);
            let y = run_plain(&h, name, &p, &x, &w);
            let largest = LARGEST.load(Ordering::SeqCst);
            assert_exact(&p, &y, &r, &format!("{name} {isa:?}"));
            // The tap table (40 bytes a tap) and the workspace's patch column (4 bytes a tap)
            // are the largest buffers: 8 MB.
            assert!(
                largest <= 9 << 20,
                "{name} {isa:?}: an allocation of {largest} bytes"
            );
        }
    }
}

/// A 2000×2 kernel on a 1×4 image (two outputs): `fft` transformed a 2000×3 grid and the
/// filter's 4000 taps onto it, 78 ms for 16 000 multiply-adds (a fuzzing hang under its
/// instrumented build). It declines grids over 256 times an image's outputs now; every other
/// accepting algorithm still computes it.
#[test]
fn fft_declines_a_grid_far_larger_than_the_output() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let p = problem("mb1ic1oc1ih1iw4kh2000kw2oh1ow2", Layout::Nchw);
    let e = conv::find("fft").unwrap().check(&p).unwrap_err();
    assert!(e.contains("over 256 times"), "{e}");
    every_algorithm_matches_the_reference("mb1ic1oc1ih1iw4kh2000kw2oh1ow2");
}

/// An image of one column whose column stride is 2^62 (any stride is valid for a dimension
/// of 1) with a column stride of the convolution of 4: the im2col copy multiplied the two
/// (overflow) although it never steps between columns. Found by the descriptors fuzzer.
#[test]
fn a_lone_column_with_a_huge_stride() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    exact_on_every_isa(&lone_column_problem());
}

/// Runs every algorithm accepting `p` on every instruction set (one thread, plain weights)
/// and asserts each output equals the reference exactly; the names that ran.
fn exact_on_every_isa(p: &ConvProblem) -> Vec<&'static str> {
    let xd = int_data(p.x().span(), 1);
    let wd = int_data(p.w().elements(), 2);
    let r = reference::conv_forward(p, &xd, &wd).unwrap();
    let mut ran = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let h = Handle::with_threads(1).unwrap();
        h.set_isa_cap(isa);
        for a in conv::algorithms() {
            if a.check(p).is_ok() {
                let y = run_plain(&h, a.name(), p, &xd, &wd);
                assert_exact(p, &y, &r, &format!("{} {isa:?}", a.name()));
                ran.push(a.name());
            }
        }
    }
    ran
}

/// The lone column's backward operations (fuzzing, descriptors): direct's backward filter
/// multiplied the conv stride by x's column stride (4 · 2^62) for a row of one element,
/// which never steps; an overflow panic with overflow checks on.
#[test]
fn a_lone_column_with_a_huge_stride_backward() {
    // Its allocations would count in another test's measurement: not at the same time.
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let fwd = lone_column_problem();
    let x = int_data(fwd.x().span(), 1);
    let w = int_data(fwd.w().elements(), 2);
    let dy = int_data(fwd.y().span(), 3);
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let h = Handle::with_threads(1).unwrap();
        h.set_isa_cap(isa);
        let p = fwd.for_op(OpKind::ConvBackwardData).unwrap();
        let want = reference::conv_backward_data(&p, &dy, &w).unwrap();
        for a in ConvBackwardData::algorithms()
            .iter()
            .filter(|a| a.check(&p).is_ok())
        {
            let mut dx = vec![0.0; p.x().span()];
            h.conv_backward_data(&p, a.name(), &dy, &w, &mut dx, 1.0, 0.0)
                .unwrap();
            for &o in &[0, 1, 2, 3, 4, 5] {
                assert_eq!(f64::from(dx[o]), want[o], "{} {isa:?} dx[{o}]", a.name());
            }
        }
        let p = fwd.for_op(OpKind::ConvBackwardFilter).unwrap();
        let want = reference::conv_backward_filter(&p, &x, &dy).unwrap();
        for a in ConvBackwardFilter::algorithms()
            .iter()
            .filter(|a| a.check(&p).is_ok())
        {
            let mut dw = vec![0.0; p.w().elements()];
            h.conv_backward_filter(&p, a.name(), &x, &dy, &mut dw, 1.0, 0.0)
                .unwrap();
            let got: Vec<f64> = dw.iter().map(|&v| f64::from(v)).collect();
            assert_eq!(got, want, "{} {isa:?}", a.name());
        }
        let mut db = vec![0.0; 3];
        h.conv_backward_bias(&fwd, "direct", &dy, &mut db, 1.0, 0.0)
            .unwrap();
        let want = reference::conv_backward_bias(&fwd, &dy).unwrap();
        assert_eq!(db.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), want);
    }
}

/// The lone column with dilated rows (fuzzing, descriptors): kn2row's gather multiplied the
/// conv stride by x's column stride (4 · 2^62) for a rectangle one column wide, which never
/// steps; an overflow panic with overflow checks on. Every accepting algorithm, kn2row and
/// the space-to-batch ones among them, is exact on it.
#[test]
fn a_lone_column_with_a_huge_stride_dilated() {
    let _serial = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let ran = exact_on_every_isa(&lone_column_problem_dilated([2, 1]));
    assert!(ran.contains(&"kn2row"), "{ran:?}");
}

/// x of 2 channels, 3 rows and 1 column whose column stride is 2^62, a 2x1 kernel, stride
/// 1x4: one output column.
fn lone_column_problem() -> ConvProblem {
    lone_column_problem_dilated([1, 1])
}

/// [`lone_column_problem`] with a dilation.
fn lone_column_problem_dilated(dilation: [usize; 2]) -> ConvProblem {
    use autodnn::TensorDesc;
    use autodnn::{ConvDesc, ConvMode, DataType, FilterDesc, FilterLayout, Padding};
    let x = TensorDesc::with_strides(DataType::F32, [1, 2, 3, 1], [6, 3, 1, 1 << 62]).unwrap();
    let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [3, 2, 2, 1]).unwrap();
    let pad = Padding {
        top: 1,
        bottom: 0,
        left: 0,
        right: 0,
    };
    let conv = ConvDesc::new(pad, [1, 4], dilation, 1, ConvMode::CrossCorrelation).unwrap();
    let dims = ConvProblem::output_dims(&x, &w, &conv).unwrap();
    let y = TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap();
    ConvProblem::forward(x, w, conv, y).unwrap()
}

/// A stride of 10^5 × 10^5 on a 2 × 1 image (fuzzing, the C API's backward filter): the
/// depthwise backward filter sized its per-thread stride-phase planes by sh · sw · rows,
/// 214 GB of mostly empty phases for a few bytes of tensors. It declines such problems now;
/// every backward-filter algorithm that accepts it runs in small allocations.
#[test]
fn depthwise_backward_filter_of_a_huge_stride_allocates_nothing_large() {
    let p = problem(
        "mb1g1ic1oc1ih2iw1kh1kw1sh100000sw100000oh1ow1ph0pw0",
        Layout::Nchw,
    )
    .for_op(OpKind::ConvBackwardFilter)
    .unwrap();
    let h = Handle::with_threads(1).unwrap();
    let x = int_data(p.x().span(), 1);
    let dy = int_data(p.y().span(), 2);
    let want = reference::conv_backward_filter(&p, &x, &dy).unwrap();
    let e = ConvBackwardFilter::algorithms()
        .iter()
        .find(|a| a.name() == "depthwise")
        .unwrap()
        .check(&p)
        .unwrap_err();
    assert!(e.contains("stride phases"), "{e}");
    for a in ConvBackwardFilter::algorithms() {
        if a.check(&p).is_err() {
            continue;
        }
        let mut dw = vec![f32::NAN; p.w().elements()];
        let largest = {
            let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
            LARGEST.store(0, Ordering::SeqCst);
            h.conv_backward_filter(&p, a.name(), &x, &dy, &mut dw, 1.0, 0.0)
                .unwrap();
            LARGEST.load(Ordering::SeqCst)
        };
        assert!(
            largest < 1 << 20,
            "{}: an allocation of {largest} bytes",
            a.name()
        );
        assert_eq!(f64::from(dw[0]), want[0], "{}", a.name());
    }
}

/// An NHWC image of 8192 × 6 × 8192 × 2^21 with a 3 × 3 filter of 16384 outputs in two
/// groups (descriptors fuzzing): every size fits, but Winograd's backward-filter cost
/// features multiplied groups × blocks × the per-block size in usize and overflowed (a panic
/// with overflow checks on). The cost features are computed in f64 now, here and wherever
/// they multiply sizes.
#[test]
fn cost_queries_of_a_huge_grouped_image_do_not_overflow() {
    use autodnn::{ConvDesc, ConvMode, DataType, FilterDesc, FilterLayout, Padding, TensorDesc};
    let x = TensorDesc::new(DataType::F32, Layout::Nhwc, [8192, 6, 8192, 2097152]).unwrap();
    let w = FilterDesc::new(DataType::F32, FilterLayout::Krsc, [16384, 3, 3, 3]).unwrap();
    let y = TensorDesc::with_strides(
        DataType::F32,
        [8192, 16384, 8190, 2097150],
        [281406257266688, 17175674882, 2097152, 1],
    )
    .unwrap();
    let conv = ConvDesc::new(
        Padding::symmetric(0, 0),
        [1, 1],
        [1, 1],
        2,
        ConvMode::Convolution,
    )
    .unwrap();
    let fwd = ConvProblem::forward(x, w, conv, y).unwrap();
    let h = Handle::with_threads(1).unwrap();
    let largest = [
        largest_query_allocation::<autodnn::op::ConvForward>(&h, &fwd),
        largest_query_allocation::<ConvBackwardData>(
            &h,
            &fwd.for_op(OpKind::ConvBackwardData).unwrap(),
        ),
        largest_query_allocation::<ConvBackwardFilter>(
            &h,
            &fwd.for_op(OpKind::ConvBackwardFilter).unwrap(),
        ),
    ];
    assert!(largest.iter().all(|&l| l < 1 << 20), "{largest:?}");
    // Every algorithm's cost features, accepting or not, are finite.
    fn all_finite<O: Registered<Problem = ConvProblem>>(p: &ConvProblem) {
        for a in O::algorithms() {
            for f in a.cost_features(p) {
                assert!(f.is_finite() && f >= 0.0, "{} {}: {f}", O::NAME, a.name());
            }
        }
    }
    all_finite::<ConvBackwardFilter>(&fwd.for_op(OpKind::ConvBackwardFilter).unwrap());
    all_finite::<ConvBackwardData>(&fwd.for_op(OpKind::ConvBackwardData).unwrap());
}

/// Max and average pooling with a 2×2 window and a stride of 2^40 (one output per row and
/// column) on an 8×8 image (fuzzing the operators): the forward's per-thread scratch held
/// every column phase of the stride, 2^40 floats. It builds only the phases the window's taps
/// reach now (at most the window's width), so the scratch stays within the padded row.
#[test]
fn pooling_with_a_stride_far_beyond_the_window_allocates_nothing_large() {
    use autodnn::layers::pool::{PoolDesc, PoolMode};
    use autodnn::layers::Blend;
    use autodnn::{DataType, Padding, TensorDesc};
    let x_desc = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 3, 8, 8]).unwrap();
    let x = int_data(x_desc.span(), 5);
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    for mode in PoolMode::ALL {
        for stride in [3usize, 5, 1 << 40] {
            let pad = Padding::symmetric(0, 1);
            let desc = PoolDesc::new(mode, [2, 2], [stride, stride], pad).unwrap();
            let y_desc = desc.output_desc(&x_desc, Layout::Nchw).unwrap();
            let r = reference::pool::forward(&desc, Blend::default(), &x_desc, &x, &y_desc, &[])
                .unwrap();
            for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
                let h = Handle::with_threads(1).unwrap();
                h.set_isa_cap(isa);
                let mut y = vec![0.0; y_desc.span()];
                LARGEST.store(0, Ordering::SeqCst);
                h.pooling_forward(&desc, Blend::default(), &x_desc, &x, &y_desc, &mut y)
                    .unwrap();
                let largest = LARGEST.load(Ordering::SeqCst);
                assert!(
                    largest < 1 << 16,
                    "{mode:?} stride {stride}: {largest} bytes at once"
                );
                for (o, (&g, &w)) in y.iter().zip(&r).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                        "{mode:?} {o}"
                    );
                }
            }
        }
    }
}

/// A dilated problem with strides and paddings of 2^31 − 1 on a 16x24 image (fuzzing,
/// descriptors): space-to-batch built frames that kept every column the stride skips, a
/// workspace of 137 GB for tensors of 12 KB. It declines such frames now; every algorithm
/// that accepts the problem runs it in small allocations, exactly.
#[test]
fn space_to_batch_of_a_huge_stride_allocates_nothing_large() {
    use autodnn::{ConvDesc, ConvMode, DataType, FilterDesc, FilterLayout, Padding, TensorDesc};
    let big = i64::from(i32::MAX);
    let x = TensorDesc::new(DataType::F32, Layout::Nchw, [2, 4, 16, 24]).unwrap();
    let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [8, 2, 1, 3]).unwrap();
    let pad = Padding {
        top: big,
        bottom: -big,
        left: big,
        right: big,
    };
    let s = i32::MAX as usize;
    let conv = ConvDesc::new(pad, [s, s], [3, 1], 2, ConvMode::Convolution).unwrap();
    let dims = ConvProblem::output_dims(&x, &w, &conv).unwrap();
    assert_eq!(dims, [2, 8, 1, 3]);
    let y = TensorDesc::with_strides(DataType::F32, dims, [40, 5, 4, 1]).unwrap();
    let p = ConvProblem::forward(x, w, conv, y).unwrap();
    for name in ["s2b_implicit_gemm", "s2b_winograd_4x4"] {
        let e = conv::find(name).unwrap().check(&p).unwrap_err();
        assert!(e.contains("frames"), "{name}: {e}");
    }
    let xd = int_data(p.x().span(), 1);
    let wd = int_data(p.w().elements(), 2);
    let r = reference::conv_forward(&p, &xd, &wd).unwrap();
    let h = Handle::with_threads(1).unwrap();
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let mut ran = 0;
    for a in conv::algorithms().iter().filter(|a| a.check(&p).is_ok()) {
        LARGEST.store(0, Ordering::SeqCst);
        let y = run_plain(&h, a.name(), &p, &xd, &wd);
        let largest = LARGEST.load(Ordering::SeqCst);
        assert!(largest < 1 << 20, "{}: {largest} bytes at once", a.name());
        if a.accuracy() == Accuracy::Exact {
            assert_exact(&p, &y, &r, a.name());
        }
        ran += 1;
    }
    assert!(ran >= 3, "{ran} algorithms ran");
}
