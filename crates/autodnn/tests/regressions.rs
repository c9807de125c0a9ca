//! Pinned problems that once crashed or misbehaved, each named after what it caught. Every
//! accepting algorithm runs each of them (both layouts, plain and prepared weights, every ISA
//! path this machine has) against the f64 reference.

mod common;

use autodnn::conv::{self, Accuracy};
use autodnn::cpu::Isa;
use autodnn::{reference, Handle, Layout};
use common::{assert_exact, int_data, max_errors, problem, run_plain, run_prepared};
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
                    match a.accuracy() {
                        Accuracy::Exact => {
                            assert_exact(&p, &y, &r, &what);
                        }
                        acc => {
                            let (diff, max) = max_errors(&p, &y, &r, &what);
                            let e = diff / max.max(1e-30);
                            assert!(e <= acc.integer_tolerance(), "{what}: max_rel_err {e}");
                        }
                    }
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
    every_algorithm_matches_the_reference("ic4oc5ih1oh9kh1ph0pw0");
    every_algorithm_matches_the_reference("ic3oc2ih4iw2oh4ow5kh1ph0pw0");
}

/// Padding wider than the kernel and unequal top and bottom: `fft_tiling` sliced past its
/// transform grid for tiles that lie wholly in the padding.
#[test]
fn padding_wider_than_the_transform_tile() {
    every_algorithm_matches_the_reference("ic26oc6_ih6oh12kh3ph10_");
    every_algorithm_matches_the_reference("ic27oc9_ih16oh24kh3ph0_");
}

/// The largest single allocation of this test binary since the last reset.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// Held by the tests that read [`LARGEST`] (tests of one binary run on parallel threads).
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

/// Strides of 50000 on an image of 10^5 x 10^5 (fuzzing, the C API's backward-data list): the
/// backward-data algorithms that run residues through a forward one planned one residue per
/// stride phase in their check, 2.5·10^9 of them (a 60 GB allocation, then as many forward
/// checks). They now decline over 1024 residues; checks and queries allocate nothing large.
#[test]
fn backward_data_check_of_huge_strides_plans_no_residues() {
    use autodnn::op::{ConvBackwardData, Registered};
    use autodnn::OpKind;
    let p = problem(
        "mb1ic1oc1ih100000iw100000kh1kw1sh50000sw50000ph0pw0",
        Layout::Nchw,
    )
    .for_op(OpKind::ConvBackwardData)
    .unwrap();
    let h = Handle::with_threads(1).unwrap();
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    LARGEST.store(0, Ordering::SeqCst);
    let mut accepted = Vec::new();
    for a in ConvBackwardData::algorithms() {
        if a.check(&p).is_ok() {
            let _ = a.workspace_bytes(&p);
            let _ = a.cost_features(&p);
            accepted.push(a.name());
        }
    }
    let ranked = h.get::<ConvBackwardData>(&p).unwrap();
    let largest = LARGEST.load(Ordering::SeqCst);
    assert!(
        largest < 1 << 20,
        "a query allocated {largest} bytes at once"
    );
    assert!(accepted.contains(&"direct"), "{accepted:?}");
    assert_eq!(ranked.len(), accepted.len());
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
    queries_hold("ic1oc1ih999999999kw99999999kh1");
}

/// An image 2^40 rows high under a 3x3 kernel (fuzzing, descriptors): the FFT algorithms'
/// checks looked for the next 2-3-5-smooth transform size by counting up from 2^40, which
/// never ends in practice.
#[test]
fn fft_transform_size_of_a_huge_image_is_found_at_once() {
    let t = std::time::Instant::now();
    queries_hold("mb1ic1oc1ih1099511627791iw1kh3kw3ph1pw1");
    assert!(t.elapsed().as_secs() < 30, "took {:?}", t.elapsed());
}

/// A strided batch of products with k = 0 (A and B empty, so their strides are free) and a
/// stride of A near usize::MAX (fuzzing, gemm): the offset of each item's A was formed
/// before looking at its span and overflowed. C becomes beta·C.
#[test]
fn strided_batch_with_empty_operands_and_huge_strides() {
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
    use autodnn::TensorDesc;
    use autodnn::{ConvDesc, ConvMode, ConvProblem, DataType, FilterDesc, FilterLayout, Padding};
    let x = TensorDesc::with_strides(DataType::F32, [1, 2, 3, 1], [6, 3, 1, 1 << 62]).unwrap();
    let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [3, 2, 2, 1]).unwrap();
    let pad = Padding {
        top: 1,
        bottom: 0,
        left: 0,
        right: 0,
    };
    let conv = ConvDesc::new(pad, [1, 4], [1, 1], 1, ConvMode::CrossCorrelation).unwrap();
    let dims = ConvProblem::output_dims(&x, &w, &conv).unwrap();
    let y = TensorDesc::new(DataType::F32, Layout::Nchw, dims).unwrap();
    let p = ConvProblem::forward(x, w, conv, y).unwrap();
    let xd = int_data(p.x().span(), 1);
    let wd = int_data(p.w().elements(), 2);
    let r = reference::conv_forward(&p, &xd, &wd).unwrap();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        let h = Handle::with_threads(1).unwrap();
        h.set_isa_cap(isa);
        for a in conv::algorithms() {
            if a.check(&p).is_ok() {
                let y = run_plain(&h, a.name(), &p, &xd, &wd);
                assert_exact(&p, &y, &r, &format!("{} {isa:?}", a.name()));
            }
        }
    }
}
