//! Allocation failure everywhere: every allocation the library makes during a call is failed
//! in turn (the N-th, for every N up to the call's count, once and from there on), as
//! SQLite's malloc tests do. Each run must end in a correct output (through the fallback
//! chain where there is one) or in a typed out-of-memory error: never an abort, never a wrong
//! result.
//!
//! The injector is process-wide, so everything runs in one test function.

mod common;

use autodnn::alloc::FailNth;
use autodnn::conv::{self, Accuracy, Activation, Epilogue, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::gemm::GemmDesc;
use autodnn::op::{
    Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, Registered, TensorMut,
};
use autodnn::select::Policy;
use autodnn::{reference, ConvProblem, Error, Handle, Layout, OpKind};
use common::{assert_accurate, int_data, problem};

/// True for an out-of-memory error, or a fallback chain that failed for want of memory only.
fn is_oom(e: &Error) -> bool {
    match e {
        Error::OutOfMemory { .. } => true,
        Error::AllFailed { tried, last } => {
            is_oom(last) && tried.iter().all(|t| t.contains("out of memory"))
        }
        _ => false,
    }
}

/// What the runs of one configuration came to.
#[derive(Default, Debug)]
struct Totals {
    calls: usize,
    /// Runs in which the armed allocation was reached and failed.
    injected: usize,
    /// Of those, runs that still returned a correct output.
    survived: usize,
    /// Of those, runs that returned a typed out-of-memory error.
    typed: usize,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.calls += o.calls;
        self.injected += o.injected;
        self.survived += o.survived;
        self.typed += o.typed;
    }
}

/// Runs `call` once to count its allocations A (asserting A > 0), then for every N in 1..=A
/// with the N-th allocation failing once and failing from there on. `call` returns the
/// output on success; `check` asserts it is correct. `recovers`: a call with a fallback chain,
/// which must survive a one-shot failure inside the chain (a failure it cannot step past
/// is an `OutOfMemory` of the call itself, never `AllFailed`).
fn sweep<T>(
    what: &str,
    totals: &mut Totals,
    recovers: bool,
    mut call: impl FnMut() -> autodnn::Result<T>,
    check: impl Fn(&T, &str),
) {
    FailNth::count();
    let out = call().unwrap_or_else(|e| panic!("{what}: fails without injection: {e}"));
    let count = FailNth::allocations();
    check(&out, what);
    assert!(
        count > 0,
        "{what}: makes no allocation the injector can fail"
    );
    totals.calls += 1;
    for n in 1..=count {
        for persist in [false, true] {
            FailNth::arm(n, persist);
            let r = call();
            let tripped = FailNth::tripped();
            FailNth::disarm();
            let label = format!("{what}, allocation {n} of {count} failing (persist {persist})");
            if tripped {
                totals.injected += 1;
            }
            match r {
                Ok(out) => {
                    check(&out, &label);
                    if tripped {
                        totals.survived += 1;
                    }
                }
                Err(e) => {
                    assert!(
                        tripped,
                        "{label}: an error without an injected failure: {e}"
                    );
                    assert!(
                        is_oom(&e),
                        "{label}: not a typed out-of-memory error: {e:?}"
                    );
                    if recovers && !persist {
                        assert!(
                            matches!(e, Error::OutOfMemory { .. }),
                            "{label}: the fallback chain did not recover: {e}"
                        );
                    }
                    totals.typed += 1;
                }
            }
        }
    }
}

/// One convolution problem with its data and reference output.
struct Case {
    p: ConvProblem,
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
    z: Option<Vec<f32>>,
    /// y's contents before the call (read when beta ≠ 0 without a residual).
    prior: Vec<f32>,
    beta: f32,
    reference: Vec<f64>,
}

impl Case {
    fn new(spec: &str, layout: Layout, epi: Epilogue, beta: f32, seed: u64) -> Case {
        let p = problem(spec, layout).with_epilogue(epi);
        let x = int_data(p.x().span(), seed);
        let w = int_data(p.w().elements(), seed + 1);
        let bias = epi.bias.then(|| int_data(p.w().k(), seed + 2));
        let z = epi.residual.then(|| int_data(p.y().span(), seed + 3));
        let prior = int_data(p.y().span(), seed + 4);
        let reference = reference::conv_forward_fused(
            &p,
            &x,
            &w,
            1.0,
            beta as f64,
            bias.as_deref(),
            Some(z.as_deref().unwrap_or(&prior)),
        )
        .unwrap();
        Case {
            p,
            x,
            w,
            bias,
            z,
            prior,
            beta,
            reference,
        }
    }

    fn args(&self) -> EpilogueArgs<'_> {
        let mut a = EpilogueArgs::new(1.0, self.beta);
        if let Some(b) = &self.bias {
            a = a.with_bias(b);
        }
        if let Some(z) = &self.z {
            a = a.with_residual(z);
        }
        a
    }
}

/// The problems: every registered algorithm accepts at least one of them.
fn cases() -> Vec<Case> {
    let none = Epilogue::default();
    let fused = Epilogue {
        bias: true,
        residual: true,
        act: Activation::Relu,
    };
    let bias = Epilogue {
        bias: true,
        ..Epilogue::default()
    };
    vec![
        // 3x3: Winograd (every tile size), FFT, the GEMMs, direct.
        Case::new("mb1ic5ih9oc6kh3ph1", Layout::Nchw, none, 0.0, 1),
        Case::new("mb2ic4ih8oc7kh3ph1", Layout::Nhwc, fused, 1.0, 2),
        // y's prior contents as the residual (the fallback chain keeps a copy).
        Case::new("mb1ic3ih7oc4kh3ph1", Layout::Nchw, bias, 0.5, 3),
        // 5x5 on an FFT-friendly grid.
        Case::new("mb1ic3ih12oc4kh5ph2", Layout::Nchw, none, 0.0, 4),
        // 1x1: x is the GEMM's matrix.
        Case::new("mb2ic16ih5oc8kh1ph0", Layout::Nchw, fused, 1.0, 5),
        Case::new("mb1ic12ih6oc10kh1ph0", Layout::Nhwc, none, 0.0, 6),
        // Strided, and strided 1x1.
        Case::new("mb1ic4ih11oc5kh3sh2ph1", Layout::Nhwc, none, 0.0, 7),
        Case::new("mb1ic8ih9oc6kh1sh2ph0", Layout::Nchw, none, 0.0, 8),
        // Depthwise, both layouts, and grouped.
        Case::new("mb1g8ic8ih9oc8kh3ph1", Layout::Nchw, bias, 0.0, 9),
        // A batch of 2, which the batch-split algorithms take.
        Case::new("mb2g8ic8ih9oc8kh3ph1", Layout::Nhwc, bias, 0.0, 9),
        Case::new("mb1g16ic16ih7oc16kh3sh2ph1", Layout::Nhwc, fused, 1.0, 10),
        Case::new("mb1g2ic8ih6oc6kh3ph1", Layout::Nchw, none, 0.0, 11),
        // Large enough for im2col's and the GEMM engine's threads to share the work.
        Case::new("mb1ic16ih16oc32kh3ph1", Layout::Nchw, fused, 1.0, 12),
        Case::new("mb1ic16ih16oc32kh3ph1", Layout::Nhwc, none, 0.0, 13),
        // Dilated: kn2row and the space-to-batch algorithms (sub-images run by Winograd and
        // the implicit GEMM), with and without the epilogue, both layouts.
        Case::new("mb1ic4ih13oc5kh3ph2dh1", Layout::Nchw, fused, 1.0, 14),
        Case::new("mb2ic3ih12oc4kh3ph4dh3", Layout::Nhwc, bias, 0.5, 15),
    ]
}

fn accuracy(name: &str) -> Accuracy {
    conv::find(name).unwrap().accuracy()
}

/// The sweeps of every case, algorithm and entry point on one handle.
fn conv_sweeps(h: &Handle, cases: &[Case], tag: &str, t: &mut Totals, covered: &mut Vec<String>) {
    for (i, c) in cases.iter().enumerate() {
        let y0 = || c.prior.clone();
        let checker = |acc: Accuracy| {
            move |y: &Vec<f32>, what: &str| assert_accurate(&c.p, y, &c.reference, acc, what)
        };
        for a in conv::algorithms() {
            if a.check(&c.p).is_err() {
                continue;
            }
            let name = a.name();
            if !covered.iter().any(|n| n == name) {
                covered.push(name.to_string());
            }
            let what = format!("{tag} case {i} {name}");
            sweep(
                &what,
                t,
                false,
                || {
                    let mut y = y0();
                    let w = Weights::Plain(&c.w);
                    h.conv_forward_ex(&c.p, name, &c.x, w, &mut y, &c.args(), None)?;
                    Ok(y)
                },
                checker(a.accuracy()),
            );
            sweep(
                &format!("{what} prepared"),
                t,
                false,
                || {
                    let pw = h.prepare_weights(&c.p, name, &c.w)?;
                    let mut y = y0();
                    let w = Weights::Prepared(&pw);
                    h.conv_forward_ex(&c.p, name, &c.x, w, &mut y, &c.args(), None)?;
                    Ok(y)
                },
                checker(a.accuracy()),
            );
        }
        let check_auto = |(y, algo): &(Vec<f32>, &'static str), what: &str| {
            assert_accurate(&c.p, y, &c.reference, accuracy(algo), what)
        };
        sweep(
            &format!("{tag} case {i} auto"),
            t,
            true,
            || {
                let mut y = y0();
                let w = Weights::Plain(&c.w);
                let r = h.conv_forward_auto(&c.p, &c.x, w, &mut y, &c.args())?;
                Ok((y, r.algo))
            },
            check_auto,
        );
        // Transformed weights pin their algorithm: no chain to fall back along.
        // The preparation is part of the call swept: the heuristic's first choice may need
        // no workspace at all (depthwise), the copy of its weights is still an allocation.
        let first = h.get_conv_algorithms(&c.p).unwrap()[0].algo;
        sweep(
            &format!("{tag} case {i} auto prepared for {first}"),
            t,
            false,
            || {
                let pw = h.prepare_weights(&c.p, first, &c.w)?;
                let mut y = y0();
                let w = Weights::Prepared(&pw);
                let r = h.conv_forward_auto(&c.p, &c.x, w, &mut y, &c.args())?;
                Ok((y, r.algo))
            },
            check_auto,
        );
    }
}

/// bf16 tensors (x and w of bf16, y of f32: integer data, so the sums are exact and the f32
/// reference holds): each algorithm that reads them in place (`direct`, `depthwise`, no
/// workspace, their own stages and widened filters allocated in the call), and the automatic
/// call, whose other candidates widen into the workspace.
fn reduced_sweeps(h: &Handle, cases: &[Case], tag: &str, t: &mut Totals) {
    use autodnn::op::{ConvForward, ConvFwdInputs, TensorBuf};
    use autodnn::DataType;
    for (i, c) in cases.iter().enumerate() {
        let p = ConvProblem::forward(
            c.p.x().with_dtype(DataType::Bf16),
            c.p.w().with_dtype(DataType::Bf16),
            *c.p.conv(),
            *c.p.y(),
        )
        .unwrap()
        .with_epilogue(*c.p.epilogue());
        let x = TensorBuf::from_f32(&c.x, DataType::Bf16, "x").unwrap();
        let w = TensorBuf::from_f32(&c.w, DataType::Bf16, "w").unwrap();
        let inputs = ConvFwdInputs {
            x: x.view(),
            w: Weights::Tensor(w.view()),
            epilogue: c.args(),
        };
        for name in ["direct", "depthwise"] {
            if conv::find(name).unwrap().check(&p).is_err() {
                continue;
            }
            sweep(
                &format!("{tag} case {i} {name} bf16"),
                t,
                false,
                || {
                    let mut y = c.prior.clone();
                    h.run_algorithm::<ConvForward>(
                        &p,
                        name,
                        &inputs,
                        &mut TensorMut::F32(&mut y),
                        None,
                    )?;
                    Ok(y)
                },
                |y: &Vec<f32>, what: &str| {
                    assert_accurate(&c.p, y, &c.reference, Accuracy::Exact, what)
                },
            );
        }
        sweep(
            &format!("{tag} case {i} auto bf16"),
            t,
            true,
            || {
                let mut y = c.prior.clone();
                let r = h.run::<ConvForward>(&p, &inputs, &mut TensorMut::F32(&mut y))?;
                Ok((y, r.algo))
            },
            |(y, algo): &(Vec<f32>, &'static str), what: &str| {
                assert_accurate(&c.p, y, &c.reference, accuracy(algo), what)
            },
        );
    }
}

/// One backward operation's sweeps: every accepting algorithm of its registry, then the
/// automatic call through the fallback chain. `call(algo)` runs it (`None`: automatic) and
/// returns the output with the algorithm that ran; the output is checked against `want`
/// (the oracle with beta's share of the prior output added).
fn backward_sweeps<O>(
    what: &str,
    p: &ConvProblem,
    want: &[f64],
    t: &mut Totals,
    covered: &mut Vec<String>,
    call: impl Fn(Option<&str>) -> autodnn::Result<(Vec<f32>, &'static str)>,
) where
    O: Registered<Problem = ConvProblem>,
{
    let check = |(out, algo): &(Vec<f32>, &'static str), label: &str| {
        let a = O::algorithms().iter().find(|a| a.name() == *algo).unwrap();
        let max = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let tol = a.accuracy().integer_tolerance() * max;
        for (o, (&got, &w)) in out.iter().zip(want).enumerate() {
            let d = (f64::from(got) - w).abs();
            assert!(
                d <= tol,
                "{label} ({algo}): element {o} is {got}, the oracle {w}"
            );
        }
    };
    // A call that allocates nothing (direct without workspace, beta = 0) has nothing to fail.
    let swept = |label: String, algo: Option<&str>, t: &mut Totals| {
        FailNth::count();
        let out = call(algo).unwrap_or_else(|e| panic!("{label}: {e}"));
        check(&out, &label);
        if FailNth::allocations() > 0 {
            sweep(&label, t, algo.is_none(), || call(algo), check);
        }
    };
    for a in O::algorithms() {
        if a.check(p).is_err() {
            continue;
        }
        let key = format!("{} {}", O::NAME, a.name());
        if !covered.contains(&key) {
            covered.push(key);
        }
        swept(format!("{what} {}", a.name()), Some(a.name()), t);
    }
    swept(format!("{what} auto"), None, t);
}

/// The backward operations (data, filter, bias) of every case's geometry, each algorithm and
/// the automatic call, with beta = the case's (the prior output read back).
fn backward_all(h: &Handle, cases: &[Case], tag: &str, t: &mut Totals, covered: &mut Vec<String>) {
    for (i, c) in cases.iter().enumerate() {
        // The forward case's geometry (backward operations fuse no epilogue).
        let fwd = c.p.with_epilogue(Epilogue::default());
        let beta = c.beta;
        let scaled = |g: Vec<f64>, prior: &[f32]| -> Vec<f64> {
            g.iter()
                .zip(prior)
                .map(|(&g, &o)| g + f64::from(beta) * f64::from(o))
                .collect()
        };
        let dy = int_data(fwd.y().span(), 40 + i as u64);
        let what = format!("{tag} case {i}");

        let p = fwd.for_op(OpKind::ConvBackwardData).unwrap();
        let prior = int_data(p.x().span(), 50 + i as u64);
        let want = scaled(
            reference::conv_backward_data(&p, &dy, &c.w).unwrap(),
            &prior,
        );
        backward_sweeps::<ConvBackwardData>(&format!("{what} bwd_d"), &p, &want, t, covered, |a| {
            let mut dx = prior.clone();
            let inputs = ConvBwdDataInputs::new(&dy, &c.w).scaled(1.0, beta);
            let mut out = TensorMut::F32(&mut dx);
            let algo = match a {
                Some(a) => {
                    h.run_algorithm::<ConvBackwardData>(&p, a, &inputs, &mut out, None)?;
                    a
                }
                None => h.run::<ConvBackwardData>(&p, &inputs, &mut out)?.algo,
            };
            Ok((dx, find::<ConvBackwardData>(algo)))
        });

        let p = fwd.for_op(OpKind::ConvBackwardFilter).unwrap();
        let prior = int_data(p.w().elements(), 60 + i as u64);
        let want = scaled(
            reference::conv_backward_filter(&p, &c.x, &dy).unwrap(),
            &prior,
        );
        backward_sweeps::<ConvBackwardFilter>(
            &format!("{what} bwd_w"),
            &p,
            &want,
            t,
            covered,
            |a| {
                let mut dw = prior.clone();
                let inputs = ConvBwdFilterInputs::new(&c.x, &dy).scaled(1.0, beta);
                let mut out = TensorMut::F32(&mut dw);
                let algo = match a {
                    Some(a) => {
                        h.run_algorithm::<ConvBackwardFilter>(&p, a, &inputs, &mut out, None)?;
                        a
                    }
                    None => h.run::<ConvBackwardFilter>(&p, &inputs, &mut out)?.algo,
                };
                Ok((dw, find::<ConvBackwardFilter>(algo)))
            },
        );

        let p = fwd.for_op(OpKind::ConvBackwardBias).unwrap();
        let prior = int_data(p.w().k(), 70 + i as u64);
        let want = scaled(reference::conv_backward_bias(&p, &dy).unwrap(), &prior);
        backward_sweeps::<ConvBackwardBias>(&format!("{what} bwd_b"), &p, &want, t, covered, |a| {
            let mut db = prior.clone();
            let inputs = ConvBwdBiasInputs::new(&dy).scaled(1.0, beta);
            let mut out = TensorMut::F32(&mut db);
            let algo = match a {
                Some(a) => {
                    h.run_algorithm::<ConvBackwardBias>(&p, a, &inputs, &mut out, None)?;
                    a
                }
                None => h.run::<ConvBackwardBias>(&p, &inputs, &mut out)?.algo,
            };
            Ok((db, find::<ConvBackwardBias>(algo)))
        });
    }
}

/// The registered name `name` of operation `O`, with the registry's lifetime.
fn find<O: Registered>(name: &str) -> &'static str {
    O::algorithms()
        .iter()
        .find(|a| a.name() == name)
        .map(|a| a.name())
        .unwrap()
}

/// Handle::gemm (transposed A, padded C) and a strided batch, on integer data: exact. On
/// several threads, products long enough for every thread to take blocks of C (`split`),
/// and with `large` one big enough for the threads to share packed B panels.
fn gemm_sweeps(h: &Handle, tag: &str, t: &mut Totals, split: bool, large: bool) {
    let (m, n, k) = (130usize, 120usize, 100usize);
    let a = int_data(m * k, 100);
    let b = int_data(k * n, 101);
    // op(A) = Aᵀ with A stored k × m row-major; B row-major; C m × n with row stride n + 3.
    let d = GemmDesc::new(m, n, k)
        .with_transa(true)
        .with_a_strides(m, 1)
        .with_b_strides(n, 1)
        .with_c_strides(n + 3, 1);
    let c0 = int_data(m * (n + 3), 102);
    let mut want = c0.iter().map(|&v| v as f64).collect::<Vec<_>>();
    reference::gemm(
        m,
        n,
        k,
        1.0,
        &a,
        [1, m],
        &b,
        [n, 1],
        2.0,
        &mut want,
        [n + 3, 1],
    )
    .unwrap();
    let exact = |c: &Vec<f32>, what: &str| {
        for i in 0..m {
            for j in 0..n {
                let o = i * (n + 3) + j;
                assert_eq!(c[o] as f64, want[o], "{what}: C[{i},{j}]");
            }
        }
    };
    sweep(
        &format!("{tag} gemm"),
        t,
        false,
        || {
            let mut c = c0.clone();
            h.gemm(&d, 1.0, &a, &b, 2.0, &mut c)?;
            Ok(c)
        },
        exact,
    );

    let (m, n, k, batch) = (9usize, 11usize, 13usize, 5usize);
    let a = int_data(m * k * batch, 103);
    let b = int_data(k * n, 104);
    let d = GemmDesc::new(m, n, k)
        .with_a_strides(k, 1)
        .with_b_strides(n, 1)
        .with_c_strides(n, 1);
    let mut want = vec![0.0f64; m * n * batch];
    for i in 0..batch {
        let (ai, ci) = (&a[i * m * k..], &mut want[i * m * n..]);
        reference::gemm(m, n, k, 1.0, ai, [k, 1], &b, [n, 1], 0.0, ci, [n, 1]).unwrap();
    }
    sweep(
        &format!("{tag} gemm_strided_batched"),
        t,
        false,
        || {
            let mut c = vec![f32::NAN; m * n * batch];
            h.gemm_strided_batched(&d, 1.0, &a, m * k, &b, 0, 0.0, &mut c, m * n, batch)?;
            Ok(c)
        },
        |c: &Vec<f32>, what: &str| {
            for (o, (&got, &w)) in c.iter().zip(&want).enumerate() {
                assert_eq!(got as f64, w, "{what}: element {o}");
            }
        },
    );

    // C and A column-major, B row-major: B is packed (its depth is not unit-stride).
    let sizes = [
        (split, (400usize, 390usize, 380usize)),
        (large, (780, 770, 760)),
    ];
    for (m, n, k) in sizes.into_iter().filter(|s| s.0).map(|s| s.1) {
        let a = int_data(m * k, 105);
        let b = int_data(k * n, 106);
        let d = GemmDesc::new(m, n, k)
            .with_a_strides(1, m)
            .with_b_strides(n, 1)
            .with_c_strides(1, m);
        let mut want = vec![0.0f64; m * n];
        reference::gemm(m, n, k, 1.0, &a, [1, m], &b, [n, 1], 0.0, &mut want, [1, m]).unwrap();
        sweep(
            &format!("{tag} gemm {m}x{n}x{k}"),
            t,
            false,
            || {
                let mut c = vec![f32::NAN; m * n];
                h.gemm(&d, 1.0, &a, &b, 0.0, &mut c)?;
                Ok(c)
            },
            |c: &Vec<f32>, what: &str| {
                let bad = c.iter().zip(&want).position(|(&g, &w)| g as f64 != w);
                assert!(bad.is_none(), "{what}: element {bad:?} differs");
            },
        );
    }
}

/// max|got − want| ≤ 1e-5 · max(max|want|, 1).
fn near(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |a, &v| a.max(v.abs()));
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 * scale,
            "{what}: [{i}] = {g}, the reference gives {w}"
        );
    }
}

/// The other operators (`autodnn::layers`) in both layouts: each one that allocates has every
/// allocation failed in turn; the pointwise ones allocate nothing, so that an injector armed
/// from the first allocation on changes nothing.
fn layer_sweeps(h: &Handle, tag: &str, t: &mut Totals) {
    use autodnn::layers::norm::{BatchNorm, LayerNorm, ParamGrads, SavedStats, SavedStatsMut};
    use autodnn::layers::pool::{PoolDesc, PoolMode};
    use autodnn::layers::softmax::{SoftmaxAlgorithm, SoftmaxMode};
    use autodnn::layers::tensor_ops::{OpTensorDesc, OpTensorOp, ReduceOp};
    use autodnn::layers::Blend;
    use autodnn::reference as rf;
    use autodnn::{DataType, Padding, TensorDesc};
    let bl = Blend::default();
    for layout in [Layout::Nchw, Layout::Nhwc] {
        let f32d = |dims| TensorDesc::new(DataType::F32, layout, dims).unwrap();
        let d = f32d([2, 16, 9, 7]);
        let (c, n) = (16, d.span());
        let x = int_data(n, 11);
        let dy = int_data(n, 12);
        let (g, b) = (int_data(c, 13), int_data(c, 14));
        let what = |op: &str| format!("{tag} {layout:?} {op}");
        // Batch norm: training (saved statistics), backward (statistics recomputed), inference.
        let bn = BatchNorm::new(1e-3).unwrap();
        let r = rf::norm::batch_norm_training(bl, &d, &x, &d, &[], &g, &b, 1e-3).unwrap();
        let train = || {
            let (mut y, mut m, mut i) = (vec![0.0; n], vec![0.0; c], vec![0.0; c]);
            let saved = SavedStatsMut {
                mean: &mut m,
                inv_std: &mut i,
            };
            h.batch_norm_forward_training(&bn, bl, &d, &x, &d, &mut y, &g, &b, None, Some(saved))?;
            Ok((y, m, i))
        };
        sweep(
            &what("batch norm training"),
            t,
            false,
            train,
            |(y, m, i), l| {
                near(y, &r.y, l);
                near(m, &r.mean, l);
                near(i, &r.inv_std, l);
            },
        );
        let (sm, si): (Vec<f32>, Vec<f32>) = (
            r.mean.iter().map(|&v| v as f32).collect(),
            r.inv_std.iter().map(|&v| v as f32).collect(),
        );
        let zeros = vec![0.0; c];
        let rg = rf::norm::batch_norm_backward(
            bl,
            bl,
            &d,
            &x,
            &d,
            &dy,
            &d,
            (&[], &zeros, &zeros),
            &g,
            &sm,
            &si,
        )
        .unwrap();
        for saved in [false, true] {
            let back = || {
                let (mut dx, mut dg, mut db) = (vec![0.0; n], vec![0.0; c], vec![0.0; c]);
                let grads = ParamGrads {
                    dgamma: &mut dg,
                    dbeta: &mut db,
                };
                let s = saved.then_some(SavedStats {
                    mean: &sm,
                    inv_std: &si,
                });
                h.batch_norm_backward(&bn, bl, bl, &d, &x, &d, &dy, &d, &mut dx, &g, s, grads)?;
                Ok((dx, dg, db))
            };
            let label = what(&format!("batch norm backward (saved {saved})"));
            sweep(&label, t, false, back, |(dx, dg, db), l| {
                near(dx, &rg.dx, l);
                near(dg, &rg.dgamma, l);
                near(db, &rg.dbeta, l);
            });
        }
        let var: Vec<f32> = b.iter().map(|v| v.abs()).collect();
        let ri =
            rf::norm::batch_norm_inference(bl, &d, &x, &d, &[], &g, &b, &g, &var, 1e-3).unwrap();
        let inf = || {
            let mut y = vec![0.0; n];
            h.batch_norm_forward_inference(&bn, bl, &d, &x, &d, &mut y, &g, &b, &g, &var)?;
            Ok(y)
        };
        sweep(&what("batch norm inference"), t, false, inf, |y, l| {
            near(y, &ri, l)
        });
        // Layer norm forward and backward.
        let ln = LayerNorm::new(1e-3).unwrap();
        let chw = n / 2;
        let (lg, lb) = (int_data(chw, 15), int_data(chw, 16));
        let rl =
            rf::norm::layer_norm_forward(bl, &d, &x, &d, &[], Some(&lg), Some(&lb), 1e-3).unwrap();
        let lfwd = || {
            let (mut y, mut m, mut i) = (vec![0.0; n], vec![0.0; 2], vec![0.0; 2]);
            let saved = SavedStatsMut {
                mean: &mut m,
                inv_std: &mut i,
            };
            h.layer_norm_forward(
                &ln,
                bl,
                &d,
                &x,
                &d,
                &mut y,
                Some(&lg),
                Some(&lb),
                Some(saved),
            )?;
            Ok((y, m, i))
        };
        sweep(
            &what("layer norm forward"),
            t,
            false,
            lfwd,
            |(y, m, i), l| {
                near(y, &rl.y, l);
                near(m, &rl.mean, l);
                near(i, &rl.rstd, l);
            },
        );
        let (lm, ls): (Vec<f32>, Vec<f32>) = (
            rl.mean.iter().map(|&v| v as f32).collect(),
            rl.rstd.iter().map(|&v| v as f32).collect(),
        );
        let lz = vec![0.0; chw];
        let rlb = rf::norm::layer_norm_backward(
            bl,
            bl,
            &d,
            &x,
            &d,
            &dy,
            &d,
            (&[], &lz, &lz),
            Some(&lg),
            &lm,
            &ls,
        )
        .unwrap();
        let lbwd = || {
            let (mut dx, mut dg, mut db) = (vec![0.0; n], vec![0.0; chw], vec![0.0; chw]);
            let grads = ParamGrads {
                dgamma: &mut dg,
                dbeta: &mut db,
            };
            let saved = SavedStats {
                mean: &lm,
                inv_std: &ls,
            };
            h.layer_norm_backward(
                bl,
                bl,
                &d,
                &x,
                &d,
                &dy,
                &d,
                &mut dx,
                Some(&lg),
                saved,
                Some(grads),
            )?;
            Ok((dx, dg, db))
        };
        sweep(
            &what("layer norm backward"),
            t,
            false,
            lbwd,
            |(dx, dg, db), l| {
                near(dx, &rlb.dx, l);
                near(dg, &rlb.dgamma, l);
                near(db, &rlb.dbeta, l);
            },
        );
        // Pooling, forward and backward of each mode (divisors, scratch).
        for mode in PoolMode::ALL {
            let pd = PoolDesc::new(mode, [3, 3], [2, 2], Padding::symmetric(1, 1)).unwrap();
            let yd = pd.output_desc(&d, layout).unwrap();
            let ry = rf::pool::forward(&pd, bl, &d, &x, &yd, &[]).unwrap();
            let pdy = int_data(yd.span(), 17);
            let rdx = rf::pool::backward(&pd, bl, &d, &x, &yd, &pdy, &d, &[]).unwrap();
            let fwd = || {
                let mut y = vec![0.0; yd.span()];
                h.pooling_forward(&pd, bl, &d, &x, &yd, &mut y)?;
                Ok(y)
            };
            let bwd = || {
                let mut dx = vec![0.0; n];
                h.pooling_backward(&pd, bl, &d, &x, &yd, &pdy, &d, &mut dx)?;
                Ok(dx)
            };
            let name = mode.name();
            run_or_sweep(&what(&format!("pool {name} forward")), t, fwd, &ry);
            run_or_sweep(&what(&format!("pool {name} backward")), t, bwd, &rdx);
            if mode == PoolMode::Max {
                // The training pair: y through the indices (the backward's scratch).
                let ne = yd.elements();
                let pair = || {
                    let (mut y, mut ind) = (vec![0.0; yd.span()], vec![0u32; ne]);
                    h.pooling_forward_with_indices(&pd, bl, &d, &x, &yd, &mut y, &mut ind)?;
                    let mut dx = vec![0.0; n];
                    let one = Blend::default();
                    h.pooling_backward_with_indices(&pd, one, &yd, &pdy, &ind, &d, &mut dx)?;
                    Ok(dx)
                };
                let one = rf::pool::backward(&pd, Blend::default(), &d, &x, &yd, &pdy, &d, &[]);
                run_or_sweep(&what("pool max with indices"), t, pair, &one.unwrap());
            }
        }
        // Softmax over the channels and over the instance, forward and backward.
        for mode in [SoftmaxMode::Channel, SoftmaxMode::Instance] {
            let algo = SoftmaxAlgorithm::Log;
            let ry = rf::softmax::forward(algo, mode, bl, &d, &x, &d, &[]).unwrap();
            let y: Vec<f32> = ry.iter().map(|&v| v as f32).collect();
            let rdx = rf::softmax::backward(algo, mode, bl, &d, &y, &d, &dy, &d, &[]).unwrap();
            let fwd = || {
                let mut out = vec![0.0; n];
                h.softmax_forward(algo, mode, bl, &d, &x, &d, &mut out)?;
                Ok(out)
            };
            let bwd = || {
                let mut dx = vec![0.0; n];
                h.softmax_backward(algo, mode, bl, &d, &y, &d, &dy, &d, &mut dx)?;
                Ok(dx)
            };
            let (f, b) = (
                what(&format!("softmax {mode:?}")),
                what(&format!("softmax {mode:?} backward")),
            );
            run_or_sweep(&f, t, fwd, &ry);
            run_or_sweep(&b, t, bwd, &rdx);
        }
        // Reductions over the image and over the channels.
        for cd in [[2, 16, 1, 1], [2, 1, 9, 7], [1, 1, 1, 1]] {
            let cd = f32d(cd);
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Norm2] {
                let r = rf::tensor_ops::reduce_tensor(op, bl, &d, &x, &cd, &[]).unwrap();
                let call = || {
                    let mut out = vec![0.0; cd.span()];
                    h.reduce_tensor(op, bl, &d, &x, &cd, &mut out)?;
                    Ok(out)
                };
                run_or_sweep(
                    &what(&format!("reduce {} to {cd:?}", op.name())),
                    t,
                    call,
                    &r,
                );
            }
        }
        // The pointwise operators and the transform.
        let act = autodnn::Activation::Gelu;
        let r = rf::activation::forward(act, bl, &d, &x, &d, &[]).unwrap();
        let call = || {
            let mut y = vec![0.0; n];
            h.activation_forward(act, bl, &d, &x, &d, &mut y)?;
            Ok(y)
        };
        allocates_nothing(&what("activation"), call, &r);
        let bd = f32d([1, 16, 1, 1]);
        let r = rf::tensor_ops::add_tensor(bl, &bd, &g, &d, &[]).unwrap();
        let call = || {
            let mut y = vec![0.0; n];
            h.add_tensor(bl, &bd, &g, &d, &mut y)?;
            Ok(y)
        };
        allocates_nothing(&what("add tensor"), call, &r);
        let od = OpTensorDesc::new(OpTensorOp::Mul, 1.0, 2.0, 0.0).unwrap();
        let r = rf::tensor_ops::op_tensor(&od, &d, &x, &bd, &g, &d, &[]).unwrap();
        let call = || {
            let mut y = vec![0.0; n];
            h.op_tensor(&od, &d, &x, &bd, &g, &d, &mut y)?;
            Ok(y)
        };
        allocates_nothing(&what("op tensor"), call, &r);
        let other = f32d([2, 16, 9, 7]);
        let other = if layout == Layout::Nchw {
            TensorDesc::new(DataType::F32, Layout::Nhwc, other.dims()).unwrap()
        } else {
            TensorDesc::new(DataType::F32, Layout::Nchw, other.dims()).unwrap()
        };
        let r = rf::transform::forward(bl, &d, &x, &other, &[]).unwrap();
        let call = || {
            let mut y = vec![0.0; n];
            h.transform_tensor(bl, &d, &x, &other, &mut y)?;
            Ok(y)
        };
        allocates_nothing(&what("transform"), call, &r);
    }
}

/// A call that makes no allocation through the library's allocator: it runs, with the injector
/// armed from the first allocation on, and gives the reference's output.
fn allocates_nothing(
    what: &str,
    mut call: impl FnMut() -> autodnn::Result<Vec<f32>>,
    want: &[f64],
) {
    FailNth::count();
    let y = call().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(FailNth::allocations(), 0, "{what}: allocates");
    near(&y, want, what);
    FailNth::arm(1, true);
    let y = call();
    FailNth::disarm();
    near(&y.unwrap_or_else(|e| panic!("{what}: {e}")), want, what);
}

/// [`sweep`] for a call that allocates on some shapes and thread counts and not on others.
fn run_or_sweep(
    what: &str,
    t: &mut Totals,
    mut call: impl FnMut() -> autodnn::Result<Vec<f32>>,
    want: &[f64],
) {
    FailNth::count();
    call().unwrap_or_else(|e| panic!("{what}: {e}"));
    if FailNth::allocations() == 0 {
        allocates_nothing(what, call, want);
    } else {
        sweep(what, t, false, call, |y, l| near(y, want, l));
    }
}

#[test]
fn every_injected_allocation_failure_ends_in_a_correct_output_or_a_typed_error() {
    let cases = cases();
    let mut all = Totals::default();
    let mut covered = Vec::new();
    for isa in Isa::ALL.into_iter().filter(|i| i.is_available()) {
        for threads in [1, 2] {
            let h = Handle::with_threads(threads).unwrap();
            h.set_isa_cap(isa);
            h.set_policy(Policy::Heuristic);
            let tag = format!("{}x{threads}", isa.name());
            let mut t = Totals::default();
            conv_sweeps(&h, &cases, &tag, &mut t, &mut covered);
            reduced_sweeps(&h, &cases, &tag, &mut t);
            backward_all(&h, &cases, &tag, &mut t, &mut covered);
            let best = isa == Isa::best_available();
            gemm_sweeps(&h, &tag, &mut t, threads > 1, threads > 1 && best);
            layer_sweeps(&h, &tag, &mut t);
            println!(
                "{tag}: {} calls, {} injected failures: {} correct outputs, {} typed errors",
                t.calls, t.injected, t.survived, t.typed
            );
            all.add(&t);
        }
    }
    FailNth::disarm();
    println!(
        "all: {} calls, {} injected failures: {} correct outputs ({:.1}%), {} typed errors \
         ({:.1}%)",
        all.calls,
        all.injected,
        all.survived,
        100.0 * all.survived as f64 / all.injected.max(1) as f64,
        all.typed,
        100.0 * all.typed as f64 / all.injected.max(1) as f64,
    );
    for a in conv::algorithms() {
        assert!(
            covered.iter().any(|n| n == a.name()),
            "no case exercises {}",
            a.name()
        );
    }
    fn all_covered<O: Registered>(covered: &[String]) {
        for a in O::algorithms() {
            let key = format!("{} {}", O::NAME, a.name());
            assert!(covered.contains(&key), "no case exercises {key}");
        }
    }
    all_covered::<ConvBackwardData>(&covered);
    all_covered::<ConvBackwardFilter>(&covered);
    all_covered::<ConvBackwardBias>(&covered);
    assert!(all.injected > 0);
    assert_eq!(all.survived + all.typed, all.injected);
}
