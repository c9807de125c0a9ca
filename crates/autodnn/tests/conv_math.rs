//! Convolution under the math mode: with `MathMode::AllowBf16`, the algorithms whose products
//! run on the GEMM engine (explicit and implicit GEMM, forward and backward) round their f32
//! operands to bf16 where the bf16 units are chosen, within the f32 summation bound of the
//! rounded operands; `winograd_2x2` (forward and backward data) rounds its transformed
//! operands, within its bound under the mode; every other algorithm gives exactly its strict
//! result. Integer data stay
//! exact everywhere. Tuning-cache entries are keyed by the math mode.

mod common;

use autodnn::conv::{Accuracy, EpilogueArgs, Weights};
use autodnn::cpu::Isa;
use autodnn::gemm::kernel_name_for;
use autodnn::op::{
    Algorithm, ConvBackwardData, ConvBackwardFilter, ConvBwdDataInputs, ConvBwdFilterInputs,
    ConvForward, ConvFwdInputs, Registered, TensorMut,
};
use autodnn::select::Policy;
use autodnn::{
    bf16, reference, Bf16Units, ConvProblem, DataType, Handle, Layout, MathMode, OpKind,
    ProblemSpec,
};
use common::{int_data, Rng};

fn handle(math: MathMode) -> Handle {
    let h = Handle::with_threads(1).unwrap();
    h.set_math_mode(math);
    h.set_bf16_units(Bf16Units::Always);
    h
}

/// Reals in [-1, 1] on a grid of 2^-20: mostly not bf16 values.
fn real_data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    (0..len)
        .map(|_| r.range(-(1 << 20), 1 << 20) as f32 / (1 << 20) as f32)
        .collect()
}

fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// Whether f32 products under allow_bf16 with the units forced run on the bf16 units here.
fn bf16_units_run() -> bool {
    kernel_name_for(
        Isa::best_available(),
        DataType::F32,
        MathMode::AllowBf16,
        Bf16Units::Always,
    )
    .contains("bf16")
}

/// Whether `algo` runs its products on the GEMM engine.
fn on_gemm_engine(algo: &str) -> bool {
    algo.starts_with("gemm") || algo.starts_with("implicit_gemm")
}

struct Case {
    op: OpKind,
    p: ConvProblem,
    /// The two operands (x and w, dy and w, or x and dy).
    a: Vec<f32>,
    b: Vec<f32>,
}

impl Case {
    fn new(op: OpKind, fwd: &ConvProblem, seed: u64, int: bool) -> Case {
        let p = fwd.for_op(op).unwrap();
        let (la, lb) = match op {
            OpKind::ConvForward => (p.x().span(), p.w().elements()),
            OpKind::ConvBackwardData => (p.y().span(), p.w().elements()),
            _ => (p.x().span(), p.y().span()),
        };
        let data = |len, s| {
            if int {
                int_data(len, s)
            } else {
                real_data(len, s)
            }
        };
        Case {
            op,
            a: data(la, seed),
            b: data(lb, seed ^ 0x5a5a),
            p,
        }
    }

    fn algorithms(&self) -> Vec<&'static str> {
        fn accepted<O: Registered<Problem = ConvProblem>>(p: &ConvProblem) -> Vec<&'static str> {
            O::algorithms()
                .iter()
                .filter(|a| a.check(p).is_ok())
                .map(|a| a.name())
                .collect()
        }
        match self.op {
            OpKind::ConvForward => accepted::<ConvForward>(&self.p),
            OpKind::ConvBackwardData => accepted::<ConvBackwardData>(&self.p),
            _ => accepted::<ConvBackwardFilter>(&self.p),
        }
    }

    /// `algo`'s bound when it rounds inside under allow_bf16 (its bound under the mode
    /// differs from its strict one), else `None`.
    fn rounds_inside(&self, algo: &str) -> Option<Accuracy> {
        fn of<O: Registered<Problem = ConvProblem>>(
            p: &ConvProblem,
            algo: &str,
        ) -> Option<Accuracy> {
            let a = O::algorithms().iter().find(|a| a.name() == algo)?;
            let under = a.accuracy_under(p, MathMode::AllowBf16);
            (under != a.accuracy()).then_some(under)
        }
        match self.op {
            OpKind::ConvForward => of::<ConvForward>(&self.p, algo),
            OpKind::ConvBackwardData => of::<ConvBackwardData>(&self.p, algo),
            _ => of::<ConvBackwardFilter>(&self.p, algo),
        }
    }

    /// Products per output (the reduction's depth).
    fn depth(&self) -> usize {
        match self.op {
            OpKind::ConvForward => self.p.c_per_group() * self.p.w().r() * self.p.w().s(),
            OpKind::ConvBackwardData => self.p.k_per_group() * self.p.w().r() * self.p.w().s(),
            _ => self.p.x().n() * self.p.y().h() * self.p.y().w(),
        }
    }

    fn out_len(&self) -> usize {
        match self.op {
            OpKind::ConvForward => self.p.y().span(),
            OpKind::ConvBackwardData => self.p.x().span(),
            _ => self.p.w().elements(),
        }
    }

    /// The f64 reference from operands `a`, `b`.
    fn reference(&self, a: &[f32], b: &[f32]) -> Vec<f64> {
        match self.op {
            OpKind::ConvForward => reference::conv_forward(&self.p, a, b),
            OpKind::ConvBackwardData => reference::conv_backward_data(&self.p, a, b),
            _ => reference::conv_backward_filter(&self.p, a, b),
        }
        .unwrap()
    }

    fn run(&self, h: &Handle, algo: &str) -> Vec<f32> {
        let mut out = vec![f32::NAN; self.out_len()];
        let o = &mut TensorMut::F32(&mut out);
        match self.op {
            OpKind::ConvForward => {
                let inputs =
                    ConvFwdInputs::new(&self.a, Weights::Plain(&self.b), EpilogueArgs::default());
                h.run_algorithm::<ConvForward>(&self.p, algo, &inputs, o, None)
            }
            OpKind::ConvBackwardData => {
                let inputs = ConvBwdDataInputs::new(&self.a, &self.b);
                h.run_algorithm::<ConvBackwardData>(&self.p, algo, &inputs, o, None)
            }
            _ => {
                let inputs = ConvBwdFilterInputs::new(&self.a, &self.b);
                h.run_algorithm::<ConvBackwardFilter>(&self.p, algo, &inputs, o, None)
            }
        }
        .unwrap_or_else(|e| panic!("{:?} {algo}: {e}", self.op));
        out
    }
}

fn problem(s: &str) -> ConvProblem {
    ProblemSpec::parse(s)
        .unwrap()
        .to_problem(Layout::Nchw)
        .unwrap()
}

const OPS: [OpKind; 3] = [
    OpKind::ConvForward,
    OpKind::ConvBackwardData,
    OpKind::ConvBackwardFilter,
];

/// Max |got − want| over max |want|.
fn normwise(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    got.iter()
        .zip(want)
        .fold(0.0f64, |m, (&g, &w)| m.max((g as f64 - w).abs()))
        / scale
}

#[test]
fn allow_bf16_rounds_the_gemm_engine_algorithms_and_no_other() {
    let bf16_units = bf16_units_run();
    eprintln!("bf16 units in use under allow_bf16 + always: {bf16_units}");
    let (strict, allow) = (handle(MathMode::Strict), handle(MathMode::AllowBf16));
    for (i, s) in [
        "mb2ic32ih9iw9oc40oh9ow9kh3kw3ph1pw1",
        "mb1ic64ih6iw6oc48oh3ow3kh1kw1sh2sw2",
        "mb2g2ic32ih8iw8oc32oh8ow8kh3kw3ph1pw1",
    ]
    .into_iter()
    .enumerate()
    {
        let fwd = problem(s);
        for op in OPS {
            let c = Case::new(op, &fwd, 7 + i as u64, false);
            let want = c.reference(&rounded(&c.a), &rounded(&c.b));
            let exact = c.reference(&c.a, &c.b);
            let mut rounded_algos = 0;
            let mut inside = 0;
            for algo in c.algorithms() {
                let (s_out, a_out) = (c.run(&strict, algo), c.run(&allow, algo));
                if let Some(acc) = c.rounds_inside(algo) {
                    // Rounded inside (Winograd's transformed operands in bf16 pairs): within
                    // its bound under the mode, and visibly not the strict result.
                    let tol = acc.tolerance(c.depth(), 1.0, 1.0, 0.0);
                    let err = a_out
                        .iter()
                        .zip(&exact)
                        .fold(0.0f64, |m, (&g, &w)| m.max((g as f64 - w).abs()));
                    assert!(err <= tol, "{s} {op:?} {algo}: {err:e} > {tol:e}");
                    let away = normwise(&a_out, &exact);
                    assert!(away > 1e-4, "{s} {op:?} {algo}: {away:e}, not rounded");
                    inside += 1;
                } else if bf16_units && on_gemm_engine(algo) {
                    // The products of the rounded operands, summed in f32.
                    let e = normwise(&a_out, &want);
                    assert!(
                        e <= 1e-5,
                        "{s} {op:?} {algo}: {e:e} from the rounded product"
                    );
                    // ... and visibly not the strict result.
                    let away = normwise(&a_out, &exact);
                    assert!(away > 1e-4, "{s} {op:?} {algo}: {away:e}, not rounded");
                    rounded_algos += 1;
                } else {
                    assert!(
                        s_out
                            .iter()
                            .zip(&a_out)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{s} {op:?} {algo}: allow_bf16 changed an algorithm off the GEMM engine"
                    );
                }
            }
            if bf16_units {
                assert!(
                    rounded_algos > 0,
                    "{s} {op:?}: no GEMM-engine algorithm ran"
                );
            }
            // winograd_2x2 takes the 3x3 problems forward and backward (data).
            let winograd = s.contains("kh3") && op != OpKind::ConvBackwardFilter;
            assert_eq!(inside > 0, winograd, "{s} {op:?}: {inside} rounded inside");
        }
    }
}

#[test]
fn integer_data_stay_exact_under_allow_bf16() {
    let allow = handle(MathMode::AllowBf16);
    let fwd = problem("mb2ic24ih7iw7oc20oh7ow7kh3kw3ph1pw1");
    for op in OPS {
        let c = Case::new(op, &fwd, 11, true);
        let want = c.reference(&c.a, &c.b);
        for algo in c.algorithms().into_iter().filter(|a| on_gemm_engine(a)) {
            let got = c.run(&allow, algo);
            for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g as f64, w, "{op:?} {algo} element {j}");
            }
        }
    }
}

#[test]
fn prepared_weights_follow_the_math_mode() {
    let p = problem("mb2ic32ih9iw9oc40oh9ow9kh3kw3ph1pw1");
    let x = real_data(p.x().span(), 3);
    let w = real_data(p.w().elements(), 4);
    let want = reference::conv_forward(&p, &rounded(&x), &rounded(&w)).unwrap();
    let exact = reference::conv_forward(&p, &x, &w).unwrap();
    let allow = handle(MathMode::AllowBf16);
    let bf16_units = bf16_units_run();
    for algo in ["gemm", "implicit_gemm"] {
        let prepared = allow.prepare_weights(&p, algo, &w).unwrap();
        let mut y = vec![f32::NAN; p.y().span()];
        allow
            .conv_forward_ex(
                &p,
                algo,
                &x,
                Weights::Prepared(&prepared),
                &mut y,
                &EpilogueArgs::default(),
                None,
            )
            .unwrap();
        if bf16_units {
            let e = normwise(&y, &want);
            assert!(e <= 1e-5, "{algo} prepared: {e:e}");
        } else {
            let e = normwise(&y, &exact);
            assert!(e <= 1e-5, "{algo} prepared strict: {e:e}");
        }
        // The same as the plain filter's call, bit for bit (the same pair panels).
        let mut plain = vec![f32::NAN; p.y().span()];
        allow
            .conv_forward_ex(
                &p,
                algo,
                &x,
                Weights::Plain(&w),
                &mut plain,
                &EpilogueArgs::default(),
                None,
            )
            .unwrap();
        assert!(
            y.iter()
                .zip(&plain)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{algo}"
        );
        // Prepared under allow_bf16 (the filter possibly rounded): strict calls refuse them.
        assert!(prepared.is_bf16());
        let strict = allow.clone();
        strict.set_math_mode(MathMode::Strict);
        let e = strict
            .conv_forward_ex(
                &p,
                algo,
                &x,
                Weights::Prepared(&prepared),
                &mut y,
                &EpilogueArgs::default(),
                None,
            )
            .unwrap_err();
        assert!(
            matches!(&e, autodnn::Error::BadParam { field, .. } if field == "prepared"),
            "{algo}: {e:?}"
        );
    }
}

#[test]
fn tuning_cache_entries_are_keyed_by_the_math_mode() {
    let p = problem("mb1ic16ih8iw8oc16oh8ow8kh3kw3ph1pw1");
    let x = int_data(p.x().span(), 1);
    let w = int_data(p.w().elements(), 2);
    let allow = handle(MathMode::AllowBf16);
    allow.set_policy(Policy::Benchmark);
    // A clone shares the tuning cache and has its own settings.
    let strict = allow.clone();
    strict.set_math_mode(MathMode::Strict);
    let epi = EpilogueArgs::default();
    let first = allow.plan_conv(&p, &x, &w, &epi).unwrap();
    assert!(!first.cache_hit);
    let plain = strict.plan_conv(&p, &x, &w, &epi).unwrap();
    assert!(
        !plain.cache_hit,
        "a strict plan must not reuse the allow_bf16 entry"
    );
    let again = allow.plan_conv(&p, &x, &w, &epi).unwrap();
    assert!(again.cache_hit, "the allow_bf16 entry is found again");
    let cache = allow.tuning_cache();
    let mut maths: Vec<String> = cache
        .entries()
        .iter()
        .map(|(k, _)| k.math.clone())
        .collect();
    maths.sort();
    assert_eq!(maths, ["allow_bf16+always", "strict"]);
}
