//! Forward convolution on bf16 and f16 tensors: x and w of the reduced type, y of the same
//! type or f32. Every algorithm computes them with f32 sums on f32 copies of its operands
//! (widening is exact) and the epilogue in f32, and rounds y once, to nearest even, at the
//! end. So on integer data (exact in both types) the exact algorithms give the f64 result
//! rounded once to y's type, bit for bit; on real data each stays within its bound plus half
//! an ulp of y's type: the f32 bound, except `winograd_2x2` on bf16 tensors, which rounds its
//! transformed operands to bf16 in every mode (its bound under `allow_bf16`).

mod common;

use autodnn::conv::{Accuracy, Epilogue, EpilogueArgs, Weights};
use autodnn::op::{
    Algorithm, ConvForward, ConvFwdInputs, OpProblem, Operation, Registered, Tensor, TensorBuf,
    TensorMut,
};
use autodnn::select::Policy;
use autodnn::{
    bf16, f16, reference, Bf16Units, ConvProblem, DataType, Error, Handle, Layout, MathMode,
};
use common::{
    int_data, problem, random_depthwise_problem, random_padded_problem, random_problem, real_data,
    Rng,
};

/// `p` with x and w of `dt` and y of `ydt`.
fn reduced(p: &ConvProblem, dt: DataType, ydt: DataType) -> ConvProblem {
    ConvProblem::forward(
        p.x().with_dtype(dt),
        p.w().with_dtype(dt),
        *p.conv(),
        p.y().with_dtype(ydt),
    )
    .unwrap()
    .with_epilogue(*p.epilogue())
}

/// f32 values as a buffer of `dt` (exact for the data used here).
fn buf(v: &[f32], dt: DataType) -> TensorBuf {
    TensorBuf::from_f32(v, dt, "test data").unwrap()
}

fn widened(b: &TensorBuf) -> Vec<f32> {
    let mut v = vec![0.0; b.len()];
    b.widen_into(&mut v);
    v
}

/// `v` rounded to `dt` once (round to nearest even), back in f64.
fn round_to(v: f64, dt: DataType) -> f64 {
    match dt {
        DataType::F32 => v as f32 as f64,
        DataType::Bf16 => bf16::from_f64(v).to_f64(),
        DataType::F16 => f16::from_f64(v).to_f64(),
    }
}

/// Half an ulp of `dt` at `v`, relative: the most one rounding to `dt` moves a value.
fn half_ulp(dt: DataType) -> f64 {
    match dt {
        DataType::F32 => 2f64.powi(-24),
        DataType::Bf16 => 2f64.powi(-8),
        DataType::F16 => 2f64.powi(-11),
    }
}

/// Runs `algo` on the reduced problem with y starting as `y0` (NaN where beta is 0).
fn run(
    h: &Handle,
    algo: &str,
    p: &ConvProblem,
    x: &TensorBuf,
    w: &TensorBuf,
    y0: &TensorBuf,
    epi: &EpilogueArgs<'_>,
) -> Result<Vec<f32>, Error> {
    let mut y = y0.clone();
    let inputs = ConvFwdInputs {
        x: x.view(),
        w: Weights::Tensor(w.view()),
        epilogue: *epi,
    };
    h.run_algorithm::<ConvForward>(p, algo, &inputs, &mut y.as_mut(), None)?;
    Ok(widened(&y))
}

/// Every element of the tensor of `p`'s y.
fn each_output(p: &ConvProblem, mut f: impl FnMut(usize)) {
    let [n, k, oh, ow] = p.y().dims();
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    f(p.y().offset(b, c, i, j));
                }
            }
        }
    }
}

const TYPES: [(DataType, DataType); 4] = [
    (DataType::Bf16, DataType::Bf16),
    (DataType::Bf16, DataType::F32),
    (DataType::F16, DataType::F16),
    (DataType::F16, DataType::F32),
];

#[test]
fn every_algorithm_on_integer_data_is_the_reference_rounded_once() {
    let h = Handle::with_threads(2).unwrap();
    let mut rng = Rng(0x05ee_db16);
    let mut ran = std::collections::BTreeMap::<&str, usize>::new();
    for case in 0..48 {
        let base = if case % 2 == 0 {
            random_problem(&mut rng)
        } else {
            random_padded_problem(&mut rng)
        };
        let (dt, ydt) = TYPES[case % TYPES.len()];
        let p = reduced(&base, dt, ydt);
        let p32 = p.as_f32();
        let xv = int_data(p.x().span(), case as u64);
        let wv = int_data(p.w().elements(), 100 + case as u64);
        let r = reference::conv_forward(&p32, &xv, &wv).unwrap();
        let (x, w) = (buf(&xv, dt), buf(&wv, dt));
        let y0 = buf(&vec![f32::NAN; p.y().span()], ydt);
        for a in ConvForward::algorithms() {
            if Algorithm::<ConvForward>::check(*a, &p).is_err() {
                continue;
            }
            assert_eq!(
                Algorithm::<ConvForward>::check(*a, &p),
                Algorithm::<ConvForward>::check(*a, &p32),
                "{} checks the f32 twin",
                a.name()
            );
            let y = run(&h, a.name(), &p, &x, &w, &y0, &EpilogueArgs::default()).unwrap();
            let (mut diff, mut max) = (0f64, 1f64);
            each_output(&p, |o| {
                let want = round_to(r[o], ydt);
                if a.accuracy() == Accuracy::Exact {
                    assert_eq!(
                        y[o] as f64,
                        want,
                        "{} {}: y[{o}] (reference {})",
                        a.name(),
                        p.types(),
                        r[o]
                    );
                }
                diff = diff.max((y[o] as f64 - r[o]).abs());
                max = max.max(r[o].abs());
            });
            let tol = a.accuracy().integer_tolerance() + half_ulp(ydt);
            assert!(
                diff <= tol * max,
                "{} {}: {diff} > {tol} · {max}",
                a.name(),
                p.types()
            );
            // Prepared for the reduced problem (for bf16 on the bf16 units' pair panels,
            // where the GEMM engine runs them): the same output, bit for bit, from the exact
            // algorithms; within the same bound from the others (their prepared transforms
            // are computed in f64).
            let pw = h.prepare_weights(&p, a.name(), &wv).unwrap();
            assert_eq!(pw.is_bf16(), dt == DataType::Bf16);
            let mut yp = y0.clone();
            let inputs = ConvFwdInputs {
                x: x.view(),
                w: Weights::Prepared(&pw),
                epilogue: EpilogueArgs::default(),
            };
            h.run_algorithm::<ConvForward>(&p, a.name(), &inputs, &mut yp.as_mut(), None)
                .unwrap();
            let yp = widened(&yp);
            each_output(&p, |o| {
                if a.accuracy() == Accuracy::Exact {
                    assert_eq!(
                        yp[o].to_bits(),
                        y[o].to_bits(),
                        "{} {} prepared: y[{o}]",
                        a.name(),
                        p.types()
                    )
                } else {
                    assert!(
                        (yp[o] as f64 - r[o]).abs() <= tol * max,
                        "{} {} prepared: y[{o}]",
                        a.name(),
                        p.types()
                    )
                }
            });
            *ran.entry(a.name()).or_default() += 1;
        }
    }
    for name in [
        "direct",
        "gemm",
        "implicit_gemm",
        "winograd_4x4",
        "fft",
        "depthwise",
    ] {
        assert!(
            ran.get(name).copied().unwrap_or(0) >= 1,
            "{name} never ran: {ran:?}"
        );
    }
}

#[test]
fn real_data_stays_within_the_f32_bound_plus_one_rounding() {
    let h = Handle::with_threads(1).unwrap();
    for (dt, ydt) in TYPES {
        for (s, layout) in [
            ("mb2ic16oc24ih12oh12kh3ph1", Layout::Nchw),
            ("mb1ic32oc32ih9oh9kh1ph0", Layout::Nhwc),
            ("mb1ic8oc8ih14oh7kh3sh2ph1", Layout::Nchw),
            // Depthwise 3x3 windows: on AVX512-BF16, bf16 ones on the dot-product units.
            ("g24mb1ic24oc24ih20oh20kh3ph1", Layout::Nchw),
            ("g24mb1ic24oc24ih21oh11kh3sh2ph1", Layout::Nchw),
        ] {
            let p = reduced(&problem(s, layout), dt, ydt);
            let p32 = p.as_f32();
            let (x, w) = (
                buf(&real_data(p.x().span(), 1, 1 << 12), dt),
                buf(&real_data(p.w().elements(), 2, 1 << 12), dt),
            );
            // The reference takes the inputs as rounded: widening is exact.
            let r = reference::conv_forward(&p32, &widened(&x), &widened(&w)).unwrap();
            let y0 = buf(&vec![f32::NAN; p.y().span()], ydt);
            let crs = (p.c_per_group() * p.w().r() * p.w().s()) as f64;
            for a in ConvForward::algorithms() {
                if Algorithm::<ConvForward>::check(*a, &p).is_err() {
                    continue;
                }
                let y = run(&h, a.name(), &p, &x, &w, &y0, &EpilogueArgs::default()).unwrap();
                let c = match Algorithm::<ConvForward>::accuracy_under(*a, &p, MathMode::Strict) {
                    Accuracy::Exact => 1.0,
                    Accuracy::Normwise { c, .. } => c,
                };
                // |x|, |w| ≤ 1: the f32 bound is c · ε · C·R·S; one rounding adds half an ulp
                // of the value.
                let f32_bound = c * 2f64.powi(-24) * crs;
                each_output(&p, |o| {
                    let d = (y[o] as f64 - r[o]).abs();
                    let bound = f32_bound * (1.0 + half_ulp(ydt)) + half_ulp(ydt) * r[o].abs();
                    assert!(
                        d <= bound * 1.0001 + 1e-30,
                        "{} {} {s}: y[{o}] = {} ref {} (bound {bound})",
                        a.name(),
                        p.types(),
                        y[o],
                        r[o]
                    );
                });
            }
        }
    }
}

/// bf16 tensors compute at bf16's precision in every mode: `winograd_2x2` rounds its
/// transformed operands to bf16 pairs under strict math exactly as under `allow_bf16` (the
/// same bits), within its bound under the mode, where the f32 problem on the same values
/// keeps them in f32 under strict math.
#[test]
fn bf16_tensors_round_winograd_operands_in_every_mode() {
    let (strict, allow) = (
        Handle::with_threads(1).unwrap(),
        Handle::with_threads(1).unwrap(),
    );
    allow.set_math_mode(MathMode::AllowBf16);
    let p32 = problem("mb2ic32oc16ih10oh10kh3ph1", Layout::Nchw);
    let p = reduced(&p32, DataType::Bf16, DataType::F32);
    let (x, w) = (
        buf(&real_data(p.x().span(), 3, 1 << 12), DataType::Bf16),
        buf(&real_data(p.w().elements(), 4, 1 << 12), DataType::Bf16),
    );
    let (xv, wv) = (widened(&x), widened(&w));
    let r = reference::conv_forward(&p32, &xv, &wv).unwrap();
    let y0 = buf(&vec![f32::NAN; p.y().span()], DataType::F32);
    let a = ConvForward::algorithms()
        .iter()
        .find(|a| a.name() == "winograd_2x2")
        .unwrap();
    let bound = match Algorithm::<ConvForward>::accuracy_under(*a, &p, MathMode::Strict) {
        Accuracy::Normwise { c, .. } => c * 2f64.powi(-24) * (32 * 9) as f64,
        Accuracy::Exact => panic!("winograd_2x2 is not exact"),
    };
    assert!(
        bound > 1e-4,
        "the bound under strict math is the f32 one: {bound:e}"
    );
    for units in [Bf16Units::Always, Bf16Units::Auto] {
        strict.set_bf16_units(units);
        allow.set_bf16_units(units);
        let epi = EpilogueArgs::default();
        let ys = run(&strict, "winograd_2x2", &p, &x, &w, &y0, &epi).unwrap();
        let ya = run(&allow, "winograd_2x2", &p, &x, &w, &y0, &epi).unwrap();
        each_output(&p, |o| {
            assert_eq!(ys[o].to_bits(), ya[o].to_bits(), "{units:?}: y[{o}]");
            assert!((ys[o] as f64 - r[o]).abs() <= bound, "{units:?}: y[{o}]");
        });
        if units == Bf16Units::Always {
            // The f32 problem on the same values, strict: V and U stay in f32.
            let mut y32 = vec![f32::NAN; p32.y().span()];
            strict
                .conv_forward(&p32, "winograd_2x2", &xv, &wv, &mut y32)
                .unwrap();
            let mut differ = 0;
            each_output(&p, |o| differ += usize::from(ys[o] != y32[o]));
            assert!(differ > 0, "bf16 tensors under strict math computed in f32");
        }
    }
}

#[test]
fn the_output_is_rounded_once_to_nearest_even() {
    // y = x0·w0 + x1·w1 with exact products whose sums sit halfway between two bf16 values:
    // 1 + 2^-8 rounds to 1 (even), 1 + 2^-7 + 2^-8 to 1 + 2^-6 (even), -(1 + 2^-8) to -1.
    let h = Handle::with_threads(1).unwrap();
    let p = reduced(
        &problem("mb3ic2oc1ih1oh1kh1ph0", Layout::Nchw),
        DataType::Bf16,
        DataType::Bf16,
    );
    let x = buf(
        &[
            1.0,
            2f32.powi(-8),
            1.0 + 2f32.powi(-7),
            2f32.powi(-8),
            -1.0,
            -(2f32.powi(-8)),
        ],
        DataType::Bf16,
    );
    // NCHW with one pixel: image b's channels at 2b and 2b + 1.
    let w = buf(&[1.0, 1.0], DataType::Bf16);
    let y0 = buf(&[f32::NAN; 3], DataType::Bf16);
    for algo in ["direct", "gemm", "implicit_gemm"] {
        let y = run(&h, algo, &p, &x, &w, &y0, &EpilogueArgs::default()).unwrap();
        assert_eq!(y, vec![1.0, 1.0 + 2f32.powi(-6), -1.0], "{algo}");
    }
    // An f32 y keeps the sum.
    let p32y = reduced(&p, DataType::Bf16, DataType::F32);
    let y0 = buf(&[f32::NAN; 3], DataType::F32);
    let y = run(&h, "direct", &p32y, &x, &w, &y0, &EpilogueArgs::default()).unwrap();
    assert_eq!(
        y,
        vec![
            1.0 + 2f32.powi(-8),
            1.0 + 2f32.powi(-7) + 2f32.powi(-8),
            -(1.0 + 2f32.powi(-8))
        ]
    );
}

#[test]
fn the_epilogue_runs_in_f32_and_beta_reads_the_reduced_output() {
    let h = Handle::with_threads(1).unwrap();
    h.set_policy(Policy::Heuristic);
    let base = problem("mb1ic8oc8ih6oh6kh3ph1", Layout::Nchw);
    for (dt, ydt) in TYPES {
        let with_bias = reduced(&base, dt, ydt).with_epilogue(Epilogue {
            bias: true,
            act: autodnn::Activation::Relu,
            ..Default::default()
        });
        let p32 = with_bias.as_f32();
        let xv = int_data(with_bias.x().span(), 3);
        let wv = int_data(with_bias.w().elements(), 4);
        let bias: Vec<f32> = (0..8).map(|k| k as f32 - 4.0).collect();
        let prior = int_data(with_bias.y().span(), 5);
        let r = reference::conv_forward_fused(&p32, &xv, &wv, 2.0, 1.0, Some(&bias), Some(&prior))
            .unwrap();
        let (x, w) = (buf(&xv, dt), buf(&wv, dt));
        let y0 = buf(&prior, ydt);
        let epi = EpilogueArgs::new(2.0, 1.0).with_bias(&bias);
        for algo in ["direct", "gemm", "implicit_gemm"] {
            let y = run(&h, algo, &with_bias, &x, &w, &y0, &epi).unwrap();
            each_output(&with_bias, |o| {
                let want = round_to(r[o].max(0.0), ydt);
                assert_eq!(y[o] as f64, want, "{algo} {}: y[{o}]", with_bias.types());
            });
        }
        // The handle's selection, with its fallback chain's snapshot of y.
        let mut y = y0.clone();
        let inputs = ConvFwdInputs {
            x: x.view(),
            w: Weights::Tensor(w.view()),
            epilogue: epi,
        };
        h.run::<ConvForward>(&with_bias, &inputs, &mut y.as_mut())
            .unwrap();
        let y = widened(&y);
        each_output(&with_bias, |o| {
            assert!(
                (y[o] as f64 - r[o].max(0.0)).abs()
                    <= 1e-3 * r[o].abs().max(1.0) + half_ulp(ydt) * r[o].abs()
            );
        });
    }
}

#[test]
fn selection_times_reduced_problems_on_their_own_type() {
    // The race's scratch output and the cache key follow y's type.
    let h = Handle::with_threads(1).unwrap();
    h.set_policy(Policy::Benchmark);
    let base = problem("mb1ic16oc16ih10oh10kh3ph1", Layout::Nchw);
    for (dt, ydt) in TYPES {
        let p = reduced(&base, dt, ydt);
        let scratch = ConvForward::scratch(&p).unwrap();
        assert_eq!(scratch.view().dtype(), ydt);
        let xv = int_data(p.x().span(), 8);
        let wv = int_data(p.w().elements(), 9);
        let r = reference::conv_forward(&p.as_f32(), &xv, &wv).unwrap();
        let (x, w) = (buf(&xv, dt), buf(&wv, dt));
        let mut y = buf(&vec![f32::NAN; p.y().span()], ydt);
        let inputs = ConvFwdInputs {
            x: x.view(),
            w: Weights::Tensor(w.view()),
            epilogue: EpilogueArgs::default(),
        };
        let report = h.run::<ConvForward>(&p, &inputs, &mut y.as_mut()).unwrap();
        let y = widened(&y);
        let tol = autodnn::conv::find(report.algo)
            .unwrap()
            .accuracy()
            .integer_tolerance();
        each_output(&p, |o| {
            let d = (y[o] as f64 - r[o]).abs();
            assert!(
                d <= (tol + half_ulp(ydt)) * r[o].abs().max(1.0),
                "{}: y[{o}]",
                report.algo
            );
        });
        assert_eq!(
            p.types(),
            if dt == ydt {
                dt.name().to_string()
            } else {
                format!("{}>f32", dt.name())
            }
        );
    }
    let keys: Vec<String> = h
        .tuning_cache()
        .entries()
        .iter()
        .map(|(k, _)| k.types.clone())
        .collect();
    for t in ["bf16", "bf16>f32", "f16", "f16>f32"] {
        assert!(keys.iter().any(|k| k == t), "no {t} entry in {keys:?}");
    }
}

#[test]
fn workspaces_hold_the_widened_copies_and_mismatched_types_are_refused() {
    // Every algorithm but `direct`, which reads the reduced tensors in place: no workspace.
    let h = Handle::with_threads(1).unwrap();
    let base = problem("mb1ic8oc16ih9oh9kh3ph1", Layout::Nhwc);
    let p = reduced(&base, DataType::Bf16, DataType::Bf16);
    let p32 = p.as_f32();
    let xv = int_data(p.x().span(), 1);
    let wv = int_data(p.w().elements(), 2);
    let (x, w) = (buf(&xv, DataType::Bf16), buf(&wv, DataType::Bf16));
    let r = reference::conv_forward(&p32, &xv, &wv).unwrap();
    for a in ConvForward::algorithms() {
        if Algorithm::<ConvForward>::check(*a, &p).is_err() {
            continue;
        }
        let need = Algorithm::<ConvForward>::workspace_bytes(*a, &p);
        let widen = 4 * (p.x().span() + p.w().elements() + p.y().span());
        if a.name() == "direct" {
            assert_eq!(need, 0, "direct");
        } else {
            assert!(
                need >= Algorithm::<ConvForward>::workspace_bytes(*a, &p32) + widen,
                "{}",
                a.name()
            );
            assert!(
                need <= Algorithm::<ConvForward>::workspace_bytes(*a, &p32) + widen + 3 * 128,
                "{}",
                a.name()
            );
        }
        let inputs = ConvFwdInputs {
            x: x.view(),
            w: Weights::Tensor(w.view()),
            epilogue: EpilogueArgs::default(),
        };
        // Exactly the size asked for (64-byte aligned, as an allocator gives), then one short.
        let mut storage = vec![0u8; need + 64];
        let at = storage.as_ptr().align_offset(64);
        let mut y = buf(&vec![f32::NAN; p.y().span()], DataType::Bf16);
        h.run_algorithm::<ConvForward>(
            &p,
            a.name(),
            &inputs,
            &mut y.as_mut(),
            Some(&mut storage[at..at + need]),
        )
        .unwrap();
        let y = widened(&y);
        if a.accuracy() == Accuracy::Exact {
            each_output(&p, |o| {
                assert_eq!(y[o] as f64, round_to(r[o], DataType::Bf16))
            });
        }
        if need == 0 {
            continue;
        }
        let mut y = buf(&vec![f32::NAN; p.y().span()], DataType::Bf16);
        let short = h.run_algorithm::<ConvForward>(
            &p,
            a.name(),
            &inputs,
            &mut y.as_mut(),
            Some(&mut storage[at..at + need - 1]),
        );
        assert!(
            matches!(short, Err(Error::WorkspaceTooSmall { .. })),
            "{}: {short:?}",
            a.name()
        );
    }
    // Tensors of another type than the problem's, named.
    let xf = int_data(p.x().span(), 1);
    let wf = int_data(p.w().elements(), 2);
    let mut yb = buf(&vec![0.0; p.y().span()], DataType::Bf16);
    let mut yf = vec![0.0f32; p.y().span()];
    let cases: [(&str, ConvFwdInputs<'_>, bool); 4] = [
        (
            "x.dtype",
            ConvFwdInputs::new(&xf, Weights::Tensor(w.view()), EpilogueArgs::default()),
            false,
        ),
        (
            "w.dtype",
            ConvFwdInputs {
                x: x.view(),
                w: Weights::Plain(&wf),
                epilogue: EpilogueArgs::default(),
            },
            false,
        ),
        (
            "w.dtype",
            ConvFwdInputs {
                x: x.view(),
                w: Weights::Tensor(Tensor::F32(&wf)),
                epilogue: EpilogueArgs::default(),
            },
            false,
        ),
        (
            "y.dtype",
            ConvFwdInputs {
                x: x.view(),
                w: Weights::Tensor(w.view()),
                epilogue: EpilogueArgs::default(),
            },
            true,
        ),
    ];
    for (field, inputs, f32_out) in cases {
        let e = if f32_out {
            h.run_algorithm::<ConvForward>(
                &p,
                "direct",
                &inputs,
                &mut TensorMut::F32(&mut yf),
                None,
            )
        } else {
            h.run_algorithm::<ConvForward>(&p, "direct", &inputs, &mut yb.as_mut(), None)
        }
        .unwrap_err();
        assert!(
            matches!(&e, Error::BadParam { field: f, .. } if f == field),
            "{field}: {e:?}"
        );
    }
    // Prepared weights: made for the f32 twin, they serve the reduced problem.
    let pw = h.prepare_weights(&p32, "winograd_4x4", &wv).unwrap();
    let mut y = buf(&vec![f32::NAN; p.y().span()], DataType::Bf16);
    let inputs = ConvFwdInputs {
        x: x.view(),
        w: Weights::Prepared(&pw),
        epilogue: EpilogueArgs::default(),
    };
    h.run_algorithm::<ConvForward>(&p, "winograd_4x4", &inputs, &mut y.as_mut(), None)
        .unwrap();
    let y = widened(&y);
    each_output(&p, |o| {
        assert!((y[o] as f64 - r[o]).abs() <= 1e-3 * 200.0 + half_ulp(DataType::Bf16) * r[o].abs())
    });
    // Prepared for the bf16 problem itself, the filter is rounded to bf16 first: strict f32
    // calls refuse it, with every algorithm (GEMM's as bf16 pairs, the others as f32).
    for algo in ["winograd_4x4", "gemm", "implicit_gemm", "direct"] {
        let pw = h.prepare_weights(&p, algo, &wv).unwrap();
        assert!(pw.is_bf16(), "{algo}");
        let mut y32 = vec![f32::NAN; p32.y().span()];
        let e = h
            .conv_forward_ex(
                &p32,
                algo,
                &xv,
                Weights::Prepared(&pw),
                &mut y32,
                &EpilogueArgs::default(),
                None,
            )
            .unwrap_err();
        assert!(
            matches!(&e, Error::BadParam { field, .. } if field == "prepared"),
            "{algo}: {e:?}"
        );
    }
}

/// `direct` reads bf16 and f16 x and w and writes y in place, with no workspace: on every
/// instruction set, on real data with a bias, an activation and beta reading the prior y,
/// its output is the f32 `direct` on the widened tensors rounded once, bit for bit. And so a
/// zero workspace budget still runs every reduced problem (the end of the fallback chain).
#[test]
fn direct_reads_reduced_tensors_in_place_with_no_workspace() {
    let mut rng = Rng(0xd1ec_7b16);
    let mut ran = 0;
    for isa in autodnn::cpu::Isa::ALL
        .into_iter()
        .filter(|i| i.is_available())
    {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            for case in 0..12 {
                let base = if case % 2 == 0 {
                    random_problem(&mut rng)
                } else {
                    random_padded_problem(&mut rng)
                };
                let (dt, ydt) = TYPES[case % TYPES.len()];
                let k = base.y().c();
                let p = reduced(&base, dt, ydt).with_epilogue(Epilogue {
                    bias: true,
                    residual: false,
                    act: autodnn::conv::Activation::Relu,
                });
                let p32 = p.as_f32();
                // Real data rounded to the type, so that the f32 twin sees the same values.
                let x = buf(&real_data(p.x().span(), case as u64, 977), dt);
                let w = buf(&real_data(p.w().elements(), 50 + case as u64, 977), dt);
                let y0 = buf(&real_data(p.y().span(), 90 + case as u64, 977), ydt);
                let bias = real_data(k, 7, 977);
                let epi = EpilogueArgs::new(0.75, 0.5).with_bias(&bias);
                let (x32, w32, y32) = (widened(&x), widened(&w), widened(&y0));
                let mut want = y32.clone();
                h.run_algorithm::<ConvForward>(
                    &p32,
                    "direct",
                    &ConvFwdInputs::new(&x32, Weights::Plain(&w32), epi),
                    &mut TensorMut::F32(&mut want),
                    None,
                )
                .unwrap();
                let want = widened(&buf(&want, ydt));
                let inputs = ConvFwdInputs {
                    x: x.view(),
                    w: Weights::Tensor(w.view()),
                    epilogue: epi,
                };
                let mut y = y0.clone();
                h.run_algorithm::<ConvForward>(
                    &p,
                    "direct",
                    &inputs,
                    &mut y.as_mut(),
                    Some(&mut []),
                )
                .unwrap();
                let got = widened(&y);
                each_output(&p, |o| {
                    assert_eq!(
                        got[o].to_bits(),
                        want[o].to_bits(),
                        "{isa:?} {threads}T {} {:?}: y[{o}]",
                        p.types(),
                        base
                    )
                });
                // Under a zero budget the handle's own choice is one that reads the tensors
                // in place (direct, or depthwise on the whole batch or on parts of it), with
                // the bits it gives on its own.
                h.set_workspace_limit(Some(0));
                let mut y = y0.clone();
                let report = h.run::<ConvForward>(&p, &inputs, &mut y.as_mut()).unwrap();
                h.set_workspace_limit(None);
                assert!(
                    ["direct", "depthwise", "depthwise_batch"].contains(&report.algo),
                    "{isa:?} {}: {}",
                    p.types(),
                    report.algo
                );
                let mut alone = y0.clone();
                h.run_algorithm::<ConvForward>(
                    &p,
                    report.algo,
                    &inputs,
                    &mut alone.as_mut(),
                    Some(&mut []),
                )
                .unwrap();
                assert_eq!(widened(&y), widened(&alone), "{isa:?} {} auto", p.types());
                ran += 1;
            }
        }
    }
    assert!(ran >= 24);
}

/// `depthwise` reads bf16 and f16 tensors in their own types, with no workspace (each work
/// item widens what it reads into a stage in cache): on every instruction set, 1 and 2
/// threads, both layouts and every kernel of its frames (the unrolled 3x3 and 5x5 ones,
/// channel pairs, generic taps, multipliers, problems larger than one stage), on real data
/// with a bias, activations applied in the kernels and after them, beta reading the prior y
/// or a residual, its output is the f32 `depthwise` on the widened tensors rounded once, bit
/// for bit. (On AVX512-BF16, bf16's 3x3 NCHW-like windows run on the dot-product units, which
/// add the products in another order: the same bits on these data, whose sums
/// round alike; `real_data_stays_within_the_f32_bound_plus_one_rounding` bounds them on any.)
#[test]
fn depthwise_reads_reduced_tensors_in_place_with_no_workspace() {
    use autodnn::conv::Activation;
    let mut rng = Rng(0xdee9_b16f);
    let mut ran = 0;
    let mut layouts = [0usize; 2];
    for isa in autodnn::cpu::Isa::ALL
        .into_iter()
        .filter(|i| i.is_available())
    {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            for case in 0..16 {
                let base = random_depthwise_problem(&mut rng);
                let (dt, ydt) = TYPES[case % TYPES.len()];
                let residual = ydt == DataType::F32 && case % 3 == 0;
                let act = [Activation::Relu, Activation::Sigmoid, Activation::None][case % 3];
                let p = reduced(&base, dt, ydt).with_epilogue(Epilogue {
                    bias: case % 4 != 1,
                    residual,
                    act,
                });
                let dw = ConvForward::algorithms()
                    .iter()
                    .find(|a| a.name() == "depthwise")
                    .expect("depthwise is registered");
                assert_eq!(Algorithm::<ConvForward>::workspace_bytes(*dw, &p), 0);
                let p32 = p.as_f32();
                let k = p.y().c();
                let x = buf(&real_data(p.x().span(), case as u64, 977), dt);
                let w = buf(&real_data(p.w().elements(), 50 + case as u64, 977), dt);
                // beta 0 onto NaN (y is not read), else beta reading the prior y or z.
                let beta = if case % 5 == 4 { 0.0 } else { 0.5 };
                let y0 = if beta == 0.0 {
                    buf(&vec![f32::NAN; p.y().span()], ydt)
                } else {
                    buf(&real_data(p.y().span(), 90 + case as u64, 977), ydt)
                };
                let bias = real_data(k, 7, 977);
                let z = real_data(p.y().span(), 11, 977);
                let mut epi = EpilogueArgs::new(0.75, beta);
                if p.epilogue().bias {
                    epi = epi.with_bias(&bias);
                }
                if residual {
                    epi = epi.with_residual(&z);
                }
                let (x32, w32, y32) = (widened(&x), widened(&w), widened(&y0));
                let mut want = y32.clone();
                h.run_algorithm::<ConvForward>(
                    &p32,
                    "depthwise",
                    &ConvFwdInputs::new(&x32, Weights::Plain(&w32), epi),
                    &mut TensorMut::F32(&mut want),
                    None,
                )
                .unwrap();
                let want = widened(&buf(&want, ydt));
                let inputs = ConvFwdInputs {
                    x: x.view(),
                    w: Weights::Tensor(w.view()),
                    epilogue: epi,
                };
                let mut y = y0.clone();
                h.run_algorithm::<ConvForward>(
                    &p,
                    "depthwise",
                    &inputs,
                    &mut y.as_mut(),
                    Some(&mut []),
                )
                .unwrap();
                let got = widened(&y);
                each_output(&p, |o| {
                    assert_eq!(
                        got[o].to_bits(),
                        want[o].to_bits(),
                        "{isa:?} {threads}T {} {:?} {:?}: y[{o}] = {} (want {})",
                        p.types(),
                        p.epilogue(),
                        base,
                        got[o],
                        want[o]
                    )
                });
                // Outside the output's elements (padded strides), y is left as it was.
                let before = widened(&y0);
                let mut inside = vec![false; p.y().span()];
                each_output(&p, |o| inside[o] = true);
                for (o, _) in inside.iter().enumerate().filter(|(_, i)| !**i) {
                    assert_eq!(got[o].to_bits(), before[o].to_bits(), "gap y[{o}]");
                }
                layouts[usize::from(p.x().strides()[1] == 1)] += 1;
                ran += 1;
            }
        }
    }
    assert!(
        ran >= 32 && layouts.iter().all(|&n| n >= 4),
        "{ran} {layouts:?}"
    );
}

/// `depthwise` on bf16 and f16 tensors (y of the same type, an epilogue the kernels apply in
/// full) widens x's lanes as it loads them and rounds y's as it stores them: every kernel of
/// both layouts (3x3 and 5x5 at strides 1 and 2; NCHW's 3-wide windows, of one vector's
/// columns per pass or two, channel pairs and generic kernels at any step; NHWC's generic kernel, with a channel multiplier too), on
/// every instruction set and 1 and 2 threads,
/// gives the f32 `depthwise` on the widened tensors rounded once, bit for bit, also where
/// the outputs land on rounding's edge cases: channels with a zero filter output their bias,
/// which here is a tie (both ways), a subnormal (rounding to a subnormal or up to the least
/// normal), the largest finite values (rounding to infinity), infinities and NaNs. (bf16's
/// dot-product kernels add the products in another order: the same bits on these
/// data, as in `depthwise_reads_reduced_tensors_in_place_with_no_workspace`.)
#[test]
fn depthwise_rounds_reduced_lanes_in_registers() {
    use autodnn::conv::Activation;
    let specials: Vec<f32> = [
        0x3f80_8000u32,
        0x3f81_8000,
        0x3f80_8001,
        0xbf80_7fff,
        0x0001_2345,
        0x807f_ffff,
        0x0000_8000,
        0x7f7f_ffff,
        0x477f_f000,
        0x3380_0001,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0001,
        0x8000_0000,
    ]
    .into_iter()
    .map(f32::from_bits)
    .collect();
    let specs = [
        "g20mb2ic20ih13iw37oc20oh13ow37kh3kw3ph1pw1",
        "g20mb1ic20ih13iw37oc20oh7ow19kh3kw3sh2sw2ph1pw1",
        "g20mb1ic20ih11iw40oc20oh11ow40kh5kw5ph2pw2",
        "g20mb1ic20ih11iw40oc20oh6ow20kh5kw5sh2sw2ph2pw2",
        "g20mb1ic20ih7iw7oc20oh7ow7kh3kw3ph1pw1",
        "g20mb1ic20ih8iw8oc20oh4ow4kh3kw3sh2sw2ph1pw1",
        "g20mb1ic20ih9iw21oc20oh9ow21kh2kw3ph1pw1",
        "g20mb1ic20ih12iw30oc20oh6ow15kh3kw3sh2sw2dh1dw1ph2pw2",
        "g20mb1ic20ih9iw30oc20oh9ow10kh1kw3sw3ph0pw1",
        "g20mb1ic20ih9iw11oc40oh9ow11kh3kw3ph1pw1",
        // Stride-1 3-wide windows over two vectors' columns per pass (AVX512-BF16's dot
        // products), a ragged last pass each.
        "g20mb2ic20ih9iw26oc20oh9ow26kh3kw3ph1pw1",
        "g20mb1ic20ih10iw60oc20oh10ow60kh3kw3ph1pw1",
    ];
    let mut ran = 0;
    for isa in autodnn::cpu::Isa::ALL
        .into_iter()
        .filter(|i| i.is_available())
    {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            for (i, spec, layout) in specs
                .iter()
                .enumerate()
                .flat_map(|(i, s)| [Layout::Nchw, Layout::Nhwc].map(|l| (i, s, l)))
            {
                for dt in [DataType::Bf16, DataType::F16] {
                    let p = reduced(&problem(spec, layout), dt, dt).with_epilogue(Epilogue {
                        bias: true,
                        residual: false,
                        act: [Activation::None, Activation::Relu][i % 2],
                    });
                    let k = p.y().c();
                    let taps = p.w().elements() / k;
                    let mut wv = real_data(p.w().elements(), i as u64, 977);
                    for c in (0..k).step_by(2) {
                        wv[c * taps..][..taps].fill(0.0);
                    }
                    let x = buf(&real_data(p.x().span(), 20 + i as u64, 977), dt);
                    let w = buf(&wv, dt);
                    let mut bias = real_data(k, 7, 977);
                    for (c, b) in bias.iter_mut().step_by(2).enumerate() {
                        *b = specials[(c + i) % specials.len()];
                    }
                    let beta = [0.0, 0.5][i % 2];
                    let y0 = if beta == 0.0 {
                        buf(&vec![f32::NAN; p.y().span()], dt)
                    } else {
                        buf(&real_data(p.y().span(), 90, 977), dt)
                    };
                    let epi = EpilogueArgs::new(0.75, beta).with_bias(&bias);
                    let mut want = widened(&y0);
                    h.run_algorithm::<ConvForward>(
                        &p.as_f32(),
                        "depthwise",
                        &ConvFwdInputs::new(&widened(&x), Weights::Plain(&widened(&w)), epi),
                        &mut TensorMut::F32(&mut want),
                        None,
                    )
                    .unwrap();
                    let want = widened(&buf(&want, dt));
                    let got = run(&h, "depthwise", &p, &x, &w, &y0, &epi).unwrap();
                    each_output(&p, |o| {
                        assert_eq!(
                            got[o].to_bits(),
                            want[o].to_bits(),
                            "{isa:?} {threads}T {spec} {layout:?} {dt:?}: y[{o}] = {} (want {})",
                            got[o],
                            want[o]
                        )
                    });
                    ran += 1;
                }
            }
        }
    }
    assert!(ran >= 80, "{ran}");
}

/// The GEMM-engine algorithms compute reduced tensors an image at a time (the image's f32
/// copy, its blocks' outputs rounded into y as they finish) where x's images lie a batch
/// stride apart, and the whole batch at once where they interleave (batch innermost); either
/// way only each block's own elements of y are read and written. Both give the f64 result
/// rounded once, bit for bit, on integer data, with beta reading the prior y, images
/// interleaved in x and y or in y alone, and images large enough to be converted in parts.
#[test]
fn gemm_algorithms_chunk_reduced_batches_by_image_or_whole() {
    use autodnn::TensorDesc;
    let h = Handle::with_threads(2).unwrap();
    for (spec, interleaved) in [
        ("mb4ic5ih9oc7oh9kh3ph1", [false, false]),
        ("mb4ic5ih9oc7oh9kh3ph1", [true, true]),
        ("mb4ic5ih9oc7oh9kh3ph1", [false, true]),
        ("mb3ic6ih8oc5oh8kh1ph0", [false, false]),
        ("mb3ic6ih8oc5oh8kh1ph0", [true, true]),
        ("mb3ic6ih8oc5oh8kh1ph0", [false, true]),
        ("mb2ic4ih10oc600oh5kh3sh2ph1", [false, false]),
        // Images of 73 728 elements in x and y: their widening and rounding run in parts
        // on both threads.
        ("mb2ic32ih48oc32oh48kh3ph1", [false, false]),
    ] {
        let base = problem(spec, Layout::Nchw);
        let batch_inner = |d: &autodnn::TensorDesc, dt: DataType| {
            let [n, c, hh, ww] = d.dims();
            TensorDesc::with_strides(dt, [n, c, hh, ww], [1, n * hh * ww, n * ww, n]).unwrap()
        };
        for (dt, ydt) in TYPES {
            let x = match interleaved[0] {
                true => batch_inner(base.x(), dt),
                false => base.x().with_dtype(dt),
            };
            let y = match interleaved[1] {
                true => batch_inner(base.y(), ydt),
                false => base.y().with_dtype(ydt),
            };
            let p = ConvProblem::forward(x, base.w().with_dtype(dt), *base.conv(), y).unwrap();
            let p32 = p.as_f32();
            let xv = int_data(p.x().span(), 3);
            let wv = int_data(p.w().elements(), 4);
            let yv = int_data(p.y().span(), 5);
            let epi = EpilogueArgs::new(1.0, 2.0);
            let mut r = reference::conv_forward(&p32, &xv, &wv).unwrap();
            for (r, y) in r.iter_mut().zip(&yv) {
                *r += 2.0 * f64::from(*y);
            }
            let (xb, wb, y0) = (buf(&xv, dt), buf(&wv, dt), buf(&yv, ydt));
            for name in ["gemm", "implicit_gemm", "gemm_batch", "implicit_gemm_batch"] {
                let a = autodnn::conv::find(name).unwrap();
                if Algorithm::<ConvForward>::check(a, &p).is_err() {
                    assert!(name.ends_with("_batch") && interleaved[1], "{name} {spec}");
                    continue;
                }
                let got = run(&h, name, &p, &xb, &wb, &y0, &epi).unwrap();
                each_output(&p, |o| {
                    assert_eq!(
                        f64::from(got[o]),
                        round_to(r[o], ydt),
                        "{name} {spec} interleaved={interleaved:?} {}: y[{o}]",
                        p.types()
                    )
                });
            }
        }
    }
}
