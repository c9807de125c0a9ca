//! `depthwise` beyond the random problems every algorithm gets: a table of depthwise shapes
//! (channel multipliers, strides 1 to 3, dilation, padding of every sign, 1x1 to 7x7 and
//! non-square kernels, tiny and large images, many channels, both layouts packed and
//! strided, both modes), against the f64 reference, exact on integer data, on every ISA path,
//! 1 and 2 threads with identical bits; epilogues and prepared weights; what it declines.

mod common;

use autodnn::conv::{self, Activation, Epilogue, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::{
    reference, ConvDesc, ConvMode, ConvProblem, DataType, Error, FilterDesc, FilterLayout, Handle,
    Layout, Padding, TensorDesc,
};
use common::{assert_exact, int_data, Rng};

const ALGO: &str = "depthwise";

/// One depthwise case: channels C, multiplier M, image H×W, kernel R×S, stride, dilation,
/// padding (top, bottom, left, right).
#[derive(Debug, Clone, Copy)]
struct Case {
    c: usize,
    m: usize,
    h: usize,
    w: usize,
    r: usize,
    s: usize,
    stride: [usize; 2],
    dil: [usize; 2],
    pad: [i64; 4],
}

const fn case(
    c: usize,
    m: usize,
    hw: [usize; 2],
    rs: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    pad: [i64; 4],
) -> Case {
    Case {
        c,
        m,
        h: hw[0],
        w: hw[1],
        r: rs[0],
        s: rs[1],
        stride,
        dil,
        pad,
    }
}

/// The table: MobileNet-like layers (small), then every awkward corner.
const CASES: &[Case] = &[
    // 3x3, stride 1 and 2, "same" padding: the unrolled kernels.
    case(32, 1, [20, 37], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(24, 1, [19, 33], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    case(40, 1, [7, 7], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(17, 1, [14, 14], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    // 5x5, stride 1 and 2.
    case(19, 1, [13, 21], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
    case(18, 1, [15, 40], [5, 5], [2, 2], [1, 1], [2, 1, 2, 1]),
    // Large images (rows longer than several vectors, many row blocks).
    case(3, 1, [70, 131], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(2, 1, [67, 129], [3, 3], [2, 2], [1, 1], [0, 1, 0, 1]),
    // Many channels (several NHWC chunks, a tail block).
    case(300, 1, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(161, 1, [6, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    // Tiny images.
    case(5, 1, [1, 1], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
    case(5, 1, [1, 1], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(9, 1, [2, 3], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    case(1, 1, [1, 17], [1, 3], [1, 1], [1, 1], [0, 0, 1, 1]),
    // Channel multipliers.
    case(6, 2, [11, 13], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    case(7, 3, [9, 18], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
    case(5, 4, [8, 8], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
    case(11, 5, [6, 9], [2, 3], [1, 2], [2, 1], [0, 1, 2, 0]),
    // Dilation (generic kernels), also on a 3x3.
    case(8, 1, [15, 23], [3, 3], [1, 1], [2, 2], [2, 2, 2, 2]),
    case(8, 1, [16, 22], [3, 3], [1, 1], [1, 3], [1, 1, 3, 3]),
    case(8, 1, [16, 22], [3, 3], [1, 1], [3, 1], [3, 3, 1, 1]),
    case(6, 1, [17, 19], [5, 5], [2, 2], [2, 1], [0, 0, 0, 0]),
    // Strides 3 and mixed strides (lanes read elements 3 apart).
    case(9, 1, [20, 50], [3, 3], [3, 3], [1, 1], [1, 1, 1, 1]),
    case(9, 1, [20, 50], [3, 3], [1, 2], [1, 1], [1, 1, 1, 1]),
    case(9, 1, [20, 50], [3, 3], [2, 1], [1, 1], [1, 1, 1, 1]),
    case(4, 1, [12, 45], [7, 7], [2, 3], [1, 1], [3, 3, 3, 3]),
    // Padding of every sign: none, negative bottom/right (cropping; top and left must be
    // at least 0), asymmetric, larger than the kernel.
    case(10, 1, [12, 30], [3, 3], [1, 1], [1, 1], [0, 0, 0, 0]),
    case(10, 1, [12, 30], [3, 3], [1, 1], [1, 1], [0, -2, 0, -1]),
    case(10, 1, [12, 30], [3, 3], [2, 2], [1, 1], [1, -3, 2, -3]),
    case(10, 1, [12, 30], [3, 3], [1, 1], [1, 1], [4, 0, 5, 1]),
    case(10, 1, [12, 30], [5, 5], [1, 1], [1, 1], [0, 4, 4, 0]),
    case(10, 1, [6, 40], [5, 5], [2, 2], [1, 1], [0, 3, 6, -2]),
    // Other kernel shapes: 1x1, 2x2, 1xN, Nx1, 7x7, 4x4.
    case(12, 1, [9, 33], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
    case(12, 1, [9, 33], [2, 2], [2, 2], [1, 1], [0, 0, 0, 0]),
    case(12, 1, [9, 33], [1, 5], [1, 1], [1, 1], [0, 0, 2, 2]),
    case(12, 1, [9, 33], [5, 1], [1, 1], [1, 1], [2, 2, 0, 0]),
    case(12, 1, [14, 19], [7, 7], [1, 1], [1, 1], [3, 3, 3, 3]),
    case(12, 1, [14, 19], [4, 4], [1, 1], [1, 1], [1, 2, 2, 1]),
];

/// x of the case in `layout`, packed or with rows and pixels padded by a few elements.
fn tensor(dims: [usize; 4], layout: Layout, padded: bool) -> TensorDesc {
    if !padded {
        return TensorDesc::new(DataType::F32, layout, dims).unwrap();
    }
    let [_, c, h, w] = dims;
    let strides = match layout {
        Layout::Nchw => {
            let sh = w + 3;
            let sc = sh * h + 5;
            [sc * c + 1, sc, sh, 1]
        }
        Layout::Nhwc => {
            let sw = c + 2;
            let sh = sw * w + 7;
            [sh * h + 1, 1, sh, sw]
        }
    };
    TensorDesc::with_strides(DataType::F32, dims, strides).unwrap()
}

fn problem(
    k: &Case,
    n: usize,
    layout: Layout,
    padded: bool,
    mode: ConvMode,
    fl: FilterLayout,
) -> ConvProblem {
    let x = tensor([n, k.c, k.h, k.w], layout, padded);
    let w = FilterDesc::new(DataType::F32, fl, [k.c * k.m, 1, k.r, k.s]).unwrap();
    let pad = Padding {
        top: k.pad[0],
        bottom: k.pad[1],
        left: k.pad[2],
        right: k.pad[3],
    };
    let conv = ConvDesc::new(pad, k.stride, k.dil, k.c, mode).unwrap();
    let dims = ConvProblem::output_dims(&x, &w, &conv).unwrap();
    let y = tensor(dims, layout, padded);
    ConvProblem::forward(x, w, conv, y).unwrap()
}

/// A handle per available ISA and thread count.
fn handles() -> Vec<(Isa, usize, Handle)> {
    let mut out = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            out.push((isa, threads, h));
        }
    }
    out
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter()
        .zip(b)
        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
}

/// Every case of the table, in both layouts, packed and strided, both modes and filter
/// layouts, on every ISA and 1 and 2 threads: exact, and the same bits on 1 and 2 threads.
#[test]
fn table_is_exact_on_every_path() {
    let handles = handles();
    let a = conv::find(ALGO).unwrap();
    for (i, k) in CASES.iter().enumerate() {
        for (j, layout) in [Layout::Nchw, Layout::Nhwc].into_iter().enumerate() {
            for padded in [false, true] {
                // Alternate the mode, the filter layout and the batch over the variants.
                let v = i + 2 * j + usize::from(padded);
                let mode = [ConvMode::CrossCorrelation, ConvMode::Convolution][v % 2];
                let fl = [FilterLayout::Kcrs, FilterLayout::Krsc][v / 2 % 2];
                let n = 1 + v % 3 / 2;
                let p = problem(k, n, layout, padded, mode, fl);
                assert_eq!(a.check(&p), Ok(()), "{k:?} {layout:?}");
                assert_eq!(a.workspace_bytes(&p), 0);
                let x = int_data(p.x().span(), i as u64);
                let w = int_data(p.w().elements(), i as u64 + 100);
                let r = reference::conv_forward(&p, &x, &w).unwrap();
                let mut by_isa: Vec<(Isa, Vec<f32>)> = Vec::new();
                for (isa, threads, h) in &handles {
                    let mut y = vec![f32::NAN; p.y().span()];
                    h.conv_forward(&p, ALGO, &x, &w, &mut y).unwrap();
                    let what = format!("{k:?} {layout:?} padded={padded} {isa:?} {threads}t");
                    assert_exact(&p, &y, &r, &what);
                    match by_isa.iter().find(|(i, _)| i == isa) {
                        Some((_, y1)) => assert!(same_bits(y1, &y), "{what}: bits differ"),
                        None => by_isa.push((*isa, y)),
                    }
                }
            }
        }
    }
}

/// MobileNet's depthwise layers at full size (batch 1), both layouts, on the widest ISA.
#[test]
fn mobilenet_layers_at_full_size() {
    let text = include_str!("../data/shapes/shapes_mobilenet_dw");
    let specs = autodnn::parse_problem_list(text).unwrap();
    let h = Handle::with_threads(2).unwrap();
    for (i, spec) in specs.iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let p = spec.with_mb(1).to_problem(layout).unwrap();
            let x = int_data(p.x().span(), i as u64);
            let w = int_data(p.w().elements(), i as u64 + 7);
            let r = reference::conv_forward(&p, &x, &w).unwrap();
            let mut y = vec![f32::NAN; p.y().span()];
            h.conv_forward(&p, ALGO, &x, &w, &mut y).unwrap();
            assert_exact(&p, &y, &r, &format!("{spec} {layout:?}"));
        }
    }
}

/// Epilogues on the table's cases: alpha, bias, residual or y's prior contents with beta,
/// and relu or clip (which keep integers exact), with plain and prepared weights.
#[test]
fn epilogues_and_prepared_weights_are_exact() {
    let handles = handles();
    let mut rng = Rng(42);
    for (i, k) in CASES.iter().enumerate() {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            let act = rng.pick(&[
                Activation::None,
                Activation::Relu,
                Activation::Clip { lo: -7.0, hi: 9.0 },
            ]);
            let epi = Epilogue {
                bias: rng.range(0, 1) == 1,
                residual: rng.range(0, 1) == 1,
                act,
            };
            let mode = rng.pick(&[ConvMode::CrossCorrelation, ConvMode::Convolution]);
            let p = problem(k, 1, layout, i % 3 == 0, mode, FilterLayout::Kcrs).with_epilogue(epi);
            let seed = 1000 + i as u64;
            let x = int_data(p.x().span(), seed);
            let w = int_data(p.w().elements(), seed + 1);
            let bias = int_data(p.w().k(), seed + 2);
            let z = int_data(p.y().span(), seed + 3);
            let prior = int_data(p.y().span(), seed + 4);
            let alpha = rng.pick(&[1.0f32, 2.0, -1.0, 0.0]);
            let beta = rng.pick(&[0.0f32, 1.0, -2.0]);
            let mut args = EpilogueArgs::new(alpha, beta);
            if epi.bias {
                args = args.with_bias(&bias);
            }
            if epi.residual {
                args = args.with_residual(&z);
            }
            let zref = if epi.residual { &z } else { &prior };
            let r = reference::conv_forward_fused(
                &p,
                &x,
                &w,
                alpha as f64,
                beta as f64,
                epi.bias.then_some(&bias[..]),
                Some(zref),
            )
            .unwrap();
            let reads_prior = beta != 0.0 && !epi.residual;
            for (isa, threads, h) in &handles {
                let prepared = h.prepare_weights(&p, ALGO, &w).unwrap();
                // NHWC-like problems reorder the filter; NCHW-like ones (unit stride along W,
                // as NHWC with one channel is) keep it plain.
                let planar = p.x().strides()[3] == 1 && p.y().strides()[3] == 1;
                assert_eq!(prepared.is_transformed(), !planar);
                assert_eq!(prepared.bytes(), p.w().elements() * 4);
                for weights in [Weights::Plain(&w), Weights::Prepared(&prepared)] {
                    let mut y = if reads_prior {
                        prior.clone()
                    } else {
                        vec![f32::NAN; p.y().span()]
                    };
                    h.conv_forward_ex(&p, ALGO, &x, weights, &mut y, &args, None)
                        .unwrap();
                    let what = format!(
                        "{k:?} {layout:?} {epi:?} alpha {alpha} beta {beta} {isa:?} {threads}t \
                         {}",
                        matches!(weights, Weights::Prepared(_))
                    );
                    assert_exact(&p, &y, &r, &what);
                }
            }
        }
    }
}

/// Transcendental activations go through the same lane-wise code as the scalar epilogue:
/// within a few ulps of the f64 reference.
#[test]
fn transcendental_activations_within_tolerance() {
    let h = Handle::with_threads(2).unwrap();
    let acts = [
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Gelu,
        Activation::Silu,
    ];
    for (i, k) in CASES.iter().enumerate().step_by(3) {
        let act = acts[i % acts.len()];
        let layout = [Layout::Nchw, Layout::Nhwc][i / 3 % 2];
        let epi = Epilogue {
            bias: true,
            residual: false,
            act,
        };
        let p = problem(
            k,
            1,
            layout,
            false,
            ConvMode::CrossCorrelation,
            FilterLayout::Krsc,
        )
        .with_epilogue(epi);
        let mut rng = Rng(i as u64);
        let mut real = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| rng.range(-1000, 1000) as f32 / 1000.0)
                .collect()
        };
        let (x, w, bias) = (real(p.x().span()), real(p.w().elements()), real(p.w().k()));
        let r = reference::conv_forward_fused(&p, &x, &w, 1.0, 0.0, Some(&bias), None).unwrap();
        let mut y = vec![f32::NAN; p.y().span()];
        let args = EpilogueArgs::new(1.0, 0.0).with_bias(&bias);
        h.conv_forward_ex(&p, ALGO, &x, Weights::Plain(&w), &mut y, &args, None)
            .unwrap();
        let terms = (k.r * k.s) as f64;
        let tol = 4.0 * terms * f32::EPSILON as f64 + 1e-6;
        let [n, kk, oh, ow] = p.y().dims();
        for b in 0..n {
            for c in 0..kk {
                for a in 0..oh {
                    for bb in 0..ow {
                        let o = p.y().offset(b, c, a, bb);
                        let err = (y[o] as f64 - r[o]).abs();
                        assert!(
                            err <= tol * (1.0 + r[o].abs()),
                            "{k:?} {act:?}: {} vs {}",
                            y[o],
                            r[o]
                        );
                    }
                }
            }
        }
    }
}

/// What `depthwise` declines, and why.
#[test]
fn declines_with_a_reason() {
    let a = conv::find(ALGO).unwrap();
    let conv = |g: usize| {
        ConvDesc::new(
            Padding::symmetric(1, 1),
            [1, 1],
            [1, 1],
            g,
            ConvMode::CrossCorrelation,
        )
        .unwrap()
    };
    // Two input channels per group.
    let x = TensorDesc::new(DataType::F32, Layout::Nchw, [1, 8, 9, 9]).unwrap();
    let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [8, 2, 3, 3]).unwrap();
    let p = ConvProblem::forward_packed(x, w, conv(4), Layout::Nchw).unwrap();
    let reason = a.check(&p).unwrap_err();
    assert!(
        reason.contains("needs groups == input channels") && reason.contains("4 groups"),
        "{reason}"
    );
    // x NCHW, y NHWC: neither unit stride is shared.
    let w = FilterDesc::new(DataType::F32, FilterLayout::Kcrs, [8, 1, 3, 3]).unwrap();
    let p = ConvProblem::forward_packed(x, w, conv(8), Layout::Nhwc).unwrap();
    let reason = a.check(&p).unwrap_err();
    assert!(reason.contains("unit-stride"), "{reason}");
    // The handle reports the decline as an error naming the algorithm.
    let h = Handle::with_threads(1).unwrap();
    let (xv, wv) = (vec![0.0; p.x().span()], vec![0.0; p.w().elements()]);
    let mut y = vec![0.0; p.y().span()];
    match h.conv_forward(&p, ALGO, &xv, &wv, &mut y).unwrap_err() {
        Error::Declined { algo, reason } => {
            assert_eq!(algo, ALGO);
            assert!(reason.contains("unit-stride"), "{reason}");
        }
        e => panic!("unexpected {e:?}"),
    }
    // Direct covers it.
    h.conv_forward(&p, "direct", &xv, &wv, &mut y).unwrap();
}

/// The registry keeps `direct` last, with `depthwise` before it.
#[test]
fn registered_before_direct() {
    let names = conv::names();
    let dw = names.iter().position(|n| *n == ALGO).expect("registered");
    assert_eq!(names.last(), Some(&"direct"));
    assert!(dw < names.len() - 1);
    let a = conv::find(ALGO).unwrap();
    assert!(a.deterministic());
}

/// NHWC-like blocks start where x's vectors are aligned, wherever x lies: every offset of x
/// and y within a cache line, with a bias and a residual at their own offsets, and prepared
/// weights.
#[test]
fn any_buffer_alignment() {
    let h = Handle::with_threads(2).unwrap();
    for (i, k) in [
        case(144, 1, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        case(160, 1, [6, 5], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        case(131, 1, [4, 5], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
        case(48, 1, [9, 10], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
    ]
    .iter()
    .enumerate()
    {
        let epi = Epilogue {
            bias: true,
            residual: true,
            act: Activation::Relu,
        };
        let p = problem(
            k,
            2,
            Layout::Nhwc,
            false,
            ConvMode::CrossCorrelation,
            FilterLayout::Krsc,
        )
        .with_epilogue(epi);
        let (xs, ys) = (p.x().span(), p.y().span());
        let xbuf = int_data(xs + 16, i as u64);
        let w = int_data(p.w().elements(), 50 + i as u64);
        let bias = int_data(p.w().k() + 16, 60 + i as u64);
        let zbuf = int_data(ys + 16, 70 + i as u64);
        let prepared = h.prepare_weights(&p, ALGO, &w).unwrap();
        for off in 0..16 {
            let (yo, zo, bo) = ((off * 5) % 16, (off * 3) % 16, (off * 7) % 16);
            let x = &xbuf[off..off + xs];
            let z = &zbuf[zo..zo + ys];
            let b = &bias[bo..bo + p.w().k()];
            let r = reference::conv_forward_fused(&p, x, &w, 1.0, 1.0, Some(b), Some(z)).unwrap();
            let args = EpilogueArgs::new(1.0, 1.0).with_bias(b).with_residual(z);
            for weights in [Weights::Plain(&w), Weights::Prepared(&prepared)] {
                let mut ybuf = vec![f32::NAN; ys + 16];
                let y = &mut ybuf[yo..yo + ys];
                h.conv_forward_ex(&p, ALGO, x, weights, y, &args, None)
                    .unwrap();
                assert_exact(&p, y, &r, &format!("{k:?} x+{off} y+{yo} z+{zo} bias+{bo}"));
                // Nothing outside y was written.
                assert!(ybuf[..yo]
                    .iter()
                    .chain(&ybuf[yo + ys..])
                    .all(|v| v.is_nan()));
            }
        }
    }
}
