//! What every valid problem must satisfy in the backward operations (data, filter, bias):
//! each registry's checks, workspace queries, cost features and heuristic ranking, and, for
//! small problems, every accepting algorithm against that operation's `direct`, and `direct`
//! against the f64 reference.

use autodnn::op::{
    Accuracy, Algorithm, ConvBackwardBias, ConvBackwardData, ConvBackwardFilter, ConvBwdBiasInputs,
    ConvBwdDataInputs, ConvBwdFilterInputs, Registered, TensorMut,
};
use autodnn::{reference, ConvProblem, Error, Handle, OpKind};

use crate::input::int_data;

/// The backward operations, as the fuzz input picks one to run.
pub const OPS: [OpKind; 3] = [
    OpKind::ConvBackwardData,
    OpKind::ConvBackwardFilter,
    OpKind::ConvBackwardBias,
];

/// The queries of all three backward operations of the forward problem `p` (with an
/// epilogue, which no backward operation takes, turning it is refused naming the field).
pub fn queries(p: &ConvProblem, h: &Handle) {
    for op in OPS {
        let q = match p.for_op(op) {
            Ok(q) => q,
            Err(e) => {
                assert!(!p.epilogue().is_none(), "{op:?}: {e} ({p:?})");
                assert!(
                    matches!(&e, Error::BadParam { field, .. } if field == "epilogue"),
                    "{e:?}"
                );
                continue;
            }
        };
        match op {
            OpKind::ConvBackwardData => drop(queries_of::<ConvBackwardData>(&q, h)),
            OpKind::ConvBackwardFilter => drop(queries_of::<ConvBackwardFilter>(&q, h)),
            _ => drop(queries_of::<ConvBackwardBias>(&q, h)),
        }
    }
}

/// Checks the queries of every algorithm of `O` on `p` and returns the accepting ones.
fn queries_of<O>(p: &ConvProblem, h: &Handle) -> Vec<&'static str>
where
    O: Registered<Problem = ConvProblem>,
{
    let mut accepted = Vec::new();
    for a in O::algorithms() {
        let name = a.name();
        match a.check(p) {
            Ok(()) => {
                let ws = a.workspace_bytes(p);
                assert_eq!(h.workspace_size::<O>(p, name), Ok(ws), "{} {name}", O::NAME);
                for (i, f) in a.cost_features(p).iter().enumerate() {
                    assert!(
                        f.is_finite() && *f >= 0.0,
                        "{} {name}: cost feature {i} is {f}",
                        O::NAME
                    );
                }
                accepted.push(name);
            }
            Err(reason) => {
                assert!(
                    !reason.is_empty(),
                    "{} {name} declined without a reason",
                    O::NAME
                );
                let e = h.workspace_size::<O>(p, name).unwrap_err();
                assert!(matches!(e, Error::Declined { .. }), "{e:?}");
            }
        }
    }
    assert!(
        accepted.contains(&"direct") || p.x().dtype() != autodnn::DataType::F32,
        "{}: direct must accept every valid f32 problem: {p:?}",
        O::NAME
    );
    let ranked = h.get::<O>(p).expect("the heuristic ranks");
    let mut names: Vec<&str> = ranked.iter().map(|r| r.algo).collect();
    names.sort_unstable();
    let mut want = accepted.clone();
    want.sort_unstable();
    assert_eq!(
        names,
        want,
        "{}: the ranking lists each accepting algorithm once",
        O::NAME
    );
    for r in &ranked {
        assert!(
            r.predicted_ms.is_finite() && r.predicted_ms >= 0.0,
            "{} {}: predicted {} ms",
            O::NAME,
            r.algo,
            r.predicted_ms
        );
    }
    accepted
}

/// One call of operation `O`: `run(algo, out, workspace)`.
type RunFn<'a> = dyn Fn(&str, &mut [f32], Option<&mut [u8]>) -> autodnn::Result<()> + 'a;

/// Runs every accepting algorithm of the backward operation `op` of the small f32 forward
/// problem `fwd` (no epilogue) on integer data: `direct` against the f64 reference, the
/// others against `direct`; with `scaled`, alpha = 2 and beta = 1 onto integer prior output,
/// else beta = 0 onto NaN (never read). Below `full_flops`, also in a caller-owned workspace
/// of exactly the reported size, and one byte less is refused.
pub fn run_all(fwd: &ConvProblem, op: OpKind, h: &Handle, seed: u64, scaled: bool, full: bool) {
    let p = fwd.for_op(op).expect("no epilogue");
    let x = int_data(p.x().span(), seed);
    let w = int_data(p.w().elements(), seed ^ 0x5555);
    let dy = int_data(p.y().span(), seed ^ 0xaaaa);
    let (alpha, beta) = if scaled { (2.0, 1.0) } else { (1.0, 0.0) };
    let (grad, len) = match op {
        OpKind::ConvBackwardData => (reference::conv_backward_data(&p, &dy, &w), p.x().span()),
        OpKind::ConvBackwardFilter => (
            reference::conv_backward_filter(&p, &x, &dy),
            p.w().elements(),
        ),
        _ => (reference::conv_backward_bias(&p, &dy), p.w().k()),
    };
    let grad = grad.expect("the reference runs");
    let prior = if scaled {
        int_data(len, seed ^ 0x3333)
    } else {
        vec![f32::NAN; len]
    };
    let oracle: Vec<f64> = grad
        .iter()
        .zip(&prior)
        .map(|(&g, &o)| {
            let old = if scaled { f64::from(o) } else { 0.0 };
            f64::from(alpha) * g + f64::from(beta) * old
        })
        .collect();
    let offsets = out_offsets(&p, op);
    let run: Box<RunFn<'_>> = match op {
        OpKind::ConvBackwardData => Box::new(|a, out, ws| {
            let inputs = ConvBwdDataInputs::new(&dy, &w).scaled(alpha, beta);
            h.run_algorithm::<ConvBackwardData>(&p, a, &inputs, &mut TensorMut::F32(out), ws)
        }),
        OpKind::ConvBackwardFilter => Box::new(|a, out, ws| {
            let inputs = ConvBwdFilterInputs::new(&x, &dy).scaled(alpha, beta);
            h.run_algorithm::<ConvBackwardFilter>(&p, a, &inputs, &mut TensorMut::F32(out), ws)
        }),
        _ => Box::new(|a, out, ws| {
            let inputs = ConvBwdBiasInputs::new(&dy).scaled(alpha, beta);
            h.run_algorithm::<ConvBackwardBias>(&p, a, &inputs, &mut TensorMut::F32(out), ws)
        }),
    };
    let once = |name: &str, ws: Option<&mut [u8]>| -> Vec<f32> {
        let mut out = prior.clone();
        run(name, &mut out, ws)
            .unwrap_or_else(|e| panic!("{op:?} {name} failed on an accepted problem: {e} ({p:?})"));
        out
    };
    let direct = once("direct", None);
    for &o in &offsets {
        assert!(
            f64::from(direct[o]) == oracle[o],
            "{op:?} direct: element {o} is {}, the f64 reference {} ({p:?})",
            direct[o],
            oracle[o]
        );
    }
    let algos: Vec<(&'static str, Accuracy, usize)> = match op {
        OpKind::ConvBackwardData => accepting::<ConvBackwardData>(&p),
        OpKind::ConvBackwardFilter => accepting::<ConvBackwardFilter>(&p),
        _ => accepting::<ConvBackwardBias>(&p),
    };
    for (name, acc, need) in algos {
        if name == "direct" {
            continue;
        }
        let got = once(name, None);
        compare(&p, op, &got, &direct, &offsets, acc, alpha, name);
        if full {
            let mut ws = vec![0u8; need];
            let got = once(name, Some(&mut ws));
            compare(&p, op, &got, &direct, &offsets, acc, alpha, name);
            if need > 0 {
                let mut ws = vec![0u8; need - 1];
                let mut out = prior.clone();
                let e = run(name, &mut out, Some(&mut ws)).unwrap_err();
                assert!(matches!(e, Error::WorkspaceTooSmall { .. }), "{e:?}");
            }
        }
    }
}

/// Name, accuracy and workspace of every algorithm of `O` accepting `p`.
fn accepting<O>(p: &ConvProblem) -> Vec<(&'static str, Accuracy, usize)>
where
    O: Registered<Problem = ConvProblem>,
{
    O::algorithms()
        .iter()
        .filter(|a| a.check(p).is_ok())
        .map(|a| (a.name(), a.accuracy(), a.workspace_bytes(p)))
        .collect()
}

/// The offsets of the output's elements: dx like x, dw like w, db 0..K.
fn out_offsets(p: &ConvProblem, op: OpKind) -> Vec<usize> {
    let mut v = Vec::new();
    match op {
        OpKind::ConvBackwardData => {
            let [n, c, h, w] = p.x().dims();
            for b in 0..n {
                for ci in 0..c {
                    for i in 0..h {
                        for j in 0..w {
                            v.push(p.x().offset(b, ci, i, j));
                        }
                    }
                }
            }
        }
        OpKind::ConvBackwardFilter => {
            let [k, c, r, s] = p.w().dims();
            for ki in 0..k {
                for ci in 0..c {
                    for u in 0..r {
                        for t in 0..s {
                            v.push(p.w().offset(ki, ci, u, t));
                        }
                    }
                }
            }
        }
        _ => v.extend(0..p.w().k()),
    }
    v
}

/// The products summed into one element of `op`'s output: K/g·R·S for dx, N·OH·OW for dw
/// and db.
fn depth(p: &ConvProblem, op: OpKind) -> usize {
    let [n, _, oh, ow] = p.y().dims();
    match op {
        OpKind::ConvBackwardData => (p.w().k() / p.groups()) * p.w().r() * p.w().s(),
        _ => n * oh * ow,
    }
}

/// `got` against `direct` at the output's elements: equal for exact algorithms, within the
/// documented bound otherwise ([`Accuracy::tolerance`] for the integer data in [-4, 4],
/// scaled by `alpha`).
#[allow(clippy::too_many_arguments)]
fn compare(
    p: &ConvProblem,
    op: OpKind,
    got: &[f32],
    direct: &[f32],
    offsets: &[usize],
    acc: Accuracy,
    alpha: f32,
    name: &str,
) {
    let max = offsets
        .iter()
        .map(|&o| f64::from(direct[o]).abs())
        .fold(0.0f64, f64::max);
    let tol = acc.tolerance(depth(p, op), 4.0 * f64::from(alpha), 4.0, max);
    for &o in offsets {
        let d = (f64::from(got[o]) - f64::from(direct[o])).abs();
        assert!(
            d <= tol,
            "{op:?} {name}: element {o} is {}, direct gives {} (tolerance {tol}) ({p:?})",
            got[o],
            direct[o]
        );
    }
}
