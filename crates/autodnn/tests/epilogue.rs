//! Fused epilogues (y = act(alpha · conv + bias + beta · z)) and prepared weights, on every
//! algorithm that accepts the problem, against the f64 reference.

mod common;

use autodnn::conv::{self, Accuracy, Activation, Epilogue, EpilogueArgs, Weights};
use autodnn::{reference, ConvProblem, Error, Handle};
use common::{assert_accurate, int_data, random_problem, Rng};

struct Case {
    p: ConvProblem,
    x: Vec<f32>,
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
    z: Option<Vec<f32>>,
    prior: Vec<f32>,
    alpha: f32,
    beta: f32,
}

fn case(rng: &mut Rng, seed: u64, act: Activation, real: bool) -> Case {
    let epi = Epilogue {
        bias: rng.range(0, 1) == 1,
        residual: rng.range(0, 1) == 1,
        act,
    };
    let p = random_problem(rng).with_epilogue(epi);
    let data = |len: usize, s: u64| -> Vec<f32> {
        if real {
            let mut r = Rng(s);
            (0..len)
                .map(|_| r.range(-1000, 1000) as f32 / 1000.0)
                .collect()
        } else {
            int_data(len, s)
        }
    };
    let alphas = [0.0, 1.0, 2.0];
    Case {
        x: data(p.x().span(), seed),
        w: data(p.w().elements(), seed + 1),
        bias: epi.bias.then(|| data(p.w().k(), seed + 2)),
        z: epi.residual.then(|| data(p.y().span(), seed + 3)),
        prior: data(p.y().span(), seed + 4),
        alpha: rng.pick(&alphas),
        beta: rng.pick(&alphas),
        p,
    }
}

fn args(c: &Case) -> EpilogueArgs<'_> {
    let mut a = EpilogueArgs::new(c.alpha, c.beta);
    if let Some(b) = &c.bias {
        a = a.with_bias(b);
    }
    if let Some(z) = &c.z {
        a = a.with_residual(z);
    }
    a
}

fn expected(c: &Case) -> Vec<f64> {
    let z = c.z.as_deref().unwrap_or(&c.prior);
    reference::conv_forward_fused(
        &c.p,
        &c.x,
        &c.w,
        c.alpha as f64,
        c.beta as f64,
        c.bias.as_deref(),
        Some(z),
    )
    .unwrap()
}

/// The accuracy class of the algorithm a `run_all` label names ("NAME" or "NAME prepared").
fn accuracy(label: &str) -> Accuracy {
    conv::find(label.split(' ').next().unwrap())
        .unwrap()
        .accuracy()
}

/// y after running `algo` on the case with `weights`, starting from `start`.
fn run_with(h: &Handle, c: &Case, algo: &str, weights: Weights<'_>, start: &[f32]) -> Vec<f32> {
    let mut y = start.to_vec();
    h.conv_forward_ex(&c.p, algo, &c.x, weights, &mut y, &args(c), None)
        .unwrap();
    y
}

/// Runs every accepting algorithm, plain and with prepared weights; y starts as the prior
/// contents (or NaN when beta = 0 and nothing may be read).
fn run_all(h: &Handle, c: &Case, mut check: impl FnMut(&str, &[f32])) {
    for a in conv::algorithms() {
        if a.check(&c.p).is_err() {
            continue;
        }
        // y's prior contents are read only when beta != 0 and there is no residual: otherwise
        // start from NaN, which any read would propagate.
        let start = if c.beta == 0.0 || c.z.is_some() {
            vec![f32::NAN; c.p.y().span()]
        } else {
            c.prior.clone()
        };
        let y = run_with(h, c, a.name(), Weights::Plain(&c.w), &start);
        check(a.name(), &y);
        let prepared = h.prepare_weights(&c.p, a.name(), &c.w).unwrap();
        assert_eq!(prepared.algo(), a.name());
        let y = run_with(h, c, a.name(), Weights::Prepared(&prepared), &start);
        check(&format!("{} prepared", a.name()), &y);
    }
}

#[test]
fn integer_epilogues_are_exact() {
    // relu, clip and residuals keep integers exact.
    let h = Handle::with_threads(2).unwrap();
    let mut rng = Rng(11);
    for i in 0..150 {
        let act = rng.pick(&[
            Activation::None,
            Activation::Relu,
            Activation::Clip { lo: -3.0, hi: 5.0 },
        ]);
        let c = case(&mut rng, i, act, false);
        let r = expected(&c);
        run_all(&h, &c, |name, y| {
            assert_accurate(
                &c.p,
                y,
                &r,
                accuracy(name),
                &format!("case {i} {name} {:?}", c.p.epilogue()),
            );
        });
    }
}

/// Output channels in whole 16- and 32-channel blocks and a tail (the vector blocks of
/// Winograd's output transform and the GEMM's panels; `random_problem` draws at most 12 per
/// group), on images whose tiles overhang or not, both layouts, every accepting algorithm:
/// integer epilogues exact, with and without y's prior contents.
#[test]
fn wide_channel_epilogues_are_exact() {
    // Every instruction set (Winograd applies the common epilogue in its vector family's
    // registers), on 2 threads.
    for (isa, _, h) in common::isa_handles()
        .into_iter()
        .filter(|(_, t, _)| *t == 2)
    {
        wide_channel_epilogues_on(&h, &format!("{isa:?}"));
    }
}

fn wide_channel_epilogues_on(h: &Handle, isa: &str) {
    let mut i = 0;
    for text in [
        "mb1ic16ih12oc32oh12kh3ph1",
        "mb2ic20ih13oc40oh13kh3ph1",
        "mb1ic8ih7oc48oh7kh3ph1",
        "mb1ic24ih9oc32oh9kh1ph0",
    ] {
        let spec = autodnn::ProblemSpec::parse(text).unwrap();
        for layout in [autodnn::Layout::Nchw, autodnn::Layout::Nhwc] {
            for (bias, residual, act, alpha, beta) in [
                (true, false, Activation::Relu, 1.0, 0.0),
                (true, false, Activation::None, 2.0, 0.0),
                (
                    false,
                    false,
                    Activation::Clip { lo: -3.0, hi: 5.0 },
                    1.0,
                    0.0,
                ),
                (true, true, Activation::Relu, 1.0, 1.0),
                (true, false, Activation::Relu, 1.0, 2.0),
            ] {
                let epi = Epilogue {
                    bias,
                    residual,
                    act,
                };
                let p = spec.to_problem(layout).unwrap().with_epilogue(epi);
                let seed = 1000 + i;
                i += 10;
                let c = Case {
                    x: int_data(p.x().span(), seed),
                    w: int_data(p.w().elements(), seed + 1),
                    bias: bias.then(|| int_data(p.w().k(), seed + 2)),
                    z: residual.then(|| int_data(p.y().span(), seed + 3)),
                    prior: int_data(p.y().span(), seed + 4),
                    alpha,
                    beta,
                    p,
                };
                let r = expected(&c);
                let mut winograd = 0;
                run_all(h, &c, |name, y| {
                    winograd += usize::from(name.starts_with("winograd"));
                    assert_accurate(
                        &c.p,
                        y,
                        &r,
                        accuracy(name),
                        &format!(
                            "{isa} {text} {layout:?} {name} {epi:?} alpha {alpha} beta {beta}"
                        ),
                    );
                });
                if spec.kh == 3 {
                    assert!(winograd >= 6, "{text}: Winograd ran {winograd} times");
                }
            }
        }
    }
}

#[test]
fn transcendental_activations_within_tolerance() {
    let h = Handle::with_threads(1).unwrap();
    let mut rng = Rng(12);
    let acts = [
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Gelu,
        Activation::Silu,
    ];
    for i in 0..80 {
        let act = acts[i as usize % acts.len()];
        let c = case(&mut rng, 100 + i, act, true);
        let r = expected(&c);
        let terms = (c.p.c_per_group() * c.p.w().r() * c.p.w().s()) as f64;
        run_all(&h, &c, |name, y| {
            // The convolution's rounding (scaled by alpha, and the activation's slope <= 1.1)
            // plus the activation's own few ulps.
            let tol = match accuracy(name) {
                Accuracy::Exact => 4.0,
                Accuracy::Normwise { c, .. } => 2.2 * c,
            } * terms
                * f32::EPSILON as f64
                + 1e-6;
            let [n, k, oh, ow] = c.p.y().dims();
            for b in 0..n {
                for ch in 0..k {
                    for a in 0..oh {
                        for bb in 0..ow {
                            let o = c.p.y().offset(b, ch, a, bb);
                            let err = (y[o] as f64 - r[o]).abs();
                            assert!(
                                err <= tol * (1.0 + r[o].abs()),
                                "case {i} {name} {act:?}: {} vs {}",
                                y[o],
                                r[o]
                            );
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn epilogue_values_must_match_the_problem() {
    let h = Handle::with_threads(1).unwrap();
    let mut rng = Rng(3);
    let p = random_problem(&mut rng);
    let (x, w) = (int_data(p.x().span(), 1), int_data(p.w().elements(), 2));
    let mut y = vec![0.0; p.y().span()];
    let bias = vec![1.0; p.w().k()];
    let z = vec![1.0; p.y().span()];
    let field = |e: Error| match e {
        Error::BadParam { field, .. } | Error::BufferTooSmall { field, .. } => field,
        other => panic!("unexpected {other:?}"),
    };
    // The field named by the error of a plain `direct` call.
    let rejected = |p: &ConvProblem, args: EpilogueArgs<'_>| {
        let mut y = vec![0.0; p.y().span()];
        let e = h
            .conv_forward_ex(p, "direct", &x, Weights::Plain(&w), &mut y, &args, None)
            .unwrap_err();
        field(e)
    };
    // Bias given, problem has none; residual given, problem has none.
    assert_eq!(
        rejected(&p, EpilogueArgs::new(1.0, 0.0).with_bias(&bias)),
        "bias"
    );
    assert_eq!(
        rejected(&p, EpilogueArgs::new(1.0, 1.0).with_residual(&z)),
        "residual"
    );
    // Problem wants them, none given; or too short.
    let pb = p.with_epilogue(Epilogue {
        bias: true,
        residual: true,
        act: Activation::Relu,
    });
    let e = h.conv_forward(&pb, "direct", &x, &w, &mut y).unwrap_err();
    assert_eq!(field(e), "bias");
    let short = vec![0.0; p.w().k() - 1];
    assert_eq!(
        rejected(
            &pb,
            EpilogueArgs::new(1.0, 1.0)
                .with_bias(&short)
                .with_residual(&z)
        ),
        "bias"
    );
    assert_eq!(
        rejected(&pb, EpilogueArgs::new(1.0, 1.0).with_bias(&bias)),
        "residual"
    );
    assert_eq!(rejected(&p, EpilogueArgs::new(f32::NAN, 0.0)), "alpha");
    // Prepared weights are bound to their problem and algorithm.
    let prepared = h.prepare_weights(&p, "direct", &w).unwrap();
    assert_eq!(prepared.bytes(), p.w().elements() * 4);
    let other = loop {
        let q = random_problem(&mut rng);
        if q != p {
            break q;
        }
    };
    let mut y2 = vec![0.0; other.y().span().max(p.y().span())];
    let x2 = vec![0.0; other.x().span()];
    let e = h
        .conv_forward_ex(
            &other,
            "direct",
            &x2,
            Weights::Prepared(&prepared),
            &mut y2,
            &EpilogueArgs::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(field(e), "prepared.problem");
}

#[test]
fn activation_names_parse() {
    assert_eq!(
        Activation::parse("relu6").unwrap(),
        Activation::Clip { lo: 0.0, hi: 6.0 }
    );
    assert_eq!(
        Activation::parse("clip:-1:2.5").unwrap(),
        Activation::Clip { lo: -1.0, hi: 2.5 }
    );
    for name in Activation::NAMES {
        let a = Activation::parse(name).unwrap();
        assert_eq!(Activation::parse(&a.name()).unwrap(), a, "{name}");
    }
    for bad in ["", "relu7", "clip:2:1", "clip:a:b", "clip:nan:1"] {
        assert!(
            matches!(Activation::parse(bad), Err(Error::BadParam { ref field, .. }) if field == "act"),
            "{bad}"
        );
    }
    assert_eq!(Activation::Gelu.apply(0.0), 0.0);
    assert!((Activation::Gelu.apply(1.0) - 0.841_344_7).abs() < 1e-6);
    assert!((Activation::Silu.apply(1.0) - 0.731_058_6).abs() < 1e-6);
}
