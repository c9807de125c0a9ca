//! Plans: selection and execution under arbitrary settings. A small problem (any padding,
//! stride, dilation, groups, layout, epilogue) is planned and run under every policy but the
//! exhaustive one (whose 5 ms per candidate would make a campaign crawl), with arbitrary
//! workspace budgets, caller workspaces, timing limits, determinism, a forced algorithm and
//! injected workspace failures. Whatever the settings, a call ends in the output `direct`
//! computes (within the running algorithm's tolerance) or in a typed error that the
//! settings explain; a plan only lists algorithms the settings allow.

use std::sync::{Mutex, OnceLock};

use autodnn::conv::{self, Accuracy, Epilogue, EpilogueArgs, Weights};
use autodnn::select::{FailAlloc, Policy, Source, TuningCache};
use autodnn::{Activation, ConvProblem, Error, Handle, Layout, ProblemSpec};

use crate::input::{int_data, Bytes};

/// Problems whose direct definition costs more are not run (they are the other harnesses'
/// business); it keeps a race among every algorithm to a millisecond or so.
const MAX_FLOPS: f64 = 1e5;

/// One handle per thread count, re-configured by every input.
fn handles() -> &'static [Mutex<Handle>; 2] {
    static HANDLES: OnceLock<[Mutex<Handle>; 2]> = OnceLock::new();
    HANDLES.get_or_init(|| {
        let h = |t| Mutex::new(Handle::with_threads(t).expect("a handle starts"));
        [h(1), h(2)]
    })
}

/// A problem string of small sizes and arbitrary paddings.
fn problem(b: &mut Bytes<'_>) -> Option<ConvProblem> {
    let g = 1 + b.below(3);
    let ic = g * (1 + b.below(4));
    let oc = g * (1 + b.below(4));
    let (ih, iw) = (1 + b.below(10), 1 + b.below(10));
    let (kh, kw) = (1 + b.below(5), 1 + b.below(5));
    let (sh, sw) = (1 + b.below(3), 1 + b.below(3));
    let (dh, dw) = (b.below(2), b.below(2));
    let pad = |b: &mut Bytes<'_>| b.below(7) as i64 - 1;
    let (ph, pw, pb, pr) = (pad(b), pad(b), pad(b), pad(b));
    let out = |i: usize, k: usize, s: usize, d: usize, lo: i64, hi: i64| {
        let ext = (k as i64 - 1) * (d as i64 + 1) + 1;
        let span = i as i64 + lo + hi - ext;
        (span >= 0).then(|| span / s as i64 + 1)
    };
    let oh = out(ih, kh, sh, dh, ph.max(0), pb)?;
    let ow = out(iw, kw, sw, dw, pw.max(0), pr)?;
    let mb = 1 + b.below(2);
    let text = format!(
        "g{g}mb{mb}ic{ic}ih{ih}iw{iw}oc{oc}oh{oh}ow{ow}kh{kh}kw{kw}sh{sh}sw{sw}dh{dh}dw{dw}\
         ph{}pw{}",
        ph.max(0),
        pw.max(0)
    );
    let spec = ProblemSpec::parse(&text).ok()?;
    let layout = b.pick(&[Layout::Nchw, Layout::Nhwc]);
    let p = spec.to_problem(layout).ok()?;
    let act = b.pick(&[
        Activation::None,
        Activation::Relu,
        Activation::Clip { lo: -2.0, hi: 6.0 },
    ]);
    let epi = Epilogue {
        bias: b.bool(),
        residual: b.bool(),
        act,
    };
    let p = p.with_epilogue(epi);
    (p.flops() <= MAX_FLOPS).then_some(p)
}

/// The settings an input gives the handle; returns what the checks need to know of them.
struct Settings {
    limit: Option<usize>,
    deterministic: bool,
    forced: Option<&'static str>,
    failing: Vec<&'static str>,
}

fn configure(b: &mut Bytes<'_>, h: &mut Handle) -> Settings {
    let names = conv::names();
    h.set_policy(b.pick(&[Policy::Heuristic, Policy::Benchmark, Policy::CachedOnly]));
    let limit = match b.below(4) {
        0 => None,
        1 => Some(0),
        2 => Some(b.size(4096)),
        _ => Some(usize::from(b.u8()) << b.below(24)),
    };
    h.set_workspace_limit(limit);
    let deterministic = b.bool();
    h.set_deterministic(deterministic);
    h.set_max_timed(b.below(10));
    let forced = (b.below(8) == 0).then(|| names[b.below(names.len())]);
    h.set_forced_algo(forced);
    let failing: Vec<&'static str> = match b.below(6) {
        0 => names.to_vec(),
        1 | 2 => names.iter().copied().filter(|_| b.bool()).collect(),
        _ => Vec::new(),
    };
    h.set_fail_alloc(if failing.is_empty() {
        match b.below(4) {
            0 => FailAlloc::Above(b.size(1 << 16)),
            _ => FailAlloc::Never,
        }
    } else {
        FailAlloc::Algorithms(failing.iter().map(|s| s.to_string()).collect())
    });
    if b.below(4) == 0 {
        h.set_tuning_cache(TuningCache::new());
    }
    Settings {
        limit,
        deterministic,
        forced,
        failing,
    }
}

/// Compares over the tensor's elements, as in the other harnesses: within
/// [`Accuracy::tolerance`].
fn compare(p: &ConvProblem, y: &[f32], want: &[f32], acc: Accuracy, what: &str) {
    let [n, k, oh, ow] = p.y().dims();
    let (mut diff, mut max) = (0.0f64, 0.0f64);
    for b in 0..n {
        for c in 0..k {
            for i in 0..oh {
                for j in 0..ow {
                    let o = p.y().offset(b, c, i, j);
                    let (got, exp) = (f64::from(y[o]), f64::from(want[o]));
                    assert!(!got.is_nan(), "{what}: y[{b},{c},{i},{j}] is NaN ({p:?})");
                    diff = diff.max((got - exp).abs());
                    max = max.max(exp.abs());
                }
            }
        }
    }
    // Integer data in [-4, 4] (`int_data`).
    let depth = p.c_per_group() * p.w().r() * p.w().s();
    let tol = acc.tolerance(depth, 4.0, 4.0, max);
    assert!(
        diff <= tol,
        "{what}: max|y - direct| = {diff} > {tol} ({p:?})"
    );
}

/// A call may only fail when injected failures cover the algorithms it could run (every
/// plan holds `direct`, which needs no workspace and no determinism waiver): then it ends in
/// [`Error::AllFailed`].
fn assert_explained(e: &Error, s: &Settings, handle_workspace: bool, what: &str) {
    assert!(
        matches!(e, Error::AllFailed { .. }) && !s.failing.is_empty() && handle_workspace,
        "{what}: {e:?} under {:?} / {:?} / {}",
        s.limit,
        s.forced,
        s.deterministic
    );
}

/// Plans and runs one small problem under the settings the bytes give.
pub fn plans(data: &[u8]) {
    let mut b = Bytes::new(data);
    let threads = b.below(2);
    let Some(p) = problem(&mut b) else { return };
    let mut h = handles()[threads].lock().unwrap_or_else(|e| e.into_inner());
    let s = configure(&mut b, &mut h);
    let seed = b.u64();
    let x = int_data(p.x().span(), seed);
    let w = int_data(p.w().elements(), seed ^ 1);
    let bias = int_data(p.w().k(), seed ^ 2);
    let z = int_data(p.y().span(), seed ^ 3);
    let (alpha, beta) = (b.pick(&[1.0, 2.0, -1.0]), b.pick(&[0.0, 1.0, 0.5]));
    let mut args = EpilogueArgs::new(alpha, beta);
    if p.epilogue().bias {
        args = args.with_bias(&bias);
    }
    if p.epilogue().residual {
        args = args.with_residual(&z);
    }
    // The oracle: direct on a clean handle, y's prior contents the same z.
    static ORACLE: OnceLock<Handle> = OnceLock::new();
    let oracle = ORACLE.get_or_init(|| Handle::with_threads(1).expect("a handle starts"));
    let mut want = z.clone();
    oracle
        .conv_forward_ex(&p, "direct", &x, Weights::Plain(&w), &mut want, &args, None)
        .unwrap_or_else(|e| panic!("direct fails: {e} ({p:?})"));

    // `direct` is always eligible, so planning never fails.
    let plan = h
        .plan_conv(&p, &x, &w, &args)
        .unwrap_or_else(|e| panic!("planning failed: {e:?} ({p:?})"));
    assert!(plan.chain().contains(&"direct"), "direct ends every chain");
    for name in plan.chain() {
        let a = conv::find(name).expect("planned algorithms are registered");
        assert!(a.check(&p).is_ok(), "{name} planned but declines {p:?}");
        if let Some(limit) = s.limit {
            assert!(a.workspace_bytes(&p) <= limit, "{name} over the budget");
        }
        if s.deterministic {
            assert!(a.deterministic(), "{name} is not deterministic");
        }
    }
    if let Some(f) = s.forced {
        if plan.chain().contains(&f) {
            assert_eq!(plan.algo(), f, "an eligible forced algorithm leads");
            assert_eq!(plan.source, Source::Forced);
        }
    }
    if plan.source == Source::Heuristic {
        assert_eq!(plan.timed, 0);
    }

    // Through the plan, in the handle's workspace or a caller's of arbitrary size.
    let mut ws = vec![0u8; b.size(1 << 14).min(1 << 20)];
    let caller = b.bool();
    let mut y = z.clone();
    let run = h.conv_forward_plan(
        &plan,
        &x,
        Weights::Plain(&w),
        &mut y,
        &args,
        caller.then_some(&mut ws[..]),
    );
    match run {
        Ok(report) => {
            assert!(plan.chain().contains(&report.algo));
            assert!(
                caller || !s.failing.contains(&report.algo),
                "{} ran",
                report.algo
            );
            let acc = conv::find(report.algo).expect("registered").accuracy();
            compare(&p, &y, &want, acc, report.algo);
        }
        Err(e) => assert_explained(&e, &s, !caller, "conv_forward_plan"),
    }
    // And selecting and running in one call.
    let mut y = z.clone();
    match h.conv_forward_auto(&p, &x, Weights::Plain(&w), &mut y, &args) {
        Ok(report) => {
            let acc = conv::find(report.algo).expect("registered").accuracy();
            compare(&p, &y, &want, acc, report.algo);
        }
        Err(e) => assert_explained(&e, &s, true, "conv_forward_auto"),
    }
}
