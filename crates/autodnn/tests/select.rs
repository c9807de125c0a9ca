//! Algorithm selection: the heuristic ranking, measured selection, the tuning cache and its
//! file, policies, the workspace budget and the fallback chain.
//!
//! The registry may hold a single algorithm, so the machinery is also exercised over lists of
//! test algorithms ([`Fake`]): each wraps the registry's last algorithm (which accepts every
//! problem with no workspace) and adds a name, a workspace size, a delay that makes it slower,
//! an acceptance rule, a determinism flag or a failure (optionally after scribbling on y), and
//! records the workspace it received.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use autodnn::conv::{
    self, Accuracy, AlgoWeights, ConvAlgorithm, EpilogueArgs, ExecContext, Weights,
};
use autodnn::op::{ConvForward, ConvFwdInputs, TensorMut};
use autodnn::select::heuristic::{AlgoFit, Fit};
use autodnn::select::{
    cache, CacheEntry, CacheKey, CostModel, FailAlloc, PerfStatus, Policy, RunReport, Source,
    TuningCache,
};
use autodnn::{reference, ConvProblem, Error, ErrorKind, Handle, Layout, ProblemSpec};
use common::{assert_exact, int_data, random_problem, Rng};

/// A test algorithm wrapping the registry's last (zero-workspace, accept-everything) one.
struct Fake {
    name: &'static str,
    ws: usize,
    delay: Duration,
    /// Added to the first run only (a one-time cost: fresh memory, cold caches).
    first_delay: Duration,
    deterministic: bool,
    accept: fn(&ConvProblem) -> Result<(), String>,
    fail: Option<fn() -> Error>,
    /// Fill y with this before failing.
    scribble: Option<f32>,
    max_ws_seen: AtomicUsize,
    runs: AtomicUsize,
}

fn accept_all(_: &ConvProblem) -> Result<(), String> {
    Ok(())
}

fn accept_3x3(p: &ConvProblem) -> Result<(), String> {
    if p.w().r() == 3 && p.w().s() == 3 {
        Ok(())
    } else {
        Err(format!(
            "needs a 3x3 kernel, got {}x{}",
            p.w().r(),
            p.w().s()
        ))
    }
}

fn accept_stride1(p: &ConvProblem) -> Result<(), String> {
    if p.conv().stride() == [1, 1] {
        Ok(())
    } else {
        Err("needs stride 1".into())
    }
}

impl Fake {
    fn new(name: &'static str, ws: usize, delay_ms: f64) -> Fake {
        Fake {
            name,
            ws,
            delay: Duration::from_secs_f64(delay_ms / 1e3),
            first_delay: Duration::ZERO,
            deterministic: true,
            accept: accept_all,
            fail: None,
            scribble: None,
            max_ws_seen: AtomicUsize::new(0),
            runs: AtomicUsize::new(0),
        }
    }
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
    fn max_ws(&self) -> usize {
        self.max_ws_seen.load(Ordering::SeqCst)
    }
}

fn base() -> &'static dyn ConvAlgorithm {
    *conv::algorithms().last().unwrap()
}

impl ConvAlgorithm for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, p: &ConvProblem) -> Result<(), String> {
        (self.accept)(p)
    }
    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        self.ws
    }
    fn deterministic(&self) -> bool {
        self.deterministic
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        workspace: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> autodnn::Result<()> {
        if self.runs.fetch_add(1, Ordering::SeqCst) == 0 && !self.first_delay.is_zero() {
            std::thread::sleep(self.first_delay);
        }
        self.max_ws_seen
            .fetch_max(workspace.len(), Ordering::SeqCst);
        if workspace.len() < self.ws {
            return Err(Error::WorkspaceTooSmall {
                algo: self.name.into(),
                needed: self.ws,
                got: workspace.len(),
            });
        }
        workspace.fill(0xAB);
        if let Some(f) = self.fail {
            if let Some(v) = self.scribble {
                y.fill(v);
            }
            return Err(f());
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        base().run(ctx, p, x, w, y, &mut [], epi)
    }
}

/// A cost model predicting `ms[i]` for `names[i]` on this handle's machine.
fn model_for(h: &Handle, entries: &[(&str, f64)]) -> CostModel {
    let m = h.machine();
    let algorithms = entries
        .iter()
        .map(|(n, ms)| {
            (
                n.to_string(),
                AlgoFit {
                    coef: vec![*ms, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                    samples: 1,
                    median_rel_err: 0.0,
                    max_rel_err: 0.0,
                },
            )
        })
        .collect();
    CostModel::new(vec![Fit {
        cpu: m.cpu,
        isa: m.isa,
        threads: m.threads,
        library_version: autodnn::VERSION.into(),
        algorithms,
    }])
}

fn problem(s: &str) -> ConvProblem {
    ProblemSpec::parse(s)
        .unwrap()
        .to_problem(Layout::Nchw)
        .unwrap()
}

struct Data {
    x: Vec<f32>,
    w: Vec<f32>,
    reference: Vec<f64>,
}

/// The forward inputs of `d` with the epilogue values `epi`.
fn inputs<'a>(d: &'a Data, epi: EpilogueArgs<'a>) -> ConvFwdInputs<'a> {
    ConvFwdInputs::new(&d.x, Weights::Plain(&d.w), epi)
}

fn data(p: &ConvProblem, seed: u64) -> Data {
    let x = int_data(p.x().span(), seed);
    let w = int_data(p.w().elements(), seed + 1);
    let reference = reference::conv_forward(p, &x, &w).unwrap();
    Data { x, w, reference }
}

/// An automatic call with plain weights and the default epilogue: over `algos`, or over the
/// registry through the public call when `None`; y starts as `fill`.
fn auto_call(
    h: &Handle,
    algos: Option<&[&dyn ConvAlgorithm]>,
    p: &ConvProblem,
    x: &[f32],
    w: &[f32],
    fill: f32,
) -> (autodnn::Result<RunReport>, Vec<f32>) {
    let mut y = vec![fill; p.y().span()];
    let epi = EpilogueArgs::default();
    let r = match algos {
        Some(algos) => h.conv_forward_auto_among(algos, p, x, Weights::Plain(w), &mut y, &epi),
        None => h.conv_forward_auto(p, x, Weights::Plain(w), &mut y, &epi),
    };
    (r, y)
}

/// A successful call over `algos`, y starting as NaN.
fn run_auto(
    h: &Handle,
    algos: &[&dyn ConvAlgorithm],
    p: &ConvProblem,
    d: &Data,
) -> (RunReport, Vec<f32>) {
    let (r, y) = auto_call(h, Some(algos), p, &d.x, &d.w, f32::NAN);
    (r.unwrap(), y)
}

/// The error of a call over `algos`.
fn auto_err(
    h: &Handle,
    algos: &[&dyn ConvAlgorithm],
    p: &ConvProblem,
    x: &[f32],
    w: &[f32],
) -> Error {
    auto_call(h, Some(algos), p, x, w, 0.0).0.unwrap_err()
}

/// A successful call over the registry, y starting as `fill`.
fn run_public(h: &Handle, p: &ConvProblem, d: &Data, fill: f32) -> (RunReport, Vec<f32>) {
    let (r, y) = auto_call(h, None, p, &d.x, &d.w, fill);
    (r.unwrap(), y)
}

/// Checks y against the reference to the tolerance of the algorithm that ran.
fn assert_right(p: &ConvProblem, y: &[f32], d: &Data, accuracy: Accuracy, what: &str) {
    match accuracy {
        Accuracy::Exact => {
            assert_exact(p, y, &d.reference, what);
        }
        acc => {
            let max = d
                .reference
                .iter()
                .fold(0.0f64, |m, v| m.max(v.abs()))
                .max(1e-30);
            let err = y
                .iter()
                .zip(&d.reference)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0f64, f64::max);
            assert!(err / max <= acc.integer_tolerance(), "{what}: error {err}");
        }
    }
}

fn temp_path(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "autodnn-select-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("tuning.json")
}

/// A test handle whose cost model predicts the entries (see [`model_for`]).
fn modelled_handle(entries: &[(&str, f64)]) -> Handle {
    let h = handle();
    h.set_cost_model(model_for(&h, entries));
    h
}

/// [`modelled_handle`] under `policy`.
fn handle_with(policy: Policy, entries: &[(&str, f64)]) -> Handle {
    let h = modelled_handle(entries);
    h.set_policy(policy);
    h
}

fn handle() -> Handle {
    let h = Handle::with_threads(1).unwrap();
    h.set_fail_alloc(FailAlloc::Never);
    h.set_forced_algo(None);
    h.set_log_dispatch(false);
    h
}

const SMALL: &str = "mb1ic4ih8oc4kh3ph1";

#[test]
fn handle_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Handle>();
}

#[test]
fn ranking_holds_exactly_the_accepting_algorithms() {
    let h = handle();
    let a = Fake {
        accept: accept_3x3,
        ..Fake::new("only_3x3", 100, 0.0)
    };
    let b = Fake {
        accept: accept_stride1,
        ..Fake::new("only_stride1", 10, 0.0)
    };
    let mut lists: Vec<Vec<&dyn ConvAlgorithm>> = vec![conv::algorithms().to_vec()];
    let mut with_fakes: Vec<&dyn ConvAlgorithm> = vec![&a, &b];
    with_fakes.extend_from_slice(conv::algorithms());
    lists.push(with_fakes);
    let mut rng = Rng(0x5e1ec7);
    for case in 0..150 {
        let p = random_problem(&mut rng);
        for list in &lists {
            let ranked = h.get_among::<ConvForward>(list, &p).unwrap();
            let got: BTreeSet<&str> = ranked.iter().map(|r| r.algo).collect();
            let want: BTreeSet<&str> = list
                .iter()
                .filter(|a| a.check(&p).is_ok())
                .map(|a| a.name())
                .collect();
            assert_eq!(got, want, "case {case}");
            assert_eq!(ranked.len(), want.len(), "case {case}: duplicates");
            // Sorted by prediction, except that a near-tie may put less workspace first.
            let tie = 1.0 + autodnn::select::heuristic::PREDICTION_TIE;
            assert!(ranked
                .windows(2)
                .all(|w| w[0].predicted_ms <= w[1].predicted_ms
                    || (w[0].predicted_ms <= w[1].predicted_ms * tie
                        && w[0].workspace_bytes < w[1].workspace_bytes)));
            for r in &ranked {
                let alg = list.iter().find(|a| a.name() == r.algo).unwrap();
                assert_eq!(r.workspace_bytes, alg.workspace_bytes(&p));
                assert!(r.predicted_ms > 0.0 && r.predicted_ms.is_finite());
                assert!(r.eligible);
            }
        }
        // The public call ranks the registry.
        let public = h.get_conv_algorithms(&p).unwrap();
        let names: BTreeSet<&str> = public.iter().map(|r| r.algo).collect();
        let want: BTreeSet<&str> = conv::algorithms()
            .iter()
            .filter(|a| a.check(&p).is_ok())
            .map(|a| a.name())
            .collect();
        assert_eq!(names, want);
    }
}

#[test]
fn heuristic_follows_the_cost_model_and_never_times() {
    let h = handle_with(Policy::Heuristic, &[("fast", 1.0), ("slow", 2.0)]);
    let fast = Fake::new("fast", 1000, 0.0);
    let slow = Fake::new("slow", 0, 0.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&slow, &fast];
    let p = problem(SMALL);
    let d = data(&p, 1);
    let ranked = h.get_among::<ConvForward>(&algos, &p).unwrap();
    assert_eq!(ranked[0].algo, "fast");
    assert_eq!(ranked[0].predicted_ms, 1.0);
    let (r, y) = run_auto(&h, &algos, &p, &d);
    assert_eq!((r.algo, r.source), ("fast", Source::Heuristic));
    assert_right(&p, &y, &d, Accuracy::Exact, "heuristic");
    assert_eq!(fast.runs(), 1, "only the call itself ran");
    assert_eq!(slow.runs(), 0);
    assert!(h.tuning_cache().is_empty(), "the heuristic stores nothing");
    // Swapping the model swaps the choice: the coefficients are data.
    h.set_cost_model(model_for(&h, &[("fast", 3.0), ("slow", 2.0)]));
    assert_eq!(
        h.get_among::<ConvForward>(&algos, &p).unwrap()[0].algo,
        "slow"
    );
}

#[test]
fn benchmark_times_on_a_miss_then_uses_the_cache() {
    let h = handle_with(Policy::Benchmark, &[("quick", 2.0), ("sluggish", 1.0)]);
    // The model predicts the wrong order (within the race's cutoff); measurement must
    // correct it.
    let a = Fake::new("quick", 4096, 0.0);
    let b = Fake::new("sluggish", 0, 5.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&a, &b];
    let p = problem(SMALL);
    let d = data(&p, 2);
    let (r, y) = run_auto(&h, &algos, &p, &d);
    assert_eq!(
        (r.algo, r.source, r.cache_hit),
        ("quick", Source::Benchmark, false)
    );
    assert_right(&p, &y, &d, Accuracy::Exact, "benchmark");
    let entry = h.tuning_cache();
    assert_eq!(entry.len(), 1);
    let (_, e) = entry.entries()[0];
    assert_eq!(e.records[0].algo, "quick");
    assert_eq!(e.records[0].status, PerfStatus::Ok);
    assert!(e.records.iter().any(|r| r.algo == "sluggish"));
    // Second call: a cache hit that times nothing.
    let runs = (a.runs(), b.runs());
    let (r, _) = run_auto(&h, &algos, &p, &d);
    assert_eq!(
        (r.algo, r.source, r.cache_hit),
        ("quick", Source::Cache, true)
    );
    assert_eq!((a.runs(), b.runs()), (runs.0 + 1, runs.1));
    // cached_only uses the entry too, and on a miss falls back to the heuristic, untimed.
    h.set_policy(Policy::CachedOnly);
    let (r, _) = run_auto(&h, &algos, &p, &d);
    assert_eq!(r.source, Source::Cache);
    let q = problem("mb1ic4ih9oc4kh3ph1");
    let dq = data(&q, 3);
    let before = b.runs();
    let (r, y) = run_auto(&h, &algos, &q, &dq);
    assert_eq!((r.algo, r.source), ("sluggish", Source::Heuristic));
    assert_eq!(b.runs(), before + 1);
    assert_right(&q, &y, &dq, Accuracy::Exact, "cached_only");
    assert_eq!(h.tuning_cache().len(), 1, "cached_only stores nothing");
}

#[test]
fn racing_eliminates_losers_and_exhaustive_times_everything() {
    let h = modelled_handle(&[("a", 1.0), ("b", 1.0), ("c", 1.0)]);
    let a = Fake::new("a", 0, 0.0);
    let b = Fake::new("b", 0, 8.0);
    let c = Fake::new("c", 0, 16.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&a, &b, &c];
    let p = problem(SMALL);
    let d = data(&p, 4);
    let race = h
        .find_among::<ConvForward>(&algos, &p, &inputs(&d, EpilogueArgs::default()))
        .unwrap();
    assert_eq!(race[0].algo, "a");
    assert_eq!(race[0].status, PerfStatus::Ok);
    assert!(
        race[1..].iter().all(|r| r.status == PerfStatus::Eliminated),
        "{race:?}"
    );
    // The slow ones ran their warm-up and at most one round (only under heavy load would the
    // warm-up not eliminate them at once).
    let round = autodnn::select::benchmark::RACE_ROUND_RUNS;
    assert!(b.runs() <= 1 + round && c.runs() <= 1 + round);
    assert!(a.runs() > b.runs());
    let raced = a.runs() + b.runs() + c.runs();
    let runs_before = (a.runs(), b.runs(), c.runs());

    h.set_policy(Policy::Exhaustive);
    let all = h
        .find_among::<ConvForward>(&algos, &p, &inputs(&d, EpilogueArgs::default()))
        .unwrap();
    assert!(all.iter().all(|r| r.status == PerfStatus::Ok), "{all:?}");
    let ms: Vec<f64> = all.iter().map(|r| r.ms.unwrap()).collect();
    assert!(ms.windows(2).all(|w| w[0] <= w[1]), "sorted: {ms:?}");
    assert_eq!(all[0].algo, "a");
    assert!(ms[2] >= 16.0, "c sleeps 16 ms: {ms:?}");
    // A warm-up per turn and at least 10 timed runs each: exactly 10 for candidates whose 10
    // runs take EXHAUSTIVE_MIN_MS or more (b and c sleep 8 and 16 ms), up to the cap for an
    // instant one, which reaches the time floor only where a run costs 50 µs or more (as
    // under AddressSanitizer).
    use autodnn::select::benchmark::{
        EXHAUSTIVE_MAX_RUNS, EXHAUSTIVE_MIN_MS, EXHAUSTIVE_RUNS, EXHAUSTIVE_TURNS,
    };
    assert!(8.0 * EXHAUSTIVE_RUNS as f64 >= EXHAUSTIVE_MIN_MS);
    assert_eq!(b.runs() - runs_before.1, EXHAUSTIVE_TURNS + EXHAUSTIVE_RUNS);
    assert_eq!(c.runs() - runs_before.2, EXHAUSTIVE_TURNS + EXHAUSTIVE_RUNS);
    let a_runs = a.runs() - runs_before.0;
    assert!(
        (EXHAUSTIVE_TURNS + EXHAUSTIVE_RUNS..=EXHAUSTIVE_TURNS + EXHAUSTIVE_MAX_RUNS)
            .contains(&a_runs),
        "{a_runs} runs of the instant candidate"
    );
    let exhaustive = a.runs() + b.runs() + c.runs() - raced;
    assert!(
        raced * 2 < exhaustive,
        "race ran {raced}, exhaustive {exhaustive}"
    );
    // Exhaustive as a policy times every call and reports it.
    let (r, _) = run_auto(&h, &algos, &p, &d);
    assert_eq!((r.algo, r.source), ("a", Source::Exhaustive));
}

#[test]
fn a_limit_on_timed_candidates() {
    let h = modelled_handle(&[("first", 1.0), ("second", 2.0), ("third", 3.0)]);
    let a = Fake::new("first", 0, 0.0);
    let b = Fake::new("second", 0, 0.0);
    let c = Fake::new("third", 0, 0.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&c, &b, &a];
    h.set_max_timed(2);
    let p = problem(SMALL);
    let d = data(&p, 5);
    let rec = h
        .find_among::<ConvForward>(&algos, &p, &inputs(&d, EpilogueArgs::default()))
        .unwrap();
    let third = rec.iter().find(|r| r.algo == "third").unwrap();
    assert_eq!(third.status, PerfStatus::NotTimed);
    assert_eq!(c.runs(), 0);
    assert!(a.runs() > 0 && b.runs() > 0);
}

/// A candidate whose first run carries a one-time cost is timed again before the warm-up
/// eliminates it: the fastest algorithm still wins.
#[test]
fn a_slow_first_run_does_not_eliminate_the_fastest() {
    let h = handle_with(Policy::Benchmark, &[("slow_start", 1.0), ("steady", 1.0)]);
    let mut slow_start = Fake::new("slow_start", 0, 0.0);
    slow_start.first_delay = Duration::from_millis(80);
    let steady = Fake::new("steady", 0, 8.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&steady, &slow_start];
    let p = problem(SMALL);
    let d = data(&p, 9);
    let (r, y) = run_auto(&h, &algos, &p, &d);
    assert_eq!(r.algo, "slow_start", "{:?}", r);
    assert_right(&p, &y, &d, Accuracy::Exact, "slow start");
    assert!(slow_start.runs() >= 3, "{}", slow_start.runs());
}

#[test]
fn the_race_skips_candidates_predicted_far_behind() {
    let cutoff = autodnn::select::benchmark::RACE_PREDICTED_CUTOFF;
    let h = modelled_handle(&[
        ("near", 1.0),
        ("close", cutoff - 0.1),
        ("far", cutoff + 0.5),
    ]);
    let near = Fake::new("near", 0, 0.0);
    let close = Fake::new("close", 0, 0.0);
    let far = Fake::new("far", 0, 0.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&far, &close, &near];
    let p = problem(SMALL);
    let d = data(&p, 5);
    let rec = h
        .find_among::<ConvForward>(&algos, &p, &inputs(&d, EpilogueArgs::default()))
        .unwrap();
    let far_rec = rec.iter().find(|r| r.algo == "far").unwrap();
    assert_eq!(far_rec.status, PerfStatus::NotTimed);
    assert!(
        far_rec.note.as_deref().unwrap().contains("predicted"),
        "{far_rec:?}"
    );
    assert_eq!(far.runs(), 0);
    assert!(near.runs() > 0 && close.runs() > 0);
    // Exhaustive times everything whatever the predictions.
    let h = h;
    h.set_policy(Policy::Exhaustive);
    h.find_among::<ConvForward>(&algos, &p, &inputs(&d, EpilogueArgs::default()))
        .unwrap();
    assert!(far.runs() > 0);
}

#[test]
fn deterministic_option_excludes_nondeterministic_algorithms() {
    let h = modelled_handle(&[("racy", 1.0), ("steady", 2.0)]);
    let racy = Fake {
        deterministic: false,
        ..Fake::new("racy", 0, 0.0)
    };
    let steady = Fake::new("steady", 0, 1.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&racy, &steady];
    let p = problem(SMALL);
    let d = data(&p, 6);
    for policy in Policy::ALL {
        h.set_policy(policy);
        h.set_deterministic(false);
        h.set_tuning_cache(TuningCache::new());
        assert_eq!(run_auto(&h, &algos, &p, &d).0.algo, "racy", "{policy:?}");
        h.set_deterministic(true);
        let (r, y) = run_auto(&h, &algos, &p, &d);
        assert_eq!(r.algo, "steady", "{policy:?}");
        assert_right(&p, &y, &d, Accuracy::Exact, "deterministic");
        let ranked = h.get_among::<ConvForward>(&algos, &p).unwrap();
        assert!(!ranked.iter().find(|r| r.algo == "racy").unwrap().eligible);
    }
    // The registry's algorithms that claim determinism are the only ones left.
    let p = problem("mb1ic8ih12oc8kh3ph1");
    let ranked = h.get_conv_algorithms(&p).unwrap();
    assert!(ranked
        .iter()
        .filter(|r| r.eligible)
        .all(|r| r.deterministic));
    assert!(base().deterministic());
}

#[test]
fn workspace_budget_is_never_exceeded_and_an_ample_one_is_used() {
    let big = Fake::new("big_ws", 1 << 20, 0.0);
    let mid = Fake::new("mid_ws", 64 << 10, 2.0);
    // Delays far apart: a run slowed many times over (valgrind) keeps their order.
    let none = Fake::new("no_ws", 0, 20.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&none, &mid, &big];
    let p = problem(SMALL);
    let d = data(&p, 7);
    for policy in Policy::ALL {
        for (limit, want) in [
            (None, "big_ws"),
            (Some(1 << 20), "big_ws"),
            (Some((1 << 20) - 1), "mid_ws"),
            (Some(100_000), "mid_ws"),
            (Some(65535), "no_ws"),
            (Some(0), "no_ws"),
        ] {
            let h = modelled_handle(&[("big_ws", 0.5), ("mid_ws", 1.0), ("no_ws", 3.0)]);
            h.set_policy(policy);
            h.set_workspace_limit(limit);
            for f in [&big, &mid, &none] {
                f.max_ws_seen.store(0, Ordering::SeqCst);
            }
            let (r, y) = run_auto(&h, &algos, &p, &d);
            assert_eq!(r.algo, want, "{policy:?} limit {limit:?}");
            assert_right(&p, &y, &d, Accuracy::Exact, "budget");
            assert!(r.events.is_empty());
            if let Some(l) = limit {
                for f in [&big, &mid, &none] {
                    assert!(
                        f.max_ws() <= l,
                        "{} got {} bytes, limit {l}",
                        f.name,
                        f.max_ws()
                    );
                }
                assert!(r.workspace_bytes <= l);
                assert!(h.cached_workspace_bytes() <= l);
            }
            if limit == Some(0) {
                assert_eq!(r.workspace_bytes, 0);
            }
            // An explicit algorithm past the budget is refused, not run.
            if let Some(l) = limit.filter(|l| *l < (1 << 20)) {
                let _ = l;
                let e = auto_err(&h, &[&big], &p, &d.x, &d.w);
                assert!(matches!(e, Error::Declined { .. }), "{e}");
            }
        }
    }
}

/// Every layer of the built-in models, under a limit of 0: every choice needs no workspace; a
/// few small ones also run and are checked.
#[test]
fn a_zero_limit_chooses_zero_workspace_algorithms() {
    let h = handle();
    h.set_workspace_limit(Some(0));
    for policy in Policy::ALL {
        h.set_policy(policy);
        for model in autodnn::models::names() {
            for spec in autodnn::models::layers(model).unwrap() {
                let p = spec.with_mb(1).to_problem(Layout::Nchw).unwrap();
                let ranked = h.get_conv_algorithms(&p).unwrap();
                let first = ranked.iter().find(|r| r.eligible).unwrap();
                assert_eq!(first.workspace_bytes, 0, "{spec}");
                assert!(ranked
                    .iter()
                    .filter(|r| r.workspace_bytes > 0)
                    .all(|r| !r.eligible));
            }
        }
        for s in [SMALL, "mb2ic6ih11oc10kh5ph2sh2", "mb1g8ic8ih9oc8kh3ph1"] {
            let p = problem(s);
            let d = data(&p, 8);
            let (r, y) = run_public(&h, &p, &d, f32::NAN);
            assert_eq!(r.workspace_bytes, 0);
            let acc = conv::find(r.algo).unwrap().accuracy();
            assert_right(&p, &y, &d, acc, s);
        }
    }
}

/// For each algorithm in turn, forced first with its workspace reservation failing: the call
/// falls back, reports the event, and the output is right to the tolerance of the algorithm
/// that finally ran. Over the registry plus test algorithms, so that every registered
/// algorithm (zero-workspace ones included) is failed once.
#[test]
fn fallback_under_fault_injection_for_every_algorithm_in_turn() {
    let big = Fake::new("fake_big", 1 << 16, 0.0);
    let small = Fake::new("fake_small", 256, 0.0);
    let mut algos: Vec<&dyn ConvAlgorithm> = vec![&big, &small];
    algos.extend_from_slice(conv::algorithms());
    let mut rng = Rng(0xfa11);
    let mut problems: Vec<ConvProblem> = (0..6).map(|_| random_problem(&mut rng)).collect();
    problems.push(problem(SMALL));
    for (i, p) in problems.iter().enumerate() {
        let d = data(p, 100 + i as u64);
        for target in algos.iter().filter(|a| a.check(p).is_ok()) {
            for policy in [Policy::Heuristic, Policy::Benchmark] {
                let h = handle();
                h.set_policy(policy);
                // Fill the handle's cached workspace first.
                h.set_forced_algo(Some("fake_big"));
                run_auto(&h, &algos, p, &d);
                assert_eq!(h.cached_workspace_bytes(), 1 << 16);
                h.set_forced_algo(Some(target.name()));
                h.set_fail_alloc(FailAlloc::Algorithms(vec![target.name().into()]));
                let (r, y) = run_auto(&h, &algos, p, &d);
                assert_eq!(r.source, Source::Forced);
                assert_ne!(r.algo, target.name());
                assert_eq!(r.events[0].algo, target.name());
                assert!(matches!(r.events[0].error, Error::OutOfMemory { .. }));
                assert_eq!(r.events.last().unwrap().next, Some(r.algo));
                // Only algorithms needing less than what failed are tried after it.
                let ran = algos.iter().find(|a| a.name() == r.algo).unwrap();
                let (need, failed_need) = (ran.workspace_bytes(p), target.workspace_bytes(p));
                assert!(need == 0 || failed_need == 0 || need < failed_need);
                // The cached workspace was released; only what the last run used is cached.
                assert_eq!(h.cached_workspace_bytes(), need);
                assert_right(
                    p,
                    &y,
                    &d,
                    ran.accuracy(),
                    &format!("{} failed", target.name()),
                );
            }
        }
    }
    // `>BYTES` fails every reservation above the size: only small ones run.
    let p = problem(SMALL);
    let d = data(&p, 9);
    let h = handle_with(
        Policy::Heuristic,
        &[("fake_big", 1.0), ("fake_small", 2.0), ("*", 5.0)],
    );
    h.set_fail_alloc(FailAlloc::Above(1000));
    let (r, y) = run_auto(&h, &algos, &p, &d);
    assert_eq!(r.algo, "fake_small");
    assert_eq!(r.events.len(), 1);
    assert_eq!(
        (r.events[0].algo, r.events[0].next),
        ("fake_big", Some("fake_small"))
    );
    assert_right(&p, &y, &d, Accuracy::Exact, ">BYTES");
}

#[test]
fn a_caller_workspace_too_small_steps_down_the_chain() {
    let big = Fake::new("ws_big", 1 << 16, 0.0);
    let small = Fake::new("ws_small", 256, 0.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&big, &small, base()];
    let h = handle_with(
        Policy::Heuristic,
        &[("ws_big", 1.0), ("ws_small", 2.0), ("*", 3.0)],
    );
    let p = problem(SMALL);
    let d = data(&p, 22);
    let epi = EpilogueArgs::default();
    let plan = h
        .plan_among::<ConvForward>(&algos, &p, &inputs(&d, epi))
        .unwrap();
    assert_eq!(plan.chain(), ["ws_big", "ws_small", base().name()]);
    for (len, want, events) in [
        (1 << 16, "ws_big", 0),
        (300, "ws_small", 1),
        // After the first refusal, what cannot fit the slice is not even tried.
        (255, base().name(), 1),
        (0, base().name(), 1),
    ] {
        let mut ws = vec![0u8; len];
        let mut y = vec![f32::NAN; p.y().span()];
        let r = h
            .run_plan_among::<ConvForward>(
                &algos,
                &plan,
                &inputs(&d, epi),
                &mut TensorMut::F32(&mut y),
                Some(&mut ws),
            )
            .unwrap();
        assert_eq!((r.algo, r.events.len()), (want, events), "{len} bytes");
        assert!(r
            .events
            .iter()
            .all(|e| matches!(e.error, Error::WorkspaceTooSmall { .. })));
        assert_right(&p, &y, &d, Accuracy::Exact, "caller workspace");
        assert_eq!(
            h.cached_workspace_bytes(),
            0,
            "the handle's workspace is not used"
        );
    }
    assert_eq!(big.max_ws(), 1 << 16);
    assert_eq!(
        small.max_ws(),
        256,
        "exactly what it needs, not the whole slice"
    );
}

#[test]
fn algorithm_failures_fall_back_and_bad_input_does_not() {
    let broken = Fake {
        fail: Some(|| Error::Unsupported {
            what: "a kernel gave up".into(),
        }),
        ..Fake::new("broken", 0, 0.0)
    };
    let bad_param = Fake {
        fail: Some(|| Error::BadParam {
            field: "x".into(),
            value: "?".into(),
            reason: "test".into(),
        }),
        ..Fake::new("bad_param", 0, 0.0)
    };
    let fine = Fake::new("fine", 0, 0.0);
    let p = problem(SMALL);
    let d = data(&p, 10);
    let h = handle_with(
        Policy::Heuristic,
        &[("broken", 1.0), ("bad_param", 1.5), ("fine", 2.0)],
    );
    let algos: Vec<&dyn ConvAlgorithm> = vec![&broken, &fine];
    let (r, y) = run_auto(&h, &algos, &p, &d);
    assert_eq!(r.algo, "fine");
    assert_eq!(r.events.len(), 1);
    assert_eq!(r.events[0].algo, "broken");
    assert_eq!(r.events[0].error.kind(), ErrorKind::Unsupported);
    assert_right(&p, &y, &d, Accuracy::Exact, "after failure");
    // A BadInput error from an algorithm is returned at once, not retried.
    let algos: Vec<&dyn ConvAlgorithm> = vec![&bad_param, &fine];
    let before = fine.runs();
    let e = auto_err(&h, &algos, &p, &d.x, &d.w);
    assert_eq!(e.kind(), ErrorKind::BadInput);
    assert_eq!(fine.runs(), before);
    // So is the caller's bad input, before anything runs.
    let e = auto_err(&h, &algos, &p, &d.x[1..], &d.w);
    assert!(matches!(e, Error::BufferTooSmall { .. }));
    let mut y = vec![0.0; p.y().span()];
    let e = h
        .conv_forward_auto(
            &p,
            &d.x,
            Weights::Plain(&d.w),
            &mut y,
            &EpilogueArgs::new(f32::NAN, 0.0),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadInput);
    // Every algorithm failing: the last error, after trying them all.
    let algos: Vec<&dyn ConvAlgorithm> = vec![&broken];
    let e = auto_err(&h, &algos, &p, &d.x, &d.w);
    match e {
        Error::AllFailed { tried, last } => {
            assert_eq!(tried.len(), 1);
            assert!(tried[0].starts_with("broken: "), "{tried:?}");
            assert!(matches!(*last, Error::Unsupported { .. }));
        }
        e => panic!("{e}"),
    }
}

#[test]
fn beta_reads_the_prior_output_even_after_a_failed_attempt() {
    // A failing algorithm that scribbles on y before giving up.
    let scribbler = Fake {
        fail: Some(|| Error::Unsupported {
            what: "scribbled".into(),
        }),
        scribble: Some(1e6),
        ..Fake::new("scribbler", 0, 0.0)
    };
    let p = problem(SMALL);
    let d = data(&p, 11);
    let h = handle_with(Policy::Heuristic, &[("scribbler", 0.001)]);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&scribbler, base()];
    let prior = int_data(p.y().span(), 77);
    let mut y = prior.clone();
    let epi = EpilogueArgs::new(1.0, 2.0);
    let r = h
        .conv_forward_auto_among(&algos, &p, &d.x, Weights::Plain(&d.w), &mut y, &epi)
        .unwrap();
    assert_eq!(r.algo, base().name());
    assert_eq!(scribbler.runs(), 1, "the scribbler ran first");
    let want = reference::conv_forward_fused(&p, &d.x, &d.w, 1.0, 2.0, None, Some(&prior)).unwrap();
    assert_exact(&p, &y, &want, "beta after fallback");
}

#[test]
fn forced_algorithms() {
    let h = modelled_handle(&[("alpha", 1.0), ("beta_s1", 2.0)]);
    let a = Fake::new("alpha", 0, 0.0);
    let b = Fake {
        accept: accept_stride1,
        ..Fake::new("beta_s1", 0, 0.0)
    };
    let algos: Vec<&dyn ConvAlgorithm> = vec![&a, &b];
    let p = problem(SMALL);
    let d = data(&p, 12);
    h.set_forced_algo(Some("beta_s1"));
    let (r, _) = run_auto(&h, &algos, &p, &d);
    assert_eq!((r.algo, r.source), ("beta_s1", Source::Forced));
    // Where it declines, selection goes by policy.
    let q = problem("mb1ic4ih8oc4kh3ph1sh2");
    let dq = data(&q, 13);
    let (r, y) = run_auto(&h, &algos, &q, &dq);
    assert_eq!(r.algo, "alpha");
    assert_ne!(r.source, Source::Forced);
    assert_right(&q, &y, &dq, Accuracy::Exact, "forced declined");
    h.set_forced_algo(Some("nosuch"));
    let e = auto_err(&h, &algos, &p, &d.x, &d.w);
    assert!(matches!(e, Error::UnknownAlgorithm { .. }));
}

fn tuned_handle(path: &std::path::Path, problems: &[&str]) -> Handle {
    let h = handle();
    h.load_tuning_cache(path).unwrap();
    for s in problems {
        let p = problem(s);
        let d = data(&p, 14);
        run_public(&h, &p, &d, 0.0);
    }
    h
}

#[test]
fn cache_round_trip() {
    let path = temp_path("roundtrip");
    let problems = [SMALL, "mb1ic8ih10oc16kh1", "mb1g4ic4ih9oc4kh3ph1sh2"];
    let h = tuned_handle(&path, &problems);
    assert_eq!(h.tuning_cache().len(), 3);
    assert_eq!(h.save_tuning_cache().unwrap(), path);
    let text = std::fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["format"], cache::CACHE_FORMAT);
    assert_eq!(json["version"], cache::CACHE_FORMAT_VERSION);
    assert_eq!(json["entries"].as_array().unwrap().len(), 3);
    let e = &json["entries"][0];
    for field in ["op", "problem", "threads", "cpu", "isa", "version"] {
        assert!(!e["key"][field].is_null(), "key.{field}");
    }
    for field in ["algo", "status", "ms", "workspace_bytes", "deterministic"] {
        assert!(
            e["value"]["records"][0].get(field).is_some(),
            "record.{field}"
        );
    }
    let loaded = TuningCache::load(&path).unwrap();
    assert!(loaded.warnings().is_empty());
    let orig = h.tuning_cache();
    assert_eq!(loaded.len(), orig.len());
    for (k, v) in orig.entries() {
        assert_eq!(loaded.get(k), Some(v));
    }
    // A fresh handle on the file selects from the cache and times nothing.
    let h2 = handle();
    h2.load_tuning_cache(&path).unwrap();
    for s in problems {
        let p = problem(s);
        let d = data(&p, 15);
        let plan = h2
            .plan_conv(&p, &d.x, &d.w, &EpilogueArgs::default())
            .unwrap();
        assert_eq!(
            (plan.source, plan.cache_hit, plan.timed),
            (Source::Cache, true, 0)
        );
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn bad_cache_files_are_set_aside_with_a_warning() {
    let good = {
        let path = temp_path("good");
        let h = tuned_handle(&path, &[SMALL]);
        h.save_tuning_cache().unwrap();
        std::fs::read_to_string(&path).unwrap()
    };
    let other_version = good.replacen(
        &format!("\"version\": {}", cache::CACHE_FORMAT_VERSION),
        "\"version\": 999",
        1,
    );
    assert_ne!(other_version, good);
    let cases = [
        ("corrupt", "{ this is not json ]".to_string()),
        ("truncated", good[..good.len() / 2].to_string()),
        ("other-version", other_version),
        ("empty", String::new()),
        ("wrong-shape", "[1, 2, 3]".to_string()),
    ];
    for (tag, content) in cases {
        let path = temp_path(tag);
        std::fs::write(&path, &content).unwrap();
        // A reader refuses it, naming the file, and leaves it.
        let h = handle();
        let e = h.load_tuning_cache_read_only(&path).unwrap_err();
        assert!(
            matches!(&e, Error::BadParam { field, value, .. }
                if field == "cache.file" && *value == path.display().to_string()),
            "{tag}: {e}"
        );
        // A writer's load reads it as empty with a warning, and leaves it too.
        h.load_tuning_cache(&path).unwrap();
        let cache = h.tuning_cache();
        assert_eq!(cache.warnings().len(), 1, "{tag}");
        assert!(
            cache.warnings()[0].contains("until the cache is saved"),
            "{tag}: {:?}",
            cache.warnings()
        );
        let bak = cache::backup_path(&path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content, "{tag}");
        assert!(!bak.exists(), "{tag}");
        // A working run; saving sets the file aside and rebuilds it.
        let p = problem(SMALL);
        let d = data(&p, 16);
        let (r, y) = run_public(&h, &p, &d, 0.0);
        // To the tolerance of the algorithm the race chose (under AddressSanitizer's
        // timings it may be an inexact one).
        assert_right(&p, &y, &d, conv::find(r.algo).unwrap().accuracy(), tag);
        h.save_tuning_cache().unwrap();
        assert_eq!(std::fs::read_to_string(&bak).unwrap(), content, "{tag}");
        let warnings = h.tuning_cache().warnings().to_vec();
        assert!(
            warnings.last().is_some_and(|w| w.contains("set aside as")),
            "{tag}: {warnings:?}"
        );
        let again = TuningCache::load(&path).unwrap();
        assert!(again.warnings().is_empty(), "{tag}");
        assert_eq!(again.len(), 1, "{tag}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
    // An entry with an impossible problem is dropped, the rest kept.
    let path = temp_path("badentry");
    let mut json: serde_json::Value = serde_json::from_str(&good).unwrap();
    let mut bad_entry = json["entries"][0].clone();
    bad_entry["key"]["problem"]["x"]["span"] = serde_json::json!(1);
    json["entries"].as_array_mut().unwrap().push(bad_entry);
    std::fs::write(&path, json.to_string()).unwrap();
    let c = TuningCache::load(&path).unwrap();
    assert_eq!(c.len(), 1);
    assert_eq!(c.warnings().len(), 1);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn entries_of_other_machines_threads_and_versions_are_kept_but_not_used() {
    let path = temp_path("others");
    let h = tuned_handle(&path, &[SMALL]);
    let mine = h.tuning_cache();
    let (key, entry) = mine.entries()[0];
    let mut cache = mine.clone();
    let mut foreign = Vec::new();
    for change in 0..3 {
        let mut k = key.clone();
        match change {
            0 => k.cpu = "Some Other CPU".into(),
            1 => k.threads += 7,
            _ => k.version = "0.0.0-other".into(),
        }
        let mut e = entry.clone();
        e.records[0].algo = "from_elsewhere".into();
        cache.insert(k.clone(), e);
        foreign.push(k);
    }
    h.set_tuning_cache(cache);
    h.save_tuning_cache().unwrap();
    let h2 = handle();
    h2.load_tuning_cache(&path).unwrap();
    let loaded = h2.tuning_cache();
    assert_eq!(loaded.len(), 4);
    for k in &foreign {
        assert_eq!(loaded.get(k).unwrap().records[0].algo, "from_elsewhere");
        assert!(!(k.is_this_machine() && k.threads == 1));
    }
    let p = problem(SMALL);
    let d = data(&p, 17);
    let plan = h2
        .plan_conv(&p, &d.x, &d.w, &EpilogueArgs::default())
        .unwrap();
    assert_eq!(plan.source, Source::Cache);
    assert_ne!(plan.algo(), "from_elsewhere");
    // Saving again keeps them.
    h2.save_tuning_cache().unwrap();
    assert_eq!(TuningCache::load(&path).unwrap().len(), 4);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn concurrent_writers_keep_every_entry() {
    let path = temp_path("concurrent");
    let sizes: Vec<usize> = (5..21).collect();
    std::thread::scope(|s| {
        for part in 0..4 {
            let path = path.clone();
            let sizes = sizes.clone();
            s.spawn(move || {
                // Each writer has its own handle (its own in-memory cache), as a process would.
                let h = handle();
                h.load_tuning_cache(&path).unwrap();
                for ih in sizes.iter().skip(part).step_by(4) {
                    let p = problem(&format!("mb1ic2ih{ih}oc2kh1"));
                    let d = data(&p, 18);
                    run_public(&h, &p, &d, 0.0);
                    h.save_tuning_cache().unwrap();
                }
            });
        }
    });
    let c = TuningCache::load(&path).unwrap();
    assert!(c.warnings().is_empty());
    assert_eq!(c.len(), sizes.len());
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn noise_guard_keeps_a_choice_unless_clearly_beaten() {
    let rec = |algo: &str, ms: f64| autodnn::select::AlgoPerf {
        algo: algo.into(),
        status: PerfStatus::Ok,
        ms: Some(ms),
        workspace_bytes: 0,
        deterministic: true,
        note: None,
        prepare_ms: None,
        prepared_bytes: None,
    };
    let entry = |r: Vec<autodnn::select::AlgoPerf>| CacheEntry {
        source: Source::Benchmark,
        records: r,
        tuning_ms: 1.0,
    };
    let old = entry(vec![rec("a", 1.0), rec("b", 1.2)]);
    // b now measures 2% faster than a: noise, a stays first.
    let kept = cache::noise_guard(&old, entry(vec![rec("b", 0.98), rec("a", 1.0)]));
    assert_eq!(kept.records[0].algo, "a");
    assert_eq!(kept.records.len(), 2);
    // 10% faster: replaced.
    let replaced = cache::noise_guard(&old, entry(vec![rec("b", 0.9), rec("a", 1.0)]));
    assert_eq!(replaced.records[0].algo, "b");
    // Through the cache.
    let p = problem(SMALL);
    let key = CacheKey::new(&p, 1, autodnn::cpu::Isa::Scalar);
    let mut c = TuningCache::new();
    c.insert(key.clone(), old.clone());
    c.insert(key.clone(), entry(vec![rec("b", 0.97), rec("a", 1.0)]));
    assert_eq!(c.get(&key).unwrap().records[0].algo, "a");
}

#[test]
fn a_new_algorithm_makes_a_cached_entry_stale() {
    let h = handle_with(Policy::Benchmark, &[("old_one", 1.0), ("new_one", 1.0)]);
    let a = Fake::new("old_one", 0, 1.0);
    let b = Fake::new("new_one", 0, 0.0);
    let p = problem(SMALL);
    let d = data(&p, 19);
    let (r, _) = run_auto(&h, &[&a], &p, &d);
    assert_eq!(r.algo, "old_one");
    let (r, _) = run_auto(&h, &[&a], &p, &d);
    assert_eq!(r.source, Source::Cache);
    let (r, _) = run_auto(&h, &[&a, &b], &p, &d);
    assert_eq!((r.algo, r.source), ("new_one", Source::Benchmark));
}

#[test]
fn a_failure_while_tuning_is_not_remembered() {
    let h = modelled_handle(&[("usually_fast", 1.0), ("always_there", 2.0)]);
    let a = Fake::new("usually_fast", 1024, 0.0);
    let b = Fake::new("always_there", 0, 3.0);
    let p = problem(SMALL);
    let d = data(&p, 21);
    h.set_fail_alloc(FailAlloc::Algorithms(vec!["usually_fast".into()]));
    let (r, _) = run_auto(&h, &[&a, &b], &p, &d);
    assert_eq!((r.algo, r.source), ("always_there", Source::Benchmark));
    let cached = h.tuning_cache();
    let rec = &cached.entries()[0].1.records;
    assert_eq!(rec.last().unwrap().status, PerfStatus::Failed);
    assert!(rec
        .last()
        .unwrap()
        .note
        .as_ref()
        .unwrap()
        .contains("injected"));
    // Memory is back: the failed measurement does not stand, the ranking is measured again.
    h.set_fail_alloc(FailAlloc::Never);
    let (r, _) = run_auto(&h, &[&a, &b], &p, &d);
    assert_eq!((r.algo, r.source), ("usually_fast", Source::Benchmark));
    let (r, _) = run_auto(&h, &[&a, &b], &p, &d);
    assert_eq!((r.algo, r.source), ("usually_fast", Source::Cache));
}

#[test]
fn the_registry_through_the_public_calls() {
    let h = handle();
    let mut rng = Rng(0xfeed);
    for policy in Policy::ALL {
        h.set_policy(policy);
        for case in 0..8 {
            let p = random_problem(&mut rng);
            let d = data(&p, 200 + case);
            let accepting: BTreeSet<&str> = conv::algorithms()
                .iter()
                .filter(|a| a.check(&p).is_ok())
                .map(|a| a.name())
                .collect();
            let found = h
                .find_conv_algorithms(&p, &d.x, &d.w, &EpilogueArgs::default())
                .unwrap();
            let names: BTreeSet<&str> = found.iter().map(|r| r.algo.as_str()).collect();
            assert_eq!(names, accepting);
            assert_eq!(found[0].status, PerfStatus::Ok);
            let (r, y) = run_auto(&h, conv::algorithms(), &p, &d);
            assert!(accepting.contains(r.algo));
            assert_right(&p, &y, &d, conv::find(r.algo).unwrap().accuracy(), "public");
            // Weights prepared for the registry's last algorithm (plain: it has nothing to
            // prepare) select as usual; transformed ones pin their algorithm.
            let pw = h.prepare_weights(&p, base().name(), &d.w).unwrap();
            let mut y = vec![f32::NAN; p.y().span()];
            let r = h
                .conv_forward_auto(
                    &p,
                    &d.x,
                    Weights::Prepared(&pw),
                    &mut y,
                    &EpilogueArgs::default(),
                )
                .unwrap();
            let source = if pw.is_transformed() {
                Source::Prepared
            } else {
                r.source
            };
            assert_eq!(r.source, source);
            assert_right(
                &p,
                &y,
                &d,
                conv::find(r.algo).unwrap().accuracy(),
                "prepared",
            );
        }
    }
}

#[test]
fn dispatch_log_and_describe() {
    let p = problem(SMALL);
    let s = autodnn::select::describe(&p);
    assert!(s.starts_with("mb1") && s.contains("nchw"), "{s}");
    let h = handle();
    h.set_log_dispatch(true);
    assert!(h.log_dispatch());
    let d = data(&p, 20);
    let (r, y) = run_auto(&h, conv::algorithms(), &p, &d);
    assert_right(&p, &y, &d, conv::find(r.algo).unwrap().accuracy(), "logged");
}

#[test]
fn calibration_problems_share_no_layer_with_the_models() {
    let cal = autodnn::calibrate::calibration_problems();
    assert!(cal.len() >= 20);
    let key = |s: &ProblemSpec| s.with_name("").with_mb(1);
    let cal_keys: BTreeSet<String> = cal.iter().map(|s| key(s).to_string()).collect();
    assert_eq!(cal_keys.len(), cal.len(), "distinct");
    for model in autodnn::models::names() {
        for l in autodnn::models::layers(model).unwrap() {
            assert!(!cal_keys.contains(&key(&l).to_string()), "{model}: {l}");
        }
    }
    let kernels: BTreeSet<usize> = cal.iter().map(|s| s.kh).collect();
    assert!([1, 3, 5, 7].iter().all(|k| kernels.contains(k)));
    assert!(cal.iter().any(|s| s.sh == 2) && cal.iter().any(|s| s.g == s.ic && s.g > 1));
}

/// A test algorithm whose plain calls are slow (a delay standing for the filter transform
/// every call repeats) and whose prepared calls are fast: its `prepare` returns a copy of the
/// filter, which its runs take as the prepared form.
struct Prep {
    name: &'static str,
    plain_delay: Duration,
    prepared_runs: AtomicUsize,
}

impl ConvAlgorithm for Prep {
    fn name(&self) -> &'static str {
        self.name
    }
    fn check(&self, _: &ConvProblem) -> Result<(), String> {
        Ok(())
    }
    fn workspace_bytes(&self, _: &ConvProblem) -> usize {
        0
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn prepare(
        &self,
        _: &ExecContext<'_>,
        _: &ConvProblem,
        w: &[f32],
    ) -> autodnn::Result<Option<Vec<f32>>> {
        Ok(Some(w.to_vec()))
    }
    fn run(
        &self,
        ctx: &ExecContext<'_>,
        p: &ConvProblem,
        x: &[f32],
        w: AlgoWeights<'_>,
        y: &mut [f32],
        _: &mut [u8],
        epi: &EpilogueArgs<'_>,
    ) -> autodnn::Result<()> {
        let w = match w {
            AlgoWeights::Prepared(w) => {
                self.prepared_runs.fetch_add(1, Ordering::SeqCst);
                w
            }
            AlgoWeights::Plain(w) => {
                std::thread::sleep(self.plain_delay);
                w
            }
        };
        base().run(ctx, p, x, AlgoWeights::Plain(w), y, &mut [], epi)
    }
}

/// With the prepared-weights intent, the race and exhaustive timing time every candidate on
/// its own prepared weights (made outside the timing and reported), so the algorithm whose
/// plain calls are slow but prepared calls fast wins; plain selection keeps the other. The
/// two rankings live under different cache keys, and each is reused by its own intent.
#[test]
fn prepared_selection_times_calls_with_prepared_weights() {
    let prep = Prep {
        name: "prep",
        plain_delay: Duration::from_millis(20),
        prepared_runs: AtomicUsize::new(0),
    };
    let steady = Fake::new("steady", 0, 4.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&steady, &prep];
    let p = problem(SMALL);
    let d = data(&p, 9);
    let filter_bytes = p.w().elements() * 4;
    for policy in [Policy::Benchmark, Policy::Exhaustive] {
        let h = handle_with(policy, &[("prep", 1.0), ("steady", 1.0)]);
        h.set_tuning_cache(TuningCache::new());
        let (r, y) = run_auto(&h, &algos, &p, &d);
        assert_eq!(r.algo, "steady", "{policy:?} plain");
        assert_right(&p, &y, &d, Accuracy::Exact, "plain intent");
        assert!(!h.prepared_selection());
        h.set_prepared_selection(true);
        let before = prep.prepared_runs.load(Ordering::SeqCst);
        let (r, y) = run_auto(&h, &algos, &p, &d);
        assert_eq!(r.algo, "prep", "{policy:?} prepared");
        assert!(
            matches!(r.source, Source::Benchmark | Source::Exhaustive),
            "{policy:?}"
        );
        assert_right(&p, &y, &d, Accuracy::Exact, "prepared intent, plain call");
        assert!(prep.prepared_runs.load(Ordering::SeqCst) > before);
        // The records carry each candidate's preparation.
        let inputs = ConvFwdInputs::new(&d.x, Weights::Plain(&d.w), EpilogueArgs::default());
        let records = h.find_among::<ConvForward>(&algos, &p, &inputs).unwrap();
        for rec in &records {
            assert!(rec.prepare_ms.is_some_and(|ms| ms >= 0.0), "{rec:?}");
            assert_eq!(rec.prepared_bytes, Some(filter_bytes), "{rec:?}");
        }
        assert_eq!(records[0].algo, "prep");
        if policy == Policy::Benchmark {
            // Both intents cached apart; each call finds its own.
            let c = h.tuning_cache();
            let flags: BTreeSet<bool> = c.entries().into_iter().map(|(k, _)| k.prepared).collect();
            assert_eq!(flags, BTreeSet::from([false, true]));
            let (r, _) = run_auto(&h, &algos, &p, &d);
            assert_eq!((r.algo, r.source), ("prep", Source::Cache));
            h.set_prepared_selection(false);
            let (r, _) = run_auto(&h, &algos, &p, &d);
            assert_eq!((r.algo, r.source), ("steady", Source::Cache));
        }
    }
}

/// The heuristic for prepared calls leaves out what the preparation takes out of a call:
/// feature 8 (the filter's MB, which a plain call packs or transforms).
#[test]
fn prepared_selection_predicts_without_the_filter_transform() {
    let prep = Prep {
        name: "prep",
        plain_delay: Duration::ZERO,
        prepared_runs: AtomicUsize::new(0),
    };
    let steady = Fake::new("steady", 0, 0.0);
    let algos: Vec<&dyn ConvAlgorithm> = vec![&steady, &prep];
    let p = problem(SMALL);
    let h = handle_with(Policy::Heuristic, &[("steady", 1.0)]);
    let m = h.machine();
    let fit = |coef: Vec<f64>| AlgoFit {
        coef,
        samples: 1,
        median_rel_err: 0.0,
        max_rel_err: 0.0,
    };
    // prep: 0.1 ms plus 10 ms per KB of filter (5.86 ms on this problem's 576 bytes).
    let mut prep_coef = vec![0.0; autodnn::op::COST_FEATURES];
    prep_coef[0] = 0.1;
    prep_coef[8] = 1e4;
    let model = CostModel::new(vec![Fit {
        cpu: m.cpu,
        isa: m.isa,
        threads: m.threads,
        library_version: autodnn::VERSION.into(),
        algorithms: [
            ("steady".to_string(), fit(vec![1.0])),
            ("prep".to_string(), fit(prep_coef)),
        ]
        .into_iter()
        .collect(),
    }]);
    h.set_cost_model(model);
    let ranked = h.get_among::<ConvForward>(&algos, &p).unwrap();
    assert_eq!(ranked[0].algo, "steady", "{ranked:?}");
    let plain_prep = ranked
        .iter()
        .find(|r| r.algo == "prep")
        .unwrap()
        .predicted_ms;
    assert!((plain_prep - 5.86).abs() < 0.05, "{ranked:?}");
    h.set_prepared_selection(true);
    let ranked = h.get_among::<ConvForward>(&algos, &p).unwrap();
    assert_eq!(ranked[0].algo, "prep", "{ranked:?}");
    assert!((ranked[0].predicted_ms - 0.1).abs() < 1e-9, "{ranked:?}");
}
