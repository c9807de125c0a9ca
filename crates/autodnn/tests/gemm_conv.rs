//! `gemm` (explicit im2col + GEMM) and `implicit_gemm` (patches packed straight from the
//! image): problems they must accept, exactness on layers large enough to reach every packing
//! path (several im2col blocks, the AVX-512 strip packer's contiguous, every-other and gather
//! loads, strips crossing many output rows, both GEMM frames, NHWC, two threads), the error
//! measured on real data across channel counts, their workspaces, fused epilogues and
//! prepared weights.

mod common;

use autodnn::conv::{Activation, Epilogue, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::{reference, ConvMode, ConvProblem, Error, Handle, Layout};
use common::{algo, assert_exact, int_data, prepared_err, problem, run_prepared, Rng};

const ALGOS: [&str; 2] = ["gemm", "implicit_gemm"];

/// The same problem in convolution mode (the filter flipped).
fn flipped(p: &ConvProblem) -> ConvProblem {
    let conv = p.conv().with_mode(ConvMode::Convolution);
    ConvProblem::forward(*p.x(), *p.w(), conv, *p.y()).unwrap()
}

fn handle(threads: usize, isa: Isa) -> Handle {
    let h = Handle::with_threads(threads).unwrap();
    h.set_isa_cap(isa);
    h
}

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.is_available()).collect()
}

/// Layers that exercise the packing paths: 3x3 on 28x28 with 64 channels (im2col of 1.8 MB:
/// several blocks), strided and dilated kernels, a 7x7 stride-2 stem, a 1x1 with stride,
/// tiny images (strips crossing many rows, more than the packer's runs per strip, the
/// channels-as-rows frame), groups, asymmetric
/// and negative padding, stride 3 (gathers).
const LAYERS: &[&str] = &[
    "mb1ic64ih28oc48oh28kh3ph1",
    "mb1ic3ih45oc20oh23kh7sh2ph3",
    "mb1ic32ih20oc40oh10kh1sh2ph0",
    "mb2ic24ih9oc70oh9kh3ph1",
    "mb1ic40ih4oc33oh4kh3ph1",
    "mb1ic16ih17oc16oh6kh3sh3ph1",
    "mb1g4ic32ih15oc48oh15kh3ph2dh1",
    "mb1ic8ih19iw23oc12oh17ow10kh3kw5sh1sw2ph1pw2",
    "mb1ic6ih3iw70oc9oh1ow68kh3kw3ph0",
    "mb1ic128ih7oc96oh7kh1ph0",
    "mb1ic5ih20iw3oc7oh20ow3kh3kw3ph1pw1",
    // Stride 4 (the AVX-512 packer's step-4 loads), with the window in the padding on
    // every side, and AlexNet's first layer in small.
    "mb1ic3ih39iw45oc20oh10ow12kh7kw5sh4sw4ph3pw2",
    "mb1ic3ih51oc16oh11kh11sh4ph0",
    // Batches of small images, whose plain weights are packed once for every image, and a
    // fully connected layer (single pixels: the batch folded into one product's columns).
    "mb3ic40ih4oc33oh4kh3ph1",
    "mb4ic24ih1oc20oh1kh1ph0",
];

#[test]
fn accepts_every_geometry() {
    // A silently over-strict check would hide the algorithms from the selection.
    let mut rng = Rng(0xacce);
    for _ in 0..300 {
        let p = common::random_problem(&mut rng);
        for name in ALGOS {
            assert_eq!(algo(name).check(&p), Ok(()), "{name} declined {p:?}");
        }
    }
    for spec in LAYERS {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = problem(spec, layout);
            for name in ALGOS {
                assert_eq!(algo(name).check(&p), Ok(()));
                assert_eq!(algo(name).check(&flipped(&p)), Ok(()));
            }
        }
    }
}

#[test]
fn exact_on_layers_of_every_path() {
    let hs: Vec<Handle> = isas()
        .into_iter()
        .flat_map(|isa| [handle(1, isa), handle(2, isa)])
        .collect();
    for (i, spec) in LAYERS.iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let base = problem(spec, layout);
            for p in [base, flipped(&base)] {
                let x = int_data(p.x().span(), i as u64);
                let w = int_data(p.w().elements(), i as u64 + 50);
                let r = reference::conv_forward(&p, &x, &w).unwrap();
                for name in ALGOS {
                    let mut first: Option<Vec<f32>> = None;
                    for h in &hs {
                        let mut y = vec![f32::NAN; p.y().span()];
                        h.conv_forward(&p, name, &x, &w, &mut y).unwrap();
                        let what =
                            format!("{name} {spec} {layout:?} {:?} x{}", h.isa(), h.threads());
                        assert_exact(&p, &y, &r, &what);
                        // Bits do not depend on the thread count (nor, on integer data, on
                        // the kernel family).
                        match &first {
                            Some(y1) => assert!(y1 == &y, "{what}: results differ"),
                            None => first = Some(y),
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn mixed_layouts_and_padded_rows() {
    // x NHWC with y NCHW and the reverse, and rows padded so positions do not flatten (one
    // GEMM per output row).
    use autodnn::{DataType, TensorDesc};
    let h = handle(2, Isa::best_available());
    for (xl, yl) in [(Layout::Nhwc, Layout::Nchw), (Layout::Nchw, Layout::Nhwc)] {
        let p0 = problem("mb1ic12ih11oc20oh11kh3ph1", xl);
        let x = *p0.x();
        let [n, k, oh, ow] = p0.y().dims();
        let ys = [
            TensorDesc::new(DataType::F32, yl, [n, k, oh, ow]).unwrap(),
            // Padded rows: row stride ow + 3, channel stride (ow + 3)·oh + 1.
            TensorDesc::with_strides(
                DataType::F32,
                [n, k, oh, ow],
                [k * ((ow + 3) * oh + 1), (ow + 3) * oh + 1, ow + 3, 1],
            )
            .unwrap(),
        ];
        for y_desc in ys {
            let p = ConvProblem::forward(x, *p0.w(), *p0.conv(), y_desc).unwrap();
            let xv = int_data(p.x().span(), 3);
            let wv = int_data(p.w().elements(), 4);
            let r = reference::conv_forward(&p, &xv, &wv).unwrap();
            for name in ALGOS {
                let mut y = vec![f32::NAN; p.y().span()];
                h.conv_forward(&p, name, &xv, &wv, &mut y).unwrap();
                assert_exact(&p, &y, &r, &format!("{name} {xl:?} -> {y_desc:?}"));
            }
        }
    }
}

/// max|y − ref| / (ε · C·R·S · max|x| · max|w|) on data uniform in [−1, 1]: the exact
/// algorithms sum C·R·S products in f32 in some order, so this stays far below 1 (it grows
/// like the square root of the term count, not like the count).
#[test]
fn error_on_real_data_across_channel_counts() {
    let h = handle(1, Isa::best_available());
    let mut rng = Rng(42);
    for c in [1usize, 4, 16, 64, 256] {
        let p = problem(&format!("mb1ic{c}ih10oc16oh10kh3ph1"), Layout::Nchw);
        let mut real = |len: usize| -> Vec<f32> {
            (0..len)
                .map(|_| rng.range(-100_000, 100_000) as f32 / 100_000.0)
                .collect()
        };
        let (x, w) = (real(p.x().span()), real(p.w().elements()));
        let r = reference::conv_forward(&p, &x, &w).unwrap();
        let terms = (c * 9) as f64;
        for name in ALGOS {
            let mut y = vec![0.0; p.y().span()];
            h.conv_forward(&p, name, &x, &w, &mut y).unwrap();
            let err = y
                .iter()
                .zip(&r)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            let c_measured = err / (f32::EPSILON as f64 * terms);
            println!("{name}: C = {c:3}: max err {err:.3e} = {c_measured:.3} eps·C·R·S");
            assert!(c_measured <= 1.0, "{name}, C = {c}: {c_measured}");
        }
    }
}

#[test]
fn workspaces() {
    let g = algo("gemm");
    let ig = algo("implicit_gemm");
    // implicit_gemm needs none, whatever the image.
    for spec in [
        "mb1ic64ih56oc64oh56kh3ph1",
        "mb1ic3ih1024oc64oh512kh7sh2ph3",
        LAYERS[0],
    ] {
        assert_eq!(ig.workspace_bytes(&problem(spec, Layout::Nchw)), 0);
    }
    // gemm: none for 1x1 stride 1 (x is the matrix); otherwise one block of about 1 MiB, at
    // most one image.
    assert_eq!(
        g.workspace_bytes(&problem("mb1ic256ih56oc64oh56kh1ph0", Layout::Nchw)),
        0
    );
    let small = problem("mb1ic4ih8oc4oh8kh3ph1", Layout::Nchw);
    assert_eq!(g.workspace_bytes(&small), 4 * 9 * 64 * 4);
    let big = problem("mb1ic64ih56oc64oh56kh3ph1", Layout::Nchw);
    let ws = g.workspace_bytes(&big);
    let unblocked = 64 * 9 * 56 * 56 * 4;
    assert!(
        (1 << 19..=1 << 20).contains(&ws) && ws.is_multiple_of(64 * 9 * 4),
        "{ws}"
    );
    assert!(ws * 8 <= unblocked);
    // The exact size works (also misaligned by 4 bytes), one byte less is refused clearly,
    // and a workspace not aligned to 4 bytes is refused clearly.
    let h = handle(2, Isa::best_available());
    let p = problem(LAYERS[0], Layout::Nchw);
    let need = g.workspace_bytes(&p);
    assert!(need > 0);
    let (x, w) = (int_data(p.x().span(), 1), int_data(p.w().elements(), 2));
    let r = reference::conv_forward(&p, &x, &w).unwrap();
    let mut y = vec![0.0; p.y().span()];
    // A byte buffer with a 4-byte aligned window (Vec<u8> promises no alignment).
    let mut buf = vec![0u8; need + 8];
    let at = buf.as_ptr().align_offset(4);
    h.conv_forward_with_workspace(&p, "gemm", &x, &w, &mut y, &mut buf[at + 4..at + 4 + need])
        .unwrap();
    assert_exact(&p, &y, &r, "gemm, offset workspace");
    let e = h
        .conv_forward_with_workspace(&p, "gemm", &x, &w, &mut y, &mut buf[at..at + need - 1])
        .unwrap_err();
    assert!(
        matches!(e, Error::WorkspaceTooSmall { needed, got, .. } if needed == need && got == need - 1),
        "{e:?}"
    );
    let e = h
        .conv_forward_with_workspace(&p, "gemm", &x, &w, &mut y, &mut buf[at + 1..at + 1 + need])
        .unwrap_err();
    assert!(
        matches!(&e, Error::BadParam { field, .. } if field == "workspace"),
        "{e:?}"
    );
}

#[test]
fn fused_epilogues_on_both_frames() {
    // beta = 2 with a residual (copied into y, then scaled as the engine's C), beta with y's
    // prior contents, bias per group, relu and clip, alpha 0 and 3.
    let hs = [handle(1, Isa::best_available()), handle(2, Isa::Scalar)];
    let specs = [
        "mb1ic16ih12oc24oh12kh3ph1",
        "mb2g2ic16ih5oc64oh5kh1ph0",
        LAYERS[1],
        "mb5g2ic16ih1oc24oh1kh1ph0",
    ];
    for (i, spec) in specs.iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for (alpha, beta, residual, act) in [
                (1.0f32, 2.0f32, true, Activation::Relu),
                (1.0, 1.0, true, Activation::None),
                (
                    3.0,
                    -1.0,
                    false,
                    Activation::Clip {
                        lo: -20.0,
                        hi: 30.0,
                    },
                ),
                (0.0, 2.0, true, Activation::Relu),
                (2.0, 0.0, true, Activation::None),
            ] {
                let epi = Epilogue {
                    bias: true,
                    residual,
                    act,
                };
                let p = problem(spec, layout).with_epilogue(epi);
                let seed = i as u64 * 10;
                let x = int_data(p.x().span(), seed);
                let w = int_data(p.w().elements(), seed + 1);
                let bias = int_data(p.w().k(), seed + 2);
                let z = int_data(p.y().span(), seed + 3);
                let prior = int_data(p.y().span(), seed + 4);
                let zref = if residual { &z } else { &prior };
                let r = reference::conv_forward_fused(
                    &p,
                    &x,
                    &w,
                    alpha as f64,
                    beta as f64,
                    Some(&bias),
                    Some(zref),
                )
                .unwrap();
                let mut args = EpilogueArgs::new(alpha, beta).with_bias(&bias);
                if residual {
                    args = args.with_residual(&z);
                }
                for name in ALGOS {
                    for h in &hs {
                        let prepared = h.prepare_weights(&p, name, &w).unwrap();
                        for wt in [Weights::Plain(&w), Weights::Prepared(&prepared)] {
                            let mut y = if residual || beta == 0.0 {
                                vec![f32::NAN; p.y().span()]
                            } else {
                                prior.clone()
                            };
                            h.conv_forward_ex(&p, name, &x, wt, &mut y, &args, None)
                                .unwrap();
                            let what = format!(
                                "{name} {spec} {layout:?} alpha {alpha} beta {beta} {act:?} {:?}",
                                h.isa()
                            );
                            assert_exact(&p, &y, &r, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn prepared_weights_are_packed_panels() {
    let best = Isa::best_available();
    let h = handle(1, best);
    for spec in [
        "mb1ic64ih14oc256oh14kh1ph0",
        "mb1g2ic8ih9oc6oh9kh3ph1",
        LAYERS[1],
    ] {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = problem(spec, layout);
            let w = int_data(p.w().elements(), 5);
            let x = int_data(p.x().span(), 6);
            let r = reference::conv_forward(&p, &x, &w).unwrap();
            for name in ALGOS {
                let pw = h.prepare_weights(&p, name, &w).unwrap();
                assert!(pw.is_transformed());
                // A header, then every group's filter with its channels padded to whole
                // panels: never less than the filter, at most a panel width more per tap.
                let filter = p.w().elements() * 4;
                let slack = p.groups() * p.c_per_group() * p.w().r() * p.w().s() * 32 * 4;
                assert!(pw.bytes() >= filter && pw.bytes() <= filter + slack + 64);
                // Used under every kernel family, including ones with other panel widths
                // than it was packed for (the panels are then read element by element).
                for isa in isas() {
                    let hi = handle(2, isa);
                    let y = run_prepared(&hi, name, &p, &x, &pw);
                    assert_exact(
                        &p,
                        &y,
                        &r,
                        &format!("{name} {spec} prepared on {best:?}, run on {isa:?}"),
                    );
                }
                // Bound to their algorithm.
                let other = ALGOS.iter().find(|a| **a != name).unwrap();
                let e = prepared_err(&h, other, &p, &x, &pw);
                assert!(matches!(&e, Error::BadParam { field, .. } if field == "prepared.algo"));
            }
        }
    }
}
